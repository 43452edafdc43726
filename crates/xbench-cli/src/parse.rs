//! Value parsers for flags: each turns text into the library's type or a message that names
//! what was expected. clap reports the message with the flag's name and exits with status 2.

use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use xbench::config::FlowCount;
use xbench::units::ByteSize;

use crate::cli::PathArg;

/// Seconds as iperf3 takes them (`10`, `0.5`), or with a unit (`500ms`, `10s`, `2m`, `1h`):
/// the library's one time parser ([`xbench::units::parse_duration`]).
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    xbench::units::parse_duration(s).map_err(|e| e.to_string())
}

/// A duration that must be greater than zero (`-t`).
pub(crate) fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("must be greater than 0 (xbench has no endless mode; give a duration)".into());
    }
    Ok(d)
}

/// How late a `--start-at` may be: a start a little in the past (the command took longer to
/// arrive than its sender allowed) still starts, at once; one further back is a mistake.
pub(crate) const START_AT_LATE: Duration = Duration::from_secs(5);

/// How far ahead a `--start-at` may be: longer is a typo, not a fleet's common start.
pub(crate) const START_AT_AHEAD: Duration = Duration::from_secs(3600);

/// `--start-at`: Unix seconds (fractions allowed), at most [`START_AT_LATE`] ago and at most
/// [`START_AT_AHEAD`] ahead.
pub(crate) fn start_at(s: &str) -> Result<std::time::SystemTime, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("`{s}` is not a time in Unix seconds (e.g. 1767225600.5)"))?;
    let at = std::time::UNIX_EPOCH + Duration::from_secs_f64(secs.min(1e12));
    let now = std::time::SystemTime::now();
    if let Ok(late) = now.duration_since(at)
        && late > START_AT_LATE
    {
        return Err(format!(
            "{s} is {:.1} s in the past (at most {} s late is started at once); check the \
             clock of the machine that chose it",
            late.as_secs_f64(),
            START_AT_LATE.as_secs()
        ));
    }
    if let Ok(ahead) = at.duration_since(now)
        && ahead > START_AT_AHEAD
    {
        return Err(format!(
            "{s} is {:.0} s ahead (at most {} s)",
            ahead.as_secs_f64(),
            START_AT_AHEAD.as_secs()
        ));
    }
    Ok(at)
}

/// A count that must be at least 1 (a limit of 0 would refuse every test).
pub(crate) fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}

/// A server's longest test: positive, and no longer than a test may be at all (a week).
pub(crate) fn max_duration(s: &str) -> Result<Duration, String> {
    let d = positive_duration(s)?;
    if d > xbench::config::MAX_DURATION {
        return Err(format!(
            "at most {} s (a week)",
            xbench::config::MAX_DURATION.as_secs()
        ));
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
    xbench::config::check_mss(v)
}

/// Request and response sizes: `REQ,RESP` (netperf's `-r`), or one size for both.
pub(crate) fn rr_sizes(s: &str) -> Result<(NonZeroU32, NonZeroU32), String> {
    let (req, resp) = s.split_once(',').unwrap_or((s, s));
    let one = |v: &str| -> Result<NonZeroU32, String> {
        let b = size(v)?;
        let max = xbench::config::MAX_RR_LEN;
        if b.0 > u64::from(max) {
            return Err(format!(
                "`{v}` is larger than the {} MiB maximum",
                max >> 20
            ));
        }
        NonZeroU32::new(b.0 as u32).ok_or_else(|| "sizes must be at least 1 byte".into())
    };
    Ok((one(req.trim())?, one(resp.trim())?))
}

/// Request/response flows: 1 to the library's maximum.
pub(crate) fn flows(s: &str) -> Result<FlowCount, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number of flows"))?;
    FlowCount::new(n).ok_or_else(|| format!("must be between 1 and {}", xbench::config::MAX_FLOWS))
}

/// The server's `--max-flows`: 1 to the most flows a client may ask for.
pub(crate) fn max_flows(s: &str) -> Result<u32, String> {
    flows(s).map(FlowCount::get)
}

