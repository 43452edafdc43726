//! The diagnosis as data: the verdict, how sure, the figures it rests on and what they could
//! not settle, as a report carries them ([`crate::report::DirectionSummary::diagnosis`]).
//!
//! Apart from the rules that decide it and the inputs they read (which read the report), so
//! that the report can hold a diagnosis without depending on how one is made.

use serde::{Deserialize, Serialize};

/// The diagnosis of one direction: what limited it, how sure, on what figures, and what the
/// figures could not settle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// What limited the rate, or [`Verdict::CannotTell`].
    pub verdict: Verdict,
    /// How firmly the figures support the verdict; `None` exactly when it is
    /// [`Verdict::CannotTell`].
    pub confidence: Option<Confidence>,
    /// The figures the verdict rests on, in the order a reader needs them.
    pub figures: Vec<Figure>,
    /// What the figures could not tell (why a receiver read slowly, which of two limits…).
    pub cannot_tell: Vec<Unknown>,
}

impl Diagnosis {
    /// The value of figure `name`, when the verdict rests on it.
    pub fn figure(&self, name: FigureName) -> Option<f64> {
        self.figures
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value)
    }
}

/// What limited a direction's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The pacing asked (`-b`): the rate is the cap the user set.
    Pacing,
    /// A standing queue on the path: RTT under load far above the base RTT. The path's
    /// bottleneck sets the rate; a bigger window would only lengthen the queue.
    PathQueue,
    /// The receive window's size: the window is full at window ÷ RTT (or too few segments to
    /// keep data flowing). Raise `-w`, or `net.ipv4.tcp_rmem` on the receiver.
    ReceiveWindow,
    /// The receiving application did not read fast enough: its window closed although its
    /// size allowed far more.
    Receiver,
    /// The sender's socket buffer (`SO_SNDBUF`): it emptied while waiting for
    /// acknowledgements. Raise `-w`, or `net.ipv4.tcp_wmem` on the sender.
    SendBuffer,
    /// The sending application or its CPU: the network never pushed back.
    Sender,
    /// Losses on the path: the congestion window set the pace and segments were retransmitted.
    NetworkLoss,
    /// The instance, not the path: EC2 shaped an end's packets to its allowance (bandwidth
    /// out at the sender, in at the receiver, or packets per second at either), and its
    /// driver counted them (`ethtool -S`'s `*_allowance_exceeded`).
    InstanceAllowance,
    /// The figures do not name one limit; [`Diagnosis::cannot_tell`] says why.
    CannotTell,
}

impl Verdict {
    /// A short name for a line or a table cell.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pacing => "pacing asked (-b)",
            Verdict::PathQueue => "the path's queue",
            Verdict::ReceiveWindow => "receive window size",
            Verdict::Receiver => "receiver not keeping up",
            Verdict::SendBuffer => "send buffer",
            Verdict::Sender => "sender CPU or application",
            Verdict::NetworkLoss => "network losses",
            Verdict::InstanceAllowance => "the instance's allowance",
            Verdict::CannotTell => "cannot tell",
        }
    }

    /// What the verdict means for the rate, in one clause.
    pub fn meaning(self) -> &'static str {
        match self {
            Verdict::Pacing => "the rate is the cap asked with -b",
            Verdict::PathQueue => {
                "the path's bottleneck sets the rate and queues what the window adds; a \
                 bigger window would only lengthen the queue"
            }
            Verdict::ReceiveWindow => {
                "the receiver's window is full: raise -w, or net.ipv4.tcp_rmem on the receiver"
            }
            Verdict::Receiver => {
                "the receiving application read too slowly, so its window closed; the window's \
                 size was not the limit"
            }
            Verdict::SendBuffer => {
                "the sender's socket buffer ran dry waiting for acknowledgements: raise -w, or \
                 net.ipv4.tcp_wmem on the sender"
            }
            Verdict::Sender => {
                "the sending application (or the CPU it waited for) did not keep up; the network \
                 never pushed back"
            }
            Verdict::NetworkLoss => {
                "the path dropped segments and the congestion window set the pace"
            }
            Verdict::InstanceAllowance => {
                "EC2 shaped the instance's packets to its allowance: the rate is the instance's \
                 limit, not the path's (a larger type, or one not \"up to\", lifts it)"
            }
            Verdict::CannotTell => "the figures do not name one limit",
        }
    }
}

