//! The lab's own delay/loss line, for kernels without `sch_netem`: a userspace forwarder
//! between two TUN devices (one in each WAN namespace) that holds every packet for the
//! configured one-way delay, with optional jitter that never reorders, and drops at the
//! configured rate with a seeded generator.
//!
//! Per direction, a reader thread timestamps each packet the moment it is read and computes
//! its release time; a writer thread sleeps to that absolute deadline and writes the packet to
//! the other device. A FIFO channel between them keeps order. Both threads run `SCHED_FIFO`
//! when allowed, with 1 ns timer slack. The writer records how late each release was, so the
//! line reports its own accuracy ([`DelayLineStats`]).
//!
//! Not for: rate limiting (`tc tbf` on the TUN devices does that, before the delay, as a
//! bottleneck link followed by propagation delay), or building the devices (the lab does).

mod clock;
mod rng;
mod schedule;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::LabError;
use crate::sys::tun;
use schedule::Scheduler;

/// Packets one direction may hold at once. Enough for 2 s of delay at ~800 Mbit/s of
/// full-size packets; beyond it packets are dropped and counted as `overflow`.
pub const QUEUE_PACKETS: usize = 131_072;

/// How long a thread waits before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(100);

/// One end of the line: a persistent TUN device in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunEnd {
    /// Namespace name.
    pub netns: String,
    /// Device name.
    pub dev: String,
}

/// What one direction does to packets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LineParams {
    /// One-way delay, nanoseconds.
    pub delay_ns: u64,
    /// Uniform jitter ± this, nanoseconds (at most the delay; order is kept).
    pub jitter_ns: u64,
    /// Drop probability, 0.0–1.0.
    pub loss: f64,
    /// Seed of the loss/jitter generator.
    pub seed: u64,
}

/// A whole line: two ends and what happens each way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelayLineSpec {
    /// Client-side device.
    pub a: TunEnd,
    /// Server-side device.
    pub b: TunEnd,
    /// Packets from `a` to `b`.
    pub a_to_b: LineParams,
    /// Packets from `b` to `a`.
    pub b_to_a: LineParams,
    /// Try `SCHED_FIFO` for the line's threads.
    pub realtime: bool,
    /// Spin this long before each deadline instead of sleeping, nanoseconds. 0 sleeps all the
    /// way; spinning trades CPU for precision on an idle machine.
    pub spin_ns: u64,
    /// Pass TCP segmentation-offload packets through whole (see `sys::tun`): the line then
    /// holds and releases a sender's TSO burst (up to 64 KiB) as one unit, for a fraction of
    /// the CPU. Must be off with loss, which is defined per packet: dropping one offload
    /// packet would drop a burst of up to ~44.
    #[serde(default)]
    pub offload: bool,
}

/// Accuracy and counts of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct DirectionStats {
    /// Packets read (with offload, a TSO packet of many segments counts once).
    pub packets_in: u64,
    /// Bytes read.
    pub bytes_in: u64,
    /// Dropped by the configured loss.
    pub lost: u64,
    /// Dropped because [`QUEUE_PACKETS`] were already held.
    pub overflow: u64,
    /// Packets written to the other end.
    pub packets_out: u64,
    /// Writes that failed (the other device down).
    pub write_errors: u64,
    /// How late releases were, after the deadline, nanoseconds.
    pub lateness_ns: Distribution,
    /// How long each write to the other device took, nanoseconds. The kernel processes a
    /// written packet inside the write (forwarding it and, on the far side, the receiving
    /// TCP's work), so this is the line's cost per packet and bounds the packet rate it keeps
    /// up with.
    pub write_ns: Distribution,
}

/// A distribution of durations, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Distribution {
    /// Samples.
    pub count: u64,
    /// Mean, ns.
    pub mean: f64,
    /// Median, ns.
    pub p50: u64,
    /// 90th percentile, ns.
    pub p90: u64,
    /// 99th percentile, ns.
    pub p99: u64,
    /// 99.9th percentile, ns.
    pub p999: u64,
    /// Largest, ns.
    pub max: u64,
}

/// A snapshot of a running line.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DelayLineStats {
    /// Client to server.
    pub a_to_b: DirectionStats,
    /// Server to client.
    pub b_to_a: DirectionStats,
    /// Whether all four threads got `SCHED_FIFO`.
    pub realtime: bool,
}

impl DelayLineStats {
    /// Reads a stats file written by [`DelayLine::write_stats`].
    pub fn load(path: &Path) -> Result<Self, LabError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LabError::io(format!("cannot read {}", path.display()), e))?;
        serde_json::from_str(&text).map_err(|e| {
            LabError::io(
                format!("cannot parse {}", path.display()),
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        })
    }
}

/// A running delay line; stops (and joins its threads) when dropped.
#[derive(Debug)]
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    dirs: [Arc<Shared>; 2],
    realtime: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    packets_in: AtomicU64,
    bytes_in: AtomicU64,
    lost: AtomicU64,
    overflow: AtomicU64,
    packets_out: AtomicU64,
    write_errors: AtomicU64,
    /// Distribution and write time; one lock, taken once per packet by the writer.
    hists: Mutex<[Histogram<u64>; 2]>,
}

impl Shared {
    fn new() -> Result<Self, LabError> {
        let h = Histogram::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| {
            LabError::io(
                "cannot make the lateness histogram",
                io::Error::other(e.to_string()),
            )
        })?;
        Ok(Shared {
            packets_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
            packets_out: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            hists: Mutex::new([h.clone(), h]),
        })
    }

    fn snapshot(&self) -> DirectionStats {
        // Copy under the lock, compute quantiles after: the writer must not wait for this.
        let [late, write] = self.hists.lock().unwrap_or_else(|p| p.into_inner()).clone();
        DirectionStats {
            packets_in: self.packets_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            overflow: self.overflow.load(Ordering::Relaxed),
            packets_out: self.packets_out.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            lateness_ns: summarize(&late),
            write_ns: summarize(&write),
        }
    }
}

