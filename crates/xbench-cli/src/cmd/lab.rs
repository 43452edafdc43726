//! `xbench lab`: flags → [`xbench_lab::LabSpec`], building and removing the path lab, running
//! the comparison suite on every path, and the hidden `delay-line` helper process that
//! `xbench lab up` leaves running. The lab itself (namespaces, delay line, VPN, cleanup) is
//! the `xbench-lab` library and the flags are in `cli`; this module only turns flags into
//! values, prints and maps outcomes to exit codes. The suite is typed sweep plans
//! ([`xbench_sweep::SweepPlan`]), run as `xbench client` in each path's client namespace with
//! the arguments [`xbench_sweep::SweepPlan::client_args`] writes, never flags assembled here.

use std::num::NonZeroU32;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use xbench::config::{EndCondition, TestSpec, ThroughputSpec, UdpSpec, Workload};
use xbench::under_load::UnderLoadSpec;
use xbench::units::format_bits_per_second;
use xbench_lab::delay::{DelayLine, DelayLineSpec, DelayLineStats};
use xbench_lab::state::LabState;
use xbench_lab::sys::netns::{self, Detach};
use xbench_lab::{Backend, Impairment, Lab, LabError, LabSpec, PathInfo, PathKind, PathSpec};
use xbench_sweep::suite::expected_run;
use xbench_sweep::{Suite, SuiteTest, SweepPlan, Target};

use crate::cli::{
    DelayLineArgs, Impair, LabArgs, LabCommand, PathArg, RunArgs, TopologyArgs, UpArgs, WhereArgs,
};
use crate::exit::{Exit, UsageError};
use crate::render::out;
use crate::render::text::counted;

pub(crate) async fn run(args: LabArgs) -> anyhow::Result<Exit> {
    match args.command {
        LabCommand::DelayLine(a) => delay_line(a).await,
        LabCommand::Status(a) => status(&a),
        command => {
            // Ctrl-C or SIGTERM: stop at the next step and remove what was built.
            let cancel = Arc::new(AtomicBool::new(false));
            let c = Arc::clone(&cancel);
            tokio::spawn(async move {
                shutdown_signal().await;
                c.store(true, Ordering::Relaxed);
            });
            let work = tokio::task::spawn_blocking(move || match command {
                LabCommand::Up(a) => up(&a, &cancel),
                LabCommand::Run(a) => run_suite(&a, &cancel),
                LabCommand::Down(a) => down(&a),
                LabCommand::Status(_) | LabCommand::DelayLine(_) => Ok(Exit::Success),
            });
            work.await.context("the lab task failed")?
        }
    }
}

/// The library's error, as a usage error (exit 2) when it is the caller's mistake.
fn lab_error(e: LabError) -> anyhow::Error {
    if e.is_usage() {
        UsageError(e.to_string()).into()
    } else {
        e.into()
    }
}

fn up(a: &UpArgs, cancel: &AtomicBool) -> anyhow::Result<Exit> {
    let spec = lab_spec(&a.topology, &a.place)?;
    let lab = match Lab::up(&spec, cancel) {
        Err(LabError::Cancelled) => return Ok(Exit::Interrupted),
        r => r.map_err(lab_error).context("cannot build the lab")?,
    };
    let st = lab.keep().map_err(lab_error)?;
    let exe = spec
        .xbench
        .as_deref()
        .map_or_else(|| "xbench".into(), |p| p.display().to_string());
    let mut s = format!(
        "lab up: {}; state in {}\n",
        counted(st.paths.len() as u64, "path"),
        spec.state_dir.display()
    );
    s += &paths_table(&st.paths);
    if let Some(p) = st.paths.first() {
        s += &format!(
            "\nRun tests from the client namespace, e.g.\n  ip netns exec {} {exe} client {} -t 10\n\
             Remove the lab with: {exe} lab down{}\n",
            p.client_netns,
            p.server_addr,
            prefix_flag(&spec.prefix, &spec.state_dir)
        );
    }
    out(&s).context("writing output")?;
    Ok(Exit::Success)
}

