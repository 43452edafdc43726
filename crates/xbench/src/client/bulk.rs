//! The client side of a throughput test: stream threads, live intervals merged with the
//! server's, and the totals.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{ClientConfig, ClientEvent, ReportBody, Session, empty_socket_report, ended_by, send};
use crate::config::{EndCondition, StreamDirection, ThroughputSpec};
use crate::control::sleep_until_opt;
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::stream::{self, Budget, Payload, SendMode};
use crate::error::Error;
use crate::proto::{Finish, Message, StreamLayout};
use crate::report::{Interval, Outcome, SideInterval, SideResults, StreamInfo, TestReport};
use crate::summary::{self, Directions, Window};

pub(super) async fn run(
    mut session: Session,
    config: &ClientConfig,
    tp: &ThroughputSpec,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
    cancel: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    let addr_s = session.addr.clone();
    let (server_addr, client_addr) = (session.server_addr, session.client_addr);
    let layout = StreamLayout::new(tp);
    let dirs: Directions = layout.directions();
    tokio::pin!(cancel);
    let mut warnings = Vec::new();
    let (data, ready) = session
        .connect_data(config, dirs.len(), &mut warnings, cancel.as_mut())
        .await?;
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }
    // Our senders start now: the server's receivers start their clock when this arrives,
    // just ahead of our first byte. A server that cannot hear it will say so below.
    let _ = send(&mut session.wr, &Message::Go, &addr_s).await;

    // Data flows from here; from now on every path ends in a report. This clock starts for
    // our senders and for our receivers alike: the server's first byte arrives about now.
    let started_at = SystemTime::now();
    let start = Instant::now();
    let budget = match config.spec.end {
        EndCondition::Bytes(n) => Some(n),
        EndCondition::Duration(_) => None,
    };
    let send_mode = if tp.zerocopy {
        SendMode::Sendfile
    } else {
        SendMode::Copy
    };
    let send_budget = budget.map(Budget::new);
    let block = tp.block_len.get() as usize;
    let sends = layout.contains(StreamDirection::ClientToServer);
    let payload = match sends.then(|| Payload::new(block, send_mode)).transpose() {
        Ok(p) => p.map(Arc::new),
        Err(e) => return Err(Error::io("preparing the payload", e)),
    };
    let mut handles: Vec<stream::StreamHandle> = Vec::with_capacity(data.len());
    let mut infos = Vec::with_capacity(data.len());
    for (id, (sock, report)) in data.into_iter().enumerate() {
        let id = id as u16;
        let direction = dirs[&id];
        infos.push(StreamInfo {
            id,
            direction,
            client_addr: sock.local_addr().unwrap_or(client_addr),
            server_addr: sock.peer_addr().unwrap_or(server_addr),
            client_socket: report,
            server_socket: ready
                .sockets
                .get(usize::from(id))
                .cloned()
                .unwrap_or_else(empty_socket_report),
        });
        let h = match (direction, &payload) {
            (StreamDirection::ClientToServer, Some(p)) => {
                if let Err(e) = crate::engine::sockopt::pace(&sock, tp.bitrate) {
                    for h in &handles {
                        h.abort();
                    }
                    return Err(e);
                }
                stream::spawn_sender(id, sock, Arc::clone(p), send_budget.clone())
            }
            // The payload exists whenever a stream sends; kept as an error, not a panic.
            (StreamDirection::ClientToServer, None) => {
                Err(std::io::Error::other("no payload for a sending stream"))
            }
            (StreamDirection::ServerToClient, _) => {
                stream::spawn_receiver(id, sock, block, tp.receive)
            }
        };
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                for h in &handles {
                    h.abort();
                }
                return Err(Error::io("starting a stream thread", e));
            }
        }
    }
    on_event(ClientEvent::Started {
        server: session.server.clone(),
        streams: infos.clone(),
    });

    let schedule = Schedule::for_spec(&config.spec);
    let mut sampler = Sampler::new(start, schedule, &handles);
    let mut merger = Merger::new(dirs.clone());
    let mut group = Group::new(handles);

    let deadline = match config.spec.end {
        EndCondition::Duration(d) => Some(start + config.spec.omit + d),
        EndCondition::Bytes(_) => None,
    };
    let mut outcome = Outcome::Completed;
    let mut server_results: Option<SideResults> = None;

    // Phase 1: the test runs until its end condition, the user, or a failure stops it.
    let mut control_open = true;
    loop {
        tokio::select! {
            // Biased: when the deadline and an interval boundary coincide, the deadline wins, so
            // the last interval is closed by the cut at the end mark.
            biased;
            () = &mut cancel => { outcome = Outcome::Interrupted; break; }
            _ = sleep_until_opt(deadline) => break,
            _ = group.all_ended(), if budget.is_some() => break,
            msg = session.rd.next() => match msg {
                Ok(Some(Message::Interval(iv))) => merger.server(iv, on_event),
                other => {
                    let (error, usable) = ended_by(other, &addr_s);
                    outcome = Outcome::Failed { error };
                    control_open = usable;
                    break;
                }
            },
            _ = sleep_until_opt(sampler.next_wakeup()) => {
                if let Some(iv) = sampler.on_wakeup(Instant::now()) {
                    merger.client(iv, on_event);
                }
            }
        }
    }

    // The end mark of a timed or cut-short test: the window closes here, whatever is still
    // in flight. A byte count that ran to its end closes with its last byte instead.
    let window = match (config.spec.end, &outcome) {
        (EndCondition::Bytes(_), Outcome::Completed) => Window::UntilLastByte,
        (EndCondition::Duration(d), Outcome::Completed) => {
            cut(&mut sampler, &mut merger, on_event);
            Window::Fixed(d.as_secs_f64())
        }
        _ => {
            let now = cut(&mut sampler, &mut merger, on_event);
            Window::Fixed(
                now.saturating_duration_since(start + config.spec.omit)
                    .as_secs_f64(),
            )
        }
    };

    // Phase 2: stop sending, tell the server, let the receivers drain, collect its results.
    group.stop_senders();
    let interrupted = outcome == Outcome::Interrupted;
    if control_open
        && send(
            &mut session.wr,
            &Message::Finish(Finish { interrupted }),
            &addr_s,
        )
        .await
        .is_err()
    {
        control_open = false;
    }
    // An interrupted user wants the figures now, not after a slow path drains.
    let drain_limit = if interrupted {
        config.drain_timeout.min(Duration::from_secs(2))
    } else {
        config.drain_timeout
    };
    let drain_deadline = Instant::now() + drain_limit;
    // The server drains its own receivers for as long (by default) before it reports: give
    // its results a few seconds more than our own drain, or both give up at the same moment
    // and the receiver's figures are lost just when they matter (a path holding data back).
    let results_deadline = drain_deadline
        + if interrupted {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(5)
        };
    let mut receivers_done = false;
    let mut drain_over = false;
    while control_open && (server_results.is_none() || !receivers_done) {
        tokio::select! {
            msg = session.rd.next(), if server_results.is_none() => match msg {
                Ok(Some(Message::Interval(iv))) => merger.server(iv, on_event),
                Ok(Some(Message::Results(r))) => server_results = Some(r),
                Ok(Some(Message::Error(e))) => {
                    if outcome == Outcome::Completed {
                        outcome = Outcome::Failed { error: format!("the server ended the test: {}", e.message) };
                    }
                    break;
                }
                _ => {
                    warnings.push(format!("{addr_s} closed the control connection before sending its results"));
                    break;
                }
            },
            _ = group.all_ended(), if !receivers_done => receivers_done = true,
            _ = sleep_until_opt(sampler.next_wakeup()) => {
                if let Some(iv) = sampler.on_wakeup(Instant::now()) {
                    merger.client(iv, on_event);
                }
            }
            _ = tokio::time::sleep_until(drain_deadline.into()), if !drain_over => {
                drain_over = true;
                if !receivers_done {
                    receivers_done = true;
                    warnings.push(format!(
                        "gave up waiting for the end of the test after {drain_limit:?}; figures cover what had arrived"
                    ));
                }
            }
            _ = tokio::time::sleep_until(results_deadline.into()) => break,
            () = &mut cancel, if !interrupted => {
                // A second Ctrl-C: stop waiting.
                outcome = Outcome::Interrupted;
                break;
            }
        }
    }
    let ends = group.collect(Duration::from_secs(2)).await;
    let end = Instant::now();
    let (last, client_results) = sampler.finish(end, &ends);
    if let Some(iv) = last {
        merger.client(iv, on_event);
    }
    let mut intervals = merger.finish(on_event);
    summary::align_warm_up(&mut intervals, &client_results, server_results.as_ref());
    for s in client_results
        .streams
        .iter()
        .chain(server_results.iter().flat_map(|r| &r.streams))
    {
        if let Some(e) = &s.error {
            warnings.push(format!("stream {} ended with an error: {e}", s.stream));
        }
    }
    let summary = summary::summarize(&dirs, &client_results, server_results.as_ref(), window);
    let cpu = summary::cpu_report(&client_results, server_results.as_ref());
    if server_results.is_none() {
        warnings.push("the server's results never arrived: receiver figures of client-to-server streams are missing".into());
    }
    if outcome != Outcome::Interrupted {
        for (direction, sent, missing) in
            summary::undelivered(&dirs, &client_results, server_results.as_ref())
        {
            if missing > (sent / 100).max(64 * 1024) {
                warnings.push(format!(
                    "{}: {} of the {} sent had not arrived {drain_limit:?} after the end — \
                     the path is holding or dropping data (a deep queue in a shaper, or an MTU \
                     black hole that drops every full-size packet: -M 1200 tells)",
                    direction.label(),
                    crate::units::ByteSize(missing),
                    crate::units::ByteSize(sent)
                ));
            }
        }
    }
    Ok(session.report(
        config,
        started_at,
        ReportBody {
            streams: infos,
            intervals,
            summary,
            rr: None,
            cpu,
            outcome,
            warnings,
        },
    ))
}

