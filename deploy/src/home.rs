//! Your VPN end: a `vpn` path whose one end is your own host (at home, on a campus) instead of
//! a second VPC. This tool builds the AWS side — one IPsec gateway instance, the route to your
//! private block through it, its security group open to IKE from your public address, and
//! optionally a Global Accelerator in front of it — and writes the strongSwan configuration
//! for your end at `up` ([`crate::ipsec::home_swanctl_conf`]).
//!
//! This module checks the scenario fields such a path adds: `on_prem_cidr` (the private block
//! behind your VPN end: your end's traffic selector, routed into the tunnel on AWS's side),
//! `on_prem_public_ip` (the address AWS sees your VPN end come from: the gateway's group lets
//! IKE in from it alone) and `accelerator = true`. Not for laying out the resources: that is
//! [`crate::plan`]. Only the IPsec flavour has a configuration for your end, so only
//! `vpn = "ipsec"` is accepted here.
//!
//! Your end always dials: it is usually behind a router's NAT that AWS cannot dial through,
//! and an accelerator carries no connection that starts on AWS's side (the field report that
//! put Global Accelerator in front of its VPN says the same). ESP always travels in UDP 4500,
//! since an accelerator carries only TCP and UDP.

use std::net::Ipv4Addr;

use serde::Serialize;

use crate::cidr::Ipv4Cidr;
use crate::hybrid::on_prem_block;
use crate::scenario::{End, PathKind, PathSpec, ScenarioError, VpcSpec, VpnFlavour};

/// Your end of a `vpn` path to your own host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HomeEnd {
    /// The private block behind your VPN end; your host's address is in it.
    pub on_prem_cidr: Ipv4Cidr,
    /// The public address your VPN end reaches AWS from (after your router's NAT).
    pub public_ip: Ipv4Addr,
    /// A Global Accelerator in front of the gateway: your end dials its static address.
    pub accelerator: bool,
}

/// The raw scenario fields a path to your VPN end may carry.
#[derive(Debug, Default)]
pub(crate) struct HomeFields {
    pub on_prem_cidr: Option<String>,
    pub on_prem_public_ip: Option<Ipv4Addr>,
    pub accelerator: Option<bool>,
    pub via: bool,
}

/// Whether a path of `kind` with these ends goes to your VPN end.
pub(crate) fn is_home(kind: PathKind, ends: (&End, &End)) -> bool {
    kind == PathKind::Vpn && matches!(ends, (End::Address(_), _) | (_, End::Address(_)))
}

/// Checks a path's VPN-end fields: on a `vpn` path with your host as one end, an IPsec
/// flavour, a private block that holds your host and overlaps no VPC, and a public address
/// outside it; elsewhere, neither `on_prem_public_ip` nor `accelerator`. `on_prem_cidr` of
/// other paths is [`crate::hybrid`]'s.
pub(crate) fn check(
    label: &str,
    kind: PathKind,
    vpn: Option<VpnFlavour>,
    fields: &HomeFields,
    ends: (&End, &End),
    vpcs: &[VpcSpec],
) -> Result<Option<HomeEnd>, ScenarioError> {
    let bad = |problem: String| ScenarioError::BadEnds {
        path: label.to_owned(),
        kind,
        problem,
    };
    if !is_home(kind, ends) {
        if fields.on_prem_public_ip.is_some() || fields.accelerator.is_some() {
            return Err(bad(
                "on_prem_public_ip and accelerator apply only to kind = \"vpn\" with your host as one end (client_address or server_address); for an accelerator in front of a server, use kind = \"accelerator\"".into(),
            ));
        }
        return Ok(None);
    }
    if fields.via {
        return Err(bad(
            "via is for kind = \"existing\" through your own gateway; a vpn path to your host builds its own gateway: drop via".into(),
        ));
    }
    if vpn != Some(VpnFlavour::Ipsec) {
        return Err(bad(format!(
            "a vpn path to your own host is built with vpn = \"ipsec\" only (your end gets a strongSwan configuration), not \"{}\"; add vpn = \"ipsec\"",
            vpn.unwrap_or_default()
        )));
    }
    let Some(cidr) = &fields.on_prem_cidr else {
        return Err(bad(
            "needs on_prem_cidr = \"<the private block behind your VPN end, e.g. 192.168.1.0/24>\": it is routed into the tunnel on AWS's side".into(),
        ));
    };
    let on_prem_cidr = on_prem_block(label, kind, cidr, ends, vpcs, "through the tunnel")?;
    let Some(public_ip) = fields.on_prem_public_ip else {
        return Err(bad(
            "needs on_prem_public_ip = \"<the public IPv4 your VPN end reaches AWS from>\" (what https://checkip.amazonaws.com shows from there): the gateway lets IKE in from that address only".into(),
        ));
    };
    if let Some(why) = not_public(public_ip) {
        return Err(bad(format!(
            "on_prem_public_ip {public_ip} is {why}; give the public address your VPN end reaches AWS from (after your router's NAT)"
        )));
    }
    if on_prem_cidr.contains(public_ip) {
        return Err(bad(format!(
            "on_prem_public_ip {public_ip} is inside on_prem_cidr {on_prem_cidr}: the tunnel would have to carry its own packets; give the private block behind your VPN end"
        )));
    }
    Ok(Some(HomeEnd {
        on_prem_cidr,
        public_ip,
        accelerator: fields.accelerator.unwrap_or(false),
    }))
}

