//! `--connections-only`: how fast new connections open, and how long each takes, while many
//! others are held open. This is the figure a NAT gateway's, a load balancer's or a Transit
//! Gateway's connection-rate limit moves, and a table already holding thousands of flows is
//! where such limits bite.
//!
//! Two tests run side by side against the same server, each on its own control connection:
//! the *held* test opens the spec's `--flows` connections with the usual data greeting (the
//! server accounts for them as any `--rr` test's flows) and holds them idle; the *openers*
//! test is a `--crr` test of `--openers` flows, each opening a connection, sending its
//! greeting and a 1-byte request, reading the 1-byte answer and waiting for the server to
//! close, over and over. Its transactions are the new connections: their rate per interval
//! and overall, and the latency of each, from `connect()` to the first answer on it. At the
//! end every held flow is checked with a 1-byte round trip. Not the workers themselves
//! ([`rr`](super::rr) and `engine::rr`), whose `--crr` loop this reuses.
//!
//! Unlike a `--crr` test, an opener whose new connection is refused, is not answered within
//! `--connect-timeout` or is reset before its answer counts that attempt by kind and goes on
//! opening (after a back-off of 1 ms doubling to 100 ms while the failures last): a path's
//! connection limit shows as those counts, per interval and in [`Opening`]. The test then
//! completes with a warning saying how many failed; it fails only if no new connection opened
//! at all.

use std::future::Future;
use std::net::TcpStream;
use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::cancel::{GiveUp, interruptible};
use super::config::ClientConfig;
use super::event::{ClientEvent, OnEvent};
use super::rr;
use super::rr_finish::{RrFinish, finish_rr};
use super::session::{Session, ended_by};
use crate::config::{EndCondition, Field, FlowCount, RrSpec, SpecError, Workload};
use crate::engine::rr::client::KeepOpening;
use crate::error::Error;
use crate::proto::{IdCount, Message, Tally};
use crate::report::{Attempts, ConnectionSetup, HeldFlows, Opening, Outcome, TestReport};

/// Runs a `--connections-only` test: holds the spec's flows ([`hold`]), opens new
/// connections `openers` at a time for the test's length ([`open_new`]), checks the held
/// flows, and reports ([`Holding::conclude`]).
pub(super) async fn run(
    config: &ClientConfig,
    openers: NonZeroU16,
    on_event: OnEvent<'_>,
    cancel: impl Future<Output = ()>,
    give_up: GiveUp<impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    let spec = check(config)?;
    let mut cancel = std::pin::pin!(cancel);
    let mut holding = hold(config, &spec, on_event, cancel.as_mut()).await?;
    let open_spec = openers_spec(&spec, openers);
    let mut open_config = config.clone();
    open_config.connections_only = None;
    open_config.spec.workload = Workload::RequestResponse(open_spec.clone());
    let session = interruptible(
        Session::open(&open_config),
        cancel.as_mut(),
        "connecting the openers' test",
    )
    .await?;
    let keep_opening = KeepOpening {
        timeout: config.connect_timeout,
    };
    let opening = rr::run(
        session,
        &open_config,
        &open_spec,
        Some(keep_opening),
        on_event,
        cancel.as_mut(),
        std::future::pending(),
        give_up,
    );
    let (report, holder_lost) = open_new(opening, &mut holding.holder).await;
    let mut report = report?;
    report
        .warnings
        .splice(0..0, std::mem::take(&mut holding.warnings));
    judge_attempts(&mut report);
    holding.conclude(config, openers, report, holder_lost).await
}

/// The held flows and their test, and what holding them said.
struct Holding {
    /// The held test's control connection.
    holder: Session,
    held: Vec<(u16, TcpStream)>,
    setup: ConnectionSetup,
    warnings: Vec<String>,
    /// Asked, taken and why, when the server took fewer flows (`--allow-partial-flows`).
    turned_away: Option<(u32, u32, String)>,
}

