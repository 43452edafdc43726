//! Reads one end's interface over a test: found from the test's addresses, read at the start,
//! at every interval and at the end, and turned into an [`InterfaceReport`].
//!
//! Synchronous and cheap (two netlink round trips and one ioctl per reading); the
//! [`monitor`](super::monitor) runs it on the test's clock. Not for: what the allowance counters
//! mean ([`allowance`](super::allowance)).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Instant;

use super::allowance;
use super::ethtool::Nic;
use super::netlink::{self, Link, LinkStats};
use crate::report::{
    Allowances, HostReport, InterfaceInterval, InterfaceReport, LinkCounters, NicStatistics,
};

/// One end's interface, read over a test.
#[derive(Debug)]
pub(crate) struct Sampler {
    /// The interface, or why it could not be found.
    iface: Result<Iface, String>,
    t0: Instant,
    first: Option<Reading>,
    prev: Option<Reading>,
    intervals: Vec<InterfaceInterval>,
    /// Readings tried since the start, for the interval schedule (a failed one counts too).
    ticks: u32,
    /// The lowest reading of the available-connections gauge.
    lowest_available: Option<u64>,
    /// A reading after the first that failed: the counts stop at the last good one.
    error: Option<String>,
}

#[derive(Debug)]
struct Iface {
    link: Link,
    /// The driver's statistics, or why they cannot be read.
    nic: Result<Nic, String>,
}

/// One reading of an interface.
#[derive(Debug, Clone)]
struct Reading {
    at: Instant,
    link: LinkStats,
    /// The driver's statistics in the order of its names; `None` when unreadable.
    nic: Option<Vec<u64>>,
}

impl Sampler {
    /// Finds the interface the route from `local` to `peer` leaves by and reads it.
    pub(crate) fn open(local: IpAddr, peer: IpAddr) -> Sampler {
        let iface = find(local, peer);
        let mut s = Sampler {
            iface,
            t0: Instant::now(),
            first: None,
            prev: None,
            intervals: Vec::new(),
            ticks: 0,
            lowest_available: None,
            error: None,
        };
        s.restart();
        s
    }

    /// Starts the span again from now: the data starts to flow.
    pub(crate) fn restart(&mut self) {
        self.t0 = Instant::now();
        self.intervals.clear();
        self.ticks = 0;
        self.lowest_available = None;
        self.error = None;
        self.first = match self.read() {
            Ok(r) => {
                // The span and its intervals count from this reading, not from just before
                // it: a thread preempted between the two would leave the intervals' ends
                // and the span apart.
                self.t0 = r.at;
                Some(r)
            }
            Err(e) => {
                self.error = Some(e);
                None
            }
        };
        self.prev = self.first.clone();
    }

    /// Reads now and closes an interval there; the interval, if the reading worked.
    pub(crate) fn tick(&mut self) -> Option<InterfaceInterval> {
        self.ticks = self.ticks.saturating_add(1);
        let prev = self.prev.clone()?;
        let now = match self.read() {
            Ok(r) => r,
            Err(e) => {
                self.error.get_or_insert(e);
                return None;
            }
        };
        let iv = self.interval(&prev, &now);
        self.prev = Some(now);
        self.intervals.push(iv.clone());
        Some(iv)
    }

    /// When the next interval ends, for intervals of `every`.
    pub(crate) fn next_due(&self, every: std::time::Duration) -> Instant {
        self.t0 + every.saturating_mul(self.ticks.saturating_add(1))
    }

    /// Reads a last time and reports the span.
    pub(crate) fn finish(mut self) -> HostReport {
        let last_tick = self.prev.as_ref().map(|p| p.at);
        // The tail after the last interval, so the intervals add up to the span.
        if last_tick.is_some_and(|t| t.elapsed().as_millis() >= 1) || self.intervals.is_empty() {
            self.tick();
        }
        let iface = match &self.iface {
            Ok(i) => i,
            Err(e) => {
                return HostReport {
                    cloud: None,
                    interface: None,
                    error: Some(e.clone()),
                };
            }
        };
        let (Some(first), Some(last)) = (&self.first, &self.prev) else {
            return HostReport {
                cloud: None,
                interface: None,
                error: self.error.clone(),
            };
        };
        let (nic, allowances) = match (&iface.nic, &first.nic, &last.nic) {
            (Err(e), _, _) => (
                NicStatistics::Unreadable { error: e.clone() },
                Allowances::NotCounted,
            ),
            (Ok(n), _, _) if n.names.is_empty() => (NicStatistics::None, Allowances::NotCounted),
            (Ok(n), Some(a), Some(b)) => (
                NicStatistics::Read {
                    kept: n.names.len() as u32,
                    changed: changes(&n.names, a, b),
                },
                allowance::counts(&n.names, a, b, self.lowest_available),
            ),
            (Ok(_), _, _) => (
                NicStatistics::Unreadable {
                    error: self
                        .error
                        .clone()
                        .unwrap_or_else(|| "the statistics could not be read".into()),
                },
                Allowances::NotCounted,
            ),
        };
        HostReport {
            cloud: None,
            interface: Some(InterfaceReport {
                name: iface.link.name.clone(),
                index: iface.link.index,
                mtu: iface.link.mtu,
                driver: match &iface.nic {
                    Ok(n) => n.driver.clone(),
                    Err(_) => None,
                }
                .or_else(|| iface.link.kind.clone()),
                span_s: last.at.duration_since(first.at).as_secs_f64(),
                counters: link_counters(&first.link, &last.link),
                nic,
                allowances,
                intervals: std::mem::take(&mut self.intervals),
            }),
            error: self.error.clone(),
        }
    }

