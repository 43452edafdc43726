//! The receiver's accounting of one stream: which sequence numbers arrived, in what order,
//! how often, and how evenly (RFC 3550 jitter). Pure arithmetic, no sockets or clocks.
//!
//! Loss is decided from sequence numbers alone: a datagram above the highest seen so far
//! counts the numbers it skipped as lost; one that fills such a gap later is out of order and
//! takes one back. So the running loss is never negative and never above what was expected.
//! A bitmap of the last [`WINDOW`] numbers below the highest tells a late datagram from a
//! duplicate; one older than that cannot be told apart and is counted as a duplicate (never as
//! a datagram received twice over), so figures err towards loss, never towards more received
//! than sent. Sequence numbers are 64-bit: no wrap in any test a machine can run.

/// How many sequence numbers below the highest the duplicate check remembers.
pub(crate) const WINDOW: u64 = 1 << 16;

/// A stream's cumulative counters, as its thread publishes them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Counts {
    /// Datagrams sent, or received (each sequence number once).
    pub(crate) datagrams: u64,
    /// Their UDP payload bytes.
    pub(crate) bytes: u64,
    /// Sequence numbers skipped and not (yet) filled.
    pub(crate) lost: u64,
    /// Datagrams that arrived after a higher sequence number.
    pub(crate) out_of_order: u64,
    /// Datagrams whose sequence number had already arrived.
    pub(crate) duplicates: u64,
    /// RFC 3550 interarrival jitter after the latest datagram, nanoseconds.
    pub(crate) jitter_ns: f64,
    /// Datagrams the kernel dropped because this socket's receive buffer was full
    /// (`SO_RXQ_OVFL`).
    pub(crate) rxq_drops: u64,
    /// Sender: datagram slots skipped after a stall rather than sent in a burst.
    pub(crate) slipped: u64,
    /// Datagrams refused: too short or without the stream's token. Never counted otherwise.
    pub(crate) ignored: u64,
    /// `datagrams`, `bytes`, `out_of_order` and `duplicates` of the datagrams sent after the
    /// `-O` warm-up only: the totals.
    pub(crate) measured: Measured,
}

/// The counters of datagrams sent after the warm-up, which the totals cover.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Measured {
    pub(crate) datagrams: u64,
    pub(crate) bytes: u64,
    pub(crate) out_of_order: u64,
    pub(crate) duplicates: u64,
    /// Sender: slots skipped whose time was after the warm-up (see
    /// [`Pacer`](super::pacer::Pacer)), beside the datagrams sent for such slots.
    pub(crate) slipped: u64,
}

/// What one datagram turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The next number or above (a gap before it counted as lost).
    InOrder,
    /// Fills an earlier gap.
    Late,
    /// Already seen, or too old to tell.
    Duplicate,
}

/// One stream's receive accounting.
#[derive(Debug)]
pub(crate) struct RecvStats {
    counts: Counts,
    /// One more than the highest sequence number seen; `None` before the first.
    top: Option<u64>,
    /// Bit `n % WINDOW`: number `n` (within `WINDOW` below `top`) arrived.
    seen: Vec<u64>,
    /// Transit time (arrival − send) of the previous datagram, for jitter.
    last_transit: Option<i128>,
}

impl Default for RecvStats {
    fn default() -> Self {
        RecvStats {
            counts: Counts::default(),
            top: None,
            seen: vec![0; (WINDOW / 64) as usize],
            last_transit: None,
        }
    }
}

