//! A sweep that prints a table: 1, 2, 4 and 8 streams, one second each, against an in-process
//! loopback server, one row per stream count with the receiver's rate and the retransmits.

#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program owns its terminal

use std::fmt::Write as _;
use std::time::Duration;

use xbench::{LocalServer, StreamDirection, Test};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    print!("{}", sweep(&[1, 2, 4, 8], Duration::from_secs(1)).await?);
    Ok(())
}

/// Runs one test per stream count, one after the other, on one in-process server, and returns
/// the table.
pub(crate) async fn sweep(
    streams: &[u32],
    each: Duration,
) -> Result<String, Box<dyn std::error::Error>> {
    let server = LocalServer::start(None).await?;
    let mut table = format!(
        "{:>7}  {:>14}  {:>11}\n",
        "streams", "Gbit/s", "retransmits"
    );
    for &n in streams {
        let spec = Test::throughput().streams(n).duration(each).build()?;
        let report = xbench::run(&server.client_config(spec, None)).await?;
        let up = StreamDirection::ClientToServer;
        let gbps = report.receiver_bits_per_second(up).unwrap_or(f64::NAN) / 1e9;
        let retransmits = report.retransmits(up).unwrap_or(0);
        writeln!(table, "{n:>7}  {gbps:>14.2}  {retransmits:>11}")?;
    }
    server.stop().await?;
    Ok(table)
}
