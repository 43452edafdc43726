//! What a running test tells its caller as it goes ([`ClientEvent`]), through the caller's
//! [`OnEvent`].

use crate::report::{InterfaceInterval, Interval, PeerInfo, RrInterval, StreamInfo, UdpInterval};

/// What happens during a test, as it happens.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClientEvent {
    /// Data connections are open and data is about to flow.
    Started {
        /// Who answered.
        server: PeerInfo,
        /// The data connections.
        streams: Vec<StreamInfo>,
    },
    /// One interval, both ends merged (or the client's alone if the server's report is late).
    Interval(Interval),
    /// One interval of a request/response test.
    RrInterval(RrInterval),
    /// One interval of a UDP test, both ends merged.
    UdpInterval(UdpInterval),
    /// One row of a latency-under-load test's timeline (`--under-load`): its phase, the
    /// probes' latency and the bulk streams' figures. Its parts' own intervals are not
    /// handed on.
    UnderLoadInterval(crate::under_load::TimelineRow),
    /// Something the user should know.
    Warning(String),
    /// One interval as the client's network interface counted it (issue 33): its generic
    /// counters and EC2's allowance counters, on the interface's own clock, which starts with
    /// the data.
    Interface(InterfaceInterval),
    /// `--allow-partial-flows`: `running` of the `asked` request/response flows run, because
    /// the server takes no more (its `--max-flows`) or the rest did not open (refused or timed
    /// out on the way). Before [`ClientEvent::Started`]; both may come, the limit first.
    PartialFlows {
        /// Flows asked of this step: `--flows`, or after a server's limit that limit.
        asked: u32,
        /// What the test runs.
        running: u32,
        /// Whether the server's `--max-flows` is why (else the rest did not open).
        server_limit: bool,
    },
}

/// Where a test's live events go.
pub(crate) type OnEvent<'e> = &'e mut (dyn FnMut(ClientEvent) + Send);
