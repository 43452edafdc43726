//! Each subcommand: turn flags into library values, call the library, print the result.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use tokio::sync::Notify;
use xbench_deploy::apply::UpOptions;
use xbench_deploy::aws::accelerator::NoAccelerators;
use xbench_deploy::aws::{Aws, AwsSettings, Timing};
use xbench_deploy::binary::{self, XbenchBinary};
use xbench_deploy::cost::PriceTable;
use xbench_deploy::run::here::{self, Here, HereOptions};
use xbench_deploy::run::lab::{LabOptions, LabRun};
use xbench_deploy::run::remote::SsmExecutor;
use xbench_deploy::run::{self, Executor, RunOptions, RunPath, RunSummary};
use xbench_deploy::scenario::XbenchInstall;
use xbench_deploy::state::{Outputs, RunId, StateDir, parse_time, write_json};
use xbench_deploy::{Deployer, Error, Plan, Scenario, Suite};

use crate::cli::{
    AllArgs, BinaryArgs, Common, DownArgs, GcArgs, PlanArgs, PolicyArgs, ReadyArgs, ReportArgs,
    RunArgs, SuiteArgs, UpArgs,
};
use crate::exit::{BadInput, Exit};
use crate::render::{self, BinaryNote};

fn state_dir(c: &Common) -> StateDir {
    if let Some(d) = &c.state_dir {
        return StateDir::new(d);
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."));
    StateDir::new(base.join("xbench-deploy"))
}

async fn deployer(c: &Common, ready: Option<&ReadyArgs>) -> Result<Deployer> {
    let settings = AwsSettings {
        endpoint_url: c.endpoint_url.clone(),
        profile: c.profile.clone(),
        static_credentials: None,
        retry_backoff: Some(Duration::from_millis(c.retry_backoff_ms)),
        tls_only_buckets: None,
    };
    let aws = Aws::connect(&settings).await.context("connecting to AWS")?;
    let timing = Timing {
        poll: Duration::from_millis(c.poll_ms),
        timeout: Duration::from_secs(c.wait_secs),
    };
    let mut d = Deployer::new(aws, state_dir(c)).with_timing(timing);
    if let Some(r) = ready {
        d = d.with_ready_timeout(Duration::from_secs(r.ready_secs));
        if r.skip_ready {
            d = d.without_readiness();
        }
    }
    if c.skip_accelerators {
        d = d.with_accelerators(Arc::new(NoAccelerators));
    }
    Ok(d)
}

/// The scenario (its suite replaced by `--suite FILE`, then `--time`/`--repeat` applied)
/// and its plan.
fn load(file: &Path, suite: Option<&SuiteArgs>) -> Result<(Scenario, Plan)> {
    let mut scenario = Scenario::from_file(file)
        .map_err(Error::from)
        .with_context(|| format!("scenario {}", file.display()))?;
    if let Some(a) = suite {
        if let Some(f) = &a.suite {
            let text = std::fs::read_to_string(f)
                .map_err(|e| BadInput(format!("cannot read suite {}: {e}", f.display())))?;
            let s = Suite::from_toml(&text)
                .map_err(Error::from)
                .with_context(|| format!("suite {}", f.display()))?;
            scenario.suite = Some(s);
        }
        scenario.suite = scenario
            .suite
            .take()
            .map(|s| s.with_overrides(a.time, a.repeat).with_every(a.every));
    }
    run::check_scenario_fleets(&scenario)
        .with_context(|| format!("scenario {}", file.display()))?;
    let prices = PriceTable::shipped().with_overrides(&scenario.prices);
    let plan = Plan::build(&scenario, &prices)
        .map_err(Error::from)
        .with_context(|| format!("scenario {}", file.display()))?;
    Ok((scenario, plan))
}

/// A suite must end before the hosts stop themselves (`ttl_hours` after `up`, on their own
/// clocks), with a quarter of an hour for `up` and its readiness checks: otherwise its last
/// repeats fail on hosts that are gone. Not for `run --lab` (no hosts) or `policy`.
fn check_span(scenario: &Scenario, plan: &Plan, file: &Path) -> Result<()> {
    let Some(s) = &scenario.suite else {
        return Ok(());
    };
    let paths = plan.paths.len();
    let span = s.expected(paths);
    let need = (span + UP_ALLOWANCE).as_secs().div_ceil(3600);
    if u64::from(scenario.ttl_hours) < need {
        return Err(BadInput(format!(
            "scenario {}: the suite takes about {} over {paths} path(s){}, and `up` a quarter of an hour or so, but the hosts stop themselves after ttl_hours = {}: set ttl_hours to at least {need}",
            file.display(),
            render::hms(span),
            match s.every {
                Some(e) if s.repeat.get() > 1 => {
                    format!(" ({} repeats, one every {})", s.repeat, render::hms(e))
                }
                _ => String::new(),
            },
            scenario.ttl_hours
        ))
        .into());
    }
    Ok(())
}

/// What `up` and its readiness checks take before a suite starts, for [`check_span`].
const UP_ALLOWANCE: Duration = Duration::from_secs(15 * 60);

/// The binary to upload, when the scenario uploads one: inspected, and refused when built
/// for another architecture than the instance types' names tell; one that needs a newer
/// glibc than the image has is refused by `up` and only flagged here.
fn binary_note(scenario: &Scenario, plan: &Plan, a: &BinaryArgs) -> Result<BinaryNote> {
    match &scenario.xbench {
        XbenchInstall::Url { url, .. } => Ok(BinaryNote::Url(url.clone())),
        XbenchInstall::CargoGit { git, .. } => Ok(BinaryNote::Cargo(git.clone())),
        XbenchInstall::Upload => {
            let path = a.xbench.clone().unwrap_or_else(binary::default_path);
            match XbenchBinary::inspect(&path) {
                Ok(bin) => {
                    binary::check_plan(&bin, scenario, plan, false).map_err(Error::from)?;
                    let problem = binary::check_plan(&bin, scenario, plan, true)
                        .err()
                        .map(|e| e.to_string());
                    Ok(BinaryNote::Upload(bin, problem))
                }
                Err(binary::BinaryError::Missing { path }) => Ok(BinaryNote::Missing(path)),
                Err(e) => Err(Error::from(e).into()),
            }
        }
    }
}

#[allow(clippy::print_stdout)] // the plan is the command's output
pub(crate) async fn plan(c: &Common, a: PlanArgs) -> Result<Exit> {
    let (scenario, plan) = load(&a.file, Some(&a.suite))?;
    check_span(&scenario, &plan, &a.file)?;
    let note = binary_note(&scenario, &plan, &a.binary)?;
    let pre = if a.check {
        let d = deployer(c, None).await?;
        let bin = match &note {
            BinaryNote::Upload(b, None) => Some(b),
            _ => None,
        };
        let pre = d
            .preflight(&scenario, &plan, bin)
            .await
            .context("checking the scenario with AWS")?;
        d.check_private_gateways(&plan, None)
            .await
            .context("checking your gateways with AWS")?;
        Some(pre)
    } else {
        None
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", render::plan(&plan, pre.as_ref(), &scenario, &note));
        if !a.check {
            println!(
                "(instance types, AMIs and zones are checked with AWS by `up`, or now with --check)"
            );
        }
    }
    Ok(Exit::Success)
}

/// The binary `up` uploads; refused (exit 2) when missing or unusable.
fn upload_binary(scenario: &Scenario, plan: &Plan, a: &BinaryArgs) -> Result<Option<XbenchBinary>> {
    match binary_note(scenario, plan, a)? {
        BinaryNote::Upload(b, None) => Ok(Some(b)),
        BinaryNote::Upload(b, Some(_)) => {
            binary::check_plan(&b, scenario, plan, true).map_err(Error::from)?;
            Ok(Some(b))
        }
        BinaryNote::Missing(path) => Err(Error::from(binary::BinaryError::Missing { path }).into()),
        _ => Ok(None),
    }
}

fn confirm(yes: bool, what: &str) -> Result<()> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(BadInput(format!(
            "refusing to {what} without confirmation: stdin is not a terminal; pass --yes"
        ))
        .into());
    }
    #[allow(clippy::print_stdout)] // the prompt
    {
        print!("\n{what}? type 'yes' to go on: ");
    }
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != "yes" {
        return Err(BadInput("not confirmed; nothing was created".into()).into());
    }
    Ok(())
}

