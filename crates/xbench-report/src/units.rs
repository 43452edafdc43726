//! The throughput unit of tables and charts: Mbit/s, Gbit/s, or MB/s as one field report
//! compared against a 125 MB/s link, and every unit iperf3's `-f` letters name. Everything is
//! stored in bits per second; a unit only scales what is shown. JSON output always stays in
//! bits per second.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// How throughput is shown.
///
/// Decimal units (kbit/s … Tbit/s, kB/s … GB/s) are what links are sold in and what xbench
/// shows by default. The binary byte units (KiB/s … TiB/s) are iperf3's `-f K/M/G/T`, which
/// iperf3 labels `KBytes/sec` but computes in powers of 1024; the label here says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum ThroughputUnit {
    /// Kilobits per second (10³ bit/s); iperf3's `-f k`.
    #[serde(rename = "kbit/s")]
    Kbits,
    /// Megabits per second (10⁶ bit/s), as links are sold; iperf3's `-f m`.
    #[default]
    #[serde(rename = "Mbit/s")]
    Mbits,
    /// Gigabits per second (10⁹ bit/s); iperf3's `-f g`.
    #[serde(rename = "Gbit/s")]
    Gbits,
    /// Terabits per second (10¹² bit/s); iperf3's `-f t`.
    #[serde(rename = "Tbit/s")]
    Tbits,
    /// Kilobytes per second (10³ byte/s).
    #[serde(rename = "kB/s")]
    KBytes,
    /// Megabytes per second (10⁶ byte/s), as file copies report.
    #[serde(rename = "MB/s")]
    MBytes,
    /// Gigabytes per second (10⁹ byte/s).
    #[serde(rename = "GB/s")]
    GBytes,
    /// Kibibytes per second (2¹⁰ byte/s); iperf3's `-f K`.
    #[serde(rename = "KiB/s")]
    KiBytes,
    /// Mebibytes per second (2²⁰ byte/s); iperf3's `-f M`.
    #[serde(rename = "MiB/s")]
    MiBytes,
    /// Gibibytes per second (2³⁰ byte/s); iperf3's `-f G`.
    #[serde(rename = "GiB/s")]
    GiBytes,
    /// Tebibytes per second (2⁴⁰ byte/s); iperf3's `-f T`.
    #[serde(rename = "TiB/s")]
    TiBytes,
}

impl ThroughputUnit {
    /// Every unit, smallest first within bits, decimal bytes and binary bytes.
    pub const ALL: [ThroughputUnit; 11] = [
        ThroughputUnit::Kbits,
        ThroughputUnit::Mbits,
        ThroughputUnit::Gbits,
        ThroughputUnit::Tbits,
        ThroughputUnit::KBytes,
        ThroughputUnit::MBytes,
        ThroughputUnit::GBytes,
        ThroughputUnit::KiBytes,
        ThroughputUnit::MiBytes,
        ThroughputUnit::GiBytes,
        ThroughputUnit::TiBytes,
    ];

    /// Multiply bits per second by this to get the unit.
    pub fn factor(self) -> f64 {
        const KI: f64 = 1024.0;
        match self {
            ThroughputUnit::Kbits => 1e-3,
            ThroughputUnit::Mbits => 1e-6,
            ThroughputUnit::Gbits => 1e-9,
            ThroughputUnit::Tbits => 1e-12,
            ThroughputUnit::KBytes => 1e-3 / 8.0,
            ThroughputUnit::MBytes => 1e-6 / 8.0,
            ThroughputUnit::GBytes => 1e-9 / 8.0,
            ThroughputUnit::KiBytes => 1.0 / 8.0 / KI,
            ThroughputUnit::MiBytes => 1.0 / 8.0 / (KI * KI),
            ThroughputUnit::GiBytes => 1.0 / 8.0 / (KI * KI * KI),
            ThroughputUnit::TiBytes => 1.0 / 8.0 / (KI * KI * KI * KI),
        }
    }

