//! Result types: what a finished test reports, in Rust and in JSON.
//!
//! Two layers. [`SideInterval`] and [`SideResults`] are what one end measured of its own
//! sockets; the server sends its side to the client over the control connection. [`TestReport`]
//! is the merged view a user reads: per interval and per stream, the sender's bytes and TCP
//! state beside the receiver's bytes, and a [`Summary`] per direction whose headline is the
//! receiver's rate. The JSON form is versioned by [`SCHEMA_VERSION`] and described by
//! `schema/report.schema.json`; change both together. How sides are merged lives in `summary`.

mod host;
mod interval_log;
mod trace;
mod udp;

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::config::{StreamDirection, TestSpec};
use crate::latency::{FlowLatency, LatencyStats};

pub use host::*;
pub use interval_log::interval_log;
pub use trace::*;
pub use udp::*;

/// Version of the JSON report layout. Bump when a field changes meaning or is removed.
///
/// 2: every rate of a throughput test covers one measured window, the same for sender,
/// receiver and every stream (`summary.measured_s`); what arrived after it is in `after_end`.
/// Version 1 divided the receiver's bytes by the time until its slowest stream's last byte.
pub const SCHEMA_VERSION: u32 = 2;

/// Whether an end sent or received a stream's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// This end wrote the data.
    Sender,
    /// This end read the data.
    Receiver,
}

/// Bytes moved over a span of time.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Transfer {
    /// Bytes counted in the span.
    pub bytes: u64,
    /// Length of the span in seconds.
    pub seconds: f64,
    /// `bytes × 8 ÷ seconds`; 0 for an empty span.
    pub bits_per_second: f64,
}

impl Transfer {
    /// A transfer with its rate computed.
    pub fn new(bytes: u64, seconds: f64) -> Self {
        let bits_per_second = if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        };
        Transfer {
            bytes,
            seconds,
            bits_per_second,
        }
    }
}

/// CPU time spent by one end's data-path threads (user + system), seconds.
///
/// Measured per thread (`RUSAGE_THREAD`) so that a server running several tests, or a client
/// with an in-process server, charges each test only its own work.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuUsage {
    /// User-mode seconds.
    pub user_s: f64,
    /// Kernel-mode seconds; on loopback this includes the receive path run in softirq context.
    pub system_s: f64,
}

impl CpuUsage {
    /// User plus system seconds.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

impl std::ops::AddAssign for CpuUsage {
    fn add_assign(&mut self, o: Self) {
        self.user_s += o.user_s;
        self.system_s += o.system_s;
    }
}

/// The sender's TCP state over one interval.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TcpInterval {
    /// Segments retransmitted during the interval.
    pub retransmits: u64,
    /// Congestion window at the end of the interval, bytes.
    pub cwnd_bytes: u64,
    /// Smoothed RTT at the end of the interval, µs.
    pub srtt_us: u32,
    /// RTT variance at the end of the interval, µs.
    pub rttvar_us: u32,
    /// The receiver's advertised window at the end of the interval, bytes (Linux 5.4+).
    pub snd_wnd_bytes: Option<u32>,
}

/// One stream over one interval, as one end saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideStreamInterval {
    /// Stream id.
    pub stream: u16,
    /// Whether this end sent or received.
    pub role: Role,
    /// Bytes written (sender) or read (receiver) in the interval.
    pub bytes: u64,
    /// TCP state, reported by senders only: the sender's connection holds the congestion state.
    pub tcp: Option<TcpInterval>,
}

/// One interval as one end saw it. Both ends cut intervals on the same schedule relative to
/// their own start, so equal `index` values describe the same span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideInterval {
    /// Position in the schedule, from 0.
    pub index: u32,
    /// Start, seconds since the test started.
    pub start_s: f64,
    /// End, seconds since the test started.
    pub end_s: f64,
    /// Inside the `-O` warm-up, left out of totals.
    pub omitted: bool,
    /// Every stream of this end.
    pub streams: Vec<SideStreamInterval>,
}

/// RTT statistics over a test, from the smoothed RTT sampled every 100 ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RttStats {
    /// Smallest smoothed RTT seen, µs.
    pub min_us: u32,
    /// Mean of the samples, µs.
    pub mean_us: f64,
    /// Largest smoothed RTT seen, µs.
    pub max_us: u32,
}

