//! UDP client workers (`--rr -u`): send requests, match responses by sequence number, time
//! them, and give up on the ones the network lost.
//!
//! A transaction starts when its request is sent (paced: at its intended start, from which
//! its latency is measured, as for TCP) and ends when its response arrives. A request still
//! unanswered `timeout` after it was sent is **lost**: it leaves the flow's in-flight set,
//! freeing its slot for the next sequence number, so loss costs a flow one timeout and never
//! hangs it. A response that arrives after that is **late** (remembered for the last
//! [`LATE_MEMORY`] lost requests of a flow), not a latency sample. Responses to requests
//! already answered are duplicates; anything else (wrong length or token, a sequence number
//! never sent) is ignored. A flow that hears nothing at all for the stall limit has failed.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::super::driver::{self, Core, FlowBase, FlowIo, Timing};
use super::super::poll::{Event, Interest, worker_poll};
use super::super::{Control, FlowSnapshot, RUNNING, Report, UdpCounts, Worker};
use super::{Arrival, UdpFlow, recv_header, send};
use crate::engine::udp::wire::{HEADER_LEN, Header};
use crate::latency::as_ns;

/// How a client worker runs its flows.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) request_len: usize,
    pub(crate) response_len: usize,
    /// A flow stalls when it has had no response at all for `stall_timeout`: at least twice
    /// the timeout, so a slow timeout is not mistaken for a dead server.
    pub(crate) timing: Timing,
    /// A request unanswered this long after it was sent is lost (`--rr-timeout`).
    pub(crate) timeout: Duration,
}

/// Lost requests a flow remembers, to tell a late response from a duplicate: 4 KiB a flow at
/// most under any loss (issue 22: at most 8 KB of memory a flow). A response to an older lost
/// request counts as a duplicate.
pub(crate) const LATE_MEMORY: usize = 512;

/// How long a lone ping-pong flow's blocking `recv` waits at most before looking at its
/// controls (see the TCP client's `SLICE`).
const SLICE: Duration = Duration::from_millis(500);

/// Starts a client worker over `flows`; `flows_total` spreads paced flows over the period.
pub(crate) fn spawn(
    index: usize,
    plan: Plan,
    flows: Vec<UdpFlow>,
    control: Arc<Control>,
    tx: UnboundedSender<Report>,
    flows_total: usize,
) -> io::Result<Worker> {
    let (poll, waker) = worker_poll(flows.len(), false)?;
    let mut state = Vec::with_capacity(flows.len());
    for (slot, f) in flows.into_iter().enumerate() {
        f.sock.set_nonblocking(false)?;
        poll.add(f.sock.as_raw_fd(), slot as u64, Interest::Read)?;
        let phase = plan.timing.phase(f.id, flows_total);
        state.push(Flow::new(f, phase, plan.timing.per_flow));
    }
    let name = format!("xb-rr-udp-client-{index}");
    let timing = plan.timing.clone();
    let io = UdpClient::new(plan, state);
    driver::spawn(index, name, &timing, (poll, waker), control, tx, io)
}

/// A request in flight.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    seq: u64,
    /// Where its latency starts (its intended start when paced), ns since base.
    start: u64,
    /// When it was sent, ns since base: its timeout runs from here.
    sent: u64,
}

struct Flow {
    base: FlowBase,
    udp: UdpFlow,
    next_seq: u64,
    /// In flight, by sequence number (sent in order).
    inflight: VecDeque<Outstanding>,
    /// The latest lost sequence numbers, ascending.
    timed_out: VecDeque<u64>,
    /// The socket's send buffer was full: waiting to be writable.
    blocked: bool,
    /// When the oldest request sent since the last response left, ns.
    unanswered_since: Option<u64>,
    counts: UdpCounts,
}

