//! UDP streams for iperf3 clients (`iperf3 -u`), found as iperf3's server finds them: each
//! client socket sends one "connect" datagram to the server's port (the TCP control port, on
//! UDP); the server answers it from a socket of its own bound to that same port and connected
//! to the client's address, which from then on gets that client's datagrams (the kernel
//! prefers a connected socket to the unconnected listener).
//!
//! Datagrams carry no cookie, so a stream can be told only by its source address: the
//! listener hands a connect datagram to an iperf3 test only while that test waits for its
//! streams (`CREATE_STREAMS`), only from its control connection's address, and at most as many
//! as the test has streams. One test per client address waits at a time. Anything else on
//! the port is dropped unanswered, and the listener never waits on a test. Then the test runs
//! here, from `CREATE_STREAMS` to its results, with every limit of a TCP one. Not the data path
//! (`engine::udp::iperf3`) nor the parameter exchange (`server::iperf3`).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tracing::{info, warn};

use super::control::{Figures, Measured, Plan, Watch, exchange_results, gone, refuse, send_state};
use super::streams_udp::stream_socket;
use crate::engine::udp::iperf3::{self, Iperf3Counts, Iperf3Stream};
use crate::proto::iperf3::{Params, State, ierr};
use crate::report::Role;
use crate::server::context::Ctx;
use crate::server::metrics;
use crate::server::slot::HandshakeSlot;

/// Runs an iperf3 client's UDP test on `ctrl` from `CREATE_STREAMS`, its parameters checked
/// (`plan`) and its place among running tests taken. True when it ran to its results exchange.
/// In the order iperf3's states cross the wire: the streams' hellos ([`streams_said_hello`]),
/// the receivers, `TEST_START` and `TEST_RUNNING`, the senders ([`start`]), the window
/// ([`measure`]), the results.
pub(super) async fn run(
    mut ctrl: TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    params: &Params,
    ctx: &Arc<Ctx>,
    slot: HandshakeSlot,
) -> bool {
    let Some(sockets) = streams_said_hello(&mut ctrl, peer, plan, ctx).await else {
        return false;
    };
    drop(slot);
    let Some(streams) = start(&mut ctrl, peer, plan, sockets).await else {
        return false;
    };
    info!(
        %peer,
        receive = plan.to_receive,
        send = plan.to_send,
        client = super::control::client_version(params),
        "iperf3 UDP test started"
    );
    let metrics = ctx
        .metrics
        .test_started(metrics::Protocol::Iperf3, metrics::Kind::Udp);
    watch_datagrams(&metrics, &streams);
    let measured = measure(&mut ctrl, peer, &streams, plan, ctx).await;
    let cpu = streams
        .into_iter()
        .map(|(_, h)| h.join())
        .fold((0.0, 0.0), |(u, s), c| (u + c.user_s, s + c.system_s));
    let completed = match measured {
        Some(m) => exchange_results(&mut ctrl, peer, plan, params, m, cpu).await,
        None => false,
    };
    metrics.finish(if completed { "completed" } else { "failed" }, None);
    completed
}

