//! Whether a test may run now: its request checked against the server's limits
//! (`--max-streams`, `--max-duration`, `--max-send-rate`…), and a free place among
//! `--max-tests` and `--max-tests-per-client` with everything it will open reserved from the
//! server's [`budget`](super::budget), held by a [`RunningGuard`] for as long as the test
//! runs. Every refusal names the limit, in words sent to the client as they are.
//!
//! Not the handshake before it (see [`session`](super::session)) nor the limits on
//! connections still saying what they are ([`conn`](super::conn)).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::budget::{Need, Reservation};
use super::context::Ctx;
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
            if tp.under_load.is_some() {
                // A client runs it as its parts: a request for it whole is not xbench's.
                return Err(
                    "a latency-under-load test runs as separate tests (its probes and its load); \
                     this request asks for it whole"
                        .into(),
                );
            }
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

/// What a test of `spec` takes from the server's budget (see [`budget`](super::budget)).
pub(super) fn need(spec: &TestSpec) -> Need {
    match &spec.workload {
        Workload::Throughput(tp) => {
            let layout = StreamLayout::new(tp);
            let p = u64::from(tp.streams.get());
            let per = (layout.streams() as u64).div_ceil(p.max(1));
            // A sendfile payload is a memfd.
            let payload =
                tp.udp.is_none() && tp.zerocopy && layout.contains(StreamDirection::ServerToClient);
            Need::streams(p, per, u64::from(payload))
        }
        Workload::RequestResponse(rr) if rr.connect_per_transaction => {
            Need::connect_per_transaction(u64::from(rr.flows.get()))
        }
        Workload::RequestResponse(rr) => Need::flows(u64::from(rr.flows.get())),
    }
}

/// Counts a test from `client` as running and reserves what it `need`s, if the limits
/// (`--max-tests`, `--max-tests-per-client`) and the budgets allow; the refusal names the
/// limit.
pub(super) fn try_running_guard(
    ctx: &Arc<Ctx>,
    client: IpAddr,
    need: Need,
) -> Result<RunningGuard, String> {
    ctx.budget.reserve(client, need).map(RunningGuard)
}

/// A running test's place (in total and for its client) and what it reserved, while alive.
#[derive(Debug)]
pub(crate) struct RunningGuard(Reservation);

impl RunningGuard {
    /// Gives back the test's place and all it reserved but its control connection, which the
    /// session keeps while it says goodbye.
    pub(crate) fn into_control(self) -> Reservation {
        self.0.keep_control()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
