//! What a test is: the client's request, sent to the server as-is and echoed in every report.
//!
//! These types are the wire contract as well as the library API, so each field says its unit.
//! Values a client built through the CLI are already well-formed ([`NonZeroU16`] streams, a
//! [`Duration`]); [`TestSpec::validate`] exists for the server, which must not trust its peer,
//! and for embedders who build a spec by hand.

use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::field::Field;

/// Most streams one test may ask for, client side. The server has its own, lower, limit.
pub const MAX_STREAMS: u16 = 1024;
/// Largest block one `send()` writes (bytes).
pub const MAX_BLOCK_LEN: u32 = 64 << 20;
/// Shortest reporting interval.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Most request/response flows (connections) one test may ask for: 65,536, so that flow ids
/// 0..=65,535 fill a `u16` on the wire exactly (the count itself travels as a JSON number).
/// Past one local address's ephemeral ports they need `-B` addresses to come from
/// ([`crate::client::flow_plan`]).
pub const MAX_FLOWS: u32 = 1 << 16;
/// Largest request or response of a request/response test (bytes).
pub const MAX_RR_LEN: u32 = 16 << 20;
/// Most transactions in flight per request/response flow.
pub const MAX_BURST: u32 = 1024;
/// Highest pacing rate per flow (transactions per second).
pub const MAX_RATE_PER_FLOW: f64 = 10_000_000.0;
/// The TCP maximum segment sizes a test may ask for (`-M`), bytes.
pub const MSS_RANGE: std::ops::RangeInclusive<u32> = 88..=65_495;

/// `bytes` if a test may ask for it as its MSS ([`MSS_RANGE`]), else why not: the one rule
/// `-M`'s parser, the builders and [`TestSpec::validate`] share, in the words they all give.
pub fn check_mss(bytes: u32) -> Result<u32, String> {
    if MSS_RANGE.contains(&bytes) {
        Ok(bytes)
    } else {
        Err(format!(
            "MSS must be between {} and {} bytes",
            MSS_RANGE.start(),
            MSS_RANGE.end()
        ))
    }
}

/// Why a request/response pacing rate (`--rate`, a suite's `rate`) was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// Neither a number of transactions per second nor a gap between them.
    #[error("`{0}` is not a rate; give transactions per second (200) or a gap (10ms)")]
    NotARate(String),
    /// A gap that is not a time.
    #[error(transparent)]
    Gap(#[from] crate::units::TimeError),
    /// A gap of nothing: an endless rate.
    #[error("the time between transactions must be above 0")]
    ZeroGap,
    /// Zero, negative or not finite.
    #[error("`{0}` must be above 0")]
    NotPositive(String),
    /// Above [`MAX_RATE_PER_FLOW`].
    #[error("at most {MAX_RATE_PER_FLOW} transactions per second per flow")]
    TooHigh,
}

/// A pacing rate per flow as people type it: transactions per second (`200`, `1.5k`) or the
/// gap between them (`10ms`, `500us`, as netperf's `-w`), checked by [`rate_per_flow`]. The one
/// parser of rates for `xbench client --rate` and deploy's suite files.
pub fn parse_rate_per_flow(s: &str) -> Result<f64, RateError> {
    let t = s.trim();
    let tps = if t.ends_with('s') {
        let gap = crate::units::parse_duration(t)?;
        if gap.is_zero() {
            return Err(RateError::ZeroGap);
        }
        1.0 / gap.as_secs_f64()
    } else {
        let (num, mult) = match t.strip_suffix(['k', 'K']) {
            Some(n) => (n, 1e3),
            None => (t, 1.0),
        };
        let v: f64 = num
            .trim()
            .parse()
            .map_err(|_| RateError::NotARate(t.to_owned()))?;
        v * mult
    };
    rate_per_flow(tps, t)
}

