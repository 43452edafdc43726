//! `xbench report --html`: the page opened in headless Chromium, checked as a person would see
//! it — every path's series drawn and every table row there, a hovered point reading its value
//! and n, a path hidden from the key by mouse and brought back by keyboard, a table sorted,
//! nothing fetched and nothing logged, no sideways scrolling on a phone, a printable page —
//! with screenshots at desktop and phone widths (kept in `$XBENCH_SCREENSHOTS` when set).
//!
//! The runs are real: three paths measured on loopback against `--local` servers (one capped
//! with `-b` so the verdicts have something to tell), with a streams sweep, request/response and
//! a UDP rate sweep. Chromium is Debian's `chromium`; without it the test says so and skips,
//! except under `CI=true`, where it fails.

#![allow(clippy::unwrap_used, clippy::print_stderr)] // a failed unwrap in a test is a failed assertion

mod browser;
mod common;

use std::path::Path;

use serde_json::Value;

use browser::{Browser, chromium_or_skip};
use common::{TempDir, xbench};

const PATHS: [&str; 3] = ["peering", "vpn", "capped"];

fn client(dir: &Path, label: &str, args: &[&str], resume: bool) {
    let mut cmd = xbench();
    cmd.args([
        "client", "--local", "-t", "0.3", "-i", "0.1", "--label", label, "--save",
    ])
    .arg(dir)
    .args(args);
    if resume {
        cmd.arg("--resume");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{label} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three paths' sweeps: TCP -P 1,2, request/response, UDP at two rates; two runs each.
fn measure(runs: &Path) {
    for label in PATHS {
        let cap: &[&str] = if label == "capped" {
            &["-b", "200M"]
        } else {
            &[]
        };
        client(
            runs,
            label,
            &[&["-P", "1,2", "--repeat", "2"], cap].concat(),
            false,
        );
        client(runs, label, &["--rr", "--repeat", "2"], true);
        client(runs, label, &["-u", "-b", "20M,50M", "--repeat", "2"], true);
    }
}

/// A field this version does not know, added to one run as a newer xbench would save it: the
/// page shows it under that path, as saved.
fn add_unknown_fields(runs: &Path) {
    let file = runs.join("vpn/tcp-up-P2/run-1.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    v["diagnosis"] = serde_json::json!({"verdict": "receive window", "share_pct": 93.5});
    v["summary"]["directions"][0]["path_mtu"] = serde_json::json!(1500);
    std::fs::write(&file, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn html_report_in_a_browser() {
    let Some(chromium) = chromium_or_skip("html_report_in_a_browser") else {
        return;
    };
    let dir = TempDir::new("html-report");
    let runs = dir.0.join("runs");
    measure(&runs);
    add_unknown_fields(&runs);
    std::fs::create_dir_all(dir.0.join("out")).unwrap();
    let page = dir.0.join("out/report.html");
    let out = xbench()
        .current_dir(&dir.0)
        .args([
            "report",
            "runs",
            "--format",
            "json",
            "--html",
            "out/report.html",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("web page written to out/report.html (30 runs, "),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let size = std::fs::metadata(&page).unwrap().len();
    eprintln!("page: {size} bytes");
    assert!(size < 1_000_000, "{size} bytes");

    let mut b = Browser::start(&chromium, &dir.0);
    b.viewport(1280, 900, false);
    let url = format!("file://{}", page.display());
    b.open(&url);
    desktop_checks(&mut b, &doc, &page);
    shot(&mut b, "desktop.png", 1280);

    b.viewport(390, 844, true);
    b.open(&url);
    phone_checks(&mut b);
    shot(&mut b, "phone.png", 390);

    b.call(
        "Emulation.setEmulatedMedia",
        serde_json::json!({"media": "print"}),
    );
    let printed = b.eval(
        "({nav: getComputedStyle(document.querySelector('nav')).display,
           wide: document.querySelector('#fig-streams svg.v-wide').getBoundingClientRect().width,
           narrow: document.querySelector('#fig-streams svg.v-narrow').getBoundingClientRect().width,
           avoid: getComputedStyle(document.querySelector('figure.chart')).breakInside})",
    );
    assert_eq!(printed["nav"], "none", "{printed}");
    assert!(printed["wide"].as_f64().unwrap() > 0.0, "{printed}");
    assert_eq!(printed["narrow"], 0.0, "{printed}");
    assert_eq!(printed["avoid"], "avoid", "{printed}");
    assert!(b.pdf().starts_with(b"%PDF"));

    // Nothing left the file, and nothing complained, in any of it.
    let complaints = b.complaints();
    assert!(complaints.is_empty(), "{complaints:#?}");
    for r in b.requests() {
        assert_eq!(r, url, "a request other than the page itself");
    }
}

fn desktop_checks(b: &mut Browser, doc: &Value, page: &Path) {
    // Every table row: the comparison's rows, each path of each cell.
    for (id, key) in [
        ("tcp-table", "throughput"),
        ("rr-table", "rr"),
        ("udp-table", "udp"),
    ] {
        // (cell, path) of every row, by the columns' headings.
        let rows = b.eval(&format!(
            "(() => {{ const t = document.getElementById('{id}');
                const h = Array.from(t.querySelectorAll('thead th')).map(th => th.textContent);
                const [c, p] = [h.indexOf('cell'), h.indexOf('path')];
                return Array.from(t.tBodies[0].rows).map(r => [r.cells[c].textContent, r.cells[p].textContent]); }})()"
        ));
        let mut got: Vec<(String, String)> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
            .collect();
        let mut want: Vec<(String, String)> = doc[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["cell_name"].as_str().unwrap().into(),
                    w["label"].as_str().unwrap().into(),
                )
            })
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{id}");
        assert!(!want.is_empty(), "{id}");
    }
    // Every chart draws every path in the layout shown, with a key button each.
    let figs = b.eval(
        "Array.from(document.querySelectorAll('figure.chart')).map(f => {
            const names = JSON.parse(f.querySelector('script.pts').textContent).names;
            const shown = Array.from(f.querySelectorAll('.plot > svg')).filter(s => s.getBoundingClientRect().width > 0);
            return {id: f.id, names, keys: f.querySelectorAll('.key .k').length,
                    panels: f.querySelectorAll('.panel').length, shown: shown.length,
                    drawn: names.map((_, i) => shown.filter(s => {
                        const p = s.querySelector('g.s[data-s=\"' + i + '\"] path');
                        return p && p.getAttribute('d').length > 3 && p.getBoundingClientRect().width + p.getBoundingClientRect().height > 0;
                    }).length)};
        })",
    );
    let figs = figs.as_array().unwrap();
    let ids: Vec<&str> = figs.iter().map(|f| f["id"].as_str().unwrap()).collect();
    for want in [
        "fig-streams",
        "fig-latency",
        "fig-udp",
        "fig-timeline-0",
        "fig-timeline-1",
    ] {
        assert!(ids.contains(&want), "{want} missing: {ids:?}");
    }
    for f in figs {
        let names = f["names"].as_array().unwrap();
        assert_eq!(f["keys"].as_u64().unwrap() as usize, names.len(), "{f}");
        assert_eq!(f["shown"], f["panels"], "one layout shown per panel: {f}");
        for (i, n) in f["drawn"].as_array().unwrap().iter().enumerate() {
            assert!(n.as_u64().unwrap() >= 1, "{} not drawn in {f}", names[i]);
        }
        if ["fig-streams", "fig-latency", "fig-udp"].contains(&f["id"].as_str().unwrap()) {
            for p in PATHS {
                assert!(
                    names.iter().any(|n| n.as_str().unwrap().starts_with(p)),
                    "{p}: {f}"
                );
            }
        }
    }
    // A verdict per cell: 2 TCP, 1 request/response, 2 UDP; the capped path told apart.
    let verdicts =
        b.eval("Array.from(document.querySelectorAll('ul.verdicts li')).map(li => li.textContent)");
    assert_eq!(verdicts.as_array().unwrap().len(), 5, "{verdicts}");
    assert!(verdicts.to_string().contains("capped"), "{verdicts}");
    // Each run linked by a relative path that names its file.
    let links = b.eval(
        "Array.from(document.querySelectorAll('a[href$=\".json\"]')).map(a => a.getAttribute('href'))",
    );
    let links = links.as_array().unwrap();
    assert_eq!(links.len(), 30, "{links:?}");
    for l in links {
        let l = l.as_str().unwrap();
        assert!(l.starts_with("../runs/"), "{l}");
        assert!(page.parent().unwrap().join(l).is_file(), "{l}");
    }
    // The unknown fields, under their path only.
    let unknown = b.eval(
        "Array.from(document.querySelectorAll('section.path')).map(s => [s.querySelector('h3').textContent, s.querySelector('.unknown') ? s.querySelector('.unknown').textContent : ''])",
    );
    for pair in unknown.as_array().unwrap() {
        let (label, text) = (pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
        if label == "vpn" {
            for w in [
                "diagnosis",
                "receive window",
                "93.5",
                "summary.directions[].path_mtu",
                "1500",
            ] {
                assert!(text.contains(w), "{w} in {text}");
            }
        } else {
            assert!(text.is_empty(), "{label}: {text}");
        }
    }

    hover_a_point(b, doc);
    toggle_a_path(b);
    sort_a_table(b);
}

