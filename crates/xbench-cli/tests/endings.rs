//! Tests that do not end by themselves, as a user meets them: Ctrl-C once, twice or many times
//! (during the test and while still connecting), and a server that dies mid-test. Every such
//! run leaves its `--json-file`, valid against the committed schema, and says what it lacks.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{ServerProc, TempDir, assert_valid, signal, xbench};

fn schema() -> Value {
    serde_json::from_str(include_str!("../../xbench/schema/report.schema.json")).unwrap()
}

/// The lines of a child's stdout, as they come.
fn lines(stdout: ChildStdout) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a `--json-stream` interval event: data is flowing and being measured.
fn wait_for_interval(rx: &Receiver<String>) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let line = rx
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .expect("an interval line within 15 s");
        if line.contains(r#""event":"interval""#) || line.contains(r#""event":"rr_interval""#) {
            return;
        }
    }
}

/// Waits for `child` to exit within `limit`; its status code and stderr.
fn exit_within(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (status.code(), err);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("xbench did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `--json-file` a run left, checked against the schema.
fn json_file(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("no {}: {e}", path.display()));
    let doc: Value = serde_json::from_slice(&text).unwrap();
    assert_valid(&schema(), &doc);
    doc
}

/// Starts `xbench client --local ARGS --json-stream --json-file FILE` and waits until data is
/// measured; the child, and its stdout lines (kept open: a closed stdout is `xbench | head`).
fn local_client(args: &[&str], file: &Path) -> (Child, Receiver<String>) {
    let mut child = xbench()
        .args(["client", "-t", "30", "--json-stream", "--json-file"])
        .arg(file)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(child.stdout.take().unwrap());
    wait_for_interval(&rx);
    (child, rx)
}

/// What the `--json-file` of an interrupted test must hold: outcome interrupted and what was
/// measured.
fn assert_measured_and_interrupted(doc: &Value, rr: bool) {
    assert_eq!(doc["outcome"]["status"], "interrupted", "{doc:#}");
    if rr {
        let n = doc["rr"]["summary"]["transactions"].as_u64().unwrap();
        assert!(n > 0, "transactions measured: {doc:#}");
    } else {
        // The client's own end of the first direction: its sender, or with -R its receiver.
        // The other end's figures come from the server, which a client that stopped waiting
        // (a second Ctrl-C) may not have.
        let d = &doc["summary"]["directions"][0];
        let own = if d["direction"] == "server_to_client" {
            &d["receiver"]
        } else {
            &d["sender"]
        };
        let bytes = own["bytes"].as_u64().unwrap_or(0);
        assert!(bytes > 0, "bytes measured at the client: {doc:#}");
    }
}

#[test]
fn two_ctrl_c_close_together_still_write_the_json_file() {
    let dir = TempDir::new("two-ctrl-c");
    for (name, args, rr) in [
        ("tp", &[][..], false),
        ("reverse", &["-R"][..], false),
        ("rr", &["--rr"][..], true),
    ] {
        let file = dir.0.join(format!("{name}.json"));
        let (child, _stdout) = local_client(args, &file);
        signal(&child, libc::SIGINT);
        std::thread::sleep(Duration::from_millis(10));
        signal(&child, libc::SIGINT);
        let (code, err) = exit_within(child, Duration::from_secs(8));
        // (Two signals this close may reach the process as one.)
        assert_eq!(code, Some(130), "{name}: {err}");
        assert_measured_and_interrupted(&json_file(&file), rr);
    }
}

#[test]
fn a_second_ctrl_c_stops_waiting_for_a_server_that_does_not_answer() {
    let dir = TempDir::new("second-ctrl-c");
    for (name, args, rr) in [("tp", &[][..], false), ("rr", &["--rr"][..], true)] {
        let server = ServerProc::start(&[]);
        let file = dir.0.join(format!("{name}.json"));
        let mut child = xbench()
            .args(["client", "127.0.0.1", "-p", &server.port.to_string()])
            .args(["-t", "30", "--json-stream", "--json-file"])
            .arg(&file)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        wait_for_interval(&stdout);
        // The server stops answering: after the first Ctrl-C the client would wait seconds
        // for its results.
        signal(&server.child, libc::SIGSTOP);
        signal(&child, libc::SIGINT);
        std::thread::sleep(Duration::from_millis(300));
        signal(&child, libc::SIGINT);
        let second = Instant::now();
        let (code, err) = exit_within(child, Duration::from_secs(10));
        let took = second.elapsed();
        signal(&server.child, libc::SIGCONT);
        assert_eq!(code, Some(130), "{name}: {err}");
        assert!(err.contains("interrupted twice"), "{name}: {err}");
        assert!(
            took < Duration::from_millis(2500),
            "{name}: {took:?} after the second Ctrl-C"
        );
        let doc = json_file(&file);
        assert_measured_and_interrupted(&doc, rr);
        assert!(
            doc["warnings"]
                .to_string()
                .contains("interrupted again while finishing"),
            "{name}: {doc:#}"
        );
    }
}

#[test]
fn any_number_of_ctrl_c_still_write_the_json_file() {
    let dir = TempDir::new("many-ctrl-c");
    for (name, args, rr) in [("tp", &["-P", "2"][..], false), ("rr", &["--rr"][..], true)] {
        let file = dir.0.join(format!("{name}.json"));
        let (child, _stdout) = local_client(args, &file);
        for _ in 0..6 {
            signal(&child, libc::SIGINT);
            std::thread::sleep(Duration::from_millis(3));
        }
        let (code, err) = exit_within(child, Duration::from_secs(8));
        assert_eq!(code, Some(130), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert_measured_and_interrupted(&json_file(&file), rr);
    }
}

#[test]
fn ctrl_c_while_connecting_writes_an_interrupted_document_with_nothing_measured() {
    let dir = TempDir::new("ctrl-c-connecting");
    // A listener that accepts and never speaks: the client waits for the server's preamble.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    for (name, presses) in [("once", 1), ("twice", 2), ("thrice", 3)] {
        let file = dir.0.join(format!("{name}.json"));
        let mut child = xbench()
            .args([
                "client",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "5",
                "--label",
                "path-a",
            ])
            .args(["--json", "--json-file"])
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Connected: the Ctrl-C handler is in place (it is installed before connecting).
        let (_conn, _) = silent.accept().unwrap();
        for _ in 0..presses {
            signal(&child, libc::SIGINT);
            std::thread::sleep(Duration::from_millis(5));
        }
        let stdout = child.stdout.take().unwrap();
        let (code, err) = exit_within(child, Duration::from_secs(3));
        assert_eq!(code, Some(130), "{name}: {err}");
        assert!(
            err.contains("interrupted while connecting"),
            "{name}: {err}"
        );
        let doc = json_file(&file);
        assert_eq!(doc["outcome"]["status"], "interrupted");
        assert_eq!(doc["label"], "path-a");
        assert_eq!(doc["host"], "127.0.0.1");
        assert!(
            doc["client_addr"].is_null() && doc["server"].is_null(),
            "{doc:#}"
        );
        assert_eq!(doc["summary"]["directions"], serde_json::json!([]));
        assert_eq!(doc["summary"]["measured_s"], 0.0);
        assert_eq!(doc["spec"]["end"]["duration"], 5.0);
        let warnings = doc["warnings"].to_string();
        assert!(
            warnings.contains("interrupted while connecting; nothing was measured"),
            "{warnings}"
        );
        // --json prints the same document.
        let printed: Value = serde_json::from_reader(stdout).unwrap();
        assert_eq!(printed, doc);
    }
}

#[test]
fn a_server_that_dies_names_the_missing_figures_by_direction() {
    let dir = TempDir::new("server-dies");
    for (name, args, missing, present) in [
        (
            "reverse",
            &["-R"][..],
            &["sender figures of the server→client streams"][..],
            &["client→server"][..],
        ),
        (
            "bidir",
            &["--bidir"][..],
            &[
                "receiver figures of the client→server streams",
                "sender figures of the server→client streams",
            ][..],
            &[][..],
        ),
        (
            "forward",
            &[][..],
            &["receiver figures of the client→server streams"][..],
            &["server→client"][..],
        ),
    ] {
        let mut server = ServerProc::start(&[]);
        let file = dir.0.join(format!("{name}.json"));
        let mut child = xbench()
            .args(["client", "127.0.0.1", "-p", &server.port.to_string()])
            .args(["-t", "30", "--json-stream", "--json-file"])
            .arg(&file)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        wait_for_interval(&stdout);
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        let (code, err) = exit_within(child, Duration::from_secs(20));
        assert_eq!(code, Some(1), "{name}: {err}");
        let doc = json_file(&file);
        assert_eq!(doc["outcome"]["status"], "failed", "{name}");
        let warning = doc["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .find(|w| w.contains("results never arrived"))
            .unwrap_or_else(|| panic!("{name}: no missing-results warning: {doc:#}"))
            .to_owned();
        assert!(err.contains(&warning), "{name}: printed too: {err}");
        for m in missing {
            assert!(warning.contains(m), "{name}: `{m}` in {warning}");
        }
        for p in present {
            assert!(!warning.contains(p), "{name}: not `{p}` in {warning}");
        }
        // Issue 30: what never arrived is null, not 0: the server's sender figures of its
        // streams, its receiver figures of ours.
        for d in doc["summary"]["directions"].as_array().unwrap() {
            let theirs = match d["direction"].as_str().unwrap() {
                "server_to_client" => "sender",
                _ => "receiver",
            };
            assert!(d[theirs].is_null(), "{name}: {theirs} of {d:#}");
            for s in d["per_stream"].as_array().unwrap() {
                assert!(s[theirs].is_null(), "{name}: {theirs} of {s:#}");
            }
        }
    }
}

/// Issue 30: `kill -STOP` of the server during `-P 2 -t 5` ended with exit 0, outcome
/// "completed" and null receiver figures. A server that stops answering fails the test, and
/// the document says what is missing and why; UDP the same. (Request/response flows already
/// fail when the server stops answering them.)
#[test]
fn a_stopped_server_is_a_failed_test_that_says_what_is_missing() {
    let dir = TempDir::new("server-stops");
    let runs: Vec<_> = [
        (
            "tcp",
            &["-P", "2"][..],
            "receiver figures of the client→server streams",
        ),
        (
            "udp",
            &["-u", "-b", "10M"][..],
            "what it received of the client→server",
        ),
    ]
    .into_iter()
    .map(|(name, args, missing)| {
        let file = dir.0.join(format!("{name}.json"));
        std::thread::spawn(move || {
            let server = ServerProc::start(&[]);
            let mut child = xbench()
                .args(["client", "127.0.0.1", "-p", &server.port.to_string()])
                .args(["-t", "2", "--json-stream", "--json-file"])
                .arg(&file)
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = lines(child.stdout.take().unwrap());
            let until = Instant::now() + Duration::from_secs(15);
            while !stdout
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .expect("an interval line within 15 s")
                .contains(r#"interval""#)
            {}
            signal(&server.child, libc::SIGSTOP);
            // The end, the drain (10 s) and the wait for the results (5 s more).
            let (code, err) = exit_within(child, Duration::from_secs(40));
            signal(&server.child, libc::SIGCONT);
            assert_eq!(code, Some(1), "{name}: {err}");
            let doc = json_file(&file);
            assert_eq!(doc["outcome"]["status"], "failed", "{name}: {doc:#}");
            let error = doc["outcome"]["error"].as_str().unwrap();
            assert!(error.contains("results never arrived"), "{name}: {error}");
            assert!(error.contains("sent nothing for"), "{name}: why: {error}");
            assert!(error.contains(missing), "{name}: what: {error}");
            assert!(
                err.contains("results never arrived"),
                "{name}: warned: {err}"
            );
            if name == "tcp" {
                assert!(doc["summary"]["directions"][0]["receiver"].is_null());
            }
        })
    })
    .collect();
    for r in runs {
        r.join().unwrap();
    }
}
