//! `xbench report --chart timeline` over several saved runs: a line per run in every panel,
//! named after its path and run, and a key naming them; from runs a real client saved.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use common::{TempDir, xbench};

/// Two paths' runs given to a timeline drew the first run alone (issue 21).
#[test]
fn a_timeline_of_two_paths_draws_every_run() {
    let dir = TempDir::new("timeline");
    for (label, repeat) in [("peering", "2"), ("vpn", "1")] {
        let out = xbench()
            .args(["client", "-t", "0.3", "-i", "0.1", "--repeat", repeat])
            .args(["--label", label, "--save"])
            .arg(&dir.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let svg = dir.0.join("timeline.svg");
    let out = xbench()
        .arg("report")
        .arg(&dir.0)
        .args(["--chart", "timeline", "--plot"])
        .arg(&svg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("at most"), "no run left out: {stderr}");

    let doc = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&doc).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    let names = ["peering run 1", "peering run 2", "vpn run 1"];
    for name in names {
        // At a line's end in each of the three panels, and once in the key.
        let n = texts.iter().filter(|t| **t == name).count();
        assert_eq!(n, 4, "{name} in {texts:?}");
    }
    assert!(
        texts.contains(&"Congestion window, all streams of a run"),
        "{texts:?}"
    );
    // A measured line per run and panel: three runs, three panels, in three colours.
    let mut colours: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| n.attribute("points").unwrap().split_whitespace().count() > 2)
        .filter_map(|n| n.attribute("stroke"))
        .collect();
    colours.sort_unstable();
    let mut distinct = colours.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), names.len(), "{colours:?}");
    assert!(
        distinct
            .iter()
            .all(|c| colours.iter().filter(|x| *x == c).count() == 3),
        "{colours:?}"
    );
}

/// More runs than a timeline overlays: the chart is drawn and the user told how many were
/// left out, not left to count lines.
#[test]
fn a_timeline_of_too_many_runs_says_how_many_it_left_out() {
    let dir = TempDir::new("timeline-cap");
    let out = xbench()
        .args(["client", "-t", "0.2", "-i", "0.1", "--repeat", "13"])
        .args(["--label", "lo", "--save"])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = dir.0.join("timeline.svg");
    let out = xbench()
        .arg("report")
        .arg(&dir.0)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("overlays at most 12 runs") && stderr.contains("1 more left out"),
        "{stderr}"
    );
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.contains("lo run 12") && !doc.contains("lo run 13"));
}
