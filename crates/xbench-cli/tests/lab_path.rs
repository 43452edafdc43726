//! Issue 33 in the lab: the hop view (`--trace`) of paths with 1, 2 and 3 routed hops, with a
//! delay at a known hop and a hop that drops its ICMP; and the path MTU with a smaller MTU in
//! the middle, once with ICMP "fragmentation needed" allowed (TCP finds it, the report states
//! it) and once with it dropped (the report flags the MSS). Each test builds its own lab and
//! removes it; they need root and iptables and run one at a time.

// A panic is a failed assertion; stderr is the test's log.
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    clippy::expect_used,
    unreachable_pub
)]

mod lab_common;

use std::net::IpAddr;
use std::time::Duration;

use xbench::report::{MtuFinding, TestReport, TraceReport};
use xbench_lab::{Impairment, PathInfo, PathKind, PathSpec};

use lab_common::*;

/// The IPv4 addresses of namespace `ns`.
fn addresses(ns: &str) -> Vec<IpAddr> {
    let out = run_in(ns, "ip", &["-o", "-4", "addr", "show"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|x| *x == "inet")?;
            w.get(at + 1)?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// Runs `args` in `ns` and fails the test if it fails.
fn must(ns: &str, args: &[&str]) {
    let out = run_in(ns, args[0], &args[1..]);
    assert!(
        out.status.success(),
        "{args:?} in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn trace_of(r: &TestReport) -> &TraceReport {
    r.trace.as_ref().expect("--trace gives a trace")
}

/// The trace of `p` has exactly its namespaces' hops, in order: each router answers from
/// one of its own addresses, and the server last.
fn assert_hops_in_order(p: &PathInfo, t: &TraceReport, silent: &[usize]) {
    // `netns` lists the path's namespaces client side first, the server last.
    assert_eq!(
        t.destination_ttl,
        Some(p.netns.len() as u8),
        "{p:?}\n{t:#?}"
    );
    assert_eq!(t.routed_hops(), Some(p.netns.len() - 1));
    assert_eq!(t.hops.len(), p.netns.len(), "{t:#?}");
    for (i, (hop, ns)) in t.hops.iter().zip(&p.netns).enumerate() {
        assert_eq!(hop.ttl as usize, i + 1);
        if silent.contains(&i) {
            assert_eq!(hop.address, None, "hop {} of {}: {hop:?}", i + 1, p.label);
            assert_eq!(hop.answered, 0);
            assert!(hop.sent > 0 && hop.loss_percent == 100.0, "{hop:?}");
            continue;
        }
        let ours = addresses(ns);
        let a = hop
            .address
            .unwrap_or_else(|| panic!("hop {} silent: {t:#?}", i + 1));
        assert!(
            ours.contains(&a),
            "hop {} is {a}, not one of {ns}'s {ours:?}",
            i + 1
        );
        assert_eq!(hop.destination, i + 1 == p.netns.len());
        assert!(hop.answered > 0);
    }
}

/// Paths with 1, 2 and 3 routed hops give those hops in order; the delay line's 10 ms each
/// way sits between the WAN namespaces, so every hop after it answers 20 ms later than those
/// before it; and a router that drops its "time exceeded" shows as unanswered while the hops
/// after it still answer.
#[test]
fn root_lab_trace_shows_1_2_3_routed_hops_in_order_with_the_delay_at_its_hop() {
    let name = "root_lab_trace_shows_1_2_3_routed_hops_in_order_with_the_delay_at_its_hop";
    if !root_or_skip(name) || program_or_skip(name, "iptables", "iptables").is_none() {
        return;
    }
    let _s = serial();
    let delayed = Impairment {
        delay: Duration::from_millis(10),
        ..Impairment::default()
    };
    let mut one = PathSpec::new(PathKind::Transit);
    one.label = "one".into();
    let mut two = PathSpec::new(PathKind::Direct).with(delayed);
    two.label = "two".into();
    let mut three = PathSpec::new(PathKind::Transit).with(delayed);
    three.label = "three".into();
    let lab = up(&spec("trace", "xb33t-", vec![one, two, three]));
    let paths = lab.paths();
    // The namespaces each path crosses: transit c→r→s, direct with a WAN c→wa→wb→s,
    // transit with a WAN c→r→wa→wb→s.
    let roles = |p: &PathInfo| -> Vec<String> {
        p.netns
            .iter()
            .map(|n| n.rsplit('-').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(roles(&paths[0]), ["r", "s"]);
    assert_eq!(roles(&paths[1]), ["wa", "wb", "s"]);
    assert_eq!(roles(&paths[2]), ["r", "wa", "wb", "s"]);

    for p in paths {
        let r = xbench_client(p, &["-t", "4", "--trace"]);
        let t = trace_of(&r);
        eprintln!("{}: {t:#?}", p.label);
        assert_hops_in_order(p, t, &[]);
        // Before the delay line every hop answers in well under 10 ms (at least once); from
        // `wb` on, never in less than the 20 ms round trip the line adds.
        for (hop, role) in t.hops.iter().zip(roles(p)) {
            let rtt = hop.rtt.unwrap();
            if p.impairment.delay.is_zero() || role == "r" || role == "wa" {
                assert!(rtt.min_us < 10_000.0, "{} {role}: {rtt:?}", p.label);
            } else {
                assert!(rtt.min_us >= 20_000.0, "{} {role}: {rtt:?}", p.label);
            }
        }
    }

    // `wa` of the 3-hop path stops answering "time exceeded".
    let three = &paths[2];
    let wa = &three.netns[1];
    must(
        wa,
        &[
            "iptables",
            "-A",
            "OUTPUT",
            "-p",
            "icmp",
            "--icmp-type",
            "time-exceeded",
            "-j",
            "DROP",
        ],
    );
    let r = xbench_client(three, &["-t", "4", "--trace"]);
    let t = trace_of(&r);
    eprintln!("with {wa} silent: {t:#?}");
    assert_hops_in_order(three, t, &[1]);
}

/// A 1,400-byte link in the middle of a path: with ICMP "fragmentation needed"
/// allowed TCP finds the smaller path MTU and the report states it; with it dropped at the
/// router (and the client's TCP probing for black holes, `tcp_mtu_probing=1`), the MSS falls
/// below what the path MTU TCP knows allows, and the report flags it.
#[test]
fn root_lab_a_smaller_mtu_in_the_middle_is_found_or_flagged() {
    let name = "root_lab_a_smaller_mtu_in_the_middle_is_found_or_flagged";
    if !root_or_skip(name) || program_or_skip(name, "iptables", "iptables").is_none() {
        return;
    }
    let _s = serial();
    // A rate cap (and nothing else) puts a WAN segment in the path, as a plain veth between
    // two forwarding namespaces: client → wa → wb → server, the 1,400 bytes between wa and wb.
    let capped = PathSpec::new(PathKind::Direct).with(Impairment {
        rate_bps: Some(1_000_000_000),
        ..Impairment::default()
    });
    let lab = up(&spec("mtu", "xb33m-", vec![capped]));
    let p = &lab.paths()[0];
    let (wa, wb) = (&p.netns[0], &p.netns[1]);
    assert!(wa.ends_with("-wa") && wb.ends_with("-wb"), "{:?}", p.netns);
    must(wa, &["ip", "link", "set", "wan", "mtu", "1400"]);
    must(wb, &["ip", "link", "set", "wan", "mtu", "1400"]);

    let found = xbench_client(p, &["-t", "3"]);
    let m = found.hosts.as_ref().unwrap().path_mtu.unwrap();
    eprintln!("ICMP allowed: {m:?}");
    assert_eq!(m.interface_mtu, 1500, "the ends' interfaces keep 1,500");
    assert_eq!(m.pmtu, 1400, "{m:?}");
    assert_eq!(m.finding, MtuFinding::PathMtuFound, "{m:?}");
    assert!(m.to_string().contains("found by TCP on the path"), "{m}");

    // The black hole: the router drops its "fragmentation needed"; the client forgets the
    // path MTU it learned and probes for black holes, as cloud images often configure.
    must(
        wa,
        &[
            "iptables",
            "-A",
            "OUTPUT",
            "-p",
            "icmp",
            "--icmp-type",
            "fragmentation-needed",
            "-j",
            "DROP",
        ],
    );
    must(&p.client_netns, &["ip", "route", "flush", "cache"]);
    must(
        &p.client_netns,
        &["sysctl", "-qw", "net.ipv4.tcp_mtu_probing=1"],
    );
    let hole = xbench_client(p, &["-t", "8"]);
    let m = hole.hosts.as_ref().unwrap().path_mtu.unwrap();
    eprintln!("ICMP dropped: {m:?}");
    assert_eq!(m.pmtu, 1500, "TCP never learned the 1,400: {m:?}");
    assert_eq!(m.finding, MtuFinding::MssBelow, "{m:?}");
    assert!(m.mss <= 1348, "{m:?}");
    assert!(m.to_string().contains("black hole"), "{m}");
}

/// `--trace` is rate-limited so it never disturbs the test: through a routed hop capped at
/// 100 Mbit/s, runs with and without it, interleaved, read the same rate — the medians within
/// the spread of the untraced runs (and at least 2 % of the cap, the run-to-run noise of a
/// tbf cap), and the traced runs' probes answered.
#[test]
fn root_lab_trace_does_not_change_the_rate() {
    let name = "root_lab_trace_does_not_change_the_rate";
    if !root_or_skip(name) {
        return;
    }
    let _s = serial();
    const CAP: u64 = 100_000_000;
    let capped = Impairment {
        rate_bps: Some(CAP),
        ..Impairment::default()
    };
    let mut p = PathSpec::new(PathKind::Transit).with(capped);
    p.label = "capped".into();
    let lab = up(&spec("trace-rate", "xb33r-", vec![p]));
    let path = &lab.paths()[0];
    let rate = |r: &TestReport| {
        let d = &r.summary.directions[0];
        d.receiver.expect("the receiver's figure").bits_per_second
    };
    let (mut plain, mut traced) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        plain.push(rate(&xbench_client(path, &["-t", "3", "-O", "1"])));
        let r = xbench_client(path, &["-t", "3", "-O", "1", "--trace"]);
        let t = trace_of(&r);
        assert!(t.hops.iter().any(|h| h.answered > 0), "{t:#?}");
        traced.push(rate(&r));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let spread = plain.iter().copied().fold(f64::MIN, f64::max)
        - plain.iter().copied().fold(f64::MAX, f64::min);
    let (m_plain, m_traced) = (median(&mut plain), median(&mut traced));
    eprintln!("without --trace {plain:?}, with {traced:?} bit/s");
    let allowed = spread.max(CAP as f64 * 0.02);
    assert!(
        (m_plain - m_traced).abs() <= allowed,
        "median {m_traced} with --trace against {m_plain} without; allowed {allowed}"
    );
}