    /// The unit's symbol.
    pub fn label(self) -> &'static str {
        match self {
            ThroughputUnit::Kbits => "kbit/s",
            ThroughputUnit::Mbits => "Mbit/s",
            ThroughputUnit::Gbits => "Gbit/s",
            ThroughputUnit::Tbits => "Tbit/s",
            ThroughputUnit::KBytes => "kB/s",
            ThroughputUnit::MBytes => "MB/s",
            ThroughputUnit::GBytes => "GB/s",
            ThroughputUnit::KiBytes => "KiB/s",
            ThroughputUnit::MiBytes => "MiB/s",
            ThroughputUnit::GiBytes => "GiB/s",
            ThroughputUnit::TiBytes => "TiB/s",
        }
    }

    /// Bits per second in this unit, with three significant digits or more.
    pub fn format(self, bits_per_second: f64) -> String {
        number(bits_per_second * self.factor())
    }

    /// Bits per second in this unit, with its symbol: `812 Mbit/s`.
    pub fn format_with_label(self, bits_per_second: f64) -> String {
        format!("{} {}", self.format(bits_per_second), self.label())
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

/// A share in percent as loss is read: `0 %` only when exactly none, else enough digits that a
/// single datagram in millions does not show as zero (`0.0001 %`).
pub(crate) fn percent(p: f64) -> String {
    if p == 0.0 {
        "0 %".to_owned()
    } else if p.abs() >= 0.1 {
        format!("{} %", number(p))
    } else {
        // Two significant digits of a small share.
        let digits = (-p.abs().log10()).ceil() as usize + 1;
        format!("{p:.digits$} %")
    }
}

impl fmt::Display for ThroughputUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A unit name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown throughput unit `{0}`; use kbit/s, Mbit/s, Gbit/s, Tbit/s, kB/s, MB/s, GB/s, \
     KiB/s, MiB/s, GiB/s, TiB/s, or iperf3's letters: k m g t for bits (powers of 1000), \
     K M G T for bytes (powers of 1024)"
)]
pub struct UnknownUnit(String);

impl FromStr for ThroughputUnit {
    type Err = UnknownUnit;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use ThroughputUnit::*;
        // Case matters between bits and bytes (Mb vs MB), as people write them, and in
        // iperf3's letters: lower case bits, upper case bytes.
        Ok(match s.trim() {
            "k" | "kbit/s" | "Kbit/s" | "kbit" | "Kbit" | "kbps" | "Kbps" | "kb/s" | "Kb/s" => {
                Kbits
            }
            "m" | "Mbit/s" | "mbit" | "Mbit" | "mbps" | "Mbps" | "Mb/s" => Mbits,
            "g" | "Gbit/s" | "gbit" | "Gbit" | "gbps" | "Gbps" | "Gb/s" => Gbits,
            "t" | "Tbit/s" | "tbit" | "Tbit" | "tbps" | "Tbps" | "Tb/s" => Tbits,
            "kB/s" | "kbyte" | "kByte" | "kBps" => KBytes,
            "MB/s" | "mbyte" | "MByte" | "MBps" => MBytes,
            "GB/s" | "gbyte" | "GByte" | "GBps" => GBytes,
            "K" | "KiB/s" | "kib/s" | "KiB" => KiBytes,
            "M" | "MiB/s" | "mib/s" | "MiB" => MiBytes,
            "G" | "GiB/s" | "gib/s" | "GiB" => GiBytes,
            "T" | "TiB/s" | "tib/s" | "TiB" => TiBytes,
            other => return Err(UnknownUnit(other.to_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_losses_do_not_read_as_none() {
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(50.0), "50.0 %");
        assert_eq!(percent(0.5), "0.500 %");
        assert_eq!(percent(0.012), "0.012 %");
        assert_eq!(percent(0.0001234), "0.00012 %");
    }

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

    /// iperf3's `-f` letters mean what they mean to iperf3: lower case bits in powers of
    /// 1000, upper case bytes in powers of 1024 (units.c: `conversion_bytes`).
    #[test]
    fn iperf3_letters_are_bits_in_thousands_and_bytes_in_1024s() {
        let bps = 1e9; // 1 Gbit/s = 125 000 000 bytes/s
        let cases = [
            ("k", "1000000 kbit/s"),
            ("m", "1000 Mbit/s"),
            ("g", "1.00 Gbit/s"),
            ("t", "0.001 Tbit/s"),
            ("K", "122070 KiB/s"),
            ("M", "119 MiB/s"),
            ("G", "0.116 GiB/s"),
        ];
        for (letter, shown) in cases {
            let u: ThroughputUnit = letter.parse().unwrap_or_else(|e| panic!("{letter}: {e}"));
            assert_eq!(u.format_with_label(bps), shown, "-f {letter}");
        }
        assert_eq!("T".parse(), Ok(ThroughputUnit::TiBytes));
        // 2^20 bytes/s is 1 MiB/s exactly.
        assert_eq!(ThroughputUnit::MiBytes.format(8.0 * 1_048_576.0), "1.00");
    }

    /// Every unit's label parses back to it, and its serde name is its label.
    #[test]
    fn every_label_parses_back_and_serializes_as_itself() {
        for u in ThroughputUnit::ALL {
            assert_eq!(u.label().parse(), Ok(u), "{u}");
            assert_eq!(
                serde_json::to_value(u).ok(),
                Some(serde_json::Value::String(u.label().to_owned()))
            );
        }
        let e = "x".parse::<ThroughputUnit>().unwrap_err().to_string();
        assert!(e.contains("K M G T for bytes (powers of 1024)"), "{e}");
    }
}
