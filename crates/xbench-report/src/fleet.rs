//! Fleets: one test spread over several client machines that start at a common instant, and
//! their reports merged into the one figure the path gets.
//!
//! Used by `xbench-deploy` (N client instances of one path, on AWS or in the path lab). Two
//! halves: [`shares`] / [`share_spec`] split a fleet-wide test into each instance's part
//! (`-P 64` over 4 instances = 16 each), and [`merge`] turns the instances' reports back into
//! one [`TestReport`] of the fleet-wide test, so everything that reads saved runs (`xbench
//! report`, `--resume`, the charts) reads a fleet's run as it reads any other.
//!
//! How the figures merge, and why:
//! - **Throughput** (and bytes, retransmits, streams): sums. Each instance measures its own
//!   window — from its own start, after its own `-O` warm-up, for `-t` seconds — and the
//!   instances start at one instant, so the windows coincide to within the clocks' offset
//!   and the connection setup (milliseconds against a test of seconds). The fleet's rate is
//!   the sum of each instance's receiver rate over its window; `seconds` is the longest
//!   window. Intervals are merged by index (they are relative to each instance's start, so
//!   index *i* is the same stretch of wall-clock time in every instance); an interval not
//!   every instance reported is left out.
//! - **Request/response latency**: each report carries its HdrHistogram (whole test and per
//!   interval), so the fleet's percentiles come from the merged histogram — never from
//!   averaged percentiles, which mean nothing. Transaction rates sum.
//! - **Fairness** is recomputed over every stream of the fleet; RTT: lowest, highest, and the
//!   mean weighted by streams.
//! - **Left out** (`None`), because no sum or mean of the parts means it: the server's CPU
//!   (one server process serves the whole fleet; each report holds that process's figure),
//!   CPU per GB and per transaction, sender-limit shares and the window ceiling, and with them
//!   the diagnosis (each instance's own report keeps its own).
//!
//! Not for running anything or reading files.

use xbench::config::{TestSpec, Workload};
use xbench::latency::Distribution;
use xbench::report::{
    Attempts, CpuReport, CpuUsage, DirectionSummary, Fairness, Interval, IntervalSum, Opening,
    Outcome, Pacing, RrInterval, RrReport, RrSummary, RttStats, Summary, TestReport, Transfer,
};

/// Largest fleet: 64 instances is already more than any one path needs, and keeps a typo
/// (`clients = 400`) from launching an expensive fleet.
pub const MAX_INSTANCES: u16 = 64;

/// Why a fleet-wide test cannot be split, or its parts cannot be merged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// Fewer streams (or flows) than instances: some instance would have nothing to run.
    #[error(
        "{what} = {total} cannot be shared by {instances} client instances (each runs at least one); use at least {instances}, or fewer clients"
    )]
    TooFewForFleet {
        /// `parallel` or `flows`.
        what: &'static str,
        /// The fleet-wide count.
        total: u32,
        /// Instances.
        instances: u16,
    },
    /// A test kind whose figures this module does not merge.
    #[error("{0} tests are not run by fleets yet (their loss and jitter figures do not sum)")]
    NotMergeable(&'static str),
    /// The parts do not belong together.
    #[error("the fleet's reports cannot be merged: {0}")]
    Mismatch(String),
}

/// How `total` streams (or flows) are spread over `instances`: as evenly as possible, the
/// first instances taking one more when it does not divide (10 over 4 = 3, 3, 2, 2).
pub fn shares(total: u32, instances: u16) -> Result<Vec<u32>, FleetError> {
    let n = u32::from(instances.max(1));
    if total < n {
        return Err(FleetError::TooFewForFleet {
            what: "streams",
            total,
            instances,
        });
    }
    Ok((0..n)
        .map(|k| total / n + u32::from(k < total % n))
        .collect())
}

/// Instance `k`'s part (from 0) of the fleet-wide `spec` over `instances`: its share of `-P`
/// streams, or of `--flows` for request/response. Per-stream and per-flow settings (`-b`,
/// `--rate`, `-w`) are kept: they are per stream already.
pub fn share_spec(spec: &TestSpec, instances: u16, k: usize) -> Result<TestSpec, FleetError> {
    let mut out = spec.clone();
    match &mut out.workload {
        Workload::Throughput(t) => {
            if t.udp.is_some() {
                return Err(FleetError::NotMergeable("UDP"));
            }
            let share = pick(u32::from(t.streams.get()), instances, k, "parallel")?;
            t.streams = std::num::NonZeroU16::new(narrow(share)).ok_or_else(too_few)?;
        }
        Workload::RequestResponse(r) => {
            if r.udp.is_some() {
                return Err(FleetError::NotMergeable("UDP request/response"));
            }
            let share = pick(r.flows.get(), instances, k, "flows")?;
            r.flows = xbench::config::FlowCount::new(share).ok_or_else(too_few)?;
        }
        _ => return Err(FleetError::NotMergeable("this kind of")),
    }
    Ok(out)
}

