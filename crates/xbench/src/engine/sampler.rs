//! Turns stream counters and `TCP_INFO` into intervals and per-stream totals for one end.
//!
//! The controller (client or server session) calls [`Sampler::on_wakeup`] at
//! [`Sampler::next_wakeup`]: at every interval boundary, and every [`TICK`] in between so RTT
//! and congestion-window statistics are not limited to one sample per `-i`. Only senders' TCP
//! state is read; the sender's connection holds the congestion state that explains a rate.
//! Rates use the actual sample times, so a late wake-up shortens nothing.
//!
//! A sender's bytes are those TCP has transmitted (from `TCP_INFO`), not those it queued in its
//! send buffer: on a paced or slow path megabytes can sit there, never sent inside the window;
//! and a receiver can only have read what was transmitted. A receiver's are what it read.
//!
//! A timed test ends at an end mark: [`Sampler::cut`] closes the last interval there and
//! freezes every stream's measured bytes and TCP state. What still moves afterwards (data in
//! flight, a stream in retransmission back-off) is counted apart as [`AfterEnd`], so a slow
//! tail can never stretch the measured window. A byte-count test has no cut: its window ends
//! with its last byte.
//!
//! Every stream's thread is also timed over the window (on a CPU, waiting for one, asleep:
//! two reads of its scheduler clock), and a receiver's unread queue is sampled with the RTT.
//! Together they tell a side that could not keep up from one that waited on its socket.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::cpu::{SchedTime, sched_time};
use super::schedule::Schedule;
use super::stream::{self, StreamEnd, StreamHandle, StreamShared};
use crate::report::{
    AfterEnd, CpuUsage, ReceiveQueue, Role, RttStats, SenderLimits, SideInterval, SideResults,
    SideStreamInterval, SideStreamResult, TcpInterval, TcpTotals, ThreadTime, Transfer,
};
use crate::tcp_info::{self, TcpInfo};

/// Period of RTT/cwnd sampling between interval boundaries.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Samples one end's streams.
#[derive(Debug)]
pub(crate) struct Sampler {
    start: Instant,
    schedule: Schedule,
    tracks: Vec<Track>,
    index: u32,
    interval_start: Duration,
    next_boundary: Option<Duration>,
    next_tick: Duration,
    measuring: bool,
    /// When the measured window began (time since `start`): the sample that read the warm-up's
    /// last counts, which falls a little after the scheduled boundary on a busy machine. The
    /// window's bytes count from that reading, so its seconds must too.
    measure_from: Duration,
    /// When the measured window ended (time since `start`), once [`Self::cut`] ran.
    cut: Option<Duration>,
}

/// A stream's state at the end mark.
#[derive(Debug, Clone, Copy)]
struct EndMark {
    bytes: u64,
    info: Option<TcpInfo>,
    sched: Option<SchedTime>,
}

#[derive(Debug)]
struct Track {
    id: u16,
    role: Role,
    shared: Arc<StreamShared>,
    iv_bytes: u64,
    iv_retrans: u32,
    base_bytes: u64,
    base_info: Option<TcpInfo>,
    rtt: RttAcc,
    max_cwnd: u64,
    max_snd_wnd: Option<u32>,
    /// Sum and count of advertised-window samples, for the mean.
    snd_wnd_sum: f64,
    snd_wnd_n: u64,
    /// Samples with `notsent_bytes` known, and those of them with room in both windows and
    /// nothing queued unsent.
    queued_n: u64,
    nothing_queued_n: u64,
    /// Senders: the largest `SO_SNDBUF` seen.
    sndbuf_max: Option<u64>,
    last: Option<TcpInfo>,
    mark: Option<EndMark>,
    /// The thread's scheduler clock when the measured window started.
    sched_base: Option<SchedTime>,
    /// Receivers: the unread queue over the window.
    queue: QueueAcc,
}