/// Opens the held test and its flows. As for `--rr`, a server that takes fewer flows refuses,
/// unless the user asked for those (`--allow-partial-flows`); flows refused or timed out on
/// the way (a firewall's or a load balancer's connection limit) are counted by kind in
/// `setup`, and with that flag the rest are held.
async fn hold(
    config: &ClientConfig,
    spec: &RrSpec,
    on_event: OnEvent<'_>,
    mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Result<Holding, Error> {
    let mut hold_config = held_config(config, spec);
    let mut opened =
        interruptible(Session::open(&hold_config), cancel.as_mut(), "connecting").await;
    let mut turned_away = None;
    if let Err(Error::FlowLimit { max, message }) = &opened
        && config.allow_partial_flows
        && let Some(fewer) = FlowCount::new(*max)
    {
        let asked = spec.flows.get();
        let why = format!(
            "the server took {max} of the {asked} flows asked to hold ({message}); holding \
             those {max} (--allow-partial-flows)"
        );
        on_event(ClientEvent::Warning(why.clone()));
        on_event(ClientEvent::PartialFlows {
            asked,
            running: *max,
            server_limit: true,
        });
        turned_away = Some((asked, *max, why));
        let mut narrowed = spec.clone();
        narrowed.flows = fewer;
        hold_config = held_config(config, &narrowed);
        opened = interruptible(Session::open(&hold_config), cancel.as_mut(), "connecting").await;
    }
    let mut holder = opened?;
    let wanted = hold_config.spec.as_rr().map_or(0, |r| r.flows.as_usize());
    let mut warnings = Vec::new();
    let (held, setup) = holder
        .connect_partial(
            &hold_config,
            wanted,
            config.allow_partial_flows,
            &mut warnings,
            cancel.as_mut(),
        )
        .await?;
    warnings.extend(super::session::partial_warning(
        &setup,
        "flows to hold",
        "holding",
    ));
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }
    if let Some(e) = super::session::partial_event(&setup) {
        on_event(e);
    }
    Ok(Holding {
        holder,
        held,
        setup,
        warnings,
        turned_away,
    })
}

/// Runs the openers' test to its end. The held test's server reports intervals all along:
/// they are read so its control connection never backs up, and its end noticed (`Some(why)`).
async fn open_new(
    opening: impl Future<Output = Result<TestReport, Error>>,
    holder: &mut Session,
) -> (Result<TestReport, Error>, Option<String>) {
    let mut opening = std::pin::pin!(opening);
    let mut holder_lost: Option<String> = None;
    loop {
        tokio::select! {
            r = &mut opening => return (r, holder_lost),
            m = holder.rd.next(), if holder_lost.is_none() => match m {
                Ok(Some(Message::RrInterval(_))) => {}
                other => holder_lost = Some(ended_by(other, &holder.addr).0),
            },
        }
    }
}

