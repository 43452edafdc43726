//! The server worker's event loop, once for every transport: a [`Server`] owns the loop (the
//! stop check, the epoll wait and its waker, handing each socket's event to the transport),
//! the blocking loop of a lone flow, the interval handshake and the worker's last reports,
//! and a [`ServeIo`] (TCP's `server::TcpServe`, UDP's `udp::server::UdpServe`) says what
//! answering is on its sockets: what a readable socket is answered with, what one blocking
//! step is, what its flows' figures are.
//!
//! A module of its own rather than more of [`driver`](super::driver): a client worker starts
//! transactions on a schedule, times them and watches its flows for stalls, and its driver's
//! `Core` and `FlowIo` are mostly that (the pacing queue, the latency recorder, the stall
//! clock). A server worker only answers what arrives, so it would carry all of that unused on
//! its hot path; the two loops share only a few lines of shape (wait, drain the waker,
//! answer an epoch), and each reads better whole.
//!
//! Static dispatch on purpose, as in the client's driver: this is the server's `--rr` /
//! `--crr` / `--rr -u` hot path, and a generic [`Server`] compiles to the loop each transport
//! had of its own, with the same system calls per transaction (the blocking ping-pong path:
//! one receive and one send). The transports mark what the loop calls on every pass or
//! transaction `#[inline]` (`blocking_step`, `on_event`, `deadline`, `take_new`, `sweep`):
//! left out of line, they cost the TCP worker 12 % more user-space instructions per
//! ping-pong transaction and 29 % more on the epoll path (callgrind, against the loops each
//! transport had before; with the hints, 3 % and 2 %, the rest the `Core` argument).

use std::io;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::poll::{Event, Poll, WAKER, Waker};
use super::workers::ConnSender;
use super::{Control, Epochs, FlowSnapshot, Report, STOPPED, Worker, tell};
use crate::engine::cpu::thread_cpu;
use crate::report::CpuUsage;

/// A transport's side of a server worker: its sockets, and how they are answered. The
/// [`Server`] calls these; they call back into [`Core`] for the epoll set, the controls, the
/// send budget and failure reports.
pub(crate) trait ServeIo {
    /// What a failed epoll wait is reported as, before the error (each transport keeps the
    /// words it always had: the controller passes them on to the user).
    const LOOP_FAILED: &'static str;
    /// Whether the worker serves its lone flow with blocking calls instead of epoll.
    fn blocking(&self) -> bool;
    /// Readies the lone flow for blocking calls; false when it could not be (the epoll loop
    /// serves it then).
    fn enter_blocking(&mut self) -> bool;
    /// One blocking pass over the lone flow: at most one wait for what arrives, and its
    /// answer. Says whether the flow is still there to serve, and if not, whether the worker
    /// serves on ([`Step`]).
    fn blocking_step(&mut self, core: &mut Core) -> Step;
    /// Gives the lone flow back to the epoll loop.
    fn leave_blocking(&mut self);
    /// When the epoll wait returns at the latest with nothing arrived, so the transport's
    /// [`sweep`](ServeIo::sweep) runs; `None` to wait for events only.
    fn deadline(&self) -> Option<Instant>;
    /// A socket of the transport reported `ev` (never the waker's).
    fn on_event(&mut self, core: &mut Core, ev: &Event);
    /// After a pass's events, before its housekeeping: TCP takes the `--crr` connections the
    /// accept path handed over.
    fn take_new(&mut self, _core: &mut Core) {}
    /// After a pass's housekeeping: TCP closes the `--crr` connections past their deadline.
    fn sweep(&mut self, _core: &mut Core) {}
    /// Every flow's figures since the last snapshot.
    fn snapshots(&mut self, core: &Core) -> Vec<FlowSnapshot>;
    /// The worker's CPU time for its last report, read after the last
    /// [`snapshots`](ServeIo::snapshots): its thread's, plus what the transport charges to it.
    fn cpu(&self, _core: &Core) -> CpuUsage {
        thread_cpu()
    }
}

/// What a blocking step leaves the [`Server`] to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Served (or waited a slice for nothing): keep on.
    Served,
    /// The flow has ended (closed, or failed and closed): answer a due interval, then serve on
    /// from the epoll loop, which keeps answering intervals until the test stops.
    Ended,
    /// The flow failed and the worker has nothing else to serve: its last report goes out now.
    Quit,
}

