//! The figures of an iperf3 TCP test: each direction's receiver rate, the sender's
//! retransmits and mean RTT, and its intervals with each stream's congestion window. Not for
//! what TCP and UDP files share (see the parent module).

use std::path::PathBuf;

use serde_json::Value;

use super::{Part, Test, end_streams, finish, measured_intervals};
use crate::cell::Kind;
use crate::run::{DirectionResult, Measure, Run, TimelinePoint};

/// An iperf3 TCP test.
pub(super) fn run(v: &Value, path: PathBuf, label: &str) -> Result<Run, String> {
    let test = Test::read(v, "sum_received_bidir_reverse")?;
    let dirs = test
        .parts
        .iter()
        .map(|part| direction(v, part))
        .collect::<Result<Vec<_>, String>>()?;
    let key = test.key(v, Kind::Throughput);
    finish(v, path, label, key, Measure::Throughput(dirs))
}

/// One direction's figures; only the receiver's rate is required. Apart from `run` because
/// a `--bidir` test has two.
fn direction(v: &Value, part: &Part) -> Result<DirectionResult, String> {
    let end = &v["end"];
    let suffix = part.suffix;
    let bps = end[format!("sum_received{suffix}")]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| format!("no end.sum_received{suffix}.bits_per_second"))?;
    let retransmits = end[format!("sum_sent{suffix}")]["retransmits"]
        .as_u64()
        .unwrap_or(0);
    Ok(DirectionResult {
        direction: part.direction,
        bits_per_second: bps,
        retransmits,
        rtt_mean_us: mean_rtt(v, part.client_sends),
        window_ceiling_bps: None,
        // iperf3's JSON lacks the limited times, threads and queues a verdict rests on.
        verdict: None,
        timeline: timeline(v, part),
    })
}

/// The mean of the sending streams' mean RTTs, µs. Apart because iperf3 writes 0 where it has
/// none (the server's side), and those must not pull the mean down.
fn mean_rtt(v: &Value, client_sends: bool) -> Option<f64> {
    let rtts: Vec<f64> = end_streams(v, "sender", client_sends)
        .filter_map(|s| s["mean_rtt"].as_f64())
        .filter(|r| *r > 0.0)
        .collect();
    (!rtts.is_empty()).then(|| rtts.iter().sum::<f64>() / rtts.len() as f64)
}

/// The direction's intervals: the sum's rate and retransmits, and the congestion window of
/// each stream this end sent (the other end's streams carry none). Apart from `direction`
/// because it reads `intervals`, not `end`.
fn timeline(v: &Value, part: &Part) -> Vec<TimelinePoint> {
    measured_intervals(v, part)
        .filter_map(|(sum, streams)| {
            let mine = streams
                .iter()
                .filter(|s| s["sender"].as_bool() == Some(part.client_sends));
            Some(TimelinePoint {
                start_s: sum["start"].as_f64().unwrap_or(0.0),
                end_s: sum["end"].as_f64()?,
                bits_per_second: sum["bits_per_second"].as_f64()?,
                retransmits: sum["retransmits"].as_u64().unwrap_or(0),
                cwnd_bytes: mine.filter_map(|s| s["snd_cwnd"].as_u64()).collect(),
            })
        })
        .collect()
}