impl Holding {
    /// The openers' `report` as the test's: each held flow checked with a 1-byte round trip,
    /// the held test finished, and a test whose held flows did not all answer failed.
    async fn conclude(
        self,
        config: &ClientConfig,
        openers: NonZeroU16,
        mut report: TestReport,
        holder_lost: Option<String>,
    ) -> Result<TestReport, Error> {
        let Holding {
            mut holder,
            held,
            setup,
            turned_away,
            ..
        } = self;
        // After Ctrl-C the user is waiting: a shorter bound on the held flows' answers.
        let interrupted = report.outcome == Outcome::Interrupted;
        let patience = if interrupted {
            config.stall_timeout.min(Duration::from_secs(2))
        } else {
            config.stall_timeout
        };
        let checks = check_held(held, patience).await;
        let mut counts = HeldFlows {
            held: setup.connected,
            open_at_end: 0,
            closed: 0,
            reset: 0,
            unanswered: 0,
            openers: openers.get(),
        };
        for (_, c) in &checks {
            match c {
                Held::Open => counts.open_at_end += 1,
                Held::Closed => counts.closed += 1,
                Held::Reset => counts.reset += 1,
                Held::Unanswered => counts.unanswered += 1,
            }
        }
        match holder_lost {
            Some(why) => report.warnings.push(format!(
                "the held flows' control connection ended early: {why}"
            )),
            None => finish_held(&mut holder, &checks, interrupted, &mut report.warnings).await,
        }
        if counts.open_at_end < counts.held {
            // As a --rr test whose flows do not all open fails: a connection-rate figure
            // taken while the path dropped held flows is not the figure asked for.
            let why = format!(
                "{} of {} held flows did not answer at the end: {} closed, {} reset, {} \
                 unanswered within {patience:?}",
                counts.held - counts.open_at_end,
                counts.held,
                counts.closed,
                counts.reset,
                counts.unanswered
            );
            if report.outcome == Outcome::Completed {
                report.outcome = Outcome::Failed { error: why };
            } else {
                report.warnings.push(why);
            }
        }
        // The report speaks of the test asked for: its flows are the held ones.
        report.spec = config.spec.clone();
        if let Some(r) = report.rr.as_mut() {
            r.setup = Some(setup);
            r.held = Some(counts);
        }
        if let Some((asked, max, why)) = turned_away {
            rr::turned_away(&mut report, asked, max, why);
        }
        Ok(report)
    }
}

/// What the openers' failed attempts make of the test: failures are the measurement, so a
/// completed test stays completed and says how many in a warning; a test in which no new
/// connection opened measured no rate and fails, saying how its attempts ended.
fn judge_attempts(report: &mut TestReport) {
    let Some(Opening {
        attempts: a,
        timeout_s,
    }) = report.rr.as_ref().and_then(|r| r.opening)
    else {
        return;
    };
    let total_opened = report
        .rr
        .as_ref()
        .map_or(0, |r| r.summary.total_transactions);
    if total_opened == 0 && report.outcome == Outcome::Completed {
        report.outcome = Outcome::Failed {
            error: format!(
                "no new connection opened: {} attempt{}, {}; the path or the server takes no \
                 new connections (a connection limit already reached?)",
                a.attempts,
                if a.attempts == 1 { "" } else { "s" },
                how_they_ended(&a, timeout_s)
            ),
        };
    } else if a.failed() > 0 {
        report.warnings.push(format!(
            "{} of {} new connections failed ({:.1} %): {}; a connection limit on the path or \
             at the server shows here, and the rate counts the opened ones only",
            a.failed(),
            a.attempts,
            a.failed_percent,
            how_they_ended(&a, timeout_s)
        ));
    }
}

/// The failures of `a` by kind, in words.
fn how_they_ended(a: &Attempts, timeout_s: f64) -> String {
    format!(
        "{} refused, {} timed out (no answer within {timeout_s:.1} s, --connect-timeout), {} \
         reset before the answer",
        a.refused, a.timed_out, a.reset
    )
}

/// The request/response spec of a `--connections-only` configuration, if it is one this mode
/// can run: TCP, persistent flows (the held ones), one-byte transactions.
fn check(config: &ClientConfig) -> Result<RrSpec, Error> {
    let bad = |reason: &str| {
        Err(Error::Spec(SpecError {
            field: Field::ConnectionsOnly,
            reason: reason.into(),
        }))
    };
    let Workload::RequestResponse(r) = &config.spec.workload else {
        return bad("it is a request/response mode; a throughput test has no connections to open");
    };
    if r.udp.is_some() {
        return bad("it opens TCP connections; UDP (-u) has none");
    }
    if r.connect_per_transaction {
        return bad("it opens a connection per transaction itself; leave out --crr");
    }
    if r.burst.get() > 1 {
        return bad("each new connection carries one transaction; leave out --burst");
    }
    if r.request_len.get() != 1 || r.response_len.get() != 1 {
        return bad("each new connection carries a 1-byte request and answer; leave out -r");
    }
    if !matches!(config.spec.end, EndCondition::Duration(_)) {
        return bad("it runs for a time (-t)");
    }
    Ok(r.clone())
}

