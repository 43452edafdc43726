//! The embedding API: what a program that is not the `xbench` binary needs to run a test in a
//! few lines. Builders that refuse what the CLI refuses ([`Test`]), an in-process loopback
//! server ([`LocalServer`], what `xbench client --local` runs), a one-call async [`run`], a
//! [`blocking`] front for programs without a runtime, and headline figures as typed accessors
//! and `Display` on [`TestReport`].
//!
//! It is a layer over [`crate::client`] and [`crate::server`], not a second engine: anything
//! it cannot express (live events, Ctrl-C handling, a second way out) is there.

pub mod blocking;
mod builder;
mod display;
mod figures;
mod limits;
mod local;

pub use builder::{LatencyBuilder, Test, ThroughputBuilder};
pub use local::LocalServer;

use crate::client::ClientConfig;
use crate::error::Error;
use crate::report::TestReport;

/// Runs `config`'s test to its end, with no live events and no way to stop it early: the
/// common case for an embedding program. For intervals as they arrive, or cancellation, use
/// [`crate::client::run`].
pub async fn run(config: &ClientConfig) -> Result<TestReport, Error> {
    crate::client::run(config, &mut |_event| {}, std::future::pending()).await
}
