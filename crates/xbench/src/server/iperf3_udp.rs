//! UDP streams for iperf3 clients (`iperf3 -u`), found as iperf3's server finds them: each
//! client socket sends one "connect" datagram to the server's port (the TCP control port, on
//! UDP); the server answers it from a socket of its own bound to that same port and connected
//! to the client's address, which from then on gets that client's datagrams (the kernel
//! prefers a connected socket to the unconnected listener).
//!
//! Datagrams carry no cookie, so a stream can be told only by its source address: the
//! listener hands a connect datagram to an iperf3 test only while that test waits for its
//! streams (`CREATE_STREAMS`), only from its control connection's address, and at most as many
//! as the test has streams. One test per client address waits at a time. Anything else on
//! the port is dropped unanswered, and the listener never waits on a test. Then the test runs
//! here, from `CREATE_STREAMS` to its results, with every limit of a TCP one. Not the data path
//! (`engine::udp::iperf3`) nor the parameter exchange (`server::iperf3`).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::Ctx;
use super::conn::HandshakeSlot;
use super::iperf3::{Figures, Measured, Plan, Watch, exchange_results, gone, refuse, send_state};
use super::metrics;
use crate::engine::udp::iperf3::{
    self, CONNECT_MSG, CONNECT_REPLY, Iperf3Counts, Iperf3Stream, OLD_CONNECT_MSG,
    OLD_CONNECT_REPLY,
};
use crate::proto::iperf3::{Params, State, ierr};
use crate::report::Role;

/// A client's stream socket that said hello, and the 4 bytes to answer it with.
pub(super) type Hello = (SocketAddr, [u8; 4]);

/// iperf3 tests waiting for their UDP streams, by client address.
#[derive(Debug, Default)]
pub(crate) struct Iperf3Udp {
    waiting: Mutex<HashMap<IpAddr, mpsc::Sender<Hello>>>,
}

impl Iperf3Udp {
    /// Hands a datagram's sender to the test waiting for streams from its address, if it is
    /// a connect datagram and there is one. Never blocks.
    fn route(&self, from: SocketAddr, datagram: &[u8]) {
        let Some(reply) = reply_to(datagram) else {
            return;
        };
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = waiting.get(&from.ip().to_canonical()) {
            // Full: more connect datagrams than the test has streams; the extra are dropped.
            let _ = tx.try_send((from, reply));
        }
    }

