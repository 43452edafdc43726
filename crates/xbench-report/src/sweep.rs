//! Sweeps and repeats: expand lists of streams, windows, request/response sizes and flows into
//! cells, run every cell `repeat` times through [`xbench::client::run`], and save each finished
//! run at once.
//!
//! Order spreads drift: round-robin over the cells, repeat by repeat (P=1, P=2, P=4, P=1, P=2,
//! P=4, …), never all repeats of one cell in a row, so that a path that slows down in the
//! afternoon shows up as spread in every cell instead of as a fake trend across cells.
//!
//! Saving follows [`crate::layout`]: `DIR/<label>/<cell>/run-<n>.json`, written atomically.
//! `resume` skips runs whose file exists and refuses files whose test differs from the plan.
//! A run cut short by cancel (Ctrl-C) or that failed is **not saved**: its figures describe
//! part of a test, and averaging them in would bias the cell; a resumed sweep runs it again.
//! Cancel stops the sweep after the run in progress returns, keeping everything finished.
//! This module prints nothing; events go to the caller.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::num::{NonZeroU16, NonZeroU32};
//! use std::time::Duration;
//! use xbench::{ClientConfig, EndCondition, Server, ServerConfig};
//! use xbench_report::sweep::{self, SweepEnd, SweepPlan};
//!
//! let server = Server::bind(ServerConfig {
//!     bind: vec!["127.0.0.1".parse()?],
//!     port: 0,
//!     ..ServerConfig::default()
//! })
//! .await?;
//! let mut base = ClientConfig::new("127.0.0.1");
//! base.port = server.local_addrs()[0].port();
//! base.spec.end = EndCondition::Duration(Duration::from_millis(200));
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let serving = tokio::spawn(server.run(async { let _ = stopped.await; }));
//!
//! // -P 1,2 --repeat 2, kept in memory (no `save`).
//! let plan = SweepPlan {
//!     base,
//!     streams: vec![NonZeroU16::new(1).unwrap(), NonZeroU16::new(2).unwrap()],
//!     windows: vec![],
//!     rr_sizes: vec![],
//!     flows: vec![],
//!     repeat: NonZeroU32::new(2).unwrap(),
//!     pause: Duration::ZERO,
//!     label: "loopback".into(),
//!     save: None,
//!     resume: false,
//! };
//! let outcome = sweep::run(&plan, &mut |_event| {}, std::future::pending()).await?;
//! assert_eq!(outcome.summary.end, SweepEnd::Completed);
//! assert_eq!(outcome.runs.len(), 4);
//! let table = xbench_report::Comparison::build(&outcome.runs);
//! assert_eq!(table.throughput.len(), 2, "one row per cell");
//! assert_eq!(table.throughput[1].runs, 2);
//!
//! let _ = stop.send(());
//! serving.await??;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::num::{NonZeroU16, NonZeroU32};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use xbench::client::{ClientConfig, ClientEvent};
use xbench::config::Workload;
use xbench::report::{Outcome, TestReport};

use crate::cell::CellKey;
use crate::layout;
use crate::run::Run;

/// What to sweep and how often.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    /// The test every cell starts from: host, port, duration, direction and so on.
    pub base: ClientConfig,
    /// Throughput tests: stream counts (`-P 1,2,4`); empty keeps the base's.
    pub streams: Vec<NonZeroU16>,
    /// Socket buffer sizes, bytes (`-w 64K,256K`); empty keeps the base's.
    pub windows: Vec<u64>,
    /// Request/response sizes, bytes (`-r 1,1 -r 64,16K`); empty keeps the base's.
    pub rr_sizes: Vec<(NonZeroU32, NonZeroU32)>,
    /// Request/response flows (`--flows 1,4,16`); empty keeps the base's.
    pub flows: Vec<NonZeroU16>,
    /// Runs of each cell.
    pub repeat: NonZeroU32,
    /// Wait between two runs, to let queues drain and to spread runs over time.
    pub pause: Duration,
    /// The path's name; saved runs go to `save/<label>/`.
    pub label: String,
    /// Where to save each finished run; `None` keeps them in memory only.
    pub save: Option<PathBuf>,
    /// Skip runs already saved instead of refusing a directory that has some.
    pub resume: bool,
}

