//! One finished run reduced to the figures a comparison needs, whatever wrote it: an xbench
//! [`TestReport`] or an imported iperf3 file (see `iperf3`).
//!
//! Keeping only these figures (and one timeline) lets a table over hundreds of runs stay small
//! and lets iperf3 and xbench runs sit in one table. This module does not read files.

use std::path::PathBuf;

use serde::Serialize;
use xbench::config::StreamDirection;
use xbench::report::{Outcome, TestReport, UdpReport};

use crate::cell::{CellKey, Tool};

/// A finished run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The file it came from (empty for a run not saved).
    pub path: PathBuf,
    /// The path's name (`--label`), which the comparison puts side by side.
    pub label: String,
    /// Which cell of a sweep it belongs to.
    pub key: CellKey,
    /// When it started, RFC 3339 (as the file gives it).
    pub started_at: String,
    /// The test's asked length, seconds (`-t`); `None` for a byte count (`-n`) or a file
    /// that does not say. A chart's subtitle says it.
    pub length_s: Option<f64>,
    /// What it measured.
    pub measure: Measure,
    /// What it recorded of its path and hosts: interface MTUs, counters that moved.
    pub facts: crate::paths::PathFacts,
}

/// The figures of a run, by kind.
#[derive(Debug, Clone)]
pub enum Measure {
    /// Throughput: one entry per direction measured (two for `--bidir`).
    Throughput(Vec<DirectionResult>),
    /// Request/response.
    Rr(RrResult),
    /// UDP (`-u`): one entry per direction measured (two for `--bidir`).
    Udp(Vec<UdpResult>),
}

/// One direction of a UDP run, over its measured window.
#[derive(Debug, Clone, PartialEq)]
pub struct UdpResult {
    /// Which way the datagrams went.
    pub direction: StreamDirection,
    /// The rate asked for (`-b`, all streams), payload bits per second; `None` unpaced.
    pub offered_bps: Option<f64>,
    /// The senders' payload rate, bits per second.
    pub sent_bps: f64,
    /// The receivers' payload rate, bits per second (each datagram once).
    pub received_bps: f64,
    /// Datagrams sent.
    pub sent_datagrams: u64,
    /// Datagrams received (each sequence number once).
    pub received_datagrams: u64,
    /// Datagrams lost: sent and never received.
    pub lost: u64,
    /// `lost` as a share of the datagrams sent, percent.
    pub lost_pct: f64,
    /// Datagrams that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// Copies of datagrams already received; `None` where the tool does not count them
    /// (iperf3).
    pub duplicates: Option<u64>,
    /// RFC 3550 interarrival jitter, milliseconds.
    pub jitter_ms: f64,
    /// Datagrams the receiving kernel dropped for a full socket buffer (`SO_RXQ_OVFL`), part of
    /// `lost`; `None` where the tool does not count them (iperf3).
    pub rxq_drops: Option<u64>,
    /// Per interval (warm-up left out).
    pub timeline: Vec<UdpTimelinePoint>,
}

/// One interval of one direction of a UDP run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UdpTimelinePoint {
    /// Start of the interval, seconds since the start of the test.
    pub start_s: f64,
    /// End of the interval, seconds.
    pub end_s: f64,
    /// Rate in the interval (the receiver's when known, else the sender's), bits per second.
    pub bits_per_second: f64,
    /// Datagrams the receiver saw missing in the interval, when the interval is the
    /// receiver's.
    pub lost: Option<u64>,
    /// Jitter at the end of the interval, milliseconds, when the interval is the receiver's.
    pub jitter_ms: Option<f64>,
}

/// One direction of a throughput run.
#[derive(Debug, Clone)]
pub struct DirectionResult {
    /// Which way the data flowed.
    pub direction: StreamDirection,
    /// The receiver's rate, bits per second: only delivered bytes count.
    pub bits_per_second: f64,
    /// Segments retransmitted, all streams.
    pub retransmits: u64,
    /// Mean smoothed RTT, µs, when the sender reported it.
    pub rtt_mean_us: Option<f64>,
    /// What the window the receiver actually advertised allowed (its mean ÷ the mean RTT),
    /// bits per second, when xbench measured it. Linux grants a `-w` request about 1.3 times
    /// over, so the asked size alone understates the ceiling.
    pub window_ceiling_bps: Option<f64>,
    /// Per interval, for the timeline chart.
    pub timeline: Vec<TimelinePoint>,
}

