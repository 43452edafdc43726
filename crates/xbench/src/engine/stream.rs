//! One thread per data connection: a sender that writes a block in a loop, or a receiver that
//! reads until end of stream.
//!
//! The hot loop does one syscall and one relaxed store per block. Stopping is done from outside:
//! the controller raises `stop` and shuts the socket down, which wakes a sender blocked in
//! `send()` (it returns `EPIPE`) or a receiver blocked in `recv()` (it returns 0). A sender
//! therefore never needs a timer, and a receiver never a poll.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::oneshot;

use super::cpu::{SchedTime, own_sched_time, own_tid, thread_cpu};
use crate::report::{CpuUsage, Role};

/// State shared between a stream thread and its controller.
#[derive(Debug)]
pub(crate) struct StreamShared {
    /// Bytes moved so far. Written only by the stream thread; padded so the counters of
    /// neighbouring streams do not share a cache line. A receiver counts what it has read; a
    /// sender counts a block when it hands it to the kernel, *before* the call returns (and
    /// takes back what the kernel did not take after), so the counter is never less than what
    /// the kernel holds: a write under way can already be on the wire, and a reader of the
    /// counter must not see the receiver ahead of it. Exact once the thread has ended.
    pub(crate) bytes: PaddedCounter,
    /// A sender's [`transmitted`] count when its thread started (the greeting sent on the
    /// connection before it), so what the stream transmitted counts from its own first byte;
    /// `None` for a receiver or a kernel without the counters.
    pub(crate) transmitted_base: Option<u64>,
    /// The connection; the controller uses it for `TCP_INFO` and to shut it down.
    pub(crate) socket: TcpStream,
    /// Raised by the controller to end a sender.
    pub(crate) stop: AtomicBool,
    /// The stream thread's kernel id once it runs (0 before): the sampler reads its scheduler
    /// clock at the start and end of the measured window.
    pub(crate) tid: AtomicI32,
}

impl std::os::fd::AsRawFd for StreamShared {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }
}

/// A cache-line-aligned counter.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct PaddedCounter(pub(crate) AtomicU64);

/// How a stream thread ended.
#[derive(Debug)]
pub(crate) struct StreamEnd {
    /// Bytes moved in total.
    pub(crate) bytes: u64,
    /// When the last byte was written or end of stream was read.
    pub(crate) ended: Instant,
    /// CPU time of the thread.
    pub(crate) cpu: CpuUsage,
    /// The thread's scheduler clock as it ended, for a window that ends with it (a byte
    /// count), when its `/proc` entry is gone.
    pub(crate) sched: Option<SchedTime>,
    /// The error that ended it, if it was not a requested stop or a clean end of stream.
    pub(crate) error: Option<String>,
}

/// A running stream thread.
#[derive(Debug)]
pub(crate) struct StreamHandle {
    pub(crate) id: u16,
    pub(crate) role: Role,
    pub(crate) shared: Arc<StreamShared>,
    /// Fires once when the thread ends.
    pub(crate) done: oneshot::Receiver<StreamEnd>,
}

/// A byte budget shared by the senders of one direction (`-n`).
#[derive(Debug)]
pub(crate) struct Budget(AtomicU64);

impl Budget {
    pub(crate) fn new(bytes: u64) -> Arc<Self> {
        Arc::new(Budget(AtomicU64::new(bytes)))
    }

    /// Takes up to `want` bytes; 0 means the budget is spent.
    fn take(&self, want: u64) -> u64 {
        let mut got = 0;
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                got = left.min(want);
                Some(left - got)
            });
        got
    }

    fn give_back(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

/// How a sender produces bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendMode {
    /// `send()` from a user-space buffer.
    Copy,
    /// `sendfile()` from a memory file: the kernel references the pages instead of copying.
    Sendfile,
}

pub(crate) use crate::config::ReceiveMode as RecvMode;

impl StreamHandle {
    /// Ends a sender: raises its stop flag and shuts down the write side (the peer sees end of
    /// stream after the data already queued).
    pub(crate) fn stop_sending(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = self.shared.socket.shutdown(Shutdown::Write);
    }

    /// Ends any stream at once, both directions.
    pub(crate) fn abort(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = self.shared.socket.shutdown(Shutdown::Both);
    }
}

/// Starts a sender thread on `socket`, writing `payload` (shared by the test's senders: it is
/// read-only, and one copy per stream would cost streams × block length of memory).
pub(crate) fn spawn_sender(
    id: u16,
    socket: TcpStream,
    payload: Arc<Payload>,
    budget: Option<Arc<Budget>>,
) -> io::Result<StreamHandle> {
    spawn(id, Role::Sender, socket, move |shared| {
        send_loop(shared, &payload, budget.as_deref())
    })
}

/// Largest buffer a copying receiver reads into: `recv` returns what has arrived, rarely
/// more than this, so a bigger `-l` would only cost memory (times the streams).
const RECV_COPY_MAX: usize = 256 * 1024;

