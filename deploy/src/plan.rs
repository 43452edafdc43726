//! The resource graph for a scenario: every VPC, subnet, route, security-group rule, host,
//! peering, Transit Gateway and accelerator `up` will create, with the hourly cost.
//!
//! Pure data computed from a [`Scenario`] without AWS, so `plan` can print it and tests can check
//! it. What AWS assigns later (ids, addresses, the availability zone when none is given) is not
//! here. Not for creating anything: that is [`crate::apply`], which walks this graph in
//! dependency order.
//!
//! Layout, per VPC: a `base` subnet holding the VPC's server host (and server-side VPN gateways,
//! and Transit Gateway attachments), and one subnet per path whose client runs in the VPC. Each
//! subnet has its own route table, so a path's routes name only its own subnets: a peering path
//! and a VPN path to the same server VPC coexist without conflicting routes, and replies take the
//! path the request came by.

use std::collections::BTreeSet;
use std::fmt;
use std::net::Ipv4Addr;

use serde::Serialize;

use crate::cidr::Ipv4Cidr;
use crate::cost::{self, Billable, CostEstimate, PriceTable};
use crate::scenario::{End, PathKind, PlacementStrategy, Scenario};

/// UDP port the WireGuard gateways talk on.
pub const WIREGUARD_PORT: u16 = 51820;

/// The whole graph.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Scenario name.
    pub scenario: String,
    /// VPCs with their subnets.
    pub vpcs: Vec<VpcPlan>,
    /// Instances.
    pub hosts: Vec<HostPlan>,
    /// VPC peering connections.
    pub peerings: Vec<PeeringPlan>,
    /// Transit Gateways, one per region that has a `tgw` path.
    pub tgws: Vec<TgwPlan>,
    /// Inter-region Transit Gateway peerings.
    pub tgw_peerings: Vec<TgwPeeringPlan>,
    /// Placement groups.
    pub placement_groups: Vec<PlacementGroupPlan>,
    /// Global Accelerators.
    pub accelerators: Vec<AcceleratorPlan>,
    /// VPC route-table entries.
    pub routes: Vec<RoutePlan>,
    /// Security-group ingress rules.
    pub ingress: Vec<IngressPlan>,
    /// The paths, with how each client reaches its server.
    pub paths: Vec<PathPlan>,
    /// Hourly cost.
    pub cost: CostEstimate,
}

/// One VPC.
#[derive(Debug, Clone, Serialize)]
pub struct VpcPlan {
    /// Scenario name of the VPC.
    pub name: String,
    /// Region.
    pub region: String,
    /// Block.
    pub cidr: Ipv4Cidr,
    /// Zone for its subnets, if the scenario fixed one.
    pub az: Option<String>,
    /// Subnets; the first is `base`.
    pub subnets: Vec<SubnetPlan>,
    /// Whether VPN gateways live here (they get their own security group).
    pub has_gateways: bool,
    /// Key of the placement group its hosts launch into.
    pub placement_group: Option<String>,
}

/// A subnet and its route table (one each).
#[derive(Debug, Clone, Serialize)]
pub struct SubnetPlan {
    /// `base`, or `client-<label>`.
    pub key: String,
    /// Block.
    pub cidr: Ipv4Cidr,
}

/// What a host is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostRole {
    /// Runs `xbench server` (one per VPC, shared by the paths that end there).
    Server,
    /// Runs `xbench client` for one path.
    Client,
    /// A WireGuard gateway of one VPN path.
    Gateway,
}

impl fmt::Display for HostRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostRole::Server => "server",
            HostRole::Client => "client",
            HostRole::Gateway => "vpn gateway",
        })
    }
}

