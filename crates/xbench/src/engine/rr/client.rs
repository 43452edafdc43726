//! Client workers: start transactions, time them, record their latency.
//!
//! A transaction starts when its request is queued and ends when the last byte of its response
//! arrives. Unpaced, a flow keeps `burst` transactions in flight back to back. Paced, a flow
//! starts transaction *k* at `start + phase + k·period` and its latency is measured from that
//! intended time, not from when the request actually left: a stall then shows up in every
//! transaction it delayed (the coordinated-omission correction). With `--crr` each transaction
//! opens its own connection, sends the data-connection greeting and the request, reads the
//! response and waits for the server's close, so the client never holds TIME_WAIT sockets and
//! does not run out of ports.
//!
//! Latency goes into one HDR histogram per worker per interval, whatever the number of flows;
//! a flow keeps its counters and, with `--per-flow`, a small [`FlowSketch`](crate::latency::FlowSketch).
//!
//! A `--crr` flow whose connection fails has failed: the path it measures is broken. Under
//! [`KeepOpening`] (`--connections-only`'s openers) a new connection that is refused, times out
//! or is reset before its answer is instead counted by kind ([`Failures`]) and the flow opens
//! the next one after a back-off: there, failures are the measurement.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::sync::mpsc::UnboundedSender;

use super::driver::{self, Core, FlowBase, FlowIo, Timing};
use super::poll::{Event, Interest, worker_poll};
use super::{
    Control, Failures, FlowSnapshot, RUNNING, Report, RetransGate, TcpTrack, Worker, discard,
};
use crate::auth::SessionKey;
use crate::client::flow_plan::FlowPlan;
use crate::config::SocketOptions;
use crate::engine::sockopt;
use crate::proto::{Cookie, DATA_GREETING_LEN, DataHello};

/// How a client worker runs its flows.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) request_len: u64,
    pub(crate) response_len: u64,
    /// A flow stalls when it has a transaction outstanding (or, `--crr`, awaits the server's
    /// close) and no byte has arrived for `stall_timeout`.
    pub(crate) timing: Timing,
    /// `--crr`: where and how to open each transaction's connection.
    pub(crate) connect: Option<Connect>,
    /// `--crr`: a failed connection is counted and the flow goes on (`--connections-only`);
    /// `None`, it ends the flow.
    pub(crate) keep_opening: Option<KeepOpening>,
}

/// How `--connections-only`'s openers treat a new connection that fails: counted by kind, and
/// the flow opens the next after a back-off.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeepOpening {
    /// An attempt without its answer this long after `connect()` has timed out (the client's
    /// `--connect-timeout`); checked every 0.1 s.
    pub(crate) timeout: Duration,
}

/// An unpaced opener's wait after its first failure in a row; each further one doubles it, up
/// to [`BACKOFF_MAX`], and a connection that opens resets it. Short enough that a path
/// refusing a share of connections is measured at nearly the rate it allows; the doubling
/// keeps a path refusing everything from becoming a busy loop of SYNs and resets (at most
/// ten attempts a second per opener once it is reached). A paced opener waits for its next
/// slot instead.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(1);
/// The longest wait between failed attempts of one unpaced opener.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_millis(100);

/// The back-off after `streak` failures in a row (`streak` ≥ 1).
pub(crate) fn backoff(streak: u32) -> Duration {
    let doublings = streak.saturating_sub(1).min(16);
    BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(BACKOFF_MAX)
}

/// How `--crr` opens connections.
#[derive(Debug, Clone)]
pub(crate) struct Connect {
    pub(crate) addr: SocketAddr,
    /// Flow `i`'s connections all come from `sources.source(i)` (`-B a,b,…`, round-robin).
    pub(crate) sources: FlowPlan,
    /// New connections a second the test asks for (`--rate` × flows); unpaced, `None`.
    pub(crate) per_second: Option<f64>,
    pub(crate) socket: SocketOptions,
    /// The test's cookie, for each connection's greeting.
    pub(crate) cookie: Cookie,
    /// Signs each connection's greeting, in a session with a pre-shared key: one MAC per
    /// connection, counted per flow so no two tags are alike.
    pub(crate) key: Option<SessionKey>,
}

/// Starts a client worker over `flows` (`(flow id, connection)`; connections are `None` with
/// `--crr`). `flows_total` spreads paced flows over the period so they do not all fire at once.
pub(crate) fn spawn(
    index: usize,
    plan: Plan,
    flows: Vec<(u16, Option<TcpStream>)>,
    control: Arc<Control>,
    tx: UnboundedSender<Report>,
    flows_total: usize,
) -> io::Result<Worker> {
    let (poll, waker) = worker_poll(flows.len(), true)?;
    let mut state = Vec::with_capacity(flows.len());
    for (slot, (id, sock)) in flows.into_iter().enumerate() {
        if let Some(s) = &sock {
            s.set_nonblocking(true)?;
            let _ = s.set_nodelay(true);
            poll.add(s.as_raw_fd(), slot as u64, Interest::Read)?;
        }
        let phase = plan.timing.phase(id, flows_total);
        state.push(Flow::new(id, sock, phase, plan.timing.per_flow));
    }
    let name = format!("xb-rr-client-{index}");
    let timing = plan.timing.clone();
    let io = TcpClient::new(plan, state);
    driver::spawn(index, name, &timing, (poll, waker), control, tx, io)
}

