//! An xbench server on a free loopback port inside the calling process: what
//! `xbench client --local` tests against, and what an embedding program or a test uses to
//! measure its own host's stack without a second process. Not a production server: it listens
//! on 127.0.0.1 only, with the default [`Limits`](crate::Limits) but for `max_flows`: any
//! `--flows` the client may ask, since client and server share the process's descriptors and
//! the client checks those for both ends.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::Psk;
use crate::client::ClientConfig;
use crate::config::{MAX_FLOWS, TestSpec};
use crate::error::Error;
use crate::server::{Limits, Server, ServerConfig};

/// How long [`LocalServer::stop`] waits for tests to wind down: a test whose client gave up
/// (a second Ctrl-C) must not hold the process.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// A server on a free loopback port in this process; [`stop`](Self::stop) ends it. Dropping it
/// ends it too, without waiting.
///
/// Must be started inside a tokio runtime (it spawns the server's task there).
#[derive(Debug)]
pub struct LocalServer {
    /// Dropped or sent to, it resolves the server's shutdown future.
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), Error>>,
    addr: SocketAddr,
}

impl LocalServer {
    /// Binds 127.0.0.1 on a port the kernel picks and starts serving. With `psk`, the server
    /// demands that key, as `xbench server --psk-file` does.
    pub async fn start(psk: Option<Psk>) -> Result<Self, Error> {
        let server = Server::bind(ServerConfig {
            bind: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            port: 0,
            psk,
            limits: Limits {
                max_flows: MAX_FLOWS,
                // Its one client may have all of it (the client's own check keeps both ends'
                // sockets within the process's open-file limit).
                client_share: 100,
                ..Limits::default()
            },
            ..ServerConfig::default()
        })
        .await?;
        let addr = server.local_addrs().first().copied().ok_or_else(|| {
            Error::io(
                "starting the in-process server",
                io::Error::other("it listens on no address"),
            )
        })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Ok(LocalServer { stop, task, addr })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address it listens on (127.0.0.1 and [`port`](Self::port)).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A client configuration for `spec` against this server, with `psk` (the server's key,
    /// if it was started with one).
    pub fn client_config(&self, spec: TestSpec, psk: Option<Psk>) -> ClientConfig {
        ClientConfig {
            port: self.port(),
            spec,
            psk,
            ..ClientConfig::new(self.addr.ip().to_string())
        }
    }

    /// Stops it and waits up to 2 s for running tests to wind down; past that the server's
    /// task is aborted (its sockets close). Returns the server's own error, if it failed.
    pub async fn stop(self) -> Result<(), Error> {
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(STOP_WAIT, &mut task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(Error::io(
                "the in-process server",
                io::Error::other(join.to_string()),
            )),
            Err(_elapsed) => {
                task.abort();
                Ok(())
            }
        }
    }
}
