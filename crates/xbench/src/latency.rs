//! Latency distributions: recording samples cheaply on a hot path, merging them without ever
//! averaging percentiles, and the summary figures and HdrHistogram encodings reports carry.
//!
//! A [`Recorder`] is what a request/response loop writes into: an HDR histogram (nanoseconds,
//! 3 significant digits, 1 ns to [`MAX_LATENCY_NS`]) plus exact moments (count, sum, sum of
//! squares, min, max), so the mean and standard deviation are exact rather than read off
//! bucket midpoints. A request/response worker keeps one recorder for all its flows per
//! interval (32-bit counts), so the merged figures cost a histogram per worker, not per flow;
//! [`Distribution`] is the merged, 64-bit form that intervals and totals use. Percentiles are
//! only ever read from a merged histogram.
//!
//! A [`FlowSketch`] is the per-flow detail a user asks for (`--per-flow`): exact count, mean,
//! min and max, and a p99 from a fixed 1.3 KB log-bucketed histogram (within 6.25 %), so
//! tens of thousands of flows keep it in bounded memory.
//!
//! Not for: deciding when to record (that is the request/response engine's job).

use std::io;
use std::time::Duration;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::{Counter, Histogram};
use serde::{Deserialize, Serialize};

/// Longest latency a histogram resolves; longer samples are recorded as this value (and still
/// counted exactly in the maximum and the mean).
pub const MAX_LATENCY_NS: u64 = 3_600 * 1_000_000_000;

/// Significant decimal digits the histograms keep: a recorded value is within 0.1 % of the
/// sample.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Exact moments of a set of samples, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Moments {
    count: u64,
    sum: u128,
    sum_sq: u128,
    min: u64,
    max: u64,
}

impl Moments {
    #[inline]
    fn add(&mut self, ns: u64) {
        self.min = if self.count == 0 {
            ns
        } else {
            self.min.min(ns)
        };
        self.max = self.max.max(ns);
        self.count += 1;
        // A u64 squared fits a u128; only the sums can saturate, after centuries of samples
        // (or in a hostile file).
        self.sum = self.sum.saturating_add(u128::from(ns));
        self.sum_sq = self.sum_sq.saturating_add(u128::from(ns) * u128::from(ns));
    }

    fn merge(&mut self, o: &Moments) {
        if o.count == 0 {
            return;
        }
        self.min = if self.count == 0 {
            o.min
        } else {
            self.min.min(o.min)
        };
        self.max = self.max.max(o.max);
        self.count = self.count.saturating_add(o.count);
        self.sum = self.sum.saturating_add(o.sum);
        self.sum_sq = self.sum_sq.saturating_add(o.sum_sq);
    }

    fn mean_ns(&self) -> f64 {
        self.sum as f64 / self.count as f64
    }

    /// Population standard deviation, computed in integers so a narrow distribution with a
    /// large mean loses nothing to cancellation.
    fn stddev_ns(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = u128::from(self.count);
        // n²·variance = n·Σx² − (Σx)², exact in u128 for any realistic sample set; beyond
        // that (a decoded file claiming absurd counts) fall back to floating point.
        match (n.checked_mul(self.sum_sq), self.sum.checked_mul(self.sum)) {
            (Some(a), Some(b)) => (a.saturating_sub(b) as f64).sqrt() / self.count as f64,
            _ => {
                let (n, s, sq) = (self.count as f64, self.sum as f64, self.sum_sq as f64);
                (sq / n - (s / n) * (s / n)).max(0.0).sqrt()
            }
        }
    }
}

fn histogram<C: Counter>() -> Histogram<C> {
    // Auto-resizing from a small range: a loopback flow's histogram stays a few KiB instead of
    // the ~100 KiB a histogram sized for an hour would take, which matters with 1,000 flows.
    let mut h = Histogram::new_with_bounds(1, 1 << 20, SIGNIFICANT_DIGITS)
        .unwrap_or_else(|_| unreachable!("1 ≤ 2^20 with 3 digits are valid bounds"));
    h.auto(true);
    h
}

/// Samples of one worker's flows over one interval, written by the request/response loop.
#[derive(Debug, Clone)]
pub struct Recorder {
    hist: Histogram<u32>,
    moments: Moments,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            hist: histogram(),
            moments: Moments::default(),
        }
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency sample in nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.moments.add(ns);
        // The histogram grows to fit (up to its bound); counts saturate rather than wrap in
        // the pathological week-long single interval. Growing allocates, which cannot fail
        // short of running out of memory.
        let _ = self.hist.record(ns.min(MAX_LATENCY_NS));
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.moments.count
    }
}