/// `tps` transactions per second per flow if a test can pace at it: above 0 and at most
/// [`MAX_RATE_PER_FLOW`]; `shown` is how the user wrote it. The rule the parser, the builder
/// ([`crate::LatencyBuilder::rate`]) and deploy's suites share.
pub fn rate_per_flow(tps: f64, shown: &str) -> Result<f64, RateError> {
    if !tps.is_finite() || tps <= 0.0 {
        return Err(RateError::NotPositive(shown.to_owned()));
    }
    if tps > MAX_RATE_PER_FLOW {
        return Err(RateError::TooHigh);
    }
    Ok(tps)
}

/// Longest test a spec may describe (a week); servers cap this far lower by default.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The full description of one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    /// What traffic to generate.
    pub workload: Workload,
    /// When the test ends.
    pub end: EndCondition,
    /// Time at the start left out of the totals, so slow start does not drag the mean down.
    #[serde(with = "secs")]
    pub omit: Duration,
    /// How often to report; `None` reports only the summary.
    #[serde(with = "opt_secs")]
    pub interval: Option<Duration>,
    /// Socket settings applied on both ends of every data connection.
    pub socket: SocketOptions,
}

/// The kind of traffic a test generates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Workload {
    /// Bulk TCP transfer over parallel streams (iperf3's default test).
    Throughput(ThroughputSpec),
    /// Request/response transactions and their latency (netperf's TCP_RR and TCP_CRR).
    RequestResponse(RrSpec),
}

/// Request/response settings (`--rr`, `--crr`).
///
/// A transaction is a `request_len`-byte request and the `response_len`-byte response to it;
/// its latency runs from the request's start to the response's last byte. The bytes carry no
/// headers, so a one-byte transaction is one byte each way, as in netperf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrSpec {
    /// Request size, bytes (`-r REQ,RESP`).
    pub request_len: NonZeroU32,
    /// Response size, bytes.
    pub response_len: NonZeroU32,
    /// Concurrent connections (`--flows`).
    pub flows: FlowCount,
    /// Transactions in flight per connection (`--burst`); 1 is strict ping-pong.
    pub burst: NonZeroU32,
    /// A new connection for every transaction (`--crr`): connect, request, response, close.
    pub connect_per_transaction: bool,
    /// Transactions per second per flow (`--rate`); `None` runs back to back. Paced latency is
    /// measured from each transaction's intended start, so stalls are not hidden.
    pub rate_per_flow: Option<f64>,
    /// UDP instead of TCP (`--rr -u`): each request and response one datagram on the flow's
    /// own socket, with a timeout for the ones the network loses. `None` is TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpRrSpec>,
}

/// A UDP request/response test (`--rr -u`, netperf's UDP_RR).
///
/// Every request and every response is one datagram that starts with xbench's
/// [`UDP_HEADER_LEN`]-byte header (the flow's token, the request's sequence number, its send
/// time); the server copies the header into its response. A request whose response has not
/// arrived `timeout` after it was sent is **lost**: the flow stops waiting for it and goes on
/// with the next sequence number, so a lost datagram never hangs a flow. A response that
/// arrives after its request was declared lost is counted as **late**, never as a latency
/// sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpRrSpec {
    /// How long a request waits for its response before it counts as lost (`--rr-timeout`),
    /// between [`MIN_RR_TIMEOUT`] and [`MAX_RR_TIMEOUT`]. Longer than the path's worst round
    /// trip, or slow responses are counted lost; a lost request holds its flow's slot (one of
    /// `--burst`) for this long.
    #[serde(with = "secs")]
    pub timeout: Duration,
}

impl Default for UdpRrSpec {
    /// A one-second timeout: longer than any sane round trip, short enough that a lost
    /// datagram costs its flow one second, not the test.
    fn default() -> Self {
        UdpRrSpec {
            timeout: Duration::from_secs(1),
        }
    }
}

/// Shortest `--rr-timeout`.
pub const MIN_RR_TIMEOUT: Duration = Duration::from_millis(1);
/// Longest `--rr-timeout`.
pub const MAX_RR_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for RrSpec {
    fn default() -> Self {
        RrSpec {
            request_len: NonZeroU32::MIN,
            response_len: NonZeroU32::MIN,
            flows: FlowCount::MIN,
            burst: NonZeroU32::MIN,
            connect_per_transaction: false,
            rate_per_flow: None,
            udp: None,
        }
    }
}

