//! `run`: a suite measured on every path, one run at a time, round-robin over paths and cells
//! repeat by repeat (as `xbench client --repeat` goes over cells), each run's report collected
//! into `DIR/<path label>/<cell>/run-N.json` — the layout `xbench client --save` writes, so
//! `xbench report DIR` reads it — and the comparison table and charts drawn at the end
//! ([`report`]).
//!
//! Where a client runs is an [`Executor`]'s business: on AWS through SSM Run Command
//! ([`remote::SsmExecutor`]), on one machine through the path lab ([`lab::LabRun`]). The
//! command line of every run comes from [`crate::command::client_argv`], and every report's
//! spec is checked against the planned one before it is kept.
//!
//! A run is written only once complete (atomically), so an interrupted `run` loses at most the
//! run in progress; `--resume` skips what is collected (after checking it matches the suite)
//! and never collects a run twice. A path that fails [`RunOptions::give_up_after`] runs in a
//! row is given up; the others go on, and the report marks it. Not for printing: events go to
//! the caller.

mod child;
pub mod every;
pub mod here;
pub mod lab;
pub mod mtu;
pub mod remote;
pub mod report;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use serde::Serialize;
use xbench::ClientConfig;
use xbench::report::{Outcome, TestReport};
use xbench_report::cell::CellKey;
use xbench_report::fleet::{self, FleetError, SpreadPolicy};
use xbench_report::layout;
use xbench_report::run::Run;

use crate::aws::BoxFuture;
use crate::command;
use crate::error::Error;
use crate::state::write_file_atomically;
use crate::suite::{Suite, expected_run};

/// One path `run` measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPath {
    /// Its label (the results' directory).
    pub label: String,
    /// The address its client dials.
    pub target: String,
    /// The server's port.
    pub port: u16,
    /// Whether the server holds the run's key.
    pub authenticated: bool,
    /// Why this tool cannot run its client (your own host is the client), if so.
    pub unavailable: Option<String>,
    /// Client instances (a fleet when more than 1): each run is split over them
    /// ([`xbench_report::fleet::share_spec`]), started at one instant, and merged.
    pub clients: u16,
}

/// Runs one `xbench client` where a path's client is.
pub trait Executor: Send + Sync {
    /// Runs the client with `argv` (no program name) on instance `instance` (from 0; 0 for a
    /// path with one client) of `path`'s client and returns what it printed on stdout (one
    /// JSON report), or why there is none. `limit` is the longest the run may take.
    fn execute<'a>(
        &'a self,
        path: &'a RunPath,
        instance: usize,
        argv: &'a [String],
        limit: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>>;

    /// How far ahead a fleet's common start is set: longer than it takes to get the command
    /// to every instance (SSM's dispatch takes seconds; a local process, milliseconds).
    fn start_lead(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// Checks, before a fleet's runs, that its instances' clocks agree well enough to start
    /// together (see [`remote::SsmExecutor`]); `Ok` with a note to show, or why not.
    fn check_clocks<'a>(
        &'a self,
        _path: &'a RunPath,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(async { Ok(None) })
    }

    /// Where the run's key is on `path`'s client.
    fn psk_file(&self, path: &RunPath) -> Option<String>;

    /// What `path`'s client reports about MTU after its runs ([`mtu::PathMtu`]); `None`
    /// where the executor cannot ask (the default).
    fn path_mtu<'a>(
        &'a self,
        _path: &'a RunPath,
    ) -> BoxFuture<'a, Option<Result<mtu::PathMtu, String>>> {
        Box::pin(async { None })
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where results go.
    pub out: PathBuf,
    /// Skip runs already collected in `out` instead of refusing a directory that has some.
    pub resume: bool,
    /// Failed runs in a row after which a path is given up.
    pub give_up_after: u32,
    /// A fleet whose instances started too far apart: refused (the default; the run is
    /// failed, its instances' reports kept, and run again by `--resume`) or merged and marked
    /// (`--keep-fleet-spread`).
    pub fleet_spread: SpreadPolicy,
}

impl RunOptions {
    /// Results in `out`, giving a path up after 3 failed runs in a row.
    pub fn new(out: impl Into<PathBuf>) -> Self {
        RunOptions {
            out: out.into(),
            resume: false,
            give_up_after: 3,
            fleet_spread: SpreadPolicy::Refuse,
        }
    }
}

/// One run of the schedule.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Position in the schedule, from 0.
    pub index: usize,
    /// Which repeat, from 1.
    pub repeat: u32,
    /// Which path, in the paths' order.
    pub path: usize,
    /// The cell's directory name.
    pub cell: String,
    /// The test, host and label included.
    pub config: ClientConfig,
    /// Where its report goes.
    pub file: PathBuf,
}

