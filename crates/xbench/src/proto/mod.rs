//! The wire protocol between `xbench client` and `xbench server`.
//!
//! Every TCP connection to the server port opens with a fixed 7-byte preamble: the magic `XBNC`,
//! a channel byte (control or data) and the protocol version. The magic is upper case so the
//! server can tell an xbench client from an iperf3 client, whose first bytes are a lower-case
//! base32 cookie (see [`frontend`]); a later iperf3-compatible front end plugs in there and shares
//! the engine. The server answers a control preamble with its own, so each side learns the
//! other's version before either parses anything version-specific and can name both versions
//! when they differ. The preamble and the frame format ([`frame`]) never change between versions;
//! the messages inside ([`message`]) may.
//!
//! This module is the protocol only: it does not open sockets or run tests.

pub mod frame;
pub mod frontend;
pub mod message;

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use frame::{FrameDecoder, MAX_FRAME_LEN, ProtoError};
pub use message::*;

/// First four bytes of every xbench connection.
pub const MAGIC: [u8; 4] = *b"XBNC";

/// The protocol version this build speaks. Bump it whenever a message changes incompatibly.
pub const PROTOCOL_VERSION: u16 = 2;

/// Length of [`Preamble`] on the wire.
pub const PREAMBLE_LEN: usize = 7;

/// Length of the data-connection greeting that follows a data preamble: cookie + stream index.
pub const DATA_HELLO_LEN: usize = COOKIE_LEN + 2;

/// Length of a test cookie, the random token that ties data connections to their test.
pub const COOKIE_LEN: usize = 16;

/// What a connection is for, announced in its preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The client's control connection: framed JSON messages.
    Control,
    /// A data connection of a running test, followed by the test cookie and a stream index.
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
        to_hex(&self.0)
    }

    /// Parses lower- or upper-case hex.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut b = [0u8; COOKIE_LEN];
        from_hex(s, &mut b).map(|()| Cookie(b))
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

/// Lower-case hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fills `out` from exactly `2 × out.len()` hex digits.
pub(crate) fn from_hex(s: &str, out: &mut [u8]) -> Option<()> {
    if s.len() != out.len() * 2 || !s.is_ascii() {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(())
}

/// Writes one framed message.
pub async fn write_message<W: AsyncWrite + Unpin>(w: &mut W, msg: &Message) -> io::Result<()> {
    let buf = frame::encode(msg).map_err(io::Error::other)?;
    w.write_all(&buf).await?;
    w.flush().await
}

/// Reads framed messages from a stream. Cancel-safe: a `next()` dropped half-way through a
/// message (because another `select!` branch won) loses nothing, since bytes are buffered in
/// the decoder rather than in the dropped future.
#[derive(Debug)]
pub struct MessageReader<R> {
    inner: R,
    decoder: FrameDecoder,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> MessageReader<R> {
    /// Wraps a byte stream.
    pub fn new(inner: R) -> Self {
        Self::with_max_frame(inner, MAX_FRAME_LEN)
    }

    /// Wraps a byte stream whose messages are never longer than `max` bytes.
    pub fn with_max_frame(inner: R, max: u32) -> Self {
        MessageReader {
            inner,
            decoder: FrameDecoder::with_max(max),
            buf: vec![0u8; 16 * 1024],
        }
    }

    /// The underlying stream, for the unframed preamble that precedes all messages. Bytes
    /// read through it bypass the decoder, so use it only before the first `next()`.
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// The next message; `Ok(None)` is a clean end of stream between messages.
    pub async fn next(&mut self) -> Result<Option<Message>, ProtoError> {
        loop {
            if let Some(m) = self.decoder.next_message()? {
                return Ok(Some(m));
            }
            let n = self
                .inner
                .read(&mut self.buf)
                .await
                .map_err(|e| ProtoError::Io(e.kind(), e.to_string()))?;
            if n == 0 {
                return match self.decoder.pending() {
                    0 => Ok(None),
                    p => Err(ProtoError::Truncated { received: p }),
                };
            }
            self.decoder.extend(&self.buf[..n]);
        }
    }

    /// The next message, failing if none arrives within `limit`.
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<Message>, ProtoError> {
        match tokio::time::timeout(limit, self.next()).await {
            Ok(res) => res,
            Err(_) => Err(ProtoError::Timeout(limit)),
        }
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
}
