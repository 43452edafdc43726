//! A receiving stream's thread: `recvmmsg` in batches, each datagram checked for the stream's
//! token and accounted ([`RecvStats`]), until the stop flag.
//!
//! Only the header is copied to user space (`MSG_TRUNC` still reports each datagram's real
//! length), so the receiver spends its time in the kernel's receive path, not in copies.
//! Arrival times are the kernel's (`SO_TIMESTAMPNS`) when it gives them.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::gso;
use super::socket::BATCH;
use super::stats::RecvStats;
use super::wire::{self, HEADER_LEN, Header};
use super::{Shared, UdpStream};
use crate::engine::cpu::thread_cpu;
use crate::report::{CpuUsage, Role};

/// Bytes of each datagram copied out: the header and a little more.
const PEEK: usize = 64;
/// Control-message room per message: a timestamp, a drop counter, GRO's segment size.
const CMSG_ROOM: usize = 128;
/// A GRO train's buffer: the largest UDP payload the kernel coalesces.
const GRO_ROOM: usize = 65_536;
/// GRO trains per call: 512 KiB of buffers per stream, up to 64 datagrams each.
const GRO_BATCH: usize = 8;

/// Starts the thread of receiving stream `id` on a connected, prepared socket
/// ([`super::socket::prepare_receiver`]).
pub(crate) fn spawn(id: u16, sock: UdpSocket, token: u64) -> io::Result<UdpStream> {
    let shared = Arc::new(Shared::default());
    let s = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name(format!("xbench-udp-recv-{id}"))
        .spawn(move || run(&sock, token, &s))?;
    Ok(UdpStream {
        id,
        role: Role::Receiver,
        shared,
        thread: Some(thread),
    })
}

fn run(sock: &UdpSocket, token: u64, shared: &Shared) -> Result<CpuUsage, String> {
    let cpu0 = thread_cpu();
    let gro = gso::enable_gro(sock);
    if gro {
        shared.gro.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let mut batch = RecvBatch::new(gro);
    let mut stats = RecvStats::default();
    while !shared.stopped() {
        let n = match batch.recv(sock) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            // ICMP port unreachable for our hello retransmissions after the peer closed.
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
            Err(e) => return Err(format!("receiving datagrams: {e}")),
        };
        let fallback = now_ns();
        for i in 0..n {
            let m = batch.message(i);
            if let Some(d) = m.drops {
                stats.on_rxq_drops(d);
            }
            let at = m.stamp.unwrap_or(fallback);
            match m.segment.filter(|g| *g < m.len) {
                // A GRO train: datagrams of `g` bytes back to back (the last may be shorter).
                // Without MSG_TRUNC a message is never longer than its buffer, so `bytes` is
                // the whole train.
                Some(g) => account_train(&mut stats, token, m.bytes, g, at),
                None => account(&mut stats, token, m.bytes, m.len, at),
            }
        }
        shared.publish(stats.counts());
    }
    let cpu = thread_cpu();
    Ok(CpuUsage {
        user_s: cpu.user_s - cpu0.user_s,
        system_s: cpu.system_s - cpu0.system_s,
    })
}

/// Accounts one datagram of `len` bytes beginning with `head`, which arrived at `at`.
fn account(stats: &mut RecvStats, token: u64, head: &[u8], len: usize, at: u64) {
    if crate::proto::path::is_handshake_datagram(head, len) {
        // The client's own greeting, repeated until it saw `Ready`, or a late path check.
        return;
    }
    match Header::read(head) {
        Some(h) if h.token == token => {
            stats.on_datagram(h.seq, h.sent_ns, at, len, h.warm_up);
        }
        _ => stats.on_ignored(),
    }
}

