//! A test for an iperf3 client (iperf3 3.x, TCP), from its cookie to `IPERF_DONE`: the
//! parameter exchange, its data connections (which open with the same cookie and are routed
//! here through [`Iperf3Streams`]), the test on xbench's stream threads, and the results
//! exchange with the server's own output when the client asks for it.
//!
//! Every limit of an xbench test applies (`--max-streams`, `--max-block-len`,
//! `--max-duration`, `--max-tests`, `--max-tests-per-client`, `--max-send-rate`, the handshake
//! and idle timeouts), and any number of iperf3 clients run at once: this server never answers
//! "busy" the way iperf3's does. A client it cannot serve gets iperf3's `SERVER_ERROR` state
//! (or `ACCESS_DENIED` when the server requires a key iperf3 cannot prove) and a log line here.
//! Not the wire format (`proto::iperf3`) nor the recognition of the cookie (`conn`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::Ctx;
use super::admission::try_running_guard;
use super::budget::Need;
use super::conn::HandshakeSlot;
use super::governor::{Governor, PacedSocket};
use super::metrics::{Direction, Kind, Moved, Protocol, Transport};
use super::peer_text::bounded;
use crate::config::{SocketOptions, is_congestion_name};
use crate::engine::group::Group;
use crate::engine::sockopt;
use crate::engine::stream::{self, Budget, Payload, RecvMode, SendMode, StreamHandle};
use crate::proto::iperf3::{self as wire, COOKIE_LEN, Params, Results, State, StreamResult, ierr};
use crate::report::Role;
use crate::units::format_bits_per_second;

/// Data connections of iperf3 tests waiting for them, by cookie.
#[derive(Debug, Default)]
pub(crate) struct Iperf3Streams {
    waiting: Mutex<HashMap<[u8; COOKIE_LEN], mpsc::Sender<Arrival>>>,
}

/// A data connection and its place in the server's accept order.
type Arrival = (u64, TcpStream);

impl Iperf3Streams {
    /// Hands a connection that opened with `cookie` (the `accepted`th the server accepted) to
    /// its test. `Err` gives it back when no test waits for that cookie: it is a new control
    /// connection.
    pub(crate) fn route(
        &self,
        cookie: &[u8; COOKIE_LEN],
        accepted: u64,
        conn: TcpStream,
    ) -> Result<(), TcpStream> {
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        match waiting.get(cookie) {
            Some(tx) => tx.try_send((accepted, conn)).map_err(|e| match e {
                mpsc::error::TrySendError::Full((_, c))
                | mpsc::error::TrySendError::Closed((_, c)) => c,
            }),
            None => Err(conn),
        }
    }

    fn register(
        self: &Arc<Self>,
        cookie: [u8; COOKIE_LEN],
        n: usize,
    ) -> Option<(Waiting, mpsc::Receiver<Arrival>)> {
        let (tx, rx) = mpsc::channel(n.max(1));
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.contains_key(&cookie) {
            return None;
        }
        waiting.insert(cookie, tx);
        Some((
            Waiting {
                streams: Arc::clone(self),
                cookie,
            },
            rx,
        ))
    }
}

/// A test's place in [`Iperf3Streams`], removed on drop.
struct Waiting {
    streams: Arc<Iperf3Streams>,
    cookie: [u8; COOKIE_LEN],
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.streams
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.cookie);
    }
}

/// What an iperf3 client asked for, checked against this server's limits.
#[derive(Debug)]
pub(super) struct Plan {
    /// Streams the client sends on (the server receives), opened first.
    pub(super) to_receive: usize,
    /// Streams the server sends on, opened after those.
    pub(super) to_send: usize,
    /// With UDP, the datagram size.
    pub(super) block_len: usize,
    pub(super) socket: SocketOptions,
    /// A UDP test (`-u`).
    pub(super) udp: bool,
    /// UDP sequence numbers are 64-bit (`--udp-counters-64bit`).
    pub(super) counters_64bit: bool,
    tos: Option<u32>,
    /// Per-stream pacing (`-b`), bits per second.
    pub(super) rate: Option<u64>,
    /// Bytes the server's senders stop after, in total (`-n`, or `-k` × `-l`).
    budget: Option<u64>,
    pub(super) duration: Duration,
    pub(super) omit: Duration,
    server_output: bool,
}

