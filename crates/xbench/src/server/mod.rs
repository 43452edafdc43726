//! `xbench server`: accepts connections on one port, tells protocols apart by their first bytes,
//! and runs any number of tests at once, each isolated in its own session task and threads.
//!
//! A misbehaving peer (garbage, silence, a vanished client) costs only its own connection: every
//! read before a test starts is bounded by a timeout, every session owns its threads through a
//! guard that aborts them, and the accept loop never waits on a session. The server stops when
//! the `shutdown` future given to [`Server::run`] resolves: it stops accepting, lets running
//! tests finish for [`ServerConfig::shutdown_grace`], then tells the rest why they are cut short.

mod bulk;
mod governor;
mod registry;
mod rr;
mod session;

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use self::governor::Governor;
use self::registry::Registry;
use crate::auth::Psk;
use crate::error::Error;
use crate::proto::frontend::{self, Frontend};
use crate::proto::{self, Channel, DATA_HELLO_LEN, DataHello, ErrorCode, ErrorMsg, Preamble};

/// Server-side bounds on what clients may ask for and how long they may idle.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most data connections (each a thread here) one throughput test may open.
    pub max_streams: u16,
    /// Largest block (`-l`) a throughput test may ask for, bytes: the server holds one block
    /// per test as its payload, so this bounds what a client can make it allocate.
    pub max_block_len: u32,
    /// Most connections one request/response test may hold open at once; many share a thread.
    pub max_flows: u16,
    /// Longest test accepted, `-O` warm-up included; byte-count tests are stopped at it.
    pub max_duration: Duration,
    /// Most tests running at once.
    pub max_tests: usize,
    /// Most tests running at once from one client address, so one host cannot take every
    /// slot.
    pub max_tests_per_client: usize,
    /// Most the server sends in total, bits per second, across every test's server-to-client
    /// streams; they share it (TCP pacing, `SO_MAX_PACING_RATE`). `None`: no cap.
    pub max_send_rate: Option<u64>,
    /// A running test in which no data moved for this long is ended: its client is gone
    /// without closing (or stalled).
    pub idle_timeout: Duration,
    /// How long a new connection may take to say what it is, and a client to answer each
    /// handshake step. Bounds what an idle or half-open connection can hold.
    pub handshake_timeout: Duration,
    /// Most connections still saying what they are (control sessions before their test
    /// request, data connections before they find their test). Beyond it new connections are
    /// closed at once, so a flood of silent ones costs sockets, not memory. At least twice
    /// [`Self::max_flows`]: a request/response test opens all its connections at once.
    pub max_handshakes: usize,
    /// How long after the client's end the receivers may take to drain.
    pub drain_timeout: Duration,
    /// How far past its stated end a test may run before the server cuts it off.
    pub overrun_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_streams: 128,
            max_block_len: 4 << 20,
            max_flows: 4096,
            max_duration: Duration::from_secs(3600),
            max_tests: 64,
            max_tests_per_client: 8,
            max_send_rate: None,
            idle_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 8192,
            drain_timeout: Duration::from_secs(10),
            overrun_grace: Duration::from_secs(30),
        }
    }
}

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to listen on. Empty means `[::]` (IPv4 and IPv6) on [`Self::port`], or
    /// `0.0.0.0` where IPv6 is off.
    pub bind: Vec<IpAddr>,
    /// Port to listen on; 0 picks a free one.
    pub port: u16,
    /// Exit after the first completed test (`--one-off`).
    pub one_off: bool,
    /// Bounds on clients.
    pub limits: Limits,
    /// On shutdown, how long running tests may continue before they are cut short.
    pub shutdown_grace: Duration,
    /// Pre-shared key clients must prove they hold (`--psk-file`); `None` serves anyone, as
    /// iperf3 does.
    pub psk: Option<Psk>,
    /// Client networks allowed to connect (`--allow`); empty allows all.
    pub allow: Vec<IpNet>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: Vec::new(),
            port: proto::DEFAULT_PORT,
            one_off: false,
            limits: Limits::default(),
            shutdown_grace: Duration::from_secs(10),
            psk: None,
            allow: Vec::new(),
        }
    }
}

/// A bound server, ready to [`run`](Server::run).
#[derive(Debug)]
pub struct Server {
    listeners: Vec<TcpListener>,
    config: ServerConfig,
}

