//! The `xbench-deploy` command: `plan`, `up`, `run`, `all`, `down`, `gc`, and `completions` and
//! `man` for installing it. Parses flags, calls the library, prints what comes back, and maps the
//! outcome to an exit status.

#![allow(clippy::print_stderr)] // the binary owns the terminal

mod cli;
mod commands;
mod exit;
mod install;
mod render;

use std::io::IsTerminal as _;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};
use crate::exit::Exit;

fn main() {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xbench-deploy: cannot start the async runtime: {e}");
            std::process::exit(Exit::Failure.code());
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Plan(a) => commands::plan(&cli.common, a).await,
            Command::Up(a) => commands::up(&cli.common, a).await,
            Command::Run(a) => commands::run(&cli.common, a).await,
            Command::All(a) => commands::all(&cli.common, a).await,
            Command::Down(a) => commands::down(&cli.common, a).await,
            Command::Gc(a) => commands::gc(&cli.common, a).await,
            Command::Policy(a) => commands::policy(a),
            Command::Completions(a) => install::completions(a),
            Command::Man(a) => install::man(a),
        }
    });
    let status = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xbench-deploy: {e:#}");
            exit::for_error(&e)
        }
    };
    std::process::exit(status.code());
}

/// Progress lines to stderr. RUST_LOG refines the default (`xbench_deploy=info,warn`), but the
/// SDK's HTTP layers stay at `info` at most: at `trace` they can log request bodies, and a
/// RunInstances body carries user data holding a VPN gateway's private key.
fn init_logging() {
    let mut filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,xbench_deploy=info"));
    for directive in [
        "aws_smithy_runtime=info",
        "aws_smithy_runtime_api=info",
        "aws_smithy_http_client=info",
        "aws_runtime=info",
        "aws_sigv4=info",
        "hyper=info",
        "hyper_util=info",
    ] {
        if let Ok(d) = directive.parse() {
            filter = filter.add_directive(d);
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .init();
}
