//! One sentence per cell of a comparison saying which path did better, by how much, and
//! whether the runs can tell: "peering delivers 2.31× vpn at P=16 (95 % CIs apart)", or
//! "cannot tell" when the confidence intervals overlap or a path has a single run.
//!
//! The sentence is derived from the statistics `table` already computed — the mean over runs
//! and its Student-t 95 % confidence interval — and nothing else: two paths are called apart
//! only when their intervals do not overlap, which is stricter than a t-test at 5 % (two
//! intervals that just touch differ at about p = 0.006). The figure compared is the one each
//! kind of cell is chosen by: the receiver's rate (TCP), the median latency (request/response,
//! lower is better), the share of datagrams lost (UDP, lower is better) and the probes' median
//! latency under load (`--under-load`, lower is better). This module words
//! verdicts; it does not render them (see `html`) nor test for regressions (see `compare`).

use std::collections::BTreeMap;

use serde::Serialize;
use xbench::config::StreamDirection;

use crate::cell::{CellKey, Kind};
use crate::stats::Stats;
use crate::table::Comparison;
use crate::units::{RateScale, TimeUnit, number, percent};

/// The verdict on one cell (and direction) of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellVerdict {
    /// What kind of cell: its section of the report.
    pub kind: Kind,
    /// The cell as tables show it, with the direction where the comparison has both
    /// (`P=16 client→server`).
    pub cell_name: String,
    /// The sentence.
    pub sentence: String,
    /// Whether at least one pair of paths was told apart. `false` is a "cannot tell" (or a
    /// cell only one path measured).
    pub decided: bool,
}

/// How two paths' intervals compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Separation {
    /// The 95 % confidence intervals do not overlap.
    Apart,
    /// They overlap: the runs cannot tell the paths apart.
    Overlap,
    /// One side has a single run, so no interval.
    NoInterval,
}

fn separation(a: &Stats, b: &Stats) -> Separation {
    match (a.ci95_low.zip(a.ci95_high), b.ci95_low.zip(b.ci95_high)) {
        (Some((alo, ahi)), Some((blo, bhi))) => {
            if ahi < blo || bhi < alo {
                Separation::Apart
            } else {
                Separation::Overlap
            }
        }
        _ => Separation::NoInterval,
    }
}

/// One path's figure in a cell.
struct Entry<'a> {
    label: &'a str,
    stats: &'a Stats,
    runs: usize,
}

/// The verdicts of every cell of `c`, throughput first, then request/response, then UDP, then
/// latency under load, each in table order. Rates are written in `unit` (or scaled to each figure).
pub fn verdicts(c: &Comparison, unit: impl Into<RateScale>) -> Vec<CellVerdict> {
    let unit = unit.into();
    let mut out = Vec::new();
    let both_ways = |dirs: &mut dyn Iterator<Item = StreamDirection>| {
        let v: Vec<StreamDirection> = dirs.collect();
        v.windows(2).any(|w| w[0] != w[1])
    };

    let tcp_both = both_ways(&mut c.throughput.iter().map(|r| r.direction));
    out.extend(word_cells(
        &c.throughput,
        |r| {
            let e = Entry {
                label: &r.label,
                stats: &r.bits_per_second,
                runs: r.runs,
            };
            Some(((r.cell.clone(), r.direction), e))
        },
        |(cell, dir)| (Kind::Throughput, cell_name(&cell, dir, tcp_both)),
        Better::Higher,
        Fig::Rate(unit),
    ));

    out.extend(word_cells(
        &c.rr,
        |r| {
            let e = Entry {
                label: &r.label,
                stats: &r.p50_us,
                runs: r.runs,
            };
            Some((r.cell.clone(), e))
        },
        |cell: CellKey| (cell.kind, cell.describe()),
        Better::Lower("median latency"),
        Fig::Micros,
    ));

    let udp_both = both_ways(&mut c.udp.iter().map(|r| r.direction));
    out.extend(word_cells(
        &c.udp,
        |r| {
            let e = Entry {
                label: &r.label,
                stats: &r.lost_percent,
                runs: r.runs,
            };
            Some(((r.cell.clone(), r.direction), e))
        },
        |(cell, dir)| (Kind::Udp, cell_name(&cell, dir, udp_both)),
        Better::LessLoss,
        Fig::Percent,
    ));

    // Latency under load: the probes' loaded median, what a user waits for while the path is
    // busy. A row whose probes all went unanswered under load has no figure to compare.
    out.extend(word_cells(
        &c.under_load,
        |r| {
            let stats = r.loaded_p50_us.as_ref()?;
            let e = Entry {
                label: &r.label,
                stats,
                runs: r.runs,
            };
            Some((r.cell.clone(), e))
        },
        |cell: CellKey| (Kind::UnderLoad, cell.describe()),
        Better::Lower("median latency under load"),
        Fig::Micros,
    ));
    out
}

