//! What both ends do the same way around a control connection: the socket's keepalive, and the
//! optional deadlines the controllers' `select!` loops wait on beside it.
//!
//! Not the messages (those are [`crate::proto`]) and not either end's steps (`client`,
//! `server`): only what the client and the server would otherwise each write for themselves.

use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::net::TcpStream;

/// TCP keepalive on a control connection: a peer that vanishes without a word (cable pulled,
/// laptop closed) is noticed within about 25 s instead of never.
pub(crate) fn keepalive(s: &TcpStream) {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    let _ = SockRef::from(s).set_tcp_keepalive(&ka);
}

/// Sleeps until `t`, or for ever without one (a `select!` branch that never fires).
pub(crate) async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