/// The mouse over a point of the streams chart: the tip names the path and reads the table's
/// mean and its n.
fn hover_a_point(b: &mut Browser, doc: &Value) {
    let at = b.eval(
        "(() => { const c = document.querySelector('#fig-streams svg.v-wide g.s[data-s=\"0\"] circle');
                 c.scrollIntoView({block: 'center'});
                 const r = c.getBoundingClientRect();
                 return [r.x + r.width / 2, r.y + r.height / 2]; })()",
    );
    b.hover(at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
    let tip = b.eval(
        "(() => { const t = document.querySelector('#fig-streams .tip');
                 return t.hidden ? null : Array.from(t.children).map(e => e.textContent); })()",
    );
    let lines: Vec<&str> = tip
        .as_array()
        .unwrap_or_else(|| panic!("no tip shown: {tip}"))
        .iter()
        .filter_map(Value::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    let label = lines[0];
    assert!(PATHS.contains(&label), "{lines:?}");
    assert_eq!(lines[1], "Parallel TCP streams (-P): 1", "{lines:?}");
    assert!(lines.contains(&"n = 2 runs"), "{lines:?}");
    // The value, in the axis's unit, is the table's mean for that path at P=1.
    let (value, unit) = lines[2].split_once(' ').unwrap();
    let factor = match unit {
        "Gbit/s" => 1e9,
        "Mbit/s" => 1e6,
        "kbit/s" => 1e3,
        other => panic!("unit {other}"),
    };
    let shown: f64 = value.replace(',', "").parse::<f64>().unwrap() * factor;
    let mean = doc["throughput"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["label"] == label && r["cell_name"] == "P=1")
        .unwrap()["bits_per_second"]["mean"]
        .as_f64()
        .unwrap();
    assert!(
        (shown / mean - 1.0).abs() < 0.006,
        "{shown} vs {mean}: {lines:?}"
    );

    // The same figures by keyboard: the plot takes focus and the arrows step through points.
    b.eval("document.querySelector('#fig-udp .plot').focus()");
    b.key("ArrowRight");
    let tip = b.eval("document.querySelector('#fig-udp .tip').hidden");
    assert_eq!(tip, false);
    b.key("Escape");
}

