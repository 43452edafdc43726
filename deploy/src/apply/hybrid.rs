//! Hybrid `existing` paths: checking your gateways before anything is created, then joining
//! the run's VPCs to them — a VGW attached (and waited for), or a Transit Gateway VPC
//! attachment of the run's own — and saying what your side needs. Routes and security-group
//! rules go with the others (`network.rs`); `down` detaches and deletes (`teardown.rs`).

use tracing::info;

use super::Build;
use crate::aws::gateways::{self, GatewayFacts};
use crate::deployer::Deployer;
use crate::error::{Error, not_found_is_none};
use crate::hybrid::PrivateGateway;
use crate::plan::{Plan, PrivateGatewayPlan};
use crate::state::{RunId, TAG_RUN};

impl Deployer {
    /// Each gateway a hybrid path names exists and is available in its VPC's region, and a VGW
    /// is attached to no VPC but one of run `run` (a resumed run's). Creates nothing.
    pub async fn check_private_gateways(
        &self,
        plan: &Plan,
        run: Option<&RunId>,
    ) -> Result<(), Error> {
        for g in &plan.private_gateways {
            let r = self.aws.region(&g.region);
            let refuse = |problem: String| Error::YourGateway {
                gateway: g.gateway.id().to_owned(),
                vpc: g.vpc.clone(),
                region: g.region.clone(),
                problem,
            };
            let Some(GatewayFacts { state, attachments }) =
                gateways::describe(&r, &g.gateway).await?
            else {
                return Err(refuse(format!(
                    "no such {} in {}; a VPC joins only gateways of its own region (check the id and the [[vpc]]'s region)",
                    g.gateway.what(),
                    g.region
                )));
            };
            if state != "available" {
                return Err(refuse(format!(
                    "the {} is {state}, not available",
                    g.gateway.what()
                )));
            }
            for (vpc, _) in attachments {
                let owner = vpc_run(&r, &vpc).await?;
                if run.is_none() || owner.as_deref() != run.map(RunId::as_str) {
                    let whose = match owner {
                        Some(o) => format!("of xbench-deploy run {o}"),
                        None => "not made by xbench-deploy".to_owned(),
                    };
                    return Err(refuse(format!(
                        "it is attached to {vpc} ({whose}); AWS attaches a virtual private gateway to one VPC at a time: detach it there first, or give a transit gateway"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The run a VPC belongs to, by its tag.
async fn vpc_run(r: &crate::aws::RegionClients, vpc: &str) -> Result<Option<String>, Error> {
    let out = r.ec2.describe_vpcs().vpc_ids(vpc).send().await;
    match out {
        Ok(o) => Ok(o
            .vpcs()
            .iter()
            .flat_map(|v| v.tags())
            .find(|t| t.key() == Some(TAG_RUN))
            .and_then(|t| t.value().map(str::to_owned))),
        Err(e) => not_found_is_none(crate::aws::aws_error("DescribeVpcs", &r.region, e)),
    }
}

impl Build<'_> {
    /// Joins each VPC to the gateways its hybrid paths name; notes what your side must do.
    pub(super) async fn private_gateways(&self) -> Result<(), Error> {
        for g in &self.plan.private_gateways {
            let note = match &g.gateway {
                PrivateGateway::Vgw(id) => self.attach_vgw(g, id).await?,
                PrivateGateway::Tgw(id) => {
                    let r = self.d.aws.region(&g.region);
                    let attachment = self.ensure_tgw_attachment(&r, id, &g.vpc).await?;
                    format!(
                        "{} -> {id} is attachment {attachment}. Your side: unless {id}'s route table propagates VPC attachments, route {} to it: aws ec2 create-transit-gateway-route --region {} --transit-gateway-route-table-id <your table> --destination-cidr-block {} --transit-gateway-attachment-id {attachment}",
                        g.vpc, g.vpc_cidr, g.region, g.vpc_cidr
                    )
                }
            };
            self.ids().notes.push(note);
        }
        Ok(())
    }

    /// Attaches VGW `id` to the VPC unless it already is, and waits until it is attached.
    async fn attach_vgw(&self, g: &PrivateGatewayPlan, id: &str) -> Result<String, Error> {
        let r = self.d.aws.region(&g.region);
        let vpc = self.vpc_ids(&g.vpc)?.vpc;
        let now = gateways::vgw_attachment_state(&r, id, &vpc).await?;
        if !matches!(now.as_deref(), Some("attached" | "attaching")) {
            gateways::attach_vgw(&r, id, &vpc).await?;
            self.record(&g.region, "vgw attachment", &format!("{id}/{vpc}"))?;
        }
        self.d
            .timing
            .wait(&format!("{id} to attach to {vpc}"), &g.region, || async {
                let s = gateways::vgw_attachment_state(&r, id, &vpc).await?;
                Ok((s.as_deref() == Some("attached")).then_some(()))
            })
            .await?;
        info!("{id} attached to {vpc} in {}", g.region);
        Ok(format!(
            "{id} is attached to {} ({}); it advertises {} over BGP (Direct Connect, dynamic VPN); a static Site-to-Site VPN needs that block added to its routes (aws ec2 create-vpn-connection-route --vpn-connection-id <yours> --destination-cidr-block {}). `down` detaches it; the gateway stays yours.",
            g.vpc, vpc, g.vpc_cidr, g.vpc_cidr
        ))
    }
}