/// Paths whose server is in one VPC share its `base` route table: a block of yours routed
/// there to your VPN end must not overlap another path's (another VPN end, or your gateway
/// for a hybrid path), or one route would have to go two ways.
pub(crate) fn check_together(paths: &[PathSpec]) -> Result<(), ScenarioError> {
    let into_base: Vec<(&PathSpec, &str, Ipv4Cidr)> = paths
        .iter()
        .filter_map(|p| {
            let End::Vpc(v) = &p.server else { return None };
            let block = p
                .home
                .as_ref()
                .map(|h| h.on_prem_cidr)
                .or(p.hybrid.as_ref().map(|h| h.on_prem_cidr))?;
            Some((p, v.as_str(), block))
        })
        .collect();
    for (i, (a, vpc_a, block_a)) in into_base.iter().enumerate() {
        for (b, vpc_b, block_b) in &into_base[i + 1..] {
            if vpc_a != vpc_b || !block_a.overlaps(block_b) {
                continue;
            }
            if a.home.is_none() && b.home.is_none() {
                continue; // Two hybrid paths: crate::hybrid::check_together's.
            }
            return Err(ScenarioError::BadEnds {
                path: b.label.clone(),
                kind: b.kind,
                problem: format!(
                    "on_prem_cidr {block_b} overlaps path '{}''s {block_a}, and both are routed from vpc '{vpc_a}''s base subnet, through different gateways; one route cannot go two ways: use one path, or a second [[vpc]]",
                    a.label
                ),
            });
        }
    }
    Ok(())
}