/// Groups `rows` into cells by the key `entry` gives each (cells in key order, rows in table
/// order within a cell; a row with no figure is left out) and words one verdict per cell,
/// named by `name`. The one grouping every kind of cell shares.
fn word_cells<'a, R, K: Ord>(
    rows: &'a [R],
    entry: impl Fn(&'a R) -> Option<(K, Entry<'a>)>,
    name: impl Fn(K) -> (Kind, String),
    better: Better,
    fig: Fig,
) -> Vec<CellVerdict> {
    let mut cells: BTreeMap<K, Vec<Entry<'a>>> = BTreeMap::new();
    for (key, e) in rows.iter().filter_map(entry) {
        cells.entry(key).or_default().push(e);
    }
    cells
        .into_iter()
        .map(|(key, entries)| {
            let (kind, cell_name) = name(key);
            word(kind, cell_name, entries, better, fig)
        })
        .collect()
}

fn cell_name(cell: &CellKey, dir: StreamDirection, both_ways: bool) -> String {
    if both_ways {
        format!("{} {}", cell.describe(), dir.label())
    } else {
        cell.describe()
    }
}

/// Which way is better, and how the figure is named in a sentence.
#[derive(Debug, Clone, Copy)]
enum Better {
    /// Throughput: "delivers 2.31× vpn".
    Higher,
    /// A latency: "vpn's median latency is 2.31× peering's".
    Lower(&'static str),
    /// UDP loss: shares compared as they are (a ratio of 0 % is no figure).
    LessLoss,
}

/// The verdict on one cell: its only path's figure, or the best path against each other.
fn word(
    kind: Kind,
    cell_name: String,
    mut entries: Vec<Entry<'_>>,
    better: Better,
    fig: Fig,
) -> CellVerdict {
    let at = format!("at {cell_name}");
    if let [only] = entries.as_slice() {
        return CellVerdict {
            kind,
            sentence: only_one(only, &at, better, fig),
            cell_name,
            decided: false,
        };
    }
    // Best first; a stable sort keeps the command line's order between equals.
    match better {
        Better::Higher => entries.sort_by(|a, b| b.stats.mean.total_cmp(&a.stats.mean)),
        Better::Lower(_) | Better::LessLoss => {
            entries.sort_by(|a, b| a.stats.mean.total_cmp(&b.stats.mean));
        }
    }
    if let Better::LessLoss = better
        && entries.iter().all(|e| e.stats.max == 0.0)
    {
        return CellVerdict {
            kind,
            sentence: format!(
                "No path lost a datagram {at}: {} (every run).",
                join_and(&labels(&entries))
            ),
            cell_name,
            decided: false,
        };
    }
    let best = &entries[0];
    let others = &entries[1..];
    let seps: Vec<Separation> = others
        .iter()
        .map(|o| separation(best.stats, o.stats))
        .collect();
    let decided = seps.contains(&Separation::Apart);
    let sentence = if !decided && seps.iter().all(|s| *s == Separation::Overlap) {
        cannot_tell(&entries, &at, better, fig)
    } else {
        best_against_others(best, others, &seps, &at, better, fig)
    };
    CellVerdict {
        kind,
        cell_name,
        sentence,
        decided,
    }
}

/// The sentence for a cell one path measured: its figure and interval, and that there is
/// nothing to compare. Apart from `word` because it shares nothing with the comparing wording.
fn only_one(only: &Entry<'_>, at: &str, better: Better, fig: Fig) -> String {
    let ci = ci95(only.stats, fig)
        .map(|range| format!(", 95 % CI {range}"))
        .unwrap_or_default();
    let what = match better {
        Better::Higher => "receiver rate",
        Better::Lower(what) => what,
        Better::LessLoss => "datagrams lost",
    };
    format!(
        "Only {} measured {at}: {what} {} ({} run{}{ci}); nothing to compare it with.",
        only.label,
        fig.one(only.stats.mean),
        only.runs,
        if only.runs == 1 { "" } else { "s" }
    )
}

/// The sentence when every other path's interval overlaps the best's: each path's figure and
/// interval, so a reader sees why. Apart from `word` because no path leads in it.
fn cannot_tell(entries: &[Entry<'_>], at: &str, better: Better, fig: Fig) -> String {
    let figures: Vec<String> = entries
        .iter()
        .map(|e| {
            let ci = ci95(e.stats, fig)
                .map(|range| format!(" ({range})"))
                .unwrap_or_default();
            format!("{} {}{ci}", e.label, fig.one(e.stats.mean))
        })
        .collect();
    let what = match better {
        Better::Higher => "receiver rate",
        Better::Lower(what) => what,
        Better::LessLoss => "loss",
    };
    format!(
        "Cannot tell {} apart {at}: their 95 % CIs overlap ({what}: {}).",
        join_and(&labels(entries)),
        figures.join(", ")
    )
}

/// The sentence naming the best path and each other path against it, with whether the two
/// can be told apart (`seps`, one per other path). Apart from `word` because each kind of
/// figure words it differently.
fn best_against_others(
    best: &Entry<'_>,
    others: &[Entry<'_>],
    seps: &[Separation],
    at: &str,
    better: Better,
    fig: Fig,
) -> String {
    let show = |v: f64| fig.one(v);
    let clauses: Vec<String> = others
        .iter()
        .zip(seps)
        .map(|(o, s)| {
            let why = why_not(*s, best, o);
            match better {
                Better::Higher => {
                    format!(
                        "{} {} ({why})",
                        ratio(best.stats.mean, o.stats.mean),
                        o.label
                    )
                }
                Better::Lower(_) => format!(
                    "{}'s is {} ({}; {why})",
                    o.label,
                    ratio(o.stats.mean, best.stats.mean),
                    show(o.stats.mean)
                ),
                Better::LessLoss => format!("{} {} ({why})", o.label, show(o.stats.mean)),
            }
        })
        .collect();
    match better {
        Better::Higher => format!(
            "{} delivers {} {at}.",
            best.label,
            join_and(&clauses.iter().map(String::as_str).collect::<Vec<_>>())
        ),
        Better::Lower(what) => format!(
            "{}'s {what} is {} {at}; {}.",
            best.label,
            show(best.stats.mean),
            clauses.join("; ")
        ),
        Better::LessLoss => format!(
            "{} lost {} of its datagrams {at}; {}.",
            best.label,
            show(best.stats.mean),
            clauses.join("; ")
        ),
    }
}

/// Why `best` and `other` are, or cannot be, told apart, as a clause names it. Apart from
/// `best_against_others` to keep each clause's format on one screen.
fn why_not(s: Separation, best: &Entry<'_>, other: &Entry<'_>) -> String {
    match s {
        Separation::Apart => "95 % CIs apart".to_owned(),
        Separation::Overlap => "cannot tell: 95 % CIs overlap".to_owned(),
        Separation::NoInterval => format!(
            "cannot tell: {} has a single run, so no confidence interval",
            if best.runs == 1 {
                best.label
            } else {
                other.label
            }
        ),
    }
}

/// An entry's 95 % confidence interval as a range, when it has one (two runs or more). One
/// reading for the two sentences that show intervals.
fn ci95(stats: &Stats, fig: Fig) -> Option<String> {
    stats
        .ci95_low
        .zip(stats.ci95_high)
        .map(|(lo, hi)| fig.range(lo, hi))
}

/// The paths' labels, in the entries' order, for the sentences that name every path.
fn labels<'a>(entries: &[Entry<'a>]) -> Vec<&'a str> {
    entries.iter().map(|e| e.label).collect()
}