impl RrSpec {
    /// Time between one flow's transactions when paced.
    pub fn period(&self) -> Option<Duration> {
        self.rate_per_flow
            .and_then(|r| Duration::try_from_secs_f64(1.0 / r).ok())
    }
}

/// How many flows (connections) a request/response test runs: 1 to [`MAX_FLOWS`] (65,536).
///
/// A type of its own, not a `NonZeroU16`, because the largest count (65,536) does not fit in
/// the `u16` that every flow *id* (0..=65,535) does; a value outside the range cannot be built,
/// deserialized included, so a peer's spec asking for 65,537 flows fails to parse. In JSON it
/// is a plain number, as the `u16` it replaces was: a spec of up to 65,535 flows reads the
/// same to an older peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct FlowCount(NonZeroU32);

impl FlowCount {
    /// One flow.
    pub const MIN: FlowCount = FlowCount(NonZeroU32::MIN);
    /// [`MAX_FLOWS`] flows.
    pub const MAX: FlowCount = match NonZeroU32::new(MAX_FLOWS) {
        Some(n) => FlowCount(n),
        None => unreachable!(),
    };

    /// `n` flows, or `None` outside 1..=[`MAX_FLOWS`].
    pub const fn new(n: u32) -> Option<FlowCount> {
        match NonZeroU32::new(n) {
            Some(v) if n <= MAX_FLOWS => Some(FlowCount(v)),
            _ => None,
        }
    }

    /// The count.
    pub const fn get(self) -> u32 {
        self.0.get()
    }

    /// The count as an index bound (flow ids are `0..count`).
    pub const fn as_usize(self) -> usize {
        self.0.get() as usize
    }
}

impl From<FlowCount> for u32 {
    fn from(f: FlowCount) -> u32 {
        f.get()
    }
}

impl From<NonZeroU16> for FlowCount {
    fn from(n: NonZeroU16) -> FlowCount {
        FlowCount(NonZeroU32::from(n))
    }
}

impl TryFrom<u32> for FlowCount {
    type Error = String;

    fn try_from(n: u32) -> Result<FlowCount, String> {
        FlowCount::new(n).ok_or_else(|| format!("{n} flows: must be between 1 and {MAX_FLOWS}"))
    }
}

impl std::fmt::Display for FlowCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Bulk transfer settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputSpec {
    /// Parallel TCP connections per direction (`-P`).
    pub streams: NonZeroU16,
    /// Which way the data flows.
    pub direction: Direction,
    /// Bytes handed to each `send()` and asked of each `recv()` (`-l`).
    pub block_len: NonZeroU32,
    /// Send with `sendfile(2)` from a memory file instead of copying from user space (`-Z`):
    /// less CPU per byte, the same bytes on the wire.
    #[serde(default)]
    pub zerocopy: bool,
    /// How receivers consume data.
    #[serde(default)]
    pub receive: ReceiveMode,
    /// Most each stream sends, bits per second (`-b`, per stream as in iperf3); the kernel
    /// paces the connection (`SO_MAX_PACING_RATE`). `None`: as fast as the path allows.
    #[serde(default)]
    pub bitrate: Option<u64>,
    /// UDP instead of TCP (`-u`): datagrams of this shape, each stream on its own UDP socket.
    /// `None` is a TCP test; with UDP, `block_len`, `zerocopy`, `receive` and `bitrate` are
    /// unused.
    #[serde(default)]
    pub udp: Option<UdpSpec>,
    /// Latency under load (`--under-load`): these streams are the load of a test in phases,
    /// with latency probes beside them. `None` is a plain throughput test. The client runs
    /// it as separate tests; a server refuses a spec that carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub under_load: Option<crate::under_load::UnderLoadSpec>,
}

/// A UDP throughput test (`-u`): paced datagrams, counted one by one at the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpSpec {
    /// UDP payload per datagram, bytes (`-l`), xbench's header included; between
    /// [`UDP_HEADER_LEN`] and [`MAX_DATAGRAM_LEN`].
    pub datagram_len: u32,
    /// Bits per second of UDP payload, the total of all streams of one direction (`-b`);
    /// each stream sends an equal share. `None` sends as fast as the sockets take datagrams.
    pub bitrate: Option<u64>,
}