impl Flow {
    fn new(udp: UdpFlow, phase: u64, per_flow: bool) -> Self {
        Flow {
            base: FlowBase::new(udp.id, phase, per_flow),
            udp,
            next_seq: 0,
            inflight: VecDeque::new(),
            timed_out: VecDeque::new(),
            blocked: false,
            unanswered_since: None,
            counts: UdpCounts::default(),
        }
    }

    fn snapshot(&mut self) -> FlowSnapshot {
        FlowSnapshot {
            udp: Some(std::mem::take(&mut self.counts)),
            ..self.base.snapshot()
        }
    }

    /// Takes a response to `seq` that arrived at `now`: its latency, ns, if it answers a
    /// request in flight (the caller records it for the worker).
    fn response(&mut self, seq: u64, now: u64, from_send: bool) -> Option<u64> {
        if let Some(pos) = self.inflight.iter().position(|o| o.seq == seq) {
            let o = self.inflight.remove(pos).unwrap_or(Outstanding {
                seq,
                start: now,
                sent: now,
            });
            let ns = now.saturating_sub(if from_send { o.sent } else { o.start });
            self.base.count(ns);
            self.unanswered_since = self.inflight.front().map(|o| o.sent);
            return Some(ns);
        }
        if let Ok(pos) = self.timed_out.binary_search(&seq) {
            self.timed_out.remove(pos);
            self.counts.late += 1;
        } else if seq < self.next_seq {
            self.counts.duplicates += 1;
        } else {
            self.counts.ignored += 1;
        }
        None
    }

    /// Declares lost what has waited `timeout_ns`; returns how many, and the next deadline.
    fn expire(&mut self, now: u64, timeout_ns: u64) -> (u64, Option<u64>) {
        let mut lost = 0;
        while let Some(o) = self.inflight.front().copied() {
            if o.sent.saturating_add(timeout_ns) > now {
                break;
            }
            self.inflight.pop_front();
            // Room first, so the queue never grows past LATE_MEMORY to take one more.
            if self.timed_out.len() >= LATE_MEMORY {
                self.timed_out.pop_front();
            }
            self.timed_out.push_back(o.seq);
            lost += 1;
        }
        self.counts.lost += lost;
        let next = self
            .inflight
            .front()
            .map(|o| o.sent.saturating_add(timeout_ns));
        (lost, next)
    }
}

/// UDP's side of a client worker ([`FlowIo`]): a datagram each way per transaction, and
/// request timeouts as its own timer.
struct UdpClient {
    plan: Plan,
    flows: Vec<Flow>,
    /// A request: header, then zeros.
    request: Vec<u8>,
    next_timeout_check: u64,
    /// `MSG_DONTWAIT` in the epoll loop, 0 for the blocking ping-pong.
    dontwait: i32,
    /// The blocking ping-pong's receive timeout in force.
    armed: Option<Duration>,
}

impl FlowIo for UdpClient {
    #[inline]
    fn len(&self) -> usize {
        self.flows.len()
    }

    #[inline]
    fn base(&self, i: usize) -> &FlowBase {
        &self.flows[i].base
    }

    #[inline]
    fn base_mut(&mut self, i: usize) -> &mut FlowBase {
        &mut self.flows[i].base
    }

    /// Sends every request flow `i` may send now.
    fn start_due(&mut self, core: &mut Core, i: usize, now: u64) {
        if self.flows[i].base.failed || self.flows[i].blocked {
            return;
        }
        while self.flows[i].inflight.len() < core.burst {
            let f = &mut self.flows[i];
            let Some(start) = core.next_start(&mut f.base, now) else {
                break;
            };
            let seq = f.next_seq;
            Header {
                token: f.udp.token,
                seq,
                sent_ns: now & !(1 << 63),
                warm_up: false,
            }
            .write(&mut self.request[..HEADER_LEN]);
            match send(&f.udp.sock, &self.request, self.dontwait) {
                Ok(true) => {
                    f.next_seq += 1;
                    f.counts.requests += 1;
                    f.unanswered_since.get_or_insert(now);
                    f.inflight.push_back(Outstanding {
                        seq,
                        start,
                        sent: now,
                    });
                }
                Ok(false) => {
                    // The slot is kept: the same start goes out once the socket has room.
                    if core.period_ns.is_some() {
                        f.base.next_due = start;
                    }
                    f.blocked = true;
                    let fd = f.udp.sock.as_raw_fd();
                    if let Err(e) = core.poll.modify(fd, i as u64, Interest::ReadWrite) {
                        self.fail(core, i, e.to_string());
                    }
                    return;
                }
                Err(e) => {
                    let why = refused_or(&e, "sending a request");
                    self.fail(core, i, why);
                    return;
                }
            }
        }
    }