/// Accounts a GRO train: `bytes` cut into datagrams of `g` bytes (the last may be shorter),
/// which arrived at `at`. Runs of the stream's datagrams with consecutive numbers and one send
/// time go to [`RecvStats::on_run`] (one GSO send of the sender's is such a run); anything else
/// datagram by datagram. Every header is read and checked either way.
fn account_train(stats: &mut RecvStats, token: u64, bytes: &[u8], g: usize, at: u64) {
    if g < HEADER_LEN || crate::proto::path::is_handshake_datagram_len(g) {
        // A handshake datagram may hide among these; a train the sender never makes.
        for d in bytes.chunks(g) {
            account(stats, token, d, d.len(), at);
        }
        return;
    }
    /// Datagrams so far in a run: the first's number, how many, their time word.
    struct Run {
        first: u64,
        count: u64,
        time: u64,
    }
    let flush = |stats: &mut RecvStats, r: Run| {
        let h = Header::from_words([token, r.first, r.time]);
        stats.on_run(h.seq, r.count, h.sent_ns, at, g, h.warm_up);
    };
    let mut run: Option<Run> = None;
    let mut datagrams = bytes.chunks_exact(g);
    for d in datagrams.by_ref() {
        let Some(head) = d.first_chunk() else {
            continue; // never: `g` is at least a header
        };
        let [t, seq, time] = wire::words(head);
        if t != token {
            if let Some(r) = run.take() {
                flush(stats, r);
            }
            stats.on_ignored();
            continue;
        }
        if let Some(r) = &mut run
            && time == r.time
            && r.first.checked_add(r.count) == Some(seq)
        {
            r.count += 1;
            continue;
        }
        if let Some(r) = run.replace(Run {
            first: seq,
            count: 1,
            time,
        }) {
            flush(stats, r);
        }
    }
    if let Some(r) = run {
        flush(stats, r);
    }
    let rest = datagrams.remainder();
    if !rest.is_empty() {
        account(stats, token, rest, rest.len(), at);
    }
}

/// Wall-clock nanoseconds, the clock `SO_TIMESTAMPNS` stamps with.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One message of a batch, as [`RecvBatch::message`] reads it.
struct Message<'b> {
    /// Its bytes: the first [`PEEK`] without GRO (the rest was not copied), all with it.
    bytes: &'b [u8],
    /// Its real length.
    len: usize,
    /// The kernel's arrival time.
    stamp: Option<u64>,
    /// The socket's drop count.
    drops: Option<u64>,
    /// GRO's segment size, when the message is a train of datagrams.
    segment: Option<usize>,
}

/// Receive buffers (the first [`PEEK`] bytes of each datagram, or whole GRO trains), control
/// buffers and the `mmsghdr`s that point into them.
struct RecvBatch {
    /// Bytes per message buffer.
    room: usize,
    /// Without GRO only the header is copied out (`MSG_TRUNC` still reports the length).
    flags: libc::c_int,
    bufs: Vec<u8>,
    /// Control buffers, as u64 words so each is aligned for a cmsghdr.
    cmsgs: Vec<u64>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// The kernel's drop counter wraps at 2^32; this widens it.
    drops: Widen,
}

impl RecvBatch {
    /// Buffers for `BATCH` datagrams' headers, or with `gro` for [`GRO_BATCH`] whole trains.
    fn new(gro: bool) -> Self {
        let (room, count, flags) = if gro {
            (GRO_ROOM, GRO_BATCH, libc::MSG_WAITFORONE)
        } else {
            (PEEK, BATCH, libc::MSG_WAITFORONE | libc::MSG_TRUNC)
        };
        let mut bufs = vec![0u8; room * count];
        let cmsgs = vec![0u64; CMSG_ROOM / 8 * count];
        let iov: Vec<libc::iovec> = bufs
            .chunks_mut(room)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: c.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
        let hdrs = (0..count)
            .map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() })
            .collect();
        let mut b = RecvBatch {
            room,
            flags,
            bufs,
            cmsgs,
            iov,
            hdrs,
            drops: Widen::default(),
        };
        for i in 0..count {
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iov[i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        b
    }

    /// Waits (up to the socket's timeout) for at least one message and takes what is queued
    /// besides, up to the batch's size.
    fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let base = self.cmsgs.as_mut_ptr().cast::<u8>();
        for (i, h) in self.hdrs.iter_mut().enumerate() {
            // SAFETY: `i * CMSG_ROOM` is inside `cmsgs`, which lives as long as `self`.
            h.msg_hdr.msg_control = unsafe { base.add(i * CMSG_ROOM) }.cast();
            h.msg_hdr.msg_controllen = CMSG_ROOM as _;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points at buffers owned by `self` of the lengths it states.
        let rc = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as u32,
                self.flags,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc as usize)
    }

    /// Message `i` of the last batch, with what the kernel attached to it.
    fn message(&mut self, i: usize) -> Message<'_> {
        let len = self.hdrs[i].msg_len as usize;
        let (mut stamp, mut drops, mut segment) = (None, None, None);
        let msg = &self.hdrs[i].msg_hdr;
        // SAFETY: the kernel filled `msg`'s control buffer and set its length; the CMSG
        // macros walk only within it, and each payload read is of the type its header names.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(msg);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS) => {
                        let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                        stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                    }
                    (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                        let d = std::ptr::read_unaligned(data.cast::<u32>());
                        drops = Some(self.drops.widen(d));
                    }
                    _ => segment = segment.or(gso::gro_segment(c)),
                }
                c = libc::CMSG_NXTHDR(msg, c);
            }
        }
        let start = i * self.room;
        Message {
            bytes: &self.bufs[start..start + len.min(self.room)],
            len,
            stamp,
            drops,
            segment,
        }
    }
}