impl Default for UdpSpec {
    /// iperf3's UDP defaults: 1 Mbit/s, datagrams that fit a 1500-byte MTU.
    fn default() -> Self {
        UdpSpec {
            datagram_len: 1448,
            bitrate: Some(1_000_000),
        }
    }
}

/// Bytes of xbench's header at the start of every UDP datagram: stream token, sequence
/// number, send timestamp (8 bytes each).
pub const UDP_HEADER_LEN: u32 = 24;
/// Largest UDP payload over IPv4 (65,535 − 20 − 8).
pub const MAX_DATAGRAM_LEN: u32 = 65_507;
/// Largest datagram that crosses a 1500-byte-MTU IPv4 path unfragmented.
pub const UNFRAGMENTED_DATAGRAM_LEN: u32 = 1472;

/// How a receiver consumes the bytes it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiveMode {
    /// `recv(MSG_TRUNC)`: the kernel acknowledges and frees the data without copying it to
    /// user space (tcp(7)). Flow control and receive-buffer autotuning behave exactly as for a
    /// copying reader; the receiver just spends less CPU, so the tool is less often what limits
    /// the rate.
    #[default]
    Discard,
    /// `recv()` into a buffer, as an application (and iperf3) does (`--recv-copy`).
    Copy,
}

/// Which way a test's data flows, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends (iperf3's default).
    ClientToServer,
    /// The server sends (`-R`).
    ServerToClient,
    /// Both at once, `streams` in each direction (`--bidir`).
    Bidir,
}

/// Which way one stream's data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamDirection {
    /// Client sends, server receives.
    ClientToServer,
    /// Server sends, client receives.
    ServerToClient,
}

impl StreamDirection {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            StreamDirection::ClientToServer => "client→server",
            StreamDirection::ServerToClient => "server→client",
        }
    }
}

impl Direction {
    /// The stream directions this test uses, in stream-id order.
    pub fn stream_directions(self) -> &'static [StreamDirection] {
        match self {
            Direction::ClientToServer => &[StreamDirection::ClientToServer],
            Direction::ServerToClient => &[StreamDirection::ServerToClient],
            Direction::Bidir => &[
                StreamDirection::ClientToServer,
                StreamDirection::ServerToClient,
            ],
        }
    }
}

/// When a test stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndCondition {
    /// After this long, not counting the omitted start (`-t`).
    Duration(#[serde(with = "secs")] Duration),
    /// After this many bytes in total across the streams of each direction (`-n`).
    Bytes(u64),
}

/// Socket options for data connections.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SocketOptions {
    /// Send and receive buffer size in bytes on both ends (`-w`), which bounds the TCP window.
    /// `None` leaves the kernel's autotuning alone, usually the best choice.
    pub window: Option<u64>,
    /// Maximum segment size in bytes (`-M`), set before connecting so both directions use it.
    pub mss: Option<u32>,
    /// Disable Nagle's algorithm (`-N`).
    pub nodelay: bool,
    /// Congestion control algorithm (`-C`), e.g. `cubic` or `bbr`; must be available on both
    /// hosts (`/proc/sys/net/ipv4/tcp_available_congestion_control`).
    pub congestion: Option<String>,
}

/// A spec the library refuses, with the field and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SpecError {
    /// The offending setting: its flag is what the message quotes, its long name a suite's
    /// key.
    pub field: Field,
    /// What is wrong and what is allowed.
    pub reason: String,
}

impl TestSpec {
    /// A 10-second, one-flow, one-byte request/response test (netperf's TCP_RR defaults).
    pub fn request_response() -> Self {
        TestSpec {
            workload: Workload::RequestResponse(RrSpec::default()),
            ..TestSpec::throughput()
        }
    }

    /// A 10-second, single-stream, client-to-server throughput test with iperf3's defaults.
    pub fn throughput() -> Self {
        TestSpec {
            workload: Workload::Throughput(ThroughputSpec::default()),
            end: EndCondition::Duration(Duration::from_secs(10)),
            omit: Duration::ZERO,
            interval: Some(Duration::from_secs(1)),
            socket: SocketOptions::default(),
        }
    }

