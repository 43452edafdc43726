//! Issue 31: each cause of a rate put in place on loopback, and the diagnosis names exactly
//! that cause. A receiver that reads slowly and a busy sender are made by starving one end of
//! CPU: it is pinned (`taskset`) to a core beside a busy loop and runs at `nice 19`, so it gets
//! a sliver of that core however loaded the machine is, while the other end runs on the other
//! core; the verdict, not a rate, is checked. Also: an iperf3 server is never called
//! "receive-window limited", and `xbench report` diagnoses saved runs.
//!
//! The starving tests need two CPUs, `taskset` and `nice` (util-linux, coreutils); the iperf3
//! ones need `iperf3` (CI installs it). Each test here runs alone (a lock), since a busy loop
//! pinned by one would starve another's end.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion
#![allow(clippy::print_stderr)] // the diagnosis, for the test log

mod common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{TempDir, xbench};

const XBENCH: &str = env!("CARGO_BIN_EXE_xbench");

static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

/// A child process killed on drop (servers, busy loops).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether this machine can starve one end: two CPUs, `taskset` and `nice`.
fn can_starve(test: &str) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let tools = ["taskset", "nice"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if cpus >= 2 && tools {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "{test}: CI has two CPUs, taskset and nice"
    );
    eprintln!("skipping {test}: needs 2 CPUs, taskset and nice ({cpus} CPUs)");
    false
}

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

/// How a process is started: on which CPU, and whether starved of it.
#[derive(Clone, Copy)]
enum Place {
    Anywhere,
    /// Pinned to this CPU, ahead of anything else there at normal priority (`nice -10`;
    /// as root, which CI is): the end that must not be starved stays so when other work
    /// (a parallel build) shares its core. Elsewhere `nice` says it cannot and runs it as is.
    On(u32),
    /// Pinned to this CPU at `nice 19`, beside a busy loop the caller starts there.
    StarvedOn(u32),
}

fn command(place: Place, program: &str) -> Command {
    match place {
        Place::Anywhere => Command::new(program),
        Place::On(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string(), "nice", "-n", "-10", program]);
            c
        }
        Place::StarvedOn(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string(), "nice", "-n", "19", program]);
            c
        }
    }
}

