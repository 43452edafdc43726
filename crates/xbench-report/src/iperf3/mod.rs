//! Import of `iperf3 -J` client output, so measurements taken before xbench sit in the same
//! table and chart as new ones.
//!
//! Only the figures a comparison uses are read: the receiver's rate per direction, the
//! sender's retransmits and mean RTT, and the per-interval rate, retransmits and congestion
//! windows; for `-u` tests, the offered rate, both ends' rates, the receiver's loss, jitter and
//! out-of-order count, and its intervals. SCTP results are refused with a reason. The label
//! comes from iperf3's `--title` when it was given. A document `xbench client --json-format
//! iperf3` wrote (its `start.version` names xbench) is xbench's measurement and joins xbench's
//! cells, not iperf3's. This module does not walk directories.
//!
//! What TCP and UDP files share (the test's streams and directions, the interval walk, the
//! run's key and header) is here; each protocol's figures are read in `tcp` and `udp`.

mod tcp;
mod udp;

use std::path::PathBuf;

use serde_json::Value;
use xbench::config::StreamDirection;

use crate::cell::{CellKey, Kind, TestDirection, Tool};
use crate::run::{Measure, Run};

/// Whether a JSON document looks like iperf3's `-J` output: a `start` with a `test_start`, and
/// an `end`.
pub fn looks_like_iperf3(v: &Value) -> bool {
    v.get("start").and_then(|s| s.get("test_start")).is_some() && v.get("end").is_some()
}

/// The run an iperf3 client's `-J` output describes; `Err` says why it cannot be used.
pub fn to_run(v: &Value, path: PathBuf, label: &str) -> Result<Run, String> {
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        return Err(format!("iperf3 reported an error: {e}"));
    }
    match v["start"]["test_start"]["protocol"]
        .as_str()
        .unwrap_or("TCP")
    {
        "TCP" => tcp::run(v, path, label),
        "UDP" => udp::run(v, path, label),
        protocol => Err(format!(
            "an iperf3 {protocol} test; only TCP and UDP results can be compared"
        )),
    }
}

/// What `start.test_start` says of the test as a whole. Apart from the protocols' figures
/// because TCP and UDP files write it the same way.
struct Test {
    /// `-P`.
    streams: u16,
    /// The cell's direction.
    direction: TestDirection,
    /// The directions measured: the forward one, and with `--bidir` the server's.
    parts: Vec<Part>,
}

/// One direction measured, and where iperf3 put its figures.
struct Part {
    direction: StreamDirection,
    /// The suffix of its sums in `end` and in each interval: `""`, or `"_bidir_reverse"`.
    suffix: &'static str,
    /// Whether the client sent it: which streams' sender-side figures are this direction's.
    client_sends: bool,
}

impl Test {
    /// Reads the test; `reverse_sum` is the `end` sum only a `--bidir` test has (TCP and UDP
    /// name it differently).
    fn read(v: &Value, reverse_sum: &str) -> Result<Test, String> {
        let ts = &v["start"]["test_start"];
        let streams = ts["num_streams"]
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or("no stream count in start.test_start.num_streams")?;
        let reverse = ts["reverse"].as_u64().unwrap_or(0) != 0;
        // iperf3 3.7+ writes `bidir` in test_start; 3.12 does not, but always adds the reverse
        // sums.
        let bidir = ts["bidir"].as_u64().unwrap_or(0) != 0 || v["end"].get(reverse_sum).is_some();
        let direction = match (bidir, reverse) {
            (true, _) => TestDirection::Bidir,
            (false, true) => TestDirection::ServerToClient,
            (false, false) => TestDirection::ClientToServer,
        };
        let forward = if reverse {
            StreamDirection::ServerToClient
        } else {
            StreamDirection::ClientToServer
        };
        let mut parts = vec![Part {
            direction: forward,
            suffix: "",
            client_sends: !reverse,
        }];
        if bidir {
            parts.push(Part {
                direction: StreamDirection::ServerToClient,
                suffix: "_bidir_reverse",
                client_sends: false,
            });
        }
        Ok(Test {
            streams,
            direction,
            parts,
        })
    }

