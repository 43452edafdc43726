//! Issue 6's accuracy tests: xbench's figures against the lab's ground truth — a known rate
//! cap (and iperf3 on the same path), a known delay, a known loss rate with the kernel's own
//! retransmission counter, the bandwidth-delay ceiling of a fixed window, and the shape of a
//! software VPN against peering. Each builds its own lab (own prefix and state directory, so
//! a failed test never touches another's), with delay lines and servers run by this build's
//! `xbench` as `xbench lab up` runs them, and removes it on the way out, panics included.
//!
//! They need root (CI runs them as root; with CI=true a missing privilege fails, never
//! skips), iperf3 and openvpn; they run one at a time.

// A panic is a failed assertion; stderr is the test's log.
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    clippy::expect_used,
    unreachable_pub
)]

mod lab_common;

use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::time::Duration;

use xbench::client::ClientEvent;
use xbench::{ClientConfig, EndCondition};
use xbench_lab::sys::netns;
use xbench_lab::{Impairment, Lab, PathKind, PathSpec, reference};

use lab_common::*;

const MBIT: f64 = 1e6;

/// Rate cap 200 Mbit/s: xbench's receiver goodput is within 90–100 % of the cap and within
/// 3 % of iperf3's on the same path in the same test.
#[test]
fn root_lab_rate_cap_200mbit_xbench_within_3pct_of_iperf3() {
    let name = "root_lab_rate_cap_200mbit_xbench_within_3pct_of_iperf3";
    if !root_or_skip(name) {
        return;
    }
    let Some(iperf3) = program_or_skip(name, "iperf3", "iperf3") else {
        return;
    };
    let _s = serial();
    let cap = 200e6;
    let lab = up(&spec(
        "rate",
        "xbtrate-",
        vec![PathSpec::new(PathKind::Direct).with(Impairment {
            rate_bps: Some(cap as u64),
            ..Impairment::default()
        })],
    ));
    let p = &lab.paths()[0];
    // Same length, one stream, default settings on both tools, alternating twice; each
    // tool's best run counts. On a shared 2-vCPU machine a burst of someone else's work can
    // starve one run (we saw 181 Mbit/s once, against 190 before and after); that only ever
    // lowers a rate, and the best of two alternating runs compares what each tool measures
    // of the path under the same conditions.
    let (mut iperf, mut xb, mut retrans) = (0.0f64, 0.0f64, 0);
    for _ in 0..2 {
        iperf = iperf.max(iperf3_bps(&iperf3, p, 5));
        let (x, r) = up_figures(&xbench_client(p, &["-t", "5"]));
        if x > xb {
            (xb, retrans) = (x, r);
        }
    }
    eprintln!(
        "200 Mbit/s cap (best of 2 each): xbench {:.1} Mbit/s ({:.1} %), iperf3 {:.1} Mbit/s, \
         {retrans} retransmits",
        xb / MBIT,
        xb / cap * 100.0,
        iperf / MBIT
    );
    assert!(
        (0.90 * cap..=cap).contains(&xb),
        "xbench {xb} outside 90–100 % of {cap}"
    );
    let diff = (xb - iperf).abs() / iperf;
    assert!(
        diff <= 0.03,
        "xbench {xb} vs iperf3 {iperf}: {:.2} % apart",
        diff * 100.0
    );
}