impl Plan {
    /// What the test takes from the server's budget: a socket and a thread per stream.
    fn need(&self) -> Need {
        let p = self.to_receive.max(self.to_send) as u64;
        let per = u64::from(self.to_receive > 0) + u64::from(self.to_send > 0);
        Need::streams(p, per, 0)
    }
}

/// A refusal: iperf3's `i_errno` and `errno` for the client, words for the log.
pub(super) type Refusal = (i32, i32, String);

/// Runs an iperf3 client's test on `ctrl`, whose cookie has been read. True when the test ran
/// to its results exchange. In the order iperf3's states cross the wire: the parameters and
/// the plan ([`agree`]), the test's place, its data connections ([`gather`]), the streams,
/// `TEST_START` and `TEST_RUNNING`, the window ([`measure`]), the results.
pub(super) async fn run(
    mut ctrl: TcpStream,
    peer: SocketAddr,
    cookie: [u8; COOKIE_LEN],
    ctx: Arc<Ctx>,
    slot: HandshakeSlot,
) -> bool {
    let Some((params, plan)) = agree(&mut ctrl, peer, &ctx).await else {
        return false;
    };
    let _running = match try_running_guard(&ctx, peer.ip(), plan.need()) {
        Ok(g) => g,
        Err(m) => {
            ctx.metrics.refused("limit");
            info!(%peer, "refused an iperf3 client's test: {m}");
            refuse(&mut ctrl, (ierr::NEW_TEST, libc::EBUSY, m)).await;
            return false;
        }
    };
    if plan.udp {
        return super::iperf3_udp::run(ctrl, peer, &plan, &params, &ctx, slot).await;
    }
    let n = plan.to_receive + plan.to_send;
    let Some(conns) = gather(&mut ctrl, peer, cookie, n, &ctx).await else {
        return false;
    };
    drop(slot);
    let group = match start_streams(conns, &plan) {
        Ok(g) => g,
        Err(m) => {
            warn!(%peer, "cannot run an iperf3 client's test: {m}");
            refuse(&mut ctrl, (ierr::NEW_TEST, libc::EIO, m)).await;
            return false;
        }
    };
    let metrics = ctx.metrics.test_started(Protocol::Iperf3, Kind::Tcp);
    watch_bytes(&metrics, &group);
    let senders: Vec<_> = group
        .of_role(Role::Sender)
        .map(|h| Arc::downgrade(&h.shared) as PacedSocket)
        .collect();
    let _share = (!senders.is_empty()).then(|| Governor::join(&ctx, senders, plan.rate));
    if send_state(&mut ctrl, State::TestStart).await.is_err()
        || send_state(&mut ctrl, State::TestRunning).await.is_err()
    {
        return false;
    }
    info!(
        %peer,
        receive = plan.to_receive,
        send = plan.to_send,
        client = client_version(&params),
        "iperf3 test started"
    );
    let Some(measured) = measure(&mut ctrl, peer, &group, &plan, &ctx).await else {
        return false;
    };
    let ends = group.collect(Duration::from_secs(2)).await;
    let cpu = ends.values().fold((0.0, 0.0), |(u, s), e| {
        (u + e.cpu.user_s, s + e.cpu.system_s)
    });
    let completed = exchange_results(&mut ctrl, peer, &plan, &params, measured, cpu).await;
    metrics.finish(if completed { "completed" } else { "failed" }, None);
    completed
}

