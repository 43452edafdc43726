//! The server side of a UDP test, in phases: [`Hellos`] (a socket per stream, each waiting
//! for the client's greeting datagram) → [`Measuring::begin`] (stream threads started, `Ready`
//! sent, the client's `Go` starting our receivers' clock) → [`Measuring::run`] (live intervals
//! until the client's `Finish`) → [`Measuring::finish`] (the grace period for late datagrams,
//! the results, the log line).
//!
//! Each socket takes the first greeting that passes the test's [`Gate`] (the same data greeting
//! and key proof as a TCP data connection) and is then connected to the address it came from:
//! the kernel drops datagrams from anywhere else, and the server sends only there. Nothing is
//! ever sent in answer to a datagram; the client learns that its greetings arrived from `Ready`
//! on the control connection. Not the stream threads (`engine::udp`).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::task::JoinSet;
use tracing::info;

use super::gate::{Claims, Gate, Refusal};
use super::session::SessionEnd;
use super::test::{Idle, Test, TestEnd, log_test, on_control};
use crate::auth::{DataTag, SessionKey};
use crate::config::{StreamDirection, TestSpec, ThroughputSpec};
use crate::control::sleep_until_opt;
use crate::engine::udp::clock::UdpClock;
use crate::engine::udp::sender::SendPlan;
use crate::engine::udp::{self, GRACE, UdpStream, receiver, sender, socket, wire};
use crate::proto::{
    Cookie, DATA_GREETING_LEN, DATA_HELLO_LEN, DataHello, Message, PREAMBLE_LEN, Preamble, Ready,
    StreamLayout,
};
use crate::report::{Role, SideUdpResults, SocketReport};

/// A stream's socket, connected to the client's address, and its greeting's tag.
pub(super) type UdpConn = (u16, UdpSocket, DataTag);

/// A UDP test's sockets, one per stream, before the client's greetings.
pub(super) struct Hellos {
    sockets: Vec<UdpSocket>,
    gate: Arc<Gate>,
}

impl Hellos {
    /// One socket per stream (or `--rr -u` flow), `n` in all, on the address the client
    /// reached us on.
    pub(super) fn bind(
        ctrl: &OwnedWriteHalf,
        n: usize,
        key: Option<SessionKey>,
    ) -> std::io::Result<Self> {
        let local = SocketAddr::new(ctrl.local_addr()?.ip(), 0);
        let sockets = (0..n)
            .map(|_| socket::bind(local))
            .collect::<Result<Vec<_>, _>>()?;
        let gate = Arc::new(Gate::new(key, n as u32, Claims::Once));
        Ok(Hellos { sockets, gate })
    }

    /// The sockets' ports, by stream id.
    pub(super) fn ports(&self) -> Vec<u16> {
        self.sockets
            .iter()
            .map(|s| s.local_addr().map_or(0, |a| a.port()))
            .collect()
    }

    /// Waits for every socket's greeting; each socket comes back connected to its client.
    pub(super) async fn wait(
        self,
        cookie: Cookie,
        peer: SocketAddr,
    ) -> std::io::Result<Vec<UdpConn>> {
        let mut set = JoinSet::new();
        for (id, s) in self.sockets.into_iter().enumerate() {
            s.set_nonblocking(true)?;
            let s = tokio::net::UdpSocket::from_std(s)?;
            set.spawn(hello(s, id as u16, Arc::clone(&self.gate), cookie, peer));
        }
        let mut conns = Vec::new();
        while let Some(r) = set.join_next().await {
            conns.push(r.map_err(std::io::Error::other)??);
        }
        conns.sort_by_key(|c| c.0);
        Ok(conns)
    }
}

/// Reads datagrams on stream `id`'s socket until one is a greeting for it that its gate lets
/// in; everything else is dropped unanswered.
async fn hello(
    sock: tokio::net::UdpSocket,
    id: u16,
    gate: Arc<Gate>,
    cookie: Cookie,
    peer: SocketAddr,
) -> std::io::Result<UdpConn> {
    let mut buf = [0u8; 128];
    // One log line per socket: a flood of forged greetings must not flood the log.
    let mut logged = false;
    loop {
        let (n, from) = sock.recv_from(&mut buf).await?;
        let Some(h) = parse_hello(&buf[..n]) else {
            continue;
        };
        if h.cookie != cookie || h.id != id {
            continue;
        }
        match gate.admit(&h, from) {
            Ok(()) => {
                let s = sock.into_std()?;
                s.set_nonblocking(false)?;
                s.connect(from)?;
                return Ok((id, s, h.tag));
            }
            // The client's own greeting again (it repeats until `Ready`).
            Err(Refusal::Taken { by, .. }) if by == from => {}
            Err(r) if !logged => {
                logged = true;
                info!(%peer, %from, "refused a UDP greeting (later ones are not logged): {r}");
            }
            Err(_) => {}
        }
    }
}

