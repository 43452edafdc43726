//! `xbench client --iperf3` against Debian's iperf3 server (3.12), each case beside iperf3's own
//! client against an iperf3 server on the same loopback path in the same test: the received
//! rates agree within 3 % (TCP; medians of three interleaved rounds), the same rate is asked
//! of both and every loss is one the kernel saw (UDP: see [`compare_udp_as`]). Rates are
//! capped with `-b` so loopback's speed and the machine's load do not decide the figure.
//! Also: `xbench client` without the flag finds out the server is iperf3 and says so, and
//! `--save` keeps the run.
//!
//! Needs the `iperf3` binary; CI installs it (scripts/test-all), elsewhere the tests say they
//! skipped.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion
#![allow(clippy::print_stderr)] // the measured figures, for the test log

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn have_iperf3() -> bool {
    let ok = Command::new("iperf3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var("CI").is_err(), "CI installs iperf3");
        eprintln!("iperf3 is not installed: skipped");
    }
    ok
}

/// An `iperf3 -s` on a free loopback port (`-1`: one test, then it exits), killed on drop.
struct Iperf3Server {
    child: Child,
    port: u16,
}

impl Iperf3Server {
    fn start(one_off: bool) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new("iperf3");
        cmd.args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()]);
        if one_off {
            cmd.arg("-1");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // iperf3 -s has no readiness signal: wait until it listens. A bare connect would
        // count as a failed test, so look for the listening socket instead.
        let until = Instant::now() + Duration::from_secs(5);
        while !listening(port) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        Iperf3Server { child, port }
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether something listens on 127.0.0.1:`port` (`/proc/net/tcp`, state 0A).
fn listening(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
        t.lines().any(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            f.len() > 3 && f[1] == want && f[3] == "0A"
        })
    })
}

fn xbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xbench"))
        .args(args)
        .output()
        .unwrap()
}

/// `xbench client --iperf3 --json` against a fresh iperf3 server: the report.
fn xbench_against_iperf3(args: &[&str]) -> Value {
    let server = Iperf3Server::start(true);
    let port = server.port.to_string();
    let mut all = vec!["client", "127.0.0.1", "-p", &port, "--iperf3", "--json"];
    all.extend_from_slice(args);
    let out = xbench(&all);
    assert!(
        out.status.success(),
        "xbench {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// iperf3's own client against a fresh iperf3 server: its `-J` output.
fn iperf3_against_iperf3(args: &[&str]) -> Value {
    let server = Iperf3Server::start(true);
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &server.port.to_string(), "-J"])
        .args(args)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].is_null(), "iperf3 {args:?}: {}", v["error"]);
    v
}

/// xbench's received rate per direction: (client→server, server→client), bits per second.
fn xbench_received(v: &Value) -> (Option<f64>, Option<f64>) {
    let mut out = (None, None);
    for d in v["summary"]["directions"].as_array().unwrap() {
        let bps = d["receiver"]["bits_per_second"].as_f64();
        match d["direction"].as_str().unwrap() {
            "client_to_server" => out.0 = bps,
            _ => out.1 = bps,
        }
    }
    out
}

fn assert_close(what: &str, xbench: f64, iperf3: f64) {
    let apart = (xbench - iperf3).abs() / iperf3;
    eprintln!(
        "{what}: xbench → iperf3 {:.2} Mbit/s, iperf3 → iperf3 {:.2} Mbit/s ({:.2} % apart)",
        xbench / 1e6,
        iperf3 / 1e6,
        apart * 100.0
    );
    assert!(apart < 0.03, "{what}: {:.2} % apart", apart * 100.0);
}

/// Rounds of each client in [`compare`]: a busy machine can stall either tool's pacing in one
/// run (beside parallel builds, iperf3 against itself once read 67 of 100 Mbit/s, and
/// xbench's kernel-paced sender, which does not burst to catch up as iperf3's does, 89); the
/// median of three interleaved rounds is a stall in two of them, not one.
const ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The same flags through both clients, [`ROUNDS`] rounds each, interleaved; the median
/// received rates within 3 %.
fn compare(args: &[&str]) {
    if !have_iperf3() {
        return;
    }
    // One measurement at a time: two rate-capped tests sharing two cores disturb each other
    // (iperf3's own client then overshoots its cap catching up after a stall).
    let _serial = MEASURING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let reverse = args.contains(&"-R");
    let bidir = args.contains(&"--bidir");
    let key = if bidir {
        "sum_received_bidir_reverse"
    } else {
        "sum_received"
    };
    let (mut ours, mut theirs) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for _ in 0..ROUNDS {
        let xb = xbench_against_iperf3(args);
        assert_eq!(xb["outcome"]["status"], "completed", "{}", xb["outcome"]);
        assert_eq!(xb["server"]["software"], "iperf3");
        let ip = iperf3_against_iperf3(args);
        let (c2s, s2c) = xbench_received(&xb);
        let end = &ip["end"];
        if !reverse {
            ours.0.push(c2s.unwrap());
            theirs
                .0
                .push(end["sum_received"]["bits_per_second"].as_f64().unwrap());
        }
        if reverse || bidir {
            ours.1.push(s2c.unwrap());
            theirs.1.push(end[key]["bits_per_second"].as_f64().unwrap());
        }
    }
    if !reverse {
        let what = format!("{args:?} client→server");
        assert_close(&what, median(ours.0), median(theirs.0));
    }
    if reverse || bidir {
        let what = format!("{args:?} server→client");
        assert_close(&what, median(ours.1), median(theirs.1));
    }
}

