//! Network regression checks: does a candidate set of runs (this week's sweep, the new VPN
//! config) measure worse than a baseline set, per cell and path, with statistical confidence?
//!
//! Runs are grouped as a comparison table groups them: by path (label), cell and direction.
//! For each group and each [`Metric`] that applies to it, the baseline's runs and the
//! candidate's are compared with a one-sided test of "the candidate is worse than the baseline
//! by more than the allowance": Welch's t-test for throughput-like figures (bits and
//! transactions per second, a UDP cell's received rate), the Mann-Whitney U rank test for
//! latency percentiles, whose spread from run to run is skewed, and for UDP loss and jitter.
//! The allowance (`max_regression`, 5 % by default) moves the null hypothesis, so a cell fails
//! only when the data show, at the confidence asked for, a
//! loss larger than what was allowed: throughput below 95 % of the baseline's, or latency above
//! 105 % of it. The unit of replication is the run; samples inside one run are not independent.
//!
//! A group that cannot be decided — missing on one side, or too few runs for the test to ever
//! reach the confidence asked for — is [`Verdict::Insufficient`], never a silent pass, and
//! makes the whole check [`Outcome::Inconclusive`] unless something regressed.
//!
//! The same check from a program's own `cargo test`, on two saved sweeps:
//!
//! ```no_run
//! use std::path::PathBuf;
//! use xbench_report::compare::{Criteria, compare};
//!
//! let baseline = xbench_report::load(&[PathBuf::from("perf/baseline")])?.runs;
//! let candidate = xbench_report::load(&[PathBuf::from("target/perf-today")])?.runs;
//! let check = compare(&baseline, &candidate, &Criteria::default())?;
//! assert!(check.passed(), "{check}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This module decides and formats; it reads no files (see `load`) and prints nothing.

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};
use std::str::FromStr;

use serde::Serialize;
use xbench::config::StreamDirection;

use crate::cell::{CellKey, Kind};
use crate::hypothesis::{mann_whitney_less, mann_whitney_min_p, welch_less};
use crate::run::{Measure, Run};
use crate::table::labels_in_order;
use crate::units::number;

/// A figure a regression check can compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Metric {
    /// Receiver throughput of a throughput cell, bits per second (higher is better).
    Throughput,
    /// Transactions per second of a request/response cell (higher is better).
    Tps,
    /// Median latency of a request/response cell, µs (lower is better).
    P50,
    /// 90th-percentile latency, µs.
    P90,
    /// 99th-percentile latency, µs.
    P99,
    /// 99.9th-percentile latency, µs.
    #[serde(rename = "p99.9")]
    P99_9,
    /// Mean latency, µs.
    Mean,
    /// Datagrams lost in a UDP cell, percent of those sent (lower is better). The allowance is
    /// relative, so a baseline that lost nothing allows no loss.
    Loss,
    /// RFC 3550 jitter of a UDP cell, ms (lower is better).
    Jitter,
    /// What the load added to latency in a latency-under-load cell: the UDP probes' loaded
    /// minus idle median, µs (lower is better). The allowance is relative to the baseline's
    /// increase, and at least 100 µs ([`Metric::least_allowance`]): a path whose queue added
    /// nothing allows a scheduler's noise, not a queue.
    Increase,
    /// Responsiveness under load of a latency-under-load cell, round trips per minute (higher
    /// is better).
    Rpm,
}

/// Which significance test a metric is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestKind {
    /// Welch's t-test on the runs' values (throughput-like figures).
    Welch,
    /// Mann-Whitney U on the runs' values (latencies).
    MannWhitney,
}

impl Metric {
    /// Every metric, in the order tables list them.
    pub const ALL: [Metric; 11] = [
        Metric::Throughput,
        Metric::Tps,
        Metric::P50,
        Metric::P90,
        Metric::P99,
        Metric::P99_9,
        Metric::Mean,
        Metric::Loss,
        Metric::Jitter,
        Metric::Increase,
        Metric::Rpm,
    ];

