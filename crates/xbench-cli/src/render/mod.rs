//! Output: the text tables people read and the JSON that scripts read. Rendering only; the
//! numbers all come from the library's report types.

pub(crate) mod diagnosis;
pub(crate) mod host;
pub(crate) mod iperf3_json;
pub(crate) mod json;
pub(crate) mod netperf;
pub(crate) mod rr;
pub(crate) mod text;
pub(crate) mod trace;
pub(crate) mod udp;
pub(crate) mod under_load;

use std::io::{self, Write};

/// Writes to stdout; a closed pipe (`xbench … | head`) is reported as `BrokenPipe` so the
/// caller can exit quietly.
pub(crate) fn out(s: &str) -> io::Result<()> {
    let mut o = io::stdout().lock();
    o.write_all(s.as_bytes())?;
    o.flush()
}
