//! `xbench report DIR… --html FILE`: the comparison as one self-contained web page, for people
//! who were not at the terminal — a lead, the team choosing a VPN — and who open it from disk
//! or an email attachment.
//!
//! One file holds everything: styles and script inline, system fonts, every chart as inline SVG
//! drawn from the `chart` module's series (the same data `--plot` draws), and nothing fetched
//! — a Content-Security-Policy of `default-src 'none'` (scripts and styles allowed by their
//! hashes) makes sure of it. The page reads top-down: a headline (the paths, when and where
//! they were measured, one verdict sentence per cell from [`crate::verdict`]), then a section
//! per kind of test (charts, then sortable tables with their confidence intervals), then each
//! path's TCP state, warnings and runs (linked by relative paths), the fields of the files this
//! version does not know (shown as saved, never dropped), and the commands.
//!
//! Extending it: a table is a list of columns (`markup::num_col`), so a new figure is a line
//! in the table's function; a new section is a function returning `Section`, added to the
//! list in [`render`]; a new chart kind is one more `chart::plan` in its section.
//!
//! This module builds the page and writes the file; it prints nothing and runs no test.

mod facts;
mod markup;
mod svg;
mod tcp_state;

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};
use xbench::config::StreamDirection;

use self::facts::{RunFacts, merge_unknown};
use self::markup::{Cell, Column, esc, href, num_col, table, text_col};
use crate::cell::{CellKey, Kind};
use crate::chart::{self, ChartData, ChartKind};
use crate::load::{DEFAULT_FILE_LIMIT, LoadError, Loaded};
use crate::run::Run;
use crate::stats::Stats;
use crate::table::{Comparison, RrRow, ThroughputRow, UdpRow, UnderLoadRow, UnderLoadUnits};
use crate::units::{RateScale, TimeUnit, largest, number, percent};

/// What the page says beyond the runs themselves.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The page's title; default "Path comparison: a, b and c".
    pub title: Option<String>,
    /// Rates in this unit, or scaled to each table's and chart's largest figure.
    pub unit: RateScale,
    /// A link's capacity, bits per second: a line on the throughput charts and a column of
    /// each row's share of it (`--ceiling`).
    pub ceiling: Option<f64>,
    /// The commands that produced the runs, as the caller knows them (the `xbench client`
    /// sweep per path, a deployment's commands), shown so a reader can run them again.
    pub commands: Vec<Command>,
    /// The command that wrote this page (`xbench report runs/ --html report.html`).
    pub generated_by: Option<String>,
    /// Facts about each path only the caller knows: region, instance type, the lab's
    /// emulated delay. Shown in the headline's table of paths, a column per name.
    pub notes: Vec<PathNote>,
    /// The largest run file read again for the page's details (each path's TCP state, where
    /// it was measured), bytes; `None` is [`crate::load::DEFAULT_FILE_LIMIT`]. The limit the
    /// runs were loaded with (`--max-file-size`), so a file the table used is never skipped.
    pub file_limit: Option<u64>,
}

/// A command line shown in the page's "how it was measured".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The path it measured, when it measured one.
    pub label: Option<String>,
    /// The command, as a shell reads it.
    pub line: String,
}

/// One fact about a path (`region` = `eu-west-1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathNote {
    /// The path's label.
    pub label: String,
    /// What the fact is (a column heading).
    pub name: String,
    /// Its value.
    pub value: String,
}

/// What [`write()`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The page's size, bytes.
    pub bytes: usize,
    /// Runs on the page.
    pub runs: usize,
    /// Files skipped (not runs, unreadable), each with why.
    pub skipped: Vec<String>,
}

/// Why no page was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HtmlError {
    /// A directory or file named could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Nothing usable was found.
    #[error(
        "no xbench or iperf3 results in {dirs} ({seen} files looked at); save runs with \
         `xbench client … --save DIR`"
    )]
    NoRuns {
        /// The directories named.
        dirs: String,
        /// Files looked at.
        seen: usize,
    },
    /// The page could not be written.
    #[error("cannot write {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error (in the message, not a separate cause, so it reads once).
        error: std::io::Error,
    },
}

/// Reads the runs under `dirs` and writes their page to `out`: the one call a program that
/// saved runs needs (a deployment writes its report beside its runs with it).
///
/// ```no_run
/// use std::path::{Path, PathBuf};
/// let out = Path::new("results");
/// xbench_report::html::write(&[out.to_path_buf()], &out.join("report.html"), &Default::default())?;
/// # Ok::<(), xbench_report::html::HtmlError>(())
/// ```
pub fn write(dirs: &[PathBuf], out: &Path, options: &Options) -> Result<Written, HtmlError> {
    let loaded = crate::load(dirs)?;
    if loaded.runs.is_empty() {
        return Err(HtmlError::NoRuns {
            dirs: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            seen: loaded.files_seen,
        });
    }
    write_loaded(&loaded, out, options)
}

/// [`write()`] for runs already read. The page is written under [`xbench::file`]'s rule:
/// atomically over a regular file or a new name, through a symbolic link to its target (the
/// link stays), in place into a FIFO or a device (`/dev/null` stays a device), never over a
/// directory or a socket.
pub fn write_loaded(loaded: &Loaded, out: &Path, options: &Options) -> Result<Written, HtmlError> {
    let page = render(loaded, out, options);
    xbench::file::write_atomically(out, page.as_bytes()).map_err(|error| HtmlError::Io {
        path: out.to_path_buf(),
        error,
    })?;
    Ok(Written {
        bytes: page.len(),
        runs: loaded.runs.len(),
        skipped: loaded.warnings.iter().map(|w| w.to_string()).collect(),
    })
}

