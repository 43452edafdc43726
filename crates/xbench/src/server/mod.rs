//! `xbench server`: accepts connections on one port, tells protocols apart by their first bytes,
//! and runs any number of tests at once, each isolated in its own session task and threads.
//!
//! A misbehaving peer (garbage, silence, a vanished client) costs only its own connection: every
//! read before a test starts is bounded by a timeout, every session owns its threads through a
//! guard that aborts them, and the accept loop never waits on a session. The server stops when
//! the `shutdown` future given to [`Server::run`] resolves: it stops accepting, lets running
//! tests finish for [`ServerConfig::shutdown_grace`], then tells the rest why they are cut short.

mod admission;
pub(crate) mod budget;
mod bulk;
mod busy;
mod config;
mod conn;
mod context;
mod gate;
mod governor;
mod iperf3;
mod metrics;
mod path;
mod peer_text;
mod registry;
mod rr;
mod session;
mod slot;
mod test;
mod udp;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{info, warn};

use self::budget::Budget;
use self::busy::Refusals;
pub use self::config::{Limits, ServerConfig};
use self::conn::ConnEnd;
use self::context::Ctx;
use self::governor::Governor;
use self::registry::Registry;
use self::slot::HandshakeSlot;
use crate::error::Error;

/// A bound server, ready to [`run`](Server::run).
#[derive(Debug)]
pub struct Server {
    listeners: Vec<Listener>,
    /// The metrics endpoint's socket (`--metrics`).
    metrics: Option<tokio::net::TcpListener>,
    /// A UDP socket on each listener's address and port, for iperf3's UDP streams.
    udp: Vec<tokio::net::UdpSocket>,
    config: ServerConfig,
}

