//! The server side of a UDP test, in phases: [`Hellos`] (a socket per stream, each waiting
//! for the client's greeting datagram) → [`Measuring::begin`] (stream threads started, `Ready`
//! sent, the client's `Go` starting our receivers' clock) → [`Measuring::run`] (live intervals
//! until the client's `Finish`) → [`Measuring::finish`] (the grace period for late datagrams,
//! the results, the log line).
//!
//! Each socket takes the first greeting that passes the test's [`Gate`] (the same data greeting
//! and key proof as a TCP data connection) from an address `--allow` admits, and is then
//! connected to the address it came from: the kernel drops datagrams from anywhere else, and
//! the server sends only there. A socket the server will send on (`-R`, `--bidir`'s
//! server-to-client streams, `--rr -u`) is the test's only once that address has proven it
//! receives there ([`path::prove`]); before that the server sends it nothing but challenges,
//! each smaller than the greeting that paid for it. The client learns that its sockets are
//! ready from `Ready` on the control connection. Not the stream threads (`engine::udp`).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::task::JoinSet;
use tracing::info;

use super::gate::{Claims, Gate, Refusal};
use super::path::parse_hello;
use super::test::SessionEnd;
use super::test::{IDLE_LOOK, Test, TestEnd, UdpConn, Watchdog, log_test, on_control};
use super::{metrics, path};
use crate::auth::SessionKey;
use crate::config::{StreamDirection, TestSpec, ThroughputSpec};
use crate::control::sleep_until_opt;
use crate::engine::udp::clock::UdpClock;
use crate::engine::udp::sender::SendPlan;
use crate::engine::udp::{self, GRACE, UdpStream, receiver, sender, socket, wire};
use crate::proto::{Cookie, Message, Ready, StreamLayout};
use crate::report::{Role, SideUdpResults, SocketReport};

/// A UDP test's sockets, one per stream, before the client's greetings.
pub(super) struct Hellos {
    sockets: Vec<UdpSocket>,
    /// Per socket: whether the server sends on it, so its address must prove it receives
    /// there first.
    sends: Vec<bool>,
    gate: Arc<Gate>,
    allow: Arc<[IpNet]>,
    progress: Arc<Progress>,
}

impl Hellos {
    /// One socket per stream (or `--rr -u` flow), one per entry of `sends` (whether the server
    /// sends on it), on the address the client reached us on. Only greetings from `allow`
    /// (empty: anywhere) are taken.
    pub(super) fn bind(
        ctrl: &OwnedWriteHalf,
        sends: Vec<bool>,
        key: Option<SessionKey>,
        allow: &[IpNet],
    ) -> std::io::Result<Self> {
        let local = SocketAddr::new(ctrl.local_addr()?.ip(), 0);
        let n = sends.len();
        let sockets = (0..n)
            .map(|_| socket::bind(local))
            .collect::<Result<Vec<_>, _>>()?;
        let gate = Arc::new(Gate::new(key, n as u32, Claims::Once));
        Ok(Hellos {
            sockets,
            sends,
            gate,
            allow: allow.into(),
            progress: Arc::new(Progress::new(n)),
        })
    }

    /// The sockets' ports, by stream id.
    pub(super) fn ports(&self) -> Vec<u16> {
        self.sockets
            .iter()
            .map(|s| s.local_addr().map_or(0, |a| a.port()))
            .collect()
    }

    /// How far the sockets have got, to say why when they do not all get there in time.
    pub(super) fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    /// Waits for every socket's greeting (and, where the server sends, its address's proof);
    /// each socket comes back connected to its client.
    pub(super) async fn wait(
        self,
        cookie: Cookie,
        peer: SocketAddr,
    ) -> std::io::Result<Vec<UdpConn>> {
        let mut set = JoinSet::new();
        for (id, (s, sends)) in self.sockets.into_iter().zip(self.sends).enumerate() {
            s.set_nonblocking(true)?;
            let s = tokio::net::UdpSocket::from_std(s)?;
            let door = Door {
                gate: Arc::clone(&self.gate),
                allow: Arc::clone(&self.allow),
                progress: Arc::clone(&self.progress),
                cookie,
                peer,
            };
            set.spawn(hello(s, id as u16, sends, door));
        }
        let mut conns = Vec::new();
        while let Some(r) = set.join_next().await {
            conns.push(r.map_err(std::io::Error::other)??);
        }
        conns.sort_by_key(|c| c.0);
        Ok(conns)
    }
}

