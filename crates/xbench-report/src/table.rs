//! The comparison table's data: runs grouped into cells per label, with statistics per cell.
//!
//! One row is one (cell, label) — for throughput, one (cell, direction, label) — so that the
//! labels of a cell (peering, vpn, tgw) follow each other and read side by side. Rows hold base
//! units (bits per second, µs, transactions per second); rendering picks display units. This
//! module neither reads files nor formats text (see `render`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use xbench::config::StreamDirection;
use xbench::diagnosis::Verdict;

use crate::cell::CellKey;
use crate::run::{Measure, Run, UdpResult};
use crate::stats::Stats;

/// Every row of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Labels in the order they were first met (the order of the command line).
    pub labels: Vec<String>,
    /// Throughput rows.
    pub throughput: Vec<ThroughputRow>,
    /// Request/response rows.
    pub rr: Vec<RrRow>,
    /// UDP rows.
    pub udp: Vec<UdpRow>,
    /// Per label, what the runs recorded of the path and the hosts (none for runs that
    /// recorded nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<crate::paths::PathRow>,
}

/// One label's runs of one UDP cell, one direction. Every figure is per run, with its
/// statistics over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct UdpRow {
    /// The path.
    pub label: String,
    /// The cell's settings.
    pub cell: CellKey,
    /// The cell as a table shows it (`b=100M l=1400 P=1`).
    pub cell_name: String,
    /// Which way the datagrams went.
    pub direction: StreamDirection,
    /// Runs averaged.
    pub runs: usize,
    /// The rate asked for, payload bits per second (`None`: unpaced).
    pub offered_bits_per_second: Option<f64>,
    /// The senders' rate, bits per second.
    pub sent_bits_per_second: Stats,
    /// The receivers' rate, bits per second.
    pub received_bits_per_second: Stats,
    /// Datagrams lost per run.
    pub lost: Stats,
    /// Loss per run, percent of the datagrams sent.
    pub lost_percent: Stats,
    /// Datagrams out of order per run.
    pub out_of_order: Stats,
    /// Duplicated datagrams per run, over the runs that count them.
    pub duplicates: Option<Stats>,
    /// RFC 3550 jitter per run, milliseconds.
    pub jitter_ms: Stats,
    /// Datagrams the receiving kernel dropped for a full socket buffer, per run, over the
    /// runs that count them.
    pub rxq_drops: Option<Stats>,
    /// The runs' files.
    pub files: Vec<PathBuf>,
}

/// One label's runs of one throughput cell, one direction.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    /// The path.
    pub label: String,
    /// The cell's settings.
    pub cell: CellKey,
    /// The cell as a table shows it (`P=4 w=256K`).
    pub cell_name: String,
    /// Which way the data flowed.
    pub direction: StreamDirection,
    /// Runs averaged.
    pub runs: usize,
    /// Receiver rate, bits per second.
    pub bits_per_second: Stats,
    /// Retransmitted segments per run.
    pub retransmits: Stats,
    /// Mean smoothed RTT per run, µs, over the runs that reported one.
    pub rtt_us: Option<Stats>,
    /// What limited the runs: each verdict with how many runs it named, most first (runs
    /// without a diagnosis, such as iperf3's, are left out).
    pub limits: Vec<VerdictCount>,
    /// The runs' files.
    pub files: Vec<PathBuf>,
}

/// How many runs of a row one verdict named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VerdictCount {
    /// The verdict.
    pub verdict: Verdict,
    /// Runs it named.
    pub runs: usize,
}

/// The verdicts of some runs, counted, most first (ties in the verdicts' order).
fn count_verdicts(verdicts: impl Iterator<Item = Verdict>) -> Vec<VerdictCount> {
    let mut counts: BTreeMap<Verdict, usize> = BTreeMap::new();
    for v in verdicts {
        *counts.entry(v).or_default() += 1;
    }
    let mut out: Vec<VerdictCount> = counts
        .into_iter()
        .map(|(verdict, runs)| VerdictCount { verdict, runs })
        .collect();
    out.sort_by_key(|v| std::cmp::Reverse(v.runs));
    out
}

