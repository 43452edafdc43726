//! The plans that saved a set of runs, rebuilt from the runs themselves, so a report can show
//! the `xbench client` command that measures a path again: runs of one label, one server and
//! one test that differ only in the swept settings (streams, window, request/response sizes,
//! flows, UDP rate and datagram size) become one plan with those lists, `--repeat` the most
//! runs any cell has, and `--save` the directory the runs are under when they follow the saved
//! layout.
//!
//! What a report cannot know is left at its default: connection settings a run does not
//! record (`--psk-file`, `-B`, timeouts), the pause between runs, the order lists were given
//! in (ascending here), and a UDP rate given per stream (written as each cell's total). A
//! server started by `--local` shows as the loopback address and port it had. Not for
//! running plans (see [`crate::run`]) or writing them as commands ([`SweepPlan::command_line`]).

use std::collections::BTreeMap;
use std::num::{NonZeroU16, NonZeroU32};
use std::path::{Path, PathBuf};

use xbench::client::DEFAULT_PORT;
use xbench::config::{FlowCount, TestSpec, UdpSpec, Workload};
use xbench::report::TestReport;
use xbench_report::cell::CellKey;

use crate::plan::SweepPlan;
use crate::target::Target;

/// A saved run as `rebuild` needs it: its file, the label it was read under, and its report.
#[derive(Debug, Clone, Copy)]
pub struct SavedRun<'a> {
    /// Where it was read from.
    pub path: &'a Path,
    /// The path's label (the report's own, or the directory's).
    pub label: &'a str,
    /// The run.
    pub report: &'a TestReport,
}

/// The plans that saved `runs`, in the order their first runs come.
///
/// ```
/// use std::path::Path;
/// use xbench::config::TestSpec;
/// use xbench_sweep::rebuild::{SavedRun, plans};
///
/// # let json = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/saved-run.json"));
/// // Two runs of `vpn` saved by `xbench client … -P 1,4 --save runs/`.
/// let mut one: xbench::report::TestReport = serde_json::from_str(json)?;
/// let mut four = one.clone();
/// if let xbench::config::Workload::Throughput(t) = &mut four.spec.workload {
///     t.streams = std::num::NonZeroU16::new(4).unwrap();
/// }
/// let runs = [
///     SavedRun { path: Path::new("runs/vpn/tcp-up-P1/run-1.json"), label: "vpn", report: &one },
///     SavedRun { path: Path::new("runs/vpn/tcp-up-P4/run-1.json"), label: "vpn", report: &four },
/// ];
/// let plans = plans(&runs);
/// assert_eq!(plans.len(), 1);
/// let line = plans[0].command_line("xbench")?;
/// assert!(line.contains(" -P 1,4 "), "{line}");
/// assert!(line.ends_with(" --save=runs"), "{line}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn plans(runs: &[SavedRun<'_>]) -> Vec<SweepPlan> {
    // (label, host, port, the test with its swept settings blanked) → the runs.
    type Group<'a> = Vec<(&'a SavedRun<'a>, TestSpec)>;
    let mut order: Vec<(String, String, u16, String)> = Vec::new();
    let mut groups: BTreeMap<(String, String, u16, String), Group<'_>> = BTreeMap::new();
    for run in runs {
        let spec = &run.report.spec;
        let port = run.report.server_addr.map_or(DEFAULT_PORT, |a| a.port());
        let Ok(shape) = serde_json::to_string(&blank(spec)) else {
            continue;
        };
        let key = (run.label.to_owned(), run.report.host.clone(), port, shape);
        groups
            .entry(key.clone())
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push((run, spec.clone()));
    }
    order
        .into_iter()
        .filter_map(|k| {
            let group = groups.remove(&k)?;
            let (label, host, port, _) = k;
            Some(plan_of(&label, &host, port, &group))
        })
        .collect()
}

