//! Byte sizes, bit rates and times as people type them (`256K`, `1.5G`, `100M`), and the one
//! way every crate of xbench writes numbers for a person to read.
//!
//! Sizes follow iperf3: `K`, `M`, `G`, `T` are powers of 1024 (`KiB` etc. are accepted too).
//! Rates are bits per second in powers of 1000, as every link is sold. A figure a person reads
//! is scaled to its magnitude and shown with three significant digits (`9.41 Gbit/s`,
//! `20.4 ms`, `1.75 MiB`); where a fixed unit leaves more digits, they are all kept and grouped
//! by thousands (`112,333 Mbit/s`). [`number`] is that rule; [`ThroughputUnit`],
//! [`RateScale`] and [`TimeUnit`] choose the unit. This module only parses and formats; it
//! does not decide which flags need a unit (the CLI does), and machine-read output (JSON,
//! CSV) keeps base units and plain numbers.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

/// The smallest bare number [`BitRate::parse_cap`] takes as bits per second; below it, a
/// bare number was meant with a unit.
pub const BARE_RATE_FLOOR: u64 = 8_000;

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
    /// A bare number where a rate needs a unit (`--ceiling 100` is not 100 bit/s).
    #[error("{}", missing_rate_unit(.0))]
    MissingRateUnit(String),
    /// A bare number too small to be a send cap in bits per second (`-b 100`), which was
    /// meant with a unit.
    #[error("{}; a bare number is bits per second, as in iperf3", missing_rate_unit(.0))]
    BareRateTooSmall(String),
    /// The value does not fit in 64 bits.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

/// What a bare rate should have been written as: a small number most likely meant megabits
/// (`100` → `100M`); a large one was bits per second, shown in its shortest unit
/// (`20000000` → `20M`), not as an absurd `20000000M`.
fn missing_rate_unit(bare: &str) -> String {
    let exact = bare
        .parse::<u64>()
        .ok()
        .filter(|&n| n >= 1_000)
        .and_then(|n| {
            [
                ("T", 1_000_000_000_000),
                ("G", 1_000_000_000),
                ("M", 1_000_000),
                ("k", 1_000),
            ]
            .into_iter()
            .find(|&(_, scale)| n % scale == 0)
            .map(|(unit, scale)| format!("{}{unit}", n / scale))
        });
    match exact {
        Some(short) => format!(
            "`{bare}` has no unit; if you meant {bare} bits per second, write it as {short} \
             (k, M, G: powers of 1000)"
        ),
        None => format!(
            "`{bare}` has no unit; write it as {bare}M (megabits per second), {bare}k or {bare}G"
        ),
    }
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
            write!(f, "{} B", count(self.0))
        } else {
            write!(f, "{} {}", number(v), UNITS[i])
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

    /// Parses a rate that must carry a unit, where a bare number of bits per second is almost
    /// always a mistake (`--ceiling 100` meaning 100 Mbit/s). A bare `0` needs none.
    pub fn parse_with_unit(s: &str) -> Result<Self, UnitError> {
        let (num, unit) = split_number(s)?;
        if unit.is_empty() && num != 0.0 {
            return Err(UnitError::MissingRateUnit(s.trim().to_owned()));
        }
        Self::parse(s)
    }

    /// Parses a send cap as iperf3's `-b` reads it, the one rule for the command line and
    /// for deploy's suites: a bare number is bits per second and `0` is no cap, but a bare
    /// number below [`BARE_RATE_FLOOR`] is refused, as `-b 100` was surely meant with a unit
    /// (100 bit/s is below any rate xbench sends at).
    pub fn parse_cap(s: &str) -> Result<Self, UnitError> {
        let t = s.trim();
        let v = Self::parse(t)?;
        let bare = t.ends_with(|c: char| c.is_ascii_digit() || c == '.');
        if bare && v.0 != 0 && v.0 < BARE_RATE_FLOOR {
            return Err(UnitError::BareRateTooSmall(t.to_owned()));
        }
        Ok(v)
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

/// Why a time did not parse; the message names what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// A leading minus sign.
    #[error("`{0}` is negative; give a time like 10, 10s or 500ms")]
    Negative(String),
    /// The number part is not a number.
    #[error("`{0}` is not a time; give seconds like 10, or 500ms, 2m, 1h")]
    NotATime(String),
    /// A suffix that is not a time unit.
    #[error("unknown time unit `{unit}` in `{value}`; use us, ms, s, m or h")]
    UnknownUnit {
        /// The whole input.
        value: String,
        /// The suffix that was not understood.
        unit: String,
    },
    /// Too long for a [`std::time::Duration`].
    #[error("`{0}` is out of range")]
    OutOfRange(String),
}

/// A time as people type it: seconds as iperf3 takes them (`10`, `0.5`), or with a unit
/// (`250us`, `500ms`, `10s`, `2m`, `1h`). The one parser of times for every crate — `-t 2m` on
/// the command line, `time = "2m"` in a deploy suite and `--every 4h` mean the same — callers
/// add their own bounds (a test's length, whole milliseconds).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, TimeError> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(TimeError::Negative(t.to_owned()));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| TimeError::NotATime(t.to_owned()))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => {
            return Err(TimeError::UnknownUnit {
                value: t.to_owned(),
                unit: u.to_owned(),
            });
        }
    };
    std::time::Duration::try_from_secs_f64(secs).map_err(|_| TimeError::OutOfRange(t.to_owned()))
}

