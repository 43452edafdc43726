//! Which data connections a test takes: the door every data connection passes before it is
//! attached to a running test.
//!
//! A test's cookie crosses the control connection in the clear, so anyone on the path can
//! read it. Knowing it must not be enough to become one of the test's streams: a connection
//! attached as stream 0 would have its bytes counted as the client's, and the test would
//! report someone else's traffic. So, in order:
//! - in a session with a pre-shared key, the greeting's tag must be the session key's over
//!   the cookie, the id and the connection counter ([`crate::auth`]); nobody without the key
//!   can make one;
//! - the id must be one of the test's streams or flows;
//! - a stream (or `--rr` flow) takes one connection, the first that passes; a later one is
//!   refused and logged with its peer, and never replaces the first;
//! - a `--crr` flow takes one connection per transaction, and with a key each counter once
//!   (an anti-replay window, as IPsec's), so a greeting copied off the wire is refused.
//!
//! Without a key the first two checks are all there is: an observer who reads the cookie can
//! still race the client for a stream. The client then notices (its own connection is
//! refused, or the server counts bytes it never sent) and the test fails; see the README's
//! security section.

use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

use crate::auth::SessionKey;
use crate::proto::DataHello;

/// How many connections each id takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claims {
    /// One for the whole test: a throughput stream or an `--rr` flow.
    Once,
    /// One per transaction (`--crr`).
    PerTransaction,
}

/// The checks one test applies to its data connections.
#[derive(Debug)]
pub(crate) struct Gate {
    key: Option<SessionKey>,
    /// The test's streams or flows: ids below this.
    ids: u32,
    claims: Claims,
    slots: Mutex<Vec<Slot>>,
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Free,
    /// Taken by a connection from this peer.
    Taken(SocketAddr),
    /// `--crr` with a key: the counters seen so far.
    Seen(ReplayWindow),
}

/// Why a data connection was refused at the door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The tag is not the session key's: not the authenticated client's connection.
    BadTag,
    /// An id the test does not have.
    NoSuchId { id: u16, ids: u32 },
    /// The id already has its connection, from `by`.
    Taken { id: u16, by: SocketAddr },
    /// A `--crr` greeting whose counter was already used (or is too old to tell).
    Replayed { id: u16, counter: u64 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::BadTag => f.write_str(
                "its greeting does not carry the session key's proof: it is not the \
                 authenticated client's connection",
            ),
            Refusal::NoSuchId { id, ids } => {
                write!(f, "it claims stream or flow {id}; the test has {ids}")
            }
            Refusal::Taken { id, by } => write!(
                f,
                "it claims stream {id}, which the connection from {by} already holds (the \
                 first keeps it)"
            ),
            Refusal::Replayed { id, counter } => write!(
                f,
                "it repeats the greeting of connection {counter} of flow {id}: a copy, not \
                 the client's"
            ),
        }
    }
}

impl Gate {
    /// The door of a test with `ids` streams or flows, each taking connections as `claims`
    /// says; `key` is the session's, when it has one.
    pub(crate) fn new(key: Option<SessionKey>, ids: u32, claims: Claims) -> Self {
        Gate {
            key,
            ids,
            claims,
            slots: Mutex::new(vec![Slot::Free; ids as usize]),
        }
    }

    /// Whether `hello` proves it is the authenticated client's: `Some` with a key (whether
    /// its tag is the session key's), `None` without one, where nothing can prove it.
    pub(crate) fn proves(&self, hello: &DataHello) -> Option<bool> {
        self.key.as_ref().map(|k| hello.verify(k))
    }

    /// Lets `hello`, from `peer`, in, or says why not. A connection let in holds its id from
    /// now on (or uses up its counter).
    pub(crate) fn admit(&self, hello: &DataHello, peer: SocketAddr) -> Result<(), Refusal> {
        // The MAC first, outside the lock: it is the expensive check, and the one an
        // attacker without the key fails.
        if let Some(k) = &self.key
            && !hello.verify(k)
        {
            return Err(Refusal::BadTag);
        }
        let id = hello.id;
        if u32::from(id) >= self.ids {
            return Err(Refusal::NoSuchId { id, ids: self.ids });
        }
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = &mut slots[usize::from(id)];
        match (self.claims, *slot) {
            (Claims::Once, Slot::Free) => *slot = Slot::Taken(peer),
            (Claims::Once, Slot::Taken(by)) => return Err(Refusal::Taken { id, by }),
            // Without a key a counter proves nothing: any number would do.
            (Claims::PerTransaction, _) if self.key.is_none() => {}
            (Claims::PerTransaction, Slot::Free) => {
                *slot = Slot::Seen(ReplayWindow::first(hello.counter));
            }
            (Claims::PerTransaction, Slot::Seen(mut w)) => {
                if !w.accept(hello.counter) {
                    return Err(Refusal::Replayed {
                        id,
                        counter: hello.counter,
                    });
                }
                *slot = Slot::Seen(w);
            }
            (Claims::Once, Slot::Seen(_)) | (Claims::PerTransaction, Slot::Taken(_)) => {
                unreachable!("a gate's slots are of its one kind")
            }
        }
        Ok(())
    }
}

