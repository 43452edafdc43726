//! The hourly cost estimate shown by `plan`: a dated price table shipped in the crate, with the
//! scenario's `[prices]` on top.
//!
//! Not a billing calculator: it prices what exists per hour (instances, public addresses, root
//! volumes, Transit Gateway attachments, accelerators) and lists the per-GB charges as notes,
//! because traffic volume depends on the tests run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::scenario::PriceOverrides;

/// The shipped table (`deploy/data/prices.toml`).
const SHIPPED: &str = include_str!("../data/prices.toml");

/// The region whose instance prices stand in when a region has none listed.
const FALLBACK_REGION: &str = "us-east-1";

/// Prices in USD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    /// When the prices were read off AWS's pages (YYYY-MM-DD).
    pub date: String,
    /// Per public IPv4 address-hour.
    pub public_ipv4_hourly: f64,
    /// Per Transit Gateway attachment-hour.
    pub tgw_attachment_hourly: f64,
    /// Per accelerator-hour.
    pub accelerator_hourly: f64,
    /// Per root volume-hour.
    pub root_volume_hourly: f64,
    /// Per-GB charges by name, for notes.
    pub per_gb: BTreeMap<String, f64>,
    /// Region → instance type → hourly price.
    pub instance_hourly: BTreeMap<String, BTreeMap<String, f64>>,
    /// Source region → per-GB price of data out to another region, where it differs from
    /// `per_gb.inter_region_transfer`.
    #[serde(default)]
    pub inter_region_from: BTreeMap<String, f64>,
    /// Instance type → [baseline, burst] network bandwidth, Gbit/s.
    #[serde(default)]
    pub bandwidth_gbps: BTreeMap<String, [f64; 2]>,
}

impl PriceTable {
    /// A per-GB price by name (`per_gb` in the table); 0 when the table lacks it.
    pub fn per_gb(&self, name: &str) -> f64 {
        self.per_gb.get(name).copied().unwrap_or(0.0)
    }

    /// Per GB out of `region` to another region.
    pub fn inter_region_from(&self, region: &str) -> f64 {
        self.inter_region_from
            .get(region)
            .copied()
            .unwrap_or_else(|| self.per_gb("inter_region_transfer"))
    }
}

impl PriceTable {
    /// The table shipped with this build.
    pub fn shipped() -> Self {
        // The file is part of the crate and checked by this module's tests, so a parse failure
        // is a build defect, not a runtime condition.
        #[allow(clippy::expect_used)]
        toml::from_str(SHIPPED).expect("deploy/data/prices.toml is valid (see cost tests)")
    }

    /// This table with a scenario's overrides applied.
    pub fn with_overrides(mut self, o: &PriceOverrides) -> Self {
        for (ty, price) in &o.instance_hourly {
            for region in self.instance_hourly.values_mut() {
                region.insert(ty.clone(), *price);
            }
            self.instance_hourly
                .entry(FALLBACK_REGION.to_owned())
                .or_default()
                .insert(ty.clone(), *price);
        }
        if let Some(p) = o.tgw_attachment_hourly {
            self.tgw_attachment_hourly = p;
        }
        if let Some(p) = o.accelerator_hourly {
            self.accelerator_hourly = p;
        }
        if let Some(p) = o.public_ipv4_hourly {
            self.public_ipv4_hourly = p;
        }
        self
    }
}

/// Something that costs money per hour.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Billable {
    /// An instance of this type.
    Instance(String),
    /// A public IPv4 address.
    PublicIpv4,
    /// A host's root volume.
    RootVolume,
    /// A Transit Gateway attachment (VPC or peering side).
    TgwAttachment,
    /// A Global Accelerator.
    Accelerator,
}

/// One line of the estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostLine {
    /// Region the charge is in ("global" for accelerators).
    pub region: String,
    /// What it is.
    pub item: String,
    /// How many.
    pub quantity: u32,
    /// Price of one per hour; `None` when the table has no price.
    pub unit_hourly: Option<f64>,
    /// A caveat, such as a fallback price.
    pub note: Option<String>,
}