/// How firmly the figures support a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Both the verdict's own figure and its cross-check agree (e.g. the window closed *and*
    /// the reader never waited for data).
    Clear,
    /// One side's figures point to it and the other side is unseen or silent; `cannot_tell`
    /// says what is missing.
    Likely,
}

/// One figure a verdict rests on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Which figure.
    pub name: FigureName,
    /// Its value, in the unit [`FigureName::unit`] names.
    pub value: f64,
}

impl Figure {
    /// `label value` for a reader (`held back by the receive window 62.0 %`), rates written
    /// by `rate` so a caller keeps its own rate unit.
    pub fn describe(&self, rate: &dyn Fn(f64) -> String) -> String {
        let v = self.value;
        let value = match self.name.unit() {
            Unit::BitsPerSecond => rate(v),
            Unit::Percent => format!("{v:.1} %"),
            Unit::Bytes => crate::units::ByteSize(v.max(0.0).round() as u64).to_string(),
            Unit::Micros if v < 1000.0 => format!("{v:.0} µs"),
            Unit::Micros => format!("{:.2} ms", v / 1000.0),
            Unit::Count if v.fract() == 0.0 => format!("{v:.0}"),
            Unit::Count => format!("{v:.1}"),
        };
        format!("{} {value}", self.name.label())
    }
}

/// The figures the engine reads, by name. Senders' shares are means over the direction's
/// streams; sizes are per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FigureName {
    /// The receivers' rate (the senders' where the receivers' is missing).
    #[serde(rename = "rate_bps")]
    Rate,
    /// `-b` × streams.
    #[serde(rename = "pacing_asked_bps")]
    PacingAsked,
    /// Time the receive window stopped the sender (`tcpi_rwnd_limited`).
    #[serde(rename = "rwnd_limited_pct")]
    RwndLimited,
    /// Time the send buffer stopped the sender (`tcpi_sndbuf_limited`).
    #[serde(rename = "sndbuf_limited_pct")]
    SndbufLimited,
    /// Time with nothing in flight or queued: the sending application supplied nothing
    /// (100 − `tcpi_busy_time`).
    #[serde(rename = "sender_idle_pct")]
    SenderIdle,
    /// Samples in which TCP had room in both windows and nothing queued to send.
    #[serde(rename = "nothing_queued_pct")]
    NothingQueued,
    /// The senders' send buffers ÷ mean RTT, all streams: what the buffers can carry.
    #[serde(rename = "send_buffer_ceiling_bps")]
    SendBufferCeiling,
    /// Busy time limited by neither window nor buffer: the congestion window (or pacing) set
    /// the pace.
    #[serde(rename = "cwnd_limited_pct")]
    CwndLimited,
    /// Mean advertised window ÷ mean RTT, all streams.
    #[serde(rename = "window_ceiling_bps")]
    WindowCeiling,
    /// The rate as a share of the window ceiling.
    #[serde(rename = "rate_of_window_ceiling_pct")]
    RateOfCeiling,
    /// Mean advertised window, per stream.
    #[serde(rename = "mean_window_bytes")]
    MeanWindow,
    /// Largest advertised window, per stream.
    #[serde(rename = "max_window_bytes")]
    MaxWindow,
    /// Largest advertised window in sender segments (MSS).
    #[serde(rename = "window_segments")]
    WindowSegments,
    /// Mean smoothed RTT under load.
    #[serde(rename = "rtt_mean_us")]
    RttMean,
    /// The kernel's lowest RTT sample: the path without a queue.
    #[serde(rename = "rtt_base_us")]
    RttBase,
    /// RTT under load − base RTT: time spent queued.
    #[serde(rename = "queue_delay_us")]
    QueueDelay,
    /// Segments retransmitted.
    #[serde(rename = "retransmits")]
    Retransmits,
    /// Retransmitted segments as a share of segments sent.
    #[serde(rename = "retransmitted_pct")]
    Retransmitted,
    /// The sending threads on a CPU.
    #[serde(rename = "sender_on_cpu_pct")]
    SenderOnCpu,
    /// The sending threads runnable, waiting for a CPU.
    #[serde(rename = "sender_waiting_for_cpu_pct")]
    SenderWaitingForCpu,
    /// The sending threads asleep (blocked on their sockets).
    #[serde(rename = "sender_asleep_pct")]
    SenderAsleep,
    /// The reading threads on a CPU.
    #[serde(rename = "reader_on_cpu_pct")]
    ReaderOnCpu,
    /// The reading threads runnable, waiting for a CPU.
    #[serde(rename = "reader_waiting_for_cpu_pct")]
    ReaderWaitingForCpu,
    /// The reading threads asleep (waiting for data).
    #[serde(rename = "reader_asleep_pct")]
    ReaderAsleep,
    /// Mean unread bytes in the receive queue as a share of `SO_RCVBUF`.
    #[serde(rename = "receive_queue_pct")]
    ReceiveQueue,
    /// Packets an end's driver counted as shaped by the EC2 allowance that limits the rate.
    #[serde(rename = "allowance_exceeded")]
    AllowanceExceeded,
    /// Those packets as a share of the packets the interface moved that way.
    #[serde(rename = "allowance_shaped_pct")]
    AllowanceShaped,
}

