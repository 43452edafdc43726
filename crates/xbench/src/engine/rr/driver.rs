//! The client worker's event loop, once for every transport: a [`Driver`] owns the epoll loop,
//! the pacing queue, the interval handshake and the stall clock, and a [`FlowIo`] (TCP's
//! `client::TcpClient`, UDP's `udp::client::UdpClient`) says what a transaction is on its
//! flows: how one starts, what a readable or writable socket means, when a flow has stalled.
//!
//! Static dispatch on purpose: this is the `--rr` / `--crr` / `--rr -u` hot path, and a
//! generic driver compiles to the loop each transport had of its own. Not for servers, which
//! answer rather than start transactions and have no schedule: theirs is [`serve`](super::serve).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::poll::{Event, Poll, WAKER, Waker, precise_timers};
use super::{Control, DRAINING, Epochs, FlowSnapshot, Report, STOPPED, Worker, tell};
use crate::engine::cpu::thread_cpu;
use crate::latency::{FlowSketch, Recorder, as_ns};

/// How often every flow is looked at for a stall, ns.
const STALL_CHECK_NS: u64 = 100_000_000;

/// A transport's side of a client worker: its flows, and what a transaction is on them. The
/// driver calls these; they call back into [`Core`] for the clock, the pacing queue, the
/// latency recorder and failure reports.
pub(crate) trait FlowIo {
    /// How many flows the worker drives.
    fn len(&self) -> usize;
    /// Flow `i`'s part that is the same on every transport.
    fn base(&self, i: usize) -> &FlowBase;
    fn base_mut(&mut self, i: usize) -> &mut FlowBase;
    /// Starts every transaction flow `i` may start now.
    fn start_due(&mut self, core: &mut Core, i: usize, now: u64);
    /// After flow `i` took its paced turn: whether it has room to take the next one now, or
    /// waits for a response (or a writable socket) to put it back in the queue.
    fn has_room(&self, core: &Core, i: usize) -> bool;
    /// Flow `i`'s socket reported `ev`, known at `now`.
    fn on_event(&mut self, core: &mut Core, i: usize, ev: &Event, now: u64);
    /// No flow has anything in flight (a failed flow has nothing).
    fn all_idle(&self) -> bool;
    /// Whether the lone flow of an unpaced ping-pong test can be served by blocking calls.
    fn ping_pong(&self) -> bool;
    /// Readies the lone flow for blocking calls; false when it could not be.
    fn enter_blocking(&mut self) -> bool;
    /// One blocking transaction step; false ends the blocking loop.
    fn blocking_step(&mut self, core: &mut Core) -> bool;
    /// Gives the lone flow back to the epoll loop.
    fn leave_blocking(&mut self);
    /// When the transport's own timer next fires, ns since base (UDP's request timeouts);
    /// `u64::MAX` for none.
    fn next_timer(&self) -> u64 {
        u64::MAX
    }
    /// The transport's own timer has fired.
    fn on_timer(&mut self, _core: &mut Core, _now: u64) {}
    /// Fails the flows that have waited too long for their peer.
    fn check_stalls(&mut self, core: &mut Core, now: u64);
    /// Every flow's figures since the last snapshot.
    fn snapshots(&mut self) -> Vec<FlowSnapshot>;
}

/// What every flow keeps, whatever its transport: its place in the pacing schedule, whether
/// it has failed, and its counts since the last snapshot.
#[derive(Debug)]
pub(crate) struct FlowBase {
    pub(crate) id: u16,
    /// Paced: intended start of the next transaction, ns since base.
    pub(crate) next_due: u64,
    /// Has an entry in the pacing queue.
    pub(crate) scheduled: bool,
    pub(crate) failed: bool,
    /// `--per-flow`: this flow's latency since the last snapshot.
    pub(crate) sketch: Option<FlowSketch>,
    pub(crate) transactions: u64,
}

impl FlowBase {
    /// Flow `id`, first due at `phase` when paced.
    pub(crate) fn new(id: u16, phase: u64, per_flow: bool) -> Self {
        FlowBase {
            id,
            next_due: phase,
            scheduled: false,
            failed: false,
            sketch: per_flow.then(FlowSketch::new),
            transactions: 0,
        }
    }

    /// Counts a completed transaction of `ns` in the flow's own figures (the worker's
    /// histogram is [`Core::rec`]).
    #[inline]
    pub(crate) fn count(&mut self, ns: u64) {
        if let Some(sk) = self.sketch.as_mut() {
            sk.record(ns);
        }
        self.transactions += 1;
    }

    /// The transport-independent part of the flow's snapshot, taking its counts.
    pub(crate) fn snapshot(&mut self) -> FlowSnapshot {
        FlowSnapshot {
            flow: self.id,
            transactions: std::mem::take(&mut self.transactions),
            sketch: self.sketch.as_mut().map(std::mem::take),
            ..FlowSnapshot::default()
        }
    }
}