impl Server {
    /// Binds the listening sockets. Without [`ServerConfig::bind`] that is `[::]` for IPv6 and
    /// IPv4 both, or `0.0.0.0` when `[::]` fails (a host without IPv6); the error of a server
    /// that cannot listen names every address tried and why each failed.
    pub async fn bind(config: ServerConfig) -> Result<Self, Error> {
        let mut listeners = Vec::new();
        if config.bind.is_empty() {
            let any6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), config.port);
            let any4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), config.port);
            match listen(any6, true) {
                Ok(l) => listeners.push(l),
                Err(e6) => match listen(any4, false) {
                    Ok(l) => {
                        warn!("cannot listen on {any6} ({e6}); serving IPv4 only, on {any4}");
                        listeners.push(l);
                    }
                    Err(e4) => {
                        return Err(listen_error(&[
                            (any6, "IPv6 and IPv4", e6),
                            (any4, "IPv4 only", e4),
                        ]));
                    }
                },
            }
        } else {
            for ip in &config.bind {
                let addr = SocketAddr::new(*ip, config.port);
                listeners.push(listen(addr, false).map_err(|e| listen_error(&[(addr, "", e)]))?);
            }
        }
        let mut udp = Vec::new();
        for l in &listeners {
            let Ok(addr) = l.local_addr() else {
                continue;
            };
            let dual_stack = config.bind.is_empty() && addr.is_ipv6();
            match iperf3::listen(addr, dual_stack) {
                Ok(s) => udp.push(s),
                Err(e) => warn!(
                    "cannot listen for UDP on {addr} ({e}): iperf3 clients' UDP tests (-u) \
                     will find no server"
                ),
            }
        }
        let metrics = match config.metrics {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| Error::io(format!("cannot serve metrics on {addr}"), e))?,
            ),
            None => None,
        };
        Ok(Server {
            listeners,
            metrics,
            udp,
            config,
        })
    }

    /// Where the metrics endpoint listens (with `--metrics`; useful with port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
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
        let ctx = context(&self.config, abort_rx);
        // Stopped with the server: aborted when this function returns, whichever way.
        let _metrics = self.metrics.map(|l| {
            AbortOnDrop(tokio::spawn(metrics::serve(
                l,
                Arc::clone(&ctx.metrics),
                ctx.allow.clone(),
            )))
        });
        log_budget(&ctx.budget, &ctx.limits);
        let (accepting, mut conn_rx) = start_accepting(self.listeners, &ctx).await?;
        let mut acceptors = JoinSet::new();
        for u in self.udp {
            acceptors.spawn(iperf3::serve(u, Arc::clone(&ctx.iperf3_udp)));
        }
        let mut conns: JoinSet<ConnEnd> = JoinSet::new();
        let mut turned_away = Throttled::default();
        let mut refusals = Refusals::default();
        // Accept order: iperf3 gives its data connections roles in the order they connect.
        let mut accepted: u64 = 0;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                Some((sock, peer)) = conn_rx.recv() => {
                    let stream = match TcpStream::from_std(sock) {
                        Ok(s) => s,
                        Err(e) => {
                            warn!(%peer, "cannot take a new connection: {e}");
                            continue;
                        }
                    };
                    match HandshakeSlot::take(&ctx, peer.ip()) {
                        Ok(slot) => {
                            accepted += 1;
                            conns.spawn(conn::handle(stream, peer, Arc::clone(&ctx), slot, accepted));
                        }
                        Err(busy) => {
                            ctx.metrics.handshake_failed("busy");
                            if let Some(n) = turned_away.due() {
                                warn!(
                                    %peer,
                                    refused = n,
                                    "refused new connections (control connections are told the \
                                     server is busy): {busy}; a flood of silent connections, or \
                                     a limit set too low"
                                );
                            }
                            refusals.refuse(stream, busy);
                        }
                    }
                }
                () = refusals.reap() => {}
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
        stop_accepting(accepting, conn_rx).await;
        acceptors.shutdown().await;
        refusals.shutdown().await;
        wind_down(&mut conns, self.config.shutdown_grace, &abort_tx).await;
        Ok(())
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Says what the budgets are, and warns of a `--max-flows` no client can have.
/// What every session shares, from the server's configuration; `abort` turns true when the
/// shutdown grace is over.
fn context(config: &ServerConfig, abort: watch::Receiver<bool>) -> Arc<Ctx> {
    Arc::new(Ctx {
        limits: config.limits.clone(),
        psk: config.psk.clone(),
        allow: config.allow.clone(),
        budget: Arc::new(Budget::new(&config.limits)),
        governor: Arc::new(Governor::new(config.limits.max_send_rate)),
        registry: Arc::new(Registry::default()),
        abort,
        iperf3: Arc::default(),
        iperf3_udp: Arc::default(),
        metrics: Arc::default(),
    })
}

/// A new connection from an accepting thread, and who it came from.
type Accepted = (std::net::TcpStream, SocketAddr);

/// Starts a thread accepting on each listener; they hand their connections to the receiver
/// returned. On failure the threads already started are stopped first.
async fn start_accepting(
    listeners: Vec<Listener>,
    ctx: &Arc<Ctx>,
) -> Result<(Vec<Acceptor>, mpsc::Receiver<Accepted>), Error> {
    let (conn_tx, conn_rx) = mpsc::channel::<Accepted>(64);
    let mut accepting = Vec::new();
    for l in listeners {
        match Acceptor::spawn(l, conn_tx.clone(), Arc::clone(ctx)) {
            Ok(a) => accepting.push(a),
            Err(e) => {
                stop_accepting(accepting, conn_rx).await;
                return Err(Error::io("cannot start a thread to accept connections", e));
            }
        }
    }
    drop(conn_tx);
    Ok((accepting, conn_rx))
}

