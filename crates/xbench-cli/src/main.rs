//! The `xbench` command: `xbench server`, `xbench client`, `xbench report`, `xbench compare`,
//! and `xbench completions` and `xbench man` for installing it. Parses flags, hands typed
//! configuration to the library, prints what comes back, and maps the outcome to an exit status.

#![allow(clippy::print_stderr)] // the binary owns the terminal

#[cfg(test)]
mod builder_parity;
mod cli;
mod cmd;
mod exit;
mod fd_limit;
mod flow_space;
mod iperf3_habits;
mod parse;
mod plan;
mod render;

use crate::cli::Command;
use crate::exit::Exit;
use crate::plan::Plan;

fn main() {
    let cli = cli::parse();
    raise_fd_limit();
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
            Command::Client(args) => match plan::resolve(*args) {
                Ok(Plan::Single(test)) => cmd::client::run(test).await,
                Ok(Plan::Sweep(sweep)) => cmd::sweep::run(sweep).await,
                Err(e) => Err(e.into()),
            },
            Command::Server(args) => cmd::server::run(args).await,
            Command::Lab(args) => cmd::lab::run(args).await,
            Command::Report(args) => cmd::report::run(args),
            Command::Compare(args) => cmd::compare::run(args),
            Command::Completions(args) => cmd::completions::run(args),
            Command::Man(args) => cmd::man::run(args),
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

/// A thousand request/response flows (twice that with `--local`, whose server shares the
/// process) need more descriptors than the usual soft limit of 1024; the hard limit is ours to
/// take. Failure leaves the limit as it was; running out later is then reported as such.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
