//! A latency-under-load test (`--under-load`), composed from the ordinary tests: a UDP
//! request/response probe (and, with `--tcp-probe`, a TCP one) that runs from the first idle
//! phase to the last, and the bulk test that loads the path in the middle.
//!
//! Each part is a test of its own on the server's usual port, under its usual limits and key:
//! the probe flow is a `--rr -u` flow (its own socket, proven to the server by the
//! return-routability echo), the load an ordinary `-P` test. The parts are admitted as a group
//! before anything is measured: the bulk test's request goes first and holds its place (and
//! its descriptors and threads) while the probes measure the idle path, so a server too busy
//! for the load refuses the whole test up front rather than after its idle phase. Its data
//! connections open when the load starts, which must be within the server's handshake timeout
//! of that request (10 s by default): with an idle phase longer than [`ADMISSION_LEAD`] the
//! request goes that long before the load instead.
//!
//! Not the figures (`crate::under_load`) nor the parts' own machinery (`bulk`, `rr`).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::cancel::{GiveUp, interruptible};
use super::config::ClientConfig;
use super::event::{ClientEvent, OnEvent};
use super::session::Session;
use super::{bulk, rr};
use crate::config::{
    EndCondition, RrSpec, SocketOptions, TestSpec, ThroughputSpec, UdpRrSpec, Workload,
};
use crate::error::Error;
use crate::report::{Interval, Outcome, RrInterval, TestReport};
use crate::under_load::summary::{self, Parts, ProbePart, Timeline};
use crate::under_load::{PROBE_INTERVAL, Phases, UnderLoadSpec};

/// How long before the load the bulk test is requested at most: half a default server's
/// handshake timeout, the time it waits for a test's data connections.
pub(crate) const ADMISSION_LEAD: Duration = Duration::from_secs(5);

/// Bytes of a UDP probe: xbench's header, the least a `--rr -u` datagram holds.
const PROBE_LEN: u32 = crate::config::UDP_HEADER_LEN;

/// Which part an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Udp,
    Tcp,
    Bulk,
}

/// Runs a latency-under-load test whose load is `tp` and reports it: the bulk test's report,
/// with the probes' figures in `under_load`.
///
/// In steps: the parts admitted as a group ([`admit`]), then the probes and the load phase
/// run at once, their events merged into one timeline ([`Running::drive`]), then the report
/// composed from what each part returned ([`Ended::report`]).
pub(super) async fn run(
    config: &ClientConfig,
    tp: &ThroughputSpec,
    ul: &UnderLoadSpec,
    on_event: OnEvent<'_>,
    cancel: impl Future<Output = ()>,
    give_up: GiveUp<impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    let mut cancel = std::pin::pin!(cancel);
    let load = Load::new(config, tp, ul);
    let sessions = admit(&load, cancel.as_mut()).await?;
    let (tx, rx) = mpsc::unbounded_channel::<(Part, Instant, ClientEvent)>();
    let signals = Signals::new();
    let (started_tx, started_rx) = watch::channel(None::<Instant>);
    let mut udp_events = forward(&tx, Part::Udp, Some(started_tx));
    let mut tcp_events = forward(&tx, Part::Tcp, None);
    let mut bulk_events = forward(&tx, Part::Bulk, None);
    drop(tx);

    let udp_rr = load.udp_rr();
    let probe = rr::run(
        sessions.udp,
        &load.udp,
        &udp_rr,
        None,
        &mut udp_events,
        fired(&signals.cancel.1),
        fired(&signals.stop.1),
        GiveUp::new(fired(&signals.give_up.1)),
    );
    let tcp_rr = load.tcp_rr();
    let tcp_probe = async {
        let (Some(s), Some(c)) = (sessions.tcp, &load.tcp) else {
            return None;
        };
        let r = rr::run(
            s,
            c,
            &tcp_rr,
            None,
            &mut tcp_events,
            fired(&signals.cancel.1),
            fired(&signals.stop.1),
            GiveUp::new(fired(&signals.give_up.1)),
        );
        Some(r.await)
    };
    let load_phase = load_phase(&load, sessions.bulk, started_rx, &signals, &mut bulk_events);
    // Pinned here and lent to `drive`: moved into it, each part's future would be stored in
    // this future's state and again in `drive`'s, doubling what every client test's future
    // takes on its stack (77 against 35 KB, a debug build's test thread overflowed).
    let parts = Running {
        probe: std::pin::pin!(probe),
        tcp_probe: std::pin::pin!(tcp_probe),
        load_phase: std::pin::pin!(load_phase),
    };
    let mut live = Live::new(config, ul);
    let ended = parts
        .drive(rx, &signals, &mut live, on_event, cancel, give_up)
        .await;
    let report = ended.report(config, &load, &live, on_event)?;
    live.finish(&report, on_event);
    Ok(report)
}

