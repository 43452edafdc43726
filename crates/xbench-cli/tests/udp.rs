//! `xbench client -u` as a user runs it against the in-process server: exact counts in every
//! direction, with and without a key, JSON that validates against the committed schema, the
//! iperf3-style text, and the usage errors of bad UDP settings.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use serde_json::Value;

use common::{TempDir, assert_usage_errors, assert_valid, xbench};

fn schema() -> Value {
    serde_json::from_str(include_str!("../../xbench/schema/report.schema.json")).unwrap()
}

/// Runs `xbench client --local -u ARGS -J` and returns its report, checked against the schema.
fn run_json(args: &[&str]) -> Value {
    let out = xbench()
        .args(["client", "--local", "-u", "-J"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    doc
}

/// Every direction of the report: each datagram sent arrived once, nothing lost, reordered
/// or duplicated.
fn assert_exact(doc: &Value, directions: usize) {
    let dirs = doc["udp"]["directions"].as_array().unwrap();
    assert_eq!(dirs.len(), directions, "{doc}");
    for d in dirs {
        let f = &d["figures"];
        let sent = f["sent"]["datagrams"].as_u64().unwrap();
        let r = &f["received"];
        assert!(sent > 0, "{d}");
        assert_eq!(r["count"]["datagrams"].as_u64(), Some(sent), "{d}");
        assert_eq!(r["count"]["bytes"], f["sent"]["bytes"], "{d}");
        for k in ["lost", "out_of_order", "duplicates", "rxq_drops"] {
            assert_eq!(r[k].as_u64(), Some(0), "{k}: {d}");
        }
    }
}

#[test]
fn udp_json_is_exact_and_valid_in_every_direction() {
    for (dir, n) in [(None, 1), (Some("-R"), 1), (Some("--bidir"), 2)] {
        let mut args = vec!["-b", "8M", "-l", "1000", "-t", "1", "-P", "2"];
        args.extend(dir);
        let doc = run_json(&args);
        assert_exact(&doc, n);
        assert_eq!(
            doc["spec"]["workload"]["throughput"]["udp"]["bitrate"],
            8_000_000
        );
        assert_eq!(doc["udp"]["directions"][0]["streams"], 2);
        assert_eq!(doc["summary"]["measured_s"], 1.0);
    }
}

/// The schema of one `--json-stream` line (as in `cli.rs`): the root's `stream_event`, with
/// the report moved under `$defs` so `#` references resolve.
fn event_schema() -> Value {
    let root = schema();
    let mut defs = root["$defs"].clone();
    let mut report = root.clone();
    for k in ["$defs", "$schema", "$id"] {
        report.as_object_mut().unwrap().remove(k);
    }
    defs["report"] = report;
    let s = serde_json::json!({"$schema": root["$schema"], "$defs": defs, "$ref": "#/$defs/stream_event"})
        .to_string()
        .replace(r##""$ref":"#""##, r##""$ref":"#/$defs/report""##);
    serde_json::from_str(&s).unwrap()
}

#[test]
fn udp_json_stream_events_are_valid_and_carry_udp_intervals() {
    let out = xbench()
        .args([
            "client",
            "--local",
            "-u",
            "-b",
            "4M",
            "-t",
            "1",
            "-i",
            "0.25",
            "--json-stream",
            "--bidir",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let schema = event_schema();
    let mut kinds = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        assert_valid(&schema, &ev);
        kinds.push(ev["event"].as_str().unwrap().to_owned());
    }
    let intervals = kinds.iter().filter(|k| *k == "udp_interval").count();
    assert!(intervals >= 3, "{kinds:?}");
    assert_eq!(kinds.first().map(String::as_str), Some("start"));
    assert_eq!(kinds.last().map(String::as_str), Some("end"));
}

#[test]
fn udp_with_a_pre_shared_key() {
    let dir = TempDir::new("udp-psk");
    let key = dir.0.join("key");
    std::fs::write(&key, "a udp key of enough bytes\n").unwrap();
    let doc = run_json(&[
        "-b",
        "4M",
        "-t",
        "1",
        "--bidir",
        "--psk-file",
        key.to_str().unwrap(),
    ]);
    assert_exact(&doc, 2);
}

#[test]
fn udp_text_reads_like_iperf3s() {
    let out = xbench()
        .args([
            "client", "--local", "-u", "-b", "2M", "-t", "1", "-l", "2000",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        text.contains("Jitter") && text.contains("Lost/Total Datagrams"),
        "{text}"
    );
    assert!(text.contains("of 2.00 Mbit/s asked"), "{text}");
    assert!(
        text.contains("Datagrams moved with: client sends: "),
        "{text}"
    );
    assert!(
        err.contains("1500-byte MTU"),
        "the fragmentation warning: {err}"
    );
}

#[test]
fn an_unpaced_udp_test_never_counts_more_than_it_sent() {
    let doc = run_json(&["-b", "0", "-l", "64", "-t", "1"]);
    let d = &doc["udp"]["directions"][0];
    let sent = d["figures"]["sent"]["datagrams"].as_u64().unwrap();
    let got = d["figures"]["received"]["count"]["datagrams"]
        .as_u64()
        .unwrap();
    let lost = d["figures"]["received"]["lost"].as_u64().unwrap();
    assert!(sent > 10_000, "{d}");
    assert!(got <= sent && got + lost == sent, "{d}");
    assert!(d["asked_bits_per_second"].is_null());
}

#[test]
fn bad_udp_settings_are_usage_errors() {
    assert_usage_errors(
        &["client", "--local", "-u"],
        &[
            (&["-b", "1k"], "below one 1448-byte datagram per second"),
            (
                &["-P", "4", "-b", "40k"],
                "below one 1448-byte datagram per second",
            ),
            (&["-l", "23"], "between 24 bytes"),
            (&["-l", "65508"], "65507 bytes"),
            (&["--crr"], "cannot be used with"),
            (&["-Z"], "cannot be used with"),
            (&["-n", "1M"], "cannot be used with"),
            // A sweep refuses a cell the server would refuse, before the first run.
            (
                &["-b", "1M,1k", "--repeat", "2"],
                "below one 1448-byte datagram per second",
            ),
            (&["-l", "1400,23", "-b", "1M"], "between 24 bytes"),
        ],
    );
}

/// `-b RATE/stream` is iperf3's per-stream rate: `-P 4 -b 100M/stream` offers 400 Mbit/s in
/// total, and each of the four streams is paced at 100.
///
/// What the senders' schedule offered is checked, not what they got out: on a loaded machine
/// a sender skips the slots it fell behind on rather than burst, and says so (two copies of
/// this test and two busy loops: 316, 260, 166 Mbit/s sent of 400). Sent plus skipped is the
/// schedule whatever the load; a rate split wrongly between the streams, or slots skipped
/// without being counted, still fails.
#[test]
fn a_per_stream_rate_offers_four_times_as_much_with_four_streams() {
    let doc = run_json(&["-P", "4", "-b", "100M/stream", "-t", "0.5", "-l", "1400"]);
    assert_eq!(
        doc["spec"]["workload"]["throughput"]["udp"]["bitrate"],
        400_000_000
    );
    let d = &doc["udp"]["directions"][0];
    assert_eq!(d["asked_bits_per_second"], 400e6);
    let window = doc["summary"]["measured_s"].as_f64().unwrap();
    assert_eq!(window, 0.5);
    // Slots of the schedule in the window (sent or skipped), as a rate.
    let scheduled = |f: &Value| {
        let sent = f["sent"]["datagrams"].as_u64().unwrap();
        let slots = sent + f["slipped"].as_u64().unwrap();
        assert!(sent > 0, "{f}");
        let bits = f["sent"]["bytes"].as_u64().unwrap() as f64 * 8.0 / sent as f64;
        slots as f64 * bits / window
    };
    let total = scheduled(&d["figures"]);
    assert!(
        (total / 400e6 - 1.0).abs() < 0.01,
        "scheduled {total} bit/s of 400 Mbit/s"
    );
    let per_stream: Vec<f64> = d["per_stream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| scheduled(&s["figures"]))
        .collect();
    assert_eq!(per_stream.len(), 4);
    for s in per_stream {
        assert!(
            (s / 100e6 - 1.0).abs() < 0.01,
            "a stream's schedule offered {s} bit/s of 100 Mbit/s"
        );
    }
}
