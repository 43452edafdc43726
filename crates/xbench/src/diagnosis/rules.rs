//! The rules: each threshold with the reasoning behind it, and the order in which the
//! verdicts are tried. The first rule whose figures hold wins; a rule whose figures are
//! missing or contradict each other yields [`Verdict::CannotTell`] rather than passing the
//! question to a weaker rule.
//!
//! The sender's time splits four ways, from the kernel's chrono counters (Linux 4.10+): held
//! back by the receive window (`rwnd_limited`), by its own send buffer (`sndbuf_limited`),
//! idle with nothing in flight (100 − `busy`: the application supplied nothing), and the rest,
//! paced by the congestion window. The first three are *limits*; a limit is named only when it
//! holds the sender [`LIMIT_PCT`] of the time and twice as long as any other limit.

use super::inputs::Inputs;
use super::model::{Confidence, Diagnosis, Figure, FigureName, Unknown, Verdict};

/// A rate at or above this share of the pacing asked (`-b` × streams) is the cap's. The
/// kernel paces whole packets, headers included (a 1448-byte segment is 96.5 % of its
/// 1500 bytes on the wire), and BBR's pacing gain dips below 1 one round in eight: a paced
/// stream measured 88 % of `-b 50M` over a 40 ms lab path. A path that gives less than 80 %
/// of the asked rate is itself the limit and is diagnosed as such.
pub const PACING_SHARE: f64 = 0.8;

/// A standing queue adds at least this much to the RTT under load, µs. A host's own
/// scheduling puts loopback's mean smoothed RTT 0.1–2 ms above its base under load (delayed
/// ACKs, a reader waiting for a CPU), and a userspace delay line a few ms; a bufferbloated
/// bottleneck adds tens to hundreds of ms.
pub const QUEUE_DELAY_MIN_US: f64 = 5_000.0;

/// …and at least this share of the base RTT: a congestion control that probes (BBR's cwnd
/// gain of 2) adds up to a base RTT of its own on a long path, which is its probing, not a
/// queue that holds the rate down. Measured: BBR over a 40 ms path with a 256 KiB window ran
/// 20 % above its base RTT.
pub const QUEUE_DELAY_OF_BASE: f64 = 0.5;

/// The share of the time a limit must hold the sender back to be named, percent. BBR paces
/// its window out over the round trip and so *hits* a window that caps it only 15–50 % of the
/// time (CUBIC: 70–100 %); a sender no limit holds shows under 3 %.
pub const LIMIT_PCT: f64 = 10.0;

/// A limit is named only when it held the sender at least this many times longer than the
/// next one that reached [`LIMIT_PCT`]; closer than that, both are reported and neither named.
pub const DOMINANCE: f64 = 2.0;

/// A rate at or above this share of the window ceiling (mean advertised window ÷ mean RTT)
/// means the window is full: data in flight cannot exceed the window, so a rate this close to
/// window ÷ RTT has no room left. With the receive window holding the sender back
/// [`LIMIT_PCT`] of the time, the window's size is the limit.
pub const CEILING_SHARE: f64 = 0.85;

/// A rate above this multiple of the window ceiling cannot be: the smoothed-RTT samples do not
/// describe the window's cycle (on loopback, delayed ACKs inflate them a hundredfold), and the
/// ceiling is left out of the verdict.
pub const CEILING_OVERSHOOT: f64 = 1.25;

/// With the receive window holding the sender back, a window ceiling at least 1 ÷ this share
/// of the rate (2×) means the window's *size* allowed far more: it closed because the reader
/// fell behind. Between this and [`CEILING_SHARE`] the sender-side figures alone cannot tell a
/// window a little too small from a reader a little too slow; the reader's queue can.
pub const RECEIVER_CEILING_SHARE: f64 = 0.5;

/// A window whose largest is fewer segments than this stalls on the receiver's window updates
/// and delayed ACKs (silly-window avoidance waits for a segment's worth of room), whatever the
/// RTT and however fast the reader: the window's size is the limit. Loopback's 64 KiB segments
/// make `-w 64K` such a window.
pub const TINY_WINDOW_SEGMENTS: f64 = 4.0;

/// Where the receiver reports no queue (an iperf3 server): a window whose mean stayed under
/// this share of its own largest spent the test partly filled with unread data — a reader that
/// keeps up gives the whole window back within a wake-up, so its window sits at its largest
/// (measured: `-w 256K` over 40 ms, 0.9; the iperf3 server of issue 31, 0.35–0.52).
pub const WINDOW_SWING: f64 = 0.5;

/// A thread runnable (on a CPU or waiting for one) this share of the window never waited on
/// its socket: it is the side that could not keep up. Below 100 % because the scheduler's
/// clocks tick at context switches, and a test's first and last moments are spent in setup.
pub const SATURATED_PCT: f64 = 90.0;

/// A thread asleep this share of the window waited on its socket more than it wanted a CPU:
/// a reader that waits for data kept up; a sender blocked on its buffer while TCP had room
/// and nothing queued is held by that buffer (measured: 92–98 % asleep behind a 128 KiB
/// buffer over 40 ms; a sender starved of CPU on loopback, 0–41 %).
pub const ASLEEP_PCT: f64 = 50.0;

/// A receive queue holding this share of `SO_RCVBUF` unread on average means the reader left
/// the data waiting: the kernel doubles `SO_RCVBUF` for its bookkeeping and advertises at most
/// the payload share of it, so a queue that fills the window sits at 30–50 % of `SO_RCVBUF`; a
/// reader that keeps up leaves at most the bytes of a few wake-ups (under 5 %).
pub const QUEUE_FULL_PCT: f64 = 25.0;

/// TCP found room in both windows and nothing queued to send in this share of its samples:
/// the application did not keep its socket supplied. With the sending thread asleep (blocked
/// on a full buffer) that is the send buffer: it held only data in flight. The kernel's own
/// `sndbuf_limited` time misses much of this (CUBIC, 128 KiB send buffer over 40 ms: 0.6 %
/// limited while 90 % of the samples had nothing queued).
pub const NOTHING_QUEUED_PCT: f64 = 50.0;

/// A send buffer carrying at least this share of the rate's worth per RTT (buffer × 8 ÷ RTT
/// against the rate) is full of data in flight: measured 91–97 % behind 4 MiB and 128 KiB
/// buffers over 40 ms. Below it the buffer's size allowed twice the rate and is not the limit.
pub const SNDBUF_CEILING_SHARE: f64 = 0.5;

/// A rate above this multiple of the send buffer's ceiling was not held by the buffer: the
/// kernel let more than the buffer into flight. Seen on Linux 6.18: about one connection in
/// five opened with a non-blocking `connect` had 2.3 MB in flight behind a 128 KiB buffer
/// (200 Mbit/s over 40 ms against a 26 Mbit/s ceiling; `ss` showed `w2330488` beside
/// `tb131072`), with Python's sockets as with ours. The ceiling is an estimate (buffer ÷ mean
/// RTT), hence the margin.
pub const SNDBUF_CEILING_OVER: f64 = 1.5;

/// A sending thread that waited for a CPU this share of the window lost it to other work:
/// the host's CPU, not its buffer, held it (measured: a sender starved on loopback, 17–99 %;
/// behind a small buffer over 40 ms, 2–6 %).
pub const STARVED_WAIT_PCT: f64 = 10.0;

/// The sender idle (nothing in flight) this share of the window: the application did not
/// supply data; named when its thread's figures are missing.
pub const SENDER_IDLE_PCT: f64 = 20.0;

/// Losses name the network when the congestion window set the pace this share of the time…
pub const CWND_LIMITED_PCT: f64 = 50.0;

