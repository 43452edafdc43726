//! Merges what the two ends measured into the figures a user reads: each interval and each
//! stream with the sender's bytes and TCP state beside the receiver's bytes, and per-direction
//! totals with the receive-window ceiling and CPU cost.
//!
//! Pure functions over [`SideInterval`] and [`SideResults`]; no sockets, no clocks.

use std::collections::BTreeMap;

use crate::config::StreamDirection;
use crate::report::{
    CpuReport, CpuUsage, DirectionSummary, Interval, IntervalSum, Role, RttStats, SenderLimits,
    SideInterval, SideResults, SideStreamInterval, SideStreamResult, StreamInterval, StreamSummary,
    Summary, Transfer, WindowCeiling,
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

/// Merges one interval as seen by the client and (when it arrived) by the server.
pub fn merge_interval(
    dirs: &Directions,
    client: Option<&SideInterval>,
    server: Option<&SideInterval>,
) -> Option<Interval> {
    let first = client.or(server)?;
    let span = |s: &SideInterval| s.end_s - s.start_s;
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
        let (sender_side, receiver_side) = match direction {
            StreamDirection::ClientToServer => (client, server),
            StreamDirection::ServerToClient => (server, client),
        };
        let sent_bytes = of_dir.iter().map(|s| s.sent.bytes).sum();
        let received = if of_dir.iter().all(|s| s.received.is_some()) {
            receiver_side.map(|r| {
                Transfer::new(
                    of_dir
                        .iter()
                        .filter_map(|s| s.received)
                        .map(|t| t.bytes)
                        .sum(),
                    span(r),
                )
            })
        } else {
            None
        };
        sum.push(IntervalSum {
            direction,
            sent: Transfer::new(sent_bytes, sender_side.map_or(0.0, span)),
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

/// Per-direction totals from both ends' results. `server` is `None` when its report never
/// arrived; receiver figures of client-to-server streams are then missing, not zero.
pub fn summarize(
    dirs: &Directions,
    client: &SideResults,
    server: Option<&SideResults>,
    measured_s: f64,
) -> Summary {
    let directions = distinct(dirs)
        .into_iter()
        .map(|direction| {
            let (sender_side, receiver_side) = match direction {
                StreamDirection::ClientToServer => (Some(client), server),
                StreamDirection::ServerToClient => (server, Some(client)),
            };
            let find =
                |side: Option<&SideResults>, id: u16, role: Role| -> Option<SideStreamResult> {
                    side?
                        .streams
                        .iter()
                        .find(|s| s.stream == id && s.role == role)
                        .cloned()
                };
            let per_stream: Vec<StreamSummary> = dirs
                .iter()
                .filter(|(_, d)| **d == direction)
                .map(|(&id, _)| {
                    let s = find(sender_side, id, Role::Sender);
                    let r = find(receiver_side, id, Role::Receiver);
                    StreamSummary {
                        stream: id,
                        sender: s.as_ref().map_or_else(Transfer::default, |s| s.transfer),
                        receiver: r.map(|r| receiver_transfer(&r, s.as_ref())),
                        tcp: s.and_then(|s| s.tcp),
                    }
                })
                .collect();
            direction_summary(direction, per_stream)
        })
        .collect();
    Summary {
        directions,
        measured_s,
    }
}

/// What a receiver measured: the bytes the sender sent after its warm-up that arrived. Each
/// end starts measuring on its own clock, so the receiver's own warm-up count includes or
/// misses whatever was in flight at that moment; the sender's count is the exact cut.
fn receiver_transfer(r: &SideStreamResult, s: Option<&SideStreamResult>) -> Transfer {
    match s {
        Some(s) if r.transfer.seconds > 0.0 => Transfer::new(
            r.total_bytes.saturating_sub(s.omitted_bytes),
            r.transfer.seconds,
        ),
        _ => r.transfer,
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
) -> DirectionSummary {
    let total = |ts: &mut dyn Iterator<Item = Transfer>| {
        let v: Vec<Transfer> = ts.collect();
        let bytes = v.iter().map(|t| t.bytes).sum();
        let seconds = v.iter().map(|t| t.seconds).fold(0.0, f64::max);
        Transfer::new(bytes, seconds)
    };
    let sender = total(&mut per_stream.iter().map(|s| s.sender));
    let receiver = per_stream
        .iter()
        .all(|s| s.receiver.is_some())
        .then(|| total(&mut per_stream.iter().filter_map(|s| s.receiver)));
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
    }
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

fn find_stream(
    side: Option<&SideInterval>,
    id: u16,
) -> Option<(&SideInterval, &SideStreamInterval)> {
    side.and_then(|s| s.streams.iter().find(|x| x.stream == id).map(|x| (s, x)))
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
        let iv = merge_interval(&dirs, Some(&c), Some(&s)).unwrap();
        assert_eq!(iv.streams[0].sent.bits_per_second, 8000.0);
        assert_eq!(
            iv.streams[0].received.unwrap().bits_per_second,
            900.0 * 8.0 / 0.5
        );
        assert_eq!(iv.sum[0].retransmits, 3);
        let iv = merge_interval(&dirs, Some(&c), None).unwrap();
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
        };
        let d = direction_summary(
            StreamDirection::ClientToServer,
            vec![StreamSummary {
                stream: 0,
                sender: Transfer::new(1, 1.0),
                receiver: Some(Transfer::new(1, 1.0)),
                tcp: Some(tcp),
            }],
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
                }],
            )
        };
        assert!(at(0.97 * ceiling, paced.clone()).window_limited);
        assert!(!at(0.5 * ceiling, paced.clone()).window_limited);
        paced.limits = None;
        assert!(at(0.9 * ceiling, paced).window_limited);
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
        }
    }
}
