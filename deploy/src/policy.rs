//! Least privilege: the operator's IAM policy for a scenario (`xbench-deploy policy`) and the
//! hosts' own policy, both derived from one table, [`CALLS`], of every AWS operation this
//! crate makes, the IAM actions each needs, and when the code makes it.
//!
//! The table is the one source of truth: a unit test checks that every operation name the
//! code passes to its error conversion appears in it, and an integration test records every
//! call the code makes in a run against the emulator (through a proxy) and checks each is
//! allowed by the printed policy. Not for calling AWS.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::plan::Plan;
use crate::state::RunId;

/// When the code makes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Every scenario (`plan --check`, `up`, `run`, `down`, `gc`).
    Always,
    /// Scenarios with VPC peering paths.
    Peering,
    /// Scenarios with Transit Gateways (their own, or an attachment to yours).
    TransitGateway,
    /// Scenarios with VPN gateways (source/destination check off).
    Vpn,
    /// Scenarios with Global Accelerator.
    Accelerator,
    /// Scenarios with placement groups.
    Placement,
    /// Scenarios joined to your virtual private gateway.
    Vgw,
    /// When `up` makes the hosts' role and instance profile (not with `--instance-profile`).
    CreateRole,
    /// When `up` uses your instance profile (`--instance-profile NAME`).
    ExistingProfile,
}

/// One AWS operation this crate calls, and the IAM actions it needs.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// The service as SigV4 names it (`ec2`, `s3`, `ssm`, `iam`, `globalaccelerator`,
    /// `servicequotas`).
    pub service: &'static str,
    /// The API operation (`CreateVpc`, `ListObjectsV2`).
    pub operation: &'static str,
    /// The IAM actions it needs (a call that tags at creation needs the tagging action too).
    pub actions: &'static [&'static str],
    /// When it is made.
    pub need: Need,
}

const fn c(
    service: &'static str,
    operation: &'static str,
    actions: &'static [&'static str],
    need: Need,
) -> Call {
    Call {
        service,
        operation,
        actions,
        need,
    }
}

use Need::*;