/// How a client worker paces and times its transactions, whatever the transport.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    /// Transactions a flow keeps in flight at most.
    pub(crate) burst: usize,
    /// Paced: time between one flow's transactions.
    pub(crate) period: Option<Duration>,
    /// Time zero of the test; latencies and schedules are nanoseconds since then.
    pub(crate) base: Instant,
    /// A flow waiting this long for its peer has failed (what waiting is, is the
    /// transport's).
    pub(crate) stall_timeout: Duration,
    /// Each flow keeps a [`FlowSketch`] of its own latency (`--per-flow`).
    pub(crate) per_flow: bool,
    /// Time a paced transaction from when its request was sent, not from when it was due
    /// ([`crate::ClientConfig::latency_from_send`]: latency probes).
    pub(crate) from_send: bool,
}

impl Timing {
    /// Where flow `id` of `flows_total` starts in the period, ns: flow i of n starts i/n of
    /// a period late, so paced flows do not all fire at once.
    pub(crate) fn phase(&self, id: u16, flows_total: usize) -> u64 {
        self.period.map_or(0, |p| {
            (p.as_nanos() * u128::from(id) / flows_total.max(1) as u128) as u64
        })
    }
}

/// What a transport shares with the driver: the clock, the pacing queue, the worker's
/// latency recorder and its line to the controller.
pub(crate) struct Core {
    /// Time zero of the test; latencies and schedules are nanoseconds since then.
    pub(crate) base: Instant,
    /// Paced: ns between one flow's transactions.
    pub(crate) period_ns: Option<u64>,
    /// Transactions a flow keeps in flight at most.
    pub(crate) burst: usize,
    pub(crate) poll: Poll,
    waker: Arc<Waker>,
    /// Latency of every flow's transactions since the last snapshot: one histogram for the
    /// worker, not one per flow (issue 22: 280 KB a flow).
    pub(crate) rec: Recorder,
    pub(crate) control: Arc<Control>,
    tx: UnboundedSender<Report>,
    /// Paced flows (and backing-off openers) by next start.
    due: BinaryHeap<Reverse<(u64, usize)>>,
    epochs: Epochs,
    next_stall_check: u64,
}

impl Core {
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        as_ns(self.base.elapsed())
    }

    /// When a transaction of `f` may start now: now, unpaced; its due time, paced, which
    /// then moves a period on. `None` when none may (not due yet, or the window is over).
    #[inline]
    pub(crate) fn next_start(&self, f: &mut FlowBase, now: u64) -> Option<u64> {
        match self.period_ns {
            None if self.control.may_start(now) => Some(now),
            Some(p) if f.next_due <= now && self.control.may_start(f.next_due) => {
                let t = f.next_due;
                f.next_due += p;
                Some(t)
            }
            _ => None,
        }
    }

    /// Queues flow `i` for its next intended start, once (paced only).
    #[inline]
    pub(crate) fn schedule(&mut self, i: usize, f: &mut FlowBase) {
        if self.period_ns.is_some() && !f.failed {
            self.queue(i, f, f.next_due);
        }
    }

    /// Queues flow `i` to start at `at`, unless it is queued already.
    #[inline]
    pub(crate) fn queue(&mut self, i: usize, f: &mut FlowBase, at: u64) {
        if !f.scheduled {
            f.scheduled = true;
            self.due.push(Reverse((at, i)));
        }
    }

    /// Marks `f` failed and tells the controller, which ends the test with `error`.
    pub(crate) fn fail(&self, f: &mut FlowBase, error: String) {
        f.failed = true;
        self.failed(Some(f.id), error);
    }

    fn failed(&self, flow: Option<u16>, error: String) {
        tell(&self.tx, Report::Failed { flow, error });
    }

    /// A paced transaction is due inside the window and not started yet (a worker running
    /// late at the end).
    fn paced_left(&self) -> bool {
        self.due
            .peek()
            .is_some_and(|Reverse((t, _))| self.control.may_start(*t))
    }
}

/// A client worker: the transport `T`'s flows, driven from one epoll loop (or, for a lone
/// unpaced ping-pong flow, blocking calls).
pub(crate) struct Driver<T> {
    core: Core,
    io: T,
}

/// Starts client worker `index`'s thread, named `name`, driving `io` by `timing`; `poll` has
/// the worker's sockets and `waker` in it ([`worker_poll`](super::poll::worker_poll)).
pub(crate) fn spawn<T: FlowIo + Send + 'static>(
    index: usize,
    name: String,
    timing: &Timing,
    (poll, waker): (Poll, Arc<Waker>),
    control: Arc<Control>,
    tx: UnboundedSender<Report>,
    io: T,
) -> io::Result<Worker> {
    let core = Core {
        base: timing.base,
        period_ns: timing.period.map(as_ns),
        burst: timing.burst,
        poll,
        waker: Arc::clone(&waker),
        rec: Recorder::new(),
        control,
        tx,
        due: BinaryHeap::new(),
        epochs: Epochs::new(index),
        next_stall_check: 0,
    };
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        precise_timers();
        Driver { core, io }.run();
    })?;
    Ok(Worker {
        waker,
        conns: None,
        thread: Some(thread),
    })
}