/// Transactions in flight per flow.
pub(crate) fn burst(s: &str) -> Result<NonZeroU32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    let max = xbench::config::MAX_BURST;
    if n == 0 || n > max {
        return Err(format!("must be between 1 and {max}"));
    }
    NonZeroU32::new(n).ok_or_else(|| "must be at least 1".into())
}

/// Pacing, per flow: transactions per second (`200`, `1.5k`) or the gap between them
/// (`10ms`, as netperf's `-w`). Returns transactions per second.
pub(crate) fn rate(s: &str) -> Result<f64, String> {
    xbench::config::parse_rate_per_flow(s).map_err(|e| e.to_string())
}

/// A comma-separated list of values for a sweep (`-P 1,2,4,8`), each parsed as the single
/// flag parses it. A duplicate or an empty item is refused: each value is one cell of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct List<T>(pub(crate) Vec<T>);

impl<T: Copy> List<T> {
    /// The first value: what a single test (no sweep) uses.
    pub(crate) fn first(&self) -> Option<T> {
        self.0.first().copied()
    }
}

fn list<T: PartialEq>(s: &str, one: fn(&str) -> Result<T, String>) -> Result<List<T>, String> {
    let mut out: Vec<T> = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("`{s}` has an empty item; write a list like 1,2,4"));
        }
        let v = one(item).map_err(|e| format!("`{item}`: {e}"))?;
        if out.contains(&v) {
            return Err(format!(
                "`{item}` is listed twice in `{s}`; each value is one cell of the sweep"
            ));
        }
        out.push(v);
    }
    Ok(List(out))
}

/// `-P`: one stream count, or a list to sweep (`1,2,4,8,16`).
pub(crate) fn streams_list(s: &str) -> Result<List<NonZeroU16>, String> {
    list(s, streams)
}

/// `-w`: one window, or a list to sweep (`64K,256K,1M`).
pub(crate) fn window_list(s: &str) -> Result<List<ByteSize>, String> {
    list(s, size_with_unit)
}

/// `--flows`: one flow count, or a list to sweep (`1,4,16`).
pub(crate) fn flows_list(s: &str) -> Result<List<FlowCount>, String> {
    list(s, flows)
}

/// `xbench client --format`: the output format, or (deprecated) a rate unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ClientFormat {
    /// Lines, then a summary.
    Text,
    /// One JSON document, as `--json`.
    Json,
    /// A rate unit: what `--format` meant before it named the output format everywhere.
    Unit(xbench_report::ThroughputUnit),
}

pub(crate) fn client_format(s: &str) -> Result<ClientFormat, String> {
    match s.trim() {
        "text" => Ok(ClientFormat::Text),
        "json" => Ok(ClientFormat::Json),
        other => other.parse().map(ClientFormat::Unit).map_err(|_| {
            format!(
                "`{other}` is not an output format; use text or json (for a rate unit, \
                 --unit {other})"
            )
        }),
    }
}

/// `--unit`: how sweep and report tables show throughput.
pub(crate) fn throughput_unit(s: &str) -> Result<xbench_report::ThroughputUnit, String> {
    s.parse()
        .map_err(|e: xbench_report::units::UnknownUnit| e.to_string())
}

/// `--repeat`: runs per cell, at least 1.
pub(crate) fn repeat(s: &str) -> Result<NonZeroU32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number of runs"))?;
    NonZeroU32::new(n).ok_or_else(|| "must be at least 1".into())
}

/// `xbench lab run --repeat`: runs of every test on every path, 1 to 1000.
pub(crate) fn lab_repeat(s: &str) -> Result<NonZeroU32, String> {
    let n = repeat(s)?;
    if n.get() > 1000 {
        return Err("at most 1000 runs of each test".into());
    }
    Ok(n)
}

