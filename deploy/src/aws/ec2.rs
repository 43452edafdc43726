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

use aws_sdk_ec2::types::{
    EnaSupport, Filter, LocationType, ResourceType, Tag, TagSpecification, TransitGatewayAttachment,
};

use crate::aws::{RegionClients, aws_error};
use crate::error::{Error, not_found_is_none};
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

    /// Whether a resource of run `run` (`None`: no run tag) is selected: the one rule for
    /// every kind of resource, EC2's and the other services'.
    pub fn matches(&self, run: Option<&str>) -> bool {
        match (self, run) {
            (Selector::Run(id), Some(r)) => r == id.as_str(),
            (Selector::AnyRun, Some(_)) => true,
            (_, None) => false,
        }
    }

    /// Whether a resource with `tags` is selected, by its run tag.
    pub fn selects(&self, tags: &BTreeMap<String, String>) -> bool {
        self.matches(tags.get(TAG_RUN).map(String::as_str))
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
    /// Your virtual private gateways attached to the run's VPCs (hybrid paths): the id is the
    /// gateway's, `vpc_id` the run's VPC. `down` detaches them; the gateways are not the run's.
    pub vgw_attachments: Vec<Found>,
    /// Kinds AWS refused to list for lack of permission (Transit Gateways and their
    /// attachments: a caller may lack `ec2:DescribeTransitGateway*` and still run scenarios
    /// without them), with AWS's words. Whoever needs the kind decides whether that matters.
    pub unlisted: Vec<(&'static str, String)>,
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
            ("vgw attachment", &self.vgw_attachments),
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

/// Every item of a paginated EC2 Describe call, with filters.
macro_rules! describe {
    ($r:expr, $op:ident, $name:literal $(, $f:expr)*) => {
        $r.ec2
            .$op()
            $(.filters($f))*
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| aws_error($name, &$r.region, e))
    };
}

/// Finds everything `sel` selects in `r`'s region: one small lister per resource kind, each
/// followed by the same client-side selection with the kind's rules (which states mean gone,
/// whether a resource without tags belongs to the run of the VPC or Transit Gateway it
/// names).
pub async fn discover(r: &RegionClients, sel: &Selector) -> Result<RegionInventory, Error> {
    let mut inv = RegionInventory {
        region: r.region.clone(),
        ..RegionInventory::default()
    };
    let mut owners = Owners::default();
    let tagged = sel.filter();
    let vpcs: Vec<_> = describe!(r, describe_vpcs, "DescribeVpcs", tagged.clone())?;
    inv.vpcs = select(sel, &VPC, vpcs.iter().map(from_vpc), &owners);
    owners.note(&inv.vpcs);
    let vpc_ids = ids(&inv.vpcs);

    let reservations: Vec<_> =
        describe!(r, describe_instances, "DescribeInstances", tagged.clone())?;
    let instances = reservations.iter().flat_map(|res| res.instances());
    inv.instances = select(sel, &INSTANCE, instances.map(from_instance), &owners);
    let subnets: Vec<_> = describe!(r, describe_subnets, "DescribeSubnets", tagged.clone())?;
    inv.subnets = select(sel, &PLAIN, subnets.iter().map(from_subnet), &owners);
    let tables: Vec<_> = describe!(
        r,
        describe_route_tables,
        "DescribeRouteTables",
        tagged.clone()
    )?;
    inv.route_tables = select(
        sel,
        &PLAIN,
        tables.iter().filter_map(from_route_table),
        &owners,
    );
    let igws: Vec<_> = describe!(
        r,
        describe_internet_gateways,
        "DescribeInternetGateways",
        tagged.clone()
    )?;
    inv.internet_gateways = select(sel, &PLAIN, igws.iter().map(from_igw), &owners);
    inv.security_groups = security_groups(r, sel, &vpc_ids, &owners).await?;
    inv.vpc_peerings = vpc_peerings(r, sel, &vpc_ids, &owners).await?;
    inv.vgw_attachments = vgw_attachments(r, sel, &vpc_ids, &owners).await?;

    let tgws: Result<Vec<_>, Error> = describe!(
        r,
        describe_transit_gateways,
        "DescribeTransitGateways",
        tagged.clone()
    );
    let Some(tgws) = permitted(&mut inv, "transit gateways", tgws)? else {
        return Ok(inv);
    };
    inv.transit_gateways = select(sel, &TGW, tgws.iter().map(from_tgw), &owners);
    owners.note(&inv.transit_gateways);
    let tgw_ids = ids(&inv.transit_gateways);
    let vpc_attachments = tgw_vpc_attachments(r, sel, &tgw_ids, &vpc_ids, &owners).await;
    if let Some(a) = permitted(&mut inv, "tgw vpc attachments", vpc_attachments)? {
        inv.tgw_vpc_attachments = a;
    }
    let peering_attachments = tgw_peering_attachments(r, sel, &tgw_ids, &owners).await;
    if let Some(a) = permitted(&mut inv, "tgw peering attachments", peering_attachments)? {
        inv.tgw_peering_attachments = a;
    }
    Ok(inv)
}

/// A listing's result, or `None` with the refusal noted in `inv.unlisted` when AWS denied
/// the permission; any other error stays an error.
fn permitted<T>(
    inv: &mut RegionInventory,
    kind: &'static str,
    r: Result<T, Error>,
) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_access_denied() => {
            inv.unlisted.push((kind, e.to_string()));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// How one kind of resource is judged once listed.
struct Kind {
    /// States in which AWS (or moto) still lists a resource that is gone.
    gone: &'static [&'static str],
    /// Whether a resource without our tags belongs to the run of the VPC or Transit Gateway
    /// it names: moto drops the tags of Transit Gateway VPC attachments, tags do not cross
    /// regions with a peering, and Global Accelerator's own group in our VPC has none.
    inherits: bool,
}

const PLAIN: Kind = Kind {
    gone: &[],
    inherits: false,
};
const VPC: Kind = PLAIN;
const INSTANCE: Kind = Kind {
    gone: &["terminated"],
    inherits: false,
};
const TGW: Kind = Kind {
    gone: &["deleted"],
    inherits: false,
};
const GA_GROUP: Kind = Kind {
    gone: &[],
    inherits: true,
};
const PEERING: Kind = Kind {
    gone: &["deleted", "rejected", "failed", "expired", "deleting"],
    inherits: true,
};
const VGW_ATTACHMENT: Kind = Kind {
    gone: &["detached"],
    inherits: true,
};
const ATTACHMENT: Kind = Kind {
    gone: ATTACHMENT_GONE,
    inherits: true,
};

/// The states of a Transit Gateway attachment that is gone or never will be available:
/// discovery passes over it, `down` waits for one, `up` gives up on one.
pub const ATTACHMENT_GONE: &[&str] = &["deleted", "rejected", "failed"];

/// Transit Gateway attachment `id` as AWS lists it, `None` once AWS no longer knows it: what
/// `up` waits on to be available and `down` to be deleted.
pub async fn tgw_attachment(
    r: &RegionClients,
    id: &str,
) -> Result<Option<TransitGatewayAttachment>, Error> {
    let out = r
        .ec2
        .describe_transit_gateway_attachments()
        .transit_gateway_attachment_ids(id)
        .send()
        .await;
    match out {
        Ok(o) => Ok(o
            .transit_gateway_attachments()
            .iter()
            .find(|a| a.transit_gateway_attachment_id() == Some(id))
            .cloned()),
        Err(e) => not_found_is_none(aws_error("DescribeTransitGatewayAttachments", &r.region, e)),
    }
}

/// The run of each VPC and Transit Gateway found so far.
#[derive(Default)]
struct Owners(BTreeMap<String, String>);

impl Owners {
    fn note(&mut self, found: &[Found]) {
        for f in found {
            if let Some(run) = &f.run {
                self.0.insert(f.id.clone(), run.clone());
            }
        }
    }

    /// The run of the first VPC or Transit Gateway `f` names.
    fn of(&self, f: &Found) -> Option<String> {
        f.vpc_id
            .iter()
            .chain(f.related.iter())
            .find_map(|id| self.0.get(id).cloned())
    }
}

/// The client-side selection every lister ends with: gone states and repeats dropped, the run
/// read from the resource's own tag (or inherited, for kinds that may lack tags), and only
/// what `sel` selects kept. Filters sent to AWS are never trusted alone: moto ignores some.
fn select(
    sel: &Selector,
    kind: &Kind,
    found: impl IntoIterator<Item = Found>,
    owners: &Owners,
) -> Vec<Found> {
    let mut out: Vec<Found> = Vec::new();
    for mut f in found {
        let gone = f.state.as_deref().is_some_and(|s| kind.gone.contains(&s));
        if gone || out.iter().any(|o| o.id == f.id) {
            continue;
        }
        f.run = own_run(&f.tags).or_else(|| kind.inherits.then(|| owners.of(&f)).flatten());
        if sel.matches(f.run.as_deref()) {
            out.push(f);
        }
    }
    out
}

fn ids(found: &[Found]) -> Vec<String> {
    found.iter().map(|f| f.id.clone()).collect()
}

fn from_vpc(v: &aws_sdk_ec2::types::Vpc) -> Found {
    Found {
        id: v.vpc_id().unwrap_or_default().to_owned(),
        tags: tag_map(v.tags()),
        state: v.state().map(|s| s.as_str().to_owned()),
        ..Found::default()
    }
}

fn from_instance(i: &aws_sdk_ec2::types::Instance) -> Found {
    let eni = i
        .network_interfaces()
        .iter()
        .find(|n| n.attachment().and_then(|a| a.device_index()) == Some(0))
        .or_else(|| i.network_interfaces().first());
    Found {
        id: i.instance_id().unwrap_or_default().to_owned(),
        tags: tag_map(i.tags()),
        state: i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_owned()),
        vpc_id: i.vpc_id().map(str::to_owned),
        eni_id: eni
            .and_then(|n| n.network_interface_id())
            .map(str::to_owned),
        private_ip: i.private_ip_address().and_then(|a| a.parse().ok()),
        public_ip: i.public_ip_address().and_then(|a| a.parse().ok()),
        subnet_ids: i.subnet_id().map(str::to_owned).into_iter().collect(),
        ..Found::default()
    }
}

