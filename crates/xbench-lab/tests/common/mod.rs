//! Shared by the lab's root tests: the permission check that fails under CI instead of
//! skipping, a lock that runs them one at a time (they measure timing and throughput on a
//! shared 2-core machine, and would disturb each other), and a private prefix and state
//! directory per test so they never touch a user's lab or each other's.

#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use xbench_lab::{LabSpec, PathSpec};

/// Returns false (after saying why) when this process cannot build labs; under `CI=true`
/// panics instead, because CI must run these tests, never skip them.
pub fn root_or_skip(test: &str) -> bool {
    if xbench_lab::sys::privilege::sufficient() {
        return true;
    }
    let why = xbench_lab::sys::privilege::check()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} needs root and CI=true forbids skipping it: {why}");
    }
    eprintln!("skipping {test}: {why}");
    false
}

/// Held for the whole of a root test.
pub struct Serial(File);

/// Waits for the other root tests of every test binary to finish.
pub fn serial() -> Serial {
    let f = File::create(std::env::temp_dir().join("xbench-lab-root-tests.lock")).unwrap();
    // SAFETY: flock on an open descriptor; blocks until the lock is ours.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    Serial(f)
}

/// A spec whose names and state belong to `test` alone.
pub fn spec(test: &str, tag: &str, paths: Vec<PathSpec>) -> LabSpec {
    let mut s = LabSpec::new(paths);
    s.prefix = format!("xbt{tag}-");
    s.state_dir = PathBuf::from(format!("/run/xbench-lab-tests/{test}"));
    s.command = format!("test {test}");
    let _ = std::fs::remove_dir_all(&s.state_dir);
    s
}

/// Namespaces that start with `prefix`.
pub fn netns_with(prefix: &str) -> Vec<String> {
    xbench_lab::sys::netns::list()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect()
}