    #[inline]
    fn has_room(&self, core: &Core, i: usize) -> bool {
        let f = &self.flows[i];
        f.inflight.len() < core.burst && !f.blocked
    }

    #[inline]
    fn on_event(&mut self, core: &mut Core, i: usize, ev: &Event, now: u64) {
        if ev.writable && self.flows[i].blocked {
            self.flows[i].blocked = false;
            let fd = self.flows[i].udp.sock.as_raw_fd();
            if let Err(e) = core.poll.modify(fd, i as u64, Interest::Read) {
                self.fail(core, i, e.to_string());
                return;
            }
            self.start_due(core, i, now);
        }
        if ev.readable || ev.closed {
            self.receive(core, i, Some(now));
        }
    }

    fn all_idle(&self) -> bool {
        self.flows
            .iter()
            .all(|f| f.base.failed || f.inflight.is_empty())
    }

    fn ping_pong(&self) -> bool {
        true
    }

    /// A blocking `send` and a blocking `recv` per transaction, the `recv` waiting at most
    /// until the request's timeout (or [`SLICE`], to look at the controls).
    fn enter_blocking(&mut self) -> bool {
        self.dontwait = 0;
        self.armed = None;
        true
    }

    #[inline]
    fn blocking_step(&mut self, core: &mut Core) -> bool {
        let now = core.now();
        if self.flows[0].inflight.is_empty() {
            self.start_due(core, 0, now);
        }
        let timeout_ns = as_ns(self.plan.timeout);
        let wait = match self.flows[0].inflight.front() {
            Some(o) => Duration::from_nanos(
                o.sent
                    .saturating_add(timeout_ns)
                    .saturating_sub(now)
                    .max(100_000),
            )
            .min(SLICE),
            None => SLICE.min(Duration::from_millis(10)),
        };
        // Re-armed only when the timeout in force would sleep past the request's deadline
        // (by more than a millisecond) or is less than half the wait: a `setsockopt` per
        // transaction would cost a third system call.
        let stale = self
            .armed
            .is_none_or(|c: Duration| c > wait + Duration::from_millis(1) || c < wait / 2);
        if stale {
            if self.flows[0].udp.sock.set_read_timeout(Some(wait)).is_err() {
                return false;
            }
            self.armed = Some(wait);
        }
        self.receive(core, 0, None);
        true
    }

    fn leave_blocking(&mut self) {
        let _ = self.flows[0].udp.sock.set_read_timeout(None);
        self.dontwait = libc::MSG_DONTWAIT;
    }

    #[inline]
    fn next_timer(&self) -> u64 {
        self.next_timeout_check
    }

    /// Declares lost every request past its timeout and lets its flow go on.
    fn on_timer(&mut self, core: &mut Core, now: u64) {
        let timeout_ns = as_ns(self.plan.timeout);
        let mut next = now.saturating_add(timeout_ns);
        for i in 0..self.flows.len() {
            if self.flows[i].base.failed {
                continue;
            }
            let (lost, deadline) = self.flows[i].expire(now, timeout_ns);
            if let Some(d) = deadline {
                next = next.min(d);
            }
            if lost > 0 {
                if core.period_ns.is_some() {
                    core.schedule(i, &mut self.flows[i].base);
                } else if self.dontwait != 0 {
                    self.start_due(core, i, now);
                }
            }
        }
        self.next_timeout_check = next;
    }

