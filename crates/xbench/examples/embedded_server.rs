//! An xbench server inside a longer-lived service, stopped gracefully: Ctrl-C (SIGINT) resolves
//! the shutdown future, the server stops accepting, lets running tests end and returns.
//!
//! `cargo run -p xbench --example embedded_server -- [PORT]` (default 5201), then
//! `xbench client 127.0.0.1 -p PORT` from another terminal.

#![allow(clippy::print_stdout, clippy::print_stderr)] // an example program owns its terminal

use std::net::{IpAddr, Ipv4Addr};

use xbench::{Server, ServerConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = match std::env::args().nth(1) {
        Some(p) => p.parse()?,
        None => xbench::client::DEFAULT_PORT,
    };
    let server = Server::bind(ServerConfig {
        bind: vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)],
        port,
        ..ServerConfig::default()
    })
    .await?;
    eprintln!(
        "xbench server on {:?}; Ctrl-C stops it",
        server.local_addrs()
    );

    // The rest of the service would run beside it here.
    server
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
            eprintln!("stopping: letting running tests finish");
        })
        .await?;
    eprintln!("stopped");
    Ok(())
}
