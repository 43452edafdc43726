//! EC2 reads: finding what a run owns in one region (by tags, with client-side checks), the
//! instance-type checks made before anything is created, and small helpers for tags and filters.
//!
//! Every lookup re-checks tags and states on the client side, because AWS and the moto emulator
//! differ: moto ignores filters on DescribeVpcPeeringConnections and drops the tags given when
//! a Transit Gateway VPC attachment is created, so attachments are found through the Transit
//! Gateway or VPC they belong to. Deleted-but-still-listed resources (terminated instances,
//! `deleted` peerings and attachments) are left out. Not for creating or deleting anything.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use aws_sdk_ec2::types::{EnaSupport, Filter, LocationType, ResourceType, Tag, TagSpecification};

use crate::aws::{RegionClients, aws_error};
use crate::error::Error;
use crate::state::{RunId, RunTags, TAG_KEY, TAG_RUN};

/// The security group Global Accelerator creates in an endpoint's VPC.
pub const GA_GROUP_NAME: &str = "GlobalAccelerator";

/// Which runs a lookup is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// One run.
    Run(RunId),
    /// Every resource carrying an xbench run tag (for `gc`).
    AnyRun,
}

impl Selector {
    fn filter(&self) -> Filter {
        match self {
            Selector::Run(id) => Filter::builder()
                .name(format!("tag:{TAG_RUN}"))
                .values(id.as_str())
                .build(),
            Selector::AnyRun => Filter::builder().name("tag-key").values(TAG_RUN).build(),
        }
    }

    fn matches(&self, run: Option<&str>) -> bool {
        match (self, run) {
            (Selector::Run(id), Some(r)) => r == id.as_str(),
            (Selector::AnyRun, Some(_)) => true,
            (_, None) => false,
        }
    }
}

/// One resource found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// AWS id.
    pub id: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// The run it belongs to: its own tag, or, for resources whose tags may be missing, the tag
    /// of the Transit Gateway or VPC it hangs off.
    pub run: Option<String>,
    /// State as AWS names it, where the type has one.
    pub state: Option<String>,
    /// The VPC it is in (instances, subnets, route tables, groups, attachments).
    pub vpc_id: Option<String>,
    /// Related ids: an internet gateway's VPCs, a route table's non-main association ids, an
    /// attachment's Transit Gateway(s), a peering's requester and accepter VPCs.
    pub related: Vec<String>,
    /// An instance's primary network interface.
    pub eni_id: Option<String>,
    /// An instance's private address.
    pub private_ip: Option<Ipv4Addr>,
    /// An instance's public address.
    pub public_ip: Option<Ipv4Addr>,
    /// A route table's associated subnets; an instance's subnet.
    pub subnet_ids: Vec<String>,
}

impl Found {
    /// The plan key tag.
    pub fn key(&self) -> Option<&str> {
        self.tags.get(TAG_KEY).map(String::as_str)
    }
}

/// Everything of one selection in one region.
#[derive(Debug, Clone, Default)]
pub struct RegionInventory {
    /// Region.
    pub region: String,
    /// Instances not yet terminated.
    pub instances: Vec<Found>,
    /// VPCs.
    pub vpcs: Vec<Found>,
    /// Subnets.
    pub subnets: Vec<Found>,
    /// Route tables other than a VPC's main one.
    pub route_tables: Vec<Found>,
    /// Internet gateways.
    pub internet_gateways: Vec<Found>,
    /// Security groups other than a VPC's default one (including the one Global Accelerator
    /// leaves in a run's VPC).
    pub security_groups: Vec<Found>,
    /// Peering connections not deleted, rejected, failed or expired.
    pub vpc_peerings: Vec<Found>,
    /// Transit Gateways not deleted.
    pub transit_gateways: Vec<Found>,
    /// Transit Gateway VPC attachments not deleted.
    pub tgw_vpc_attachments: Vec<Found>,
    /// Transit Gateway peering attachments not deleted.
    pub tgw_peering_attachments: Vec<Found>,
}