/// The page for `loaded`, its links to the runs relative to where it will be written (`out`).
pub fn render(loaded: &Loaded, out: &Path, options: &Options) -> String {
    let page = Page::new(loaded, out, options);
    let mut sections = vec![page.headline()];
    sections.extend(page.tcp_section());
    sections.extend(page.rr_section());
    sections.extend(page.udp_section());
    sections.extend(page.under_load_section());
    sections.push(page.paths_section());
    sections.extend(page.skipped_section());
    sections.push(page.commands_section());
    page.document(&sections)
}

/// A part of the page with its own heading and an entry in the contents.
struct Section {
    id: &'static str,
    title: String,
    body: String,
}

struct Page<'a> {
    loaded: &'a Loaded,
    facts: Vec<RunFacts>,
    table: Comparison,
    options: &'a Options,
    /// The directory the page is written to, absolute: links start there.
    base: PathBuf,
}

impl<'a> Page<'a> {
    fn new(loaded: &'a Loaded, out: &Path, options: &'a Options) -> Self {
        let dir = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Page {
            loaded,
            facts: loaded
                .runs
                .iter()
                .map(|r| RunFacts::of(r, options.file_limit.unwrap_or(DEFAULT_FILE_LIMIT)))
                .collect(),
            table: Comparison::build(&loaded.runs),
            options,
            base: absolute(dir),
        }
    }

    fn runs(&self) -> &[Run] {
        &self.loaded.runs
    }

    fn labels(&self) -> &[String] {
        &self.table.labels
    }