/// Formats bits per second in the decimal bit unit that suits it, three significant digits:
/// `9.41 Gbit/s`, `157 Mbit/s`, `512 bit/s`.
pub fn format_bits_per_second(bps: f64) -> String {
    RateScale::AUTO.show(bps)
}

/// A figure as a person reads it: three significant digits (`9.41`, `12.3`, `157`,
/// `0.0204`), and where the integer part has more digits, all of them, grouped by thousands
/// (`112,333`). Negative figures (a confidence interval's low end) keep their sign.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    let sign = if v < 0.0 { "-" } else { "" };
    if a >= 99.95 {
        return format!("{sign}{}", group(&format!("{a:.0}")));
    }
    if a == 0.0 {
        return "0".to_owned();
    }
    // Round to three significant digits first, so 9.996 reads 10.0, not 10.00.
    let decade = a.log10().floor() as i32;
    let scale = 10f64.powi(2 - decade);
    let r = (a * scale).round() / scale;
    let decimals = (2 - r.log10().floor() as i32).max(0) as usize;
    format!("{sign}{r:.decimals$}")
}

/// A count with thousands separators: `4,096`.
pub fn count(n: u64) -> String {
    group(&n.to_string())
}

/// Thousands separators in the integer digits of `digits` (no sign, no fraction).
fn group(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// How throughput is shown.
///
/// Decimal units (kbit/s … Tbit/s, kB/s … GB/s) are what links are sold in and what xbench
/// shows by default. The binary byte units (KiB/s … TiB/s) are iperf3's `-f K/M/G/T`, which
/// iperf3 labels `KBytes/sec` but computes in powers of 1024; the label here says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
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

    /// The decimal bit unit in which `bits_per_second` reads between 1 and 1000 (kbit/s for
    /// anything smaller): the unit of a figure, or of a table or an axis given its largest.
    pub fn for_rate(bits_per_second: f64) -> Self {
        let a = bits_per_second.abs();
        // 999.95 Mbit/s would read "1,000 Mbit/s": the next unit reads 1.00.
        if a >= 999.95e9 {
            ThroughputUnit::Tbits
        } else if a >= 999.95e6 {
            ThroughputUnit::Gbits
        } else if a >= 999.95e3 {
            ThroughputUnit::Mbits
        } else {
            ThroughputUnit::Kbits
        }
    }

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

    /// Bits per second in this unit, as [`number`] writes it: `812`, `9.41`, `1,000,000`.
    pub fn format(self, bits_per_second: f64) -> String {
        number(bits_per_second * self.factor())
    }

    /// Bits per second in this unit, with its symbol: `812 Mbit/s`.
    pub fn format_with_label(self, bits_per_second: f64) -> String {
        format!("{} {}", self.format(bits_per_second), self.label())
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

/// How rates are shown: in the one unit a user fixed (`--unit`), or scaled to each figure (a
/// line) or to the largest figure of a table or an axis. Converts from a unit and from an
/// optional one, so a function taking `impl Into<RateScale>` accepts either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateScale(pub Option<ThroughputUnit>);

impl RateScale {
    /// Every figure in the unit that suits it.
    pub const AUTO: RateScale = RateScale(None);

    /// One figure with its unit: `9.41 Gbit/s`, or in the fixed unit `9,410 Mbit/s`.
    pub fn show(self, bits_per_second: f64) -> String {
        match self.0 {
            Some(u) => u.format_with_label(bits_per_second),
            // Below a kilobit, bits: a paced trickle reads `512 bit/s`, not `0.512 kbit/s`.
            None if bits_per_second.abs() < 999.5 => format!("{} bit/s", number(bits_per_second)),
            None => ThroughputUnit::for_rate(bits_per_second).format_with_label(bits_per_second),
        }
    }

    /// The unit of a table column or an axis whose largest figure is `largest`
    /// bits per second: the fixed one, or the one `largest` reads best in.
    pub fn unit_for(self, largest: f64) -> ThroughputUnit {
        self.0.unwrap_or_else(|| ThroughputUnit::for_rate(largest))
    }
}

impl From<ThroughputUnit> for RateScale {
    fn from(u: ThroughputUnit) -> Self {
        RateScale(Some(u))
    }
}

impl From<Option<ThroughputUnit>> for RateScale {
    fn from(u: Option<ThroughputUnit>) -> Self {
        RateScale(u)
    }
}

/// The unit of a time a person reads, latency or RTT: µs below a millisecond, ms below a
/// second, then seconds, so a 20 ms path reads `20.4 ms`, not `20413 µs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Seconds,
}

impl TimeUnit {
    /// The unit `micros` reads best in: between 1 and 1000 of it where it can.
    pub fn for_micros(micros: f64) -> Self {
        let a = micros.abs();
        if a >= 999_950.0 {
            TimeUnit::Seconds
        } else if a >= 999.95 {
            TimeUnit::Millis
        } else {
            TimeUnit::Micros
        }
    }

    /// The unit's symbol.
    pub fn label(self) -> &'static str {
        match self {
            TimeUnit::Micros => "µs",
            TimeUnit::Millis => "ms",
            TimeUnit::Seconds => "s",
        }
    }

    /// Microseconds in this unit.
    pub fn of_micros(self, micros: f64) -> f64 {
        match self {
            TimeUnit::Micros => micros,
            TimeUnit::Millis => micros / 1e3,
            TimeUnit::Seconds => micros / 1e6,
        }
    }

    /// Microseconds in this unit, as [`number`] writes it, without the symbol.
    pub fn format(self, micros: f64) -> String {
        number(self.of_micros(micros))
    }
}

