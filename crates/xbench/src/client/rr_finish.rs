//! How a request/response test ends on its control connection, once this end has stopped:
//! `Finish`, the server's last intervals and its results, this end's [`Tally`], the server's
//! close. A `--rr` or `--crr` test ([`rr`](super::rr)) and the held flows of a
//! `--connections-only` test ([`conn_only`](super::conn_only)) end the same way; each says
//! in its own words what a missing answer means, so this says only what happened.

use std::future::Future;
use std::time::Duration;

use super::cancel::GiveUp;
use super::session::{Session, send, send_finish};
use crate::proto::{Message, Tally};
use crate::report::{SideRrInterval, SideRrResults};

/// How long the client waits for the server's counts after `Finish`.
pub(crate) const RESULTS_WAIT: Duration = Duration::from_secs(5);

/// How the exchange of [`finish_rr`] ended.
#[derive(Debug)]
pub(crate) enum RrFinish {
    /// The server's results came; this end's tally went out after them.
    Results(SideRrResults),
    /// `Finish` was not sent: why the results will be missing ([`send_finish`]'s words).
    NotSent(String),
    /// The server sent an error instead of its results: its message.
    ServerError(String),
    /// Nothing answered within [`RESULTS_WAIT`].
    TimedOut,
    /// The control connection closed, failed, or carried something other than the results.
    Closed,
    /// The caller gave up (a second Ctrl-C) while waiting for the results.
    GaveUp,
}

