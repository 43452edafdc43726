//! The TCP test against an iperf3 server from `CREATE_STREAMS` to `IPERF_DONE`: the data
//! connections opened one by one (iperf3's server gives them roles in the order they
//! arrive), the window measured by xbench's own stream threads and sampler, `TEST_END`, the
//! results exchange held to what can be true, and a [`TestReport`] whose receiver figures
//! for client→server streams are the iperf3 server's.
//!
//! iperf3 has no live intervals from the server and no drain after the end (its server closes
//! the data connections at `TEST_END`). This module prints nothing.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::check;
use crate::client::cancel::interruptible;
use crate::client::config::ClientConfig;
use crate::client::connect::connect_one;
use crate::client::event::{ClientEvent, OnEvent};
use crate::client::flow_plan::round_robin;
use crate::client::session::ReportBody;
use crate::client::tcp_streams;
use crate::config::{EndCondition, StreamDirection, ThroughputSpec};
use crate::control::sleep_until_opt;
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::stream::SendMode;
use crate::error::Error;
use crate::proto::StreamLayout;
use crate::proto::iperf3::{self as wire, COOKIE_LEN, Results, State, StreamResult};
use crate::report::{
    CpuUsage, Outcome, Role, SideResults, SideStreamResult, SocketReport, TestReport, Transfer,
};
use crate::summary::{self, Window};

use super::steps::{STEP_TIMEOUT, expect_state, iperf3_peer, mid_test_end, shown};

/// The TCP test from `CREATE_STREAMS` to `IPERF_DONE`, in iperf3's wire order: the data
/// connections, `TEST_START` and `TEST_RUNNING`, the window ([`measure`]), `TEST_END`, the
/// results exchanged and held to what can be true ([`judge`]), the report.
pub(super) async fn run(
    mut ctrl: TcpStream,
    cookie: &[u8; COOKIE_LEN],
    (client_addr, server_addr): (SocketAddr, SocketAddr),
    config: &ClientConfig,
    tp: &ThroughputSpec,
    on_event: OnEvent<'_>,
    mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Result<TestReport, Error> {
    // Long on purpose: iperf3's client protocol in its order (data connections, TEST_START,
    // TEST_RUNNING, measure, TEST_END, EXCHANGE_RESULTS, judge); each step's locals feed the next.
    let addr = shown(config);
    let layout = StreamLayout::new(tp);
    let mut warnings = Vec::new();
    let data = interruptible(
        open_data(config, server_addr, cookie, layout.streams(), &mut warnings),
        cancel.as_mut(),
        "opening the data connections",
    )
    .await?;
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }
    expect_state(&mut ctrl, &addr, State::TestStart, STEP_TIMEOUT).await?;
    expect_state(&mut ctrl, &addr, State::TestRunning, STEP_TIMEOUT).await?;
    let started_at = SystemTime::now();
    let start = Instant::now();
    // iperf3's own sockets: no sendfile (its -Z is not asked of it) and no server socket
    // report.
    let ends = (client_addr, server_addr);
    let (group, infos) = tcp_streams::start(
        config.spec.end,
        tp,
        SendMode::Copy,
        (layout, data),
        ends,
        &[],
    )?;
    on_event(ClientEvent::Started {
        server: iperf3_peer(),
        streams: infos.clone(),
    });
    let dirs = layout.directions();
    let mut sampler = Sampler::new(start, Schedule::for_spec(&config.spec), group.handles());
    let mut intervals = Vec::new();
    let mut emit = |iv| {
        if let Some(iv) = summary::merge_interval(&dirs, Some(&iv), &[]) {
            on_event(ClientEvent::Interval(iv.clone()));
            intervals.push(iv);
        }
    };
    let running = (&group, start);
    let mut outcome = measure(
        &mut ctrl,
        &addr,
        config,
        running,
        &mut sampler,
        &mut emit,
        cancel,
    )
    .await;
    let end = Instant::now();
    for iv in sampler.cut(end) {
        emit(iv);
    }
    let spec = &config.spec;
    let window = match (spec.end, &outcome) {
        // The window our counts cover: the end mark read when the runtime woke, on a busy
        // machine a little after the asked duration (iperf3's own client divides by its
        // elapsed time too). iperf3's server reports no clock of its own to divide its
        // figures by, so both ends' share ours.
        (EndCondition::Duration(_), Outcome::Completed) => Window::Fixed(
            end.saturating_duration_since(sampler.window_start())
                .as_secs_f64(),
        ),
        _ => Window::Fixed(
            end.saturating_duration_since(start + spec.omit)
                .as_secs_f64(),
        ),
    };
    group.stop_senders();
    let state = match outcome {
        Outcome::Completed => State::TestEnd,
        _ => State::ClientTerminate,
    };
    let ended = outcome == Outcome::Completed && ctrl.write_all(&[state.byte()]).await.is_ok();
    let ends = group.collect(Duration::from_secs(2)).await;
    let (_, client) = sampler.finish(Instant::now(), &ends);
    let server = match ended {
        true => match exchange_results(&mut ctrl, &addr, &client, &layout, window).await {
            Ok(r) => Some(r),
            Err(e) => {
                outcome = Outcome::Failed {
                    error: e.to_string(),
                };
                None
            }
        },
        false => None,
    };
    let ours = (&client, &layout, window);
    let server = judge(server, ours, config, start, &mut outcome, &mut warnings);
    let summary = summary::summarize(&dirs, &client, server.as_ref(), window);
    let cpu = summary::cpu_report(&client, server.as_ref());
    let body = ReportBody {
        streams: infos,
        intervals,
        summary,
        rr: None,
        udp: None,
        cpu,
        outcome,
        warnings,
    };
    let ends = Some((client_addr, server_addr));
    Ok(body.into_report(config, started_at, ends, Some(iperf3_peer())))
}