fn from_subnet(s: &aws_sdk_ec2::types::Subnet) -> Found {
    Found {
        id: s.subnet_id().unwrap_or_default().to_owned(),
        tags: tag_map(s.tags()),
        vpc_id: s.vpc_id().map(str::to_owned),
        ..Found::default()
    }
}

/// A route table other than a VPC's main one (which goes with its VPC).
fn from_route_table(t: &aws_sdk_ec2::types::RouteTable) -> Option<Found> {
    if t.associations().iter().any(|a| a.main() == Some(true)) {
        return None;
    }
    Some(Found {
        id: t.route_table_id().unwrap_or_default().to_owned(),
        tags: tag_map(t.tags()),
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
    })
}

fn from_igw(g: &aws_sdk_ec2::types::InternetGateway) -> Found {
    Found {
        id: g.internet_gateway_id().unwrap_or_default().to_owned(),
        tags: tag_map(g.tags()),
        related: g
            .attachments()
            .iter()
            .filter_map(|a| a.vpc_id().map(str::to_owned))
            .collect(),
        ..Found::default()
    }
}

fn from_group(g: &aws_sdk_ec2::types::SecurityGroup) -> Found {
    Found {
        id: g.group_id().unwrap_or_default().to_owned(),
        tags: tag_map(g.tags()),
        vpc_id: g.vpc_id().map(str::to_owned),
        ..Found::default()
    }
}

