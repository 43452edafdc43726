//! IPv4 CIDR blocks: parsing, overlap tests and carving subnets out of a VPC block.
//!
//! Only what a scenario needs: VPC and subnet blocks, security-group sources and route
//! destinations. Not a general IP-address library (no IPv6: the paths under test are IPv4).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An IPv4 network in CIDR notation, with no host bits set (`10.0.0.0/16`, not `10.0.0.1/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ipv4Cidr {
    network: Ipv4Addr,
    prefix: u8,
}

/// Why a string is not a CIDR block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CidrError {
    /// No `/` or not an IPv4 address before it.
    #[error("'{0}' is not an IPv4 CIDR block such as 10.0.0.0/16")]
    Syntax(String),
    /// The prefix length is not 0–32.
    #[error("'{0}': the prefix length must be 0 to 32")]
    Prefix(String),
    /// The address has bits set past the prefix.
    #[error("'{given}' has host bits set; the network is {suggestion}")]
    HostBits {
        /// What was written.
        given: String,
        /// The network the address belongs to.
        suggestion: String,
    },
}

impl Ipv4Cidr {
    /// A block from its network address and prefix length; `None` if host bits are set or the
    /// prefix is over 32.
    pub fn new(network: Ipv4Addr, prefix: u8) -> Option<Self> {
        if prefix > 32 || u32::from(network) & !mask(prefix) != 0 {
            return None;
        }
        Some(Self { network, prefix })
    }

    /// The one-address block `ip/32`.
    pub fn host(ip: Ipv4Addr) -> Self {
        Self {
            network: ip,
            prefix: 32,
        }
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is inside the block.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.prefix) == u32::from(self.network)
    }

    /// Whether the two blocks share at least one address.
    pub fn overlaps(&self, other: &Ipv4Cidr) -> bool {
        let shorter = self.prefix.min(other.prefix);
        u32::from(self.network) & mask(shorter) == u32::from(other.network) & mask(shorter)
    }

    /// The `index`-th block of length `prefix` inside this one, or `None` when it does not fit.
    pub fn subnet(&self, prefix: u8, index: u32) -> Option<Ipv4Cidr> {
        if prefix < self.prefix || prefix > 32 {
            return None;
        }
        let bits = u32::from(prefix - self.prefix);
        if bits < 32 && index >= (1u32 << bits) {
            return None;
        }
        let step = if prefix == 0 {
            0
        } else {
            1u32 << (32 - u32::from(prefix))
        };
        let network = u32::from(self.network).checked_add(index.checked_mul(step)?)?;
        Ipv4Cidr::new(Ipv4Addr::from(network), prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    }
}

impl FromStr for Ipv4Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| CidrError::Syntax(s.to_owned()))?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| CidrError::Syntax(s.to_owned()))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| CidrError::Syntax(s.to_owned()))?;
        if prefix > 32 {
            return Err(CidrError::Prefix(s.to_owned()));
        }
        Ipv4Cidr::new(addr, prefix).ok_or_else(|| CidrError::HostBits {
            given: s.to_owned(),
            suggestion: format!(
                "{}/{prefix}",
                Ipv4Addr::from(u32::from(addr) & mask(prefix))
            ),
        })
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Serialize for Ipv4Cidr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ipv4Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_host_bits() {
        let c: Ipv4Cidr = "10.1.0.0/16".parse().unwrap();
        assert_eq!(c.to_string(), "10.1.0.0/16");
        let e = "10.1.2.3/16".parse::<Ipv4Cidr>().unwrap_err();
        assert!(e.to_string().contains("10.1.0.0/16"), "{e}");
        assert!("10.1.0.0".parse::<Ipv4Cidr>().is_err());
        assert!("10.1.0.0/33".parse::<Ipv4Cidr>().is_err());
    }

    #[test]
    fn overlap_and_subnets() {
        let a: Ipv4Cidr = "10.0.0.0/16".parse().unwrap();
        let b: Ipv4Cidr = "10.0.128.0/17".parse().unwrap();
        let c: Ipv4Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c));
        assert_eq!(a.subnet(24, 3).unwrap().to_string(), "10.0.3.0/24");
        assert!(a.subnet(24, 256).is_none());
        assert!(a.subnet(8, 0).is_none());
        assert!(a.contains("10.0.200.1".parse().unwrap()));
    }
}
