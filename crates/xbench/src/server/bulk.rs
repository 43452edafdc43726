//! The server side of a throughput test, in phases: [`start_streams`] (sockets configured,
//! stream threads running) → [`Measuring::begin`] (`Ready` sent, our senders' clock started,
//! the client's `Go` starting our receivers' clock) → [`Measuring::run`] (live intervals until
//! the client's `Finish` or a reason to stop) → [`Measuring::close`] (the end mark, the drain)
//! → [`Measuring::report`] (final intervals, results, the log line).
//!
//! Each of the server's clocks closes its window on its own timer ([`Clock`]), so a `Finish`
//! stuck behind a full queue cannot stretch it. Not the session before the test
//! ([`session`](super::session)), and not the stream threads themselves (`engine`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::io::AsyncWriteExt;

use super::governor::{Governor, PacedSocket, Share};
use super::metrics::{Direction, Moved, Transport};
use super::test::SessionEnd;
use super::test::{IDLE_LOOK, Test, TestEnd, Watchdog, log_test, on_control};
use crate::check;
use crate::config::{EndCondition, StreamDirection, TestSpec, ThroughputSpec};
use crate::control::sleep_until_opt;
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::sockopt;
use crate::engine::stream::{self, Budget, Payload, SendMode};
use crate::proto::{ErrorCode, Message, Ready, StreamLayout};
use crate::report::{CpuUsage, Role, SideResults, SocketReport};

/// Runs an admitted throughput test to its end and reports it.
pub(super) async fn run(mut t: Test, spec: &TestSpec, tp: &ThroughputSpec) -> SessionEnd {
    let (group, sockets) = match start_streams(&mut t, spec, tp) {
        Ok(started) => started,
        Err((code, msg)) => return t.abort(code, msg).await,
    };
    // Scrapes read the streams' byte counters while the test runs; at its end they hold the
    // test's totals.
    let counters: Vec<(Role, Arc<stream::StreamShared>)> = group
        .handles()
        .iter()
        .map(|h| (h.role, Arc::clone(&h.shared)))
        .collect();
    t.metrics.watch(move || {
        let sum = |role| {
            counters
                .iter()
                .filter(|(r, _)| *r == role)
                .map(|(_, s)| s.bytes.0.load(std::sync::atomic::Ordering::Relaxed))
                .sum()
        };
        [
            (Direction::Received, Role::Receiver),
            (Direction::Sent, Role::Sender),
        ]
        .into_iter()
        .map(|(d, role)| {
            let bytes = sum(role);
            (
                Transport::Tcp,
                d,
                Moved {
                    bytes,
                    datagrams: 0,
                },
            )
        })
        .filter(|(_, _, m)| m.bytes > 0)
        .collect()
    });
    let Ok((mut test, early_end)) = Measuring::begin(t, group, sockets, spec, tp).await else {
        return SessionEnd::Other;
    };
    let end = match early_end {
        Some(end) => end,
        None => test.run(spec).await,
    };
    let ok = test.close(&end, spec).await;
    test.report(&end, ok, spec).await
}

/// Configures every data socket as the client asked and starts its stream thread. An error
/// is the refusal to send; the streams already started are stopped first.
fn start_streams(
    t: &mut Test,
    spec: &TestSpec,
    tp: &ThroughputSpec,
) -> Result<(Group, Vec<SocketReport>), (ErrorCode, String)> {
    let layout = StreamLayout::new(tp);
    let budget = match spec.end {
        EndCondition::Bytes(b) => Some(Budget::new(b)),
        EndCondition::Duration(_) => None,
    };
    let send_mode = if tp.zerocopy {
        SendMode::Sendfile
    } else {
        SendMode::Copy
    };
    let block = tp.block_len.get() as usize;
    let payload = match layout.contains(StreamDirection::ServerToClient) {
        true => match Payload::new(block, send_mode) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                let msg = format!("server could not prepare its payload: {e}");
                return Err((ErrorCode::ServerError, msg));
            }
        },
        false => None,
    };
    let conns = std::mem::take(&mut t.conns);
    let mut sockets: Vec<SocketReport> = Vec::with_capacity(conns.len());
    // Dropped on an early return: streams already started must not outlive the refusal.
    let mut handles = Vec::with_capacity(conns.len());
    let mut warnings = Vec::new();
    for (id, sock) in conns {
        if let Err(e) = sockopt::apply(SockRef::from(&sock), &spec.socket, &mut warnings) {
            drop(Group::new(handles));
            let msg = format!("server could not configure a data socket: {e}");
            return Err((ErrorCode::BadRequest, msg));
        }
        sockets.push(sockopt::report(SockRef::from(&sock), &spec.socket));
        let h = match (layout.direction(id), &payload) {
            (Some(StreamDirection::ServerToClient), Some(p)) => {
                // Paced from the first byte; the governor may lower it to a fair share later.
                if let Err(e) = sockopt::pace(&sock, tp.bitrate) {
                    drop(Group::new(handles));
                    let msg = format!("server could not pace a stream as asked: {e}");
                    return Err((ErrorCode::ServerError, msg));
                }
                stream::spawn_sender(id, sock, Arc::clone(p), budget.clone())
            }
            _ => stream::spawn_receiver(id, sock, block, tp.receive),
        };
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                drop(Group::new(handles));
                let msg = format!("server could not start a stream thread: {e}");
                return Err((ErrorCode::ServerError, msg));
            }
        }
    }
    for w in warnings.iter().take(2) {
        tracing::info!(peer = %t.peer, "{w}");
    }
    Ok((Group::new(handles), sockets))
}