/// Every AWS operation `xbench-deploy` makes.
pub const CALLS: &[Call] = &[
    // EC2: finding, checking, building and deleting a run's network and hosts.
    c("ec2", "DescribeRegions", &["ec2:DescribeRegions"], Always),
    c(
        "ec2",
        "DescribeInstanceTypes",
        &["ec2:DescribeInstanceTypes"],
        Always,
    ),
    c(
        "ec2",
        "DescribeInstanceTypeOfferings",
        &["ec2:DescribeInstanceTypeOfferings"],
        Always,
    ),
    c("ec2", "DescribeVpcs", &["ec2:DescribeVpcs"], Always),
    c("ec2", "DescribeSubnets", &["ec2:DescribeSubnets"], Always),
    c(
        "ec2",
        "DescribeInstances",
        &["ec2:DescribeInstances"],
        Always,
    ),
    c(
        "ec2",
        "DescribeRouteTables",
        &["ec2:DescribeRouteTables"],
        Always,
    ),
    c(
        "ec2",
        "DescribeInternetGateways",
        &["ec2:DescribeInternetGateways"],
        Always,
    ),
    c(
        "ec2",
        "DescribeSecurityGroups",
        &["ec2:DescribeSecurityGroups"],
        Always,
    ),
    c(
        "ec2",
        "DescribeVpcPeeringConnections",
        &["ec2:DescribeVpcPeeringConnections"],
        Always,
    ),
    c(
        "ec2",
        "DescribeVpnGateways",
        &["ec2:DescribeVpnGateways"],
        Always,
    ),
    // Listed by discovery in every region; a refusal is tolerated for runs without them.
    c(
        "ec2",
        "DescribeTransitGateways",
        &["ec2:DescribeTransitGateways"],
        Always,
    ),
    c(
        "ec2",
        "DescribeTransitGatewayVpcAttachments",
        &["ec2:DescribeTransitGatewayVpcAttachments"],
        Always,
    ),
    c(
        "ec2",
        "DescribeTransitGatewayPeeringAttachments",
        &["ec2:DescribeTransitGatewayPeeringAttachments"],
        Always,
    ),
    c(
        "ec2",
        "DescribeTransitGatewayAttachments",
        &["ec2:DescribeTransitGatewayAttachments"],
        TransitGateway,
    ),
    c(
        "ec2",
        "CreateVpc",
        &["ec2:CreateVpc", "ec2:CreateTags"],
        Always,
    ),
    c(
        "ec2",
        "CreateSubnet",
        &["ec2:CreateSubnet", "ec2:CreateTags"],
        Always,
    ),
    c(
        "ec2",
        "CreateInternetGateway",
        &["ec2:CreateInternetGateway", "ec2:CreateTags"],
        Always,
    ),
    c(
        "ec2",
        "AttachInternetGateway",
        &["ec2:AttachInternetGateway"],
        Always,
    ),
    c(
        "ec2",
        "CreateRouteTable",
        &["ec2:CreateRouteTable", "ec2:CreateTags"],
        Always,
    ),
    c(
        "ec2",
        "AssociateRouteTable",
        &["ec2:AssociateRouteTable"],
        Always,
    ),
    c("ec2", "CreateRoute", &["ec2:CreateRoute"], Always),
    c("ec2", "ReplaceRoute", &["ec2:ReplaceRoute"], Always),
    c(
        "ec2",
        "CreateSecurityGroup",
        &["ec2:CreateSecurityGroup", "ec2:CreateTags"],
        Always,
    ),
    c(
        "ec2",
        "AuthorizeSecurityGroupIngress",
        &["ec2:AuthorizeSecurityGroupIngress"],
        Always,
    ),
    c("ec2", "CreateTags", &["ec2:CreateTags"], Always),
    c(
        "ec2",
        "RunInstances",
        &["ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"],
        Always,
    ),
    c(
        "ec2",
        "TerminateInstances",
        &["ec2:TerminateInstances"],
        Always,
    ),
    c("ec2", "DeleteSubnet", &["ec2:DeleteSubnet"], Always),
    c(
        "ec2",
        "DisassociateRouteTable",
        &["ec2:DisassociateRouteTable"],
        Always,
    ),
    c("ec2", "DeleteRouteTable", &["ec2:DeleteRouteTable"], Always),
    c(
        "ec2",
        "DetachInternetGateway",
        &["ec2:DetachInternetGateway"],
        Always,
    ),
    c(
        "ec2",
        "DeleteInternetGateway",
        &["ec2:DeleteInternetGateway"],
        Always,
    ),
    c(
        "ec2",
        "DeleteSecurityGroup",
        &["ec2:DeleteSecurityGroup"],
        Always,
    ),
    c("ec2", "DeleteVpc", &["ec2:DeleteVpc"], Always),
    c(
        "ec2",
        "ModifyInstanceAttribute",
        &["ec2:ModifyInstanceAttribute"],
        Vpn,
    ),
    c(
        "ec2",
        "CreateVpcPeeringConnection",
        &["ec2:CreateVpcPeeringConnection", "ec2:CreateTags"],
        Peering,
    ),
    c(
        "ec2",
        "AcceptVpcPeeringConnection",
        &["ec2:AcceptVpcPeeringConnection"],
        Peering,
    ),
    c(
        "ec2",
        "DeleteVpcPeeringConnection",
        &["ec2:DeleteVpcPeeringConnection"],
        Always,
    ),
    c(
        "ec2",
        "CreateTransitGateway",
        &["ec2:CreateTransitGateway", "ec2:CreateTags"],
        TransitGateway,
    ),
    c(
        "ec2",
        "CreateTransitGatewayVpcAttachment",
        &["ec2:CreateTransitGatewayVpcAttachment", "ec2:CreateTags"],
        TransitGateway,
    ),
    c(
        "ec2",
        "CreateTransitGatewayPeeringAttachment",
        &[
            "ec2:CreateTransitGatewayPeeringAttachment",
            "ec2:CreateTags",
        ],
        TransitGateway,
    ),
    c(
        "ec2",
        "AcceptTransitGatewayPeeringAttachment",
        &["ec2:AcceptTransitGatewayPeeringAttachment"],
        TransitGateway,
    ),
    c(
        "ec2",
        "AssociateTransitGatewayRouteTable",
        &["ec2:AssociateTransitGatewayRouteTable"],
        TransitGateway,
    ),
    c(
        "ec2",
        "CreateTransitGatewayRoute",
        &["ec2:CreateTransitGatewayRoute"],
        TransitGateway,
    ),
    c(
        "ec2",
        "DeleteTransitGatewayVpcAttachment",
        &["ec2:DeleteTransitGatewayVpcAttachment"],
        TransitGateway,
    ),
    c(
        "ec2",
        "DeleteTransitGatewayPeeringAttachment",
        &["ec2:DeleteTransitGatewayPeeringAttachment"],
        TransitGateway,
    ),
    c(
        "ec2",
        "DeleteTransitGateway",
        &["ec2:DeleteTransitGateway"],
        TransitGateway,
    ),
    c("ec2", "AttachVpnGateway", &["ec2:AttachVpnGateway"], Vgw),
    c("ec2", "DetachVpnGateway", &["ec2:DetachVpnGateway"], Vgw),
    c(
        "ec2",
        "CreatePlacementGroup",
        &["ec2:CreatePlacementGroup", "ec2:CreateTags"],
        Placement,
    ),
    c(
        "ec2",
        "DescribePlacementGroups",
        &["ec2:DescribePlacementGroups"],
        Placement,
    ),
    c(
        "ec2",
        "DeletePlacementGroup",
        &["ec2:DeletePlacementGroup"],
        Placement,
    ),
    // SSM: public AMI parameters, the run's key, Run Command.
    c("ssm", "GetParameter", &["ssm:GetParameter"], Always),
    c(
        "ssm",
        "PutParameter",
        &["ssm:PutParameter", "ssm:AddTagsToResource"],
        Always,
    ),
    c("ssm", "DeleteParameter", &["ssm:DeleteParameter"], Always),
    c(
        "ssm",
        "DescribeParameters",
        &["ssm:DescribeParameters"],
        Always,
    ),
    c(
        "ssm",
        "ListTagsForResource",
        &["ssm:ListTagsForResource"],
        Always,
    ),
    c(
        "ssm",
        "DescribeInstanceInformation",
        &["ssm:DescribeInstanceInformation"],
        Always,
    ),
    c("ssm", "SendCommand", &["ssm:SendCommand"], Always),
    c(
        "ssm",
        "GetCommandInvocation",
        &["ssm:GetCommandInvocation"],
        Always,
    ),
    c("ssm", "CancelCommand", &["ssm:CancelCommand"], Always),
    // S3: the run's bucket (the binary, and reports on their way back).
    c("s3", "ListBuckets", &["s3:ListAllMyBuckets"], Always),
    c("s3", "GetBucketLocation", &["s3:GetBucketLocation"], Always),
    c("s3", "GetBucketTagging", &["s3:GetBucketTagging"], Always),
    c("s3", "CreateBucket", &["s3:CreateBucket"], Always),
    c("s3", "PutBucketTagging", &["s3:PutBucketTagging"], Always),
    c(
        "s3",
        "PutPublicAccessBlock",
        &["s3:PutBucketPublicAccessBlock"],
        Always,
    ),
    c("s3", "PutBucketPolicy", &["s3:PutBucketPolicy"], Always),
    c("s3", "PutObject", &["s3:PutObject"], Always),
    c("s3", "GetObject", &["s3:GetObject"], Always),
    c("s3", "HeadObject", &["s3:GetObject"], Always),
    c("s3", "DeleteObject", &["s3:DeleteObject"], Always),
    c("s3", "ListObjectsV2", &["s3:ListBucket"], Always),
    c("s3", "DeleteBucket", &["s3:DeleteBucket"], Always),
    // IAM: the hosts' role and instance profile.
    c("iam", "ListRoles", &["iam:ListRoles"], Always),
    c("iam", "ListRoleTags", &["iam:ListRoleTags"], Always),
    c(
        "iam",
        "CreateRole",
        &["iam:CreateRole", "iam:TagRole"],
        CreateRole,
    ),
    c("iam", "PutRolePolicy", &["iam:PutRolePolicy"], CreateRole),
    c(
        "iam",
        "CreateInstanceProfile",
        &["iam:CreateInstanceProfile", "iam:TagInstanceProfile"],
        CreateRole,
    ),
    c(
        "iam",
        "AddRoleToInstanceProfile",
        &["iam:AddRoleToInstanceProfile"],
        CreateRole,
    ),
    c(
        "iam",
        "RemoveRoleFromInstanceProfile",
        &["iam:RemoveRoleFromInstanceProfile"],
        Always,
    ),
    c(
        "iam",
        "DeleteInstanceProfile",
        &["iam:DeleteInstanceProfile"],
        Always,
    ),
    c("iam", "DeleteRolePolicy", &["iam:DeleteRolePolicy"], Always),
    c("iam", "DetachRolePolicy", &["iam:DetachRolePolicy"], Always),
    c("iam", "DeleteRole", &["iam:DeleteRole"], Always),
    c(
        "iam",
        "GetInstanceProfile",
        &["iam:GetInstanceProfile"],
        ExistingProfile,
    ),
    // Global Accelerator (its API lives in us-west-2). `down` and `gc` list a run's
    // accelerators whatever the scenario (read-only; a refusal is tolerated for a run that made
    // none, so these two may be left out at the price of a note).
    c(
        "globalaccelerator",
        "ListAccelerators",
        &["globalaccelerator:ListAccelerators"],
        Always,
    ),
    c(
        "globalaccelerator",
        "ListTagsForResource",
        &["globalaccelerator:ListTagsForResource"],
        Always,
    ),
    c(
        "globalaccelerator",
        "CreateAccelerator",
        &[
            "globalaccelerator:CreateAccelerator",
            "globalaccelerator:TagResource",
            "iam:CreateServiceLinkedRole",
        ],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "DescribeAccelerator",
        &["globalaccelerator:DescribeAccelerator"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "UpdateAccelerator",
        &["globalaccelerator:UpdateAccelerator"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "DeleteAccelerator",
        &["globalaccelerator:DeleteAccelerator"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "ListListeners",
        &["globalaccelerator:ListListeners"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "CreateListener",
        &["globalaccelerator:CreateListener"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "DeleteListener",
        &["globalaccelerator:DeleteListener"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "ListEndpointGroups",
        &["globalaccelerator:ListEndpointGroups"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "CreateEndpointGroup",
        &["globalaccelerator:CreateEndpointGroup"],
        Accelerator,
    ),
    c(
        "globalaccelerator",
        "DeleteEndpointGroup",
        &["globalaccelerator:DeleteEndpointGroup"],
        Accelerator,
    ),
    // The vCPU quota `plan --check` and `up` compare the plan with (optional: a refusal is a
    // note).
    c(
        "servicequotas",
        "GetServiceQuota",
        &["servicequotas:GetServiceQuota"],
        Always,
    ),
];

/// The call `service`/`operation` in [`CALLS`], if the crate makes it.
pub fn call(service: &str, operation: &str) -> Option<&'static Call> {
    CALLS
        .iter()
        .find(|c| c.service == service && c.operation == operation)
}

/// What a scenario uses, which decides the calls it makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// VPC peering paths.
    pub peering: bool,
    /// Transit Gateways.
    pub transit_gateway: bool,
    /// VPN gateways.
    pub vpn: bool,
    /// Global Accelerators.
    pub accelerator: bool,
    /// Placement groups.
    pub placement: bool,
    /// Your VGW joined to a VPC.
    pub vgw: bool,
    /// `up` uses an existing instance profile instead of making a role.
    pub existing_profile: bool,
}

impl Features {
    /// What `plan` uses; `existing_profile` from `--instance-profile`.
    pub fn of(plan: &Plan, existing_profile: bool) -> Self {
        Features {
            peering: !plan.peerings.is_empty(),
            transit_gateway: plan.uses_transit_gateways(),
            vpn: plan
                .hosts
                .iter()
                .any(|h| h.role == crate::plan::HostRole::Gateway),
            accelerator: plan.needs_accelerator_api(),
            placement: !plan.placement_groups.is_empty(),
            vgw: plan
                .private_gateways
                .iter()
                .any(|g| matches!(g.gateway, crate::hybrid::PrivateGateway::Vgw(_))),
            existing_profile,
        }
    }

    fn wants(&self, need: Need) -> bool {
        match need {
            Need::Always => true,
            Need::Peering => self.peering,
            Need::TransitGateway => self.transit_gateway,
            Need::Vpn => self.vpn,
            Need::Accelerator => self.accelerator,
            Need::Placement => self.placement,
            Need::Vgw => self.vgw,
            Need::CreateRole => !self.existing_profile,
            Need::ExistingProfile => self.existing_profile,
        }
    }

    /// The IAM actions of every call these features make, sorted.
    pub fn actions(&self) -> BTreeSet<&'static str> {
        CALLS
            .iter()
            .filter(|c| self.wants(c.need))
            .flat_map(|c| c.actions.iter().copied())
            .collect()
    }
}

/// The prefix of every bucket's name ([`crate::aws::s3::bucket_prefix`] with any run).
const BUCKETS: &str = "arn:aws:s3:::xbench-xb-*";

/// The operator's policy for `features`: every action the code needs, scoped where IAM can
/// scope it — the run's buckets (`xbench-xb-*`), keys (`/xbench/*`), and roles and profiles
/// (path `/xbench/`), public AMI parameters, Run Command's shell document — and `*` where the
/// action has no resource (Describe*, List*) or EC2's resource-level rules would need every
/// resource type spelled out.
pub fn operator_policy(features: &Features) -> Value {
    let actions = features.actions();
    let mut statements = vec![json!({
        "Sid": "Ec2RunNetworkAndHosts",
        "Effect": "Allow",
        "Action": starting_with(&actions, "ec2:"),
        "Resource": "*"
    })];
    statements.extend(ssm_statements(&actions));
    statements.extend(s3_statements(&actions));
    statements.extend(iam_statements(&actions, features.existing_profile));
    statements.push(json!({
        "Sid": "GlobalAccelerator",
        "Effect": "Allow",
        "Action": starting_with(&actions, "globalaccelerator:"),
        "Resource": "*"
    }));
    if features.accelerator {
        statements.push(json!({
            "Sid": "GlobalAcceleratorServiceLinkedRole",
            "Effect": "Allow",
            "Action": ["iam:CreateServiceLinkedRole"],
            "Resource": "*",
            "Condition": { "StringEquals": { "iam:AWSServiceName": "globalaccelerator.amazonaws.com" } }
        }));
    }
    statements.push(json!({
        "Sid": "VcpuQuotaOptional",
        "Effect": "Allow",
        "Action": ["servicequotas:GetServiceQuota"],
        "Resource": "*"
    }));
    json!({ "Version": "2012-10-17", "Statement": statements })
}

/// The `actions` of one service (`prefix`: `ec2:`), in order.
fn starting_with<'a>(actions: &BTreeSet<&'a str>, prefix: &str) -> Vec<&'a str> {
    actions
        .iter()
        .copied()
        .filter(|a| a.starts_with(prefix))
        .collect()
}

/// The actions of `list` that are among `actions`, in `list`'s order: a statement scoped to
/// one resource lists only what the features need.
fn present(actions: &BTreeSet<&'static str>, list: &[&'static str]) -> Vec<&'static str> {
    list.iter()
        .copied()
        .filter(|a| actions.contains(a))
        .collect()
}