/// One label's runs of one request/response cell.
#[derive(Debug, Clone, Serialize)]
pub struct RrRow {
    /// The path.
    pub label: String,
    /// The cell's settings.
    pub cell: CellKey,
    /// The cell as a table shows it (`-r 1,1 flows=1`).
    pub cell_name: String,
    /// Runs averaged.
    pub runs: usize,
    /// Transactions per second per run.
    pub transactions_per_second: Stats,
    /// Lowest latency per run, µs.
    pub min_us: Stats,
    /// Median latency per run, µs.
    pub p50_us: Stats,
    /// 90th percentile per run, µs.
    pub p90_us: Stats,
    /// 99th percentile per run, µs.
    pub p99_us: Stats,
    /// 99.9th percentile per run, µs.
    pub p99_9_us: Stats,
    /// Mean latency per run, µs.
    pub mean_us: Stats,
    /// Highest latency per run, µs.
    pub max_us: Stats,
    /// Standard deviation of each run's latencies, µs, over runs.
    pub stddev_us: Stats,
    /// Retransmitted segments per run.
    pub retransmits: Stats,
    /// The runs' files.
    pub files: Vec<PathBuf>,
}

impl Comparison {
    /// Groups `runs` into rows and computes each row's statistics.
    pub fn build(runs: &[Run]) -> Comparison {
        let labels = labels_in_order(runs);
        let label_pos = |l: &str| labels.iter().position(|x| x == l).unwrap_or(usize::MAX);

        type TpGroup<'a> = BTreeMap<(CellKey, StreamDirection, usize), Vec<(&'a Run, usize)>>;
        let mut tp: TpGroup<'_> = BTreeMap::new();
        let mut rr: BTreeMap<(CellKey, usize), Vec<&Run>> = BTreeMap::new();
        type UdpGroup<'a> =
            BTreeMap<(CellKey, StreamDirection, usize), Vec<(&'a Run, &'a UdpResult)>>;
        let mut udp: UdpGroup<'_> = BTreeMap::new();
        for run in runs {
            match &run.measure {
                Measure::Throughput(dirs) => {
                    for (i, d) in dirs.iter().enumerate() {
                        tp.entry((run.key.clone(), d.direction, label_pos(&run.label)))
                            .or_default()
                            .push((run, i));
                    }
                }
                Measure::Rr(_) => rr
                    .entry((run.key.clone(), label_pos(&run.label)))
                    .or_default()
                    .push(run),
                Measure::Udp(dirs) => {
                    for d in dirs {
                        udp.entry((run.key.clone(), d.direction, label_pos(&run.label)))
                            .or_default()
                            .push((run, d));
                    }
                }
            }
        }

        let throughput = tp
            .into_iter()
            .filter_map(|((cell, direction, _), group)| {
                let dir = |(r, i): &(&Run, usize)| match &r.measure {
                    Measure::Throughput(d) => d.get(*i).cloned(),
                    Measure::Rr(_) | Measure::Udp(_) => None,
                };
                let dirs: Vec<_> = group.iter().filter_map(dir).collect();
                let bps: Vec<f64> = dirs.iter().map(|d| d.bits_per_second).collect();
                let retr: Vec<f64> = dirs.iter().map(|d| d.retransmits as f64).collect();
                let rtt: Vec<f64> = dirs.iter().filter_map(|d| d.rtt_mean_us).collect();
                Some(ThroughputRow {
                    label: group.first()?.0.label.clone(),
                    cell_name: cell.describe(),
                    cell,
                    direction,
                    runs: dirs.len(),
                    bits_per_second: Stats::of(&bps)?,
                    retransmits: Stats::of(&retr)?,
                    rtt_us: Stats::of(&rtt),
                    limits: count_verdicts(dirs.iter().filter_map(|d| d.verdict)),
                    files: saved_files(group.iter().map(|(r, _)| *r)),
                })
            })
            .collect();