impl RegionInventory {
    /// Total resources found.
    pub fn len(&self) -> usize {
        self.all().map(|(_, v)| v.len()).sum()
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (type name, resources) for each type, in teardown order.
    pub fn all(&self) -> impl Iterator<Item = (&'static str, &Vec<Found>)> {
        [
            ("instance", &self.instances),
            ("tgw peering attachment", &self.tgw_peering_attachments),
            ("tgw vpc attachment", &self.tgw_vpc_attachments),
            ("transit gateway", &self.transit_gateways),
            ("vpc peering", &self.vpc_peerings),
            ("subnet", &self.subnets),
            ("route table", &self.route_tables),
            ("internet gateway", &self.internet_gateways),
            ("security group", &self.security_groups),
            ("vpc", &self.vpcs),
        ]
        .into_iter()
    }

    /// The resource with plan key `key` among `list`.
    pub fn by_key<'a>(list: &'a [Found], key: &str) -> Option<&'a Found> {
        list.iter().find(|f| f.key() == Some(key))
    }
}

fn tag_map(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_owned(),
                t.value().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
}

fn own_run(tags: &BTreeMap<String, String>) -> Option<String> {
    tags.get(TAG_RUN).cloned()
}

/// A tag specification for a new resource of `kind` with plan key `key`.
pub fn tag_spec(kind: ResourceType, tags: &RunTags, key: &str) -> TagSpecification {
    let mut b = TagSpecification::builder().resource_type(kind);
    for (k, v) in tags.for_resource(key) {
        b = b.tags(Tag::builder().key(k).value(v).build());
    }
    b.build()
}

fn filter(name: &str, values: &[String]) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.to_vec()))
        .build()
}