/// A datagram that is a data greeting of this protocol version, decoded.
fn parse_hello(b: &[u8]) -> Option<DataHello> {
    if b.len() != DATA_GREETING_LEN {
        return None;
    }
    let pre = Preamble::decode(b.first_chunk::<PREAMBLE_LEN>()?).ok()?;
    if pre.channel != crate::proto::Channel::Data || pre.version != crate::proto::PROTOCOL_VERSION {
        return None;
    }
    Some(DataHello::decode(b.last_chunk::<DATA_HELLO_LEN>()?))
}

/// Runs an admitted UDP test to its end and reports it.
pub(super) async fn run(t: Test, spec: &TestSpec, tp: &ThroughputSpec) -> SessionEnd {
    let (mut m, early) = match Measuring::begin(t, spec, tp).await {
        Ok(m) => m,
        Err(end) => return end,
    };
    let end = match early {
        Some(end) => end,
        None => m.run(spec).await,
    };
    m.finish(&end, spec).await
}

/// A UDP test whose streams run.
struct Measuring {
    t: Test,
    streams: Vec<UdpStream>,
    clocks: Vec<UdpClock>,
    start: Instant,
}

impl Measuring {
    /// Starts the threads (senders on their clock from now), sends `Ready`, and waits for the
    /// client's `Go` to start the receivers' clock.
    async fn begin(
        mut t: Test,
        spec: &TestSpec,
        tp: &ThroughputSpec,
    ) -> Result<(Self, Option<TestEnd>), SessionEnd> {
        let layout = StreamLayout::new(tp);
        let start = Instant::now();
        let (streams, sockets) = match start_streams(&mut t, spec, tp, layout, start) {
            Ok(s) => s,
            Err(e) => {
                let code = crate::proto::ErrorCode::ServerError;
                return Err(t
                    .abort(code, format!("server could not start a UDP stream: {e}"))
                    .await);
            }
        };
        let ids = |role| {
            streams
                .iter()
                .filter(|s| s.role == role)
                .map(|s| s.id)
                .collect::<Vec<_>>()
        };
        let mut clocks = Vec::new();
        if !ids(Role::Sender).is_empty() {
            clocks.push(UdpClock::new(Role::Sender, start, spec, ids(Role::Sender)));
        }
        let ready = Message::Ready(Ready {
            sockets,
            greetings: t.greetings.clone(),
        });
        if t.send(&ready).await.is_err() {
            return Err(SessionEnd::Other);
        }
        let early = match t.rd.next_within(t.ctx.limits.handshake_timeout).await {
            Ok(Some(Message::Go)) => {
                let receivers = ids(Role::Receiver);
                if !receivers.is_empty() {
                    clocks.push(UdpClock::new(
                        Role::Receiver,
                        Instant::now(),
                        spec,
                        receivers,
                    ));
                }
                None
            }
            other => Some(on_control(other)),
        };
        Ok((
            Measuring {
                t,
                streams,
                clocks,
                start,
            },
            early,
        ))
    }

    /// Sends intervals as the clocks close them until the client's `Finish` or a reason to
    /// stop.
    async fn run(&mut self, spec: &TestSpec) -> TestEnd {
        let hard_stop = self.t.hard_stop(spec, self.start);
        let mut abort = self.t.ctx.abort.clone();
        let idle_limit = self.t.ctx.limits.idle_timeout;
        let mut idle = Idle::new(self.moved());
        let mut idle_tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            let next = self.clocks.iter().filter_map(UdpClock::next_wakeup).min();
            tokio::select! {
                biased;
                msg = self.t.rd.next() => return on_control(msg),
                _ = sleep_until_opt(next) => {
                    if let Err(e) = self.tick(Instant::now()).await {
                        return TestEnd::ClientGone(e);
                    }
                }
                _ = idle_tick.tick() => {
                    if idle.stalled(self.moved(), idle_limit) {
                        return TestEnd::ClientGone(format!("no datagram moved for {idle_limit:?}"));
                    }
                }
                _ = tokio::time::sleep_until(hard_stop.into()) => return TestEnd::Overran,
                () = async { let _ = abort.wait_for(|a| *a).await; } => return TestEnd::ShuttingDown,
            }
        }
    }

    /// Closes what is still open, lets late datagrams in for the grace period, and sends the
    /// results when the client finished the test properly.
    async fn finish(mut self, end: &TestEnd, spec: &TestSpec) -> SessionEnd {
        let finished = matches!(end, TestEnd::Finished { .. });
        if !finished {
            self.t.tell_end(end).await;
        }
        let now = Instant::now();
        let mut ok = finished;
        for c in &mut self.clocks {
            if let Some(iv) = c.cut(now, &self.streams)
                && ok
            {
                ok = self.t.send(&Message::UdpInterval(iv)).await.is_ok();
            }
        }
        udp::stop_role(&self.streams, Role::Sender);
        let grace_until = self
            .clocks
            .iter()
            .filter(|c| c.role == Role::Receiver)
            .map(|c| c.end_mark.max(now) + GRACE)
            .max();
        if finished && let Some(g) = grace_until {
            tokio::time::sleep_until(g.into()).await;
        }
        let batching = udp::batching(&self.streams);
        let (streams, cpu) = udp::collect(&mut self.streams);
        let moved: u64 = streams.iter().map(|s| s.bytes).sum();
        let errors = streams.iter().filter(|s| s.error.is_some()).count();
        if ok {
            let results = SideUdpResults {
                streams,
                cpu,
                batching,
            };
            self.t.send_results(&Message::UdpResults(results)).await;
            let _ = self.t.wr.shutdown().await;
        }
        log_test(
            &self.t,
            spec,
            end,
            moved,
            None,
            self.start.elapsed(),
            errors,
        );
        match end {
            TestEnd::Finished { interrupted: false } => SessionEnd::Completed,
            _ => SessionEnd::Other,
        }
    }

    /// Datagrams moved so far at this end: if it stops growing, nothing moves.
    fn moved(&self) -> u64 {
        self.streams
            .iter()
            .map(|s| s.shared.counts().datagrams)
            .sum()
    }

    async fn tick(&mut self, now: Instant) -> Result<(), String> {
        for c in &mut self.clocks {
            if let Some(iv) = c.on_wakeup(now, &self.streams) {
                self.t.send(&Message::UdpInterval(iv)).await?;
            }
        }
        Ok(())
    }
}