/// A path hidden by a click on its key button, brought back with the keyboard.
fn toggle_a_path(b: &mut Browser) {
    let at = b.eval(
        "(() => { const k = document.querySelector('#fig-latency .key .k[data-s=\"1\"]');
                 k.scrollIntoView({block: 'center'});
                 const r = k.getBoundingClientRect();
                 return [r.x + r.width / 2, r.y + r.height / 2]; })()",
    );
    b.click(at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
    let state = "(() => { const k = document.querySelector('#fig-latency .key .k[data-s=\"1\"]');
        const gs = Array.from(document.querySelectorAll('#fig-latency svg.v-wide g.s[data-s=\"1\"]'));
        return [k.getAttribute('aria-pressed'), gs.map(g => getComputedStyle(g).display)]; })()";
    let s = b.eval(state);
    assert_eq!(s[0], "false", "{s}");
    assert!(s[1].as_array().unwrap().iter().all(|d| d == "none"), "{s}");
    b.eval("document.querySelector('#fig-latency .key .k[data-s=\"1\"]').focus()");
    b.key("Enter");
    let s = b.eval(state);
    assert_eq!(s[0], "true", "{s}");
    assert!(s[1].as_array().unwrap().iter().all(|d| d != "none"), "{s}");
}

/// A click on a column heading sorts the rows by that column's figures.
fn sort_a_table(b: &mut Browser) {
    let at = b.eval(
        "(() => { const th = Array.from(document.querySelectorAll('#tcp-table th')).find(t => t.textContent.startsWith('mean'));
                 th.scrollIntoView({block: 'center'});
                 const r = th.querySelector('button').getBoundingClientRect();
                 return [r.x + r.width / 2, r.y + r.height / 2, th.cellIndex]; })()",
    );
    b.click(at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
    let col = at[2].as_u64().unwrap();
    let v = b.eval(&format!(
        "Array.from(document.querySelectorAll('#tcp-table tbody tr')).map(tr => Number(tr.cells[{col}].dataset.v))"
    ));
    let v: Vec<f64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "{v:?}");
    let sorted = b.eval(&format!(
        "document.querySelectorAll('#tcp-table th')[{col}].getAttribute('aria-sort')"
    ));
    assert_eq!(sorted, "ascending");
}

/// At a phone's width: the phone layout of every chart, and nothing wider than the screen
/// (tables scroll inside their box).
fn phone_checks(b: &mut Browser) {
    let r = b.eval(
        "({scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
           narrow: Array.from(document.querySelectorAll('svg.v-narrow')).every(s => s.getBoundingClientRect().width > 0),
           wide: Array.from(document.querySelectorAll('svg.v-wide')).every(s => s.getBoundingClientRect().width === 0)})",
    );
    assert_eq!(r["narrow"], true, "{r}");
    assert_eq!(r["wide"], true, "{r}");
    assert!(
        r["scroll"].as_f64().unwrap() <= r["inner"].as_f64().unwrap(),
        "{r}"
    );
}

/// A screenshot of the whole page, a PNG as wide as the window; kept in
/// `$XBENCH_SCREENSHOTS` when that names a directory.
fn shot(b: &mut Browser, name: &str, width: u32) {
    let png = b.screenshot();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is not a PNG");
    // IHDR: width at bytes 16..20, big-endian.
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(w, width, "{name}");
    if let Some(dir) = std::env::var_os("XBENCH_SCREENSHOTS") {
        std::fs::write(Path::new(&dir).join(name), &png).unwrap();
    }
}
