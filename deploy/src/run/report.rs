//! The end of `run`: `xbench report`'s comparison table (text and Markdown) and charts, drawn
//! with the xbench-report library from every run collected under the results directory, with
//! a section that marks each path that was given up or is incomplete.
//!
//! Files: `report.txt`, `report.md`, and `chart-streams.svg`, `chart-window.svg`,
//! `chart-latency.svg` as the suite calls for (streams if stream counts vary, window if windows
//! do, latency for request/response runs). None of them ends in `.json`, so `xbench report DIR`
//! reads only runs. Not for collecting: see [`crate::run`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use xbench_report::chart::{self, ChartKind};
use xbench_report::render::{self, Format};
use xbench_report::run::Run;
use xbench_report::{Comparison, ThroughputUnit};

use crate::error::Error;
use crate::run::RunSummary;
use crate::state::write_file_atomically;

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The text table with the paths section, as written to `report.txt`.
    pub text: String,
    /// Every file written.
    pub files: Vec<PathBuf>,
    /// Files that were skipped (not readable runs) and charts that could not be drawn.
    pub warnings: Vec<String>,
}

/// Draws the report of the runs under `out` for `summary`'s paths.
pub fn write(out: &Path, summary: &RunSummary, unit: ThroughputUnit) -> Result<Report, Error> {
    let dirs: Vec<PathBuf> = summary
        .paths
        .iter()
        .map(|p| out.join(&p.label))
        .filter(|d| d.is_dir())
        .collect();
    let loaded = if dirs.is_empty() {
        xbench_report::Loaded::default()
    } else {
        xbench_report::load(&dirs).map_err(|e| Error::Results {
            path: out.display().to_string(),
            message: e.to_string(),
        })?
    };
    let mut warnings: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    let table = Comparison::build(&loaded.runs);
    let paths = paths_section(summary);
    let body = if table.is_empty() {
        "No run was collected.\n".to_owned()
    } else {
        render::render(&table, Format::Text, unit)
    };
    let text = format!("{body}\n{paths}");
    let md = format!(
        "{}\n```\n{paths}```\n",
        if table.is_empty() {
            "No run was collected.\n".to_owned()
        } else {
            render::render(&table, Format::Markdown, unit)
        }
    );
    let mut files = Vec::new();
    for (name, content) in [("report.txt", &text), ("report.md", &md)] {
        let p = out.join(name);
        write_file_atomically(&p, content.as_bytes()).map_err(|e| Error::Results {
            path: p.display().to_string(),
            message: e.to_string(),
        })?;
        files.push(p);
    }
    for kind in charts_for(&loaded.runs) {
        let p = out.join(format!("chart-{}.svg", kind.name()));
        match chart::plan(&loaded.runs, Some(kind), unit).and_then(|d| chart::write(&d, &p)) {
            Ok(()) => files.push(p),
            Err(e) => warnings.push(format!("{} chart: {e}", kind.name())),
        }
    }
    Ok(Report {
        text,
        files,
        warnings,
    })
}

/// The charts the runs call for.
fn charts_for(runs: &[Run]) -> Vec<ChartKind> {
    let throughput: Vec<&Run> = runs.iter().filter(|r| !r.is_rr()).collect();
    let distinct = |f: &dyn Fn(&Run) -> Option<u64>| {
        let mut seen: Vec<u64> = throughput.iter().filter_map(|r| f(r)).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    };
    let mut out = Vec::new();
    if distinct(&|r| r.key.streams.map(u64::from)) > 1 {
        out.push(ChartKind::Streams);
    }
    if distinct(&|r| r.key.window) > 1 {
        out.push(ChartKind::Window);
    }
    if runs.iter().any(Run::is_rr) {
        out.push(ChartKind::Latency);
    }
    out
}

/// One line per path: complete, incomplete, or given up and why.
fn paths_section(summary: &RunSummary) -> String {
    let mut s = String::from("paths\n");
    let width = summary
        .paths
        .iter()
        .map(|p| p.label.len())
        .max()
        .unwrap_or(0);
    for p in &summary.paths {
        let status = match (&p.given_up, p.collected == p.planned) {
            (_, true) => "complete".to_owned(),
            (Some(why), false) => format!("FAILED, given up: {why}"),
            (None, false) if summary.interrupted => {
                "incomplete (interrupted; --resume completes it)".to_owned()
            }
            (None, false) => format!(
                "INCOMPLETE: {} run(s) failed{}",
                p.failed,
                p.last_error
                    .as_ref()
                    .map(|e| format!(", the last: {e}"))
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(
            s,
            "  {:<width$}  {:>9}  {status}",
            p.label,
            format!("{}/{} runs", p.collected, p.planned)
        );
    }
    s
}
