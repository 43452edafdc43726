//! A path's table of its senders' TCP state on the page: a row per cell and direction, each
//! figure of the kernel's TCP_INFO (retransmits, smoothed RTT, congestion window, what held
//! the senders back, the window's ceiling) over the path's runs — what explains each rate.
//!
//! The table only: the figures are read from the run files by `facts`, and the page around
//! the table is `html`'s.

use std::collections::BTreeMap;

use xbench::config::StreamDirection;

use super::facts::{RunFacts, TcpFacts};
use super::markup::{Cell, Column, num_col, table, text_col};
use super::{both_directions, bytes, largest, runs_col};
use crate::cell::CellKey;
use crate::run::Run;
use crate::units::{RateScale, TimeUnit, number};

/// The senders' TCP state of path `li` (its `runs`) per cell and direction, rates in `unit`;
/// nothing when no run saved any.
pub(super) fn of_path(li: usize, runs: &[(&Run, &RunFacts)], unit: RateScale) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    let rtt = TimeUnit::for_micros(largest(
        rows.iter()
            .flat_map(|r| r.facts.iter().filter_map(|f| f.rtt_us.map(|x| x.1))),
    ));
    let mut cols: Vec<Column<'_, Row>> = vec![text_col("cell", |r: &Row| Cell::text(&r.cell))];
    if both_directions(rows.iter().map(|r| r.direction)) {
        cols.push(text_col("direction", |r: &Row| {
            Cell::text(r.direction.label())
        }));
    }
    cols.extend([
        runs_col(|r: &Row| r.facts.len()),
        num_col(
            "retr / run",
            "segments retransmitted per run, mean",
            |r: &Row| Cell::opt(r.mean(|f| Some(f.retransmits as f64)), number),
        ),
    ]);
    cols.extend(rtt_cols(rtt));
    cols.extend([
        num_col(
            "max cwnd",
            "largest congestion window of any stream, any run",
            |r: &Row| {
                let v = r.facts.iter().filter_map(|f| f.max_cwnd_bytes).max();
                Cell::opt(v.map(|v| v as f64), |v| bytes(v as u64))
            },
        ),
        share_col(
            "busy %",
            "share of the time the senders had data in flight, mean",
            |l| l.0,
        ),
        share_col(
            "rwnd-limited %",
            "share of the time the receive window held the senders back, mean",
            |l| l.1,
        ),
        share_col(
            "sndbuf-limited %",
            "share of the time the send buffer held the senders back, mean",
            |l| l.2,
        ),
        num_col(
            "window-limited runs",
            "runs the receive window limited",
            |r: &Row| {
                let n = r.facts.iter().filter(|f| f.window_limited).count();
                Cell::num(format!("{n} of {}", r.facts.len()), n as f64)
            },
        ),
        num_col(
            "window ceiling",
            "what the advertised window allows over the RTT, mean",
            move |r: &Row| Cell::opt(r.mean(|f| f.ceiling_bps), |v| unit.show(v)),
        ),
    ]);
    table(
        &format!("tcp-state-{li}"),
        "The senders' TCP state, from the kernel's TCP_INFO",
        &cols,
        &rows,
    )
}

/// A row of the table: one cell and direction, with the TCP state of each of its runs.
struct Row {
    cell: String,
    direction: StreamDirection,
    facts: Vec<TcpFacts>,
}

impl Row {
    /// The mean over the runs that have the figure `g` picks; `None` when none has it.
    fn mean(&self, g: impl Fn(&TcpFacts) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.facts.iter().filter_map(g).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Each run's smoothed RTT, µs: the one of its (smallest, mean, largest) `pick` chooses.
    fn rtts(&self, pick: fn((f64, f64, f64)) -> f64) -> impl Iterator<Item = f64> + '_ {
        self.facts.iter().filter_map(move |f| f.rtt_us.map(pick))
    }
}

/// The runs' TCP state grouped into rows, by cell as the comparison sorts them, then by
/// direction; each row's runs in the order given.
fn rows(runs: &[(&Run, &RunFacts)]) -> Vec<Row> {
    let mut by: BTreeMap<(CellKey, StreamDirection), Row> = BTreeMap::new();
    for (run, f) in runs {
        for t in &f.tcp {
            by.entry((run.key.clone(), t.direction))
                .or_insert_with(|| Row {
                    cell: run.key.describe(),
                    direction: t.direction,
                    facts: Vec::new(),
                })
                .facts
                .push(t.clone());
        }
    }
    by.into_values().collect()
}

/// The smallest, mean and largest smoothed RTT, in `rtt`: three columns of one unit and
/// format, apart so that each says only which figure it shows.
fn rtt_cols(rtt: TimeUnit) -> [Column<'static, Row>; 3] {
    let col = |head: &str, help: &str, v: fn(&Row) -> Option<f64>| {
        num_col(
            &format!("RTT {head} {}", rtt.label()),
            help,
            move |r: &Row| Cell::opt(v(r), |v| rtt.format(v)),
        )
    };
    [
        col("min", "smallest smoothed RTT of any run", |r| {
            let v = r.rtts(|x| x.0).fold(f64::INFINITY, f64::min);
            v.is_finite().then_some(v)
        }),
        col("mean", "mean smoothed RTT, mean over runs", |r| {
            r.mean(|f| f.rtt_us.map(|x| x.1))
        }),
        col("max", "largest smoothed RTT of any run", |r| {
            let v = r.rtts(|x| x.2).fold(f64::NEG_INFINITY, f64::max);
            v.is_finite().then_some(v)
        }),
    ]
}

/// A share of the time (busy, receive-window-limited, send-buffer-limited: `share` picks one
/// of TCP_INFO's limits), percent, mean over runs: one helper for three columns alike.
fn share_col(head: &str, help: &str, share: fn((f64, f64, f64)) -> f64) -> Column<'static, Row> {
    num_col(head, help, move |r: &Row| {
        Cell::opt(r.mean(|f| f.limits.map(share)), |v| {
            format!("{} %", number(v))
        })
    })
}
