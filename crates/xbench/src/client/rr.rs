//! The client side of a request/response test, in phases: the persistent connections and the
//! server's `Ready` ([`Session::connect_data`]; none with `--crr`) → [`Running::start`] (worker
//! threads drive the flows and record latency) → [`Running::run`] (intervals cut and paired
//! with the server's counts, until the end, the user or a failure) → [`Ended::drain`] (no new
//! transactions; those in flight finish, so both ends count the same ones) →
//! [`Drained::collect`] (`Finish`, the server's counts) → [`Collected::report`] (the totals).
//!
//! Histograms are merged, never percentiles averaged: each worker sends one per interval for
//! all its flows, so the merged figures cost memory per worker, not per flow; a flow's own
//! latency is a small sketch, kept only with `--per-flow`. Not the workers' event loops
//! (`engine::rr::client`) nor the handshake before (`client`).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;

use super::cancel::{GiveUp, interruptible};
use super::config::ClientConfig;
use super::event::{ClientEvent, OnEvent};
use super::flow_plan::{FlowPlan, PortRange};
use super::rr_finish::{RESULTS_WAIT, RrFinish, finish_rr};
use super::session::{ReportBody, Session, ended_by};
use crate::check;
use crate::config::{EndCondition, RrSpec, StreamDirection};
use crate::control::sleep_until_opt;
use crate::engine::rr::client::KeepOpening;
use crate::engine::rr::driver::Timing;
use crate::engine::rr::udp::UdpFlow;
use crate::engine::rr::{
    self, Control, DRAINING, Failures, FlowSnapshot, Report, STOPPED, UdpCounts, Workers,
};
use crate::engine::schedule::{Boundaries, Schedule, Span};
use crate::engine::udp::{socket, wire};
use crate::error::Error;
use crate::latency::{Distribution, FlowSketch};
use crate::proto::{IdCount, Message, Tally};
use crate::report::{
    Attempts, CpuReport, CpuUsage, Opening, Outcome, Pacing, RrFlowSummary, RrInterval, RrReport,
    RrSummary, RrUdpSummary, RttStats, SideRrFlow, SideRrInterval, SideRrResults, StreamInfo,
    Summary, TestReport,
};
use crate::tcp_info;

/// Runs an accepted request/response test and reports it. With `keep_opening` (a `--crr`
/// spec: `--connections-only`'s openers) a new connection that fails is counted by kind and
/// the flow goes on; without, it ends the flow and fails the test.
///
/// `end` ends it early as its end condition would (a completed test, its transactions in
/// flight drained in full: a UDP request until its timeout); `cancel` is the user's
/// interruption, drained briefly.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    mut session: Session,
    config: &ClientConfig,
    spec: &RrSpec,
    keep_opening: Option<KeepOpening>,
    on_event: OnEvent<'_>,
    cancel: impl Future<Output = ()>,
    end: impl Future<Output = ()>,
    mut give_up: GiveUp<impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    tokio::pin!(cancel);
    tokio::pin!(end);
    let flows = spec.flows.as_usize();
    let mut warnings = Vec::new();
    if spec.udp.is_some() {
        // Each flow's socket greets the server's port for it until `Ready` says all arrived.
        let step = super::udp::greet(&mut session, config, flows);
        let (socks, ready) =
            interruptible(step, cancel.as_mut(), "greeting the server's UDP sockets").await?;
        if let Some(w) = round_trip(&session, &[]).and_then(|rtt| unreachable_rate(spec, rtt)) {
            warnings.push(w);
        }
        let (flows, infos) = udp_flows(&session, config, socks, &ready, &mut warnings);
        for w in &warnings {
            on_event(ClientEvent::Warning(w.clone()));
        }
        let data = Data::Udp(flows, infos);
        let running = Running::start(session, config, spec, data, None, warnings, on_event)?;
        let ended = running.run(cancel, end, on_event).await;
        let drained = ended.drain(&mut give_up, on_event).await;
        return Ok(drained.collect(&mut give_up, on_event).await.report(spec));
    }
    let (conns, setup) = connect(
        &mut session,
        config,
        spec,
        &mut warnings,
        on_event,
        cancel.as_mut(),
    )
    .await?;
    if let Some(w) = round_trip(&session, &conns).and_then(|rtt| unreachable_rate(spec, rtt)) {
        warnings.push(w);
    }
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }
    let conns = Data::Tcp(conns);
    let keep_opening = keep_opening.filter(|_| spec.connect_per_transaction);
    let running = Running::start(
        session,
        config,
        spec,
        conns,
        keep_opening,
        warnings,
        on_event,
    )?;
    let ended = running.run(cancel, end, on_event).await;
    let drained = ended.drain(&mut give_up, on_event).await;
    let mut report = drained.collect(&mut give_up, on_event).await.report(spec);
    if let Some(rr) = report.rr.as_mut() {
        rr.setup = setup;
    }
    Ok(report)
}

/// Sizes each flow's UDP socket and describes it: the flows to run, and their streams for
/// the report (the server's sockets as its `Ready` described them).
fn udp_flows(
    session: &Session,
    config: &ClientConfig,
    socks: Vec<(std::net::UdpSocket, crate::proto::DataHello)>,
    ready: &crate::proto::Ready,
    warnings: &mut Vec<String>,
) -> (Vec<UdpFlow>, Vec<StreamInfo>) {
    let window = config.spec.socket.window;
    let mut flows = Vec::with_capacity(socks.len());
    let mut infos = Vec::with_capacity(socks.len());
    for (id, (sock, hello)) in socks.into_iter().enumerate() {
        rr::udp::size_socket(&sock, window, warnings);
        let report = socket::report(&sock, window);
        infos.push(StreamInfo {
            id: id as u16,
            // Requests go this way; each flow's socket carries both.
            direction: StreamDirection::ClientToServer,
            client_addr: sock.local_addr().unwrap_or(session.client_addr),
            server_addr: sock.peer_addr().unwrap_or(session.server_addr),
            server_socket: ready
                .sockets
                .get(id)
                .cloned()
                .unwrap_or_else(|| report.clone()),
            client_socket: report,
        });
        flows.push(UdpFlow {
            id: id as u16,
            sock,
            token: wire::token(&hello.tag),
        });
    }
    (flows, infos)
}

/// Opens the flows' TCP connections: none for --crr, which opens its own as it goes. Flows
/// refused or timed out on the way are counted by kind in the setup returned (none for
/// --crr); with --allow-partial-flows the rest run, and the user is told.
async fn connect(
    session: &mut Session,
    config: &ClientConfig,
    spec: &RrSpec,
    warnings: &mut Vec<String>,
    on_event: OnEvent<'_>,
    cancel: Pin<&mut impl Future<Output = ()>>,
) -> Result<
    (
        Vec<(u16, std::net::TcpStream)>,
        Option<crate::report::ConnectionSetup>,
    ),
    Error,
> {
    let persistent = if spec.connect_per_transaction {
        0
    } else {
        spec.flows.as_usize()
    };
    let (conns, setup) = session
        .connect_partial(
            config,
            persistent,
            config.allow_partial_flows,
            warnings,
            cancel,
        )
        .await?;
    warnings.extend(super::session::partial_warning(
        &setup,
        "flows",
        "measuring",
    ));
    if let Some(e) = super::session::partial_event(&setup) {
        on_event(e);
    }
    Ok((conns, (!spec.connect_per_transaction).then_some(setup)))
}

