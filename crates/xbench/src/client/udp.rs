//! The client side of a UDP test, in phases: [`greet`] (a socket per stream, each repeating
//! its data greeting to the server's port until `Ready`) → [`Running::start`] (`Go` sent,
//! stream threads started) → [`Running::run`] (live intervals merged with the server's until
//! the end mark, the user or a failure) → [`Ended::drain`] (`Finish` sent, the grace period
//! for late datagrams, the server's results) → [`Drained::report`].
//!
//! The client opens every socket, whichever way the datagrams flow, so a test works through
//! NAT: the server sends only to the address its greeting came from, once that address has
//! sent back the server's challenge (a return-routability check, [`crate::proto::path`]). Not the stream threads
//! (`engine::udp`) nor the merging arithmetic ([`crate::summary::udp`]).

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::task::JoinSet;

use super::bulk::gave_up_warning;
use super::cancel::{GiveUp, interruptible};
use super::config::ClientConfig;
use super::event::{ClientEvent, OnEvent};
use super::flow_plan::round_robin;
use super::pairing::Pairing;
use super::session::{ReportBody, Session, ended_by, no_results, send, send_finish};
use crate::config::{EndCondition, StreamDirection, ThroughputSpec, UdpSpec};
use crate::control::sleep_until_opt;
use crate::engine::udp::clock::UdpClock;
use crate::engine::udp::sender::SendPlan;
use crate::engine::udp::{self, GRACE, UdpStream, receiver, sender, socket, wire};
use crate::error::Error;
use crate::proto::{DataHello, Message, PathCheck, Ready, StreamLayout};
use crate::report::{
    CpuReport, Outcome, Role, SideUdpInterval, SideUdpResults, StreamInfo, Summary, TestReport,
    UdpDirectionSummary, UdpReport,
};
use crate::summary::{self, Directions};

/// How often a stream repeats its greeting until the server's `Ready` says all arrived.
const HELLO_EVERY: Duration = Duration::from_millis(50);

/// Runs an accepted UDP test and reports it.
pub(super) async fn run(
    mut session: Session,
    config: &ClientConfig,
    tp: &ThroughputSpec,
    on_event: OnEvent<'_>,
    cancel: impl Future<Output = ()>,
    mut give_up: GiveUp<impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    tokio::pin!(cancel);
    let layout = StreamLayout::new(tp);
    let step = greet(&mut session, config, layout.streams());
    let (socks, ready) =
        interruptible(step, cancel.as_mut(), "greeting the server's UDP sockets").await?;
    let running = Running::start(session, config, tp, layout, socks, ready, on_event).await?;
    let ended = running.run(cancel.as_mut(), on_event).await;
    let drained = ended.drain(cancel, &mut give_up, on_event).await;
    Ok(drained.report(on_event))
}

