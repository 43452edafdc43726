//! What one `run` of the suite costs in data: how much each path moves (each throughput cell's
//! time, omit included, × repeats × the rate its instances can send: their baseline bandwidth,
//! and the burst as an upper bound), and what AWS charges per GB for it by kind — transfer
//! between regions, Transit Gateway data processing, Global Accelerator's premium, internet
//! egress, public addresses within a region — with each unit price beside its total. Only
//! charges the scenario's paths incur are listed.
//!
//! An estimate from a dated table (`data/prices.toml`), not a bill: the rates are what the
//! instance types allow, not what the paths will give. Not for hourly charges ([`crate::cost`]).

use std::collections::BTreeMap;

use serde::Serialize;
use xbench::config::{Direction, EndCondition, TestSpec, Workload};

use crate::cost::PriceTable;
use crate::plan::{PathClient, PathPlan, Plan};
use crate::scenario::{End, PathKind, PathSpec, Scenario, VpcSpec};
use crate::suite::Suite;

/// The bandwidth assumed for a type the table does not list, Gbit/s.
pub const UNKNOWN_TYPE_GBPS: f64 = 1.0;

/// One instance type's network bandwidth, Gbit/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bandwidth {
    /// Sustained.
    pub baseline: f64,
    /// While network I/O credits last ("up to" types); equal to `baseline` otherwise.
    pub burst: f64,
    /// Where the figures come from: `table`, `aws` (DescribeInstanceTypes) or `assumed`.
    pub source: &'static str,
}

impl Bandwidth {
    /// Whether the type's bandwidth is "up to" (a burst above its baseline).
    pub fn bursts(&self) -> bool {
        self.burst > self.baseline * 1.01
    }
}

/// One per-GB charge of one path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataLine {
    /// The path.
    pub path: String,
    /// What is charged (`inter-region from us-east-1`).
    pub what: String,
    /// GB at the baseline rate.
    pub gb: f64,
    /// USD per GB.
    pub per_gb: f64,
}

impl DataLine {
    /// USD at the baseline rate.
    pub fn total(&self) -> f64 {
        self.gb * self.per_gb
    }
}

/// What one path moves in one `run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathData {
    /// Label.
    pub path: String,
    /// GB client → server at the baseline rate.
    pub client_to_server_gb: f64,
    /// GB server → client at the baseline rate.
    pub server_to_client_gb: f64,
    /// The rate assumed, Gbit/s (baseline), and at burst.
    pub rate_gbps: (f64, f64),
    /// Seconds of throughput tests on the path.
    pub seconds: f64,
    /// How the rate was chosen.
    pub basis: String,
}

/// The data estimate of one `run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataEstimate {
    /// Per path.
    pub paths: Vec<PathData>,
    /// Charges.
    pub lines: Vec<DataLine>,
    /// Sum at the baseline rates, USD.
    pub total: f64,
    /// Sum if every path ran at its burst rate throughout, USD.
    pub total_at_burst: f64,
    /// Caveats (free paths, request/response cells, assumed bandwidths).
    pub notes: Vec<String>,
}

/// The bandwidth of `ty`: AWS's figures when given, else the table's, else assumed.
pub fn bandwidth(ty: &str, table: &PriceTable, aws: &BTreeMap<String, Bandwidth>) -> Bandwidth {
    if let Some(b) = aws.get(ty) {
        return *b;
    }
    match table.bandwidth_gbps.get(ty) {
        Some([baseline, burst]) => Bandwidth {
            baseline: *baseline,
            burst: *burst,
            source: "table",
        },
        None => Bandwidth {
            baseline: UNKNOWN_TYPE_GBPS,
            burst: UNKNOWN_TYPE_GBPS,
            source: "assumed",
        },
    }
}

