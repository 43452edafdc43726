//! One client's control session on the server: handshake, test admission, the test itself, and
//! the final report, with every wait bounded.
//!
//! Ends in one log line per test: who, what was asked, how it ended, bytes moved.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tracing::info;

use super::Ctx;
use super::admission::{RunningGuard, admit, try_running_guard};
use super::conn::HandshakeSlot;
use super::registry::DataConn;
use crate::auth::Nonce;
use crate::config::{EndCondition, TestSpec, Workload};
use crate::control::keepalive;
use crate::proto::{
    self, Accepted, Channel, ErrorCode, ErrorMsg, Message, MessageReader, PROTOCOL_VERSION,
    Preamble, Welcome,
};

/// Longest message a client sends (its test request is the largest, well under 4 KiB): a peer
/// that has not authenticated does not get to make the server buffer a megabyte.
const CLIENT_FRAME_MAX: u32 = 64 * 1024;

/// How a session ended, for `--one-off`.
#[derive(Debug)]
pub(super) enum SessionEnd {
    Completed,
    Other,
}

/// Why a test ended, for the log line.
#[derive(Debug)]
pub(super) enum TestEnd {
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
    slot: HandshakeSlot,
) -> SessionEnd {
    let _ = stream.set_nodelay(true);
    keepalive(&stream);
    let (rd, mut wr) = stream.into_split();
    let mut rd = MessageReader::with_max_frame(rd, CLIENT_FRAME_MAX);
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
    let (client_sw, client_nonce) = match rd.next_within(limit).await {
        // The name goes into the log: at most 64 characters of it, escaped.
        Ok(Some(Message::Hello(h))) => {
            let name: String = h.software.chars().take(64).collect();
            (name.escape_debug().to_string(), h.nonce)
        }
        other => {
            info!(%peer, "dropped a control connection without a valid hello: {}", describe(other));
            return SessionEnd::Other;
        }
    };
    let Ok(nonce) = Nonce::random() else {
        return SessionEnd::Other;
    };
    let welcome = Welcome {
        software: proto::software(),
        nonce,
        auth_required: ctx.psk.is_some(),
        proof: ctx
            .psk
            .as_ref()
            .map(|k| k.server_proof(&client_nonce, &nonce)),
    };
    if proto::write_message(&mut wr, &Message::Welcome(welcome))
        .await
        .is_err()
    {
        return SessionEnd::Other;
    }
    if let Some(key) = &ctx.psk {
        let proven = match rd.next_within(limit).await {
            Ok(Some(Message::Auth(a))) => key.verify_client(&client_nonce, &nonce, &a.proof),
            _ => false,
        };
        if !proven {
            info!(%peer, client = %client_sw, "refused a client that did not prove the pre-shared key");
            let msg = "authentication failed: this server requires its pre-shared key (--psk-file)";
            let _ =
                proto::write_message(&mut wr, &ErrorMsg::message(ErrorCode::AuthFailed, msg)).await;
            return SessionEnd::Other;
        }
    }
    let spec = match rd.next_within(limit).await {
        Ok(Some(Message::Start(spec))) => *spec,
        other => {
            info!(%peer, client = %client_sw, "dropped a control connection without a test request: {}", describe(other));
            return SessionEnd::Other;
        }
    };
    // The handshake is over; the test limits take it from here.
    drop(slot);
    if let Err((code, reason)) = admit(&spec, &ctx) {
        info!(%peer, client = %client_sw, "refused a test: {reason}");
        let _ = proto::write_message(&mut wr, &ErrorMsg::message(code, reason)).await;
        return SessionEnd::Other;
    }
    let running = match try_running_guard(&ctx, peer.ip()) {
        Ok(g) => g,
        Err(msg) => {
            info!(%peer, "refused a test: {msg}");
            let _ =
                proto::write_message(&mut wr, &ErrorMsg::message(ErrorCode::LimitExceeded, msg))
                    .await;
            return SessionEnd::Other;
        }
    };

    let n = spec.connection_count();
    // --crr connections keep arriving while the test runs; leave room for a burst of them.
    let capacity = match spec.as_rr() {
        Some(r) if r.connect_per_transaction => usize::from(r.flows.get()) * 2 + 64,
        _ => n,
    };
    let (registration, cookie, mut data_rx) = match ctx.registry.register(capacity) {
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

    // Collect the data connections, while watching the control connection: a client that
    // gives up (Ctrl-C while connecting) frees its slot now, not after the timeout.
    let mut conns: BTreeMap<u16, std::net::TcpStream> = BTreeMap::new();
    let deadline = Instant::now() + limit;
    let mut abort = ctx.abort.clone();
    while conns.len() < n {
        let arrived = tokio::select! {
            r = tokio::time::timeout_at(deadline.into(), data_rx.recv()) => r,
            msg = rd.next() => {
                info!(%peer, client = %client_sw, "dropped a test whose client left while its data connections opened: {}", describe(msg));
                return SessionEnd::Other;
            }
            () = async { let _ = abort.wait_for(|a| *a).await; } => {
                let msg = "the server is shutting down";
                let _ = proto::write_message(&mut wr, &ErrorMsg::message(ErrorCode::ServerError, msg)).await;
                return SessionEnd::Other;
            }
        };
        match arrived {
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
    if !matches!(spec.as_rr(), Some(r) if r.connect_per_transaction) {
        // Every data connection is here; later ones are refused at the door.
        data_rx.close();
    }
    let test = Test {
        peer,
        client: client_sw,
        ctx,
        rd,
        wr,
        conns,
        data: data_rx,
        registration,
        running: Some(running),
    };
    match &spec.workload {
        Workload::Throughput(tp) => super::bulk::run(test, &spec, tp).await,
        Workload::RequestResponse(rr) => super::rr::run(test, &spec, rr).await,
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
    /// Where `--crr` connections keep arriving; dropped (refusing latecomers) otherwise.
    pub(super) data: mpsc::Receiver<DataConn>,
    /// The test's cookie in the registry, for as long as the test runs.
    pub(super) registration: super::registry::Registration,
    /// The test's place in `--max-tests` and `--max-tests-per-client`.
    pub(super) running: Option<RunningGuard>,
}

impl Test {
    /// Sends the final results, giving the test's slot back first: a client that starts its
    /// next test the moment it has these (a sweep) must find the slot free.
    pub(super) async fn send_results(&mut self, msg: &Message) {
        self.running = None;
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
    pub(super) async fn tell_end(&mut self, end: &TestEnd) {
        let (code, msg) = match end {
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
            _ => return,
        };
        let _ = self.send(&ErrorMsg::message(code, msg)).await;
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

fn describe(m: Result<Option<Message>, proto::ProtoError>) -> String {
    match m {
        Ok(None) => "it closed the connection".into(),
        Ok(Some(m)) => format!("`{}` message out of order", m.kind()),
        Err(e) => e.to_string(),
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
    let outcome = match end {
        TestEnd::Finished { interrupted: false } => "completed".to_owned(),
        TestEnd::Finished { interrupted: true } => "interrupted by the client".to_owned(),
        TestEnd::ClientGone(why) => format!("client vanished: {why}"),
        TestEnd::Overran => "overran its duration".to_owned(),
        TestEnd::ShuttingDown => "cut short by shutdown".to_owned(),
    };
    let workload = match &spec.workload {
        Workload::Throughput(tp) => format!(
            "throughput, {} stream(s), {:?}",
            tp.streams.get(),
            tp.direction
        ),
        Workload::RequestResponse(rr) => format!(
            "{}, {} flow(s), {}/{} bytes",
            if rr.connect_per_transaction {
                "crr"
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
