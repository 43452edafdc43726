//! The client side of a request/response test: workers drive the flows and record latency;
//! this controller cuts intervals, merges histograms (never averaging percentiles), pairs
//! them with the server's counts, and builds the totals.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;

use super::{ClientConfig, ClientEvent, ReportBody, Session, ended_by, send};
use crate::config::{EndCondition, RrSpec};
use crate::control::sleep_until_opt;
use crate::engine::rr::{self, Control, DRAINING, FlowSnapshot, Report, STOPPED, Workers};
use crate::engine::schedule::Schedule;
use crate::error::Error;
use crate::latency::Distribution;
use crate::proto::{Finish, Message};
use crate::report::{
    CpuReport, CpuUsage, Outcome, Pacing, RrFlowSummary, RrInterval, RrReport, RrSummary, RttStats,
    SideRrInterval, SideRrResults, Summary, TestReport,
};

/// Flows up to this many keep a latency histogram each for the per-flow summary; beyond it
/// only the merged distributions are kept (a histogram per flow would cost ~100 KiB each).
pub const PER_FLOW_LATENCY_LIMIT: usize = 64;

pub(super) async fn run(
    mut session: Session,
    config: &ClientConfig,
    spec: &RrSpec,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
    cancel: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    tokio::pin!(cancel);
    let flows = usize::from(spec.flows.get());
    let mut warnings = Vec::new();
    // --crr opens its connections as it goes.
    let persistent = if spec.connect_per_transaction {
        0
    } else {
        flows
    };
    let (conns, _) = session
        .connect_data(config, persistent, &mut warnings, cancel.as_mut())
        .await?;
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }

    let started_at = SystemTime::now();
    let start = Instant::now();
    let control = Arc::new(Control::default());
    let (tx, mut reports) = mpsc::unbounded_channel();
    let plan = rr::client::Plan {
        request_len: u64::from(spec.request_len.get()),
        response_len: u64::from(spec.response_len.get()),
        burst: spec.burst.get() as usize,
        period: spec.period(),
        base: start,
        stall_timeout: config.stall_timeout,
        connect: spec.connect_per_transaction.then(|| rr::client::Connect {
            addr: session.server_addr,
            bind: config.bind,
            socket: config.spec.socket.clone(),
            cookie: session.cookie,
        }),
    };
    let n_workers = rr::worker_count(flows);
    let mut shares: Vec<Vec<(u16, Option<std::net::TcpStream>)>> =
        (0..n_workers).map(|_| Vec::new()).collect();
    let mut conns = conns.into_iter().map(|(s, _)| s);
    for id in 0..flows {
        shares[id % n_workers].push((id as u16, conns.next()));
    }
    let mut spawned = Vec::with_capacity(n_workers);
    for (i, share) in shares.into_iter().enumerate() {
        match rr::client::spawn(
            i,
            plan.clone(),
            share,
            Arc::clone(&control),
            tx.clone(),
            flows,
        ) {
            Ok(w) => spawned.push(w),
            Err(e) => {
                drop(Workers::new(Arc::clone(&control), spawned));
                return Err(Error::io("starting a request/response worker", e));
            }
        }
    }
    drop(tx);
    let workers = Workers::new(Arc::clone(&control), spawned);
    on_event(ClientEvent::Started {
        server: session.server.clone(),
        streams: Vec::new(),
    });

    let schedule = Schedule::for_spec(&config.spec);
    let mut acc = Accumulator::new(spec, n_workers, schedule.reports_intervals());
    let mut next_boundary = schedule.next_boundary(Duration::ZERO);
    let mut interval_start = Duration::ZERO;
    let deadline = match config.spec.end {
        EndCondition::Duration(d) => Some(start + config.spec.omit + d),
        EndCondition::Bytes(_) => None,
    };
    let mut outcome = Outcome::Completed;
    let mut control_open = true;
    let addr = session.addr.clone();

    // Phase 1: transactions run until the end, the user, or a failure stops them.
    loop {
        let boundary_at = next_boundary.map(|b| start + b);
        tokio::select! {
            biased;
            () = &mut cancel => { outcome = Outcome::Interrupted; break; }
            _ = sleep_until_opt(deadline) => break,
            r = reports.recv() => match r {
                Some(Report::Failed { flow, error }) => {
                    acc.flow_error(flow, &error);
                    outcome = Outcome::Failed { error: flow_error(flow, &error) };
                    break;
                }
                Some(r) => acc.report(r, on_event),
                None => break,
            },
            msg = session.rd.next() => match msg {
                Ok(Some(Message::RrInterval(iv))) => acc.server_interval(iv, on_event),
                other => {
                    let (error, usable) = ended_by(other, &addr);
                    outcome = Outcome::Failed { error };
                    control_open = usable;
                    break;
                }
            },
            _ = sleep_until_opt(boundary_at) => {
                let Some(b) = next_boundary else { continue };
                let now = start.elapsed();
                acc.close_interval(
                    workers.next_epoch(),
                    interval_start.as_secs_f64(),
                    now.as_secs_f64(),
                    schedule.is_omitted(b),
                );
                interval_start = now;
                next_boundary = schedule.next_boundary(now);
            }
        }
    }

    // Phase 2: no new transactions; let those in flight finish so both ends count the same
    // ones, then collect the workers' last figures.
    let interrupted = outcome == Outcome::Interrupted;
    let drain_limit = if interrupted {
        config.drain_timeout.min(Duration::from_secs(2))
    } else {
        config.drain_timeout
    };
    workers.set_state(if matches!(outcome, Outcome::Failed { .. }) {
        STOPPED
    } else {
        DRAINING
    });
    let drain_until = tokio::time::Instant::now() + drain_limit;
    let mut done = 0;
    let mut abandoned = false;
    let mut cpu = CpuUsage::default();
    let mut last: Vec<FlowSnapshot> = Vec::new();
    while done < n_workers {
        tokio::select! {
            r = reports.recv() => match r {
                Some(Report::Done { flows, cpu: c, .. }) => {
                    done += 1;
                    cpu += c;
                    last.extend(flows);
                }
                Some(Report::Failed { flow, error }) => {
                    acc.flow_error(flow, &error);
                    if outcome == Outcome::Completed {
                        outcome = Outcome::Failed { error: flow_error(flow, &error) };
                    }
                }
                Some(r) => acc.report(r, on_event),
                None => break,
            },
            _ = tokio::time::sleep_until(drain_until), if !abandoned => {
                abandoned = true;
                warnings.push(format!(
                    "transactions still unanswered {drain_limit:?} after the end were abandoned"
                ));
                workers.set_state(STOPPED);
            }
            // A worker told to stop answers within a blocking call's slice; one that does not
            // must not hang the test (its last partial interval is lost, and said so).
            _ = tokio::time::sleep_until(drain_until + Duration::from_secs(2)), if abandoned => {
                warnings.push(format!(
                    "{} of {n_workers} request/response workers did not stop when told to; \
                     their last partial interval is missing",
                    n_workers - done
                ));
                break;
            }
        }
    }
    let end = start.elapsed();
    acc.finish_interval(
        last,
        interval_start.as_secs_f64(),
        end.as_secs_f64(),
        on_event,
    );
    drop(workers);

    // Phase 3: tell the server, collect its counts.
    let mut server: Option<SideRrResults> = None;
    if control_open
        && send(
            &mut session.wr,
            &Message::Finish(Finish { interrupted }),
            &addr,
        )
        .await
        .is_ok()
    {
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match tokio::time::timeout_at(until, session.rd.next()).await {
                Ok(Ok(Some(Message::RrInterval(iv)))) => acc.server_interval(iv, on_event),
                Ok(Ok(Some(Message::RrResults(r)))) => {
                    server = Some(r);
                    break;
                }
                Ok(Ok(Some(Message::Error(e)))) => {
                    warnings.push(format!("the server reported: {}", e.message));
                    break;
                }
                _ => {
                    warnings.push(format!("{addr} did not send its results"));
                    break;
                }
            }
        }
    }
    let measured_s = match config.spec.end {
        EndCondition::Duration(d) if outcome == Outcome::Completed => d.as_secs_f64(),
        _ => end.saturating_sub(config.spec.omit).as_secs_f64(),
    };
    let rr = acc.into_report(spec, server.as_ref(), measured_s, &mut warnings);
    let transactions = rr.summary.total_transactions;
    let per_tx = |c: CpuUsage| (transactions > 0).then(|| c.total_s() * 1e6 / transactions as f64);
    let cpu = CpuReport {
        client: cpu,
        server: server.as_ref().map(|s| s.cpu),
        client_s_per_gb: None,
        server_s_per_gb: None,
        client_us_per_transaction: per_tx(cpu),
        server_us_per_transaction: server.as_ref().and_then(|s| per_tx(s.cpu)),
    };
    Ok(session.report(
        config,
        started_at,
        ReportBody {
            streams: Vec::new(),
            intervals: Vec::new(),
            summary: Summary {
                directions: Vec::new(),
                measured_s,
            },
            rr: Some(rr),
            cpu,
            outcome,
            warnings,
        },
    ))
}

