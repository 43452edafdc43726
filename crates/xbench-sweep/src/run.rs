//! Running a plan: each run through the library's client, saved as it finishes, resumed
//! where an earlier sweep stopped, and cancelled between or during runs.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use xbench::client::ClientEvent;
use xbench::report::{Outcome, TestReport};
use xbench_report::run::Run;

use crate::error::SweepError;
use crate::plan::{PlannedRun, SweepPlan};

/// Something that happened during a sweep.
#[derive(Debug)]
#[non_exhaustive]
// Each event is moved once, into the caller's callback, and never stored: boxing the client's
// (an interval with its counts) would cost an allocation per interval to save a copy.
#[allow(clippy::large_enum_variant)]
pub enum SweepEvent<'a> {
    /// A run already saved by an earlier, interrupted sweep (`resume`).
    Skipped(&'a PlannedRun),
    /// A run is starting.
    Started(&'a PlannedRun),
    /// Something the test reported while running (warnings, intervals).
    Client(ClientEvent),
    /// A run completed; `saved` is its file.
    Finished {
        /// The run.
        planned: &'a PlannedRun,
        /// Its figures.
        run: &'a Run,
        /// Its file, with `save`.
        saved: Option<&'a Path>,
    },
    /// A run ended without completing and was not kept.
    NotKept {
        /// The run.
        planned: &'a PlannedRun,
        /// Why.
        reason: String,
    },
    /// Waiting before the next run.
    Pausing(Duration),
}

/// How a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepEnd {
    /// Every planned run was done (some may have failed; see the counts).
    Completed,
    /// Cancelled; the finished runs are kept.
    Interrupted,
    /// A test could not start, or a result could not be saved; the finished runs are kept.
    Failed,
}

/// Status of one planned run in a [`SweepSummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Completed and kept.
    Completed,
    /// Saved by an earlier sweep and not run again.
    Skipped,
    /// Cut short by cancel; not kept.
    Interrupted,
    /// Failed; not kept.
    Failed,
    /// Not reached.
    NotRun,
}

/// One planned run's fate.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// The cell as a table shows it.
    pub cell: String,
    /// The cell's directory name.
    pub cell_dir: String,
    /// Which repeat, from 1.
    pub repeat: u32,
    /// What happened.
    pub status: RunStatus,
    /// Its file, when saved (or already saved).
    pub path: Option<PathBuf>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// What a sweep did, for its JSON output.
#[derive(Debug, Clone, Serialize)]
pub struct SweepSummary {
    /// The path's name.
    pub label: String,
    /// Where runs were saved.
    pub dir: Option<PathBuf>,
    /// Cells in the matrix.
    pub cells: usize,
    /// Runs per cell.
    pub repeat: u32,
    /// Runs planned: cells × repeat.
    pub planned: usize,
    /// Runs completed and kept in this sweep.
    pub completed: usize,
    /// Runs skipped as already saved.
    pub skipped: usize,
    /// Runs that failed or were cut short, not kept.
    pub not_kept: usize,
    /// How the sweep ended.
    pub end: SweepEnd,
    /// Why it stopped early, when it failed.
    pub error: Option<String>,
    /// Every planned run, in schedule order.
    pub runs: Vec<RunRecord>,
}

/// What a sweep produced.
#[derive(Debug)]
pub struct SweepOutcome {
    /// Runs completed in this sweep (not those skipped).
    pub runs: Vec<Run>,
    /// Counts, files and how it ended.
    pub summary: SweepSummary,
}