/// Samples of a receiver's unread bytes (`SIOCINQ`) and of its `SO_RCVBUF`.
#[derive(Debug, Default)]
struct QueueAcc {
    sum: f64,
    n: u32,
    max: u64,
    rcvbuf_max: u64,
}

impl QueueAcc {
    /// One ioctl and one getsockopt: taken with the RTT samples every [`TICK`].
    fn add(&mut self, socket: &std::net::TcpStream) {
        let mut unread: libc::c_int = 0;
        // SAFETY: FIONREAD (SIOCINQ) writes one int through the pointer, which is valid for
        // the duration of the call.
        let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::FIONREAD, &raw mut unread) };
        if rc != 0 || unread < 0 {
            return;
        }
        let unread = unread as u64;
        self.sum += unread as f64;
        self.n += 1;
        self.max = self.max.max(unread);
        if let Ok(b) = socket2::SockRef::from(socket).recv_buffer_size() {
            self.rcvbuf_max = self.rcvbuf_max.max(b as u64);
        }
    }

    fn stats(&self) -> Option<ReceiveQueue> {
        (self.n > 0).then(|| ReceiveQueue {
            mean_bytes: self.sum / f64::from(self.n),
            max_bytes: self.max,
            samples: self.n,
            rcvbuf_bytes: self.rcvbuf_max,
        })
    }
}

/// The scheduler clock of a stream's thread now. A thread that has not started yet has used
/// nothing, which is what a zero clock says.
fn thread_clock(shared: &StreamShared) -> Option<SchedTime> {
    match shared.tid.load(Ordering::Relaxed) {
        0 => Some(SchedTime::default()),
        tid => sched_time(tid),
    }
}

#[derive(Debug, Default)]
struct RttAcc {
    min: u32,
    max: u32,
    sum: f64,
    n: u64,
}

impl RttAcc {
    fn add(&mut self, v: u32) {
        if v == 0 {
            return; // no RTT sample yet
        }
        self.min = if self.n == 0 { v } else { self.min.min(v) };
        self.max = self.max.max(v);
        self.sum += f64::from(v);
        self.n += 1;
    }

    fn stats(&self) -> Option<RttStats> {
        (self.n > 0).then(|| RttStats {
            min_us: self.min,
            mean_us: self.sum / self.n as f64,
            max_us: self.max,
        })
    }
}

