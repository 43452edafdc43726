//! `--json --json-format iperf3`: a finished test written in the shape of iperf3 3.12's `-J`
//! output, for scripts and dashboards that read `end.sum_received.bits_per_second` and its
//! kin. Every figure comes from xbench's own report; this module only renames and arranges.
//! It is not an iperf3 implementation (no iperf3 protocol here) and not a full copy of
//! iperf3's semantics: where the two tools measure differently, the "iperf3's JSON" section of
//! docs/iperf3.md says which xbench figure fills which key.
//!
//! The layout follows iperf3's client: per interval and per stream, the client's own end of
//! each stream (what it sent, or what it received); at the end, each stream's sender and
//! receiver, and the sums of the direction the client drives (`sum_sent`, `sum_received`) and,
//! with `--bidir`, of the other (`…_bidir_reverse`).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use xbench::config::{Direction, EndCondition, StreamDirection, ThroughputSpec};
use xbench::report::{
    DirectionSummary, Interval, Outcome, StreamInfo, TestReport, Transfer, UdpDirectionSummary,
    UdpFigures, UdpInterval,
};

/// What a report does not hold and iperf3's document does: who wrote it and where.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// `start.cookie`: iperf3's 36 characters of `[a-z2-7]`, random per test.
    pub(crate) cookie: String,
    /// `start.system_info`: `uname` of this host, as iperf3 writes it.
    pub(crate) system_info: String,
}

impl Context {
    /// A fresh cookie and this host's `uname`.
    pub(crate) fn new() -> Self {
        Context {
            cookie: cookie(),
            system_info: system_info(),
        }
    }
}

/// The iperf3-shaped document of a finished (or interrupted, or failed) test.
///
/// A request/response test has no iperf3 shape; the CLI refuses `--json-format iperf3` for
/// one, and this writes an `error` document should one arrive anyway.
pub(crate) fn document(r: &TestReport, ctx: &Context) -> String {
    let Some(tp) = r.spec.as_throughput() else {
        return error_document("iperf3's JSON has no request/response tests", ctx);
    };
    let doc = Document {
        start: start(r, tp, ctx),
        intervals: if tp.udp.is_some() {
            r.udp
                .as_ref()
                .map(|u| u.intervals.iter().map(|iv| udp_interval(iv, tp)).collect())
                .unwrap_or_default()
        } else {
            let pmtus = pmtus(r);
            r.intervals
                .iter()
                .map(|iv| tcp_interval(iv, tp, &pmtus))
                .collect()
        },
        end: if tp.udp.is_some() {
            udp_end(r, tp)
        } else {
            tcp_end(r, tp)
        },
        title: r.label.clone(),
        error: match &r.outcome {
            Outcome::Completed => None,
            // iperf3's words for a test stopped by Ctrl-C.
            Outcome::Interrupted => Some("interrupt - the client has terminated".to_owned()),
            Outcome::Failed { error } => Some(error.clone()),
        },
    };
    pretty(&doc)
}

/// iperf3's document for a test that did not run: an empty `connected`, no intervals, an
/// empty `end`, and the reason in `error`.
pub(crate) fn error_document(error: &str, ctx: &Context) -> String {
    pretty(&ErrorDocument {
        start: ErrorStart {
            connected: Vec::new(),
            version: version(),
            system_info: ctx.system_info.clone(),
        },
        intervals: Vec::new(),
        end: Empty {},
        error: error.to_owned(),
    })
}