/// Ctrl-C: the first one stops what is going on (and the caller cleans up); a second one
/// exits at once with `second`'s words.
#[derive(Clone)]
struct Interrupts {
    fired: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Interrupts {
    fn new(first: &'static str, second: &'static str) -> Self {
        let i = Interrupts {
            fired: Arc::new(AtomicBool::new(false)),
            notify: Arc::new(Notify::new()),
        };
        let (fired, notify) = (i.fired.clone(), i.notify.clone());
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_err() {
                return; // No signal handler: never interrupted.
            }
            #[allow(clippy::print_stderr)]
            {
                eprintln!("xbench-deploy: interrupted; {first} (Ctrl-C again to abandon)");
            }
            fired.store(true, Ordering::SeqCst);
            notify.notify_waiters();
            if tokio::signal::ctrl_c().await.is_ok() {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("xbench-deploy: {second}");
                }
                std::process::exit(Exit::Interrupted.code());
            }
        });
        i
    }

    async fn first(&self) {
        let notified = self.notify.notified();
        if self.fired.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

const ABANDONED_TEARDOWN: &str =
    "teardown abandoned; finish it with `xbench-deploy down RUN_ID` or `xbench-deploy gc`";

#[allow(clippy::print_stdout)] // prompt and results
pub(crate) async fn up(c: &Common, a: UpArgs) -> Result<Exit> {
    let (scenario, plan) = load(&a.file, None)?;
    check_span(&scenario, &plan, &a.file)?;
    if c.skip_accelerators && plan.needs_accelerator_api() {
        return Err(BadInput(
            "the scenario has accelerator paths, but --skip-accelerators switches Global Accelerator off".into(),
        )
        .into());
    }
    let run_id = match &a.run_id {
        Some(r) => Some(r.parse::<RunId>()?),
        None => None,
    };
    let xbench = upload_binary(&scenario, &plan, &a.binary)?;
    if !a.yes && !std::io::stdin().is_terminal() {
        confirm(false, "create resources")?;
    }
    // Credentials are checked before asking, so a "yes" is not wasted on a missing login.
    let d = deployer(c, Some(&a.ready)).await?;
    let note = binary_note(&scenario, &plan, &a.binary)?;
    print!("{}", render::plan(&plan, None, &scenario, &note));
    confirm(a.yes, "create these resources")?;
    let opts = UpOptions {
        run_id,
        keep_on_failure: a.keep,
        now: SystemTime::now(),
        xbench,
        instance_profile: a.profile.instance_profile.clone(),
    };
    let stop = Interrupts::new("deleting what was created", ABANDONED_TEARDOWN);
    let outputs = d
        .up(&scenario, &plan, &opts, stop.first())
        .await
        .with_context(|| format!("up {}", a.file.display()))?;
    let mut file = d.state_dir().outputs_file(&outputs.run_id);
    if let Some(extra) = &a.outputs {
        write_json(extra, &outputs)?;
        file = extra.clone();
    }
    print!(
        "\n{}",
        render::outputs(&outputs, &file, !a.ready.skip_ready)
    );
    Ok(Exit::Success)
}

/// The outputs of the run `run` measures: `--run-id`, else the one run of the scenario that
/// is up.
fn outputs_for(state: &StateDir, scenario: &Scenario, run_id: Option<&str>) -> Result<Outputs> {
    let dir = state.path().display().to_string();
    let up: Vec<RunId> = state
        .runs()?
        .into_iter()
        .filter(|(_, s)| s.scenario == scenario.name && s.status == "up")
        .map(|(r, _)| r)
        .collect();
    let run = match run_id {
        Some(r) => r.parse::<RunId>()?,
        None => match up.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(Error::NoSuchRun {
                    run: format!("of scenario {}", scenario.name),
                    dir,
                    known: Vec::new(),
                }
                .into());
            }
            several => {
                let list: Vec<String> = several.iter().map(|r| r.to_string()).collect();
                return Err(BadInput(format!(
                    "{} runs of scenario {} are up in {dir} ({}); pick one with --run-id",
                    several.len(),
                    scenario.name,
                    list.join(", ")
                ))
                .into());
            }
        },
    };
    let is_up = state.load(&run)?.is_some_and(|s| s.status == "up");
    match state.load_outputs(&run)? {
        Some(o) if is_up => Ok(o),
        _ => Err(Error::NoSuchRun {
            run: run.to_string(),
            dir,
            known: up.iter().map(|r| r.to_string()).collect(),
        }
        .into()),
    }
}

