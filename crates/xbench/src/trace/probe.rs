//! One probe of a hop view: a TCP SYN or a UDP datagram to the test's server with a chosen
//! TTL, from one fixed source port, and what answered it — read without privileges from the
//! socket's error queue (`IP_RECVERR`), as `tracepath` does.
//!
//! A TCP probe is a non-blocking `connect()` with the TTL set: a router where it expires
//! answers ICMP "time exceeded", which the kernel queues on the socket; the server answers
//! with its SYN-ACK (or a reset), which ends the probe as the destination. Each probe has its
//! own socket, closed with a reset, so none leaves a TIME_WAIT behind that would stop the next
//! from using the same port. A UDP probe is a datagram on one connected socket; the server's
//! port-unreachable (or any answer) ends it. Not for: the order and pace of probes (`trace`).

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::report::TraceProtocol;

/// How long one wait on the socket lasts before the stop flag is looked at again.
const SLICE: Duration = Duration::from_millis(50);

/// What answered a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A router where the TTL ran out ("time exceeded").
    Hop { from: IpAddr, rtt: Duration },
    /// The server itself (a SYN-ACK or reset, a port unreachable, a datagram).
    Destination { from: IpAddr, rtt: Duration },
    /// A router that refused to forward ("destination unreachable" from someone else).
    Unreachable { from: IpAddr, rtt: Duration },
    /// Nothing within the time allowed.
    Silent,
}

/// Sends probes of one flow: one protocol, one source address and port, one destination.
#[derive(Debug)]
pub(crate) struct Prober {
    protocol: TraceProtocol,
    source: SocketAddr,
    target: SocketAddr,
    /// The UDP probes' socket, kept for the whole trace.
    udp: Option<Socket>,
}

impl Prober {
    /// A prober from `local` (port 0: the kernel picks one, then every probe keeps it).
    pub(crate) fn new(
        protocol: TraceProtocol,
        local: IpAddr,
        target: SocketAddr,
    ) -> io::Result<Prober> {
        let target = SocketAddr::new(target.ip().to_canonical(), target.port());
        let local = match (local.to_canonical(), target.ip()) {
            (l, t) if l.is_ipv4() == t.is_ipv4() => l,
            (_, t) if t.is_ipv4() => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            _ => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        };
        let kind = match protocol {
            TraceProtocol::Tcp => Type::STREAM,
            TraceProtocol::Udp => Type::DGRAM,
        };
        // Any free port, kept for every probe: the flow identifier stays the same.
        let probe = Socket::new(Domain::for_address(target), kind, None)?;
        probe.bind(&SocketAddr::new(local, 0).into())?;
        let source = local_addr(&probe)?;
        let udp = match protocol {
            TraceProtocol::Tcp => None,
            TraceProtocol::Udp => {
                set_recverr(&probe, target.is_ipv6())?;
                probe.connect(&target.into())?;
                probe.set_nonblocking(true)?;
                Some(probe)
            }
        };
        Ok(Prober {
            protocol,
            source,
            target,
            udp,
        })
    }

    /// The flow's source address and port.
    pub(crate) fn source(&self) -> SocketAddr {
        self.source
    }

