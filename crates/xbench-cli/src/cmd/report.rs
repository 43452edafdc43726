//! `xbench report DIR…`: saved runs (and iperf3 -J files) → one comparison table, a chart
//! with `--plot`, and the whole comparison as a web page with `--html`. Unusable files are
//! named in warnings and skipped; a path that does not exist, or an output that cannot be
//! written, is a usage error (2); no usable result at all, or a chart that cannot be drawn,
//! fails (1).

use std::path::Path;

use anyhow::{Context, bail};
use xbench_report::chart::{self, ChartKind};
use xbench_report::html;
use xbench_report::load::LoadError;
use xbench_report::render::{self, Document, Format};
use xbench_report::{Comparison, Loaded, load_with_limit};

use xbench_sweep::rebuild::SavedRun;

use crate::cli::{ChartArg, ReportArgs, TableFormat};
use crate::exit::{Exit, UsageError};
use crate::render::out;

pub(crate) fn run(args: ReportArgs) -> anyhow::Result<Exit> {
    check_outputs(&args)?;
    check_ceiling(&args)?;
    let loaded = load_runs(&args)?;
    let table = Comparison::build(&loaded.runs);
    let ceiling = args.ceiling.map(|c| c as f64);
    let rendered = match args.format {
        TableFormat::Json => Document::new(&table, &loaded.warnings).to_json(),
        TableFormat::Text => render::render_with_ceiling(&table, Format::Text, args.unit, ceiling),
        TableFormat::Md => {
            render::render_with_ceiling(&table, Format::Markdown, args.unit, ceiling)
        }
        TableFormat::Csv => render::render_with_ceiling(&table, Format::Csv, args.unit, ceiling),
    };
    out(&rendered).context("writing the table")?;

    if let Some(path) = &args.html {
        write_html(&args, &loaded, path, ceiling)?;
    }

    if let Some(path) = &args.plot {
        write_chart(&args, &loaded, path, ceiling)?;
    }
    Ok(Exit::Success)
}

/// Refuses, before anything is read, a chart file or a web page that cannot be written (a
/// chart's file name must name its format; the page cannot go to standard output).
fn check_outputs(args: &ReportArgs) -> Result<(), UsageError> {
    // A chart file name we cannot write is a usage error, found before reading anything.
    if let Some(path) = &args.plot {
        chart::ImageFormat::of_path(path).map_err(|e| UsageError(e.to_string()))?;
        xbench::file::check_writable(path)
            .map_err(|e| UsageError(format!("--plot {}: {e}", path.display())))?;
    }
    // So is a web page's: a directory, a socket or an unwritable directory is refused now.
    if let Some(path) = &args.html {
        if path.as_os_str() == "-" {
            return Err(UsageError(
                "--html -: standard output carries the table; give the page a file name".into(),
            ));
        }
        xbench::file::check_writable(path)
            .map_err(|e| UsageError(format!("--html {}: {e}", path.display())))?;
    }
    Ok(())
}

/// The runs in `args.paths`, each unusable file warned of and skipped; a path that does not
/// exist is a usage error, and no usable run at all an error naming what was looked at.
fn load_runs(args: &ReportArgs) -> anyhow::Result<Loaded> {
    let loaded = load_with_limit(&args.paths, args.max_file_size.bytes()).map_err(|e| match e {
        LoadError::Missing(_) => anyhow::Error::new(UsageError(e.to_string())),
        other => anyhow::Error::new(other),
    })?;
    for w in &loaded.warnings {
        eprintln!("warning: {w} (skipped)");
    }
    if loaded.runs.is_empty() {
        let names: Vec<String> = args.paths.iter().map(|p| p.display().to_string()).collect();
        bail!(
            "no xbench or iperf3 results in {} ({} file{} looked at{}); save runs with \
             `xbench client … --save DIR`",
            names.join(", "),
            loaded.files_seen,
            if loaded.files_seen == 1 { "" } else { "s" },
            if loaded.warnings.is_empty() {
                String::new()
            } else {
                format!(", {} skipped", loaded.warnings.len())
            }
        );
    }
    Ok(loaded)
}

