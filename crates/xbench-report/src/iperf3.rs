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

use std::path::PathBuf;

use serde_json::Value;
use xbench::config::StreamDirection;

use crate::cell::{CellKey, Kind, TestDirection, Tool};
use crate::run::{DirectionResult, Measure, Run, TimelinePoint, UdpResult, UdpTimelinePoint};

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
    if protocol == "UDP" {
        return udp_run(v, path, label);
    }
    if protocol != "TCP" {
        return Err(format!(
            "an iperf3 {protocol} test; only TCP and UDP results can be compared"
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
            // iperf3's JSON lacks the limited times, threads and queues a verdict rests on.
            verdict: None,
            timeline,
        });
    }
    let measure = Measure::Throughput(dirs);
    crate::run::check_figures(&measure).map_err(|e| e.to_string())?;
    Ok(Run {
        path,
        label: title_or(v, label),
        key: CellKey {
            kind: Kind::Throughput,
            direction: Some(direction),
            tool: tool_of(v),
            datagram_bytes: None,
            bitrate: None,
            streams: Some(streams),
            window,
            request_bytes: None,
            response_bytes: None,
            flows: None,
            burst: None,
            rate: None,
            mss: None,
            congestion: None,
            tcp_probe: None,
        },
        started_at: started_at(v),
        length_s: v["start"]["test_start"]["duration"]
            .as_f64()
            .filter(|d| *d > 0.0),
        facts: Default::default(),
        measure,
    })
}

/// An iperf3 `-u` test. iperf3's `-b` (`target_bitrate`) is per stream; the cell's offered
/// rate is the total, as xbench's. The receiver's figures (jitter, loss, datagrams) are in
/// `end.sum` (3.1 and later), the two ends' rates in `end.sum_sent` and `end.sum_received`
/// (3.7 and later; older files give the receiver's rate from the loss). iperf3 counts no
/// duplicates and no receive-buffer drops: those are left empty, not zero.
fn udp_run(v: &Value, path: PathBuf, label: &str) -> Result<Run, String> {
    let start = &v["start"];
    let ts = &start["test_start"];
    let streams = ts["num_streams"]
        .as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or("no stream count in start.test_start.num_streams")?;
    let reverse = ts["reverse"].as_u64().unwrap_or(0) != 0;
    let end = &v["end"];
    let bidir = ts["bidir"].as_u64().unwrap_or(0) != 0 || end.get("sum_bidir_reverse").is_some();
    let direction = match (bidir, reverse) {
        (true, _) => TestDirection::Bidir,
        (false, true) => TestDirection::ServerToClient,
        (false, false) => TestDirection::ClientToServer,
    };
    let datagram = ts["blksize"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or("no datagram size in start.test_start.blksize")?;
    // 0 is iperf3's unpaced (`-b 0`), as xbench's.
    let per_stream = ts["target_bitrate"]
        .as_u64()
        .or_else(|| start["target_bitrate"].as_u64())
        .unwrap_or(0);
    let offered = per_stream.saturating_mul(u64::from(streams));
    let forward = if reverse {
        StreamDirection::ServerToClient
    } else {
        StreamDirection::ClientToServer
    };
    let mut parts = vec![(forward, "", !reverse)];
    if bidir {
        parts.push((StreamDirection::ServerToClient, "_bidir_reverse", false));
    }
    let mut dirs = Vec::new();
    for (dir, suffix, client_sends) in parts {
        let sum = &end[format!("sum{suffix}")];
        let field = |k: &str| {
            sum[k]
                .as_f64()
                .ok_or_else(|| format!("no end.sum{suffix}.{k}"))
        };
        let packets = field("packets")?.max(0.0);
        // iperf3 counts a late datagram as lost and then as not lost: the figure can go
        // below zero, and is then none.
        let lost = field("lost_packets")?.max(0.0).min(packets);
        let jitter_ms = field("jitter_ms")?;
        let lost_pct = if packets > 0.0 {
            lost / packets * 100.0
        } else {
            0.0
        };
        let sent = &end[format!("sum_sent{suffix}")];
        let received = &end[format!("sum_received{suffix}")];
        let sent_bps = sent["bits_per_second"]
            .as_f64()
            .or_else(|| sum["bits_per_second"].as_f64())
            .ok_or_else(|| format!("no end.sum{suffix}.bits_per_second"))?;
        let received_bps = received["bits_per_second"]
            .as_f64()
            .unwrap_or(sent_bps * (1.0 - lost_pct / 100.0));
        let sent_datagrams = sent["packets"].as_f64().unwrap_or(packets).max(0.0) as u64;
        let out_of_order = end["streams"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|s| &s["udp"])
            .filter(|s| s["sender"].as_bool() == Some(client_sends))
            .filter_map(|s| s["out_of_order"].as_u64())
            .sum();
        let iv_key = format!("sum{suffix}");
        let timeline = v["intervals"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|iv| &iv[&iv_key])
            .filter(|s| !s["omitted"].as_bool().unwrap_or(false))
            .filter_map(|s| {
                // The receiver's intervals carry its loss and jitter; the sender's only counts.
                let receiver = s["sender"].as_bool() == Some(false);
                Some(UdpTimelinePoint {
                    start_s: s["start"].as_f64().unwrap_or(0.0),
                    end_s: s["end"].as_f64()?,
                    bits_per_second: s["bits_per_second"].as_f64()?,
                    lost: s["lost_packets"]
                        .as_i64()
                        .filter(|_| receiver)
                        .map(|l| l.max(0) as u64),
                    jitter_ms: s["jitter_ms"].as_f64().filter(|_| receiver),
                })
            })
            .collect();
        dirs.push(UdpResult {
            direction: dir,
            offered_bps: (offered > 0).then_some(offered as f64),
            sent_bps,
            received_bps,
            sent_datagrams,
            received_datagrams: (packets - lost) as u64,
            lost: lost as u64,
            lost_pct,
            out_of_order,
            duplicates: None,
            jitter_ms,
            rxq_drops: None,
            timeline,
        });
    }
    let measure = Measure::Udp(dirs);
    crate::run::check_figures(&measure).map_err(|e| e.to_string())?;
    Ok(Run {
        path,
        label: title_or(v, label),
        key: CellKey {
            kind: Kind::Udp,
            direction: Some(direction),
            tool: tool_of(v),
            datagram_bytes: Some(datagram),
            bitrate: Some(offered),
            streams: Some(streams),
            window: start["sock_bufsize"].as_u64().filter(|w| *w > 0),
            request_bytes: None,
            response_bytes: None,
            flows: None,
            burst: None,
            rate: None,
            mss: None,
            congestion: None,
            tcp_probe: None,
        },
        started_at: started_at(v),
        length_s: v["start"]["test_start"]["duration"]
            .as_f64()
            .filter(|d| *d > 0.0),
        facts: Default::default(),
        measure,
    })
}

fn started_at(v: &Value) -> String {
    v["start"]["timestamp"]["timesecs"]
        .as_u64()
        .map(|s| xbench::time::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s)))
        .unwrap_or_default()
}

/// iperf3's `--title`, else `label`.
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
