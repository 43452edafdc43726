//! Shared by the lab's root tests: the permission check that fails under CI instead of
//! skipping, a lock that runs them one at a time (they measure rates and delays on a shared
//! 2-core machine and would disturb each other), private prefixes and state directories, and
//! running programs inside a lab's namespaces.

#![allow(dead_code)]

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use xbench::report::TestReport;
use xbench_lab::sys::netns::{self, Detach};
use xbench_lab::{Lab, LabSpec, PathInfo, PathSpec};

pub const XBENCH: &str = env!("CARGO_BIN_EXE_xbench");

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// False (after saying why) when this process cannot build labs; under `CI=true` a panic,
/// because CI must run these tests, never skip them.
pub fn root_or_skip(test: &str) -> bool {
    match xbench_lab::sys::privilege::check() {
        Ok(()) => true,
        Err(e) if ci() => panic!("{test} needs root and CI=true forbids skipping it: {e}"),
        Err(e) => {
            eprintln!("skipping {test}: {e}");
            false
        }
    }
}

/// The path of `program`, or (outside CI) `None` after saying which package provides it.
pub fn program_or_skip(test: &str, program: &str, package: &str) -> Option<PathBuf> {
    match xbench_lab::sys::cmd::which(program) {
        Some(p) => Some(p),
        None if ci() => panic!("{test} needs {program}: apt-get install {package}"),
        None => {
            eprintln!("skipping {test}: no {program} (apt-get install {package})");
            None
        }
    }
}

/// Held for the whole of a root test.
pub struct Serial(File);

/// Waits until no other root lab test (of any test binary) runs.
pub fn serial() -> Serial {
    let f = File::create(std::env::temp_dir().join("xbench-lab-root-tests.lock")).unwrap();
    // SAFETY: flock on an open descriptor; blocks until the lock is ours.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    Serial(f)
}

/// State directory of `test`, emptied.
pub fn state_dir(test: &str) -> PathBuf {
    let d = PathBuf::from(format!("/run/xbench-lab-tests/{test}"));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A spec whose names and state belong to `test` alone, with servers and delay lines run by
/// this build's `xbench` (as `xbench lab up` does).
pub fn spec(test: &str, prefix: &str, paths: Vec<PathSpec>) -> LabSpec {
    let mut s = LabSpec::new(paths);
    s.prefix = prefix.to_owned();
    s.state_dir = state_dir(test);
    s.command = format!("test {test}");
    s.xbench = Some(PathBuf::from(XBENCH));
    s
}

/// Builds the lab of `spec`, or fails the test saying why.
pub fn up(spec: &LabSpec) -> Lab {
    Lab::up(spec, &AtomicBool::new(false)).unwrap_or_else(|e| panic!("lab up: {e}"))
}

/// Namespaces that start with `prefix`.
pub fn netns_with(prefix: &str) -> Vec<String> {
    netns::list()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Runs `program args` inside namespace `ns` to completion.
pub fn run_in(ns: &str, program: &str, args: &[&str]) -> Output {
    let mut c = Command::new(program);
    c.args(args).stdin(Stdio::null());
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    netns::spawn_in(ns, &mut c, Detach::No)
        .unwrap()
        .wait_with_output()
        .unwrap()
}

/// `xbench client` over path `p` with `args`, parsed from its `--json` output.
pub fn xbench_client(p: &PathInfo, args: &[&str]) -> TestReport {
    let addr = p.server_addr.to_string();
    let port = p.server_port.to_string();
    let mut all = vec!["client", &addr, "-p", &port, "--json"];
    all.extend(args);
    let out = run_in(&p.client_netns, XBENCH, &all);
    assert!(
        out.status.success(),
        "xbench client {all:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// iperf3's receiver rate over path `p` (a one-off iperf3 server in the server namespace).
pub fn iperf3_bps(iperf3: &Path, p: &PathInfo, secs: u32) -> f64 {
    iperf3_bps_with(iperf3, p, secs, &[])
}

/// iperf3's receiver rate over path `p` with extra client flags (`-P 16`, `-R`).
pub fn iperf3_bps_with(iperf3: &Path, p: &PathInfo, secs: u32, extra: &[&str]) -> f64 {
    let v = iperf3_json(iperf3, p, secs, extra);
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no sum_received in iperf3's report: {v}"))
}

/// iperf3's `-J` report of a test over path `p` with extra client flags (a one-off iperf3
/// server in the server namespace).
pub fn iperf3_json(iperf3: &Path, p: &PathInfo, secs: u32, extra: &[&str]) -> serde_json::Value {
    let port = "5301";
    let addr = p.server_addr.to_string();
    let mut server = Command::new(iperf3);
    server
        .args(["-s", "-1", "-B", &addr, "-p", port])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut server = netns::spawn_in(&p.server_netns, &mut server, Detach::No).unwrap();
    // Not by connecting: a one-off iperf3 server would take the probe for its test.
    wait_listening(&p.server_netns, p.server_addr, 5301);
    let secs = secs.to_string();
    let mut args = vec!["-c", &addr, "-p", port, "-t", &secs, "-J"];
    args.extend(extra);
    let out = run_in(&p.client_netns, iperf3.to_str().unwrap(), &args);
    // A one-off server exits after its test; after a failed client it would wait for ever.
    let until = Instant::now() + Duration::from_secs(10);
    while server.try_wait().ok().flatten().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = server.kill();
    let _ = server.wait();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 output ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `xbench client` over path `p` with `args`: its `--json` report as a JSON value (for the
/// parts a test reads by name, like `udp`).
pub fn xbench_json(p: &PathInfo, args: &[&str]) -> serde_json::Value {
    let addr = p.server_addr.to_string();
    let port = p.server_port.to_string();
    let mut all = vec!["client", &addr, "-p", &port, "--json"];
    all.extend(args);
    let out = run_in(&p.client_netns, XBENCH, &all);
    assert!(
        out.status.success(),
        "xbench client {all:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until something listens on `addr:port` in namespace `ns` (from /proc/net/tcp).
pub fn wait_listening(ns: &str, addr: Ipv4Addr, port: u16) {
    let want = format!("{:08X}:{:04X}", u32::from_le_bytes(addr.octets()), port);
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let tcp = netns::read_proc_net(ns, "tcp").unwrap();
        if tcp.lines().any(|l| {
            l.split_whitespace().nth(1) == Some(&want) && l.split_whitespace().nth(3) == Some("0A")
        }) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on {addr}:{port} in {ns}");
}

/// Client-to-server receiver rate and retransmits of a report.
pub fn up_figures(r: &TestReport) -> (f64, u64) {
    let d = &r.summary.directions[0];
    (d.receiver.unwrap().bits_per_second, d.retransmits)
}