/// A merged latency distribution: an interval across flows, or a whole test.
#[derive(Debug, Clone)]
pub struct Distribution {
    hist: Histogram<u64>,
    moments: Moments,
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution {
            hist: histogram(),
            moments: Moments::default(),
        }
    }
}

impl Distribution {
    /// An empty distribution.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a worker's (or a flow's) interval.
    pub fn add_recorder(&mut self, r: &Recorder) {
        self.moments.merge(&r.moments);
        // Counter types differ, so add bucket by bucket; both histograms have the same
        // precision, so each value lands in the bucket it came from.
        for v in r.hist.iter_recorded() {
            let _ = self
                .hist
                .record_n(v.value_iterated_to(), u64::from(v.count_at_value()));
        }
    }

    /// Adds another distribution.
    pub fn add(&mut self, d: &Distribution) {
        self.moments.merge(&d.moments);
        // Same precision and counter type, and auto-resizing: the addition cannot fail.
        let _ = self.hist.add(&d.hist);
    }

    /// Samples in the distribution.
    pub fn count(&self) -> u64 {
        self.moments.count
    }

    /// Latency at quantile `q` (0–1), nanoseconds; exact at 0 and 1.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if q <= 0.0 {
            return self.moments.min;
        }
        if q >= 1.0 {
            return self.moments.max;
        }
        // The histogram reports the top of a bucket; never beyond the true extremes.
        self.hist
            .value_at_quantile(q)
            .clamp(self.moments.min, self.moments.max)
    }

    /// The figures a report prints, or `None` without samples.
    pub fn stats(&self) -> Option<LatencyStats> {
        if self.moments.count == 0 {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Some(LatencyStats {
            count: self.moments.count,
            min_us: us(self.moments.min),
            mean_us: self.moments.mean_ns() / 1e3,
            stddev_us: self.moments.stddev_ns() / 1e3,
            p50_us: us(self.quantile_ns(0.50)),
            p90_us: us(self.quantile_ns(0.90)),
            p99_us: us(self.quantile_ns(0.99)),
            p99_9_us: us(self.quantile_ns(0.999)),
            p99_99_us: us(self.quantile_ns(0.9999)),
            max_us: us(self.moments.max),
        })
    }

    /// The histogram itself, for interval logs and percentile tables.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The histogram in HdrHistogram's compressed V2 encoding, base64: the form HdrHistogram
    /// tools (HistogramLogAnalyzer, `hdr-plot`, the Java/Go/Python libraries) decode.
    pub fn encode(&self) -> String {
        encode_histogram(&self.hist)
    }

    /// A distribution from an [`encode`](Self::encode)d histogram. Exact moments are not in the
    /// encoding; they are rebuilt from the histogram (so mean and min/max are within its
    /// precision).
    pub fn decode(s: &str) -> Result<Self, HistogramError> {
        let hist = decode_histogram(s)?;
        let mut moments = Moments::default();
        for v in hist.iter_recorded() {
            // Each sample is somewhere in its bucket; the midpoint is the unbiased guess.
            let ns = hist.median_equivalent(v.value_iterated_to());
            let n = v.count_at_value();
            moments.min = if moments.count == 0 {
                ns
            } else {
                moments.min.min(ns)
            };
            moments.max = moments.max.max(ns);
            moments.count = moments.count.saturating_add(n);
            let (ns, n) = (u128::from(ns), u128::from(n));
            moments.sum = moments.sum.saturating_add(ns.saturating_mul(n));
            moments.sum_sq = moments.sum_sq.saturating_add((ns * ns).saturating_mul(n));
        }
        Ok(Distribution { hist, moments })
    }
}

/// Why a histogram could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("histogram encoding: {0}")]
pub struct HistogramError(String);

impl HistogramError {
    /// An error of the HdrHistogram library's, in its words.
    pub(crate) fn new(why: impl std::fmt::Display) -> Self {
        HistogramError(why.to_string())
    }
}

