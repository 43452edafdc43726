//! One finished run reduced to the figures a comparison needs, whatever wrote it: an xbench
//! [`TestReport`] or an imported iperf3 file (see `iperf3`).
//!
//! Keeping only these figures (and one timeline) lets a table over hundreds of runs stay small
//! and lets iperf3 and xbench runs sit in one table. This module does not read files.

use std::path::PathBuf;

use serde::Serialize;
use xbench::config::StreamDirection;
use xbench::diagnosis::{Inputs, Verdict};
use xbench::report::{Outcome, TestReport, UdpReport};
use xbench::under_load::{PhaseLatency, UnderLoadReport};

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
    /// Latency under load (`--under-load`): the probes and the bulk streams that loaded the
    /// path. Boxed: the probes' report is larger than the other kinds' figures.
    UnderLoad(Box<UnderLoadResult>),
}

/// A latency-under-load run.
#[derive(Debug, Clone)]
pub struct UnderLoadResult {
    /// The bulk streams, one entry per direction (two for `--under-load both`), as a
    /// throughput run's: their rate is what loaded the path.
    pub bulk: Vec<DirectionResult>,
    /// The probes' own figures as the run reported them: phases, latency per phase, what the
    /// load added, responsiveness, the probes' load and the timeline.
    pub probes: UnderLoadReport,
}

impl UnderLoadResult {
    /// The bulk streams' receiver rate, all directions summed, bits per second: the load.
    pub fn bulk_bits_per_second(&self) -> f64 {
        self.bulk.iter().map(|d| d.bits_per_second).sum()
    }

    /// The UDP probes' median in the idle phase before the load, µs.
    pub fn idle_p50_us(&self) -> Option<f64> {
        self.probes.udp.idle.latency.map(|l| l.p50_us)
    }

    /// The UDP probes' median under load, µs.
    pub fn loaded_p50_us(&self) -> Option<f64> {
        self.probes.udp.loaded.latency.map(|l| l.p50_us)
    }

    /// The UDP probes' 99th percentile under load, µs.
    pub fn loaded_p99_us(&self) -> Option<f64> {
        self.probes.udp.loaded.latency.map(|l| l.p99_us)
    }

    /// What the load added at the median (loaded − idle), µs.
    pub fn increase_p50_us(&self) -> Option<f64> {
        self.probes.udp.increase.map(|i| i.p50_us)
    }

    /// Round trips per minute under load.
    pub fn rpm(&self) -> Option<f64> {
        self.probes.responsiveness.map(|r| r.rpm)
    }

    /// UDP probes lost in the loaded phase, percent of those that ended in it.
    pub fn loaded_lost_percent(&self) -> f64 {
        self.probes.udp.loaded.lost_percent
    }
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
    /// What limited the run (the report's diagnosis, or one made now for a report saved
    /// before diagnoses existed); `None` for iperf3's files, which lack the figures.
    pub verdict: Option<Verdict>,
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
    /// A figure that cannot be true: negative, not a number, infinite, or beyond anything a
    /// network can do (which would also overflow the statistics: a mean of `inf`).
    #[error(
        "impossible figure: {field} is {} ({why}); left out of the statistics",
        shown(*.value)
    )]
    Impossible {
        /// Which figure, by its key in the file (`receiver bits_per_second` of a direction,
        /// `latency p99_us`).
        field: String,
        /// What the file says.
        value: f64,
        /// Why it cannot be.
        why: &'static str,
    },
}

