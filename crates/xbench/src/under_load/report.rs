//! What a latency-under-load test reports beside its bulk streams' own figures: the phases,
//! the probes' latency in each, how much the load added, the responsiveness in round trips
//! per minute, the probes' own load, and a timeline. The JSON form is `under_load` in
//! `schema/report.schema.json`.

use serde::{Deserialize, Serialize};

use crate::config::StreamDirection;
use crate::latency::LatencyStats;

/// A latency-under-load test's own results (`TestReport::under_load`). The bulk streams'
/// throughput, retransmits and congestion windows are the report's `summary` and
/// `intervals`, as for any throughput test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnderLoadReport {
    /// When each phase began and ended.
    pub phases: Phases,
    /// The UDP probes: one datagram each way on a socket of their own.
    pub udp: ProbeResults,
    /// The TCP probes on a connection of their own (`--tcp-probe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<ProbeResults>,
    /// The bulk streams' own smoothed RTT (`TCP_INFO`, each stream's sender at each interval's
    /// end) over the loaded phase: the latency the loading flows themselves see.
    pub bulk_srtt: Option<LatencyStats>,
    /// Round trips per minute under load, as the responsiveness draft defines it; `None` when
    /// the loaded phase has no probe or no bulk RTT sample.
    pub responsiveness: Option<Responsiveness>,
    /// What the probes themselves put on the path.
    pub probe_load: ProbeLoad,
    /// Per interval, from the first probe to the last: phase, probe latency, bulk figures.
    pub timeline: Vec<TimelineRow>,
}

/// The phases, in seconds since the probes started (the timeline's zero). A phase's figures
/// take the probe intervals (100 ms) that lie wholly inside it; the ramp (`-O`) and the drain
/// between the load's end mark and its last byte belong to no phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// The bulk streams' first byte: the idle phase is `0..load_start_s`.
    pub load_start_s: f64,
    /// The end of the bulk streams' `-O` warm-up: the loaded phase starts here.
    pub loaded_start_s: f64,
    /// The bulk streams' end mark: the loaded phase ends here.
    pub loaded_end_s: f64,
    /// When the bulk test had its last byte and both ends' results: the second idle phase
    /// starts here, with the path's queues drained.
    pub idle_after_start_s: f64,
    /// The probes' end.
    pub end_s: f64,
}

/// Which phase a stretch of the timeline is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the load.
    Idle,
    /// The bulk streams' `-O` warm-up: the queue fills.
    Ramp,
    /// The bulk streams' measured window.
    Loaded,
    /// After the end mark, until the bulk test's last byte: the queue drains.
    Drain,
    /// After the load.
    IdleAfter,
}

impl Phase {
    /// The name tables print.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Ramp => "ramp",
            Phase::Loaded => "loaded",
            Phase::Drain => "drain",
            Phase::IdleAfter => "idle after",
        }
    }
}

/// One kind of probe (UDP or TCP) through the phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResults {
    /// Before the load.
    pub idle: PhaseLatency,
    /// Under load (the bulk streams' measured window).
    pub loaded: PhaseLatency,
    /// After the load.
    pub idle_after: PhaseLatency,
    /// What the load added: loaded minus idle, at each percentile; `None` without samples
    /// in both phases.
    pub increase: Option<Increase>,
}

/// One probe kind's latency in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseLatency {
    /// Percentiles of the probes answered in the phase; `None` without any.
    pub latency: Option<LatencyStats>,
    /// Probes sent in the phase and never answered within the probe timeout (UDP only; a TCP
    /// probe is not lost, it waits for TCP to retransmit it).
    pub lost: u64,
    /// `lost` as a share of the probes that ended in the phase, percent.
    pub lost_percent: f64,
    /// The phase's latency histogram: HdrHistogram V2, deflated, base64; nanoseconds (empty
    /// without samples).
    pub histogram: String,
}