fn flow_error(flow: u16, error: &str) -> String {
    if flow == u16::MAX {
        error.to_owned()
    } else {
        format!("flow {flow}: {error}")
    }
}

/// One interval being assembled from the workers' snapshots.
#[derive(Debug)]
struct Pending {
    index: u32,
    start_s: f64,
    end_s: f64,
    omitted: bool,
    reported: usize,
    flows: Vec<FlowSnapshot>,
}

/// A finished interval waiting for the server's counts.
#[derive(Debug)]
struct Ready {
    client: Option<RrInterval>,
    server: Option<SideRrInterval>,
}

#[derive(Debug, Default)]
struct FlowTotals {
    transactions: u64,
    total_transactions: u64,
    retransmits: u64,
    latency: Option<Distribution>,
    error: Option<String>,
}

/// Turns worker snapshots into intervals and totals.
#[derive(Debug)]
struct Accumulator {
    workers: usize,
    report_intervals: bool,
    next_index: u32,
    pending: BTreeMap<u32, Pending>,
    /// The newest epoch each worker answered.
    answered: Vec<u32>,
    ready: BTreeMap<u32, Ready>,
    done: Vec<RrInterval>,
    total: Distribution,
    retransmits: u64,
    connections: u64,
    rtt: Option<(u32, f64, u32, u64)>,
    flows: Vec<FlowTotals>,
}

