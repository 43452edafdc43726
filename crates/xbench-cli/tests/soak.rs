//! Soak: one `xbench server` process through 2,000 back-to-back tests and 200 clients killed
//! at random moments. Afterwards its descriptors and threads are back to their starting counts
//! and its resident memory has grown by less than [`RSS_BOUND_MIB`].
//!
//! Long, so `#[ignore]`d in plain `cargo test`; `scripts/test-all` runs it explicitly.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xbench::config::Direction;
use xbench::report::Outcome;
use xbench::{ClientConfig, EndCondition, TestSpec, Workload};

use common::ServerProc;

/// Resident memory may grow by this much over the soak: allocator caches and the runtime's
/// pools settle at a few MiB; a leak per test (say 2 KiB × 2,200 tests) would show as more.
const RSS_BOUND_MIB: u64 = 48;

/// What the soak reads of the server process: its open descriptors or threads, and its
/// resident memory.
trait Footprint {
    fn proc_count(&self, dir: &str) -> usize;
    fn rss_kib(&self) -> u64;
}

impl Footprint for ServerProc {
    fn proc_count(&self, dir: &str) -> usize {
        std::fs::read_dir(format!("/proc/{}/{dir}", self.child.id()))
            .unwrap()
            .count()
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    }
}

/// The soak's server: room for every test it runs at once, and a short idle timeout.
fn start_server() -> ServerProc {
    ServerProc::start(&[
        "--max-tests",
        "64",
        "--max-tests-per-client",
        "64",
        "--idle-timeout",
        "5",
    ])
}

/// A tiny deterministic generator: the seed is printed, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn quick_test(port: u16, i: u64) -> ClientConfig {
    let mut c = ClientConfig::new("127.0.0.1");
    c.port = port;
    c.spec = match i % 4 {
        // Request/response, a fraction of a second.
        3 => {
            let mut s = TestSpec::request_response();
            s.end = EndCondition::Duration(Duration::from_millis(50));
            s
        }
        k => {
            let mut s = TestSpec::throughput();
            s.end = EndCondition::Bytes(256 * 1024);
            if let Workload::Throughput(t) = &mut s.workload {
                t.direction = [
                    Direction::ClientToServer,
                    Direction::ServerToClient,
                    Direction::Bidir,
                ][k as usize];
            }
            s
        }
    };
    c.spec.interval = None;
    c
}

#[test]
#[ignore = "soak: about a minute; run with --ignored"]
fn soak_2000_tests_and_200_killed_clients_leave_no_trace() {
    let server = start_server();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let run = |c: ClientConfig| {
        rt.block_on(xbench::client::run(&c, &mut |_| {}, std::future::pending()))
            .unwrap()
    };
    // Warm up, so lazily built pools are in the baseline.
    for i in 0..40 {
        assert_eq!(run(quick_test(server.port, i)).outcome, Outcome::Completed);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (fds, threads, rss) = (
        server.proc_count("fd"),
        server.proc_count("task"),
        server.rss_kib(),
    );
    eprintln!("baseline: {fds} fds, {threads} threads, {rss} KiB resident");

    let started = Instant::now();
    for i in 0..2000 {
        let r = run(quick_test(server.port, i));
        assert_eq!(r.outcome, Outcome::Completed, "test {i}: {:?}", r.warnings);
    }
    eprintln!(
        "2000 back-to-back tests in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("killing clients with seed {seed}");
    let mut rng = Rng(seed);
    let kinds: [&[&str]; 4] = [&["-P", "4"], &["-R"], &["--rr", "--flows", "8"], &["--crr"]];
    for wave in 0..20 {
        let mut clients: Vec<(Child, u64)> = (0..10)
            .map(|_| {
                let child = Command::new(env!("CARGO_BIN_EXE_xbench"))
                    .args([
                        "client",
                        "127.0.0.1",
                        "-p",
                        &server.port.to_string(),
                        "-t",
                        "5",
                    ])
                    .args(kinds[rng.next(4) as usize])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                (child, rng.next(1500))
            })
            .collect();
        let t0 = Instant::now();
        clients.sort_by_key(|(_, at)| *at);
        for (c, at) in &mut clients {
            let at = Duration::from_millis(*at);
            if let Some(wait) = at.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            let _ = c.kill(); // SIGKILL: no goodbye, sockets closed by the kernel
            let _ = c.wait();
        }
        eprintln!("wave {wave}: 10 clients killed");
    }

    // Every killed client's test ends (control closed, or idle after 5 s) and is cleaned up.
    let until = Instant::now() + Duration::from_secs(30);
    while (server.proc_count("fd") > fds || server.proc_count("task") > threads)
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (fds2, threads2, rss2) = (
        server.proc_count("fd"),
        server.proc_count("task"),
        server.rss_kib(),
    );
    eprintln!("after: {fds2} fds, {threads2} threads, {rss2} KiB resident");
    assert!(fds2 <= fds, "descriptors leaked: {fds} -> {fds2}");
    assert!(
        threads2 <= threads,
        "threads leaked: {threads} -> {threads2}"
    );
    assert!(
        rss2.saturating_sub(rss) < RSS_BOUND_MIB * 1024,
        "resident memory grew {} KiB",
        rss2.saturating_sub(rss)
    );
    // And it still serves.
    assert_eq!(run(quick_test(server.port, 0)).outcome, Outcome::Completed);
}
