//! Merges what the two ends measured into the figures a user reads: each interval and each
//! stream with the sender's bytes and TCP state beside the receiver's bytes, and per-direction
//! totals with the receive-window ceiling and CPU cost.
//!
//! Every rate of a test divides what moved inside one measured window by that window, the
//! same for sender and receiver and for every stream of a direction ([`Window`]), as iperf3
//! and netperf define it: a stream still draining a retransmission back-off after the end
//! cannot stretch the window and drag the rate down; its tail is reported apart
//! ([`AfterEnd`]).
//!
//! Pure functions over [`SideInterval`] and [`SideResults`]; no sockets, no clocks.

pub mod udp;

use std::collections::BTreeMap;

use crate::config::StreamDirection;
use crate::report::{
    AfterEnd, CpuReport, CpuUsage, DirectionSummary, Fairness, Interval, IntervalSum, Role,
    RttStats, SenderLimits, SideInterval, SideResults, SideStreamInterval, SideStreamResult,
    StreamInterval, StreamSummary, Summary, Transfer, WindowCeiling,
};

/// Percent of the time the receive window must have stopped the senders for a direction to be
/// called window-limited.
pub const WINDOW_LIMITED_PCT: f64 = 20.0;

/// Share of the window ceiling (window ÷ RTT) a receiver rate must reach for a direction to be
/// called window-limited even when the kernel's rwnd-limited time is low: a pacing congestion
/// control (BBR) spaces its segments out, so it seldom *hits* the window, yet the window still
/// caps its rate. Data in flight can never exceed the window, so a rate this close to
/// window ÷ RTT means the window is what is full.
pub const WINDOW_CEILING_SHARE: f64 = 0.85;

/// Stream id → direction, for a test's streams.
pub type Directions = BTreeMap<u16, StreamDirection>;

/// The measured window of a test, which every rate of it divides by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Window {
    /// A window of this many seconds, for both ends: the time until the user or a failure
    /// cut the test short, or the client's own window against an iperf3 server, which
    /// reports no clock of its own.
    Fixed(f64),
    /// A timed test that ran to its end mark: each direction's window is its senders' own,
    /// from the end of their warm-up to their end mark as their clock read it. The window's
    /// bytes are the senders' (what arrived of them: see `stream_summary`), so their clock is
    /// the one to divide by. The mark falls when the runtime wakes, a little after the asked
    /// duration on a busy machine; dividing by the asked duration would read high by that
    /// lateness. `asked` is the fallback for a direction with no figures from either end.
    EndMark {
        /// The asked duration, seconds.
        asked: f64,
    },
    /// A byte count (`-n`): each direction's window ends when its receivers have the last
    /// byte (the sender's own span when no receiver reported).
    UntilLastByte,
}

/// Merges one interval as seen by the client and (when they arrived) by the server. The
/// server reports each interval in one part per clock it keeps (one for its senders, one for
/// its receivers), each with its own span.
///
/// A little over 80 lines: the per-direction loop reads both ends' parts of one interval
/// side by side, which is the point of it.
pub fn merge_interval(
    dirs: &Directions,
    client: Option<&SideInterval>,
    server: &[SideInterval],
) -> Option<Interval> {
    let first = client.or(server.first())?;
    let client = client.map(std::slice::from_ref).unwrap_or_default();
    let streams = stream_intervals(dirs, client, server);
    let sum = sums(dirs, &streams, client, server);
    Some(Interval {
        index: first.index,
        start_s: first.start_s,
        end_s: first.end_s,
        omitted: first.omitted,
        streams,
        sum,
    })
}

/// Per-direction totals from both ends' results, every rate over `window`. `server` is `None`
/// when its report never arrived; receiver figures of client-to-server streams are then
/// missing, not zero.
pub fn summarize<'a>(
    dirs: &Directions,
    client: &'a SideResults,
    server: Option<&'a SideResults>,
    window: Window,
) -> Summary {
    let directions: Vec<DirectionSummary> = distinct(dirs)
        .into_iter()
        .map(|direction| {
            let (sender_side, receiver_side) = match direction {
                StreamDirection::ClientToServer => (Some(client), server),
                StreamDirection::ServerToClient => (server, Some(client)),
            };
            let find = |side: Option<&'a SideResults>, id: u16, role: Role| {
                side?
                    .streams
                    .iter()
                    .find(|s| s.stream == id && s.role == role)
            };
            let ids = || {
                dirs.iter()
                    .filter(move |(_, d)| **d == direction)
                    .map(|(&id, _)| id)
            };
            let longest = |side, role| {
                ids()
                    .filter_map(|id| find(side, id, role))
                    .map(|r| r.transfer.seconds)
                    .reduce(f64::max)
            };
            let seconds = match window {
                Window::Fixed(s) => s,
                Window::EndMark { asked } => longest(sender_side, Role::Sender)
                    .or_else(|| longest(receiver_side, Role::Receiver))
                    .unwrap_or(asked),
                Window::UntilLastByte => longest(receiver_side, Role::Receiver)
                    .or_else(|| longest(sender_side, Role::Sender))
                    .unwrap_or(0.0),
            };
            let per_stream = ids()
                .map(|id| {
                    stream_summary(
                        id,
                        find(sender_side, id, Role::Sender),
                        find(receiver_side, id, Role::Receiver),
                        seconds,
                    )
                })
                .collect();
            direction_summary(direction, per_stream, seconds)
        })
        .collect();
    let longest = directions
        .iter()
        .filter_map(|d| d.sender.or(d.receiver))
        .map(|t| t.seconds)
        .reduce(f64::max);
    let measured_s = match window {
        Window::Fixed(s) => s,
        Window::EndMark { asked } => longest.unwrap_or(asked),
        Window::UntilLastByte => longest.unwrap_or(0.0),
    };
    Summary {
        directions,
        measured_s,
    }
}

