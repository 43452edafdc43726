//! Hybrid ends: an `existing` path whose host of yours is reached over private addresses,
//! through a gateway you already have — the virtual private gateway your Direct Connect or
//! Site-to-Site VPN lands on, or your Transit Gateway (`via`), towards the private block your
//! host lives in (`on_prem_cidr`).
//!
//! This module checks those two scenario fields. `up` then joins the run's VPC to your gateway
//! (it attaches the VGW, or makes a Transit Gateway VPC attachment), routes `on_prem_cidr`
//! there and opens the xbench port to it; `down` undoes exactly that. Your gateway itself is
//! never created, changed or deleted. Not for anything AWS must answer (does the gateway exist,
//! is a VGW already attached elsewhere): that is checked by `up` before it creates anything.
//!
//! A Direct Connect gateway id is refused: a DX gateway reaches a VPC only through a VGW or a
//! Transit Gateway associated with it, so that VGW or TGW is what the VPC is joined to; the
//! message says how to find it.

use std::fmt;

use serde::Serialize;

use crate::cidr::Ipv4Cidr;
use crate::scenario::{End, PathKind, PathSpec, ScenarioError, VpcSpec};

/// A gateway of yours that the run's VPC is joined to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrivateGateway {
    /// A virtual private gateway (`vgw-…`): attached to the run's VPC for the run, detached by
    /// `down`. AWS attaches a VGW to one VPC at a time.
    Vgw(String),
    /// A Transit Gateway (`tgw-…`): the run's VPC gets its own attachment to it, deleted by
    /// `down`.
    Tgw(String),
}

impl PrivateGateway {
    /// Its AWS id.
    pub fn id(&self) -> &str {
        match self {
            PrivateGateway::Vgw(id) | PrivateGateway::Tgw(id) => id,
        }
    }

    /// What it is, as messages name it.
    pub fn what(&self) -> &'static str {
        match self {
            PrivateGateway::Vgw(_) => "virtual private gateway",
            PrivateGateway::Tgw(_) => "transit gateway",
        }
    }

    /// Reads a `via` value: `vgw-` or `tgw-` and 8 or 17 hex digits.
    fn parse(path: &str, value: &str) -> Result<Self, ScenarioError> {
        let bad = |problem: String| ScenarioError::BadValue {
            field: format!("path '{path}' via"),
            problem,
        };
        let hex_id = |rest: &str| {
            (rest.len() == 8 || rest.len() == 17) && rest.bytes().all(|b| b.is_ascii_hexdigit())
        };
        if let Some(rest) = value.strip_prefix("vgw-")
            && hex_id(rest)
        {
            return Ok(PrivateGateway::Vgw(value.to_owned()));
        }
        if value.starts_with("tgw-attach-") {
            return Err(bad(format!(
                "'{value}' is a transit gateway attachment; give the transit gateway's own id (tgw-…): the run makes its own attachment"
            )));
        }
        if let Some(rest) = value.strip_prefix("tgw-")
            && hex_id(rest)
        {
            return Ok(PrivateGateway::Tgw(value.to_owned()));
        }
        if value.starts_with("dxgw-") || looks_like_uuid(value) {
            return Err(bad(format!(
                "'{value}' looks like a Direct Connect gateway; a DX gateway reaches a VPC only through the virtual private gateway or transit gateway associated with it, so give that vgw-… or tgw-… id (`aws directconnect describe-direct-connect-gateway-associations --direct-connect-gateway-id {value}` lists them)"
            )));
        }
        Err(bad(format!(
            "'{value}' is not a gateway id; give your virtual private gateway (vgw-…) or transit gateway (tgw-…)"
        )))
    }
}

impl fmt::Display for PrivateGateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// The private side of an `existing` path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HybridEnd {
    /// Your gateway the run's VPC is joined to.
    pub via: PrivateGateway,
    /// The private block your host lives in, routed from the run's subnet to `via`.
    pub on_prem_cidr: Ipv4Cidr,
}

