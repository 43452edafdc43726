//! `--connections-only` as a user runs it on loopback: held flows that stay open while new
//! connections are opened and timed, the JSON checked against the committed schema, a server
//! whose `--max-flows` refuses the held flows, and the flags it cannot take (exit 2).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use common::{ServerProc, assert_usage_errors, assert_valid, xbench};
use serde_json::Value;

fn schema() -> Value {
    serde_json::from_str(include_str!("../../xbench/schema/report.schema.json")).unwrap()
}

#[test]
fn held_flows_stay_open_while_new_connections_are_opened_counted_and_timed() {
    let out = xbench()
        .args(["client", "--local", "--connections-only", "--flows", "200"])
        .args(["--openers", "4", "-t", "2", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    let rr = &doc["rr"];
    let held = &rr["held"];
    assert_eq!(held["held"], 200, "{held}");
    assert_eq!(held["open_at_end"], 200, "{held}");
    assert_eq!(held["openers"], 4, "{held}");
    assert_eq!(rr["setup"]["connected"], 200, "{}", rr["setup"]);
    // The report's flows are the held ones; the openers' are the per-flow entries.
    let flows = &doc["spec"]["workload"]["request_response"]["flows"];
    assert_eq!(flows, 200, "{}", doc["spec"]);
    assert_eq!(rr["flows"].as_array().unwrap().len(), 4);

    let sum = &rr["summary"];
    let rate = sum["transactions_per_second"].as_f64().unwrap();
    assert!(rate > 0.0, "{sum}");
    // On loopback every attempt opens: none refused, timed out or reset, and every attempt
    // started (summary.connections) ended as an opened one.
    let o = &rr["opening"];
    assert_eq!(o["attempts"], sum["connections"], "{o} {sum}");
    assert_eq!(o["opened"], sum["transactions"], "{o} {sum}");
    for k in ["refused", "timed_out", "reset"] {
        assert_eq!(o[k], 0, "{k}: {o}");
    }
    assert_eq!(o["failed_percent"], 0.0, "{o}");
    assert_eq!(o["timeout_s"], 10.0, "the default --connect-timeout: {o}");
    // Every new connection is one transaction, counted as a connection by both ends.
    let opened = sum["connections"].as_u64().unwrap();
    assert!(opened >= sum["transactions"].as_u64().unwrap(), "{sum}");
    assert!(
        sum["server_connections"].as_u64().unwrap() >= opened,
        "{sum}"
    );
    let l = &sum["latency"];
    let p: Vec<f64> = [
        "min_us",
        "p50_us",
        "p90_us",
        "p99_us",
        "p99_9_us",
        "p99_99_us",
        "max_us",
    ]
    .iter()
    .map(|k| l[k].as_f64().unwrap_or_else(|| panic!("{k} in {l}")))
    .collect();
    assert!(p[0] > 0.0, "{l}");
    assert!(p.windows(2).all(|w| w[0] <= w[1]), "not monotone: {l}");
    // Intervals count connections too, and add up to about the total.
    let ivs = rr["intervals"].as_array().unwrap();
    assert!(ivs.len() >= 2, "{}", ivs.len());
    assert!(
        ivs.iter()
            .all(|iv| iv["transactions"].as_u64().unwrap() > 0)
    );
}

#[test]
fn the_text_output_names_connections_held_flows_and_setup_latency() {
    let out = xbench()
        .args(["client", "--local", "--connections-only", "--flows", "20"])
        .args(["-t", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for want in [
        "Test: connection rate, 20 flows held open, new connections opened 16 at a time",
        "Conn/s",
        "connections: ",
        " (connect() to first answer): min ",
        "held: 20 flows connected in",
        "held flows at the end: 20 of 20 answered, 0 closed, 0 reset, 0 unanswered",
        "Ref/TO/Reset",
        " opened, 0 refused, 0 timed out (no answer in 10.0 s), 0 reset before the answer: 0.0 % failed",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
    // The latency line's unit suits its figures: µs on an idle machine, ms when a loaded
    // one's tail reaches milliseconds.
    assert!(
        text.contains("setup µs (connect()") || text.contains("setup ms (connect()"),
        "{text}"
    );
}

#[test]
fn a_server_refusing_the_held_flows_fails_the_test_or_holds_what_it_takes() {
    let server = ServerProc::start(&["--max-flows", "30"]);
    let run = |extra: &[&str]| {
        xbench()
            .args(["client", "127.0.0.1", "-p", &server.port.to_string()])
            .args(["--connections-only", "--flows", "50", "-t", "1", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("at most 30 (--max-flows)"), "{err}");
    assert!(err.contains("--allow-partial-flows"), "{err}");

    let out = run(&["--allow-partial-flows"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    let (setup, held) = (&doc["rr"]["setup"], &doc["rr"]["held"]);
    assert_eq!(
        (&setup["requested"], &setup["connected"], &setup["refused"]),
        (&50.into(), &30.into(), &20.into()),
        "{setup}"
    );
    assert_eq!(setup["server_limit"], 30, "{setup}");
    assert_eq!(
        (&held["held"], &held["open_at_end"]),
        (&30.into(), &30.into())
    );
    // The openers' test (16 flows) is within the limit and ran.
    assert!(doc["rr"]["summary"]["transactions"].as_u64().unwrap() > 0);
}

#[test]
fn flags_a_connection_rate_test_cannot_take_are_usage_errors() {
    assert_usage_errors(
        &["client", "--local", "--connections-only"],
        &[
            (&["-u"], "--udp"),
            (&["-P", "2"], "--parallel"),
            (&["-R"], "--reverse"),
            (&["-n", "1M"], "--bytes"),
            (&["--rr"], "--rr"),
            (&["--crr"], "--crr"),
            (&["-r", "64,64"], "--rr-size"),
            (&["--burst", "2"], "--burst"),
            (&["--openers", "0"], "--openers"),
            (&["--flows", "1,2"], "--connections-only runs one test"),
        ],
    );
    assert_usage_errors(
        &["client", "--local", "--rr"],
        &[(
            &["--openers", "4"],
            "--openers applies to --connections-only",
        )],
    );
}
