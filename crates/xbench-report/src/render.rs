//! The comparison table as text (aligned columns for a terminal), Markdown, CSV (one line per
//! row and metric, for spreadsheets) and JSON (the document `schema/comparison.schema.json`
//! describes). Rendering only: the rows and their statistics come from `table`.

use std::fmt::Write as _;

use serde::Serialize;
use xbench::config::StreamDirection;

use crate::cell::Kind;
use crate::load::Warning;
use crate::stats::Stats;
use crate::table::{Comparison, RrRow, ThroughputRow, UdpRow, UnderLoadRow, UnderLoadUnits};
use crate::units::{RateScale, ThroughputUnit, TimeUnit, largest, number, percent};

/// Version of the comparison JSON layout. Bump when a field changes meaning or is removed.
pub const COMPARISON_SCHEMA_VERSION: u32 = 1;

/// Output formats of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Aligned columns.
    #[default]
    Text,
    /// A GitHub-flavoured Markdown table per section.
    Markdown,
    /// Comma-separated values, one line per row and metric.
    Csv,
    /// One JSON document.
    Json,
}

/// The JSON document of `xbench report --format json` and of a sweep's `--json`. `S` is the
/// sweep's summary (`xbench_sweep::SweepSummary`), which this crate does not know: it reads
/// what sweeps saved, it does not run them.
#[derive(Debug, Serialize)]
pub struct Document<'a, S = ()> {
    /// [`COMPARISON_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `"xbench-comparison"`, so a reader can tell it from a single test's report.
    pub document: &'static str,
    /// The xbench that wrote it.
    pub xbench_version: &'static str,
    /// Labels, throughput rows and request/response rows.
    #[serde(flatten)]
    pub comparison: &'a Comparison,
    /// Files left out, and why.
    pub warnings: &'a [Warning],
    /// For a sweep: what ran, where it was saved, and how it ended.
    pub sweep: Option<&'a S>,
}

impl<'a> Document<'a> {
    /// A document for `comparison`, with no sweep section.
    pub fn new(comparison: &'a Comparison, warnings: &'a [Warning]) -> Self {
        Document::build(comparison, warnings, None)
    }
}

impl<'a, S: Serialize> Document<'a, S> {
    /// A document for the runs of a sweep, with the sweep's summary.
    pub fn with_sweep(comparison: &'a Comparison, warnings: &'a [Warning], sweep: &'a S) -> Self {
        Document::build(comparison, warnings, Some(sweep))
    }

    fn build(comparison: &'a Comparison, warnings: &'a [Warning], sweep: Option<&'a S>) -> Self {
        Document {
            schema_version: COMPARISON_SCHEMA_VERSION,
            document: "xbench-comparison",
            xbench_version: env!("CARGO_PKG_VERSION"),
            comparison,
            warnings,
            sweep,
        }
    }

    /// Pretty-printed JSON with a final newline.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: serializing cannot fail, but say so if it ever does.
        let mut s = serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| format!("{{\"error\":\"cannot serialize the report: {e}\"}}"));
        s.push('\n');
        s
    }
}

/// Renders the table in `format`; JSON carries no sweep section (see [`Document`]). Rates are
/// in `unit`, a [`ThroughputUnit`] or [`RateScale::AUTO`] for the unit that suits each table's
/// largest figure; CSV, read by programs, keeps Mbit/s unless a unit is fixed.
pub fn render(c: &Comparison, format: Format, unit: impl Into<RateScale>) -> String {
    render_with_ceiling(c, format, unit, None)
}

/// [`render`], with each throughput row also as a percentage of a link's capacity,
/// `ceiling` bits per second (`xbench report --ceiling 1G`): a column in text and Markdown, a
/// `throughput_of_ceiling` metric in CSV. JSON keeps base units and is unchanged.
pub fn render_with_ceiling(
    c: &Comparison,
    format: Format,
    unit: impl Into<RateScale>,
    ceiling: Option<f64>,
) -> String {
    let ceiling = ceiling.filter(|c| *c > 0.0);
    let scale = unit.into();
    match format {
        Format::Text => sections(c, scale, ceiling, false),
        Format::Markdown => sections(c, scale, ceiling, true),
        Format::Csv => csv(c, scale.0.unwrap_or_default(), ceiling),
        Format::Json => Document::new(c, &[]).to_json(),
    }
}

/// The text and Markdown tables: a section per kind of test, in the order a reader meets them.
fn sections(c: &Comparison, scale: RateScale, ceiling: Option<f64>, md: bool) -> String {
    let mut out = String::new();
    throughput_sections(&mut out, c, scale, ceiling, md);
    rr_sections(&mut out, c, md);
    udp_sections(&mut out, c, scale, md);
    under_load_section(&mut out, &c.under_load, scale, md);
    if !c.paths.is_empty() {
        crate::paths::table_into(&mut out, &c.paths, md);
    }
    out
}