/// Loaded minus idle latency, microseconds: what the path's queues added under load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Increase {
    /// At the median.
    pub p50_us: f64,
    /// At the 90th percentile.
    pub p90_us: f64,
    /// At the 99th percentile.
    pub p99_us: f64,
}

/// Responsiveness in round trips per minute (RPM), as draft-ietf-ippm-responsiveness-08
/// ("Aggregating the Measurements", the TCP-only case) computes it:
/// `(60000 / foreign_ms + 60000 / self_ms) / 2`, each a single-sided trimmed mean (the slowest
/// 5 % left out) of the loaded phase's samples. Foreign probes are the UDP probes (the draft's
/// `tcp_f`: one round trip on a flow of its own) and, with `--tcp-probe`, the TCP probes (its
/// `http_f`: a request on a separate established connection), averaged; self probes are the
/// bulk streams' own smoothed RTT (the draft's stand-in for `http_l` where requests cannot
/// ride the loading connections).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Responsiveness {
    /// Round trips per minute: the mean of the foreign and the self figure.
    pub rpm: f64,
    /// `60000 / foreign_ms`.
    pub foreign_rpm: f64,
    /// `60000 / self_ms`.
    pub self_rpm: f64,
    /// Trimmed mean of the foreign probes, milliseconds (the UDP and TCP ones averaged).
    pub foreign_ms: f64,
    /// Trimmed mean of the UDP probes, milliseconds.
    pub udp_ms: f64,
    /// Trimmed mean of the TCP probes, milliseconds (`--tcp-probe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_ms: Option<f64>,
    /// Trimmed mean of the bulk streams' smoothed RTT samples, milliseconds.
    pub self_ms: f64,
}

/// What the probes themselves sent, so a reader can see they did not load the path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeLoad {
    /// UDP probes sent a second: all the probes sent over their whole run (every phase), as
    /// the rate is the same in each.
    pub probes_per_second: f64,
    /// Bits a second the UDP probes put on the wire in each direction, IP and UDP headers
    /// included (TCP probes, a few bytes more each, are not counted).
    pub bits_per_second: f64,
    /// `bits_per_second` as a share of the bulk streams' delivered rate in the slowest loaded
    /// direction (where the share is largest), percent; `None` when nothing was delivered.
    pub share_of_bulk_percent: Option<f64>,
}

/// One interval of the timeline. Under load its span is the bulk test's own interval; before
/// and after, intervals of the same length lead up to and follow it. Probe figures take the
/// probe intervals (100 ms) whose middle falls inside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    /// Start, seconds since the probes started.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// The phase the row lies in (the one it overlaps most).
    pub phase: Phase,
    /// The UDP probes answered in the row.
    pub udp: RowLatency,
    /// The TCP probes (`--tcp-probe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<RowLatency>,
    /// The bulk streams, per direction, while they ran.
    pub bulk: Vec<RowBulk>,
    /// Round trips per minute over the row ([`Responsiveness`] over its samples, not trimmed:
    /// too few to trim); `None` without bulk streams or probes in it.
    pub rpm: Option<f64>,
}

/// Probe latency in one row, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct RowLatency {
    /// Probes answered.
    pub count: u64,
    /// Probes lost (sent in the row, by their send time).
    pub lost: u64,
    /// Median, µs; `None` without samples.
    pub p50_us: Option<f64>,
    /// 90th percentile, µs.
    pub p90_us: Option<f64>,
    /// 99th percentile, µs.
    pub p99_us: Option<f64>,
    /// Slowest, µs.
    pub max_us: Option<f64>,
}

/// The bulk streams of one direction in one row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RowBulk {
    /// Which way.
    pub direction: StreamDirection,
    /// The receivers' rate (the senders' when no receiver reported), bits per second.
    pub bits_per_second: f64,
    /// Segments retransmitted.
    pub retransmits: u64,
    /// Mean of the streams' smoothed RTT at the row's end, µs.
    pub srtt_us: Option<f64>,
    /// Sum of the streams' congestion windows at the row's end, bytes.
    pub cwnd_bytes: Option<u64>,
}
