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
//!   index *i* is the same stretch of wall-clock time in every instance, as far as their
//!   starts agree: see **Starts**); an interval not
//!   every instance reported is left out.
//! - **Request/response latency**: each report carries its HdrHistogram (whole test and per
//!   interval), so the fleet's percentiles come from the merged histogram — never from
//!   averaged percentiles, which mean nothing. Transaction rates sum.
//! - **Fairness** is recomputed over every stream of the fleet; RTT: lowest, highest, and the
//!   mean weighted by streams.
//! - **CPU**: sums on each side (each report's figures are its own test's threads, the
//!   server's included), and per GB or per transaction from the sums.
//! - **Starts**: each instance's start after the earliest is in the merged report's first
//!   warning. A spread past a tenth of the interval means the windows do not coincide: the
//!   merge is refused ([`FleetError::Spread`]), or with [`SpreadPolicy::Mark`] merged with a
//!   warning of its own. The spread is the clocks' and the test's setup after the instant
//!   (a round trip to `Accepted`, the data connections or flows opening): the client
//!   connects and proves itself ahead of the common instant and asks for the test at it
//!   ([`xbench::ClientConfig::start_at`] says what else a test of several sessions sets up
//!   after it).
//! - **Left out** (`None`), because no sum or mean of the parts means it: sender-limit shares
//!   and the window ceiling, and with them the diagnosis (each instance's own report keeps its
//!   own).
//!
//! Not for running anything or reading files.

use xbench::config::{TestSpec, Workload};
use xbench::latency::Distribution;
use xbench::report::{
    Attempts, ConnectionSetup, CpuReport, CpuUsage, DirectionSummary, Fairness, HeldFlows,
    Interval, IntervalSum, Opening, Outcome, Pacing, RrInterval, RrReport, RrSummary, RttStats,
    Summary, TestReport, Transfer,
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
    /// The instances' windows do not coincide: they began further apart than a tenth of the
    /// interval, so a merged interval would add up rates of different seconds.
    #[error(
        "the fleet's instances started {spread_ms:.0} ms apart, more than a tenth of the interval ({allowed_ms:.0} ms): their windows do not coincide, and their sum would overstate what the path carried at once; check the instances' clocks (chrony), or keep such runs marked (--keep-fleet-spread)"
    )]
    Spread {
        /// The latest start after the earliest, milliseconds.
        spread_ms: f64,
        /// A tenth of the interval, milliseconds.
        allowed_ms: f64,
    },
}

/// What [`merge_with`] does with instances that started too far apart to share a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SpreadPolicy {
    /// Refuse the merge ([`FleetError::Spread`]): a sum over misaligned windows is not the
    /// path's figure. Also refused: a start time that cannot be read.
    #[default]
    Refuse,
    /// Merge, and mark the report with a warning that names the spread (the instances' own
    /// reports are kept beside it by whoever saves them).
    Mark,
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
            // Each instance's probes measure its own path under the fleet's load; which of
            // them, or what mix, is the fleet's latency under load is not this merge's to
            // pick, and it would keep the first's alone.
            if t.under_load.is_some() {
                return Err(FleetError::NotMergeable("latency-under-load"));
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
    merge_with(parts, spec, SpreadPolicy::Refuse)
}

/// [`merge`], with a choice of what a wide start spread does ([`SpreadPolicy`]).
pub fn merge_with(
    parts: &[TestReport],
    spec: &TestSpec,
    spread: SpreadPolicy,
) -> Result<TestReport, FleetError> {
    let Some(first) = parts.first() else {
        return Err(FleetError::Mismatch("no reports".into()));
    };
    check_mergeable(parts, first)?;
    let mut out = first.clone();
    out.spec = spec.clone();
    out.started_at = parts
        .iter()
        .map(|p| p.started_at.clone())
        .min()
        .unwrap_or_default();
    out.client_addr = None;

    // Streams are numbered per instance from 0; the fleet numbers them on.
    let offsets = stream_offsets(parts);
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
    out.cpu = merge_cpu(parts);
    let starts = Starts::of(parts, spec);
    if spread == SpreadPolicy::Refuse
        && let Some(e) = starts.refusal()
    {
        return Err(e);
    }
    out.warnings = fleet_warnings(parts, &starts);
    Ok(out)
}