/// Runs the suite through `exec` and draws the report; returns the exit status.
#[allow(clippy::print_stdout)]
async fn measure(
    suite: &Suite,
    paths: &[RunPath],
    exec: &dyn Executor,
    out: &Path,
    resume: bool,
    report: &ReportArgs,
    stop: &Interrupts,
) -> Result<Exit> {
    let unit = report.unit;
    let mut opts = RunOptions::new(out);
    opts.resume = resume;
    if report.keep_fleet_spread {
        opts.fleet_spread = xbench_report::fleet::SpreadPolicy::Mark;
    }
    println!("{}", render::run_intro(suite, paths, out));
    let mut lines = render::Progress::new(unit);
    let mut on_event = |e: run::RunEvent<'_>| lines.event(&e);
    let summary: RunSummary = run::run(suite, paths, exec, &opts, &mut on_event, stop.first())
        .await
        .context("run")?;
    let report = run::report::write(out, &summary, unit).context("report")?;
    println!("\n{}", report.text);
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    for f in &report.files {
        println!("wrote {}", f.display());
    }
    Ok(if summary.interrupted {
        println!("interrupted: complete it with the same command and --resume");
        Exit::Interrupted
    } else if summary.complete() {
        Exit::Success
    } else {
        Exit::Failure
    })
}

