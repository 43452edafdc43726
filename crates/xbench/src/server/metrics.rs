//! What a long-running server has done, for an operator's scraper: tests started, finished
//! (by how they ended) and refused (by reason), tests running, bytes and datagrams moved by
//! protocol (xbench, iperf3), transport and direction, handshakes that failed (by reason), and
//! the server's own CPU time — rendered as OpenMetrics text or Prometheus' text format 0.0.4
//! ([`Metrics::render`]), served over HTTP by [`serve`] (`xbench server --metrics ADDR:PORT`).
//!
//! The rest of the server only counts events here: a test's counters are held by its
//! [`TestMetrics`], which a running test may give a way to read its streams' counters
//! ([`TestMetrics::watch`]), so a scrape in the middle of a long test sees its bytes so far;
//! when the test ends its final figures replace that, in one step under one lock, so no
//! counter ever goes down. Events are per test and per refused connection, never per packet:
//! a mutex costs nothing here. Not the limits themselves (`admission`, `gate`, `governor`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info};

/// Which protocol a test spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Protocol {
    Xbench,
    Iperf3,
}

/// What a test measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Bulk TCP.
    Tcp,
    /// UDP datagrams at a rate.
    Udp,
    /// Request/response (TCP_RR, TCP_CRR, UDP_RR).
    Rr,
}

/// Which transport carried bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Transport {
    Tcp,
    Udp,
}

/// Which way, seen from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Direction {
    Received,
    Sent,
}

/// Data moved one way on one transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Moved {
    pub(crate) bytes: u64,
    /// Datagrams (UDP only).
    pub(crate) datagrams: u64,
}

/// A test's data so far: (transport, direction, moved).
pub(crate) type Progress = Vec<(Transport, Direction, Moved)>;

type Source = Box<dyn Fn() -> Progress + Send + Sync>;

