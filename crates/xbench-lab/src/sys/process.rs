//! Helper processes of a lab (delay lines, OpenVPN daemons, xbench servers): recorded by pid
//! and start time, so a later `xbench lab down` stops exactly them and never a process that
//! happened to reuse a pid; found by namespace, so leftovers of a lost state file are stopped
//! too. Processes are always stopped by id, never by name.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A process the lab started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of /proc/PID/stat): with the pid, it
    /// identifies the process even after the pid is reused.
    pub start_ticks: u64,
    /// What it is, e.g. `delay line direct`.
    pub role: String,
}

impl ProcRecord {
    /// Records a process that was just started.
    pub fn of(pid: u32, role: impl Into<String>) -> Option<Self> {
        Some(ProcRecord {
            pid,
            start_ticks: stat(pid)?.0,
            role: role.into(),
        })
    }

    /// True while the recorded process runs (a zombie counts as gone).
    pub fn is_running(&self) -> bool {
        stat(self.pid).is_some_and(|(t, state)| t == self.start_ticks && state != 'Z')
    }
}

/// (start time, state letter) of a process.
fn stat(pid: u32) -> Option<(u64, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; fields resume after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    // `rest` starts at field 3 (state); start time is field 22.
    let start = f.nth(18)?.parse().ok()?;
    Some((start, state))
}

/// Stops a recorded process: SIGTERM, up to `grace` to exit, then SIGKILL. `child` is its
/// handle when this process started it, so it is reaped instead of left a zombie. Returns
/// true when it was running.
pub fn stop(rec: &ProcRecord, mut child: Option<&mut Child>, grace: Duration) -> bool {
    if !rec.is_running() {
        if let Some(c) = child {
            let _ = c.try_wait();
        }
        return false;
    }
    for (sig, wait) in [
        (libc::SIGTERM, grace),
        (libc::SIGKILL, Duration::from_secs(2)),
    ] {
        // SAFETY: kill has no memory-safety preconditions; the pid was checked just above to
        // still be the recorded process (same start time).
        unsafe { libc::kill(rec.pid as libc::pid_t, sig) };
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if let Some(c) = child.as_deref_mut() {
                let _ = c.try_wait();
            }
            if !rec.is_running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    true
}

/// Pids of processes (other than this one) whose network namespace has one of `inodes`.
pub fn in_namespaces(inodes: &[u64]) -> Vec<u32> {
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::metadata(Path::new("/proc").join(pid.to_string()).join("ns/net"))
                .is_ok_and(|m| inodes.contains(&m.ino()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_identify_and_stop_a_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let rec = ProcRecord::of(child.id(), "test sleeper").unwrap();
        assert!(rec.is_running());
        let reused = ProcRecord {
            start_ticks: rec.start_ticks + 1,
            ..rec.clone()
        };
        assert!(
            !reused.is_running(),
            "a different start time is another process"
        );
        assert!(!stop(&reused, None, Duration::from_millis(10)));
        assert!(
            rec.is_running(),
            "stopping a stale record leaves the real process alone"
        );
        assert!(stop(&rec, Some(&mut child), Duration::from_secs(2)));
        assert!(!rec.is_running());
    }
}