    /// Its name on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Throughput => "throughput",
            Metric::Tps => "tps",
            Metric::P50 => "p50",
            Metric::P90 => "p90",
            Metric::P99 => "p99",
            Metric::P99_9 => "p99.9",
            Metric::Mean => "mean",
            Metric::Loss => "loss",
            Metric::Jitter => "jitter",
            Metric::Increase => "increase",
            Metric::Rpm => "rpm",
        }
    }

    /// The least allowance a regression check gives, in the metric's unit, however small the
    /// baseline: the latency the load adds can be near zero (or below, as noise), where a
    /// share of it would allow nothing; 100 µs is under what one scheduler slice adds.
    /// Nothing for the others, whose baselines are never near zero when they mean anything.
    pub fn least_allowance(self) -> f64 {
        match self {
            Metric::Increase => 100.0,
            _ => 0.0,
        }
    }

    /// Whether a larger value is better (rates) or worse (latencies).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Throughput | Metric::Tps | Metric::Rpm)
    }

    /// The test that decides it.
    pub fn test(self) -> TestKind {
        if self.higher_is_better() {
            TestKind::Welch
        } else {
            TestKind::MannWhitney
        }
    }

    /// Whether cells of this kind carry the metric. Throughput is the receiver's rate, also
    /// of a UDP cell (what got through at the offered rate) and of an under-load cell's bulk
    /// streams (all directions summed: the load). An under-load cell's percentiles and loss
    /// are its UDP probes' in the loaded phase.
    pub fn applies_to(self, kind: Kind) -> bool {
        match self {
            Metric::Throughput => matches!(kind, Kind::Throughput | Kind::Udp | Kind::UnderLoad),
            Metric::Loss => matches!(kind, Kind::Udp | Kind::UnderLoad),
            Metric::Jitter => kind == Kind::Udp,
            Metric::Increase | Metric::Rpm => kind == Kind::UnderLoad,
            Metric::P50 | Metric::P90 | Metric::P99 => kind.is_rr() || kind == Kind::UnderLoad,
            Metric::Tps | Metric::P99_9 | Metric::Mean => kind.is_rr(),
        }
    }

    /// The run's value, for a throughput run the direction's.
    fn value(self, run: &Run, direction: Option<StreamDirection>) -> Option<f64> {
        match (&run.measure, self) {
            (Measure::Throughput(dirs), Metric::Throughput) => dirs
                .iter()
                .find(|d| Some(d.direction) == direction)
                .map(|d| d.bits_per_second),
            (Measure::Udp(dirs), m) => {
                let d = dirs.iter().find(|d| Some(d.direction) == direction)?;
                match m {
                    Metric::Throughput => Some(d.received_bps),
                    Metric::Loss => Some(d.lost_pct),
                    Metric::Jitter => Some(d.jitter_ms),
                    _ => None,
                }
            }
            (Measure::UnderLoad(u), m) => {
                let loaded = u.probes.udp.loaded.latency;
                match m {
                    Metric::Throughput => Some(u.bulk_bits_per_second()),
                    Metric::P50 => u.loaded_p50_us(),
                    Metric::P90 => loaded.map(|l| l.p90_us),
                    Metric::P99 => u.loaded_p99_us(),
                    Metric::Loss => Some(u.loaded_lost_percent()),
                    Metric::Increase => u.increase_p50_us(),
                    Metric::Rpm => u.rpm(),
                    Metric::Tps | Metric::P99_9 | Metric::Mean | Metric::Jitter => None,
                }
            }
            (Measure::Rr(r), m) => match m {
                Metric::Throughput
                | Metric::Loss
                | Metric::Jitter
                | Metric::Increase
                | Metric::Rpm => None,
                Metric::Tps => Some(r.transactions_per_second),
                Metric::P50 => Some(r.p50_us),
                Metric::P90 => Some(r.p90_us),
                Metric::P99 => Some(r.p99_us),
                Metric::P99_9 => Some(r.p99_9_us),
                Metric::Mean => Some(r.mean_us),
            },
            _ => None,
        }
    }

    fn format(self, v: f64) -> String {
        match self {
            Metric::Throughput => xbench::units::format_bits_per_second(v),
            Metric::Tps => format!("{}/s", number(v)),
            Metric::Loss => crate::units::percent(v),
            Metric::Jitter => xbench::units::format_micros(v * 1e3),
            Metric::Increase => xbench::units::format_signed_micros(v),
            Metric::Rpm => format!("{} RPM", number(v)),
            _ => xbench::units::format_micros(v),
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metric name that is not one of [`Metric::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown metric `{0}`; use throughput, tps, p50, p90, p99, p99.9 or mean, loss or jitter \
     (UDP), or increase or rpm (--under-load)"
)]
pub struct UnknownMetric(pub String);

impl FromStr for Metric {
    type Err = UnknownMetric;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Metric::ALL
            .into_iter()
            .find(|m| m.name() == lower)
            .or(match lower.as_str() {
                "bandwidth" | "rate" => Some(Metric::Throughput),
                "transactions" => Some(Metric::Tps),
                "p999" => Some(Metric::P99_9),
                "median" => Some(Metric::P50),
                _ => None,
            })
            .ok_or_else(|| UnknownMetric(s.to_owned()))
    }
}

/// What counts as a regression.
#[derive(Debug, Clone, PartialEq)]
pub struct Criteria {
    /// Metrics to check; each is checked in the cells that carry it, and one that no cell
    /// carries is named in a note. Empty (the default): throughput in throughput cells, p99
    /// latency in request/response cells, the receiver's rate and loss in UDP cells, and in
    /// latency-under-load cells the load's rate, the loaded p99 and loss, and what the load
    /// added at the median.
    pub metrics: Vec<Metric>,
    /// Loss allowed before a cell counts as regressed, as a fraction of the baseline (0.05 is
    /// 5 %): throughput may fall to 95 % of the baseline, latency may rise to 105 %. In [0, 1).
    pub max_regression: f64,
    /// Confidence the test must reach to call a regression (0.95 is 95 %). In (0, 1).
    pub confidence: f64,
}

impl Default for Criteria {
    fn default() -> Self {
        Criteria {
            metrics: Vec::new(),
            max_regression: 0.05,
            confidence: 0.95,
        }
    }
}

/// Criteria that cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CriteriaError {
    /// `max_regression` outside [0, 1).
    #[error("the allowed regression must be at least 0 % and below 100 % (got {0})")]
    MaxRegression(f64),
    /// `confidence` outside (0, 1).
    #[error("the confidence must be above 0 % and below 100 % (got {0})")]
    Confidence(f64),
}

/// The decision for one (path, cell, direction, metric).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The candidate is worse by more than the allowance, at the confidence asked for.
    Regressed,
    /// The data do not show a regression beyond the allowance.
    NoRegression,
    /// The candidate is better, at the confidence asked for.
    Improved,
    /// Cannot be decided.
    Insufficient {
        /// Why, in words a user can act on.
        reason: String,
    },
}

impl Verdict {
    fn short(&self) -> &str {
        match self {
            Verdict::Regressed => "REGRESSED",
            Verdict::NoRegression => "ok",
            Verdict::Improved => "improved",
            Verdict::Insufficient { reason } => reason,
        }
    }
}

/// One side of a comparison row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The path (label) whose runs these are.
    pub label: String,
    /// The runs' values of the metric, in base units (bits/s, transactions/s, µs).
    pub values: Vec<f64>,
}

impl Side {
    /// Mean (Welch) or median (Mann-Whitney): the centre the test compares.
    fn centre(&self, test: TestKind) -> Option<f64> {
        if self.values.is_empty() {
            return None;
        }
        Some(match test {
            TestKind::Welch => self.values.iter().sum::<f64>() / self.values.len() as f64,
            TestKind::MannWhitney => median(&self.values),
        })
    }
}

/// One (path, cell, direction, metric) of the check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The cell.
    pub cell: CellKey,
    /// The cell as tables show it, with the direction for throughput (`P=4 client→server`).
    pub cell_name: String,
    /// For throughput cells, which way the data flowed.
    pub direction: Option<StreamDirection>,
    /// What was compared.
    pub metric: Metric,
    /// How.
    pub test: TestKind,
    /// The baseline's runs.
    pub baseline: Side,
    /// The candidate's runs.
    pub candidate: Side,
    /// Candidate centre ÷ baseline centre − 1 (mean for Welch, median for Mann-Whitney):
    /// −0.3 is 30 % lower. `None` when either side is missing.
    pub change: Option<f64>,
    /// One-sided p-value of "worse by more than the allowance"; `None` when not tested.
    pub p_regression: Option<f64>,
    /// The decision.
    pub verdict: Verdict,
}

/// How the check came out as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every row decided, none regressed.
    Passed,
    /// At least one row regressed.
    Regressed,
    /// Nothing regressed, but some rows (or all) could not be decided.
    Inconclusive,
}

/// The whole check: one row per path, cell, direction and metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegressionCheck {
    /// What was asked.
    #[serde(skip)]
    pub criteria: Criteria,
    /// Every row, grouped by path, then cells in table order.
    pub rows: Vec<Row>,
    /// Things a reader should know (paths paired by position, metrics no cell carries).
    pub notes: Vec<String>,
}

/// Compares `candidate` runs with `baseline` runs under `criteria`.
///
/// Paths are paired by label; when each side holds exactly one label and they differ (a
/// sweep saved as `vpn-old` against one saved as `vpn-new`), those two are paired, and a note
/// says so.
///
/// ```
/// use std::path::PathBuf;
/// use xbench::config::{StreamDirection, TestSpec};
/// use xbench_report::cell::CellKey;
/// use xbench_report::compare::{Criteria, Outcome, Verdict, compare};
/// use xbench_report::run::{DirectionResult, Measure, Run};
///
/// // Runs of one cell as `load` would return them: 940 Mbit/s before, 300 after a new cap.
/// let run = |mbps: f64| Run {
///     path: PathBuf::new(),
///     label: "db-path".into(),
///     key: CellKey::of_spec(&TestSpec::throughput()),
///     started_at: String::new(),
///     length_s: Some(10.0),
///     facts: Default::default(),
///     measure: Measure::Throughput(vec![DirectionResult {
///         direction: StreamDirection::ClientToServer,
///         bits_per_second: mbps * 1e6,
///         retransmits: 0,
///         rtt_mean_us: None,
///         window_ceiling_bps: None,
///         verdict: None,
///         timeline: vec![],
///     }]),
/// };
/// let baseline = [run(941.0), run(938.0), run(944.0)];
/// let candidate = [run(298.0), run(301.0), run(299.0)];
///
/// let check = compare(&baseline, &candidate, &Criteria::default())?;
/// assert_eq!(check.outcome(), Outcome::Regressed);
/// let row = check.regressions().next().expect("one cell regressed");
/// assert_eq!(row.name(), "path `db-path`, cell P=1 client→server, throughput");
/// assert!(row.p_regression.unwrap() < 0.001);
///
/// // The same candidate against itself: decided, and no regression.
/// let check = compare(&candidate, &candidate, &Criteria::default())?;
/// assert!(check.passed(), "{check}");
/// assert_eq!(check.rows[0].verdict, Verdict::NoRegression);
/// # Ok::<(), xbench_report::compare::CriteriaError>(())
/// ```
pub fn compare(
    baseline: &[Run],
    candidate: &[Run],
    criteria: &Criteria,
) -> Result<RegressionCheck, CriteriaError> {
    if !(0.0..1.0).contains(&criteria.max_regression) {
        return Err(CriteriaError::MaxRegression(criteria.max_regression));
    }
    if !(criteria.confidence > 0.0 && criteria.confidence < 1.0) {
        return Err(CriteriaError::Confidence(criteria.confidence));
    }
    let mut notes = Vec::new();
    let pairs = label_pairs(baseline, candidate, &mut notes);
    let explicit = !criteria.metrics.is_empty();
    let metrics = metrics_of(criteria);
    let mut rows = Vec::new();
    for (b_label, c_label) in &pairs {
        let of = |runs: &[Run], label: &str| -> Vec<Run> {
            runs.iter().filter(|r| r.label == label).cloned().collect()
        };
        let (b_runs, c_runs) = (of(baseline, b_label), of(candidate, c_label));
        notes.extend(crate::paths::compare_notes(
            b_label, &b_runs, c_label, &c_runs,
        ));
        rows.extend(cell_rows(
            (b_label, &b_runs),
            (c_label, &c_runs),
            &metrics,
            criteria,
        ));
    }
    if explicit {
        notes.extend(uncarried(&metrics, &rows));
    }
    Ok(RegressionCheck {
        criteria: criteria.clone(),
        rows,
        notes,
    })
}

/// The paths compared, baseline label with candidate label: each label with itself, or the
/// two when each side holds one path under different labels (with a note saying so).
fn label_pairs(
    baseline: &[Run],
    candidate: &[Run],
    notes: &mut Vec<String>,
) -> Vec<(String, String)> {
    let (bl, cl) = (labels_in_order(baseline), labels_in_order(candidate));
    match (bl.as_slice(), cl.as_slice()) {
        ([b], [c]) if b != c => {
            notes.push(format!(
                "each side holds one path: baseline `{b}` is compared with candidate `{c}`"
            ));
            vec![(b.clone(), c.clone())]
        }
        _ => {
            let mut all = bl.clone();
            all.extend(cl.iter().filter(|c| !bl.contains(c)).cloned());
            all.into_iter().map(|l| (l.clone(), l)).collect()
        }
    }
}

/// The metrics compared, sorted and once each: the criteria's, or by default throughput,
/// p99, loss and the latency increase under load.
fn metrics_of(criteria: &Criteria) -> Vec<Metric> {
    let explicit = !criteria.metrics.is_empty();
    let mut metrics = if explicit {
        criteria.metrics.clone()
    } else {
        vec![
            Metric::Throughput,
            Metric::P99,
            Metric::Loss,
            Metric::Increase,
        ]
    };
    metrics.sort();
    metrics.dedup();
    metrics
}

/// One row per cell (and direction) either path measured and metric that applies to it:
/// the baseline's runs against the candidate's.
fn cell_rows(
    (b_label, b_runs): (&str, &[Run]),
    (c_label, c_runs): (&str, &[Run]),
    metrics: &[Metric],
    criteria: &Criteria,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let groups: BTreeSet<(CellKey, Option<StreamDirection>)> =
        b_runs.iter().chain(c_runs).flat_map(groups_of).collect();
    for (cell, direction) in groups {
        for &metric in metrics {
            if !metric.applies_to(cell.kind) {
                continue;
            }
            let side = |runs: &[Run], label: &str| Side {
                label: label.to_owned(),
                values: runs
                    .iter()
                    .filter(|r| r.key == cell)
                    .filter_map(|r| metric.value(r, direction))
                    .collect(),
            };
            rows.push(decide(
                &cell,
                direction,
                metric,
                side(b_runs, b_label),
                side(c_runs, c_label),
                criteria,
            ));
        }
    }
    rows
}

/// A note for each metric asked for that no row carries, saying which runs it applies to.
fn uncarried(metrics: &[Metric], rows: &[Row]) -> Vec<String> {
    let mut notes = Vec::new();
    for &metric in metrics {
        if !rows.iter().any(|r| r.metric == metric) {
            notes.push(format!(
                "{metric}: no cell of the runs carries it ({})",
                match metric {
                    Metric::Throughput => "it applies to throughput, UDP and under-load runs",
                    Metric::Loss => "it applies to UDP and under-load runs",
                    Metric::Jitter => "it applies to UDP runs",
                    Metric::Increase | Metric::Rpm => "it applies to --under-load runs",
                    Metric::P50 | Metric::P90 | Metric::P99 => {
                        "it applies to request/response and under-load runs"
                    }
                    _ => "it applies to request/response runs",
                }
            ));
        }
    }
    notes
}

impl RegressionCheck {
    /// The check as a whole.
    pub fn outcome(&self) -> Outcome {
        if self.rows.iter().any(|r| r.verdict == Verdict::Regressed) {
            Outcome::Regressed
        } else if self.rows.is_empty()
            || self
                .rows
                .iter()
                .any(|r| matches!(r.verdict, Verdict::Insufficient { .. }))
        {
            Outcome::Inconclusive
        } else {
            Outcome::Passed
        }
    }

    /// Every row decided and none regressed.
    pub fn passed(&self) -> bool {
        self.outcome() == Outcome::Passed
    }

    /// The rows that regressed.
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.verdict == Verdict::Regressed)
    }

    /// The rows that could not be decided.
    pub fn undecided(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| matches!(r.verdict, Verdict::Insufficient { .. }))
    }

    /// The verdict table, one line per row, then what regressed and what could not be decided,
    /// each named by path, cell and metric.
    pub fn to_text(&self) -> String {
        let c = &self.criteria;
        let mut out = format!(
            "Regression check, candidate against baseline: one-sided tests at {} confidence, \
             allowed loss {} (Welch's t for rates, Mann-Whitney U for latencies; runs as samples)\n",
            percent(c.confidence),
            percent(c.max_regression),
        );
        let body: Vec<[String; 8]> = self.rows.iter().map(Row::cells).collect();
        out.push_str(&aligned(&TEXT_HEAD, &body));
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        self.write_outcome(&mut out);
        out
    }

    /// The text's end: how the check came out, what regressed and what could not be decided.
    /// Apart from `to_text` because it reads the outcome, not the rows' figures.
    fn write_outcome(&self, out: &mut String) {
        let regressed: Vec<&Row> = self.regressions().collect();
        let undecided: Vec<&Row> = self.undecided().collect();
        match self.outcome() {
            Outcome::Passed => {
                let _ = writeln!(out, "\nno regression: {} rows checked", self.rows.len());
            }
            Outcome::Regressed => {
                let _ = writeln!(
                    out,
                    "\nREGRESSION in {} of {} rows:",
                    regressed.len(),
                    self.rows.len()
                );
                for r in regressed {
                    let _ = writeln!(out, "  - {}", r.describe());
                }
            }
            Outcome::Inconclusive if self.rows.is_empty() => {
                let _ = writeln!(out, "\nINCONCLUSIVE: nothing to compare");
            }
            Outcome::Inconclusive => {
                let _ = writeln!(
                    out,
                    "\nINCONCLUSIVE: no regression shown, but {} of {} rows could not be decided:",
                    undecided.len(),
                    self.rows.len()
                );
            }
        }
        if self.outcome() != Outcome::Inconclusive && !undecided.is_empty() {
            let _ = writeln!(out, "not decided ({}):", undecided.len());
        }
        for r in undecided {
            let _ = writeln!(out, "  - {}", r.describe());
        }
    }
}

