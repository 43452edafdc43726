//! Headless Chromium driven over the DevTools protocol, for tests that check a page as a
//! person sees it: what it draws at a window's width, what a mouse or a key does to it, what
//! it logs and which requests it makes.
//!
//! The protocol goes over a pair of pipes (`--remote-debugging-pipe`: commands on the child's
//! descriptor 3, answers and events on 4, each message JSON ended by a NUL byte), so no port
//! is opened and nothing but std and serde_json is needed. A reader thread hands messages over
//! a channel, so every wait has a timeout instead of hanging a test on a stuck browser.

#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long one answer may take: generous, since CI runs every test binary at once on two
/// loaded cores and Chromium's start alone can take seconds there.
const WAIT: Duration = Duration::from_secs(120);

/// The Chromium binary, when installed.
pub(crate) fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Chromium, or `None` after saying why this test does not run; under `CI=true` a panic,
/// since CI installs Chromium (scripts/test-all) and must run these tests.
pub(crate) fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "{test} needs Chromium (apt-get install chromium) and CI=true forbids skipping it"
        );
        eprintln!("SKIPPED {test}: Chromium is not installed (apt-get install chromium)");
    }
    found
}

/// A headless Chromium with one page, killed on drop.
pub(crate) struct Browser {
    child: Child,
    to: File,
    from: Receiver<Value>,
    next: u64,
    session: String,
    /// Every event of the page seen so far (console, log, network), in order.
    pub(crate) events: Vec<Value>,
    profile: PathBuf,
}

impl Browser {
    /// Starts `chromium` with a fresh profile under `dir`, opens a page and enables the
    /// domains the checks read (console, log, network, page).
    pub(crate) fn start(chromium: &Path, dir: &Path) -> Browser {
        let profile = dir.join("chromium-profile");
        std::fs::create_dir_all(&profile).unwrap();
        let (ours_to, theirs_in) = pipe();
        let (theirs_out, ours_from) = pipe();
        // Above any descriptor the child could already use as 3 or 4, so the dup2s below
        // never overwrite one another.
        let (cin, cout) = (high(&theirs_in), high(&theirs_out));
        let mut cmd = Command::new(chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--mute-audio",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let (cin_fd, cout_fd) = (cin.as_raw_fd(), cout.as_raw_fd());
        // SAFETY: between fork and exec the closure only calls dup2, which is
        // async-signal-safe, and allocates nothing; the descriptors stay open in the parent
        // until spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cin_fd, 3) < 0 || libc::dup2(cout_fd, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("starting chromium");
        drop((cin, cout, theirs_in, theirs_out));
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(File::from(ours_from));
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                let Ok(v) = serde_json::from_slice::<Value>(&buf) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut b = Browser {
            child,
            to: File::from(ours_to),
            from: rx,
            next: 0,
            session: String::new(),
            events: Vec::new(),
            profile,
        };
        let target = b.call_browser("Target.createTarget", json!({"url": "about:blank"}));
        let id = target["targetId"].as_str().expect("a target id").to_owned();
        let attached = b.call_browser(
            "Target.attachToTarget",
            json!({"targetId": id, "flatten": true}),
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        for domain in ["Page", "Runtime", "Log", "Network"] {
            b.call(&format!("{domain}.enable"), json!({}));
        }
        b
    }

    /// Sets the window: `width` × `height` CSS pixels, a phone's touch and viewport rules when
    /// `mobile`.
    pub(crate) fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        );
    }

    /// Opens `url` and waits for its load event.
    pub(crate) fn open(&mut self, url: &str) {
        let seen = self.events.len();
        let r = self.call("Page.navigate", json!({ "url": url }));
        assert!(r.get("errorText").is_none(), "navigating to {url}: {r}");
        self.wait_event("Page.loadEventFired", seen);
    }

