//! The address plan: turns a [`LabSpec`] into the namespaces, links, addresses, routes, qdiscs,
//! delay lines and VPN tunnels that build it. Pure (no commands run), so the topology can be
//! tested without root. Not for: running anything (`lab` applies a plan).
//!
//! Topology (hub and spoke): one client namespace `<prefix>c` is the hub; each path is a spoke
//! ending in its own server namespace `<prefix><label>-s`. A path with impairments gets a WAN
//! segment, two namespaces `-wa` and `-wb`, joined either by the delay line's TUN pair or by a
//! veth carrying `tbf`/`netem`. The qdiscs sit in those forwarding namespaces (on the WAN veth,
//! or on the hops just after the delay line), so the bottleneck queue is in a forwarding hop,
//! as on a real path, and not in the sender's own host.
//!
//! ```text
//! direct:   c ── s                      (impaired: c ── wa ~wan~ wb ── s)
//! transit:  c ── r ── s                 (impaired: c ── r ── wa ~wan~ wb ── s)
//! vpn:      c ── ga ══tunnel══ gb ── s  (the tunnel's UDP runs over ga ── [wa ~wan~ wb] ── gb)
//! ```
//!
//! Addresses come from 198.18.0.0/15, the range set aside for benchmarking (RFC 2544): path `i`
//! uses 198.18.(8i+k).0/24 for its k-th link (left end .1, right end .2) and 198.19.i.0/24
//! inside its VPN tunnel. Every lab lives in its own namespaces, so two labs may reuse them.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::{Backend, Impairment, LabSpec, PathKind, PathSpec, SERVER_PORT};

/// Most paths one lab can have (the address plan gives each 8 /24s of 198.18.0.0/16).
pub const MAX_PATHS: usize = 32;

/// MTU of every link. Cloud paths between VPCs across regions, through a Transit Gateway's
/// peering or over the internet, carry 1500-byte packets.
pub const MTU: u32 = 1500;

/// An IPv4 network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Net {
    /// Network address.
    pub addr: Ipv4Addr,
    /// Prefix length.
    pub len: u8,
}

impl std::fmt::Display for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// What a built path offers a test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathInfo {
    /// The path's label.
    pub label: String,
    /// Its kind.
    pub kind: PathKind,
    /// Its impairments.
    pub impairment: Impairment,
    /// How delay/jitter/loss are made on it, if it has any.
    pub impairment_by: Option<Backend>,
    /// Namespace to run clients in (shared by all paths: the hub).
    pub client_netns: String,
    /// Namespace of this path's server.
    pub server_netns: String,
    /// The client's address on this path.
    pub client_addr: Ipv4Addr,
    /// The server's address: connect here to take this path.
    pub server_addr: Ipv4Addr,
    /// Port of the path's xbench server, when the lab runs servers.
    pub server_port: u16,
    /// Every namespace of this path, client side first (the hub excluded).
    pub netns: Vec<String>,
}

/// One end of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct End {
    pub(crate) ns: String,
    pub(crate) dev: String,
    pub(crate) addr: Option<Ipv4Addr>,
}

/// How two neighbouring namespaces are joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinkKind {
    /// A veth pair with a /24 between them.
    Veth(Net),
    /// A persistent TUN device in each namespace, bridged by a delay line.
    DelayTun,
    /// A persistent TUN device in each gateway, bridged by OpenVPN.
    VpnTun(Net),
}

/// A link between `a` (client side) and `b` (server side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) kind: LinkKind,
    pub(crate) a: End,
    pub(crate) b: End,
}

/// A route in one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) ns: String,
    pub(crate) dest: Net,
    pub(crate) via: Option<Ipv4Addr>,
    pub(crate) dev: String,
}

/// `tc tbf` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tbf {
    pub(crate) rate_bps: u64,
    pub(crate) burst_bytes: u64,
    pub(crate) limit_bytes: u64,
}