/// The web page of `--html`, and a line saying where it went.
fn write_html(
    args: &ReportArgs,
    loaded: &Loaded,
    path: &Path,
    ceiling: Option<f64>,
) -> anyhow::Result<()> {
    let options = html::Options {
        title: args.title.clone(),
        unit: args.unit.into(),
        ceiling,
        commands: commands(&loaded.runs, args.max_file_size.bytes()),
        generated_by: Some(this_command()),
        notes: Vec::new(),
        file_limit: Some(args.max_file_size.bytes()),
    };
    let written = html::write_loaded(loaded, path, &options).context("no web page written")?;
    eprintln!(
        "web page written to {} ({} runs, {} KB)",
        path.display(),
        written.runs,
        written.bytes.div_ceil(1000)
    );
    Ok(())
}

/// The chart of `--plot` (`--chart`'s kind or the one the runs call for), with notes on what
/// it left out.
fn write_chart(
    args: &ReportArgs,
    loaded: &Loaded,
    path: &Path,
    ceiling: Option<f64>,
) -> anyhow::Result<()> {
    let kind = args.chart.map(|c| match c {
        ChartArg::Streams => ChartKind::Streams,
        ChartArg::Window => ChartKind::Window,
        ChartArg::Latency => ChartKind::Latency,
        ChartArg::Timeline => ChartKind::Timeline,
        ChartArg::Udp => ChartKind::Udp,
        ChartArg::UnderLoad => ChartKind::UnderLoad,
    });
    let mut data = chart::plan(&loaded.runs, kind, args.unit).context("no chart drawn")?;
    if let Some(c) = ceiling {
        chart::add_ceiling(&mut data, c).context("no chart drawn")?;
    }
    chart::write(&data, path).context("no chart drawn")?;
    if data.left_out > 0 {
        eprintln!(
            "note: {} run{} of the other kind left out of the {} chart",
            data.left_out,
            if data.left_out == 1 { "" } else { "s" },
            data.kind.name()
        );
    }
    if data.not_drawn > 0 {
        eprintln!(
            "note: the timeline overlays at most {} runs, a share of each path's: {} more \
             left out; name fewer directories or files to pick them",
            chart::MAX_TIMELINE_RUNS,
            data.not_drawn
        );
    }
    eprintln!("{} chart written to {}", data.kind.name(), path.display());
    Ok(())
}

/// The `xbench client` commands that measure the runs' paths again, rebuilt from the runs
/// (each file read again, at most `limit` bytes).
pub(crate) fn commands(runs: &[xbench_report::run::Run], limit: u64) -> Vec<html::Command> {
    let reports: Vec<(&xbench_report::run::Run, xbench::report::TestReport)> = runs
        .iter()
        .filter_map(|r| Some((r, xbench_report::load::read_report(&r.path, limit).ok()??)))
        .collect();
    let saved: Vec<SavedRun<'_>> = reports
        .iter()
        .map(|(r, report)| SavedRun {
            path: &r.path,
            label: &r.label,
            report,
        })
        .collect();
    xbench_sweep::rebuild::plans(&saved)
        .into_iter()
        .map(|plan| html::Command {
            line: plan.command_line("xbench").unwrap_or_else(|e| {
                format!("# {}: cannot be written as a command: {e}", plan.label)
            }),
            label: Some(plan.label),
        })
        .collect()
}

/// This command as a shell reads it back.
fn this_command() -> String {
    std::env::args()
        .enumerate()
        .map(|(i, a)| {
            if i == 0 {
                "xbench".to_owned()
            } else if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@%+".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `--ceiling` where it would show nowhere: refused before anything is read.
fn check_ceiling(args: &ReportArgs) -> Result<(), UsageError> {
    if args.ceiling.is_none() {
        return Ok(());
    }
    if let Some(c @ (ChartArg::Latency | ChartArg::Udp | ChartArg::UnderLoad)) = args.chart {
        return Err(UsageError(format!(
            "--ceiling is a throughput; the {} chart has no throughput axis to draw it on",
            match c {
                ChartArg::Udp => "udp",
                ChartArg::UnderLoad => "under-load",
                _ => "latency",
            }
        )));
    }
    if args.format == TableFormat::Json && args.plot.is_none() && args.html.is_none() {
        return Err(UsageError(
            "--ceiling shows in text, md and csv tables, in charts and on the web page; JSON \
             keeps base units. Add --plot FILE or --html FILE, or pick another --format"
                .into(),
        ));
    }
    Ok(())
}
