//! Where interval boundaries fall: every `-i` seconds, restarting at the end of the `-O`
//! warm-up, so the first measured interval starts exactly when measurement starts.
//!
//! Both ends compute the same schedule from the same spec, each against its own start, which is
//! what lets the client pair its intervals with the server's by index. A timed test has no
//! boundary at its end: the last interval is closed when the streams have drained, so it holds
//! the bytes still in flight instead of leaving them to a sliver of an interval after the end.

use std::time::{Duration, Instant};

use crate::config::{EndCondition, TestSpec};

/// The interval schedule of one test.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    interval: Option<Duration>,
    omit: Duration,
    /// End of a timed test (omit included); no boundary is placed at or after it.
    end: Option<Duration>,
}

impl Schedule {
    #[cfg(test)]
    pub(crate) fn new(interval: Option<Duration>, omit: Duration) -> Self {
        Schedule {
            interval,
            omit,
            end: None,
        }
    }

    /// The schedule of a test as its spec describes it.
    pub(crate) fn for_spec(spec: &TestSpec) -> Self {
        Schedule {
            interval: spec.interval,
            omit: spec.omit,
            end: match spec.end {
                EndCondition::Duration(d) => spec.omit.checked_add(d),
                EndCondition::Bytes(_) => None,
            },
        }
    }

    /// Whether intervals are reported at all (`-i 0` turns them off; the warm-up boundary is
    /// still kept, to start the totals).
    pub(crate) fn reports_intervals(&self) -> bool {
        self.interval.is_some()
    }

    /// End of the warm-up; measurement starts here.
    pub(crate) fn omit(&self) -> Duration {
        self.omit
    }

    /// The first boundary strictly after `t` (time since start), if any.
    pub(crate) fn next_boundary(&self, t: Duration) -> Option<Duration> {
        self.grid_after(t)
            .filter(|b| self.end.is_none_or(|end| *b < end))
    }

    fn grid_after(&self, t: Duration) -> Option<Duration> {
        if t < self.omit {
            let in_omit = self.interval.and_then(|i| {
                let k = t.as_nanos() / i.as_nanos() + 1;
                let b = i.checked_mul(u32::try_from(k).ok()?)?;
                (b < self.omit).then_some(b)
            });
            return Some(in_omit.unwrap_or(self.omit));
        }
        let i = self.interval?;
        let since = t - self.omit;
        let k = since.as_nanos() / i.as_nanos() + 1;
        self.omit
            .checked_add(i.checked_mul(u32::try_from(k).ok()?)?)
    }

    /// Whether an interval ending at `end` lies in the warm-up.
    pub(crate) fn is_omitted(&self, end: Duration) -> bool {
        end <= self.omit && !self.omit.is_zero()
    }
}

/// One span of a schedule, closed at a boundary (or at the end): times are seconds since the
/// controller's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Span {
    pub(crate) index: u32,
    pub(crate) start_s: f64,
    pub(crate) end_s: f64,
    /// Inside the `-O` warm-up.
    pub(crate) omitted: bool,
}

/// A controller's walk through its schedule against its own start: when the next boundary
/// falls, and the span each one closes. The request/response controllers use it at both ends;
/// a throughput [`Sampler`](super::sampler::Sampler) keeps its own, with its counters.
#[derive(Debug)]
pub(crate) struct Boundaries {
    start: Instant,
    schedule: Schedule,
    next: Option<Duration>,
    from: Duration,
    index: u32,
}

impl Boundaries {
    pub(crate) fn new(start: Instant, schedule: Schedule) -> Self {
        Boundaries {
            start,
            schedule,
            next: schedule.next_boundary(Duration::ZERO),
            from: Duration::ZERO,
            index: 0,
        }
    }