#[test]
fn xbench_p4_against_iperf3_within_3pct_of_iperf3() {
    compare(&["-t", "2", "-P", "4", "-b", "60M"]);
}

#[test]
fn xbench_reverse_against_iperf3_within_3pct_of_iperf3() {
    compare(&["-t", "2", "-R", "-P", "2", "-b", "80M"]);
}

#[test]
fn xbench_bidir_against_iperf3_within_3pct_of_iperf3() {
    compare(&["-t", "2", "--bidir", "-b", "100M"]);
}

#[test]
fn xbench_byte_count_against_iperf3_within_3pct_of_iperf3() {
    compare(&["-n", "20M", "-b", "100M"]);
    compare(&["-n", "20M", "-R", "-b", "100M"]);
    if have_iperf3() {
        let xb = xbench_against_iperf3(&["-n", "20M", "-b", "100M"]);
        assert_eq!(
            xb["summary"]["directions"][0]["receiver"]["bytes"].as_u64(),
            Some(20 << 20),
            "every byte reached iperf3's server before TEST_END"
        );
    }
}

#[test]
fn xbench_socket_options_and_omit_against_iperf3_within_3pct_of_iperf3() {
    compare(&[
        "-t", "2", "-O", "1", "-b", "100M", "-l", "16K", "-w", "512K", "-M", "1400", "-N", "-C",
        "reno",
    ]);
}

/// xbench's UDP figures in direction `dir`.
struct UdpFigures {
    /// What its sender asked for, bits per second.
    asked: f64,
    /// The rate its sender's schedule kept: the datagrams sent and the slots skipped after
    /// falling behind, at the sent rate's bits per datagram.
    scheduled: f64,
    sent: u64,
    received: u64,
    lost: u64,
}

fn xbench_udp(v: &Value, dir: &str) -> UdpFigures {
    let d = v["udp"]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["direction"] == dir)
        .unwrap_or_else(|| panic!("no {dir} in {}", v["udp"]));
    let (sent, got) = (&d["figures"]["sent"], &d["figures"]["received"]);
    let datagrams = sent["datagrams"].as_u64().unwrap();
    let slipped = d["figures"]["slipped"].as_u64().unwrap();
    UdpFigures {
        asked: d["asked_bits_per_second"].as_f64().unwrap(),
        scheduled: sent["bits_per_second"].as_f64().unwrap() * (datagrams + slipped) as f64
            / datagrams.max(1) as f64,
        sent: datagrams,
        received: got["count"]["datagrams"].as_u64().unwrap(),
        lost: got["lost"].as_u64().unwrap(),
    }
}

/// The kernel's count of datagrams dropped on the way in, whoever's: UDP's (`/proc/net/snmp`
/// `Udp: InErrors`, a full receive buffer above all) and the per-CPU input backlogs'
/// (`/proc/net/softnet_stat`, second column: loopback queues every packet there, and a
/// loaded CPU lets it overflow).
fn kernel_drops() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
    let at = names
        .split_whitespace()
        .position(|n| n == "InErrors")
        .unwrap();
    let in_errors: u64 = values.split_whitespace().nth(at).unwrap().parse().unwrap();
    let backlog: u64 = std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap()
        .lines()
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap())
        .sum();
    in_errors + backlog
}

/// The same UDP flags through both clients.
fn compare_udp(args: &[&str]) {
    compare_udp_as(args, args);
}