/// Throughput rows per direction: the receiver's rate over runs with its spread, and with
/// `ceiling` each mean's share of the link's capacity. A function per kind of test, as
/// [`udp_sections`].
fn throughput_sections(
    out: &mut String,
    c: &Comparison,
    scale: RateScale,
    ceiling: Option<f64>,
    md: bool,
) {
    for dir in [
        StreamDirection::ClientToServer,
        StreamDirection::ServerToClient,
    ] {
        let rows: Vec<&ThroughputRow> =
            c.throughput.iter().filter(|r| r.direction == dir).collect();
        if rows.is_empty() {
            continue;
        }
        let unit = scale.unit_for(largest(rows.iter().map(|r| r.bits_per_second.mean)));
        let rtt = TimeUnit::for_micros(largest(
            rows.iter()
                .filter_map(|r| r.rtt_us.as_ref().map(|x| x.mean)),
        ));
        let mut title = format!(
            "Throughput {}: receiver rate in {}, per run; 95 % CI of the mean (Student t)",
            dir.label(),
            unit.label()
        );
        let rtt_head = format!("RTT {}", rtt.label());
        let mut head = vec![
            "cell", "label", "runs", "mean", "stddev", "min", "max", "95 % CI", "CV", "retr",
            &rtt_head, "limit",
        ];
        if let Some(cap) = ceiling {
            let _ = write!(
                title,
                "; % of: mean as a share of the {} capacity",
                scale.show(cap)
            );
            head.insert(4, "% of");
        }
        let body = rows
            .iter()
            .map(|r| {
                let s = r.bits_per_second.scaled(unit.factor());
                let mut cells = vec![
                    r.cell_name.clone(),
                    r.label.clone(),
                    r.runs.to_string(),
                    number(s.mean),
                    opt(s.stddev),
                    number(s.min),
                    number(s.max),
                    ci(&s),
                    cv(&s),
                    number(r.retransmits.mean),
                    r.rtt_us.map_or("-".into(), |x| rtt.format(x.mean)),
                    limits(r),
                ];
                if let Some(cap) = ceiling {
                    cells.insert(
                        4,
                        format!("{} %", number(r.bits_per_second.mean / cap * 100.0)),
                    );
                }
                cells
            })
            .collect();
        table(out, &title, &head, body, md);
    }
}

/// Request/response rows, TCP_RR then TCP_CRR: each run's latency figures and rate, then,
/// when some cell ran more than once, their spread over runs.
fn rr_sections(out: &mut String, c: &Comparison, md: bool) {
    for kind in [Kind::Rr, Kind::Crr] {
        let rows: Vec<&RrRow> = c.rr.iter().filter(|r| r.cell.kind == kind).collect();
        if rows.is_empty() {
            continue;
        }
        let name = if kind == Kind::Rr {
            "Request/response (TCP_RR)"
        } else {
            "Connect/request/response (TCP_CRR)"
        };
        // netperf's figures (min/mean/max/stddev) beside the percentiles, as each run
        // measured them; the spread over runs in a table of its own.
        let t = TimeUnit::for_micros(largest(rows.iter().map(|r| r.p50_us.mean)));
        rr_figures(out, name, t, &rows, md);
        // One run has no spread: a table of dashes says nothing.
        if rows.iter().all(|r| r.runs < 2) {
            continue;
        }
        rr_spread(out, name, t, &rows, md);
    }
}

/// The request/response table of each run's figures (latency in `t`), mean over runs: what
/// netperf prints, beside the percentiles.
fn rr_figures(out: &mut String, name: &str, t: TimeUnit, rows: &[&RrRow], md: bool) {
    let title = format!(
        "{name}: latency in {}, and rate in transactions/s; each run's figure, mean over runs",
        t.label()
    );
    let head = [
        "cell", "label", "runs", "min", "mean", "p50", "p90", "p99", "max", "stddev", "rate",
        "retr",
    ];
    rr_table(out, &title, &head, rows, md, |r| {
        vec![
            t.format(r.min_us.mean),
            t.format(r.mean_us.mean),
            t.format(r.p50_us.mean),
            t.format(r.p90_us.mean),
            t.format(r.p99_us.mean),
            t.format(r.max_us.mean),
            t.format(r.stddev_us.mean),
            number(r.transactions_per_second.mean),
            number(r.retransmits.mean),
        ]
    });
}

/// The request/response table of the spread over runs (latency in `t`): confidence
/// intervals and variation, which a table of means hides.
fn rr_spread(out: &mut String, name: &str, t: TimeUnit, rows: &[&RrRow], md: bool) {
    let title = format!(
        "{name}: spread over runs, latency in {}; 95 % CI of the mean (Student t)",
        t.label()
    );
    let head = [
        "cell",
        "label",
        "runs",
        "p50 95 % CI",
        "p99 95 % CI",
        "rate 95 % CI",
        "rate stddev",
        "rate CV",
    ];
    rr_table(out, &title, &head, rows, md, |r| {
        vec![
            ci(&r.p50_us.scaled(t.of_micros(1.0))),
            ci(&r.p99_us.scaled(t.of_micros(1.0))),
            ci(&r.transactions_per_second),
            opt(r.transactions_per_second.stddev),
            cv(&r.transactions_per_second),
        ]
    });
}