impl fmt::Display for RegressionCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl Row {
    /// Which row this is: path, cell and metric (`path `vpn`, cell P=4 client→server,
    /// throughput`).
    pub fn name(&self) -> String {
        let path = if self.baseline.label == self.candidate.label {
            format!("path `{}`", self.baseline.label)
        } else {
            format!(
                "path `{}` → `{}`",
                self.baseline.label, self.candidate.label
            )
        };
        format!("{path}, cell {}, {}", self.cell_name, self.metric)
    }

    /// The row in one line: its name, the figures and the verdict.
    pub fn describe(&self) -> String {
        let mut s = self.name();
        if let (Some(b), Some(c)) = (
            self.baseline.centre(self.test),
            self.candidate.centre(self.test),
        ) {
            let _ = write!(s, ": {} → {}", self.metric.format(b), self.metric.format(c));
            if let Some(ch) = self.change {
                let _ = write!(s, " ({:+.1} %", ch * 100.0);
                if let Some(p) = self.p_regression {
                    let p = format_p(p);
                    let eq = if p.starts_with('<') { "" } else { "= " };
                    let _ = write!(s, ", p {eq}{p}");
                }
                s.push(')');
            }
        }
        if let Verdict::Insufficient { reason } = &self.verdict {
            let _ = write!(s, ": {reason}");
        }
        s
    }