/// Records in `report` the flows the server's limit (`max` of `asked`) turned away under
/// `--allow-partial-flows`: counted as refused at setup, and `why` among the warnings.
pub(super) fn turned_away(report: &mut TestReport, asked: u32, max: u32, why: String) {
    if let Some(s) = report.rr.as_mut().and_then(|rr| rr.setup.as_mut()) {
        let more = u64::from(asked.saturating_sub(max));
        s.requested += more;
        s.refused += more;
        s.server_limit = Some(max);
    }
    report.warnings.push(why);
}

/// The flows' sockets: TCP connections by flow id, ascending (none with `--crr`; fewer than
/// the flows when some did not open, under `--allow-partial-flows`), or UDP sockets whose
/// greetings the server took (`--rr -u`).
enum Data {
    Tcp(Vec<(u16, std::net::TcpStream)>),
    /// With each flow's addresses and sockets, for the report.
    Udp(Vec<UdpFlow>, Vec<StreamInfo>),
}

/// What every phase of a test holds, from its first transaction to its report.
struct Test<'c> {
    session: Session,
    config: &'c ClientConfig,
    /// This end's intervals and totals, paired with the server's counts.
    acc: Accumulator,
    warnings: Vec<String>,
    /// When transactions started, for the report.
    started_at: SystemTime,
    /// Time zero of latencies, schedules and intervals.
    start: Instant,
    /// `--rr -u`: each flow's UDP socket; TCP flows list none.
    streams: Vec<StreamInfo>,
    /// Where the measured window starts, in seconds since `start`: where the interval that
    /// ended the warm-up closed (late, on a loaded machine: the transactions before it are
    /// left out); `None` while the warm-up lasts.
    measure_from: Option<f64>,
}

/// A test whose workers run transactions.
struct Running<'c> {
    test: Test<'c>,
    workers: Workers,
    reports: mpsc::UnboundedReceiver<Report>,
    boundaries: Boundaries,
}

impl<'c> Running<'c> {
    /// Hands the flows to worker threads, a few flows each (`conns` in flow order; none with
    /// `--crr`), and starts their clock.
    fn start(
        session: Session,
        config: &'c ClientConfig,
        spec: &RrSpec,
        conns: Data,
        keep_opening: Option<KeepOpening>,
        warnings: Vec<String>,
        on_event: OnEvent<'_>,
    ) -> Result<Self, Error> {
        let started_at = SystemTime::now();
        let start = Instant::now();
        let streams = match &conns {
            Data::Udp(_, infos) => infos.clone(),
            Data::Tcp(_) => Vec::new(),
        };
        let (workers, reports) = spawn_workers(&session, config, spec, conns, keep_opening, start)?;
        on_event(ClientEvent::Started {
            server: session.server.clone(),
            streams: streams.clone(),
        });
        let schedule = Schedule::for_spec(&config.spec);
        let mut acc = Accumulator::new(
            spec,
            workers.len(),
            schedule.reports_intervals(),
            config.per_flow,
        );
        acc.keep_opening = keep_opening;
        acc.from_send = config.latency_from_send;
        let test = Test {
            session,
            config,
            acc,
            warnings,
            started_at,
            start,
            streams,
            measure_from: config.spec.omit.is_zero().then_some(0.0),
        };
        Ok(Running {
            test,
            workers,
            reports,
            boundaries: Boundaries::new(start, schedule),
        })
    }

    /// Runs transactions until the end (the end condition or `end`), the user (`cancel`) or
    /// a failure stops them.
    async fn run<C: Future<Output = ()>, E: Future<Output = ()>>(
        mut self,
        mut cancel: Pin<&mut C>,
        mut end: Pin<&mut E>,
        on_event: OnEvent<'_>,
    ) -> Ended<'c> {
        let spec = &self.test.config.spec;
        let deadline = match spec.end {
            EndCondition::Duration(d) => Some(self.test.start + spec.omit + d),
            EndCondition::Bytes(_) => None,
        };
        let mut outcome = Outcome::Completed;
        let mut control_open = true;
        loop {
            let boundary_at = self.boundaries.next_at();
            tokio::select! {
                biased;
                () = &mut cancel => { outcome = Outcome::Interrupted; break; }
                _ = sleep_until_opt(deadline) => break,
                () = &mut end => break,
                r = self.reports.recv() => match r {
                    Some(Report::Failed { flow, error }) => {
                        self.test.acc.flow_error(flow, &error);
                        outcome = Outcome::Failed { error: flow_error(flow, &error) };
                        break;
                    }
                    Some(r) => self.test.acc.report(r, on_event),
                    None => break,
                },
                msg = self.test.session.rd.next() => match msg {
                    Ok(Some(Message::RrInterval(iv))) => self.test.acc.server_interval(iv, on_event),
                    other => {
                        let (error, usable) = ended_by(other, &self.test.session.addr);
                        outcome = Outcome::Failed { error };
                        control_open = usable;
                        break;
                    }
                },
                _ = sleep_until_opt(boundary_at) => {
                    if let Some(span) = self.boundaries.close() {
                        if span.omitted && span.end_s >= spec.omit.as_secs_f64() {
                            self.test.measure_from = Some(span.end_s);
                        }
                        self.test.acc.close_interval(self.workers.next_epoch(), span);
                    }
                }
            }
        }
        Ended {
            running: self,
            outcome,
            control_open,
        }
    }
}

/// Starts the worker threads over the flows; an error stops those already started.
fn spawn_workers(
    session: &Session,
    config: &ClientConfig,
    spec: &RrSpec,
    conns: Data,
    keep_opening: Option<KeepOpening>,
    start: Instant,
) -> Result<(Workers, mpsc::UnboundedReceiver<Report>), Error> {
    let conns = match conns {
        Data::Tcp(c) => c,
        Data::Udp(flows, _) => return spawn_udp_workers(config, spec, flows, start),
    };
    let flows = spec.flows.as_usize();
    let plan = rr::client::Plan {
        request_len: u64::from(spec.request_len.get()),
        response_len: u64::from(spec.response_len.get()),
        timing: timing(config, spec, start, config.stall_timeout),
        connect: match spec.connect_per_transaction {
            // Each flow holds one connection at a time, from its own address of the list.
            true => Some(rr::client::Connect {
                addr: session.server_addr,
                sources: FlowPlan::new(
                    flows,
                    &super::connect::sources(config),
                    PortRange::current_or_default(),
                )?,
                per_second: spec.rate_per_flow.map(|r| r * flows as f64),
                socket: config.spec.socket.clone(),
                cookie: session.cookie,
                key: session.key.clone(),
            }),
            false => None,
        },
        keep_opening,
    };
    let n_workers = rr::worker_count(flows);
    let mut shares: Vec<Vec<(u16, Option<std::net::TcpStream>)>> =
        (0..n_workers).map(|_| Vec::new()).collect();
    if spec.connect_per_transaction {
        for id in 0..flows {
            shares[id % n_workers].push((id as u16, None));
        }
    } else {
        for (i, (id, s)) in conns.into_iter().enumerate() {
            shares[i % n_workers].push((id, Some(s)));
        }
    }
    let control = control_for(config);
    let (tx, reports) = mpsc::unbounded_channel();
    let mut spawned = Vec::with_capacity(n_workers);
    for (i, share) in shares.into_iter().enumerate() {
        let worker_control = Arc::clone(&control);
        match rr::client::spawn(i, plan.clone(), share, worker_control, tx.clone(), flows) {
            Ok(w) => spawned.push(w),
            Err(e) => {
                drop(Workers::new(Arc::clone(&control), spawned));
                return Err(Error::io("starting a request/response worker", e));
            }
        }
    }
    Ok((Workers::new(control, spawned), reports))
}

