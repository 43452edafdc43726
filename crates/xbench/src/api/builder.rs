//! Builders for a [`TestSpec`] that check every value the way the CLI does, so a program gets
//! the same refusal, naming the same field (as its CLI flag: `-P`, `--flows`), as a user of
//! `xbench client` would. Setters take plain numbers; the first bad one is kept and returned by
//! `build`, so a chain needs one `?`. Not for specs read from JSON: [`TestSpec::validate`]
//! checks those.

use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use crate::client::ClientConfig;
use crate::config::{
    Direction, EndCondition, Field, FlowCount, MAX_BLOCK_LEN, MAX_BURST, MAX_FLOWS, MAX_RR_LEN,
    MAX_STREAMS, MIN_INTERVAL, ReceiveMode, RrSpec, SpecError, TestSpec, ThroughputSpec,
    UDP_HEADER_LEN, UdpRrSpec, Workload,
};

/// Where a test's builder starts.
///
/// ```
/// use std::time::Duration;
/// use xbench::Test;
///
/// let spec = Test::throughput().streams(4).duration(Duration::from_secs(5)).reverse().build()?;
/// assert_eq!(spec.as_throughput().map(|t| t.streams.get()), Some(4));
///
/// let refused = Test::throughput().streams(0).build().unwrap_err();
/// assert_eq!(refused.to_string(), "-P: must be at least 1");
/// # Ok::<(), xbench::config::SpecError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Test;

impl Test {
    /// Bulk TCP throughput: one stream, client to server, 10 s (iperf3's defaults).
    pub fn throughput() -> ThroughputBuilder {
        ThroughputBuilder {
            common: Common::new(TestSpec::throughput()),
            tp: ThroughputSpec::default(),
        }
    }

    /// Request/response latency: one flow, one-byte requests and responses, back to back,
    /// 10 s (netperf's TCP_RR defaults).
    pub fn latency() -> LatencyBuilder {
        LatencyBuilder {
            common: Common::new(TestSpec::request_response()),
            rr: RrSpec::default(),
        }
    }
}

/// A throughput test being described; [`build`](Self::build) checks it.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct ThroughputBuilder {
    common: Common,
    tp: ThroughputSpec,
}

/// A request/response test being described; [`build`](Self::build) checks it.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until built"]
pub struct LatencyBuilder {
    common: Common,
    rr: RrSpec,
}

/// The spec and the first refusal, shared by both builders.
#[derive(Debug, Clone)]
struct Common {
    /// Everything but the workload, which each builder keeps typed and puts in on `build`.
    spec: TestSpec,
    /// Kept rather than returned at once so a chain of setters needs a single `?`.
    error: Option<SpecError>,
}

impl Common {
    fn new(spec: TestSpec) -> Self {
        Common { spec, error: None }
    }

    /// Records the first refusal; later ones would only describe a spec already refused.
    fn refuse(&mut self, field: Field, reason: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(SpecError {
                field,
                reason: reason.into(),
            });
        }
    }

    fn build(self, workload: Workload) -> Result<TestSpec, SpecError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let spec = TestSpec {
            workload,
            ..self.spec
        };
        // What one value cannot show: combinations, and bounds shared with the server.
        spec.validate()?;
        Ok(spec)
    }

    fn duration(&mut self, d: Duration) {
        if d.is_zero() {
            self.refuse(
                Field::Time,
                "must be greater than 0 (xbench has no endless mode; give a duration)",
            );
        }
        self.spec.end = EndCondition::Duration(d);
    }

    fn interval(&mut self, d: Duration) {
        if !d.is_zero() && d < MIN_INTERVAL {
            self.refuse(Field::Interval, "must be 0 (off) or at least 0.1 seconds");
        }
        self.spec.interval = (!d.is_zero()).then_some(d);
    }

    fn window(&mut self, bytes: u64) {
        if bytes == 0 {
            self.refuse(Field::Window, "must be greater than 0");
        }
        self.spec.socket.window = Some(bytes);
    }

    fn mss(&mut self, bytes: u32) {
        if let Err(why) = crate::config::check_mss(bytes) {
            self.refuse(Field::Mss, why);
        }
        self.spec.socket.mss = Some(bytes);
    }
}

