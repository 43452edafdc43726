//! UDP server workers (`--rr -u`): answer each of the test's requests with one response.
//!
//! A datagram is answered only when it is exactly a request of the test (the test's request
//! length, the flow's token, a sequence number not answered before: [`ReplayWindow`]), on a
//! socket connected to the address that proved it holds the test's cookie, so the kernel drops
//! datagrams from anywhere else. Work per datagram is one `recv` of its header and at most one
//! `send`; anything else is counted as ignored and dropped.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::super::poll::{Interest, Poll, WAKER, Waker, worker_poll};
use super::super::{Control, Epochs, FlowSnapshot, Report, STOPPED, UdpCounts, Worker, tell};
use super::{Arrival, ReplayWindow, UdpFlow, recv_header, send};
use crate::engine::cpu::thread_cpu;
use crate::engine::udp::wire::HEADER_LEN;

/// What a server worker answers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) request_len: usize,
    pub(crate) response_len: usize,
}

/// How long a lone flow's blocking `recv` waits before looking at its controls (see the TCP
/// server's `SLICE`: a short one costs the tail).
const SLICE: Duration = Duration::from_millis(500);
/// Longest a response may wait for room in the socket's send buffer; past it, the response
/// is dropped (the client counts it lost) rather than the worker stalled.
const SEND_WAIT: Duration = Duration::from_millis(50);

/// Starts a server worker over `flows`.
pub(crate) fn spawn(
    index: usize,
    plan: Plan,
    flows: Vec<UdpFlow>,
    control: Arc<Control>,
    tx: UnboundedSender<Report>,
) -> io::Result<Worker> {
    let (poll, waker) = worker_poll(flows.len(), false)?;
    let mut state = Vec::with_capacity(flows.len());
    for (slot, f) in flows.into_iter().enumerate() {
        // Blocking sends (bounded by SEND_WAIT), receives that do not block in the epoll loop.
        f.sock.set_nonblocking(false)?;
        f.sock.set_write_timeout(Some(SEND_WAIT))?;
        f.sock.set_read_timeout(Some(SLICE))?;
        poll.add(f.sock.as_raw_fd(), slot as u64, Interest::Read)?;
        state.push(Flow {
            flow: f,
            window: ReplayWindow::default(),
            transactions: 0,
            ignored: 0,
        });
    }
    let mut response = vec![0u8; plan.response_len.max(HEADER_LEN)];
    response.truncate(plan.response_len);
    let mut worker = ServerWorker {
        plan,
        poll,
        waker: Arc::clone(&waker),
        flows: state,
        control,
        tx,
        response,
        epochs: Epochs::new(index),
    };
    let thread = std::thread::Builder::new()
        .name(format!("xb-rr-udp-server-{index}"))
        .spawn(move || worker.run())?;
    Ok(Worker {
        waker,
        conns: None,
        thread: Some(thread),
    })
}

struct Flow {
    flow: UdpFlow,
    window: ReplayWindow,
    /// Requests answered since the last snapshot.
    transactions: u64,
    /// Datagrams ignored since the last snapshot.
    ignored: u64,
}

struct ServerWorker {
    plan: Plan,
    poll: Poll,
    waker: Arc<Waker>,
    flows: Vec<Flow>,
    control: Arc<Control>,
    tx: UnboundedSender<Report>,
    /// A response: the request's header, then zeros.
    response: Vec<u8>,
    epochs: Epochs,
}

