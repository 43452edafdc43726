//! Issue 34 where results go: a saved `--under-load` sweep read back by `xbench report` gets
//! its own table (text, JSON that validates against the committed comparison schema) and its
//! own chart, and its bulk streams are no plain throughput row. Against the in-process server
//! on loopback; only the shape is checked, never a figure, so a loaded machine cannot fail it.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use serde_json::Value;

use common::{TempDir, xbench};

fn ok(args: &[&str]) -> String {
    let out = xbench().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: status {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_saved_under_load_sweep_reports_its_own_table_json_and_chart() {
    let tmp = TempDir::new("report-under-load");
    let dir = tmp.0.join("runs");
    let d = dir.to_str().unwrap();
    ok(&[
        "client",
        "-P",
        "1,2",
        "--under-load",
        "both",
        "-t",
        "1",
        "--idle",
        "0.5",
        "-i",
        "0.2",
        "-b",
        "20M",
        "--label",
        "loop",
        "--save",
        d,
    ]);
    // Saved apart from a plain throughput cell of the same settings.
    for cell in ["ul-both-b20M-P1", "ul-both-b20M-P2"] {
        assert!(
            dir.join("loop").join(cell).join("run-1.json").is_file(),
            "{cell}"
        );
    }

    let text = ok(&["report", d]);
    assert!(text.starts_with("Latency under load: "), "{text}");
    assert!(!text.contains("Throughput"), "{text}");
    for cell in ["b=20M P=1 load=both", "b=20M P=2 load=both"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(cell) && l.contains(" loop ")),
            "{cell}: {text}"
        );
    }

    let json: Value = serde_json::from_str(&ok(&["report", d, "--format", "json"])).unwrap();
    let schema: Value = serde_json::from_str(include_str!(
        "../../xbench-report/schema/comparison.schema.json"
    ))
    .unwrap();
    common::assert_valid(&schema, &json);
    assert_eq!(json["throughput"].as_array().unwrap().len(), 0, "{json}");
    let rows = json["under_load"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{json}");
    assert_eq!(rows[0]["cell"]["kind"], "under_load");
    assert_eq!(rows[0]["cell"]["direction"], "bidir");
    assert!(rows[0]["bulk_bits_per_second"]["mean"].as_f64().unwrap() > 0.0);

    let svg = tmp.0.join("ul.svg");
    let out = xbench()
        .args(["report", d, "--plot", svg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("under-load chart written"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(svg).unwrap();
    roxmltree::Document::parse(&svg).unwrap();
    assert!(
        svg.contains("UDP probes&apos; median per interval"),
        "{svg}"
    );

    // Asked for by name, the same chart; `--ceiling` has no axis on it.
    let named = tmp.0.join("named.svg");
    let out = xbench()
        .args(["report", d, "--chart", "under-load", "--plot"])
        .arg(&named)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&named)
            .unwrap()
            .contains("median per interval")
    );
    let out = xbench()
        .args([
            "report",
            d,
            "--chart",
            "under-load",
            "--ceiling",
            "1G",
            "--plot",
        ])
        .arg(&named)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("under-load chart has no throughput axis"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
