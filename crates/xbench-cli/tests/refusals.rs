//! Refusals as a user reads them: the reason on stderr and the exit status for it — a `--rate`
//! out of bounds (2, a usage error), a busy server (1, with what to do), and a server that
//! cannot listen (1, naming every address it tried).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use common::{assert_usage_errors, xbench};

#[test]
fn a_rate_no_clock_reaches_is_a_usage_error_naming_the_flag_and_the_range() {
    assert_usage_errors(
        &["client", "--local", "--rr"],
        &[
            (&["--rate", "1e-300"], "--rate"),
            (&["--rate", "1e-300"], "out of range"),
            (
                &["--rate", "0.05", "-t", "10"],
                "at most this test's -t (10s)",
            ),
            (&["--rate", "20s", "-t", "10"], "one transaction every 20s"),
            (
                &["--rate", "1e12"],
                "at most 10000000 transactions per second",
            ),
        ],
    );
}

/// `xbench server ARGS` on a free loopback port; killed on drop.
struct ServerProc {
    child: Child,
    port: u16,
}

impl ServerProc {
    fn start(args: &[&str]) -> Self {
        let mut child = xbench()
            .args(["server", "-B", "127.0.0.1", "-p", "0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().rsplit(':').next().unwrap().parse().unwrap());
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server logs its address");
        ServerProc { child, port }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_client_refused_by_max_handshakes_reads_why_and_exits_1() {
    let server = ServerProc::start(&["--max-flows", "1", "--max-handshakes", "2"]);
    let addr = format!("127.0.0.1:{}", server.port);
    let silent: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        let out = xbench()
            .args([
                "client",
                "127.0.0.1",
                "-p",
                &server.port.to_string(),
                "-t",
                "1",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("the server is busy"), "{err}");
        assert!(err.contains("--max-handshakes"), "{err}");
        assert!(!err.contains("reset by peer"), "{err}");
    }
    drop(silent);
}

#[test]
fn a_server_that_cannot_listen_names_every_address_it_tried() {
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = xbench().args(["server", "-p", &port]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("[::]:{port}")), "{err}");
    assert!(err.contains(&format!("0.0.0.0:{port}")), "{err}");
    assert!(err.contains("in use"), "{err}");
}