fn summarize(h: &Histogram<u64>) -> Distribution {
    if h.is_empty() {
        return Distribution::default();
    }
    Distribution {
        count: h.len(),
        mean: h.mean(),
        p50: h.value_at_quantile(0.5),
        p90: h.value_at_quantile(0.9),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    }
}

/// A packet held by the line.
struct Held {
    data: Vec<u8>,
    release_ns: u64,
}

impl DelayLine {
    /// Attaches to both devices and starts forwarding.
    pub fn start(spec: &DelayLineSpec) -> Result<Self, LabError> {
        if spec.offload && (spec.a_to_b.loss > 0.0 || spec.b_to_a.loss > 0.0) {
            return Err(LabError::InvalidSpec(
                "a delay line with loss cannot pass offload packets (loss is per packet)".into(),
            ));
        }
        let a = Arc::new(tun::attach(&spec.a.netns, &spec.a.dev, spec.offload)?);
        let b = Arc::new(tun::attach(&spec.b.netns, &spec.b.dev, spec.offload)?);
        let stop = Arc::new(AtomicBool::new(false));
        let dirs = [Arc::new(Shared::new()?), Arc::new(Shared::new()?)];
        let realtime = Arc::new(AtomicU64::new(0));
        let mut line = DelayLine {
            stop,
            dirs,
            realtime,
            threads: Vec::new(),
        };
        let plan = [
            ("ab", Arc::clone(&a), Arc::clone(&b), spec.a_to_b, 0),
            ("ba", b, a, spec.b_to_a, 1),
        ];
        for (name, from, to, params, i) in plan {
            let (tx, rx) = mpsc::sync_channel::<Held>(QUEUE_PACKETS);
            let shared = Arc::clone(&line.dirs[i]);
            let stop = Arc::clone(&line.stop);
            let rt = Arc::clone(&line.realtime);
            let realtime = spec.realtime;
            let reader = std::thread::Builder::new()
                .name(format!("xbl-read-{name}"))
                .spawn(move || {
                    if clock::tune_thread(realtime, 20) {
                        rt.fetch_add(1, Ordering::Relaxed);
                    }
                    read_loop(&from, tx, params, &shared, &stop);
                });
            let shared = Arc::clone(&line.dirs[i]);
            let stop = Arc::clone(&line.stop);
            let rt = Arc::clone(&line.realtime);
            let spin = spec.spin_ns;
            let writer = std::thread::Builder::new()
                .name(format!("xbl-write-{name}"))
                .spawn(move || {
                    if clock::tune_thread(realtime, 20) {
                        rt.fetch_add(1, Ordering::Relaxed);
                    }
                    write_loop(&to, &rx, spin, &shared, &stop);
                });
            for t in [reader, writer] {
                // On failure `line` is dropped here, which stops the threads already started.
                line.threads
                    .push(t.map_err(|e| LabError::io("cannot start a delay-line thread", e))?);
            }
        }
        Ok(line)
    }

    /// Counts and accuracy so far.
    pub fn stats(&self) -> DelayLineStats {
        DelayLineStats {
            a_to_b: self.dirs[0].snapshot(),
            b_to_a: self.dirs[1].snapshot(),
            realtime: self.realtime.load(Ordering::Relaxed) == 4,
        }
    }

    /// Writes [`Self::stats`] as JSON to `path`, atomically (via a rename).
    pub fn write_stats(&self, path: &Path) -> Result<(), LabError> {
        crate::state::write_atomically(path, &self.stats())
    }

    /// Stops forwarding and returns the final stats.
    pub fn stop(mut self) -> DelayLineStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.halt();
    }
}

fn read_loop(
    from: &File,
    tx: SyncSender<Held>,
    params: LineParams,
    shared: &Shared,
    stop: &AtomicBool,
) {
    let mut sched = Scheduler::new(params.delay_ns, params.jitter_ns, params.loss, params.seed);
    // A 64 KiB GSO packet plus its virtio header (and room for larger GSO limits).
    let mut buf = vec![0u8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match (&*from).read(&mut buf) {
            Ok(n) => {
                // Timestamp first: everything after this is part of the line, not the path.
                let arrival = clock::now_ns();
                shared.packets_in.fetch_add(1, Ordering::Relaxed);
                shared.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                let Some(release_ns) = sched.admit(arrival) else {
                    shared.lost.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let held = Held {
                    data: buf[..n].to_vec(),
                    release_ns,
                };
                match tx.try_send(held) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => {
                        shared.overflow.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(TrySendError::Disconnected(_)) => return,
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_readable(from),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The device went away (lab torn down); nothing more will arrive.
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

fn wait_readable(f: &File) {
    let mut pfd = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, POLL.as_millis() as libc::c_int) };
}

fn write_loop(
    to: &File,
    rx: &mpsc::Receiver<Held>,
    spin_ns: u64,
    shared: &Shared,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        let held = match rx.recv_timeout(POLL) {
            Ok(h) => h,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        clock::sleep_until(held.release_ns, spin_ns);
        let start = clock::now_ns();
        let late = start.saturating_sub(held.release_ns);
        match (&*to).write(&held.data) {
            Ok(_) => {
                shared.packets_out.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                shared.write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let took = clock::now_ns().saturating_sub(start);
        let mut h = shared.hists.lock().unwrap_or_else(|p| p.into_inner());
        h[0].saturating_record(late.max(1));
        h[1].saturating_record(took.max(1));
    }
}