impl ServerWorker {
    fn run(&mut self) {
        if self.flows.len() == 1 {
            // One flow: a blocking `recv` per request, no epoll round.
            while self.control.state() != STOPPED {
                if let Err(e) = self.answer(0, 0) {
                    self.failed(0, &e);
                    break;
                }
                self.housekeeping();
            }
        } else {
            let mut ready = Vec::with_capacity(64);
            while self.control.state() != STOPPED {
                ready.clear();
                let deadline = std::time::Instant::now() + SLICE;
                if let Err(e) = self.poll.wait(Some(deadline), |ev| ready.push(ev.token)) {
                    tell(
                        &self.tx,
                        Report::Failed {
                            flow: None,
                            error: format!("event loop failed: {e}"),
                        },
                    );
                    break;
                }
                for &t in &ready {
                    if t == WAKER {
                        self.waker.drain();
                    } else if let Some(i) =
                        usize::try_from(t).ok().filter(|&i| i < self.flows.len())
                        && let Err(e) = self.answer(i, libc::MSG_DONTWAIT)
                    {
                        self.failed(i, &e);
                    }
                }
                self.housekeeping();
            }
        }
        let flows = self.snapshot();
        tell(
            &self.tx,
            Report::Done {
                flows,
                latency: None,
                cpu: thread_cpu(),
            },
        );
    }

    /// Answers what is waiting on flow `i`: every datagram with `MSG_DONTWAIT`, one (waiting
    /// up to [`SLICE`] for it) without.
    fn answer(&mut self, i: usize, flags: i32) -> io::Result<()> {
        let want = self.plan.request_len;
        loop {
            let f = &mut self.flows[i];
            let arrival = match recv_header(&f.flow.sock, flags) {
                // The ICMP answer to a response the client's socket no longer took.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => return Ok(()),
                other => other?,
            };
            let (len, header) = match arrival {
                Arrival::Nothing => return Ok(()),
                Arrival::Handshake if flags & libc::MSG_DONTWAIT == 0 => return Ok(()),
                Arrival::Handshake => continue,
                Arrival::Datagram { len, header } => (len, header),
            };
            self.control.activity.fetch_add(1, Ordering::Relaxed);
            let ok = header.filter(|h| len == want && h.token == f.flow.token);
            match ok {
                Some(h) if f.window.admit(h.seq) => {
                    if !self.paced() {
                        return Ok(()); // stopped while waiting for the send budget
                    }
                    let f = &mut self.flows[i];
                    h.write(&mut self.response[..HEADER_LEN]);
                    // A full send buffer drops the response, as a full queue on the path would.
                    if let Err(e) = send(&f.flow.sock, &self.response, 0) {
                        if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                            return Ok(());
                        }
                        return Err(e);
                    }
                    if let Some(b) = &self.control.send_budget {
                        b.charge(b.udp_datagram(self.response.len() as u64));
                    }
                    f.transactions += 1;
                }
                _ => f.ignored += 1,
            }
            if flags & libc::MSG_DONTWAIT == 0 {
                return Ok(());
            }
        }
    }

    /// Waits until the test's send budget (`--max-send-rate`) lets the next response go,
    /// keeping up with interval boundaries meanwhile; false if the test stopped first.
    fn paced(&mut self) -> bool {
        let Some(b) = self.control.send_budget.clone() else {
            return true;
        };
        let control = Arc::clone(&self.control);
        b.wait(|| control.state() == STOPPED, || self.housekeeping())
    }

    fn failed(&mut self, i: usize, e: &io::Error) {
        let flow = self.flows[i].flow.id;
        self.poll.delete(self.flows[i].flow.sock.as_raw_fd());
        tell(
            &self.tx,
            Report::Failed {
                flow: Some(flow),
                error: format!("UDP socket failed: {e}"),
            },
        );
    }

    fn housekeeping(&mut self) {
        if let Some(epoch) = self.epochs.due(&self.control) {
            let flows = self.snapshot();
            tell(&self.tx, self.epochs.snapshot(epoch, flows, None));
        }
    }

    fn snapshot(&mut self) -> Vec<FlowSnapshot> {
        self.flows
            .iter_mut()
            .map(|f| FlowSnapshot {
                flow: f.flow.id,
                transactions: std::mem::take(&mut f.transactions),
                udp: Some(UdpCounts {
                    ignored: std::mem::take(&mut f.ignored),
                    ..UdpCounts::default()
                }),
                ..FlowSnapshot::default()
            })
            .collect()
    }
}