/// Largest single write; requests bigger than this go out in pieces.
const CHUNK: usize = 256 * 1024;
/// Most flows a worker reads the smoothed RTT of at each snapshot; with more, it reads this
/// many in turn (flows `k·RTT_SAMPLE ..` at the k-th snapshot, wrapping), and the interval's
/// RTT figures are those of the flows read. Each read is a `getsockopt(TCP_INFO)` that takes
/// the socket's lock: at 16,384 flows reading them all each interval cost 13% of the client's
/// CPU. Retransmits stay exact whatever the number (see [`RetransGate`]).
const RTT_SAMPLE: usize = 1024;
/// How long a blocking ping-pong flow waits in one call before looking at its controls.
/// Long on purpose: a busy flow returns from every call at once anyway, and only an idle one
/// waits the whole slice before it sees a stop or an interval boundary. A 10 ms slice made
/// the kernel re-arm a timer on every call and cost the tail: p99 306 µs against 146 µs for
/// 500 ms (sockperf: 246 µs) in `benches/compare`, ten interleaved rounds each.
const SLICE: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conn {
    /// Persistent (`--rr`): the connection lives as long as the test.
    Persistent,
    /// `--crr`, between transactions.
    Idle,
    /// `--crr`, connect in progress.
    Connecting,
    /// `--crr`, sending the request and reading the response.
    Exchanging,
    /// `--crr`, response complete; waiting for the server to close first.
    Closing,
}

#[derive(Debug)]
struct Flow {
    base: FlowBase,
    sock: Option<TcpStream>,
    conn: Conn,
    /// Start times (intended, when paced) of transactions whose request has been queued.
    inflight: VecDeque<u64>,
    /// Bytes queued and not yet written: the greeting (`--crr`) and requests.
    unsent: u64,
    /// Of `unsent`, greeting bytes still to go first.
    hello_left: usize,
    /// The current connection's greeting (`--crr`).
    hello: [u8; DATA_GREETING_LEN],
    /// Connections this flow has opened over the whole test (`--crr`): each greeting's
    /// counter, never reset (`connections` is per interval), so no two tags repeat.
    opened: u64,
    /// Bytes of the current response received so far.
    rx: u64,
    /// Writable interest registered.
    want_write: bool,
    /// Last time a byte arrived or a transaction started from idle, ns.
    last_progress: u64,
    connections: u64,
    retransmits: u64,
    srtt_us: Option<u32>,
    tcp: TcpTrack,
    /// [`KeepOpening`]: new connections that failed since the last snapshot.
    failures: Failures,
    /// [`KeepOpening`]: failures in a row, for the back-off.
    streak: u32,
}

impl Flow {
    fn new(id: u16, sock: Option<TcpStream>, phase: u64, per_flow: bool) -> Self {
        Flow {
            base: FlowBase::new(id, phase, per_flow),
            conn: if sock.is_some() {
                Conn::Persistent
            } else {
                Conn::Idle
            },
            sock,
            inflight: VecDeque::new(),
            unsent: 0,
            hello_left: 0,
            hello: [0; DATA_GREETING_LEN],
            opened: 0,
            rx: 0,
            want_write: false,
            last_progress: 0,
            connections: 0,
            retransmits: 0,
            srtt_us: None,
            tcp: TcpTrack::default(),
            failures: Failures::default(),
            streak: 0,
        }
    }

    /// The flow's figures since the last snapshot. A persistent connection's `TCP_INFO` is read
    /// when it may have retransmitted (`retrans`) or its RTT is wanted (`rtt`); its RTT is
    /// reported only in the latter case, so an interval's RTT figures are never stale values.
    fn snapshot(&mut self, retrans: bool, rtt: bool) -> FlowSnapshot {
        let mut srtt_us = self.srtt_us;
        if let (Conn::Persistent, Some(s)) = (self.conn, &self.sock) {
            if retrans || rtt {
                let (r, srtt) = self.tcp.sample(s);
                self.retransmits += r;
                self.srtt_us = srtt.or(self.srtt_us);
            }
            srtt_us = if rtt { self.srtt_us } else { None };
        }
        FlowSnapshot {
            retransmits: std::mem::take(&mut self.retransmits),
            srtt_us,
            connections: std::mem::take(&mut self.connections),
            failures: std::mem::take(&mut self.failures),
            ..self.base.snapshot()
        }
    }
}

