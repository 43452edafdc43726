//! The request/response data path: worker threads that each drive many connections from one
//! epoll loop, so a thousand flows need a handful of threads, not a thousand.
//!
//! A client worker keeps `burst` transactions in flight per flow (or starts them on a pacing
//! schedule) and records each one's latency; a server worker answers every complete request
//! with a response. With `--crr` each transaction is its own connection. Workers count and
//! record; the controller (client or server session) decides when an interval ends by bumping
//! [`Control::epoch`] and waking them, and each worker answers with a [`Report::Snapshot`] of
//! its flows. A client worker records the latency of all its flows in one histogram per
//! interval (a flow keeps only counters, and a small sketch with `--per-flow`), so memory
//! grows with workers, not flows. UDP flows (`--rr -u`, [`udp`]) speak the same protocol over
//! datagrams. Both client workers run on one [`driver`]: the event loop, pacing, epochs and
//! stall checks are written once, generic over the transport's `FlowIo` (what a TCP or a UDP
//! flow does to start a transaction and to take in what arrived). Both server workers run on
//! one [`serve`] loop the same way, generic over the transport's `ServeIo` (what answering a
//! TCP connection or a UDP flow is). Nothing here knows the control protocol or prints.

pub(crate) mod at_once;
pub(crate) mod client;
pub(crate) mod driver;
pub(crate) mod poll;
pub(crate) mod serve;
pub(crate) mod server;
pub(crate) mod tally;
pub(crate) mod udp;
pub(crate) mod workers;

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use tokio::sync::mpsc::UnboundedSender;

pub(crate) use self::workers::{Handoff, Worker, Workers};
use crate::latency::{FlowSketch, Recorder};
use crate::report::CpuUsage;
use crate::tcp_info;

/// What the controller tells its workers, read on every pass of their loops.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// Bumped at each interval boundary: a worker seeing a new value sends a snapshot.
    pub(crate) epoch: AtomicU32,
    /// [`RUNNING`], [`DRAINING`] or [`STOPPED`].
    pub(crate) state: AtomicU8,
    /// Bumped by server workers whenever bytes arrive, so the controller can tell a quiet
    /// test from a dead one.
    pub(crate) activity: AtomicU64,
    /// `--crr` connections handed to the workers and not yet closed.
    pub(crate) live: std::sync::atomic::AtomicUsize,
    /// `--crr` connections answered where they were accepted ([`Handoff::give`]), per flow;
    /// empty for other tests. The first server worker takes them into its snapshots.
    pub(crate) at_once: tally::Tally,
    /// Server: the test's share of `--max-send-rate`, which every answer is paced by; `None`
    /// without a cap (and on the client).
    pub(crate) send_budget: Option<Arc<crate::engine::send_budget::SendBudget>>,
    /// The end of a client's window, ns since its base (0: none): no transaction due at or
    /// after it starts. See [`Control::end_at`].
    pub(crate) end_ns: AtomicU64,
}

/// Transactions start as usual.
pub(crate) const RUNNING: u8 = 0;
/// No new transactions; those in flight finish (so both ends count the same transactions).
pub(crate) const DRAINING: u8 = 1;
/// Stop now; whatever is in flight is abandoned.
pub(crate) const STOPPED: u8 = 2;

impl Control {
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    /// Ends a client's window at `ns` (since its base): a timed test's end mark, set before
    /// its workers start so they keep it themselves (a controller that wakes late on a loaded
    /// machine would otherwise let them start transactions for as long as it slept), or the
    /// moment a test is cut short. Only ever moves earlier.
    pub(crate) fn end_at(&self, ns: u64) {
        let ns = ns.max(1);
        let _ = self
            .end_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| {
                Some(if e == 0 { ns } else { e.min(ns) })
            });
    }

    /// Whether a client worker may start a transaction due at `due` (ns since its base; now,
    /// unpaced): before the end of the window, and not stopped. While draining, only one due
    /// before a window's end: a paced worker running late still starts the transactions whose
    /// time was inside the window (their latency counts from that time), none after it.
    pub(crate) fn may_start(&self, due: u64) -> bool {
        let end = self.end_ns.load(Ordering::Relaxed);
        match self.state() {
            RUNNING => end == 0 || due < end,
            DRAINING => end != 0 && due < end,
            _ => false,
        }
    }
}

/// One flow's figures since the previous snapshot.
#[derive(Debug, Default)]
pub(crate) struct FlowSnapshot {
    pub(crate) flow: u16,
    /// Completed transactions (client: responses received; server: requests answered).
    pub(crate) transactions: u64,
    /// The flow's own latency summary of those transactions (client, `--per-flow` only);
    /// the merged figures come from the worker's recorder.
    pub(crate) sketch: Option<FlowSketch>,
    /// Segments this end retransmitted.
    pub(crate) retransmits: u64,
    /// Smoothed RTT at the snapshot, µs, when the flow has a connection.
    pub(crate) srtt_us: Option<u32>,
    /// Connections opened (client) or accepted (server), `--crr`.
    pub(crate) connections: u64,
    /// UDP's losses and strays (`--rr -u`); `None` for TCP.
    pub(crate) udp: Option<UdpCounts>,
    /// New connections that failed, by kind (client, `--connections-only`'s openers only:
    /// elsewhere a failed connection ends the flow).
    pub(crate) failures: Failures,
}