/// Opens a socket per stream towards the server's port for it and sends the stream's greeting
/// from it every [`HELLO_EVERY`] (datagrams get lost) until `Ready` arrives, answering the
/// server's return-routability challenges as they come (the server sends a socket nothing
/// else until its challenge comes back); then checks the greetings the server took are ours.
pub(super) async fn greet(
    session: &mut Session,
    config: &ClientConfig,
    n: usize,
) -> Result<(Vec<(UdpSocket, DataHello)>, Ready), Error> {
    let hellos = session.hellos(n)?;
    if session.udp_ports.len() != n {
        let older = if session.udp_ports.is_empty() {
            " (an xbench server older than this UDP test?)"
        } else {
            ""
        };
        let why = format!(
            "the server offered {} UDP ports for {n} streams{older}",
            session.udp_ports.len()
        );
        return Err(Error::io(
            "starting the UDP test",
            std::io::Error::other(why),
        ));
    }
    // Stream (or flow) i from the i-th address of a -B list, round-robin as TCP's flows; else
    // from the control connection's address.
    let sources = super::connect::sources(config);
    let mut socks = Vec::with_capacity(n);
    for (i, (h, port)) in hellos.iter().zip(&session.udp_ports).enumerate() {
        let from = round_robin(&sources, i).unwrap_or(session.client_addr.ip());
        let local = SocketAddr::new(from, 0);
        let s = socket::bind(local).map_err(|e| Error::io("opening a UDP socket", e))?;
        s.connect(SocketAddr::new(session.server_addr.ip(), *port))
            .map_err(|e| Error::io("connecting a UDP socket", e))?;
        s.set_nonblocking(true)
            .map_err(|e| Error::io("preparing a UDP socket", e))?;
        let s = tokio::net::UdpSocket::from_std(s)
            .map_err(|e| Error::io("preparing a UDP socket", e))?;
        socks.push((Arc::new(s), *h));
    }
    let mut echoes = JoinSet::new();
    for (s, _) in &socks {
        echoes.spawn(answer_challenges(Arc::clone(s)));
    }
    let mut tick = tokio::time::interval(HELLO_EVERY);
    let ready = loop {
        tokio::select! {
            r = session.ready() => break r?,
            _ = tick.tick() => {
                for (s, h) in &socks {
                    // A lost or refused greeting is sent again on the next tick.
                    let _ = s.try_send(&h.greeting());
                }
            }
        }
    };
    echoes.shutdown().await;
    session.check_greetings(&hellos, &ready)?;
    let socks = socks
        .into_iter()
        .map(|(s, h)| {
            // The answering tasks, which shared the socket, are gone.
            let s = Arc::try_unwrap(s)
                .map_err(|_| std::io::Error::other("a UDP socket is still in use"))
                .and_then(|s| s.into_std())
                .and_then(|s| s.set_nonblocking(false).map(|()| s))
                .map_err(|e| Error::io("taking back a UDP socket", e))?;
            Ok((s, h))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok((socks, ready))
}

/// Sends back the token of every return-routability challenge that reaches `sock` (see
/// [`crate::proto::path`]), until something else arrives: the server sends its test data once
/// the socket is proven, which may be before `Ready` reaches us, and that is the stream
/// thread's to read (it skips a late challenge).
async fn answer_challenges(sock: Arc<tokio::net::UdpSocket>) {
    let mut buf = [0u8; 64];
    loop {
        let n = match sock.peek(&mut buf).await {
            Ok(n) => n,
            // An ICMP error for an earlier greeting (the server's socket not open yet, say):
            // go on, without spinning should it repeat.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(c @ PathCheck::Challenge(_)) = PathCheck::decode(&buf[..n]) else {
            return;
        };
        let _ = sock.recv(&mut buf).await;
        // A lost answer is asked for again: the next greeting brings another challenge.
        let _ = sock.send(&c.response().encode()).await;
    }
}

/// A test whose datagrams flow.
struct Running<'c> {
    session: Session,
    config: &'c ClientConfig,
    udp: UdpSpec,
    dirs: Directions,
    infos: Vec<StreamInfo>,
    streams: Vec<UdpStream>,
    clocks: Vec<UdpClock>,
    merger: Pairing<SideUdpInterval>,
    started_at: SystemTime,
    start: Instant,
    warnings: Vec<String>,
}

impl<'c> Running<'c> {
    /// Says `Go` and starts a thread per stream, senders paced from now.
    async fn start(
        mut session: Session,
        config: &'c ClientConfig,
        tp: &ThroughputSpec,
        layout: StreamLayout,
        socks: Vec<(UdpSocket, DataHello)>,
        ready: Ready,
        on_event: OnEvent<'_>,
    ) -> Result<Self, Error> {
        let addr = session.addr.clone();
        let _ = send(&mut session.wr, &Message::Go, &addr).await;
        let (started_at, start) = (SystemTime::now(), Instant::now());
        let udp = tp.udp.unwrap_or_default();
        let spec = &config.spec;
        let mut warnings = Vec::new();
        let mut streams = Vec::with_capacity(socks.len());
        let mut infos = Vec::with_capacity(socks.len());
        let window = spec.socket.window;
        for ((id, direction), (sock, hello)) in layout.iter().zip(socks) {
            socket::size_buffers(&sock, window, &mut warnings);
            let receives = direction == StreamDirection::ServerToClient;
            if receives {
                socket::prepare_receiver(&sock, window)
                    .map_err(|e| Error::io("preparing a UDP receiver", e))?;
            }
            let report = socket::report(&sock, window);
            infos.push(stream_info(&session, &ready, id, direction, &sock, report));
            let token = wire::token(&hello.tag);
            let started = if receives {
                receiver::spawn(id, sock, token)
            } else {
                let plan = send_plan(spec, &udp, tp.streams.get(), token, start);
                sender::spawn(id, sock, plan)
            };
            streams.push(started.map_err(|e| Error::io("starting a UDP stream", e))?);
        }
        for w in &warnings {
            on_event(ClientEvent::Warning(w.clone()));
        }
        on_event(ClientEvent::Started {
            server: session.server.clone(),
            streams: infos.clone(),
        });
        let clocks = [Role::Sender, Role::Receiver]
            .into_iter()
            .filter_map(|role| {
                let ids: Vec<u16> = streams
                    .iter()
                    .filter(|s| s.role == role)
                    .map(|s| s.id)
                    .collect();
                (!ids.is_empty()).then(|| UdpClock::new(role, start, spec, ids))
            })
            .collect();
        let dirs = layout.directions();
        let merger = Pairing::new(dirs.clone());
        Ok(Running {
            session,
            config,
            udp,
            dirs,
            infos,
            streams,
            clocks,
            merger,
            started_at,
            start,
            warnings,
        })
    }

    /// Merges intervals until the end mark, the user (`cancel`) or a failure; then closes the
    /// window and says how long it was.
    async fn run<C: Future<Output = ()>>(
        mut self,
        mut cancel: Pin<&mut C>,
        on_event: OnEvent<'_>,
    ) -> Ended<'c> {
        let spec = &self.config.spec;
        let deadline = self.start + spec.omit + duration(spec.end);
        let mut outcome = Outcome::Completed;
        let mut control_open = true;
        loop {
            let next = self.clocks.iter().filter_map(UdpClock::next_wakeup).min();
            tokio::select! {
                biased;
                () = &mut cancel => { outcome = Outcome::Interrupted; break; }
                _ = tokio::time::sleep_until(deadline.into()) => break,
                msg = self.session.rd.next() => match msg {
                    Ok(Some(Message::UdpInterval(iv))) => self.merger.server(iv, on_event),
                    other => {
                        let (error, usable) = ended_by(other, &self.session.addr);
                        outcome = Outcome::Failed { error };
                        control_open = usable;
                        break;
                    }
                },
                _ = sleep_until_opt(next) => {
                    let now = Instant::now();
                    for c in &mut self.clocks {
                        if let Some(iv) = c.on_wakeup(now, &self.streams) {
                            self.merger.client(iv, on_event);
                        }
                    }
                }
            }
        }
        let now = Instant::now();
        for c in &mut self.clocks {
            if let Some(iv) = c.cut(now, &self.streams) {
                self.merger.client(iv, on_event);
            }
        }
        let window_s = match outcome {
            Outcome::Completed => duration(spec.end).as_secs_f64(),
            _ => now
                .saturating_duration_since(self.start + spec.omit)
                .as_secs_f64(),
        };
        udp::stop_role(&self.streams, Role::Sender);
        Ended {
            running: self,
            outcome,
            window_s,
            control_open,
        }
    }
}