    /// The row as the verdict table's cells, under [`TEXT_HEAD`]: each side's centre, the
    /// change and p as figures, the verdict in a word. Apart from `to_text` because it knows
    /// one row, not the table.
    fn cells(&self) -> [String; 8] {
        let side = |s: &Side| match s.centre(self.test) {
            Some(v) => format!(
                "{} {} (n={})",
                if self.test == TestKind::Welch {
                    "mean"
                } else {
                    "median"
                },
                self.metric.format(v),
                s.values.len()
            ),
            None => "none".to_owned(),
        };
        let path = if self.baseline.label == self.candidate.label {
            self.baseline.label.clone()
        } else {
            format!("{} → {}", self.baseline.label, self.candidate.label)
        };
        [
            path,
            self.cell_name.clone(),
            self.metric.name().to_owned(),
            side(&self.baseline),
            side(&self.candidate),
            self.change
                .map_or_else(String::new, |ch| format!("{:+.1} %", ch * 100.0)),
            self.p_regression.map_or_else(String::new, format_p),
            self.verdict.short().to_owned(),
        ]
    }
}

/// The (cell, direction) groups a run belongs to: one per direction of a throughput run.
fn groups_of(run: &Run) -> Vec<(CellKey, Option<StreamDirection>)> {
    match &run.measure {
        Measure::Throughput(dirs) => dirs
            .iter()
            .map(|d| (run.key.clone(), Some(d.direction)))
            .collect(),
        Measure::Udp(dirs) => dirs
            .iter()
            .map(|d| (run.key.clone(), Some(d.direction)))
            .collect(),
        // One group: the probes' figures are the run's, and the load is all directions'.
        Measure::Rr(_) | Measure::UnderLoad(_) => vec![(run.key.clone(), None)],
    }
}