/// How every client worker paces and times its flows, from `start` on.
fn timing(config: &ClientConfig, spec: &RrSpec, start: Instant, stall_timeout: Duration) -> Timing {
    Timing {
        burst: spec.burst.get() as usize,
        period: spec.period(),
        base: start,
        stall_timeout,
        per_flow: config.per_flow,
        from_send: config.latency_from_send,
    }
}

/// The workers' controls, with a timed test's end mark: they start no transaction due after
/// it, however late this controller wakes to it.
fn control_for(config: &ClientConfig) -> Arc<Control> {
    let control = Control::default();
    if let EndCondition::Duration(d) = config.spec.end {
        control.end_at(crate::latency::as_ns(config.spec.omit.saturating_add(d)));
    }
    Arc::new(control)
}

/// [`spawn_workers`] for `--rr -u`: the same controller protocol over UDP workers.
fn spawn_udp_workers(
    config: &ClientConfig,
    spec: &RrSpec,
    flows: Vec<UdpFlow>,
    start: Instant,
) -> Result<(Workers, mpsc::UnboundedReceiver<Report>), Error> {
    let timeout = spec.udp.unwrap_or_default().timeout;
    let stall_timeout = config.stall_timeout.max(timeout.saturating_mul(2));
    let plan = rr::udp::client::Plan {
        request_len: spec.request_len.get() as usize,
        response_len: spec.response_len.get() as usize,
        timing: timing(config, spec, start, stall_timeout),
        timeout,
    };
    let total = flows.len();
    let n_workers = rr::worker_count(total);
    let mut shares: Vec<Vec<UdpFlow>> = (0..n_workers).map(|_| Vec::new()).collect();
    for (i, f) in flows.into_iter().enumerate() {
        shares[i % n_workers].push(f);
    }
    let control = control_for(config);
    let (tx, reports) = mpsc::unbounded_channel();
    let mut spawned = Vec::with_capacity(n_workers);
    for (i, share) in shares.into_iter().enumerate() {
        let worker_control = Arc::clone(&control);
        match rr::udp::client::spawn(i, plan.clone(), share, worker_control, tx.clone(), total) {
            Ok(w) => spawned.push(w),
            Err(e) => {
                drop(Workers::new(Arc::clone(&control), spawned));
                return Err(Error::io("starting a request/response worker", e));
            }
        }
    }
    Ok((Workers::new(control, spawned), reports))
}

/// A test whose transactions have stopped starting.
struct Ended<'c> {
    running: Running<'c>,
    outcome: Outcome,
    /// The control connection still carries messages.
    control_open: bool,
}

impl<'c> Ended<'c> {
    /// No new transactions; lets those in flight finish (bounded by the drain timeout) so
    /// both ends count the same ones, then takes the workers' last figures and stops them.
    /// `give_up` (a second Ctrl-C) abandons the transactions in flight at once.
    ///
    /// Longer than most: one `select!` over the workers' reports, the drain deadline and a
    /// second Ctrl-C, whose arms share the loop's state (workers done, abandoned, outcome);
    /// split up, that state would travel through every piece.
    async fn drain<G: Future<Output = ()>>(
        self,
        give_up: &mut GiveUp<G>,
        on_event: OnEvent<'_>,
    ) -> Drained<'c> {
        // Long on purpose: one select loop whose arms share the drain's state (workers done,
        // abandoned, deadline, outcome, last flows and latency) until every worker has reported.
        let Ended {
            running: mut r,
            mut outcome,
            control_open,
        } = self;
        let interrupted = outcome == Outcome::Interrupted;
        // A UDP request in flight ends by its timeout at the latest.
        let udp_timeout = (r.test.config.spec.as_rr())
            .and_then(|s| s.udp)
            .map_or(Duration::ZERO, |u| u.timeout + Duration::from_millis(500));
        // An opener's attempt ends by its timeout at the latest, and is then counted.
        let attempt_timeout = (r.test.acc.keep_opening)
            .map_or(Duration::ZERO, |k| k.timeout + Duration::from_millis(500));
        let drain_limit = if interrupted {
            r.test.config.drain_timeout.min(Duration::from_secs(2))
        } else {
            (r.test.config.drain_timeout)
                .max(udp_timeout)
                .max(attempt_timeout)
        };
        let failed = matches!(outcome, Outcome::Failed { .. });
        // The window ends here, or at the end mark if that has passed (the workers keep it
        // themselves); no transaction due after it starts.
        let spec = &r.test.config.spec;
        let cut = match spec.end {
            EndCondition::Duration(d) => r.test.start.elapsed().min(spec.omit.saturating_add(d)),
            EndCondition::Bytes(_) => r.test.start.elapsed(),
        };
        r.workers.end_at(crate::latency::as_ns(cut));
        r.workers.set_state(if failed { STOPPED } else { DRAINING });
        let mut drain_until = tokio::time::Instant::now() + drain_limit;
        let n_workers = r.workers.len();
        let (mut done, mut abandoned) = (0, false);
        let mut cpu = CpuUsage::default();
        let mut last: Vec<FlowSnapshot> = Vec::new();
        let mut last_latency = Distribution::new();
        while done < n_workers {
            tokio::select! {
                rep = r.reports.recv() => match rep {
                    Some(Report::Done { flows, latency, cpu: c }) => {
                        done += 1;
                        cpu += c;
                        last.extend(flows);
                        if let Some(rec) = &latency {
                            last_latency.add_recorder(rec);
                        }
                    }
                    Some(Report::Failed { flow, error }) => {
                        r.test.acc.flow_error(flow, &error);
                        if outcome == Outcome::Completed {
                            outcome = Outcome::Failed { error: flow_error(flow, &error) };
                        }
                    }
                    Some(rep) => r.test.acc.report(rep, on_event),
                    None => break,
                },
                _ = tokio::time::sleep_until(drain_until), if !abandoned => {
                    abandoned = true;
                    r.test.warnings.push(format!(
                        "transactions still unanswered {drain_limit:?} after the end were abandoned"
                    ));
                    r.workers.set_state(STOPPED);
                }
                () = give_up.wait(), if !abandoned => {
                    abandoned = true;
                    outcome = Outcome::Interrupted;
                    r.test.warnings.push(
                        "interrupted again while finishing: transactions still in flight were \
                         abandoned, and the server's counts not waited for"
                            .into(),
                    );
                    r.workers.set_state(STOPPED);
                    drain_until = tokio::time::Instant::now();
                }
                // A worker told to stop answers within a blocking call's slice; one that does
                // not must not hang the test (its last partial interval is lost, and said so).
                _ = tokio::time::sleep_until(drain_until + Duration::from_secs(2)), if abandoned => {
                    r.test.warnings.push(format!(
                        "{} of {n_workers} request/response workers did not stop when told to; \
                         their last partial interval is missing",
                        n_workers - done
                    ));
                    break;
                }
            }
        }
        let Running {
            mut test,
            workers,
            mut boundaries,
            ..
        } = r;
        let now = Instant::now();
        test.acc
            .finish_interval(last, last_latency, boundaries.last(now), on_event);
        // The workers are done: their threads go before the server is asked for its counts.
        drop(workers);
        Drained {
            test,
            outcome,
            control_open,
            cpu,
            cut,
        }
    }
}