    /// Checks every bound; the server calls this on what a client sent.
    ///
    /// The checks common to every test here, in order, then the workload's own
    /// (`check_rr`, `check_throughput`); each names its flag.
    pub fn validate(&self) -> Result<(), SpecError> {
        let err = |field, reason: String| Err(SpecError { field, reason });
        match self.end {
            EndCondition::Duration(d) if d.is_zero() => {
                return err(Field::Time, "duration must be greater than zero".into());
            }
            EndCondition::Duration(d) if d > MAX_DURATION => {
                return err(
                    Field::Time,
                    format!("duration must be at most {MAX_DURATION:?}"),
                );
            }
            EndCondition::Bytes(0) => {
                return err(Field::Bytes, "byte count must be greater than zero".into());
            }
            _ => {}
        }
        if self.omit > MAX_DURATION {
            return err(
                Field::Omit,
                format!("omit must be at most {MAX_DURATION:?}"),
            );
        }
        if let Some(i) = self.interval
            && i < MIN_INTERVAL
        {
            return err(
                Field::Interval,
                format!("interval must be at least {MIN_INTERVAL:?} (or 0 for none)"),
            );
        }
        if let Some(w) = self.socket.window
            && !(1024..=(1 << 30)).contains(&w)
        {
            return err(Field::Window, "window must be between 1K and 1G".into());
        }
        if let Some(m) = self.socket.mss
            && let Err(why) = check_mss(m)
        {
            return err(Field::Mss, why);
        }
        if let Some(c) = &self.socket.congestion
            && !is_congestion_name(c)
        {
            return err(
                Field::Congestion,
                format!(
                    "`{}` is not a congestion control name (like cubic or bbr)",
                    c.chars()
                        .take(32)
                        .flat_map(char::escape_debug)
                        .collect::<String>()
                ),
            );
        }
        match &self.workload {
            Workload::RequestResponse(r) => check_rr(r, self.end),
            Workload::Throughput(t) => check_throughput(t, self),
        }
    }

    /// The throughput settings, if this is a throughput test.
    pub fn as_throughput(&self) -> Option<&ThroughputSpec> {
        match &self.workload {
            Workload::Throughput(t) => Some(t),
            Workload::RequestResponse(_) => None,
        }
    }

    /// The request/response settings, if this is a request/response test.
    pub fn as_rr(&self) -> Option<&RrSpec> {
        match &self.workload {
            Workload::RequestResponse(r) => Some(r),
            Workload::Throughput(_) => None,
        }
    }
}

/// The bounds of a request/response test: message sizes, burst, rate, UDP, and a time.
fn check_rr(r: &RrSpec, end: EndCondition) -> Result<(), SpecError> {
    let err = |field, reason: String| Err(SpecError { field, reason });
    // --flows is 1..=MAX_FLOWS by its type (FlowCount); no check needed.
    if r.request_len.get() > MAX_RR_LEN || r.response_len.get() > MAX_RR_LEN {
        return err(
            Field::RrSize,
            format!(
                "requests and responses are at most {} MiB",
                MAX_RR_LEN >> 20
            ),
        );
    }
    if r.burst.get() > MAX_BURST {
        return err(
            Field::Burst,
            format!("at most {MAX_BURST} in flight per flow"),
        );
    }
    if r.connect_per_transaction && r.burst.get() > 1 {
        return err(
            Field::Burst,
            "--crr carries one transaction per connection; use --flows for \
             concurrency"
                .into(),
        );
    }
    if let Some(rate) = r.rate_per_flow {
        check_rate(rate, end)?;
    }
    if let Some(u) = &r.udp {
        check_udp_rr(r, u)?;
    }
    timed(end, "request/response")
}

