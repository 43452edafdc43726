//! When each packet leaves: `arrival + delay + jitter offset`, or not at all (random loss),
//! and which packets are held back an extra `reorder_hold` so that later packets overtake
//! them (random reordering). Pure arithmetic on nanosecond timestamps, so it is tested
//! without clocks or devices.
//!
//! Jitter without reordering: drawing an independent offset per packet and then holding each
//! packet behind the one ahead would, at high packet rates, push nearly every packet to
//! `delay + jitter` (it waits for the largest draw among its neighbours). Instead the offset
//! wanders: it moves linearly between uniform draws in ±jitter taken every `4 × jitter`, so it
//! changes at most half as fast as time passes and `arrival + offset` can never go backwards.
//! Every packet's delay stays within `delay ± jitter` at any packet rate, and consecutive
//! packets see similar delays, as behind a real queue whose depth varies.

use super::rng::Rng;

/// Decides the fate of each packet of one direction.
#[derive(Debug, Clone)]
pub(crate) struct Scheduler {
    delay_ns: u64,
    jitter_ns: u64,
    loss: f64,
    reorder: f64,
    reorder_hold_ns: u64,
    /// Separate generators, so the drop pattern of a seed depends only on the packet
    /// sequence and not on the jitter setting or the packets' timing.
    loss_rng: Rng,
    jitter_rng: Rng,
    reorder_rng: Rng,
    /// Current jitter segment: start time, offsets at its start and end.
    seg: Option<(u64, f64, f64)>,
    last_release: u64,
}

/// When an admitted packet leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Release {
    /// Release time, ns; for a held packet, its place in the order plus the extra hold.
    pub(crate) at_ns: u64,
    /// Held back an extra `reorder_hold`, out of the line's order: packets released in the
    /// meantime overtake it.
    pub(crate) held: bool,
}

impl Scheduler {
    /// A scheduler of one direction: `loss` and `reorder` are probabilities.
    pub(crate) fn new(
        delay_ns: u64,
        jitter_ns: u64,
        loss: f64,
        (reorder, reorder_hold_ns): (f64, u64),
        seed: u64,
    ) -> Self {
        Scheduler {
            delay_ns,
            jitter_ns: jitter_ns.min(delay_ns),
            loss,
            reorder,
            reorder_hold_ns,
            loss_rng: Rng::new(seed),
            jitter_rng: Rng::new(seed ^ 0x6a09_e667_f3bc_c908),
            reorder_rng: Rng::new(seed ^ 0xbb67_ae85_84ca_a73b),
            seg: None,
            last_release: 0,
        }
    }

    /// When a packet that arrived at `arrival_ns` leaves, or `None` to drop it. A dropped
    /// packet draws no reordering: the drop pattern and the reordering pattern of a seed each
    /// depend only on the packet sequence.
    pub(crate) fn admit(&mut self, arrival_ns: u64) -> Option<Release> {
        if self.loss > 0.0 && self.loss_rng.next_f64() < self.loss {
            return None;
        }
        let held = self.reorder > 0.0 && self.reorder_rng.next_f64() < self.reorder;
        let at = self.in_order(arrival_ns);
        Some(Release {
            at_ns: if held { at + self.reorder_hold_ns } else { at },
            held,
        })
    }

    /// The packet's place in the line's order (what it would be without reordering). Held
    /// packets take their place too: the ones after them keep their timing.
    fn in_order(&mut self, arrival_ns: u64) -> u64 {
        let mut release = arrival_ns + self.delay_ns;
        if self.jitter_ns > 0 {
            release = release.saturating_add_signed(self.offset(arrival_ns) as i64);
        }
        // Guards equal timestamps and rounding; the offset's slope already keeps order.
        release = release.max(self.last_release);
        self.last_release = release;
        release
    }

