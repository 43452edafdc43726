//! The server side of a request/response test, in phases: [`start_workers`] (worker threads
//! own the flows) → [`Answering::begin`] (`Ready` sent, `--crr` connections routed straight to
//! the workers) → [`Answering::run`] (intervals cut and sent as the workers answer them, until
//! the client's `Finish` or a reason to stop) → [`Answering::stop`] (workers stopped, their
//! last figures in) → [`Stopped::report`] (last interval, the counts the client checks its own
//! against, the log line).
//!
//! Not the session before the test ([`session`](super::session)), and not the workers' event
//! loops (`engine::rr::serve`, and the transports' `engine::rr::server` and
//! `engine::rr::udp::server`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tracing::debug;

use super::governor::{Governor, PACED_RR_ANSWER, PacedSocket, Share};
use super::metrics;
use super::test::SessionEnd;
use super::test::{IDLE_LOOK, Test, TestEnd, Watchdog, log_test, on_control};
use crate::check;
use crate::config::{RrSpec, TestSpec};
use crate::control::sleep_until_opt;
use crate::engine::rr::udp::UdpFlow;
use crate::engine::rr::{self, Control, FlowSnapshot, Handoff, Report, STOPPED, Workers};
use crate::engine::schedule::{Boundaries, Schedule, Span};
use crate::engine::send_budget::SendBudget;
use crate::engine::udp::{socket, wire};
use crate::proto::{ErrorCode, Message, Ready};
use crate::report::{CpuUsage, SideRrFlow, SideRrInterval, SideRrResults, SocketReport};
use crate::server::registry::DataConn;

/// Runs an admitted request/response test to its end and reports it.
pub(super) async fn run(mut t: Test, spec: &TestSpec, rr_spec: &RrSpec) -> SessionEnd {
    let started = match start_workers(&mut t, rr_spec, spec.socket.window) {
        Ok(started) => started,
        Err(msg) => return t.abort(ErrorCode::ServerError, msg).await,
    };
    let Ok(mut test) = Answering::begin(t, started, spec, rr_spec).await else {
        return SessionEnd::Other;
    };
    let end = test.run(rr_spec).await;
    // A test the server ends having measured it: the client stops its flows first.
    let told = end.sends_results_after_error() && test.t.end_before_results(&end).await;
    test.stop().await.report(&end, told, spec).await
}

/// Worker threads with the test's persistent connections, and where they report.
struct Started {
    workers: Workers,
    reports: mpsc::UnboundedReceiver<Report>,
    /// The test's place in `--max-send-rate` when its answers are large.
    share: Option<Share>,
    /// `--rr -u`: each flow's socket as sized, for `Ready`.
    sockets: Vec<SocketReport>,
}

/// Hands the flows to worker threads, a few flows each. An error is the refusal to send; the
/// workers already started are stopped first.
fn start_workers(t: &mut Test, rr_spec: &RrSpec, window: Option<u64>) -> Result<Started, String> {
    if rr_spec.udp.is_some() {
        return start_udp_workers(t, rr_spec, window);
    }
    let flows = rr_spec.flows.as_usize();
    let ids: Vec<u16> = (0..flows).map(|i| i as u16).collect();
    let plan = rr::server::Plan {
        request_len: u64::from(rr_spec.request_len.get()),
        response_len: u64::from(rr_spec.response_len.get()),
        one_per_connection: rr_spec.connect_per_transaction,
        ping_pong: rr_spec.burst.get() == 1,
        request_timeout: t.ctx.limits.handshake_timeout,
    };
    let n_workers = rr::worker_count(flows);
    let conns: Vec<(u16, Arc<std::net::TcpStream>)> = std::mem::take(&mut t.conns)
        .into_iter()
        .map(|(id, s)| (id, Arc::new(s)))
        .collect();
    // Every answer counts against --max-send-rate, the whole test as one stream; large ones
    // are paced by the kernel too.
    let budget = send_budget(t);
    let share = budget.as_ref().map(|b| {
        let sockets = conns
            .iter()
            .filter(|_| rr_spec.response_len.get() >= PACED_RR_ANSWER)
            .map(|(_, s)| Arc::downgrade(s) as PacedSocket);
        Governor::join_as_one(&t.ctx.governor, sockets.collect(), Arc::clone(b))
    });
    let mut shares: Vec<Vec<(u16, Arc<std::net::TcpStream>)>> =
        (0..n_workers).map(|_| Vec::new()).collect();
    for (i, c) in conns.into_iter().enumerate() {
        shares[i % n_workers].push(c);
    }
    let control = Arc::new(Control {
        at_once: match plan.one_per_connection {
            true => rr::tally::Tally::new(flows),
            false => rr::tally::Tally::default(),
        },
        send_budget: budget,
        ..Control::default()
    });
    let (tx, reports) = mpsc::unbounded_channel();
    let mut spawned = Vec::with_capacity(n_workers);
    for (i, share) in shares.into_iter().enumerate() {
        match rr::server::spawn(i, plan, share, &ids, Arc::clone(&control), tx.clone()) {
            Ok(w) => spawned.push(w),
            Err(e) => {
                drop(Workers::new(Arc::clone(&control), spawned));
                return Err(format!(
                    "server could not start a request/response worker: {e}"
                ));
            }
        }
    }
    Ok(Started {
        workers: Workers::new(control, spawned),
        reports,
        share,
        sockets: Vec::new(),
    })
}