fn suite_of(scenario: &Scenario) -> Result<Suite> {
    scenario.suite.clone().ok_or_else(|| {
        Error::NoSuite {
            scenario: scenario.name.clone(),
        }
        .into()
    })
}

pub(crate) async fn run(c: &Common, a: RunArgs) -> Result<Exit> {
    let (scenario, plan) = load(&a.file, Some(&a.suite))?;
    let suite = suite_of(&scenario)?;
    let stop = Interrupts::new("stopping after the run in progress", "abandoned");
    if a.lab {
        let mut opts = LabOptions::new(a.xbench.clone().unwrap_or_else(binary::default_path));
        opts.delays = a.lab_delays.iter().cloned().collect();
        opts.rates = a.lab_rates.iter().cloned().collect();
        let s = scenario.clone();
        let (lab, paths) = tokio::task::spawn_blocking(move || LabRun::start(&s, &opts))
            .await
            .context("building the lab")??;
        let exit = measure(&suite, &paths, &lab, &a.out, a.resume, &a.report, &stop).await;
        tokio::task::spawn_blocking(move || drop(lab)).await.ok();
        return exit;
    }
    check_span(&scenario, &plan, &a.file)?;
    // The run must exist before credentials are asked for.
    let outputs = outputs_for(&state_dir(c), &scenario, a.run_id.as_deref())?;
    let d = deployer(c, None).await?;
    let (exec, paths) = SsmExecutor::new(&d, &outputs)?;
    if a.here {
        let xbench = a.xbench.clone().unwrap_or_else(binary::default_path);
        let (here, paths) = run_here(&d, &outputs, &exec, paths, xbench).await?;
        return measure(&suite, &paths, &here, &a.out, a.resume, &a.report, &stop).await;
    }
    measure(&suite, &paths, &exec, &a.out, a.resume, &a.report, &stop).await
}

