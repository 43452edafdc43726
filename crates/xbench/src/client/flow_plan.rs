//! Which local address each request/response flow connects from, and whether the flows fit
//! in the 4-tuple space at all: a pure plan, made before the first connection is opened.
//!
//! A TCP connection is named by (source address, source port, destination address,
//! destination port). Every flow of a test goes to the same server address and port, so with
//! one local address the flows differ only in their source port, and the kernel has one
//! ephemeral port range to give (`net.ipv4.ip_local_port_range`, 28,232 ports by default, per
//! network namespace). More flows than that need more local addresses (`-B a,b,…`): each
//! brings a whole range again. Several server ports would too, but an xbench server listens on
//! one port, and a second listening port buys nothing a second local address does not (on
//! loopback, all of 127.0.0.0/8 is local already).
//!
//! Ports: since Linux 4.6 `connect()` tries ports of one parity first and `bind(port 0)` the
//! other, so that bound listeners rarely take what outgoing connections need; `connect()` falls
//! back to the other half, so one 4-tuple still has the whole range. Flows bound to a local
//! address set `IP_BIND_ADDRESS_NO_PORT`, so the port is still picked at `connect()` by
//! 4-tuple, not at `bind()` (where it would have to be free on that address for every
//! destination). Ports listed in `net.ipv4.ip_local_reserved_ports` are never picked by
//! `connect()`, so those inside the range are subtracted; ports held by other connections to
//! the same server are not: the plan is the most that can fit, not a promise.
//!
//! `--crr` opens a new connection per transaction, but xbench waits for the server to close
//! each one first, so the server, not the client, keeps it in TIME_WAIT: each flow holds one
//! port at a time, and the plan is the same. When the ports run out anyway (`EADDRNOTAVAIL`:
//! connections this end closed first, another program's), [`FlowPlan::out_of_ports`] says
//! with the numbers how much a rate keeps in TIME_WAIT against what the addresses give.
//!
//! Not the opening itself (the client's `connect` module) nor the open-file limit (the CLI's).

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

/// How long Linux keeps the 4-tuple of a connection closed by this end first (TIME_WAIT,
/// the kernel's fixed `TCP_TIMEWAIT_LEN`): its port cannot go to the same server port again
/// until then.
pub const TIME_WAIT: Duration = Duration::from_secs(60);

/// The kernel's ephemeral port range, both ends included, and how many of its ports are
/// reserved (never given to an outgoing connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port the kernel gives an outgoing connection.
    pub low: u16,
    /// Highest port, included.
    pub high: u16,
    /// Ports between `low` and `high` listed in `net.ipv4.ip_local_reserved_ports`: the kernel
    /// skips them when it picks a port, so they hold no flow ([`Self::excluding`]).
    pub reserved: u32,
}

impl PortRange {
    /// Where the kernel keeps the range; per network namespace.
    pub const SYSCTL: &'static str = "/proc/sys/net/ipv4/ip_local_port_range";
    /// Where the kernel keeps the reserved ports (`a-b,c`, empty for none); per namespace.
    pub const RESERVED_SYSCTL: &'static str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

    /// The range of the calling process's network namespace, less its reserved ports.
    pub fn current() -> io::Result<PortRange> {
        let text = std::fs::read_to_string(Self::SYSCTL)?;
        let range = Self::parse(&text).ok_or_else(|| invalid(Self::SYSCTL, &text))?;
        match std::fs::read_to_string(Self::RESERVED_SYSCTL) {
            Ok(text) => parse_reserved_ports(&text)
                .map(|r| range.excluding(&r))
                .ok_or_else(|| invalid(Self::RESERVED_SYSCTL, &text)),
            // Kernels before 2.6.35 have no reserved ports.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(range),
            Err(e) => Err(e),
        }
    }

    /// [`Self::current`], or Linux's default where the kernel does not say (not Linux).
    pub fn current_or_default() -> PortRange {
        Self::current().unwrap_or_default()
    }

    /// This range with `reserved` (as [`parse_reserved_ports`] gives them) subtracted: each
    /// port inside the range counted once, however the lists overlap.
    pub fn excluding(self, reserved: &[RangeInclusive<u16>]) -> PortRange {
        let mut inside: Vec<(u32, u32)> = reserved
            .iter()
            .map(|r| ((*r.start()).max(self.low), (*r.end()).min(self.high)))
            .filter(|(a, b)| a <= b)
            .map(|(a, b)| (u32::from(a), u32::from(b)))
            .collect();
        inside.sort_unstable();
        let (mut count, mut next) = (0, 0);
        for (a, b) in inside {
            let a = a.max(next);
            if a <= b {
                count += b - a + 1;
                next = b + 1;
            }
        }
        PortRange {
            reserved: count,
            ..self
        }
    }