/// Encodes any histogram as base64 of its V2 deflate form.
pub fn encode_histogram<C: Counter>(h: &Histogram<C>) -> String {
    let mut buf = Vec::new();
    // Serializing into a Vec fails only for histograms too large to encode, which our
    // bounds rule out; an empty string then reads back as a decode error, not garbage.
    if V2DeflateSerializer::new().serialize(h, &mut buf).is_err() {
        return String::new();
    }
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Decodes base64 of a V2 (deflate or plain) histogram.
///
/// The HdrHistogram reader allocates the payload length its header claims before it reads a
/// byte of the payload, so a file of a few hundred bytes claiming 4 GiB made `xbench report`
/// allocate 4 GiB (the fuzzer found it: `fuzz/fuzz_targets/histogram.rs`). The header is
/// checked here first: a compressed histogram is inflated to at most [`MAX_HISTOGRAM_BYTES`],
/// and a payload must be no longer than the bytes that follow its header.
pub fn decode_histogram(s: &str) -> Result<Histogram<u64>, HistogramError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| HistogramError(e.to_string()))?;
    let plain = match cookie(&bytes) {
        Some(V2_COMPRESSED_COOKIE) => inflate(&bytes)?,
        _ => bytes,
    };
    if cookie(&plain) == Some(V2_COOKIE) {
        let claimed = plain
            .get(4..8)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let present = plain.len().saturating_sub(V2_HEADER_LEN);
        if claimed > present {
            return Err(HistogramError(format!(
                "the header claims a {claimed}-byte payload where {present} bytes follow it"
            )));
        }
    }
    Deserializer::new()
        .deserialize(&mut io::Cursor::new(plain))
        .map_err(|e| HistogramError(format!("{e:?}")))
}

/// The V2 encoding's cookies (HdrHistogram's: a base with the word size, 0x10, or-ed in),
/// plain and deflate-compressed.
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;
/// A V2 header: cookie, payload length, normalizing offset, significant digits, lowest and
/// highest value, integer-to-double ratio.
const V2_HEADER_LEN: usize = 40;
/// The largest plain histogram read: far above any xbench writes (1 ns to an hour at three
/// digits is about 33,000 counters, under 300 KB at 9 bytes each).
pub const MAX_HISTOGRAM_BYTES: u64 = 16 << 20;

fn cookie(bytes: &[u8]) -> Option<u32> {
    bytes
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A compressed histogram's plain form, at most [`MAX_HISTOGRAM_BYTES`] of it.
fn inflate(bytes: &[u8]) -> Result<Vec<u8>, HistogramError> {
    use std::io::Read;
    let data = bytes.get(8..).unwrap_or_default();
    let mut plain = Vec::new();
    flate2::read::ZlibDecoder::new(data)
        .take(MAX_HISTOGRAM_BYTES + 1)
        .read_to_end(&mut plain)
        .map_err(|e| HistogramError(format!("inflating: {e}")))?;
    if plain.len() as u64 > MAX_HISTOGRAM_BYTES {
        return Err(HistogramError(format!(
            "larger than {MAX_HISTOGRAM_BYTES} bytes inflated"
        )));
    }
    Ok(plain)
}

/// Sub-buckets per power of two in a [`FlowSketch`]: a bucket is at most 1/8 of its values
/// wide, so its midpoint is within 1/16 (6.25 %) of any sample in it.
const SKETCH_SUB: u64 = 8;
/// Buckets up to [`MAX_LATENCY_NS`] (below 2^42): values below 8 ns one each, then 8 per octave.
const SKETCH_BUCKETS: usize = 320;

/// One flow's latency in bounded memory (`--per-flow`): exact moments and a small
/// log-bucketed histogram for its p99. Not for merged figures: those come from full HDR
/// histograms ([`Recorder`], [`Distribution`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSketch {
    /// Boxed so that a flow without a sketch (`Option<FlowSketch>`) costs a pointer.
    counts: Box<[u32; SKETCH_BUCKETS]>,
    moments: Moments,
}

impl Default for FlowSketch {
    fn default() -> Self {
        FlowSketch {
            counts: Box::new([0; SKETCH_BUCKETS]),
            moments: Moments::default(),
        }
    }
}

