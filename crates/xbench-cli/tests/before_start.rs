//! What `xbench client` says before a test starts: a `--rate` one flow cannot keep (named,
//! with the flows that would carry it, before the first transaction), and which server
//! `--local` reached.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use serde_json::Value;

use common::xbench;

/// A transaction every microsecond is faster than any loopback round trip (tens of µs):
/// the warning comes before the `start` event and lands in the report.
#[test]
fn a_rate_faster_than_a_round_trip_is_named_before_the_test_starts() {
    let out = xbench()
        .args([
            "client",
            "--rr",
            "--rate",
            "1us",
            "-t",
            "0.3",
            "-i",
            "0",
            "--json-stream",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let is_warning = |e: &Value| {
        e["event"] == "warning"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("one flow completes at most"))
    };
    let warned = events
        .iter()
        .position(is_warning)
        .expect("the rate warning");
    let started = events
        .iter()
        .position(|e| e["event"] == "start")
        .expect("a start event");
    assert!(warned < started, "{events:#?}");
    let message = events[warned]["message"].as_str().unwrap();
    assert!(message.contains("every 1.0 µs (1000000/s)"), "{message}");
    assert!(message.contains("--flows "), "{message}");
    let report = &events.last().unwrap()["report"];
    assert!(
        report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("one flow completes at most")),
        "{report:#}"
    );

    // A rate one flow keeps with room to spare: no such warning.
    let out = xbench()
        .args(["client", "--rr", "--rate", "50", "-t", "0.3", "-i", "0"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("one flow completes at most"), "{err}");
}

#[test]
fn local_says_its_server_is_in_process_on_a_free_port() {
    for args in [
        &["client", "-t", "0.2", "-i", "0"][..],
        &["client", "--rr", "--local", "-t", "0.2", "-i", "0"],
    ] {
        let out = xbench().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with("Connected to the in-process server on 127.0.0.1 port ")
                && first.contains("on a free port"),
            "{args:?}: {first}"
        );
    }
}
