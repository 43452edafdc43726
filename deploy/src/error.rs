//! The library's error type: every way `plan`, `up`, `down` and `gc` can fail, in words a user
//! can act on.
//!
//! An AWS failure always names the operation, the region and AWS's own code and message. Not
//! for exit codes: the binary maps these to exit statuses in one place.

use crate::binary::BinaryError;
use crate::plan::PlanError;
use crate::scenario::ScenarioError;
use crate::suite::SuiteError;

/// Where the SDK looks for credentials, in order; shown when it finds none.
pub const CREDENTIAL_SOURCES: &str = "the AWS SDK looks for credentials, in order, in: \
the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, with AWS_SESSION_TOKEN for temporary ones); \
the shared files ~/.aws/credentials and ~/.aws/config (profile from AWS_PROFILE, else 'default'; \
SSO and credential_process profiles work too); a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN); \
the ECS container endpoint; and the EC2 instance metadata service. \
Configure one of these, e.g. `aws configure` or `aws sso login --profile NAME` with AWS_PROFILE=NAME";

/// A failure of a library operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The scenario file was refused.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The scenario cannot be laid out.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// No credentials were found.
    #[error("no AWS credentials: {detail}\n{CREDENTIAL_SOURCES}")]
    MissingCredentials {
        /// What the SDK said.
        detail: String,
    },
    /// An AWS call failed.
    #[error("{operation} in {region} failed: {}{message}", code.as_ref().map(|c| format!("{c}: ")).unwrap_or_default())]
    Aws {
        /// API operation, e.g. `CreateSubnet`.
        operation: &'static str,
        /// Region the call went to.
        region: String,
        /// AWS's error code, when it sent one.
        code: Option<String>,
        /// AWS's message (or the transport's, when no answer came).
        message: String,
    },
    /// The instance type lacks ENA.
    #[error(
        "instance type {instance_type} has no enhanced networking (ENA support: {ena}) in {region}; network measurements on it would be capped by its emulated NIC. Use {suggestion}"
    )]
    NoEnhancedNetworking {
        /// The type.
        instance_type: String,
        /// Region checked.
        region: String,
        /// What AWS reported for ENA.
        ena: String,
        /// A replacement type with ENA.
        suggestion: String,
    },
    /// The instance type is unknown to AWS or not offered where needed.
    #[error("instance type {instance_type} is not offered in {region}{}", zone.as_ref().map(|z| format!(" zone {z}")).unwrap_or_default())]
    InstanceTypeUnavailable {
        /// The type.
        instance_type: String,
        /// Region.
        region: String,
        /// Zone, when one was asked for.
        zone: Option<String>,
    },
    /// A gateway of yours named by a hybrid path's `via` cannot be used as it is.
    #[error("via = \"{gateway}\" for vpc '{vpc}' in {region}: {problem}")]
    YourGateway {
        /// The gateway id.
        gateway: String,
        /// The run's VPC to join to it.
        vpc: String,
        /// Region searched.
        region: String,
        /// What is wrong and what to do.
        problem: String,
    },
    /// AWS did not reach a state in time.
    #[error("timed out after {seconds} s waiting for {what} in {region}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// Region.
        region: String,
        /// How long.
        seconds: u64,
    },
    /// AWS answered without something it always sends.
    #[error("{operation} in {region} returned no {missing}")]
    Incomplete {
        /// Operation.
        operation: &'static str,
        /// Region.
        region: String,
        /// What was missing.
        missing: &'static str,
    },
    /// `up` was interrupted (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// `up` failed; says whether what it created was removed.
    // `cause` rather than `source`: the message already contains it, and a `source` would be
    // printed a second time by error-chain printers.
    #[error("{cause}\n{}", teardown_note(run_id, teardown, *kept))]
    UpFailed {
        /// The run.
        run_id: String,
        /// What went wrong.
        cause: Box<Error>,
        /// `None`: everything created was deleted (or `kept`); `Some`: the teardown failed too.
        teardown: Option<Box<Error>>,
        /// Whether teardown was skipped on request (`--keep`).
        kept: bool,
    },
    /// `down` could not delete everything: what is left (or could not be looked at), each
    /// with its region and id, so nothing billing goes unnoticed.
    #[error(
        "run {run_id}: {} thing(s) left after the teardown:\n{}\nfirst failure: {first}\nrun `xbench-deploy down {run_id}` again to finish (what AWS is still deleting may only need time), or check the console",
        left.len(),
        left.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
    )]
    TeardownIncomplete {
        /// The run.
        run_id: String,
        /// `region kind id (state)` of each thing left, or of each place not searched.
        left: Vec<String>,
        /// The first failure on the way, in AWS's words.
        first: String,
    },
    /// A run id that is not of the form this tool makes.
    #[error("'{0}' is not a run id (they look like xb-20250601-3fa9c0)")]
    BadRunId(String),
    /// The local state or outputs file could not be read or written.
    #[error("state file {path}: {message}")]
    StateFile {
        /// File.
        path: String,
        /// Why.
        message: String,
    },
    /// No AMI could be found.
    #[error("no AMI for {what} in {region}: {message}")]
    Ami {
        /// What was looked up.
        what: String,
        /// Region.
        region: String,
        /// Why.
        message: String,
    },
    /// The xbench binary cannot be used on the hosts.
    #[error(transparent)]
    Binary(#[from] BinaryError),
    /// A `--suite` file was refused.
    #[error(transparent)]
    Suite(#[from] SuiteError),
    /// Hosts whose SSM agent never came online.
    #[error(
        "the SSM agent of {hosts} did not come online within {seconds} s. Usual causes: the \
         instance has no route to the SSM endpoints (it needs its public address and the route \
         to the internet gateway, or VPC endpoints for ssm, ssmmessages and ec2messages); its \
         instance profile was not attached or IAM had not propagated yet (run `up` again with \
         --run-id); the AMI has no SSM agent (Amazon Linux 2023 has one); or the instance did \
         not boot (aws ec2 get-console-output --instance-id ID --region REGION)"
    )]
    NotRegistered {
        /// `key (instance, region)` of each.
        hosts: String,
        /// How long `up` waited.
        seconds: u64,
    },
    /// A host's boot script failed.
    #[error(
        "host {host} ({instance}, {region}) did not finish booting: {reason}\nits full log: aws \
         ec2 get-console-output --instance-id {instance} --region {region}, or \
         /var/log/cloud-init-output.log on the host"
    )]
    BootFailed {
        /// Plan key.
        host: String,
        /// Instance id.
        instance: String,
        /// Region.
        region: String,
        /// The boot script's own words.
        reason: String,
    },
    /// A path's server did not answer its client.
    #[error(
        "path {path}: {client} could not run a test against {target}:{port} for {seconds} s: \
         {detail}\nUsual causes: a route or security group that does not let the client in \
         (a VPN tunnel can take a minute to come up), the xbench-server unit not running \
         (journalctl -u xbench-server on the server), the client's address missing from the \
         server's --allow, or a key mismatch"
    )]
    ServerUnreachable {
        /// Path label.
        path: String,
        /// Client host key.
        client: String,
        /// The address dialled.
        target: String,
        /// Port.
        port: u16,
        /// The client's last error.
        detail: String,
        /// How long it was tried.
        seconds: u64,
    },
    /// `run` was given no suite.
    #[error(
        "scenario {scenario} has no [suite] and no --suite FILE was given: say what to measure, \
         e.g. [suite] repeat = 3 with [[suite.test]] parallel = [1, 2, 4]"
    )]
    NoSuite {
        /// Scenario name.
        scenario: String,
    },
    /// `run` was pointed at a run that is not up.
    #[error("no run {run} is up in {dir}{}", known_runs(known))]
    NoSuchRun {
        /// What was asked for.
        run: String,
        /// The state directory.
        dir: String,
        /// Runs of the scenario that are up there.
        known: Vec<String>,
    },
    /// The output directory holds runs of another sweep.
    #[error(
        "{dir} already holds collected runs; add --resume to complete that run, or choose \
         another --out"
    )]
    OutputHoldsRuns {
        /// The directory.
        dir: String,
    },
    /// A collected run does not match the suite (`--resume` with other settings).
    #[error(
        "cannot resume: {path} was measured with other settings ({differences}); run the same \
         suite (and --time/--repeat) again, or choose another --out"
    )]
    ResumeMismatch {
        /// The file.
        path: String,
        /// What differs.
        differences: String,
    },
    /// The path lab could not be built or used.
    #[error("the path lab: {message}")]
    Lab {
        /// The lab's words.
        message: String,
        /// Whether the input (or a missing permission or program) is the cause.
        usage: bool,
    },
    /// `run --here` cannot run your host's paths on this machine (no such path, no xbench,
    /// no key).
    #[error("--here: {0}")]
    Here(String),
    /// The results could not be written or read back.
    #[error("{path}: {message}")]
    Results {
        /// File or directory.
        path: String,
        /// Why.
        message: String,
    },
    /// A path's fleet cannot run a cell of the suite (fewer streams than instances, or a
    /// test kind fleets do not merge).
    #[error("path '{path}' ({clients} client instances), cell {cell}: {message}")]
    Fleet {
        /// The path.
        path: String,
        /// Its fleet size.
        clients: u16,
        /// The cell.
        cell: String,
        /// Why.
        message: String,
    },
    /// The plan's instances need more vCPUs than the account's quota in a region.
    #[error(
        "{region}: the plan's instances need {needed} vCPUs, above the account's quota \"{name}\" ({code}) of {quota:.0}; use fewer or smaller instances (clients = N), or ask for more in the Service Quotas console",
        name = crate::aws::quotas::VCPU_QUOTA_NAME,
        code = crate::aws::quotas::VCPU_QUOTA_CODE
    )]
    VcpuQuota {
        /// Region.
        region: String,
        /// vCPUs the plan needs there.
        needed: u32,
        /// The quota.
        quota: f64,
    },
    /// A bug or an impossible answer.
    #[error("internal error: {0}")]
    Internal(String),
}

