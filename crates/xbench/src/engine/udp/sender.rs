//! A sending stream's thread: paced (or unpaced) numbered datagrams, `BATCH` per `sendmmsg`,
//! until its end mark or its stop flag.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::gso;
use super::pacer::Pacer;
use super::socket::BATCH;
use super::stats::Counts;
use super::wire::{HEADER_LEN, Header};
use super::{Shared, UdpStream};
use crate::engine::cpu::thread_cpu;
use crate::report::{CpuUsage, Role};

/// What a sender needs to know.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendPlan {
    pub(crate) token: u64,
    pub(crate) datagram_len: u32,
    /// This stream's share of `-b`; `None` unpaced.
    pub(crate) bits_per_second: Option<f64>,
    /// The sender's time zero: the first datagram is due then.
    pub(crate) start: Instant,
    /// End of the `-O` warm-up.
    pub(crate) measure_from: Instant,
    /// The end mark: nothing is sent after it.
    pub(crate) end: Instant,
}

/// Starts the thread of sending stream `id` on a connected socket.
pub(crate) fn spawn(id: u16, sock: UdpSocket, plan: SendPlan) -> io::Result<UdpStream> {
    let shared = Arc::new(Shared::default());
    let s = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name(format!("xbench-udp-send-{id}"))
        .spawn(move || run(&sock, plan, &s))?;
    Ok(UdpStream {
        id,
        role: Role::Sender,
        shared,
        thread: Some(thread),
    })
}