/// 10 ms one-way delay each way: the delay line never delivers early (min ≥ 20 ms, both
/// readers), adds what it was asked to (a bare ping-pong's min ≤ 21.5 ms), and `xbench client
/// --rr` reads what a bare 1-byte TCP ping-pong reads over the same path **at the same time**.
///
/// The two run side by side, not one after the other: the userspace delay line's lateness is
/// the machine's load, and a VM's load moves by the second (fresh-clone CI saw a ping-pong at
/// p50 20.7 ms, p99 27.5 ms and then xbench at p50 22.1 ms five seconds later, while on an idle
/// machine both read 20.5 ms). Side by side, both sample one distribution, so xbench's median
/// must fall between the ping-pong's quartiles (plus 0.25 ms): with about 240 samples the
/// median of the same distribution lies there with overwhelming probability (its rank's
/// standard deviation is about 3 percentile points), while a reader that added even a
/// quarter of a millisecond on a clean path (quartiles 0.1 ms apart) would miss it.
#[test]
fn root_lab_delay_10ms_each_way_rr_reads_what_a_ping_pong_reads() {
    if !root_or_skip("root_lab_delay_10ms_each_way_rr_reads_what_a_ping_pong_reads") {
        return;
    }
    let _s = serial();
    let lab = up(&spec(
        "delay",
        "xbtdelay-",
        vec![PathSpec::new(PathKind::Direct).with(Impairment {
            delay: Duration::from_millis(10),
            ..Impairment::default()
        })],
    ));
    let p = &lab.paths()[0];
    // Both run real-time (under load, as ordinary processes, xbench saw p50 21.6 ms and p99
    // 516 ms while the real-time ping-pong saw 20.5 and 22.6 ms). The client inherits the
    // policy from the thread that starts it; the lab's server is switched, thread by thread,
    // and its threads started later inherit it.
    realtime_process(lab_server_pid(&lab));
    // 250 round trips of 20 ms: the 5 s of xbench's test.
    let pinger = {
        let p = p.clone();
        std::thread::spawn(move || reference::ping_pong(&p, 250).unwrap())
    };
    let r = {
        let p = p.clone();
        std::thread::spawn(move || {
            reference::realtime_thread().unwrap();
            xbench_client(&p, &["--rr", "-t", "5"])
        })
        .join()
        .unwrap()
    };
    let mut rtt = pinger.join().unwrap();
    rtt.sort();
    let us = |q: f64| rtt[((rtt.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    eprintln!(
        "ping-pong over 10 ms each way ({} round trips): min {:.3} p25 {:.3} p50 {:.3} p75 {:.3} p99 {:.3} max {:.3} ms",
        rtt.len(),
        us(0.0) / 1e3,
        us(0.25) / 1e3,
        us(0.5) / 1e3,
        us(0.75) / 1e3,
        us(0.99) / 1e3,
        us(1.0) / 1e3
    );
    let rr = r.rr.expect("an rr report");
    let lat = rr.summary.latency.expect("transactions completed");
    eprintln!(
        "xbench --rr beside it: {} transactions, min {:.3} p50 {:.3} p99 {:.3} max {:.3} ms",
        lat.count,
        lat.min_us / 1e3,
        lat.p50_us / 1e3,
        lat.p99_us / 1e3,
        lat.max_us / 1e3
    );
    assert!(us(0.0) >= 20_000.0, "ping-pong min {} µs", us(0.0));
    assert!(us(0.0) <= 21_500.0, "ping-pong min {} µs", us(0.0));
    assert!(
        lat.count >= 150,
        "{} transactions in 5 s at 20 ms",
        lat.count
    );
    assert!(lat.min_us >= 20_000.0, "xbench min {} µs", lat.min_us);
    let (lo, hi) = (us(0.25) - 250.0, us(0.75) + 250.0);
    assert!(
        (lo..=hi).contains(&lat.p50_us),
        "xbench p50 {:.0} µs outside the ping-pong's quartiles ± 250 µs, {lo:.0}..={hi:.0}",
        lat.p50_us
    );
}

/// The lab's xbench server process.
fn lab_server_pid(lab: &Lab) -> u32 {
    let procs = &lab.state().processes;
    procs
        .iter()
        .find(|r| r.role.starts_with("xbench server"))
        .unwrap_or_else(|| panic!("no xbench server among {procs:?}"))
        .pid
}

/// Every thread of process `pid` in `SCHED_FIFO` at priority 10 (see [`reference::realtime_thread`]).
fn realtime_process(pid: u32) {
    let param = libc::sched_param { sched_priority: 10 };
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: libc::pid_t = task.unwrap().file_name().to_str().unwrap().parse().unwrap();
        // SAFETY: `param` is valid for the call.
        let ok = unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) } == 0;
        let e = std::io::Error::last_os_error();
        // A thread that exited since the listing is no longer there to switch.
        assert!(
            ok || e.raw_os_error() == Some(libc::ESRCH),
            "SCHED_FIFO for {pid}/{tid}: {e}"
        );
    }
}

