//! Turning a connection away when it gets no handshake slot: every one is taken
//! (`--max-handshakes`), its address holds its share of them, or the descriptors are. A
//! control connection is told why, in the protocol, so its user reads "busy, try later"
//! instead of "connection reset by peer"; anything else is closed. Each refusal is bounded in
//! time ([`REFUSAL_TIME`]) and in number ([`MAX_REFUSING`]), so a flood that fills the slots
//! cannot pin tasks or sockets through the refusals either: beyond the bound, connections are
//! closed at once, as before.
//!
//! Not the slots themselves ([`conn`](super::conn)) nor the accept loop.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::budget::Busy;
use crate::proto::{self, Channel, ErrorCode, ErrorMsg, PREAMBLE_LEN, Preamble};

/// Most refusals in progress at once; past it a connection is closed without a word.
pub(super) const MAX_REFUSING: usize = 64;

/// Longest a refusal may take: the client's preamble (sent as it connects), our answer, and
/// its close after reading it, a few round trips on any real path.
pub(super) const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// The refusals in progress.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    tasks: JoinSet<()>,
}

impl Refusals {
    /// Tells `stream` the server is busy, and `why`, in a task of its own, if fewer than
    /// [`MAX_REFUSING`] refusals are in progress; closes it at once otherwise.
    pub(super) fn refuse(&mut self, stream: TcpStream, why: Busy) {
        if self.tasks.len() < MAX_REFUSING {
            self.tasks.spawn(async move {
                let _ = tokio::time::timeout(REFUSAL_TIME, tell_busy(stream, why)).await;
            });
        }
    }

    /// Resolves when a refusal has ended (never while none is in progress), so the accept
    /// loop can reap it.
    pub(super) async fn reap(&mut self) {
        if self.tasks.join_next().await.is_none() {
            std::future::pending::<()>().await;
        }
    }

    /// Stops the refusals still in progress.
    pub(super) async fn shutdown(&mut self) {
        self.tasks.shutdown().await;
    }
}

/// What a busy server says, and what to do about it.
fn busy_message(why: &Busy) -> String {
    format!("the server is busy: {why}")
}

/// Reads the client's preamble first (closing with it unread would send a reset, and the
/// client would lose the refusal), answers a control connection with our preamble and an
/// `Error`, then waits for the client to close after reading it.
async fn tell_busy(mut stream: TcpStream, why: Busy) {
    let mut pre = [0u8; PREAMBLE_LEN];
    if stream.read_exact(&mut pre).await.is_err() {
        return;
    }
    match Preamble::decode(&pre) {
        Ok(p) if p.channel == Channel::Control => {}
        _ => return,
    }
    let ours = Preamble::new(Channel::Server).encode();
    if stream.write_all(&ours).await.is_err() {
        return;
    }
    let msg = ErrorMsg::message(ErrorCode::LimitExceeded, busy_message(&why));
    if proto::write_message(&mut stream, &msg).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    // The client's hello and its close: read, discarded, until it hangs up.
    let mut sink = [0u8; 1024];
    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
}
