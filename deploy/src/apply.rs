//! `up`: checks what only AWS can answer (ENA, AMIs, zones), then creates a [`Plan`] in
//! dependency order, and on failure or interruption deletes what it made (unless told to keep
//! it).
//!
//! Idempotent: every resource is tagged with its plan key at creation, and a run given an
//! existing run id first looks up what exists and creates only the rest. The order is: placement
//! groups; per VPC the VPC, internet gateway, security groups, subnets and route tables; VPC
//! peerings (accepted in the peer region); Transit Gateways, their VPC attachments, peerings
//! and static routes; server hosts and VPN gateways; routes through peerings, Transit Gateways
//! and gateways; accelerators; client hosts (whose boot script already knows its target); and
//! last the security-group rules that name hosts' public addresses. Not for deleting: see
//! [`crate::teardown`].

use std::collections::HashMap;
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::types::{
    AttributeBooleanValue, HttpTokensState, InstanceMetadataOptionsRequest,
    InstanceNetworkInterfaceSpecification, InstanceType, IpPermission, IpRange, Placement,
    ResourceType, Tag,
};
use tracing::info;

use crate::aws::ec2::{self, Found, RegionInventory, Selector, tag_spec};
use crate::aws::placement::group_name;
use crate::aws::{RegionClients, accelerator, aws_error, ssm};
use crate::deployer::Deployer;
use crate::error::Error;
use crate::plan::{
    GroupKind, HostPlan, HostRole, IngressPlan, IngressSource, PathClient, PathTarget, Plan,
    RouteTarget,
};
use crate::scenario::Scenario;
use crate::state::{
    HostOutput, LocalState, OUTPUTS_FORMAT, Outputs, PathOutput, RunId, RunTags, client_command,
};
use crate::userdata::{self, WgKeys};

/// How to run `up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Continue this run instead of starting a new one.
    pub run_id: Option<RunId>,
    /// On failure or interruption, leave what was created (for inspection or a later resume).
    pub keep_on_failure: bool,
    /// The time the run starts (deletion-due is this plus the scenario's TTL).
    pub now: SystemTime,
}

impl Default for UpOptions {
    fn default() -> Self {
        UpOptions {
            run_id: None,
            keep_on_failure: false,
            now: SystemTime::now(),
        }
    }
}

/// What only AWS can tell, looked up before anything is created.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    /// (region, instance type) → advertised network performance.
    pub network_performance: HashMap<(String, String), Option<String>>,
    /// (region, instance type) → AMI id.
    pub amis: HashMap<(String, String), String>,
    /// VPC name → availability zone.
    pub zones: HashMap<String, String>,
}

impl Deployer {
    /// Checks instance types (ENA), resolves AMIs and picks zones, creating nothing.
    pub async fn preflight(&self, scenario: &Scenario, plan: &Plan) -> Result<Preflight, Error> {
        let mut pre = Preflight::default();
        let mut arch: HashMap<(String, String), Vec<String>> = HashMap::new();
        for h in &plan.hosts {
            let region = self.region_of(plan, &h.vpc)?;
            let k = (region.clone(), h.instance_type.clone());
            if arch.contains_key(&k) {
                continue;
            }
            let r = self.aws.region(&region);
            let facts = ec2::check_instance_type(&r, &h.instance_type).await?;
            info!(
                "{} in {region}: ENA {}, network {}",
                h.instance_type,
                facts.ena,
                facts.network_performance.as_deref().unwrap_or("unknown")
            );
            pre.network_performance
                .insert(k.clone(), facts.network_performance.clone());
            arch.insert(k, facts.architectures);
        }
        for ((region, ty), archs) in &arch {
            let r = self.aws.region(region);
            let ami = ssm::resolve_ami(&r, &scenario.ami, archs).await?;
            pre.amis.insert((region.clone(), ty.clone()), ami);
        }
        for v in &plan.vpcs {
            let zone = match &v.az {
                Some(z) => z.clone(),
                None => {
                    let ty = plan
                        .hosts
                        .iter()
                        .find(|h| h.vpc == v.name)
                        .map(|h| h.instance_type.clone())
                        .unwrap_or_else(|| scenario.instance_type.clone());
                    ec2::pick_zone(&self.aws.region(&v.region), &ty).await?
                }
            };
            pre.zones.insert(v.name.clone(), zone);
        }
        Ok(pre)
    }