/// Qdiscs on one device's egress.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Qdisc {
    pub(crate) ns: String,
    pub(crate) dev: String,
    pub(crate) tbf: Option<Tbf>,
    /// Delay, jitter and loss by the kernel's netem.
    pub(crate) netem: Option<Impairment>,
}

/// A delay line between the TUN devices of a WAN segment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DelayLinePlan {
    pub(crate) label: String,
    /// Client-side end (`-wa`).
    pub(crate) a: End,
    /// Server-side end (`-wb`).
    pub(crate) b: End,
    pub(crate) impairment: Impairment,
    /// Loss/jitter seeds, client-to-server then server-to-client.
    pub(crate) seeds: [u64; 2],
}

/// An OpenVPN tunnel between two gateways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VpnPlan {
    pub(crate) label: String,
    /// Client-side gateway and its underlay address; it plays the TLS server.
    pub(crate) ga: (String, Ipv4Addr),
    /// Server-side gateway and its underlay address.
    pub(crate) gb: (String, Ipv4Addr),
    /// Tunnel device name in both gateways.
    pub(crate) dev: String,
}

/// An xbench server to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerPlan {
    pub(crate) label: String,
    pub(crate) ns: String,
    pub(crate) addr: Ipv4Addr,
    pub(crate) port: u16,
}

/// Everything a lab consists of, in the order it is built.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) client_ns: String,
    /// Namespaces and whether each forwards packets.
    pub(crate) namespaces: Vec<(String, bool)>,
    pub(crate) links: Vec<Link>,
    pub(crate) routes: Vec<Route>,
    pub(crate) qdiscs: Vec<Qdisc>,
    pub(crate) delay_lines: Vec<DelayLinePlan>,
    pub(crate) vpns: Vec<VpnPlan>,
    pub(crate) servers: Vec<ServerPlan>,
    pub(crate) paths: Vec<PathInfo>,
}

/// Settings of the `tbf` that caps a path at `rate_bps` with one-way `delay`.
///
/// Burst: 1 ms at the rate, but at least four full frames. tbf releases packets from an
/// hrtimer; a bucket of 1 ms absorbs the timer's and the softirq's scheduling jitter so the
/// long-run rate is the cap, while over a test of T seconds the bucket lets through at most
/// burst ÷ T more than the cap (25 kB over 5 s at 200 Mbit/s: 0.02 %).
/// Queue: one bandwidth-delay product of the path's base RTT, at least 10 ms of traffic — the
/// classic router buffer, which lets one TCP flow fill the link without hiding the cap behind
/// seconds of bufferbloat — unless the path asks for its own (`queue`), which is then tbf's
/// whole limit.
pub(crate) fn tbf_for(rate_bps: u64, delay: Duration, queue: Option<u64>) -> Tbf {
    let bytes_per_s = rate_bps / 8;
    let frame = u64::from(MTU) + 14;
    let burst_bytes = (bytes_per_s / 1000).max(4 * frame);
    let queue_time = (2 * delay).max(Duration::from_millis(10));
    let queue_bytes = (bytes_per_s as f64 * queue_time.as_secs_f64()) as u64;
    Tbf {
        rate_bps,
        burst_bytes,
        limit_bytes: queue.unwrap_or(queue_bytes.max(4 * frame) + burst_bytes),
    }
}

/// Builds the plan. `netem_available` says whether the kernel has `sch_netem` (asked only when
/// the backend is `Auto`; `Netem` without it is refused by the caller before planning).
pub(crate) fn plan(spec: &LabSpec, netem_available: bool) -> Plan {
    let client_ns = format!("{}c", spec.prefix);
    let mut plan = Plan {
        client_ns: client_ns.clone(),
        namespaces: vec![(client_ns, false)],
        links: Vec::new(),
        routes: Vec::new(),
        qdiscs: Vec::new(),
        delay_lines: Vec::new(),
        vpns: Vec::new(),
        servers: Vec::new(),
        paths: Vec::new(),
    };
    for (i, path) in spec.paths.iter().enumerate() {
        plan_path(&mut plan, spec, i, path, netem_available);
    }
    plan
}

