//! How every connection opens: the fixed [`Preamble`] (magic, channel, version), and on a data
//! connection the [`DataHello`] that names its test and stream. Both ends build and parse these
//! bytes here and nowhere else.
//!
//! Not the control messages that follow a control preamble ([`super::message`]), and not how
//! the server tells other protocols apart by their first bytes ([`super::frontend`]).

use std::io;

use super::error::ProtoError;
use crate::auth::{DATA_TAG_LEN, DataTag, SessionKey};

/// First four bytes of every xbench connection.
pub const MAGIC: [u8; 4] = *b"XBNC";

/// The protocol version this build speaks. Bump it whenever a message changes incompatibly.
/// 5: a UDP socket's greeting is answered by a return-routability check ([`super::path`]),
/// which a client of version 4 would never answer.
pub const PROTOCOL_VERSION: u16 = 5;

/// Length of [`Preamble`] on the wire.
pub const PREAMBLE_LEN: usize = 7;

/// Length of [`DataHello`] on the wire, the part of a data connection's greeting that follows
/// its preamble: cookie, stream or flow id, connection counter, tag.
pub const DATA_HELLO_LEN: usize = COOKIE_LEN + 2 + 8 + DATA_TAG_LEN;

/// Length of a data connection's whole greeting ([`DataHello::greeting`]): preamble, then the
/// [`DataHello`].
pub const DATA_GREETING_LEN: usize = PREAMBLE_LEN + DATA_HELLO_LEN;

/// Length of a test cookie, the random token that ties data connections to their test.
pub const COOKIE_LEN: usize = 16;

/// What a connection is for, announced in its preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The client's control connection: framed JSON messages.
    Control,
    /// A data connection of a running test, followed by a [`DataHello`].
    Data,
    /// The server's answer to a control preamble.
    Server,
}

impl Channel {
    fn byte(self) -> u8 {
        match self {
            Channel::Control => b'C',
            Channel::Data => b'D',
            Channel::Server => b'S',
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'C' => Some(Channel::Control),
            b'D' => Some(Channel::Data),
            b'S' => Some(Channel::Server),
            _ => None,
        }
    }
}

/// The fixed opening of every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    /// What the connection is for.
    pub channel: Channel,
    /// The sender's protocol version.
    pub version: u16,
}

impl Preamble {
    /// A preamble for this build's protocol version.
    pub fn new(channel: Channel) -> Self {
        Preamble {
            channel,
            version: PROTOCOL_VERSION,
        }
    }

    /// The wire form.
    pub fn encode(self) -> [u8; PREAMBLE_LEN] {
        let v = self.version.to_be_bytes();
        [
            MAGIC[0],
            MAGIC[1],
            MAGIC[2],
            MAGIC[3],
            self.channel.byte(),
            v[0],
            v[1],
        ]
    }

    /// Parses the wire form; the caller has already checked the magic when it needs to tell
    /// other protocols apart.
    pub fn decode(b: &[u8; PREAMBLE_LEN]) -> Result<Self, ProtoError> {
        if b[..4] != MAGIC {
            return Err(ProtoError::BadMagic);
        }
        let channel = Channel::from_byte(b[4]).ok_or(ProtoError::BadChannel(b[4]))?;
        Ok(Preamble {
            channel,
            version: u16::from_be_bytes([b[5], b[6]]),
        })
    }
}

/// What a data connection says after its preamble: the test it belongs to, and which of that
/// test's streams (throughput) or flows (request/response) it carries.
///
/// Every data connection, whichever way its data flows, is opened by the client and starts
/// with [`DataHello::greeting`]; a `--crr` test sends one on each transaction's connection,
/// counting them per flow. In a session with a pre-shared key the tag proves the connection
/// comes from the authenticated client ([`crate::auth`]); without one it is zero.
/// Any 42 bytes decode: whether the cookie names a test, the id fits it and the tag is right
/// is for the server's registry to decide, not the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHello {
    /// The test, as [`Accepted`](super::Accepted) named it.
    pub cookie: Cookie,
    /// Stream id (throughput, see [`StreamLayout`](super::StreamLayout)) or flow id
    /// (request/response).
    pub id: u16,
    /// Which of the id's connections this is, from 0: a `--crr` flow opens one per
    /// transaction, and every tag must differ so a copied one can be refused.
    pub counter: u64,
    /// The proof of the session key over the fields above; zero without a key.
    pub tag: DataTag,
}

impl DataHello {
    /// The hello of connection `counter` of stream or flow `id`, signed with `key` when the
    /// session has one.
    pub fn new(cookie: Cookie, id: u16, counter: u64, key: Option<&SessionKey>) -> Self {
        DataHello {
            cookie,
            id,
            counter,
            tag: key.map_or([0; DATA_TAG_LEN], |k| k.tag(&cookie.0, id, counter)),
        }
    }

    /// Whether the tag is `key`'s for the other fields.
    pub fn verify(&self, key: &SessionKey) -> bool {
        key.verify(&self.cookie.0, self.id, self.counter, &self.tag)
    }

    /// The wire form: cookie, id and counter big-endian, tag.
    pub fn encode(self) -> [u8; DATA_HELLO_LEN] {
        let mut b = [0u8; DATA_HELLO_LEN];
        b[..COOKIE_LEN].copy_from_slice(&self.cookie.0);
        b[COOKIE_LEN..COOKIE_LEN + 2].copy_from_slice(&self.id.to_be_bytes());
        b[COOKIE_LEN + 2..COOKIE_LEN + 10].copy_from_slice(&self.counter.to_be_bytes());
        b[COOKIE_LEN + 10..].copy_from_slice(&self.tag);
        b
    }