/// …and at least this share of the segments sent was retransmitted, percent. By the Mathis
/// bound (rate ≤ MSS ÷ RTT × 1.22 ÷ √p) a 0.1 % loss rate caps a 1448-byte-MSS stream at
/// 450 Mbit/s over 1 ms and 11 Mbit/s over 40 ms: enough to be the limit on most paths;
/// loopback and a clean LAN stay far below it.
pub const LOSS_PCT: f64 = 0.1;

/// Applies the rules in order: pacing, a standing queue, a full window, then the sender's
/// limits, the sender's thread, losses.
pub(super) fn decide(i: &Inputs) -> Diagnosis {
    let v = Values::of(i);
    if let Some(d) = before_tcp(i, &v) {
        return d;
    }
    let reader = Reader::of(i, &v);
    let sender_saturated = i
        .sender_thread
        .is_some_and(|t| t.runnable_pct() >= SATURATED_PCT);
    // A queue holds a rate only where the sender keeps the path full and the path pushes back:
    // not behind a sender that never waited on its socket or left TCP with nothing to send,
    // nor behind a reader that left data unread (on loopback a starved end inflates the RTT
    // by milliseconds with late ACKs, not with a queue).
    let app_limited = i
        .nothing_queued_pct
        .is_some_and(|p| p >= NOTHING_QUEUED_PCT);
    if v.standing_queue() && !sender_saturated && !app_limited && !reader.behind() {
        // A reader we cannot see (an iperf3 server) may be the late-ACKing end: likely, then,
        // and saying so (a starved iperf3 server on a loaded machine: 16 ms "queue" on
        // loopback, its window never closed).
        let (confidence, unknowns) = match reader {
            Reader::Unseen { .. } => (Confidence::Likely, vec![Unknown::ReaderUnseen]),
            _ => (Confidence::Clear, vec![]),
        };
        return verdict(
            &v,
            Verdict::PathQueue,
            confidence,
            &[
                FigureName::Rate,
                FigureName::RttMean,
                FigureName::RttBase,
                FigureName::QueueDelay,
                FigureName::Retransmits,
            ],
            unknowns,
        );
    }
    let window_full = v
        .ceiling_use
        .is_some_and(|u| (CEILING_SHARE..=CEILING_OVERSHOOT).contains(&u));
    let Some(l) = i.limits else {
        if window_full && !reader.behind() {
            return verdict(
                &v,
                Verdict::ReceiveWindow,
                Confidence::Likely,
                WINDOW_FIGURES,
                vec![Unknown::SenderLimitsUnseen],
            );
        }
        return cannot_tell(
            &v,
            &[
                FigureName::Rate,
                FigureName::RateOfCeiling,
                FigureName::Retransmits,
            ],
            vec![Unknown::SenderLimitsUnseen],
        );
    };
    // A window full at window ÷ RTT is too small — unless unread data filled it: a reader
    // that falls behind shrinks the window it advertises until the rate sits at its ceiling.
    if window_full && l.rwnd_limited_pct >= LIMIT_PCT && !reader.behind() {
        return window_size(&v, reader, WINDOW_FIGURES);
    }
    let limits = Limits::of(i);
    match limits.named() {
        Named::Mixed(causes) => mixed(&v, causes),
        Named::Window => window_closed(i, &v, reader, sender_saturated),
        Named::SendBuffer => send_buffer_full(&v, reader),
        Named::Idle | Named::None => unlimited(i, &v, limits, reader),
    }
}

/// The rungs above TCP's own figures: no rate at all, the pacing asked for, an EC2
/// allowance. `None` when none of them holds.
fn before_tcp(i: &Inputs, v: &Values<'_>) -> Option<Diagnosis> {
    if i.rate_bps <= 0.0 {
        return Some(cannot_tell(
            v,
            &[FigureName::Rate],
            vec![Unknown::NoLimitFound],
        ));
    }
    if let Some(asked) = i.pacing_asked_bps
        && i.rate_bps >= PACING_SHARE * asked
    {
        return Some(verdict(
            v,
            Verdict::Pacing,
            Confidence::Clear,
            &[FigureName::Rate, FigureName::PacingAsked],
            vec![],
        ));
    }
    // The instance's driver counted its packets shaped to an EC2 allowance, the way this
    // direction's data went, for at least 1 % of them: whatever TCP's figures show after
    // that (shaped packets are queued or dropped, so losses and queues follow), they answer
    // to the instance's limit.
    if i.allowance.is_some() {
        return Some(verdict(
            v,
            Verdict::InstanceAllowance,
            Confidence::Clear,
            &[
                FigureName::Rate,
                FigureName::AllowanceExceeded,
                FigureName::AllowanceShaped,
                FigureName::Retransmitted,
            ],
            vec![],
        ));
    }
    None
}

/// More than one limit held the sender for long: named, and no verdict.
fn mixed(v: &Values<'_>, causes: Vec<Verdict>) -> Diagnosis {
    cannot_tell(
        v,
        &[
            FigureName::Rate,
            FigureName::RwndLimited,
            FigureName::SndbufLimited,
            FigureName::SenderIdle,
            FigureName::RateOfCeiling,
            FigureName::SenderOnCpu,
            FigureName::SenderWaitingForCpu,
            FigureName::ReaderAsleep,
        ],
        vec![Unknown::Mixed { causes }],
    )
}

/// The sender was held on a full send buffer the most: the buffer's size, if the rate is about
/// what it carries per RTT. A buffer whose ceiling is far above the rate filled because its
/// data was acknowledged late: behind a reader that fell behind, the receiver (a starved
/// reader on a loaded machine: 8.1 Gbit/s, the buffer's ceiling 55, sender on its buffer 28 %
/// of the time); otherwise the figures disagree. A rate above the ceiling was never held by
/// the buffer (see [`SNDBUF_CEILING_OVER`]).
fn send_buffer_full(v: &Values<'_>, reader: Reader) -> Diagnosis {
    match v.sndbuf_ceiling_use {
        Some(u) if u > SNDBUF_CEILING_OVER => {
            cannot_tell(v, SNDBUF_FIGURES, vec![Unknown::SendBufferExceeded])
        }
        Some(u) if u < SNDBUF_CEILING_SHARE && reader.behind() => verdict(
            v,
            Verdict::Receiver,
            Confidence::Likely,
            &[
                FigureName::Rate,
                FigureName::SendBufferCeiling,
                FigureName::SndbufLimited,
                FigureName::ReceiveQueue,
                FigureName::ReaderOnCpu,
                FigureName::ReaderWaitingForCpu,
            ],
            vec![],
        ),
        // A reader we cannot see (an iperf3 server) shows nothing to disagree with: the
        // buffer filled with data acknowledged late, and the likely late end is that reader
        // (a starved iperf3 server on loopback: 1.3 Gbit/s, the buffer's ceiling 17.6, the
        // sender on its buffer 18 % of the time and asleep 95 %).
        Some(u) if u < SNDBUF_CEILING_SHARE && matches!(reader, Reader::Unseen { .. }) => verdict(
            v,
            Verdict::Receiver,
            Confidence::Likely,
            &[
                FigureName::Rate,
                FigureName::SendBufferCeiling,
                FigureName::SndbufLimited,
                FigureName::RttMean,
            ],
            vec![Unknown::ReaderUnseen],
        ),
        Some(u) if u < SNDBUF_CEILING_SHARE => {
            cannot_tell(v, SNDBUF_FIGURES, vec![Unknown::FiguresDisagree])
        }
        _ => verdict(
            v,
            Verdict::SendBuffer,
            Confidence::Clear,
            SNDBUF_FIGURES,
            vec![],
        ),
    }
}

