//! An admitted test as both workloads' controllers hold it: its control connection, its data
//! connections, its place in the server's limits, and what every controller does the same way
//! (bounded writes to the client, the hard stop, noticing a test in which nothing moves, the
//! one log line).
//!
//! Not how a test gets here ([`session`](super::session)) nor what it does while it runs
//! ([`bulk`](super::bulk), [`rr`](super::rr)).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::net::UdpSocket;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tracing::info;

use super::admission::RunningGuard;
use super::budget::Reservation;
use super::context::Ctx;
use super::metrics::TestMetrics;
use super::peer_text::bounded;
use super::registry::{DataConn, Registration};
use crate::auth::DataTag;
use crate::config::{EndCondition, TestSpec, Workload};
use crate::host::Monitor;
use crate::proto::{self, ErrorCode, ErrorMsg, Message, MessageReader, Tally};

/// Why a test ended, for the log line.
#[derive(Debug)]
pub(super) enum TestEnd {
    Finished {
        interrupted: bool,
    },
    ClientGone(String),
    /// Nothing moved for the idle timeout (why, in words): the client stalled, or left
    /// without closing.
    Idle(String),
    Overran,
    ShuttingDown,
}

impl TestEnd {
    /// The outcome label of `xbench_tests_finished`.
    pub(super) fn metric_name(&self) -> &'static str {
        match self {
            TestEnd::Finished { interrupted: false } => "completed",
            TestEnd::Finished { interrupted: true } => "interrupted",
            TestEnd::ClientGone(_) => "client_gone",
            TestEnd::Idle(_) => "idle",
            TestEnd::Overran => "overran",
            TestEnd::ShuttingDown => "shutdown",
        }
    }

    /// A test the server itself ended having measured it (shutting down, or idle): it says
    /// why, then sends its results as after the client's `Finish`, so a client still there
    /// reports what was measured rather than nothing.
    pub(super) fn sends_results_after_error(&self) -> bool {
        matches!(self, TestEnd::Idle(_) | TestEnd::ShuttingDown)
    }
}

/// An admitted test with its data connections, handed to the workload's own controller.
pub(super) struct Test {
    pub(super) peer: SocketAddr,
    /// The client's software, for the log line.
    pub(super) client: String,
    pub(super) ctx: Arc<Ctx>,
    pub(super) rd: MessageReader<OwnedReadHalf>,
    pub(super) wr: OwnedWriteHalf,
    /// Data connections by stream or flow id.
    pub(super) conns: BTreeMap<u16, std::net::TcpStream>,
    /// Their greetings' tags in hex, by id, for `Ready`.
    pub(super) greetings: Vec<String>,
    /// Where `--crr` connections keep arriving; dropped (refusing latecomers) otherwise.
    pub(super) data: mpsc::Receiver<DataConn>,
    /// The test's cookie in the registry, for as long as the test runs.
    pub(super) registration: Registration,
    /// The test's place in `--max-tests` and `--max-tests-per-client`, and what it reserved
    /// of the server's budget.
    pub(super) running: Option<RunningGuard>,
    /// Once the results are out, the control connection's descriptor alone.
    pub(super) control: Option<Reservation>,
    /// A UDP test's sockets, each connected to the address that proved it is the client's.
    pub(super) udp: Vec<UdpConn>,
    /// The test's place in the server's counters (`--metrics`).
    pub(super) metrics: TestMetrics,
    /// Reads our interface over the test, for a client that reads [`Message::Host`].
    pub(super) host: Option<Monitor>,
}

impl Test {
    /// The client's [`Tally`], which it sends once it has our results; `None` if it does not
    /// come within a few seconds.
    ///
    /// Every xbench client sends its tally as soon as it has the results, so one that does
    /// not is an older client, one interrupted a second time while finishing, or one that
    /// misbehaves; the test's figures then go unchecked against the client's, and a warning
    /// says so. Without it the log line of such a test read like that of a checked one.
    pub(super) async fn tally(&mut self) -> Option<Tally> {
        let mut next = self.rd.next_within(Duration::from_secs(5)).await;
        if matches!(next, Ok(Some(Message::Finish(_)))) {
            // The client's goodbye to a test the server ended (and sent results for) first.
            next = self.rd.next_within(Duration::from_secs(5)).await;
        }
        let why = match next {
            Ok(Some(Message::Tally(t))) => return Some(t),
            Ok(Some(other)) => format!("it sent `{}` instead", other.kind()),
            Ok(None) => "it closed the control connection first".to_owned(),
            Err(e) => e.to_string(),
        };
        tracing::warn!(
            peer = %self.peer,
            client = %self.client,
            "test not self-checked: the client sent no tally of its own counts ({why}); \
             an older or misbehaving client"
        );
        None
    }