/// TCP's side of a client worker ([`FlowIo`]): persistent connections (`--rr`), or one
/// connection per transaction (`--crr`).
struct TcpClient {
    plan: Plan,
    flows: Vec<Flow>,
    /// What requests are made of; their content does not matter to the server.
    zeros: Vec<u8>,
    /// Whether the flows' retransmit counters need reading at a snapshot.
    gate: RetransGate,
    /// The first flow whose RTT the next snapshot reads (see [`RTT_SAMPLE`]).
    rtt_next: usize,
}

impl FlowIo for TcpClient {
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

    /// Starts every transaction flow `i` may start now.
    fn start_due(&mut self, core: &mut Core, i: usize, now: u64) {
        if self.flows[i].base.failed {
            return;
        }
        let req = self.plan.request_len;
        let from_send = self.plan.timing.from_send;
        let f = &mut self.flows[i];
        let mut started = false;
        match f.conn {
            Conn::Persistent => {
                while f.inflight.len() < core.burst {
                    let Some(t) = core.next_start(&mut f.base, now) else {
                        break;
                    };
                    if f.inflight.is_empty() {
                        f.last_progress = now;
                    }
                    f.inflight.push_back(if from_send { now } else { t });
                    f.unsent += req;
                    started = true;
                }
            }
            Conn::Idle => {
                let Some(t) = core.next_start(&mut f.base, now) else {
                    return;
                };
                f.inflight.push_back(if from_send { now } else { t });
                f.last_progress = now;
                if let Err(e) = self.connect(core, i) {
                    self.stop(core, i, e, now);
                }
                return;
            }
            _ => return,
        }
        if started && let Err(e) = self.flush(core, i) {
            self.stop(core, i, e, now);
        }
    }

    /// A flow at its burst limit (or mid-`--crr` exchange) is rescheduled when a response
    /// frees a slot.
    #[inline]
    fn has_room(&self, core: &Core, i: usize) -> bool {
        let f = &self.flows[i];
        f.conn == Conn::Persistent && f.inflight.len() < core.burst
    }

    #[inline]
    fn on_event(&mut self, core: &mut Core, i: usize, ev: &Event, now: u64) {
        if let Err(e) = self.event(core, i, ev, now) {
            self.stop(core, i, e, now);
        }
    }

    fn all_idle(&self) -> bool {
        self.flows
            .iter()
            .all(|f| f.base.failed || (f.inflight.is_empty() && f.conn != Conn::Closing))
    }

    fn ping_pong(&self) -> bool {
        self.flows[0].conn == Conn::Persistent
    }

    /// Blocking `recv`/`send` that time out every [`SLICE`].
    fn enter_blocking(&mut self) -> bool {
        let Some(s) = self.flows[0].sock.as_ref() else {
            return false;
        };
        s.set_nonblocking(false).is_ok()
            && s.set_read_timeout(Some(SLICE)).is_ok()
            && s.set_write_timeout(Some(SLICE)).is_ok()
    }

    #[inline]
    fn blocking_step(&mut self, core: &mut Core) -> bool {
        let r = if self.flows[0].unsent > 0 {
            self.flush(core, 0)
        } else {
            self.read(core, 0, None)
        };
        if let Err(e) = r {
            self.fail(core, 0, e.into_message());
            return false;
        }
        true
    }

    fn leave_blocking(&mut self) {
        if let Some(s) = self.flows[0].sock.as_ref() {
            let _ = s.set_read_timeout(None);
            let _ = s.set_write_timeout(None);
            let _ = s.set_nonblocking(true);
        }
    }

    fn check_stalls(&mut self, core: &mut Core, now: u64) {
        let stall_timeout = self.plan.timing.stall_timeout;
        let limit = crate::latency::as_ns(stall_timeout);
        // Openers: an attempt not answered in time is a measurement, not a stall.
        let attempt_limit = self
            .plan
            .keep_opening
            .map(|k| crate::latency::as_ns(k.timeout));
        // Under way, unanswered: such a flow's wait is bounded by the attempt's timeout.
        let attempt =
            |c: Conn| attempt_limit.is_some() && matches!(c, Conn::Connecting | Conn::Exchanging);
        let timed_out: Vec<usize> = match attempt_limit {
            None => Vec::new(),
            Some(l) => (self.flows.iter().enumerate())
                .filter(|(_, f)| {
                    !f.base.failed && attempt(f.conn) && now.saturating_sub(f.last_progress) > l
                })
                .map(|(i, _)| i)
                .collect(),
        };
        for i in timed_out {
            self.give_up_attempt(core, i, Failure::TimedOut, now);
        }
        let stalled: Vec<usize> = self
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                let waiting = !f.inflight.is_empty() || f.conn == Conn::Closing;
                !f.base.failed
                    && !attempt(f.conn)
                    && waiting
                    && now.saturating_sub(f.last_progress) > limit
            })
            .map(|(i, _)| i)
            .collect();
        for i in stalled {
            let what = match self.flows[i].conn {
                Conn::Connecting => "the connection did not open",
                Conn::Closing => "the server did not close the connection after its response",
                _ => "no response",
            };
            self.fail(
                core,
                i,
                format!(
                    "{what} for {:.1} s — has the server stopped answering?",
                    stall_timeout.as_secs_f64()
                ),
            );
        }
    }

    /// Every flow's figures since the last snapshot: retransmits read where any may have
    /// happened, RTT from at most [`RTT_SAMPLE`] flows, in turn.
    fn snapshots(&mut self) -> Vec<FlowSnapshot> {
        let retrans = self.gate.moved();
        let n = self.flows.len();
        let first = self.rtt_next;
        self.rtt_next = (first + RTT_SAMPLE) % n.max(1);
        self.flows
            .iter_mut()
            .enumerate()
            .map(|(i, f)| f.snapshot(retrans, rtt_turn(i, first, n)))
            .collect()
    }
}