/// netperf-style output selectors, comma-separated.
pub(crate) fn fields(s: &str) -> Result<crate::render::netperf::FieldList, String> {
    s.split(',')
        .filter(|f| !f.trim().is_empty())
        .map(|f| crate::render::netperf::Field::parse(f.trim()))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| {
            if v.is_empty() {
                Err("name at least one field".into())
            } else {
                Ok(crate::render::netperf::FieldList(v))
            }
        })
}

/// A bit rate: bits per second with an optional decimal unit (`100M`, `2.5G`, `500k`).
pub(crate) fn bitrate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("`{t}` is negative"));
    }
    let v = xbench::units::BitRate::parse_with_unit(t).map_err(|e| e.to_string())?;
    if v.bits_per_second() == 0 {
        return Err("must be greater than 0".into());
    }
    Ok(v.bits_per_second())
}

/// The client's `-b`: bits per second, where 0 is iperf3's "no cap" (with `-u`, unpaced), by
/// the library's rule for a send cap ([`xbench::units::BitRate::parse_cap`]).
pub(crate) fn bitrate_or_zero(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("`{t}` is negative"));
    }
    xbench::units::BitRate::parse_cap(t)
        .map(|v| v.bits_per_second())
        .map_err(|e| e.to_string())
}

/// The client's `-b`: one rate or a list (`100M,200M`), each as [`bitrate_or_zero`] reads it,
/// with `/stream` at the end when the rates are per stream (iperf3's meaning) rather than the
/// total of a direction's streams.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bitrates {
    /// Bits per second, as listed.
    pub(crate) rates: List<u64>,
    /// `/stream`: each stream's rate.
    pub(crate) per_stream: bool,
}

impl Bitrates {
    /// The first rate, per stream or total as written: what a single test uses.
    pub(crate) fn first(&self) -> u64 {
        self.rates.first().unwrap_or(0)
    }
}

/// `-b RATE[,RATE…][/stream]`.
pub(crate) fn bitrate_arg(s: &str) -> Result<Bitrates, String> {
    let t = s.trim();
    let (body, per_stream) = match t.strip_suffix("/stream") {
        Some(b) => (b, true),
        None => (t, false),
    };
    if let Some((_, after)) = body.split_once('/') {
        return Err(format!(
            "`{t}`: `/{after}` is not understood; RATE/stream (once, at the end of a list) means              per stream; iperf3's burst count (RATE/N) is not supported"
        ));
    }
    Ok(Bitrates {
        rates: list(body, bitrate_or_zero)?,
        per_stream,
    })
}

/// `lab run --udp`: offered rates, each above 0 (an unpaced test measures the host, not the
/// path).
pub(crate) fn udp_rates(s: &str) -> Result<List<u64>, String> {
    list(s, bitrate)
}

/// `-l`: one length, or with `-u` a list of datagram sizes to sweep (`64,1400`).
pub(crate) fn length_list(s: &str) -> Result<List<NonZeroU32>, String> {
    list(s, block_len)
}

/// A network in CIDR form, or one address (a /32 or /128).
pub(crate) fn network(s: &str) -> Result<ipnet::IpNet, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<ipnet::IpNet>() {
        return Ok(n.trunc());
    }
    t.parse::<std::net::IpAddr>()
        .map(ipnet::IpNet::from)
        .map_err(|_| format!("`{t}` is not an address or a network like 10.0.0.0/8"))
}

/// `kind[:key=value…]`, e.g. `vpn:delay=20ms:loss=0.5%:label=vpn-lossy`.
pub(crate) fn lab_path(s: &str) -> Result<PathArg, String> {
    let mut parts = s.split(':');
    let kind = parts
        .next()
        .unwrap_or_default()
        .parse::<xbench_lab::PathKind>()
        .map_err(|e| e.to_string())?;
    let mut p = PathArg::new(kind);
    for kv in parts {
        let (k, v) = kv.split_once('=').ok_or_else(|| {
            format!(
                "`{kv}` in `{s}` is not KEY=VALUE (rate, delay, jitter, loss, reorder, queue, \
                 label)"
            )
        })?;
        match k {
            "rate" => p.rate = Some(link_rate(v)?),
            "delay" => p.delay = Some(lab_duration(v)?),
            "jitter" => p.jitter = Some(lab_duration(v)?),
            "loss" => p.loss = Some(loss(v)?),
            "reorder" => p.reorder = Some(reorder(v)?),
            "queue" => p.queue = Some(queue(v)?),
            "label" => p.label = Some(v.to_owned()),
            _ => {
                return Err(format!(
                    "unknown path setting `{k}` in `{s}`; use rate, delay, jitter, loss, \
                     reorder, queue or label"
                ));
            }
        }
    }
    Ok(p)
}

