//! Answering a `--crr` connection on the thread that accepted it, without handing it to a
//! worker: its request came in the greeting's segment, so the accept path can read it, send
//! the response and close, all without waiting (issue 20). Handing it over cost a second
//! thread's wake-up per transaction, and on a small machine the wake-ups, not the work, set
//! the rate. Anything short of the whole exchange (a request still on its way, a response
//! the socket will not take at once) goes to a worker with what was done so far.
//!
//! The figures of connections answered here are kept in atomics per flow, which the first
//! worker adds to its own at every snapshot; so is the CPU time spent here, so the test is
//! still charged for answering its transactions. That time is sampled (see [`CPU_SAMPLE`]):
//! read around every answer, the thread's clock cost two system calls of the seven an
//! answered connection otherwise makes here.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{Control, STOPPED, TcpTrack};
use crate::engine::cpu::thread_cpu;
use crate::report::CpuUsage;

/// Largest response answered at once: a fresh socket's send buffer takes it whole (the
/// smallest `tcp_wmem` default is 16 KiB). Larger ones go to the workers, which can wait for
/// room.
pub(crate) const MAX_RESPONSE: u64 = 16 * 1024;

/// What the accept path did with a connection before handing it to a worker.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arrived {
    /// Bytes of the request already read.
    pub(crate) rx: u64,
    /// Response bytes still to send; non-zero only when the request was complete, and then
    /// counted here already.
    pub(crate) owed: u64,
}

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
struct FlowTally {
    connections: AtomicU64,
    transactions: AtomicU64,
    retransmits: AtomicU64,
    /// Smoothed RTT of the latest connection closed, µs; 0 for none.
    srtt_us: AtomicU32,
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

    fn flow(&self, flow: u16) -> Option<&FlowTally> {
        self.flows.get(usize::from(flow))
    }

    /// Whether this answer's CPU time is read, and how many answers it stands for.
    fn sample(&self) -> Option<u64> {
        let n = self.answered.fetch_add(1, Ordering::Relaxed);
        match n {
            n if n < CPU_EXACT => Some(1),
            n if n % CPU_SAMPLE == 0 => Some(CPU_SAMPLE),
            _ => None,
        }
    }

    /// Charges the time since `before`, `weight` times (a sampled answer's share).
    fn charge(&self, before: CpuUsage, weight: u64) {
        let after = thread_cpu();
        let ns = |s: f64| (s.max(0.0) * 1e9) as u64 * weight;
        self.user_ns
            .fetch_add(ns(after.user_s - before.user_s), Ordering::Relaxed);
        self.system_ns
            .fetch_add(ns(after.system_s - before.system_s), Ordering::Relaxed);
    }
}

/// The sizes of a test's exchanges, and a response's worth of bytes to send.
#[derive(Debug)]
pub(crate) struct Answerer {
    request_len: u64,
    zeros: Vec<u8>,
}

/// What [`Answerer::answer`] did.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Answered and closed, or closed for good reason: nothing left to do.
    Finished,
    /// The connection, for a worker to carry on from where this left it.
    Unfinished(TcpStream, Arrived),
}

impl Answerer {
    /// An answerer for `request_len`-byte requests and `response_len`-byte responses, if
    /// the response is small enough to answer at once ([`MAX_RESPONSE`]).
    pub(crate) fn new(request_len: u64, response_len: u64) -> Option<Self> {
        (request_len > 0 && response_len > 0 && response_len <= MAX_RESPONSE).then(|| Answerer {
            request_len,
            zeros: vec![0u8; response_len as usize],
        })
    }

    /// Reads `conn`'s request, answers it and closes the connection, as far as that goes
    /// without waiting; counts what it did in `control`'s tally. The close is inside the
    /// CPU time charged: it sends the FIN.
    pub(crate) fn answer(&self, flow: u16, conn: TcpStream, control: &Control) -> Outcome {
        let Some(tally) = control.at_once.flow(flow) else {
            return Outcome::Unfinished(conn, Arrived::default());
        };
        if control.state() == STOPPED {
            return Outcome::Finished;
        }
        let Some(weight) = control.at_once.sample() else {
            return self.exchange(conn, control, tally);
        };
        let cpu = thread_cpu();
        let outcome = self.exchange(conn, control, tally);
        control.at_once.charge(cpu, weight);
        outcome
    }

