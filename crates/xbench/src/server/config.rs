//! What a server is told: where to listen, what keys to require, and the bounds on what
//! clients may ask for ([`Limits`]). A leaf: every part of the server reads it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;

use crate::auth::Psk;
use crate::proto;

/// Server-side bounds on what clients may ask for and how long they may idle.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most data connections (each a thread here) one throughput test may open.
    pub max_streams: u16,
    /// Largest block (`-l`) a throughput test may ask for, bytes: the server holds one block
    /// per test as its payload, so this bounds what a client can make it allocate.
    pub max_block_len: u32,
    /// Most connections one request/response test may hold open at once; many share a thread.
    /// `xbench server` sets it from its open-file limit ([`Limits::for_open_files`]).
    pub max_flows: u32,
    /// Longest test accepted, `-O` warm-up included; byte-count tests are stopped at it.
    pub max_duration: Duration,
    /// Most tests running at once.
    pub max_tests: usize,
    /// Most tests running at once from one client address, so one host cannot take every
    /// slot.
    pub max_tests_per_client: usize,
    /// Most threads all tests together may run: a stream thread per data connection of a
    /// throughput test, a few workers (one a core at most) per request/response test. A test
    /// that would go beyond is refused at admission, naming the limit.
    pub max_threads: usize,
    /// Descriptors the server may hold in all: its tests reserve theirs from what is left
    /// after [`Self::OPEN_FILES_RESERVE`] for itself and a reserve kept for new connections,
    /// and a test that does not fit is refused before it opens anything. `None`: the
    /// process's open-file limit (`RLIMIT_NOFILE`, soft) as the server starts.
    pub open_files: Option<u64>,
    /// Percent of each shared budget (descriptors, threads, handshake slots) one client
    /// address may hold, 1 to 100, so one client cannot take what the others need. 50 lets
    /// one client run a test as large as the rest of the server together.
    pub client_share: u8,
    /// Most the server sends in total, bits per second, across every test's server-to-client
    /// streams; they share it (TCP pacing, `SO_MAX_PACING_RATE`). `None`: no cap.
    pub max_send_rate: Option<u64>,
    /// A running test in which no data moved for this long is ended: its client is gone
    /// without closing (or stalled).
    pub idle_timeout: Duration,
    /// How long a new connection may take to say what it is, and a client to answer each
    /// handshake step. Bounds what an idle or half-open connection can hold.
    pub handshake_timeout: Duration,
    /// Most connections still saying what they are (control sessions before their test
    /// request, data connections before they find their test). Beyond it new connections are
    /// closed at once, so a flood of silent ones costs sockets, not memory. At least twice what
    /// one client opens at once (its `max_connecting`, or [`Self::max_flows`] if fewer): each
    /// of those holds a slot until its greeting is read.
    pub max_handshakes: usize,
    /// How long after the client's end the receivers may take to drain.
    pub drain_timeout: Duration,
    /// How far past its stated end a test may run before the server cuts it off.
    pub overrun_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_streams: 128,
            max_block_len: 4 << 20,
            max_flows: 4096,
            max_duration: Duration::from_secs(3600),
            max_tests: 64,
            max_tests_per_client: 8,
            max_threads: 1024,
            open_files: None,
            client_share: 50,
            max_send_rate: None,
            idle_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 8192,
            drain_timeout: Duration::from_secs(10),
            overrun_grace: Duration::from_secs(30),
        }
    }
}

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to listen on. Empty means `[::]` (IPv4 and IPv6) on [`Self::port`], or
    /// `0.0.0.0` where IPv6 is off.
    pub bind: Vec<IpAddr>,
    /// Port to listen on; 0 picks a free one.
    pub port: u16,
    /// Exit after the first completed test (`--one-off`).
    pub one_off: bool,
    /// Bounds on clients.
    pub limits: Limits,
    /// On shutdown, how long running tests may continue before they are cut short.
    pub shutdown_grace: Duration,
    /// Pre-shared key clients must prove they hold (`--psk-file`); `None` serves anyone, as
    /// iperf3 does.
    pub psk: Option<Psk>,
    /// Client networks allowed to connect (`--allow`); empty allows all. Applies to the
    /// metrics endpoint too.
    pub allow: Vec<IpNet>,
    /// Where to serve the server's counters over HTTP for a scraper (`--metrics`,
    /// `GET /metrics`: OpenMetrics or Prometheus text); `None` (the default) serves none.
    pub metrics: Option<SocketAddr>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: Vec::new(),
            port: proto::DEFAULT_PORT,
            one_off: false,
            limits: Limits::default(),
            shutdown_grace: Duration::from_secs(10),
            psk: None,
            allow: Vec::new(),
            metrics: None,
        }
    }
}