/// A test whose workers have stopped, with every figure of this end in.
struct Drained<'c> {
    test: Test<'c>,
    outcome: Outcome,
    control_open: bool,
    /// CPU time of the workers.
    cpu: CpuUsage,
    /// When the workers were told to start no more transactions, since the start.
    cut: Duration,
}

impl<'c> Drained<'c> {
    /// Sends `Finish` and waits (at most 5 s, and not after `give_up`) for the server's counts
    /// ([`finish_rr`]); says in this test's words what a missing answer means.
    async fn collect<G: Future<Output = ()>>(
        self,
        give_up: &mut GiveUp<G>,
        on_event: OnEvent<'_>,
    ) -> Collected<'c> {
        let Drained {
            test: mut t,
            mut outcome,
            control_open,
            cpu,
            cut,
        } = self;
        let interrupted = outcome == Outcome::Interrupted;
        let addr = t.session.addr.clone();
        let end = finish_rr(
            &mut t.session,
            interrupted,
            control_open,
            give_up,
            &mut t.acc,
            |acc, iv| acc.server_interval(iv, on_event),
            Accumulator::tally,
        )
        .await;
        let mut server: Option<SideRrResults> = None;
        let mut missing_why = None;
        match end {
            RrFinish::Results(res) => server = Some(res),
            RrFinish::NotSent(why) => missing_why = Some(why),
            RrFinish::GaveUp => {
                outcome = Outcome::Interrupted;
                t.warnings.push(
                    "interrupted again while finishing: the server's counts were not waited \
                     for"
                    .into(),
                );
            }
            RrFinish::ServerError(message) => {
                t.warnings.push(format!("the server reported: {message}"));
                missing_why = Some(format!("the server ended the test: {message}"));
            }
            RrFinish::TimedOut => {
                t.warnings.push(format!("{addr} did not send its results"));
                missing_why = Some(super::outcome::results_timed_out(&addr, RESULTS_WAIT));
            }
            RrFinish::Closed => {
                t.warnings.push(format!("{addr} did not send its results"));
                missing_why = Some(format!(
                    "{addr} closed the control connection before sending its results"
                ));
            }
        }
        Collected {
            test: t,
            outcome,
            cpu,
            cut,
            server,
            missing_why,
        }
    }
}

/// The warning for a server that held its answers back to stay within its `--max-send-rate`:
/// the latency and rate measured then are partly the server's cap, not the path's.
fn held_back(server: &SideRrResults) -> Option<String> {
    (server.held_s > 0.0).then(|| {
        format!(
            "the server held its answers back for {:.3} s in all (summed over its workers) to \
             stay within its --max-send-rate: latency and transactions/s measure that cap as \
             much as the path",
            server.held_s
        )
    })
}

/// Both ends' figures, ready to report.
struct Collected<'c> {
    test: Test<'c>,
    outcome: Outcome,
    cpu: CpuUsage,
    cut: Duration,
    server: Option<SideRrResults>,
    /// Why the server's counts did not come (when they did not).
    missing_why: Option<String>,
}

impl Collected<'_> {
    /// The report: totals over the measured time, CPU per transaction, the warnings.
    fn report(self, spec: &RrSpec) -> TestReport {
        let Collected {
            test,
            outcome,
            cpu,
            cut,
            server,
            missing_why,
        } = self;
        let Test {
            mut session,
            config,
            acc,
            mut warnings,
            started_at,
            streams,
            measure_from,
            ..
        } = test;
        // From where the warm-up's interval closed (late, on a loaded machine) to the end mark
        // or the interruption.
        let measured_s = measure_from.map_or(0.0, |from| (cut.as_secs_f64() - from).max(0.0));
        let tally = acc.tally();
        if let Some(w) = server.as_ref().and_then(held_back) {
            warnings.push(w);
        }
        let rr = acc.into_report(spec, server.as_ref(), measured_s, &mut warnings);
        let outcome = match answered_unasked(spec, &rr, tally) {
            Some(error) if outcome != Outcome::Interrupted || server.is_some() => {
                Outcome::Failed { error }
            }
            _ => outcome,
        };
        let outcome = match server {
            Some(_) => outcome,
            None => super::outcome::without_server_results(
                outcome,
                "the server's counts (the transactions it answered, by flow, which show it \
                 answered only what this client asked) and its CPU time",
                missing_why.as_deref(),
            ),
        };
        let transactions = rr.summary.total_transactions;
        let per_tx =
            |c: CpuUsage| (transactions > 0).then(|| c.total_s() * 1e6 / transactions as f64);
        let cpu = CpuReport {
            client: cpu,
            server: server.as_ref().map(|s| s.cpu),
            client_s_per_gb: None,
            server_s_per_gb: None,
            client_us_per_transaction: per_tx(cpu),
            server_us_per_transaction: server.as_ref().and_then(|s| per_tx(s.cpu)),
        };
        let body = ReportBody {
            streams,
            intervals: Vec::new(),
            summary: Summary {
                directions: Vec::new(),
                measured_s,
            },
            rr: Some(rr),
            udp: None,
            cpu,
            outcome,
            warnings,
        };
        session.report(config, started_at, body)
    }
}

/// The first flow whose server answered more transactions than this client asked (see
/// [`check::answered_unasked`]), as the test's error.
///
/// `tally` is what this end sent the server: completed transactions, or with UDP the requests
/// sent (a server answers each at most once, so none may be over).
fn answered_unasked(spec: &RrSpec, rr: &RrReport, tally: Tally) -> Option<String> {
    let in_flight = if spec.udp.is_some() {
        0
    } else if spec.connect_per_transaction {
        1
    } else {
        u64::from(spec.burst.get())
    };
    let answered = (rr.flows.iter()).filter_map(|f| Some((f.flow, f.server_transactions?)));
    check::answered_unasked(answered, &tally, in_flight).map(|u| u.to_string())
}

fn flow_error(flow: Option<u16>, error: &str) -> String {
    match flow {
        Some(flow) => format!("flow {flow}: {error}"),
        None => error.to_owned(),
    }
}

/// One interval being assembled from the workers' snapshots.
#[derive(Debug)]
struct Pending {
    span: Span,
    reported: usize,
    flows: Vec<FlowSnapshot>,
    /// The workers' latency histograms, merged as they arrive.
    latency: Distribution,
}

/// A finished interval waiting for the server's counts.
#[derive(Debug)]
struct Ready {
    client: Option<RrInterval>,
    server: Option<SideRrInterval>,
}

#[derive(Debug, Default)]
struct FlowTotals {
    transactions: u64,
    total_transactions: u64,
    retransmits: u64,
    /// `--per-flow`: the flow's latency after the warm-up.
    sketch: Option<FlowSketch>,
    error: Option<String>,
    /// `--rr -u`: after the warm-up, and over the whole test.
    udp: UdpCounts,
    total_udp: UdpCounts,
    /// Openers: failed new connections over the whole test, for the tally.
    total_failures: Failures,
}

