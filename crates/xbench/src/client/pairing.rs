//! Pairs the client's and the server's halves of each interval by index, for bulk TCP and UDP
//! tests alike, and hands each interval on once, in order: when both halves are in, or when a
//! newer client interval shows a half is more than one interval late and is not waited for.
//!
//! A half can still come after its interval went out: the server's counts cross the path
//! under test, and through a full queue on a loaded machine they came more than an interval
//! late. It then completes the interval in the report (its live line has gone out already).
//! Kept waiting instead, it would have no partner left to come and hold back every interval
//! after it (issue 34's probes stopped that way under `--under-load both`).

use std::collections::BTreeMap;

use super::event::{ClientEvent, OnEvent};
use crate::report::{Interval, SideInterval, SideUdpInterval, UdpInterval};
use crate::summary::{self, Directions};

/// One end's part of an interval (one part per clock the end keeps).
pub(super) trait Half: Sized {
    /// The interval both halves make.
    type Merged: Clone;
    fn index(&self) -> u32;
    /// How many streams the part covers.
    fn streams(&self) -> usize;
    /// Whether the client's parts are all in, of `streams`.
    fn client_in(parts: &[Self], streams: usize) -> bool {
        covers(parts, streams)
    }
    /// The interval from both halves (either may be missing parts).
    fn merge(dirs: &Directions, client: &[Self], server: &[Self]) -> Option<Self::Merged>;
    /// The live event that hands the interval on.
    fn event(merged: Self::Merged) -> ClientEvent;
}

/// Whether `parts` cover every one of `streams`.
fn covers<H: Half>(parts: &[H], streams: usize) -> bool {
    parts.iter().map(Half::streams).sum::<usize>() >= streams
}

impl Half for SideInterval {
    type Merged = Interval;
    fn index(&self) -> u32 {
        self.index
    }
    fn streams(&self) -> usize {
        self.streams.len()
    }
    /// A bulk client keeps one clock: its one part is all of its half.
    fn client_in(parts: &[Self], _streams: usize) -> bool {
        !parts.is_empty()
    }
    fn merge(dirs: &Directions, client: &[Self], server: &[Self]) -> Option<Interval> {
        summary::merge_interval(dirs, client.first(), server)
    }
    fn event(merged: Interval) -> ClientEvent {
        ClientEvent::Interval(merged)
    }
}

impl Half for SideUdpInterval {
    type Merged = UdpInterval;
    fn index(&self) -> u32 {
        self.index
    }
    fn streams(&self) -> usize {
        self.streams.len()
    }
    fn merge(dirs: &Directions, client: &[Self], server: &[Self]) -> Option<UdpInterval> {
        let all: Vec<SideUdpInterval> = client.iter().chain(server).cloned().collect();
        summary::udp::merge_interval(dirs, None, &all)
    }
    fn event(merged: UdpInterval) -> ClientEvent {
        ClientEvent::UdpInterval(merged)
    }
}

/// An interval's halves: the client's parts, the server's parts.
type Halves<H> = (Vec<H>, Vec<H>);

/// The intervals of one test, paired.
pub(super) struct Pairing<H: Half> {
    dirs: Directions,
    pending: BTreeMap<u32, Halves<H>>,
    /// Handed on with a half incomplete: its halves, and its place in `done`.
    incomplete: BTreeMap<u32, (Halves<H>, usize)>,
    /// The newest index handed on.
    through: Option<u32>,
    done: Vec<H::Merged>,
}

impl<H: Half> Pairing<H> {
    pub(super) fn new(dirs: Directions) -> Self {
        Pairing {
            dirs,
            pending: BTreeMap::new(),
            incomplete: BTreeMap::new(),
            through: None,
            done: Vec::new(),
        }
    }

    /// The client's part of an interval.
    pub(super) fn client(&mut self, part: H, on_event: OnEvent<'_>) {
        let idx = part.index();
        if self.late(part, true) {
            return;
        }
        self.emit(Some(idx), on_event);
    }

    /// The server's part of an interval.
    pub(super) fn server(&mut self, part: H, on_event: OnEvent<'_>) {
        if self.late(part, false) {
            return;
        }
        self.emit(None, on_event);
    }

