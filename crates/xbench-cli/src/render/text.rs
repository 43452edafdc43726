//! The human-readable report: iperf3's familiar interval table, with the receiver's rate and the
//! sender's TCP state on every line, then a summary that says what limited the rate.

use std::fmt::Write as _;

use xbench::config::{Direction, EndCondition, StreamDirection, Workload};
use xbench::report::{
    DirectionSummary, Interval, Outcome, PeerInfo, StreamInfo, TcpInterval, TestReport, Transfer,
};
use xbench::units::{ByteSize, RateScale, ThroughputUnit, TimeUnit, count, format_micros};
use xbench::{ClientConfig, TestSpec};

/// What the text of every bulk test (TCP, UDP, latency under load) is told before its first
/// line, in one place so each says it alike.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Shown {
    /// How every rate is shown (`-f`).
    pub(crate) rate: RateScale,
    /// The server is the in-process one (`--local`, or no host): the first line says so.
    pub(crate) local: bool,
}

impl Shown {
    /// Every rate in `unit` (`-f`; `None` picks a unit per figure), the server in-process or
    /// not (`local`).
    pub(crate) fn new(unit: Option<ThroughputUnit>, local: bool) -> Self {
        Shown {
            rate: RateScale(unit),
            local,
        }
    }

    /// The first line once connected: to whom, and the server's software and protocol.
    pub(crate) fn connected_line(&self, config: &ClientConfig, server: &PeerInfo) -> String {
        format!(
            "{}: {} (protocol {})\n",
            connected(config, self.local),
            server.software,
            server.protocol
        )
    }
}

/// The columns of a bulk test's table (TCP or UDP), from its spec.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Columns {
    /// More than one stream per direction: per-stream lines and a `[SUM]` line.
    pub(crate) multi: bool,
    /// Both directions: a direction column.
    pub(crate) bidir: bool,
}

impl Columns {
    pub(crate) fn of(spec: &TestSpec) -> Self {
        let tp = spec.as_throughput();
        Columns {
            multi: tp.is_some_and(|t| t.streams.get() > 1),
            bidir: tp.is_some_and(|t| t.direction == Direction::Bidir),
        }
    }

    /// The direction column's heading: ` Dir`, or nothing when one direction runs.
    pub(crate) fn dir_heading(self) -> &'static str {
        if self.bidir { " Dir" } else { "" }
    }

    /// A line's direction column: ` C→S` or ` S→C`, or nothing when one direction runs.
    pub(crate) fn dir(self, d: StreamDirection) -> &'static str {
        match (self.bidir, d) {
            (false, _) => "",
            (true, StreamDirection::ClientToServer) => " C→S",
            (true, StreamDirection::ServerToClient) => " S→C",
        }
    }
}

/// Renders one test's events as text.
#[derive(Debug)]
pub(crate) struct Text {
    columns: Columns,
    shown: Shown,
    header_done: bool,
}

pub(crate) const RULE: &str = "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n";

impl Text {
    pub(crate) fn new(spec: &TestSpec, shown: Shown) -> Self {
        Text {
            columns: Columns::of(spec),
            shown,
            header_done: false,
        }
    }

    /// Lines printed once the data connections are up.
    pub(crate) fn started(
        &self,
        config: &ClientConfig,
        server: &PeerInfo,
        streams: &[StreamInfo],
    ) -> String {
        let mut s = self.shown.connected_line(config, server);
        let _ = writeln!(s, "{}", describe_spec(&config.spec));
        for st in streams {
            let _ = writeln!(
                s,
                "[{:>3}] {} {} {}  mss {}  {}",
                st.id,
                st.client_addr,
                if st.direction == StreamDirection::ClientToServer {
                    "→"
                } else {
                    "←"
                },
                st.server_addr,
                st.client_socket.mss,
                st.client_socket.congestion,
            );
        }
        if let (Some(w), Some(st)) = (config.spec.socket.window, streams.first()) {
            let _ = writeln!(
                s,
                "Socket buffers: asked {}; kernel reports client snd {} rcv {}, server snd {} rcv {} \
                 (Linux doubles a request and caps it at net.core.[rw]mem_max)",
                ByteSize(w),
                ByteSize(st.client_socket.sndbuf_granted),
                ByteSize(st.client_socket.rcvbuf_granted),
                ByteSize(st.server_socket.sndbuf_granted),
                ByteSize(st.server_socket.rcvbuf_granted),
            );
        }
        s
    }