    fn check_stalls(&mut self, core: &mut Core, now: u64) {
        let limit = as_ns(self.plan.timing.stall_timeout);
        for i in 0..self.flows.len() {
            let f = &self.flows[i];
            let stalled = f
                .unanswered_since
                .is_some_and(|t| now.saturating_sub(t) > limit);
            if f.base.failed || !stalled {
                continue;
            }
            let why = format!(
                "no response for {:.1} s — has the server stopped answering, or is something \
                 between client and server dropping UDP?",
                self.plan.timing.stall_timeout.as_secs_f64()
            );
            self.fail(core, i, why);
        }
    }

    fn snapshots(&mut self) -> Vec<FlowSnapshot> {
        self.flows.iter_mut().map(Flow::snapshot).collect()
    }
}

impl UdpClient {
    fn new(plan: Plan, flows: Vec<Flow>) -> Self {
        let mut request = vec![0u8; plan.request_len.max(HEADER_LEN)];
        request.truncate(plan.request_len);
        UdpClient {
            plan,
            flows,
            request,
            next_timeout_check: 0,
            dontwait: libc::MSG_DONTWAIT,
            armed: None,
        }
    }

    /// Reads what arrived on flow `i`: everything waiting in the epoll loop, one datagram
    /// (or the receive timeout) in the blocking one. `now` is when the first one was known to
    /// have arrived (the epoll wake-up), or `None` to read the clock after the `recv`; later
    /// ones may have arrived since, and read the clock.
    fn receive(&mut self, core: &mut Core, i: usize, mut now: Option<u64>) {
        let want = self.plan.response_len;
        loop {
            let f = &mut self.flows[i];
            let arrival = match recv_header(&f.udp.sock, self.dontwait) {
                Ok(a) => a,
                Err(e) => {
                    if core.control.state() == RUNNING {
                        let why = refused_or(&e, "receiving a response");
                        self.fail(core, i, why);
                    }
                    return;
                }
            };
            let (len, header) = match arrival {
                Arrival::Nothing => return,
                Arrival::Handshake if self.dontwait == 0 => return,
                Arrival::Handshake => continue,
                Arrival::Datagram { len, header } => (len, header),
            };
            let now = now.take().unwrap_or_else(|| core.now());
            let f = &mut self.flows[i];
            match header.filter(|h| len == want && h.token == f.udp.token) {
                Some(h) => {
                    if let Some(ns) = f.response(h.seq, now, self.plan.timing.from_send) {
                        core.rec.record(ns);
                        if core.period_ns.is_some() {
                            core.schedule(i, &mut f.base);
                        } else if self.dontwait != 0 {
                            let now = core.now();
                            self.start_due(core, i, now);
                        }
                    }
                }
                None => f.counts.ignored += 1,
            }
            if self.dontwait == 0 {
                return;
            }
        }
    }

    /// Ends flow `i` with `error`: its socket out of the loop, its requests abandoned.
    fn fail(&mut self, core: &mut Core, i: usize, error: String) {
        let f = &mut self.flows[i];
        f.inflight.clear();
        core.poll.delete(f.udp.sock.as_raw_fd());
        core.fail(&mut f.base, error);
    }
}