        let rr = rr
            .into_iter()
            .filter_map(|((cell, _), group)| {
                let results: Vec<_> = group
                    .iter()
                    .filter_map(|r| match &r.measure {
                        Measure::Rr(x) => Some(x),
                        Measure::Throughput(_) | Measure::Udp(_) => None,
                    })
                    .collect();
                let of = |f: &dyn Fn(&crate::run::RrResult) -> f64| {
                    Stats::of(&results.iter().map(|r| f(r)).collect::<Vec<_>>())
                };
                Some(RrRow {
                    label: group.first()?.label.clone(),
                    cell_name: cell.describe(),
                    cell,
                    runs: results.len(),
                    transactions_per_second: of(&|r| r.transactions_per_second)?,
                    min_us: of(&|r| r.min_us)?,
                    p50_us: of(&|r| r.p50_us)?,
                    p90_us: of(&|r| r.p90_us)?,
                    p99_us: of(&|r| r.p99_us)?,
                    p99_9_us: of(&|r| r.p99_9_us)?,
                    mean_us: of(&|r| r.mean_us)?,
                    max_us: of(&|r| r.max_us)?,
                    stddev_us: of(&|r| r.stddev_us)?,
                    retransmits: of(&|r| r.retransmits as f64)?,
                    files: saved_files(group.iter().copied()),
                })
            })
            .collect();

        let udp = udp
            .into_iter()
            .filter_map(|((cell, direction, _), group)| {
                let of = |f: &dyn Fn(&UdpResult) -> f64| {
                    Stats::of(&group.iter().map(|(_, d)| f(d)).collect::<Vec<_>>())
                };
                let some = |f: &dyn Fn(&UdpResult) -> Option<u64>| {
                    Stats::of(
                        &group
                            .iter()
                            .filter_map(|(_, d)| f(d).map(|v| v as f64))
                            .collect::<Vec<_>>(),
                    )
                };
                Some(UdpRow {
                    label: group.first()?.0.label.clone(),
                    cell_name: cell.describe(),
                    direction,
                    runs: group.len(),
                    // The same in every run of a cell: it is part of the cell's key.
                    offered_bits_per_second: group.first()?.1.offered_bps,
                    sent_bits_per_second: of(&|d| d.sent_bps)?,
                    received_bits_per_second: of(&|d| d.received_bps)?,
                    lost: of(&|d| d.lost as f64)?,
                    lost_percent: of(&|d| d.lost_pct)?,
                    out_of_order: of(&|d| d.out_of_order as f64)?,
                    duplicates: some(&|d| d.duplicates),
                    jitter_ms: of(&|d| d.jitter_ms)?,
                    rxq_drops: some(&|d| d.rxq_drops),
                    files: saved_files(group.iter().map(|(r, _)| *r)),
                    cell,
                })
            })
            .collect();

        Comparison {
            labels,
            throughput,
            rr,
            udp,
            paths: crate::paths::rows(runs),
        }
    }

    /// Only the rows of one label (a sweep's own summary).
    pub fn for_label(&self, label: &str) -> Comparison {
        Comparison {
            labels: vec![label.to_owned()],
            throughput: self
                .throughput
                .iter()
                .filter(|r| r.label == label)
                .cloned()
                .collect(),
            rr: self
                .rr
                .iter()
                .filter(|r| r.label == label)
                .cloned()
                .collect(),
            udp: self
                .udp
                .iter()
                .filter(|r| r.label == label)
                .cloned()
                .collect(),
            paths: self
                .paths
                .iter()
                .filter(|r| r.label == label)
                .cloned()
                .collect(),
        }
    }

    /// No rows at all.
    pub fn is_empty(&self) -> bool {
        self.throughput.is_empty() && self.rr.is_empty() && self.udp.is_empty()
    }
}

/// The files of runs that have one (a sweep without `--save` keeps runs in memory only).
fn saved_files<'a>(runs: impl Iterator<Item = &'a Run>) -> Vec<PathBuf> {
    runs.filter(|r| !r.path.as_os_str().is_empty())
        .map(|r| r.path.clone())
        .collect()
}

/// Labels in the order runs first name them.
pub(crate) fn labels_in_order(runs: &[Run]) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for r in runs {
        if !labels.contains(&r.label) {
            labels.push(r.label.clone());
        }
    }
    labels
}
