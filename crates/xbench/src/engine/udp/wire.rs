//! The xbench header at the start of every UDP datagram, and the stream token it carries.
//!
//! ```text
//! token (8, the stream's) | sequence (8) | flags (1 bit) + send time (63 bits, ns)
//! ```
//!
//! All big-endian. The token is the first 8 bytes of the stream's data-greeting tag: random
//! without a key, the session key's MAC with one, so a datagram an off-path sender makes up
//! does not carry it. The top bit of the time word marks datagrams sent in the `-O` warm-up;
//! the rest is nanoseconds since the sender's start, used only in differences (jitter).

use crate::auth::DataTag;

/// Header bytes at the start of every datagram.
pub(crate) const HEADER_LEN: usize = crate::config::UDP_HEADER_LEN as usize;

const WARM_UP: u64 = 1 << 63;

/// The fields of one datagram's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) token: u64,
    pub(crate) seq: u64,
    /// Nanoseconds since the sender started, below 2^63.
    pub(crate) sent_ns: u64,
    /// Sent before the end of the `-O` warm-up: left out of the totals.
    pub(crate) warm_up: bool,
}

impl Header {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    pub(crate) fn write(&self, buf: &mut [u8]) {
        buf[..8].copy_from_slice(&self.token.to_be_bytes());
        self.write_after_token(buf);
    }

    /// Writes all but the token (bytes 8 to [`HEADER_LEN`] of `buf`): a sender's buffers keep
    /// its stream's token from the first write, and only the number and time change.
    pub(crate) fn write_after_token(&self, buf: &mut [u8]) {
        let time = (self.sent_ns & !WARM_UP) | if self.warm_up { WARM_UP } else { 0 };
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&time.to_be_bytes());
    }

    /// Reads a header; `None` for a datagram too short to hold one.
    pub(crate) fn read(buf: &[u8]) -> Option<Self> {
        Some(Self::from_words(words(buf.first_chunk()?)))
    }

    /// The header whose words (see [`words`]) are these.
    pub(crate) fn from_words([token, seq, time]: [u64; 3]) -> Self {
        Header {
            token,
            seq,
            sent_ns: time & !WARM_UP,
            warm_up: time & WARM_UP != 0,
        }
    }
}

/// A header's three words as they are on the wire: token, sequence number, and the time word
/// (send time and warm-up flag together, so one comparison tells whether two datagrams were
/// sent at the same time in the same phase).
pub(crate) fn words(h: &[u8; HEADER_LEN]) -> [u64; 3] {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&h[i..i + 8]);
        u64::from_be_bytes(w)
    };
    [word(0), word(8), word(16)]
}

/// The token of the stream whose greeting carried `tag`.
pub(crate) fn token(tag: &DataTag) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&tag[..8]);
    u64::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_with_64_bit_values() {
        for (seq, ns, warm_up) in [
            (0, 0, false),
            (u64::MAX, (1 << 63) - 1, true),
            (u64::from(u32::MAX) + 1, 5, false),
        ] {
            let h = Header {
                token: 0xdead_beef_0123_4567,
                seq,
                sent_ns: ns,
                warm_up,
            };
            let mut b = [0u8; HEADER_LEN];
            h.write(&mut b);
            assert_eq!(Header::read(&b), Some(h));
        }
        assert_eq!(Header::read(&[0u8; HEADER_LEN - 1]), None);
    }
}
