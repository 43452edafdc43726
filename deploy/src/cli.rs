//! The command line: clap structures only. `commands` turns them into library calls.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Builds the AWS network paths xbench compares (VPC peering, Transit Gateway, software VPN,
/// public internet, Global Accelerator, existing hosts), and deletes them again.
#[derive(Debug, Parser)]
#[command(name = "xbench-deploy", version, about, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Args)]
pub(crate) struct Common {
    /// Where run state and outputs files go [default: $XDG_STATE_HOME/xbench-deploy or
    /// ~/.local/state/xbench-deploy].
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "XBENCH_DEPLOY_STATE_DIR"
    )]
    pub(crate) state_dir: Option<PathBuf>,

    /// Send AWS requests here instead of AWS (an emulator such as moto). The SDK also reads
    /// AWS_ENDPOINT_URL.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) endpoint_url: Option<String>,

    /// AWS shared-config profile (else AWS_PROFILE, else "default").
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) profile: Option<String>,

    /// Do not use Global Accelerator: `up` refuses accelerator paths, `down` and `gc` do not
    /// look for accelerators (for an emulator without that API, or an account without its
    /// permissions).
    #[arg(long, global = true)]
    pub(crate) skip_accelerators: bool,

    /// Milliseconds between polls while waiting for AWS (tests against an emulator use a few).
    #[arg(long, global = true, hide = true, default_value_t = 5000)]
    pub(crate) poll_ms: u64,

    /// Milliseconds of the SDK's first back-off after a throttled call (tests use a few).
    #[arg(long, global = true, hide = true, default_value_t = 1000)]
    pub(crate) retry_backoff_ms: u64,

    /// Seconds to wait for one AWS state change before giving up.
    #[arg(long, global = true, hide = true, default_value_t = 1200)]
    pub(crate) wait_secs: u64,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print every resource a scenario would create, per region, with an hourly cost estimate.
    Plan(PlanArgs),
    /// Create a scenario's resources and print the xbench command for each path.
    Up(UpArgs),
    /// Run the scenario's suite on every path of a run that is up (or on the path lab with
    /// --lab), collect the results into DIR and draw the comparison.
    Run(RunArgs),
    /// plan, up, run, report and down in one go; the hosts are deleted even on failure or
    /// Ctrl-C (unless --keep).
    All(AllArgs),
    /// Delete a run's resources.
    Down(DownArgs),
    /// Delete every xbench-tagged run past its deletion-due time, in every region.
    Gc(GcArgs),
    /// Print the minimal IAM policy the operator needs for a scenario (or, with --hosts, the
    /// hosts' own policy, for an instance profile of yours).
    Policy(PolicyArgs),
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or write every page to a directory with --dir.
    Man(ManArgs),
}

/// Print a shell's completion script for xbench-deploy (installed as `xbench completions`'s is).
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// Print xbench-deploy's manual page, or write every page (xbench-deploy.1,
/// xbench-deploy-up.1, …) to a directory.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The subcommand whose page to print (e.g. up) [default: xbench-deploy(1)].
    #[arg(value_name = "SUBCOMMAND")]
    pub(crate) command: Vec<String>,

    /// Write every page into DIR (created if missing) instead of printing one.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Scenario file (TOML).
    pub(crate) file: PathBuf,
    /// Also ask AWS (read-only) whether the instance types have ENA, which AMIs and zones
    /// would be used. Needs credentials.
    #[arg(long)]
    pub(crate) check: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) binary: BinaryArgs,
    #[command(flatten)]
    pub(crate) suite: SuiteArgs,
}