    /// The runs of `label` with their facts.
    fn of_label<'b>(&'b self, label: &'b str) -> impl Iterator<Item = (&'b Run, &'b RunFacts)> {
        self.runs()
            .iter()
            .zip(&self.facts)
            .filter(move |(r, _)| r.label == label)
    }

    fn link(&self, run: &Run) -> Option<String> {
        if run.path.as_os_str().is_empty() {
            return None;
        }
        Some(relative(&self.base, &absolute(&run.path)))
    }

    fn title(&self) -> String {
        self.options
            .title
            .clone()
            .unwrap_or_else(|| format!("Path comparison: {}", join_and(self.labels())))
    }

    // ---- the headline ------------------------------------------------------------------

    fn headline(&self) -> Section {
        let mut b = String::new();
        let runs = self.runs();
        let dates = date_range(runs.iter().map(|r| r.started_at.as_str()));
        let _ = write!(
            b,
            "<p class=\"lead\">{} run{} of {} path{}{}.</p>",
            runs.len(),
            plural(runs.len()),
            self.labels().len(),
            plural(self.labels().len()),
            dates.map(|d| format!(", measured {d}")).unwrap_or_default()
        );
        let verdicts = crate::verdict::verdicts(&self.table, self.options.unit);
        if !verdicts.is_empty() {
            b.push_str("<ul class=\"verdicts\">");
            for v in &verdicts {
                let kind = match v.kind {
                    Kind::Throughput => "TCP",
                    Kind::Rr => "TCP_RR",
                    Kind::Crr => "TCP_CRR",
                    Kind::Udp => "UDP",
                    Kind::UnderLoad => "under load",
                };
                let _ = write!(
                    b,
                    "<li class=\"{}\"><span class=\"vk\">{kind} {}</span> {}</li>",
                    if v.decided { "told" } else { "untold" },
                    esc(&v.cell_name),
                    esc(&v.sentence)
                );
            }
            b.push_str(
                "</ul><p class=\"note\">Two paths are told apart only where their 95 % \
                        confidence intervals of the mean (Student t, over runs) do not \
                        overlap; elsewhere the runs cannot tell.</p>",
            );
        }
        b.push_str(&self.where_table());
        Section {
            id: "headline",
            title: self.title(),
            body: b,
        }
    }

    /// Where each path was measured: hosts, addresses, software, dates, and the caller's
    /// notes (region, instance type) as columns.
    fn where_table(&self) -> String {
        let mut note_names: Vec<&str> = Vec::new();
        for n in &self.options.notes {
            if !note_names.contains(&n.name.as_str()) {
                note_names.push(&n.name);
            }
        }
        struct Row<'r> {
            label: &'r str,
            runs: Vec<(&'r Run, &'r RunFacts)>,
        }
        let rows: Vec<Row<'_>> = self
            .labels()
            .iter()
            .map(|l| Row {
                label: l,
                runs: self.of_label(l).collect(),
            })
            .collect();
        let distinct = |r: &Row<'_>, f: &dyn Fn(&RunFacts) -> Option<String>| {
            let mut v: Vec<String> = r.runs.iter().filter_map(|(_, x)| f(x)).collect();
            v.sort();
            v.dedup();
            if v.is_empty() {
                "-".to_owned()
            } else {
                v.join(", ")
            }
        };
        let mut cols: Vec<Column<'_, Row<'_>>> = vec![
            text_col("path", |r: &Row<'_>| Cell::text(r.label)),
            num_col("runs", "saved runs read", |r: &Row<'_>| {
                Cell::num(r.runs.len().to_string(), r.runs.len() as f64)
            }),
            text_col("server (as given)", move |r: &Row<'_>| {
                Cell::text(distinct(r, &|f| f.host.clone()))
            }),
            text_col("client → server address", move |r: &Row<'_>| {
                Cell::text(distinct(r, &|f| {
                    Some(format!(
                        "{} → {}",
                        f.client_ip.as_deref().unwrap_or("?"),
                        f.server_ip.as_deref()?
                    ))
                }))
            }),
            text_col("software", move |r: &Row<'_>| {
                Cell::text(distinct(r, &|f| match (&f.writer, &f.server_software) {
                    (Some(w), Some(s)) if w != s => Some(format!("{w}, server {s}")),
                    (w, s) => w.clone().or(s.clone()),
                }))
            }),
            text_col("measured", |r: &Row<'_>| {
                Cell::text(
                    date_range(r.runs.iter().map(|(x, _)| x.started_at.as_str()))
                        .unwrap_or_else(|| "-".into()),
                )
            }),
        ];
        for name in note_names {
            let notes = &self.options.notes;
            cols.push(text_col(name, move |r: &Row<'_>| {
                Cell::text(
                    notes
                        .iter()
                        .filter(|n| n.label == r.label && n.name == name)
                        .map(|n| n.value.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                )
            }));
        }
        table("paths", "Where each path was measured", &cols, &rows)
    }

    // ---- TCP throughput ----------------------------------------------------------------

    fn tcp_section(&self) -> Option<Section> {
        if self.table.throughput.is_empty() {
            return None;
        }
        let tcp: Vec<Run> = self
            .runs()
            .iter()
            .filter(|r| !r.is_rr() && !r.is_udp() && !r.is_under_load())
            .cloned()
            .collect();
        let mut b = String::new();
        let distinct = |f: &dyn Fn(&Run) -> Option<u64>| {
            let mut v: Vec<u64> = tcp.iter().filter_map(f).collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        let mut kinds = Vec::new();
        if distinct(&|r| r.key.streams.map(u64::from)) > 1 {
            kinds.push(ChartKind::Streams);
        }
        if distinct(&|r| r.key.window) > 1 {
            kinds.push(ChartKind::Window);
        }
        for kind in kinds {
            if let Some(f) = self.chart(&tcp, kind, "tcp-table", kind.name()) {
                b.push_str(&f);
            }
        }
        b.push_str(&self.throughput_table());
        // The timeline of each cell: how the rate, windows and retransmits moved in the runs.
        let mut cells: Vec<&CellKey> = Vec::new();
        for r in &self.table.throughput {
            if !cells.contains(&&r.cell) {
                cells.push(&r.cell);
            }
        }
        let mut timelines = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let runs: Vec<Run> = tcp.iter().filter(|r| &&r.key == cell).cloned().collect();
            if let Some(f) = self.chart(&runs, ChartKind::Timeline, "", &format!("timeline-{i}")) {
                timelines.push_str(&f);
            }
        }
        if !timelines.is_empty() {
            b.push_str("<h3>Per interval, cell by cell</h3>");
            b.push_str(&timelines);
        }
        Some(Section {
            id: "tcp",
            title: "TCP throughput".into(),
            body: b,
        })
    }

    /// One chart as a figure, or nothing when the runs have nothing it draws.
    fn chart(&self, runs: &[Run], kind: ChartKind, table_id: &str, id: &str) -> Option<String> {
        let mut data: ChartData = chart::plan(runs, Some(kind), self.options.unit).ok()?;
        if let Some(c) = self.options.ceiling
            && data.rate_unit.is_some()
        {
            // Only charts with a throughput axis take it; the others are drawn without.
            let _ = chart::add_ceiling(&mut data, c);
        }
        if data.not_drawn > 0 {
            data.subtitle.push_str(&format!(
                "; {} more run{} not drawn (at most {} overlaid)",
                data.not_drawn,
                plural(data.not_drawn),
                chart::MAX_TIMELINE_RUNS
            ));
        }
        Some(svg::figure(
            &format!("fig-{id}"),
            &data,
            (!table_id.is_empty()).then_some(table_id),
        ))
    }

    fn throughput_table(&self) -> String {
        // Long on purpose: the TCP table's columns in page order, the optional ones (direction,
        // share of the ceiling) in their place; split, a reader would lose the column order.
        let rows: Vec<&ThroughputRow> = self.table.throughput.iter().collect();
        let unit = self
            .options
            .unit
            .unit_for(largest(rows.iter().map(|r| r.bits_per_second.mean)));
        let u = unit.label();
        let f = unit.factor();
        let rtt = TimeUnit::for_micros(largest(
            rows.iter().filter_map(|r| r.rtt_us.map(|x| x.mean)),
        ));
        let both = both_directions(rows.iter().map(|r| r.direction));
        let mut cols: Vec<Column<'_, &ThroughputRow>> =
            vec![text_col("cell", |r: &&ThroughputRow| {
                Cell::text(&r.cell_name)
            })];
        if both {
            cols.push(text_col("direction", |r: &&ThroughputRow| {
                Cell::text(r.direction.label())
            }));
        }
        cols.extend([
            text_col("path", |r: &&ThroughputRow| Cell::text(&r.label)),
            runs_col(|r: &&ThroughputRow| r.runs),
            num_col(
                &format!("mean {u}"),
                "receiver rate, mean over runs",
                move |r: &&ThroughputRow| {
                    Cell::num(number(r.bits_per_second.mean * f), r.bits_per_second.mean)
                },
            ),
            ci_col(&format!("95 % CI {u}"), move |r: &&ThroughputRow| {
                (r.bits_per_second, f)
            }),
            num_col(
                &format!("stddev {u}"),
                "sample standard deviation over runs",
                move |r: &&ThroughputRow| Cell::opt(r.bits_per_second.stddev, |v| number(v * f)),
            ),
            num_col(
                &format!("min {u}"),
                "slowest run",
                move |r: &&ThroughputRow| {
                    Cell::num(number(r.bits_per_second.min * f), r.bits_per_second.min)
                },
            ),
            num_col(
                &format!("max {u}"),
                "fastest run",
                move |r: &&ThroughputRow| {
                    Cell::num(number(r.bits_per_second.max * f), r.bits_per_second.max)
                },
            ),
            num_col(
                "CV",
                "coefficient of variation: stddev ÷ mean",
                |r: &&ThroughputRow| Cell::opt(r.bits_per_second.cv, |v| percent(v * 100.0)),
            ),
        ]);
        if let Some(cap) = self.options.ceiling {
            let name = format!("% of {}", self.options.unit.show(cap));
            cols.push(num_col(
                &name,
                "mean as a share of the link's capacity",
                move |r: &&ThroughputRow| {
                    let share = r.bits_per_second.mean / cap * 100.0;
                    Cell::num(format!("{} %", number(share)), share)
                },
            ));
        }
        cols.extend([
            num_col(
                "retr / run",
                "segments retransmitted per run, mean",
                |r: &&ThroughputRow| Cell::num(number(r.retransmits.mean), r.retransmits.mean),
            ),
            num_col(
                &format!("RTT {}", rtt.label()),
                "mean smoothed RTT, mean over runs",
                move |r: &&ThroughputRow| Cell::opt(r.rtt_us.map(|x| x.mean), |v| rtt.format(v)),
            ),
        ]);
        table(
            "tcp-table",
            "Receiver throughput per cell and path: mean of the runs with its 95 % confidence \
             interval (Student t)",
            &cols,
            &rows,
        )
    }

    // ---- request/response ----------------------------------------------------------------

    fn rr_section(&self) -> Option<Section> {
        if self.table.rr.is_empty() {
            return None;
        }
        Some(self.kind_section(
            ("rr", "Request/response latency"),
            Run::is_rr,
            (ChartKind::Latency, "rr-table", "latency"),
            Self::rr_table,
        ))
    }

    /// The section of one kind of run: the chart of the runs `of_kind` picks (when it draws
    /// anything) above the kind's `table`.
    fn kind_section(
        &self,
        (id, title): (&'static str, &str),
        of_kind: fn(&Run) -> bool,
        (kind, table_id, chart_id): (ChartKind, &str, &str),
        table: fn(&Self) -> String,
    ) -> Section {
        let runs: Vec<Run> = self.runs().iter().filter(|r| of_kind(r)).cloned().collect();
        let mut b = String::new();
        if let Some(f) = self.chart(&runs, kind, table_id, chart_id) {
            b.push_str(&f);
        }
        b.push_str(&table(self));
        Section {
            id,
            title: title.into(),
            body: b,
        }
    }

    /// The request/response table: rate, latency percentiles and netperf's figures per cell and
    /// path, latencies in the unit the largest median reads best in.
    fn rr_table(&self) -> String {
        // Long on purpose: the table's 17 columns in page order, all in the one time unit
        // chosen above; split, a column's place and its unit would be read in two places.
        let rows: Vec<&RrRow> = self.table.rr.iter().collect();
        let t = TimeUnit::for_micros(largest(rows.iter().map(|r| r.p50_us.mean)));
        let tl = t.label();
        let us = move |s: &Stats| Cell::num(t.format(s.mean), s.mean);
        let k = t.of_micros(1.0);
        let cols: Vec<Column<'_, &RrRow>> = vec![
            text_col("cell", |r: &&RrRow| Cell::text(&r.cell_name)),
            text_col("kind", |r: &&RrRow| {
                Cell::text(if r.cell.kind == Kind::Crr {
                    "TCP_CRR"
                } else {
                    "TCP_RR"
                })
            }),
            text_col("path", |r: &&RrRow| Cell::text(&r.label)),
            runs_col(|r: &&RrRow| r.runs),
            num_col("transactions/s", "mean over runs", |r: &&RrRow| {
                Cell::num(
                    number(r.transactions_per_second.mean),
                    r.transactions_per_second.mean,
                )
            }),
            ci_col("rate 95 % CI", |r: &&RrRow| {
                (r.transactions_per_second, 1.0)
            }),
            num_col(
                &format!("p50 {tl}"),
                "median latency, mean of the runs' medians",
                move |r: &&RrRow| us(&r.p50_us),
            ),
            ci_col(&format!("p50 95 % CI {tl}"), move |r: &&RrRow| {
                (r.p50_us, k)
            }),
            num_col(
                &format!("p90 {tl}"),
                "mean of the runs' p90",
                move |r: &&RrRow| us(&r.p90_us),
            ),
            num_col(
                &format!("p99 {tl}"),
                "mean of the runs' p99",
                move |r: &&RrRow| us(&r.p99_us),
            ),
            ci_col(&format!("p99 95 % CI {tl}"), move |r: &&RrRow| {
                (r.p99_us, k)
            }),
            num_col(
                &format!("p99.9 {tl}"),
                "mean of the runs' p99.9",
                move |r: &&RrRow| us(&r.p99_9_us),
            ),
            num_col(
                &format!("mean {tl}"),
                "netperf's mean latency, mean over runs",
                move |r: &&RrRow| us(&r.mean_us),
            ),
            num_col(
                &format!("min {tl}"),
                "netperf's min latency, mean over runs",
                move |r: &&RrRow| us(&r.min_us),
            ),
            num_col(
                &format!("max {tl}"),
                "netperf's max latency, mean over runs",
                move |r: &&RrRow| us(&r.max_us),
            ),
            num_col(
                &format!("stddev {tl}"),
                "each run's latency stddev, mean over runs",
                move |r: &&RrRow| us(&r.stddev_us),
            ),
            num_col(
                "retr / run",
                "segments retransmitted per run, both ends",
                |r: &&RrRow| Cell::num(number(r.retransmits.mean), r.retransmits.mean),
            ),
        ];
        table(
            "rr-table",
            "Request/response latency and rate per cell and path: each run's figure, mean over \
             runs, with 95 % confidence intervals (Student t)",
            &cols,
            &rows,
        )
    }

    // ---- UDP ---------------------------------------------------------------------------

    fn udp_section(&self) -> Option<Section> {
        if self.table.udp.is_empty() {
            return None;
        }
        Some(self.kind_section(
            ("udp", "UDP loss and jitter"),
            Run::is_udp,
            (ChartKind::Udp, "udp-table", "udp"),
            Self::udp_table,
        ))
    }

    /// The UDP table: offered and received rate, loss, jitter, reordering and drops per cell
    /// and path, rates and jitter in the units their largest figures read best in.
    fn udp_table(&self) -> String {
        // Long on purpose: the table's columns in page order (direction only when both ran),
        // with the rate and jitter units chosen above; split, a column's place and its unit
        // would be read apart.
        let rows: Vec<&UdpRow> = self.table.udp.iter().collect();
        let unit = self
            .options
            .unit
            .unit_for(largest(rows.iter().flat_map(|r| {
                [
                    r.offered_bits_per_second.unwrap_or(0.0),
                    r.received_bits_per_second.mean,
                ]
            })));
        let (u, f) = (unit.label(), unit.factor());
        let jitter = TimeUnit::for_micros(largest(rows.iter().map(|r| r.jitter_ms.mean * 1e3)));
        let (jl, jk) = (jitter.label(), jitter.of_micros(1e3));
        let both = both_directions(rows.iter().map(|r| r.direction));
        let mut cols: Vec<Column<'_, &UdpRow>> =
            vec![text_col("cell", |r: &&UdpRow| Cell::text(&r.cell_name))];
        if both {
            cols.push(text_col("direction", |r: &&UdpRow| {
                Cell::text(r.direction.label())
            }));
        }
        cols.extend([
            text_col("path", |r: &&UdpRow| Cell::text(&r.label)),
            runs_col(|r: &&UdpRow| r.runs),
            num_col(
                &format!("offered {u}"),
                "the rate asked for (-b)",
                move |r: &&UdpRow| match r.offered_bits_per_second {
                    Some(o) if o > 0.0 => Cell::num(number(o * f), o),
                    _ => Cell::text("unpaced"),
                },
            ),
            num_col(
                &format!("received {u}"),
                "receiver rate, mean over runs",
                move |r: &&UdpRow| {
                    Cell::num(
                        number(r.received_bits_per_second.mean * f),
                        r.received_bits_per_second.mean,
                    )
                },
            ),
            ci_col(&format!("received 95 % CI {u}"), move |r: &&UdpRow| {
                (r.received_bits_per_second, f)
            }),
            num_col(
                "lost %",
                "datagrams lost, percent of those sent, mean over runs",
                |r: &&UdpRow| Cell::num(percent(r.lost_percent.mean), r.lost_percent.mean),
            ),
            ci_col("lost % 95 % CI", |r: &&UdpRow| (r.lost_percent, 1.0)),
            num_col(
                &format!("jitter {jl}"),
                "RFC 3550 jitter, mean over runs",
                move |r: &&UdpRow| Cell::num(number(r.jitter_ms.mean * jk), r.jitter_ms.mean),
            ),
            ci_col(&format!("jitter 95 % CI {jl}"), move |r: &&UdpRow| {
                (r.jitter_ms, jk)
            }),
            num_col(
                "reordered",
                "datagrams out of order per run, mean",
                |r: &&UdpRow| Cell::num(number(r.out_of_order.mean), r.out_of_order.mean),
            ),
            num_col(
                "duplicates",
                "per run, mean (iperf3 does not count them)",
                |r: &&UdpRow| Cell::opt(r.duplicates.map(|d| d.mean), number),
            ),
            num_col(
                "buffer drops",
                "the receiving kernel's socket-buffer drops per run, mean (part of the loss)",
                |r: &&UdpRow| Cell::opt(r.rxq_drops.map(|d| d.mean), number),
            ),
        ]);
        table(
            "udp-table",
            "UDP per cell and path: offered and received rate, loss and jitter, mean over runs \
             with 95 % confidence intervals (Student t)",
            &cols,
            &rows,
        )
    }

    // ---- latency under load ------------------------------------------------------------

    fn under_load_section(&self) -> Option<Section> {
        if self.table.under_load.is_empty() {
            return None;
        }
        Some(self.kind_section(
            ("under-load", "Latency under load"),
            Run::is_under_load,
            (ChartKind::UnderLoad, "ul-table", "under-load"),
            Self::under_load_table,
        ))
    }

    /// The latency-under-load table: idle and loaded latency, increase, RPM, loss and load per
    /// cell and path, each latency column in its own unit.
    fn under_load_table(&self) -> String {
        // Long on purpose: the table's 11 columns in page order, each latency column with the
        // unit chosen for it above; split, a column's place and its unit would be read apart.
        let rows: Vec<&UnderLoadRow> = self.table.under_load.iter().collect();
        // Each latency column in the unit its largest figure reads best in, as the text table.
        let UnderLoadUnits {
            idle,
            loaded,
            p99,
            increase: incr,
        } = UnderLoadUnits::of(&rows);
        let load = self
            .options
            .unit
            .unit_for(largest(rows.iter().map(|r| r.bulk_bits_per_second.mean)));
        let (lu, lf) = (load.label(), load.factor());
        let lat =
            |u: TimeUnit, s: Option<Stats>| Cell::opt(s.map(|s| s.mean), move |v| u.format(v));
        let cols: Vec<Column<'_, &UnderLoadRow>> = vec![
            text_col("cell", |r: &&UnderLoadRow| Cell::text(&r.cell_name)),
            text_col("path", |r: &&UnderLoadRow| Cell::text(&r.label)),
            runs_col(|r: &&UnderLoadRow| r.runs),
            num_col(
                &format!("idle p50 {}", idle.label()),
                "the probes' median before the load, mean over runs",
                move |r: &&UnderLoadRow| lat(idle, r.idle_p50_us),
            ),
            num_col(
                &format!("loaded p50 {}", loaded.label()),
                "the probes' median under load, mean over runs",
                move |r: &&UnderLoadRow| lat(loaded, r.loaded_p50_us),
            ),
            num_col(
                &format!("loaded p50 95 % CI {}", loaded.label()),
                "95 % confidence interval of the mean (Student t); one run has none",
                move |r: &&UnderLoadRow| match r.loaded_p50_us {
                    Some(s) => match s.ci95_low.zip(s.ci95_high) {
                        Some((lo, hi)) => Cell::num(
                            format!("{}–{}", loaded.format(lo), loaded.format(hi)),
                            s.mean,
                        ),
                        None => Cell::text("-"),
                    },
                    None => Cell::text("-"),
                },
            ),
            num_col(
                &format!("loaded p99 {}", p99.label()),
                "the probes' 99th percentile under load, mean over runs",
                move |r: &&UnderLoadRow| lat(p99, r.loaded_p99_us),
            ),
            num_col(
                &format!("increase {}", incr.label()),
                "what the load added: loaded minus idle median, mean over runs",
                move |r: &&UnderLoadRow| {
                    Cell::opt(r.increase_p50_us.map(|s| s.mean), move |v| {
                        let shown = incr.format(v);
                        if v < 0.0 { shown } else { format!("+{shown}") }
                    })
                },
            ),
            num_col(
                "RPM",
                "responsiveness under load, round trips a minute, mean over runs",
                |r: &&UnderLoadRow| Cell::opt(r.rpm.map(|s| s.mean), number),
            ),
            num_col(
                "lost under load",
                "probes lost in the loaded phase, percent, mean over runs",
                |r: &&UnderLoadRow| {
                    Cell::num(
                        percent(r.loaded_lost_percent.mean),
                        r.loaded_lost_percent.mean,
                    )
                },
            ),
            num_col(
                &format!("load {lu}"),
                "the bulk streams' receiver rate, all directions summed, mean over runs",
                move |r: &&UnderLoadRow| {
                    Cell::num(
                        number(r.bulk_bits_per_second.mean * lf),
                        r.bulk_bits_per_second.mean,
                    )
                },
            ),
        ];
        table(
            "ul-table",
            "Latency under load per cell and path: the UDP probes' latency idle and under the \
             bulk streams' load, what the load added, the responsiveness, the probes lost under \
             load and the load's rate; each run's figure, mean over runs",
            &cols,
            &rows,
        )
    }

    // ---- each path ---------------------------------------------------------------------

    fn paths_section(&self) -> Section {
        let mut b = String::new();
        for (li, label) in self.labels().iter().enumerate() {
            let runs: Vec<(&Run, &RunFacts)> = self.of_label(label).collect();
            let _ = write!(
                b,
                "<section class=\"path\" id=\"path-{li}\"><h3>{}</h3>",
                esc(label)
            );
            b.push_str(&tcp_state::of_path(li, &runs, self.options.unit));
            b.push_str(&warnings(&runs));
            b.push_str(&unknown(&runs));
            b.push_str(&self.run_list(li, &runs));
            b.push_str("</section>");
        }
        Section {
            id: "paths",
            title: "Each path: TCP state, warnings and runs".into(),
            body: b,
        }
    }

    /// Every run of a path, linked to its file.
    fn run_list(&self, li: usize, runs: &[(&Run, &RunFacts)]) -> String {
        let unit = self.options.unit;
        let cols: Vec<Column<'_, (&Run, &RunFacts)>> = vec![
            text_col("file", |(r, _): &(&Run, &RunFacts)| match self.link(r) {
                Some(rel) => Cell::html(
                    format!("<a href=\"{}\">{}</a>", esc(&href(&rel)), esc(&rel)),
                    rel,
                ),
                None => Cell::text("(not saved)"),
            }),
            text_col("cell", |(r, _): &(&Run, &RunFacts)| {
                Cell::text(r.key.describe())
            }),
            text_col("started", |(r, _): &(&Run, &RunFacts)| {
                Cell::text(&r.started_at)
            }),
            text_col("result", move |(r, _): &(&Run, &RunFacts)| {
                Cell::text(r.one_line(unit))
            }),
            num_col(
                "warnings",
                "warnings the test printed",
                |(_, f): &(&Run, &RunFacts)| {
                    Cell::num(f.warnings.len().to_string(), f.warnings.len() as f64)
                },
            ),
        ];
        format!(
            "<details class=\"runs\"><summary>{} run{}, each linked to its JSON</summary>{}</details>",
            runs.len(),
            plural(runs.len()),
            table(&format!("runs-{li}"), "The runs", &cols, runs)
        )
    }

    fn skipped_section(&self) -> Option<Section> {
        if self.loaded.warnings.is_empty() {
            return None;
        }
        let mut b = String::from("<ul class=\"skipped\">");
        for w in &self.loaded.warnings {
            let _ = write!(
                b,
                "<li><code>{}</code>: {}</li>",
                esc(&w.path.display().to_string()),
                esc(&w.message)
            );
        }
        b.push_str("</ul>");
        Some(Section {
            id: "skipped",
            title: format!("Files left out ({})", self.loaded.warnings.len()),
            body: b,
        })
    }

    fn commands_section(&self) -> Section {
        let mut b = String::new();
        if self.options.commands.is_empty() {
            b.push_str(
                "<p>The commands were not recorded with the runs; each run's settings are in its \
                 JSON (<code>spec</code>), linked above.</p>",
            );
        } else {
            b.push_str("<p>The tests, as commands that run them again:</p><ul class=\"cmds\">");
            for c in &self.options.commands {
                let _ = write!(
                    b,
                    "<li>{}<pre><code>{}</code></pre></li>",
                    c.label
                        .as_ref()
                        .map(|l| format!("<span class=\"cl\">{}</span>", esc(l)))
                        .unwrap_or_default(),
                    esc(&c.line)
                );
            }
            b.push_str("</ul>");
        }
        if let Some(g) = &self.options.generated_by {
            let _ = write!(b, "<p>This page:</p><pre><code>{}</code></pre>", esc(g));
        }
        Section {
            id: "commands",
            title: "How it was measured".into(),
            body: b,
        }
    }

    // ---- the document ------------------------------------------------------------------

    fn document(&self, sections: &[Section]) -> String {
        let csp = format!(
            "default-src 'none'; style-src '{}'; script-src '{}'; img-src data:; \
             form-action 'none'; base-uri 'none'",
            sha256(CSS),
            sha256(JS)
        );
        let mut s = String::with_capacity(64 * 1024);
        let _ = write!(
            s,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <meta name=\"generator\" content=\"xbench {}\">\
             <title>{}</title><style>{CSS}</style></head><body>",
            env!("CARGO_PKG_VERSION"),
            esc(&self.title())
        );
        s.push_str("<nav aria-label=\"Contents\"><ul>");
        for sec in sections.iter().skip(1) {
            let _ = write!(
                s,
                "<li><a href=\"#{}\">{}</a></li>",
                sec.id,
                esc(&sec.title)
            );
        }
        s.push_str("</ul></nav><main>");
        for (i, sec) in sections.iter().enumerate() {
            let h = if i == 0 { "h1" } else { "h2" };
            let _ = write!(
                s,
                "<section id=\"{}\"><{h}>{}</{h}>{}</section>",
                sec.id,
                esc(&sec.title),
                sec.body
            );
        }
        let _ = write!(
            s,
            "</main><footer>Written by xbench {} from the runs' saved JSON.</footer>\
             <script>{JS}</script></body></html>",
            env!("CARGO_PKG_VERSION")
        );
        s.push('\n');
        s
    }
}

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// A CSP source for an inline block: `sha256-` and the base64 of its digest.
fn sha256(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// A runs column.
fn runs_col<'a, R>(n: impl Fn(&R) -> usize + 'a) -> Column<'a, R> {
    num_col("runs", "runs averaged", move |r: &R| {
        let n = n(r);
        Cell::num(n.to_string(), n as f64)
    })
}

