//! The network of a run, each piece made only if the run lacks it ([`Build::ensure`]):
//! placement groups, VPCs with their gateway, groups, subnets and route tables, security-group
//! rules, routes, VPC peerings (accepted in the peer region) and Transit Gateways with their
//! attachments and inter-region peerings.

use aws_sdk_ec2::types::{IpPermission, IpRange, ResourceType, Tag};
use tracing::info;

use super::{Build, VpcIds, created, tolerate_exists};
use crate::aws::ec2::{ATTACHMENT_GONE, Selector, tag_spec, tgw_attachment};
use crate::aws::placement::group_name;
use crate::aws::{RegionClients, aws_error};
use crate::cidr::Ipv4Cidr;
use crate::error::{Error, not_found_is_none};
use crate::hybrid::PrivateGateway;
use crate::plan::{GroupKind, IngressPlan, IngressSource, RouteTarget, SubnetPlan, TgwPeeringPlan};

impl Build<'_> {
    pub(super) async fn placement_groups(&self) -> Result<(), Error> {
        for g in &self.plan.placement_groups {
            let r = self.d.aws.region(&g.region);
            let name = group_name(self.tags, &g.key);
            let found = self
                .d
                .placement
                .find(&r, &Selector::Run(self.tags.run.clone()))
                .await?;
            if !found.iter().any(|f| f.name == name) {
                self.d
                    .placement
                    .create(&r, &name, g.strategy, self.tags, &format!("pg/{}", g.key))
                    .await?;
                self.record(&g.region, "placement group", &name)?;
            }
            self.ids().placement_groups.insert(g.key.clone(), name);
        }
        Ok(())
    }

    /// One VPC with its internet gateway, security groups, subnets and route tables (each
    /// made only if the run does not have it yet), and the default routes.
    pub(super) async fn vpc(&self, name: &str) -> Result<(), Error> {
        let plan = self
            .plan
            .vpc(name)
            .ok_or_else(|| Error::Internal(format!("no vpc {name}")))?;
        let r = self.region(name)?;
        let zone = self
            .pre
            .zones
            .get(name)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no zone for {name}")))?;
        let vpc = self.ensure_vpc(&r, name, plan.cidr).await?;
        let igw = self.ensure_igw(&r, name, &vpc).await?;
        let mut ids = VpcIds {
            vpc,
            igw,
            zone,
            ..VpcIds::default()
        };
        for g in plan.groups() {
            let id = self.ensure_group(&r, name, *g, &ids.vpc).await?;
            ids.groups.insert(*g, id);
        }
        for s in &plan.subnets {
            let pair = self.ensure_subnet(&r, name, s, &ids).await?;
            ids.subnets.insert(s.key.clone(), pair);
        }
        self.ids().vpcs.insert(name.to_owned(), ids);
        for s in &plan.subnets {
            self.route(name, &s.key, "0.0.0.0/0", &RouteTarget::InternetGateway)
                .await?;
        }
        Ok(())
    }

    async fn ensure_vpc(
        &self,
        r: &RegionClients,
        name: &str,
        cidr: Ipv4Cidr,
    ) -> Result<String, Error> {
        let region = r.region.as_str();
        let key = format!("vpc/{name}");
        let (id, _) = self
            .ensure(
                region,
                |i| &i.vpcs,
                &key,
                "vpc",
                || async {
                    let sent = r
                        .ec2
                        .create_vpc()
                        .cidr_block(cidr.to_string())
                        .tag_specifications(tag_spec(ResourceType::Vpc, self.tags, &key))
                        .send()
                        .await;
                    created("CreateVpc", region, "vpc id", sent, |o| {
                        o.vpc().and_then(|v| v.vpc_id())
                    })
                },
            )
            .await?;
        self.d
            .timing
            .wait("the VPC to become available", region, || async {
                let out = r
                    .ec2
                    .describe_vpcs()
                    .vpc_ids(&id)
                    .send()
                    .await
                    .map_err(|e| aws_error("DescribeVpcs", region, e))?;
                Ok(out
                    .vpcs()
                    .first()
                    .filter(|v| v.state().map(|s| s.as_str()) == Some("available"))
                    .map(|_| ()))
            })
            .await?;
        Ok(id)
    }

    async fn ensure_igw(&self, r: &RegionClients, name: &str, vpc: &str) -> Result<String, Error> {
        let region = r.region.as_str();
        let key = format!("igw/{name}");
        let (igw, found) = self
            .ensure(
                region,
                |i| &i.internet_gateways,
                &key,
                "internet gateway",
                || async {
                    let sent = r
                        .ec2
                        .create_internet_gateway()
                        .tag_specifications(tag_spec(
                            ResourceType::InternetGateway,
                            self.tags,
                            &key,
                        ))
                        .send()
                        .await;
                    created("CreateInternetGateway", region, "gateway id", sent, |o| {
                        o.internet_gateway().and_then(|g| g.internet_gateway_id())
                    })
                },
            )
            .await?;
        let attached = found.is_some_and(|f| f.related.iter().any(|v| v == vpc));
        if !attached {
            r.ec2
                .attach_internet_gateway()
                .internet_gateway_id(&igw)
                .vpc_id(vpc)
                .send()
                .await
                .map_err(|e| aws_error("AttachInternetGateway", region, e))?;
        }
        Ok(igw)
    }

    async fn ensure_group(
        &self,
        r: &RegionClients,
        name: &str,
        g: GroupKind,
        vpc: &str,
    ) -> Result<String, Error> {
        let region = r.region.as_str();
        let suffix = match g {
            GroupKind::Hosts => "hosts",
            GroupKind::Gateways => "vpn-gateways",
        };
        let key = format!("sg/{name}/{suffix}");
        let (id, _) = self
            .ensure(
                region,
                |i| &i.security_groups,
                &key,
                "security group",
                || async {
                    let sent = r
                        .ec2
                        .create_security_group()
                        .group_name(format!("xbench-{}-{name}-{suffix}", self.tags.run))
                        .description(format!(
                            "xbench-deploy run {} ({}): {suffix}",
                            self.tags.run, self.tags.scenario
                        ))
                        .vpc_id(vpc)
                        .tag_specifications(tag_spec(ResourceType::SecurityGroup, self.tags, &key))
                        .send()
                        .await;
                    created("CreateSecurityGroup", region, "group id", sent, |o| {
                        o.group_id()
                    })
                },
            )
            .await?;
        Ok(id)
    }

    /// A subnet and its own route table, associated; returns (subnet, route table).
    async fn ensure_subnet(
        &self,
        r: &RegionClients,
        name: &str,
        s: &SubnetPlan,
        ids: &VpcIds,
    ) -> Result<(String, String), Error> {
        let region = r.region.as_str();
        let key = format!("subnet/{name}/{}", s.key);
        let (subnet, _) = self
            .ensure(
                region,
                |i| &i.subnets,
                &key,
                "subnet",
                || async {
                    let sent = r
                        .ec2
                        .create_subnet()
                        .vpc_id(&ids.vpc)
                        .cidr_block(s.cidr.to_string())
                        .availability_zone(&ids.zone)
                        .tag_specifications(tag_spec(ResourceType::Subnet, self.tags, &key))
                        .send()
                        .await;
                    created("CreateSubnet", region, "subnet id", sent, |o| {
                        o.subnet().and_then(|s| s.subnet_id())
                    })
                },
            )
            .await?;
        let key = format!("rtb/{name}/{}", s.key);
        let (table, found) = self
            .ensure(
                region,
                |i| &i.route_tables,
                &key,
                "route table",
                || async {
                    let sent = r
                        .ec2
                        .create_route_table()
                        .vpc_id(&ids.vpc)
                        .tag_specifications(tag_spec(ResourceType::RouteTable, self.tags, &key))
                        .send()
                        .await;
                    created("CreateRouteTable", region, "route table id", sent, |o| {
                        o.route_table().and_then(|t| t.route_table_id())
                    })
                },
            )
            .await?;
        if !found.is_some_and(|f| f.subnet_ids.contains(&subnet)) {
            r.ec2
                .associate_route_table()
                .route_table_id(&table)
                .subnet_id(&subnet)
                .send()
                .await
                .map_err(|e| aws_error("AssociateRouteTable", region, e))?;
        }
        Ok((subnet, table))
    }

    pub(super) async fn ingress(&self, rule: &IngressPlan) -> Result<(), Error> {
        let r = self.region(&rule.vpc)?;
        let group = self
            .vpc_ids(&rule.vpc)?
            .groups
            .get(&rule.group)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no group for {}", rule.vpc)))?;
        let (cidr, why) = match &rule.source {
            IngressSource::Cidr(c) => (c.to_string(), "xbench-deploy".to_owned()),
            IngressSource::HostPublicIp(h) => {
                let ip = self.host_ids(h)?.public_ip.ok_or_else(|| {
                    Error::Internal(format!("host {h} has no public address for a rule"))
                })?;
                (format!("{ip}/32"), format!("xbench-deploy: {h}"))
            }
        };
        let (from, to) = rule.protocol.port_range(rule.port);
        let perm = IpPermission::builder()
            .ip_protocol(rule.protocol.as_str())
            .from_port(from)
            .to_port(to)
            .ip_ranges(IpRange::builder().cidr_ip(cidr).description(why).build())
            .build();
        tolerate_exists(
            r.ec2
                .authorize_security_group_ingress()
                .group_id(&group)
                .ip_permissions(perm)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| aws_error("AuthorizeSecurityGroupIngress", &r.region, e)),
        )
    }

    pub(super) async fn route(
        &self,
        vpc: &str,
        subnet: &str,
        destination: &str,
        target: &RouteTarget,
    ) -> Result<(), Error> {
        let r = self.region(vpc)?;
        let ids = self.vpc_ids(vpc)?;
        let (_, table) = ids
            .subnets
            .get(subnet)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no subnet {subnet} in {vpc}")))?;
        let target_id = self.route_target_id(&ids, &r.region, target)?;
        macro_rules! with_target {
            ($req:expr) => {
                match target {
                    RouteTarget::InternetGateway => $req.gateway_id(&target_id),
                    RouteTarget::Peering(_) => $req.vpc_peering_connection_id(&target_id),
                    RouteTarget::TransitGateway => $req.transit_gateway_id(&target_id),
                    RouteTarget::GatewayHost(_) => $req.network_interface_id(&target_id),
                    RouteTarget::YourGateway(PrivateGateway::Vgw(_)) => $req.gateway_id(&target_id),
                    RouteTarget::YourGateway(PrivateGateway::Tgw(_)) => {
                        $req.transit_gateway_id(&target_id)
                    }
                }
            };
        }
        let created = with_target!(
            r.ec2
                .create_route()
                .route_table_id(&table)
                .destination_cidr_block(destination)
        )
        .send()
        .await;
        match created {
            Ok(_) => {
                info!(
                    "route {destination} -> {target_id} in {table} ({})",
                    r.region
                );
                Ok(())
            }
            Err(e) => {
                let e = aws_error("CreateRoute", &r.region, e);
                if e.aws_code() != Some("RouteAlreadyExists") {
                    return Err(e);
                }
                // A resumed run may have replaced what the route points at (a relaunched VPN
                // gateway has a new interface), so point it at the current target.
                with_target!(
                    r.ec2
                        .replace_route()
                        .route_table_id(&table)
                        .destination_cidr_block(destination)
                )
                .send()
                .await
                .map_err(|e| aws_error("ReplaceRoute", &r.region, e))?;
                Ok(())
            }
        }
    }

    /// The id `target` stands for in the VPC of `ids` (in `region`): apart from [`Self::route`],
    /// which points a route at it.
    fn route_target_id(
        &self,
        ids: &VpcIds,
        region: &str,
        target: &RouteTarget,
    ) -> Result<String, Error> {
        Ok(match target {
            RouteTarget::InternetGateway => ids.igw.clone(),
            RouteTarget::Peering(k) => self
                .ids()
                .peerings
                .get(k)
                .cloned()
                .ok_or_else(|| Error::Internal(format!("no peering {k}")))?,
            RouteTarget::TransitGateway => self
                .ids()
                .tgws
                .get(region)
                .map(|t| t.0.clone())
                .ok_or_else(|| Error::Internal(format!("no transit gateway in {region}")))?,
            RouteTarget::GatewayHost(h) => self.host_ids(h)?.eni,
            RouteTarget::YourGateway(g) => g.id().to_owned(),
        })
    }

    pub(super) async fn peering(
        &self,
        key: &str,
        requester: &str,
        accepter: &str,
    ) -> Result<(), Error> {
        let rr = self.region(requester)?;
        let ra = self.region(accepter)?;
        let (req_vpc, acc_vpc) = (self.vpc_ids(requester)?.vpc, self.vpc_ids(accepter)?.vpc);
        let tag_key = format!("pcx/{key}");
        let found = self
            .existing(&rr.region, |i| &i.vpc_peerings, &tag_key)
            .or_else(|| {
                // Tags set in the requester's region may not show in the accepter's; a peering
                // between exactly these two VPCs is ours either way.
                let ids = self.ids();
                ids.inventory
                    .values()
                    .flat_map(|i| i.vpc_peerings.iter())
                    .find(|p| {
                        p.related.first() == Some(&req_vpc) && p.related.get(1) == Some(&acc_vpc)
                    })
                    .cloned()
            });
        let (id, state) = match found {
            Some(f) => (f.id, f.state.unwrap_or_default()),
            None => {
                let sent = rr
                    .ec2
                    .create_vpc_peering_connection()
                    .vpc_id(&req_vpc)
                    .peer_vpc_id(&acc_vpc)
                    .peer_region(&ra.region)
                    .tag_specifications(tag_spec(
                        ResourceType::VpcPeeringConnection,
                        self.tags,
                        &tag_key,
                    ))
                    .send()
                    .await;
                let id = created(
                    "CreateVpcPeeringConnection",
                    &rr.region,
                    "peering id",
                    sent,
                    |o| {
                        o.vpc_peering_connection()
                            .and_then(|p| p.vpc_peering_connection_id())
                    },
                )?;
                self.record(&rr.region, "vpc peering", &id)?;
                (id, "initiating-request".to_owned())
            }
        };
        if state != "active" {
            self.accept_peering(&rr, &ra, &id, &tag_key).await?;
        }
        self.ids().peerings.insert(key.to_owned(), id);
        Ok(())
    }

    /// Accepts a peering in the accepter's region once the request has reached it, waits
    /// until it is active, and tags the accepter's side (tags do not cross regions).
    async fn accept_peering(
        &self,
        rr: &RegionClients,
        ra: &RegionClients,
        id: &str,
        tag_key: &str,
    ) -> Result<(), Error> {
        let id = id.to_owned();
        // The request reaches the peer region asynchronously.
        let status = |client: RegionClients, id: String| async move {
            let out = client
                .ec2
                .describe_vpc_peering_connections()
                .vpc_peering_connection_ids(&id)
                .send()
                .await;
            match out {
                Ok(o) => Ok(o
                    .vpc_peering_connections()
                    .iter()
                    .find(|p| p.vpc_peering_connection_id() == Some(id.as_str()))
                    .and_then(|p| p.status())
                    .and_then(|s| s.code())
                    .map(|c| c.as_str().to_owned())),
                Err(e) => not_found_is_none(aws_error(
                    "DescribeVpcPeeringConnections",
                    &client.region,
                    e,
                )),
            }
        };
        let now = self
            .d
            .timing
            .wait(
                "the peering request to reach the peer region",
                &ra.region,
                || {
                    let (c, id) = (ra.clone(), id.clone());
                    async move {
                        Ok(status(c, id)
                            .await?
                            .filter(|s| s == "pending-acceptance" || s == "active"))
                    }
                },
            )
            .await?;
        if now == "pending-acceptance" {
            ra.ec2
                .accept_vpc_peering_connection()
                .vpc_peering_connection_id(&id)
                .send()
                .await
                .map_err(|e| aws_error("AcceptVpcPeeringConnection", &ra.region, e))?;
            info!("accepted vpc peering {id} in {}", ra.region);
        }
        self.d
            .timing
            .wait("the peering to become active", &rr.region, || {
                let (c, id) = (rr.clone(), id.clone());
                async move { Ok(status(c, id).await?.filter(|s| s == "active").map(|_| ())) }
            })
            .await?;
        if ra.region != rr.region {
            // Tags do not cross regions; tag the accepter's side too, for `gc` there.
            self.tag(ra, "CreateTags", &id, tag_key).await?;
        }
        Ok(())
    }

    async fn tag(
        &self,
        r: &RegionClients,
        op: &'static str,
        id: &str,
        key: &str,
    ) -> Result<(), Error> {
        let mut req = r.ec2.create_tags().resources(id);
        for (k, v) in self.tags.for_resource(key) {
            req = req.tags(Tag::builder().key(k).value(v).build());
        }
        req.send().await.map_err(|e| aws_error(op, &r.region, e))?;
        Ok(())
    }

    /// A Transit Gateway per region with its VPC attachments; then the TGW peerings between
    /// regions with their routes.
    pub(super) async fn transit_gateways(&self) -> Result<(), Error> {
        for t in &self.plan.tgws {
            let r = self.d.aws.region(&t.region);
            let id = self.ensure_tgw(&r).await?;
            for vpc in &t.attachments {
                self.ensure_tgw_attachment(&r, &id, vpc).await?;
            }
        }
        for p in &self.plan.tgw_peerings {
            let id = self.ensure_tgw_peering(p).await?;
            self.tgw_peering_routes(p, &id).await?;
        }
        Ok(())
    }

    /// The region's Transit Gateway, available; records (id, default route table, owner).
    async fn ensure_tgw(&self, r: &RegionClients) -> Result<String, Error> {
        let region = r.region.as_str();
        let key = format!("tgw/{region}");
        let (id, _) = self
            .ensure(
                region,
                |i| &i.transit_gateways,
                &key,
                "transit gateway",
                || async {
                    let sent = r
                        .ec2
                        .create_transit_gateway()
                        .description(format!("xbench-deploy run {}", self.tags.run))
                        .tag_specifications(tag_spec(ResourceType::TransitGateway, self.tags, &key))
                        .send()
                        .await;
                    created("CreateTransitGateway", region, "id", sent, |o| {
                        o.transit_gateway().and_then(|t| t.transit_gateway_id())
                    })
                },
            )
            .await?;
        // A new Transit Gateway takes minutes to become available on AWS.
        let (table, owner) = self
            .d
            .timing
            .wait(
                "the transit gateway to become available",
                region,
                || async {
                    let out = r
                        .ec2
                        .describe_transit_gateways()
                        .transit_gateway_ids(&id)
                        .send()
                        .await
                        .map_err(|e| aws_error("DescribeTransitGateways", region, e))?;
                    Ok(out
                        .transit_gateways()
                        .first()
                        .filter(|t| t.state().map(|s| s.as_str()) == Some("available"))
                        .map(|t| {
                            (
                                t.options()
                                    .and_then(|o| o.association_default_route_table_id())
                                    .unwrap_or_default()
                                    .to_owned(),
                                t.owner_id().unwrap_or_default().to_owned(),
                            )
                        }))
                },
            )
            .await?;
        self.ids()
            .tgws
            .insert(region.to_owned(), (id.clone(), table, owner));
        Ok(id)
    }

    /// VPC `vpc` attached to Transit Gateway `tgw` through its `base` subnet, available.
    pub(super) async fn ensure_tgw_attachment(
        &self,
        r: &RegionClients,
        tgw: &str,
        vpc: &str,
    ) -> Result<String, Error> {
        let region = r.region.as_str();
        let v = self.vpc_ids(vpc)?;
        let (base_subnet, _) = v
            .subnets
            .get("base")
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no base subnet in {vpc}")))?;
        // Looked up by Transit Gateway and VPC, not by tag: moto drops attachment tags.
        let existing = self.ids().inventory.get(region).and_then(|i| {
            i.tgw_vpc_attachments
                .iter()
                .find(|a| {
                    a.vpc_id.as_deref() == Some(v.vpc.as_str())
                        && a.related.iter().any(|t| t == tgw)
                })
                .map(|a| a.id.clone())
        });
        let attachment = match existing {
            Some(a) => a,
            None => {
                let key = format!("tgw-attach/{vpc}");
                let sent = r
                    .ec2
                    .create_transit_gateway_vpc_attachment()
                    .transit_gateway_id(tgw)
                    .vpc_id(&v.vpc)
                    .subnet_ids(&base_subnet)
                    .tag_specifications(tag_spec(
                        ResourceType::TransitGatewayAttachment,
                        self.tags,
                        &key,
                    ))
                    .send()
                    .await;
                let a = created(
                    "CreateTransitGatewayVpcAttachment",
                    region,
                    "attachment id",
                    sent,
                    |o| {
                        o.transit_gateway_vpc_attachment()
                            .and_then(|a| a.transit_gateway_attachment_id())
                    },
                )?;
                self.record(region, "tgw vpc attachment", &a)?;
                a
            }
        };
        self.wait_attachment(r, &attachment, &["available"]).await?;
        Ok(attachment)
    }

    /// The peering attachment between two regions' Transit Gateways, accepted and available.
    async fn ensure_tgw_peering(&self, p: &TgwPeeringPlan) -> Result<String, Error> {
        let rr = self.d.aws.region(&p.requester_region);
        let ra = self.d.aws.region(&p.accepter_region);
        let (req_tgw, _, _) = self.tgw(&rr.region)?;
        let (acc_tgw, _, acc_owner) = self.tgw(&ra.region)?;
        let key = format!("tgwpeer/{}", p.key);
        let existing = self
            .ids()
            .inventory
            .values()
            .flat_map(|i| i.tgw_peering_attachments.iter())
            .find(|a| {
                a.key() == Some(key.as_str())
                    || (a.related.contains(&req_tgw) && a.related.contains(&acc_tgw))
            })
            .map(|a| (a.id.clone(), a.state.clone().unwrap_or_default()));
        let (id, state) = match existing {
            Some(x) => x,
            None => {
                let sent = rr
                    .ec2
                    .create_transit_gateway_peering_attachment()
                    .transit_gateway_id(&req_tgw)
                    .peer_transit_gateway_id(&acc_tgw)
                    .peer_region(&ra.region)
                    .peer_account_id(&acc_owner)
                    .tag_specifications(tag_spec(
                        ResourceType::TransitGatewayAttachment,
                        self.tags,
                        &key,
                    ))
                    .send()
                    .await;
                let id = created(
                    "CreateTransitGatewayPeeringAttachment",
                    &rr.region,
                    "attachment id",
                    sent,
                    |o| {
                        o.transit_gateway_peering_attachment()
                            .and_then(|a| a.transit_gateway_attachment_id())
                    },
                )?;
                self.record(&rr.region, "tgw peering attachment", &id)?;
                (id, "initiating".to_owned())
            }
        };
        if state != "available" {
            let now = self
                .wait_attachment(&ra, &id, &["pendingAcceptance", "available"])
                .await?;
            if now == "pendingAcceptance" {
                ra.ec2
                    .accept_transit_gateway_peering_attachment()
                    .transit_gateway_attachment_id(&id)
                    .send()
                    .await
                    .map_err(|e| {
                        aws_error("AcceptTransitGatewayPeeringAttachment", &ra.region, e)
                    })?;
                info!("accepted tgw peering {id} in {}", ra.region);
            }
            self.wait_attachment(&rr, &id, &["available"]).await?;
            self.tag(&ra, "CreateTags", &id, &key).await?;
        }
        Ok(id)
    }

    /// Each side's default route table: the peering associated, static routes to the far VPCs.
    async fn tgw_peering_routes(&self, p: &TgwPeeringPlan, id: &str) -> Result<(), Error> {
        let rr = self.d.aws.region(&p.requester_region);
        let ra = self.d.aws.region(&p.accepter_region);
        let (_, req_table, _) = self.tgw(&rr.region)?;
        let (_, acc_table, _) = self.tgw(&ra.region)?;
        for (r, table, cidrs) in [
            (&rr, &req_table, &p.requester_routes),
            (&ra, &acc_table, &p.accepter_routes),
        ] {
            tolerate_exists(
                r.ec2
                    .associate_transit_gateway_route_table()
                    .transit_gateway_route_table_id(table)
                    .transit_gateway_attachment_id(id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| aws_error("AssociateTransitGatewayRouteTable", &r.region, e)),
            )?;
            for cidr in cidrs {
                tolerate_exists(
                    r.ec2
                        .create_transit_gateway_route()
                        .transit_gateway_route_table_id(table)
                        .destination_cidr_block(cidr.to_string())
                        .transit_gateway_attachment_id(id)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("CreateTransitGatewayRoute", &r.region, e)),
                )?;
                info!("tgw route {cidr} -> {id} in {}", r.region);
            }
        }
        Ok(())
    }

    fn tgw(&self, region: &str) -> Result<(String, String, String), Error> {
        self.ids()
            .tgws
            .get(region)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no transit gateway in {region}")))
    }

    /// Waits until a Transit Gateway attachment is in one of `states`; returns the state.
    async fn wait_attachment(
        &self,
        r: &RegionClients,
        id: &str,
        states: &[&str],
    ) -> Result<String, Error> {
        self.d
            .timing
            .wait(
                &format!(
                    "transit gateway attachment {id} to be {}",
                    states.join(" or ")
                ),
                &r.region,
                || async {
                    let state = tgw_attachment(r, id)
                        .await?
                        .and_then(|a| a.state().map(|s| s.as_str().to_owned()));
                    match state.as_deref() {
                        Some(s) if ATTACHMENT_GONE.contains(&s) => Err(Error::Aws {
                            operation: "DescribeTransitGatewayAttachments",
                            region: r.region.clone(),
                            code: None,
                            message: format!("attachment {id} is {s}"),
                        }),
                        Some(s) if states.contains(&s) => Ok(Some(s.to_owned())),
                        _ => Ok(None),
                    }
                },
            )
            .await
    }
}
