//! iperf3's UDP data path, for iperf3 tests at either end: datagrams that open with iperf3's
//! header (the sender's wall-clock seconds and microseconds, 4 bytes each, then a sequence
//! number of 4 bytes, or 8 with `--udp-counters-64bit`; all big-endian, the first number 1),
//! received and accounted as iperf3 does (loss from sequence gaps, a late datagram taking one
//! back, RFC 3550 jitter), or sent evenly paced.
//!
//! One blocking thread per stream on a socket connected to the other end, publishing
//! cumulative counters; the iperf3 session (the server's, or `xbench client --iperf3`'s) takes
//! differences at `-O`. Not xbench's own UDP datagrams ([`super::wire`]) nor how the sockets
//! are found (`server::iperf3_udp`, `client::iperf3::udp`).

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::pacer::Pacer;
use super::socket::RECV_TIMEOUT;
use super::stats::RecvStats;
use crate::engine::cpu::thread_cpu;
use crate::report::CpuUsage;

/// iperf3 3.12's `UDP_CONNECT_MSG`, written in the client's byte order.
pub(crate) const CONNECT_MSG: u32 = 0x3637_3839;
/// iperf3 3.12's `UDP_CONNECT_REPLY`.
pub(crate) const CONNECT_REPLY: u32 = 0x3938_3736;
/// What iperf3 before 3.11 sends and answers (`123456789`, `987654321`).
pub(crate) const OLD_CONNECT_MSG: u32 = 123_456_789;
pub(crate) const OLD_CONNECT_REPLY: u32 = 987_654_321;

/// Bytes of iperf3's header with 32-bit sequence numbers; 4 more with 64-bit ones.
pub(crate) const HEADER_LEN: usize = 12;

/// What a stream has moved so far, cumulative from its start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Iperf3Counts {
    /// Payload bytes sent or received.
    pub(crate) bytes: u64,
    /// A sender's datagrams; a receiver's highest sequence number (iperf3's `packet_count`).
    pub(crate) packets: u64,
    /// A receiver's lost datagrams (gaps not filled since).
    pub(crate) errors: u64,
    /// A receiver's datagrams that came after a higher number.
    pub(crate) out_of_order: u64,
    /// RFC 3550 jitter, seconds.
    pub(crate) jitter: f64,
    /// Datagrams not iperf3's (too short for its header): never counted otherwise.
    pub(crate) ignored: u64,
    /// A sender's datagram slots skipped, not sent: after it fell behind its schedule (see
    /// [`Pacer`]), or for a full socket buffer.
    pub(crate) slipped: u64,
}

/// What a stream thread and its session share.
#[derive(Debug, Default)]
pub(crate) struct Iperf3Shared {
    stop: AtomicBool,
    /// Bytes so far, readable without the lock (the session's idle check).
    bytes: AtomicU64,
    counts: Mutex<Iperf3Counts>,
    /// The thread has stopped and its counts are final: a sender publishes once per batch, so
    /// counts read while it was mid-batch missed datagrams already on their way.
    finished: AtomicBool,
}

impl Iperf3Shared {
    /// Whether the thread has stopped with its last counts published.
    pub(crate) fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    pub(crate) fn counts(&self) -> Iperf3Counts {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn publish(&self, c: &Iperf3Counts) {
        self.bytes.store(c.bytes, Ordering::Relaxed);
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner) = *c;
    }
}

/// One running stream; stopped and joined on drop.
#[derive(Debug)]
pub(crate) struct Iperf3Stream {
    pub(crate) shared: Arc<Iperf3Shared>,
    thread: Option<JoinHandle<CpuUsage>>,
}

