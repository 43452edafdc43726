//! A fleet on the lab, as root: a path with `clients = 3` behind a rate-capped link (`tc
//! tbf`) runs each cell as three `xbench client` processes started at one instant
//! (`--start-at`), each with its share of the streams (`-P 6` = 2 each) or flows, and `run`
//! merges their reports into the path's one figure. Checked from the saved files, not from
//! the code that merged them: the merged rate equals the sum of the parts within 1 %, the
//! sum respects the cap (they ran at once: one after another, each would have had the cap to
//! itself, and the parts would sum to three caps) and fills most of it.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use xbench::report::TestReport;
use xbench_deploy::Scenario;
use xbench_deploy::run::lab::{LabOptions, LabRun};
use xbench_deploy::run::{self, RunEvent, RunOptions};

use common::{TempDir, root_or_skip, serial, xbench_bin};

/// The lab path's cap: low enough that three debug-built clients on a shared 2-core machine
/// fill it, so the merged figure is the link's, not the CPU's.
const CAP_BPS: u64 = 120_000_000;

const SCENARIO: &str = r#"
name = "fleet"
instance_type = "m5.large"
[[vpc]]
name = "hub"
region = "us-east-1"
cidr = "10.10.0.0/16"
placement = "cluster"
[[vpc]]
name = "spoke"
region = "us-east-1"
cidr = "10.20.0.0/16"
[[path]]
kind = "peering"
client = "hub"
server = "spoke"
clients = 3

[suite]
time = 4
omit = 1
interval = 1
repeat = 1
pause = 0

[[suite.test]]
parallel = 6

[[suite.test]]
rr = true
rr-size = "1,1"
flows = 3
time = 2
"#;

fn read(path: &Path) -> TestReport {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn root_lab_fleet_of_three_merges_into_the_sum_of_its_parts() {
    if !root_or_skip("root_lab_fleet_of_three_merges_into_the_sum_of_its_parts") {
        return;
    }
    let _serial = serial();
    let work = TempDir::new("labfleet");
    let out = work.path().join("results");
    let scenario = Scenario::from_toml(SCENARIO).unwrap();
    let suite = scenario.suite.clone().unwrap();
    let mut opts = LabOptions::new(xbench_bin());
    opts.prefix = "xbdf-".into();
    opts.state_dir = "/run/xbench-lab-tests/deploy-fleet".into();
    opts.rates = BTreeMap::from([(None, CAP_BPS)]);
    let _ = std::fs::remove_dir_all(&opts.state_dir);
    let (lab, paths) = LabRun::start(&scenario, &opts).unwrap();
    assert_eq!(paths[0].clients, 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let summary = rt
        .block_on(run::run(
            &suite,
            &paths,
            &lab,
            &RunOptions::new(&out),
            &mut |e| {
                if let RunEvent::Failed { planned, reason } = e {
                    panic!("{} failed: {reason}", planned.cell)
                }
            },
            std::future::pending(),
        ))
        .unwrap();
    drop(lab);
    assert!(summary.complete(), "{summary:?}");

    // Throughput: -P 6 over 3 clients.
    let cell = out.join("peering").join("tcp-up-P6");
    let merged = read(&cell.join("run-1.json"));
    let parts: Vec<TestReport> = (1..=3)
        .map(|k| read(&cell.join(format!("run-1.fleet/client-{k}.json"))))
        .collect();
    assert_eq!(merged.spec.as_throughput().unwrap().streams.get(), 6);
    for p in &parts {
        assert_eq!(p.spec.as_throughput().unwrap().streams.get(), 2);
    }
    let rx = |r: &TestReport| r.summary.directions[0].receiver.unwrap();
    let parts_bps: Vec<f64> = parts.iter().map(|p| rx(p).bits_per_second).collect();
    let sum: f64 = parts_bps.iter().sum();
    let total = rx(&merged).bits_per_second;
    eprintln!(
        "fleet of 3 through a {} Mbit/s cap: parts {:?} Mbit/s, sum {:.2}, merged {:.2}",
        CAP_BPS / 1_000_000,
        parts_bps
            .iter()
            .map(|b| (b / 1e4).round() / 100.0)
            .collect::<Vec<_>>(),
        sum / 1e6,
        total / 1e6
    );
    assert!(
        (total - sum).abs() <= 0.01 * sum,
        "merged {total} vs sum {sum}"
    );
    assert_eq!(
        rx(&merged).bytes,
        parts.iter().map(|p| rx(p).bytes).sum::<u64>()
    );
    eprintln!("{}", merged.warnings[0]);
    // They ran at once: one after another, each would have had the cap to itself and the sum
    // would be three caps. How the cap was shared is TCP's doing, not the fleet's: on a
    // loaded machine one instance's streams took 102 of 115 Mbit/s from the others'.
    let cap = CAP_BPS as f64;
    assert!(
        sum <= cap * 1.03,
        "the sum {sum} exceeds the cap {cap}: the parts did not share the link"
    );
    assert!(sum >= cap * 0.6, "the fleet filled only {sum} of {cap}");
    // One instant: the three tests began within a tenth of the interval of each other (a
    // wider spread is refused by the merge, and the run would have failed). Each client
    // connected ahead of the instant and asked for its test at it, so what is left is the
    // test's own setup on a loaded machine.
    let starts: Vec<_> = parts
        .iter()
        .map(|p| xbench::time::parse_rfc3339(&p.started_at).unwrap())
        .collect();
    let spread = starts
        .iter()
        .max()
        .unwrap()
        .duration_since(*starts.iter().min().unwrap())
        .unwrap();
    eprintln!("the three instances' data started within {spread:?}");
    assert!(spread <= Duration::from_millis(100), "{spread:?}");
    assert_eq!(merged.streams.len(), 6);

    // Request/response: --flows 3 over 3 clients; latency from the merged histograms.
    let cell = out.join("peering").join("rr-1x1-f3");
    let merged = read(&cell.join("run-1.json"));
    let parts: Vec<TestReport> = (1..=3)
        .map(|k| read(&cell.join(format!("run-1.fleet/client-{k}.json"))))
        .collect();
    let m = &merged.rr.as_ref().unwrap().summary;
    let tps: f64 = parts
        .iter()
        .map(|p| p.rr.as_ref().unwrap().summary.transactions_per_second)
        .sum();
    assert!((m.transactions_per_second - tps).abs() <= 0.01 * tps);
    let counted: u64 = parts
        .iter()
        .map(|p| p.rr.as_ref().unwrap().summary.latency.unwrap().count)
        .sum();
    assert_eq!(m.latency.unwrap().count, counted);
    let p50s: Vec<f64> = parts
        .iter()
        .map(|p| p.rr.as_ref().unwrap().summary.latency.unwrap().p50_us)
        .collect();
    let p50 = m.latency.unwrap().p50_us;
    assert!(
        p50s.iter().any(|x| *x <= p50 * 1.001) && p50s.iter().any(|x| *x >= p50 * 0.999),
        "merged p50 {p50} outside the parts' {p50s:?}"
    );

    // `xbench report` reads one run per cell: the parts are in the merged figure already.
    let loaded = xbench_report::load(std::slice::from_ref(&out)).unwrap();
    assert_eq!(loaded.runs.len(), 2, "{:?}", loaded.warnings);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}
