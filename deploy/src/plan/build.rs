//! [`Plan::build`]: a scenario laid out step by step — VPCs and their subnets, one server
//! host per VPC that ends a path, then each path by its kind (what it adds: routes, a
//! peering, Transit Gateways, a pair of VPN gateways, security-group rules, an accelerator),
//! the rules every group gets, and the cost.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use super::*;
use crate::cost::{self, Billable, PriceTable};
use crate::scenario::{End, PathKind, PathSpec, Scenario, VpnFlavour};

mod home;
mod hybrid;

impl Plan {
    /// Lays out `scenario`, priced with `prices`.
    pub fn build(scenario: &Scenario, prices: &PriceTable) -> Result<Plan, PlanError> {
        let mut b = Builder {
            s: scenario,
            vpcs: Vec::new(),
            placement_groups: Vec::new(),
            hosts: Vec::new(),
            peerings: Vec::new(),
            tgws: Vec::new(),
            tgw_peerings: Vec::new(),
            accelerators: Vec::new(),
            private_gateways: Vec::new(),
            home_vpns: Vec::new(),
            routes: Vec::new(),
            ingress: BTreeSet::new(),
            paths: Vec::new(),
            vpn_index: 0,
        };
        for v in &scenario.vpcs {
            b.vpc(v)?;
        }
        b.servers();
        for p in &scenario.paths {
            b.path(p)?;
        }
        b.common_rules();
        b.path_mtu_rules();
        let cost = cost::estimate(&b.billables(), prices);
        Ok(Plan {
            scenario: scenario.name.clone(),
            vpcs: b.vpcs,
            hosts: b.hosts,
            peerings: b.peerings,
            tgws: b.tgws,
            tgw_peerings: b.tgw_peerings,
            placement_groups: b.placement_groups,
            accelerators: b.accelerators,
            private_gateways: b.private_gateways,
            home_vpns: b.home_vpns,
            routes: b.routes,
            ingress: b.ingress.into_iter().collect(),
            paths: b.paths,
            cost,
        })
    }
}

struct Builder<'a> {
    s: &'a Scenario,
    vpcs: Vec<VpcPlan>,
    placement_groups: Vec<PlacementGroupPlan>,
    hosts: Vec<HostPlan>,
    peerings: Vec<PeeringPlan>,
    tgws: Vec<TgwPlan>,
    tgw_peerings: Vec<TgwPeeringPlan>,
    accelerators: Vec<AcceleratorPlan>,
    private_gateways: Vec<PrivateGatewayPlan>,
    home_vpns: Vec<HomeVpnPlan>,
    routes: Vec<RoutePlan>,
    ingress: BTreeSet<IngressPlan>,
    paths: Vec<PathPlan>,
    vpn_index: u32,
}

fn subnet_prefix(vpc: Ipv4Cidr, count: usize) -> Option<u8> {
    let bits = usize::BITS - (count.max(1) - 1).leading_zeros();
    let prefix = (u32::from(vpc.prefix()) + bits).max(24);
    u8::try_from(prefix).ok().filter(|p| *p <= 28)
}

