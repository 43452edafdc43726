//! Memory and CPU of many request/response flows on loopback (issue 22): `xbench client --rr
//! --flows N` at 1, 1,000, 4,096 and 16,384 flows, each against a fresh `xbench server` in
//! its own process, so each end's memory and CPU are its own.
//!
//! Per row: the client's peak RSS (from `wait4`'s rusage), the server's (`VmHWM` from
//! /proc, read after the client exits and before the server is stopped), the RSS each flow
//! adds over the 1-flow row, and each end's CPU (user + system) in two parts: setup, until
//! the process's request/response worker threads appear (connecting or accepting every flow,
//! shown per connection), and the run, from then until the end (transactions, intervals, the
//! drain and the final results), per transaction the client completed. Both are read from
//! /proc (`stat`, sampled every few milliseconds while the test runs) and, for the client's
//! end, `wait4`; the whole-process figure is shown beside them. The bars (issue 22): each
//! flow adds at most 8 KB to either end, and at 16,384 flows the run's CPU per transaction
//! is within 1.5× of the 1-flow row's, at each end. Setup is not a transaction's cost: at
//! 16,384 flows it is seconds of a 5-second test (the kernel's search for a free local port
//! grows with the ports in use), and folded in it made the per-transaction figure measure the
//! test's length. Transactions per second on a shared 2-core machine wander too much to be a
//! bar, and are shown only.
//!
//! 65,536 flows is not run: these machines' hard `RLIMIT_NOFILE` is 20,000 per process
//! (a flow is a socket at each end), so planning tests check that size instead. The server
//! raises its soft file limit to the hard one at start (`xbench`'s `main`), so 16,384 flows
//! need no `prlimit` here; `--max-flows` (the row's flows) and `--max-handshakes` (twice
//! that, the least the server accepts) are passed explicitly, since their defaults (4,096 and
//! 8,192) are below 16,384.
//!
//! `XBENCH_BENCH_ROUNDS` (default 3) runs every row that many times, interleaved, and shows
//! medians; `XBENCH_BENCH_SECS` (default 5) is each test's `-t`; `XBENCH_BENCH_FLOWS`
//! (default `1,1000,4096,16384`) picks the rows; `XBENCH_BENCH_STRICT=1` exits 1 when a bar
//! is missed, and a row that could not run counts as missed. `XBENCH_BENCH_BIN` runs that
//! `xbench` binary instead of building this tree's (a before/after comparison runs the bench
//! once with each, interleaved by the caller). Extra words after `--` go to
//! every client (`cargo bench -p xbench-benches --bench rr_flows -- --per-flow`, `-u`, or
//! `--crr` instead of `--rr`).

#![allow(clippy::print_stdout, clippy::print_stderr)] // a benchmark reports on the terminal
#![allow(clippy::unwrap_used)] // and panics on a broken setup

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use xbench_benches::harness::{
    build_xbench, env_or, free_port, load_average, median_of, report_bars, wait_listening,
    wait_with_usage,
};

/// Issue 22's memory bar: bytes each flow may add to either end's peak RSS.
const RSS_PER_FLOW_BAR: f64 = 8.0 * 1024.0;
/// Issue 22's CPU bar: CPU per transaction at the largest row over the 1-flow row's.
const CPU_RATIO_BAR: f64 = 1.5;
/// The row the CPU bar is checked at.
const CPU_BAR_FLOWS: u32 = 16_384;

