//! [`Deployer`]: the AWS connection, the Global Accelerator and placement-group back ends, the
//! timing and the local state directory that `up`, `down` and `gc` share.
//!
//! Only construction lives here; the operations are in [`crate::apply`] and
//! [`crate::teardown`].

use std::sync::Arc;

use crate::aws::accelerator::{AcceleratorApi, GlobalAccelerator};
use crate::aws::placement::{Ec2PlacementGroups, PlacementGroupApi};
use crate::aws::{Aws, Timing};
use crate::state::StateDir;

/// Runs `up`, `down` and `gc` against one AWS connection.
#[derive(Debug)]
pub struct Deployer {
    pub(crate) aws: Aws,
    pub(crate) accelerators: Arc<dyn AcceleratorApi>,
    pub(crate) placement: Arc<dyn PlacementGroupApi>,
    pub(crate) timing: Timing,
    pub(crate) state: StateDir,
}

impl Deployer {
    /// A deployer talking to real AWS for everything (Global Accelerator included).
    pub fn new(aws: Aws, state: StateDir) -> Self {
        let accelerators = Arc::new(GlobalAccelerator::new(aws.sdk_config()));
        Deployer {
            aws,
            accelerators,
            placement: Arc::new(Ec2PlacementGroups),
            timing: Timing::default(),
            state,
        }
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