/// Finds everything `sel` selects in `r`'s region.
pub async fn discover(r: &RegionClients, sel: &Selector) -> Result<RegionInventory, Error> {
    let region = r.region.as_str();
    let mut inv = RegionInventory {
        region: region.to_owned(),
        ..RegionInventory::default()
    };

    let vpcs = r
        .ec2
        .describe_vpcs()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeVpcs", region, e))?;
    for v in vpcs {
        let tags = tag_map(v.tags());
        let run = own_run(&tags);
        if sel.matches(run.as_deref()) {
            inv.vpcs.push(Found {
                id: v.vpc_id().unwrap_or_default().to_owned(),
                tags,
                run,
                state: v.state().map(|s| s.as_str().to_owned()),
                ..Found::default()
            });
        }
    }
    let vpc_ids: Vec<String> = inv.vpcs.iter().map(|v| v.id.clone()).collect();
    let vpc_run = |id: Option<&str>| -> Option<String> {
        id.and_then(|id| inv.vpcs.iter().find(|v| v.id == id))
            .and_then(|v| v.run.clone())
    };

    let reservations = r
        .ec2
        .describe_instances()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeInstances", region, e))?;
    for res in reservations {
        for i in res.instances() {
            let state = i
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_owned());
            if matches!(state.as_deref(), Some("terminated")) {
                continue;
            }
            let tags = tag_map(i.tags());
            let run = own_run(&tags);
            if !sel.matches(run.as_deref()) {
                continue;
            }
            let eni = i
                .network_interfaces()
                .iter()
                .find(|n| n.attachment().and_then(|a| a.device_index()) == Some(0))
                .or_else(|| i.network_interfaces().first());
            inv.instances.push(Found {
                id: i.instance_id().unwrap_or_default().to_owned(),
                tags,
                run,
                state,
                vpc_id: i.vpc_id().map(str::to_owned),
                eni_id: eni
                    .and_then(|n| n.network_interface_id())
                    .map(str::to_owned),
                private_ip: i.private_ip_address().and_then(|a| a.parse().ok()),
                public_ip: i.public_ip_address().and_then(|a| a.parse().ok()),
                subnet_ids: i.subnet_id().map(str::to_owned).into_iter().collect(),
                ..Found::default()
            });
        }
    }

    let subnets = r
        .ec2
        .describe_subnets()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeSubnets", region, e))?;
    for s in subnets {
        let tags = tag_map(s.tags());
        let run = own_run(&tags);
        if sel.matches(run.as_deref()) {
            inv.subnets.push(Found {
                id: s.subnet_id().unwrap_or_default().to_owned(),
                tags,
                run,
                vpc_id: s.vpc_id().map(str::to_owned),
                ..Found::default()
            });
        }
    }

    let tables = r
        .ec2
        .describe_route_tables()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeRouteTables", region, e))?;
    for t in tables {
        if t.associations().iter().any(|a| a.main() == Some(true)) {
            continue;
        }
        let tags = tag_map(t.tags());
        let run = own_run(&tags);
        if sel.matches(run.as_deref()) {
            inv.route_tables.push(Found {
                id: t.route_table_id().unwrap_or_default().to_owned(),
                tags,
                run,
                vpc_id: t.vpc_id().map(str::to_owned),
                related: t
                    .associations()
                    .iter()
                    .filter_map(|a| a.route_table_association_id().map(str::to_owned))
                    .collect(),
                subnet_ids: t
                    .associations()
                    .iter()
                    .filter_map(|a| a.subnet_id().map(str::to_owned))
                    .collect(),
                ..Found::default()
            });
        }
    }

    let igws = r
        .ec2
        .describe_internet_gateways()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeInternetGateways", region, e))?;
    for g in igws {
        let tags = tag_map(g.tags());
        let run = own_run(&tags);
        if sel.matches(run.as_deref()) {
            inv.internet_gateways.push(Found {
                id: g.internet_gateway_id().unwrap_or_default().to_owned(),
                tags,
                run,
                related: g
                    .attachments()
                    .iter()
                    .filter_map(|a| a.vpc_id().map(str::to_owned))
                    .collect(),
                ..Found::default()
            });
        }
    }

    let groups = r
        .ec2
        .describe_security_groups()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeSecurityGroups", region, e))?;
    for g in groups {
        if g.group_name() == Some("default") {
            continue;
        }
        let tags = tag_map(g.tags());
        let run = own_run(&tags);
        if sel.matches(run.as_deref()) {
            inv.security_groups.push(Found {
                id: g.group_id().unwrap_or_default().to_owned(),
                tags,
                run,
                vpc_id: g.vpc_id().map(str::to_owned),
                ..Found::default()
            });
        }
    }

    // Global Accelerator (client IP preservation) makes a security group named
    // "GlobalAccelerator" in the endpoint's VPC and leaves it behind; it carries none of our
    // tags but blocks deleting the VPC, so it counts as part of the run that owns the VPC.
    if !vpc_ids.is_empty() {
        let ga_groups = r
            .ec2
            .describe_security_groups()
            .filters(filter("vpc-id", &vpc_ids))
            .filters(filter("group-name", &[GA_GROUP_NAME.to_owned()]))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| aws_error("DescribeSecurityGroups", region, e))?;
        for g in ga_groups {
            let vpc = g.vpc_id().map(str::to_owned);
            let id = g.group_id().unwrap_or_default().to_owned();
            let ours = vpc.as_ref().is_some_and(|v| vpc_ids.contains(v));
            if g.group_name() != Some(GA_GROUP_NAME)
                || !ours
                || inv.security_groups.iter().any(|f| f.id == id)
            {
                continue;
            }
            let run = vpc_run(vpc.as_deref());
            if sel.matches(run.as_deref()) {
                inv.security_groups.push(Found {
                    id,
                    tags: tag_map(g.tags()),
                    run,
                    vpc_id: vpc,
                    ..Found::default()
                });
            }
        }
    }

    // moto ignores these filters and returns every peering in the region; AWS applies them.
    // Either way the client-side check below decides, and a peering whose tags are missing is
    // still ours when one of its VPCs is.
    let peerings = r
        .ec2
        .describe_vpc_peering_connections()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeVpcPeeringConnections", region, e))?;
    let mut peerings = peerings;
    if !vpc_ids.is_empty() {
        for side in ["requester-vpc-info.vpc-id", "accepter-vpc-info.vpc-id"] {
            let more = r
                .ec2
                .describe_vpc_peering_connections()
                .filters(filter(side, &vpc_ids))
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(|e| aws_error("DescribeVpcPeeringConnections", region, e))?;
            peerings.extend(more);
        }
    }
    for p in peerings {
        let id = p.vpc_peering_connection_id().unwrap_or_default().to_owned();
        if inv.vpc_peerings.iter().any(|f| f.id == id) {
            continue;
        }
        let state = p
            .status()
            .and_then(|s| s.code())
            .map(|c| c.as_str().to_owned());
        if matches!(
            state.as_deref(),
            Some("deleted" | "rejected" | "failed" | "expired" | "deleting")
        ) {
            continue;
        }
        let requester = p
            .requester_vpc_info()
            .and_then(|v| v.vpc_id())
            .map(str::to_owned);
        let accepter = p
            .accepter_vpc_info()
            .and_then(|v| v.vpc_id())
            .map(str::to_owned);
        let tags = tag_map(p.tags());
        let run = own_run(&tags)
            .or_else(|| vpc_run(requester.as_deref()))
            .or_else(|| vpc_run(accepter.as_deref()));
        if sel.matches(run.as_deref()) {
            inv.vpc_peerings.push(Found {
                id,
                tags,
                run,
                state,
                related: requester.into_iter().chain(accepter).collect(),
                ..Found::default()
            });
        }
    }

    let tgws = r
        .ec2
        .describe_transit_gateways()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeTransitGateways", region, e))?;
    for t in tgws {
        let state = t.state().map(|s| s.as_str().to_owned());
        if matches!(state.as_deref(), Some("deleted")) {
            continue;
        }
        let tags = tag_map(t.tags());
        let run = own_run(&tags);
        if sel.matches(run.as_deref()) {
            inv.transit_gateways.push(Found {
                id: t.transit_gateway_id().unwrap_or_default().to_owned(),
                tags,
                run,
                state,
                related: t
                    .options()
                    .and_then(|o| o.association_default_route_table_id())
                    .map(str::to_owned)
                    .into_iter()
                    .collect(),
                ..Found::default()
            });
        }
    }
    let tgw_ids: Vec<String> = inv.transit_gateways.iter().map(|t| t.id.clone()).collect();
    let tgw_run = |id: Option<&str>| -> Option<String> {
        id.and_then(|id| inv.transit_gateways.iter().find(|t| t.id == id))
            .and_then(|t| t.run.clone())
    };

    // moto keeps no tags on VPC attachments, so look them up by their Transit Gateway and VPC.
    let mut attachments = Vec::new();
    for (name, ids) in [("transit-gateway-id", &tgw_ids), ("vpc-id", &vpc_ids)] {
        if ids.is_empty() {
            continue;
        }
        let found = r
            .ec2
            .describe_transit_gateway_vpc_attachments()
            .filters(filter(name, ids))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| aws_error("DescribeTransitGatewayVpcAttachments", region, e))?;
        attachments.extend(found);
    }
    for a in attachments {
        let id = a
            .transit_gateway_attachment_id()
            .unwrap_or_default()
            .to_owned();
        let state = a.state().map(|s| s.as_str().to_owned());
        if inv.tgw_vpc_attachments.iter().any(|f| f.id == id)
            || matches!(state.as_deref(), Some("deleted" | "rejected" | "failed"))
        {
            continue;
        }
        let tgw = a.transit_gateway_id().map(str::to_owned);
        let vpc = a.vpc_id().map(str::to_owned);
        // Client-side re-check: the filters above may be ignored by an emulator.
        let ours = tgw.as_ref().is_some_and(|t| tgw_ids.contains(t))
            || vpc.as_ref().is_some_and(|v| vpc_ids.contains(v));
        let tags = tag_map(a.tags());
        let run = own_run(&tags)
            .or_else(|| tgw_run(tgw.as_deref()))
            .or_else(|| vpc_run(vpc.as_deref()));
        if ours && sel.matches(run.as_deref()) {
            inv.tgw_vpc_attachments.push(Found {
                id,
                tags,
                run,
                state,
                vpc_id: vpc,
                related: tgw.into_iter().collect(),
                ..Found::default()
            });
        }
    }

    let mut peer_attachments = r
        .ec2
        .describe_transit_gateway_peering_attachments()
        .filters(sel.filter())
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("DescribeTransitGatewayPeeringAttachments", region, e))?;
    if !tgw_ids.is_empty() {
        let more = r
            .ec2
            .describe_transit_gateway_peering_attachments()
            .filters(filter("transit-gateway-id", &tgw_ids))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| aws_error("DescribeTransitGatewayPeeringAttachments", region, e))?;
        peer_attachments.extend(more);
    }
    for a in peer_attachments {
        let id = a
            .transit_gateway_attachment_id()
            .unwrap_or_default()
            .to_owned();
        let state = a.state().map(|s| s.as_str().to_owned());
        if inv.tgw_peering_attachments.iter().any(|f| f.id == id)
            || matches!(state.as_deref(), Some("deleted" | "rejected" | "failed"))
        {
            continue;
        }
        let sides: Vec<String> = [a.requester_tgw_info(), a.accepter_tgw_info()]
            .into_iter()
            .flatten()
            .filter_map(|i| i.transit_gateway_id().map(str::to_owned))
            .collect();
        let tags = tag_map(a.tags());
        let run = own_run(&tags).or_else(|| sides.iter().find_map(|t| tgw_run(Some(t))));
        if sel.matches(run.as_deref()) {
            inv.tgw_peering_attachments.push(Found {
                id,
                tags,
                run,
                state,
                related: sides,
                ..Found::default()
            });
        }
    }
    Ok(inv)
}