/// 1 % random loss: retransmits > 0, and the retransmits xbench reports equal the client
/// namespace's own `Tcp: RetransSegs` delta (/proc/net/snmp read inside it).
///
/// Data flows client → server, so the client's sockets do the retransmitting. The namespace
/// counter also counts the control connection's retransmits (its Finish message can be lost
/// too), which xbench rightly does not call the test's; so the client runs in this process,
/// the test holds a duplicate of the control socket, and the equality checked is
/// `RetransSegs delta = xbench's retransmits + the control socket's own`, exactly — or one more
/// per data connection at most. The counter is read when data starts (the `Started` event)
/// and after the test returns; xbench's last reading of each connection comes when the
/// server's results are in, before the client's close. A segment retransmitted between the
/// two (a FIN, or its repeat when the ACK of it was lost: 429 against 428 once in CI, at 1 %
/// loss each way) is the kernel's and not in the report.
#[test]
fn root_lab_loss_1pct_retransmits_equal_client_netns_retrans_segs() {
    if !root_or_skip("root_lab_loss_1pct_retransmits_equal_client_netns_retrans_segs") {
        return;
    }
    let _s = serial();
    let lab = up(&spec(
        "loss",
        "xbtloss-",
        vec![PathSpec::new(PathKind::Direct).with(Impairment {
            loss: 0.01,
            delay: Duration::from_millis(1),
            rate_bps: Some(100_000_000),
            ..Impairment::default()
        })],
    ));
    let p = lab.paths()[0].clone();
    let ns = p.client_netns.clone();
    let (report, before, after, ctrl) = std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut cfg = ClientConfig::new(p.server_addr.to_string());
        cfg.port = p.server_port;
        cfg.spec.end = EndCondition::Duration(Duration::from_secs(5));
        let server = SocketAddr::from((p.server_addr, p.server_port));
        let mut before = None;
        let mut ctrl: Option<(TcpStream, u32)> = None;
        let mut data_addrs = Vec::new();
        let mut on_event = |ev: ClientEvent| match ev {
            ClientEvent::Started { streams, .. } => {
                before = Some(retrans_segs_here());
                data_addrs = streams.iter().map(|s| s.client_addr).collect();
            }
            // Control data is all acknowledged from `Ready` until `Finish`, so its counter
            // read at the first interval equals its value when data started.
            ClientEvent::Interval(_) if ctrl.is_none() => {
                let s = control_socket(server, &data_addrs).expect("the control socket");
                let base = xbench::tcp_info::read(&s).unwrap().total_retrans;
                ctrl = Some((s, base));
            }
            _ => {}
        };
        let report = rt
            .block_on(xbench::client::run(
                &cfg,
                &mut on_event,
                std::future::pending(),
            ))
            .unwrap();
        let after = retrans_segs_here();
        let (sock, base) = ctrl.expect("an interval was reported");
        let ctrl_delta = xbench::tcp_info::read(&sock).unwrap().total_retrans - base;
        (report, before.unwrap(), after, ctrl_delta)
    })
    .join()
    .unwrap();
    let (bps, xb) = up_figures(&report);
    let stats = lab.delay_line_stats("direct").unwrap();
    eprintln!(
        "1 % loss: {:.1} Mbit/s, xbench retransmits {xb}, RetransSegs delta {}, control {ctrl}; \
         line dropped {}/{} and {}/{} packets",
        bps / MBIT,
        after - before,
        stats.a_to_b.lost,
        stats.a_to_b.packets_in,
        stats.b_to_a.lost,
        stats.b_to_a.packets_in
    );
    assert!(xb > 0, "no retransmits at 1 % loss");
    let counted = xb + u64::from(ctrl);
    let connections = report.streams.len() as u64;
    assert!(
        (counted..=counted + connections).contains(&(after - before)),
        "client namespace RetransSegs delta {} vs xbench's {xb} + control connection's {ctrl} \
         (+ at most one after the last reading per data connection, {connections})",
        after - before
    );
    let lost = stats.a_to_b.lost as f64 / stats.a_to_b.packets_in as f64;
    assert!((0.007..0.013).contains(&lost), "line dropped {lost}");
}