/// A 95 % confidence interval column: `(statistics, factor to the shown unit)`.
/// Every figure with an interval here (rates, latencies, loss, jitter) cannot be negative:
/// a Student-t bound below 0 (a small mean with a wide spread) is shown as 0, not as a
/// negative loss or rate.
fn ci_col<'a, R>(head: &str, s: impl Fn(&R) -> (Stats, f64) + 'a) -> Column<'a, R> {
    num_col(
        head,
        "95 % confidence interval of the mean (Student t, bounded below by 0); one run has none",
        move |r: &R| {
            let (s, f) = s(r);
            match s.ci95_low.zip(s.ci95_high) {
                Some((lo, hi)) => {
                    let lo = lo.max(0.0);
                    Cell::num(format!("{}–{}", number(lo * f), number(hi * f)), lo)
                }
                None => Cell::text("-"),
            }
        },
    )
}

/// Warnings the runs printed, each once, with how many runs printed it.
fn warnings(runs: &[(&Run, &RunFacts)]) -> String {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (_, f) in runs {
        let mut mine: Vec<&str> = f.warnings.iter().map(String::as_str).collect();
        mine.dedup();
        for w in mine {
            match seen.iter_mut().find(|(x, _)| *x == w) {
                Some((_, n)) => *n += 1,
                None => seen.push((w, 1)),
            }
        }
    }
    let unreadable: Vec<String> = runs
        .iter()
        .filter_map(|(r, f)| {
            f.unreadable
                .as_ref()
                .map(|e| format!("{}: {e}", r.path.display()))
        })
        .collect();
    if seen.is_empty() && unreadable.is_empty() {
        return "<p class=\"ok\">No warnings.</p>".into();
    }
    let mut s = String::from("<ul class=\"warnings\">");
    for (w, n) in seen {
        let _ = write!(
            s,
            "<li>{} <span class=\"count\">({n} of {} runs)</span></li>",
            esc(w),
            runs.len()
        );
    }
    for u in unreadable {
        let _ = write!(s, "<li>Could not read back {}</li>", esc(&u));
    }
    s.push_str("</ul>");
    s
}