/// What DescribeInstanceTypes says about a type's network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceTypeFacts {
    /// `required`, `supported` or `unsupported`.
    pub ena: String,
    /// Advertised network performance, e.g. "Up to 10 Gigabit".
    pub network_performance: Option<String>,
    /// Architectures, e.g. `x86_64`, `arm64`.
    pub architectures: Vec<String>,
}

/// Looks up `instance_type` in `r`'s region and refuses types without ENA.
pub async fn check_instance_type(
    r: &RegionClients,
    instance_type: &str,
) -> Result<InstanceTypeFacts, Error> {
    let out = r
        .ec2
        .describe_instance_types()
        .instance_types(instance_type.into())
        .send()
        .await
        .map_err(|e| {
            let err = aws_error("DescribeInstanceTypes", &r.region, e);
            if err.aws_code() == Some("InvalidInstanceType") {
                Error::InstanceTypeUnavailable {
                    instance_type: instance_type.to_owned(),
                    region: r.region.clone(),
                    zone: None,
                }
            } else {
                err
            }
        })?;
    let Some(info) = out.instance_types().first() else {
        return Err(Error::InstanceTypeUnavailable {
            instance_type: instance_type.to_owned(),
            region: r.region.clone(),
            zone: None,
        });
    };
    let net = info.network_info();
    let ena = net.and_then(|n| n.ena_support());
    let facts = InstanceTypeFacts {
        ena: ena
            .map(|e| e.as_str().to_owned())
            .unwrap_or_else(|| "unknown".into()),
        network_performance: net.and_then(|n| n.network_performance()).map(str::to_owned),
        architectures: info
            .processor_info()
            .map(|p| {
                p.supported_architectures()
                    .iter()
                    .map(|a| a.as_str().to_owned())
                    .collect()
            })
            .unwrap_or_default(),
    };
    match ena {
        Some(EnaSupport::Required | EnaSupport::Supported) => Ok(facts),
        _ => Err(Error::NoEnhancedNetworking {
            instance_type: instance_type.to_owned(),
            region: r.region.clone(),
            ena: facts.ena,
            suggestion: ena_suggestion(instance_type),
        }),
    }
}