impl RecvStats {
    /// Accounts one datagram of `len` bytes: its sequence number, when it was sent (the
    /// sender's clock) and when it arrived (ours), both in nanoseconds.
    ///
    /// Once per datagram received, 20 million times a second at 64 bytes: the usual case
    /// (the next number) stays inline and branch-light, the rest is in [`Self::place_other`].
    #[inline]
    pub(crate) fn on_datagram(
        &mut self,
        seq: u64,
        sent_ns: u64,
        arrived_ns: u64,
        len: usize,
        warm_up: bool,
    ) -> Arrival {
        let arrival = self.place(seq);
        let c = &mut self.counts;
        if arrival == Arrival::Duplicate {
            c.duplicates += 1;
            if !warm_up {
                c.measured.duplicates += 1;
            }
            return arrival;
        }
        c.datagrams += 1;
        c.bytes += len as u64;
        if !warm_up {
            c.measured.datagrams += 1;
            c.measured.bytes += len as u64;
        }
        if arrival == Arrival::Late {
            c.out_of_order += 1;
            if !warm_up {
                c.measured.out_of_order += 1;
            }
        }
        self.jitter(i128::from(arrived_ns) - i128::from(sent_ns));
        arrival
    }

    /// Accounts `count` datagrams of `len` bytes numbered from `first` up, all sent at
    /// `sent_ns` and arrived at `arrived_ns`: exactly what `count` calls of
    /// [`Self::on_datagram`] in that order do, every figure the same.
    ///
    /// A GRO train from one GSO send is such a run (the sender stamps a batch with one time,
    /// the kernel a train with one arrival time), 64 datagrams at 64 bytes. After the first,
    /// each is usually the next number with an unchanged transit time (D = 0), so it only
    /// marks its bit and decays the jitter, and the counts are added once for the run.
    pub(crate) fn on_run(
        &mut self,
        first: u64,
        count: u64,
        sent_ns: u64,
        arrived_ns: u64,
        len: usize,
        warm_up: bool,
    ) {
        let Some(last) = count.checked_sub(1).and_then(|n| first.checked_add(n)) else {
            // Nothing, or numbers past u64::MAX (never from a real sender): one by one.
            for i in 0..count {
                self.on_datagram(first.wrapping_add(i), sent_ns, arrived_ns, len, warm_up);
            }
            return;
        };
        let transit = i128::from(arrived_ns) - i128::from(sent_ns);
        let mut next = 0;
        for seq in first..=last {
            if self.top == Some(seq) && self.last_transit == Some(transit) {
                // From here to the end of the run every number is the next one with an
                // unchanged transit time: `place`'s in-order case and `jitter` with D = 0
                // for each, done at once.
                next = last - seq + 1;
                self.top = Some(last.saturating_add(1));
                self.mark_run(seq, next);
                self.decay_jitter(next);
                break;
            }
            // The run's first, a gap, a late or a repeated number, or one after a first that
            // was a duplicate (which left an older transit time): the general path.
            self.on_datagram(seq, sent_ns, arrived_ns, len, warm_up);
        }
        let c = &mut self.counts;
        c.datagrams += next;
        c.bytes += next * len as u64;
        if !warm_up {
            c.measured.datagrams += next;
            c.measured.bytes += next * len as u64;
        }
    }

    /// A datagram that is not the stream's.
    pub(crate) fn on_ignored(&mut self) {
        self.counts.ignored += 1;
    }

    /// The kernel's cumulative drop counter for the socket, as the latest `SO_RXQ_OVFL`
    /// control message says (it never goes down).
    pub(crate) fn on_rxq_drops(&mut self, total: u64) {
        self.counts.rxq_drops = self.counts.rxq_drops.max(total);
    }

    pub(crate) fn counts(&self) -> &Counts {
        &self.counts
    }

    fn place(&mut self, seq: u64) -> Arrival {
        let Some(top) = self.top else {
            return self.place_first(seq);
        };
        if seq == top {
            // The next number, nearly every datagram: nothing skipped, nothing to forget.
            self.top = Some(seq.saturating_add(1));
            self.mark(seq);
            return Arrival::InOrder;
        }
        self.place_other(top, seq)
    }

    /// [`Self::place`] for the first datagram.
    #[cold]
    fn place_first(&mut self, seq: u64) -> Arrival {
        // Everything below the first number was sent before it and has not arrived.
        self.counts.lost += seq;
        self.top = Some(seq.saturating_add(1));
        self.mark(seq);
        Arrival::InOrder
    }

