//! What makes two runs repeats of the same measurement: the [`CellKey`], built from a test's
//! spec (or an iperf3 file's settings), and its short name on disk and in tables.
//!
//! A cell is one point of a sweep: a workload with its streams, window, request/response sizes
//! and flows. Runs of one label and one cell are averaged together; anything else is compared.
//! This module does not read files (see `load`) or compute statistics (see `stats`).

use std::fmt::{self, Write as _};

use serde::Serialize;
use xbench::config::{Direction, TestSpec, Workload};

/// The kind of traffic a run measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Bulk TCP throughput (`xbench client`, `iperf3`).
    Throughput,
    /// Request/response over persistent connections (`--rr`).
    Rr,
    /// A connection per transaction (`--crr`).
    Crr,
    /// UDP datagrams at an offered rate (`-u`), counted one by one at the receiver.
    Udp,
    /// Latency under load (`--under-load`): probes through idle, loaded and idle phases, the
    /// load TCP bulk streams. A kind of its own, not throughput: its streams share the path
    /// with probes and run between idle phases, so their rate is not a plain throughput
    /// cell's repeat, and its figures are the probes' latency.
    UnderLoad,
}

impl Kind {
    /// Request/response kinds, whose figures are latencies and rates rather than bits.
    pub fn is_rr(self) -> bool {
        matches!(self, Kind::Rr | Kind::Crr)
    }
}

/// Which way a throughput test sent its data, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestDirection {
    /// The client sends (the default).
    ClientToServer,
    /// The server sends (`-R`).
    ServerToClient,
    /// Both at once (`--bidir`).
    Bidir,
}

impl From<Direction> for TestDirection {
    fn from(d: Direction) -> Self {
        match d {
            Direction::ClientToServer => TestDirection::ClientToServer,
            Direction::ServerToClient => TestDirection::ServerToClient,
            Direction::Bidir => TestDirection::Bidir,
        }
    }
}

/// Which program measured a run. Kept in the key so that imported iperf3 runs sit beside
/// xbench runs in a table instead of being averaged into them: the tools count differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// xbench's own report.
    Xbench,
    /// An `iperf3 -J` file.
    Iperf3,
}

/// Everything that makes runs comparable as repeats. Fields that do not apply to the kind are
/// `None`. Ordering sorts cells as a reader expects: kind, direction, then streams, window,
/// sizes and flows ascending.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct CellKey {
    /// Throughput or request/response.
    pub kind: Kind,
    /// Throughput tests: which way the data went.
    pub direction: Option<TestDirection>,
    /// Which program measured.
    pub tool: Tool,
    /// UDP tests: datagram size, bytes (`-l`), xbench's header included.
    pub datagram_bytes: Option<u32>,
    /// UDP tests: the offered rate, payload bits per second of all streams of a direction
    /// (`-b`); 0 unpaced. Sorted before the streams, so a sweep's rows climb in rate.
    #[serde(rename = "offered_bits_per_second")]
    pub bitrate: Option<u64>,
    /// Throughput tests: parallel streams per direction (`-P`).
    pub streams: Option<u16>,
    /// Socket buffer asked for with `-w`, bytes; `None` left the kernel to autotune.
    #[serde(rename = "window_bytes")]
    pub window: Option<u64>,
    /// Request/response: request size, bytes.
    pub request_bytes: Option<u32>,
    /// Request/response: response size, bytes.
    pub response_bytes: Option<u32>,
    /// Request/response: concurrent connections (`--flows`).
    pub flows: Option<u32>,
    /// Request/response: transactions in flight per connection (`--burst`).
    pub burst: Option<u32>,
    /// Request/response: pacing per flow, transactions per second, as written (`--rate`).
    pub rate: Option<String>,
    /// MSS asked for with `-M`, bytes.
    pub mss: Option<u32>,
    /// Congestion control asked for with `-C`.
    pub congestion: Option<String>,
    /// Latency under load: whether TCP probes ran beside the UDP ones (`--tcp-probe`), which
    /// changes what the responsiveness (RPM) averages; `None` for other kinds.
    pub tcp_probe: Option<bool>,
}