/// How a cell's figure is written.
#[derive(Debug, Clone, Copy)]
enum Fig {
    /// Bits per second, in the scale's unit.
    Rate(RateScale),
    /// A time in µs, in the unit that suits it.
    Micros,
    /// A share in percent.
    Percent,
}

impl Fig {
    fn one(self, v: f64) -> String {
        match self {
            Fig::Rate(scale) => scale.show(v),
            Fig::Micros => xbench::units::format_micros(v),
            Fig::Percent => percent(v),
        }
    }

    /// `241–369 Mbit/s`: both ends in the unit of the larger.
    fn range(self, lo: f64, hi: f64) -> String {
        let top = lo.abs().max(hi.abs());
        match self {
            Fig::Rate(scale) => {
                let u = scale.unit_for(top);
                format!("{}–{} {}", u.format(lo), u.format(hi), u.label())
            }
            Fig::Micros => {
                let u = TimeUnit::for_micros(top);
                format!("{}–{} {}", u.format(lo), u.format(hi), u.label())
            }
            Fig::Percent => format!("{}–{} %", number(lo), number(hi)),
        }
    }
}

/// `2.31×` (or `1.00×`: equal means read as such, not as a difference).
fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        return "∞×".to_owned();
    }
    format!("{}×", number(a / b))
}

