//! The resource graph for a scenario: every VPC, subnet, route, security-group rule, host,
//! peering, Transit Gateway and accelerator `up` will create, with the hourly cost.
//!
//! Pure data computed from a [`Scenario`](crate::scenario::Scenario) without AWS, so `plan` can print it and tests can check
//! it. What AWS assigns later (ids, addresses, the availability zone when none is given) is not
//! here. Not for creating anything: that is [`crate::apply`], which walks this graph in
//! dependency order.
//!
//! Layout, per VPC: a `base` subnet holding the VPC's server host (and server-side VPN gateways,
//! and Transit Gateway attachments), and one subnet per path whose client runs in the VPC. Each
//! subnet has its own route table, so a path's routes name only its own subnets: a peering path
//! and a VPN path to the same server VPC coexist without conflicting routes, and replies take the
//! path the request came by.

use std::fmt;
use std::net::Ipv4Addr;

use serde::Serialize;

mod build;

use crate::cidr::Ipv4Cidr;
use crate::cost::CostEstimate;
use crate::hybrid::PrivateGateway;
use crate::scenario::{PathKind, PlacementStrategy, VpnFlavour};

/// UDP port the WireGuard gateways talk on.
pub const WIREGUARD_PORT: u16 = 51820;

/// UDP ports IPsec gateways talk IKE on: 500, and 4500 for NAT traversal (every AWS gateway is
/// behind its public address's 1:1 NAT, so IKE moves to 4500 and ESP is carried in UDP 4500).
pub const IKE_PORTS: [u16; 2] = [500, 4500];

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
    /// Your gateways the run's VPCs are joined to (hybrid `existing` paths).
    pub private_gateways: Vec<PrivateGatewayPlan>,
    /// VPN paths to your own VPN end.
    pub home_vpns: Vec<HomeVpnPlan>,
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
    /// A VPN gateway (WireGuard or IPsec) of one VPN path.
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

impl HostPlan {
    /// Whether this is a gateway of an IPsec tunnel (it boots the scenario's `gateway_ami`).
    pub fn is_ipsec_gateway(&self) -> bool {
        self.role == HostRole::Gateway
            && self
                .vpn
                .as_ref()
                .is_some_and(|v| v.flavour == crate::scenario::VpnFlavour::Ipsec)
    }
}

