//! Shared by the tests that run the `xbench` binary: the binary itself, a server process of
//! it, a temporary directory removed on drop, signals to a child, and JSON Schema checks.
//! Each test binary uses part.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `xbench` binary of this build.
pub(crate) fn xbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xbench"))
}

/// An `xbench server` process for one test: its port read from its "listening on" line, its
/// log kept line by line for the test to read ([`ServerProc::log`]), and killed and reaped on
/// drop, so no server outlives the test that started it whatever the test's end.
pub(crate) struct ServerProc {
    pub(crate) child: Child,
    pub(crate) port: u16,
    /// The lines read while waiting for the port, then the rest as they come.
    pub(crate) early: Vec<String>,
    pub(crate) log: Receiver<String>,
}

impl ServerProc {
    /// `xbench server -B 127.0.0.1 -p 0` and `extra`: a free port on loopback.
    pub(crate) fn start(extra: &[&str]) -> Self {
        Self::spawn(xbench(), &["server", "-B", "127.0.0.1", "-p", "0"], extra)
    }

    /// `command` (the binary with whatever the test set on it) run with `args`, then `extra`.
    /// Waits up to 30 s for the port: a loaded machine starts a process slowly, and only a
    /// server that never listens fails here.
    pub(crate) fn spawn(mut command: Command, args: &[&str], extra: &[&str]) -> Self {
        let mut child = command
            .args(args)
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, log) = channel();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = ServerProc {
            child,
            port: 0,
            early: Vec::new(),
            log,
        };
        let addr = server
            .wait_for("listening on ", Duration::from_secs(30))
            .expect("server logs its address");
        server.port = addr.trim().rsplit(':').next().unwrap().parse().unwrap();
        server
    }

    /// What follows `marker` on the first line of the log that has it, waiting up to `limit`
    /// for it; lines read on the way are kept in [`Self::early`].
    pub(crate) fn wait_for(&mut self, marker: &str, limit: Duration) -> Option<String> {
        let after = |line: &String| line.split(marker).nth(1).map(str::to_owned);
        if let Some(found) = self.early.iter().find_map(after) {
            return Some(found);
        }
        let until = Instant::now() + limit;
        loop {
            let line = self
                .log
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .ok()?;
            let found = after(&line);
            self.early.push(line);
            if found.is_some() {
                return found;
            }
        }
    }

    /// The port as a command-line argument.
    pub(crate) fn port(&self) -> String {
        self.port.to_string()
    }

    /// Stops the server and reaps it, so its whole log has been written (the reader thread
    /// takes a moment more to pass the last lines on).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh directory under the system's temp dir, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// `xbench-test-NAME-PID`, emptied.
    pub(crate) fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("xbench-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sends `sig` to a child we spawned.
pub(crate) fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; `child` is ours and not yet reaped,
    // so its pid cannot have been reused.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Fails naming every place where `doc` breaks `schema`.
pub(crate) fn assert_valid(schema: &Value, doc: &Value) {
    let v = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

/// For each case, runs `xbench COMMAND ARGS…` and checks a usage error: exit status 2 and a
/// message on stderr that contains the case's words, without a panic.
pub(crate) fn assert_usage_errors(command: &[&str], cases: &[(&[&str], &str)]) {
    for (args, needle) in cases {
        let out = xbench().args(command).args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A network namespace with loopback up, deleted on drop (its sockets with it). The tests of
/// `-B` lists and flow space each build one; a test file adds its own methods with an `impl`.
pub(crate) struct Netns(pub(crate) String);

impl Netns {
    /// `NAME-PID`, replacing one a killed run left behind.
    pub(crate) fn new(name: &str) -> Self {
        let ns = Netns(format!("{name}-{}", std::process::id()));
        if std::path::Path::new("/run/netns").join(&ns.0).exists() {
            let _ = Command::new("ip").args(["netns", "del", &ns.0]).status();
        }
        let out = Command::new("ip")
            .args(["netns", "add", &ns.0])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip netns add {}: {}",
            ns.0,
            String::from_utf8_lossy(&out.stderr)
        );
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// `argv` inside the namespace, which must succeed; its stdout.
    pub(crate) fn run(&self, argv: &[&str]) -> String {
        let out = self.command(argv[0]).args(&argv[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `program` run inside the namespace.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }

    /// `program` with `args` run inside the namespace, its output dropped, once `ss` there
    /// lists a listening TCP socket on `on` (`host:port`); up to 10 s.
    pub(crate) fn listening(&self, program: &str, args: &[&str], on: &str) -> NsListener {
        let child = self
            .command(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let listener = NsListener(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.run(&["ss", "-H", "-n", "-l", "-t"]).contains(on) {
            assert!(
                Instant::now() < deadline,
                "{program} did not listen on {on}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        listener
    }
}

/// A program listening in a namespace ([`Netns::listening`]), killed on drop: `ip netns exec`
/// execs the program, so the child is the program itself.
pub(crate) struct NsListener(pub(crate) Child);

impl Drop for NsListener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// False (after saying why) without root; under `CI=true` a panic, since CI must run it.
#[allow(clippy::print_stderr)] // the reason a test was skipped belongs in its output
pub(crate) fn root_or_skip(test: &str) -> bool {
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
