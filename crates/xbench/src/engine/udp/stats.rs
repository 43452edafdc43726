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