    /// Builds `plan`. Stops early (and cleans up unless `keep_on_failure`) when `interrupt`
    /// completes. The outputs are also written to the state directory.
    pub async fn up<F>(
        &self,
        scenario: &Scenario,
        plan: &Plan,
        opts: &UpOptions,
        interrupt: F,
    ) -> Result<Outputs, Error>
    where
        F: Future<Output = ()>,
    {
        let run = match &opts.run_id {
            Some(r) => r.clone(),
            None => RunId::generate(opts.now)?,
        };
        let regions = plan.regions();
        let mut tags = RunTags::new(
            run.clone(),
            &scenario.name,
            opts.now,
            Duration::from_secs(u64::from(scenario.ttl_hours) * 3600),
            &regions,
        );
        tags.uses_placement = !plan.placement_groups.is_empty();
        // Refusals here (no ENA, no AMI, no such type) happen before anything exists.
        let pre = self.preflight(scenario, plan).await?;

        let mut local = self.state.load(&run)?.unwrap_or_default();
        local.run_id = Some(run.clone());
        local.scenario = scenario.name.clone();
        for r in &regions {
            if !local.regions.contains(r) {
                local.regions.push(r.clone());
            }
        }
        local.deletion_due = tags.deletion_due.clone();
        local.status = "creating".into();
        local.uses_placement |= tags.uses_placement;
        self.state.save(&run, &local)?;
        info!("run {run}: creating in {}", regions.join(", "));

        let build = Build {
            d: self,
            s: scenario,
            plan,
            tags: &tags,
            pre: &pre,
            local: Mutex::new(local),
            ids: Mutex::new(Ids::default()),
        };
        let outcome = tokio::select! {
            r = build.run() => r,
            () = interrupt => Err(Error::Interrupted),
        };
        let mut local = build
            .local
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match outcome {
            Ok(outputs) => {
                local.status = "up".into();
                self.state.save(&run, &local)?;
                self.state.save_outputs(&outputs)?;
                Ok(outputs)
            }
            Err(source) => {
                local.status = "failed".into();
                self.state.save(&run, &local)?;
                if opts.keep_on_failure {
                    return Err(Error::UpFailed {
                        run_id: run.to_string(),
                        cause: Box::new(source),
                        teardown: None,
                        kept: true,
                    });
                }
                info!("run {run}: {source}; deleting what was created");
                let teardown = self.down(&run, &regions).await.err().map(Box::new);
                Err(Error::UpFailed {
                    run_id: run.to_string(),
                    cause: Box::new(source),
                    teardown,
                    kept: false,
                })
            }
        }
    }

    pub(crate) fn region_of(&self, plan: &Plan, vpc: &str) -> Result<String, Error> {
        plan.vpc(vpc)
            .map(|v| v.region.clone())
            .ok_or_else(|| Error::Internal(format!("plan has no vpc {vpc}")))
    }
}

/// Ids of one VPC's resources.
#[derive(Debug, Clone, Default)]
struct VpcIds {
    vpc: String,
    igw: String,
    zone: String,
    /// subnet key → (subnet id, route table id)
    subnets: HashMap<String, (String, String)>,
    groups: HashMap<GroupKind, String>,
}

/// Ids of one host.
#[derive(Debug, Clone)]
struct HostIds {
    region: String,
    instance: String,
    eni: String,
    private_ip: Ipv4Addr,
    public_ip: Option<Ipv4Addr>,
}

#[derive(Debug, Default)]
struct Ids {
    inventory: HashMap<String, RegionInventory>,
    vpcs: HashMap<String, VpcIds>,
    peerings: HashMap<String, String>,
    /// region → (tgw id, default route table id, owner account)
    tgws: HashMap<String, (String, String, String)>,
    hosts: HashMap<String, HostIds>,
    accelerators: HashMap<String, Ipv4Addr>,
    placement_groups: HashMap<String, String>,
}

struct Build<'a> {
    d: &'a Deployer,
    s: &'a Scenario,
    plan: &'a Plan,
    tags: &'a RunTags,
    pre: &'a Preflight,
    local: Mutex<LocalState>,
    ids: Mutex<Ids>,
}

fn missing(operation: &'static str, region: &str, what: &'static str) -> Error {
    Error::Incomplete {
        operation,
        region: region.to_owned(),
        missing: what,
    }
}

/// Treats "already exists" answers as success (re-runs and retries).
fn tolerate_exists(r: Result<(), Error>) -> Result<(), Error> {
    match r {
        Err(e)
            if e.aws_code().is_some_and(|c| {
                c == "InvalidPermission.Duplicate"
                    || c == "RouteAlreadyExists"
                    || c == "Resource.AlreadyAssociated"
                    || c.ends_with(".Duplicate")
            }) =>
        {
            Ok(())
        }
        other => other,
    }
}

