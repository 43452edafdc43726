//! What the connections the accept path answered at once ([`super::at_once`]) added up to,
//! per flow, and the CPU time spent answering them, which the first worker adds to its own
//! at every snapshot so the test is still charged for them. Apart from the answering so that
//! the workers' shared [`super::Control`] can hold it without depending on the accept path.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::engine::cpu::thread_cpu;
use crate::report::CpuUsage;

/// Figures of the connections answered at once, per flow since the last snapshot, and the
/// CPU time spent on them.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    flows: Vec<FlowTally>,
    user_ns: AtomicU64,
    system_ns: AtomicU64,
    /// Connections offered to the accept path (answered or handed on), for
    /// [`Tally::sample`].
    answered: AtomicU64,
}

/// The first this many connections answered at once have their CPU time read one by one;
/// after them, one in [`CPU_SAMPLE`], which stands for itself and the ones it skipped.
const CPU_EXACT: u64 = 64;

/// One connection in this many has its CPU time read once [`CPU_EXACT`] have been: the
/// accept path's answers are alike (the same request and response on a fresh connection),
/// so thousands of them per second make the sampled sum's error negligible, and the two
/// `getrusage` calls per connection were the largest cost of the path after the exchange's
/// own (issue 36: 11 system calls per answered connection, 2 of them these). The sum stays
/// right on average; what it costs is variance: where a thread's clock advances in ticks
/// (kernels without full per-task accounting), one sample in 16 catches a tick or nothing,
/// weighted 16, so a short interval's server CPU figure wanders more than the test's.
const CPU_SAMPLE: u64 = 16;

#[derive(Debug, Default)]
pub(super) struct FlowTally {
    pub(super) connections: AtomicU64,
    pub(super) transactions: AtomicU64,
    pub(super) retransmits: AtomicU64,
    /// Smoothed RTT of the latest connection closed, µs; 0 for none.
    pub(super) srtt_us: AtomicU32,
}

/// What one flow's connections answered at once added up to, taken by [`Tally::take`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) connections: u64,
    pub(crate) transactions: u64,
    pub(crate) retransmits: u64,
    pub(crate) srtt_us: Option<u32>,
}

impl Tally {
    /// A tally for flows `0..flows`.
    pub(crate) fn new(flows: usize) -> Self {
        Tally {
            flows: (0..flows).map(|_| FlowTally::default()).collect(),
            ..Tally::default()
        }
    }

    /// Each flow's figures since the last call (flows with nothing new left out), and the CPU
    /// time spent since then.
    pub(crate) fn take(&self) -> (Vec<(u16, Taken)>, CpuUsage) {
        let mut out = Vec::new();
        for (i, f) in self.flows.iter().enumerate() {
            let connections = f.connections.swap(0, Ordering::Relaxed);
            let transactions = f.transactions.swap(0, Ordering::Relaxed);
            let retransmits = f.retransmits.swap(0, Ordering::Relaxed);
            let srtt = f.srtt_us.load(Ordering::Relaxed);
            if connections + transactions + retransmits > 0 {
                out.push((
                    i as u16,
                    Taken {
                        connections,
                        transactions,
                        retransmits,
                        srtt_us: (srtt > 0).then_some(srtt),
                    },
                ));
            }
        }
        let ns = |a: &AtomicU64| a.swap(0, Ordering::Relaxed) as f64 / 1e9;
        let cpu = CpuUsage {
            user_s: ns(&self.user_ns),
            system_s: ns(&self.system_ns),
        };
        (out, cpu)
    }

    pub(super) fn flow(&self, flow: u16) -> Option<&FlowTally> {
        self.flows.get(usize::from(flow))
    }

    /// Whether this answer's CPU time is read, how many answers it stands for, and whether
    /// the thread's clock is read at its end for the next answer's charge to start from.
    pub(super) fn sample(&self) -> Sample {
        let n = self.answered.fetch_add(1, Ordering::Relaxed);
        let weight = match n {
            n if n < CPU_EXACT => Some(1),
            n if n % CPU_SAMPLE == 0 => Some(CPU_SAMPLE),
            _ => None,
        };
        Sample {
            n,
            weight,
            mark: weight.is_some() || n % CPU_SAMPLE == CPU_SAMPLE - 1,
        }
    }

    /// Where a sampled answer's charge starts: the end of the answer before it, when this
    /// thread answered that one for this test (read then, [`Tally::finish`]), so the accept,
    /// the wake-up and the greeting's check that led to this connection are charged with it;
    /// else now, which charges the exchange alone. `None` for an answer not sampled.
    pub(super) fn start(&self, s: &Sample) -> Option<CpuUsage> {
        s.weight?;
        let fresh = MARK
            .take()
            .filter(|m| m.tally == self.id() && m.n + 1 == s.n)
            .map(|m| m.clock);
        Some(fresh.unwrap_or_else(thread_cpu))
    }

    /// After the answer: charges the time since `start`, `weight` times (a sampled answer's
    /// share), and leaves the clock's reading for the next answer to start from.
    pub(super) fn finish(&self, s: &Sample, start: Option<CpuUsage>) {
        if !s.mark {
            return;
        }
        let now = thread_cpu();
        if let (Some(before), Some(weight)) = (start, s.weight) {
            let ns = |s: f64| (s.max(0.0) * 1e9) as u64 * weight;
            self.user_ns
                .fetch_add(ns(now.user_s - before.user_s), Ordering::Relaxed);
            self.system_ns
                .fetch_add(ns(now.system_s - before.system_s), Ordering::Relaxed);
        }
        MARK.set(Some(Mark {
            tally: self.id(),
            n: s.n,
            clock: now,
        }));
    }

    /// This test's tally, told apart from another's on the same accepting thread.
    fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }
}

/// What [`Tally::sample`] decided for one answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// The answer's place among the test's, from 0.
    n: u64,
    /// How many answers its CPU time stands for; `None`: not read.
    weight: Option<u64>,
    /// Whether the thread's clock is read at its end.
    mark: bool,
}

/// An accepting thread's CPU clock at the end of an answer: where the next sampled answer's
/// charge starts, if it is the next of the same test on the same thread. The time between
/// two answers on one thread is the accept and the greeting's check that led to the second:
/// that thread's work for the test (a `--crr` test's accept thread spent 1.35 s of CPU in a
/// 3 s test, of which the exchanges alone, as charged before, were 0.09 s).
#[derive(Debug, Clone, Copy)]
struct Mark {
    tally: usize,
    n: u64,
    clock: CpuUsage,
}

thread_local! {
    /// This thread's latest [`Mark`]. Thread-local: each listener has an accepting thread of
    /// its own, and a reading from another thread's clock would mean nothing.
    static MARK: Cell<Option<Mark>> = const { Cell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every answer is counted once in the CPU charge: the first 64 read one by one, then one
    /// in 16 standing for 16, so the weights of any whole number of samples add up to the
    /// answers they cover.
    #[test]
    fn the_cpu_samples_stand_for_every_answer() {
        let t = Tally::new(1);
        let weights: Vec<Option<u64>> = (0..64 + 16 * 3).map(|_| t.sample().weight).collect();
        assert!(weights[..64].iter().all(|w| *w == Some(1)));
        assert_eq!(weights[64], Some(16));
        assert!(weights[65..80].iter().all(Option::is_none));
        assert_eq!(weights.iter().flatten().sum::<u64>(), 64 + 16 * 3);
        assert_eq!(weights.iter().flatten().count(), 64 + 3);
    }
}