impl TcpClient {
    fn new(plan: Plan, flows: Vec<Flow>) -> Self {
        TcpClient {
            zeros: vec![0u8; (plan.request_len as usize).clamp(1, CHUNK)],
            plan,
            flows,
            gate: RetransGate::default(),
            rtt_next: 0,
        }
    }

    fn connect(&mut self, core: &mut Core, i: usize) -> Result<(), Stop> {
        let Some(c) = &self.plan.connect else {
            return Err("internal: --crr flow without a target".to_owned().into());
        };
        let addr = c.addr;
        // Non-blocking from birth: one system call fewer than setting it afterwards.
        let sock = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking(),
            Some(Protocol::TCP),
        )
        .map_err(|e| Stop::Fatal(connect_error(&e, addr)))?;
        let mut ignored = Vec::new();
        sockopt::apply(SockRef::from(&sock), &c.socket, &mut ignored)
            .map_err(|e| Stop::Fatal(e.to_string()))?;
        let _ = sock.set_tcp_nodelay(true);
        if let Some(ip) = c.sources.source(usize::from(self.flows[i].base.id)) {
            // The port is picked at connect() by 4-tuple, as for held flows.
            sockopt::bind_address_only(&sock);
            sock.bind(&SocketAddr::new(ip, 0).into())
                .map_err(|e| Stop::Fatal(connect_error(&e, addr)))?;
        }
        // An attempt from here on, whatever becomes of it.
        self.flows[i].connections += 1;
        match sock.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
                return Err(Stop::Fatal(self.out_of_ports(c)));
            }
            Err(e) => return Err(Stop::io(&e, connect_error(&e, addr), false)),
        }
        let stream = TcpStream::from(sock);
        let fd = stream.as_raw_fd();
        let f = &mut self.flows[i];
        // Numbered by the flow's connections so far: each greeting's tag is new.
        f.hello = DataHello::new(c.cookie, f.base.id, f.opened, c.key.as_ref()).greeting();
        f.opened += 1;
        f.sock = Some(stream);
        f.unsent = DATA_GREETING_LEN as u64 + self.plan.request_len;
        f.hello_left = DATA_GREETING_LEN;
        f.rx = 0;
        f.tcp = TcpTrack::default();
        // Where the handshake needs no round trip the kernel's (loopback: it completes inside
        // connect), the greeting and request go now, rather than after an epoll wake-up to
        // say the socket is writable, a getsockopt and an epoll_ctl (issue 20). A handshake
        // still under way refuses the send with EAGAIN; the socket then waits for writable.
        let body = (f.unsent - DATA_GREETING_LEN as u64).min(self.zeros.len() as u64) as usize;
        let n = send_two(fd, &f.hello, &self.zeros[..body]);
        let interest = if n >= 0 {
            let n = n as u64;
            let h = (DATA_GREETING_LEN as u64).min(n);
            f.hello_left -= h as usize;
            f.unsent -= n;
            f.conn = Conn::Exchanging;
            f.want_write = f.unsent > 0;
            if f.want_write {
                Interest::ReadWrite
            } else {
                Interest::Read
            }
        } else {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(Stop::io(&e, connect_error(&e, addr), false));
            }
            f.conn = Conn::Connecting;
            f.want_write = true;
            Interest::Write
        };
        core.poll
            .add(fd, i as u64, interest)
            .map_err(|e| Stop::Fatal(e.to_string()))?;
        Ok(())
    }

    /// [`connect_error`] for `EADDRNOTAVAIL`, with the port-space arithmetic: the rate asked,
    /// or this worker's so far scaled to every flow's.
    fn out_of_ports(&self, c: &Connect) -> String {
        let (per_second, asked) = match c.per_second {
            Some(r) => (r, true),
            None => {
                let opened: u64 = self.flows.iter().map(|f| f.opened).sum();
                let secs = self.plan.timing.base.elapsed().as_secs_f64().max(1e-3);
                let share = self.flows.len().max(1) as f64;
                (
                    opened as f64 / secs * c.sources.flows() as f64 / share,
                    false,
                )
            }
        };
        format!(
            "cannot open a new connection to {}: {}",
            c.addr,
            c.sources.out_of_ports(per_second, asked)
        )
    }

    #[inline]
    fn event(&mut self, core: &mut Core, i: usize, ev: &Event, now: u64) -> Result<(), Stop> {
        let (readable, writable) = (ev.readable || ev.closed, ev.writable);
        if self.flows[i].conn == Conn::Connecting && writable {
            let Some(s) = &self.flows[i].sock else {
                return Ok(());
            };
            let error = match s.take_error() {
                Ok(e) => e,
                Err(e) => Some(e),
            };
            if let (Some(e), Some(c)) = (error, &self.plan.connect) {
                return Err(Stop::io(&e, connect_error(&e, c.addr), false));
            }
            self.flows[i].conn = Conn::Exchanging;
            self.set_interest(core, i)?;
        }
        if writable && self.flows[i].unsent > 0 {
            self.flush(core, i)?;
        }
        if readable {
            let opened = self.flows[i].opened;
            self.read(core, i, Some(now))?;
            // Edge-triggered: a hang-up that came with data is not reported again, so read
            // on to it (on this connection: a --crr flow may have opened its next one).
            let f = &self.flows[i];
            if ev.closed && !f.base.failed && f.sock.is_some() && f.opened == opened {
                self.read(core, i, Some(now))?;
            }
        }
        Ok(())
    }

    /// Reads what arrived on flow `i`. `now` is when it was known to have arrived (after an
    /// epoll wake-up), or `None` to read the clock after the `recv` (a blocking read).
    fn read(&mut self, core: &mut Core, i: usize, now: Option<u64>) -> Result<(), Stop> {
        // The request/response worker's read, run per epoll event: the recv, the latency
        // records and the next send's scheduling stay in one frame over the borrowed flow.
        let resp = self.plan.response_len;
        let f = &mut self.flows[i];
        let Some(s) = &f.sock else { return Ok(()) };
        // One byte more than the responses outstanding: a read that fills it is a server
        // sending too much, and any other leaves the socket empty, as the edge-triggered
        // loop needs (it hears of a socket again only when more arrives).
        let want =
            (resp.saturating_mul(f.inflight.len().max(1) as u64)).clamp(1, 1 << 30) as usize + 1;
        let n = match discard(s, want) {
            Ok(n) => n,
            Err(e) => {
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
                    _ => Err(Stop::io(&e, format!("connection failed: {e}"), true)),
                };
            }
        };
        let now = now.unwrap_or_else(|| core.now());
        if n == 0 {
            return match f.conn {
                Conn::Closing => {
                    self.close_crr(core, i, now);
                    Ok(())
                }
                _ if f.inflight.is_empty() && core.control.state() != RUNNING => Ok(()),
                _ => Err(Stop::Attempt(
                    Failure::Reset,
                    format!(
                        "the server closed the connection with {} transaction(s) unanswered",
                        f.inflight.len().max(1)
                    ),
                )),
            };
        }
        f.rx += n as u64;
        f.last_progress = now;
        let mut completed = 0;
        while f.rx >= resp {
            let Some(start) = f.inflight.pop_front() else {
                return Err(format!(
                    "the server sent {} bytes more than the responses asked for",
                    f.rx
                )
                .into());
            };
            f.rx -= resp;
            let ns = now.saturating_sub(start);
            core.rec.record(ns);
            f.base.count(ns);
            completed += 1;
        }
        if completed > 0 {
            match f.conn {
                Conn::Persistent => self.start_due(core, i, now),
                Conn::Exchanging => {
                    self.flows[i].streak = 0;
                    // Wait for the server's FIN: closing first would leave this end in
                    // TIME_WAIT and, thousands of transactions later, out of ports. The
                    // server sends it right behind the response, so it has usually arrived
                    // by now: look once more before going back to epoll.
                    self.flows[i].conn = Conn::Closing;
                    return self.read(core, i, None);
                }
                _ => {}
            }
            if self.has_room(core, i) {
                core.schedule(i, &mut self.flows[i].base);
            }
        }
        Ok(())
    }

    /// The server has closed a `--crr` connection after its response.
    fn close_crr(&mut self, core: &mut Core, i: usize, now: u64) {
        let f = &mut self.flows[i];
        if let Some(s) = f.sock.take() {
            let (r, srtt) = f.tcp.sample(&s);
            f.retransmits += r;
            f.srtt_us = srtt.or(f.srtt_us);
            // No EPOLL_CTL_DEL: the socket is this flow's alone, and closing its only
            // descriptor takes it out of the epoll set.
            drop(s);
        }
        f.conn = Conn::Idle;
        f.want_write = false;
        f.unsent = 0;
        if core.period_ns.is_some() {
            core.schedule(i, &mut f.base);
        } else {
            self.start_due(core, i, now);
        }
    }

    fn flush(&mut self, core: &mut Core, i: usize) -> Result<(), Stop> {
        let f = &mut self.flows[i];
        let Some(s) = &f.sock else { return Ok(()) };
        if f.conn == Conn::Connecting {
            return Ok(());
        }
        let fd = s.as_raw_fd();
        let mut blocked = false;
        while f.unsent > 0 {
            let body = (f.unsent - f.hello_left as u64).min(self.zeros.len() as u64) as usize;
            let n = if f.hello_left > 0 {
                send_two(
                    fd,
                    &f.hello[DATA_GREETING_LEN - f.hello_left..],
                    &self.zeros[..body],
                )
            } else {
                // SAFETY: `zeros` is valid for `body` bytes for the duration of the call.
                unsafe { libc::send(fd, self.zeros.as_ptr().cast(), body, libc::MSG_NOSIGNAL) }
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => {
                        blocked = true;
                        break;
                    }
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(Stop::io(&e, format!("send failed: {e}"), true)),
                }
            }
            let mut n = n as u64;
            let h = (f.hello_left as u64).min(n);
            f.hello_left -= h as usize;
            n -= h;
            f.unsent -= h + n;
        }
        if blocked != f.want_write {
            f.want_write = blocked;
            self.set_interest(core, i)?;
        }
        Ok(())
    }

    fn set_interest(&mut self, core: &mut Core, i: usize) -> Result<(), Stop> {
        let f = &self.flows[i];
        let Some(s) = &f.sock else { return Ok(()) };
        let interest = if f.want_write {
            Interest::ReadWrite
        } else {
            Interest::Read
        };
        core.poll
            .modify(s.as_raw_fd(), i as u64, interest)
            .map_err(|e| Stop::Fatal(e.to_string()))
    }

    /// Flow `i` met `e`: under [`KeepOpening`] a failed new connection is counted and the flow
    /// goes on; anything else ends the flow.
    fn stop(&mut self, core: &mut Core, i: usize, e: Stop, now: u64) {
        let f = &self.flows[i];
        let crr = f.conn != Conn::Persistent && self.plan.keep_opening.is_some();
        match e {
            // The answer is in and counted; only the server's close is missing.
            Stop::Attempt(..) if crr && f.conn == Conn::Closing => self.close_crr(core, i, now),
            Stop::Attempt(kind, _) if crr => self.give_up_attempt(core, i, kind, now),
            Stop::Attempt(_, m) | Stop::Fatal(m) => self.fail(core, i, m),
        }
    }

    /// Counts flow `i`'s attempt as failed by `kind`, closes it, and sets the next one up:
    /// after a back-off (unpaced) or at the flow's next slot (paced).
    fn give_up_attempt(&mut self, core: &mut Core, i: usize, kind: Failure, now: u64) {
        let f = &mut self.flows[i];
        // Closing the only descriptor takes the socket out of the epoll set.
        drop(f.sock.take());
        f.inflight.clear();
        f.conn = Conn::Idle;
        f.unsent = 0;
        f.hello_left = 0;
        f.rx = 0;
        f.want_write = false;
        match kind {
            Failure::Refused => f.failures.refused += 1,
            Failure::TimedOut => f.failures.timed_out += 1,
            Failure::Reset => f.failures.reset += 1,
        }
        f.streak = f.streak.saturating_add(1);
        if core.period_ns.is_some() {
            core.schedule(i, &mut f.base);
        } else {
            let at = now + crate::latency::as_ns(backoff(f.streak));
            core.queue(i, &mut f.base, at);
        }
    }

    /// Ends flow `i` with `error`: its socket closed, its transactions abandoned.
    fn fail(&mut self, core: &mut Core, i: usize, error: String) {
        let f = &mut self.flows[i];
        f.inflight.clear();
        if let Some(s) = f.sock.take() {
            core.poll.delete(s.as_raw_fd());
        }
        core.fail(&mut f.base, error);
    }
}