/// How the sender spent the measured time, from the kernel's chrono counters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SenderLimits {
    /// Share of the time with data in flight, percent. 100 − this is time the application
    /// (here: xbench itself) had nothing queued.
    pub busy_pct: f64,
    /// Share of the time the receiver's advertised window stopped the sender, percent.
    pub rwnd_limited_pct: f64,
    /// Share of the time the sender's own socket buffer was full, percent.
    pub sndbuf_limited_pct: f64,
}

/// Totals of a sender's TCP state over the measured part of a test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpTotals {
    /// Segments retransmitted after the omitted start.
    pub retransmits: u64,
    /// Smoothed-RTT statistics.
    pub rtt: Option<RttStats>,
    /// Largest congestion window seen, bytes.
    pub max_cwnd_bytes: u64,
    /// Largest window the receiver advertised, bytes (Linux 5.4+).
    pub max_snd_wnd_bytes: Option<u32>,
    /// Mean of the window the receiver advertised, sampled with the RTT every 100 ms, bytes
    /// (Linux 5.4+). The window ceiling uses it: a window that dips now and then (a receiver
    /// read late) caps the rate by its average, not its peak.
    pub mean_snd_wnd_bytes: Option<f64>,
    /// Sender MSS at the end, bytes.
    pub mss: u32,
    /// Path MTU at the end, bytes.
    pub pmtu: u32,
    /// The kernel's lowest RTT sample, µs (Linux 4.6+).
    pub min_rtt_us: Option<u32>,
    /// Where the time went (Linux 4.10+).
    pub limits: Option<SenderLimits>,
    /// Share of the 100 ms samples in which the connection had room in its congestion window
    /// and in the receiver's window, and nothing written but unsent: TCP could have sent more
    /// and the application had not supplied it — blocked on a full send buffer holding only
    /// data in flight, or not writing. Percent (Linux 4.6+). The kernel's own
    /// `sndbuf_limited` time misses much of the first case (under CUBIC it read 0.6 % for a
    /// stream a 128 KiB send buffer held to a fifth of its path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nothing_queued_pct: Option<f64>,
    /// The largest `SO_SNDBUF` seen with the RTT samples, bytes: the send buffer's size, which
    /// the kernel autotunes (up to `net.ipv4.tcp_wmem`) unless `-w` fixed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf_bytes: Option<u64>,
}

/// One stream's result as one end measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideStreamResult {
    /// Stream id.
    pub stream: u16,
    /// Whether this end sent or received.
    pub role: Role,
    /// Bytes and time after the omitted start.
    pub transfer: Transfer,
    /// Bytes including the omitted start (for CPU per byte).
    pub total_bytes: u64,
    /// Bytes moved before measurement started (the `-O` warm-up). The receiver's measured
    /// bytes are its total minus the *sender's* warm-up bytes, so bytes in flight at the
    /// warm-up boundary are neither lost nor counted twice.
    pub omitted_bytes: u64,
    /// Sender's TCP totals.
    pub tcp: Option<TcpTotals>,
    /// What moved after this end's end mark (see [`AfterEnd`]); `transfer` stops at the mark.
    #[serde(default)]
    pub after_end: AfterEnd,
    /// Why the stream ended early, if it did.
    pub error: Option<String>,
    /// How this end's thread for the stream spent the measured window; `None` where the
    /// kernel keeps no scheduler statistics, and from peers that do not report it (iperf3,
    /// older xbench).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadTime>,
    /// A receiver's receive queue over the measured window; `None` for senders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_queue: Option<ReceiveQueue>,
}

/// How the thread that moved one stream's bytes at one end spent the measured window, from
/// the kernel's scheduler statistics (`/proc/self/task/TID/schedstat`). The rest of the window
/// it slept: a sender blocked on a full socket buffer (the path or the receiver pushing back),
/// a receiver blocked on an empty receive queue (waiting for data). A thread that never slept
/// is the one that could not keep up, whether for its own CPU work or for a CPU that other
/// work held.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThreadTime {
    /// Running on a CPU, percent of the window.
    pub on_cpu_pct: f64,
    /// Runnable but waiting for a CPU that other work held, percent of the window.
    pub waiting_for_cpu_pct: f64,
}

