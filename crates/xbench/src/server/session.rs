//! One client's control session on the server: handshake, test admission, the test itself, and
//! the final report, with every wait bounded.
//!
//! Ends in one log line per test: who, what was asked, how it ended, bytes moved.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{info, warn};

use super::{Ctx, try_running_guard};
use crate::client::software;
use crate::config::{EndCondition, StreamDirection, TestSpec, Workload};
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::sockopt;
use crate::engine::stream::{self, Budget, SendMode};
use crate::proto::{
    self, Accepted, Channel, ErrorCode, ErrorMsg, Message, MessageReader, PROTOCOL_VERSION,
    Preamble, Ready, Welcome,
};
use crate::report::SocketReport;

/// How a session ended, for `--one-off`.
pub(super) enum SessionEnd {
    Completed,
    Other,
}

/// Why a test ended, for the log line.
#[derive(Debug)]
enum TestEnd {
    Finished { interrupted: bool },
    ClientGone(String),
    Overran,
    ShuttingDown,
}

pub(super) async fn run(
    stream: TcpStream,
    peer: SocketAddr,
    version: u16,
    ctx: Arc<Ctx>,
) -> SessionEnd {
    let _ = stream.set_nodelay(true);
    let (rd, mut wr) = stream.into_split();
    let mut rd = MessageReader::new(rd);
    let limit = ctx.limits.handshake_timeout;
    // Our preamble first, whatever theirs said: the client names both versions on a mismatch.
    if wr
        .write_all(&Preamble::new(Channel::Server).encode())
        .await
        .is_err()
    {
        return SessionEnd::Other;
    }
    if version != PROTOCOL_VERSION {
        info!(%peer, client_version = version, "refused a client of another protocol version");
        let _ = proto::write_message(
            &mut wr,
            &ErrorMsg::message(
                ErrorCode::VersionMismatch,
                format!(
                    "client speaks xbench protocol version {version}, this server speaks version \
                     {PROTOCOL_VERSION}"
                ),
            ),
        )
        .await;
        return SessionEnd::Other;
    }
    let client_sw = match rd.next_within(limit).await {
        Ok(Some(Message::Hello(h))) => h.software,
        other => {
            info!(%peer, "dropped a control connection without a valid hello: {}", describe(other));
            return SessionEnd::Other;
        }
    };
    if proto::write_message(
        &mut wr,
        &Message::Welcome(Welcome {
            software: software(),
        }),
    )
    .await
    .is_err()
    {
        return SessionEnd::Other;
    }
    let spec = match rd.next_within(limit).await {
        Ok(Some(Message::Start(spec))) => *spec,
        other => {
            info!(%peer, client = %client_sw, "dropped a control connection without a test request: {}", describe(other));
            return SessionEnd::Other;
        }
    };
    if let Err(reason) = admit(&spec, &ctx) {
        info!(%peer, client = %client_sw, "refused a test: {reason}");
        let code = if reason.starts_with("invalid") {
            ErrorCode::BadRequest
        } else {
            ErrorCode::LimitExceeded
        };
        let _ = proto::write_message(&mut wr, &ErrorMsg::message(code, reason)).await;
        return SessionEnd::Other;
    }
    let Some(_running) = try_running_guard(&ctx) else {
        let msg = format!(
            "the server is running its maximum of {} tests at once; try again shortly",
            ctx.limits.max_tests
        );
        info!(%peer, "refused a test: {msg}");
        let _ =
            proto::write_message(&mut wr, &ErrorMsg::message(ErrorCode::LimitExceeded, msg)).await;
        return SessionEnd::Other;
    };

    let n = spec.connection_count();
    let (_registration, cookie, mut data_rx) = match ctx.registry.register(n) {
        Ok(r) => r,
        Err(e) => {
            let _ = proto::write_message(
                &mut wr,
                &ErrorMsg::message(ErrorCode::ServerError, e.to_string()),
            )
            .await;
            return SessionEnd::Other;
        }
    };
    if proto::write_message(&mut wr, &Message::Accepted(Accepted { cookie }))
        .await
        .is_err()
    {
        return SessionEnd::Other;
    }

    // Collect the data connections.
    let mut conns: BTreeMap<u16, std::net::TcpStream> = BTreeMap::new();
    let deadline = Instant::now() + limit;
    while conns.len() < n {
        match tokio::time::timeout_at(deadline.into(), data_rx.recv()).await {
            Ok(Some((id, s, from))) => {
                if usize::from(id) >= n || conns.contains_key(&id) {
                    let msg = format!(
                        "data connection from {from} claims stream {id}, which is out of range or taken"
                    );
                    info!(%peer, "aborted a test: {msg}");
                    let _ = proto::write_message(
                        &mut wr,
                        &ErrorMsg::message(ErrorCode::BadRequest, msg),
                    )
                    .await;
                    return SessionEnd::Other;
                }
                conns.insert(id, s);
            }
            _ => {
                let msg = format!(
                    "only {} of {n} data connections arrived within {limit:?}; is something between \
                     client and server dropping new connections?",
                    conns.len()
                );
                info!(%peer, "aborted a test: {msg}");
                let _ = proto::write_message(&mut wr, &ErrorMsg::message(ErrorCode::Timeout, msg))
                    .await;
                return SessionEnd::Other;
            }
        }
    }
    drop(data_rx);

    let Workload::Throughput(tp) = &spec.workload;
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
    let mut sockets: Vec<SocketReport> = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    let mut warnings = Vec::new();
    for (id, sock) in conns {
        if let Err(e) = sockopt::apply(SockRef::from(&sock), &spec.socket, &mut warnings) {
            let msg = format!("server could not configure a data socket: {e}");
            info!(%peer, "aborted a test: {msg}");
            let _ =
                proto::write_message(&mut wr, &ErrorMsg::message(ErrorCode::BadRequest, msg)).await;
            return SessionEnd::Other;
        }
        sockets.push(sockopt::report(SockRef::from(&sock), &spec.socket));
        let h = match dirs[usize::from(id)] {
            StreamDirection::ClientToServer => stream::spawn_receiver(id, sock, block, tp.receive),
            StreamDirection::ServerToClient => {
                stream::spawn_sender(id, sock, block, send_mode, budget.clone())
            }
        };
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                let msg = format!("server could not start a stream thread: {e}");
                warn!(%peer, "aborted a test: {msg}");
                let _ =
                    proto::write_message(&mut wr, &ErrorMsg::message(ErrorCode::ServerError, msg))
                        .await;
                return SessionEnd::Other;
            }
        }
    }
    for w in warnings.iter().take(2) {
        info!(%peer, "{w}");
    }

    let start = Instant::now();
    let mut sampler = Sampler::new(start, Schedule::for_spec(&spec), &handles);
    let mut group = Group::new(handles);
    if proto::write_message(&mut wr, &Message::Ready(Ready { sockets }))
        .await
        .is_err()
    {
        return SessionEnd::Other;
    }
    let hard_stop = start
        + spec.omit
        + match spec.end {
            EndCondition::Duration(d) => d,
            EndCondition::Bytes(_) => ctx.limits.max_duration,
        }
        + ctx.limits.overrun_grace;
    let mut abort = ctx.abort.clone();

    let end = loop {
        tokio::select! {
            biased;
            msg = rd.next() => match msg {
                Ok(Some(Message::Finish(f))) => break TestEnd::Finished { interrupted: f.interrupted },
                Ok(Some(other)) => break TestEnd::ClientGone(format!("unexpected message: {}", describe(Ok(Some(other))))),
                Ok(None) => break TestEnd::ClientGone("client closed the control connection".into()),
                Err(e) => break TestEnd::ClientGone(e.to_string()),
            },
            _ = tokio::time::sleep_until(sampler.next_wakeup().into()) => {
                if let Some(iv) = sampler.on_wakeup(Instant::now())
                    && let Err(e) = proto::write_message(&mut wr, &Message::Interval(iv)).await {
                        break TestEnd::ClientGone(format!("cannot write to the client: {e}"));
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
        let drain_until = Instant::now() + ctx.limits.drain_timeout;
        loop {
            tokio::select! {
                _ = group.receivers_ended() => break,
                _ = tokio::time::sleep_until(sampler.next_wakeup().into()) => {
                    if let Some(iv) = sampler.on_wakeup(Instant::now())
                        && proto::write_message(&mut wr, &Message::Interval(iv)).await.is_err() {
                            ok = false;
                            break;
                        }
                }
                _ = tokio::time::sleep_until(drain_until.into()) => break,
            }
        }
    } else {
        let (code, msg) = match &end {
            TestEnd::Overran => (
                ErrorCode::Timeout,
                format!(
                    "test ran {:?} past its end; the server stopped it",
                    ctx.limits.overrun_grace
                ),
            ),
            TestEnd::ShuttingDown => (
                ErrorCode::ShuttingDown,
                "the server is shutting down".to_owned(),
            ),
            _ => (ErrorCode::Timeout, String::new()),
        };
        if !msg.is_empty() {
            let _ = proto::write_message(&mut wr, &ErrorMsg::message(code, msg)).await;
        }
    }
    let ends = group.collect(Duration::from_secs(2)).await;
    let (last, results) = sampler.finish(Instant::now(), &ends);
    let bytes: u64 = results.streams.iter().map(|s| s.total_bytes).sum();
    if ok {
        if let Some(iv) = last {
            let _ = proto::write_message(&mut wr, &Message::Interval(iv)).await;
        }
        let _ = proto::write_message(&mut wr, &Message::Results(results)).await;
        let _ = wr.shutdown().await;
    }
    log_test(peer, &client_sw, &spec, &end, bytes, start.elapsed(), &ends);
    match end {
        TestEnd::Finished { interrupted: false } => SessionEnd::Completed,
        _ => SessionEnd::Other,
    }
}

/// Checks a request against the server's limits; the message goes to the client as-is.
fn admit(spec: &TestSpec, ctx: &Ctx) -> Result<(), String> {
    spec.validate().map_err(|e| format!("invalid test: {e}"))?;
    let l = &ctx.limits;
    let n = spec.connection_count();
    if n > usize::from(l.max_streams) {
        return Err(format!(
            "the test asks for {n} data connections; this server allows at most {} (--max-streams)",
            l.max_streams
        ));
    }
    if let EndCondition::Duration(d) = spec.end
        && d + spec.omit > l.max_duration
    {
        return Err(format!(
            "the test asks for {:?}; this server allows at most {:?} (--max-duration)",
            d + spec.omit,
            l.max_duration
        ));
    }
    Ok(())
}

fn describe(m: Result<Option<Message>, proto::ProtoError>) -> String {
    match m {
        Ok(None) => "it closed the connection".into(),
        Ok(Some(m)) => serde_json::to_value(&m)
            .ok()
            .and_then(|v| {
                v.get("type")
                    .and_then(|t| t.as_str())
                    .map(|t| format!("`{t}` message out of order"))
            })
            .unwrap_or_else(|| "unknown message".into()),
        Err(e) => e.to_string(),
    }
}

fn log_test(
    peer: SocketAddr,
    client: &str,
    spec: &TestSpec,
    end: &TestEnd,
    bytes: u64,
    elapsed: Duration,
    ends: &HashMap<u16, crate::engine::stream::StreamEnd>,
) {
    let Workload::Throughput(tp) = &spec.workload;
    let errors = ends.values().filter(|e| e.error.is_some()).count();
    let outcome = match end {
        TestEnd::Finished { interrupted: false } => "completed".to_owned(),
        TestEnd::Finished { interrupted: true } => "interrupted by the client".to_owned(),
        TestEnd::ClientGone(why) => format!("client vanished: {why}"),
        TestEnd::Overran => "overran its duration".to_owned(),
        TestEnd::ShuttingDown => "cut short by shutdown".to_owned(),
    };
    info!(
        %peer,
        client,
        streams = tp.streams.get(),
        direction = ?tp.direction,
        end = ?spec.end,
        outcome,
        bytes,
        seconds = elapsed.as_secs_f64(),
        stream_errors = errors,
        "test ended"
    );
}
