//! `up`: checks what only AWS can answer (ENA, AMIs, zones, the binary's architecture), then
//! creates a [`Plan`] in dependency order, waits until every server answers, and on failure or
//! interruption deletes what it made (unless told to keep it).
//!
//! Idempotent: every resource is tagged with its plan key at creation, and a run given an
//! existing run id first looks up what exists and creates only the rest (one
//! create-if-missing function, `Build::ensure`). The order is: the run's instance profile,
//! bucket (with the xbench binary) and key (`artifacts.rs`); placement groups; per VPC the
//! VPC, internet gateway, security groups, subnets and route tables; VPC peerings (accepted in
//! the peer region); Transit Gateways, their VPC attachments, peerings and static routes
//! (`network.rs`); your gateways joined for hybrid paths (`hybrid.rs`);
//! server hosts and VPN gateways (with your VPN ends' gateways, `home.rs`); routes through peerings, Transit Gateways
//! and gateways; accelerators; client hosts (`hosts.rs`); the security-group rules that name
//! hosts' public addresses; and last the readiness checks (`ready.rs`). Not for deleting: see
//! [`crate::teardown`].

mod artifacts;
mod home;
mod hosts;
mod hybrid;
mod network;
mod ready;

use std::collections::HashMap;
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use tracing::info;

use crate::aws::ec2::{self, Found, RegionInventory, Selector};
use crate::aws::{RegionClients, accelerator, aws_error, ssm};
use crate::binary::{Arch, XbenchBinary};
use crate::deployer::Deployer;
use crate::error::Error;
use crate::plan::{GroupKind, HostRole, IngressSource, PathClient, PathTarget, Plan, RouteTarget};
use crate::scenario::{AmiChoice, Scenario, XbenchInstall};
use crate::state::{
    HostOutput, LocalState, OUTPUTS_FORMAT, Outputs, PathOutput, RunId, RunTags, client_command,
};
use crate::userdata::Fetch;

/// How to run `up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Continue this run instead of starting a new one.
    pub run_id: Option<RunId>,
    /// On failure or interruption, leave what was created (for inspection or a later resume).
    pub keep_on_failure: bool,
    /// The time the run starts (deletion-due is this plus the scenario's TTL).
    pub now: SystemTime,
    /// The binary to upload, for a scenario without `[xbench] url` or `cargo_git`.
    pub xbench: Option<XbenchBinary>,
    /// An existing instance profile for the hosts (accounts that forbid creating roles);
    /// `None`: `up` makes one for the run.
    pub instance_profile: Option<String>,
}

impl Default for UpOptions {
    fn default() -> Self {
        UpOptions {
            run_id: None,
            keep_on_failure: false,
            now: SystemTime::now(),
            xbench: None,
            instance_profile: None,
        }
    }
}

/// What only AWS can tell, looked up before anything is created.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    /// (region, instance type) → advertised network performance.
    pub network_performance: HashMap<(String, String), Option<String>>,
    /// (region, instance type) → how it does enhanced networking (`ENA`, `Intel 82599 VF`).
    pub enhanced_networking: HashMap<(String, String), &'static str>,
    /// Instance type → baseline and burst bandwidth AWS reports.
    pub bandwidth: std::collections::BTreeMap<String, crate::transfer::Bandwidth>,
    /// (region, instance type) → AMI id.
    pub amis: HashMap<(String, String), String>,
    /// (region, instance type) → the AMI id of IPsec gateways (the scenario's `gateway_ami`).
    pub gateway_amis: HashMap<(String, String), String>,
    /// (region, instance type) → the architecture hosts of that type run.
    pub architectures: HashMap<(String, String), Arch>,
    /// VPC name → availability zone.
    pub zones: HashMap<String, String>,
    /// Per region, the plan's vCPUs against the account's quota.
    pub quotas: Vec<crate::aws::quotas::QuotaCheck>,
}

