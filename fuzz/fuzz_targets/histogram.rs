//! `xbench report` reads result files it did not write: their base64 HdrHistograms, dates and
//! sizes must be parsed without panics whatever the bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use xbench::latency::Distribution;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(d) = Distribution::decode(s) {
            let _ = d.stats();
        }
        let _ = xbench::time::parse_rfc3339(s);
        let _ = xbench::units::ByteSize::parse(s);
        let _ = xbench::units::BitRate::parse(s);
        let _ = serde_json::from_str::<xbench::TestReport>(s);
    }
});
