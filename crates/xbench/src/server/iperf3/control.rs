//! The control connection's side of an iperf3 test that TCP ([`super::tcp`]) and UDP
//! ([`super::udp`]) tests share: the plan agreed with the client, the states sent, refusals,
//! the watch over the control connection during the test, and the results exchange. A leaf
//! so that the two tests depend on it and not on each other.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::info;

use crate::config::SocketOptions;
use crate::proto::iperf3::{self as wire, Params, Results, State, StreamResult, ierr};
use crate::report::Role;
use crate::server::budget::Need;
use crate::server::context::Ctx;
use crate::server::peer_text::bounded;
use crate::server::test::{Watchdog, Watched};
use crate::units::format_bits_per_second;

/// What an iperf3 client asked for, checked against this server's limits.
#[derive(Debug)]
pub(super) struct Plan {
    /// Streams the client sends on (the server receives), opened first.
    pub(super) to_receive: usize,
    /// Streams the server sends on, opened after those.
    pub(super) to_send: usize,
    /// With UDP, the datagram size.
    pub(super) block_len: usize,
    pub(super) socket: SocketOptions,
    /// A UDP test (`-u`).
    pub(super) udp: bool,
    /// UDP sequence numbers are 64-bit (`--udp-counters-64bit`).
    pub(super) counters_64bit: bool,
    pub(super) tos: Option<u32>,
    /// Per-stream pacing (`-b`), bits per second.
    pub(super) rate: Option<u64>,
    /// Bytes the server's senders stop after, in total (`-n`, or `-k` × `-l`).
    pub(super) budget: Option<u64>,
    pub(super) duration: Duration,
    pub(super) omit: Duration,
    pub(super) server_output: bool,
}

impl Plan {
    /// What the test takes from the server's budget: a socket and a thread per stream.
    pub(super) fn need(&self) -> Need {
        let p = self.to_receive.max(self.to_send) as u64;
        let per = u64::from(self.to_receive > 0) + u64::from(self.to_send > 0);
        Need::streams(p, per, 0)
    }
}

/// A refusal: iperf3's `i_errno` and `errno` for the client, words for the log.
pub(super) type Refusal = (i32, i32, String);

/// What the server measured over the window after `-O`.
pub(super) struct Measured {
    pub(super) window: Duration,
    /// Per stream in connection order.
    pub(super) streams: Vec<Figures>,
}

/// One stream's results, as iperf3 reports them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Figures {
    pub(super) role: Role,
    /// Bytes in the window.
    pub(super) bytes: u64,
    /// A sender's retransmissions in the window; -1 for a receiver.
    pub(super) retransmits: i64,
    /// UDP: the receiver's jitter, seconds.
    pub(super) jitter: f64,
    /// UDP: datagrams lost, in all and within `-O`.
    pub(super) errors: u64,
    pub(super) omitted_errors: u64,
    /// UDP: datagrams sent (a receiver: the highest sequence number), in all and within
    /// `-O`.
    pub(super) packets: u64,
    pub(super) omitted_packets: u64,
}

impl Figures {
    pub(super) fn tcp(role: Role, bytes: u64, retransmits: i64) -> Self {
        Figures {
            role,
            bytes,
            retransmits,
            jitter: 0.0,
            errors: 0,
            omitted_errors: 0,
            packets: 0,
            omitted_packets: 0,
        }
    }
}

/// What watches a running iperf3 test (TCP or UDP) for its end: the client's `TEST_END`
/// (or its going away), nothing moving for `--idle-timeout`, running past its end (or
/// `--max-duration`), and the server shutting down.
pub(super) struct Watch<'a> {
    pub(super) peer: SocketAddr,
    /// "iperf3 test" or "iperf3 UDP test", for the log.
    pub(super) what: &'static str,
    pub(super) plan: &'a Plan,
    pub(super) ctx: &'a Ctx,
}