/// `PARAM_EXCHANGE`: refuses a client this server cannot let in (it requires a key, which
/// iperf3 cannot prove), reads the parameters and plans the test, refusing what xbench does
/// not do or a limit forbids. `None` when the client was refused or went away (logged).
async fn agree(ctrl: &mut TcpStream, peer: SocketAddr, ctx: &Ctx) -> Option<(Params, Plan)> {
    if ctx.psk.is_some() {
        warn!(
            %peer,
            "refused an iperf3 client: this server requires a key (--psk-file), which iperf3 \
             cannot prove; iperf3 is told access is denied"
        );
        ctx.metrics.handshake_failed("auth");
        let _ = ctrl.write_all(&[State::AccessDenied.byte()]).await;
        let _ = ctrl.shutdown().await;
        return None;
    }
    let _ = ctrl.set_nodelay(true);
    send_state(ctrl, State::ParamExchange).await.ok()?;
    let params: Params = match wire::read_json(ctrl, ctx.limits.handshake_timeout).await {
        Ok(p) => p,
        Err(e) => {
            let e = bounded(&e.to_string(), 200);
            info!(%peer, "dropped an iperf3 client: its parameters: {e}");
            refuse(ctrl, (ierr::RECV_PARAMS, libc::EINVAL, String::new())).await;
            return None;
        }
    };
    match plan(&params, ctx) {
        Ok(p) => Some((params, p)),
        Err(r) => {
            // What xbench does not do, or a limit: its message says which.
            ctx.metrics.refused("iperf3_request");
            info!(%peer, "refused an iperf3 client's test: {}", r.2);
            refuse(ctrl, r).await;
            None
        }
    }
}

/// `CREATE_STREAMS`: the test's `n` data connections, routed here by their cookie as they
/// arrive, in the order the server accepted them (iperf3's server gives roles in accept
/// order; each is read on a task of its own, so they may arrive here in another). `None`
/// when they did not all come within the handshake timeout, or the client went away (logged).
async fn gather(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    cookie: [u8; COOKIE_LEN],
    n: usize,
    ctx: &Ctx,
) -> Option<Vec<TcpStream>> {
    let limit = ctx.limits.handshake_timeout;
    let Some((waiting, mut arrivals)) = ctx.iperf3.register(cookie, n) else {
        info!(%peer, "refused an iperf3 client whose cookie is already in use");
        refuse(ctrl, (ierr::NEW_TEST, libc::EEXIST, String::new())).await;
        return None;
    };
    send_state(ctrl, State::CreateStreams).await.ok()?;
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        let arrived = tokio::select! {
            a = tokio::time::timeout(limit, arrivals.recv()) => a,
            why = gone(ctrl) => {
                info!(%peer, "dropped an iperf3 client while its data connections opened: {why}");
                return None;
            }
        };
        match arrived {
            Ok(Some(c)) => conns.push(c),
            _ => {
                info!(
                    %peer,
                    "dropped an iperf3 client: {} of its {n} data connections arrived within {limit:?}",
                    conns.len()
                );
                refuse(ctrl, (ierr::ACCEPT_STREAM, libc::ETIMEDOUT, String::new())).await;
                return None;
            }
        }
    }
    drop(waiting);
    conns.sort_by_key(|(accepted, _)| *accepted);
    Some(conns.into_iter().map(|(_, c)| c).collect())
}

/// The test's bytes, by direction, for the metrics endpoint while it runs.
fn watch_bytes(metrics: &super::metrics::TestMetrics, group: &Group) {
    let counters: Vec<(Role, Arc<crate::engine::stream::StreamShared>)> = group
        .handles()
        .iter()
        .map(|h| (h.role, Arc::clone(&h.shared)))
        .collect();
    metrics.watch(move || {
        let sum = |role| -> u64 {
            counters
                .iter()
                .filter(|(r, _)| *r == role)
                .map(|(_, s)| s.bytes.0.load(Ordering::Relaxed))
                .sum()
        };
        [
            (Direction::Received, Role::Receiver),
            (Direction::Sent, Role::Sender),
        ]
        .into_iter()
        .map(|(d, role)| {
            let moved = Moved {
                bytes: sum(role),
                datagrams: 0,
            };
            (Transport::Tcp, d, moved)
        })
        .filter(|(_, _, m)| m.bytes > 0)
        .collect()
    });
}