/// One stream over the window: what the sender sent inside it, and what arrived inside it —
/// the bytes the sender sent after its warm-up and by its end mark that the receiver had read
/// by its own end mark.
///
/// The window is a range of the stream's bytes, set by the sender: TCP delivers in order, so
/// the receiver's first `n` bytes are the sender's first `n`, and of what it read by its mark
/// the window's are those up to the sender's mark. The rest were sent after the end (the two
/// ends' marks fall at slightly different moments) and are counted after it. So received ≤
/// sent inside the window always; [`crate::check::received_over_sent`] holds the summary to
/// it.
fn stream_summary(
    id: u16,
    s: Option<&SideStreamResult>,
    r: Option<&SideStreamResult>,
    seconds: f64,
) -> StreamSummary {
    // A receiver still in its warm-up at the end measured nothing.
    let clip = match (s, r) {
        (Some(s), Some(r)) if r.transfer.seconds > 0.0 => {
            let (sent_to_mark, read_to_mark) = (s.bytes_to_end_mark(), r.bytes_to_end_mark());
            Some((
                read_to_mark
                    .min(sent_to_mark)
                    .saturating_sub(s.omitted_bytes),
                read_to_mark.saturating_sub(sent_to_mark),
            ))
        }
        _ => None,
    };
    let receiver = r.map(|r| {
        let bytes = clip.map_or(r.transfer.bytes, |(inside, _)| inside);
        Transfer::new(bytes, seconds)
    });
    let after_end = AfterEnd {
        bytes: r.as_ref().map_or(0, |r| r.after_end.bytes) + clip.map_or(0, |(_, late)| late),
        sent_bytes: s.as_ref().map_or(0, |s| s.after_end.sent_bytes),
        unsent_bytes: s.as_ref().map_or(0, |s| s.after_end.unsent_bytes),
        seconds: r.as_ref().map_or(0.0, |r| r.after_end.seconds),
        retransmits: s.as_ref().map_or(0, |s| s.after_end.retransmits),
    };
    StreamSummary {
        stream: id,
        sender: s.map(|s| Transfer::new(s.transfer.bytes, seconds)),
        receiver,
        tcp: s.and_then(|s| s.tcp.clone()),
        after_end,
        sender_thread: s.and_then(|s| s.thread),
        receiver_thread: r.and_then(|r| r.thread),
        receive_queue: r.and_then(|r| r.receive_queue),
    }
}