/// The test's share of `--max-send-rate`, which its workers pace every answer by; `None`
/// without a cap. Starts at the whole cap; joining the governor sets the share.
fn send_budget(t: &Test) -> Option<Arc<SendBudget>> {
    let ipv6 = t.peer.ip().to_canonical().is_ipv6();
    let cap = t.ctx.limits.max_send_rate?;
    Some(Arc::new(SendBudget::new(cap, ipv6)))
}

/// [`start_workers`] for `--rr -u`: each flow's socket, connected to the address whose
/// greeting it took, to a UDP worker, every response paced by the test's share of
/// `--max-send-rate`. (Admission refused a large-answer test that does not say how fast it
/// asks (`--rate`) or asks for more than the cap.)
fn start_udp_workers(
    t: &mut Test,
    rr_spec: &RrSpec,
    window: Option<u64>,
) -> Result<Started, String> {
    let plan = rr::udp::server::Plan {
        request_len: rr_spec.request_len.get() as usize,
        response_len: rr_spec.response_len.get() as usize,
    };
    let mut sockets = Vec::new();
    let flows: Vec<UdpFlow> = std::mem::take(&mut t.udp)
        .into_iter()
        .map(|(id, sock, tag)| {
            let mut ignored = Vec::new();
            rr::udp::size_socket(&sock, window, &mut ignored);
            sockets.push(socket::report(&sock, window));
            UdpFlow {
                id,
                sock,
                token: wire::token(&tag),
            }
        })
        .collect();
    let n_workers = rr::worker_count(flows.len());
    let mut shares: Vec<Vec<UdpFlow>> = (0..n_workers).map(|_| Vec::new()).collect();
    for (i, f) in flows.into_iter().enumerate() {
        shares[i % n_workers].push(f);
    }
    let budget = send_budget(t);
    let share = budget
        .as_ref()
        .map(|b| Governor::join_as_one(&t.ctx.governor, Vec::new(), Arc::clone(b)));
    let control = Arc::new(Control {
        send_budget: budget,
        ..Control::default()
    });
    let (tx, reports) = mpsc::unbounded_channel();
    let mut spawned = Vec::with_capacity(n_workers);
    for (i, share) in shares.into_iter().enumerate() {
        match rr::udp::server::spawn(i, plan, share, Arc::clone(&control), tx.clone()) {
            Ok(w) => spawned.push(w),
            Err(e) => {
                drop(Workers::new(Arc::clone(&control), spawned));
                return Err(format!(
                    "server could not start a request/response worker: {e}"
                ));
            }
        }
    }
    Ok(Started {
        workers: Workers::new(control, spawned),
        reports,
        share,
        sockets,
    })
}

/// A test whose workers answer requests.
struct Answering {
    t: Test,
    workers: Workers,
    reports: mpsc::UnboundedReceiver<Report>,
    /// Where `--crr` connections go, round robin.
    handoff: Arc<Handoff>,
    share: Option<Share>,
    /// When `Ready` left: time zero of the intervals.
    start: Instant,
    /// When the server gives up on a test that should have ended.
    hard_stop: Instant,
    boundaries: Boundaries,
    reports_intervals: bool,
    acc: Totals,
    flows: usize,
    /// `--crr` connections that arrived before the direct route still come through here.
    crr_open: bool,
}

