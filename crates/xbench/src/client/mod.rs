//! Runs one test against a server: connect, negotiate, open the data connections, move bytes,
//! and merge both ends' measurements into a [`TestReport`].
//!
//! Failures before the data flows are `Err`; once it flows, a test always yields a report, with
//! [`Outcome::Interrupted`] or
//! [`Outcome::Failed`] when it was cut short, so nothing measured is
//! lost. Intervals reach the caller live through `on_event`. This module prints nothing.

mod bulk;
mod cancel;
mod config;
mod conn_only;
mod connect;
mod event;
pub mod flow_plan;
mod iperf3;
mod outcome;
mod pairing;
mod rr;
mod rr_finish;
mod session;
mod tcp_streams;
mod udp;
mod under_load;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use self::session::Session;
use crate::config::{FlowCount, TestSpec, Workload};
use crate::error::Error;
use crate::host::monitor::Restarter;
use crate::report::{
    CpuReport, CpuUsage, InterfaceInterval, Outcome, Summary, TestReport, TraceProtocol,
    TraceReport,
};
use crate::trace::{TraceConfig, Tracer};

use self::cancel::{GiveUp, interruptible, wait_until};
pub use self::config::{
    AddressFamily, ClientConfig, DEFAULT_MAX_CONNECTING, DEFAULT_OPENERS, START_HOLD,
    ServerProtocol,
};
pub use self::event::ClientEvent;
use self::event::OnEvent;
pub use crate::proto::DEFAULT_PORT;

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
            field: crate::config::Field::UnderLoad,
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
    let body = session::ReportBody {
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
    };
    body.into_report(config, started_at, None, None)
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
