//! Import of `iperf3 -J` client output, so measurements taken before xbench sit in the same
//! table and chart as new ones.
//!
//! Only the figures a comparison uses are read: the receiver's rate per direction, the
//! sender's retransmits and mean RTT, and the per-interval rate, retransmits and congestion
//! windows. iperf3 TCP tests only; UDP and SCTP results are refused with a reason. The label
//! comes from iperf3's `--title` when it was given. A document `xbench client --json-format
//! iperf3` wrote (its `start.version` names xbench) is xbench's measurement and joins xbench's
//! cells, not iperf3's. This module does not walk directories.

use std::path::PathBuf;

use serde_json::Value;
use xbench::config::StreamDirection;

use crate::cell::{CellKey, Kind, TestDirection, Tool};
use crate::run::{DirectionResult, Measure, Run, TimelinePoint};

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
    let start = &v["start"];
    let ts = &start["test_start"];
    let protocol = ts["protocol"].as_str().unwrap_or("TCP");
    if protocol != "TCP" {
        return Err(format!(
            "an iperf3 {protocol} test; only TCP results can be compared"
        ));
    }
    let streams = ts["num_streams"]
        .as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or("no stream count in start.test_start.num_streams")?;
    let end = &v["end"];
    let reverse = ts["reverse"].as_u64().unwrap_or(0) != 0;
    // iperf3 3.7+ writes `bidir` in test_start; 3.12 does not, but always adds the reverse sums.
    let bidir =
        ts["bidir"].as_u64().unwrap_or(0) != 0 || end.get("sum_received_bidir_reverse").is_some();
    let direction = match (bidir, reverse) {
        (true, _) => TestDirection::Bidir,
        (false, true) => TestDirection::ServerToClient,
        (false, false) => TestDirection::ClientToServer,
    };
    let window = start["sock_bufsize"].as_u64().filter(|w| *w > 0);

    // (direction, end sums suffix, interval sum key, whether the client sent it).
    let forward = if reverse {
        StreamDirection::ServerToClient
    } else {
        StreamDirection::ClientToServer
    };
    let mut parts = vec![(forward, "", "sum", !reverse)];
    if bidir {
        parts.push((
            StreamDirection::ServerToClient,
            "_bidir_reverse",
            "sum_bidir_reverse",
            false,
        ));
    }
    let mut dirs = Vec::new();
    for (dir, suffix, iv_key, client_sends) in parts {
        let received = &end[format!("sum_received{suffix}")];
        let bps = received["bits_per_second"]
            .as_f64()
            .ok_or_else(|| format!("no end.sum_received{suffix}.bits_per_second"))?;
        let retransmits = end[format!("sum_sent{suffix}")]["retransmits"]
            .as_u64()
            .unwrap_or(0);
        // Per-stream sender RTTs; iperf3 writes 0 where it has none (the server's side).
        let rtts: Vec<f64> = end["streams"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|s| s["sender"]["sender"].as_bool() == Some(client_sends))
            .filter_map(|s| s["sender"]["mean_rtt"].as_f64())
            .filter(|r| *r > 0.0)
            .collect();
        let rtt_mean_us = (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64);
        let timeline = v["intervals"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|iv| !iv[iv_key]["omitted"].as_bool().unwrap_or(false))
            .filter_map(|iv| {
                let sum = &iv[iv_key];
                let streams = iv["streams"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let mine = streams
                    .iter()
                    .filter(|s| s["sender"].as_bool() == Some(client_sends));
                Some(TimelinePoint {
                    start_s: sum["start"].as_f64().unwrap_or(0.0),
                    end_s: sum["end"].as_f64()?,
                    bits_per_second: sum["bits_per_second"].as_f64()?,
                    retransmits: sum["retransmits"].as_u64().unwrap_or(0),
                    cwnd_bytes: mine.filter_map(|s| s["snd_cwnd"].as_u64()).collect(),
                })
            })
            .collect();
        dirs.push(DirectionResult {
            direction: dir,
            bits_per_second: bps,
            retransmits,
            rtt_mean_us,
            window_ceiling_bps: None,
            timeline,
        });
    }
    let started_at = start["timestamp"]["timesecs"]
        .as_u64()
        .map(|s| xbench::time::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s)))
        .unwrap_or_default();
    let label = v["title"]
        .as_str()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(label)
        .to_owned();
    // `xbench client --json-format iperf3` writes `xbench 0.1.0 (iperf 3.12 JSON)`.
    let tool = if start["version"]
        .as_str()
        .is_some_and(|v| v.starts_with("xbench "))
    {
        Tool::Xbench
    } else {
        Tool::Iperf3
    };
    Ok(Run {
        path,
        label,
        key: CellKey {
            kind: Kind::Throughput,
            direction: Some(direction),
            tool,
            streams: Some(streams),
            window,
            request_bytes: None,
            response_bytes: None,
            flows: None,
            burst: None,
            rate: None,
            mss: None,
            congestion: None,
        },
        started_at,
        measure: Measure::Throughput(dirs),
    })
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
    fn errors_and_udp_are_refused_with_a_reason() {
        let v: Value = serde_json::from_str(
            r#"{"start":{"test_start":{"protocol":"UDP","num_streams":1}},"end":{}}"#,
        )
        .unwrap();
        assert!(to_run(&v, "u".into(), "l").unwrap_err().contains("UDP"));
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
}