/// An error unless every part completed, none is UDP, and all are request/response or all
/// throughput (like `first`).
fn check_mergeable(parts: &[TestReport], first: &TestReport) -> Result<(), FleetError> {
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
    Ok(())
}

/// Where each part's stream numbers start in the fleet's: instances number theirs from 0.
fn stream_offsets(parts: &[TestReport]) -> Vec<u16> {
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
    offsets
}

/// The merged report's warnings: what was merged (each instance's headline and start offset),
/// the start spread's warning, then each instance's own warnings, named by instance.
fn fleet_warnings(parts: &[TestReport], starts: &Starts) -> Vec<String> {
    let mut warnings = vec![format!(
        "fleet of {} client instances started at one instant, merged: {}",
        parts.len(),
        parts
            .iter()
            .enumerate()
            .map(|(k, p)| format!(
                "#{} {}{}",
                k + 1,
                headline(p),
                starts.offset(k).unwrap_or_default()
            ))
            .collect::<Vec<_>>()
            .join("; ")
    )];
    warnings.extend(starts.warning());
    for (k, p) in parts.iter().enumerate() {
        warnings.extend(
            p.warnings
                .iter()
                .map(|w| format!("instance {}: {w}", k + 1)),
        );
    }
    warnings
}

/// CPU of the fleet's test: the sum of its instances' on each side. Each side's figure in a
/// report is the CPU time of that test's own threads (`RUSAGE_THREAD`), so the server's
/// threads for one instance's part are not in another's: one server process serving the
/// whole fleet spent the sum. Per gigabyte and per transaction come from the sums too (each
/// instance's bytes or transactions recovered from its own ratio); `None` where an instance
/// lacks the figure or its ratio cannot be inverted (no CPU at all).
fn merge_cpu(parts: &[TestReport]) -> CpuReport {
    let sum = |each: &dyn Fn(&CpuReport) -> Option<CpuUsage>| -> Option<CpuUsage> {
        parts.iter().try_fold(CpuUsage::default(), |mut acc, p| {
            acc += each(&p.cpu)?;
            Some(acc)
        })
    };
    // Σ cpu ÷ Σ (cpu_i ÷ ratio_i): the ratio of the sums, from each instance's ratio.
    let ratio = |cpu: &dyn Fn(&CpuReport) -> Option<CpuUsage>,
                 per: &dyn Fn(&CpuReport) -> Option<f64>|
     -> Option<f64> {
        let (mut total, mut amount) = (0.0, 0.0);
        for p in parts {
            let (c, r) = (cpu(&p.cpu)?.total_s(), per(&p.cpu)?);
            if !(r > 0.0 && c > 0.0) {
                return None;
            }
            total += c;
            amount += c / r;
        }
        (amount > 0.0).then(|| total / amount)
    };
    let client = |c: &CpuReport| Some(c.client);
    let server = |c: &CpuReport| c.server;
    CpuReport {
        client: sum(&client).unwrap_or_default(),
        server: sum(&server),
        client_s_per_gb: ratio(&client, &|c| c.client_s_per_gb),
        server_s_per_gb: ratio(&server, &|c| c.server_s_per_gb),
        client_us_per_transaction: ratio(&client, &|c| c.client_us_per_transaction),
        server_us_per_transaction: ratio(&server, &|c| c.server_us_per_transaction),
    }
}

/// When each instance's test began (its data started flowing), each on its own clock, and
/// the spread the merge is judged by.
struct Starts {
    /// Seconds after the earliest start, per instance; `None` for a time that cannot be read.
    after_first: Vec<Option<f64>>,
    /// A tenth of the reporting interval (of a second without intervals), seconds.
    allowed: f64,
}

impl Starts {
    fn of(parts: &[TestReport], spec: &TestSpec) -> Self {
        let times: Vec<_> = parts
            .iter()
            .map(|p| xbench::time::parse_rfc3339(&p.started_at))
            .collect();
        let first = times.iter().flatten().min().copied();
        let after_first = times
            .iter()
            .map(|t| {
                let d = t.as_ref()?.duration_since(first?).ok()?;
                Some(d.as_secs_f64())
            })
            .collect();
        let interval = spec.interval.unwrap_or(std::time::Duration::from_secs(1));
        Starts {
            after_first,
            allowed: interval.as_secs_f64() / 10.0,
        }
    }