    /// Logs a test whose figures failed their self-check ([`crate::check`]).
    pub(super) fn log_failed_check(&self, what: &dyn std::fmt::Display) {
        tracing::warn!(
            peer = %self.peer,
            client = %self.client,
            "test failed its self-check: {what}"
        );
    }

    /// Sends the final results, giving the test's slot back first: a client that starts its
    /// next test the moment it has these (a sweep) must find the slot free.
    pub(super) async fn send_results(&mut self, msg: &Message) {
        if let Some(r) = self.running.take() {
            self.control = Some(r.into_control());
        }
        if let Some(m) = self.host.take() {
            let mut report = m.finish();
            let mut host = Message::Host(Box::new(report.clone()));
            // An hours-long test's intervals can outgrow one message: send the totals.
            if proto::frame::encode(&host).is_err()
                && let Some(i) = report.interface.as_mut()
            {
                i.intervals.clear();
                report.error =
                    Some("per-interval counts left out: too many for one message".into());
                host = Message::Host(Box::new(report));
            }
            let _ = self.send(&host).await;
        }
        let _ = self.send(msg).await;
    }

    /// Writes a control message, giving up after the handshake timeout: a client that stopped
    /// reading (a full receive window) must not hold its test, and the test's threads, past
    /// every other limit while this task waits on the write.
    pub(super) async fn send(&mut self, msg: &Message) -> Result<(), String> {
        let limit = self.ctx.limits.handshake_timeout;
        match tokio::time::timeout(limit, proto::write_message(&mut self.wr, msg)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("cannot write to the client: {e}")),
            Err(_) => Err(format!(
                "the client stopped reading its control connection for {limit:?}"
            )),
        }
    }

    /// Tells the client its test is over early, and why (nothing to say if it left).
    /// Whether it was sent.
    pub(super) async fn tell_end(&mut self, end: &TestEnd) -> bool {
        self.tell(end, false).await
    }

    /// Ends a test the server ended having measured it
    /// ([`TestEnd::sends_results_after_error`]): says why, results to follow, and waits (2 s
    /// at most) for the client's `Finish`, so that its streams stop before ours close under
    /// them (its senders would meet a broken pipe, its request/response flows a connection
    /// closed mid-transaction). Whether the client could be told.
    pub(super) async fn end_before_results(&mut self, end: &TestEnd) -> bool {
        if !self.tell(end, true).await {
            return false;
        }
        // An idle client moves nothing, and may not answer at all.
        if !matches!(end, TestEnd::Idle(_)) {
            let _ = self.rd.next_within(Duration::from_secs(2)).await;
        }
        true
    }

    async fn tell(&mut self, end: &TestEnd, results_follow: bool) -> bool {
        let (code, message) = match end {
            TestEnd::Overran => (
                ErrorCode::Timeout,
                format!(
                    "test ran {:?} past its end; the server stopped it",
                    self.ctx.limits.overrun_grace
                ),
            ),
            TestEnd::ShuttingDown => (
                ErrorCode::ShuttingDown,
                "the server is shutting down".to_owned(),
            ),
            TestEnd::Idle(why) => (
                ErrorCode::Timeout,
                format!("{why} (the server's --idle-timeout); the server ended the test"),
            ),
            _ => return false,
        };
        let msg = Message::Error(ErrorMsg {
            code,
            message,
            max_flows: None,
            results_follow,
        });
        self.send(&msg).await.is_ok()
    }

    /// Refuses the test after admission (a socket the kernel would not configure, no threads).
    pub(super) async fn abort(&mut self, code: ErrorCode, msg: String) -> SessionEnd {
        info!(peer = %self.peer, "aborted a test: {msg}");
        let _ = self.send(&ErrorMsg::message(code, msg)).await;
        SessionEnd::Other
    }

    /// When the server gives up on a test that should have ended.
    /// A byte-count test may take as long as the longest test allowed, warm-up included;
    /// nothing a client asks for reaches past that.
    pub(super) fn hard_stop(&self, spec: &TestSpec, start: Instant) -> Instant {
        let l = &self.ctx.limits;
        let asked = match spec.end {
            EndCondition::Duration(d) => spec.omit.saturating_add(d),
            EndCondition::Bytes(_) => l.max_duration,
        };
        let within = asked.min(l.max_duration).saturating_add(l.overrun_grace);
        start
            .checked_add(within)
            .unwrap_or_else(|| start + Duration::from_secs(7 * 24 * 3600))
    }
}