/// One instance.
#[derive(Debug, Clone, Serialize)]
pub struct HostPlan {
    /// `server-<vpc>`, `client-<label>`, `gw-<label>-client` or `gw-<label>-server`.
    pub key: String,
    /// What it is for.
    pub role: HostRole,
    /// VPC name.
    pub vpc: String,
    /// Subnet key.
    pub subnet: String,
    /// Instance type.
    pub instance_type: String,
    /// For gateways: the tunnel.
    pub vpn: Option<VpnEnd>,
}

/// A gateway's half of a WireGuard tunnel.
#[derive(Debug, Clone, Serialize)]
pub struct VpnEnd {
    /// Path label.
    pub path: String,
    /// The other gateway's key.
    pub peer_host: String,
    /// This end's tunnel address (a /30 from 169.254.200.0/24).
    pub tunnel_address: Ipv4Addr,
    /// The subnet behind the other gateway, routed into the tunnel.
    pub remote_subnet: Ipv4Cidr,
    /// Whether this end dials the other (the client side does; the server side listens).
    pub initiator: bool,
}

/// A VPC peering connection.
#[derive(Debug, Clone, Serialize)]
pub struct PeeringPlan {
    /// `pcx-<requester>-<accepter>`.
    pub key: String,
    /// VPC that asks.
    pub requester: String,
    /// VPC that accepts (in its own region).
    pub accepter: String,
}

/// A Transit Gateway.
#[derive(Debug, Clone, Serialize)]
pub struct TgwPlan {
    /// Region.
    pub region: String,
    /// VPCs attached (through their `base` subnet).
    pub attachments: Vec<String>,
}

/// A Transit Gateway peering attachment between two regions, with static routes both ways.
#[derive(Debug, Clone, Serialize)]
pub struct TgwPeeringPlan {
    /// `tgwpeer-<requester>-<accepter>`.
    pub key: String,
    /// Region that asks.
    pub requester_region: String,
    /// Region that accepts.
    pub accepter_region: String,
    /// Blocks the requester's TGW routes to the peering (the accepter side's VPCs).
    pub requester_routes: Vec<Ipv4Cidr>,
    /// Blocks the accepter's TGW routes to the peering.
    pub accepter_routes: Vec<Ipv4Cidr>,
}

/// A placement group.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementGroupPlan {
    /// `pg-<region>-<strategy>`.
    pub key: String,
    /// Region.
    pub region: String,
    /// Strategy.
    pub strategy: PlacementStrategy,
}

/// A Global Accelerator in front of one server host.
#[derive(Debug, Clone, Serialize)]
pub struct AcceleratorPlan {
    /// The path label.
    pub key: String,
    /// Server host key.
    pub server_host: String,
    /// Region of the server host (the endpoint group's region).
    pub endpoint_region: String,
    /// TCP and UDP listener port.
    pub port: u16,
}

/// Where a route sends traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteTarget {
    /// The VPC's internet gateway.
    InternetGateway,
    /// A peering connection, by key.
    Peering(String),
    /// The region's Transit Gateway.
    TransitGateway,
    /// A VPN gateway host's network interface, by host key.
    GatewayHost(String),
}

/// One route-table entry.
#[derive(Debug, Clone, Serialize)]
pub struct RoutePlan {
    /// VPC name.
    pub vpc: String,
    /// Subnet key (whose route table).
    pub subnet: String,
    /// Destination.
    pub destination: Ipv4Cidr,
    /// Target.
    pub target: RouteTarget,
}

/// Which security group of a VPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    /// Servers and clients.
    Hosts,
    /// VPN gateways.
    Gateways,
}

/// IP protocol of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// ICMP (all types: ping, and "fragmentation needed" for path-MTU discovery).
    Icmp,
}

impl Protocol {
    /// EC2's name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Icmp => "icmp",
        }
    }
}

/// Where allowed traffic comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IngressSource {
    /// A fixed block.
    Cidr(Ipv4Cidr),
    /// The public address a host gets at launch, by host key.
    HostPublicIp(String),
}

