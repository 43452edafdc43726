//! Two questions asked of the kernel's routing netlink (`NETLINK_ROUTE`), in its own words:
//! which interface does the route from one address to another leave by (`RTM_GETROUTE`, what
//! `ip route get` asks), and what is that interface's name, MTU and counters (`RTM_GETLINK`,
//! what `ip -s link` reads).
//!
//! Netlink rather than `/proc/net/route` and `/sys/class/net`: it answers for the network
//! namespace the asking socket lives in (sysfs shows the one it was mounted from), knows IPv6
//! and policy routing, and needs no parsing of text. The messages are built and parsed here as
//! plain bytes; the socket is socket2's, so this file has no `unsafe`. Not for: the driver's
//! own statistics (`ethtool`), or deciding what the counters mean.

use std::io::{self, Read};
use std::net::IpAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// `AF_NETLINK` / `NETLINK_ROUTE`, from `linux/netlink.h`.
const NETLINK_ROUTE: i32 = 0;
/// Message types and flags, from `linux/netlink.h` and `linux/rtnetlink.h`.
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
/// Route attributes.
const RTA_DST: u16 = 1;
const RTA_SRC: u16 = 2;
const RTA_OIF: u16 = 4;
/// Link attributes.
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINKINFO: u16 = 18;
const IFLA_STATS64: u16 = 23;
const IFLA_INFO_KIND: u16 = 1;
/// A nested attribute's type carries this flag on some kernels.
const NLA_TYPE_MASK: u16 = 0x3fff;

const NLMSG_HDR_LEN: usize = 16;
const RTMSG_LEN: usize = 12;
const IFINFOMSG_LEN: usize = 16;

/// How long the kernel may take to answer; it answers at once, so this only guards against a
/// lost answer hanging a test.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// What `RTM_GETLINK` says of an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) index: u32,
    pub(crate) name: String,
    pub(crate) mtu: u32,
    /// The link's kind for virtual devices (`veth`, `dummy`, `tun`…), from `IFLA_INFO_KIND`.
    pub(crate) kind: Option<String>,
    /// `struct rtnl_link_stats64`, as far as the kernel sent it.
    pub(crate) stats: LinkStats,
}

/// The kernel's generic counters of an interface (`struct rtnl_link_stats64`, the same numbers
/// as `/sys/class/net/IF/statistics/`), the fields a path comparison needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LinkStats {
    pub(crate) rx_packets: u64,
    pub(crate) tx_packets: u64,
    pub(crate) rx_bytes: u64,
    pub(crate) tx_bytes: u64,
    pub(crate) rx_errors: u64,
    pub(crate) tx_errors: u64,
    pub(crate) rx_dropped: u64,
    pub(crate) tx_dropped: u64,
    /// Packets the NIC dropped for want of a receive buffer (`rx_missed_errors`).
    pub(crate) rx_missed: u64,
}

/// The index of the interface the route from `src` (if given) to `dst` leaves by.
pub(crate) fn route_oif(dst: IpAddr, src: Option<IpAddr>) -> io::Result<u32> {
    let dst = dst.to_canonical();
    let src = src
        .map(|s| s.to_canonical())
        .filter(|s| !s.is_unspecified() && s.is_ipv4() == dst.is_ipv4());
    let answer = ask(&route_request(dst, src, 1))?;
    parse_route(&answer)
}

/// Name, MTU, kind and counters of interface `index`.
pub(crate) fn link(index: u32) -> io::Result<Link> {
    let answer = ask(&link_request(index, 1))?;
    parse_link(&answer)
}

