//! What the process-level benches (`compare`, `rr_flows`) share: building the shipped binary,
//! finding a port and waiting for a server on it, waiting for a child with its CPU and
//! memory, reading the machine's load, the medians their interleaved rounds report, and the
//! bars missed.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `name`'s value parsed, or `default` when it is unset or does not parse.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The machine's load, which moves every figure the benches print: other processes take the
/// CPUs.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "load average unknown".into(),
        |l| {
            let v: Vec<&str> = l.split_whitespace().take(3).collect();
            format!("load average {}", v.join(" "))
        },
    )
}

/// Builds the release `xbench` binary (the benches measure the shipped binary, its CPU and
/// memory, not in-process code) and returns its path.
///
/// # Panics
/// When cargo cannot be run or the build fails: a bench has nothing to measure then.
pub fn build_xbench() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "xbench-cli",
            "--bin",
            "xbench",
        ])
        .status()
        .expect("cannot run cargo");
    assert!(status.success(), "building xbench failed");
    let target =
        std::env::var("CARGO_TARGET_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
    target.join("release").join("xbench")
}

/// A loopback port nothing listens on now.
///
/// # Panics
/// When loopback cannot be bound at all.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("cannot bind a loopback port")
        .port()
}

/// Waits until something listens on `port` (read from /proc, so no probe connection
/// disturbs a one-test server).
pub fn wait_listening(port: u16) -> Result<(), String> {
    let hex = format!(":{port:04X}");
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
            if let Ok(t) = std::fs::read_to_string(f) {
                // local_address is the second column; state 0A is LISTEN.
                if t.lines().any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && cols[1].ends_with(&hex) && cols[3] == "0A"
                }) {
                    return Ok(());
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!("nothing listened on port {port} within 10 s"))
}

/// How a child that [`wait_with_usage`] waited for ended, from the kernel's rusage of it.
#[derive(Debug, Clone, Copy)]
pub struct Exited {
    /// It exited with status 0.
    pub success: bool,
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Peak RSS, bytes.
    pub peak_rss_bytes: f64,
}

/// Waits for `child` (at most `limit`; then it is killed and the error names it `what`) and
/// returns its exit and rusage. `wait4`, not `Child::wait`: the CPU and memory figures every
/// bench reports are the kernel's count for that one process.
pub fn wait_with_usage(child: &mut Child, limit: Duration, what: &str) -> Result<Exited, String> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, filled by wait4 on success.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let deadline = Instant::now() + limit;
    loop {
        // SAFETY: waits for our own child; `status` and `ru` are valid for writing.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if rc == pid {
            break;
        }
        if rc < 0 {
            return Err(format!("wait4: {}", std::io::Error::last_os_error()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{what} did not exit within {} s", limit.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Exited {
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        cpu_seconds: tv(ru.ru_utime) + tv(ru.ru_stime),
        // ru_maxrss is in KiB on Linux.
        peak_rss_bytes: ru.ru_maxrss as f64 * 1024.0,
    })
}

/// The median; NaN for no values.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median of one figure (`figure`) over `runs`; NaN for none. What every table of the
/// interleaved rounds shows.
pub fn median_of<T>(runs: &[T], figure: impl Fn(&T) -> f64) -> f64 {
    median(runs.iter().map(figure).collect())
}

/// The bench's closing lines: the machine's load at the end, and the bars missed (`misses`)
/// or that all were met; with `XBENCH_BENCH_STRICT=1`, exits 1 when one was missed. Shared, so
/// every bench ends and fails alike.
#[allow(clippy::print_stdout)] // a benchmark reports on the terminal
pub fn report_bars(misses: &[String]) {
    println!("\nat the end: {}", load_average());
    if misses.is_empty() {
        println!("\nall bars met");
    } else {
        println!("\nbars missed:");
        for m in misses {
            println!("  - {m}");
        }
        if std::env::var("XBENCH_BENCH_STRICT").is_ok_and(|v| v == "1") {
            std::process::exit(1);
        }
    }
}