    /// The cell's key as far as TCP and UDP share it; UDP adds its datagram size and rate.
    fn key(&self, v: &Value, kind: Kind) -> CellKey {
        CellKey {
            kind,
            direction: Some(self.direction),
            tool: tool_of(v),
            datagram_bytes: None,
            bitrate: None,
            streams: Some(self.streams),
            window: v["start"]["sock_bufsize"].as_u64().filter(|w| *w > 0),
            request_bytes: None,
            response_bytes: None,
            flows: None,
            burst: None,
            rate: None,
            mss: None,
            congestion: None,
            tcp_probe: None,
        }
    }
}

/// The run of `key` measuring `measure`, refused when a figure cannot be true. The last step of
/// both protocols: the header (label, start, length) is read alike.
fn finish(
    v: &Value,
    path: PathBuf,
    label: &str,
    key: CellKey,
    measure: Measure,
) -> Result<Run, String> {
    crate::run::check_figures(&measure).map_err(|e| e.to_string())?;
    Ok(Run {
        path,
        label: title_or(v, label),
        key,
        started_at: started_at(v),
        length_s: v["start"]["test_start"]["duration"]
            .as_f64()
            .filter(|d| *d > 0.0),
        facts: Default::default(),
        measure,
    })
}

/// `part`'s sum and the streams of each interval, those in the `-O` warm-up left out: one
/// rule for TCP and UDP, so both keep the measured window alone.
fn measured_intervals<'a>(
    v: &'a Value,
    part: &Part,
) -> impl Iterator<Item = (&'a Value, &'a [Value])> + use<'a> {
    let key = format!("sum{}", part.suffix);
    items(&v["intervals"])
        .iter()
        .map(move |iv| (&iv[&key], items(&iv["streams"])))
        .filter(|(sum, _)| !sum["omitted"].as_bool().unwrap_or(false))
}

/// The `side` object (`sender` for TCP, `udp` for UDP) of each of `end.streams` that went the
/// way the client sending or not says: how a direction finds its own streams' totals (TCP's
/// RTTs, UDP's out-of-order counts).
fn end_streams<'a>(
    v: &'a Value,
    side: &'a str,
    client_sends: bool,
) -> impl Iterator<Item = &'a Value> {
    items(&v["end"]["streams"])
        .iter()
        .map(move |s| &s[side])
        .filter(move |s| s["sender"].as_bool() == Some(client_sends))
}

/// The elements of a JSON array; none when it is missing or not an array, as iperf3 leaves
/// out what it did not measure. One spelling for the four arrays read.
fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn started_at(v: &Value) -> String {
    v["start"]["timestamp"]["timesecs"]
        .as_u64()
        .map(|s| xbench::time::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s)))
        .unwrap_or_default()
}

/// Who measured: `xbench client --json-format iperf3` writes `xbench 0.1.0 (iperf 3.12 JSON)`
/// as the version, and its runs join xbench's cells.
fn tool_of(v: &Value) -> Tool {
    if v["start"]["version"]
        .as_str()
        .is_some_and(|v| v.starts_with("xbench "))
    {
        Tool::Xbench
    } else {
        Tool::Iperf3
    }
}