/// One run of the schedule.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// Position in the schedule, from 0.
    pub index: usize,
    /// Which cell, from 0, in [`SweepPlan::cells`] order.
    pub cell: usize,
    /// Which repeat of the cell, from 1.
    pub repeat: u32,
    /// The cell.
    pub key: CellKey,
    /// The test to run.
    pub config: ClientConfig,
    /// Where it is saved, with `save`.
    pub path: Option<PathBuf>,
}

/// Something that happened during a sweep.
#[derive(Debug)]
#[non_exhaustive]
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

/// A plan that cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// A list names a value twice.
    #[error("{flag} lists {value} twice; each value is one cell")]
    Duplicate {
        /// The flag, as on the command line.
        flag: &'static str,
        /// The repeated value.
        value: String,
    },
    /// A list does not apply to the test's kind.
    #[error("{flag} does not apply to {kind} tests")]
    NotApplicable {
        /// The flag.
        flag: &'static str,
        /// "throughput" or "request/response".
        kind: &'static str,
    },
    /// The label cannot be a directory name.
    #[error("{0}")]
    Label(String),
    /// The label's directory holds runs and `resume` was not asked for.
    #[error(
        "{0} already holds saved runs; add --resume to complete that sweep, or choose another \
         --label or --save directory"
    )]
    AlreadySaved(PathBuf),
    /// A saved run was measured with other settings than this plan's.
    #[error(
        "{path} was run with other settings ({differences}); resume with the same flags, or choose another --label"
    )]
    Mismatch {
        /// The saved run.
        path: PathBuf,
        /// Settings that differ, as JSON paths.
        differences: String,
    },
    /// A saved run cannot be read.
    #[error("cannot resume: {path} is not a readable run ({reason}); move it away and retry")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The directory could not be created or listed.
    #[error("cannot use {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

