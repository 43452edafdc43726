//! A test for an iperf3 client (iperf3 3.x, TCP or UDP), from its cookie to `IPERF_DONE`: the
//! parameter exchange, its data connections (which open with the same cookie and are routed
//! here through [`waiting::Iperf3Streams`]), the test on xbench's stream threads, and the results
//! exchange with the server's own output when the client asks for it.
//!
//! Every limit of an xbench test applies (`--max-streams`, `--max-block-len`,
//! `--max-duration`, `--max-tests`, `--max-tests-per-client`, `--max-send-rate`, the handshake
//! and idle timeouts), and any number of iperf3 clients run at once: this server never answers
//! "busy" the way iperf3's does. A client it cannot serve gets iperf3's `SERVER_ERROR` state
//! (or `ACCESS_DENIED` when the server requires a key iperf3 cannot prove) and a log line here.
//! Not the wire format (`proto::iperf3`) nor the recognition of the cookie (`conn`).

mod control;
pub(super) mod streams_udp;
mod tcp;
mod udp;
pub(super) mod waiting;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{info, warn};

use self::control::{Plan, Refusal, client_version, exchange_results, refuse, send_state};
pub(crate) use self::streams_udp::{listen, serve};
use self::tcp::{gather, measure, start_streams, watch_bytes};
use super::admission::try_running_guard;
use super::config::Limits;
use super::context::Ctx;
use super::governor::{Governor, PacedSocket};
use super::metrics::{Kind, Protocol};
use super::peer_text::bounded;
use super::slot::HandshakeSlot;
use crate::config::{SocketOptions, is_congestion_name};
use crate::proto::iperf3::{self as wire, COOKIE_LEN, Params, State, ierr};
use crate::report::Role;

/// Runs an iperf3 client's test on `ctrl`, whose cookie has been read. True when the test ran
/// to its results exchange. In the order iperf3's states cross the wire: the parameters and
/// the plan ([`agree`]), the test's place, its data connections ([`gather`]), the streams,
/// `TEST_START` and `TEST_RUNNING`, the window ([`measure`]), the results.
pub(super) async fn run(
    mut ctrl: TcpStream,
    peer: SocketAddr,
    cookie: [u8; COOKIE_LEN],
    ctx: Arc<Ctx>,
    slot: HandshakeSlot,
) -> bool {
    let Some((params, plan)) = agree(&mut ctrl, peer, &ctx).await else {
        return false;
    };
    let _running = match try_running_guard(&ctx, peer.ip(), plan.need()) {
        Ok(g) => g,
        Err(m) => {
            ctx.metrics.refused("limit");
            info!(%peer, "refused an iperf3 client's test: {m}");
            refuse(&mut ctrl, (ierr::NEW_TEST, libc::EBUSY, m)).await;
            return false;
        }
    };
    if plan.udp {
        return udp::run(ctrl, peer, &plan, &params, &ctx, slot).await;
    }
    let n = plan.to_receive + plan.to_send;
    let Some(conns) = gather(&mut ctrl, peer, cookie, n, &ctx).await else {
        return false;
    };
    drop(slot);
    let group = match start_streams(conns, &plan) {
        Ok(g) => g,
        Err(m) => {
            warn!(%peer, "cannot run an iperf3 client's test: {m}");
            refuse(&mut ctrl, (ierr::NEW_TEST, libc::EIO, m)).await;
            return false;
        }
    };
    let metrics = ctx.metrics.test_started(Protocol::Iperf3, Kind::Tcp);
    watch_bytes(&metrics, &group);
    let senders: Vec<_> = group
        .of_role(Role::Sender)
        .map(|h| Arc::downgrade(&h.shared) as PacedSocket)
        .collect();
    let _share = (!senders.is_empty()).then(|| Governor::join(&ctx.governor, senders, plan.rate));
    if send_state(&mut ctrl, State::TestStart).await.is_err()
        || send_state(&mut ctrl, State::TestRunning).await.is_err()
    {
        return false;
    }
    info!(
        %peer,
        receive = plan.to_receive,
        send = plan.to_send,
        client = client_version(&params),
        "iperf3 test started"
    );
    let Some(measured) = measure(&mut ctrl, peer, &group, &plan, &ctx).await else {
        return false;
    };
    let ends = group.collect(Duration::from_secs(2)).await;
    let cpu = ends.values().fold((0.0, 0.0), |(u, s), e| {
        (u + e.cpu.user_s, s + e.cpu.system_s)
    });
    let completed = exchange_results(&mut ctrl, peer, &plan, &params, measured, cpu).await;
    metrics.finish(if completed { "completed" } else { "failed" }, None);
    completed
}