/// Lets running tests finish within `grace`, then cuts the rest short, telling their clients
/// why (`abort`), and waits 5 s more before dropping them.
async fn wind_down(conns: &mut JoinSet<ConnEnd>, grace: Duration, abort: &watch::Sender<bool>) {
    if !conns.is_empty() && tokio::time::timeout(grace, drain(conns)).await.is_err() {
        info!(
            running = conns.len(),
            "shutdown grace of {grace:?} over: stopping running tests"
        );
        let _ = abort.send(true);
        if tokio::time::timeout(Duration::from_secs(5), drain(conns))
            .await
            .is_err()
        {
            conns.shutdown().await;
        }
    }
}

fn log_budget(budget: &Budget, limits: &Limits) {
    let s = budget.sizes();
    info!(
        "budget: {} descriptors for tests (open-file limit {}, less {} for the server and {} \
         kept for new connections), {} threads, {} connections in their handshake; one client \
         address at most {}% of each: {} descriptors, {} threads, {} in their handshake",
        s.for_tests,
        s.open_files,
        Limits::OPEN_FILES_RESERVE,
        s.pool - s.for_tests,
        s.threads,
        s.handshakes,
        s.share,
        s.fds_share,
        s.threads_share,
        s.handshakes_share
    );
    let fit = s.flows_in_a_share();
    if u64::from(limits.max_flows) > fit {
        warn!(
            "--max-flows {} is more than one client address's share of the budget holds \
             ({fit} flows): larger tests will be refused, naming the budget; raise the \
             open-file limit (LimitNOFILE=, ulimit -Hn) or --client-share",
            limits.max_flows
        );
    }
}

async fn drain(conns: &mut JoinSet<ConnEnd>) {
    while conns.join_next().await.is_some() {}
}

/// A listening socket, blocking: its [`Acceptor`] thread waits in `accept`.
type Listener = std::net::TcpListener;

/// A listening socket on `addr` (`dual_stack`: IPv4 too, on `[::]`).
fn listen(addr: SocketAddr, dual_stack: bool) -> std::io::Result<Listener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if dual_stack {
        sock.set_only_v6(false)?;
    }
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    defer_accept(&sock)?;
    sock.listen(1024)?;
    Ok(sock.into())
}

/// How long the kernel holds a connection that has said nothing before handing it to
/// `accept` anyway ([`defer_accept`]), seconds.
const DEFER_ACCEPT_SECS: libc::c_int = 1;

/// `TCP_DEFER_ACCEPT`: `accept` returns a connection once its first bytes have arrived, not
/// when its handshake completes. Every client of this port speaks first (an xbench client's
/// preamble or greeting, an iperf3 client's cookie), so nothing waits for it; what it saves
/// is a wake-up per connection. Without it the accepting thread woke on the handshake,
/// found no greeting yet (the client sends it right after `connect` returns, 74 % of the time
/// after the thread had looked), and slept again in `ppoll` until it came: two context
/// switches and a `ppoll` per `--crr` connection, against one and none with it (issue 36).
/// A connection that stays silent is handed over after [`DEFER_ACCEPT_SECS`] (the kernel
/// resends its SYN-ACK then, and the client's ACK completes it), and meets the handshake
/// slots and timeouts as before; until then it holds no slot.
fn defer_accept(sock: &Socket) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (fd, level) = (sock.as_raw_fd(), libc::IPPROTO_TCP);
    crate::engine::sockopt::set_int(fd, level, libc::TCP_DEFER_ACCEPT, DEFER_ACCEPT_SECS)
}

/// The error of a server that cannot listen: each address tried (with what it was for), in
/// order, and its failure; the hint follows the last failure.
fn listen_error(tried: &[(SocketAddr, &str, std::io::Error)]) -> Error {
    let tried_text = tried
        .iter()
        .map(|(addr, what, e)| match what.is_empty() {
            true => format!("{addr}: {e}"),
            false => format!("{addr} ({what}): {e}"),
        })
        .collect::<Vec<_>>()
        .join("; nor on ");
    let hint = match tried.last().map(|(_, _, e)| e.kind()) {
        Some(std::io::ErrorKind::AddrInUse) => {
            " — another program (or another xbench server) holds the port; `ss -ltnp` names \
             it: stop it, or choose another port (-p)"
        }
        Some(std::io::ErrorKind::PermissionDenied) => {
            " — ports below 1024 need root or CAP_NET_BIND_SERVICE; choose another port (-p)"
        }
        Some(std::io::ErrorKind::AddrNotAvailable) => {
            " — no interface of this host has that address (-B)"
        }
        _ => "",
    };
    Error::Listen {
        tried: tried_text,
        hint,
    }
}