fn down(a: &WhereArgs) -> anyhow::Result<Exit> {
    let t = xbench_lab::down(&a.state_dir, &a.prefix, &command_line())
        .map_err(lab_error)
        .context("cannot remove the lab")?;
    let mut s = String::new();
    if t.is_empty() {
        s += &format!(
            "nothing to remove (no lab in {} and no namespaces named {}*)\n",
            a.state_dir.display(),
            a.prefix
        );
    } else {
        s += &format!(
            "lab down: stopped {}, removed {}\n",
            match t.stopped.len() {
                1 => "1 process".to_owned(),
                n => format!("{n} processes"),
            },
            counted(t.removed_netns.len() as u64, "namespace")
        );
    }
    out(&s).context("writing output")?;
    if !t.problems.is_empty() {
        for p in &t.problems {
            eprintln!("xbench: could not remove: {p}");
        }
        return Ok(Exit::Failure);
    }
    Ok(Exit::Success)
}

fn status(a: &WhereArgs) -> anyhow::Result<Exit> {
    let Some(st) = LabState::load(&a.state_dir).map_err(lab_error)? else {
        out(&format!(
            "no lab is up (no state in {})\n",
            a.state_dir.display()
        ))
        .context("writing output")?;
        return Ok(Exit::Success);
    };
    let mut s = format!(
        "lab built by {}{}\n",
        st.builder,
        if st.complete {
            ""
        } else {
            " — incomplete (killed while building?); `xbench lab down` removes it"
        }
    );
    s += &paths_table(&st.paths);
    for p in &st.paths {
        let path = xbench_lab::delay_stats_path(&a.state_dir, &p.label);
        if let Ok(d) = DelayLineStats::load(&path) {
            s += &delay_line_summary(&p.label, &d);
        }
    }
    out(&s).context("writing output")?;
    Ok(Exit::Success)
}

fn delay_line_summary(label: &str, d: &DelayLineStats) -> String {
    let mut s = String::new();
    for (dir, x) in [("client→server", &d.a_to_b), ("server→client", &d.b_to_a)] {
        let l = &x.lateness_ns;
        s += &format!(
            "delay line {label} {dir}: {} packets, {} lost, {} reordered, {} overflow; release \
             late by p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs{}\n",
            x.packets_in,
            x.lost,
            x.reordered,
            x.overflow,
            l.p50 as f64 / 1e3,
            l.p99 as f64 / 1e3,
            l.p999 as f64 / 1e3,
            l.max as f64 / 1e3,
            if d.realtime { "" } else { " (not real-time)" }
        );
    }
    s
}

/// One sweep of the suite on one path. Each finished run is saved (`--save`), so the
/// comparison is what `xbench report` reads.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    plan: SweepPlan,
}

/// A test's length when neither `-t` nor a suite file gives one, as `xbench client`'s.
const DEFAULT_TIME: Duration = Duration::from_secs(10);

/// The suite to run: the `--suite` file's, with `-t` and `--repeat` applied, or the one the
/// flags ask for. Read before the lab is built, so a bad file costs no set-up.
fn suite(a: &RunArgs) -> anyhow::Result<Suite> {
    let Some(file) = &a.suite else {
        return Ok(flag_suite(a));
    };
    let usage = |e: String| UsageError(format!("--suite {}: {e}", file.display()));
    let text = std::fs::read_to_string(file).map_err(|e| usage(e.to_string()))?;
    let suite = Suite::from_toml(&text).map_err(|e| usage(e.to_string()))?;
    if let Some(every) = suite.every {
        // Spreading repeats over hours samples a real path's busy and quiet times; a lab
        // path's conditions are the ones it was built with, at any hour.
        eprintln!(
            "note: the suite's every ({} s) is for real paths; the lab runs its repeats back \
             to back",
            every.as_secs()
        );
    }
    Ok(suite.with_overrides(a.time, a.repeat))
}