/// A sending stream's schedule: its share of `-b` from `start`, the warm-up, the end mark.
fn send_plan(
    spec: &crate::config::TestSpec,
    u: &UdpSpec,
    streams: u16,
    token: u64,
    start: Instant,
) -> SendPlan {
    SendPlan {
        token,
        datagram_len: u.datagram_len,
        bits_per_second: u.bitrate.map(|b| b as f64 / f64::from(streams)),
        start,
        measure_from: start + spec.omit,
        end: start + spec.omit + duration(spec.end),
    }
}

/// A UDP test's length (its spec is timed; a byte count was refused).
fn duration(end: EndCondition) -> Duration {
    match end {
        EndCondition::Duration(d) => d,
        EndCondition::Bytes(_) => Duration::ZERO,
    }
}

/// How stream `id` is described in the report: its addresses and both ends' sockets.
fn stream_info(
    session: &Session,
    ready: &Ready,
    id: u16,
    direction: StreamDirection,
    sock: &UdpSocket,
    report: crate::report::SocketReport,
) -> StreamInfo {
    StreamInfo {
        id,
        direction,
        client_addr: sock.local_addr().unwrap_or(session.client_addr),
        server_addr: sock.peer_addr().unwrap_or(session.server_addr),
        server_socket: ready
            .sockets
            .get(usize::from(id))
            .cloned()
            .unwrap_or_else(|| report.clone()),
        client_socket: report,
    }
}

