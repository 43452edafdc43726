//! When each datagram of a paced stream is due: datagram `k` at `start + k × period`, so the
//! rate holds evenly within every interval, not in a burst at its start.
//!
//! A sender that falls behind (a descheduled thread, a full socket buffer) sends what is due at
//! once only while it is at most [`MAX_LATENESS`] or [`CATCH_UP`] datagrams behind, whichever
//! is more; beyond that it skips the slots it missed instead of bursting to catch up (a burst
//! would trip a policer and fill a queue the steady rate never does), and counts them so the
//! report can say the schedule slipped. The datagram allowance keeps a slow stream (one
//! datagram every few milliseconds) from losing slots to every scheduler hiccup of a busy
//! machine; a burst of that many datagrams is no burst to any queue.

use std::time::{Duration, Instant};

/// How far behind schedule a sender may catch up by sending back to back.
/// Long enough for a thread woken late by a busy scheduler (a few ms on a loaded machine) to
/// keep the rate, short enough that the burst stays small against any queue on the path.
pub(crate) const MAX_LATENESS: Duration = Duration::from_millis(10);

/// How many datagrams behind a sender may catch up, however long they took.
pub(crate) const CATCH_UP: u32 = 8;

/// The schedule of one stream.
#[derive(Debug)]
pub(crate) struct Pacer {
    start: Instant,
    /// Nanoseconds between datagrams; `None` sends unpaced.
    period_ns: Option<f64>,
    /// The next slot to send.
    next: u64,
    /// Slots skipped after falling behind.
    slipped: u64,
}

impl Pacer {
    /// A schedule of `datagram_len`-byte datagrams at `bits_per_second` of payload (`None`
    /// unpaced), from `start`.
    pub(crate) fn new(start: Instant, datagram_len: u32, bits_per_second: Option<f64>) -> Self {
        let period_ns = bits_per_second
            .filter(|b| *b > 0.0)
            .map(|b| f64::from(datagram_len) * 8.0 * 1e9 / b);
        Pacer {
            start,
            period_ns,
            next: 0,
            slipped: 0,
        }
    }

    /// How many datagrams are due at `now`, at most `max`, skipping ahead past a stall.
    pub(crate) fn due(&mut self, now: Instant, max: usize) -> usize {
        let Some(period) = self.period_ns else {
            return max;
        };
        let elapsed = now.saturating_duration_since(self.start).as_nanos() as f64;
        // The last slot whose time has come.
        let last = (elapsed / period).floor() as u64;
        if last < self.next {
            return 0;
        }
        let late_ns = elapsed - self.next as f64 * period;
        let tolerance = (MAX_LATENESS.as_nanos() as f64).max(f64::from(CATCH_UP) * period);
        if late_ns > tolerance {
            // Slots older than the tolerance are skipped; those within it still go.
            let keep_from = ((elapsed - tolerance) / period).ceil() as u64;
            let keep_from = keep_from.clamp(self.next, last);
            self.slipped += keep_from - self.next;
            self.next = keep_from;
        }
        let due = (last - self.next + 1).min(max as u64) as usize;
        self.next += due as u64;
        due
    }

    /// When the next datagram is due; `None` unpaced (always).
    pub(crate) fn next_at(&self) -> Option<Instant> {
        let p = self.period_ns?;
        let at = Duration::from_nanos((self.next as f64 * p) as u64);
        Some(self.start + at)
    }

    /// Slots skipped so far.
    pub(crate) fn slipped(&self) -> u64 {
        self.slipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_are_due_evenly() {
        let start = Instant::now();
        // 1000 B at 8 Mbit/s: one every 1 ms.
        let mut p = Pacer::new(start, 1000, Some(8e6));
        assert_eq!(p.due(start, 64), 1, "slot 0 is due at the start");
        assert_eq!(p.due(start + Duration::from_micros(500), 64), 0);
        assert_eq!(p.next_at(), Some(start + Duration::from_millis(1)));
        assert_eq!(p.due(start + Duration::from_micros(1500), 64), 1);
        assert_eq!(p.due(start + Duration::from_micros(2000), 64), 1);
        assert_eq!(p.slipped(), 0);
    }

    #[test]
    fn a_stall_skips_ahead_instead_of_bursting() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1000, Some(8e6));
        assert_eq!(p.due(start, 64), 1);
        // 100 ms stalled: only the slots of the last 10 ms go, the rest are counted.
        let n = p.due(start + Duration::from_millis(100), 64);
        assert_eq!(n, 11, "slots 90..=100");
        assert_eq!(p.slipped(), 89, "slots 1..=89");
        assert_eq!(p.next_at(), Some(start + Duration::from_millis(101)));
    }

    #[test]
    fn a_slow_stream_catches_up_a_few_datagrams_after_a_hiccup() {
        let start = Instant::now();
        // One every 10 ms: 8 datagrams (80 ms) may be caught up, not more.
        let mut p = Pacer::new(start, 1000, Some(8e5));
        assert_eq!(p.due(start, 64), 1);
        assert_eq!(
            p.due(start + Duration::from_millis(50), 64),
            5,
            "slots 1..=5"
        );
        assert_eq!(p.slipped(), 0);
        assert_eq!(
            p.due(start + Duration::from_millis(1000), 64),
            9,
            "slots 92..=100"
        );
        assert_eq!(p.slipped(), 86, "slots 6..=91");
    }

    #[test]
    fn unpaced_is_always_due() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1000, None);
        assert_eq!(p.due(start, 64), 64);
        assert_eq!(p.next_at(), None);
    }
}
