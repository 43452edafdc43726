//! Value parsers for flags: each turns text into the library's type or a message that names
//! what was expected. clap reports the message with the flag's name and exits with status 2.

use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use xbench::units::ByteSize;

/// Seconds as iperf3 takes them (`10`, `0.5`), or with a unit (`500ms`, `10s`, `2m`, `1h`).
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!(
            "`{t}` is negative; give a time like 10, 10s or 500ms"
        ));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{t}` is not a time; give seconds like 10, or 500ms, 2m, 1h"))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" => v,
        "ms" => v / 1e3,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => {
            return Err(format!(
                "unknown time unit `{u}` in `{t}`; use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{t}` is out of range"))
}

/// A duration that must be greater than zero (`-t`).
pub(crate) fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("must be greater than 0 (xbench has no endless mode; give a duration)".into());
    }
    Ok(d)
}

/// Reporting interval: 0 turns interval reports off, as in iperf3.
pub(crate) fn interval(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if !d.is_zero() && d < xbench::config::MIN_INTERVAL {
        return Err("must be 0 (off) or at least 0.1 seconds".into());
    }
    Ok(d)
}

/// Stream count: 1 to the library's maximum.
pub(crate) fn streams(s: &str) -> Result<NonZeroU16, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number of streams"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    if n > u32::from(xbench::config::MAX_STREAMS) {
        return Err(format!("at most {} streams", xbench::config::MAX_STREAMS));
    }
    NonZeroU16::new(n as u16).ok_or_else(|| "must be at least 1".into())
}

/// A byte size that may be a bare number of bytes (`-l 1400`, `-n 1G`).
pub(crate) fn size(s: &str) -> Result<ByteSize, String> {
    let v = ByteSize::parse(s).map_err(|e| e.to_string())?;
    if v.0 == 0 {
        return Err("must be greater than 0".into());
    }
    Ok(v)
}

/// A byte size that must carry a unit: a window of "256" is almost surely meant as 256K.
pub(crate) fn size_with_unit(s: &str) -> Result<ByteSize, String> {
    let v = ByteSize::parse_with_unit(s).map_err(|e| e.to_string())?;
    if v.0 == 0 {
        return Err("must be greater than 0".into());
    }
    Ok(v)
}

/// Block length: 1 byte to the library's maximum.
pub(crate) fn block_len(s: &str) -> Result<NonZeroU32, String> {
    let v = size(s)?;
    if v.0 > u64::from(xbench::config::MAX_BLOCK_LEN) {
        return Err(format!(
            "at most {} MiB",
            xbench::config::MAX_BLOCK_LEN >> 20
        ));
    }
    NonZeroU32::new(v.0 as u32).ok_or_else(|| "must be greater than 0".into())
}

/// TCP maximum segment size in bytes.
pub(crate) fn mss(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of bytes"))?;
    if !(88..=65_495).contains(&v) {
        return Err("MSS must be between 88 and 65495 bytes".into());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert!(duration("-1").is_err());
        assert!(duration("10x").unwrap_err().contains("unknown time unit"));
        assert!(positive_duration("0").is_err());
        assert!(interval("0.05").is_err());
        assert_eq!(interval("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn counts_and_sizes() {
        assert!(streams("0").unwrap_err().contains("at least 1"));
        assert!(streams("-3").is_err());
        assert_eq!(streams("16").unwrap().get(), 16);
        assert!(size_with_unit("256").unwrap_err().contains("no unit"));
        assert_eq!(size_with_unit("256K").unwrap().0, 262_144);
        assert!(size("-5").is_err());
        assert!(block_len("0").is_err());
        assert!(mss("20").is_err());
    }
}
