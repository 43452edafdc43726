//! What the line needs to know of an IP packet: its flow (protocol, addresses, ports), so it
//! can tell when a packet was overtaken by a later one of the same flow, and the fields it
//! logs of the packets it drops or reorders. Reads IPv4 and IPv6 headers as the TUN devices
//! deliver them (no packet-information prefix, no offload header); not a general parser.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

/// The parts of a packet's headers the line logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PacketInfo {
    /// IP protocol number (6 TCP, 17 UDP); 0 when the packet is not IPv4 or IPv6.
    pub protocol: u8,
    /// Source port of a TCP or UDP packet (first fragment), else 0.
    pub src_port: u16,
    /// Destination port, likewise.
    pub dst_port: u16,
    /// Length of the IP packet, bytes.
    pub len: u32,
}

/// The flow of a packet and what is logged of it.
pub(crate) fn inspect(p: &[u8]) -> (u64, PacketInfo) {
    let mut info = PacketInfo {
        len: p.len() as u32,
        ..PacketInfo::default()
    };
    let (addrs, l4) = match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            info.protocol = p[9];
            // Later fragments carry no ports.
            let first = u16::from_be_bytes([p[6], p[7]]) & 0x1fff == 0;
            let ihl = usize::from(p[0] & 0x0f) * 4;
            (&p[12..20], first.then(|| p.get(ihl..)).flatten())
        }
        Some(6) if p.len() >= 40 => {
            info.protocol = p[6];
            (&p[8..40], p.get(40..))
        }
        _ => (&p[..0], None),
    };
    if matches!(info.protocol, 6 | 17)
        && let Some(l4) = l4.filter(|l| l.len() >= 4)
    {
        info.src_port = u16::from_be_bytes([l4[0], l4[1]]);
        info.dst_port = u16::from_be_bytes([l4[2], l4[3]]);
    }
    let mut h = DefaultHasher::new();
    (info.protocol, addrs, info.src_port, info.dst_port).hash(&mut h);
    (h.finish(), info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(src: [u8; 4], sport: u16, dport: u16, payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 28 + payload];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn flows_are_told_apart_by_addresses_and_ports() {
        let (f, info) = inspect(&udp4([10, 0, 0, 1], 40000, 5201, 1000));
        assert_eq!(
            info,
            PacketInfo {
                protocol: 17,
                src_port: 40000,
                dst_port: 5201,
                len: 1028
            }
        );
        assert_eq!(f, inspect(&udp4([10, 0, 0, 1], 40000, 5201, 10)).0);
        assert_ne!(f, inspect(&udp4([10, 0, 0, 3], 40000, 5201, 1000)).0);
        assert_ne!(f, inspect(&udp4([10, 0, 0, 1], 40001, 5201, 1000)).0);
        // A later fragment has no ports; junk is protocol 0.
        let mut frag = udp4([10, 0, 0, 1], 40000, 5201, 1000);
        frag[7] = 1;
        assert_eq!(inspect(&frag).1.dst_port, 0);
        assert_eq!(inspect(&[0u8; 3]).1.protocol, 0);
    }
}