impl ThreadTime {
    /// On a CPU or waiting for one: the share of the window the thread wanted to run.
    pub fn runnable_pct(&self) -> f64 {
        (self.on_cpu_pct + self.waiting_for_cpu_pct).min(100.0)
    }

    /// Asleep, percent of the window: 100 − [`Self::runnable_pct`].
    pub fn asleep_pct(&self) -> f64 {
        100.0 - self.runnable_pct()
    }
}

/// A receiving socket's queue of data that had arrived and was not yet read (`SIOCINQ`),
/// sampled every 100 ms of the measured window. A reader that keeps up leaves it near empty;
/// one that falls behind leaves it holding what the window let in, and the window closes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReceiveQueue {
    /// Mean of the samples, bytes.
    pub mean_bytes: f64,
    /// Largest sample, bytes.
    pub max_bytes: u64,
    /// Samples taken.
    pub samples: u32,
    /// The largest `SO_RCVBUF` seen, bytes: the kernel's buffer for the queue, which it doubles
    /// for bookkeeping and autotunes unless `-w` fixed it.
    pub rcvbuf_bytes: u64,
}

impl SideStreamResult {
    /// Bytes moved from the first byte up to the end mark, warm-up included.
    pub fn bytes_to_end_mark(&self) -> u64 {
        let after = match self.role {
            Role::Sender => self.after_end.sent_bytes,
            Role::Receiver => self.after_end.bytes,
        };
        self.total_bytes.saturating_sub(after)
    }
}

/// What moved after the end of the measured window: data that was in flight, queued on the
/// path, or stuck in a retransmission back-off when the end mark passed. It is reported apart
/// and never folded into a rate: a rate divides what arrived *inside* the window by the window.
///
/// Each end fills what its role knows: a receiver `bytes` and `seconds`, a sender `sent_bytes`
/// and `retransmits`; merged, a stream or direction has all four. Everything sent arrives
/// either inside the window or after it: window bytes + `bytes` = window bytes sent +
/// `sent_bytes`, when nothing was lost for good.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct AfterEnd {
    /// Bytes read after the end mark.
    pub bytes: u64,
    /// Bytes the sender handed to the kernel that TCP had not transmitted by the end mark:
    /// queued in its send buffer, or in a write under way.
    #[serde(default)]
    pub sent_bytes: u64,
    /// Of everything the sender handed over, bytes TCP had still not transmitted when the
    /// sender reported, after the drain: never on the path, so never the path's to hold or
    /// lose (a paced sender's queue, a receive window that stayed shut).
    #[serde(default)]
    pub unsent_bytes: u64,
    /// Seconds from the end mark until the last byte arrived.
    pub seconds: f64,
    /// Segments the sender retransmitted after the end mark (also in the totals, which match
    /// the kernel's own counters).
    pub retransmits: u64,
}

impl AfterEnd {
    /// Adds another stream's tail: bytes and retransmits add up, the longest tail counts.
    pub fn merge(&mut self, o: &AfterEnd) {
        self.bytes += o.bytes;
        self.sent_bytes += o.sent_bytes;
        self.unsent_bytes += o.unsent_bytes;
        self.seconds = self.seconds.max(o.seconds);
        self.retransmits += o.retransmits;
    }
}

/// Everything one end measured, sent by the server when the test ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideResults {
    /// Every stream of this end.
    pub streams: Vec<SideStreamResult>,
    /// CPU time of this end's data threads.
    pub cpu: CpuUsage,
}

/// Socket settings of one data connection on one end: what was asked and what the kernel gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketReport {
    /// `SO_SNDBUF` asked for (`-w`), bytes.
    pub sndbuf_requested: Option<u64>,
    /// `SO_SNDBUF` as the kernel reports it. Linux doubles a request for bookkeeping and caps
    /// it at `net.core.wmem_max`.
    pub sndbuf_granted: u64,
    /// `SO_RCVBUF` asked for, bytes.
    pub rcvbuf_requested: Option<u64>,
    /// `SO_RCVBUF` as the kernel reports it (doubled, capped at `net.core.rmem_max`).
    pub rcvbuf_granted: u64,
    /// `TCP_MAXSEG` after connecting, bytes.
    pub mss: u32,
    /// Congestion control in use.
    pub congestion: String,
    /// Nagle disabled.
    pub nodelay: bool,
}

