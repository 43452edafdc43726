//! `xbench lab` as a user drives it: bad input is refused with a message and exit status 2
//! before anything needs root; a missing OpenVPN or missing privileges are named; `up`,
//! `status`, `run` and `down` do what they say; a second lab refuses while the first runs,
//! naming it; Ctrl-C and `down` after a SIGKILL leave nothing behind.

// A panic is a failed assertion; stderr is the test's log.
#![allow(
    clippy::unwrap_used,
    clippy::print_stderr,
    clippy::expect_used,
    unreachable_pub
)]

mod common;
mod lab_common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use xbench::report::TestReport;
use xbench_lab::state::LabState;
use xbench_lab::sys::process::{ProcRecord, in_namespaces};

use common::signal;
use lab_common::*;

fn xbench(args: &[&str]) -> Output {
    Command::new(XBENCH)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[track_caller]
fn assert_status(o: &Output, code: i32, needle: &str) {
    let e = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {e}",
        stdout(o)
    );
    assert!(e.contains(needle), "stderr lacks `{needle}`:\n{e}");
}

#[test]
fn lab_bad_input_is_refused_with_status_2_before_root_is_needed() {
    let d = "/tmp/xbench-lab-test-bad-input";
    let up = |extra: &[&str]| {
        let mut a = vec!["lab", "up", "--state-dir", d, "--prefix", "xbtbad-"];
        a.extend(extra);
        xbench(&a)
    };
    assert_status(
        &up(&["--paths", "direct,mpls"]),
        2,
        "unknown path kind `mpls`",
    );
    assert_status(&up(&["--delay", "-5ms"]), 2, "negative");
    assert_status(&up(&["--paths", "transit:delay=-1ms"]), 2, "negative");
    assert_status(&up(&["--loss", "150%"]), 2, "outside 0–100");
    assert_status(
        &up(&["--paths", "vpn", "--rate", "500k"]),
        2,
        "below what the vpn tunnel",
    );
    assert_status(
        &up(&["--paths", "direct,direct"]),
        2,
        "two paths have this label",
    );
    assert_status(
        &up(&["--delay", "5ms", "--jitter", "6ms"]),
        2,
        "jitter 6ms exceeds the delay",
    );
    // A suite file is read before anything is built, and replaces the suite's flags.
    let run = |extra: &[&str]| {
        let mut a = vec!["lab", "run", "--state-dir", d, "--prefix", "xbtbad-"];
        a.extend(extra);
        a.extend(["--out", "/tmp/xbench-lab-test-bad-input/out"]);
        xbench(&a)
    };
    assert_status(
        &run(&["--suite", "/nonexistent/suite.toml"]),
        2,
        "--suite /nonexistent/suite.toml: No such file",
    );
    let bad = Path::new(d).join("bad-suite.toml");
    std::fs::create_dir_all(d).unwrap();
    std::fs::write(&bad, "[[test]]\nparallel = 0\n").unwrap();
    assert_status(
        &run(&["--suite", bad.to_str().unwrap()]),
        2,
        "suite test 1: parallel: 0 is not 1 to 65535",
    );
    assert_status(
        &run(&["--suite", bad.to_str().unwrap(), "--streams", "1"]),
        2,
        "cannot be used with",
    );
    assert!(netns_with("xbtbad-").is_empty());
}

#[test]
fn lab_missing_openvpn_names_the_debian_package() {
    let o = Command::new(XBENCH)
        .args(["lab", "up", "--paths", "vpn", "--prefix", "xbtovpn-"])
        .args(["--state-dir", "/tmp/xbench-lab-test-no-openvpn"])
        .env(xbench_lab::OPENVPN_ENV, "/nonexistent/openvpn")
        .output()
        .unwrap();
    assert_status(&o, 1, "apt-get install openvpn");
    assert!(netns_with("xbtovpn-").is_empty());
}

#[test]
fn root_lab_without_privileges_says_it_needs_root() {
    let name = "root_lab_without_privileges_says_it_needs_root";
    if !root_or_skip(name) {
        return;
    }
    let Some(setpriv) = program_or_skip(name, "setpriv", "util-linux") else {
        return;
    };
    let o = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", XBENCH])
        .args(["lab", "up", "--paths", "direct", "--prefix", "xbtnobody-"])
        .args(["--state-dir", "/tmp/xbench-lab-test-nobody"])
        .output()
        .unwrap();
    assert_status(&o, 1, "the lab needs root (CAP_NET_ADMIN");
    assert!(netns_with("xbtnobody-").is_empty());
}