    /// ", started +12 ms": instance `k`'s start after the earliest.
    fn offset(&self, k: usize) -> Option<String> {
        let s = (*self.after_first.get(k)?)?;
        Some(format!(", started +{:.0} ms", s * 1e3))
    }

    /// The latest start after the earliest, seconds; `None` when a start cannot be read.
    fn spread(&self) -> Option<f64> {
        self.after_first
            .iter()
            .try_fold(0.0, |m: f64, s| Some(m.max((*s)?)))
    }

    /// Why the merge is refused: the spread is past a tenth of the interval, or unknown.
    fn refusal(&self) -> Option<FleetError> {
        let Some(spread) = self.spread() else {
            let why = "an instance's start time cannot be read, so whether the windows \
                       coincide is not known";
            return Some(FleetError::Mismatch(why.into()));
        };
        (spread > self.allowed).then_some(FleetError::Spread {
            spread_ms: spread * 1e3,
            allowed_ms: self.allowed * 1e3,
        })
    }

    /// The run marked when its instances' windows do not coincide: a spread past a tenth of
    /// the interval puts each merged interval's parts that far apart in time, and the sum
    /// of rates measured over different seconds overstates what the path carried at once.
    fn warning(&self) -> Option<String> {
        if self.after_first.iter().any(Option::is_none) {
            return Some(
                "fleet: an instance's start time could not be read; whether the instances' \
                 windows coincide is not known"
                    .into(),
            );
        }
        let spread = self.spread().unwrap_or_default();
        (spread > self.allowed).then(|| {
            format!(
                "fleet: the instances started {:.0} ms apart, more than a tenth of the interval \
                 ({:.0} ms): their windows do not coincide, and the merged rate can overstate \
                 what the path carried at once; each instance's own report is kept beside it",
                spread * 1e3,
                self.allowed * 1e3
            )
        })
    }
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
        intervals: merge_rr_intervals(&rrs)?,
        summary: merge_rr_summary(&rrs)?,
        flows,
        setup: merge_setup(&rrs),
        held: merge_held(&rrs),
        opening,
    })
}

/// The fleet's totals: counts and rates summed, latency from the merged histogram, the
/// longest window.
fn merge_rr_summary(rrs: &[&RrReport]) -> Result<RrSummary, FleetError> {
    let whole = merged_histogram(rrs.iter().map(|r| &r.summary.histogram), "a test")?;
    let s: Vec<&RrSummary> = rrs.iter().map(|r| &r.summary).collect();
    Ok(RrSummary {
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
    })
}

