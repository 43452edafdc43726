//! Results that check themselves: a figure that cannot be true means bytes or requests that
//! are not the test's were counted (a connection someone else attached with a cookie read off
//! the wire, a bug), and the test must fail rather than report it.
//!
//! Per throughput stream, a receiver never reads more than its sender handed to the kernel,
//! over the whole test, to the byte; inside the measured window, never more than its sender
//! sent inside it (docs/figures.md). Per request/response flow, a server never answers more
//! transactions than its client asked. The client checks with both ends' results; the server
//! with its own and the client's [`Tally`], which the client sends after the server's
//! results. Not for figures that are merely surprising (a low rate, loss): those are warnings
//! in the report.
//!
//! No slack: a sender counts a block as it hands it to the kernel, before the call returns
//! (the engine's stream threads), so a write under way, part of it already read at the
//! other end, cannot put the receiver ahead.

pub mod peer;

use crate::proto::{IdCount, Tally};
use crate::report::{Role, SideResults, Summary};

/// A stream whose receiver counted more bytes than its sender wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overcount {
    /// The stream.
    pub stream: u16,
    /// Bytes its receiver read over the whole test.
    pub received: u64,
    /// Bytes its sender wrote over the whole test.
    pub sent: u64,
}

/// Streams whose receiver read more than their sender wrote: bytes that are not the test's
/// reached the receiver on the stream's connection (a connection someone else attached with
/// the cookie), so no figure of the test can be trusted. Both ends run this check on the
/// same two results.
pub fn overcounted(client: &SideResults, server: &SideResults) -> Vec<Overcount> {
    client
        .streams
        .iter()
        .filter_map(|c| {
            let s = server.streams.iter().find(|s| s.stream == c.stream)?;
            let (sender, receiver) = match c.role {
                Role::Sender => (c, s),
                Role::Receiver => (s, c),
            };
            (receiver.total_bytes > sender.total_bytes).then_some(Overcount {
                stream: c.stream,
                received: receiver.total_bytes,
                sent: sender.total_bytes,
            })
        })
        .collect()
}

/// [`overcounted`] at the server, which has its own results and the client's
/// [`Tally`] of the same streams.
pub fn overcounted_by_tally(server: &SideResults, client: &Tally) -> Vec<Overcount> {
    server
        .streams
        .iter()
        .filter_map(|s| {
            let theirs = client.get(s.stream)?;
            let (received, sent) = match s.role {
                Role::Receiver => (s.total_bytes, theirs),
                Role::Sender => (theirs, s.total_bytes),
            };
            (received > sent).then_some(Overcount {
                stream: s.stream,
                received,
                sent,
            })
        })
        .collect()
}

/// The client's [`Tally`] of a throughput test: each stream's bytes
/// over the whole test.
pub fn tally(client: &SideResults) -> Tally {
    Tally {
        counts: client
            .streams
            .iter()
            .map(|s| IdCount {
                id: s.stream,
                count: s.total_bytes,
            })
            .collect(),
    }
}

/// A stream (or a direction's total, `stream: None`) whose receiver figure inside the
/// measured window exceeds its sender's: a figure that cannot be true, whichever end is wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impossible {
    /// The stream; `None` for a direction's total.
    pub stream: Option<u16>,
    /// What the summary says arrived inside the window, bytes.
    pub received: u64,
    /// What it says was sent inside the window, bytes.
    pub sent: u64,
}

/// The figures of a throughput summary that cannot be true: inside the window a receiver has
/// only what its sender sent inside it ([`crate::summary`] counts a byte in the window only if
/// it was sent in it), per stream and per direction, exactly. Empty for a summary that holds.
pub fn received_over_sent(summary: &Summary) -> Vec<Impossible> {
    let mut out = Vec::new();
    for d in &summary.directions {
        for s in &d.per_stream {
            if let (Some(rx), Some(tx)) = (s.receiver, s.sender)
                && rx.bytes > tx.bytes
            {
                out.push(Impossible {
                    stream: Some(s.stream),
                    received: rx.bytes,
                    sent: tx.bytes,
                });
            }
        }
        if let (Some(rx), Some(tx)) = (d.receiver, d.sender)
            && rx.bytes > tx.bytes
        {
            out.push(Impossible {
                stream: None,
                received: rx.bytes,
                sent: tx.bytes,
            });
        }
    }
    out
}

impl std::fmt::Display for Impossible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.stream {
            Some(id) => format!("stream {id}"),
            None => "a direction's total".to_owned(),
        };
        write!(
            f,
            "{what}: {} received inside the measured window but only {} sent inside it — a \
             figure that cannot be true; the test's figures are not to be trusted",
            crate::units::ByteSize(self.received),
            crate::units::ByteSize(self.sent)
        )
    }
}

impl std::fmt::Display for Overcount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stream {}: its receiver read {} but its sender wrote only {} — a connection that is \
             not this test's client's carried data on this stream (someone who read the test's \
             cookie on the path); the figures are not this test's. Authenticate the data \
             connections with --psk-file on both ends",
            self.stream,
            crate::units::ByteSize(self.received),
            crate::units::ByteSize(self.sent)
        )
    }
}

/// A request/response flow whose server answered more transactions than its client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unasked {
    /// The flow.
    pub flow: u16,
    /// Transactions the server answered over the whole test.
    pub answered: u64,
    /// The most the client can have asked: those it completed, and those in flight at the end.
    pub asked: u64,
}

