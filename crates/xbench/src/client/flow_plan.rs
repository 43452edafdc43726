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
//! destination). Ports reserved with `ip_local_reserved_ports` or held by other connections to
//! the same server are not counted: the plan is the most that can fit, not a promise.
//!
//! Not the opening itself (the client's `connect` module) nor the open-file limit (the CLI's).

use std::fmt;
use std::io;
use std::net::IpAddr;

/// The kernel's ephemeral port range, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port the kernel gives an outgoing connection.
    pub low: u16,
    /// Highest port, included.
    pub high: u16,
}

impl PortRange {
    /// Where the kernel keeps the range; per network namespace.
    pub const SYSCTL: &'static str = "/proc/sys/net/ipv4/ip_local_port_range";

    /// The range of the calling process's network namespace.
    pub fn current() -> io::Result<PortRange> {
        let text = std::fs::read_to_string(Self::SYSCTL)?;
        Self::parse(&text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} holds `{}`", Self::SYSCTL, text.trim()),
            )
        })
    }

    /// [`Self::current`], or Linux's default where the kernel does not say (not Linux).
    pub fn current_or_default() -> PortRange {
        Self::current().unwrap_or_default()
    }

    /// Ports in the range: what one (source address, server address, server port) has.
    pub fn len(&self) -> u32 {
        (u32::from(self.high) + 1).saturating_sub(u32::from(self.low))
    }

    /// Whether the range holds no port at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn parse(text: &str) -> Option<PortRange> {
        let mut it = text.split_whitespace().map(str::parse::<u16>);
        let (low, high) = (it.next()?.ok()?, it.next()?.ok()?);
        Some(PortRange { low, high })
    }
}

impl Default for PortRange {
    /// Linux's default, 32768–60999 (28,232 ports).
    fn default() -> Self {
        PortRange {
            low: 32768,
            high: 60999,
        }
    }
}

/// The local address of each flow, round-robin over the addresses given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowPlan {
    sources: Vec<IpAddr>,
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
        })
    }

    /// The local address flow `flow` binds to; `None` leaves it to the kernel.
    pub fn source(&self, flow: usize) -> Option<IpAddr> {
        match self.sources.len() {
            0 => None,
            n => Some(self.sources[(flow + 1) % n]),
        }
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
        write!(
            f,
            "--flows {} do not fit: a connection is named by (local address, local port, server \
             address, server port), and every flow goes to the same server address and port, so \
             {} local address{} × {} ephemeral ports ({}–{}, {}) give at most {} flows (one port \
             is the control connection's). Give -B {} local addresses (a comma list; on \
             loopback any of 127.0.0.0/8), or widen the range (sysctl \
             net.ipv4.ip_local_port_range, per network namespace), or use --flows {} or fewer",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: u8) -> Vec<IpAddr> {
        (1..=n).map(|i| IpAddr::from([127, 0, 0, i])).collect()
    }

    /// The issue-22 case: 65,535 flows (the most `--flows` takes) with the default range.
    #[test]
    fn the_most_flows_fit_three_addresses_of_the_default_range_but_not_two() {
        let range = PortRange::default();
        assert_eq!(range.len(), 28_232);
        let three = addrs(3);
        let plan = FlowPlan::new(65_535, &three, range).expect("3 × 28,232 fit");
        let mut per = [0usize; 3];
        for f in 0..65_535 {
            let a = plan.source(f).expect("bound");
            per[three.iter().position(|&x| x == a).expect("one of them")] += 1;
        }
        assert_eq!(per, [21_845, 21_845, 21_845]);

        let e = FlowPlan::new(65_535, &addrs(2), range).expect_err("2 × 28,232 = 56,464");
        assert_eq!(e.addresses_needed(), 3);
        let m = e.to_string();
        for part in [
            "--flows 65535 do not fit",
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

    #[test]
    fn one_address_holds_its_range_less_the_control_connection() {
        let range = PortRange {
            low: 61000,
            high: 61059,
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
