//! What can go wrong reading the xbench protocol. A leaf of its own: the framing, the
//! greeting and the messages all return it, and none of them should depend on another for it.

use std::io;
use std::time::Duration;

/// What can go wrong reading the protocol; every variant says what the peer did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The connection did not start with `XBNC`.
    #[error("peer is not speaking the xbench protocol (bad magic bytes)")]
    BadMagic,
    /// The preamble's channel byte is unknown.
    #[error("unknown channel byte {0:#04x} in preamble")]
    BadChannel(u8),
    /// A frame length above the cap.
    #[error("control message of {len} bytes exceeds the {max}-byte limit")]
    Oversized {
        /// Announced length.
        len: u32,
        /// The cap.
        max: u32,
    },
    /// A zero-length frame (never sent by a correct peer).
    #[error("empty control message")]
    Empty,
    /// The stream ended inside a frame.
    #[error(
        "connection closed in the middle of a control message ({received} bytes of it received)"
    )]
    Truncated {
        /// Bytes of the unfinished frame that did arrive.
        received: usize,
    },
    /// The body is not a message this version understands.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// Nothing arrived in time.
    #[error("no control message within {0:?}")]
    Timeout(Duration),
    /// The socket failed.
    #[error("control connection failed: {1}")]
    Io(io::ErrorKind, String),
}
