//! Request/response flows against what limits them between client and server, each in a
//! network namespace of its own:
//! - the 4-tuple: the namespace's ephemeral port range (per namespace) narrowed to 60 ports,
//!   some of them reserved: more flows than the local addresses hold are refused before
//!   anything is opened, naming the numbers, and another local address (`-B a,b`) carries
//!   them. The 65,536-flow planning itself is checked by the library's unit tests
//!   (`client::flow_plan`); this machine's open-file limit would not run it.
//! - a firewall's connection limit (iptables `connlimit`, as a NAT gateway's or a load
//!   balancer's per-source limit): the flows past it are refused or time out, `--connections-only`
//!   counts them by kind, fails without `--allow-partial-flows` and holds the rest with it.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion
#![allow(clippy::print_stderr)] // a skipped test and the run time, for the test log

mod common;

use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use common::{Netns, ServerProc, root_or_skip};

/// `iptables` in `ns`, which must succeed.
fn iptables(ns: &Netns, rule: &[&str]) {
    let mut argv = vec!["iptables"];
    argv.extend_from_slice(rule);
    ns.run(&argv);
}

/// False (after saying why) where `iptables` is not installed; under `CI=true` a panic.
fn iptables_or_skip(test: &str) -> bool {
    let found = Command::new("iptables")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{test} needs iptables (apt-get install iptables) and CI=true forbids skipping it"
    );
    eprintln!("skipping {test}: needs iptables");
    false
}

