//! What a client test is: where to connect and how ([`ClientConfig`]), with its defaults.
//!
//! A leaf of `client`: the steps of a test read it, and it depends on none of them.

use std::net::IpAddr;
use std::num::{NonZeroU16, NonZeroUsize};
use std::time::{Duration, SystemTime};

use crate::auth::Psk;
use crate::config::TestSpec;

pub(super) use crate::proto::DEFAULT_PORT;

/// Data connections a client opens at once by default: half the listen backlog an xbench
/// server asks for (1,024, itself under Linux's default `somaxconn` of 4,096), so one client's
/// handshakes cannot fill a server's queues even if it stops accepting for a moment, and
/// another client's still find room.
// Evaluated at compile time; 512 is not zero.
pub const DEFAULT_MAX_CONNECTING: NonZeroUsize = NonZeroUsize::new(512).unwrap();

/// `--connections-only`'s default `--openers`: new connections opened at a time. Enough to
/// keep a 2-core machine's loopback busy; a path with a long round trip needs more (each
/// opener opens about one connection per two round trips).
pub const DEFAULT_OPENERS: u16 = 16;

/// Which address family to use for a host name with both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressFamily {
    /// Whatever the resolver lists first.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

/// Where and how to run a test.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server host name or address.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// Address family for `host`.
    pub family: AddressFamily,
    /// Local address to send from (`-B`): the control connection, and every data connection
    /// unless [`Self::flow_binds`] lists several.
    pub bind: Option<IpAddr>,
    /// Local addresses the data are spread over, round-robin (`-B a,b,…`): TCP flows and
    /// streams (`--rr`, `--crr` flows' every connection, `--connections-only`'s held flows and
    /// openers, `-P` streams, iperf3 TCP streams) and UDP sockets (`-u`, `--rr -u`); flow or
    /// stream `i` from address `(i + 1) mod n` ([`super::flow_plan::round_robin`]). Empty:
    /// [`Self::bind`] alone. Each address brings a whole ephemeral port range, so more flows
    /// than one range holds need more of them (see [`super::flow_plan`]). The first should be
    /// [`Self::bind`]. An iperf3 UDP test refuses a list ([`super::flow_plan::BindList`]).
    pub flow_binds: Vec<IpAddr>,
    /// Most data connections being opened at once (`--max-connecting`): the rest wait for one
    /// to finish its handshake. Bounds what the flows put in the server's SYN and accept
    /// queues, which drop what overflows them (a lost SYN is retried after a second), so
    /// thousands of flows open faster paced than all at once. See [`DEFAULT_MAX_CONNECTING`].
    pub max_connecting: NonZeroUsize,
    /// How long connecting may take, per connection.
    pub connect_timeout: Duration,
    /// How long to wait after the end for the receivers to drain and the server's results.
    /// Data still queued in large buffers on a slow path can take seconds to arrive.
    pub drain_timeout: Duration,
    /// A request/response flow with a transaction outstanding and nothing received for this
    /// long has failed: the server stopped answering. Long enough for TCP's own retransmission
    /// back-off on a lossy path.
    pub stall_timeout: Duration,
    /// The test.
    pub spec: TestSpec,
    /// A name for the path, carried into the report (`--label`).
    pub label: Option<String>,
    /// The server's pre-shared key (`--psk-file`); with one, the client also insists that
    /// the server proves it holds the same key.
    pub psk: Option<Psk>,
    /// Which protocol to speak to the server.
    pub protocol: ServerProtocol,
    /// Request/response: each flow's own latency summary in the report (`--per-flow`): count,
    /// min, mean, max and a p99 from a 1.3 KB sketch per flow. Off, a flow reports only its
    /// counts and the latency figures are the merged ones.
    pub per_flow: bool,
    /// Request/response: when the server takes fewer flows than asked (its `--max-flows`),
    /// run the flows it takes and say so in the report (`--allow-partial-flows`), instead of
    /// failing with [`crate::error::Error::FlowLimit`]. Off by default: a test that silently ran fewer
    /// flows than asked would measure a different load.
    pub allow_partial_flows: bool,
    /// Probe the hops of the test's path while it runs (`--trace`): the report's
    /// [`crate::report::TestReport::trace`]. `None`: no probes.
    pub trace: Option<crate::trace::TraceConfig>,
    /// Request/response over TCP: `Some(k)` makes the test a connection-rate test
    /// (`--connections-only`, `--openers k`): the spec's `flows` are opened and held for the
    /// whole test, while `k` openers each open a new connection, wait for its first answer,
    /// and close it, back to back (or at the spec's `rate_per_flow`). The report's
    /// transactions are those new connections; `rr.held` says how many held flows still
    /// answered at the end.
    pub connections_only: Option<NonZeroU16>,
    /// Request/response: time each transaction from when its request was sent, not from when
    /// a paced one was due. Off (the default), a paced test counts the client's own lateness
    /// as latency, as it must to avoid coordinated omission; on, it counts the path alone, as
    /// a latency probe must (irtt's and `--under-load`'s probes): a probe is never held back
    /// by an earlier one, so the only lateness left is the client host's own scheduling.
    pub latency_from_send: bool,
    /// Start the test at this wall-clock instant (`--start-at`), so that clients on several
    /// machines measure one window (xbench-deploy's fleets). The client connects and
    /// completes the handshake [`START_HOLD`] ahead, holds there, and asks for the test at
    /// the instant: the name lookup, the connect and the key proof are then out of the
    /// instances' spread. What stays in it, after their clocks' offset, is the test's own
    /// setup: a round trip to `Accepted` and the opening of its data connections (for
    /// `--rr`/`--crr`, every flow; many flows take several rounds). Tests of several
    /// sessions hold their first one: `--under-load` its bulk session, so the probe
    /// sessions' setup is in the spread, and `--connections-only` its held flows, so the
    /// openers' session's is; a session asked again after a server's flow limit
    /// (`allow_partial_flows`) sets up after the instant too. With
    /// [`ServerProtocol::Iperf3`] the server is dialled at the instant; a server found to
    /// be iperf3 after the hold is dialled when that is found, after the instant. An
    /// instant already past starts at once.
    pub start_at: Option<SystemTime>,
}

/// How long before [`ClientConfig::start_at`] the client connects and holds: enough for a
/// name lookup, a connect and the handshake on a loaded machine and a long path, and well
/// inside the server's 10 s wait for the test's `Start`.
pub const START_HOLD: Duration = Duration::from_secs(5);

/// Which protocol the client speaks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerProtocol {
    /// xbench's own; a server that stays silent to its greeting is probed for iperf3 and, if
    /// it is one, the test runs in iperf3's protocol with a warning saying so.
    #[default]
    Detect,
    /// iperf3's control protocol (3.x), TCP throughput tests only (`--iperf3`).
    Iperf3,
}

impl ClientConfig {
    /// A default throughput test against `host`.
    pub fn new(host: impl Into<String>) -> Self {
        ClientConfig {
            host: host.into(),
            port: DEFAULT_PORT,
            family: AddressFamily::Any,
            bind: None,
            flow_binds: Vec::new(),
            max_connecting: DEFAULT_MAX_CONNECTING,
            connect_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(10),
            spec: TestSpec::throughput(),
            label: None,
            psk: None,
            protocol: ServerProtocol::Detect,
            per_flow: false,
            allow_partial_flows: false,
            connections_only: None,
            latency_from_send: false,
            trace: None,
            start_at: None,
        }
    }
}