impl Sampler {
    /// Starts sampling `streams`, whose test started at `start` on this end's clock: for a
    /// receiver, when the sender's first byte can arrive, so both ends' windows cover the same
    /// bytes.
    pub(crate) fn new<'a>(
        start: Instant,
        schedule: Schedule,
        streams: impl IntoIterator<Item = &'a StreamHandle>,
    ) -> Self {
        let tracks = streams
            .into_iter()
            .map(|h| Track {
                id: h.id,
                role: h.role,
                shared: Arc::clone(&h.shared),
                iv_bytes: 0,
                iv_retrans: 0,
                base_bytes: 0,
                base_info: None,
                rtt: RttAcc::default(),
                max_cwnd: 0,
                max_snd_wnd: None,
                snd_wnd_sum: 0.0,
                snd_wnd_n: 0,
                queued_n: 0,
                nothing_queued_n: 0,
                sndbuf_max: None,
                last: None,
                mark: None,
                sched_base: None,
                queue: QueueAcc::default(),
            })
            .collect();
        let mut s = Sampler {
            start,
            schedule,
            tracks,
            index: 0,
            interval_start: Duration::ZERO,
            next_boundary: schedule.next_boundary(Duration::ZERO),
            next_tick: TICK,
            measuring: schedule.omit().is_zero(),
            measure_from: Duration::ZERO,
            cut: None,
        };
        if s.measuring {
            // No warm-up: everything counts from byte 0. The threads are already running, so
            // reading the counters here would silently drop their first bytes.
            s.read_all(true);
            for tr in &mut s.tracks {
                tr.sched_base = thread_clock(&tr.shared);
            }
        }
        s
    }

    /// Bytes moved so far by every stream of this end: if it stops growing, nothing moves.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.tracks
            .iter()
            .map(|t| t.shared.bytes.0.load(Ordering::Relaxed))
            .sum()
    }

    /// When [`Self::on_wakeup`] wants to run next; never once the window has been cut.
    pub(crate) fn next_wakeup(&self) -> Option<Instant> {
        if self.cut.is_some() {
            return None;
        }
        let t = match self.next_boundary {
            Some(b) => b.min(self.next_tick),
            None => self.next_tick,
        };
        Some(self.start + t)
    }

    /// When the measured window began: the reading that ended the warm-up (the start itself
    /// without one). Before that reading, the start.
    pub(crate) fn window_start(&self) -> Instant {
        self.start + self.measure_from
    }

    /// Whether [`Self::cut`] has run.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut.is_some()
    }

    /// Samples; returns an interval when a boundary has passed. Does nothing after the cut.
    pub(crate) fn on_wakeup(&mut self, now: Instant) -> Option<SideInterval> {
        if self.cut.is_some() {
            return None;
        }
        let t = now.saturating_duration_since(self.start);
        while self.next_tick <= t {
            self.next_tick += TICK;
        }
        self.read_all(self.measuring);
        let boundary = self.next_boundary.filter(|b| *b <= t)?;
        // Omitted-ness follows the scheduled boundary; `t` is a little later.
        let iv = self.close_interval(t, self.schedule.is_omitted(boundary));
        if !self.measuring && boundary >= self.schedule.omit() {
            self.measuring = true;
            self.measure_from = t;
            self.set_baseline();
        }
        self.next_boundary = self.schedule.next_boundary(t);
        self.schedule.reports_intervals().then_some(iv)
    }

    /// Ends the measured window at `now`, the end mark: returns the intervals it closes (one
    /// whose boundary passed unnoticed, and the last one, which ends here), and freezes each
    /// stream's bytes and TCP state. Later bytes are the drain, reported as [`AfterEnd`].
    /// A second call does nothing.
    pub(crate) fn cut(&mut self, now: Instant) -> Vec<SideInterval> {
        if self.cut.is_some() {
            return Vec::new();
        }
        // A boundary (the end of the warm-up above all) that passed just before the mark.
        let mut out: Vec<SideInterval> = self.on_wakeup(now).into_iter().collect();
        let t = now.saturating_duration_since(self.start);
        if self.schedule.reports_intervals() && t > self.interval_start {
            out.push(self.close_interval(t, !self.measuring));
        }
        for tr in &mut self.tracks {
            // Without intervals the count is read here; with them, `close_interval` just
            // read it, and the mark must agree with the last interval to the byte.
            let bytes = if self.schedule.reports_intervals() {
                tr.iv_bytes
            } else {
                tr.moved(false)
            };
            tr.mark = Some(EndMark {
                bytes,
                info: tr.last,
                sched: thread_clock(&tr.shared),
            });
        }
        self.cut = Some(t);
        out
    }

    /// Final sample once every stream has ended (or been given up on). Returns the last
    /// interval of a test that was not cut (a byte count: it ends with the last stream's last
    /// byte), and the per-stream results.
    pub(crate) fn finish(
        mut self,
        now: Instant,
        ends: &HashMap<u16, StreamEnd>,
    ) -> (Option<SideInterval>, SideResults) {
        // After the cut only the retransmit counter still matters (the totals match the
        // kernel's); RTT and window statistics stay those of the measured window.
        self.read_all(self.measuring && self.cut.is_none());
        let last = match self.cut {
            Some(_) => None,
            None => {
                let last_end = self
                    .tracks
                    .iter()
                    .filter_map(|tr| ends.get(&tr.id).map(|e| e.ended))
                    .max()
                    .unwrap_or(now)
                    .min(now);
                let t = last_end.saturating_duration_since(self.start);
                // A byte count's last interval ends with its last byte handed over: everything
                // a sender handed is sent by the time it is delivered.
                (self.schedule.reports_intervals() && t > self.interval_start)
                    .then(|| self.close_interval_at(t, !self.measuring, true))
            }
        };
        let mut cpu = CpuUsage::default();
        let streams = self
            .tracks
            .iter()
            .map(|tr| {
                let end = ends.get(&tr.id);
                if let Some(e) = end {
                    cpu += e.cpu;
                }
                self.stream_result(tr, end, now)
            })
            .collect();
        (last, SideResults { streams, cpu })
    }

    fn stream_result(&self, tr: &Track, end: Option<&StreamEnd>, now: Instant) -> SideStreamResult {
        let total = end.map_or_else(|| tr.shared.bytes.0.load(Ordering::Relaxed), |e| e.bytes);
        let ended = end.map_or(now, |e| e.ended);
        let measure_start = self.start + self.measure_from;
        let (to_mark, info_at_mark, window_end, after_end) = self.to_mark(tr, total, ended);
        let after_end = match tr.role {
            // `finish` has just sampled the connection.
            Role::Sender => AfterEnd {
                unsent_bytes: total.saturating_sub(tr.moved(false)),
                ..after_end
            },
            Role::Receiver => after_end,
        };
        let thread_end = match tr.mark {
            // A thread that ended before the mark has no clock left to read: its last one.
            Some(m) => m.sched.or_else(|| end.and_then(|e| e.sched)),
            None => end.and_then(|e| e.sched),
        };
        let (bytes, seconds) = if self.measuring {
            (
                to_mark.saturating_sub(tr.base_bytes),
                window_end
                    .saturating_duration_since(measure_start)
                    .as_secs_f64(),
            )
        } else {
            (0, 0.0)
        };
        SideStreamResult {
            stream: tr.id,
            role: tr.role,
            transfer: Transfer::new(bytes, seconds),
            total_bytes: total,
            omitted_bytes: if self.measuring {
                tr.base_bytes
            } else {
                to_mark
            },
            tcp: (tr.role == Role::Sender && self.measuring)
                .then(|| tr.totals(seconds, info_at_mark))
                .flatten(),
            after_end,
            error: end.and_then(|e| e.error.clone()),
            thread: self
                .measuring
                .then(|| thread_time(tr.sched_base?, thread_end?, seconds))
                .flatten(),
            receive_queue: (tr.role == Role::Receiver && self.measuring)
                .then(|| tr.queue.stats())
                .flatten(),
        }
    }

    /// Up to the end mark: the cut, or (no cut) the stream's own last byte. The bytes and the
    /// TCP figures there, when the window ends, and what moved after it.
    fn to_mark(
        &self,
        tr: &Track,
        total: u64,
        ended: Instant,
    ) -> (u64, Option<TcpInfo>, Instant, AfterEnd) {
        match (self.cut, tr.mark) {
            (Some(cut), Some(mark)) => {
                // A sender's mark counts what TCP had transmitted, which a qdisc's refusal can
                // count twice; never more than the sender handed over.
                let mark = EndMark {
                    bytes: mark.bytes.min(total),
                    ..mark
                };
                let bytes = total.saturating_sub(mark.bytes);
                let retrans = |i: Option<TcpInfo>| i.map_or(0, |i| i.total_retrans);
                let after_end = match tr.role {
                    Role::Receiver => AfterEnd {
                        bytes,
                        seconds: if bytes > 0 {
                            ended
                                .saturating_duration_since(self.start + cut)
                                .as_secs_f64()
                        } else {
                            0.0
                        },
                        ..AfterEnd::default()
                    },
                    Role::Sender => AfterEnd {
                        sent_bytes: bytes,
                        retransmits: u64::from(retrans(tr.last).saturating_sub(retrans(mark.info))),
                        ..AfterEnd::default()
                    },
                };
                (mark.bytes, mark.info, self.start + cut, after_end)
            }
            _ => (total, tr.last, ended, AfterEnd::default()),
        }
    }

    fn read_all(&mut self, measuring: bool) {
        for tr in &mut self.tracks {
            if tr.role != Role::Sender {
                if measuring {
                    tr.queue.add(&tr.shared.socket);
                }
                continue;
            }
            // A socket the kernel has torn down keeps its last good sample.
            let Ok(info) = tcp_info::read(&tr.shared.socket) else {
                continue;
            };
            if measuring {
                tr.rtt.add(info.srtt_us);
                tr.max_cwnd = tr.max_cwnd.max(info.cwnd_bytes());
                tr.max_snd_wnd = info.snd_wnd.map(|w| tr.max_snd_wnd.unwrap_or(0).max(w));
                if let Some(w) = info.snd_wnd {
                    tr.snd_wnd_sum += f64::from(w);
                    tr.snd_wnd_n += 1;
                }
                if let Some(idle) = nothing_queued(&info) {
                    tr.queued_n += 1;
                    tr.nothing_queued_n += u64::from(idle);
                }
                if let Ok(b) = socket2::SockRef::from(&tr.shared.socket).send_buffer_size() {
                    tr.sndbuf_max = Some(tr.sndbuf_max.unwrap_or(0).max(b as u64));
                }
            }
            tr.last = Some(info);
        }
    }

    fn set_baseline(&mut self) {
        for tr in &mut self.tracks {
            // `on_wakeup` has just closed an interval with this count: the same number, so
            // the warm-up's intervals and the window's split the bytes to the byte.
            tr.base_bytes = tr.iv_bytes;
            tr.base_info = tr.last;
            tr.sched_base = thread_clock(&tr.shared);
        }
    }

    fn close_interval(&mut self, t: Duration, omitted: bool) -> SideInterval {
        self.close_interval_at(t, omitted, false)
    }

    /// Closes the interval ending at `t`; `last` when every stream has ended and a sender's
    /// whole count is its last interval's end.
    fn close_interval_at(&mut self, t: Duration, omitted: bool, last: bool) -> SideInterval {
        let streams = self
            .tracks
            .iter_mut()
            .map(|tr| {
                let bytes_now = tr.moved(last);
                let bytes = bytes_now.saturating_sub(tr.iv_bytes);
                tr.iv_bytes = bytes_now;
                let tcp = tr.last.filter(|_| tr.role == Role::Sender).map(|i| {
                    let retransmits = i.total_retrans.saturating_sub(tr.iv_retrans);
                    tr.iv_retrans = i.total_retrans;
                    TcpInterval {
                        retransmits: u64::from(retransmits),
                        cwnd_bytes: i.cwnd_bytes(),
                        srtt_us: i.srtt_us,
                        rttvar_us: i.rttvar_us,
                        snd_wnd_bytes: i.snd_wnd,
                    }
                });
                SideStreamInterval {
                    stream: tr.id,
                    role: tr.role,
                    bytes,
                    tcp,
                }
            })
            .collect();
        let iv = SideInterval {
            index: self.index,
            start_s: self.interval_start.as_secs_f64(),
            end_s: t.as_secs_f64(),
            omitted,
            streams,
        };
        self.index += 1;
        self.interval_start = t;
        iv
    }
}