/// Adds path `i`'s namespaces, links, routes, impairments, tunnel and server to `plan`. Apart
/// from [`plan`] so each path reads as the steps that build it.
fn plan_path(plan: &mut Plan, spec: &LabSpec, i: usize, path: &PathSpec, netem_available: bool) {
    let ns = |role: &str| format!("{}{}-{role}", spec.prefix, path.label);
    let imp = path.impairment;
    let wan = wan_for(&imp, spec.backend, netem_available);
    let mut nets = (0u8..8).map(|k| Net {
        addr: Ipv4Addr::new(198, 18, (i as u8) * 8 + k, 0),
        len: 24,
    });
    let mut next_net = || {
        // Invariant: a path uses at most 5 links (vpn: 2 inner + 3 underlay) of its 8 /24s.
        nets.next()
            .expect("a path has 8 networks and uses at most 5")
    };

    let (inner, under) = chains(path.kind, wan, &plan.client_ns, &ns);
    let path_ns = add_namespaces(plan, &inner, &under);

    let vpn_net = Net {
        addr: Ipv4Addr::new(198, 19, i as u8, 0),
        len: 24,
    };
    let inner_links = link_chain(&inner, &path.label, &mut next_net, vpn_net);
    let under_links = link_chain(&under, &path.label, &mut next_net, vpn_net);
    for links in [&inner_links, &under_links] {
        plan.routes.extend(chain_routes(links));
    }
    let seed = spec.seed ^ fnv1a(path.label.as_bytes());
    for links in [&inner_links, &under_links] {
        impair(plan, links, &path.label, imp, wan, seed);
    }
    if path.kind == PathKind::Vpn {
        let ga_under = under_links[0].a.addr;
        let gb_under = under_links[under_links.len() - 1].b.addr;
        if let (Some(a), Some(b)) = (ga_under, gb_under) {
            plan.vpns.push(VpnPlan {
                label: path.label.clone(),
                ga: (ns("ga"), a),
                gb: (ns("gb"), b),
                dev: "vpn".into(),
            });
        }
    }
    add_server(plan, path, wan, &ns("s"), &inner_links, path_ns);
    plan.links.extend(inner_links);
    plan.links.extend(under_links);
}

/// How a path's WAN segment is made, if it has one: apart from [`plan_path`] because the
/// choice between netem and the delay line is a rule of its own.
fn wan_for(imp: &Impairment, backend: Backend, netem_available: bool) -> Option<Wan> {
    if imp.is_none() {
        None
    } else if !imp.needs_delay_line() {
        Some(Wan::Veth { netem: false })
    } else {
        match backend {
            // netem reorders by its own model; the lab's reordering is the delay line's.
            Backend::Netem if imp.reorder == 0.0 => Some(Wan::Veth { netem: true }),
            Backend::Netem | Backend::DelayLine => Some(Wan::Tun),
            Backend::Auto if netem_available && imp.jitter.is_zero() && imp.reorder == 0.0 => {
                Some(Wan::Veth { netem: true })
            }
            Backend::Auto => Some(Wan::Tun),
        }
    }
}

/// The chain that carries the test's packets, client first, and the chain under the VPN
/// tunnel (empty unless the path is a VPN): the path's shape by its kind, kept apart from the
/// addressing that follows.
fn chains(
    kind: PathKind,
    wan: Option<Wan>,
    client_ns: &str,
    ns: &dyn Fn(&str) -> String,
) -> (Vec<Hop>, Vec<Hop>) {
    let mut inner: Vec<Hop> = vec![Hop::node(client_ns, "c")];
    let mut under: Vec<Hop> = Vec::new();
    match kind {
        PathKind::Direct => {
            push_wan(&mut inner, wan, ns);
            inner.push(Hop::node(&ns("s"), "s"));
        }
        PathKind::Transit => {
            inner.push(Hop::node(&ns("r"), "r"));
            push_wan(&mut inner, wan, ns);
            inner.push(Hop::node(&ns("s"), "s"));
        }
        PathKind::Vpn => {
            inner.push(Hop::node(&ns("ga"), "ga"));
            inner.push(Hop::vpn(&ns("gb"), "gb"));
            inner.push(Hop::node(&ns("s"), "s"));
            under.push(Hop::node(&ns("ga"), "ga"));
            push_wan(&mut under, wan, ns);
            under.push(Hop::node(&ns("gb"), "gb"));
        }
    }
    (inner, under)
}