/// One data connection of a test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// Stream id.
    pub id: u16,
    /// Which way its data flows.
    pub direction: StreamDirection,
    /// Client's address of the connection.
    pub client_addr: SocketAddr,
    /// Server's address of the connection.
    pub server_addr: SocketAddr,
    /// Client socket settings.
    pub client_socket: SocketReport,
    /// Server socket settings.
    pub server_socket: SocketReport,
}

/// One stream over one interval, both ends merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInterval {
    /// Stream id.
    pub stream: u16,
    /// Which way its data flows.
    pub direction: StreamDirection,
    /// What the sender wrote.
    pub sent: Transfer,
    /// What the receiver read, when its report arrived.
    pub received: Option<Transfer>,
    /// Sender TCP state.
    pub tcp: Option<TcpInterval>,
}

/// All streams of one direction over one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalSum {
    /// Which way.
    pub direction: StreamDirection,
    /// Sum of what the senders wrote.
    pub sent: Transfer,
    /// Sum of what the receivers read, when all their reports arrived.
    pub received: Option<Transfer>,
    /// Sum of retransmits.
    pub retransmits: u64,
}

/// One reporting interval, both ends merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Position in the schedule, from 0.
    pub index: u32,
    /// Start, seconds since the test started.
    pub start_s: f64,
    /// End, seconds since the test started.
    pub end_s: f64,
    /// Inside the `-O` warm-up.
    pub omitted: bool,
    /// Per stream.
    pub streams: Vec<StreamInterval>,
    /// Per direction.
    pub sum: Vec<IntervalSum>,
}

/// The result of one stream, both ends merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// Stream id.
    pub stream: u16,
    /// What the sender sent inside the measured window (what TCP transmitted, not what it
    /// queued); `None` when its end's results never came.
    pub sender: Option<Transfer>,
    /// What the receiver read inside the measured window.
    pub receiver: Option<Transfer>,
    /// Sender TCP totals.
    pub tcp: Option<TcpTotals>,
    /// What arrived after the end of the window (receiver's bytes, sender's retransmits).
    #[serde(default)]
    pub after_end: AfterEnd,
    /// How the sending thread spent the window, when its end reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_thread: Option<ThreadTime>,
    /// How the receiving thread spent the window, when its end reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_thread: Option<ThreadTime>,
    /// The receiver's receive queue, when its end reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_queue: Option<ReceiveQueue>,
}

/// How evenly the streams of one direction shared the path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fairness {
    /// The slowest stream's receiver rate, bits per second.
    pub min_bits_per_second: f64,
    /// The fastest stream's receiver rate, bits per second.
    pub max_bits_per_second: f64,
    /// Jain's fairness index, (Σx)² ÷ (n·Σx²): 1 when every stream got the same share, 1/n
    /// when one stream got everything.
    pub jain_index: f64,
}

/// The bandwidth-delay ceiling: the most a window of this size can carry over this RTT.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowCeiling {
    /// Sum over streams of the mean window the receiver advertised, bytes.
    pub window_bytes: u64,
    /// Mean smoothed RTT, µs.
    pub rtt_us: f64,
    /// `window × 8 ÷ RTT`.
    pub bits_per_second: f64,
}