/// Whether flow `i` of `n` is among the [`RTT_SAMPLE`] from `first` on (wrapping).
fn rtt_turn(i: usize, first: usize, n: usize) -> bool {
    (i + n - first) % n < RTT_SAMPLE
}

/// `sendmsg` of two buffers at once, so a `--crr` greeting and its request share a segment.
fn send_two(fd: i32, a: &[u8], b: &[u8]) -> isize {
    let mut iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut libc::c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        },
    ];
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at two iovecs over live buffers; the kernel only reads them.
    unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) }
}

/// Why a flow's step failed.
#[derive(Debug)]
enum Stop {
    /// A new connection failed in a way a path's connection limit shows (`--crr`).
    Attempt(Failure, String),
    /// Anything else: this host (out of ports or files), the event loop, the server.
    Fatal(String),
}

impl From<String> for Stop {
    fn from(m: String) -> Self {
        Stop::Fatal(m)
    }
}

impl Stop {
    /// `e`, met on a connection that had (`connected`) or had not yet opened, described as
    /// `message`.
    fn io(e: &io::Error, message: String, connected: bool) -> Self {
        match failure(e, connected) {
            Some(kind) => Stop::Attempt(kind, message),
            None => Stop::Fatal(message),
        }
    }

    fn into_message(self) -> String {
        match self {
            Stop::Attempt(_, m) | Stop::Fatal(m) => m,
        }
    }
}

