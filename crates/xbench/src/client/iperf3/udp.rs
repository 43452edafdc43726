//! A UDP test against an iperf3 server (3.x), from its `CREATE_STREAMS` on: a socket per
//! stream connected to the server's port, opened one at a time as iperf3's server accepts
//! them (a connect datagram, answered, sent again when the answer is late), then iperf3's
//! datagrams sent evenly paced or received and accounted as iperf3 does (`engine::udp::iperf3`),
//! `TEST_END`, the results exchange, and xbench's own UDP report, whose receiver figures for
//! client→server streams are the iperf3 server's.
//!
//! No live intervals (iperf3's server sends none) and no `-n`. Not the parameter exchange
//! ([`super`]). This module prints nothing.

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::steps::{STEP_TIMEOUT, expect_state, iperf3_peer, mid_test_end, shown};
use crate::client::cancel::interruptible;
use crate::client::config::ClientConfig;
use crate::client::event::{ClientEvent, OnEvent};
use crate::client::session::ReportBody;
use crate::config::{EndCondition, StreamDirection, ThroughputSpec};
use crate::engine::udp::iperf3::{
    self as data, CONNECT_MSG, CONNECT_REPLY, Iperf3Counts, Iperf3Stream, OLD_CONNECT_REPLY,
};
use crate::engine::udp::socket;
use crate::error::Error;
use crate::proto::StreamLayout;
use crate::proto::iperf3::{self as wire, Results, State, StreamResult};
use crate::report::{
    CpuReport, CpuUsage, Outcome, Role, SideUdpResults, SideUdpStream, StreamInfo, Summary,
    TestReport, UdpReport,
};
use crate::summary::udp::summarize;

/// How long a stream waits for the answer to its connect datagram before sending it again.
const CONNECT_WAIT: Duration = Duration::from_secs(1);
/// Connect datagrams a stream sends before the test gives up on the server.
const CONNECT_TRIES: u32 = 5;
/// How long our receivers keep reading after `TEST_END` while datagrams still arrive: the
/// server sends until it reads `TEST_END`, and counts what it sent until then.
const DRAIN: Duration = Duration::from_millis(250);

/// An iperf3 control connection that has received `CREATE_STREAMS` for a UDP test.
pub(super) struct Udp {
    pub(super) ctrl: TcpStream,
    pub(super) server_addr: SocketAddr,
    pub(super) client_addr: SocketAddr,
}

