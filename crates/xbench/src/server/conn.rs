//! A new connection on the server port, until it has said what it is: an xbench control
//! connection (handed to a [`session`](super::session)), a data connection (handed to its test
//! through the registry), an iperf3 control connection (handed to an [`iperf3`](super::iperf3)
//! session), an iperf3 data connection (routed by its cookie to the test waiting for it), or
//! something else (dropped). Also the `--allow` list, which is checked here.
//!
//! Every read here is bounded by the handshake timeout, and a connection holds one of
//! [`Limits::max_handshakes`](super::config::Limits::max_handshakes) slots while it reads. Not the
//! session itself, nor the accept loop that spawns these. The one exception waits for
//! nothing: [`attach_at_once`], which the accepting thread calls on a data connection whose
//! whole greeting has already arrived (and which may answer a `--crr` request there too).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use super::context::Ctx;
use super::slot::HandshakeSlot;
use super::{iperf3, session};
use crate::proto::frontend::{self, Frontend};
use crate::proto::iperf3::{COOKIE_LEN, State as Iperf3State};
use crate::proto::{
    self, Channel, DATA_GREETING_LEN, DATA_HELLO_LEN, DataHello, ErrorCode, ErrorMsg, PREAMBLE_LEN,
    Preamble,
};

/// How a connection ended, for `--one-off`.
#[derive(Debug)]
pub(super) enum ConnEnd {
    TestCompleted,
    Other,
}

/// Serves one accepted connection to its end; `accepted` numbers connections in the order
/// they were accepted.
pub(super) async fn handle(
    mut stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    slot: HandshakeSlot,
    accepted: u64,
) -> ConnEnd {
    let allowed = ctx.allow.is_empty() || {
        let ip = peer.ip().to_canonical();
        ctx.allow.iter().any(|n| n.contains(&ip))
    };
    // A peer outside --allow only gets its refusal if it says at once what it is; it does
    // not get to hold a connection open for the whole handshake timeout.
    let limit = if allowed {
        ctx.limits.handshake_timeout
    } else {
        ctx.limits.handshake_timeout.min(Duration::from_secs(1))
    };
    let pre = match identify(&mut stream, peer, limit).await {
        Ok(Identified::Xbench(pre)) => pre,
        Ok(Identified::Iperf3(cookie)) => {
            if !allowed {
                ctx.metrics.handshake_failed("forbidden");
                info!(%peer, "refused an iperf3 client from outside the --allow list");
                let _ = stream.write_all(&[Iperf3State::AccessDenied.byte()]).await;
                return ConnEnd::Other;
            }
            return match ctx.iperf3.route(&cookie, accepted, stream) {
                Ok(()) => ConnEnd::Other,
                Err(stream) => match iperf3::run(stream, peer, cookie, ctx, slot).await {
                    true => ConnEnd::TestCompleted,
                    false => ConnEnd::Other,
                },
            };
        }
        Err(reason) => {
            ctx.metrics.handshake_failed(reason);
            return ConnEnd::Other;
        }
    };
    if !allowed {
        ctx.metrics.handshake_failed("forbidden");
        refuse_outsider(stream, peer, pre.channel, &ctx, limit).await;
        return ConnEnd::Other;
    }
    match pre.channel {
        Channel::Control => match session::run(stream, peer, pre.version, ctx, slot).await {
            super::test::SessionEnd::Completed => ConnEnd::TestCompleted,
            super::test::SessionEnd::Other => ConnEnd::Other,
        },
        Channel::Data => {
            attach_data(stream, peer, &ctx).await;
            drop(slot);
            ConnEnd::Other
        }
        Channel::Server => {
            info!(%peer, "dropped a connection that claims to be a server");
            ConnEnd::Other
        }
    }
}

/// What a connection said it is.
enum Identified {
    Xbench(Preamble),
    /// An iperf3 connection and its cookie: a control connection, or a data connection of a
    /// test that waits for it.
    Iperf3([u8; COOKIE_LEN]),
}

/// Reads the connection's preamble (or iperf3 cookie) within `limit`. `None` once the
/// connection has been dropped (silence, garbage), with a log line.
async fn identify(
    stream: &mut TcpStream,
    peer: SocketAddr,
    limit: Duration,
) -> Result<Identified, &'static str> {
    let mut first = [0u8; 4];
    match tokio::time::timeout(limit, stream.read_exact(&mut first)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            debug!(%peer, "connection closed before saying anything: {e}");
            return Err("closed");
        }
        Err(_) => {
            info!(%peer, "dropped a connection that said nothing for {limit:?}");
            return Err("timeout");
        }
    }
    match frontend::detect(&first) {
        Frontend::Xbench => {}
        Frontend::Iperf3 => return read_cookie(stream, peer, limit, first).await,
        Frontend::Unknown => {
            info!(%peer, first = ?first, "dropped a connection that does not speak xbench");
            return Err("garbage");
        }
    }
    let mut pre = [0u8; proto::PREAMBLE_LEN];
    pre[..4].copy_from_slice(&first);
    if tokio::time::timeout(limit, stream.read_exact(&mut pre[4..]))
        .await
        .map_or(true, |r| r.is_err())
    {
        info!(%peer, "dropped a connection with a truncated preamble");
        return Err("truncated");
    }
    match Preamble::decode(&pre) {
        Ok(p) => Ok(Identified::Xbench(p)),
        Err(e) => {
            info!(%peer, "dropped a connection: {e}");
            Err("garbage")
        }
    }
}

