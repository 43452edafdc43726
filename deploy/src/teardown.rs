//! `down` and `gc`: deleting a run's resources in reverse dependency order, found by their tags
//! (the local state file only says which regions to search), waiting where AWS needs it and
//! retrying what AWS refuses while a dependency is still going away.
//!
//! Order: accelerators (disabled first); instances (terminated, and waited for, since their
//! network interfaces hold subnets and security groups); placement groups; Transit Gateway
//! peering and VPC attachments (waited for until deleted); Transit Gateways; VPC peerings;
//! subnets; route tables; internet gateways (detached first); security groups; VPCs. Every step
//! treats "not found" as done, so `down` can be repeated and survives partial state. Not for
//! creating anything.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Instant, SystemTime};

use tracing::{info, warn};

use crate::aws::ec2::{self, Found, RegionInventory, Selector};
use crate::aws::{RegionClients, Timing, accelerator, aws_error};
use crate::deployer::Deployer;
use crate::error::Error;
use crate::state::{RunId, TAG_DUE, TAG_PLACEMENT, TAG_REGIONS, parse_time};

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
    /// Regions it has resources in.
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
}

impl Deployer {
    /// Deletes everything of run `run` in `regions` (plus the regions its local state file and
    /// its resources' tags name; every region when there is no hint at all).
    pub async fn down(&self, run: &RunId, regions: &[String]) -> Result<DownReport, Error> {
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
        let sel = Selector::Run(run.clone());
        let mut report = DownReport::default();
        let mut failures: Vec<Error> = Vec::new();

        for a in accelerator::find(self.accelerators.as_ref(), &sel).await? {
            match accelerator::delete(self.accelerators.as_ref(), &a.arn, &self.timing).await {
                Ok(()) => {
                    info!("deleted accelerator {}", a.arn);
                    report.deleted.push(format!("global accelerator {}", a.arn));
                }
                Err(e) => failures.push(e),
            }
        }

        // Discover, widening the search to regions the resources' own tags name.
        let mut inventories: Vec<(RegionClients, RegionInventory)> = Vec::new();
        let mut i = 0;
        while i < search.len() {
            let r = self.aws.region(&search[i]);
            let inv = ec2::discover(&r, &sel).await?;
            for f in inv.all().flat_map(|(_, v)| v.iter()) {
                uses_placement |= f.tags.contains_key(TAG_PLACEMENT);
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
        report.regions = search.clone();

        let mut done: BTreeSet<String> = BTreeSet::new();

        // Instances first, all regions at once, then wait.
        for (r, inv) in &inventories {
            let ids: Vec<String> = inv.instances.iter().map(|f| f.id.clone()).collect();
            if ids.is_empty() {
                continue;
            }
            if step(
                terminate_and_wait(r, &ids, &self.timing).await,
                &mut failures,
            ) {
                for id in &ids {
                    deleted(&r.region, "instance", id, &mut report);
                }
            }
        }

        // Only runs that made placement groups ask for them (moto lacks the API).
        for (r, _) in inventories.iter().filter(|_| uses_placement) {
            for g in self.placement.find(r, &sel).await? {
                let res = retry(&self.timing, || self.placement.delete(r, &g.name)).await;
                if step(res, &mut failures) {
                    deleted(&r.region, "placement group", &g.name, &mut report);
                }
            }
        }

        // Attachments: peering ones first (they hold both Transit Gateways), then VPC ones.
        for (kind, pick) in [
            (
                "tgw peering attachment",
                (|i: &RegionInventory| &i.tgw_peering_attachments)
                    as fn(&RegionInventory) -> &Vec<Found>,
            ),
            ("tgw vpc attachment", |i: &RegionInventory| {
                &i.tgw_vpc_attachments
            }),
        ] {
            let mut waiting: Vec<(&RegionClients, String)> = Vec::new();
            for (r, inv) in &inventories {
                for a in pick(inv) {
                    if !done.insert(a.id.clone()) {
                        continue;
                    }
                    let res = if kind == "tgw peering attachment" {
                        r.ec2
                            .delete_transit_gateway_peering_attachment()
                            .transit_gateway_attachment_id(&a.id)
                            .send()
                            .await
                            .map(|_| ())
                            .map_err(|e| {
                                aws_error("DeleteTransitGatewayPeeringAttachment", &r.region, e)
                            })
                    } else {
                        r.ec2
                            .delete_transit_gateway_vpc_attachment()
                            .transit_gateway_attachment_id(&a.id)
                            .send()
                            .await
                            .map(|_| ())
                            .map_err(|e| {
                                aws_error("DeleteTransitGatewayVpcAttachment", &r.region, e)
                            })
                    };
                    if step(ignore_missing(res), &mut failures) {
                        waiting.push((r, a.id.clone()));
                    }
                }
            }
            // A Transit Gateway cannot be deleted until its attachments are gone (minutes on AWS).
            for (r, id) in waiting {
                if step(
                    wait_attachment_gone(r, &id, &self.timing).await,
                    &mut failures,
                ) {
                    deleted(&r.region, kind, &id, &mut report);
                }
            }
        }

        for (r, inv) in &inventories {
            for t in &inv.transit_gateways {
                let res = retry(&self.timing, || async {
                    r.ec2
                        .delete_transit_gateway()
                        .transit_gateway_id(&t.id)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("DeleteTransitGateway", &r.region, e))
                })
                .await;
                if step(res, &mut failures) {
                    deleted(&r.region, "transit gateway", &t.id, &mut report);
                }
            }
        }

        for (r, inv) in &inventories {
            for p in &inv.vpc_peerings {
                if !done.insert(p.id.clone()) {
                    continue;
                }
                let res = r
                    .ec2
                    .delete_vpc_peering_connection()
                    .vpc_peering_connection_id(&p.id)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| aws_error("DeleteVpcPeeringConnection", &r.region, e));
                if step(ignore_missing(res), &mut failures) {
                    deleted(&r.region, "vpc peering", &p.id, &mut report);
                }
            }
        }

        for (r, inv) in &inventories {
            for s in &inv.subnets {
                let res = retry(&self.timing, || async {
                    r.ec2
                        .delete_subnet()
                        .subnet_id(&s.id)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("DeleteSubnet", &r.region, e))
                })
                .await;
                if step(res, &mut failures) {
                    deleted(&r.region, "subnet", &s.id, &mut report);
                }
            }
            for t in &inv.route_tables {
                for assoc in &t.related {
                    let res = r
                        .ec2
                        .disassociate_route_table()
                        .association_id(assoc)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("DisassociateRouteTable", &r.region, e));
                    // Deleting the subnet may already have removed the association.
                    let _ = ignore_missing(res);
                }
                let res = retry(&self.timing, || async {
                    r.ec2
                        .delete_route_table()
                        .route_table_id(&t.id)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("DeleteRouteTable", &r.region, e))
                })
                .await;
                if step(res, &mut failures) {
                    deleted(&r.region, "route table", &t.id, &mut report);
                }
            }
            for g in &inv.internet_gateways {
                for vpc in &g.related {
                    let res = retry(&self.timing, || async {
                        r.ec2
                            .detach_internet_gateway()
                            .internet_gateway_id(&g.id)
                            .vpc_id(vpc)
                            .send()
                            .await
                            .map(|_| ())
                            .map_err(|e| aws_error("DetachInternetGateway", &r.region, e))
                    })
                    .await;
                    step(res, &mut failures);
                }
                let res = retry(&self.timing, || async {
                    r.ec2
                        .delete_internet_gateway()
                        .internet_gateway_id(&g.id)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("DeleteInternetGateway", &r.region, e))
                })
                .await;
                if step(res, &mut failures) {
                    deleted(&r.region, "internet gateway", &g.id, &mut report);
                }
            }
            for g in &inv.security_groups {
                let res = retry(&self.timing, || async {
                    r.ec2
                        .delete_security_group()
                        .group_id(&g.id)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("DeleteSecurityGroup", &r.region, e))
                })
                .await;
                if step(res, &mut failures) {
                    deleted(&r.region, "security group", &g.id, &mut report);
                }
            }
            for v in &inv.vpcs {
                let res = retry(&self.timing, || async {
                    r.ec2
                        .delete_vpc()
                        .vpc_id(&v.id)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_error("DeleteVpc", &r.region, e))
                })
                .await;
                if step(res, &mut failures) {
                    deleted(&r.region, "vpc", &v.id, &mut report);
                }
            }
        }

        if let Some(mut state) = self.state.load(run)? {
            state.status = if failures.is_empty() {
                "deleted"
            } else {
                "failed"
            }
            .into();
            self.state.save(run, &state)?;
        }
        if failures.is_empty() {
            Ok(report)
        } else {
            let count = failures.len();
            Err(Error::TeardownIncomplete {
                run_id: run.to_string(),
                count,
                first: Box::new(failures.remove(0)),
            })
        }
    }

    /// Deletes every run whose deletion-due time is at or before `now`, in `regions` (every
    /// region when empty). With `dry_run`, only reports.
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
        for region in &regions {
            let r = self.aws.region(region);
            let inv = ec2::discover(&r, &Selector::AnyRun).await?;
            for f in inv.all().flat_map(|(_, v)| v.iter()) {
                note(f.run.as_ref(), f.tags.get(TAG_DUE), region);
            }
        }
        for a in accelerator::find(self.accelerators.as_ref(), &Selector::AnyRun).await? {
            note(
                a.tags.get(crate::state::TAG_RUN),
                a.tags.get(TAG_DUE),
                crate::regions::ACCELERATOR_API_REGION,
            );
        }
        let mut report = GcReport {
            regions: regions.clone(),
            ..GcReport::default()
        };
        let mut failures = Vec::new();
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
            let search: Vec<String> = where_
                .into_iter()
                .filter(|r| r != crate::regions::ACCELERATOR_API_REGION || regions.contains(r))
                .collect();
            info!("gc: run {run} is past due; deleting");
            match self.down(&id, &search).await {
                Ok(d) => report.deleted.extend(d.deleted),
                Err(e) => failures.push(e),
            }
        }
        match failures.into_iter().next() {
            None => Ok(report),
            Some(e) => Err(e),
        }
    }
}

fn deleted(region: &str, what: &str, id: &str, report: &mut DownReport) {
    info!("deleted {what} {id} in {region}");
    report.deleted.push(format!("{region} {what} {id}"));
}

/// Keeps going after a failed step, remembering the failure for the final verdict.
fn step(r: Result<(), Error>, failures: &mut Vec<Error>) -> bool {
    match r {
        Ok(()) => true,
        Err(e) => {
            warn!("{e}");
            failures.push(e);
            false
        }
    }
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