/// A gateway's half of a VPN tunnel.
#[derive(Debug, Clone, Serialize)]
pub struct VpnEnd {
    /// Path label.
    pub path: String,
    /// WireGuard or IPsec.
    pub flavour: VpnFlavour,
    /// The other gateway's key.
    pub peer_host: String,
    /// This end's tunnel address (a /30 from 169.254.200.0/24); WireGuard's interface has it,
    /// IPsec (policy-based: the traffic selectors are the two subnets) does not use it.
    pub tunnel_address: Ipv4Addr,
    /// The subnet this gateway stands in (its side's traffic selector for IPsec).
    pub local_subnet: Ipv4Cidr,
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

/// A Global Accelerator in front of one host: an `accelerator` path's server, or the IPsec
/// gateway of a `vpn` path to your own VPN end.
#[derive(Debug, Clone, Serialize)]
pub struct AcceleratorPlan {
    /// The path label.
    pub key: String,
    /// The host in its endpoint group.
    pub endpoint_host: String,
    /// Region of that host (the endpoint group's region).
    pub endpoint_region: String,
    /// Its listeners: TCP and UDP on the xbench port in front of a server; UDP 500 and 4500
    /// (IKE, and ESP in UDP) in front of a VPN gateway.
    pub listeners: Vec<(Protocol, u16)>,
}

impl AcceleratorPlan {
    /// The listeners as `plan` shows them: `TCP+UDP 5201`, `UDP 500, UDP 4500`.
    pub fn listener_label(&self) -> String {
        let mut ports: Vec<u16> = self.listeners.iter().map(|l| l.1).collect();
        ports.dedup();
        ports
            .iter()
            .map(|port| {
                let protocols: Vec<String> = self
                    .listeners
                    .iter()
                    .filter(|l| l.1 == *port)
                    .map(|l| l.0.as_str().to_uppercase())
                    .collect();
                format!("{} {port}", protocols.join("+"))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A `vpn` path to your own VPN end: the one IPsec gateway this tool makes, and what the
/// configuration it writes for your end needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HomeVpnPlan {
    /// Path label.
    pub path: String,
    /// The gateway's host key (`gw-<label>`).
    pub gateway: String,
    /// Your end's IKE identity (`home-<label>`), as the gateway's configuration names it.
    pub home_id: String,
    /// The VPC the gateway is in.
    pub vpc: String,
    /// The run's subnet behind the gateway: the server's `base`, or the path's client subnet.
    pub aws_subnet: Ipv4Cidr,
    /// The private block behind your VPN end.
    pub on_prem_cidr: Ipv4Cidr,
    /// The public address your VPN end comes from.
    pub public_ip: Ipv4Addr,
    /// The accelerator in front of the gateway, by key, if any.
    pub accelerator: Option<String>,
}

impl HomeVpnPlan {
    /// Your end's half of the tunnel: it dials, its traffic selector is your block.
    pub fn home_end(&self) -> VpnEnd {
        VpnEnd {
            path: self.path.clone(),
            flavour: VpnFlavour::Ipsec,
            peer_host: self.gateway.clone(),
            // Policy-based IPsec uses no tunnel address.
            tunnel_address: Ipv4Addr::UNSPECIFIED,
            local_subnet: self.on_prem_cidr,
            remote_subnet: self.aws_subnet,
            initiator: true,
        }
    }
}

/// A VPC joined to a gateway of yours for a hybrid `existing` path: the VGW attached to it, or
/// a Transit Gateway VPC attachment of its own. Your gateway is never changed otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrivateGatewayPlan {
    /// VPC name.
    pub vpc: String,
    /// Its region (the gateway must be there).
    pub region: String,
    /// The VPC's block: what your side routes back to the run.
    pub vpc_cidr: Ipv4Cidr,
    /// Your gateway.
    pub gateway: PrivateGateway,
    /// Your private blocks routed to it from this VPC.
    pub on_prem_cidrs: Vec<Ipv4Cidr>,
}

impl Plan {
    /// Lines for the hybrid joins in `region`, saying what is made and what stays yours.
    fn private_gateway_lines(&self, region: &str, lines: &mut Vec<String>) {
        for g in self.private_gateways.iter().filter(|g| g.region == region) {
            lines.push(match &g.gateway {
                PrivateGateway::Vgw(id) => format!(
                    "vgw attachment    your {id} attached to {} (detached by down; the gateway stays yours)",
                    g.vpc
                ),
                PrivateGateway::Tgw(id) => format!(
                    "tgw attachment    {} -> your {id} (deleted by down); your side: a route {} -> this attachment in {id}'s route table, unless it propagates",
                    g.vpc, g.vpc_cidr
                ),
            });
        }
    }
}

impl Plan {
    /// Lines for your VPN ends whose gateway is in `region`: what dials what, and what `up`
    /// writes for your end.
    fn home_vpn_lines(&self, region: &str, lines: &mut Vec<String>) {
        for h in self
            .home_vpns
            .iter()
            .filter(|h| self.vpc(&h.vpc).is_some_and(|v| v.region == region))
        {
            let dials = match &h.accelerator {
                Some(a) => format!("accelerator {a} in front of {}", h.gateway),
                None => format!("{}'s public IP", h.gateway),
            };
            lines.push(format!(
                "your vpn end      {} from {}: dials {dials}; {} (yours) <-> {}; its swanctl config is written at up",
                h.home_id, h.public_ip, h.on_prem_cidr, h.aws_subnet
            ));
        }
    }
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
    /// Your virtual private gateway or Transit Gateway (hybrid `existing` paths).
    YourGateway(PrivateGateway),
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
    /// ESP (IP protocol 50): IPsec's data when no NAT is in between (else it rides in UDP 4500).
    Esp,
    /// ICMP "destination unreachable, fragmentation needed" (type 3 code 4) only: what path-MTU
    /// discovery needs from routers anywhere on an internet or accelerator path.
    IcmpFragmentationNeeded,
}

impl Protocol {
    /// EC2's name (a number for protocols EC2 has no name for).
    pub fn as_str(&self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Icmp | Protocol::IcmpFragmentationNeeded => "icmp",
            Protocol::Esp => "50",
        }
    }

    /// EC2's from/to port pair: the port range, or for ICMP the type and code (-1: any).
    pub fn port_range(&self, port: Option<u16>) -> (i32, i32) {
        match (self, port) {
            (Protocol::IcmpFragmentationNeeded, _) => (3, 4),
            (_, Some(p)) => (i32::from(p), i32::from(p)),
            (_, None) => (-1, -1),
        }
    }

    /// The name `plan` prints.
    pub fn label(&self) -> &'static str {
        match self {
            Protocol::Esp => "esp (50)",
            Protocol::IcmpFragmentationNeeded => "icmp fragmentation-needed (3/4)",
            other => other.as_str(),
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
    /// A VPN path's flavour.
    pub vpn: Option<VpnFlavour>,
    /// Client side.
    pub client: PathClient,
    /// A fleet's other client hosts (`clients = N`: `client-<label>.2` ...), beside
    /// [`PathPlan::client`], which is its first; empty for one client.
    pub fleet: Vec<String>,
    /// What the client dials.
    pub target: PathTarget,
    /// The server host this tool makes (it holds the run's key); `None` for your own server.
    pub server_host: Option<String>,
}

/// Who may connect to one server host (its `xbench server --allow`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowPlan {
    /// Client subnets and your addresses, known before anything exists.
    pub cidrs: Vec<Ipv4Cidr>,
    /// Client hosts that reach the server from their public address, known once launched.
    pub host_public_ips: Vec<String>,
}

impl AllowPlan {
    /// What is known before the clients launch; a loopback address when that is nothing, so
    /// the server is never open to everyone while it waits for the rest.
    pub fn known_or_nobody(&self) -> Vec<Ipv4Cidr> {
        if self.cidrs.is_empty() {
            vec![Ipv4Cidr::host(Ipv4Addr::LOCALHOST)]
        } else {
            self.cidrs.clone()
        }
    }
}

/// Why a scenario cannot be laid out (beyond what [`Scenario`](crate::scenario::Scenario) checks).
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

impl Plan {
    /// The VPC called `name`.
    pub fn vpc(&self, name: &str) -> Option<&VpcPlan> {
        self.vpcs.iter().find(|v| v.name == name)
    }