/// Runs the UDP test of `config` (`tp.udp` is set) from `CREATE_STREAMS` to `IPERF_DONE`, in
/// iperf3's wire order: the streams opened ([`open`]), `TEST_START` and `TEST_RUNNING`, the
/// senders started, the window measured until the end mark ([`measure`]), `TEST_END`, each
/// stream's counts once it has stopped ([`Counted::collect`]), the results exchanged, and
/// the report ([`report`]).
pub(super) async fn run(
    udp: Udp,
    config: &ClientConfig,
    tp: &ThroughputSpec,
    on_event: OnEvent<'_>,
    cancel: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    // Long on purpose: iperf3's UDP client protocol in its order (sockets, TEST_START,
    // TEST_RUNNING, senders, measure, end, EXCHANGE_RESULTS); each step's locals feed the next.
    tokio::pin!(cancel);
    let Udp {
        mut ctrl,
        server_addr,
        client_addr,
    } = udp;
    let addr = shown(config);
    let spec = &config.spec;
    let u = tp.udp.unwrap_or_default();
    let len = u.datagram_len as usize;
    let mut warnings = Vec::new();
    let ends = (client_addr, server_addr);
    let opened = open(config, tp, ends, cancel.as_mut(), &mut warnings).await?;
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }
    expect_state(&mut ctrl, &addr, State::TestStart, STEP_TIMEOUT).await?;
    expect_state(&mut ctrl, &addr, State::TestRunning, STEP_TIMEOUT).await?;
    let started_at = SystemTime::now();
    let start = Instant::now();
    let d = match spec.end {
        EndCondition::Duration(d) => d,
        EndCondition::Bytes(_) => Duration::ZERO,
    };
    let clock = Clock {
        omit_at: start + spec.omit,
        deadline: start + spec.omit + d,
    };
    let per_stream = u.bitrate.map(|b| b / u64::from(tp.streams.get()));
    let mut streams: Vec<(u16, Role, Iperf3Stream)> = (opened.receivers.into_iter())
        .map(|(id, h)| (id, Role::Receiver, h))
        .collect();
    for (id, sock) in opened.senders {
        let h = data::spawn_sender(sock, len, per_stream, (start, Some(clock.deadline)), false)
            .map_err(|e| Error::io("starting a UDP stream", e))?;
        streams.push((id, Role::Sender, h));
    }
    streams.sort_by_key(|(id, _, _)| *id);
    on_event(ClientEvent::Started {
        server: iperf3_peer(),
        streams: opened.infos.clone(),
    });
    let (mut outcome, base) = measure(
        &mut ctrl,
        &addr,
        &streams,
        clock,
        spec.omit.is_zero(),
        cancel,
    )
    .await;
    // The senders stopped at the end mark on their own, if this comes later.
    let end = Instant::now().min(clock.deadline);
    let window_s = match outcome {
        Outcome::Completed => d.as_secs_f64(),
        _ => end.saturating_duration_since(clock.omit_at).as_secs_f64(),
    };
    let ended = end_window(&mut ctrl, &streams, &outcome).await;
    let counted = Counted::collect(streams);
    let server = match ended {
        true => {
            let ours = counted.results(&base, window_s);
            match exchange_results(&mut ctrl, &addr, &ours).await {
                Ok(r) => Some(theirs(&r, &counted.ids_roles, len)),
                Err(e) => {
                    outcome = Outcome::Failed {
                        error: e.to_string(),
                    };
                    None
                }
            }
        }
        false => None,
    };
    if server.is_none() && outcome != Outcome::Interrupted {
        warnings.push(
            "the iperf3 server's results never arrived: its side's figures are missing".into(),
        );
        let why = format!("the control connection to {addr} failed at the end of the test");
        outcome = crate::client::outcome::without_server_results(
            outcome,
            "its side's figures",
            Some(&why),
        );
    }
    let measured = Measured {
        started_at,
        window_s,
        outcome,
        warnings,
        client: counted.client(&base),
        server,
        receivers: counted.ids_roles.iter().any(|(_, r)| *r == Role::Receiver),
    };
    Ok(report(config, tp, ends, opened.infos, measured))
}

/// The streams, opened and described, the receivers already reading (iperf3's server sends
/// as soon as it says `TEST_RUNNING`), the senders' sockets waiting for it.
struct Opened {
    infos: Vec<StreamInfo>,
    receivers: Vec<(u16, Iperf3Stream)>,
    senders: Vec<(u16, UdpSocket)>,
}

async fn open(
    config: &ClientConfig,
    tp: &ThroughputSpec,
    (client_addr, server_addr): (SocketAddr, SocketAddr),
    cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
    warnings: &mut Vec<String>,
) -> Result<Opened, Error> {
    let len = tp.udp.unwrap_or_default().datagram_len as usize;
    let layout = StreamLayout::new(tp);
    let window = config.spec.socket.window;
    let local = SocketAddr::new(config.bind.unwrap_or(client_addr.ip()), 0);
    let socks = interruptible(
        open_streams(local, server_addr, layout.streams(), window, warnings),
        cancel,
        "opening the UDP streams",
    )
    .await?;
    let mut o = Opened {
        infos: Vec::with_capacity(socks.len()),
        receivers: Vec::new(),
        senders: Vec::new(),
    };
    for ((id, direction), sock) in layout.iter().zip(socks) {
        o.infos.push(StreamInfo {
            id,
            direction,
            client_addr: sock.local_addr().unwrap_or(client_addr),
            server_addr: sock.peer_addr().unwrap_or(server_addr),
            client_socket: socket::report(&sock, window),
            server_socket: crate::client::connect::empty_socket_report(),
        });
        match direction {
            StreamDirection::ServerToClient => o.receivers.push((
                id,
                data::spawn_receiver(sock, len, false)
                    .map_err(|e| Error::io("starting a UDP stream", e))?,
            )),
            StreamDirection::ClientToServer => o.senders.push((id, sock)),
        }
    }
    Ok(o)
}

/// When the `-O` warm-up ends and when the test does.
#[derive(Clone, Copy)]
struct Clock {
    omit_at: Instant,
    deadline: Instant,
}

