//! An iperf3 client's TCP test from its data connections on: gathered by cookie in the order
//! iperf3 opens them, run on xbench's stream threads, and the window measured.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::net::TcpStream;
use tracing::info;

use crate::engine::group::Group;
use crate::engine::sockopt;
use crate::engine::stream::{self, Budget, Payload, RecvMode, SendMode, StreamHandle};
use crate::proto::iperf3::{COOKIE_LEN, State, ierr};
use crate::report::Role;
use crate::server::context::Ctx;
use crate::server::metrics::{Direction, Moved, Transport};

use super::control::{Figures, Measured, Plan, Watch, gone, refuse, send_state};

/// `CREATE_STREAMS`: the test's `n` data connections, routed here by their cookie as they
/// arrive, in the order the server accepted them (iperf3's server gives roles in accept
/// order; each is read on a task of its own, so they may arrive here in another). `None`
/// when they did not all come within the handshake timeout, or the client went away (logged).
pub(super) async fn gather(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    cookie: [u8; COOKIE_LEN],
    n: usize,
    ctx: &Ctx,
) -> Option<Vec<TcpStream>> {
    let limit = ctx.limits.handshake_timeout;
    let Some((waiting, mut arrivals)) = ctx.iperf3.register(cookie, n) else {
        info!(%peer, "refused an iperf3 client whose cookie is already in use");
        refuse(ctrl, (ierr::NEW_TEST, libc::EEXIST, String::new())).await;
        return None;
    };
    send_state(ctrl, State::CreateStreams).await.ok()?;
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        let arrived = tokio::select! {
            a = tokio::time::timeout(limit, arrivals.recv()) => a,
            why = gone(ctrl) => {
                info!(%peer, "dropped an iperf3 client while its data connections opened: {why}");
                return None;
            }
        };
        match arrived {
            Ok(Some(c)) => conns.push(c),
            _ => {
                info!(
                    %peer,
                    "dropped an iperf3 client: {} of its {n} data connections arrived within {limit:?}",
                    conns.len()
                );
                refuse(ctrl, (ierr::ACCEPT_STREAM, libc::ETIMEDOUT, String::new())).await;
                return None;
            }
        }
    }
    drop(waiting);
    conns.sort_by_key(|(accepted, _)| *accepted);
    Some(conns.into_iter().map(|(_, c)| c).collect())
}

/// The test's bytes, by direction, for the metrics endpoint while it runs.
pub(super) fn watch_bytes(metrics: &crate::server::metrics::TestMetrics, group: &Group) {
    let counters: Vec<(Role, Arc<crate::engine::stream::StreamShared>)> = group
        .handles()
        .iter()
        .map(|h| (h.role, Arc::clone(&h.shared)))
        .collect();
    metrics.watch(move || {
        let sum = |role| -> u64 {
            counters
                .iter()
                .filter(|(r, _)| *r == role)
                .map(|(_, s)| s.bytes.0.load(Ordering::Relaxed))
                .sum()
        };
        [
            (Direction::Received, Role::Receiver),
            (Direction::Sent, Role::Sender),
        ]
        .into_iter()
        .map(|(d, role)| {
            let moved = Moved {
                bytes: sum(role),
                datagrams: 0,
            };
            (Transport::Tcp, d, moved)
        })
        .filter(|(_, _, m)| m.bytes > 0)
        .collect()
    });
}

