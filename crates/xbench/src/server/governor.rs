//! The server's total sending rate (`--max-send-rate`), shared fairly among the streams it
//! sends on, whatever test they belong to.
//!
//! Each server-to-client stream is paced by the kernel (`SO_MAX_PACING_RATE`, TCP's internal
//! pacing since Linux 4.13), at `cap ÷ streams sending now`, or less if its client asked for
//! less with `-b`. Rates are recomputed whenever a sending test starts or ends, so the sum
//! never exceeds the cap and nobody is left with a stale small share. A test that asks for
//! more than the whole cap is refused at admission with a message naming the limit.
//!
//! A request/response test (TCP or UDP, `--crr` too) shares the cap as *one* stream however
//! many flows it has: a 4,096-flow test must not shrink everyone else's share to 1/4,096th.
//! Its share goes to the test's [`SendBudget`], a token bucket its workers take every answer's
//! bytes from (answers of any size: 14 Gbit/s of small answers went past a 100 Mbit/s cap
//! before, issue 30). With large answers (at least [`PACED_RR_ANSWER`] bytes) its flows'
//! sockets are also paced by the kernel at their part of that share, which smooths the bursts
//! the bucket lets through.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::engine::send_budget::SendBudget;
use crate::engine::sockopt;
use crate::units::format_bits_per_second;

/// Request/response answers at least this large are paced under the cap (see the module
/// docs).
pub(crate) const PACED_RR_ANSWER: u32 = 16 * 1024;

/// A socket the governor paces. Held weakly: the governor must not keep a connection open
/// after its owner closed it, and a closed one simply drops out of the next rebalance.
pub(crate) type PacedSocket = Weak<dyn AsRawFd + Send + Sync>;

/// Shares the cap.
#[derive(Debug)]
pub(crate) struct Governor {
    cap: Option<u64>,
    inner: Mutex<Inner>,
    /// The kernel refused to pace a socket once: said once, not on every rebalance.
    warned: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    members: HashMap<u64, Member>,
}

#[derive(Debug)]
struct Member {
    sockets: Vec<PacedSocket>,
    /// What the client asked for per stream (`-b`), bits per second.
    asked: Option<u64>,
    /// The whole test counts as one stream, its sockets splitting that share (request/
    /// response flows); otherwise each socket is a stream.
    as_one: bool,
    /// Where a request/response test's share goes: one share for as long as the test runs,
    /// whether or not it holds connections (`--crr`'s come and go).
    budget: Option<Arc<SendBudget>>,
}

impl Member {
    fn live(&self) -> usize {
        self.sockets.iter().filter(|s| s.strong_count() > 0).count()
    }

    /// How many fair shares the member takes.
    fn weight(&self) -> usize {
        match (self.as_one, self.live()) {
            _ if self.budget.is_some() => 1,
            (true, n) => n.min(1),
            (false, n) => n,
        }
    }
}

/// A sending test's place in the share; leaving (drop) hands its share back.
#[derive(Debug)]
pub(crate) struct Share {
    governor: Arc<Governor>,
    id: u64,
}

impl Drop for Share {
    fn drop(&mut self) {
        self.governor.leave(self.id);
    }
}

impl Governor {
    pub(crate) fn new(cap: Option<u64>) -> Self {
        Governor {
            cap,
            inner: Mutex::new(Inner::default()),
            warned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Refuses a test whose own ask exceeds the whole cap.
    pub(crate) fn admit(
        &self,
        asked_per_stream: Option<u64>,
        streams: usize,
    ) -> Result<(), String> {
        let (Some(cap), Some(asked)) = (self.cap, asked_per_stream) else {
            return Ok(());
        };
        let total = asked.saturating_mul(streams as u64);
        if total > cap {
            return Err(format!(
                "the test asks the server to send {} ({} × {streams} streams); this server sends at \
                 most {} in total (--max-send-rate)",
                format_bits_per_second(total as f64),
                format_bits_per_second(asked as f64),
                format_bits_per_second(cap as f64)
            ));
        }
        Ok(())
    }

    /// Adds a test's sending streams, each a stream of its own, and rebalances everyone.
    pub(crate) fn join(
        governor: &Arc<Governor>,
        sockets: Vec<PacedSocket>,
        asked: Option<u64>,
    ) -> Share {
        Self::add(
            governor,
            Member {
                sockets,
                asked,
                as_one: false,
                budget: None,
            },
        )
    }

    /// Adds a request/response test as one stream, its share going to `budget` (and split
    /// among `sockets`, when its answers are large enough to pace them too), and rebalances
    /// everyone.
    pub(crate) fn join_as_one(
        governor: &Arc<Governor>,
        sockets: Vec<PacedSocket>,
        budget: Arc<SendBudget>,
    ) -> Share {
        Self::add(
            governor,
            Member {
                sockets,
                asked: None,
                as_one: true,
                budget: Some(budget),
            },
        )
    }

    fn add(governor: &Arc<Governor>, member: Member) -> Share {
        let g = governor;
        let id = {
            let mut inner = g.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let id = inner.next;
            inner.next += 1;
            inner.members.insert(id, member);
            g.rebalance(&inner);
            id
        };
        Share {
            governor: Arc::clone(governor),
            id,
        }
    }

    fn leave(&self, id: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.members.remove(&id);
        self.rebalance(&inner);
    }

    fn rebalance(&self, inner: &Inner) {
        let streams: usize = inner.members.values().map(Member::weight).sum();
        let fair = self.cap.map(|c| c / streams.max(1) as u64);
        for m in inner.members.values() {
            let share = match m.as_one {
                true => fair.map(|f| (f / m.live().max(1) as u64).max(1)),
                false => fair,
            };
            let rate = match (share, m.asked) {
                (Some(f), Some(a)) => Some(f.min(a)),
                (f, a) => f.or(a),
            };
            if let (Some(b), Some(f)) = (&m.budget, fair) {
                b.set_rate(f);
            }
            for s in m.sockets.iter().filter_map(Weak::upgrade) {
                if let Err(e) = sockopt::set_max_pacing_rate(&s.as_raw_fd(), rate)
                    && rate.is_some()
                    && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!("--max-send-rate cannot be enforced on this kernel: {e}");
                }
            }
        }
    }
}
