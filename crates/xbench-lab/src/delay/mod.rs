//! The lab's own delay/loss line, for kernels without `sch_netem`: a userspace forwarder
//! between two TUN devices (one in each WAN namespace) that holds every packet for the
//! configured one-way delay, with optional jitter that never reorders, drops at the
//! configured rate with a seeded generator, and reorders at the configured rate by holding a
//! packet an extra [`LineParams::reorder_hold_ns`] so the packets behind it overtake it.
//!
//! What "reordered" means, exactly: a packet written to the far device after a packet *of the
//! same flow* (protocol, addresses and ports) that the line read after it. That is what a
//! receiver numbering one flow's packets sees as out of order (xbench's UDP receiver counts a
//! datagram that arrives after a higher sequence number); a held packet that no packet of its
//! flow overtook (none came during the hold) is not counted. The line keeps a log of the
//! packets it dropped and reordered ([`PacketEvent`]) so a test can count its own packets
//! among others crossing the line (handshakes, control connections).
//!
//! Per direction, a reader thread timestamps each packet the moment it is read and computes
//! its release time; a writer thread sleeps to that absolute deadline and writes the packet to
//! the other device. A FIFO channel between them keeps order (held
//! packets wait beside it, in the writer). Both threads run `SCHED_FIFO`
//! when allowed, with 1 ns timer slack. The writer records how late each release was, so the
//! line reports its own accuracy ([`DelayLineStats`]).
//!
//! Not for: rate limiting (`tc tbf` on the TUN devices does that, before the delay, as a
//! bottleneck link followed by propagation delay), or building the devices (the lab does).

mod clock;
mod packet;
mod rng;
mod schedule;

use std::collections::{HashMap, VecDeque};
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

pub use packet::PacketInfo;

/// Packets one direction may hold at once. Enough for 2 s of delay at ~800 Mbit/s of
/// full-size packets; beyond it packets are dropped and counted as `overflow`.
pub const QUEUE_PACKETS: usize = 131_072;

/// Events ([`PacketEvent`]) one direction keeps, the latest; older ones are forgotten and
/// counted in [`DirectionStats::events_forgotten`].
pub const EVENTS_KEPT: usize = 8192;

/// Flows whose order one direction tracks; beyond it the table starts afresh (a packet
/// overtaken across the restart is then not counted as reordered).
const FLOWS_TRACKED: usize = 65_536;

/// How long a held packet waits by default: 1 ms, so a flow of 1,000 packets/s or more has a
/// packet that overtakes it.
pub const DEFAULT_REORDER_HOLD_NS: u64 = 1_000_000;

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
    /// Probability, 0.0–1.0, that a packet is held an extra `reorder_hold_ns` past its
    /// release, so the packets released meanwhile overtake it. Drawn from its own generator,
    /// for packets not dropped.
    #[serde(default)]
    pub reorder: f64,
    /// The extra hold of a reordered packet, nanoseconds.
    #[serde(default = "default_reorder_hold")]
    pub reorder_hold_ns: u64,
    /// Seed of the loss/jitter/reordering generators.
    pub seed: u64,
}

fn default_reorder_hold() -> u64 {
    DEFAULT_REORDER_HOLD_NS
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
    /// the CPU. Must be off with loss or reordering, which are defined per packet: dropping
    /// one offload packet would drop a burst of up to ~44.
    #[serde(default)]
    pub offload: bool,
}

/// What the line did to one packet it logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Dropped by the configured loss.
    Dropped,
    /// Written after a packet of its flow that the line read after it.
    Reordered,
}

/// A packet the line dropped or reordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketEvent {
    /// What happened to it.
    pub kind: EventKind,
    /// Which packet.
    #[serde(flatten)]
    pub packet: PacketInfo,
}

/// Accuracy and counts of one direction.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DirectionStats {
    /// Packets read (with offload, a TSO packet of many segments counts once).
    pub packets_in: u64,
    /// Bytes read.
    pub bytes_in: u64,
    /// Dropped by the configured loss.
    pub lost: u64,
    /// Dropped because [`QUEUE_PACKETS`] were already held.
    pub overflow: u64,
    /// Held by the configured reordering (each was held; some were then overtaken).
    #[serde(default)]
    pub held: u64,
    /// Written after a packet of the same flow that was read after it (see the module's
    /// definition).
    #[serde(default)]
    pub reordered: u64,
    /// The latest [`EVENTS_KEPT`] packets dropped by the configured loss or reordered, in the
    /// order they happened.
    #[serde(default)]
    pub events: Vec<PacketEvent>,
    /// Events older than those kept.
    #[serde(default)]
    pub events_forgotten: u64,
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
        let text =
            xbench::file::read_regular(path, crate::state::STATE_FILE_LIMIT).map_err(|e| {
                LabError::io(
                    format!("cannot read {}", path.display()),
                    io::Error::new(io::ErrorKind::InvalidData, e),
                )
            })?;
        serde_json::from_slice(&text).map_err(|e| {
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
    held: AtomicU64,
    reordered: AtomicU64,
    packets_out: AtomicU64,
    write_errors: AtomicU64,
    /// The latest events and how many were forgotten; taken once per dropped or reordered
    /// packet.
    events: Mutex<(VecDeque<PacketEvent>, u64)>,
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
            held: AtomicU64::new(0),
            reordered: AtomicU64::new(0),
            packets_out: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            events: Mutex::new((VecDeque::new(), 0)),
            hists: Mutex::new([h.clone(), h]),
        })
    }

    fn snapshot(&self) -> DirectionStats {
        // Copy under the lock, compute quantiles after: the writer must not wait for this.
        let [late, write] = self.hists.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (events, events_forgotten) = {
            let e = self.events.lock().unwrap_or_else(|p| p.into_inner());
            (e.0.iter().copied().collect(), e.1)
        };
        DirectionStats {
            packets_in: self.packets_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            overflow: self.overflow.load(Ordering::Relaxed),
            held: self.held.load(Ordering::Relaxed),
            reordered: self.reordered.load(Ordering::Relaxed),
            events,
            events_forgotten,
            packets_out: self.packets_out.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            lateness_ns: summarize(&late),
            write_ns: summarize(&write),
        }
    }

    fn log(&self, kind: EventKind, packet: PacketInfo) {
        let mut e = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if e.0.len() == EVENTS_KEPT {
            e.0.pop_front();
            e.1 += 1;
        }
        e.0.push_back(PacketEvent { kind, packet });
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
    /// Held out of order by the configured reordering (`release_ns` includes the extra hold).
    held: bool,
    /// Which packet of the direction it is, counting from 1 those the line admitted.
    index: u64,
}