/// What the server measured over the window after `-O`.
pub(super) struct Measured {
    pub(super) window: Duration,
    /// Per stream in connection order.
    pub(super) streams: Vec<Figures>,
}

/// One stream's results, as iperf3 reports them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Figures {
    pub(super) role: Role,
    /// Bytes in the window.
    pub(super) bytes: u64,
    /// A sender's retransmissions in the window; -1 for a receiver.
    pub(super) retransmits: i64,
    /// UDP: the receiver's jitter, seconds.
    pub(super) jitter: f64,
    /// UDP: datagrams lost, in all and within `-O`.
    pub(super) errors: u64,
    pub(super) omitted_errors: u64,
    /// UDP: datagrams sent (a receiver: the highest sequence number), in all and within
    /// `-O`.
    pub(super) packets: u64,
    pub(super) omitted_packets: u64,
}

impl Figures {
    fn tcp(role: Role, bytes: u64, retransmits: i64) -> Self {
        Figures {
            role,
            bytes,
            retransmits,
            jitter: 0.0,
            errors: 0,
            omitted_errors: 0,
            packets: 0,
            omitted_packets: 0,
        }
    }
}

/// Runs the test until the client's `TEST_END`; `None` when it ended any other way (logged).
async fn measure(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    group: &Group,
    plan: &Plan,
    ctx: &Ctx,
) -> Option<Measured> {
    let handles = group.handles();
    let snapshot = |hs: &[StreamHandle]| -> Vec<(u64, i64)> {
        hs.iter()
            .map(|h| {
                let retrans = match h.role {
                    Role::Sender => crate::tcp_info::read(&h.shared.socket)
                        .map_or(0, |t| i64::from(t.total_retrans)),
                    Role::Receiver => -1,
                };
                (h.shared.bytes.0.load(Ordering::Relaxed), retrans)
            })
            .collect()
    };
    let mut base: Vec<(u64, i64)> = vec![(0, 0); handles.len()];
    let progress = || -> u64 {
        (handles.iter())
            .map(|h| h.shared.bytes.0.load(Ordering::Relaxed))
            .sum()
    };
    let watch = Watch {
        peer,
        what: "iperf3 test",
        plan,
        ctx,
    };
    let window_start = watch
        .until_test_end(ctrl, progress, || base = snapshot(handles))
        .await?;
    let window = Instant::now().saturating_duration_since(window_start);
    // The client wrote its last bytes before TEST_END, on other connections: let the
    // receivers take what has arrived (iperf3's single-threaded server has read it by the time
    // it reads TEST_END). What is still on the wire is lost, as with iperf3.
    // A byte-count test's last block may still sit in the client's send queue (TCP small
    // queues) when TEST_END, sent without delay, overtakes it: wait for the whole count.
    let received = || -> u64 {
        handles
            .iter()
            .filter(|h| h.role == Role::Receiver)
            .map(|h| h.shared.bytes.0.load(Ordering::Relaxed))
            .sum()
    };
    let expected = plan.budget.filter(|_| plan.to_receive > 0);
    let until = Instant::now()
        + match expected {
            Some(_) => Duration::from_secs(1),
            None => Duration::from_millis(250),
        };
    while Instant::now() < until
        && (expected.is_some_and(|n| received() < n)
            || handles
                .iter()
                .any(|h| h.role == Role::Receiver && queued(&h.shared.socket) > 0))
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let end = snapshot(handles);
    let streams = handles
        .iter()
        .zip(end.iter().zip(&base))
        .map(|(h, ((b, r), (b0, r0)))| {
            let retrans = match h.role {
                Role::Sender => r - r0,
                Role::Receiver => -1,
            };
            Figures::tcp(h.role, b.saturating_sub(*b0), retrans)
        })
        .collect();
    Some(Measured { window, streams })
}