impl Deployer {
    /// Checks instance types (ENA), resolves AMIs and picks zones, creating nothing. With a
    /// binary, also refuses one that cannot run on the xbench hosts.
    pub async fn preflight(
        &self,
        scenario: &Scenario,
        plan: &Plan,
        xbench: Option<&XbenchBinary>,
    ) -> Result<Preflight, Error> {
        let mut pre = Preflight::default();
        let mut archs: HashMap<(String, String), Vec<String>> = HashMap::new();
        let mut vcpus: HashMap<(String, String), Option<u32>> = HashMap::new();
        for h in &plan.hosts {
            let region = self.region_of(plan, &h.vpc)?;
            let k = (region.clone(), h.instance_type.clone());
            if archs.contains_key(&k) {
                continue;
            }
            let r = self.aws.region(&region);
            let facts = ec2::check_instance_type(&r, &h.instance_type).await?;
            info!(
                "{} in {region}: ENA {}, network {}, {}",
                h.instance_type,
                facts.ena,
                facts.network_performance.as_deref().unwrap_or("unknown"),
                facts.architectures.join("/")
            );
            pre.network_performance
                .insert(k.clone(), facts.network_performance.clone());
            pre.enhanced_networking
                .insert(k.clone(), facts.enhanced_networking);
            if let Some((baseline, burst)) = facts.bandwidth_gbps {
                pre.bandwidth.insert(
                    h.instance_type.clone(),
                    crate::transfer::Bandwidth {
                        baseline,
                        burst,
                        source: "aws",
                    },
                );
            }
            vcpus.insert(k.clone(), facts.vcpus);
            archs.insert(k, facts.architectures);
        }
        for ((region, ty), list) in &archs {
            let arch = ssm::preferred_arch(list);
            pre.architectures.insert((region.clone(), ty.clone()), arch);
            let r = self.aws.region(region);
            let ami = ssm::resolve_ami(&r, &scenario.ami, list).await?;
            pre.amis.insert((region.clone(), ty.clone()), ami);
        }
        // IPsec gateways boot an image whose own repositories carry strongSwan.
        for h in plan.hosts.iter().filter(|h| h.is_ipsec_gateway()) {
            let region = self.region_of(plan, &h.vpc)?;
            let k = (region.clone(), h.instance_type.clone());
            if pre.gateway_amis.contains_key(&k) {
                continue;
            }
            let list = archs.get(&k).cloned().unwrap_or_default();
            let r = self.aws.region(&region);
            let ami = ssm::resolve_ami(&r, &scenario.gateway_ami, &list).await?;
            info!("IPsec gateways ({}) in {region}: {ami}", h.instance_type);
            pre.gateway_amis.insert(k, ami);
        }
        if let Some(bin) = xbench {
            self.check_binary(scenario, plan, &pre, bin)?;
        }
        pre.quotas = self.check_quotas(plan, &vcpus).await?;
        pre.zones = self.pick_zones(scenario, plan).await?;
        Ok(pre)
    }