/// `CREATE_STREAMS`: waits for this address's turn (one UDP test of an address at a time
/// takes its hellos), tells the client, and opens a socket for each stream whose hello
/// arrives, in the order they came. `None` when they did not all come within the handshake
/// timeout or the client went away (logged, and refused where iperf3 reads a refusal).
async fn streams_said_hello(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    ctx: &Arc<Ctx>,
) -> Option<Vec<UdpSocket>> {
    let limit = ctx.limits.handshake_timeout;
    let n = plan.to_receive + plan.to_send;
    let local = ctrl.local_addr().ok()?;
    let claimed = tokio::select! {
        c = ctx.iperf3_udp.claim(peer.ip(), n, Instant::now() + limit) => c,
        why = gone(ctrl) => {
            info!(%peer, "dropped an iperf3 UDP client while it waited for its turn: {why}");
            return None;
        }
    };
    let Some((_claim, mut hellos)) = claimed else {
        info!(
            %peer,
            "refused an iperf3 UDP test: another test from the same address kept waiting for its \
             streams for {limit:?}"
        );
        refuse(ctrl, (ierr::NEW_TEST, libc::EBUSY, String::new())).await;
        return None;
    };
    send_state(ctrl, State::CreateStreams).await.ok()?;
    let mut sockets = Vec::with_capacity(n);
    let mut seen = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::now() + limit;
    while sockets.len() < n {
        let said = tokio::select! {
            h = tokio::time::timeout_at(deadline, hellos.recv()) => h,
            why = gone(ctrl) => {
                info!(%peer, "dropped an iperf3 UDP client while its streams said hello: {why}");
                return None;
            }
        };
        let Ok(Some(hello)) = said else {
            info!(
                %peer,
                "dropped an iperf3 client: {} of its {n} UDP streams said hello within {limit:?}",
                sockets.len()
            );
            refuse(ctrl, (ierr::ACCEPT_STREAM, libc::ETIMEDOUT, String::new())).await;
            return None;
        };
        // A hello repeated before its socket was connected.
        if seen.contains(&hello.0) {
            continue;
        }
        seen.push(hello.0);
        match stream_socket(local, hello, plan.socket.window) {
            Ok(s) => sockets.push(s),
            Err(e) => {
                warn!(%peer, "cannot open a UDP stream for an iperf3 client: {e}");
                refuse(ctrl, (ierr::ACCEPT_STREAM, libc::EIO, String::new())).await;
                return None;
            }
        }
    }
    Some(sockets)
}

/// Receivers first, in the order the client opened them, as iperf3's server gives roles;
/// then `TEST_START` and `TEST_RUNNING`, and the senders once the client is told the test
/// runs. `None` when a thread could not start (refused) or the client went away.
async fn start(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    plan: &Plan,
    mut sockets: Vec<UdpSocket>,
) -> Option<Vec<(Role, Iperf3Stream)>> {
    let senders = sockets.split_off(plan.to_receive);
    let mut streams = Vec::with_capacity(sockets.len() + senders.len());
    let refused = async |ctrl: &mut TcpStream, e: std::io::Error| {
        warn!(%peer, "cannot start a stream thread: {e}");
        refuse(ctrl, (ierr::NEW_TEST, libc::EIO, String::new())).await;
    };
    for s in sockets {
        match iperf3::spawn_receiver(s, plan.block_len, plan.counters_64bit) {
            Ok(h) => streams.push((Role::Receiver, h)),
            Err(e) => {
                refused(ctrl, e).await;
                return None;
            }
        }
    }
    send_state(ctrl, State::TestStart).await.ok()?;
    send_state(ctrl, State::TestRunning).await.ok()?;
    for s in senders {
        let at = (Instant::now(), None);
        match iperf3::spawn_sender(s, plan.block_len, plan.rate, at, plan.counters_64bit) {
            Ok(h) => streams.push((Role::Sender, h)),
            Err(e) => {
                refused(ctrl, e).await;
                return None;
            }
        }
    }
    Some(streams)
}

/// The test's bytes and datagrams, by direction, for the metrics endpoint while it runs. A
/// receiver's `packets` is its highest sequence number: what it got is that less the gaps.
fn watch_datagrams(metrics: &metrics::TestMetrics, streams: &[(Role, Iperf3Stream)]) {
    let shared: Vec<(Role, Arc<crate::engine::udp::iperf3::Iperf3Shared>)> = streams
        .iter()
        .map(|(r, h)| (*r, Arc::clone(&h.shared)))
        .collect();
    metrics.watch(move || {
        let mut out = Vec::new();
        for (d, role) in [
            (metrics::Direction::Received, Role::Receiver),
            (metrics::Direction::Sent, Role::Sender),
        ] {
            let mut m = metrics::Moved::default();
            for c in (shared.iter())
                .filter(|(r, _)| *r == role)
                .map(|(_, s)| s.counts())
            {
                m.bytes += c.bytes;
                m.datagrams += match role {
                    Role::Receiver => c.packets.saturating_sub(c.errors),
                    Role::Sender => c.packets,
                };
            }
            if m.datagrams > 0 {
                out.push((metrics::Transport::Udp, d, m));
            }
        }
        out
    });
}

