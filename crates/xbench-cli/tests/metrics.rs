//! `xbench server --metrics ADDR:PORT`: the counters scraped during a test and after it agree
//! with the test's own figures (bytes the server received, datagrams it sent), refusals and
//! failed handshakes are counted by reason, `--allow` keeps other scrapers out, and every
//! scrape passes a strict check of the exposition format (OpenMetrics 1.0 when asked for,
//! Prometheus text 0.0.4 otherwise).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{ServerProc, xbench};

/// A server with its metrics endpoint on a port of its own: the process and the endpoint's
/// `host:port`.
fn start(extra: &[&str]) -> (ServerProc, String) {
    let mut server = ServerProc::start(&[&["--metrics", "127.0.0.1:0"][..], extra].concat());
    let metrics = server
        .wait_for("metrics at http://", Duration::from_secs(30))
        .expect("the server logs its metrics address");
    let metrics = metrics.trim().strip_suffix("/metrics").unwrap().to_owned();
    (server, metrics)
}

/// One HTTP request to the metrics endpoint: (status line, headers, body); an empty status
/// when the server closed without answering, whether before or after the request went.
fn get(addr: &str, path: &str, accept: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // A server that refuses the peer closes at once, before or while the request goes: the
    // write then fails (EPIPE, reset), and the answer is the empty one, as when it closes
    // after reading (fresh-clone CI saw the broken pipe).
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0,text/plain;q=0.5";

/// A scrape in OpenMetrics, checked strictly, as (sample name, sorted labels) → value.
fn scrape(addr: &str) -> BTreeMap<(String, String), f64> {
    let (status, headers, body) = get(addr, "/metrics", OPENMETRICS);
    assert_eq!(status, "HTTP/1.1 200 OK", "{headers}\n{body}");
    assert!(
        headers
            .contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{headers}"
    );
    check_exposition(&body, true)
}

fn value(m: &BTreeMap<(String, String), f64>, name: &str, labels: &str) -> f64 {
    m.get(&(name.to_owned(), labels.to_owned()))
        .copied()
        .unwrap_or(0.0)
}

#[test]
fn metrics_agree_with_the_tests_own_figures() {
    let (server, metrics) = start(&["--max-streams", "8"]);
    let addr = metrics.clone();
    let before = scrape(&addr);
    assert_eq!(
        value(&before, "xbench_tests_active", "protocol=\"xbench\""),
        0.0
    );

    // A paced TCP test, scraped while it runs.
    let client = xbench()
        .args(["client", "127.0.0.1", "-p", &server.port.to_string()])
        // Long enough that a scrape every 50 ms sees it running even on a loaded machine.
        .args(["-t", "5", "-b", "100M", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tcp_rx = "direction=\"received\",protocol=\"xbench\",transport=\"tcp\"";
    let until = Instant::now() + Duration::from_secs(60);
    let during = loop {
        let m = scrape(&addr);
        if value(&m, "xbench_tests_active", "protocol=\"xbench\"") == 1.0
            && value(&m, "xbench_data_bytes_total", tcp_rx) > 0.0
        {
            break m;
        }
        assert!(Instant::now() < until, "no running test seen: {m:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = client.wait_with_output().unwrap();
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let up = &report["summary"]["directions"][0];
    // Everything the server read: inside the window and after it (no -O here).
    let received =
        up["receiver"]["bytes"].as_u64().unwrap() + up["after_end"]["bytes"].as_u64().unwrap();
    let so_far = value(&during, "xbench_data_bytes_total", tcp_rx);
    assert!(
        // A scrape in the drain after the last byte may see all of it already.
        so_far > 0.0 && so_far <= received as f64,
        "{so_far} of {received}"
    );
    assert_eq!(
        value(
            &during,
            "xbench_tests_started_total",
            "kind=\"tcp\",protocol=\"xbench\""
        ),
        1.0
    );

    // A UDP test the server sends, then a refused one and a connection that says nothing
    // xbench understands.
    let out = xbench()
        .args(["client", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-u", "-b", "20M", "-t", "1", "-R", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let udp: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sent = &udp["udp"]["directions"][0]["figures"]["sent"];
    let refused = xbench()
        .args([
            "client",
            "127.0.0.1",
            "-p",
            &server.port.to_string(),
            "-P",
            "9",
            "-t",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let mut garbage = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let _ = garbage.read(&mut [0u8; 64]);

    let until = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let m = scrape(&addr);
        if value(&m, "xbench_handshakes_failed_total", "reason=\"garbage\"") >= 1.0
            && value(&m, "xbench_tests_active", "protocol=\"xbench\"") == 0.0
        {
            break m;
        }
        assert!(Instant::now() < until, "{m:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        value(&after, "xbench_data_bytes_total", tcp_rx),
        received as f64
    );
    let udp_tx = "direction=\"sent\",protocol=\"xbench\"";
    assert_eq!(
        value(&after, "xbench_datagrams_total", udp_tx),
        sent["datagrams"].as_u64().unwrap() as f64
    );
    assert_eq!(
        value(
            &after,
            "xbench_data_bytes_total",
            "direction=\"sent\",protocol=\"xbench\",transport=\"udp\""
        ),
        sent["bytes"].as_u64().unwrap() as f64
    );
    for kind in ["tcp", "udp"] {
        assert_eq!(
            value(
                &after,
                "xbench_tests_finished_total",
                &format!("kind=\"{kind}\",outcome=\"completed\",protocol=\"xbench\"")
            ),
            1.0,
            "{after:?}"
        );
    }
    assert_eq!(
        value(&after, "xbench_tests_refused_total", "reason=\"limit\""),
        1.0
    );
    assert!(value(&after, "xbench_cpu_seconds_total", "mode=\"system\"") > 0.0);

    // Prometheus' own format when OpenMetrics is not asked for, and only /metrics.
    let (status, headers, body) = get(&addr, "/metrics", "text/plain");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains("Content-Type: text/plain; version=0.0.4"),
        "{headers}"
    );
    check_exposition(&body, false);
    assert_eq!(get(&addr, "/", "*/*").0, "HTTP/1.1 404 Not Found");
}

/// A connection the handshake budget turns away (`--max-handshakes`, one address's share, the
/// descriptor pool: `budget::Busy`) is a failed handshake, reason `busy`.
#[test]
fn a_connection_the_handshake_budget_refuses_counts_as_busy() {
    let (server, metrics) = start(&["--max-handshakes", "1", "--max-flows", "1"]);
    let target = format!("127.0.0.1:{}", server.port);
    // Silent, so it holds the one slot for the handshake timeout (10 s); the second finds
    // none.
    let _holder = TcpStream::connect(&target).unwrap();
    let mut refused = TcpStream::connect(&target).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // The server closes it (a control connection would be told it is busy first).
    let _ = refused.read_to_end(&mut Vec::new());
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let m = scrape(&metrics);
        let busy = value(&m, "xbench_handshakes_failed_total", "reason=\"busy\"");
        if busy >= 1.0 {
            break;
        }
        assert!(Instant::now() < until, "no busy handshake counted: {m:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_are_closed_to_clients_outside_allow() {
    let (_server, metrics) = start(&["--allow", "10.0.0.0/8"]);
    let (status, _, body) = get(&metrics, "/metrics", OPENMETRICS);
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("", ""),
        "answered outside --allow"
    );
}

/// Checks `text` against the exposition format, strictly, and returns its samples as
/// (name, labels sorted and joined) → value.
///
/// OpenMetrics 1.0 (`openmetrics`): metadata before samples, families not interleaved or
/// repeated, a counter's samples named `<family>_total`, a unit line only as the family
/// name's suffix, label names and values well formed and escaped, no sample twice, counters
/// finite and not negative, `# EOF` last. Prometheus 0.0.4: the same, with a counter's
/// `# TYPE` naming its `_total` samples and no `# EOF`.
fn check_exposition(text: &str, openmetrics: bool) -> BTreeMap<(String, String), f64> {
    let name_ok = |n: &str| {
        let mut c = n.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
    };
    assert!(text.ends_with('\n'), "no final newline");
    let mut lines: Vec<&str> = text.lines().collect();
    if openmetrics {
        assert_eq!(lines.pop(), Some("# EOF"), "OpenMetrics ends with # EOF");
        assert!(!lines.contains(&"# EOF"), "# EOF before the end");
    } else {
        assert!(!text.contains("# EOF"));
    }
    let mut families: BTreeSet<String> = BTreeSet::new();
    let mut family: Option<(String, String)> = None;
    let mut samples_started = false;
    let mut out = BTreeMap::new();
    for line in lines {
        assert!(!line.is_empty(), "an empty line");
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (kw, name, rest) = (
                parts.next().unwrap(),
                parts.next().expect("a metadata line names its family"),
                parts.next().unwrap_or(""),
            );
            assert!(name_ok(name), "bad family name in {line}");
            match kw {
                "TYPE" => {
                    assert!(
                        [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "info",
                            "stateset",
                            "unknown",
                            "gaugehistogram"
                        ]
                        .contains(&rest),
                        "{line}"
                    );
                    assert!(families.insert(name.to_owned()), "family {name} twice");
                    if openmetrics && rest == "counter" {
                        assert!(
                            !name.ends_with("_total"),
                            "OpenMetrics counter family {name}"
                        );
                    }
                    if !openmetrics && rest == "counter" {
                        assert!(name.ends_with("_total"), "0.0.4 counter {name}");
                    }
                    family = Some((name.to_owned(), rest.to_owned()));
                    samples_started = false;
                }
                "HELP" | "UNIT" => {
                    let (f, _) = family.as_ref().expect("HELP/UNIT after TYPE");
                    assert_eq!(f, name, "{line} outside its family");
                    assert!(!samples_started, "{line} after the family's samples");
                    if kw == "UNIT" {
                        assert!(openmetrics, "UNIT is OpenMetrics only");
                        assert!(
                            name.ends_with(&format!("_{rest}")),
                            "{line}: unit not a suffix"
                        );
                    }
                }
                _ => panic!("unknown metadata line {line}"),
            }
            continue;
        }
        assert!(!line.starts_with('#'), "a comment: {line}");
        let (f, kind) = family.as_ref().expect("a sample before any # TYPE");
        samples_started = true;
        let (name, rest) = line.split_at(line.find(['{', ' ']).expect("sample value"));
        let want = if openmetrics && kind == "counter" {
            format!("{f}_total")
        } else {
            f.clone()
        };
        assert_eq!(name, want, "sample {name} in family {f}");
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => {
                let end = r.find("} ").expect("labels end with } and a space");
                (parse_labels(&r[..end], line), &r[end + 2..])
            }
            None => (BTreeMap::new(), &rest[1..]),
        };
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        if kind == "counter" {
            assert!(v.is_finite() && v >= 0.0, "counter {line}");
        }
        let key = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join(",");
        assert!(
            out.insert((name.to_owned(), key), v).is_none(),
            "{line} twice"
        );
    }
    out
}

fn parse_labels(s: &str, line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest
            .find("=\"")
            .unwrap_or_else(|| panic!("label in {line}"));
        let name = &rest[..eq];
        assert!(
            name.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "label name {name} in {line}"
        );
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let end = loop {
            let (i, c) = chars
                .next()
                .unwrap_or_else(|| panic!("unterminated label in {line}"));
            match c {
                '\\' => match chars.next().map(|x| x.1) {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    other => panic!("bad escape {other:?} in {line}"),
                },
                '"' => break eq + 2 + i + 1,
                '\n' => panic!("raw newline in {line}"),
                c => value.push(c),
            }
        };
        assert!(
            out.insert(name.to_owned(), value).is_none(),
            "label {name} twice in {line}"
        );
        rest = &rest[end..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    out
}
