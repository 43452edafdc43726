//! The client side of a throughput test, in phases: the data connections and the server's
//! `Ready` ([`Session::connect_data`]) → [`Running::start`] (`Go` sent, stream threads started)
//! → [`Running::run`] (live intervals merged with the server's, until the end mark, the user or
//! a failure; the window cut there) → [`Ended::drain`] (`Finish` sent, receivers drained, the
//! server's results collected) → [`Drained::report`] (the totals and the warnings).
//!
//! Data flows from `Go` on, and from then on every path ends in a report. Not the handshake
//! before (`client`), the stream threads (`engine`), or the arithmetic of merging
//! ([`crate::summary`]).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use super::cancel::GiveUp;
use super::config::ClientConfig;
use super::event::{ClientEvent, OnEvent};
use super::pairing::Pairing;
use super::session::{ReportBody, Session, ended_by, no_results, send, send_finish};
use super::tcp_streams;
use crate::check;
use crate::config::{EndCondition, StreamDirection, ThroughputSpec};
use crate::control::sleep_until_opt;
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::stream::SendMode;
use crate::error::Error;
use crate::proto::{Message, Ready, StreamLayout};
use crate::report::{Outcome, SideInterval, SideResults, SocketReport, StreamInfo, TestReport};
use crate::summary::{self, Directions, Window};

/// Runs an accepted throughput test and reports it.
pub(super) async fn run(
    mut session: Session,
    config: &ClientConfig,
    tp: &ThroughputSpec,
    on_event: OnEvent<'_>,
    cancel: impl Future<Output = ()>,
    mut give_up: GiveUp<impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    tokio::pin!(cancel);
    let layout = StreamLayout::new(tp);
    let mut warnings = Vec::new();
    let (data, ready, _) = session
        .connect_data(config, layout.streams(), &mut warnings, cancel.as_mut())
        .await?;
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }
    let test = Test {
        session,
        config,
        dirs: layout.directions(),
        warnings,
    };
    let running = Running::start(test, tp, layout, data, ready, on_event).await?;
    let ended = running.run(cancel.as_mut(), on_event).await;
    let drained = ended.drain(cancel, &mut give_up, on_event).await;
    Ok(drained.report(on_event).await)
}

/// What every phase of an accepted test holds.
struct Test<'c> {
    session: Session,
    config: &'c ClientConfig,
    /// Stream id → direction.
    dirs: Directions,
    warnings: Vec<String>,
}

/// A test whose data flows: stream threads, and both ends' intervals being paired.
struct Running<'c> {
    test: Test<'c>,
    infos: Vec<StreamInfo>,
    group: Group,
    sampler: Sampler,
    merger: Pairing<SideInterval>,
    /// When data started to flow, for the report.
    started_at: SystemTime,
    /// Time zero of this end's clock, for senders and receivers alike.
    start: Instant,
}

impl<'c> Running<'c> {
    /// Says `Go` and starts a thread per stream. An error here (a rate the kernel cannot
    /// pace, no thread) stops the streams already started.
    async fn start(
        mut test: Test<'c>,
        tp: &ThroughputSpec,
        layout: StreamLayout,
        data: Vec<(std::net::TcpStream, SocketReport)>,
        ready: Ready,
        on_event: OnEvent<'_>,
    ) -> Result<Self, Error> {
        // Our senders start now: the server's receivers start their clock when this arrives,
        // just ahead of our first byte. A server that cannot hear it will say so later.
        let addr = test.session.addr.clone();
        let _ = send(&mut test.session.wr, &Message::Go, &addr).await;
        // Data flows from here; from now on every path ends in a report. This clock starts
        // for our senders and for our receivers alike: the server's first byte arrives about
        // now.
        let started_at = SystemTime::now();
        let start = Instant::now();
        let send_mode = match tp.zerocopy {
            true => SendMode::Sendfile,
            false => SendMode::Copy,
        };
        let ends = (test.session.client_addr, test.session.server_addr);
        let (group, infos) = tcp_streams::start(
            test.config.spec.end,
            tp,
            send_mode,
            (layout, data),
            ends,
            &ready.sockets,
        )?;
        on_event(ClientEvent::Started {
            server: test.session.server.clone(),
            streams: infos.clone(),
        });
        let schedule = Schedule::for_spec(&test.config.spec);
        let sampler = Sampler::new(start, schedule, group.handles());
        let merger = Pairing::new(test.dirs.clone());
        Ok(Running {
            test,
            infos,
            group,
            sampler,
            merger,
            started_at,
            start,
        })
    }