    /// One interval: per-stream lines (with several streams) and the sum per direction.
    pub(crate) fn interval(&mut self, iv: &Interval) -> String {
        let mut s = String::new();
        if !self.header_done {
            self.header_done = true;
            let _ = writeln!(
                s,
                "[ ID]{} Interval          Transfer      Bitrate      Received   Retr      Cwnd   sRTT (var)",
                self.columns.dir_heading()
            );
        }
        let omitted = if iv.omitted { "  (omitted)" } else { "" };
        let span = format!("{:6.2}-{:<6.2} s", iv.start_s, iv.end_s);
        if self.columns.multi || self.columns.bidir {
            for st in &iv.streams {
                if !self.columns.multi {
                    break;
                }
                let _ = writeln!(
                    s,
                    "[{:>3}]{} {span} {}{}{omitted}",
                    st.stream,
                    self.columns.dir(st.direction),
                    transfer_cols(self.shown.rate, &st.sent, st.received.as_ref()),
                    tcp_cols(st.tcp.as_ref()),
                );
            }
            for sum in &iv.sum {
                let _ = writeln!(
                    s,
                    "[SUM]{} {span} {}{:>7}{omitted}",
                    self.columns.dir(sum.direction),
                    transfer_cols(self.shown.rate, &sum.sent, sum.received.as_ref()),
                    sum.retransmits,
                );
            }
        } else if let Some(st) = iv.streams.first() {
            let _ = writeln!(
                s,
                "[{:>3}] {span} {}{}{omitted}",
                st.stream,
                transfer_cols(self.shown.rate, &st.sent, st.received.as_ref()),
                tcp_cols(st.tcp.as_ref()),
            );
        }
        s
    }

    /// The end-of-test summary.
    pub(crate) fn summary(&self, r: &TestReport) -> String {
        let mut s = String::from(RULE);
        let _ = writeln!(
            s,
            "[ ID]{} Interval          Sent                     Received                  Retr  RTT min/mean/max     Max cwnd",
            self.columns.dir_heading()
        );
        let span = format!("{:6.2}-{:<6.2} s", 0.0, r.summary.measured_s);
        let pair = |t: &Transfer| pair(self.shown.rate, t);
        for d in &r.summary.directions {
            let dir = self.columns.dir(d.direction);
            if self.columns.multi {
                for st in &d.per_stream {
                    let tcp = st.tcp.as_ref();
                    let _ = writeln!(
                        s,
                        "[{:>3}]{dir} {span} {}  {}{:>6}  {:<19} {:>9}",
                        st.stream,
                        st.sender
                            .as_ref()
                            .map_or_else(|| format!("{:<24}", "(no report)"), pair),
                        st.receiver
                            .as_ref()
                            .map_or_else(|| format!("{:<24}", "(no report)"), pair),
                        tcp.map_or(0, |t| t.retransmits),
                        tcp.and_then(|t| t.rtt).map_or_else(
                            || "-".into(),
                            |r| rtt_triple(r.min_us, r.mean_us, r.max_us)
                        ),
                        tcp.map_or_else(|| "-".into(), |t| ByteSize(t.max_cwnd_bytes).to_string()),
                    );
                }
            }
            let _ = writeln!(
                s,
                "[{}]{dir} {span} {}  {}{:>6}  {:<19} {:>9}",
                if self.columns.multi { "SUM" } else { "  0" },
                d.sender
                    .as_ref()
                    .map_or_else(|| format!("{:<24}", "(no report)"), pair),
                d.receiver
                    .as_ref()
                    .map_or_else(|| format!("{:<24}", "(no report)"), pair),
                d.retransmits,
                d.rtt
                    .map_or_else(|| "-".into(), |r| rtt_triple(r.min_us, r.mean_us, r.max_us)),
                d.max_cwnd_bytes
                    .map_or_else(|| "-".into(), |c| ByteSize(c).to_string()),
            );
        }
        s.push('\n');
        for d in &r.summary.directions {
            explain(&mut s, d, r, self.shown.rate);
        }
        let cpu = &r.cpu;
        let per_gb = |v: Option<f64>| v.map_or_else(String::new, |v| format!(" ({v:.3} s/GB)"));
        let _ = write!(
            s,
            "CPU: client {:.2} s{}",
            cpu.client.total_s(),
            per_gb(cpu.client_s_per_gb)
        );
        match cpu.server {
            Some(sv) => {
                let _ = writeln!(
                    s,
                    ", server {:.2} s{}",
                    sv.total_s(),
                    per_gb(cpu.server_s_per_gb)
                );
            }
            None => s.push_str(", server: no report\n"),
        }
        s.push_str(&outcome_line(r));
        s
    }
}

