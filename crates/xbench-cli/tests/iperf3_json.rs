//! `xbench client --json --json-format iperf3` against real iperf3 3.12 `-J` documents.
//!
//! The fixtures in `fixtures/iperf3/` are Debian's iperf3 3.12 on loopback
//! (`iperf3 -c 127.0.0.1 -t 2 -J [-R | --bidir | -P 4 | -O 1 | -u [-R | --bidir]]`, and one
//! against a closed port for `error.json`; `scripts/iperf3-json-fixtures` makes them). For each kind of test, xbench's document must have
//! the fixture's keys, recursively and with the same JSON types, except the differences listed
//! with their reason; its figures must be xbench's own (`--json-file` of the same run); and
//! xbench's iperf3 importer (`xbench report`) must read it back to the same figures.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use common::{TempDir, assert_usage_errors, xbench};

/// Every node of a document as (path, JSON type); array elements share the path `…[]`, so a
/// key present in any element counts once. Each object in an array also counts as
/// (path, its keys), so that elements of two kinds (a sending and a receiving stream) must
/// each have their own keys, not only the union of both.
fn shape(v: &Value) -> BTreeSet<(String, String)> {
    fn walk(v: &Value, path: &str, out: &mut BTreeSet<(String, String)>) {
        let kind = match v {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        out.insert((path.to_owned(), kind.to_owned()));
        if let (true, Value::Object(o)) = (path.ends_with("[]"), v) {
            let keys: Vec<&str> = o.keys().map(String::as_str).collect();
            out.insert((path.to_owned(), format!("object with {}", keys.join(","))));
        }
        match v {
            Value::Array(a) => a.iter().for_each(|e| walk(e, &format!("{path}[]"), out)),
            Value::Object(o) => o
                .iter()
                .for_each(|(k, e)| walk(e, &format!("{path}.{k}"), out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(v, "", &mut out);
    out
}

fn fixture(name: &str) -> Value {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/iperf3/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// Fails unless `ours` has `theirs`'s keys and types, apart from `allowed` (path, reason):
/// each allowed path must really differ, so the list cannot go stale.
fn assert_same_shape(kind: &str, ours: &Value, theirs: &Value, allowed: &[(&str, &str)]) {
    let (a, b) = (shape(ours), shape(theirs));
    let differ: BTreeSet<&(String, String)> = a.symmetric_difference(&b).collect();
    let unexplained: Vec<String> = differ
        .iter()
        .filter(|(p, _)| !allowed.iter().any(|(q, _)| p == q))
        .map(|(p, t)| {
            let side = if a.contains(&(p.clone(), t.clone())) {
                "only xbench"
            } else {
                "only iperf3"
            };
            format!("{p} ({t}): {side}")
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "{kind}: keys or types differ from iperf3 3.12's: {unexplained:#?}"
    );
    for (p, why) in allowed {
        assert!(
            differ.iter().any(|(q, _)| q == p),
            "{kind}: {p} is listed as a difference ({why}) but does not differ"
        );
    }
}

/// One `xbench client --local -t 1 -i 0.5 ARGS -J --json-format iperf3` run: its iperf3
/// document and its xbench report (`--json-file`).
fn run(name: &str, args: &[&str]) -> (Value, Value) {
    let dir = TempDir::new(&format!("ip3json-{name}"));
    let file = dir.0.join("report.json");
    let out = xbench()
        .args(["client", "--local", "-t", "1", "-i", "0.5"])
        .args(args)
        .args(["-J", "--json-format", "iperf3", "--json-file"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{name}: stdout is not JSON ({e}): {stderr}"));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    (doc, report)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// xbench's summary of one direction.
fn direction<'a>(report: &'a Value, d: &str) -> &'a Value {
    report["summary"]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["direction"] == d)
        .unwrap_or_else(|| panic!("no {d} in the report"))
}

/// An iperf3 span's bytes, seconds and rate agree with each other and its end with its start.
fn assert_consistent(what: &str, s: &Value) {
    let (bytes, secs, bps) = (f(&s["bytes"]), f(&s["seconds"]), f(&s["bits_per_second"]));
    if secs > 0.0 {
        assert!(close(bytes * 8.0 / secs, bps), "{what}: {s}");
    }
    assert!(close(f(&s["end"]) - f(&s["start"]), secs), "{what}: {s}");
}

/// The TCP figures of `doc` are those of `report`: the sums of the direction iperf3 calls
/// `sum` (`suffix` "") or the bidir reverse one (`suffix` "_bidir_reverse").
fn assert_tcp_figures(doc: &Value, report: &Value, d: &str, suffix: &str, client_sends: bool) {
    let end = &doc["end"];
    let x = direction(report, d);
    let sent = &end[format!("sum_sent{suffix}")];
    let received = &end[format!("sum_received{suffix}")];
    assert_eq!(
        f(&received["bits_per_second"]),
        f(&x["receiver"]["bits_per_second"]),
        "{d}: sum_received is xbench's receiver rate"
    );
    assert_eq!(received["bytes"], x["receiver"]["bytes"]);
    assert_eq!(
        f(&sent["bits_per_second"]),
        f(&x["sender"]["bits_per_second"])
    );
    assert_eq!(sent["bytes"], x["sender"]["bytes"]);
    assert_eq!(sent["retransmits"], x["retransmits"]);
    assert_eq!(sent["sender"], client_sends);
    assert_eq!(received["sender"], client_sends);
    assert_consistent("sum_sent", sent);
    assert_consistent("sum_received", received);
    // Each direction's window is its senders' own; the report's is the longest of them.
    assert!(close(f(&received["seconds"]), f(&x["receiver"]["seconds"])));
    assert!(f(&received["seconds"]) <= f(&report["summary"]["measured_s"]));
    // Per stream: each of xbench's streams once, sender and receiver as xbench measured them.
    for s in x["per_stream"].as_array().unwrap() {
        let ours = end["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["sender"]["socket"] == s["stream"])
            .unwrap_or_else(|| panic!("stream {} missing from end.streams", s["stream"]));
        assert_eq!(ours["sender"]["bytes"], s["sender"]["bytes"]);
        assert_eq!(ours["receiver"]["bytes"], s["receiver"]["bytes"]);
        assert_eq!(
            f(&ours["receiver"]["bits_per_second"]),
            f(&s["receiver"]["bits_per_second"])
        );
        assert_eq!(ours["sender"]["retransmits"], s["tcp"]["retransmits"]);
        assert_eq!(ours["sender"]["max_snd_cwnd"], s["tcp"]["max_cwnd_bytes"]);
        assert_eq!(ours["sender"]["max_rtt"], s["tcp"]["rtt"]["max_us"]);
        assert_eq!(ours["sender"]["min_rtt"], s["tcp"]["rtt"]["min_us"]);
        assert_eq!(ours["sender"]["sender"], client_sends);
        assert_consistent("end stream sender", &ours["sender"]);
        assert_consistent("end stream receiver", &ours["receiver"]);
    }
    // Per interval: the client's own end (what it sent, or what it read), as xbench's.
    let ivs = report["intervals"].as_array().unwrap();
    assert_eq!(doc["intervals"].as_array().unwrap().len(), ivs.len());
    assert!(!ivs.is_empty(), "-i 0.5 reports intervals");
    for (ours, x) in doc["intervals"].as_array().unwrap().iter().zip(ivs) {
        let sum = &ours[if suffix.is_empty() {
            "sum"
        } else {
            "sum_bidir_reverse"
        }];
        let xs = x["sum"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["direction"] == d)
            .unwrap();
        let side = if client_sends { "sent" } else { "received" };
        assert_eq!(sum["bytes"], xs[side]["bytes"], "interval {}", x["index"]);
        assert_eq!(f(&sum["bits_per_second"]), f(&xs[side]["bits_per_second"]));
        assert_eq!(sum["omitted"], x["omitted"]);
        assert!(close(f(&sum["start"]), f(&x["start_s"])));
        assert_consistent("interval sum", sum);
        if client_sends {
            assert_eq!(sum["retransmits"], xs["retransmits"]);
        }
    }
}

/// `cpu_utilization_percent`: each end's CPU-seconds over the data phase (warm-up and window).
fn assert_cpu(doc: &Value, report: &Value) {
    let cpu = &doc["end"]["cpu_utilization_percent"];
    let wall = f(&report["spec"]["omit"]) + f(&report["summary"]["measured_s"]);
    let client = &report["cpu"]["client"];
    let server = &report["cpu"]["server"];
    let pct = |s: f64| s * 100.0 / wall;
    assert!(close(
        f(&cpu["host_total"]),
        pct(f(&client["user_s"]) + f(&client["system_s"]))
    ));
    assert!(close(f(&cpu["host_user"]), pct(f(&client["user_s"]))));
    assert!(close(f(&cpu["remote_system"]), pct(f(&server["system_s"]))));
}

/// xbench's own iperf3 importer reads the document back to xbench's figures.
fn assert_round_trip(doc: &Value, report: &Value, directions: &[&str]) {
    assert!(xbench_report::iperf3::looks_like_iperf3(doc));
    let run = xbench_report::iperf3::to_run(doc, "x.json".into(), "path")
        .unwrap_or_else(|e| panic!("the importer refused xbench's iperf3 document: {e}"));
    let xbench_report::run::Measure::Throughput(dirs) = &run.measure else {
        panic!("a throughput run")
    };
    assert_eq!(dirs.len(), directions.len());
    for (got, d) in dirs.iter().zip(directions) {
        let x = direction(report, d);
        assert_eq!(
            got.bits_per_second,
            f(&x["receiver"]["bits_per_second"]),
            "{d}"
        );
        assert_eq!(Some(got.retransmits), x["retransmits"].as_u64(), "{d}");
        assert_eq!(
            got.timeline.len(),
            report["intervals"].as_array().unwrap().len()
        );
    }
    let streams = report["spec"]["workload"]["throughput"]["streams"].as_u64();
    assert_eq!(run.key.streams.map(u64::from), streams);
    // xbench measured it: it joins xbench's cells, not iperf3's.
    assert_eq!(run.key.tool, xbench_report::cell::Tool::Xbench);
}

/// Differences every TCP document has from iperf3's: none. (With --bidir, iperf3 3.12 writes
/// `start.sock_bufsize`, `sndbuf_actual` and `rcvbuf_actual` twice, the same key twice in one
/// object; xbench writes each once, which a JSON parser cannot tell apart.)
const TCP_DIFFERENCES: &[(&str, &str)] = &[];

#[test]
fn tcp_has_iperf3s_shape_and_xbenchs_figures() {
    let (doc, report) = run("tcp", &[]);
    assert_same_shape("tcp", &doc, &fixture("normal"), TCP_DIFFERENCES);
    assert_tcp_figures(&doc, &report, "client_to_server", "", true);
    assert_cpu(&doc, &report);
    assert_round_trip(&doc, &report, &["client_to_server"]);
    assert_eq!(doc["start"]["test_start"]["protocol"], "TCP");
    assert_eq!(doc["start"]["test_start"]["reverse"], 0);
    let first = &report["streams"][0];
    let connected = &doc["start"]["connected"][0];
    assert_eq!(
        format!(
            "{}:{}",
            connected["local_host"].as_str().unwrap(),
            connected["local_port"]
        ),
        first["client_addr"].as_str().unwrap()
    );
    assert_eq!(
        doc["end"]["sender_tcp_congestion"],
        first["client_socket"]["congestion"]
    );
}

#[test]
fn reverse_has_iperf3s_shape_and_xbenchs_figures() {
    let (doc, report) = run("reverse", &["-R", "--label", "vpn"]);
    assert_same_shape(
        "-R",
        &doc,
        &fixture("reverse"),
        &[(
            ".title",
            "this run has --label, which is iperf3's --title; the fixture's run had no --title",
        )],
    );
    assert_tcp_figures(&doc, &report, "server_to_client", "", false);
    assert_round_trip(&doc, &report, &["server_to_client"]);
    assert_eq!(doc["start"]["test_start"]["reverse"], 1);
    // --label is iperf3's --title, which the importer takes as the path's name.
    let run = xbench_report::iperf3::to_run(&doc, "x".into(), "dir").unwrap();
    assert_eq!(run.label, "vpn");
    assert_eq!(
        doc["end"]["sender_tcp_congestion"],
        report["streams"][0]["server_socket"]["congestion"]
    );
}

#[test]
fn four_streams_have_iperf3s_shape_and_xbenchs_figures() {
    let (doc, report) = run("parallel", &["-P", "4"]);
    assert_same_shape("-P 4", &doc, &fixture("parallel4"), TCP_DIFFERENCES);
    assert_tcp_figures(&doc, &report, "client_to_server", "", true);
    assert_round_trip(&doc, &report, &["client_to_server"]);
    assert_eq!(doc["end"]["streams"].as_array().unwrap().len(), 4);
    assert_eq!(doc["intervals"][0]["streams"].as_array().unwrap().len(), 4);
    assert_eq!(doc["start"]["connected"].as_array().unwrap().len(), 4);
}

#[test]
fn omitted_intervals_are_flagged_as_iperf3_flags_them() {
    let (doc, report) = run("omit", &["-O", "0.5"]);
    assert_same_shape("-O", &doc, &fixture("omit"), TCP_DIFFERENCES);
    assert_tcp_figures(&doc, &report, "client_to_server", "", true);
    assert_cpu(&doc, &report);
    assert_eq!(doc["intervals"][0]["sum"]["omitted"], true);
    assert_eq!(doc["start"]["test_start"]["omit"], 0.5);
    // The importer leaves the warm-up out, as xbench does.
    let run = xbench_report::iperf3::to_run(&doc, "x".into(), "l").unwrap();
    let xbench_report::run::Measure::Throughput(d) = &run.measure else {
        panic!("throughput")
    };
    let measured = report["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["omitted"] == false)
        .count();
    assert_eq!(d[0].timeline.len(), measured);
}

#[test]
fn bidir_has_iperf3s_shape_and_xbenchs_figures() {
    let (doc, report) = run("bidir", &["--bidir"]);
    assert_same_shape("--bidir", &doc, &fixture("bidir"), TCP_DIFFERENCES);
    assert_tcp_figures(&doc, &report, "client_to_server", "", true);
    assert_tcp_figures(&doc, &report, "server_to_client", "_bidir_reverse", false);
    assert_round_trip(&doc, &report, &["client_to_server", "server_to_client"]);
}

/// The UDP figures of `doc` are those of `report` for direction `d`.
fn assert_udp_figures(doc: &Value, report: &Value, d: &str, suffix: &str, client_sends: bool) {
    let end = &doc["end"];
    let x = report["udp"]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["direction"] == d)
        .unwrap();
    let (sent, received) = (&x["figures"]["sent"], &x["figures"]["received"]);
    let ss = &end[format!("sum_sent{suffix}")];
    let sr = &end[format!("sum_received{suffix}")];
    let sum = &end[if suffix.is_empty() {
        "sum".to_owned()
    } else {
        format!("sum{suffix}")
    }];
    assert_eq!(
        f(&sr["bits_per_second"]),
        f(&received["count"]["bits_per_second"])
    );
    assert_eq!(sr["bytes"], received["count"]["bytes"]);
    assert_eq!(sr["lost_packets"], received["lost"]);
    assert_eq!(f(&sr["lost_percent"]), f(&received["lost_pct"]));
    assert_eq!(f(&sr["jitter_ms"]), f(&received["jitter_ms"]));
    assert_eq!(sr["packets"], sent["datagrams"]);
    assert_eq!(f(&ss["bits_per_second"]), f(&sent["bits_per_second"]));
    assert_eq!(ss["packets"], sent["datagrams"]);
    assert_eq!(sum["packets"], sent["datagrams"]);
    assert_eq!(f(&sum["jitter_ms"]), f(&received["jitter_ms"]));
    for s in [ss, sr, sum] {
        assert_eq!(s["sender"], client_sends);
        assert_consistent("UDP sum", s);
    }
    for s in x["per_stream"].as_array().unwrap() {
        let ours = end["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["udp"]["socket"] == s["stream"])
            .unwrap();
        assert_eq!(ours["udp"]["packets"], s["figures"]["sent"]["datagrams"]);
        assert_eq!(
            ours["udp"]["out_of_order"],
            s["figures"]["received"]["out_of_order"]
        );
    }
    let ivs = report["udp"]["intervals"].as_array().unwrap();
    assert!(!ivs.is_empty(), "-i 0.5 reports intervals");
    assert_eq!(doc["intervals"].as_array().unwrap().len(), ivs.len());
    for (ours, x) in doc["intervals"].as_array().unwrap().iter().zip(ivs) {
        let sum = &ours[if suffix.is_empty() {
            "sum"
        } else {
            "sum_bidir_reverse"
        }];
        let xs = &x["sum"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["direction"] == d)
            .unwrap()["figures"];
        if client_sends {
            assert_eq!(sum["packets"], xs["sent"]["datagrams"]);
            assert_eq!(
                f(&sum["bits_per_second"]),
                f(&xs["sent"]["bits_per_second"])
            );
        } else {
            assert_eq!(sum["bytes"], xs["received"]["count"]["bytes"]);
            assert_eq!(sum["lost_packets"], xs["received"]["lost"]);
        }
        assert_consistent("UDP interval sum", sum);
    }
}

/// xbench's own iperf3 importer reads a UDP document back to xbench's figures: datagrams,
/// loss and jitter of the measured direction, and xbench as the tool that measured them.
fn assert_udp_round_trip(doc: &Value, report: &Value, dir: &str) {
    assert!(xbench_report::iperf3::looks_like_iperf3(doc));
    let run = xbench_report::iperf3::to_run(doc, "u".into(), "l")
        .unwrap_or_else(|e| panic!("the importer refused xbench's iperf3 UDP document: {e}"));
    let xbench_report::run::Measure::Udp(dirs) = &run.measure else {
        panic!("a UDP run")
    };
    assert_eq!(dirs.len(), 1);
    let got = &dirs[0];
    let xs = &report["udp"]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["direction"] == dir)
        .unwrap_or_else(|| panic!("no {dir} in {report}"))["figures"];
    assert_eq!(
        Some(got.received_datagrams),
        xs["received"]["count"]["datagrams"].as_u64()
    );
    assert_eq!(Some(got.lost), xs["received"]["lost"].as_u64());
    assert!(close(got.jitter_ms, f(&xs["received"]["jitter_ms"])));
    assert_eq!(run.key.tool, xbench_report::cell::Tool::Xbench);
}

/// Differences every UDP document has from iperf3's: none.
const UDP_DIFFERENCES: &[(&str, &str)] = &[];

#[test]
fn udp_has_iperf3s_shape_and_xbenchs_figures() {
    let (doc, report) = run("udp", &["-u"]);
    assert_same_shape("-u", &doc, &fixture("udp"), UDP_DIFFERENCES);
    assert_udp_figures(&doc, &report, "client_to_server", "", true);
    assert_cpu(&doc, &report);
    assert_udp_round_trip(&doc, &report, "client_to_server");
    assert_eq!(doc["start"]["test_start"]["protocol"], "UDP");
    assert_eq!(doc["start"]["test_start"]["blksize"], 1448);
    assert_eq!(doc["start"]["target_bitrate"], 1_000_000);
}

#[test]
fn udp_reverse_has_iperf3s_shape_and_xbenchs_figures() {
    let (doc, report) = run("udp-reverse", &["-u", "-R"]);
    assert_same_shape("-u -R", &doc, &fixture("udp_reverse"), UDP_DIFFERENCES);
    assert_udp_figures(&doc, &report, "server_to_client", "", false);
    assert_udp_round_trip(&doc, &report, "server_to_client");
}

#[test]
fn udp_bidir_has_iperf3s_shape_and_xbenchs_figures() {
    let (doc, report) = run("udp-bidir", &["-u", "--bidir"]);
    assert_same_shape("-u --bidir", &doc, &fixture("udp_bidir"), UDP_DIFFERENCES);
    assert_udp_figures(&doc, &report, "client_to_server", "", true);
    assert_udp_figures(&doc, &report, "server_to_client", "_bidir_reverse", false);
}

#[test]
fn a_test_that_cannot_run_writes_iperf3s_error_document() {
    // A port nobody listens on: refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = xbench()
        .args(["client", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
        .args(["-J", "--json-format", "iperf3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_same_shape("error", &doc, &fixture("error"), &[]);
    let e = doc["error"].as_str().unwrap();
    assert!(e.contains("refused"), "{e}");
    assert_eq!(doc["start"]["connected"], Value::Array(Vec::new()));
    // The importer refuses it with iperf3's reason, as it refuses iperf3's.
    let why = xbench_report::iperf3::to_run(&doc, "e".into(), "l").unwrap_err();
    assert!(why.contains("refused"), "{why}");
}

#[test]
fn json_format_iperf3_is_refused_where_it_has_no_meaning() {
    assert_usage_errors(
        &["client"],
        &[
            (
                &["--json-format", "iperf3"],
                "--json-format applies to --json",
            ),
            (
                &["--json-format", "iperf3", "--json-file", "x.json"],
                "--json-format applies to --json",
            ),
            (
                &["--json-format", "iperf3", "-J", "--rr"],
                "iperf3 has no request/response tests",
            ),
            (
                &["--json-format", "iperf3", "-J", "-P", "1,2"],
                "describes a single test",
            ),
            (
                &["--json-format", "iperf3", "-J", "--repeat", "2"],
                "describes a single test",
            ),
            (&["--json-format", "iperf2", "-J"], "invalid value 'iperf2'"),
        ],
    );
}