/// A receiver or a sender thread per stream, by the stream's direction.
fn start_streams(
    t: &mut Test,
    spec: &TestSpec,
    tp: &ThroughputSpec,
    layout: StreamLayout,
    start: Instant,
) -> std::io::Result<(Vec<UdpStream>, Vec<SocketReport>)> {
    let u = tp.udp.unwrap_or_default();
    let per_stream = u.bitrate.map(|b| b as f64 / f64::from(tp.streams.get()));
    let length = match spec.end {
        crate::config::EndCondition::Duration(d) => spec.omit.saturating_add(d),
        crate::config::EndCondition::Bytes(_) => Duration::ZERO,
    };
    let mut warnings = Vec::new();
    let (mut streams, mut reports) = (Vec::new(), Vec::new());
    let window = spec.socket.window;
    for (id, sock, tag) in std::mem::take(&mut t.udp) {
        socket::size_buffers(&sock, window, &mut warnings);
        let receives = layout.direction(id) != Some(StreamDirection::ServerToClient);
        if receives {
            socket::prepare_receiver(&sock, window)?;
        }
        reports.push(socket::report(&sock, window));
        let token = wire::token(&tag);
        let s = match layout.direction(id) {
            Some(StreamDirection::ServerToClient) => {
                let plan = SendPlan {
                    token,
                    datagram_len: u.datagram_len,
                    bits_per_second: per_stream,
                    start,
                    measure_from: start + spec.omit,
                    end: start + length,
                };
                sender::spawn(id, sock, plan)?
            }
            _ => receiver::spawn(id, sock, token)?,
        };
        streams.push(s);
    }
    for w in warnings.iter().take(1) {
        info!(peer = %t.peer, "{w}");
    }
    Ok((streams, reports))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Nonce, Psk};

    fn key(psk: &[u8]) -> SessionKey {
        Psk::new(psk.to_vec())
            .unwrap()
            .session_key(&Nonce([1; 32]), &Nonce([2; 32]))
    }

    #[tokio::test]
    async fn only_the_clients_greeting_claims_a_socket_and_no_datagram_is_answered() {
        let (cookie, k) = (Cookie([9; 16]), key(b"the session's own key"));
        let sock = socket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let server = sock.local_addr().unwrap();
        sock.set_nonblocking(true).unwrap();
        let sock = tokio::net::UdpSocket::from_std(sock).unwrap();
        let gate = Arc::new(Gate::new(Some(k.clone()), 2, Claims::Once));
        let waiting = tokio::spawn(hello(sock, 1, gate, cookie, server));
        let stranger = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let forgeries = [
            b"garbage".to_vec(),
            vec![0; 3],
            DataHello::new(Cookie([8; 16]), 1, 0, Some(&k))
                .greeting()
                .to_vec(),
            DataHello::new(cookie, 0, 0, Some(&k)).greeting().to_vec(),
            DataHello::new(cookie, 1, 0, None).greeting().to_vec(),
            DataHello::new(cookie, 1, 0, Some(&key(b"somebody else's key")))
                .greeting()
                .to_vec(),
        ];
        for f in &forgeries {
            stranger.send_to(f, server).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "a forged greeting claimed the socket"
        );
        let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let real = DataHello::new(cookie, 1, 0, Some(&k));
        client.send_to(&real.greeting(), server).await.unwrap();
        let (id, s, tag) = waiting.await.unwrap().unwrap();
        assert_eq!((id, tag), (1, real.tag));
        assert_eq!(s.peer_addr().unwrap(), client.local_addr().unwrap());
        let mut buf = [0u8; 64];
        let answer =
            tokio::time::timeout(Duration::from_millis(200), stranger.recv_from(&mut buf)).await;
        assert!(answer.is_err(), "a stranger got an answer");
    }
}
