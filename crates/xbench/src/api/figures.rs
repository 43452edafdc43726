//! The figures a caller usually wants from a [`TestReport`], as typed values: the receiver's
//! rate and the retransmits per direction, latency percentiles and the transaction rate. They
//! read the report's own fields (nothing is recomputed but percentiles, from the merged
//! histogram); for anything else, the fields are public.

use std::time::Duration;

use crate::config::StreamDirection;
use crate::latency::Distribution;
use crate::report::{DirectionSummary, Outcome, TestReport};

impl TestReport {
    /// The totals of one direction of a throughput test, if the test used it.
    pub fn direction(&self, direction: StreamDirection) -> Option<&DirectionSummary> {
        self.summary
            .directions
            .iter()
            .find(|d| d.direction == direction)
    }

    /// What the receivers of `direction` read inside the measured window, bits per second:
    /// the headline figure. `None` when the test did not use that direction or the
    /// receiving end's report never arrived.
    pub fn receiver_bits_per_second(&self, direction: StreamDirection) -> Option<f64> {
        self.direction(direction)?
            .receiver
            .map(|r| r.bits_per_second)
    }

    /// Segments the senders of `direction` retransmitted, all streams; `None` when the test
    /// did not use that direction. For a request/response test, [`rr`](Self::rr) has them.
    pub fn retransmits(&self, direction: StreamDirection) -> Option<u64> {
        self.direction(direction).map(|d| d.retransmits)
    }

    /// Latency at `percentile` (0–100) over the whole request/response test, all flows
    /// merged; `None` for a throughput test or a test with no transaction. Read from the
    /// histogram (3 significant digits), clamped to the true minimum and maximum.
    pub fn latency_percentile(&self, percentile: f64) -> Option<Duration> {
        let rr = self.rr.as_ref()?;
        let dist = Distribution::decode(&rr.summary.histogram).ok()?;
        if dist.count() == 0 || percentile.is_nan() {
            return None;
        }
        Some(Duration::from_nanos(dist.quantile_ns(percentile / 100.0)))
    }

    /// Transactions per second of a request/response test, all flows, after the warm-up.
    pub fn transactions_per_second(&self) -> Option<f64> {
        self.rr.as_ref().map(|r| r.summary.transactions_per_second)
    }

    /// True when the test ran to its end condition (not interrupted, not failed).
    pub fn completed(&self) -> bool {
        self.outcome == Outcome::Completed
    }
}
