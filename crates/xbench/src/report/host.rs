//! What a report says of the hosts at both ends (issue 33): the interface each end's route
//! leaves by, its MTU, what its counters and its driver's statistics counted over the test
//! (EC2's allowance counters among them), and what those allowances say of the rate.
//!
//! Reading them is [`crate::host`]'s job; these are the values a report carries, in Rust and in
//! JSON (`hosts` in `schema/report.schema.json`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Both ends' hosts, as far as each could read its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hosts {
    /// The client's, read by the client.
    pub client: Option<HostReport>,
    /// The server's, as the server reported it; `None` from a server that does not (an older
    /// xbench, iperf3) or whose report did not arrive.
    pub server: Option<HostReport>,
    /// What the allowance counters of both ends say of this test's rate; empty when no
    /// allowance was exceeded or none is counted.
    #[serde(default)]
    pub verdicts: Vec<AllowanceVerdict>,
    /// The path's packet sizes: the interfaces' MTU, the path MTU and MSS the senders' TCP
    /// used, and whether the MSS is below what they allow. `None` for tests whose senders
    /// reported no MSS (request/response, UDP) or whose interfaces were not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_mtu: Option<PathMtu>,
}

/// A throughput test's packet sizes ([`crate::host::mtu`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathMtu {
    /// The smaller of the two ends' interface MTUs (the client's alone when the server's is
    /// not known), bytes.
    pub interface_mtu: u32,
    /// The smallest path MTU the senders' TCP found (`tcpi_pmtu`), bytes.
    pub pmtu: u32,
    /// The smallest MSS the senders used (`tcpi_snd_mss`), bytes.
    pub mss: u32,
    /// The MSS the smaller of `interface_mtu` and `pmtu` allows: less the IP and TCP headers
    /// and 12 bytes of TCP timestamps.
    pub allowed_mss: u32,
    /// What the sizes say.
    pub finding: MtuFinding,
}

/// What a test's packet sizes say of its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MtuFinding {
    /// Full-size segments for the interfaces' MTU.
    Full,
    /// TCP found a smaller path MTU than the interfaces' (ICMP "fragmentation needed" reached
    /// the sender) and used full-size segments for it.
    PathMtuFound,
    /// The MSS is below what the MTUs allow: clamped on the path (a VPN, a firewall), or
    /// lowered by TCP's black-hole probing after large segments vanished (ICMP filtered).
    MssBelow,
}

impl fmt::Display for PathMtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::units::count;
        let (mtu, pmtu, mss, allowed) = (
            count(self.interface_mtu.into()),
            count(self.pmtu.into()),
            count(self.mss.into()),
            count(self.allowed_mss.into()),
        );
        match self.finding {
            MtuFinding::Full => write!(f, "MTU {pmtu} end to end, the interfaces'; MSS {mss}"),
            MtuFinding::PathMtuFound => write!(
                f,
                "MTU {pmtu} found by TCP on the path, below the interfaces' {mtu} (ICMP \
                 \"fragmentation needed\" reached the sender); MSS {mss}"
            ),
            MtuFinding::MssBelow => write!(
                f,
                "MSS {mss} is below the {allowed} a {} path allows: something on the path \
                 clamps the MSS (a VPN gateway, a firewall), or TCP lowered it after full-size \
                 segments vanished — ICMP \"fragmentation needed\" filtered on the path (an MTU \
                 black hole)",
                count(self.interface_mtu.min(self.pmtu).into())
            ),
        }
    }
}

/// One end's host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    /// Where the host runs, when it is an EC2 instance whose metadata service (IMDSv2)
    /// answered within 100 ms; `None` elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud: Option<Placement>,
    /// The interface the test's route leaves by, and what it counted; `None` when it could
    /// not be found or read (`error` says why).
    pub interface: Option<InterfaceReport>,
    /// Why the interface could not be read, or stopped being read during the test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where an EC2 instance runs, from its instance metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The instance type (`m5.large`): its allowances follow from it.
    pub instance_type: String,
    /// The region (`us-east-1`).
    pub region: String,
    /// The Availability Zone's ID (`use1-az4`): the same zone in every account, unlike its
    /// name, so two accounts' runs can be told to be in one zone or not.
    pub availability_zone_id: String,
}