impl DelayLine {
    /// Attaches to both devices and starts forwarding.
    pub fn start(spec: &DelayLineSpec) -> Result<Self, LabError> {
        let per_packet = |p: &LineParams| p.loss > 0.0 || p.reorder > 0.0;
        if spec.offload && (per_packet(&spec.a_to_b) || per_packet(&spec.b_to_a)) {
            return Err(LabError::InvalidSpec(
                "a delay line with loss or reordering cannot pass offload packets (both are \
                 per packet)"
                    .into(),
            ));
        }
        for p in [&spec.a_to_b, &spec.b_to_a] {
            if !(0.0..=1.0).contains(&p.reorder) {
                return Err(LabError::InvalidSpec(format!(
                    "reordering {} % is outside 0–100 %",
                    p.reorder * 100.0
                )));
            }
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
                    let track = params.reorder > 0.0;
                    write_loop(&to, &rx, spin, track, &shared, &stop);
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
    let mut sched = Scheduler::new(
        params.delay_ns,
        params.jitter_ns,
        params.loss,
        (params.reorder, params.reorder_hold_ns),
        params.seed,
    );
    let mut index = 0u64;
    // A 64 KiB GSO packet plus its virtio header (and room for larger GSO limits).
    let mut buf = vec![0u8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match (&*from).read(&mut buf) {
            Ok(n) => {
                // Timestamp first: everything after this is part of the line, not the path.
                let arrival = clock::now_ns();
                shared.packets_in.fetch_add(1, Ordering::Relaxed);
                shared.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                let Some(release) = sched.admit(arrival) else {
                    shared.lost.fetch_add(1, Ordering::Relaxed);
                    shared.log(EventKind::Dropped, packet::inspect(&buf[..n]).1);
                    continue;
                };
                index += 1;
                let held = Held {
                    data: buf[..n].to_vec(),
                    release_ns: release.at_ns,
                    held: release.held,
                    index,
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

/// Writes packets at their release times: the channel's in order, and the held ones (kept
/// aside, by release time) when theirs comes, before any later packet of the channel.
fn write_loop(
    to: &File,
    rx: &mpsc::Receiver<Held>,
    spin_ns: u64,
    track_order: bool,
    shared: &Shared,
    stop: &AtomicBool,
) {
    let mut aside: VecDeque<Held> = VecDeque::new();
    // Per flow, the highest index written: a packet below it was overtaken.
    let mut written: HashMap<u64, u64> = HashMap::new();
    let mut out = |p: Held| {
        clock::sleep_until(p.release_ns, spin_ns);
        write_one(to, &p, shared);
        if track_order {
            let (flow, info) = packet::inspect(&p.data);
            if written.len() >= FLOWS_TRACKED {
                written.clear();
            }
            let top = written.entry(flow).or_insert(0);
            if *top > p.index {
                shared.reordered.fetch_add(1, Ordering::Relaxed);
                shared.log(EventKind::Reordered, info);
            } else {
                *top = p.index;
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let wait = aside.front().map_or(POLL, |h| {
            Duration::from_nanos(h.release_ns.saturating_sub(clock::now_ns())).min(POLL)
        });
        let next = match rx.recv_timeout(wait) {
            Ok(h) => Some(h),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        // Held packets due before the next one (or by now) go first.
        let due = next.as_ref().map_or_else(clock::now_ns, |h| h.release_ns);
        while aside.front().is_some_and(|h| h.release_ns <= due) {
            if let Some(h) = aside.pop_front() {
                out(h);
            }
        }
        match next {
            Some(h) if h.held => {
                shared.held.fetch_add(1, Ordering::Relaxed);
                // Jitter keeps release times in order and the hold is the same for all, so
                // the held ones stay sorted by pushing at the back.
                aside.push_back(h);
            }
            Some(h) => out(h),
            None => {}
        }
    }
}

fn write_one(to: &File, held: &Held, shared: &Shared) {
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