/// The suite the flags ask for: a throughput sweep over stream counts, UDP at the offered
/// rates of `--udp`, latency under load, then request/response latency, each `--repeat` times.
/// It is the same [`Suite`] a deployment reads from its scenario, so the lab and the cloud run
/// one definition of a suite.
fn flag_suite(a: &RunArgs) -> Suite {
    let mut spec = TestSpec::throughput();
    spec.end = EndCondition::Duration(a.time.unwrap_or(DEFAULT_TIME));
    if let Some(o) = a.omit {
        spec.omit = o;
    }
    let mut throughput = SuiteTest::new(spec.clone());
    throughput.streams = a.streams.clone();
    throughput.spec.socket.window = a.window.map(|w| w.0);
    let mut tests = vec![throughput];
    if let Some(rates) = &a.udp {
        // One stream per test, the default window: loss and jitter are the path's, at each
        // offered rate.
        let mut udp = SuiteTest::new(TestSpec {
            workload: Workload::Throughput(ThroughputSpec {
                udp: Some(UdpSpec::default()),
                ..ThroughputSpec::default()
            }),
            ..spec.clone()
        });
        udp.bitrates = rates.0.clone();
        udp.datagram_lens = (a.udp_length.as_ref())
            .map(|l| l.0.iter().map(|n| n.get()).collect())
            .unwrap_or_default();
        tests.push(udp);
    }
    if let Some(dir) = a.under_load {
        // The default window and probes; the load is the four streams each way of flent's
        // RRUL, whatever --streams sweeps.
        tests.push(SuiteTest::new(TestSpec {
            workload: Workload::Throughput(ThroughputSpec {
                streams: std::num::NonZeroU16::MIN.saturating_add(3),
                direction: dir.direction(),
                under_load: Some(UnderLoadSpec::default()),
                ..ThroughputSpec::default()
            }),
            ..spec.clone()
        }));
    }
    if !a.no_rr {
        // Latency runs keep the default window.
        spec.workload = TestSpec::request_response().workload;
        tests.push(SuiteTest::new(spec));
    }
    Suite {
        repeat: a.repeat.unwrap_or(NonZeroU32::MIN),
        pause: Duration::ZERO,
        every: None,
        tests,
        trace: false,
    }
}

/// The suite on the path `label` at `target`: one sweep per test, saved under `out` and
/// resumed, so a rerun into the same directory adds what is missing instead of refusing.
fn cases(suite: &Suite, out: &Path, target: &Target, label: &str) -> Vec<Case> {
    (suite.tests.iter())
        .map(|test| {
            let mut plan = test.plan(target.clone(), label);
            plan.repeat = suite.repeat;
            plan.pause = suite.pause;
            plan.save = Some(out.to_path_buf());
            plan.resume = true;
            let name = case_name(&test.spec);
            // Throughput runs probe their path's hops too: each report says which routers it
            // crossed and where the delay sits (issue 33). A few probes a second change no
            // rate. `trace = true` in a suite asks it of every test.
            plan.target.trace = suite.trace || name == "throughput";
            if name == "udp" {
                plan = plan.normalized();
            }
            Case { name, plan }
        })
        .collect()
}

/// The heading of a test's runs in the lab's output.
fn case_name(spec: &TestSpec) -> &'static str {
    if let Some(r) = spec.as_rr() {
        return match r.connect_per_transaction {
            true => "connect latency",
            false => "latency",
        };
    }
    match spec.as_throughput() {
        Some(t) if t.under_load.is_some() => "under load",
        Some(t) if t.udp.is_some() => "udp",
        _ => "throughput",
    }
}

