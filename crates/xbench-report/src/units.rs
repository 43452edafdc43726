//! The throughput unit of tables and charts: Mbit/s, Gbit/s, or MB/s as one field report
//! compared against a 125 MB/s link. Everything is stored in bits per second; a unit only
//! scales what is shown. JSON output always stays in bits per second.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// How throughput is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum ThroughputUnit {
    /// Megabits per second (10⁶ bit/s), as links are sold.
    #[default]
    #[serde(rename = "Mbit/s")]
    Mbits,
    /// Gigabits per second (10⁹ bit/s).
    #[serde(rename = "Gbit/s")]
    Gbits,
    /// Megabytes per second (10⁶ byte/s), as file copies report.
    #[serde(rename = "MB/s")]
    MBytes,
}

impl ThroughputUnit {
    /// Multiply bits per second by this to get the unit.
    pub fn factor(self) -> f64 {
        match self {
            ThroughputUnit::Mbits => 1e-6,
            ThroughputUnit::Gbits => 1e-9,
            ThroughputUnit::MBytes => 1e-6 / 8.0,
        }
    }

    /// The unit's symbol.
    pub fn label(self) -> &'static str {
        match self {
            ThroughputUnit::Mbits => "Mbit/s",
            ThroughputUnit::Gbits => "Gbit/s",
            ThroughputUnit::MBytes => "MB/s",
        }
    }

    /// Bits per second in this unit, with three significant digits or more.
    pub fn format(self, bits_per_second: f64) -> String {
        number(bits_per_second * self.factor())
    }
}

/// A figure with at least three significant digits and no more decimals than that needs.
pub(crate) fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

impl fmt::Display for ThroughputUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A unit name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown throughput unit `{0}`; use Mbit/s (mbit), Gbit/s (gbit) or MB/s (mbyte)")]
pub struct UnknownUnit(String);

impl FromStr for ThroughputUnit {
    type Err = UnknownUnit;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Case matters only between bits and bytes (Mb vs MB), as people write them.
        match s.trim() {
            "Mbit/s" | "mbit" | "Mbit" | "mbps" | "Mbps" | "Mb/s" => Ok(ThroughputUnit::Mbits),
            "Gbit/s" | "gbit" | "Gbit" | "gbps" | "Gbps" | "Gb/s" => Ok(ThroughputUnit::Gbits),
            "MB/s" | "mbyte" | "MByte" | "MBps" => Ok(ThroughputUnit::MBytes),
            other => Err(UnknownUnit(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_scale_and_parse() {
        assert_eq!(ThroughputUnit::Mbits.format(812_345_678.0), "812");
        assert_eq!(ThroughputUnit::Gbits.format(9_410_000_000.0), "9.41");
        // 1 Gbit/s is 125 MB/s, the ceiling one field report compared against.
        assert_eq!(ThroughputUnit::MBytes.format(1e9), "125");
        assert_eq!("MB/s".parse(), Ok(ThroughputUnit::MBytes));
        assert_eq!("gbit".parse(), Ok(ThroughputUnit::Gbits));
        assert!("furlongs".parse::<ThroughputUnit>().is_err());
    }
}
