//! One end's measuring clock over its UDP streams of one role: interval boundaries from the
//! test's schedule, differences of the streams' cumulative counters at each, and the cut at
//! the end mark. Both ends run one per role they have, started when the first datagram it
//! measures can be on the wire (the same rule as TCP's, see [`crate::proto::message`]).

use std::time::{Duration, Instant};

use super::UdpStream;
use super::stats::Counts;
use crate::config::{EndCondition, TestSpec};
use crate::engine::schedule::{Boundaries, Schedule, Span};
use crate::report::{Role, SideUdpInterval, SideUdpStream};

/// A clock over the streams of one role.
#[derive(Debug)]
pub(crate) struct UdpClock {
    pub(crate) role: Role,
    boundaries: Boundaries,
    reports: bool,
    /// Each stream's counters at the last boundary.
    prev: Vec<(u16, Counts)>,
    /// End of the measured window.
    pub(crate) end_mark: Instant,
    cut: bool,
}

impl UdpClock {
    /// A clock from `start` over streams `ids`. UDP tests are timed (the spec says so).
    pub(crate) fn new(role: Role, start: Instant, spec: &TestSpec, ids: Vec<u16>) -> Self {
        let schedule = Schedule::for_spec(spec);
        let length = match spec.end {
            EndCondition::Duration(d) => spec.omit.saturating_add(d),
            EndCondition::Bytes(_) => Duration::ZERO,
        };
        UdpClock {
            role,
            boundaries: Boundaries::new(start, schedule),
            reports: schedule.reports_intervals(),
            prev: ids.into_iter().map(|id| (id, Counts::default())).collect(),
            end_mark: start.checked_add(length).unwrap_or(start),
            cut: false,
        }
    }

    /// When this clock next has something to do; `None` once cut.
    pub(crate) fn next_wakeup(&self) -> Option<Instant> {
        if self.cut {
            return None;
        }
        Some(
            self.boundaries
                .next_at()
                .map_or(self.end_mark, |b| b.min(self.end_mark)),
        )
    }

    /// At a wake-up: the interval a boundary closed, or the last one if the end mark passed.
    pub(crate) fn on_wakeup(
        &mut self,
        now: Instant,
        streams: &[UdpStream],
    ) -> Option<SideUdpInterval> {
        if self.cut {
            return None;
        }
        if now >= self.end_mark {
            return self.cut(now, streams);
        }
        match self.boundaries.next_at() {
            Some(b) if now >= b => {
                let span = self.boundaries.close()?;
                self.interval(span, streams)
            }
            _ => None,
        }
    }

    /// Closes the window now (the end mark, or the test cut short): the last interval. A
    /// sender's ends at the end mark however late this runs (on a loaded machine, hundreds of
    /// milliseconds): its threads stopped sending there. A receiver's runs to now: it counts
    /// arrivals.
    pub(crate) fn cut(&mut self, now: Instant, streams: &[UdpStream]) -> Option<SideUdpInterval> {
        if self.cut {
            return None;
        }
        self.cut = true;
        let now = match self.role {
            Role::Sender => now.min(self.end_mark),
            Role::Receiver => now,
        };
        let span = self.boundaries.last(now);
        self.interval(span, streams)
    }

    fn interval(&mut self, span: Span, streams: &[UdpStream]) -> Option<SideUdpInterval> {
        let role = self.role;
        let mut out = Vec::with_capacity(self.prev.len());
        for (id, prev) in &mut self.prev {
            let Some(s) = streams.iter().find(|s| s.id == *id) else {
                continue;
            };
            let now = s.shared.counts();
            out.push(delta(*id, role, prev, &now));
            *prev = now;
        }
        (self.reports && span.end_s > span.start_s).then_some(SideUdpInterval {
            index: span.index,
            start_s: span.start_s,
            end_s: span.end_s,
            omitted: span.omitted,
            streams: out,
        })
    }
}

/// A stream's counters between two samples; jitter as it stands at the later one.
fn delta(stream: u16, role: Role, a: &Counts, b: &Counts) -> SideUdpStream {
    SideUdpStream {
        stream,
        role,
        datagrams: b.datagrams.saturating_sub(a.datagrams),
        bytes: b.bytes.saturating_sub(a.bytes),
        lost: b.lost.saturating_sub(a.lost),
        out_of_order: b.out_of_order.saturating_sub(a.out_of_order),
        duplicates: b.duplicates.saturating_sub(a.duplicates),
        jitter_ms: b.jitter_ns / 1e6,
        rxq_drops: b.rxq_drops.saturating_sub(a.rxq_drops),
        slipped: b.slipped.saturating_sub(a.slipped),
        ignored: b.ignored.saturating_sub(a.ignored),
        error: None,
    }
}