    /// [`Self::place`] for a datagram that is not the next number: a gap, or a late one.
    #[inline(never)]
    fn place_other(&mut self, top: u64, seq: u64) -> Arrival {
        if seq >= top {
            let skipped = seq - top;
            self.counts.lost += skipped;
            // Forget what the window slides over.
            for n in top..seq.min(top.saturating_add(WINDOW)) {
                self.unmark(n);
            }
            self.top = Some(seq.saturating_add(1));
            self.mark(seq);
            return Arrival::InOrder;
        }
        if top - seq > WINDOW || self.is_marked(seq) {
            return Arrival::Duplicate;
        }
        self.mark(seq);
        // It was counted lost when the number above it arrived.
        self.counts.lost = self.counts.lost.saturating_sub(1);
        Arrival::Late
    }

    /// RFC 3550 §6.4.1: J += (|D| − J) / 16, D the change in transit time.
    fn jitter(&mut self, transit: i128) {
        if let Some(prev) = self.last_transit {
            let d = transit - prev;
            // The same value as `d.unsigned_abs() as f64` (rounding to nearest is symmetric
            // in sign, and i64::MIN converts exactly), but i128 → f64 is a library call, a
            // third of this function's instructions at 64-byte datagrams, where i64 → f64 is
            // one instruction; a real change of transit time fits in 64 bits. Written with
            // the sign on the float side: converting `unsigned_abs()` of the i64 instead,
            // LLVM folds both arms back into the one library call.
            let d = match i64::try_from(d) {
                Ok(small) => (small as f64).abs(),
                Err(_) => d.unsigned_abs() as f64,
            };
            self.counts.jitter_ns += (d - self.counts.jitter_ns) / 16.0;
        }
        self.last_transit = Some(transit);
    }

    /// `count` steps of [`Self::jitter`] with D = 0, each J += (0 − J) / 16 to the bit.
    ///
    /// J / 16 is exact while it is a normal number (a power-of-two scaling), so J − J/16 is
    /// the one rounding of 15J/16, and so is J × 0.9375 (15/16 is exact in binary): one
    /// multiplication in the dependency chain from one datagram to the next instead of a
    /// subtraction, a division and an addition. Near the subnormals, where J / 16 rounds,
    /// the literal formula.
    fn decay_jitter(&mut self, count: u64) {
        let mut j = self.counts.jitter_ns;
        for _ in 0..count {
            j = if j >= 16.0 * f64::MIN_POSITIVE {
                j * 0.9375
            } else {
                j + (0.0 - j) / 16.0
            };
        }
        self.counts.jitter_ns = j;
    }