/// How new connections failed (`--connections-only`'s openers), counted when each attempt
/// ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failures {
    /// Refused: a reset (or an ICMP unreachable) answered the SYN.
    pub(crate) refused: u64,
    /// Not answered within the attempt's timeout.
    pub(crate) timed_out: u64,
    /// Opened, then reset or closed before its answer.
    pub(crate) reset: u64,
}

impl Failures {
    pub(crate) fn total(&self) -> u64 {
        self.refused + self.timed_out + self.reset
    }
}

impl std::ops::AddAssign for Failures {
    fn add_assign(&mut self, o: Self) {
        self.refused += o.refused;
        self.timed_out += o.timed_out;
        self.reset += o.reset;
    }
}

/// What a UDP flow counts beside its transactions (`--rr -u`), since the previous snapshot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UdpCounts {
    /// Requests sent (client).
    pub(crate) requests: u64,
    /// Requests that timed out unanswered (client).
    pub(crate) lost: u64,
    /// Responses to requests that had timed out (client).
    pub(crate) late: u64,
    /// Responses to a request already answered (client).
    pub(crate) duplicates: u64,
    /// Datagrams that were not this test's: never counted, never answered.
    pub(crate) ignored: u64,
}

impl std::ops::AddAssign for UdpCounts {
    fn add_assign(&mut self, o: Self) {
        self.requests += o.requests;
        self.lost += o.lost;
        self.late += o.late;
        self.duplicates += o.duplicates;
        self.ignored += o.ignored;
    }
}

#[cfg(test)]
impl FlowSnapshot {
    /// A snapshot of `transactions` and nothing else, for the controllers' tests.
    pub(crate) fn counted(flow: u16, transactions: u64) -> Self {
        FlowSnapshot {
            flow,
            transactions,
            ..FlowSnapshot::default()
        }
    }
}

/// What workers tell the controller.
#[derive(Debug)]
pub(crate) enum Report {
    /// Every flow of a worker, answering `epoch`. A worker that was busy (or asleep in a
    /// blocking call) across several boundaries answers only the newest, with everything
    /// since its last snapshot; the controller credits it with nothing for the ones it
    /// skipped, so those intervals still complete.
    Snapshot {
        worker: usize,
        epoch: u32,
        flows: Vec<FlowSnapshot>,
        /// Latency of all the worker's transactions in the interval (client only).
        latency: Option<Recorder>,
    },
    /// A flow failed (`None`: the worker as a whole, e.g. its event loop); the test should end
    /// with this error (what was measured is kept). Not a `u16::MAX` sentinel: with 65,536
    /// flows that is a flow's id.
    Failed { flow: Option<u16>, error: String },
    /// The worker has stopped: the last partial interval and its thread's CPU time.
    Done {
        flows: Vec<FlowSnapshot>,
        /// Latency since the last snapshot (client only).
        latency: Option<Recorder>,
        cpu: CpuUsage,
    },
}

/// A worker's side of the interval handshake: which worker it is, and the epoch it answered
/// last.
#[derive(Debug)]
pub(crate) struct Epochs {
    worker: usize,
    seen: u32,
}

impl Epochs {
    pub(crate) fn new(worker: usize) -> Self {
        Epochs { worker, seen: 0 }
    }

    /// Which worker this is.
    pub(crate) fn worker(&self) -> usize {
        self.worker
    }

    /// The epoch to answer, if the controller has started one since the last answer.
    pub(crate) fn due(&mut self, control: &Control) -> Option<u32> {
        let epoch = control.epoch.load(Ordering::Relaxed);
        (epoch != self.seen).then(|| {
            self.seen = epoch;
            epoch
        })
    }

    /// The answer to `epoch`: the flows' counts and (client) the worker's latency.
    pub(crate) fn snapshot(
        &self,
        epoch: u32,
        flows: Vec<FlowSnapshot>,
        latency: Option<Recorder>,
    ) -> Report {
        Report::Snapshot {
            worker: self.worker,
            epoch,
            flows,
            latency,
        }
    }
}

/// Retransmit and RTT bookkeeping of one connection.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TcpTrack {
    /// `tcpi_total_retrans` at the last snapshot.
    seen: u32,
}