/// One ingress rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct IngressPlan {
    /// VPC name.
    pub vpc: String,
    /// Group.
    pub group: GroupKind,
    /// Protocol.
    pub protocol: Protocol,
    /// Port (`None` for ICMP).
    pub port: Option<u16>,
    /// Source.
    pub source: IngressSource,
}

/// Who runs the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathClient {
    /// A host this tool creates, by key.
    Host(String),
    /// The user's own host, by address.
    Address(Ipv4Addr),
}

/// What address the client dials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathTarget {
    /// The server host's private address.
    PrivateIp(String),
    /// The server host's public address.
    PublicIp(String),
    /// The accelerator's first static address, by accelerator key.
    Accelerator(String),
    /// The user's own server, by address.
    Address(Ipv4Addr),
}

/// One path.
#[derive(Debug, Clone, Serialize)]
pub struct PathPlan {
    /// Label.
    pub label: String,
    /// Kind.
    pub kind: PathKind,
    /// Client side.
    pub client: PathClient,
    /// What the client dials.
    pub target: PathTarget,
}

/// Why a scenario cannot be laid out (beyond what [`Scenario`] checks).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The VPC block cannot hold its subnets.
    #[error(
        "vpc '{vpc}' ({cidr}) is too small for its {count} subnets (each at least a /28); use a larger block such as a /20"
    )]
    VpcTooSmall {
        /// VPC.
        vpc: String,
        /// Its block.
        cidr: Ipv4Cidr,
        /// Subnets needed.
        count: usize,
    },
    /// More VPN paths than tunnel address blocks.
    #[error("at most 64 vpn paths fit the tunnel address range 169.254.200.0/24")]
    TooManyVpnPaths,
}

fn subnet_prefix(vpc: Ipv4Cidr, count: usize) -> Option<u8> {
    let bits = usize::BITS - (count.max(1) - 1).leading_zeros();
    let prefix = (u32::from(vpc.prefix()) + bits).max(24);
    u8::try_from(prefix).ok().filter(|p| *p <= 28)
}

