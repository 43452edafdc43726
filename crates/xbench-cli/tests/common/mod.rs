//! Shared by the tests that run the `xbench` binary: the binary itself, a temporary directory
//! removed on drop, signals to a child, and JSON Schema checks. Each test binary uses part.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command};

use serde_json::Value;

/// The `xbench` binary of this build.
pub(crate) fn xbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xbench"))
}

/// A fresh directory under the system's temp dir, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// `xbench-test-NAME-PID`, emptied.
    pub(crate) fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("xbench-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sends `sig` to a child we spawned.
pub(crate) fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; `child` is ours and not yet reaped,
    // so its pid cannot have been reused.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Fails naming every place where `doc` breaks `schema`.
pub(crate) fn assert_valid(schema: &Value, doc: &Value) {
    let v = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

/// For each case, runs `xbench COMMAND ARGS…` and checks a usage error: exit status 2 and a
/// message on stderr that contains the case's words, without a panic.
pub(crate) fn assert_usage_errors(command: &[&str], cases: &[(&[&str], &str)]) {
    for (args, needle) in cases {
        let out = xbench().args(command).args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