impl Build<'_> {
    fn ids(&self) -> std::sync::MutexGuard<'_, Ids> {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, region: &str, what: &str, id: &str) -> Result<(), Error> {
        info!("created {what} {id} in {region}");
        let mut l = self
            .local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        l.created.push(format!("{region}/{id}"));
        self.d.state.save(&self.tags.run, &l)
    }

    fn region(&self, vpc: &str) -> Result<RegionClients, Error> {
        Ok(self.d.aws.region(&self.d.region_of(self.plan, vpc)?))
    }

    fn vpc_ids(&self, vpc: &str) -> Result<VpcIds, Error> {
        self.ids()
            .vpcs
            .get(vpc)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("vpc {vpc} not built yet")))
    }

    fn existing(
        &self,
        region: &str,
        pick: impl Fn(&RegionInventory) -> &Vec<Found>,
        key: &str,
    ) -> Option<Found> {
        let ids = self.ids();
        ids.inventory
            .get(region)
            .and_then(|inv| RegionInventory::by_key(pick(inv), key).cloned())
    }

    async fn run(&self) -> Result<Outputs, Error> {
        for region in self.plan.regions() {
            let r = self.d.aws.region(&region);
            let inv = ec2::discover(&r, &Selector::Run(self.tags.run.clone())).await?;
            if !inv.is_empty() {
                info!(
                    "run {}: {} resource(s) already in {region}",
                    self.tags.run,
                    inv.len()
                );
            }
            self.ids().inventory.insert(region, inv);
        }
        self.placement_groups().await?;
        for v in &self.plan.vpcs {
            self.vpc(&v.name).await?;
        }
        for rule in self
            .plan
            .ingress
            .iter()
            .filter(|r| matches!(r.source, IngressSource::Cidr(_)))
        {
            self.ingress(rule).await?;
        }
        for p in &self.plan.peerings {
            self.peering(&p.key, &p.requester, &p.accepter).await?;
        }
        self.transit_gateways().await?;
        for h in self
            .plan
            .hosts
            .iter()
            .filter(|h| h.role == HostRole::Server)
        {
            self.host(h, userdata::server(self.s, &self.tags.run, &h.key))
                .await?;
        }
        self.vpn_gateways().await?;
        for r in self
            .plan
            .routes
            .iter()
            .filter(|r| r.target != RouteTarget::InternetGateway)
        {
            self.route(&r.vpc, &r.subnet, &r.destination.to_string(), &r.target)
                .await?;
        }
        for a in &self.plan.accelerators {
            let instance = self.host_ids(&a.server_host)?.instance;
            let acc = accelerator::ensure(
                self.d.accelerators.as_ref(),
                a,
                self.tags,
                &instance,
                &self.d.timing,
            )
            .await?;
            let ip = acc.ips.first().copied().ok_or_else(|| {
                missing(
                    "DescribeAccelerator",
                    crate::regions::ACCELERATOR_API_REGION,
                    "static IP",
                )
            })?;
            info!("accelerator {} ready at {ip}", a.key);
            {
                let mut l = self
                    .local
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if !l.accelerators.contains(&acc.arn) {
                    l.accelerators.push(acc.arn.clone());
                }
                self.d.state.save(&self.tags.run, &l)?;
            }
            self.ids().accelerators.insert(a.key.clone(), ip);
        }
        for h in self
            .plan
            .hosts
            .iter()
            .filter(|h| h.role == HostRole::Client)
        {
            let commands: Vec<String> = self
                .plan
                .paths
                .iter()
                .filter(|p| p.client == PathClient::Host(h.key.clone()))
                .map(|p| {
                    Ok(client_command(
                        self.target(&p.target)?,
                        self.s.port,
                        &p.label,
                    ))
                })
                .collect::<Result<_, Error>>()?;
            self.host(
                h,
                userdata::client(self.s, &self.tags.run, &h.key, &commands),
            )
            .await?;
        }
        for rule in self
            .plan
            .ingress
            .iter()
            .filter(|r| matches!(r.source, IngressSource::HostPublicIp(_)))
        {
            self.ingress(rule).await?;
        }
        self.outputs()
    }

    async fn placement_groups(&self) -> Result<(), Error> {
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

    async fn vpc(&self, name: &str) -> Result<(), Error> {
        let plan = self
            .plan
            .vpc(name)
            .ok_or_else(|| Error::Internal(format!("no vpc {name}")))?;
        let r = self.region(name)?;
        let region = r.region.as_str();
        let mut ids = VpcIds {
            zone: self
                .pre
                .zones
                .get(name)
                .cloned()
                .ok_or_else(|| Error::Internal(format!("no zone for {name}")))?,
            ..VpcIds::default()
        };

        let key = format!("vpc/{name}");
        ids.vpc = match self.existing(region, |i| &i.vpcs, &key) {
            Some(f) => f.id,
            None => {
                let out = r
                    .ec2
                    .create_vpc()
                    .cidr_block(plan.cidr.to_string())
                    .tag_specifications(tag_spec(ResourceType::Vpc, self.tags, &key))
                    .send()
                    .await
                    .map_err(|e| aws_error("CreateVpc", region, e))?;
                let id = out
                    .vpc()
                    .and_then(|v| v.vpc_id())
                    .ok_or_else(|| missing("CreateVpc", region, "vpc id"))?
                    .to_owned();
                self.record(region, "vpc", &id)?;
                id
            }
        };
        let vpc_id = ids.vpc.clone();
        self.d
            .timing
            .wait("the VPC to become available", region, || async {
                let out = r
                    .ec2
                    .describe_vpcs()
                    .vpc_ids(&vpc_id)
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

        let key = format!("igw/{name}");
        let (igw, attached) = match self.existing(region, |i| &i.internet_gateways, &key) {
            Some(f) => {
                let attached = f.related.contains(&ids.vpc);
                (f.id, attached)
            }
            None => {
                let out = r
                    .ec2
                    .create_internet_gateway()
                    .tag_specifications(tag_spec(ResourceType::InternetGateway, self.tags, &key))
                    .send()
                    .await
                    .map_err(|e| aws_error("CreateInternetGateway", region, e))?;
                let id = out
                    .internet_gateway()
                    .and_then(|g| g.internet_gateway_id())
                    .ok_or_else(|| missing("CreateInternetGateway", region, "gateway id"))?
                    .to_owned();
                self.record(region, "internet gateway", &id)?;
                (id, false)
            }
        };
        if !attached {
            r.ec2
                .attach_internet_gateway()
                .internet_gateway_id(&igw)
                .vpc_id(&ids.vpc)
                .send()
                .await
                .map_err(|e| aws_error("AttachInternetGateway", region, e))?;
        }
        ids.igw = igw;

        let groups: &[GroupKind] = if plan.has_gateways {
            &[GroupKind::Hosts, GroupKind::Gateways]
        } else {
            &[GroupKind::Hosts]
        };
        for g in groups {
            let suffix = match g {
                GroupKind::Hosts => "hosts",
                GroupKind::Gateways => "vpn-gateways",
            };
            let key = format!("sg/{name}/{suffix}");
            let id = match self.existing(region, |i| &i.security_groups, &key) {
                Some(f) => f.id,
                None => {
                    let out = r
                        .ec2
                        .create_security_group()
                        .group_name(format!("xbench-{}-{name}-{suffix}", self.tags.run))
                        .description(format!(
                            "xbench-deploy run {} ({}): {suffix}",
                            self.tags.run, self.tags.scenario
                        ))
                        .vpc_id(&ids.vpc)
                        .tag_specifications(tag_spec(ResourceType::SecurityGroup, self.tags, &key))
                        .send()
                        .await
                        .map_err(|e| aws_error("CreateSecurityGroup", region, e))?;
                    let id = out
                        .group_id()
                        .ok_or_else(|| missing("CreateSecurityGroup", region, "group id"))?
                        .to_owned();
                    self.record(region, "security group", &id)?;
                    id
                }
            };
            ids.groups.insert(*g, id);
        }

        for s in &plan.subnets {
            let key = format!("subnet/{name}/{}", s.key);
            let subnet = match self.existing(region, |i| &i.subnets, &key) {
                Some(f) => f.id,
                None => {
                    let out = r
                        .ec2
                        .create_subnet()
                        .vpc_id(&ids.vpc)
                        .cidr_block(s.cidr.to_string())
                        .availability_zone(&ids.zone)
                        .tag_specifications(tag_spec(ResourceType::Subnet, self.tags, &key))
                        .send()
                        .await
                        .map_err(|e| aws_error("CreateSubnet", region, e))?;
                    let id = out
                        .subnet()
                        .and_then(|s| s.subnet_id())
                        .ok_or_else(|| missing("CreateSubnet", region, "subnet id"))?
                        .to_owned();
                    self.record(region, "subnet", &id)?;
                    id
                }
            };
            let key = format!("rtb/{name}/{}", s.key);
            let (table, associated) = match self.existing(region, |i| &i.route_tables, &key) {
                Some(f) => {
                    let a = f.subnet_ids.contains(&subnet);
                    (f.id, a)
                }
                None => {
                    let out = r
                        .ec2
                        .create_route_table()
                        .vpc_id(&ids.vpc)
                        .tag_specifications(tag_spec(ResourceType::RouteTable, self.tags, &key))
                        .send()
                        .await
                        .map_err(|e| aws_error("CreateRouteTable", region, e))?;
                    let id = out
                        .route_table()
                        .and_then(|t| t.route_table_id())
                        .ok_or_else(|| missing("CreateRouteTable", region, "route table id"))?
                        .to_owned();
                    self.record(region, "route table", &id)?;
                    (id, false)
                }
            };
            if !associated {
                r.ec2
                    .associate_route_table()
                    .route_table_id(&table)
                    .subnet_id(&subnet)
                    .send()
                    .await
                    .map_err(|e| aws_error("AssociateRouteTable", region, e))?;
            }
            ids.subnets.insert(s.key.clone(), (subnet, table));
        }
        self.ids().vpcs.insert(name.to_owned(), ids);
        for s in &plan.subnets {
            self.route(name, &s.key, "0.0.0.0/0", &RouteTarget::InternetGateway)
                .await?;
        }
        Ok(())
    }

    async fn ingress(&self, rule: &IngressPlan) -> Result<(), Error> {
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
        let (from, to) = match rule.port {
            Some(p) => (i32::from(p), i32::from(p)),
            None => (-1, -1),
        };
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

    async fn route(
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
        let target_id = match target {
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
                .get(&r.region)
                .map(|t| t.0.clone())
                .ok_or_else(|| Error::Internal(format!("no transit gateway in {}", r.region)))?,
            RouteTarget::GatewayHost(h) => self.host_ids(h)?.eni,
        };
        macro_rules! with_target {
            ($req:expr) => {
                match target {
                    RouteTarget::InternetGateway => $req.gateway_id(&target_id),
                    RouteTarget::Peering(_) => $req.vpc_peering_connection_id(&target_id),
                    RouteTarget::TransitGateway => $req.transit_gateway_id(&target_id),
                    RouteTarget::GatewayHost(_) => $req.network_interface_id(&target_id),
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

    async fn peering(&self, key: &str, requester: &str, accepter: &str) -> Result<(), Error> {
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
                let out = rr
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
                    .await
                    .map_err(|e| aws_error("CreateVpcPeeringConnection", &rr.region, e))?;
                let id = out
                    .vpc_peering_connection()
                    .and_then(|p| p.vpc_peering_connection_id())
                    .ok_or_else(|| missing("CreateVpcPeeringConnection", &rr.region, "peering id"))?
                    .to_owned();
                self.record(&rr.region, "vpc peering", &id)?;
                (id, "initiating-request".to_owned())
            }
        };
        if state != "active" {
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
                    Err(e) => {
                        let e = aws_error("DescribeVpcPeeringConnections", &client.region, e);
                        if e.is_not_found() { Ok(None) } else { Err(e) }
                    }
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
                self.tag(&ra, "CreateTags", &id, &tag_key).await?;
            }
        }
        self.ids().peerings.insert(key.to_owned(), id);
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

    async fn transit_gateways(&self) -> Result<(), Error> {
        for t in &self.plan.tgws {
            let r = self.d.aws.region(&t.region);
            let region = r.region.as_str();
            let key = format!("tgw/{region}");
            let id = match self.existing(region, |i| &i.transit_gateways, &key) {
                Some(f) => f.id,
                None => {
                    let out = r
                        .ec2
                        .create_transit_gateway()
                        .description(format!("xbench-deploy run {}", self.tags.run))
                        .tag_specifications(tag_spec(ResourceType::TransitGateway, self.tags, &key))
                        .send()
                        .await
                        .map_err(|e| aws_error("CreateTransitGateway", region, e))?;
                    let id = out
                        .transit_gateway()
                        .and_then(|t| t.transit_gateway_id())
                        .ok_or_else(|| missing("CreateTransitGateway", region, "id"))?
                        .to_owned();
                    self.record(region, "transit gateway", &id)?;
                    id
                }
            };
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

            for vpc in &t.attachments {
                let v = self.vpc_ids(vpc)?;
                let (base_subnet, _) = v
                    .subnets
                    .get("base")
                    .cloned()
                    .ok_or_else(|| Error::Internal(format!("no base subnet in {vpc}")))?;
                // Looked up by Transit Gateway and VPC, not by tag: moto drops attachment tags.
                let existing = {
                    let ids = self.ids();
                    ids.inventory.get(region).and_then(|i| {
                        i.tgw_vpc_attachments
                            .iter()
                            .find(|a| {
                                a.vpc_id.as_deref() == Some(v.vpc.as_str())
                                    && a.related.contains(&id)
                            })
                            .map(|a| a.id.clone())
                    })
                };
                let attachment = match existing {
                    Some(a) => a,
                    None => {
                        let key = format!("tgw-attach/{vpc}");
                        let out = r
                            .ec2
                            .create_transit_gateway_vpc_attachment()
                            .transit_gateway_id(&id)
                            .vpc_id(&v.vpc)
                            .subnet_ids(&base_subnet)
                            .tag_specifications(tag_spec(
                                ResourceType::TransitGatewayAttachment,
                                self.tags,
                                &key,
                            ))
                            .send()
                            .await
                            .map_err(|e| {
                                aws_error("CreateTransitGatewayVpcAttachment", region, e)
                            })?;
                        let a = out
                            .transit_gateway_vpc_attachment()
                            .and_then(|a| a.transit_gateway_attachment_id())
                            .ok_or_else(|| {
                                missing(
                                    "CreateTransitGatewayVpcAttachment",
                                    region,
                                    "attachment id",
                                )
                            })?
                            .to_owned();
                        self.record(region, "tgw vpc attachment", &a)?;
                        a
                    }
                };
                self.wait_attachment(&r, &attachment, &["available"])
                    .await?;
            }
        }

        for p in &self.plan.tgw_peerings {
            let rr = self.d.aws.region(&p.requester_region);
            let ra = self.d.aws.region(&p.accepter_region);
            let (req_tgw, req_table, _) = self.tgw(&rr.region)?;
            let (acc_tgw, acc_table, acc_owner) = self.tgw(&ra.region)?;
            let key = format!("tgwpeer/{}", p.key);
            let existing = {
                let ids = self.ids();
                ids.inventory
                    .values()
                    .flat_map(|i| i.tgw_peering_attachments.iter())
                    .find(|a| {
                        a.key() == Some(key.as_str())
                            || (a.related.contains(&req_tgw) && a.related.contains(&acc_tgw))
                    })
                    .map(|a| (a.id.clone(), a.state.clone().unwrap_or_default()))
            };
            let (id, state) = match existing {
                Some(x) => x,
                None => {
                    let out = rr
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
                        .await
                        .map_err(|e| {
                            aws_error("CreateTransitGatewayPeeringAttachment", &rr.region, e)
                        })?;
                    let id = out
                        .transit_gateway_peering_attachment()
                        .and_then(|a| a.transit_gateway_attachment_id())
                        .ok_or_else(|| {
                            missing(
                                "CreateTransitGatewayPeeringAttachment",
                                &rr.region,
                                "attachment id",
                            )
                        })?
                        .to_owned();
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
            for (r, table, cidrs) in [
                (&rr, &req_table, &p.requester_routes),
                (&ra, &acc_table, &p.accepter_routes),
            ] {
                tolerate_exists(
                    r.ec2
                        .associate_transit_gateway_route_table()
                        .transit_gateway_route_table_id(table)
                        .transit_gateway_attachment_id(&id)
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
                            .transit_gateway_attachment_id(&id)
                            .send()
                            .await
                            .map(|_| ())
                            .map_err(|e| aws_error("CreateTransitGatewayRoute", &r.region, e)),
                    )?;
                    info!("tgw route {cidr} -> {id} in {}", r.region);
                }
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
                    let out = r
                        .ec2
                        .describe_transit_gateway_attachments()
                        .transit_gateway_attachment_ids(id)
                        .send()
                        .await;
                    let state = match out {
                        Ok(o) => o
                            .transit_gateway_attachments()
                            .iter()
                            .find(|a| a.transit_gateway_attachment_id() == Some(id))
                            .and_then(|a| a.state())
                            .map(|s| s.as_str().to_owned()),
                        Err(e) => {
                            let e = aws_error("DescribeTransitGatewayAttachments", &r.region, e);
                            if e.is_not_found() {
                                None
                            } else {
                                return Err(e);
                            }
                        }
                    };
                    match state.as_deref() {
                        Some(s @ ("failed" | "rejected" | "deleted")) => Err(Error::Aws {
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

    fn host_ids(&self, key: &str) -> Result<HostIds, Error> {
        self.ids()
            .hosts
            .get(key)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("host {key} not launched yet")))
    }

    async fn vpn_gateways(&self) -> Result<(), Error> {
        let gateways: Vec<&HostPlan> = self
            .plan
            .hosts
            .iter()
            .filter(|h| h.role == HostRole::Gateway && h.vpn.as_ref().is_some_and(|v| !v.initiator))
            .collect();
        for server_side in gateways {
            let Some(vpn) = &server_side.vpn else {
                continue;
            };
            let client_side = self
                .plan
                .host(&vpn.peer_host)
                .ok_or_else(|| Error::Internal(format!("no host {}", vpn.peer_host)))?;
            let Some(client_vpn) = &client_side.vpn else {
                continue;
            };
            let rs = self.region(&server_side.vpc)?;
            let rc = self.region(&client_side.vpc)?;
            let have_server = self.existing(
                &rs.region,
                |i| &i.instances,
                &format!("host/{}", server_side.key),
            );
            let have_client = self.existing(
                &rc.region,
                |i| &i.instances,
                &format!("host/{}", client_side.key),
            );
            match (have_server, have_client) {
                (Some(_), Some(_)) => {
                    // Both exist from an earlier attempt: their keys match already.
                    self.adopt(server_side).await?;
                    self.adopt(client_side).await?;
                }
                (one, other) => {
                    // Keys live only in the two boot scripts, so a lone survivor of an earlier
                    // attempt cannot be paired with a new peer: replace it.
                    for (found, r) in [(one, &rs), (other, &rc)] {
                        if let Some(f) = found {
                            info!("replacing lone vpn gateway {} in {}", f.id, r.region);
                            crate::teardown::terminate_and_wait(
                                r,
                                std::slice::from_ref(&f.id),
                                &self.d.timing,
                            )
                            .await?;
                            let mut ids = self.ids();
                            if let Some(inv) = ids.inventory.get_mut(&r.region) {
                                inv.instances.retain(|i| i.id != f.id);
                            }
                        }
                    }
                    let server_keys = WgKeys::generate()?;
                    let client_keys = WgKeys::generate()?;
                    let script = userdata::gateway(
                        &self.tags.run,
                        &server_side.key,
                        vpn,
                        &server_keys,
                        &client_keys.public,
                        None,
                    );
                    self.host(server_side, script).await?;
                    let endpoint = self.host_ids(&server_side.key)?.public_ip.ok_or_else(|| {
                        Error::Internal(format!(
                            "vpn gateway {} got no public address",
                            server_side.key
                        ))
                    })?;
                    let script = userdata::gateway(
                        &self.tags.run,
                        &client_side.key,
                        client_vpn,
                        &client_keys,
                        &server_keys.public,
                        Some(endpoint),
                    );
                    self.host(client_side, script).await?;
                }
            }
            for h in [server_side, client_side] {
                let ids = self.host_ids(&h.key)?;
                let r = self.d.aws.region(&ids.region);
                // Gateways forward packets that are neither from nor to themselves.
                r.ec2
                    .modify_instance_attribute()
                    .instance_id(&ids.instance)
                    .source_dest_check(AttributeBooleanValue::builder().value(false).build())
                    .send()
                    .await
                    .map_err(|e| aws_error("ModifyInstanceAttribute", &r.region, e))?;
            }
        }
        Ok(())
    }

    /// Records an existing host's ids (it must be running).
    async fn adopt(&self, h: &HostPlan) -> Result<(), Error> {
        let r = self.region(&h.vpc)?;
        let found = self
            .existing(&r.region, |i| &i.instances, &format!("host/{}", h.key))
            .ok_or_else(|| Error::Internal(format!("host {} vanished", h.key)))?;
        let ids = self.wait_running(&r, &found.id).await?;
        self.ids().hosts.insert(h.key.clone(), ids);
        Ok(())
    }

    async fn host(&self, h: &HostPlan, script: String) -> Result<(), Error> {
        let r = self.region(&h.vpc)?;
        let region = r.region.as_str();
        let key = format!("host/{}", h.key);
        if self.existing(region, |i| &i.instances, &key).is_some() {
            return self.adopt(h).await;
        }
        let v = self.vpc_ids(&h.vpc)?;
        let (subnet, _) = v
            .subnets
            .get(&h.subnet)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no subnet {}", h.subnet)))?;
        let group_kind = if h.role == HostRole::Gateway {
            GroupKind::Gateways
        } else {
            GroupKind::Hosts
        };
        let group = v
            .groups
            .get(&group_kind)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no security group for {}", h.key)))?;
        let ami = self
            .pre
            .amis
            .get(&(region.to_owned(), h.instance_type.clone()))
            .cloned()
            .ok_or_else(|| {
                Error::Internal(format!("no AMI for {} in {region}", h.instance_type))
            })?;
        let pg = self
            .plan
            .vpc(&h.vpc)
            .and_then(|p| p.placement_group.as_ref())
            .and_then(|k| self.ids().placement_groups.get(k).cloned());
        let mut req = r
            .ec2
            .run_instances()
            .image_id(ami)
            .instance_type(InstanceType::from(h.instance_type.as_str()))
            .min_count(1)
            .max_count(1)
            .network_interfaces(
                InstanceNetworkInterfaceSpecification::builder()
                    .device_index(0)
                    .subnet_id(&subnet)
                    .groups(&group)
                    .associate_public_ip_address(true)
                    .delete_on_termination(true)
                    .build(),
            )
            .placement(
                Placement::builder()
                    .availability_zone(&v.zone)
                    .set_group_name(pg)
                    .build(),
            )
            // IMDSv2 only: the hosts hold no credentials, but there is no reason to allow v1.
            .metadata_options(
                InstanceMetadataOptionsRequest::builder()
                    .http_tokens(HttpTokensState::Required)
                    .build(),
            )
            .user_data(userdata::encode(&script))
            .tag_specifications(tag_spec(ResourceType::Instance, self.tags, &key))
            .tag_specifications(tag_spec(ResourceType::Volume, self.tags, &key))
            .tag_specifications(tag_spec(ResourceType::NetworkInterface, self.tags, &key));
        if let Some(k) = &self.s.key_name {
            req = req.key_name(k);
        }
        let out = req
            .send()
            .await
            .map_err(|e| aws_error("RunInstances", region, e))?;
        let id = out
            .instances()
            .first()
            .and_then(|i| i.instance_id())
            .ok_or_else(|| missing("RunInstances", region, "instance id"))?
            .to_owned();
        self.record(region, &format!("instance {} ({})", h.key, h.role), &id)?;
        let ids = self.wait_running(&r, &id).await?;
        self.ids().hosts.insert(h.key.clone(), ids);
        Ok(())
    }

    async fn wait_running(&self, r: &RegionClients, id: &str) -> Result<HostIds, Error> {
        self.d
            .timing
            .wait(&format!("instance {id} to run"), &r.region, || async {
                let out = r.ec2.describe_instances().instance_ids(id).send().await;
                let out = match out {
                    Ok(o) => o,
                    // A just-launched instance can be briefly unknown to Describe calls.
                    Err(e) => {
                        let e = aws_error("DescribeInstances", &r.region, e);
                        return if e.is_not_found() { Ok(None) } else { Err(e) };
                    }
                };
                let Some(i) = out.reservations().iter().flat_map(|r| r.instances()).next() else {
                    return Ok(None);
                };
                match i.state().and_then(|s| s.name()).map(|n| n.as_str()) {
                    Some("running") => {}
                    Some(s @ ("terminated" | "shutting-down" | "stopped" | "stopping")) => {
                        return Err(Error::Aws {
                            operation: "RunInstances",
                            region: r.region.clone(),
                            code: i.state_reason().and_then(|s| s.code()).map(str::to_owned),
                            message: format!(
                                "instance {id} is {s}: {}",
                                i.state_reason()
                                    .and_then(|s| s.message())
                                    .unwrap_or("no reason given")
                            ),
                        });
                    }
                    _ => return Ok(None),
                }
                let eni = i
                    .network_interfaces()
                    .iter()
                    .find(|n| n.attachment().and_then(|a| a.device_index()) == Some(0))
                    .or_else(|| i.network_interfaces().first())
                    .and_then(|n| n.network_interface_id());
                let private_ip = i.private_ip_address().and_then(|a| a.parse().ok());
                let public_ip = i.public_ip_address().and_then(|a| a.parse().ok());
                Ok(match (eni, private_ip) {
                    (Some(eni), Some(private_ip)) if public_ip.is_some() => Some(HostIds {
                        region: r.region.clone(),
                        instance: id.to_owned(),
                        eni: eni.to_owned(),
                        private_ip,
                        public_ip,
                    }),
                    _ => None,
                })
            })
            .await
    }

    fn target(&self, t: &PathTarget) -> Result<Ipv4Addr, Error> {
        match t {
            PathTarget::PrivateIp(h) => Ok(self.host_ids(h)?.private_ip),
            PathTarget::PublicIp(h) => self
                .host_ids(h)?
                .public_ip
                .ok_or_else(|| Error::Internal(format!("host {h} has no public address"))),
            PathTarget::Accelerator(k) => self
                .ids()
                .accelerators
                .get(k)
                .copied()
                .ok_or_else(|| Error::Internal(format!("accelerator {k} not made yet"))),
            PathTarget::Address(a) => Ok(*a),
        }
    }

    fn outputs(&self) -> Result<Outputs, Error> {
        let mut hosts = Vec::new();
        for h in &self.plan.hosts {
            let ids = self.host_ids(&h.key)?;
            hosts.push(HostOutput {
                key: h.key.clone(),
                role: match h.role {
                    HostRole::Server => "server",
                    HostRole::Client => "client",
                    HostRole::Gateway => "gateway",
                }
                .to_owned(),
                region: ids.region,
                instance_id: ids.instance,
                instance_type: h.instance_type.clone(),
                private_ip: Some(ids.private_ip),
                public_ip: ids.public_ip,
            });
        }
        let mut paths = Vec::new();
        for p in &self.plan.paths {
            let target = self.target(&p.target)?;
            let (client_host, run_on) = match &p.client {
                PathClient::Host(h) => (Some(h.clone()), self.host_ids(h)?.public_ip),
                PathClient::Address(a) => (None, Some(*a)),
            };
            paths.push(PathOutput {
                label: p.label.clone(),
                kind: p.kind,
                client_host,
                run_on,
                target,
                port: self.s.port,
                command: client_command(target, self.s.port, &p.label),
            });
        }
        Ok(Outputs {
            format: OUTPUTS_FORMAT.to_owned(),
            run_id: self.tags.run.clone(),
            scenario: self.s.name.clone(),
            deletion_due: self.tags.deletion_due.clone(),
            port: self.s.port,
            hosts,
            paths,
        })
    }
}