/// How often a running test's progress is looked at for [`Watchdog::stalled`].
pub(super) const IDLE_LOOK: Duration = Duration::from_secs(1);

/// What ends a running test from outside its own traffic, the same for every server test
/// (xbench's bulk, UDP and request/response, iperf3's TCP and UDP): running past its hard
/// stop, nothing moving for the idle limit, the server shutting down. A test's loop selects
/// on [`Watchdog::next`] beside its own work, and on a [`Watched::Tick`] tells it what moved
/// ([`Watchdog::stalled`]), as its own counter is what it can read without a borrow across
/// the `select!`.
#[derive(Debug)]
pub(super) struct Watchdog {
    hard_stop: Instant,
    abort: tokio::sync::watch::Receiver<bool>,
    idle: Idle,
    idle_limit: Duration,
    /// Whether quiet counts at all (a paced test slower than the limit is quiet, not dead).
    check_idle: bool,
    tick: tokio::time::Interval,
}

/// What [`Watchdog::next`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watched {
    /// Time to look at the test's progress ([`Watchdog::stalled`]).
    Tick,
    /// Past the hard stop.
    Overran,
    /// The server is shutting down.
    ShuttingDown,
}

impl Watchdog {
    /// A watchdog for a test that must end by `hard_stop` and move something every
    /// `idle_limit` (looked at every `every`); `progress` is its counter now.
    pub(super) fn new(ctx: &Ctx, hard_stop: Instant, every: Duration, progress: u64) -> Self {
        Watchdog {
            hard_stop,
            abort: ctx.abort.clone(),
            idle: Idle::new(progress),
            idle_limit: ctx.limits.idle_timeout,
            check_idle: true,
            tick: tokio::time::interval(every),
        }
    }

    /// Never ends the test for being quiet (it still ends it for overrunning).
    pub(super) fn quiet_is_fine(mut self) -> Self {
        self.check_idle = false;
        self
    }

    /// The idle limit, for the message that ends a quiet test.
    pub(super) fn idle_limit(&self) -> Duration {
        self.idle_limit
    }

    /// Resolves at the next look at the test's progress, or when it must end.
    pub(super) async fn next(&mut self) -> Watched {
        let abort = &mut self.abort;
        tokio::select! {
            _ = self.tick.tick(), if self.check_idle => Watched::Tick,
            () = tokio::time::sleep_until(self.hard_stop.into()) => Watched::Overran,
            () = async { let _ = abort.wait_for(|a| *a).await; } => Watched::ShuttingDown,
        }
    }

    /// Whether the test has been quiet for the idle limit, its counter now at `progress`.
    pub(super) fn stalled(&mut self, progress: u64) -> bool {
        self.idle.stalled(progress, self.idle_limit)
    }

    /// How an xbench test ends after [`Watchdog::next`] saw `w`, its counter now at
    /// `progress`: `None` while it goes on, `quiet`'s end (given the idle limit) when it has
    /// been quiet too long.
    pub(super) fn ended(
        &mut self,
        w: Watched,
        progress: u64,
        quiet: impl FnOnce(Duration) -> TestEnd,
    ) -> Option<TestEnd> {
        match w {
            Watched::Tick if self.stalled(progress) => Some(quiet(self.idle_limit)),
            Watched::Tick => None,
            Watched::Overran => Some(TestEnd::Overran),
            Watched::ShuttingDown => Some(TestEnd::ShuttingDown),
        }
    }
}

