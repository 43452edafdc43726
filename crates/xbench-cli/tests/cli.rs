//! The `xbench` binary as a user runs it: exit codes, messages, and JSON that validates against
//! the committed schema.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn xbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xbench"))
}

fn schema() -> Value {
    let text = include_str!("../../xbench/schema/report.schema.json");
    serde_json::from_str(text).unwrap()
}

/// The schema of one `--json-stream` line: the root's `$defs/stream_event`, with the report
/// (the root itself) moved under `$defs` so that `#` references still resolve.
fn event_schema() -> Value {
    let root = schema();
    let mut defs = root["$defs"].clone();
    let mut report = root.clone();
    report.as_object_mut().unwrap().remove("$defs");
    report.as_object_mut().unwrap().remove("$schema");
    report.as_object_mut().unwrap().remove("$id");
    defs["report"] = report;
    let s = serde_json::json!({
        "$schema": root["$schema"],
        "$defs": defs,
        "$ref": "#/$defs/stream_event",
    })
    .to_string()
    .replace(r##""$ref":"#""##, r##""$ref":"#/$defs/report""##);
    serde_json::from_str(&s).unwrap()
}

fn assert_valid(schema: &Value, doc: &Value) {
    let v = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn local_json_report_validates_against_the_schema() {
    let out = xbench()
        .args([
            "client", "-t", "1", "-P", "2", "-i", "0.5", "--json", "--label", "loopback",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    assert_eq!(doc["label"], "loopback");
    assert_eq!(doc["outcome"]["status"], "completed");
    let d = &doc["summary"]["directions"][0];
    assert_eq!(d["receiver"]["bytes"], d["sender"]["bytes"]);
    assert!(d["receiver"]["bits_per_second"].as_f64().unwrap() > 1e6);
}

#[test]
fn reverse_and_bidir_reports_validate() {
    for flag in ["-R", "--bidir"] {
        let out = xbench()
            .args(["client", "-t", "0.5", flag, "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_valid(&schema(), &doc);
    }
}

#[test]
fn json_stream_lines_each_validate_and_end_with_the_report() {
    let out = xbench()
        .args(["client", "-t", "1", "-i", "0.25", "--json-stream"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let schema = event_schema();
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    for l in &lines {
        assert_valid(&schema, l);
    }
    assert_eq!(lines.first().unwrap()["event"], "start");
    assert_eq!(lines.last().unwrap()["event"], "end");
    let intervals = lines.iter().filter(|l| l["event"] == "interval").count();
    assert!(intervals >= 4, "{intervals} interval events");
}

#[test]
fn text_output_explains_the_result() {
    let out = xbench().args(["client", "-t", "0.5"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("client→server:"), "{text}");
    assert!(text.contains("received"), "{text}");
    assert!(text.contains("sender busy"), "{text}");
    assert!(text.contains("CPU: client"), "{text}");
}

#[test]
fn bad_flags_are_usage_errors_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["-P", "0"], "--parallel"),
        (&["-P", "-1"], "--parallel"),
        (&["-t", "0"], "--time"),
        (&["-t", "-3"], "--time"),
        (&["-w", "256"], "no unit"),
        (&["-w", "10X"], "unknown unit"),
        (&["-n", "5Q"], "--bytes"),
        (&["-l", "-5"], "--length"),
        (&["-i", "0.01"], "--interval"),
        (&["-M", "20"], "--set-mss"),
        (&["-t", "1", "-n", "1G"], "--time"),
        (&["-R", "--bidir"], "--bidir"),
        (&["--local", "10.0.0.1"], "--local"),
    ];
    for (args, needle) in cases {
        let out = xbench().arg("client").args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn unreachable_servers_get_one_actionable_line_and_exit_1() {
    let port = free_port();
    let out = xbench()
        .args(["client", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("is `xbench server` running there?"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let out = xbench()
        .args(["client", "no-such-host.invalid", "-t", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot resolve `no-such-host.invalid` (port 5201)"),
        "{err}"
    );
}

/// A server process on a port it chose itself (port 0, read back from its log), killed on
/// drop. Its log lines are collected for assertions.
struct ServerProc {
    child: std::process::Child,
    port: u16,
    log: std::sync::mpsc::Receiver<String>,
}

impl ServerProc {
    fn start(extra: &[&str]) -> Self {
        let mut child = xbench()
            .args(["server", "-B", "127.0.0.1", "-p", "0"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, log) = std::sync::mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let until = Instant::now() + Duration::from_secs(10);
        let port = loop {
            let line = log
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .expect("server logs its address");
            if let Some(addr) = line.split("listening on ").nth(1) {
                break addr.trim().rsplit(':').next().unwrap().parse().unwrap();
            }
        };
        ServerProc { child, port, log }
    }

    fn port(&self) -> String {
        self.port.to_string()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(child: &std::process::Child, sig: libc::c_int) {
    // SAFETY: kill(2) on a child we spawned and have not yet reaped.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

#[test]
fn a_server_process_serves_clients_and_stops_cleanly_on_sigterm() {
    let mut server = ServerProc::start(&[]);
    let out = xbench()
        .args([
            "client",
            "127.0.0.1",
            "-p",
            &server.port(),
            "-t",
            "0.5",
            "-R",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    signal(&server.child, libc::SIGTERM);
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "server ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let log: Vec<String> = server.log.try_iter().collect();
    assert!(
        log.iter().any(|l| l.contains("test ended")),
        "one log line per test: {log:#?}"
    );
}

#[test]
fn one_off_server_exits_after_one_test() {
    let mut server = ServerProc::start(&["--one-off"]);
    let out = xbench()
        .args(["client", "127.0.0.1", "-p", &server.port(), "-t", "0.3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let until = Instant::now() + Duration::from_secs(10);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "--one-off server still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_prints_what_was_measured_and_exits_130() {
    let child = xbench()
        .args(["client", "-t", "30", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    signal(&child, libc::SIGINT);
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "slow to stop");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    assert_eq!(doc["outcome"]["status"], "interrupted");
    let rx = doc["summary"]["directions"][0]["receiver"]["bytes"]
        .as_u64()
        .unwrap();
    assert!(rx > 0);
}

#[test]
fn json_file_is_written_even_when_interrupted() {
    let dir = std::env::temp_dir().join(format!("xbench-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.json");
    let child = xbench()
        .args(["client", "-t", "30", "--json-file"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    signal(&child, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_valid(&schema(), &doc);
    assert_eq!(doc["outcome"]["status"], "interrupted");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_real_iperf3_client_is_told_this_is_not_its_server() {
    let Ok(probe) = Command::new("iperf3").arg("--version").output() else {
        assert!(std::env::var("CI").is_err(), "CI installs iperf3");
        return;
    };
    assert!(probe.status.success());
    let server = ServerProc::start(&[]);
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &server.port(), "-t", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("unable to create a new test"), "{text}");
    // And the server is still there for xbench clients.
    let ok = xbench()
        .args(["client", "127.0.0.1", "-p", &server.port(), "-t", "0.3"])
        .output()
        .unwrap();
    assert!(ok.status.success());
}

#[test]
fn live_text_lines_arrive_while_the_test_runs() {
    let mut child = xbench()
        .args(["client", "-t", "2", "-i", "0.5"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first_interval = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.contains("0.00-0.50"))
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{first_interval}"
    );
    for _ in lines {}
    assert!(child.wait().unwrap().success());
}