/// [`operator_policy`]'s SSM statements: the run's keys, AWS's public AMI parameters, Run
/// Command on the hosts, and the reads IAM cannot scope. One function per service, so each
/// service's scoping reads on its own.
fn ssm_statements(actions: &BTreeSet<&'static str>) -> Vec<Value> {
    let ssm_key = present(
        actions,
        &[
            "ssm:PutParameter",
            "ssm:AddTagsToResource",
            "ssm:DeleteParameter",
            "ssm:GetParameter",
            "ssm:ListTagsForResource",
        ],
    );
    vec![
        json!({
            "Sid": "SsmTheRunsKeys",
            "Effect": "Allow",
            "Action": ssm_key,
            "Resource": "arn:aws:ssm:*:*:parameter/xbench/*"
        }),
        json!({
            "Sid": "SsmPublicAmiParameters",
            "Effect": "Allow",
            "Action": ["ssm:GetParameter"],
            "Resource": "arn:aws:ssm:*::parameter/aws/service/*"
        }),
        json!({
            "Sid": "SsmRunCommandOnTheHosts",
            "Effect": "Allow",
            "Action": ["ssm:SendCommand"],
            "Resource": [
                "arn:aws:ssm:*::document/AWS-RunShellScript",
                "arn:aws:ec2:*:*:instance/*"
            ]
        }),
        json!({
            "Sid": "SsmReadsWithoutResources",
            "Effect": "Allow",
            "Action": present(actions, &[
                "ssm:DescribeParameters",
                "ssm:DescribeInstanceInformation",
                "ssm:GetCommandInvocation",
                "ssm:CancelCommand",
            ]),
            "Resource": "*"
        }),
    ]
}