impl Answering {
    /// Routes `--crr` connections straight to the workers and sends `Ready`.
    async fn begin(
        mut t: Test,
        started: Started,
        spec: &TestSpec,
        rr_spec: &RrSpec,
    ) -> Result<Self, SessionEnd> {
        let Started {
            workers,
            reports,
            share,
            sockets,
        } = started;
        let flows = rr_spec.flows.as_usize();
        let handoff = Arc::new(workers.handoff(
            flows * 2 + 16,
            u64::from(rr_spec.request_len.get()),
            u64::from(rr_spec.response_len.get()),
        ));
        if rr_spec.connect_per_transaction {
            t.registration
                .route_directly(Arc::clone(&handoff), rr_spec.flows.get());
        }
        let start = Instant::now();
        let ready = Message::Ready(Ready {
            sockets,
            greetings: t.greetings.clone(),
        });
        if t.send(&ready).await.is_err() {
            return Err(SessionEnd::Other);
        }
        let schedule = Schedule::for_spec(spec);
        let ids: Vec<u16> = (0..flows).map(|i| i as u16).collect();
        let acc = Totals::new(&ids, workers.len());
        let hard_stop = t.hard_stop(spec, start);
        Ok(Answering {
            t,
            workers,
            reports,
            handoff,
            share,
            start,
            hard_stop,
            boundaries: Boundaries::new(start, schedule),
            reports_intervals: schedule.reports_intervals(),
            acc,
            flows,
            crr_open: rr_spec.connect_per_transaction,
        })
    }

    /// Cuts intervals and sends them as the workers answer, until the client finishes the
    /// test, or it overruns, goes quiet, vanishes, or the server shuts down.
    async fn run(&mut self, rr_spec: &RrSpec) -> TestEnd {
        let mut watch = Watchdog::new(&self.t.ctx, self.hard_stop, IDLE_LOOK, 0);
        // A paced test slower than one transaction per idle period is quiet, not dead.
        if rr_spec
            .period()
            .is_some_and(|p| p.saturating_mul(2) >= watch.idle_limit())
        {
            watch = watch.quiet_is_fine();
        }
        loop {
            let boundary_at = self.boundaries.next_at();
            tokio::select! {
                biased;
                msg = self.t.rd.next() => return on_control(msg),
                conn = self.t.data.recv(), if self.crr_open => self.crr_conn(conn),
                r = self.reports.recv() => {
                    if let Err(e) = self.on_report(r).await {
                        return TestEnd::ClientGone(e);
                    }
                }
                _ = sleep_until_opt(boundary_at) => self.close_interval(),
                w = watch.next() => {
                    let progress = self.workers.control.activity.load(std::sync::atomic::Ordering::Relaxed);
                    let quiet = |l| TestEnd::Idle(format!("no request arrived for {l:?}"));
                    if let Some(end) = watch.ended(w, progress, quiet) {
                        return end;
                    }
                }
            }
        }
    }

    /// A `--crr` connection that arrived before the direct route was set up; from then on
    /// they skip this task.
    fn crr_conn(&mut self, conn: Option<DataConn>) {
        match conn {
            Some((flow, sock, _, _)) if usize::from(flow) < self.flows => {
                self.handoff.give(flow, sock, 0)
            }
            Some((flow, _, from, _)) => {
                debug!(%from, flow, "dropped a --crr connection naming no flow of its test")
            }
            None => self.crr_open = false,
        }
    }

    /// Credits a worker's snapshot and sends the intervals it completes.
    async fn on_report(&mut self, r: Option<Report>) -> Result<(), String> {
        match r {
            Some(Report::Snapshot {
                worker,
                epoch,
                flows,
                ..
            }) => {
                for iv in self.acc.snapshot(worker, epoch, flows) {
                    self.t.send(&Message::RrInterval(iv)).await?;
                }
            }
            Some(Report::Failed { flow, error }) => {
                debug!(peer = %self.t.peer, ?flow, "flow ended: {error}")
            }
            Some(Report::Done { .. }) | None => {}
        }
        Ok(())
    }

