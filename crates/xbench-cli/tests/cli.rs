//! The `xbench` binary as a user runs it: exit codes, messages, and JSON that validates against
//! the committed schema.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{ServerProc, assert_usage_errors, assert_valid, signal, xbench};

fn schema() -> Value {
    let text = include_str!("../../xbench/schema/report.schema.json");
    serde_json::from_str(text).unwrap()
}

/// The schema of one `--json-stream` line: the root's `$defs/stream_event`, with the report
/// (the root itself) moved under `$defs` so that `#` references still resolve.
fn event_schema() -> Value {
    let root = schema();
    let mut defs = root["$defs"].clone();
    let mut report = root.clone();
    report.as_object_mut().unwrap().remove("$defs");
    report.as_object_mut().unwrap().remove("$schema");
    report.as_object_mut().unwrap().remove("$id");
    defs["report"] = report;
    let s = serde_json::json!({
        "$schema": root["$schema"],
        "$defs": defs,
        "$ref": "#/$defs/stream_event",
    })
    .to_string()
    .replace(r##""$ref":"#""##, r##""$ref":"#/$defs/report""##);
    serde_json::from_str(&s).unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn local_json_report_validates_against_the_schema() {
    let out = xbench()
        .args([
            "client", "-t", "1", "-P", "2", "-i", "0.5", "--json", "--label", "loopback",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    assert_eq!(doc["label"], "loopback");
    assert_eq!(doc["outcome"]["status"], "completed");
    let d = &doc["summary"]["directions"][0];
    let n = |v: &Value| v.as_u64().unwrap();
    assert_eq!(
        n(&d["receiver"]["bytes"]) + n(&d["after_end"]["bytes"]),
        n(&d["sender"]["bytes"]) + n(&d["after_end"]["sent_bytes"]),
        "every byte sent arrived, inside the window or after it"
    );
    // The window is the asked second as the sender's clock measured it: never shorter, a
    // little longer when a busy machine woke the end mark late.
    assert_eq!(d["receiver"]["seconds"], d["sender"]["seconds"]);
    assert_eq!(d["receiver"]["seconds"], doc["summary"]["measured_s"]);
    assert!(
        d["receiver"]["seconds"].as_f64().unwrap() >= 1.0,
        "the window is the asked second: {d}"
    );
    assert!(d["receiver"]["bits_per_second"].as_f64().unwrap() > 1e6);
    // Every TCP direction is diagnosed, with the figures its verdict rests on.
    assert!(d["diagnosis"]["verdict"].is_string(), "{d}");
    assert!(
        d["diagnosis"]["figures"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    );
}

#[test]
fn reverse_and_bidir_reports_validate() {
    for flag in ["-R", "--bidir"] {
        let out = xbench()
            .args(["client", "-t", "0.5", flag, "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_valid(&schema(), &doc);
    }
}

/// Runs `xbench client ARGS --json-stream` to success and returns its lines, each checked
/// against the event schema.
fn json_stream(args: &[&str]) -> Vec<Value> {
    let out = xbench()
        .arg("client")
        .args(args)
        .arg("--json-stream")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let schema = event_schema();
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    for l in &lines {
        assert_valid(&schema, l);
    }
    lines
}

#[test]
fn json_stream_lines_each_validate_and_end_with_the_report() {
    let lines = json_stream(&["-t", "1", "-i", "0.25"]);
    assert_eq!(lines.first().unwrap()["event"], "start");
    assert_eq!(lines.last().unwrap()["event"], "end");
    let intervals = lines.iter().filter(|l| l["event"] == "interval").count();
    assert!(intervals >= 4, "{intervals} interval events");
}

#[test]
fn text_output_explains_the_result() {
    let out = xbench().args(["client", "-t", "0.5"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("client→server:"), "{text}");
    assert!(text.contains("received"), "{text}");
    assert!(text.contains("sender busy"), "{text}");
    assert!(text.contains("CPU: client"), "{text}");
}

/// A warning raised while the test runs is printed once: as it happens, and not again from
/// the report's list at the end (which still holds it, for `--json`). `-w 1G` is past every
/// kernel's default buffer ceiling, so the kernel grants less and says so.
#[test]
fn a_warning_is_printed_once() {
    let dir = std::env::temp_dir().join(format!("xbench-warn-once-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.json");
    let out = xbench()
        .args(["client", "-t", "0.5", "-w", "1G", "--json-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let warnings = doc["warnings"].as_array().unwrap();
    assert!(!warnings.is_empty(), "{stderr}");
    for w in warnings {
        let line = format!("warning: {}\n", w.as_str().unwrap());
        assert_eq!(stderr.matches(&line).count(), 1, "{line} in:\n{stderr}");
    }
}

/// Issue 31: `-w 256` said what to write, `-b 100` only "must be at least 8 kbit/s" and
/// `--ceiling 100` drew a ceiling of 100 bit/s. Every size and rate flag that needs a unit
/// says what to write instead, in every command.
#[test]
fn every_flag_missing_its_unit_says_what_to_write() {
    let rate = "write it as 100M (megabits per second), 100k or 100G";
    for (args, needle) in [
        (&["client", "--local", "-b", "100"][..], rate),
        (&["client", "--local", "-u", "-b", "100"], rate),
        (
            &["client", "--local", "-w", "256"],
            "write it as 256K, 256M or 256B",
        ),
        (&["server", "--max-send-rate", "100"], rate),
        (&["report", ".", "--ceiling", "100"], rate),
        (&["lab", "up", "--rate", "100"], rate),
        (&["lab", "run", "--udp", "100"], rate),
        (&["lab", "up", "--paths", "vpn:rate=100"], rate),
    ] {
        let out = xbench().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bad_flags_are_usage_errors_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["-P", "0"], "--parallel"),
        (&["-P", "-1"], "--parallel"),
        (&["-t", "0"], "--time"),
        (&["-t", "-3"], "--time"),
        (&["-w", "256"], "no unit"),
        (&["-w", "10X"], "unknown unit"),
        (&["-n", "5Q"], "--bytes"),
        (&["-l", "-5"], "--length"),
        (&["-i", "0.01"], "--interval"),
        (&["-M", "20"], "--set-mss"),
        (&["-t", "1", "-n", "1G"], "--time"),
        (&["-R", "--bidir"], "--bidir"),
        (
            &["--local", "10.0.0.1"],
            "leave out the host, or drop --local",
        ),
        (
            &["10.0.0.1", "--local"],
            "leave out the host, or drop --local",
        ),
    ];
    assert_usage_errors(&["client"], cases);
}

#[test]
fn bad_server_limits_are_usage_errors_naming_the_flag() {
    // A limit of 0 would refuse every test; a longer-than-a-week one would overflow deadlines.
    let cases: &[(&[&str], &str)] = &[
        (&["--max-tests", "0"], "--max-tests"),
        (&["--max-tests-per-client", "0"], "--max-tests-per-client"),
        (&["--max-streams", "0"], "--max-streams"),
        (&["--max-flows", "0"], "--max-flows"),
        (&["--max-flows", "65537"], "must be between 1 and 65536"),
        (&["--max-duration", "0"], "--max-duration"),
        (&["--max-duration", "1000000h"], "--max-duration"),
        (&["-p", "70000"], "--port"),
        (
            &["--max-flows", "100", "--max-handshakes", "150"],
            "--max-handshakes",
        ),
    ];
    assert_usage_errors(&["server"], cases);
}

#[test]
fn unreachable_servers_get_one_actionable_line_and_exit_1() {
    let port = free_port();
    let out = xbench()
        .args(["client", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("is `xbench server` running there?"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let out = xbench()
        .args(["client", "no-such-host.invalid", "-t", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot resolve `no-such-host.invalid` (port 5201)"),
        "{err}"
    );
}

#[test]
fn a_server_process_serves_clients_and_stops_cleanly_on_sigterm() {
    let mut server = ServerProc::start(&[]);
    let out = xbench()
        .args([
            "client",
            "127.0.0.1",
            "-p",
            &server.port(),
            "-t",
            "0.5",
            "-R",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    signal(&server.child, libc::SIGTERM);
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "server ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let log: Vec<String> = server.log.try_iter().collect();
    assert!(
        log.iter().any(|l| l.contains("test ended")),
        "one log line per test: {log:#?}"
    );
}

/// iperf3's muscle memory (issue 31): `xbench -s` serves, and `xbench -c HOST`, `xbench … -c
/// HOST` and `xbench client -c HOST` test against HOST, instead of "unexpected argument".
#[test]
fn iperf3_mode_flags_serve_and_test_as_iperf3_users_type_them() {
    let mut server = ServerProc::spawn(xbench(), &["-s", "-B", "127.0.0.1", "-p", "0"], &[]);
    let port = server.port();
    let common = ["-p", &port, "-t", "0.3", "--json"];
    for args in [
        vec!["-c", "127.0.0.1"],
        vec!["-R", "-c127.0.0.1"],
        vec!["client", "-c", "127.0.0.1"],
        vec!["client", "--client=127.0.0.1"],
    ] {
        let out = xbench().args(&args).args(common).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["server_addr"], format!("127.0.0.1:{port}"), "{args:?}");
    }
    server.kill();
    assert_usage_errors(
        &[],
        &[
            (&["-c"], "a value is required for '--client <HOST>'"),
            (&["client", "-c", "a", "b"], "cannot be used with"),
            (&["client", "--local", "-c", "a"], "cannot be used with"),
        ],
    );
}

/// `--per-flow` puts each flow's latency summary in the report; without it the flows carry
/// their counts only. Both validate against the schema.
#[test]
fn per_flow_latency_is_reported_only_when_asked() {
    let mut server = ServerProc::start(&[]);
    let port = server.port();
    for per_flow in [false, true] {
        let mut args = vec![
            "client",
            "127.0.0.1",
            "-p",
            &port,
            "--rr",
            "--flows",
            "3",
            "-t",
            "0.5",
            "--json",
        ];
        if per_flow {
            args.push("--per-flow");
        }
        let out = xbench().args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_valid(&schema(), &doc);
        let flows = doc["rr"]["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 3);
        for f in flows {
            if per_flow {
                assert_eq!(f["latency"]["count"], f["transactions"], "{f}");
                assert!(f["latency"]["p99_us"].as_f64().unwrap() > 0.0, "{f}");
            } else {
                assert!(f["latency"].is_null(), "{f}");
            }
        }
    }
    server.kill();
}

/// `xbench` with its open-file limit set to `soft`/`hard` before it starts.
fn xbench_with_nofile(soft: u64, hard: u64) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = xbench();
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// More flows than the hard open-file limit allows: refused before connecting (no server is
/// listening on the port), with the numbers, as a usage error.
#[test]
fn flows_beyond_the_hard_file_limit_are_refused_with_the_numbers() {
    let out = xbench_with_nofile(500, 500)
        .args([
            "client",
            "127.0.0.1",
            "-p",
            "9",
            "--rr",
            "--flows",
            "1000",
            "-t",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--flows 1000 needs about 1064 open files"),
        "{err}"
    );
    assert!(
        err.contains("at most 500 (RLIMIT_NOFILE hard limit)"),
        "{err}"
    );
    assert!(err.contains("--flows 436 or fewer"), "{err}");
}

/// `--flows` takes 65,536 (flow ids 0..=65,535 fill a u16), not one more: 65,537 is a usage
/// error naming the range, and 65,536 gets past parsing to the next check (this machine's
/// open-file limit or the port space), which refuses it with its own numbers.
#[test]
fn flows_stop_at_65536_with_a_usage_error_naming_the_range() {
    let run = |flows: &str| {
        xbench_with_nofile(500, 500)
            .args(["client", "127.0.0.1", "-p", "9", "--rr", "--flows", flows])
            .args(["-t", "1"])
            .output()
            .unwrap()
    };
    let out = run("65537");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--flows"), "{err}");
    assert!(err.contains("must be between 1 and 65536"), "{err}");
    let out = run("65536");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("between 1 and"), "{err}");
    assert!(err.contains("--flows 65536 "), "{err}");
}

/// A soft limit below what --flows needs is raised to the hard one, and the test runs.
#[test]
fn a_low_soft_file_limit_is_raised_for_many_flows() {
    let mut server = ServerProc::start(&[]);
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit to fill.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) };
    assert_eq!(got, 0);
    if hard.rlim_max < 700 {
        panic!(
            "this test needs a hard open-file limit of 700, not {}",
            hard.rlim_max
        );
    }
    let out = xbench_with_nofile(256, hard.rlim_max)
        .args(["client", "127.0.0.1", "-p", &server.port()])
        .args(["--rr", "--flows", "600", "-t", "0.5", "-i", "0"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.kill();
}

#[test]
fn one_off_server_exits_after_one_test() {
    let mut server = ServerProc::start(&["--one-off"]);
    let out = xbench()
        .args(["client", "127.0.0.1", "-p", &server.port(), "-t", "0.3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let until = Instant::now() + Duration::from_secs(10);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "--one-off server still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_prints_what_was_measured_and_exits_130() {
    let child = xbench()
        .args(["client", "-t", "30", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    signal(&child, libc::SIGINT);
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "slow to stop");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    assert_eq!(doc["outcome"]["status"], "interrupted");
    let rx = doc["summary"]["directions"][0]["receiver"]["bytes"]
        .as_u64()
        .unwrap();
    assert!(rx > 0);
}

#[test]
fn ctrl_c_while_the_server_has_not_answered_exits_130_at_once() {
    // A listener that accepts and never speaks: the client would wait 5 s for a preamble.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    let child = xbench()
        .args(["client", "127.0.0.1", "-p", &port, "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, libc::SIGINT);
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(2), "slow to stop");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted while connecting"), "{err}");
    drop(silent);
}

#[test]
fn json_file_is_written_even_when_interrupted() {
    let dir = std::env::temp_dir().join(format!("xbench-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.json");
    let child = xbench()
        .args(["client", "-t", "30", "--json-file"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    signal(&child, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_valid(&schema(), &doc);
    assert_eq!(doc["outcome"]["status"], "interrupted");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_real_iperf3_client_is_served_and_denied_under_a_key() {
    let Ok(probe) = Command::new("iperf3").arg("--version").output() else {
        assert!(std::env::var("CI").is_err(), "CI installs iperf3");
        return;
    };
    assert!(probe.status.success());
    let iperf3 = |port: &str| {
        Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-p", port, "-t", "1", "-b", "100M", "-J"])
            .output()
            .unwrap()
    };
    // The xbench binary's server runs an iperf3 client's test in iperf3's protocol.
    let server = ServerProc::start(&[]);
    let out = iperf3(&server.port());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got = doc["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap();
    assert!(
        (90e6..110e6).contains(&got),
        "received {got} bit/s of 100M: {text}"
    );
    // And the server is still there for xbench clients.
    let ok = xbench()
        .args(["client", "127.0.0.1", "-p", &server.port(), "-t", "0.3"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    // A server locked with a key cannot check an iperf3 client's: iperf3's access-denied state.
    let dir = std::env::temp_dir().join(format!("xbench-ip3-psk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("server.key");
    std::fs::write(&key, "correct horse battery staple 1234\n").unwrap();
    let locked = ServerProc::start(&["--psk-file", key.to_str().unwrap()]);
    // (iperf3 3.12 names that state "the server is busy", and with -J exits 0 even so.)
    let out = iperf3(&locked.port());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["error"].is_string(), "{doc}");
    assert_eq!(doc["intervals"], serde_json::json!([]), "{doc}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn live_text_lines_arrive_while_the_test_runs() {
    let mut child = xbench()
        .args(["client", "-t", "2", "-i", "0.5"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first_interval = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("[  0]") && l.contains("  0.00-"))
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{first_interval}"
    );
    for _ in lines {}
    assert!(child.wait().unwrap().success());
}

fn run_json(args: &[&str]) -> Value {
    let out = xbench()
        .arg("client")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    doc
}

#[test]
fn rr_and_crr_reports_validate_against_the_schema() {
    for args in [
        &["--rr", "-t", "1", "-i", "0.5"][..],
        &[
            "--rr", "-t", "1", "--flows", "3", "--burst", "4", "-r", "100,2K",
        ],
        &["--rr", "-t", "1", "--rate", "1k", "-O", "0.3"],
        &["--crr", "-t", "1", "--flows", "2"],
    ] {
        let doc = run_json(args);
        let s = &doc["rr"]["summary"];
        assert!(s["transactions"].as_u64().unwrap() > 0, "{args:?}");
        assert_eq!(
            s["server_transactions"], s["total_transactions"],
            "{args:?}"
        );
        let l = &s["latency"];
        assert!(l["min_us"].as_f64() <= l["p50_us"].as_f64());
        assert!(l["p99_us"].as_f64() <= l["max_us"].as_f64());
        // --rr opens its flows at the start and says how that went; --crr connects per
        // transaction and counts those in the summary instead.
        let setup = &doc["rr"]["setup"];
        if args[0] == "--crr" {
            assert!(setup.is_null(), "{args:?}: {setup}");
            continue;
        }
        let flows = doc["rr"]["flows"].as_array().unwrap().len() as u64;
        assert_eq!(setup["requested"], flows, "{args:?}: {setup}");
        assert_eq!(setup["connected"], flows, "{args:?}: {setup}");
        assert_eq!(setup["refused"], 0, "{args:?}: {setup}");
        assert_eq!(setup["timed_out"], 0, "{args:?}: {setup}");
        assert!(
            setup["seconds"].as_f64().unwrap() > 0.0,
            "{args:?}: {setup}"
        );
        assert!(
            setup["per_second"].as_f64().unwrap() > 0.0,
            "{args:?}: {setup}"
        );
    }
}

#[test]
fn rr_json_stream_validates() {
    let lines = json_stream(&["--rr", "-t", "1", "-i", "0.25"]);
    assert!(lines.iter().filter(|l| l["event"] == "rr_interval").count() >= 3);
}

#[test]
fn histogram_files_parse_back_to_the_same_percentiles() {
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    let dir = std::env::temp_dir().join(format!("xbench-hist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rr.hlog");
    let out = xbench()
        .args([
            "client", "--rr", "-t", "1.5", "-i", "0.5", "-O", "0.5", "--flows", "2", "--json",
            "--hist",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let log = std::fs::read(&file).unwrap();
    let mut merged = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    let (mut untagged, mut warmup) = (0, 0);
    for entry in IntervalLogIterator::new(&log) {
        let LogEntry::Interval(iv) = entry.unwrap() else {
            continue;
        };
        let bytes = base64_decode(iv.encoded_histogram());
        let h: hdrhistogram::Histogram<u64> = Deserializer::new()
            .deserialize(&mut std::io::Cursor::new(bytes))
            .unwrap();
        if iv.tag().is_some_and(|t| t.as_str() == "warmup") {
            warmup += 1;
            continue;
        }
        untagged += 1;
        merged.add(&h).unwrap();
    }
    assert!(
        warmup >= 1 && untagged >= 2,
        "warmup {warmup}, measured {untagged}"
    );
    let s = &doc["rr"]["summary"];
    assert_eq!(merged.len(), s["transactions"].as_u64().unwrap());
    for (q, key) in [(0.5, "p50_us"), (0.9, "p90_us"), (0.99, "p99_us")] {
        let from_log = merged.value_at_quantile(q) as f64 / 1e3;
        let reported = s["latency"][key].as_f64().unwrap();
        assert!(
            (from_log - reported).abs() <= reported * 0.002 + 0.001,
            "{key}: log {from_log} vs report {reported}"
        );
    }
    let mut hgrm = file.into_os_string();
    hgrm.push(".hgrm");
    let text = std::fs::read_to_string(&hgrm).unwrap();
    assert!(text.contains("Value     Percentile TotalCount"), "{text}");
    assert!(
        text.contains(&format!(
            "Total count    = {:12}",
            s["transactions"].as_u64().unwrap()
        )),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Standard base64, for the interval log's encoded histograms.
fn base64_decode(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c).unwrap() as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[test]
fn netperf_style_fields_print_one_line_of_values() {
    let out = xbench()
        .args([
            "client",
            "--rr",
            "-t",
            "0.5",
            "--fields",
            "min_latency,mean_latency,max_latency,stddev_latency,transaction_rate",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "3 title lines, a blank, the values: {text}");
    assert!(
        lines[0].starts_with("Minimum") && lines[2].starts_with("Microseconds"),
        "{text}"
    );
    let values: Vec<f64> = lines[4]
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(values.len(), 5);
    assert!(
        values[0] <= values[1] && values[1] <= values[2],
        "{values:?}"
    );
    assert!(values[4] > 100.0, "transactions/s: {values:?}");

    let out = xbench()
        .args([
            "client",
            "--rr",
            "-t",
            "0.3",
            "--fields",
            "P99_LATENCY,transaction_rate",
            "--fields-format",
            "keyval",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("P99_LATENCY=") && text.contains("\nTRANSACTION_RATE="),
        "{text}"
    );
}

#[test]
fn bad_request_response_flags_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--rr", "-r", "0,0"], "greater than 0"),
        (&["--rr", "-r", "1,1G"], "maximum"),
        (&["--rr", "--burst", "0"], "--burst"),
        (&["--crr", "--burst", "2"], "--burst"),
        (&["--rr", "--flows", "0"], "--flows"),
        (&["--rr", "--flows", "100000"], "--flows"),
        (&["--rr", "--rate", "0"], "--rate"),
        (&["--rr", "--rate", "-10"], "--rate"),
        (&["--flows", "4"], "add --rr or --crr"),
        (&["-r", "64,1K"], "-r applies to request/response tests"),
        (
            &["-t", "1", "--hist", "h"],
            "--hist applies to request/response tests",
        ),
        (&["--rr", "-R"], "--reverse"),
        (&["--rr", "--crr"], "--crr"),
        (&["--rr", "--fields", "nonsense"], "unknown field"),
    ];
    assert_usage_errors(&["client"], cases);
}

#[test]
fn a_server_that_stops_answering_fails_the_test_naming_the_flow_and_keeps_results() {
    let server = ServerProc::start(&[]);
    let child = xbench()
        .args([
            "client",
            "127.0.0.1",
            "-p",
            &server.port(),
            "--rr",
            "-t",
            "30",
            "-i",
            "0.5",
        ])
        .args(["--flows", "2", "--response-timeout", "1.5", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    signal(&server.child, libc::SIGSTOP);
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    signal(&server.child, libc::SIGCONT);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid(&schema(), &doc);
    let err = doc["outcome"]["error"].as_str().unwrap();
    assert!(
        err.starts_with("flow ") && err.contains("stopped answering"),
        "{err}"
    );
    assert!(
        doc["rr"]["summary"]["transactions"].as_u64().unwrap() > 0,
        "results so far are kept"
    );
    assert!(!doc["rr"]["intervals"].as_array().unwrap().is_empty());
}

#[test]
fn a_locked_down_server_serves_only_key_holders() {
    let dir = std::env::temp_dir().join(format!("xbench-psk-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (good, bad) = (dir.join("good.key"), dir.join("bad.key"));
    std::fs::write(&good, "correct horse battery staple 1234\n").unwrap();
    std::fs::write(&bad, "an entirely different key, 12345\n").unwrap();
    let mut server = ServerProc::start(&["--psk-file", good.to_str().unwrap()]);
    let client = |key: Option<&std::path::Path>| {
        let mut c = xbench();
        c.args(["client", "127.0.0.1", "-p", &server.port(), "-t", "0.3"]);
        if let Some(k) = key {
            c.arg("--psk-file").arg(k);
        }
        c.output().unwrap()
    };
    let ok = client(Some(&good));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    for (key, needle) in [
        (None, "requires a pre-shared key"),
        (Some(bad.as_path()), "keys differ"),
    ] {
        let out = client(key);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains(needle));
    }
    server.kill();
    let log: Vec<String> = server.log.try_iter().collect();
    assert!(
        log.iter()
            .any(|l| l.contains("did not prove the pre-shared key")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.contains("horse")),
        "the key leaked into the log"
    );
    drop(server);
    std::fs::write(dir.join("tiny.key"), "short").unwrap();
    let out = xbench()
        .args(["server", "-p", "0", "--psk-file"])
        .arg(dir.join("tiny.key"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16"));
    std::fs::remove_dir_all(&dir).unwrap();
}