/// Why `ip` cannot be a public address AWS sees, if it cannot.
fn not_public(ip: Ipv4Addr) -> Option<&'static str> {
    let shared = Ipv4Cidr::new(Ipv4Addr::new(100, 64, 0, 0), 10).is_some_and(|c| c.contains(ip));
    if ip.is_private() {
        Some("a private address (RFC 1918)")
    } else if shared {
        Some("in 100.64.0.0/10, a carrier-grade NAT's inside: AWS sees your provider's address")
    } else if ip.is_loopback() || ip.is_unspecified() || ip.is_link_local() {
        Some("not routable on the internet")
    } else if ip.is_multicast() || ip.is_broadcast() {
        Some("not a host address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    const BASE: &str = crate::scenario::one_vpc_scenario!();

    const HOME: &str = "kind = \"vpn\"\nvpn = \"ipsec\"\nclient_address = \"192.168.1.20\"\nserver = \"aws\"\non_prem_cidr = \"192.168.1.0/24\"\non_prem_public_ip = \"198.51.100.7\"\n";

    fn with(path: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml(&format!("{BASE}\n[[path]]\n{path}"))
    }

    fn err(path: &str) -> String {
        with(path).unwrap_err().to_string()
    }

    #[test]
    fn a_vpn_path_to_your_host_is_read_either_way_round() {
        let s = with(&format!("{HOME}accelerator = true\n")).unwrap();
        let p = &s.paths[0];
        assert_eq!(
            (p.label.as_str(), p.vpn),
            ("vpn-ipsec", Some(VpnFlavour::Ipsec))
        );
        let h = p.home.clone().unwrap();
        assert_eq!(h.on_prem_cidr.to_string(), "192.168.1.0/24");
        assert_eq!(h.public_ip, Ipv4Addr::new(198, 51, 100, 7));
        assert!(h.accelerator);
        assert_eq!(p.hybrid, None);
        // Your host as the server: our client dials it through the tunnel.
        let s = with(
            "kind = \"vpn\"\nvpn = \"ipsec\"\nclient = \"aws\"\nserver_address = \"172.16.5.9\"\non_prem_cidr = \"172.16.0.0/20\"\non_prem_public_ip = \"203.0.113.40\"\n",
        )
        .unwrap();
        assert!(!s.paths[0].home.as_ref().unwrap().accelerator);
        // Two VPCs: no VPN end of yours.
        let s = Scenario::from_toml(&format!(
            "{BASE}[[vpc]]\nname = \"b\"\nregion = \"us-east-1\"\ncidr = \"10.2.0.0/16\"\n[[path]]\nkind = \"vpn\"\nvpn = \"ipsec\"\nclient = \"aws\"\nserver = \"b\"\n"
        ))
        .unwrap();
        assert_eq!(s.paths[0].home, None);
    }

    #[test]
    fn bad_vpn_ends_are_explained() {
        let e = err(&HOME.replace("on_prem_cidr = \"192.168.1.0/24\"\n", ""));
        assert!(e.contains("needs on_prem_cidr"), "{e}");
        let e = err(&HOME.replace("on_prem_public_ip = \"198.51.100.7\"\n", ""));
        assert!(
            e.contains("needs on_prem_public_ip") && e.contains("checkip"),
            "{e}"
        );
        let e = err(&HOME
            .replace("192.168.1.0/24", "10.1.0.0/20")
            .replace("192.168.1.20", "10.1.3.4"));
        assert_eq!(
            e,
            "path 'vpn-ipsec' (vpn): on_prem_cidr 10.1.0.0/20 overlaps vpc 'aws' (10.1.0.0/16); no route could tell them apart: give the VPC another block"
        );
        let e = err(&HOME.replace("192.168.1.20", "192.168.2.20"));
        assert!(e.contains("192.168.2.20 is not in on_prem_cidr"), "{e}");
        let e = err(&HOME.replace("198.51.100.7", "192.168.0.1"));
        assert!(e.contains("private address"), "{e}");
        let e = err(&HOME.replace("198.51.100.7", "100.100.1.1"));
        assert!(e.contains("carrier-grade NAT"), "{e}");
        let e = err(&HOME.replace("198.51.100.7", "192.168.1.1"));
        assert!(e.contains("private address"), "{e}");
        // A campus on public addresses: the VPN end's own address must be outside the block.
        let e = err(&HOME
            .replace("192.168.1.0/24", "198.51.100.0/24")
            .replace("192.168.1.20", "198.51.100.20"));
        assert!(e.contains("is inside on_prem_cidr"), "{e}");
        let e = err(&HOME.replace("vpn = \"ipsec\"\n", ""));
        assert!(
            e.contains("vpn = \"ipsec\" only") && e.contains("not \"wireguard\""),
            "{e}"
        );
        let e = err(&HOME.replace("\"ipsec\"", "\"openvpn\""));
        assert!(e.contains("is not a VPN flavour"), "{e}");
        let e = err(&format!("{HOME}via = \"vgw-12345678\"\n"));
        assert!(e.contains("drop via"), "{e}");
        let e = err(
            "kind = \"existing\"\nclient = \"aws\"\nserver_address = \"198.51.100.7\"\naccelerator = true\n",
        );
        assert!(e.contains("apply only to kind = \"vpn\""), "{e}");
        let e = err(
            "kind = \"public\"\nclient_address = \"198.51.100.9\"\nserver = \"aws\"\non_prem_public_ip = \"198.51.100.9\"\n",
        );
        assert!(e.contains("apply only to kind = \"vpn\""), "{e}");
    }

    #[test]
    fn overlapping_blocks_routed_from_one_base_are_refused() {
        let second = |cidr: &str, host: &str| {
            with(&format!(
                "{HOME}[[path]]\nkind = \"vpn\"\nvpn = \"ipsec\"\nlabel = \"b\"\nclient_address = \"{host}\"\nserver = \"aws\"\non_prem_cidr = \"{cidr}\"\non_prem_public_ip = \"198.51.100.8\"\n"
            ))
        };
        let e = second("192.168.0.0/16", "192.168.7.7").unwrap_err();
        assert!(
            e.to_string().contains("one route cannot go two ways"),
            "{e}"
        );
        second("192.169.0.0/16", "192.169.7.7").unwrap();
        // A hybrid path from the same block through your VGW: refused too.
        let e = with(&format!(
            "{HOME}[[path]]\nkind = \"existing\"\nlabel = \"dx\"\nclient_address = \"192.168.1.30\"\nserver = \"aws\"\nvia = \"vgw-12345678\"\non_prem_cidr = \"192.168.1.0/24\"\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("one route cannot go two ways"),
            "{e}"
        );
    }
}