#[derive(Debug, Args)]
pub(crate) struct BinaryArgs {
    /// The xbench binary to put on the hosts (uploaded to the run's private bucket) [default:
    /// the xbench beside xbench-deploy]. Not used with [xbench] url or cargo_git.
    #[arg(long, value_name = "PATH")]
    pub(crate) xbench: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct SuiteArgs {
    /// What to measure, instead of the scenario's [suite]: a TOML file with the same keys.
    #[arg(long, value_name = "FILE")]
    pub(crate) suite: Option<PathBuf>,
    /// Shorten every test to SECS (e.g. 2, 500ms) for a quick try.
    #[arg(long, value_name = "SECS", value_parser = positive_duration)]
    pub(crate) time: Option<Duration>,
    /// Run every cell N times instead of the suite's repeat.
    #[arg(long, value_name = "N")]
    pub(crate) repeat: Option<NonZeroU32>,
    /// Start repeat N (N-1) x DURATION after the first (e.g. 4h), instead of the suite's
    /// `every`: repeats spread over hours or days; `run --resume` keeps the schedule.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub(crate) every: Option<Duration>,
}

#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// Scenario file (TOML).
    pub(crate) file: PathBuf,
    /// The operator's policy for `up --instance-profile` (no role creation; PassRole on yours).
    #[arg(long, value_name = "NAME")]
    pub(crate) instance_profile: Option<String>,
    /// Print the hosts' policy instead: what the role of your --instance-profile must allow
    /// (the SSM agent, the runs' keys and binaries).
    #[arg(long)]
    pub(crate) hosts: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ProfileArgs {
    /// Launch the hosts with this existing instance profile instead of making a role (for
    /// accounts whose SCPs forbid iam:CreateRole or require permission boundaries); its role
    /// needs what `xbench-deploy policy --hosts FILE` prints.
    #[arg(long, value_name = "NAME")]
    pub(crate) instance_profile: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// Scenario file (TOML).
    pub(crate) file: PathBuf,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub(crate) yes: bool,
    /// On failure or Ctrl-C, keep what was created (default: delete it).
    #[arg(long)]
    pub(crate) keep: bool,
    /// Continue an earlier run (after a failure with --keep) instead of starting a new one.
    #[arg(long, value_name = "RUN_ID")]
    pub(crate) run_id: Option<String>,
    /// Also write the outputs JSON here.
    #[arg(long, value_name = "FILE")]
    pub(crate) outputs: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) binary: BinaryArgs,
    #[command(flatten)]
    pub(crate) ready: ReadyArgs,
    #[command(flatten)]
    pub(crate) profile: ProfileArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReadyArgs {
    /// Seconds `up` waits for each host to register with SSM, finish booting and answer.
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    pub(crate) ready_secs: u64,
    /// Do not wait for the hosts (an emulator such as moto runs none).
    #[arg(long, hide = true)]
    pub(crate) skip_ready: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("local").args(["lab", "here"]).multiple(false)))]
pub(crate) struct RunArgs {
    /// Scenario file (TOML).
    pub(crate) file: PathBuf,
    /// Where results go: DIR/<path label>/<cell>/run-N.json, then report.txt and charts.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// The run to measure [default: the newest run of this scenario that is up].
    #[arg(long, value_name = "RUN_ID", conflicts_with = "lab")]
    pub(crate) run_id: Option<String>,
    /// Complete an interrupted run: skip the runs already collected in DIR.
    #[arg(long)]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) suite: SuiteArgs,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
    /// Rehearse on this machine's path lab instead of AWS (needs root): peering → direct,
    /// tgw → transit, vpn → vpn, public/accelerator/existing → direct.
    #[arg(long)]
    pub(crate) lab: bool,
    /// One-way delay of lab paths: LABEL=DURATION for one path, DURATION for the others
    /// (e.g. --lab-delay 40ms --lab-delay public=80ms); repeatable.
    #[arg(long = "lab-delay", value_name = "[LABEL=]DURATION", requires = "lab", value_parser = lab_delay)]
    pub(crate) lab_delays: Vec<(Option<String>, Duration)>,
    /// Rate cap of lab paths (tc tbf): LABEL=RATE for one path, RATE for the others (e.g.
    /// --lab-rate 1G --lab-rate vpn=200M); repeatable. A fleet (`clients = N`) shares it.
    #[arg(long = "lab-rate", value_name = "[LABEL=]RATE", requires = "lab", value_parser = lab_rate)]
    pub(crate) lab_rates: Vec<(Option<String>, u64)>,
    /// Run the paths whose client is your own host (client_address) from this machine,
    /// instead of printing the command to run there: the upload from your campus or home
    /// end, as field reports 003 and 004 measured it.
    #[arg(long)]
    pub(crate) here: bool,
    /// The xbench the lab or --here runs [default: the one beside xbench-deploy].
    #[arg(long, value_name = "PATH", requires = "local")]
    pub(crate) xbench: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Throughput unit of the report: Mbit/s, Gbit/s, MB/s, MiB/s…, or iperf3's -f letters.
    #[arg(long, value_name = "UNIT", default_value = "Mbit/s", value_parser = unit)]
    pub(crate) unit: xbench_report::ThroughputUnit,
    /// Keep a fleet's run whose instances started more than a tenth of the interval apart,
    /// merged and marked with a warning, instead of failing it (its instances' windows do not
    /// coincide, so the sum can overstate what the path carried at once).
    #[arg(long)]
    pub(crate) keep_fleet_spread: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AllArgs {
    /// Scenario file (TOML).
    pub(crate) file: PathBuf,
    /// Where results go (as for `run`).
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub(crate) yes: bool,
    /// Keep the hosts at the end (and on failure) instead of deleting them.
    #[arg(long)]
    pub(crate) keep: bool,
    #[command(flatten)]
    pub(crate) binary: BinaryArgs,
    #[command(flatten)]
    pub(crate) suite: SuiteArgs,
    #[command(flatten)]
    pub(crate) report: ReportArgs,
    #[command(flatten)]
    pub(crate) ready: ReadyArgs,
    #[command(flatten)]
    pub(crate) profile: ProfileArgs,
    /// Run the paths whose client is your own host (client_address) from this machine, with
    /// the xbench `run --here` would use (the one beside xbench-deploy).
    #[arg(long)]
    pub(crate) here: bool,
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("must be greater than 0".into());
    }
    Ok(d)
}

