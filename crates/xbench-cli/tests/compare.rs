//! `xbench compare` as a CI job runs it: two real sweeps saved by `xbench client --save`
//! against the in-process server, one of them capped lower, and the exit status that gates the
//! job — 1 naming the regressed cell, 0 with nothing regressed, 3 when a cell cannot be decided,
//! 2 for bad input.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::path::Path;
use std::process::Output;

use common::{TempDir, assert_usage_errors, xbench};

/// A saved sweep of `-P 1` on loopback: `repeat` runs of 0.3 s, with extra flags.
fn sweep(dir: &Path, repeat: &str, extra: &[&str]) {
    let out = xbench()
        .args(["client", "-t", "0.3", "-P", "1", "--repeat", repeat])
        .args(["--label", "lo", "--save"])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sweep failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn compare(args: &[&str]) -> (Option<i32>, String, String) {
    let out: Output = xbench().arg("compare").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_capped_candidate_fails_naming_the_cell_and_the_baseline_against_itself_passes() {
    let dir = TempDir::new("capped");
    let (base, cand) = (dir.0.join("base"), dir.0.join("cand"));
    // Both paced, so a busy machine cannot spread the baseline's runs over tens of Gbit/s
    // (0.3 s loopback runs unpaced did, and Welch's test then could not tell 13.5 Gbit/s from
    // 108 Mbit/s with three runs): 1 Gbit/s against 100 Mbit/s, far below 95 % of it.
    sweep(&base, "3", &["-b", "1G"]);
    sweep(&cand, "3", &["-b", "100M"]);

    let (code, out, err) = compare(&[s(&base), s(&cand)]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("REGRESSED"), "{out}");
    assert!(out.contains("REGRESSION in 1 of 1 rows"), "{out}");
    assert!(
        err.contains("regression (exit 1) in path `lo`, cell P=1 client→server, throughput"),
        "{err}"
    );

    let (code, out, err) = compare(&[s(&base), s(&base)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("no regression: 1 rows checked"), "{out}");

    // The capped sweep as the baseline: the candidate is better, which passes.
    let (code, out, _) = compare(&[s(&cand), s(&base)]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("improved"), "{out}");
}

#[test]
fn too_few_runs_and_missing_cells_are_inconclusive_not_passed() {
    let dir = TempDir::new("few");
    let (base, cand) = (dir.0.join("base"), dir.0.join("cand"));
    sweep(&base, "1", &[]);
    sweep(&cand, "2", &[]);
    let (code, out, err) = compare(&[s(&base), s(&cand)]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(
        out.contains("too few runs: 1 baseline, 2 candidate"),
        "{out}"
    );
    assert!(err.contains("inconclusive"), "{err}");

    // Latency asked of throughput runs: nothing to compare, said so.
    let (code, out, _) = compare(&[s(&cand), s(&cand), "--metric", "p99"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("p99: no cell of the runs carries it"), "{out}");

    // An empty candidate directory: every cell is missing there.
    let empty = dir.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, out, err) = compare(&[s(&cand), s(&empty)]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("missing in the candidate"), "{out}");
    assert!(err.contains("no usable run in the candidate"), "{err}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let dir = TempDir::new("bad");
    let nope = dir.0.join("nope");
    let (code, _, err) = compare(&[s(&nope), s(&dir.0)]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("baseline: ") && err.contains("no such file"),
        "{err}"
    );
    assert_usage_errors(
        &["compare", s(&dir.0), s(&dir.0)],
        &[
            (&["--max-regression", "100%"], "from 0% to below 100%"),
            (&["--max-regression", "lots"], "not a percentage"),
            (&["--confidence", "0.95"], "from 50% to below 100%"),
            (&["--metric", "p42"], "unknown metric `p42`"),
        ],
    );
}