/// The parts' sessions, admitted as a group: the load's place first (unless its idle phase is
/// too long for the server to hold it, [`ADMISSION_LEAD`]), then the probes'.
struct Sessions {
    bulk: Option<Session>,
    udp: Session,
    tcp: Option<Session>,
}

async fn admit(
    load: &Load,
    mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Result<Sessions, Error> {
    let bulk = match load.ul.idle <= ADMISSION_LEAD {
        true => {
            Some(interruptible(Session::open(&load.bulk), cancel.as_mut(), "connecting").await?)
        }
        false => None,
    };
    let udp = interruptible(Session::open(&load.udp), cancel.as_mut(), "connecting").await?;
    let tcp = match &load.tcp {
        Some(c) => Some(interruptible(Session::open(c), cancel.as_mut(), "connecting").await?),
        None => None,
    };
    Ok(Sessions { bulk, udp, tcp })
}

/// What the parts are told: the user's stop (`cancel`), a second one (`give_up`), and the
/// end of the last idle phase (`stop`, which ends the probes as their end condition would).
struct Signals {
    cancel: (watch::Sender<bool>, watch::Receiver<bool>),
    give_up: (watch::Sender<bool>, watch::Receiver<bool>),
    stop: (watch::Sender<bool>, watch::Receiver<bool>),
}

impl Signals {
    fn new() -> Self {
        Signals {
            cancel: watch::channel(false),
            give_up: watch::channel(false),
            stop: watch::channel(false),
        }
    }
}

/// Resolves once `rx` is set (or its sender is gone).
fn fired(rx: &watch::Receiver<bool>) -> impl Future<Output = ()> + use<> {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// A part's events onto the timeline's channel, each with when it came; the UDP probe's
/// start is also the timeline's zero, which the load phase waits for.
fn forward(
    tx: &mpsc::UnboundedSender<(Part, Instant, ClientEvent)>,
    part: Part,
    started: Option<watch::Sender<Option<Instant>>>,
) -> impl FnMut(ClientEvent) + Send + use<> {
    let tx = tx.clone();
    move |e: ClientEvent| {
        let at = Instant::now();
        if let Some(s) = &started
            && matches!(e, ClientEvent::Started { .. })
        {
            s.send_replace(Some(at));
        }
        let _ = tx.send((part, at, e));
    }
}

/// The load phase: waits out the first idle phase from the probes' start, runs the bulk test,
/// then the second idle phase, and stops the probes. `None` when the user stopped it before
/// the load began, or the probes never started; else the bulk test's result and when it
/// ended.
async fn load_phase(
    load: &Load,
    session: Option<Session>,
    mut started: watch::Receiver<Option<Instant>>,
    signals: &Signals,
    events: OnEvent<'_>,
) -> Option<(Result<TestReport, Error>, Instant)> {
    let ul = &load.ul;
    let stop = || {
        let _ = signals.stop.0.send(true);
    };
    // The probes' first interval is the timeline's zero; a probe that never started leaves
    // nothing to load.
    let Some(t0) = started
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|t| *t)
    else {
        stop();
        return None;
    };
    let user = fired(&signals.cancel.1);
    tokio::pin!(user);
    let session = match session {
        Some(s) => s,
        None => {
            let at = t0 + ul.idle.saturating_sub(ADMISSION_LEAD);
            tokio::select! {
                () = tokio::time::sleep_until(at.into()) => {},
                () = user.as_mut() => return None,
            }
            let open = Session::open(&load.bulk);
            match interruptible(open, user.as_mut(), "connecting").await {
                Ok(s) => s,
                Err(e) => {
                    stop();
                    return Some((Err(e), Instant::now()));
                }
            }
        }
    };
    tokio::select! {
        () = tokio::time::sleep_until((t0 + ul.idle).into()) => {},
        () = user.as_mut() => return None,
    }
    let report = bulk::run(
        session,
        &load.bulk,
        &load.bulk_tp(),
        events,
        fired(&signals.cancel.1),
        GiveUp::new(fired(&signals.give_up.1)),
    )
    .await;
    let done = Instant::now();
    if report.is_ok() {
        // The second idle phase, unless the user stops the test first.
        tokio::select! {
            () = tokio::time::sleep_until((done + ul.idle).into()) => {},
            () = user.as_mut() => {},
        }
    }
    stop();
    Some((report, done))
}

/// The three parts, running.
struct Running<'a, P, T, L> {
    probe: Pin<&'a mut P>,
    tcp_probe: Pin<&'a mut T>,
    load_phase: Pin<&'a mut L>,
}