/// Adds the chains' namespaces (the hub excluded) to `plan` once each, and returns them in
/// order: a VPN's gateways sit on both chains, so the two are merged here.
fn add_namespaces(plan: &mut Plan, inner: &[Hop], under: &[Hop]) -> Vec<String> {
    let mut path_ns = Vec::new();
    for h in inner.iter().skip(1).chain(under.iter()) {
        if !path_ns.contains(&h.ns) {
            path_ns.push(h.ns.clone());
            // Everything between the hub and the server forwards.
            plan.namespaces.push((h.ns.clone(), h.role != "s"));
        }
    }
    path_ns
}

/// Adds the qdiscs and the delay line of a chain's WAN segment to `plan` (nothing for a chain
/// without one): where the impairment sits is a decision of its own, explained here.
fn impair(
    plan: &mut Plan,
    links: &[Link],
    label: &str,
    imp: Impairment,
    wan: Option<Wan>,
    seed: u64,
) {
    for (k, l) in links.iter().enumerate() {
        if !is_wan(l) {
            continue;
        }
        let tbf = imp.rate_bps.map(|r| tbf_for(r, imp.delay, imp.queue_bytes));
        let netem = (wan == Some(Wan::Veth { netem: true })).then_some(imp);
        // The cap sits on the WAN devices themselves for a veth WAN, and on the hops
        // just after a delay line (wb toward the server, wa toward the client): the
        // line then sees the senders' TSO packets whole, not tbf's MTU-sized output,
        // and a fixed delay before a bottleneck is the same path to TCP as one after.
        let ends: Vec<&End> = if l.kind == LinkKind::DelayTun {
            let (Some(before), Some(after)) =
                (k.checked_sub(1).map(|i| &links[i]), links.get(k + 1))
            else {
                continue; // a WAN segment always has a hop on each side
            };
            vec![&before.b, &after.a]
        } else {
            vec![&l.a, &l.b]
        };
        if tbf.is_some() || netem.is_some() {
            for e in ends {
                plan.qdiscs.push(Qdisc {
                    ns: e.ns.clone(),
                    dev: e.dev.clone(),
                    tbf,
                    netem,
                });
            }
        }
        if l.kind == LinkKind::DelayTun {
            plan.delay_lines.push(DelayLinePlan {
                label: label.to_owned(),
                a: l.a.clone(),
                b: l.b.clone(),
                impairment: imp,
                seeds: [seed, seed.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15],
            });
        }
    }
}