/// What a transport shares with the server loop: the epoll set, the controls, and the line to
/// the controller.
pub(crate) struct Core {
    pub(crate) poll: Poll,
    waker: Arc<Waker>,
    pub(crate) control: Arc<Control>,
    tx: UnboundedSender<Report>,
    epochs: Epochs,
}

impl Core {
    /// Server worker `index`'s side of the loop: `poll` has the worker's `waker` in it
    /// ([`worker_poll`](super::poll::worker_poll)), and the transport adds its sockets.
    pub(crate) fn new(
        index: usize,
        (poll, waker): (Poll, Arc<Waker>),
        control: Arc<Control>,
        tx: UnboundedSender<Report>,
    ) -> Self {
        Core {
            poll,
            waker,
            control,
            tx,
            epochs: Epochs::new(index),
        }
    }

    /// Which worker this is (the first one reports the `--crr` answers of the accept path).
    pub(crate) fn worker(&self) -> usize {
        self.epochs.worker()
    }

    /// Tells the controller that `flow` (`None`: the worker) failed with `error`, which ends
    /// the test.
    pub(crate) fn failed(&self, flow: Option<u16>, error: String) {
        tell(&self.tx, Report::Failed { flow, error });
    }

    /// Answers the controller's interval boundary, if one has passed since the last answer,
    /// with `io`'s snapshots.
    pub(crate) fn housekeeping<T: ServeIo>(&mut self, io: &mut T) {
        if let Some(epoch) = self.epochs.due(&self.control) {
            let flows = io.snapshots(self);
            tell(&self.tx, self.epochs.snapshot(epoch, flows, None));
        }
    }

    /// Waits until the test's send budget (`--max-send-rate`) lets the next answer go,
    /// answering interval boundaries with `io`'s snapshots meanwhile; false if the test
    /// stopped first.
    #[inline]
    pub(crate) fn paced<T: ServeIo>(&mut self, io: &mut T) -> bool {
        let Some(b) = self.control.send_budget.clone() else {
            return true;
        };
        let control = Arc::clone(&self.control);
        b.wait(|| control.state() == STOPPED, || self.housekeeping(io))
    }
}

/// A server worker: the transport `T`'s sockets, answered from one epoll loop (or, for a lone
/// flow the transport can serve so, blocking calls).
pub(crate) struct Server<T> {
    core: Core,
    io: T,
}

/// Starts a server worker's thread, named `name`, answering `io`'s sockets, which are in
/// `core`'s epoll set already; `conns` is where the accept path hands it new `--crr`
/// connections (TCP's, which `io` takes in [`ServeIo::take_new`]).
pub(crate) fn spawn<T: ServeIo + Send + 'static>(
    name: String,
    core: Core,
    io: T,
    conns: Option<ConnSender>,
) -> io::Result<Worker> {
    let waker = Arc::clone(&core.waker);
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || Server { core, io }.run())?;
    Ok(Worker {
        waker,
        conns,
        thread: Some(thread),
    })
}

impl<T: ServeIo> Server<T> {
    /// Serves until the controller stops the test (or the worker fails), then sends the
    /// worker's last figures.
    fn run(mut self) {
        let serve_on = !self.io.blocking() || self.run_blocking();
        if serve_on {
            self.run_epoll();
        }
        let flows = self.io.snapshots(&self.core);
        let cpu = self.io.cpu(&self.core);
        tell(
            &self.core.tx,
            Report::Done {
                flows,
                latency: None,
                cpu,
            },
        );
    }

    /// The lone flow with blocking calls: the transport's [`ServeIo::blocking_step`] waits a
    /// bounded slice at most, so interval boundaries and the stop are still seen. Returns
    /// whether the epoll loop serves on (not after [`Step::Quit`]).
    fn run_blocking(&mut self) -> bool {
        let mut step = Step::Served;
        if self.io.enter_blocking() {
            while self.core.control.state() != STOPPED {
                step = self.io.blocking_step(&mut self.core);
                if step == Step::Quit {
                    break;
                }
                self.core.housekeeping(&mut self.io);
                if step == Step::Ended {
                    break;
                }
            }
        }
        self.io.leave_blocking();
        step != Step::Quit
    }