/// `--here`: your host's paths run on this machine ([`xbench_deploy::run::here`]), with the
/// run's key from Parameter Store when a server of the run is dialled; says where each runs.
#[allow(clippy::print_stdout)]
async fn run_here<'a>(
    d: &Deployer,
    outputs: &Outputs,
    inner: &'a dyn run::Executor,
    paths: Vec<RunPath>,
    xbench: PathBuf,
) -> Result<(Here<'a>, Vec<RunPath>)> {
    let needs_key = outputs
        .paths
        .iter()
        .any(|p| p.client_host.is_none() && p.authenticated);
    let key = match needs_key {
        true => here::run_key(d, outputs).await?,
        false => None,
    };
    let opts = HereOptions {
        xbench,
        dir: d.state_dir().here_dir(&outputs.run_id),
        key,
    };
    let (here, paths) = Here::new(inner, outputs, paths, opts)?;
    for (label, note) in here.notes() {
        println!("{label}: {note}");
    }
    Ok((here, paths))
}

#[allow(clippy::print_stdout)]
pub(crate) async fn all(c: &Common, a: AllArgs) -> Result<Exit> {
    let (scenario, plan) = load(&a.file, Some(&a.suite))?;
    check_span(&scenario, &plan, &a.file)?;
    let suite = suite_of(&scenario)?;
    // Found now rather than after paying for the hosts, as the results directory is.
    if a.here {
        here::check_before_up(&plan, &binary::default_path())?;
    }
    if c.skip_accelerators && plan.needs_accelerator_api() {
        return Err(BadInput(
            "the scenario has accelerator paths, but --skip-accelerators switches Global Accelerator off".into(),
        )
        .into());
    }
    let xbench = upload_binary(&scenario, &plan, &a.binary)?;
    // Found now rather than after paying for the hosts: `all` starts a fresh results directory.
    if run::holds_runs(&a.out) {
        return Err(Error::OutputHoldsRuns {
            dir: a.out.display().to_string(),
        }
        .into());
    }
    if !a.yes && !std::io::stdin().is_terminal() {
        confirm(false, "create resources")?;
    }
    let d = deployer(c, Some(&a.ready)).await?;
    let note = binary_note(&scenario, &plan, &a.binary)?;
    print!("{}", render::plan(&plan, None, &scenario, &note));
    confirm(
        a.yes,
        "create these resources, run the suite and delete them",
    )?;
    let stop = Interrupts::new(
        "stopping, then deleting the hosts (unless --keep)",
        ABANDONED_TEARDOWN,
    );
    let opts = UpOptions {
        keep_on_failure: a.keep,
        xbench,
        instance_profile: a.profile.instance_profile.clone(),
        ..UpOptions::default()
    };
    let outputs = d
        .up(&scenario, &plan, &opts, stop.first())
        .await
        .with_context(|| format!("up {}", a.file.display()))?;
    print!(
        "\n{}",
        render::outputs(
            &outputs,
            &d.state_dir().outputs_file(&outputs.run_id),
            !a.ready.skip_ready
        )
    );
    let measured = measure_all(&d, &outputs, &a, &suite, &stop).await;
    delete_after(&d, &outputs, &a, measured).await
}