/// The fields of the runs this version does not know, as they were saved.
fn unknown(runs: &[(&Run, &RunFacts)]) -> String {
    let merged = merge_unknown(runs.iter().map(|(_, f)| *f));
    if merged.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<div class=\"unknown\"><p>More in the runs' files, shown as saved (this version of \
         xbench does not know these fields):</p><dl>",
    );
    for (path, values) in merged {
        let _ = write!(s, "<dt><code>{}</code></dt><dd>", esc(&path));
        let shown = values.len().min(MAX_VALUES);
        for (v, n) in &values[..shown] {
            let _ = write!(
                s,
                "<div class=\"uv\">{}{}</div>",
                generic(v, 0),
                if values.len() > 1 || *n > 1 {
                    format!(" <span class=\"count\">({n}×)</span>")
                } else {
                    String::new()
                }
            );
        }
        if values.len() > shown {
            let _ = write!(
                s,
                "<div class=\"uv\">… and {} more values</div>",
                values.len() - shown
            );
        }
        s.push_str("</dd>");
    }
    s.push_str("</dl></div>");
    s
}

/// Distinct values shown per unknown field.
const MAX_VALUES: usize = 6;

/// Any JSON value as HTML: scalars as text, objects as nested definition lists, arrays as
/// lists; bounded in depth and length, so one huge field cannot swamp the page.
fn generic(v: &serde_json::Value, depth: usize) -> String {
    use serde_json::Value;
    const ITEMS: usize = 40;
    if depth > 4 {
        return "…".into();
    }
    match v {
        Value::Null => "-".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => esc(&n.to_string()),
        Value::String(s) => esc(s),
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            let mut items: Vec<String> = a
                .iter()
                .take(ITEMS)
                .map(|x| generic(x, depth + 1))
                .collect();
            if a.len() > ITEMS {
                items.push(format!("… ({} in all)", a.len()));
            }
            format!("[{}]", items.join(", "))
        }
        Value::Array(a) => {
            let mut s = String::from("<ol class=\"g\">");
            for x in a.iter().take(ITEMS) {
                let _ = write!(s, "<li>{}</li>", generic(x, depth + 1));
            }
            if a.len() > ITEMS {
                let _ = write!(s, "<li>… ({} in all)</li>", a.len());
            }
            s.push_str("</ol>");
            s
        }
        Value::Object(o) => {
            let mut s = String::from("<dl class=\"g\">");
            for (k, x) in o.iter().take(ITEMS) {
                let _ = write!(s, "<dt>{}</dt><dd>{}</dd>", esc(k), generic(x, depth + 1));
            }
            if o.len() > ITEMS {
                let _ = write!(s, "<dt>…</dt><dd>{} fields in all</dd>", o.len());
            }
            s.push_str("</dl>");
            s
        }
    }
}

