//! The UDP data path: one thread per stream with a connected UDP socket, sending paced,
//! numbered datagrams in batches (`sendmmsg`) or receiving them in batches (`recvmmsg`) and
//! accounting every one (loss, reordering, duplicates, jitter, kernel receive-buffer drops).
//!
//! Threads publish cumulative counters once per batch; the controllers take differences at
//! interval boundaries, as the TCP sampler does with byte counts. The datagram layout is in
//! [`wire`], the pure accounting in [`stats`], the schedule in [`pacer`]. Not here: how the
//! sockets prove they belong to a test (the controllers, with the data greeting) and how the
//! two ends' figures are merged ([`crate::summary::udp`]).

pub(crate) mod clock;
pub(crate) mod gso;
pub(crate) mod iperf3;
pub(crate) mod pacer;
pub(crate) mod receiver;
pub(crate) mod sender;
pub(crate) mod socket;
pub(crate) mod stats;
pub(crate) mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use self::stats::Counts;
use crate::report::{Role, SideUdpStream};

/// What a stream thread and its controller share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    stop: AtomicBool,
    counts: Mutex<Counts>,
    /// A sender whose GSO sends work (see [`gso`]).
    gso: AtomicBool,
    /// A receiver the kernel coalesces datagrams for (GRO).
    gro: AtomicBool,
}

impl Shared {
    pub(crate) fn counts(&self) -> Counts {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, c: &Counts) {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner) = *c;
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// One running UDP stream.
#[derive(Debug)]
pub(crate) struct UdpStream {
    pub(crate) id: u16,
    pub(crate) role: Role,
    pub(crate) shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<crate::report::CpuUsage, String>>>,
}

impl UdpStream {
    /// Asks the thread to stop; it notices within one receive timeout or one send batch.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for the thread: its CPU time, or why it failed.
    pub(crate) fn join(mut self) -> Result<crate::report::CpuUsage, String> {
        self.stop();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the stream thread panicked".into()),
            None => Err("the stream thread was already collected".into()),
        }
    }
}

impl Drop for UdpStream {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long a receiver keeps counting after its end mark: datagrams sent before the mark and
/// still in flight are received, not lost.
pub(crate) const GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// A stream's totals over the window: what was sent inside it, and what of that arrived.
fn totals(stream: u16, role: Role, c: &Counts, error: Option<String>) -> SideUdpStream {
    SideUdpStream {
        stream,
        role,
        datagrams: c.measured.datagrams,
        bytes: c.measured.bytes,
        lost: c.lost,
        out_of_order: c.measured.out_of_order,
        duplicates: c.measured.duplicates,
        jitter_ms: c.jitter_ns / 1e6,
        rxq_drops: c.rxq_drops,
        slipped: c.measured.slipped,
        ignored: c.ignored,
        error,
    }
}

/// Stops and joins every stream: each one's totals over the window (see [`totals`]),
/// and the CPU time of all of them. `streams` is emptied.
pub(crate) fn collect(
    streams: &mut Vec<UdpStream>,
) -> (Vec<crate::report::SideUdpStream>, crate::report::CpuUsage) {
    let mut cpu = crate::report::CpuUsage::default();
    for s in streams.iter() {
        s.stop();
    }
    let mut out: Vec<_> = streams
        .drain(..)
        .map(|s| {
            let (id, role, shared) = (s.id, s.role, Arc::clone(&s.shared));
            let error = match s.join() {
                Ok(c) => {
                    cpu += c;
                    None
                }
                Err(e) => Some(e),
            };
            totals(id, role, &shared.counts(), error)
        })
        .collect();
    out.sort_by_key(|s| s.stream);
    (out, cpu)
}

/// How this end's streams move datagrams, for the report: GSO or `sendmmsg` for senders,
/// `recvmmsg` for receivers.
pub(crate) fn batching(streams: &[UdpStream]) -> String {
    let mut parts = Vec::new();
    let senders: Vec<_> = streams.iter().filter(|s| s.role == Role::Sender).collect();
    if senders.iter().any(|s| s.shared.gso.load(Ordering::Relaxed)) {
        parts.push(format!(
            "sends: UDP GSO (UDP_SEGMENT), up to {} datagrams per send",
            gso::MAX_SEGMENTS
        ));
    } else if !senders.is_empty() {
        parts.push(format!(
            "sends: sendmmsg, up to {} datagrams per call, no GSO",
            socket::BATCH
        ));
    }
    let receivers: Vec<_> = streams
        .iter()
        .filter(|s| s.role == Role::Receiver)
        .collect();
    if receivers
        .iter()
        .any(|s| s.shared.gro.load(Ordering::Relaxed))
    {
        parts.push(
            "receives: recvmmsg with UDP GRO (UDP_GRO), trains of datagrams per message".into(),
        );
    } else if !receivers.is_empty() {
        parts.push(format!(
            "receives: recvmmsg, up to {} datagrams per call",
            socket::BATCH
        ));
    }
    parts.join("; ")
}

/// Stops the streams of `role`.
pub(crate) fn stop_role(streams: &[UdpStream], role: Role) {
    for s in streams.iter().filter(|s| s.role == role) {
        s.stop();
    }
}