/// What each part returned, and whether the user stopped the test.
struct Ended {
    udp: Option<Result<TestReport, Error>>,
    tcp: Option<Option<Result<TestReport, Error>>>,
    bulk: Option<Option<(Result<TestReport, Error>, Instant)>>,
    cancelled: bool,
}

impl<P, T, L> Running<'_, P, T, L>
where
    P: Future<Output = Result<TestReport, Error>>,
    T: Future<Output = Option<Result<TestReport, Error>>>,
    L: Future<Output = Option<(Result<TestReport, Error>, Instant)>>,
{
    /// Polls the parts until all have ended (or the UDP probe could not start), handing
    /// their events to the live timeline and the user's stops to the parts.
    async fn drive(
        self,
        mut rx: mpsc::UnboundedReceiver<(Part, Instant, ClientEvent)>,
        signals: &Signals,
        live: &mut Live,
        on_event: OnEvent<'_>,
        mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
        mut give_up: GiveUp<impl Future<Output = ()>>,
    ) -> Ended {
        let Running {
            mut probe,
            mut tcp_probe,
            mut load_phase,
        } = self;
        let mut e = Ended {
            udp: None,
            tcp: None,
            bulk: None,
            cancelled: false,
        };
        let mut gave_up = false;
        loop {
            tokio::select! {
                Some((part, at, ev)) = rx.recv() => live.event(part, at, ev, on_event),
                () = cancel.as_mut(), if !e.cancelled => {
                    e.cancelled = true;
                    let _ = signals.cancel.0.send(true);
                }
                () = give_up.wait(), if e.cancelled && !gave_up => {
                    gave_up = true;
                    let _ = signals.give_up.0.send(true);
                }
                r = probe.as_mut(), if e.udp.is_none() => e.udp = Some(r),
                r = tcp_probe.as_mut(), if e.tcp.is_none() => e.tcp = Some(r),
                r = load_phase.as_mut(), if e.bulk.is_none() => e.bulk = Some(r),
            }
            // A probe that could not start ends the test: there is no timeline to load.
            if let Some(Err(_)) = &e.udp {
                break;
            }
            if e.udp.is_some() && e.tcp.is_some() && e.bulk.is_some() {
                break;
            }
        }
        while let Ok((part, at, ev)) = rx.try_recv() {
            live.event(part, at, ev, on_event);
        }
        e
    }
}

