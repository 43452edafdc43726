//! The kernel's own view of a TCP connection (`getsockopt(TCP_INFO)`), the facts that explain a
//! throughput figure: congestion window, smoothed RTT, retransmits, and how long the sender was
//! held back by the receiver's window or its own send buffer.
//!
//! The struct mirrors `struct tcp_info` from Linux's `include/uapi/linux/tcp.h` up to
//! `tcpi_snd_wnd` (Linux 5.4). The kernel copies as much as both sides know and reports the
//! length, so fields newer than the running kernel come back as `None` instead of zeros that
//! would read as real measurements. Not for: deciding what the numbers mean (see `engine`).

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;

/// `struct tcp_info` as laid out by Linux.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
}

/// A snapshot of one connection's TCP state. Times are microseconds, sizes bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    /// Sender MSS in bytes.
    pub snd_mss: u32,
    /// Path MTU.
    pub pmtu: u32,
    /// Smoothed RTT, µs.
    pub srtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Congestion window in segments.
    pub snd_cwnd: u32,
    /// Slow-start threshold in segments (the kernel reports "infinite" as a huge number).
    pub snd_ssthresh: u32,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Segments in flight not yet acknowledged.
    pub unacked: u32,
    /// Receive-side estimate of RTT, µs (0 until measured).
    pub rcv_rtt_us: u32,
    /// Pacing rate in bytes per second (Linux 4.0+).
    pub pacing_rate: Option<u64>,
    /// Bytes acknowledged by the peer (Linux 4.1+).
    pub bytes_acked: Option<u64>,
    /// Bytes received in order (Linux 4.1+).
    pub bytes_received: Option<u64>,
    /// Bytes written by the application and not yet sent (Linux 4.6+).
    pub notsent_bytes: Option<u32>,
    /// Minimum RTT seen, µs (Linux 4.6+).
    pub min_rtt_us: Option<u32>,
    /// Latest delivery-rate estimate, bytes per second (Linux 4.9+).
    pub delivery_rate: Option<u64>,
    /// Time with data outstanding, µs (Linux 4.10+). Includes the two limited times below.
    pub busy_time_us: Option<u64>,
    /// Time the peer's receive window stopped the sender, µs (Linux 4.10+).
    pub rwnd_limited_us: Option<u64>,
    /// Time the local send buffer stopped the sender, µs (Linux 4.10+).
    pub sndbuf_limited_us: Option<u64>,
    /// Bytes sent including retransmissions (Linux 4.19+).
    pub bytes_sent: Option<u64>,
    /// Bytes retransmitted (Linux 4.19+).
    pub bytes_retrans: Option<u64>,
    /// The peer's advertised receive window after scaling, bytes (Linux 5.4+).
    pub snd_wnd: Option<u32>,
}

impl TcpInfo {
    /// Congestion window in bytes: segments × sender MSS.
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd) * u64::from(self.snd_mss)
    }
}

/// Reads `TCP_INFO` from a connected TCP socket.
pub fn read(socket: &impl AsRawFd) -> io::Result<TcpInfo> {
    let mut raw = RawTcpInfo::default();
    let mut len = size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: `raw` is a plain-old-data struct of `len` bytes that outlives the call; the kernel
    // writes at most `len` bytes into it and stores the number written in `len`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut raw).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(from_raw(&raw, len as usize))
}

/// Keeps the fields the kernel actually filled in: those ending within `len` bytes.
fn from_raw(r: &RawTcpInfo, len: usize) -> TcpInfo {
    let has = |end: usize| end <= len;
    macro_rules! field {
        ($f:ident) => {
            has(offset_of!(RawTcpInfo, $f) + size_of_val(&r.$f)).then_some(r.$f)
        };
    }
    TcpInfo {
        snd_mss: r.snd_mss,
        pmtu: r.pmtu,
        srtt_us: r.rtt,
        rttvar_us: r.rttvar,
        snd_cwnd: r.snd_cwnd,
        snd_ssthresh: r.snd_ssthresh,
        total_retrans: r.total_retrans,
        unacked: r.unacked,
        rcv_rtt_us: r.rcv_rtt,
        pacing_rate: field!(pacing_rate),
        bytes_acked: field!(bytes_acked),
        bytes_received: field!(bytes_received),
        notsent_bytes: field!(notsent_bytes),
        min_rtt_us: field!(min_rtt),
        delivery_rate: field!(delivery_rate),
        busy_time_us: field!(busy_time),
        rwnd_limited_us: field!(rwnd_limited),
        sndbuf_limited_us: field!(sndbuf_limited),
        bytes_sent: field!(bytes_sent),
        bytes_retrans: field!(bytes_retrans),
        snd_wnd: field!(snd_wnd),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn layout_matches_linux_uapi() {
        // Offsets of struct tcp_info in include/uapi/linux/tcp.h; a mismatch here would make
        // every later field garbage.
        assert_eq!(offset_of!(RawTcpInfo, rto), 8);
        assert_eq!(offset_of!(RawTcpInfo, total_retrans), 100);
        assert_eq!(offset_of!(RawTcpInfo, pacing_rate), 104);
        assert_eq!(offset_of!(RawTcpInfo, busy_time), 168);
        assert_eq!(offset_of!(RawTcpInfo, snd_wnd), 228);
        assert_eq!(size_of::<RawTcpInfo>(), 232);
    }

    #[test]
    fn short_kernel_answers_hide_newer_fields() {
        let raw = RawTcpInfo {
            busy_time: 7,
            snd_wnd: 9,
            ..Default::default()
        };
        let old = from_raw(&raw, offset_of!(RawTcpInfo, busy_time));
        assert_eq!(old.busy_time_us, None);
        assert_eq!(old.snd_wnd, None);
        let new = from_raw(&raw, size_of::<RawTcpInfo>());
        assert_eq!(new.busy_time_us, Some(7));
        assert_eq!(new.snd_wnd, Some(9));
    }

    #[test]
    fn reads_a_live_loopback_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[1u8; 100_000]).unwrap();
        let mut buf = vec![0u8; 100_000];
        s.read_exact(&mut buf).unwrap();
        let info = read(&c).unwrap();
        assert!(info.snd_mss > 0, "{info:?}");
        assert!(info.snd_cwnd > 0);
        assert!(info.bytes_acked.unwrap_or(100_000) <= 100_001);
        assert!(
            info.busy_time_us.is_some(),
            "this kernel is older than 4.10"
        );
    }
}
