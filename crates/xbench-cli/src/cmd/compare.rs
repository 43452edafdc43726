//! `xbench compare BASELINE CANDIDATE`: two sets of saved runs → the regression check of
//! [`xbench_report::compare`], its verdict table, and an exit status a CI job can gate on.
//! The flags are in `cli`; the decision is the library's.

use std::path::PathBuf;

use anyhow::Context;
use xbench_report::compare::{Criteria, Outcome, compare};
use xbench_report::load::LoadError;
use xbench_report::{Loaded, load_with_limit};

use crate::cli::CompareArgs;
use crate::exit::{Exit, UsageError};
use crate::render::out;

pub(crate) fn run(args: CompareArgs) -> anyhow::Result<Exit> {
    let criteria = Criteria {
        metrics: args.metric,
        max_regression: args.max_regression,
        confidence: args.confidence,
    };
    let limit = args.max_file_size.bytes();
    let baseline = read("baseline", &args.baseline, limit)?;
    let candidate = read("candidate", &args.candidate, limit)?;
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
fn read(side: &str, path: &PathBuf, limit: u64) -> anyhow::Result<Loaded> {
    let loaded = load_with_limit(std::slice::from_ref(path), limit).map_err(|e| match e {
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
