//! Derives a latency-under-load report from its parts' reports: the probe tests' 100 ms
//! intervals and the bulk test's intervals, each placed on one timeline by the offset at
//! which its part started. Pure functions: no sockets, no clocks.
//!
//! A probe interval belongs to a phase only when it lies wholly inside it, so a phase's
//! percentiles never mix samples from both sides of a boundary; a lost probe is placed by its
//! send time (it is counted when its timeout expires, one probe timeout later).

use std::collections::BTreeMap;

use super::report::{
    Increase, Phase, PhaseLatency, Phases, ProbeLoad, ProbeResults, Responsiveness, RowBulk,
    RowLatency, TimelineRow, UnderLoadReport,
};
use super::rpm;
use crate::config::StreamDirection;
use crate::latency::Distribution;
use crate::report::{Interval, RrInterval, RrReport, TestReport};

/// One probe test's intervals, on the timeline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbePart<'a> {
    pub(crate) intervals: &'a [RrInterval],
    /// When the part started, seconds on the timeline.
    pub(crate) offset_s: f64,
    /// Its probe timeout, seconds: a loss is counted this long after the probe was sent.
    pub(crate) timeout_s: f64,
}

/// The parts on one timeline: enough for its rows, live or at the end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeline<'a> {
    pub(crate) udp: ProbePart<'a>,
    pub(crate) tcp: Option<ProbePart<'a>>,
    /// The bulk test's intervals (their times count from its own start, `load_start_s`).
    pub(crate) bulk: &'a [Interval],
    /// The phases; while a test runs, those still to come are at infinity.
    pub(crate) phases: Phases,
    /// The row length before and after the load (the bulk test's `-i`), seconds.
    pub(crate) interval_s: f64,
}

/// Everything the report is derived from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parts<'a> {
    pub(crate) timeline: Timeline<'a>,
    /// The UDP probe test's report (its requests sent).
    pub(crate) udp_report: &'a RrReport,
    /// The bulk test's report (its delivered rates).
    pub(crate) bulk: &'a TestReport,
    /// Bytes of one UDP probe datagram on the wire: payload, UDP and IP headers.
    pub(crate) probe_wire_bytes: u64,
}

/// The report of `parts`.
pub(crate) fn derive(parts: &Parts<'_>) -> UnderLoadReport {
    let tl = &parts.timeline;
    let ph = tl.phases;
    let udp = probe_results(&tl.udp, &ph);
    let tcp = tl.tcp.as_ref().map(|t| probe_results(t, &ph));
    let srtt = bulk_srtt(tl.bulk);
    let responsiveness = responsiveness(tl, &ph, &srtt);
    UnderLoadReport {
        phases: ph,
        udp,
        tcp,
        bulk_srtt: srtt.stats(),
        responsiveness,
        probe_load: probe_load(parts),
        timeline: row_spans(tl, ph.end_s)
            .into_iter()
            .map(|s| row(tl, s))
            .collect(),
    }
}

/// The span of probe interval `iv` on the timeline.
fn span(iv: &RrInterval, offset_s: f64) -> (f64, f64) {
    (offset_s + iv.start_s, offset_s + iv.end_s)
}

/// Whether `(a, b)` lies wholly in `[from, to]` (a little slack for float sums).
fn within((a, b): (f64, f64), from: f64, to: f64) -> bool {
    const EPS: f64 = 1e-6;
    a >= from - EPS && b <= to + EPS
}

fn decoded(iv: &RrInterval) -> Option<Distribution> {
    if iv.histogram.is_empty() {
        return None;
    }
    Distribution::decode(&iv.histogram).ok()
}

/// Latency and losses of the probe intervals that `keep` accepts (by their span), losses
/// placed by send time.
fn gather(part: &ProbePart<'_>, keep: impl Fn((f64, f64)) -> bool) -> (Distribution, u64) {
    let mut d = Distribution::new();
    let mut lost = 0;
    for iv in part.intervals {
        let s = span(iv, part.offset_s);
        if keep(s)
            && let Some(h) = decoded(iv)
        {
            d.add(&h);
        }
        let sent = (s.0 - part.timeout_s, s.1 - part.timeout_s);
        if keep(sent) {
            lost += iv.lost.unwrap_or(0);
        }
    }
    (d, lost)
}

fn phase_latency(d: &Distribution, lost: u64) -> PhaseLatency {
    let ended = d.count() + lost;
    PhaseLatency {
        latency: d.stats(),
        lost,
        lost_percent: if ended > 0 {
            lost as f64 * 100.0 / ended as f64
        } else {
            0.0
        },
        histogram: if d.count() > 0 {
            d.encode()
        } else {
            String::new()
        },
    }
}

