//! The figures of an iperf3 `-u` test: the offered rate, both ends' rates, the receiver's
//! loss, jitter and out-of-order count, and the intervals. Not for what TCP and UDP files share
//! (see the parent module).

use std::path::PathBuf;

use serde_json::Value;

use super::{Part, Test, end_streams, finish, measured_intervals};
use crate::cell::{CellKey, Kind};
use crate::run::{Measure, Run, UdpResult, UdpTimelinePoint};

/// An iperf3 `-u` test. iperf3's `-b` (`target_bitrate`) is per stream; the cell's offered
/// rate is the total, as xbench's. The receiver's figures (jitter, loss, datagrams) are in
/// `end.sum` (3.1 and later), the two ends' rates in `end.sum_sent` and `end.sum_received`
/// (3.7 and later; older files give the receiver's rate from the loss). iperf3 counts no
/// duplicates and no receive-buffer drops: those are left empty, not zero.
pub(super) fn run(v: &Value, path: PathBuf, label: &str) -> Result<Run, String> {
    let test = Test::read(v, "sum_bidir_reverse")?;
    let start = &v["start"];
    let ts = &start["test_start"];
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
    let offered = per_stream.saturating_mul(u64::from(test.streams));
    let dirs = test
        .parts
        .iter()
        .map(|part| direction(v, part, offered))
        .collect::<Result<Vec<_>, String>>()?;
    let key = CellKey {
        datagram_bytes: Some(datagram),
        bitrate: Some(offered),
        ..test.key(v, Kind::Udp)
    };
    finish(v, path, label, key, Measure::Udp(dirs))
}

/// One direction's figures; the receiver's datagram counts and jitter are required. Apart
/// from `run` because a `--bidir` test has two.
fn direction(v: &Value, part: &Part, offered: u64) -> Result<UdpResult, String> {
    let end = &v["end"];
    let suffix = part.suffix;
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
    Ok(UdpResult {
        direction: part.direction,
        offered_bps: (offered > 0).then_some(offered as f64),
        sent_bps,
        received_bps,
        sent_datagrams: sent["packets"].as_f64().unwrap_or(packets).max(0.0) as u64,
        received_datagrams: (packets - lost) as u64,
        lost: lost as u64,
        lost_pct,
        out_of_order: end_streams(v, "udp", part.client_sends)
            .filter_map(|s| s["out_of_order"].as_u64())
            .sum(),
        duplicates: None,
        jitter_ms,
        rxq_drops: None,
        timeline: timeline(v, part),
    })
}

/// The direction's intervals. The receiver's carry its loss and jitter; the sender's only
/// counts, so those two stay empty there. Apart from `direction` because it reads
/// `intervals`, not `end`.
fn timeline(v: &Value, part: &Part) -> Vec<UdpTimelinePoint> {
    measured_intervals(v, part)
        .filter_map(|(s, _)| {
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
        .collect()
}
