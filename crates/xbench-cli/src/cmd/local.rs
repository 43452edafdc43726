//! What `xbench client` and a sweep share around the library's client: the in-process server
//! of `--local`, and Ctrl-C handling (the first ends the test and keeps what was measured; for
//! a sweep a second exits at once, for one test it stops the waiting and the results are still
//! written).

use std::future::Future;

use anyhow::Context;
use tokio::sync::oneshot;
use xbench::auth::Psk;

use crate::exit::Exit;

/// The library's in-process server (one implementation for the CLI and embedders), with the
/// CLI's context on its errors.
#[derive(Debug)]
pub(crate) struct LocalServer {
    server: xbench::LocalServer,
    pub(crate) port: u16,
}

impl LocalServer {
    /// Starts one, with the client's key if it has one.
    pub(crate) async fn start(psk: Option<Psk>) -> anyhow::Result<Self> {
        let server = xbench::LocalServer::start(psk)
            .await
            .context("cannot start the in-process server")?;
        let port = server.port();
        Ok(LocalServer { server, port })
    }

    /// Stops it and waits for its tests to wind down, for at most 2 s: a test the client has
    /// given up on (a second Ctrl-C) must not hold the process. Its own failure changes
    /// nothing by then: the test's results are out.
    pub(crate) async fn stop(self) {
        let _ = self.server.stop().await;
    }
}

/// Resolves at the first Ctrl-C; a second one exits the process with status 130 after
/// printing `second` (what is lost by not waiting).
pub(crate) fn ctrl_c(second: &'static str) -> impl Future<Output = ()> {
    let (first_tx, first_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = first_tx.send(());
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("xbench: interrupted twice; exiting without {second}");
                std::process::exit(Exit::Interrupted.code());
            }
        }
    });
    async {
        if first_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Ctrl-C for one test, whose results are written however often the user presses it: the
/// first Ctrl-C resolves the first future (end the test), the second resolves the second
/// (stop waiting for the end), and any later one only says that the results are on their way.
/// The handler is installed before this returns, so no Ctrl-C falls to the default action
/// (which would exit without a word or a file).
pub(crate) fn ctrl_c_twice() -> anyhow::Result<(impl Future<Output = ()>, impl Future<Output = ()>)>
{
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigint = signal(SignalKind::interrupt()).context("cannot catch Ctrl-C (SIGINT)")?;
    let (first_tx, first_rx) = oneshot::channel::<()>();
    let (second_tx, second_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        if sigint.recv().await.is_none() {
            return;
        }
        let _ = first_tx.send(());
        if sigint.recv().await.is_none() {
            return;
        }
        eprintln!(
            "xbench: interrupted twice; not waiting for the end of the test — writing what was \
             measured"
        );
        let _ = second_tx.send(());
        while sigint.recv().await.is_some() {
            eprintln!("xbench: already stopping; writing what was measured");
        }
    });
    Ok((fired(first_rx), fired(second_rx)))
}

/// Resolves when `rx` is sent to; never if its sender is gone without sending.
async fn fired(rx: oneshot::Receiver<()>) {
    if rx.await.is_err() {
        std::future::pending::<()>().await;
    }
}