    /// Samples and merges intervals until the end mark (a timed test), the last byte (a byte
    /// count), the user (`cancel`) or a failure, then closes the measured window.
    async fn run<C: Future<Output = ()>>(
        mut self,
        mut cancel: Pin<&mut C>,
        on_event: OnEvent<'_>,
    ) -> Ended<'c> {
        let spec = &self.test.config.spec;
        let deadline = match spec.end {
            EndCondition::Duration(d) => Some(self.start + spec.omit + d),
            EndCondition::Bytes(_) => None,
        };
        let byte_count = deadline.is_none();
        let mut outcome = Outcome::Completed;
        let mut control_open = true;
        loop {
            tokio::select! {
                // Biased: when the deadline and an interval boundary coincide, the deadline
                // wins, so the last interval is closed by the cut at the end mark.
                biased;
                () = &mut cancel => { outcome = Outcome::Interrupted; break; }
                _ = sleep_until_opt(deadline) => break,
                _ = self.group.all_ended(), if byte_count => break,
                msg = self.test.session.rd.next() => match msg {
                    Ok(Some(Message::Interval(iv))) => self.merger.server(iv, on_event),
                    other => {
                        let (error, usable) = ended_by(other, &self.test.session.addr);
                        outcome = Outcome::Failed { error };
                        control_open = usable;
                        break;
                    }
                },
                _ = sleep_until_opt(self.sampler.next_wakeup()) => {
                    if let Some(iv) = self.sampler.on_wakeup(Instant::now()) {
                        self.merger.client(iv, on_event);
                    }
                }
            }
        }
        let window = self.close_window(&outcome, on_event);
        Ended {
            running: self,
            outcome,
            window,
            control_open,
        }
    }

    /// The end mark of a timed or cut-short test: the window closes here, whatever is still
    /// in flight. A byte count that ran to its end closes with its last byte instead.
    fn close_window(&mut self, outcome: &Outcome, on_event: OnEvent<'_>) -> Window {
        let spec = &self.test.config.spec;
        match (spec.end, outcome) {
            (EndCondition::Bytes(_), Outcome::Completed) => Window::UntilLastByte,
            (EndCondition::Duration(d), Outcome::Completed) => {
                self.cut(on_event);
                Window::EndMark {
                    asked: d.as_secs_f64(),
                }
            }
            _ => {
                let now = self.cut(on_event);
                let from = self.start + spec.omit;
                Window::Fixed(now.saturating_duration_since(from).as_secs_f64())
            }
        }
    }

    /// Closes the measured window now, and stops our senders: what they would write after
    /// the end mark is not the test's (the server stops its own at its mark too). Returns when.
    fn cut(&mut self, on_event: OnEvent<'_>) -> Instant {
        let now = Instant::now();
        let ivs = self.sampler.cut(now);
        self.group.stop_senders();
        for iv in ivs {
            self.merger.client(iv, on_event);
        }
        now
    }
}

/// A test past its end mark: the window is closed, the drain and the server's results are
/// next.
struct Ended<'c> {
    running: Running<'c>,
    outcome: Outcome,
    window: Window,
    /// The control connection still carries messages (it may have failed, or brought an
    /// error).
    control_open: bool,
}

