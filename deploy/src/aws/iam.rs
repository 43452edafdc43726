//! The hosts' instance profile: an IAM role that EC2 may assume, with one inline policy
//! ([`crate::policy::host_policy`]): the SSM agent's own needs (AWS's managed
//! `AmazonSSMManagedInstanceCore` without its `ssm:GetParameter` on every parameter of the
//! account), `GetParameter` on the run's own key (`parameter/xbench/<run>/*`), and
//! `GetObject` on the run's own binary object. Nothing else: reports go back through
//! presigned PUTs made at `run` time. With `--instance-profile NAME` an existing profile is
//! used instead, and nothing here is called but [`check_existing`].
//!
//! Role and profile are both named `xbench-<run-id>` under the path `/xbench/`, tagged like
//! every other resource; `down` removes them by name, `gc` finds them by path and tags. IAM is
//! global. Not for anything else IAM does.

use std::collections::BTreeMap;

use aws_sdk_iam::types::Tag;

use crate::aws::ec2::Selector;
use crate::aws::{Aws, aws_error};
use crate::error::Error;
use crate::state::{RunId, RunTags};

/// The managed policy earlier versions attached (detached by `down` if found, so their runs
/// still delete).
pub const SSM_CORE_POLICY: &str = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore";

/// The name of the role's inline policy.
pub const HOST_POLICY_NAME: &str = "xbench-host";

/// The IAM path of every role and profile this tool makes.
pub const IAM_PATH: &str = "/xbench/";

const REGION: &str = "global (IAM)";

/// Lets EC2 instances assume the role, and nothing else.
const TRUST_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

/// The name of run `run`'s role and instance profile.
pub fn profile_name(run: &RunId) -> String {
    format!("xbench-{run}")
}

/// A role found by `gc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundRole {
    /// Role (and profile) name.
    pub name: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

fn tags(t: &RunTags) -> Result<Vec<Tag>, Error> {
    t.for_resource("instance-profile")
        .into_iter()
        .map(|(k, v)| {
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| Error::Internal(format!("IAM tag: {e}")))
        })
        .collect()
}

fn exists(e: &Error) -> bool {
    e.aws_code() == Some("EntityAlreadyExists")
}

fn missing(e: &Error) -> bool {
    e.aws_code() == Some("NoSuchEntity")
}

/// Makes (or completes, on a resumed run) the role and instance profile; returns the
/// profile's name.
pub async fn ensure(aws: &Aws, t: &RunTags) -> Result<String, Error> {
    let iam = aws.iam();
    let name = profile_name(&t.run);
    let created = iam
        .create_role()
        .role_name(&name)
        .path(IAM_PATH)
        .description(format!(
            "xbench-deploy run {}: SSM agent, the run's key and binary only",
            t.run
        ))
        .assume_role_policy_document(TRUST_POLICY)
        .set_tags(Some(tags(t)?))
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("CreateRole", REGION, e));
    tolerate(created, exists)?;
    iam.put_role_policy()
        .role_name(&name)
        .policy_name(HOST_POLICY_NAME)
        .policy_document(crate::policy::host_policy(Some(&t.run)).to_string())
        .send()
        .await
        .map_err(|e| aws_error("PutRolePolicy", REGION, e))?;
    let created = iam
        .create_instance_profile()
        .instance_profile_name(&name)
        .path(IAM_PATH)
        .set_tags(Some(tags(t)?))
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("CreateInstanceProfile", REGION, e));
    tolerate(created, exists)?;
    let added = iam
        .add_role_to_instance_profile()
        .instance_profile_name(&name)
        .role_name(&name)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("AddRoleToInstanceProfile", REGION, e));
    // A profile holds one role; on a resumed run it is ours already.
    tolerate(added, |e| {
        e.aws_code() == Some("LimitExceeded") || exists(e)
    })?;
    Ok(name)
}

/// Removes run `run`'s profile and role; returns what was deleted. Missing pieces are done.
pub async fn delete(aws: &Aws, run: &RunId) -> Result<Vec<String>, Error> {
    let iam = aws.iam();
    let name = profile_name(run);
    let mut deleted = Vec::new();
    let r = iam
        .remove_role_from_instance_profile()
        .instance_profile_name(&name)
        .role_name(&name)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("RemoveRoleFromInstanceProfile", REGION, e));
    tolerate(r, missing)?;
    let r = iam
        .delete_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("DeleteInstanceProfile", REGION, e));
    if tolerate(r, missing)? {
        deleted.push(format!("iam instance profile {name}"));
    }
    let r = iam
        .delete_role_policy()
        .role_name(&name)
        .policy_name(HOST_POLICY_NAME)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("DeleteRolePolicy", REGION, e));
    tolerate(r, missing)?;
    let r = iam
        .detach_role_policy()
        .role_name(&name)
        .policy_arn(SSM_CORE_POLICY)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("DetachRolePolicy", REGION, e));
    tolerate(r, missing)?;
    let r = iam
        .delete_role()
        .role_name(&name)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("DeleteRole", REGION, e));
    if tolerate(r, missing)? {
        deleted.push(format!("iam role {name}"));
    }
    Ok(deleted)
}

/// The roles under [`IAM_PATH`] that `sel` selects, with their tags.
pub async fn find(aws: &Aws, sel: &Selector) -> Result<Vec<FoundRole>, Error> {
    let iam = aws.iam();
    let roles: Vec<_> = iam
        .list_roles()
        .path_prefix(IAM_PATH)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| aws_error("ListRoles", REGION, e))?;
    let mut out = Vec::new();
    for role in roles {
        let name = role.role_name().to_owned();
        if role.path() != IAM_PATH {
            continue;
        }
        let listed = iam.list_role_tags().role_name(&name).send().await;
        let tags: BTreeMap<String, String> = match listed {
            Ok(t) => t
                .tags()
                .iter()
                .map(|t| (t.key().to_owned(), t.value().to_owned()))
                .collect(),
            Err(e) => {
                let e = aws_error("ListRoleTags", REGION, e);
                if missing(&e) {
                    continue;
                }
                return Err(e);
            }
        };
        if sel.selects(&tags) {
            out.push(FoundRole { name, tags });
        }
    }
    Ok(out)
}

/// Checks that your instance profile `name` (`--instance-profile`) exists and holds a role.
/// Its permissions cannot be read back without more of yours: the hosts need what
/// [`crate::policy::host_policy`] grants (`xbench-deploy policy --hosts` prints it).
pub async fn check_existing(aws: &Aws, name: &str) -> Result<(), Error> {
    let out = aws
        .iam()
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
        .map_err(|e| aws_error("GetInstanceProfile", REGION, e))?;
    let has_role = out
        .instance_profile()
        .is_some_and(|p| !p.roles().is_empty());
    if has_role {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "instance profile {name} holds no role: add one with the hosts' policy (xbench-deploy policy --hosts)"
        )))
    }
}

/// `Ok(true)` done, `Ok(false)` the tolerated refusal, else the error.
fn tolerate(r: Result<(), Error>, ok: impl Fn(&Error) -> bool) -> Result<bool, Error> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if ok(&e) => Ok(false),
        Err(e) => Err(e),
    }
}