/// Waits for the end mark, the user or the server, taking the counts at the end of the
/// warm-up (zero without one); returns how the window ended and those counts.
async fn measure(
    ctrl: &mut TcpStream,
    addr: &str,
    streams: &[(u16, Role, Iperf3Stream)],
    clock: Clock,
    mut omitted: bool,
    mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> (Outcome, Vec<Iperf3Counts>) {
    let snapshot =
        || -> Vec<Iperf3Counts> { streams.iter().map(|s| s.2.shared.counts()).collect() };
    let mut base = vec![Iperf3Counts::default(); streams.len()];
    let mut byte = [0u8; 1];
    loop {
        tokio::select! {
            biased;
            () = &mut cancel => return (Outcome::Interrupted, base),
            () = tokio::time::sleep_until(clock.deadline.into()) => return (Outcome::Completed, base),
            () = tokio::time::sleep_until(clock.omit_at.into()), if !omitted => {
                base = snapshot();
                omitted = true;
            }
            r = ctrl.read(&mut byte) => {
                let error = mid_test_end(ctrl, addr, r, byte[0]).await;
                return (Outcome::Failed { error }, base);
            }
        }
    }
}

/// Ends the window on the wire: stops our senders and waits for their threads, then tells
/// the server `TEST_END` (or, after a failure or Ctrl-C, `CLIENT_TERMINATE`), and lets our
/// receivers read what is still on its way ([`drain`]). Whether the test ended as iperf3
/// expects, with its results to come.
async fn end_window(
    ctrl: &mut TcpStream,
    streams: &[(u16, Role, Iperf3Stream)],
    outcome: &Outcome,
) -> bool {
    let senders = || (streams.iter()).filter(|(_, role, _)| *role == Role::Sender);
    for (_, _, h) in senders() {
        h.stop();
    }
    // No datagram of ours may leave after TEST_END: iperf3's server stops counting when it
    // reads it, so a sender thread that a loaded machine ran late would have its last
    // datagrams read as lost (seen: "1 lost, but the kernel dropped only 0"). A sender ends
    // within one send timeout of being told.
    let until = Instant::now() + socket::RECV_TIMEOUT * 2;
    while Instant::now() < until && senders().any(|(_, _, h)| !h.finished()) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let state = match outcome {
        Outcome::Completed => State::TestEnd,
        _ => State::ClientTerminate,
    };
    let ended = *outcome == Outcome::Completed && ctrl.write_all(&[state.byte()]).await.is_ok();
    if ended && streams.iter().any(|s| s.1 == Role::Receiver) {
        drain(streams).await;
    }
    ended
}

/// Each stream's counts once its thread has ended, and the CPU the threads used.
struct Counted {
    ids_roles: Vec<(u16, Role)>,
    at_end: Vec<Iperf3Counts>,
    cpu: CpuUsage,
}

impl Counted {
    /// Stops waiting on each stream's thread, then reads its counts: a sender read before
    /// its last batch went out counted one datagram fewer than iperf3's server got (6,625 of
    /// 6,624 sent).
    fn collect(streams: Vec<(u16, Role, Iperf3Stream)>) -> Self {
        let ids_roles = streams.iter().map(|(id, role, _)| (*id, *role)).collect();
        let mut cpu = CpuUsage::default();
        let mut at_end = Vec::with_capacity(streams.len());
        for (_, _, h) in streams {
            let shared = std::sync::Arc::clone(&h.shared);
            let c = h.join();
            at_end.push(shared.counts());
            cpu.user_s += c.user_s;
            cpu.system_s += c.system_s;
        }
        Counted {
            ids_roles,
            at_end,
            cpu,
        }
    }

    /// Our side's figures over the window (counts since `base`).
    fn client(&self, base: &[Iperf3Counts]) -> SideUdpResults {
        SideUdpResults {
            streams: (self.ids_roles.iter())
                .zip(self.at_end.iter().zip(base))
                .map(|(&(id, role), (c, c0))| ours(id, role, c, c0))
                .collect(),
            cpu: self.cpu,
            batching: "iperf3 datagrams, one per system call".into(),
        }
    }

    /// The results iperf3's server is sent.
    fn results(&self, base: &[Iperf3Counts], window_s: f64) -> Results {
        results(&self.ids_roles, &self.at_end, base, self.cpu, window_s)
    }
}

/// What the window measured, both sides, and how it ended.
struct Measured {
    started_at: SystemTime,
    window_s: f64,
    outcome: Outcome,
    warnings: Vec<String>,
    client: SideUdpResults,
    server: Option<SideUdpResults>,
    /// Some stream received (the server→client ones), so ours read on after `TEST_END`.
    receivers: bool,
}

/// The test's report.
fn report(
    config: &ClientConfig,
    tp: &ThroughputSpec,
    (client_addr, server_addr): (SocketAddr, SocketAddr),
    infos: Vec<StreamInfo>,
    m: Measured,
) -> TestReport {
    let Measured {
        started_at,
        window_s,
        outcome,
        mut warnings,
        client,
        server,
        receivers,
    } = m;
    let layout = StreamLayout::new(tp);
    let bitrate = tp.udp.unwrap_or_default().bitrate;
    let directions = summarize(
        &layout.directions(),
        &client,
        server.as_ref(),
        window_s,
        bitrate,
    );
    warnings.extend(
        directions
            .iter()
            .filter_map(crate::client::udp::slipped_warning),
    );
    let cpu = CpuReport {
        client: client.cpu,
        server: server.as_ref().map(|s| s.cpu),
        client_s_per_gb: per_gb(&client),
        server_s_per_gb: server.as_ref().and_then(per_gb),
        client_us_per_transaction: None,
        server_us_per_transaction: None,
    };
    let body = ReportBody {
        streams: infos,
        intervals: Vec::new(),
        summary: Summary {
            directions: Vec::new(),
            measured_s: window_s,
        },
        rr: None,
        udp: Some(UdpReport {
            client_batching: client.batching.clone(),
            server_batching: server.as_ref().map(|s| s.batching.clone()),
            intervals: Vec::new(),
            directions,
            // iperf3's server stops counting when it reads TEST_END: no grace for its side.
            grace_s: match receivers {
                true => DRAIN.as_secs_f64(),
                false => 0.0,
            },
        }),
        cpu,
        outcome,
        warnings,
    };
    let ends = Some((client_addr, server_addr));
    body.into_report(config, started_at, ends, Some(iperf3_peer()))
}

/// Opens the streams one after another, as iperf3's server accepts them: each socket sends a
/// connect datagram and waits for the answer before the next one is opened.
async fn open_streams(
    local: SocketAddr,
    server: SocketAddr,
    n: usize,
    window: Option<u64>,
    warnings: &mut Vec<String>,
) -> Result<Vec<UdpSocket>, Error> {
    let mut out = Vec::with_capacity(n);
    for id in 0..n {
        let sock = socket::bind(local).map_err(|e| Error::io("opening a UDP socket", e))?;
        let mut w = Vec::new();
        socket::size_buffers(&sock, window, &mut w);
        if window.is_none() {
            let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(socket::DEFAULT_RCVBUF);
        }
        if id == 0 {
            warnings.extend(w);
        }
        sock.connect(server)
            .map_err(|e| Error::io("connecting a UDP socket", e))?;
        let sock = tokio::net::UdpSocket::from_std({
            sock.set_nonblocking(true)
                .map_err(|e| Error::io("opening a UDP socket", e))?;
            sock
        })
        .map_err(|e| Error::io("opening a UDP socket", e))?;
        hello(&sock, server, id).await?;
        let sock = sock
            .into_std()
            .and_then(|s| s.set_nonblocking(false).map(|()| s))
            .map_err(|e| Error::io("opening a UDP socket", e))?;
        out.push(sock);
    }
    Ok(out)
}

/// Sends stream `id`'s connect datagram (iperf3 writes it in its own byte order) until the
/// server answers, [`CONNECT_TRIES`] times at most.
async fn hello(sock: &tokio::net::UdpSocket, server: SocketAddr, id: usize) -> Result<(), Error> {
    let replies = [
        CONNECT_REPLY.to_ne_bytes(),
        CONNECT_REPLY.to_be_bytes(),
        OLD_CONNECT_REPLY.to_ne_bytes(),
        OLD_CONNECT_REPLY.to_be_bytes(),
    ];
    let mut buf = [0u8; 64];
    for _ in 0..CONNECT_TRIES {
        // A refused send (nothing listening yet) is tried again after the wait.
        let _ = sock.send(&CONNECT_MSG.to_ne_bytes()).await;
        let until = tokio::time::Instant::now() + CONNECT_WAIT;
        while let Ok(r) = tokio::time::timeout_at(until, sock.recv(&mut buf)).await {
            match r {
                Ok(4) if replies.iter().any(|b| b[..] == buf[..4]) => return Ok(()),
                Ok(_) => {}
                // ECONNREFUSED from an earlier datagram: wait out the rest of the try.
                Err(_) => tokio::time::sleep_until(until).await,
            }
        }
    }
    Err(Error::DataConnect {
        stream: id as u16,
        addr: server.to_string(),
        cause: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer to {CONNECT_TRIES} UDP connect datagrams, {CONNECT_WAIT:?} apart \
                 (a firewall dropping UDP to the server's port?)"
            ),
        ),
    })
}