/// What the receiving application did, as far as the figures show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// Its queue held [`QUEUE_FULL_PCT`] of its buffer, or its thread never waited for data:
    /// it left data unread.
    Behind,
    /// Its queue stayed short: it kept up.
    KeptUp,
    /// It reports nothing (an iperf3 server). `shrunk`: the window it advertised spent the
    /// test under [`WINDOW_SWING`] of its own largest, which only unread data does.
    Unseen { shrunk: bool },
}

impl Reader {
    fn of(i: &Inputs, v: &Values<'_>) -> Reader {
        match (i.receive_queue_pct, i.reader_thread) {
            (Some(q), _) if q >= QUEUE_FULL_PCT => Reader::Behind,
            // A reader that ran or wanted a CPU all the time did not keep up, however short
            // its queue at the samples (a starved reader on loopback: waiting for a CPU 97 %
            // of the time, its queue 20–45 % from one run to the next).
            (Some(_), Some(t)) if t.runnable_pct() >= SATURATED_PCT => Reader::Behind,
            (Some(_), _) => Reader::KeptUp,
            (None, Some(t)) if t.runnable_pct() >= SATURATED_PCT => Reader::Behind,
            (None, Some(_)) => Reader::KeptUp,
            (None, None) => Reader::Unseen {
                shrunk: v.window_swing.is_some_and(|s| s < WINDOW_SWING),
            },
        }
    }

    /// Behind, seen or inferred from the window's swing.
    fn behind(self) -> bool {
        matches!(self, Reader::Behind | Reader::Unseen { shrunk: true })
    }
}

/// The window's size is the limit: clear where the receiver's queue shows it stayed short,
/// likely where the receiver reports no queue.
fn window_size(v: &Values<'_>, reader: Reader, figures: &[FigureName]) -> Diagnosis {
    match reader {
        Reader::Unseen { .. } => verdict(
            v,
            Verdict::ReceiveWindow,
            Confidence::Likely,
            figures,
            vec![Unknown::ReceiveQueueUnseen],
        ),
        _ => verdict(
            v,
            Verdict::ReceiveWindow,
            Confidence::Clear,
            figures,
            vec![],
        ),
    }
}

/// The receive window held the sender back, but not at a full window ÷ RTT: a reader that fell
/// behind, or too few segments to flow. The reader's own figures decide; without them, the
/// window's swing or a ceiling far above the rate does.
fn window_closed(i: &Inputs, v: &Values<'_>, reader: Reader, sender_saturated: bool) -> Diagnosis {
    let comparable = v.ceiling_use.is_none_or(|u| u <= CEILING_OVERSHOOT);
    let mut unknowns = Vec::new();
    if !comparable {
        unknowns.push(Unknown::CeilingNotComparable);
    }
    // A window that never opened to a few segments cannot keep data flowing however fast the
    // reader is: its size is the limit. (One that shrank to a few segments because unread
    // data filled it opened wider at times: its largest says so.)
    if v.window_segments.is_some_and(|s| s < TINY_WINDOW_SEGMENTS) {
        return verdict(
            v,
            Verdict::ReceiveWindow,
            Confidence::Clear,
            &[
                FigureName::Rate,
                FigureName::RwndLimited,
                FigureName::MaxWindow,
                FigureName::WindowSegments,
                FigureName::ReceiveQueue,
            ],
            vec![],
        );
    }
    match reader {
        Reader::Behind => reader_behind(v, sender_saturated, unknowns),
        Reader::KeptUp => reader_kept_up(i, v, comparable, unknowns),
        Reader::Unseen { shrunk } => reader_unseen(v, shrunk, comparable, unknowns),
    }
}

/// [`window_closed`] behind a reader that left data unread: the receiver, unless the sender
/// was short of CPU as well. One function per kind of reader, so each reads as its own rule.
fn reader_behind(v: &Values<'_>, sender_saturated: bool, mut unknowns: Vec<Unknown>) -> Diagnosis {
    if sender_saturated {
        // Neither end ever waited on the other: both were short of CPU.
        unknowns.push(Unknown::Mixed {
            causes: vec![Verdict::Receiver, Verdict::Sender],
        });
        return cannot_tell(
            v,
            &[
                FigureName::Rate,
                FigureName::RwndLimited,
                FigureName::ReaderOnCpu,
                FigureName::ReaderWaitingForCpu,
                FigureName::SenderOnCpu,
                FigureName::SenderWaitingForCpu,
            ],
            unknowns,
        );
    }
    verdict(
        v,
        Verdict::Receiver,
        Confidence::Clear,
        &[
            FigureName::Rate,
            FigureName::RwndLimited,
            FigureName::WindowCeiling,
            FigureName::RateOfCeiling,
            FigureName::ReceiveQueue,
            FigureName::ReaderOnCpu,
            FigureName::ReaderWaitingForCpu,
        ],
        unknowns,
    )
}

/// [`window_closed`] behind a reader that kept up: the window's size where the rate is within
/// reach of its ceiling, else the figures cannot tell. Apart, as [`reader_behind`] is.
fn reader_kept_up(
    i: &Inputs,
    v: &Values<'_>,
    comparable: bool,
    mut unknowns: Vec<Unknown>,
) -> Diagnosis {
    // The reader kept up and the window still closed, the rate within reach of window ÷
    // RTT: the window's size (a jittery path's mean RTT puts a full window's rate at 80 %
    // of its ceiling: measured over the lab's delay line, `-w 256K`).
    if comparable && v.ceiling_use.is_some_and(|u| u >= RECEIVER_CEILING_SHARE) {
        return verdict(
            v,
            Verdict::ReceiveWindow,
            Confidence::Clear,
            WINDOW_FIGURES,
            unknowns,
        );
    }
    let asleep = i.reader_thread.is_none_or(|t| t.asleep_pct() >= ASLEEP_PCT);
    unknowns.push(if asleep {
        Unknown::FiguresDisagree
    } else {
        Unknown::Mixed {
            causes: vec![Verdict::ReceiveWindow, Verdict::Receiver],
        }
    });
    cannot_tell(
        v,
        &[
            FigureName::Rate,
            FigureName::RwndLimited,
            FigureName::RateOfCeiling,
            FigureName::MeanWindow,
            FigureName::ReaderAsleep,
            FigureName::ReceiveQueue,
        ],
        unknowns,
    )
}

/// [`window_closed`] behind a reader that reports nothing (an iperf3 server): likely the
/// receiver where the window shrank or its ceiling is far above the rate, else cannot tell.
/// Apart, as [`reader_behind`] is.
fn reader_unseen(
    v: &Values<'_>,
    shrunk: bool,
    comparable: bool,
    mut unknowns: Vec<Unknown>,
) -> Diagnosis {
    unknowns.push(Unknown::ReaderUnseen);
    // The window's figures; a verdict on the reader cites the sender's idle time beside them.
    let window = [
        FigureName::Rate,
        FigureName::RwndLimited,
        FigureName::WindowCeiling,
        FigureName::RateOfCeiling,
        FigureName::MeanWindow,
        FigureName::MaxWindow,
    ];
    if shrunk || v.ceiling_use.is_some_and(|u| u <= RECEIVER_CEILING_SHARE) {
        return verdict(
            v,
            Verdict::Receiver,
            Confidence::Likely,
            &[&window[..], &[FigureName::SenderIdle]].concat(),
            unknowns,
        );
    }
    if comparable {
        unknowns.push(Unknown::Mixed {
            causes: vec![Verdict::ReceiveWindow, Verdict::Receiver],
        });
    }
    cannot_tell(v, &window, unknowns)
}

