//! Result types of a UDP test (`-u`): what each end counted of its datagrams, and the merged
//! figures a user reads, per interval and over the measured window.
//!
//! Loss over the window is exact: the datagrams the sender sent inside it minus those the
//! receiver got (each sequence number once), late ones included. Within an interval it is
//! the receiver's count of sequence gaps, which a late datagram fills again later.

use serde::{Deserialize, Serialize};

use super::{CpuUsage, Role};
use crate::config::StreamDirection;

/// One UDP stream over one span, as one end counted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideUdpStream {
    /// Stream id.
    pub stream: u16,
    /// Whether this end sent or received.
    pub role: Role,
    /// Datagrams sent, or received (each sequence number once).
    pub datagrams: u64,
    /// Their UDP payload bytes.
    pub bytes: u64,
    /// Receiver: sequence numbers skipped and not filled (for an interval, the gaps it saw).
    pub lost: u64,
    /// Receiver: datagrams that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// Receiver: datagrams that arrived more than once (the copies).
    pub duplicates: u64,
    /// Receiver: RFC 3550 interarrival jitter at the end of the span, milliseconds.
    pub jitter_ms: f64,
    /// Receiver: datagrams the kernel dropped for a full receive buffer (`SO_RXQ_OVFL`).
    pub rxq_drops: u64,
    /// Sender: datagram slots skipped, not sent, after the sender fell behind its schedule.
    pub slipped: u64,
    /// Receiver: datagrams refused (short, or without the stream's token), never counted.
    pub ignored: u64,
    /// Why the stream ended early, if it did (results only).
    #[serde(default)]
    pub error: Option<String>,
}

/// One interval of one end's UDP streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideUdpInterval {
    /// Position in the schedule, from 0.
    pub index: u32,
    /// Start, seconds since this end's start.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Inside the `-O` warm-up.
    pub omitted: bool,
    /// Every stream of this end (of the clock that cut the interval).
    pub streams: Vec<SideUdpStream>,
}

/// One end's UDP totals: datagrams sent inside the window, and every datagram received that
/// was sent inside it, the grace period after the end mark included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideUdpResults {
    /// Every stream of this end.
    pub streams: Vec<SideUdpStream>,
    /// CPU time of this end's stream threads.
    pub cpu: CpuUsage,
    /// How this end moves datagrams (batching, offloads).
    pub batching: String,
}

/// Datagrams and bytes over a span, and their rate.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UdpCount {
    /// Datagrams.
    pub datagrams: u64,
    /// UDP payload bytes.
    pub bytes: u64,
    /// Payload bits per second over the span.
    pub bits_per_second: f64,
}

/// What the receiver made of a span's datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UdpReceived {
    /// Datagrams and bytes received (each sequence number once).
    pub count: UdpCount,
    /// Datagrams lost on the way: never more than were sent.
    pub lost: u64,
    /// `lost` as a share of the datagrams sent, percent (0 to 100).
    pub lost_pct: f64,
    /// Datagrams that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// Copies of datagrams already received.
    pub duplicates: u64,
    /// RFC 3550 interarrival jitter, milliseconds (a direction: the mean over its streams).
    pub jitter_ms: f64,
    /// Datagrams the receiving kernel dropped for a full socket buffer: the receiver, not the
    /// network, lost these (they are in `lost` too). The kernel counts what it queues: with
    /// GRO, a dropped train of coalesced datagrams counts once, so this is then a lower bound.
    pub rxq_drops: u64,
    /// Datagrams at the streams' sockets that were not theirs (too short, or without the
    /// stream's token, e.g. forged with the client's address): never counted otherwise, never
    /// answered.
    #[serde(default)]
    pub ignored: u64,
}

/// Both ends' figures of a stream or a direction over a span.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UdpFigures {
    /// What the senders sent.
    pub sent: UdpCount,
    /// What the receivers got, when their report arrived.
    pub received: Option<UdpReceived>,
    /// Datagram slots the senders skipped after falling behind their schedule.
    pub slipped: u64,
}

/// One stream's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpStreamFigures {
    /// Stream id.
    pub stream: u16,
    /// Which way it flows.
    pub direction: StreamDirection,
    /// Its figures.
    pub figures: UdpFigures,
}

/// All streams of one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpDirectionFigures {
    /// Which way.
    pub direction: StreamDirection,
    /// Summed over the direction's streams.
    pub figures: UdpFigures,
}

/// One interval of a UDP test, both ends merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpInterval {
    /// Position in the schedule, from 0.
    pub index: u32,
    /// Start, seconds since the test started.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Inside the `-O` warm-up.
    pub omitted: bool,
    /// Per direction.
    pub sum: Vec<UdpDirectionFigures>,
    /// Per stream.
    pub streams: Vec<UdpStreamFigures>,
}

/// The totals of one direction over the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpDirectionSummary {
    /// Which way.
    pub direction: StreamDirection,
    /// Number of streams.
    pub streams: u16,
    /// The rate asked for (`-b`, all streams), payload bits per second; `None` unpaced.
    pub asked_bits_per_second: Option<f64>,
    /// Summed over the streams; rates over the measured window.
    pub figures: UdpFigures,
    /// Per stream.
    pub per_stream: Vec<UdpStreamFigures>,
}

/// A UDP test's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpReport {
    /// How the client moves datagrams (batching, offloads).
    pub client_batching: String,
    /// How the server does, when its results arrived.
    pub server_batching: Option<String>,
    /// Per interval.
    pub intervals: Vec<UdpInterval>,
    /// Totals per direction.
    pub directions: Vec<UdpDirectionSummary>,
    /// Seconds after the end mark a receiver kept counting datagrams sent before it.
    pub grace_s: f64,
}