/// The intervals every instance reported, by index: counts summed, latency merged.
fn merge_rr_intervals(rrs: &[&RrReport]) -> Result<Vec<RrInterval>, FleetError> {
    let mut intervals = Vec::new();
    for iv in &rrs[0].intervals {
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
    Ok(intervals)
}

/// The flows' setup summed over the instances, its rate over the longest setup.
fn merge_setup(rrs: &[&RrReport]) -> Option<ConnectionSetup> {
    let v = rrs.iter().map(|r| r.setup).collect::<Option<Vec<_>>>()?;
    let mut a = *v.first()?;
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
    Some(a)
}

/// --connections-only: each instance held its share of the flows and checked them at its
/// end; the fleet held the sum, with the openers of every instance.
fn merge_held(rrs: &[&RrReport]) -> Option<HeldFlows> {
    let v = rrs.iter().map(|r| r.held).collect::<Option<Vec<_>>>()?;
    let mut a = *v.first()?;
    for b in &v[1..] {
        a.held += b.held;
        a.open_at_end += b.open_at_end;
        a.closed += b.closed;
        a.reset += b.reset;
        a.unanswered += b.unanswered;
        a.openers = a.openers.saturating_add(b.openers);
    }
    Some(a)
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

    /// A completed report of instance `k`, started `after_ms` after 12:00:00 and with the
    /// CPU `(client, server)` seconds and their ratios to `gb` gigabytes moved.
    fn part(after_ms: u64, cpu: (f64, f64), gb: f64) -> TestReport {
        let mut c = xbench::ClientConfig::new("h");
        c.spec.interval = Some(std::time::Duration::from_secs(1));
        let at = xbench::time::parse_rfc3339("2026-11-29T12:00:00.000Z").unwrap()
            + std::time::Duration::from_millis(after_ms);
        let why = xbench::Error::Interrupted { during: "a test" };
        let mut r = xbench::client::nothing_measured(&c, at, &why);
        r.outcome = Outcome::Completed;
        r.warnings.clear();
        let usage = |s: f64| CpuUsage {
            user_s: s / 4.0,
            system_s: s * 3.0 / 4.0,
        };
        r.cpu = CpuReport {
            client: usage(cpu.0),
            server: Some(usage(cpu.1)),
            client_s_per_gb: Some(cpu.0 / gb),
            server_s_per_gb: Some(cpu.1 / gb),
            client_us_per_transaction: None,
            server_us_per_transaction: None,
        };
        r
    }

    /// Each report's CPU is its own test's threads: the fleet's is the sum on both sides,
    /// and per GB the sums' ratio (not the mean of the ratios).
    #[test]
    fn the_fleets_cpu_is_the_sum_of_its_instances_on_both_sides() {
        let parts = [part(0, (1.0, 2.0), 1.0), part(5, (3.0, 2.0), 3.0)];
        let m = merge(&parts, &parts[0].spec).unwrap();
        assert!((m.cpu.client.total_s() - 4.0).abs() < 1e-9, "{:?}", m.cpu);
        assert!((m.cpu.server.unwrap().total_s() - 4.0).abs() < 1e-9);
        // 4 s over 4 GB on each side.
        assert!((m.cpu.client_s_per_gb.unwrap() - 1.0).abs() < 1e-9);
        assert!((m.cpu.server_s_per_gb.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(m.cpu.client_us_per_transaction, None);
        // A server figure missing from one instance: none for the fleet.
        let mut older = part(5, (3.0, 2.0), 3.0);
        older.cpu.server = None;
        let m = merge(&[parts[0].clone(), older], &parts[0].spec).unwrap();
        assert_eq!(m.cpu.server, None);
        assert_eq!(m.cpu.server_s_per_gb, None);
    }

    /// Each instance's start is in the merged report; a spread past a tenth of the 1 s
    /// interval is refused, or with [`SpreadPolicy::Mark`] marks the run.
    #[test]
    fn starts_are_recorded_and_a_wide_spread_is_refused_or_marked() {
        let close = [part(0, (1.0, 1.0), 1.0), part(40, (1.0, 1.0), 1.0)];
        let m = merge(&close, &close[0].spec).unwrap();
        assert!(m.warnings[0].contains("#2 "), "{:?}", m.warnings);
        assert!(m.warnings[0].contains("started +40 ms"), "{:?}", m.warnings);
        assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
        let apart = [part(250, (1.0, 1.0), 1.0), part(0, (1.0, 1.0), 1.0)];
        match merge(&apart, &apart[0].spec) {
            Err(e @ FleetError::Spread { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("250 ms apart"), "{msg}");
                assert!(msg.contains("(100 ms)"), "{msg}");
            }
            other => panic!("a 250 ms spread merged: {other:?}"),
        }
        // 100 ms is the bound itself, and is kept.
        let edge = [part(0, (1.0, 1.0), 1.0), part(100, (1.0, 1.0), 1.0)];
        assert!(merge(&edge, &edge[0].spec).is_ok());
        let m = merge_with(&apart, &apart[0].spec, SpreadPolicy::Mark).unwrap();
        assert!(m.warnings[0].contains("#1 "), "{:?}", m.warnings);
        assert!(
            m.warnings[0].contains("started +250 ms"),
            "{:?}",
            m.warnings
        );
        assert!(
            m.warnings
                .iter()
                .any(|w| w.contains("started 250 ms apart") && w.contains("(100 ms)")),
            "{:?}",
            m.warnings
        );
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

    /// Latency under load is refused before anything runs: the merge would keep the first
    /// instance's probes as the fleet's.
    #[test]
    fn latency_under_load_is_not_split_over_a_fleet() {
        let mut spec = TestSpec::throughput();
        if let Workload::Throughput(t) = &mut spec.workload {
            t.streams = std::num::NonZeroU16::new(4).unwrap();
            t.under_load = Some(xbench::under_load::UnderLoadSpec::default());
        }
        let e = share_spec(&spec, 2, 0).unwrap_err();
        assert_eq!(e, FleetError::NotMergeable("latency-under-load"));
        assert!(e.to_string().contains("not run by fleets"), "{e}");
    }
}