/// The first flow whose server answered more than its client asked: `answered` is the
/// server's `(flow, transactions)`, `completed` the client's [`Tally`]. Up to `in_flight`
/// requests per flow may be under way when the test ends (the burst; one with `--crr`), which
/// the server answers and the client no longer counts.
pub fn answered_unasked(
    answered: impl IntoIterator<Item = (u16, u64)>,
    completed: &Tally,
    in_flight: u64,
) -> Option<Unasked> {
    answered.into_iter().find_map(|(flow, answered)| {
        let asked = completed.get(flow)?.saturating_add(in_flight);
        (answered > asked).then_some(Unasked {
            flow,
            answered,
            asked,
        })
    })
}

impl std::fmt::Display for Unasked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "flow {}: the server answered {} transactions, the client asked at most {} — \
             connections that are not the client's carried requests on this flow (someone who \
             read the test's cookie on the path); the figures are not this test's. \
             Authenticate the data connections with --psk-file on both ends",
            self.flow, self.answered, self.asked
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{AfterEnd, CpuUsage, SideStreamResult, Transfer};

    fn stream(stream: u16, role: Role, total: u64) -> SideStreamResult {
        SideStreamResult {
            stream,
            role,
            transfer: Transfer::new(total, 1.0),
            total_bytes: total,
            omitted_bytes: 0,
            tcp: None,
            after_end: AfterEnd::default(),
            error: None,
            thread: None,
            receive_queue: None,
        }
    }

    fn side(streams: Vec<SideStreamResult>) -> SideResults {
        SideResults {
            streams,
            cpu: CpuUsage::default(),
        }
    }

    /// Issue 14's probe: the server counted 7.71 GiB on a stream its client sent 6 MiB on.
    #[test]
    fn a_receiver_that_read_more_than_its_sender_wrote_is_named_at_both_ends() {
        let client = side(vec![
            stream(0, Role::Sender, 6 << 20),
            stream(1, Role::Receiver, 1000),
        ]);
        let server = side(vec![
            stream(0, Role::Receiver, 8_280_000_000),
            stream(1, Role::Sender, 1000),
        ]);
        let over = overcounted(&client, &server);
        assert_eq!(
            over,
            [Overcount {
                stream: 0,
                received: 8_280_000_000,
                sent: 6 << 20
            }]
        );
        assert_eq!(overcounted_by_tally(&server, &tally(&client)), over);
        let text = over[0].to_string();
        assert!(
            text.starts_with("stream 0: its receiver read 7.71 GiB"),
            "{text}"
        );
        assert!(text.contains("--psk-file"), "{text}");
    }

    /// Issue 30: one byte more than the sender handed over is already impossible; there is
    /// no block of slack.
    #[test]
    fn a_receiver_one_byte_ahead_of_its_sender_is_named() {
        let client = side(vec![stream(0, Role::Receiver, 10_000 + 1)]);
        let server = side(vec![stream(0, Role::Sender, 10_000)]);
        assert_eq!(overcounted(&client, &server).len(), 1);
        assert_eq!(overcounted_by_tally(&server, &tally(&client)).len(), 1);
        let even = side(vec![stream(0, Role::Receiver, 10_000)]);
        assert!(overcounted(&even, &server).is_empty());
        // A stream one end does not know (a tally that lost a stream) is not judged.
        let other = side(vec![stream(5, Role::Sender, 1)]);
        assert!(overcounted(&client, &other).is_empty());
        assert!(overcounted_by_tally(&other, &tally(&client)).is_empty());
    }

    #[test]
    fn a_summary_receiving_more_inside_the_window_than_was_sent_is_named() {
        use crate::config::StreamDirection;
        use crate::summary::{Directions, Window, summarize};
        let dirs: Directions = [(0, StreamDirection::ClientToServer)].into();
        // The receiver read 100 bytes more by its end mark than the sender had sent by its
        // own: the summary counts those after the end, and holds.
        let mut sent = stream(0, Role::Sender, 10_000);
        sent.after_end.sent_bytes = 1_000;
        sent.transfer = Transfer::new(9_000, 1.0);
        let read = stream(0, Role::Receiver, 9_100);
        let client = side(vec![sent]);
        let server = side(vec![read]);
        let summary = summarize(&dirs, &client, Some(&server), Window::Fixed(1.0));
        assert!(received_over_sent(&summary).is_empty(), "{summary:?}");
        let d = &summary.directions[0];
        assert_eq!(d.receiver.unwrap().bytes, 9_000);
        assert_eq!(d.after_end.bytes, 100);
        // A summary that says otherwise is named, stream and total.
        let mut bad = summary.clone();
        bad.directions[0].per_stream[0].receiver = Some(Transfer::new(9_001, 1.0));
        bad.directions[0].receiver = Some(Transfer::new(9_001, 1.0));
        let found = received_over_sent(&bad);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            (found[0].stream, found[0].received, found[0].sent),
            (Some(0), 9_001, 9_000)
        );
        assert!(found[1].to_string().contains("cannot be true"));
    }

    #[test]
    fn a_server_that_answered_more_than_was_asked_is_named() {
        let completed = Tally {
            counts: vec![IdCount { id: 0, count: 3098 }, IdCount { id: 1, count: 10 }],
        };
        // Issue 14's probe: 6,800 answered on flow 0, 3,098 completed by the client.
        let u = answered_unasked([(1, 10), (0, 6800)], &completed, 1).unwrap();
        assert_eq!((u.flow, u.answered, u.asked), (0, 6800, 3099));
        assert!(
            u.to_string()
                .starts_with("flow 0: the server answered 6800")
        );
        // Requests in flight at the end are answered and not completed: up to the burst.
        assert_eq!(answered_unasked([(0, 3098 + 4)], &completed, 4), None);
        assert!(answered_unasked([(0, 3098 + 5)], &completed, 4).is_some());
    }
}