impl SweepPlan {
    /// Checks the lists and the label. Duplicates are refused: a list value is a cell.
    pub fn check(&self) -> Result<(), SweepError> {
        layout::check_label(&self.label).map_err(SweepError::Label)?;
        let is_rr = self.base.spec.as_rr().is_some();
        if is_rr && !self.streams.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: "-P",
                kind: "request/response",
            });
        }
        if !is_rr && !self.rr_sizes.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: "-r",
                kind: "throughput",
            });
        }
        if !is_rr && !self.flows.is_empty() {
            return Err(SweepError::NotApplicable {
                flag: "--flows",
                kind: "throughput",
            });
        }
        no_duplicates("-P", &self.streams, |v| v.to_string())?;
        no_duplicates("-w", &self.windows, |v| crate::cell::short_size(*v))?;
        no_duplicates("-r", &self.rr_sizes, |(q, r)| format!("{q},{r}"))?;
        no_duplicates("--flows", &self.flows, |v| v.to_string())?;
        Ok(())
    }

    /// Every cell's test, in matrix order: windows outermost, then streams or sizes and flows.
    pub fn cells(&self) -> Vec<ClientConfig> {
        let windows: Vec<Option<u64>> = if self.windows.is_empty() {
            vec![self.base.spec.socket.window]
        } else {
            self.windows.iter().map(|w| Some(*w)).collect()
        };
        let mut out = Vec::new();
        for w in windows {
            let mut c = self.base.clone();
            c.spec.socket.window = w;
            c.label = Some(self.label.clone());
            match &c.spec.workload {
                Workload::Throughput(t) => {
                    let streams = if self.streams.is_empty() {
                        vec![t.streams]
                    } else {
                        self.streams.clone()
                    };
                    for p in streams {
                        let mut c = c.clone();
                        if let Workload::Throughput(t) = &mut c.spec.workload {
                            t.streams = p;
                        }
                        out.push(c);
                    }
                }
                Workload::RequestResponse(r) => {
                    let sizes = if self.rr_sizes.is_empty() {
                        vec![(r.request_len, r.response_len)]
                    } else {
                        self.rr_sizes.clone()
                    };
                    let flows = if self.flows.is_empty() {
                        vec![r.flows]
                    } else {
                        self.flows.clone()
                    };
                    for &(q, s) in &sizes {
                        for &f in &flows {
                            let mut c = c.clone();
                            if let Workload::RequestResponse(r) = &mut c.spec.workload {
                                r.request_len = q;
                                r.response_len = s;
                                r.flows = f;
                            }
                            out.push(c);
                        }
                    }
                }
                // A workload kind this crate does not know: run it as given.
                _ => out.push(c),
            }
        }
        out
    }

    /// The runs in the order they happen: repeat 1 of every cell, then repeat 2, …
    pub fn schedule(&self) -> Vec<PlannedRun> {
        let cells = self.cells();
        let mut out = Vec::with_capacity(cells.len() * self.repeat.get() as usize);
        for repeat in 1..=self.repeat.get() {
            for (i, config) in cells.iter().enumerate() {
                let key = CellKey::of_spec(&config.spec);
                let path = self.save.as_ref().map(|dir| {
                    layout::run_file(&layout::cell_dir(dir, &self.label, &key.slug()), repeat)
                });
                out.push(PlannedRun {
                    index: out.len(),
                    cell: i,
                    repeat,
                    key,
                    config: config.clone(),
                    path,
                });
            }
        }
        out
    }
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
    let schedule = plan.schedule();
    let done = prepare_dir(plan, &schedule)?;
    let mut cancel = Cancel::new(cancel);

    let mut records: Vec<RunRecord> = schedule
        .iter()
        .map(|p| RunRecord {
            cell: p.key.describe(),
            cell_dir: p.key.slug(),
            repeat: p.repeat,
            status: RunStatus::NotRun,
            path: None,
            error: None,
        })
        .collect();
    let mut runs = Vec::new();
    let mut end = SweepEnd::Completed;
    let mut error = None;
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
        on_event(SweepEvent::Started(p));
        let result = {
            let mut forward = |ev: ClientEvent| on_event(SweepEvent::Client(ev));
            xbench::client::run(&p.config, &mut forward, cancel.wait()).await
        };
        let report = match result {
            Ok(r) => r,
            Err(e) if cancel.fired => {
                // Ctrl-C while the test was still being set up.
                record.status = RunStatus::Interrupted;
                record.error = Some(e.to_string());
                end = SweepEnd::Interrupted;
                break;
            }
            Err(e) => {
                record.status = RunStatus::Failed;
                record.error = Some(e.to_string());
                error = Some(format!(
                    "run {} of {} ({}, repeat {}) could not start: {e}",
                    p.index + 1,
                    schedule.len(),
                    p.key.describe(),
                    p.repeat
                ));
                end = SweepEnd::Failed;
                break;
            }
        };
        match keep(&report, p) {
            Ok(run) => {
                if let Some(path) = &p.path
                    && let Err(e) = save(&report, path)
                {
                    record.status = RunStatus::Failed;
                    error = Some(format!("cannot save {}: {e}", path.display()));
                    record.error = error.clone();
                    end = SweepEnd::Failed;
                    break;
                }
                record.status = RunStatus::Completed;
                record.path = p.path.clone();
                on_event(SweepEvent::Finished {
                    planned: p,
                    run: &run,
                    saved: p.path.as_deref(),
                });
                runs.push(run);
            }
            Err((status, reason)) => {
                record.status = status;
                record.error = Some(reason.clone());
                on_event(SweepEvent::NotKept { planned: p, reason });
            }
        }
        if cancel.fired {
            end = SweepEnd::Interrupted;
            break;
        }
    }

    let count = |s: RunStatus| records.iter().filter(|r| r.status == s).count();
    let summary = SweepSummary {
        label: plan.label.clone(),
        dir: plan.save.clone(),
        cells: plan.cells().len(),
        repeat: plan.repeat.get(),
        planned: schedule.len(),
        completed: count(RunStatus::Completed),
        skipped: count(RunStatus::Skipped),
        not_kept: count(RunStatus::Failed) + count(RunStatus::Interrupted),
        end,
        error,
        runs: records,
    };
    Ok(SweepOutcome { runs, summary })
}

