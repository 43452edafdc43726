//! The worker pool of one end of one test: the threads, how the controller steps them
//! (epochs, state) and stops them, and where the server's new `--crr` connections go.
//!
//! Apart from the worker types in [`super`] so that those stay a leaf the workers and the
//! accept path ([`super::at_once`]) both read, and nothing in [`super`] depends back on them.

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use super::at_once::{Answerer, Arrived, Outcome, take_greeting};
use super::poll::Waker;
use super::{Control, STOPPED};

/// A running worker thread.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) waker: Arc<Waker>,
    /// Hands a server worker new `--crr` connections.
    pub(crate) conns: Option<ConnSender>,
    pub(crate) thread: Option<JoinHandle<()>>,
}

/// Where a server worker takes new `--crr` connections, with what the accept path already
/// did on each.
pub(crate) type ConnSender = std::sync::mpsc::Sender<(u16, TcpStream, Arrived)>;

/// All workers of one end of one test. Dropping it stops and joins them, so no thread outlives
/// the test however its controller exits.
#[derive(Debug)]
pub(crate) struct Workers {
    pub(crate) control: Arc<Control>,
    pub(crate) workers: Vec<Worker>,
}

/// Answers new `--crr` connections on the calling thread when it can ([`super::at_once`]), and gives
/// the rest to server workers, round robin; callable from any thread (the accept path uses
/// it directly).
#[derive(Debug)]
pub(crate) struct Handoff {
    /// `None` for responses too large to answer without waiting.
    answerer: Option<Answerer>,
    targets: Vec<(ConnSender, Arc<Waker>)>,
    next: std::sync::atomic::AtomicUsize,
    control: Arc<Control>,
    /// Most connections open at once: a client keeps one per flow, plus a few closing; more
    /// is a client opening connections it does not use, and they are refused.
    max_live: usize,
}

impl Handoff {
    /// Takes flow `flow`'s new connection, whose first `unread` bytes are the rest of its
    /// greeting, peeked by the accept path and not yet taken (0 once read).
    pub(crate) fn give(&self, flow: u16, conn: TcpStream, unread: usize) {
        if self.targets.is_empty() {
            return;
        }
        let (conn, arrived) = match &self.answerer {
            Some(a) => match a.answer(flow, conn, &self.control, unread) {
                Outcome::Finished => return,
                Outcome::Unfinished(conn, arrived) => (conn, arrived),
            },
            None if take_greeting(&conn, unread) => (conn, Arrived::default()),
            None => return,
        };
        let admitted = self
            .control
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_live).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            return; // dropped: the client sees the connection close and names the flow
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.targets.len();
        let (tx, waker) = &self.targets[i];
        if tx.send((flow, conn, arrived)).is_ok() {
            waker.wake();
        }
    }
}

impl Workers {
    pub(crate) fn new(control: Arc<Control>, workers: Vec<Worker>) -> Self {
        Workers { control, workers }
    }

    pub(crate) fn len(&self) -> usize {
        self.workers.len()
    }

    /// Ends the interval in progress: every worker answers with a snapshot.
    pub(crate) fn next_epoch(&self) -> u32 {
        let e = self.control.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        self.wake_all();
        e
    }

    /// See [`Control::end_at`].
    pub(crate) fn end_at(&self, ns: u64) {
        self.control.end_at(ns);
    }

    pub(crate) fn set_state(&self, state: u8) {
        self.control.state.store(state, Ordering::Relaxed);
        self.wake_all();
    }

    fn wake_all(&self) {
        for w in &self.workers {
            w.waker.wake();
        }
    }

    /// Where new `--crr` connections go: answered at once when whole and small (requests of
    /// `request_len` bytes, responses of `response_len`), else to the workers that take
    /// them, round robin, at most `max_live` open at once.
    pub(crate) fn handoff(&self, max_live: usize, request_len: u64, response_len: u64) -> Handoff {
        Handoff {
            answerer: Answerer::new(request_len, response_len),
            targets: self
                .workers
                .iter()
                .filter_map(|w| w.conns.clone().map(|tx| (tx, Arc::clone(&w.waker))))
                .collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
            control: Arc::clone(&self.control),
            max_live,
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.set_state(STOPPED);
        let running: Vec<JoinHandle<()>> = self
            .workers
            .iter_mut()
            .filter_map(|w| w.thread.take())
            .collect();
        if running.iter().all(JoinHandle::is_finished) {
            for t in running {
                let _ = t.join();
            }
            return;
        }
        // A worker in a blocking call sees the stop only when the call returns (up to half a
        // second); an async controller must not hold a runtime thread that long, so a short-
        // lived thread of its own waits for them (not tokio's blocking pool, whose idle
        // threads linger for seconds).
        let joiner = std::thread::Builder::new()
            .name("xb-rr-join".into())
            .spawn(move || {
                for t in running {
                    let _ = t.join();
                }
            });
        if let Err(e) = joiner {
            // Dropped handles detach the threads; told to stop, they exit on their own.
            tracing::debug!("cannot start a thread to join stopped workers: {e}");
        }
    }
}