    /// Ports the range spans, reserved ones included.
    pub fn span(&self) -> u32 {
        (u32::from(self.high) + 1).saturating_sub(u32::from(self.low))
    }

    /// Ports the kernel may give: what one (source address, server address, server port) has.
    pub fn len(&self) -> u32 {
        self.span().saturating_sub(self.reserved)
    }

    /// Whether the range holds no port at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn parse(text: &str) -> Option<PortRange> {
        let mut it = text.split_whitespace().map(str::parse::<u16>);
        let (low, high) = (it.next()?.ok()?, it.next()?.ok()?);
        Some(PortRange {
            low,
            high,
            reserved: 0,
        })
    }
}

impl Default for PortRange {
    /// Linux's default, 32768–60999 (28,232 ports), none reserved.
    fn default() -> Self {
        PortRange {
            low: 32768,
            high: 60999,
            reserved: 0,
        }
    }
}

/// The ports listed in `net.ipv4.ip_local_reserved_ports` as the kernel writes it: a comma
/// list of ports and `low-high` ranges (`8080,50000-50010`), empty for none. `None` for
/// anything else, a range whose low end is above its high end included.
pub fn parse_reserved_ports(text: &str) -> Option<Vec<RangeInclusive<u16>>> {
    let text = text.trim();
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|item| {
            let (a, b) = item.split_once('-').unwrap_or((item, item));
            let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            (a <= b).then_some(a..=b)
        })
        .collect()
}

fn invalid(path: &str, text: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{path} holds `{}`", text.trim()),
    )
}

/// The local address of each flow, round-robin over the addresses given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowPlan {
    sources: Vec<IpAddr>,
    /// Kept for [`Self::out_of_ports`]: what the plan was made with.
    flows: usize,
    range: PortRange,
}

impl FlowPlan {
    /// Plans `flows` connections to one server address and port from `sources` (empty: the
    /// address the kernel picks, one address) with `range`'s ephemeral ports each. The control
    /// connection takes one port of the first source, so flow `i` goes from source
    /// `(i + 1) mod n`: the first source gets the fewest flows.
    pub fn new(flows: usize, sources: &[IpAddr], range: PortRange) -> Result<Self, PortSpace> {
        let addresses = sources.len().max(1);
        let capacity = (addresses as u64 * u64::from(range.len())).saturating_sub(1);
        if flows as u64 > capacity {
            return Err(PortSpace {
                flows,
                addresses,
                range,
            });
        }
        Ok(FlowPlan {
            sources: sources.to_vec(),
            flows,
            range,
        })
    }

    /// What to say when a connection of this plan finds no local port (`EADDRNOTAVAIL`)
    /// while the test opens `per_second` new connections a second (`asked`: `--rate` × flows;
    /// else as measured so far).
    pub fn out_of_ports(&self, per_second: f64, asked: bool) -> OutOfPorts {
        OutOfPorts {
            flows: self.flows,
            addresses: self.sources.len().max(1),
            range: self.range,
            per_second,
            asked,
        }
    }

    /// Flows planned.
    pub fn flows(&self) -> usize {
        self.flows
    }

    /// The local address flow `flow` binds to; `None` leaves it to the kernel.
    pub fn source(&self, flow: usize) -> Option<IpAddr> {
        round_robin(&self.sources, flow)
    }
}

/// The address of `sources` flow or stream `flow` comes from: `(flow + 1) mod n`, since the
/// control connection comes from the first. `None` (the kernel's choice) for an empty list.
/// Every mode that spreads its data over a `-B` list uses this one rule, planned or not.
pub fn round_robin(sources: &[IpAddr], flow: usize) -> Option<IpAddr> {
    match sources.len() {
        0 => None,
        n => Some(sources[(flow + 1) % n]),
    }
}

/// More flows than the 4-tuples from these local addresses to one server port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpace {
    /// Flows asked.
    pub flows: usize,
    /// Local addresses they may come from (`-B`; 1 without it).
    pub addresses: usize,
    /// Each address's ephemeral ports.
    pub range: PortRange,
}

