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
    /// The first slot after the `-O` warm-up (0 without one, or unpaced).
    measure_slot: u64,
    /// Those of `slipped` from `measure_slot` on.
    measured_slipped: u64,
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
            measure_slot: 0,
            measured_slipped: 0,
        }
    }

    /// Slots due at or after `at` are the measured ones (the end of the `-O` warm-up): their
    /// skips are counted apart ([`Self::measured_slipped`]), and no batch mixes them with
    /// earlier slots ([`Self::due`]), so a sender can tell a batch's warm-up by its first slot
    /// ([`Self::is_measured`]). Slots, not the time they went: a sender that stalls across
    /// the warm-up's end and catches up counts the late warm-up slots as warm-up, and the
    /// window's datagrams sent and slots skipped add up to its schedule.
    pub(crate) fn measure_from(mut self, at: Instant) -> Self {
        if let Some(period) = self.period_ns {
            let ns = at.saturating_duration_since(self.start).as_nanos() as f64;
            self.measure_slot = (ns / period).ceil() as u64;
        }
        self
    }

    /// Whether the batch [`Self::due`] returned last (its first slot, `next - due`) is of the
    /// measured slots; `None` unpaced, where only the time can tell.
    pub(crate) fn is_measured(&self, due: usize) -> Option<bool> {
        self.period_ns?;
        Some(self.next - due as u64 >= self.measure_slot)
    }

    /// Skips `from..to`, counting them.
    fn skip(&mut self, to: u64) {
        if to <= self.next {
            return;
        }
        self.slipped += to - self.next;
        self.measured_slipped += to - self.next.max(self.measure_slot).min(to);
        self.next = to;
    }

    /// At the end mark `end`: the slots due before it that were never sent (a sender stalled
    /// at the end, or stopped early) are skipped ones too. Without this the window's schedule
    /// came up short by the slots of a stall that outlasted it.
    pub(crate) fn close(&mut self, end: Instant) {
        if let Some(period) = self.period_ns {
            let ns = end.saturating_duration_since(self.start).as_nanos() as f64;
            self.skip((ns / period).ceil() as u64);
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
            self.skip(keep_from);
        }
        // A batch is all warm-up slots or all measured ones.
        let max = match self.measure_slot.checked_sub(self.next) {
            Some(left) if left > 0 => (max as u64).min(left) as usize,
            _ => max,
        };
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

    /// Time between datagrams; `None` unpaced.
    pub(crate) fn period(&self) -> Option<Duration> {
        self.period_ns.map(|p| Duration::from_nanos(p as u64))
    }

    /// Slots skipped so far.
    pub(crate) fn slipped(&self) -> u64 {
        self.slipped
    }

    /// Slots skipped so far from the end of the warm-up on ([`Self::measure_from`]).
    pub(crate) fn measured_slipped(&self) -> u64 {
        self.measured_slipped
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
    fn skips_are_counted_in_the_window_by_their_slot_and_no_batch_straddles_its_start() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        // One every 1 ms, measured from slot 5.
        let mut p = Pacer::new(start, 1000, Some(8e6)).measure_from(start + ms(5));
        assert_eq!(p.due(start, 64), 1);
        assert_eq!(p.is_measured(1), Some(false));
        // Late by 7 ms, within the catch-up: warm-up slots 1..=4 in one batch, then 5..=8.
        assert_eq!(p.due(start + ms(8), 64), 4);
        assert_eq!(p.is_measured(4), Some(false));
        assert_eq!(p.due(start + ms(8), 64), 4);
        assert_eq!(p.is_measured(4), Some(true));
        assert_eq!(p.slipped(), 0);
        // Before: a stall across the warm-up's end put its skipped warm-up slots in the window.
        let mut p = Pacer::new(start, 1000, Some(8e6)).measure_from(start + ms(5));
        assert_eq!(p.due(start, 64), 1);
        assert_eq!(p.due(start + ms(30), 64), 11, "slots 20..=30");
        assert_eq!(p.slipped(), 19, "slots 1..=19");
        assert_eq!(p.measured_slipped(), 15, "slots 5..=19");
    }

    #[test]
    fn slots_left_unsent_at_the_end_mark_are_skipped_ones() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1000, Some(8e6));
        assert_eq!(p.due(start, 64), 1);
        // Stalled from slot 1 until after the end mark at 10 ms: slots 1..=9 never went.
        p.close(start + Duration::from_millis(10));
        assert_eq!((p.slipped(), p.measured_slipped()), (9, 9));
        // Closing again, or at a mark already passed, counts nothing twice.
        p.close(start + Duration::from_millis(10));
        assert_eq!(p.slipped(), 9);
        // Unpaced, there is no schedule to fall behind.
        let mut u = Pacer::new(start, 1000, None);
        u.close(start + Duration::from_millis(10));
        assert_eq!(u.slipped(), 0);
    }

    #[test]
    fn unpaced_is_always_due() {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1000, None);
        assert_eq!(p.due(start, 64), 64);
        assert_eq!(p.next_at(), None);
    }
}