/// Checks one path's `via` and `on_prem_cidr`: both or neither, on `existing` paths only, a
/// gateway id of the right kind, a block that holds your host's address and overlaps no VPC.
pub(crate) fn check(
    label: &str,
    kind: PathKind,
    via: Option<String>,
    on_prem_cidr: Option<String>,
    ends: (&End, &End),
    vpcs: &[VpcSpec],
) -> Result<Option<HybridEnd>, ScenarioError> {
    let bad_ends = |problem: String| ScenarioError::BadEnds {
        path: label.to_owned(),
        kind,
        problem,
    };
    let (via, cidr) = match (via, on_prem_cidr) {
        (None, None) => return Ok(None),
        (Some(v), Some(c)) => (v, c),
        (Some(_), None) => {
            return Err(bad_ends(
                "via needs on_prem_cidr = \"<the private block your host is in>\" (routed to your gateway)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(bad_ends(
                "on_prem_cidr needs via = \"vgw-…\" or \"tgw-…\" (the gateway that reaches it)"
                    .into(),
            ));
        }
    };
    if kind != PathKind::Existing {
        return Err(bad_ends(
            "via and on_prem_cidr apply only to kind = \"existing\"".into(),
        ));
    }
    let via = PrivateGateway::parse(label, &via)?;
    let over = format!("over {}", via.what());
    let on_prem_cidr = on_prem_block(label, kind, &cidr, ends, vpcs, &over)?;
    Ok(Some(HybridEnd { via, on_prem_cidr }))
}

/// Path `label`'s `on_prem_cidr`, the private block your host lives in, parsed and checked
/// alike for a hybrid end and for your VPN end: it holds your host's address (the address end
/// of `ends`; `through` says how that address is reached, for the message) and overlaps no VPC.
pub(crate) fn on_prem_block(
    label: &str,
    kind: PathKind,
    cidr: &str,
    ends: (&End, &End),
    vpcs: &[VpcSpec],
    through: &str,
) -> Result<Ipv4Cidr, ScenarioError> {
    let bad_ends = |problem: String| ScenarioError::BadEnds {
        path: label.to_owned(),
        kind,
        problem,
    };
    let on_prem_cidr: Ipv4Cidr = cidr.parse().map_err(|source| ScenarioError::Cidr {
        what: format!("path '{label}' on_prem_cidr"),
        source,
    })?;
    let address = match ends {
        (End::Address(a), _) | (_, End::Address(a)) => *a,
        _ => unreachable!("a path with your own block has one address end (checked before)"),
    };
    if !on_prem_cidr.contains(address) {
        return Err(bad_ends(format!(
            "your host's address {address} is not in on_prem_cidr {on_prem_cidr}; {through} give its private address, inside that block"
        )));
    }
    if let Some(v) = vpcs.iter().find(|v| v.cidr.overlaps(&on_prem_cidr)) {
        return Err(bad_ends(format!(
            "on_prem_cidr {on_prem_cidr} overlaps vpc '{}' ({}); no route could tell them apart: give the VPC another block",
            v.name, v.cidr
        )));
    }
    Ok(on_prem_cidr)
}

/// Checks hybrid paths against each other: one VPC attaches at most one virtual private
/// gateway, and overlapping on-premises blocks in one VPC must go through the same gateway
/// (one route table entry per block).
pub(crate) fn check_together(paths: &[PathSpec]) -> Result<(), ScenarioError> {
    let hybrid: Vec<(&PathSpec, &str, &HybridEnd)> = paths
        .iter()
        .filter_map(|p| {
            let vpc = match (&p.client, &p.server) {
                (End::Vpc(v), _) | (_, End::Vpc(v)) => v.as_str(),
                _ => return None,
            };
            p.hybrid.as_ref().map(|h| (p, vpc, h))
        })
        .collect();
    for (i, (a, vpc_a, ha)) in hybrid.iter().enumerate() {
        for (b, vpc_b, hb) in &hybrid[i + 1..] {
            if vpc_a != vpc_b || ha.via == hb.via {
                continue;
            }
            let problem = if matches!(
                (&ha.via, &hb.via),
                (PrivateGateway::Vgw(_), PrivateGateway::Vgw(_))
            ) {
                format!(
                    "vpc '{vpc_a}' would need two virtual private gateways ({} for path '{}', {} here); AWS attaches one per VPC: use one, or a second [[vpc]]",
                    ha.via, a.label, hb.via
                )
            } else if ha.on_prem_cidr.overlaps(&hb.on_prem_cidr) {
                format!(
                    "on_prem_cidr {} overlaps path '{}''s {} in vpc '{vpc_a}' through another gateway ({}); one route cannot go two ways",
                    hb.on_prem_cidr, a.label, ha.on_prem_cidr, ha.via
                )
            } else {
                continue;
            };
            return Err(ScenarioError::BadEnds {
                path: b.label.clone(),
                kind: b.kind,
                problem,
            });
        }
    }
    Ok(())
}

