//! Running tests by cookie, so a data connection can find the test it belongs to.
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

use crate::engine::rr::Handoff;
use crate::proto::Cookie;

/// A data connection on its way to its test.
pub(crate) type DataConn = (u16, TcpStream, SocketAddr);

/// Cookie → where the test that owns it takes its data connections.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    tests: Mutex<HashMap<Cookie, Route>>,
}

#[derive(Debug, Clone)]
struct Route {
    tx: mpsc::Sender<DataConn>,
    /// Straight to the workers, for connections with ids below the bound.
    direct: Option<(Arc<Handoff>, u16)>,
}

/// Removes its cookie from the registry when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: Arc<Registry>,
    cookie: Cookie,
}

/// Why a data connection was not attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttachError {
    /// No running test has this cookie (finished, never existed, or guessed).
    UnknownCookie,
    /// The test already has all its connections.
    Full,
    /// The connection names a stream or flow its test does not have.
    NoSuchFlow,
}

impl Registry {
    /// Registers a fresh cookie for a test expecting `streams` data connections.
    pub(crate) fn register(
        self: &Arc<Self>,
        streams: usize,
    ) -> std::io::Result<(Registration, Cookie, mpsc::Receiver<DataConn>)> {
        let (tx, rx) = mpsc::channel(streams.max(1));
        let mut tests = self.tests.lock().unwrap_or_else(PoisonError::into_inner);
        let cookie = loop {
            let c = Cookie::random()?;
            if !tests.contains_key(&c) {
                break c;
            }
        };
        tests.insert(cookie, Route { tx, direct: None });
        Ok((
            Registration {
                registry: Arc::clone(self),
                cookie,
            },
            cookie,
            rx,
        ))
    }

    /// Hands a data connection to its test.
    pub(crate) fn attach(&self, cookie: &Cookie, conn: DataConn) -> Result<(), AttachError> {
        let route = {
            let tests = self.tests.lock().unwrap_or_else(PoisonError::into_inner);
            tests
                .get(cookie)
                .cloned()
                .ok_or(AttachError::UnknownCookie)?
        };
        if let Some((handoff, flows)) = route.direct {
            let (id, sock, _) = conn;
            if id >= flows {
                return Err(AttachError::NoSuchFlow);
            }
            handoff.give(id, sock);
            return Ok(());
        }
        route.tx.try_send(conn).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => AttachError::Full,
            mpsc::error::TrySendError::Closed(_) => AttachError::UnknownCookie,
        })
    }
}

impl Registration {
    /// From now on, connections naming a flow below `flows` go straight to `handoff`.
    pub(crate) fn route_directly(&self, handoff: Arc<Handoff>, flows: u16) {
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
