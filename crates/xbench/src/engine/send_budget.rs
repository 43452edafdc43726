//! A request/response test's share of the server's `--max-send-rate`, as a token bucket its
//! server workers take from for every byte they put on the wire: answers of any size, the
//! ACKs of large requests, and `--crr`'s connection set-up and tear-down.
//!
//! Bulk streams are paced by the kernel (`SO_MAX_PACING_RATE`); answers cannot be: a `--crr`
//! connection lives for one answer, and a flow's small answers leave at whatever rate its
//! client asks for them, so pacing each socket at a sliver of the cap either does nothing or
//! (4,096 flows at cap/4,096) holds every answer back. So the test's workers share one bucket
//! filled at the test's share and wait, before each send, until it is out of debt: answers are
//! *paced*, never refused or dropped. The time they waited is counted, and the client is told,
//! since latency measured against a capped server is the cap's, not the path's.
//!
//! What is charged is bytes on the wire as the kernel sends them, from the payload: headers
//! per packet (TCP with timestamps, UDP with its IP fragments), estimated with a 1,500-byte
//! MTU. On a path with a larger MTU (loopback) that overcharges the headers a little, never
//! undercharges. Not the governor that decides the share (`server::governor`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How much may be sent at once after a pause, as time at the share's rate: a bucket deeper
/// than this lets a burst past the cap; a shallower one makes every answer wait.
const DEPTH: Duration = Duration::from_millis(5);

/// The longest a worker sleeps in one go while it waits, so it still sees a stop and the
/// interval boundaries.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(5);

/// The bucket.
#[derive(Debug)]
pub(crate) struct SendBudget {
    /// The test's share, bits per second (set by the governor as tests come and go).
    bits_per_second: AtomicU64,
    bucket: Mutex<Bucket>,
    /// Nanoseconds workers spent waiting for the bucket, for the report.
    waited_ns: AtomicU64,
    headers: Headers,
}

#[derive(Debug)]
struct Bucket {
    /// Bytes that may go now; below zero, the debt of the last send.
    tokens: f64,
    at: Instant,
}

/// Header bytes per packet, by the address family of the test.
#[derive(Debug, Clone, Copy)]
struct Headers {
    /// IP header: 20 (IPv4) or 40 (IPv6).
    ip: u64,
}

/// TCP's header with the timestamps option (20 + 12 bytes).
const TCP_HEADER: u64 = 20 + 12;
/// The MTU the headers are counted for.
const MTU: u64 = 1500;
/// The smallest [`SendBudget::chunk`].
const MIN_CHUNK: u64 = 16 * 1024;

impl SendBudget {
    /// A full bucket at `bits_per_second`, for a test whose client speaks IPv6 or not.
    pub(crate) fn new(bits_per_second: u64, ipv6: bool) -> Self {
        let budget = SendBudget {
            bits_per_second: AtomicU64::new(bits_per_second.max(1)),
            bucket: Mutex::new(Bucket {
                tokens: 0.0,
                at: Instant::now(),
            }),
            waited_ns: AtomicU64::new(0),
            headers: Headers {
                ip: if ipv6 { 40 } else { 20 },
            },
        };
        budget.lock().tokens = budget.depth();
        budget
    }

    /// A new share, bits per second (at least 1).
    pub(crate) fn set_rate(&self, bits_per_second: u64) {
        self.bits_per_second
            .store(bits_per_second.max(1), Ordering::Relaxed);
    }

    /// The share now, bits per second.
    pub(crate) fn rate(&self) -> u64 {
        self.bits_per_second.load(Ordering::Relaxed)
    }

    /// Charges `bytes` put on the wire (they may take the bucket into debt).
    pub(crate) fn charge(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut b = self.lock();
        self.refill(&mut b, Instant::now());
        b.tokens -= bytes as f64;
    }

