//! The server side of a request/response test: workers answer requests; this controller cuts
//! intervals, hands `--crr` connections to workers as they arrive, and reports the counts the
//! client checks its own against.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tracing::debug;

use super::session::SessionEnd;
use super::test::{Idle, Test, TestEnd, log_test, on_control};
use crate::config::{RrSpec, TestSpec};
use crate::control::sleep_until_opt;
use crate::engine::rr::{self, Control, FlowSnapshot, Report, STOPPED, Workers};
use crate::engine::schedule::Schedule;
use crate::proto::{ErrorCode, Message, Ready};
use crate::report::{CpuUsage, SideRrFlow, SideRrInterval, SideRrResults};
use crate::server::governor::{Governor, PACED_RR_ANSWER, PacedSocket};

pub(super) async fn run(mut t: Test, spec: &TestSpec, rr_spec: &RrSpec) -> SessionEnd {
    let flows = usize::from(rr_spec.flows.get());
    let ids: Vec<u16> = (0..flows).map(|i| i as u16).collect();
    let plan = rr::server::Plan {
        request_len: u64::from(rr_spec.request_len.get()),
        response_len: u64::from(rr_spec.response_len.get()),
        one_per_connection: rr_spec.connect_per_transaction,
        ping_pong: rr_spec.burst.get() == 1,
        request_timeout: t.ctx.limits.handshake_timeout,
    };
    let n_workers = rr::worker_count(flows);
    let conns: Vec<(u16, Arc<std::net::TcpStream>)> = std::mem::take(&mut t.conns)
        .into_iter()
        .map(|(id, s)| (id, Arc::new(s)))
        .collect();
    // Large answers count against --max-send-rate, the whole test as one stream.
    let paced = t.ctx.limits.max_send_rate.is_some()
        && rr_spec.response_len.get() >= PACED_RR_ANSWER
        && !conns.is_empty();
    let _share = paced.then(|| {
        let sockets = conns.iter().map(|(_, s)| Arc::downgrade(s) as PacedSocket);
        Governor::join_as_one(&t.ctx, sockets.collect())
    });
    let mut shares: Vec<Vec<(u16, Arc<std::net::TcpStream>)>> =
        (0..n_workers).map(|_| Vec::new()).collect();
    for (i, c) in conns.into_iter().enumerate() {
        shares[i % n_workers].push(c);
    }
    let control = Arc::new(Control::default());
    let (tx, mut reports) = mpsc::unbounded_channel();
    let mut spawned = Vec::with_capacity(n_workers);
    for (i, share) in shares.into_iter().enumerate() {
        match rr::server::spawn(i, plan, share, &ids, Arc::clone(&control), tx.clone()) {
            Ok(w) => spawned.push(w),
            Err(e) => {
                drop(Workers::new(Arc::clone(&control), spawned));
                let msg = format!("server could not start a request/response worker: {e}");
                return t.abort(ErrorCode::ServerError, msg).await;
            }
        }
    }
    drop(tx);
    let workers = Workers::new(control, spawned);
    let handoff = Arc::new(workers.handoff(flows * 2 + 16));
    if rr_spec.connect_per_transaction {
        t.registration
            .route_directly(Arc::clone(&handoff), rr_spec.flows.get());
    }

    let start = Instant::now();
    if t.send(&Message::Ready(Ready {
        sockets: Vec::new(),
    }))
    .await
    .is_err()
    {
        return SessionEnd::Other;
    }
    let schedule = Schedule::for_spec(spec);
    let mut next_boundary = schedule.next_boundary(Duration::ZERO);
    let mut interval_start = Duration::ZERO;
    let mut next_index = 0u32;
    let hard_stop = t.hard_stop(spec, start);
    let mut abort = t.ctx.abort.clone();
    let mut acc = Totals::new(&ids, n_workers);
    let mut crr_open = rr_spec.connect_per_transaction;

    let idle_limit = t.ctx.limits.idle_timeout;
    let mut idle = Idle::new(0);
    let mut idle_tick = tokio::time::interval(Duration::from_secs(1));
    // A paced test slower than one transaction per idle period is quiet, not dead.
    let check_idle = rr_spec
        .period()
        .is_none_or(|p| p.saturating_mul(2) < idle_limit);
    let end = 'test: loop {
        let boundary_at = next_boundary.map(|b| start + b);
        tokio::select! {
            biased;
            msg = t.rd.next() => break on_control(msg),
            conn = t.data.recv(), if crr_open => match conn {
                // Before the direct route was set up; from then on they skip this task.
                Some((flow, sock, _)) if usize::from(flow) < flows => handoff.give(flow, sock),
                Some((flow, _, from)) => debug!(%from, flow, "dropped a --crr connection naming no flow of its test"),
                None => crr_open = false,
            },
            r = reports.recv() => match r {
                Some(Report::Snapshot { worker, epoch, flows }) => {
                    for iv in acc.snapshot(worker, epoch, flows) {
                        if let Err(e) = t.send(&Message::RrInterval(iv)).await {
                            break 'test TestEnd::ClientGone(e);
                        }
                    }
                }
                Some(Report::Failed { flow, error }) => debug!(peer = %t.peer, flow, "flow ended: {error}"),
                Some(Report::Done { .. }) | None => {}
            },
            _ = sleep_until_opt(boundary_at) => {
                let Some(b) = next_boundary else { continue };
                let now = start.elapsed();
                let epoch = workers.next_epoch();
                acc.pending(epoch, SideRrInterval {
                    index: next_index,
                    start_s: interval_start.as_secs_f64(),
                    end_s: now.as_secs_f64(),
                    omitted: schedule.is_omitted(b),
                    transactions: 0,
                    retransmits: 0,
                    connections: 0,
                }, schedule.reports_intervals());
                next_index += 1;
                interval_start = now;
                next_boundary = schedule.next_boundary(now);
            }
            _ = idle_tick.tick(), if check_idle => {
                let progress = workers.control.activity.load(std::sync::atomic::Ordering::Relaxed);
                if idle.stalled(progress, idle_limit) {
                    break TestEnd::ClientGone(format!("no request arrived for {idle_limit:?}"));
                }
            }
            _ = tokio::time::sleep_until(hard_stop.into()) => break TestEnd::Overran,
            () = async { let _ = abort.wait_for(|a| *a).await; } => break TestEnd::ShuttingDown,
        }
    };

    workers.set_state(STOPPED);
    let mut done = 0;
    let mut cpu = CpuUsage::default();
    let mut last = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    while done < workers.len() {
        match tokio::time::timeout_at(until, reports.recv()).await {
            Ok(Some(Report::Done { flows, cpu: c, .. })) => {
                done += 1;
                cpu += c;
                last.extend(flows);
            }
            Ok(Some(Report::Snapshot {
                worker,
                epoch,
                flows,
            })) => {
                let _ = acc.snapshot(worker, epoch, flows);
            }
            Ok(Some(Report::Failed { .. })) => {}
            Ok(None) | Err(_) => break,
        }
    }
    drop(workers);
    let last_iv = acc.finish(
        last,
        SideRrInterval {
            index: next_index,
            start_s: interval_start.as_secs_f64(),
            end_s: start.elapsed().as_secs_f64(),
            omitted: false,
            transactions: 0,
            retransmits: 0,
            connections: 0,
        },
    );
    let transactions: u64 = acc.flows.iter().map(|f| f.transactions).sum();
    if matches!(end, TestEnd::Finished { .. }) {
        if schedule.reports_intervals() {
            let _ = t.send(&Message::RrInterval(last_iv)).await;
        }
        let results = SideRrResults {
            flows: acc.flows.clone(),
            measured_retransmits: acc.measured_retransmits,
            cpu,
        };
        t.send_results(&Message::RrResults(results)).await;
        let _ = t.wr.shutdown().await;
    } else {
        t.tell_end(&end).await;
    }
    log_test(&t, spec, &end, 0, Some(transactions), start.elapsed(), 0);
    match end {
        TestEnd::Finished { interrupted: false } => SessionEnd::Completed,
        _ => SessionEnd::Other,
    }
}

