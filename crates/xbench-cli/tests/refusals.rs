//! Refusals as a user reads them: the reason on stderr and the exit status for it — a `--rate`
//! out of bounds (2, a usage error), a busy server (1, with what to do), a server that
//! cannot listen (1, naming every address it tried), and a server that takes fewer flows
//! than asked (1 naming its limit, or a measured run with `--allow-partial-flows`).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use common::{assert_usage_errors, xbench};
use serde_json::Value;

#[test]
fn a_rate_no_clock_reaches_is_a_usage_error_naming_the_flag_and_the_range() {
    assert_usage_errors(
        &["client", "--local", "--rr"],
        &[
            (&["--rate", "1e-300"], "--rate"),
            (&["--rate", "1e-300"], "out of range"),
            (
                &["--rate", "0.05", "-t", "10"],
                "at most this test's -t (10s)",
            ),
            (&["--rate", "20s", "-t", "10"], "one transaction every 20s"),
            (
                &["--rate", "1e12"],
                "at most 10000000 transactions per second",
            ),
        ],
    );
}

/// `xbench server ARGS` on a free loopback port; killed on drop.
struct ServerProc {
    child: Child,
    port: u16,
}

impl ServerProc {
    fn start(args: &[&str]) -> Self {
        let mut child = xbench()
            .args(["server", "-B", "127.0.0.1", "-p", "0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().rsplit(':').next().unwrap().parse().unwrap());
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server logs its address");
        ServerProc { child, port }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_client_refused_by_max_handshakes_reads_why_and_exits_1() {
    let server = ServerProc::start(&["--max-flows", "1", "--max-handshakes", "2"]);
    let addr = format!("127.0.0.1:{}", server.port);
    let silent: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        let out = xbench()
            .args([
                "client",
                "127.0.0.1",
                "-p",
                &server.port.to_string(),
                "-t",
                "1",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("the server is busy"), "{err}");
        assert!(err.contains("--max-handshakes"), "{err}");
        assert!(!err.contains("reset by peer"), "{err}");
    }
    drop(silent);
}

#[test]
fn a_server_that_cannot_listen_names_every_address_it_tried() {
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = xbench().args(["server", "-p", &port]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("[::]:{port}")), "{err}");
    assert!(err.contains(&format!("0.0.0.0:{port}")), "{err}");
    assert!(err.contains("in use"), "{err}");
}

/// `xbench client` against `server` for a `--rr` test of 50 flows, one second.
fn fifty_flows(server: &ServerProc, extra: &[&str]) -> std::process::Output {
    xbench()
        .args(["client", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["--rr", "--flows", "50", "-t", "1"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn a_server_taking_fewer_flows_than_asked_fails_the_test_naming_its_limit() {
    let server = ServerProc::start(&["--max-flows", "10"]);
    let out = fifty_flows(&server, &["--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("at most 10 (--max-flows)"), "{err}");
    assert!(err.contains("--allow-partial-flows"), "{err}");
}

#[test]
fn allow_partial_flows_measures_the_flows_the_server_takes_and_counts_the_rest_refused() {
    let server = ServerProc::start(&["--max-flows", "10"]);
    let out = fifty_flows(&server, &["--json", "--allow-partial-flows"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let setup = &doc["rr"]["setup"];
    assert_eq!(setup["requested"], 50, "{setup}");
    assert_eq!(setup["connected"], 10, "{setup}");
    assert_eq!(setup["refused"], 40, "{setup}");
    let sum: u64 = ["connected", "refused", "timed_out", "failed"]
        .iter()
        .map(|k| setup[k].as_u64().unwrap())
        .sum();
    assert_eq!(sum, 50, "{setup}");
    assert_eq!(setup["server_limit"], 10, "{setup}");
    assert_eq!(doc["rr"]["flows"].as_array().unwrap().len(), 10);
    assert!(doc["rr"]["summary"]["transactions"].as_u64().unwrap() > 0);
    let warned = doc["warnings"].as_array().unwrap().iter();
    assert!(
        warned
            .map(|w| w.as_str().unwrap())
            .any(|w| w.contains("took 10 of the 50 flows")),
        "{}",
        doc["warnings"]
    );

    // The human output says it on the setup line, and the header names the flows that ran.
    let out = fifty_flows(&server, &["--allow-partial-flows"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Test: request/response, 10 flows (of 50 asked: the server's --max-flows)"),
        "{text}"
    );
    assert!(
        text.contains("setup: 10 flows connected in")
            && text.contains("40 refused")
            && text.contains("the server's limit is 10 (--max-flows)"),
        "{text}"
    );
}