/// A 32-bit counter that only grows, widened to 64 bits across its wraps.
#[derive(Debug, Default)]
struct Widen {
    last: u32,
    high: u64,
}

impl Widen {
    fn widen(&mut self, v: u32) -> u64 {
        if v < self.last {
            self.high += 1 << 32;
        }
        self.last = v;
        self.high + u64::from(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::udp::socket;
    use crate::engine::udp::wire::HEADER_LEN;

    #[test]
    fn only_datagrams_with_the_streams_token_are_counted() {
        let rx = socket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = socket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        rx.connect(tx.local_addr().unwrap()).unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        socket::prepare_receiver(&rx, None).unwrap();
        let stream = spawn(0, rx, 42).unwrap();
        let mut d = [0u8; 100];
        for seq in 0..10 {
            Header {
                token: 42,
                seq,
                sent_ns: seq * 1000,
                warm_up: false,
            }
            .write(&mut d);
            tx.send(&d).unwrap();
            // The same sequence number under another token: a forgery, not a duplicate.
            Header {
                token: 43,
                seq,
                sent_ns: 0,
                warm_up: false,
            }
            .write(&mut d);
            tx.send(&d).unwrap();
        }
        let greeting = crate::proto::DataHello::new(crate::proto::Cookie([1; 16]), 0, 0, None);
        tx.send(&greeting.greeting()).unwrap();
        tx.send(&d[..HEADER_LEN - 1]).unwrap();
        tx.send(&[]).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while stream.shared.counts().ignored < 12 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let c = stream.shared.counts();
        assert_eq!(
            (c.datagrams, c.bytes, c.ignored, c.duplicates, c.lost),
            (10, 1000, 12, 0, 0)
        );
        stream.join().unwrap();
    }

    #[test]
    fn a_gso_train_is_counted_datagram_by_datagram() {
        let rx = socket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = socket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        rx.connect(tx.local_addr().unwrap()).unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        socket::prepare_receiver(&rx, None).unwrap();
        let stream = spawn(0, rx, 7).unwrap();
        // Let the thread turn GRO on before the train arrives.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut train = vec![0u8; 100 * 10];
        for (seq, d) in train.chunks_mut(100).enumerate() {
            Header {
                token: 7,
                seq: seq as u64,
                sent_ns: 0,
                warm_up: false,
            }
            .write(d);
        }
        // One forged datagram in the middle of the next train.
        let mut second = train.clone();
        for (i, d) in second.chunks_mut(100).enumerate() {
            let token = if i == 4 { 8 } else { 7 };
            Header {
                token,
                seq: 10 + i as u64,
                sent_ns: 0,
                warm_up: false,
            }
            .write(d);
        }
        for t in [&train, &second] {
            match gso::set_segment(&tx, 100).and_then(|()| gso::send_segmented(&tx, t)) {
                Ok(_) => {}
                // No GSO here: send them one by one.
                Err(e) if gso::unsupported(&e) => {
                    for d in t.chunks(100) {
                        tx.send(d).unwrap();
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while stream.shared.counts().datagrams < 19 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let c = stream.shared.counts();
        assert_eq!(
            (c.datagrams, c.bytes, c.ignored, c.lost),
            (19, 1900, 1, 1),
            "{c:?}"
        );
        stream.join().unwrap();
    }

    #[test]
    fn the_drop_counter_widens_across_its_wrap() {
        let mut w = Widen::default();
        assert_eq!(w.widen(5), 5);
        assert_eq!(w.widen(u32::MAX), u64::from(u32::MAX));
        assert_eq!(w.widen(2), (1 << 32) + 2);
    }
}