impl Ended {
    /// The test's report from what the parts returned: an error only when there is nothing
    /// to report (the probes never ran, the load failed, or the test was stopped for a reason
    /// other than the user).
    fn report(
        self,
        config: &ClientConfig,
        load: &Load,
        live: &Live,
        on_event: OnEvent<'_>,
    ) -> Result<TestReport, Error> {
        let udp = self.udp.unwrap_or(Err(Error::Interrupted {
            during: "starting the latency probes",
        }))?;
        let (bulk, done) = match self.bulk {
            Some(Some((bulk, done))) => (bulk?, done),
            // Stopped before the load: what the idle probes measured is the report.
            _ if self.cancelled => (no_load(&udp), Instant::now()),
            _ => {
                return Err(Error::Interrupted {
                    during: "the idle phase before the load",
                });
            }
        };
        // A TCP probe that failed leaves the UDP probes' and the load's figures standing:
        // they are reported, and why the TCP ones are missing said.
        let (tcp, tcp_failed) = match self.tcp.flatten() {
            Some(Ok(r)) => (Some(r), None),
            Some(Err(e)) => (
                None,
                Some(format!(
                    "the TCP latency probe failed: {e}; its figures are missing"
                )),
            ),
            None => (None, None),
        };
        let mut report = compose(config, load, live, udp, tcp, bulk, done, self.cancelled);
        if let Some(w) = tcp_failed {
            on_event(ClientEvent::Warning(w.clone()));
            report.warnings.push(w);
        }
        Ok(report)
    }
}

/// The bulk test's report when the user stopped the test before the load began: nothing
/// loaded, nothing measured, the probe test's connection and timing.
fn no_load(udp: &TestReport) -> TestReport {
    TestReport {
        streams: Vec::new(),
        intervals: Vec::new(),
        summary: crate::report::Summary {
            directions: Vec::new(),
            measured_s: 0.0,
        },
        rr: None,
        udp: None,
        outcome: Outcome::Interrupted,
        warnings: Vec::new(),
        under_load: None,
        ..udp.clone()
    }
}

/// The parts' configurations.
struct Load {
    /// The bulk test: the user's, without the under-load part.
    bulk: ClientConfig,
    /// The UDP probe test.
    udp: ClientConfig,
    /// The TCP probe test (`--tcp-probe`).
    tcp: Option<ClientConfig>,
    ul: UnderLoadSpec,
}

impl Load {
    fn new(config: &ClientConfig, tp: &ThroughputSpec, ul: &UnderLoadSpec) -> Self {
        let mut bulk = config.clone();
        bulk.spec.workload = Workload::Throughput(ThroughputSpec {
            under_load: None,
            ..tp.clone()
        });
        let load_s = match config.spec.end {
            EndCondition::Duration(d) => d,
            // Refused by the spec's validation; bounded here all the same.
            EndCondition::Bytes(_) => Duration::ZERO,
        };
        // The probes run until the load's second idle phase ends, when they are stopped; this
        // bounds them should that never come: both idle phases, the load, and what the bulk
        // test may wait on the way (its connections, its drain, its results).
        let probe_time = ul.idle * 2
            + config.spec.omit
            + load_s
            + config.connect_timeout
            + config.drain_timeout
            + Duration::from_secs(10);
        let probe = |rr: RrSpec| {
            let mut c = config.clone();
            c.spec = TestSpec {
                workload: Workload::RequestResponse(rr),
                end: EndCondition::Duration(probe_time),
                omit: Duration::ZERO,
                interval: Some(PROBE_INTERVAL),
                socket: SocketOptions {
                    nodelay: true,
                    ..SocketOptions::default()
                },
            };
            c.per_flow = false;
            // A probe answers for the path, not for this host's timer: irtt and the
            // responsiveness draft time a probe from its send too.
            c.latency_from_send = true;
            c.allow_partial_flows = false;
            c.connections_only = None;
            c.stall_timeout = c
                .stall_timeout
                .max(ul.probe_timeout * 2 + Duration::from_secs(1));
            c
        };
        let udp = probe(udp_rr(ul));
        let tcp = ul.tcp_probe.then(|| probe(tcp_rr(ul)));
        Load {
            bulk,
            udp,
            tcp,
            ul: *ul,
        }
    }

    fn udp_rr(&self) -> RrSpec {
        udp_rr(&self.ul)
    }

    fn tcp_rr(&self) -> RrSpec {
        tcp_rr(&self.ul)
    }

    fn bulk_tp(&self) -> ThroughputSpec {
        match &self.bulk.spec.workload {
            Workload::Throughput(t) => t.clone(),
            Workload::RequestResponse(_) => ThroughputSpec::default(),
        }
    }
}