impl Watch<'_> {
    /// Waits for the client's `TEST_END`, calling `at_omit` when the `-O` warm-up ends;
    /// `progress` is any counter that grows while data moves. Returns when the window
    /// started (the warm-up's end), or `None` when the test ended any other way (logged, and
    /// the client told where iperf3 reads it).
    ///
    /// Over 80 lines: one `select!` over every way a running test ends, side by side.
    pub(super) async fn until_test_end(
        &self,
        ctrl: &mut TcpStream,
        progress: impl Fn() -> u64,
        mut at_omit: impl FnMut(),
    ) -> Option<Instant> {
        let (peer, what, plan, ctx) = (self.peer, self.what, self.plan, self.ctx);
        let start = Instant::now();
        let mut omitted = plan.omit.is_zero();
        let mut window_start = start;
        // A byte- or datagram-count test has no length; --max-duration bounds it like any
        // other.
        let hard_stop = start
            + match plan.duration.is_zero() {
                true => ctx.limits.max_duration,
                false => plan.duration + plan.omit,
            }
            + ctx.limits.overrun_grace;
        let mut watch = Watchdog::new(ctx, hard_stop, Duration::from_millis(250), progress());
        let mut byte = [0u8; 1];
        let omit_at = tokio::time::Instant::from_std(start + plan.omit);
        loop {
            tokio::select! {
                r = ctrl.read(&mut byte) => {
                    if !matches!(r, Ok(1)) {
                        info!(%peer, "an iperf3 client closed its control connection mid-test");
                        return None;
                    }
                    match State::from_byte(byte[0]) {
                        Some(State::TestEnd) => return Some(window_start),
                        Some(State::ClientTerminate) => {
                            info!(%peer, "an iperf3 client ended its test early (interrupted)");
                            return None;
                        }
                        _ => {
                            info!(%peer, state = byte[0] as i8, "dropped an iperf3 client that sent an unexpected state mid-test");
                            refuse(ctrl, (ierr::MESSAGE, libc::EINVAL, String::new())).await;
                            return None;
                        }
                    }
                }
                () = tokio::time::sleep_until(omit_at), if !omitted => {
                    at_omit();
                    window_start = Instant::now();
                    omitted = true;
                }
                w = watch.next() => match w {
                    Watched::Tick => {
                        if watch.stalled(progress()) {
                            info!(%peer, "ended an {what} in which no data moved for {:?}", watch.idle_limit());
                            return None;
                        }
                    }
                    Watched::Overran => {
                        info!(%peer, "cut off an {what} that ran past its end (--max-duration, or its client stalled)");
                        let _ = send_state(ctrl, State::ServerTerminate).await;
                        return None;
                    }
                    Watched::ShuttingDown => {
                        info!(%peer, "server shutting down: an iperf3 test is cut short");
                        let _ = send_state(ctrl, State::ServerTerminate).await;
                        return None;
                    }
                },
            }
        }
    }
}

/// `EXCHANGE_RESULTS` to `IPERF_DONE`.
pub(super) async fn exchange_results(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    params: &Params,
    m: Measured,
    cpu: (f64, f64),
) -> bool {
    let limit = Duration::from_secs(10);
    if send_state(ctrl, State::ExchangeResults).await.is_err() {
        return false;
    }
    let theirs: Results = match wire::read_json(ctrl, limit).await {
        Ok(r) => r,
        Err(e) => {
            let e = bounded(&e.to_string(), 200);
            info!(%peer, "dropped an iperf3 client: its results: {e}");
            refuse(ctrl, (ierr::RECV_RESULTS, libc::EINVAL, String::new())).await;
            return false;
        }
    };
    let secs = m.window.as_secs_f64();
    let pct = |t: f64| if secs > 0.0 { 100.0 * t / secs } else { 0.0 };
    let ours = Results {
        cpu_util_total: pct(cpu.0 + cpu.1),
        cpu_util_user: pct(cpu.0),
        cpu_util_system: pct(cpu.1),
        // iperf3's UDP senders say 1 as well, each stream then 0.
        sender_has_retransmits: if plan.to_send > 0 { 1 } else { -1 },
        congestion_used: plan.socket.congestion.clone(),
        streams: m
            .streams
            .iter()
            .enumerate()
            .map(|(i, f)| StreamResult {
                id: wire::stream_id(i),
                bytes: f.bytes,
                retransmits: f.retransmits,
                jitter: f.jitter,
                errors: i64::try_from(f.errors).unwrap_or(i64::MAX),
                omitted_errors: i64::try_from(f.omitted_errors).unwrap_or(i64::MAX),
                packets: i64::try_from(f.packets).unwrap_or(i64::MAX),
                omitted_packets: i64::try_from(f.omitted_packets).unwrap_or(i64::MAX),
                start_time: 0.0,
                end_time: secs,
            })
            .collect(),
        server_output_text: plan.server_output.then(|| server_output(peer, params, &m)),
        server_output_json: None,
    };
    if wire::write_json(ctrl, &ours).await.is_err()
        || send_state(ctrl, State::DisplayResults).await.is_err()
    {
        return false;
    }
    let received: u64 = m
        .streams
        .iter()
        .filter(|s| s.role == Role::Receiver)
        .map(|s| s.bytes)
        .sum();
    let sent: u64 = m
        .streams
        .iter()
        .filter(|s| s.role == Role::Sender)
        .map(|s| s.bytes)
        .sum();
    info!(
        %peer,
        received = %format_bits_per_second(received as f64 * 8.0 / secs.max(1e-9)),
        sent = %format_bits_per_second(sent as f64 * 8.0 / secs.max(1e-9)),
        client_streams = theirs.streams.len(),
        "iperf3 test completed"
    );
    // The client answers DISPLAY_RESULTS with IPERF_DONE; it may also just close.
    let mut done = [0u8; 1];
    let _ = tokio::time::timeout(limit, ctrl.read(&mut done)).await;
    true
}

