//! The return-routability check of a UDP socket: before the server sends a UDP test's data to
//! the address a greeting came from, it sends that address a [`PathCheck::Challenge`] with a
//! random token, and waits for the token to come back from there in a
//! [`PathCheck::Response`]. A greeting's source address is only what the datagram says; anyone
//! holding the test's cookie could write a victim's address there and have the server flood it
//! (QUIC's path validation, RFC 9000 §8.2, for the same reason). Only a host that receives at
//! the address learns the token.
//!
//! A check datagram is shorter than the greeting it answers ([`PATH_CHECK_LEN`] against
//! [`DATA_GREETING_LEN`]), so answering a forged greeting sends its victim less than the forger
//! sent. Both ends build and parse these bytes here; when and how often they are sent is the
//! server's and the client's business (`server::udp`, `client::udp`).

use super::greeting::{Channel, DATA_GREETING_LEN, PREAMBLE_LEN, Preamble};

/// Length of a path check's token: random, 128 bits.
pub const PATH_TOKEN_LEN: usize = 16;

/// Length of a [`PathCheck`] datagram on the wire: a preamble (`S` for the server's challenge,
/// `D` for the client's response) and the token.
pub const PATH_CHECK_LEN: usize = PREAMBLE_LEN + PATH_TOKEN_LEN;

// The challenge must never be larger than the greeting it answers (the anti-amplification
// rule: a forged greeting gets its victim fewer bytes than the forger sent).
const _: () = assert!(PATH_CHECK_LEN < DATA_GREETING_LEN);

/// One datagram of the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathCheck {
    /// Server to client: prove you receive here by sending this token back.
    Challenge([u8; PATH_TOKEN_LEN]),
    /// Client to server: the token of a challenge that reached this socket.
    Response([u8; PATH_TOKEN_LEN]),
}

impl PathCheck {
    /// A challenge with a fresh random token from the OS generator.
    pub fn challenge() -> std::io::Result<Self> {
        let mut t = [0u8; PATH_TOKEN_LEN];
        getrandom::fill(&mut t).map_err(std::io::Error::from)?;
        Ok(PathCheck::Challenge(t))
    }

    /// The answer to a challenge: its token sent back.
    pub fn response(self) -> Self {
        match self {
            PathCheck::Challenge(t) | PathCheck::Response(t) => PathCheck::Response(t),
        }
    }

    /// The wire form.
    pub fn encode(self) -> [u8; PATH_CHECK_LEN] {
        let (channel, token) = match self {
            PathCheck::Challenge(t) => (Channel::Server, t),
            PathCheck::Response(t) => (Channel::Data, t),
        };
        let mut b = [0u8; PATH_CHECK_LEN];
        b[..PREAMBLE_LEN].copy_from_slice(&Preamble::new(channel).encode());
        b[PREAMBLE_LEN..].copy_from_slice(&token);
        b
    }

    /// Parses a datagram; `None` for anything that is not a check of this protocol version.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != PATH_CHECK_LEN {
            return None;
        }
        let pre = Preamble::decode(b.first_chunk::<PREAMBLE_LEN>()?).ok()?;
        if pre.version != super::PROTOCOL_VERSION {
            return None;
        }
        let token = *b.last_chunk::<PATH_TOKEN_LEN>()?;
        match pre.channel {
            Channel::Server => Some(PathCheck::Challenge(token)),
            Channel::Data => Some(PathCheck::Response(token)),
            Channel::Control => None,
        }
    }
}

/// Whether a datagram of `len` bytes may be a handshake datagram ([`is_handshake_datagram`]).
pub(crate) fn is_handshake_datagram_len(len: usize) -> bool {
    matches!(len, DATA_GREETING_LEN | PATH_CHECK_LEN)
}

/// Whether a datagram of `len` bytes starting with `head` belongs to a UDP socket's opening (a
/// data greeting, which a client repeats until `Ready`, or a path check, of which a late copy
/// may arrive after it): the stream threads neither count nor ignore it, so a report does not
/// show a test's own handshake as strangers' datagrams. `head` is at least the first 5 bytes.
pub(crate) fn is_handshake_datagram(head: &[u8], len: usize) -> bool {
    match len {
        DATA_GREETING_LEN => head.starts_with(b"XBNCD"),
        PATH_CHECK_LEN => head.starts_with(b"XBNCD") || head.starts_with(b"XBNCS"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_round_trips_and_is_smaller_than_a_greeting() {
        let c = PathCheck::challenge().unwrap();
        let wire = c.encode();
        assert_eq!(wire.len(), 23);
        assert!(wire.len() < DATA_GREETING_LEN);
        assert_eq!(&wire[..5], b"XBNCS");
        assert_eq!(PathCheck::decode(&wire), Some(c));
        let r = c.response();
        assert_eq!(&r.encode()[..5], b"XBNCD");
        assert_eq!(PathCheck::decode(&r.encode()), Some(r));
        assert!(matches!((c, r), (PathCheck::Challenge(a), PathCheck::Response(b)) if a == b));
        assert!(is_handshake_datagram(&wire, wire.len()));
        assert!(is_handshake_datagram(&r.encode(), PATH_CHECK_LEN));
    }

    #[test]
    fn anything_else_is_not_a_check() {
        let wire = PathCheck::Response([7; PATH_TOKEN_LEN]).encode();
        assert_eq!(PathCheck::decode(&wire[..22]), None);
        let mut longer = wire.to_vec();
        longer.push(0);
        assert_eq!(PathCheck::decode(&longer), None);
        let mut control = wire;
        control[4] = b'C';
        assert_eq!(PathCheck::decode(&control), None);
        let mut older = wire;
        older[5..7].copy_from_slice(&(super::super::PROTOCOL_VERSION - 1).to_be_bytes());
        assert_eq!(PathCheck::decode(&older), None);
        assert_eq!(PathCheck::decode(b"garbage, not a check!!"), None);
        assert!(!is_handshake_datagram(b"XBNCS", 1000));
    }
}
