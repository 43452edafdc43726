//! Runs one test against a server: connect, negotiate, open the data connections, move bytes,
//! and merge both ends' measurements into a [`TestReport`].
//!
//! Failures before the data flows are `Err`; once it flows, a test always yields a report, with
//! [`Outcome::Interrupted`] or
//! [`Outcome::Failed`] when it was cut short, so nothing measured is
//! lost. Intervals reach the caller live through `on_event`. This module prints nothing.

mod bulk;
mod conn_only;
mod connect;
pub mod flow_plan;
mod iperf3;
mod rr;
mod session;
mod udp;
mod under_load;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::{NonZeroU16, NonZeroUsize};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use self::session::Session;
use crate::auth::Psk;
use crate::config::{FlowCount, TestSpec, Workload};
use crate::error::Error;
use crate::host::monitor::Restarter;
use crate::report::{
    CpuReport, CpuUsage, InterfaceInterval, Interval, Outcome, PeerInfo, RrInterval,
    SCHEMA_VERSION, StreamInfo, Summary, TestReport, TraceProtocol, TraceReport, UdpInterval,
};
use crate::time::rfc3339;
use crate::trace::{TraceConfig, Tracer};

pub use crate::proto::DEFAULT_PORT;

/// Data connections a client opens at once by default: half the listen backlog an xbench
/// server asks for (1,024, itself under Linux's default `somaxconn` of 4,096), so one client's
/// handshakes cannot fill a server's queues even if it stops accepting for a moment, and
/// another client's still find room.
// Evaluated at compile time; 512 is not zero.
pub const DEFAULT_MAX_CONNECTING: NonZeroUsize = NonZeroUsize::new(512).unwrap();

/// `--connections-only`'s default `--openers`: new connections opened at a time. Enough to
/// keep a 2-core machine's loopback busy; a path with a long round trip needs more (each
/// opener opens about one connection per two round trips).
pub const DEFAULT_OPENERS: u16 = 16;

/// Which address family to use for a host name with both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressFamily {
    /// Whatever the resolver lists first.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