    /// The wandering jitter offset at time `t`, ns.
    fn offset(&mut self, t: u64) -> f64 {
        let period = 4 * self.jitter_ns;
        let j = self.jitter_ns as f64;
        let rng = &mut self.jitter_rng;
        let mut draw = || (rng.next_f64() * 2.0 - 1.0) * j;
        let (start, from, to) = match self.seg {
            None => (t, draw(), draw()),
            Some((start, _, to)) if t >= start + period => {
                let k = (t - start) / period;
                // After a silence of more than one segment, start afresh.
                let from = if k == 1 { to } else { draw() };
                (start + k * period, from, draw())
            }
            Some(s) => s,
        };
        self.seg = Some((start, from, to));
        let frac = (t - start) as f64 / period as f64;
        from + (to - from) * frac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_delay_is_exact() {
        let mut s = Scheduler::new(10_000_000, 0, 0.0, (0.0, 0), 1);
        let at = |r: Option<Release>| r.map(|r| (r.at_ns, r.held));
        assert_eq!(at(s.admit(5)), Some((10_000_005, false)));
        assert_eq!(at(s.admit(7)), Some((10_000_007, false)));
    }

    fn spread(spacing_ns: u64, n: u64) -> (u64, u64) {
        let (d, j) = (10_000_000u64, 2_000_000u64);
        let mut s = Scheduler::new(d, j, 0.0, (0.0, 0), 42);
        let mut last = 0;
        let mut spread = (u64::MAX, 0u64);
        for i in 0..n {
            let arrival = i * spacing_ns;
            let r = s.admit(arrival).unwrap().at_ns;
            assert!(r >= last, "packet {i} overtook the one ahead");
            let own = r - arrival;
            assert!((d - j..=d + j).contains(&own), "packet {i} held {own} ns");
            last = r;
            spread = (spread.0.min(own), spread.1.max(own));
        }
        spread
    }

    #[test]
    fn jitter_spans_its_range_at_any_rate_without_reordering() {
        // 100k packets/s (a 1.2 Gbit/s stream of full-size packets) and one every 20 ms (a
        // request/response test): both see delays across most of 10 ± 2 ms.
        for (spacing, n) in [(10_000, 1_000_000), (20_000_000, 2_000)] {
            let (lo, hi) = spread(spacing, n);
            assert!(
                lo <= 8_300_000 && hi >= 11_700_000,
                "spacing {spacing}: {lo}..{hi}"
            );
        }
    }

    #[test]
    fn loss_rate_matches_and_is_reproducible() {
        let count = |seed, jitter, reorder| {
            let mut s = Scheduler::new(1_000_000, jitter, 0.01, (reorder, 1_000_000), seed);
            (0..1_000_000u64)
                .filter(|&t| s.admit(t * 1000).is_none())
                .count()
        };
        let a = count(3, 0, 0.0);
        assert_eq!(a, count(3, 0, 0.0), "same seed, same pattern");
        assert_eq!(
            a,
            count(3, 500_000, 0.0),
            "jitter does not change the drop pattern"
        );
        assert_eq!(a, count(3, 0, 0.05), "nor does reordering");
        // 1 % of 10^6: mean 10 000, sd ≈ 99.5; ±5 sd.
        assert!((9_500..=10_500).contains(&a), "{a}");
    }

    #[test]
    fn held_packets_are_held_the_extra_time_and_the_rest_keep_their_timing() {
        let (d, hold) = (2_000_000u64, 1_000_000u64);
        let mut s = Scheduler::new(d, 0, 0.0, (0.1, hold), 9);
        let mut held = 0;
        for i in 0..100_000u64 {
            let arrival = i * 10_000;
            let r = s.admit(arrival).unwrap();
            let extra = if r.held { hold } else { 0 };
            assert_eq!(r.at_ns, arrival + d + extra, "packet {i}");
            held += u64::from(r.held);
        }
        // 10 % of 10^5: mean 10 000, sd ≈ 95; ±5 sd.
        assert!((9_525..=10_475).contains(&held), "{held}");
        let mut none = Scheduler::new(d, 0, 0.0, (0.0, hold), 9);
        assert!((0..1000).all(|i| !none.admit(i).unwrap().held));
    }
}