/// The bounds of a throughput test: streams, the test under load, UDP, bitrate, block length.
fn check_throughput(t: &ThroughputSpec, spec: &TestSpec) -> Result<(), SpecError> {
    let err = |field, reason: String| Err(SpecError { field, reason });
    if t.streams.get() > MAX_STREAMS {
        return err(Field::Streams, format!("at most {MAX_STREAMS} streams"));
    }
    if let Some(ul) = &t.under_load {
        ul.validate(spec, t)?;
    }
    if let Some(u) = &t.udp {
        return check_udp(u, t.streams.get(), spec.end);
    }
    if t.bitrate.is_some_and(|b| b < 8_000) {
        return err(Field::Bitrate, "a bitrate must be at least 8 kbit/s".into());
    }
    if t.block_len.get() > MAX_BLOCK_LEN {
        return err(
            Field::Length,
            format!("block length must be at most {} MiB", MAX_BLOCK_LEN >> 20),
        );
    }
    Ok(())
}

/// Bounds of a UDP test: a datagram that holds the header and fits an IP packet, a rate of at
/// least one datagram per second per stream (below that a stream's interval would hold none),
/// and a duration, since loss is decided against a fixed window.
fn check_udp(u: &UdpSpec, streams: u16, end: EndCondition) -> Result<(), SpecError> {
    let err = |field, reason: String| Err(SpecError { field, reason });
    if !(UDP_HEADER_LEN..=MAX_DATAGRAM_LEN).contains(&u.datagram_len) {
        return err(
            Field::Length,
            format!(
                "a UDP datagram must be between {UDP_HEADER_LEN} bytes (xbench's header) and \
                 {MAX_DATAGRAM_LEN} bytes (the largest UDP payload)"
            ),
        );
    }
    let floor = u64::from(u.datagram_len) * 8 * u64::from(streams);
    if let Some(b) = u.bitrate
        && b < floor
    {
        return err(
            Field::Bitrate,
            format!(
                "{b} bit/s is below one {}-byte datagram per second per stream ({floor} bit/s \
                 for {streams} stream(s)); raise -b or lower -l",
                u.datagram_len
            ),
        );
    }
    timed(end, "UDP")
}

/// Refuses a byte count (`-n`) for `what` tests, which run for a time.
fn timed(end: EndCondition, what: &str) -> Result<(), SpecError> {
    if matches!(end, EndCondition::Bytes(_)) {
        return Err(SpecError {
            field: Field::Bytes,
            reason: format!("{what} tests run for a time (-t), not a byte count"),
        });
    }
    Ok(())
}

/// Bounds of a UDP request/response test: one datagram each way, each holding xbench's header
/// and fitting a UDP payload; a connection per transaction makes no sense without connections.
fn check_udp_rr(r: &RrSpec, u: &UdpRrSpec) -> Result<(), SpecError> {
    let err = |field, reason: String| Err(SpecError { field, reason });
    if r.connect_per_transaction {
        return err(
            Field::Crr,
            "--crr opens a TCP connection per transaction; UDP has none (use --rr -u)".into(),
        );
    }
    let fits = |n: u32| (UDP_HEADER_LEN..=MAX_DATAGRAM_LEN).contains(&n);
    if !fits(r.request_len.get()) || !fits(r.response_len.get()) {
        return err(
            Field::RrSize,
            format!(
                "with -u a request and a response are one datagram each: between \
                 {UDP_HEADER_LEN} bytes (xbench's header) and {MAX_DATAGRAM_LEN} bytes (the \
                 largest UDP payload); got {},{}",
                r.request_len, r.response_len
            ),
        );
    }
    if !(MIN_RR_TIMEOUT..=MAX_RR_TIMEOUT).contains(&u.timeout) {
        return err(
            Field::RrTimeout,
            format!(
                "{:?} is out of range: between {MIN_RR_TIMEOUT:?} and {MAX_RR_TIMEOUT:?}",
                u.timeout
            ),
        );
    }
    Ok(())
}