/// What sessions share.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) limits: Limits,
    pub(crate) psk: Option<Psk>,
    pub(crate) allow: Vec<IpNet>,
    /// Running tests per client address, checked against [`Limits::max_tests_per_client`].
    pub(crate) per_client: Mutex<HashMap<IpAddr, usize>>,
    /// Shares [`Limits::max_send_rate`] among the streams the server sends on.
    pub(crate) governor: Governor,
    pub(crate) registry: Arc<Registry>,
    /// Tests between `Start` and their end, checked against [`Limits::max_tests`].
    pub(crate) running: AtomicUsize,
    /// Connections in their handshake, checked against [`Limits::max_handshakes`].
    pub(crate) handshaking: AtomicUsize,
    /// Raised when the shutdown grace has passed: sessions cut their tests short.
    pub(crate) abort: watch::Receiver<bool>,
}

impl Server {
    /// Binds the listening sockets.
    pub async fn bind(config: ServerConfig) -> Result<Self, Error> {
        let mut listeners = Vec::new();
        if config.bind.is_empty() {
            match listen(
                SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), config.port),
                true,
            ) {
                Ok(l) => listeners.push(l),
                // No IPv6 on this host: IPv4 alone.
                Err(_) => listeners.push(listen(
                    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), config.port),
                    false,
                )?),
            }
        } else {
            for ip in &config.bind {
                listeners.push(listen(SocketAddr::new(*ip, config.port), false)?);
            }
        }
        Ok(Server { listeners, config })
    }

    /// Addresses actually bound (useful with port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serves until `shutdown` resolves (or, with `one_off`, until one test completes).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let (abort_tx, abort_rx) = watch::channel(false);
        let ctx = Arc::new(Ctx {
            limits: self.config.limits.clone(),
            psk: self.config.psk.clone(),
            allow: self.config.allow.clone(),
            per_client: Mutex::new(HashMap::new()),
            governor: Governor::new(self.config.limits.max_send_rate),
            registry: Arc::new(Registry::default()),
            running: AtomicUsize::new(0),
            handshaking: AtomicUsize::new(0),
            abort: abort_rx,
        });
        let (conn_tx, mut conn_rx) = mpsc::channel::<(TcpStream, SocketAddr)>(64);
        let mut acceptors = JoinSet::new();
        for l in self.listeners {
            acceptors.spawn(accept_loop(l, conn_tx.clone()));
        }
        drop(conn_tx);
        let mut conns: JoinSet<ConnEnd> = JoinSet::new();
        let mut turned_away = TurnedAway::default();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                Some((stream, peer)) = conn_rx.recv() => match HandshakeSlot::take(&ctx) {
                    Some(slot) => {
                        conns.spawn(handle_conn(stream, peer, Arc::clone(&ctx), slot));
                    }
                    None => {
                        drop(stream);
                        turned_away.note(peer, ctx.limits.max_handshakes);
                    }
                },
                Some(done) = conns.join_next() => {
                    match done {
                        Ok(ConnEnd::TestCompleted) if self.config.one_off => break,
                        Ok(_) => {}
                        Err(e) if e.is_panic() => warn!("a connection handler panicked; the server carries on"),
                        Err(_) => {}
                    }
                }
                () = &mut shutdown => {
                    info!("shutting down: no new connections");
                    break;
                }
            }
        }
        acceptors.shutdown().await;
        drop(conn_rx);
        // Let running tests finish, then cut the rest short, telling their clients why.
        if !conns.is_empty() {
            let grace = self.config.shutdown_grace;
            if tokio::time::timeout(grace, drain(&mut conns))
                .await
                .is_err()
            {
                info!(
                    running = conns.len(),
                    "shutdown grace of {grace:?} over: stopping running tests"
                );
                let _ = abort_tx.send(true);
                if tokio::time::timeout(Duration::from_secs(5), drain(&mut conns))
                    .await
                    .is_err()
                {
                    conns.shutdown().await;
                }
            }
        }
        Ok(())
    }
}

async fn drain(conns: &mut JoinSet<ConnEnd>) {
    while conns.join_next().await.is_some() {}
}