/// A request/response table: each row's cell, label and runs, then the cells `figures` gives
/// it; the one row layout both request/response tables share.
fn rr_table(
    out: &mut String,
    title: &str,
    head: &[&str],
    rows: &[&RrRow],
    md: bool,
    figures: impl Fn(&RrRow) -> Vec<String>,
) {
    let body = rows
        .iter()
        .map(|r| {
            let mut cells = vec![r.cell_name.clone(), r.label.clone(), r.runs.to_string()];
            cells.extend(figures(r));
            cells
        })
        .collect();
    table(out, title, head, body, md);
}

/// UDP rows per direction: offered vs sent vs received rate, loss (count and %), reordering,
/// duplicates, jitter and the receiving kernel's buffer drops, each the mean of the runs'
/// figures with the 95 % CI of the ones that vary most from run to run.
fn udp_sections(out: &mut String, c: &Comparison, scale: RateScale, md: bool) {
    for dir in [
        StreamDirection::ClientToServer,
        StreamDirection::ServerToClient,
    ] {
        let rows: Vec<&UdpRow> = c.udp.iter().filter(|r| r.direction == dir).collect();
        if rows.is_empty() {
            continue;
        }
        let unit = scale.unit_for(largest(rows.iter().flat_map(|r| {
            [
                r.offered_bits_per_second.unwrap_or(0.0),
                r.sent_bits_per_second.mean,
                r.received_bits_per_second.mean,
            ]
        })));
        let jitter = TimeUnit::for_micros(largest(rows.iter().map(|r| r.jitter_ms.mean * 1e3)));
        let jitter_head = format!("jitter {}", jitter.label());
        let title = format!(
            "UDP {}: rates in {}, loss, reordering and jitter per run; mean over runs, 95 % CI \
             of the mean (Student t); buf drops: the receiving kernel's (part of the loss)",
            dir.label(),
            unit.label()
        );
        let head = [
            "cell",
            "label",
            "runs",
            "offered",
            "sent",
            "received",
            "recv 95 % CI",
            "lost",
            "lost %",
            "lost % 95 % CI",
            "reord",
            "dup",
            &jitter_head,
            "jitter 95 % CI",
            "buf drops",
        ];
        let f = unit.factor();
        let body = rows
            .iter()
            .map(|r| {
                let rx = r.received_bits_per_second.scaled(f);
                vec![
                    r.cell_name.clone(),
                    r.label.clone(),
                    r.runs.to_string(),
                    r.offered_bits_per_second
                        .map_or_else(|| "unpaced".into(), |o| number(o * f)),
                    number(r.sent_bits_per_second.mean * f),
                    number(rx.mean),
                    ci(&rx),
                    number(r.lost.mean),
                    percent(r.lost_percent.mean),
                    ci(&r.lost_percent),
                    number(r.out_of_order.mean),
                    r.duplicates.as_ref().map_or("-".into(), |d| number(d.mean)),
                    jitter.format(r.jitter_ms.mean * 1e3),
                    ci(&r.jitter_ms.scaled(jitter.of_micros(1e3))),
                    r.rxq_drops.as_ref().map_or("-".into(), |d| number(d.mean)),
                ]
            })
            .collect();
        table(out, &title, &head, body, md);
    }
}

/// Latency-under-load rows: the UDP probes' median idle and loaded, the loaded p99, what the
/// load added, the responsiveness, the probes lost under load and the load itself. Each
/// latency column has the unit its largest figure reads best in: idle medians in µs beside
/// loaded ones in ms is how a person writes a queue's effect.
fn under_load_section(out: &mut String, rows: &[UnderLoadRow], scale: RateScale, md: bool) {
    if rows.is_empty() {
        return;
    }
    let UnderLoadUnits {
        idle,
        loaded,
        p99,
        increase: incr,
    } = UnderLoadUnits::of(rows);
    let load = scale.unit_for(largest(rows.iter().map(|r| r.bulk_bits_per_second.mean)));
    let title = format!(
        "Latency under load: UDP probes' latency idle and loaded, each run's figure, mean over \
         runs; increase: loaded minus idle median; 95 % CI of the mean (Student t); RPM: round \
         trips a minute under load; lost: probes lost under load; load: the bulk streams' \
         receiver rate in {}, all directions summed",
        load.label()
    );
    let heads = [
        format!("idle p50 {}", idle.label()),
        format!("loaded p50 {}", loaded.label()),
        "loaded p50 95 % CI".to_owned(),
        format!("loaded p99 {}", p99.label()),
        format!("increase {}", incr.label()),
        "RPM".to_owned(),
        "lost".to_owned(),
        "load".to_owned(),
    ];
    let mut head = vec!["cell", "label", "runs"];
    head.extend(heads.iter().map(String::as_str));
    let shown = |u: TimeUnit, s: Option<Stats>| s.map_or_else(|| "-".into(), |s| u.format(s.mean));
    let body = rows
        .iter()
        .map(|r| {
            vec![
                r.cell_name.clone(),
                r.label.clone(),
                r.runs.to_string(),
                shown(idle, r.idle_p50_us),
                shown(loaded, r.loaded_p50_us),
                r.loaded_p50_us
                    .map_or_else(|| "-".into(), |s| ci(&s.scaled(loaded.of_micros(1.0)))),
                shown(p99, r.loaded_p99_us),
                r.increase_p50_us.map_or_else(
                    || "-".into(),
                    |s| {
                        let v = incr.of_micros(s.mean);
                        if v < 0.0 {
                            number(v)
                        } else {
                            format!("+{}", number(v))
                        }
                    },
                ),
                r.rpm.map_or_else(|| "-".into(), |s| number(s.mean)),
                percent(r.loaded_lost_percent.mean),
                number(r.bulk_bits_per_second.mean * load.factor()),
            ]
        })
        .collect();
    table(out, &title, &head, body, md);
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), number)
}