/// A time in microseconds in the unit that suits it: `48.0 µs`, `20.4 ms`, `1.50 s`.
pub fn format_micros(micros: f64) -> String {
    let u = TimeUnit::for_micros(micros);
    format!("{} {}", u.format(micros), u.label())
}

/// A latency difference with its sign, so an increase reads as one: `+12.3 ms`, `-114 µs`
/// (the hyphen-minus every other figure's sign is written with), `+0 µs`.
pub fn format_signed_micros(micros: f64) -> String {
    let sign = if micros < 0.0 { "-" } else { "+" };
    format!("{sign}{}", format_micros(micros.abs()))
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

    /// Every unit, the same instant whatever its spelling, and the three ways to get it wrong
    /// named as such.
    #[test]
    fn times_parse_in_every_unit_and_say_what_is_wrong() {
        use std::time::Duration;
        for (text, want) in [
            ("10", Duration::from_secs(10)),
            ("0.5", Duration::from_millis(500)),
            (" 500ms ", Duration::from_millis(500)),
            ("250us", Duration::from_micros(250)),
            ("250µs", Duration::from_micros(250)),
            ("10s", Duration::from_secs(10)),
            ("10sec", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("2min", Duration::from_secs(120)),
            ("4h", Duration::from_secs(4 * 3600)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        assert!(matches!(parse_duration("-1"), Err(TimeError::Negative(_))));
        assert!(matches!(
            parse_duration("soon"),
            Err(TimeError::NotATime(_))
        ));
        assert_eq!(
            parse_duration("10x").unwrap_err().to_string(),
            "unknown time unit `x` in `10x`; use us, ms, s, m or h"
        );
        assert!(matches!(
            parse_duration(&format!("{}h", u64::MAX)),
            Err(TimeError::OutOfRange(_))
        ));
    }

    use super::*;

    #[test]
    fn a_send_cap_refuses_a_bare_number_too_small_to_be_bits_per_second() {
        assert_eq!(BitRate::parse_cap("100M"), Ok(BitRate(100_000_000)));
        assert_eq!(BitRate::parse_cap("8000"), Ok(BitRate(8_000)));
        assert_eq!(BitRate::parse_cap("0"), Ok(BitRate(0)));
        assert_eq!(BitRate::parse_cap("100k"), Ok(BitRate(100_000)));
        let e = BitRate::parse_cap("100").unwrap_err();
        assert!(matches!(e, UnitError::BareRateTooSmall(_)), "{e}");
        assert!(e.to_string().contains("100M"), "{e}");
    }

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
    fn a_rate_that_needs_a_unit_says_what_to_write() {
        assert_eq!(
            BitRate::parse_with_unit("100").map_err(|e| e.to_string()),
            Err("`100` has no unit; write it as 100M (megabits per second), 100k or 100G".into())
        );
        assert_eq!(
            BitRate::parse_with_unit("20000000").map_err(|e| e.to_string()),
            Err(
                "`20000000` has no unit; if you meant 20000000 bits per second, write it as 20M \
                 (k, M, G: powers of 1000)"
                    .into()
            )
        );
        assert_eq!(BitRate::parse_with_unit("0"), Ok(BitRate(0)));
        assert_eq!(BitRate::parse_with_unit("1G"), Ok(BitRate(1_000_000_000)));
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
        assert_eq!(format_bits_per_second(999.96e6), "1.00 Gbit/s");
        assert_eq!(format_bits_per_second(512.0), "512 bit/s");
        assert_eq!(ByteSize(6_540_000_000).to_string(), "6.09 GiB");
        assert_eq!(ByteSize(512).to_string(), "512 B");
        assert_eq!(ByteSize(1020 << 20).to_string(), "1,020 MiB");
    }

    /// Issue 31: "55461 Mbit/s", "latency µs: min 20413". Three significant digits at every
    /// magnitude, and every integer digit kept and grouped where a fixed unit leaves more.
    #[test]
    fn numbers_keep_three_significant_digits_and_group_the_rest() {
        let cases = [
            (0.0, "0"),
            (9.414, "9.41"),
            (9.996, "10.0"),
            (12.34, "12.3"),
            (99.96, "100"),
            (157.4, "157"),
            (1234.0, "1,234"),
            (55_461.2, "55,461"),
            (1_000_000.0, "1,000,000"),
            (0.5, "0.500"),
            (0.020_413, "0.0204"),
            (0.000_512, "0.000512"),
            (-69_868.0, "-69,868"),
            (-0.25, "-0.250"),
        ];
        for (v, shown) in cases {
            assert_eq!(number(v), shown, "{v}");
        }
        assert_eq!(count(3745), "3,745");
        assert_eq!(count(12), "12");
    }

    #[test]
    fn rates_scale_unless_a_unit_is_fixed() {
        assert_eq!(RateScale::AUTO.show(55_461e6), "55.5 Gbit/s");
        assert_eq!(
            RateScale::from(ThroughputUnit::Mbits).show(55_461e6),
            "55,461 Mbit/s"
        );
        assert_eq!(RateScale::AUTO.unit_for(34_065e6), ThroughputUnit::Gbits);
        assert_eq!(RateScale::AUTO.unit_for(800e6), ThroughputUnit::Mbits);
        assert_eq!(
            RateScale::from(ThroughputUnit::MBytes).unit_for(34_065e6),
            ThroughputUnit::MBytes
        );
    }

    #[test]
    fn times_read_in_the_unit_that_suits_them() {
        assert_eq!(format_micros(48.0), "48.0 µs");
        assert_eq!(format_micros(20_413.0), "20.4 ms");
        assert_eq!(format_micros(999.96), "1.00 ms");
        assert_eq!(format_micros(1_500_000.0), "1.50 s");
        assert_eq!(format_micros(0.5), "0.500 µs");
        assert_eq!(TimeUnit::for_micros(20_413.0).format(150.0), "0.150");
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
            ("k", "1,000,000 kbit/s"),
            ("m", "1,000 Mbit/s"),
            ("g", "1.00 Gbit/s"),
            ("t", "0.00100 Tbit/s"),
            ("K", "122,070 KiB/s"),
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