/// A busy loop pinned to `cpu` at normal priority: whatever runs there at `nice 19` gets about
/// 1.5 % of the core (CFS weights 15 against 1024).
fn busy_loop(cpu: u32) -> Killed {
    Killed(
        Command::new("taskset")
            .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// A server (`xbench server` or `iperf3 -s`) on a free loopback port, up and listening.
fn server(place: Place, iperf3: bool) -> (Killed, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut c = if iperf3 {
        let mut c = command(place, "iperf3");
        c.args(["-s", "-B", "127.0.0.1", "-p", &p]);
        c
    } else {
        let mut c = command(place, XBENCH);
        c.args(["server", "-B", "127.0.0.1", "-p", &p]);
        c
    };
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !listening(port) {
        assert!(Instant::now() < until, "the server did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Killed(child), port)
}

/// `xbench client 127.0.0.1 -p PORT ARGS --json` run at `place`: its report and its text.
fn client(place: Place, port: Option<u16>, args: &[&str]) -> Value {
    let mut c = command(place, XBENCH);
    c.arg("client");
    if let Some(port) = port {
        c.args(["127.0.0.1", "-p", &port.to_string()]);
    }
    let out = c.args(args).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "xbench client {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The one direction's diagnosis, logged.
fn diagnosis(doc: &Value) -> &Value {
    let d = &doc["summary"]["directions"][0];
    eprintln!("{}", serde_json::to_string(&d["diagnosis"]).unwrap());
    &d["diagnosis"]
}

fn figure(d: &Value, name: &str) -> Option<f64> {
    d["figures"]
        .as_array()?
        .iter()
        .find(|f| f["name"] == name)?["value"]
        .as_f64()
}

/// `-w 8K` on loopback: a 16 KiB window under one 64 KiB segment stalls on window updates.
/// The rate is far below window ÷ RTT — the old summary's rule could not name this — and
/// the reader waits for data: the window's size, nothing else.
#[test]
fn a_tiny_window_on_loopback_is_the_receive_window() {
    let _alone = alone();
    let doc = client(Place::Anywhere, None, &["-w", "8K", "-t", "2"]);
    let d = diagnosis(&doc);
    assert_eq!(d["verdict"], "receive_window");
    assert_eq!(d["confidence"], "clear");
    assert!(figure(d, "window_segments").unwrap() < 4.0);
}

/// A receiving server starved of CPU (pinned beside a busy loop at `nice 19`, copying what it
/// reads), the sender on the other core: the window closed though its size allowed far more,
/// and the server's queue held the data. The receiver, and clearly — or, where the full queue
/// dropped segments, likely.
#[test]
fn a_starved_reader_is_the_receiver() {
    let name = "a_starved_reader_is_the_receiver";
    if !can_starve(name) {
        return;
    }
    let _alone = alone();
    let _busy = busy_loop(1);
    let (_server, port) = server(Place::StarvedOn(1), false);
    let doc = client(
        Place::On(0),
        Some(port),
        // No -O: the starved server's own controller would end its warm-up late.
        &["-t", "3", "--recv-copy"],
    );
    let d = diagnosis(&doc);
    assert_eq!(d["verdict"], "receiver", "{d}");
    // The reader's own figures say it fell behind: starved of its CPU.
    assert!(
        figure(d, "reader_waiting_for_cpu_pct").unwrap() >= 50.0,
        "{d}"
    );
    // Starved hard enough, the full queue drops segments (CI: 2.2 % retransmitted, the window
    // never closed): still the receiver, as likely, saying the losses could be the path's.
    // On a loaded machine the late ACKs may instead fill the sender's buffer, far larger
    // than the rate needs: the receiver again, as likely, from the buffer's figures.
    // Over loopback every drop is the receiving host's: the receiver too, as likely.
    let losses = d["cannot_tell"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["kind"] == "losses_or_reader" || u["kind"] == "loopback_drops");
    let via_buffer = figure(d, "send_buffer_ceiling_bps").is_some();
    let confidence = if losses || via_buffer {
        "likely"
    } else {
        "clear"
    };
    assert_eq!(d["confidence"], confidence, "{d}");
}

/// A sending client starved of CPU (pinned beside a busy loop at `nice 19`), the server on
/// the other core: TCP had room and nothing to send while the sending thread waited for a
/// CPU. The sender, and nothing else — not its buffer, which could carry far more, nor a
/// queue, though late ACKs inflate the loopback RTT.
#[test]
fn a_starved_sender_is_the_sender() {
    let name = "a_starved_sender_is_the_sender";
    if !can_starve(name) {
        return;
    }
    let _alone = alone();
    let _busy = busy_loop(0);
    let (_server, port) = server(Place::On(1), false);
    let doc = client(
        Place::StarvedOn(0),
        Some(port),
        &["-t", "3", "-O", "1", "-C", "cubic"],
    );
    let d = diagnosis(&doc);
    assert_eq!(d["verdict"], "sender");
    // Clear when it wanted a CPU more than it slept; likely when it slept more (for ACKs its
    // busy CPU processed late) on a buffer that could carry far more than the rate.
    let waiting = figure(d, "sender_waiting_for_cpu_pct").unwrap();
    assert!(waiting >= 10.0, "{d}");
}

/// Issue 31: `--iperf3 -P 2` against `iperf3 -s` on loopback printed "receive-window limited
/// … raise net.ipv4.tcp_rmem" with the window's ceiling nine times the rate. Never again: the
/// window's size is not named, and where the receiver is named, it is as "likely", saying
/// that an iperf3 server does not report its reader.
#[test]
fn an_iperf3_server_is_not_called_window_limited() {
    if !have_iperf3() {
        return;
    }
    let _alone = alone();
    let (_server, port) = server(Place::Anywhere, true);
    let mut c = Command::new(XBENCH);
    let text = c
        .args(["client", "127.0.0.1", "-p", &port.to_string()])
        .args(["--iperf3", "-P", "2", "-t", "3"])
        .output()
        .unwrap();
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    eprintln!("{text}");
    assert!(!text.contains("receive-window limited"), "{text}");
    assert!(!text.contains("limit: receive window"), "{text}");
    assert!(text.contains("  limit: "), "the verdict line: {text}");

    let doc = client(
        Place::Anywhere,
        Some(port),
        &["--iperf3", "-P", "2", "-t", "3"],
    );
    let d = diagnosis(&doc);
    assert_ne!(d["verdict"], "receive_window");
    if d["verdict"] == "receiver" {
        assert_eq!(d["confidence"], "likely");
        assert!(
            d["cannot_tell"]
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u["kind"] == "reader_unseen"),
            "{d}"
        );
    }
}

/// An iperf3 server starved of CPU: the sender's figures alone name the receiver (its window
/// closed, and spent the test under half its own largest), as "likely": iperf3 reports nothing
/// of its reader. On a loaded machine its late ACKs may instead inflate the RTT before its
/// window closes (16 ms on loopback, the window never shrunk): then a queue is the likely
/// reading, saying the reader was unseen — never a clear verdict.
#[test]
fn a_starved_iperf3_server_is_likely_the_receiver() {
    let name = "a_starved_iperf3_server_is_likely_the_receiver";
    if !have_iperf3() || !can_starve(name) {
        return;
    }
    let _alone = alone();
    let _busy = busy_loop(1);
    let (_server, port) = server(Place::StarvedOn(1), true);
    let doc = client(
        Place::On(0),
        Some(port),
        &["--iperf3", "-t", "3", "-O", "1"],
    );
    let d = diagnosis(&doc);
    assert_eq!(d["confidence"], "likely", "{d}");
    if d["verdict"] != "receiver" {
        assert_eq!(d["verdict"], "path_queue", "{d}");
        assert!(
            d["cannot_tell"]
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u["kind"] == "reader_unseen"),
            "{d}"
        );
    }
}

/// `xbench report` names each row's verdicts, and diagnoses a run saved before diagnoses
/// existed (its `diagnosis` removed) from the figures the file holds.
#[test]
fn report_diagnoses_saved_runs_even_without_a_stored_diagnosis() {
    let _alone = alone();
    let dir = TempDir::new("diagnosis-report");
    let save = dir.0.to_str().unwrap();
    let out = xbench()
        .args([
            "client", "-w", "8K", "-t", "2", "--label", "tiny", "--save", save,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::fs::read_dir(dir.0.join("tiny"))
        .unwrap()
        .flat_map(|cell| std::fs::read_dir(cell.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let stored = doc["summary"]["directions"][0]["diagnosis"]["verdict"].clone();
    assert_eq!(
        stored, "receive_window",
        "{}",
        doc["summary"]["directions"][0]["diagnosis"]
    );
    doc["summary"]["directions"][0]
        .as_object_mut()
        .unwrap()
        .remove("diagnosis");
    std::fs::write(&file, serde_json::to_vec(&doc).unwrap()).unwrap();

    let out = xbench()
        .args(["report", save, "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table: Value = serde_json::from_slice(&out.stdout).unwrap();
    let schema: Value = serde_json::from_str(include_str!(
        "../../xbench-report/schema/comparison.schema.json"
    ))
    .unwrap();
    common::assert_valid(&schema, &table);
    let limits = &table["throughput"][0]["limits"];
    assert_eq!(limits[0]["verdict"], stored, "{limits}");
    assert_eq!(limits[0]["runs"], 1);

    let out = xbench().args(["report", save]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("receive window size"), "{text}");
}
