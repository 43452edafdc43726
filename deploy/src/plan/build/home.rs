//! A `vpn` path to your own VPN end laid out: one IPsec gateway in the subnet of the run's end
//! (the server's `base`, or the path's client subnet), source/destination check off, a route
//! from that subnet to your private block through the gateway, the gateway's group open to IKE
//! (UDP 500 and 4500) and ESP from your public address alone, and optionally a Global
//! Accelerator in front of the gateway with UDP listeners on 500 and 4500. When your host is
//! the client, the server's group lets your block in (xbench port and ICMP): the tunnel does
//! not translate addresses, so the server sees your host's private address.

use super::*;
use crate::home::HomeEnd;

impl Builder<'_> {
    /// Hosts, routes, rules and accelerator of a VPN path to your end; what its client dials.
    pub(super) fn home_vpn_path(&mut self, p: &PathSpec) -> Result<PathTarget, PlanError> {
        let Some(HomeEnd {
            on_prem_cidr,
            public_ip,
            accelerator,
        }) = p.home.clone()
        else {
            unreachable!("home_vpn_path is called for paths to your VPN end only")
        };
        let (vpc, subnet, target) = self.on_prem_ends(p, on_prem_cidr);
        let aws_subnet = self.subnet_of(&vpc, &subnet);
        let base = self.tunnel_block()?;
        let gateway = format!("gw-{}", p.label);
        let home_id = format!("home-{}", p.label);
        self.hosts.push(HostPlan {
            key: gateway.clone(),
            role: HostRole::Gateway,
            vpc: vpc.clone(),
            subnet: subnet.clone(),
            instance_type: self.instance_type(&vpc),
            vpn: Some(VpnEnd {
                path: p.label.clone(),
                flavour: VpnFlavour::Ipsec,
                peer_host: home_id.clone(),
                tunnel_address: Ipv4Addr::from(base + 2),
                local_subnet: aws_subnet,
                remote_subnet: on_prem_cidr,
                initiator: false,
            }),
        });
        for v in self.vpcs.iter_mut().filter(|v| v.name == vpc) {
            v.has_gateways = true;
        }
        // With an accelerator in front, the gateway still sees your public address: client
        // IP preservation is on for its endpoint group.
        let from_you = IngressSource::Cidr(Ipv4Cidr::host(public_ip));
        for (protocol, port) in [
            (Protocol::Udp, Some(IKE_PORTS[0])),
            (Protocol::Udp, Some(IKE_PORTS[1])),
            (Protocol::Esp, None),
        ] {
            self.ingress.insert(IngressPlan {
                vpc: vpc.clone(),
                group: GroupKind::Gateways,
                protocol,
                port,
                source: from_you.clone(),
            });
        }
        self.routes.push(RoutePlan {
            vpc: vpc.clone(),
            subnet,
            destination: on_prem_cidr,
            target: RouteTarget::GatewayHost(gateway.clone()),
        });
        let accelerator = accelerator.then(|| {
            self.accelerators.push(AcceleratorPlan {
                key: p.label.clone(),
                endpoint_host: gateway.clone(),
                endpoint_region: self.region_of(&vpc),
                // No ESP listener exists: ESP rides in UDP 4500 (your end forces it).
                listeners: IKE_PORTS
                    .iter()
                    .map(|&port| (Protocol::Udp, port))
                    .collect(),
            });
            p.label.clone()
        });
        self.home_vpns.push(HomeVpnPlan {
            path: p.label.clone(),
            gateway,
            home_id,
            vpc,
            aws_subnet,
            on_prem_cidr,
            public_ip,
            accelerator,
        });
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use crate::cost::PriceTable;
    use crate::plan::{
        GroupKind, HostRole, IngressSource, PathTarget, Plan, Protocol, RouteTarget,
    };
    use crate::scenario::Scenario;

    const HOME: &str = concat!(
        crate::scenario::one_vpc_scenario!(),
        r#"
[[path]]
kind = "vpn"
vpn = "ipsec"
label = "home"
client_address = "192.168.1.20"
server = "aws"
on_prem_cidr = "192.168.1.0/24"
on_prem_public_ip = "198.51.100.7"
accelerator = true
"#
    );

    #[test]
    fn your_vpn_end_gets_one_gateway_a_route_rules_and_an_ike_accelerator() {
        let p = Plan::build(&Scenario::from_toml(HOME).unwrap(), &PriceTable::shipped()).unwrap();
        let gw = p.host("gw-home").unwrap();
        assert_eq!((gw.role, gw.subnet.as_str()), (HostRole::Gateway, "base"));
        let end = gw.vpn.clone().unwrap();
        assert_eq!(end.peer_host, "home-home");
        assert!(!end.initiator, "your end dials, the gateway answers");
        assert_eq!(end.local_subnet.to_string(), "10.1.0.0/24");
        assert_eq!(end.remote_subnet.to_string(), "192.168.1.0/24");
        let routes: Vec<String> = p
            .routes
            .iter()
            .filter(|r| r.target != RouteTarget::InternetGateway)
            .map(|r| format!("{}/{} {} -> {:?}", r.vpc, r.subnet, r.destination, r.target))
            .collect();
        assert_eq!(
            routes,
            ["aws/base 192.168.1.0/24 -> GatewayHost(\"gw-home\")"]
        );
        let from = |source: &str| -> Vec<String> {
            let source = IngressSource::Cidr(source.parse().unwrap());
            p.ingress
                .iter()
                .filter(|r| r.source == source)
                .map(|r| format!("{:?} {} {:?}", r.group, r.protocol.label(), r.port))
                .collect()
        };
        assert_eq!(
            from("198.51.100.7/32"),
            [
                "Gateways udp Some(500)",
                "Gateways udp Some(4500)",
                "Gateways esp (50) None"
            ]
        );
        assert_eq!(
            from("192.168.1.0/24"),
            [
                "Hosts tcp Some(5201)",
                "Hosts udp Some(5201)",
                "Hosts icmp None"
            ]
        );
        assert!(
            p.vpc("aws")
                .unwrap()
                .groups()
                .contains(&GroupKind::Gateways)
        );
        assert_eq!(
            p.allow_for("server-aws").cidrs[0].to_string(),
            "192.168.1.20/32"
        );
        assert_eq!(
            p.paths[0].target,
            PathTarget::PrivateIp("server-aws".into())
        );
        let a = &p.accelerators[0];
        assert_eq!(a.endpoint_host, "gw-home");
        assert_eq!(a.listeners, [(Protocol::Udp, 500), (Protocol::Udp, 4500)]);
        assert_eq!(a.listener_label(), "UDP 500, UDP 4500");
        let h = p.home_vpn("home").unwrap();
        assert_eq!(h.accelerator.as_deref(), Some("home"));
        assert_eq!(h.home_end().local_subnet.to_string(), "192.168.1.0/24");
        let text: Vec<String> = p.listing().into_iter().flat_map(|(_, l)| l).collect();
        let text = text.join("\n");
        assert!(
            text.contains("your vpn end      home-home from 198.51.100.7: dials accelerator home in front of gw-home; 192.168.1.0/24 (yours) <-> 10.1.0.0/24"),
            "{text}"
        );
        assert!(
            text.contains("accelerator       home (UDP 500, UDP 4500 -> gw-home in us-east-1)"),
            "{text}"
        );
        // Server, gateway and accelerator are priced; without the accelerator, one less.
        let plain = Plan::build(
            &Scenario::from_toml(&HOME.replace("accelerator = true\n", "")).unwrap(),
            &PriceTable::shipped(),
        )
        .unwrap();
        assert!(plain.accelerators.is_empty());
        let hour = PriceTable::shipped().accelerator_hourly;
        assert!((p.cost.total_hourly - plain.cost.total_hourly - hour).abs() < 1e-9);
        assert_eq!(plain.hosts.len(), 2);
    }

    #[test]
    fn your_server_behind_your_vpn_end_is_dialled_from_the_client_subnet() {
        let text = HOME.replace(
            "client_address = \"192.168.1.20\"\nserver = \"aws\"",
            "client = \"aws\"\nserver_address = \"192.168.1.20\"",
        );
        let p = Plan::build(&Scenario::from_toml(&text).unwrap(), &PriceTable::shipped()).unwrap();
        assert_eq!(p.host("gw-home").unwrap().subnet, "client-home");
        assert_eq!(
            p.paths[0].target,
            PathTarget::Address("192.168.1.20".parse().unwrap())
        );
        let r = p
            .routes
            .iter()
            .find(|r| matches!(r.target, RouteTarget::GatewayHost(_)))
            .unwrap();
        assert_eq!(
            (r.subnet.as_str(), r.destination.to_string()),
            ("client-home", "192.168.1.0/24".into())
        );
        assert_eq!(
            p.home_vpns[0].aws_subnet,
            p.vpc("aws").unwrap().subnets[1].cidr
        );
        // No rule from your block: the client dials out, its group is stateful.
        assert!(
            !p.ingress
                .iter()
                .any(|r| r.source == IngressSource::Cidr("192.168.1.0/24".parse().unwrap()))
        );
    }
}
