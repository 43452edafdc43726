//! The server side of a throughput test: stream threads, live intervals, final results.

use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::io::AsyncWriteExt;

use super::session::SessionEnd;
use super::test::{Idle, Test, TestEnd, log_test, on_control};
use crate::config::{EndCondition, StreamDirection, TestSpec, ThroughputSpec};
use crate::control::sleep_until_opt;
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::sockopt;
use crate::engine::stream::{self, Budget, Payload, SendMode};
use crate::proto::{ErrorCode, Message, Ready, StreamLayout};
use crate::report::{CpuUsage, Role, SideResults, SocketReport};
use crate::server::governor::{Governor, PacedSocket};

pub(super) async fn run(mut t: Test, spec: &TestSpec, tp: &ThroughputSpec) -> SessionEnd {
    let n = spec.connection_count();
    let peer = t.peer;
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
    let payload = if layout.contains(StreamDirection::ServerToClient) {
        match Payload::new(block, send_mode) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                let msg = format!("server could not prepare its payload: {e}");
                return t.abort(ErrorCode::ServerError, msg).await;
            }
        }
    } else {
        None
    };
    let mut sockets: Vec<SocketReport> = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    let mut warnings = Vec::new();
    let conns = std::mem::take(&mut t.conns);
    for (id, sock) in conns {
        if let Err(e) = sockopt::apply(SockRef::from(&sock), &spec.socket, &mut warnings) {
            // Streams already started must not outlive the refusal.
            drop(Group::new(handles));
            let msg = format!("server could not configure a data socket: {e}");
            return t.abort(ErrorCode::BadRequest, msg).await;
        }
        sockets.push(sockopt::report(SockRef::from(&sock), &spec.socket));
        let h = match (layout.direction(id), &payload) {
            (Some(StreamDirection::ServerToClient), Some(p)) => {
                // Paced from the first byte; the governor may lower it to a fair share below.
                if let Err(e) = sockopt::pace(&sock, tp.bitrate) {
                    drop(Group::new(handles));
                    let msg = format!("server could not pace a stream as asked: {e}");
                    return t.abort(ErrorCode::ServerError, msg).await;
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
                return t.abort(ErrorCode::ServerError, msg).await;
            }
        }
    }
    for w in warnings.iter().take(2) {
        tracing::info!(%peer, "{w}");
    }

    let senders: Vec<_> = handles
        .iter()
        .filter(|h| h.role == Role::Sender)
        .map(|h| Arc::downgrade(&h.shared) as PacedSocket)
        .collect();
    let _share = (!senders.is_empty()).then(|| Governor::join(&t.ctx, senders, tp.bitrate));
    let schedule = Schedule::for_spec(spec);
    let of_role = |role: Role| handles.iter().filter(move |h| h.role == role);
    // Our senders' clock starts as `Ready` leaves: their first bytes reach the client as it
    // reads `Ready` and starts its own.
    let start = Instant::now();
    let mut clocks = Vec::with_capacity(2);
    if of_role(Role::Sender).next().is_some() {
        clocks.push(Clock::new(
            Role::Sender,
            start,
            schedule,
            spec,
            of_role(Role::Sender),
        ));
    }
    if t.send(&Message::Ready(Ready { sockets })).await.is_err() {
        return SessionEnd::Other;
    }
    // Our receivers' clock starts when the client's `Go` arrives, just ahead of its first
    // byte. Every client sends it; only a test with receivers here needs its time.
    let mut early_end = None;
    match t.rd.next_within(t.ctx.limits.handshake_timeout).await {
        Ok(Some(Message::Go)) => {
            if of_role(Role::Receiver).next().is_some() {
                clocks.push(Clock::new(
                    Role::Receiver,
                    Instant::now(),
                    schedule,
                    spec,
                    of_role(Role::Receiver),
                ));
            }
        }
        other => early_end = Some(on_control(other)),
    }
    let mut group = Group::new(handles);
    let hard_stop = t.hard_stop(spec, start);
    let mut abort = t.ctx.abort.clone();

    let idle_limit = t.ctx.limits.idle_timeout;
    let total_bytes = |clocks: &[Clock]| clocks.iter().map(|c| c.sampler.total_bytes()).sum();
    let mut idle = Idle::new(total_bytes(&clocks));
    let mut idle_tick = tokio::time::interval(Duration::from_secs(1));
    let end = match early_end {
        Some(end) => end,
        None => loop {
            let next = clocks.iter().filter_map(Clock::next).min();
            tokio::select! {
                biased;
                msg = t.rd.next() => break on_control(msg),
                _ = sleep_until_opt(next) => {
                    if let Err(e) = tick(&mut t, &mut clocks, &group, Instant::now()).await {
                        break TestEnd::ClientGone(e);
                    }
                }
                _ = idle_tick.tick() => {
                    if idle.stalled(total_bytes(&clocks), idle_limit) {
                        break TestEnd::ClientGone(format!("no data moved for {idle_limit:?}"));
                    }
                }
                _ = tokio::time::sleep_until(hard_stop.into()) => break TestEnd::Overran,
                () = async { let _ = abort.wait_for(|a| *a).await; } => break TestEnd::ShuttingDown,
            }
        },
    };

    let mut ok = matches!(end, TestEnd::Finished { .. });
    if ok {
        // The client's end mark: a window still open closes now (a test cut short, or a timer
        // a little behind the client's). A byte count closes with its last byte instead.
        let cut_now = matches!(end, TestEnd::Finished { interrupted: true })
            || matches!(spec.end, EndCondition::Duration(_));
        if cut_now {
            let now = Instant::now();
            for c in &mut clocks {
                for iv in c.sampler.cut(now) {
                    ok &= t.send(&Message::Interval(iv)).await.is_ok();
                }
            }
        }
        group.stop_senders();
        // Let what the client sent drain into our receivers (after a cut, counted apart).
        // An interrupted client waits only briefly; answer before it gives up.
        let drain = match end {
            TestEnd::Finished { interrupted: true } => Duration::from_secs(1),
            _ => t.ctx.limits.drain_timeout,
        };
        let drain_until = Instant::now() + drain;
        while ok {
            let next = clocks.iter().filter_map(Clock::next).min();
            tokio::select! {
                _ = group.receivers_ended() => break,
                _ = sleep_until_opt(next) => {
                    ok = tick(&mut t, &mut clocks, &group, Instant::now()).await.is_ok();
                }
                _ = tokio::time::sleep_until(drain_until.into()) => break,
            }
        }
    } else {
        t.tell_end(&end).await;
    }
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
    if ok {
        t.send_results(&Message::Results(results)).await;
        let _ = t.wr.shutdown().await;
    }
    let errors = ends.values().filter(|e| e.error.is_some()).count();
    log_test(&t, spec, &end, bytes, None, start.elapsed(), errors);
    match end {
        TestEnd::Finished { interrupted: false } => SessionEnd::Completed,
        _ => SessionEnd::Other,
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

/// Samples every clock that is due, closes a window whose end mark has passed (stopping the
/// senders when it is theirs), and sends the intervals that closed.
async fn tick(
    t: &mut Test,
    clocks: &mut [Clock],
    group: &Group,
    now: Instant,
) -> Result<(), String> {
    for c in clocks {
        let ivs = match c.end_mark {
            Some(mark) if now >= mark && !c.sampler.is_cut() => {
                let ivs = c.sampler.cut(now);
                if c.role == Role::Sender {
                    group.stop_senders();
                }
                ivs
            }
            _ => c.sampler.on_wakeup(now).into_iter().collect(),
        };
        for iv in ivs {
            t.send(&Message::Interval(iv)).await?;
        }
    }
    Ok(())
}