/// Turns worker snapshots into intervals and totals.
#[derive(Debug)]
struct Accumulator {
    workers: usize,
    report_intervals: bool,
    pending: BTreeMap<u32, Pending>,
    /// The newest epoch each worker answered.
    answered: Vec<u32>,
    ready: BTreeMap<u32, Ready>,
    done: Vec<RrInterval>,
    total: Distribution,
    retransmits: u64,
    connections: u64,
    rtt: Option<(u32, f64, u32, u64)>,
    flows: Vec<FlowTotals>,
    /// `--rr -u`: the flows' losses and strays after the warm-up; `None` for TCP.
    udp: Option<UdpCounts>,
    /// `--connections-only`'s openers: failed new connections are counted, not fatal.
    keep_opening: Option<KeepOpening>,
    /// Latency from each request's send ([`ClientConfig::latency_from_send`]): pacing then
    /// corrects no coordinated omission.
    from_send: bool,
    /// Openers: failed new connections after the warm-up.
    failures: Failures,
}

impl Accumulator {
    fn new(spec: &RrSpec, workers: usize, report_intervals: bool, per_flow: bool) -> Self {
        let n = spec.flows.as_usize();
        Accumulator {
            workers,
            report_intervals,
            pending: BTreeMap::new(),
            answered: vec![0; workers],
            ready: BTreeMap::new(),
            done: Vec::new(),
            total: Distribution::new(),
            retransmits: 0,
            connections: 0,
            rtt: None,
            udp: spec.udp.map(|_| UdpCounts::default()),
            keep_opening: None,
            from_send: false,
            failures: Failures::default(),
            flows: (0..n)
                .map(|_| FlowTotals {
                    sketch: per_flow.then(FlowSketch::new),
                    ..FlowTotals::default()
                })
                .collect(),
        }
    }

    /// An interval boundary passed: its figures arrive as snapshots answering `epoch`.
    fn close_interval(&mut self, epoch: u32, span: Span) {
        let pending = Pending {
            span,
            reported: 0,
            flows: Vec::new(),
            latency: Distribution::new(),
        };
        self.pending.insert(epoch, pending);
    }

    fn report(&mut self, r: Report, on_event: OnEvent<'_>) {
        let Report::Snapshot {
            worker,
            epoch,
            flows,
            latency,
        } = r
        else {
            return;
        };
        // A worker that slept through epochs answers only the newest, with everything since
        // its last snapshot: it has nothing separate for the ones it skipped.
        if let Some(prev) = self.answered.get_mut(worker) {
            let first_skipped = prev.saturating_add(1);
            if epoch > first_skipped {
                for (_, p) in self.pending.range_mut(first_skipped..epoch) {
                    p.reported += 1;
                }
            }
            *prev = epoch.max(*prev);
        }
        if let Some((_, p)) = self.pending.range_mut(..=epoch).next_back() {
            p.flows.extend(flows);
            if let Some(rec) = &latency {
                p.latency.add_recorder(rec);
            }
            p.reported += 1;
        }
        let complete: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.reported >= self.workers)
            .map(|(e, _)| *e)
            .collect();
        for e in complete {
            if let Some(p) = self.pending.remove(&e) {
                self.absorb(p, on_event);
            }
        }
    }

    /// The last interval, `span`, from the workers' final figures (`last`, and their merged
    /// `latency`).
    fn finish_interval(
        &mut self,
        last: Vec<FlowSnapshot>,
        latency: Distribution,
        span: Span,
        on_event: OnEvent<'_>,
    ) {
        // Snapshots still pending (a worker never answered) are folded in as they are.
        let stale: Vec<Pending> = std::mem::take(&mut self.pending).into_values().collect();
        for p in stale {
            self.absorb(p, on_event);
        }
        let p = Pending {
            span,
            reported: self.workers,
            flows: last,
            latency,
        };
        self.absorb(p, on_event);
    }

    /// Merges one interval's snapshots and adds them to the totals.
    fn absorb(&mut self, p: Pending, on_event: OnEvent<'_>) {
        // Long on purpose: one pass over an interval's flows adds to its sums, each flow's
        // totals and the test's totals at once; apart, each would walk the flows again.
        let dist = &p.latency;
        let mut transactions = 0;
        let mut retransmits = 0;
        let mut connections = 0;
        let mut srtt_sum = 0.0;
        let mut srtt_n = 0u64;
        let mut udp = UdpCounts::default();
        let mut failures = Failures::default();
        for f in &p.flows {
            transactions += f.transactions;
            failures += f.failures;
            let counts = f.udp.unwrap_or_default();
            udp += counts;
            retransmits += f.retransmits;
            connections += f.connections;
            if let Some(rtt) = f.srtt_us {
                srtt_sum += f64::from(rtt);
                srtt_n += 1;
                let r = self.rtt.get_or_insert((rtt, 0.0, rtt, 0));
                r.0 = r.0.min(rtt);
                r.2 = r.2.max(rtt);
                r.1 += f64::from(rtt);
                r.3 += 1;
            }
            if let Some(t) = self.flows.get_mut(usize::from(f.flow)) {
                t.total_transactions += f.transactions;
                t.total_udp += counts;
                t.total_failures += f.failures;
                if !p.span.omitted {
                    t.udp += counts;
                    t.transactions += f.transactions;
                    t.retransmits += f.retransmits;
                    if let (Some(t), Some(s)) = (t.sketch.as_mut(), &f.sketch) {
                        t.merge(s);
                    }
                }
            }
        }
        if !p.span.omitted {
            self.total.add(dist);
            if let Some(u) = self.udp.as_mut() {
                *u += udp;
            }
            self.retransmits += retransmits;
            self.connections += connections;
            self.failures += failures;
        }
        let Span {
            index,
            start_s,
            end_s,
            omitted,
        } = p.span;
        let span = end_s - start_s;
        let iv = RrInterval {
            index,
            start_s,
            end_s,
            omitted,
            transactions,
            transactions_per_second: if span > 0.0 {
                transactions as f64 / span
            } else {
                0.0
            },
            latency: dist.stats(),
            retransmits,
            server_retransmits: None,
            srtt_us: (srtt_n > 0).then(|| srtt_sum / srtt_n as f64),
            connections,
            histogram: dist.encode(),
            lost: self.udp.map(|_| udp.lost),
            attempts: self.keep_opening.map(|_| attempts(transactions, &failures)),
        };
        if !self.report_intervals {
            return;
        }
        self.ready.entry(iv.index).or_insert(Ready {
            client: None,
            server: None,
        });
        if let Some(r) = self.ready.get_mut(&iv.index) {
            r.client = Some(iv);
        }
        self.emit(false, on_event);
    }

    fn server_interval(&mut self, iv: SideRrInterval, on_event: OnEvent<'_>) {
        if !self.report_intervals {
            return;
        }
        // Counts for an interval that already went out without them (they came more than an
        // interval late: a loaded path or machine) complete it in the report. Waiting in
        // `ready`, they would have no client interval left to come and would hold back every
        // interval after them.
        if self.done.last().is_some_and(|d| d.index >= iv.index) {
            if let Ok(k) = self.done.binary_search_by_key(&iv.index, |d| d.index) {
                self.done[k].server_retransmits = Some(iv.retransmits);
            }
            return;
        }
        let r = self.ready.entry(iv.index).or_insert(Ready {
            client: None,
            server: None,
        });
        r.server = Some(iv);
        self.emit(false, on_event);
    }

    /// Emits finished intervals in order; one whose server counts are more than one interval
    /// late (or never coming, with `all`) goes out without them.
    fn emit(&mut self, all: bool, on_event: OnEvent<'_>) {
        let newest_client = self
            .ready
            .iter()
            .rev()
            .find(|(_, r)| r.client.is_some())
            .map(|(i, _)| *i);
        while let Some((&i, r)) = self.ready.first_key_value() {
            // Server counts whose client interval will never come (the client's come in
            // order, and a newer one is here, or the test is over) have nothing to go with.
            if r.client.is_none() && (all || newest_client.is_some_and(|n| n > i)) {
                self.ready.pop_first();
                continue;
            }
            let late = newest_client.is_some_and(|n| n > i + 1);
            if r.client.is_none() || !(r.server.is_some() || late || all) {
                break;
            }
            let Some((_, r)) = self.ready.pop_first() else {
                break;
            };
            if let Some(mut iv) = r.client {
                iv.server_retransmits = r.server.map(|s| s.retransmits);
                on_event(ClientEvent::RrInterval(iv.clone()));
                self.done.push(iv);
            }
        }
    }

    fn flow_error(&mut self, flow: Option<u16>, error: &str) {
        if let Some(f) = flow.and_then(|flow| self.flows.get_mut(usize::from(flow))) {
            f.error.get_or_insert_with(|| error.to_owned());
        }
    }

    fn into_report(
        mut self,
        spec: &RrSpec,
        server: Option<&SideRrResults>,
        measured_s: f64,
        warnings: &mut Vec<String>,
    ) -> RrReport {
        let mut sink = |_e: ClientEvent| {};
        self.emit(true, &mut sink);
        let transactions: u64 = self.flows.iter().map(|f| f.transactions).sum();
        let total_transactions: u64 = self.flows.iter().map(|f| f.total_transactions).sum();
        let server_total = server.map(|s| s.flows.iter().map(|f| f.transactions).sum::<u64>());
        // An opener's attempt that failed after its request left may have been answered.
        let failed_attempts: u64 = self.flows.iter().map(|f| f.total_failures.total()).sum();
        if let Some(st) = server_total
            && (st < total_transactions || st > total_transactions + failed_attempts)
            && self.udp.is_none()
        {
            warnings.push(format!(
                "the server counted {st} transactions, this client {total_transactions}: \
                     some requests were cut short at the end"
            ));
        }
        let tps = if measured_s > 0.0 {
            transactions as f64 / measured_s
        } else {
            0.0
        };
        let pacing = pacing(spec, tps, warnings);
        let flows = self.flow_summaries(server);
        let udp = self.udp_summary(spec, transactions, server);
        RrReport {
            intervals: self.done,
            summary: RrSummary {
                transactions,
                seconds: measured_s,
                transactions_per_second: tps,
                latency: self.total.stats(),
                coordinated_omission_corrected: spec.rate_per_flow.is_some() && !self.from_send,
                retransmits: self.retransmits,
                server_retransmits: server.map(|s| s.measured_retransmits),
                rtt: self.rtt.map(|(min, sum, max, n)| RttStats {
                    min_us: min,
                    mean_us: sum / n as f64,
                    max_us: max,
                }),
                total_transactions,
                server_transactions: server_total,
                connections: self.connections,
                server_connections: server.map(|s| s.flows.iter().map(|f| f.connections).sum()),
                pacing,
                histogram: self.total.encode(),
                udp,
            },
            flows,
            setup: None,
            held: None,
            opening: self.keep_opening.map(|k| Opening {
                attempts: attempts(transactions, &self.failures),
                timeout_s: k.timeout.as_secs_f64(),
            }),
        }
    }
}