/// The data `suite` moves on `plan`'s paths and what it costs, with `aws` bandwidths (from
/// `plan --check`) over the table's.
pub fn estimate(
    plan: &Plan,
    scenario: &Scenario,
    suite: &Suite,
    table: &PriceTable,
    aws: &BTreeMap<String, Bandwidth>,
) -> DataEstimate {
    let mut out = DataEstimate {
        paths: Vec::new(),
        lines: Vec::new(),
        total: 0.0,
        total_at_burst: 0.0,
        notes: Vec::new(),
    };
    let cells = suite.cells();
    let repeat = f64::from(suite.repeat.get());
    if cells
        .iter()
        .any(|c| matches!(c.workload, Workload::RequestResponse(_)))
    {
        out.notes.push(
            "request/response cells move little data (bytes per transaction x transactions): not counted"
                .into(),
        );
    }
    let mut assumed = Vec::new();
    let mut yours = Vec::new();
    for p in &plan.paths {
        let Some(spec) = scenario.paths.iter().find(|s| s.label == p.label) else {
            continue;
        };
        let regions = (
            region_of(scenario, &spec.client),
            region_of(scenario, &spec.server),
        );
        let (base, burst, basis) = path_rate(scenario, spec, table, aws, &mut assumed);
        let (cs, sc, seconds) = volumes(&cells, repeat, base);
        let data = PathData {
            path: p.label.clone(),
            client_to_server_gb: cs,
            server_to_client_gb: sc,
            rate_gbps: (base, burst),
            seconds,
            basis,
        };
        if regions.0.is_none() || regions.1.is_none() {
            yours.push(p.label.clone());
        }
        price_path(&mut out, p, spec, regions, &data, table);
        out.paths.push(data);
    }
    if !yours.is_empty() {
        out.notes.push(format!(
            "{}: one end is your host, whose own link is not known here and may be slower than the AWS end's rate used above; data into AWS is free",
            yours.join(", ")
        ));
    }
    if !assumed.is_empty() {
        out.notes.push(format!(
            "no bandwidth listed for {}: {UNKNOWN_TYPE_GBPS} Gbit/s assumed (`plan --check` asks AWS)",
            assumed.join(", ")
        ));
    }
    out
}

/// The VPC at `end`, if it is one of the scenario's (not your host's address).
fn vpc_of<'a>(scenario: &'a Scenario, end: &End) -> Option<&'a VpcSpec> {
    match end {
        End::Vpc(v) => scenario.vpc(v),
        End::Address(_) => None,
    }
}

/// The region of `end`'s VPC: apart, as the charges need it as well as the rate.
fn region_of(scenario: &Scenario, end: &End) -> Option<String> {
    vpc_of(scenario, end).map(|x| x.region.clone())
}

/// A path's rate, Gbit/s, at baseline and at burst, and what it rests on: the slower end's
/// bandwidth, the client's times its fleet. Types the table lacks are added to `assumed`.
/// Apart from [`estimate`] so the choice of rate reads on its own.
fn path_rate(
    scenario: &Scenario,
    spec: &PathSpec,
    table: &PriceTable,
    aws: &BTreeMap<String, Bandwidth>,
    assumed: &mut Vec<String>,
) -> (f64, f64, String) {
    let clients = f64::from(spec.clients.max(1));
    let mut bw = |end: &End, n: f64| {
        vpc_of(scenario, end).map(|x| {
            let t = scenario.instance_type_for(x).to_owned();
            let b = bandwidth(&t, table, aws);
            if b.source == "assumed" && !assumed.contains(&t) {
                assumed.push(t.clone());
            }
            (b.baseline * n, b.burst * n, t)
        })
    };
    let c = bw(&spec.client, clients);
    let s = bw(&spec.server, 1.0);
    // The slower end limits (your host's link is unknown: the AWS end's figure stands).
    let (base, burst, basis) = match (&c, &s) {
        (Some(c), Some(s)) if c.0 <= s.0 => (c.0, c.1.min(s.1), format!("{} client", c.2)),
        (Some(_), Some(s)) | (None, Some(s)) => (s.0, s.1, format!("{} server", s.2)),
        (Some(c), None) => (c.0, c.1, format!("{} client", c.2)),
        (None, None) => (0.0, 0.0, "no instance of this tool".into()),
    };
    let basis = if spec.clients > 1 {
        format!("{basis} x {} (fleet)", spec.clients)
    } else {
        basis
    };
    (base, burst, basis)
}

/// GB client → server and server → client, and seconds, that the throughput `cells` move
/// over `repeat` runs at `base` Gbit/s (or their pacing, when lower): the suite's side of the
/// estimate, apart from the path's.
fn volumes(cells: &[TestSpec], repeat: f64, base: f64) -> (f64, f64, f64) {
    let (mut cs, mut sc, mut secs) = (0.0, 0.0, 0.0);
    for cell in cells {
        let Workload::Throughput(t) = &cell.workload else {
            continue;
        };
        let seconds = match cell.end {
            EndCondition::Duration(d) => d.as_secs_f64() + cell.omit.as_secs_f64(),
            EndCondition::Bytes(_) => 0.0,
        };
        let streams = f64::from(t.streams.get());
        let paced = match &t.udp {
            Some(u) => u.bitrate.map(|b| b as f64 / 1e9),
            None => t.bitrate.map(|b| b as f64 * streams / 1e9),
        };
        let rate = paced.map_or(base, |p| p.min(base));
        let gb = match cell.end {
            EndCondition::Bytes(n) => n as f64 / 1e9,
            EndCondition::Duration(_) => rate * seconds / 8.0,
        } * repeat;
        secs += seconds * repeat;
        match t.direction {
            Direction::ClientToServer => cs += gb,
            Direction::ServerToClient => sc += gb,
            Direction::Bidir => {
                cs += gb;
                sc += gb;
            }
        }
    }
    (cs, sc, secs)
}