/// Makes the measured intervals' received bytes add up to the receiver totals of
/// [`summarize`], at both edges of the window: bytes in flight at the warm-up boundary move
/// between the last omitted and the first measured interval (a no-op without `-O`), and bytes
/// the receiver read before its end mark but the sender sent after its own leave the last
/// measured intervals (they are counted after the end).
pub fn align_window(
    intervals: &mut [Interval],
    client: &SideResults,
    server: Option<&SideResults>,
) {
    let Some(server) = server else { return };
    let pair = |id: u16, direction: StreamDirection| {
        let (sender_side, receiver_side) = match direction {
            StreamDirection::ClientToServer => (client, server),
            StreamDirection::ServerToClient => (server, client),
        };
        let find = |side: &'_ SideResults, role| {
            side.streams
                .iter()
                .find(|x| x.stream == id && x.role == role)
                .cloned()
        };
        Some((
            find(sender_side, Role::Sender)?,
            find(receiver_side, Role::Receiver)?,
        ))
    };
    let ids: Vec<(u16, StreamDirection)> = intervals
        .iter()
        .flat_map(|iv| iv.streams.iter().map(|s| (s.stream, s.direction)))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let first = intervals.iter().position(|i| !i.omitted);
    for (id, direction) in ids {
        let Some((sent, read)) = pair(id, direction) else {
            continue;
        };
        // Received during the receiver's warm-up but sent after the sender's: positive moves
        // bytes into the measured intervals, negative out of them (as many intervals as it
        // takes: a receiver that fell behind at the boundary reads the difference later).
        if let Some(first) = first.filter(|&f| f > 0) {
            let shift = i128::from(read.omitted_bytes) - i128::from(sent.omitted_bytes);
            let (before, after) = intervals.split_at_mut(first);
            let bytes = u64::try_from(shift.unsigned_abs()).unwrap_or(u64::MAX);
            if shift >= 0 {
                let taken = take_received(before.iter_mut().rev(), id, bytes);
                add_received(after.iter_mut(), id, taken);
            } else {
                let taken = take_received(after.iter_mut(), id, bytes);
                add_received(before.iter_mut().rev(), id, taken);
            }
        }
        if read.transfer.seconds <= 0.0 {
            continue;
        }
        let late = read
            .bytes_to_end_mark()
            .saturating_sub(sent.bytes_to_end_mark());
        take_received(intervals.iter_mut().rev().filter(|i| !i.omitted), id, late);
    }
    for iv in intervals.iter_mut() {
        for sum in &mut iv.sum {
            let of_dir = iv.streams.iter().filter(|s| s.direction == sum.direction);
            if let Some(rx) = sum.received.as_mut() {
                let bytes = of_dir.filter_map(|s| s.received).map(|t| t.bytes).sum();
                *rx = Transfer::new(bytes, rx.seconds);
            }
        }
    }
}

/// Takes up to `bytes` from stream `id`'s received bytes, interval after interval in the
/// given order; returns what it took.
fn take_received<'a>(ivs: impl Iterator<Item = &'a mut Interval>, id: u16, bytes: u64) -> u64 {
    let mut left = bytes;
    for iv in ivs {
        if left == 0 {
            break;
        }
        if let Some(rx) = iv
            .streams
            .iter_mut()
            .find(|s| s.stream == id)
            .and_then(|s| s.received.as_mut())
        {
            let take = left.min(rx.bytes);
            *rx = Transfer::new(rx.bytes - take, rx.seconds);
            left -= take;
        }
    }
    bytes - left
}

/// Adds `bytes` to stream `id`'s received bytes in the first interval (in the given order)
/// that has a receiver figure for it.
fn add_received<'a>(ivs: impl Iterator<Item = &'a mut Interval>, id: u16, bytes: u64) {
    for iv in ivs {
        if let Some(rx) = iv
            .streams
            .iter_mut()
            .find(|s| s.stream == id)
            .and_then(|s| s.received.as_mut())
        {
            *rx = Transfer::new(rx.bytes + bytes, rx.seconds);
            return;
        }
    }
}

fn direction_summary(
    direction: StreamDirection,
    per_stream: Vec<StreamSummary>,
    seconds: f64,
) -> DirectionSummary {
    let total =
        |ts: &mut dyn Iterator<Item = Transfer>| Transfer::new(ts.map(|t| t.bytes).sum(), seconds);
    let sender = per_stream
        .iter()
        .all(|s| s.sender.is_some())
        .then(|| total(&mut per_stream.iter().filter_map(|s| s.sender)));
    let receiver = per_stream
        .iter()
        .all(|s| s.receiver.is_some())
        .then(|| total(&mut per_stream.iter().filter_map(|s| s.receiver)));
    let mut after_end = AfterEnd::default();
    for s in &per_stream {
        after_end.merge(&s.after_end);
    }
    let fairness = fairness(&per_stream);
    let tcps: Vec<_> = per_stream.iter().filter_map(|s| s.tcp.as_ref()).collect();
    let rtts: Vec<RttStats> = tcps.iter().filter_map(|t| t.rtt).collect();
    let rtt = (!rtts.is_empty()).then(|| RttStats {
        min_us: rtts.iter().map(|r| r.min_us).min().unwrap_or(0),
        mean_us: rtts.iter().map(|r| r.mean_us).sum::<f64>() / rtts.len() as f64,
        max_us: rtts.iter().map(|r| r.max_us).max().unwrap_or(0),
    });
    let limits_v: Vec<SenderLimits> = tcps.iter().filter_map(|t| t.limits).collect();
    let limits = (!limits_v.is_empty()).then(|| {
        let n = limits_v.len() as f64;
        SenderLimits {
            busy_pct: limits_v.iter().map(|l| l.busy_pct).sum::<f64>() / n,
            rwnd_limited_pct: limits_v.iter().map(|l| l.rwnd_limited_pct).sum::<f64>() / n,
            sndbuf_limited_pct: limits_v.iter().map(|l| l.sndbuf_limited_pct).sum::<f64>() / n,
        }
    });
    // Ceiling: each stream can carry at most its window per round trip; streams add up.
    let mut window_bytes = 0u64;
    let mut ceiling_bps = 0.0;
    let mut ceiling_streams = 0usize;
    for t in &tcps {
        // The mean advertised window over the mean RTT: what the window allowed on average.
        if let (Some(w), Some(r)) = (t.mean_snd_wnd_bytes, t.rtt)
            && r.mean_us > 0.0
        {
            window_bytes += w.round() as u64;
            ceiling_bps += w * 8.0 / (r.mean_us / 1e6);
            ceiling_streams += 1;
        }
    }
    let window_ceiling =
        (ceiling_streams > 0 && ceiling_streams == tcps.len()).then(|| WindowCeiling {
            window_bytes,
            rtt_us: rtt.map_or(0.0, |r| r.mean_us),
            bits_per_second: ceiling_bps,
        });
    DirectionSummary {
        direction,
        streams: u16::try_from(per_stream.len()).unwrap_or(u16::MAX),
        sender,
        receiver,
        after_end,
        fairness,
        retransmits: tcps.iter().map(|t| t.retransmits).sum(),
        rtt,
        max_cwnd_bytes: tcps.iter().map(|t| t.max_cwnd_bytes).max(),
        window_limited: limits.is_some_and(|l| l.rwnd_limited_pct >= WINDOW_LIMITED_PCT)
            || matches!((&receiver, &window_ceiling), (Some(rx), Some(c))
                if c.bits_per_second > 0.0
                    && rx.bits_per_second >= WINDOW_CEILING_SHARE * c.bits_per_second),
        limits,
        window_ceiling,
        per_stream,
        // Diagnosed with the whole report in hand (the test, the peer): `diagnosis::attach`.
        diagnosis: None,
    }
}