/// Waits while our receivers still get datagrams, for [`DRAIN`] at most.
async fn drain(streams: &[(u16, Role, Iperf3Stream)]) {
    let bytes = || -> u64 { streams.iter().map(|s| s.2.shared.bytes()).sum() };
    let until = Instant::now() + DRAIN;
    let mut last = bytes();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = bytes();
        if now == last || Instant::now() >= until {
            return;
        }
        last = now;
    }
}

/// One of our streams over the window: counts at the end less those at `-O`.
fn ours(id: u16, role: Role, c: &Iperf3Counts, c0: &Iperf3Counts) -> SideUdpStream {
    let packets = c.packets.saturating_sub(c0.packets);
    let lost = c.errors.saturating_sub(c0.errors);
    let (datagrams, lost) = match role {
        Role::Sender => (packets, 0),
        // A receiver's packets are its highest sequence number: the lost are among them.
        Role::Receiver => (packets.saturating_sub(lost), lost),
    };
    SideUdpStream {
        stream: id,
        role,
        datagrams,
        bytes: c.bytes.saturating_sub(c0.bytes),
        lost,
        out_of_order: c.out_of_order.saturating_sub(c0.out_of_order),
        duplicates: 0,
        jitter_ms: c.jitter * 1e3,
        rxq_drops: 0,
        slipped: c.slipped.saturating_sub(c0.slipped),
        ignored: c.ignored,
        error: None,
    }
}