impl Plan {
    /// Lays out `scenario`, priced with `prices`.
    pub fn build(scenario: &Scenario, prices: &PriceTable) -> Result<Plan, PlanError> {
        let mut vpcs = Vec::new();
        let mut placement_groups: Vec<PlacementGroupPlan> = Vec::new();
        for v in &scenario.vpcs {
            let mut keys = vec!["base".to_owned()];
            for p in &scenario.paths {
                if p.client == End::Vpc(v.name.clone()) {
                    keys.push(format!("client-{}", p.label));
                }
            }
            let too_small = || PlanError::VpcTooSmall {
                vpc: v.name.clone(),
                cidr: v.cidr,
                count: keys.len(),
            };
            let prefix = subnet_prefix(v.cidr, keys.len()).ok_or_else(too_small)?;
            let subnets = keys
                .iter()
                .enumerate()
                .map(|(i, key)| {
                    let index = u32::try_from(i).map_err(|_| too_small())?;
                    Ok(SubnetPlan {
                        key: key.clone(),
                        cidr: v.cidr.subnet(prefix, index).ok_or_else(too_small)?,
                    })
                })
                .collect::<Result<Vec<_>, PlanError>>()?;
            let placement_group = v.placement.map(|strategy| {
                let key = format!("pg-{}-{strategy}", v.region);
                if !placement_groups.iter().any(|g| g.key == key) {
                    placement_groups.push(PlacementGroupPlan {
                        key: key.clone(),
                        region: v.region.clone(),
                        strategy,
                    });
                }
                key
            });
            vpcs.push(VpcPlan {
                name: v.name.clone(),
                region: v.region.clone(),
                cidr: v.cidr,
                az: v.az.clone(),
                subnets,
                has_gateways: false,
                placement_group,
            });
        }

        let subnet_of = |vpcs: &[VpcPlan], vpc: &str, key: &str| -> Ipv4Cidr {
            vpcs.iter()
                .find(|v| v.name == vpc)
                .and_then(|v| v.subnets.iter().find(|s| s.key == key))
                .map(|s| s.cidr)
                // Both names come from the loop above over the same scenario.
                .unwrap_or_else(|| unreachable!("subnet {key} of {vpc} was laid out above"))
        };
        let region_of = |vpc: &str| -> String {
            scenario
                .vpc(vpc)
                .map(|v| v.region.clone())
                .unwrap_or_else(|| unreachable!("scenario checked that vpc {vpc} exists"))
        };
        let instance_type = |vpc: &str| -> String {
            scenario
                .vpc(vpc)
                .map(|v| scenario.instance_type_for(v).to_owned())
                .unwrap_or_else(|| scenario.instance_type.clone())
        };

        let mut hosts: Vec<HostPlan> = Vec::new();
        let mut peerings = Vec::new();
        let mut tgws: Vec<TgwPlan> = Vec::new();
        let mut tgw_peerings: Vec<TgwPeeringPlan> = Vec::new();
        let mut accelerators = Vec::new();
        let mut routes = Vec::new();
        let mut ingress: BTreeSet<IngressPlan> = BTreeSet::new();
        let mut paths = Vec::new();
        let mut vpn_index: u32 = 0;

        // One server host per VPC that is the server end of a path.
        for v in &scenario.vpcs {
            if scenario
                .paths
                .iter()
                .any(|p| p.server == End::Vpc(v.name.clone()))
            {
                hosts.push(HostPlan {
                    key: format!("server-{}", v.name),
                    role: HostRole::Server,
                    vpc: v.name.clone(),
                    subnet: "base".into(),
                    instance_type: instance_type(&v.name),
                    vpn: None,
                });
            }
        }

        for p in &scenario.paths {
            let client = match &p.client {
                End::Vpc(c) => {
                    let key = format!("client-{}", p.label);
                    hosts.push(HostPlan {
                        key: key.clone(),
                        role: HostRole::Client,
                        vpc: c.clone(),
                        subnet: key.clone(),
                        instance_type: instance_type(c),
                        vpn: None,
                    });
                    PathClient::Host(key)
                }
                End::Address(a) => PathClient::Address(*a),
            };
            let target = match (&p.kind, &p.client, &p.server) {
                (PathKind::Peering | PathKind::Tgw | PathKind::Vpn, End::Vpc(c), End::Vpc(s)) => {
                    let client_subnet = subnet_of(&vpcs, c, &format!("client-{}", p.label));
                    let server_subnet = subnet_of(&vpcs, s, "base");
                    let (to_server, to_client) = match p.kind {
                        PathKind::Peering => {
                            let key = format!("pcx-{c}-{s}");
                            peerings.push(PeeringPlan {
                                key: key.clone(),
                                requester: c.clone(),
                                accepter: s.clone(),
                            });
                            (RouteTarget::Peering(key.clone()), RouteTarget::Peering(key))
                        }
                        PathKind::Tgw => {
                            let (rc, rs) = (region_of(c), region_of(s));
                            for (region, vpc) in [(&rc, c), (&rs, s)] {
                                match tgws.iter_mut().find(|t| &t.region == region) {
                                    Some(t) if !t.attachments.contains(vpc) => {
                                        t.attachments.push(vpc.clone())
                                    }
                                    Some(_) => {}
                                    None => tgws.push(TgwPlan {
                                        region: region.clone(),
                                        attachments: vec![vpc.clone()],
                                    }),
                                }
                            }
                            if rc != rs {
                                let c_cidr = scenario.vpc(c).map(|v| v.cidr);
                                let s_cidr = scenario.vpc(s).map(|v| v.cidr);
                                let existing = tgw_peerings.iter_mut().find(|t| {
                                    (t.requester_region == rc && t.accepter_region == rs)
                                        || (t.requester_region == rs && t.accepter_region == rc)
                                });
                                let t = match existing {
                                    Some(t) => t,
                                    None => {
                                        tgw_peerings.push(TgwPeeringPlan {
                                            key: format!("tgwpeer-{rc}-{rs}"),
                                            requester_region: rc.clone(),
                                            accepter_region: rs.clone(),
                                            requester_routes: Vec::new(),
                                            accepter_routes: Vec::new(),
                                        });
                                        // Just pushed.
                                        tgw_peerings.last_mut().unwrap_or_else(|| unreachable!())
                                    }
                                };
                                let (near, far) = if t.requester_region == rc {
                                    (s_cidr, c_cidr)
                                } else {
                                    (c_cidr, s_cidr)
                                };
                                for (list, cidr) in [
                                    (&mut t.requester_routes, near),
                                    (&mut t.accepter_routes, far),
                                ] {
                                    if let Some(cidr) = cidr
                                        && !list.contains(&cidr)
                                    {
                                        list.push(cidr);
                                    }
                                }
                            }
                            (RouteTarget::TransitGateway, RouteTarget::TransitGateway)
                        }
                        _ => {
                            if vpn_index >= 64 {
                                return Err(PlanError::TooManyVpnPaths);
                            }
                            let base = u32::from(Ipv4Addr::new(169, 254, 200, 0)) + vpn_index * 4;
                            vpn_index += 1;
                            let gw_client = format!("gw-{}-client", p.label);
                            let gw_server = format!("gw-{}-server", p.label);
                            // The server-side gateway is listed first: it is launched first so
                            // the client side can be given its address.
                            hosts.push(HostPlan {
                                key: gw_server.clone(),
                                role: HostRole::Gateway,
                                vpc: s.clone(),
                                subnet: "base".into(),
                                instance_type: instance_type(s),
                                vpn: Some(VpnEnd {
                                    path: p.label.clone(),
                                    peer_host: gw_client.clone(),
                                    tunnel_address: Ipv4Addr::from(base + 2),
                                    remote_subnet: client_subnet,
                                    initiator: false,
                                }),
                            });
                            hosts.push(HostPlan {
                                key: gw_client.clone(),
                                role: HostRole::Gateway,
                                vpc: c.clone(),
                                subnet: format!("client-{}", p.label),
                                instance_type: instance_type(c),
                                vpn: Some(VpnEnd {
                                    path: p.label.clone(),
                                    peer_host: gw_server.clone(),
                                    tunnel_address: Ipv4Addr::from(base + 1),
                                    remote_subnet: server_subnet,
                                    initiator: true,
                                }),
                            });
                            for v in vpcs.iter_mut().filter(|v| &v.name == c || &v.name == s) {
                                v.has_gateways = true;
                            }
                            for (vpc, peer) in [(s, &gw_client), (c, &gw_server)] {
                                ingress.insert(IngressPlan {
                                    vpc: vpc.clone(),
                                    group: GroupKind::Gateways,
                                    protocol: Protocol::Udp,
                                    port: Some(WIREGUARD_PORT),
                                    source: IngressSource::HostPublicIp(peer.clone()),
                                });
                            }
                            (
                                RouteTarget::GatewayHost(gw_client),
                                RouteTarget::GatewayHost(gw_server),
                            )
                        }
                    };
                    routes.push(RoutePlan {
                        vpc: c.clone(),
                        subnet: format!("client-{}", p.label),
                        destination: server_subnet,
                        target: to_server,
                    });
                    routes.push(RoutePlan {
                        vpc: s.clone(),
                        subnet: "base".into(),
                        destination: client_subnet,
                        target: to_client,
                    });
                    PathTarget::PrivateIp(format!("server-{s}"))
                }
                (PathKind::Public | PathKind::Accelerator, _, End::Vpc(s)) => {
                    let source = match &client {
                        PathClient::Host(h) => IngressSource::HostPublicIp(h.clone()),
                        PathClient::Address(a) => IngressSource::Cidr(Ipv4Cidr::host(*a)),
                    };
                    for protocol in [Protocol::Tcp, Protocol::Udp] {
                        ingress.insert(IngressPlan {
                            vpc: s.clone(),
                            group: GroupKind::Hosts,
                            protocol,
                            port: Some(scenario.port),
                            source: source.clone(),
                        });
                    }
                    if p.kind == PathKind::Public {
                        PathTarget::PublicIp(format!("server-{s}"))
                    } else {
                        accelerators.push(AcceleratorPlan {
                            key: p.label.clone(),
                            server_host: format!("server-{s}"),
                            endpoint_region: region_of(s),
                            port: scenario.port,
                        });
                        PathTarget::Accelerator(p.label.clone())
                    }
                }
                (PathKind::Existing, End::Address(a), End::Vpc(s)) => {
                    for protocol in [Protocol::Tcp, Protocol::Udp] {
                        ingress.insert(IngressPlan {
                            vpc: s.clone(),
                            group: GroupKind::Hosts,
                            protocol,
                            port: Some(scenario.port),
                            source: IngressSource::Cidr(Ipv4Cidr::host(*a)),
                        });
                    }
                    PathTarget::PublicIp(format!("server-{s}"))
                }
                (PathKind::Existing, _, End::Address(a)) => PathTarget::Address(*a),
                _ => unreachable!("Scenario::check admits no other combination of kind and ends"),
            };
            paths.push(PathPlan {
                label: p.label.clone(),
                kind: p.kind,
                client,
                target,
            });
        }

        // Every group: the xbench port and ICMP between the scenario's own blocks, and SSH from
        // where the scenario allows it (nowhere by default).
        for v in &vpcs {
            let groups: &[GroupKind] = if v.has_gateways {
                &[GroupKind::Hosts, GroupKind::Gateways]
            } else {
                &[GroupKind::Hosts]
            };
            for &group in groups {
                for other in &vpcs {
                    for (protocol, port) in [
                        (Protocol::Tcp, Some(scenario.port)),
                        (Protocol::Udp, Some(scenario.port)),
                        (Protocol::Icmp, None),
                    ] {
                        ingress.insert(IngressPlan {
                            vpc: v.name.clone(),
                            group,
                            protocol,
                            port,
                            source: IngressSource::Cidr(other.cidr),
                        });
                    }
                }
                for cidr in &scenario.ssh_from {
                    ingress.insert(IngressPlan {
                        vpc: v.name.clone(),
                        group,
                        protocol: Protocol::Tcp,
                        port: Some(22),
                        source: IngressSource::Cidr(*cidr),
                    });
                }
            }
            for s in &v.subnets {
                routes.push(RoutePlan {
                    vpc: v.name.clone(),
                    subnet: s.key.clone(),
                    destination: Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0)
                        .unwrap_or_else(|| unreachable!("0.0.0.0/0 is a valid block")),
                    target: RouteTarget::InternetGateway,
                });
            }
        }

