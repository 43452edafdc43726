//! The account's vCPU quota for the instances a plan launches (Service Quotas), so `plan
//! --check` and `up` refuse a plan — a large fleet, typically — that AWS would refuse halfway
//! through `up` with `VcpuLimitExceeded`.
//!
//! Only the quota every common type counts against is read: "Running On-Demand Standard (A,
//! C, D, H, I, M, R, T, Z) instances" (`ec2`/`L-1216C47A`), in vCPUs, per region. Types of
//! other families (G, P, X, Inf, Trn, DL, Mac, HPC, ...) have quotas of their own and are left out
//! of the sum, and said to be. The quota covers instances already running in the account too:
//! the plan fitting is necessary, not sufficient. A quota that cannot be read (no
//! `servicequotas:GetServiceQuota` permission, an emulator without it) is a note, not an
//! error. Not for other quotas (VPCs, Elastic IPs, Transit Gateways).

use crate::aws::RegionClients;

/// Service Quotas' code of the quota.
pub const VCPU_QUOTA_CODE: &str = "L-1216C47A";

/// Its name, as the console and error messages show it.
pub const VCPU_QUOTA_NAME: &str =
    "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances";

/// Whether `instance_type` counts against [`VCPU_QUOTA_CODE`]: its family starts with one of
/// the quota's letters and is not one of the families with a quota of their own that share a
/// letter (Inf, DL, Mac, Trn, HPC).
pub fn is_standard(instance_type: &str) -> bool {
    let family: String = instance_type
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    let Some(first) = family.chars().next() else {
        return false;
    };
    "acdhimrtz".contains(first) && !["inf", "dl", "mac", "trn", "hpc"].contains(&family.as_str())
}

/// The quota in `r`'s region, vCPUs; `Err` with why it could not be read.
pub async fn vcpu_quota(r: &RegionClients) -> Result<f64, String> {
    let out = r
        .quotas
        .get_service_quota()
        .service_code("ec2")
        .quota_code(VCPU_QUOTA_CODE)
        .send()
        .await
        .map_err(|e| {
            use aws_sdk_servicequotas::error::ProvideErrorMetadata as _;
            match (e.code(), e.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_owned(),
                _ => aws_sdk_servicequotas::error::DisplayErrorContext(&e).to_string(),
            }
        })?;
    out.quota()
        .and_then(|q| q.value())
        .ok_or_else(|| "GetServiceQuota returned no value".to_owned())
}

/// One region's vCPUs against its quota.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaCheck {
    /// Region.
    pub region: String,
    /// vCPUs of the plan's standard-family instances there.
    pub needed: u32,
    /// The quota, or why it could not be read.
    pub quota: Result<f64, String>,
    /// Instance types left out of `needed` (other quotas).
    pub other_families: Vec<String>,
}

impl QuotaCheck {
    /// Whether the plan alone needs more than the quota.
    pub fn exceeded(&self) -> bool {
        self.quota
            .as_ref()
            .is_ok_and(|q| f64::from(self.needed) > *q)
    }

    /// What `plan --check` prints.
    pub fn line(&self) -> String {
        let others = if self.other_families.is_empty() {
            String::new()
        } else {
            format!(
                " ({} counted against quotas of their own, not here)",
                self.other_families.join(", ")
            )
        };
        match &self.quota {
            Ok(q) => format!(
                "{}: {} vCPUs of the quota \"{VCPU_QUOTA_NAME}\" ({VCPU_QUOTA_CODE}): {q:.0}, instances already running count too{others}",
                self.region, self.needed
            ),
            Err(why) => format!(
                "{}: {} vCPUs; quota not readable: {why}{others}",
                self.region, self.needed
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_families_are_the_quotas_letters() {
        for t in [
            "m5.large",
            "c6gn.16xlarge",
            "t3.micro",
            "r7i.xlarge",
            "i4i.large",
            "z1d.large",
            "a1.large",
            "d3.xlarge",
        ] {
            assert!(is_standard(t), "{t}");
        }
        for t in [
            "g5.xlarge",
            "p4d.24xlarge",
            "inf2.xlarge",
            "hpc7g.4xlarge",
            "dl1.24xlarge",
            "mac2.metal",
            "x2idn.large",
            "trn1.2xlarge",
            "f1.2xlarge",
            "",
        ] {
            assert!(!is_standard(t), "{t}");
        }
    }

    #[test]
    fn a_plan_over_the_quota_is_exceeded_and_an_unreadable_quota_is_not() {
        let mut c = QuotaCheck {
            region: "us-east-1".into(),
            needed: 34,
            quota: Ok(32.0),
            other_families: vec![],
        };
        assert!(c.exceeded());
        c.needed = 32;
        assert!(!c.exceeded());
        c.quota = Err("AccessDeniedException: no".into());
        assert!(!c.exceeded());
        assert!(
            c.line()
                .contains("quota not readable: AccessDeniedException"),
            "{}",
            c.line()
        );
    }
}