/// `all`'s measuring, on the hosts `up` just made (`--here`: your host's paths on this
/// machine): skipped when Ctrl-C came during `up`.
async fn measure_all(
    d: &Deployer,
    outputs: &Outputs,
    a: &AllArgs,
    suite: &Suite,
    stop: &Interrupts,
) -> Result<Exit> {
    if stop.fired() {
        Ok(Exit::Interrupted)
    } else {
        match SsmExecutor::new(d, outputs) {
            Ok((exec, paths)) if a.here => {
                match run_here(d, outputs, &exec, paths, binary::default_path()).await {
                    Ok((here, paths)) => {
                        measure(suite, &paths, &here, &a.out, false, &a.report, stop).await
                    }
                    Err(e) => Err(e),
                }
            }
            Ok((exec, paths)) => {
                measure(suite, &paths, &exec, &a.out, false, &a.report, stop).await
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// `all`'s end: the hosts kept (`--keep`, with how to go on), else deleted; the measuring's
/// result `measured` is returned, with a failed deletion added to it.
#[allow(clippy::print_stdout)]
async fn delete_after(
    d: &Deployer,
    outputs: &Outputs,
    a: &AllArgs,
    measured: Result<Exit>,
) -> Result<Exit> {
    if a.keep {
        println!(
            "\nhosts kept (--keep): run again with `xbench-deploy run {} --out {} --run-id {} --resume`; delete with `xbench-deploy down {}`",
            a.file.display(),
            a.out.display(),
            outputs.run_id,
            outputs.run_id
        );
        return measured;
    }
    println!("\ndeleting run {}", outputs.run_id);
    let down = d
        .down(&outputs.run_id, &[])
        .await
        .with_context(|| format!("down {}", outputs.run_id));
    match (measured, down) {
        (m, Ok(report)) => {
            print!("{}", render::down(outputs.run_id.as_str(), &report));
            m
        }
        (Ok(_), Err(e)) => Err(e),
        (Err(m), Err(e)) => Err(m.context(format!("and then: {e:#}"))),
    }
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
pub(crate) async fn down(c: &Common, a: DownArgs) -> Result<Exit> {
    let run: RunId = a.run_id.parse()?;
    let d = deployer(c, None).await?;
    let report = d
        .down_report(&run, &a.regions)
        .await
        .with_context(|| format!("down {run}"))?;
    print!("{}", render::down(run.as_str(), &report));
    if report.left.is_empty() {
        return Ok(Exit::Success);
    }
    for n in report.notes.iter().filter(|n| n.starts_with("failed: ")) {
        eprintln!("xbench-deploy: down {run}: {}", &n["failed: ".len()..]);
    }
    eprintln!(
        "xbench-deploy: down {run}: {} thing(s) left (listed above); run `xbench-deploy down {run}` again to finish (what AWS is still deleting may only need time)",
        report.left.len()
    );
    Ok(Exit::Failure)
}

/// The operator's minimal policy for a scenario (or the hosts' policy), as JSON: derived from
/// the table of every call the code makes ([`xbench_deploy::policy::CALLS`]).
#[allow(clippy::print_stdout)]
pub(crate) fn policy(a: PolicyArgs) -> Result<Exit> {
    let (_scenario, plan) = load(&a.file, None)?;
    let doc = if a.hosts {
        xbench_deploy::policy::host_policy(None)
    } else {
        let f = xbench_deploy::policy::Features::of(&plan, a.instance_profile.is_some());
        xbench_deploy::policy::operator_policy(&f)
    };
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(Exit::Success)
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
pub(crate) async fn gc(c: &Common, a: GcArgs) -> Result<Exit> {
    let now = match &a.as_of {
        Some(t) => parse_time(t).ok_or_else(|| {
            BadInput(format!(
                "--as-of '{t}' is not an RFC 3339 time such as 2025-06-01T12:00:00Z"
            ))
        })?,
        None => SystemTime::now(),
    };
    let d = deployer(c, None).await?;
    let report = d.gc(now, &a.regions, a.dry_run).await.context("gc")?;
    print!("{}", render::gc(&report, a.dry_run));
    if report.problems.is_empty() {
        Ok(Exit::Success)
    } else {
        for p in &report.problems {
            eprintln!("xbench-deploy: gc: {p}");
        }
        eprintln!(
            "xbench-deploy: gc went on past {} problem(s) above; run it again once they are fixed",
            report.problems.len()
        );
        Ok(Exit::Failure)
    }
}