    /// [`Self::answer`]'s exchange; `conn` is closed as this returns, unless handed back.
    fn exchange(&self, conn: TcpStream, control: &Control, tally: &FlowTally) -> Outcome {
        let fd = conn.as_raw_fd();
        let mut token = [0u8; 64];
        // SAFETY: with MSG_TRUNC the kernel discards TCP data without writing to the buffer
        // (tcp(7)); the token buffer is live for the call. Reading no more than a request
        // leaves a second one (a client breaking the rules) for the worker to refuse.
        let n = unsafe {
            libc::recv(
                fd,
                token.as_mut_ptr().cast(),
                self.request_len as usize,
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            let e = io::Error::last_os_error();
            if n == 0 || e.kind() == io::ErrorKind::ConnectionReset {
                // Gone before asking (as a worker would, close it without a word).
                tally.connections.fetch_add(1, Ordering::Relaxed);
                return Outcome::Finished;
            }
            return Outcome::Unfinished(conn, Arrived::default());
        }
        control.activity.fetch_add(1, Ordering::Relaxed);
        let rx = n as u64;
        if rx < self.request_len {
            return Outcome::Unfinished(conn, Arrived { rx, owed: 0 });
        }
        // Counted before it is answered, so it is counted by the time the client has its
        // response (and may end the test).
        tally.transactions.fetch_add(1, Ordering::Relaxed);
        let len = self.zeros.len();
        if let Some(b) = &control.send_budget {
            b.charge(b.tcp_transaction(self.request_len, true));
            // The accept path never waits: a worker sends the answer when the budget allows.
            if !b.debt().is_zero() {
                return Outcome::Unfinished(
                    conn,
                    Arrived {
                        rx: 0,
                        owed: len as u64,
                    },
                );
            }
        }
        // Read before the response leaves, so that nothing comes between it and the close
        // that follows: the client waits for the FIN, and a FIN sent apart from the
        // response costs it a second wake-up (measured: 10-15 % of the rate on a loaded
        // machine). A connection answered at once has no RTT sample but its handshake's, and
        // no retransmits but its SYN-ACK's, before the response as after it.
        let (retransmits, srtt) = TcpTrack::default().sample(&conn);
        // SAFETY: `zeros` is valid for `len` bytes during the call.
        let sent = unsafe {
            libc::send(
                fd,
                self.zeros.as_ptr().cast(),
                len,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            let e = io::Error::last_os_error();
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                return Outcome::Unfinished(
                    conn,
                    Arrived {
                        rx: 0,
                        owed: len as u64,
                    },
                );
            }
            // Reset or gone: nothing to answer (a worker would close it too).
            tally.connections.fetch_add(1, Ordering::Relaxed);
            return Outcome::Finished;
        }
        if let Some(b) = &control.send_budget {
            b.charge(b.tcp_payload(sent as u64));
        }
        if (sent as usize) < len {
            return Outcome::Unfinished(
                conn,
                Arrived {
                    rx: 0,
                    owed: (len - sent as usize) as u64,
                },
            );
        }
        // Closed as this returns, the server first (the response is queued
        // ahead of the FIN), so TIME_WAIT stays here; the request was read whole, so the
        // close is a FIN, not a reset. No `shutdown` before it: that was a system call more.
        tally.connections.fetch_add(1, Ordering::Relaxed);
        if retransmits > 0 {
            tally.retransmits.fetch_add(retransmits, Ordering::Relaxed);
        }
        if let Some(s) = srtt {
            tally.srtt_us.store(s, Ordering::Relaxed);
        }
        Outcome::Finished
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// A connected pair: (client end, server end, non-blocking as the accept path makes it).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        (c, s)
    }

    fn control(flows: usize) -> Control {
        Control {
            at_once: Tally::new(flows),
            ..Control::default()
        }
    }

    #[test]
    fn a_whole_request_is_answered_counted_and_closed() {
        let (mut c, s) = pair();
        let ctl = control(2);
        let a = Answerer::new(14, 20).unwrap();
        c.write_all(&[7u8; 14]).unwrap();
        // Loopback delivers before write returns.
        assert!(matches!(a.answer(1, s, &ctl), Outcome::Finished));
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got, vec![0u8; 20], "the response, then the server's close");
        let (flows, _) = ctl.at_once.take();
        assert_eq!(flows.len(), 1);
        let (flow, t) = flows[0];
        assert_eq!((flow, t.connections, t.transactions), (1, 1, 1));
        assert!(t.srtt_us.is_some());
        assert!(ctl.at_once.take().0.is_empty(), "taken once");
    }