/// Runs `plan`. `on_event` sees every run start and end; `cancel` resolving (Ctrl-C) cuts the
/// run in progress short and stops the sweep, keeping what finished. `Err` only when the plan
/// cannot start; problems during the sweep end it with [`SweepEnd::Failed`] instead, so the
/// caller still gets the runs that finished.
pub async fn run(
    plan: &SweepPlan,
    on_event: &mut (dyn FnMut(SweepEvent<'_>) + Send),
    cancel: impl Future<Output = ()>,
) -> Result<SweepOutcome, SweepError> {
    plan.check()?;
    let psk = plan.target.read_key()?;
    let schedule = plan.schedule();
    let done = prepare_dir(plan, &schedule)?;
    let mut cancel = Cancel::new(cancel);

    let mut records = records_of(&schedule);
    let mut kept = Kept {
        runs: Vec::new(),
        error: None,
    };
    let mut end = SweepEnd::Completed;
    let mut ran_one = false;

    for (p, record) in schedule.iter().zip(records.iter_mut()) {
        if done.contains(&p.index) {
            record.status = RunStatus::Skipped;
            record.path = p.path.clone();
            on_event(SweepEvent::Skipped(p));
            continue;
        }
        if ran_one && !plan.pause.is_zero() {
            on_event(SweepEvent::Pausing(plan.pause));
            tokio::select! {
                () = tokio::time::sleep(plan.pause) => {}
                () = cancel.wait() => {}
            }
        }
        if cancel.fired {
            end = SweepEnd::Interrupted;
            break;
        }
        ran_one = true;
        let step = One {
            plan,
            planned: p,
            of: schedule.len(),
            psk: &psk,
        };
        if let Some(stop) = step.run(record, &mut kept, on_event, &mut cancel).await {
            end = stop;
            break;
        }
        if cancel.fired {
            end = SweepEnd::Interrupted;
            break;
        }
    }

    let summary = summary(plan, schedule.len(), records, end, kept.error);
    Ok(SweepOutcome {
        runs: kept.runs,
        summary,
    })
}

/// A record per planned run, in schedule order, each not run yet.
fn records_of(schedule: &[PlannedRun]) -> Vec<RunRecord> {
    schedule
        .iter()
        .map(|p| RunRecord {
            cell: p.key.describe(),
            cell_dir: p.key.slug(),
            repeat: p.repeat,
            status: RunStatus::NotRun,
            path: None,
            error: None,
        })
        .collect()
}

/// The sweep's summary: `records` counted by status, beside how it ended and why.
fn summary(
    plan: &SweepPlan,
    planned: usize,
    records: Vec<RunRecord>,
    end: SweepEnd,
    error: Option<String>,
) -> SweepSummary {
    let count = |s: RunStatus| records.iter().filter(|r| r.status == s).count();
    SweepSummary {
        label: plan.label.clone(),
        dir: plan.save.clone(),
        cells: plan.cells().len(),
        repeat: plan.repeat.get(),
        planned,
        completed: count(RunStatus::Completed),
        skipped: count(RunStatus::Skipped),
        not_kept: count(RunStatus::Failed) + count(RunStatus::Interrupted),
        end,
        error,
        runs: records,
    }
}

/// What the sweep keeps as it goes: the completed runs' figures, and the error that ended it.
struct Kept {
    runs: Vec<Run>,
    error: Option<String>,
}

/// One planned run of a sweep.
struct One<'a> {
    plan: &'a SweepPlan,
    planned: &'a PlannedRun,
    /// Runs in the schedule.
    of: usize,
    psk: &'a Option<xbench::auth::Psk>,
}

impl One<'_> {
    /// Runs it, saves it and records how it went; `Some(end)` when it ends the sweep (the
    /// user stopped it, it could not start, or it could not be saved).
    async fn run<F: Future<Output = ()>>(
        &self,
        record: &mut RunRecord,
        kept: &mut Kept,
        on_event: &mut (dyn FnMut(SweepEvent<'_>) + Send),
        cancel: &mut Cancel<F>,
    ) -> Option<SweepEnd> {
        let (plan, p) = (self.plan, self.planned);
        on_event(SweepEvent::Started(p));
        let result = {
            let mut forward = |ev: ClientEvent| on_event(SweepEvent::Client(ev));
            let config = (plan.target).client_config(
                p.spec.clone(),
                Some(plan.label.clone()),
                self.psk.clone(),
            );
            xbench::client::run(&config, &mut forward, cancel.wait()).await
        };
        let report = match result {
            Ok(r) => r,
            Err(e) if cancel.fired => {
                // Ctrl-C while the test was still being set up.
                record.status = RunStatus::Interrupted;
                record.error = Some(e.to_string());
                return Some(SweepEnd::Interrupted);
            }
            Err(e) => {
                record.status = RunStatus::Failed;
                record.error = Some(e.to_string());
                kept.error = Some(format!(
                    "run {} of {} ({}, repeat {}) could not start: {e}",
                    p.index + 1,
                    self.of,
                    p.key.describe(),
                    p.repeat
                ));
                return Some(SweepEnd::Failed);
            }
        };
        match keep(&report, p, &plan.label) {
            Ok(run) => {
                if let Some(path) = &p.path
                    && let Err(e) = save(&report, path)
                {
                    record.status = RunStatus::Failed;
                    kept.error = Some(format!("cannot save {}: {e}", path.display()));
                    record.error = kept.error.clone();
                    return Some(SweepEnd::Failed);
                }
                record.status = RunStatus::Completed;
                record.path = p.path.clone();
                on_event(SweepEvent::Finished {
                    planned: p,
                    run: &run,
                    saved: p.path.as_deref(),
                });
                kept.runs.push(run);
            }
            Err((status, reason)) => {
                record.status = status;
                record.error = Some(reason.clone());
                on_event(SweepEvent::NotKept { planned: p, reason });
            }
        }
        None
    }
}

/// The run's figures when it completed; otherwise its status and why it is not kept.
fn keep(report: &TestReport, p: &PlannedRun, label: &str) -> Result<Run, (RunStatus, String)> {
    match &report.outcome {
        Outcome::Completed => {}
        Outcome::Interrupted => {
            return Err((
                RunStatus::Interrupted,
                "interrupted; not saved (a resumed sweep runs it again)".into(),
            ));
        }
        Outcome::Failed { error } => {
            return Err((RunStatus::Failed, format!("failed: {error}; not saved")));
        }
    }
    let path = p.path.clone().unwrap_or_default();
    Run::from_report(report, path, label).map_err(|e| (RunStatus::Failed, e.to_string()))
}

fn save(report: &TestReport, path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    xbench::file::write_json_atomically(path, report)
}

/// Creates `DIR/<label>` and finds the runs already saved: refused without `resume`, and each
/// checked against the plan with it. Returns the schedule indices already done.
fn prepare_dir(plan: &SweepPlan, schedule: &[PlannedRun]) -> Result<Vec<usize>, SweepError> {
    let Some(dir) = &plan.save else {
        return Ok(Vec::new());
    };
    let label_dir = dir.join(&plan.label);
    let io = |source| SweepError::Io {
        path: label_dir.clone(),
        source,
    };
    // Before the first run: a directory we cannot write fails the sweep now, not after a run.
    std::fs::create_dir_all(&label_dir)
        .and_then(|()| xbench::file::check_dir_writable(&label_dir))
        .map_err(|source| SweepError::Unwritable {
            path: label_dir.clone(),
            source,
        })?;
    if !plan.resume && holds_runs(&label_dir).map_err(io)? {
        return Err(SweepError::AlreadySaved(label_dir));
    }
    let mut done = Vec::new();
    for p in schedule {
        let Some(path) = &p.path else { continue };
        if !path.exists() {
            continue;
        }
        let unreadable = |reason: String| SweepError::Unreadable {
            path: path.clone(),
            reason,
        };
        // A regular file of a bounded size, as `xbench report` reads it; parsed from the file
        // rather than a copy of it in memory.
        let file = xbench::file::open_regular(path, xbench_report::load::DEFAULT_FILE_LIMIT)
            .map_err(|e| unreadable(e.to_string()))?;
        let saved: TestReport = serde_json::from_reader(std::io::BufReader::new(file))
            .map_err(|e| unreadable(e.to_string()))?;
        let differences = differences(&saved.spec, &p.spec);
        if !differences.is_empty() {
            return Err(SweepError::Mismatch {
                path: path.clone(),
                differences: differences.join(", "),
            });
        }
        done.push(p.index);
    }
    Ok(done)
}

fn holds_runs(dir: &Path) -> std::io::Result<bool> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            if holds_runs(&e.path())? {
                return Ok(true);
            }
        } else if e.file_name().to_string_lossy().ends_with(".json")
            && !e.file_name().to_string_lossy().starts_with('.')
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Settings that differ between a saved run's spec and the planned one, as
/// `end.duration: saved 10.0, now 5.0`.
fn differences(
    saved: &xbench::config::TestSpec,
    planned: &xbench::config::TestSpec,
) -> Vec<String> {
    crate::diff::spec_differences(saved, planned, ["saved", "now"])
        .unwrap_or_else(|| vec!["the test settings".into()])
}

/// The caller's cancel future, shared by every run of the sweep and never polled again once
/// it has fired (a finished `async` block panics when polled twice).
struct Cancel<F> {
    fut: Pin<Box<F>>,
    fired: bool,
}

impl<F: Future<Output = ()>> Cancel<F> {
    fn new(fut: F) -> Self {
        Cancel {
            fut: Box::pin(fut),
            fired: false,
        }
    }

    /// Resolves when cancel fires (at once if it has). Dropping this future mid-way leaves
    /// the caller's future intact for the next run.
    async fn wait(&mut self) {
        if !self.fired {
            self.fut.as_mut().await;
            self.fired = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn spec_differences_name_the_setting() {
        let a = xbench::config::TestSpec::throughput();
        let mut b = a.clone();
        b.end = xbench::config::EndCondition::Duration(Duration::from_secs(5));
        assert_eq!(differences(&a, &b), ["end.duration: saved 10.0, now 5.0"]);
        assert!(differences(&a, &a).is_empty());
    }
}