/// The attempts of `opened` connections and `failures` beside them.
fn attempts(opened: u64, failures: &Failures) -> Attempts {
    Attempts::new(opened, failures.refused, failures.timed_out, failures.reset)
}

impl Accumulator {
    /// Each flow's completed transactions over the whole test, for the server's check; with
    /// UDP the requests sent, since the server answers requests whose responses may be lost;
    /// for openers, their failed attempts too, since one may have failed after its request
    /// was answered (and each carried one request at most).
    fn tally(&self) -> Tally {
        Tally {
            counts: (self.flows.iter().enumerate())
                .map(|(i, f)| IdCount {
                    id: i as u16,
                    count: if self.udp.is_some() {
                        f.total_udp.requests
                    } else if self.keep_opening.is_some() {
                        f.total_transactions + f.total_failures.total()
                    } else {
                        f.total_transactions
                    },
                })
                .collect(),
        }
    }

    /// `--rr -u`: lost, late and stray datagrams (`transactions`: completed in the window).
    fn udp_summary(
        &self,
        spec: &RrSpec,
        transactions: u64,
        server: Option<&SideRrResults>,
    ) -> Option<RrUdpSummary> {
        let u = self.udp?;
        let ended = transactions + u.lost;
        let total = |get: fn(&UdpCounts) -> u64| self.flows.iter().map(|f| get(&f.total_udp)).sum();
        Some(RrUdpSummary {
            timeout_s: spec.udp.unwrap_or_default().timeout.as_secs_f64(),
            lost: u.lost,
            lost_percent: if ended > 0 {
                u.lost as f64 * 100.0 / ended as f64
            } else {
                0.0
            },
            late: u.late,
            duplicates: u.duplicates,
            ignored: u.ignored,
            total_requests: total(|c| c.requests),
            total_lost: total(|c| c.lost),
            server_ignored: server.map(|s| s.ignored),
        })
    }

    /// Each flow's totals beside the server's count of it.
    fn flow_summaries(&self, server: Option<&SideRrResults>) -> Vec<RrFlowSummary> {
        self.flows
            .iter()
            .enumerate()
            .map(|(i, f)| RrFlowSummary {
                flow: i as u16,
                transactions: f.transactions,
                total_transactions: f.total_transactions,
                server_transactions: server
                    .and_then(|s| server_flow(&s.flows, i))
                    .map(|x| x.transactions),
                latency: f.sketch.as_ref().and_then(FlowSketch::summary),
                retransmits: f.retransmits,
                error: f.error.clone(),
                lost: self.udp.map(|_| f.udp.lost),
            })
            .collect()
    }
}

/// The server's figures of flow `i`. It lists its flows in id order, so `i` is looked at
/// first: a search per flow cost flows² (134 million comparisons at 16,384 flows).
fn server_flow(flows: &[SideRrFlow], i: usize) -> Option<&SideRrFlow> {
    match flows.get(i) {
        Some(x) if x.flow as usize == i => Some(x),
        _ => flows.iter().find(|x| x.flow as usize == i),
    }
}

/// The shortest round trip the kernel has seen on the control connection or on any data
/// connection, before the first transaction: after the handshake, the exchanges that set up the
/// test. The shortest, so a warning built on it holds even on the path's best behaviour.
fn round_trip(session: &Session, conns: &[(u16, std::net::TcpStream)]) -> Option<Duration> {
    let control = tcp_info::read(session.wr.as_ref()).ok();
    let data = conns.iter().filter_map(|(_, s)| tcp_info::read(s).ok());
    control
        .into_iter()
        .chain(data)
        .map(|i| i.min_rtt_us.unwrap_or(i.srtt_us))
        .filter(|&us| us > 0)
        .min()
        .map(|us| Duration::from_micros(u64::from(us)))
}