fn from_peering(p: &aws_sdk_ec2::types::VpcPeeringConnection) -> Found {
    let vpc = |i: Option<&aws_sdk_ec2::types::VpcPeeringConnectionVpcInfo>| {
        i.and_then(|v| v.vpc_id()).map(str::to_owned)
    };
    Found {
        id: p.vpc_peering_connection_id().unwrap_or_default().to_owned(),
        tags: tag_map(p.tags()),
        state: p
            .status()
            .and_then(|s| s.code())
            .map(|c| c.as_str().to_owned()),
        // Requester first, then accepter: `up` matches a peering by this order.
        related: vpc(p.requester_vpc_info())
            .into_iter()
            .chain(vpc(p.accepter_vpc_info()))
            .collect(),
        ..Found::default()
    }
}

fn from_tgw(t: &aws_sdk_ec2::types::TransitGateway) -> Found {
    Found {
        id: t.transit_gateway_id().unwrap_or_default().to_owned(),
        tags: tag_map(t.tags()),
        state: t.state().map(|s| s.as_str().to_owned()),
        // Its default route table, which `up` routes TGW peerings in.
        related: t
            .options()
            .and_then(|o| o.association_default_route_table_id())
            .map(str::to_owned)
            .into_iter()
            .collect(),
        ..Found::default()
    }
}