/// The unit of a figure's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bits per second.
    BitsPerSecond,
    /// Percent.
    Percent,
    /// Bytes.
    Bytes,
    /// Microseconds.
    Micros,
    /// A count.
    Count,
}

impl FigureName {
    /// What the figure is, for a reader.
    pub fn label(self) -> &'static str {
        match self {
            FigureName::Rate => "rate",
            FigureName::PacingAsked => "pacing asked",
            FigureName::RwndLimited => "held back by the receive window",
            FigureName::SndbufLimited => "held back by the send buffer",
            FigureName::SenderIdle => "sender idle (nothing in flight)",
            FigureName::NothingQueued => "room to send, nothing queued",
            FigureName::CwndLimited => "paced by the congestion window",
            FigureName::SendBufferCeiling => "send buffer ÷ RTT",
            FigureName::WindowCeiling => "window ÷ RTT",
            FigureName::RateOfCeiling => "rate of window ÷ RTT",
            FigureName::MeanWindow => "mean window per stream",
            FigureName::MaxWindow => "largest window per stream",
            FigureName::WindowSegments => "largest window in segments",
            FigureName::RttMean => "RTT under load",
            FigureName::RttBase => "base RTT",
            FigureName::QueueDelay => "queueing delay",
            FigureName::Retransmits => "retransmits",
            FigureName::Retransmitted => "segments retransmitted",
            FigureName::SenderOnCpu => "sending thread on a CPU",
            FigureName::SenderWaitingForCpu => "sending thread waiting for a CPU",
            FigureName::SenderAsleep => "sending thread blocked on its socket",
            FigureName::ReaderOnCpu => "reading thread on a CPU",
            FigureName::ReaderWaitingForCpu => "reading thread waiting for a CPU",
            FigureName::ReaderAsleep => "reading thread waiting for data",
            FigureName::ReceiveQueue => "receive queue full (mean, of SO_RCVBUF)",
            FigureName::AllowanceExceeded => "packets shaped by the instance's allowance",
            FigureName::AllowanceShaped => "of the packets that way",
        }
    }

    /// The unit of its value.
    pub fn unit(self) -> Unit {
        match self {
            FigureName::Rate
            | FigureName::PacingAsked
            | FigureName::WindowCeiling
            | FigureName::SendBufferCeiling => Unit::BitsPerSecond,
            FigureName::MeanWindow | FigureName::MaxWindow => Unit::Bytes,
            FigureName::RttMean | FigureName::RttBase | FigureName::QueueDelay => Unit::Micros,
            FigureName::Retransmits
            | FigureName::WindowSegments
            | FigureName::AllowanceExceeded => Unit::Count,
            _ => Unit::Percent,
        }
    }
}