/// Where and how to run a test.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server host name or address.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// Address family for `host`.
    pub family: AddressFamily,
    /// Local address to send from (`-B`): the control connection, and every data connection
    /// unless [`Self::flow_binds`] lists several.
    pub bind: Option<IpAddr>,
    /// Local addresses the data are spread over, round-robin (`-B a,b,…`): TCP flows and
    /// streams (`--rr`, `--crr` flows' every connection, `--connections-only`'s held flows and
    /// openers, `-P` streams, iperf3 TCP streams) and UDP sockets (`-u`, `--rr -u`); flow or
    /// stream `i` from address `(i + 1) mod n` ([`flow_plan::round_robin`]). Empty:
    /// [`Self::bind`] alone. Each address brings a whole ephemeral port range, so more flows
    /// than one range holds need more of them (see [`flow_plan`]). The first should be
    /// [`Self::bind`]. An iperf3 UDP test refuses a list ([`flow_plan::BindList`]).
    pub flow_binds: Vec<IpAddr>,
    /// Most data connections being opened at once (`--max-connecting`): the rest wait for one
    /// to finish its handshake. Bounds what the flows put in the server's SYN and accept
    /// queues, which drop what overflows them (a lost SYN is retried after a second), so
    /// thousands of flows open faster paced than all at once. See [`DEFAULT_MAX_CONNECTING`].
    pub max_connecting: NonZeroUsize,
    /// How long connecting may take, per connection.
    pub connect_timeout: Duration,
    /// How long to wait after the end for the receivers to drain and the server's results.
    /// Data still queued in large buffers on a slow path can take seconds to arrive.
    pub drain_timeout: Duration,
    /// A request/response flow with a transaction outstanding and nothing received for this
    /// long has failed: the server stopped answering. Long enough for TCP's own retransmission
    /// back-off on a lossy path.
    pub stall_timeout: Duration,
    /// The test.
    pub spec: TestSpec,
    /// A name for the path, carried into the report (`--label`).
    pub label: Option<String>,
    /// The server's pre-shared key (`--psk-file`); with one, the client also insists that
    /// the server proves it holds the same key.
    pub psk: Option<Psk>,
    /// Which protocol to speak to the server.
    pub protocol: ServerProtocol,
    /// Request/response: each flow's own latency summary in the report (`--per-flow`): count,
    /// min, mean, max and a p99 from a 1.3 KB sketch per flow. Off, a flow reports only its
    /// counts and the latency figures are the merged ones.
    pub per_flow: bool,
    /// Request/response: when the server takes fewer flows than asked (its `--max-flows`),
    /// run the flows it takes and say so in the report (`--allow-partial-flows`), instead of
    /// failing with [`Error::FlowLimit`]. Off by default: a test that silently ran fewer
    /// flows than asked would measure a different load.
    pub allow_partial_flows: bool,
    /// Probe the hops of the test's path while it runs (`--trace`): the report's
    /// [`TestReport::trace`]. `None`: no probes.
    pub trace: Option<crate::trace::TraceConfig>,
    /// Request/response over TCP: `Some(k)` makes the test a connection-rate test
    /// (`--connections-only`, `--openers k`): the spec's `flows` are opened and held for the
    /// whole test, while `k` openers each open a new connection, wait for its first answer,
    /// and close it, back to back (or at the spec's `rate_per_flow`). The report's
    /// transactions are those new connections; `rr.held` says how many held flows still
    /// answered at the end.
    pub connections_only: Option<NonZeroU16>,
    /// Request/response: time each transaction from when its request was sent, not from when
    /// a paced one was due. Off (the default), a paced test counts the client's own lateness
    /// as latency, as it must to avoid coordinated omission; on, it counts the path alone, as
    /// a latency probe must (irtt's and `--under-load`'s probes): a probe is never held back
    /// by an earlier one, so the only lateness left is the client host's own scheduling.
    pub latency_from_send: bool,
    /// Start the test at this wall-clock instant (`--start-at`), so that clients on several
    /// machines measure one window (xbench-deploy's fleets). The client connects and
    /// completes the handshake [`START_HOLD`] ahead, holds there, and asks for the test at
    /// the instant: the name lookup, the connect and the key proof are then out of the
    /// instances' spread. What stays in it, after their clocks' offset, is the test's own
    /// setup: a round trip to `Accepted` and the opening of its data connections (for
    /// `--rr`/`--crr`, every flow; many flows take several rounds). Tests of several
    /// sessions hold their first one: `--under-load` its bulk session, so the probe
    /// sessions' setup is in the spread, and `--connections-only` its held flows, so the
    /// openers' session's is; a session asked again after a server's flow limit
    /// (`allow_partial_flows`) sets up after the instant too. With
    /// [`ServerProtocol::Iperf3`] the server is dialled at the instant; a server found to
    /// be iperf3 after the hold is dialled when that is found, after the instant. An
    /// instant already past starts at once.
    pub start_at: Option<SystemTime>,
}

/// How long before [`ClientConfig::start_at`] the client connects and holds: enough for a
/// name lookup, a connect and the handshake on a loaded machine and a long path, and well
/// inside the server's 10 s wait for the test's `Start`.
pub const START_HOLD: Duration = Duration::from_secs(5);

/// Which protocol the client speaks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerProtocol {
    /// xbench's own; a server that stays silent to its greeting is probed for iperf3 and, if
    /// it is one, the test runs in iperf3's protocol with a warning saying so.
    #[default]
    Detect,
    /// iperf3's control protocol (3.x), TCP throughput tests only (`--iperf3`).
    Iperf3,
}

impl ClientConfig {
    /// A default throughput test against `host`.
    pub fn new(host: impl Into<String>) -> Self {
        ClientConfig {
            host: host.into(),
            port: DEFAULT_PORT,
            family: AddressFamily::Any,
            bind: None,
            flow_binds: Vec::new(),
            max_connecting: DEFAULT_MAX_CONNECTING,
            connect_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(10),
            spec: TestSpec::throughput(),
            label: None,
            psk: None,
            protocol: ServerProtocol::Detect,
            per_flow: false,
            allow_partial_flows: false,
            connections_only: None,
            latency_from_send: false,
            trace: None,
            start_at: None,
        }
    }
}

