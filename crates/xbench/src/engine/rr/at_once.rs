//! Answering a `--crr` connection on the thread that accepted it, without handing it to a
//! worker: its request came in the greeting's segment, so the accept path can read it, send
//! the response and close, all without waiting (issue 20). Handing it over cost a second
//! thread's wake-up per transaction, and on a small machine the wake-ups, not the work, set
//! the rate. Anything short of the whole exchange (a request still on its way, a response
//! the socket will not take at once) goes to a worker with what was done so far.
//!
//! The figures of connections answered here are kept in atomics per flow, which the first
//! worker adds to its own at every snapshot; so is the CPU time spent here, so the test is
//! still charged for answering its transactions: the thread's time from the end of one answer
//! to the end of the next, so the accept and the wake-up that led to a connection are charged
//! with its exchange. That time is sampled (see [`super::tally`]): read at every answer, the
//! thread's clock would cost a system call of the six an answered connection otherwise makes
//! here.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::tally::FlowTally;
use super::{Control, STOPPED, TcpTrack};

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
    /// CPU time charged: it sends the FIN. `unread` bytes of the connection's greeting are
    /// still on it (the accept path peeked them): the request's read takes them too, one
    /// system call for both; a connection handed on has them taken.
    pub(crate) fn answer(
        &self,
        flow: u16,
        conn: TcpStream,
        control: &Control,
        unread: usize,
    ) -> Outcome {
        let Some(tally) = control.at_once.flow(flow) else {
            return match take_greeting(&conn, unread) {
                true => Outcome::Unfinished(conn, Arrived::default()),
                false => Outcome::Finished,
            };
        };
        if control.state() == STOPPED {
            return Outcome::Finished;
        }
        let sample = control.at_once.sample();
        let start = control.at_once.start(&sample);
        let outcome = self.exchange(conn, control, tally, unread);
        control.at_once.finish(&sample, start);
        outcome
    }

    /// [`Self::answer`]'s exchange; `conn` is closed as this returns, unless handed back.
    fn exchange(
        &self,
        conn: TcpStream,
        control: &Control,
        tally: &FlowTally,
        unread: usize,
    ) -> Outcome {
        // Long on purpose: the --crr accept path; the request's recv, the response's send and
        // the close run in one pass on the accepting thread, with no call boundary between.
        let fd = conn.as_raw_fd();
        let mut token = [0u8; 64];
        // SAFETY: with MSG_TRUNC the kernel discards TCP data without writing to the buffer
        // (tcp(7)); the token buffer is live for the call. Reading the greeting's rest and no
        // more than a request leaves a second one (a client breaking the rules) for the
        // worker to refuse.
        let n = unsafe {
            libc::recv(
                fd,
                token.as_mut_ptr().cast(),
                unread + self.request_len as usize,
                libc::MSG_TRUNC | libc::MSG_DONTWAIT,
            )
        };
        // The greeting's bytes were peeked, so they are there to take: fewer means the
        // connection went away (and one handed on must not carry them).
        if n <= 0 || (n as usize) < unread {
            let e = io::Error::last_os_error();
            if n >= 0 || unread > 0 || e.kind() == io::ErrorKind::ConnectionReset {
                // Gone before asking (as a worker would, close it without a word).
                tally.connections.fetch_add(1, Ordering::Relaxed);
                return Outcome::Finished;
            }
            return Outcome::Unfinished(conn, Arrived::default());
        }
        let rx = (n as usize - unread) as u64;
        if rx == 0 {
            return Outcome::Unfinished(conn, Arrived::default());
        }
        control.activity.fetch_add(1, Ordering::Relaxed);
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

/// Takes the `len` bytes of `conn`'s greeting the accept path peeked and left (see
/// [`Answerer::answer`]); false when they are not all there (the connection went away).
pub(crate) fn take_greeting(conn: &TcpStream, len: usize) -> bool {
    len == 0 || super::discard(conn, len).is_ok_and(|n| n == len)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;
    use crate::engine::rr::tally::Tally;

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
        assert!(matches!(a.answer(1, s, &ctl, 0), Outcome::Finished));
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

    /// The greeting the accept path peeked is taken with the request, in one read; handed
    /// on without a request, the connection has it taken and nothing more.
    #[test]
    fn the_greetings_rest_is_taken_with_the_request() {
        let (mut c, s) = pair();
        let ctl = control(1);
        let a = Answerer::new(14, 20).unwrap();
        c.write_all(&[9u8; 49]).unwrap();
        c.write_all(&[7u8; 14]).unwrap();
        assert!(matches!(a.answer(0, s, &ctl, 49), Outcome::Finished));
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got, vec![0u8; 20]);
        assert_eq!(ctl.at_once.take().0[0].1.transactions, 1);

        let (mut c, s) = pair();
        c.write_all(&[9u8; 49]).unwrap();
        let Outcome::Unfinished(s, arrived) = a.answer(0, s, &ctl, 49) else {
            panic!("answered with no request");
        };
        assert_eq!(arrived, Arrived::default());
        c.write_all(&[7u8; 14]).unwrap();
        let mut req = [0u8; 64];
        let n = (&s).read(&mut req).unwrap();
        assert_eq!(&req[..n], &[7u8; 14], "only the request is left");
        // A flow the tally does not know goes on with its greeting taken too.
        let (mut c, s) = pair();
        c.write_all(&[9u8; 49]).unwrap();
        let Outcome::Unfinished(s, _) = a.answer(7, s, &ctl, 49) else {
            panic!("answered an unknown flow");
        };
        c.write_all(&[7u8; 3]).unwrap();
        let n = (&s).read(&mut req).unwrap();
        assert_eq!(&req[..n], &[7u8; 3]);
    }

    #[test]
    fn a_partial_request_goes_to_a_worker_with_what_was_read() {
        let (mut c, s) = pair();
        let ctl = control(1);
        let a = Answerer::new(14, 14).unwrap();
        c.write_all(&[0u8; 5]).unwrap();
        assert!(matches!(
            a.answer(0, s, &ctl, 0),
            Outcome::Unfinished(_, Arrived { rx: 5, owed: 0 })
        ));
        assert!(ctl.at_once.take().0.is_empty(), "nothing counted yet");
    }

    #[test]
    fn nothing_yet_goes_to_a_worker_and_a_second_request_stays_unread() {
        let (mut c, s) = pair();
        let ctl = control(1);
        let a = Answerer::new(4, 4).unwrap();
        let Outcome::Unfinished(s, arrived) = a.answer(0, s, &ctl, 0) else {
            panic!("answered with no request");
        };
        assert_eq!(arrived, Arrived::default());
        // Kept open past the answer's close, to see what it left unread.
        let kept = s.try_clone().unwrap();
        c.write_all(&[0u8; 8]).unwrap();
        assert!(matches!(a.answer(0, s, &ctl, 0), Outcome::Finished));
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
            a.answer(5, s, &ctl, 0),
            Outcome::Unfinished(_, Arrived { rx: 0, owed: 0 })
        ));
        assert!(Answerer::new(1, MAX_RESPONSE + 1).is_none());
    }

    #[test]
    fn a_stopped_test_answers_nothing() {
        let (mut c, s) = pair();
        let ctl = control(1);
        ctl.state.store(STOPPED, Ordering::Relaxed);
        let a = Answerer::new(1, 1).unwrap();
        c.write_all(&[0u8]).unwrap();
        assert!(matches!(a.answer(0, s, &ctl, 0), Outcome::Finished));
        assert!(ctl.at_once.take().0.is_empty());
    }
}