fn listen(addr: SocketAddr, dual_stack: bool) -> Result<TcpListener, Error> {
    let ctx = |e| Error::io(format!("cannot listen on {addr}"), e);
    let sock =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(ctx)?;
    if dual_stack {
        sock.set_only_v6(false).map_err(ctx)?;
    }
    sock.set_reuse_address(true).map_err(ctx)?;
    sock.bind(&addr.into()).map_err(ctx)?;
    sock.listen(1024).map_err(ctx)?;
    sock.set_nonblocking(true).map_err(ctx)?;
    TcpListener::from_std(std::net::TcpListener::from(sock)).map_err(ctx)
}

async fn accept_loop(l: TcpListener, tx: mpsc::Sender<(TcpStream, SocketAddr)>) {
    loop {
        match l.accept().await {
            Ok(c) => {
                if tx.send(c).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                // Out of file descriptors or similar: back off instead of spinning.
                warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Holds one of [`Limits::max_handshakes`] until the connection has said what it is.
#[derive(Debug)]
pub(crate) struct HandshakeSlot {
    ctx: Arc<Ctx>,
}

impl HandshakeSlot {
    fn take(ctx: &Arc<Ctx>) -> Option<Self> {
        ctx.handshaking
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < ctx.limits.max_handshakes).then_some(n + 1)
            })
            .ok()
            .map(|_| HandshakeSlot {
                ctx: Arc::clone(ctx),
            })
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.ctx.handshaking.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Connections closed for want of a handshake slot, logged at most once a second.
#[derive(Debug, Default)]
struct TurnedAway {
    since_log: u64,
    last_log: Option<Instant>,
}

impl TurnedAway {
    fn note(&mut self, peer: SocketAddr, max: usize) {
        self.since_log += 1;
        if self
            .last_log
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            warn!(
                %peer,
                closed = self.since_log,
                "closed new connections at once: {max} are still in their handshake \
                 (--max-handshakes); a flood of silent connections, or a limit set too low"
            );
            self.since_log = 0;
            self.last_log = Some(Instant::now());
        }
    }
}

/// How a connection ended, for `--one-off`.
#[derive(Debug)]
enum ConnEnd {
    TestCompleted,
    Other,
}

async fn handle_conn(
    mut stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    slot: HandshakeSlot,
) -> ConnEnd {
    let allowed = ctx.allow.is_empty() || {
        let ip = peer.ip().to_canonical();
        ctx.allow.iter().any(|n| n.contains(&ip))
    };
    // A peer outside --allow only gets its refusal if it says at once what it is; it does
    // not get to hold a connection open for the whole handshake timeout.
    let limit = if allowed {
        ctx.limits.handshake_timeout
    } else {
        ctx.limits.handshake_timeout.min(Duration::from_secs(1))
    };
    let mut first = [0u8; 4];
    match tokio::time::timeout(limit, stream.read_exact(&mut first)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            debug!(%peer, "connection closed before saying anything: {e}");
            return ConnEnd::Other;
        }
        Err(_) => {
            info!(%peer, "dropped a connection that said nothing for {limit:?}");
            return ConnEnd::Other;
        }
    }
    match frontend::detect(&first) {
        Frontend::Xbench => {}
        Frontend::Iperf3 => {
            info!(%peer, "refused an iperf3 client: this server speaks the xbench protocol; use `xbench client`");
            // Take the rest of its cookie first: closing with unread bytes sends a reset, and
            // the client would lose the refusal.
            let mut rest = [0u8; frontend::IPERF3_COOKIE_LEN - 4];
            let _ = tokio::time::timeout(limit, stream.read_exact(&mut rest)).await;
            let _ = stream.write_all(&frontend::iperf3_refusal()).await;
            let _ = stream.shutdown().await;
            return ConnEnd::Other;
        }
        Frontend::Unknown => {
            info!(%peer, first = ?first, "dropped a connection that does not speak xbench");
            return ConnEnd::Other;
        }
    }
    let mut rest = [0u8; proto::PREAMBLE_LEN - 4];
    if tokio::time::timeout(limit, stream.read_exact(&mut rest))
        .await
        .map_or(true, |r| r.is_err())
    {
        info!(%peer, "dropped a connection with a truncated preamble");
        return ConnEnd::Other;
    }
    let mut pre = [0u8; proto::PREAMBLE_LEN];
    pre[..4].copy_from_slice(&first);
    pre[4..].copy_from_slice(&rest);
    let pre = match Preamble::decode(&pre) {
        Ok(p) => p,
        Err(e) => {
            info!(%peer, "dropped a connection: {e}");
            return ConnEnd::Other;
        }
    };
    if !allowed {
        info!(%peer, "refused a connection from outside the --allow list");
        if pre.channel == Channel::Control {
            let _ = stream
                .write_all(&Preamble::new(Channel::Server).encode())
                .await;
            let msg = format!(
                "{} is not allowed to use this server (its --allow list)",
                peer.ip().to_canonical()
            );
            let _ =
                proto::write_message(&mut stream, &ErrorMsg::message(ErrorCode::Forbidden, msg))
                    .await;
        }
        return ConnEnd::Other;
    }
    match pre.channel {
        Channel::Control => match session::run(stream, peer, pre.version, ctx, slot).await {
            session::SessionEnd::Completed => ConnEnd::TestCompleted,
            session::SessionEnd::Other => ConnEnd::Other,
        },
        Channel::Data => {
            attach_data(stream, peer, &ctx).await;
            drop(slot);
            ConnEnd::Other
        }
        Channel::Server => {
            info!(%peer, "dropped a connection that claims to be a server");
            ConnEnd::Other
        }
    }
}

async fn attach_data(mut stream: TcpStream, peer: SocketAddr, ctx: &Ctx) {
    let mut hello = [0u8; DATA_HELLO_LEN];
    let limit = ctx.limits.handshake_timeout;
    if tokio::time::timeout(limit, stream.read_exact(&mut hello))
        .await
        .map_or(true, |r| r.is_err())
    {
        info!(%peer, "dropped a data connection that did not name its test");
        return;
    }
    let DataHello { cookie, id } = DataHello::decode(&hello);
    let std = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            warn!(%peer, "cannot take over a data connection: {e}");
            return;
        }
    };
    if let Err(e) = ctx.registry.attach(&cookie, (id, std, peer)) {
        info!(%peer, ?cookie, stream = id, "dropped a data connection: {e:?}");
    }
}