fn known_runs(known: &[String]) -> String {
    if known.is_empty() {
        " (none of this scenario is up there: start one with `xbench-deploy up`)".into()
    } else {
        format!(" (up there: {})", known.join(", "))
    }
}

fn teardown_note(run_id: &str, teardown: &Option<Box<Error>>, kept: bool) -> String {
    match (kept, teardown) {
        (true, _) => format!(
            "resources of run {run_id} were kept (--keep): continue with `xbench-deploy up FILE --run-id {run_id}` or delete with `xbench-deploy down {run_id}`"
        ),
        (false, None) => format!("everything run {run_id} had created was deleted again"),
        (false, Some(e)) => format!(
            "deleting what run {run_id} had created also failed: {e}\nrun `xbench-deploy down {run_id}` again"
        ),
    }
}

impl Error {
    /// Whether the error is about the input (scenario, instance type, credentials, run id), found
    /// before anything was created.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Error::Scenario(_)
                | Error::Plan(_)
                | Error::MissingCredentials { .. }
                | Error::NoEnhancedNetworking { .. }
                | Error::InstanceTypeUnavailable { .. }
                | Error::YourGateway { .. }
                | Error::BadRunId(_)
                | Error::Binary(_)
                | Error::Suite(_)
                | Error::NoSuite { .. }
                | Error::NoSuchRun { .. }
                | Error::OutputHoldsRuns { .. }
                | Error::ResumeMismatch { .. }
                | Error::Fleet { .. }
                | Error::VcpuQuota { .. }
                | Error::Lab { usage: true, .. }
                | Error::Here(_)
        )
    }

    /// AWS's error code, if this is an AWS failure.
    pub fn aws_code(&self) -> Option<&str> {
        match self {
            Error::Aws { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Whether AWS said the thing does not exist (so deleting it again is done).
    pub fn is_not_found(&self) -> bool {
        self.aws_code().is_some_and(|c| {
            c.ends_with(".NotFound")
                || c.ends_with("NotFoundException")
                || c == "InvalidGroup.NotFound"
                || c == "InvalidTransitGatewayAttachmentID.NotFound"
                || c == "InvalidPlacementGroup.Unknown"
                || c == "Gateway.NotAttached"
        })
    }

    /// Whether AWS refused for lack of permission.
    pub fn is_access_denied(&self) -> bool {
        self.aws_code().is_some_and(|c| {
            c == "UnauthorizedOperation"
                || c == "AccessDenied"
                || c == "AccessDeniedException"
                || c == "UnauthorizedAccess"
        })
    }

    /// Whether AWS asked us to slow down (the SDK retried already; a caller that must finish
    /// waits and tries again).
    pub fn is_throttling(&self) -> bool {
        self.aws_code().is_some_and(|c| {
            matches!(
                c,
                "Throttling"
                    | "ThrottlingException"
                    | "ThrottledException"
                    | "RequestThrottledException"
                    | "TooManyRequestsException"
                    | "RequestLimitExceeded"
                    | "SlowDown"
                    | "RequestThrottled"
                    | "PriorRequestNotComplete"
            )
        })
    }

    /// Whether the failure may pass by itself: throttling, or no answer / a server-side error
    /// from the endpoint (a region or service having trouble).
    pub fn is_transient(&self) -> bool {
        self.is_throttling()
            || match self {
                Error::Aws { code, message, .. } => {
                    code.as_deref().is_some_and(|c| {
                        matches!(
                            c,
                            "ServiceUnavailable"
                                | "Unavailable"
                                | "InternalError"
                                | "InternalFailure"
                                | "ServiceUnavailableException"
                                | "InternalServerError"
                                | "InternalServiceException"
                        )
                    }) || (code.is_none() && !message.is_empty())
                }
                Error::Timeout { .. } => true,
                _ => false,
            }
    }

    /// Whether AWS refused because something still depends on the resource (retry later).
    pub fn is_dependency(&self) -> bool {
        self.aws_code().is_some_and(|c| {
            c == "DependencyViolation"
                || c == "IncorrectState"
                || c == "InvalidTransitGatewayAttachmentID.InvalidState"
                || c == "IncorrectInstanceState"
                || c == "InvalidPlacementGroup.InUse"
        })
    }
}

/// `Ok(())` where AWS said the thing does not exist: deleting what is already gone is done.
pub(crate) fn ignore_missing(r: Result<(), Error>) -> Result<(), Error> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// `Ok(None)` where AWS said the thing does not exist, else the error: for a lookup to which
/// "gone" is an answer.
pub(crate) fn not_found_is_none<T>(e: Error) -> Result<Option<T>, Error> {
    if e.is_not_found() { Ok(None) } else { Err(e) }
}