/// Adds the charges of path `p`'s `data` to `out` (lines, totals at baseline and burst), or a
/// note where a path within one region moves data at no charge. Apart from [`estimate`],
/// which gathers the figures this prices.
fn price_path(
    out: &mut DataEstimate,
    p: &PathPlan,
    spec: &PathSpec,
    (cr, sr): (Option<String>, Option<String>),
    data: &PathData,
    table: &PriceTable,
) {
    let (cs, sc) = (data.client_to_server_gb, data.server_to_client_gb);
    let (base, burst) = data.rate_gbps;
    let scale = if base > 0.0 { burst / base } else { 1.0 };
    let lines = charges(
        &p.label,
        spec.kind,
        spec.hybrid.is_some(),
        matches!(p.client, PathClient::Address(_)),
        spec.home.as_ref().is_some_and(|h| h.accelerator),
        (cr.as_deref(), sr.as_deref()),
        (cs, sc),
        table,
    );
    if lines.is_empty() && cs + sc > 0.0 && cr.is_some() && cr == sr {
        out.notes.push(format!(
            "{}: {} within one region moves {:.1} GB at no transfer charge (within an AZ; across AZs $0.01/GB each way)",
            p.label,
            spec.kind_label(),
            cs + sc
        ));
    }
    for l in lines {
        out.total += l.total();
        out.total_at_burst += l.total() * scale;
        out.lines.push(l);
    }
}