/// Sends one request to the kernel and returns its one answer.
fn ask(request: &[u8]) -> io::Result<Vec<u8>> {
    let sock = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::RAW,
        Some(Protocol::from(NETLINK_ROUTE)),
    )?;
    sock.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    // Unconnected and unbound: a netlink message without an address goes to the kernel.
    sock.send(request)?;
    // A link's answer with every attribute (VF lists included) stays well under this.
    let mut buf = vec![0u8; 64 * 1024];
    let n = (&sock).read(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn header(buf: &mut Vec<u8>, kind: u16, seq: u32) {
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, filled in by `finish`
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills in ours
}

fn attr(buf: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

fn finish(mut buf: Vec<u8>) -> Vec<u8> {
    let len = (buf.len() as u32).to_ne_bytes();
    buf[..4].copy_from_slice(&len);
    buf
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

/// `RTM_GETROUTE` for `dst` (from `src`), as `ip route get DST from SRC` sends it.
fn route_request(dst: IpAddr, src: Option<IpAddr>, seq: u32) -> Vec<u8> {
    let (family, bits) = match dst {
        IpAddr::V4(_) => (libc::AF_INET as u8, 32u8),
        IpAddr::V6(_) => (libc::AF_INET6 as u8, 128u8),
    };
    let mut b = Vec::with_capacity(64);
    header(&mut b, RTM_GETROUTE, seq);
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    b.extend_from_slice(&[family, bits, if src.is_some() { bits } else { 0 }, 0]);
    b.extend_from_slice(&[0, 0, 0, 0]);
    b.extend_from_slice(&0u32.to_ne_bytes());
    attr(&mut b, RTA_DST, &addr_bytes(dst));
    if let Some(s) = src {
        attr(&mut b, RTA_SRC, &addr_bytes(s));
    }
    finish(b)
}

/// `RTM_GETLINK` for interface `index`.
fn link_request(index: u32, seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(32);
    header(&mut b, RTM_GETLINK, seq);
    // struct ifinfomsg: family, pad, type, index, flags, change.
    b.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    b.extend_from_slice(&0u16.to_ne_bytes());
    b.extend_from_slice(&(index as i32).to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    finish(b)
}

/// The first message of an answer: its type and body, or the error the kernel sent.
fn message(answer: &[u8]) -> io::Result<(u16, &[u8])> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("netlink: {what}"));
    if answer.len() < NLMSG_HDR_LEN {
        return Err(bad("short answer"));
    }
    let len = u32::from_ne_bytes(take4(answer, 0)) as usize;
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    if len < NLMSG_HDR_LEN || len > answer.len() {
        return Err(bad("bad message length"));
    }
    let body = &answer[NLMSG_HDR_LEN..len];
    if kind == NLMSG_ERROR {
        if body.len() < 4 {
            return Err(bad("short error"));
        }
        let errno = i32::from_ne_bytes(take4(body, 0));
        return Err(io::Error::from_raw_os_error(-errno));
    }
    Ok((kind, body))
}

fn take4(b: &[u8], at: usize) -> [u8; 4] {
    let mut out = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        out.copy_from_slice(s);
    }
    out
}

/// The attributes of a message body after its fixed header of `fixed` bytes.
fn attrs(body: &[u8], fixed: usize) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = body.get(fixed..).unwrap_or(&[]);
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > rest.len() {
            return None;
        }
        let data = &rest[4..len];
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((kind, data))
    })
}

fn parse_route(answer: &[u8]) -> io::Result<u32> {
    let (kind, body) = message(answer)?;
    if kind != RTM_NEWROUTE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("netlink: answer of type {kind} to a route request"),
        ));
    }
    attrs(body, RTMSG_LEN)
        .find(|(k, d)| *k == RTA_OIF && d.len() == 4)
        .map(|(_, d)| u32::from_ne_bytes(take4(d, 0)))
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the route has no interface"))
}