/// Seconds (`2`, `0.5`) or with a unit (`500ms`, `2m`, `4h`: xbench's own time parser,
/// [`xbench::units::parse_duration`]), up to a week, in whole milliseconds.
fn duration(s: &str) -> Result<Duration, String> {
    let d = xbench::units::parse_duration(s).map_err(|e| e.to_string())?;
    if d > Duration::from_secs(7 * 24 * 3600) {
        return Err(format!("`{}` is out of range (at most a week)", s.trim()));
    }
    Ok(Duration::from_millis((d.as_secs_f64() * 1e3).round() as u64))
}

fn lab_delay(s: &str) -> Result<(Option<String>, Duration), String> {
    match s.split_once('=') {
        Some((label, d)) if !label.trim().is_empty() => {
            Ok((Some(label.trim().to_owned()), duration(d)?))
        }
        Some(_) => Err(format!("`{s}`: give LABEL=DURATION or DURATION")),
        None => Ok((None, duration(s)?)),
    }
}

fn lab_rate(s: &str) -> Result<(Option<String>, u64), String> {
    let rate = |r: &str| {
        let bps = xbench::units::BitRate::parse(r.trim())
            .map_err(|e| e.to_string())?
            .bits_per_second();
        if bps == 0 {
            return Err(format!("`{s}`: a rate cap must be above 0"));
        }
        Ok(bps)
    };
    match s.split_once('=') {
        Some((label, r)) if !label.trim().is_empty() => {
            Ok((Some(label.trim().to_owned()), rate(r)?))
        }
        Some(_) => Err(format!("`{s}`: give LABEL=RATE or RATE")),
        None => Ok((None, rate(s)?)),
    }
}

fn unit(s: &str) -> Result<xbench_report::ThroughputUnit, String> {
    s.parse()
        .map_err(|e: xbench_report::units::UnknownUnit| e.to_string())
}

#[derive(Debug, Args)]
pub(crate) struct DownArgs {
    /// The run to delete (as printed by `up`).
    pub(crate) run_id: String,
    /// Regions to search besides those in the local state file (every region if neither).
    #[arg(long = "region", value_name = "REGION")]
    pub(crate) regions: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Regions to search (default: every region the account has).
    #[arg(long = "region", value_name = "REGION")]
    pub(crate) regions: Vec<String>,
    /// Only list what would be deleted.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Judge expiry as of this time (RFC 3339, e.g. 2025-06-01T12:00:00Z) instead of now.
    #[arg(long, value_name = "TIME")]
    pub(crate) as_of: Option<String>,
}
