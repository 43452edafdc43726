//! iperf3 tests waiting for their TCP data connections, which open with the test's cookie:
//! the accept path routes each one here ([`Iperf3Streams::route`]). Part of what the server's
//! sessions share, apart from the tests so that the shared context holds it without depending
//! on them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::proto::iperf3::COOKIE_LEN;

/// Data connections of iperf3 tests waiting for them, by cookie.
#[derive(Debug, Default)]
pub(crate) struct Iperf3Streams {
    waiting: Mutex<HashMap<[u8; COOKIE_LEN], mpsc::Sender<Arrival>>>,
}

/// A data connection and its place in the server's accept order.
type Arrival = (u64, TcpStream);

impl Iperf3Streams {
    /// Hands a connection that opened with `cookie` (the `accepted`th the server accepted) to
    /// its test. `Err` gives it back when no test waits for that cookie: it is a new control
    /// connection.
    pub(crate) fn route(
        &self,
        cookie: &[u8; COOKIE_LEN],
        accepted: u64,
        conn: TcpStream,
    ) -> Result<(), TcpStream> {
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        match waiting.get(cookie) {
            Some(tx) => tx.try_send((accepted, conn)).map_err(|e| match e {
                mpsc::error::TrySendError::Full((_, c))
                | mpsc::error::TrySendError::Closed((_, c)) => c,
            }),
            None => Err(conn),
        }
    }

    pub(super) fn register(
        self: &Arc<Self>,
        cookie: [u8; COOKIE_LEN],
        n: usize,
    ) -> Option<(Waiting, mpsc::Receiver<Arrival>)> {
        let (tx, rx) = mpsc::channel(n.max(1));
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.contains_key(&cookie) {
            return None;
        }
        waiting.insert(cookie, tx);
        Some((
            Waiting {
                streams: Arc::clone(self),
                cookie,
            },
            rx,
        ))
    }
}

/// A test's place in [`Iperf3Streams`], removed on drop.
pub(super) struct Waiting {
    streams: Arc<Iperf3Streams>,
    cookie: [u8; COOKIE_LEN],
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.streams
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.cookie);
    }
}