/// Groups other than a VPC's default one, and the group Global Accelerator (client IP
/// preservation) makes in an endpoint's VPC: it carries none of our tags but blocks deleting
/// the VPC, so it counts as part of the run that owns the VPC.
async fn security_groups(
    r: &RegionClients,
    sel: &Selector,
    vpc_ids: &[String],
    owners: &Owners,
) -> Result<Vec<Found>, Error> {
    let groups: Vec<_> = describe!(
        r,
        describe_security_groups,
        "DescribeSecurityGroups",
        sel.filter()
    )?;
    let mut found = select(
        sel,
        &PLAIN,
        groups
            .iter()
            .filter(|g| g.group_name() != Some("default"))
            .map(from_group),
        owners,
    );
    if vpc_ids.is_empty() {
        return Ok(found);
    }
    let ga: Vec<_> = describe!(
        r,
        describe_security_groups,
        "DescribeSecurityGroups",
        filter("vpc-id", vpc_ids),
        filter("group-name", &[GA_GROUP_NAME.to_owned()])
    )?;
    let ga = ga
        .iter()
        .filter(|g| g.group_name() == Some(GA_GROUP_NAME))
        .filter(|g| g.vpc_id().is_some_and(|v| vpc_ids.iter().any(|o| o == v)))
        .map(from_group)
        .filter(|g| !found.iter().any(|f| f.id == g.id));
    let ga = select(sel, &GA_GROUP, ga.collect::<Vec<_>>(), owners);
    found.extend(ga);
    Ok(found)
}

/// Peerings by tag and by either of our VPCs. moto ignores these filters and returns every
/// peering in the region; the selection decides either way, and a peering without our tags
/// (the accepter side on AWS, where tags do not cross regions) is ours if one of its VPCs is.
async fn vpc_peerings(
    r: &RegionClients,
    sel: &Selector,
    vpc_ids: &[String],
    owners: &Owners,
) -> Result<Vec<Found>, Error> {
    let mut all: Vec<_> = describe!(
        r,
        describe_vpc_peering_connections,
        "DescribeVpcPeeringConnections",
        sel.filter()
    )?;
    if !vpc_ids.is_empty() {
        for side in ["requester-vpc-info.vpc-id", "accepter-vpc-info.vpc-id"] {
            let more: Vec<_> = describe!(
                r,
                describe_vpc_peering_connections,
                "DescribeVpcPeeringConnections",
                filter(side, vpc_ids)
            )?;
            all.extend(more);
        }
    }
    Ok(select(sel, &PEERING, all.iter().map(from_peering), owners))
}

/// VPC attachments by their Transit Gateway and by their VPC: moto keeps no tags on them.
async fn tgw_vpc_attachments(
    r: &RegionClients,
    sel: &Selector,
    tgw_ids: &[String],
    vpc_ids: &[String],
    owners: &Owners,
) -> Result<Vec<Found>, Error> {
    let mut all = Vec::new();
    for (name, ids) in [("transit-gateway-id", tgw_ids), ("vpc-id", vpc_ids)] {
        if ids.is_empty() {
            continue;
        }
        let found: Vec<_> = describe!(
            r,
            describe_transit_gateway_vpc_attachments,
            "DescribeTransitGatewayVpcAttachments",
            filter(name, ids)
        )?;
        all.extend(found);
    }
    let found = all.iter().map(|a| Found {
        id: a
            .transit_gateway_attachment_id()
            .unwrap_or_default()
            .to_owned(),
        tags: tag_map(a.tags()),
        state: a.state().map(|s| s.as_str().to_owned()),
        vpc_id: a.vpc_id().map(str::to_owned),
        related: a
            .transit_gateway_id()
            .map(str::to_owned)
            .into_iter()
            .collect(),
        ..Found::default()
    });
    Ok(select(sel, &ATTACHMENT, found.collect::<Vec<_>>(), owners))
}

/// Virtual private gateways attached to the run's VPCs, one entry per (gateway, VPC), owned
/// by the VPC's run (the gateway is yours and carries none of our tags).
async fn vgw_attachments(
    r: &RegionClients,
    sel: &Selector,
    vpc_ids: &[String],
    owners: &Owners,
) -> Result<Vec<Found>, Error> {
    if vpc_ids.is_empty() {
        return Ok(Vec::new());
    }
    let gateways: Vec<_> = r
        .ec2
        .describe_vpn_gateways()
        .filters(filter("attachment.vpc-id", vpc_ids))
        .send()
        .await
        .map_err(|e| aws_error("DescribeVpnGateways", &r.region, e))?
        .vpn_gateways()
        .to_vec();
    // moto keeps detached attachments listed (and matching the filter): judged by state.
    let found = gateways.iter().flat_map(|g| {
        g.vpc_attachments()
            .iter()
            .filter(|a| a.vpc_id().is_some_and(|v| vpc_ids.iter().any(|o| o == v)))
            .map(|a| Found {
                id: g.vpn_gateway_id().unwrap_or_default().to_owned(),
                state: a.state().map(|s| s.as_str().to_owned()),
                vpc_id: a.vpc_id().map(str::to_owned),
                ..Found::default()
            })
    });
    Ok(select(
        sel,
        &VGW_ATTACHMENT,
        found.collect::<Vec<_>>(),
        owners,
    ))
}