impl PortSpace {
    /// Local addresses the flows would need with this range (the control connection's port
    /// included).
    pub fn addresses_needed(&self) -> u64 {
        (self.flows as u64 + 1).div_ceil(u64::from(self.range.len()).max(1))
    }
}

impl fmt::Display for PortSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports = u64::from(self.range.len());
        let fit = (self.addresses as u64 * ports).saturating_sub(1);
        let (reserved, unreserve) = match self.range.reserved {
            0 => (String::new(), ""),
            n => (
                format!(" less {n} reserved in {}", PortRange::RESERVED_SYSCTL),
                ", or reserve fewer of its ports (sysctl net.ipv4.ip_local_reserved_ports)",
            ),
        };
        write!(
            f,
            "--flows {} do not fit: a connection is named by (local address, local port, server \
             address, server port), and every flow goes to the same server address and port, so \
             {} local address{} × {} ephemeral ports ({}–{}, {}{reserved}) give at most {} flows \
             (one port is the control connection's). Give -B {} local addresses (a comma list; \
             on loopback any of 127.0.0.0/8), or widen the range (sysctl \
             net.ipv4.ip_local_port_range, per network namespace){unreserve}, or use --flows {} \
             or fewer",
            self.flows,
            self.addresses,
            if self.addresses == 1 { "" } else { "es" },
            ports,
            self.range.low,
            self.range.high,
            PortRange::SYSCTL,
            fit,
            self.addresses_needed(),
            fit,
        )
    }
}

impl std::error::Error for PortSpace {}

/// A `--crr` connection found no local port (`EADDRNOTAVAIL`), in numbers: the connections
/// the local addresses give to one server port, those the flows hold at once, and the ports a
/// rate of new connections keeps in TIME_WAIT when this end closes them first.
#[derive(Debug, Clone, PartialEq)]
pub struct OutOfPorts {
    /// Flows of the test; each holds at most one connection at a time.
    pub flows: usize,
    /// Local addresses they come from (`-B`; 1 without it).
    pub addresses: usize,
    /// Each address's ephemeral ports.
    pub range: PortRange,
    /// New connections a second.
    pub per_second: f64,
    /// Whether `per_second` is the rate asked (`--rate` × flows) rather than as measured.
    pub asked: bool,
}

impl OutOfPorts {
    /// Connections the addresses give to one server port.
    pub fn capacity(&self) -> u64 {
        self.addresses as u64 * u64::from(self.range.len())
    }

    /// Ports `per_second` new connections keep in TIME_WAIT if this end closes them first.
    pub fn time_wait_ports(&self) -> u64 {
        (self.per_second.max(0.0) * TIME_WAIT.as_secs_f64()).ceil() as u64
    }

    /// Local addresses that would hold both the flows (and the control connection) and
    /// [`Self::time_wait_ports`]; at least one more than now, since these ran out.
    pub fn addresses_needed(&self) -> u64 {
        let demand = (self.flows as u64 + 1).max(self.time_wait_ports());
        demand
            .div_ceil(u64::from(self.range.len()).max(1))
            .max(self.addresses as u64 + 1)
    }
}

impl fmt::Display for OutOfPorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (capacity, tw) = (self.capacity(), self.time_wait_ports());
        let rate = if self.asked {
            format!("{:.0}/s (--rate × --flows)", self.per_second)
        } else {
            format!("about {:.0}/s so far", self.per_second)
        };
        write!(
            f,
            "out of local ports (EADDRNOTAVAIL): {} local address{} × {} ephemeral ports ({}–{}) \
             give {capacity} connections to one server port; this test holds at most {} at once \
             (one a flow) and opens {rate}",
            self.addresses,
            if self.addresses == 1 { "" } else { "es" },
            self.range.len(),
            self.range.low,
            self.range.high,
            self.flows,
        )?;
        if tw > 0 {
            write!(
                f,
                ". A port whose connection this end closed first stays taken {} s \
                 (TIME_WAIT): at that rate up to {tw} ports{}; xbench waits for the server to \
                 close each --crr connection, so its own stay out of TIME_WAIT unless cut short",
                TIME_WAIT.as_secs(),
                if tw > capacity {
                    format!(", more than the {capacity} there are")
                } else {
                    String::new()
                },
            )?;
        }
        // The flows and the control connection fit.
        if (self.flows as u64) < capacity && tw <= capacity {
            write!(
                f,
                ". This test fits, so other sockets hold the ports (`ss -tan` shows which, \
                 `ss -tan state time-wait` those in TIME_WAIT)"
            )?;
        }
        write!(
            f,
            ". Give -B {} local addresses (a comma list; on loopback any of 127.0.0.0/8), a \
             lower --rate, or widen the range (sysctl net.ipv4.ip_local_port_range)",
            self.addresses_needed(),
        )
    }
}