impl CellKey {
    /// The cell of an xbench test.
    pub fn of_spec(spec: &TestSpec) -> CellKey {
        let mut key = CellKey {
            kind: Kind::Throughput,
            direction: None,
            tool: Tool::Xbench,
            datagram_bytes: None,
            bitrate: None,
            streams: None,
            window: spec.socket.window,
            request_bytes: None,
            response_bytes: None,
            flows: None,
            burst: None,
            rate: None,
            mss: spec.socket.mss,
            congestion: spec.socket.congestion.clone(),
            tcp_probe: None,
        };
        match &spec.workload {
            Workload::Throughput(t) => {
                key.direction = Some(t.direction.into());
                key.streams = Some(t.streams.get());
                if let Some(u) = &t.udp {
                    key.kind = Kind::Udp;
                    key.datagram_bytes = Some(u.datagram_len);
                    key.bitrate = Some(u.bitrate.unwrap_or(0));
                } else if let Some(ul) = &t.under_load {
                    key.kind = Kind::UnderLoad;
                    key.tcp_probe = Some(ul.tcp_probe);
                    // A paced load (`-b`, per stream) fills the queue less than an unpaced
                    // one: the latency it adds is another measurement. `None` unpaced.
                    key.bitrate = t.bitrate;
                }
            }
            Workload::RequestResponse(r) => {
                key.kind = if r.connect_per_transaction {
                    Kind::Crr
                } else {
                    Kind::Rr
                };
                key.request_bytes = Some(r.request_len.get());
                key.response_bytes = Some(r.response_len.get());
                key.flows = Some(r.flows.get());
                key.burst = Some(r.burst.get());
                key.rate = r.rate_per_flow.map(|r| r.to_string());
            }
            // A workload this crate does not know yet still gets a cell of its own.
            _ => {}
        }
        key
    }

    /// A short, filesystem-safe name that differs between any two cells of one sweep, used
    /// as the directory of the cell's runs: `tcp-up-P4-w256K`, `rr-64x16K-f4`.
    pub fn slug(&self) -> String {
        let mut s = String::new();
        match self.kind {
            Kind::Throughput | Kind::Udp => {
                s.push_str(if self.kind == Kind::Udp { "udp" } else { "tcp" });
                s.push_str(match self.direction {
                    Some(TestDirection::ServerToClient) => "-down",
                    Some(TestDirection::Bidir) => "-bidir",
                    _ => "-up",
                });
            }
            Kind::Rr => s.push_str("rr"),
            Kind::Crr => s.push_str("crr"),
            // `ul-both`: the load's direction as `--under-load` names it.
            Kind::UnderLoad => {
                s.push_str("ul-");
                s.push_str(load_name(self.direction));
            }
        }
        if self.tool == Tool::Iperf3 {
            s.push_str("-iperf3");
        }
        if let Some(b) = self.bitrate {
            let _ = write!(s, "-b{}", short_rate(b));
        }
        if let Some(l) = self.datagram_bytes {
            let _ = write!(s, "-l{l}");
        }
        if let Some(p) = self.streams {
            let _ = write!(s, "-P{p}");
        }
        if let (Some(q), Some(r)) = (self.request_bytes, self.response_bytes) {
            let _ = write!(s, "-{}x{}", short_size(q.into()), short_size(r.into()));
        }
        if let Some(f) = self.flows {
            let _ = write!(s, "-f{f}");
        }
        if let Some(b) = self.burst.filter(|b| *b > 1) {
            let _ = write!(s, "-b{b}");
        }
        if let Some(r) = &self.rate {
            let _ = write!(s, "-rate{r}");
        }
        if let Some(w) = self.window {
            let _ = write!(s, "-w{}", short_size(w));
        }
        if let Some(m) = self.mss {
            let _ = write!(s, "-M{m}");
        }
        if let Some(c) = &self.congestion {
            let _ = write!(s, "-C{c}");
        }
        if self.tcp_probe == Some(true) {
            s.push_str("-tcpprobe");
        }
        s
    }

