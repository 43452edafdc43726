//! What a server's sessions share ([`Ctx`]): its limits and key, the budget of descriptors,
//! threads and places, the send-rate governor, the registry of running tests, the iperf3
//! tests waiting for their data connections, and the metrics. Apart from the accept loop
//! (`server/mod.rs`), which runs the sessions, so that the sessions read it without depending
//! on what runs them.

use std::sync::Arc;

use ipnet::IpNet;
use tokio::sync::watch;

use super::budget::Budget;
use super::governor::Governor;
use super::registry::Registry;
use crate::auth::Psk;

/// What sessions share.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) limits: super::config::Limits,
    pub(crate) psk: Option<Psk>,
    pub(crate) allow: Vec<IpNet>,
    /// Descriptors, threads, handshake slots and places among the running tests, and what
    /// each client address holds of them.
    pub(crate) budget: Arc<Budget>,
    /// Shares [`super::config::Limits::max_send_rate`] among the streams the server sends on.
    pub(crate) governor: Arc<Governor>,
    pub(crate) registry: Arc<Registry>,
    /// Raised when the shutdown grace has passed: sessions cut their tests short.
    pub(crate) abort: watch::Receiver<bool>,
    /// iperf3 tests waiting for their data connections, which open with the test's cookie.
    pub(crate) iperf3: Arc<super::iperf3::waiting::Iperf3Streams>,
    /// iperf3 tests waiting for their UDP streams, which only their address tells apart.
    pub(crate) iperf3_udp: Arc<super::iperf3::streams_udp::Iperf3Udp>,
    /// What the server has done, for `--metrics`; counted whether or not it is served.
    pub(crate) metrics: Arc<super::metrics::Metrics>,
}
