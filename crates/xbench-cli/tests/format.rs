//! `-f`/`--unit` on every output of `xbench client`: the text of a single test, netperf-style
//! `--fields`, and a sweep's lines and table, each checked against the JSON report of the same
//! run; and refused, with a reason, where there is no rate to show.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use serde_json::Value;
use xbench_report::ThroughputUnit;

use common::{TempDir, assert_usage_errors, xbench};

/// Every `NUMBER UNIT/s` pair in `text`: the units a reader sees.
fn rate_units(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0].replace(',', "").parse::<f64>().is_ok() && w[1].ends_with("/s"))
        .map(|w| w[1].trim_end_matches([',', ')']).to_owned())
        .collect()
}

/// Runs a 0.6 s loopback test with `args`, text on stdout and the report in a JSON file.
fn run_with_json(dir: &TempDir, args: &[&str]) -> (String, Value) {
    let file = dir.0.join("report.json");
    let out = xbench()
        .args(["client", "-t", "0.6", "-i", "0.2"])
        .args(args)
        .arg("--json-file")
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    (stdout, doc)
}

fn received_bps(doc: &Value) -> f64 {
    doc["summary"]["directions"][0]["receiver"]["bits_per_second"]
        .as_f64()
        .unwrap()
}

#[test]
fn every_rate_of_a_single_test_is_in_the_asked_unit() {
    let dir = TempDir::new("format-single");
    for (flag, unit) in [
        ("M", ThroughputUnit::MiBytes),
        ("k", ThroughputUnit::Kbits),
        ("MB/s", ThroughputUnit::MBytes),
        ("g", ThroughputUnit::Gbits),
    ] {
        let (text, doc) = run_with_json(&dir, &["-P", "2", "-f", flag]);
        let units = rate_units(&text);
        // Intervals (per stream and [SUM]), the summary table, the headline and the streams'
        // spread: more than a dozen rates, all in the unit.
        assert!(units.len() > 12, "-f {flag}: {units:?}\n{text}");
        assert!(
            units.iter().all(|u| u == unit.label()),
            "-f {flag}: {units:?}\n{text}"
        );
        let headline = format!(
            "client→server: {} received",
            unit.format_with_label(received_bps(&doc))
        );
        assert!(
            text.contains(&headline),
            "-f {flag}: no `{headline}` in\n{text}"
        );
    }
    // `--format` names the output format in every command now; a unit given to it is still
    // read as the unit, with a warning that says what to write.
    let (text, _) = run_with_json(&dir, &["--format", "K"]);
    assert!(rate_units(&text).iter().all(|u| u == "KiB/s"), "{text}");
    // Without -f each figure picks its own unit, as before.
    let (text, _) = run_with_json(&dir, &[]);
    assert!(
        rate_units(&text).iter().all(|u| u.ends_with("bit/s")),
        "{text}"
    );
}

#[test]
fn netperf_fields_take_the_unit() {
    let dir = TempDir::new("format-fields");
    let (text, doc) = run_with_json(
        &dir,
        &[
            "-f",
            "g",
            "--fields",
            "throughput,throughput_units",
            "--fields-format",
            "keyval",
        ],
    );
    let value: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("THROUGHPUT="))
        .unwrap()
        .parse()
        .unwrap();
    let expected = received_bps(&doc) / 1e9;
    assert!((value - expected).abs() < 0.006, "{value} vs {expected}");
    assert!(text.contains("THROUGHPUT_UNITS=Gbit/s"), "{text}");
    // netperf's own default stays.
    let (text, _) = run_with_json(
        &dir,
        &["--fields", "throughput_units", "--fields-format", "keyval"],
    );
    assert!(text.contains("THROUGHPUT_UNITS=10^6bits/s"), "{text}");
}

#[test]
fn a_sweep_shows_its_lines_and_table_in_the_unit() {
    let out = xbench()
        .args(["client", "-t", "0.3", "-i", "0", "-P", "1,2", "-f", "M"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: Vec<&str> = text.lines().filter(|l| l.contains(" run 1/1: ")).collect();
    assert_eq!(runs.len(), 2, "{text}");
    assert!(runs.iter().all(|l| l.contains(" MiB/s,")), "{text}");
    assert!(text.contains("receiver rate in MiB/s"), "{text}");
}

#[test]
fn a_unit_with_no_rate_to_apply_to_is_refused_with_the_reason() {
    assert_usage_errors(
        &["client"],
        &[
            (
                &["--rr", "-f", "m"],
                "a request/response test reports transactions",
            ),
            (
                &["--crr", "--unit", "MB/s"],
                "a request/response test reports",
            ),
            (
                &["-f", "M", "--json"],
                "JSON gives every rate in bits per second",
            ),
            (
                &["-f", "M", "--json-stream"],
                "does not apply to --json-stream",
            ),
            (
                &["-P", "1,2", "-f", "g", "--json"],
                "does not apply to --json",
            ),
            (&["-f", "x"], "K M G T for bytes (powers of 1024)"),
        ],
    );
}

/// Significant digits of a figure as printed (`55,461` → 5, `9.41` → 3, `0.0204` → 3).
fn significant_digits(figure: &str) -> usize {
    figure
        .chars()
        .filter(char::is_ascii_digit)
        .skip_while(|c| *c == '0')
        .count()
}

/// Issue 31: a sweep's lines printed "55461 Mbit/s" and its table "34065". Without a unit,
/// every rate of a sweep's lines and table reads in the unit that suits it, three significant
/// digits.
#[test]
fn without_a_unit_a_sweeps_rates_have_three_significant_digits() {
    let out = xbench()
        .args(["client", "-t", "0.3", "-i", "0", "-P", "1,2"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rates: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" run 1/1: "))
        .flat_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words
                .windows(2)
                .filter(|w| w[1].trim_end_matches(',').ends_with("bit/s"))
                .map(|w| w[0])
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(rates.len(), 2, "a rate on each run's line: {text}");
    for r in rates {
        assert_eq!(significant_digits(r), 3, "{r} in\n{text}");
    }
    // The table's unit is in its title; its mean, min and max have three digits too.
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("cell"))
        // The table ends at a blank line (the path table may follow).
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(text.contains("receiver rate in "), "{text}");
    for row in &table[1..] {
        let cols: Vec<&str> = row.split_whitespace().collect();
        // P=N local runs mean stddev min max …
        for figure in [cols[3], cols[5], cols[6]] {
            assert_eq!(significant_digits(figure), 3, "{figure} in {row}\n{text}");
        }
    }
}

/// `--format` is the output format in every command: `text` or `json` for a client, as
/// `xbench report --format` and `xbench server --format` (its log lines). A rate unit given
/// to it, what it meant before, is read with a warning that says what to write.
#[test]
fn format_is_the_output_format_in_every_command() {
    let out = xbench()
        .args(["client", "-t", "0.3", "-i", "0", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["summary"]["directions"][0]["receiver"].is_object(),
        "{doc}"
    );

    let out = xbench()
        .args(["client", "-t", "0.3", "-i", "0", "--format", "Gbit/s"])
        .output()
        .unwrap();
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(err.contains("write --unit Gbit/s (or -f)"), "{err}");
    assert!(rate_units(&text).iter().all(|u| u == "Gbit/s"), "{text}");

    let help = xbench().args(["server", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("[alias: --format]"), "{help}");
    assert_usage_errors(
        &["client", "--local"],
        &[
            (
                &["--format", "yaml"],
                "use text or json (for a rate unit, --unit yaml)",
            ),
            (
                &["--format", "json", "--json-stream"],
                "cannot be used with",
            ),
        ],
    );
}