/// Runs the test until the client's `TEST_END` ([`Watch`], as the TCP test's); `None` when it
/// ended any other way (logged).
async fn measure(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    streams: &[(Role, Iperf3Stream)],
    plan: &Plan,
    ctx: &Ctx,
) -> Option<Measured> {
    let snapshot =
        || -> Vec<Iperf3Counts> { streams.iter().map(|(_, h)| h.shared.counts()).collect() };
    let bytes = || -> u64 { streams.iter().map(|(_, h)| h.shared.bytes()).sum() };
    let mut base = vec![Iperf3Counts::default(); streams.len()];
    let watch = Watch {
        peer,
        what: "iperf3 UDP test",
        plan,
        ctx,
    };
    let window_start = watch
        .until_test_end(ctrl, bytes, || base = snapshot())
        .await?;
    let window = Instant::now().saturating_duration_since(window_start);
    // The senders' window ends here too: what they would send while the receivers drain is
    // outside it.
    for (role, h) in streams {
        if *role == Role::Sender {
            h.stop();
        }
    }
    // Every datagram a sender sent is in its count before the count is taken: it publishes
    // once per batch, and a count read mid-batch said 499 sent of the 500 the client received.
    let until = Instant::now() + Duration::from_millis(500);
    while streams
        .iter()
        .any(|(role, h)| *role == Role::Sender && !h.shared.finished())
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let at_end = snapshot();
    // The client sent its last datagrams before TEST_END: let the receivers read what is
    // queued for them (until their counts stand still), as iperf3's server has read them by
    // the time it reads TEST_END. What is still on the wire is lost, as with iperf3.
    if plan.to_receive > 0 {
        let until = Instant::now() + Duration::from_millis(250);
        let mut last = bytes();
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = bytes();
            if now == last || Instant::now() >= until {
                break;
            }
            last = now;
        }
    }
    let streams = streams
        .iter()
        .zip(snapshot().iter().zip(&at_end).zip(&base))
        .map(|((role, _), ((drained, at_end), c0))| {
            let c = match role {
                Role::Sender => at_end,
                Role::Receiver => drained,
            };
            (role, c, c0)
        })
        .map(|(role, c, c0)| Figures {
            role: *role,
            bytes: c.bytes.saturating_sub(c0.bytes),
            retransmits: match role {
                Role::Sender => 0,
                Role::Receiver => -1,
            },
            jitter: c.jitter,
            errors: c.errors,
            omitted_errors: c0.errors,
            packets: c.packets,
            omitted_packets: c0.packets,
        })
        .collect();
    Some(Measured { window, streams })
}

#[cfg(test)]
mod tests {

    use crate::server::iperf3::streams_udp::reply_to;

    #[test]
    fn connect_datagrams_are_answered_in_their_byte_order() {
        assert_eq!(
            reply_to(&[0x39, 0x38, 0x37, 0x36]),
            Some([0x36, 0x37, 0x38, 0x39])
        );
        assert_eq!(
            reply_to(&[0x36, 0x37, 0x38, 0x39]),
            Some([0x39, 0x38, 0x37, 0x36])
        );
        assert_eq!(
            reply_to(&123_456_789u32.to_le_bytes()),
            Some(987_654_321u32.to_le_bytes())
        );
        assert_eq!(reply_to(&[1, 2, 3, 4]), None);
        assert_eq!(reply_to(&[0x39, 0x38, 0x37, 0x36, 0]), None);
    }
}