/// Counts a test as running if the limits allow another, in total and from `client`; the
/// refusal names the limit.
pub(crate) fn try_running_guard(ctx: &Arc<Ctx>, client: IpAddr) -> Result<RunningGuard, String> {
    let (client, shown) = client_key(client);
    {
        let mut per = ctx
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = per.entry(client).or_insert(0);
        if *n >= ctx.limits.max_tests_per_client {
            return Err(format!(
                "{shown} already runs {} tests on this server, its limit \
                 (--max-tests-per-client); try again when one ends",
                *n
            ));
        }
        *n += 1;
    }
    // From here the guard owns the per-client count; `total` says whether it also holds one
    // of the server's slots.
    let mut guard = RunningGuard {
        ctx: Arc::clone(ctx),
        client,
        total: false,
    };
    ctx.running
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < ctx.limits.max_tests).then_some(n + 1)
        })
        .map_err(|_| {
            format!(
                "the server is running its maximum of {} tests at once (--max-tests); try \
                 again shortly",
                ctx.limits.max_tests
            )
        })?;
    guard.total = true;
    Ok(guard)
}

/// Where a client's tests are counted, and how to name it: its address, IPv4-mapped ones as
/// IPv4. Not its IPv6 /64: in a cloud subnet every instance has an address from the same /64,
/// and a fleet of test clients there must not share one client's allowance.
fn client_key(ip: IpAddr) -> (IpAddr, String) {
    let ip = ip.to_canonical();
    (ip, ip.to_string())
}

/// Counts a running test (in total and for its client) while alive.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    ctx: Arc<Ctx>,
    client: IpAddr,
    total: bool,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if self.total {
            self.ctx.running.fetch_sub(1, Ordering::SeqCst);
        }
        let mut per = self
            .ctx
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = per.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_counted_by_address() {
        // Two instances in one cloud subnet (one /64) are two clients.
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_ne!(client_key(a).0, client_key(b).0);
        // IPv4, also when it arrives mapped on a dual-stack socket, is counted as IPv4.
        let v4: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(
            client_key(v4),
            ("192.0.2.7".parse().unwrap(), "192.0.2.7".into())
        );
    }
}