/// A `-B` list a test cannot use as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindList {
    /// The list as given.
    pub list: Vec<IpAddr>,
    /// Why not, and what to do instead.
    pub reason: String,
}

impl BindList {
    /// Refuses a list with an address twice (the plan would count its ports twice) or of two
    /// families (a connection goes from one family to the same family).
    pub fn check(list: &[IpAddr]) -> Result<(), BindList> {
        let refuse = |reason: String| {
            Err(BindList {
                list: list.to_vec(),
                reason,
            })
        };
        let mut seen = HashSet::new();
        if let Some(twice) = list.iter().find(|a| !seen.insert(**a)) {
            return refuse(format!(
                "{twice} is listed twice; each address brings its ports once, so list it once"
            ));
        }
        if list.iter().any(IpAddr::is_ipv4) && list.iter().any(IpAddr::is_ipv6) {
            return refuse(
                "mixes IPv4 and IPv6 addresses, and every connection goes to one server \
                 address: list addresses of the server's family only"
                    .into(),
            );
        }
        Ok(())
    }

    /// The refusal of a list by an iperf3 UDP test (`--iperf3 -u`).
    pub fn iperf3_udp(list: &[IpAddr]) -> BindList {
        BindList {
            list: list.to_vec(),
            reason: "an iperf3 UDP test's streams all go to the server's one port, and a \
             server tells whose they are by the client's address (xbench's does): give \
             one -B address (TCP iperf3 streams, matched by their cookie, take a list)"
                .into(),
        }
    }
}

impl fmt::Display for BindList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.list.iter().map(ToString::to_string).collect();
        write!(f, "-B {}: {}", list.join(","), self.reason)
    }
}

