//! Sweeps, repeats and comparisons of network paths, built on the `xbench` library.
//!
//! What people did by hand with iperf3 — run `-P 1,2,4,8,16` fifteen times per path, average,
//! compute the spread, paste a table per path and draw bandwidth vs streams — in steps:
//!
//! 1. The `xbench-sweep` crate runs the tests: it expands lists of streams, windows,
//!    request/response sizes and flows into cells, runs each cell `repeat` times in
//!    round-robin order, and saves every finished run at once (where, see [`layout`]).
//! 2. [`load`](mod@load) reads saved runs back: xbench reports and `iperf3 -J` files ([`iperf3`]).
//! 3. [`table`] groups runs into cells per label with [`stats`] (mean, sample standard
//!    deviation, Student-t 95 % CI, CV); [`render`] prints that as text, Markdown, CSV or JSON.
//! 4. [`chart`] draws the comparison charts to SVG or PNG; [`html`] puts the whole comparison
//!    — a verdict per cell ([`verdict`]), every chart, the tables — in one self-contained page.
//! 5. [`compare`](mod@compare) checks a candidate set of runs against a baseline, per cell and
//!    path, for regressions with statistical confidence ([`hypothesis`]: Welch's t-test,
//!    Mann-Whitney U): the network regression check a CI job or a `cargo test` can run.
//!
//! This crate only reads, computes and draws: it runs no test. It prints nothing and knows no
//! command line; the `xbench` binary drives it.
//!
//! ```
//! use std::path::PathBuf;
//! use xbench::config::StreamDirection;
//! use xbench_report::cell::CellKey;
//! use xbench_report::run::{DirectionResult, Measure, Run};
//! use xbench_report::{render, table::Comparison, units::ThroughputUnit};
//!
//! // Three runs of one cell on each of two paths, as `load` would return them.
//! let run = |label: &str, mbps: f64| Run {
//!     path: PathBuf::from(format!("{label}.json")),
//!     label: label.into(),
//!     key: CellKey::of_spec(&xbench::config::TestSpec::throughput()),
//!     started_at: String::new(),
//!     length_s: Some(10.0),
//!     facts: Default::default(),
//!     measure: Measure::Throughput(vec![DirectionResult {
//!         direction: StreamDirection::ClientToServer,
//!         bits_per_second: mbps * 1e6,
//!         retransmits: 0,
//!         rtt_mean_us: None,
//!         window_ceiling_bps: None,
//!         verdict: None,
//!         timeline: vec![],
//!     }]),
//! };
//! let runs = [
//!     run("peering", 940.0), run("peering", 950.0), run("peering", 960.0),
//!     run("vpn", 400.0), run("vpn", 420.0), run("vpn", 380.0),
//! ];
//! let table = Comparison::build(&runs);
//! let peering = &table.throughput[0].bits_per_second;
//! assert_eq!(peering.mean, 950e6);
//! // s = 10 Mbit/s; t(2) = 4.3027; half-width = 4.3027 · 10 / √3 = 24.84 Mbit/s.
//! assert!((peering.ci95_high.unwrap() - 974.84e6).abs() < 0.01e6);
//! let text = render::render(&table, render::Format::Text, ThroughputUnit::Mbits);
//! assert!(text.contains("peering"));
//! ```

#![deny(missing_docs)]

pub mod cell;
pub mod chart;
pub mod compare;
pub mod fleet;
pub mod html;
pub mod hypothesis;
pub mod iperf3;
pub mod layout;
pub mod load;
pub mod paths;
pub mod render;
pub mod run;
pub mod stats;
pub mod table;
pub mod units;
pub mod verdict;

pub use compare::{Criteria, RegressionCheck, compare};
pub use load::{Loaded, Warning, load, load_with_limit};
pub use table::Comparison;
pub use units::ThroughputUnit;