impl Iperf3Stream {
    /// Asks the thread to stop; it notices within one receive timeout or one send batch.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Whether the thread has ended (a sender past its last datagram).
    pub(crate) fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the thread and waits for it: its CPU time.
    pub(crate) fn join(mut self) -> CpuUsage {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Iperf3Stream {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts a thread receiving iperf3 datagrams of at most `len` bytes on `sock` (connected).
/// `counters_64bit`: the client's `--udp-counters-64bit`.
pub(crate) fn spawn_receiver(
    sock: UdpSocket,
    len: usize,
    counters_64bit: bool,
) -> std::io::Result<Iperf3Stream> {
    sock.set_read_timeout(Some(RECV_TIMEOUT))?;
    let shared = Arc::new(Iperf3Shared::default());
    let s = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("iperf3-udp-recv".into())
        .spawn(move || {
            let cpu0 = thread_cpu();
            receive(&sock, len, counters_64bit, &s);
            cpu_since(cpu0)
        })?;
    Ok(Iperf3Stream {
        shared,
        thread: Some(thread),
    })
}

/// Starts a thread sending `len`-byte iperf3 datagrams on `sock` (connected) at
/// `bits_per_second` of payload (`None`: as fast as the socket takes them) on a schedule
/// from `start`, until stopped or until `end`, the end mark, if it has one. A sender that
/// keeps its schedule and end mark itself covers the window exactly, however late its thread
/// starts or its session wakes (on a loaded machine, tens to hundreds of milliseconds).
pub(crate) fn spawn_sender(
    sock: UdpSocket,
    len: usize,
    bits_per_second: Option<u64>,
    (start, end): (Instant, Option<Instant>),
    counters_64bit: bool,
) -> std::io::Result<Iperf3Stream> {
    sock.set_write_timeout(Some(RECV_TIMEOUT))?;
    let shared = Arc::new(Iperf3Shared::default());
    let s = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("iperf3-udp-send".into())
        .spawn(move || {
            let cpu0 = thread_cpu();
            send(
                &sock,
                len,
                bits_per_second,
                (start, end),
                counters_64bit,
                &s,
            );
            cpu_since(cpu0)
        })?;
    Ok(Iperf3Stream {
        shared,
        thread: Some(thread),
    })
}

/// iperf3's header for datagram `seq` sent at `now`.
pub(crate) fn write_header(buf: &mut [u8], now: SystemTime, seq: u64, counters_64bit: bool) {
    let t = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    // iperf3 writes the seconds as a u32: they wrap in 2106 at both ends alike.
    buf[0..4].copy_from_slice(&(t.as_secs() as u32).to_be_bytes());
    buf[4..8].copy_from_slice(&t.subsec_micros().to_be_bytes());
    if counters_64bit {
        buf[8..16].copy_from_slice(&seq.to_be_bytes());
    } else {
        buf[8..12].copy_from_slice(&(seq as u32).to_be_bytes());
    }
}

/// The send time (nanoseconds since the epoch) and sequence number of an iperf3 datagram;
/// `None` when it is too short. The width of the number is told by the datagram's length as
/// much as the parameters: a 64-bit one needs 16 bytes.
pub(crate) fn read_header(buf: &[u8], counters_64bit: bool) -> Option<(u64, u64)> {
    let word =
        |i: usize| -> Option<u32> { Some(u32::from_be_bytes(buf.get(i..i + 4)?.try_into().ok()?)) };
    let sent_ns = u64::from(word(0)?) * 1_000_000_000 + u64::from(word(4)?) * 1_000;
    let seq = if counters_64bit {
        u64::from_be_bytes(buf.get(8..16)?.try_into().ok()?)
    } else {
        u64::from(word(8)?)
    };
    Some((sent_ns, seq))
}

/// This thread's CPU time since `cpu0`.
fn cpu_since(cpu0: CpuUsage) -> CpuUsage {
    let now = thread_cpu();
    CpuUsage {
        user_s: now.user_s - cpu0.user_s,
        system_s: now.system_s - cpu0.system_s,
    }
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn receive(sock: &UdpSocket, len: usize, counters_64bit: bool, shared: &Iperf3Shared) {
    let mut buf = vec![0u8; len.max(HEADER_LEN + 4)];
    let mut stats = RecvStats::default();
    let mut c = Iperf3Counts::default();
    while !shared.stop.load(Ordering::Relaxed) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            // ECONNREFUSED after the client closed, or a real error: keep listening until
            // stopped, but do not spin.
            Err(_) => {
                std::thread::sleep(RECV_TIMEOUT);
                continue;
            }
        };
        let Some((sent_ns, seq)) = read_header(&buf[..n], counters_64bit) else {
            c.ignored += 1;
            shared.publish(&c);
            continue;
        };
        // iperf3 numbers from 1; the accounting from 0.
        stats.on_datagram(seq.saturating_sub(1), sent_ns, wall_ns(), n, false);
        let s = stats.counts();
        c.bytes += n as u64;
        c.errors = s.lost;
        c.out_of_order = s.out_of_order;
        // Unique datagrams received and those lost: the highest number seen.
        c.packets = s.datagrams + s.lost;
        c.jitter = s.jitter_ns / 1e9;
        shared.publish(&c);
    }
}

fn send(
    sock: &UdpSocket,
    len: usize,
    bits_per_second: Option<u64>,
    (start, end): (Instant, Option<Instant>),
    counters_64bit: bool,
    shared: &Iperf3Shared,
) {
    let header = if counters_64bit { 16 } else { HEADER_LEN };
    let mut buf = vec![0u8; len.max(header)];
    let datagram_len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    let mut pacer = Pacer::new(start, datagram_len, bits_per_second.map(|b| b as f64));
    let mut c = Iperf3Counts::default();
    // Slots that were due but found the socket buffer full.
    let mut unsent = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if let Some(end) = end.filter(|e| now >= *e) {
            // Slots due before the end mark that never went are skipped ones.
            pacer.close(end);
            c.slipped = pacer.slipped() + unsent;
            shared.publish(&c);
            break;
        }
        let due = pacer.due(now, 64);
        if due == 0 {
            if let Some(at) = pacer.next_at() {
                let wait = at
                    .min(end.unwrap_or(at))
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(10));
                std::thread::sleep(wait);
            }
            continue;
        }
        for i in 0..due {
            write_header(&mut buf, SystemTime::now(), c.packets + 1, counters_64bit);
            match sock.send(&buf) {
                Ok(n) => {
                    c.packets += 1;
                    c.bytes += n as u64;
                }
                // A full buffer (or the client gone: ECONNREFUSED) skips the slots left.
                Err(_) => {
                    unsent += (due - i) as u64;
                    break;
                }
            }
        }
        c.slipped = pacer.slipped() + unsent;
        shared.publish(&c);
    }
    shared.publish(&c);
    shared.finished.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_in_both_widths() {
        let now = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_000);
        let mut buf = [0u8; 16];
        write_header(&mut buf, now, 7, false);
        assert_eq!(&buf[8..12], &[0, 0, 0, 7]);
        assert_eq!(
            read_header(&buf, false),
            Some((1_700_000_000_123_456_000, 7))
        );
        write_header(&mut buf, now, 1 << 40, true);
        assert_eq!(
            read_header(&buf, true),
            Some((1_700_000_000_123_456_000, 1 << 40))
        );
        assert_eq!(read_header(&buf[..11], false), None);
        assert_eq!(read_header(&buf[..15], true), None);
    }
}