/// A figure as the message shows it: plain while short, in exponent form when huge or tiny
/// (1.7e308, not 309 digits).
fn shown(v: f64) -> String {
    if v.is_finite() && v != 0.0 && !(1e-3..1e15).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Above this many bits per second a rate is not a measurement: 1 Pbit/s, more than any
/// network interface carries and far below where sums of rates overflow.
pub const MAX_RATE_BPS: f64 = 1e15;
/// Above this many microseconds a latency or RTT is not a measurement: 10⁶ s (11.6 days),
/// longer than the longest test a server accepts.
pub const MAX_LATENCY_US: f64 = 1e12;
/// Most transactions per second a run can report: 10¹².
pub const MAX_TPS: f64 = 1e12;

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
        } else if let Some(ul) = &report.under_load {
            Measure::UnderLoad(Box::new(UnderLoadResult {
                bulk: throughput_results(report)?,
                probes: ul.clone(),
            }))
        } else {
            Measure::Throughput(throughput_results(report)?)
        };
        check_figures(&measure)?;
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

    /// Whether this is a latency-under-load run.
    pub fn is_under_load(&self) -> bool {
        matches!(self.measure, Measure::UnderLoad(_))
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
            Measure::UnderLoad(ul) => {
                let ms = |v: Option<f64>| v.map_or_else(|| "none answered".into(), format_micros);
                let mut s = format!(
                    "load {}, idle p50 {}, loaded p50 {} ({}), loaded probes lost {}",
                    scale.show(ul.bulk_bits_per_second()),
                    ms(ul.idle_p50_us()),
                    ms(ul.loaded_p50_us()),
                    ul.increase_p50_us()
                        .map_or_else(|| "-".into(), xbench::units::format_signed_micros),
                    crate::units::percent(ul.loaded_lost_percent())
                );
                if let Some(rpm) = ul.rpm() {
                    s.push_str(&format!(", {} RPM", number(rpm)));
                }
                s
            }
        }
    }
}

/// The directions of a throughput report (a plain one or an under-load test's bulk streams);
/// a direction without the receiver's figures is unusable.
fn throughput_results(report: &TestReport) -> Result<Vec<DirectionResult>, NotUsable> {
    let mut dirs = Vec::new();
    for (index, d) in report.summary.directions.iter().enumerate() {
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
            verdict: d
                .diagnosis
                .as_ref()
                .map(|x| x.verdict)
                .or_else(|| Inputs::of(report, index).map(|i| i.diagnose().verdict)),
            timeline,
        });
    }
    if dirs.is_empty() {
        return Err(NotUsable::Empty("the report has no results".into()));
    }
    Ok(dirs)
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

/// Refuses a run with a figure that cannot be true, naming the first: every rate, latency,
/// jitter, share and time must be a finite number, not negative, and within what a network can
/// do. Counts are whole numbers already (a negative one does not parse). Used for every source
/// (xbench reports, iperf3 imports), so `report` and `compare` never average such a figure.
pub fn check_figures(measure: &Measure) -> Result<(), NotUsable> {
    let mut c = Checker(Ok(()));
    match measure {
        Measure::Throughput(dirs) => c.throughput(dirs),
        Measure::UnderLoad(ul) => {
            c.throughput(&ul.bulk);
            c.under_load(&ul.probes);
        }
        Measure::Rr(r) => {
            c.bounded(
                || "transactions_per_second".into(),
                r.transactions_per_second,
                MAX_TPS,
                "more than 10¹² transactions per second",
            );
            for (name, v) in [
                ("min_us", r.min_us),
                ("p50_us", r.p50_us),
                ("p90_us", r.p90_us),
                ("p99_us", r.p99_us),
                ("p99_9_us", r.p99_9_us),
                ("mean_us", r.mean_us),
                ("max_us", r.max_us),
                ("stddev_us", r.stddev_us),
            ] {
                c.latency(|| format!("latency {name}"), v);
            }
        }
        Measure::Udp(dirs) => {
            for d in dirs {
                let dir = d.direction.label();
                if let Some(v) = d.offered_bps {
                    c.rate(|| format!("{dir} asked_bits_per_second"), v);
                }
                c.rate(|| format!("{dir} sent bits_per_second"), d.sent_bps);
                c.rate(|| format!("{dir} received bits_per_second"), d.received_bps);
                c.bounded(
                    || format!("{dir} lost_pct"),
                    d.lost_pct,
                    100.0,
                    "more than 100 %",
                );
                c.jitter(|| format!("{dir} jitter_ms"), d.jitter_ms);
                for (k, p) in d.timeline.iter().enumerate() {
                    c.interval(dir, k, p.start_s, p.end_s);
                    c.rate(
                        || format!("{dir} interval {k} bits_per_second"),
                        p.bits_per_second,
                    );
                    if let Some(j) = p.jitter_ms {
                        c.jitter(|| format!("{dir} interval {k} jitter_ms"), j);
                    }
                }
            }
        }
    }
    c.0
}

/// Keeps the first impossible figure found.
struct Checker(Result<(), NotUsable>);