/// `Tcp: RetransSegs` of the calling thread's network namespace.
fn retrans_segs_here() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap();
    netns::snmp_counter(&text, "Tcp", "RetransSegs").unwrap()
}

/// A duplicate of this process's connection to `server` that is not one of the data
/// connections (whose local addresses are `data`): the control connection.
fn control_socket(server: SocketAddr, data: &[SocketAddr]) -> Option<TcpStream> {
    for e in std::fs::read_dir("/proc/thread-self/fd").ok()?.flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if !std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")) {
            continue;
        }
        // SAFETY: `fd` is open in this process (just listed); F_DUPFD_CLOEXEC makes a new
        // descriptor we own, leaving the original to its owner.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            continue;
        }
        // SAFETY: `dup` was just created and is owned by nobody else.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
        let s = TcpStream::from(owned);
        if s.peer_addr().is_ok_and(|a| a == server)
            && s.local_addr().is_ok_and(|a| !data.contains(&a))
        {
            return Some(s);
        }
    }
    None
}

/// 40 ms round trip (read as 20 ms each way; 40 ms each way gives the same verdicts at half the
/// rate) and a 256 KiB window: one stream reads near window ÷ RTT, and the summary says it is
/// receive-window limited.
///
/// With CUBIC, which fills the window and so accumulates the kernel's `rwnd_limited` time.
#[test]
fn root_lab_256k_window_over_40ms_rtt_reads_near_window_over_rtt() {
    if !root_or_skip("root_lab_256k_window_over_40ms_rtt_reads_near_window_over_rtt") {
        return;
    }
    let _s = serial();
    let lab = window_lab("window", "xbtwin-");
    check_window_limited(&lab, "cubic");
}

/// The same path under BBR. BBR paces the window out over the round trip, so the kernel's
/// `rwnd_limited` time stays around 15–30 %; the rate still sits at window ÷ RTT, which is what
/// the summary must read as window-limited. (A regression test: the summary once looked at the
/// rwnd-limited time alone and said "not window limited".)
#[test]
fn root_lab_bbr_256k_window_over_40ms_rtt_is_window_limited() {
    if !root_or_skip("root_lab_bbr_256k_window_over_40ms_rtt_is_window_limited") {
        return;
    }
    let _s = serial();
    let lab = window_lab("window-bbr", "xbtwbbr-");
    check_window_limited(&lab, "bbr");
}

fn window_lab(test: &str, prefix: &str) -> Lab {
    up(&spec(
        test,
        prefix,
        vec![PathSpec::new(PathKind::Direct).with(Impairment {
            delay: Duration::from_millis(20),
            ..Impairment::default()
        })],
    ))
}

