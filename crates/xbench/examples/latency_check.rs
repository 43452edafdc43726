//! A latency assertion: "p99 to the database subnet is under 2 ms". Runs a request/response
//! test (one-byte requests and responses, 4 flows, 2 s) and exits non-zero when p99 is over
//! the limit, so a deploy script or CI job can gate on it.
//!
//! `latency_check [HOST [LIMIT_MS [PORT]]]`: HOST runs `xbench server` (on PORT, 5201 by
//! default); without one, or with `local`,
//! an in-process loopback server stands in (as `xbench client --local`).

#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program owns its terminal

use std::process::ExitCode;
use std::time::Duration;

use xbench::{LocalServer, Test};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let host = args.next().filter(|h| h != "local");
    let (Some(limit), Some(port)) = (
        args.next().map_or(Some(2.0), |ms| ms.parse::<f64>().ok()),
        args.next().map_or(Some(None), |p| p.parse().ok().map(Some)),
    ) else {
        eprintln!("usage: latency_check [HOST|local [LIMIT_MS [PORT]]]");
        return ExitCode::from(2);
    };
    let Ok(limit) = Duration::try_from_secs_f64(limit / 1e3) else {
        eprintln!("latency_check: the limit must be a positive number of milliseconds");
        return ExitCode::from(2);
    };
    match p99(host.as_deref(), port, Duration::from_secs(2)).await {
        Ok(p99) if within(p99, limit) => {
            println!("ok: p99 {p99:?} is within {limit:?}");
            ExitCode::SUCCESS
        }
        Ok(p99) => {
            println!("FAIL: p99 {p99:?} is over {limit:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("latency_check: {e}");
            ExitCode::from(2)
        }
    }
}

/// The assertion: a p99 equal to the limit passes.
pub(crate) fn within(p99: Duration, limit: Duration) -> bool {
    p99 <= limit
}

/// The p99 of a `duration`-long test to `host` (on `port`, or the default), or to an
/// in-process server without one.
pub(crate) async fn p99(
    host: Option<&str>,
    port: Option<u16>,
    duration: Duration,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let test = Test::latency().flows(4).duration(duration);
    let report = match host {
        Some(h) => {
            let mut config = test.client(h)?;
            config.port = port.unwrap_or(config.port);
            xbench::run(&config).await?
        }
        None => {
            let server = LocalServer::start(None).await?;
            let report = xbench::run(&server.client_config(test.build()?, None)).await;
            server.stop().await?;
            report?
        }
    };
    report
        .latency_percentile(99.0)
        .ok_or_else(|| format!("no transaction completed: {report}").into())
}