/// Share of a flow's most transactions per second that a suggested setting aims at: at the
/// very limit any server time or jitter puts the flow behind again.
const HEADROOM: f64 = 0.8;

/// The warning, before a paced test starts, that one flow cannot keep its `--rate`: a flow has
/// at most `--burst` transactions in flight and each takes a round trip (two with `--crr`, the
/// connection's handshake and then the exchange), so it completes at most burst ÷ RTT per
/// second. Asked for more, it falls further behind its schedule every second, and latencies
/// measured from the intended start grow with the backlog instead of showing the path. `None`
/// when the rate is possible, or no rate was asked.
pub(crate) fn unreachable_rate(spec: &RrSpec, rtt: Duration) -> Option<String> {
    let rate = spec.rate_per_flow?;
    let crr = spec.connect_per_transaction;
    let round_trips = if crr { 2.0 } else { 1.0 };
    let in_flight = if crr { 1 } else { spec.burst.get() };
    let per_flow_max = f64::from(in_flight) / (round_trips * rtt.as_secs_f64());
    if rate <= per_flow_max {
        return None;
    }
    let flows = spec.flows.get();
    let total = rate * f64::from(flows);
    let aim = per_flow_max * HEADROOM;
    let needed = (total / aim).ceil();
    let flows_tip = if needed <= f64::from(crate::config::MAX_FLOWS) {
        format!(
            "--flows {needed:.0} --rate {} keeps the {} per second in all",
            per_second(total / needed),
            per_second(total)
        )
    } else {
        format!(
            "even --flows {} cannot carry {} per second",
            crate::config::MAX_FLOWS,
            per_second(total)
        )
    };
    let burst_tip = if crr {
        String::new()
    } else {
        let burst = (rate * rtt.as_secs_f64() / HEADROOM).ceil();
        if burst <= f64::from(crate::config::MAX_BURST) {
            format!(", or --burst {burst:.0} keeps that many in flight per flow")
        } else {
            String::new()
        }
    };
    Some(format!(
        "--rate asks each flow for a transaction every {} ({}/s), but a round trip takes {} \
         here and a flow has {}: one flow completes at most {}/s, falls further behind every \
         second, and its latencies would measure that backlog, not the path. Spread the rate \
         over more flows: {flows_tip}{burst_tip}",
        gap(1.0 / rate),
        per_second(rate),
        gap(rtt.as_secs_f64()),
        if crr {
            "a new connection per transaction (two round trips)".to_owned()
        } else if in_flight == 1 {
            "one transaction in flight".to_owned()
        } else {
            format!("{in_flight} transactions in flight")
        },
        per_second(per_flow_max),
    ))
}