/// The server's counters.
#[derive(Default)]
pub(crate) struct Metrics {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Inner {
    started: BTreeMap<(Protocol, Kind), u64>,
    finished: BTreeMap<(Protocol, Kind, &'static str), u64>,
    refused: BTreeMap<&'static str, u64>,
    handshakes_failed: BTreeMap<&'static str, u64>,
    moved: BTreeMap<(Protocol, Transport, Direction), Moved>,
    /// Running tests: their protocol and kind, and how to read their data so far.
    running: BTreeMap<u64, (Protocol, Kind, Option<Source>)>,
    next: u64,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A test has started: it counts as running until its [`TestMetrics`] finishes or drops.
    pub(crate) fn test_started(self: &Arc<Self>, protocol: Protocol, kind: Kind) -> TestMetrics {
        let mut m = self.lock();
        *m.started.entry((protocol, kind)).or_default() += 1;
        m.next += 1;
        let id = m.next;
        m.running.insert(id, (protocol, kind, None));
        TestMetrics {
            metrics: Arc::clone(self),
            id,
            protocol,
            kind,
            done: AtomicBool::new(false),
        }
    }

    /// A test request refused (a limit, a bad request, the server shutting down).
    pub(crate) fn refused(&self, reason: &'static str) {
        *self.lock().refused.entry(reason).or_default() += 1;
    }

    /// A connection that never became a test or a data connection (silence, garbage, a wrong
    /// key or version, outside `--allow`, too many handshakes at once).
    pub(crate) fn handshake_failed(&self, reason: &'static str) {
        *self.lock().handshakes_failed.entry(reason).or_default() += 1;
    }

    /// Every counter as text: OpenMetrics 1.0 when `openmetrics`, else the Prometheus text
    /// format 0.0.4 (which names counters by their `_total` samples and has no `# EOF`).
    pub(crate) fn render(&self, openmetrics: bool) -> String {
        // Long on purpose: one /metrics document, its families in exposition order, all read under
        // one lock of the counters (so the families agree); a table of families, each a few lines.
        let m = self.lock();
        let mut moved = m.moved.clone();
        let mut active: BTreeMap<Protocol, u64> = BTreeMap::new();
        for (protocol, _, source) in m.running.values() {
            *active.entry(*protocol).or_default() += 1;
            for (t, d, x) in source.as_ref().map(|s| s()).unwrap_or_default() {
                let e = moved.entry((*protocol, t, d)).or_default();
                e.bytes += x.bytes;
                e.datagrams += x.datagrams;
            }
        }
        let mut w = Writer {
            out: String::new(),
            openmetrics,
            counter: false,
        };
        w.family(
            "xbench_tests_started",
            "counter",
            "",
            "Tests admitted, by protocol and kind.",
        );
        for ((p, k), n) in &m.started {
            w.sample(
                "xbench_tests_started",
                &[("protocol", p.name()), ("kind", k.name())],
                *n as f64,
            );
        }
        w.family(
            "xbench_tests_finished",
            "counter",
            "",
            "Tests ended, by protocol, kind and outcome.",
        );
        for ((p, k, o), n) in &m.finished {
            w.sample(
                "xbench_tests_finished",
                &[("protocol", p.name()), ("kind", k.name()), ("outcome", o)],
                *n as f64,
            );
        }
        w.family(
            "xbench_tests_refused",
            "counter",
            "",
            "Test requests refused, by reason.",
        );
        for (r, n) in &m.refused {
            w.sample("xbench_tests_refused", &[("reason", r)], *n as f64);
        }
        w.family(
            "xbench_tests_active",
            "gauge",
            "",
            "Tests running now, by protocol.",
        );
        for p in [Protocol::Xbench, Protocol::Iperf3] {
            let n = active.get(&p).copied().unwrap_or(0);
            w.sample("xbench_tests_active", &[("protocol", p.name())], n as f64);
        }
        w.family(
            "xbench_data_bytes",
            "counter",
            "bytes",
            "Payload bytes moved by tests, by protocol, transport and direction (the server's).",
        );
        for ((p, t, d), x) in &moved {
            w.sample(
                "xbench_data_bytes",
                &[
                    ("protocol", p.name()),
                    ("transport", t.name()),
                    ("direction", d.name()),
                ],
                x.bytes as f64,
            );
        }
        w.family(
            "xbench_datagrams",
            "counter",
            "",
            "UDP datagrams moved by tests, by protocol and direction (the server's).",
        );
        for ((p, t, d), x) in &moved {
            if *t == Transport::Udp {
                w.sample(
                    "xbench_datagrams",
                    &[("protocol", p.name()), ("direction", d.name())],
                    x.datagrams as f64,
                );
            }
        }
        w.family(
            "xbench_handshakes_failed",
            "counter",
            "",
            "Connections that never became a test or a data connection, by reason.",
        );
        for (r, n) in &m.handshakes_failed {
            w.sample("xbench_handshakes_failed", &[("reason", r)], *n as f64);
        }
        drop(m);
        let (user, system) = own_cpu();
        w.family(
            "xbench_cpu_seconds",
            "counter",
            "seconds",
            "CPU time of the server process, by mode.",
        );
        w.sample("xbench_cpu_seconds", &[("mode", "user")], user);
        w.sample("xbench_cpu_seconds", &[("mode", "system")], system);
        if openmetrics {
            w.out.push_str("# EOF\n");
        }
        w.out
    }
}

/// A running test's counters. Dropped without [`TestMetrics::finish`] (a test that failed on
/// the way), it ends the test as `failed`, keeping what it moved.
pub(crate) struct TestMetrics {
    metrics: Arc<Metrics>,
    id: u64,
    protocol: Protocol,
    kind: Kind,
    done: AtomicBool,
}

impl std::fmt::Debug for TestMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestMetrics").field("id", &self.id).finish()
    }
}

impl TestMetrics {
    /// How to read the test's data so far, for scrapes while it runs. Call once its streams
    /// exist; it is read under the metrics' lock, so it must only read counters.
    pub(crate) fn watch(&self, source: impl Fn() -> Progress + Send + Sync + 'static) {
        if let Some(r) = self.metrics.lock().running.get_mut(&self.id) {
            r.2 = Some(Box::new(source));
        }
    }

    /// Ends the test as `outcome`: its data are `moved` when given (the test's final
    /// figures), else what [`TestMetrics::watch`]'s source reads now. Once only.
    pub(crate) fn finish(&self, outcome: &'static str, moved: Option<Progress>) {
        if self.done.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut m = self.metrics.lock();
        let source = m.running.remove(&self.id).and_then(|r| r.2);
        let moved = moved.or_else(|| source.map(|s| s())).unwrap_or_default();
        for (t, d, x) in moved {
            let e = m.moved.entry((self.protocol, t, d)).or_default();
            e.bytes += x.bytes;
            e.datagrams += x.datagrams;
        }
        *m.finished
            .entry((self.protocol, self.kind, outcome))
            .or_default() += 1;
    }
}

impl Drop for TestMetrics {
    fn drop(&mut self) {
        self.finish("failed", None);
    }
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Xbench => "xbench",
            Protocol::Iperf3 => "iperf3",
        }
    }
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
            Kind::Rr => "rr",
        }
    }
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Received => "received",
            Direction::Sent => "sent",
        }
    }
}

struct Writer {
    out: String,
    openmetrics: bool,
    /// The family being written is a counter: its samples end in `_total`.
    counter: bool,
}

