//! `run --lab` end to end, as root: a scenario with a peering, a Transit Gateway, a VPN and a
//! public path becomes a lab (direct, transit, vpn, direct with a delay) with a real `xbench
//! server` per path (the run's key, `--allow` its client); a suite that uses every suite key
//! runs on it with real `xbench client` processes, so every command line the suite can
//! produce is run once and its report's spec compared with the plan. The run is interrupted
//! part-way, then completed through the binary with `--resume`: nothing is collected twice,
//! every planned run is there, and the report and charts are drawn.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use xbench_deploy::Scenario;
use xbench_deploy::run::lab::{LabOptions, LabRun};
use xbench_deploy::run::{self, RunEvent, RunOptions};

use common::{TempDir, root_or_skip, serial, xbench_bin};

const SCENARIO: &str = r#"
name = "rehearsal"
instance_type = "m5.large"
[[vpc]]
name = "hub"
region = "us-east-1"
cidr = "10.10.0.0/16"
[[vpc]]
name = "spoke"
region = "eu-west-2"
cidr = "10.20.0.0/16"
[[path]]
kind = "peering"
client = "hub"
server = "spoke"
[[path]]
kind = "tgw"
client = "hub"
server = "spoke"
[[path]]
kind = "vpn"
client = "hub"
server = "spoke"
[[path]]
kind = "public"
label = "internet"
client = "hub"
server = "spoke"

# Every key a suite has, once.
[suite]
time = "500ms"
omit = "100ms"
interval = "250ms"
repeat = 1
pause = 0

[[suite.test]]
parallel = [1, 2]
direction = ["up", "bidir"]
length = "64K"
bitrate = "200M"
no-delay = true
congestion = "cubic"
set-mss = 1300
zerocopy = true
recv-copy = true

[[suite.test]]
window = ["128K", "512K"]
direction = "down"

[[suite.test]]
rr = true
rr-size = ["1,1", "64,1K"]
flows = [1, 2]
burst = 2
rate = "5ms"

[[suite.test]]
crr = true
rr-size = "32,32"
flows = 2
"#;

#[test]
fn root_run_lab_every_suite_key_interrupted_then_resumed_through_the_binary() {
    if !root_or_skip("root_run_lab_every_suite_key_interrupted_then_resumed_through_the_binary") {
        return;
    }
    let _serial = serial();
    let work = TempDir::new("labrun");
    let file = work.path().join("scenario.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let out = work.path().join("results");
    let scenario = Scenario::from_toml(SCENARIO).unwrap();
    let suite = scenario.suite.clone().unwrap();
    let planned = suite.runs_per_path() * scenario.paths.len();
    assert_eq!(planned, 11 * 4);

    // Part one, through the library: interrupted after five collected runs.
    let mut opts = LabOptions::new(xbench_bin());
    opts.prefix = "xbdt-".into();
    opts.state_dir = "/run/xbench-lab-tests/deploy-run".into();
    opts.delays = BTreeMap::from([(Some("internet".to_owned()), Duration::from_millis(5))]);
    let _ = std::fs::remove_dir_all(&opts.state_dir);
    let (lab, paths) = LabRun::start(&scenario, &opts).unwrap();
    assert_eq!(
        lab.path("tgw").map(|p| p.kind),
        Some(xbench_lab::PathKind::Transit)
    );
    assert_eq!(
        lab.path("vpn").map(|p| p.kind),
        Some(xbench_lab::PathKind::Vpn)
    );
    let internet = lab.path("internet").unwrap();
    assert_eq!(internet.kind, xbench_lab::PathKind::Direct);
    assert_eq!(internet.impairment.delay, Duration::from_millis(5));
    let collected = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(tokio::sync::Notify::new());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let summary = rt
        .block_on(async {
            let (c, s) = (collected.clone(), stop.clone());
            let cancel = stop.notified();
            run::run(
                &suite,
                &paths,
                &lab,
                &RunOptions::new(&out),
                &mut |e| match e {
                    RunEvent::Collected { .. } if c.fetch_add(1, Ordering::SeqCst) + 1 == 5 => {
                        s.notify_one();
                    }
                    RunEvent::Failed { planned, reason } => {
                        panic!(
                            "{} {} failed: {reason}",
                            planned.config.label.as_deref().unwrap_or(""),
                            planned.cell
                        )
                    }
                    _ => {}
                },
                cancel,
            )
            .await
        })
        .unwrap();
    drop(lab);
    assert!(summary.interrupted);
    let first = summary.collected_now;
    assert!(first >= 5, "{summary:?}");
    assert_eq!(count_runs(&out), first, "only finished runs are on disk");

    // Part two, through the binary: --resume completes it and draws the report.
    let r = Command::new(env!("CARGO_BIN_EXE_xbench-deploy"))
        .args([
            "run",
            &file.display().to_string(),
            "--out",
            &out.display().to_string(),
            "--lab",
            "--resume",
            "--lab-delay",
            "internet=5ms",
            "--xbench",
            &xbench_bin().display().to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(
        r.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(count_runs(&out), planned, "{stdout}");
    let run_lines = stdout.lines().filter(|l| l.contains(" run 1: ")).count();
    assert_eq!(
        run_lines,
        planned - first,
        "nothing collected twice:\n{stdout}"
    );
    for p in ["peering", "tgw", "vpn", "internet"] {
        assert!(stdout.contains(&format!("  {p}")), "{stdout}");
    }
    assert!(stdout.contains("complete"), "{stdout}");
    for f in [
        "report.txt",
        "report.md",
        "chart-streams.svg",
        "chart-window.svg",
        "chart-latency.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing; {stdout}");
    }
    let loaded = xbench_report::load(std::slice::from_ref(&out)).unwrap();
    assert_eq!(loaded.runs.len(), planned);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

/// Collected run files under `dir`.
fn count_runs(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                stack.push(p);
            } else if name.starts_with("run-") && name.ends_with(".json") {
                n += 1;
            }
        }
    }
    n
}