/// The counters of one `--crr` flow seen so far: the highest, and which of the 64 below it.
/// A flow's connections are sequential, so counters arrive in order; the window only absorbs
/// a reordering of the accepts, and anything older than it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplayWindow {
    top: u64,
    /// Bit `i`: counter `top - i` was seen.
    seen: u64,
}

impl ReplayWindow {
    fn first(counter: u64) -> Self {
        ReplayWindow {
            top: counter,
            seen: 1,
        }
    }

    /// Records `counter`; false if it was seen before or is older than the window.
    fn accept(&mut self, counter: u64) -> bool {
        if counter > self.top {
            let shift = counter - self.top;
            self.seen = if shift >= 64 { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.top = counter;
            return true;
        }
        let back = self.top - counter;
        if back >= 64 || self.seen & (1 << back) != 0 {
            return false;
        }
        self.seen |= 1 << back;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Nonce, Psk};
    use crate::proto::Cookie;

    fn key() -> SessionKey {
        let psk = Psk::new(b"0123456789abcdef0123".to_vec()).unwrap();
        psk.session_key(&Nonce([1; 32]), &Nonce([2; 32]))
    }

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    #[test]
    fn a_stream_keeps_its_first_connection() {
        let cookie = Cookie([9; 16]);
        for k in [None, Some(key())] {
            let gate = Gate::new(k.clone(), 2, Claims::Once);
            let hello = DataHello::new(cookie, 1, 0, k.as_ref());
            assert_eq!(gate.admit(&hello, peer(1)), Ok(()));
            assert_eq!(
                gate.admit(&hello, peer(2)),
                Err(Refusal::Taken { id: 1, by: peer(1) })
            );
            assert_eq!(
                gate.admit(&DataHello::new(cookie, 0, 0, k.as_ref()), peer(3)),
                Ok(())
            );
            assert_eq!(
                gate.admit(&DataHello::new(cookie, 2, 0, k.as_ref()), peer(3)),
                Err(Refusal::NoSuchId { id: 2, ids: 2 })
            );
        }
    }

    #[test]
    fn with_a_key_an_unsigned_or_foreign_greeting_is_refused_before_it_claims_anything() {
        let cookie = Cookie([9; 16]);
        let gate = Gate::new(Some(key()), 1, Claims::Once);
        let unsigned = DataHello::new(cookie, 0, 0, None);
        assert_eq!(gate.admit(&unsigned, peer(1)), Err(Refusal::BadTag));
        let psk = Psk::new(b"another key, long enough".to_vec()).unwrap();
        let other = psk.session_key(&Nonce([1; 32]), &Nonce([2; 32]));
        let foreign = DataHello::new(cookie, 0, 0, Some(&other));
        assert_eq!(gate.admit(&foreign, peer(1)), Err(Refusal::BadTag));
        // The stream is still free for the client.
        assert_eq!(
            gate.admit(&DataHello::new(cookie, 0, 0, Some(&key())), peer(2)),
            Ok(())
        );
    }

    #[test]
    fn a_crr_flow_takes_each_counter_once() {
        let (cookie, k) = (Cookie([9; 16]), key());
        let gate = Gate::new(Some(k.clone()), 1, Claims::PerTransaction);
        for n in 0..200 {
            let h = DataHello::new(cookie, 0, n, Some(&k));
            assert_eq!(gate.admit(&h, peer(1)), Ok(()), "{n}");
            assert_eq!(
                gate.admit(&h, peer(2)),
                Err(Refusal::Replayed { id: 0, counter: n }),
                "a copy of {n}"
            );
        }
        // Out of order within the window is fine once; older than the window is refused.
        assert_eq!(
            gate.admit(&DataHello::new(cookie, 0, 260, Some(&k)), peer(1)),
            Ok(())
        );
        assert_eq!(
            gate.admit(&DataHello::new(cookie, 0, 250, Some(&k)), peer(1)),
            Ok(())
        );
        assert!(
            gate.admit(&DataHello::new(cookie, 0, 250, Some(&k)), peer(1))
                .is_err()
        );
        assert!(
            gate.admit(&DataHello::new(cookie, 0, 190, Some(&k)), peer(1))
                .is_err()
        );
    }

    #[test]
    fn without_a_key_crr_connections_are_not_counted() {
        let cookie = Cookie([9; 16]);
        let gate = Gate::new(None, 1, Claims::PerTransaction);
        let h = DataHello::new(cookie, 0, 0, None);
        assert_eq!(gate.admit(&h, peer(1)), Ok(()));
        assert_eq!(gate.admit(&h, peer(1)), Ok(()));
    }
}