impl<T: FlowIo> Driver<T> {
    fn run(&mut self) {
        let now = self.core.now();
        for i in 0..self.io.len() {
            if self.core.period_ns.is_some() {
                self.core.schedule(i, self.io.base_mut(i));
            } else {
                self.io.start_due(&mut self.core, i, now);
            }
        }
        if self.io.len() == 1
            && self.core.period_ns.is_none()
            && self.core.burst == 1
            && self.io.ping_pong()
        {
            self.run_blocking();
        }
        let mut events = Vec::with_capacity(64);
        loop {
            let state = self.core.control.state();
            if state == STOPPED
                || (state == DRAINING && self.io.all_idle() && !self.core.paced_left())
            {
                break;
            }
            let deadline = self.deadline(state);
            events.clear();
            if let Err(e) = self.core.poll.wait(Some(deadline), |ev| events.push(ev)) {
                self.core.failed(None, format!("event loop failed: {e}"));
                break;
            }
            let now = self.core.now();
            for ev in &events {
                if ev.token == WAKER {
                    self.core.waker.drain();
                    continue;
                }
                let i = ev.token as usize;
                if i >= self.io.len() || self.io.base(i).failed {
                    continue;
                }
                self.io.on_event(&mut self.core, i, ev, now);
            }
            if self.core.control.state() != STOPPED {
                self.start_paced(now);
            }
            self.housekeeping(now);
        }
        let flows = self.io.snapshots();
        tell(
            &self.core.tx,
            Report::Done {
                flows,
                latency: Some(std::mem::take(&mut self.core.rec)),
                cpu: thread_cpu(),
            },
        );
    }

    /// One unpaced ping-pong flow: blocking calls instead of the epoll loop, so a transaction
    /// costs two system calls (as sockperf's does) instead of three. The transport's calls
    /// time out often enough that interval boundaries, stops and stalls are still seen.
    /// Returns to the epoll loop (which then sees the stop) when the test ends or the flow
    /// fails.
    fn run_blocking(&mut self) {
        if self.io.enter_blocking() {
            loop {
                let state = self.core.control.state();
                // Past the end with nothing in flight: the epoll loop waits for the controller
                // (a blocking read would sleep a whole slice).
                let over = self.io.all_idle() && !self.core.control.may_start(self.core.now());
                if state == STOPPED || (state == DRAINING && self.io.all_idle()) || over {
                    break;
                }
                if self.io.base(0).failed || !self.io.blocking_step(&mut self.core) {
                    break;
                }
                let now = self.core.now();
                self.housekeeping(now);
            }
        }
        self.io.leave_blocking();
    }

    /// Interval snapshots, the transport's timer and stall checks, between events.
    fn housekeeping(&mut self, now: u64) {
        if let Some(epoch) = self.core.epochs.due(&self.core.control) {
            let flows = self.io.snapshots();
            let latency = Some(std::mem::take(&mut self.core.rec));
            tell(
                &self.core.tx,
                self.core.epochs.snapshot(epoch, flows, latency),
            );
        }
        if now >= self.io.next_timer() {
            self.io.on_timer(&mut self.core, now);
        }
        if now >= self.core.next_stall_check {
            self.core.next_stall_check = now + STALL_CHECK_NS;
            self.io.check_stalls(&mut self.core, now);
        }
    }

    /// The next stall check, transport timer or paced start, whichever comes first.
    fn deadline(&self, state: u8) -> Instant {
        let mut t = self.io.next_timer().min(self.core.next_stall_check);
        if state != STOPPED
            && let Some(Reverse((due, _))) = self.core.due.peek()
            && self.core.control.may_start(*due)
        {
            t = t.min(*due);
        }
        self.core.base + Duration::from_nanos(t)
    }

    fn start_paced(&mut self, now: u64) {
        while let Some(&Reverse((t, i))) = self.core.due.peek() {
            // The controller may stop the test while we loop, or the window end: a flow that
            // cannot start then keeps its due time, and rescheduling it would spin here for
            // ever.
            if t > now || !self.core.control.may_start(t) {
                break;
            }
            self.core.due.pop();
            self.io.base_mut(i).scheduled = false;
            self.io.start_due(&mut self.core, i, now);
            // A flow without room is rescheduled when a response frees a slot.
            if self.io.has_room(&self.core, i) {
                self.core.schedule(i, self.io.base_mut(i));
            }
        }
    }
}
