//! xbench: measure a network path the way people choosing between paths need it measured.
//!
//! The library runs tests between an xbench client and an xbench server: multi-stream TCP
//! throughput with the kernel's TCP state that explains the figure (retransmits, congestion
//! window, RTT, and how long the receive window or send buffer held the sender back), UDP
//! throughput counted datagram by datagram (loss, reordering, duplicates, jitter; set
//! [`ThroughputSpec::udp`]), and request/response latency over TCP or UDP (set
//! [`config::RrSpec::udp`]: lost requests are counted, never waited for). It has no command
//! line and prints nothing; the `xbench` binary and other programs embed it.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use xbench::{ClientConfig, EndCondition, Server, ServerConfig};
//!
//! // A server on a free loopback port, stopped when `stop` fires.
//! let server = Server::bind(ServerConfig {
//!     bind: vec!["127.0.0.1".parse()?],
//!     port: 0,
//!     ..ServerConfig::default()
//! })
//! .await?;
//! let port = server.local_addrs()[0].port();
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let serving = tokio::spawn(server.run(async { let _ = stopped.await; }));
//!
//! // Half a second of one stream, client to server.
//! let mut config = ClientConfig::new("127.0.0.1");
//! config.port = port;
//! config.spec.end = EndCondition::Duration(Duration::from_millis(500));
//! let report = xbench::client::run(&config, &mut |_event| {}, std::future::pending()).await?;
//!
//! let up = &report.summary.directions[0];
//! let received = up.receiver.expect("the server reported");
//! // Every rate covers the one measured window: the asked half second, as the sender's clock
//! // read it (a busy machine wakes the end mark a little late, never early).
//! assert_eq!(received.seconds, up.sender.expect("our own figure").seconds);
//! assert!(received.seconds >= 0.5);
//! assert!(received.bits_per_second > 0.0);
//! // Every byte sent arrived, inside the window or just after it (it was in flight).
//! assert_eq!(
//!     received.bytes + up.after_end.bytes,
//!     up.sender.expect("our own figure").bytes + up.after_end.sent_bytes
//! );
//!
//! let _ = stop.send(());
//! serving.await??;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod api;
pub mod auth;
pub mod check;
pub mod client;
pub mod config;
mod control;
pub mod diagnosis;
mod engine;
mod error;
pub mod field;
pub mod file;
mod hex;
pub mod host;
pub mod latency;
pub mod proto;
pub mod report;
pub mod server;
pub mod summary;
pub mod tcp_info;
pub mod time;
pub mod trace;
pub mod under_load;
pub mod units;

pub use api::{LatencyBuilder, LocalServer, Test, ThroughputBuilder, blocking, run};
pub use client::{ClientConfig, ClientEvent, ServerProtocol};
pub use config::{
    Direction, EndCondition, SocketOptions, StreamDirection, TestSpec, ThroughputSpec, Workload,
};
pub use error::Error;
pub use report::TestReport;
pub use server::{Limits, Server, ServerConfig};