fn probe_results(part: &ProbePart<'_>, ph: &Phases) -> ProbeResults {
    let (idle, idle_lost) = gather(part, |s| within(s, 0.0, ph.load_start_s));
    let (loaded, loaded_lost) = gather(part, |s| within(s, ph.loaded_start_s, ph.loaded_end_s));
    let (after, after_lost) = gather(part, |s| within(s, ph.idle_after_start_s, ph.end_s));
    let increase = match (idle.stats(), loaded.stats()) {
        (Some(i), Some(l)) => Some(Increase {
            p50_us: l.p50_us - i.p50_us,
            p90_us: l.p90_us - i.p90_us,
            p99_us: l.p99_us - i.p99_us,
        }),
        _ => None,
    };
    ProbeResults {
        idle: phase_latency(&idle, idle_lost),
        loaded: phase_latency(&loaded, loaded_lost),
        idle_after: phase_latency(&after, after_lost),
        increase,
    }
}

/// The bulk streams' smoothed RTT at the end of every measured interval (those after the
/// `-O` warm-up, the loaded phase's): each sending stream's `TCP_INFO` (the server's for
/// streams it sends). Chosen by the bulk test's own mark, not by the timeline's clock, so the
/// last interval, which ends where the measured window does, is never lost to rounding.
fn bulk_srtt(bulk: &[Interval]) -> Distribution {
    let mut d = Distribution::new();
    for iv in bulk.iter().filter(|iv| !iv.omitted) {
        record_srtt(iv, &mut d);
    }
    d
}

fn record_srtt(iv: &Interval, d: &mut Distribution) {
    let mut r = crate::latency::Recorder::new();
    for st in &iv.streams {
        if let Some(t) = st.tcp.filter(|t| t.srtt_us > 0) {
            r.record(u64::from(t.srtt_us) * 1_000);
        }
    }
    d.add_recorder(&r);
}

fn responsiveness(tl: &Timeline<'_>, ph: &Phases, srtt: &Distribution) -> Option<Responsiveness> {
    let loaded = |p: &ProbePart<'_>| gather(p, |s| within(s, ph.loaded_start_s, ph.loaded_end_s)).0;
    let ms = |d: &Distribution| rpm::trimmed_mean_ns(d).map(|ns| ns / 1e6);
    let udp_ms = ms(&loaded(&tl.udp))?;
    let tcp_ms = match &tl.tcp {
        Some(t) => Some(ms(&loaded(t))?),
        None => None,
    };
    let self_ms = ms(srtt)?;
    Some(rpm::responsiveness(udp_ms, tcp_ms, self_ms))
}

fn probe_load(parts: &Parts<'_>) -> ProbeLoad {
    let r = parts.udp_report;
    let sent = r
        .summary
        .udp
        .as_ref()
        .map_or(r.summary.total_transactions, |u| u.total_requests);
    let secs = r.intervals.last().map_or(0.0, |iv| iv.end_s);
    let pps = if secs > 0.0 { sent as f64 / secs } else { 0.0 };
    let bits = pps * parts.probe_wire_bytes as f64 * 8.0;
    // The slowest loaded direction: where the probes' share is largest.
    let slowest = parts
        .bulk
        .summary
        .directions
        .iter()
        .filter_map(|d| d.receiver.or(d.sender).map(|t| t.bits_per_second))
        .filter(|b| *b > 0.0)
        .reduce(f64::min);
    ProbeLoad {
        probes_per_second: pps,
        bits_per_second: bits,
        share_of_bulk_percent: slowest.map(|b| bits * 100.0 / b),
    }
}

/// The rows' spans up to `until` (seconds on the timeline): rows of `interval_s` from zero up
/// to the load, the bulk test's own intervals while it ran, and rows of `interval_s` after
/// its last. Every span is final once the phases before it are known, so a live timeline
/// prints the same rows as the report.
pub(crate) fn row_spans(tl: &Timeline<'_>, until: f64) -> Vec<(f64, f64)> {
    const EPS: f64 = 1e-6;
    let ph = &tl.phases;
    let w = tl.interval_s.max(crate::config::MIN_INTERVAL.as_secs_f64());
    let bulk: Vec<(f64, f64)> = tl
        .bulk
        .iter()
        .map(|iv| (ph.load_start_s + iv.start_s, ph.load_start_s + iv.end_s))
        .collect();
    let first = bulk.first().map_or(ph.load_start_s, |s| s.0);
    let mut rows = Vec::new();
    let mut t = 0.0;
    // Whole rows while at least half a row is left before the load; the last idle row runs
    // up to it (half a row to a row and a half), so no sliver of a row holds no probe.
    while t + w <= first - w / 2.0 + EPS && t + w <= until + EPS {
        rows.push((t, t + w));
        t += w;
    }
    if t < first - EPS && first <= until + EPS {
        rows.push((t, first));
    }
    rows.extend(bulk.iter().copied().filter(|s| s.1 <= until + EPS));
    // After the load: only once the bulk test has ended (its last interval is then known).
    if ph.idle_after_start_s.is_finite() {
        let mut t = bulk.last().map_or(first, |s| s.1);
        while t < ph.end_s.min(until) - EPS {
            let end = (t + w).min(ph.end_s);
            if end > until + EPS {
                break;
            }
            rows.push((t, end));
            t += w;
        }
    }
    rows
}