    /// When the next boundary falls; `None` when no boundary is left.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.next.map(|b| self.start + b)
    }

    /// At [`Self::next_at`]: the span the boundary closes, ending now (a late wake-up makes it
    /// longer, never shorter). `None` when no boundary is left.
    pub(crate) fn close(&mut self) -> Option<Span> {
        let b = self.next?;
        let now = self.start.elapsed();
        let span = self.span(now, self.schedule.is_omitted(b));
        self.next = self.schedule.next_boundary(now);
        Some(span)
    }

    /// The last span, from the last boundary until `now`.
    pub(crate) fn last(&mut self, now: Instant) -> Span {
        self.span(now.saturating_duration_since(self.start), false)
    }

    fn span(&mut self, now: Duration, omitted: bool) -> Span {
        let span = Span {
            index: self.index,
            start_s: self.from.as_secs_f64(),
            end_s: now.as_secs_f64(),
            omitted,
        };
        self.index += 1;
        self.from = now;
        span
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boundaries(s: Schedule, until: f64) -> Vec<f64> {
        let mut t = Duration::ZERO;
        let mut out = vec![];
        while let Some(b) = s.next_boundary(t) {
            if b.as_secs_f64() > until {
                break;
            }
            out.push(b.as_secs_f64());
            t = b;
        }
        out
    }

    #[test]
    fn plain_intervals() {
        let s = Schedule::new(Some(Duration::from_secs(1)), Duration::ZERO);
        assert_eq!(boundaries(s, 3.0), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn omit_restarts_the_grid() {
        let s = Schedule::new(Some(Duration::from_secs(1)), Duration::from_millis(2500));
        assert_eq!(boundaries(s, 4.5), vec![1.0, 2.0, 2.5, 3.5, 4.5]);
        assert!(s.is_omitted(Duration::from_millis(2500)));
        assert!(!s.is_omitted(Duration::from_millis(3500)));
    }

    #[test]
    fn no_intervals_still_marks_the_omit_end() {
        let s = Schedule::new(None, Duration::from_secs(2));
        assert_eq!(boundaries(s, 100.0), vec![2.0]);
        let s = Schedule::new(None, Duration::ZERO);
        assert_eq!(boundaries(s, 100.0), Vec::<f64>::new());
    }

    #[test]
    fn a_timed_test_has_no_boundary_at_its_end() {
        let mut spec = TestSpec::throughput();
        spec.end = EndCondition::Duration(Duration::from_secs(3));
        assert_eq!(boundaries(Schedule::for_spec(&spec), 10.0), vec![1.0, 2.0]);
        spec.end = EndCondition::Duration(Duration::from_millis(2500));
        spec.omit = Duration::from_secs(1);
        assert_eq!(
            boundaries(Schedule::for_spec(&spec), 10.0),
            vec![1.0, 2.0, 3.0]
        );
    }

    #[test]
    fn boundaries_number_their_spans_and_end_with_the_last() {
        let start = Instant::now() - Duration::from_millis(2500);
        let mut b = Boundaries::new(
            start,
            Schedule::new(Some(Duration::from_secs(1)), Duration::ZERO),
        );
        assert_eq!(b.next_at(), Some(start + Duration::from_secs(1)));
        let first = b.close().unwrap();
        assert_eq!((first.index, first.start_s, first.omitted), (0, 0.0, false));
        // Closed late (2.5 s in): the span runs to now, the next boundary is the one after.
        assert!(first.end_s >= 2.5);
        assert_eq!(b.next_at(), Some(start + Duration::from_secs(3)));
        let last = b.last(Instant::now());
        assert_eq!((last.index, last.start_s), (1, first.end_s));
        let mut none = Boundaries::new(start, Schedule::new(None, Duration::ZERO));
        assert_eq!((none.next_at(), none.close()), (None, None));
    }

    #[test]
    fn a_late_sampler_skips_to_the_next_boundary() {
        let s = Schedule::new(Some(Duration::from_secs(1)), Duration::ZERO);
        assert_eq!(
            s.next_boundary(Duration::from_millis(3200)),
            Some(Duration::from_secs(4))
        );
    }
}