#[test]
fn root_lab_up_status_down_and_a_second_up_refuses_naming_the_first() {
    if !root_or_skip("root_lab_up_status_down_and_a_second_up_refuses_naming_the_first") {
        return;
    }
    let _s = serial();
    let d = state_dir("cli-up");
    let d = d.to_str().unwrap();
    let o = xbench(&[
        "lab",
        "up",
        "--paths",
        "direct:delay=1ms,transit",
        "--prefix",
        "xbtup-",
        "--state-dir",
        d,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let builder = LabState::load(Path::new(d)).unwrap().unwrap().builder;
    assert!(
        stdout(&o).contains("ip netns exec xbtup-c"),
        "{}",
        stdout(&o)
    );
    let st = LabState::load(Path::new(d)).unwrap().unwrap();
    assert!(st.complete && st.processes.iter().all(|p| p.is_running()));

    // The lab outlives `up`: a test runs over it.
    let r = xbench_client(&st.paths[0], &["-t", "1"]);
    assert!(up_figures(&r).0 > 0.0);

    let second = xbench(&["lab", "up", "--prefix", "xbtup2-", "--state-dir", d]);
    assert_status(&second, 1, &format!("built by pid {}", builder.pid));
    assert!(stderr(&second).contains("lab up --paths direct:delay=1ms,transit"));
    assert!(
        netns_with("xbtup2-").is_empty(),
        "the refused lab built nothing"
    );

    let status = xbench(&["lab", "status", "--state-dir", d]);
    assert!(
        stdout(&status).contains("delay line direct client→server"),
        "{}",
        stdout(&status)
    );

    let down = xbench(&["lab", "down", "--prefix", "xbtup-", "--state-dir", d]);
    assert_eq!(down.status.code(), Some(0), "{}", stderr(&down));
    assert!(
        netns_with("xbtup-").is_empty(),
        "{:?}",
        netns_with("xbtup-")
    );
    assert!(
        st.processes.iter().all(|p| !p.is_running()),
        "{:?}",
        st.processes
    );
    let again = xbench(&["lab", "down", "--prefix", "xbtup-", "--state-dir", d]);
    assert!(
        stdout(&again).contains("nothing to remove"),
        "{}",
        stdout(&again)
    );
}

#[test]
fn root_lab_run_writes_one_report_per_path_and_stream_count() {
    if !root_or_skip("root_lab_run_writes_one_report_per_path_and_stream_count") {
        return;
    }
    let _s = serial();
    let d = state_dir("cli-run");
    let out = d.join("out");
    let o = xbench(&[
        "lab",
        "run",
        "--paths",
        "direct,transit:rate=100M",
        "--streams",
        "1,2",
        "-t",
        "1",
        "--prefix",
        "xbtrun-",
        "--state-dir",
        d.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../xbench/schema/report.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    // Saved as `xbench client --save` saves: DIR/LABEL/CELL/run-N.json, every file a report.
    for label in ["direct", "transit"] {
        let mut reports = Vec::new();
        for cell in std::fs::read_dir(out.join(label)).unwrap() {
            for f in std::fs::read_dir(cell.unwrap().path()).unwrap() {
                let f = f.unwrap().path();
                let json: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
                assert!(validator.is_valid(&json), "{f:?} does not match the schema");
                let r: TestReport = serde_json::from_value(json).unwrap();
                assert_eq!(r.label.as_deref(), Some(label));
                reports.push(r);
            }
        }
        let mut streams: Vec<u16> = reports
            .iter()
            .filter_map(|r| r.spec.as_throughput().map(|t| t.streams.get()))
            .collect();
        streams.sort();
        assert_eq!(
            streams,
            [1, 2],
            "{label}: one throughput run per stream count"
        );
        assert_eq!(
            reports.iter().filter(|r| r.rr.is_some()).count(),
            1,
            "{label}: one latency run"
        );
    }
    // The comparison, printed and written, with its charts.
    let text = stdout(&o);
    assert!(
        text.contains("direct") && text.contains("transit"),
        "{text}"
    );
    assert!(out.join("report.md").is_file());
    // The web page, with what each path emulates beside where it was measured.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains("<button type=\"button\">emulated</button>") && page.contains("transit"),
        "report.html"
    );
    for chart in ["throughput.svg", "latency.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        assert!(svg.contains("<svg") && svg.contains("transit"), "{chart}");
    }
    assert!(
        netns_with("xbtrun-").is_empty(),
        "run removes the lab it built"
    );
}

/// `lab run --suite FILE` runs the suite file a deployment runs (issue 35: one suite
/// definition for the lab and the cloud): its tests and lists, `-t` and `--repeat` from the
/// command line over the file's, and a note that `every` does not spread a lab's repeats.
#[test]
fn root_lab_run_runs_a_deployments_suite_file() {
    if !root_or_skip("root_lab_run_runs_a_deployments_suite_file") {
        return;
    }
    let _s = serial();
    let d = state_dir("cli-suite");
    let out = d.join("out");
    let file = d.join("suite.toml");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        &file,
        "time = 30\nrepeat = 5\nevery = \"4h\"\n[[test]]\nparallel = [1, 3]\n\
         direction = \"down\"\n[[test]]\nrr = true\nrr-size = [\"1,1\", \"100,2K\"]\n",
    )
    .unwrap();
    let o = xbench(&[
        "lab",
        "run",
        "--paths",
        "direct",
        "--suite",
        file.to_str().unwrap(),
        "-t",
        "1",
        "--repeat",
        "1",
        "--prefix",
        "xbtsuite-",
        "--state-dir",
        d.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("every (14400 s) is for real paths"));
    let mut reports = Vec::new();
    for cell in std::fs::read_dir(out.join("direct")).unwrap() {
        for f in std::fs::read_dir(cell.unwrap().path()).unwrap() {
            let f = f.unwrap().path();
            let r: TestReport =
                serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            reports.push(r);
        }
    }
    assert_eq!(reports.len(), 4, "one run of each of the four cells");
    for r in &reports {
        assert_eq!(
            r.spec.end,
            xbench::config::EndCondition::Duration(Duration::from_secs(1)),
            "-t overrides the file's time"
        );
    }
    let mut streams: Vec<(u16, xbench::config::Direction)> = (reports.iter())
        .filter_map(|r| {
            r.spec
                .as_throughput()
                .map(|t| (t.streams.get(), t.direction))
        })
        .collect();
    streams.sort_by_key(|s| s.0);
    let down = xbench::config::Direction::ServerToClient;
    assert_eq!(streams, [(1, down), (3, down)]);
    let mut sizes: Vec<(u32, u32)> = (reports.iter())
        .filter_map(|r| {
            r.spec
                .as_rr()
                .map(|t| (t.request_len.get(), t.response_len.get()))
        })
        .collect();
    sizes.sort();
    assert_eq!(sizes, [(1, 1), (100, 2048)]);
    assert!(netns_with("xbtsuite-").is_empty(), "run removes the lab");
}

/// `lab run --udp`: UDP at each offered rate over an emulated path, saved beside the TCP runs,
/// tabled and charted. Below the path's 20 Mbit/s cap nothing is lost; offered twice the cap,
/// about half is, and what arrives is the cap.
#[test]
fn root_lab_run_measures_udp_loss_at_each_offered_rate() {
    if !root_or_skip("root_lab_run_measures_udp_loss_at_each_offered_rate") {
        return;
    }
    let _s = serial();
    let d = state_dir("cli-udp");
    let out = d.join("out");
    let o = xbench(&[
        "lab",
        "run",
        "--paths",
        "transit:rate=20M",
        "--streams",
        "1",
        "--no-rr",
        "--udp",
        "10M,40M",
        "--udp-length",
        "1400",
        "-t",
        "2",
        "--prefix",
        "xbtudp-",
        "--state-dir",
        d.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let run = |cell: &str| -> TestReport {
        let f = out.join("transit").join(cell).join("run-1.json");
        serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap()
    };
    let figures = |r: &TestReport| {
        let d = &r.udp.as_ref().unwrap().directions[0];
        (d.figures.sent, d.figures.received.unwrap())
    };
    let (_, below) = figures(&run("udp-up-b10M-l1400-P1"));
    assert!(below.lost_pct < 1.0, "10M over a 20M path: {below:?}");
    let (sent, over) = figures(&run("udp-up-b40M-l1400-P1"));
    assert!(sent.bits_per_second > 36e6, "{sent:?}");
    assert!(
        (35.0..65.0).contains(&over.lost_pct),
        "40M over a 20M path loses about half: {over:?}"
    );
    let rx = over.count.bits_per_second;
    assert!((rx / 20e6 - 1.0).abs() < 0.15, "received {rx} bit/s");
    let text = stdout(&o);
    assert!(text.contains("UDP client→server"), "{text}");
    let svg = std::fs::read_to_string(out.join("udp.svg")).unwrap();
    assert!(svg.contains("Datagrams lost (% of sent)") && svg.contains("transit"));
    assert!(netns_with("xbtudp-").is_empty(), "run removes the lab");
}

/// Starts a long `xbench lab run` and waits until its lab is built.
fn start_long_run(d: &str, prefix: &str) -> Child {
    let child = Command::new(XBENCH)
        .args([
            "lab",
            "run",
            "--paths",
            "direct:delay=2ms",
            "--streams",
            "1",
            "-t",
            "60",
        ])
        .args(["--prefix", prefix, "--state-dir", d, "--out"])
        .arg(Path::new(d).join("out"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if LabState::load(Path::new(d))
            .ok()
            .flatten()
            .is_some_and(|s| s.complete)
        {
            // Let the client start.
            std::thread::sleep(Duration::from_millis(500));
            return child;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut child = child;
    signal(&child, libc::SIGINT);
    let _ = child.wait();
    panic!("`xbench lab run` did not build its lab in 30 s");
}

#[test]
fn root_lab_second_lab_refuses_naming_the_running_one_and_ctrl_c_cleans_up() {
    if !root_or_skip("root_lab_second_lab_refuses_naming_the_running_one_and_ctrl_c_cleans_up") {
        return;
    }
    let _s = serial();
    let d = state_dir("cli-busy");
    let d = d.to_str().unwrap();
    let mut first = start_long_run(d, "xbtbusy-");
    let st = LabState::load(Path::new(d)).unwrap().unwrap();

    let second = xbench(&[
        "lab",
        "up",
        "--paths",
        "direct",
        "--prefix",
        "xbtbusy2-",
        "--state-dir",
        d,
    ]);
    assert_status(&second, 1, &format!("in use by pid {}", first.id()));
    assert!(stderr(&second).contains("lab run --paths direct:delay=2ms"));
    let down = xbench(&["lab", "down", "--prefix", "xbtbusy-", "--state-dir", d]);
    assert_status(&down, 1, "in use by pid");
    assert!(
        !netns_with("xbtbusy-").is_empty(),
        "a refused down removed nothing"
    );

    let t = Instant::now();
    signal(&first, libc::SIGINT);
    let status = first.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted run exits 130");
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        netns_with("xbtbusy-").is_empty(),
        "{:?}",
        netns_with("xbtbusy-")
    );
    assert!(
        st.processes.iter().all(|p| !p.is_running()),
        "{:?}",
        st.processes
    );
    assert!(LabState::load(Path::new(d)).unwrap().is_none());
}

#[test]
fn root_lab_down_removes_the_leftovers_of_a_killed_run() {
    if !root_or_skip("root_lab_down_removes_the_leftovers_of_a_killed_run") {
        return;
    }
    let _s = serial();
    let d = state_dir("cli-killed");
    let d = d.to_str().unwrap();
    let mut run = start_long_run(d, "xbtkill-");
    let st = LabState::load(Path::new(d)).unwrap().unwrap();
    // Everything running inside the lab: the helpers and the run's own client.
    let inodes: Vec<u64> = netns_with("xbtkill-")
        .iter()
        .filter_map(|n| xbench_lab::sys::netns::inode(n))
        .collect();
    let inside: Vec<ProcRecord> = in_namespaces(&inodes)
        .into_iter()
        .filter_map(|pid| ProcRecord::of(pid, "inside"))
        .collect();
    assert!(
        inside.len() >= 3,
        "delay line, server and client: {inside:?}"
    );
    signal(&run, libc::SIGKILL);
    let _ = run.wait();
    assert!(!netns_with("xbtkill-").is_empty());
    assert!(
        inside.iter().all(|p| p.is_running()),
        "the kill left them running"
    );

    let up = xbench(&["lab", "up", "--prefix", "xbtkill-", "--state-dir", d]);
    assert_status(&up, 1, &format!("built by pid {}", st.builder.pid));

    let down = xbench(&["lab", "down", "--prefix", "xbtkill-", "--state-dir", d]);
    assert_eq!(down.status.code(), Some(0), "{}", stderr(&down));
    assert!(
        netns_with("xbtkill-").is_empty(),
        "{:?}",
        netns_with("xbtkill-")
    );
    assert!(
        st.processes.iter().all(|p| !p.is_running()),
        "{:?}",
        st.processes
    );
    // The killed run's client (orphaned by the kill, recorded nowhere) is gone too.
    assert!(inside.iter().all(|p| !p.is_running()), "{inside:?}");
}