fn bytes(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", number(b as f64 / 1048576.0))
    } else {
        format!("{} KiB", number(b as f64 / 1024.0))
    }
}

fn both_directions(mut dirs: impl Iterator<Item = StreamDirection>) -> bool {
    let Some(first) = dirs.next() else {
        return false;
    };
    dirs.any(|d| d != first)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// `2026-11-27` or `2026-11-27 to 2026-11-29`, from RFC 3339 start times.
fn date_range<'s>(times: impl Iterator<Item = &'s str>) -> Option<String> {
    let mut dates: Vec<&str> = times
        .filter_map(|t| t.get(..10))
        .filter(|d| d.as_bytes().get(4) == Some(&b'-'))
        .collect();
    dates.sort_unstable();
    match (dates.first(), dates.last()) {
        (Some(a), Some(b)) if a == b => Some((*a).to_owned()),
        (Some(a), Some(b)) => Some(format!("{a} to {b}")),
        _ => None,
    }
}

/// `p` made absolute against the current directory, symlinks resolved where it exists.
fn absolute(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    // Lexically: `a/./b/../c` → `a/c`.
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `to` relative to the directory `from` (both absolute), `/`-separated, as a link's path.
fn relative(from: &Path, to: &Path) -> String {
    let f: Vec<Component<'_>> = from.components().collect();
    let t: Vec<Component<'_>> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_owned(); f.len() - common];
    parts.extend(
        t[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[cfg(test)]
mod tests;
