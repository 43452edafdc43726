//! `down` and `gc`: deleting a run's resources in reverse dependency order, found by their tags
//! (the local state file only says which regions to search), waiting where AWS needs it and
//! retrying what AWS refuses while a dependency is still going away.
//!
//! Order: accelerators (disabled first); instances (terminated, and waited for, since their
//! network interfaces hold subnets and security groups); placement groups; Transit Gateway
//! peering and VPC attachments (waited for until deleted); Transit Gateways; VPC peerings;
//! your virtual private gateways detached from the run's VPCs (the gateways stay yours);
//! subnets; route tables; internet gateways (detached first); security groups; VPCs; then the
//! run's bucket (with its objects), its key in every region's Parameter Store, and its IAM
//! instance profile and role. Every step treats "not found" as done, so `down` can be repeated
//! and survives partial state; a failed step does not stop the others. `gc` goes on past a
//! region (or a run) that fails and reports each at the end. Not for creating anything.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Instant, SystemTime};

use tracing::{info, warn};

use crate::aws::ec2::{self, Found, RegionInventory, Selector};
use crate::aws::{RegionClients, Timing, accelerator, aws_error, gateways, iam, s3, ssm};
use crate::deployer::Deployer;
use crate::error::Error;
use crate::state::{RunId, TAG_DUE, TAG_PLACEMENT, TAG_REGIONS, TAG_RUN, parse_time};

/// What `down` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownReport {
    /// `region type id` of everything deleted.
    pub deleted: Vec<String>,
    /// Regions searched.
    pub regions: Vec<String>,
}

/// One run `gc` saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcRun {
    /// Run id.
    pub run_id: String,
    /// Its deletion-due time, if any resource carried one.
    pub deletion_due: Option<String>,
    /// Regions it has resources in (`global` for S3 and IAM).
    pub regions: Vec<String>,
    /// Whether it was past due (and so deleted, unless a dry run).
    pub expired: bool,
}

/// What `gc` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Runs seen.
    pub runs: Vec<GcRun>,
    /// Regions searched.
    pub regions: Vec<String>,
    /// What was deleted.
    pub deleted: Vec<String>,
    /// What failed (a region that could not be searched, a run that could not be deleted);
    /// `gc` went on past each.
    pub problems: Vec<String>,
}

/// What one `down` has done and what failed so far.
#[derive(Default)]
struct Progress {
    report: DownReport,
    failures: Vec<Error>,
    /// Ids already handled (a peering or attachment shows in both its regions).
    done: BTreeSet<String>,
}

impl Progress {
    /// Keeps going after a failed step, remembering the failure for the final verdict.
    fn step(&mut self, r: Result<(), Error>) -> bool {
        match r {
            Ok(()) => true,
            Err(e) => {
                warn!("{e}");
                self.failures.push(e);
                false
            }
        }
    }

    fn deleted(&mut self, region: &str, what: &str, id: &str) {
        deleted(region, what, id, &mut self.report);
    }
}

type Inventories = Vec<(RegionClients, RegionInventory)>;

/// Which list of a [`RegionInventory`] a resource kind lives in.
type Pick = fn(&RegionInventory) -> &Vec<Found>;

impl Deployer {
    /// Deletes everything of run `run` in `regions` (plus the regions its local state file and
    /// its resources' tags name; every region when there is no hint at all).
    pub async fn down(&self, run: &RunId, regions: &[String]) -> Result<DownReport, Error> {
        let (search, mut uses_placement) = self.search_regions(run, regions).await?;
        let sel = Selector::Run(run.clone());
        let mut p = Progress::default();
        for a in accelerator::find(self.accelerators.as_ref(), &sel).await? {
            let r = accelerator::delete(self.accelerators.as_ref(), &a.arn, &self.timing).await;
            if p.step(r) {
                info!("deleted accelerator {}", a.arn);
                p.report
                    .deleted
                    .push(format!("global accelerator {}", a.arn));
            }
        }
        let inventories = self
            .discover_widening(&sel, search, &mut uses_placement)
            .await?;
        p.report.regions = inventories.iter().map(|(r, _)| r.region.clone()).collect();
        self.down_instances(&inventories, &mut p).await;
        // Only runs that made placement groups ask for them (moto lacks the API).
        if uses_placement {
            for (r, _) in &inventories {
                for g in self.placement.find(r, &sel).await? {
                    let res = retry(&self.timing, || self.placement.delete(r, &g.name)).await;
                    if p.step(res) {
                        p.deleted(&r.region, "placement group", &g.name);
                    }
                }
            }
        }
        self.down_attachments(&inventories, &mut p).await;
        self.down_tgws_and_peerings(&inventories, &mut p).await;
        self.down_vgw_attachments(&inventories, &mut p).await;
        for (r, inv) in &inventories {
            self.down_vpc_parts(r, inv, &mut p).await;
        }
        self.down_run_artifacts(run, &inventories, &mut p).await;
        self.finish_down(run, p)
    }