fn parse_link(answer: &[u8]) -> io::Result<Link> {
    let (kind, body) = message(answer)?;
    if kind != RTM_NEWLINK || body.len() < IFINFOMSG_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("netlink: answer of type {kind} to a link request"),
        ));
    }
    let index = i32::from_ne_bytes(take4(body, 4)) as u32;
    let flags = u32::from_ne_bytes(take4(body, 8));
    let mut link = Link {
        index,
        name: String::new(),
        mtu: 0,
        // Loopback has no kind and no driver to name it.
        kind: (flags & libc::IFF_LOOPBACK as u32 != 0).then(|| "loopback".to_owned()),
        stats: LinkStats::default(),
    };
    for (k, d) in attrs(body, IFINFOMSG_LEN) {
        match k {
            IFLA_IFNAME => {
                link.name =
                    String::from_utf8_lossy(d.split(|&b| b == 0).next().unwrap_or(d)).into_owned()
            }
            IFLA_MTU if d.len() == 4 => link.mtu = u32::from_ne_bytes(take4(d, 0)),
            IFLA_STATS64 => link.stats = stats64(d),
            IFLA_LINKINFO => {
                link.kind = attrs(d, 0)
                    .find(|(k, _)| *k == IFLA_INFO_KIND)
                    .map(|(_, v)| {
                        String::from_utf8_lossy(v.split(|&b| b == 0).next().unwrap_or(v))
                            .into_owned()
                    })
            }
            _ => {}
        }
    }
    Ok(link)
}

/// The fields of `struct rtnl_link_stats64` kept, by their position in it.
fn stats64(d: &[u8]) -> LinkStats {
    let at = |i: usize| {
        d.get(i * 8..i * 8 + 8)
            .map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
    };
    LinkStats {
        rx_packets: at(0),
        tx_packets: at(1),
        rx_bytes: at(2),
        tx_bytes: at(3),
        rx_errors: at(4),
        tx_errors: at(5),
        rx_dropped: at(6),
        tx_dropped: at(7),
        // multicast, collisions, rx_length_errors, rx_over_errors, rx_crc_errors,
        // rx_frame_errors, rx_fifo_errors, then rx_missed_errors.
        rx_missed: at(15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn a_route_request_is_what_ip_route_get_sends() {
        let r = route_request(
            IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2)),
            Some(IpAddr::V4(Ipv4Addr::new(198, 18, 1, 1))),
            7,
        );
        // Header (16) + rtmsg (12) + two 8-byte attributes.
        assert_eq!(r.len(), 44);
        assert_eq!(u32::from_ne_bytes(take4(&r, 0)), 44);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_GETROUTE);
        assert_eq!(&r[16..19], &[libc::AF_INET as u8, 32, 32]);
        let a: Vec<_> = attrs(&r[16..], RTMSG_LEN).collect();
        assert_eq!(a[0], (RTA_DST, &[198u8, 18, 1, 2][..]));
        assert_eq!(a[1], (RTA_SRC, &[198u8, 18, 1, 1][..]));
    }

    #[test]
    fn a_kernel_error_is_its_errno() {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&(-libc::ENETUNREACH).to_ne_bytes());
        m.extend_from_slice(&[0; 16]);
        let e = parse_route(&m).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH));
    }

    #[test]
    fn garbage_answers_are_errors_not_panics() {
        for junk in [&[][..], &[1, 2, 3], &[255; 40], &[16, 0, 0, 0, 24, 0, 0, 0]] {
            let _ = parse_route(junk);
            let _ = parse_link(junk);
        }
        // A length that claims more than arrived.
        let mut m = vec![0u8; 20];
        m[..4].copy_from_slice(&200u32.to_ne_bytes());
        assert!(parse_link(&m).is_err());
    }

    #[test]
    fn loopback_routes_leave_by_lo_with_its_mtu_and_counters() {
        let oif = route_oif(IpAddr::V4(Ipv4Addr::LOCALHOST), None).unwrap();
        let l = link(oif).unwrap();
        assert_eq!(l.name, "lo");
        assert_eq!(l.kind.as_deref(), Some("loopback"));
        assert_eq!(l.index, oif);
        assert!(l.mtu >= 1500, "{l:?}");
        // A route lookup with the source given answers the same.
        let again = route_oif(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        )
        .unwrap();
        assert_eq!(again, oif);
        // IPv4-mapped IPv6 is looked up as IPv4.
        let mapped = route_oif(IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()), None).unwrap();
        assert_eq!(mapped, oif);
        let _ = Ipv6Addr::LOCALHOST;
    }

    #[test]
    fn an_unknown_interface_is_an_error() {
        let e = link(u32::MAX >> 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
    }
}