    /// The cell's settings as a reader sees them in a table: `P=4 w=256K`, `-r 64,16K flows=4`.
    /// The kind and direction head the table section instead.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(b) = self.bitrate {
            parts.push(format!("b={}", short_rate(b)));
        }
        if let Some(l) = self.datagram_bytes {
            parts.push(format!("l={l}"));
        }
        if let Some(p) = self.streams {
            parts.push(format!("P={p}"));
        }
        if self.kind == Kind::UnderLoad {
            // The load's direction is the cell's subject: `P=4 load=both`.
            parts.push(format!("load={}", load_name(self.direction)));
        } else if self.direction == Some(TestDirection::Bidir) {
            // A table section is one stream direction; --bidir runs must not look like -R
            // runs.
            parts.push("bidir".into());
        }
        if let (Some(q), Some(r)) = (self.request_bytes, self.response_bytes) {
            parts.push(format!(
                "-r {},{}",
                short_size(q.into()),
                short_size(r.into())
            ));
        }
        if let Some(f) = self.flows {
            parts.push(format!("flows={f}"));
        }
        if let Some(b) = self.burst.filter(|b| *b > 1) {
            parts.push(format!("burst={b}"));
        }
        if let Some(r) = &self.rate {
            parts.push(format!("rate={r}/s"));
        }
        if let Some(w) = self.window {
            parts.push(format!("w={}", short_size(w)));
        }
        if let Some(m) = self.mss {
            parts.push(format!("M={m}"));
        }
        if let Some(c) = &self.congestion {
            parts.push(format!("C={c}"));
        }
        if self.tcp_probe == Some(true) {
            parts.push("tcp-probe".into());
        }
        if self.tool == Tool::Iperf3 {
            parts.push("(iperf3)".into());
        }
        if parts.is_empty() {
            parts.push("default".into());
        }
        parts.join(" ")
    }

    /// The same cell with one dimension left out, for grouping runs into chart series whose
    /// x axis is that dimension.
    pub(crate) fn without(&self, dim: Dimension) -> CellKey {
        let mut k = self.clone();
        match dim {
            Dimension::Streams => k.streams = None,
            Dimension::Window => k.window = None,
        }
        k
    }
}

impl fmt::Display for CellKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A swept dimension a chart can put on its x axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dimension {
    Streams,
    Window,
}

/// The load's direction as `--under-load` takes it: `up`, `down`, `both`.
fn load_name(d: Option<TestDirection>) -> &'static str {
    match d {
        Some(TestDirection::ServerToClient) => "down",
        Some(TestDirection::Bidir) => "both",
        _ => "up",
    }
}