/// Which server the client reached. The in-process one of `--local` listens on a free
/// loopback port, not 5201, so the line says whose port it is.
pub(crate) fn connected(config: &ClientConfig, local: bool) -> String {
    if local {
        format!(
            "Connected to the in-process server on {} port {} (no host given: a server inside \
             this process, on a free port)",
            config.host, config.port
        )
    } else {
        format!("Connected to {} port {}", config.host, config.port)
    }
}

/// How the test ended, when it did not complete: a line saying what the figures cover.
pub(crate) fn outcome_line(r: &TestReport) -> String {
    match &r.outcome {
        Outcome::Completed => String::new(),
        Outcome::Interrupted => format!(
            "Interrupted: the figures cover the {:.2} s that ran.\n",
            r.summary.measured_s
        ),
        Outcome::Failed { error } => format!("Failed: {error}. The figures cover what ran.\n"),
    }
}

/// Below this Jain index the summary says that some streams starved (0.8: e.g. 4 streams of
/// which one got a quarter of the others' rate sit at 0.85).
const STARVED_JAIN: f64 = 0.8;

/// The line about what arrived after the end mark, when it is worth a user's attention: a
/// tail of a fifth of a second or more, or more than 5 % of what was measured (the senders'
/// buffers drain after every test; that alone is no news).
fn after_end_line(d: &DirectionSummary) -> Option<String> {
    let a = d.after_end;
    let measured = d.receiver.map_or(0, |r| r.bytes);
    if a.bytes == 0 || (a.seconds < 0.2 && a.bytes * 20 <= measured) {
        return None;
    }
    let why = if a.retransmits > 0 && a.seconds >= 0.2 {
        format!(
            "a stream was in retransmission back-off ({} after the end)",
            counted(a.retransmits, "retransmit")
        )
    } else {
        "it was still in the senders' buffers or queued on the path".to_owned()
    };
    Some(format!(
        "  {:.2} s and {} arrived after the end, not counted in the rate: {why}\n",
        a.seconds,
        ByteSize(a.bytes)
    ))
}

/// The headline and the explanation: the figures, and what limited the rate (the library's
/// diagnosis, with the figures it rests on).
fn explain(s: &mut String, d: &DirectionSummary, r: &TestReport, rate: RateScale) {
    let streams = if d.streams == 1 {
        "1 stream".to_owned()
    } else {
        format!("{} streams", d.streams)
    };
    match &d.receiver {
        Some(rx) => {
            // A byte count's window is not the asked length: say where it ended.
            let until = match r.spec.end {
                xbench::EndCondition::Bytes(_) => " to the last byte delivered",
                xbench::EndCondition::Duration(_) => "",
            };
            let _ = writeln!(
                s,
                "{}: {} received ({} in {:.2} s{until}, {streams}, {})",
                d.direction.label(),
                rate.show(rx.bits_per_second),
                ByteSize(rx.bytes),
                rx.seconds,
                counted(d.retransmits, "retransmit")
            );
        }
        None => {
            let _ = writeln!(
                s,
                "{}: {} sent; the receiver's figure is missing ({streams}, {})",
                d.direction.label(),
                d.sender.map_or_else(
                    || "nothing known".to_owned(),
                    |t| rate.show(t.bits_per_second)
                ),
                counted(d.retransmits, "retransmit")
            );
        }
    }
    if let Some(f) = d.fairness {
        let _ = writeln!(
            s,
            "  streams: {} to {} each, Jain's fairness {:.2} (1 = equal shares){}",
            rate.show(f.min_bits_per_second),
            rate.show(f.max_bits_per_second),
            f.jain_index,
            if f.jain_index < STARVED_JAIN {
                " — some streams starved"
            } else {
                ""
            }
        );
    }
    if let Some(line) = after_end_line(d) {
        s.push_str(&line);
    }
    if let Some(l) = d.limits {
        let _ = writeln!(
            s,
            "  sender busy {:.0} % of the time; held back by the receive window {:.1} %, by its send buffer {:.1} %",
            l.busy_pct, l.rwnd_limited_pct, l.sndbuf_limited_pct
        );
    }
    // The ceiling of an asked window, as a figure; whether it is the limit is the diagnosis's.
    if let Some(c) = d.window_ceiling.filter(|_| r.spec.socket.window.is_some()) {
        let _ = writeln!(
            s,
            "  window ceiling: {} advertised on average ÷ {} RTT = {}",
            ByteSize(c.window_bytes),
            rtt(c.rtt_us),
            rate.show(c.bits_per_second)
        );
    }
    if let Some(diagnosis) = &d.diagnosis {
        s.push_str(&super::diagnosis::lines(diagnosis, &|bps| rate.show(bps)));
    }
}