/// The runs in order: for each repeat, each cell, each path.
pub fn schedule(suite: &Suite, paths: &[RunPath], out: &Path) -> Vec<Planned> {
    let cells = suite.cells();
    let mut list = Vec::new();
    for repeat in 1..=suite.repeat.get() {
        for spec in &cells {
            let cell = CellKey::of_spec(spec).slug();
            for (i, p) in paths.iter().enumerate() {
                let mut config = ClientConfig::new(p.target.clone());
                config.port = p.port;
                config.label = Some(p.label.clone());
                config.spec = spec.clone();
                config.trace = suite.trace.then(xbench::trace::TraceConfig::default);
                let file = layout::run_file(&layout::cell_dir(out, &p.label, &cell), repeat);
                list.push(Planned {
                    index: list.len(),
                    repeat,
                    path: i,
                    cell: cell.clone(),
                    config,
                    file,
                });
            }
        }
    }
    list
}

/// Something that happened during a run.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunEvent<'a> {
    /// Collected by an earlier, interrupted `run` (`--resume`).
    Skipped(&'a Planned),
    /// A run starts; with how far the whole run is.
    Started {
        /// The run.
        planned: &'a Planned,
        /// Runs done (collected, failed or skipped) before this one.
        done: usize,
        /// Runs planned.
        total: usize,
        /// Since `run` started.
        elapsed: Duration,
        /// Expected time left, this run included.
        eta: Duration,
    },
    /// A run was collected.
    Collected {
        /// The run.
        planned: &'a Planned,
        /// Its figures.
        run: &'a Run,
    },
    /// A run failed and was not kept.
    Failed {
        /// The run.
        planned: &'a Planned,
        /// Why.
        reason: String,
    },
    /// A path is given up (or cannot be run at all); its remaining runs are skipped.
    PathGivenUp {
        /// The path's label.
        label: &'a str,
        /// Why.
        reason: String,
    },
    /// Waiting between runs.
    Pausing(Duration),
    /// Waiting for a repeat's time (the suite's `every`).
    Waiting {
        /// The repeat, from 1.
        repeat: u32,
        /// Repeats in all.
        of: u32,
        /// When it is due.
        until: std::time::SystemTime,
    },
    /// A note about a fleet (its clocks' offsets).
    FleetNote {
        /// The path's label.
        label: &'a str,
        /// What to say.
        note: String,
    },
    /// A note about a path (what its client reports about MTU).
    PathNote {
        /// The path's label.
        label: &'a str,
        /// What to say.
        note: String,
    },
}

/// How one path's runs went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathSummary {
    /// Label.
    pub label: String,
    /// Runs planned.
    pub planned: usize,
    /// Runs collected, earlier ones (`--resume`) included.
    pub collected: usize,
    /// Runs that failed.
    pub failed: usize,
    /// Why the path was given up, if it was.
    pub given_up: Option<String>,
    /// The last failure's reason.
    pub last_error: Option<String>,
}

/// What a `run` did.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Every path, in order.
    pub paths: Vec<PathSummary>,
    /// Runs planned over all paths.
    pub planned: usize,
    /// Runs collected in this invocation.
    pub collected_now: usize,
    /// Runs skipped as already collected.
    pub skipped: usize,
    /// Whether Ctrl-C stopped it.
    pub interrupted: bool,
    /// How long it took, seconds.
    pub seconds: f64,
}

impl RunSummary {
    /// Whether every planned run is collected.
    pub fn complete(&self) -> bool {
        self.paths.iter().all(|p| p.collected == p.planned)
    }
}

/// The hidden summary `run` leaves in the results directory (`xbench report` skips hidden
/// files).
pub const SUMMARY_FILE: &str = ".xbench-deploy-run.json";

/// What a path's client reports about MTU, in its results directory (hidden, like the
/// summary, so `xbench report` reads runs only).
pub const MTU_FILE: &str = ".path-mtu.json";