/// Notices a test in which nothing moves: its client left without closing, or stalled.
#[derive(Debug)]
pub(super) struct Idle {
    last: u64,
    since: Instant,
}

impl Idle {
    pub(super) fn new(progress: u64) -> Self {
        Idle {
            last: progress,
            since: Instant::now(),
        }
    }

    /// `progress` is any counter that grows while data moves.
    pub(super) fn stalled(&mut self, progress: u64, limit: Duration) -> bool {
        if progress != self.last {
            self.last = progress;
            self.since = Instant::now();
        }
        self.since.elapsed() >= limit
    }
}

/// Reads the client's next message during a test: `Finish` or the reason the test is over.
pub(super) fn on_control(msg: Result<Option<Message>, proto::ProtoError>) -> TestEnd {
    match msg {
        Ok(Some(Message::Finish(f))) => TestEnd::Finished {
            interrupted: f.interrupted,
        },
        Ok(Some(other)) => {
            TestEnd::ClientGone(format!("unexpected message: {}", describe(Ok(Some(other)))))
        }
        Ok(None) => TestEnd::ClientGone("client closed the control connection".into()),
        Err(e) => TestEnd::ClientGone(e.to_string()),
    }
}

/// The one log line of a test: who, what was asked, how it ended, what moved.
pub(super) fn log_test(
    t: &Test,
    spec: &TestSpec,
    end: &TestEnd,
    bytes: u64,
    transactions: Option<u64>,
    elapsed: Duration,
    stream_errors: usize,
) {
    // A controller with its own final figures (UDP, request/response) has finished them.
    t.metrics.finish(end.metric_name(), None);
    let outcome = match end {
        TestEnd::Finished { interrupted: false } => "completed".to_owned(),
        TestEnd::Finished { interrupted: true } => "interrupted by the client".to_owned(),
        TestEnd::ClientGone(why) => format!("client vanished: {why}"),
        TestEnd::Idle(why) => format!("ended idle: {why}"),
        TestEnd::Overran => "overran its duration".to_owned(),
        TestEnd::ShuttingDown => "cut short by shutdown".to_owned(),
    };
    let workload = match &spec.workload {
        Workload::Throughput(tp) if let Some(u) = tp.udp => format!(
            "udp, {} stream(s), {:?}, {}-byte datagrams, {}",
            tp.streams.get(),
            tp.direction,
            u.datagram_len,
            u.bitrate
                .map_or_else(|| "unpaced".to_owned(), |b| format!("{b} bit/s")),
        ),
        Workload::Throughput(tp) => format!(
            "throughput, {} stream(s), {:?}",
            tp.streams.get(),
            tp.direction
        ),
        Workload::RequestResponse(rr) => format!(
            "{}, {} flow(s), {}/{} bytes",
            if rr.connect_per_transaction {
                "crr"
            } else if rr.udp.is_some() {
                "udp rr"
            } else {
                "rr"
            },
            rr.flows.get(),
            rr.request_len.get(),
            rr.response_len.get()
        ),
    };
    info!(
        peer = %t.peer,
        client = %t.client,
        workload,
        end = ?spec.end,
        outcome,
        bytes,
        transactions,
        seconds = elapsed.as_secs_f64(),
        stream_errors,
        "test ended"
    );
}

/// A stream's socket, connected to the client's address, and its greeting's tag.
pub(super) type UdpConn = (u16, UdpSocket, DataTag);

/// How a session ended, for `--one-off`.
#[derive(Debug)]
pub(super) enum SessionEnd {
    Completed,
    Other,
}

/// What a control read that was not the expected message amounts to, for the log.
pub(super) fn describe(m: Result<Option<Message>, proto::ProtoError>) -> String {
    match m {
        Ok(None) => "it closed the connection".into(),
        Ok(Some(m)) => format!("`{}` message out of order", m.kind()),
        // A parse error may quote what the peer sent.
        Err(e) => bounded(&e.to_string(), 200),
    }
}