/// Bits per second as `-b` takes them: `100M`, `1G`, `2500k`; `0` (unpaced) as `0`.
pub fn short_rate(b: u64) -> String {
    for (m, u) in [(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")] {
        if b >= m && b.is_multiple_of(m) {
            return format!("{}{u}", b / m);
        }
    }
    b.to_string()
}

/// Bytes as a sweep list writes them: `256K`, `4M`, `1500B` when not a whole multiple.
pub fn short_size(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (m, u) in UNITS {
        if b >= m && b.is_multiple_of(m) {
            return format!("{}{u}", b / m);
        }
    }
    if b < 1024 {
        // Request/response sizes are often a few bytes: `1x1` reads better than `1Bx1B`.
        return b.to_string();
    }
    format!("{b}B")
}

#[cfg(test)]
mod tests {
    use std::num::{NonZeroU16, NonZeroU32};

    use xbench::config::{RrSpec, ThroughputSpec};

    use super::*;

    #[test]
    fn slugs_name_every_swept_value() {
        let mut spec = TestSpec::throughput();
        spec.workload = Workload::Throughput(ThroughputSpec {
            streams: NonZeroU16::new(4).unwrap(),
            ..ThroughputSpec::default()
        });
        spec.socket.window = Some(256 << 10);
        let k = CellKey::of_spec(&spec);
        assert_eq!(k.slug(), "tcp-up-P4-w256K");
        assert_eq!(k.describe(), "P=4 w=256K");

        let mut spec = TestSpec::request_response();
        spec.workload = Workload::RequestResponse(RrSpec {
            request_len: NonZeroU32::new(64).unwrap(),
            response_len: NonZeroU32::new(16 << 10).unwrap(),
            flows: xbench::config::FlowCount::new(4).unwrap(),
            ..RrSpec::default()
        });
        let k = CellKey::of_spec(&spec);
        assert_eq!(k.kind, Kind::Rr);
        assert_eq!(k.slug(), "rr-64x16K-f4");
        assert_eq!(k.describe(), "-r 64,16K flows=4");
    }

    #[test]
    fn udp_cells_name_their_rate_and_datagram_size() {
        let mut spec = TestSpec::throughput();
        spec.workload = Workload::Throughput(ThroughputSpec {
            udp: Some(xbench::config::UdpSpec {
                datagram_len: 1400,
                bitrate: Some(100_000_000),
            }),
            direction: Direction::ServerToClient,
            ..ThroughputSpec::default()
        });
        let k = CellKey::of_spec(&spec);
        assert_eq!(k.kind, Kind::Udp);
        assert_eq!(k.slug(), "udp-down-b100M-l1400-P1");
        assert_eq!(k.describe(), "b=100M l=1400 P=1");
        if let Workload::Throughput(t) = &mut spec.workload {
            t.udp = Some(xbench::config::UdpSpec {
                datagram_len: 64,
                bitrate: None,
            });
        }
        let unpaced = CellKey::of_spec(&spec);
        assert_eq!(unpaced.slug(), "udp-down-b0-l64-P1");
        assert!(unpaced < k, "unpaced sorts first");
        assert_eq!(short_rate(2_500_000), "2500k");
        assert_eq!(short_rate(1_000_000_000), "1G");
        assert_eq!(short_rate(1234), "1234");
    }

    /// Issue 34: an under-load run was keyed as a plain throughput cell of the same settings,
    /// so its rate was averaged with plain runs' and its files shared their directory.
    #[test]
    fn under_load_cells_are_their_own_kind_named_by_the_loads_direction() {
        let mut spec = TestSpec::throughput();
        spec.workload = Workload::Throughput(ThroughputSpec {
            streams: NonZeroU16::new(4).unwrap(),
            direction: Direction::Bidir,
            ..ThroughputSpec::default()
        });
        let plain = CellKey::of_spec(&spec);
        if let Workload::Throughput(t) = &mut spec.workload {
            t.under_load = Some(xbench::under_load::UnderLoadSpec::default());
        }
        let ul = CellKey::of_spec(&spec);
        assert_eq!(ul.kind, Kind::UnderLoad);
        assert_ne!(ul, plain);
        assert_ne!(ul.slug(), plain.slug());
        assert_eq!(ul.slug(), "ul-both-P4");
        assert_eq!(ul.describe(), "P=4 load=both");
        assert_eq!(plain.describe(), "P=4 bidir");
        assert_eq!(plain.tcp_probe, None);

        // TCP probes change what the responsiveness averages; a paced load is another load.
        if let Workload::Throughput(t) = &mut spec.workload {
            t.direction = Direction::ServerToClient;
            t.bitrate = Some(50_000_000);
            t.under_load = Some(xbench::under_load::UnderLoadSpec {
                tcp_probe: true,
                ..Default::default()
            });
        }
        let k = CellKey::of_spec(&spec);
        assert_eq!(k.slug(), "ul-down-b50M-P4-tcpprobe");
        assert_eq!(k.describe(), "b=50M P=4 load=down tcp-probe");
        let json = serde_json::to_value(&k).unwrap();
        assert_eq!(json["kind"], "under_load");
        assert_eq!(json["tcp_probe"], true);
        assert_eq!(json["offered_bits_per_second"], 50_000_000);
    }

    #[test]
    fn cells_sort_by_streams_numerically() {
        let key = |p| CellKey {
            streams: Some(p),
            ..CellKey::of_spec(&TestSpec::throughput())
        };
        let mut v = [key(16), key(2), key(1), key(8)];
        v.sort();
        let p: Vec<u16> = v.iter().filter_map(|k| k.streams).collect();
        assert_eq!(p, [1, 2, 8, 16]);
    }

    #[test]
    fn sizes_read_like_flags() {
        assert_eq!(short_size(1), "1");
        assert_eq!(short_size(65536), "64K");
        assert_eq!(short_size(4 << 20), "4M");
        assert_eq!(short_size(1000), "1000");
        assert_eq!(short_size(1500), "1500B");
        assert_eq!(short_size(1025), "1025B");
    }
}