/// What watches a running iperf3 test (TCP or UDP) for its end: the client's `TEST_END`
/// (or its going away), nothing moving for `--idle-timeout`, running past its end (or
/// `--max-duration`), and the server shutting down.
pub(super) struct Watch<'a> {
    pub(super) peer: SocketAddr,
    /// "iperf3 test" or "iperf3 UDP test", for the log.
    pub(super) what: &'static str,
    pub(super) plan: &'a Plan,
    pub(super) ctx: &'a Ctx,
}

impl Watch<'_> {
    /// Waits for the client's `TEST_END`, calling `at_omit` when the `-O` warm-up ends;
    /// `progress` is any counter that grows while data moves. Returns when the window
    /// started (the warm-up's end), or `None` when the test ended any other way (logged, and
    /// the client told where iperf3 reads it).
    ///
    /// Over 80 lines: one `select!` over every way a running test ends, side by side.
    pub(super) async fn until_test_end(
        &self,
        ctrl: &mut TcpStream,
        progress: impl Fn() -> u64,
        mut at_omit: impl FnMut(),
    ) -> Option<Instant> {
        let (peer, what, plan, ctx) = (self.peer, self.what, self.plan, self.ctx);
        let start = Instant::now();
        let mut omitted = plan.omit.is_zero();
        let mut window_start = start;
        // A byte- or datagram-count test has no length; --max-duration bounds it like any
        // other.
        let hard_stop = start
            + match plan.duration.is_zero() {
                true => ctx.limits.max_duration,
                false => plan.duration + plan.omit,
            }
            + ctx.limits.overrun_grace;
        let mut abort = ctx.abort.clone();
        let mut idle = super::test::Idle::new(0);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut byte = [0u8; 1];
        let omit_at = tokio::time::Instant::from_std(start + plan.omit);
        loop {
            tokio::select! {
                r = ctrl.read(&mut byte) => {
                    if !matches!(r, Ok(1)) {
                        info!(%peer, "an iperf3 client closed its control connection mid-test");
                        return None;
                    }
                    match State::from_byte(byte[0]) {
                        Some(State::TestEnd) => return Some(window_start),
                        Some(State::ClientTerminate) => {
                            info!(%peer, "an iperf3 client ended its test early (interrupted)");
                            return None;
                        }
                        _ => {
                            info!(%peer, state = byte[0] as i8, "dropped an iperf3 client that sent an unexpected state mid-test");
                            refuse(ctrl, (ierr::MESSAGE, libc::EINVAL, String::new())).await;
                            return None;
                        }
                    }
                }
                () = tokio::time::sleep_until(omit_at), if !omitted => {
                    at_omit();
                    window_start = Instant::now();
                    omitted = true;
                }
                _ = tick.tick() => {
                    if idle.stalled(progress(), ctx.limits.idle_timeout) {
                        info!(%peer, "ended an {what} in which no data moved for {:?}", ctx.limits.idle_timeout);
                        return None;
                    }
                    if Instant::now() >= hard_stop {
                        info!(%peer, "cut off an {what} that ran past its end (--max-duration, or its client stalled)");
                        let _ = send_state(ctrl, State::ServerTerminate).await;
                        return None;
                    }
                }
                _ = abort.changed() => {
                    info!(%peer, "server shutting down: an iperf3 test is cut short");
                    let _ = send_state(ctrl, State::ServerTerminate).await;
                    return None;
                }
            }
        }
    }
}