fn check_window_limited(lab: &Lab, congestion: &str) {
    let p = &lab.paths()[0];
    let r = xbench_client(p, &["-w", "256K", "-t", "8", "-O", "2", "-C", congestion]);
    let d = &r.summary.directions[0];
    let bps = d.receiver.unwrap().bits_per_second;
    let nominal = 256.0 * 1024.0 * 8.0 / 0.040;
    let ceiling = d.window_ceiling.expect("a window ceiling");
    let limits = d.limits.expect("sender limits");
    eprintln!(
        "256K window, 40 ms RTT, {congestion}: {:.1} Mbit/s; 256 KiB ÷ 40 ms = {:.1} Mbit/s; \
         report's ceiling {:.1} Mbit/s (window {} B over {:.2} ms); rwnd-limited {:.0} %, \
         window_limited {}",
        bps / MBIT,
        nominal / MBIT,
        ceiling.bits_per_second / MBIT,
        ceiling.window_bytes,
        ceiling.rtt_us / 1e3,
        limits.rwnd_limited_pct,
        d.window_limited
    );
    // "Window ÷ RTT" with the window the receiver actually advertised (the report's ceiling):
    // Linux doubles SO_RCVBUF (256 KiB → 512 KiB of buffer) and advertises the share of it
    // that its skb overhead leaves (`scaling_ratio`: payload over the buffers' true size of
    // what it received, usually 0.6–0.9, but 0.39 on one CI run, where the delay line's TUN
    // device handed over each 1.5 KB packet in a larger buffer: 202,701 B advertised, 40.2
    // Mbit/s against a 40.1 Mbit/s ceiling). So `-w 256K` gives an advertised window between
    // about 0.75 and 1.8 × 256 KiB — as with iperf3's `-w` — and the accuracy checked is
    // against the window advertised. The ceiling uses the mean advertised window (a
    // regression test: it once used the largest, and a window that dipped when the loaded
    // receiver read late put the rate at 72 % of it).
    assert!(
        (0.88 * ceiling.bits_per_second..=1.05 * ceiling.bits_per_second).contains(&bps),
        "{bps} vs the advertised window over the RTT, {}",
        ceiling.bits_per_second
    );
    // `-w` was applied: without it the default buffers grow far past 1.8 × 256 KiB.
    assert!(
        (0.5 * nominal..=1.8 * nominal).contains(&bps),
        "{bps} vs 256 KiB / 40 ms = {nominal}"
    );
    assert!(
        d.window_limited,
        "not reported as window-limited: {limits:?}"
    );
    let diagnosis = d.diagnosis.as_ref().expect("a diagnosis");
    assert_eq!(
        diagnosis.verdict,
        xbench::diagnosis::Verdict::ReceiveWindow,
        "{diagnosis:#?}"
    );
}

/// The `vpn` path shows the field reports' shape: lower throughput than `direct` and more
/// retransmits, on the same (unimpaired) underlay.
#[test]
fn root_lab_vpn_is_slower_than_direct_with_more_retransmits() {
    let name = "root_lab_vpn_is_slower_than_direct_with_more_retransmits";
    if !root_or_skip(name) || program_or_skip(name, "openvpn", "openvpn").is_none() {
        return;
    }
    let _s = serial();
    let lab = up(&spec(
        "vpn",
        "xbtvpn-",
        [PathKind::Direct, PathKind::Vpn]
            .map(|k| {
                PathSpec::new(k).with(Impairment {
                    rate_bps: Some(2_000_000_000),
                    ..Impairment::default()
                })
            })
            .to_vec(),
    ));
    let direct = up_figures(&xbench_client(&lab.paths()[0], &["-t", "5"]));
    let vpn = up_figures(&xbench_client(&lab.paths()[1], &["-t", "5"]));
    eprintln!(
        "direct {:.0} Mbit/s, {} retransmits; vpn {:.0} Mbit/s, {} retransmits",
        direct.0 / MBIT,
        direct.1,
        vpn.0 / MBIT,
        vpn.1
    );
    assert!(
        vpn.0 < direct.0,
        "vpn {vpn:?} not slower than direct {direct:?}"
    );
    assert!(
        vpn.1 > direct.1,
        "vpn {vpn:?} has no more retransmits than direct {direct:?}"
    );
}