/// The per-GB charges of one path's data, by kind.
#[allow(clippy::too_many_arguments)]
fn charges(
    label: &str,
    kind: PathKind,
    via: bool,
    client_is_yours: bool,
    home_accelerator: bool,
    (cr, sr): (Option<&str>, Option<&str>),
    (cs, sc): (f64, f64),
    t: &PriceTable,
) -> Vec<DataLine> {
    // Long on purpose: one match over every path kind, each arm that kind's priced lines in
    // printed order; the arms share the line builder, the cross-region lines and both figures.
    let line = |what: String, gb: f64, per_gb: f64| DataLine {
        path: label.to_owned(),
        what,
        gb,
        per_gb,
    };
    let mut out = Vec::new();
    let cross = |out: &mut Vec<DataLine>| {
        if let (Some(c), Some(s)) = (cr, sr)
            && c != s
        {
            if cs > 0.0 {
                out.push(line(
                    format!("inter-region {c} -> {s}"),
                    cs,
                    t.inter_region_from(c),
                ));
            }
            if sc > 0.0 {
                out.push(line(
                    format!("inter-region {s} -> {c}"),
                    sc,
                    t.inter_region_from(s),
                ));
            }
        }
    };
    // Data an AWS host sends to your host (internet egress, or your Direct Connect's rate).
    let to_yours = if client_is_yours { sc } else { cs };
    let aws_region = if client_is_yours { sr } else { cr };
    match kind {
        PathKind::Peering => cross(&mut out),
        PathKind::Tgw => {
            out.push(line(
                "Transit Gateway data processing".into(),
                cs + sc,
                t.per_gb("tgw_data_processing"),
            ));
            cross(&mut out);
        }
        PathKind::Vpn | PathKind::Public | PathKind::Existing | PathKind::Accelerator
            if cr.is_some() && sr.is_some() =>
        {
            if kind == PathKind::Accelerator {
                for (gb, region) in [(cs, cr), (sc, sr)] {
                    if gb > 0.0 {
                        out.push(line(
                            format!("data out to the accelerator from {}", region.unwrap_or("?")),
                            gb,
                            t.per_gb("internet_egress_first_10tb"),
                        ));
                    }
                }
                out.push(line(
                    "Global Accelerator premium (dominant direction)".into(),
                    cs.max(sc),
                    t.per_gb("accelerator_premium"),
                ));
            } else if cr == sr {
                out.push(line(
                    "public addresses within one region (out and in)".into(),
                    2.0 * (cs + sc),
                    t.per_gb("public_ip_in_region"),
                ));
            } else {
                cross(&mut out);
            }
        }
        _ => {
            // One end is your host.
            if to_yours > 0.0 {
                let (what, price) = if via {
                    (
                        "data out over your Direct Connect / VPN".to_owned(),
                        t.per_gb("direct_connect_out"),
                    )
                } else {
                    (
                        format!("internet egress from {}", aws_region.unwrap_or("?")),
                        t.per_gb("internet_egress_first_10tb"),
                    )
                };
                out.push(line(what, to_yours, price));
            }
            if kind == PathKind::Accelerator || home_accelerator {
                out.push(line(
                    "Global Accelerator premium (dominant direction)".into(),
                    cs.max(sc),
                    t.per_gb("accelerator_premium"),
                ));
            }
        }
    }
    out.retain(|l| l.gb > 0.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(paths: &str, suite: &str) -> (Scenario, Plan) {
        let s = Scenario::from_toml(&format!(
            "name='d'\ninstance_type='m5.large'\n\
             [[vpc]]\nregion='us-east-1'\ncidr='10.1.0.0/16'\n\
             [[vpc]]\nregion='ap-southeast-2'\ncidr='10.2.0.0/16'\n\
             [[vpc]]\nname='b'\nregion='us-east-1'\ncidr='10.3.0.0/16'\n{paths}\n[suite]\n{suite}"
        ))
        .unwrap();
        let p = Plan::build(&s, &PriceTable::shipped()).unwrap();
        (s, p)
    }

    /// Report 000's suite between us-east-1 and Sydney: P 1..16 x 10 s x 15 repeats at
    /// m5.large's 0.75 Gbit/s baseline is 70 GB per path, priced out of the sending region.
    #[test]
    fn a_cross_region_peering_is_priced_by_volume_and_source_region() {
        let (s, p) = scenario(
            "[[path]]\nkind='peering'\nclient='us-east-1'\nserver='ap-southeast-2'\n",
            "time=10\nomit=0\nrepeat=15\n[[suite.test]]\nparallel=[1,2,4,8,16]\n",
        );
        let t = PriceTable::shipped();
        let d = estimate(&p, &s, s.suite.as_ref().unwrap(), &t, &BTreeMap::new());
        let gb = 0.75 * 10.0 * 5.0 * 15.0 / 8.0;
        assert!((d.paths[0].client_to_server_gb - gb).abs() < 1e-9, "{d:?}");
        assert_eq!(d.lines.len(), 1, "{:?}", d.lines);
        assert_eq!(d.lines[0].what, "inter-region us-east-1 -> ap-southeast-2");
        assert_eq!(d.lines[0].per_gb, 0.02);
        assert!((d.total - gb * 0.02).abs() < 1e-9);
        // The burst bound: 10 / 0.75 times as much.
        assert!((d.total_at_burst - d.total * 10.0 / 0.75).abs() < 1e-6);
    }

    #[test]
    fn only_the_charges_a_path_incurs_are_listed() {
        let (s, p) = scenario(
            "[[path]]\nkind='peering'\nclient='us-east-1'\nserver='b'\n\
             [[path]]\nkind='tgw'\nclient='us-east-1'\nserver='b'\n\
             [[path]]\nkind='public'\nclient='ap-southeast-2'\nserver='us-east-1'\n",
            "time=10\nomit=2\n[[suite.test]]\nparallel=1\ndirection=['up','down']\n[[suite.test]]\nrr=true\n",
        );
        let d = estimate(
            &p,
            &s,
            s.suite.as_ref().unwrap(),
            &PriceTable::shipped(),
            &BTreeMap::new(),
        );
        let whats: Vec<(&str, &str)> = d
            .lines
            .iter()
            .map(|l| (l.path.as_str(), l.what.as_str()))
            .collect();
        assert_eq!(
            whats,
            [
                ("tgw", "Transit Gateway data processing"),
                ("public", "inter-region ap-southeast-2 -> us-east-1"),
                ("public", "inter-region us-east-1 -> ap-southeast-2"),
            ]
        );
        // Sydney's own rate out, the omitted seconds counted (the data flows then too).
        assert_eq!(d.lines[1].per_gb, 0.098);
        assert!((d.lines[1].gb - 0.75 * 12.0 / 8.0).abs() < 1e-9);
        assert!(
            d.notes
                .iter()
                .any(|n| n.starts_with("peering: peering within one region")),
            "{:?}",
            d.notes
        );
        assert!(
            d.notes
                .iter()
                .any(|n| n.starts_with("request/response cells"))
        );
    }
}
