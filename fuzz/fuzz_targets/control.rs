//! Everything a server parses before it trusts a peer: the 7-byte preamble, the data-connection
//! greeting, the length-prefixed frames (fed in arbitrary chunks, as TCP delivers them), every
//! message type, and a test request's bounds. None of it may panic, hang or allocate more than
//! the frame cap.

#![no_main]

use libfuzzer_sys::fuzz_target;
use xbench::proto::{self, DataHello, FrameDecoder, Message, Preamble, frontend};

fuzz_target!(|data: &[u8]| {
    if let Some(first) = data.first_chunk::<4>() {
        let _ = frontend::detect(first);
    }
    if let Some(pre) = data.first_chunk::<{ proto::PREAMBLE_LEN }>() {
        let _ = Preamble::decode(pre);
    }
    if let Some(hello) = data
        .get(proto::PREAMBLE_LEN..)
        .and_then(|rest| rest.first_chunk::<{ proto::DATA_HELLO_LEN }>())
    {
        // Any bytes are a greeting; what the server does with it is the registry's call.
        let h = DataHello::decode(hello);
        assert_eq!(&h.encode(), hello);
    }
    // The first byte picks a chunk size, so frames arrive split at every possible point.
    let (chunk, rest) = match data.split_first() {
        Some((c, r)) => (usize::from(*c % 64) + 1, r),
        None => return,
    };
    let mut d = FrameDecoder::new();
    for piece in rest.chunks(chunk) {
        d.extend(piece);
        loop {
            match d.next_message() {
                Ok(Some(Message::Start(spec))) => {
                    let _ = spec.validate();
                    let _ = spec.connection_count();
                }
                Ok(Some(m)) => {
                    // Whatever parsed must serialize back and parse to the same message.
                    let bytes = proto::frame::encode(&m).expect("a parsed message encodes");
                    let mut again = FrameDecoder::new();
                    again.extend(&bytes);
                    assert_eq!(again.next_message().expect("re-parses"), Some(m));
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(d.pending() <= proto::MAX_FRAME_LEN as usize + 4 + chunk);
    }
});