/// What happens during a test, as it happens.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClientEvent {
    /// Data connections are open and data is about to flow.
    Started {
        /// Who answered.
        server: PeerInfo,
        /// The data connections.
        streams: Vec<StreamInfo>,
    },
    /// One interval, both ends merged (or the client's alone if the server's report is late).
    Interval(Interval),
    /// One interval of a request/response test.
    RrInterval(RrInterval),
    /// One interval of a UDP test, both ends merged.
    UdpInterval(UdpInterval),
    /// One row of a latency-under-load test's timeline (`--under-load`): its phase, the
    /// probes' latency and the bulk streams' figures. Its parts' own intervals are not
    /// handed on.
    UnderLoadInterval(crate::under_load::TimelineRow),
    /// Something the user should know.
    Warning(String),
    /// One interval as the client's network interface counted it (issue 33): its generic
    /// counters and EC2's allowance counters, on the interface's own clock, which starts with
    /// the data.
    Interface(InterfaceInterval),
    /// `--allow-partial-flows`: `running` of the `asked` request/response flows run, because
    /// the server takes no more (its `--max-flows`) or the rest did not open (refused or timed
    /// out on the way). Before [`ClientEvent::Started`]; both may come, the limit first.
    PartialFlows {
        /// Flows asked of this step: `--flows`, or after a server's limit that limit.
        asked: u32,
        /// What the test runs.
        running: u32,
        /// Whether the server's `--max-flows` is why (else the rest did not open).
        server_limit: bool,
    },
}

/// Where a test's live events go.
type OnEvent<'e> = &'e mut (dyn FnMut(ClientEvent) + Send);

/// Runs a test. `cancel` resolving (Ctrl-C) ends it early with
/// [`Outcome::Interrupted`]; the report still covers what
/// ran.
pub async fn run(
    config: &ClientConfig,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
    cancel: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    run_with_give_up(config, on_event, cancel, std::future::pending()).await
}

/// [`run`], with a second way out for a user who will not wait: `give_up` resolving (a second
/// Ctrl-C) ends every wait at the end of the test (the receivers' drain, the workers' last
/// transactions, the server's results), and the report covers what had arrived by then. It
/// takes effect once the test has ended, by its end mark or by `cancel`.
pub async fn run_with_give_up(
    config: &ClientConfig,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
    cancel: impl Future<Output = ()>,
    give_up: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    let mut report = run_any(config, on_event, cancel, give_up).await?;
    // Every way a test runs (xbench or iperf3 server) ends here, so every report says why.
    crate::diagnosis::attach(&mut report);
    Ok(report)
}

/// [`run_with_give_up`] before the diagnosis: picks the protocol and the kind of test, in
/// one place — latency under load (its parts are xbench tests of their own), an iperf3
/// server asked for, `--connections-only`, then an xbench server (or an iperf3 one found
/// where it was not asked for, [`iperf3_instead`]) and the test's kind ([`run_xbench`]).
async fn run_any(
    config: &ClientConfig,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
    cancel: impl Future<Output = ()>,
    give_up: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    check_any(config)?;
    // Setup can take a connect timeout or a slow server's answer: Ctrl-C must cut it short too.
    let mut cancel = std::pin::pin!(cancel);
    let give_up = GiveUp::new(give_up);
    if let Some(at) = config.start_at {
        // xbench sessions hold after their handshake until the instant (`Session::open`); an
        // iperf3 server is dialled at it.
        let lead = match config.protocol {
            ServerProtocol::Iperf3 => Duration::ZERO,
            ServerProtocol::Detect => START_HOLD,
        };
        let until = at.checked_sub(lead).unwrap_or(at);
        interruptible(wait_until(until), cancel.as_mut(), "waiting for --start-at").await?;
    }
    if let Workload::Throughput(tp) = &config.spec.workload
        && let Some(ul) = &tp.under_load
    {
        return under_load::run(config, tp, ul, on_event, cancel, give_up).await;
    }
    if config.protocol == ServerProtocol::Iperf3 {
        let control = interruptible(iperf3::connect(config), cancel.as_mut(), "connecting").await?;
        return iperf3::run(control, config, on_event, cancel).await;
    }
    if let Some(openers) = config.connections_only {
        return conn_only::run(config, openers, on_event, cancel, give_up).await;
    }
    let mut opened = interruptible(Session::open(config), cancel.as_mut(), "connecting").await;
    // With --allow-partial-flows a test over the server's flow limit asks again for the
    // flows it takes; the report counts the rest as refused.
    let narrowed = match &opened {
        Err(Error::FlowLimit { max, message }) if config.allow_partial_flows => {
            narrow(config, *max, message, on_event)
        }
        _ => None,
    };
    let (config, turned_away) = match &narrowed {
        Some((c, why)) => {
            opened = interruptible(Session::open(c), cancel.as_mut(), "connecting").await;
            (c, Some(why.clone()))
        }
        None => (config, None),
    };
    let session = match opened {
        Err(e @ Error::NotXbench { silent: true, .. }) if throughput(&config.spec) => {
            return iperf3_instead(config, e, on_event, cancel).await;
        }
        other => other?,
    };
    run_xbench(session, config, turned_away, on_event, cancel, give_up).await
}