fn run_suite(a: &RunArgs, cancel: &AtomicBool) -> anyhow::Result<Exit> {
    let command = command_line();
    let suite = suite(a)?;
    // The results directory before the lab: one we cannot write fails now, not after the suite.
    std::fs::create_dir_all(&a.out)
        .and_then(|()| xbench::file::check_dir_writable(&a.out))
        .map_err(|e| UsageError(format!("--out {}: {e}", a.out.display())))?;
    // Run on the lab `xbench lab up` left, or build one for this run.
    let Some(lab) = open_lab(a, cancel, &command)? else {
        return Ok(Exit::Interrupted);
    };
    let exe = std::env::current_exe().context("cannot find the xbench executable")?;
    out(&paths_table(lab.paths())).context("writing output")?;

    let failed = run_cases(a, &suite, &lab, &exe, cancel)?;
    let mut s = String::new();
    for p in lab.paths() {
        if let Some(d) = lab.delay_line_stats(&p.label) {
            s += &delay_line_summary(&p.label, &d);
        }
    }
    out(&s).context("writing output")?;
    let notes = path_notes(&lab);
    drop(lab); // a lab built for this run is removed here
    compare(&a.out, a.unit, notes)?;
    for f in &failed {
        eprintln!("xbench: {f}");
    }
    if cancel.load(Ordering::Relaxed) {
        return Ok(Exit::Interrupted);
    }
    if !failed.is_empty() {
        return Ok(Exit::Failure);
    }
    Ok(Exit::Success)
}

/// The lab `xbench lab up` left, or one built for this run from the path options; `None`
/// when the build was cancelled. Path options with a lab up are a usage error.
fn open_lab(a: &RunArgs, cancel: &AtomicBool, command: &str) -> anyhow::Result<Option<Lab>> {
    let existing = LabState::load(&a.place.state_dir)
        .map_err(lab_error)?
        .is_some();
    let lab = if existing {
        if a.topology.given() {
            bail!(UsageError(format!(
                "a lab is already up (state in {}); run without path options to use it, or \
                 `xbench lab down` first",
                a.place.state_dir.display()
            )));
        }
        Lab::attach(&a.place.state_dir, command)
            .map_err(lab_error)
            .context("cannot use the lab that is up")?
    } else {
        let spec = lab_spec(&a.topology, &a.place)?;
        match Lab::up(&spec, cancel) {
            Err(LabError::Cancelled) => return Ok(None),
            r => r.map_err(lab_error).context("cannot build the lab")?,
        }
    };
    Ok(Some(lab))
}

/// Runs the suite on every path of `lab` in turn, until `cancel`; the cases that failed,
/// each named by path and case.
fn run_cases(
    a: &RunArgs,
    suite: &Suite,
    lab: &Lab,
    exe: &Path,
    cancel: &AtomicBool,
) -> anyhow::Result<Vec<String>> {
    let mut failed = Vec::new();
    'paths: for p in lab.paths() {
        let mut target = Target::new(p.server_addr.to_string());
        target.port = p.server_port;
        for c in cases(suite, &a.out, &target, &p.label) {
            if cancel.load(Ordering::Relaxed) {
                break 'paths;
            }
            out(&format!("\n{} — {}\n", p.label, c.name)).context("writing output")?;
            if let Err(e) = run_case(exe, p, &c, cancel) {
                failed.push(format!("{} {}: {e}", p.label, c.name));
            }
        }
    }
    Ok(failed)
}

/// What each path emulates, for the web page's table of where each path was measured.
fn path_notes(lab: &Lab) -> Vec<xbench_report::html::PathNote> {
    lab.paths()
        .iter()
        .flat_map(|p| {
            [
                ("lab path", p.kind.to_string()),
                ("emulated", describe(&p.impairment, p.impairment_by)),
            ]
            .map(|(name, value)| xbench_report::html::PathNote {
                label: p.label.clone(),
                name: name.into(),
                value,
            })
        })
        .collect()
}

