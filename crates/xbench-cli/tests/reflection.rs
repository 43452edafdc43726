//! The server is no UDP reflector (issue 30): a client whose UDP source address is rewritten
//! to a victim's (an SNAT rule, as a raw socket would) gets the victim nothing but the
//! server's return-routability challenges, fewer bytes than it sent, in every UDP mode; with
//! `--allow` naming only the client, not even those. Clients behind a NAT (a masquerading
//! gateway) still run every UDP mode.
//!
//! Namespaces (one lab, every part at once):
//! ```text
//!   srv 10.79.0.1 (xbench server), 10.79.0.6 (xbench server --allow 10.79.0.2/32)
//!   att 10.79.0.2   UDP to .1 leaves as from .3, UDP to .6 as from .5 (SNAT)
//!   vic 10.79.0.3, 10.79.0.5   counts and silently drops UDP from .1 and .6
//!   gw  10.79.0.4 ── 10.80.0.1   masquerades nat 10.80.0.2
//!   all on one bridge (br)
//! ```

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion
#![allow(clippy::print_stderr)] // the figures, for the test log

mod common;

use std::process::{Child, Stdio};

use common::{Netns, NsListener, root_or_skip};

/// IPv4 + UDP headers and a path check's 23 bytes: every datagram a victim may see.
const CHALLENGE_ON_WIRE: u64 = 20 + 8 + 23;

#[test]
fn root_netns_no_udp_mode_reflects_onto_a_spoofed_source_and_nat_still_works() {
    let name = "root_netns_no_udp_mode_reflects_onto_a_spoofed_source_and_nat_still_works";
    if !root_or_skip(name) {
        return;
    }
    let lab = Lab::up();
    let _open = xbench_server(&lab.srv, &["-B", "10.79.0.1"]);
    let _allow = xbench_server(&lab.srv, &["-B", "10.79.0.6", "--allow", "10.79.0.2/32"]);
    let xb = env!("CARGO_BIN_EXE_xbench");
    let modes: [&[&str]; 3] = [
        &["-u", "-R", "-b", "100M", "-t", "2"],
        &["-u", "--bidir", "-b", "100M", "-t", "2"],
        &[
            "--rr",
            "-u",
            "-r",
            "24,65507",
            "--rr-timeout",
            "1ms",
            "-t",
            "2",
        ],
    ];
    let mut attacks = Vec::new();
    for server in ["10.79.0.1", "10.79.0.6"] {
        for m in modes {
            let mut args = vec!["client", server];
            args.extend_from_slice(m);
            attacks.push((server, m, spawn(&lab.att, 60, xb, &args)));
        }
        // iperf3's client waits 30 s for its UDP stream's answer, which never comes to it:
        // the server's 10 s for its streams are what matters.
        let args = ["-c", server, "-u", "-R", "-b", "100M", "-t", "2"];
        let iperf3 = spawn(&lab.att, 12, "iperf3", &args);
        attacks.push((server, &["iperf3 -u -R"][..], iperf3));
    }
    let mut behind_nat = Vec::new();
    for m in [
        &["-u", "-R", "-b", "20M", "-t", "1", "--json"][..],
        &["-u", "--bidir", "-b", "20M", "-t", "1", "--json"],
        &["--rr", "-u", "-r", "24,8000", "-t", "1", "--json"],
    ] {
        let mut args = vec!["client", "10.79.0.1"];
        args.extend_from_slice(m);
        behind_nat.push((m, spawn(&lab.nat, 60, xb, &args)));
    }
    let args = ["-c", "10.79.0.1", "-u", "-R", "-b", "20M", "-t", "1", "-J"];
    behind_nat.push((&["iperf3 -u -R"][..], spawn(&lab.nat, 60, "iperf3", &args)));

    for (server, mode, child) in attacks {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{server} {mode:?} ran: {err}");
        if mode.len() > 1 {
            let why = if server == "10.79.0.1" {
                "return-routability"
            } else {
                "--allow"
            };
            assert!(err.contains(why), "{server} {mode:?}: {err}");
        }
    }
    for (mode, child) in behind_nat {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "behind NAT, {mode:?} failed: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let moved = if mode[0] == "iperf3 -u -R" {
            doc["end"]["sum"]["packets"].as_u64().unwrap()
        } else if mode[0] == "--rr" {
            doc["rr"]["summary"]["total_transactions"].as_u64().unwrap()
        } else {
            doc["udp"]["directions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    d["figures"]["received"]["count"]["datagrams"]
                        .as_u64()
                        .unwrap()
                })
                .min()
                .unwrap()
        };
        assert!(moved > 0, "behind NAT, {mode:?} moved nothing: {text}");
    }

    let (open, allowed) = (
        lab.victim_counts("10.79.0.1"),
        lab.victim_counts("10.79.0.6"),
    );
    let sent = lab.attacker_udp_bytes();
    eprintln!(
        "victim of the open server: {} B in {} datagrams; of the --allow server: {} B in {}; \
         the attacker sent {sent} B of UDP",
        open.1, open.0, allowed.1, allowed.0
    );
    assert_eq!(allowed, (0, 0), "outside --allow, the victim got datagrams");
    assert_eq!(
        open.1,
        open.0 * CHALLENGE_ON_WIRE,
        "the victim got something other than challenges: {open:?}"
    );
    assert!(
        open.1 <= sent,
        "the victim got more ({open:?}) than the attacker sent ({sent} B)"
    );
}

