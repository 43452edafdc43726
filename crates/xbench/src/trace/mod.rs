//! A hop view of a test's own path (`--trace`), built while the test runs: probes with rising
//! TTLs on the test's protocol, from one source port to the server's port, so that routers
//! that spread flows over several paths (ECMP) keep every probe on one of them — the flow
//! identifier stays constant, as Paris traceroute keeps it. Unprivileged: the answers come
//! from the probe sockets' error queues (`probe`).
//!
//! Probes go one at a time, at most [`TraceConfig::rate`] a second, and each TTL is tried in
//! turn up to the server; a round starts again at TTL 1. At the end each hop's loss and RTT
//! percentiles over the test, and its reverse name when it resolves quickly (`names`), make
//! a [`TraceReport`]. Not for: interpreting the hops.

mod names;
mod probe;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use self::probe::{Answer, Prober};
use crate::report::{Hop, HopRtt, TraceProtocol, TraceReport};

/// How a trace probes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceConfig {
    /// Probes per second, at most. A probe is a TCP SYN or a small datagram: at 5 a second,
    /// under 500 bytes a second each way.
    pub rate: f64,
    /// Highest TTL tried.
    pub max_ttl: u8,
    /// How long a probe waits for its answer.
    pub timeout: Duration,
    /// Time for all reverse-name lookups at the end, together.
    pub names_within: Duration,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            rate: 5.0,
            max_ttl: 30,
            timeout: Duration::from_secs(1),
            names_within: Duration::from_millis(500),
        }
    }
}

/// Silent TTLs in a row, before the server has answered, after which a round starts again.
const MAX_SILENT_IN_A_ROW: u8 = 6;

/// A trace running beside a test, on its own thread.
#[derive(Debug)]
pub struct Tracer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<TraceReport>>,
    config: TraceConfig,
}

impl Tracer {
    /// Starts probing `target` from `local` with `protocol`.
    pub fn start(
        protocol: TraceProtocol,
        local: IpAddr,
        target: SocketAddr,
        config: TraceConfig,
    ) -> Tracer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("xbench-trace".into())
            .spawn(move || run(protocol, local, target, config, &flag))
            .ok();
        Tracer {
            stop,
            thread,
            config,
        }
    }

    /// Stops probing (within one wait slice of 50 ms), looks up the hops' names, and reports.
    pub fn finish(mut self) -> Option<TraceReport> {
        self.stop.store(true, Ordering::Relaxed);
        let mut report = self.thread.take()?.join().ok()?;
        let addrs: Vec<IpAddr> = report.hops.iter().filter_map(|h| h.address).collect();
        let names = names::reverse(&addrs, self.config.names_within);
        for h in &mut report.hops {
            h.name = h.address.and_then(|a| names.get(&a).cloned());
        }
        Some(report)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What one TTL's probes met.
#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    rtts_us: Vec<f64>,
    from: BTreeMap<IpAddr, u64>,
    destination: bool,
}

fn run(
    protocol: TraceProtocol,
    local: IpAddr,
    target: SocketAddr,
    config: TraceConfig,
    stop: &AtomicBool,
) -> TraceReport {
    // Long on purpose: the TTL walk is one state machine: the pace, the current TTL, the silent
    // streak and the tallies change together on every probe's answer.
    let start = Instant::now();
    let mut report = TraceReport {
        protocol,
        source: SocketAddr::new(local, 0),
        target,
        probes: 0,
        seconds: 0.0,
        destination_ttl: None,
        hops: Vec::new(),
        error: None,
    };
    let mut prober = match Prober::new(protocol, local, target) {
        Ok(p) => p,
        Err(e) => {
            report.error = Some(format!("cannot probe: {e}"));
            return report;
        }
    };
    report.source = prober.source();
    let gap = Duration::from_secs_f64(1.0 / config.rate.clamp(0.1, 100.0));
    let max_ttl = config.max_ttl.clamp(1, 64);
    let mut tallies: BTreeMap<u8, Tally> = BTreeMap::new();
    let (mut ttl, mut silent_in_a_row) = (1u8, 0u8);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // The pace: one probe per gap, whatever the last one waited.
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        next = Instant::now() + gap;
        let answer = match prober.probe(ttl, config.timeout, stop) {
            Ok(a) => a,
            Err(e) => {
                report.error = Some(format!("probing stopped: {e}"));
                break;
            }
        };
        // A probe cut short by the end of the test was not given its time: not counted.
        if answer == Answer::Silent && stop.load(Ordering::Relaxed) {
            break;
        }
        report.probes += 1;
        let t = tallies.entry(ttl).or_default();
        t.sent += 1;
        let mut reached = false;
        match answer {
            Answer::Hop { from, rtt } | Answer::Unreachable { from, rtt } => {
                t.rtts_us.push(rtt.as_secs_f64() * 1e6);
                *t.from.entry(from).or_default() += 1;
                silent_in_a_row = 0;
            }
            Answer::Destination { from, rtt } => {
                t.rtts_us.push(rtt.as_secs_f64() * 1e6);
                *t.from.entry(from).or_default() += 1;
                t.destination = true;
                reached = true;
                silent_in_a_row = 0;
                report.destination_ttl = Some(report.destination_ttl.map_or(ttl, |d| d.min(ttl)));
            }
            Answer::Silent => silent_in_a_row += 1,
        }
        let last = report.destination_ttl.unwrap_or(max_ttl);
        ttl = if reached
            || ttl >= last
            || (report.destination_ttl.is_none() && silent_in_a_row >= MAX_SILENT_IN_A_ROW)
        {
            silent_in_a_row = 0;
            1
        } else {
            ttl + 1
        };
    }
    report.seconds = start.elapsed().as_secs_f64();
    report.hops = hops(&tallies, report.destination_ttl);
    report
}