/// What no kind of test may ask for: an invalid spec, a bad `-B` list, a list for an iperf3
/// UDP test, or latency under load from an iperf3 server.
fn check_any(config: &ClientConfig) -> Result<(), Error> {
    config.spec.validate()?;
    flow_plan::BindList::check(&config.flow_binds)?;
    if let Workload::RequestResponse(rr) = &config.spec.workload
        && rr.udp.is_none()
    {
        // TCP flows that cannot all have a 4-tuple to the server's port are refused before
        // the server is asked: found after it had accepted, the test failed half set up (the
        // CLI checked first, programs linking the library did not).
        flow_plan::FlowPlan::new(
            rr.flows.as_usize(),
            &connect::sources(config),
            flow_plan::PortRange::current_or_default(),
        )?;
    }
    let Workload::Throughput(tp) = &config.spec.workload else {
        return Ok(());
    };
    if config.protocol != ServerProtocol::Iperf3 {
        return Ok(());
    }
    if config.flow_binds.len() > 1 && tp.udp.is_some() {
        return Err(flow_plan::BindList::iperf3_udp(&config.flow_binds).into());
    }
    if tp.under_load.is_some() {
        let reason = "its latency probes are xbench's UDP request/response, which an iperf3 \
                      server (--iperf3) does not run";
        return Err(Error::Spec(crate::config::SpecError {
            field: "--under-load",
            reason: reason.into(),
        }));
    }
    Ok(())
}

/// Asked, taken and why, for a test the server took fewer flows of.
type TurnedAway = (u32, u32, String);

/// The request/response `config` narrowed to the `max` flows the server takes, told to the
/// user; `None` for a test of another kind or a limit of no flows.
fn narrow(
    config: &ClientConfig,
    max: u32,
    message: &str,
    on_event: OnEvent<'_>,
) -> Option<(ClientConfig, TurnedAway)> {
    let fewer = FlowCount::new(max)?;
    let mut c = config.clone();
    let Workload::RequestResponse(rr) = &mut c.spec.workload else {
        return None;
    };
    let asked = rr.flows.get();
    rr.flows = fewer;
    let why = format!(
        "the server took {max} of the {asked} flows asked ({message}); measuring those {max} \
         (--allow-partial-flows)"
    );
    on_event(ClientEvent::Warning(why.clone()));
    on_event(ClientEvent::PartialFlows {
        asked,
        running: max,
        server_limit: true,
    });
    Some((c, (asked, max, why)))
}

/// A server that said nothing to xbench's greeting may be iperf3's, which reads a 37-byte
/// cookie: the test runs in iperf3's protocol if it is, else fails with `e`.
async fn iperf3_instead(
    config: &ClientConfig,
    e: Error,
    on_event: OnEvent<'_>,
    mut cancel: Pin<&mut impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    if let Some(at) = config.start_at {
        let during = "waiting for --start-at";
        interruptible(wait_until(at), cancel.as_mut(), during).await?;
    }
    let probe = async { Ok(iperf3::probe(config, Duration::from_secs(3)).await) };
    let during = "checking whether the server is iperf3";
    let Some(control) = interruptible(probe, cancel.as_mut(), during).await? else {
        return Err(e);
    };
    on_event(ClientEvent::Warning(format!(
        "{}:{} is an iperf3 server, not xbench: running the test in iperf3's protocol \
         (--iperf3 skips this detection)",
        config.host, config.port
    )));
    iperf3::run(control, config, on_event, cancel).await
}

