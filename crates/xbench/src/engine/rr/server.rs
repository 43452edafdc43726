//! Server workers: answer every complete request with a response, count the transactions.
//!
//! Requests and responses carry no headers: a request is `request_len` bytes, its response
//! `response_len` bytes, both fixed for the test, so the server only counts bytes (and reads
//! them with `MSG_TRUNC`, never copying them). With `--crr` a connection carries one
//! transaction and the server closes it right after the response, so TIME_WAIT lands here
//! rather than on the client's ephemeral ports.
//!
//! The worker's loop is [`serve`]'s; what is TCP's is here ([`TcpServe`]): answering a
//! readable or writable connection, the blocking ping-pong step, taking the `--crr`
//! connections the accept path hands over and closing those past their deadline.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::at_once::Arrived;
use super::poll::{Event, Interest, worker_poll};
use super::serve::{self, Core, ServeIo, Step};
use super::{Control, FlowSnapshot, Report, RetransGate, STOPPED, TcpTrack, Worker, discard};
use crate::engine::cpu::thread_cpu;
use crate::report::CpuUsage;

/// What a server worker answers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) request_len: u64,
    pub(crate) response_len: u64,
    /// `--crr`: one transaction per connection, then close.
    pub(crate) one_per_connection: bool,
    /// The client keeps one transaction in flight per flow (strict ping-pong), so a lone
    /// connection can be served with blocking calls.
    pub(crate) ping_pong: bool,
    /// A `--crr` connection without its whole request after this long is closed: a client
    /// must not hold connections open by sending nothing.
    pub(crate) request_timeout: Duration,
}

/// Starts a server worker over persistent `flows`; `--crr` connections arrive later through
/// the returned worker's channel.
pub(crate) fn spawn(
    index: usize,
    plan: Plan,
    flows: Vec<(u16, Arc<TcpStream>)>,
    all_flows: &[u16],
    control: Arc<Control>,
    tx: UnboundedSender<Report>,
) -> io::Result<Worker> {
    let mut core = Core::new(index, worker_poll(flows.len(), true)?, control, tx);
    let (conn_tx, conn_rx) = std::sync::mpsc::channel();
    let mut io = TcpServe {
        plan,
        conns: Vec::new(),
        free: Vec::new(),
        counts: all_flows.iter().map(|&f| (f, Counts::default())).collect(),
        incoming: conn_rx,
        zeros: vec![0u8; (plan.response_len as usize).clamp(1, CHUNK)],
        at_once_cpu: CpuUsage::default(),
        gate: RetransGate::default(),
    };
    for (id, s) in flows {
        io.add(&mut core, id, s, Arrived::default())?;
    }
    serve::spawn(
        format!("xb-rr-server-{index}"),
        core,
        io,
        plan.one_per_connection.then_some(conn_tx),
    )
}

/// How many bytes one read asks for (more when a request is larger), and the most one send
/// hands the kernel.
const CHUNK: usize = 256 * 1024;
/// How often a `--crr` worker looks for connections past their deadline.
const SWEEP: Duration = Duration::from_secs(1);
/// How long a blocking ping-pong connection waits in one call before looking at its controls.
/// Long on purpose: a busy flow returns from every call at once anyway, and only an idle one
/// waits the whole slice before it sees a stop or an interval boundary. A 10 ms slice made
/// the kernel re-arm a timer on every call and cost the tail: p99 306 µs against 146 µs for
/// 500 ms (sockperf: 246 µs) in `benches/compare`, ten interleaved rounds each.
const SLICE: Duration = Duration::from_millis(500);

/// One flow's figures since the last snapshot (`srtt_us` is kept across snapshots).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    transactions: u64,
    connections: u64,
    retransmits: u64,
    srtt_us: Option<u32>,
}

/// One connection of a flow, and where its exchange stands.
#[derive(Debug)]
struct ServerConn {
    flow: u16,
    /// Shared only with the send-rate governor, which holds it weakly to pace it.
    sock: Arc<TcpStream>,
    /// Bytes of the current request received so far.
    rx: u64,
    /// Response bytes owed.
    owed: u64,
    /// `--crr`: its one request is in (counted, here or by the accept path).
    asked: bool,
    want_write: bool,
    answered: bool,
    /// Added to the worker's epoll set (a `--crr` connection answered on arrival never is).
    registered: bool,
    tcp: TcpTrack,
    /// When a `--crr` connection must have sent its request by.
    deadline: Option<Instant>,
}

