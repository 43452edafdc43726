//! Root tests of the lab library: building and removing every path kind, and the delay line's
//! accuracy measured end to end with a TCP ping-pong through it. Delay lines run as threads of
//! the test (no `xbench` executable), so these need nothing but root and iproute2 (and
//! OpenVPN + openssl for the vpn path).

// Helpers here run only inside tests: a panic is a failed assertion, and stderr is the
// test's log.
#![allow(clippy::unwrap_used, clippy::print_stderr, unreachable_pub)]

mod common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use xbench_lab::{Impairment, Lab, PathKind, PathSpec, reference};

use common::{netns_with, root_or_skip, serial, spec};

#[test]
fn root_netns_every_path_kind_carries_traffic_and_is_removed() {
    if !root_or_skip("root_netns_every_path_kind_carries_traffic_and_is_removed") {
        return;
    }
    let _s = serial();
    let delayed = Impairment {
        delay: Duration::from_millis(2),
        rate_bps: Some(100_000_000),
        ..Impairment::default()
    };
    let spec = spec(
        "kinds",
        "k",
        vec![
            PathSpec::new(PathKind::Direct),
            PathSpec::new(PathKind::Transit).with(delayed),
            PathSpec::new(PathKind::Vpn).with(delayed),
        ],
    );
    let lab = Lab::up(&spec, &AtomicBool::new(false)).expect("lab up");
    let made = netns_with("xbtk-");
    assert!(made.contains(&"xbtk-c".to_string()), "{made:?}");
    assert!(made.contains(&"xbtk-vpn-gb".to_string()), "{made:?}");
    for p in lab.paths() {
        // `Lab::up` probed each path; echo a few bytes to be sure data flows both ways.
        let rtt = reference::ping_pong(p, 5).unwrap();
        let floor = 2 * p.impairment.delay;
        assert!(rtt[0] >= floor, "{}: {rtt:?}", p.label);
    }
    let t = lab.down();
    assert!(t.problems.is_empty(), "{t:?}");
    assert!(
        netns_with("xbtk-").is_empty(),
        "left behind: {:?}",
        netns_with("xbtk-")
    );
    assert!(
        t.stopped.iter().any(|s| s.starts_with("openvpn")),
        "the VPN daemons were stopped by id: {t:?}"
    );
}

/// Issue 6: "10 ms one-way delay each way: p50 between 20 and 21.5 ms; min ≥ 20 ms". Until
/// `xbench client --rr` exists this measures the same thing with a 1-byte TCP ping-pong.
#[test]
fn root_netns_delay_line_10ms_each_way_gives_20ms_rtt() {
    if !root_or_skip("root_netns_delay_line_10ms_each_way_gives_20ms_rtt") {
        return;
    }
    let _s = serial();
    let spec = spec(
        "rtt",
        "r",
        vec![PathSpec::new(PathKind::Direct).with(Impairment {
            delay: Duration::from_millis(10),
            ..Impairment::default()
        })],
    );
    let lab = Lab::up(&spec, &AtomicBool::new(false)).expect("lab up");
    let p = &lab.paths()[0];
    let mut rtt = reference::ping_pong(p, 300).unwrap();
    rtt.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (min, p50, p99, max) = (
        rtt[0],
        rtt[rtt.len() / 2],
        rtt[rtt.len() * 99 / 100],
        rtt[rtt.len() - 1],
    );
    let stats = lab.delay_line_stats("direct").unwrap();
    eprintln!(
        "ping-pong RTT over 10 ms each way: min {:.3} p50 {:.3} p99 {:.3} max {:.3} ms; \
         delay-line lateness p50 {} µs p99 {} µs max {} µs (realtime {})",
        ms(min),
        ms(p50),
        ms(p99),
        ms(max),
        stats.a_to_b.lateness_ns.p50 / 1000,
        stats.a_to_b.lateness_ns.p99 / 1000,
        stats.a_to_b.lateness_ns.max / 1000,
        stats.realtime
    );
    assert!(min >= Duration::from_millis(20), "min {min:?}");
    assert!(p50 <= Duration::from_micros(21_500), "p50 {p50:?}");
    drop(lab);
    assert!(netns_with("xbtr-").is_empty());
}

#[test]
fn root_netns_a_panic_while_the_lab_is_up_removes_it() {
    if !root_or_skip("root_netns_a_panic_while_the_lab_is_up_removes_it") {
        return;
    }
    let _s = serial();
    let spec = spec(
        "panic",
        "p",
        vec![PathSpec::new(PathKind::Transit).with(Impairment {
            loss: 0.01,
            ..Impairment::default()
        })],
    );
    let dir = spec.state_dir.clone();
    let r = std::panic::catch_unwind(|| {
        let _lab = Lab::up(&spec, &AtomicBool::new(false)).expect("lab up");
        assert!(!netns_with("xbtp-").is_empty());
        panic!("a test failing while its lab is up");
    });
    assert!(r.is_err());
    assert!(netns_with("xbtp-").is_empty(), "{:?}", netns_with("xbtp-"));
    assert!(xbench_lab::state::LabState::load(&dir).unwrap().is_none());
}

#[test]
fn root_netns_cancelling_a_build_removes_what_was_built() {
    if !root_or_skip("root_netns_cancelling_a_build_removes_what_was_built") {
        return;
    }
    let _s = serial();
    let spec = spec("cancel", "x", vec![PathSpec::new(PathKind::Direct)]);
    let e = Lab::up(&spec, &AtomicBool::new(true)).unwrap_err();
    assert!(matches!(e, xbench_lab::LabError::Cancelled), "{e}");
    assert!(netns_with("xbtx-").is_empty(), "{:?}", netns_with("xbtx-"));
}

/// Jitter of ±3 ms on 10 ms each way: every round trip stays within 2 × (10 ± 3) ms plus the
/// line's own sub-millisecond cost, and round trips really vary (a wandering offset, not a
/// constant).
#[test]
fn root_netns_jitter_stays_within_its_bounds_and_varies() {
    if !root_or_skip("root_netns_jitter_stays_within_its_bounds_and_varies") {
        return;
    }
    let _s = serial();
    let spec = spec(
        "jitter",
        "j",
        vec![PathSpec::new(PathKind::Direct).with(Impairment {
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(3),
            ..Impairment::default()
        })],
    );
    let lab = Lab::up(&spec, &AtomicBool::new(false)).expect("lab up");
    let p = &lab.paths()[0];
    let mut rtt = reference::ping_pong(p, 300).unwrap();
    rtt.sort();
    let (lo, hi) = (rtt[0], rtt[rtt.len() - 1]);
    let (p10, p90) = (rtt[rtt.len() / 10], rtt[rtt.len() * 9 / 10]);
    eprintln!("RTT with 10 ± 3 ms each way: min {lo:?} p10 {p10:?} p90 {p90:?} max {hi:?}");
    assert!(
        lo >= Duration::from_millis(14),
        "below 2 × (10 − 3) ms: {lo:?}"
    );
    // The upper bound allows the line's own cost and a scheduling hiccup on a busy machine.
    assert!(
        p90 <= Duration::from_millis(27),
        "p90 above 2 × (10 + 3) ms + 1 ms: {p90:?}"
    );
    assert!(
        p90 - p10 >= Duration::from_millis(2),
        "round trips hardly vary: p10 {p10:?}, p90 {p90:?}"
    );
}