/// The held test: the spec's flows, persistent. Paced at one transaction per flow per test
/// length, which it never sends during the test: that tells the server a quiet flow is not a
/// dead one (its idle check skips slow paced tests).
fn held_config(config: &ClientConfig, spec: &RrSpec) -> ClientConfig {
    let mut c = config.clone();
    c.connections_only = None;
    let secs = match config.spec.end {
        EndCondition::Duration(d) => d.as_secs_f64(),
        EndCondition::Bytes(_) => 1.0,
    };
    c.spec.workload = Workload::RequestResponse(RrSpec {
        // A hair above one per -t, so rounding never makes the period longer than the test.
        rate_per_flow: Some(1.0 / secs * (1.0 + 1e-6)),
        connect_per_transaction: false,
        burst: NonZeroU32::MIN,
        ..spec.clone()
    });
    c
}

/// The openers' test: `--crr` over `openers` flows, at the spec's pace if it has one.
fn openers_spec(spec: &RrSpec, openers: NonZeroU16) -> RrSpec {
    RrSpec {
        flows: FlowCount::from(openers),
        connect_per_transaction: true,
        burst: NonZeroU32::MIN,
        ..spec.clone()
    }
}

/// What a held flow answered at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Its 1-byte request was answered.
    Open,
    /// The peer had closed it.
    Closed,
    /// Reset, or another socket error.
    Reset,
    /// No answer within the patience given.
    Unanswered,
}

/// Sends each held flow a 1-byte request and waits (at most `patience`) for its answer, all
/// at once; by flow id, ascending (`None`: a check that panicked, a flow that did not answer).
async fn check_held(held: Vec<(u16, TcpStream)>, patience: Duration) -> Vec<(Option<u16>, Held)> {
    let mut set = tokio::task::JoinSet::new();
    for (id, s) in held {
        set.spawn(async move { (Some(id), check_one(s, patience).await) });
    }
    let mut out = Vec::new();
    while let Some(j) = set.join_next().await {
        out.push(j.unwrap_or((None, Held::Unanswered)));
    }
    out.sort_by_key(|(id, _)| *id);
    out
}