/// Where each of a test's UDP sockets stands, for the message of a test whose sockets did not
/// all get there in time.
#[derive(Debug)]
pub(super) struct Progress {
    stages: Mutex<Vec<Stage>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// No greeting taken yet.
    Waiting,
    /// Greetings came only from this address, outside `--allow`.
    Outside(SocketAddr),
    /// Greeted from this address, which has not answered its challenge.
    Challenged(SocketAddr),
    /// The test's.
    Ready,
}

impl Progress {
    fn new(n: usize) -> Self {
        Progress {
            stages: Mutex::new(vec![Stage::Waiting; n]),
        }
    }

    fn set(&self, id: u16, stage: Stage) {
        let mut stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = stages.get_mut(usize::from(id)) {
            *s = stage;
        }
    }

    /// Notes a greeting refused for its address, unless one was taken already.
    fn outside(&self, id: u16, from: SocketAddr) {
        let mut stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s @ Stage::Waiting) = stages.get_mut(usize::from(id)) {
            *s = Stage::Outside(from);
        }
    }

    /// Why the sockets are not all ready, in words for the client.
    pub(super) fn why_not_ready(&self) -> String {
        let stages = self.stages.lock().unwrap_or_else(PoisonError::into_inner);
        let n = stages.len();
        let waiting = stages.iter().filter(|s| **s == Stage::Waiting).count();
        let challenged: Vec<SocketAddr> = stages
            .iter()
            .filter_map(|s| match s {
                Stage::Challenged(a) => Some(*a),
                _ => None,
            })
            .collect();
        let outside: Vec<SocketAddr> = stages
            .iter()
            .filter_map(|s| match s {
                Stage::Outside(a) => Some(*a),
                _ => None,
            })
            .collect();
        let mut why = Vec::new();
        if let Some(first) = outside.first() {
            why.push(format!(
                "the greetings of {} of {n} UDP sockets came from an address outside this \
                 server's --allow list ({}{}); the server sends UDP only to addresses it allows",
                outside.len(),
                first.ip().to_canonical(),
                if outside.len() > 1 { ", …" } else { "" },
            ));
        }
        if waiting > 0 {
            why.push(format!(
                "the greetings of {waiting} of {n} UDP sockets did not arrive; is something \
                 between client and server dropping UDP?"
            ));
        }
        if let Some(first) = challenged.first() {
            why.push(format!(
                "{} of {n} UDP sockets did not answer the server's return-routability check: \
                 the server's challenge went to the address the greeting came from ({first}{}) \
                 and nothing came back from there. Either UDP from the server does not reach the \
                 client (a firewall or NAT on the way back), or the greetings' source address \
                 was not the client's (rewritten, or forged); the server sends no test data to \
                 an address that has not proven it receives there",
                challenged.len(),
                if challenged.len() > 1 { ", …" } else { "" },
            ));
        }
        if why.is_empty() {
            why.push(format!("the {n} UDP sockets were not ready in time"));
        }
        why.join("; ")
    }
}

/// What every socket of a test checks a greeting against.
struct Door {
    gate: Arc<Gate>,
    allow: Arc<[IpNet]>,
    progress: Arc<Progress>,
    cookie: Cookie,
    /// The control connection's peer, for the log.
    peer: SocketAddr,
}

impl Door {
    fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip))
    }
}

