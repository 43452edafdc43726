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
use crate::run::{Measure, Run, UdpResult, UnderLoadResult};
use crate::stats::Stats;
use crate::units::{TimeUnit, largest};

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
    /// Latency-under-load rows (`--under-load`). Their bulk streams are in these rows, not in
    /// `throughput`: they ran between idle phases beside the probes, not as a plain
    /// throughput test.
    pub under_load: Vec<UnderLoadRow>,
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

/// One label's runs of one latency-under-load cell. Latencies are the UDP probes', each run's
/// figure with its statistics over the runs; a figure a run could not give (no probe answered
/// in a phase, no bulk RTT sample for the responsiveness) leaves that run out of its
/// statistics, and `None` means no run gave it.
#[derive(Debug, Clone, Serialize)]
pub struct UnderLoadRow {
    /// The path.
    pub label: String,
    /// The cell's settings.
    pub cell: CellKey,
    /// The cell as a table shows it (`P=4 load=both`).
    pub cell_name: String,
    /// Runs averaged.
    pub runs: usize,
    /// Median latency in the idle phase before the load, µs.
    pub idle_p50_us: Option<Stats>,
    /// Median latency under load, µs.
    pub loaded_p50_us: Option<Stats>,
    /// 99th percentile under load, µs.
    pub loaded_p99_us: Option<Stats>,
    /// What the load added at the median (each run's loaded minus idle median), µs.
    pub increase_p50_us: Option<Stats>,
    /// Responsiveness under load, round trips per minute.
    pub rpm: Option<Stats>,
    /// Probes lost in the loaded phase, percent of those that ended in it.
    pub loaded_lost_percent: Stats,
    /// The load: the bulk streams' receiver rate, all directions summed, bits per second.
    pub bulk_bits_per_second: Stats,
    /// The runs' files.
    pub files: Vec<PathBuf>,
}

/// The units of an under-load table's latency columns, each the one its largest mean reads
/// best in (an idle path in µs beside a loaded one in ms), for the text and the HTML table
/// alike.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnderLoadUnits {
    pub(crate) idle: TimeUnit,
    pub(crate) loaded: TimeUnit,
    pub(crate) p99: TimeUnit,
    pub(crate) increase: TimeUnit,
}

impl UnderLoadUnits {
    pub(crate) fn of<R: std::borrow::Borrow<UnderLoadRow>>(rows: &[R]) -> Self {
        let unit_of = |f: fn(&UnderLoadRow) -> Option<&Stats>| {
            let means = rows.iter().filter_map(|r| f(r.borrow()).map(|s| s.mean));
            TimeUnit::for_micros(largest(means))
        };
        UnderLoadUnits {
            idle: unit_of(|r| r.idle_p50_us.as_ref()),
            loaded: unit_of(|r| r.loaded_p50_us.as_ref()),
            p99: unit_of(|r| r.loaded_p99_us.as_ref()),
            increase: unit_of(|r| r.increase_p50_us.as_ref()),
        }
    }
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
        let g = Groups::of(runs, &labels);
        Comparison {
            throughput: (g.tp.into_iter())
                .filter_map(|((cell, direction, _), group)| throughput_row(cell, direction, &group))
                .collect(),
            rr: (g.rr.into_iter())
                .filter_map(|((cell, _), group)| rr_row(cell, &group))
                .collect(),
            udp: (g.udp.into_iter())
                .filter_map(|((cell, direction, _), group)| udp_row(cell, direction, &group))
                .collect(),
            under_load: (g.ul.into_iter())
                .filter_map(|((cell, _), group)| under_load_row(cell, &group))
                .collect(),
            labels,
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
            under_load: self
                .under_load
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
        self.throughput.is_empty()
            && self.rr.is_empty()
            && self.udp.is_empty()
            && self.under_load.is_empty()
    }
}

/// A cell's throughput runs (each run with its direction's index), by cell, direction and
/// label position.
type TpGroup<'a> = BTreeMap<(CellKey, StreamDirection, usize), Vec<(&'a Run, usize)>>;
type UdpGroup<'a> = BTreeMap<(CellKey, StreamDirection, usize), Vec<(&'a Run, &'a UdpResult)>>;
type UlGroup<'a> = BTreeMap<(CellKey, usize), Vec<(&'a Run, &'a UnderLoadResult)>>;

