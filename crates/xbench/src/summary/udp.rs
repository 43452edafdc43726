//! Merges the two ends' UDP counts: the sender's datagrams beside the receiver's, per stream
//! and per direction, per interval and over the measured window.
//!
//! Over the window, loss is the sender's count minus the receiver's (each sequence number
//! once), which is exact and can be neither negative nor above 100 %. Pure functions; no
//! sockets, no clocks.

use std::collections::BTreeMap;

use super::Directions;
use crate::config::StreamDirection;
use crate::report::{
    Role, SideUdpInterval, SideUdpResults, SideUdpStream, UdpCount, UdpDirectionFigures,
    UdpDirectionSummary, UdpFigures, UdpInterval, UdpReceived, UdpStreamFigures,
};

/// One interval, merged: the client's half and the server's parts, by stream. `None` when
/// neither end has it.
pub fn merge_interval(
    dirs: &Directions,
    client: Option<&SideUdpInterval>,
    server: &[SideUdpInterval],
) -> Option<UdpInterval> {
    let first = client.or(server.first())?;
    let seconds = first.end_s - first.start_s;
    let sides: Vec<&SideUdpStream> = client
        .iter()
        .flat_map(|c| &c.streams)
        .chain(server.iter().flat_map(|s| &s.streams))
        .collect();
    let streams = per_stream(dirs, &sides, seconds, Loss::Gaps);
    Some(UdpInterval {
        index: first.index,
        start_s: first.start_s,
        end_s: first.end_s,
        omitted: first.omitted,
        sum: sum(dirs, &streams, seconds),
        streams,
    })
}

/// The totals of each direction over the measured window of `window_s` seconds.
/// `asked` is `-b` (all streams of one direction), `None` unpaced.
pub fn summarize(
    dirs: &Directions,
    client: &SideUdpResults,
    server: Option<&SideUdpResults>,
    window_s: f64,
    asked: Option<u64>,
) -> Vec<UdpDirectionSummary> {
    let sides: Vec<&SideUdpStream> = client
        .streams
        .iter()
        .chain(server.iter().flat_map(|s| &s.streams))
        .collect();
    let streams = per_stream(dirs, &sides, window_s, Loss::SentMinusReceived);
    sum(dirs, &streams, window_s)
        .into_iter()
        .map(|d| {
            let per: Vec<UdpStreamFigures> = streams
                .iter()
                .filter(|s| s.direction == d.direction)
                .cloned()
                .collect();
            UdpDirectionSummary {
                direction: d.direction,
                streams: per.len() as u16,
                asked_bits_per_second: asked.map(|b| b as f64),
                figures: d.figures,
                per_stream: per,
            }
        })
        .collect()
}

/// How a span's loss is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// The receiver's gap count (an interval: the sender's count there is of other datagrams,
    /// those in flight across the boundary).
    Gaps,
    /// Sent minus received (the window: both count the same datagrams).
    SentMinusReceived,
}

/// Each stream's figures, its sender's and receiver's sides side by side.
fn per_stream(
    dirs: &Directions,
    sides: &[&SideUdpStream],
    seconds: f64,
    loss: Loss,
) -> Vec<UdpStreamFigures> {
    dirs.iter()
        .map(|(&id, &direction)| {
            let of = |role| sides.iter().find(|s| s.stream == id && s.role == role);
            let sender = of(Role::Sender);
            let sent =
                sender.map_or_else(UdpCount::default, |s| count(s.datagrams, s.bytes, seconds));
            let received = of(Role::Receiver).map(|r| {
                let lost = match (loss, sender) {
                    (Loss::SentMinusReceived, Some(s)) => s.datagrams.saturating_sub(r.datagrams),
                    _ => r.lost,
                };
                received(r, lost, seconds)
            });
            UdpStreamFigures {
                stream: id,
                direction,
                figures: UdpFigures {
                    sent,
                    received,
                    slipped: sender.map_or(0, |s| s.slipped),
                },
            }
        })
        .collect()
}

fn count(datagrams: u64, bytes: u64, seconds: f64) -> UdpCount {
    let bits_per_second = if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    };
    UdpCount {
        datagrams,
        bytes,
        bits_per_second,
    }
}

fn received(r: &SideUdpStream, lost: u64, seconds: f64) -> UdpReceived {
    UdpReceived {
        count: count(r.datagrams, r.bytes, seconds),
        lost,
        lost_pct: pct(lost, r.datagrams + lost),
        out_of_order: r.out_of_order,
        duplicates: r.duplicates,
        jitter_ms: r.jitter_ms,
        rxq_drops: r.rxq_drops,
        ignored: r.ignored,
    }
}