/// [`operator_policy`]'s S3 statements: the run's buckets, and listing buckets to find them.
/// Apart, as [`ssm_statements`] is.
fn s3_statements(actions: &BTreeSet<&'static str>) -> Vec<Value> {
    vec![
        json!({
            "Sid": "S3TheRunsBuckets",
            "Effect": "Allow",
            "Action": starting_with(actions, "s3:").into_iter().filter(|a| *a != "s3:ListAllMyBuckets").collect::<Vec<_>>(),
            "Resource": [BUCKETS, format!("{BUCKETS}/*")]
        }),
        json!({
            "Sid": "S3FindTheRunsBuckets",
            "Effect": "Allow",
            "Action": ["s3:ListAllMyBuckets"],
            "Resource": "*"
        }),
    ]
}

/// [`operator_policy`]'s IAM statements: the hosts' role and profile (path `/xbench/`),
/// listing roles, and passing the hosts' role (any role with `existing_profile`) to EC2 only.
/// Apart, as [`ssm_statements`] is.
fn iam_statements(actions: &BTreeSet<&'static str>, existing_profile: bool) -> Vec<Value> {
    let iam_scoped: Vec<&str> = starting_with(actions, "iam:")
        .into_iter()
        .filter(|a| {
            !matches!(
                *a,
                "iam:PassRole" | "iam:ListRoles" | "iam:CreateServiceLinkedRole"
            )
        })
        .collect();
    vec![
        json!({
            "Sid": "IamTheHostsRoleAndProfile",
            "Effect": "Allow",
            "Action": iam_scoped,
            "Resource": [
                "arn:aws:iam::*:role/xbench/*",
                "arn:aws:iam::*:instance-profile/xbench/*"
            ]
        }),
        json!({
            "Sid": "IamFindTheRoles",
            "Effect": "Allow",
            "Action": ["iam:ListRoles"],
            "Resource": "*"
        }),
        json!({
            "Sid": "IamPassTheHostsRoleToEc2",
            "Effect": "Allow",
            "Action": ["iam:PassRole"],
            "Resource": if existing_profile { "arn:aws:iam::*:role/*" } else { "arn:aws:iam::*:role/xbench/*" },
            "Condition": { "StringEquals": { "iam:PassedToService": "ec2.amazonaws.com" } }
        }),
    ]
}

