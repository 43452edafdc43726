//! Running tests by cookie, so a data connection can find the test it belongs to, once its
//! test's [`Gate`] has let it in.
//!
//! A session registers its cookie when it accepts a test and gets the receiving end of a
//! channel; the accept path hands each data connection to that channel. The registration is a
//! guard: when the session ends, however it ends, the cookie is gone and late data connections
//! are refused. A `--crr` test, whose connections keep arriving while it runs, routes them
//! straight to its worker threads instead ([`Registration::route_directly`]), saving a task
//! hop on every transaction.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

use super::gate::{Gate, Refusal};
use crate::auth::DataTag;
use crate::engine::rr::Handoff;
use crate::engine::rr::at_once::take_greeting;
use crate::proto::{Cookie, DataHello};

/// A data connection on its way to its test: id, socket, peer, its greeting's tag.
pub(crate) type DataConn = (u16, TcpStream, SocketAddr, DataTag);

/// Cookie → where the test that owns it takes its data connections.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    tests: Mutex<HashMap<Cookie, Route>>,
}

#[derive(Debug, Clone)]
struct Route {
    gate: Arc<Gate>,
    tx: mpsc::Sender<DataConn>,
    /// Straight to the workers, for connections with ids below the bound.
    direct: Option<(Arc<Handoff>, u32)>,
    outsiders: Arc<Outsiders>,
}

/// Data connections that named a test but came from outside `--allow`, so the test can tell
/// its client why its connections are missing instead of leaving it to guess.
#[derive(Debug, Default)]
pub(crate) struct Outsiders {
    /// How many, and the first one's address.
    seen: Mutex<(u64, Option<SocketAddr>)>,
    /// Raised by one whose greeting carries the session key's proof: the client's own, so
    /// the test can end now. Without a key anyone who read the cookie could send one, and
    /// the test only mentions them if its connections do not arrive.
    proven: tokio::sync::Notify,
}

/// Removes its cookie from the registry when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: Arc<Registry>,
    cookie: Cookie,
    outsiders: Arc<Outsiders>,
}

/// Why a data connection was not attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttachError {
    /// No running test has this cookie (finished, never existed, or guessed).
    UnknownCookie,
    /// The test already has all its connections.
    Full,
    /// The test's gate refused it.
    Refused(Refusal),
}

impl AttachError {
    /// Whether the refusal means someone other than the test's client is trying to attach a
    /// connection (worth a warning, not an info line).
    pub(crate) fn is_intrusion(&self) -> bool {
        matches!(
            self,
            AttachError::Refused(
                Refusal::BadTag | Refusal::Taken { .. } | Refusal::Replayed { .. }
            )
        )
    }
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachError::UnknownCookie => f.write_str("no running test has its cookie"),
            AttachError::Full => f.write_str("its test has all its connections"),
            AttachError::Refused(r) => r.fmt(f),
        }
    }
}

impl Registry {
    /// Registers a fresh cookie for a test taking up to `streams` data connections at a time
    /// through `gate`.
    pub(crate) fn register(
        self: &Arc<Self>,
        streams: usize,
        gate: Gate,
    ) -> std::io::Result<(Registration, Cookie, mpsc::Receiver<DataConn>)> {
        let (tx, rx) = mpsc::channel(streams.max(1));
        let mut tests = self.tests.lock().unwrap_or_else(PoisonError::into_inner);
        let cookie = loop {
            let c = Cookie::random()?;
            if !tests.contains_key(&c) {
                break c;
            }
        };
        let outsiders = Arc::new(Outsiders::default());
        let route = Route {
            gate: Arc::new(gate),
            tx,
            direct: None,
            outsiders: Arc::clone(&outsiders),
        };
        tests.insert(cookie, route);
        Ok((
            Registration {
                registry: Arc::clone(self),
                cookie,
                outsiders,
            },
            cookie,
            rx,
        ))
    }

    /// Hands a data connection that greeted with `hello` to its test, if its test's gate
    /// lets it in. `unread` bytes of the greeting are still on the connection (peeked, not
    /// taken): a `--crr` test answering it at once takes them with its request, in one
    /// system call; any other route takes them first.
    pub(crate) fn attach(
        &self,
        hello: &DataHello,
        sock: TcpStream,
        peer: SocketAddr,
        unread: usize,
    ) -> Result<(), AttachError> {
        let route = {
            let tests = self.tests.lock().unwrap_or_else(PoisonError::into_inner);
            tests.get(&hello.cookie).cloned()
        };
        let admitted = match route {
            None => Err(AttachError::UnknownCookie),
            Some(r) => r
                .gate
                .admit(hello, peer)
                .map(|()| r)
                .map_err(AttachError::Refused),
        };
        let route = match admitted {
            Ok(r) => r,
            Err(e) => {
                // Taken, so the connection refused closes (a FIN), not resets.
                take_greeting(&sock, unread);
                return Err(e);
            }
        };
        let id = hello.id;
        if let Some((handoff, _)) = route.direct {
            // The gate checked the id against the test's flows.
            handoff.give(id, sock, unread);
            return Ok(());
        }
        if !take_greeting(&sock, unread) {
            return Ok(()); // gone while it greeted: nothing to attach
        }
        let conn = (id, sock, peer, hello.tag);
        route.tx.try_send(conn).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => AttachError::Full,
            mpsc::error::TrySendError::Closed(_) => AttachError::UnknownCookie,
        })
    }
}

impl Registry {
    /// Notes a data connection from `peer`, outside `--allow`, that greeted with `hello`:
    /// its test learns of it, unless its greeting fails the test's key.
    pub(crate) fn note_outsider(&self, hello: &DataHello, peer: SocketAddr) {
        let route = {
            let tests = self.tests.lock().unwrap_or_else(PoisonError::into_inner);
            match tests.get(&hello.cookie) {
                Some(r) => r.clone(),
                None => return,
            }
        };
        let proven = match route.gate.proves(hello) {
            Some(false) => return,
            Some(true) => true,
            None => false,
        };
        {
            let mut seen = route
                .outsiders
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            seen.0 += 1;
            seen.1.get_or_insert(peer);
        }
        if proven {
            route.outsiders.proven.notify_one();
        }
    }
}

impl Registration {
    /// Resolves when a data connection carrying the session key's proof was refused for
    /// coming from outside `--allow`; its address.
    pub(crate) async fn outsider_proven(&self) -> SocketAddr {
        loop {
            self.outsiders.proven.notified().await;
            if let (_, Some(a)) = self.outsiders_seen() {
                return a;
            }
        }
    }

    /// Data connections refused so far for coming from outside `--allow`, and the first's
    /// address.
    pub(crate) fn outsiders_seen(&self) -> (u64, Option<SocketAddr>) {
        *self
            .outsiders
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on, connections naming a flow below `flows` go straight to `handoff`.
    pub(crate) fn route_directly(&self, handoff: Arc<Handoff>, flows: u32) {
        let mut tests = self
            .registry
            .tests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = tests.get_mut(&self.cookie) {
            r.direct = Some((handoff, flows));
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry
            .tests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.cookie);
    }
}