    /// Each VPC's zone: the scenario's, else one AWS offers its hosts' instance type in.
    async fn pick_zones(
        &self,
        scenario: &Scenario,
        plan: &Plan,
    ) -> Result<HashMap<String, String>, Error> {
        let mut zones = HashMap::new();
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
            zones.insert(v.name.clone(), zone);
        }
        Ok(zones)
    }

    /// Per region, the plan's standard-family vCPUs against the account's quota; refuses a
    /// plan that alone needs more (a large fleet). An unreadable quota is only noted.
    async fn check_quotas(
        &self,
        plan: &Plan,
        vcpus: &HashMap<(String, String), Option<u32>>,
    ) -> Result<Vec<crate::aws::quotas::QuotaCheck>, Error> {
        use crate::aws::quotas;
        let mut out = Vec::new();
        for region in plan.regions() {
            let mut needed = 0u32;
            let mut others: Vec<String> = Vec::new();
            for h in &plan.hosts {
                if self.region_of(plan, &h.vpc)? != region {
                    continue;
                }
                if !quotas::is_standard(&h.instance_type) {
                    if !others.contains(&h.instance_type) {
                        others.push(h.instance_type.clone());
                    }
                    continue;
                }
                let n = vcpus
                    .get(&(region.clone(), h.instance_type.clone()))
                    .copied()
                    .flatten()
                    .unwrap_or(0);
                needed = needed.saturating_add(n);
            }
            let quota = quotas::vcpu_quota(&self.aws.region(&region)).await;
            let check = quotas::QuotaCheck {
                region: region.clone(),
                needed,
                quota,
                other_families: others,
            };
            info!("{}", check.line());
            if check.exceeded() {
                return Err(Error::VcpuQuota {
                    region,
                    needed,
                    quota: check.quota.clone().unwrap_or_default(),
                });
            }
            out.push(check);
        }
        Ok(out)
    }

    /// The binary against the architecture AWS reports for each xbench host's type.
    fn check_binary(
        &self,
        scenario: &Scenario,
        plan: &Plan,
        pre: &Preflight,
        bin: &XbenchBinary,
    ) -> Result<(), Error> {
        let al2023 = scenario.ami == AmiChoice::AmazonLinux2023;
        for h in plan.hosts.iter().filter(|h| h.role != HostRole::Gateway) {
            let region = self.region_of(plan, &h.vpc)?;
            if let Some(arch) = pre.architectures.get(&(region, h.instance_type.clone())) {
                bin.check_for(*arch, &h.instance_type, &h.key, al2023)?;
            }
        }
        Ok(())
    }

    /// Builds `plan` and waits until every server answers. Stops early (and cleans up unless
    /// `keep_on_failure`) when `interrupt` completes. The outputs are also written to the
    /// state directory.
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
        if scenario.xbench == XbenchInstall::Upload && opts.xbench.is_none() {
            return Err(Error::Internal(
                "the scenario uploads the xbench binary, but none was given".into(),
            ));
        }
        let regions = plan.regions();
        let mut tags = RunTags::new(
            run.clone(),
            &scenario.name,
            opts.now,
            Duration::from_secs(u64::from(scenario.ttl_hours) * 3600),
            &regions,
        );
        tags.uses_placement = !plan.placement_groups.is_empty();
        tags.uses_tgw = plan.uses_transit_gateways();
        tags.uses_accelerators = plan.needs_accelerator_api();
        // Refusals here (no ENA, no AMI, no such type, a binary for the wrong CPU) happen
        // before anything exists.
        let pre = self.preflight(scenario, plan, opts.xbench.as_ref()).await?;
        self.check_private_gateways(plan, Some(&run)).await?;
        let local = self.start_local_state(&run, scenario, &regions, &tags)?;
        info!("run {run}: creating in {}", regions.join(", "));

        let build = Build {
            d: self,
            s: scenario,
            plan,
            tags: &tags,
            pre: &pre,
            xbench: opts.xbench.as_ref(),
            instance_profile: opts.instance_profile.clone(),
            local: Mutex::new(local),
            ids: Mutex::new(Ids::default()),
        };
        let outcome = tokio::select! {
            r = build.run() => r,
            () = interrupt => Err(Error::Interrupted),
        };
        let local = build
            .local
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.finish_up(&run, &regions, local, outcome, opts.keep_on_failure)
            .await
    }

    fn start_local_state(
        &self,
        run: &RunId,
        scenario: &Scenario,
        regions: &[String],
        tags: &RunTags,
    ) -> Result<LocalState, Error> {
        let mut local = self.state.load(run)?.unwrap_or_default();
        local.run_id = Some(run.clone());
        local.scenario = scenario.name.clone();
        for r in regions {
            if !local.regions.contains(r) {
                local.regions.push(r.clone());
            }
        }
        local.deletion_due = tags.deletion_due.clone();
        local.status = "creating".into();
        local.uses_placement |= tags.uses_placement;
        local.uses_tgw |= tags.uses_tgw;
        local.uses_accelerators |= tags.uses_accelerators;
        self.state.save(run, &local)?;
        Ok(local)
    }

    /// Records how `up` ended; on failure, deletes the run unless it is to be kept.
    async fn finish_up(
        &self,
        run: &RunId,
        regions: &[String],
        mut local: LocalState,
        outcome: Result<Outputs, Error>,
        keep: bool,
    ) -> Result<Outputs, Error> {
        match outcome {
            Ok(outputs) => {
                local.status = "up".into();
                self.state.save(run, &local)?;
                self.state.save_outputs(&outputs)?;
                Ok(outputs)
            }
            Err(source) => {
                local.status = "failed".into();
                self.state.save(run, &local)?;
                if keep {
                    return Err(Error::UpFailed {
                        run_id: run.to_string(),
                        cause: Box::new(source),
                        teardown: None,
                        kept: true,
                    });
                }
                info!("run {run}: {source}; deleting what was created");
                let teardown = self.down(run, regions).await.err().map(Box::new);
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
    /// The hosts' instance profile.
    profile: Option<String>,
    /// How xbench hosts get the binary.
    fetch: Option<Fetch>,
    /// The run's bucket, when the binary was uploaded.
    bucket: Option<crate::aws::s3::RunBucket>,
    /// What your side needs for hybrid paths, for the outputs.
    notes: Vec<String>,
}

struct Build<'a> {
    d: &'a Deployer,
    s: &'a Scenario,
    plan: &'a Plan,
    tags: &'a RunTags,
    pre: &'a Preflight,
    xbench: Option<&'a XbenchBinary>,
    /// Your instance profile (`--instance-profile`), used instead of making one.
    instance_profile: Option<String>,
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

/// The id a Create call answered with, which `id` picks out of the answer: the call's own
/// error, or [`Error::Incomplete`] naming `what` when the answer lacks it. One place for both,
/// so each call names its operation once.
fn created<O, E>(
    operation: &'static str,
    region: &str,
    what: &'static str,
    sent: Result<O, SdkError<E, HttpResponse>>,
    id: impl FnOnce(&O) -> Option<&str>,
) -> Result<String, Error>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let out = sent.map_err(|e| aws_error(operation, region, e))?;
    id(&out)
        .map(str::to_owned)
        .ok_or_else(|| missing(operation, region, what))
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

/// Which list of a [`RegionInventory`] a resource kind lives in.
type Pick = fn(&RegionInventory) -> &Vec<Found>;

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

    fn existing(&self, region: &str, pick: Pick, key: &str) -> Option<Found> {
        let ids = self.ids();
        ids.inventory
            .get(region)
            .and_then(|inv| RegionInventory::by_key(pick(inv), key).cloned())
    }

    /// Create-if-missing, the one way `up` makes a tagged resource: the resource with plan
    /// key `key` the run already has in `region` (found by discovery), else a new one from
    /// `create` (which returns its id), recorded in the local state. Returns the id and what
    /// discovery knew about an existing one.
    async fn ensure<F, Fut>(
        &self,
        region: &str,
        pick: Pick,
        key: &str,
        what: &str,
        create: F,
    ) -> Result<(String, Option<Found>), Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, Error>>,
    {
        if let Some(f) = self.existing(region, pick, key) {
            return Ok((f.id.clone(), Some(f)));
        }
        let id = create().await?;
        self.record(region, what, &id)?;
        Ok((id, None))
    }

    async fn run(&self) -> Result<Outputs, Error> {
        self.discover().await?;
        self.artifacts().await?;
        self.placement_groups().await?;
        for v in &self.plan.vpcs {
            self.vpc(&v.name).await?;
        }
        self.ingress_rules(false).await?;
        for p in &self.plan.peerings {
            self.peering(&p.key, &p.requester, &p.accepter).await?;
        }
        self.transit_gateways().await?;
        self.private_gateways().await?;
        self.servers().await?;
        self.vpn_gateways().await?;
        self.home_gateways().await?;
        for r in self
            .plan
            .routes
            .iter()
            .filter(|r| r.target != RouteTarget::InternetGateway)
        {
            self.route(&r.vpc, &r.subnet, &r.destination.to_string(), &r.target)
                .await?;
        }
        self.accelerators().await?;
        self.clients().await?;
        self.ingress_rules(true).await?;
        let outputs = self.outputs()?;
        // Saved before the wait, so a person can look at the hosts while it runs.
        self.d.state.save_outputs(&outputs)?;
        if self.d.skip_ready {
            info!("not waiting for the hosts to answer (readiness checks skipped)");
        } else {
            ready::wait(self.d, self.s, self.plan, &outputs).await?;
        }
        Ok(outputs)
    }

    /// What the run already has in each region (a resumed run), by tags.
    async fn discover(&self) -> Result<(), Error> {
        for region in self.plan.regions() {
            let r = self.d.aws.region(&region);
            let inv = ec2::discover(&r, &Selector::Run(self.tags.run.clone())).await?;
            if let Some((kind, why)) = inv.unlisted.first()
                && self.plan.uses_transit_gateways()
            {
                return Err(Error::Aws {
                    operation: "DescribeTransitGateways",
                    region: region.clone(),
                    code: None,
                    message: format!("{kind} cannot be listed: {why}"),
                });
            }
            if !inv.is_empty() {
                info!(
                    "run {}: {} resource(s) already in {region}",
                    self.tags.run,
                    inv.len()
                );
            }
            self.ids().inventory.insert(region, inv);
        }
        Ok(())
    }

    /// Security-group rules from fixed blocks, or (once hosts exist) from hosts' addresses.
    async fn ingress_rules(&self, host_addresses: bool) -> Result<(), Error> {
        for rule in self
            .plan
            .ingress
            .iter()
            .filter(|r| matches!(r.source, IngressSource::HostPublicIp(_)) == host_addresses)
        {
            self.ingress(rule).await?;
        }
        Ok(())
    }

    async fn accelerators(&self) -> Result<(), Error> {
        for a in &self.plan.accelerators {
            let instance = self.host_ids(&a.endpoint_host)?.instance;
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
        Ok(())
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
            let authenticated = p.server_host.is_some();
            paths.push(PathOutput {
                label: p.label.clone(),
                kind: p.kind,
                vpn: p.vpn,
                client_host,
                fleet: p.fleet.clone(),
                run_on,
                target,
                port: self.s.port,
                authenticated,
                command: client_command(target, self.s.port, &p.label, authenticated),
            });
        }
        let home_ends = self.home_ends()?;
        // Taken first: the literal below holds the ids lock for `bucket` until it ends.
        let notes = self.ids().notes.clone();
        Ok(Outputs {
            format: OUTPUTS_FORMAT.to_owned(),
            run_id: self.tags.run.clone(),
            scenario: self.s.name.clone(),
            deletion_due: self.tags.deletion_due.clone(),
            port: self.s.port,
            bucket: self.ids().bucket.clone(),
            hosts,
            paths,
            notes,
            home_ends,
        })
    }
}