/// The runs grouped into the table's rows: by cell (and direction), then label.
struct Groups<'a> {
    tp: TpGroup<'a>,
    rr: BTreeMap<(CellKey, usize), Vec<&'a Run>>,
    udp: UdpGroup<'a>,
    ul: UlGroup<'a>,
}

impl<'a> Groups<'a> {
    fn of(runs: &'a [Run], labels: &[String]) -> Self {
        let label_pos = |l: &str| labels.iter().position(|x| x == l).unwrap_or(usize::MAX);
        let mut g = Groups {
            tp: BTreeMap::new(),
            rr: BTreeMap::new(),
            udp: BTreeMap::new(),
            ul: BTreeMap::new(),
        };
        for run in runs {
            let at = label_pos(&run.label);
            match &run.measure {
                Measure::Throughput(dirs) => {
                    for (i, d) in dirs.iter().enumerate() {
                        (g.tp.entry((run.key.clone(), d.direction, at)))
                            .or_default()
                            .push((run, i));
                    }
                }
                Measure::Rr(_) => g.rr.entry((run.key.clone(), at)).or_default().push(run),
                Measure::Udp(dirs) => {
                    for d in dirs {
                        (g.udp.entry((run.key.clone(), d.direction, at)))
                            .or_default()
                            .push((run, d));
                    }
                }
                Measure::UnderLoad(u) => {
                    g.ul.entry((run.key.clone(), at))
                        .or_default()
                        .push((run, u));
                }
            }
        }
        g
    }
}

