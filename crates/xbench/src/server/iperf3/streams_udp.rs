//! iperf3 UDP tests waiting for their streams, which only their address tells apart: the
//! UDP listener on the server's port, what a stream's first datagram claims, and the socket
//! each stream gets. Part of what the server's sessions share, apart from the tests so that
//! the shared context holds it without depending on them.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::mpsc;

use crate::engine::udp::iperf3::{CONNECT_MSG, CONNECT_REPLY, OLD_CONNECT_MSG, OLD_CONNECT_REPLY};

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
pub(super) fn reply_to(datagram: &[u8]) -> Option<[u8; 4]> {
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
pub(crate) fn listen(addr: SocketAddr, dual_stack: bool) -> io::Result<tokio::net::UdpSocket> {
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
pub(crate) async fn serve(sock: tokio::net::UdpSocket, udp: Arc<Iperf3Udp>) {
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