/// The spread of the streams' receiver rates, when there are two or more and all reported.
fn fairness(per_stream: &[StreamSummary]) -> Option<Fairness> {
    let rates: Vec<f64> = per_stream
        .iter()
        .map(|s| s.receiver.map(|r| r.bits_per_second))
        .collect::<Option<_>>()?;
    if rates.len() < 2 {
        return None;
    }
    let sum: f64 = rates.iter().sum();
    let sum_sq: f64 = rates.iter().map(|x| x * x).sum();
    Some(Fairness {
        min_bits_per_second: rates.iter().copied().fold(f64::INFINITY, f64::min),
        max_bits_per_second: rates.iter().copied().fold(0.0, f64::max),
        // Nothing moved at all: nobody was treated worse than anybody else.
        jain_index: if sum_sq > 0.0 {
            sum * sum / (rates.len() as f64 * sum_sq)
        } else {
            1.0
        },
    })
}

/// What a direction's receivers never got, by the end of the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Undelivered {
    /// Which way.
    pub direction: StreamDirection,
    /// Every byte its senders handed to the kernel over the whole test (drain included).
    pub sent: u64,
    /// How many of them never reached the receivers.
    pub missing: u64,
    /// How many of those TCP never transmitted (still in the senders' buffers): not the
    /// path's doing.
    pub unsent: u64,
    /// Segments the senders retransmitted after the end mark.
    pub retransmits: u64,
}

/// Per direction with both ends' figures: every byte its senders wrote over the whole test
/// (drain included), and how many of them never reached the receivers, and why it can tell.
pub fn undelivered(
    dirs: &Directions,
    client: &SideResults,
    server: Option<&SideResults>,
) -> Vec<Undelivered> {
    let Some(server) = server else {
        return Vec::new();
    };
    distinct(dirs)
        .into_iter()
        .map(|direction| {
            let (senders, receivers) = match direction {
                StreamDirection::ClientToServer => (client, server),
                StreamDirection::ServerToClient => (server, client),
            };
            let of_dir = |s: &&SideStreamResult| dirs.get(&s.stream) == Some(&direction);
            let sending: Vec<&SideStreamResult> = (senders.streams.iter())
                .filter(|s| s.role == Role::Sender)
                .filter(of_dir)
                .collect();
            let read: u64 = (receivers.streams.iter())
                .filter(|s| s.role == Role::Receiver)
                .filter(of_dir)
                .map(|s| s.total_bytes)
                .sum();
            let sent: u64 = sending.iter().map(|s| s.total_bytes).sum();
            let missing = sent.saturating_sub(read);
            Undelivered {
                direction,
                sent,
                missing,
                unsent: (sending.iter().map(|s| s.after_end.unsent_bytes))
                    .sum::<u64>()
                    .min(missing),
                retransmits: sending.iter().map(|s| s.after_end.retransmits).sum(),
            }
        })
        .collect()
}

