//! A request/response test's latency histograms as an HdrHistogram interval log: an output
//! format of a finished report, beside the report rather than in `latency`, which records and
//! merges the histograms and knows no report.

use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};

use super::{RrReport, TestReport};
use crate::latency::{HistogramError, decode_histogram};

/// A request/response test's latency histograms as an HdrHistogram interval log (`.hlog`),
/// the format `HistogramLogProcessor`, HistogramLogAnalyzer and the HdrHistogram libraries
/// read: one line per interval, values in nanoseconds, the max column in milliseconds.
/// Warm-up intervals carry the tag `warmup`, so tools reading the untagged series skip them.
/// Without intervals (`-i 0`) the log holds the whole test as one.
pub fn interval_log(report: &TestReport, rr: &RrReport) -> Result<String, HistogramError> {
    let err = HistogramError::new;
    let start = crate::time::parse_rfc3339(&report.started_at).unwrap_or(UNIX_EPOCH);
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment(&format!(
            "xbench {} request/response latency, {} to {}",
            report.xbench_version,
            shown(report.client_addr),
            shown(report.server_addr)
        ))
        .add_comment("values in nanoseconds; max column in milliseconds")
        .with_start_time(start)
        .with_base_time(start)
        .with_max_value_divisor(1e6);
    let mut log = builder
        .begin_log_with(&mut out, &mut serializer)
        .map_err(|e| err(e.to_string()))?;
    let secs = |s: f64| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default();
    let warmup = Tag::new("warmup");
    if rr.intervals.is_empty() {
        let h = decode_histogram(&rr.summary.histogram)?;
        log.write_histogram(&h, Duration::ZERO, secs(rr.summary.seconds), None)
            .map_err(|e| err(e.to_string()))?;
    }
    for iv in &rr.intervals {
        let h = decode_histogram(&iv.histogram)?;
        let tag = if iv.omitted { warmup } else { None };
        log.write_histogram(&h, secs(iv.start_s), secs(iv.end_s - iv.start_s), tag)
            .map_err(|e| err(e.to_string()))?;
    }
    drop(log);
    String::from_utf8(out).map_err(|e| err(e.to_string()))
}

/// An address for the log's header, or `unknown` for a test that never connected.
fn shown(addr: Option<std::net::SocketAddr>) -> String {
    addr.map_or_else(|| "unknown".to_owned(), |a| a.to_string())
}