/// Starts a receiver thread on `socket`.
pub(crate) fn spawn_receiver(
    id: u16,
    socket: TcpStream,
    block_len: usize,
    mode: RecvMode,
) -> io::Result<StreamHandle> {
    // With MSG_TRUNC nothing is copied, so a token buffer suffices.
    let mut buf = PageAligned::zeroed(if mode == RecvMode::Copy {
        block_len.min(RECV_COPY_MAX)
    } else {
        64
    });
    spawn(id, Role::Receiver, socket, move |shared| {
        recv_loop(shared, buf.as_mut_slice(), block_len, mode)
    })
}

/// A zeroed buffer that starts on a page boundary.
///
/// Where a copying receiver's buffer starts decides what the kernel's copy to user space
/// costs: on this project's AMD EPYC VM (`rep movsb` with FSRM) a buffer 16 bytes past a page
/// boundary, which is what glibc's `malloc` returns for a 128 KiB block, cost the receiving
/// server 0.55–0.64 CPU-s/GB against 0.19–0.21 page-aligned (`benches/compare.rs`, one stream,
/// interleaved); and since `malloc` reuses heap memory the offset, and the rate, changed from
/// run to run. iperf3 reads into an `mmap`, which is page-aligned. The sender's source buffer
/// made no measurable difference, so the payload stays where `malloc` puts it.
struct PageAligned {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageAligned {
    const PAGE: usize = 4096;

