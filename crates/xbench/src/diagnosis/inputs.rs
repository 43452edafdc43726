//! The figures the rules read, gathered from one direction of a report: a flat set of named
//! numbers, each `None` where the report does not hold it. Gathering only; the rules decide.

use crate::config::{StreamDirection, Workload};
use crate::report::{DirectionSummary, SenderLimits, TcpTotals, TestReport, ThreadTime};

/// Who ran one end of a direction, which says what that end can report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// An xbench client or server: `TCP_INFO` when it sends, its threads and queues.
    Xbench,
    /// An iperf3 server: bytes and CPU, nothing about its threads or queues.
    Iperf3,
}

/// Everything the engine reads about one direction. Built by [`Inputs::of`] from a report;
/// public so that a program with figures of its own (or a test) can ask for a diagnosis.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// The receivers' rate, bits per second (the senders' when the receivers' is missing).
    pub rate_bps: f64,
    /// Streams in the direction.
    pub streams: u16,
    /// `-b` × streams, bits per second, when pacing was asked.
    pub pacing_asked_bps: Option<f64>,
    /// The senders' limited times, mean over streams.
    pub limits: Option<SenderLimits>,
    /// Mean advertised window ÷ mean RTT, all streams, bits per second.
    pub window_ceiling_bps: Option<f64>,
    /// Mean advertised window per stream, bytes.
    pub mean_window_bytes: Option<f64>,
    /// Largest advertised window per stream, bytes (mean over streams).
    pub max_window_bytes: Option<f64>,
    /// Sender MSS, bytes (mean over streams).
    pub mss_bytes: Option<f64>,
    /// Mean smoothed RTT, µs.
    pub rtt_mean_us: Option<f64>,
    /// Base RTT, µs: the kernel's lowest sample (the lowest smoothed sample where the kernel
    /// keeps none).
    pub rtt_base_us: Option<f64>,
    /// Segments retransmitted, all streams.
    pub retransmits: u64,
    /// Segments sent inside the window (bytes ÷ MSS), for the retransmitted share.
    pub segments_sent: Option<f64>,
    /// Largest congestion window, bytes.
    pub max_cwnd_bytes: Option<u64>,
    /// Samples with room in both windows and nothing queued unsent, percent (mean over
    /// streams, `None` unless every stream reported).
    pub nothing_queued_pct: Option<f64>,
    /// The senders' largest `SO_SNDBUF`, bytes (mean over streams).
    pub sndbuf_bytes: Option<f64>,
    /// The sending threads, mean over streams (`None` unless every stream reported).
    pub sender_thread: Option<ThreadTime>,
    /// The reading threads, mean over streams (`None` unless every stream reported).
    pub reader_thread: Option<ThreadTime>,
    /// Mean unread bytes in the receive queues as a share of `SO_RCVBUF`, percent (mean over
    /// streams).
    pub receive_queue_pct: Option<f64>,
    /// The data went over this host's loopback device (the client's route left by it, or the
    /// server is a loopback address): no network lies between the ends, so a retransmission
    /// answers a drop of the receiving host's own (its socket's queue or backlog full).
    pub loopback: bool,
    /// The EC2 allowance that shaped this direction's data, the most-counted one, when an
    /// end's driver counted it as bearing on the rate ([`crate::report::Bearing::LimitsRate`]).
    pub allowance: Option<AllowanceHit>,
    /// Who sent.
    pub sender: Peer,
    /// Who received.
    pub receiver: Peer,
}

