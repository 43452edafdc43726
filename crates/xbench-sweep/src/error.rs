//! Why a sweep cannot start: a plan that makes no sense, or a save directory it cannot use.

use std::path::PathBuf;

use xbench::config::Field;

/// A plan that cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// A list names a value twice.
    #[error("{flag} lists {value} twice; each value is one cell")]
    Duplicate {
        /// The list's setting; the message quotes its flag.
        flag: Field,
        /// The repeated value.
        value: String,
    },
    /// A list does not apply to the test's kind.
    #[error("{flag} does not apply to {kind} tests")]
    NotApplicable {
        /// The list's setting; the message quotes its flag.
        flag: Field,
        /// "throughput" or "request/response".
        kind: &'static str,
    },
    /// A list that sweeps UDP tests only was given for a TCP test.
    #[error("a list of {flag} values sweeps UDP tests only; add -u, or give one value")]
    UdpOnly {
        /// The flag as written (`-b …/stream` for a per-stream rate).
        flag: &'static str,
    },
    /// A cell is not a test the server would take.
    #[error("invalid value for {}: {}", .0.field, .0.reason)]
    Spec(#[from] xbench::config::SpecError),
    /// The key file (`--psk-file`) cannot be used.
    #[error(transparent)]
    Key(#[from] xbench::auth::KeyError),
    /// The label cannot be a directory name.
    #[error("{0}")]
    Label(String),
    /// The label's directory holds runs and `resume` was not asked for.
    #[error(
        "{0} already holds saved runs; add --resume to complete that sweep, or choose another \
         --label or --save directory"
    )]
    AlreadySaved(PathBuf),
    /// A saved run was measured with other settings than this plan's.
    #[error(
        "{path} was run with other settings ({differences}); resume with the same flags, or choose another --label"
    )]
    Mismatch {
        /// The saved run.
        path: PathBuf,
        /// Settings that differ, as JSON paths.
        differences: String,
    },
    /// A saved run cannot be read.
    #[error("cannot resume: {path} is not a readable run ({reason}); move it away and retry")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The save directory cannot be created or written (found before the first run).
    #[error("cannot save runs in {path}: {source}")]
    Unwritable {
        /// The directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The directory could not be created or listed.
    #[error("cannot use {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}