/// A socket error in words: a refused datagram means nothing listens at the server's port.
fn refused_or(e: &io::Error, during: &str) -> String {
    if e.raw_os_error() == Some(libc::ECONNREFUSED) {
        "the server's port refused a datagram (ICMP port unreachable): the server's socket \
         for this flow is gone"
            .into()
    } else {
        format!("{during} failed: {e}")
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::time::Instant;

    use super::*;
    use crate::engine::rr::{DRAINING, Workers};
    use crate::latency::FlowSketch;

    const TOKEN: u64 = 0x5eed_f00d_0123_4567;

    /// A lossy server on its own thread: answers every request except every `k`-th (seq
    /// k-1, 2k-1, …), which it keeps; returns the dropped sequence numbers when told to stop
    /// (a datagram of one byte).
    ///
    /// The server is the instrument, not what is measured: it runs `SCHED_FIFO` where it may
    /// (as root, as in CI), so busy processes on a loaded machine do not hold its answers past
    /// the flows' 20 ms timeout (as an ordinary thread, 8 of 600 were: 68 lost of 60 dropped).
    fn lossy_server(sock: UdpSocket, k: u64, resp: usize) -> std::thread::JoinHandle<Vec<u64>> {
        std::thread::spawn(move || {
            let param = libc::sched_param { sched_priority: 10 };
            // SAFETY: pid 0 is the calling thread; `param` is valid for the call. Failing
            // (not root) leaves an ordinary thread.
            let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
            let mut dropped = Vec::new();
            let mut buf = vec![0u8; 65_536];
            let mut out = vec![0u8; resp];
            loop {
                let (n, from) = sock.recv_from(&mut buf).unwrap();
                if n == 1 {
                    return dropped;
                }
                let h = Header::read(&buf[..n]).unwrap();
                if h.seq % k == k - 1 {
                    dropped.push(h.seq);
                    continue;
                }
                h.write(&mut out);
                sock.send_to(&out, from).unwrap();
            }
        })
    }

    /// A flow on a socket of its own, unpaced, with a sketch when `per_flow`.
    fn lone_flow(per_flow: bool) -> Flow {
        let udp = UdpFlow {
            id: 0,
            sock: UdpSocket::bind("127.0.0.1:0").unwrap(),
            token: TOKEN,
        };
        Flow::new(udp, 0, per_flow)
    }

    /// Issue 16's loss rule: a lost response costs its flow one timeout, is counted as lost
    /// exactly, and a response that comes after the timeout is late, not a sample.
    #[test]
    fn every_dropped_response_is_lost_exactly_and_the_flow_goes_on() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let server_addr = server.local_addr().unwrap();
        let talker = server.try_clone().unwrap();
        let lossy = lossy_server(server, 10, 40);
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(server_addr).unwrap();
        let client_addr = client.local_addr().unwrap();
        let plan = Plan {
            request_len: 32,
            response_len: 40,
            timing: Timing {
                burst: 4,
                period: None,
                base: Instant::now(),
                stall_timeout: Duration::from_secs(5),
                per_flow: false,
                from_send: false,
            },
            timeout: Duration::from_millis(20),
        };
        let control = Arc::new(Control::default());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let flow = UdpFlow {
            id: 0,
            sock: client,
            token: TOKEN,
        };
        let w = spawn(0, plan, vec![flow], Arc::clone(&control), tx, 1).unwrap();
        let workers = Workers::new(Arc::clone(&control), vec![w]);
        std::thread::sleep(Duration::from_millis(400));
        // A stray datagram and a response with another token: ignored.
        talker.send_to(&[9; 40], client_addr).unwrap();
        let mut forged = [0u8; 40];
        Header {
            token: TOKEN ^ 1,
            seq: 0,
            sent_ns: 0,
            warm_up: false,
        }
        .write(&mut forged);
        talker.send_to(&forged, client_addr).unwrap();
        workers.set_state(DRAINING);
        let started = Instant::now();
        let mut snaps = Vec::new();
        let done = loop {
            match rx.blocking_recv() {
                Some(Report::Done { flows, .. }) => {
                    snaps.extend(flows);
                    break true;
                }
                Some(Report::Snapshot { flows, .. }) => snaps.extend(flows),
                Some(Report::Failed { error, .. }) => panic!("the flow failed: {error}"),
                None => break false,
            }
        };
        assert!(done, "the worker ended without its last figures");
        // A lost request ends by its 20 ms timeout, not by the 5 s stall check (which would
        // fail the flow above) nor never. Not a tighter bound: on a loaded machine the worker
        // and this thread wait for a core (820 ms at load 17, once in 32 runs).
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "draining waited {:?}: a lost request must end by its timeout",
            started.elapsed()
        );
        talker.send_to(&[0], server_addr).unwrap();
        let dropped = lossy.join().unwrap();
        let mut total = UdpCounts::default();
        let mut transactions = 0;
        for s in &snaps {
            total += s.udp.unwrap();
            transactions += s.transactions;
        }
        assert!(dropped.len() >= 5, "too few requests to tell: {dropped:?}");
        // Every dropped response is lost; any other loss is an answer that came after the
        // timeout (the kernel's softirq work can still wait behind busy processes), and was
        // counted late when it came.
        assert_eq!(
            total.lost,
            dropped.len() as u64 + total.late,
            "{total:?}, {} dropped",
            dropped.len()
        );
        assert_eq!(total.requests, transactions + total.lost, "{total:?}");
        assert_eq!(total.ignored, 2, "{total:?}");
        assert_eq!(total.duplicates, 0, "{total:?}");
        drop(workers);
    }

    /// A response that arrives after its request timed out is late, and one answered twice is
    /// a duplicate; neither is a latency sample.
    /// A paced request sent late (the worker's timer fired 300 ns after it was due) is timed
    /// from when it was due, unless the test times from the send (latency probes).
    #[test]
    fn latency_runs_from_the_due_time_or_from_the_send() {
        for (from_send, want) in [(false, 1_000), (true, 700)] {
            let mut f = lone_flow(true);
            f.inflight.push_back(Outstanding {
                seq: 0,
                start: 1_000,
                sent: 1_300,
            });
            f.next_seq = 1;
            assert_eq!(f.response(0, 2_000, from_send), Some(want), "{from_send}");
        }
    }

    #[test]
    fn late_and_duplicate_responses_are_counted_apart() {
        let mut f = lone_flow(true);
        for seq in 0..3 {
            f.inflight.push_back(Outstanding {
                seq,
                start: 0,
                sent: seq * 10,
            });
        }
        f.next_seq = 3;
        assert_eq!(f.response(1, 5, false), Some(5));
        assert_eq!(f.expire(25, 20), (1, Some(40)));
        assert_eq!(f.counts.lost, 1);
        assert_eq!(f.response(0, 30, false), None, "late");
        assert_eq!(
            f.response(0, 31, false),
            None,
            "a copy of a late one is a duplicate"
        );
        assert_eq!(f.response(1, 32, false), None, "answered before");
        assert_eq!(f.response(7, 33, false), None, "never sent");
        assert_eq!(f.response(2, 34, false), Some(34));
        assert_eq!(
            (
                f.counts.late,
                f.counts.duplicates,
                f.counts.ignored,
                f.base.transactions
            ),
            (1, 2, 1, 2)
        );
        assert_eq!(f.base.sketch.as_ref().map(FlowSketch::count), Some(2));
    }

    /// A flow losing every request keeps at most LATE_MEMORY of them in mind (issue 22: a
    /// flow's memory is bounded whatever the loss), and still knows the newest as late.
    #[test]
    fn a_flow_losing_everything_remembers_a_bounded_number_of_requests() {
        let mut f = lone_flow(false);
        let n = 4 * LATE_MEMORY as u64 + 3;
        for seq in 0..n {
            f.inflight.push_back(Outstanding {
                seq,
                start: seq,
                sent: seq,
            });
            f.next_seq = seq + 1;
            f.expire(seq + 100, 10);
        }
        f.expire(n + 100, 10);
        assert_eq!(f.counts.lost, n);
        assert_eq!(f.timed_out.len(), LATE_MEMORY);
        assert!(
            f.timed_out.capacity() <= LATE_MEMORY,
            "{}",
            f.timed_out.capacity()
        );
        assert_eq!(f.response(n - 1, n + 200, false), None);
        assert_eq!(f.counts.late, 1);
        assert_eq!(f.response(0, n + 200, false), None);
        assert_eq!(f.counts.duplicates, 1, "forgotten: counted as a duplicate");
    }
}