/// The estimate for a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostEstimate {
    /// Date of the price table.
    pub table_date: String,
    /// Lines, grouped by region.
    pub lines: Vec<CostLine>,
    /// Sum of priced lines per hour.
    pub total_hourly: f64,
    /// Whether some line had no price (the total is then a lower bound).
    pub incomplete: bool,
    /// Per-GB charges not in the total.
    pub per_gb_notes: Vec<String>,
}

/// Prices `items` (region, what) with `table`.
pub fn estimate(items: &[(String, Billable)], table: &PriceTable) -> CostEstimate {
    let mut counts: BTreeMap<(String, Billable), u32> = BTreeMap::new();
    for (region, b) in items {
        *counts.entry((region.clone(), b.clone())).or_default() += 1;
    }
    let mut lines = Vec::new();
    for ((region, b), quantity) in counts {
        let (item, unit_hourly, note) = match &b {
            Billable::Instance(ty) => {
                let here = table.instance_hourly.get(&region).and_then(|m| m.get(ty));
                let fallback = table
                    .instance_hourly
                    .get(FALLBACK_REGION)
                    .and_then(|m| m.get(ty));
                match (here, fallback) {
                    (Some(p), _) => (format!("{ty} instance"), Some(*p), None),
                    (None, Some(p)) => (
                        format!("{ty} instance"),
                        Some(*p),
                        Some(format!("{FALLBACK_REGION} price; none listed for {region}")),
                    ),
                    (None, None) => (
                        format!("{ty} instance"),
                        None,
                        Some("no price listed: add it under [prices.instance_hourly]".into()),
                    ),
                }
            }
            Billable::PublicIpv4 => (
                "public IPv4 address".into(),
                Some(table.public_ipv4_hourly),
                None,
            ),
            Billable::RootVolume => (
                "8 GiB gp3 root volume".into(),
                Some(table.root_volume_hourly),
                None,
            ),
            Billable::TgwAttachment => (
                "Transit Gateway attachment".into(),
                Some(table.tgw_attachment_hourly),
                None,
            ),
            Billable::Accelerator => (
                "Global Accelerator".into(),
                Some(table.accelerator_hourly),
                None,
            ),
        };
        lines.push(CostLine {
            region,
            item,
            quantity,
            unit_hourly,
            note,
        });
    }
    let total_hourly = lines
        .iter()
        .filter_map(|l| l.unit_hourly.map(|u| u * f64::from(l.quantity)))
        .sum();
    let incomplete = lines.iter().any(|l| l.unit_hourly.is_none());
    let per_gb_notes = table
        .per_gb
        .iter()
        .map(|(k, v)| format!("{}: ${v}/GB", k.replace('_', " ")))
        .collect();
    CostEstimate {
        table_date: table.date.clone(),
        lines,
        total_hourly,
        incomplete,
        per_gb_notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_table_parses_and_is_dated() {
        let t = PriceTable::shipped();
        assert_eq!(t.date.len(), 10);
        assert!(t.instance_hourly[FALLBACK_REGION].contains_key("m5.large"));
    }

    #[test]
    fn overrides_and_fallbacks() {
        let mut o = PriceOverrides::default();
        o.instance_hourly.insert("m5.large".into(), 1.0);
        let t = PriceTable::shipped().with_overrides(&o);
        let e = estimate(
            &[
                (
                    "ap-southeast-2".into(),
                    Billable::Instance("m5.large".into()),
                ),
                ("sa-east-1".into(), Billable::Instance("m7i.large".into())),
                ("sa-east-1".into(), Billable::Instance("z9.huge".into())),
            ],
            &t,
        );
        assert!(e.incomplete);
        assert!(e.lines.iter().any(|l| l.unit_hourly == Some(1.0)));
        assert!(e.lines.iter().any(|l| {
            l.note
                .as_deref()
                .is_some_and(|n| n.contains("us-east-1 price"))
        }));
    }
}