fn looks_like_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    const BASE: &str = crate::scenario::one_vpc_scenario!();

    fn with(path: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml(&format!(
            "{BASE}\n[[path]]\nkind = \"existing\"\nclient = \"aws\"\n{path}"
        ))
    }

    #[test]
    fn vgw_and_tgw_are_read() {
        let s = with("server_address = \"192.168.10.5\"\nvia = \"vgw-0123456789abcdef0\"\non_prem_cidr = \"192.168.0.0/16\"\n").unwrap();
        let h = s.paths[0].hybrid.clone().unwrap();
        assert_eq!(h.via, PrivateGateway::Vgw("vgw-0123456789abcdef0".into()));
        assert_eq!(h.on_prem_cidr.to_string(), "192.168.0.0/16");
        let s = with("server_address = \"172.16.0.9\"\nvia = \"tgw-12345678\"\non_prem_cidr = \"172.16.0.0/24\"\n").unwrap();
        assert_eq!(
            s.paths[0].hybrid.as_ref().unwrap().via,
            PrivateGateway::Tgw("tgw-12345678".into())
        );
        // Without via, an existing path is the public one it was.
        let s = with("server_address = \"198.51.100.7\"\n").unwrap();
        assert_eq!(s.paths[0].hybrid, None);
    }

    #[test]
    fn bad_gateway_ids_are_explained() {
        let e = |via: &str| {
            with(&format!(
                "server_address = \"192.168.10.5\"\nvia = \"{via}\"\non_prem_cidr = \"192.168.0.0/16\"\n"
            ))
            .unwrap_err()
            .to_string()
        };
        assert!(
            e("igw-12345678").contains("not a gateway id"),
            "{}",
            e("igw-12345678")
        );
        assert!(e("vgw-xyz").contains("not a gateway id"));
        let dx = e("5f294f92-bafb-4011-916d-9b0b12345678");
        assert!(
            dx.contains("Direct Connect gateway")
                && dx.contains("describe-direct-connect-gateway-associations"),
            "{dx}"
        );
        assert!(e("tgw-attach-0123456789abcdef0").contains("transit gateway attachment"));
    }

    #[test]
    fn cidr_must_hold_the_address_and_miss_the_vpcs() {
        let e = with("server_address = \"192.169.0.5\"\nvia = \"vgw-12345678\"\non_prem_cidr = \"192.168.0.0/16\"\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("192.169.0.5 is not in on_prem_cidr 192.168.0.0/16"),
            "{e}"
        );
        let e = with("server_address = \"10.1.200.5\"\nvia = \"vgw-12345678\"\non_prem_cidr = \"10.0.0.0/8\"\n").unwrap_err();
        assert!(e.to_string().contains("overlaps vpc 'aws'"), "{e}");
        let e = with("server_address = \"192.168.0.5\"\nvia = \"vgw-12345678\"\non_prem_cidr = \"192.168.0.0/33\"\n").unwrap_err();
        assert!(matches!(e, ScenarioError::Cidr { .. }), "{e}");
    }

    #[test]
    fn both_fields_or_neither_and_only_on_existing() {
        let e = with("server_address = \"192.168.0.5\"\nvia = \"vgw-12345678\"\n").unwrap_err();
        assert!(e.to_string().contains("via needs on_prem_cidr"), "{e}");
        let e = with("server_address = \"192.168.0.5\"\non_prem_cidr = \"192.168.0.0/24\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("on_prem_cidr needs via"), "{e}");
        let e = Scenario::from_toml(&format!(
            "{BASE}\n[[path]]\nkind = \"public\"\nclient_address = \"192.168.0.5\"\nserver = \"aws\"\nvia = \"vgw-12345678\"\non_prem_cidr = \"192.168.0.0/24\"\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("apply only to kind = \"existing\""),
            "{e}"
        );
    }

    #[test]
    fn one_vgw_per_vpc_and_no_overlap_through_two_gateways() {
        let two = |via2: &str, cidr2: &str| {
            Scenario::from_toml(&format!(
                "{BASE}\n[[path]]\nkind = \"existing\"\nlabel = \"a\"\nclient = \"aws\"\nserver_address = \"192.168.0.5\"\nvia = \"vgw-12345678\"\non_prem_cidr = \"192.168.0.0/24\"\n[[path]]\nkind = \"existing\"\nlabel = \"b\"\nclient_address = \"{}\"\nserver = \"aws\"\nvia = \"{via2}\"\non_prem_cidr = \"{cidr2}\"\n",
                cidr2.replace(".0/24", ".9").replace(".0/16", ".9")
            ))
        };
        let e = two("vgw-87654321", "192.169.0.0/24").unwrap_err();
        assert!(e.to_string().contains("AWS attaches one per VPC"), "{e}");
        let e = two("tgw-87654321", "192.168.0.0/16").unwrap_err();
        assert!(
            e.to_string().contains("one route cannot go two ways"),
            "{e}"
        );
        two("tgw-87654321", "192.169.0.0/24").unwrap();
        two("vgw-12345678", "192.168.0.0/24").unwrap();
    }
}