/// A UDP test as xbench's flags and iperf3's (which differ where `-b` does: xbench's is a
/// direction's total, iperf3's per stream), in every direction the test runs:
/// - the flags ask both tools for the same rate (xbench's asked rate, which it also asks of
///   iperf3's server, is iperf3's target times its streams), and where xbench sends, its
///   schedule (sent plus skipped) keeps it within 1 %;
/// - every datagram xbench counts lost is one the kernel dropped (a full receive buffer or
///   input backlog), and no more arrived than were sent.
///
/// These are the ground truths the rates stand on. Received rates are not compared with
/// iperf3's own: on a loaded machine iperf3's client falls behind its schedule and its
/// figures cover a window stretched by its late timers (47.9 Mbit/s of 50 with nothing lost,
/// 4.9 % from xbench's, in 1 of 6 runs at load 17), and xbench's own senders skip slots rather
/// than burst (up to 14 % short); iperf3 also drops at its server under load (49 of 4,889
/// from xbench, the kernel's drop counter agreeing). A pacer at the wrong rate, a rate split
/// wrongly, slots skipped without being counted (as `--iperf3 -u` once did, reporting none)
/// or datagrams counted as sent that never went all still fail here.
fn compare_udp_as(xbench_args: &[&str], iperf3_args: &[&str]) {
    if !have_iperf3() {
        return;
    }
    let _serial = MEASURING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let drops_before = kernel_drops();
    let xb = xbench_against_iperf3(xbench_args);
    let drops = kernel_drops() - drops_before;
    assert_eq!(xb["outcome"]["status"], "completed", "{}", xb["outcome"]);
    assert_eq!(xb["server"]["software"], "iperf3");
    let ip = iperf3_against_iperf3(iperf3_args);
    let test = &ip["start"]["test_start"];
    let target = test["target_bitrate"].as_f64().unwrap() * test["num_streams"].as_f64().unwrap();
    let reverse = xbench_args.contains(&"-R");
    let bidir = xbench_args.contains(&"--bidir");
    let mut checks = Vec::new();
    if !reverse {
        checks.push(("client_to_server", "sum_received"));
    }
    if bidir {
        checks.push(("server_to_client", "sum_received_bidir_reverse"));
    } else if reverse {
        checks.push(("server_to_client", "sum_received"));
    }
    for (dir, key) in checks {
        let x = xbench_udp(&xb, dir);
        let theirs = &ip["end"][key];
        eprintln!(
            "{xbench_args:?} {dir}: xbench scheduled {:.2} Mbit/s, sent {}, received {}, lost {} \
             (kernel drops {drops}); iperf3 → iperf3 received {:.2} Mbit/s, {} of {} lost",
            x.scheduled / 1e6,
            x.sent,
            x.received,
            x.lost,
            theirs["bits_per_second"].as_f64().unwrap() / 1e6,
            theirs["lost_packets"],
            theirs["packets"]
        );
        // The rate xbench asked iperf3's server for too, where it sends.
        assert_eq!(
            x.asked, target,
            "{xbench_args:?} {dir}: the same rate asked of both"
        );
        if dir == "client_to_server" {
            // xbench's own pacer; iperf3's server paces the other way by its own lights.
            let apart = (x.scheduled - x.asked).abs() / x.asked;
            assert!(
                apart < 0.01,
                "{xbench_args:?} {dir}: scheduled {:.2} Mbit/s of {:.2} asked",
                x.scheduled / 1e6,
                x.asked / 1e6
            );
        }
        assert!(x.sent > 0, "datagrams were sent");
        assert!(
            x.received + x.lost <= x.sent,
            "{xbench_args:?} {dir}: {} received and {} lost of {} sent",
            x.received,
            x.lost,
            x.sent
        );
        assert!(
            x.lost <= drops,
            "{xbench_args:?} {dir}: {} lost, but the kernel dropped only {drops}",
            x.lost
        );
    }
}

#[test]
fn xbench_udp_against_iperf3_keeps_the_rate_iperf3_asks_and_loses_only_what_the_kernel_dropped() {
    compare_udp(&["-u", "-b", "50M", "-t", "2"]);
}

#[test]
fn xbench_udp_reverse_against_iperf3_counts_what_iperf3_sent() {
    compare_udp(&["-u", "-R", "-b", "50M", "-t", "2"]);
}

#[test]
fn xbench_udp_two_streams_and_bidir_against_iperf3_keep_the_rate_iperf3_asks() {
    // xbench's -b is the direction's total unless it says /stream; iperf3's is per stream.
    compare_udp_as(
        &["-u", "-P", "2", "-b", "20M/stream", "-l", "1400", "-t", "2"],
        &["-u", "-P", "2", "-b", "20M", "-l", "1400", "-t", "2"],
    );
    compare_udp(&["-u", "--bidir", "-b", "30M", "-t", "2"]);
}

#[test]
fn xbench_finds_out_the_server_is_iperf3_and_says_so() {
    if !have_iperf3() {
        return;
    }
    // Not one-off: iperf3 starts over after our xbench greeting fails as a cookie.
    let server = Iperf3Server::start(false);
    let dir = std::env::temp_dir().join(format!("xbench-iperf3-save-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = server.port.to_string();
    let out = xbench(&[
        "client",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "1",
        "-b",
        "50M",
        "--save",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("is an iperf3 server, not xbench"),
        "the fallback is announced: {err}"
    );
    let saved = std::fs::read_dir(&dir).unwrap().count();
    assert!(saved > 0, "--save kept the run");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn iperf3_only_flags_are_usage_errors() {
    let out = xbench(&["client", "127.0.0.1", "--iperf3", "--rr"]);
    assert_eq!(out.status.code(), Some(2));
    let out = xbench(&["client", "127.0.0.1", "--iperf3", "-t", "1.5"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