impl FlowSketch {
    /// An empty sketch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency sample in nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.moments.add(ns);
        let c = &mut self.counts[sketch_bucket(ns.min(MAX_LATENCY_NS))];
        *c = c.saturating_add(1);
    }

    /// Adds another sketch (a flow's next interval).
    pub fn merge(&mut self, o: &FlowSketch) {
        self.moments.merge(&o.moments);
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.moments.count
    }

    /// Latency at quantile `q` (0–1), nanoseconds: a bucket's midpoint, within 6.25 % of the
    /// true value (exact at 0 and 1), never beyond the extremes.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let m = &self.moments;
        if q <= 0.0 || m.count == 0 {
            return m.min;
        }
        if q >= 1.0 {
            return m.max;
        }
        let rank = ((q * m.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let (lo, hi) = sketch_bounds(i);
                return (lo + (hi - lo) / 2).clamp(m.min, m.max);
            }
        }
        // Only counts saturated at u32::MAX fall short of the rank.
        m.max
    }

    /// The figures a report prints, or `None` without samples.
    pub fn summary(&self) -> Option<FlowLatency> {
        let m = &self.moments;
        (m.count > 0).then(|| FlowLatency {
            count: m.count,
            min_us: m.min as f64 / 1e3,
            mean_us: m.mean_ns() / 1e3,
            p99_us: self.quantile_ns(0.99) as f64 / 1e3,
            max_us: m.max as f64 / 1e3,
        })
    }
}

/// The [`FlowSketch`] bucket of `ns` (at most [`MAX_LATENCY_NS`]).
#[inline]
fn sketch_bucket(ns: u64) -> usize {
    if ns < SKETCH_SUB {
        return ns as usize;
    }
    let octave = u64::from(63 - ns.leading_zeros()); // ≥ 3
    let mantissa = (ns >> (octave - 3)) - SKETCH_SUB; // 0..8
    ((octave - 2) * SKETCH_SUB + mantissa) as usize
}

/// The smallest and largest value of [`FlowSketch`] bucket `i`.
fn sketch_bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SKETCH_SUB {
        return (i, i);
    }
    let (octave, mantissa) = (i / SKETCH_SUB + 2, i % SKETCH_SUB);
    let lo = (SKETCH_SUB + mantissa) << (octave - 3);
    (lo, lo + (1u64 << (octave - 3)) - 1)
}

/// One flow's latency (`--per-flow`), microseconds: count, mean, min and max exact, p99 from a
/// [`FlowSketch`] (within 6.25 %).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlowLatency {
    /// Transactions measured.
    pub count: u64,
    /// Fastest, µs (exact).
    pub min_us: f64,
    /// Mean, µs (exact).
    pub mean_us: f64,
    /// 99th percentile, µs (within 6.25 %).
    pub p99_us: f64,
    /// Slowest, µs (exact).
    pub max_us: f64,
}

/// Latency figures in microseconds, as reports and JSON carry them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Transactions measured.
    pub count: u64,
    /// Fastest, µs (exact).
    pub min_us: f64,
    /// Mean, µs (exact).
    pub mean_us: f64,
    /// Population standard deviation, µs (exact).
    pub stddev_us: f64,
    /// Median, µs (within 0.1 %).
    pub p50_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p99_9_us: f64,
    /// 99.99th percentile, µs.
    pub p99_99_us: f64,
    /// Slowest, µs (exact).
    pub max_us: f64,
}

/// HdrHistogram's percentile-distribution text (the `.hgrm` format its plotters read), values
/// in microseconds.
pub fn percentile_distribution(d: &Distribution) -> String {
    use std::fmt::Write as _;
    let h = d.histogram();
    let mut s = String::from("       Value     Percentile TotalCount 1/(1-Percentile)\n\n");
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let value = h.highest_equivalent(v.value_iterated_to()) as f64 / 1e3;
        let total = h.count_between(0, v.value_iterated_to());
        if q < 1.0 {
            let _ = writeln!(
                s,
                "{value:12.3} {q:14.12} {total:10} {:14.2}",
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(s, "{value:12.3} {q:14.12} {total:10}");
        }
    }
    let (mean, sd) = (d.moments.mean_ns() / 1e3, d.moments.stddev_ns() / 1e3);
    let _ = writeln!(s, "#[Mean    = {mean:12.3}, StdDeviation   = {sd:12.3}]");
    let _ = writeln!(
        s,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        d.moments.max as f64 / 1e3,
        d.moments.count
    );
    let _ = writeln!(
        s,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        h.distinct_values()
    );
    s
}