/// Past the end mark: the grace period and the server's results are next.
struct Ended<'c> {
    running: Running<'c>,
    outcome: Outcome,
    window_s: f64,
    control_open: bool,
}

impl<'c> Ended<'c> {
    /// Sends `Finish`, keeps our receivers counting for the grace period, and waits (bounded)
    /// for the server's results.
    async fn drain<C: Future<Output = ()>, G: Future<Output = ()>>(
        self,
        mut cancel: Pin<&mut C>,
        give_up: &mut GiveUp<G>,
        on_event: OnEvent<'_>,
    ) -> Drained<'c> {
        let Ended {
            running: mut r,
            mut outcome,
            window_s,
            control_open,
        } = self;
        let interrupted = outcome == Outcome::Interrupted;
        let addr = r.session.addr.clone();
        let mut missing_why = send_finish(&mut r.session, interrupted, control_open)
            .await
            .err();
        let grace_until = Instant::now() + GRACE;
        let results_until = grace_until + r.config.drain_timeout;
        let mut server = None;
        while missing_why.is_none() && server.is_none() {
            tokio::select! {
                msg = r.session.rd.next() => match msg {
                    Ok(Some(Message::UdpInterval(iv))) => r.merger.server(iv, on_event),
                    Ok(Some(Message::UdpResults(res))) => server = Some(res),
                    other => {
                        missing_why = no_results(other, &addr, &mut outcome, &mut r.warnings);
                        break;
                    }
                },
                _ = tokio::time::sleep_until(results_until.into()) => {
                    missing_why = Some(super::outcome::results_timed_out(&addr, GRACE + r.config.drain_timeout));
                    break;
                }
                () = &mut cancel, if !interrupted => { outcome = Outcome::Interrupted; break; }
                () = give_up.wait() => {
                    outcome = Outcome::Interrupted;
                    r.warnings.push(gave_up_warning(server.is_some()));
                    break;
                }
            }
        }
        // The server closes right after its results: let it, so it keeps the TIME_WAIT.
        if server.is_some() && !give_up.fired() {
            r.session.await_server_close().await;
        }
        // Datagrams sent before the end mark count until the grace period is over.
        if !give_up.fired() {
            tokio::time::sleep_until(grace_until.into()).await;
        }
        Drained {
            running: r,
            outcome,
            window_s,
            server,
            missing_why,
        }
    }
}

/// Everything has stopped moving; the report is next.
struct Drained<'c> {
    running: Running<'c>,
    outcome: Outcome,
    window_s: f64,
    server: Option<SideUdpResults>,
    /// Why the server's results did not come (when they did not).
    missing_why: Option<String>,
}

impl Drained<'_> {
    /// Collects the threads and builds the report: intervals, totals over the window, CPU,
    /// and what a user should know.
    fn report(self, on_event: OnEvent<'_>) -> TestReport {
        let Drained {
            running: mut r,
            mut outcome,
            window_s,
            server,
            missing_why,
        } = self;
        let batching = udp::batching(&r.streams);
        let (streams, cpu) = udp::collect(&mut r.streams);
        let client = SideUdpResults {
            streams,
            cpu,
            batching,
        };
        let intervals = r.merger.finish(on_event);
        let directions =
            summary::udp::summarize(&r.dirs, &client, server.as_ref(), window_s, r.udp.bitrate);
        if let Some(e) = overcounted(&directions) {
            outcome = Outcome::Failed { error: e };
        }
        if server.is_none() {
            outcome = super::outcome::without_server_results(
                outcome,
                "the server's side of the figures (what it received of the client→server \
                 streams, what it sent of the server→client ones)",
                missing_why.as_deref(),
            );
        }
        warn(&mut r.warnings, &client, server.as_ref(), &directions);
        let udp_report = UdpReport {
            client_batching: client.batching.clone(),
            server_batching: server.as_ref().map(|s| s.batching.clone()),
            intervals,
            directions,
            grace_s: GRACE.as_secs_f64(),
        };
        let body = ReportBody {
            streams: r.infos,
            intervals: Vec::new(),
            summary: Summary {
                directions: Vec::new(),
                measured_s: window_s,
            },
            rr: None,
            udp: Some(udp_report),
            cpu: cpu_report(&client, server.as_ref()),
            outcome,
            warnings: r.warnings,
        };
        r.session.report(r.config, r.started_at, body)
    }
}

