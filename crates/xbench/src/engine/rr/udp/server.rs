//! UDP server workers (`--rr -u`): answer each of the test's requests with one response.
//!
//! A datagram is answered only when it is exactly a request of the test (the test's request
//! length, the flow's token, a sequence number not answered before: [`ReplayWindow`]), on a
//! socket connected to the address that proved it holds the test's cookie, so the kernel drops
//! datagrams from anywhere else. Work per datagram is one `recv` of its header and at most one
//! `send`; anything else is counted as ignored and dropped.
//!
//! The worker's loop is [`serve`]'s; what is UDP's is here ([`UdpServe`]).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::super::poll::{Event, Interest, worker_poll};
use super::super::serve::{self, Core, ServeIo, Step};
use super::super::{Control, FlowSnapshot, Report, UdpCounts, Worker};
use super::{Arrival, ReplayWindow, UdpFlow, recv_header, send};
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
    let io = UdpServe {
        plan,
        flows: state,
        response,
    };
    serve::spawn(
        format!("xb-rr-udp-server-{index}"),
        Core::new(index, (poll, waker), control, tx),
        io,
        None,
    )
}

/// One flow's socket, the requests it has answered, and its counts since the last snapshot.
struct Flow {
    flow: UdpFlow,
    window: ReplayWindow,
    /// Requests answered since the last snapshot.
    transactions: u64,
    /// Datagrams ignored since the last snapshot.
    ignored: u64,
}

/// UDP's side of a server worker: its flows' sockets, and what answering a datagram is.
struct UdpServe {
    plan: Plan,
    flows: Vec<Flow>,
    /// A response: the request's header, then zeros.
    response: Vec<u8>,
}

impl ServeIo for UdpServe {
    const LOOP_FAILED: &'static str = "event loop failed";

    /// One flow: a blocking `recv` per request, no epoll round.
    fn blocking(&self) -> bool {
        self.flows.len() == 1
    }

    /// The sockets block already (with a [`SLICE`] timeout); the epoll path reads with
    /// `MSG_DONTWAIT`.
    fn enter_blocking(&mut self) -> bool {
        true
    }

    /// A failed socket ends the worker: it has no other flow to serve.
    #[inline]
    fn blocking_step(&mut self, core: &mut Core) -> Step {
        match self.answer(core, 0, 0) {
            Ok(()) => Step::Served,
            Err(e) => {
                self.failed(core, 0, &e);
                Step::Quit
            }
        }
    }

    fn leave_blocking(&mut self) {}

    /// The epoll wait looks at its controls every [`SLICE`] at least.
    #[inline]
    fn deadline(&self) -> Option<Instant> {
        Some(Instant::now() + SLICE)
    }

    #[inline]
    fn on_event(&mut self, core: &mut Core, ev: &Event) {
        if let Some(i) = usize::try_from(ev.token)
            .ok()
            .filter(|&i| i < self.flows.len())
            && let Err(e) = self.answer(core, i, libc::MSG_DONTWAIT)
        {
            self.failed(core, i, &e);
        }
    }

    fn snapshots(&mut self, _core: &Core) -> Vec<FlowSnapshot> {
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

impl UdpServe {
    /// Answers what is waiting on flow `i`: every datagram with `MSG_DONTWAIT`, one (waiting
    /// up to [`SLICE`] for it) without.
    fn answer(&mut self, core: &mut Core, i: usize, flags: i32) -> io::Result<()> {
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
            core.control.activity.fetch_add(1, Ordering::Relaxed);
            let ok = header.filter(|h| len == want && h.token == f.flow.token);
            match ok {
                Some(h) if f.window.admit(h.seq) => {
                    if !core.paced(self) {
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
                    if let Some(b) = &core.control.send_budget {
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

    /// Takes flow `i`'s socket out of the epoll set and fails the flow with `e`.
    fn failed(&mut self, core: &mut Core, i: usize, e: &io::Error) {
        let flow = self.flows[i].flow.id;
        core.poll.delete(self.flows[i].flow.sock.as_raw_fd());
        core.failed(Some(flow), format!("UDP socket failed: {e}"));
    }
}