    /// The epoll loop: every socket's events to the transport, then its new connections, the
    /// interval handshake and its sweep, until the test stops.
    fn run_epoll(&mut self) {
        let mut events = Vec::with_capacity(64);
        while self.core.control.state() != STOPPED {
            events.clear();
            let deadline = self.io.deadline();
            if let Err(e) = self.core.poll.wait(deadline, |ev| events.push(ev)) {
                self.core.failed(None, format!("{}: {e}", T::LOOP_FAILED));
                break;
            }
            for ev in &events {
                if ev.token == WAKER {
                    self.core.waker.drain();
                    continue;
                }
                self.io.on_event(&mut self.core, ev);
            }
            self.io.take_new(&mut self.core);
            self.core.housekeeping(&mut self.io);
            self.io.sweep(&mut self.core);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    use super::*;
    use crate::engine::rr::poll::worker_poll;

    /// A transport with no sockets that writes down what the loop asked of it, and steps
    /// the test through the blocking path as `steps` says.
    struct Script {
        steps: Vec<Step>,
        log: Arc<Mutex<Vec<&'static str>>>,
        control: Arc<Control>,
    }

    impl Script {
        fn note(&self, what: &'static str) {
            self.log.lock().unwrap().push(what);
        }
    }

    impl ServeIo for Script {
        const LOOP_FAILED: &'static str = "script loop failed";
        fn blocking(&self) -> bool {
            !self.steps.is_empty()
        }
        fn enter_blocking(&mut self) -> bool {
            self.note("enter");
            true
        }
        fn blocking_step(&mut self, _core: &mut Core) -> Step {
            self.note("step");
            // An interval boundary passes during the step.
            self.control.epoch.fetch_add(1, Ordering::Relaxed);
            self.steps.remove(0)
        }
        fn leave_blocking(&mut self) {
            self.note("leave");
        }
        fn deadline(&self) -> Option<Instant> {
            self.note("deadline");
            Some(Instant::now() + Duration::from_millis(1))
        }
        fn on_event(&mut self, _core: &mut Core, _ev: &Event) {
            self.note("event");
        }
        fn take_new(&mut self, _core: &mut Core) {
            self.note("take_new");
            // And another before the epoll pass's housekeeping.
            self.control.epoch.fetch_add(1, Ordering::Relaxed);
        }
        fn sweep(&mut self, _core: &mut Core) {
            self.note("sweep");
            self.control.state.store(STOPPED, Ordering::Relaxed);
        }
        fn snapshots(&mut self, _core: &Core) -> Vec<FlowSnapshot> {
            self.note("snapshots");
            vec![FlowSnapshot::counted(7, 1)]
        }
    }

    /// Runs a worker over `steps` on this thread; what it did and what it reported.
    fn serve(steps: Vec<Step>) -> (Vec<&'static str>, UnboundedReceiver<Report>) {
        let control = Arc::new(Control::default());
        let (tx, rx) = unbounded_channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let core = Core::new(3, worker_poll(0, false).unwrap(), Arc::clone(&control), tx);
        let io = Script {
            steps,
            log: Arc::clone(&log),
            control,
        };
        Server { core, io }.run();
        let log = log.lock().unwrap().clone();
        (log, rx)
    }

    #[test]
    fn an_ended_flow_answers_its_interval_then_the_epoll_loop_serves_on() {
        let (log, mut rx) = serve(vec![Step::Served, Step::Ended]);
        let blocking = ["enter", "step", "snapshots", "step", "snapshots", "leave"];
        // One epoll pass (its new connections, then the interval, then the sweep, which
        // stops the test here), then Done.
        let epoll = ["deadline", "take_new", "snapshots", "sweep", "snapshots"];
        assert_eq!(log, [&blocking[..], &epoll[..]].concat());
        for epoch in [1, 2, 3] {
            let r = rx.try_recv().unwrap();
            let answered = matches!(
                r,
                Report::Snapshot { worker: 3, epoch: e, latency: None, .. } if e == epoch
            );
            assert!(answered, "{r:?}");
        }
        let r = rx.try_recv().unwrap();
        assert!(matches!(r, Report::Done { latency: None, .. }), "{r:?}");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_quitting_flow_reports_done_at_once_without_the_epoll_loop() {
        let (log, mut rx) = serve(vec![Step::Served, Step::Quit]);
        // No interval answered after the failing step, no epoll pass: straight to Done,
        // though the test was never stopped.
        assert_eq!(
            log,
            ["enter", "step", "snapshots", "step", "leave", "snapshots"]
        );
        let r = rx.try_recv().unwrap();
        assert!(matches!(r, Report::Snapshot { epoch: 1, .. }), "{r:?}");
        let r = rx.try_recv().unwrap();
        assert!(
            matches!(r, Report::Done { ref flows, .. } if flows.len() == 1),
            "{r:?}"
        );
        assert!(rx.try_recv().is_err());
    }
}