/// CPU per side and per gigabyte moved (omitted start included on both counts).
pub fn cpu_report(client: &SideResults, server: Option<&SideResults>) -> CpuReport {
    let per_gb = |cpu: CpuUsage, r: &SideResults| {
        let bytes: u64 = r.streams.iter().map(|s| s.total_bytes).sum();
        (bytes > 0).then(|| cpu.total_s() / (bytes as f64 / 1e9))
    };
    CpuReport {
        client: client.cpu,
        server: server.map(|s| s.cpu),
        client_s_per_gb: per_gb(client.cpu, client),
        server_s_per_gb: server.and_then(|s| per_gb(s.cpu, s)),
        client_us_per_transaction: None,
        server_us_per_transaction: None,
    }
}
/// Each stream's figures in one interval: what its sender's side sent and its receiver's
/// side received; a stream neither side reported is left out.
fn stream_intervals(
    dirs: &Directions,
    client: &[SideInterval],
    server: &[SideInterval],
) -> Vec<StreamInterval> {
    let mut streams = Vec::with_capacity(dirs.len());
    for (&id, &direction) in dirs {
        let (sender_side, receiver_side) = match direction {
            StreamDirection::ClientToServer => (client, server),
            StreamDirection::ServerToClient => (server, client),
        };
        let sent = find_stream(sender_side, id);
        let received = find_stream(receiver_side, id);
        if sent.is_none() && received.is_none() {
            continue;
        }
        streams.push(StreamInterval {
            stream: id,
            direction,
            sent: sent.map_or_else(Transfer::default, |(s, x)| Transfer::new(x.bytes, span(s))),
            received: received.map(|(s, x)| Transfer::new(x.bytes, span(s))),
            tcp: sent.and_then(|(_, x)| x.tcp),
        });
    }
    streams
}

/// Each direction's sums in one interval, from its streams' figures.
fn sums(
    dirs: &Directions,
    streams: &[StreamInterval],
    client: &[SideInterval],
    server: &[SideInterval],
) -> Vec<IntervalSum> {
    let mut sum = Vec::new();
    for direction in distinct(dirs) {
        let of_dir: Vec<&StreamInterval> = streams
            .iter()
            .filter(|s| s.direction == direction)
            .collect();
        if of_dir.is_empty() {
            continue;
        }
        let sender_side = match direction {
            StreamDirection::ClientToServer => client,
            StreamDirection::ServerToClient => server,
        };
        let sent_bytes = of_dir.iter().map(|s| s.sent.bytes).sum();
        // Every stream of a direction sits on the same clock of its end, so one span serves.
        let received = if of_dir.iter().all(|s| s.received.is_some()) {
            of_dir
                .iter()
                .filter_map(|s| s.received)
                .map(|t| t.seconds)
                .reduce(f64::max)
                .map(|secs| {
                    Transfer::new(
                        of_dir
                            .iter()
                            .filter_map(|s| s.received)
                            .map(|t| t.bytes)
                            .sum(),
                        secs,
                    )
                })
        } else {
            None
        };
        let sent_span = of_dir
            .iter()
            .find_map(|s| find_stream(sender_side, s.stream).map(|(side, _)| span(side)))
            .unwrap_or(0.0);
        sum.push(IntervalSum {
            direction,
            sent: Transfer::new(sent_bytes, sent_span),
            received,
            retransmits: of_dir
                .iter()
                .filter_map(|s| s.tcp.map(|t| t.retransmits))
                .sum(),
        });
    }
    sum
}

/// How long one side's interval lasted, in seconds.
fn span(s: &SideInterval) -> f64 {
    s.end_s - s.start_s
}

fn find_stream(side: &[SideInterval], id: u16) -> Option<(&SideInterval, &SideStreamInterval)> {
    side.iter()
        .find_map(|s| s.streams.iter().find(|x| x.stream == id).map(|x| (s, x)))
}