/// A queue length in bytes (`60K`, `1M`, `60000`).
pub(crate) fn queue(s: &str) -> Result<u64, String> {
    xbench::units::ByteSize::parse(s)
        .map(|b| b.0)
        .map_err(|e| e.to_string())
}

/// A rate with a unit, bits per second (`200M`).
pub(crate) fn link_rate(s: &str) -> Result<u64, String> {
    xbench::units::BitRate::parse_with_unit(s)
        .map(|r| r.bits_per_second())
        .map_err(|e| e.to_string())
}

/// A delay or jitter: must carry a unit (`10ms`, `500us`, `0.2s`), must not be negative; a
/// bare number would be read as seconds, which a delay of "10" almost never means.
pub(crate) fn lab_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if !t.starts_with('-') && t.ends_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(format!("`{t}` has no unit; write {t}ms (or us, s)"));
    }
    duration(t)
}

/// Loss in percent (`1%`, `0.5`), returned as a probability.
pub(crate) fn loss(s: &str) -> Result<f64, String> {
    lab_percent("loss", s)
}

/// Reordering in percent (`1%`, `0.5`), returned as a probability.
pub(crate) fn reorder(s: &str) -> Result<f64, String> {
    lab_percent("reordering", s)
}

fn lab_percent(what: &str, s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v: f64 = t
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("`{t}` is not a percentage like 1% or 0.5"))?;
    if !(0.0..=100.0).contains(&v) {
        return Err(format!("{what} {t} is outside 0–100 %"));
    }
    Ok(v / 100.0)
}

/// `--metric`: one figure `xbench compare` checks.
pub(crate) fn metric(s: &str) -> Result<xbench_report::compare::Metric, String> {
    s.parse()
        .map_err(|e: xbench_report::compare::UnknownMetric| e.to_string())
}

/// `5%`, `5 %` or `5`: a percentage, as a fraction.
fn percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    let v: f64 = t
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage (e.g. 5%)"))?;
    if !v.is_finite() {
        return Err(format!("`{s}` is not a percentage (e.g. 5%)"));
    }
    Ok(v / 100.0)
}

