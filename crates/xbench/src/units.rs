//! Byte sizes and bit rates as people type them (`256K`, `1.5G`, `100M`), and back.
//!
//! Sizes follow iperf3: `K`, `M`, `G`, `T` are powers of 1024 (`KiB` etc. are accepted too).
//! Rates are bits per second in powers of 1000, as every link is sold. This module only parses
//! and formats; it does not decide which flags need a unit (the CLI does).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

/// A rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BitRate(pub u64);

/// Why a size or rate did not parse; the message names what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// The text was empty.
    #[error("empty value")]
    Empty,
    /// A leading minus sign.
    #[error("`{0}` is negative; sizes and rates are positive")]
    Negative(String),
    /// The number part is not a number.
    #[error("`{0}` is not a number followed by an optional unit (like 256K, 1.5M, 10G)")]
    NotANumber(String),
    /// A suffix that is not a unit.
    #[error("`{value}` has unknown unit `{unit}`; use {expected}")]
    UnknownUnit {
        /// The whole input.
        value: String,
        /// The suffix that was not understood.
        unit: String,
        /// The units that are accepted.
        expected: &'static str,
    },
    /// A bare number where a unit is required to avoid a silent mistake (`-w 256`).
    #[error("`{0}` has no unit; write it as {0}K, {0}M or {0}B (bytes)")]
    MissingUnit(String),
    /// The value does not fit in 64 bits.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

const SIZE_UNITS: &str = "B, K, M, G or T (powers of 1024), e.g. 128K";
const RATE_UNITS: &str = "k, M, G or T (bits per second, powers of 1000), e.g. 100M";

impl ByteSize {
    /// Parses a size; a bare number is bytes.
    pub fn parse(s: &str) -> Result<Self, UnitError> {
        parse_size(s, false)
    }

    /// Parses a size that must carry a unit (`B` for plain bytes). Used where a bare number is
    /// almost always a mistake, such as a TCP window of "256".
    pub fn parse_with_unit(s: &str) -> Result<Self, UnitError> {
        parse_size(s, true)
    }

    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for ByteSize {
    /// Binary units with three significant digits, as iperf3 prints transfers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = b;
        let mut i = 0;
        while v >= 1024.0 && i < UNITS.len() - 1 {
            v /= 1024.0;
            i += 1;
        }
        if i == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{} {}", three_digits(v), UNITS[i])
        }
    }
}

impl BitRate {
    /// Parses a rate; a bare number is bits per second.
    pub fn parse(s: &str) -> Result<Self, UnitError> {
        let (num, unit) = split_number(s)?;
        let mult: f64 = match unit.trim_end_matches("bit/s").trim_end_matches("bps") {
            "" => 1.0,
            "k" | "K" => 1e3,
            "m" | "M" => 1e6,
            "g" | "G" => 1e9,
            "t" | "T" => 1e12,
            _ => {
                return Err(UnitError::UnknownUnit {
                    value: s.to_owned(),
                    unit: unit.to_owned(),
                    expected: RATE_UNITS,
                });
            }
        };
        to_u64(num * mult, s).map(BitRate)
    }

    /// Bits per second.
    pub fn bits_per_second(self) -> u64 {
        self.0
    }
}

impl FromStr for BitRate {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for BitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_bits_per_second(self.0 as f64))
    }
}

/// Formats bits per second with a decimal prefix: `9.41 Gbit/s`.
pub fn format_bits_per_second(bps: f64) -> String {
    let (v, unit) = if bps >= 1e12 {
        (bps / 1e12, "Tbit/s")
    } else if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else if bps >= 1e3 {
        (bps / 1e3, "kbit/s")
    } else {
        return format!("{bps:.0} bit/s");
    };
    format!("{} {unit}", three_digits(v))
}

/// Three significant digits without a trailing exponent: 1.23, 12.3, 123.
fn three_digits(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn parse_size(s: &str, require_unit: bool) -> Result<ByteSize, UnitError> {
    let (num, unit) = split_number(s)?;
    let mult: f64 = match unit {
        "" if require_unit => return Err(UnitError::MissingUnit(s.trim().to_owned())),
        "" | "b" | "B" => 1.0,
        "k" | "K" | "KB" | "kB" | "KiB" | "kiB" => 1024.0,
        "m" | "M" | "MB" | "MiB" => 1024.0 * 1024.0,
        "g" | "G" | "GB" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "t" | "T" | "TB" | "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(UnitError::UnknownUnit {
                value: s.to_owned(),
                unit: unit.to_owned(),
                expected: SIZE_UNITS,
            });
        }
    };
    to_u64(num * mult, s).map(ByteSize)
}

/// Splits "1.5M" into (1.5, "M"), refusing negatives and non-numbers.
fn split_number(s: &str) -> Result<(f64, &str), UnitError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(UnitError::Empty);
    }
    if t.starts_with('-') {
        return Err(UnitError::Negative(t.to_owned()));
    }
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let num: f64 = num
        .parse()
        .map_err(|_| UnitError::NotANumber(t.to_owned()))?;
    if !num.is_finite() {
        return Err(UnitError::NotANumber(t.to_owned()));
    }
    Ok((num, unit.trim()))
}

fn to_u64(v: f64, s: &str) -> Result<u64, UnitError> {
    if v >= u64::MAX as f64 {
        return Err(UnitError::TooLarge(s.to_owned()));
    }
    Ok(v.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_like_iperf3() {
        assert_eq!(ByteSize::parse("128K").unwrap().0, 131_072);
        assert_eq!(ByteSize::parse("1.5M").unwrap().0, 1_572_864);
        assert_eq!(ByteSize::parse("2G").unwrap().0, 2 << 30);
        assert_eq!(ByteSize::parse("64KiB").unwrap().0, 65_536);
        assert_eq!(ByteSize::parse("1400").unwrap().0, 1400);
        assert_eq!(ByteSize::parse("1400B").unwrap().0, 1400);
    }

    #[test]
    fn window_needs_a_unit() {
        assert_eq!(
            ByteSize::parse_with_unit("256"),
            Err(UnitError::MissingUnit("256".into()))
        );
        assert_eq!(ByteSize::parse_with_unit("256K").unwrap().0, 262_144);
    }

    #[test]
    fn bad_sizes_are_refused_with_a_reason() {
        assert!(matches!(
            ByteSize::parse("-5K"),
            Err(UnitError::Negative(_))
        ));
        assert!(matches!(
            ByteSize::parse("5Q"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            ByteSize::parse("K"),
            Err(UnitError::NotANumber(_))
        ));
        assert!(matches!(ByteSize::parse(""), Err(UnitError::Empty)));
        assert!(matches!(
            ByteSize::parse("99999999999T"),
            Err(UnitError::TooLarge(_))
        ));
    }

    #[test]
    fn rates_are_decimal_bits() {
        assert_eq!(BitRate::parse("100M").unwrap().0, 100_000_000);
        assert_eq!(BitRate::parse("1.5G").unwrap().0, 1_500_000_000);
        assert_eq!(BitRate::parse("200Mbit/s").unwrap().0, 200_000_000);
        assert_eq!(BitRate::parse("64k").unwrap().0, 64_000);
    }

    #[test]
    fn formatting_uses_three_digits() {
        assert_eq!(format_bits_per_second(9.414e9), "9.41 Gbit/s");
        assert_eq!(format_bits_per_second(157e6), "157 Mbit/s");
        assert_eq!(ByteSize(6_540_000_000).to_string(), "6.09 GiB");
        assert_eq!(ByteSize(512).to_string(), "512 B");
    }
}