fn pretty<T: Serialize>(doc: &T) -> String {
    // Plain data structures with string keys: serializing cannot fail.
    let mut s =
        serde_json::to_string_pretty(doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}

#[derive(Serialize)]
struct Document {
    start: Start,
    intervals: Vec<IntervalOut>,
    end: End,
    /// iperf3's `--title`: xbench's `--label`.
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct ErrorDocument {
    start: ErrorStart,
    intervals: Vec<IntervalOut>,
    end: Empty,
    error: String,
}

#[derive(Serialize)]
struct ErrorStart {
    connected: Vec<Connected>,
    version: String,
    system_info: String,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Start {
    connected: Vec<Connected>,
    version: String,
    system_info: String,
    timestamp: Timestamp,
    connecting_to: ConnectingTo,
    cookie: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_mss_default: Option<u32>,
    target_bitrate: u64,
    sock_bufsize: u64,
    sndbuf_actual: u64,
    rcvbuf_actual: u64,
    test_start: TestStart,
}

#[derive(Serialize)]
struct Connected {
    socket: u16,
    local_host: String,
    local_port: u16,
    remote_host: String,
    remote_port: u16,
}

#[derive(Serialize)]
struct Timestamp {
    time: String,
    timesecs: u64,
}

#[derive(Serialize)]
struct ConnectingTo {
    host: String,
    port: u16,
}

#[derive(Serialize)]
struct TestStart {
    protocol: &'static str,
    num_streams: u16,
    blksize: u32,
    omit: Value,
    duration: Value,
    bytes: u64,
    blocks: u64,
    reverse: u8,
    tos: u8,
    target_bitrate: u64,
}

/// One object of iperf3's: an interval's stream or sum, an end stream's sender or receiver,
/// an end sum. Which keys appear depends on where it stands, as in iperf3; the field order is
/// iperf3's.
#[derive(Serialize, Default)]
struct Span {
    #[serde(skip_serializing_if = "Option::is_none")]
    socket: Option<u16>,
    start: f64,
    end: f64,
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    retransmits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snd_cwnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snd_wnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rttvar: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pmtu: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_snd_cwnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_snd_wnd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mean_rtt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    packets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_percent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out_of_order: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    omitted: Option<bool>,
    sender: bool,
}

impl Span {
    /// Bytes over a span that starts at `start` seconds.
    fn transfer(start: f64, t: &Transfer, sender: bool) -> Self {
        Span {
            start,
            end: start + t.seconds,
            seconds: t.seconds,
            bytes: t.bytes,
            bits_per_second: t.bits_per_second,
            sender,
            ..Span::default()
        }
    }
}

#[derive(Serialize)]
struct IntervalOut {
    streams: Vec<Span>,
    sum: Span,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_bidir_reverse: Option<Span>,
}

#[derive(Serialize)]
struct EndStream {
    #[serde(skip_serializing_if = "Option::is_none")]
    sender: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    receiver: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    udp: Option<Span>,
}

#[derive(Serialize)]
struct End {
    streams: Vec<EndStream>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_bidir_reverse: Option<Span>,
    sum_sent: Span,
    sum_received: Span,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_sent_bidir_reverse: Option<Span>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sum_received_bidir_reverse: Option<Span>,
    cpu_utilization_percent: Cpu,
    #[serde(skip_serializing_if = "Option::is_none")]
    sender_tcp_congestion: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    receiver_tcp_congestion: Option<String>,
}

#[derive(Serialize)]
struct Cpu {
    host_total: f64,
    host_user: f64,
    host_system: f64,
    remote_total: f64,
    remote_user: f64,
    remote_system: f64,
}

/// The direction iperf3 reports in `sum`, `sum_sent` and `sum_received`: the client's unless
/// `-R`; with `--bidir` the other one is the `…_bidir_reverse` family.
fn forward(tp: &ThroughputSpec) -> StreamDirection {
    match tp.direction {
        Direction::ServerToClient => StreamDirection::ServerToClient,
        Direction::ClientToServer | Direction::Bidir => StreamDirection::ClientToServer,
    }
}

/// The other direction of a `--bidir` test.
fn bidir_reverse(tp: &ThroughputSpec) -> Option<StreamDirection> {
    (tp.direction == Direction::Bidir).then_some(StreamDirection::ServerToClient)
}

fn client_sends(d: StreamDirection) -> bool {
    d == StreamDirection::ClientToServer
}

fn start(r: &TestReport, tp: &ThroughputSpec, ctx: &Context) -> Start {
    let started = xbench::time::parse_rfc3339(&r.started_at).unwrap_or(UNIX_EPOCH);
    let first = r.streams.first();
    let udp = tp.udp.is_some();
    // iperf3's -b is per stream; xbench's -u -b is the total of a direction's streams.
    let target_bitrate = match tp.udp {
        Some(u) => u.bitrate.unwrap_or(0) / u64::from(tp.streams.get()),
        None => tp.bitrate.unwrap_or(0),
    };
    Start {
        connected: r.streams.iter().map(connected).collect(),
        version: version(),
        system_info: ctx.system_info.clone(),
        timestamp: Timestamp {
            time: http_date(started),
            timesecs: started
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        },
        connecting_to: ConnectingTo {
            host: r.host.clone(),
            port: r.server_addr.map_or(0, |a| a.port()),
        },
        cookie: ctx.cookie.clone(),
        tcp_mss_default: (!udp).then(|| first.map_or(0, |s| s.client_socket.mss)),
        target_bitrate,
        sock_bufsize: r.spec.socket.window.unwrap_or(0),
        sndbuf_actual: first.map_or(0, |s| s.client_socket.sndbuf_granted),
        rcvbuf_actual: first.map_or(0, |s| s.client_socket.rcvbuf_granted),
        test_start: TestStart {
            protocol: if udp { "UDP" } else { "TCP" },
            num_streams: tp.streams.get(),
            blksize: tp.udp.map_or(tp.block_len.get(), |u| u.datagram_len),
            omit: seconds(r.spec.omit),
            duration: match r.spec.end {
                EndCondition::Duration(d) => seconds(d),
                EndCondition::Bytes(_) => Value::from(0),
            },
            bytes: match r.spec.end {
                EndCondition::Bytes(b) => b,
                EndCondition::Duration(_) => 0,
            },
            blocks: 0,
            reverse: u8::from(tp.direction == Direction::ServerToClient),
            tos: 0,
            target_bitrate,
        },
    }
}

/// A data connection from the client's side, as iperf3's client lists them.
fn connected(s: &StreamInfo) -> Connected {
    Connected {
        socket: s.id,
        local_host: s.client_addr.ip().to_string(),
        local_port: s.client_addr.port(),
        remote_host: s.server_addr.ip().to_string(),
        remote_port: s.server_addr.port(),
    }
}

/// Whole seconds as an integer, as iperf3 writes them; a fraction as a number with one.
fn seconds(d: Duration) -> Value {
    if d.subsec_nanos() == 0 {
        Value::from(d.as_secs())
    } else {
        Value::from(d.as_secs_f64())
    }
}

fn tcp_interval(iv: &Interval, tp: &ThroughputSpec, pmtus: &HashMap<u16, u64>) -> IntervalOut {
    let streams = iv
        .streams
        .iter()
        .map(|s| {
            let mine = client_sends(s.direction);
            // The client's own end of the stream: what it sent, or what it read. A reader's
            // count is its own, so it is always there; the default only keeps the shape.
            let t = if mine {
                s.sent
            } else {
                s.received.unwrap_or_default()
            };
            let mut span = Span {
                socket: Some(s.stream),
                omitted: Some(iv.omitted),
                ..Span::transfer(iv.start_s, &t, mine)
            };
            if mine {
                let tcp = s.tcp.unwrap_or_default();
                span.retransmits = Some(tcp.retransmits);
                span.snd_cwnd = Some(tcp.cwnd_bytes);
                span.snd_wnd = Some(tcp.snd_wnd_bytes.map_or(0, u64::from));
                span.rtt = Some(u64::from(tcp.srtt_us));
                span.rttvar = Some(u64::from(tcp.rttvar_us));
                // Interval TCP state has no path MTU; the sender's at the end of the test.
                span.pmtu = Some(pmtus.get(&s.stream).copied().unwrap_or(0));
            }
            span
        })
        .collect();
    let sum = |d: StreamDirection| {
        let mine = client_sends(d);
        let s = iv.sum.iter().find(|s| s.direction == d);
        let t = s
            .map(|s| {
                if mine {
                    s.sent
                } else {
                    s.received.unwrap_or_default()
                }
            })
            .unwrap_or_default();
        Span {
            retransmits: mine.then(|| s.map_or(0, |s| s.retransmits)),
            omitted: Some(iv.omitted),
            ..Span::transfer(iv.start_s, &t, mine)
        }
    };
    IntervalOut {
        streams,
        sum: sum(forward(tp)),
        sum_bidir_reverse: bidir_reverse(tp).map(sum),
    }
}

fn tcp_end(r: &TestReport, tp: &ThroughputSpec) -> End {
    let dir = |d: StreamDirection| r.summary.directions.iter().find(|s| s.direction == d);
    let mut streams: Vec<(u16, EndStream)> = r
        .summary
        .directions
        .iter()
        .flat_map(|d| d.per_stream.iter().map(move |s| (d.direction, s)))
        .map(|(d, s)| {
            let mine = client_sends(d);
            let tcp = s.tcp.as_ref();
            let rtt = tcp.and_then(|t| t.rtt);
            let sender = Span {
                socket: Some(s.stream),
                retransmits: Some(tcp.map_or(0, |t| t.retransmits)),
                max_snd_cwnd: Some(tcp.map_or(0, |t| t.max_cwnd_bytes)),
                max_snd_wnd: Some(tcp.and_then(|t| t.max_snd_wnd_bytes).map_or(0, u64::from)),
                max_rtt: Some(rtt.map_or(0, |r| u64::from(r.max_us))),
                min_rtt: Some(rtt.map_or(0, |r| u64::from(r.min_us))),
                mean_rtt: Some(rtt.map_or(0, |r| r.mean_us.round() as u64)),
                ..Span::transfer(0.0, &s.sender.unwrap_or_default(), mine)
            };
            let receiver = Span {
                socket: Some(s.stream),
                ..Span::transfer(0.0, &s.receiver.unwrap_or_default(), mine)
            };
            (
                s.stream,
                EndStream {
                    sender: Some(sender),
                    receiver: Some(receiver),
                    udp: None,
                },
            )
        })
        .collect();
    streams.sort_by_key(|(id, _)| *id);
    let sums = |d: StreamDirection| {
        let mine = client_sends(d);
        let s: Option<&DirectionSummary> = dir(d);
        let sent = Span {
            retransmits: Some(s.map_or(0, |s| s.retransmits)),
            ..Span::transfer(0.0, &s.and_then(|s| s.sender).unwrap_or_default(), mine)
        };
        let received = Span::transfer(0.0, &s.and_then(|s| s.receiver).unwrap_or_default(), mine);
        (sent, received)
    };
    let (sum_sent, sum_received) = sums(forward(tp));
    let (sum_sent_bidir_reverse, sum_received_bidir_reverse) = bidir_reverse(tp).map(sums).unzip();
    // iperf3 names the congestion control of the end that sends the `sum_sent` direction,
    // then the other end's.
    let (sender_cc, receiver_cc) = r
        .streams
        .iter()
        .find(|s| s.direction == forward(tp))
        .map(|s| {
            let (c, v) = (&s.client_socket.congestion, &s.server_socket.congestion);
            if client_sends(s.direction) {
                (c.clone(), v.clone())
            } else {
                (v.clone(), c.clone())
            }
        })
        .unwrap_or_default();
    End {
        streams: streams.into_iter().map(|(_, s)| s).collect(),
        sum: None,
        sum_bidir_reverse: None,
        sum_sent,
        sum_received,
        sum_sent_bidir_reverse,
        sum_received_bidir_reverse,
        cpu_utilization_percent: cpu(r),
        sender_tcp_congestion: Some(sender_cc),
        receiver_tcp_congestion: Some(receiver_cc),
    }
}

/// The path MTU of each stream's sender at the end of the test: iperf3 writes one per
/// interval, xbench samples it once.
fn pmtus(r: &TestReport) -> HashMap<u16, u64> {
    r.summary
        .directions
        .iter()
        .flat_map(|d| &d.per_stream)
        .filter_map(|s| Some((s.stream, u64::from(s.tcp.as_ref()?.pmtu))))
        .collect()
}

fn udp_interval(iv: &UdpInterval, tp: &ThroughputSpec) -> IntervalOut {
    let seconds = iv.end_s - iv.start_s;
    let span = |figures: &UdpFigures, d: StreamDirection| {
        let mine = client_sends(d);
        let mut span = Span {
            start: iv.start_s,
            end: iv.end_s,
            seconds,
            omitted: Some(iv.omitted),
            sender: mine,
            ..Span::default()
        };
        if mine {
            span.bytes = figures.sent.bytes;
            span.bits_per_second = figures.sent.bits_per_second;
            span.packets = Some(figures.sent.datagrams);
        } else {
            // The client's own count of what it received; always there, the default keeps
            // the shape.
            let rx = figures.received.unwrap_or_default();
            // The datagrams the receiver's sequence numbers cover: iperf3's `packets`.
            let packets = rx.count.datagrams + rx.lost;
            span.bytes = rx.count.bytes;
            span.bits_per_second = rx.count.bits_per_second;
            span.jitter_ms = Some(rx.jitter_ms);
            span.lost_packets = Some(rx.lost);
            span.packets = Some(packets);
            span.lost_percent = Some(if packets > 0 {
                rx.lost as f64 * 100.0 / packets as f64
            } else {
                0.0
            });
        }
        span
    };
    let streams = iv
        .streams
        .iter()
        .map(|s| Span {
            socket: Some(s.stream),
            ..span(&s.figures, s.direction)
        })
        .collect();
    let sum = |d: StreamDirection| {
        let f = iv
            .sum
            .iter()
            .find(|s| s.direction == d)
            .map(|s| s.figures)
            .unwrap_or_default();
        span(&f, d)
    };
    IntervalOut {
        streams,
        sum: sum(forward(tp)),
        sum_bidir_reverse: bidir_reverse(tp).map(sum),
    }
}

fn udp_end(r: &TestReport, tp: &ThroughputSpec) -> End {
    let seconds = r.summary.measured_s;
    let dirs: &[UdpDirectionSummary] = r.udp.as_ref().map_or(&[], |u| &u.directions);
    let streams = udp_streams(dirs, seconds);
    let figures = |d: StreamDirection| {
        dirs.iter()
            .find(|s| s.direction == d)
            .map(|s| s.figures)
            .unwrap_or_default()
    };
    let fwd = forward(tp);
    let f = figures(fwd);
    let mine = client_sends(fwd);
    let (sum_sent, sum_received) = udp_sums(&f, mine, seconds);
    let reverse = bidir_reverse(tp).map(|d| {
        let f = figures(d);
        let (sent, received) = udp_sums(&f, false, seconds);
        (udp_combined(&f, false, seconds), sent, received)
    });
    let (sum_bidir_reverse, sum_sent_bidir_reverse, sum_received_bidir_reverse) = match reverse {
        Some((a, b, c)) => (Some(a), Some(b), Some(c)),
        None => (None, None, None),
    };
    End {
        streams,
        sum: Some(udp_combined(&f, mine, seconds)),
        sum_bidir_reverse,
        sum_sent,
        sum_received,
        sum_sent_bidir_reverse,
        sum_received_bidir_reverse,
        cpu_utilization_percent: cpu(r),
        sender_tcp_congestion: None,
        receiver_tcp_congestion: None,
    }
}

/// A UDP span over the whole measured window: `bytes` at `bits_per_second`, from the sender's
/// side or the receiver's.
fn udp_span(seconds: f64, bytes: u64, bits_per_second: f64, sender: bool) -> Span {
    Span {
        start: 0.0,
        end: seconds,
        seconds,
        bytes,
        bits_per_second,
        sender,
        ..Span::default()
    }
}

/// iperf3's combined view of a stream or direction: the sender's bytes and rate, the
/// receiver's jitter and losses, `packets` the datagrams sent.
fn udp_combined(f: &UdpFigures, sender: bool, seconds: f64) -> Span {
    let rx = f.received.unwrap_or_default();
    Span {
        jitter_ms: Some(rx.jitter_ms),
        lost_packets: Some(rx.lost),
        packets: Some(f.sent.datagrams),
        lost_percent: Some(rx.lost_pct),
        ..udp_span(seconds, f.sent.bytes, f.sent.bits_per_second, sender)
    }
}

/// A direction's `sum_sent` (the sender's count, no loss) and `sum_received` (the receiver's
/// count with its jitter and losses), as iperf3 writes them.
fn udp_sums(f: &UdpFigures, sender: bool, seconds: f64) -> (Span, Span) {
    let rx = f.received.unwrap_or_default();
    let sent = Span {
        jitter_ms: Some(0.0),
        lost_packets: Some(0),
        packets: Some(f.sent.datagrams),
        lost_percent: Some(0.0),
        ..udp_span(seconds, f.sent.bytes, f.sent.bits_per_second, sender)
    };
    let received = Span {
        jitter_ms: Some(rx.jitter_ms),
        lost_packets: Some(rx.lost),
        packets: Some(f.sent.datagrams),
        lost_percent: Some(rx.lost_pct),
        ..udp_span(seconds, rx.count.bytes, rx.count.bits_per_second, sender)
    };
    (sent, received)
}

/// Each UDP stream's combined view, by stream number.
fn udp_streams(dirs: &[UdpDirectionSummary], seconds: f64) -> Vec<EndStream> {
    let mut streams: Vec<(u16, EndStream)> = dirs
        .iter()
        .flat_map(|d| &d.per_stream)
        .map(|s| {
            let udp = Span {
                socket: Some(s.stream),
                out_of_order: Some(s.figures.received.map_or(0, |rx| rx.out_of_order)),
                ..udp_combined(&s.figures, client_sends(s.direction), seconds)
            };
            (
                s.stream,
                EndStream {
                    sender: None,
                    receiver: None,
                    udp: Some(udp),
                },
            )
        })
        .collect();
    streams.sort_by_key(|(id, _)| *id);
    streams.into_iter().map(|(_, s)| s).collect()
}

/// iperf3's CPU percentages: CPU-seconds over the test's wall-clock seconds. xbench measures
/// each end's data threads, not the whole process, and the wall clock here is the data phase
/// (the `-O` warm-up and the measured window), so these approximate iperf3's figures.
fn cpu(r: &TestReport) -> Cpu {
    let wall = r.spec.omit.as_secs_f64() + r.summary.measured_s;
    let pct = |s: f64| if wall > 0.0 { s * 100.0 / wall } else { 0.0 };
    let host = r.cpu.client;
    let remote = r.cpu.server.unwrap_or_default();
    Cpu {
        host_total: pct(host.total_s()),
        host_user: pct(host.user_s),
        host_system: pct(host.system_s),
        remote_total: pct(remote.total_s()),
        remote_user: pct(remote.user_s),
        remote_system: pct(remote.system_s),
    }
}

/// `start.version`: says which tool wrote the document, in iperf3's place.
fn version() -> String {
    format!("xbench {} (iperf 3.12 JSON)", env!("CARGO_PKG_VERSION"))
}

/// `uname -srvm` with the node name, as iperf3's `system_info`: "Linux host 6.1.0 #1 SMP … x86_64".
fn system_info() -> String {
    // SAFETY: uname(2) fills the struct we own; an all-zero utsname is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer is to our struct.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    [
        field(&u.sysname),
        field(&u.nodename),
        field(&u.release),
        field(&u.version),
        field(&u.machine),
    ]
    .join(" ")
}

/// iperf3's cookie: 36 characters of `a-z2-7` (its base32 alphabet), random. xbench's protocol
/// has no cookie; this one only fills the key.
fn cookie() -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut raw = [0u8; 36];
    // Without the OS's randomness the cookie is only less random; nothing depends on it.
    let _ = getrandom::fill(&mut raw);
    raw.iter()
        .map(|b| char::from(ALPHABET[usize::from(b % 32)]))
        .collect()
}

/// `Wed, 25 Nov 2026 14:26:33 GMT`, iperf3's `start.timestamp.time`.
fn http_date(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    // `YYYY-MM-DDTHH:MM:SS.mmmZ`: fixed positions.
    let iso = xbench::time::rfc3339(t);
    let month: usize = iso.get(5..7).and_then(|m| m.parse().ok()).unwrap_or(1);
    format!(
        "{}, {} {} {} {} GMT",
        DAYS[(secs / 86_400 % 7) as usize],
        iso.get(8..10).unwrap_or("01"),
        MONTHS[month.clamp(1, 12) - 1],
        iso.get(0..4).unwrap_or("1970"),
        iso.get(11..19).unwrap_or("00:00:00"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_written_as_iperf3_writes_them() {
        // iperf3 3.12's own: "Wed, 25 Nov 2026 14:26:33 GMT" for 1795616793.
        let t = UNIX_EPOCH + Duration::from_secs(1_795_616_793);
        assert_eq!(http_date(t), "Wed, 25 Nov 2026 14:26:33 GMT");
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn cookies_look_like_iperf3s() {
        let (a, b) = (cookie(), cookie());
        assert_eq!(a.len(), 36);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(&c))
        );
        assert_ne!(a, b);
    }
}