/// A rate in transactions per second, with no more digits than it needs.
fn per_second(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A time between events: µs below a millisecond, else ms.
fn gap(secs: f64) -> String {
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else {
        format!("{:.1} ms", secs * 1e3)
    }
}

/// What a paced test asked for and achieved (`tps`, transactions per second), with a warning
/// when it did not keep up.
fn pacing(spec: &RrSpec, tps: f64, warnings: &mut Vec<String>) -> Option<Pacing> {
    let pacing = spec.rate_per_flow.map(|r| {
        let asked = r * f64::from(spec.flows.get());
        Pacing {
            asked_per_second: asked,
            achieved_per_second: tps,
            kept_up: tps >= asked * 0.99,
        }
    });
    if let Some(p) = pacing.filter(|p| !p.kept_up) {
        warnings.push(format!(
            "asked for {:.0} transactions/s, achieved {:.0}/s: the path or the hosts cannot \
             keep this rate; latencies are measured from each transaction's intended start \
             and include the time it waited",
            p.asked_per_second, p.achieved_per_second
        ));
    }
    pacing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paced(rate: f64, flows: u16, burst: u32, crr: bool) -> RrSpec {
        RrSpec {
            flows: crate::config::FlowCount::new(flows.into()).expect("flows"),
            burst: std::num::NonZeroU32::new(burst).expect("burst"),
            connect_per_transaction: crr,
            rate_per_flow: Some(rate),
            ..RrSpec::default()
        }
    }

    /// The issue-21 case: `--rate 10ms` on a 40 ms path. One flow manages 25/s of the 100/s
    /// asked; 5 flows at 20/s (80 % of what each can) carry the same 100/s.
    #[test]
    fn a_rate_faster_than_a_round_trip_is_named_with_flows_that_carry_it() {
        let rtt = Duration::from_millis(40);
        let w = unreachable_rate(&paced(100.0, 1, 1, false), rtt).expect("a warning");
        assert!(w.contains("every 10.0 ms (100/s)"), "{w}");
        assert!(w.contains("a round trip takes 40.0 ms"), "{w}");
        assert!(w.contains("at most 25.0/s"), "{w}");
        assert!(
            w.contains("--flows 5 --rate 20.0 keeps the 100 per second"),
            "{w}"
        );
        assert!(w.contains("--burst 5"), "{w}");
        // Several flows asked: the total is what the tip keeps.
        let w = unreachable_rate(&paced(100.0, 4, 1, false), rtt).expect("a warning");
        assert!(
            w.contains("--flows 20 --rate 20.0 keeps the 400 per second"),
            "{w}"
        );
    }

    #[test]
    fn a_rate_a_flow_can_keep_is_not_warned_about() {
        let rtt = Duration::from_millis(40);
        assert_eq!(unreachable_rate(&paced(24.0, 1, 1, false), rtt), None);
        // 4 in flight: 100/s per flow is possible.
        assert_eq!(unreachable_rate(&paced(100.0, 1, 4, false), rtt), None);
        assert_eq!(unreachable_rate(&RrSpec::default(), rtt), None);
    }

    /// --crr pays a handshake per transaction: two round trips, and no --burst to suggest.
    #[test]
    fn connect_per_transaction_counts_two_round_trips() {
        let rtt = Duration::from_millis(10);
        assert_eq!(unreachable_rate(&paced(49.0, 1, 1, true), rtt), None);
        let w = unreachable_rate(&paced(60.0, 1, 1, true), rtt).expect("a warning");
        assert!(w.contains("two round trips"), "{w}");
        assert!(w.contains("at most 50.0/s"), "{w}");
        assert!(!w.contains("--burst"), "{w}");
    }

    #[test]
    fn a_rate_no_number_of_flows_can_carry_says_so() {
        let w = unreachable_rate(&paced(1e9, 4096, 1, false), Duration::from_millis(100))
            .expect("a warning");
        assert!(w.contains("even --flows 65536 cannot carry"), "{w}");
    }

    fn snap(worker: usize, epoch: u32, flow: u16, transactions: u64) -> Report {
        Report::Snapshot {
            worker,
            epoch,
            flows: vec![FlowSnapshot::counted(flow, transactions)],
            latency: None,
        }
    }

    /// Openers (`--connections-only`): failed attempts are counted by kind in the interval
    /// they ended in and in the totals, never as transactions, and the tally the server
    /// checks allows one answered request for each.
    #[test]
    fn failed_attempts_are_counted_by_kind_and_never_as_transactions() {
        let spec = RrSpec {
            flows: crate::config::FlowCount::new(2).unwrap(),
            connect_per_transaction: true,
            ..RrSpec::default()
        };
        let mut acc = Accumulator::new(&spec, 1, true, false);
        acc.keep_opening = Some(KeepOpening {
            timeout: Duration::from_secs(3),
        });
        let mut seen = Vec::new();
        let mut on_event = |ev: ClientEvent| {
            if let ClientEvent::RrInterval(iv) = ev {
                seen.push((iv.transactions, iv.attempts));
            }
        };
        let flow = |flow, transactions, refused, timed_out, reset| FlowSnapshot {
            connections: transactions + refused + timed_out + reset,
            failures: Failures {
                refused,
                timed_out,
                reset,
            },
            ..FlowSnapshot::counted(flow, transactions)
        };
        let span = Span {
            index: 0,
            start_s: 0.0,
            end_s: 1.0,
            omitted: false,
        };
        acc.close_interval(1, span);
        let snap = Report::Snapshot {
            worker: 0,
            epoch: 1,
            flows: vec![flow(0, 6, 2, 1, 0), flow(1, 4, 0, 0, 1)],
            latency: None,
        };
        acc.report(snap, &mut on_event);
        let last = vec![flow(0, 5, 0, 0, 0), flow(1, 5, 3, 0, 0)];
        let span = Span {
            index: 1,
            start_s: 1.0,
            end_s: 2.0,
            omitted: false,
        };
        acc.finish_interval(last, Distribution::new(), span, &mut on_event);
        let mut warnings = Vec::new();
        let tally = acc.tally();
        let rr = acc.into_report(&spec, None, 2.0, &mut warnings);
        // Without the server's counts, the intervals go out with the report.
        assert!(seen.is_empty());
        let ivs: Vec<_> = (rr.intervals.iter())
            .map(|iv| (iv.transactions, iv.attempts))
            .collect();
        assert_eq!(
            ivs,
            [
                (10, Some(Attempts::new(10, 2, 1, 1))),
                (10, Some(Attempts::new(10, 3, 0, 0)))
            ]
        );
        assert_eq!(rr.summary.transactions, 20);
        assert_eq!(rr.summary.connections, 27);
        let o = rr.opening.expect("openers report their attempts");
        let a = o.attempts;
        assert_eq!(
            (a.attempts, a.opened, a.refused, a.timed_out, a.reset),
            (27, 20, 5, 1, 1)
        );
        assert_eq!(a.opened + a.failed(), a.attempts);
        assert!((a.failed_percent - 700.0 / 27.0).abs() < 1e-9, "{a:?}");
        assert!((o.timeout_s - 3.0).abs() < 1e-9);
        // Flow 0 completed 11 and failed 3, flow 1 completed 9 and failed 4.
        assert_eq!(tally.get(0), Some(14));
        assert_eq!(tally.get(1), Some(13));
        // A server that answered one request of a failed attempt is no surprise.
        let server = |answered: [u64; 2]| SideRrResults {
            flows: (0..2)
                .map(|i| SideRrFlow {
                    flow: i as u16,
                    transactions: answered[i],
                    retransmits: 0,
                    connections: 0,
                })
                .collect(),
            measured_retransmits: 0,
            cpu: CpuUsage::default(),
            ignored: 0,
            held_s: 0.0,
        };
        let warned = |answered| {
            let mut acc = Accumulator::new(&spec, 1, false, false);
            acc.keep_opening = Some(KeepOpening {
                timeout: Duration::from_secs(3),
            });
            let last = vec![flow(0, 5, 0, 1, 0)];
            acc.finish_interval(last, Distribution::new(), span, &mut |_| {});
            let mut warnings = Vec::new();
            acc.into_report(&spec, Some(&server(answered)), 1.0, &mut warnings);
            warnings
        };
        assert!(warned([6, 0]).is_empty());
        // More than that, or fewer than completed, is.
        assert_eq!(warned([7, 0]).len(), 1);
        assert_eq!(warned([4, 0]).len(), 1);
    }

    #[test]
    fn a_worker_that_slept_through_an_interval_does_not_hold_it_back() {
        let spec = RrSpec {
            flows: crate::config::FlowCount::new(2).unwrap(),
            ..RrSpec::default()
        };
        let mut acc = Accumulator::new(&spec, 2, true, false);
        let mut seen = Vec::new();
        let mut on_event = |ev: ClientEvent| {
            if let ClientEvent::RrInterval(iv) = ev {
                seen.push((iv.index, iv.transactions));
            }
        };
        let span = |index: u32| Span {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted: false,
        };
        acc.close_interval(1, span(0));
        acc.report(snap(0, 1, 0, 10), &mut on_event);
        acc.close_interval(2, span(1));
        acc.report(snap(0, 2, 0, 10), &mut on_event);
        // Worker 1 answers only epoch 2, with both intervals' transactions.
        acc.report(snap(1, 2, 1, 14), &mut on_event);
        assert!(acc.pending.is_empty());
        // Intervals go out once the server's counts for them arrive.
        for index in 0..2 {
            let server = SideRrInterval {
                index,
                start_s: f64::from(index),
                end_s: f64::from(index + 1),
                omitted: false,
                transactions: 0,
                retransmits: 0,
                connections: 0,
            };
            acc.server_interval(server, &mut on_event);
        }
        assert_eq!(seen, vec![(0, 10), (1, 24)]);
        // Nothing is lost: the totals hold every transaction.
        assert_eq!(acc.flows.iter().map(|f| f.transactions).sum::<u64>(), 34);
    }

    /// The server's counts for an interval that went out without them (more than an interval
    /// late, as through a full queue on a loaded machine) complete it in the report and hold
    /// back no later interval. Seen
    /// under `--under-load both`: the probes' intervals stopped where such counts came, and
    /// the loaded phase reported no probe at all.
    #[test]
    fn server_counts_after_their_interval_went_out_hold_nothing_back() {
        let spec = RrSpec::default();
        let mut acc = Accumulator::new(&spec, 1, true, false);
        let seen = std::sync::Mutex::new(Vec::new());
        let mut on_event = |ev: ClientEvent| {
            if let ClientEvent::RrInterval(iv) = ev {
                seen.lock().unwrap().push((iv.index, iv.server_retransmits));
            }
        };
        let span = |index: u32| Span {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted: false,
        };
        let server = |index: u32| SideRrInterval {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted: false,
            transactions: 1,
            retransmits: u64::from(index),
            connections: 0,
        };
        for index in 0..3 {
            acc.close_interval(index + 1, span(index));
            acc.report(snap(0, index + 1, 0, 1), &mut on_event);
        }
        // Interval 0 went out without the server's counts, which come now, late.
        assert_eq!(*seen.lock().unwrap(), [(0, None)]);
        acc.server_interval(server(0), &mut on_event);
        for index in 1..4 {
            if index == 3 {
                acc.close_interval(4, span(3));
                acc.report(snap(0, 4, 0, 1), &mut on_event);
            }
            acc.server_interval(server(index), &mut on_event);
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [(0, None), (1, Some(1)), (2, Some(2)), (3, Some(3))]
        );
        // The late counts complete interval 0 in the report.
        assert_eq!(acc.done[0].server_retransmits, Some(0));
        // Counts for an interval the client never had go at the end, and nothing with them.
        acc.server_interval(server(9), &mut on_event);
        acc.close_interval(5, span(4));
        acc.report(snap(0, 5, 0, 1), &mut on_event);
        let rr = acc.into_report(&spec, None, 5.0, &mut Vec::new());
        let indices: Vec<u32> = rr.intervals.iter().map(|iv| iv.index).collect();
        assert_eq!(indices, [0, 1, 2, 3, 4]);
    }
}