/// Runs the test until the client's `TEST_END`; `None` when it ended any other way (logged).
pub(super) async fn measure(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    group: &Group,
    plan: &Plan,
    ctx: &Ctx,
) -> Option<Measured> {
    let handles = group.handles();
    let snapshot = |hs: &[StreamHandle]| -> Vec<(u64, i64)> {
        hs.iter()
            .map(|h| {
                let retrans = match h.role {
                    Role::Sender => crate::tcp_info::read(&h.shared.socket)
                        .map_or(0, |t| i64::from(t.total_retrans)),
                    Role::Receiver => -1,
                };
                (h.shared.bytes.0.load(Ordering::Relaxed), retrans)
            })
            .collect()
    };
    let mut base: Vec<(u64, i64)> = vec![(0, 0); handles.len()];
    let progress = || -> u64 {
        (handles.iter())
            .map(|h| h.shared.bytes.0.load(Ordering::Relaxed))
            .sum()
    };
    let watch = Watch {
        peer,
        what: "iperf3 test",
        plan,
        ctx,
    };
    let window_start = watch
        .until_test_end(ctrl, progress, || base = snapshot(handles))
        .await?;
    let window = Instant::now().saturating_duration_since(window_start);
    // The client wrote its last bytes before TEST_END, on other connections: let the
    // receivers take what has arrived (iperf3's single-threaded server has read it by the time
    // it reads TEST_END). What is still on the wire is lost, as with iperf3.
    // A byte-count test's last block may still sit in the client's send queue (TCP small
    // queues) when TEST_END, sent without delay, overtakes it: wait for the whole count.
    let received = || -> u64 {
        handles
            .iter()
            .filter(|h| h.role == Role::Receiver)
            .map(|h| h.shared.bytes.0.load(Ordering::Relaxed))
            .sum()
    };
    let expected = plan.budget.filter(|_| plan.to_receive > 0);
    let until = Instant::now()
        + match expected {
            Some(_) => Duration::from_secs(1),
            None => Duration::from_millis(250),
        };
    while Instant::now() < until
        && (expected.is_some_and(|n| received() < n)
            || handles
                .iter()
                .any(|h| h.role == Role::Receiver && queued(&h.shared.socket) > 0))
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let end = snapshot(handles);
    let streams = handles
        .iter()
        .zip(end.iter().zip(&base))
        .map(|(h, ((b, r), (b0, r0)))| {
            let retrans = match h.role {
                Role::Sender => r - r0,
                Role::Receiver => -1,
            };
            Figures::tcp(h.role, b.saturating_sub(*b0), retrans)
        })
        .collect();
    Some(Measured { window, streams })
}

/// Configures the data connections and starts their threads: receivers first, in the order
/// the client opened them, as iperf3's server assigns roles.
pub(super) fn start_streams(conns: Vec<TcpStream>, plan: &Plan) -> Result<Group, String> {
    let payload = match plan.to_send {
        0 => None,
        _ => Some(Arc::new(
            Payload::new(plan.block_len, SendMode::Copy)
                .map_err(|e| format!("cannot allocate the payload: {e}"))?,
        )),
    };
    let budget = plan.budget.map(Budget::new);
    let mut handles = Vec::with_capacity(conns.len());
    match spawn_each(conns, plan, payload, budget, &mut handles) {
        Ok(()) => Ok(Group::new(handles)),
        Err(e) => {
            // Streams already started must not outlive the refusal.
            drop(Group::new(handles));
            Err(e)
        }
    }
}

pub(super) fn spawn_each(
    conns: Vec<TcpStream>,
    plan: &Plan,
    payload: Option<Arc<Payload>>,
    budget: Option<Arc<Budget>>,
    handles: &mut Vec<StreamHandle>,
) -> Result<(), String> {
    let mut warnings = Vec::new();
    for (i, conn) in conns.into_iter().enumerate() {
        let sock = conn
            .into_std()
            .map_err(|e| format!("cannot take over a data connection: {e}"))?;
        sockopt::apply(SockRef::from(&sock), &plan.socket, &mut warnings)
            .map_err(|e| format!("cannot configure a data connection: {e}"))?;
        if let Some(tos) = plan.tos {
            // Best effort, as iperf3 does for a family the socket is not.
            let _ = SockRef::from(&sock).set_tos_v4(tos);
            let _ = SockRef::from(&sock).set_tclass_v6(tos);
        }
        // At most --max-streams, a u16.
        let id = i as u16;
        let h = match (i >= plan.to_receive, &payload) {
            (true, Some(p)) => {
                sockopt::pace(&sock, plan.rate).map_err(|e| e.to_string())?;
                stream::spawn_sender(id, sock, Arc::clone(p), budget.clone())
            }
            _ => stream::spawn_receiver(id, sock, plan.block_len, RecvMode::Discard),
        }
        .map_err(|e| format!("cannot start a stream thread: {e}"))?;
        handles.push(h);
    }
    Ok(())
}

/// Bytes waiting in a socket's receive queue.
pub(super) fn queued(sock: &std::net::TcpStream) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the valid pointer given; the descriptor is open.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        usize::try_from(n).unwrap_or(0)
    } else {
        0
    }
}
