//! The hosts' lines of the text summary (issue 33): each end's interface with its MTU, what
//! it counted over the test, EC2's allowance counters, and what an exceeded allowance says of
//! the rate, in words. Rendering only; the figures and the verdicts are the library's.

use std::fmt::Write;

use xbench::report::{Allowances, HostReport, Hosts, NicStatistics, TestReport};
use xbench::units::count;

/// The hosts block, or nothing for a report without hosts (iperf3 server, interrupted).
pub(crate) fn text(r: &TestReport) -> String {
    let Some(h) = &r.hosts else {
        return String::new();
    };
    block(h)
}

fn block(h: &Hosts) -> String {
    let mut s = String::from("Interfaces, over the test:\n");
    for (end, host) in [("client", &h.client), ("server", &h.server)] {
        let line = match host {
            Some(host) => host_line(host),
            None if end == "server" => "no report (an older xbench server, or none came)".into(),
            None => "not read".into(),
        };
        let _ = writeln!(s, "  {end:<7} {line}");
    }
    if let Some(p) = &h.path_mtu {
        let _ = writeln!(s, "  path    {p}");
    }
    for v in &h.verdicts {
        let _ = writeln!(s, "{v}");
    }
    s
}

fn host_line(h: &HostReport) -> String {
    let on = h.cloud.as_ref().map_or_else(String::new, |p| {
        format!(
            "{} in {} ({}): ",
            p.instance_type, p.region, p.availability_zone_id
        )
    });
    let Some(i) = &h.interface else {
        return format!(
            "{on}interface not read: {}",
            h.error.as_deref().unwrap_or("unknown")
        );
    };
    let driver = i.driver.as_deref().unwrap_or("unknown driver");
    let c = &i.counters;
    let mut s = format!(
        "{on}{} ({driver}), MTU {}: sent {} packets, received {}",
        i.name,
        count(u64::from(i.mtu)),
        count(c.tx_packets),
        count(c.rx_packets)
    );
    let mut trouble = Vec::new();
    for (n, what) in [
        (c.tx_dropped, "dropped on the way out"),
        (c.rx_dropped, "dropped on the way in"),
        (c.rx_missed, "missed (no receive buffer)"),
        (c.tx_errors, "send errors"),
        (c.rx_errors, "receive errors"),
    ] {
        if n > 0 {
            trouble.push(format!("{} {what}", count(n)));
        }
    }
    if let NicStatistics::Read { changed, .. } = &i.nic {
        let worrying = changed
            .iter()
            .filter(|(k, v)| **v > 0 && worrying(k) && !k.ends_with("_allowance_exceeded"))
            .take(5)
            .map(|(k, v)| format!("{k} +{}", count(v.unsigned_abs())));
        trouble.extend(worrying);
    }
    if trouble.is_empty() {
        s.push_str("; no drops or errors");
    } else {
        let _ = write!(s, "; {}", trouble.join(", "));
    }
    match &i.allowances {
        Allowances::NotCounted => {
            let _ = write!(s, "; EC2 allowances: not counted by this driver");
        }
        Allowances::Counted(a) => {
            let parts: Vec<String> = a
                .exceeded()
                .map(|(al, n)| format!("{} {}", short(al.counter()), count(n)))
                .collect();
            let _ = write!(s, "; EC2 allowances exceeded: {}", parts.join(", "));
        }
    }
    if let Some(e) = &h.error {
        let _ = write!(s, " ({e})");
    }
    s
}

/// `bw_out_allowance_exceeded` → `bw_out`.
fn short(counter: &str) -> &str {
    counter
        .strip_suffix("_allowance_exceeded")
        .unwrap_or(counter)
}

/// A driver statistic whose growth means packets were lost or refused.
fn worrying(name: &str) -> bool {
    [
        "drop", "err", "miss", "fail", "timeout", "discard", "overrun", "exceeded",
    ]
    .iter()
    .any(|w| name.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use xbench::report::{
        Allowance, AllowanceCounts, AllowanceVerdict, Bearing, End, InterfaceReport, LinkCounters,
    };

    fn iface(allowances: Allowances, nic: NicStatistics) -> HostReport {
        HostReport {
            cloud: None,
            interface: Some(InterfaceReport {
                name: "ens5".into(),
                index: 2,
                mtu: 9001,
                driver: Some("ena".into()),
                span_s: 10.0,
                counters: LinkCounters {
                    tx_packets: 1_200_000,
                    rx_packets: 600_000,
                    tx_dropped: 3,
                    ..LinkCounters::default()
                },
                nic,
                allowances,
                intervals: Vec::new(),
            }),
            error: None,
        }
    }

    #[test]
    fn an_exceeded_allowance_is_said_plainly_and_a_driver_without_them_as_such() {
        let counts = AllowanceCounts {
            bw_in_allowance_exceeded: Some(0),
            bw_out_allowance_exceeded: Some(12_408),
            pps_allowance_exceeded: Some(0),
            conntrack_allowance_exceeded: Some(0),
            linklocal_allowance_exceeded: Some(0),
            conntrack_allowance_available: None,
        };
        let changed = BTreeMap::from([
            ("queue_*_tx_cnt".to_owned(), 1_200_000),
            ("queue_*_rx_drops".to_owned(), 9),
        ]);
        let h = Hosts {
            client: Some(iface(
                Allowances::Counted(counts),
                NicStatistics::Read { kept: 300, changed },
            )),
            server: None,
            verdicts: vec![AllowanceVerdict {
                end: End::Client,
                allowance: Allowance::BwOut,
                exceeded: 12_408,
                packets: Some(1_200_000),
                span_s: 10.0,
                bearing: Bearing::LimitsRate,
            }],
            path_mtu: None,
        };
        let t = block(&h);
        assert_eq!(
            t,
            "Interfaces, over the test:\n  client  ens5 (ena), MTU 9,001: sent 1,200,000 \
             packets, received 600,000; 3 dropped on the way out, queue_*_rx_drops +9; EC2 \
             allowances exceeded: bw_in 0, bw_out 12,408, pps 0, conntrack 0, linklocal 0\n  \
             server  no report (an older xbench server, or none came)\nthe client instance's \
             outbound bandwidth allowance was exceeded 12,408 times: this rate is the \
             instance's limit, not the path's\n"
        );
        let veth = block(&Hosts {
            client: Some(iface(Allowances::NotCounted, NicStatistics::None)),
            server: None,
            verdicts: Vec::new(),
            path_mtu: None,
        });
        assert!(
            veth.contains("EC2 allowances: not counted by this driver"),
            "{veth}"
        );
        assert!(!veth.contains("exceeded"), "{veth}");
    }
}
