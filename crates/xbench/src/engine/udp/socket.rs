//! UDP data sockets: opened, sized and switched to the receive options the accounting needs
//! (`SO_RXQ_OVFL` for the kernel's drop counter, `SO_TIMESTAMPNS` for arrival times taken by
//! the kernel, not by a thread that may be late to read them).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// Datagrams per `sendmmsg`/`recvmmsg` call.
pub(crate) const BATCH: usize = 64;

/// How long a receiver blocks before it looks at its stop flag.
pub(crate) const RECV_TIMEOUT: Duration = Duration::from_millis(20);

/// A UDP socket bound to `local` (port 0 for any), blocking.
pub(crate) fn bind(local: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    if local.is_ipv6() {
        let _ = s.set_only_v6(false);
    }
    s.bind(&local.into())?;
    Ok(s.into())
}

/// Sets `-w` as both buffers when asked, and warns when the kernel granted less.
pub(crate) fn size_buffers(sock: &UdpSocket, window: Option<u64>, warnings: &mut Vec<String>) {
    let Some(w) = window else { return };
    let s = SockRef::from(sock);
    let asked = usize::try_from(w).unwrap_or(usize::MAX);
    let _ = s.set_send_buffer_size(asked);
    let _ = s.set_recv_buffer_size(asked);
    // Linux reports double what it grants; half of it is what a request got.
    let granted = s.recv_buffer_size().unwrap_or(0) / 2;
    if granted < asked {
        warnings.push(format!(
            "asked for a {w}-byte UDP receive buffer, the kernel gave {granted} \
             (net.core.rmem_max)"
        ));
    }
}

/// Receive buffer a UDP receiver asks for when `-w` does not say: the kernel's default
/// (about 208 KiB) overflows within a quarter of a millisecond at 10 Gbit/s, whenever the
/// receiving thread is descheduled. The kernel caps it at `net.core.rmem_max` without a word.
pub(crate) const DEFAULT_RCVBUF: usize = 4 << 20;

/// Receive buffer a UDP data receiver forces past `net.core.rmem_max` when the process may
/// (`SO_RCVBUFFORCE`, CAP_NET_ADMIN), as the bare GSO/GRO loop `benches/udp_reference.c` does.
/// Unpaced on loopback, 1,400-byte datagrams arrive at 9 GB/s: [`DEFAULT_RCVBUF`] is half a
/// millisecond of them, less than one scheduler slice of another task on the receiver's core,
/// and every such slice lost datagrams (0.7-40 % of them, by how busy the machine was) where
/// the loop with 64 MiB lost none. The kernel charges the buffer only as it fills, and
/// `net.ipv4.udp_mem` still caps what all UDP sockets together may hold.
pub(crate) const FORCED_RCVBUF: usize = 64 << 20;

/// Turns on the kernel's drop counter and arrival timestamps, and the receive timeout; without
/// `-w` (`window`), forces [`FORCED_RCVBUF`] where allowed, else asks for [`DEFAULT_RCVBUF`].
pub(crate) fn prepare_receiver(sock: &UdpSocket, window: Option<u64>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    if window.is_none() && setsockopt_int(fd, libc::SO_RCVBUFFORCE, FORCED_RCVBUF as _).is_err() {
        // Not privileged: what net.core.rmem_max allows.
        let _ = SockRef::from(sock).set_recv_buffer_size(DEFAULT_RCVBUF);
    }
    for opt in [libc::SO_RXQ_OVFL, libc::SO_TIMESTAMPNS] {
        setsockopt_int(fd, opt, 1)?;
    }
    sock.set_read_timeout(Some(RECV_TIMEOUT))
}

/// Sets the `SOL_SOCKET` option `opt` of socket `fd` to `value`.
fn setsockopt_int(fd: std::os::fd::RawFd, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    crate::engine::sockopt::set_int(fd, libc::SOL_SOCKET, opt, value)
}

/// What a UDP stream's socket reports: the buffers asked for and granted (no MSS, no
/// congestion control: `udp`).
pub(crate) fn report(sock: &UdpSocket, window: Option<u64>) -> crate::report::SocketReport {
    let s = SockRef::from(sock);
    crate::report::SocketReport {
        sndbuf_requested: window,
        sndbuf_granted: s.send_buffer_size().map_or(0, |b| b as u64),
        rcvbuf_requested: window,
        rcvbuf_granted: s.recv_buffer_size().map_or(0, |b| b as u64),
        mss: 0,
        congestion: "udp".into(),
        nodelay: false,
    }
}
