//! `xbench client --iperf3` (the library's iperf3 client) against Debian's iperf3 server with
//! its controller held up past the end mark, as a loaded machine holds it: the window must
//! still be the asked one, holding what was sent in it. The side-by-side comparisons with
//! iperf3's own client are the CLI's (`xbench-cli/tests/iperf3_client.rs`).
//!
//! Needs the `iperf3` binary; CI installs it, elsewhere the tests say they skipped.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion
#![allow(clippy::print_stderr)] // a skipped test says so

use std::net::TcpListener;
use std::num::NonZeroU16;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use xbench::config::UdpSpec;
use xbench::report::{Outcome, TestReport};
use xbench::{ClientConfig, ClientEvent, EndCondition, ServerProtocol, Workload};

fn have_iperf3() -> bool {
    let ok = Command::new("iperf3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var("CI").is_err(), "CI installs iperf3");
        eprintln!("iperf3 is not installed: skipped");
    }
    ok
}

/// An `iperf3 -s -1` on a free loopback port, killed on drop.
struct Iperf3Server {
    child: Child,
    port: u16,
}

impl Iperf3Server {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("iperf3")
            .args(["-s", "-1", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // No readiness signal: wait for the listening socket (a probe would count as a test).
        let want = format!("0100007F:{port:04X}");
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until
            && !std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
                t.lines().any(|l| {
                    let f: Vec<_> = l.split_whitespace().collect();
                    f.len() > 3 && f[1] == want && f[3] == "0A"
                })
            })
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        Iperf3Server { child, port }
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `c` against `server` with the client's controller held up 1.5 s as data starts: past
/// the end of a 1 s test (iperf3 takes whole seconds).
async fn held_up(server: &Iperf3Server, mut c: ClientConfig) -> TestReport {
    c.port = server.port;
    c.protocol = ServerProtocol::Iperf3;
    c.spec.end = EndCondition::Duration(Duration::from_secs(1));
    c.spec.interval = Some(Duration::from_secs(2));
    let mut on_event = |e: ClientEvent| {
        if matches!(e, ClientEvent::Started { .. }) {
            std::thread::sleep(Duration::from_millis(1500));
        }
    };
    let r = xbench::client::run(&c, &mut on_event, std::future::pending())
        .await
        .unwrap();
    assert_eq!(r.outcome, Outcome::Completed, "{:?}", r.warnings);
    assert_eq!(r.summary.measured_s, 1.0);
    r
}

/// UDP: the senders stop at the end mark themselves, so the datagrams counted as sent in the
/// 1 s window are 1 s of the schedule (at 8 Mbit/s of 1,000-byte datagrams, 1,000), not the
/// 2.5 s the controller took to come back; and iperf3's server got no more than were sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_up_iperf3_udp_client_sends_only_inside_its_window() {
    if !have_iperf3() {
        return;
    }
    let server = Iperf3Server::start();
    let mut c = ClientConfig::new("127.0.0.1");
    if let Workload::Throughput(t) = &mut c.spec.workload {
        t.streams = NonZeroU16::new(2).unwrap();
        t.udp = Some(UdpSpec {
            datagram_len: 1000,
            bitrate: Some(8_000_000),
        });
    }
    let r = held_up(&server, c).await;
    let f = &r.udp.as_ref().unwrap().directions[0].figures;
    let slots = f.sent.datagrams + f.slipped;
    assert!(
        (999..=1001).contains(&slots),
        "{} sent + {} skipped: the schedule of 1 s is 1,000",
        f.sent.datagrams,
        f.slipped
    );
    let got = f.received.unwrap();
    assert!(
        got.count.datagrams + got.lost <= f.sent.datagrams,
        "{got:?} of {} sent",
        f.sent.datagrams
    );
}