/// Peering attachments by tag and by either of our Transit Gateways.
async fn tgw_peering_attachments(
    r: &RegionClients,
    sel: &Selector,
    tgw_ids: &[String],
    owners: &Owners,
) -> Result<Vec<Found>, Error> {
    let mut all: Vec<_> = describe!(
        r,
        describe_transit_gateway_peering_attachments,
        "DescribeTransitGatewayPeeringAttachments",
        sel.filter()
    )?;
    if !tgw_ids.is_empty() {
        let more: Vec<_> = describe!(
            r,
            describe_transit_gateway_peering_attachments,
            "DescribeTransitGatewayPeeringAttachments",
            filter("transit-gateway-id", tgw_ids)
        )?;
        all.extend(more);
    }
    let found = all.iter().map(|a| Found {
        id: a
            .transit_gateway_attachment_id()
            .unwrap_or_default()
            .to_owned(),
        tags: tag_map(a.tags()),
        state: a.state().map(|s| s.as_str().to_owned()),
        related: [a.requester_tgw_info(), a.accepter_tgw_info()]
            .into_iter()
            .flatten()
            .filter_map(|i| i.transit_gateway_id().map(str::to_owned))
            .collect(),
        ..Found::default()
    });
    Ok(select(sel, &ATTACHMENT, found.collect::<Vec<_>>(), owners))
}

/// What DescribeInstanceTypes says about a type's network.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceTypeFacts {
    /// `required`, `supported` or `unsupported`.
    pub ena: String,
    /// Advertised network performance, e.g. "Up to 10 Gigabit".
    pub network_performance: Option<String>,
    /// Architectures, e.g. `x86_64`, `arm64`.
    pub architectures: Vec<String>,
    /// Default vCPUs (what the vCPU quota counts).
    pub vcpus: Option<u32>,
    /// The first network card's baseline and peak bandwidth, Gbit/s, where AWS reports them.
    pub bandwidth_gbps: Option<(f64, f64)>,
    /// How the type does enhanced networking: `ENA`, or `Intel 82599 VF` (older families).
    pub enhanced_networking: &'static str,
}

/// Families whose enhanced networking is the Intel 82599 Virtual Function (SR-IOV with the
/// ixgbevf driver) rather than ENA: AWS's list of instance types that support it.
pub const INTEL_82599_FAMILIES: &[&str] = &["c3", "c4", "d2", "i2", "m4", "r3"];

/// Whether `instance_type` has the Intel 82599 VF (m4.16xlarge has ENA instead).
pub fn intel_82599(instance_type: &str) -> bool {
    let family = instance_type.split('.').next().unwrap_or_default();
    INTEL_82599_FAMILIES.contains(&family) && instance_type != "m4.16xlarge"
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
        vcpus: info
            .v_cpu_info()
            .and_then(|v| v.default_v_cpus())
            .and_then(|v| u32::try_from(v).ok()),
        bandwidth_gbps: net
            .and_then(|n| n.network_cards().first())
            .and_then(|c| Some((c.baseline_bandwidth_in_gbps()?, c.peak_bandwidth_in_gbps()?))),
        enhanced_networking: "ENA",
    };
    match ena {
        Some(EnaSupport::Required | EnaSupport::Supported) => Ok(facts),
        // Report 004's c3.8xlarge: enhanced networking through the Intel 82599 VF.
        _ if intel_82599(instance_type) => Ok(InstanceTypeFacts {
            enhanced_networking: "Intel 82599 VF",
            ..facts
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Report 004's c3.8xlarge does enhanced networking through the Intel 82599 VF, not ENA.
    #[test]
    fn intel_82599_families_are_recognised() {
        for t in [
            "c3.8xlarge",
            "c4.large",
            "m4.10xlarge",
            "r3.large",
            "d2.xlarge",
            "i2.xlarge",
        ] {
            assert!(intel_82599(t), "{t}");
        }
        for t in ["m4.16xlarge", "m5.large", "t2.micro", "c5n.large"] {
            assert!(!intel_82599(t), "{t}");
        }
    }
}