    /// Marks `count` numbers from `from` up, a word of the window at a time.
    fn mark_run(&mut self, from: u64, count: u64) {
        if count >= WINDOW {
            self.seen.fill(!0);
            return;
        }
        let (mut i, mut left) = (from % WINDOW, count);
        while left > 0 {
            let bit = i % 64;
            let take = (64 - bit).min(left);
            let ones = if take == 64 { !0 } else { (1u64 << take) - 1 };
            self.seen[(i / 64) as usize] |= ones << bit;
            left -= take;
            i = (i + take) % WINDOW;
        }
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn mark(&mut self, seq: u64) {
        let (w, b) = Self::bit(seq);
        self.seen[w] |= b;
    }

    fn unmark(&mut self, seq: u64) {
        let (w, b) = Self::bit(seq);
        self.seen[w] &= !b;
    }

    fn is_marked(&self, seq: u64) -> bool {
        let (w, b) = Self::bit(seq);
        self.seen[w] & b != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> (Vec<Arrival>, Counts) {
        let mut s = RecvStats::default();
        let a = seqs
            .iter()
            .map(|&q| s.on_datagram(q, 0, 0, 100, false))
            .collect();
        (a, *s.counts())
    }

    #[test]
    fn in_order_counts_exactly() {
        let (_, c) = run(&(0..1000).collect::<Vec<_>>());
        assert_eq!(
            (c.datagrams, c.bytes, c.lost, c.out_of_order, c.duplicates),
            (1000, 100_000, 0, 0, 0)
        );
    }

    #[test]
    fn gaps_late_fills_and_duplicates() {
        use Arrival::*;
        let (a, c) = run(&[0, 1, 4, 2, 2, 5, 3, 0]);
        assert_eq!(
            a,
            vec![
                InOrder, InOrder, InOrder, Late, Duplicate, InOrder, Late, Duplicate
            ]
        );
        assert_eq!(
            (c.datagrams, c.lost, c.out_of_order, c.duplicates),
            (6, 0, 2, 2)
        );
        let (_, c) = run(&[3, 9]);
        assert_eq!((c.datagrams, c.lost), (2, 8), "0..3 and 4..9 never came");
    }

    #[test]
    fn sequence_numbers_past_u32_do_not_wrap() {
        let base = u64::from(u32::MAX) - 2;
        let seqs: Vec<u64> = (0..6).map(|i| base + i).collect();
        let mut s = RecvStats::default();
        s.on_datagram(0, 0, 0, 1, false);
        s.on_datagram(base - 1, 0, 0, 1, false);
        for &q in &seqs {
            s.on_datagram(q, 0, 0, 1, false);
        }
        let c = s.counts();
        assert_eq!(
            c.lost,
            base - 2,
            "numbers 1..base-1 are lost, none negative"
        );
        assert_eq!((c.datagrams, c.out_of_order, c.duplicates), (8, 0, 0));
        // Near u64::MAX: reordering and duplicates still tell apart.
        let mut s = RecvStats::default();
        for q in [u64::MAX - 3, u64::MAX - 1, u64::MAX - 2, u64::MAX - 2] {
            s.on_datagram(q, 0, 0, 1, false);
        }
        let c = s.counts();
        assert_eq!((c.datagrams, c.out_of_order, c.duplicates), (3, 1, 1));
        assert_eq!(c.lost, u64::MAX - 3, "everything below the first number");
    }

    #[test]
    fn too_old_to_tell_is_never_counted_as_received() {
        let (a, c) = run(&[WINDOW + 10, 5]);
        assert_eq!(a[1], Arrival::Duplicate);
        assert_eq!(c.datagrams, 1);
        assert!(c.lost <= WINDOW + 10);
    }

    #[test]
    fn a_window_slide_forgets_old_numbers() {
        // 3 arrives, then the window slides far past it: a later 3 + WINDOW is new, not a dup.
        let (a, c) = run(&[3, 2 * WINDOW, 3 + WINDOW + 1]);
        assert_eq!(a[2], Arrival::Late);
        assert_eq!(c.duplicates, 0);
    }

    #[test]
    fn jitter_follows_rfc_3550() {
        let mut s = RecvStats::default();
        // Evenly paced and evenly received: zero.
        for i in 0..100u64 {
            s.on_datagram(i, i * 1000, 50 + i * 1000, 1, false);
        }
        assert_eq!(s.counts().jitter_ns, 0.0);
        // One datagram 1600 ns late: J = 1600/16 = 100, then decays.
        s.on_datagram(100, 100_000, 50 + 100_000 + 1600, 1, false);
        assert!((s.counts().jitter_ns - 100.0).abs() < 1e-9);
    }

    #[test]
    fn jitter_is_exact_for_any_change_of_transit_time() {
        // The two conversions `jitter` picks between, at and past the edges of i64.
        let cases: [(u64, u64, u128); 3] = [
            // Transit 2^63, then 0: D = i64::MIN.
            (1 << 63, 0, 1 << 63),
            // Transit −(2^63 − 1), then 2^64 − 1: |D| past 64 bits.
            (
                0,
                u64::MAX,
                u128::from(u64::MAX) + u128::from(u64::MAX >> 1),
            ),
            // Transit 0, then 2^53 + 1: rounded, not truncated.
            (0, (1 << 53) + 1, (1 << 53) + 1),
        ];
        for (first_arrival, second_arrival, d) in cases {
            let mut s = RecvStats::default();
            let first_sent = if d > u128::from(u64::MAX) {
                u64::MAX >> 1
            } else {
                0
            };
            s.on_datagram(0, first_sent, first_arrival, 1, false);
            s.on_datagram(1, 0, second_arrival, 1, false);
            assert_eq!(s.counts().jitter_ns, d as f64 / 16.0, "|D| = {d}");
        }
    }

    #[test]
    fn a_run_counts_exactly_as_its_datagrams_one_by_one() {
        // Runs that start in order, after a gap, late, as duplicates, overlapping the last
        // one, across the window, with repeated and new send and arrival times, warm-up and
        // not: every figure (jitter to the bit) and the duplicate window must match.
        let mut runs = vec![
            (0, 64, 100, 500, false),
            (64, 64, 100, 500, false),
            (128, 64, 200, 650, true),
            (200, 10, 300, 700, false),
            (192, 8, 300, 700, false),
            (190, 12, 300, 900, false),
            (5, 3, 40, 50, false),
            (210, 1, 400, 401, false),
            (WINDOW + 500, 64, 500, 4_000, false),
            (300, 64, 600, 5_000, false),
            (7, 0, 1, 1, false),
        ];
        // And a pseudo-random mix.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut seq = 2 * WINDOW;
        for _ in 0..2_000 {
            let r = next();
            seq = match r % 8 {
                0 => seq.saturating_sub(r % 100),
                1 => seq + r % 1_000,
                _ => seq,
            };
            let count = 1 + (r >> 8) % 64;
            runs.push((seq, count, (r >> 16) % 4, (r >> 20) % 3 * 1_000, r % 5 == 0));
            seq += count;
        }
        // Then a long run of D = 0: the jitter decays through the subnormals to the least
        // of them, where J / 16 rounds.
        let end = seq + 100;
        for i in 0..400 {
            runs.push((end + i * 64, 64, 7, 1 << 40, false));
        }
        // Last (nothing counts after it): numbers up to and past u64::MAX.
        runs.push((u64::MAX - 2, 5, 0, 0, false));
        let (mut by_run, mut one_by_one) = (RecvStats::default(), RecvStats::default());
        let mut subnormal = false;
        for (first, count, sent, arrived, warm_up) in runs {
            let j = by_run.counts().jitter_ns;
            subnormal |= j > 0.0 && j < f64::MIN_POSITIVE;
            by_run.on_run(first, count, sent, arrived, 64, warm_up);
            for i in 0..count {
                one_by_one.on_datagram(first.wrapping_add(i), sent, arrived, 64, warm_up);
            }
            let (a, b) = (by_run.counts(), one_by_one.counts());
            assert_eq!(a, b, "after {count} from {first}");
            assert_eq!(a.jitter_ns.to_bits(), b.jitter_ns.to_bits());
            assert_eq!(
                (by_run.top, by_run.last_transit),
                (one_by_one.top, one_by_one.last_transit)
            );
            assert!(by_run.seen == one_by_one.seen, "after {count} from {first}");
        }
        assert!(by_run.counts().datagrams > 60_000, "{:?}", by_run.counts());
        assert!(subnormal, "the jitter went through the subnormals");
    }

    #[test]
    fn warm_up_datagrams_stay_out_of_the_measured_counts() {
        let mut s = RecvStats::default();
        s.on_datagram(0, 0, 0, 10, true);
        s.on_datagram(2, 0, 0, 10, false);
        s.on_datagram(1, 0, 0, 10, true);
        s.on_datagram(2, 0, 0, 10, false);
        let m = s.counts().measured;
        assert_eq!(
            (m.datagrams, m.bytes, m.out_of_order, m.duplicates),
            (1, 10, 0, 1)
        );
        assert_eq!(s.counts().datagrams, 3);
    }
}