/// One flow of paced 24-byte UDP requests and responses, with room in flight for every probe
/// its timeout may hold.
fn udp_rr(ul: &UnderLoadSpec) -> RrSpec {
    RrSpec {
        request_len: std::num::NonZeroU32::new(PROBE_LEN).unwrap_or(std::num::NonZeroU32::MIN),
        response_len: std::num::NonZeroU32::new(PROBE_LEN).unwrap_or(std::num::NonZeroU32::MIN),
        burst: ul.probe_burst(),
        rate_per_flow: Some(ul.probe_rate),
        udp: Some(UdpRrSpec {
            timeout: ul.probe_timeout,
        }),
        ..RrSpec::default()
    }
}

/// One connection of paced 1-byte requests and responses (netperf's TCP_RR, paced).
fn tcp_rr(ul: &UnderLoadSpec) -> RrSpec {
    RrSpec {
        burst: ul.probe_burst(),
        rate_per_flow: Some(ul.probe_rate),
        ..RrSpec::default()
    }
}

/// The test's report: the bulk test's, with the user's spec, the probes' warnings, the worse
/// of the parts' outcomes, and the under-load figures.
#[allow(clippy::too_many_arguments)]
fn compose(
    config: &ClientConfig,
    load: &Load,
    live: &Live,
    udp: TestReport,
    tcp: Option<TestReport>,
    bulk: TestReport,
    done: Instant,
    cancelled: bool,
) -> TestReport {
    let t0 = live.t0.unwrap_or(done);
    let secs =
        |t: Option<Instant>| t.map_or(0.0, |t| t.saturating_duration_since(t0).as_secs_f64());
    let omit_s = config.spec.omit.as_secs_f64();
    let udp_rr = udp.rr.clone().unwrap_or_else(|| empty_rr(&udp));
    let end_s = udp_rr.intervals.last().map_or(0.0, |iv| iv.end_s);
    let load_start_s = live.load_start.map(|t| secs(Some(t)));
    let phases = phases(load_start_s, secs(Some(done)), omit_s, end_s, &bulk);
    let tcp_rr = tcp.as_ref().and_then(|t| t.rr.clone());
    let wire = u64::from(PROBE_LEN)
        + match udp.streams.first().map(|s| s.server_addr.is_ipv4()) {
            Some(false) => 48,
            _ => 28,
        };
    let timeout_s = load.ul.probe_timeout.as_secs_f64();
    let timeline = Timeline {
        udp: ProbePart {
            intervals: &udp_rr.intervals,
            offset_s: 0.0,
            timeout_s,
        },
        tcp: tcp_rr.as_ref().map(|r| ProbePart {
            intervals: &r.intervals,
            offset_s: secs(live.tcp_start),
            timeout_s,
        }),
        bulk: &bulk.intervals,
        phases,
        interval_s: interval_s(config),
    };
    let figures = summary::derive(&Parts {
        timeline,
        udp_report: &udp_rr,
        bulk: &bulk,
        probe_wire_bytes: wire,
    });
    let mut report = bulk.clone();
    report.spec = config.spec.clone();
    report.started_at = udp.started_at.clone();
    report.outcome = worst(
        bulk.outcome.clone(),
        probe_outcome(&udp.outcome, cancelled, "the UDP latency probe"),
    );
    if let Some(t) = &tcp {
        report.outcome = worst(
            report.outcome,
            probe_outcome(&t.outcome, cancelled, "the TCP latency probe"),
        );
    }
    let probe_warnings = udp
        .warnings
        .iter()
        .chain(tcp.iter().flat_map(|t| t.warnings.iter()))
        .map(|w| format!("latency probe: {w}"));
    report.warnings.extend(probe_warnings);
    report.under_load = Some(figures);
    report
}

