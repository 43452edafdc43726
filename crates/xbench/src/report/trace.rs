//! What a report says of the hops of a test's own path (`--trace`, issue 33): per hop its
//! address, name, loss and round-trip times over the test, as `mtr --report` prints them.
//!
//! Probing is [`crate::trace`]'s job; these are the values a report carries.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// Which protocol the probes used: the test's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceProtocol {
    /// TCP SYNs to the server's port (TCP tests).
    Tcp,
    /// UDP datagrams to the server's data port (UDP tests).
    Udp,
}

/// The hop view of a test's path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceReport {
    /// The probes' protocol.
    pub protocol: TraceProtocol,
    /// Every probe's source address and port: one flow, so routers that spread flows over
    /// several paths (ECMP) keep the probes on one of them.
    pub source: SocketAddr,
    /// Every probe's destination: the server's address and the test's port.
    pub target: SocketAddr,
    /// Probes sent.
    pub probes: u64,
    /// Seconds probed (the test's length, at most).
    pub seconds: f64,
    /// The time-to-live at which the server answered, when it did: the hops before it are
    /// the routers between the ends.
    pub destination_ttl: Option<u8>,
    /// Per time-to-live, from 1.
    pub hops: Vec<Hop>,
    /// Why probing stopped early or never started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl TraceReport {
    /// Routers between the ends (hops before the destination), when it answered.
    pub fn routed_hops(&self) -> Option<usize> {
        self.destination_ttl
            .map(|t| usize::from(t).saturating_sub(1))
    }
}

/// One time-to-live's probes and what answered them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    /// The time-to-live (1: the first router).
    pub ttl: u8,
    /// Who answered most often; `None` when nothing answered.
    pub address: Option<IpAddr>,
    /// Others that answered at this TTL (routes that changed, or load balancing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_addresses: Vec<IpAddr>,
    /// `address`'s reverse name, when it resolved within the time allowed.
    pub name: Option<String>,
    /// Whether this is the server.
    pub destination: bool,
    /// Probes sent with this TTL.
    pub sent: u64,
    /// Probes answered.
    pub answered: u64,
    /// Unanswered probes as a share of those sent, percent.
    pub loss_percent: f64,
    /// Round-trip times of the answered probes.
    pub rtt: Option<HopRtt>,
}

/// Round-trip times to a hop, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HopRtt {
    /// Fastest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// Slowest.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Standard deviation (population).
    pub stddev_us: f64,
}

impl HopRtt {
    /// The statistics of `samples` (µs), `None` without any.
    pub fn of(samples: &[f64]) -> Option<HopRtt> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        // Nearest rank, as HdrHistogram and mtr read a percentile.
        let rank = |q: f64| s[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let mean = s.iter().sum::<f64>() / n as f64;
        let var = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        Some(HopRtt {
            min_us: s[0],
            p50_us: rank(0.5),
            p90_us: rank(0.9),
            max_us: s[n - 1],
            mean_us: mean,
            stddev_us: var.sqrt(),
        })
    }
}
