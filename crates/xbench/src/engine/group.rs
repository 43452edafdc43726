//! The stream threads of one end of one test, and their ends as they arrive.
//!
//! Dropping a group aborts every stream still running, so whatever path a session or client
//! leaves by (error, timeout, panic unwinding through the task), no thread or socket outlives it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::stream::{StreamEnd, StreamHandle};
use crate::report::Role;

/// Stream threads of one end.
#[derive(Debug)]
pub(crate) struct Group {
    handles: Vec<StreamHandle>,
    ends: HashMap<u16, StreamEnd>,
}

impl Group {
    pub(crate) fn new(handles: Vec<StreamHandle>) -> Self {
        Group {
            handles,
            ends: HashMap::new(),
        }
    }

    /// Every stream, in the order they were given.
    pub(crate) fn handles(&self) -> &[StreamHandle] {
        &self.handles
    }

    /// The streams of one role, in the order they were given.
    pub(crate) fn of_role(&self, role: Role) -> impl Iterator<Item = &StreamHandle> {
        self.handles.iter().filter(move |h| h.role == role)
    }

    /// Resolves once every stream thread has ended. Cancel-safe: ends already seen are kept.
    pub(crate) async fn all_ended(&mut self) {
        self.ended_where(|_| true).await;
    }

    /// Resolves once every receiver has reached end of stream.
    pub(crate) async fn receivers_ended(&mut self) {
        self.ended_where(|h| h.role == Role::Receiver).await;
    }

    async fn ended_where(&mut self, pick: impl Fn(&StreamHandle) -> bool) {
        for h in &mut self.handles {
            if !pick(h) || self.ends.contains_key(&h.id) {
                continue;
            }
            let end = match (&mut h.done).await {
                Ok(end) => end,
                // The thread died without reporting (a panic); count it as ended.
                Err(_) => StreamEnd {
                    bytes: h.shared.bytes.0.load(Ordering::Relaxed),
                    ended: Instant::now(),
                    cpu: Default::default(),
                    sched: None,
                    error: Some("stream thread panicked".into()),
                },
            };
            self.ends.insert(h.id, end);
        }
    }

    /// Asks every sender to stop after what it has queued.
    pub(crate) fn stop_senders(&self) {
        for h in self.handles.iter().filter(|h| h.role == Role::Sender) {
            h.stop_sending();
        }
    }

    /// Ends every stream that is still running, at once.
    pub(crate) fn abort(&self) {
        for h in &self.handles {
            if !self.ends.contains_key(&h.id) {
                h.abort();
            }
        }
    }

    /// Aborts what still runs and waits up to `limit` for the threads to report.
    pub(crate) async fn collect(mut self, limit: Duration) -> HashMap<u16, StreamEnd> {
        self.abort();
        let _ = tokio::time::timeout(limit, self.all_ended()).await;
        std::mem::take(&mut self.ends)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.abort();
    }
}