impl Checker {
    /// A throughput run's directions, or an under-load run's bulk streams.
    fn throughput(&mut self, dirs: &[DirectionResult]) {
        for d in dirs {
            let dir = d.direction.label();
            self.rate(
                || format!("{dir} receiver bits_per_second"),
                d.bits_per_second,
            );
            if let Some(v) = d.rtt_mean_us {
                self.latency(|| format!("{dir} rtt mean_us"), v);
            }
            if let Some(v) = d.window_ceiling_bps {
                self.rate(|| format!("{dir} window_ceiling bits_per_second"), v);
            }
            for (k, p) in d.timeline.iter().enumerate() {
                self.interval(dir, k, p.start_s, p.end_s);
                self.rate(
                    || format!("{dir} interval {k} bits_per_second"),
                    p.bits_per_second,
                );
            }
        }
    }

    /// The probes of an under-load run: what the tables average (each phase's percentiles
    /// and loss, what the load added, the responsiveness) and what the chart draws (the
    /// phases' times and the timeline's medians).
    fn under_load(&mut self, ul: &UnderLoadReport) {
        let probes = [("udp", Some(&ul.udp)), ("tcp", ul.tcp.as_ref())];
        for (kind, p) in probes {
            let Some(p) = p else { continue };
            for (phase, l) in [
                ("idle", &p.idle),
                ("loaded", &p.loaded),
                ("idle_after", &p.idle_after),
            ] {
                self.phase(kind, phase, l);
            }
            if let Some(i) = p.increase {
                for (q, v) in [
                    ("p50_us", i.p50_us),
                    ("p90_us", i.p90_us),
                    ("p99_us", i.p99_us),
                ] {
                    // Loaded minus idle: negative when the idle phase happened to be slower,
                    // so only its size is bounded.
                    if self.0.is_ok() && !(v.is_finite() && v.abs() <= MAX_LATENCY_US) {
                        self.0 = Err(NotUsable::Impossible {
                            field: format!("under_load {kind} increase {q}"),
                            value: v,
                            why: if v.is_nan() {
                                "not a number"
                            } else {
                                "beyond 10⁶ s either way"
                            },
                        });
                    }
                }
            }
        }
        if let Some(r) = ul.responsiveness {
            self.bounded(
                || "under_load responsiveness rpm".into(),
                r.rpm,
                MAX_TPS * 60.0,
                "more than 10¹² round trips a second",
            );
        }
        let ph = &ul.phases;
        for (name, v) in [
            ("load_start_s", ph.load_start_s),
            ("loaded_start_s", ph.loaded_start_s),
            ("loaded_end_s", ph.loaded_end_s),
            ("idle_after_start_s", ph.idle_after_start_s),
            ("end_s", ph.end_s),
        ] {
            self.bounded(
                || format!("under_load phases {name}"),
                v,
                1e9,
                "after 10⁹ s",
            );
        }
        for (k, row) in ul.timeline.iter().enumerate() {
            self.interval("under_load timeline", k, row.start_s, row.end_s);
            if let Some(v) = row.udp.p50_us {
                self.latency(|| format!("under_load timeline {k} udp p50_us"), v);
            }
        }
    }

    /// One probe kind's latency and loss in one phase.
    fn phase(&mut self, kind: &str, phase: &str, l: &PhaseLatency) {
        if let Some(s) = &l.latency {
            for (q, v) in [
                ("min_us", s.min_us),
                ("p50_us", s.p50_us),
                ("p90_us", s.p90_us),
                ("p99_us", s.p99_us),
                ("max_us", s.max_us),
            ] {
                self.latency(|| format!("under_load {kind} {phase} {q}"), v);
            }
        }
        self.bounded(
            || format!("under_load {kind} {phase} lost_percent"),
            l.lost_percent,
            100.0,
            "more than 100 %",
        );
    }

    fn bounded(&mut self, field: impl FnOnce() -> String, v: f64, max: f64, over: &'static str) {
        if self.0.is_err() {
            return;
        }
        let why = if v.is_nan() {
            "not a number"
        } else if v.is_infinite() {
            "infinite"
        } else if v < 0.0 {
            "negative"
        } else if v > max {
            over
        } else {
            return;
        };
        self.0 = Err(NotUsable::Impossible {
            field: field(),
            value: v,
            why,
        });
    }