impl std::error::Error for BindList {}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: u8) -> Vec<IpAddr> {
        (1..=n).map(|i| IpAddr::from([127, 0, 0, i])).collect()
    }

    /// How many of `flows` flows each of `sources` carries under `plan`.
    fn spread(plan: &FlowPlan, sources: &[IpAddr], flows: usize) -> Vec<usize> {
        let mut per = vec![0; sources.len()];
        for f in 0..flows {
            let a = plan.source(f).expect("bound");
            per[sources.iter().position(|&x| x == a).expect("one of them")] += 1;
        }
        per
    }

    /// The issue-22 case: 65,536 flows (the most `--flows` takes) with the default range.
    #[test]
    fn the_most_flows_fit_three_addresses_of_the_default_range_but_not_two() {
        let most = crate::config::MAX_FLOWS as usize;
        assert_eq!(most, 65_536);
        let range = PortRange::default();
        assert_eq!(range.len(), 28_232);
        let three = addrs(3);
        let plan = FlowPlan::new(most, &three, range).expect("3 × 28,232 fit");
        // Flow i from source (i + 1) mod 3: the first carries the control connection too.
        assert_eq!(spread(&plan, &three, most), [21_845, 21_846, 21_845]);

        let e = FlowPlan::new(most, &addrs(2), range).expect_err("2 × 28,232 = 56,464");
        assert_eq!(e.addresses_needed(), 3);
        let m = e.to_string();
        for part in [
            "--flows 65536 do not fit",
            "(local address, local port, server address, server port)",
            "2 local addresses × 28232 ephemeral ports (32768–60999",
            "at most 56463 flows",
            "Give -B 3 local addresses",
            "ip_local_port_range",
            "--flows 56463 or fewer",
        ] {
            assert!(m.contains(part), "{part:?} missing from: {m}");
        }
    }

    /// The widest range a host can set (1024–65535, 64,512 ports) still holds 65,536 flows
    /// from two addresses only, and a long -B list spreads them evenly.
    #[test]
    fn the_most_flows_over_the_widest_range_and_over_a_long_address_list() {
        let most = crate::config::MAX_FLOWS as usize;
        let wide = PortRange {
            low: 1024,
            high: 65535,
            reserved: 0,
        };
        let e = FlowPlan::new(most, &[], wide).expect_err("64,512 ports, one address");
        assert_eq!(e.addresses_needed(), 2);
        assert!(e.to_string().contains("at most 64511 flows"), "{e}");
        let two = addrs(2);
        let plan = FlowPlan::new(most, &two, wide).expect("2 × 64,512 fit");
        assert_eq!(spread(&plan, &two, most), [32_768, 32_768]);
        let eight = addrs(8);
        let plan = FlowPlan::new(most, &eight, PortRange::default()).expect("8 × 28,232 fit");
        assert_eq!(spread(&plan, &eight, most), [8_192; 8]);
    }

    /// Reserved ports inside the range hold no flow: 65,536 flows fit three addresses of the
    /// default range while at most 6,386 of its ports are reserved (3 × 21,846 − 1 = 65,537),
    /// not with one more (3 × 21,845 − 1 = 65,534).
    #[test]
    fn reserved_ports_inside_the_range_are_subtracted_and_named() {
        let most = crate::config::MAX_FLOWS as usize;
        let three = addrs(3);
        let default = PortRange::default();
        let fits = default.excluding(&[32768..=(32768 + 6_385)]);
        assert_eq!((fits.reserved, fits.len()), (6_386, 21_846));
        assert!(FlowPlan::new(most, &three, fits).is_ok());
        let over = default.excluding(&[32768..=(32768 + 6_386)]);
        assert_eq!(over.len(), 21_845);
        let e = FlowPlan::new(most, &three, over).expect_err("3 × 21,845 − 1 = 65,534");
        let m = e.to_string();
        for part in [
            "3 local addresses × 21845 ephemeral ports (32768–60999",
            "less 6387 reserved in /proc/sys/net/ipv4/ip_local_reserved_ports",
            "at most 65534 flows",
            "Give -B 4 local addresses",
            "reserve fewer of its ports (sysctl net.ipv4.ip_local_reserved_ports)",
        ] {
            assert!(m.contains(part), "{part:?} missing from: {m}");
        }
        // Without reserved ports the message does not mention them.
        let e = FlowPlan::new(60_000, &addrs(2), default).unwrap_err();
        assert!(!e.to_string().contains("reserved"), "{e}");
    }

    #[test]
    fn only_reserved_ports_inside_the_range_count_once_each() {
        let range = PortRange {
            low: 61000,
            high: 61059,
            reserved: 0,
        };
        let count = |r: &[RangeInclusive<u16>]| range.excluding(r).reserved;
        assert_eq!(count(&[]), 0);
        // Outside on both sides; straddling the low end (60990–61004: 5 inside) and the high
        // end (61055–61100: 5 inside); a single port; overlaps counted once.
        assert_eq!(count(&[80..=80, 61060..=62000, 1..=60999]), 0);
        assert_eq!(count(&[60990..=61004]), 5);
        assert_eq!(count(&[61055..=61100]), 5);
        assert_eq!(count(&[61010..=61010]), 1);
        assert_eq!(count(&[61010..=61019, 61015..=61024, 61012..=61013]), 15);
        assert_eq!(count(&[0..=65535]), 60);
        assert_eq!(range.excluding(&[0..=65535]).len(), 0);
        // Re-applying replaces, not adds: `reserved` is of the range, not a running total.
        assert_eq!(range.excluding(&[61010..=61019]).excluding(&[]).reserved, 0);
    }

    #[test]
    fn the_reserved_ports_sysctl_is_read_as_the_kernel_writes_it() {
        assert_eq!(parse_reserved_ports(""), Some(vec![]));
        assert_eq!(parse_reserved_ports("\n"), Some(vec![]));
        assert_eq!(
            parse_reserved_ports("8080,50000-50010\n"),
            Some(vec![8080..=8080, 50000..=50010])
        );
        assert_eq!(
            parse_reserved_ports("61000-61004,61050"),
            Some(vec![61000..=61004, 61050..=61050])
        );
        for bad in ["a", "1-", "-1", "5-4", "70000", "1,,2", "1 2"] {
            assert_eq!(parse_reserved_ports(bad), None, "{bad:?}");
        }
        // This namespace's, whatever it is, parses and lies within the range.
        let here = PortRange::current().expect("readable");
        assert!(here.reserved <= here.span());
    }

    #[test]
    fn one_address_holds_its_range_less_the_control_connection() {
        let range = PortRange {
            low: 61000,
            high: 61059,
            reserved: 0,
        };
        assert_eq!(range.len(), 60);
        let plan = FlowPlan::new(59, &[], range).expect("59 fit");
        assert_eq!(plan.source(0), None);
        let e = FlowPlan::new(60, &[], range).expect_err("60 + control do not");
        assert!(e.to_string().contains("1 local address × 60"), "{e}");
        assert!(e.to_string().contains("Give -B 2 local addresses"), "{e}");
        // Two addresses: 100 flows, 50 each, the first also carrying the control connection.
        let two = addrs(2);
        let plan = FlowPlan::new(100, &two, range).expect("100 fit two");
        let first = (0..100).filter(|&f| plan.source(f) == Some(two[0])).count();
        assert_eq!(first, 50);
        assert_eq!(plan.source(0), Some(two[1]));
        // At the edge the first address has one flow fewer, for the control connection.
        let plan = FlowPlan::new(119, &two, range).expect("119 + control = 120");
        let first = (0..119).filter(|&f| plan.source(f) == Some(two[0])).count();
        assert_eq!(first, 59);
        assert!(FlowPlan::new(120, &two, range).is_err());
    }

    /// `--crr` out of ports: the rate's TIME_WAIT against what the addresses give, and the
    /// addresses that would hold it; figures that fit say other sockets hold the ports.
    #[test]
    fn out_of_ports_names_the_time_wait_a_rate_keeps_against_the_addresses_ports() {
        let range = PortRange::default();
        let plan = FlowPlan::new(100, &addrs(2), range).expect("fits");
        // 2,000/s × 60 s = 120,000 ports against 2 × 28,232 = 56,464: 5 addresses hold it.
        let m = plan.out_of_ports(2_000.0, true);
        assert_eq!((m.capacity(), m.time_wait_ports()), (56_464, 120_000));
        assert_eq!(m.addresses_needed(), 5);
        let text = m.to_string();
        for part in [
            "out of local ports (EADDRNOTAVAIL): 2 local addresses × 28232 ephemeral ports \
             (32768–60999) give 56464 connections to one server port",
            "holds at most 100 at once (one a flow) and opens 2000/s (--rate × --flows)",
            "stays taken 60 s (TIME_WAIT): at that rate up to 120000 ports, more than the \
             56464 there are",
            "Give -B 5 local addresses",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        assert!(!text.contains("other sockets"), "{text}");
        // Measured, and within the ports: the figures fit, so others hold them; one more
        // address is still the way out.
        let m = plan.out_of_ports(10.4, false);
        assert_eq!(m.time_wait_ports(), 624);
        let text = m.to_string();
        assert!(text.contains("about 10/s so far"), "{text}");
        assert!(text.contains("up to 624 ports;"), "{text}");
        assert!(text.contains("other sockets hold the ports"), "{text}");
        assert!(text.contains("Give -B 3 local addresses"), "{text}");
        // Nothing opened yet: no TIME_WAIT clause at all.
        let text = FlowPlan::new(1, &[], range)
            .unwrap()
            .out_of_ports(0.0, false)
            .to_string();
        assert!(!text.contains("stays taken"), "{text}");
        assert!(text.contains("1 local address × 28232"), "{text}");
    }

    #[test]
    fn bind_lists_with_an_address_twice_or_two_families_are_refused() {
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let v6: IpAddr = "::1".parse().unwrap();
        assert!(BindList::check(&[]).is_ok());
        assert!(BindList::check(&addrs(3)).is_ok());
        let e = BindList::check(&[v4, "127.0.0.2".parse().unwrap(), v4]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("-B 127.0.0.1,127.0.0.2,127.0.0.1: 127.0.0.1 is listed twice"),
            "{e}"
        );
        let e = BindList::check(&[v4, v6]).unwrap_err();
        assert!(e.to_string().contains("mixes IPv4 and IPv6"), "{e}");
        assert_eq!(round_robin(&[], 7), None);
        assert_eq!(round_robin(&addrs(3), 0), Some(addrs(3)[1]));
        assert_eq!(round_robin(&addrs(3), 2), Some(addrs(3)[0]));
    }

    #[test]
    fn the_sysctl_is_read_as_the_kernel_writes_it() {
        assert_eq!(
            PortRange::parse("32768\t60999\n"),
            Some(PortRange::default())
        );
        assert_eq!(PortRange::parse("1024 1023").map(|r| r.len()), Some(0));
        assert_eq!(PortRange::parse("32768"), None);
        assert_eq!(PortRange::parse("a b"), None);
        // This namespace's, whatever it is, parses.
        assert!(PortRange::current().is_ok());
    }
}