fn describe_spec(spec: &TestSpec) -> String {
    let Workload::Throughput(tp) = &spec.workload else {
        return String::new();
    };
    let dir = match tp.direction {
        Direction::ClientToServer => "client → server",
        Direction::ServerToClient => "server → client (reverse)",
        Direction::Bidir => "both directions",
    };
    let end = match spec.end {
        EndCondition::Duration(d) => format!("{:.1} s", d.as_secs_f64()),
        EndCondition::Bytes(b) => format!("{}", ByteSize(b)),
    };
    let mut s = format!(
        "Test: {} stream{} {dir}, {end}, {} blocks",
        tp.streams,
        if tp.streams.get() == 1 { "" } else { "s" },
        ByteSize(u64::from(tp.block_len.get()))
    );
    if !spec.omit.is_zero() {
        let _ = write!(s, ", first {:.1} s omitted", spec.omit.as_secs_f64());
    }
    if tp.zerocopy {
        s.push_str(", zero-copy send");
    }
    s
}

fn transfer_cols(rate: RateScale, sent: &Transfer, received: Option<&Transfer>) -> String {
    format!(
        "{:>10} {:>13} {:>13}",
        ByteSize(sent.bytes).to_string(),
        rate.show(sent.bits_per_second),
        received.map_or_else(|| "-".into(), |r| rate.show(r.bits_per_second)),
    )
}

fn tcp_cols(tcp: Option<&TcpInterval>) -> String {
    match tcp {
        Some(t) => format!(
            "{:>7} {:>10}   {} ({})",
            t.retransmits,
            ByteSize(t.cwnd_bytes).to_string(),
            rtt(f64::from(t.srtt_us)),
            rtt(f64::from(t.rttvar_us))
        ),
        None => String::new(),
    }
}

fn pair(rate: RateScale, t: &Transfer) -> String {
    format!(
        "{:>10} {:>13}",
        ByteSize(t.bytes).to_string(),
        rate.show(t.bits_per_second)
    )
}

/// An RTT in the unit that suits it: `48.0 µs`, `20.4 ms`.
pub(crate) fn rtt(us: f64) -> String {
    format_micros(us)
}

/// `min/mean/max` in the one unit that suits the mean, the typical figure: `10.0/431/4,980 µs`
/// rather than `0.0100/0.431/4.98 ms`.
pub(crate) fn rtt_triple(min: u32, mean: f64, max: u32) -> String {
    let u = TimeUnit::for_micros(mean);
    format!(
        "{}/{}/{} {}",
        u.format(f64::from(min)),
        u.format(mean),
        u.format(f64::from(max)),
        u.label()
    )
}

/// `n` things, grouped, in the singular for one: `1 retransmit`, `1,024 retransmits`.
pub(crate) fn counted(n: u64, thing: &str) -> String {
    format!("{} {thing}{}", count(n), if n == 1 { "" } else { "s" })
}