/// Setters both builders share: time, reporting and socket options.
macro_rules! common_setters {
    ($workload:ident, $field:ident) => {
        /// How long the test runs after the omitted start (`-t`); more than zero.
        pub fn duration(mut self, d: Duration) -> Self {
            self.common.duration(d);
            self
        }

        /// Time at the start left out of every figure (`-O`), so slow start or connection
        /// set-up does not drag the result down.
        pub fn omit(mut self, d: Duration) -> Self {
            self.common.spec.omit = d;
            self
        }

        /// Reporting interval (`-i`): zero for none, else at least 0.1 s.
        pub fn interval(mut self, d: Duration) -> Self {
            self.common.interval(d);
            self
        }

        /// Send and receive buffers on both ends, bytes (`-w`), which bound the TCP window.
        /// Leave unset to keep the kernel's autotuning, usually the best choice.
        pub fn window(mut self, bytes: u64) -> Self {
            self.common.window(bytes);
            self
        }

        /// TCP maximum segment size, bytes (`-M`), 88 to 65495.
        pub fn mss(mut self, bytes: u32) -> Self {
            self.common.mss(bytes);
            self
        }

        /// Disables Nagle's algorithm (`-N`).
        pub fn nodelay(mut self) -> Self {
            self.common.spec.socket.nodelay = true;
            self
        }

        /// Congestion control (`-C`), e.g. `cubic` or `bbr`; both hosts must have it.
        pub fn congestion(mut self, name: impl Into<String>) -> Self {
            self.common.spec.socket.congestion = Some(name.into());
            self
        }

        /// The checked spec, or the first value refused (named by its CLI flag).
        pub fn build(self) -> Result<TestSpec, SpecError> {
            self.common.build(Workload::$workload(self.$field))
        }

        /// The checked spec as a test against `host` on the default port, with the client's
        /// defaults for everything else ([`ClientConfig::new`]).
        pub fn client(self, host: impl Into<String>) -> Result<ClientConfig, SpecError> {
            let spec = self.build()?;
            Ok(ClientConfig {
                spec,
                ..ClientConfig::new(host)
            })
        }
    };
}

impl ThroughputBuilder {
    common_setters!(Throughput, tp);

    /// Parallel TCP streams per direction (`-P`), 1 to [`MAX_STREAMS`].
    pub fn streams(mut self, n: u32) -> Self {
        match NonZeroU16::new(u16::try_from(n).unwrap_or(u16::MAX)) {
            None => self.common.refuse(Field::Streams, "must be at least 1"),
            Some(_) if n > u32::from(MAX_STREAMS) => self
                .common
                .refuse(Field::Streams, format!("at most {MAX_STREAMS} streams")),
            Some(s) => self.tp.streams = s,
        }
        self
    }

    /// Ends the test after this many bytes per direction (`-n`) instead of a time.
    pub fn bytes(mut self, n: u64) -> Self {
        if n == 0 {
            self.common.refuse(Field::Bytes, "must be greater than 0");
        }
        self.common.spec.end = EndCondition::Bytes(n);
        self
    }

    /// The server sends, the client receives (`-R`).
    pub fn reverse(mut self) -> Self {
        self.tp.direction = Direction::ServerToClient;
        self
    }

    /// Both directions at once, the stream count in each (`--bidir`).
    pub fn bidir(mut self) -> Self {
        self.tp.direction = Direction::Bidir;
        self
    }

    /// Bytes per `send()`/`recv()` (`-l`), 1 to [`MAX_BLOCK_LEN`]; 128 KiB by default.
    pub fn block_len(mut self, bytes: u64) -> Self {
        match u32::try_from(bytes).ok().and_then(NonZeroU32::new) {
            _ if bytes > u64::from(MAX_BLOCK_LEN) => self.common.refuse(
                Field::Length,
                format!("at most {} MiB", MAX_BLOCK_LEN >> 20),
            ),
            None => self.common.refuse(Field::Length, "must be greater than 0"),
            Some(b) => self.tp.block_len = b,
        }
        self
    }

    /// Most each stream sends, bits per second (`-b`, per stream as in iperf3); at least
    /// 8 kbit/s. The kernel paces the connection.
    pub fn bitrate(mut self, bits_per_second: u64) -> Self {
        if bits_per_second == 0 {
            self.common.refuse(Field::Bitrate, "must be greater than 0");
        }
        self.tp.bitrate = Some(bits_per_second);
        self
    }