/// A test whose streams run and whose clocks measure.
struct Measuring {
    t: Test,
    /// One per role this end has, each started when its first byte can be on the wire.
    clocks: Vec<Clock>,
    group: Group,
    /// When `Ready` left: the senders' time zero, and the hard stop's.
    start: Instant,
    /// The senders' place in `--max-send-rate`, held until the report is out.
    _share: Option<Share>,
}

impl Measuring {
    /// Starts our senders' clock and sends `Ready`, then waits for the client's `Go` to start
    /// our receivers' clock. A client that ends the test instead of saying go yields that end.
    async fn begin(
        mut t: Test,
        group: Group,
        sockets: Vec<SocketReport>,
        spec: &TestSpec,
        tp: &ThroughputSpec,
    ) -> Result<(Self, Option<TestEnd>), SessionEnd> {
        let senders: Vec<_> = group
            .of_role(Role::Sender)
            .map(|h| Arc::downgrade(&h.shared) as PacedSocket)
            .collect();
        let share =
            (!senders.is_empty()).then(|| Governor::join(&t.ctx.governor, senders, tp.bitrate));
        let schedule = Schedule::for_spec(spec);
        // Our senders' clock starts as `Ready` leaves: their first bytes reach the client as it
        // reads `Ready` and starts its own.
        let start = Instant::now();
        let mut clocks = Vec::with_capacity(2);
        if group.of_role(Role::Sender).next().is_some() {
            let senders = group.of_role(Role::Sender);
            clocks.push(Clock::new(Role::Sender, start, schedule, spec, senders));
        }
        if t.send(&Message::Ready(Ready {
            sockets,
            greetings: t.greetings.clone(),
        }))
        .await
        .is_err()
        {
            return Err(SessionEnd::Other);
        }
        // Our receivers' clock starts when the client's `Go` arrives, just ahead of its first
        // byte. Every client sends it; only a test with receivers here needs its time.
        let early_end = match t.rd.next_within(t.ctx.limits.handshake_timeout).await {
            Ok(Some(Message::Go)) => {
                if group.of_role(Role::Receiver).next().is_some() {
                    let receivers = group.of_role(Role::Receiver);
                    let now = Instant::now();
                    clocks.push(Clock::new(Role::Receiver, now, schedule, spec, receivers));
                }
                None
            }
            other => Some(on_control(other)),
        };
        let measuring = Measuring {
            t,
            clocks,
            group,
            start,
            _share: share,
        };
        Ok((measuring, early_end))
    }

    /// Sends intervals as the clocks close them until the client finishes the test, or it
    /// overruns, stalls, vanishes, or the server shuts down.
    async fn run(&mut self, spec: &TestSpec) -> TestEnd {
        let hard_stop = self.t.hard_stop(spec, self.start);
        let mut watch = Watchdog::new(&self.t.ctx, hard_stop, IDLE_LOOK, self.total_bytes());
        loop {
            let next = self.next_wakeup();
            tokio::select! {
                biased;
                msg = self.t.rd.next() => return on_control(msg),
                _ = sleep_until_opt(next) => {
                    if let Err(e) = self.tick(Instant::now()).await {
                        return TestEnd::ClientGone(e);
                    }
                }
                w = watch.next() => {
                    let quiet = |l| TestEnd::Idle(format!("no data moved for {l:?}"));
                    if let Some(end) = watch.ended(w, self.total_bytes(), quiet) {
                        return end;
                    }
                }
            }
        }
    }