/// What the figures could not tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Unknown {
    /// The receiver does not report how its reading thread spent the test (an iperf3 server,
    /// an older xbench, a kernel without scheduler statistics): why it read slowly — its CPU,
    /// a CPU other work held, or the application — cannot be told.
    ReaderUnseen,
    /// The receiver does not report its receive queue (an iperf3 server): whether a full
    /// window was small, or filled by data the application had not read, cannot be told.
    ReceiveQueueUnseen,
    /// The sender's `TCP_INFO` limited times are missing (an iperf3 server sending, a kernel
    /// older than 4.10): window, buffer, application and network cannot be told apart.
    SenderLimitsUnseen,
    /// The sending thread's scheduler figures are missing: whether it was busy on a CPU or
    /// waiting for one cannot be told.
    SenderThreadUnseen,
    /// The sending thread slept on its socket although its buffer could carry far more than
    /// the rate per RTT: what it waited for (ACKs its own busy CPU processed late, on
    /// loopback) the figures do not show.
    SenderSleepUnexplained,
    /// The sending thread slept on its socket, yet the rate is above what its send buffer
    /// carries per RTT: the kernel let more than the buffer into flight, so the buffer did not
    /// hold the rate and what did the figures do not show.
    SendBufferExceeded,
    /// Segments were lost while the receiver's queue held unread data: a full receive buffer
    /// drops what arrives, so the losses may be the reader's as well as the path's.
    LossesOrReader,
    /// Segments were retransmitted over loopback, where no network loses any: the receiving
    /// host dropped them (its socket's queue or backlog full) at moments its reader fell
    /// behind, which the reader's averages need not show.
    LoopbackDrops,
    /// Two limits held the sender for comparable shares of the time; neither is *the* cause.
    Mixed {
        /// The limits, the larger share first.
        causes: Vec<Verdict>,
    },
    /// The figures contradict each other: the window closed while the reader waited for data
    /// with its queue empty, and its size allowed far more than the rate.
    FiguresDisagree,
    /// The sender was busy, limited by neither window nor buffer, without losses or a standing
    /// queue: nothing TCP reports names the limit (on loopback, the CPUs are the path).
    NoLimitFound,
    /// The rate is above what the window allows over the measured RTT: the RTT samples do not
    /// describe the window's cycle, so the window ceiling says nothing here.
    CeilingNotComparable,
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unknown::ReaderUnseen => f.write_str(
                "why the receiver read slowly: it does not report how its reading thread spent \
                 the test (an iperf3 server never does)",
            ),
            Unknown::ReceiveQueueUnseen => f.write_str(
                "whether the window was small or full of data not yet read: the receiver does \
                 not report its receive queue (an iperf3 server never does)",
            ),
            Unknown::SenderLimitsUnseen => f.write_str(
                "what held the sender back: its TCP_INFO limited times are missing (an iperf3 \
                 server sending, or a kernel older than 4.10)",
            ),
            Unknown::SenderThreadUnseen => f.write_str(
                "whether the sending application was busy on a CPU or waiting for one: its \
                 scheduler figures are missing",
            ),
            Unknown::SenderSleepUnexplained => f.write_str(
                "what the sending thread waited for: it slept on its socket although its send \
                 buffer could carry far more than the rate (ACKs a busy CPU processes late?)",
            ),
            Unknown::SendBufferExceeded => f.write_str(
                "what held the sender back: it slept on its socket, but the rate is above what \
                 its send buffer carries per round trip, so the kernel let more than the buffer \
                 into flight",
            ),
            Unknown::LossesOrReader => f.write_str(
                "whether the losses were the path's or the receiver's: its queue held unread \
                 data, and a full receive buffer drops what arrives",
            ),
            Unknown::LoopbackDrops => f.write_str(
                "when the receiver fell behind: over loopback no network loses segments, so \
                 the retransmitted ones were dropped by the receiving host, at moments its \
                 reader's averages do not show",
            ),
            Unknown::Mixed { causes } => {
                let names: Vec<&str> = causes.iter().map(|c| c.name()).collect();
                write!(
                    f,
                    "which limit: {} held the sender back for comparable shares of the time",
                    names.join(" and ")
                )
            }
            Unknown::FiguresDisagree => f.write_str(
                "what closed the window: it closed while the reader waited for data with its \
                 queue near empty, and its size allowed far more (the figures disagree)",
            ),
            Unknown::NoLimitFound => f.write_str(
                "what set the pace: the sender was busy, held back by neither window nor buffer, \
                 without losses or a standing queue",
            ),
            Unknown::CeilingNotComparable => f.write_str(
                "whether the window is too small: the rate exceeds window ÷ RTT, so the RTT \
                 samples do not describe the window's cycle",
            ),
        }
    }
}
