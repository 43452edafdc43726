//! The lab's errors: each variant says what went wrong in words a user can act on, and which
//! of them are the caller's mistake ([`LabError::is_usage`]) rather than a failure of the
//! machine. Not for: deciding exit codes (the binary does that).

use std::io;
use std::path::PathBuf;

/// Who holds a lab: enough to name it in a refusal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holder {
    /// Process id.
    pub pid: u32,
    /// Its command line, space-joined.
    pub command: String,
    /// When it took the lab, RFC 3339 UTC.
    pub since: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} (`{}`, since {})",
            self.pid, self.command, self.since
        )
    }
}

/// Everything that can go wrong building, using or removing a lab.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// A path or lab setting that cannot be built (the caller's mistake).
    #[error("path `{path}`: {reason}")]
    InvalidPath {
        /// The path's label.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A lab-wide setting that cannot be used (the caller's mistake).
    #[error("{0}")]
    InvalidSpec(String),
    /// The process lacks the privileges to create namespaces and links.
    #[error(
        "the lab needs root (CAP_NET_ADMIN to build links and qdiscs, CAP_SYS_ADMIN to create \
         network namespaces); this process lacks {missing}. Run it with sudo."
    )]
    Permission {
        /// The capabilities missing, e.g. `CAP_NET_ADMIN`.
        missing: String,
    },
    /// A program the lab runs is not installed.
    #[error("{purpose} needs `{program}`, which is not installed: apt-get install {package}")]
    MissingProgram {
        /// The program looked for.
        program: String,
        /// The Debian package that provides it.
        package: &'static str,
        /// What it is needed for.
        purpose: &'static str,
    },
    /// Another process is building, running or removing a lab with the same state directory.
    #[error(
        "another xbench lab is in use by {holder}; wait for it to finish or stop it (state in {})",
        state_dir.display()
    )]
    Busy {
        /// Who holds the lock.
        holder: Holder,
        /// The state directory both use.
        state_dir: PathBuf,
    },
    /// A lab (or the leftovers of a killed one) already exists.
    #[error(
        "a lab is already up, built by {holder}; `xbench lab down` removes it (state in {})",
        state_dir.display()
    )]
    AlreadyUp {
        /// Who built it.
        holder: Holder,
        /// Its state directory.
        state_dir: PathBuf,
    },
    /// Namespaces with the lab's prefix exist without a lab that owns them (a killed run).
    #[error(
        "namespaces from an earlier lab are still there ({}); `xbench lab down{}` removes them",
        names.join(", "),
        if prefix == crate::spec::DEFAULT_PREFIX { String::new() } else { format!(" --prefix {prefix}") }
    )]
    Leftovers {
        /// The namespaces found.
        names: Vec<String>,
        /// Their prefix.
        prefix: String,
    },
    /// There is no lab to use.
    #[error("no lab is up (no state in {}); `xbench lab up` builds one", state_dir.display())]
    NotUp {
        /// The state directory looked at.
        state_dir: PathBuf,
    },
    /// An `ip`, `tc`, `openssl` or similar command failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and standard error.
        detail: String,
    },
    /// A helper process (delay line, VPN daemon, server) did not come up.
    #[error("{what} did not start: {detail}")]
    Helper {
        /// Which helper.
        what: String,
        /// Why, with the end of its log when there is one.
        detail: String,
    },
    /// A path was built but does not carry traffic.
    #[error("path `{path}` does not carry traffic: {detail}")]
    Unreachable {
        /// The path's label.
        path: String,
        /// What the probe saw.
        detail: String,
    },
    /// The build was cancelled (Ctrl-C); what was built has been removed.
    #[error("cancelled")]
    Cancelled,
    /// A system call or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl LabError {
    /// True for mistakes in what the caller asked for (bad path kinds, values out of range),
    /// as opposed to failures of the machine or its programs.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            LabError::InvalidPath { .. } | LabError::InvalidSpec(_)
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        LabError::Io {
            context: context.into(),
            source,
        }
    }
}