/// A current type with ENA in place of an older one.
pub fn ena_suggestion(instance_type: &str) -> String {
    let (family, size) = instance_type
        .split_once('.')
        .unwrap_or((instance_type, "large"));
    let newer = match family {
        "t1" | "t2" => Some("t3"),
        "m1" | "m3" | "m4" => Some("m5"),
        "c1" | "c3" | "c4" => Some("c5"),
        "m2" | "r3" | "r4" => Some("r5"),
        "i2" => Some("i3"),
        "d2" => Some("d3"),
        "g2" => Some("g4dn"),
        _ => None,
    };
    match newer {
        Some(n) if !size.is_empty() => format!(
            "{n}.{size} (same size, ENA) or m5.large (ENA, up to 10 Gigabit), as the field reports did"
        ),
        _ => "m5.large (ENA, up to 10 Gigabit) or c5n.large (ENA, up to 25 Gigabit)".to_owned(),
    }
}

/// The first zone of `r`'s region (alphabetically) that offers `instance_type`.
pub async fn pick_zone(r: &RegionClients, instance_type: &str) -> Result<String, Error> {
    let out = r
        .ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .filters(filter("instance-type", &[instance_type.to_owned()]))
        .send()
        .await
        .map_err(|e| aws_error("DescribeInstanceTypeOfferings", &r.region, e))?;
    let mut zones: Vec<String> = out
        .instance_type_offerings()
        .iter()
        .filter(|o| o.instance_type().map(|t| t.as_str()) == Some(instance_type))
        .filter_map(|o| o.location().map(str::to_owned))
        .filter(|z| z.starts_with(r.region.as_str()))
        .collect();
    zones.sort();
    zones
        .into_iter()
        .next()
        .ok_or_else(|| Error::InstanceTypeUnavailable {
            instance_type: instance_type.to_owned(),
            region: r.region.clone(),
            zone: None,
        })
}