/// Runs one sweep of the suite as `xbench client` in the path's client namespace (a process of
/// its own: a namespace belongs to a thread, and the client's runtime and stream threads must
/// all be in it); it prints a line per run and saves each one.
fn run_case(exe: &Path, p: &PathInfo, c: &Case, cancel: &AtomicBool) -> Result<(), String> {
    let args = c
        .plan
        .client_args()
        .map_err(|e| format!("cannot write the sweep as a command: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    let mut child = netns::spawn_in(&p.client_netns, &mut cmd, Detach::No)
        .map_err(|e| format!("cannot start the client: {e}"))?;
    // Each run takes its expected time (omit, test, idle phases, set-up) and its pause; a
    // sweep 30 s a run past that is stuck.
    let runs = u32::try_from(c.plan.run_count()).unwrap_or(u32::MAX);
    let one = expected_run(&c.plan.spec) + c.plan.pause + Duration::from_secs(30);
    let limit = Instant::now() + one.saturating_mul(runs);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if cancel.load(Ordering::Relaxed) || Instant::now() > limit => {
                // Stopped by id; a sweep keeps the runs that finished on SIGINT.
                // SAFETY: kill has no memory-safety preconditions; the pid is our own child,
                // not yet reaped, so it cannot have been reused.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => break None,
        }
    };
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!("the sweep ended with {s}")),
        None => Err("the sweep did not finish".into()),
    }
}

/// The comparison of every path, as `xbench report` would print it, and its charts.
fn compare(
    dir: &Path,
    unit: Option<xbench_report::ThroughputUnit>,
    notes: Vec<xbench_report::html::PathNote>,
) -> anyhow::Result<()> {
    let loaded = xbench_report::load(&[dir.to_path_buf()])
        .with_context(|| format!("cannot read the results in {}", dir.display()))?;
    for w in &loaded.warnings {
        eprintln!("warning: {w} (skipped)");
    }
    if loaded.runs.is_empty() {
        return Ok(());
    }
    let table = xbench_report::Comparison::build(&loaded.runs);
    out(&format!(
        "\n{}",
        xbench_report::render::render(&table, xbench_report::render::Format::Text, unit)
    ))
    .context("writing output")?;
    let md = dir.join("report.md");
    xbench::file::write_atomically(
        &md,
        xbench_report::render::render(&table, xbench_report::render::Format::Markdown, unit)
            .as_bytes(),
    )
    .with_context(|| format!("cannot write {}", md.display()))?;
    let mut written = vec![md.display().to_string()];
    for (kind, name) in [
        (xbench_report::chart::ChartKind::Streams, "throughput.svg"),
        (xbench_report::chart::ChartKind::Latency, "latency.svg"),
        (xbench_report::chart::ChartKind::Udp, "udp.svg"),
        (xbench_report::chart::ChartKind::UnderLoad, "under-load.svg"),
    ] {
        // A suite without the request/response, UDP or under-load test has no such chart.
        let Ok(data) = xbench_report::chart::plan(&loaded.runs, Some(kind), unit) else {
            continue;
        };
        let path = dir.join(name);
        xbench_report::chart::write(&data, &path)
            .with_context(|| format!("cannot draw {}", path.display()))?;
        written.push(path.display().to_string());
    }
    // The same comparison as one web page, for whoever was not at the terminal.
    let html = dir.join("report.html");
    let options = xbench_report::html::Options {
        unit: unit.into(),
        commands: super::report::commands(&loaded.runs, xbench_report::load::DEFAULT_FILE_LIMIT),
        generated_by: Some(command_line()),
        notes,
        ..Default::default()
    };
    xbench_report::html::write_loaded(&loaded, &html, &options)
        .with_context(|| format!("cannot write {}", html.display()))?;
    written.push(html.display().to_string());
    out(&format!(
        "\nresults in {}: {}\n",
        dir.display(),
        written.join(", ")
    ))
    .context("writing output")?;
    Ok(())
}

fn paths_table(paths: &[PathInfo]) -> String {
    let mut s = String::new();
    for p in paths {
        s += &format!(
            "  {:<12} {:<8} {} → {}:{}  {}\n",
            p.label,
            p.kind,
            p.client_addr,
            p.server_addr,
            p.server_port,
            describe(&p.impairment, p.impairment_by)
        );
    }
    s
}