/// The result of all streams of one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionSummary {
    /// Which way.
    pub direction: StreamDirection,
    /// Number of streams.
    pub streams: u16,
    /// What the senders sent inside the measured window (what TCP transmitted, not what it
    /// queued); `None` when a sending end's results never came.
    pub sender: Option<Transfer>,
    /// What the receivers read inside the measured window: the headline figure, because only
    /// delivered bytes count. Its `seconds` is the window, the same for every stream.
    pub receiver: Option<Transfer>,
    /// What arrived after the window closed, all streams: bytes, the longest tail, retransmits.
    #[serde(default)]
    pub after_end: AfterEnd,
    /// The spread of the streams' receiver rates, for two streams or more.
    #[serde(default)]
    pub fairness: Option<Fairness>,
    /// Segments retransmitted, all streams.
    pub retransmits: u64,
    /// RTT over all streams: min of minima, mean of means, max of maxima.
    pub rtt: Option<RttStats>,
    /// Largest congestion window of any stream, bytes.
    pub max_cwnd_bytes: Option<u64>,
    /// Mean over streams of where the senders' time went.
    pub limits: Option<SenderLimits>,
    /// True when the receive window held the senders back for at least
    /// [`crate::summary::WINDOW_LIMITED_PCT`] percent of the time, or the receiver's rate
    /// reached [`crate::summary::WINDOW_CEILING_SHARE`] of the window ceiling (a pacing
    /// congestion control seldom hits the window but is capped by it all the same).
    ///
    /// A fact about the senders, not a diagnosis: a window closes when it is too small *and*
    /// when the receiving application reads too slowly. [`Self::diagnosis`] says which.
    pub window_limited: bool,
    /// What the advertised windows allow over the measured RTT.
    pub window_ceiling: Option<WindowCeiling>,
    /// Per stream.
    pub per_stream: Vec<StreamSummary>,
    /// What limited the rate, derived from the figures above by [`crate::diagnosis`]; `None`
    /// in a report that has not been diagnosed (documents written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<crate::diagnosis::model::Diagnosis>,
}

/// Totals of a test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// One entry per direction the test used.
    pub directions: Vec<DirectionSummary>,
    /// The measured window, seconds: from the end of the `-O` warm-up to the end mark. For a
    /// timed test that ran to its end, the asked duration as the senders' clock measured it
    /// (their end mark falls when the runtime wakes, a few milliseconds late on a busy
    /// machine; with streams both ways, the longer of the two directions' windows); for a
    /// byte count (`-n`), until the last byte was delivered; when cut short, until the
    /// interruption.
    pub measured_s: f64,
}

/// CPU time of both ends, and what it costs per gigabyte (10^9 bytes) moved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuReport {
    /// Client data threads.
    pub client: CpuUsage,
    /// Server data threads, when the server's results arrived.
    pub server: Option<CpuUsage>,
    /// Client CPU-seconds per GB the client sent or received, omitted start included.
    pub client_s_per_gb: Option<f64>,
    /// Server CPU-seconds per GB.
    pub server_s_per_gb: Option<f64>,
    /// Request/response tests: client CPU-microseconds per transaction.
    pub client_us_per_transaction: Option<f64>,
    /// Request/response tests: server CPU-microseconds per transaction.
    pub server_us_per_transaction: Option<f64>,
}

/// How a test ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Outcome {
    /// Ran to its end condition.
    Completed,
    /// Stopped early by the user (Ctrl-C); the figures cover what ran.
    Interrupted,
    /// Stopped by an error; the figures cover what ran.
    Failed {
        /// What went wrong.
        error: String,
    },
}

/// Who answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Software name and version, e.g. `xbench 0.1.0`.
    pub software: String,
    /// Protocol version.
    pub protocol: u16,
}

/// Everything about one finished test: the document `--json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestReport {
    /// [`SCHEMA_VERSION`] of this document.
    pub schema_version: u32,
    /// Version of the xbench that wrote it.
    pub xbench_version: String,
    /// When the test started, RFC 3339 UTC.
    pub started_at: String,
    /// A user's name for the path or run (`--label`).
    pub label: Option<String>,
    /// Host as given on the command line.
    pub host: String,
    /// Control connection: client side; `None` when the test was interrupted before the
    /// control connection was up (a report with nothing measured).
    pub client_addr: Option<SocketAddr>,
    /// Control connection: server side; `None` as for [`Self::client_addr`].
    pub server_addr: Option<SocketAddr>,
    /// The server's software; `None` when the test was interrupted before it answered.
    pub server: Option<PeerInfo>,
    /// The resolved test configuration.
    pub spec: TestSpec,
    /// Data connections.
    pub streams: Vec<StreamInfo>,
    /// Per-interval figures of a throughput test (empty when intervals were off, and for
    /// request/response tests, whose intervals are in [`Self::rr`]).
    pub intervals: Vec<Interval>,
    /// Throughput totals (no directions for a request/response test).
    pub summary: Summary,
    /// Request/response results, for `--rr` and `--crr` tests.
    pub rr: Option<RrReport>,
    /// UDP results, for `-u` tests (absent from documents of older versions).
    #[serde(default)]
    pub udp: Option<UdpReport>,
    /// CPU use.
    pub cpu: CpuReport,
    /// Completed, interrupted or failed.
    pub outcome: Outcome,
    /// Things the user should know (a window the kernel capped, a late report).
    pub warnings: Vec<String>,
    /// Latency under load (`--under-load`): the probes' latency idle and under this
    /// report's bulk streams; absent from every other test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub under_load: Option<crate::under_load::UnderLoadReport>,
    /// Where each end ran: the interface its route left by, its MTU and what it counted, EC2's
    /// allowance counters among them, and what they say of the rate. `None` for a test that
    /// never got that far, an iperf3 server's, and reports of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Hosts>,
    /// The hops of the test's path, probed while it ran (`--trace`); `None` without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceReport>,
}