impl Writer {
    fn family(&mut self, name: &str, kind: &str, unit: &str, help: &str) {
        // OpenMetrics names a counter family without its `_total`; 0.0.4 names the samples.
        let typed = if kind == "counter" && !self.openmetrics {
            format!("{name}_total")
        } else {
            name.to_owned()
        };
        let _ = writeln!(self.out, "# TYPE {typed} {kind}");
        if self.openmetrics && !unit.is_empty() {
            let _ = writeln!(self.out, "# UNIT {typed} {unit}");
        }
        let _ = writeln!(self.out, "# HELP {typed} {help}");
        self.counter = kind == "counter";
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        let suffix = if self.counter { "_total" } else { "" };
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = writeln!(
            self.out,
            "{name}{suffix}{{{}}} {}",
            labels.join(","),
            number(v)
        );
    }
}

/// A label value as the text formats escape it.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Integers without a fraction; other values as Rust writes them (both formats read it).
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// User and system CPU seconds of this process so far.
fn own_cpu() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct we pass; RUSAGE_SELF is always valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `ru` outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// Serves `metrics` over HTTP on `listener` until the task is aborted (with the server): `GET /metrics` (OpenMetrics
/// when the scraper's `Accept` asks for it, else Prometheus' text format), a 404 elsewhere.
/// `allow` (`--allow`) applies: other clients are closed without an answer. One request per
/// connection, each bounded in size and time, so a slow or hostile peer holds one task.
pub(crate) async fn serve(listener: TcpListener, metrics: Arc<Metrics>, allow: Vec<IpNet>) {
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let ip = peer.ip().to_canonical();
                if !allow.is_empty() && !allow.iter().any(|n| n.contains(&ip)) {
                    info!(%peer, "refused a metrics scrape from outside the --allow list");
                    continue;
                }
                // At most a few scrapes at once: a scraper asks once every few seconds.
                if tasks.len() >= 16 {
                    debug!(%peer, "dropped a metrics connection: 16 already open");
                    continue;
                }
                tasks.spawn(answer(stream, peer, Arc::clone(&metrics)));
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// The most of a request read: a scraper's GET with its headers is a few hundred bytes.
const MAX_REQUEST: usize = 8 * 1024;

async fn answer(mut stream: TcpStream, peer: SocketAddr, metrics: Arc<Metrics>) {
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        debug!(%peer, "metrics request not read in time");
        return;
    }
    let head = String::from_utf8_lossy(&buf);
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let openmetrics = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text")
        })
    });
    let (status, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET" | "HEAD", "/metrics") => {
            let ctype = if openmetrics {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                "text/plain; version=0.0.4; charset=utf-8"
            };
            ("200 OK", ctype, metrics.render(openmetrics))
        }
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "xbench serves its metrics at /metrics\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_owned(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        stream.write_all(response.as_bytes()),
    )
    .await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's bytes show while it runs (from its source) and stay when it finishes (its
    /// final figures replace the source): no counter goes down.
    #[test]
    fn counters_grow_while_a_test_runs_and_keep_its_final_figures() {
        let m = Arc::new(Metrics::default());
        let t = m.test_started(Protocol::Xbench, Kind::Tcp);
        let so_far = Arc::new(std::sync::atomic::AtomicU64::new(1000));
        let s = Arc::clone(&so_far);
        t.watch(move || {
            vec![(
                Transport::Tcp,
                Direction::Received,
                Moved {
                    bytes: s.load(Ordering::Relaxed),
                    datagrams: 0,
                },
            )]
        });
        let text = m.render(true);
        assert!(
            text.contains("xbench_tests_active{protocol=\"xbench\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "xbench_data_bytes_total{protocol=\"xbench\",transport=\"tcp\",direction=\"received\"} 1000\n"
            ),
            "{text}"
        );
        so_far.store(5000, Ordering::Relaxed);
        t.finish("completed", None);
        drop(t);
        let text = m.render(true);
        assert!(text.contains("direction=\"received\"} 5000\n"), "{text}");
        assert!(
            text.contains("xbench_tests_active{protocol=\"xbench\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "xbench_tests_finished_total{protocol=\"xbench\",kind=\"tcp\",outcome=\"completed\"} 1\n"
            ),
            "{text}"
        );
        // A test dropped on the way ends as failed.
        drop(m.test_started(Protocol::Iperf3, Kind::Udp));
        assert!(m.render(true).contains("outcome=\"failed\"} 1\n"));
        assert!(m.render(true).ends_with("# EOF\n"));
        let prom = m.render(false);
        assert!(
            prom.contains("# TYPE xbench_tests_started_total counter\n"),
            "{prom}"
        );
        assert!(!prom.contains("# EOF"));
    }
}
