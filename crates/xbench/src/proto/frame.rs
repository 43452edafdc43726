//! Length-prefixed framing of control messages: a 4-byte big-endian length, then that many bytes
//! of JSON.
//!
//! JSON because control traffic is a handful of messages per test, and a human reading a packet
//! capture or a log should see what was asked. The length is capped so a peer cannot make the
//! other side allocate more than [`MAX_FRAME_LEN`]. [`FrameDecoder`] is the sans-I/O form that
//! the fuzz target drives; the async helpers in the parent module use the same checks.

use super::error::ProtoError;
use super::message::Message;

/// Largest control message accepted, in bytes. Most messages are a few KiB (a final result with
/// 128 streams is about 60 KiB), but a request/response test's results and its client's tally
/// list every flow, up to 70 bytes each: 1 MiB was too small from about 15,000 flows (the
/// server could not send its results at 16,384), and 65,536 flows take 4.6 MB. The cap bounds
/// what a hostile peer can make us allocate; a server reads far less from a client until a
/// test of that many flows asks for it.
pub const MAX_FRAME_LEN: u32 = 8 << 20;

/// Encodes one message as a frame.
pub fn encode(msg: &Message) -> Result<Vec<u8>, ProtoError> {
    let body = serde_json::to_vec(msg).map_err(|e| ProtoError::Malformed(e.to_string()))?;
    let len = u32::try_from(body.len()).map_err(|_| ProtoError::Oversized {
        len: u32::MAX,
        max: MAX_FRAME_LEN,
    })?;
    check_len(len)?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Refuses lengths a correct peer never sends.
pub fn check_len(len: u32) -> Result<(), ProtoError> {
    check_len_within(len, MAX_FRAME_LEN)
}

/// Refuses empty frames and frames longer than `max`.
fn check_len_within(len: u32, max: u32) -> Result<(), ProtoError> {
    if len == 0 {
        return Err(ProtoError::Empty);
    }
    if len > max {
        return Err(ProtoError::Oversized { len, max });
    }
    Ok(())
}

/// Parses a frame body.
pub fn decode_body(body: &[u8]) -> Result<Message, ProtoError> {
    serde_json::from_slice(body).map_err(|e| {
        ProtoError::Malformed(explain_bad_start(body).unwrap_or_else(|| e.to_string()))
    })
}

/// Longest explanation of a bad test request, in characters: it quotes the client's values,
/// and goes back to the client and into the log.
const EXPLANATION_MAX: usize = 300;

/// For a test request (`"type":"start"`) that does not decode, which field is wrong and why,
/// e.g. "test request field `workload.throughput.streams`: invalid value: integer `0`,
/// expected a nonzero u16". `None` for anything else.
fn explain_bad_start(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    if v.get("type")?.as_str()? != "start" {
        return None;
    }
    let e = serde_path_to_error::deserialize::<_, crate::config::TestSpec>(v).err()?;
    let mut s = match e.path().to_string().as_str() {
        "." => format!("test request: {}", e.inner()),
        path => format!("test request field `{path}`: {}", e.inner()),
    };
    if let Some((cut, _)) = s.char_indices().nth(EXPLANATION_MAX) {
        s.truncate(cut);
        s.push('…');
    }
    Some(s)
}

/// Incremental decoder: feed bytes as they arrive, take whole messages out.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max: u32,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::with_max(MAX_FRAME_LEN)
    }
}

impl FrameDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty decoder that refuses frames longer than `max` (at most [`MAX_FRAME_LEN`]):
    /// a server reading what a client sends expects only small messages, and should not let
    /// an unauthenticated peer make it buffer a megabyte.
    pub fn with_max(max: u32) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            max: max.min(MAX_FRAME_LEN),
        }
    }

    /// Refuses frames longer than `max` (at most [`MAX_FRAME_LEN`]) from now on.
    pub fn set_max(&mut self, max: u32) {
        self.max = max.min(MAX_FRAME_LEN);
    }

    /// Appends received bytes.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, `Ok(None)` if more bytes are needed. After an error the
    /// stream is unusable (framing is lost) and the connection should be closed.
    pub fn next_message(&mut self) -> Result<Option<Message>, ProtoError> {
        let Some(len) = self.buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len);
        check_len_within(len, self.max)?;
        let end = 4 + len as usize;
        if self.buf.len() < end {
            return Ok(None);
        }
        let msg = decode_body(&self.buf[4..end]);
        self.buf.drain(..end);
        msg.map(Some)
    }

    /// Bytes received but not yet part of a whole message.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::message::{ErrorCode, ErrorMsg};

    fn sample() -> Message {
        Message::Error(ErrorMsg {
            code: ErrorCode::BadRequest,
            message: "streams must be at least 1".into(),
            max_flows: None,
            results_follow: false,
        })
    }

    #[test]
    fn frames_round_trip_byte_by_byte() {
        let bytes = encode(&sample()).unwrap();
        let mut d = FrameDecoder::new();
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(d.next_message().unwrap(), None, "early message at byte {i}");
            d.extend(&[*b]);
        }
        assert_eq!(d.next_message().unwrap(), Some(sample()));
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn a_4_gib_length_prefix_is_refused_before_allocating() {
        let mut d = FrameDecoder::new();
        d.extend(&u32::MAX.to_be_bytes());
        assert!(matches!(
            d.next_message(),
            Err(ProtoError::Oversized { len: u32::MAX, .. })
        ));
    }

    #[test]
    fn garbage_body_is_malformed_not_a_panic() {
        let mut d = FrameDecoder::new();
        d.extend(&5u32.to_be_bytes());
        d.extend(b"\xff\xfe{]x");
        assert!(matches!(d.next_message(), Err(ProtoError::Malformed(_))));
    }

    #[test]
    fn a_bad_test_request_names_its_field() {
        let start = |spec: &str| {
            let body = format!(
                r#"{{"type":"start",{spec},"omit":0,"interval":null,
                    "socket":{{"window":null,"mss":null,"nodelay":false,"congestion":null}}}}"#
            );
            match decode_body(body.as_bytes()) {
                Err(ProtoError::Malformed(m)) => m,
                other => panic!("{spec}: {other:?}"),
            }
        };
        let tp = r#""workload":{"throughput":{"streams":1,"direction":"bidir","block_len":1}}"#;
        let m = start(&format!(r#"{tp},"end":{{"duration":-1}}"#));
        assert!(
            m.contains("`end.duration`") && m.contains("negative"),
            "{m}"
        );
        let m = start(&format!(r#"{tp},"end":{{"duration":1e300}}"#));
        assert!(m.contains("`end.duration`"), "{m}");
        let m = start(
            r#""workload":{"throughput":{"streams":0,"direction":"bidir","block_len":1}},"end":{"duration":1}"#,
        );
        assert!(m.contains("`workload.throughput.streams`"), "{m}");
        assert!(m.contains("nonzero"), "{m}");
        let m = start(r#""workload":{"teleport":{}},"end":{"duration":1}"#);
        assert!(m.contains("unknown variant `teleport`"), "{m}");
        // A client's long value is not echoed in full.
        let long = "x".repeat(10_000);
        let m = start(&format!(
            r#""workload":{{"{long}":{{}}}},"end":{{"duration":1}}"#
        ));
        assert!(
            m.chars().count() <= EXPLANATION_MAX + 1,
            "{} chars",
            m.len()
        );
    }

    #[test]
    fn zero_length_is_refused() {
        let mut d = FrameDecoder::new();
        d.extend(&[0, 0, 0, 0]);
        assert_eq!(d.next_message(), Err(ProtoError::Empty));
    }
}