    /// The value of a JavaScript expression in the page (promises awaited); an exception
    /// fails the test with its text.
    pub(crate) fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("evaluating {expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Moves the mouse to (`x`, `y`), CSS pixels in the window.
    pub(crate) fn hover(&mut self, x: f64, y: f64) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": "mouseMoved", "x": x, "y": y}),
        );
    }

    /// Clicks at (`x`, `y`) with the left button.
    pub(crate) fn click(&mut self, x: f64, y: f64) {
        for t in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": t, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Presses a key as a keyboard does: `Enter`, `Tab`, `ArrowRight`…
    pub(crate) fn key(&mut self, key: &str) {
        let (code, text) = match key {
            "Enter" => (13, "\r"),
            "Tab" => (9, ""),
            "Escape" => (27, ""),
            "ArrowLeft" => (37, ""),
            "ArrowUp" => (38, ""),
            "ArrowRight" => (39, ""),
            "ArrowDown" => (40, ""),
            " " => (32, " "),
            other => panic!("no key code for {other}"),
        };
        let code_name = if key == " " { "Space" } else { key };
        let mut down = json!({"type": "keyDown", "key": key, "code": code_name,
            "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code});
        if !text.is_empty() {
            down["text"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down);
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": code_name,
                "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}),
        );
    }

    /// The whole page as a PNG, at the window's width.
    pub(crate) fn screenshot(&mut self) -> Vec<u8> {
        self.screenshot_clip(None)
    }

    /// The page's top `height` CSS pixels (or all of it) as a PNG.
    pub(crate) fn screenshot_clip(&mut self, height: Option<f64>) -> Vec<u8> {
        let m = self.call("Page.getLayoutMetrics", json!({}));
        let w = m["cssContentSize"]["width"].as_f64().unwrap_or(800.0);
        let full = m["cssContentSize"]["height"].as_f64().unwrap_or(600.0);
        let h = height.map_or(full, |h| h.min(full));
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}}),
        );
        base64_decode(r["data"].as_str().expect("screenshot data"))
    }

    /// The page printed to PDF, as a printer would get it.
    pub(crate) fn pdf(&mut self) -> Vec<u8> {
        let r = self.call("Page.printToPDF", json!({"printBackground": false}));
        base64_decode(r["data"].as_str().expect("PDF data"))
    }

    /// Sends a command to the page's session and returns its result.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(method, params, Some(&session))
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("writing to chromium");
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.recv(deadline, method);
            if v.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    /// Waits for an event `method` among those after the first `seen`.
    fn wait_event(&mut self, method: &str, seen: usize) {
        if self.events[seen..].iter().any(|e| e["method"] == method) {
            return;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.recv(deadline, method);
            let done = v["method"] == method;
            self.events.push(v);
            if done {
                return;
            }
        }
    }

    fn recv(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.from.recv_timeout(left) {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => {
                panic!("chromium did not answer {waiting_for} in {WAIT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("chromium exited while {waiting_for} was pending")
            }
        }
    }

    /// Console messages, uncaught exceptions and log entries (a blocked request, a policy
    /// violation) at warning level or above, as text.
    pub(crate) fn complaints(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.consoleAPICalled"
                        if matches!(p["type"].as_str(), Some("error" | "warning" | "assert")) =>
                    {
                        Some(format!("console.{}: {}", p["type"], p["args"]))
                    }
                    "Runtime.exceptionThrown" => {
                        Some(format!("exception: {}", p["exceptionDetails"]))
                    }
                    "Log.entryAdded"
                        if matches!(p["entry"]["level"].as_str(), Some("error" | "warning")) =>
                    {
                        Some(format!("log: {}", p["entry"]))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// The URL of every request the page made, in order.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// A pipe: (write end, read end)… named for the side that uses each: `(writer, reader)`.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (write, read)
}

/// A close-on-exec copy of `fd` numbered 10 or above.
fn high(fd: &OwnedFd) -> OwnedFd {
    // SAFETY: F_DUPFD_CLOEXEC on an open descriptor has no memory-safety preconditions.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    assert!(n >= 10, "fcntl: {}", std::io::Error::last_os_error());
    // SAFETY: fcntl returned a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(n) }
}

/// Standard base64, as the protocol sends binary data.
fn base64_decode(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => continue,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