/// Adds the path's server and what the path offers a test to `plan`, from the ends of its
/// inner chain: the path's public face, apart from how it is built.
fn add_server(
    plan: &mut Plan,
    path: &PathSpec,
    wan: Option<Wan>,
    server_ns: &str,
    inner_links: &[Link],
    netns: Vec<String>,
) {
    let first = &inner_links[0];
    let last = &inner_links[inner_links.len() - 1];
    let (client_addr, server_addr) = (
        first.a.addr.unwrap_or(Ipv4Addr::UNSPECIFIED),
        last.b.addr.unwrap_or(Ipv4Addr::UNSPECIFIED),
    );
    plan.servers.push(ServerPlan {
        label: path.label.clone(),
        ns: server_ns.to_owned(),
        addr: server_addr,
        port: SERVER_PORT,
    });
    plan.paths.push(PathInfo {
        label: path.label.clone(),
        kind: path.kind,
        impairment: path.impairment,
        impairment_by: match wan {
            Some(Wan::Tun) => Some(Backend::DelayLine),
            Some(Wan::Veth { netem: true }) => Some(Backend::Netem),
            _ => None,
        },
        client_netns: plan.client_ns.clone(),
        server_netns: server_ns.to_owned(),
        client_addr,
        server_addr,
        server_port: SERVER_PORT,
        netns,
    });
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wan {
    /// A veth with tbf and, when `netem`, the kernel's netem.
    Veth { netem: bool },
    /// The delay line's TUN pair.
    Tun,
}

/// A namespace in a chain, and how it is joined to the one before it.
#[derive(Debug, Clone)]
struct Hop {
    ns: String,
    role: &'static str,
    join: Join,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    Veth,
    WanVeth,
    WanTun,
    Vpn,
}

impl Hop {
    fn node(ns: &str, role: &'static str) -> Self {
        Hop {
            ns: ns.to_owned(),
            role,
            join: Join::Veth,
        }
    }

    fn vpn(ns: &str, role: &'static str) -> Self {
        Hop {
            join: Join::Vpn,
            ..Hop::node(ns, role)
        }
    }
}

fn push_wan(chain: &mut Vec<Hop>, wan: Option<Wan>, ns: &dyn Fn(&str) -> String) {
    let Some(wan) = wan else { return };
    chain.push(Hop::node(&ns("wa"), "wa"));
    chain.push(Hop {
        join: match wan {
            Wan::Veth { .. } => Join::WanVeth,
            Wan::Tun => Join::WanTun,
        },
        ..Hop::node(&ns("wb"), "wb")
    });
}

fn is_wan(l: &Link) -> bool {
    l.a.dev == "wan"
}

/// Device name in `here` for the link towards `there`. The hub has one link per path, so its
/// devices are named after the path.
fn dev_name(here: &Hop, there: &Hop, label: &str) -> String {
    if here.role == "c" {
        format!("p-{label}")
    } else {
        format!("to-{}", there.role)
    }
}

fn link_chain(
    chain: &[Hop],
    label: &str,
    next_net: &mut dyn FnMut() -> Net,
    vpn: Net,
) -> Vec<Link> {
    let host = |n: Net, h: u8| {
        let o = n.addr.octets();
        Ipv4Addr::new(o[0], o[1], o[2], h)
    };
    chain
        .windows(2)
        .map(|w| {
            let (a, b) = (&w[0], &w[1]);
            match b.join {
                Join::Veth | Join::WanVeth => {
                    let net = next_net();
                    let wan = b.join == Join::WanVeth;
                    Link {
                        kind: LinkKind::Veth(net),
                        a: End {
                            ns: a.ns.clone(),
                            dev: if wan {
                                "wan".into()
                            } else {
                                dev_name(a, b, label)
                            },
                            addr: Some(host(net, 1)),
                        },
                        b: End {
                            ns: b.ns.clone(),
                            dev: if wan {
                                "wan".into()
                            } else {
                                dev_name(b, a, label)
                            },
                            addr: Some(host(net, 2)),
                        },
                    }
                }
                Join::WanTun => Link {
                    kind: LinkKind::DelayTun,
                    a: End {
                        ns: a.ns.clone(),
                        dev: "wan".into(),
                        addr: None,
                    },
                    b: End {
                        ns: b.ns.clone(),
                        dev: "wan".into(),
                        addr: None,
                    },
                },
                Join::Vpn => Link {
                    kind: LinkKind::VpnTun(vpn),
                    a: End {
                        ns: a.ns.clone(),
                        dev: "vpn".into(),
                        addr: Some(host(vpn, 1)),
                    },
                    b: End {
                        ns: b.ns.clone(),
                        dev: "vpn".into(),
                        addr: Some(host(vpn, 2)),
                    },
                },
            }
        })
        .collect()
}

/// Routes so every namespace of a chain reaches every veth network of the chain: networks to
/// the right go to the right-hand neighbour, networks to the left to the left-hand one.
fn chain_routes(links: &[Link]) -> Vec<Route> {
    let mut routes = Vec::new();
    // Node p sits between links[p-1] (left) and links[p] (right).
    for p in 0..=links.len() {
        for (m, target) in links.iter().enumerate() {
            let LinkKind::Veth(net) = target.kind else {
                continue;
            };
            if m == p || m + 1 == p {
                continue; // directly connected
            }
            let (hop, toward_b) = if m > p {
                (&links[p], true)
            } else {
                (&links[p - 1], false)
            };
            let (me, them) = if toward_b {
                (&hop.a, &hop.b)
            } else {
                (&hop.b, &hop.a)
            };
            let via = match hop.kind {
                LinkKind::Veth(_) => them.addr,
                // Point-to-point TUNs need no next hop.
                LinkKind::DelayTun | LinkKind::VpnTun(_) => None,
            };
            routes.push(Route {
                ns: me.ns.clone(),
                dest: net,
                via,
                dev: me.dev.clone(),
            });
        }
    }
    routes
}

/// FNV-1a, to derive per-path seeds from labels (stable across runs and builds).
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::PathSpec;

    fn spec(paths: Vec<PathSpec>) -> LabSpec {
        let mut s = LabSpec::new(paths);
        s.prefix = "t-".into();
        s
    }

    fn delayed() -> Impairment {
        Impairment {
            rate_bps: Some(200_000_000),
            delay: Duration::from_millis(10),
            ..Default::default()
        }
    }

    #[test]
    fn plain_direct_path_is_one_veth() {
        let p = plan(&spec(vec![PathSpec::new(PathKind::Direct)]), false);
        assert_eq!(p.links.len(), 1);
        assert!(p.routes.is_empty(), "{:?}", p.routes);
        let info = &p.paths[0];
        assert_eq!(info.client_addr, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(info.server_addr, Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(info.client_netns, "t-c");
        assert_eq!(info.server_netns, "t-direct-s");
        assert_eq!(p.links[0].a.dev, "p-direct");
        assert!(p.qdiscs.is_empty() && p.delay_lines.is_empty());
    }

    #[test]
    fn reordering_uses_the_delay_line_even_where_netem_would_do() {
        let reordering = Impairment {
            reorder: 0.01,
            ..delayed()
        };
        for backend in [Backend::Auto, Backend::Netem] {
            let mut s = spec(vec![
                PathSpec::new(PathKind::Direct).with(reordering),
                PathSpec::new(PathKind::Transit).with(delayed()),
            ]);
            s.backend = backend;
            let p = plan(&s, true);
            assert_eq!(p.paths[0].impairment_by, Some(Backend::DelayLine));
            assert_eq!(p.paths[1].impairment_by, Some(Backend::Netem));
        }
    }

    #[test]
    fn impaired_transit_path_routes_end_to_end_through_the_delay_line() {
        let mut s = spec(vec![
            PathSpec::new(PathKind::Direct),
            PathSpec::new(PathKind::Transit).with(delayed()),
        ]);
        s.backend = Backend::Auto;
        let p = plan(&s, false);
        let info = &p.paths[1];
        assert_eq!(
            info.netns,
            ["t-transit-r", "t-transit-wa", "t-transit-wb", "t-transit-s"]
        );
        assert_eq!(info.impairment_by, Some(Backend::DelayLine));
        assert_eq!(info.client_addr, Ipv4Addr::new(198, 18, 8, 1));
        // c → r → wa ~ wb → s: three veth networks 198.18.8-10.0/24.
        assert_eq!(info.server_addr, Ipv4Addr::new(198, 18, 10, 2));
        let route = |ns: &str, dest: u8| {
            p.routes
                .iter()
                .find(|r| r.ns == ns && r.dest.addr.octets()[2] == dest)
                .unwrap_or_else(|| panic!("no route in {ns} to 198.18.{dest}.0: {:?}", p.routes))
        };
        // The hub reaches the server network via the router...
        assert_eq!(route("t-c", 10).via, Some(Ipv4Addr::new(198, 18, 8, 2)));
        // ...the WAN namespaces hand packets to the TUN without a next hop...
        assert_eq!(route("t-transit-wa", 10).dev, "wan");
        assert_eq!(route("t-transit-wa", 10).via, None);
        assert_eq!(route("t-transit-wb", 8).dev, "wan");
        // ...and the server answers back toward the client network.
        assert_eq!(
            route("t-transit-s", 8).via,
            Some(Ipv4Addr::new(198, 18, 10, 1))
        );
        // tbf on the hops after the delay line, so both directions are capped and the line
        // sees TSO packets whole: wa toward the router, wb toward the server.
        let at: Vec<(&str, &str)> = p
            .qdiscs
            .iter()
            .map(|q| (q.ns.as_str(), q.dev.as_str()))
            .collect();
        assert_eq!(at, [("t-transit-wa", "to-r"), ("t-transit-wb", "to-s")]);
        assert!(
            p.qdiscs
                .iter()
                .all(|q| q.tbf.is_some() && q.netem.is_none())
        );
        assert_eq!(p.delay_lines.len(), 1);
        assert_ne!(p.delay_lines[0].seeds[0], p.delay_lines[0].seeds[1]);
    }

    #[test]
    fn vpn_tunnel_runs_over_the_impaired_underlay() {
        let p = plan(
            &spec(vec![PathSpec::new(PathKind::Vpn).with(delayed())]),
            true,
        );
        let v = &p.vpns[0];
        assert_eq!(v.ga.0, "t-vpn-ga");
        assert_eq!(v.gb.0, "t-vpn-gb");
        // Inner: c—ga (198.18.0), ga═gb tunnel, gb—s (198.18.1). Underlay: ga—wa (.2), wa~wb
        // netem veth (.3), wb—gb (.4).
        assert_eq!(p.paths[0].server_addr, Ipv4Addr::new(198, 18, 1, 2));
        assert_eq!(v.ga.1, Ipv4Addr::new(198, 18, 2, 1));
        assert_eq!(v.gb.1, Ipv4Addr::new(198, 18, 4, 2));
        let ga_to_server = p
            .routes
            .iter()
            .find(|r| r.ns == "t-vpn-ga" && r.dest.addr == Ipv4Addr::new(198, 18, 1, 0))
            .unwrap();
        assert_eq!(ga_to_server.dev, "vpn", "test traffic goes into the tunnel");
        let ga_to_gb = p
            .routes
            .iter()
            .find(|r| r.ns == "t-vpn-ga" && r.dest.addr == Ipv4Addr::new(198, 18, 4, 0))
            .unwrap();
        assert_eq!(
            ga_to_gb.dev, "to-wa",
            "the tunnel's UDP goes over the underlay"
        );
        // With netem available and no jitter, Auto uses netem on a veth WAN link.
        assert_eq!(p.paths[0].impairment_by, Some(Backend::Netem));
        assert!(p.qdiscs.iter().all(|q| q.netem.is_some()));
        // The hub knows nothing of the underlay.
        assert!(
            p.routes
                .iter()
                .all(|r| r.ns != "t-c" || r.dest.addr.octets()[2] < 2)
        );
    }

    #[test]
    fn tbf_for_200_mbit() {
        let t = tbf_for(200_000_000, Duration::ZERO, None);
        assert_eq!(t.burst_bytes, 25_000);
        assert_eq!(t.limit_bytes, 250_000 + 25_000);
        let slow = tbf_for(1_000_000, Duration::from_millis(40), None);
        assert_eq!(
            tbf_for(150_000_000, Duration::ZERO, Some(60_000)).limit_bytes,
            60_000,
            "a queue of its own is the whole limit"
        );
        assert_eq!(slow.burst_bytes, 4 * 1514);
        assert_eq!(slow.limit_bytes, 10_000 + 4 * 1514);
    }
}
