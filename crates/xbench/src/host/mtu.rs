//! What a throughput test's packet sizes say of its path: the interfaces' MTU at both ends,
//! the path MTU the senders' TCP found (`tcpi_pmtu`) and the MSS they used (`tcpi_snd_mss`),
//! and whether that MSS is below what those MTUs allow.
//!
//! A path MTU below the interfaces' means ICMP "fragmentation needed" reached the sender and
//! TCP adjusted, as it should. An MSS below what the path MTU allows means something else cut
//! it: a middlebox clamping the MSS (a VPN gateway, a firewall), or TCP's black-hole probing
//! after large segments vanished because that ICMP was filtered. Not for: request/response
//! tests, whose flows report no TCP totals.

use crate::report::{Hosts, MtuFinding, PathMtu, StreamInfo, Summary};

/// Bytes of TCP options every full segment may carry: timestamps (10, padded to 12). The
/// allowed MSS leaves room for them, so a path is never flagged for using them.
pub const TCP_TIMESTAMPS: u32 = 12;

/// The largest IP packet, whatever the MTU (loopback's 65,536 included).
const MAX_IP_PACKET: u32 = 65_535;

/// The path's packet sizes over a throughput test, when its senders reported an MSS.
pub fn check(hosts: &Hosts, summary: &Summary, streams: &[StreamInfo]) -> Option<PathMtu> {
    let mtu = |h: &Option<crate::report::HostReport>| {
        h.as_ref().and_then(|h| h.interface.as_ref()).map(|i| i.mtu)
    };
    let interface_mtu = [mtu(&hosts.client), mtu(&hosts.server)]
        .into_iter()
        .flatten()
        .min()?;
    let totals = summary
        .directions
        .iter()
        .flat_map(|d| &d.per_stream)
        .filter_map(|s| s.tcp.as_ref())
        .filter(|t| t.mss > 0);
    let (mut mss, mut pmtu) = (u32::MAX, u32::MAX);
    for t in totals {
        mss = mss.min(t.mss);
        if t.pmtu > 0 {
            pmtu = pmtu.min(t.pmtu);
        }
    }
    if mss == u32::MAX {
        return None;
    }
    let pmtu = if pmtu == u32::MAX {
        interface_mtu
    } else {
        pmtu
    };
    let v6 = streams
        .first()
        .is_some_and(|s| !s.server_addr.ip().to_canonical().is_ipv4());
    Some(judge(interface_mtu, pmtu, mss, v6))
}

/// The finding for these sizes; `v6`: the path carries IPv6 (a 40-byte header, not 20).
pub fn judge(interface_mtu: u32, pmtu: u32, mss: u32, v6: bool) -> PathMtu {
    let ip_header = if v6 { 40 } else { 20 };
    // Loopback's 65,536 carries at most 65,535-byte packets: TCP's path MTU says 65,535.
    let interface_mtu = interface_mtu.min(MAX_IP_PACKET);
    let smallest = interface_mtu.min(pmtu);
    let allowed_mss = smallest.saturating_sub(ip_header + 20 + TCP_TIMESTAMPS);
    let finding = if mss < allowed_mss {
        MtuFinding::MssBelow
    } else if pmtu < interface_mtu {
        MtuFinding::PathMtuFound
    } else {
        MtuFinding::Full
    };
    PathMtu {
        interface_mtu,
        pmtu,
        mss,
        allowed_mss,
        finding,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_size_segments_on_a_1500_byte_path_are_not_flagged() {
        // 1,448 with timestamps, 1,460 without: both are what 1,500 allows.
        for mss in [1448, 1460] {
            let p = judge(1500, 1500, mss, false);
            assert_eq!(p.finding, MtuFinding::Full, "{p:?}");
            assert_eq!(p.allowed_mss, 1448);
        }
        assert_eq!(judge(1500, 1500, 1428, true).finding, MtuFinding::Full);
        // Loopback: 65,536 bytes of MTU, but an IP packet holds 65,535.
        assert_eq!(
            judge(65_536, 65_536, 65_483, false).finding,
            MtuFinding::Full
        );
    }

    #[test]
    fn a_smaller_mtu_in_the_middle_that_tcp_found_is_stated_not_flagged() {
        let p = judge(1500, 1400, 1348, false);
        assert_eq!(p.finding, MtuFinding::PathMtuFound);
        assert_eq!(p.allowed_mss, 1348);
    }

    #[test]
    fn an_mss_below_what_the_mtu_allows_is_flagged() {
        // TCP's black-hole probing fell back to its base MSS: ICMP was filtered.
        assert_eq!(judge(1500, 1500, 1024, false).finding, MtuFinding::MssBelow);
        // A VPN clamping the MSS to 1,360 on a 1,500-byte path.
        assert_eq!(judge(1500, 1500, 1360, false).finding, MtuFinding::MssBelow);
        // Below what the path MTU found allows, too.
        assert_eq!(judge(9001, 1400, 1200, false).finding, MtuFinding::MssBelow);
    }
}