    /// After the client's `Finish`: closes a window still open at its end mark, stops our
    /// senders and lets what the client sent drain into our receivers. After any other end,
    /// tells the client why, and when the server ended a test it measured (shutting down,
    /// idle), closes it as if the client had interrupted it. Whether the control connection
    /// still carries the results.
    async fn close(&mut self, end: &TestEnd, spec: &TestSpec) -> bool {
        let cut_short = match end {
            TestEnd::Finished { interrupted } => *interrupted,
            _ if end.sends_results_after_error() => {
                if !self.t.end_before_results(end).await {
                    return false;
                }
                true
            }
            _ => {
                self.t.tell_end(end).await;
                return false;
            }
        };
        let mut ok = true;
        // The client's end mark: a window still open closes now (a test cut short, or a timer
        // a little behind the client's). A byte count closes with its last byte instead.
        let cut_now = cut_short || matches!(spec.end, EndCondition::Duration(_));
        if cut_now {
            let now = Instant::now();
            for c in &mut self.clocks {
                for iv in c.sampler.cut(now) {
                    ok &= self.t.send(&Message::Interval(iv)).await.is_ok();
                }
            }
        }
        self.group.stop_senders();
        // Let what the client sent drain into our receivers (after a cut, counted apart).
        // An interrupted client waits only briefly; answer before it gives up.
        let drain = match end {
            // Nothing moved for the idle timeout: nothing is on its way either.
            TestEnd::Idle(_) => Duration::ZERO,
            _ if cut_short => Duration::from_secs(1),
            _ => self.t.ctx.limits.drain_timeout,
        };
        let drain_until = Instant::now() + drain;
        while ok {
            let next = self.next_wakeup();
            tokio::select! {
                _ = self.group.receivers_ended() => break,
                _ = sleep_until_opt(next) => {
                    ok = self.tick(Instant::now()).await.is_ok();
                }
                _ = tokio::time::sleep_until(drain_until.into()) => break,
            }
        }
        ok
    }

    /// Collects the stream threads' ends and, when the control connection still works, sends
    /// the last intervals and the results (the test's place given back first). Then the log
    /// line.
    async fn report(self, end: &TestEnd, ok: bool, spec: &TestSpec) -> SessionEnd {
        let Measuring {
            mut t,
            clocks,
            group,
            start,
            _share,
        } = self;
        let ends = group.collect(Duration::from_secs(2)).await;
        let bytes: u64 = ends.values().map(|e| e.bytes).sum();
        let now = Instant::now();
        let mut results = SideResults {
            streams: Vec::new(),
            cpu: CpuUsage::default(),
        };
        for c in clocks {
            let (last, r) = c.sampler.finish(now, &ends);
            if ok && let Some(iv) = last {
                let _ = t.send(&Message::Interval(iv)).await;
            }
            results.streams.extend(r.streams);
            results.cpu += r.cpu;
        }
        results.streams.sort_by_key(|s| s.stream);
        let mut checked = true;
        if ok {
            let msg = Message::Results(results);
            t.send_results(&msg).await;
            let _ = t.wr.shutdown().await;
            if let (Message::Results(ours), Some(theirs)) = (&msg, t.tally().await) {
                let over = check::overcounted_by_tally(ours, &theirs);
                if let Some(o) = over.first() {
                    t.log_failed_check(o);
                    checked = false;
                }
            }
        }
        let errors = ends.values().filter(|e| e.error.is_some()).count();
        log_test(&t, spec, end, bytes, None, start.elapsed(), errors);
        match end {
            TestEnd::Finished { interrupted: false } if checked => SessionEnd::Completed,
            _ => SessionEnd::Other,
        }
    }

    /// Bytes moved so far at this end: if it stops growing, nothing moves.
    fn total_bytes(&self) -> u64 {
        self.clocks.iter().map(|c| c.sampler.total_bytes()).sum()
    }

    /// When the next clock needs a sample or reaches its end mark.
    fn next_wakeup(&self) -> Option<Instant> {
        self.clocks.iter().filter_map(Clock::next).min()
    }

    /// Samples every clock that is due, closes a window whose end mark has passed (stopping
    /// the senders when it is theirs), and sends the intervals that closed.
    async fn tick(&mut self, now: Instant) -> Result<(), String> {
        for c in &mut self.clocks {
            let ivs = match c.end_mark {
                Some(mark) if now >= mark && !c.sampler.is_cut() => {
                    let ivs = c.sampler.cut(now);
                    if c.role == Role::Sender {
                        self.group.stop_senders();
                    }
                    ivs
                }
                _ => c.sampler.on_wakeup(now).into_iter().collect(),
            };
            for iv in ivs {
                self.t.send(&Message::Interval(iv)).await?;
            }
        }
        Ok(())
    }
}

/// One clock of the server's measurements: its senders' or its receivers'. Each starts when
/// the first byte it measures can be on the wire and closes its window on its own timer, so
/// both ends' windows cover the same bytes whichever way they flow.
struct Clock {
    role: Role,
    sampler: Sampler,
    /// End of the measured window of a timed test; a byte count has none.
    end_mark: Option<Instant>,
}

impl Clock {
    fn new<'a>(
        role: Role,
        start: Instant,
        schedule: Schedule,
        spec: &TestSpec,
        streams: impl IntoIterator<Item = &'a stream::StreamHandle>,
    ) -> Self {
        let end_mark = match spec.end {
            EndCondition::Duration(d) => {
                spec.omit.checked_add(d).and_then(|w| start.checked_add(w))
            }
            EndCondition::Bytes(_) => None,
        };
        Clock {
            role,
            sampler: Sampler::new(start, schedule, streams),
            end_mark,
        }
    }

    /// When this clock next needs a sample or reaches its end mark.
    fn next(&self) -> Option<Instant> {
        let mark = self.end_mark.filter(|_| !self.sampler.is_cut());
        self.sampler.next_wakeup().into_iter().chain(mark).min()
    }
}