/// The hops up to the server (or, when it never answered, up to the last TTL that did, with
/// the silent ones after it left out).
fn hops(tallies: &BTreeMap<u8, Tally>, destination: Option<u8>) -> Vec<Hop> {
    let last = destination.or_else(|| {
        tallies
            .iter()
            .rev()
            .find(|(_, t)| !t.from.is_empty())
            .map(|(&ttl, _)| ttl)
    });
    let Some(last) = last else {
        return Vec::new();
    };
    (1..=last)
        .map(|ttl| {
            let empty = Tally::default();
            let t = tallies.get(&ttl).unwrap_or(&empty);
            let mut by_count: Vec<(&IpAddr, &u64)> = t.from.iter().collect();
            by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let answered = t.rtts_us.len() as u64;
            Hop {
                ttl,
                address: by_count.first().map(|(a, _)| **a),
                other_addresses: by_count.iter().skip(1).map(|(a, _)| **a).collect(),
                name: None,
                destination: t.destination && Some(ttl) == destination,
                sent: t.sent,
                answered,
                loss_percent: if t.sent > 0 {
                    (t.sent - answered) as f64 * 100.0 / t.sent as f64
                } else {
                    0.0
                },
                rtt: HopRtt::of(&t.rtts_us),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    #[test]
    fn a_trace_to_a_local_server_finds_it_at_ttl_1() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = l.local_addr().unwrap();
        // Accept and drop whatever the probes open, as a server would.
        std::thread::spawn(move || for _ in l.incoming() {});
        let t = Tracer::start(
            TraceProtocol::Tcp,
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            target,
            TraceConfig {
                rate: 50.0,
                ..TraceConfig::default()
            },
        );
        std::thread::sleep(Duration::from_millis(300));
        let r = t.finish().unwrap();
        assert_eq!(r.error, None);
        assert_eq!(r.destination_ttl, Some(1));
        assert_eq!(r.routed_hops(), Some(0));
        assert_eq!(r.hops.len(), 1);
        let h = &r.hops[0];
        assert!(h.destination && h.sent >= 2, "{h:?}");
        assert_eq!(h.address, Some(target.ip()));
        assert_eq!(h.answered, h.sent);
        assert!(h.rtt.is_some());
        // Every probe from the one source port.
        assert_ne!(r.source.port(), 0);
    }

    #[test]
    fn hops_are_listed_to_the_destination_with_silent_ones_as_such() {
        let mut tallies = BTreeMap::new();
        let a = IpAddr::from([198, 18, 0, 2]);
        let d = IpAddr::from([198, 18, 2, 2]);
        tallies.insert(
            1,
            Tally {
                sent: 4,
                rtts_us: vec![100.0, 120.0, 110.0],
                from: BTreeMap::from([(a, 3)]),
                destination: false,
            },
        );
        tallies.insert(
            2,
            Tally {
                sent: 4,
                ..Tally::default()
            },
        );
        tallies.insert(
            3,
            Tally {
                sent: 4,
                rtts_us: vec![20_000.0; 4],
                from: BTreeMap::from([(d, 4)]),
                destination: true,
            },
        );
        let h = hops(&tallies, Some(3));
        assert_eq!(h.len(), 3);
        assert_eq!(h[0].address, Some(a));
        assert_eq!(h[0].loss_percent, 25.0);
        assert_eq!(h[0].rtt.unwrap().p50_us, 110.0);
        assert_eq!(
            (h[1].address, h[1].answered, h[1].loss_percent),
            (None, 0, 100.0)
        );
        assert!(h[2].destination);
        assert_eq!(h[2].rtt.unwrap().min_us, 20_000.0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let r = HopRtt::of(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!(
            (r.min_us, r.p50_us, r.p90_us, r.max_us),
            (1.0, 3.0, 5.0, 5.0)
        );
        assert_eq!(r.mean_us, 3.0);
        assert!(HopRtt::of(&[]).is_none());
    }
}