/// Converts a duration to whole nanoseconds, saturating.
pub fn as_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {

    /// A header that claims more payload than follows is refused before anything the size of
    /// the claim is allocated: plain, compressed, and the fuzzer's find (a compressed
    /// histogram whose inner header claimed gigabytes; libFuzzer stopped it as out of
    /// memory).
    #[test]
    fn a_histogram_claiming_more_than_it_holds_is_refused_unallocated() {
        use base64::Engine;
        let mut plain = Vec::new();
        plain.extend_from_slice(&V2_COOKIE.to_be_bytes());
        plain.extend_from_slice(&u32::MAX.to_be_bytes());
        plain.extend_from_slice(&0u32.to_be_bytes());
        plain.extend_from_slice(&3u32.to_be_bytes());
        plain.extend_from_slice(&1u64.to_be_bytes());
        plain.extend_from_slice(&1_000_000u64.to_be_bytes());
        plain.extend_from_slice(&1.0f64.to_be_bytes());
        plain.extend_from_slice(&[0u8; 16]);
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let e = decode_histogram(&b64(&plain)).unwrap_err().to_string();
        assert!(e.contains("claims a 4294967295-byte payload"), "{e}");
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut z, &plain).unwrap();
        let mut compressed = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        let body = z.finish().unwrap();
        compressed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        compressed.extend_from_slice(&body);
        let e = decode_histogram(&b64(&compressed)).unwrap_err().to_string();
        assert!(e.contains("claims a 4294967295-byte payload"), "{e}");
        // Its deflate stream breaks after the inner header: inflated whole first, it is
        // refused for that, before any allocation its header asks for.
        let e = Distribution::decode(FUZZ_OOM).unwrap_err().to_string();
        assert!(e.contains("inflating"), "{e}");
    }

    /// `fuzz/artifacts/histogram/oom-7ba5fc4b…`, found by CI's 60 s fuzz run on 2026-11-30.
    const FUZZ_OOM: &str = "HISTFAAABR94nD1VTYsdRRStvnX7vnr16vV0Om9exnEcX8hoYpzgwAyZzBgyWYQEY1AkYcAP9B+IbkXERRAECfiBC3Hjyo37rPwB/gLxJ7gTxGWI59xqkg6vu6punXvuuR+z9fD7s09PyMFTF8d347+rX5+e/FM3/rsrwbTvwu6t97/n2zRjcxAOrofuI9ekVFrBdWSbD1iJ02QcdZwt01romPTY2NW8aM/rU+2qBwMa4Sf+9DTeS3NCWYEJ0or+26OAXUBcwQAb4gfHWEaTjHrWh4FjLzz9fi+K3KOvY73WZEX5QzM55iah/h6FXaH8hzM9nF1Xd6B0XmM06ncAVCE3QXvGyd8Fh/r2Aryqa6Px1Gex/O4kScNVkcYZmx/CIi/fR7COOlaHT+8q11r9TZmP6TkcyJ5hlutdRSLeEX5X1GmnS3jWYk+JOpQhcRT12/kCc2mMvPPicoV5XydIuJ97/4TRMwdfh/CbIa1a8nLL5Hcawit9RtU6g5W667kRZhcQXCv00b+baDGVCPP+DsBVQ87CusOGICgycPDgtY1cTNOG9bkrfR9K7pErPIjXOgArMUvBJVAW+Av8YaykB8pJuhJwI6lSqQwDxJBwHyuooohDPCzoDCLi0WWUAqLFGXMOBSTiGE+kgxYvkdY3xCYiSAbAJxqVmzjSGd4TsblMUR5zZAvmc+y4clMY6AQ7LZZTmvBY1vC8IL80ciQXRd6VE5HHIlfkaSMfyQW5z+81eVvOyfvyCrAib8AnUSP9jvCtVGakHhEI8ojljEaR4TJ1Gj2/o6XfrgiR985hawwFVCPP+DsBVQ87CusOGICgycPDpRflrLnhdAWs0PTix/7PWzUbCOHngGWACa060zvKuMwSl4TyaufwiYUbHLhMzGpuXkGWBKhuo8OojZO4FolhIv8IxScGHu+dQosPL7YAFrLbSw/n2zRjcxAOrofuI9ekVFrBdWSbD1iJ02QcdZwt01romPTY2NW8aM/rU+2qBwMa4Sf+9DTeS3NCWYEJ0or+26OAXUBcwQAb4gfHWEaTjHrWh4FjLzz9fi+K3KOvY73WZEX5QzM55iah/h6FXaH8hzM9nF1Xd6B0XmM06ncAVCE3QXvGyd8Fh/r2Aryqa6Px1Gex/O4kScNVkcYZmx/CIi/fR7COOlaHT+8q11r9TZmP6TkcyJ5hlutdRSLeEX5X1GmnS3jWYk+JOpQhcRT12/kCc2mMvPPicoV5XydIuJ97/4TRMwdfh/CbIa1a8nLL5Hcawit9RtU6g5W667kRZhcQXCv00b+baDGVCPK7pErPIjXOgArMUvBJVAW+Av8YaykB8pJuhJwI6lSqQwDxJBwHyuooohDPCzoDCLi0WWUAqLFGXMOBSTiGE+kgxYvkdY3xCYiSAbAJxqVmzjSGd4TsblMUR5zZAvmc+y4clMY6AQ7LZZTmvBY1vC8IL80ciQXRd6VE5HHIlfkaSMfyQW5z+81eVvOyfvyCrAib8AnUSP9jvCtVGakHhEI8ojljEaR4TJ1Gj2/o6XfrgiR985hawwFVCPP+DsBVQ87CusOGICgycPDpRflrLnhdAWs0PTix/7PWzUbCOHngGWACa060zvKuMwSl4TyaufwiYUbHLhMzGpuXkGWBKhuo8OojZO4FolhIv8IxSXydIuJ97/4TRMwdfh/CbIa1a8nLL5Hcawit9RtU6g5W667kRZhcQXCv00b+baDGk6l8q/IXtPlDIf/XJn838mcjvzfyPzJIWhY=";

    use super::*;

    #[test]
    fn exact_moments_and_bounded_percentiles() {
        let mut r = Recorder::new();
        for v in 1..=1000u64 {
            r.record(v * 1000); // 1 µs .. 1 ms
        }
        let mut d = Distribution::new();
        d.add_recorder(&r);
        let s = d.stats().unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.max_us, 1000.0);
        assert!((s.mean_us - 500.5).abs() < 1e-9);
        // Population stddev of 1..=1000 is sqrt((1000²−1)/12).
        assert!((s.stddev_us - ((1000.0f64 * 1000.0 - 1.0) / 12.0).sqrt()).abs() < 1e-6);
        assert!((s.p50_us - 500.0).abs() <= 0.5, "{}", s.p50_us);
        assert!((s.p99_us - 990.0).abs() <= 1.0, "{}", s.p99_us);
        assert!(s.min_us <= s.p50_us && s.p50_us <= s.p90_us && s.p90_us <= s.p99_us);
        assert!(s.p99_us <= s.p99_9_us && s.p99_9_us <= s.p99_99_us && s.p99_99_us <= s.max_us);
    }

    #[test]
    fn merging_is_not_averaging() {
        // Flow A fast, flow B slow: the merged p50 is neither flow's median averaged.
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        for _ in 0..900 {
            a.record(10_000);
        }
        for _ in 0..100 {
            b.record(1_000_000);
        }
        let mut d = Distribution::new();
        d.add_recorder(&a);
        d.add_recorder(&b);
        let s = d.stats().unwrap();
        assert!((s.p50_us - 10.0).abs() < 0.02);
        assert!((s.p99_us - 1000.0).abs() < 1.0);
    }

    #[test]
    fn huge_samples_count_exactly_in_max_and_mean() {
        let mut r = Recorder::new();
        r.record(10);
        r.record(2 * MAX_LATENCY_NS);
        let mut d = Distribution::new();
        d.add_recorder(&r);
        let s = d.stats().unwrap();
        assert_eq!(s.max_us, 2.0 * MAX_LATENCY_NS as f64 / 1e3);
        assert_eq!(d.count(), 2);
    }

    #[test]
    fn encoding_round_trips() {
        let mut r = Recorder::new();
        for v in [5_000u64, 7_000, 20_000, 20_000, 3_000_000] {
            r.record(v);
        }
        let mut d = Distribution::new();
        d.add_recorder(&r);
        let back = Distribution::decode(&d.encode()).unwrap();
        assert_eq!(back.count(), 5);
        for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
            let (a, b) = (back.quantile_ns(q) as f64, d.quantile_ns(q) as f64);
            assert!((a - b).abs() <= b * 1e-3, "q={q}: {a} vs {b}");
        }
        assert!(Distribution::decode("not base64!").is_err());
    }

    #[test]
    fn a_hostile_histogram_does_not_overflow_the_moments() {
        // Found by the `histogram` fuzz target: a file whose histogram claims huge values and
        // counts overflowed the u128 moments (a panic in a debug build, garbage in release).
        let text = include_str!("../tests/fixtures/fuzz-histogram-overflow.txt");
        if let Ok(d) = Distribution::decode(text) {
            let s = d.stats().unwrap();
            assert!(s.stddev_us.is_finite() && s.mean_us.is_finite(), "{s:?}");
        }
        let mut a = Moments::default();
        a.add(u64::MAX);
        a.add(u64::MAX);
        let mut b = a;
        b.merge(&a);
        assert!(b.stddev_ns().is_finite());
    }

    /// A worker records all its flows into one recorder: the merged figures must be exactly
    /// those of merging each flow's own histogram, as they were when every flow kept one.
    #[test]
    fn one_recorder_per_worker_merges_to_the_per_flow_figures() {
        let mut per_flow: Vec<Recorder> = (0..7).map(|_| Recorder::new()).collect();
        let mut workers = [Recorder::new(), Recorder::new(), Recorder::new()];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let flow = (x % 7) as usize;
            // Mostly tens of µs, with a tail into seconds (past the histograms' first range).
            let ns = 5_000 + x % 60_000 + if n % 97 == 0 { x % 3_000_000_000 } else { 0 };
            per_flow[flow].record(ns);
            workers[flow % 3].record(ns);
        }
        let (mut a, mut b) = (Distribution::new(), Distribution::new());
        per_flow.iter().for_each(|r| a.add_recorder(r));
        workers.iter().for_each(|r| b.add_recorder(r));
        assert_eq!(a.stats(), b.stats());
        assert_eq!(a.histogram(), b.histogram());
        assert_eq!(a.encode(), b.encode());
        for q in [0.5, 0.9, 0.99, 0.999, 0.9999] {
            assert_eq!(a.quantile_ns(q), b.quantile_ns(q), "q={q}");
        }
    }

    #[test]
    fn sketch_buckets_tile_the_range() {
        let mut next = 0;
        for i in 0..SKETCH_BUCKETS {
            let (lo, hi) = sketch_bounds(i);
            assert_eq!(lo, next, "bucket {i}");
            assert!(hi >= lo);
            assert_eq!(sketch_bucket(lo), i);
            assert_eq!(sketch_bucket(hi), i);
            // Midpoint within 1/16 of every value in the bucket.
            let mid = lo + (hi - lo) / 2;
            assert!(
                (mid as f64 - lo as f64) <= lo as f64 / 16.0 + 0.5,
                "bucket {i}"
            );
            assert!(
                (hi as f64 - mid as f64) <= hi as f64 / 16.0 + 0.5,
                "bucket {i}"
            );
            next = hi + 1;
        }
        assert!(sketch_bucket(MAX_LATENCY_NS) < SKETCH_BUCKETS);
    }

    #[test]
    fn sketch_p99_is_within_its_precision_of_the_hdr_p99() {
        let mut s = FlowSketch::new();
        let mut r = Recorder::new();
        let mut other = FlowSketch::new();
        for v in 1..=10_000u64 {
            let ns = v * 731 + 20_000;
            if v % 2 == 0 {
                s.record(ns);
            } else {
                other.record(ns);
            }
            r.record(ns);
        }
        s.merge(&other);
        let mut d = Distribution::new();
        d.add_recorder(&r);
        let (exact, sketch) = (d.stats().unwrap(), s.summary().unwrap());
        assert_eq!(sketch.count, exact.count);
        assert_eq!((sketch.min_us, sketch.max_us), (exact.min_us, exact.max_us));
        assert!((sketch.mean_us - exact.mean_us).abs() < 1e-9);
        let err = (sketch.p99_us - exact.p99_us).abs() / exact.p99_us;
        assert!(err <= 0.0625, "{} vs {}", sketch.p99_us, exact.p99_us);
        assert_eq!(FlowSketch::new().summary(), None);
    }

    #[test]
    fn percentile_text_ends_with_totals() {
        let mut r = Recorder::new();
        for v in 1..100u64 {
            r.record(v * 1_000);
        }
        let mut d = Distribution::new();
        d.add_recorder(&r);
        let t = percentile_distribution(&d);
        assert!(
            t.contains("#[Max     =       99.000, Total count    =           99]"),
            "{t}"
        );
    }
}
