//! The `xbench` command: `xbench server` and `xbench client`. Parses flags, hands typed
//! configuration to the library, prints what comes back, and maps the outcome to an exit status.

#![allow(clippy::print_stderr)] // the binary owns the terminal

mod cli;
mod cmd;
mod exit;
mod parse;
mod render;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::exit::Exit;

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xbench: cannot start the async runtime: {e}");
            std::process::exit(Exit::Failure.code());
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Client(args) => cmd::client::run(args).await,
            Command::Server(args) => cmd::server::run(args).await,
            Command::Lab(args) => cmd::lab::run(args).await,
        }
    });
    let status = match result {
        Ok(status) => status,
        Err(e) => {
            let status = exit::for_error(&e);
            if status != Exit::Success {
                eprintln!("xbench: {e:#}");
                if status == Exit::Usage {
                    eprintln!("\nFor more information, try '--help'.");
                }
            }
            status
        }
    };
    // Stream threads of an abandoned test must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    std::process::exit(status.code());
}
