//! `xbench client --rr -u` as a user runs it against the in-process server: JSON that
//! validates against the committed schema with nothing lost, the text's loss lines, netperf's
//! fields, and the usage errors of bad settings (exit 2).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use serde_json::Value;

use common::{assert_usage_errors, assert_valid, xbench};

fn schema() -> Value {
    serde_json::from_str(include_str!("../../xbench/schema/report.schema.json")).unwrap()
}

fn run(args: &[&str]) -> String {
    let out = xbench()
        .args(["client", "--local", "--rr", "-u"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn udp_rr_json_validates_and_counts_every_request_at_both_ends() {
    let doc: Value = serde_json::from_str(&run(&[
        "-J", "-t", "0.6", "-i", "0.2", "--flows", "2", "-r", "32,200",
    ]))
    .unwrap();
    assert_valid(&schema(), &doc);
    let rr = &doc["spec"]["workload"]["request_response"];
    assert_eq!(rr["udp"]["timeout"], 1.0);
    assert_eq!(
        (rr["request_len"].as_u64(), rr["response_len"].as_u64()),
        (Some(32), Some(200))
    );
    let s = &doc["rr"]["summary"];
    let u = &s["udp"];
    assert_eq!(u["lost"], 0, "{u}");
    assert_eq!(s["server_transactions"], s["total_transactions"], "{s}");
    assert_eq!(u["total_requests"], s["total_transactions"], "{s}");
    assert!(s["transactions"].as_u64().unwrap() > 100, "{s}");
    for iv in doc["rr"]["intervals"].as_array().unwrap() {
        assert_eq!(iv["lost"], 0, "{iv}");
    }
    assert_eq!(doc["streams"].as_array().unwrap().len(), 2);
}

#[test]
fn udp_rr_text_and_fields_say_what_was_lost() {
    let text = run(&["-t", "0.5", "--rr-timeout", "200ms"]);
    assert!(
        text.contains("Test: UDP request/response, 1 flow, 24-byte requests"),
        "{text}"
    );
    assert!(text.contains("lost after 0.200 s unanswered"), "{text}");
    assert!(text.contains("Lost"), "{text}");
    assert!(text.contains("lost: 0 of "), "{text}");
    assert!(
        text.contains("every transaction counted at both ends"),
        "{text}"
    );
    let keyval = run(&[
        "-t",
        "0.3",
        "--fields",
        "lost_requests,lost_percent,p99_latency",
        "--fields-format",
        "keyval",
    ]);
    assert!(keyval.contains("LOST_REQUESTS=0\n"), "{keyval}");
    assert!(keyval.contains("LOST_PERCENT=0.000\n"), "{keyval}");
}

#[test]
fn bad_udp_rr_settings_are_usage_errors() {
    assert_usage_errors(
        &["client", "--local", "--rr", "-u"],
        &[
            (
                &["-r", "23,24"],
                "between 24 bytes (xbench's header) and 65507",
            ),
            (&["-r", "24,65508"], "65507 bytes"),
            (&["--rr-timeout", "0"], "must be greater than 0"),
            (&["--rr-timeout", "61"], "--rr-timeout: 61s is out of range"),
            (&["-b", "1M"], "pace them with --rate"),
            (&["--flows", "1,2"], "cannot be swept yet"),
            (&["-l", "100"], "cannot be used with"),
        ],
    );
    assert_usage_errors(
        &["client", "--local"],
        &[
            (
                &["--crr", "-u"],
                "for UDP request/response latency use --rr -u",
            ),
            (&["--rr", "--rr-timeout", "1"], "--udp"),
        ],
    );
}
