//! EC2's allowance counters, read by name from an ENA interface's driver statistics, and what
//! they say of a test's rate.
//!
//! EC2 shapes every instance's traffic to allowances (aggregate bandwidth each way, packets
//! per second, tracked connections, link-local packets per second) and the ENA driver (2.2.10
//! and later) counts every packet it queued or dropped because one was exceeded. A driver
//! without the counters — not ENA, or older — is reported as [`Allowances::NotCounted`],
//! never as zero. The verdicts are data values with the figures they rest on
//! ([`AllowanceVerdict`]); rendering them is the caller's. Not for: reading the statistics
//! (`ethtool`) or any other counter's meaning.

use crate::config::{StreamDirection, TestSpec, Workload};
use crate::report::{
    Allowance, AllowanceCounts, AllowanceVerdict, Allowances, Bearing, End, HostReport, Hosts,
};

/// The driver's name of the gauge of tracked connections still available.
pub const CONNTRACK_AVAILABLE: &str = "conntrack_allowance_available";

/// Share of the packets a direction moved that, shaped, makes the allowance the rate's limit
/// rather than a burst's.
pub const LIMITING_SHARE: f64 = 0.01;

/// The allowance counters over a span: each exceeded-counter's change from `before` to
/// `after` (both in the order of `names`), and the available-connections gauge: the lowest
/// reading over the span (`lowest_available`, which the caller tracks) or else `after`'s.
pub fn counts(
    names: &[String],
    before: &[u64],
    after: &[u64],
    lowest_available: Option<u64>,
) -> Allowances {
    let at = |name: &str| names.iter().position(|n| n == name);
    let change = |a: Allowance| {
        at(a.counter()).map(|i| {
            let (b, e) = (
                before.get(i).copied().unwrap_or(0),
                after.get(i).copied().unwrap_or(0),
            );
            e.saturating_sub(b)
        })
    };
    let c = AllowanceCounts {
        bw_in_allowance_exceeded: change(Allowance::BwIn),
        bw_out_allowance_exceeded: change(Allowance::BwOut),
        pps_allowance_exceeded: change(Allowance::Pps),
        conntrack_allowance_exceeded: change(Allowance::Conntrack),
        linklocal_allowance_exceeded: change(Allowance::Linklocal),
        conntrack_allowance_available: at(CONNTRACK_AVAILABLE).map(|i| {
            let latest = after.get(i).copied().unwrap_or(0);
            lowest_available.map_or(latest, |l| l.min(latest))
        }),
    };
    if c.exceeded().next().is_none() {
        Allowances::NotCounted
    } else {
        Allowances::Counted(c)
    }
}

/// Which ends' data a test sent: the way each bandwidth allowance bears on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFlow {
    /// The client sent test data.
    pub client_sends: bool,
    /// The server sent test data.
    pub server_sends: bool,
}

impl DataFlow {
    /// The flow of a test: its direction for throughput, both ways for request/response.
    pub fn of(spec: &TestSpec) -> DataFlow {
        match &spec.workload {
            Workload::Throughput(tp) => {
                let dirs = tp.direction.stream_directions();
                DataFlow {
                    client_sends: dirs.contains(&StreamDirection::ClientToServer),
                    server_sends: dirs.contains(&StreamDirection::ServerToClient),
                }
            }
            Workload::RequestResponse(_) => DataFlow {
                client_sends: true,
                server_sends: true,
            },
        }
    }

    fn sends(self, end: End) -> bool {
        match end {
            End::Client => self.client_sends,
            End::Server => self.server_sends,
        }
    }
}

/// What every allowance exceeded at either end says of a test with this `flow`, client first.
pub fn verdicts(hosts: &Hosts, flow: DataFlow) -> Vec<AllowanceVerdict> {
    let mut out = Vec::new();
    for (end, host) in [(End::Client, &hosts.client), (End::Server, &hosts.server)] {
        if let Some(h) = host {
            out.extend(end_verdicts(end, h, flow));
        }
    }
    out
}