        let mut billables = Vec::new();
        for h in &hosts {
            let region = region_of(&h.vpc);
            billables.push((region.clone(), Billable::Instance(h.instance_type.clone())));
            billables.push((region.clone(), Billable::PublicIpv4));
            billables.push((region, Billable::RootVolume));
        }
        for t in &tgws {
            for _ in &t.attachments {
                billables.push((t.region.clone(), Billable::TgwAttachment));
            }
        }
        for t in &tgw_peerings {
            billables.push((t.requester_region.clone(), Billable::TgwAttachment));
            billables.push((t.accepter_region.clone(), Billable::TgwAttachment));
        }
        for _ in &accelerators {
            billables.push(("global".to_owned(), Billable::Accelerator));
        }
        let cost = cost::estimate(&billables, prices);

        Ok(Plan {
            scenario: scenario.name.clone(),
            vpcs,
            hosts,
            peerings,
            tgws,
            tgw_peerings,
            placement_groups,
            accelerators,
            routes,
            ingress: ingress.into_iter().collect(),
            paths,
            cost,
        })
    }

    /// The VPC called `name`.
    pub fn vpc(&self, name: &str) -> Option<&VpcPlan> {
        self.vpcs.iter().find(|v| v.name == name)
    }

    /// The host called `key`.
    pub fn host(&self, key: &str) -> Option<&HostPlan> {
        self.hosts.iter().find(|h| h.key == key)
    }

    /// The distinct regions with resources, in first-use order (the accelerator API region is
    /// not included: see [`Plan::needs_accelerator_api`]).
    pub fn regions(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for v in &self.vpcs {
            if !out.contains(&v.region) {
                out.push(v.region.clone());
            }
        }
        out
    }

    /// Whether `up` will call the Global Accelerator API.
    pub fn needs_accelerator_api(&self) -> bool {
        !self.accelerators.is_empty()
    }

    /// Every resource as printable lines, grouped by region, in creation order.
    pub fn listing(&self) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for region in self.regions() {
            let mut lines = Vec::new();
            for g in self.placement_groups.iter().filter(|g| g.region == region) {
                lines.push(format!("placement group   {} ({})", g.key, g.strategy));
            }
            for v in self.vpcs.iter().filter(|v| v.region == region) {
                lines.push(format!(
                    "vpc               {} {}{}",
                    v.name,
                    v.cidr,
                    v.az.as_ref()
                        .map(|a| format!(" in {a}"))
                        .unwrap_or_default()
                ));
                lines.push(format!("internet gateway  {}", v.name));
                for s in &v.subnets {
                    lines.push(format!("subnet + routes   {}/{} {}", v.name, s.key, s.cidr));
                    for r in self
                        .routes
                        .iter()
                        .filter(|r| r.vpc == v.name && r.subnet == s.key)
                    {
                        let target = match &r.target {
                            RouteTarget::InternetGateway => "internet gateway".to_owned(),
                            RouteTarget::Peering(k) => format!("peering {k}"),
                            RouteTarget::TransitGateway => "transit gateway".to_owned(),
                            RouteTarget::GatewayHost(h) => format!("vpn gateway {h}"),
                        };
                        lines.push(format!("  route           {} -> {target}", r.destination));
                    }
                }
                let groups: &[GroupKind] = if v.has_gateways {
                    &[GroupKind::Hosts, GroupKind::Gateways]
                } else {
                    &[GroupKind::Hosts]
                };
                for g in groups {
                    lines.push(format!(
                        "security group    {}/{}",
                        v.name,
                        match g {
                            GroupKind::Hosts => "hosts",
                            GroupKind::Gateways => "vpn-gateways",
                        }
                    ));
                    for r in self
                        .ingress
                        .iter()
                        .filter(|r| r.vpc == v.name && r.group == *g)
                    {
                        let port = r.port.map(|p| format!(" {p}")).unwrap_or_default();
                        let from = match &r.source {
                            IngressSource::Cidr(c) => c.to_string(),
                            IngressSource::HostPublicIp(h) => format!("public IP of {h}"),
                        };
                        lines.push(format!(
                            "  allow in        {}{port} from {from}",
                            r.protocol.as_str()
                        ));
                    }
                }
            }
            for p in self.peerings.iter() {
                if self.vpc(&p.requester).is_some_and(|v| v.region == region) {
                    let accepter_region = self
                        .vpc(&p.accepter)
                        .map(|v| v.region.as_str())
                        .unwrap_or("?");
                    lines.push(format!(
                        "vpc peering       {} ({} -> {}, accepted in {accepter_region})",
                        p.key, p.requester, p.accepter
                    ));
                }
            }
            for t in self.tgws.iter().filter(|t| t.region == region) {
                lines.push(format!(
                    "transit gateway   attachments: {}",
                    t.attachments.join(", ")
                ));
            }
            for t in self
                .tgw_peerings
                .iter()
                .filter(|t| t.requester_region == region)
            {
                lines.push(format!(
                    "tgw peering       {} (accepted in {}; static routes {} / {})",
                    t.key,
                    t.accepter_region,
                    join(&t.requester_routes),
                    join(&t.accepter_routes)
                ));
            }
            for h in self
                .hosts
                .iter()
                .filter(|h| self.vpc(&h.vpc).is_some_and(|v| v.region == region))
            {
                let extra = if h.role == HostRole::Gateway {
                    ", source/dest check off, WireGuard"
                } else {
                    ""
                };
                lines.push(format!(
                    "instance          {} ({}, {}, in {}/{}{extra})",
                    h.key, h.role, h.instance_type, h.vpc, h.subnet
                ));
            }
            out.push((region, lines));
        }
        if !self.accelerators.is_empty() {
            let lines = self
                .accelerators
                .iter()
                .map(|a| {
                    format!(
                        "accelerator       {} (TCP+UDP {} -> {} in {})",
                        a.key, a.port, a.server_host, a.endpoint_region
                    )
                })
                .collect();
            out.push((
                format!("global (API in {})", crate::regions::ACCELERATOR_API_REGION),
                lines,
            ));
        }
        out
    }
}