fn distinct(dirs: &Directions) -> Vec<StreamDirection> {
    let mut v: Vec<StreamDirection> = dirs.values().copied().collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{TcpInterval, TcpTotals};

    fn side(index: u32, start: f64, end: f64, role: Role, bytes: u64) -> SideInterval {
        SideInterval {
            index,
            start_s: start,
            end_s: end,
            omitted: false,
            streams: vec![SideStreamInterval {
                stream: 0,
                role,
                bytes,
                tcp: (role == Role::Sender).then_some(TcpInterval {
                    retransmits: 3,
                    cwnd_bytes: 100,
                    srtt_us: 50,
                    rttvar_us: 5,
                    snd_wnd_bytes: None,
                }),
            }],
        }
    }

    #[test]
    fn interval_takes_sender_tcp_and_receiver_bytes() {
        let dirs: Directions = [(0, StreamDirection::ClientToServer)].into();
        let c = side(0, 0.0, 1.0, Role::Sender, 1000);
        let s = side(0, 0.0, 0.5, Role::Receiver, 900);
        let iv = merge_interval(&dirs, Some(&c), &[s]).unwrap();
        assert_eq!(iv.streams[0].sent.bits_per_second, 8000.0);
        assert_eq!(
            iv.streams[0].received.unwrap().bits_per_second,
            900.0 * 8.0 / 0.5
        );
        assert_eq!(iv.sum[0].retransmits, 3);
        let iv = merge_interval(&dirs, Some(&c), &[]).unwrap();
        assert_eq!(iv.sum[0].received, None, "a missing receiver is not a zero");
    }

    #[test]
    fn window_ceiling_is_window_over_rtt() {
        let tcp = TcpTotals {
            retransmits: 0,
            rtt: Some(RttStats {
                min_us: 40_000,
                mean_us: 40_000.0,
                max_us: 40_000,
            }),
            max_cwnd_bytes: 0,
            max_snd_wnd_bytes: Some(262_144),
            mean_snd_wnd_bytes: Some(262_144.0),
            mss: 1448,
            pmtu: 1500,
            min_rtt_us: None,
            limits: Some(SenderLimits {
                busy_pct: 100.0,
                rwnd_limited_pct: 90.0,
                sndbuf_limited_pct: 0.0,
            }),
            nothing_queued_pct: None,
            sndbuf_bytes: None,
        };
        let d = direction_summary(
            StreamDirection::ClientToServer,
            vec![StreamSummary {
                stream: 0,
                sender: Some(Transfer::new(1, 1.0)),
                receiver: Some(Transfer::new(1, 1.0)),
                tcp: Some(tcp),
                after_end: AfterEnd::default(),
                sender_thread: None,
                receiver_thread: None,
                receive_queue: None,
            }],
            1.0,
        );
        assert!(d.window_limited);
        let c = d.window_ceiling.unwrap();
        assert!((c.bits_per_second - 262_144.0 * 8.0 / 0.04).abs() < 1.0);

        // BBR paces instead of hitting the window: little rwnd-limited time, but a rate at
        // window ÷ RTT is window-limited all the same.
        let mut paced = tcp_at(10.0);
        let ceiling = 262_144.0 * 8.0 / 0.04;
        let at = |rate: f64, tcp: TcpTotals| {
            direction_summary(
                StreamDirection::ClientToServer,
                vec![StreamSummary {
                    stream: 0,
                    sender: Some(Transfer::new(1, 1.0)),
                    receiver: Some(Transfer::new((rate / 8.0) as u64, 1.0)),
                    tcp: Some(tcp),
                    after_end: AfterEnd::default(),
                    sender_thread: None,
                    receiver_thread: None,
                    receive_queue: None,
                }],
                1.0,
            )
        };
        assert!(at(0.97 * ceiling, paced.clone()).window_limited);
        assert!(!at(0.5 * ceiling, paced.clone()).window_limited);
        paced.limits = None;
        assert!(at(0.9 * ceiling, paced).window_limited);
    }

    fn result(stream: u16, role: Role, total: u64, after: u64, seconds: f64) -> SideStreamResult {
        SideStreamResult {
            stream,
            role,
            transfer: Transfer::new(total - after, seconds),
            total_bytes: total,
            omitted_bytes: 0,
            tcp: None,
            after_end: match role {
                Role::Receiver => AfterEnd {
                    bytes: after,
                    seconds: if after > 0 { 2.5 } else { 0.0 },
                    ..AfterEnd::default()
                },
                Role::Sender => AfterEnd {
                    retransmits: 7,
                    ..AfterEnd::default()
                },
            },
            error: None,
            thread: None,
            receive_queue: None,
        }
    }

    /// Issue 12: a stream whose last bytes arrived 2.5 s after the end (a retransmission
    /// back-off) must not stretch the window; its tail is reported apart.
    #[test]
    fn every_rate_covers_the_one_window_and_tails_are_apart() {
        let dirs: Directions = [
            (0, StreamDirection::ClientToServer),
            (1, StreamDirection::ClientToServer),
        ]
        .into();
        let client = SideResults {
            streams: vec![
                result(0, Role::Sender, 3_000_000, 0, 4.0),
                result(1, Role::Sender, 1_000_000, 0, 4.0),
            ],
            cpu: CpuUsage::default(),
        };
        // Stream 1 delivered 200 kB after the end, 2.5 s late.
        let server = SideResults {
            streams: vec![
                result(0, Role::Receiver, 3_000_000, 0, 4.0),
                result(1, Role::Receiver, 1_000_000, 200_000, 4.0),
            ],
            cpu: CpuUsage::default(),
        };
        let s = summarize(&dirs, &client, Some(&server), Window::Fixed(4.0));
        assert_eq!(s.measured_s, 4.0);
        let d = &s.directions[0];
        let rx = d.receiver.unwrap();
        assert_eq!(rx.seconds, 4.0, "the tail does not stretch the window");
        assert_eq!(rx.bytes, 3_800_000, "what arrived inside the window");
        assert_eq!(rx.bits_per_second, 3_800_000.0 * 8.0 / 4.0);
        assert_eq!(d.sender.unwrap().seconds, 4.0, "senders share the window");
        assert_eq!(d.after_end.bytes, 200_000);
        assert_eq!(d.after_end.seconds, 2.5);
        assert_eq!(d.after_end.retransmits, 14);
        assert!(
            d.per_stream
                .iter()
                .all(|p| p.receiver.unwrap().seconds == 4.0)
        );
        let f = d.fairness.unwrap();
        assert_eq!(f.min_bits_per_second, 800_000.0 * 8.0 / 4.0);
        assert_eq!(f.max_bits_per_second, 3_000_000.0 * 8.0 / 4.0);
        // (3.0 + 0.8)² ÷ (2 × (9 + 0.64)) in MB terms.
        assert!((f.jain_index - 3.8f64.powi(2) / (2.0 * 9.64)).abs() < 1e-9);
        let undelivered = undelivered(&dirs, &client, Some(&server));
        assert_eq!(
            undelivered,
            vec![Undelivered {
                direction: StreamDirection::ClientToServer,
                sent: 4_000_000,
                missing: 0,
                unsent: 0,
                retransmits: 14
            }]
        );
    }

    #[test]
    fn a_byte_count_window_ends_with_the_last_byte_delivered() {
        let dirs: Directions = [
            (0, StreamDirection::ClientToServer),
            (1, StreamDirection::ClientToServer),
        ]
        .into();
        let client = SideResults {
            streams: vec![
                result(0, Role::Sender, 1_000_000, 0, 0.5),
                result(1, Role::Sender, 1_000_000, 0, 0.6),
            ],
            cpu: CpuUsage::default(),
        };
        let server = SideResults {
            streams: vec![
                result(0, Role::Receiver, 1_000_000, 0, 0.9),
                result(1, Role::Receiver, 1_000_000, 0, 1.0),
            ],
            cpu: CpuUsage::default(),
        };
        let s = summarize(&dirs, &client, Some(&server), Window::UntilLastByte);
        let d = &s.directions[0];
        assert_eq!(s.measured_s, 1.0);
        assert_eq!(d.receiver.unwrap(), Transfer::new(2_000_000, 1.0));
        assert_eq!(
            d.sender,
            Some(Transfer::new(2_000_000, 1.0)),
            "one window for both"
        );
        // A single stream has no spread to show.
        let one: Directions = [(0, StreamDirection::ClientToServer)].into();
        let s = summarize(&one, &client, Some(&server), Window::UntilLastByte);
        assert_eq!(s.directions[0].fairness, None);
    }

    /// Issue 30: the measured intervals add up to the window's receiver total whichever way
    /// the two ends' boundaries fell: a receiver behind at the warm-up boundary by more than
    /// its first measured interval read, and one that read, by its end mark, bytes its sender
    /// sent after its own.
    #[test]
    fn intervals_add_up_to_the_window_at_both_edges() {
        let dirs: Directions = [(0, StreamDirection::ClientToServer)].into();
        let iv = |index: u32, omitted: bool, received: u64| Interval {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted,
            streams: vec![StreamInterval {
                stream: 0,
                direction: StreamDirection::ClientToServer,
                sent: Transfer::new(1_000, 1.0),
                received: Some(Transfer::new(received, 1.0)),
                tcp: None,
            }],
            sum: vec![IntervalSum {
                direction: StreamDirection::ClientToServer,
                sent: Transfer::new(1_000, 1.0),
                received: Some(Transfer::new(received, 1.0)),
                retransmits: 0,
            }],
        };
        // The sender's warm-up ended at byte 1,000 and its window at 4,000 (500 more were
        // handed over, still queued). The receiver had read 200 bytes by its warm-up boundary
        // (then 100, 300, 1,000, 2,000 per interval: 3,400 by its mark, 100 more later).
        let mut sender = result(0, Role::Sender, 4_500, 0, 3.0);
        sender.omitted_bytes = 1_000;
        sender.transfer = Transfer::new(3_000, 3.0);
        sender.after_end.sent_bytes = 500;
        let mut receiver = result(0, Role::Receiver, 3_500, 100, 3.0);
        receiver.omitted_bytes = 200;
        receiver.transfer = Transfer::new(3_200, 3.0);
        let client = SideResults {
            streams: vec![sender],
            cpu: CpuUsage::default(),
        };
        let server = SideResults {
            streams: vec![receiver],
            cpu: CpuUsage::default(),
        };
        let mut ivs = vec![
            iv(0, true, 200),
            iv(1, false, 100),
            iv(2, false, 300),
            iv(3, false, 2_800),
        ];
        align_window(&mut ivs, &client, Some(&server));
        let s = summarize(&dirs, &client, Some(&server), Window::Fixed(3.0));
        let total = s.directions[0].receiver.unwrap().bytes;
        assert_eq!(total, 3_400 - 1_000, "bytes 1,000 to 3,400 of the stream");
        let measured: u64 = ivs
            .iter()
            .filter(|i| !i.omitted)
            .map(|i| i.sum[0].received.unwrap().bytes)
            .sum();
        assert_eq!(measured, total);
        assert_eq!(
            ivs[0].sum[0].received.unwrap().bytes,
            1_000,
            "the warm-up's own"
        );
        assert_eq!(ivs[1].streams[0].received.unwrap().bytes, 0);
        assert_eq!(
            ivs[2].streams[0].received.unwrap().bytes,
            0,
            "800 taken over two"
        );
        // A sender whose mark fell at byte 3,000: the 400 bytes the receiver read after
        // that by its own mark were sent after the end, and count there.
        let mut late = client.clone();
        late.streams[0].after_end.sent_bytes = 1_500;
        late.streams[0].transfer = Transfer::new(2_000, 3.0);
        let mut ivs = vec![
            iv(0, true, 200),
            iv(1, false, 100),
            iv(2, false, 300),
            iv(3, false, 2_800),
        ];
        align_window(&mut ivs, &late, Some(&server));
        let s = summarize(&dirs, &late, Some(&server), Window::Fixed(3.0));
        let d = &s.directions[0];
        assert_eq!(
            d.receiver.unwrap().bytes,
            3_000 - 1_000,
            "up to the sender's mark"
        );
        assert_eq!(d.after_end.bytes, 100 + 400);
        assert!(crate::check::received_over_sent(&s).is_empty());
        let measured: u64 = ivs
            .iter()
            .filter(|i| !i.omitted)
            .map(|i| i.sum[0].received.unwrap().bytes)
            .sum();
        assert_eq!(measured, d.receiver.unwrap().bytes);
    }

    /// A timed test's end mark falls when each end's runtime wakes, on a busy machine
    /// milliseconds after the asked duration: each direction divides by its senders' own
    /// window, never by the asked one (which would read high by the lateness).
    #[test]
    fn a_late_end_mark_is_divided_by_the_senders_own_window() {
        let dirs: Directions = [
            (0, StreamDirection::ClientToServer),
            (1, StreamDirection::ServerToClient),
        ]
        .into();
        // The client's mark fell 16 ms late, the server's 4 ms; receivers' spans differ again.
        let client = SideResults {
            streams: vec![
                result(0, Role::Sender, 1_016_000, 0, 1.016),
                result(1, Role::Receiver, 1_004_000, 0, 1.016),
            ],
            cpu: CpuUsage::default(),
        };
        let server = SideResults {
            streams: vec![
                result(0, Role::Receiver, 1_016_000, 0, 1.004),
                result(1, Role::Sender, 1_004_000, 0, 1.004),
            ],
            cpu: CpuUsage::default(),
        };
        let s = summarize(
            &dirs,
            &client,
            Some(&server),
            Window::EndMark { asked: 1.0 },
        );
        let up = &s.directions[0];
        let down = &s.directions[1];
        assert_eq!(up.sender.unwrap().seconds, 1.016);
        assert_eq!(up.receiver.unwrap().seconds, 1.016, "the sender's window");
        assert_eq!(up.receiver.unwrap().bits_per_second, 8_000_000.0);
        assert_eq!(down.receiver.unwrap().seconds, 1.004);
        assert_eq!(down.receiver.unwrap().bits_per_second, 8_000_000.0);
        assert_eq!(s.measured_s, 1.016, "the longer of the two");
        // No figures from either end for a direction: the asked duration.
        let lone: Directions = [(2, StreamDirection::ClientToServer)].into();
        let s = summarize(&lone, &client, None, Window::EndMark { asked: 1.0 });
        assert_eq!(s.measured_s, 1.0);
    }

    fn tcp_at(rwnd_limited_pct: f64) -> TcpTotals {
        TcpTotals {
            retransmits: 0,
            rtt: Some(RttStats {
                min_us: 40_000,
                mean_us: 40_000.0,
                max_us: 40_000,
            }),
            max_cwnd_bytes: 0,
            max_snd_wnd_bytes: Some(262_144),
            mean_snd_wnd_bytes: Some(262_144.0),
            mss: 1448,
            pmtu: 1500,
            min_rtt_us: None,
            limits: Some(SenderLimits {
                busy_pct: 100.0,
                rwnd_limited_pct,
                sndbuf_limited_pct: 0.0,
            }),
            nothing_queued_pct: None,
            sndbuf_bytes: None,
        }
    }
}