/// Accepts connections on one listening socket, on a thread of its own, until stopped. A
/// data connection whose whole greeting is already there (a client sends it with its first
/// request, in one segment) is attached to its test right there ([`conn::attach_at_once`]),
/// and a `--crr` connection answered there too when its request is complete; everything else
/// goes to the server's loop, which gives it a handshake slot and a task of its own.
///
/// Issue 20: a `--crr` transaction is one accept, and what it costs is mostly wake-ups. A
/// runtime task waiting for the listener took the runtime's wake-up, and its handoff to a
/// worker thread a second one; a thread blocked in `accept`, answering at once, takes one,
/// as a plain blocking server does.
#[derive(Debug)]
struct Acceptor {
    listener: Arc<std::net::TcpListener>,
    stopping: Arc<AtomicBool>,
    /// Resolves when the thread has ended (and dropped its hold on the listener).
    ended: tokio::sync::oneshot::Receiver<()>,
}

impl Acceptor {
    fn spawn(
        listener: std::net::TcpListener,
        tx: mpsc::Sender<(std::net::TcpStream, SocketAddr)>,
        ctx: Arc<Ctx>,
    ) -> std::io::Result<Self> {
        let listener = Arc::new(listener);
        let stopping = Arc::new(AtomicBool::new(false));
        let (done, ended) = tokio::sync::oneshot::channel();
        let (l, stop) = (Arc::clone(&listener), Arc::clone(&stopping));
        std::thread::Builder::new()
            .name("xb-accept".into())
            .spawn(move || {
                accept_loop(&l, &tx, &ctx, &stop);
                drop(l);
                let _ = done.send(());
            })?;
        Ok(Acceptor {
            listener,
            stopping,
            ended,
        })
    }

    /// Stops accepting: shutting a listening socket down wakes a thread blocked in `accept`
    /// on it (with `EINVAL`), and closes it to new connections. The thread may still be
    /// waiting to pass on a connection: [`Acceptor::ended`] follows once the server's loop has
    /// dropped its end of the channel.
    fn stop(&self) {
        if self.stopping.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Err(e) = socket2::SockRef::from(&*self.listener).shutdown(std::net::Shutdown::Read) {
            warn!("cannot stop listening: {e}");
        }
    }

    /// Waits for the thread to end, and with it the listening socket.
    async fn ended(&mut self) {
        let _ = (&mut self.ended).await;
    }
}

impl Drop for Acceptor {
    /// A server whose `run` is dropped half-way (its task aborted) stops listening too.
    fn drop(&mut self) {
        self.stop();
    }
}

/// Stops every acceptor and waits for their threads, `conns` (the server loop's end of their
/// channel) dropped in between so none is left waiting to pass a connection on.
async fn stop_accepting<T>(accepting: Vec<Acceptor>, conns: mpsc::Receiver<T>) {
    for a in &accepting {
        a.stop();
    }
    drop(conns);
    for mut a in accepting {
        a.ended().await;
    }
}