/// `--client-share`: a whole percentage from 1 % to 100 %.
pub(crate) fn client_share(s: &str) -> Result<u8, String> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    match t.parse::<u8>() {
        Ok(n) if (1..=100).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{s}` is not a share: a whole percentage from 1% to 100%"
        )),
    }
}

/// `--max-regression`: the loss allowed, from 0 % to below 100 %.
pub(crate) fn max_regression(s: &str) -> Result<f64, String> {
    let v = percent(s)?;
    if !(0.0..1.0).contains(&v) {
        return Err(format!(
            "`{s}`: the allowed loss must be from 0% to below 100%"
        ));
    }
    Ok(v)
}

/// `--confidence`: from 50 % to below 100 %.
pub(crate) fn confidence(s: &str) -> Result<f64, String> {
    let v = percent(s)?;
    if !(0.5..1.0).contains(&v) {
        return Err(format!(
            "`{s}`: the confidence must be from 50% to below 100%"
        ));
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

    #[test]
    fn request_response_values() {
        let (a, b) = rr_sizes("64,16K").unwrap();
        assert_eq!((a.get(), b.get()), (64, 16_384));
        assert_eq!(rr_sizes("1").unwrap().1.get(), 1);
        assert!(rr_sizes("0,0").unwrap_err().contains("greater than 0"));
        assert!(rr_sizes("1,1G").unwrap_err().contains("maximum"));
        assert!(flows("0").is_err() && flows("65537").is_err());
        assert_eq!(flows("65536").map(FlowCount::get), Ok(65536));
        assert_eq!(max_flows("65536"), Ok(65536));
        assert!(
            max_flows("65537")
                .unwrap_err()
                .contains("between 1 and 65536")
        );
        assert!(burst("0").is_err());
        assert_eq!(rate("200").unwrap(), 200.0);
        assert_eq!(rate("2k").unwrap(), 2000.0);
        assert!((rate("10ms").unwrap() - 100.0).abs() < 1e-9);
        assert!((rate("250us").unwrap() - 4000.0).abs() < 1e-6);
        assert!(rate("0").is_err() && rate("-5").is_err() && rate("0ms").is_err());
    }

    #[test]
    fn sweep_lists() {
        let l = streams_list("1, 2,4,8,16").unwrap();
        assert_eq!(
            l.0.iter().map(|v| v.get()).collect::<Vec<_>>(),
            [1, 2, 4, 8, 16]
        );
        assert_eq!(l.first().unwrap().get(), 1);
        assert!(streams_list("1,2,1").unwrap_err().contains("listed twice"));
        assert!(streams_list("1,0").unwrap_err().contains("at least 1"));
        assert!(streams_list("1,,2").unwrap_err().contains("empty item"));
        assert_eq!(window_list("64K,1M").unwrap().0[1].0, 1 << 20);
        assert!(window_list("64K,256").unwrap_err().contains("no unit"));
        assert!(window_list("256K,256K").unwrap_err().contains("twice"));
        assert!(flows_list("1,0").is_err());
        assert!(repeat("0").is_err());
        assert_eq!(repeat("15").unwrap().get(), 15);
    }

    #[test]
    fn path_items_carry_their_own_settings() {
        let q = lab_path("direct:rate=150M:queue=60K").unwrap();
        assert_eq!(q.queue, Some(60 * 1024));
        let p = lab_path("vpn:delay=20ms:loss=0.5%:label=vpn-lossy").unwrap();
        assert_eq!(p.kind, xbench_lab::PathKind::Vpn);
        assert_eq!(p.delay, Some(Duration::from_millis(20)));
        assert_eq!(p.loss, Some(0.005));
        let r = lab_path("direct:reorder=2%").unwrap();
        assert_eq!(r.reorder, Some(0.02));
        assert!(
            reorder("101")
                .unwrap_err()
                .contains("reordering 101 is outside 0–100")
        );
        assert_eq!(p.label.as_deref(), Some("vpn-lossy"));
        assert!(
            lab_path("mpls")
                .unwrap_err()
                .contains("unknown path kind `mpls`")
        );
        assert!(
            lab_path("direct:speed=1G")
                .unwrap_err()
                .contains("unknown path setting")
        );
    }

    #[test]
    fn bad_values_are_named() {
        assert!(lab_duration("-5ms").unwrap_err().contains("negative"));
        assert!(lab_duration("10").unwrap_err().contains("no unit"));
        assert_eq!(lab_duration("500us").unwrap(), Duration::from_micros(500));
        assert!(loss("101%").unwrap_err().contains("outside 0–100"));
        assert!(loss("-1").unwrap_err().contains("outside"));
        assert_eq!(loss("1%").unwrap(), 0.01);
        assert_eq!(link_rate("200M").unwrap(), 200_000_000);
    }

    #[test]
    fn percentages() {
        assert_eq!(max_regression("5%"), Ok(0.05));
        assert_eq!(max_regression("0"), Ok(0.0));
        assert_eq!(max_regression("12.5 %"), Ok(0.125));
        assert!(max_regression("100%").is_err());
        assert!(max_regression("-1%").is_err());
        assert!(max_regression("five").is_err());
        assert_eq!(confidence("99%"), Ok(0.99));
        assert!(confidence("100").is_err());
        assert!(confidence("0.95").is_err());
    }
}