/// Samples intervals until the end mark (the last byte counted out, for `-n`), the user or
/// the server ends the window; returns how it ended. After a byte count, waits (up to the
/// drain timeout) for what our senders queued to reach the server, which stops counting at
/// `TEST_END`: the window of a byte count ends with its delivery.
async fn measure(
    ctrl: &mut TcpStream,
    addr: &str,
    config: &ClientConfig,
    (group, start): (&Group, Instant),
    sampler: &mut Sampler,
    emit: &mut impl FnMut(crate::report::SideInterval),
    mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Outcome {
    let spec = &config.spec;
    let deadline = match spec.end {
        EndCondition::Duration(d) => Some(start + spec.omit + d),
        EndCondition::Bytes(_) => None,
    };
    let mut outcome = Outcome::Completed;
    let mut poll = tokio::time::interval(Duration::from_millis(5));
    let mut byte = [0u8; 1];
    loop {
        tokio::select! {
            biased;
            () = &mut cancel => { outcome = Outcome::Interrupted; break; }
            _ = sleep_until_opt(deadline) => break,
            _ = poll.tick(), if deadline.is_none() => {
                if let EndCondition::Bytes(n) = spec.end && counted_out(group, n) {
                    break;
                }
            }
            r = ctrl.read(&mut byte) => {
                outcome = Outcome::Failed { error: mid_test_end(ctrl, addr, r, byte[0]).await };
                break;
            }
            _ = sleep_until_opt(sampler.next_wakeup()) => {
                if let Some(iv) = sampler.on_wakeup(Instant::now()) {
                    emit(iv);
                }
            }
        }
    }
    if let (EndCondition::Bytes(_), Outcome::Completed) = (spec.end, &outcome) {
        let until = Instant::now() + config.drain_timeout;
        while Instant::now() < until && unsent(group) > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    outcome
}

/// The server's side from its results, when they arrived and can be true: a peer that
/// reports what cannot be true has none of its figures used, and the test fails saying so;
/// results that never arrived fail it too (unless the user had stopped it).
fn judge(
    server: Option<Results>,
    (client, layout, window): (&SideResults, &StreamLayout, Window),
    config: &ClientConfig,
    start: Instant,
    outcome: &mut Outcome,
    warnings: &mut Vec<String>,
) -> Option<SideResults> {
    let addr = shown(config);
    let elapsed = start.elapsed().as_secs_f64();
    let (server, impossible) =
        match server.map(|r| (impossible(&r, client, layout, &config.spec, elapsed), r)) {
            Some((None, r)) => (Some(r), None),
            Some((Some(e), _)) => (None, Some(e)),
            None => (None, None),
        };
    let server = server.map(|r| server_side(&r, client, layout, window));
    if let Some(e) = impossible {
        warnings.push(format!(
            "the iperf3 server's results cannot be true, so none of its figures are used: {e}"
        ));
        *outcome = Outcome::Failed {
            error: format!("the iperf3 server's results cannot be true: {e}"),
        };
    } else if server.is_none() && *outcome != Outcome::Interrupted {
        warnings.push("the iperf3 server's results never arrived: the receiver figures of the client→server streams are missing".into());
        let why = format!("the control connection to {addr} failed at the end of the test");
        *outcome = crate::client::outcome::without_server_results(
            outcome.clone(),
            "the receiver figures of the client→server streams",
            Some(&why),
        );
    }
    server
}

/// The first figure of an iperf3 server's results that cannot be true, held to our own
/// counters and to what TCP and a machine allow ([`check::peer`]): bytes its receivers read
/// against what we handed over, bytes its senders wrote against what we read, its CPU and its
/// streams' spans against the `elapsed` seconds we watched.
fn impossible(
    r: &Results,
    client: &SideResults,
    layout: &StreamLayout,
    spec: &crate::config::TestSpec,
    elapsed: f64,
) -> Option<check::peer::Impossible> {
    let cpu = [
        ("total", r.cpu_util_total),
        ("user", r.cpu_util_user),
        ("system", r.cpu_util_system),
    ];
    for (what, pct) in cpu {
        if let Err(e) = check::peer::cpu(what, pct) {
            return Some(e);
        }
    }
    for (id, direction) in layout.iter() {
        let Some(theirs) = r
            .streams
            .iter()
            .find(|s| s.id == wire::stream_id(usize::from(id)))
        else {
            continue;
        };
        let Some(ours) = client.streams.iter().find(|s| s.stream == id) else {
            continue;
        };
        let span = theirs.end_time - theirs.start_time;
        let checked = check::peer::seconds("stream's span", span, elapsed).and_then(|()| {
            match direction {
                // Its count is after its warm-up, ours of what we handed over is all of it:
                // where its warm-up ended in our bytes is not ours to know (`received`).
                StreamDirection::ClientToServer => {
                    check::peer::received(id, theirs.bytes, ours.total_bytes)
                }
                StreamDirection::ServerToClient => check::peer::sent(
                    id,
                    theirs.bytes,
                    ours.total_bytes.saturating_sub(ours.omitted_bytes),
                    !spec.omit.is_zero(),
                ),
            }
        });
        if let Err(e) = checked {
            return Some(e);
        }
    }
    None
}

/// Opens the data connections one after another, each greeting with the cookie: iperf3's
/// server takes the first ones it accepts as its receivers.
async fn open_data(
    config: &ClientConfig,
    server: SocketAddr,
    cookie: &[u8; COOKIE_LEN],
    n: usize,
    warnings: &mut Vec<String>,
) -> Result<Vec<(std::net::TcpStream, SocketReport)>, Error> {
    // Stream i from the i-th address of a -B list, round-robin as xbench's own streams: an
    // iperf3 server matches a data connection to its test by the cookie, not the address.
    let sources = crate::client::connect::sources(config);
    let mut out = Vec::with_capacity(n);
    for id in 0..n {
        let mut w = Vec::new();
        let res: std::io::Result<_> = async {
            let (mut s, report) = connect_one(
                server,
                config,
                round_robin(&sources, id),
                Some(&config.spec.socket),
                &mut w,
            )
            .await?;
            s.write_all(cookie).await?;
            Ok((
                s.into_std()?,
                report.unwrap_or_else(crate::client::connect::empty_socket_report),
            ))
        }
        .await;
        if id == 0 {
            warnings.extend(w);
        }
        out.push(res.map_err(|cause| Error::DataConnect {
            stream: id as u16,
            addr: server.to_string(),
            cause,
        })?);
    }
    Ok(out)
}

/// Whether a byte-count test is done: our senders have sent the count and our receivers have
/// received it (iperf3's server stops sending at the count but waits for our `TEST_END`).
fn counted_out(group: &Group, n: u64) -> bool {
    let sum = |role| -> Option<u64> {
        let mut it = group.of_role(role).peekable();
        it.peek()?;
        Some(
            it.map(|h| h.shared.bytes.0.load(std::sync::atomic::Ordering::Relaxed))
                .sum(),
        )
    };
    sum(Role::Sender).is_none_or(|b| b >= n) && sum(Role::Receiver).is_none_or(|b| b >= n)
}

/// Bytes our senders have queued that the server has not acknowledged (`SIOCOUTQ`).
fn unsent(group: &Group) -> u64 {
    use std::os::fd::AsRawFd;
    group
        .of_role(Role::Sender)
        .map(|h| {
            let mut n: libc::c_int = 0;
            // SAFETY: SIOCOUTQ writes one int to the valid pointer given; the socket is open.
            let rc = unsafe { libc::ioctl(h.shared.socket.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
            if rc == 0 {
                u64::try_from(n).unwrap_or(0)
            } else {
                0
            }
        })
        .sum()
}

/// `EXCHANGE_RESULTS` to `IPERF_DONE`: our results out, the server's in.
async fn exchange_results(
    ctrl: &mut TcpStream,
    addr: &str,
    client: &SideResults,
    layout: &StreamLayout,
    window: Window,
) -> Result<Results, Error> {
    // The server's receivers close when it reads TEST_END; its results follow at once.
    expect_state(ctrl, addr, State::ExchangeResults, STEP_TIMEOUT).await?;
    let secs = match window {
        Window::Fixed(s) | Window::EndMark { asked: s } => s,
        Window::UntilLastByte => 0.0,
    };
    let pct = |s: f64| if secs > 0.0 { 100.0 * s / secs } else { 0.0 };
    let ours = Results {
        cpu_util_total: pct(client.cpu.total_s()),
        cpu_util_user: pct(client.cpu.user_s),
        cpu_util_system: pct(client.cpu.system_s),
        sender_has_retransmits: if layout.contains(StreamDirection::ClientToServer) {
            1
        } else {
            -1
        },
        streams: client
            .streams
            .iter()
            .map(|s| StreamResult {
                id: wire::stream_id(usize::from(s.stream)),
                bytes: s.transfer.bytes,
                retransmits: match (s.role, &s.tcp) {
                    (Role::Sender, Some(t)) => i64::try_from(t.retransmits).unwrap_or(i64::MAX),
                    _ => -1,
                },
                end_time: s.transfer.seconds,
                ..StreamResult::default()
            })
            .collect(),
        ..Results::default()
    };
    wire::write_json(ctrl, &ours)
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

/// The iperf3 server's results as xbench's server side: each stream matched by iperf3's id,
/// with the opposite role to ours. iperf3 counts after `-O` only, so the warm-up bytes are
/// taken from our end of the stream (what the summary subtracts them from).
fn server_side(
    r: &Results,
    client: &SideResults,
    layout: &StreamLayout,
    window: Window,
) -> SideResults {
    let secs = match window {
        Window::Fixed(s) | Window::EndMark { asked: s } => s,
        Window::UntilLastByte => 0.0,
    };
    let streams = layout
        .iter()
        .filter_map(|(id, direction)| {
            let theirs = r
                .streams
                .iter()
                .find(|s| s.id == wire::stream_id(usize::from(id)))?;
            let ours = client.streams.iter().find(|s| s.stream == id)?;
            let role = match direction {
                StreamDirection::ClientToServer => Role::Receiver,
                StreamDirection::ServerToClient => Role::Sender,
            };
            let seconds = (theirs.end_time - theirs.start_time).max(0.0);
            Some(SideStreamResult {
                stream: id,
                role,
                transfer: Transfer::new(theirs.bytes, seconds),
                // iperf3 reports no warm-up bytes: ours stand in for them, capped at what we
                // sent, since its warm-up may have ended later in our bytes than ours did.
                total_bytes: theirs
                    .bytes
                    .saturating_add(ours.omitted_bytes)
                    .min(ours.total_bytes),
                omitted_bytes: ours.omitted_bytes,
                tcp: None,
                after_end: Default::default(),
                error: None,
                // iperf3 reports neither how its threads spent the test nor its queues.
                thread: None,
                receive_queue: None,
            })
        })
        .collect();
    let cpu_s = |pct: f64| pct / 100.0 * secs;
    SideResults {
        streams,
        cpu: CpuUsage {
            user_s: cpu_s(r.cpu_util_user),
            system_s: cpu_s(r.cpu_util_system),
        },
    }
}