/// Per-interval and per-flow sums of the workers' snapshots.
#[derive(Debug)]
struct Totals {
    workers: usize,
    /// Intervals waiting for every worker's snapshot, by epoch.
    waiting: Vec<(u32, SideRrInterval, usize, bool)>,
    /// The newest epoch each worker answered.
    answered: Vec<u32>,
    flows: Vec<SideRrFlow>,
    measured_retransmits: u64,
}

impl Totals {
    fn new(ids: &[u16], workers: usize) -> Self {
        Totals {
            workers,
            waiting: Vec::new(),
            answered: vec![0; workers],
            flows: ids
                .iter()
                .map(|&flow| SideRrFlow {
                    flow,
                    transactions: 0,
                    retransmits: 0,
                    connections: 0,
                })
                .collect(),
            measured_retransmits: 0,
        }
    }

    fn pending(&mut self, epoch: u32, iv: SideRrInterval, report: bool) {
        self.waiting.push((epoch, iv, 0, report));
    }

    /// Adds `worker`'s snapshot answering `epoch`; returns the intervals every worker has now
    /// answered, oldest first (none when intervals are not reported).
    fn snapshot(
        &mut self,
        worker: usize,
        epoch: u32,
        flows: Vec<FlowSnapshot>,
    ) -> Vec<SideRrInterval> {
        // Epochs this worker slept through: it has nothing separate for them.
        if let Some(prev) = self.answered.get_mut(worker) {
            let skipped = prev.saturating_add(1)..epoch;
            *prev = epoch.max(*prev);
            for w in &mut self.waiting {
                if skipped.contains(&w.0) {
                    w.2 += 1;
                }
            }
        }
        if let Some(pos) = self.waiting.iter().rposition(|(e, ..)| *e <= epoch) {
            self.credit(pos, &flows);
        }
        let mut done = Vec::new();
        while let Some(pos) = self.waiting.iter().position(|w| w.2 >= self.workers) {
            let (_, iv, _, report) = self.waiting.remove(pos);
            if report {
                done.push(iv);
            }
        }
        done
    }

