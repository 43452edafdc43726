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

/// A network namespace with loopback up, deleted on drop (its sockets with it). The tests of
/// `-B` lists and flow space each build one; a test file adds its own methods with an `impl`.
pub(crate) struct Netns(pub(crate) String);

impl Netns {
    /// `NAME-PID`, replacing one a killed run left behind.
    pub(crate) fn new(name: &str) -> Self {
        let ns = Netns(format!("{name}-{}", std::process::id()));
        if std::path::Path::new("/run/netns").join(&ns.0).exists() {
            let _ = Command::new("ip").args(["netns", "del", &ns.0]).status();
        }
        let out = Command::new("ip")
            .args(["netns", "add", &ns.0])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip netns add {}: {}",
            ns.0,
            String::from_utf8_lossy(&out.stderr)
        );
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// `argv` inside the namespace, which must succeed; its stdout.
    pub(crate) fn run(&self, argv: &[&str]) -> String {
        let out = self.command(argv[0]).args(&argv[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `program` run inside the namespace.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// False (after saying why) without root; under `CI=true` a panic, since CI must run it.
#[allow(clippy::print_stderr)] // the reason a test was skipped belongs in its output
pub(crate) fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{test} needs root (network namespaces) and CI=true forbids skipping it"
    );
    eprintln!("skipping {test}: needs root for a network namespace");
    false
}