fn ci(s: &Stats) -> String {
    match (s.ci95_low, s.ci95_high) {
        (Some(lo), Some(hi)) => format!("{}–{}", number(lo), number(hi)),
        _ => "-".into(),
    }
}

fn cv(s: &Stats) -> String {
    s.cv.map_or("-".into(), |c| format!("{:.1} %", c * 100.0))
}

/// The runs' verdicts: one name when every diagnosed run agrees, else each with its count
/// (`receiver not keeping up 2/3, cannot tell 1/3`); `-` without a diagnosis (iperf3 files).
fn limits(r: &ThroughputRow) -> String {
    let diagnosed: usize = r.limits.iter().map(|v| v.runs).sum();
    match r.limits.as_slice() {
        [] => "-".into(),
        [one] if one.runs == r.runs => one.verdict.name().to_owned(),
        many => many
            .iter()
            .map(|v| format!("{} {}/{diagnosed}", v.verdict.name(), v.runs))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Appends one titled table; text columns (the first two) align left, figures right. In text,
/// a cell name repeated on consecutive rows is printed once.
pub(crate) fn table(
    out: &mut String,
    title: &str,
    head: &[&str],
    body: Vec<Vec<String>>,
    md: bool,
) {
    if !out.is_empty() {
        out.push('\n');
    }
    if md {
        let _ = writeln!(out, "**{title}**\n");
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let align: Vec<&str> = (0..head.len())
            .map(|i| if i < 2 { "---" } else { "---:" })
            .collect();
        let _ = writeln!(out, "| {} |", align.join(" | "));
        for row in body {
            let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        return;
    }
    let _ = writeln!(out, "{title}");
    let mut shown = body.clone();
    for i in (1..shown.len()).rev() {
        if shown[i][0] == shown[i - 1][0] {
            shown[i][0].clear();
        }
    }
    let width = |i: usize| {
        shown
            .iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..head.len()).map(width).collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if i < 2 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(head.to_vec()));
    for r in &shown {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

fn csv(c: &Comparison, unit: ThroughputUnit, ceiling: Option<f64>) -> String {
    let mut csv = Csv {
        out: String::from(
            "kind,direction,label,cell,tool,streams,window_bytes,request_bytes,response_bytes,\
             flows,metric,unit,runs,mean,stddev,min,max,ci95_low,ci95_high,cv\n",
        ),
        unit,
    };
    for r in &c.throughput {
        csv.throughput(r, ceiling);
    }
    for r in &c.rr {
        csv.rr(r);
    }
    for r in &c.udp {
        csv.udp(r);
    }
    for r in &c.under_load {
        csv.under_load(r);
    }
    csv.out
}

/// The CSV table being written: one line per (row, metric), the row's identifying columns
/// first.
struct Csv {
    out: String,
    unit: ThroughputUnit,
}

/// A count column, empty when the cell has none.
fn count_field(v: Option<u64>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

impl Csv {
    fn line(&mut self, row: &[String], metric: &str, u: &str, s: &Stats) {
        let num = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
        let fields: Vec<String> = row
            .iter()
            .cloned()
            .chain([
                metric.to_owned(),
                u.to_owned(),
                s.n.to_string(),
                num(Some(s.mean)),
                num(s.stddev),
                num(Some(s.min)),
                num(Some(s.max)),
                num(s.ci95_low),
                num(s.ci95_high),
                num(s.cv),
            ])
            .map(|f| csv_field(&f))
            .collect();
        let _ = writeln!(self.out, "{}", fields.join(","));
    }

    fn throughput(&mut self, r: &ThroughputRow, ceiling: Option<f64>) {
        let direction = dir_name(r.direction).to_owned();
        let row = bulk_fields("throughput", direction, &r.label, &r.cell_name, &r.cell);
        let unit = self.unit;
        let bps = r.bits_per_second.scaled(unit.factor());
        self.line(&row, "throughput", unit.label(), &bps);
        if let Some(cap) = ceiling {
            let share = r.bits_per_second.scaled(100.0 / cap);
            self.line(&row, "throughput_of_ceiling", "%", &share);
        }
        self.line(&row, "retransmits", "segments", &r.retransmits);
        if let Some(rtt) = &r.rtt_us {
            self.line(&row, "rtt", "us", rtt);
        }
    }

    fn rr(&mut self, r: &RrRow) {
        let k = &r.cell;
        let row = [
            if k.kind == Kind::Crr { "crr" } else { "rr" }.to_owned(),
            String::new(),
            r.label.clone(),
            r.cell_name.clone(),
            tool_name(k),
            String::new(),
            count_field(k.window),
            count_field(k.request_bytes.map(u64::from)),
            count_field(k.response_bytes.map(u64::from)),
            count_field(k.flows.map(u64::from)),
        ];
        self.line(&row, "transaction_rate", "1/s", &r.transactions_per_second);
        for (metric, s) in [
            ("min_latency", &r.min_us),
            ("mean_latency", &r.mean_us),
            ("p50_latency", &r.p50_us),
            ("p90_latency", &r.p90_us),
            ("p99_latency", &r.p99_us),
            ("p99_9_latency", &r.p99_9_us),
            ("max_latency", &r.max_us),
            ("stddev_latency", &r.stddev_us),
        ] {
            self.line(&row, metric, "us", s);
        }
        self.line(&row, "retransmits", "segments", &r.retransmits);
    }

    fn udp(&mut self, r: &UdpRow) {
        let direction = dir_name(r.direction).to_owned();
        let row = bulk_fields("udp", direction, &r.label, &r.cell_name, &r.cell);
        let (f, label) = (self.unit.factor(), self.unit.label());
        if let Some(o) = r.offered_bits_per_second
            && let Some(offered) = Stats::of(&vec![o * f; r.runs])
        {
            self.line(&row, "offered_rate", label, &offered);
        }
        self.line(&row, "sent_rate", label, &r.sent_bits_per_second.scaled(f));
        let received = r.received_bits_per_second.scaled(f);
        self.line(&row, "received_rate", label, &received);
        self.line(&row, "lost", "datagrams", &r.lost);
        self.line(&row, "lost_percent", "%", &r.lost_percent);
        self.line(&row, "out_of_order", "datagrams", &r.out_of_order);
        if let Some(d) = &r.duplicates {
            self.line(&row, "duplicates", "datagrams", d);
        }
        self.line(&row, "jitter", "ms", &r.jitter_ms);
        if let Some(d) = &r.rxq_drops {
            self.line(&row, "receive_buffer_drops", "datagrams", d);
        }
    }

    fn under_load(&mut self, r: &UnderLoadRow) {
        // The load's direction as `--under-load` names it; the streams are per direction.
        let direction = r.cell.direction.map_or(String::new(), |d| {
            match d {
                crate::cell::TestDirection::ClientToServer => "up",
                crate::cell::TestDirection::ServerToClient => "down",
                crate::cell::TestDirection::Bidir => "both",
            }
            .to_owned()
        });
        let row = bulk_fields("under_load", direction, &r.label, &r.cell_name, &r.cell);
        for (metric, s) in [
            ("idle_p50_latency", &r.idle_p50_us),
            ("loaded_p50_latency", &r.loaded_p50_us),
            ("loaded_p99_latency", &r.loaded_p99_us),
            ("increase_p50_latency", &r.increase_p50_us),
        ] {
            if let Some(s) = s {
                self.line(&row, metric, "us", s);
            }
        }
        if let Some(s) = &r.rpm {
            self.line(&row, "responsiveness", "RPM", s);
        }
        self.line(&row, "loaded_lost_percent", "%", &r.loaded_lost_percent);
        let load = r.bulk_bits_per_second.scaled(self.unit.factor());
        self.line(&row, "load_rate", self.unit.label(), &load);
    }
}

/// The first fields of a CSV line of a cell that moves bulk data (throughput, UDP, latency
/// under load): test, direction, path, cell, tool, streams and window, the request/response
/// fields empty.
fn bulk_fields(
    test: &str,
    direction: String,
    label: &str,
    cell_name: &str,
    k: &crate::cell::CellKey,
) -> [String; 10] {
    [
        test.to_owned(),
        direction,
        label.to_owned(),
        cell_name.to_owned(),
        tool_name(k),
        count_field(k.streams.map(u64::from)),
        count_field(k.window),
        String::new(),
        String::new(),
        String::new(),
    ]
}

fn dir_name(d: StreamDirection) -> &'static str {
    match d {
        StreamDirection::ClientToServer => "client_to_server",
        StreamDirection::ServerToClient => "server_to_client",
    }
}

fn tool_name(k: &crate::cell::CellKey) -> String {
    match k.tool {
        crate::cell::Tool::Xbench => "xbench".into(),
        crate::cell::Tool::Iperf3 => "iperf3".into(),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{CellKey, Tool};
    use crate::run::{Measure, Run};

    fn run(label: &str, p: u16, mbps: f64) -> Run {
        let mut r = crate::run::fixtures::tcp(label, p, mbps, 2, Some(88_000.0));
        r.path = format!("{label}/{p}.json").into();
        r
    }

    fn sample() -> Comparison {
        Comparison::build(&[
            run("peering", 1, 100.0),
            run("vpn", 1, 50.0),
            run("peering", 1, 110.0),
            run("vpn", 1, 54.0),
            run("peering", 2, 190.0),
        ])
    }

    #[test]
    fn text_puts_labels_of_a_cell_side_by_side() {
        let t = render(&sample(), Format::Text, ThroughputUnit::Mbits);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("Throughput client→server: receiver rate in Mbit/s"));
        assert!(lines[1].starts_with("cell  label"), "{t}");
        assert!(lines[2].starts_with("P=1   peering     2   105"), "{t}");
        // The cell name is not repeated; vpn follows peering.
        assert!(lines[3].starts_with("      vpn         2  52.0"), "{t}");
        assert!(lines[4].starts_with("P=2   peering     1   190"), "{t}");
        // 95 % CI of 100, 110: 105 ± 12.7062 · 7.0711 / 1.4142 = 105 ± 63.5.
        assert!(lines[2].contains("41.5–169"), "{t}");
    }

    #[test]
    fn markdown_and_csv() {
        let c = sample();
        let md = render(&c, Format::Markdown, ThroughputUnit::MBytes);
        assert!(md.contains("| cell | label | runs |"), "{md}");
        assert!(md.contains("| P=1 | peering | 2 | 13.1 |"), "{md}");
        let csv = render(&c, Format::Csv, ThroughputUnit::Gbits);
        let first = csv.lines().nth(1).unwrap();
        assert!(
            first.starts_with(
                "throughput,client_to_server,peering,P=1,xbench,1,,,,,throughput,Gbit/s,2,"
            ),
            "{first}"
        );
        let mean: f64 = first.split(',').nth(13).unwrap().parse().unwrap();
        assert!((mean - 0.105).abs() < 1e-12, "{first}");
        assert_eq!(csv.lines().count(), 1 + 3 * 3);
        let _ = Tool::Iperf3;
    }

    /// `--ceiling`: each row's mean as a share of the link, beside the mean, in every table
    /// format but JSON.
    #[test]
    fn a_ceiling_shows_each_rows_share_of_it() {
        let c = sample();
        let t = render_with_ceiling(&c, Format::Text, ThroughputUnit::MBytes, Some(1e9));
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with("share of the 125 MB/s capacity"), "{t}");
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cols[..5], ["cell", "label", "runs", "mean", "%"], "{t}");
        // peering P=1: 105 Mbit/s of 1 Gbit/s; vpn: 52; peering P=2: 190.
        for (line, share) in [(2, "10.5 %"), (3, "5.20 %"), (4, "19.0 %")] {
            assert!(lines[line].contains(share), "{share} in {}", lines[line]);
        }
        let md = render_with_ceiling(&c, Format::Markdown, ThroughputUnit::Mbits, Some(1e9));
        assert!(md.contains("| 105 | 10.5 % |"), "{md}");
        let csv = render_with_ceiling(&c, Format::Csv, ThroughputUnit::Mbits, Some(1e9));
        let share = csv
            .lines()
            .find(|l| l.contains(",throughput_of_ceiling,%,2,"))
            .expect("a share line");
        let mean: f64 = share.split(',').nth(13).unwrap().parse().unwrap();
        assert!((mean - 10.5).abs() < 1e-9, "{share}");
        assert_eq!(
            render_with_ceiling(&c, Format::Json, ThroughputUnit::Mbits, Some(1e9)),
            render(&c, Format::Json, ThroughputUnit::Mbits)
        );
        assert!(!render(&c, Format::Text, ThroughputUnit::Mbits).contains("% of"));
    }

    /// Issue 31: tables printed "34065 … 19697–48433" Mbit/s and a 20 ms path's latency in µs;
    /// each table now reads in the unit its largest figure suits, three significant digits,
    /// unless a unit is fixed, and one run gets no "spread over runs" table of dashes.
    #[test]
    fn tables_scale_to_their_figures_unless_a_unit_is_fixed() {
        let c = Comparison::build(&[run("peering", 1, 34_065.0), run("peering", 1, 33_000.0)]);
        let t = render(&c, Format::Text, RateScale::AUTO);
        assert!(t.contains("receiver rate in Gbit/s"), "{t}");
        let row: Vec<&str> = t
            .lines()
            .find(|l| l.starts_with("P=1"))
            .unwrap()
            .split_whitespace()
            .collect();
        // mean, stddev, min, max, CI, …, and the RTT of 88 ms in ms.
        assert_eq!(
            row[3..8],
            ["33.5", "0.753", "33.0", "34.1", "26.8–40.3"],
            "{t}"
        );
        // The RTT, then the limit column (no verdict in these runs).
        assert_eq!(row[row.len() - 2..], ["88.0", "-"], "{t}");
        assert!(t.contains("RTT ms"), "{t}");
        let fixed = render(&c, Format::Text, ThroughputUnit::Mbits);
        assert!(fixed.contains(" 33,532 "), "{fixed}");

        let one = Comparison::build(&[rr_run("vpn", 10_000.0)]);
        let t = render(&one, Format::Text, RateScale::AUTO);
        assert!(t.contains("latency in ms"), "{t}");
        assert!(!t.contains("spread over runs"), "{t}");
    }

    fn rr_run(label: &str, base: f64) -> Run {
        Run {
            path: format!("{label}/rr-{base}.json").into(),
            label: label.into(),
            key: CellKey::of_spec(&xbench::config::TestSpec::request_response()),
            started_at: String::new(),
            length_s: None,
            facts: Default::default(),
            measure: Measure::Rr(crate::run::RrResult {
                transactions_per_second: 300.0 * base,
                min_us: base,
                p50_us: 2.0 * base,
                p90_us: 3.0 * base,
                p99_us: 4.0 * base,
                p99_9_us: 5.0 * base,
                mean_us: 2.5 * base,
                max_us: 10.0 * base,
                stddev_us: 0.5 * base,
                retransmits: 1,
                histogram: String::new(),
            }),
        }
    }

    /// The figures netperf users compare (min/mean/max/stddev) beside p50/p90/p99 and the
    /// rate, each the mean over runs of the run's own figure; the spread in its own table.
    #[test]
    fn request_response_rows_carry_netperf_figures_and_percentiles() {
        let c = Comparison::build(&[rr_run("peering", 40.0), rr_run("peering", 60.0)]);
        let t = render(&c, Format::Text, ThroughputUnit::Mbits);
        let lines: Vec<&str> = t.lines().collect();
        let head = lines.iter().position(|l| l.starts_with("cell")).unwrap();
        let cols: Vec<&str> = lines[head].split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "cell", "label", "runs", "min", "mean", "p50", "p90", "p99", "max", "stddev",
                "rate", "retr"
            ],
            "{t}"
        );
        let row: Vec<&str> = lines[head + 1].split_whitespace().collect();
        // The cell name is one word here; the row's figures follow it.
        assert_eq!(
            row[row.len() - 10..],
            [
                "2", "50.0", "125", "100", "150", "200", "500", "25.0", "15,000", "1.00"
            ],
            "{t}"
        );
        assert!(
            t.contains("spread over runs, latency in µs; 95 % CI of the mean"),
            "{t}"
        );
        assert!(t.contains("p50 95 % CI"), "{t}");
        let csv = render(&c, Format::Csv, ThroughputUnit::Mbits);
        for metric in [
            "min_latency",
            "mean_latency",
            "p90_latency",
            "max_latency",
            "stddev_latency",
        ] {
            assert!(csv.contains(&format!(",{metric},us,2,")), "{metric}: {csv}");
        }
    }

    fn udp_run(label: &str, lost: u64, jitter: f64) -> Run {
        let lost_pct = lost as f64 / 200.0;
        let mut r = crate::run::fixtures::udp(label, 200_000_000, 20_000, lost, lost_pct, jitter);
        r.path = format!("{label}.json").into();
        if let Measure::Udp(dirs) = &mut r.measure {
            let d = &mut dirs[0];
            d.received_bps = 200e6 * (1.0 - lost as f64 / 20_000.0);
            d.out_of_order = 3;
            d.duplicates = Some(1);
            d.rxq_drops = Some(lost / 2);
        }
        r
    }

    /// A UDP cell: offered, sent and received rates, loss as a count and a share, reordering,
    /// duplicates, jitter and the kernel's buffer drops, each the mean over runs.
    #[test]
    fn udp_rows_show_offered_vs_received_and_loss() {
        let c = Comparison::build(&[udp_run("vpn", 100, 0.2), udp_run("vpn", 300, 0.4)]);
        assert_eq!(c.udp.len(), 1);
        let r = &c.udp[0];
        assert_eq!((r.runs, r.lost.mean, r.lost_percent.mean), (2, 200.0, 1.0));
        assert_eq!(r.cell_name, "b=200M l=1400 P=1");
        let t = render(&c, Format::Text, ThroughputUnit::Mbits);
        let lines: Vec<&str> = t.lines().collect();
        let head = lines.iter().position(|l| l.starts_with("cell")).unwrap();
        assert!(lines[head - 1].starts_with("UDP client→server"), "{t}");
        let row: Vec<&str> = lines[head + 1].split_whitespace().collect();
        // After "b=200M l=1400 P=1 vpn": runs, offered, sent, received, CI, lost, lost % (2
        // words), its CI, reord, dup, jitter, its CI, buf drops.
        assert_eq!(
            row[4..],
            [
                "2",
                "200",
                "200",
                "198",
                "185–211",
                "200",
                "1.00",
                "%",
                "-5.35–7.35",
                "3.00",
                "1.00",
                // 0.3 ms of jitter, in the µs the column's largest figure reads best in.
                "300",
                "-971–1,571",
                "100"
            ],
            "{t}"
        );
        let csv = render(&c, Format::Csv, ThroughputUnit::Mbits);
        for (metric, unit) in [
            ("offered_rate", "Mbit/s"),
            ("received_rate", "Mbit/s"),
            ("lost_percent", "%"),
            ("jitter", "ms"),
            ("receive_buffer_drops", "datagrams"),
        ] {
            assert!(
                csv.contains(&format!(",{metric},{unit},2,")),
                "{metric}: {csv}"
            );
        }
        let json: serde_json::Value =
            serde_json::from_str(&render(&c, Format::Json, ThroughputUnit::Mbits)).unwrap();
        assert_eq!(json["udp"][0]["lost_percent"]["mean"], 1.0);
        assert_eq!(json["udp"][0]["cell"]["kind"], "udp");
        assert_eq!(
            json["udp"][0]["cell"]["offered_bits_per_second"],
            200_000_000
        );
    }

    /// Issue 34: under-load runs showed as plain throughput rows. They get a table of their
    /// own, each latency column in the unit its figures read best in (idle in µs, loaded in
    /// ms), the increase signed, and no throughput table of their bulk streams.
    #[test]
    fn under_load_rows_get_their_own_table() {
        use crate::run::fixtures;
        let c = Comparison::build(&[
            fixtures::run("vpn", 1, 300.0, 20_000.0, 0),
            fixtures::run("vpn", 2, 340.0, 30_000.0, 2),
            fixtures::run("peering", 1, 100.0, 1_000.0, 0),
        ]);
        let t = render(&c, Format::Text, RateScale::AUTO);
        assert!(!t.contains("Throughput"), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("Latency under load: "), "{t}");
        assert!(
            lines[0].ends_with("receiver rate in Mbit/s, all directions summed"),
            "{t}"
        );
        let head: Vec<&str> = lines[1]
            .split("  ")
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .collect();
        assert_eq!(
            head,
            [
                "cell",
                "label",
                "runs",
                "idle p50 µs",
                "loaded p50 ms",
                "loaded p50 95 % CI",
                "loaded p99 ms",
                "increase ms",
                "RPM",
                "lost",
                "load"
            ],
            "{t}"
        );
        let row: Vec<&str> = lines[2].split_whitespace().collect();
        // vpn: medians 319 µs and 24.9 ms; the increase signed; RPM 2,500; 2.38 % lost; 95.0.
        assert_eq!(row[..5], ["P=1", "load=up", "vpn", "2", "319"], "{t}");
        assert_eq!(row[5], "24.9", "{t}");
        assert!(row[7].parse::<f64>().is_ok(), "{t}");
        assert!(row[8].starts_with('+'), "{t}");
        assert_eq!(row[9..], ["2,500", "2.38", "%", "95.0"], "{t}");
        // peering: one run, no interval; its cell name is not repeated.
        assert!(lines[3].starts_with("             peering"), "{t}");
        assert!(lines[3].contains(" - "), "{t}");

        let md = render(&c, Format::Markdown, ThroughputUnit::Mbits);
        assert!(md.contains("**Latency under load: "), "{md}");
        assert!(
            md.contains("| P=1 load=up | vpn | 2 | 319 | 24.9 |"),
            "{md}"
        );
        let csv = render(&c, Format::Csv, ThroughputUnit::Mbits);
        for (metric, unit) in [
            ("idle_p50_latency", "us"),
            ("loaded_p50_latency", "us"),
            ("loaded_p99_latency", "us"),
            ("increase_p50_latency", "us"),
            ("responsiveness", "RPM"),
            ("loaded_lost_percent", "%"),
            ("load_rate", "Mbit/s"),
        ] {
            let want = format!("under_load,up,vpn,P=1 load=up,xbench,1,,,,,{metric},{unit},2,");
            assert!(csv.contains(&want), "{want}: {csv}");
        }
    }

    /// The comparison JSON with under-load rows validates against the committed schema, and
    /// says what the tables show.
    #[test]
    fn the_comparison_json_of_under_load_runs_follows_the_schema() {
        use crate::run::fixtures;
        let mut runs = vec![
            fixtures::run("vpn", 1, 300.0, 20_000.0, 0),
            fixtures::run("vpn", 2, 340.0, 30_000.0, 2),
        ];
        if let Measure::UnderLoad(u) = &mut runs[1].measure {
            u.probes.udp.loaded = fixtures::phase(&[], 40);
            u.probes.udp.increase = None;
            u.probes.responsiveness = None;
        }
        runs.extend([
            run("vpn", 1, 100.0),
            udp_run("vpn", 10, 0.1),
            rr_run("vpn", 50.0),
        ]);
        let c = Comparison::build(&runs);
        let doc: serde_json::Value =
            serde_json::from_str(&render(&c, Format::Json, ThroughputUnit::Mbits)).unwrap();
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../schema/comparison.schema.json")).unwrap();
        let v = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = v
            .iter_errors(&doc)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "schema violations: {errors:#?}");
        let ul = &doc["under_load"][0];
        assert_eq!(ul["cell"]["kind"], "under_load");
        assert_eq!(ul["cell_name"], "P=1 load=up");
        assert_eq!(ul["runs"], 2);
        assert_eq!(ul["loaded_p50_us"]["n"], 1);
        assert_eq!(ul["loaded_lost_percent"]["mean"], 50.0);
        assert_eq!(doc["throughput"].as_array().unwrap().len(), 1);
        // A field the schema does not know is refused: the test can fail.
        let mut bad = doc.clone();
        bad["under_load"][0]["surprise"] = serde_json::json!(1);
        assert!(v.iter_errors(&bad).next().is_some());
    }
}