/// TCP's side of a server worker: its connections, and what answering one is.
struct TcpServe {
    plan: Plan,
    /// Connections by token; `None` slots are free (listed in `free`).
    conns: Vec<Option<ServerConn>>,
    free: Vec<usize>,
    /// Per flow id, since the last snapshot.
    counts: Vec<(u16, Counts)>,
    incoming: Receiver<(u16, TcpStream, Arrived)>,
    /// What responses are sent from: the bytes do not matter, only how many.
    zeros: Vec<u8>,
    /// CPU time of the `--crr` answers given in the accept path (first worker only).
    at_once_cpu: CpuUsage,
    /// Whether the connections' retransmit counters need reading at a snapshot.
    gate: RetransGate,
}

impl ServeIo for TcpServe {
    const LOOP_FAILED: &'static str = "server event loop failed";

    /// A lone persistent ping-pong connection: `--crr` connections come and go, and more than
    /// one request in flight would make a blocking read wait while an answer is owed.
    fn blocking(&self) -> bool {
        self.plan.ping_pong && !self.plan.one_per_connection && self.conns.len() == 1
    }

    /// Blocking `recv`/`send`, two system calls per transaction instead of three, each
    /// waiting a [`SLICE`] at most so interval boundaries and stops are seen.
    fn enter_blocking(&mut self) -> bool {
        let Some(c) = self.conns.first().and_then(Option::as_ref) else {
            return false;
        };
        c.sock.set_nonblocking(false).is_ok()
            && c.sock.set_read_timeout(Some(SLICE)).is_ok()
            && c.sock.set_write_timeout(Some(SLICE)).is_ok()
    }

    #[inline]
    fn blocking_step(&mut self, core: &mut Core) -> Step {
        let slot = 0;
        // One read a pass: a blocking one more, after a full buffer, would wait out the
        // slice before answering a request of exactly that size.
        let len = CHUNK.max(self.plan.request_len as usize);
        if let Err(e) = self
            .read_once(core, slot, len)
            .and_then(|_| self.flush(core, slot))
        {
            self.close(core, slot, Some(e));
        }
        if self.conns[slot].is_none() {
            Step::Ended
        } else {
            Step::Served
        }
    }

    fn leave_blocking(&mut self) {
        if let Some(c) = self.conns.first().and_then(Option::as_ref) {
            let _ = c.sock.set_read_timeout(None);
            let _ = c.sock.set_write_timeout(None);
            let _ = c.sock.set_nonblocking(true);
        }
    }

    /// --crr connections have deadlines; nothing else needs a timer.
    #[inline]
    fn deadline(&self) -> Option<Instant> {
        self.plan.one_per_connection.then(|| Instant::now() + SWEEP)
    }

    #[inline]
    fn on_event(&mut self, core: &mut Core, ev: &Event) {
        let slot = ev.token as usize;
        if let Err(e) = self.answer(core, slot, ev.readable || ev.closed, ev.writable) {
            self.close(core, slot, Some(e));
        } else if ev.closed
            && let Err(e) = self.read_to_end(core, slot)
        {
            self.close(core, slot, Some(e));
        }
    }

    #[inline]
    fn take_new(&mut self, core: &mut Core) {
        while let Ok((flow, s, arrived)) = self.incoming.try_recv() {
            if let Err(e) = self.add(core, flow, Arc::new(s), arrived) {
                core.failed(
                    Some(flow),
                    format!("server could not take a connection: {e}"),
                );
            }
        }
    }

    #[inline]
    fn sweep(&mut self, core: &mut Core) {
        if self.plan.one_per_connection {
            self.close_overdue(core);
        }
    }

    fn snapshots(&mut self, core: &Core) -> Vec<FlowSnapshot> {
        if core.worker() == 0 {
            // The first worker reports the connections answered in the accept path as its own.
            let (taken, cpu) = core.control.at_once.take();
            self.at_once_cpu += cpu;
            for (flow, t) in taken {
                let c = self.count(flow);
                c.connections += t.connections;
                c.transactions += t.transactions;
                c.retransmits += t.retransmits;
                c.srtt_us = t.srtt_us.or(c.srtt_us);
            }
        }
        // Only retransmits are wanted of a connection here (its RTT is the client's to report),
        // and where none can have happened every count is zero without asking.
        let mut samples = Vec::new();
        if self.gate.moved() {
            for c in self.conns.iter_mut().flatten() {
                samples.push((c.flow, c.tcp.sample(&c.sock)));
            }
        }
        for (flow, (r, srtt)) in samples {
            let c = self.count(flow);
            c.retransmits += r;
            c.srtt_us = srtt.or(c.srtt_us);
        }
        self.counts
            .iter_mut()
            .map(|(flow, c)| {
                let taken = std::mem::take(c);
                c.srtt_us = taken.srtt_us;
                FlowSnapshot {
                    flow: *flow,
                    transactions: taken.transactions,
                    sketch: None,
                    retransmits: taken.retransmits,
                    srtt_us: taken.srtt_us,
                    connections: taken.connections,
                    udp: None,
                    failures: Default::default(),
                }
            })
            .collect()
    }

