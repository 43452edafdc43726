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
//! and survives partial state; a failed step does not stop the others, a region that cannot be
//! searched does not stop the other regions, and a service the run never used (Global
//! Accelerator, Transit Gateway) need not answer at all. Throttling and an endpoint's
//! transient failures are retried; every wait and retry shares one deadline, so a teardown
//! always ends. It ends by searching again and listing whatever is left, with its region and
//! id ([`Leftover`]): an empty list is the only success. `gc` goes on past a region (or a run)
//! that fails and reports each at the end. Not for creating anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use crate::aws::ec2::{self, Found, RegionInventory, Selector};
use crate::aws::{RegionClients, Timing, accelerator, aws_error, gateways, iam, s3, ssm};
use crate::deployer::Deployer;
use crate::error::{Error, ignore_missing};
use crate::state::{
    RunId, TAG_ACCELERATORS, TAG_DUE, TAG_PLACEMENT, TAG_REGIONS, TAG_RUN, TAG_TGW, parse_time,
};

/// What `down` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownReport {
    /// `region type id` of everything deleted.
    pub deleted: Vec<String>,
    /// Regions searched.
    pub regions: Vec<String>,
    /// What the final search still found (or could not search). Empty when the run is gone.
    pub left: Vec<Leftover>,
    /// Things worth knowing that are not failures (a service the run never used that did
    /// not answer).
    pub notes: Vec<String>,
}

/// One thing a teardown left: a resource still there, or a place it could not search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Region (`global` for S3 buckets' listing, IAM and Global Accelerator).
    pub region: String,
    /// What it is: `instance`, `vpc`, `s3 bucket`, … or `search` for a place not searched.
    pub kind: String,
    /// Its id or ARN (or, for a place not searched, what was not searched).
    pub id: String,
    /// Its state as AWS names it, or why it could not be searched.
    pub detail: Option<String>,
}

impl fmt::Display for Leftover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.region, self.kind, self.id)?;
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

impl Leftover {
    fn unsearched(region: &str, what: &str, why: &Error) -> Self {
        Leftover {
            region: region.to_owned(),
            kind: "not searched:".into(),
            id: what.to_owned(),
            detail: Some(why.to_string()),
        }
    }
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
    /// What the runs it deleted still have (each `down`'s final listing).
    pub left: Vec<String>,
}

/// What one `down` has done and what failed so far.
struct Progress {
    report: DownReport,
    failures: Vec<Error>,
    /// Ids already handled (a peering or attachment shows in both its regions).
    done: BTreeSet<String>,
    /// When every wait and retry of this teardown gives up: one budget for the whole of it,
    /// so a stuck instance (whose subnet, group and VPC then refuse to go) costs one timeout,
    /// not one per dependent resource.
    deadline: Instant,
    /// The poll interval.
    poll: Duration,
    /// The longest single wait.
    timeout: Duration,
}

impl Progress {
    fn new(timing: &Timing) -> Self {
        Progress {
            report: DownReport::default(),
            failures: Vec::new(),
            done: BTreeSet::new(),
            deadline: Instant::now() + timing.timeout * 2,
            poll: timing.poll,
            timeout: timing.timeout,
        }
    }

    /// Timing for the next wait: the usual timeout, or less when the deadline is near (at
    /// least one poll, so each step still makes one attempt).
    fn timing(&self) -> Timing {
        let left = self.deadline.saturating_duration_since(Instant::now());
        Timing {
            poll: self.poll,
            timeout: left.min(self.timeout).max(self.poll),
        }
    }

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
    /// its resources' tags name; every region when there is no hint at all), then searches
    /// again. Fails with [`Error::TeardownIncomplete`], listing each thing left, unless
    /// nothing of the run is found.
    pub async fn down(&self, run: &RunId, regions: &[String]) -> Result<DownReport, Error> {
        let report = self.down_report(run, regions).await?;
        if report.left.is_empty() {
            return Ok(report);
        }
        Err(Error::TeardownIncomplete {
            run_id: run.to_string(),
            left: report.left.iter().map(ToString::to_string).collect(),
            first: report
                .notes
                .iter()
                .find(|n| n.starts_with("failed: "))
                .map(|n| n.trim_start_matches("failed: ").to_owned())
                .unwrap_or_else(|| "none (the final search still found them)".into()),
        })
    }