fn plan_of(label: &str, host: &str, port: u16, group: &[(&SavedRun<'_>, TestSpec)]) -> SweepPlan {
    let mut target = Target::new(host);
    target.port = port;
    let first = &group[0].1;
    let mut plan = SweepPlan::new(target, first.clone(), label);
    let mut streams: Vec<NonZeroU16> = Vec::new();
    let mut windows: Vec<u64> = Vec::new();
    let mut sizes: Vec<(NonZeroU32, NonZeroU32)> = Vec::new();
    let mut flows: Vec<FlowCount> = Vec::new();
    let mut rates: Vec<u64> = Vec::new();
    let mut lens: Vec<u32> = Vec::new();
    let mut per_cell: BTreeMap<CellKey, u32> = BTreeMap::new();
    for (_, spec) in group {
        *per_cell.entry(CellKey::of_spec(spec)).or_default() += 1;
        windows.extend(spec.socket.window);
        match &spec.workload {
            Workload::Throughput(t) => {
                streams.push(t.streams);
                if let Some(u) = &t.udp {
                    rates.push(u.bitrate.unwrap_or(0));
                    lens.push(u.datagram_len);
                }
            }
            Workload::RequestResponse(r) => {
                sizes.push((r.request_len, r.response_len));
                flows.push(r.flows);
            }
            _ => {}
        }
    }
    // A list only where the runs differ: a single value stays in the spec, as typed.
    fn list<T: Ord + Copy>(mut v: Vec<T>) -> Vec<T> {
        v.sort_unstable();
        v.dedup();
        if v.len() > 1 { v } else { Vec::new() }
    }
    plan.streams = list(streams);
    plan.windows = list(windows);
    plan.rr_sizes = list(sizes);
    plan.flows = list(flows);
    plan.bitrates = list(rates);
    plan.datagram_lens = list(lens);
    if let Some(n) = per_cell.values().max().and_then(|n| NonZeroU32::new(*n)) {
        plan.repeat = n;
    }
    plan.save = saved_under(group[0].0);
    plan
}

/// The directory a run was saved under, when its file follows the layout
/// `DIR/<label>/<cell>/run-<n>.json`.
fn saved_under(run: &SavedRun<'_>) -> Option<PathBuf> {
    let cell_dir = run.path.parent()?;
    let label_dir = cell_dir.parent()?;
    let slug = CellKey::of_spec(&run.report.spec).slug();
    let named = |p: &Path, s: &str| p.file_name().is_some_and(|n| n == s);
    if !named(cell_dir, &slug) || !named(label_dir, run.label) {
        return None;
    }
    let dir = label_dir.parent()?;
    Some(if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir.to_path_buf()
    })
}

/// The test with every setting a sweep lists blanked, so runs of one sweep compare equal.
fn blank(spec: &TestSpec) -> TestSpec {
    let mut s = spec.clone();
    // With and without `-w` are two commands: no list value means "the kernel's default".
    s.socket.window = s.socket.window.map(|_| 0);
    match &mut s.workload {
        Workload::Throughput(t) => {
            t.streams = NonZeroU16::MIN;
            if let Some(u) = &mut t.udp {
                *u = UdpSpec::default();
                // A UDP test's block is its datagram.
                t.block_len = NonZeroU32::MIN;
            }
        }
        Workload::RequestResponse(r) => {
            r.request_len = NonZeroU32::MIN;
            r.response_len = NonZeroU32::MIN;
            r.flows = FlowCount::MIN;
        }
        _ => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn report() -> TestReport {
        let json = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/saved-run.json"
        ));
        serde_json::from_str(json).expect("the fixture is a report")
    }

    fn with(f: impl Fn(&mut TestSpec)) -> TestReport {
        let mut r = report();
        f(&mut r.spec);
        r
    }

    /// A label's TCP sweep (three repeats of one cell, one of the others), a cell with `-w`,
    /// its request/response runs and a longer test are a command each; a run outside the
    /// layout saves nowhere.
    #[test]
    fn a_label_gets_a_command_per_test_with_its_lists() {
        let p4 = |r: &mut TestSpec| {
            if let Workload::Throughput(t) = &mut r.workload {
                t.streams = NonZeroU16::new(4).unwrap();
            }
        };
        let w = |r: &mut TestSpec| r.socket.window = Some(256 << 10);
        let rr = |r: &mut TestSpec| {
            let mut s = TestSpec::request_response();
            s.end = r.end;
            *r = s;
        };
        let reports = [
            with(|_| {}),
            with(p4),
            with(|s| {
                p4(s);
                w(s)
            }),
            with(|_| {}),
            with(|_| {}),
            with(rr),
            with(|s| s.end = xbench::EndCondition::Duration(Duration::from_secs(7))),
        ];
        let paths = [
            "r/vpn/tcp-up-P1/run-1.json",
            "r/vpn/tcp-up-P4/run-1.json",
            "r/vpn/tcp-up-P4-w256K/run-1.json",
            "r/vpn/tcp-up-P1/run-2.json",
            "r/vpn/tcp-up-P1/run-3.json",
            "r/vpn/rr-1x1-f1/run-1.json",
            "elsewhere/one.json",
        ];
        let runs: Vec<SavedRun<'_>> = reports
            .iter()
            .zip(paths)
            .map(|(report, p)| SavedRun {
                path: Path::new(p),
                label: "vpn",
                report,
            })
            .collect();
        let lines: Vec<String> = plans(&runs)
            .iter()
            .map(|p| p.command_line("xbench").unwrap())
            .collect();
        let port = report().server_addr.unwrap().port();
        assert_eq!(
            lines,
            [
                format!(
                    "xbench client 127.0.0.1 -p {port} --label=vpn -P 1,4 -t 0.3 -i 0.1 \
                     --repeat 3 --save=r"
                ),
                // With -w and without are two commands: a list cannot say "no -w".
                format!(
                    "xbench client 127.0.0.1 -p {port} --label=vpn -P 4 -t 0.3 -i 0.1 -w 256K \
                     --save=r"
                ),
                format!("xbench client 127.0.0.1 -p {port} --label=vpn --rr -t 0.3 --save=r"),
                format!("xbench client 127.0.0.1 -p {port} --label=vpn -t 7 -i 0.1"),
            ]
        );
    }
}