    /// Files `part`; true when its interval went out already, which it then completes.
    fn late(&mut self, part: H, client: bool) -> bool {
        let idx = part.index();
        if self.through.is_none_or(|t| idx > t) {
            let halves = self.pending.entry(idx).or_default();
            match client {
                true => halves.0.push(part),
                false => halves.1.push(part),
            }
            return false;
        }
        // A part for an interval that went out complete is a duplicate: nothing to add.
        if let Some(((c, s), at)) = self.incomplete.get_mut(&idx) {
            match client {
                true => c.push(part),
                false => s.push(part),
            }
            if let Some(iv) = H::merge(&self.dirs, c, s) {
                self.done[*at] = iv;
            }
            let n = self.dirs.len();
            if H::client_in(c, n) && covers(s, n) {
                self.incomplete.remove(&idx);
            }
        }
        true
    }

    /// Hands on intervals in order while the first is complete, or (`newest`, a client
    /// interval's index) more than one interval older than the newest.
    fn emit(&mut self, newest: Option<u32>, on_event: OnEvent<'_>) {
        let n = self.dirs.len();
        while let Some((&i, (c, s))) = self.pending.first_key_value() {
            let complete = H::client_in(c, n) && covers(s, n);
            let stale = newest.is_some_and(|l| i + 1 < l);
            if !(complete || stale) {
                break;
            }
            self.pop_first(on_event);
        }
    }

    fn pop_first(&mut self, on_event: OnEvent<'_>) {
        let Some((i, (c, s))) = self.pending.pop_first() else {
            return;
        };
        self.through = Some(i);
        if let Some(iv) = H::merge(&self.dirs, &c, &s) {
            on_event(H::event(iv.clone()));
            self.done.push(iv);
            let n = self.dirs.len();
            if !(H::client_in(&c, n) && covers(&s, n)) {
                self.incomplete.insert(i, ((c, s), self.done.len() - 1));
            }
        }
    }

    /// Every interval, those still waiting handed on as they are: a half that never came
    /// shows as missing.
    pub(super) fn finish(mut self, on_event: OnEvent<'_>) -> Vec<H::Merged> {
        while !self.pending.is_empty() {
            self.pop_first(on_event);
        }
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StreamDirection;
    use crate::report::{Role, SideStreamInterval};

    fn dirs() -> Directions {
        Directions::from([(0, StreamDirection::ClientToServer)])
    }

    /// Stream 0's part of interval `index`: the client sent `bytes`, or the server received
    /// them.
    fn part(index: u32, role: Role, bytes: u64) -> SideInterval {
        SideInterval {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted: false,
            streams: vec![SideStreamInterval {
                stream: 0,
                role,
                bytes,
                tcp: None,
            }],
        }
    }

    fn sent(index: u32) -> SideInterval {
        part(index, Role::Sender, 100)
    }

    fn received(index: u32) -> SideInterval {
        part(index, Role::Receiver, 90)
    }

    /// The server's counts for an interval that went out without them (more than an interval
    /// late) complete it in the report, and hold back no interval after it.
    #[test]
    fn a_half_after_its_interval_went_out_completes_it_and_holds_nothing_back() {
        let seen = std::sync::Mutex::new(Vec::new());
        let mut on_event = |ev: ClientEvent| {
            if let ClientEvent::Interval(iv) = ev {
                seen.lock().unwrap().push(iv.index);
            }
        };
        let mut p = Pairing::<SideInterval>::new(dirs());
        for i in 0..3 {
            p.client(sent(i), &mut on_event);
        }
        // Interval 0 went out without the server's counts when interval 2's came.
        assert_eq!(*seen.lock().unwrap(), [0]);
        p.server(received(0), &mut on_event);
        for i in 1..4 {
            if i == 3 {
                p.client(sent(3), &mut on_event);
            }
            p.server(received(i), &mut on_event);
        }
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2, 3]);
        // A repeated part adds nothing.
        p.server(received(1), &mut on_event);
        let done = p.finish(&mut on_event);
        let indices: Vec<u32> = done.iter().map(|iv| iv.index).collect();
        assert_eq!(indices, [0, 1, 2, 3]);
        assert_eq!(done, {
            let mut q = Pairing::<SideInterval>::new(dirs());
            for i in 0..4 {
                q.client(sent(i), &mut |_| {});
                q.server(received(i), &mut |_| {});
            }
            q.finish(&mut |_| {})
        });
    }
}
