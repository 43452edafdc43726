//! A minimal epoll loop for request/response workers: readiness of many sockets, a waker, and
//! timeouts with nanosecond resolution.
//!
//! Why not mio: paced tests sleep until each transaction's intended send time, and mio's
//! timeouts (like `epoll_wait`'s) are whole milliseconds — up to a millisecond of lateness
//! that coordinated-omission correction would then charge to the network. `epoll_pwait2`
//! (Linux 5.11) takes a `timespec`; on older kernels we wait in whole milliseconds, rounded
//! down, and let the caller spin the rest. Worker threads also set their timer slack to 1 ns
//! so the kernel does not defer their wake-ups by its default 50 µs.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Readiness the loop asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interest {
    Read,
    ReadWrite,
    Write,
}

impl Interest {
    fn bits(self, edge: bool) -> u32 {
        let mut base = (libc::EPOLLRDHUP) as u32;
        if edge {
            base |= libc::EPOLLET as u32;
        }
        base | match self {
            Interest::Read => libc::EPOLLIN as u32,
            Interest::ReadWrite => (libc::EPOLLIN | libc::EPOLLOUT) as u32,
            Interest::Write => libc::EPOLLOUT as u32,
        }
    }
}

/// One readiness event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event {
    pub(crate) token: u64,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// Error or hang-up: a read will say which.
    pub(crate) closed: bool,
}

/// An epoll instance.
#[derive(Debug)]
pub(crate) struct Poll {
    epfd: OwnedFd,
    events: Vec<libc::epoll_event>,
    /// Every descriptor is added edge-triggered (see [`Poll::edge_triggered`]).
    edge: bool,
}

/// Set once `epoll_pwait2` has answered ENOSYS.
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

impl Poll {
    /// Level-triggered: a descriptor is reported at every wait while it is ready.
    pub(crate) fn new(capacity: usize) -> io::Result<Self> {
        Self::with(capacity, false)
    }

    /// Edge-triggered: a descriptor is reported once each time it becomes ready, so its owner
    /// must read (or write) until the kernel has nothing more (or takes nothing more), and
    /// read on after a hang-up. Level-triggered, epoll puts every reported socket back on its
    /// ready list and polls it again at the next wait, only to find it empty: one more
    /// `tcp_poll` per transaction, over a working set of thousands of sockets.
    pub(crate) fn edge_triggered(capacity: usize) -> io::Result<Self> {
        Self::with(capacity, true)
    }

    fn with(capacity: usize, edge: bool) -> io::Result<Self> {
        // SAFETY: plain syscall; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poll {
            // SAFETY: `fd` was just created and is owned by nobody else.
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.clamp(16, 1024)],
            edge,
        })
    }

    pub(crate) fn add(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    pub(crate) fn modify(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    pub(crate) fn delete(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: `ev` is valid for the call; failure (fd already closed) is harmless.
        unsafe {
            libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev);
        }
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest.bits(self.edge),
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        let rc = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for events until `deadline` (`None`: until something happens) and calls `f` for
    /// each. Returns the number of events. A deadline in the past polls without blocking.
    pub(crate) fn wait(
        &mut self,
        deadline: Option<Instant>,
        mut f: impl FnMut(Event),
    ) -> io::Result<usize> {
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let n = self.wait_raw(timeout)?;
        for ev in &self.events[..n] {
            let bits = ev.events;
            f(Event {
                token: ev.u64,
                readable: bits & (libc::EPOLLIN as u32) != 0,
                writable: bits & (libc::EPOLLOUT as u32) != 0,
                closed: bits & ((libc::EPOLLERR | libc::EPOLLHUP | libc::EPOLLRDHUP) as u32) != 0,
            });
        }
        Ok(n)
    }

    fn wait_raw(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let max = self.events.len() as libc::c_int;
        let epfd = self.epfd.as_raw_fd();
        let ptr = self.events.as_mut_ptr();
        if !NO_PWAIT2.load(Ordering::Relaxed) {
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
            });
            let ts_ptr = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: `ptr` points to `max` writable epoll_events; `ts_ptr` is null or points
            // to a live timespec; a null sigmask leaves the mask alone.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    epfd,
                    ptr,
                    max,
                    ts_ptr,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if rc >= 0 {
                return Ok(rc as usize);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => return Ok(0),
                Some(libc::ENOSYS) => NO_PWAIT2.store(true, Ordering::Relaxed),
                _ => return Err(e),
            }
        }
        // Whole milliseconds, rounded down: the caller re-polls and spins the remainder.
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
        // SAFETY: as above.
        let rc = unsafe { libc::epoll_wait(epfd, ptr, max, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(rc as usize)
    }
}

/// The token a worker's [`Waker`] is added with; a flow's (or connection's) token is its index.
pub(crate) const WAKER: u64 = u64::MAX;

/// A worker's poll for `sockets` sockets (edge-triggered with `edge`) with its waker already
/// in it, under [`WAKER`].
pub(crate) fn worker_poll(sockets: usize, edge: bool) -> io::Result<(Poll, Arc<Waker>)> {
    let waker = Arc::new(Waker::new()?);
    let poll = if edge {
        Poll::edge_triggered(sockets + 1)?
    } else {
        Poll::new(sockets + 1)?
    };
    poll.add(waker.raw(), WAKER, Interest::Read)?;
    Ok((poll, waker))
}

/// Wakes a worker blocked in [`Poll::wait`] from another thread (an `eventfd`).
#[derive(Debug)]
pub(crate) struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waker {
            // SAFETY: just created, owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64; EAGAIN (counter saturated) still leaves the
        // eventfd readable, which is all a wake-up needs.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8);
        }
    }

    /// Clears pending wake-ups.
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN means nothing was pending.
        unsafe {
            libc::read(self.fd.as_raw_fd(), (&raw mut v).cast(), 8);
        }
    }
}