impl TcpTrack {
    /// Retransmits since the last call, and the current smoothed RTT.
    pub(crate) fn sample(&mut self, sock: &TcpStream) -> (u64, Option<u32>) {
        match tcp_info::read(sock) {
            Ok(i) => {
                let d = i.total_retrans.saturating_sub(self.seen);
                self.seen = i.total_retrans;
                (u64::from(d), (i.srtt_us > 0).then_some(i.srtt_us))
            }
            Err(_) => (0, None),
        }
    }
}

/// Tells a worker when its flows' `TCP_INFO` must be read for exact retransmit counts, from
/// the network namespace's own counter of retransmitted segments (`Tcp: RetransSegs` in
/// `/proc/thread-self/net/snmp`, one file read).
///
/// The kernel adds to that counter and to a socket's `tcpi_total_retrans` in the same place,
/// so while it stands still no connection of the namespace has retransmitted, and every
/// flow's count since the last look is zero without asking each socket. Reading every flow at
/// every interval cost 9–13% of each end's CPU at 16,384 flows (`getsockopt` takes each
/// socket's lock, and a working set of 32,768 sockets misses the cache). Any other socket's
/// retransmit (another test, a browser) just means a full read, as before; so does a counter
/// that cannot be read (no `/proc`), and so does the first look.
#[derive(Debug, Default)]
pub(crate) struct RetransGate {
    /// The counter at the last look.
    last: Option<u64>,
}

impl RetransGate {
    /// Whether a flow may have retransmitted since the previous call: read the counter
    /// *before* the flows, so a retransmit between the two is seen by one or the other.
    pub(crate) fn moved(&mut self) -> bool {
        let now = std::fs::read_to_string("/proc/thread-self/net/snmp")
            .ok()
            .and_then(|t| retrans_segs(&t));
        let moved = match (self.last, now) {
            (Some(a), Some(b)) => a != b,
            _ => true,
        };
        self.last = now;
        moved
    }
}

/// `RetransSegs` of the `Tcp:` lines (a header line of names, then one of values).
fn retrans_segs(snmp: &str) -> Option<u64> {
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let at = names.split_whitespace().position(|n| n == "RetransSegs")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// How many worker threads drive `flows` connections: one per core at most, since each one
/// keeps its core busy at high rates, and never more than there are flows.
pub(crate) fn worker_count(flows: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    flows.clamp(1, cores.max(1))
}

/// Takes up to `len` bytes off `sock`'s stream without copying them out: with `MSG_TRUNC`
/// TCP discards them in the kernel (tcp(7)). Requests and responses carry nothing; only their
/// length counts. The bytes taken, 0 at the end of the stream.
#[inline]
pub(crate) fn discard(sock: &TcpStream, len: usize) -> io::Result<usize> {
    let mut token = [0u8; 64];
    // SAFETY: with MSG_TRUNC the kernel writes nothing, so `len` may exceed the token buffer,
    // which is live for the call either way.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            token.as_mut_ptr().cast(),
            len,
            libc::MSG_TRUNC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Sends to the controller; a gone controller just means nobody is listening any more.
pub(crate) fn tell(tx: &UnboundedSender<Report>, r: Report) {
    let _ = tx.send(r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrans_segs_is_read_from_the_tcp_lines() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RetransSegs InErrs\n\
                    Tcp: 1 42 0\nUdp: InDatagrams\nUdp: 7\n";
        assert_eq!(retrans_segs(text), Some(42));
        assert_eq!(retrans_segs("Tcp: RtoAlgorithm\nTcp: 1\n"), None);
        assert_eq!(retrans_segs(""), None);
    }

    #[test]
    fn the_gate_opens_first_and_on_a_moving_counter() {
        let mut g = RetransGate::default();
        // The first look has nothing to compare with: read every flow.
        assert!(g.moved());
        if g.last.is_none() {
            return; // no /proc here: every look reads every flow, checked by the line above
        }
        g.last = g.last.map(|n| n.wrapping_sub(1));
        assert!(g.moved(), "a counter that moved must open the gate");
    }

    #[test]
    fn a_client_starts_nothing_due_after_the_end_and_drains_only_what_was_due_before() {
        let c = Control::default();
        assert!(
            c.may_start(u64::MAX - 1),
            "no end yet: a byte count, or not set"
        );
        c.end_at(1_000);
        assert!(c.may_start(999) && !c.may_start(1_000));
        c.end_at(2_000);
        assert!(!c.may_start(1_500), "the end only moves earlier");
        c.state.store(DRAINING, Ordering::Relaxed);
        assert!(c.may_start(999), "late, but due inside the window");
        assert!(!c.may_start(1_000));
        c.end_at(500);
        assert!(!c.may_start(999), "cut short at 500");
        c.state.store(STOPPED, Ordering::Relaxed);
        assert!(!c.may_start(0));
        let d = Control::default();
        d.state.store(DRAINING, Ordering::Relaxed);
        assert!(
            !d.may_start(0),
            "draining without a window end starts nothing"
        );
    }
}
