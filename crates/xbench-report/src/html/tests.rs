//! The page from runs built in memory: what it holds and what it must never hold. The same
//! page in a real browser is `crates/xbench-cli/tests/html_report.rs`.

use std::path::PathBuf;

use super::*;
use crate::run::{Measure, TimelinePoint};

fn tp(label: &str, p: u16, mbps: f64, i: usize) -> Run {
    let mut r = crate::run::fixtures::tcp(label, p, mbps, 3, Some(900.0));
    r.started_at = format!("2026-11-2{}T10:00:00Z", 7 + i % 2);
    r.length_s = Some(2.0);
    if let Measure::Throughput(dirs) = &mut r.measure {
        dirs[0].timeline = (0..4)
            .map(|t| TimelinePoint {
                start_s: t as f64 * 0.5,
                end_s: (t + 1) as f64 * 0.5,
                bits_per_second: mbps * 1e6,
                retransmits: 1,
                cwnd_bytes: vec![64 * 1024; usize::from(p)],
            })
            .collect();
    }
    r
}

fn loaded() -> Loaded {
    let mut runs = Vec::new();
    for i in 0..3 {
        for p in [1u16, 4] {
            runs.push(tp("peering", p, 900.0 + i as f64, i));
            runs.push(tp("vpn <b>", p, 300.0 + i as f64, i));
        }
    }
    Loaded {
        runs,
        warnings: vec![crate::load::Warning {
            path: "runs/x/bad.json".into(),
            message: "truncated JSON".into(),
        }],
        files_seen: 13,
    }
}

fn page() -> String {
    render(&loaded(), Path::new("report.html"), &Options::default())
}

/// Nothing leaves the file: a policy that forbids every fetch, no URL a browser would load,
/// and the only script and style the ones the policy names by their hashes.
#[test]
fn the_page_fetches_nothing_and_runs_only_its_own_script() {
    let p = page();
    let csp = p
        .split("http-equiv=\"Content-Security-Policy\" content=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a CSP meta");
    assert!(csp.starts_with("default-src 'none';"), "{csp}");
    assert!(
        csp.contains(&format!("script-src '{}'", sha256(JS))),
        "{csp}"
    );
    assert!(
        csp.contains(&format!("style-src '{}'", sha256(CSS))),
        "{csp}"
    );
    for never in [
        "http:",
        "https:",
        " src=",
        "url(",
        "@import",
        "<link",
        "<img",
        " style=\"",
    ] {
        assert!(!p.contains(never), "{never} in the page");
    }
    // One script that runs, and it is the one hashed.
    assert_eq!(p.matches("<script>").count(), 1);
    assert!(p.contains(&format!("<script>{JS}</script>")));
    assert!(p.contains(&format!("<style>{CSS}</style>")));
    // Labels are text, never markup.
    assert!(!p.contains("vpn <b>"));
    assert!(p.contains("vpn &lt;b&gt;"));
}

/// The headline, a verdict per cell, a chart per swept dimension and a timeline per cell,
/// a table row per (cell, path), and the skipped file named.
#[test]
fn every_cell_and_path_is_on_the_page() {
    let p = page();
    assert!(
        p.contains("<h1>Path comparison: peering and vpn &lt;b&gt;</h1>"),
        "{p}"
    );
    assert!(
        p.contains("6 runs of 2 paths") || p.contains("12 runs of 2 paths"),
        "{p}"
    );
    assert!(p.contains("measured 2026-11-27 to 2026-11-28"));
    assert_eq!(p.matches("<li class=\"told\">").count(), 2, "{p}");
    assert!(p.contains("peering delivers 2.99× vpn &lt;b&gt; (95 % CIs apart) at P=1."));
    assert!(p.contains("id=\"fig-streams\""));
    assert!(!p.contains("id=\"fig-window\""), "windows do not vary");
    assert!(p.contains("id=\"fig-timeline-0\"") && p.contains("id=\"fig-timeline-1\""));
    let tcp = p.split("id=\"tcp-table\"").nth(1).unwrap();
    let tcp = tcp.split("</table>").next().unwrap();
    assert_eq!(tcp.matches("<tr>").count(), 1 + 4, "{tcp}");
    assert!(p.contains("<code>runs/x/bad.json</code>: truncated JSON"));
    // Runs kept in memory only have no file to link.
    assert!(p.contains("(not saved)"));
    assert!(p.contains("The commands were not recorded"));
}

/// What the caller knows goes on the page: commands, the page's own command, facts per path.
#[test]
fn options_add_commands_and_facts_per_path() {
    let o = Options {
        title: Some("Q4 paths".into()),
        commands: vec![Command {
            label: Some("vpn <b>".into()),
            line: "xbench client 10.0.0.2 -P 1,4 --repeat 3 --save=runs".into(),
        }],
        generated_by: Some("xbench report runs --html r.html".into()),
        notes: vec![PathNote {
            label: "peering".into(),
            name: "region".into(),
            value: "eu-west-1 → us-east-1".into(),
        }],
        ceiling: Some(1e9),
        ..Options::default()
    };
    let p = render(&loaded(), Path::new("out/r.html"), &o);
    assert!(p.contains("<title>Q4 paths</title>"));
    assert!(p.contains("xbench client 10.0.0.2 -P 1,4 --repeat 3 --save=runs"));
    assert!(p.contains("xbench report runs --html r.html"));
    assert!(p.contains("<button type=\"button\">region</button>"));
    assert!(p.contains("eu-west-1 → us-east-1"));
    // The ceiling: a column, and a line on the streams chart.
    assert!(p.contains("% of 1.00 Gbit/s"), "{p}");
    assert!(
        p.contains(">capacity 1,000 Mbit/s</button>")
            || p.contains(">capacity 1.00 Gbit/s</button>"),
        "{p}"
    );
}