    /// An interval boundary passed: the workers answer with their snapshots.
    fn close_interval(&mut self) {
        if let Some(span) = self.boundaries.close() {
            let epoch = self.workers.next_epoch();
            self.acc
                .pending(epoch, side_interval(span), self.reports_intervals);
        }
    }

    /// Stops the workers and takes their last figures (waiting at most 2 s for them).
    async fn stop(self) -> Stopped {
        let Answering {
            t,
            workers,
            mut reports,
            mut boundaries,
            mut acc,
            start,
            share,
            reports_intervals,
            ..
        } = self;
        workers.set_state(STOPPED);
        let held_s = workers
            .control
            .send_budget
            .as_ref()
            .map_or(0.0, |b| b.waited_s());
        let mut done = 0;
        let mut cpu = CpuUsage::default();
        let mut last = Vec::new();
        let until = tokio::time::Instant::now() + Duration::from_secs(2);
        while done < workers.len() {
            match tokio::time::timeout_at(until, reports.recv()).await {
                Ok(Some(Report::Done { flows, cpu: c, .. })) => {
                    done += 1;
                    cpu += c;
                    last.extend(flows);
                }
                Ok(Some(Report::Snapshot {
                    worker,
                    epoch,
                    flows,
                    ..
                })) => {
                    let _ = acc.snapshot(worker, epoch, flows);
                }
                Ok(Some(Report::Failed { .. })) => {}
                Ok(None) | Err(_) => break,
            }
        }
        drop(workers);
        let last_iv = acc.finish(last, side_interval(boundaries.last(Instant::now())));
        Stopped {
            t,
            acc,
            last_iv,
            cpu,
            held_s,
            start,
            reports_intervals,
            _share: share,
        }
    }
}

/// A test whose workers have stopped, with every figure in.
struct Stopped {
    t: Test,
    acc: Totals,
    last_iv: SideRrInterval,
    cpu: CpuUsage,
    /// Seconds answers waited for the test's share of `--max-send-rate`.
    held_s: f64,
    start: Instant,
    reports_intervals: bool,
    /// Held until the report is out, as it was while the test ran.
    _share: Option<Share>,
}

impl Stopped {
    /// Sends the last interval and the results when the client finished the test, or the
    /// server ended it and `told` the client so (the test's place given back first), or tells
    /// it why not; then the log line.
    async fn report(mut self, end: &TestEnd, told: bool, spec: &TestSpec) -> SessionEnd {
        let transactions: u64 = self.acc.flows.iter().map(|f| f.transactions).sum();
        let mut checked = true;
        let results = match end {
            TestEnd::Finished { .. } => true,
            // Shutting down or idle: the client was told why before the workers stopped.
            _ if end.sends_results_after_error() => told,
            _ => {
                self.t.tell_end(end).await;
                false
            }
        };
        if results {
            if self.reports_intervals {
                let _ = self.t.send(&Message::RrInterval(self.last_iv)).await;
            }
            let results = SideRrResults {
                flows: self.acc.flows,
                measured_retransmits: self.acc.measured_retransmits,
                cpu: self.cpu,
                ignored: self.acc.ignored,
                held_s: self.held_s,
            };
            let answered: Vec<(u16, u64)> = (results.flows.iter())
                .map(|f| (f.flow, f.transactions))
                .collect();
            self.t.send_results(&Message::RrResults(results)).await;
            let _ = self.t.wr.shutdown().await;
            self.t.rd.set_max_frame(tally_frame_max(answered.len()));
            if let (Some(tally), Some(rr)) = (self.t.tally().await, spec.as_rr()) {
                // With UDP the client's tally is the requests it sent, each answered once.
                let in_flight = if rr.udp.is_some() {
                    0
                } else if rr.connect_per_transaction {
                    1
                } else {
                    u64::from(rr.burst.get())
                };
                if let Some(u) = check::answered_unasked(answered, &tally, in_flight) {
                    self.t.log_failed_check(&u);
                    checked = false;
                }
            }
        }
        let elapsed = self.start.elapsed();
        if self.held_s > 0.0 {
            tracing::info!(
                peer = %self.t.peer,
                held_s = self.held_s,
                "held a request/response test's answers back for --max-send-rate"
            );
        }
        if let Some(rr) = spec.as_rr() {
            // Each answered transaction: its request received, its response sent.
            let (transport, datagrams) = match rr.udp {
                Some(_) => (metrics::Transport::Udp, transactions),
                None => (metrics::Transport::Tcp, 0),
            };
            let way = |d, len: u32| {
                let bytes = transactions * u64::from(len);
                (transport, d, metrics::Moved { bytes, datagrams })
            };
            self.t.metrics.finish(
                end.metric_name(),
                Some(vec![
                    way(metrics::Direction::Received, rr.request_len.get()),
                    way(metrics::Direction::Sent, rr.response_len.get()),
                ]),
            );
        }
        log_test(&self.t, spec, end, 0, Some(transactions), elapsed, 0);
        match end {
            TestEnd::Finished { interrupted: false } if checked => SessionEnd::Completed,
            _ => SessionEnd::Other,
        }
    }
}