/// One interval of one direction.
#[derive(Debug, Clone, Serialize)]
pub struct TimelinePoint {
    /// Start of the interval, seconds since the start of the test.
    pub start_s: f64,
    /// End of the interval, seconds since the start.
    pub end_s: f64,
    /// Rate in the interval (receiver's when known, else sender's), bits per second.
    pub bits_per_second: f64,
    /// Retransmits in the interval, all streams.
    pub retransmits: u64,
    /// Congestion window of each stream at the end of the interval, bytes.
    pub cwnd_bytes: Vec<u64>,
}

/// A request/response run.
#[derive(Debug, Clone)]
pub struct RrResult {
    /// Transactions per second, all flows.
    pub transactions_per_second: f64,
    /// Lowest latency, µs.
    pub min_us: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p99_9_us: f64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Highest latency, µs.
    pub max_us: f64,
    /// Standard deviation of the run's latencies, µs (netperf's stddev_latency).
    pub stddev_us: f64,
    /// Segments retransmitted, both ends when the server reported.
    pub retransmits: u64,
    /// The run's latency histogram (HdrHistogram V2, base64), for percentile curves.
    pub histogram: String,
}

/// Why a report was not turned into a run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum NotUsable {
    /// It was cut short: its figures do not measure the cell's full test.
    #[error("the run was interrupted; left out of the statistics")]
    Interrupted,
    /// It failed.
    #[error("the run failed ({0}); left out of the statistics")]
    Failed(String),
    /// It carries no figures the comparison can use.
    #[error("{0}")]
    Empty(String),
}

impl Run {
    /// The figures of an xbench report. `label` is used when the report has none.
    pub fn from_report(report: &TestReport, path: PathBuf, label: &str) -> Result<Run, NotUsable> {
        match &report.outcome {
            Outcome::Completed => {}
            Outcome::Interrupted => return Err(NotUsable::Interrupted),
            Outcome::Failed { error } => return Err(NotUsable::Failed(error.clone())),
        }
        let measure = if let Some(udp) = &report.udp {
            Measure::Udp(udp_results(udp)?)
        } else if let Some(rr) = &report.rr {
            let s = &rr.summary;
            let l = s.latency.ok_or_else(|| {
                NotUsable::Empty("the request/response run completed no transaction".into())
            })?;
            Measure::Rr(RrResult {
                transactions_per_second: s.transactions_per_second,
                min_us: l.min_us,
                p50_us: l.p50_us,
                p90_us: l.p90_us,
                p99_us: l.p99_us,
                p99_9_us: l.p99_9_us,
                mean_us: l.mean_us,
                max_us: l.max_us,
                stddev_us: l.stddev_us,
                retransmits: s.retransmits + s.server_retransmits.unwrap_or(0),
                histogram: s.histogram.clone(),
            })
        } else {
            let mut dirs = Vec::new();
            for d in &report.summary.directions {
                let Some(rx) = d.receiver else {
                    return Err(NotUsable::Empty(format!(
                        "{} has no receiver figures (the server's report never arrived)",
                        d.direction.label()
                    )));
                };
                let timeline = report
                    .intervals
                    .iter()
                    .filter(|iv| !iv.omitted)
                    .filter_map(|iv| {
                        let sum = iv.sum.iter().find(|s| s.direction == d.direction)?;
                        Some(TimelinePoint {
                            start_s: iv.start_s,
                            end_s: iv.end_s,
                            bits_per_second: sum.received.unwrap_or(sum.sent).bits_per_second,
                            retransmits: sum.retransmits,
                            cwnd_bytes: iv
                                .streams
                                .iter()
                                .filter(|s| s.direction == d.direction)
                                .map(|s| s.tcp.map_or(0, |t| t.cwnd_bytes))
                                .collect(),
                        })
                    })
                    .collect();
                dirs.push(DirectionResult {
                    direction: d.direction,
                    bits_per_second: rx.bits_per_second,
                    retransmits: d.retransmits,
                    rtt_mean_us: d.rtt.map(|r| r.mean_us),
                    window_ceiling_bps: d.window_ceiling.map(|c| c.bits_per_second),
                    timeline,
                });
            }
            if dirs.is_empty() {
                return Err(NotUsable::Empty("the report has no results".into()));
            }
            Measure::Throughput(dirs)
        };
        Ok(Run {
            path,
            label: report.label.clone().unwrap_or_else(|| label.to_owned()),
            key: CellKey::of_spec(&report.spec),
            started_at: report.started_at.clone(),
            length_s: match report.spec.end {
                xbench::EndCondition::Duration(d) => Some(d.as_secs_f64()),
                xbench::EndCondition::Bytes(_) => None,
            },
            measure,
            facts: crate::paths::PathFacts::of_report(report),
        })
    }