/// Asks the kernel to wake this thread on time: the default 50 µs timer slack would be
/// charged to every paced transaction's latency.
pub(crate) fn precise_timers() {
    const PR_SET_TIMERSLACK: libc::c_int = 29;
    // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument and affects only the
    // calling thread; failure leaves the default slack, which is harmless.
    unsafe {
        libc::prctl(PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_sub_millisecond() {
        precise_timers();
        let mut p = Poll::new(8).unwrap();
        let mut late = Vec::new();
        for _ in 0..50 {
            let target = Instant::now() + Duration::from_micros(300);
            loop {
                p.wait(Some(target), |_| {}).unwrap();
                if Instant::now() >= target {
                    break;
                }
            }
            late.push(Instant::now() - target);
        }
        late.sort();
        // The median wake-up is well within a millisecond of the deadline (a loaded CI host
        // may be late now and then, hence the median).
        assert!(late[25] < Duration::from_micros(500), "{:?}", late[25]);
    }

    #[test]
    fn edge_triggered_reports_unread_data_once_and_level_triggered_at_every_wait() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.write_all(b"x").unwrap();
        // Two waits each, the byte left unread.
        let reports = |mut p: Poll| {
            p.add(b.as_raw_fd(), 1, Interest::Read).unwrap();
            (0..2)
                .map(|_| {
                    let deadline = Instant::now() + Duration::from_millis(200);
                    p.wait(Some(deadline), |e| assert!(e.readable)).unwrap()
                })
                .sum::<usize>()
        };
        assert_eq!(reports(Poll::new(8).unwrap()), 2);
        assert_eq!(reports(Poll::edge_triggered(8).unwrap()), 1);
        // More data is a new edge.
        let mut p = Poll::edge_triggered(8).unwrap();
        p.add(b.as_raw_fd(), 1, Interest::Read).unwrap();
        let soon = || Some(Instant::now() + Duration::from_millis(200));
        assert_eq!(p.wait(soon(), |_| {}).unwrap(), 1);
        a.write_all(b"y").unwrap();
        assert_eq!(p.wait(soon(), |_| {}).unwrap(), 1);
    }

    #[test]
    fn a_waker_ends_a_wait_from_another_thread() {
        let mut p = Poll::new(8).unwrap();
        let w = std::sync::Arc::new(Waker::new().unwrap());
        p.add(w.raw(), 7, Interest::Read).unwrap();
        let w2 = std::sync::Arc::clone(&w);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w2.wake();
        });
        let mut tokens = Vec::new();
        let started = Instant::now();
        p.wait(Some(Instant::now() + Duration::from_secs(10)), |e| {
            tokens.push(e.token)
        })
        .unwrap();
        assert_eq!(tokens, [7]);
        assert!(started.elapsed() < Duration::from_secs(5));
        w.drain();
        t.join().unwrap();
    }
}