    /// Parses what follows a data preamble.
    pub fn decode(b: &[u8; DATA_HELLO_LEN]) -> Self {
        let mut cookie = [0u8; COOKIE_LEN];
        cookie.copy_from_slice(&b[..COOKIE_LEN]);
        let mut counter = [0u8; 8];
        counter.copy_from_slice(&b[COOKIE_LEN + 2..COOKIE_LEN + 10]);
        let mut tag = [0u8; DATA_TAG_LEN];
        tag.copy_from_slice(&b[COOKIE_LEN + 10..]);
        DataHello {
            cookie: Cookie(cookie),
            id: u16::from_be_bytes([b[COOKIE_LEN], b[COOKIE_LEN + 1]]),
            counter: u64::from_be_bytes(counter),
            tag,
        }
    }

    /// The whole greeting a client writes first on a data connection: a data preamble of this
    /// build's version, then [`Self::encode`].
    pub fn greeting(self) -> [u8; DATA_GREETING_LEN] {
        let mut b = [0u8; DATA_GREETING_LEN];
        b[..PREAMBLE_LEN].copy_from_slice(&Preamble::new(Channel::Data).encode());
        b[PREAMBLE_LEN..].copy_from_slice(&self.encode());
        b
    }
}

/// Random token naming one test; data connections present it so the server can attach them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cookie(pub [u8; COOKIE_LEN]);

impl Cookie {
    /// A fresh random cookie from the OS generator.
    pub fn random() -> io::Result<Self> {
        let mut b = [0u8; COOKIE_LEN];
        getrandom::fill(&mut b).map_err(io::Error::from)?;
        Ok(Cookie(b))
    }

    /// Lower-case hex, as carried in JSON.
    pub fn to_hex(self) -> String {
        crate::hex::to_hex(&self.0)
    }

    /// Parses lower- or upper-case hex.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut b = [0u8; COOKIE_LEN];
        crate::hex::from_hex(s, &mut b).map(|()| Cookie(b))
    }
}

impl std::fmt::Debug for Cookie {
    // Shortened: a cookie in a log line should identify a test, not let a reader join it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cookie({}…)", &self.to_hex()[..6])
    }
}

impl serde::Serialize for Cookie {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for Cookie {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Cookie::from_hex(&s).ok_or_else(|| serde::de::Error::custom("cookie must be 32 hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preamble_round_trips() {
        for ch in [Channel::Control, Channel::Data, Channel::Server] {
            let p = Preamble::new(ch);
            assert_eq!(Preamble::decode(&p.encode()).unwrap(), p);
        }
        assert_eq!(&Preamble::new(Channel::Control).encode()[..4], b"XBNC");
    }

    #[test]
    fn preamble_rejects_foreign_bytes() {
        assert!(matches!(
            Preamble::decode(b"GET / H"),
            Err(ProtoError::BadMagic)
        ));
        assert!(matches!(
            Preamble::decode(b"XBNCZ\0\x01"),
            Err(ProtoError::BadChannel(b'Z'))
        ));
    }

    #[test]
    fn cookie_hex_round_trips() {
        let c = Cookie::random().unwrap();
        assert_eq!(Cookie::from_hex(&c.to_hex()), Some(c));
        assert_eq!(Cookie::from_hex("zz"), None);
        assert_eq!(Cookie::from_hex(&"é".repeat(16)), None);
    }

    #[test]
    fn a_signed_hello_verifies_and_an_unsigned_one_does_not() {
        let psk = crate::auth::Psk::new(b"0123456789abcdef0123".to_vec()).unwrap();
        let n = crate::auth::Nonce([1; 32]);
        let key = psk.session_key(&n, &n);
        let cookie = Cookie::random().unwrap();
        let signed = DataHello::new(cookie, 2, 9, Some(&key));
        assert!(DataHello::decode(&signed.encode()).verify(&key));
        let unsigned = DataHello::new(cookie, 2, 9, None);
        assert_eq!(unsigned.tag, [0; DATA_TAG_LEN]);
        assert!(!unsigned.verify(&key));
        let moved = DataHello { id: 3, ..signed };
        assert!(!moved.verify(&key), "a tag is for one stream");
    }

    #[test]
    fn data_hello_round_trips() {
        let h = DataHello {
            cookie: Cookie::random().unwrap(),
            id: 0x0102,
            counter: u64::MAX - 1,
            tag: [0x5a; DATA_TAG_LEN],
        };
        assert_eq!(DataHello::decode(&h.encode()), h);
    }

    #[test]
    fn data_greeting_bytes_are_the_documented_layout() {
        // Pinned byte for byte: a change here breaks every deployed peer.
        let h = DataHello {
            cookie: Cookie([0xab; COOKIE_LEN]),
            id: 513,
            counter: 258,
            tag: [0xcd; DATA_TAG_LEN],
        };
        let g = h.greeting();
        assert_eq!(g.len(), 49);
        assert_eq!(&g[..4], b"XBNC");
        assert_eq!(g[4], b'D');
        assert_eq!(g[5..7], PROTOCOL_VERSION.to_be_bytes());
        assert_eq!(g[7..23], [0xab; COOKIE_LEN]);
        assert_eq!(g[23..25], [2, 1]);
        assert_eq!(g[25..33], [0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(g[33..], [0xcd; DATA_TAG_LEN]);
        let pre: &[u8; PREAMBLE_LEN] = g.first_chunk().unwrap();
        assert_eq!(Preamble::decode(pre).unwrap().channel, Channel::Data);
        let rest: &[u8; DATA_HELLO_LEN] = g.last_chunk().unwrap();
        assert_eq!(DataHello::decode(rest), h);
    }
}