impl Inputs {
    /// The figures of direction `index` of `report`, when it is a TCP throughput direction.
    pub fn of(report: &TestReport, index: usize) -> Option<Inputs> {
        let Workload::Throughput(tp) = &report.spec.workload else {
            return None;
        };
        if tp.udp.is_some() {
            return None;
        }
        let d = report.summary.directions.get(index)?;
        let (sender, receiver) = peers(report, d.direction);
        let tcps: Vec<_> = d.per_stream.iter().filter_map(|s| s.tcp.as_ref()).collect();
        let mean = |xs: &[f64]| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
        let windows: Vec<f64> = tcps.iter().filter_map(|t| t.mean_snd_wnd_bytes).collect();
        let max_windows: Vec<f64> = tcps
            .iter()
            .filter_map(|t| t.max_snd_wnd_bytes.map(f64::from))
            .collect();
        let mss: Vec<f64> = tcps
            .iter()
            .filter(|t| t.mss > 0)
            .map(|t| f64::from(t.mss))
            .collect();
        let mss_bytes = mean(&mss);
        let base = base_rtt_us(&tcps, d);
        let all = |f: &dyn Fn(&crate::report::StreamSummary) -> Option<ThreadTime>| {
            let v: Option<Vec<ThreadTime>> = d.per_stream.iter().map(f).collect();
            v.filter(|v| !v.is_empty()).map(|v| mean_thread(&v))
        };
        let queue = receive_queue_pcts(d);
        // Nothing to diagnose without either end's figure (a test whose figures never arrived).
        let rate_bps = d.receiver.or(d.sender)?.bits_per_second;
        Some(Inputs {
            rate_bps,
            streams: d.streams,
            pacing_asked_bps: tp
                .bitrate
                .filter(|&b| b > 0)
                .map(|b| b as f64 * f64::from(d.streams)),
            limits: d.limits,
            window_ceiling_bps: d.window_ceiling.map(|c| c.bits_per_second),
            mean_window_bytes: (windows.len() == tcps.len())
                .then(|| mean(&windows))
                .flatten(),
            max_window_bytes: (max_windows.len() == tcps.len())
                .then(|| mean(&max_windows))
                .flatten(),
            mss_bytes,
            rtt_mean_us: d.rtt.map(|r| r.mean_us),
            rtt_base_us: base,
            retransmits: d.retransmits,
            segments_sent: mss_bytes.zip(d.sender).map(|(m, s)| s.bytes as f64 / m),
            max_cwnd_bytes: d.max_cwnd_bytes,
            sndbuf_bytes: tcps
                .iter()
                .map(|t| t.sndbuf_bytes.map(|b| b as f64))
                .collect::<Option<Vec<f64>>>()
                .and_then(|v| mean(&v)),
            nothing_queued_pct: tcps
                .iter()
                .map(|t| t.nothing_queued_pct)
                .collect::<Option<Vec<f64>>>()
                .and_then(|v| mean(&v)),
            sender_thread: all(&|s| s.sender_thread),
            reader_thread: all(&|s| s.receiver_thread),
            receive_queue_pct: queue.and_then(|q| mean(&q)),
            loopback: over_loopback(report),
            allowance: allowance_hit(report, d.direction),
            sender,
            receiver,
        })
    }
}

/// An allowance exceeded the way this direction's data went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllowanceHit {
    /// Packets the driver counted as shaped.
    pub exceeded: u64,
    /// Those as a share of the packets the interface moved that way, percent, when known.
    pub shaped_pct: Option<f64>,
}

/// Which program sends and which receives in this direction: xbench, or an iperf3 server.
fn peers(report: &TestReport, direction: StreamDirection) -> (Peer, Peer) {
    let server = match &report.server {
        Some(p) if p.software.starts_with("iperf3") => Peer::Iperf3,
        _ => Peer::Xbench,
    };
    match direction {
        StreamDirection::ClientToServer => (Peer::Xbench, server),
        StreamDirection::ServerToClient => (server, Peer::Xbench),
    }
}

/// The path's base RTT in µs: the least of the streams' minimum RTTs, else the direction's.
fn base_rtt_us(tcps: &[&TcpTotals], d: &DirectionSummary) -> Option<f64> {
    tcps.iter()
        .filter_map(|t| t.min_rtt_us)
        .filter(|&r| r > 0)
        .min()
        .or(d.rtt.map(|r| r.min_us))
        .map(f64::from)
}

/// Each stream's mean receive queue as a percentage of its receive buffer; `None` unless
/// every stream has one.
fn receive_queue_pcts(d: &DirectionSummary) -> Option<Vec<f64>> {
    d.per_stream
        .iter()
        .map(|s| {
            let q = s.receive_queue?;
            (q.rcvbuf_bytes > 0).then(|| q.mean_bytes / q.rcvbuf_bytes as f64 * 100.0)
        })
        .collect()
}

