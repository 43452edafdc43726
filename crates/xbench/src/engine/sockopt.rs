//! Socket options for data connections, applied with socket2, and a report of what the kernel
//! actually granted.
//!
//! Linux doubles a requested buffer size for bookkeeping and silently caps it at
//! `net.core.{w,r}mem_max`; a user who asked for a 16 MiB window and got 4 MiB must be told, or
//! the bandwidth-delay ceiling they compute is wrong. Options that shape the handshake (buffer
//! sizes, which set the window scale, and MSS) are applied before `connect()` on the client.

use std::io;

use socket2::SockRef;

use crate::Error;
use crate::config::SocketOptions;
use crate::report::SocketReport;

/// Sets the integer socket option `opt` at `level` on `fd`: the options socket2 has no
/// method for (UDP GRO and GSO, `SO_RCVBUFFORCE`, `TCP_DEFER_ACCEPT`), in one unsafe block.
pub(crate) fn set_int(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a live c_int of the size given; a bad `fd` is an error
    // return, not undefined behaviour.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Applies `opts` to a socket. `warnings` collects kernel caps worth telling the user about.
pub(crate) fn apply(
    sock: SockRef<'_>,
    opts: &SocketOptions,
    warnings: &mut Vec<String>,
) -> Result<(), Error> {
    if let Some(w) = opts.window {
        let w_usize = usize::try_from(w).unwrap_or(usize::MAX);
        sock.set_send_buffer_size(w_usize)
            .map_err(|e| sockopt_err("SO_SNDBUF", w.to_string(), e))?;
        sock.set_recv_buffer_size(w_usize)
            .map_err(|e| sockopt_err("SO_RCVBUF", w.to_string(), e))?;
        let snd = sock.send_buffer_size().unwrap_or(0) as u64;
        let rcv = sock.recv_buffer_size().unwrap_or(0) as u64;
        // The kernel reports twice what it honours; less than 2× means the sysctl cap bit.
        if snd < 2 * w {
            warnings.push(format!(
                "asked for a {w}-byte send buffer, the kernel granted {} (raise net.core.wmem_max)",
                snd / 2
            ));
        }
        if rcv < 2 * w {
            warnings.push(format!(
                "asked for a {w}-byte receive buffer, the kernel granted {} (raise net.core.rmem_max)",
                rcv / 2
            ));
        }
    }
    if let Some(mss) = opts.mss {
        sock.set_tcp_mss(mss)
            .map_err(|e| sockopt_err("TCP_MAXSEG", mss.to_string(), e))?;
    }
    if opts.nodelay {
        sock.set_tcp_nodelay(true)
            .map_err(|e| sockopt_err("TCP_NODELAY", "1".into(), e))?;
    }
    if let Some(cc) = &opts.congestion {
        sock.set_tcp_congestion(cc.as_bytes())
            .map_err(|e| Error::SocketOption {
                option: "TCP_CONGESTION",
                value: cc.clone(),
                hint: " (is it listed in /proc/sys/net/ipv4/tcp_available_congestion_control? \
                   try `modprobe tcp_<name>`)",
                cause: e,
            })?;
    }
    Ok(())
}

/// What the kernel says a socket's settings are now.
pub(crate) fn report(sock: SockRef<'_>, opts: &SocketOptions) -> SocketReport {
    SocketReport {
        sndbuf_requested: opts.window,
        sndbuf_granted: sock.send_buffer_size().unwrap_or(0) as u64,
        rcvbuf_requested: opts.window,
        rcvbuf_granted: sock.recv_buffer_size().unwrap_or(0) as u64,
        mss: sock.tcp_mss().unwrap_or(0),
        congestion: sock
            .tcp_congestion()
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .to_owned()
            })
            .unwrap_or_default(),
        nodelay: sock.tcp_nodelay().unwrap_or(false),
    }
}