/// Bounds of a paced request/response test's `--rate` (transactions per second per flow).
///
/// The rate is turned into the interval between one flow's transactions, so the bounds are
/// on that interval: at least 1/[`MAX_RATE_PER_FLOW`] (100 ns, finer than any host can time a
/// send) and at most the test's `-t`, so every stretch of the test as long as `-t` holds a
/// paced transaction and the interval is one a [`Duration`] holds (`-t` is at most
/// [`MAX_DURATION`]). A rate below that (say 1e-300) would otherwise be an interval no clock
/// reaches, and the test would run unpaced while claiming to be paced. NaN, infinities, zero
/// and negative rates are refused too.
fn check_rate(rate: f64, end: EndCondition) -> Result<(), SpecError> {
    let longest = match end {
        EndCondition::Duration(d) => d,
        // A byte count is refused for request/response tests on its own; bound the interval
        // by the longest test then.
        EndCondition::Bytes(_) => MAX_DURATION,
    };
    let period = 1.0 / rate;
    let within = rate.is_finite()
        && rate > 0.0
        && rate <= MAX_RATE_PER_FLOW
        // 1 ppb of slack: a rate written as 1/t must not fail on rounding.
        && period <= longest.as_secs_f64() * (1.0 + 1e-9)
        && Duration::try_from_secs_f64(period).is_ok();
    if within {
        return Ok(());
    }
    let test = match end {
        EndCondition::Duration(_) => "this test's -t",
        EndCondition::Bytes(_) => "the longest test",
    };
    let gap = match Duration::try_from_secs_f64(period) {
        Ok(d) if rate.is_finite() => format!(" (one transaction every {d:?})"),
        _ => String::new(),
    };
    // 1e-300 as written, not as 300 zeros.
    let shown = if (1e-3..1e9).contains(&rate.abs()) {
        format!("{rate}")
    } else {
        format!("{rate:e}")
    };
    let shortest = Duration::try_from_secs_f64(1.0 / MAX_RATE_PER_FLOW).unwrap_or_default();
    Err(SpecError {
        field: Field::Rate,
        reason: format!(
            "{shown}/s per flow{gap} is out of range: the time between one flow's transactions \
             must be at most {test} ({longest:?}) and at least {shortest:?} \
             ({MAX_RATE_PER_FLOW}/s)"
        ),
    })
}

impl Default for ThroughputSpec {
    fn default() -> Self {
        ThroughputSpec {
            streams: NonZeroU16::MIN,
            direction: Direction::ClientToServer,
            // iperf3's TCP default; large enough that per-call overhead is noise.
            block_len: NonZeroU32::new(128 * 1024).unwrap_or(NonZeroU32::MIN),
            zerocopy: false,
            receive: ReceiveMode::Discard,
            bitrate: None,
            udp: None,
            under_load: None,
        }
    }
}

/// Serde for a [`Duration`] as fractional seconds, the unit people read in JSON.
pub(crate) mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