/// One interval of a request/response test as the server saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideRrInterval {
    /// Position in the schedule, from 0.
    pub index: u32,
    /// Start, seconds since the server's start of the test.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Inside the `-O` warm-up.
    pub omitted: bool,
    /// Requests answered.
    pub transactions: u64,
    /// Segments the server retransmitted.
    pub retransmits: u64,
    /// Connections accepted (`--crr`).
    pub connections: u64,
}

/// One flow's totals as the server saw them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideRrFlow {
    /// Flow id.
    pub flow: u16,
    /// Requests answered over the whole test, warm-up included.
    pub transactions: u64,
    /// Segments the server retransmitted.
    pub retransmits: u64,
    /// Connections accepted (`--crr`).
    pub connections: u64,
}

/// Everything the server measured of a request/response test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideRrResults {
    /// Per flow, warm-up included.
    pub flows: Vec<SideRrFlow>,
    /// Segments retransmitted after the warm-up.
    pub measured_retransmits: u64,
    /// CPU time of the server's workers.
    pub cpu: CpuUsage,
    /// `--rr -u`: datagrams at the flows' sockets that were not this test's requests (too
    /// short or long, without the flow's token, or a sequence number already answered) and
    /// were neither counted nor answered.
    #[serde(default)]
    pub ignored: u64,
    /// Seconds the server's workers held answers back to stay within its `--max-send-rate`
    /// (summed over workers); 0 when they never waited, or the server has no cap.
    #[serde(default)]
    pub held_s: f64,
}

/// One interval of a request/response test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrInterval {
    /// Position in the schedule, from 0.
    pub index: u32,
    /// Start, seconds since the test started.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Inside the `-O` warm-up.
    pub omitted: bool,
    /// Transactions completed in the interval, all flows.
    pub transactions: u64,
    /// Transactions per second, all flows.
    pub transactions_per_second: f64,
    /// Latency of the interval's transactions, all flows merged.
    pub latency: Option<LatencyStats>,
    /// Segments the client retransmitted (requests).
    pub retransmits: u64,
    /// Segments the server retransmitted (responses), when its report arrived.
    pub server_retransmits: Option<u64>,
    /// Mean smoothed RTT of the flows' connections at the end of the interval, µs. A client
    /// worker with more than 1,024 flows reads 1,024 of them each interval, in turn, and this
    /// is their mean.
    pub srtt_us: Option<f64>,
    /// Connections opened (`--crr`).
    pub connections: u64,
    /// The interval's latency histogram: HdrHistogram V2, deflated, base64; nanoseconds.
    pub histogram: String,
    /// `--rr -u`: requests whose response did not arrive within `--rr-timeout`, counted in
    /// the interval in which they timed out. `None` for TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    /// `--connections-only`: the new connections tried, by how each ended, counted in the
    /// interval in which it ended. `None` for every other test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Attempts>,
}

/// `--connections-only`: new connections tried and how each ended. Every attempt ends in
/// exactly one way, so `opened + refused + timed_out + reset == attempts`.
///
/// A connection limit on the path (a load balancer's, a NAT gateway's, a firewall's) shows
/// here as refused or timed-out attempts; a server or middlebox that takes the connection and
/// then drops it, as reset ones. Only opened attempts are transactions: the rate and the
/// setup latency are theirs alone.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Attempts {
    /// New connections tried (`connect()` called) whose outcome is known.
    pub attempts: u64,
    /// Opened and answered: the transactions.
    pub opened: u64,
    /// Refused: a reset (or an ICMP unreachable) answered the SYN.
    pub refused: u64,
    /// Not answered within the timeout (`timeout_s` of [`Opening`]), from `connect()`: a
    /// SYN or its answer dropped, or a connection taken and never served.
    pub timed_out: u64,
    /// Opened, then reset or closed before the answer arrived.
    pub reset: u64,
    /// Refused, timed out and reset as a share of `attempts`, percent (0 without attempts).
    pub failed_percent: f64,
}