/// `EXCHANGE_RESULTS` to `IPERF_DONE`.
pub(super) async fn exchange_results(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    params: &Params,
    m: Measured,
    cpu: (f64, f64),
) -> bool {
    let limit = Duration::from_secs(10);
    if send_state(ctrl, State::ExchangeResults).await.is_err() {
        return false;
    }
    let theirs: Results = match wire::read_json(ctrl, limit).await {
        Ok(r) => r,
        Err(e) => {
            let e = bounded(&e.to_string(), 200);
            info!(%peer, "dropped an iperf3 client: its results: {e}");
            refuse(ctrl, (ierr::RECV_RESULTS, libc::EINVAL, String::new())).await;
            return false;
        }
    };
    let secs = m.window.as_secs_f64();
    let pct = |t: f64| if secs > 0.0 { 100.0 * t / secs } else { 0.0 };
    let ours = Results {
        cpu_util_total: pct(cpu.0 + cpu.1),
        cpu_util_user: pct(cpu.0),
        cpu_util_system: pct(cpu.1),
        // iperf3's UDP senders say 1 as well, each stream then 0.
        sender_has_retransmits: if plan.to_send > 0 { 1 } else { -1 },
        congestion_used: plan.socket.congestion.clone(),
        streams: m
            .streams
            .iter()
            .enumerate()
            .map(|(i, f)| StreamResult {
                id: wire::stream_id(i),
                bytes: f.bytes,
                retransmits: f.retransmits,
                jitter: f.jitter,
                errors: i64::try_from(f.errors).unwrap_or(i64::MAX),
                omitted_errors: i64::try_from(f.omitted_errors).unwrap_or(i64::MAX),
                packets: i64::try_from(f.packets).unwrap_or(i64::MAX),
                omitted_packets: i64::try_from(f.omitted_packets).unwrap_or(i64::MAX),
                start_time: 0.0,
                end_time: secs,
            })
            .collect(),
        server_output_text: plan.server_output.then(|| server_output(peer, params, &m)),
        server_output_json: None,
    };
    if wire::write_json(ctrl, &ours).await.is_err()
        || send_state(ctrl, State::DisplayResults).await.is_err()
    {
        return false;
    }
    let received: u64 = m
        .streams
        .iter()
        .filter(|s| s.role == Role::Receiver)
        .map(|s| s.bytes)
        .sum();
    let sent: u64 = m
        .streams
        .iter()
        .filter(|s| s.role == Role::Sender)
        .map(|s| s.bytes)
        .sum();
    info!(
        %peer,
        received = %format_bits_per_second(received as f64 * 8.0 / secs.max(1e-9)),
        sent = %format_bits_per_second(sent as f64 * 8.0 / secs.max(1e-9)),
        client_streams = theirs.streams.len(),
        "iperf3 test completed"
    );
    // The client answers DISPLAY_RESULTS with IPERF_DONE; it may also just close.
    let mut done = [0u8; 1];
    let _ = tokio::time::timeout(limit, ctrl.read(&mut done)).await;
    true
}

/// The server's own lines for `--get-server-output`, in iperf3's layout.
fn server_output(peer: SocketAddr, params: &Params, m: &Measured) -> String {
    let secs = m.window.as_secs_f64();
    let mut out = format!(
        "-----------------------------------------------------------\n\
         xbench {} serving an iperf3 {} client\n\
         Accepted connection from {}, port {}\n\
         [ ID] Interval           Transfer     Bitrate         Retr\n",
        env!("CARGO_PKG_VERSION"),
        client_version(params),
        peer.ip().to_canonical(),
        peer.port()
    );
    for (i, f) in m.streams.iter().enumerate() {
        let (role, bytes) = (f.role, f.bytes);
        let retr = match role {
            Role::Sender if !params.udp.unwrap_or(false) => format!("{:>4}", f.retransmits),
            Role::Sender => "    ".into(),
            Role::Receiver => "    ".into(),
        };
        out.push_str(&format!(
            "[{:>3}]   0.00-{secs:<6.2} sec  {:>7.2} MBytes  {:>14}  {retr}  {}\n",
            wire::stream_id(i),
            bytes as f64 / (1 << 20) as f64,
            format_bits_per_second(bytes as f64 * 8.0 / secs.max(1e-9)),
            match role {
                Role::Sender => "sender",
                Role::Receiver => "receiver",
            }
        ));
    }
    out
}

/// The version an iperf3 client says it is, as the server repeats it (logs, server output).
pub(super) fn client_version(p: &Params) -> String {
    p.client_version
        .as_deref()
        .map_or_else(|| "3.x".to_owned(), |v| bounded(v, 32))
}