impl<'c> Ended<'c> {
    /// Stops our senders, sends `Finish`, and waits (bounded) for our receivers to drain and
    /// for the server's results; a Ctrl-C during the wait (`cancel` after a completed test,
    /// `give_up` after an interrupted one) stops it.
    async fn drain<C: Future<Output = ()>, G: Future<Output = ()>>(
        self,
        mut cancel: Pin<&mut C>,
        give_up: &mut GiveUp<G>,
        on_event: OnEvent<'_>,
    ) -> Drained<'c> {
        // Long on purpose: one select loop whose arms share the wait's state (server results, why
        // they are missing, receivers done, drain over, outcome) until both ends have finished.
        let Ended {
            running: mut r,
            mut outcome,
            window,
            control_open,
        } = self;
        r.group.stop_senders();
        let interrupted = outcome == Outcome::Interrupted;
        let config = r.test.config;
        let addr = r.test.session.addr.clone();
        // Why the server's results did not come, for a test that otherwise completed.
        let mut missing_why = send_finish(&mut r.test.session, interrupted, control_open)
            .await
            .err();
        let control_open = missing_why.is_none();
        let ended_at = Instant::now();
        let limits = DrainLimits::new(config.drain_timeout, interrupted);
        let mut server_results: Option<SideResults> = None;
        let mut receivers_done = false;
        let mut drain_over = false;
        while control_open && (server_results.is_none() || !receivers_done) {
            tokio::select! {
                msg = r.test.session.rd.next(), if server_results.is_none() => match msg {
                    Ok(Some(Message::Interval(iv))) => r.merger.server(iv, on_event),
                    Ok(Some(Message::Results(res))) => server_results = Some(res),
                    other => {
                        let why = no_results(other, &addr, &mut outcome, &mut r.test.warnings);
                        missing_why = why.or(missing_why);
                        break;
                    }
                },
                _ = r.group.all_ended(), if !receivers_done => receivers_done = true,
                _ = sleep_until_opt(r.sampler.next_wakeup()) => {
                    if let Some(iv) = r.sampler.on_wakeup(Instant::now()) {
                        r.merger.client(iv, on_event);
                    }
                }
                _ = tokio::time::sleep_until(limits.drain_deadline.into()), if !drain_over => {
                    drain_over = true;
                    if !receivers_done {
                        receivers_done = true;
                        let limit = limits.drain;
                        r.test.warnings.push(format!(
                            "gave up waiting for the end of the test after {limit:?}; figures cover what had arrived"
                        ));
                    }
                }
                _ = tokio::time::sleep_until(limits.results_deadline.into()) => {
                    if server_results.is_none() {
                        let waited = limits.results_deadline.saturating_duration_since(ended_at);
                        missing_why = Some(super::outcome::results_timed_out(&addr, waited));
                    }
                    break;
                }
                () = &mut cancel, if !interrupted => {
                    // A second Ctrl-C: stop waiting.
                    outcome = Outcome::Interrupted;
                    break;
                }
                () = give_up.wait() => {
                    outcome = Outcome::Interrupted;
                    r.test.warnings.push(gave_up_warning(server_results.is_some()));
                    break;
                }
            }
        }
        Drained {
            running: r,
            outcome,
            window,
            server_results,
            missing_why,
            drain_limit: limits.drain,
        }
    }
}

/// What a report cut short by a second Ctrl-C lacks.
pub(super) fn gave_up_warning(have_results: bool) -> String {
    let lost = if have_results {
        "data still in flight"
    } else {
        "data still in flight and the server's results"
    };
    format!(
        "interrupted again while finishing: the figures cover what had arrived; {lost} were not waited for"
    )
}

/// How long the end of a test may take.
struct DrainLimits {
    /// For our receivers to drain.
    drain: Duration,
    drain_deadline: Instant,
    /// For the server's results, which come after its own drain.
    results_deadline: Instant,
}

impl DrainLimits {
    fn new(drain_timeout: Duration, interrupted: bool) -> Self {
        // An interrupted user wants the figures now, not after a slow path drains.
        let drain = if interrupted {
            drain_timeout.min(Duration::from_secs(2))
        } else {
            drain_timeout
        };
        let drain_deadline = Instant::now() + drain;
        // The server drains its own receivers for as long (by default) before it reports:
        // give its results a few seconds more than our own drain, or both give up at the same
        // moment and the receiver's figures are lost just when they matter (a path holding
        // data back).
        let results_deadline = drain_deadline
            + if interrupted {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(5)
            };
        DrainLimits {
            drain,
            drain_deadline,
            results_deadline,
        }
    }
}