    /// Regions to search: those given, those the state file names, else every region.
    async fn search_regions(
        &self,
        run: &RunId,
        regions: &[String],
    ) -> Result<(Vec<String>, bool), Error> {
        let mut search: Vec<String> = regions.to_vec();
        let mut uses_placement = false;
        if let Some(state) = self.state.load(run)? {
            uses_placement = state.uses_placement;
            for r in state.regions {
                if !search.contains(&r) {
                    search.push(r);
                }
            }
        }
        if search.is_empty() {
            info!("run {run}: no local state; searching every region");
            search = self.aws.all_regions().await?;
        }
        Ok((search, uses_placement))
    }

    /// Discovers `sel` in `search`, widening the search to regions the resources' own tags
    /// name.
    async fn discover_widening(
        &self,
        sel: &Selector,
        mut search: Vec<String>,
        uses_placement: &mut bool,
    ) -> Result<Inventories, Error> {
        let mut inventories = Vec::new();
        let mut i = 0;
        while i < search.len() {
            let r = self.aws.region(&search[i]);
            let inv = ec2::discover(&r, sel).await?;
            for f in inv.all().flat_map(|(_, v)| v.iter()) {
                *uses_placement |= f.tags.contains_key(TAG_PLACEMENT);
                if let Some(list) = f.tags.get(TAG_REGIONS) {
                    for region in list.split(',').filter(|s| !s.is_empty()) {
                        if !search.iter().any(|s| s == region) {
                            search.push(region.to_owned());
                        }
                    }
                }
            }
            inventories.push((r, inv));
            i += 1;
        }
        Ok(inventories)
    }

    /// Instances first, all regions at once, then wait.
    async fn down_instances(&self, inventories: &Inventories, p: &mut Progress) {
        for (r, inv) in inventories {
            let ids: Vec<String> = inv.instances.iter().map(|f| f.id.clone()).collect();
            if ids.is_empty() {
                continue;
            }
            if p.step(terminate_and_wait(r, &ids, &self.timing).await) {
                for id in &ids {
                    p.deleted(&r.region, "instance", id);
                }
            }
        }
    }

    /// Attachments: peering ones first (they hold both Transit Gateways), then VPC ones; a
    /// Transit Gateway cannot be deleted until they are gone (minutes on AWS).
    async fn down_attachments(&self, inventories: &Inventories, p: &mut Progress) {
        let kinds: [(&str, Pick); 2] = [
            ("tgw peering attachment", |i| &i.tgw_peering_attachments),
            ("tgw vpc attachment", |i| &i.tgw_vpc_attachments),
        ];
        for (kind, pick) in kinds {
            let mut waiting: Vec<(&RegionClients, String)> = Vec::new();
            for (r, inv) in inventories {
                for a in pick(inv) {
                    if !p.done.insert(a.id.clone()) {
                        continue;
                    }
                    let res = if kind == "tgw peering attachment" {
                        r.ec2
                            .delete_transit_gateway_peering_attachment()
                            .transit_gateway_attachment_id(&a.id)
                            .send()
                            .await
                            .map(drop)
                            .map_err(|e| {
                                aws_error("DeleteTransitGatewayPeeringAttachment", &r.region, e)
                            })
                    } else {
                        r.ec2
                            .delete_transit_gateway_vpc_attachment()
                            .transit_gateway_attachment_id(&a.id)
                            .send()
                            .await
                            .map(drop)
                            .map_err(|e| {
                                aws_error("DeleteTransitGatewayVpcAttachment", &r.region, e)
                            })
                    };
                    if p.step(ignore_missing(res)) {
                        waiting.push((r, a.id.clone()));
                    }
                }
            }
            for (r, id) in waiting {
                if p.step(wait_attachment_gone(r, &id, &self.timing).await) {
                    p.deleted(&r.region, kind, &id);
                }
            }
        }
    }