/// Checks an iperf3 client's parameters against what this server does and allows.
fn plan(p: &Params, ctx: &Ctx) -> Result<Plan, Refusal> {
    let l = &ctx.limits;
    let no = |errno: i32, why: String| Err((ierr::NEW_TEST, errno, why));
    if p.sctp.is_some() {
        return no(
            libc::EPROTONOSUPPORT,
            "iperf3's SCTP tests are not served here (TCP and UDP only)".into(),
        );
    }
    let udp = p.udp.unwrap_or(false);
    if p.authtoken.is_some() {
        return no(
            libc::EACCES,
            "the client sent iperf3 RSA credentials, which this server does not check".into(),
        );
    }
    if let Some(c) = p.congestion.as_deref().filter(|c| !is_congestion_name(c)) {
        return no(
            libc::EINVAL,
            format!(
                "the client asks for congestion control \"{}\", which is not a congestion \
                 control's name (like cubic or bbr)",
                bounded(c, 32)
            ),
        );
    }
    let reverse = p.reverse.unwrap_or(false);
    let bidir = p.bidirectional.unwrap_or(false);
    if p.parallel == 0 {
        return no(libc::EINVAL, "the client asks for 0 streams".into());
    }
    let per_dir = usize::try_from(p.parallel).unwrap_or(usize::MAX);
    let (to_receive, to_send) = match (bidir, reverse) {
        (true, _) => (per_dir, per_dir),
        (false, true) => (0, per_dir),
        (false, false) => (per_dir, 0),
    };
    let total = to_receive.saturating_add(to_send);
    if total > usize::from(l.max_streams) {
        return no(
            libc::EINVAL,
            format!(
                "the test asks for {total} data connections; this server allows at most {} \
                 (--max-streams)",
                l.max_streams
            ),
        );
    }
    let (default_len, min_len, max_len) = match udp {
        // iperf3's UDP default; its header; the largest IPv4 UDP payload.
        true => (1460, 16, u64::from(l.max_block_len).min(65_507)),
        false => (128 * 1024, 1, u64::from(l.max_block_len)),
    };
    let block = p.len.unwrap_or(default_len);
    if block < min_len || block > max_len {
        return no(
            libc::EINVAL,
            format!(
                "the test asks for {block}-byte blocks; this server allows {min_len} to \
                 {max_len} (--max-block-len)"
            ),
        );
    }
    let duration = Duration::from_secs(p.time);
    let omit = Duration::from_secs(p.omit);
    if duration.saturating_add(omit) > l.max_duration {
        return no(
            libc::EINVAL,
            format!(
                "the test asks for {:?}; this server allows at most {:?} (--max-duration)",
                duration.saturating_add(omit),
                l.max_duration
            ),
        );
    }
    let rate = p.bandwidth.filter(|b| *b > 0);
    if to_send > 0 && udp {
        // The governor cannot slow a UDP sender down once it runs: the whole test must fit.
        let total = rate.map(|r| r.saturating_mul(to_send as u64));
        super::admission::udp_within_send_cap(total, l.max_send_rate)
            .map_err(|m| (ierr::NEW_TEST, libc::EINVAL, m))?;
    } else if to_send > 0 {
        ctx.governor
            .admit(rate, to_send)
            .map_err(|m| (ierr::NEW_TEST, libc::EINVAL, m))?;
    }
    let budget = match (p.num, p.blockcount) {
        (Some(n), _) if n > 0 => Some(n),
        (_, Some(k)) if k > 0 => Some(k.saturating_mul(block)),
        _ => None,
    };
    if duration.is_zero() && budget.is_none() {
        return no(
            libc::EINVAL,
            "the test has neither a time nor a byte count".into(),
        );
    }
    Ok(Plan {
        to_receive,
        to_send,
        // Bounded by --max-block-len, a u32.
        block_len: block as usize,
        socket: SocketOptions {
            window: p.window.filter(|w| *w > 0),
            mss: p.mss.filter(|m| *m > 0),
            nodelay: p.nodelay.unwrap_or(false),
            congestion: p.congestion.clone(),
        },
        tos: p.tos.and_then(|t| u32::try_from(t).ok()).filter(|t| *t > 0),
        udp,
        counters_64bit: p.udp_counters_64bit.is_some_and(|c| c != 0),
        rate,
        budget,
        duration,
        omit,
        server_output: p.get_server_output.is_some_and(|g| g != 0),
    })
}

