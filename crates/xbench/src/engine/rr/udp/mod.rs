//! UDP request/response workers (`--rr -u`, netperf's UDP_RR): each flow one connected UDP
//! socket, each request and each response one datagram.
//!
//! A datagram starts with the UDP tests' header ([`wire::Header`]: the flow's token, the
//! request's sequence number, its send time); the server copies a request's header into its
//! response, so the client matches responses by sequence number. A request unanswered after
//! the test's timeout is lost and its flow goes on with the next sequence number: loss never
//! hangs a flow. The workers speak the same [`Control`](super::Control) and
//! [`Report`](super::Report) protocol as the TCP ones, so the controllers are shared. Not the
//! greeting that proves each socket's address (`client::udp`, `server::udp`).

pub(crate) mod client;
pub(crate) mod server;

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use crate::engine::udp::wire::{self, HEADER_LEN};

/// One flow's socket, connected to the other end's, and the token its datagrams carry.
#[derive(Debug)]
pub(crate) struct UdpFlow {
    pub(crate) id: u16,
    pub(crate) sock: UdpSocket,
    pub(crate) token: u64,
}

/// Sizes a flow's socket: `-w` when given (with a warning when the kernel grants less), else
/// a receive buffer of [`DEFAULT_RCVBUF`](crate::engine::udp::socket::DEFAULT_RCVBUF): a
/// `--burst` of large responses arrives at once, and the kernel's 208 KiB default would drop
/// them as loss that is the receiver's, not the path's.
pub(crate) fn size_socket(sock: &UdpSocket, window: Option<u64>, warnings: &mut Vec<String>) {
    use crate::engine::udp::socket;
    socket::size_buffers(sock, window, warnings);
    if window.is_none() {
        let _ = socket2::SockRef::from(sock).set_recv_buffer_size(socket::DEFAULT_RCVBUF);
    }
}

/// What one `recv` brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Nothing waiting (or the receive timeout passed).
    Nothing,
    /// A datagram of `len` bytes (its real length, however long) and its header, if it is
    /// long enough to hold one.
    Datagram {
        len: usize,
        header: Option<wire::Header>,
    },
    /// A late copy of the socket's opening (a greeting, a path check): neither answered nor
    /// counted, not even as ignored.
    Handshake,
}

/// Receives one datagram without copying more than its header (`MSG_TRUNC` gives the real
/// length). `flags` adds `MSG_DONTWAIT` for sockets driven by epoll.
pub(crate) fn recv_header(sock: &UdpSocket, flags: i32) -> io::Result<Arrival> {
    let mut buf = [0u8; HEADER_LEN];
    // SAFETY: `buf` is live and writable for `buf.len()` bytes during the call; with
    // MSG_TRUNC the kernel still writes at most that many and returns the datagram's length.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC | flags,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::TimedOut => {
                Ok(Arrival::Nothing)
            }
            _ => Err(e),
        };
    }
    let len = n as usize;
    if crate::proto::path::is_handshake_datagram(&buf[..len.min(HEADER_LEN)], len) {
        return Ok(Arrival::Handshake);
    }
    let header = (len >= HEADER_LEN)
        .then(|| wire::Header::read(&buf))
        .flatten();
    Ok(Arrival::Datagram { len, header })
}

/// Sends `buf` as one datagram; `Ok(false)` when the socket buffer is full.
pub(crate) fn send(sock: &UdpSocket, buf: &[u8], flags: i32) -> io::Result<bool> {
    loop {
        // SAFETY: `buf` is live and readable for its length during the call.
        let n = unsafe { libc::send(sock.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Sequence numbers a server has answered, the newest [`REPLAY_WINDOW`] of them: a request
/// is answered once, and one older than the window not at all, so a copied or replayed
/// request gets no response (IPsec's anti-replay window, RFC 4303 §3.4.3).
#[derive(Debug, Clone)]
pub(crate) struct ReplayWindow {
    highest: Option<u64>,
    bits: [u64; REPLAY_WINDOW as usize / 64],
}

/// How far behind the newest request an older one may arrive and still be answered: more than
/// the 1,024 a flow may have in flight (`--burst`).
pub(crate) const REPLAY_WINDOW: u64 = 2048;

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            highest: None,
            bits: [0; REPLAY_WINDOW as usize / 64],
        }
    }
}

impl ReplayWindow {
    /// Whether `seq` is new (and now marks it answered).
    pub(crate) fn admit(&mut self, seq: u64) -> bool {
        match self.highest {
            Some(h) if seq <= h => {
                if h - seq >= REPLAY_WINDOW || self.bit(seq) {
                    return false;
                }
            }
            Some(h) => {
                let ahead = seq - h;
                if ahead >= REPLAY_WINDOW {
                    self.bits = [0; REPLAY_WINDOW as usize / 64];
                } else {
                    for s in h + 1..seq {
                        self.clear(s);
                    }
                }
                self.highest = Some(seq);
            }
            None => self.highest = Some(seq),
        }
        self.set(seq);
        true
    }

    fn slot(seq: u64) -> (usize, u64) {
        let i = seq % REPLAY_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn bit(&self, seq: u64) -> bool {
        let (w, m) = Self::slot(seq);
        self.bits[w] & m != 0
    }

    fn set(&mut self, seq: u64) {
        let (w, m) = Self::slot(seq);
        self.bits[w] |= m;
    }

    fn clear(&mut self, seq: u64) {
        let (w, m) = Self::slot(seq);
        self.bits[w] &= !m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With thousands of `--rr -u` flows the client's greetings, repeated until `Ready`,
    /// reached the server's workers after their socket was the test's, and the report said the
    /// server had ignored thousands of strangers' datagrams (6,000 for 2,000 flows).
    #[test]
    fn a_late_greeting_or_path_check_is_handshake_not_a_stranger() {
        use crate::proto::{Cookie, DataHello, PathCheck};
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let greeting = DataHello::new(Cookie([1; 16]), 3, 0, None).greeting();
        tx.send(&greeting).unwrap();
        tx.send(&PathCheck::Response([2; 16]).encode()).unwrap();
        tx.send(&PathCheck::Challenge([2; 16]).encode()).unwrap();
        tx.send(&[7u8; 49]).unwrap();
        for _ in 0..3 {
            assert_eq!(recv_header(&rx, 0).unwrap(), Arrival::Handshake);
        }
        assert!(matches!(
            recv_header(&rx, 0).unwrap(),
            Arrival::Datagram {
                len: 49,
                header: Some(_)
            }
        ));
    }

    #[test]
    fn a_request_is_answered_once_and_not_when_older_than_the_window() {
        let mut w = ReplayWindow::default();
        assert!(w.admit(5));
        assert!(!w.admit(5), "a copy is not answered");
        assert!(w.admit(3), "reordered, within the window");
        assert!(!w.admit(3));
        assert!(w.admit(5 + REPLAY_WINDOW));
        assert!(!w.admit(5), "older than the window");
        assert!(w.admit(4 + REPLAY_WINDOW) && w.admit(7 + REPLAY_WINDOW));
        // Bits reused as the window slides start clear: 6 + W is new, though 6 was not.
        assert!(w.admit(6 + REPLAY_WINDOW) && !w.admit(6 + REPLAY_WINDOW));
        assert!(w.admit(u64::MAX) && !w.admit(u64::MAX));
    }
}