/// `PARAM_EXCHANGE`: refuses a client this server cannot let in (it requires a key, which
/// iperf3 cannot prove), reads the parameters and plans the test, refusing what xbench does
/// not do or a limit forbids. `None` when the client was refused or went away (logged).
async fn agree(ctrl: &mut TcpStream, peer: SocketAddr, ctx: &Ctx) -> Option<(Params, Plan)> {
    if ctx.psk.is_some() {
        warn!(
            %peer,
            "refused an iperf3 client: this server requires a key (--psk-file), which iperf3 \
             cannot prove; iperf3 is told access is denied"
        );
        ctx.metrics.handshake_failed("auth");
        let _ = ctrl.write_all(&[State::AccessDenied.byte()]).await;
        let _ = ctrl.shutdown().await;
        return None;
    }
    let _ = ctrl.set_nodelay(true);
    send_state(ctrl, State::ParamExchange).await.ok()?;
    let params: Params = match wire::read_json(ctrl, ctx.limits.handshake_timeout).await {
        Ok(p) => p,
        Err(e) => {
            let e = bounded(&e.to_string(), 200);
            info!(%peer, "dropped an iperf3 client: its parameters: {e}");
            refuse(ctrl, (ierr::RECV_PARAMS, libc::EINVAL, String::new())).await;
            return None;
        }
    };
    match plan(&params, ctx) {
        Ok(p) => Some((params, p)),
        Err(r) => {
            // What xbench does not do, or a limit: its message says which.
            ctx.metrics.refused("iperf3_request");
            info!(%peer, "refused an iperf3 client's test: {}", r.2);
            refuse(ctrl, r).await;
            None
        }
    }
}

/// Checks an iperf3 client's parameters against what this server does and allows.
fn plan(p: &Params, ctx: &Ctx) -> Result<Plan, Refusal> {
    let l = &ctx.limits;
    refuse_unserved(p)?;
    let udp = p.udp.unwrap_or(false);
    let (to_receive, to_send) = streams(p, l)?;
    let block = block_len(p, udp, l)?;
    let (duration, omit) = test_time(p, l)?;
    let rate = p.bandwidth.filter(|b| *b > 0);
    if to_send > 0 && udp {
        // The governor cannot slow a UDP sender down once it runs: the whole test must fit.
        let total = rate.map(|r| r.saturating_mul(to_send as u64));
        super::admission::udp_within_send_cap(total, l.max_send_rate)
            .map_err(|m| (ierr::NEW_TEST, libc::EINVAL, m))?;
    } else if to_send > 0 {
        ctx.governor
            .admit(rate, to_send)
            .map_err(|m| (ierr::NEW_TEST, libc::EINVAL, m))?;
    }
    let budget = match (p.num, p.blockcount) {
        (Some(n), _) if n > 0 => Some(n),
        (_, Some(k)) if k > 0 => Some(k.saturating_mul(block)),
        _ => None,
    };
    if duration.is_zero() && budget.is_none() {
        return no(
            libc::EINVAL,
            "the test has neither a time nor a byte count".into(),
        );
    }
    Ok(Plan {
        to_receive,
        to_send,
        // Bounded by --max-block-len, a u32.
        block_len: block as usize,
        socket: SocketOptions {
            window: p.window.filter(|w| *w > 0),
            mss: p.mss.filter(|m| *m > 0),
            nodelay: p.nodelay.unwrap_or(false),
            congestion: p.congestion.clone(),
        },
        tos: p.tos.and_then(|t| u32::try_from(t).ok()).filter(|t| *t > 0),
        udp,
        counters_64bit: p.udp_counters_64bit.is_some_and(|c| c != 0),
        rate,
        budget,
        duration,
        omit,
        server_output: p.get_server_output.is_some_and(|g| g != 0),
    })
}