#[test]
fn links_are_relative_to_the_page() {
    assert_eq!(
        relative(
            Path::new("/a/b/out"),
            Path::new("/a/b/runs/vpn/tcp-up-P1/run-1.json")
        ),
        "../runs/vpn/tcp-up-P1/run-1.json"
    );
    assert_eq!(
        relative(Path::new("/a/b"), Path::new("/a/b/runs/x.json")),
        "runs/x.json"
    );
    assert_eq!(absolute(Path::new("/x/./y/../z")), PathBuf::from("/x/z"));
}

/// 5 paths × 15 repeats × 5 cells, with 20 intervals of 8 streams a run: the size the issue
/// bounds (under ~2 MB).
#[test]
fn a_large_comparison_stays_small() {
    let mut runs = Vec::new();
    for i in 0..15 {
        for label in ["peering", "tgw", "vpn", "public", "accelerator"] {
            for p in [1u16, 2, 4, 8, 16] {
                let mut r = tp(label, p, 100.0 * f64::from(p) + i as f64, i);
                if let Measure::Throughput(d) = &mut r.measure {
                    d[0].timeline = (0..20)
                        .map(|t| TimelinePoint {
                            start_s: t as f64,
                            end_s: t as f64 + 1.0,
                            bits_per_second: 1e8 + t as f64 * 1e6,
                            retransmits: t,
                            cwnd_bytes: vec![100_000 + t * 1000; 8],
                        })
                        .collect();
                }
                r.path = PathBuf::from(format!("/runs/{label}/tcp-up-P{p}/run-{i}.json"));
                runs.push(r);
            }
        }
    }
    let loaded = Loaded {
        runs,
        warnings: vec![],
        files_seen: 375,
    };
    let p = render(&loaded, Path::new("/runs/report.html"), &Options::default());
    eprintln!("5 paths × 15 repeats × 5 cells: {} bytes", p.len());
    assert!(p.len() < 2_000_000, "{} bytes", p.len());
    assert_eq!(
        p.matches("<a href=\"").count() - p.matches("<a href=\"#").count(),
        375
    );
}

/// Issue 34: under-load runs have a section of their own — the chart with the load's phases
/// shaded and the table — and are neither a TCP throughput row nor in its charts.
#[test]
fn under_load_runs_get_their_own_section() {
    use crate::run::fixtures;
    let mut l = loaded();
    l.runs.extend([
        fixtures::run("vpn <b>", 1, 300.0, 20_000.0, 0),
        fixtures::run("vpn <b>", 2, 340.0, 30_000.0, 0),
        fixtures::run("peering", 1, 100.0, 1_000.0, 0),
    ]);
    let p = render(&l, Path::new("report.html"), &Options::default());
    let section = p
        .split("id=\"under-load\"")
        .nth(1)
        .expect("an under-load section");
    let section = section.split("<section").next().unwrap();
    assert!(section.contains("Latency under load"), "{section}");
    assert!(section.contains("id=\"fig-under-load\""), "{section}");
    assert!(section.contains("class=\"band\""), "{section}");
    assert!(
        section.contains("shaded: loaded (dark); ramp (-O), drain (light)"),
        "{section}"
    );
    assert!(section.contains("id=\"ul-table\""), "{section}");
    for head in [
        "idle p50 µs",
        "loaded p50 ms",
        "increase ms",
        "RPM",
        "load Mbit/s",
    ] {
        assert!(section.contains(head), "{head} in {section}");
    }
    // The label is escaped in the table as everywhere.
    assert!(section.contains("vpn &lt;b&gt;") && !section.contains("vpn <b>"));
    // The TCP table counts the plain runs alone: 3 per path and cell, none of these.
    let tcp = p.split("id=\"tcp-table\"").nth(1).unwrap();
    let tcp = tcp.split("</table>").next().unwrap();
    assert!(!tcp.contains("load=up"), "{tcp}");
    // The headline has a verdict on the loaded median.
    assert!(p.contains("under load P=1 load=up"), "no verdict");
}

/// A small mean with a wide spread (1, 1 and 1,000 Mbit/s) has a Student-t interval whose low
/// end is below 0: the page shows 0, never a negative rate (or loss, or jitter).
#[test]
fn an_interval_is_never_below_zero() {
    let mut l = loaded();
    l.runs = [1.0, 1.0, 1000.0]
        .iter()
        .enumerate()
        .map(|(i, m)| tp("lossy", 1, *m, i))
        .collect();
    let p = render(&l, Path::new("report.html"), &Options::default());
    let tcp = p.split("id=\"tcp-table\"").nth(1).unwrap();
    let tcp = tcp.split("</table>").next().unwrap();
    assert!(tcp.contains(">0–"), "{tcp}");
    assert!(!tcp.contains(">-") && !tcp.contains(">−"), "{tcp}");
}