/// Reads the rest of an iperf3 cookie whose first four bytes are `first`.
async fn read_cookie(
    stream: &mut TcpStream,
    peer: SocketAddr,
    limit: Duration,
    first: [u8; 4],
) -> Result<Identified, &'static str> {
    let mut cookie = [0u8; COOKIE_LEN];
    cookie[..4].copy_from_slice(&first);
    if tokio::time::timeout(limit, stream.read_exact(&mut cookie[4..]))
        .await
        .map_or(true, |r| r.is_err())
    {
        info!(%peer, "dropped an iperf3-looking connection with a truncated cookie");
        return Err("truncated");
    }
    if !crate::proto::iperf3::is_cookie(&cookie) {
        info!(%peer, "dropped an iperf3-looking connection whose cookie is not one");
        let _ = stream.write_all(&frontend::iperf3_refusal()).await;
        return Err("garbage");
    }
    Ok(Identified::Iperf3(cookie))
}

/// Refuses a peer outside `--allow`; a control connection is told why, and a data
/// connection's test (the client's other addresses may be allowed: a `-B` list), which tells
/// its client.
async fn refuse_outsider(
    mut stream: TcpStream,
    peer: SocketAddr,
    channel: Channel,
    ctx: &Ctx,
    limit: Duration,
) {
    info!(%peer, "refused a connection from outside the --allow list");
    if channel == Channel::Data {
        let mut hello = [0u8; DATA_HELLO_LEN];
        if let Ok(Ok(_)) = tokio::time::timeout(limit, stream.read_exact(&mut hello)).await {
            ctx.registry.note_outsider(&DataHello::decode(&hello), peer);
        }
    }
    if channel == Channel::Control {
        let _ = stream
            .write_all(&Preamble::new(Channel::Server).encode())
            .await;
        let msg = format!(
            "{} is not allowed to use this server (its --allow list)",
            peer.ip().to_canonical()
        );
        let _ =
            proto::write_message(&mut stream, &ErrorMsg::message(ErrorCode::Forbidden, msg)).await;
    }
}

/// Attaches a just-accepted data connection to its test without waiting, if the whole of its
/// greeting has already arrived: a data connection's client sends it at once, with a `--crr`
/// connection's request in the same segment, so this is the common case. Returns the
/// connection when it is anything else, or its greeting is not all there yet; [`handle`] then
/// takes it, with a handshake slot and the timeouts. A connection taken here never waits, so
/// it needs no slot; one from outside `--allow` always goes the long way, which refuses it.
pub(super) fn attach_at_once(
    sock: std::net::TcpStream,
    peer: SocketAddr,
    ctx: &Ctx,
) -> Option<std::net::TcpStream> {
    if !ctx.allow.is_empty() {
        let ip = peer.ip().to_canonical();
        if !ctx.allow.iter().any(|n| n.contains(&ip)) {
            return Some(sock);
        }
    }
    let mut buf = [0u8; DATA_GREETING_LEN];
    let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    // SAFETY: `buf` is writable for its length for the duration of the call.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n != DATA_GREETING_LEN as isize {
        return Some(sock);
    }
    let pre: &[u8; PREAMBLE_LEN] = buf[..PREAMBLE_LEN].try_into().ok()?;
    if !matches!(Preamble::decode(pre), Ok(p) if p.channel == Channel::Data) {
        return Some(sock);
    }
    // The greeting stays on the socket for its test to take: a `--crr` connection answered
    // here takes it with its request, one system call instead of two (issue 36).
    let hello: &[u8; DATA_HELLO_LEN] = buf[PREAMBLE_LEN..].try_into().ok()?;
    attach(DataHello::decode(hello), sock, peer, ctx, DATA_GREETING_LEN);
    None
}

/// Reads a data connection's [`DataHello`] and hands the connection to its test.
async fn attach_data(mut stream: TcpStream, peer: SocketAddr, ctx: &Ctx) {
    let mut hello = [0u8; DATA_HELLO_LEN];
    let limit = ctx.limits.handshake_timeout;
    if tokio::time::timeout(limit, stream.read_exact(&mut hello))
        .await
        .map_or(true, |r| r.is_err())
    {
        info!(%peer, "dropped a data connection that did not name its test");
        return;
    }
    let hello = DataHello::decode(&hello);
    let std = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            warn!(%peer, "cannot take over a data connection: {e}");
            return;
        }
    };
    attach(hello, std, peer, ctx, 0);
}

/// Hands a data connection that greeted with `hello` to its test, or logs why not; `unread`
/// bytes of the greeting are still on it ([`super::registry::Registry::attach`]).
fn attach(hello: DataHello, sock: std::net::TcpStream, peer: SocketAddr, ctx: &Ctx, unread: usize) {
    let (cookie, id) = (hello.cookie, hello.id);
    match ctx.registry.attach(&hello, sock, peer, unread) {
        Ok(()) => {}
        Err(e) if e.is_intrusion() => {
            warn!(%peer, ?cookie, stream = id, "refused a data connection: {e}");
        }
        Err(e) => info!(%peer, ?cookie, stream = id, "dropped a data connection: {e}"),
    }
}
