//! `xbench server`.

use anyhow::Context;
use tracing::info;
use xbench::auth::Psk;
use xbench::{Limits, Server, ServerConfig};

use crate::cli::{LogFormat, ServerArgs};
use crate::exit::{Exit, UsageError};

pub(crate) async fn run(args: ServerArgs) -> anyhow::Result<Exit> {
    init_logging(args.log_format);
    let psk = match &args.psk_file {
        Some(path) => {
            warn_if_readable_by_others(path);
            Some(Psk::from_file(path).map_err(|e| UsageError(e.to_string()))?)
        }
        None => None,
    };
    // main() raised the soft limit to the hard one; what it allows sets the flow defaults.
    let open_files = crate::fd_limit::open_files();
    let asked = Limits {
        client_share: args.client_share,
        max_threads: args.max_threads,
        ..Limits::default()
    };
    let derived = match open_files {
        Some(n) => asked.clone().sized_for(n),
        None => asked,
    };
    let config = ServerConfig {
        bind: args.bind.clone(),
        port: args.port,
        one_off: args.one_off,
        limits: Limits {
            max_streams: args.max_streams,
            max_flows: args.max_flows.unwrap_or(derived.max_flows),
            max_block_len: args.max_block_len.get(),
            max_duration: args.max_duration,
            max_tests: args.max_tests,
            max_tests_per_client: args.max_tests_per_client,
            max_handshakes: args.max_handshakes.unwrap_or(derived.max_handshakes),
            max_threads: args.max_threads,
            client_share: args.client_share,
            open_files,
            max_send_rate: args.max_send_rate,
            idle_timeout: args.idle_timeout,
            ..Limits::default()
        },
        shutdown_grace: args.shutdown_grace,
        psk,
        allow: args.allow.clone(),
        metrics: args.metrics,
    };
    // The library's bounds (--max-handshakes at least twice a client's burst among them), in the
    // same words a program embedding the server gets.
    config.check().map_err(|e| UsageError(e.to_string()))?;
    if config.psk.is_none() {
        info!("no --psk-file: any client that can reach this port may run tests");
    }
    info!(
        "request/response: at most {} flows per test, {} connections in their handshake \
         (open-file limit {})",
        config.limits.max_flows,
        config.limits.max_handshakes,
        open_files.map_or_else(|| "unknown".to_owned(), |n| n.to_string())
    );
    let server = Server::bind(config)
        .await
        .with_context(|| format!("cannot start the server on port {}", args.port))?;
    for a in server.local_addrs() {
        info!(
            "xbench server {} listening on {a}",
            env!("CARGO_PKG_VERSION")
        );
    }
    if let Some(a) = server.metrics_addr() {
        info!("metrics at http://{a}/metrics");
    }
    server
        .run(shutdown_signal())
        .await
        .context("server failed")?;
    info!("server stopped");
    Ok(Exit::Success)
}

/// SIGINT or SIGTERM (systemd's stop).
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// Logs go to stderr: text for a terminal, JSON lines for a log shipper. `RUST_LOG` overrides
/// the level.
pub(crate) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: escape codes in a journal or a log file are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// A key others can read is a key others have; say so (but run: the operator decides).
pub(crate) fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            "{} is readable by other users; `chmod 600` it",
            path.display()
        );
    }
}