/// Reads datagrams on stream `id`'s socket until one is a greeting for it, from an address
/// `--allow` admits, that its gate lets in; everything else is dropped unanswered. When the
/// server `sends` on the socket, that address must then prove it receives there.
async fn hello(
    sock: tokio::net::UdpSocket,
    id: u16,
    sends: bool,
    door: Door,
) -> std::io::Result<UdpConn> {
    let mut buf = [0u8; 128];
    // One log line per socket: a flood of forged greetings must not flood the log.
    let mut logged = false;
    let peer = door.peer;
    let (h, from, len) = loop {
        let (n, from) = sock.recv_from(&mut buf).await?;
        let Some(h) = parse_hello(&buf[..n]) else {
            continue;
        };
        if h.cookie != door.cookie || h.id != id {
            continue;
        }
        if !door.allows(from.ip()) {
            door.progress.outside(id, from);
            if !logged {
                logged = true;
                info!(%peer, %from, "refused a UDP greeting from outside the --allow list (later ones are not logged)");
            }
            continue;
        }
        match door.gate.admit(&h, from) {
            Ok(()) => break (h, from, n),
            // The client's own greeting again (it repeats until `Ready`).
            Err(Refusal::Taken { by, .. }) if by == from => {}
            Err(r) if !logged => {
                logged = true;
                info!(%peer, %from, "refused a UDP greeting (later ones are not logged): {r}");
            }
            Err(_) => {}
        }
    };
    sock.connect(from).await?;
    if sends {
        door.progress.set(id, Stage::Challenged(from));
        path::prove(&sock, from, &h, len).await?;
    }
    door.progress.set(id, Stage::Ready);
    let s = sock.into_std()?;
    s.set_nonblocking(false)?;
    Ok((id, s, h.tag))
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
        // Scrapes read what the stream threads last published while the test runs; its end
        // records the final figures.
        let shared: Vec<(Role, Arc<udp::Shared>)> = streams
            .iter()
            .map(|s| (s.role, Arc::clone(&s.shared)))
            .collect();
        t.metrics.watch(move || {
            progress(
                shared
                    .iter()
                    .map(|(r, s)| (*r, s.counts()))
                    .map(|(r, c)| (r, c.datagrams, c.bytes)),
            )
        });
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
        let mut watch = Watchdog::new(&self.t.ctx, hard_stop, IDLE_LOOK, self.moved());
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
                w = watch.next() => {
                    let quiet = |l| TestEnd::ClientGone(format!("no datagram moved for {l:?}"));
                    if let Some(end) = watch.ended(w, self.moved(), quiet) {
                        return end;
                    }
                }
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
        self.t.metrics.finish(
            end.metric_name(),
            Some(progress(
                streams.iter().map(|s| (s.role, s.datagrams, s.bytes)),
            )),
        );
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

/// A UDP test's data per direction from its streams' (role, datagrams, bytes).
fn progress(streams: impl Iterator<Item = (Role, u64, u64)>) -> metrics::Progress {
    let mut rx = metrics::Moved::default();
    let mut tx = metrics::Moved::default();
    for (role, datagrams, bytes) in streams {
        let m = if role == Role::Receiver {
            &mut rx
        } else {
            &mut tx
        };
        m.datagrams += datagrams;
        m.bytes += bytes;
    }
    [
        (metrics::Direction::Received, rx),
        (metrics::Direction::Sent, tx),
    ]
    .into_iter()
    .filter(|(_, m)| m.datagrams > 0)
    .map(|(d, m)| (metrics::Transport::Udp, d, m))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Nonce, Psk};
    use crate::proto::DataHello;
    use crate::proto::PathCheck;

    fn key(psk: &[u8]) -> SessionKey {
        Psk::new(psk.to_vec())
            .unwrap()
            .session_key(&Nonce([1; 32]), &Nonce([2; 32]))
    }

    fn door(gate: Arc<Gate>, cookie: Cookie, allow: &[IpNet], n: usize) -> Door {
        Door {
            gate,
            allow: allow.into(),
            progress: Arc::new(Progress::new(n)),
            cookie,
            peer: "127.0.0.1:1".parse().unwrap(),
        }
    }

    fn bound() -> (tokio::net::UdpSocket, SocketAddr) {
        let sock = socket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let at = sock.local_addr().unwrap();
        sock.set_nonblocking(true).unwrap();
        (tokio::net::UdpSocket::from_std(sock).unwrap(), at)
    }

    #[tokio::test]
    async fn only_the_clients_greeting_claims_a_socket_and_no_datagram_is_answered() {
        let (cookie, k) = (Cookie([9; 16]), key(b"the session's own key"));
        let (sock, server) = bound();
        let gate = Arc::new(Gate::new(Some(k.clone()), 2, Claims::Once));
        let waiting = tokio::spawn(hello(sock, 1, false, door(gate, cookie, &[], 2)));
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
        let answer =
            tokio::time::timeout(Duration::from_millis(100), client.recv_from(&mut buf)).await;
        assert!(answer.is_err(), "a receive-only socket sent something");
    }

    /// Issue 30: a greeting whose source is a victim's address (SNAT, a raw socket) made the
    /// server send the victim a whole `-R` test. A socket the server sends on is now the
    /// test's only once its address has echoed the challenge; until then that address gets
    /// challenges alone, fewer bytes than the greetings it was sent.
    #[tokio::test]
    async fn a_sending_socket_is_the_tests_only_once_its_greetings_address_echoes_the_challenge() {
        let cookie = Cookie([5; 16]);
        let (sock, server) = bound();
        let gate = Arc::new(Gate::new(None, 1, Claims::Once));
        let d = door(gate, cookie, &[], 1);
        let progress = Arc::clone(&d.progress);
        let waiting = tokio::spawn(hello(sock, 0, true, d));
        // The "victim": greetings claim the socket with its address, but it never answers.
        let victim = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let greeting = DataHello::new(cookie, 0, 0, None).greeting();
        let mut sent = 0;
        for _ in 0..5 {
            sent += victim.send_to(&greeting, server).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "an unproven address took a sending socket"
        );
        let mut received = 0;
        let mut buf = [0u8; 2048];
        let mut challenge = None;
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), victim.recv(&mut buf)).await
        {
            received += n;
            challenge = PathCheck::decode(&buf[..n]);
            assert!(
                matches!(challenge, Some(PathCheck::Challenge(_))),
                "{:?}",
                &buf[..n]
            );
        }
        assert!(
            received > 0 && received <= sent,
            "sent {sent}, got back {received}"
        );
        assert!(progress.why_not_ready().contains("return-routability"));
        // The address that got the challenge echoes it: the socket is the test's.
        let echo = challenge.unwrap().response().encode();
        victim.send_to(&echo, server).await.unwrap();
        let (id, s, _) = waiting.await.unwrap().unwrap();
        assert_eq!(id, 0);
        assert_eq!(s.peer_addr().unwrap(), victim.local_addr().unwrap());
    }

    #[tokio::test]
    async fn a_greeting_from_outside_the_allow_list_is_not_answered() {
        let cookie = Cookie([6; 16]);
        let (sock, server) = bound();
        let gate = Arc::new(Gate::new(None, 1, Claims::Once));
        let allow: Vec<IpNet> = vec!["127.0.0.2/32".parse().unwrap()];
        let d = door(gate, cookie, &allow, 1);
        let progress = Arc::clone(&d.progress);
        let waiting = tokio::spawn(hello(sock, 0, true, d));
        let outsider = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let greeting = DataHello::new(cookie, 0, 0, None).greeting();
        for _ in 0..3 {
            outsider.send_to(&greeting, server).await.unwrap();
        }
        let mut buf = [0u8; 64];
        let answer =
            tokio::time::timeout(Duration::from_millis(300), outsider.recv(&mut buf)).await;
        assert!(answer.is_err(), "an address outside --allow got an answer");
        assert!(!waiting.is_finished());
        let why = progress.why_not_ready();
        assert!(
            why.contains("--allow") && why.contains("127.0.0.1"),
            "{why}"
        );
        let insider = tokio::net::UdpSocket::bind("127.0.0.2:0").await.unwrap();
        insider.send_to(&greeting, server).await.unwrap();
        let n = insider.recv(&mut buf).await.unwrap();
        let c = PathCheck::decode(&buf[..n]).unwrap();
        insider
            .send_to(&c.response().encode(), server)
            .await
            .unwrap();
        let (_, s, _) = waiting.await.unwrap().unwrap();
        assert_eq!(s.peer_addr().unwrap(), insider.local_addr().unwrap());
    }
}