/// A test whose data has stopped moving (or been given up on), with the server's results if
/// they came.
struct Drained<'c> {
    running: Running<'c>,
    outcome: Outcome,
    window: Window,
    server_results: Option<SideResults>,
    /// Why the server's results did not come (when they did not).
    missing_why: Option<String>,
    /// How long the receivers were given, for the undelivered-data warning.
    drain_limit: Duration,
}

impl Drained<'_> {
    /// Collects the stream threads' ends and builds the report: intervals, totals over the
    /// window, CPU, and the warnings a user should read.
    async fn report(self, on_event: OnEvent<'_>) -> TestReport {
        let Drained {
            running: r,
            outcome,
            window,
            server_results,
            missing_why,
            drain_limit,
        } = self;
        let Running {
            test,
            infos,
            group,
            sampler,
            mut merger,
            started_at,
            ..
        } = r;
        let Test {
            mut session,
            config,
            dirs,
            mut warnings,
        } = test;
        let ends = group.collect(Duration::from_secs(2)).await;
        let (last, client_results) = sampler.finish(Instant::now(), &ends);
        if server_results.is_some() {
            // The server checks its figures against ours; it closes if this does not come.
            let tally = Message::Tally(check::tally(&client_results));
            let _ = send(&mut session.wr, &tally, &session.addr.clone()).await;
            session.await_server_close().await;
        }
        if let Some(iv) = last {
            merger.client(iv, on_event);
        }
        let mut intervals = merger.finish(on_event);
        let server = server_results.as_ref();
        summary::align_window(&mut intervals, &client_results, server);
        let summary = summary::summarize(&dirs, &client_results, server, window);
        let cpu = summary::cpu_report(&client_results, server);
        warn_of_ends(&mut warnings, &dirs, &client_results, server);
        let outcome = judge(
            outcome,
            &dirs,
            &client_results,
            server,
            &summary,
            &missing_why,
        );
        if outcome != Outcome::Interrupted {
            warn_of_undelivered(&mut warnings, &dirs, &client_results, server, drain_limit);
        }
        let body = ReportBody {
            streams: infos,
            intervals,
            summary,
            rr: None,
            udp: None,
            cpu,
            outcome,
            warnings,
        };
        session.report(config, started_at, body)
    }
}

/// The outcome the figures allow. A test whose figures cannot be true failed, however it
/// ended ([`check`]: a receiver ahead of its sender over the test or inside the window). A test
/// that ran to its end without the server's results failed too: half its figures are missing
/// (which, and why, in the error), and a run that looks complete would be averaged with the
/// others by a sweep or a report.
fn judge(
    outcome: Outcome,
    dirs: &Directions,
    client: &SideResults,
    server: Option<&SideResults>,
    summary: &crate::report::Summary,
    missing_why: &Option<String>,
) -> Outcome {
    let Some(server) = server else {
        return super::outcome::without_server_results(
            outcome,
            &missing_server_figures(dirs),
            missing_why.as_deref(),
        );
    };
    if let Some(o) = check::overcounted(client, server).first() {
        return Outcome::Failed {
            error: o.to_string(),
        };
    }
    if let Some(i) = check::received_over_sent(summary).first() {
        return Outcome::Failed {
            error: i.to_string(),
        };
    }
    outcome
}

/// Streams that ended with an error, and a server whose results never came: which figures
/// that leaves out depends on which way the test's data flowed.
fn warn_of_ends(
    warnings: &mut Vec<String>,
    dirs: &Directions,
    client: &SideResults,
    server: Option<&SideResults>,
) {
    for s in client
        .streams
        .iter()
        .chain(server.iter().flat_map(|r| &r.streams))
    {
        if let Some(e) = &s.error {
            warnings.push(format!("stream {} ended with an error: {e}", s.stream));
        }
    }
    if server.is_none() {
        warnings.push(format!(
            "the server's results never arrived: {} are missing",
            missing_server_figures(dirs)
        ));
    }
}

/// What a report lacks without the server's results: the receiver figures of the streams
/// the client sent on, the sender figures of those the server sent on.
fn missing_server_figures(dirs: &Directions) -> String {
    let has = |d| dirs.values().any(|&x| x == d);
    let mut missing = Vec::new();
    if has(StreamDirection::ClientToServer) {
        missing
            .push("the receiver figures of the client→server streams (bytes the server received)");
    }
    if has(StreamDirection::ServerToClient) {
        missing.push(
            "the sender figures of the server→client streams (bytes the server sent, null, \
             and its retransmits and RTT)",
        );
    }
    missing.join(" and ")
}