    fn credit(&mut self, pos: usize, flows: &[FlowSnapshot]) {
        let omitted = self.waiting[pos].1.omitted;
        let mut add = SideRrInterval {
            ..self.waiting[pos].1.clone()
        };
        add.transactions = 0;
        add.retransmits = 0;
        add.connections = 0;
        for f in flows {
            self.add_flow(f, omitted);
            add.transactions += f.transactions;
            add.retransmits += f.retransmits;
            add.connections += f.connections;
        }
        let w = &mut self.waiting[pos];
        w.1.transactions += add.transactions;
        w.1.retransmits += add.retransmits;
        w.1.connections += add.connections;
        w.2 += 1;
    }

    fn add_flow(&mut self, f: &FlowSnapshot, omitted: bool) {
        if let Some(t) = self.flows.iter_mut().find(|t| t.flow == f.flow) {
            t.transactions += f.transactions;
            t.retransmits += f.retransmits;
            t.connections += f.connections;
        }
        if !omitted {
            self.measured_retransmits += f.retransmits;
        }
    }

    /// The last, partial interval from the workers' final snapshots.
    fn finish(&mut self, last: Vec<FlowSnapshot>, mut iv: SideRrInterval) -> SideRrInterval {
        for f in &last {
            self.add_flow(f, false);
            iv.transactions += f.transactions;
            iv.retransmits += f.retransmits;
            iv.connections += f.connections;
        }
        iv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(flow: u16, transactions: u64) -> Vec<FlowSnapshot> {
        vec![FlowSnapshot::counted(flow, transactions)]
    }

    fn interval(index: u32) -> SideRrInterval {
        SideRrInterval {
            index,
            start_s: f64::from(index),
            end_s: f64::from(index + 1),
            omitted: false,
            transactions: 0,
            retransmits: 0,
            connections: 0,
        }
    }

    #[test]
    fn a_worker_that_slept_through_an_interval_does_not_hold_it_back() {
        let mut t = Totals::new(&[0, 1], 2);
        t.pending(1, interval(0), true);
        assert!(t.snapshot(0, 1, snap(0, 10)).is_empty());
        t.pending(2, interval(1), true);
        assert!(t.snapshot(0, 2, snap(0, 10)).is_empty());
        // Worker 1 answers only epoch 2, with both intervals' transactions.
        let done = t.snapshot(1, 2, snap(1, 14));
        let got: Vec<(u32, u64)> = done.iter().map(|i| (i.index, i.transactions)).collect();
        assert_eq!(got, vec![(0, 10), (1, 24)]);
        assert!(t.waiting.is_empty());
        assert_eq!(t.flows.iter().map(|f| f.transactions).sum::<u64>(), 34);
    }
}