impl Accumulator {
    fn new(spec: &RrSpec, workers: usize, report_intervals: bool) -> Self {
        let n = usize::from(spec.flows.get());
        let per_flow_latency = n <= PER_FLOW_LATENCY_LIMIT;
        Accumulator {
            workers,
            report_intervals,
            next_index: 0,
            pending: BTreeMap::new(),
            answered: vec![0; workers],
            ready: BTreeMap::new(),
            done: Vec::new(),
            total: Distribution::new(),
            retransmits: 0,
            connections: 0,
            rtt: None,
            flows: (0..n)
                .map(|_| FlowTotals {
                    latency: per_flow_latency.then(Distribution::new),
                    ..FlowTotals::default()
                })
                .collect(),
        }
    }

    /// An interval boundary passed: its figures arrive as snapshots answering `epoch`.
    fn close_interval(&mut self, epoch: u32, start_s: f64, end_s: f64, omitted: bool) {
        let index = self.next_index;
        self.next_index += 1;
        self.pending.insert(
            epoch,
            Pending {
                index,
                start_s,
                end_s,
                omitted,
                reported: 0,
                flows: Vec::new(),
            },
        );
    }

    fn report(&mut self, r: Report, on_event: &mut (dyn FnMut(ClientEvent) + Send)) {
        let Report::Snapshot {
            worker,
            epoch,
            flows,
        } = r
        else {
            return;
        };
        // A worker that slept through epochs answers only the newest, with everything since
        // its last snapshot: it has nothing separate for the ones it skipped.
        if let Some(prev) = self.answered.get_mut(worker) {
            let first_skipped = prev.saturating_add(1);
            if epoch > first_skipped {
                for (_, p) in self.pending.range_mut(first_skipped..epoch) {
                    p.reported += 1;
                }
            }
            *prev = epoch.max(*prev);
        }
        if let Some((_, p)) = self.pending.range_mut(..=epoch).next_back() {
            p.flows.extend(flows);
            p.reported += 1;
        }
        let complete: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| p.reported >= self.workers)
            .map(|(e, _)| *e)
            .collect();
        for e in complete {
            if let Some(p) = self.pending.remove(&e) {
                self.absorb(p, on_event);
            }
        }
    }

    fn finish_interval(
        &mut self,
        last: Vec<FlowSnapshot>,
        start_s: f64,
        end_s: f64,
        on_event: &mut (dyn FnMut(ClientEvent) + Send),
    ) {
        // Snapshots still pending (a worker never answered) are folded in as they are.
        let stale: Vec<Pending> = std::mem::take(&mut self.pending).into_values().collect();
        for p in stale {
            self.absorb(p, on_event);
        }
        let p = Pending {
            index: self.next_index,
            start_s,
            end_s,
            omitted: false,
            reported: self.workers,
            flows: last,
        };
        self.next_index += 1;
        self.absorb(p, on_event);
    }

    /// Merges one interval's snapshots and adds them to the totals.
    fn absorb(&mut self, p: Pending, on_event: &mut (dyn FnMut(ClientEvent) + Send)) {
        let mut dist = Distribution::new();
        let mut transactions = 0;
        let mut retransmits = 0;
        let mut connections = 0;
        let mut srtt_sum = 0.0;
        let mut srtt_n = 0u64;
        for f in &p.flows {
            transactions += f.transactions;
            retransmits += f.retransmits;
            connections += f.connections;
            if let Some(rtt) = f.srtt_us {
                srtt_sum += f64::from(rtt);
                srtt_n += 1;
                let r = self.rtt.get_or_insert((rtt, 0.0, rtt, 0));
                r.0 = r.0.min(rtt);
                r.2 = r.2.max(rtt);
                r.1 += f64::from(rtt);
                r.3 += 1;
            }
            if let Some(rec) = &f.latency {
                dist.add_recorder(rec);
            }
            if let Some(t) = self.flows.get_mut(usize::from(f.flow)) {
                t.total_transactions += f.transactions;
                if !p.omitted {
                    t.transactions += f.transactions;
                    t.retransmits += f.retransmits;
                    if let (Some(d), Some(rec)) = (t.latency.as_mut(), &f.latency) {
                        d.add_recorder(rec);
                    }
                }
            }
        }
        if !p.omitted {
            self.total.add(&dist);
            self.retransmits += retransmits;
            self.connections += connections;
        }
        let span = p.end_s - p.start_s;
        let iv = RrInterval {
            index: p.index,
            start_s: p.start_s,
            end_s: p.end_s,
            omitted: p.omitted,
            transactions,
            transactions_per_second: if span > 0.0 {
                transactions as f64 / span
            } else {
                0.0
            },
            latency: dist.stats(),
            retransmits,
            server_retransmits: None,
            srtt_us: (srtt_n > 0).then(|| srtt_sum / srtt_n as f64),
            connections,
            histogram: dist.encode(),
        };
        if !self.report_intervals {
            return;
        }
        self.ready.entry(iv.index).or_insert(Ready {
            client: None,
            server: None,
        });
        if let Some(r) = self.ready.get_mut(&iv.index) {
            r.client = Some(iv);
        }
        self.emit(false, on_event);
    }

    fn server_interval(
        &mut self,
        iv: SideRrInterval,
        on_event: &mut (dyn FnMut(ClientEvent) + Send),
    ) {
        if !self.report_intervals {
            return;
        }
        let r = self.ready.entry(iv.index).or_insert(Ready {
            client: None,
            server: None,
        });
        r.server = Some(iv);
        self.emit(false, on_event);
    }

    /// Emits finished intervals in order; one whose server counts are more than one interval
    /// late (or never coming, with `all`) goes out without them.
    fn emit(&mut self, all: bool, on_event: &mut (dyn FnMut(ClientEvent) + Send)) {
        let newest_client = self
            .ready
            .iter()
            .rev()
            .find(|(_, r)| r.client.is_some())
            .map(|(i, _)| *i);
        while let Some((&i, r)) = self.ready.first_key_value() {
            let late = newest_client.is_some_and(|n| n > i + 1);
            if r.client.is_none() || !(r.server.is_some() || late || all) {
                break;
            }
            let Some((_, r)) = self.ready.pop_first() else {
                break;
            };
            if let Some(mut iv) = r.client {
                iv.server_retransmits = r.server.map(|s| s.retransmits);
                on_event(ClientEvent::RrInterval(iv.clone()));
                self.done.push(iv);
            }
        }
    }

    fn flow_error(&mut self, flow: u16, error: &str) {
        if let Some(f) = self.flows.get_mut(usize::from(flow)) {
            f.error.get_or_insert_with(|| error.to_owned());
        }
    }

    fn into_report(
        mut self,
        spec: &RrSpec,
        server: Option<&SideRrResults>,
        measured_s: f64,
        warnings: &mut Vec<String>,
    ) -> RrReport {
        let mut sink = |_e: ClientEvent| {};
        self.emit(true, &mut sink);
        let transactions: u64 = self.flows.iter().map(|f| f.transactions).sum();
        let total_transactions: u64 = self.flows.iter().map(|f| f.total_transactions).sum();
        let server_total = server.map(|s| s.flows.iter().map(|f| f.transactions).sum::<u64>());
        if let Some(st) = server_total
            && st != total_transactions
        {
            warnings.push(format!(
                "the server counted {st} transactions, this client {total_transactions}: \
                     some requests were cut short at the end"
            ));
        }
        let tps = if measured_s > 0.0 {
            transactions as f64 / measured_s
        } else {
            0.0
        };
        let pacing = spec.rate_per_flow.map(|r| {
            let asked = r * f64::from(spec.flows.get());
            Pacing {
                asked_per_second: asked,
                achieved_per_second: tps,
                kept_up: tps >= asked * 0.99,
            }
        });
        if let Some(p) = pacing.filter(|p| !p.kept_up) {
            warnings.push(format!(
                "asked for {:.0} transactions/s, achieved {:.0}/s: the path or the hosts cannot \
                 keep this rate; latencies are measured from each transaction's intended start \
                 and include the time it waited",
                p.asked_per_second, p.achieved_per_second
            ));
        }
        let flows = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| RrFlowSummary {
                flow: i as u16,
                transactions: f.transactions,
                total_transactions: f.total_transactions,
                server_transactions: server
                    .and_then(|s| s.flows.iter().find(|x| usize::from(x.flow) == i))
                    .map(|x| x.transactions),
                latency: f.latency.as_ref().and_then(Distribution::stats),
                retransmits: f.retransmits,
                error: f.error.clone(),
            })
            .collect();
        RrReport {
            intervals: self.done,
            summary: RrSummary {
                transactions,
                seconds: measured_s,
                transactions_per_second: tps,
                latency: self.total.stats(),
                coordinated_omission_corrected: spec.rate_per_flow.is_some(),
                retransmits: self.retransmits,
                server_retransmits: server.map(|s| s.measured_retransmits),
                rtt: self.rtt.map(|(min, sum, max, n)| RttStats {
                    min_us: min,
                    mean_us: sum / n as f64,
                    max_us: max,
                }),
                total_transactions,
                server_transactions: server_total,
                connections: self.connections,
                server_connections: server.map(|s| s.flows.iter().map(|f| f.connections).sum()),
                pacing,
                histogram: self.total.encode(),
            },
            flows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(worker: usize, epoch: u32, flow: u16, transactions: u64) -> Report {
        Report::Snapshot {
            worker,
            epoch,
            flows: vec![FlowSnapshot::counted(flow, transactions)],
        }
    }

    #[test]
    fn a_worker_that_slept_through_an_interval_does_not_hold_it_back() {
        let spec = RrSpec {
            flows: std::num::NonZeroU16::new(2).unwrap(),
            ..RrSpec::default()
        };
        let mut acc = Accumulator::new(&spec, 2, true);
        let mut seen = Vec::new();
        let mut on_event = |ev: ClientEvent| {
            if let ClientEvent::RrInterval(iv) = ev {
                seen.push((iv.index, iv.transactions));
            }
        };
        acc.close_interval(1, 0.0, 1.0, false);
        acc.report(snap(0, 1, 0, 10), &mut on_event);
        acc.close_interval(2, 1.0, 2.0, false);
        acc.report(snap(0, 2, 0, 10), &mut on_event);
        // Worker 1 answers only epoch 2, with both intervals' transactions.
        acc.report(snap(1, 2, 1, 14), &mut on_event);
        assert!(acc.pending.is_empty());
        // Intervals go out once the server's counts for them arrive.
        for index in 0..2 {
            let server = SideRrInterval {
                index,
                start_s: f64::from(index),
                end_s: f64::from(index + 1),
                omitted: false,
                transactions: 0,
                retransmits: 0,
                connections: 0,
            };
            acc.server_interval(server, &mut on_event);
        }
        assert_eq!(seen, vec![(0, 10), (1, 24)]);
        // Nothing is lost: the totals hold every transaction.
        assert_eq!(acc.flows.iter().map(|f| f.transactions).sum::<u64>(), 34);
    }
}