/// The SSM agent's own needs: AWS's managed `AmazonSSMManagedInstanceCore` without its
/// `ssm:GetParameter`/`GetParameters` on every parameter of the account.
pub const SSM_AGENT_ACTIONS: &[&str] = &[
    "ssm:DescribeAssociation",
    "ssm:GetDeployablePatchSnapshotForInstance",
    "ssm:GetDocument",
    "ssm:DescribeDocument",
    "ssm:GetManifest",
    "ssm:ListAssociations",
    "ssm:ListInstanceAssociations",
    "ssm:PutInventory",
    "ssm:PutComplianceItems",
    "ssm:PutConfigurePackageResult",
    "ssm:UpdateAssociationStatus",
    "ssm:UpdateInstanceAssociationStatus",
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
    "ec2messages:AcknowledgeMessage",
    "ec2messages:DeleteMessage",
    "ec2messages:FailMessage",
    "ec2messages:GetEndpoint",
    "ec2messages:GetMessages",
    "ec2messages:SendReply",
];

/// The hosts' policy for run `run` (`None`: any run, for a profile of yours shared by runs):
/// the SSM agent's needs, its own key (`parameter/xbench/<run>/*`), and read access to its
/// own binary object — nothing of other runs or of the account.
pub fn host_policy(run: Option<&RunId>) -> Value {
    let run = run.map_or_else(|| "xb-*".to_owned(), |r| r.to_string());
    json!({
        "Version": "2012-10-17",
        "Statement": [
            { "Sid": "SsmAgent", "Effect": "Allow", "Action": SSM_AGENT_ACTIONS, "Resource": "*" },
            {
                "Sid": "TheRunsKey",
                "Effect": "Allow",
                "Action": ["ssm:GetParameter"],
                "Resource": format!("arn:aws:ssm:*:*:parameter/xbench/{run}/*")
            },
            {
                "Sid": "TheRunsBinary",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": format!("arn:aws:s3:::xbench-{run}-*/{}", crate::aws::s3::BINARY_KEY)
            }
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation name the code gives its error conversion (`aws_error("Op"`,
    /// `ga_err("Op"`, `describe!(r, op, "Op"`, `tag(r, "Op"`) is in [`CALLS`]: a call added
    /// without its permission fails here.
    #[test]
    fn every_operation_the_code_names_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![root.clone()];
        let mut sources = Vec::new();
        while let Some(p) = files.pop() {
            for e in std::fs::read_dir(&p).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    files.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    sources.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
        let mut seen = BTreeSet::new();
        for (path, text) in &sources {
            if path.ends_with("policy.rs") {
                continue;
            }
            for marker in ["aws_error(", "ga_err(", "describe!(", "self.tag("] {
                for (at, _) in text.match_indices(marker) {
                    let rest = &text[at + marker.len()..];
                    // The first string literal of the call, within its first few lines.
                    let window: String = rest.chars().take(200).collect();
                    let Some(open) = window.find('"') else {
                        continue;
                    };
                    let before = &window[..open];
                    if before.contains(')') || before.contains(';') {
                        continue; // a variable, not a literal
                    }
                    let lit = &window[open + 1..];
                    let Some(close) = lit.find('"') else { continue };
                    let op = lit[..close].split(' ').next().unwrap_or_default();
                    if op.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                        seen.insert((path.display().to_string(), op.to_owned()));
                    }
                }
            }
        }
        assert!(seen.len() > 60, "found only {} operations", seen.len());
        for (path, op) in &seen {
            assert!(
                CALLS.iter().any(|c| c.operation == op),
                "{path} calls {op}, which policy::CALLS does not list"
            );
        }
    }

    #[test]
    fn a_peering_scenario_asks_for_no_transit_gateway_or_accelerator_changes() {
        let f = Features {
            peering: true,
            ..Features::default()
        };
        let a = f.actions();
        assert!(a.contains("ec2:CreateVpcPeeringConnection"));
        assert!(a.contains("iam:CreateRole"));
        assert!(!a.contains("ec2:CreateTransitGateway"));
        assert!(!a.contains("globalaccelerator:CreateAccelerator"));
        assert!(a.contains("globalaccelerator:ListAccelerators"));
        let text = operator_policy(&f).to_string();
        assert!(!text.contains("iam:CreateServiceLinkedRole"), "{text}");
        let mine = Features {
            existing_profile: true,
            ..f
        };
        assert!(!mine.actions().contains("iam:CreateRole"));
        assert!(mine.actions().contains("iam:GetInstanceProfile"));
    }

    #[test]
    fn the_hosts_read_their_own_runs_key_and_binary_only() {
        let run: RunId = "xb-20250601-3fa9c0".parse().unwrap();
        let p = host_policy(Some(&run)).to_string();
        assert!(
            p.contains("arn:aws:ssm:*:*:parameter/xbench/xb-20250601-3fa9c0/*"),
            "{p}"
        );
        assert!(
            p.contains("arn:aws:s3:::xbench-xb-20250601-3fa9c0-*/"),
            "{p}"
        );
        assert!(!p.contains("ssm:GetParameters"), "{p}");
        assert!(!p.contains("\"Resource\":\"arn:aws:ssm:*:*:parameter/*\""));
    }
}