    /// One probe with `ttl`, waiting up to `timeout` (less if `stop` is set meanwhile).
    pub(crate) fn probe(
        &mut self,
        ttl: u8,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> io::Result<Answer> {
        match self.protocol {
            TraceProtocol::Tcp => self.tcp(ttl, timeout, stop),
            TraceProtocol::Udp => self.udp(ttl, timeout, stop),
        }
    }

    fn tcp(&mut self, ttl: u8, timeout: Duration, stop: &AtomicBool) -> io::Result<Answer> {
        let s = Socket::new(
            Domain::for_address(self.target),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        s.set_reuse_address(true)?;
        set_recverr(&s, self.target.is_ipv6())?;
        set_ttl(&s, self.target.is_ipv6(), ttl)?;
        // Closed with a reset: no TIME_WAIT to stop the next probe from this port.
        s.set_linger(Some(Duration::ZERO))?;
        s.bind(&self.source.into())?;
        s.set_nonblocking(true)?;
        let sent = Instant::now();
        match s.connect(&self.target.into()) {
            Ok(()) => {
                return Ok(Answer::Destination {
                    from: self.target.ip(),
                    rtt: sent.elapsed(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let deadline = sent + timeout;
        while let Some(left) = remaining(deadline, stop) {
            let ready = wait(&s, libc::POLLOUT, left)?;
            if ready == 0 {
                continue;
            }
            let at = Instant::now();
            if let Some(icmp) = read_error_queue(&s)? {
                return Ok(self.classify(icmp, at - sent));
            }
            return Ok(match s.take_error()? {
                None => Answer::Destination {
                    from: self.target.ip(),
                    rtt: at - sent,
                },
                Some(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Answer::Destination {
                    from: self.target.ip(),
                    rtt: at - sent,
                },
                // An error without an ICMP message to say who: not a hop's answer.
                Some(_) => Answer::Silent,
            });
        }
        Ok(Answer::Silent)
    }

    fn udp(&mut self, ttl: u8, timeout: Duration, stop: &AtomicBool) -> io::Result<Answer> {
        let v6 = self.target.is_ipv6();
        let Some(s) = &self.udp else {
            return Ok(Answer::Silent);
        };
        // A late answer to an earlier probe must not be taken for this one's.
        while read_error_queue(s)?.is_some() {}
        let _ = s.take_error();
        let mut junk = [MaybeUninit::<u8>::uninit(); 64];
        while s.recv(&mut junk).is_ok() {}
        set_ttl(s, v6, ttl)?;
        let sent = Instant::now();
        if let Err(e) = s.send(b"xbench trace probe") {
            // An error left over from an earlier ICMP is reported by this send: once more.
            if s.send(b"xbench trace probe").is_err() {
                return Err(e);
            }
        }
        let deadline = sent + timeout;
        while let Some(left) = remaining(deadline, stop) {
            if wait(s, libc::POLLIN, left)? == 0 {
                continue;
            }
            let at = Instant::now();
            if let Some(icmp) = read_error_queue(s)? {
                return Ok(self.classify(icmp, at - sent));
            }
            if s.recv(&mut junk).is_ok() {
                return Ok(Answer::Destination {
                    from: self.target.ip(),
                    rtt: at - sent,
                });
            }
            let _ = s.take_error();
        }
        Ok(Answer::Silent)
    }

    fn classify(&self, icmp: Icmp, rtt: Duration) -> Answer {
        let from = icmp.from.unwrap_or(self.target.ip()).to_canonical();
        match icmp.kind {
            IcmpKind::TimeExceeded => Answer::Hop { from, rtt },
            IcmpKind::Unreachable if from == self.target.ip() => Answer::Destination { from, rtt },
            IcmpKind::Unreachable => Answer::Unreachable { from, rtt },
            IcmpKind::Other => Answer::Silent,
        }
    }
}

/// Time left before `deadline`, in slices; `None` once it passed or `stop` was set.
fn remaining(deadline: Instant, stop: &AtomicBool) -> Option<Duration> {
    if stop.load(Ordering::Relaxed) {
        return None;
    }
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .map(|d| d.min(SLICE))
}

fn local_addr(s: &Socket) -> io::Result<SocketAddr> {
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("the probe socket has no IP address"))
}

fn set_ttl(s: &Socket, v6: bool, ttl: u8) -> io::Result<()> {
    if v6 {
        s.set_unicast_hops_v6(u32::from(ttl))
    } else {
        s.set_ttl_v4(u32::from(ttl))
    }
}

/// `IP_RECVERR` / `IPV6_RECVERR`: ICMP errors about this socket's packets are queued on it,
/// with who sent them.
fn set_recverr(s: &Socket, v6: bool) -> io::Result<()> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVERR)
    };
    let on: libc::c_int = 1;
    // SAFETY: an int option, passed by pointer with its size; the socket is open.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits up to `left` for `events` or an error on `s`; the events that came (0: none).
fn wait(s: &Socket, events: libc::c_short, left: Duration) -> io::Result<libc::c_short> {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: events | libc::POLLERR,
        revents: 0,
    };
    let ms = left.as_millis().clamp(1, 1000) as libc::c_int;
    // SAFETY: one pollfd, alive across the call, for an open descriptor.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    match rc {
        0 => Ok(0),
        n if n > 0 => Ok(p.revents),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IcmpKind {
    TimeExceeded,
    Unreachable,
    Other,
}

/// An ICMP error the kernel queued for a socket.
#[derive(Debug, Clone, Copy)]
struct Icmp {
    kind: IcmpKind,
    /// Who sent it (`SO_EE_OFFENDER`).
    from: Option<IpAddr>,
}

/// The next ICMP error on `s`'s error queue, if one is there.
fn read_error_queue(s: &Socket) -> io::Result<Option<Icmp>> {
    let mut data = [0u8; 256];
    let mut control = [0u64; 64]; // 512 bytes, aligned for cmsghdr
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain old data; zeroed is a valid empty message header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: `msg` points at `iov`, `data` and `control`, all alive across the call and
    // sized as their lengths say; MSG_DONTWAIT keeps it from blocking.
    let n = unsafe {
        libc::recvmsg(
            s.as_raw_fd(),
            &mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(None),
            _ => Err(e),
        };
    }
    let used = (msg.msg_controllen as usize).min(size_of_val(&control));
    // SAFETY: the kernel wrote `used` bytes of control data into `control`, which is u64s
    // viewed as bytes (any bit pattern is a valid u8).
    let bytes = unsafe { std::slice::from_raw_parts(control.as_ptr().cast::<u8>(), used) };
    Ok(parse_control(bytes))
}

/// The extended error in a control buffer: `cmsghdr`s, each padded to 8 bytes, one of them
/// `IP_RECVERR`/`IPV6_RECVERR` holding `struct sock_extended_err` and the offender's address.
fn parse_control(mut b: &[u8]) -> Option<Icmp> {
    const HDR: usize = size_of::<libc::cmsghdr>();
    while b.len() >= HDR {
        let len = usize::from_ne_bytes(b[..8].try_into().ok()?);
        let level = i32::from_ne_bytes(b[8..12].try_into().ok()?);
        let kind = i32::from_ne_bytes(b[12..16].try_into().ok()?);
        if len < HDR || len > b.len() {
            return None;
        }
        let data = &b[HDR..len];
        let ours = (level == libc::IPPROTO_IP && kind == libc::IP_RECVERR)
            || (level == libc::IPPROTO_IPV6 && kind == libc::IPV6_RECVERR);
        if ours && data.len() >= 16 {
            return Some(extended_err(data));
        }
        b = b.get(len.next_multiple_of(8)..)?;
    }
    None
}

/// `struct sock_extended_err { u32 errno; u8 origin, type, code, pad; u32 info, data; }`
/// followed by the offender's `sockaddr`.
fn extended_err(d: &[u8]) -> Icmp {
    let (origin, icmp_type) = (d[4], d[5]);
    let kind = match (origin, icmp_type) {
        // ICMP: 11 time exceeded, 3 destination unreachable.
        (libc::SO_EE_ORIGIN_ICMP, 11) => IcmpKind::TimeExceeded,
        (libc::SO_EE_ORIGIN_ICMP, 3) => IcmpKind::Unreachable,
        // ICMPv6: 3 time exceeded, 1 destination unreachable.
        (libc::SO_EE_ORIGIN_ICMP6, 3) => IcmpKind::TimeExceeded,
        (libc::SO_EE_ORIGIN_ICMP6, 1) => IcmpKind::Unreachable,
        _ => IcmpKind::Other,
    };
    let from = offender(&d[16..]);
    Icmp { kind, from }
}

fn offender(sa: &[u8]) -> Option<IpAddr> {
    let family = u16::from_ne_bytes(sa.get(..2)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let o: [u8; 4] = sa.get(4..8)?.try_into().ok()?;
            Some(IpAddr::from(o))
        }
        libc::AF_INET6 => {
            let o: [u8; 16] = sa.get(8..24)?.try_into().ok()?;
            Some(IpAddr::from(o))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, UdpSocket};

    #[test]
    fn a_tcp_probe_to_a_listener_reaches_the_destination_from_one_port() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = l.local_addr().unwrap();
        let mut p =
            Prober::new(TraceProtocol::Tcp, IpAddr::V4(Ipv4Addr::LOCALHOST), target).unwrap();
        let stop = AtomicBool::new(false);
        let port = p.source().port();
        for _ in 0..3 {
            // Back to back from the same port: no TIME_WAIT gets in the way.
            let a = p.probe(64, Duration::from_secs(5), &stop).unwrap();
            assert!(
                matches!(a, Answer::Destination { from, .. } if from == target.ip()),
                "{a:?}"
            );
            let (c, peer) = l.accept().unwrap();
            assert_eq!(peer.port(), port);
            drop(c);
        }
    }

    #[test]
    fn a_tcp_probe_to_a_closed_port_is_answered_by_the_destination() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = l.local_addr().unwrap();
        drop(l);
        let mut p =
            Prober::new(TraceProtocol::Tcp, IpAddr::V4(Ipv4Addr::LOCALHOST), target).unwrap();
        let a = p
            .probe(64, Duration::from_secs(5), &AtomicBool::new(false))
            .unwrap();
        assert!(matches!(a, Answer::Destination { .. }), "{a:?}");
    }

    #[test]
    fn a_udp_probe_to_a_closed_port_reads_the_port_unreachable() {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = u.local_addr().unwrap();
        drop(u);
        let mut p =
            Prober::new(TraceProtocol::Udp, IpAddr::V4(Ipv4Addr::LOCALHOST), target).unwrap();
        for _ in 0..2 {
            let a = p
                .probe(64, Duration::from_secs(5), &AtomicBool::new(false))
                .unwrap();
            assert!(
                matches!(a, Answer::Destination { from, .. } if from == target.ip()),
                "{a:?}"
            );
        }
    }

    #[test]
    fn a_stop_ends_a_silent_probe_at_once() {
        // A UDP server that never answers: the probe would wait its whole timeout.
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut p = Prober::new(
            TraceProtocol::Udp,
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            u.local_addr().unwrap(),
        )
        .unwrap();
        let stop = AtomicBool::new(true);
        let t = Instant::now();
        assert_eq!(
            p.probe(64, Duration::from_secs(30), &stop).unwrap(),
            Answer::Silent
        );
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn control_messages_are_parsed_or_refused_never_read_past() {
        assert!(parse_control(&[]).is_none());
        assert!(parse_control(&[0xff; 15]).is_none());
        // A header claiming more than there is.
        let mut b = vec![0u8; 32];
        b[..8].copy_from_slice(&1000usize.to_ne_bytes());
        assert!(parse_control(&b).is_none());
        // A well-formed IP_RECVERR with a time exceeded from 198.18.1.2.
        let mut m = vec![0u8; 16 + 16 + 16];
        m[..8].copy_from_slice(&48usize.to_ne_bytes());
        m[8..12].copy_from_slice(&libc::IPPROTO_IP.to_ne_bytes());
        m[12..16].copy_from_slice(&libc::IP_RECVERR.to_ne_bytes());
        m[16 + 4] = libc::SO_EE_ORIGIN_ICMP;
        m[16 + 5] = 11;
        m[32..34].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        m[36..40].copy_from_slice(&[198, 18, 1, 2]);
        let icmp = parse_control(&m).unwrap();
        assert_eq!(icmp.kind, IcmpKind::TimeExceeded);
        assert_eq!(icmp.from, Some(IpAddr::from([198, 18, 1, 2])));
    }
}