/// The longest tally a client of `flows` flows sends: its message around at most 48 bytes of
/// JSON a flow (id and count). The server reads at most 64 KiB from a client otherwise, which
/// a tally outgrows at about 2,800 flows; the server then went without it and skipped its
/// check of the client's counts.
fn tally_frame_max(flows: usize) -> u32 {
    let len = 64 * 1024 + flows.saturating_mul(TALLY_BYTES_PER_FLOW);
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// The most JSON a tally takes for one flow: `{"id":65535,"count":18446744073709551615},`
/// is 42 bytes.
const TALLY_BYTES_PER_FLOW: usize = 48;

/// An interval of the schedule, its counts still to come.
fn side_interval(span: Span) -> SideRrInterval {
    SideRrInterval {
        index: span.index,
        start_s: span.start_s,
        end_s: span.end_s,
        omitted: span.omitted,
        transactions: 0,
        retransmits: 0,
        connections: 0,
    }
}

/// Per-interval and per-flow sums of the workers' snapshots.
#[derive(Debug)]
struct Totals {
    workers: usize,
    /// Intervals waiting for every worker's snapshot, by epoch.
    waiting: Vec<(u32, SideRrInterval, usize, bool)>,
    /// The newest epoch each worker answered.
    answered: Vec<u32>,
    flows: Vec<SideRrFlow>,
    measured_retransmits: u64,
    /// `--rr -u`: datagrams not answered, not this test's requests.
    ignored: u64,
}

impl Totals {
    fn new(ids: &[u16], workers: usize) -> Self {
        Totals {
            workers,
            waiting: Vec::new(),
            answered: vec![0; workers],
            flows: ids
                .iter()
                .map(|&flow| SideRrFlow {
                    flow,
                    transactions: 0,
                    retransmits: 0,
                    connections: 0,
                })
                .collect(),
            measured_retransmits: 0,
            ignored: 0,
        }
    }

    fn pending(&mut self, epoch: u32, iv: SideRrInterval, report: bool) {
        self.waiting.push((epoch, iv, 0, report));
    }

    /// Adds `worker`'s snapshot answering `epoch`; returns the intervals every worker has now
    /// answered, oldest first (none when intervals are not reported).
    fn snapshot(
        &mut self,
        worker: usize,
        epoch: u32,
        flows: Vec<FlowSnapshot>,
    ) -> Vec<SideRrInterval> {
        // Epochs this worker slept through: it has nothing separate for them.
        if let Some(prev) = self.answered.get_mut(worker) {
            let skipped = prev.saturating_add(1)..epoch;
            *prev = epoch.max(*prev);
            for w in &mut self.waiting {
                if skipped.contains(&w.0) {
                    w.2 += 1;
                }
            }
        }
        if let Some(pos) = self.waiting.iter().rposition(|(e, ..)| *e <= epoch) {
            self.credit(pos, &flows);
        }
        let mut done = Vec::new();
        while let Some(pos) = self.waiting.iter().position(|w| w.2 >= self.workers) {
            let (_, iv, _, report) = self.waiting.remove(pos);
            if report {
                done.push(iv);
            }
        }
        done
    }

    fn credit(&mut self, pos: usize, flows: &[FlowSnapshot]) {
        let omitted = self.waiting[pos].1.omitted;
        let mut add = SideRrInterval {
            ..self.waiting[pos].1.clone()
        };
        add.transactions = 0;
        add.retransmits = 0;
        add.connections = 0;
        for f in flows {
            self.add_flow(f, omitted);
            add.transactions += f.transactions;
            add.retransmits += f.retransmits;
            add.connections += f.connections;
        }
        let w = &mut self.waiting[pos];
        w.1.transactions += add.transactions;
        w.1.retransmits += add.retransmits;
        w.1.connections += add.connections;
        w.2 += 1;
    }

    fn add_flow(&mut self, f: &FlowSnapshot, omitted: bool) {
        self.ignored += f.udp.map_or(0, |u| u.ignored);
        if let Some(t) = self.flow_mut(f.flow) {
            t.transactions += f.transactions;
            t.retransmits += f.retransmits;
            t.connections += f.connections;
        }
        if !omitted {
            self.measured_retransmits += f.retransmits;
        }
    }

    /// Flow `flow`'s totals. Ids are dense from 0, so its position is its id: a search per
    /// snapshot entry made each interval cost flows² (at 16,384 flows the server spent
    /// seconds there, and its results reached the client late or not at all).
    fn flow_mut(&mut self, flow: u16) -> Option<&mut SideRrFlow> {
        let i = flow as usize;
        if self.flows.get(i).is_some_and(|t| t.flow == flow) {
            return self.flows.get_mut(i);
        }
        self.flows.iter_mut().find(|t| t.flow == flow)
    }

    /// The last, partial interval from the workers' final snapshots.
    fn finish(&mut self, last: Vec<FlowSnapshot>, mut iv: SideRrInterval) -> SideRrInterval {
        for f in &last {
            self.add_flow(f, false);
            iv.transactions += f.transactions;
            iv.retransmits += f.retransmits;
            iv.connections += f.connections;
        }
        iv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(flow: u16, transactions: u64) -> Vec<FlowSnapshot> {
        vec![FlowSnapshot::counted(flow, transactions)]
    }

    fn interval(index: u32) -> SideRrInterval {
        SideRrInterval {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted: false,
            transactions: 0,
            retransmits: 0,
            connections: 0,
        }
    }

    /// At 16,384 flows the server's results outgrew the 1 MiB frame and never reached the
    /// client ("did not send its results"), and the client's tally outgrew what the server
    /// read, so the server skipped its check; both at the largest test and counts.
    #[test]
    fn results_and_tally_of_the_most_flows_fit_their_frames() {
        use crate::proto::{IdCount, MAX_FRAME_LEN, Tally, frame};
        let flows = 65_536;
        let results = Message::RrResults(SideRrResults {
            flows: (0..flows)
                .map(|i| SideRrFlow {
                    flow: i as u16,
                    transactions: u64::MAX,
                    retransmits: u64::MAX,
                    connections: u64::MAX,
                })
                .collect(),
            measured_retransmits: u64::MAX,
            cpu: CpuUsage::default(),
            ignored: u64::MAX,
            held_s: f64::MAX,
        });
        let len = frame::encode(&results).expect("results fit a frame").len();
        assert!(len <= MAX_FRAME_LEN as usize + 4, "{len}");
        let tally = Message::Tally(Tally {
            counts: (0..flows)
                .map(|i| IdCount {
                    id: i as u16,
                    count: u64::MAX,
                })
                .collect(),
        });
        let len = frame::encode(&tally).expect("the tally fits a frame").len() - 4;
        assert!(len <= tally_frame_max(flows) as usize, "{len}");
        assert!(tally_frame_max(flows) <= MAX_FRAME_LEN);
    }

    #[test]
    fn a_worker_that_slept_through_an_interval_does_not_hold_it_back() {
        let mut t = Totals::new(&[0, 1], 2);
        t.pending(1, interval(0), true);
        assert!(t.snapshot(0, 1, snap(0, 10)).is_empty());
        t.pending(2, interval(1), true);
        assert!(t.snapshot(0, 2, snap(0, 10)).is_empty());
        // Worker 1 answers only epoch 2, with both intervals' transactions.
        let done = t.snapshot(1, 2, snap(1, 14));
        let got: Vec<(u32, u64)> = done.iter().map(|i| (i.index, i.transactions)).collect();
        assert_eq!(got, vec![(0, 10), (1, 24)]);
        assert!(t.waiting.is_empty());
        assert_eq!(t.flows.iter().map(|f| f.transactions).sum::<u64>(), 34);
    }
}