/// The delay line's accuracy, for the README: the round trip it adds beyond the configured
/// delay (1-byte ping-pong, against an unimpaired path in the same lab), and how late it
/// releases packets while a 10 s single-stream test fills a 200 and a 500 Mbit/s cap behind
/// 10 ms each way. Prints the figures; asserts the "well under a millisecond" at
/// 200 Mbit/s (p99 lateness below 1 ms). Run: `cargo test -p xbench-cli --test lab_accuracy
/// -- --ignored --nocapture stress_lab_delay_line_accuracy`.
#[test]
#[ignore = "about a minute of full-rate traffic; run explicitly"]
fn stress_lab_delay_line_accuracy_at_200_and_500_mbit() {
    if !root_or_skip("stress_lab_delay_line_accuracy_at_200_and_500_mbit") {
        return;
    }
    let _s = serial();
    let mut first_p99 = None;
    for rate in [200_000_000u64, 500_000_000] {
        let mut delayed = PathSpec::new(PathKind::Direct).with(Impairment {
            delay: Duration::from_millis(10),
            rate_bps: Some(rate),
            ..Impairment::default()
        });
        delayed.label = "delayed".into();
        let lab = up(&spec(
            "stress",
            "xbtstress-",
            vec![PathSpec::new(PathKind::Direct), delayed],
        ));
        let [plain, delayed] = [&lab.paths()[0], &lab.paths()[1]];
        let stats = |v: &mut Vec<Duration>| {
            v.sort();
            let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize].as_secs_f64() * 1e3;
            (q(0.0), q(0.5), q(0.99))
        };
        let base = stats(&mut reference::ping_pong(plain, 400).unwrap());
        let rtt = stats(&mut reference::ping_pong(delayed, 400).unwrap());
        let before = lab.delay_line_stats("delayed").unwrap();
        let line_pid = lab
            .state()
            .processes
            .iter()
            .find(|p| p.role == "delay line delayed")
            .unwrap()
            .pid;
        let cpu0 = cpu_seconds(line_pid);
        let load0 = std::fs::read_to_string("/proc/loadavg").unwrap();
        let (bps, retr) = up_figures(&xbench_client(delayed, &["-t", "10"]));
        std::thread::sleep(Duration::from_millis(1200)); // the helper's next stats write
        let cpu = cpu_seconds(line_pid) - cpu0;
        let after = lab.delay_line_stats("delayed").unwrap();
        let a = after.a_to_b;
        let packets = a.packets_in - before.a_to_b.packets_in;
        eprintln!(
            "\n== cap {} Mbit/s, 10 ms each way (load before: {})\n\
             ping-pong RTT ms: unimpaired min {:.3} p50 {:.3}; delayed min {:.3} p50 {:.3} p99 {:.3}\n\
             => the line adds {:.0} µs per round trip beyond 20 ms (min), {:.0} µs (p50)\n\
             xbench -t 10: {:.1} Mbit/s, {retr} retransmits; line forwarded {packets} data packets \
             using {cpu:.2} CPU-seconds\n\
             release lateness (whole run, data direction) µs: p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}; \
             write µs p50 {:.1} p99 {:.1}; ACK direction p50 {:.1} p99 {:.1}; realtime {}",
            rate / 1_000_000,
            load0.trim(),
            base.0,
            base.1,
            rtt.0,
            rtt.1,
            rtt.2,
            (rtt.0 - 20.0 - base.0) * 1e3,
            (rtt.1 - 20.0 - base.1) * 1e3,
            bps / MBIT,
            a.lateness_ns.p50 as f64 / 1e3,
            a.lateness_ns.p90 as f64 / 1e3,
            a.lateness_ns.p99 as f64 / 1e3,
            a.lateness_ns.p999 as f64 / 1e3,
            a.lateness_ns.max as f64 / 1e3,
            a.write_ns.p50 as f64 / 1e3,
            a.write_ns.p99 as f64 / 1e3,
            after.b_to_a.lateness_ns.p50 as f64 / 1e3,
            after.b_to_a.lateness_ns.p99 as f64 / 1e3,
            after.realtime,
        );
        if first_p99.is_none() {
            first_p99 = Some(a.lateness_ns.p99);
        }
        drop(lab);
    }
    let p99 = first_p99.unwrap();
    assert!(
        p99 < 1_000_000,
        "p99 release lateness {p99} ns at 200 Mbit/s"
    );
}

/// User + system CPU seconds of a process.
fn cpu_seconds(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 counting from field 3.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}
