//! Request/response flows against the 4-tuple limit, in a network namespace of their own
//! whose ephemeral port range (per namespace) is narrowed to 60 ports: more flows than one
//! local address holds are refused before anything is opened, naming the numbers, and a
//! second local address (`-B a,b`) carries them. The 65,535-flow planning itself is checked
//! by the library's unit tests (`client::flow_plan`); this machine's open-file limit would not
//! run it.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion
#![allow(clippy::print_stderr)] // a skipped test and the run time, for the test log

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A network namespace with loopback up, deleted on drop (its sockets with it).
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Self {
        let ns = Netns(format!("{name}-{}", std::process::id()));
        if std::path::Path::new("/run/netns").join(&ns.0).exists() {
            ip(&["netns", "del", &ns.0]);
        }
        ip(&["netns", "add", &ns.0]);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    fn exec(&self, argv: &[&str]) {
        let out = self.command(argv[0]).args(&argv[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `program` run inside the namespace.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// False (after saying why) without root; under `CI=true` a panic, since CI must run it.
fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{test} needs root (network namespaces) and CI=true forbids skipping it"
    );
    eprintln!("skipping {test}: needs root for a network namespace");
    false
}

/// `xbench server` in `ns` on 127.0.0.1:5201 (outside the narrowed range), killed on drop.
struct Server(Child);

impl Server {
    fn start(ns: &Netns) -> Self {
        let xbench = env!("CARGO_BIN_EXE_xbench");
        let mut child = ns
            .command(xbench)
            .args(["server", "-B", "127.0.0.1", "-p", "5201"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                if line.contains("listening on ") {
                    let _ = tx.send(());
                }
            }
        });
        let server = Server(child);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("server logs its address");
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // `ip netns exec` execs the program: this is the server's own pid.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
    ns.exec(&["sysctl", "-qw", "net.ipv4.ip_local_port_range=61000 61059"]);
    let _server = Server::start(&ns);
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
    eprintln!("{test}: {:.1} s", started.elapsed().as_secs_f64());
}
