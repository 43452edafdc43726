//! Exit statuses, decided in one place.
//!
//! 0: done. 1: AWS or the local state failed (after `up`, what it created has been deleted
//! unless --keep said otherwise). 2: the input was refused before anything was created: the
//! command line, the scenario, the instance type, missing credentials, an unconfirmed `up`.
//! 130: interrupted by Ctrl-C (after the teardown).

use xbench_deploy::Error;

/// What the process reports to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Success,
    Failure,
    BadInput,
    Interrupted,
}

impl Exit {
    pub(crate) fn code(self) -> i32 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::BadInput => 2,
            Exit::Interrupted => 130,
        }
    }
}

/// A refusal by the command line itself (not the library).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadInput(pub(crate) String);

/// The status for an error that ended the program.
pub(crate) fn for_error(e: &anyhow::Error) -> Exit {
    for cause in e.chain() {
        if cause.downcast_ref::<BadInput>().is_some() {
            return Exit::BadInput;
        }
        if let Some(err) = cause.downcast_ref::<Error>() {
            return match err {
                Error::Interrupted => Exit::Interrupted,
                Error::UpFailed { cause, .. } if matches!(**cause, Error::Interrupted) => {
                    Exit::Interrupted
                }
                e if e.is_bad_input() => Exit::BadInput,
                _ => Exit::Failure,
            };
        }
    }
    Exit::Failure
}