/// `program ARGS…` in `ns`, killed after `secs` (`timeout`) so a hang fails the test instead
/// of stalling it, its output captured.
fn spawn(ns: &Netns, secs: u32, program: &str, args: &[&str]) -> Child {
    ns.command("timeout")
        .arg(secs.to_string())
        .arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The namespaces of the module docs, deleted on drop (`Netns`).
struct Lab {
    srv: Netns,
    att: Netns,
    vic: Netns,
    nat: Netns,
    _gw: Netns,
    _br: Netns,
}

impl Lab {
    fn up() -> Self {
        let br = Netns::new("xbrf-br");
        let [srv, att, vic, gw, nat] =
            ["xbrf-srv", "xbrf-att", "xbrf-vic", "xbrf-gw", "xbrf-nat"].map(Netns::new);
        br.run(&["ip", "link", "add", "br0", "type", "bridge"]);
        br.run(&["ip", "link", "set", "br0", "up"]);
        for (ns, port, addrs) in [
            (&srv, "p-srv", &["10.79.0.1/24", "10.79.0.6/24"][..]),
            (&att, "p-att", &["10.79.0.2/24"]),
            (&vic, "p-vic", &["10.79.0.3/24", "10.79.0.5/24"]),
            (&gw, "p-gw", &["10.79.0.4/24"]),
        ] {
            br.run(&[
                "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", &ns.0,
            ]);
            br.run(&["ip", "link", "set", port, "master", "br0", "up"]);
            for a in addrs {
                ns.run(&["ip", "addr", "add", a, "dev", "eth0"]);
            }
            ns.run(&["ip", "link", "set", "eth0", "up"]);
        }
        gw.run(&[
            "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", &nat.0,
        ]);
        gw.run(&["ip", "addr", "add", "10.80.0.1/24", "dev", "eth1"]);
        gw.run(&["ip", "link", "set", "eth1", "up"]);
        gw.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        gw.run(&[
            "iptables",
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-s",
            "10.80.0.0/24",
            "-o",
            "eth0",
            "-j",
            "MASQUERADE",
        ]);
        nat.run(&["ip", "addr", "add", "10.80.0.2/24", "dev", "eth0"]);
        nat.run(&["ip", "link", "set", "eth0", "up"]);
        nat.run(&["ip", "route", "add", "default", "via", "10.80.0.1"]);
        for (server, victim) in [("10.79.0.1", "10.79.0.3"), ("10.79.0.6", "10.79.0.5")] {
            att.run(&[
                "iptables",
                "-t",
                "nat",
                "-A",
                "POSTROUTING",
                "-p",
                "udp",
                "-d",
                server,
                "-j",
                "SNAT",
                "--to-source",
                victim,
            ]);
            att.run(&["iptables", "-A", "OUTPUT", "-p", "udp", "-d", server]);
            vic.run(&[
                "iptables", "-A", "INPUT", "-p", "udp", "-s", server, "-d", victim, "-j", "DROP",
            ]);
        }
        Lab {
            srv,
            att,
            vic,
            nat,
            _gw: gw,
            _br: br,
        }
    }

    /// (datagrams, bytes with IP headers) the victim dropped from `server`.
    fn victim_counts(&self, server: &str) -> (u64, u64) {
        let table = self.vic.run(&["iptables", "-nvxL", "INPUT"]);
        let (mut packets, mut bytes) = (0, 0);
        for l in table.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 7 && f[2] == "DROP" && f[7] == server {
                packets += f[0].parse::<u64>().unwrap();
                bytes += f[1].parse::<u64>().unwrap();
            }
        }
        (packets, bytes)
    }

    /// Bytes (with IP headers) of UDP the attacker sent either server.
    fn attacker_udp_bytes(&self) -> u64 {
        let table = self.att.run(&["iptables", "-nvxL", "OUTPUT"]);
        table
            .lines()
            .skip(2)
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum()
    }
}

/// `xbench server` with `args` (`-B ADDR` first) in `ns`, once it listens on ADDR:5201.
fn xbench_server(ns: &Netns, args: &[&str]) -> NsListener {
    let on = format!("{}:5201", args[1]);
    let argv: Vec<&str> = std::iter::once("server")
        .chain(args.iter().copied())
        .collect();
    ns.listening(env!("CARGO_BIN_EXE_xbench"), &argv, &on)
}
