//! Issue 31 in the lab: each cause of a rate put in place on an emulated path, and the
//! diagnosis names exactly that cause. A tbf cap with a short queue (losses), the same cap with
//! a deep queue (the path's queue), `-b` pacing over a 40 ms path, a 256 KiB window over it
//! (the receive window), and a 128 KiB send buffer over it (the client namespace's
//! `net.ipv4.tcp_wmem`). CUBIC throughout, so that the kernel's congestion control is the same
//! wherever CI runs. The verdict is checked, not a rate.
//!
//! They need root (CI runs them as root; with CI=true a missing privilege fails, never skips)
//! and run one at a time with the other lab tests.

#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    clippy::expect_used,
    unreachable_pub
)]

mod lab_common;

use std::time::Duration;

use xbench::diagnosis::rules::SNDBUF_CEILING_OVER;
use xbench::diagnosis::{Confidence, Diagnosis, FigureName, Verdict};
use xbench_lab::{Impairment, Lab, PathKind, PathSpec};

use lab_common::*;

/// A one-path lab of `impairment`.
fn lab(test: &str, prefix: &str, impairment: Impairment) -> Lab {
    up(&spec(
        test,
        prefix,
        vec![PathSpec::new(PathKind::Direct).with(impairment)],
    ))
}

/// 40 ms round trip, capped at 500 Mbit/s so the userspace delay line is never the bottleneck.
fn delay_path() -> Impairment {
    Impairment {
        rate_bps: Some(500_000_000),
        delay: Duration::from_millis(20),
        ..Impairment::default()
    }
}

/// The diagnosis of a CUBIC test over the lab's path, logged.
fn diagnose(lab: &Lab, args: &[&str]) -> Diagnosis {
    let mut all = vec!["-t", "4", "-O", "1", "-C", "cubic"];
    all.extend(args);
    let r = xbench_client(&lab.paths()[0], &all);
    let d = &r.summary.directions[0];
    let diagnosis = d.diagnosis.clone().expect("a TCP direction is diagnosed");
    eprintln!(
        "{args:?}: {:.1} Mbit/s → {:?} ({:?}); {:?}; cannot tell {:?}",
        d.receiver.unwrap().bits_per_second / 1e6,
        diagnosis.verdict,
        diagnosis.confidence,
        diagnosis
            .figures
            .iter()
            .map(|f| format!("{:?} {:.1}", f.name, f.value))
            .collect::<Vec<_>>(),
        diagnosis.cannot_tell
    );
    diagnosis
}

#[track_caller]
fn assert_verdict(d: &Diagnosis, verdict: Verdict) {
    assert_eq!(d.verdict, verdict, "{d:#?}");
    assert_eq!(d.confidence, Some(Confidence::Clear), "{d:#?}");
}

/// 50 Mbit/s tbf with a 15 KB queue (2.4 ms): bursts are dropped, CUBIC retransmits and
/// halves its window. A slow cap keeps a loaded machine's late wake-ups from draining the
/// sender's socket (at 200 Mbit/s under two busy loops the sender sat idle 47 % of the time).
#[test]
fn root_lab_diagnosis_a_short_queue_is_network_loss() {
    if !root_or_skip("root_lab_diagnosis_a_short_queue_is_network_loss") {
        return;
    }
    let _s = serial();
    let lab = lab(
        "diag-short",
        "xbdshort-",
        Impairment {
            rate_bps: Some(50_000_000),
            queue_bytes: Some(15_000),
            ..Impairment::default()
        },
    );
    assert_verdict(&diagnose(&lab, &[]), Verdict::NetworkLoss);
}

/// 100 Mbit/s tbf with an 8 MB queue (640 ms of it): CUBIC fills it. Measured: 93 Mbit/s, RTT
/// 169 ms under load against 6 µs unloaded.
#[test]
fn root_lab_diagnosis_a_deep_queue_is_the_paths_queue() {
    if !root_or_skip("root_lab_diagnosis_a_deep_queue_is_the_paths_queue") {
        return;
    }
    let _s = serial();
    let lab = lab(
        "diag-deep",
        "xbddeep-",
        Impairment {
            rate_bps: Some(100_000_000),
            queue_bytes: Some(8_000_000),
            ..Impairment::default()
        },
    );
    assert_verdict(&diagnose(&lab, &[]), Verdict::PathQueue);
}

/// `-b 50M` over 40 ms with room for 500 Mbit/s: the asked rate. Measured: 48.5 Mbit/s.
#[test]
fn root_lab_diagnosis_pacing_is_the_pacing() {
    if !root_or_skip("root_lab_diagnosis_pacing_is_the_pacing") {
        return;
    }
    let _s = serial();
    let lab = lab("diag-pacing", "xbdpace-", delay_path());
    assert_verdict(&diagnose(&lab, &["-b", "50M"]), Verdict::Pacing);
}

/// `-w 256K` over 40 ms: the window full at window ÷ RTT, the server's queue empty.
/// Measured: 50–60 Mbit/s at 96–100 % of the ceiling.
#[test]
fn root_lab_diagnosis_a_small_window_is_the_receive_window() {
    if !root_or_skip("root_lab_diagnosis_a_small_window_is_the_receive_window") {
        return;
    }
    let _s = serial();
    let lab = lab("diag-window", "xbdwin-", delay_path());
    assert_verdict(&diagnose(&lab, &["-w", "256K"]), Verdict::ReceiveWindow);
}

/// The client namespace's send buffers capped at 128 KiB (`net.ipv4.tcp_wmem`), over 40 ms:
/// 128 KiB ÷ 40 ms = 26 Mbit/s. The kernel's own `sndbuf_limited` reads about 0 under CUBIC;
/// the diagnosis names the buffer from its ceiling, TCP's empty queue and the blocked thread.
///
/// Linux 6.18 does not always keep the cap: about one connection in five (a non-blocking
/// `connect`, Python's as well as ours; never iperf3's in 26 runs) had 2.3 MB in flight behind
/// the 128 KiB buffer and ran at 200 Mbit/s. The buffer then did not hold the rate, and the
/// diagnosis must not say it did: the test checks that instead.
#[test]
fn root_lab_diagnosis_a_small_send_buffer_is_the_send_buffer() {
    if !root_or_skip("root_lab_diagnosis_a_small_send_buffer_is_the_send_buffer") {
        return;
    }
    let _s = serial();
    let lab = lab("diag-sndbuf", "xbdsnd-", delay_path());
    let ns = &lab.paths()[0].client_netns;
    let out = run_in(ns, "sysctl", &["-w", "net.ipv4.tcp_wmem=4096 16384 131072"]);
    assert!(out.status.success(), "{out:?}");
    let d = diagnose(&lab, &[]);
    let rate = d
        .figures
        .iter()
        .find(|f| f.name == FigureName::Rate)
        .expect("the rate is a figure")
        .value;
    // The buffer's ceiling at the path's base RTT; a queue only lowers it.
    let ceiling = 131_072.0 * 8.0 / 0.040;
    match rate > SNDBUF_CEILING_OVER * ceiling {
        true => {
            eprintln!("the kernel let the sender past its buffer: {rate} > {ceiling} bit/s");
            assert_ne!(d.verdict, Verdict::SendBuffer, "{d:#?}");
        }
        false => assert_verdict(&d, Verdict::SendBuffer),
    }
}
