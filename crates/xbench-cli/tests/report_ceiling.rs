//! `xbench report --ceiling RATE`: a link's capacity as a labelled line on the chart and as
//! each row's share in the table, from runs a real sweep saved; refused where it would show
//! nowhere.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use common::{TempDir, assert_usage_errors, xbench};

#[test]
fn a_ceiling_is_drawn_and_tabled_in_the_reports_unit() {
    let dir = TempDir::new("ceiling");
    let out = xbench()
        .args([
            "client", "-t", "0.2", "-i", "0.1", "-P", "1,2", "--label", "lo", "--save",
        ])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let svg = dir.0.join("chart.svg");
    let out = xbench()
        .arg("report")
        .arg(dir.0.join("lo"))
        .args(["--ceiling", "100G", "--unit", "G", "--plot"])
        .arg(&svg)
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 100 Gbit/s is 11.6 GiB/s (iperf3's G: 2^30 bytes).
    assert!(
        table.contains("share of the 11.6 GiB/s capacity"),
        "{table}"
    );
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(" lo ")).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows.iter().all(|r| r.contains(" %")), "{table}");

    let doc = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&doc).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    assert!(texts.contains(&"capacity 11.6 GiB/s"), "{texts:?}");
    assert!(texts.contains(&"Receiver throughput (GiB/s)"), "{texts:?}");
}

#[test]
fn a_ceiling_that_would_show_nowhere_is_refused() {
    let dir = TempDir::new("ceiling-refused");
    let d = dir.0.to_str().unwrap();
    assert_usage_errors(
        &["report", d],
        &[
            (
                &["--ceiling", "1G", "--format", "json"],
                "JSON keeps base units",
            ),
            (
                &["--ceiling", "1G", "--plot", "x.svg", "--chart", "latency"],
                "no throughput axis",
            ),
            (&["--ceiling", "fast"], "--ceiling"),
            (&["--ceiling", "0"], "greater than 0"),
        ],
    );
}