    async fn down_tgws_and_peerings(&self, inventories: &Inventories, p: &mut Progress) {
        for (r, inv) in inventories {
            for t in &inv.transit_gateways {
                let res = retry(&self.timing, || async {
                    r.ec2
                        .delete_transit_gateway()
                        .transit_gateway_id(&t.id)
                        .send()
                        .await
                        .map(drop)
                        .map_err(|e| aws_error("DeleteTransitGateway", &r.region, e))
                })
                .await;
                if p.step(res) {
                    p.deleted(&r.region, "transit gateway", &t.id);
                }
            }
        }
        for (r, inv) in inventories {
            for pcx in &inv.vpc_peerings {
                if !p.done.insert(pcx.id.clone()) {
                    continue;
                }
                let res = r
                    .ec2
                    .delete_vpc_peering_connection()
                    .vpc_peering_connection_id(&pcx.id)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| aws_error("DeleteVpcPeeringConnection", &r.region, e));
                if p.step(ignore_missing(res)) {
                    p.deleted(&r.region, "vpc peering", &pcx.id);
                }
            }
        }
    }

    /// Your virtual private gateways detached from the run's VPCs (a VPC cannot be deleted
    /// with one attached), waited for; the gateways themselves are yours and stay.
    async fn down_vgw_attachments(&self, inventories: &Inventories, p: &mut Progress) {
        for (r, inv) in inventories {
            for a in &inv.vgw_attachments {
                let Some(vpc) = a.vpc_id.as_deref() else {
                    continue;
                };
                if a.state.as_deref() != Some("detaching") {
                    let res = gateways::detach_vgw(r, &a.id, vpc).await;
                    if !p.step(ignore_missing(res)) {
                        continue;
                    }
                }
                let gone = self
                    .timing
                    .wait(
                        &format!("{} to detach from {vpc}", a.id),
                        &r.region,
                        || async {
                            let s = gateways::vgw_attachment_state(r, &a.id, vpc).await?;
                            Ok(matches!(s.as_deref(), None | Some("detached")).then_some(()))
                        },
                    )
                    .await;
                if p.step(gone) {
                    p.deleted(&r.region, "vgw attachment", &format!("{}/{vpc}", a.id));
                }
            }
        }
    }

    /// Subnets, route tables (disassociated), internet gateways (detached), security
    /// groups, VPCs of one region.
    async fn down_vpc_parts(&self, r: &RegionClients, inv: &RegionInventory, p: &mut Progress) {
        for s in &inv.subnets {
            let res = retry(&self.timing, || async {
                let out = r.ec2.delete_subnet().subnet_id(&s.id).send().await;
                out.map(drop)
                    .map_err(|e| aws_error("DeleteSubnet", &r.region, e))
            })
            .await;
            if p.step(res) {
                p.deleted(&r.region, "subnet", &s.id);
            }
        }
        for t in &inv.route_tables {
            for assoc in &t.related {
                let out = r
                    .ec2
                    .disassociate_route_table()
                    .association_id(assoc)
                    .send()
                    .await;
                let res = out
                    .map(drop)
                    .map_err(|e| aws_error("DisassociateRouteTable", &r.region, e));
                // Deleting the subnet may already have removed the association.
                let _ = ignore_missing(res);
            }
            let res = retry(&self.timing, || async {
                let out = r
                    .ec2
                    .delete_route_table()
                    .route_table_id(&t.id)
                    .send()
                    .await;
                out.map(drop)
                    .map_err(|e| aws_error("DeleteRouteTable", &r.region, e))
            })
            .await;
            if p.step(res) {
                p.deleted(&r.region, "route table", &t.id);
            }
        }
        self.down_igws(r, inv, p).await;
        self.down_groups_and_vpcs(r, inv, p).await;
    }

    async fn down_igws(&self, r: &RegionClients, inv: &RegionInventory, p: &mut Progress) {
        for g in &inv.internet_gateways {
            for vpc in &g.related {
                let res = retry(&self.timing, || async {
                    let out = r
                        .ec2
                        .detach_internet_gateway()
                        .internet_gateway_id(&g.id)
                        .vpc_id(vpc)
                        .send()
                        .await;
                    out.map(drop)
                        .map_err(|e| aws_error("DetachInternetGateway", &r.region, e))
                })
                .await;
                p.step(res);
            }
            let res = retry(&self.timing, || async {
                let out = r
                    .ec2
                    .delete_internet_gateway()
                    .internet_gateway_id(&g.id)
                    .send()
                    .await;
                out.map(drop)
                    .map_err(|e| aws_error("DeleteInternetGateway", &r.region, e))
            })
            .await;
            if p.step(res) {
                p.deleted(&r.region, "internet gateway", &g.id);
            }
        }
    }

    async fn down_groups_and_vpcs(
        &self,
        r: &RegionClients,
        inv: &RegionInventory,
        p: &mut Progress,
    ) {
        for g in &inv.security_groups {
            let res = retry(&self.timing, || async {
                let out = r.ec2.delete_security_group().group_id(&g.id).send().await;
                out.map(drop)
                    .map_err(|e| aws_error("DeleteSecurityGroup", &r.region, e))
            })
            .await;
            if p.step(res) {
                p.deleted(&r.region, "security group", &g.id);
            }
        }
        for v in &inv.vpcs {
            let res = retry(&self.timing, || async {
                let out = r.ec2.delete_vpc().vpc_id(&v.id).send().await;
                out.map(drop)
                    .map_err(|e| aws_error("DeleteVpc", &r.region, e))
            })
            .await;
            if p.step(res) {
                p.deleted(&r.region, "vpc", &v.id);
            }
        }
    }

    /// The run's bucket (found by its name and tags), its key in each searched region, its
    /// instance profile and role.
    async fn down_run_artifacts(&self, run: &RunId, inventories: &Inventories, p: &mut Progress) {
        let sel = Selector::Run(run.clone());
        match s3::find(&self.aws, &sel).await {
            Ok(buckets) => {
                for b in buckets {
                    if p.step(s3::delete_bucket(&self.aws, &b.bucket).await) {
                        p.deleted(&b.bucket.region, "s3 bucket", &b.bucket.name);
                    }
                }
            }
            Err(e) => {
                p.step(Err(e));
            }
        }
        for (r, _) in inventories {
            match ssm::delete_psk(r, run).await {
                Ok(true) => p.deleted(&r.region, "ssm parameter", &ssm::psk_parameter(run)),
                Ok(false) => {}
                Err(e) => {
                    p.step(Err(e));
                }
            }
        }
        match iam::delete(&self.aws, run).await {
            Ok(deleted) => {
                for d in deleted {
                    info!("deleted {d}");
                    p.report.deleted.push(format!("global {d}"));
                }
            }
            Err(e) => {
                p.step(Err(e));
            }
        }
    }

    fn finish_down(&self, run: &RunId, mut p: Progress) -> Result<DownReport, Error> {
        if let Some(mut state) = self.state.load(run)? {
            state.status = if p.failures.is_empty() {
                "deleted"
            } else {
                "failed"
            }
            .into();
            self.state.save(run, &state)?;
        }
        if p.failures.is_empty() {
            // Keys of your VPN ends pair with gateways that are gone now.
            self.state.remove_home_files(run)?;
            Ok(p.report)
        } else {
            let count = p.failures.len();
            Err(Error::TeardownIncomplete {
                run_id: run.to_string(),
                count,
                first: Box::new(p.failures.remove(0)),
            })
        }
    }

    /// Deletes every run whose deletion-due time is at or before `now`, in `regions` (every
    /// region when empty), and its bucket, key and instance profile. With `dry_run`, only
    /// reports. A region or run that fails is reported in [`GcReport::problems`]; the others
    /// are still handled.
    pub async fn gc(
        &self,
        now: SystemTime,
        regions: &[String],
        dry_run: bool,
    ) -> Result<GcReport, Error> {
        let regions = if regions.is_empty() {
            self.aws.all_regions().await?
        } else {
            regions.to_vec()
        };
        let mut report = GcReport {
            regions: regions.clone(),
            ..GcReport::default()
        };
        let runs = self.gc_survey(&regions, &mut report).await;
        for (run, (due, where_)) in runs {
            // A run with no readable due time was not made by this tool's `up`; leave it.
            let expired = due
                .as_deref()
                .and_then(parse_time)
                .is_some_and(|t| t <= now);
            report.runs.push(GcRun {
                run_id: run.clone(),
                deletion_due: due,
                regions: where_.iter().cloned().collect(),
                expired,
            });
            if !expired || dry_run {
                continue;
            }
            let Ok(id) = run.parse::<RunId>() else {
                continue;
            };
            let search: Vec<String> = where_.into_iter().filter(|r| regions.contains(r)).collect();
            info!("gc: run {run} is past due; deleting");
            match self.down(&id, &search).await {
                Ok(d) => report.deleted.extend(d.deleted),
                Err(e) => report.problems.push(format!("run {run}: {e}")),
            }
        }
        Ok(report)
    }

    /// Every run with a resource anywhere: run id → (deletion due, where). Regions (and the
    /// global services) that cannot be searched go to `report.problems`.
    async fn gc_survey(
        &self,
        regions: &[String],
        report: &mut GcReport,
    ) -> BTreeMap<String, (Option<String>, BTreeSet<String>)> {
        let mut runs: BTreeMap<String, (Option<String>, BTreeSet<String>)> = BTreeMap::new();
        let mut note = |run: Option<&String>, due: Option<&String>, region: &str| {
            if let Some(run) = run {
                let e = runs.entry(run.clone()).or_default();
                if e.0.is_none() {
                    e.0 = due.cloned();
                }
                e.1.insert(region.to_owned());
            }
        };
        for region in regions {
            let r = self.aws.region(region);
            match ec2::discover(&r, &Selector::AnyRun).await {
                Ok(inv) => {
                    for f in inv.all().flat_map(|(_, v)| v.iter()) {
                        note(f.run.as_ref(), f.tags.get(TAG_DUE), region);
                    }
                }
                Err(e) => report.problems.push(format!("region {region}: {e}")),
            }
            match ssm::find_psks(&r, &Selector::AnyRun).await {
                Ok(found) => {
                    for (run, tags) in found {
                        note(Some(&run.to_string()), tags.get(TAG_DUE), region);
                    }
                }
                Err(e) => report.problems.push(format!("region {region}: {e}")),
            }
        }
        match accelerator::find(self.accelerators.as_ref(), &Selector::AnyRun).await {
            Ok(found) => {
                for a in found {
                    note(
                        a.tags.get(TAG_RUN),
                        a.tags.get(TAG_DUE),
                        crate::regions::ACCELERATOR_API_REGION,
                    );
                }
            }
            Err(e) => report.problems.push(format!("Global Accelerator: {e}")),
        }
        match s3::find(&self.aws, &Selector::AnyRun).await {
            Ok(found) => {
                for b in found {
                    note(b.tags.get(TAG_RUN), b.tags.get(TAG_DUE), &b.bucket.region);
                }
            }
            Err(e) => report.problems.push(format!("S3: {e}")),
        }
        match iam::find(&self.aws, &Selector::AnyRun).await {
            Ok(found) => {
                for role in found {
                    note(role.tags.get(TAG_RUN), role.tags.get(TAG_DUE), "global");
                }
            }
            Err(e) => report.problems.push(format!("IAM: {e}")),
        }
        runs
    }
}