/// Caps a socket's sending rate (bits per second; `None` lifts the cap) with
/// `SO_MAX_PACING_RATE`: TCP paces its segments to the rate (internal pacing since Linux 4.13,
/// no `fq` qdisc needed), which is how `-b` and the server's `--max-send-rate` are enforced
/// without sleeping in the send loop. Failure (a kernel without it) leaves the socket unpaced,
/// so callers that promise a rate must not ignore it.
pub(crate) fn set_max_pacing_rate(
    sock: &impl std::os::fd::AsRawFd,
    bits_per_second: Option<u64>,
) -> io::Result<()> {
    let bytes: u64 = bits_per_second.map_or(u64::MAX, |b| (b / 8).max(1));
    // SAFETY: setsockopt reads `size_of::<u64>()` bytes from a live u64; the kernel takes a
    // 64-bit rate since 4.20 and truncates to 32 bits on older ones.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MAX_PACING_RATE,
            (&raw const bytes).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// [`set_max_pacing_rate`] for a `-b` the user asked for: its failure is an error naming the
/// option, since an unpaced test would report a rate nobody asked for.
///
/// A paced socket also gets a `TCP_NOTSENT_LOWAT` of [`PACED_QUEUE`] of data at the rate: the
/// kernel takes more from the sender only when less than that waits unsent. Without it the
/// send buffer (megabytes, autotuned) fills at once and drains at the paced rate: at 1 Mbit/s
/// 4 MB is half a minute of data queued at the end mark, which the test would wait for after
/// its end. Best effort: without it the queue is only longer.
pub(crate) fn pace(
    sock: &impl std::os::fd::AsRawFd,
    bits_per_second: Option<u64>,
) -> Result<(), Error> {
    match (set_max_pacing_rate(sock, bits_per_second), bits_per_second) {
        (Err(cause), Some(b)) => Err(Error::SocketOption {
            option: "SO_MAX_PACING_RATE",
            value: format!("{b} bit/s"),
            hint: " (-b relies on TCP's own pacing, Linux 4.13 or later)",
            cause,
        }),
        (Ok(()), Some(b)) => {
            let _ = set_notsent_lowat(sock, paced_queue_bytes(b));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// How much unsent data a paced sender keeps queued in the kernel: enough to ride out a late
/// wake-up of its thread on a loaded machine, little enough to drain soon after the end.
pub(crate) const PACED_QUEUE: std::time::Duration = std::time::Duration::from_millis(50);

/// [`PACED_QUEUE`] at `bits_per_second`, at least 64 KiB (a loopback segment), at most 4 MiB.
pub(crate) fn paced_queue_bytes(bits_per_second: u64) -> u32 {
    let bytes = u128::from(bits_per_second / 8) * PACED_QUEUE.as_millis() / 1000;
    bytes.clamp(64 << 10, 4 << 20) as u32
}

/// `TCP_NOTSENT_LOWAT`: a blocking `send` waits while at least `bytes` are queued unsent.
fn set_notsent_lowat(sock: &impl std::os::fd::AsRawFd, bytes: u32) -> io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<u32>()` bytes from a live u32.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&raw const bytes).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SO_MAX_PACING_RATE` from `asm-generic/socket.h` (x86-64, arm64 and most others); libc does
/// not export it.
const SO_MAX_PACING_RATE: libc::c_int = 47;

fn sockopt_err(option: &'static str, value: String, cause: io::Error) -> Error {
    Error::SocketOption {
        option,
        value,
        hint: "",
        cause,
    }
}

/// `IP_BIND_ADDRESS_NO_PORT`: `bind()` takes the address only and leaves the port to
/// `connect()`, which picks it by 4-tuple. Without it `bind()` would pick a port free on that
/// address for every destination, and one range would hold fewer flows than it can. Best
/// effort: without it (a kernel before 4.2) `bind()` still works, picking the port itself.
pub(crate) fn bind_address_only(sock: &socket2::Socket) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option value of the size given.
    let _ = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