    fn zeroed(len: usize) -> Self {
        // One page more than asked leaves room to start at the first boundary inside.
        let storage = vec![0u8; len + Self::PAGE];
        // For bytes `align_offset` is always < PAGE at run time; the `min` keeps the slice in
        // bounds should it ever give up (usize::MAX), at the cost of the alignment only.
        let start = storage.as_ptr().align_offset(Self::PAGE).min(Self::PAGE);
        PageAligned {
            storage,
            start,
            len,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

fn spawn(
    id: u16,
    role: Role,
    socket: TcpStream,
    body: impl FnOnce(&StreamShared) -> io::Result<()> + Send + 'static,
) -> io::Result<StreamHandle> {
    socket.set_nonblocking(false)?;
    let transmitted_base = match role {
        Role::Sender => crate::tcp_info::read(&socket)
            .ok()
            .and_then(|i| transmitted(&i)),
        Role::Receiver => None,
    };
    let shared = Arc::new(StreamShared {
        bytes: PaddedCounter::default(),
        transmitted_base,
        socket,
        stop: AtomicBool::new(false),
        tid: AtomicI32::new(0),
    });
    let (tx, done) = oneshot::channel();
    let thread_shared = Arc::clone(&shared);
    let name = match role {
        Role::Sender => format!("xb-send-{id}"),
        Role::Receiver => format!("xb-recv-{id}"),
    };
    std::thread::Builder::new().name(name).spawn(move || {
        thread_shared.tid.store(own_tid(), Ordering::Relaxed);
        let res = body(&thread_shared);
        let ended = Instant::now();
        let error = match res {
            Ok(()) => None,
            // After a requested stop, a failed send is how the stop arrives.
            Err(_) if thread_shared.stop.load(Ordering::Relaxed) => None,
            Err(e) => Some(e.to_string()),
        };
        let _ = tx.send(StreamEnd {
            bytes: thread_shared.bytes.0.load(Ordering::Relaxed),
            ended,
            cpu: thread_cpu(),
            sched: own_sched_time(),
            error,
        });
    })?;
    Ok(StreamHandle {
        id,
        role,
        shared,
        done,
    })
}

/// What a sender writes: incompressible bytes, so a VPN or WAN optimiser that compresses cannot
/// inflate the figure (iperf3 does the same).
pub(crate) enum Payload {
    Buffer(Vec<u8>),
    File { fd: OwnedFd, len: usize },
}

impl Payload {
    pub(crate) fn new(len: usize, mode: SendMode) -> io::Result<Self> {
        let buf = random_bytes(len)?;
        match mode {
            SendMode::Copy => Ok(Payload::Buffer(buf)),
            SendMode::Sendfile => {
                // SAFETY: the name is a valid NUL-terminated string; memfd_create returns a new
                // descriptor that we own, or -1.
                let fd =
                    unsafe { libc::memfd_create(c"xbench-payload".as_ptr(), libc::MFD_CLOEXEC) };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                let mut f = std::fs::File::from(fd);
                f.write_all(&buf)?;
                Ok(Payload::File { fd: f.into(), len })
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Payload::Buffer(b) => b.len(),
            Payload::File { len, .. } => *len,
        }
    }

    /// Sends up to `n` bytes once.
    fn send(&self, sock: &TcpStream, n: usize) -> io::Result<usize> {
        match self {
            Payload::Buffer(b) => (&*sock).write(&b[..n]),
            Payload::File { fd, .. } => {
                let mut off: libc::off_t = 0;
                // SAFETY: both descriptors are open for the duration of the call; `off` is a
                // valid pointer the kernel updates and we discard.
                let rc = unsafe { libc::sendfile(sock.as_raw_fd(), fd.as_raw_fd(), &mut off, n) };
                if rc < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(rc as usize)
                }
            }
        }
    }
}

fn send_loop(s: &StreamShared, payload: &Payload, budget: Option<&Budget>) -> io::Result<()> {
    let len = payload.len();
    let mut total: u64 = 0;
    while !s.stop.load(Ordering::Relaxed) {
        let want = match budget {
            None => len,
            Some(b) => match b.take(len as u64) {
                0 => break,
                // Bounded by `len`, so it fits in usize.
                n => n as usize,
            },
        };
        // Counted before the call: the kernel may put part of the block on the wire (and the
        // receiver read it) before `send` returns.
        s.bytes.0.store(total + want as u64, Ordering::Relaxed);
        match payload.send(&s.socket, want) {
            Ok(n) => {
                total += n as u64;
                s.bytes.0.store(total, Ordering::Relaxed);
                if let (Some(b), true) = (budget, n < want) {
                    b.give_back((want - n) as u64);
                }
            }
            Err(e) => {
                s.bytes.0.store(total, Ordering::Relaxed);
                if let Some(b) = budget {
                    b.give_back(want as u64);
                }
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    // The peer learns the end from FIN after the queued data.
    let _ = s.socket.shutdown(Shutdown::Write);
    Ok(())
}

fn recv_loop(s: &StreamShared, buf: &mut [u8], block_len: usize, mode: RecvMode) -> io::Result<()> {
    let fd = s.socket.as_raw_fd();
    let (flags, want) = match mode {
        RecvMode::Copy => (0, buf.len()),
        RecvMode::Discard => (libc::MSG_TRUNC, block_len),
    };
    let mut total: u64 = 0;
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes. With MSG_TRUNC the kernel copies
        // nothing and `want` may exceed the buffer; without it `want == buf.len()`.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), want, flags) };
        if n > 0 {
            total += n as u64;
            s.bytes.0.store(total, Ordering::Relaxed);
        } else if n == 0 {
            return Ok(());
        } else {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Bytes of a connection's data that TCP has put on the wire at least once (`tcpi_bytes_sent`
/// less `tcpi_bytes_retrans`, Linux 4.19+): what its receiver can have seen, and no more. Bytes
/// still in the send buffer are not in it, so a paced or window-limited sender is not credited
/// with what it merely queued. A retransmission adds to both counters, so it does not count
/// twice; a transmission the local qdisc refused may count twice (a little high, never low).
pub(crate) fn transmitted(info: &crate::tcp_info::TcpInfo) -> Option<u64> {
    Some(info.bytes_sent?.saturating_sub(info.bytes_retrans?))
}

/// `len` bytes from a xorshift generator seeded by the OS: incompressible and cheap.
fn random_bytes(len: usize) -> io::Result<Vec<u8>> {
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).map_err(io::Error::from)?;
    let mut x = u64::from_le_bytes(seed) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn budget_is_never_overspent() {
        let b = Budget::new(10);
        assert_eq!(b.take(4), 4);
        assert_eq!(b.take(8), 6);
        assert_eq!(b.take(1), 0);
        b.give_back(3);
        assert_eq!(b.take(8), 3);
    }

    #[test]
    fn byte_budget_arrives_exactly_in_both_modes() {
        for (send, recv) in [
            (SendMode::Copy, RecvMode::Copy),
            (SendMode::Sendfile, RecvMode::Discard),
        ] {
            let (c, s) = pair();
            let budget = Budget::new(10_000_019);
            let payload = Arc::new(Payload::new(100_000, send).unwrap());
            let tx = spawn_sender(0, c, payload, Some(budget)).unwrap();
            let rx = spawn_receiver(0, s, 100_000, recv).unwrap();
            let tx_end = tx.done.blocking_recv().unwrap();
            let rx_end = rx.done.blocking_recv().unwrap();
            assert_eq!(tx_end.bytes, 10_000_019, "{send:?}");
            assert_eq!(rx_end.bytes, 10_000_019, "{recv:?}");
            assert!(tx_end.error.is_none() && rx_end.error.is_none());
        }
    }

    #[test]
    fn stopping_a_blocked_sender_wakes_it() {
        let (c, s) = pair();
        // Nobody reads `s`, so the sender fills the buffers and blocks in send().
        let payload = Arc::new(Payload::new(1 << 16, SendMode::Copy).unwrap());
        let tx = spawn_sender(0, c, payload, None).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        tx.stop_sending();
        let end = tx.done.blocking_recv().unwrap();
        assert!(end.bytes > 0);
        assert!(end.error.is_none(), "{:?}", end.error);
        drop(s);
    }

    #[test]
    fn receive_buffer_starts_on_a_page_boundary() {
        for len in [64, 4096, 100_000, RECV_COPY_MAX] {
            let mut b = PageAligned::zeroed(len);
            let s = b.as_mut_slice();
            assert_eq!(s.len(), len);
            assert_eq!(s.as_ptr() as usize % PageAligned::PAGE, 0, "{len}");
            assert!(s.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn random_payload_does_not_repeat_short_patterns() {
        let b = random_bytes(4096).unwrap();
        assert_eq!(b.len(), 4096);
        assert_ne!(b[..64], b[64..128]);
    }
}
