//! `xbench compare BASELINE CANDIDATE`: two sets of saved runs → the regression check of
//! [`xbench_report::compare`], its verdict table, and an exit status a CI job can gate on.
//! Flags are parsed here; the decision is the library's.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use xbench_report::compare::{Criteria, Metric, Outcome, compare};
use xbench_report::load::LoadError;
use xbench_report::{Loaded, load};

use crate::exit::{Exit, UsageError};
use crate::render::out;

/// Check a candidate sweep against a baseline sweep for regressions, per cell and path.
#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Saved runs to compare against (`xbench client … --save DIR`), a directory or files.
    #[arg(value_name = "BASELINE")]
    baseline: PathBuf,

    /// Saved runs to check.
    #[arg(value_name = "CANDIDATE")]
    candidate: PathBuf,

    /// Figures to check, comma-separated or repeated: throughput, tps, p50, p90, p99, p99.9,
    /// mean. Each is checked in the cells that carry it [default: throughput,p99].
    #[arg(long, value_name = "METRIC", value_delimiter = ',', value_parser = parse_metric)]
    metric: Vec<Metric>,

    /// Loss allowed before a cell counts as regressed, percent of the baseline: throughput
    /// may fall, and latency rise, by this much.
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = parse_max_regression)]
    max_regression: f64,

    /// Confidence a regression must be shown with, percent.
    #[arg(long, value_name = "PERCENT", default_value = "95%", value_parser = parse_confidence)]
    confidence: f64,
}

pub(crate) fn run(args: CompareArgs) -> anyhow::Result<Exit> {
    let criteria = Criteria {
        metrics: args.metric,
        max_regression: args.max_regression,
        confidence: args.confidence,
    };
    let baseline = read("baseline", &args.baseline)?;
    let candidate = read("candidate", &args.candidate)?;
    let check = compare(&baseline.runs, &candidate.runs, &criteria)
        .map_err(|e| UsageError(e.to_string()))?;
    out(&check.to_text()).context("writing the verdict table")?;
    Ok(match check.outcome() {
        Outcome::Passed => Exit::Success,
        Outcome::Regressed => {
            let names: Vec<String> = check.regressions().map(|r| r.name()).collect();
            eprintln!(
                "xbench: regression (exit {}) in {}",
                Exit::Failure.code(),
                names.join("; ")
            );
            Exit::Failure
        }
        Outcome::Inconclusive => {
            eprintln!(
                "xbench: inconclusive: {} of {} rows could not be decided; nothing was shown to \
                 regress, but this is not a pass (exit {})",
                check.undecided().count(),
                check.rows.len(),
                Exit::Inconclusive.code()
            );
            Exit::Inconclusive
        }
    })
}

/// Loads one side, printing skipped files as warnings; a path that does not exist is a usage
/// error, and a side with no usable run is said plainly (its cells then show as missing).
fn read(side: &str, path: &PathBuf) -> anyhow::Result<Loaded> {
    let loaded = load(std::slice::from_ref(path)).map_err(|e| match e {
        LoadError::Missing(_) => anyhow::Error::new(UsageError(format!("{side}: {e}"))),
        other => anyhow::Error::new(other).context(format!("reading the {side}")),
    })?;
    for w in &loaded.warnings {
        eprintln!("warning: {w} (skipped)");
    }
    if loaded.runs.is_empty() {
        eprintln!(
            "warning: no usable run in the {side} {} ({} file{} looked at); save runs with \
             `xbench client … --save DIR`",
            path.display(),
            loaded.files_seen,
            if loaded.files_seen == 1 { "" } else { "s" },
        );
    }
    Ok(loaded)
}

fn parse_metric(s: &str) -> Result<Metric, String> {
    s.parse()
        .map_err(|e: xbench_report::compare::UnknownMetric| e.to_string())
}

/// `5%`, `5 %` or `5`: a percentage, as a fraction.
fn percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    let v: f64 = t
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage (e.g. 5%)"))?;
    if !v.is_finite() {
        return Err(format!("`{s}` is not a percentage (e.g. 5%)"));
    }
    Ok(v / 100.0)
}

fn parse_max_regression(s: &str) -> Result<f64, String> {
    let v = percent(s)?;
    if !(0.0..1.0).contains(&v) {
        return Err(format!(
            "`{s}`: the allowed loss must be from 0% to below 100%"
        ));
    }
    Ok(v)
}

fn parse_confidence(s: &str) -> Result<f64, String> {
    let v = percent(s)?;
    if !(0.5..1.0).contains(&v) {
        return Err(format!(
            "`{s}`: the confidence must be from 50% to below 100%"
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages() {
        assert_eq!(parse_max_regression("5%"), Ok(0.05));
        assert_eq!(parse_max_regression("0"), Ok(0.0));
        assert_eq!(parse_max_regression("12.5 %"), Ok(0.125));
        assert!(parse_max_regression("100%").is_err());
        assert!(parse_max_regression("-1%").is_err());
        assert!(parse_max_regression("five").is_err());
        assert_eq!(parse_confidence("99%"), Ok(0.99));
        assert!(parse_confidence("100").is_err());
        assert!(parse_confidence("0.95").is_err());
    }
}
