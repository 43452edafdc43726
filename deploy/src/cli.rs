//! The command line: clap structures only. `commands` turns them into library calls.

use std::path::PathBuf;

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
    /// Delete a run's resources.
    Down(DownArgs),
    /// Delete every xbench-tagged run past its deletion-due time, in every region.
    Gc(GcArgs),
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