    /// Sends with `sendfile(2)` (`-Z`): less CPU per byte, the same bytes on the wire.
    pub fn zerocopy(mut self) -> Self {
        self.tp.zerocopy = true;
        self
    }

    /// Receivers copy every byte to user space (`--recv-copy`), as an application does,
    /// instead of letting the kernel discard it.
    pub fn recv_copy(mut self) -> Self {
        self.tp.receive = ReceiveMode::Copy;
        self
    }
}

impl LatencyBuilder {
    common_setters!(RequestResponse, rr);

    /// Concurrent connections (`--flows`), 1 to [`MAX_FLOWS`].
    pub fn flows(mut self, n: u32) -> Self {
        match FlowCount::new(n) {
            Some(f) => self.rr.flows = f,
            _ => self
                .common
                .refuse(Field::Flows, format!("must be between 1 and {MAX_FLOWS}")),
        }
        self
    }

    /// Request and response sizes, bytes (`-r REQ,RESP`), each 1 byte to 16 MiB.
    pub fn sizes(mut self, request: u64, response: u64) -> Self {
        match (rr_len(request), rr_len(response)) {
            (Ok(q), Ok(p)) => {
                let rr = &mut self.rr;
                rr.request_len = q;
                rr.response_len = p;
            }
            (Err(e), _) | (_, Err(e)) => self.common.refuse(Field::RrSize, e),
        }
        self
    }

    /// Transactions in flight per flow (`--burst`), 1 to [`MAX_BURST`]; 1 is ping-pong.
    pub fn burst(mut self, n: u32) -> Self {
        match NonZeroU32::new(n) {
            Some(b) if n <= MAX_BURST => self.rr.burst = b,
            _ => self
                .common
                .refuse(Field::Burst, format!("must be between 1 and {MAX_BURST}")),
        }
        self
    }

    /// Paces each flow at this many transactions per second (`--rate`); latency is then
    /// measured from each transaction's intended start, so stalls are not hidden.
    pub fn rate(mut self, per_flow_per_second: f64) -> Self {
        let r = per_flow_per_second;
        if let Err(e) = crate::config::rate_per_flow(r, &r.to_string()) {
            self.common.refuse(Field::Rate, e.to_string());
        }
        self.rr.rate_per_flow = Some(r);
        self
    }

    /// A new connection for every transaction (`--crr`): connect, request, response, close.
    pub fn connect_per_transaction(mut self) -> Self {
        self.rr.connect_per_transaction = true;
        self
    }

    /// UDP instead of TCP (`--rr -u`, netperf's UDP_RR): each request and response one
    /// datagram, a request unanswered after [`rr_timeout`](Self::rr_timeout) (1 s) counted as
    /// lost. Sizes still at the one-byte default become xbench's 24-byte header, the
    /// smallest a UDP request can be.
    pub fn udp(mut self) -> Self {
        self.rr.udp.get_or_insert_with(UdpRrSpec::default);
        let least = NonZeroU32::new(UDP_HEADER_LEN).unwrap_or(NonZeroU32::MIN);
        let rr = &mut self.rr;
        if rr.request_len == NonZeroU32::MIN && rr.response_len == NonZeroU32::MIN {
            rr.request_len = least;
            rr.response_len = least;
        }
        self
    }

    /// How long a UDP request waits for its response before it counts as lost
    /// (`--rr-timeout`), 1 ms to 60 s; implies [`udp`](Self::udp).
    pub fn rr_timeout(mut self, timeout: Duration) -> Self {
        if timeout.is_zero() {
            self.common.refuse(
                Field::RrTimeout,
                "must be greater than 0 (xbench has no endless mode; give a duration)",
            );
        }
        self = self.udp();
        if let Some(u) = self.rr.udp.as_mut() {
            u.timeout = timeout;
        }
        self
    }
}

/// One request or response size, checked as `-r` checks it.
fn rr_len(bytes: u64) -> Result<NonZeroU32, String> {
    if bytes > u64::from(MAX_RR_LEN) {
        return Err(format!(
            "`{bytes}` is larger than the {} MiB maximum",
            MAX_RR_LEN >> 20
        ));
    }
    u32::try_from(bytes)
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| "must be greater than 0".to_owned())
}