/// `part` of `whole` in percent; 0 of nothing.
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 100.0 / whole as f64).min(100.0)
    }
}

/// Sums streams by direction. Jitter is the mean over the streams that received anything.
fn sum(dirs: &Directions, streams: &[UdpStreamFigures], seconds: f64) -> Vec<UdpDirectionFigures> {
    let mut order: Vec<StreamDirection> = dirs.values().copied().collect();
    order.dedup();
    let mut by: BTreeMap<StreamDirection, Vec<&UdpStreamFigures>> = BTreeMap::new();
    for s in streams {
        by.entry(s.direction).or_default().push(s);
    }
    order
        .into_iter()
        .map(|direction| {
            let list = by.remove(&direction).unwrap_or_default();
            let sent = list.iter().fold((0, 0), |(d, b), s| {
                (d + s.figures.sent.datagrams, b + s.figures.sent.bytes)
            });
            let rs: Option<Vec<UdpReceived>> = list.iter().map(|s| s.figures.received).collect();
            let received = rs
                .filter(|rs| !rs.is_empty())
                .map(|rs| sum_received(&rs, seconds));
            UdpDirectionFigures {
                direction,
                figures: UdpFigures {
                    sent: count(sent.0, sent.1, seconds),
                    received,
                    slipped: list.iter().map(|s| s.figures.slipped).sum(),
                },
            }
        })
        .collect()
}

/// The receivers of one direction together; only when every stream's report came.
fn sum_received(rs: &[UdpReceived], seconds: f64) -> UdpReceived {
    let total = |f: fn(&UdpReceived) -> u64| rs.iter().map(f).sum::<u64>();
    let (d, b) = (total(|r| r.count.datagrams), total(|r| r.count.bytes));
    let lost = total(|r| r.lost);
    let with_data: Vec<f64> = rs
        .iter()
        .filter(|r| r.count.datagrams > 0)
        .map(|r| r.jitter_ms)
        .collect();
    UdpReceived {
        count: count(d, b, seconds),
        lost,
        lost_pct: pct(lost, d + lost),
        out_of_order: total(|r| r.out_of_order),
        duplicates: total(|r| r.duplicates),
        jitter_ms: if with_data.is_empty() {
            0.0
        } else {
            with_data.iter().sum::<f64>() / with_data.len() as f64
        },
        rxq_drops: total(|r| r.rxq_drops),
        ignored: total(|r| r.ignored),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(stream: u16, role: Role, datagrams: u64, lost: u64) -> SideUdpStream {
        SideUdpStream {
            stream,
            role,
            datagrams,
            bytes: datagrams * 100,
            lost,
            out_of_order: 0,
            duplicates: 0,
            jitter_ms: 0.5,
            rxq_drops: 0,
            slipped: 0,
            ignored: 0,
            error: None,
        }
    }

    #[test]
    fn window_loss_is_sent_minus_received_and_never_out_of_range() {
        let dirs: Directions = [
            (0, StreamDirection::ClientToServer),
            (1, StreamDirection::ClientToServer),
        ]
        .into();
        let client = SideUdpResults {
            streams: vec![side(0, Role::Sender, 1000, 0), side(1, Role::Sender, 10, 0)],
            cpu: Default::default(),
            batching: String::new(),
        };
        // Stream 1's receiver claims more than was sent: loss stays at 0, not negative.
        let server = SideUdpResults {
            streams: vec![
                side(0, Role::Receiver, 900, 7),
                side(1, Role::Receiver, 12, 0),
            ],
            ..client.clone()
        };
        let d = &summarize(&dirs, &client, Some(&server), 2.0, Some(1_000_000))[0];
        let r = d.figures.received.unwrap();
        assert_eq!(
            (
                d.per_stream[0].figures.received.unwrap().lost,
                d.per_stream[1].figures.received.unwrap().lost
            ),
            (100, 0)
        );
        assert_eq!(r.lost, 100);
        assert!((r.lost_pct - 100.0 * 100.0 / 1012.0).abs() < 1e-9);
        assert_eq!(d.figures.sent.bits_per_second, 1010.0 * 100.0 * 8.0 / 2.0);
        assert_eq!(d.asked_bits_per_second, Some(1e6));
    }
}
