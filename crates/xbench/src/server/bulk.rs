//! The server side of a throughput test: stream threads, live intervals, final results.

use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::io::AsyncWriteExt;

use super::session::{SessionEnd, Test, TestEnd, log_test, on_control};
use crate::config::{EndCondition, StreamDirection, TestSpec, ThroughputSpec};
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::sockopt;
use crate::engine::stream::{self, Budget, Payload, SendMode};
use crate::proto::{ErrorCode, Message, Ready};
use crate::report::{Role, SocketReport};
use crate::server::governor::{Governor, PacedSocket};
use crate::server::session::Idle;

pub(super) async fn run(mut t: Test, spec: &TestSpec, tp: &ThroughputSpec) -> SessionEnd {
    let n = spec.connection_count();
    let peer = t.peer;
    let dirs: Vec<StreamDirection> = tp
        .direction
        .stream_directions()
        .iter()
        .flat_map(|d| std::iter::repeat_n(*d, usize::from(tp.streams.get())))
        .collect();
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
    let payload = if dirs.contains(&StreamDirection::ServerToClient) {
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
        let h = match (dirs[usize::from(id)], &payload) {
            (StreamDirection::ServerToClient, Some(p)) => {
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
    let start = Instant::now();
    let mut sampler = Sampler::new(start, Schedule::for_spec(spec), &handles);
    let mut group = Group::new(handles);
    if t.send(&Message::Ready(Ready { sockets })).await.is_err() {
        return SessionEnd::Other;
    }
    let hard_stop = t.hard_stop(spec, start);
    let mut abort = t.ctx.abort.clone();

    let idle_limit = t.ctx.limits.idle_timeout;
    let mut idle = Idle::new(sampler.total_bytes());
    let mut idle_tick = tokio::time::interval(Duration::from_secs(1));
    let end = loop {
        tokio::select! {
            biased;
            msg = t.rd.next() => break on_control(msg),
            _ = tokio::time::sleep_until(sampler.next_wakeup().into()) => {
                if let Some(iv) = sampler.on_wakeup(Instant::now())
                    && let Err(e) = t.send(&Message::Interval(iv)).await {
                        break TestEnd::ClientGone(e);
                    }
            }
            _ = idle_tick.tick() => {
                if idle.stalled(sampler.total_bytes(), idle_limit) {
                    break TestEnd::ClientGone(format!("no data moved for {idle_limit:?}"));
                }
            }
            _ = tokio::time::sleep_until(hard_stop.into()) => break TestEnd::Overran,
            () = async { let _ = abort.wait_for(|a| *a).await; } => break TestEnd::ShuttingDown,
        }
    };

    let mut ok = matches!(end, TestEnd::Finished { .. });
    if ok {
        group.stop_senders();
        // Let what the client sent drain into our receivers, still reporting intervals.
        // An interrupted client waits only briefly; answer before it gives up.
        let drain = match end {
            TestEnd::Finished { interrupted: true } => Duration::from_secs(1),
            _ => t.ctx.limits.drain_timeout,
        };
        let drain_until = Instant::now() + drain;
        loop {
            tokio::select! {
                _ = group.receivers_ended() => break,
                _ = tokio::time::sleep_until(sampler.next_wakeup().into()) => {
                    if let Some(iv) = sampler.on_wakeup(Instant::now())
                        && t.send(&Message::Interval(iv)).await.is_err() {
                            ok = false;
                            break;
                        }
                }
                _ = tokio::time::sleep_until(drain_until.into()) => break,
            }
        }
    } else {
        t.tell_end(&end).await;
    }
    let ends = group.collect(Duration::from_secs(2)).await;
    let (last, results) = sampler.finish(Instant::now(), &ends);
    let bytes: u64 = results.streams.iter().map(|s| s.total_bytes).sum();
    if ok {
        if let Some(iv) = last {
            let _ = t.send(&Message::Interval(iv)).await;
        }
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