    fn rate(&mut self, field: impl FnOnce() -> String, v: f64) {
        self.bounded(field, v, MAX_RATE_BPS, "more than 1 Pbit/s");
    }

    /// A latency in microseconds.
    fn latency(&mut self, field: impl FnOnce() -> String, v: f64) {
        self.bounded(field, v, MAX_LATENCY_US, "longer than 10⁶ s");
    }

    /// A jitter in milliseconds.
    fn jitter(&mut self, field: impl FnOnce() -> String, v: f64) {
        self.bounded(field, v, MAX_LATENCY_US / 1e3, "longer than 10⁶ s");
    }

    /// An interval's times, seconds since the start: finite, not negative, in order.
    fn interval(&mut self, dir: &str, k: usize, start: f64, end: f64) {
        self.bounded(
            || format!("{dir} interval {k} start_s"),
            start,
            1e9,
            "after 10⁹ s",
        );
        self.bounded(
            || format!("{dir} interval {k} end_s"),
            end,
            1e9,
            "after 10⁹ s",
        );
        if self.0.is_ok() && end < start {
            self.0 = Err(NotUsable::Impossible {
                field: format!("{dir} interval {k} end_s"),
                value: end,
                why: "before its start_s",
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(p99: f64) -> Measure {
        Measure::Rr(RrResult {
            transactions_per_second: 1000.0,
            min_us: 10.0,
            p50_us: 20.0,
            p90_us: 30.0,
            p99_us: p99,
            p99_9_us: 50.0,
            mean_us: 25.0,
            max_us: 60.0,
            stddev_us: 5.0,
            retransmits: 0,
            histogram: String::new(),
        })
    }

    fn tcp(bps: f64, end_s: f64) -> Measure {
        Measure::Throughput(vec![DirectionResult {
            direction: StreamDirection::ClientToServer,
            bits_per_second: bps,
            retransmits: 0,
            rtt_mean_us: Some(100.0),
            window_ceiling_bps: None,
            verdict: None,
            timeline: vec![TimelinePoint {
                start_s: 1.0,
                end_s,
                bits_per_second: 1e9,
                retransmits: 0,
                cwnd_bytes: vec![],
            }],
        }])
    }

    #[test]
    fn impossible_figures_are_refused_naming_the_field() {
        assert_eq!(check_figures(&rr(40.0)), Ok(()));
        assert_eq!(check_figures(&tcp(9.4e9, 2.0)), Ok(()));
        let cases = [
            (
                tcp(-5e9, 2.0),
                "client→server receiver bits_per_second is -5000000000 (negative)",
            ),
            (
                tcp(1.7e308, 2.0),
                "client→server receiver bits_per_second is 1.7e308 (more than 1 Pbit/s)",
            ),
            (tcp(f64::NAN, 2.0), "is NaN (not a number)"),
            (
                tcp(1e9, 0.5),
                "client→server interval 0 end_s is 0.5 (before its start_s)",
            ),
            (rr(f64::INFINITY), "latency p99_us is inf (infinite)"),
            (rr(-1.0), "latency p99_us is -1 (negative)"),
        ];
        for (m, want) in cases {
            let e = check_figures(&m).unwrap_err().to_string();
            assert!(e.starts_with("impossible figure: "), "{e}");
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }

    /// An under-load run's figures are checked as the others' are: a negative increase is
    /// real (the idle phase was the slower), a NaN one or a negative latency is not.
    #[test]
    fn under_load_figures_are_checked_and_summed_up() {
        let run = fixtures::run("vpn", 1, 300.0, 20_000.0, 2);
        assert_eq!(check_figures(&run.measure), Ok(()));
        let line = run.one_line(crate::units::RateScale::AUTO);
        assert!(
            line.starts_with("load 95.0 Mbit/s, idle p50 299 µs, loaded p50 19.9 ms (+19.6 ms)"),
            "{line}"
        );
        assert!(line.ends_with("lost 4.76 %, 3,000 RPM"), "{line}");
        let with = |f: &dyn Fn(&mut UnderLoadResult)| {
            let mut m = run.measure.clone();
            if let Measure::UnderLoad(u) = &mut m {
                f(u);
            }
            m
        };
        let faster_idle = with(&|u| u.probes.udp.increase.as_mut().unwrap().p50_us = -50.0);
        assert_eq!(check_figures(&faster_idle), Ok(()));
        for (m, want) in [
            (
                with(&|u| u.probes.udp.increase.as_mut().unwrap().p99_us = f64::NAN),
                "under_load udp increase p99_us is NaN (not a number)",
            ),
            (
                with(&|u| u.probes.udp.loaded.latency.as_mut().unwrap().p50_us = -1.0),
                "under_load udp loaded p50_us is -1 (negative)",
            ),
            (
                with(&|u| u.probes.udp.loaded.lost_percent = 140.0),
                "under_load udp loaded lost_percent is 140 (more than 100 %)",
            ),
            (
                with(&|u| u.bulk[0].bits_per_second = f64::INFINITY),
                "client→server receiver bits_per_second is inf (infinite)",
            ),
        ] {
            let e = check_figures(&m).unwrap_err().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}

/// Runs built in code (latency under load, UDP), for the tests of every module that shows them.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::path::PathBuf;

    use xbench::config::{Direction, StreamDirection, TestSpec, Workload};
    use xbench::latency::{Distribution, Recorder};
    use xbench::under_load::{
        Increase, Phase, PhaseLatency, Phases, ProbeLoad, ProbeResults, Responsiveness, RowLatency,
        TimelineRow, UnderLoadReport, UnderLoadSpec,
    };

    use super::{DirectionResult, Measure, Run, UnderLoadResult};
    use crate::cell::CellKey;

    /// The cell of `--under-load DIR -P streams` (`up`, `down` or `both`).
    pub(crate) fn key(dir: &str, streams: u16) -> CellKey {
        let mut spec = TestSpec::throughput();
        if let Workload::Throughput(t) = &mut spec.workload {
            t.streams = std::num::NonZeroU16::new(streams).unwrap();
            t.direction = match dir {
                "down" => Direction::ServerToClient,
                "both" => Direction::Bidir,
                _ => Direction::ClientToServer,
            };
            t.under_load = Some(UnderLoadSpec::default());
        }
        CellKey::of_spec(&spec)
    }

    /// A phase whose probes took `us` microseconds each, `lost` more unanswered.
    pub(crate) fn phase(us: &[f64], lost: u64) -> PhaseLatency {
        let mut r = Recorder::new();
        for v in us {
            r.record((v * 1e3) as u64);
        }
        let mut d = Distribution::new();
        d.add_recorder(&r);
        let ended = us.len() as u64 + lost;
        PhaseLatency {
            latency: d.stats(),
            lost,
            lost_percent: if ended == 0 {
                0.0
            } else {
                lost as f64 / ended as f64 * 100.0
            },
            histogram: if us.is_empty() {
                String::new()
            } else {
                d.encode()
            },
        }
    }

    /// A run of `--under-load up -P 1` on `label`: 3 s idle, 5 s loaded at `mbps`, 3 s idle
    /// after; 40 probes a phase around `idle_us` idle and `loaded_us` loaded (±10 %), `lost`
    /// more lost under load; a 1-second timeline row by row.
    pub(crate) fn run(label: &str, n: u32, idle_us: f64, loaded_us: f64, lost: u64) -> Run {
        let spread =
            |c: f64| -> Vec<f64> { (0..40).map(|i| c * (0.9 + i as f64 / 200.0)).collect() };
        let idle = phase(&spread(idle_us), 0);
        let loaded = phase(&spread(loaded_us), lost);
        let idle_after = phase(&spread(idle_us), 0);
        let (il, ll) = (idle.latency.unwrap(), loaded.latency.unwrap());
        let increase = Some(Increase {
            p50_us: ll.p50_us - il.p50_us,
            p90_us: ll.p90_us - il.p90_us,
            p99_us: ll.p99_us - il.p99_us,
        });
        let phases = Phases {
            load_start_s: 3.0,
            loaded_start_s: 3.5,
            loaded_end_s: 8.5,
            idle_after_start_s: 8.7,
            end_s: 11.7,
        };
        let timeline = (0..12)
            .map(|k| {
                let start = k as f64;
                let (phase, p50) = match k {
                    0..=2 => (Phase::Idle, idle_us),
                    3 => (Phase::Ramp, loaded_us / 2.0),
                    4..=8 => (Phase::Loaded, loaded_us),
                    _ => (Phase::IdleAfter, idle_us),
                };
                TimelineRow {
                    start_s: start,
                    end_s: start + 1.0,
                    phase,
                    udp: RowLatency {
                        count: 20,
                        lost: 0,
                        p50_us: Some(p50),
                        p90_us: Some(p50 * 1.1),
                        p99_us: Some(p50 * 1.2),
                        max_us: Some(p50 * 1.3),
                    },
                    tcp: None,
                    bulk: vec![],
                    rpm: None,
                }
            })
            .collect();
        let probes = UnderLoadReport {
            phases,
            udp: ProbeResults {
                idle,
                loaded,
                idle_after,
                increase,
            },
            tcp: None,
            bulk_srtt: None,
            responsiveness: Some(Responsiveness {
                rpm: 60e6 / loaded_us,
                foreign_rpm: 60e6 / loaded_us,
                self_rpm: 60e6 / loaded_us,
                foreign_ms: loaded_us / 1e3,
                udp_ms: loaded_us / 1e3,
                tcp_ms: None,
                self_ms: loaded_us / 1e3,
            }),
            probe_load: ProbeLoad {
                probes_per_second: 20.0,
                bits_per_second: 8400.0,
                share_of_bulk_percent: Some(0.01),
            },
            timeline,
        };
        Run {
            path: PathBuf::from(format!("{label}/ul-up-P1/run-{n}.json")),
            label: label.into(),
            key: key("up", 1),
            started_at: "2026-11-28T10:00:00.000Z".into(),
            length_s: Some(5.0),
            facts: Default::default(),
            measure: Measure::UnderLoad(Box::new(UnderLoadResult {
                bulk: vec![DirectionResult {
                    direction: StreamDirection::ClientToServer,
                    bits_per_second: 95e6,
                    retransmits: 3,
                    rtt_mean_us: Some(loaded_us),
                    window_ceiling_bps: None,
                    verdict: None,
                    timeline: vec![],
                }],
                probes,
            })),
        }
    }

    /// A TCP run on `label` with `streams` streams, client → server at `mbps`, with
    /// `retransmits` and `rtt_mean_us`; no timeline, no file, no start time.
    pub(crate) fn tcp(
        label: &str,
        streams: u16,
        mbps: f64,
        retransmits: u64,
        rtt_mean_us: Option<f64>,
    ) -> Run {
        Run {
            path: PathBuf::new(),
            label: label.into(),
            key: CellKey {
                streams: Some(streams),
                ..CellKey::of_spec(&TestSpec::throughput())
            },
            started_at: String::new(),
            length_s: None,
            facts: Default::default(),
            measure: Measure::Throughput(vec![DirectionResult {
                direction: StreamDirection::ClientToServer,
                bits_per_second: mbps * 1e6,
                retransmits,
                rtt_mean_us,
                window_ceiling_bps: None,
                verdict: None,
                timeline: vec![],
            }]),
        }
    }

    /// A UDP run on `label`, client → server, of 1,400-byte datagrams at `offered` bit/s:
    /// `sent` datagrams, `lost` of them lost (`lost_pct` as the run put it), `jitter_ms`;
    /// none reordered, duplicated or dropped in the receive buffer; no file.
    pub(crate) fn udp(
        label: &str,
        offered: u64,
        sent: u64,
        lost: u64,
        lost_pct: f64,
        jitter_ms: f64,
    ) -> Run {
        let mut spec = TestSpec::throughput();
        if let Workload::Throughput(t) = &mut spec.workload {
            t.udp = Some(xbench::config::UdpSpec {
                datagram_len: 1400,
                bitrate: Some(offered),
            });
        }
        let offered = offered as f64;
        Run {
            path: PathBuf::new(),
            label: label.into(),
            key: CellKey::of_spec(&spec),
            started_at: String::new(),
            length_s: None,
            facts: Default::default(),
            measure: Measure::Udp(vec![super::UdpResult {
                direction: StreamDirection::ClientToServer,
                offered_bps: Some(offered),
                sent_bps: offered,
                received_bps: offered * (1.0 - lost_pct / 100.0),
                sent_datagrams: sent,
                received_datagrams: sent - lost,
                lost,
                lost_pct,
                out_of_order: 0,
                duplicates: Some(0),
                jitter_ms,
                rxq_drops: Some(0),
                timeline: vec![],
            }]),
        }
    }
}