/// The verdicts of one end's host.
pub fn end_verdicts(end: End, host: &HostReport, flow: DataFlow) -> Vec<AllowanceVerdict> {
    let Some(iface) = &host.interface else {
        return Vec::new();
    };
    let Some(counts) = iface.allowances.counts() else {
        return Vec::new();
    };
    let c = &iface.counters;
    let sends = flow.sends(end);
    let receives = match end {
        End::Client => flow.server_sends,
        End::Server => flow.client_sends,
    };
    counts
        .exceeded()
        .filter(|&(_, n)| n > 0)
        .map(|(allowance, exceeded)| {
            let (bears, packets) = match allowance {
                Allowance::BwOut => (sends, c.tx_packets),
                Allowance::BwIn => (receives, c.rx_packets),
                Allowance::Pps => (true, c.rx_packets + c.tx_packets),
                Allowance::Conntrack | Allowance::Linklocal => (false, c.rx_packets + c.tx_packets),
            };
            // No packets counted means the kernel's counters were not read: unknown, not 0.
            let packets = (packets > 0).then_some(packets);
            let bearing = match allowance {
                Allowance::Conntrack => Bearing::DropsConnections,
                Allowance::Linklocal => Bearing::OtherTraffic,
                _ if !bears => Bearing::OtherTraffic,
                _ => match packets {
                    Some(p) if (exceeded as f64) < LIMITING_SHARE * p as f64 => Bearing::Bursts,
                    _ => Bearing::LimitsRate,
                },
            };
            AllowanceVerdict {
                end,
                allowance,
                exceeded,
                packets,
                span_s: iface.span_s,
                bearing,
            }
        })
        .collect()
}

