//! [`Deployer`]: the AWS connection, the Global Accelerator, placement-group and Run Command
//! back ends, the timing and the local state directory that `up`, `run`, `down` and `gc`
//! share.
//!
//! Only construction lives here; the operations are in [`crate::apply`] and
//! [`crate::teardown`].

use std::sync::Arc;

use std::time::Duration;

use crate::aws::accelerator::{AcceleratorApi, GlobalAccelerator};
use crate::aws::placement::{Ec2PlacementGroups, PlacementGroupApi};
use crate::aws::ssm::{AwsRunCommand, RunCommandApi};
use crate::aws::{Aws, Timing};
use crate::state::StateDir;

/// Runs `up`, `down` and `gc` against one AWS connection.
#[derive(Debug)]
pub struct Deployer {
    pub(crate) aws: Aws,
    pub(crate) accelerators: Arc<dyn AcceleratorApi>,
    pub(crate) placement: Arc<dyn PlacementGroupApi>,
    pub(crate) run_command: Arc<dyn RunCommandApi>,
    pub(crate) timing: Timing,
    /// How long `up` waits for each readiness step (agents online, boot scripts, probes).
    pub(crate) ready_timeout: Duration,
    /// Whether `up` skips the readiness checks (an emulator runs no host to check).
    pub(crate) skip_ready: bool,
    pub(crate) state: StateDir,
}

/// How long `up` waits for the hosts by default: a boot downloads the binary and reads the
/// key; the SSM agent registers within a few minutes of launch.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(15 * 60);

impl Deployer {
    /// A deployer talking to real AWS for everything (Global Accelerator included).
    pub fn new(aws: Aws, state: StateDir) -> Self {
        let accelerators = Arc::new(GlobalAccelerator::new(aws.sdk_config()));
        Deployer {
            aws,
            accelerators,
            placement: Arc::new(Ec2PlacementGroups),
            run_command: Arc::new(AwsRunCommand),
            timing: Timing::default(),
            ready_timeout: DEFAULT_READY_TIMEOUT,
            skip_ready: false,
            state,
        }
    }

    /// Replaces Run Command (tests use [`crate::aws::ssm::FakeRunCommand`]).
    pub fn with_run_command(mut self, api: Arc<dyn RunCommandApi>) -> Self {
        self.run_command = api;
        self
    }

    /// Sets how long `up` waits for each readiness step.
    pub fn with_ready_timeout(mut self, t: Duration) -> Self {
        self.ready_timeout = t;
        self
    }

    /// `up` returns without waiting for the hosts (for an emulator, which runs none).
    pub fn without_readiness(mut self) -> Self {
        self.skip_ready = true;
        self
    }

    /// The Run Command back end.
    pub fn run_command(&self) -> &dyn RunCommandApi {
        self.run_command.as_ref()
    }

    /// How often to poll AWS.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Replaces the Global Accelerator back end (tests use
    /// [`crate::aws::accelerator::FakeAccelerators`]).
    pub fn with_accelerators(mut self, api: Arc<dyn AcceleratorApi>) -> Self {
        self.accelerators = api;
        self
    }

    /// Replaces the placement-group back end (tests use
    /// [`crate::aws::placement::FakePlacementGroups`]).
    pub fn with_placement_groups(mut self, api: Arc<dyn PlacementGroupApi>) -> Self {
        self.placement = api;
        self
    }

    /// Sets how often to poll and how long to wait.
    pub fn with_timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// The AWS connection.
    pub fn aws(&self) -> &Aws {
        &self.aws
    }

    /// The local state directory.
    pub fn state_dir(&self) -> &StateDir {
        &self.state
    }
}