/// What a window-size verdict rests on.
const WINDOW_FIGURES: &[FigureName] = &[
    FigureName::Rate,
    FigureName::WindowCeiling,
    FigureName::RateOfCeiling,
    FigureName::MeanWindow,
    FigureName::MaxWindow,
    FigureName::RttMean,
    FigureName::RwndLimited,
    FigureName::ReceiveQueue,
];

/// What a send-buffer verdict rests on.
const SNDBUF_FIGURES: &[FigureName] = &[
    FigureName::Rate,
    FigureName::SendBufferCeiling,
    FigureName::SndbufLimited,
    FigureName::NothingQueued,
    FigureName::SenderAsleep,
    FigureName::RttMean,
];

/// Neither window nor buffer held the sender back: its own thread, losses, or its idle time
/// say who set the pace, in that order.
fn unlimited(i: &Inputs, v: &Values<'_>, limits: Limits, reader: Reader) -> Diagnosis {
    if let Some(t) = i.sender_thread
        && t.runnable_pct() >= SATURATED_PCT
    {
        return verdict(
            v,
            Verdict::Sender,
            Confidence::Clear,
            SENDER_FIGURES,
            vec![],
        );
    }
    if i.nothing_queued_pct
        .is_some_and(|p| p >= NOTHING_QUEUED_PCT)
    {
        return not_written(i, v);
    }
    if limits.cwnd >= CWND_LIMITED_PCT && v.retransmitted_pct.is_some_and(|p| p >= LOSS_PCT) {
        return losses(i, v, reader);
    }
    if limits.idle >= SENDER_IDLE_PCT && i.sender_thread.is_none() {
        return verdict(
            v,
            Verdict::Sender,
            Confidence::Likely,
            SENDER_FIGURES,
            vec![Unknown::SenderThreadUnseen],
        );
    }
    cannot_tell(
        v,
        &[
            FigureName::Rate,
            FigureName::CwndLimited,
            FigureName::SenderIdle,
            FigureName::RwndLimited,
            FigureName::SndbufLimited,
            FigureName::Retransmitted,
            FigureName::RttMean,
            FigureName::RttBase,
            FigureName::SenderAsleep,
        ],
        vec![Unknown::NoLimitFound],
    )
}

/// The figures a verdict on the sending application cites.
const SENDER_FIGURES: &[FigureName] = &[
    FigureName::Rate,
    FigureName::SenderOnCpu,
    FigureName::SenderWaitingForCpu,
    FigureName::SenderAsleep,
    FigureName::SenderIdle,
    FigureName::NothingQueued,
    FigureName::SendBufferCeiling,
    FigureName::RwndLimited,
    FigureName::SndbufLimited,
];

/// TCP had room and nothing to send: which of the send buffer and the sender's CPU held the
/// application back, from its thread's time.
fn not_written(i: &Inputs, v: &Values<'_>) -> Diagnosis {
    // TCP had room and nothing to send: the application did not write. Blocked on a
    // buffer that carries about the rate per RTT, the buffer held it; wanting a CPU most
    // of the time, the CPU did. A sender starved of CPU also sleeps on a buffer far larger
    // than the rate needs, waiting for the ACKs its busy CPU processes late (loopback,
    // measured: asleep 50–83 %, waiting for a CPU 17–50 %, the buffer's ceiling a
    // thousand times the rate).
    let buffer_full = v
        .sndbuf_ceiling_use
        .is_none_or(|u| (SNDBUF_CEILING_SHARE..=SNDBUF_CEILING_OVER).contains(&u));
    let buffer_exceeded = v
        .sndbuf_ceiling_use
        .is_some_and(|u| u > SNDBUF_CEILING_OVER);
    match i.sender_thread {
        // Asleep, but not on a buffer that the rate shows was never full.
        Some(t) if t.asleep_pct() >= ASLEEP_PCT && buffer_exceeded => {
            cannot_tell(v, SNDBUF_FIGURES, vec![Unknown::SendBufferExceeded])
        }
        Some(t) if t.asleep_pct() >= ASLEEP_PCT && buffer_full => verdict(
            v,
            Verdict::SendBuffer,
            Confidence::Clear,
            SNDBUF_FIGURES,
            vec![],
        ),
        Some(t) if t.asleep_pct() < ASLEEP_PCT => verdict(
            v,
            Verdict::Sender,
            Confidence::Clear,
            SENDER_FIGURES,
            vec![],
        ),
        Some(t) if t.waiting_for_cpu_pct >= STARVED_WAIT_PCT => verdict(
            v,
            Verdict::Sender,
            Confidence::Likely,
            SENDER_FIGURES,
            vec![Unknown::SenderSleepUnexplained],
        ),
        Some(_) => cannot_tell(
            v,
            SENDER_FIGURES,
            vec![
                Unknown::Mixed {
                    causes: vec![Verdict::SendBuffer, Verdict::Sender],
                },
                Unknown::SenderSleepUnexplained,
            ],
        ),
        None => cannot_tell(
            v,
            SNDBUF_FIGURES,
            vec![
                Unknown::Mixed {
                    causes: vec![Verdict::SendBuffer, Verdict::Sender],
                },
                Unknown::SenderThreadUnseen,
            ],
        ),
    }
}

/// The congestion window set the pace and segments were retransmitted: the network's losses,
/// unless the receiver had fallen behind (its full buffer drops what arrives) or the path is
/// loopback, where no network loses anything.
fn losses(i: &Inputs, v: &Values<'_>, reader: Reader) -> Diagnosis {
    // A receiver whose queue held unread data loses what arrives when its buffer is full
    // (the kernel prunes it): a starved reader on loopback, measured, 2.2 % retransmitted
    // with the window never closed. Over loopback no path loses anything, so the drops are
    // the receiving host's and the reader fell behind: the receiver, clearly.
    if reader == Reader::Behind && i.loopback {
        return verdict(
            v,
            Verdict::Receiver,
            Confidence::Clear,
            &[
                FigureName::Rate,
                FigureName::ReceiveQueue,
                FigureName::ReaderOnCpu,
                FigureName::ReaderWaitingForCpu,
                FigureName::Retransmitted,
                FigureName::CwndLimited,
            ],
            vec![],
        );
    }
    // Elsewhere the losses may be the path's or the reader's; the reader's queue says it
    // fell behind, so it is named, as likely.
    if reader == Reader::Behind {
        return verdict(
            v,
            Verdict::Receiver,
            Confidence::Likely,
            &[
                FigureName::Rate,
                FigureName::ReceiveQueue,
                FigureName::ReaderOnCpu,
                FigureName::ReaderWaitingForCpu,
                FigureName::Retransmitted,
                FigureName::CwndLimited,
            ],
            vec![Unknown::LossesOrReader],
        );
    }
    // Over loopback nothing is lost on a wire: the receiving host dropped what it could
    // not queue (seen on a loaded machine: 0.25 % retransmitted, the congestion window
    // the limit 79 % of the time, the reader's averages keeping up). The receiver, as
    // likely: its averages did not show the moments it fell behind.
    if i.loopback {
        return verdict(
            v,
            Verdict::Receiver,
            Confidence::Likely,
            &[
                FigureName::Rate,
                FigureName::Retransmits,
                FigureName::Retransmitted,
                FigureName::CwndLimited,
                FigureName::ReceiveQueue,
                FigureName::ReaderOnCpu,
                FigureName::ReaderWaitingForCpu,
            ],
            vec![Unknown::LoopbackDrops],
        );
    }
    verdict(
        v,
        Verdict::NetworkLoss,
        Confidence::Clear,
        &[
            FigureName::Rate,
            FigureName::Retransmits,
            FigureName::Retransmitted,
            FigureName::CwndLimited,
            FigureName::RttMean,
        ],
        vec![],
    )
}

