//! A hybrid `existing` path laid out: the VPC joined to your gateway, a route to your private
//! block through it, and (when your host is the client) the xbench port and ICMP open to that
//! block. Your host is then reached, or reaches the server, by private address.

use super::*;
use crate::hybrid::PrivateGateway;

impl Builder<'_> {
    /// The AWS end of a path whose other end is your host on `on_prem_cidr` (a hybrid
    /// `existing` path or a VPN to your own end): its VPC, the subnet whose routes lead to
    /// your block, and what the client dials. When your host is the client, the server's
    /// group lets your block in (xbench port and ICMP: `ping` while the routes are checked,
    /// and "fragmentation needed" for path-MTU discovery over a tunnel or DX); the hosts
    /// group is stateful, so replies to your server need no rule.
    pub(super) fn on_prem_ends(
        &mut self,
        p: &PathSpec,
        on_prem_cidr: Ipv4Cidr,
    ) -> (String, String, PathTarget) {
        match (&p.client, &p.server) {
            (End::Vpc(c), End::Address(a)) => (
                c.clone(),
                format!("client-{}", p.label),
                PathTarget::Address(*a),
            ),
            (End::Address(_), End::Vpc(s)) => {
                let from = IngressSource::Cidr(on_prem_cidr);
                self.allow_port(s, from.clone());
                self.ingress.insert(IngressPlan {
                    vpc: s.clone(),
                    group: GroupKind::Hosts,
                    protocol: Protocol::Icmp,
                    port: None,
                    source: from,
                });
                (
                    s.clone(),
                    "base".to_owned(),
                    PathTarget::PrivateIp(format!("server-{s}")),
                )
            }
            _ => unreachable!("Scenario::check admits one VPC end and one address end"),
        }
    }

    /// Routes and rules of a hybrid `existing` path; what its client dials.
    pub(super) fn hybrid_path(&mut self, p: &PathSpec) -> PathTarget {
        let Some(h) = &p.hybrid else {
            unreachable!("hybrid_path is called for paths with via only")
        };
        let (vpc, subnet, target) = self.on_prem_ends(p, h.on_prem_cidr);
        self.routes.push(RoutePlan {
            vpc: vpc.clone(),
            subnet,
            destination: h.on_prem_cidr,
            target: RouteTarget::YourGateway(h.via.clone()),
        });
        let region = self.region_of(&vpc);
        let vpc_cidr = self
            .s
            .vpc(&vpc)
            .map(|v| v.cidr)
            .unwrap_or_else(|| unreachable!("scenario checked that vpc {vpc} exists"));
        match self
            .private_gateways
            .iter_mut()
            .find(|g| g.vpc == vpc && g.gateway == h.via)
        {
            Some(g) => {
                if !g.on_prem_cidrs.contains(&h.on_prem_cidr) {
                    g.on_prem_cidrs.push(h.on_prem_cidr);
                }
            }
            None => self.private_gateways.push(PrivateGatewayPlan {
                vpc,
                region,
                vpc_cidr,
                gateway: h.via.clone(),
                on_prem_cidrs: vec![h.on_prem_cidr],
            }),
        }
        target
    }

    /// A Transit Gateway attachment is billed per hour to the account that owns it (the run's);
    /// attaching a VGW costs nothing by itself.
    pub(super) fn hybrid_billables(&self) -> Vec<(String, Billable)> {
        self.private_gateways
            .iter()
            .filter(|g| matches!(g.gateway, PrivateGateway::Tgw(_)))
            .map(|g| (g.region.clone(), Billable::TgwAttachment))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::cost::PriceTable;
    use crate::plan::{PathTarget, Plan, RouteTarget};
    use crate::scenario::Scenario;

    const TWO: &str = concat!(
        crate::scenario::one_vpc_scenario!(),
        r#"
[[path]]
kind = "existing"
label = "to-dc"
client = "aws"
server_address = "192.168.10.5"
via = "vgw-12345678"
on_prem_cidr = "192.168.0.0/16"
[[path]]
kind = "existing"
label = "from-campus"
client_address = "172.16.3.4"
server = "aws"
via = "tgw-12345678"
on_prem_cidr = "172.16.0.0/20"
"#
    );

    #[test]
    fn hybrid_paths_route_to_your_gateways_and_price_the_tgw_attachment() {
        let s = Scenario::from_toml(TWO).unwrap();
        let plain = Plan::build(
            &Scenario::from_toml(
                &TWO.replace(
                    "via = \"tgw-12345678\"\non_prem_cidr = \"172.16.0.0/20\"\n",
                    "",
                )
                .replace("172.16.3.4", "198.51.100.4"),
            )
            .unwrap(),
            &PriceTable::shipped(),
        )
        .unwrap();
        let p = Plan::build(&s, &PriceTable::shipped()).unwrap();
        let routes: Vec<String> = p
            .routes
            .iter()
            .filter(|r| matches!(r.target, RouteTarget::YourGateway(_)))
            .map(|r| format!("{} {} -> {:?}", r.subnet, r.destination, r.target))
            .collect();
        assert_eq!(
            routes,
            [
                "client-to-dc 192.168.0.0/16 -> YourGateway(Vgw(\"vgw-12345678\"))",
                "base 172.16.0.0/20 -> YourGateway(Tgw(\"tgw-12345678\"))"
            ]
        );
        assert_eq!(
            p.paths[0].target,
            PathTarget::Address("192.168.10.5".parse().unwrap())
        );
        assert_eq!(
            p.paths[1].target,
            PathTarget::PrivateIp("server-aws".into())
        );
        let from_campus: Vec<String> = p
            .ingress
            .iter()
            .filter(|r| {
                r.source == crate::plan::IngressSource::Cidr("172.16.0.0/20".parse().unwrap())
            })
            .map(|r| format!("{} {:?}", r.protocol.label(), r.port))
            .collect();
        assert_eq!(
            from_campus,
            ["tcp Some(5201)", "udp Some(5201)", "icmp None"]
        );
        assert!(!p.ingress.iter().any(
            |r| r.source == crate::plan::IngressSource::Cidr("192.168.0.0/16".parse().unwrap())
        ));
        // The server lets your host's own private address in.
        assert_eq!(
            p.allow_for("server-aws").cidrs[0].to_string(),
            "172.16.3.4/32"
        );
        assert_eq!(p.private_gateways.len(), 2);
        // One TGW attachment-hour more than the same scenario over public addresses.
        let tgw_hour = PriceTable::shipped().tgw_attachment_hourly;
        assert!(
            (p.cost.total_hourly - plain.cost.total_hourly - tgw_hour).abs() < 1e-9,
            "{} vs {}",
            p.cost.total_hourly,
            plain.cost.total_hourly
        );
        let listing: Vec<String> = p.listing().into_iter().flat_map(|(_, l)| l).collect();
        let text = listing.join("\n");
        assert!(
            text.contains(
                "route           192.168.0.0/16 -> your virtual private gateway vgw-12345678"
            ),
            "{text}"
        );
        assert!(text.contains("vgw attachment    your vgw-12345678 attached to aws (detached by down; the gateway stays yours)"), "{text}");
        assert!(
            text.contains(
                "your side: a route 10.1.0.0/16 -> this attachment in tgw-12345678's route table"
            ),
            "{text}"
        );
    }
}