/// Serde for an optional [`Duration`] as fractional seconds or null.
pub(crate) mod opt_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(d)?
            .map(|v| Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Whether `c` can be a congestion control's name: what Linux takes (at most 15 bytes,
/// `TCP_CA_NAME_MAX` less its NUL), in the characters kernel modules' names use.
pub(crate) fn is_congestion_name(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 15
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One parser and one bound for every way a rate comes in: the CLI's `--rate`, a suite's
    /// `rate = "1.5k"` or `rate = 200`, and the builder.
    #[test]
    fn rates_per_flow_parse_and_bound_alike() {
        assert_eq!(parse_rate_per_flow("1.5k"), Ok(1500.0));
        assert_eq!(parse_rate_per_flow(" 200 "), Ok(200.0));
        assert_eq!(parse_rate_per_flow("10ms"), Ok(100.0));
        assert_eq!(parse_rate_per_flow("0ms"), Err(RateError::ZeroGap));
        assert_eq!(
            parse_rate_per_flow("2m"),
            Err(RateError::NotARate("2m".into()))
        );
        assert!(matches!(parse_rate_per_flow("5xs"), Err(RateError::Gap(_))));
        assert_eq!(
            parse_rate_per_flow("-5"),
            Err(RateError::NotPositive("-5".into()))
        );
        assert_eq!(parse_rate_per_flow("20000k"), Err(RateError::TooHigh));
        assert_eq!(
            rate_per_flow(f64::NAN, "NaN"),
            Err(RateError::NotPositive("NaN".into()))
        );
        assert_eq!(
            rate_per_flow(MAX_RATE_PER_FLOW, "max"),
            Ok(MAX_RATE_PER_FLOW)
        );
    }

    #[test]
    fn flow_count_takes_1_to_65536_as_a_json_number_and_nothing_else() {
        assert_eq!(FlowCount::new(0), None);
        assert_eq!(FlowCount::new(65_536).map(FlowCount::get), Some(65_536));
        assert_eq!(FlowCount::new(65_537), None);
        assert_eq!(FlowCount::MAX.get(), 65_536);
        assert_eq!(serde_json::to_string(&FlowCount::MAX).unwrap(), "65536");
        // What an older peer wrote (a u16) reads the same.
        let f: FlowCount = serde_json::from_str("65535").unwrap();
        assert_eq!(f.get(), 65_535);
        for bad in ["0", "65537", "-1", "4294967296"] {
            assert!(serde_json::from_str::<FlowCount>(bad).is_err(), "{bad}");
        }
        let e = serde_json::from_str::<FlowCount>("65537").unwrap_err();
        assert!(e.to_string().contains("between 1 and 65536"), "{e}");
    }

    #[test]
    fn default_spec_is_valid_and_round_trips() {
        let s = TestSpec::throughput();
        s.validate().unwrap();
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"duration\":10.0"), "{j}");
        assert_eq!(serde_json::from_str::<TestSpec>(&j).unwrap(), s);
    }

    #[test]
    fn hostile_specs_are_refused() {
        let mut s = TestSpec::throughput();
        s.end = EndCondition::Duration(Duration::ZERO);
        assert_eq!(s.validate().unwrap_err().field.flag(), "-t");
        let mut s = TestSpec::throughput();
        s.socket.congestion = Some("../../etc".into());
        assert_eq!(s.validate().unwrap_err().field.flag(), "-C");
        let j = r#"{"workload":{"throughput":{"streams":0,"direction":"bidir","block_len":1}},
                  "end":{"bytes":5},"omit":0,"interval":null,"socket":{"window":null,"mss":null,"nodelay":false,"congestion":null}}"#;
        assert!(
            serde_json::from_str::<TestSpec>(j).is_err(),
            "zero streams must not parse"
        );
        let j = r#"{"workload":{"throughput":{"streams":1,"direction":"bidir","block_len":1}},
                  "end":{"duration":-1},"omit":0,"interval":null,"socket":{"window":null,"mss":null,"nodelay":false,"congestion":null}}"#;
        assert!(
            serde_json::from_str::<TestSpec>(j).is_err(),
            "negative duration must not parse"
        );
    }

    fn paced(rate: f64, secs: u64) -> TestSpec {
        let mut s = TestSpec::request_response();
        s.end = EndCondition::Duration(Duration::from_secs(secs));
        if let Workload::RequestResponse(r) = &mut s.workload {
            r.rate_per_flow = Some(rate);
        }
        s
    }

    #[test]
    fn a_rate_whose_interval_no_clock_reaches_is_refused() {
        // Issue 14: 1e-300/s was accepted and the test ran unpaced.
        for rate in [1e-300, 0.0, -1.0, f64::NAN, f64::INFINITY, 1e8, 0.09] {
            let e = paced(rate, 10).validate().unwrap_err();
            assert_eq!(e.field.flag(), "--rate", "{rate}");
            assert!(e.reason.contains("out of range"), "{rate}: {}", e.reason);
            assert!(e.reason.contains("-t (10s)"), "{rate}: {}", e.reason);
        }
        // One transaction per -t is the slowest; the fastest is 10 M/s.
        for (rate, secs) in [(0.1, 10), (1.0 / 3.0, 3), (1e7, 10), (1.0 / 3600.0, 3600)] {
            paced(rate, secs).validate().unwrap();
            let period = match &paced(rate, secs).workload {
                Workload::RequestResponse(r) => r.period().unwrap(),
                Workload::Throughput(_) => unreachable!(),
            };
            assert!(period <= Duration::from_secs(secs) + Duration::from_micros(1));
        }
    }
}