fn join(c: &[Ipv4Cidr]) -> String {
    c.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Plan {
        let s = Scenario::from_toml(text).unwrap();
        Plan::build(&s, &PriceTable::shipped()).unwrap()
    }

    #[test]
    fn peering_and_vpn_to_one_server_do_not_share_routes() {
        let p = plan(
            r#"
name = "r000"
instance_type = "m5.large"
[[vpc]]
region = "us-east-1"
cidr = "10.1.0.0/16"
[[vpc]]
region = "ap-southeast-2"
cidr = "10.2.0.0/16"
[[path]]
kind = "peering"
client = "us-east-1"
server = "ap-southeast-2"
[[path]]
kind = "vpn"
client = "us-east-1"
server = "ap-southeast-2"
"#,
        );
        // One server, two clients, two gateways.
        assert_eq!(p.hosts.len(), 5);
        let base_routes: Vec<_> = p
            .routes
            .iter()
            .filter(|r| r.vpc == "ap-southeast-2" && r.subnet == "base")
            .map(|r| r.destination.to_string())
            .collect();
        assert_eq!(base_routes, vec!["10.1.1.0/24", "10.1.2.0/24", "0.0.0.0/0"]);
        assert!(p.cost.total_hourly > 0.0);
    }

    #[test]
    fn cross_region_tgw_gets_peering_with_static_routes() {
        let p = plan(
            r#"
name = "t"
instance_type = "m5.large"
[[vpc]]
region = "us-east-1"
cidr = "10.1.0.0/16"
[[vpc]]
region = "eu-west-2"
cidr = "10.2.0.0/16"
[[path]]
kind = "tgw"
client = "us-east-1"
server = "eu-west-2"
"#,
        );
        assert_eq!(p.tgws.len(), 2);
        assert_eq!(p.tgw_peerings.len(), 1);
        assert_eq!(
            p.tgw_peerings[0].requester_routes[0].to_string(),
            "10.2.0.0/16"
        );
        assert_eq!(
            p.tgw_peerings[0].accepter_routes[0].to_string(),
            "10.1.0.0/16"
        );
    }

    #[test]
    fn subnet_sizes_fit_small_vpcs() {
        let v: Ipv4Cidr = "10.0.0.0/26".parse().unwrap();
        assert_eq!(subnet_prefix(v, 3), Some(28));
        assert_eq!(subnet_prefix(v, 5), None);
        assert_eq!(subnet_prefix("10.0.0.0/16".parse().unwrap(), 1), Some(24));
    }
}