fn too_few() -> FleetError {
    FleetError::Mismatch("a share of zero streams".into())
}

// Shares are at most the total, which came from a u16.
fn narrow(v: u32) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

fn pick(total: u32, instances: u16, k: usize, what: &'static str) -> Result<u32, FleetError> {
    let s = shares(total, instances).map_err(|_| FleetError::TooFewForFleet {
        what,
        total,
        instances,
    })?;
    s.get(k)
        .copied()
        .ok_or_else(|| FleetError::Mismatch(format!("no instance {k} in a fleet of {instances}")))
}

/// The fleet's report: `parts` (one completed report per instance, in instance order) merged
/// as the module says, carrying the fleet-wide `spec`. The merged report's warnings start
/// with one naming the fleet and each instance's figure, so a reader of the single file sees
/// it is a merge.
pub fn merge(parts: &[TestReport], spec: &TestSpec) -> Result<TestReport, FleetError> {
    let Some(first) = parts.first() else {
        return Err(FleetError::Mismatch("no reports".into()));
    };
    for (k, p) in parts.iter().enumerate() {
        match &p.outcome {
            Outcome::Completed => {}
            Outcome::Interrupted => {
                return Err(FleetError::Mismatch(format!(
                    "instance {} was interrupted",
                    k + 1
                )));
            }
            Outcome::Failed { error } => {
                return Err(FleetError::Mismatch(format!(
                    "instance {} failed: {error}",
                    k + 1
                )));
            }
        }
        if p.udp.is_some() {
            return Err(FleetError::NotMergeable("UDP"));
        }
        if p.rr.is_some() != first.rr.is_some() {
            return Err(FleetError::Mismatch(
                "request/response and throughput reports mixed".into(),
            ));
        }
    }
    let mut out = first.clone();
    out.spec = spec.clone();
    out.started_at = parts
        .iter()
        .map(|p| p.started_at.clone())
        .min()
        .unwrap_or_default();
    out.client_addr = None;

    // Streams are numbered per instance from 0; the fleet numbers them on.
    let mut offsets = Vec::with_capacity(parts.len());
    let mut next = 0u16;
    for p in parts {
        offsets.push(next);
        let n = p
            .streams
            .len()
            .max(p.rr.as_ref().map_or(0, |r| r.flows.len()));
        next = next.saturating_add(u16::try_from(n).unwrap_or(u16::MAX));
    }
    out.streams = parts
        .iter()
        .zip(&offsets)
        .flat_map(|(p, &o)| {
            p.streams.iter().cloned().map(move |mut s| {
                s.id = s.id.saturating_add(o);
                s
            })
        })
        .collect();
    out.summary = merge_summary(parts, &offsets)?;
    out.intervals = merge_intervals(parts, &offsets);
    out.rr = match first.rr {
        Some(_) => Some(merge_rr(parts, &offsets)?),
        None => None,
    };
    out.cpu = CpuReport {
        client: CpuUsage {
            user_s: parts.iter().map(|p| p.cpu.client.user_s).sum(),
            system_s: parts.iter().map(|p| p.cpu.client.system_s).sum(),
        },
        server: None,
        client_s_per_gb: None,
        server_s_per_gb: None,
        client_us_per_transaction: None,
        server_us_per_transaction: None,
    };
    let mut warnings = vec![format!(
        "fleet of {} client instances started at one instant, merged: {}",
        parts.len(),
        parts
            .iter()
            .enumerate()
            .map(|(k, p)| format!("#{} {}", k + 1, headline(p)))
            .collect::<Vec<_>>()
            .join("; ")
    )];
    for (k, p) in parts.iter().enumerate() {
        warnings.extend(
            p.warnings
                .iter()
                .map(|w| format!("instance {}: {w}", k + 1)),
        );
    }
    out.warnings = warnings;
    Ok(out)
}