    /// [`Deployer::down`]'s work: every step, whatever failed before it, and the final search.
    /// Fails only when the local state cannot be read or written, or no region list can be
    /// had.
    pub async fn down_report(&self, run: &RunId, regions: &[String]) -> Result<DownReport, Error> {
        let hints = self.search_regions(run, regions).await?;
        let sel = Selector::Run(run.clone());
        let mut p = Progress::new(&self.timing);
        let mut uses = hints.uses.clone();
        let (inventories, unsearched) = self
            .discover_widening(&sel, hints.search, &mut uses, &p)
            .await;
        p.report.regions = inventories.iter().map(|(r, _)| r.region.clone()).collect();
        p.report
            .regions
            .extend(unsearched.iter().map(|(r, _)| r.clone()));
        for (region, e) in unsearched {
            warn!("run {run}: region {region} could not be searched: {e}");
            p.failures.push(e);
        }
        self.down_accelerators(&sel, &uses, &mut p).await;
        self.down_instances(&inventories, &mut p).await;
        // Only runs that made placement groups ask for them (moto lacks the API).
        if uses.placement {
            for (r, _) in &inventories {
                let found = self.placement.find(r, &sel).await;
                let found = match found {
                    Ok(f) => f,
                    Err(e) => {
                        p.step(Err(e));
                        continue;
                    }
                };
                for g in found {
                    let res = retry(&p.timing(), || self.placement.delete(r, &g.name)).await;
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
        let searched: Vec<String> = p.report.regions.clone();
        self.down_run_artifacts(run, &searched, &mut p).await;
        p.report.left = self.remaining(&sel, &searched, &uses, &mut p).await;
        for e in &p.failures {
            p.report.notes.push(format!("failed: {e}"));
        }
        self.finish_down(run, p)
    }

    /// Accelerators (disabled, then deleted). A run that never made one does not need the
    /// Global Accelerator API to answer: a refusal is then only a note.
    async fn down_accelerators(&self, sel: &Selector, uses: &Uses, p: &mut Progress) {
        let api = self.accelerators.as_ref();
        let found = retry_value(&p.timing(), || accelerator::find(api, sel)).await;
        let found = match found {
            Ok(f) => f,
            Err(e) if !uses.accelerators => {
                info!("not looking for accelerators (the run made none): {e}");
                p.report.notes.push(format!(
                    "Global Accelerator not searched (the run made no accelerator): {e}"
                ));
                return;
            }
            Err(e) => {
                p.step(Err(e));
                return;
            }
        };
        for a in found {
            let r = accelerator::delete(api, &a.arn, &p.timing()).await;
            if p.step(r) {
                info!("deleted accelerator {}", a.arn);
                p.report
                    .deleted
                    .push(format!("global accelerator {}", a.arn));
            }
        }
    }

    /// Everything of `sel` still there, searched afresh: the teardown's verdict.
    async fn remaining(
        &self,
        sel: &Selector,
        regions: &[String],
        uses: &Uses,
        p: &mut Progress,
    ) -> Vec<Leftover> {
        let mut left = Vec::new();
        for region in regions {
            self.remaining_in(region, sel, uses, p, &mut left).await;
        }
        let api = self.accelerators.as_ref();
        match retry_value(&p.timing(), || accelerator::find(api, sel)).await {
            Ok(found) => left.extend(found.into_iter().map(|a| Leftover {
                region: "global".into(),
                kind: "global accelerator".into(),
                id: a.arn,
                detail: None,
            })),
            Err(e) if uses.accelerators => {
                left.push(Leftover::unsearched("global", "global accelerator", &e));
            }
            Err(_) => {}
        }
        match retry_value(&p.timing(), || s3::find(&self.aws, sel)).await {
            Ok(found) => left.extend(found.into_iter().map(|b| Leftover {
                region: b.bucket.region.clone(),
                kind: "s3 bucket".into(),
                id: b.bucket.name,
                detail: None,
            })),
            Err(e) => left.push(Leftover::unsearched("global", "s3 buckets", &e)),
        }
        match retry_value(&p.timing(), || iam::find(&self.aws, sel)).await {
            Ok(found) => left.extend(found.into_iter().map(|role| Leftover {
                region: "global".into(),
                kind: "iam role".into(),
                id: role.name,
                detail: None,
            })),
            Err(e) => left.push(Leftover::unsearched("global", "iam roles", &e)),
        }
        left
    }

    /// What of `sel` is still in `region` (instances, networks, parameters), added to `left`:
    /// [`Self::remaining`]'s search of one region, apart from the global services after it.
    async fn remaining_in(
        &self,
        region: &str,
        sel: &Selector,
        uses: &Uses,
        p: &Progress,
        left: &mut Vec<Leftover>,
    ) {
        let r = self.aws.region(region);
        match discover_retrying(&r, sel, &p.timing()).await {
            Ok(inv) => {
                for (kind, found) in inv.all() {
                    for f in found {
                        left.push(Leftover {
                            region: region.to_owned(),
                            kind: kind.to_owned(),
                            id: f.id.clone(),
                            detail: f.state.clone(),
                        });
                    }
                }
                for (kind, why) in &inv.unlisted {
                    if uses.tgw {
                        left.push(Leftover {
                            region: region.to_owned(),
                            kind: "not searched:".into(),
                            id: (*kind).to_owned(),
                            detail: Some(why.clone()),
                        });
                    }
                }
            }
            Err(e) => left.push(Leftover::unsearched(region, "the region", &e)),
        }
        match retry_value(&p.timing(), || ssm::find_psks(&r, sel)).await {
            Ok(found) => {
                for (run, _) in found {
                    left.push(Leftover {
                        region: region.to_owned(),
                        kind: "ssm parameter".into(),
                        id: ssm::psk_parameter(&run),
                        detail: None,
                    });
                }
            }
            Err(e) => left.push(Leftover::unsearched(region, "parameter store", &e)),
        }
    }

    /// Regions to search: those given, those the state file names, else every region; and
    /// which optional services the state file says the run uses.
    async fn search_regions(&self, run: &RunId, regions: &[String]) -> Result<Hints, Error> {
        let mut search: Vec<String> = regions.to_vec();
        let mut uses = Uses::default();
        if let Some(state) = self.state.load(run)? {
            uses.placement = state.uses_placement;
            uses.tgw = state.uses_tgw;
            uses.accelerators = state.uses_accelerators || !state.accelerators.is_empty();
            for r in state.regions {
                if !search.contains(&r) {
                    search.push(r);
                }
            }
        }
        if search.is_empty() {
            info!("run {run}: no local state; searching every region");
            search = retry_value(&self.timing, || self.aws.all_regions()).await?;
        }
        Ok(Hints { search, uses })
    }

    /// Discovers `sel` in `search`, widening the search to regions the resources' own tags
    /// name, and learning from the tags which optional services the run uses. A region that
    /// cannot be searched (after retries) is returned apart; the others are still searched.
    async fn discover_widening(
        &self,
        sel: &Selector,
        mut search: Vec<String>,
        uses: &mut Uses,
        p: &Progress,
    ) -> (Inventories, Vec<(String, Error)>) {
        let mut inventories = Vec::new();
        let mut failed = Vec::new();
        let mut i = 0;
        while i < search.len() {
            let r = self.aws.region(&search[i]);
            i += 1;
            let inv = match discover_retrying(&r, sel, &p.timing()).await {
                Ok(inv) => inv,
                Err(e) => {
                    failed.push((r.region.clone(), e));
                    continue;
                }
            };
            for f in inv.all().flat_map(|(_, v)| v.iter()) {
                uses.placement |= f.tags.contains_key(TAG_PLACEMENT);
                uses.tgw |= f.tags.contains_key(TAG_TGW);
                uses.accelerators |= f.tags.contains_key(TAG_ACCELERATORS);
                if let Some(list) = f.tags.get(TAG_REGIONS) {
                    for region in list.split(',').filter(|s| !s.is_empty()) {
                        if !search.iter().any(|s| s == region) {
                            search.push(region.to_owned());
                        }
                    }
                }
            }
            inventories.push((r, inv));
        }
        (inventories, failed)
    }

    /// Instances first, all regions at once, then wait.
    async fn down_instances(&self, inventories: &Inventories, p: &mut Progress) {
        for (r, inv) in inventories {
            let ids: Vec<String> = inv.instances.iter().map(|f| f.id.clone()).collect();
            if ids.is_empty() {
                continue;
            }
            let timing = p.timing();
            if p.step(terminate_and_wait(r, &ids, &timing).await) {
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
                    let res = retry(&p.timing(), || async {
                        if kind == "tgw peering attachment" {
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
                        }
                    })
                    .await;
                    if p.step(res) {
                        waiting.push((r, a.id.clone()));
                    }
                }
            }
            for (r, id) in waiting {
                let timing = p.timing();
                if p.step(wait_attachment_gone(r, &id, &timing).await) {
                    p.deleted(&r.region, kind, &id);
                }
            }
        }
    }

    async fn down_tgws_and_peerings(&self, inventories: &Inventories, p: &mut Progress) {
        for (r, inv) in inventories {
            for t in &inv.transit_gateways {
                let res = retry(&p.timing(), || async {
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
                let res = retry(&p.timing(), || async {
                    r.ec2
                        .delete_vpc_peering_connection()
                        .vpc_peering_connection_id(&pcx.id)
                        .send()
                        .await
                        .map(drop)
                        .map_err(|e| aws_error("DeleteVpcPeeringConnection", &r.region, e))
                })
                .await;
                if p.step(res) {
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
                    let res = retry(&p.timing(), || gateways::detach_vgw(r, &a.id, vpc)).await;
                    if !p.step(res) {
                        continue;
                    }
                }
                let gone = p
                    .timing()
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
            let res = retry(&p.timing(), || async {
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
                // Deleting the subnet may already have removed the association (not found is
                // done); any other failure shows when the table itself cannot be deleted.
                let _ = retry(&p.timing(), || async {
                    r.ec2
                        .disassociate_route_table()
                        .association_id(assoc)
                        .send()
                        .await
                        .map(drop)
                        .map_err(|e| aws_error("DisassociateRouteTable", &r.region, e))
                })
                .await;
            }
            let res = retry(&p.timing(), || async {
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
                let res = retry(&p.timing(), || async {
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
            let res = retry(&p.timing(), || async {
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
            let res = retry(&p.timing(), || async {
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
            let res = retry(&p.timing(), || async {
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
    async fn down_run_artifacts(&self, run: &RunId, regions: &[String], p: &mut Progress) {
        let sel = Selector::Run(run.clone());
        match retry_value(&p.timing(), || s3::find(&self.aws, &sel)).await {
            Ok(buckets) => {
                for b in buckets {
                    let res = retry(&p.timing(), || s3::delete_bucket(&self.aws, &b.bucket)).await;
                    if p.step(res) {
                        p.deleted(&b.bucket.region, "s3 bucket", &b.bucket.name);
                    }
                }
            }
            Err(e) => {
                p.step(Err(e));
            }
        }
        for region in regions {
            let r = self.aws.region(region);
            match retry_value(&p.timing(), || ssm::delete_psk(&r, run)).await {
                Ok(true) => p.deleted(&r.region, "ssm parameter", &ssm::psk_parameter(run)),
                Ok(false) => {}
                Err(e) => {
                    p.step(Err(e));
                }
            }
        }
        match retry_value(&p.timing(), || iam::delete(&self.aws, run)).await {
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

    fn finish_down(&self, run: &RunId, p: Progress) -> Result<DownReport, Error> {
        let gone = p.report.left.is_empty();
        if let Some(mut state) = self.state.load(run)? {
            state.status = if gone { "deleted" } else { "failed" }.into();
            self.state.save(run, &state)?;
        }
        if gone {
            // Keys of your VPN ends pair with gateways that are gone now.
            self.state.remove_home_files(run)?;
        }
        Ok(p.report)
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
            retry_value(&self.timing, || self.aws.all_regions()).await?
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
            match self.down_report(&id, &search).await {
                Ok(d) => {
                    report.deleted.extend(d.deleted);
                    if !d.left.is_empty() {
                        report.problems.push(format!(
                            "run {run}: {} thing(s) left after its teardown",
                            d.left.len()
                        ));
                        report
                            .left
                            .extend(d.left.iter().map(|l| format!("{run}: {l}")));
                    }
                }
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
            match discover_retrying(&r, &Selector::AnyRun, &self.timing).await {
                Ok(inv) => {
                    for f in inv.all().flat_map(|(_, v)| v.iter()) {
                        note(f.run.as_ref(), f.tags.get(TAG_DUE), region);
                    }
                }
                Err(e) => report.problems.push(format!("region {region}: {e}")),
            }
            match retry_value(&self.timing, || ssm::find_psks(&r, &Selector::AnyRun)).await {
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

/// Which optional services a run uses, from its state file and its resources' tags: a
/// service it does not use need not answer `down`.
#[derive(Debug, Clone, Default)]
struct Uses {
    placement: bool,
    tgw: bool,
    accelerators: bool,
}

/// Where `down` looks, and what it knows of the run before looking.
struct Hints {
    search: Vec<String>,
    uses: Uses,
}

/// Runs `op` until it succeeds, AWS says the thing is gone, or a dependency error, throttling
/// or a transient failure persists past `timing`'s timeout (AWS releases network interfaces
/// of terminated instances asynchronously; the SDK's own retries of throttling are few).
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
            Err(e)
                if (e.is_dependency() || e.is_transient()) && start.elapsed() < timing.timeout =>
            {
                tokio::time::sleep(timing.poll).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs a read until it answers, retrying throttling and transient failures (a region or
/// service having trouble) a few times within `timing`'s timeout.
async fn retry_value<T, F, Fut>(timing: &Timing, mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    const ATTEMPTS: u32 = 3;
    let start = Instant::now();
    let mut attempt = 1;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e)
                if e.is_transient() && attempt < ATTEMPTS && start.elapsed() < timing.timeout =>
            {
                tokio::time::sleep(timing.poll * attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// [`ec2::discover`] with [`retry_value`]'s retries.
async fn discover_retrying(
    r: &RegionClients,
    sel: &Selector,
    timing: &Timing,
) -> Result<RegionInventory, Error> {
    retry_value(timing, || ec2::discover(r, sel)).await
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
                let gone = ec2::tgw_attachment(r, id).await?.is_none_or(|a| {
                    a.state()
                        .is_some_and(|s| ec2::ATTACHMENT_GONE.contains(&s.as_str()))
                });
                Ok(gone.then_some(()))
            },
        )
        .await
}