    /// Whether this is a request/response run.
    pub fn is_rr(&self) -> bool {
        matches!(self.measure, Measure::Rr(_))
    }

    /// Whether this is a UDP run.
    pub fn is_udp(&self) -> bool {
        matches!(self.measure, Measure::Udp(_))
    }

    /// Which program measured it.
    pub fn tool(&self) -> Tool {
        self.key.tool
    }

    /// A one-line result, as a sweep prints each run when it finishes: rates in `unit`, or
    /// scaled to each figure ([`RateScale::AUTO`](crate::units::RateScale::AUTO)).
    pub fn one_line(&self, unit: impl Into<crate::units::RateScale>) -> String {
        use xbench::units::{count, format_micros, number};
        let scale = unit.into();
        match &self.measure {
            Measure::Throughput(dirs) => dirs
                .iter()
                .map(|d| {
                    let mut s = format!(
                        "{} {}, {} retransmit{}",
                        d.direction.label(),
                        scale.show(d.bits_per_second),
                        count(d.retransmits),
                        if d.retransmits == 1 { "" } else { "s" }
                    );
                    if let Some(rtt) = d.rtt_mean_us {
                        s.push_str(&format!(", RTT {}", format_micros(rtt)));
                    }
                    s
                })
                .collect::<Vec<_>>()
                .join("; "),
            Measure::Rr(r) => format!(
                "{} transactions/s, p50 {}, p99 {}",
                number(r.transactions_per_second),
                format_micros(r.p50_us),
                format_micros(r.p99_us)
            ),
            Measure::Udp(dirs) => dirs
                .iter()
                .map(|d| {
                    // Received and offered in one unit, so they compare at a glance.
                    let unit = scale.unit_for(d.received_bps.max(d.offered_bps.unwrap_or(0.0)));
                    format!(
                        "{} {} of {} {}, lost {}/{} ({}), jitter {}",
                        d.direction.label(),
                        unit.format(d.received_bps),
                        d.offered_bps
                            .map_or_else(|| "unpaced".to_owned(), |o| unit.format(o)),
                        unit.label(),
                        count(d.lost),
                        count(d.sent_datagrams),
                        crate::units::percent(d.lost_pct),
                        format_micros(d.jitter_ms * 1e3)
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// A UDP report's directions; a direction without the receiver's figures is unusable.
fn udp_results(udp: &UdpReport) -> Result<Vec<UdpResult>, NotUsable> {
    let mut out = Vec::new();
    for d in &udp.directions {
        let f = &d.figures;
        let Some(rx) = f.received else {
            return Err(NotUsable::Empty(format!(
                "{} has no receiver figures (the receiver's report never arrived)",
                d.direction.label()
            )));
        };
        out.push(UdpResult {
            direction: d.direction,
            offered_bps: d.asked_bits_per_second,
            sent_bps: f.sent.bits_per_second,
            received_bps: rx.count.bits_per_second,
            sent_datagrams: f.sent.datagrams,
            received_datagrams: rx.count.datagrams,
            lost: rx.lost,
            lost_pct: rx.lost_pct,
            out_of_order: rx.out_of_order,
            duplicates: Some(rx.duplicates),
            jitter_ms: rx.jitter_ms,
            rxq_drops: Some(rx.rxq_drops),
            timeline: udp
                .intervals
                .iter()
                .filter(|iv| !iv.omitted)
                .filter_map(|iv| {
                    let sum = iv.sum.iter().find(|s| s.direction == d.direction)?;
                    let f = &sum.figures;
                    Some(UdpTimelinePoint {
                        start_s: iv.start_s,
                        end_s: iv.end_s,
                        bits_per_second: f
                            .received
                            .map_or(f.sent.bits_per_second, |r| r.count.bits_per_second),
                        lost: f.received.map(|r| r.lost),
                        jitter_ms: f.received.map(|r| r.jitter_ms),
                    })
                })
                .collect(),
        });
    }
    if out.is_empty() {
        return Err(NotUsable::Empty("the UDP report has no directions".into()));
    }
    Ok(out)
}