/// Sends `Finish` and reads the server's last intervals (each handed to `on_interval` with
/// `counts`) until its results, for at most [`RESULTS_WAIT`] and not after `give_up`. With
/// the results this end sends `tally` of `counts`, for the server to check its own against,
/// then waits for the server to close first ([`Session::await_server_close`]).
///
/// `counts` is passed to both closures, rather than captured, because one of them adds to
/// the figures the other reads. A `give_up` that has already fired, or a connection known to
/// have failed (`open` false), sends nothing.
pub(crate) async fn finish_rr<A, G: Future<Output = ()>>(
    session: &mut Session,
    interrupted: bool,
    open: bool,
    give_up: &mut GiveUp<G>,
    counts: &mut A,
    mut on_interval: impl FnMut(&mut A, SideRrInterval),
    tally: impl FnOnce(&A) -> Tally,
) -> RrFinish {
    if let Err(why) = send_finish(session, interrupted, open && !give_up.fired()).await {
        return RrFinish::NotSent(why);
    }
    let until = tokio::time::Instant::now() + RESULTS_WAIT;
    loop {
        let next = tokio::select! {
            m = tokio::time::timeout_at(until, session.rd.next()) => m,
            () = give_up.wait() => return RrFinish::GaveUp,
        };
        match next {
            Ok(Ok(Some(Message::RrInterval(iv)))) => on_interval(counts, iv),
            Ok(Ok(Some(Message::RrResults(res)))) => {
                // This end has stopped: its counts are final.
                let tally = Message::Tally(tally(counts));
                let _ = send(&mut session.wr, &tally, &session.addr).await;
                if !give_up.fired() {
                    session.await_server_close().await;
                }
                return RrFinish::Results(res);
            }
            Ok(Ok(Some(Message::Error(e)))) => return RrFinish::ServerError(e.message),
            Err(_) => return RrFinish::TimedOut,
            _ => return RrFinish::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::proto::{
        Cookie, ErrorCode, ErrorMsg, Finish, IdCount, MessageReader, write_message,
    };
    use crate::report::{CpuUsage, PeerInfo};

    /// The server's end of a loopback control connection.
    struct Server {
        rd: MessageReader<OwnedReadHalf>,
        wr: OwnedWriteHalf,
    }

    impl Server {
        async fn send(&mut self, m: Message) {
            write_message(&mut self.wr, &m).await.unwrap();
        }

        /// The next message, `None` for nothing within `wait` (or a closed connection).
        async fn next(&mut self, wait: Duration) -> Option<Message> {
            self.rd.next_within(wait).await.ok().flatten()
        }
    }

    /// A session over loopback, as [`Session::open`] leaves it, and the server's end.
    async fn pair() -> (Session, Server) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server_addr = l.local_addr().unwrap();
        let (c, (s, _)) = tokio::try_join!(TcpStream::connect(server_addr), l.accept()).unwrap();
        let client_addr = c.local_addr().unwrap();
        let (rd, wr) = c.into_split();
        let session = Session {
            rd: MessageReader::new(rd),
            wr,
            addr: server_addr.to_string(),
            server: PeerInfo {
                software: "test".into(),
                protocol: crate::proto::PROTOCOL_VERSION,
            },
            server_addr,
            client_addr,
            cookie: Cookie([0; crate::proto::COOKIE_LEN]),
            key: None,
            udp_ports: Vec::new(),
            host: None,
        };
        let (rd, wr) = s.into_split();
        let rd = MessageReader::new(rd);
        (session, Server { rd, wr })
    }

    fn interval(index: u32) -> Message {
        Message::RrInterval(SideRrInterval {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted: false,
            transactions: 1,
            retransmits: 0,
            connections: 0,
        })
    }

    fn results(held_s: f64) -> Message {
        Message::RrResults(SideRrResults {
            flows: Vec::new(),
            measured_retransmits: 0,
            cpu: CpuUsage::default(),
            ignored: 0,
            held_s,
        })
    }

    /// Ends a test against a loopback session, feeding the server's intervals into a list
    /// and tallying how many came; never gives up.
    async fn finish(session: &mut Session, interrupted: bool) -> (RrFinish, Vec<u32>) {
        let mut seen = Vec::new();
        let mut give_up = GiveUp::new(std::future::pending());
        let end = finish_rr(
            session,
            interrupted,
            true,
            &mut give_up,
            &mut seen,
            |seen, iv| seen.push(iv.index),
            |seen| Tally {
                counts: vec![IdCount {
                    id: 0,
                    count: seen.len() as u64,
                }],
            },
        )
        .await;
        (end, seen)
    }

    #[tokio::test]
    async fn intervals_go_to_the_caller_and_the_tally_follows_the_results() {
        let (mut session, mut server) = pair().await;
        let serve = tokio::spawn(async move {
            let finish = server.next(Duration::from_secs(5)).await;
            for m in [interval(0), interval(1), results(0.25)] {
                server.send(m).await;
            }
            let tally = server.next(Duration::from_secs(5)).await;
            // The client must still be there, waiting for this end to close first.
            tokio::time::sleep(Duration::from_millis(300)).await;
            (finish, tally)
        });
        let started = Instant::now();
        let (end, seen) = finish(&mut session, true).await;
        assert!(matches!(end, RrFinish::Results(r) if r.held_s == 0.25));
        assert_eq!(seen, [0, 1]);
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "returned before the server closed: {:?}",
            started.elapsed()
        );
        let (finish, tally) = serve.await.unwrap();
        assert_eq!(finish, Some(Message::Finish(Finish { interrupted: true })));
        // Counted after both intervals.
        let counts = vec![IdCount { id: 0, count: 2 }];
        assert_eq!(tally, Some(Message::Tally(Tally { counts })));
    }

    #[tokio::test]
    async fn an_error_or_a_close_instead_of_the_results_is_told_apart() {
        let (mut session, mut server) = pair().await;
        let serve = tokio::spawn(async move {
            server.next(Duration::from_secs(5)).await;
            server.send(interval(0)).await;
            server
                .send(ErrorMsg::message(ErrorCode::ServerError, "it broke"))
                .await;
            // No tally after an error.
            server.next(Duration::from_millis(300)).await
        });
        let (end, seen) = finish(&mut session, false).await;
        assert!(
            matches!(&end, RrFinish::ServerError(m) if m == "it broke"),
            "{end:?}"
        );
        assert_eq!(seen, [0]);
        drop(session);
        assert_eq!(serve.await.unwrap(), None);

        let (mut session, mut server) = pair().await;
        let serve = tokio::spawn(async move { server.next(Duration::from_secs(5)).await });
        let (end, _) = finish(&mut session, false).await;
        assert!(matches!(end, RrFinish::Closed), "{end:?}");
        let finish = Some(Message::Finish(Finish { interrupted: false }));
        assert_eq!(serve.await.unwrap(), finish);
    }

    #[tokio::test]
    async fn giving_up_stops_the_wait_and_after_it_nothing_is_sent() {
        let (mut session, mut server) = pair().await;
        let mut give_up = GiveUp::new(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
        });
        // The server is silent: only the give-up ends the wait, well before RESULTS_WAIT.
        let started = Instant::now();
        assert!(matches!(
            ignoring(&mut session, &mut give_up, true).await,
            RrFinish::GaveUp
        ));
        assert!(started.elapsed() < Duration::from_secs(2));
        let finish = Some(Message::Finish(Finish { interrupted: false }));
        assert_eq!(server.next(Duration::from_secs(1)).await, finish);
        // Fired: a second finish sends nothing, and says why the results are missing.
        let end = ignoring(&mut session, &mut give_up, true).await;
        assert!(
            matches!(&end, RrFinish::NotSent(why) if why.contains("had failed")),
            "{end:?}"
        );
        assert_eq!(server.next(Duration::from_millis(200)).await, None);
        // As does a connection known to have failed.
        let mut give_up = GiveUp::new(std::future::pending());
        let end = ignoring(&mut session, &mut give_up, false).await;
        assert!(matches!(end, RrFinish::NotSent(_)), "{end:?}");
        assert_eq!(server.next(Duration::from_millis(200)).await, None);
    }

    /// Ends a test whose counts are nothing to anyone.
    async fn ignoring<G: Future<Output = ()>>(
        session: &mut Session,
        give_up: &mut GiveUp<G>,
        open: bool,
    ) -> RrFinish {
        let tally = |_: &()| Tally { counts: Vec::new() };
        finish_rr(session, false, open, give_up, &mut (), |(), _| {}, tally).await
    }
}