impl Builder<'_> {
    /// A VPC: `base` and one subnet per path whose client runs here, and its placement group.
    fn vpc(&mut self, v: &crate::scenario::VpcSpec) -> Result<(), PlanError> {
        let mut keys = vec!["base".to_owned()];
        for p in &self.s.paths {
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
            if !self.placement_groups.iter().any(|g| g.key == key) {
                self.placement_groups.push(PlacementGroupPlan {
                    key: key.clone(),
                    region: v.region.clone(),
                    strategy,
                });
            }
            key
        });
        self.vpcs.push(VpcPlan {
            name: v.name.clone(),
            region: v.region.clone(),
            cidr: v.cidr,
            az: v.az.clone(),
            subnets,
            has_gateways: false,
            placement_group,
        });
        Ok(())
    }

    /// One server host per VPC that is the server end of a path.
    fn servers(&mut self) {
        for v in &self.s.vpcs {
            if self
                .s
                .paths
                .iter()
                .any(|p| p.server == End::Vpc(v.name.clone()))
            {
                self.hosts.push(HostPlan {
                    key: format!("server-{}", v.name),
                    role: HostRole::Server,
                    vpc: v.name.clone(),
                    subnet: "base".into(),
                    instance_type: self.instance_type(&v.name),
                    vpn: None,
                });
            }
        }
    }

    fn subnet_of(&self, vpc: &str, key: &str) -> Ipv4Cidr {
        self.vpcs
            .iter()
            .find(|v| v.name == vpc)
            .and_then(|v| v.subnets.iter().find(|s| s.key == key))
            .map(|s| s.cidr)
            // Both names come from the same scenario the subnets were laid out from.
            .unwrap_or_else(|| unreachable!("subnet {key} of {vpc} was laid out"))
    }

    fn region_of(&self, vpc: &str) -> String {
        self.s
            .vpc(vpc)
            .map(|v| v.region.clone())
            .unwrap_or_else(|| unreachable!("scenario checked that vpc {vpc} exists"))
    }

    fn instance_type(&self, vpc: &str) -> String {
        self.s
            .vpc(vpc)
            .map(|v| self.s.instance_type_for(v).to_owned())
            .unwrap_or_else(|| self.s.instance_type.clone())
    }

    /// One path: its client host, and what its kind adds.
    fn path(&mut self, p: &PathSpec) -> Result<(), PlanError> {
        let mut fleet = Vec::new();
        let client = match &p.client {
            End::Vpc(c) => {
                let key = format!("client-{}", p.label);
                // A fleet's first instance keeps the single client's key (its tags, its
                // readiness probe); the others are `client-<label>.2` ... in the same subnet
                // (a '.' cannot be in a label, so no other path's key can collide).
                for i in 1..=p.clients {
                    let host = if i == 1 {
                        key.clone()
                    } else {
                        format!("{key}.{i}")
                    };
                    if i > 1 {
                        fleet.push(host.clone());
                    }
                    self.hosts.push(HostPlan {
                        key: host,
                        role: HostRole::Client,
                        vpc: c.clone(),
                        subnet: key.clone(),
                        instance_type: self.instance_type(c),
                        vpn: None,
                    });
                }
                PathClient::Host(key)
            }
            End::Address(a) => PathClient::Address(*a),
        };
        let target = match (&p.kind, &p.client, &p.server) {
            (PathKind::Peering | PathKind::Tgw | PathKind::Vpn, End::Vpc(c), End::Vpc(s)) => {
                self.private_path(p, c, s)?
            }
            (PathKind::Public | PathKind::Accelerator, _, End::Vpc(s)) => {
                for h in &fleet {
                    self.allow_port(s, IngressSource::HostPublicIp(h.clone()));
                }
                self.public_path(p, &client, s)
            }
            (PathKind::Vpn, _, _) if p.home.is_some() => self.home_vpn_path(p)?,
            (PathKind::Existing, _, _) if p.hybrid.is_some() => self.hybrid_path(p),
            (PathKind::Existing, End::Address(a), End::Vpc(s)) => {
                self.allow_port(s, IngressSource::Cidr(Ipv4Cidr::host(*a)));
                PathTarget::PublicIp(format!("server-{s}"))
            }
            (PathKind::Existing, _, End::Address(a)) => PathTarget::Address(*a),
            _ => unreachable!("Scenario::check admits no other combination of kind and ends"),
        };
        let server_host = match &p.server {
            End::Vpc(s) => Some(format!("server-{s}")),
            End::Address(_) => None,
        };
        self.paths.push(PathPlan {
            label: p.label.clone(),
            kind: p.kind,
            vpn: p.vpn,
            client,
            fleet,
            target,
            server_host,
        });
        Ok(())
    }

    /// Peering, Transit Gateway and VPN paths: a route each way between the client's subnet
    /// and the server's `base` subnet, through what the kind builds.
    fn private_path(&mut self, p: &PathSpec, c: &str, s: &str) -> Result<PathTarget, PlanError> {
        let client_subnet = self.subnet_of(c, &format!("client-{}", p.label));
        let server_subnet = self.subnet_of(s, "base");
        let (to_server, to_client) = match p.kind {
            PathKind::Peering => {
                let key = format!("pcx-{c}-{s}");
                self.peerings.push(PeeringPlan {
                    key: key.clone(),
                    requester: c.to_owned(),
                    accepter: s.to_owned(),
                });
                (RouteTarget::Peering(key.clone()), RouteTarget::Peering(key))
            }
            PathKind::Tgw => {
                self.tgw_path(c, s);
                (RouteTarget::TransitGateway, RouteTarget::TransitGateway)
            }
            _ => self.vpn_path(p, c, s, client_subnet, server_subnet)?,
        };
        self.routes.push(RoutePlan {
            vpc: c.to_owned(),
            subnet: format!("client-{}", p.label),
            destination: server_subnet,
            target: to_server,
        });
        self.routes.push(RoutePlan {
            vpc: s.to_owned(),
            subnet: "base".into(),
            destination: client_subnet,
            target: to_client,
        });
        Ok(PathTarget::PrivateIp(format!("server-{s}")))
    }

    /// A Transit Gateway in each region with both VPCs attached, and across two regions a
    /// TGW peering with static routes to the far VPC.
    fn tgw_path(&mut self, c: &str, s: &str) {
        let (rc, rs) = (self.region_of(c), self.region_of(s));
        for (region, vpc) in [(&rc, c), (&rs, s)] {
            match self.tgws.iter_mut().find(|t| &t.region == region) {
                Some(t) if !t.attachments.iter().any(|a| a == vpc) => {
                    t.attachments.push(vpc.to_owned())
                }
                Some(_) => {}
                None => self.tgws.push(TgwPlan {
                    region: region.clone(),
                    attachments: vec![vpc.to_owned()],
                }),
            }
        }
        if rc == rs {
            return;
        }
        let c_cidr = self.s.vpc(c).map(|v| v.cidr);
        let s_cidr = self.s.vpc(s).map(|v| v.cidr);
        let i = match self.tgw_peerings.iter().position(|t| {
            (t.requester_region == rc && t.accepter_region == rs)
                || (t.requester_region == rs && t.accepter_region == rc)
        }) {
            Some(i) => i,
            None => {
                self.tgw_peerings.push(TgwPeeringPlan {
                    key: format!("tgwpeer-{rc}-{rs}"),
                    requester_region: rc.clone(),
                    accepter_region: rs.clone(),
                    requester_routes: Vec::new(),
                    accepter_routes: Vec::new(),
                });
                self.tgw_peerings.len() - 1
            }
        };
        let t = &mut self.tgw_peerings[i];
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

    /// Two VPN gateways (server side listed first: it is launched first so the client side can
    /// be given its address), their group's rules (WireGuard's port, or IKE's two ports and
    /// ESP), and the route targets.
    fn vpn_path(
        &mut self,
        p: &PathSpec,
        c: &str,
        s: &str,
        client_subnet: Ipv4Cidr,
        server_subnet: Ipv4Cidr,
    ) -> Result<(RouteTarget, RouteTarget), PlanError> {
        let base = self.tunnel_block()?;
        let gw_client = format!("gw-{}-client", p.label);
        let gw_server = format!("gw-{}-server", p.label);
        let flavour = p.vpn.unwrap_or_default();
        let end = |peer: &str, addr: u32, local, remote, initiator| VpnEnd {
            path: p.label.clone(),
            flavour,
            peer_host: peer.to_owned(),
            tunnel_address: Ipv4Addr::from(addr),
            local_subnet: local,
            remote_subnet: remote,
            initiator,
        };
        self.hosts.push(HostPlan {
            key: gw_server.clone(),
            role: HostRole::Gateway,
            vpc: s.to_owned(),
            subnet: "base".into(),
            instance_type: self.instance_type(s),
            vpn: Some(end(
                &gw_client,
                base + 2,
                server_subnet,
                client_subnet,
                false,
            )),
        });
        self.hosts.push(HostPlan {
            key: gw_client.clone(),
            role: HostRole::Gateway,
            vpc: c.to_owned(),
            subnet: format!("client-{}", p.label),
            instance_type: self.instance_type(c),
            vpn: Some(end(
                &gw_server,
                base + 1,
                client_subnet,
                server_subnet,
                true,
            )),
        });
        for v in self.vpcs.iter_mut().filter(|v| v.name == c || v.name == s) {
            v.has_gateways = true;
        }
        let rules: &[(Protocol, Option<u16>)] = match flavour {
            VpnFlavour::WireGuard => &[(Protocol::Udp, Some(WIREGUARD_PORT))],
            VpnFlavour::Ipsec => &[
                (Protocol::Udp, Some(IKE_PORTS[0])),
                (Protocol::Udp, Some(IKE_PORTS[1])),
                (Protocol::Esp, None),
            ],
        };
        for (vpc, peer) in [(s, &gw_client), (c, &gw_server)] {
            for &(protocol, port) in rules {
                self.ingress.insert(IngressPlan {
                    vpc: vpc.to_owned(),
                    group: GroupKind::Gateways,
                    protocol,
                    port,
                    source: IngressSource::HostPublicIp(peer.clone()),
                });
            }
        }
        Ok((
            RouteTarget::GatewayHost(gw_client),
            RouteTarget::GatewayHost(gw_server),
        ))
    }

    /// The next VPN path's /30 of tunnel addresses (its first address).
    fn tunnel_block(&mut self) -> Result<u32, PlanError> {
        if self.vpn_index >= 64 {
            return Err(PlanError::TooManyVpnPaths);
        }
        let base = u32::from(Ipv4Addr::new(169, 254, 200, 0)) + self.vpn_index * 4;
        self.vpn_index += 1;
        Ok(base)
    }

    /// Public and accelerator paths: the server's group lets the client's public address in;
    /// an accelerator path also gets its accelerator.
    fn public_path(&mut self, p: &PathSpec, client: &PathClient, s: &str) -> PathTarget {
        let source = match client {
            PathClient::Host(h) => IngressSource::HostPublicIp(h.clone()),
            PathClient::Address(a) => IngressSource::Cidr(Ipv4Cidr::host(*a)),
        };
        self.allow_port(s, source);
        if p.kind == PathKind::Public {
            return PathTarget::PublicIp(format!("server-{s}"));
        }
        self.accelerators.push(AcceleratorPlan {
            key: p.label.clone(),
            endpoint_host: format!("server-{s}"),
            endpoint_region: self.region_of(s),
            listeners: vec![(Protocol::Tcp, self.s.port), (Protocol::Udp, self.s.port)],
        });
        PathTarget::Accelerator(p.label.clone())
    }

    /// TCP and UDP on the xbench port into VPC `vpc`'s hosts group from `source`.
    fn allow_port(&mut self, vpc: &str, source: IngressSource) {
        for protocol in [Protocol::Tcp, Protocol::Udp] {
            self.ingress.insert(IngressPlan {
                vpc: vpc.to_owned(),
                group: GroupKind::Hosts,
                protocol,
                port: Some(self.s.port),
                source: source.clone(),
            });
        }
    }

    /// Every group: the xbench port and ICMP between the scenario's own blocks, and SSH from
    /// where the scenario allows it (nowhere by default); every subnet: the default route.
    fn common_rules(&mut self) {
        let port = self.s.port;
        let blocks: Vec<Ipv4Cidr> = self.vpcs.iter().map(|v| v.cidr).collect();
        for v in &self.vpcs {
            for &group in v.groups() {
                for &other in &blocks {
                    for (protocol, port) in [
                        (Protocol::Tcp, Some(port)),
                        (Protocol::Udp, Some(port)),
                        (Protocol::Icmp, None),
                    ] {
                        self.ingress.insert(IngressPlan {
                            vpc: v.name.clone(),
                            group,
                            protocol,
                            port,
                            source: IngressSource::Cidr(other),
                        });
                    }
                }
                for cidr in &self.s.ssh_from {
                    self.ingress.insert(IngressPlan {
                        vpc: v.name.clone(),
                        group,
                        protocol: Protocol::Tcp,
                        port: Some(22),
                        source: IngressSource::Cidr(*cidr),
                    });
                }
            }
            for s in &v.subnets {
                self.routes.push(RoutePlan {
                    vpc: v.name.clone(),
                    subnet: s.key.clone(),
                    destination: Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0)
                        .unwrap_or_else(|| unreachable!("0.0.0.0/0 is a valid block")),
                    target: RouteTarget::InternetGateway,
                });
            }
        }
    }

    /// Path-MTU discovery on paths that cross the internet or an accelerator: routers anywhere
    /// on them send "fragmentation needed" (ICMP type 3 code 4) when a packet is too big, and
    /// TCP lowers its segment size only if that message gets in; dropped, a full-sized segment
    /// just vanishes (a black hole), and the run measures retransmission timeouts. The VPC
    /// blocks' own ICMP rules do not cover those routers, so every group facing such a path
    /// lets exactly that message in from anywhere: the hosts of public, accelerator and
    /// `existing` (public-address) paths at both ends, and VPN gateways (their tunnel crosses
    /// the internet).
    fn path_mtu_rules(&mut self) {
        let anywhere = Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0)
            .unwrap_or_else(|| unreachable!("0.0.0.0/0 is a valid block"));
        let mut groups: BTreeSet<(String, GroupKind)> = BTreeSet::new();
        for p in &self.s.paths {
            let ends = [&p.client, &p.server];
            let vpcs = ends.iter().filter_map(|e| match e {
                crate::scenario::End::Vpc(v) => Some(v.clone()),
                crate::scenario::End::Address(_) => None,
            });
            match p.kind {
                PathKind::Public | PathKind::Accelerator => {
                    groups.extend(vpcs.map(|v| (v, GroupKind::Hosts)));
                }
                PathKind::Existing if p.hybrid.is_none() => {
                    groups.extend(vpcs.map(|v| (v, GroupKind::Hosts)));
                }
                PathKind::Vpn => groups.extend(vpcs.map(|v| (v, GroupKind::Gateways))),
                _ => {}
            }
        }
        for (vpc, group) in groups {
            self.ingress.insert(IngressPlan {
                vpc,
                group,
                protocol: Protocol::IcmpFragmentationNeeded,
                port: None,
                source: IngressSource::Cidr(anywhere),
            });
        }
    }

    /// What costs money per hour, by region.
    fn billables(&self) -> Vec<(String, Billable)> {
        let mut out = Vec::new();
        for h in &self.hosts {
            let region = self.region_of(&h.vpc);
            out.push((region.clone(), Billable::Instance(h.instance_type.clone())));
            out.push((region.clone(), Billable::PublicIpv4));
            out.push((region, Billable::RootVolume));
        }
        for t in &self.tgws {
            for _ in &t.attachments {
                out.push((t.region.clone(), Billable::TgwAttachment));
            }
        }
        for t in &self.tgw_peerings {
            out.push((t.requester_region.clone(), Billable::TgwAttachment));
            out.push((t.accepter_region.clone(), Billable::TgwAttachment));
        }
        for _ in &self.accelerators {
            out.push(("global".to_owned(), Billable::Accelerator));
        }
        out.extend(self.hybrid_billables());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_sizes_fit_small_vpcs() {
        let v: Ipv4Cidr = "10.0.0.0/26".parse().unwrap();
        assert_eq!(subnet_prefix(v, 3), Some(28));
        assert_eq!(subnet_prefix(v, 5), None);
        assert_eq!(subnet_prefix("10.0.0.0/16".parse().unwrap(), 1), Some(24));
    }

    /// "Fragmentation needed" gets in from anywhere on internet, accelerator and VPN paths
    /// (routers on them are outside the scenario's blocks), and nowhere else.
    #[test]
    fn path_mtu_discovery_is_let_in_on_internet_paths_only() {
        let s = crate::scenario::Scenario::from_toml(
            "name='m'\ninstance_type='m5.large'\n\
             [[vpc]]\nname='a'\nregion='us-east-1'\ncidr='10.1.0.0/16'\n\
             [[vpc]]\nname='b'\nregion='eu-west-2'\ncidr='10.2.0.0/16'\n\
             [[vpc]]\nname='c'\nregion='eu-west-2'\ncidr='10.3.0.0/16'\n\
             [[path]]\nkind='public'\nclient='a'\nserver='b'\n\
             [[path]]\nkind='vpn'\nvpn='ipsec'\nclient='a'\nserver='b'\n\
             [[path]]\nkind='peering'\nclient='a'\nserver='c'\n",
        )
        .unwrap();
        let plan = Plan::build(&s, &PriceTable::shipped()).unwrap();
        let frag: Vec<(&str, GroupKind)> = plan
            .ingress
            .iter()
            .filter(|r| r.protocol == Protocol::IcmpFragmentationNeeded)
            .map(|r| {
                assert_eq!(r.source, IngressSource::Cidr("0.0.0.0/0".parse().unwrap()));
                assert_eq!(r.protocol.port_range(r.port), (3, 4));
                (r.vpc.as_str(), r.group)
            })
            .collect();
        assert_eq!(
            frag,
            [
                ("a", GroupKind::Hosts),
                ("a", GroupKind::Gateways),
                ("b", GroupKind::Hosts),
                ("b", GroupKind::Gateways),
            ]
        );
    }

    #[test]
    fn a_fleet_is_n_client_hosts_in_one_subnet_priced_and_allowed() {
        let s = crate::scenario::Scenario::from_toml(
            "name='f'\ninstance_type='m5.large'\n\
             [[vpc]]\nname='a'\nregion='us-east-1'\ncidr='10.1.0.0/16'\nplacement='cluster'\n\
             [[vpc]]\nname='b'\nregion='us-east-1'\ncidr='10.2.0.0/16'\n\
             [[path]]\nkind='public'\nclient='a'\nserver='b'\nclients=3\n",
        )
        .unwrap();
        let plan = Plan::build(&s, &PriceTable::shipped()).unwrap();
        let clients: Vec<(&str, &str)> = plan
            .hosts
            .iter()
            .filter(|h| h.role == HostRole::Client)
            .map(|h| (h.key.as_str(), h.subnet.as_str()))
            .collect();
        assert_eq!(
            clients,
            [
                ("client-public", "client-public"),
                ("client-public.2", "client-public"),
                ("client-public.3", "client-public"),
            ]
        );
        assert_eq!(plan.paths[0].fleet, ["client-public.2", "client-public.3"]);
        // One placement group for the VPC's hosts, the fleet included.
        assert_eq!(plan.placement_groups.len(), 1);
        // Three clients and a server: four instances priced.
        let instances: u32 = plan
            .cost
            .lines
            .iter()
            .filter(|l| l.item.contains("m5.large"))
            .map(|l| l.quantity)
            .sum();
        assert_eq!(instances, 4, "{:?}", plan.cost.lines);
        // Every instance of the fleet may reach the server over its public address.
        assert_eq!(
            plan.allow_for("server-b").host_public_ips,
            ["client-public", "client-public.2", "client-public.3"]
        );
    }
}
