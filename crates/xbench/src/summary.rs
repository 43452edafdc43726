//! Merges what the two ends measured into the figures a user reads: each interval and each
//! stream with the sender's bytes and TCP state beside the receiver's bytes, and per-direction
//! totals with the receive-window ceiling and CPU cost.
//!
//! Every rate of a test divides what moved inside one measured window by that window, the
//! same for sender and receiver and for every stream ([`Window`]), as iperf3 and netperf
//! define it: a stream still draining a retransmission back-off after the end cannot stretch
//! the window and drag the rate down; its tail is reported apart ([`AfterEnd`]).
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
    /// A window of this many seconds: the asked duration of a timed test that ran to its end,
    /// or the time until the user or a failure cut it short.
    Fixed(f64),
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
    let span = |s: &SideInterval| s.end_s - s.start_s;
    let client = client.map(std::slice::from_ref).unwrap_or_default();
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
            let seconds = match window {
                Window::Fixed(s) => s,
                Window::UntilLastByte => {
                    let longest = |side, role| {
                        ids()
                            .filter_map(|id| find(side, id, role))
                            .map(|r| r.transfer.seconds)
                            .reduce(f64::max)
                    };
                    longest(receiver_side, Role::Receiver)
                        .or_else(|| longest(sender_side, Role::Sender))
                        .unwrap_or(0.0)
                }
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
    let measured_s = match window {
        Window::Fixed(s) => s,
        Window::UntilLastByte => directions
            .iter()
            .map(|d| d.sender.seconds)
            .fold(0.0, f64::max),
    };
    Summary {
        directions,
        measured_s,
    }
}

/// One stream over the window: what the sender wrote inside it, and what arrived inside it —
/// the bytes the sender sent after its warm-up that the receiver had read by its end mark.
/// Each end starts measuring on its own clock, so the receiver's own warm-up count includes
/// or misses whatever was in flight at that moment; the sender's count is the exact cut.
fn stream_summary(
    id: u16,
    s: Option<&SideStreamResult>,
    r: Option<&SideStreamResult>,
    seconds: f64,
) -> StreamSummary {
    let receiver = r.map(|r| {
        let bytes = match s {
            // A receiver still in its warm-up at the end measured nothing.
            Some(s) if r.transfer.seconds > 0.0 => {
                r.bytes_to_end_mark().saturating_sub(s.omitted_bytes)
            }
            _ => r.transfer.bytes,
        };
        Transfer::new(bytes, seconds)
    });
    let after_end = AfterEnd {
        bytes: r.as_ref().map_or(0, |r| r.after_end.bytes),
        sent_bytes: s.as_ref().map_or(0, |s| s.after_end.sent_bytes),
        seconds: r.as_ref().map_or(0.0, |r| r.after_end.seconds),
        retransmits: s.as_ref().map_or(0, |s| s.after_end.retransmits),
    };
    StreamSummary {
        stream: id,
        sender: s.as_ref().map_or_else(Transfer::default, |s| {
            Transfer::new(s.transfer.bytes, seconds)
        }),
        receiver,
        tcp: s.and_then(|s| s.tcp.clone()),
        after_end,
        sender_thread: s.and_then(|s| s.thread),
        receiver_thread: r.and_then(|r| r.thread),
        receive_queue: r.and_then(|r| r.receive_queue),
    }
}

/// Moves bytes in flight at the warm-up boundary between the last omitted and the first
/// measured interval, so the measured intervals' received bytes add up to the receiver total
/// of [`summarize`] (which cuts at the sender's warm-up count). A no-op without `-O`.
pub fn align_warm_up(
    intervals: &mut [Interval],
    client: &SideResults,
    server: Option<&SideResults>,
) {
    let Some(first) = intervals.iter().position(|i| !i.omitted) else {
        return;
    };
    if first == 0 {
        return;
    }
    let Some(server) = server else { return };
    let (before, after) = intervals.split_at_mut(first);
    let (last_omitted, first_measured) = (&mut before[first - 1], &mut after[0]);
    for st in &mut first_measured.streams {
        let (sender_side, receiver_side) = match st.direction {
            StreamDirection::ClientToServer => (client, server),
            StreamDirection::ServerToClient => (server, client),
        };
        let find = |side: &SideResults, role| {
            side.streams
                .iter()
                .find(|x| x.stream == st.stream && x.role == role)
                .map(|x| x.omitted_bytes)
        };
        let (Some(sent_cut), Some(recv_cut)) = (
            find(sender_side, Role::Sender),
            find(receiver_side, Role::Receiver),
        ) else {
            continue;
        };
        // Received during the receiver's warm-up but sent after the sender's: positive moves
        // bytes into the measured interval.
        let shift = recv_cut as i128 - sent_cut as i128;
        let adjust = |t: &mut Transfer, by: i128| {
            let bytes = (i128::from(t.bytes) + by).max(0) as u64;
            *t = Transfer::new(bytes, t.seconds);
        };
        if let Some(rx) = st.received.as_mut() {
            adjust(rx, shift);
        }
        if let Some(o) = last_omitted
            .streams
            .iter_mut()
            .find(|o| o.stream == st.stream)
            && let Some(rx) = o.received.as_mut()
        {
            adjust(rx, -shift);
        }
    }
    for iv in [last_omitted, first_measured] {
        for sum in &mut iv.sum {
            let of_dir = iv.streams.iter().filter(|s| s.direction == sum.direction);
            if let Some(rx) = sum.received.as_mut() {
                let bytes = of_dir.filter_map(|s| s.received).map(|t| t.bytes).sum();
                *rx = Transfer::new(bytes, rx.seconds);
            }
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
    let sender = total(&mut per_stream.iter().map(|s| s.sender));
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

/// Per direction with both ends' figures: every byte its senders wrote over the whole test
/// (drain included), and how many of them never reached the receivers.
pub fn undelivered(
    dirs: &Directions,
    client: &SideResults,
    server: Option<&SideResults>,
) -> Vec<(StreamDirection, u64, u64)> {
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
            let total = |side: &SideResults, role: Role| -> u64 {
                side.streams
                    .iter()
                    .filter(|s| s.role == role && dirs.get(&s.stream) == Some(&direction))
                    .map(|s| s.total_bytes)
                    .sum()
            };
            let sent = total(senders, Role::Sender);
            (
                direction,
                sent,
                sent.saturating_sub(total(receivers, Role::Receiver)),
            )
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
                sender: Transfer::new(1, 1.0),
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
                    sender: Transfer::new(1, 1.0),
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
        assert_eq!(d.sender.seconds, 4.0, "senders share the window");
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
            vec![(StreamDirection::ClientToServer, 4_000_000, 0)]
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
            Transfer::new(2_000_000, 1.0),
            "one window for both"
        );
        // A single stream has no spread to show.
        let one: Directions = [(0, StreamDirection::ClientToServer)].into();
        let s = summarize(&one, &client, Some(&server), Window::UntilLastByte);
        assert_eq!(s.directions[0].fairness, None);
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