impl Attempts {
    /// The attempts of `opened` connections that opened and the failures counted beside
    /// them, with their share.
    pub fn new(opened: u64, refused: u64, timed_out: u64, reset: u64) -> Self {
        let failed = refused + timed_out + reset;
        let attempts = opened + failed;
        Attempts {
            attempts,
            opened,
            refused,
            timed_out,
            reset,
            failed_percent: if attempts > 0 {
                failed as f64 * 100.0 / attempts as f64
            } else {
                0.0
            },
        }
    }

    /// Attempts that did not open: refused, timed out or reset.
    pub fn failed(&self) -> u64 {
        self.refused + self.timed_out + self.reset
    }

    /// The sum of two counts (intervals, or a fleet's instances), its share recomputed.
    pub fn add(&self, o: &Attempts) -> Attempts {
        Attempts::new(
            self.opened + o.opened,
            self.refused + o.refused,
            self.timed_out + o.timed_out,
            self.reset + o.reset,
        )
    }
}

/// `--connections-only`: how the new connections' attempts ended over the measured window,
/// and how long an attempt had.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Opening {
    /// The counts, after the warm-up.
    #[serde(flatten)]
    pub attempts: Attempts,
    /// Seconds an attempt had from `connect()` to its answer before it counted as timed out
    /// (the client's connect timeout).
    pub timeout_s: f64,
}

/// Pacing, for a `--rate` test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pacing {
    /// Transactions per second asked for, all flows.
    pub asked_per_second: f64,
    /// Transactions per second achieved, all flows.
    pub achieved_per_second: f64,
    /// Whether the schedule was kept (achieved within 1 % of asked). When it was not, the
    /// path or the machines could not sustain the rate, and the latencies, measured from each
    /// transaction's intended start, show how far behind it fell.
    pub kept_up: bool,
}

/// Totals of a request/response test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrSummary {
    /// Transactions completed after the warm-up.
    pub transactions: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Transactions per second, all flows.
    pub transactions_per_second: f64,
    /// Latency over the whole test, all flows merged.
    pub latency: Option<LatencyStats>,
    /// Latency measured from each transaction's intended start (`--rate`), so stalls are
    /// charged to every transaction they delayed.
    pub coordinated_omission_corrected: bool,
    /// Segments the client retransmitted.
    pub retransmits: u64,
    /// Segments the server retransmitted, when its report arrived.
    pub server_retransmits: Option<u64>,
    /// Smoothed RTT of the connections over the test, from TCP_INFO: every flow's at every
    /// interval's end, or 1,024 flows' a client worker at more (in turn).
    pub rtt: Option<RttStats>,
    /// Transactions completed over the whole test, warm-up included.
    pub total_transactions: u64,
    /// Requests the server answered over the whole test, warm-up included: equal to
    /// `total_transactions` when every request sent was answered and counted at both ends.
    pub server_transactions: Option<u64>,
    /// Connections opened (`--crr`), counted by the client.
    pub connections: u64,
    /// Connections the server accepted (`--crr`), warm-up included, when its report arrived.
    pub server_connections: Option<u64>,
    /// Asked versus achieved rate (`--rate`).
    pub pacing: Option<Pacing>,
    /// The whole test's latency histogram: HdrHistogram V2, deflated, base64; nanoseconds.
    pub histogram: String,
    /// `--rr -u`: lost and late requests, and datagrams that were not counted. `None` for TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<RrUdpSummary>,
}