/// Whether a sample finds the connection with room to send and nothing to send: under 80 %
/// of the congestion window in flight (a window TCP fills shows at or near 100 %, TSO rounding
/// aside), the receiver's window not filled, and less than a segment written but unsent.
/// `None` before Linux 4.6 (no `notsent_bytes`).
fn nothing_queued(i: &TcpInfo) -> Option<bool> {
    let notsent = i.notsent_bytes?;
    let in_flight = u64::from(i.unacked) * u64::from(i.snd_mss);
    let cwnd_room = u64::from(i.unacked) * 5 < u64::from(i.snd_cwnd) * 4;
    let rwnd_room = i
        .snd_wnd
        .is_none_or(|w| in_flight + u64::from(i.snd_mss) <= u64::from(w));
    Some(cwnd_room && rwnd_room && notsent < i.snd_mss)
}

/// A thread's shares of a window of `seconds` between two readings of its clock.
fn thread_time(base: SchedTime, end: SchedTime, seconds: f64) -> Option<ThreadTime> {
    if seconds <= 0.0 {
        return None;
    }
    let d = base.until(end);
    // The clocks tick at context switches, so a share can overshoot by a tick: cap it.
    let pct = |t: Duration| (t.as_secs_f64() / seconds * 100.0).min(100.0);
    let on_cpu_pct = pct(d.on_cpu);
    Some(ThreadTime {
        on_cpu_pct,
        waiting_for_cpu_pct: pct(d.waiting_for_cpu).min(100.0 - on_cpu_pct),
    })
}

