//! `--under-load`'s JSON against the committed schema: the `--json` report's `under_load` and
//! the spec's `under_load`, and the `under_load_interval` lines of `--json-stream`, from a
//! short test against the in-process loopback server. The load is capped (`-b`) so the test
//! stays light on a busy machine.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::io::BufRead;

use serde_json::Value;

use common::{assert_valid, xbench};

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

/// Both directions loaded by one 50 Mbit/s stream each for a second, half a second idle on
/// each side, UDP and TCP probes; no host, so against an in-process loopback server.
const ARGS: &[&str] = &[
    "client",
    "--under-load",
    "both",
    "-t",
    "1",
    "--idle",
    "0.5",
    "-P",
    "1",
    "-b",
    "50M",
    "--tcp-probe",
];

/// Runs `xbench ARGS OUTPUT` to success and returns its stdout.
fn run(output: &str) -> Vec<u8> {
    let out = xbench().args(ARGS).arg(output).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// What every `--under-load both --tcp-probe` report must carry beyond the schema: probes
/// answered in each phase by both kinds of probe, and probes that are no load of their own.
fn assert_under_load(doc: &Value) {
    assert_eq!(doc["outcome"]["status"], "completed", "{}", doc["outcome"]);
    let spec = &doc["spec"]["workload"]["throughput"];
    assert_eq!(spec["direction"], "bidir");
    assert_eq!(spec["under_load"]["idle"], 0.5);
    assert_eq!(spec["under_load"]["tcp_probe"], true);
    let ul = &doc["under_load"];
    assert!(ul.is_object(), "no under_load in the report");
    for kind in ["udp", "tcp"] {
        for phase in ["idle", "loaded", "idle_after"] {
            let count = ul[kind][phase]["latency"]["count"].as_u64().unwrap_or(0);
            assert!(count > 0, "{kind} probes in the {phase} phase: {count}");
        }
    }
    let share = ul["probe_load"]["share_of_bulk_percent"].as_f64().unwrap();
    assert!(share < 1.0, "the probes are {share} % of the bulk rate");
    assert!(
        ul["timeline"].as_array().is_some_and(|t| !t.is_empty()),
        "an empty timeline"
    );
}

#[test]
fn under_load_json_report_validates_against_the_schema() {
    let doc: Value = serde_json::from_slice(&run("--json")).unwrap();
    assert_valid(&schema(), &doc);
    assert_under_load(&doc);
}

#[test]
fn under_load_json_stream_lines_each_validate() {
    let schema = event_schema();
    let lines: Vec<Value> = run("--json-stream")
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    for l in &lines {
        assert_valid(&schema, l);
    }
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events.first(), Some(&"start"), "{events:?}");
    assert_eq!(events.last(), Some(&"end"), "{events:?}");
    let end = events.iter().position(|e| *e == "end").unwrap();
    assert!(
        events[..end].contains(&"under_load_interval"),
        "no under_load_interval line before the end: {events:?}"
    );
    assert_under_load(&lines[end]["report"]);
}