/// The test's phases on the probes' timeline, in seconds from its start: the load's start
/// (`None` when stopped before it), the test's end (`done_s`) and the probes' last interval
/// (`end_s`).
fn phases(
    load_start_s: Option<f64>,
    done_s: f64,
    omit_s: f64,
    end_s: f64,
    bulk: &TestReport,
) -> Phases {
    match load_start_s {
        Some(load_start_s) => {
            // The loaded phase ends where the bulk test's last measured interval does: the
            // window its own figures (and the streams' RTTs) come from.
            let loaded_end_s = load_start_s
                + (bulk.intervals.iter().rev())
                    .find(|iv| !iv.omitted)
                    .map_or(omit_s + bulk.summary.measured_s, |iv| iv.end_s);
            // In order even when the user stopped the test under load (the probes then end
            // with it, and no idle phase follows).
            let idle_after_start_s = done_s.max(loaded_end_s);
            Phases {
                load_start_s,
                loaded_start_s: load_start_s + omit_s,
                loaded_end_s,
                idle_after_start_s,
                end_s: end_s.max(idle_after_start_s),
            }
        }
        // Stopped before the load: the whole timeline is the first idle phase.
        None => Phases {
            load_start_s: end_s,
            loaded_start_s: end_s,
            loaded_end_s: end_s,
            idle_after_start_s: end_s,
            end_s,
        },
    }
}

/// A probe's outcome as the test's: the stop that ends its last idle phase is how it
/// completes, so only the user's interruption or a failure count.
fn probe_outcome(o: &Outcome, cancelled: bool, what: &str) -> Outcome {
    match o {
        Outcome::Failed { error } => Outcome::Failed {
            error: format!("{what} failed: {error}"),
        },
        Outcome::Interrupted if cancelled => Outcome::Interrupted,
        _ => Outcome::Completed,
    }
}

fn worst(a: Outcome, b: Outcome) -> Outcome {
    match (a, b) {
        (f @ Outcome::Failed { .. }, _) | (_, f @ Outcome::Failed { .. }) => f,
        (Outcome::Interrupted, _) | (_, Outcome::Interrupted) => Outcome::Interrupted,
        _ => Outcome::Completed,
    }
}

/// The request/response results of a probe test that has none (it cannot: a test that ran
/// always reports them); an empty set keeps the figures honest (no samples) if it ever did.
fn empty_rr(_r: &TestReport) -> crate::report::RrReport {
    crate::report::RrReport {
        intervals: Vec::new(),
        summary: crate::report::RrSummary {
            transactions: 0,
            seconds: 0.0,
            transactions_per_second: 0.0,
            latency: None,
            coordinated_omission_corrected: true,
            retransmits: 0,
            server_retransmits: None,
            rtt: None,
            total_transactions: 0,
            server_transactions: None,
            connections: 0,
            server_connections: None,
            pacing: None,
            histogram: String::new(),
            udp: None,
        },
        flows: Vec::new(),
        setup: None,
        held: None,
        opening: None,
    }
}

/// The timeline's row length before and after the load: the bulk test's `-i`.
fn interval_s(config: &ClientConfig) -> f64 {
    config
        .spec
        .interval
        .unwrap_or(Duration::from_secs(1))
        .as_secs_f64()
}

/// The timeline as it happens: each part's intervals as they arrive, and a row handed on as
/// soon as every part has passed its end.
struct Live {
    ul: UnderLoadSpec,
    omit_s: f64,
    load_s: f64,
    interval_s: f64,
    t0: Option<Instant>,
    tcp_start: Option<Instant>,
    load_start: Option<Instant>,
    started: bool,
    udp: Vec<RrInterval>,
    tcp: Vec<RrInterval>,
    bulk: Vec<Interval>,
    /// Rows up to here were handed on.
    emitted_until: f64,
}

impl Live {
    fn new(config: &ClientConfig, ul: &UnderLoadSpec) -> Self {
        Live {
            ul: *ul,
            omit_s: config.spec.omit.as_secs_f64(),
            load_s: match config.spec.end {
                EndCondition::Duration(d) => d.as_secs_f64(),
                EndCondition::Bytes(_) => 0.0,
            },
            interval_s: interval_s(config),
            t0: None,
            tcp_start: None,
            load_start: None,
            started: false,
            udp: Vec::new(),
            tcp: Vec::new(),
            bulk: Vec::new(),
            emitted_until: 0.0,
        }
    }