/// Our results as iperf3's client sends them: after `-O`, with the warm-up's counts beside.
fn results(
    ids_roles: &[(u16, Role)],
    at_end: &[Iperf3Counts],
    base: &[Iperf3Counts],
    cpu: CpuUsage,
    window_s: f64,
) -> Results {
    let pct = |s: f64| {
        if window_s > 0.0 {
            100.0 * s / window_s
        } else {
            0.0
        }
    };
    let sends = ids_roles.iter().any(|(_, r)| *r == Role::Sender);
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Results {
        cpu_util_total: pct(cpu.total_s()),
        cpu_util_user: pct(cpu.user_s),
        cpu_util_system: pct(cpu.system_s),
        sender_has_retransmits: if sends { 0 } else { -1 },
        streams: ids_roles
            .iter()
            .zip(at_end.iter().zip(base))
            .map(|(&(id, role), (c, c0))| StreamResult {
                id: wire::stream_id(usize::from(id)),
                bytes: c.bytes.saturating_sub(c0.bytes),
                retransmits: -1,
                jitter: if role == Role::Receiver {
                    c.jitter
                } else {
                    0.0
                },
                errors: n(c.errors),
                omitted_errors: n(c0.errors),
                packets: n(c.packets),
                omitted_packets: n(c0.packets),
                start_time: 0.0,
                end_time: window_s,
            })
            .collect(),
        ..Results::default()
    }
}