/// An interface and what it counted over the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterfaceReport {
    /// Its name (`ens5`, `eth0`).
    pub name: String,
    /// Its index in its network namespace.
    pub index: u32,
    /// Its MTU, bytes: the largest IP packet it sends without fragmenting.
    pub mtu: u32,
    /// The driver's name (`ena`, `veth`), or the kernel's kind of a virtual device, when
    /// either is known.
    pub driver: Option<String>,
    /// Seconds from the first reading to the last: every count below covers this span, which
    /// contains the test's measured window (the client reads from the moment its data starts
    /// to flow, the server from its data connections' arrival, both until their results).
    pub span_s: f64,
    /// What the kernel's own counters of the interface counted over the span.
    pub counters: LinkCounters,
    /// The driver's own statistics (what `ethtool -S` prints) over the span.
    pub nic: NicStatistics,
    /// EC2's allowance counters over the span, or that the driver does not count them.
    pub allowances: Allowances,
    /// Per interval of the test: what the counters and the allowances counted.
    #[serde(default)]
    pub intervals: Vec<InterfaceInterval>,
}

/// The kernel's generic counters of an interface (`struct rtnl_link_stats64`, the numbers in
/// `/sys/class/net/IF/statistics/`), as changes over a span. Every driver has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LinkCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Send errors.
    pub tx_errors: u64,
    /// Packets received and dropped (no buffer, a filter, an unknown protocol).
    pub rx_dropped: u64,
    /// Packets dropped on the way out (a full queue, no carrier).
    pub tx_dropped: u64,
    /// Packets the NIC missed for want of a receive buffer.
    pub rx_missed: u64,
}

impl LinkCounters {
    /// Whether any drop or error counter moved.
    pub fn dropped_or_errored(&self) -> bool {
        self.rx_errors + self.tx_errors + self.rx_dropped + self.tx_dropped + self.rx_missed > 0
    }
}

/// The driver's own statistics over a span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum NicStatistics {
    /// The driver keeps statistics.
    Read {
        /// How many it keeps.
        kept: u32,
        /// Those that changed over the span, by name, with how much (a gauge can fall).
        /// Per-queue statistics are summed over the queues under a `*` (`queue_*_tx_cnt`).
        changed: BTreeMap<String, i64>,
    },
    /// The driver keeps none (loopback, dummy, many virtual devices).
    None,
    /// They could not be read.
    Unreadable {
        /// Why.
        error: String,
    },
}

/// EC2's allowance counters of an ENA interface over a span (ENA driver 2.2.10 and later).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Allowances {
    /// The driver counts them. Each counts the packets the instance queued or dropped because
    /// that allowance was exceeded.
    Counted(AllowanceCounts),
    /// The driver counts none of them: not an ENA interface (not EC2, or a lab), or an ENA
    /// driver older than 2.2.10. Nothing is known of the allowances, which is not zero.
    NotCounted,
}

impl Allowances {
    /// The counts, when the driver keeps them.
    pub fn counts(&self) -> Option<&AllowanceCounts> {
        match self {
            Allowances::Counted(c) => Some(c),
            Allowances::NotCounted => None,
        }
    }
}

/// Packets queued or dropped because an allowance was exceeded; `None` for one this driver
/// does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AllowanceCounts {
    /// The instance's inbound aggregate bandwidth (`bw_in_allowance_exceeded`).
    pub bw_in_allowance_exceeded: Option<u64>,
    /// The instance's outbound aggregate bandwidth (`bw_out_allowance_exceeded`).
    pub bw_out_allowance_exceeded: Option<u64>,
    /// The instance's packets per second, both ways (`pps_allowance_exceeded`).
    pub pps_allowance_exceeded: Option<u64>,
    /// The instance's tracked connections (`conntrack_allowance_exceeded`): packets of new
    /// connections dropped.
    pub conntrack_allowance_exceeded: Option<u64>,
    /// The interface's packets per second to link-local services: DNS, instance metadata,
    /// time sync (`linklocal_allowance_exceeded`).
    pub linklocal_allowance_exceeded: Option<u64>,
    /// Tracked connections the instance could still open, its lowest reading over the span
    /// (`conntrack_allowance_available`, a gauge; ENA 2.8.0 and later).
    #[serde(default)]
    pub conntrack_allowance_available: Option<u64>,
}

impl AllowanceCounts {
    /// Each exceeded-counter the driver keeps, with its count.
    pub fn exceeded(&self) -> impl Iterator<Item = (Allowance, u64)> + '_ {
        Allowance::ALL
            .into_iter()
            .filter_map(|a| self.get(a).map(|n| (a, n)))
    }

    /// The count of one allowance, when kept.
    pub fn get(&self, a: Allowance) -> Option<u64> {
        match a {
            Allowance::BwIn => self.bw_in_allowance_exceeded,
            Allowance::BwOut => self.bw_out_allowance_exceeded,
            Allowance::Pps => self.pps_allowance_exceeded,
            Allowance::Conntrack => self.conntrack_allowance_exceeded,
            Allowance::Linklocal => self.linklocal_allowance_exceeded,
        }
    }
}