    #[test]
    fn a_partial_request_goes_to_a_worker_with_what_was_read() {
        let (mut c, s) = pair();
        let ctl = control(1);
        let a = Answerer::new(14, 14).unwrap();
        c.write_all(&[0u8; 5]).unwrap();
        assert!(matches!(
            a.answer(0, s, &ctl),
            Outcome::Unfinished(_, Arrived { rx: 5, owed: 0 })
        ));
        assert!(ctl.at_once.take().0.is_empty(), "nothing counted yet");
    }

    #[test]
    fn nothing_yet_goes_to_a_worker_and_a_second_request_stays_unread() {
        let (mut c, s) = pair();
        let ctl = control(1);
        let a = Answerer::new(4, 4).unwrap();
        let Outcome::Unfinished(s, arrived) = a.answer(0, s, &ctl) else {
            panic!("answered with no request");
        };
        assert_eq!(arrived, Arrived::default());
        // Kept open past the answer's close, to see what it left unread.
        let kept = s.try_clone().unwrap();
        c.write_all(&[0u8; 8]).unwrap();
        assert!(matches!(a.answer(0, s, &ctl), Outcome::Finished));
        let s = kept;
        let mut rest = [0u8; 8];
        // SAFETY: `rest` is writable for its length.
        let left = unsafe {
            libc::recv(
                s.as_raw_fd(),
                rest.as_mut_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT,
            )
        };
        assert_eq!(left, 4, "the second request is left for a worker to refuse");
    }

    #[test]
    fn a_flow_out_of_range_or_a_large_response_is_not_answered_here() {
        let (_c, s) = pair();
        let ctl = control(1);
        let a = Answerer::new(1, 1).unwrap();
        assert!(matches!(
            a.answer(5, s, &ctl),
            Outcome::Unfinished(_, Arrived { rx: 0, owed: 0 })
        ));
        assert!(Answerer::new(1, MAX_RESPONSE + 1).is_none());
    }

    /// Every answer is counted once in the CPU charge: the first 64 read one by one, then one
    /// in 16 standing for 16, so the weights of any whole number of samples add up to the
    /// answers they cover.
    #[test]
    fn the_cpu_samples_stand_for_every_answer() {
        let t = Tally::new(1);
        let weights: Vec<Option<u64>> = (0..64 + 16 * 3).map(|_| t.sample()).collect();
        assert!(weights[..64].iter().all(|w| *w == Some(1)));
        assert_eq!(weights[64], Some(16));
        assert!(weights[65..80].iter().all(Option::is_none));
        assert_eq!(weights.iter().flatten().sum::<u64>(), 64 + 16 * 3);
        assert_eq!(weights.iter().flatten().count(), 64 + 3);
    }

    #[test]
    fn a_stopped_test_answers_nothing() {
        let (mut c, s) = pair();
        let ctl = control(1);
        ctl.state.store(STOPPED, Ordering::Relaxed);
        let a = Answerer::new(1, 1).unwrap();
        c.write_all(&[0u8]).unwrap();
        assert!(matches!(a.answer(0, s, &ctl), Outcome::Finished));
        assert!(ctl.at_once.take().0.is_empty());
    }
}