fn join_and(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use xbench::config::TestSpec;

    use super::*;
    use crate::run::{Measure, Run};
    use crate::units::ThroughputUnit;

    fn tp(label: &str, p: u16, mbps: f64) -> Run {
        crate::run::fixtures::tcp(label, p, mbps, 0, None)
    }

    fn sentences(runs: &[Run]) -> Vec<String> {
        verdicts(&Comparison::build(runs), ThroughputUnit::Mbits)
            .into_iter()
            .map(|v| v.sentence)
            .collect()
    }

    /// The example: a path with 2.3 times the rate, intervals far apart.
    #[test]
    fn a_faster_path_with_intervals_apart_is_named_with_its_ratio() {
        let mut runs = Vec::new();
        for v in [920.0, 930.0, 940.0] {
            runs.push(tp("vpn", 16, v / 2.3));
            runs.push(tp("peering", 16, v));
        }
        let v = verdicts(&Comparison::build(&runs), ThroughputUnit::Mbits);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].sentence,
            "peering delivers 2.30× vpn (95 % CIs apart) at P=16."
        );
        assert!(v[0].decided);
    }

    /// Overlapping intervals are a "cannot tell", with each path's figure and interval, even
    /// when the means differ.
    #[test]
    fn overlapping_intervals_cannot_tell() {
        let runs = [
            tp("a", 1, 100.0),
            tp("a", 1, 140.0),
            tp("a", 1, 120.0),
            tp("b", 1, 110.0),
            tp("b", 1, 125.0),
            tp("b", 1, 118.0),
        ];
        let s = sentences(&runs);
        assert!(
            s[0].starts_with("Cannot tell a and b apart at P=1"),
            "{s:?}"
        );
        assert!(s[0].contains("a 120 Mbit/s (70.3–170 Mbit/s)"), "{s:?}");
        let v = verdicts(&Comparison::build(&runs), ThroughputUnit::Mbits);
        assert!(!v[0].decided);
    }

    /// Three paths: each one compared with the best, apart or not, and a single run has no
    /// interval to tell by.
    #[test]
    fn each_path_is_compared_with_the_best() {
        let mut runs = Vec::new();
        for v in [1000.0, 1010.0, 990.0] {
            runs.push(tp("peering", 4, v));
            runs.push(tp("tgw", 4, v - 5.0));
            runs.push(tp("vpn", 4, v / 3.0));
        }
        runs.push(tp("public", 4, 100.0));
        let s = sentences(&runs);
        assert_eq!(
            s[0],
            "peering delivers 1.01× tgw (cannot tell: 95 % CIs overlap), 3.00× vpn (95 % CIs \
             apart) and 10.0× public (cannot tell: public has a single run, so no confidence \
             interval) at P=4."
        );
    }

    #[test]
    fn one_path_has_nothing_to_compare_with() {
        let s = sentences(&[tp("vpn", 2, 300.0), tp("vpn", 2, 310.0)]);
        assert_eq!(
            s[0],
            "Only vpn measured at P=2: receiver rate 305 Mbit/s (2 runs, 95 % CI 241–369 \
             Mbit/s); nothing to compare it with."
        );
    }

    fn rr(label: &str, p50: f64) -> Run {
        Run {
            facts: Default::default(),
            path: PathBuf::new(),
            label: label.into(),
            key: CellKey::of_spec(&TestSpec::request_response()),
            started_at: String::new(),
            length_s: None,
            measure: Measure::Rr(crate::run::RrResult {
                transactions_per_second: 1e6 / p50,
                min_us: p50 / 2.0,
                p50_us: p50,
                p90_us: p50 * 1.5,
                p99_us: p50 * 2.0,
                p99_9_us: p50 * 3.0,
                mean_us: p50,
                max_us: p50 * 4.0,
                stddev_us: 1.0,
                retransmits: 0,
                histogram: String::new(),
            }),
        }
    }

    /// Latency: lower is better, and the others are a multiple of the best's.
    #[test]
    fn latency_lower_is_better() {
        let runs: Vec<Run> = [40.0, 41.0, 42.0]
            .iter()
            .flat_map(|&v| [rr("vpn", v * 2.0), rr("peering", v)])
            .collect();
        let s = sentences(&runs);
        assert_eq!(
            s[0],
            "peering's median latency is 41.0 µs at -r 1,1 flows=1; vpn's is 2.00× (82.0 µs; 95 \
             % CIs apart)."
        );
    }

    fn udp(label: &str, loss: f64) -> Run {
        let lost = (loss * 100.0) as u64;
        crate::run::fixtures::udp(label, 100_000_000, 10_000, lost, loss, 0.1)
    }

    #[test]
    fn udp_compares_loss_and_says_when_nothing_was_lost() {
        let runs: Vec<Run> = [0.0, 0.01, 0.02]
            .iter()
            .flat_map(|&l| [udp("peering", l), udp("vpn", 3.0 + l)])
            .collect();
        let s = sentences(&runs);
        assert_eq!(
            s[0],
            "peering lost 0.010 % of its datagrams at b=100M l=1400 P=1; vpn 3.01 % (95 % CIs \
             apart)."
        );
        let none = sentences(&[udp("a", 0.0), udp("a", 0.0), udp("b", 0.0), udp("b", 0.0)]);
        assert_eq!(
            none[0],
            "No path lost a datagram at b=100M l=1400 P=1: a and b (every run)."
        );
    }
}