/// The sender's time by limit, percent of the window.
#[derive(Debug, Clone, Copy)]
struct Limits {
    rwnd: f64,
    sndbuf: f64,
    /// Nothing in flight: the application supplied nothing.
    idle: f64,
    /// Busy without a window or buffer limit: the congestion window's pace.
    cwnd: f64,
}

/// Which limit the shares name.
enum Named {
    Window,
    SendBuffer,
    Idle,
    /// No limit reached [`LIMIT_PCT`].
    None,
    /// Two limits within [`DOMINANCE`] of each other.
    Mixed(Vec<Verdict>),
}

impl Limits {
    fn of(i: &Inputs) -> Limits {
        let l = i.limits.unwrap_or(crate::report::SenderLimits {
            busy_pct: 100.0,
            rwnd_limited_pct: 0.0,
            sndbuf_limited_pct: 0.0,
        });
        let pct = |x: f64| {
            if x.is_finite() {
                x.clamp(0.0, 100.0)
            } else {
                0.0
            }
        };
        let (busy, rwnd, sndbuf) = (
            pct(l.busy_pct),
            pct(l.rwnd_limited_pct),
            pct(l.sndbuf_limited_pct),
        );
        Limits {
            rwnd,
            sndbuf,
            idle: 100.0 - busy,
            cwnd: (busy - rwnd - sndbuf).max(0.0),
        }
    }

    fn named(&self) -> Named {
        let mut shares = [
            (Verdict::ReceiveWindow, self.rwnd),
            (Verdict::SendBuffer, self.sndbuf),
            (Verdict::Sender, self.idle),
        ];
        shares.sort_by(|a, b| b.1.total_cmp(&a.1));
        let [(top, first), (next, second), _] = shares;
        if first < LIMIT_PCT {
            return Named::None;
        }
        if second >= LIMIT_PCT && first < DOMINANCE * second {
            let name = |v: Verdict| match v {
                // A closed window is the receiver's, or its size's: the shares cannot tell.
                Verdict::ReceiveWindow => Verdict::Receiver,
                other => other,
            };
            return Named::Mixed(vec![name(top), name(next)]);
        }
        match top {
            Verdict::ReceiveWindow => Named::Window,
            Verdict::SendBuffer => Named::SendBuffer,
            _ => Named::Idle,
        }
    }
}

/// Every figure the rules can cite, computed once.
struct Values<'a> {
    i: &'a Inputs,
    /// Rate ÷ window ceiling.
    ceiling_use: Option<f64>,
    /// Send buffers × 8 ÷ mean RTT, all streams, bits per second.
    sndbuf_ceiling: Option<f64>,
    /// Rate ÷ that.
    sndbuf_ceiling_use: Option<f64>,
    window_segments: Option<f64>,
    /// Mean advertised window ÷ the largest.
    window_swing: Option<f64>,
    queue_delay_us: Option<f64>,
    retransmitted_pct: Option<f64>,
    limits: Limits,
}

impl<'a> Values<'a> {
    fn of(i: &'a Inputs) -> Self {
        let sndbuf_ceiling = match (i.sndbuf_bytes, i.rtt_mean_us) {
            (Some(b), Some(r)) if r > 0.0 => Some(b * 8.0 / (r / 1e6) * f64::from(i.streams)),
            _ => None,
        };
        Values {
            sndbuf_ceiling,
            sndbuf_ceiling_use: sndbuf_ceiling.filter(|c| *c > 0.0).map(|c| i.rate_bps / c),
            i,
            ceiling_use: i
                .window_ceiling_bps
                .filter(|c| *c > 0.0)
                .map(|c| i.rate_bps / c),
            window_segments: match (i.max_window_bytes.or(i.mean_window_bytes), i.mss_bytes) {
                (Some(w), Some(m)) if m > 0.0 => Some(w / m),
                _ => None,
            },
            window_swing: match (i.mean_window_bytes, i.max_window_bytes) {
                (Some(m), Some(x)) if x > 0.0 => Some(m / x),
                _ => None,
            },
            queue_delay_us: match (i.rtt_mean_us, i.rtt_base_us) {
                (Some(m), Some(b)) => Some((m - b).max(0.0)),
                _ => None,
            },
            retransmitted_pct: i
                .segments_sent
                .filter(|s| *s > 0.0)
                .map(|s| i.retransmits as f64 / s * 100.0),
            limits: Limits::of(i),
        }
    }

    fn standing_queue(&self) -> bool {
        match (self.queue_delay_us, self.i.rtt_base_us) {
            (Some(d), Some(base)) => d >= QUEUE_DELAY_MIN_US && d >= QUEUE_DELAY_OF_BASE * base,
            _ => false,
        }
    }

    fn get(&self, name: FigureName) -> Option<f64> {
        let i = self.i;
        let limits = i.limits.map(|_| self.limits);
        match name {
            FigureName::Rate => Some(i.rate_bps),
            FigureName::PacingAsked => i.pacing_asked_bps,
            FigureName::RwndLimited => limits.map(|l| l.rwnd),
            FigureName::SndbufLimited => limits.map(|l| l.sndbuf),
            FigureName::SenderIdle => limits.map(|l| l.idle),
            FigureName::CwndLimited => limits.map(|l| l.cwnd),
            FigureName::NothingQueued => i.nothing_queued_pct,
            FigureName::SendBufferCeiling => self.sndbuf_ceiling,
            FigureName::WindowCeiling => i.window_ceiling_bps,
            FigureName::RateOfCeiling => self.ceiling_use.map(|u| u * 100.0),
            FigureName::MeanWindow => i.mean_window_bytes,
            FigureName::MaxWindow => i.max_window_bytes,
            FigureName::WindowSegments => self.window_segments,
            FigureName::RttMean => i.rtt_mean_us,
            FigureName::RttBase => i.rtt_base_us,
            FigureName::QueueDelay => self.queue_delay_us,
            FigureName::Retransmits => Some(i.retransmits as f64),
            FigureName::Retransmitted => self.retransmitted_pct,
            FigureName::SenderOnCpu => i.sender_thread.map(|t| t.on_cpu_pct),
            FigureName::SenderWaitingForCpu => i.sender_thread.map(|t| t.waiting_for_cpu_pct),
            FigureName::SenderAsleep => i.sender_thread.map(|t| t.asleep_pct()),
            FigureName::ReaderOnCpu => i.reader_thread.map(|t| t.on_cpu_pct),
            FigureName::ReaderWaitingForCpu => i.reader_thread.map(|t| t.waiting_for_cpu_pct),
            FigureName::ReaderAsleep => i.reader_thread.map(|t| t.asleep_pct()),
            FigureName::ReceiveQueue => i.receive_queue_pct,
            FigureName::AllowanceExceeded => i.allowance.map(|a| a.exceeded as f64),
            FigureName::AllowanceShaped => i.allowance.and_then(|a| a.shaped_pct),
        }
    }

    /// The named figures that exist, in order.
    fn figures(&self, names: &[FigureName]) -> Vec<Figure> {
        names
            .iter()
            .filter_map(|&name| {
                self.get(name)
                    .filter(|v| v.is_finite())
                    .map(|value| Figure { name, value })
            })
            .collect()
    }
}

fn verdict(
    v: &Values<'_>,
    verdict: Verdict,
    confidence: Confidence,
    figures: &[FigureName],
    cannot_tell: Vec<Unknown>,
) -> Diagnosis {
    Diagnosis {
        verdict,
        confidence: Some(confidence),
        figures: v.figures(figures),
        cannot_tell,
    }
}