fn main() {
    let rounds: usize = env_or("XBENCH_BENCH_ROUNDS", 3).max(1);
    let secs: u64 = env_or("XBENCH_BENCH_SECS", 5).max(1);
    let flows = flows_from_env();
    // `cargo bench` passes `--bench`; everything else after `--` is the client's.
    let extra: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let xbench = std::env::var_os("XBENCH_BENCH_BIN").map_or_else(build_xbench, PathBuf::from);
    println!(
        "xbench client {}-t {secs} on loopback, {rounds} interleaved round(s), a fresh \
         server per test, {} CPUs, {}",
        if extra.iter().any(|a| a == "--crr") {
            ""
        } else {
            "--rr "
        }
        .to_owned()
            + &extra.iter().map(|a| format!("{a} ")).collect::<String>(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    let (results, failures) = run_rounds(&xbench, &flows, rounds, secs, &extra);
    let medians: Vec<Option<Row>> = results.iter().map(|v| Row::median(v)).collect();
    let base = flows
        .iter()
        .position(|&n| n == 1)
        .and_then(|i| medians[i].clone());
    print_header();
    let mut misses = Vec::new();
    for (&n, m) in flows.iter().zip(&medians) {
        let Some(r) = m else {
            println!("{n:>6} not run");
            continue;
        };
        print_row(n, r, base.as_ref(), &mut misses);
        if n > 1
            && let Some(b) = &base
        {
            print_cpu_ratios(n, r, b, &mut misses);
        }
    }
    for (n, e) in failures {
        let none_ran = flows
            .iter()
            .zip(&medians)
            .any(|(&f, m)| f == n && m.is_none());
        if none_ran {
            misses.push(format!("{n} flows: not run: {e}"));
        }
    }
    if base.is_none() {
        println!("(no 1-flow row: per-flow memory and the CPU ratio are not computed)");
    }
    report_bars(&misses);
}

/// The rows' flow counts, from `XBENCH_BENCH_FLOWS` (exits 2 on a word that is not a
/// number): apart from [`main`] so the knob's parsing reads on its own.
fn flows_from_env() -> Vec<u32> {
    std::env::var("XBENCH_BENCH_FLOWS")
        .unwrap_or_else(|_| "1,1000,4096,16384".into())
        .split(',')
        .map(|n| {
            n.trim().parse().unwrap_or_else(|_| {
                eprintln!("XBENCH_BENCH_FLOWS: `{n}` is not a number of flows");
                std::process::exit(2);
            })
        })
        .collect()
}

/// Every row `rounds` times, interleaved: each row's figures, in `flows`' order, and the
/// first error of each row that failed. Apart from [`main`], which reports on them.
fn run_rounds(
    xbench: &Path,
    flows: &[u32],
    rounds: usize,
    secs: u64,
    extra: &[String],
) -> (Vec<Vec<Row>>, Vec<(u32, String)>) {
    let mut results: Vec<Vec<Row>> = flows.iter().map(|_| Vec::new()).collect();
    let mut failures: Vec<(u32, String)> = Vec::new();
    for round in 0..rounds {
        for (i, &n) in flows.iter().enumerate() {
            match run_row(xbench, n, secs, extra) {
                Ok(r) => results[i].push(r),
                Err(e) => {
                    eprintln!("  round {}, {n} flows: {e}", round + 1);
                    if !failures.iter().any(|(f, _)| *f == n) {
                        failures.push((n, e));
                    }
                }
            }
        }
        eprintln!("  round {} of {rounds} done", round + 1);
    }
    (results, failures)
}

/// The table's two heading lines.
fn print_header() {
    println!(
        "\n{:>6} {:>9} {:>12} {:>12} {:>12} {:>12} {:>13} {:>13} {:>14} {:>14}",
        "flows",
        "trans/s",
        "client peak",
        "server peak",
        "client/flow",
        "server/flow",
        "client µs/tx",
        "server µs/tx",
        "c setup µs/fl",
        "s setup µs/fl"
    );
    println!(
        "{:>82}",
        "(CPU per transaction from the workers' start; setup per flow before it)"
    );
}

/// Row `r` of `n` flows: its figures, the RSS each flow adds over the 1-flow row `base`, and
/// a miss for each end over the memory bar. Apart from the CPU ratios, its own bar.
fn print_row(n: u32, r: &Row, base: Option<&Row>, misses: &mut Vec<String>) {
    let per_flow = |now: f64, one: f64| (now - one) / f64::from(n - 1);
    let (cf, sf) = match (base, n > 1) {
        (Some(b), true) => (
            Some(per_flow(r.client_peak, b.client_peak)),
            Some(per_flow(r.server_peak, b.server_peak)),
        ),
        _ => (None, None),
    };
    let kib = |v: Option<f64>| v.map_or(String::new(), |b| format!("{:.1} KiB", b / 1024.0));
    println!(
        "{n:>6} {:>9.0} {:>8.1} MiB {:>8.1} MiB {:>12} {:>12} {:>13.2} {:>13.2} {:>14.1} {:>14.1}",
        r.tps,
        r.client_peak / MIB,
        r.server_peak / MIB,
        kib(cf),
        kib(sf),
        r.client_us_per_tx,
        r.server_us_per_tx,
        r.client_setup_us_per_flow,
        r.server_setup_us_per_flow
    );
    println!(
        "{:>6} whole process, setup included: client {:.2} µs/tx, server {:.2} µs/tx",
        "", r.client_whole_us_per_tx, r.server_whole_us_per_tx
    );
    for (side, v) in [("client", cf), ("server", sf)] {
        if let Some(b) = v
            && b > RSS_PER_FLOW_BAR
        {
            misses.push(format!(
                "{n} flows: each flow adds {:.1} KiB to the {side}'s peak RSS (bar: 8 KiB)",
                b / 1024.0
            ));
        }
    }
}

/// Each end's CPU per transaction in row `r` of `n` flows over the 1-flow row `b`'s, and a
/// miss where it breaks the CPU bar at [`CPU_BAR_FLOWS`].
fn print_cpu_ratios(n: u32, r: &Row, b: &Row, misses: &mut Vec<String>) {
    for (side, now, one, whole) in [
        (
            "client",
            r.client_us_per_tx,
            b.client_us_per_tx,
            r.client_whole_us_per_tx / b.client_whole_us_per_tx,
        ),
        (
            "server",
            r.server_us_per_tx,
            b.server_us_per_tx,
            r.server_whole_us_per_tx / b.server_whole_us_per_tx,
        ),
    ] {
        let ratio = now / one;
        let bar = if n == CPU_BAR_FLOWS {
            format!(" (bar: ≤ {CPU_RATIO_BAR}×)")
        } else {
            String::new()
        };
        println!(
            "       {side} CPU per transaction {ratio:.2}× the 1-flow row's{bar}; \
             {whole:.2}× with setup"
        );
        if n == CPU_BAR_FLOWS && ratio > CPU_RATIO_BAR {
            misses.push(format!(
                "{n} flows: {side} CPU per transaction {ratio:.2}× the 1-flow row's \
                 (bar: {CPU_RATIO_BAR}×)"
            ));
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// One test's figures: bytes for memory, microseconds for CPU.
#[derive(Debug, Clone)]
struct Row {
    tps: f64,
    client_peak: f64,
    server_peak: f64,
    /// From the workers' start to the end.
    client_us_per_tx: f64,
    server_us_per_tx: f64,
    /// Before the workers started, per flow.
    client_setup_us_per_flow: f64,
    server_setup_us_per_flow: f64,
    /// The whole process.
    client_whole_us_per_tx: f64,
    server_whole_us_per_tx: f64,
}

impl Row {
    /// Each figure's median over the rounds.
    fn median(rows: &[Row]) -> Option<Row> {
        if rows.is_empty() {
            return None;
        }
        let m = |f: fn(&Row) -> f64| median_of(rows, f);
        Some(Row {
            tps: m(|r| r.tps),
            client_peak: m(|r| r.client_peak),
            server_peak: m(|r| r.server_peak),
            client_us_per_tx: m(|r| r.client_us_per_tx),
            server_us_per_tx: m(|r| r.server_us_per_tx),
            client_setup_us_per_flow: m(|r| r.client_setup_us_per_flow),
            server_setup_us_per_flow: m(|r| r.server_setup_us_per_flow),
            client_whole_us_per_tx: m(|r| r.client_whole_us_per_tx),
            server_whole_us_per_tx: m(|r| r.server_whole_us_per_tx),
        })
    }
}

/// One client against a fresh server.
fn run_row(xbench: &Path, flows: u32, secs: u64, extra: &[String]) -> Result<Row, String> {
    let port = free_port();
    // `--max-flows` is a u16; a row beyond it is the client's to refuse, and the row says so.
    let max_flows = flows.clamp(1, u32::from(u16::MAX));
    // The server insists on room for twice its flows in the handshake (it checks).
    let handshakes = (2 * max_flows).to_string();
    let max_flows = max_flows.to_string();
    let mut server = Command::new(xbench)
        .args(["server", "-B", "127.0.0.1", "-p", &port.to_string()])
        .args(["--max-flows", &max_flows, "--max-handshakes", &handshakes])
        // Its one client may hold the whole descriptor budget: 16,384 flows are more than
        // the default half of this machine's 20,000.
        .args(["--client-share", "100%"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    let result = measure_row(xbench, port, flows, secs, extra, &server);
    let _ = server.kill();
    let _ = server.wait();
    if result.is_err()
        && let Some(mut e) = server.stderr.take()
    {
        let mut s = String::new();
        let _ = e.read_to_string(&mut s);
        if !s.trim().is_empty() {
            eprintln!("  server said: {}", last_line(&s));
        }
    }
    result
}

/// The client's test against `server` (listening on `port`, or about to) and the row's
/// figures from both ends: [`run_row`]'s measuring, apart from starting and stopping the
/// server around it.
fn measure_row(
    xbench: &Path,
    port: u16,
    flows: u32,
    secs: u64,
    extra: &[String],
    server: &Child,
) -> Result<Row, String> {
    wait_listening(port)?;
    let client = Command::new(xbench)
        .args(["client", "127.0.0.1", "-p", &port.to_string()])
        // `--crr` is a mode of its own; anything else (-u, --per-flow) goes with --rr.
        .args((!extra.iter().any(|a| a == "--crr")).then_some("--rr"))
        .args([
            "--flows",
            &flows.to_string(),
            "-t",
            &secs.to_string(),
            "--json",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the client: {e}"))?;
    let watching = Arc::new(AtomicBool::new(true));
    let setup = watch_setup(client.id(), server.id(), Arc::clone(&watching));
    let finished = finish(client);
    watching.store(false, Ordering::Relaxed);
    let (c_setup, s_setup) = setup.join().unwrap_or((None, None));
    let (out, err, ok, c_cpu, c_peak) = finished?;
    if !ok {
        let err = String::from_utf8_lossy(&err);
        return Err(format!("the client failed: {}", last_line(&err)));
    }
    let doc: Value = serde_json::from_slice(&out).map_err(|e| format!("the client's JSON: {e}"))?;
    let s = &doc["rr"]["summary"];
    let tx = s["total_transactions"]
        .as_f64()
        .ok_or("no transaction count")?;
    if tx < 1.0 {
        return Err("no transaction completed".into());
    }
    // The server's last answers are a few scheduler slices behind the client's exit.
    std::thread::sleep(Duration::from_millis(300));
    let (s_peak, s_cpu) = proc_figures(server.id())?;
    let (Some(c_setup), Some(s_setup)) = (c_setup, s_setup) else {
        return Err(
            "no request/response worker thread appeared at one end (a thread \
                    named xb-rr-…), so its setup could not be told from its run"
                .into(),
        );
    };
    let n = f64::from(flows);
    Ok(Row {
        tps: s["transactions_per_second"].as_f64().unwrap_or(0.0),
        client_peak: c_peak,
        server_peak: s_peak,
        client_us_per_tx: (c_cpu - c_setup).max(0.0) * 1e6 / tx,
        server_us_per_tx: (s_cpu - s_setup).max(0.0) * 1e6 / tx,
        client_setup_us_per_flow: c_setup * 1e6 / n,
        server_setup_us_per_flow: s_setup * 1e6 / n,
        client_whole_us_per_tx: c_cpu * 1e6 / tx,
        server_whole_us_per_tx: s_cpu * 1e6 / tx,
    })
}

/// The server's peak RSS (`VmHWM`, bytes) and CPU seconds (user + system) so far.
fn proc_figures(pid: u32) -> Result<(f64, f64), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading the server's /proc status: {e}"))?;
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or("no VmHWM in the server's /proc status")?;
    let cpu = cpu_seconds(pid).ok_or("no CPU times in the server's /proc stat")?;
    Ok((hwm_kib * 1024.0, cpu))
}

/// A process's CPU seconds (user + system) so far, from /proc (clock ticks: 10 ms here).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3: utime is 14th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((ticks(11)? + ticks(12)?) / hz)
}

/// Each process's CPU seconds when its first request/response worker thread appeared (named
/// `xb-rr-…`; workers start once every flow is connected): its setup. Looks every 2 ms
/// until both have been seen or `watching` is cleared.
fn watch_setup(
    client: u32,
    server: u32,
    watching: Arc<AtomicBool>,
) -> JoinHandle<(Option<f64>, Option<f64>)> {
    std::thread::spawn(move || {
        let (mut c, mut s) = (None, None);
        while watching.load(Ordering::Relaxed) && (c.is_none() || s.is_none()) {
            for (pid, mark) in [(client, &mut c), (server, &mut s)] {
                if mark.is_none() && has_rr_worker(pid) {
                    *mark = cpu_seconds(pid);
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        (c, s)
    })
}

/// Whether a request/response worker thread runs in `pid` (not the one that joins them at
/// the end).
fn has_rr_worker(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("comm"))
            .is_ok_and(|c| c.starts_with("xb-rr-") && !c.starts_with("xb-rr-join"))
    })
}

/// A child that has exited: its stdout, stderr, success, CPU seconds (user + system) and peak
/// RSS (bytes), the last two from `wait4`.
type Finished = (Vec<u8>, Vec<u8>, bool, f64, f64);

/// Waits for a child (at most 180 s).
fn finish(mut child: Child) -> Result<Finished, String> {
    // Read both pipes on threads: a child blocked on a full stderr would never exit.
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let exited = wait_with_usage(&mut child, Duration::from_secs(180), "the client")?;
    Ok((
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
        exited.success,
        exited.cpu_seconds,
        exited.peak_rss_bytes,
    ))
}

/// The line of a child's stderr that says what went wrong: its first error line, else its
/// last line (clap follows its error with a line about `--help`).
fn last_line(s: &str) -> &str {
    let s = s.trim();
    s.lines()
        .find(|l| l.starts_with("error") || l.starts_with("xbench:"))
        .or_else(|| s.lines().last())
        .unwrap_or("(nothing on stderr)")
}