/// The run's figures when it completed; otherwise its status and why it is not kept.
fn keep(report: &TestReport, p: &PlannedRun) -> Result<Run, (RunStatus, String)> {
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
    Run::from_report(report, path, &p.config.label.clone().unwrap_or_default())
        .map_err(|e| (RunStatus::Failed, e.to_string()))
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
    std::fs::create_dir_all(&label_dir).map_err(io)?;
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
        let bytes = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
        let saved: TestReport =
            serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
        let differences = differences(&saved.spec, &p.config.spec);
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

/// Settings that differ between two specs, as `socket.window: 262144 ≠ null`.
fn differences(
    saved: &xbench::config::TestSpec,
    planned: &xbench::config::TestSpec,
) -> Vec<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        match (a, b) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let null = serde_json::Value::Null;
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(
                        &p,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(format!("{path}: saved {a}, now {b}")),
            _ => {}
        }
    }
    let (Ok(a), Ok(b)) = (serde_json::to_value(saved), serde_json::to_value(planned)) else {
        return vec!["the test settings".into()];
    };
    let mut out = Vec::new();
    walk("", &a, &b, &mut out);
    out
}

fn no_duplicates<T: PartialEq>(
    flag: &'static str,
    list: &[T],
    show: impl Fn(&T) -> String,
) -> Result<(), SweepError> {
    for (i, v) in list.iter().enumerate() {
        if list[..i].contains(v) {
            return Err(SweepError::Duplicate {
                flag,
                value: show(v),
            });
        }
    }
    Ok(())
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
    use super::*;

    fn plan(streams: &[u16], repeat: u32) -> SweepPlan {
        SweepPlan {
            base: ClientConfig::new("127.0.0.1"),
            streams: streams
                .iter()
                .map(|p| NonZeroU16::new(*p).unwrap())
                .collect(),
            windows: vec![],
            rr_sizes: vec![],
            flows: vec![],
            repeat: NonZeroU32::new(repeat).unwrap(),
            pause: Duration::ZERO,
            label: "a".into(),
            save: Some("/tmp/x".into()),
            resume: false,
        }
    }

    #[test]
    fn schedule_goes_round_robin_over_cells() {
        let s = plan(&[1, 2, 4], 3).schedule();
        let order: Vec<(u16, u32)> = s
            .iter()
            .map(|r| (r.key.streams.unwrap(), r.repeat))
            .collect();
        assert_eq!(
            order,
            [
                (1, 1),
                (2, 1),
                (4, 1),
                (1, 2),
                (2, 2),
                (4, 2),
                (1, 3),
                (2, 3),
                (4, 3)
            ]
        );
        assert_eq!(
            s[4].path.as_deref(),
            Some(Path::new("/tmp/x/a/tcp-up-P2/run-2.json"))
        );
        assert_eq!(s[4].config.label.as_deref(), Some("a"));
    }

    #[test]
    fn windows_and_streams_make_a_matrix() {
        let mut p = plan(&[1, 8], 1);
        p.windows = vec![64 << 10, 1 << 20];
        let slugs: Vec<String> = p.schedule().iter().map(|r| r.key.slug()).collect();
        assert_eq!(
            slugs,
            [
                "tcp-up-P1-w64K",
                "tcp-up-P8-w64K",
                "tcp-up-P1-w1M",
                "tcp-up-P8-w1M"
            ]
        );
    }

    #[test]
    fn bad_plans_are_refused() {
        assert!(matches!(
            plan(&[1, 2, 1], 1).check(),
            Err(SweepError::Duplicate { flag: "-P", .. })
        ));
        let mut p = plan(&[], 1);
        p.flows = vec![NonZeroU16::MIN];
        assert!(matches!(
            p.check(),
            Err(SweepError::NotApplicable {
                flag: "--flows",
                ..
            })
        ));
        let mut p = plan(&[1], 1);
        p.label = "../etc".into();
        assert!(matches!(p.check(), Err(SweepError::Label(_))));
    }

    #[test]
    fn spec_differences_name_the_setting() {
        let a = xbench::config::TestSpec::throughput();
        let mut b = a.clone();
        b.end = xbench::config::EndCondition::Duration(Duration::from_secs(5));
        assert_eq!(differences(&a, &b), ["end.duration: saved 10.0, now 5.0"]);
        assert!(differences(&a, &a).is_empty());
    }
}