/// What a UDP request/response test lost, over the measured window unless said otherwise.
///
/// A request ends in the interval in which its response arrives (a transaction, with a
/// latency) or in which it times out (lost); `lost_percent` is lost ÷ (transactions + lost).
/// A late response (one that arrives after its request timed out) is counted in `late` and is
/// still lost: it was not a latency sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrUdpSummary {
    /// `--rr-timeout`, seconds.
    pub timeout_s: f64,
    /// Requests that ended unanswered within the timeout.
    pub lost: u64,
    /// `lost` as a share of the requests that ended in the window, percent.
    pub lost_percent: f64,
    /// Responses that arrived after their request timed out.
    pub late: u64,
    /// Responses to a request already answered (a duplicate on the path).
    pub duplicates: u64,
    /// Datagrams at the client's sockets that were not this test's responses (too short,
    /// without the flow's token, or to a request never sent); never counted.
    pub ignored: u64,
    /// Requests sent over the whole test, warm-up included.
    pub total_requests: u64,
    /// Requests lost over the whole test, warm-up included.
    pub total_lost: u64,
    /// Datagrams the server did not answer because they were not this test's requests, when
    /// its report arrived.
    pub server_ignored: Option<u64>,
}

/// One flow of a request/response test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrFlowSummary {
    /// Flow id.
    pub flow: u16,
    /// Transactions completed after the warm-up.
    pub transactions: u64,
    /// Transactions completed, warm-up included.
    pub total_transactions: u64,
    /// Requests the server answered on this flow, warm-up included.
    pub server_transactions: Option<u64>,
    /// The flow's own latency, with `--per-flow` ([`crate::client::ClientConfig::per_flow`]):
    /// count, min, mean and max exact, p99 from a small sketch (within 6.25 %). `None`
    /// without it, or without transactions.
    pub latency: Option<FlowLatency>,
    /// Segments the client retransmitted on this flow.
    pub retransmits: u64,
    /// Why the flow stopped early, if it did.
    pub error: Option<String>,
    /// `--rr -u`: requests lost after the warm-up. `None` for TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
}

/// A request/response test's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrReport {
    /// Per interval, all flows merged.
    pub intervals: Vec<RrInterval>,
    /// Totals.
    pub summary: RrSummary,
    /// Per flow.
    pub flows: Vec<RrFlowSummary>,
    /// `--rr` over TCP: how opening the flows' connections went. `None` for `--crr` (it
    /// connects per transaction; see `summary.connections`), `--rr -u`, and reports written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<ConnectionSetup>,
    /// `--connections-only`: the flows held open while new connections were opened, and how
    /// many still answered at the end (`setup` says how they opened; `summary` counts the new
    /// connections, one per transaction). `None` for every other test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldFlows>,
    /// `--connections-only`: the new connections tried and how they ended (refused, timed
    /// out, reset); `summary` counts the opened ones. `None` for every other test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opening: Option<Opening>,
}

/// `--connections-only`: the connections held open for the whole test, checked at its end.
///
/// Each held flow is checked by a one-byte request and its answer, not by the socket's state
/// alone: a NAT or a load balancer that dropped the flow's mapping says nothing to either
/// end, and only a round trip shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldFlows {
    /// Flows that opened at the start and were held (`setup.connected`).
    pub held: u64,
    /// Held flows that answered the check at the end.
    pub open_at_end: u64,
    /// Held flows the server (or the path) had closed by then.
    pub closed: u64,
    /// Held flows reset by then.
    pub reset: u64,
    /// Held flows that did not answer within `--response-timeout`: a mapping dropped on the
    /// path, or a server that stopped answering.
    pub unanswered: u64,
    /// New connections being opened at any time (`--openers`).
    pub openers: u16,
}

/// How opening a test's data connections went, all at once at its start. A load balancer's
/// or a NAT's connection limit shows here as refused or timed-out connections rather than
/// as a slow test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConnectionSetup {
    /// Connections asked for (one per flow).
    pub requested: u64,
    /// Connections that opened and were greeted.
    pub connected: u64,
    /// Refused or reset by the peer (or something on the path).
    pub refused: u64,
    /// Not answered within the connect timeout.
    pub timed_out: u64,
    /// Failed for another reason (unreachable, out of local ports…).
    #[serde(default)]
    pub failed: u64,
    /// From the first `connect()` to the last outcome, in seconds.
    pub seconds: f64,
    /// Connections opened per second over `seconds`.
    pub per_second: f64,
    /// `--allow-partial-flows`: the server's flow limit (`--max-flows`), when it took fewer
    /// flows than asked; the others count as `refused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_limit: Option<u32>,
}
