//! Whether a test may run now: its request checked against the server's limits
//! (`--max-streams`, `--max-duration`, `--max-send-rate`…), and a free place among
//! `--max-tests` and `--max-tests-per-client`, held by a [`RunningGuard`] for as long as the
//! test runs. Every refusal names the limit, in words sent to the client as they are.
//!
//! Not the handshake before it (see [`session`](super::session)) nor the limits on
//! connections still saying what they are ([`conn`](super::conn)).

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::Ctx;
use crate::config::{EndCondition, StreamDirection, TestSpec, Workload};
use crate::proto::{ErrorCode, StreamLayout};

/// Checks a request: a malformed one is a bad request, one beyond the server's limits is
/// refused naming the limit. The message goes to the client as-is.
pub(super) fn admit(spec: &TestSpec, ctx: &Ctx) -> Result<(), (ErrorCode, String)> {
    spec.validate()
        .map_err(|e| (ErrorCode::BadRequest, format!("invalid test: {e}")))?;
    within_limits(spec, ctx).map_err(|m| (ErrorCode::LimitExceeded, m))
}

fn within_limits(spec: &TestSpec, ctx: &Ctx) -> Result<(), String> {
    let l = &ctx.limits;
    match &spec.workload {
        Workload::Throughput(tp) => {
            let server_sends = StreamLayout::new(tp).contains(StreamDirection::ServerToClient);
            if server_sends && let Some(u) = tp.udp {
                udp_within_send_cap(u.bitrate, l.max_send_rate)?;
            } else if server_sends {
                ctx.governor
                    .admit(tp.bitrate, usize::from(tp.streams.get()))?;
            }
            if tp.block_len.get() > l.max_block_len {
                return Err(format!(
                    "the test asks for {}-byte blocks; this server allows at most {} \
                     (--max-block-len)",
                    tp.block_len, l.max_block_len
                ));
            }
            // UDP streams open no connection, but each is a socket and a thread all the same.
            let n = StreamLayout::new(tp).streams();
            if n > usize::from(l.max_streams) {
                return Err(format!(
                    "the test asks for {n} data connections; this server allows at most {} \
                     (--max-streams)",
                    l.max_streams
                ));
            }
        }
        Workload::RequestResponse(rr) => {
            if rr.flows.get() > l.max_flows {
                return Err(format!(
                    "the test asks for {} flows; this server allows at most {} (--max-flows)",
                    rr.flows, l.max_flows
                ));
            }
            // The governor paces TCP answers; UDP answers it cannot slow down, so a large-answer
            // `--rr -u` test must be paced (`--rate`) within the cap.
            if rr.udp.is_some() && rr.response_len.get() >= super::governor::PACED_RR_ANSWER {
                let bits = rr.rate_per_flow.map(|r| {
                    r * f64::from(rr.flows.get()) * f64::from(rr.response_len.get()) * 8.0
                });
                match (bits, l.max_send_rate) {
                    (None, Some(cap)) => {
                        return Err(format!(
                            "the UDP request/response test asks for unpaced {}-byte answers; \
                             this server sends at most {} (--max-send-rate): give --rate",
                            rr.response_len,
                            crate::units::format_bits_per_second(cap as f64)
                        ));
                    }
                    (b, cap) => udp_within_send_cap(b.map(|b| b.ceil() as u64), cap)?,
                }
            }
        }
    }
    let asked = match spec.end {
        EndCondition::Duration(d) => d.saturating_add(spec.omit),
        // A byte count has no length, but its warm-up alone must fit.
        EndCondition::Bytes(_) => spec.omit,
    };
    if asked > l.max_duration || (spec.omit > Duration::ZERO && spec.omit >= l.max_duration) {
        return Err(format!(
            "the test asks for {asked:?}; this server allows at most {:?} (--max-duration)",
            l.max_duration
        ));
    }
    Ok(())
}

/// A UDP test the server would send for: the governor cannot slow UDP senders down once they
/// run, so a server with `--max-send-rate` takes only a paced test whose total fits it.
pub(super) fn udp_within_send_cap(asked: Option<u64>, cap: Option<u64>) -> Result<(), String> {
    let Some(cap) = cap else { return Ok(()) };
    match asked {
        Some(b) if b <= cap => Ok(()),
        Some(b) => Err(format!(
            "the UDP test asks the server to send {}; this server sends at most {} \
             (--max-send-rate)",
            crate::units::format_bits_per_second(b as f64),
            crate::units::format_bits_per_second(cap as f64)
        )),
        None => Err(format!(
            "the UDP test asks the server to send unpaced (-b 0); this server sends at most {} \
             (--max-send-rate): give -b",
            crate::units::format_bits_per_second(cap as f64)
        )),
    }
}

/// Counts a test as running if the limits allow another, in total and from `client`; the
/// refusal names the limit.
pub(super) fn try_running_guard(ctx: &Arc<Ctx>, client: IpAddr) -> Result<RunningGuard, String> {
    let (client, shown) = client_key(client);
    {
        let mut per = ctx
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let n = per.entry(client).or_insert(0);
        if *n >= ctx.limits.max_tests_per_client {
            return Err(format!(
                "{shown} already runs {} tests on this server, its limit \
                 (--max-tests-per-client); try again when one ends",
                *n
            ));
        }
        *n += 1;
    }
    // From here the guard owns the per-client count; `total` says whether it also holds one
    // of the server's slots.
    let mut guard = RunningGuard {
        ctx: Arc::clone(ctx),
        client,
        total: false,
    };
    ctx.running
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < ctx.limits.max_tests).then_some(n + 1)
        })
        .map_err(|_| {
            format!(
                "the server is running its maximum of {} tests at once (--max-tests); try \
                 again shortly",
                ctx.limits.max_tests
            )
        })?;
    guard.total = true;
    Ok(guard)
}

/// Where a client's tests are counted, and how to name it: its address, IPv4-mapped ones as
/// IPv4. Not its IPv6 /64: in a cloud subnet every instance has an address from the same /64,
/// and a fleet of test clients there must not share one client's allowance.
fn client_key(ip: IpAddr) -> (IpAddr, String) {
    let ip = ip.to_canonical();
    (ip, ip.to_string())
}

/// Counts a running test (in total and for its client) while alive.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    ctx: Arc<Ctx>,
    client: IpAddr,
    total: bool,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if self.total {
            self.ctx.running.fetch_sub(1, Ordering::SeqCst);
        }
        let mut per = self
            .ctx
            .per_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = per.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_counted_by_address() {
        // Two instances in one cloud subnet (one /64) are two clients.
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_ne!(client_key(a).0, client_key(b).0);
        // IPv4, also when it arrives mapped on a dual-stack socket, is counted as IPv4.
        let v4: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(
            client_key(v4),
            ("192.0.2.7".parse().unwrap(), "192.0.2.7".into())
        );
    }

    #[test]
    fn a_udp_test_the_server_sends_for_fits_its_send_cap_or_is_refused() {
        assert!(udp_within_send_cap(None, None).is_ok());
        assert!(udp_within_send_cap(Some(10_000_000), Some(10_000_000)).is_ok());
        let e = udp_within_send_cap(Some(20_000_000), Some(10_000_000)).unwrap_err();
        assert!(e.contains("--max-send-rate"), "{e}");
        let e = udp_within_send_cap(None, Some(10_000_000)).unwrap_err();
        assert!(e.contains("unpaced"), "{e}");
    }
}