/// The phase a span overlaps most.
fn phase_of(ph: &Phases, (a, b): (f64, f64)) -> Phase {
    let overlap = |from: f64, to: f64| (b.min(to) - a.max(from)).max(0.0);
    [
        (Phase::Idle, overlap(0.0, ph.load_start_s)),
        (Phase::Ramp, overlap(ph.load_start_s, ph.loaded_start_s)),
        (Phase::Loaded, overlap(ph.loaded_start_s, ph.loaded_end_s)),
        (
            Phase::Drain,
            overlap(ph.loaded_end_s, ph.idle_after_start_s),
        ),
        (
            Phase::IdleAfter,
            overlap(ph.idle_after_start_s, f64::INFINITY),
        ),
    ]
    .into_iter()
    .fold(
        (Phase::Idle, -1.0),
        |best, (p, o)| if o > best.1 { (p, o) } else { best },
    )
    .0
}

/// The probes of one part in a row: the intervals whose middle lies in it, losses by send
/// time.
fn row_latency(part: &ProbePart<'_>, (a, b): (f64, f64)) -> (RowLatency, Distribution) {
    let inside = |t: f64| t >= a && t < b;
    let (d, lost) = gather(part, |s| inside((s.0 + s.1) / 2.0));
    let st = d.stats();
    let row = RowLatency {
        count: d.count(),
        lost,
        p50_us: st.map(|s| s.p50_us),
        p90_us: st.map(|s| s.p90_us),
        p99_us: st.map(|s| s.p99_us),
        max_us: st.map(|s| s.max_us),
    };
    (row, d)
}

fn row_bulk(iv: &Interval) -> Vec<RowBulk> {
    let mut by_dir: BTreeMap<StreamDirection, (u32, f64, u64)> = BTreeMap::new();
    for st in &iv.streams {
        if let Some(t) = st.tcp {
            let e = by_dir.entry(st.direction).or_default();
            if t.srtt_us > 0 {
                e.0 += 1;
                e.1 += f64::from(t.srtt_us);
            }
            e.2 += t.cwnd_bytes;
        }
    }
    iv.sum
        .iter()
        .map(|s| {
            let tcp = by_dir.get(&s.direction);
            RowBulk {
                direction: s.direction,
                bits_per_second: s.received.unwrap_or(s.sent).bits_per_second,
                retransmits: s.retransmits,
                srtt_us: tcp.filter(|t| t.0 > 0).map(|t| t.1 / f64::from(t.0)),
                cwnd_bytes: tcp.map(|t| t.2),
            }
        })
        .collect()
}

/// The row of `span`.
pub(crate) fn row(tl: &Timeline<'_>, span: (f64, f64)) -> TimelineRow {
    let ph = &tl.phases;
    let (udp, udp_d) = row_latency(&tl.udp, span);
    let tcp = tl.tcp.as_ref().map(|t| row_latency(t, span));
    let iv = tl.bulk.iter().find(|iv| {
        let s = ph.load_start_s + iv.start_s;
        (s - span.0).abs() < 1e-6
    });
    let bulk = iv.map(row_bulk).unwrap_or_default();
    let rpm = iv.and_then(|iv| {
        let mut srtt = Distribution::new();
        record_srtt(iv, &mut srtt);
        let mean_ms = |d: &Distribution| d.stats().map(|s| s.mean_us / 1e3);
        let tcp_ms = match &tcp {
            Some((_, d)) => Some(mean_ms(d)?),
            None => None,
        };
        Some(rpm::responsiveness(mean_ms(&udp_d)?, tcp_ms, mean_ms(&srtt)?).rpm)
    });
    TimelineRow {
        start_s: span.0,
        end_s: span.1,
        phase: phase_of(ph, span),
        udp,
        tcp: tcp.map(|t| t.0),
        bulk,
        rpm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases() -> Phases {
        Phases {
            load_start_s: 2.0,
            loaded_start_s: 3.0,
            loaded_end_s: 8.0,
            idle_after_start_s: 8.5,
            end_s: 10.5,
        }
    }

    #[test]
    fn a_span_takes_the_phase_it_overlaps_most() {
        let ph = phases();
        assert_eq!(phase_of(&ph, (0.0, 1.0)), Phase::Idle);
        assert_eq!(phase_of(&ph, (1.9, 2.6)), Phase::Ramp);
        assert_eq!(phase_of(&ph, (3.0, 4.0)), Phase::Loaded);
        assert_eq!(phase_of(&ph, (7.9, 8.5)), Phase::Drain);
        assert_eq!(phase_of(&ph, (9.0, 10.0)), Phase::IdleAfter);
    }

    #[test]
    fn within_needs_the_whole_span() {
        assert!(within((2.0, 2.1), 2.0, 3.0));
        assert!(!within((1.95, 2.05), 2.0, 3.0));
        assert!(within((2.9, 3.0), 2.0, 3.0));
        assert!(!within((2.95, 3.05), 2.0, 3.0));
    }
}