/// Data sent that had not arrived `drain_limit` after the end, and what the figures say of
/// where it is: data TCP never transmitted is the sender's own queue, not the path's; a path
/// that drops every full-size packet (an MTU black hole) shows as retransmissions that never
/// get through, so it is named only when the senders retransmitted after the end.
fn warn_of_undelivered(
    warnings: &mut Vec<String>,
    dirs: &Directions,
    client: &SideResults,
    server: Option<&SideResults>,
    drain_limit: Duration,
) {
    use crate::units::ByteSize;
    for u in summary::undelivered(dirs, client, server) {
        if u.missing <= (u.sent / 100).max(64 * 1024) {
            continue;
        }
        let on_path = u.missing - u.unsent;
        let mut why = Vec::new();
        if u.unsent > 0 {
            why.push(format!(
                "{} of it was never sent: it was still in the senders' socket buffers (paced \
                 by -b, or held back by the receiver's window)",
                ByteSize(u.unsent)
            ));
        }
        if on_path > (u.sent / 100).max(64 * 1024) {
            why.push(if u.retransmits > 0 {
                format!(
                    "{} was sent and never arrived although the senders retransmitted {} \
                     segments after the end: the path is dropping it (an MTU black hole drops \
                     every full-size packet: -M 1200 tells) or holding it in a deep queue",
                    ByteSize(on_path),
                    u.retransmits
                )
            } else {
                format!(
                    "{} was sent and had not arrived: the path is holding it (a deep queue in \
                     a shaper)",
                    ByteSize(on_path)
                )
            });
        }
        warnings.push(format!(
            "{}: {} of the {} sent had not arrived {drain_limit:?} after the end; {}",
            u.direction.label(),
            ByteSize(u.missing),
            ByteSize(u.sent),
            why.join("; ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{AfterEnd, CpuUsage, Role, SideStreamResult, Transfer};

    fn side(role: Role, total: u64, after_end: AfterEnd) -> SideResults {
        SideResults {
            streams: vec![SideStreamResult {
                stream: 0,
                role,
                transfer: Transfer::new(total, 2.0),
                total_bytes: total,
                omitted_bytes: 0,
                tcp: None,
                after_end,
                error: None,
                thread: None,
                receive_queue: None,
            }],
            cpu: CpuUsage::default(),
        }
    }

    fn warned(unsent: u64, retransmits: u64) -> Vec<String> {
        let dirs: Directions = [(0, StreamDirection::ClientToServer)].into();
        let client = side(
            Role::Sender,
            5_000_000,
            AfterEnd {
                unsent_bytes: unsent,
                retransmits,
                ..AfterEnd::default()
            },
        );
        let server = side(Role::Receiver, 1_000_000, AfterEnd::default());
        let mut w = Vec::new();
        let drain = Duration::from_secs(10);
        warn_of_undelivered(&mut w, &dirs, &client, Some(&server), drain);
        w
    }

    /// Issue 30: `-b 1M -t 2` warned of an "MTU black hole" for data its own send buffer
    /// still held. What TCP never sent is the sender's queue; the path is blamed only for what
    /// was sent, and a black hole named only when retransmissions did not get through.
    #[test]
    fn undelivered_data_is_blamed_on_the_path_only_when_it_was_sent() {
        let queued = warned(4_000_000, 0);
        assert_eq!(queued.len(), 1);
        assert!(
            queued[0].contains("3.81 MiB of it was never sent"),
            "{queued:?}"
        );
        assert!(!queued[0].contains("path"), "{queued:?}");
        let held = warned(0, 0);
        assert!(held[0].contains("the path is holding it"), "{held:?}");
        assert!(!held[0].contains("black hole"), "{held:?}");
        let dropped = warned(0, 120);
        assert!(dropped[0].contains("black hole"), "{dropped:?}");
        assert!(
            dropped[0].contains("retransmitted 120 segments"),
            "{dropped:?}"
        );
    }
}