    /// The VPN path to your own end labelled `path`, if it is one.
    pub fn home_vpn(&self, path: &str) -> Option<&HomeVpnPlan> {
        self.home_vpns.iter().find(|h| h.path == path)
    }

    /// The host called `key`.
    pub fn host(&self, key: &str) -> Option<&HostPlan> {
        self.hosts.iter().find(|h| h.key == key)
    }

    /// The distinct regions with resources, in first-use order (the accelerator API region is
    /// not included: see [`Plan::needs_accelerator_api`]).
    pub fn regions(&self) -> Vec<String> {
        crate::regions::distinct(self.vpcs.iter().map(|v| v.region.as_str()))
    }

    /// Who may connect to server host `server`: the client subnets of its peering, Transit
    /// Gateway and VPN paths (routed, not translated, so the server sees the client's private
    /// address), your addresses, and client hosts that come over public addresses (public
    /// paths, and accelerators, which preserve the client's address).
    pub fn allow_for(&self, server: &str) -> AllowPlan {
        let mut out = AllowPlan::default();
        for p in self
            .paths
            .iter()
            .filter(|p| p.server_host.as_deref() == Some(server))
        {
            match (&p.client, p.kind) {
                (PathClient::Address(a), _) => push_new(&mut out.cidrs, Ipv4Cidr::host(*a)),
                (PathClient::Host(h), PathKind::Peering | PathKind::Tgw | PathKind::Vpn) => {
                    let subnet = self.host(h).and_then(|host| {
                        self.vpc(&host.vpc)
                            .and_then(|v| v.subnets.iter().find(|s| s.key == host.subnet))
                    });
                    if let Some(s) = subnet {
                        push_new(&mut out.cidrs, s.cidr);
                    }
                }
                (PathClient::Host(h), _) => {
                    for h in std::iter::once(h).chain(&p.fleet) {
                        if !out.host_public_ips.contains(h) {
                            out.host_public_ips.push(h.clone());
                        }
                    }
                }
            }
        }
        out
    }

    /// Whether `up` will call the Global Accelerator API.
    pub fn needs_accelerator_api(&self) -> bool {
        !self.accelerators.is_empty()
    }

    /// Whether the run makes Transit Gateways or attaches its VPCs to yours.
    pub fn uses_transit_gateways(&self) -> bool {
        !self.tgws.is_empty()
            || self
                .private_gateways
                .iter()
                .any(|g| matches!(g.gateway, PrivateGateway::Tgw(_)))
    }

    /// How a path's kind is shown: `vpn (ipsec)`, `peering`.
    pub fn kind_label(p: &PathPlan) -> String {
        crate::scenario::kind_label(p.kind, p.vpn)
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
                self.vpc_lines(v, &mut lines);
            }
            self.join_lines(&region, &mut lines);
            self.private_gateway_lines(&region, &mut lines);
            self.home_vpn_lines(&region, &mut lines);
            for h in self
                .hosts
                .iter()
                .filter(|h| self.vpc(&h.vpc).is_some_and(|v| v.region == region))
            {
                let extra = match &h.vpn {
                    Some(v) if h.role == HostRole::Gateway => {
                        format!(", source/dest check off, {}", v.flavour.software())
                    }
                    _ => String::new(),
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
                        "accelerator       {} ({} -> {} in {})",
                        a.key,
                        a.listener_label(),
                        a.endpoint_host,
                        a.endpoint_region
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

    /// A VPC, its gateway, subnets with their routes, and groups with their rules.
    fn vpc_lines(&self, v: &VpcPlan, lines: &mut Vec<String>) {
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
                    RouteTarget::YourGateway(g) => format!("your {} {g}", g.what()),
                };
                lines.push(format!("  route           {} -> {target}", r.destination));
            }
        }
        for g in v.groups() {
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
                    r.protocol.label()
                ));
            }
        }
    }

    /// Peerings, Transit Gateways and TGW peerings requested from `region`.
    fn join_lines(&self, region: &str, lines: &mut Vec<String>) {
        for p in &self.peerings {
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
    }
}

fn push_new(list: &mut Vec<Ipv4Cidr>, c: Ipv4Cidr) {
    if !list.contains(&c) {
        list.push(c);
    }
}

impl VpcPlan {
    /// Its security groups.
    pub fn groups(&self) -> &'static [GroupKind] {
        if self.has_gateways {
            &[GroupKind::Hosts, GroupKind::Gateways]
        } else {
            &[GroupKind::Hosts]
        }
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
    use crate::cost::PriceTable;
    use crate::scenario::Scenario;

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
}