fn cannot_tell(v: &Values<'_>, figures: &[FigureName], cannot_tell: Vec<Unknown>) -> Diagnosis {
    Diagnosis {
        verdict: Verdict::CannotTell,
        confidence: None,
        figures: v.figures(figures),
        cannot_tell,
    }
}

#[cfg(test)]
mod tests {
    //! Each cause put in place through its figures (most taken from measured runs, named in
    //! each test), checking that the verdict names exactly that cause.

    use super::*;
    use crate::diagnosis::Peer;
    use crate::report::{SenderLimits, ThreadTime};

    /// A sender no limit holds, over a clean 40 ms path, both ends xbench and keeping up.
    fn base() -> Inputs {
        Inputs {
            rate_bps: 100e6,
            streams: 1,
            pacing_asked_bps: None,
            limits: Some(SenderLimits {
                busy_pct: 100.0,
                rwnd_limited_pct: 0.0,
                sndbuf_limited_pct: 0.0,
            }),
            window_ceiling_bps: Some(1e9),
            mean_window_bytes: Some(5e6),
            max_window_bytes: Some(5.2e6),
            mss_bytes: Some(1448.0),
            rtt_mean_us: Some(40_500.0),
            rtt_base_us: Some(40_000.0),
            retransmits: 0,
            segments_sent: Some(100e6 * 5.0 / 8.0 / 1448.0),
            max_cwnd_bytes: Some(500_000),
            nothing_queued_pct: Some(0.0),
            sndbuf_bytes: Some(4e6),
            sender_thread: Some(thread(1.0, 1.0)),
            reader_thread: Some(thread(1.0, 1.0)),
            receive_queue_pct: Some(0.5),
            loopback: false,
            allowance: None,
            sender: Peer::Xbench,
            receiver: Peer::Xbench,
        }
    }

    fn thread(on_cpu_pct: f64, waiting_for_cpu_pct: f64) -> ThreadTime {
        ThreadTime {
            on_cpu_pct,
            waiting_for_cpu_pct,
        }
    }

    fn limits(busy: f64, rwnd: f64, sndbuf: f64) -> Option<SenderLimits> {
        Some(SenderLimits {
            busy_pct: busy,
            rwnd_limited_pct: rwnd,
            sndbuf_limited_pct: sndbuf,
        })
    }

    #[track_caller]
    fn check(i: &Inputs, verdict: Verdict, confidence: Option<Confidence>) -> Diagnosis {
        let d = i.diagnose();
        assert_eq!(d.verdict, verdict, "{d:#?}");
        assert_eq!(d.confidence, confidence, "{d:#?}");
        assert_eq!(
            d.confidence.is_none(),
            d.verdict == Verdict::CannotTell,
            "a confidence exactly when there is a verdict"
        );
        d
    }

    /// Issue 31: `--iperf3 -P 2` against `iperf3 -s` on loopback: 22.0 Gbit/s, a 4.75 MiB
    /// window over 194 µs (199 Gbit/s, 9× the rate), the window closed much of the time. The
    /// window's size was not the limit: the iperf3 server read too slowly, and it says
    /// nothing about why.
    #[test]
    fn an_iperf3_server_that_reads_slowly_is_not_window_limited() {
        let i = Inputs {
            rate_bps: 22.0e9,
            streams: 2,
            limits: limits(96.0, 62.0, 0.5),
            window_ceiling_bps: Some(199e9),
            mean_window_bytes: Some(4.75 * 1048576.0 / 2.0),
            max_window_bytes: Some(6.0 * 1048576.0),
            mss_bytes: Some(65483.0),
            rtt_mean_us: Some(194.0),
            rtt_base_us: Some(3.0),
            retransmits: 44,
            segments_sent: Some(22e9 * 3.0 / 8.0 / 65483.0),
            sender_thread: Some(thread(20.0, 30.0)),
            reader_thread: None,
            receive_queue_pct: None,
            receiver: Peer::Iperf3,
            ..base()
        };
        let d = check(&i, Verdict::Receiver, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::ReaderUnseen]);
        assert_eq!(d.figure(FigureName::RwndLimited), Some(62.0));
        let of_ceiling = d.figure(FigureName::RateOfCeiling).unwrap();
        assert!((of_ceiling - 22.0 / 199.0 * 100.0).abs() < 1e-9);