fn deleted(region: &str, what: &str, id: &str, report: &mut DownReport) {
    info!("deleted {what} {id} in {region}");
    report.deleted.push(format!("{region} {what} {id}"));
}

fn ignore_missing(r: Result<(), Error>) -> Result<(), Error> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// Runs `op` until it succeeds, AWS says the thing is gone, or a dependency error persists past
/// the timeout (AWS releases network interfaces of terminated instances asynchronously).
async fn retry<F, Fut>(timing: &Timing, mut op: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let start = Instant::now();
    loop {
        match op().await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) if e.is_dependency() && start.elapsed() < timing.timeout => {
                tokio::time::sleep(timing.poll).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Terminates instances and waits until they are terminated (or gone).
pub(crate) async fn terminate_and_wait(
    r: &RegionClients,
    ids: &[String],
    timing: &Timing,
) -> Result<(), Error> {
    let res = r
        .ec2
        .terminate_instances()
        .set_instance_ids(Some(ids.to_vec()))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| aws_error("TerminateInstances", &r.region, e));
    ignore_missing(res)?;
    timing
        .wait("instances to terminate", &r.region, || async {
            let out = r
                .ec2
                .describe_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .send()
                .await;
            match out {
                Ok(o) => Ok(o
                    .reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .all(|i| {
                        i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("terminated")
                    })
                    .then_some(())),
                Err(e) => {
                    let e = aws_error("DescribeInstances", &r.region, e);
                    if e.is_not_found() {
                        Ok(Some(()))
                    } else {
                        Err(e)
                    }
                }
            }
        })
        .await
}

async fn wait_attachment_gone(r: &RegionClients, id: &str, timing: &Timing) -> Result<(), Error> {
    timing
        .wait(
            &format!("transit gateway attachment {id} to be deleted"),
            &r.region,
            || async {
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
                        .filter(|a| a.transit_gateway_attachment_id() == Some(id))
                        .all(|a| {
                            matches!(
                                a.state().map(|s| s.as_str()),
                                Some("deleted" | "rejected" | "failed")
                            )
                        })
                        .then_some(())),
                    Err(e) => {
                        let e = aws_error("DescribeTransitGatewayAttachments", &r.region, e);
                        if e.is_not_found() {
                            Ok(Some(()))
                        } else {
                            Err(e)
                        }
                    }
                }
            },
        )
        .await
}