/// One interval of the test, as an interface counted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterfaceInterval {
    /// Start, seconds since this end started reading.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// The kernel's counters over the interval.
    pub counters: LinkCounters,
    /// The allowance counters over the interval, when the driver keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowances: Option<AllowanceCounts>,
}

/// One of EC2's per-instance network allowances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Allowance {
    /// Inbound aggregate bandwidth.
    BwIn,
    /// Outbound aggregate bandwidth.
    BwOut,
    /// Packets per second, both ways.
    Pps,
    /// Tracked connections.
    Conntrack,
    /// Packets per second to link-local services.
    Linklocal,
}

impl Allowance {
    /// Every allowance, in the order the driver lists them.
    pub const ALL: [Allowance; 5] = [
        Allowance::BwIn,
        Allowance::BwOut,
        Allowance::Pps,
        Allowance::Conntrack,
        Allowance::Linklocal,
    ];

    /// The driver's name of its counter (`ethtool -S`).
    pub fn counter(self) -> &'static str {
        match self {
            Allowance::BwIn => "bw_in_allowance_exceeded",
            Allowance::BwOut => "bw_out_allowance_exceeded",
            Allowance::Pps => "pps_allowance_exceeded",
            Allowance::Conntrack => "conntrack_allowance_exceeded",
            Allowance::Linklocal => "linklocal_allowance_exceeded",
        }
    }

    /// What it limits, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Allowance::BwIn => "inbound bandwidth allowance",
            Allowance::BwOut => "outbound bandwidth allowance",
            Allowance::Pps => "packets-per-second allowance",
            Allowance::Conntrack => "connection-tracking allowance",
            Allowance::Linklocal => "link-local allowance (DNS, instance metadata, time sync)",
        }
    }
}

/// Which end of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The client's host.
    Client,
    /// The server's host.
    Server,
}

impl End {
    /// `client` or `server`.
    pub fn name(self) -> &'static str {
        match self {
            End::Client => "client",
            End::Server => "server",
        }
    }
}

/// What an exceeded allowance says of the test's rate, derived from named figures
/// ([`crate::host::allowance::verdicts`]): a data value with what it rests on, so a report,
/// a diagnosis or a script can weigh it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllowanceVerdict {
    /// Whose instance.
    pub end: End,
    /// Which allowance.
    pub allowance: Allowance,
    /// Packets queued or dropped because it was exceeded, over `span_s`.
    pub exceeded: u64,
    /// The packets the interface moved the way the allowance limits (sent for outbound,
    /// received for inbound, both for packets per second) over the same span, when known:
    /// `exceeded` as a share of these says whether the shaping was the rule or a burst.
    pub packets: Option<u64>,
    /// The span of the counts, seconds.
    pub span_s: f64,
    /// What it means for the rate.
    pub bearing: Bearing,
}

/// How an exceeded allowance bears on the test's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bearing {
    /// The test's data went the way this allowance limits and at least 1 % of the packets
    /// that way were shaped (or the share is unknown): the rate is the instance's limit.
    LimitsRate,
    /// The test's data went the way this allowance limits, but under 1 % of the packets were
    /// shaped: bursts met the limit; the rate is mostly below it.
    Bursts,
    /// New connections were dropped at the instance (connection tracking).
    DropsConnections,
    /// Traffic this test did not send was shaped (link-local services, or a bandwidth
    /// allowance the other way from the test's data): it does not explain the rate.
    OtherTraffic,
}

impl fmt::Display for AllowanceVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = crate::units::count(self.exceeded);
        let times = if self.exceeded == 1 { "time" } else { "times" };
        write!(
            f,
            "the {} instance's {} was exceeded {n} {times}",
            self.end.name(),
            self.allowance.describe()
        )?;
        let share = self
            .packets
            .filter(|&p| p > 0)
            .map(|p| self.exceeded as f64 * 100.0 / p as f64);
        match self.bearing {
            Bearing::LimitsRate => {
                f.write_str(": this rate is the instance's limit, not the path's")
            }
            Bearing::Bursts => write!(
                f,
                " ({} % of the packets): bursts met the instance's limit; the rate is below it",
                crate::units::number(share.unwrap_or(0.0))
            ),
            Bearing::DropsConnections => {
                f.write_str(": the instance dropped packets of new connections, not the path")
            }
            Bearing::OtherTraffic => {
                f.write_str(": traffic other than this test's; it does not explain this rate")
            }
        }
    }
}