    /// Waits (until `deadline`) for no other test from `client` to be waiting for streams,
    /// then takes that place for `n` streams. `None` at the deadline.
    pub(super) async fn claim(
        self: &Arc<Self>,
        client: IpAddr,
        n: usize,
        deadline: Instant,
    ) -> Option<(Claim, mpsc::Receiver<Hello>)> {
        let client = client.to_canonical();
        loop {
            {
                let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
                if let std::collections::hash_map::Entry::Vacant(place) = waiting.entry(client) {
                    let (tx, rx) = mpsc::channel(n.max(1));
                    place.insert(tx);
                    return Some((
                        Claim {
                            udp: Arc::clone(self),
                            client,
                        },
                        rx,
                    ));
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A test's place in [`Iperf3Udp`], given up on drop.
pub(super) struct Claim {
    udp: Arc<Iperf3Udp>,
    client: IpAddr,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.udp
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.client);
    }
}

/// The answer to a connect datagram, in the byte order it came in; `None` for anything else.
fn reply_to(datagram: &[u8]) -> Option<[u8; 4]> {
    let b: [u8; 4] = datagram.try_into().ok()?;
    for (msg, reply) in [
        (CONNECT_MSG, CONNECT_REPLY),
        (OLD_CONNECT_MSG, OLD_CONNECT_REPLY),
    ] {
        if b == msg.to_le_bytes() {
            return Some(reply.to_le_bytes());
        }
        if b == msg.to_be_bytes() {
            return Some(reply.to_be_bytes());
        }
    }
    None
}

/// The UDP socket beside a TCP listener on `addr` (`dual_stack`: IPv4 too, on `[::]`).
/// `SO_REUSEPORT`, so that a stream's socket can take the same port (only processes of the
/// same user can join it, unlike with `SO_REUSEADDR` alone).
pub(super) fn listen(addr: SocketAddr, dual_stack: bool) -> io::Result<tokio::net::UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if dual_stack {
        sock.set_only_v6(false)?;
    }
    sock.set_reuse_port(true)?;
    sock.bind(&addr.into())?;
    sock.set_nonblocking(true)?;
    tokio::net::UdpSocket::from_std(UdpSocket::from(sock))
}

/// Reads the listener forever, routing connect datagrams to their tests.
pub(super) async fn serve(sock: tokio::net::UdpSocket, udp: Arc<Iperf3Udp>) {
    let mut buf = [0u8; 64];
    loop {
        match sock.recv_from(&mut buf).await {
            Ok((n, from)) => udp.route(from, &buf[..n.min(buf.len())]),
            // An ICMP error queued on the socket, or similar: nothing to do but go on,
            // without spinning should it repeat.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// A stream's socket: bound to `local` (the control connection's address and port) beside
/// the listener, connected to `client`, answered with `reply`.
pub(super) fn stream_socket(
    local: SocketAddr,
    (client, reply): Hello,
    window: Option<u64>,
) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    if local.is_ipv6() {
        sock.set_only_v6(false)?;
    }
    sock.set_reuse_port(true)?;
    if let Some(w) = window {
        let w = usize::try_from(w).unwrap_or(usize::MAX);
        let _ = sock.set_send_buffer_size(w);
        let _ = sock.set_recv_buffer_size(w);
    } else {
        let _ = sock.set_recv_buffer_size(crate::engine::udp::socket::DEFAULT_RCVBUF);
    }
    sock.bind(&local.into())?;
    sock.connect(&client.into())?;
    sock.send(&reply)?;
    Ok(sock.into())
}

/// Runs an iperf3 client's UDP test on `ctrl` from `CREATE_STREAMS`, its parameters checked
/// (`plan`) and its place among running tests taken. True when it ran to its results exchange.
/// In the order iperf3's states cross the wire: the streams' hellos ([`streams_said_hello`]),
/// the receivers, `TEST_START` and `TEST_RUNNING`, the senders ([`start`]), the window
/// ([`measure`]), the results.
pub(super) async fn run(
    mut ctrl: TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    params: &Params,
    ctx: &Arc<Ctx>,
    slot: HandshakeSlot,
) -> bool {
    let Some(sockets) = streams_said_hello(&mut ctrl, peer, plan, ctx).await else {
        return false;
    };
    drop(slot);
    let Some(streams) = start(&mut ctrl, peer, plan, sockets).await else {
        return false;
    };
    info!(
        %peer,
        receive = plan.to_receive,
        send = plan.to_send,
        client = super::iperf3::client_version(params),
        "iperf3 UDP test started"
    );
    let metrics = ctx
        .metrics
        .test_started(metrics::Protocol::Iperf3, metrics::Kind::Udp);
    watch_datagrams(&metrics, &streams);
    let measured = measure(&mut ctrl, peer, &streams, plan, ctx).await;
    let cpu = streams
        .into_iter()
        .map(|(_, h)| h.join())
        .fold((0.0, 0.0), |(u, s), c| (u + c.user_s, s + c.system_s));
    let completed = match measured {
        Some(m) => exchange_results(&mut ctrl, peer, plan, params, m, cpu).await,
        None => false,
    };
    metrics.finish(if completed { "completed" } else { "failed" }, None);
    completed
}

/// `CREATE_STREAMS`: waits for this address's turn (one UDP test of an address at a time
/// takes its hellos), tells the client, and opens a socket for each stream whose hello
/// arrives, in the order they came. `None` when they did not all come within the handshake
/// timeout or the client went away (logged, and refused where iperf3 reads a refusal).
async fn streams_said_hello(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    ctx: &Arc<Ctx>,
) -> Option<Vec<UdpSocket>> {
    let limit = ctx.limits.handshake_timeout;
    let n = plan.to_receive + plan.to_send;
    let local = ctrl.local_addr().ok()?;
    let claimed = tokio::select! {
        c = ctx.iperf3_udp.claim(peer.ip(), n, Instant::now() + limit) => c,
        why = gone(ctrl) => {
            info!(%peer, "dropped an iperf3 UDP client while it waited for its turn: {why}");
            return None;
        }
    };
    let Some((_claim, mut hellos)) = claimed else {
        info!(
            %peer,
            "refused an iperf3 UDP test: another test from the same address kept waiting for its \
             streams for {limit:?}"
        );
        refuse(ctrl, (ierr::NEW_TEST, libc::EBUSY, String::new())).await;
        return None;
    };
    send_state(ctrl, State::CreateStreams).await.ok()?;
    let mut sockets = Vec::with_capacity(n);
    let mut seen = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::now() + limit;
    while sockets.len() < n {
        let said = tokio::select! {
            h = tokio::time::timeout_at(deadline, hellos.recv()) => h,
            why = gone(ctrl) => {
                info!(%peer, "dropped an iperf3 UDP client while its streams said hello: {why}");
                return None;
            }
        };
        let Ok(Some(hello)) = said else {
            info!(
                %peer,
                "dropped an iperf3 client: {} of its {n} UDP streams said hello within {limit:?}",
                sockets.len()
            );
            refuse(ctrl, (ierr::ACCEPT_STREAM, libc::ETIMEDOUT, String::new())).await;
            return None;
        };
        // A hello repeated before its socket was connected.
        if seen.contains(&hello.0) {
            continue;
        }
        seen.push(hello.0);
        match stream_socket(local, hello, plan.socket.window) {
            Ok(s) => sockets.push(s),
            Err(e) => {
                warn!(%peer, "cannot open a UDP stream for an iperf3 client: {e}");
                refuse(ctrl, (ierr::ACCEPT_STREAM, libc::EIO, String::new())).await;
                return None;
            }
        }
    }
    Some(sockets)
}

/// Receivers first, in the order the client opened them, as iperf3's server gives roles;
/// then `TEST_START` and `TEST_RUNNING`, and the senders once the client is told the test
/// runs. `None` when a thread could not start (refused) or the client went away.
async fn start(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    mut sockets: Vec<UdpSocket>,
) -> Option<Vec<(Role, Iperf3Stream)>> {
    let senders = sockets.split_off(plan.to_receive);
    let mut streams = Vec::with_capacity(sockets.len() + senders.len());
    let refused = async |ctrl: &mut TcpStream, e: std::io::Error| {
        warn!(%peer, "cannot start a stream thread: {e}");
        refuse(ctrl, (ierr::NEW_TEST, libc::EIO, String::new())).await;
    };
    for s in sockets {
        match iperf3::spawn_receiver(s, plan.block_len, plan.counters_64bit) {
            Ok(h) => streams.push((Role::Receiver, h)),
            Err(e) => {
                refused(ctrl, e).await;
                return None;
            }
        }
    }
    send_state(ctrl, State::TestStart).await.ok()?;
    send_state(ctrl, State::TestRunning).await.ok()?;
    for s in senders {
        let at = (Instant::now(), None);
        match iperf3::spawn_sender(s, plan.block_len, plan.rate, at, plan.counters_64bit) {
            Ok(h) => streams.push((Role::Sender, h)),
            Err(e) => {
                refused(ctrl, e).await;
                return None;
            }
        }
    }
    Some(streams)
}

/// The test's bytes and datagrams, by direction, for the metrics endpoint while it runs. A
/// receiver's `packets` is its highest sequence number: what it got is that less the gaps.
fn watch_datagrams(metrics: &metrics::TestMetrics, streams: &[(Role, Iperf3Stream)]) {
    let shared: Vec<(Role, Arc<crate::engine::udp::iperf3::Iperf3Shared>)> = streams
        .iter()
        .map(|(r, h)| (*r, Arc::clone(&h.shared)))
        .collect();
    metrics.watch(move || {
        let mut out = Vec::new();
        for (d, role) in [
            (metrics::Direction::Received, Role::Receiver),
            (metrics::Direction::Sent, Role::Sender),
        ] {
            let mut m = metrics::Moved::default();
            for c in (shared.iter())
                .filter(|(r, _)| *r == role)
                .map(|(_, s)| s.counts())
            {
                m.bytes += c.bytes;
                m.datagrams += match role {
                    Role::Receiver => c.packets.saturating_sub(c.errors),
                    Role::Sender => c.packets,
                };
            }
            if m.datagrams > 0 {
                out.push((metrics::Transport::Udp, d, m));
            }
        }
        out
    });
}

/// Runs the test until the client's `TEST_END` ([`Watch`], as the TCP test's); `None` when it
/// ended any other way (logged).
async fn measure(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    streams: &[(Role, Iperf3Stream)],
    plan: &Plan,
    ctx: &Ctx,
) -> Option<Measured> {
    let snapshot =
        || -> Vec<Iperf3Counts> { streams.iter().map(|(_, h)| h.shared.counts()).collect() };
    let bytes = || -> u64 { streams.iter().map(|(_, h)| h.shared.bytes()).sum() };
    let mut base = vec![Iperf3Counts::default(); streams.len()];
    let watch = Watch {
        peer,
        what: "iperf3 UDP test",
        plan,
        ctx,
    };
    let window_start = watch
        .until_test_end(ctrl, bytes, || base = snapshot())
        .await?;
    let window = Instant::now().saturating_duration_since(window_start);
    // The senders' window ends here too: what they would send while the receivers drain is
    // outside it.
    for (role, h) in streams {
        if *role == Role::Sender {
            h.stop();
        }
    }
    // Every datagram a sender sent is in its count before the count is taken: it publishes
    // once per batch, and a count read mid-batch said 499 sent of the 500 the client received.
    let until = Instant::now() + Duration::from_millis(500);
    while streams
        .iter()
        .any(|(role, h)| *role == Role::Sender && !h.shared.finished())
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let at_end = snapshot();
    // The client sent its last datagrams before TEST_END: let the receivers read what is
    // queued for them (until their counts stand still), as iperf3's server has read them by
    // the time it reads TEST_END. What is still on the wire is lost, as with iperf3.
    if plan.to_receive > 0 {
        let until = Instant::now() + Duration::from_millis(250);
        let mut last = bytes();
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = bytes();
            if now == last || Instant::now() >= until {
                break;
            }
            last = now;
        }
    }
    let streams = streams
        .iter()
        .zip(snapshot().iter().zip(&at_end).zip(&base))
        .map(|((role, _), ((drained, at_end), c0))| {
            let c = match role {
                Role::Sender => at_end,
                Role::Receiver => drained,
            };
            (role, c, c0)
        })
        .map(|(role, c, c0)| Figures {
            role: *role,
            bytes: c.bytes.saturating_sub(c0.bytes),
            retransmits: match role {
                Role::Sender => 0,
                Role::Receiver => -1,
            },
            jitter: c.jitter,
            errors: c.errors,
            omitted_errors: c0.errors,
            packets: c.packets,
            omitted_packets: c0.packets,
        })
        .collect();
    Some(Measured { window, streams })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_datagrams_are_answered_in_their_byte_order() {
        assert_eq!(
            reply_to(&[0x39, 0x38, 0x37, 0x36]),
            Some([0x36, 0x37, 0x38, 0x39])
        );
        assert_eq!(
            reply_to(&[0x36, 0x37, 0x38, 0x39]),
            Some([0x39, 0x38, 0x37, 0x36])
        );
        assert_eq!(
            reply_to(&123_456_789u32.to_le_bytes()),
            Some(987_654_321u32.to_le_bytes())
        );
        assert_eq!(reply_to(&[1, 2, 3, 4]), None);
        assert_eq!(reply_to(&[0x39, 0x38, 0x37, 0x36, 0]), None);
    }
}