        // A starved iperf3 reader whose window spent the test at a fifth of its own largest: not
        // "a window too small" (its largest says otherwise), the reader.
        let starved = Inputs {
            rate_bps: 900e6,
            limits: limits(99.0, 95.0, 0.0),
            window_ceiling_bps: Some(1e9),
            mean_window_bytes: Some(200_000.0),
            max_window_bytes: Some(1_048_576.0),
            ..i.clone()
        };
        let d = check(&starved, Verdict::Receiver, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::ReaderUnseen]);
        // …whereas a window that stays at its largest and is full is the window's size.
        let small = Inputs {
            mean_window_bytes: Some(900_000.0),
            ..starved
        };
        let d = check(&small, Verdict::ReceiveWindow, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::ReceiveQueueUnseen]);

        // The same under load, the sender idle almost as often as it waited on the window:
        // two limits, neither named (measured: rwnd 35–41 %, idle 26–30 %).
        let loaded = Inputs {
            limits: limits(71.0, 38.0, 0.0),
            ..i
        };
        let d = check(&loaded, Verdict::CannotTell, None);
        assert_eq!(
            d.cannot_tell,
            vec![Unknown::Mixed {
                causes: vec![Verdict::Receiver, Verdict::Sender]
            }]
        );
    }

    /// Lab, 40 ms RTT, `-w 256K -C cubic`: 60.2 Mbit/s against a 59.8 Mbit/s ceiling, rwnd
    /// 99.3 %, the server's queue 1 % full. Under BBR (67.4 against 69.2, rwnd 16 %, sndbuf
    /// 6 %) the window is full all the same.
    #[test]
    fn a_full_small_window_is_the_window() {
        let cubic = Inputs {
            rate_bps: 60.2e6,
            limits: limits(100.0, 99.3, 0.0),
            window_ceiling_bps: Some(59.8e6),
            mean_window_bytes: Some(301_916.0),
            max_window_bytes: Some(330_000.0),
            receive_queue_pct: Some(1.1),
            ..base()
        };
        let d = check(&cubic, Verdict::ReceiveWindow, Some(Confidence::Clear));
        assert!(d.cannot_tell.is_empty());
        assert!(d.figure(FigureName::WindowCeiling).is_some());
        let bbr = Inputs {
            rate_bps: 67.4e6,
            limits: limits(100.0, 16.1, 6.0),
            window_ceiling_bps: Some(69.2e6),
            ..cubic.clone()
        };
        check(&bbr, Verdict::ReceiveWindow, Some(Confidence::Clear));
        // Over the lab's delay line with a 500 Mbit/s cap: 51.7 Mbit/s at 82 % of a ceiling
        // whose mean RTT the line's jitter raised, rwnd 77 %, the reader waiting for data 84 %
        // of the time with its queue 5 % full: it kept up, so the window's size.
        let jittery = Inputs {
            rate_bps: 51.7e6,
            limits: limits(100.0, 76.8, 0.0),
            window_ceiling_bps: Some(51.7e6 / 0.823),
            receive_queue_pct: Some(5.2),
            reader_thread: Some(thread(1.0, 15.0)),
            ..cubic.clone()
        };
        check(&jittery, Verdict::ReceiveWindow, Some(Confidence::Clear));
        // An iperf3 receiver does not show its queue: a full window may be full of unread data.
        let iperf3 = Inputs {
            receive_queue_pct: None,
            reader_thread: None,
            receiver: Peer::Iperf3,
            ..cubic
        };
        let d = check(&iperf3, Verdict::ReceiveWindow, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::ReceiveQueueUnseen]);
    }

    /// Loopback, `-w 8K`: a 16 KiB window under one 64 KiB segment stalls on window updates
    /// (1.2 Mbit/s against a 1.4 Gbit/s "ceiling"); the reader waits for data all the time.
    #[test]
    fn a_window_of_few_segments_is_the_window_whatever_the_ceiling() {
        let i = Inputs {
            rate_bps: 1.2e6,
            limits: limits(100.0, 99.8, 0.0),
            window_ceiling_bps: Some(1369e6),
            mean_window_bytes: Some(16384.0),
            max_window_bytes: Some(16384.0),
            mss_bytes: Some(65483.0),
            rtt_mean_us: Some(96.0),
            rtt_base_us: Some(26.0),
            reader_thread: Some(thread(0.0, 2.0)),
            receive_queue_pct: Some(3.3),
            ..base()
        };
        let d = check(&i, Verdict::ReceiveWindow, Some(Confidence::Clear));
        assert!(d.figure(FigureName::WindowSegments).unwrap() < 1.0);
    }

    /// A reader that falls behind shrinks its own window until the rate sits at window ÷ RTT
    /// (loopback `-l 1K`: 86 % of the ceiling, rwnd 85 %, the server's queue 88 % full): the
    /// queue, not the ceiling, says who is to blame.
    #[test]
    fn a_window_full_of_unread_data_is_the_receiver() {
        let i = Inputs {
            rate_bps: 2651e6,
            limits: limits(94.0, 84.9, 0.0),
            window_ceiling_bps: Some(3086e6),
            mean_window_bytes: Some(218_282.0),
            mss_bytes: Some(65483.0),
            sender_thread: Some(thread(12.0, 37.0)),
            reader_thread: Some(thread(18.0, 78.0)),
            receive_queue_pct: Some(88.4),
            ..base()
        };
        let d = check(&i, Verdict::Receiver, Some(Confidence::Clear));
        assert_eq!(d.figure(FigureName::ReceiveQueue), Some(88.4));
        assert_eq!(d.figure(FigureName::ReaderWaitingForCpu), Some(78.0));
    }

    /// A reader starved of CPU: the window closed nine tenths of the time though it allowed
    /// twenty times the rate, the reader always runnable and its queue full.
    #[test]
    fn a_starved_reader_is_the_receiver() {
        let i = Inputs {
            rate_bps: 200e6,
            limits: limits(99.0, 90.0, 0.0),
            window_ceiling_bps: Some(4e9),
            sender_thread: Some(thread(2.0, 1.0)),
            reader_thread: Some(thread(2.0, 95.0)),
            receive_queue_pct: Some(60.0),
            ..base()
        };
        check(&i, Verdict::Receiver, Some(Confidence::Clear));
        // Both ends starved: neither waited on the other.
        let both = Inputs {
            sender_thread: Some(thread(5.0, 90.0)),
            ..i
        };
        let d = check(&both, Verdict::CannotTell, None);
        assert_eq!(
            d.cannot_tell,
            vec![Unknown::Mixed {
                causes: vec![Verdict::Receiver, Verdict::Sender]
            }]
        );
    }

    /// The window closed while the reader waited for data with an empty queue and the window
    /// allowed ten times the rate: no rule explains that, and the engine says so.
    #[test]
    fn a_closed_window_with_an_idle_reader_is_a_contradiction() {
        let i = Inputs {
            limits: limits(100.0, 60.0, 0.0),
            reader_thread: Some(thread(2.0, 1.0)),
            receive_queue_pct: Some(1.0),
            ..base()
        };
        let d = check(&i, Verdict::CannotTell, None);
        assert_eq!(d.cannot_tell, vec![Unknown::FiguresDisagree]);
    }

    /// Lab, 40 ms, `-b 50M`: 44.96 Mbit/s under BBR, 48.5 under CUBIC.
    #[test]
    fn a_rate_at_the_asked_pacing_is_the_pacing() {
        let i = Inputs {
            rate_bps: 44.96e6,
            pacing_asked_bps: Some(50e6),
            ..base()
        };
        check(&i, Verdict::Pacing, Some(Confidence::Clear));
        // Half the asked rate: the cap is not what held it; the rest of the rules decide.
        let below = Inputs {
            pacing_asked_bps: Some(200e6),
            limits: limits(100.0, 0.0, 0.0),
            retransmits: 3000,
            ..i
        };
        check(&below, Verdict::NetworkLoss, Some(Confidence::Clear));
    }

    /// Lab, 100 Mbit/s tbf with an 8 MB queue: 93.1 Mbit/s, RTT 169 ms under load against
    /// 6 µs unloaded. BBR over a 40 ms path 20 % above its base RTT is not a queue.
    #[test]
    fn a_standing_queue_is_the_paths_queue() {
        let i = Inputs {
            rate_bps: 93.1e6,
            rtt_mean_us: Some(168_787.0),
            rtt_base_us: Some(6.0),
            ..base()
        };
        let d = check(&i, Verdict::PathQueue, Some(Confidence::Clear));
        assert!(d.figure(FigureName::QueueDelay).unwrap() > 168_000.0);
        // A sender that never waited on its socket is not held by a queue: a loopback RTT
        // inflated by delayed ACKs behind a starved sender is not one.
        let starved = Inputs {
            sender_thread: Some(thread(2.0, 97.0)),
            limits: limits(60.0, 0.0, 0.0),
            ..i.clone()
        };
        check(&starved, Verdict::Sender, Some(Confidence::Clear));
        let bbr_probe = Inputs {
            rtt_mean_us: Some(47_835.0),
            rtt_base_us: Some(40_025.0),
            nothing_queued_pct: Some(0.0),
            ..i
        };
        assert_ne!(bbr_probe.diagnose().verdict, Verdict::PathQueue);
        // Behind an iperf3 server, whose reader reports nothing, a late-ACKing receiver
        // inflates the RTT alike: the queue is likely, and the note says what is unseen.
        let unseen = Inputs {
            reader_thread: None,
            receive_queue_pct: None,
            ..i
        };
        let d = check(&unseen, Verdict::PathQueue, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::ReaderUnseen]);
    }

    /// Lab, 200 Mbit/s tbf with a 30 KB queue, CUBIC: 134.8 Mbit/s, 3,043 retransmits (5 %).
    #[test]
    fn losses_with_the_congestion_window_full_are_the_network() {
        let i = Inputs {
            rate_bps: 134.8e6,
            retransmits: 3043,
            segments_sent: Some(134.8e6 * 5.0 / 8.0 / 1448.0),
            rtt_mean_us: Some(1263.0),
            rtt_base_us: Some(957.0),
            ..base()
        };
        let d = check(&i, Verdict::NetworkLoss, Some(Confidence::Clear));
        assert!((4.0..6.0).contains(&d.figure(FigureName::Retransmitted).unwrap()));
        // Loopback's handful of retransmits is not loss that limits anything.
        let few = Inputs {
            retransmits: 20,
            segments_sent: Some(1e6),
            ..i
        };
        assert_ne!(few.diagnose().verdict, Verdict::NetworkLoss);
        // The same losses over loopback are the receiving host's drops, not a network's.
        let lo = Inputs {
            loopback: true,
            ..i
        };
        let d = check(&lo, Verdict::Receiver, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::LoopbackDrops]);
        // A reader seen to fall behind (waiting for a CPU 96 % of the time): on a network
        // the losses may be the path's or its own, so the receiver is likely; over loopback,
        // where no path loses anything, the receiver is clear.
        let behind = Inputs {
            reader_thread: Some(thread(3.0, 96.0)),
            ..i
        };
        let d = check(&behind, Verdict::Receiver, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::LossesOrReader]);
        let d = check(
            &Inputs {
                loopback: true,
                ..behind
            },
            Verdict::Receiver,
            Some(Confidence::Clear),
        );
        assert!(d.cannot_tell.is_empty(), "{:?}", d.cannot_tell);
        // The same losses where the sender's driver counted its packets shaped to its
        // bandwidth allowance: the instance, not the path.
        let shaped = Inputs {
            allowance: Some(super::super::inputs::AllowanceHit {
                exceeded: 12_408,
                shaped_pct: Some(1.03),
            }),
            ..i
        };
        let d = check(&shaped, Verdict::InstanceAllowance, Some(Confidence::Clear));
        assert_eq!(d.figure(FigureName::AllowanceExceeded), Some(12_408.0));
    }

    /// Loopback, a starved reader on a loaded machine: 8.1 Gbit/s, the sender held on its
    /// send buffer 28 % of the time, but the buffer carries 55 Gbit/s per RTT: it filled with
    /// data acknowledged late. The reader that fell behind is the likely limit, not the
    /// buffer; with the reader keeping up, the figures disagree.
    #[test]
    fn a_send_buffer_far_above_the_rate_is_not_the_limit() {
        let i = Inputs {
            rate_bps: 8.1e9,
            sndbuf_bytes: Some(4_194_304.0),
            rtt_mean_us: Some(607.0),
            limits: limits(100.0, 0.0, 28.0),
            reader_thread: Some(thread(3.0, 96.0)),
            ..base()
        };
        check(&i, Verdict::Receiver, Some(Confidence::Likely));
        let kept_up = Inputs {
            reader_thread: Some(thread(30.0, 5.0)),
            ..i
        };
        let d = kept_up.diagnose();
        assert_eq!(d.verdict, Verdict::CannotTell, "{d:?}");
        assert_eq!(d.cannot_tell, vec![Unknown::FiguresDisagree]);
        // An iperf3 server reports no reader: nothing disagrees, and the reader is the
        // likely late end, said to be unseen (CI: 1.3 Gbit/s, ceiling 17.6, 18 % on the
        // buffer, the figures then called disagreeing).
        let unseen = Inputs {
            reader_thread: None,
            receive_queue_pct: None,
            ..i
        };
        let d = check(&unseen, Verdict::Receiver, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::ReaderUnseen]);
    }

    /// Lab, 40 ms, the client's `net.ipv4.tcp_wmem` capped at 128 KiB, CUBIC: 25 Mbit/s
    /// (128 KiB ÷ 40 ms = 26), the kernel's `sndbuf_limited` 0 % but every sample with room in
    /// both windows and nothing queued, the sender blocked 98 % of the time. Under BBR the
    /// kernel counts it (36 %).
    #[test]
    fn a_buffer_holding_only_data_in_flight_is_the_send_buffer() {
        let cubic = Inputs {
            rate_bps: 25e6,
            sndbuf_bytes: Some(131_072.0),
            rtt_mean_us: Some(40_777.0),
            limits: limits(98.0, 0.0, 0.0),
            nothing_queued_pct: Some(100.0),
            sender_thread: Some(thread(0.0, 2.0)),
            ..base()
        };
        check(&cubic, Verdict::SendBuffer, Some(Confidence::Clear));
        let bbr = Inputs {
            limits: limits(98.0, 0.0, 35.6),
            nothing_queued_pct: Some(38.0),
            ..cubic.clone()
        };
        check(&bbr, Verdict::SendBuffer, Some(Confidence::Clear));
        // The same figures at 200 Mbit/s: eight times what 128 KiB carries per RTT, so the
        // kernel let more than the buffer into flight and the buffer did not hold the rate.
        let exceeded = Inputs {
            rate_bps: 200e6,
            ..cubic.clone()
        };
        assert_ne!(exceeded.diagnose().verdict, Verdict::SendBuffer);
        // Nothing queued while the sender's thread ran all the time is the sender.
        let cpu = Inputs {
            sender_thread: Some(thread(60.0, 35.0)),
            ..cubic.clone()
        };
        check(&cpu, Verdict::Sender, Some(Confidence::Clear));
        // …and so is one that mostly waited for a CPU and slept a fifth of the time for the
        // ACKs its starved CPU was late with (loopback, measured: 0.1 % on a CPU, 79 %
        // waiting). Its inflated RTT is no queue.
        let starved = Inputs {
            sender_thread: Some(thread(0.1, 78.7)),
            rtt_mean_us: Some(9_000.0),
            rtt_base_us: Some(5.0),
            ..cubic
        };
        check(&starved, Verdict::Sender, Some(Confidence::Clear));
        // Starved harder, it sleeps more than it runs — on a buffer whose ceiling is far
        // above the rate, so not for the buffer's size: the CPU it waited for is the likely
        // limit (measured on loopback: asleep 83 %, waiting for a CPU 17 %).
        let asleep = Inputs {
            sender_thread: Some(thread(0.1, 16.6)),
            rtt_mean_us: Some(393.0),
            rtt_base_us: Some(5.0),
            sndbuf_bytes: Some(1e6),
            ..starved
        };
        let d = check(&asleep, Verdict::Sender, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::SenderSleepUnexplained]);
    }

    /// Loopback under load, CUBIC: the sending thread on a CPU 42 % and waiting for one 50 %,
    /// never blocked on its socket.
    #[test]
    fn a_sender_that_never_waits_on_its_socket_is_the_sender() {
        let i = Inputs {
            rate_bps: 67e9,
            limits: limits(67.0, 0.0, 0.0),
            sender_thread: Some(thread(42.2, 50.0)),
            rtt_mean_us: Some(203.0),
            rtt_base_us: Some(7.0),
            ..base()
        };
        let d = check(&i, Verdict::Sender, Some(Confidence::Clear));
        assert_eq!(d.figure(FigureName::SenderWaitingForCpu), Some(50.0));
        // Without the thread's figures, a socket left idle a third of the time still says so.
        let unseen = Inputs {
            sender_thread: None,
            nothing_queued_pct: None,
            ..i
        };
        let d = check(&unseen, Verdict::Sender, Some(Confidence::Likely));
        assert_eq!(d.cannot_tell, vec![Unknown::SenderThreadUnseen]);
    }

    /// A sender paced by its congestion window with no loss, no queue, no window or buffer
    /// limit: nothing names the limit.
    #[test]
    fn no_limit_in_the_figures_is_cannot_tell() {
        let i = Inputs {
            sender_thread: Some(thread(1.0, 8.0)),
            ..base()
        };
        let d = check(&i, Verdict::CannotTell, None);
        assert_eq!(d.cannot_tell, vec![Unknown::NoLimitFound]);
        // An iperf3 server sending (-R): no TCP_INFO from it.
        let unseen = Inputs {
            limits: None,
            nothing_queued_pct: None,
            sender: Peer::Iperf3,
            sender_thread: None,
            ..base()
        };
        let d = check(&unseen, Verdict::CannotTell, None);
        assert_eq!(d.cannot_tell, vec![Unknown::SenderLimitsUnseen]);
    }

    /// Figures a peer sent that no share can be are clamped, never believed.
    #[test]
    fn impossible_shares_are_clamped() {
        let i = Inputs {
            limits: limits(f64::NAN, 500.0, -3.0),
            ..base()
        };
        let d = i.diagnose();
        for f in &d.figures {
            if f.name.unit() == crate::diagnosis::Unit::Percent {
                assert!((0.0..=100.0).contains(&f.value), "{f:?}");
            }
        }
    }
}