fn decide(
    cell: &CellKey,
    direction: Option<StreamDirection>,
    metric: Metric,
    baseline: Side,
    candidate: Side,
    criteria: &Criteria,
) -> Row {
    let test = metric.test();
    let mut cell_name = cell.describe();
    if let Some(d) = direction {
        cell_name.push(' ');
        cell_name.push_str(d.label());
    }
    let change = match (baseline.centre(test), candidate.centre(test)) {
        (Some(b), Some(c)) if b != 0.0 => Some(c / b - 1.0),
        _ => None,
    };
    let (p_regression, verdict) = judge(metric, &baseline.values, &candidate.values, criteria);
    Row {
        cell: cell.clone(),
        cell_name,
        direction,
        metric,
        test,
        baseline,
        candidate,
        change,
        p_regression,
        verdict,
    }
}

/// The p-value of "worse beyond the allowance" and the verdict.
fn judge(metric: Metric, b: &[f64], c: &[f64], criteria: &Criteria) -> (Option<f64>, Verdict) {
    let insufficient = |reason: String| (None, Verdict::Insufficient { reason });
    match (b.len(), c.len()) {
        (0, 0) => return insufficient("no runs on either side".into()),
        (0, _) => return insufficient("missing in the baseline".into()),
        (_, 0) => return insufficient("missing in the candidate".into()),
        _ => {}
    }
    // A hair of slack so that a p-value of exactly 1 − confidence (1/20 for three runs against
    // three in a rank test at 95 %) is not lost to rounding.
    let alpha = 1.0 - criteria.confidence + 1e-12;
    let test = metric.test();
    match test {
        TestKind::Welch if b.len() < 2 || c.len() < 2 => {
            return insufficient(format!(
                "too few runs: {} baseline, {} candidate (Welch's t needs 2 or more on each \
                 side; more runs narrow what can be shown)",
                b.len(),
                c.len()
            ));
        }
        TestKind::MannWhitney if mann_whitney_min_p(b.len(), c.len()) > alpha => {
            let need = (1..)
                .find(|&n| mann_whitney_min_p(n, n) <= alpha)
                .unwrap_or(usize::MAX);
            return insufficient(format!(
                "too few runs: {} baseline, {} candidate (a rank test cannot reach {} \
                 confidence with fewer than {need} on each side)",
                b.len(),
                c.len(),
                percent(criteria.confidence)
            ));
        }
        _ => {}
    }
    let less = |x: &[f64], y: &[f64]| -> Option<f64> {
        match test {
            TestKind::Welch => welch_less(x, y).map(|w| w.p_less),
            TestKind::MannWhitney => mann_whitney_less(x, y).map(|m| m.p_less),
        }
    };
    // The baseline moved by the allowance, toward worse: a share of each value's size (so a
    // negative value, an increase that came out below zero, moves the right way too), at
    // least the metric's own floor.
    let m = criteria.max_regression;
    let floor = metric.least_allowance();
    let worse_by = |v: &[f64], sign: f64| -> Vec<f64> {
        v.iter()
            .map(|x| x + sign * (m * x.abs()).max(floor))
            .collect()
    };
    // Worse beyond the allowance, and better at all, each as one one-sided test.
    let (p_worse, p_better) = if metric.higher_is_better() {
        (less(c, &worse_by(b, -1.0)), less(b, c))
    } else {
        (less(&worse_by(b, 1.0), c), less(c, b))
    };
    let Some(p_worse) = p_worse else {
        return insufficient("a value is not a finite number".into());
    };
    let verdict = if p_worse <= alpha {
        Verdict::Regressed
    } else if p_better.is_some_and(|p| p <= alpha) {
        Verdict::Improved
    } else {
        Verdict::NoRegression
    };
    (Some(p_worse), verdict)
}