fn throughput_row(
    cell: CellKey,
    direction: StreamDirection,
    group: &[(&Run, usize)],
) -> Option<ThroughputRow> {
    let dir = |(r, i): &(&Run, usize)| match &r.measure {
        Measure::Throughput(d) => d.get(*i).cloned(),
        Measure::Rr(_) | Measure::Udp(_) | Measure::UnderLoad(_) => None,
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
}

fn rr_row(cell: CellKey, group: &[&Run]) -> Option<RrRow> {
    let results: Vec<_> = group
        .iter()
        .filter_map(|r| match &r.measure {
            Measure::Rr(x) => Some(x),
            Measure::Throughput(_) | Measure::Udp(_) | Measure::UnderLoad(_) => None,
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
}

fn udp_row(
    cell: CellKey,
    direction: StreamDirection,
    group: &[(&Run, &UdpResult)],
) -> Option<UdpRow> {
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
}

fn under_load_row(cell: CellKey, group: &[(&Run, &UnderLoadResult)]) -> Option<UnderLoadRow> {
    let some = |f: &dyn Fn(&UnderLoadResult) -> Option<f64>| {
        Stats::of(&group.iter().filter_map(|(_, u)| f(u)).collect::<Vec<_>>())
    };
    Some(UnderLoadRow {
        label: group.first()?.0.label.clone(),
        cell_name: cell.describe(),
        runs: group.len(),
        idle_p50_us: some(&|u| u.idle_p50_us()),
        loaded_p50_us: some(&|u| u.loaded_p50_us()),
        loaded_p99_us: some(&|u| u.loaded_p99_us()),
        increase_p50_us: some(&|u| u.increase_p50_us()),
        rpm: some(&|u| u.rpm()),
        loaded_lost_percent: some(&|u| Some(u.loaded_lost_percent()))?,
        bulk_bits_per_second: some(&|u| Some(u.bulk_bits_per_second()))?,
        files: saved_files(group.iter().map(|(r, _)| *r)),
        cell,
    })
}

/// The files of runs that have one (a sweep without `--save` keeps runs in memory only).
fn saved_files<'a>(runs: impl Iterator<Item = &'a Run>) -> Vec<PathBuf> {
    runs.filter(|r| !r.path.as_os_str().is_empty())
        .map(|r| r.path.clone())
        .collect()
}

/// Labels in the order runs first name them.
pub(crate) fn labels_in_order<R: std::borrow::Borrow<Run>>(runs: &[R]) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for r in runs {
        let r = r.borrow();
        if !labels.contains(&r.label) {
            labels.push(r.label.clone());
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Kind;
    use crate::run::fixtures;
    use crate::run::{DirectionResult, Measure};

    /// A plain throughput run of `-P 1`: the settings of `--under-load up -P 1`.
    fn plain(label: &str) -> Run {
        let mut spec = xbench::config::TestSpec::throughput();
        if let xbench::config::Workload::Throughput(t) = &mut spec.workload {
            t.direction = xbench::config::Direction::ClientToServer;
        }
        Run {
            path: format!("{label}/tcp-up-P1/run-1.json").into(),
            label: label.into(),
            key: CellKey::of_spec(&spec),
            started_at: String::new(),
            length_s: Some(5.0),
            facts: Default::default(),
            measure: Measure::Throughput(vec![DirectionResult {
                direction: StreamDirection::ClientToServer,
                bits_per_second: 900e6,
                retransmits: 0,
                rtt_mean_us: None,
                window_ceiling_bps: None,
                verdict: None,
                timeline: vec![],
            }]),
        }
    }

    /// Issue 34: an under-load run was a plain throughput row, its rate averaged with plain
    /// runs' of the same settings. It now makes an under-load row of its own, with its bulk
    /// rate there, and the throughput table holds the plain runs alone.
    #[test]
    fn under_load_runs_make_their_own_rows_and_leave_the_throughput_table_alone() {
        let runs = [
            plain("vpn"),
            fixtures::run("vpn", 1, 300.0, 20_000.0, 0),
            fixtures::run("vpn", 2, 340.0, 30_000.0, 2),
            fixtures::run("peering", 1, 100.0, 1_000.0, 0),
        ];
        let c = Comparison::build(&runs);
        assert_eq!(c.throughput.len(), 1, "{:?}", c.throughput);
        assert_eq!(c.throughput[0].bits_per_second.mean, 900e6);
        assert_eq!(c.throughput[0].runs, 1);
        assert_eq!(c.under_load.len(), 2);
        let vpn = &c.under_load[0];
        assert_eq!((vpn.label.as_str(), vpn.runs), ("vpn", 2));
        assert_eq!(vpn.cell.kind, Kind::UnderLoad);
        assert_eq!(vpn.cell_name, "P=1 load=up");
        // Each run's median is its phase's (40 probes from 0.9× to 1.095× the centre, HDR
        // within 0.1 %): about 1.0× the centre; the mean of two runs' medians.
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.002;
        let idle = vpn.idle_p50_us.unwrap().mean;
        let loaded = vpn.loaded_p50_us.unwrap().mean;
        assert!(close(idle, 320.0 * 0.995), "{idle}");
        assert!(close(loaded, 25_000.0 * 0.995), "{loaded}");
        assert!(close(vpn.increase_p50_us.unwrap().mean, loaded - idle));
        assert_eq!(vpn.loaded_p50_us.unwrap().n, 2);
        assert!(vpn.loaded_p50_us.unwrap().ci95_low.is_some());
        // 2 lost of 42 in the second run: 4.76 %, 2.38 % over the two.
        assert!((vpn.loaded_lost_percent.mean - 100.0 / 42.0).abs() < 1e-9);
        assert_eq!(vpn.bulk_bits_per_second.mean, 95e6);
        // RPM: 60e6 / 20,000 and / 30,000 µs: 3,000 and 2,000.
        assert_eq!(vpn.rpm.unwrap().mean, 2_500.0);
        assert_eq!(vpn.files.len(), 2);
        assert_eq!(c.for_label("peering").under_load.len(), 1);
        assert!(!c.is_empty());
    }

    /// A run whose loaded probes all went unanswered still counts: its loss is in the row,
    /// and the latency figures are over the runs that have them.
    #[test]
    fn a_run_with_no_answered_probe_under_load_keeps_its_loss() {
        let mut dead = fixtures::run("vpn", 2, 300.0, 20_000.0, 0);
        if let Measure::UnderLoad(u) = &mut dead.measure {
            u.probes.udp.loaded = fixtures::phase(&[], 40);
            u.probes.udp.increase = None;
            u.probes.responsiveness = None;
        }
        let c = Comparison::build(&[fixtures::run("vpn", 1, 300.0, 20_000.0, 0), dead]);
        let r = &c.under_load[0];
        assert_eq!(r.runs, 2);
        assert_eq!(r.loaded_p50_us.unwrap().n, 1);
        assert_eq!(r.rpm.unwrap().n, 1);
        assert_eq!(r.loaded_lost_percent.mean, 50.0);
        assert_eq!(r.loaded_lost_percent.max, 100.0);
    }
}