/// Runs `suite` on `paths` through `exec`, collecting into `opts.out`. `cancel` resolving
/// (Ctrl-C) stops after cutting the run in progress short (it is not kept).
pub async fn run(
    suite: &Suite,
    paths: &[RunPath],
    exec: &dyn Executor,
    opts: &RunOptions,
    on_event: &mut (dyn FnMut(RunEvent<'_>) + Send),
    cancel: impl Future<Output = ()>,
) -> Result<RunSummary, Error> {
    let plan = schedule(suite, paths, &opts.out);
    check_fleets(&plan, paths)?;
    let done = prepare_out(&opts.out, &plan, opts.resume)?;
    let spread = spread_repeats(suite, opts, &plan, &done)?;
    let mut state = Progress::new(paths, &plan, &done);
    let mut cancel = Cancel(Box::pin(cancel), false);
    give_up_unrunnable(paths, exec, &mut state, on_event).await;
    for p in &plan {
        if done.contains(&p.index) {
            on_event(RunEvent::Skipped(p));
            continue;
        }
        let path = &paths[p.path];
        if state.paths[p.path].given_up.is_some() {
            continue;
        }
        let waited = match &spread {
            Some(s) if s.wait(p.repeat, std::time::SystemTime::now()).is_some() => {
                on_event(RunEvent::Waiting {
                    repeat: p.repeat,
                    of: suite.repeat.get(),
                    until: s.due(p.repeat),
                });
                tokio::select! {
                    () = s.until_due(p.repeat) => {}
                    () = cancel.wait() => {}
                }
                true
            }
            _ => false,
        };
        if state.ran > 0 && !waited && !suite.pause.is_zero() {
            on_event(RunEvent::Pausing(suite.pause));
            tokio::select! {
                () = tokio::time::sleep(suite.pause) => {}
                () = cancel.wait() => {}
            }
        }
        if cancel.1 {
            break;
        }
        on_event(state.started(p, &plan, spread.as_ref()));
        let begun = Instant::now();
        let result = tokio::select! {
            r = one_run(exec, path, p, opts.fleet_spread) => Some(r),
            () = cancel.wait() => None,
        };
        let Some(result) = result else {
            break;
        };
        let result = result?;
        state.ran += 1;
        state.run_time += begun.elapsed();
        record(result, p, &path.label, opts, &mut state, on_event)?;
    }
    if !cancel.1 {
        save_path_mtus(paths, exec, &opts.out, on_event).await?;
    }
    let summary = state.finish(cancel.1);
    let json = serde_json::to_vec_pretty(&summary).map_err(|e| Error::Internal(e.to_string()))?;
    save(&opts.out.join(SUMMARY_FILE), &json)?;
    Ok(summary)
}

/// The schedule that spreads the repeats (`suite.every`), anchored for the first repeat not
/// yet collected; without one, a fresh run forgets an earlier run's schedule.
fn spread_repeats(
    suite: &Suite,
    opts: &RunOptions,
    plan: &[Planned],
    done: &BTreeSet<usize>,
) -> Result<Option<every::Spread>, Error> {
    let next = plan
        .iter()
        .find(|p| !done.contains(&p.index))
        .map_or(1, |p| p.repeat);
    let spread = match suite.every {
        Some(e) => Some(every::Spread::start(&opts.out, e, opts.resume, next)?),
        None if !opts.resume => {
            every::Spread::forget(&opts.out);
            None
        }
        None => None,
    };
    Ok(spread)
}

/// Paths `run` cannot measure, given up before the first run: those the executor found
/// unavailable, and fleets whose clocks disagree (a fleet's clock note is passed on).
async fn give_up_unrunnable(
    paths: &[RunPath],
    exec: &dyn Executor,
    state: &mut Progress,
    on_event: &mut (dyn FnMut(RunEvent<'_>) + Send),
) {
    for (label, reason) in paths
        .iter()
        .filter_map(|p| p.unavailable.as_ref().map(|r| (p.label.as_str(), r)))
    {
        state.give_up(label, reason.clone(), on_event);
    }
    for path in paths
        .iter()
        .filter(|p| p.clients > 1 && p.unavailable.is_none())
    {
        match exec.check_clocks(path).await {
            Ok(Some(note)) => on_event(RunEvent::FleetNote {
                label: &path.label,
                note,
            }),
            Ok(None) => {}
            Err(why) => state.give_up(&path.label, why, on_event),
        }
    }
}

/// Keeps a collected run (a fleet's parts beside it), or counts a failed one, giving its
/// path up after [`RunOptions::give_up_after`] in a row.
fn record(
    result: Result<Collected, String>,
    p: &Planned,
    label: &str,
    opts: &RunOptions,
    state: &mut Progress,
    on_event: &mut (dyn FnMut(RunEvent<'_>) + Send),
) -> Result<(), Error> {
    match result {
        Ok(Collected { bytes, run, parts }) => {
            for (k, part) in parts.iter().enumerate() {
                save(&layout::fleet_part_file(&p.file, k + 1), part)?;
            }
            save(&p.file, &bytes)?;
            state.collected(p);
            on_event(RunEvent::Collected {
                planned: p,
                run: &run,
            });
        }
        Err(reason) => {
            let give_up = state.failed(p, &reason, opts.give_up_after);
            on_event(RunEvent::Failed {
                planned: p,
                reason: reason.clone(),
            });
            if give_up {
                let why = format!(
                    "{} runs in a row failed, the last: {reason}",
                    opts.give_up_after
                );
                state.give_up(label, why, on_event);
            }
        }
    }
    Ok(())
}

/// Each measurable path's MTU facts, saved beside its cells ([`MTU_FILE`]) and announced.
async fn save_path_mtus(
    paths: &[RunPath],
    exec: &dyn Executor,
    out: &Path,
    on_event: &mut (dyn FnMut(RunEvent<'_>) + Send),
) -> Result<(), Error> {
    for path in paths.iter().filter(|p| p.unavailable.is_none()) {
        let note = match exec.path_mtu(path).await {
            None => continue,
            Some(Ok(m)) => {
                let json =
                    serde_json::to_vec_pretty(&m).map_err(|e| Error::Internal(e.to_string()))?;
                save(&out.join(&path.label).join(MTU_FILE), &json)?;
                m.line()
            }
            Some(Err(why)) => format!("MTU not read: {why}"),
        };
        on_event(RunEvent::PathNote {
            label: &path.label,
            note,
        });
    }
    Ok(())
}

/// A run's report (a fleet's merged one), its figures, and a fleet's parts in instance
/// order.
struct Collected {
    bytes: Vec<u8>,
    run: Run,
    parts: Vec<Vec<u8>>,
}

/// One planned run on `path`: on its one client, or split over its fleet, started at one
/// instant and merged. `Err` only for what stops the whole `run`; a failed run is `Ok(Err)`.
async fn one_run(
    exec: &dyn Executor,
    path: &RunPath,
    p: &Planned,
    spread: SpreadPolicy,
) -> Result<Result<Collected, String>, Error> {
    let psk = exec.psk_file(path);
    // The suite's cells were checked against the same rules when it was loaded.
    let argv_of = |config: &ClientConfig| {
        command::client_argv(config, psk.as_deref())
            .map_err(|e| Error::Internal(format!("path {}: a run as a command: {e}", path.label)))
    };
    if path.clients <= 1 {
        let argv = argv_of(&p.config)?;
        let r = exec.execute(path, 0, &argv, run_limit(&p.config)).await;
        return Ok(r
            .and_then(|bytes| keep(&bytes, p))
            .map(|(bytes, run)| Collected {
                bytes,
                run,
                parts: Vec::new(),
            }));
    }
    let lead = exec.start_lead();
    let start_at = std::time::SystemTime::now() + lead;
    let mut configs = Vec::new();
    let mut argvs = Vec::new();
    for k in 0..usize::from(path.clients) {
        let mut config = p.config.clone();
        // Checked by `check_fleets` before the first run.
        config.spec = fleet::share_spec(&p.config.spec, path.clients, k)
            .map_err(|e| Error::Internal(e.to_string()))?;
        let mut argv = argv_of(&config)?;
        argv.push("--start-at".into());
        argv.push(command::start_at_arg(start_at));
        argvs.push(argv);
        configs.push(config);
    }
    let limit = run_limit(&p.config) + lead;
    let futures = argvs
        .iter()
        .enumerate()
        .map(|(k, argv)| exec.execute(path, k, argv, limit))
        .collect();
    let results = join_all(futures).await;
    merge_fleet(results, &configs, p, spread)
}

/// A fleet run's reports (`results`, in instance order, each run with its share `configs`)
/// checked, kept as parts and merged into the path's report: apart from [`one_run`], which
/// starts the instances. `Err` only for what stops the whole `run`.
fn merge_fleet(
    results: Vec<Result<Vec<u8>, String>>,
    configs: &[ClientConfig],
    p: &Planned,
    spread: SpreadPolicy,
) -> Result<Result<Collected, String>, Error> {
    let mut reports = Vec::new();
    let mut parts = Vec::new();
    for (k, (r, config)) in results.into_iter().zip(configs).enumerate() {
        let part = Planned {
            config: config.clone(),
            ..p.clone()
        };
        match r.and_then(|bytes| keep(&bytes, &part).map(|_| bytes)) {
            Ok(bytes) => {
                let report: TestReport = serde_json::from_slice(&bytes)
                    .map_err(|e| Error::Internal(format!("a kept report: {e}")))?;
                reports.push(report);
                parts.push(bytes);
            }
            Err(why) => return Ok(Err(format!("client instance {}: {why}", k + 1))),
        }
    }
    let merged = match fleet::merge_with(&reports, &p.config.spec, spread) {
        Ok(m) => m,
        Err(e @ FleetError::Spread { .. }) => {
            // Not the path's figure, but what each instance measured is kept: a refused
            // run's parts are beside where its merged report would have been.
            for (k, part) in parts.iter().enumerate() {
                save(&layout::fleet_part_file(&p.file, k + 1), part)?;
            }
            let dir = layout::fleet_part_file(&p.file, 1);
            let dir = dir.parent().unwrap_or(&p.file).display();
            return Ok(Err(format!("{e} (each instance's report is in {dir})")));
        }
        Err(e) => return Ok(Err(e.to_string())),
    };
    let bytes = serde_json::to_vec_pretty(&merged).map_err(|e| Error::Internal(e.to_string()))?;
    let label = p.config.label.clone().unwrap_or_default();
    Ok(Run::from_report(&merged, p.file.clone(), &label)
        .map(|run| Collected { bytes, run, parts })
        .map_err(|e| e.to_string()))
}

/// Polls every future until all are done (a fleet's instances run at once).
pub(crate) async fn join_all<T>(mut futures: Vec<BoxFuture<'_, T>>) -> Vec<T> {
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futures.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// Refuses, before anything runs, a cell a path's fleet cannot split (fewer streams or flows
/// than instances, a UDP test).
pub fn check_fleets(plan: &[Planned], paths: &[RunPath]) -> Result<(), Error> {
    for p in plan.iter().filter(|p| p.repeat == 1) {
        let path = &paths[p.path];
        if path.clients > 1 {
            fleet::share_spec(&p.config.spec, path.clients, 0).map_err(|e| Error::Fleet {
                path: path.label.clone(),
                clients: path.clients,
                cell: p.cell.clone(),
                message: e.to_string(),
            })?;
        }
    }
    Ok(())
}

/// [`check_fleets`] for a scenario and its suite, as `plan`, `up` and `run` load them: a
/// fleet that cannot share a cell is refused before anything is created.
pub fn check_scenario_fleets(scenario: &crate::scenario::Scenario) -> Result<(), Error> {
    let Some(suite) = &scenario.suite else {
        return Ok(());
    };
    let paths: Vec<RunPath> = scenario
        .paths
        .iter()
        .map(|p| RunPath {
            label: p.label.clone(),
            target: String::new(),
            port: scenario.port,
            authenticated: false,
            unavailable: None,
            clients: p.clients,
        })
        .collect();
    check_fleets(&schedule(suite, &paths, Path::new("")), &paths)
}

/// The longest one run may take before it is abandoned: the test, its start and drain, and
/// a minute for the remote side's own delays.
pub fn run_limit(config: &ClientConfig) -> Duration {
    expected_run(&config.spec)
        + config.connect_timeout * 2
        + config.drain_timeout
        + Duration::from_secs(60)
}

/// The report and its figures when the run completed the planned test; else why not.
fn keep(bytes: &[u8], p: &Planned) -> Result<(Vec<u8>, Run), String> {
    let report: TestReport = serde_json::from_slice(bytes).map_err(|e| {
        let head: String = String::from_utf8_lossy(bytes).chars().take(200).collect();
        format!("the client printed no report ({e}): {head}")
    })?;
    match &report.outcome {
        Outcome::Completed => {}
        Outcome::Interrupted => return Err("the test was interrupted".into()),
        Outcome::Failed { error } => return Err(format!("the test failed: {error}")),
    }
    let differences = command::spec_differences(&report.spec, &p.config.spec);
    if !differences.is_empty() {
        return Err(format!(
            "the client ran another test than planned ({}): its xbench reads these flags \
             differently; use the same xbench version on the hosts",
            differences.join(", ")
        ));
    }
    let label = p.config.label.clone().unwrap_or_default();
    let run = Run::from_report(&report, p.file.clone(), &label).map_err(|e| e.to_string())?;
    Ok((bytes.to_vec(), run))
}

fn save(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let fail = |e: std::io::Error| Error::Results {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    write_file_atomically(path, bytes).map_err(fail)
}

/// The schedule indices already collected. Without `resume`, any collected run refuses the
/// directory; with it, each must be a report of the planned test.
fn prepare_out(out: &Path, plan: &[Planned], resume: bool) -> Result<BTreeSet<usize>, Error> {
    std::fs::create_dir_all(out).map_err(|e| Error::Results {
        path: out.display().to_string(),
        message: e.to_string(),
    })?;
    // Runs of another suite under a path's directory would be averaged into the report.
    let labels: BTreeSet<&str> = plan
        .iter()
        .filter_map(|p| p.config.label.as_deref())
        .collect();
    if !resume && labels.iter().any(|l| holds_runs(&out.join(l))) {
        return Err(Error::OutputHoldsRuns {
            dir: out.display().to_string(),
        });
    }
    let mut done = BTreeSet::new();
    for p in plan.iter().filter(|p| p.file.exists()) {
        let shown = p.file.display().to_string();
        let bytes = std::fs::read(&p.file).map_err(|e| Error::Results {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let report: TestReport =
            serde_json::from_slice(&bytes).map_err(|e| Error::ResumeMismatch {
                path: shown.clone(),
                differences: format!("not a readable report: {e}"),
            })?;
        let differences = command::spec_differences(&report.spec, &p.config.spec);
        if !differences.is_empty() {
            return Err(Error::ResumeMismatch {
                path: shown,
                differences: differences.join(", "),
            });
        }
        done.insert(p.index);
    }
    Ok(done)
}

/// Whether `dir` (or a directory below it) holds a run file.
pub fn holds_runs(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() {
            holds_runs(&e.path())
        } else {
            name.ends_with(".json") && !name.starts_with('.')
        }
    })
}

/// Counts and timing while a run goes.
struct Progress {
    paths: Vec<PathSummary>,
    /// Runs collected before (`--resume`), by schedule index.
    done: BTreeSet<usize>,
    /// Failures in a row, per path.
    streak: Vec<u32>,
    started: Instant,
    ran: u32,
    run_time: Duration,
    skipped: usize,
    collected_now: usize,
    planned: usize,
}

impl Progress {
    fn new(paths: &[RunPath], plan: &[Planned], done: &BTreeSet<usize>) -> Self {
        let summaries = paths
            .iter()
            .enumerate()
            .map(|(i, p)| PathSummary {
                label: p.label.clone(),
                planned: plan.iter().filter(|r| r.path == i).count(),
                collected: plan
                    .iter()
                    .filter(|r| r.path == i && done.contains(&r.index))
                    .count(),
                failed: 0,
                given_up: None,
                last_error: None,
            })
            .collect();
        Progress {
            paths: summaries,
            done: done.clone(),
            streak: vec![0; paths.len()],
            started: Instant::now(),
            ran: 0,
            run_time: Duration::ZERO,
            skipped: done.len(),
            collected_now: 0,
            planned: plan.len(),
        }
    }

    fn started<'a>(
        &self,
        p: &'a Planned,
        plan: &[Planned],
        spread: Option<&every::Spread>,
    ) -> RunEvent<'a> {
        let done =
            self.skipped + self.collected_now + self.paths.iter().map(|s| s.failed).sum::<usize>();
        let left: Vec<&Planned> = plan[p.index..]
            .iter()
            .filter(|r| self.paths[r.path].given_up.is_none() && !self.done.contains(&r.index))
            .collect();
        let per_run = |runs: &[&Planned]| -> Duration {
            if self.ran > 0 {
                self.run_time / self.ran * u32::try_from(runs.len()).unwrap_or(u32::MAX)
            } else {
                runs.iter().map(|r| expected_run(&r.config.spec)).sum()
            }
        };
        let mut eta = per_run(&left);
        // Spread repeats: the last cannot end before it is due and then run.
        if let (Some(s), Some(last)) = (spread, left.iter().map(|r| r.repeat).max()) {
            let its: Vec<&Planned> = left.iter().copied().filter(|r| r.repeat == last).collect();
            let wait = s
                .due(last)
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            eta = eta.max(wait + per_run(&its));
        }
        RunEvent::Started {
            planned: p,
            done,
            total: self.planned,
            elapsed: self.started.elapsed(),
            eta,
        }
    }

    fn collected(&mut self, p: &Planned) {
        self.paths[p.path].collected += 1;
        self.streak[p.path] = 0;
        self.collected_now += 1;
    }

    /// Records a failure; true when the path should be given up.
    fn failed(&mut self, p: &Planned, reason: &str, limit: u32) -> bool {
        let s = &mut self.paths[p.path];
        s.failed += 1;
        s.last_error = Some(reason.to_owned());
        self.streak[p.path] += 1;
        self.streak[p.path] >= limit.max(1)
    }

    fn give_up(
        &mut self,
        label: &str,
        reason: String,
        on_event: &mut (dyn FnMut(RunEvent<'_>) + Send),
    ) {
        if let Some(s) = self.paths.iter_mut().find(|s| s.label == label) {
            s.given_up = Some(reason.clone());
        }
        on_event(RunEvent::PathGivenUp { label, reason });
    }

    fn finish(self, interrupted: bool) -> RunSummary {
        RunSummary {
            paths: self.paths,
            planned: self.planned,
            collected_now: self.collected_now,
            skipped: self.skipped,
            interrupted,
            seconds: self.started.elapsed().as_secs_f64(),
        }
    }
}

/// The caller's cancel future, polled by every wait and never again once it fired.
struct Cancel<F>(Pin<Box<F>>, bool);

impl<F: Future<Output = ()>> Cancel<F> {
    async fn wait(&mut self) {
        if !self.1 {
            self.0.as_mut().await;
            self.1 = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`run`] to the end, never cancelled.
    async fn run_to_end(
        suite: &Suite,
        paths: &[RunPath],
        exec: &dyn Executor,
        opts: &RunOptions,
        on_event: &mut (dyn FnMut(RunEvent<'_>) + Send),
    ) -> RunSummary {
        run(suite, paths, exec, opts, on_event, std::future::pending())
            .await
            .unwrap()
    }

    /// The waits for a repeat's time [`run`] announced, as (repeat, of, until).
    async fn waits_of(
        suite: &Suite,
        paths: &[RunPath],
        exec: &dyn Executor,
        opts: &RunOptions,
    ) -> Vec<(u32, u32, std::time::SystemTime)> {
        let mut waits = Vec::new();
        let mut on_event = |e: RunEvent<'_>| {
            if let RunEvent::Waiting { repeat, of, until } = e {
                waits.push((repeat, of, until));
            }
        };
        run_to_end(suite, paths, exec, opts, &mut on_event).await;
        waits
    }

    fn path(clients: u16) -> RunPath {
        RunPath {
            label: "peering".into(),
            target: "10.0.0.1".into(),
            port: 5201,
            authenticated: true,
            unavailable: None,
            clients,
        }
    }

    #[test]
    fn a_fleet_refuses_cells_it_cannot_share_before_anything_runs() {
        let suite = Suite::from_toml(
            "time = 1\n[[test]]\nparallel = [2, 8]\n[[test]]\nrr = true\nflows = 3\n",
        )
        .unwrap();
        let plan = schedule(&suite, &[path(2)], Path::new("/nonexistent"));
        check_fleets(&plan, &[path(2)]).unwrap();
        let plan = schedule(&suite, &[path(4)], Path::new("/nonexistent"));
        let e = check_fleets(&plan, &[path(4)]).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        assert_eq!(
            e.to_string(),
            "path 'peering' (4 client instances), cell tcp-up-P2: parallel = 2 cannot be shared \
             by 4 client instances (each runs at least one); use at least 4, or fewer clients"
        );
    }

    /// An executor whose every run fails at once, noting when it was asked.
    struct Failing(std::sync::Mutex<Vec<std::time::SystemTime>>);

    impl Executor for Failing {
        fn execute<'a>(
            &'a self,
            _path: &'a RunPath,
            _instance: usize,
            _argv: &'a [String],
            _limit: Duration,
        ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
            self.0.lock().unwrap().push(std::time::SystemTime::now());
            Box::pin(async { Err("no host".to_owned()) })
        }

        fn psk_file(&self, _path: &RunPath) -> Option<String> {
            None
        }
    }

    /// A fleet whose instances each run a real test against an in-process server, their
    /// reports' starts put `apart` after one another (instance k at `base` + k × `apart`).
    struct Staggered {
        configs: Vec<ClientConfig>,
        base: std::time::SystemTime,
        apart: Duration,
    }

    impl Executor for Staggered {
        fn execute<'a>(
            &'a self,
            _path: &'a RunPath,
            instance: usize,
            _argv: &'a [String],
            _limit: Duration,
        ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
            Box::pin(async move {
                let config = &self.configs[instance];
                let mut r = xbench::client::run(config, &mut |_| {}, std::future::pending())
                    .await
                    .map_err(|e| e.to_string())?;
                let k = u32::try_from(instance).unwrap();
                r.started_at = xbench::time::rfc3339(self.base + self.apart * k);
                Ok(serde_json::to_vec(&r).unwrap())
            })
        }

        fn psk_file(&self, _path: &RunPath) -> Option<String> {
            None
        }
    }

    /// Issue 32: a fleet whose instances started further apart than a tenth of the interval
    /// is refused, its instances' reports kept; `--resume` with `--keep-fleet-spread`
    /// (`SpreadPolicy::Mark`) collects the same run merged and marked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fleet_that_started_apart_is_refused_and_its_parts_kept() {
        let out = std::env::temp_dir().join(format!("xbench-spread-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let server = xbench::LocalServer::start(None).await.unwrap();
        let suite = Suite::from_toml("time = 0.5\ninterval = 1\n[[test]]\nparallel = 2\n").unwrap();
        let mut fleet = path(2);
        fleet.target = "127.0.0.1".into();
        fleet.port = server.port();
        fleet.authenticated = false;
        let paths = [fleet];
        let plan = schedule(&suite, &paths, &out);
        let configs = (0..2)
            .map(|k| {
                let mut c = plan[0].config.clone();
                c.spec = fleet::share_spec(&c.spec, 2, k).unwrap();
                c
            })
            .collect();
        let exec = Staggered {
            configs,
            base: std::time::SystemTime::now(),
            apart: Duration::from_millis(250),
        };
        let mut opts = RunOptions::new(&out);
        let mut failed = Vec::new();
        let mut on_event = |e: RunEvent<'_>| {
            if let RunEvent::Failed { reason, .. } = e {
                failed.push(reason);
            }
        };
        let summary = run_to_end(&suite, &paths, &exec, &opts, &mut on_event).await;
        assert!(!summary.complete(), "{summary:?}");
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].contains("started 250 ms apart"), "{}", failed[0]);
        assert!(failed[0].contains("run-1.fleet"), "{}", failed[0]);
        assert!(!plan[0].file.exists());
        for k in 1..=2 {
            assert!(layout::fleet_part_file(&plan[0].file, k).exists());
        }

        opts.resume = true;
        opts.fleet_spread = SpreadPolicy::Mark;
        let mut collected = 0;
        let mut on_event = |e: RunEvent<'_>| match e {
            RunEvent::Collected { .. } => collected += 1,
            RunEvent::Failed { reason, .. } => panic!("{reason}"),
            _ => {}
        };
        let summary = run_to_end(&suite, &paths, &exec, &opts, &mut on_event).await;
        assert!(summary.complete(), "{summary:?}");
        assert_eq!(collected, 1);
        let merged: TestReport =
            serde_json::from_slice(&std::fs::read(&plan[0].file).unwrap()).unwrap();
        assert!(
            merged
                .warnings
                .iter()
                .any(|w| w.contains("started 250 ms apart")),
            "{:?}",
            merged.warnings
        );
        server.stop().await.unwrap();
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// `every`: the second repeat waits for its time, announced with when it is due; a
    /// `--resume` after that time keeps the schedule and runs what is due at once.
    #[tokio::test]
    async fn a_repeat_waits_for_its_time_and_a_resume_keeps_the_schedule() {
        let out = std::env::temp_dir().join(format!("xbench-every-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let suite =
            Suite::from_toml("time = 1\nrepeat = 2\nevery = 3\n[[test]]\nparallel = 1\n").unwrap();
        let exec = Failing(std::sync::Mutex::new(Vec::new()));
        let mut opts = RunOptions::new(&out);
        opts.give_up_after = 10;
        let paths = [path(1)];
        let waits = waits_of(&suite, &paths, &exec, &opts).await;
        let asked = exec.0.lock().unwrap().clone();
        assert_eq!(asked.len(), 2);
        assert_eq!(waits.len(), 1, "{waits:?}");
        let (repeat, of, until) = waits[0];
        assert_eq!((repeat, of), (2, 2));
        assert!(asked[1] >= until, "{asked:?} {until:?}");
        // The anchor is when the schedule began, in whole seconds, before the first run: the
        // second is due at most 3 s after the first was asked for.
        let gap = until.duration_since(asked[0]).unwrap();
        assert!(gap <= Duration::from_secs(3), "{gap:?}");

        // Resumed after both repeats were due: nothing waits.
        opts.resume = true;
        let waits = waits_of(&suite, &paths, &exec, &opts).await;
        assert!(waits.is_empty(), "{waits:?}");
        assert_eq!(exec.0.lock().unwrap().len(), 4);
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// The ETA counts the wait for the last repeat: 2 repeats an hour apart are an hour away
    /// from done, not two runs.
    #[test]
    fn the_eta_waits_for_the_last_repeat() {
        let out = std::env::temp_dir().join(format!("xbench-every-eta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let suite =
            Suite::from_toml("time = 1\nrepeat = 2\nevery = \"1h\"\n[[test]]\nparallel = 1\n")
                .unwrap();
        let paths = [path(1)];
        let plan = schedule(&suite, &paths, &out);
        let state = Progress::new(&paths, &plan, &BTreeSet::new());
        let spread = every::Spread::start(&out, Duration::from_secs(3600), false, 1).unwrap();
        let eta = |s: Option<&every::Spread>| match state.started(&plan[0], &plan, s) {
            RunEvent::Started { eta, .. } => eta,
            _ => unreachable!(),
        };
        // Two runs of a 1 s test and its overhead.
        assert_eq!(eta(None), Duration::from_secs(10));
        let spread_eta = eta(Some(&spread));
        assert!(
            spread_eta > Duration::from_secs(3590) && spread_eta <= Duration::from_secs(3605),
            "{spread_eta:?}"
        );
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// `trace = true` in the suite: every run's command carries `--trace` (issue 33: deploy's
    /// runs record the hops); without it, none does.
    #[test]
    fn a_suite_that_asks_for_the_hops_traces_every_run() {
        let text = "time = 1
[[test]]
parallel = 2
[[test]]
rr = true
";
        let argv = |suite: &Suite| -> Vec<Vec<String>> {
            schedule(suite, &[path(1)], Path::new("/nonexistent"))
                .iter()
                .map(|p| command::client_argv(&p.config, None).unwrap())
                .collect()
        };
        let plain = Suite::from_toml(text).unwrap();
        assert!(!plain.trace);
        assert!(
            argv(&plain)
                .iter()
                .all(|a| !a.iter().any(|x| x == "--trace"))
        );
        let traced = Suite::from_toml(&format!(
            "trace = true
{text}"
        ))
        .unwrap();
        let runs = argv(&traced);
        assert_eq!(runs.len(), 2);
        assert!(
            runs.iter().all(|a| a.iter().any(|x| x == "--trace")),
            "{runs:?}"
        );
    }
}