    /// The first worker's is charged for the answers the accept path gave (see `snapshots`).
    fn cpu(&self, core: &Core) -> CpuUsage {
        let mut cpu = thread_cpu();
        if core.worker() == 0 {
            cpu += self.at_once_cpu;
        }
        cpu
    }
}

impl TcpServe {
    /// Takes a connection on which the accept path has done `arrived` already.
    fn add(
        &mut self,
        core: &mut Core,
        flow: u16,
        sock: Arc<TcpStream>,
        arrived: Arrived,
    ) -> io::Result<()> {
        let crr = self.plan.one_per_connection;
        // A --crr connection comes from the server's accept path non-blocking already (accept4
        // with SOCK_NONBLOCK, or a runtime socket), and needs no TCP_NODELAY: its one response
        // is followed by the FIN, and shutdown pushes out whatever Nagle would hold back. Two
        // system calls fewer per transaction.
        if !crr {
            sock.set_nonblocking(true)?;
            let _ = sock.set_nodelay(true);
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let fd = sock.as_raw_fd();
        self.conns[slot] = Some(ServerConn {
            flow,
            sock,
            rx: arrived.rx,
            owed: arrived.owed,
            asked: arrived.owed > 0,
            want_write: false,
            answered: false,
            registered: false,
            tcp: TcpTrack::default(),
            deadline: crr.then(|| Instant::now() + self.plan.request_timeout),
        });
        if crr {
            self.count(flow).connections += 1;
            // Its request came in the greeting's segment, so it is (nearly always) here
            // already: answer and close without ever adding the connection to epoll.
            if let Err(e) = self.answer(core, slot, true, false) {
                self.close(core, slot, Some(e));
            }
        }
        if let Some(c) = self.conns[slot].as_mut() {
            let interest = if c.want_write {
                Interest::ReadWrite
            } else {
                Interest::Read
            };
            c.registered = true;
            if let Err(e) = core.poll.add(fd, slot as u64, interest) {
                self.close(core, slot, None);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Flow `flow`'s counts since the last snapshot.
    fn count(&mut self, flow: u16) -> &mut Counts {
        // Flow ids are dense from 0, so the position is the id; a hostile id out of range was
        // refused before the connection got here, but fall back to a search anyway.
        let i = usize::from(flow);
        if i < self.counts.len() && self.counts[i].0 == flow {
            return &mut self.counts[i].1;
        }
        match self.counts.iter().position(|(f, _)| *f == flow) {
            Some(p) => &mut self.counts[p].1,
            None => {
                self.counts.push((flow, Counts::default()));
                let last = self.counts.len() - 1;
                &mut self.counts[last].1
            }
        }
    }

    /// Reads what `slot` has (when `readable`) and sends what it is owed (when either).
    fn answer(
        &mut self,
        core: &mut Core,
        slot: usize,
        readable: bool,
        writable: bool,
    ) -> Result<(), String> {
        if slot >= self.conns.len() || self.conns[slot].is_none() {
            return Ok(());
        }
        if readable {
            self.read(core, slot)?;
        }
        if (writable || readable) && self.conns.get(slot).is_some_and(|c| c.is_some()) {
            self.flush(core, slot)?;
        }
        Ok(())
    }

    /// After a hang-up, which the edge-triggered loop reports once: reads whatever came with it
    /// and then the end, so the connection is closed now rather than left registered.
    fn read_to_end(&mut self, core: &mut Core, slot: usize) -> Result<(), String> {
        while self.conns.get(slot).is_some_and(Option::is_some) {
            let Some(n) = self.read(core, slot)? else {
                break; // nothing more, and no end yet: a half-close is reported again
            };
            if n == 0 {
                break;
            }
        }
        self.flush(core, slot)
    }

    /// Reads what arrived on `slot` until the socket is empty (the edge-triggered loop hears
    /// of it again only when more arrives). Returns the bytes of the last read, `Some(0)` at
    /// the end of the connection, `None` when there was nothing to read.
    fn read(&mut self, core: &mut Core, slot: usize) -> Result<Option<usize>, String> {
        let len = CHUNK.max(self.plan.request_len as usize);
        loop {
            let n = self.read_once(core, slot, len)?;
            // A read shorter than asked for emptied the socket.
            if n != Some(len) {
                return Ok(n);
            }
        }
    }

    /// One read of up to `len` bytes on `slot`, counting the requests it completes; returns as
    /// [`read`](Self::read) does, with `Some(len)` for an interrupted read.
    fn read_once(
        &mut self,
        core: &mut Core,
        slot: usize,
        len: usize,
    ) -> Result<Option<usize>, String> {
        let (req, resp) = (self.plan.request_len, self.plan.response_len);
        let Some(c) = self.conns[slot].as_mut() else {
            return Ok(Some(0));
        };
        let n = match discard(&c.sock, len) {
            Ok(n) => n,
            Err(e) => {
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(None),
                    // Nothing read: report a full read, so `read` tries again.
                    io::ErrorKind::Interrupted => Ok(Some(len)),
                    io::ErrorKind::ConnectionReset => {
                        self.close(core, slot, None);
                        Ok(Some(0))
                    }
                    _ => Err(e.to_string()),
                };
            }
        };
        if n == 0 {
            // The client is done with this connection (end of test, or of its --crr exchange).
            self.close(core, slot, None);
            return Ok(Some(0));
        }
        c.rx += n as u64;
        core.control.activity.fetch_add(1, Ordering::Relaxed);
        let complete = c.rx / req;
        c.rx %= req;
        if complete > 0 {
            if self.plan.one_per_connection && (complete > 1 || c.asked) {
                return Err("a --crr connection sent more than one request".into());
            }
            c.asked = true;
            c.owed += complete * resp;
            if let Some(b) = &core.control.send_budget {
                b.charge(complete * b.tcp_transaction(req, self.plan.one_per_connection));
            }
            let flow = c.flow;
            self.count(flow).transactions += complete;
        }
        Ok(Some(n))
    }

    /// Sends what `slot` is owed until it is paid or the socket is full (then waits to hear
    /// it is writable); closes an answered `--crr` connection.
    fn flush(&mut self, core: &mut Core, slot: usize) -> Result<(), String> {
        let Some(fd) = self.conns[slot].as_ref().map(|c| c.sock.as_raw_fd()) else {
            return Ok(());
        };
        let mut blocked = false;
        while self.conns[slot].as_ref().is_some_and(|c| c.owed > 0) {
            if !core.paced(self) {
                return Ok(()); // stopped while waiting for the send budget
            }
            let Some(c) = self.conns[slot].as_mut() else {
                return Ok(());
            };
            let chunk = core
                .control
                .send_budget
                .as_ref()
                .map_or(u64::MAX, |b| b.chunk());
            let n = c.owed.min(self.zeros.len() as u64).min(chunk) as usize;
            // SAFETY: `zeros` is valid for `n` bytes during the call.
            let rc = unsafe { libc::send(fd, self.zeros.as_ptr().cast(), n, libc::MSG_NOSIGNAL) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => {
                        blocked = true;
                        break;
                    }
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e.to_string()),
                }
            }
            c.owed -= rc as u64;
            if c.owed == 0 && self.plan.one_per_connection {
                c.answered = true;
            }
            if let Some(b) = &core.control.send_budget {
                b.charge(b.tcp_payload(rc as u64));
            }
        }
        let Some(c) = self.conns[slot].as_mut() else {
            return Ok(());
        };
        if blocked != c.want_write {
            c.want_write = blocked;
            let interest = if blocked {
                Interest::ReadWrite
            } else {
                Interest::Read
            };
            if c.registered {
                core.poll
                    .modify(fd, slot as u64, interest)
                    .map_err(|e| e.to_string())?;
            }
        }
        if self.plan.one_per_connection && c.answered && c.owed == 0 {
            // Close first (the response is queued ahead of the FIN), so TIME_WAIT stays here.
            let _ = c.sock.shutdown(Shutdown::Write);
            self.close(core, slot, None);
        }
        Ok(())
    }

    /// Closes `--crr` connections that have not sent their request in time.
    fn close_overdue(&mut self, core: &mut Core) {
        let now = Instant::now();
        let overdue: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.as_ref()
                    .is_some_and(|c| !c.answered && c.deadline.is_some_and(|d| now > d))
            })
            .map(|(i, _)| i)
            .collect();
        for slot in overdue {
            self.close(core, slot, None);
        }
    }

    /// Closes `slot`, keeping its last retransmit count; `error` (unless the test has stopped)
    /// fails its flow.
    fn close(&mut self, core: &mut Core, slot: usize, error: Option<String>) {
        let Some(c) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if c.registered {
            core.poll.delete(c.sock.as_raw_fd());
        }
        if self.plan.one_per_connection {
            core.control.live.fetch_sub(1, Ordering::Relaxed);
        }
        let mut tcp = c.tcp;
        let (r, srtt) = tcp.sample(&c.sock);
        let counts = self.count(c.flow);
        counts.retransmits += r;
        counts.srtt_us = srtt.or(counts.srtt_us);
        self.free.push(slot);
        if let Some(e) = error
            && core.control.state() != STOPPED
        {
            core.failed(Some(c.flow), e);
        }
    }
}