/// iperf3's `--title`, else `label`.
fn title_or(v: &Value, label: &str) -> String {
    v["title"]
        .as_str()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(label)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from real `iperf3 -c 127.0.0.1 -t 1 -P 2 -w 256K -J --title vpn` output
    /// (iperf 3.12).
    const TWO_STREAMS: &str = r#"{
      "start": {"version": "iperf 3.12", "timestamp": {"timesecs": 1795398576},
        "sock_bufsize": 262144,
        "test_start": {"protocol": "TCP", "num_streams": 2, "blksize": 131072, "omit": 0,
                       "duration": 1, "bytes": 0, "blocks": 0, "reverse": 0, "tos": 0}},
      "intervals": [{"streams": [
          {"socket": 5, "end": 0.504842, "bits_per_second": 1.1e9, "retransmits": 3,
           "snd_cwnd": 785796, "rtt": 330, "omitted": false, "sender": true},
          {"socket": 7, "end": 0.504842, "bits_per_second": 1.0e9, "retransmits": 2,
           "snd_cwnd": 600000, "rtt": 300, "omitted": false, "sender": true}],
        "sum": {"start": 0, "end": 0.504842, "bits_per_second": 2195429200.8, "retransmits": 5,
                "omitted": false, "sender": true}}],
      "end": {
        "streams": [
          {"sender": {"socket": 5, "mean_rtt": 1302, "sender": true}, "receiver": {}},
          {"sender": {"socket": 7, "mean_rtt": 1000, "sender": true}, "receiver": {}}],
        "sum_sent": {"bits_per_second": 2476149213.1, "retransmits": 10, "sender": true},
        "sum_received": {"bits_per_second": 2474859686.4, "sender": true}},
      "title": "vpn"
    }"#;

    #[test]
    fn a_client_report_becomes_a_run() {
        let v: Value = serde_json::from_str(TWO_STREAMS).unwrap();
        assert!(looks_like_iperf3(&v));
        let run = to_run(&v, "x.json".into(), "dir").unwrap();
        assert_eq!(run.label, "vpn", "--title names the path");
        assert_eq!(run.key.streams, Some(2));
        assert_eq!(run.key.window, Some(262_144));
        assert_eq!(run.key.tool, Tool::Iperf3);
        assert_eq!(run.started_at, "2026-11-23T01:49:36.000Z");
        let Measure::Throughput(d) = &run.measure else {
            panic!("throughput")
        };
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].bits_per_second, 2474859686.4, "the receiver's rate");
        assert_eq!(d[0].retransmits, 10);
        assert_eq!(d[0].rtt_mean_us, Some(1151.0));
        assert_eq!(d[0].timeline[0].cwnd_bytes, [785_796, 600_000]);
    }

    #[test]
    fn xbenchs_own_iperf3_json_is_an_xbench_run() {
        let mut v: Value = serde_json::from_str(TWO_STREAMS).unwrap();
        v["start"]["version"] = "xbench 0.1.0 (iperf 3.12 JSON)".into();
        let run = to_run(&v, "x.json".into(), "dir").unwrap();
        assert_eq!(run.key.tool, Tool::Xbench);
        assert_eq!(run.key.streams, Some(2));
    }

    #[test]
    fn errors_and_sctp_are_refused_with_a_reason() {
        let v: Value = serde_json::from_str(
            r#"{"start":{"test_start":{"protocol":"SCTP","num_streams":1}},"end":{}}"#,
        )
        .unwrap();
        assert!(to_run(&v, "s".into(), "l").unwrap_err().contains("SCTP"));
        // A UDP file without the receiver's figures names what is missing.
        let v: Value = serde_json::from_str(
            r#"{"start":{"test_start":{"protocol":"UDP","num_streams":1,"blksize":1400}},
                "end":{"sum":{"packets":10}}}"#,
        )
        .unwrap();
        let e = to_run(&v, "u".into(), "l").unwrap_err();
        assert_eq!(e, "no end.sum.lost_packets");
        let v: Value = serde_json::from_str(
            r#"{"start":{"test_start":{}},"end":{},"error":"unable to connect to server"}"#,
        )
        .unwrap();
        assert!(
            to_run(&v, "e".into(), "l")
                .unwrap_err()
                .contains("unable to connect")
        );
    }

    /// Real output of Debian's iperf3 3.12 on loopback (`iperf3 -s -1 -D`, then
    /// `iperf3 -c 127.0.0.1 -u -b 100M -t 2 -J --title udp-loopback`, and the same with `-R`).
    fn fixture(name: &str) -> Value {
        let path = format!(
            "{}/../xbench/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn a_udp_client_report_becomes_a_udp_run() {
        let v = fixture("iperf3-udp.json");
        let run = to_run(&v, "f.json".into(), "dir").unwrap();
        assert_eq!(run.label, "udp-loopback");
        assert_eq!(run.key.kind, Kind::Udp);
        assert_eq!(run.key.tool, Tool::Iperf3);
        assert_eq!(run.key.direction, Some(TestDirection::ClientToServer));
        assert_eq!(run.key.datagram_bytes, Some(32768));
        assert_eq!(run.key.bitrate, Some(100_000_000));
        assert_eq!(run.key.slug(), "udp-up-iperf3-b100M-l32768-P1");
        let Measure::Udp(d) = &run.measure else {
            panic!("not UDP")
        };
        assert_eq!(d.len(), 1);
        let d = &d[0];
        assert_eq!(d.direction, StreamDirection::ClientToServer);
        assert_eq!(d.offered_bps, Some(100e6));
        // end.sum: 763 datagrams, none lost, jitter 0.0137 ms; both ends' rates.
        assert_eq!(
            (d.sent_datagrams, d.received_datagrams, d.lost),
            (763, 763, 0)
        );
        assert_eq!(d.lost_pct, 0.0);
        assert!((d.jitter_ms - 0.013720355847698594).abs() < 1e-12);
        assert!(
            (d.sent_bps - 100003135.84947921).abs() < 1e-3,
            "{}",
            d.sent_bps
        );
        assert!(
            (d.received_bps / 1e6 - 100.0).abs() < 0.5,
            "{}",
            d.received_bps
        );
        assert_eq!((d.duplicates, d.rxq_drops), (None, None));
        // The client's intervals are the sender's: rates, no loss or jitter.
        assert_eq!(d.timeline.len(), 2);
        assert!(
            d.timeline
                .iter()
                .all(|p| p.lost.is_none() && p.jitter_ms.is_none())
        );
        assert!((d.timeline[1].bits_per_second - 99874768.5439644).abs() < 1e-3);
    }

    #[test]
    fn a_reverse_udp_report_is_the_servers_datagrams_counted_by_the_client() {
        let v = fixture("iperf3-udp-reverse.json");
        let run = to_run(&v, "r.json".into(), "dir").unwrap();
        assert_eq!(run.key.direction, Some(TestDirection::ServerToClient));
        let Measure::Udp(d) = &run.measure else {
            panic!("not UDP")
        };
        let d = &d[0];
        assert_eq!(d.direction, StreamDirection::ServerToClient);
        assert_eq!(
            (d.sent_datagrams, d.received_datagrams, d.lost),
            (763, 763, 0)
        );
        assert!((d.jitter_ms - 0.00993130889950762).abs() < 1e-12);
        assert!((d.received_bps - 100002535.8630634).abs() < 1e-3);
        // The client received: its intervals carry loss and jitter.
        assert_eq!(d.timeline[0].lost, Some(0));
        assert!((d.timeline[0].jitter_ms.unwrap() - 0.00954573222892819).abs() < 1e-12);
    }

    /// Loss as iperf3 writes it at high rates: counted from sequence gaps, the count can go
    /// negative (late datagrams) or be a share of more datagrams than were sent; imported it
    /// stays between none and all.
    #[test]
    fn udp_loss_is_kept_between_none_and_all() {
        let mut v = fixture("iperf3-udp.json");
        v["end"]["sum"]["lost_packets"] = serde_json::json!(-3);
        let run = to_run(&v, "f.json".into(), "dir").unwrap();
        let Measure::Udp(d) = &run.measure else {
            panic!("not UDP")
        };
        assert_eq!((d[0].lost, d[0].lost_pct), (0, 0.0));
        v["end"]["sum"]["lost_packets"] = serde_json::json!(200);
        v["start"]["test_start"]["num_streams"] = serde_json::json!(4);
        let run = to_run(&v, "f.json".into(), "dir").unwrap();
        let Measure::Udp(d) = &run.measure else {
            panic!("not UDP")
        };
        assert_eq!((d[0].lost, d[0].received_datagrams), (200, 563));
        assert!((d[0].lost_pct - 200.0 / 763.0 * 100.0).abs() < 1e-9);
        // iperf3's -b is per stream: four streams offered four times as much.
        assert_eq!(run.key.bitrate, Some(400_000_000));
    }
}
