//! A lab path measured without xbench: the yardstick the accuracy checks hold `xbench client
//! --rr` to, and the delay line's own checks use.
//!
//! [`ping_pong`] is the barest round trip a path has: one byte echoed over TCP, in a thread
//! per end, each in its own namespace. Its ends run in real time ([`realtime_thread`]): as
//! ordinary threads on a loaded 2-core machine each woke milliseconds after its byte arrived,
//! waiting for a core behind busy processes, and the round trips measured the scheduler (p50
//! 23.5-26 ms, p99 491 ms over a 10 ms line whose own lateness was 24 µs). Real-time ends wake
//! at once, so the round trip is again the line's two delays and the kernel's path, and a line
//! that delays wrongly or releases late still shows in full.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::error::LabError;
use crate::plan::PathInfo;
use crate::sys::netns;

/// The real-time priority of the yardstick's threads: below the delay line's (20), so they
/// never hold up its releases.
pub const REALTIME_PRIORITY: i32 = 10;

/// How long the echo waits for the ping's connection.
const ACCEPT_WAIT: Duration = Duration::from_secs(10);

/// Puts the calling thread in `SCHED_FIFO` at [`REALTIME_PRIORITY`] (root or CAP_SYS_NICE);
/// threads it starts later inherit the policy.
pub fn realtime_thread() -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread; `param` is valid for the call.
    match unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// `n` round trips of one byte over TCP from `path`'s client namespace to an echo in its
/// server namespace (on the server's address, a port of the kernel's choosing), both ends
/// real-time threads; returns each round trip, in order.
pub fn ping_pong(path: &PathInfo, n: usize) -> Result<Vec<Duration>, LabError> {
    let bind = SocketAddr::from((path.server_addr, 0));
    let listener = netns::run_in(&path.server_netns, || TcpListener::bind(bind))?
        .map_err(|e| LabError::io(format!("cannot listen on {bind} for the ping-pong"), e))?;
    let target = listener
        .local_addr()
        .map_err(|e| LabError::io("reading the ping-pong's port", e))?;
    let echo = std::thread::spawn(move || echo(&listener));
    let client_ns = path.client_netns.clone();
    let ping = std::thread::spawn(move || -> Result<Vec<Duration>, LabError> {
        realtime_thread().map_err(|e| LabError::io("SCHED_FIFO for the ping", e))?;
        let mut c = netns::run_in(&client_ns, || {
            TcpStream::connect_timeout(&target, ACCEPT_WAIT)
        })?
        .map_err(|e| LabError::io(format!("cannot connect the ping-pong to {target}"), e))?;
        rounds(&mut c, n).map_err(|e| LabError::io("the ping-pong's round trips", e))
    });
    let rtts = ping.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
    // The echo ends when the ping's connection closes, or when none came.
    let echoed = echo.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
    let rtts = rtts?;
    echoed.map_err(|e| LabError::io("the ping-pong's echo", e))?;
    Ok(rtts)
}

/// Times `n` one-byte round trips on `c`.
fn rounds(c: &mut TcpStream, n: usize) -> io::Result<Vec<Duration>> {
    c.set_nodelay(true)?;
    let mut out = Vec::with_capacity(n);
    let mut b = [7u8; 1];
    for _ in 0..n {
        let t = Instant::now();
        c.write_all(&b)?;
        c.read_exact(&mut b)?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Echoes every byte of the first connection until it closes. The accept is polled, bounded
/// by [`ACCEPT_WAIT`], so a ping that never connects cannot leave this thread blocked.
fn echo(listener: &TcpListener) -> io::Result<()> {
    realtime_thread()?;
    listener.set_nonblocking(true)?;
    let until = Instant::now() + ACCEPT_WAIT;
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    };
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    let mut b = [0u8; 1];
    loop {
        match s.read_exact(&mut b) {
            Ok(()) => s.write_all(&b)?,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