/// The median of `v`, not empty; the mean of the middle two for an even count.
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The verdict table's column headings; [`Row::cells`] fills one line of them.
const TEXT_HEAD: [&str; 8] = [
    "path",
    "cell",
    "metric",
    "baseline",
    "candidate",
    "change",
    "p",
    "verdict",
];

/// `head` and `body` as aligned columns, one line each, figures (change and p) right-aligned
/// and words left-aligned. Apart from `to_text` because it knows the layout, not the check.
fn aligned(head: &[&str; 8], body: &[[String; 8]]) -> String {
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            body.iter()
                .map(|r| r[i].chars().count())
                .chain([head[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = " ".repeat(widths[i].saturating_sub(cell.chars().count()));
            // Figures right-aligned, words left-aligned.
            if (5..=6).contains(&i) {
                s.push_str(&pad);
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&pad);
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = String::new();
    let _ = writeln!(out, "{}", line(head.to_vec()));
    for r in body {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
    out
}

fn percent(f: f64) -> String {
    let p = f * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0} %")
    } else {
        format!("{p} %")
    }
}

fn format_p(p: f64) -> String {
    if p < 0.0001 {
        "< 0.0001".to_owned()
    } else {
        format!("{p:.4}")
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use xbench::config::TestSpec;

    use super::*;
    use crate::run::RrResult;

    fn tp(label: &str, streams: u16, mbps: f64) -> Run {
        crate::run::fixtures::tcp(label, streams, mbps, 0, None)
    }

    fn rr(label: &str, p99: f64) -> Run {
        Run {
            path: PathBuf::new(),
            label: label.into(),
            key: CellKey::of_spec(&TestSpec::request_response()),
            started_at: String::new(),
            length_s: None,
            facts: Default::default(),
            measure: Measure::Rr(RrResult {
                transactions_per_second: 1e6 / p99,
                p50_us: p99 / 2.0,
                p90_us: p99 * 0.8,
                p99_us: p99,
                p99_9_us: p99 * 1.5,
                mean_us: p99 / 1.8,
                min_us: p99 / 4.0,
                max_us: p99 * 2.0,
                stddev_us: p99 / 3.0,
                retransmits: 0,
                histogram: String::new(),
            }),
        }
    }

    fn runs(f: impl Fn(f64) -> Run, values: &[f64]) -> Vec<Run> {
        values.iter().map(|&v| f(v)).collect()
    }

    fn only_row(check: &RegressionCheck) -> &Row {
        assert_eq!(check.rows.len(), 1, "{check}");
        &check.rows[0]
    }

    #[test]
    fn a_capped_path_regresses_and_is_named() {
        let base = runs(|v| tp("lab", 4, v), &[941.0, 938.0, 944.0]);
        let cand = runs(|v| tp("lab", 4, v), &[298.0, 301.0, 299.0]);
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        let row = only_row(&check);
        assert_eq!(row.verdict, Verdict::Regressed);
        assert_eq!(row.test, TestKind::Welch);
        assert!((row.change.unwrap() + 0.6817).abs() < 1e-3);
        assert_eq!(check.outcome(), Outcome::Regressed);
        let text = check.to_text();
        assert!(text.contains("REGRESSION in 1 of 1 rows"), "{text}");
        assert!(
            text.contains("path `lab`, cell P=4 client→server, throughput"),
            "{text}"
        );
    }

    #[test]
    fn noise_within_the_allowance_passes() {
        // 3 % lower on average, noisy: not shown to be beyond a 5 % allowance.
        let base = runs(|v| tp("lab", 1, v), &[940.0, 960.0, 950.0, 955.0]);
        let cand = runs(|v| tp("lab", 1, v), &[915.0, 930.0, 925.0, 918.0]);
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        assert_eq!(only_row(&check).verdict, Verdict::NoRegression);
        assert!(check.passed(), "{check}");
        // With no allowance the same data are a regression: the 3 % is real.
        let strict = Criteria {
            max_regression: 0.0,
            ..Criteria::default()
        };
        let check = compare(&base, &cand, &strict).unwrap();
        assert_eq!(only_row(&check).verdict, Verdict::Regressed);
    }

    #[test]
    fn the_allowance_moves_the_null_hypothesis() {
        // Exactly 10 % lower with a little spread: a regression at 5 %, not at 15 %.
        let base = runs(|v| tp("p", 1, v), &[1000.0, 1001.0, 999.0]);
        let cand = runs(|v| tp("p", 1, v), &[900.0, 901.0, 899.0]);
        let at = |m: f64| {
            let c = Criteria {
                max_regression: m,
                ..Criteria::default()
            };
            only_row(&compare(&base, &cand, &c).unwrap())
                .verdict
                .clone()
        };
        assert_eq!(at(0.05), Verdict::Regressed);
        assert_eq!(at(0.15), Verdict::NoRegression);
    }

    #[test]
    fn better_is_called_improved() {
        let base = runs(|v| tp("p", 1, v), &[500.0, 510.0, 505.0]);
        let cand = runs(|v| tp("p", 1, v), &[900.0, 910.0, 905.0]);
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        assert_eq!(only_row(&check).verdict, Verdict::Improved);
        assert!(check.passed());
    }

    #[test]
    fn latency_uses_the_rank_test_and_higher_is_worse() {
        let base = runs(|v| rr("db", v), &[40.0, 42.0, 41.0, 43.0]);
        let cand = runs(|v| rr("db", v), &[60.0, 58.0, 61.0, 59.0]);
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        let row = only_row(&check);
        assert_eq!(row.metric, Metric::P99);
        assert_eq!(row.test, TestKind::MannWhitney);
        assert_eq!(row.verdict, Verdict::Regressed);
        // Every candidate above every (allowance-scaled) baseline: p = 1 / C(8, 4).
        assert!((row.p_regression.unwrap() - 1.0 / 70.0).abs() < 1e-12);
        // Lower latency is an improvement, not a regression.
        let check = compare(&cand, &base, &Criteria::default()).unwrap();
        assert_eq!(only_row(&check).verdict, Verdict::Improved);
    }

    #[test]
    fn too_few_runs_are_said_plainly_and_do_not_pass() {
        let base = runs(|v| tp("p", 1, v), &[940.0]);
        let cand = runs(|v| tp("p", 1, v), &[300.0, 310.0]);
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        let row = only_row(&check);
        let Verdict::Insufficient { reason } = &row.verdict else {
            panic!("{check}");
        };
        assert!(reason.contains("1 baseline, 2 candidate"), "{reason}");
        assert_eq!(check.outcome(), Outcome::Inconclusive);
        assert!(!check.passed());
        assert!(check.to_text().contains("INCONCLUSIVE"));

        // Two latency runs a side can never reach 95 % in a rank test (p ≥ 1/6).
        let base = runs(|v| rr("db", v), &[40.0, 41.0]);
        let cand = runs(|v| rr("db", v), &[90.0, 91.0]);
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        let Verdict::Insufficient { reason } = &only_row(&check).verdict else {
            panic!("{check}");
        };
        assert!(reason.contains("fewer than 3 on each side"), "{reason}");
    }

    #[test]
    fn missing_cells_and_paths_are_named() {
        let mut base = runs(|v| tp("lab", 1, v), &[940.0, 950.0]);
        base.extend(runs(|v| tp("lab", 4, v), &[940.0, 950.0]));
        base.extend(runs(|v| tp("other", 1, v), &[100.0, 110.0]));
        let mut cand = runs(|v| tp("lab", 1, v), &[945.0, 948.0]);
        cand.extend(runs(|v| tp("lab", 8, v), &[940.0, 950.0]));
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        let verdict = |label: &str, p: u16| {
            check
                .rows
                .iter()
                .find(|r| r.baseline.label == label && r.cell.streams == Some(p))
                .map(|r| r.verdict.clone())
                .unwrap()
        };
        assert_eq!(verdict("lab", 1), Verdict::NoRegression);
        let missing = |v: Verdict, side: &str| match v {
            Verdict::Insufficient { reason } => assert_eq!(reason, side),
            other => panic!("{other:?}"),
        };
        missing(verdict("lab", 4), "missing in the candidate");
        missing(verdict("lab", 8), "missing in the baseline");
        missing(verdict("other", 1), "missing in the candidate");
        assert_eq!(check.outcome(), Outcome::Inconclusive);
        let text = check.to_text();
        assert!(
            text.contains(
                "path `lab`, cell P=8 client→server, throughput: missing in the baseline"
            ),
            "{text}"
        );
    }

    #[test]
    fn one_path_on_each_side_is_paired_by_position() {
        let base = runs(|v| tp("vpn-old", 1, v), &[400.0, 410.0, 405.0]);
        let cand = runs(|v| tp("vpn-new", 1, v), &[200.0, 210.0, 205.0]);
        let check = compare(&base, &cand, &Criteria::default()).unwrap();
        assert_eq!(only_row(&check).verdict, Verdict::Regressed);
        assert!(check.notes[0].contains("`vpn-old` is compared with candidate `vpn-new`"));
        assert!(check.to_text().contains("vpn-old → vpn-new"));
    }

    #[test]
    fn metrics_apply_to_the_cells_that_carry_them() {
        let mut base = runs(|v| tp("p", 1, v), &[940.0, 950.0]);
        base.extend(runs(|v| rr("p", v), &[40.0, 41.0, 42.0]));
        let mut cand = runs(|v| tp("p", 1, v), &[940.0, 950.0]);
        cand.extend(runs(|v| rr("p", v), &[40.5, 41.0, 41.5]));
        let c = Criteria {
            metrics: vec![Metric::Tps, Metric::P50, Metric::P99],
            ..Criteria::default()
        };
        let check = compare(&base, &cand, &c).unwrap();
        let metrics: Vec<Metric> = check.rows.iter().map(|r| r.metric).collect();
        assert_eq!(metrics, [Metric::Tps, Metric::P50, Metric::P99]);
        assert!(check.passed(), "{check}");

        let only_tp = Criteria {
            metrics: vec![Metric::P99_9],
            ..Criteria::default()
        };
        let check = compare(&base[..2], &cand[..2], &only_tp).unwrap();
        assert!(check.rows.is_empty());
        assert_eq!(check.outcome(), Outcome::Inconclusive);
        assert!(
            check.notes[0].starts_with("p99.9: no cell"),
            "{:?}",
            check.notes
        );
    }

    #[test]
    fn bad_criteria_are_refused() {
        let c = |max_regression, confidence, metrics: Vec<Metric>| Criteria {
            metrics,
            max_regression,
            confidence,
        };
        let ok = vec![Metric::Throughput];
        assert_eq!(
            compare(&[], &[], &c(1.0, 0.95, ok.clone())),
            Err(CriteriaError::MaxRegression(1.0))
        );
        assert_eq!(
            compare(&[], &[], &c(-0.1, 0.95, ok.clone())),
            Err(CriteriaError::MaxRegression(-0.1))
        );
        assert_eq!(
            compare(&[], &[], &c(0.05, 1.0, ok)),
            Err(CriteriaError::Confidence(1.0))
        );
        // No metric named: the defaults, and no note about the one no cell carries.
        let base = runs(|v| tp("p", 1, v), &[940.0, 950.0]);
        let check = compare(&base, &base, &c(0.05, 0.95, vec![])).unwrap();
        assert_eq!(only_row(&check).metric, Metric::Throughput);
        assert!(check.notes.is_empty(), "{:?}", check.notes);
    }

    #[test]
    fn metric_names_round_trip() {
        for m in Metric::ALL {
            assert_eq!(m.name().parse::<Metric>(), Ok(m));
        }
        assert_eq!("P99.9".parse::<Metric>(), Ok(Metric::P99_9));
        assert!(
            "p42"
                .parse::<Metric>()
                .unwrap_err()
                .to_string()
                .contains("p99.9")
        );
    }

    /// A UDP run at 100 Mbit/s offered that lost `loss` %.
    fn udp(label: &str, loss: f64) -> Run {
        let lost = (loss * 100.0) as u64;
        crate::run::fixtures::udp(label, 100_000_000, 10_000, lost, loss, 0.1)
    }

    /// UDP cells are checked by default on the received rate and the loss: a path that starts
    /// losing 10 % of its datagrams regressed on both; the same loss on both sides passes.
    #[test]
    fn udp_cells_compare_received_rate_and_loss() {
        let base = runs(|v| udp("vpn", v), &[0.0, 0.01, 0.0, 0.02, 0.0]);
        let worse = runs(|v| udp("vpn", v), &[10.0, 11.0, 9.5, 10.5, 10.2]);
        let check = compare(&base, &worse, &Criteria::default()).unwrap();
        let verdicts: Vec<(Metric, bool)> = check
            .rows
            .iter()
            .map(|r| (r.metric, r.verdict == Verdict::Regressed))
            .collect();
        assert_eq!(
            verdicts,
            [(Metric::Throughput, true), (Metric::Loss, true)],
            "{check}"
        );
        assert!(check.to_text().contains("loss"), "{check}");
        let same = runs(|v| udp("vpn", v), &[0.01, 0.0, 0.0, 0.02, 0.0]);
        let check = compare(&base, &same, &Criteria::default()).unwrap();
        assert!(check.passed(), "{check}");
        assert_eq!("jitter".parse(), Ok(Metric::Jitter));
        let tcp_only = Criteria {
            metrics: vec![Metric::Jitter],
            ..Criteria::default()
        };
        let check = compare(&base[..0], &[tp("p", 1, 1.0)], &tcp_only).unwrap();
        assert!(
            check.notes[0].contains("applies to UDP runs"),
            "{:?}",
            check.notes
        );
    }

    /// Issue 34: under-load cells are compared on what the load did to latency: the
    /// probes' loaded p99 and loss, what the load added at the median, and the load's own
    /// rate; p50, p90 and the responsiveness when asked.
    #[test]
    fn under_load_cells_compare_the_increase_and_loaded_latency() {
        use crate::run::fixtures;
        let runs = |label: &str, loaded_us: f64| -> Vec<Run> {
            (1..=5)
                .map(|n| {
                    let mut r =
                        fixtures::run(label, n, 300.0, loaded_us * (1.0 + n as f64 / 100.0), 0);
                    if let Measure::UnderLoad(u) = &mut r.measure {
                        u.bulk[0].bits_per_second += n as f64 * 1e5;
                    }
                    r
                })
                .collect()
        };
        let (before, after) = (runs("vpn", 20_000.0), runs("vpn", 40_000.0));
        let check = compare(&before, &after, &Criteria::default()).unwrap();
        let rows: Vec<(Metric, &Verdict)> =
            check.rows.iter().map(|r| (r.metric, &r.verdict)).collect();
        assert_eq!(
            rows,
            [
                (Metric::Throughput, &Verdict::NoRegression),
                (Metric::P99, &Verdict::Regressed),
                (Metric::Loss, &Verdict::NoRegression),
                (Metric::Increase, &Verdict::Regressed),
            ],
            "{check}"
        );
        let inc = check
            .rows
            .iter()
            .find(|r| r.metric == Metric::Increase)
            .unwrap();
        assert_eq!(inc.name(), "path `vpn`, cell P=1 load=up, increase");
        assert!(inc.describe().contains(" → +"), "{}", inc.describe());
        assert_eq!(check.outcome(), Outcome::Regressed);

        // Asked for: the loaded median and the responsiveness, which fell by half.
        let asked = Criteria {
            metrics: vec![Metric::P50, Metric::Rpm],
            ..Criteria::default()
        };
        let check = compare(&before, &after, &asked).unwrap();
        assert!(
            check.rows.iter().all(|r| r.verdict == Verdict::Regressed),
            "{check}"
        );
        let rpm = check.rows.iter().find(|r| r.metric == Metric::Rpm).unwrap();
        assert!(rpm.describe().contains("RPM"), "{}", rpm.describe());
        assert_eq!("rpm".parse::<Metric>(), Ok(Metric::Rpm));
        assert_eq!("increase".parse::<Metric>(), Ok(Metric::Increase));
        // The same runs against themselves: no regression.
        assert!(
            compare(&before, &before, &Criteria::default())
                .unwrap()
                .passed()
        );
    }

    /// A path whose queue adds nothing has an increase around zero, below it as often as
    /// above: the allowance must not shrink (or turn) with a negative baseline, and noise of a
    /// few tens of µs is not a regression; a queue that adds milliseconds still is one.
    #[test]
    fn an_increase_near_zero_allows_noise_not_a_queue() {
        use crate::run::fixtures;
        let runs = |label: &str, extra_us: f64| -> Vec<Run> {
            (1..=8)
                .map(|n| {
                    // Loaded medians 260–330 µs over a 300 µs idle one: -40 to +30 µs.
                    let loaded = 260.0 + (n * 10) as f64 + extra_us;
                    fixtures::run(label, n, 300.0, loaded, 0)
                })
                .collect()
        };
        let increase = |before: &[Run], after: &[Run]| {
            let asked = Criteria {
                metrics: vec![Metric::Increase],
                ..Criteria::default()
            };
            let check = compare(before, after, &asked).unwrap();
            assert_eq!(check.rows.len(), 1, "{check}");
            check.rows[0].verdict.clone()
        };
        let base = runs("lan", 0.0);
        assert_eq!(increase(&base, &runs("lan", 40.0)), Verdict::NoRegression);
        assert_eq!(increase(&base, &runs("lan", 5_000.0)), Verdict::Regressed);
    }
}