/// One instance's figure, for the merged report's first warning.
fn headline(p: &TestReport) -> String {
    if let Some(rr) = &p.rr {
        return format!("{:.0} transactions/s", rr.summary.transactions_per_second);
    }
    p.summary
        .directions
        .iter()
        .filter_map(|d| {
            let t = d.receiver.or(d.sender)?;
            Some(format!(
                "{} {:.1} Mbit/s",
                d.direction.label(),
                t.bits_per_second / 1e6
            ))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn sum_transfers<'a>(ts: impl Iterator<Item = &'a Transfer>) -> Transfer {
    let mut out = Transfer {
        bytes: 0,
        seconds: 0.0,
        bits_per_second: 0.0,
    };
    for t in ts {
        out.bytes += t.bytes;
        out.seconds = out.seconds.max(t.seconds);
        out.bits_per_second += t.bits_per_second;
    }
    out
}

fn opt_sum<T: Copy + std::iter::Sum<T>>(v: impl Iterator<Item = Option<T>>) -> Option<T> {
    v.collect::<Option<Vec<T>>>().map(|v| v.into_iter().sum())
}

fn merge_rtt(v: impl Iterator<Item = (Option<RttStats>, f64)>) -> Option<RttStats> {
    let mut out: Option<RttStats> = None;
    let mut weight = 0.0;
    for (r, w) in v {
        let r = r?;
        out = Some(match out {
            None => r,
            Some(o) => RttStats {
                min_us: o.min_us.min(r.min_us),
                mean_us: (o.mean_us * weight + r.mean_us * w) / (weight + w).max(f64::MIN_POSITIVE),
                max_us: o.max_us.max(r.max_us),
            },
        });
        weight += w;
    }
    out
}

fn merge_summary(parts: &[TestReport], offsets: &[u16]) -> Result<Summary, FleetError> {
    let first = &parts[0].summary;
    let mut directions = Vec::new();
    for d in &first.directions {
        let same: Vec<&DirectionSummary> = parts
            .iter()
            .map(|p| {
                p.summary
                    .directions
                    .iter()
                    .find(|x| x.direction == d.direction)
                    .ok_or_else(|| {
                        FleetError::Mismatch(format!(
                            "an instance has no {} figures",
                            d.direction.label()
                        ))
                    })
            })
            .collect::<Result<_, _>>()?;
        let per_stream: Vec<_> = parts
            .iter()
            .zip(offsets)
            .flat_map(|(p, &o)| {
                p.summary
                    .directions
                    .iter()
                    .filter(|x| x.direction == d.direction)
                    .flat_map(|x| x.per_stream.iter().cloned())
                    .map(move |mut s| {
                        s.stream = s.stream.saturating_add(o);
                        s
                    })
            })
            .collect();
        let rates: Vec<f64> = per_stream
            .iter()
            .filter_map(|s| s.receiver.or(s.sender).map(|t| t.bits_per_second))
            .collect();
        let mut after_end = same[0].after_end;
        for s in &same[1..] {
            after_end.merge(&s.after_end);
        }
        directions.push(DirectionSummary {
            direction: d.direction,
            streams: same.iter().map(|s| s.streams).sum(),
            sender: same
                .iter()
                .map(|s| s.sender)
                .collect::<Option<Vec<_>>>()
                .map(|t| sum_transfers(t.iter())),
            receiver: same
                .iter()
                .map(|s| s.receiver)
                .collect::<Option<Vec<_>>>()
                .map(|r| sum_transfers(r.iter())),
            after_end,
            fairness: fairness(&rates),
            retransmits: same.iter().map(|s| s.retransmits).sum(),
            rtt: merge_rtt(same.iter().map(|s| (s.rtt, f64::from(s.streams)))),
            max_cwnd_bytes: same.iter().filter_map(|s| s.max_cwnd_bytes).max(),
            limits: None,
            window_limited: same.iter().any(|s| s.window_limited),
            window_ceiling: None,
            per_stream,
            // Without the limit shares and the ceiling the rules would only say "cannot tell".
            diagnosis: None,
        });
    }
    Ok(Summary {
        directions,
        measured_s: parts
            .iter()
            .map(|p| p.summary.measured_s)
            .fold(0.0, f64::max),
    })
}

fn fairness(rates: &[f64]) -> Option<Fairness> {
    if rates.len() < 2 {
        return None;
    }
    let sum: f64 = rates.iter().sum();
    let squares: f64 = rates.iter().map(|r| r * r).sum();
    Some(Fairness {
        min_bits_per_second: rates.iter().copied().fold(f64::INFINITY, f64::min),
        max_bits_per_second: rates.iter().copied().fold(0.0, f64::max),
        jain_index: if squares > 0.0 {
            sum * sum / (rates.len() as f64 * squares)
        } else {
            1.0
        },
    })
}

/// Throughput intervals by index; only indices every instance reported.
fn merge_intervals(parts: &[TestReport], offsets: &[u16]) -> Vec<Interval> {
    let mut out = Vec::new();
    for iv in &parts[0].intervals {
        let same: Option<Vec<&Interval>> = parts
            .iter()
            .map(|p| p.intervals.iter().find(|x| x.index == iv.index))
            .collect();
        let Some(same) = same else { continue };
        let sum = iv
            .sum
            .iter()
            .map(|s| {
                let all: Vec<&IntervalSum> = same
                    .iter()
                    .filter_map(|x| x.sum.iter().find(|y| y.direction == s.direction))
                    .collect();
                IntervalSum {
                    direction: s.direction,
                    sent: sum_transfers(all.iter().map(|x| &x.sent)),
                    received: all
                        .iter()
                        .map(|x| x.received)
                        .collect::<Option<Vec<_>>>()
                        .map(|r| sum_transfers(r.iter())),
                    retransmits: all.iter().map(|x| x.retransmits).sum(),
                }
            })
            .collect();
        let streams = same
            .iter()
            .zip(offsets)
            .flat_map(|(x, &o)| {
                x.streams.iter().cloned().map(move |mut s| {
                    s.stream = s.stream.saturating_add(o);
                    s
                })
            })
            .collect();
        out.push(Interval {
            streams,
            sum,
            ..iv.clone()
        });
    }
    out
}

/// Decodes and adds histograms; `what` names them in the error.
fn merged_histogram<'a>(
    hs: impl Iterator<Item = &'a String>,
    what: &str,
) -> Result<Distribution, FleetError> {
    let mut d = Distribution::new();
    for h in hs {
        let one = Distribution::decode(h)
            .map_err(|e| FleetError::Mismatch(format!("{what}'s latency histogram: {e}")))?;
        d.add(&one);
    }
    Ok(d)
}

fn merge_rr(parts: &[TestReport], offsets: &[u16]) -> Result<RrReport, FleetError> {
    let rrs: Vec<&RrReport> = parts.iter().filter_map(|p| p.rr.as_ref()).collect();
    let first = rrs[0];
    let whole = merged_histogram(rrs.iter().map(|r| &r.summary.histogram), "a test")?;
    let s: Vec<&RrSummary> = rrs.iter().map(|r| &r.summary).collect();
    let summary = RrSummary {
        transactions: s.iter().map(|x| x.transactions).sum(),
        seconds: s.iter().map(|x| x.seconds).fold(0.0, f64::max),
        transactions_per_second: s.iter().map(|x| x.transactions_per_second).sum(),
        latency: whole.stats(),
        coordinated_omission_corrected: s.iter().all(|x| x.coordinated_omission_corrected),
        retransmits: s.iter().map(|x| x.retransmits).sum(),
        server_retransmits: opt_sum(s.iter().map(|x| x.server_retransmits)),
        rtt: merge_rtt(rrs.iter().map(|r| (r.summary.rtt, r.flows.len() as f64))),
        total_transactions: s.iter().map(|x| x.total_transactions).sum(),
        server_transactions: opt_sum(s.iter().map(|x| x.server_transactions)),
        connections: s.iter().map(|x| x.connections).sum(),
        server_connections: opt_sum(s.iter().map(|x| x.server_connections)),
        pacing: s
            .iter()
            .map(|x| x.pacing)
            .collect::<Option<Vec<_>>>()
            .map(|p| {
                let asked: f64 = p.iter().map(|x| x.asked_per_second).sum();
                let achieved: f64 = p.iter().map(|x| x.achieved_per_second).sum();
                Pacing {
                    asked_per_second: asked,
                    achieved_per_second: achieved,
                    kept_up: p.iter().all(|x| x.kept_up),
                }
            }),
        histogram: whole.encode(),
        udp: None,
    };
    let mut intervals = Vec::new();
    for iv in &first.intervals {
        let Some(same) = rrs
            .iter()
            .map(|r| r.intervals.iter().find(|x| x.index == iv.index))
            .collect::<Option<Vec<&RrInterval>>>()
        else {
            continue;
        };
        let h = merged_histogram(same.iter().map(|x| &x.histogram), "an interval")?;
        let srtts: Vec<f64> = same.iter().filter_map(|x| x.srtt_us).collect();
        intervals.push(RrInterval {
            transactions: same.iter().map(|x| x.transactions).sum(),
            transactions_per_second: same.iter().map(|x| x.transactions_per_second).sum(),
            latency: h.stats(),
            retransmits: same.iter().map(|x| x.retransmits).sum(),
            server_retransmits: opt_sum(same.iter().map(|x| x.server_retransmits)),
            srtt_us: (!srtts.is_empty()).then(|| srtts.iter().sum::<f64>() / srtts.len() as f64),
            connections: same.iter().map(|x| x.connections).sum(),
            histogram: h.encode(),
            lost: None,
            attempts: sum_attempts(same.iter().map(|x| x.attempts)),
            ..iv.clone()
        });
    }
    let flows = rrs
        .iter()
        .zip(offsets)
        .flat_map(|(r, &o)| {
            r.flows.iter().cloned().map(move |mut f| {
                f.flow = f.flow.saturating_add(o);
                f
            })
        })
        .collect();
    let setup = rrs
        .iter()
        .map(|r| r.setup)
        .collect::<Option<Vec<_>>>()
        .map(|v| {
            let mut a = v[0];
            for b in &v[1..] {
                a.requested += b.requested;
                a.connected += b.connected;
                a.refused += b.refused;
                a.timed_out += b.timed_out;
                a.failed += b.failed;
                a.seconds = a.seconds.max(b.seconds);
            }
            a.per_second = if a.seconds > 0.0 {
                a.connected as f64 / a.seconds
            } else {
                0.0
            };
            a
        });
    // --connections-only: each instance held its share of the flows and checked them at its
    // end; the fleet held the sum, with the openers of every instance.
    let held = rrs
        .iter()
        .map(|r| r.held)
        .collect::<Option<Vec<_>>>()
        .map(|v| {
            let mut a = v[0];
            for b in &v[1..] {
                a.held += b.held;
                a.open_at_end += b.open_at_end;
                a.closed += b.closed;
                a.reset += b.reset;
                a.unanswered += b.unanswered;
                a.openers = a.openers.saturating_add(b.openers);
            }
            a
        });
    // --connections-only: every instance's openers tried their own new connections.
    let opening = rrs
        .iter()
        .map(|r| r.opening)
        .collect::<Option<Vec<_>>>()
        .and_then(|v| {
            Some(Opening {
                attempts: sum_attempts(v.iter().map(|o| Some(o.attempts)))?,
                timeout_s: v.iter().map(|o| o.timeout_s).fold(0.0, f64::max),
            })
        });
    Ok(RrReport {
        intervals,
        summary,
        flows,
        setup,
        held,
        opening,
    })
}

/// The instances' attempt counts summed (`--connections-only`); `None` unless all have them.
fn sum_attempts(each: impl Iterator<Item = Option<Attempts>>) -> Option<Attempts> {
    each.collect::<Option<Vec<_>>>()?
        .iter()
        .fold(None, |acc: Option<Attempts>, a| {
            Some(acc.map_or(*a, |s| s.add(a)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// --connections-only: the fleet tried what its instances tried; its share of failures
    /// is recomputed from the sums, not averaged.
    #[test]
    fn instances_attempts_add_up_with_their_share_recomputed() {
        let a = Attempts::new(90, 10, 0, 0);
        let b = Attempts::new(0, 0, 5, 5);
        let sum = sum_attempts([Some(a), Some(b)].into_iter()).unwrap();
        assert_eq!(sum, Attempts::new(90, 10, 5, 5));
        assert_eq!(sum.attempts, 110);
        assert!(
            (sum.failed_percent - 2000.0 / 110.0).abs() < 1e-9,
            "{sum:?}"
        );
        // An instance without counts (an older client): none for the fleet.
        assert_eq!(sum_attempts([Some(a), None].into_iter()), None);
    }

    #[test]
    fn uneven_shares_put_the_remainder_first() {
        assert_eq!(shares(64, 4).unwrap(), vec![16, 16, 16, 16]);
        assert_eq!(shares(10, 4).unwrap(), vec![3, 3, 2, 2]);
        assert_eq!(shares(3, 3).unwrap(), vec![1, 1, 1]);
        assert!(matches!(
            shares(2, 3),
            Err(FleetError::TooFewForFleet { total: 2, .. })
        ));
    }

    #[test]
    fn share_spec_splits_streams_and_flows() {
        let mut spec = TestSpec::throughput();
        if let Workload::Throughput(t) = &mut spec.workload {
            t.streams = std::num::NonZeroU16::new(10).unwrap();
        }
        let parts: Vec<u16> = (0..4)
            .map(|k| match share_spec(&spec, 4, k).unwrap().workload {
                Workload::Throughput(t) => t.streams.get(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(parts, vec![3, 3, 2, 2]);
        let e = share_spec(&spec, 11, 0).unwrap_err();
        assert!(e.to_string().contains("parallel = 10"), "{e}");
    }
}