    fn read(&mut self) -> Result<Reading, String> {
        let iface = self.iface.as_ref().map_err(Clone::clone)?;
        let at = Instant::now();
        let link = netlink::link(iface.link.index)
            .map_err(|e| format!("reading {}'s counters: {e}", iface.link.name))?;
        let nic = match &iface.nic {
            Ok(n) => match n.read() {
                Ok(v) => Some(v),
                Err(e) => {
                    self.error.get_or_insert_with(|| {
                        format!("reading {}'s statistics: {e}", iface.link.name)
                    });
                    None
                }
            },
            Err(_) => None,
        };
        if let (Ok(n), Some(v)) = (&iface.nic, &nic)
            && let Some(i) = n
                .names
                .iter()
                .position(|x| x == allowance::CONNTRACK_AVAILABLE)
        {
            let r = v[i];
            self.lowest_available = Some(self.lowest_available.map_or(r, |l| l.min(r)));
        }
        Ok(Reading {
            at,
            link: link.stats,
            nic,
        })
    }

    fn interval(&self, a: &Reading, b: &Reading) -> InterfaceInterval {
        let allowances = match (&self.iface, &a.nic, &b.nic) {
            (Ok(Iface { nic: Ok(n), .. }), Some(x), Some(y)) => {
                allowance::counts(&n.names, x, y, None).counts().copied()
            }
            _ => None,
        };
        InterfaceInterval {
            start_s: a.at.duration_since(self.t0).as_secs_f64(),
            end_s: b.at.duration_since(self.t0).as_secs_f64(),
            counters: link_counters(&a.link, &b.link),
            allowances,
        }
    }
}

fn find(local: IpAddr, peer: IpAddr) -> Result<Iface, String> {
    let index = netlink::route_oif(peer, Some(local))
        .map_err(|e| format!("finding the route from {local} to {peer}: {e}"))?;
    let link = netlink::link(index).map_err(|e| format!("reading interface {index}: {e}"))?;
    let nic = Nic::open(&link.name).map_err(|e| format!("{}: {e}", link.name));
    Ok(Iface { link, nic })
}

/// The change of each generic counter; a counter that fell (the interface was re-created)
/// counts 0.
pub(crate) fn link_counters(a: &LinkStats, b: &LinkStats) -> LinkCounters {
    LinkCounters {
        rx_packets: b.rx_packets.saturating_sub(a.rx_packets),
        tx_packets: b.tx_packets.saturating_sub(a.tx_packets),
        rx_bytes: b.rx_bytes.saturating_sub(a.rx_bytes),
        tx_bytes: b.tx_bytes.saturating_sub(a.tx_bytes),
        rx_errors: b.rx_errors.saturating_sub(a.rx_errors),
        tx_errors: b.tx_errors.saturating_sub(a.tx_errors),
        rx_dropped: b.rx_dropped.saturating_sub(a.rx_dropped),
        tx_dropped: b.tx_dropped.saturating_sub(a.tx_dropped),
        rx_missed: b.rx_missed.saturating_sub(a.rx_missed),
    }
}

/// The driver statistics that changed from `a` to `b`, per-queue ones summed over the queues.
pub(crate) fn changes(names: &[String], a: &[u64], b: &[u64]) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for ((name, &x), &y) in names.iter().zip(a).zip(b) {
        if x != y {
            let d = (y as i128 - x as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
            *out.entry(queue_summed(name)).or_default() += d;
        }
    }
    out.retain(|_, v| *v != 0);
    out
}