/// Configures the data connections and starts their threads: receivers first, in the order
/// the client opened them, as iperf3's server assigns roles.
fn start_streams(conns: Vec<TcpStream>, plan: &Plan) -> Result<Group, String> {
    let payload = match plan.to_send {
        0 => None,
        _ => Some(Arc::new(
            Payload::new(plan.block_len, SendMode::Copy)
                .map_err(|e| format!("cannot allocate the payload: {e}"))?,
        )),
    };
    let budget = plan.budget.map(Budget::new);
    let mut handles = Vec::with_capacity(conns.len());
    match spawn_each(conns, plan, payload, budget, &mut handles) {
        Ok(()) => Ok(Group::new(handles)),
        Err(e) => {
            // Streams already started must not outlive the refusal.
            drop(Group::new(handles));
            Err(e)
        }
    }
}

fn spawn_each(
    conns: Vec<TcpStream>,
    plan: &Plan,
    payload: Option<Arc<Payload>>,
    budget: Option<Arc<Budget>>,
    handles: &mut Vec<StreamHandle>,
) -> Result<(), String> {
    let mut warnings = Vec::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let sock = conn
            .into_std()
            .map_err(|e| format!("cannot take over a data connection: {e}"))?;
        sockopt::apply(SockRef::from(&sock), &plan.socket, &mut warnings)
            .map_err(|e| format!("cannot configure a data connection: {e}"))?;
        if let Some(tos) = plan.tos {
            // Best effort, as iperf3 does for a family the socket is not.
            let _ = SockRef::from(&sock).set_tos_v4(tos);
            let _ = SockRef::from(&sock).set_tclass_v6(tos);
        }
        // At most --max-streams, a u16.
        let id = i as u16;
        let h = match (i >= plan.to_receive, &payload) {
            (true, Some(p)) => {
                sockopt::pace(&sock, plan.rate).map_err(|e| e.to_string())?;
                stream::spawn_sender(id, sock, Arc::clone(p), budget.clone())
            }
            _ => stream::spawn_receiver(id, sock, plan.block_len, RecvMode::Discard),
        }
        .map_err(|e| format!("cannot start a stream thread: {e}"))?;
        handles.push(h);
    }
    Ok(())
}

/// Bytes waiting in a socket's receive queue.
fn queued(sock: &std::net::TcpStream) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the valid pointer given; the descriptor is open.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        usize::try_from(n).unwrap_or(0)
    } else {
        0
    }
}

/// Resolves when the client's control connection closes or says anything, at a state in
/// which an iperf3 client has nothing to say (its streams are opening): either way its test
/// is over, and its places among the tests and the handshakes are freed now, not after the
/// handshake timeout. Why, for the log.
pub(super) async fn gone(ctrl: &mut TcpStream) -> String {
    let mut byte = [0u8; 1];
    match ctrl.read(&mut byte).await {
        Ok(0) => "it closed its control connection".to_owned(),
        Ok(_) => match State::from_byte(byte[0]) {
            Some(State::ClientTerminate) => "it ended its test (interrupted)".to_owned(),
            _ => format!("it sent state {} out of turn", byte[0] as i8),
        },
        Err(e) => format!("its control connection failed: {e}"),
    }
}

pub(super) async fn send_state(ctrl: &mut TcpStream, s: State) -> std::io::Result<()> {
    ctrl.write_all(&[s.byte()]).await
}

/// Sends iperf3's `SERVER_ERROR` and closes.
pub(super) async fn refuse(ctrl: &mut TcpStream, (i_errno, errno, _): Refusal) {
    let _ = ctrl.write_all(&wire::server_error(i_errno, errno)).await;
    let _ = ctrl.shutdown().await;
}
