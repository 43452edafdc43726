//! Exit statuses, decided in one place.
//!
//! 0: the test completed (or the server stopped cleanly). 1: it failed, or could not start.
//! 2: the command line was wrong (clap uses 2 as well). 130: interrupted by Ctrl-C, after the
//! partial results were printed. A closed stdout (`xbench … | head`) is not an error.
//!
//! Sweeps: 0 when every run completed, 1 when one failed (the others are kept), 130 on Ctrl-C
//! after the summary of what finished. `xbench report`: 2 for a path that does not exist, 1 when
//! no usable result was found or the chart cannot be drawn; skipped files are only warnings.
//!
//! `xbench compare`: 0 when every cell was decided and none regressed; 1 when a cell regressed
//! (named on stderr); 3 when nothing was shown to regress but some cell could not be decided
//! (missing on one side, too few runs), which is not a pass; 2 for a path that does not exist
//! or a bad flag.

use std::io;

/// What the process reports to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Success,
    Failure,
    Usage,
    /// `xbench compare` could not decide every cell, and none regressed.
    Inconclusive,
    Interrupted,
}

impl Exit {
    pub(crate) fn code(self) -> i32 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Inconclusive => 3,
            Exit::Interrupted => 130,
        }
    }
}

/// A mistake on the command line found after parsing (flags that clap cannot relate).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

/// The status for an error that ended the program.
pub(crate) fn for_error(e: &anyhow::Error) -> Exit {
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::BrokenPipe
        {
            return Exit::Success;
        }
        if cause.downcast_ref::<UsageError>().is_some() {
            return Exit::Usage;
        }
        match cause.downcast_ref::<xbench::Error>() {
            Some(xbench::Error::Interrupted { .. }) => return Exit::Interrupted,
            // More flows than the local addresses' ports hold: the flags ask the impossible.
            Some(xbench::Error::PortSpace(_)) => return Exit::Usage,
            // A -B list the test cannot use, found only once the server turned out iperf3's.
            Some(xbench::Error::BindList(_)) => return Exit::Usage,
            _ => {}
        }
    }
    Exit::Failure
}