    fn event(&mut self, part: Part, at: Instant, ev: ClientEvent, on_event: OnEvent<'_>) {
        match (part, ev) {
            (_, ClientEvent::Warning(w)) if part == Part::Bulk => {
                on_event(ClientEvent::Warning(w));
            }
            (_, ClientEvent::Warning(w)) => {
                on_event(ClientEvent::Warning(format!("latency probe: {w}")));
            }
            (Part::Udp, ClientEvent::Started { server, streams }) => {
                self.t0 = Some(at);
                if !self.started {
                    self.started = true;
                    on_event(ClientEvent::Started { server, streams });
                }
            }
            (Part::Tcp, ClientEvent::Started { .. }) => self.tcp_start = Some(at),
            (Part::Bulk, ClientEvent::Started { .. }) => self.load_start = Some(at),
            (Part::Udp, ClientEvent::RrInterval(iv)) => self.udp.push(iv),
            (Part::Tcp, ClientEvent::RrInterval(iv)) => self.tcp.push(iv),
            (Part::Bulk, ClientEvent::Interval(iv)) => self.bulk.push(iv),
            _ => {}
        }
        self.flush(on_event);
    }

    fn load_start_s(&self) -> f64 {
        self.secs(self.load_start)
    }

    fn secs(&self, t: Option<Instant>) -> f64 {
        match (self.t0, t) {
            (Some(t0), Some(t)) => t.saturating_duration_since(t0).as_secs_f64(),
            _ => f64::INFINITY,
        }
    }

    /// Hands on every row all parts have passed.
    fn flush(&mut self, on_event: OnEvent<'_>) {
        if self.t0.is_none() {
            return;
        }
        let tcp_offset = self.secs(self.tcp_start);
        let mut until = self.udp.last().map_or(0.0, |iv| iv.end_s);
        if self.ul.tcp_probe {
            let tcp_until = self.tcp.last().map_or(0.0, |iv| tcp_offset + iv.end_s);
            until = until.min(tcp_until);
        }
        // A probe sent in a row is lost only once its timeout has passed, and counted in the
        // interval it expired in: a row waits that long (and one probe interval, where the
        // expiry falls), so the losses it shows are final.
        until -= self.ul.probe_timeout.as_secs_f64() + PROBE_INTERVAL.as_secs_f64();
        // The bulk test's latest interval may still be revised by its final results (the
        // receiver's last counts): its row comes from the report, or once the next one is in.
        if let Some(last) = self.bulk.last() {
            until = until.min(self.load_start_s() + last.start_s);
        }
        let load_start_s = self.secs(self.load_start);
        let timeline = Timeline {
            udp: ProbePart {
                intervals: &self.udp,
                offset_s: 0.0,
                timeout_s: self.ul.probe_timeout.as_secs_f64(),
            },
            tcp: self.ul.tcp_probe.then_some(ProbePart {
                intervals: &self.tcp,
                offset_s: tcp_offset,
                timeout_s: self.ul.probe_timeout.as_secs_f64(),
            }),
            bulk: &self.bulk,
            phases: Phases {
                load_start_s,
                loaded_start_s: load_start_s + self.omit_s,
                loaded_end_s: load_start_s + self.omit_s + self.load_s,
                idle_after_start_s: f64::INFINITY,
                end_s: f64::INFINITY,
            },
            interval_s: self.interval_s,
        };
        // Before the load has started, only rows that end half a row before it can start
        // ([`summary::row_spans`] ends the idle phase with a longer row).
        if self.load_start.is_none() {
            until = until.min(self.ul.idle.as_secs_f64() - self.interval_s / 2.0);
        }
        // Rows after the load wait for the final report, which knows when it ended.
        let mut rows = Vec::new();
        for span in summary::row_spans(&timeline, until) {
            if span.0 >= self.emitted_until - 1e-6 {
                rows.push(summary::row(&timeline, span));
            }
        }
        for r in rows {
            self.emitted_until = r.end_s;
            on_event(ClientEvent::UnderLoadInterval(r));
        }
    }

    /// Hands on the rows the live timeline could not yet: those after the load, from the
    /// final report.
    fn finish(&mut self, report: &TestReport, on_event: OnEvent<'_>) {
        let Some(ul) = &report.under_load else {
            return;
        };
        for r in &ul.timeline {
            if r.start_s >= self.emitted_until - 1e-6 {
                self.emitted_until = r.end_s;
                on_event(ClientEvent::UnderLoadInterval(r.clone()));
            }
        }
    }
}
