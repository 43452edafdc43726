//! The figures the rules read, gathered from one direction of a report: a flat set of named
//! numbers, each `None` where the report does not hold it. Gathering only; the rules decide.

use crate::config::{StreamDirection, Workload};
use crate::report::{SenderLimits, TestReport, ThreadTime};

use super::Diagnosis;

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
        let server = match &report.server {
            Some(p) if p.software.starts_with("iperf3") => Peer::Iperf3,
            _ => Peer::Xbench,
        };
        let (sender, receiver) = match d.direction {
            StreamDirection::ClientToServer => (Peer::Xbench, server),
            StreamDirection::ServerToClient => (server, Peer::Xbench),
        };
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
        let base = tcps
            .iter()
            .filter_map(|t| t.min_rtt_us)
            .filter(|&r| r > 0)
            .min()
            .or(d.rtt.map(|r| r.min_us))
            .map(f64::from);
        let all = |f: &dyn Fn(&crate::report::StreamSummary) -> Option<ThreadTime>| {
            let v: Option<Vec<ThreadTime>> = d.per_stream.iter().map(f).collect();
            v.filter(|v| !v.is_empty()).map(|v| mean_thread(&v))
        };
        let queue: Option<Vec<f64>> = d
            .per_stream
            .iter()
            .map(|s| {
                let q = s.receive_queue?;
                (q.rcvbuf_bytes > 0).then(|| q.mean_bytes / q.rcvbuf_bytes as f64 * 100.0)
            })
            .collect();
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
            sender,
            receiver,
        })
    }

    /// Runs the rules on these figures.
    pub fn diagnose(&self) -> Diagnosis {
        super::rules::decide(self)
    }
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
