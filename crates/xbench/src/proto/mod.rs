//! The wire protocol between `xbench client` and `xbench server`: every byte either end puts on
//! a connection before the test data, with its encoder and its parser side by side.
//!
//! Every TCP connection to the server port opens with a fixed 7-byte preamble ([`greeting`]):
//! the magic `XBNC`, a channel byte (control or data) and the protocol version. The magic is
//! upper case so the server can tell an xbench client from an iperf3 client, whose first bytes
//! are a lower-case base32 cookie (see [`frontend`]); from there the server speaks iperf3's own
//! protocol ([`iperf3`]) on the same engine. The server answers a control preamble with its own, so each
//! side learns the other's version before either parses anything version-specific and can name
//! both versions when they differ. A data connection follows its preamble with a
//! [`DataHello`] naming its test and stream; which way each stream id flows is
//! [`StreamLayout`]. A UDP socket's greeting is answered by a return-routability check
//! ([`path`]) before the server sends there. The preamble and the frame format ([`frame`])
//! never change between versions; the messages inside ([`message`]) may.
//!
//! This module is the protocol only: it does not open sockets, time anything or run tests.

mod error;
pub mod frame;
pub mod frontend;
pub mod greeting;
pub mod iperf3;
pub mod layout;
pub mod message;
pub mod path;

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use error::ProtoError;
pub use frame::{FrameDecoder, MAX_FRAME_LEN};
pub use greeting::*;
pub use layout::StreamLayout;
pub use message::*;
pub use path::{PATH_CHECK_LEN, PATH_TOKEN_LEN, PathCheck};

/// Default server port, iperf3's.
pub const DEFAULT_PORT: u16 = 5201;

/// What this build calls itself in [`Hello`] and [`Welcome`]: name and version.
pub(crate) fn software() -> String {
    format!("xbench {}", env!("CARGO_PKG_VERSION"))
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
    /// Messages [`Self::next`] keeps aside instead of returning ([`Self::set_aside`]).
    aside: Vec<Message>,
    keep_aside: Option<fn(&Message) -> bool>,
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
            aside: Vec::new(),
            keep_aside: None,
        }
    }

    /// From now on, keeps the messages `which` picks aside instead of returning them from
    /// [`Self::next`]: messages that may come at any point of a session and belong to none of
    /// its steps (the server's [`Message::Host`]), so the loop of each step need not know them.
    pub fn set_aside(&mut self, which: fn(&Message) -> bool) {
        self.keep_aside = Some(which);
    }

    /// The messages kept aside so far, in the order they came.
    pub fn take_aside(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.aside)
    }

    /// From now on, accepts messages up to `max` bytes (at most [`MAX_FRAME_LEN`]): a server
    /// that read only small messages from a client until now expects a larger one that the
    /// test asked for (the tally of a request/response test with thousands of flows).
    pub fn set_max_frame(&mut self, max: u32) {
        self.decoder.set_max(max);
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
                if self.keep_aside.is_some_and(|keep| keep(&m)) {
                    self.aside.push(m);
                    continue;
                }
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
