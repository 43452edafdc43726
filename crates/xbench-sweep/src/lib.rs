//! Sweeps and repeats of xbench tests: expand lists of streams, windows, request/response sizes
//! and flows into cells, run every cell `repeat` times through [`xbench::client::run`], and save
//! each finished run at once where `xbench report` reads it.
//!
//! A [`SweepPlan`] is typed: a [`Target`] (the server), a test spec, the lists that make its
//! cells, repeats and pause. Every field is one of `xbench client`'s flags, and
//! [`SweepPlan::client_args`] writes a plan (or one cell of it) as the command that runs it,
//! for programs that start `xbench` instead of linking this crate (the lab, deployments).
//!
//! Order spreads drift: round-robin over the cells, repeat by repeat (P=1, P=2, P=4, P=1, P=2,
//! P=4, …), never all repeats of one cell in a row, so that a path that slows down in the
//! afternoon shows up as spread in every cell instead of as a fake trend across cells.
//!
//! Saving follows [`xbench_report::layout`]: `DIR/<label>/<cell>/run-<n>.json`, written with
//! [`xbench::file::write_atomically`].
//! `resume` skips runs whose file exists and refuses files whose test differs from the plan.
//! A run cut short by cancel (Ctrl-C) or that failed is **not saved**: its figures describe
//! part of a test, and averaging them in would bias the cell; a resumed sweep runs it again.
//! Cancel stops the sweep after the run in progress returns, keeping everything finished.
//! The crate prints nothing and knows no command line; events go to the caller. Reading the
//! saved runs back, the statistics and the charts are `xbench-report`'s.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::num::{NonZeroU16, NonZeroU32};
//! use std::time::Duration;
//! use xbench::{EndCondition, Server, ServerConfig, TestSpec};
//! use xbench_sweep::{SweepEnd, SweepPlan, Target};
//!
//! let server = Server::bind(ServerConfig {
//!     bind: vec!["127.0.0.1".parse()?],
//!     port: 0,
//!     ..ServerConfig::default()
//! })
//! .await?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let mut target = Target::new("127.0.0.1");
//! target.port = server.local_addrs()[0].port();
//! let serving = tokio::spawn(server.run(async { let _ = stopped.await; }));
//!
//! // -P 1,2 --repeat 2 -t 0.2, kept in memory (no `save`).
//! let mut spec = TestSpec::throughput();
//! spec.end = EndCondition::Duration(Duration::from_millis(200));
//! let mut plan = SweepPlan::new(target, spec, "loopback");
//! plan.streams = vec![NonZeroU16::new(1).unwrap(), NonZeroU16::new(2).unwrap()];
//! plan.repeat = NonZeroU32::new(2).unwrap();
//! // What `xbench client` would be given to run the same sweep.
//! assert_eq!(
//!     plan.client_args()?[5..],
//!     ["-P", "1,2", "-t", "0.2", "--repeat", "2"]
//! );
//! let outcome = xbench_sweep::run(&plan, &mut |_event| {}, std::future::pending()).await?;
//! assert_eq!(outcome.summary.end, SweepEnd::Completed);
//! assert_eq!(outcome.runs.len(), 4);
//! let table = xbench_report::Comparison::build(&outcome.runs);
//! assert_eq!(table.throughput.len(), 2, "one row per cell");
//! assert_eq!(table.throughput[1].runs, 2);
//!
//! let _ = stop.send(());
//! serving.await??;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod args;
mod diff;
mod error;
mod plan;
pub mod rebuild;
mod run;
pub mod suite;
mod target;

pub use args::RenderError;
pub use diff::spec_differences;
pub use error::SweepError;
pub use plan::{PlannedRun, SweepPlan};
pub use run::{RunRecord, RunStatus, SweepEnd, SweepEvent, SweepOutcome, SweepSummary, run};
pub use suite::{Suite, SuiteError, SuiteTest};
pub use target::Target;