fn describe(i: &Impairment, by: Option<Backend>) -> String {
    let mut parts = Vec::new();
    if let Some(r) = i.rate_bps {
        parts.push(format!("rate {}", format_bits_per_second(r as f64)));
    }
    if !i.delay.is_zero() {
        parts.push(format!("delay {:?} each way", i.delay));
    }
    if !i.jitter.is_zero() {
        parts.push(format!("jitter ±{:?}", i.jitter));
    }
    if i.loss > 0.0 {
        parts.push(format!("loss {} %", i.loss * 100.0));
    }
    if i.reorder > 0.0 {
        parts.push(format!("reorder {} %", i.reorder * 100.0));
    }
    if parts.is_empty() {
        return "unimpaired".into();
    }
    let how = match by {
        Some(Backend::Netem) => " (netem)",
        Some(Backend::DelayLine) => " (delay line)",
        _ => "",
    };
    format!("{}{how}", parts.join(", "))
}

fn prefix_flag(prefix: &str, dir: &Path) -> String {
    let mut s = String::new();
    if prefix != xbench_lab::DEFAULT_PREFIX {
        s += &format!(" --prefix {prefix}");
    }
    if dir != Path::new(xbench_lab::DEFAULT_STATE_DIR) {
        s += &format!(" --state-dir {}", dir.display());
    }
    s
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn lab_spec(t: &TopologyArgs, place: &WhereArgs) -> anyhow::Result<LabSpec> {
    let items = t.paths.clone().unwrap_or_else(|| {
        PathKind::ALL
            .iter()
            .map(|&kind| PathArg::new(kind))
            .collect()
    });
    let paths = items
        .into_iter()
        .map(|p| PathSpec {
            kind: p.kind,
            label: p.label.unwrap_or_else(|| p.kind.name().to_owned()),
            impairment: Impairment {
                rate_bps: p.rate.or(t.rate),
                delay: p.delay.or(t.delay).unwrap_or_default(),
                jitter: p.jitter.or(t.jitter).unwrap_or_default(),
                loss: p.loss.or(t.loss).unwrap_or(0.0),
                reorder: p.reorder.or(t.reorder).unwrap_or(0.0),
                queue_bytes: p.queue.or(t.queue),
            },
        })
        .collect();
    let mut spec = LabSpec::new(paths);
    spec.prefix = place.prefix.clone();
    spec.state_dir = place.state_dir.clone();
    spec.backend = match t.impair {
        None | Some(Impair::Auto) => Backend::Auto,
        Some(Impair::Netem) => Backend::Netem,
        Some(Impair::DelayLine) => Backend::DelayLine,
    };
    if let Some(s) = t.seed {
        spec.seed = s;
    }
    if let Some(s) = t.spin {
        spec.delay_spin = s;
    }
    spec.xbench = Some(std::env::current_exe().context("cannot find the xbench executable")?);
    spec.command = command_line();
    // Values are typed already; this catches what only the whole spec shows (duplicate
    // labels, rates below the floor) before anything needs root.
    spec.validate().map_err(lab_error)?;
    for p in &spec.paths {
        if p.impairment.needs_delay_line() && p.impairment.rate_bps.is_none() {
            eprintln!(
                "warning: path `{}` has delay or loss but no rate cap: TCP will fill whatever the \
                 delay line (or netem) can forward, and a userspace delay line that is the \
                 bottleneck holds packets longer than asked; add --rate (200M is a good start)",
                p.label
            );
        }
    }
    Ok(spec)
}

/// The hidden helper: runs one delay line until SIGTERM/SIGINT, keeping its stats file.
async fn delay_line(a: DelayLineArgs) -> anyhow::Result<Exit> {
    let spec: DelayLineSpec =
        serde_json::from_str(&a.spec).context("the delay line's spec is not valid JSON")?;
    let line = DelayLine::start(&spec).map_err(lab_error)?;
    // The first stats file tells `xbench lab up` that both devices are attached.
    line.write_stats(&a.stats).map_err(lab_error)?;
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                line.write_stats(&a.stats).map_err(lab_error)?;
            }
        }
    }
    line.write_stats(&a.stats).map_err(lab_error)?;
    let _final = line.stop();
    Ok(Exit::Success)
}