/// The test on an xbench server's accepted session, by its kind, with the host's facts (and
/// the path's hops, `--trace`) gathered beside it.
async fn run_xbench(
    mut session: Session,
    config: &ClientConfig,
    turned_away: Option<TurnedAway>,
    on_event: OnEvent<'_>,
    cancel: Pin<&mut impl Future<Output = ()>>,
    give_up: GiveUp<impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    let mut with_host = HostEvents::new(&mut session, config);
    let on_event = &mut |e: ClientEvent| with_host.pass(e, on_event);
    let mut report = match &config.spec.workload {
        Workload::Throughput(tp) if tp.udp.is_some() => {
            udp::run(session, config, tp, on_event, cancel, give_up).await?
        }
        Workload::Throughput(tp) => {
            bulk::run(session, config, tp, on_event, cancel, give_up).await?
        }
        Workload::RequestResponse(rr) => {
            let mut report = rr::run(
                session,
                config,
                rr,
                None,
                on_event,
                cancel,
                std::future::pending(),
                give_up,
            )
            .await?;
            if let Some((asked, max, why)) = turned_away {
                rr::turned_away(&mut report, asked, max, why);
            }
            report
        }
    };
    report.trace = with_host.finish_trace();
    Ok(report)
}

/// A throughput test (TCP or UDP), the kind an iperf3 server can run.
fn throughput(spec: &TestSpec) -> bool {
    matches!(&spec.workload, Workload::Throughput(_))
}

/// The report of a test that [`run`] ended with [`Error::Interrupted`]: nothing measured
/// (no streams, no intervals, empty totals), the outcome interrupted and `why` among the
/// warnings, so a user who stopped a test while it was still connecting still gets a
/// document (`--json-file`) that says so. The control connection's addresses and the server's
/// software are `None`: the test never got far enough to report them.
pub fn nothing_measured(config: &ClientConfig, started_at: SystemTime, why: &Error) -> TestReport {
    TestReport {
        schema_version: SCHEMA_VERSION,
        xbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: rfc3339(started_at),
        label: config.label.clone(),
        host: config.host.clone(),
        client_addr: None,
        server_addr: None,
        server: None,
        spec: config.spec.clone(),
        streams: Vec::new(),
        intervals: Vec::new(),
        summary: Summary {
            directions: Vec::new(),
            measured_s: 0.0,
        },
        rr: None,
        udp: None,
        cpu: CpuReport {
            client: CpuUsage::default(),
            server: None,
            client_s_per_gb: None,
            server_s_per_gb: None,
            client_us_per_transaction: None,
            server_us_per_transaction: None,
        },
        outcome: Outcome::Interrupted,
        warnings: vec![why.to_string()],
        under_load: None,
        hosts: None,
        trace: None,
    }
}

/// What the client's interface monitor adds to a test's events: its span restarts when the
/// data starts to flow ([`ClientEvent::Started`]), and each interval it reads follows the
/// test's own interval as a [`ClientEvent::Interface`].
///
/// With `--trace` the hop view starts there too, from the first stream's addresses.
struct HostEvents {
    restart: Option<Restarter>,
    live: Option<tokio::sync::mpsc::UnboundedReceiver<InterfaceInterval>>,
    /// `--trace`: how to probe, and the control connection's addresses for a test without
    /// data connections at its start (`--crr`).
    trace: Option<(TraceConfig, TraceProtocol, SocketAddr, SocketAddr)>,
    tracer: Option<Tracer>,
}