impl Track {
    /// Bytes this stream has moved so far: a receiver what it read, a sender what TCP
    /// transmitted ([`stream::transmitted`], from the last `TCP_INFO` sample, which every
    /// caller has just taken), or with `handed` what it handed to the kernel. Without the
    /// kernel's counters (before Linux 4.19) a sender counts what it handed.
    fn moved(&self, handed: bool) -> u64 {
        let counter = self.shared.bytes.0.load(Ordering::Relaxed);
        match (self.role, handed) {
            (Role::Sender, false) => {
                match (
                    self.last.as_ref().and_then(stream::transmitted),
                    self.shared.transmitted_base,
                ) {
                    (Some(now), Some(base)) => now.saturating_sub(base),
                    _ => counter,
                }
            }
            _ => counter,
        }
    }

    /// TCP totals between the baseline (end of warm-up) and the end mark (`at_mark`), but for
    /// retransmits, counted to the last sample so they match the kernel's own counter.
    fn totals(&self, seconds: f64, at_mark: Option<TcpInfo>) -> Option<TcpTotals> {
        let final_retrans = self.last.map(|i| i.total_retrans);
        let last = at_mark.or(self.last)?;
        let base = self.base_info;
        let delta = |f: fn(&TcpInfo) -> Option<u64>| -> Option<u64> {
            Some(f(&last)?.saturating_sub(base.and_then(|b| f(&b)).unwrap_or(0)))
        };
        let pct = |us: Option<u64>| -> Option<f64> {
            let us = us?;
            (seconds > 0.0).then(|| (us as f64 / (seconds * 1e6) * 100.0).min(100.0))
        };
        let limits = match (
            pct(delta(|i| i.busy_time_us)),
            pct(delta(|i| i.rwnd_limited_us)),
            pct(delta(|i| i.sndbuf_limited_us)),
        ) {
            (Some(busy_pct), Some(rwnd_limited_pct), Some(sndbuf_limited_pct)) => {
                Some(SenderLimits {
                    busy_pct,
                    rwnd_limited_pct,
                    sndbuf_limited_pct,
                })
            }
            _ => None,
        };
        Some(TcpTotals {
            retransmits: u64::from(
                final_retrans
                    .unwrap_or(last.total_retrans)
                    .saturating_sub(base.map_or(0, |b| b.total_retrans)),
            ),
            rtt: self.rtt.stats(),
            max_cwnd_bytes: self.max_cwnd.max(last.cwnd_bytes()),
            max_snd_wnd_bytes: self.max_snd_wnd,
            mean_snd_wnd_bytes: (self.snd_wnd_n > 0)
                .then(|| self.snd_wnd_sum / self.snd_wnd_n as f64),
            mss: last.snd_mss,
            pmtu: last.pmtu,
            min_rtt_us: last.min_rtt_us,
            limits,
            nothing_queued_pct: (self.queued_n > 0)
                .then(|| self.nothing_queued_n as f64 / self.queued_n as f64 * 100.0),
            sndbuf_bytes: self.sndbuf_max,
        })
    }
}