/// Parses what `ethtool -S IFACE` prints (`NIC statistics:` then `name: value` lines) into
/// names and values, for recorded outputs. Lines that are not `name: number` are skipped.
pub fn parse_ethtool_s(text: &str) -> (Vec<String>, Vec<u64>) {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.trim().rsplit_once(':')?;
            let value = value.trim().parse::<u64>().ok()?;
            Some((name.trim().to_owned(), value))
        })
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Direction;
    use crate::report::{InterfaceReport, LinkCounters, NicStatistics};

    /// `ethtool -S ens34` on an EC2 instance with ENA (a newer driver: it has
    /// `conntrack_allowance_available` and the ENA Express counters), posted in
    /// <https://github.com/SlideRuleEarth/sliderule/issues/518> (2025-07-29); abridged to the
    /// lines quoted there: the device-wide part and queue 3.
    const ENA_SHAPED: &str = include_str!("fixtures/ena-sliderule-518.txt");
    /// `ethtool -S eth0` with ENA driver 1.2.0k (before the allowance counters), posted in
    /// <https://github.com/isc-projects/ethq/issues/15> (2018-10-29); abridged as quoted there.
    const ENA_OLD: &str = include_str!("fixtures/ena-ethq-15.txt");

    /// A recorded output as the end of a span that began when the driver came up (every
    /// counter 0): the counts since boot, which is what a single `ethtool -S` shows.
    fn since_boot(text: &str) -> (Vec<String>, Vec<u64>, Vec<u64>) {
        let (names, values) = parse_ethtool_s(text);
        let zero = vec![0; values.len()];
        (names, zero, values)
    }

    fn host_with(allowances: Allowances, counters: LinkCounters) -> HostReport {
        HostReport {
            cloud: None,
            interface: Some(InterfaceReport {
                name: "ens34".into(),
                index: 2,
                mtu: 9001,
                driver: Some("ena".into()),
                span_s: 10.0,
                counters,
                nic: NicStatistics::None,
                allowances,
                intervals: Vec::new(),
            }),
            error: None,
        }
    }

    #[test]
    fn an_ena_output_with_shaping_gives_the_counts_by_name() {
        let (names, before, after) = since_boot(ENA_SHAPED);
        let Allowances::Counted(c) = counts(&names, &before, &after, None) else {
            panic!("ENA counts its allowances");
        };
        assert_eq!(c.bw_in_allowance_exceeded, Some(3_241_329));
        assert_eq!(c.bw_out_allowance_exceeded, Some(530));
        assert_eq!(c.pps_allowance_exceeded, Some(784));
        assert_eq!(c.conntrack_allowance_exceeded, Some(0));
        assert_eq!(c.linklocal_allowance_exceeded, Some(0));
        // A gauge: its reading, not a change.
        assert_eq!(c.conntrack_allowance_available, Some(615_471));
    }

    #[test]
    fn the_recorded_ena_output_gives_the_verdict_line() {
        let (names, before, after) = since_boot(ENA_SHAPED);
        let allowances = counts(&names, &before, &after, None);
        // The packets the driver received on the queues the output quotes (queue 3).
        let rx = |n: &str| names.iter().position(|x| x == n).map(|i| after[i]);
        let counters = LinkCounters {
            rx_packets: rx("queue_3_rx_cnt").unwrap(),
            tx_packets: rx("queue_3_tx_cnt").unwrap(),
            ..LinkCounters::default()
        };
        let hosts = Hosts {
            client: Some(host_with(allowances, counters)),
            server: None,
            verdicts: Vec::new(),
            path_mtu: None,
        };
        // A download: the server sent, this client received.
        let flow = DataFlow::of(&TestSpec {
            workload: Workload::Throughput(crate::ThroughputSpec {
                direction: Direction::ServerToClient,
                ..crate::ThroughputSpec::default()
            }),
            ..TestSpec::throughput()
        });
        let v = verdicts(&hosts, flow);
        let lines: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "the client instance's inbound bandwidth allowance was exceeded 3,241,329 \
                 times: this rate is the instance's limit, not the path's",
                // 530 of 1,825,515 packets sent: a burst, and the data did not go out anyway.
                "the client instance's outbound bandwidth allowance was exceeded 530 times: \
                 traffic other than this test's; it does not explain this rate",
                "the client instance's packets-per-second allowance was exceeded 784 times \
                 (0.00377 % of the packets): bursts met the instance's limit; the rate is \
                 below it",
            ]
        );
        assert_eq!(v[0].bearing, Bearing::LimitsRate);
        assert_eq!(v[0].packets, Some(18_958_702));
    }

    #[test]
    fn an_upload_reads_the_outbound_allowance_as_the_limit() {
        let (names, before, after) = since_boot(ENA_SHAPED);
        let allowances = counts(&names, &before, &after, None);
        // Unknown packet counts: the share cannot tell a burst, so the shaping is the limit.
        let h = host_with(allowances, LinkCounters::default());
        let v = end_verdicts(
            End::Client,
            &h,
            DataFlow {
                client_sends: true,
                server_sends: false,
            },
        );
        let out = v.iter().find(|v| v.allowance == Allowance::BwOut).unwrap();
        assert_eq!(out.bearing, Bearing::LimitsRate);
        assert_eq!(out.packets, None);
        let inbound = v.iter().find(|v| v.allowance == Allowance::BwIn).unwrap();
        assert_eq!(inbound.bearing, Bearing::OtherTraffic);
    }

    #[test]
    fn a_driver_without_the_counters_is_not_counted_never_zero() {
        let (names, before, after) = since_boot(ENA_OLD);
        assert!(names.iter().any(|n| n == "queue_0_tx_cnt"), "{names:?}");
        assert_eq!(
            counts(&names, &before, &after, None),
            Allowances::NotCounted
        );
        // veth's statistics have none either.
        let veth = [
            "peer_ifindex".to_owned(),
            "rx_queue_0_xdp_packets".to_owned(),
        ];
        assert_eq!(
            counts(&veth, &[3, 0], &[3, 0], None),
            Allowances::NotCounted
        );
        let h = host_with(Allowances::NotCounted, LinkCounters::default());
        assert!(end_verdicts(End::Server, &h, DataFlow::of(&TestSpec::throughput())).is_empty());
    }

    #[test]
    fn a_test_during_which_nothing_was_exceeded_counts_zeros_and_says_nothing() {
        // Two readings of the same driver with the allowance counters unchanged between them.
        let (names, _, values) = since_boot(ENA_SHAPED);
        let Allowances::Counted(c) = counts(&names, &values, &values, None) else {
            panic!("counted");
        };
        assert_eq!(c.exceeded().map(|(_, n)| n).sum::<u64>(), 0);
        assert_eq!(c.exceeded().count(), 5);
        let h = host_with(Allowances::Counted(c), LinkCounters::default());
        assert!(end_verdicts(End::Client, &h, DataFlow::of(&TestSpec::throughput())).is_empty());
    }

    #[test]
    fn a_counter_that_fell_is_no_negative_count() {
        // The driver was reset during the span (its counters restart from zero).
        let names = vec!["bw_out_allowance_exceeded".to_owned()];
        let Allowances::Counted(c) = counts(&names, &[500], &[20], None) else {
            panic!()
        };
        assert_eq!(c.bw_out_allowance_exceeded, Some(0));
    }

    #[test]
    fn conntrack_and_linklocal_never_claim_the_rate() {
        let c = AllowanceCounts {
            conntrack_allowance_exceeded: Some(40),
            linklocal_allowance_exceeded: Some(7),
            ..AllowanceCounts::default()
        };
        let h = host_with(Allowances::Counted(c), LinkCounters::default());
        let v = end_verdicts(End::Server, &h, DataFlow::of(&TestSpec::throughput()));
        assert_eq!(v[0].bearing, Bearing::DropsConnections);
        assert_eq!(v[1].bearing, Bearing::OtherTraffic);
        assert_eq!(
            v[1].to_string(),
            "the server instance's link-local allowance (DNS, instance metadata, time sync) \
             was exceeded 7 times: traffic other than this test's; it does not explain this rate"
        );
    }
}