/// The allowance verdict of `report` that bears on `direction`'s rate: bandwidth out at the
/// end that sends, in at the end that receives, packets per second at either.
fn allowance_hit(report: &TestReport, direction: StreamDirection) -> Option<AllowanceHit> {
    use crate::report::{Allowance, Bearing, End};
    let (sends, receives) = match direction {
        StreamDirection::ClientToServer => (End::Client, End::Server),
        StreamDirection::ServerToClient => (End::Server, End::Client),
    };
    (report.hosts.as_ref()?.verdicts.iter())
        .filter(|v| v.bearing == Bearing::LimitsRate)
        .filter(|v| match v.allowance {
            Allowance::BwOut => v.end == sends,
            Allowance::BwIn => v.end == receives,
            Allowance::Pps => true,
            Allowance::Conntrack | Allowance::Linklocal => false,
        })
        .max_by_key(|v| v.exceeded)
        .map(|v| AllowanceHit {
            exceeded: v.exceeded,
            shaped_pct: v
                .packets
                .filter(|&p| p > 0)
                .map(|p| v.exceeded as f64 * 100.0 / p as f64),
        })
}

/// Whether `report`'s data went over loopback: the client's interface is the loopback
/// device, or (without host facts, as from an older report) every stream's server address
/// is a loopback address.
fn over_loopback(report: &TestReport) -> bool {
    let client_if = (report.hosts.as_ref())
        .and_then(|h| h.client.as_ref())
        .and_then(|c| c.interface.as_ref());
    match client_if {
        Some(i) => i.driver.as_deref() == Some("loopback"),
        None => {
            !report.streams.is_empty()
                && (report.streams.iter()).all(|s| s.server_addr.ip().is_loopback())
        }
    }
}

/// The mean of several threads' shares; a peer's figures outside 0–100 % are clamped, never
/// trusted beyond what a share can be.
fn mean_thread(v: &[ThreadTime]) -> ThreadTime {
    let n = v.len() as f64;
    let clamp = |x: f64| {
        if x.is_finite() {
            x.clamp(0.0, 100.0)
        } else {
            0.0
        }
    };
    let on_cpu_pct = v.iter().map(|t| clamp(t.on_cpu_pct)).sum::<f64>() / n;
    ThreadTime {
        on_cpu_pct,
        waiting_for_cpu_pct: (v.iter().map(|t| clamp(t.waiting_for_cpu_pct)).sum::<f64>() / n)
            .min(100.0 - on_cpu_pct),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Allowance, AllowanceVerdict, Bearing, End, Hosts};

    fn report_with(verdicts: Vec<AllowanceVerdict>) -> TestReport {
        let c = crate::ClientConfig::new("h");
        let why = crate::Error::Interrupted { during: "a test" };
        let mut r = crate::client::nothing_measured(&c, std::time::SystemTime::now(), &why);
        r.hosts = Some(Hosts {
            client: None,
            server: None,
            verdicts,
            path_mtu: None,
        });
        r
    }

    fn shaped(end: End, allowance: Allowance, exceeded: u64) -> AllowanceVerdict {
        AllowanceVerdict {
            end,
            allowance,
            exceeded,
            packets: Some(exceeded * 50),
            span_s: 10.0,
            bearing: Bearing::LimitsRate,
        }
    }

    /// An allowance bears on a direction where that direction's data went through it:
    /// bandwidth out at the sender, in at the receiver, packets per second at either end.
    #[test]
    fn an_allowance_bears_on_the_direction_its_data_went() {
        use StreamDirection::{ClientToServer as Up, ServerToClient as Down};
        let r = report_with(vec![shaped(End::Client, Allowance::BwOut, 12_408)]);
        let hit = allowance_hit(&r, Up).unwrap();
        assert_eq!(hit.exceeded, 12_408);
        assert!((hit.shaped_pct.unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(allowance_hit(&r, Down), None);
        let r = report_with(vec![shaped(End::Client, Allowance::BwIn, 7)]);
        assert_eq!(allowance_hit(&r, Up), None);
        assert!(allowance_hit(&r, Down).is_some());
        let r = report_with(vec![shaped(End::Server, Allowance::Pps, 9)]);
        assert!(allowance_hit(&r, Up).is_some() && allowance_hit(&r, Down).is_some());
        // Bursts, connections and link-local traffic do not set the rate.
        let mut bursts = shaped(End::Client, Allowance::BwOut, 3);
        bursts.bearing = Bearing::Bursts;
        let r = report_with(vec![bursts, shaped(End::Client, Allowance::Conntrack, 50)]);
        assert_eq!(allowance_hit(&r, Up), None);
    }
}