async fn check_one(s: TcpStream, patience: Duration) -> Held {
    let round_trip = async {
        s.set_nonblocking(true)?;
        // A FIN already here is a closed flow; writing to it first would race its reset.
        match s.peek(&mut [0u8; 1]) {
            Ok(0) => return Ok(false),
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        let mut s = tokio::net::TcpStream::from_std(s)?;
        s.write_all(&[0]).await?;
        let mut b = [0u8; 1];
        Ok::<_, std::io::Error>(s.read(&mut b).await? == 1)
    };
    match tokio::time::timeout(patience, round_trip).await {
        Ok(Ok(true)) => Held::Open,
        Ok(Ok(false)) => Held::Closed,
        Ok(Err(_)) => Held::Reset,
        Err(_) => Held::Unanswered,
    }
}

/// Ends the held test as any request/response test ends ([`finish_rr`]): `Finish`, the
/// server's results, then this end's count per flow (one transaction for each flow that
/// answered the check), which the server checks against its own.
async fn finish_held(
    holder: &mut Session,
    checks: &[(Option<u16>, Held)],
    interrupted: bool,
    warnings: &mut Vec<String>,
) {
    let addr = holder.addr.clone();
    // A second Ctrl-C went to the openers' test; the held one waits out its bounds.
    let mut give_up = GiveUp::new(std::future::pending());
    let tally = |_: &()| Tally {
        counts: (checks.iter())
            .filter_map(|&(id, h)| {
                Some(IdCount {
                    id: id?,
                    count: u64::from(h == Held::Open),
                })
            })
            .collect(),
    };
    // The held test's intervals say nothing the report uses.
    let end = finish_rr(
        holder,
        interrupted,
        true,
        &mut give_up,
        &mut (),
        |(), _| {},
        tally,
    )
    .await;
    match end {
        RrFinish::NotSent(_) => warnings.push(format!(
            "{addr}: the held flows' test could not be finished"
        )),
        RrFinish::ServerError(message) => {
            warnings.push(format!("the server reported on the held flows: {message}"))
        }
        RrFinish::TimedOut | RrFinish::Closed => {
            warnings.push(format!("{addr} did not send the held flows' results"));
        }
        // A give-up that never fires is never seen.
        RrFinish::Results(_) | RrFinish::GaveUp => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TestSpec;

    fn config(spec: TestSpec) -> ClientConfig {
        ClientConfig {
            spec,
            connections_only: NonZeroU16::new(8),
            ..ClientConfig::new("127.0.0.1")
        }
    }

    fn rr_spec(f: impl FnOnce(&mut RrSpec)) -> TestSpec {
        let mut spec = TestSpec::request_response();
        if let Workload::RequestResponse(r) = &mut spec.workload {
            r.flows = crate::config::FlowCount::new(100).unwrap();
            f(r);
        }
        spec
    }

    #[test]
    fn only_tcp_one_byte_persistent_request_response_is_accepted() {
        assert!(check(&config(rr_spec(|_| {}))).is_ok());
        for (spec, words) in [
            (TestSpec::throughput(), "throughput"),
            (rr_spec(|r| r.udp = Some(Default::default())), "UDP"),
            (rr_spec(|r| r.connect_per_transaction = true), "--crr"),
            (
                rr_spec(|r| r.burst = NonZeroU32::new(4).unwrap()),
                "--burst",
            ),
            (
                rr_spec(|r| r.response_len = NonZeroU32::new(64).unwrap()),
                "-r",
            ),
        ] {
            let e = check(&config(spec)).unwrap_err().to_string();
            assert!(e.contains("--connections-only") && e.contains(words), "{e}");
        }
    }

    #[test]
    fn the_held_test_is_paced_within_its_length_and_the_openers_connect_per_transaction() {
        let mut spec = rr_spec(|r| r.rate_per_flow = Some(50.0));
        spec.end = EndCondition::Duration(Duration::from_secs(3));
        let c = config(spec);
        let r = check(&c).unwrap();
        let held = held_config(&c, &r);
        held.spec.validate().unwrap();
        let h = held.spec.as_rr().unwrap();
        assert_eq!(h.flows.get(), 100);
        assert!(!h.connect_per_transaction);
        assert!(held.connections_only.is_none());
        let p = h.period().unwrap();
        assert!(
            p <= Duration::from_secs(3) && p > Duration::from_millis(2990),
            "{p:?}"
        );
        let o = openers_spec(&r, NonZeroU16::new(8).unwrap());
        assert_eq!((o.flows.get(), o.connect_per_transaction), (8, true));
        // --rate paces each opener.
        assert_eq!(o.rate_per_flow, Some(50.0));
    }

    #[tokio::test]
    async fn a_held_flow_is_told_open_closed_or_unanswered() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (a, b, c) = (
            TcpStream::connect(addr).unwrap(),
            TcpStream::connect(addr).unwrap(),
            TcpStream::connect(addr).unwrap(),
        );
        let mut peers: Vec<TcpStream> = (0..3).map(|_| l.accept().unwrap().0).collect();
        // The first answers, the second is closed, the third stays silent.
        let echo = {
            let mut p = peers.remove(0);
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut b = [0u8; 1];
                p.read_exact(&mut b).unwrap();
                p.write_all(&b).unwrap();
                p
            })
        };
        drop(peers.remove(0));
        std::thread::sleep(Duration::from_millis(50));
        // Under their flow ids (a flow refused at setup leaves a gap), sorted by id.
        let got = check_held(vec![(9, c), (2, a), (5, b)], Duration::from_millis(300)).await;
        assert_eq!(
            got,
            [
                (Some(2), Held::Open),
                (Some(5), Held::Closed),
                (Some(9), Held::Unanswered)
            ]
        );
        drop(echo.join());
    }
}