#[test]
fn root_netns_flows_beyond_one_address_ports_are_refused_and_a_second_address_carries_them() {
    let test =
        "root_netns_flows_beyond_one_address_ports_are_refused_and_a_second_address_carries_them";
    if !root_or_skip(test) {
        return;
    }
    let started = Instant::now();
    let ns = Netns::new("xbflows");
    ns.run(&["sysctl", "-qw", "net.ipv4.ip_local_port_range=61000 61059"]);
    let _server = ServerProc::spawn(
        ns.command(env!("CARGO_BIN_EXE_xbench")),
        &["server", "-B", "127.0.0.1", "-p", "5201"],
        &[],
    );
    let xbench = env!("CARGO_BIN_EXE_xbench");
    let client = |extra: &[&str]| {
        ns.command(xbench)
            .args([
                "client",
                "127.0.0.1",
                "-p",
                "5201",
                "--rr",
                "--flows",
                "100",
            ])
            .args(["-t", "1", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };

    // One local address: 60 ports, one of them the control connection's.
    let out = client(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for part in [
        "--flows 100 do not fit",
        "(local address, local port, server address, server port)",
        "1 local address × 60 ephemeral ports (61000–61059",
        "at most 59 flows",
        "Give -B 2 local addresses",
        "net.ipv4.ip_local_port_range",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    assert!(out.stdout.is_empty(), "refused before starting");

    // Two: 50 flows each, every one connected.
    let out = client(&["-B", "127.0.0.1,127.0.0.2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let setup = &doc["rr"]["setup"];
    assert_eq!(setup["requested"], 100, "{setup}");
    assert_eq!(setup["connected"], 100, "{setup}");
    assert!(setup["per_second"].as_f64().unwrap() > 0.0, "{setup}");
    assert_eq!(doc["rr"]["flows"].as_array().unwrap().len(), 100);
    assert!(doc["rr"]["summary"]["transactions"].as_u64().unwrap() > 0);

    // Ports reserved inside the range (ip_local_reserved_ports) hold no flow: with 10 of the
    // 60 reserved, two addresses hold 99 flows, not 119, and the same test is refused.
    ns.run(&[
        "sysctl",
        "-qw",
        "net.ipv4.ip_local_reserved_ports=61000-61004,61050,61055-61058,80",
    ]);
    let out = client(&["-B", "127.0.0.1,127.0.0.2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for part in [
        "--flows 100 do not fit",
        "2 local addresses × 50 ephemeral ports (61000–61059",
        "less 10 reserved in /proc/sys/net/ipv4/ip_local_reserved_ports",
        "at most 99 flows",
        "Give -B 3 local addresses",
        "reserve fewer of its ports",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
    assert!(out.stdout.is_empty(), "refused before starting");
    eprintln!("{test}: {:.1} s", started.elapsed().as_secs_f64());
}

/// A firewall in front of the server that takes at most `LIMIT` connections from one source
/// (iptables `connlimit`, the shape of a NAT gateway's or a load balancer's connection limit)
/// and refuses the rest with a reset: `--connections-only` with 40 held flows over two local
/// addresses, the limited one carrying 20 of them (flows alternate, the control connections
/// and the openers use the first, unlimited one). Without `--allow-partial-flows` the test
/// fails (exit 1) once every connection has been tried, naming 12 refused of 40; with it, the
/// 28 that opened are held, counted in `rr.setup`, and the test measures new connections.
/// `--rr` runs the 28 the same way; a firewall that drops shows them as timed out.
#[test]
fn root_netns_a_connection_limit_refuses_flows_counted_by_kind_held_with_allow_partial() {
    let test =
        "root_netns_a_connection_limit_refuses_flows_counted_by_kind_held_with_allow_partial";
    if !root_or_skip(test) || !iptables_or_skip(test) {
        return;
    }
    const LIMIT: &str = "8";
    let started = Instant::now();
    let ns = Netns::new("xbconnlimit");
    let limit = |target: &[&'static str]| -> Vec<&'static str> {
        let mut rule = vec![
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--syn",
            "--dport",
            "5201",
            "-s",
            "127.0.0.2",
            "-m",
            "connlimit",
            "--connlimit-above",
            LIMIT,
            "--connlimit-mask",
            "32",
            "-j",
        ];
        rule.extend_from_slice(target);
        rule
    };
    iptables(&ns, &limit(&["REJECT", "--reject-with", "tcp-reset"]));
    let _server = ServerProc::spawn(
        ns.command(env!("CARGO_BIN_EXE_xbench")),
        &["server", "-B", "127.0.0.1", "-p", "5201"],
        &[],
    );
    let xbench = env!("CARGO_BIN_EXE_xbench");
    let client = |extra: &[&str]| {
        ns.command(xbench)
            .args([
                "client",
                "127.0.0.1",
                "-p",
                "5201",
                "-B",
                "127.0.0.1,127.0.0.2",
            ])
            .args(["--connections-only", "--flows", "40", "--openers", "2"])
            .args(["-t", "1", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };

    let out = client(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("only 28 of 40 data connections to 127.0.0.1:5201 opened: 12 refused or reset, 0 timed out, 0 failed otherwise"),
        "{err}"
    );

    let out = client(&["--allow-partial-flows"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rr = &doc["rr"];
    let setup = &rr["setup"];
    for (field, want) in [
        ("requested", 40),
        ("connected", 28),
        ("refused", 12),
        ("timed_out", 0),
        ("failed", 0),
    ] {
        assert_eq!(setup[field], want, "{field}: {setup}");
    }
    assert!(setup["per_second"].as_f64().unwrap() > 0.0, "{setup}");
    let held = &rr["held"];
    assert_eq!(held["held"], 28, "{held}");
    assert_eq!(held["open_at_end"], 28, "{held}");
    let warned = doc["warnings"].as_array().unwrap().iter().any(|w| {
        w.as_str()
            .unwrap()
            .contains("12 of 40 flows to hold did not open (12 refused or reset")
    });
    assert!(warned, "{}", doc["warnings"]);
    // The new connections come from the unlimited address and are not held back.
    assert!(rr["summary"]["transactions"].as_u64().unwrap() > 0);
    // In text, the first line says what is held and why not all.
    let out = ns
        .command(xbench)
        .args([
            "client",
            "127.0.0.1",
            "-p",
            "5201",
            "-B",
            "127.0.0.1,127.0.0.2",
        ])
        .args([
            "--connections-only",
            "--flows",
            "40",
            "--openers",
            "2",
            "-t",
            "0.5",
        ])
        .arg("--allow-partial-flows")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "Test: connection rate, 28 flows held open (of 40 asked: the rest did not open)"
        ),
        "{text}"
    );
    assert!(text.contains("held: 28 flows connected in"), "{text}");
    assert!(text.contains("12 refused, 0 timed out"), "{text}");

    // --rr the same: the 28 flows that opened are measured, the 12 others counted.
    let out = ns
        .command(xbench)
        .args([
            "client",
            "127.0.0.1",
            "-p",
            "5201",
            "-B",
            "127.0.0.1,127.0.0.2",
        ])
        .args(["--rr", "--flows", "40", "-t", "1", "--json"])
        .arg("--allow-partial-flows")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let setup = &doc["rr"]["setup"];
    for (field, want) in [("requested", 40), ("connected", 28), ("refused", 12)] {
        assert_eq!(setup[field], want, "{field}: {setup}");
    }
    let ran = doc["rr"]["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["transactions"].as_u64().unwrap() > 0)
        .count();
    assert_eq!(ran, 28, "{}", doc["rr"]["flows"]);

    // A firewall that drops instead: the same flows time out (--connect-timeout), by kind.
    iptables(&ns, &["-F", "INPUT"]);
    iptables(&ns, &limit(&["DROP"]));
    let out = client(&["--allow-partial-flows", "--connect-timeout", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let setup = &doc["rr"]["setup"];
    for (field, want) in [("connected", 28), ("refused", 0), ("timed_out", 12)] {
        assert_eq!(setup[field], want, "{field}: {setup}");
    }
    eprintln!("{test}: {:.1} s", started.elapsed().as_secs_f64());
}

/// `--connections-only` against a firewall that turns away a share of the *new* connections
/// (iptables `statistic --mode nth`): its openers count each failed attempt by kind and go on
/// opening, and the counts match the share the firewall took. Only data connections carry
/// `-M 1000` as their SYN's MSS, so `-m tcpmss` leaves the control connections alone; the
/// held flows' SYNs come first through the same counter.
/// - a connection-count limit (`connlimit` above the held flows): no new connection opens,
///   every attempt is refused, the back-off keeps them few, and the test fails (exit 1);
/// - every 4th SYN answered by a reset: of the 8 held flows 2 are refused (held 6 with
///   `--allow-partial-flows`), and a quarter of the new connections are refused;
/// - every 5th SYN dropped: 2 held flows and a fifth of the new connections time out after
///   `--connect-timeout 0.5`;
/// - every 3rd opener's first segment (greeting and request, a length no other packet has)
///   answered by a reset: a third are reset before their answer.
///
/// Each time `opened + refused + timed_out + reset == attempts`, the attempts equal the
/// connections the openers started (counted apart), the test completes (exit 0) with a
/// warning, and only opened connections are transactions.
#[test]
fn root_netns_openers_count_refused_timed_out_and_reset_connections_and_go_on() {
    let test = "root_netns_openers_count_refused_timed_out_and_reset_connections_and_go_on";
    if !root_or_skip(test) || !iptables_or_skip(test) {
        return;
    }
    let started = Instant::now();
    let ns = Netns::new("xbopeners");
    let _server = ServerProc::spawn(
        ns.command(env!("CARGO_BIN_EXE_xbench")),
        &["server", "-B", "127.0.0.1", "-p", "5201"],
        &[],
    );
    let xbench = env!("CARGO_BIN_EXE_xbench");
    let client = |extra: &[&str]| {
        ns.command(xbench)
            .args(["client", "127.0.0.1", "-p", "5201", "-M", "1000"])
            .args(["--connections-only", "--flows", "8", "--openers", "2"])
            .args(["--allow-partial-flows", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let data_syn = |then: &[&'static str]| -> Vec<&'static str> {
        let mut rule = vec![
            "-A", "INPUT", "-p", "tcp", "--syn", "--dport", "5201", "-m", "tcpmss", "--mss", "1000",
        ];
        rule.extend_from_slice(then);
        rule
    };
    let nth = |n: &'static str, target: &[&'static str]| -> Vec<&'static str> {
        let mut then = vec![
            "-m",
            "statistic",
            "--mode",
            "nth",
            "--every",
            n,
            "--packet",
            "0",
            "-j",
        ];
        then.extend_from_slice(target);
        then
    };
    let reject = ["REJECT", "--reject-with", "tcp-reset"];
    // The report's attempt counts, checked for what always holds.
    let opening = |doc: &Value| -> [u64; 5] {
        let o = &doc["rr"]["opening"];
        let n = |k: &str| o[k].as_u64().unwrap_or_else(|| panic!("{k} in {o}"));
        let c = [
            n("attempts"),
            n("opened"),
            n("refused"),
            n("timed_out"),
            n("reset"),
        ];
        assert_eq!(c[1] + c[2] + c[3] + c[4], c[0], "{o}");
        let sum = &doc["rr"]["summary"];
        assert_eq!(
            sum["connections"], c[0],
            "every attempt started ended: {sum} {o}"
        );
        assert_eq!(sum["transactions"], c[1], "{sum} {o}");
        let share = o["failed_percent"].as_f64().unwrap();
        assert!(
            (share - (c[0] - c[1]) as f64 * 100.0 / c[0] as f64).abs() < 1e-6,
            "{o}"
        );
        // Each interval counts the attempts that ended in it; together, all of them.
        let ivs = doc["rr"]["intervals"].as_array().unwrap();
        let in_ivs: u64 = ivs
            .iter()
            .map(|iv| iv["attempts"]["attempts"].as_u64().unwrap())
            .sum();
        assert_eq!(in_ivs, c[0], "{o}");
        c
    };

    // A connection-count limit the held flows fill (connlimit counts the connections whose
    // SYN reached it: the 8 held flows): every new connection is refused.
    iptables(
        &ns,
        &data_syn(&[
            "-m",
            "connlimit",
            "--connlimit-above",
            "8",
            "--connlimit-mask",
            "32",
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ]),
    );
    let out = client(&["-t", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let why = doc["outcome"].to_string();
    assert!(why.contains("no new connection opened: "), "{why}");
    let [attempts, opened, refused, ..] = opening(&doc);
    assert_eq!((opened, refused), (0, attempts), "{}", doc["rr"]["opening"]);
    // Two openers backing off to 0.1 s: about 17 attempts each in a second, not thousands.
    assert!((10..=60).contains(&attempts), "{}", doc["rr"]["opening"]);
    assert_eq!(doc["rr"]["held"]["open_at_end"], 8, "{}", doc["rr"]["held"]);

    // Every 4th data SYN refused (the 1st, 5th, 9th…): 2 of the 8 held flows, then a quarter
    // of the openers'.
    iptables(&ns, &["-F", "INPUT"]);
    iptables(&ns, &data_syn(&nth("4", &reject)));
    let out = client(&["-t", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["rr"]["setup"]["refused"], 2, "{}", doc["rr"]["setup"]);
    assert_eq!(doc["rr"]["held"]["open_at_end"], 6, "{}", doc["rr"]["held"]);
    let [attempts, opened, refused, timed_out, reset] = opening(&doc);
    assert!(attempts >= 100, "{}", doc["rr"]["opening"]);
    assert!(
        (refused * 4).abs_diff(attempts) <= 4,
        "a quarter refused: {}",
        doc["rr"]["opening"]
    );
    assert_eq!((timed_out, reset), (0, 0), "{}", doc["rr"]["opening"]);
    // Only the opened ones reached the server.
    let server_conns = doc["rr"]["summary"]["server_connections"].as_u64().unwrap();
    assert_eq!(server_conns, opened, "{}", doc["rr"]["summary"]);
    let warned = doc["warnings"].as_array().unwrap().iter().any(|w| {
        w.as_str()
            .unwrap()
            .contains(&format!("{} of {attempts} new connections failed", refused))
    });
    assert!(warned, "{}", doc["warnings"]);

    // Every 5th data SYN dropped (the 1st, 6th…): 2 held flows, and a fifth of the openers'
    // attempts time out.
    iptables(&ns, &["-F", "INPUT"]);
    iptables(&ns, &data_syn(&nth("5", &["DROP"])));
    let out = client(&["-t", "2", "--connect-timeout", "0.5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["rr"]["setup"]["timed_out"], 2, "{}", doc["rr"]["setup"]);
    let [attempts, _, refused, timed_out, reset] = opening(&doc);
    assert!(attempts >= 10, "{}", doc["rr"]["opening"]);
    assert!(
        (timed_out * 5).abs_diff(attempts) <= 5,
        "a fifth timed out: {}",
        doc["rr"]["opening"]
    );
    assert_eq!((refused, reset), (0, 0), "{}", doc["rr"]["opening"]);
    assert_eq!(doc["rr"]["opening"]["timeout_s"], 0.5);

    // Every 3rd opener's first segment reset: IP 20 + TCP 32 (timestamps) + greeting + the
    // 1-byte request. Paced, so the server's connections left waiting for a greeting are few.
    iptables(&ns, &["-F", "INPUT"]);
    let len = (20 + 32 + xbench::proto::DATA_GREETING_LEN + 1).to_string();
    let mut rule = vec![
        "-A", "INPUT", "-p", "tcp", "--dport", "5201", "-m", "length", "--length", &len,
    ];
    rule.extend(nth("3", &reject));
    iptables(&ns, &rule);
    let out = client(&["-t", "2", "--rate", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let [attempts, _, refused, timed_out, reset] = opening(&doc);
    assert!(attempts >= 200, "{}", doc["rr"]["opening"]);
    assert!(
        (reset * 3).abs_diff(attempts) <= 3,
        "a third reset: {}",
        doc["rr"]["opening"]
    );
    assert_eq!((refused, timed_out), (0, 0), "{}", doc["rr"]["opening"]);
    eprintln!("{test}: {:.1} s", started.elapsed().as_secs_f64());
}
