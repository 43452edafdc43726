//! Tests for programs without an async runtime: each call builds a tokio runtime, runs, and
//! shuts it down. Not for use inside a runtime (an `async fn`, a `#[tokio::main]` program):
//! there, await [`crate::run`] and [`crate::LocalServer`] instead. Called inside one, these
//! return an error rather than panic, as tokio would when a runtime is started inside another.

use std::io;

use crate::client::ClientConfig;
use crate::config::TestSpec;
use crate::error::Error;
use crate::report::TestReport;

use super::LocalServer;

/// Runs `config`'s test to its end and returns its report.
///
/// ```no_run
/// let config = xbench::Test::throughput().streams(4).client("192.0.2.10")?;
/// let report = xbench::blocking::run(&config)?;
/// println!("{report}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run(config: &ClientConfig) -> Result<TestReport, Error> {
    runtime("xbench::blocking::run")?.block_on(super::run(config))
}

/// Runs `spec` against an in-process server on a free loopback port (`xbench client --local`):
/// starts it, runs the test, stops it. Measures this host's own stack, not a network.
pub fn run_local(spec: TestSpec) -> Result<TestReport, Error> {
    runtime("xbench::blocking::run_local")?.block_on(async {
        let server = LocalServer::start(None).await?;
        let config = server.client_config(spec, None);
        let report = super::run(&config).await;
        // The report first: a failed wind-down must not hide what was measured.
        let stopped = server.stop().await;
        let report = report?;
        stopped?;
        Ok(report)
    })
}

/// A runtime for one call, or an error naming `caller` when there is one already.
fn runtime(caller: &str) -> Result<tokio::runtime::Runtime, Error> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::io(
            format!("{caller} was called inside a tokio runtime"),
            io::Error::other("await xbench::run (and xbench::LocalServer) there instead"),
        ));
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start a tokio runtime", e))
}