/// A refusal of a new test: iperf3's code for it, the errno its client prints, and why.
fn no<T>(errno: i32, why: String) -> Result<T, Refusal> {
    Err((ierr::NEW_TEST, errno, why))
}

/// Refuses what this server does not serve: SCTP, RSA credentials, a congestion control
/// that is not a name.
fn refuse_unserved(p: &Params) -> Result<(), Refusal> {
    if p.sctp.is_some() {
        return no(
            libc::EPROTONOSUPPORT,
            "iperf3's SCTP tests are not served here (TCP and UDP only)".into(),
        );
    }
    if p.authtoken.is_some() {
        return no(
            libc::EACCES,
            "the client sent iperf3 RSA credentials, which this server does not check".into(),
        );
    }
    if let Some(c) = p.congestion.as_deref().filter(|c| !is_congestion_name(c)) {
        return no(
            libc::EINVAL,
            format!(
                "the client asks for congestion control \"{}\", which is not a congestion \
                 control's name (like cubic or bbr)",
                bounded(c, 32)
            ),
        );
    }
    Ok(())
}

/// The data connections the server receives on and sends on, within --max-streams.
fn streams(p: &Params, l: &Limits) -> Result<(usize, usize), Refusal> {
    let reverse = p.reverse.unwrap_or(false);
    let bidir = p.bidirectional.unwrap_or(false);
    if p.parallel == 0 {
        return no(libc::EINVAL, "the client asks for 0 streams".into());
    }
    let per_dir = usize::try_from(p.parallel).unwrap_or(usize::MAX);
    let (to_receive, to_send) = match (bidir, reverse) {
        (true, _) => (per_dir, per_dir),
        (false, true) => (0, per_dir),
        (false, false) => (per_dir, 0),
    };
    let total = to_receive.saturating_add(to_send);
    if total > usize::from(l.max_streams) {
        return no(
            libc::EINVAL,
            format!(
                "the test asks for {total} data connections; this server allows at most {} \
                 (--max-streams)",
                l.max_streams
            ),
        );
    }
    Ok((to_receive, to_send))
}

/// The block length in bytes (iperf3's default when unset), within --max-block-len.
fn block_len(p: &Params, udp: bool, l: &Limits) -> Result<u64, Refusal> {
    let (default_len, min_len, max_len) = match udp {
        // iperf3's UDP default; its header; the largest IPv4 UDP payload.
        true => (1460, 16, u64::from(l.max_block_len).min(65_507)),
        false => (128 * 1024, 1, u64::from(l.max_block_len)),
    };
    let block = p.len.unwrap_or(default_len);
    if block < min_len || block > max_len {
        return no(
            libc::EINVAL,
            format!(
                "the test asks for {block}-byte blocks; this server allows {min_len} to \
                 {max_len} (--max-block-len)"
            ),
        );
    }
    Ok(block)
}

/// The test's time and omitted time, together within --max-duration.
fn test_time(p: &Params, l: &Limits) -> Result<(Duration, Duration), Refusal> {
    let duration = Duration::from_secs(p.time);
    let omit = Duration::from_secs(p.omit);
    if duration.saturating_add(omit) > l.max_duration {
        return no(
            libc::EINVAL,
            format!(
                "the test asks for {:?}; this server allows at most {:?} (--max-duration)",
                duration.saturating_add(omit),
                l.max_duration
            ),
        );
    }
    Ok((duration, omit))
}