impl HostEvents {
    fn new(session: &mut Session, config: &ClientConfig) -> Self {
        let udp = match &config.spec.workload {
            Workload::Throughput(tp) => tp.udp.is_some(),
            Workload::RequestResponse(rr) => rr.udp.is_some(),
        };
        let protocol = if udp {
            TraceProtocol::Udp
        } else {
            TraceProtocol::Tcp
        };
        HostEvents {
            restart: session.host.as_ref().map(|m| m.restarter()),
            live: session.host.as_mut().and_then(|m| m.take_live()),
            trace: config
                .trace
                .map(|t| (t, protocol, session.client_addr, session.server_addr)),
            tracer: None,
        }
    }

    /// The hop view, once the test has ended.
    fn finish_trace(&mut self) -> Option<TraceReport> {
        self.tracer.take()?.finish()
    }

    fn pass(&mut self, e: ClientEvent, on_event: &mut (dyn FnMut(ClientEvent) + Send)) {
        let interval = matches!(
            e,
            ClientEvent::Interval(_) | ClientEvent::RrInterval(_) | ClientEvent::UdpInterval(_)
        );
        if let ClientEvent::Started { streams, .. } = &e {
            if let Some(r) = &self.restart {
                r.restart();
            }
            if let Some((config, protocol, local, server)) = self.trace.take() {
                let (local, target) = streams
                    .first()
                    .map_or((local, server), |s| (s.client_addr, s.server_addr));
                self.tracer = Some(Tracer::start(protocol, local.ip(), target, config));
            }
            // Read during setup: not the test's.
            while self.live.as_mut().is_some_and(|l| l.try_recv().is_ok()) {}
        }
        on_event(e);
        if interval && let Some(l) = self.live.as_mut() {
            while let Ok(iv) = l.try_recv() {
                on_event(ClientEvent::Interface(iv));
            }
        }
    }
}

/// The outcome of a test whose server's results never came: one that ran to its end failed,
/// since `missing` (which figures that leaves out) are missing and a run that looks complete
/// would be averaged with the others by a sweep or a report; `why` says why they did not come
/// (a server stopped or frozen, a control connection cut). An interrupted or already failed
/// test keeps its outcome.
pub(crate) fn without_server_results(
    outcome: Outcome,
    missing: &str,
    why: Option<&str>,
) -> Outcome {
    match outcome {
        Outcome::Completed => Outcome::Failed {
            error: format!(
                "the server's results never arrived, because {}: {missing} are missing",
                why.unwrap_or("the server did not send them")
            ),
        },
        other => other,
    }
}

/// Why a server's results did not come by `waited` after the end of a test: it stopped
/// answering on a control connection that stayed open.
pub(crate) fn results_timed_out(addr: &str, waited: Duration) -> String {
    format!(
        "{addr} sent nothing for {:.1} s after the end of the test (a server stopped or \
         frozen, overloaded, or a path that stopped carrying the control connection)",
        waited.as_secs_f64()
    )
}

/// The caller's `give_up`, which stays resolved once it has fired: the end of a test waits in
/// several places, and after a second Ctrl-C none of them may wait again.
pub(crate) struct GiveUp<F> {
    fut: Pin<Box<F>>,
    fired: bool,
}

impl<F: Future<Output = ()>> GiveUp<F> {
    fn new(fut: F) -> Self {
        GiveUp {
            fut: Box::pin(fut),
            fired: false,
        }
    }

    /// Resolves when the caller gave up, at once if it already had.
    pub(crate) async fn wait(&mut self) {
        if !self.fired {
            self.fut.as_mut().await;
            self.fired = true;
        }
    }

    /// Whether the caller has given up (as far as a `wait` has seen).
    pub(crate) fn fired(&self) -> bool {
        self.fired
    }
}

/// Sleeps until the wall clock reads `at` (at once if it is past). An `Ok` future, for
/// [`interruptible`].
pub(crate) async fn wait_until(at: SystemTime) -> Result<(), Error> {
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    Ok(())
}

/// Runs one setup step unless `cancel` fires first, which yields [`Error::Interrupted`].
/// Dropping the step closes whatever it opened; the server sees a client that went away.
pub(crate) async fn interruptible<T>(
    step: impl Future<Output = Result<T, Error>>,
    cancel: Pin<&mut impl Future<Output = ()>>,
    during: &'static str,
) -> Result<T, Error> {
    tokio::select! {
        r = step => r,
        () = cancel => Err(Error::Interrupted { during }),
    }
}