    /// How long until the bucket is out of debt; zero when it is.
    pub(crate) fn debt(&self) -> Duration {
        let mut b = self.lock();
        self.refill(&mut b, Instant::now());
        if b.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-b.tokens / self.bytes_per_second())
    }

    /// Waits (sleeping the calling thread) until the bucket is out of debt or `stopped` says
    /// to give up, calling `between` every [`WAIT_SLICE`] at most. True when out of debt.
    pub(crate) fn wait(&self, stopped: impl Fn() -> bool, mut between: impl FnMut()) -> bool {
        let start = Instant::now();
        let out = loop {
            let d = self.debt();
            if d.is_zero() {
                break true;
            }
            if stopped() {
                break false;
            }
            std::thread::sleep(d.min(WAIT_SLICE));
            between();
        };
        let waited = start.elapsed();
        if !waited.is_zero() {
            let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
            self.waited_ns.fetch_add(ns, Ordering::Relaxed);
        }
        out
    }

    /// The most to hand the kernel in one send: what the bucket lets through at once, but at
    /// least [`MIN_CHUNK`] so a low cap does not cost a system call per segment. A large
    /// answer written whole would leave at line rate, far past the cap for that moment.
    pub(crate) fn chunk(&self) -> u64 {
        (self.depth() as u64).max(MIN_CHUNK)
    }

    /// Seconds workers spent waiting for the bucket so far.
    pub(crate) fn waited_s(&self) -> f64 {
        self.waited_ns.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// Wire bytes of `payload` bytes sent on a TCP connection: its segments' headers too.
    pub(crate) fn tcp_payload(&self, payload: u64) -> u64 {
        payload + self.tcp_segments(payload) * self.tcp_header()
    }

    /// Wire bytes the server sends for a transaction besides its answer: a pure ACK for every
    /// second segment of the request beyond the first (the first's rides on the answer), and
    /// with `--crr` the SYN-ACK (with its 20 bytes of options), the FIN and the ACK of the
    /// client's FIN.
    pub(crate) fn tcp_transaction(&self, request: u64, per_connection: bool) -> u64 {
        let acks = self.tcp_segments(request).saturating_sub(1) / 2;
        let setup = if per_connection { 3 } else { 0 };
        (acks + setup) * self.tcp_header() + if per_connection { 20 } else { 0 }
    }

    /// Wire bytes of one UDP datagram of `payload` bytes: its UDP header, and an IP header per
    /// fragment.
    pub(crate) fn udp_datagram(&self, payload: u64) -> u64 {
        let per_fragment = MTU - self.headers.ip;
        let fragments = (payload + 8).div_ceil(per_fragment).max(1);
        payload + 8 + fragments * self.headers.ip
    }

    fn tcp_header(&self) -> u64 {
        self.headers.ip + TCP_HEADER
    }

    fn tcp_segments(&self, payload: u64) -> u64 {
        payload.div_ceil(MTU - self.tcp_header()).max(1)
    }

    fn bytes_per_second(&self) -> f64 {
        self.rate() as f64 / 8.0
    }

    fn depth(&self) -> f64 {
        self.bytes_per_second() * DEPTH.as_secs_f64()
    }

    fn refill(&self, b: &mut Bucket, now: Instant) {
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.at = now;
        b.tokens = (b.tokens + dt * self.bytes_per_second()).min(self.depth());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_bytes_count_the_headers() {
        let v4 = SendBudget::new(1_000_000, false);
        assert_eq!(v4.tcp_payload(1), 1 + 52);
        assert_eq!(v4.tcp_payload(1448), 1448 + 52);
        assert_eq!(v4.tcp_payload(1449), 1449 + 2 * 52);
        assert_eq!(
            v4.tcp_transaction(100, false),
            0,
            "the ACK rides on the answer"
        );
        assert_eq!(v4.tcp_transaction(3 * 1448, false), 52);
        assert_eq!(v4.tcp_transaction(1, true), 3 * 52 + 20);
        assert_eq!(v4.udp_datagram(24), 24 + 28);
        // 65,507 bytes: 45 fragments of at most 1,480 bytes, each with its IP header.
        assert_eq!(v4.udp_datagram(65_507), 65_507 + 8 + 45 * 20);
        let v6 = SendBudget::new(1_000_000, true);
        assert_eq!(v6.tcp_payload(1), 1 + 72);
        assert_eq!(v6.udp_datagram(24), 24 + 48);
    }

    #[test]
    fn a_send_waits_for_the_debt_of_the_last_at_the_rate() {
        // 8 Mbit/s: 1 MB a second, a 5,000-byte bucket.
        let b = SendBudget::new(8_000_000, false);
        assert!(b.debt().is_zero(), "a full bucket");
        let t0 = Instant::now();
        b.charge(5_000 + 100_000);
        let d = b.debt();
        // 100,000 bytes of debt at 1 MB/s, less what refilled since.
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        assert!(ms(d) <= 100.0 && ms(d) >= 99.0 - ms(t0.elapsed()), "{d:?}");
        assert!(b.wait(|| false, || {}));
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(b.waited_s() > 0.0);
        assert!(b.debt().is_zero());
        // A stop ends the wait at once.
        b.charge(1_000_000);
        assert!(!b.wait(|| true, || {}));
        assert!(!b.debt().is_zero());
    }

    #[test]
    fn an_idle_bucket_fills_only_to_its_depth() {
        let b = SendBudget::new(8_000_000, false);
        std::thread::sleep(Duration::from_millis(30));
        // 5 ms at 1 MB/s: 5,000 bytes may go at once, not the 30,000 of the idle time.
        let t0 = Instant::now();
        b.charge(15_000);
        let d = b.debt();
        assert!(
            d.as_secs_f64() >= 0.010 - t0.elapsed().as_secs_f64(),
            "{d:?}"
        );
    }
}