/// The iperf3 server's results as its side: each stream by iperf3's id, the opposite role to
/// ours; a receiver's datagrams are its highest sequence number less the lost, after `-O`.
/// Either is capped by its bytes in `len`-byte datagrams: iperf3 3.12 counts the warm-up's
/// datagrams in `packets` without saying how many (`omitted_packets` stays 0), its bytes not.
fn theirs(r: &Results, ids_roles: &[(u16, Role)], len: usize) -> SideUdpResults {
    let u = |v: i64| u64::try_from(v).unwrap_or(0);
    let streams = ids_roles
        .iter()
        .filter_map(|&(id, ours)| {
            let s = r
                .streams
                .iter()
                .find(|s| s.id == wire::stream_id(usize::from(id)))?;
            let packets = u(s.packets).saturating_sub(u(s.omitted_packets));
            let lost = u(s.errors).saturating_sub(u(s.omitted_errors));
            let in_bytes = s.bytes / len.max(1) as u64;
            let (role, datagrams, lost) = match ours {
                Role::Sender => (Role::Receiver, packets.saturating_sub(lost), lost),
                Role::Receiver => (Role::Sender, packets, 0),
            };
            let datagrams = datagrams.min(in_bytes);
            Some(SideUdpStream {
                stream: id,
                role,
                datagrams,
                bytes: s.bytes,
                lost,
                out_of_order: 0,
                duplicates: 0,
                jitter_ms: s.jitter * 1e3,
                rxq_drops: 0,
                slipped: 0,
                ignored: 0,
                error: None,
            })
        })
        .collect();
    let secs = r.streams.first().map_or(0.0, |s| s.end_time - s.start_time);
    let cpu_s = |pct: f64| pct / 100.0 * secs.max(0.0);
    SideUdpResults {
        streams,
        cpu: CpuUsage {
            user_s: cpu_s(r.cpu_util_user),
            system_s: cpu_s(r.cpu_util_system),
        },
        batching: "iperf3".into(),
    }
}

fn per_gb(r: &SideUdpResults) -> Option<f64> {
    let bytes: u64 = r.streams.iter().map(|s| s.bytes).sum();
    (bytes > 0).then(|| r.cpu.total_s() / (bytes as f64 / 1e9))
}

/// `EXCHANGE_RESULTS` to `IPERF_DONE`: our results out, the server's in.
async fn exchange_results(
    ctrl: &mut TcpStream,
    addr: &str,
    ours: &Results,
) -> Result<Results, Error> {
    expect_state(ctrl, addr, State::ExchangeResults, STEP_TIMEOUT).await?;
    wire::write_json(ctrl, ours)
        .await
        .map_err(|e| Error::io(format!("writing to {addr}"), e))?;
    let theirs: Results = wire::read_json(ctrl, STEP_TIMEOUT).await.map_err(|e| {
        Error::io(
            format!("reading the iperf3 server's results from {addr}"),
            std::io::Error::other(e),
        )
    })?;
    expect_state(ctrl, addr, State::DisplayResults, STEP_TIMEOUT).await?;
    let _ = ctrl.write_all(&[State::IperfDone.byte()]).await;
    let _ = ctrl.shutdown().await;
    Ok(theirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// iperf3 3.12 counts the warm-up's datagrams in `packets` and leaves `omitted_packets`
    /// at 0: the window's count comes from its bytes, or a receiver gets more than was sent.
    #[test]
    fn iperf3_warm_up_datagrams_are_not_counted_in_the_window() {
        let r = Results {
            streams: vec![StreamResult {
                id: wire::stream_id(0),
                bytes: 100 * 1400,
                packets: 150,
                errors: 2,
                jitter: 0.000_25,
                ..StreamResult::default()
            }],
            ..Results::default()
        };
        let ours_sending = theirs(&r, &[(0, Role::Sender)], 1400);
        let s = &ours_sending.streams[0];
        assert_eq!((s.role, s.datagrams, s.lost), (Role::Receiver, 100, 2));
        assert!((s.jitter_ms - 0.25).abs() < 1e-9);
        let ours_receiving = theirs(&r, &[(0, Role::Receiver)], 1400);
        let s = &ours_receiving.streams[0];
        assert_eq!((s.role, s.datagrams, s.lost), (Role::Sender, 100, 0));
    }

    #[test]
    fn a_receivers_lost_datagrams_are_among_its_highest_sequence_number() {
        let c0 = Iperf3Counts {
            packets: 10,
            errors: 1,
            bytes: 9 * 100,
            ..Iperf3Counts::default()
        };
        let c = Iperf3Counts {
            packets: 110,
            errors: 4,
            bytes: 106 * 100,
            ..Iperf3Counts::default()
        };
        let s = ours(0, Role::Receiver, &c, &c0);
        assert_eq!((s.datagrams, s.lost, s.bytes), (97, 3, 9700));
        let s = ours(0, Role::Sender, &c, &c0);
        assert_eq!((s.datagrams, s.lost), (100, 0));
    }
}