/// The server's own lines for `--get-server-output`, in iperf3's layout.
fn server_output(peer: SocketAddr, params: &Params, m: &Measured) -> String {
    let secs = m.window.as_secs_f64();
    let mut out = format!(
        "-----------------------------------------------------------\n\
         xbench {} serving an iperf3 {} client\n\
         Accepted connection from {}, port {}\n\
         [ ID] Interval           Transfer     Bitrate         Retr\n",
        env!("CARGO_PKG_VERSION"),
        client_version(params),
        peer.ip().to_canonical(),
        peer.port()
    );
    for (i, f) in m.streams.iter().enumerate() {
        let (role, bytes) = (f.role, f.bytes);
        let retr = match role {
            Role::Sender if !params.udp.unwrap_or(false) => format!("{:>4}", f.retransmits),
            Role::Sender => "    ".into(),
            Role::Receiver => "    ".into(),
        };
        out.push_str(&format!(
            "[{:>3}]   0.00-{secs:<6.2} sec  {:>7.2} MBytes  {:>14}  {retr}  {}\n",
            wire::stream_id(i),
            bytes as f64 / (1 << 20) as f64,
            format_bits_per_second(bytes as f64 * 8.0 / secs.max(1e-9)),
            match role {
                Role::Sender => "sender",
                Role::Receiver => "receiver",
            }
        ));
    }
    out
}

/// The version an iperf3 client says it is, as the server repeats it (logs, server output).
pub(super) fn client_version(p: &Params) -> String {
    p.client_version
        .as_deref()
        .map_or_else(|| "3.x".to_owned(), |v| bounded(v, 32))
}

/// Resolves when the client's control connection closes or says anything, at a state in
/// which an iperf3 client has nothing to say (its streams are opening): either way its test
/// is over, and its places among the tests and the handshakes are freed now, not after the
/// handshake timeout. Why, for the log.
pub(super) async fn gone(ctrl: &mut TcpStream) -> String {
    let mut byte = [0u8; 1];
    match ctrl.read(&mut byte).await {
        Ok(0) => "it closed its control connection".to_owned(),
        Ok(_) => match State::from_byte(byte[0]) {
            Some(State::ClientTerminate) => "it ended its test (interrupted)".to_owned(),
            _ => format!("it sent state {} out of turn", byte[0] as i8),
        },
        Err(e) => format!("its control connection failed: {e}"),
    }
}

pub(super) async fn send_state(ctrl: &mut TcpStream, s: State) -> std::io::Result<()> {
    ctrl.write_all(&[s.byte()]).await
}

/// Sends iperf3's `SERVER_ERROR` and closes.
pub(super) async fn refuse(ctrl: &mut TcpStream, (i_errno, errno, _): Refusal) {
    let _ = ctrl.write_all(&wire::server_error(i_errno, errno)).await;
    let _ = ctrl.shutdown().await;
}