/// Closes the measured window now; returns when.
fn cut(
    sampler: &mut Sampler,
    merger: &mut Merger,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
) -> Instant {
    let now = Instant::now();
    for iv in sampler.cut(now) {
        merger.client(iv, on_event);
    }
    now
}

/// One interval's halves: the client's, and the server's in one part per clock it keeps.
type Halves = (Option<SideInterval>, Vec<SideInterval>);

/// Pairs the client's and the server's intervals by index and emits each once.
struct Merger {
    dirs: Directions,
    pending: BTreeMap<u32, Halves>,
    done: Vec<Interval>,
}

impl Merger {
    fn new(dirs: Directions) -> Self {
        Merger {
            dirs,
            pending: BTreeMap::new(),
            done: Vec::new(),
        }
    }

    fn client(&mut self, iv: SideInterval, on_event: &mut (dyn FnMut(ClientEvent) + Send)) {
        let idx = iv.index;
        self.pending.entry(idx).or_default().0 = Some(iv);
        // A server report more than one interval late is not waited for.
        let streams = self.dirs.len();
        self.emit(
            |i, (c, s)| c.is_some() && (server_complete(s, streams) || i + 1 < idx),
            on_event,
        );
    }

    fn server(&mut self, iv: SideInterval, on_event: &mut (dyn FnMut(ClientEvent) + Send)) {
        let idx = iv.index;
        self.pending.entry(idx).or_default().1.push(iv);
        let streams = self.dirs.len();
        self.emit(
            |_, (c, s)| c.is_some() && server_complete(s, streams),
            on_event,
        );
    }

    fn emit(
        &mut self,
        ready: impl Fn(u32, &Halves) -> bool,
        on_event: &mut (dyn FnMut(ClientEvent) + Send),
    ) {
        while let Some((&i, pair)) = self.pending.first_key_value() {
            if !ready(i, pair) {
                break;
            }
            let Some((_, (c, s))) = self.pending.pop_first() else {
                break;
            };
            if let Some(iv) = summary::merge_interval(&self.dirs, c.as_ref(), &s) {
                on_event(ClientEvent::Interval(iv.clone()));
                self.done.push(iv);
            }
        }
    }

    /// Emits what is left: every interval ends at or before its end's end mark, so nothing
    /// needs folding; a half that never came shows as missing.
    fn finish(mut self, on_event: &mut (dyn FnMut(ClientEvent) + Send)) -> Vec<Interval> {
        self.emit(|_, _| true, on_event);
        self.done
    }
}

/// Whether the server's parts of an interval cover every stream (the server has them all).
fn server_complete(parts: &[SideInterval], streams: usize) -> bool {
    parts.iter().map(|p| p.streams.len()).sum::<usize>() >= streams
}
