//! Whether a request/response test's flows fit the 4-tuples from the local addresses (`-B`)
//! to the server's port, checked before anything is opened, so a test that cannot open all
//! its flows is refused with the numbers (exit 2) instead of failing half-way through setup.
//! The planning itself is the library's ([`xbench::client::flow_plan`]), which checks again
//! for programs that link it.

use xbench::client::flow_plan::{FlowPlan, PortRange};
use xbench::config::RrSpec;
use xbench_sweep::Target;

use crate::exit::UsageError;

/// Refuses `flows` TCP flows of `rr` that `target`'s local addresses cannot hold: held
/// (`--rr`) or one connection at a time each (`--crr`, whose server closes first and so keeps
/// the TIME_WAIT). `--rr -u` is not planned: its sockets are UDP, with no 4-tuple to share.
pub(crate) fn ensure(target: &Target, rr: &RrSpec, flows: u32) -> Result<(), UsageError> {
    if rr.udp.is_some() {
        return Ok(());
    }
    let sources: Vec<_> = if target.flow_binds.is_empty() {
        target.bind.into_iter().collect()
    } else {
        target.flow_binds.clone()
    };
    FlowPlan::new(flows as usize, &sources, PortRange::current_or_default())
        .map(drop)
        .map_err(|e| UsageError(e.to_string()))
}
