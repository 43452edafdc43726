//! RFC 3339 timestamps without a date-time dependency: reports need one string per test.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Parses what [`rfc3339`] writes (UTC, `Z`, optional fraction); `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !s.ends_with('Z') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let frac = match s.get(19..s.len() - 1)? {
        "" => 0.0,
        // Digits only: f64's parser would take "4E056" too, and a fraction that large
        // overflows the Duration (the fuzzer's find).
        f if f.len() > 1 && f.starts_with('.') && f.bytes().skip(1).all(|c| c.is_ascii_digit()) => {
            format!("0{f}").parse::<f64>().ok()?
        }
        _ => return None,
    };
    let days = days_from_civil(y, m as u32, d as u32);
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    let secs = u64::try_from(secs).ok()?;
    Some(
        UNIX_EPOCH
            + std::time::Duration::from_secs(secs)
            + std::time::Duration::from_secs_f64(frac),
    )
}

/// A proleptic Gregorian date to days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_fraction_is_digits_only() {
        // The fuzzer's crash: f64 parsing took the exponent, and 0.4e56 s overflowed.
        assert_eq!(parse_rfc3339("2026-11-22T22:05:23.4E056Z"), None);
        assert_eq!(parse_rfc3339("2026-11-22T22:05:23.Z"), None);
        assert_eq!(parse_rfc3339("2026-11-22T22:05:23.+5Z"), None);
        let t = parse_rfc3339("2026-11-22T22:45:23.456Z").unwrap();
        assert_eq!(rfc3339(t), "2026-11-22T22:45:23.456Z");
    }

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_387_523_456);
        assert_eq!(rfc3339(t), "2026-11-22T22:45:23.456Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(&rfc3339(leap)[..10], "2000-02-29");
    }

    #[test]
    fn parsing_inverts_formatting() {
        for ms in [0u64, 951_782_400_123, 1_795_387_523_456, 4_102_444_800_999] {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            let back = parse_rfc3339(&rfc3339(t)).unwrap();
            let diff = back.duration_since(t).unwrap_or_else(|e| e.duration());
            assert!(diff < Duration::from_micros(1), "{ms}: {diff:?}");
        }
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
    }
}