/// How a new connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Refused,
    TimedOut,
    Reset,
}

/// The kind of failure `e` is for a new connection, if it is one the path (or the server)
/// caused; `None` for this host's own (out of ports or files, no buffers), which end the flow.
fn failure(e: &io::Error, connected: bool) -> Option<Failure> {
    match e.raw_os_error()? {
        // A reset answering the SYN, or a firewall's ICMP unreachable.
        libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN => {
            Some(Failure::Refused)
        }
        libc::ETIMEDOUT => Some(Failure::TimedOut),
        libc::ECONNRESET | libc::ECONNABORTED | libc::EPIPE => Some(if connected {
            Failure::Reset
        } else {
            Failure::Refused
        }),
        _ => None,
    }
}

/// A connect failure in words a user can act on.
fn connect_error(e: &io::Error, addr: SocketAddr) -> String {
    match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => format!(
            "cannot open a new connection to {addr}: out of local ports (every port in \
             net.ipv4.ip_local_port_range is in use or in TIME_WAIT); use fewer --flows, a \
             lower --rate, or widen the port range"
        ),
        Some(libc::EMFILE) | Some(libc::ENFILE) => format!(
            "cannot open a new connection to {addr}: too many open files; raise `ulimit -n` or \
             use fewer --flows"
        ),
        Some(libc::ECONNREFUSED) => format!(
            "{addr} refused a new connection (is its listen backlog full, or the server gone?)"
        ),
        _ => format!("cannot open a new connection to {addr}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    use tokio::sync::mpsc::unbounded_channel;

    use super::*;
    use crate::engine::rr::STOPPED;
    use crate::proto::COOKIE_LEN;

    #[test]
    fn connect_errors_are_told_by_kind_and_this_hosts_own_are_not_failures() {
        let e = io::Error::from_raw_os_error;
        assert_eq!(
            failure(&e(libc::ECONNREFUSED), false),
            Some(Failure::Refused)
        );
        assert_eq!(
            failure(&e(libc::EHOSTUNREACH), false),
            Some(Failure::Refused)
        );
        assert_eq!(failure(&e(libc::ETIMEDOUT), false), Some(Failure::TimedOut));
        // A reset before the handshake ended is a refusal; after it, a reset.
        assert_eq!(failure(&e(libc::ECONNRESET), false), Some(Failure::Refused));
        assert_eq!(failure(&e(libc::ECONNRESET), true), Some(Failure::Reset));
        assert_eq!(failure(&e(libc::EPIPE), true), Some(Failure::Reset));
        // Out of ports or files: this host's problem, which ends the flow.
        for own in [libc::EADDRNOTAVAIL, libc::EMFILE, libc::ENOBUFS] {
            assert_eq!(failure(&e(own), false), None, "{own}");
        }
        assert_eq!(failure(&io::Error::other("x"), true), None);
    }

    #[test]
    fn the_back_off_doubles_from_a_millisecond_to_a_tenth_of_a_second() {
        let ms: Vec<u128> = (1..=9).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(ms, [1, 2, 4, 8, 16, 32, 64, 100, 100]);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    /// What one opener flow counted over `run` against `addr`: (transactions, connections
    /// started, failures, errors reported).
    fn open_for(
        addr: SocketAddr,
        keep_opening: Option<KeepOpening>,
        run: Duration,
    ) -> (u64, u64, Failures, Vec<String>) {
        let plan = Plan {
            request_len: 1,
            response_len: 1,
            timing: Timing {
                burst: 1,
                period: None,
                base: Instant::now(),
                stall_timeout: Duration::from_secs(10),
                per_flow: false,
                from_send: false,
            },
            connect: Some(Connect {
                addr,
                sources: FlowPlan::new(1, &[], crate::client::flow_plan::PortRange::default())
                    .unwrap(),
                per_second: None,
                socket: SocketOptions::default(),
                cookie: Cookie([7; COOKIE_LEN]),
                key: None,
            }),
            keep_opening,
        };
        let control = Arc::new(Control::default());
        let (tx, mut rx) = unbounded_channel();
        let mut w = spawn(0, plan, vec![(0, None)], Arc::clone(&control), tx, 1).unwrap();
        std::thread::sleep(run);
        control.state.store(STOPPED, Ordering::Relaxed);
        w.waker.wake();
        w.thread.take().unwrap().join().unwrap();
        let (mut tx_n, mut conns, mut fails, mut errors) = (0, 0, Failures::default(), vec![]);
        while let Ok(r) = rx.try_recv() {
            match r {
                Report::Snapshot { flows, .. } | Report::Done { flows, .. } => {
                    for f in flows {
                        tx_n += f.transactions;
                        conns += f.connections;
                        fails += f.failures;
                    }
                }
                Report::Failed { error, .. } => errors.push(error),
            }
        }
        (tx_n, conns, fails, errors)
    }

    fn keep(timeout_ms: u64) -> Option<KeepOpening> {
        Some(KeepOpening {
            timeout: Duration::from_millis(timeout_ms),
        })
    }

    /// A port nobody listens on refuses every attempt: each is counted, the opener goes on,
    /// and the back-off keeps it from a busy loop (1+2+…+64+100+100 ms is about 0.4 s).
    #[test]
    fn an_opener_counts_refused_connections_and_backs_off() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let (n, conns, f, errors) = open_for(addr, keep(1000), Duration::from_millis(400));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(n, 0);
        assert!((6..=12).contains(&f.refused), "{f:?}");
        assert_eq!((f.timed_out, f.reset), (0, 0), "{f:?}");
        // Every attempt started ended, and as a refusal.
        assert_eq!(conns, f.refused);

        // A plain --crr flow fails at the first.
        let (n, conns, f, errors) = open_for(addr, None, Duration::from_millis(100));
        assert_eq!((n, conns, f.total()), (0, 1, 0));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("refused a new connection"), "{errors:?}");
    }

    /// A listener that never accepts: the kernel completes the handshake, nobody answers, and
    /// each attempt times out after the opener's timeout.
    #[test]
    fn an_opener_counts_unanswered_connections_as_timed_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (n, conns, f, errors) = open_for(
            l.local_addr().unwrap(),
            keep(150),
            Duration::from_millis(700),
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(n, 0);
        // 150 ms each, seen within 0.1 s, 1–2 ms apart: 3 or 4 in 0.7 s.
        assert!((2..=4).contains(&f.timed_out), "{f:?}");
        assert_eq!((f.refused, f.reset), (0, 0), "{f:?}");
        // The attempt under way when the test stopped was abandoned, not counted.
        assert!(
            conns == f.timed_out || conns == f.timed_out + 1,
            "{conns} {f:?}"
        );
    }

    /// A server that takes each connection and resets it before answering.
    #[test]
    fn an_opener_counts_connections_reset_before_the_answer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        l.set_nonblocking(true).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let resetter = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        // Wait for the greeting and request, so the reset comes after them.
                        s.set_nonblocking(false).unwrap();
                        let _ = s.peek(&mut [0u8; 1]);
                        SockRef::from(&s).set_linger(Some(Duration::ZERO)).unwrap();
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        let (n, conns, f, errors) = open_for(addr, keep(1000), Duration::from_millis(300));
        done.store(true, Ordering::Relaxed);
        resetter.join().unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(n, 0);
        assert!(f.reset >= 3, "{f:?}");
        assert_eq!((f.refused, f.timed_out), (0, 0), "{f:?}");
        assert!(conns == f.reset || conns == f.reset + 1, "{conns} {f:?}");
    }

    #[test]
    fn every_flow_has_its_rtt_read_once_in_each_round_of_turns() {
        for n in [1, 5, RTT_SAMPLE, RTT_SAMPLE + 1, 3 * RTT_SAMPLE - 7, 8192] {
            let mut reads = vec![0u32; n];
            let mut first = 0;
            let turns = n.div_ceil(RTT_SAMPLE);
            for _ in 0..turns {
                let picked: Vec<usize> = (0..n).filter(|&i| rtt_turn(i, first, n)).collect();
                assert_eq!(picked.len(), n.min(RTT_SAMPLE), "{n} flows");
                for i in picked {
                    reads[i] += 1;
                }
                first = (first + RTT_SAMPLE) % n;
            }
            // Within a round every flow is read, and only the last turn may wrap onto some
            // read already.
            assert!(reads.iter().all(|&r| r >= 1), "{n} flows: {reads:?}");
            assert!(reads.iter().all(|&r| r <= 2), "{n} flows");
            if n % RTT_SAMPLE == 0 || n < RTT_SAMPLE {
                assert!(reads.iter().all(|&r| r == 1), "{n} flows");
            }
        }
    }

    #[test]
    fn a_flow_reports_an_rtt_only_when_its_turn_reads_one() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _peer = l.accept().unwrap();
        let mut f = Flow::new(3, Some(s), 0, false);
        let read = f.snapshot(false, true);
        assert!(read.srtt_us.is_some_and(|us| us > 0));
        // Not its turn and nothing retransmitted anywhere: no stale RTT, no count.
        let skipped = f.snapshot(false, false);
        assert_eq!(
            (skipped.flow, skipped.srtt_us, skipped.retransmits),
            (3, None, 0)
        );
        assert!(f.snapshot(true, false).srtt_us.is_none());
    }
}