fn run(sock: &UdpSocket, plan: SendPlan, shared: &Shared) -> Result<CpuUsage, String> {
    let cpu0 = thread_cpu();
    let len = plan.datagram_len as usize;
    let mut batch = SendBatch::new(len, plan.token);
    let mut pacer = Pacer::new(plan.start, plan.datagram_len, plan.bits_per_second)
        .measure_from(plan.measure_from);
    let mut counts = Counts::default();
    loop {
        let now = Instant::now();
        if shared.stopped() || now >= plan.end {
            // Slots due before the end (or the stop) that never went are skipped ones.
            pacer.close(now.min(plan.end));
            counts.slipped = pacer.slipped();
            counts.measured.slipped = pacer.measured_slipped();
            shared.publish(&counts);
            break;
        }
        let due = pacer.due(now, batch.capacity());
        if due == 0 {
            let wake = match (pacer.next_at(), pacer.period()) {
                (Some(next), Some(period)) => wake_at(now, next, period),
                _ => now,
            }
            .min(plan.end);
            std::thread::sleep(wake.saturating_duration_since(now));
            continue;
        }
        let header = Header {
            token: plan.token,
            seq: counts.datagrams,
            sent_ns: now.saturating_duration_since(plan.start).as_nanos() as u64,
            // By slot where paced (see `Pacer::measure_from`), by time where not.
            warm_up: !pacer.is_measured(due).unwrap_or(now >= plan.measure_from),
        };
        let sent = batch
            .send(sock, header, due)
            .map_err(|e| format!("sending datagrams: {e}"))?;
        counts.datagrams += sent as u64;
        counts.bytes += (sent * len) as u64;
        if !header.warm_up {
            counts.measured.datagrams += sent as u64;
            counts.measured.bytes += (sent * len) as u64;
        }
        counts.slipped = pacer.slipped();
        counts.measured.slipped = pacer.measured_slipped();
        shared.publish(&counts);
        if batch.uses_gso() {
            shared.gso.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let cpu = thread_cpu();
    Ok(CpuUsage {
        user_s: cpu.user_s - cpu0.user_s,
        system_s: cpu.system_s - cpu0.system_s,
    })
}

/// How long a paced sender sleeps at the least between batches, and how many datagrams'
/// worth. Woken for every datagram, a sender at `-b 1G` with 1,400-byte datagrams (one every
/// 11 µs) spent 2.4-3.4 µs of CPU on each, nearly all of it going to sleep and waking up.
/// Sleeping until [`BURST`] datagrams are due, or [`MIN_SLEEP`] has passed if that comes
/// first, sends them in one `sendmmsg`: at 1 Gbit/s 32 datagrams (45 KB) every 360 µs, under
/// half the burst of iperf3's 1 ms pacing tick, and far inside
/// [`super::pacer::MAX_LATENESS`], so no slot is skipped for it. A stream slower than one
/// datagram per [`MIN_SLEEP`] still sleeps until each is due, and sends it on time.
const BURST: u32 = 32;

/// See [`BURST`].
const MIN_SLEEP: Duration = Duration::from_micros(500);

/// When a paced sender with nothing due at `now` wakes next: when the next datagram is due,
/// or later while the lateness stays within a [`BURST`] and [`MIN_SLEEP`].
fn wake_at(now: Instant, next: Instant, period: Duration) -> Instant {
    next.max(now + MIN_SLEEP.min(period * BURST))
}

/// Most bytes of datagram buffers a sender holds: `BATCH` datagrams of up to 16 KiB, fewer
/// of larger ones, so a server with many streams of 64 KB datagrams stays within memory.
const MAX_BATCH_BYTES: usize = 1 << 20;

/// Datagram buffers (up to `BATCH`) and the `mmsghdr`s that point into them.
struct SendBatch {
    len: usize,
    bufs: Vec<u8>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Whether GSO sends work here: untried (`None`), or what the first one said.
    gso: Option<bool>,
}

impl SendBatch {
    /// Buffers for datagrams of `len` bytes (at least [`HEADER_LEN`]) of the stream whose
    /// token is `token`.
    fn new(len: usize, token: u64) -> Self {
        let count = (MAX_BATCH_BYTES / len.max(1)).clamp(1, BATCH);
        let mut bufs = vec![0u8; len * count];
        // Whatever the header does not cover: a recognisable filler, not zeros a link
        // might compress.
        for (i, b) in bufs.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        // The token, once: `send` writes only what changes.
        for d in bufs.chunks_exact_mut(len.max(HEADER_LEN)) {
            d[..8].copy_from_slice(&token.to_be_bytes());
        }
        let iov: Vec<libc::iovec> = bufs
            .chunks_mut(len)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: c.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
        let hdrs = (0..count)
            .map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() })
            .collect();
        let mut b = SendBatch {
            len,
            bufs,
            iov,
            hdrs,
            gso: None,
        };
        for i in 0..count {
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iov[i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        b
    }

    /// Sends `n` datagrams numbered from `first.seq`, all with `first`'s time (and the
    /// token given to [`Self::new`]); returns how many went. Blocks while the socket buffer
    /// is full (the unpaced case's back-pressure).
    fn send(&mut self, sock: &UdpSocket, first: Header, n: usize) -> io::Result<usize> {
        // Once a datagram, 20 million times a second at 64 bytes: two words each, the buffers
        // walked without an index check apiece.
        for (i, d) in self.bufs.chunks_exact_mut(self.len).take(n).enumerate() {
            Header {
                seq: first.seq + i as u64,
                ..first
            }
            .write_after_token(d);
        }
        // Once GSO works every send takes it, single datagrams too: with the socket option
        // set, a `sendmmsg` would be cut by it all the same.
        if (n > 1 && self.gso.is_none()) || self.gso == Some(true) {
            match self.send_gso(sock, n) {
                Ok(done) => return Ok(done),
                Err(e) if gso::unsupported(&e) => {
                    // Plain datagrams from here on; larger than the path's MTU, only they
                    // may be fragmented.
                    let _ = gso::set_segment(sock, 0);
                    self.gso = Some(false);
                }
                Err(e) => return transient(e, 0),
            }
        }
        let mut done = 0;
        while done < n {
            // SAFETY: `hdrs[done..n]` point at `iov` entries that point into `bufs`, all
            // owned by `self` and not moved since `new`; the count is within the slice.
            let rc = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    self.hdrs[done..].as_mut_ptr(),
                    (n - done) as u32,
                    0,
                )
            };
            if rc < 0 {
                return transient(io::Error::last_os_error(), done);
            }
            done += rc as usize;
        }
        Ok(done)
    }

    /// The `n` datagrams whose headers are written, in GSO sends of as many as one may carry.
    fn send_gso(&mut self, sock: &UdpSocket, n: usize) -> io::Result<usize> {
        if self.gso.is_none() {
            gso::set_segment(sock, self.len)?;
        }
        let per = gso::segments_per_send(self.len);
        let mut done = 0;
        while done < n {
            let k = (n - done).min(per);
            let buf = &self.bufs[done * self.len..(done + k) * self.len];
            match gso::send_segmented(sock, buf) {
                Ok(_) => {
                    self.gso = Some(true);
                    done += k;
                }
                Err(e) if done > 0 => return transient(e, done),
                Err(e) => {
                    if self.gso.is_none() {
                        // Not known to work: no option left to cut plain sends.
                        let _ = gso::set_segment(sock, 0);
                    }
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// Most datagrams one [`Self::send`] takes: with GSO, as many whole GSO sends as the
    /// buffers hold. A batch of 64 1,400-byte datagrams went as sends of 46 and 18, 32 a send
    /// on average where the C loop's sends carry 42; each send is one pass down the stack
    /// (and, on loopback, up the receiver's), so the sender spent more per datagram than the
    /// loop did: 46 a batch now.
    fn capacity(&self) -> usize {
        let count = self.hdrs.len();
        if self.gso == Some(false) {
            return count;
        }
        let per = gso::segments_per_send(self.len);
        (count / per).max(1) * per.min(count)
    }

    /// Whether the GSO path is in use.
    fn uses_gso(&self) -> bool {
        self.gso == Some(true)
    }
}

/// A send error that ends this batch early but not the stream: an ICMP error for an earlier
/// datagram (the peer closed first) or a full device queue. Returns what went before it.
fn transient(e: io::Error, done: usize) -> io::Result<usize> {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED | libc::ENOBUFS | libc::EINTR) => {
            std::thread::yield_now();
            Ok(done)
        }
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fast stream waits for a burst's worth, a middling one at most `MIN_SLEEP`, and a slow
    /// one exactly until its next datagram is due.
    #[test]
    fn a_paced_sender_sleeps_for_a_burst_never_past_a_slow_streams_slot() {
        let now = Instant::now();
        let us = Duration::from_micros;
        // 1,400 bytes at 1 Gbit/s: one every 11.2 µs; the next due in 5 µs.
        let period = Duration::from_nanos(11_200);
        assert_eq!(wake_at(now, now + us(5), period), now + period * BURST);
        // One every 100 µs: 32 of them would be 3.2 ms; 500 µs at most.
        assert_eq!(wake_at(now, now + us(40), us(100)), now + MIN_SLEEP);
        // One every 5 ms: on time.
        assert_eq!(wake_at(now, now + us(4_000), us(5_000)), now + us(4_000));
    }
}