/// `queue_3_tx_cnt` → `queue_*_tx_cnt`, `rx_queue_12_drops` → `rx_queue_*_drops`: a driver
/// with 32 queues keeps 32 copies of each, and a report wants their sum.
fn queue_summed(name: &str) -> String {
    let Some(at) = name.find("queue_") else {
        return name.to_owned();
    };
    let digits_from = at + "queue_".len();
    let rest = &name[digits_from..];
    let n = rest.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || !(rest.len() == n || rest.as_bytes()[n] == b'_') {
        return name.to_owned();
    }
    format!("{}*{}", &name[..digits_from], &rest[n..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn per_queue_statistics_are_summed_others_kept() {
        assert_eq!(queue_summed("queue_3_tx_cnt"), "queue_*_tx_cnt");
        assert_eq!(queue_summed("rx_queue_12_drops"), "rx_queue_*_drops");
        assert_eq!(queue_summed("tx_queue_0"), "tx_queue_*");
        assert_eq!(
            queue_summed("bw_in_allowance_exceeded"),
            "bw_in_allowance_exceeded"
        );
        assert_eq!(queue_summed("queue_stop"), "queue_stop");
        assert_eq!(queue_summed("tx_queue_1x_bytes"), "tx_queue_1x_bytes");
        let names: Vec<String> = ["queue_0_tx_cnt", "queue_1_tx_cnt", "gauge", "same"]
            .map(String::from)
            .to_vec();
        let c = changes(&names, &[10, 20, 9, 5], &[15, 27, 4, 5]);
        assert_eq!(c.get("queue_*_tx_cnt"), Some(&12));
        assert_eq!(c.get("gauge"), Some(&-5));
        assert!(!c.contains_key("same"));
    }

    #[test]
    fn loopback_is_read_and_reported_without_driver_statistics() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut s = Sampler::open(lo, lo);
        // Traffic on lo between the readings.
        let l = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..10 {
            l.send_to(b"x", l.local_addr().unwrap()).unwrap();
        }
        let iv = s.tick().expect("an interval");
        assert!(iv.end_s >= iv.start_s);
        let r = s.finish();
        assert_eq!(r.error, None);
        let i = r.interface.unwrap();
        assert_eq!(i.name, "lo");
        assert_eq!(i.driver.as_deref(), Some("loopback"));
        assert!(i.mtu >= 1500);
        // At least our ten datagrams (other tests share lo).
        assert!(i.counters.rx_packets >= 10, "{:?}", i.counters);
        assert_eq!(i.nic, NicStatistics::None);
        assert_eq!(i.allowances, Allowances::NotCounted);
        // The intervals add up to the span.
        let summed: u64 = i.intervals.iter().map(|v| v.counters.rx_packets).sum();
        assert_eq!(summed, i.counters.rx_packets);
    }

    #[test]
    fn no_route_is_an_error_in_the_report_not_a_failure() {
        // A source address this host does not have: the kernel finds no route from it.
        let s = Sampler::open(
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, 77)),
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)),
        );
        let r = s.finish();
        assert!(r.interface.is_none());
        assert!(r.error.unwrap().contains("finding the route"));
    }

    /// Runs `body` on a thread inside a new network namespace whose `xa` (10.33.0.1/24) is a
    /// veth to `xb` (10.33.0.2/24) in a second one; gives `xb`'s index there too. Removes
    /// both namespaces after.
    fn across_a_veth<T: Send + 'static>(
        body: impl FnOnce() -> T + Send + 'static,
    ) -> Option<(T, u32)> {
        use std::process::Command;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "needs root for a network namespace and CI=true forbids skipping it"
            );
            eprintln!("skipping: needs root for a network namespace");
            return None;
        }
        struct Ns(String);
        impl Drop for Ns {
            fn drop(&mut self) {
                let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
            }
        }
        let a = Ns(format!("xb33a-{}", std::process::id()));
        let b = Ns(format!("xb33b-{}", std::process::id()));
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        ip(&["netns", "add", &a.0]);
        ip(&["netns", "add", &b.0]);
        ip(&[
            "-n", &a.0, "link", "add", "xa", "type", "veth", "peer", "name", "xb", "netns", &b.0,
        ]);
        ip(&["-n", &a.0, "addr", "add", "10.33.0.1/24", "dev", "xa"]);
        ip(&["-n", &b.0, "addr", "add", "10.33.0.2/24", "dev", "xb"]);
        ip(&["-n", &a.0, "link", "set", "xa", "up"]);
        ip(&["-n", &b.0, "link", "set", "xb", "up"]);
        // "7: xb@if6: <…": the index before the colon.
        let shown = ip(&["-n", &b.0, "-o", "link", "show", "xb"]);
        let xb = shown.split(':').next().unwrap().trim().parse().unwrap();
        let path = format!("/run/netns/{}", a.0);
        let out = std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let ns = std::fs::File::open(path).unwrap();
            assert_eq!(
                // SAFETY: setns on an open namespace descriptor moves only this thread,
                // which ends with the closure.
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            body()
        })
        .join()
        .unwrap();
        Some((out, xb))
    }

    #[test]
    fn root_netns_veth_statistics_are_read_with_the_ethtool_ioctl() {
        let Some(((names, values, report), xb)) = across_a_veth(|| {
            let nic = Nic::open("xa").unwrap();
            let values = nic.read().unwrap();
            // The route to the peer's address leaves by xa: found, and read by name.
            let s = Sampler::open("10.33.0.1".parse().unwrap(), "10.33.0.2".parse().unwrap());
            (nic.names.clone(), values, s.finish())
        }) else {
            return;
        };
        let at = names
            .iter()
            .position(|n| n == "peer_ifindex")
            .expect("veth keeps peer_ifindex");
        assert_eq!(values[at], u64::from(xb), "{names:?}");
        assert_eq!(report.error, None);
        let i = report.interface.unwrap();
        assert_eq!(i.name, "xa");
        assert_eq!(i.driver.as_deref(), Some("veth"));
        assert!(matches!(i.nic, NicStatistics::Read { kept, .. } if kept as usize == names.len()));
        assert_eq!(i.allowances, Allowances::NotCounted);
    }
}