/// SIGINT, SIGTERM or SIGHUP (a closed terminal), any of which must still clean up.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let on = |kind: SignalKind| async move {
        match signal(kind) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = on(SignalKind::interrupt()) => {}
        () = on(SignalKind::terminate()) => {}
        () = on(SignalKind::hangup()) => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::plan::{self, Plan};

    #[test]
    fn suite_sweeps_the_stream_counts_then_measures_latency() {
        let cli = Cli::try_parse_from([
            "xbench",
            "lab",
            "run",
            "--streams",
            "1,8",
            "-t",
            "3",
            "-w",
            "256K",
            "--repeat",
            "3",
            "--out",
            "o",
        ])
        .unwrap();
        let Command::Lab(LabArgs {
            command: LabCommand::Run(a),
        }) = cli.command
        else {
            panic!("lab run");
        };
        let target = Target {
            port: 5202,
            ..Target::new("198.18.0.2")
        };
        let s = cases(&flag_suite(&a), &a.out, &target, "transit");
        assert_eq!(s.len(), 2);
        let (tp, rr) = (&s[0].plan, &s[1].plan);
        assert_eq!(tp.run_count(), 6);
        assert_eq!(rr.run_count(), 3);
        assert_eq!(
            tp.client_args().unwrap(),
            [
                "client",
                "198.18.0.2",
                "-p",
                "5202",
                "--trace",
                "--label=transit",
                "-P",
                "1,8",
                "-t",
                "3",
                "-w",
                "256K",
                "--repeat",
                "3",
                "--save=o",
                "--resume"
            ]
        );
        let rr_args = rr.client_args().unwrap();
        assert!(rr_args.contains(&"--rr".to_owned()), "{rr_args:?}");
        assert!(
            !rr_args.contains(&"-w".to_owned()),
            "latency runs keep the default window"
        );
        // What the client process is given resolves to the very plan: no flag assembled here.
        for case in &s {
            let Ok(Plan::Sweep(sweep)) = plan::resolve_args(&case.plan.client_args().unwrap())
            else {
                panic!("a sweep");
            };
            assert_eq!(sweep.plan, case.plan.normalized());
        }
    }

    #[test]
    fn udp_tests_run_at_each_offered_rate() {
        let cli = Cli::try_parse_from([
            "xbench",
            "lab",
            "run",
            "--udp",
            "10M,50M",
            "--udp-length",
            "200,1400",
            "-t",
            "2",
            "--no-rr",
        ])
        .unwrap();
        let Command::Lab(LabArgs {
            command: LabCommand::Run(a),
        }) = cli.command
        else {
            panic!("lab run");
        };
        let s = cases(&flag_suite(&a), &a.out, &Target::new("198.18.0.2"), "vpn");
        let names: Vec<&str> = s.iter().map(|c| c.name).collect();
        assert_eq!(names, ["throughput", "udp"]);
        let udp = &s[1].plan;
        assert_eq!(udp.run_count(), 4);
        let args = udp.client_args().unwrap();
        assert_eq!(
            args[2..],
            [
                "--label=vpn",
                "-u",
                "-l",
                "200,1400",
                "-b",
                "10M,50M",
                "-t",
                "2",
                "--save=xbench-lab-results",
                "--resume"
            ]
        );
        let Ok(Plan::Sweep(sweep)) = plan::resolve_args(&args) else {
            panic!("a sweep");
        };
        assert_eq!(&sweep.plan, udp);
        for bad in [["--udp", "0"], ["--udp", "1M,1M"], ["--udp-length", "1400"]] {
            let mut argv = vec!["xbench", "lab", "run"];
            argv.extend(bad);
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }
}