/// A stream whose receiver counted more datagrams than its sender sent: a figure that cannot
/// be true, which fails the test.
fn overcounted(directions: &[UdpDirectionSummary]) -> Option<String> {
    directions.iter().flat_map(|d| &d.per_stream).find_map(|s| {
        let r = s.figures.received?;
        (s.figures.sent.datagrams > 0 && r.count.datagrams > s.figures.sent.datagrams).then(|| {
            format!(
                "stream {}: the receiver counted {} datagrams, more than the {} sent — a \
                 datagram that is not this test's was counted",
                s.stream, r.count.datagrams, s.figures.sent.datagrams
            )
        })
    })
}

/// What a user is told of direction `d`'s senders that fell behind their schedule, if they
/// did (xbench's own UDP test and `--iperf3 -u` alike).
pub(super) fn slipped_warning(d: &UdpDirectionSummary) -> Option<String> {
    let f = &d.figures;
    (f.slipped > 0).then(|| {
        let share = f.slipped as f64 * 100.0 / (f.slipped + f.sent.datagrams) as f64;
        format!(
            "{}: the senders fell behind their schedule (a busy machine or a full socket \
             buffer) and skipped {} of its datagram slots ({share:.2} %) rather than send \
             them in a burst",
            d.direction.label(),
            f.slipped
        )
    })
}

/// Stream errors, missing server figures, a schedule that slipped, kernel drops.
fn warn(
    w: &mut Vec<String>,
    client: &SideUdpResults,
    server: Option<&SideUdpResults>,
    dirs: &[UdpDirectionSummary],
) {
    for s in client
        .streams
        .iter()
        .chain(server.iter().flat_map(|r| &r.streams))
    {
        if let Some(e) = &s.error {
            w.push(format!("stream {} ended with an error: {e}", s.stream));
        }
    }
    if server.is_none() {
        w.push("the server's results never arrived: its side's figures are missing".into());
    }
    for d in dirs {
        let f = &d.figures;
        w.extend(slipped_warning(d));
        if let Some(r) = f.received.filter(|r| r.ignored > 0) {
            w.push(format!(
                "{}: {} datagrams at the receiving sockets were not this test's (too short, or \
                 without the stream's token: stray or forged) and were not counted",
                d.direction.label(),
                r.ignored
            ));
        }
        if let Some(r) = f.received.filter(|r| r.rxq_drops > 0) {
            w.push(format!(
                "{}: the receiving kernel dropped {} packets for a full socket buffer \
                 (SO_RXQ_OVFL; with GRO a packet can be a train of datagrams) — the receiver, \
                 not the network, lost them; a larger -w helps",
                d.direction.label(),
                r.rxq_drops
            ));
        }
    }
}

/// CPU time and what it costs per GB each end moved.
fn cpu_report(client: &SideUdpResults, server: Option<&SideUdpResults>) -> CpuReport {
    let per_gb = |r: &SideUdpResults| {
        let bytes: u64 = r.streams.iter().map(|s| s.bytes).sum();
        (bytes > 0).then(|| r.cpu.total_s() / (bytes as f64 / 1e9))
    };
    CpuReport {
        client: client.cpu,
        server: server.map(|s| s.cpu),
        client_s_per_gb: per_gb(client),
        server_s_per_gb: server.and_then(per_gb),
        client_us_per_transaction: None,
        server_us_per_transaction: None,
    }
}