/// The accepting thread's loop (see [`Acceptor`]); returns once `stopping` is raised, or the
/// server's loop is gone.
fn accept_loop(
    l: &std::net::TcpListener,
    tx: &mpsc::Sender<(std::net::TcpStream, SocketAddr)>,
    ctx: &Ctx,
    stopping: &AtomicBool,
) {
    // A descriptor to give up when the process has none left (the budget keeps it from
    // happening; something outside it may not): see `close_one`.
    let mut spare = l.try_clone().ok();
    let mut closed = Throttled::default();
    loop {
        match accept(l) {
            Ok((sock, peer)) => {
                // Its greeting is often here already (a loaded server finds connections
                // queued); if not, it is a few µs away.
                let Some(sock) = conn::attach_at_once(sock, peer, ctx) else {
                    continue;
                };
                wait_for_first_bytes(&sock);
                let Some(sock) = conn::attach_at_once(sock, peer, ctx) else {
                    continue;
                };
                if tx.blocking_send((sock, peer)).is_err() {
                    return;
                }
            }
            Err(_) if stopping.load(Ordering::Relaxed) => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if is_transient(&e) => {
                // Gone before we took it (reset while queued): nothing to do.
                tracing::debug!("accept: {e}");
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                if spare.take().is_some() {
                    let peer = close_one(l);
                    spare = l.try_clone().ok();
                    if let Some(n) = closed.due() {
                        warn!(
                            peer = ?peer,
                            closed = n,
                            "closed new connections at once: the server is out of descriptors \
                             ({e}), held by something beyond its budget (an open-file limit \
                             given to the server above the process's own?)"
                        );
                    }
                } else {
                    warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            Err(e) => {
                // Something else wrong with the listener: back off instead of spinning.
                warn!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Out of descriptors, with the spare given up: takes the connection waiting and closes it,
/// so its client hears at once (a reset) instead of waiting in the backlog until it gives up.
fn close_one(l: &std::net::TcpListener) -> Option<SocketAddr> {
    accept(l).ok().map(|(_, peer)| peer)
}

/// How long the accepting thread waits for a new connection's first bytes before handing it
/// to the server's loop. A thread blocked in `accept` wakes as the handshake completes, which
/// on loopback is inside the client's `connect`, a few µs before its greeting and request
/// arrive; without the wait most `--crr` connections took the slow path (two wake-ups more).
/// A client sends those bytes at once, so the wait is short; a silent connection costs it in
/// full, which bounds a flood of them to one every 250 µs here (they hold handshake slots
/// anyway).
const FIRST_BYTES_WAIT: Duration = Duration::from_micros(250);

/// Waits up to [`FIRST_BYTES_WAIT`] for something to read on a new connection.
fn wait_for_first_bytes(sock: &std::net::TcpStream) {
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(sock),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: FIRST_BYTES_WAIT.as_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` and `ts` are valid for the call; a null signal mask leaves the thread's
    // alone. Whatever it returns, `attach_at_once` looks for itself.
    unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
}

/// Accepts a connection (waiting for one), non-blocking from the start (as a worker and the
/// runtime both want it: no `ioctl` afterwards).
fn accept(l: &std::net::TcpListener) -> std::io::Result<(std::net::TcpStream, SocketAddr)> {
    let (sock, addr) =
        socket2::SockRef::from(l).accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    let peer = addr.as_socket().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "accepted a non-IP connection",
        )
    })?;
    Ok((sock.into(), peer))
}

/// An `accept` error about the one connection, not the listener (accept(2)'s list of errors
/// Linux passes on from the new socket).
fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::EPROTO | libc::ENETDOWN | libc::EHOSTUNREACH)
    )
}

/// Counts events logged at most once a second (connections refused for want of a handshake
/// slot or a descriptor): a flood must not flood the log.
#[derive(Debug, Default)]
struct Throttled {
    since_log: u64,
    last_log: Option<Instant>,
}

impl Throttled {
    /// Counts one; when a line is due, how many it covers.
    fn due(&mut self) -> Option<u64> {
        self.since_log += 1;
        if self
            .last_log
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return None;
        }
        self.last_log = Some(Instant::now());
        Some(std::mem::take(&mut self.since_log))
    }
}
