//! Runs one test against a server: connect, negotiate, open the data connections, move bytes,
//! and merge both ends' measurements into a [`TestReport`].
//!
//! Failures before the data flows are `Err`; once it flows, a test always yields a report, with
//! [`Outcome::Interrupted`] or [`Outcome::Failed`] when it was cut short, so nothing measured is
//! lost. Intervals reach the caller live through `on_event`. This module prints nothing.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::config::{EndCondition, StreamDirection, TestSpec, Workload};
use crate::engine::group::Group;
use crate::engine::sampler::Sampler;
use crate::engine::schedule::Schedule;
use crate::engine::sockopt;
use crate::engine::stream::{self, Budget, SendMode};
use crate::error::{Error, connect_hint};
use crate::proto::{
    self, Channel, Cookie, ErrorMsg, Finish, Hello, Message, MessageReader, PROTOCOL_VERSION,
    Preamble,
};
use crate::report::{
    Interval, Outcome, PeerInfo, SCHEMA_VERSION, SideInterval, SideResults, SocketReport,
    StreamInfo, TestReport,
};
use crate::summary::{self, Directions};
use crate::time::rfc3339;

/// Default server port, iperf3's.
pub const DEFAULT_PORT: u16 = 5201;

/// Which address family to use for a host name with both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressFamily {
    /// Whatever the resolver lists first.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

/// Where and how to run a test.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server host name or address.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// Address family for `host`.
    pub family: AddressFamily,
    /// Local address to send from (`-B`).
    pub bind: Option<IpAddr>,
    /// How long connecting may take, per connection.
    pub connect_timeout: Duration,
    /// How long to wait after the end for the receivers to drain and the server's results.
    /// Data still queued in large buffers on a slow path can take seconds to arrive.
    pub drain_timeout: Duration,
    /// The test.
    pub spec: TestSpec,
    /// A name for the path, carried into the report (`--label`).
    pub label: Option<String>,
}

impl ClientConfig {
    /// A default throughput test against `host`.
    pub fn new(host: impl Into<String>) -> Self {
        ClientConfig {
            host: host.into(),
            port: DEFAULT_PORT,
            family: AddressFamily::Any,
            bind: None,
            connect_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            spec: TestSpec::throughput(),
            label: None,
        }
    }
}

/// What happens during a test, as it happens.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClientEvent {
    /// Data connections are open and data is about to flow.
    Started {
        /// Who answered.
        server: PeerInfo,
        /// The data connections.
        streams: Vec<StreamInfo>,
    },
    /// One interval, both ends merged (or the client's alone if the server's report is late).
    Interval(Interval),
    /// Something the user should know.
    Warning(String),
}

/// Runs a test. `cancel` resolving (Ctrl-C) ends it early with [`Outcome::Interrupted`]; the
/// report still covers what ran.
pub async fn run(
    config: &ClientConfig,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
    cancel: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    config.spec.validate()?;
    let tp = match &config.spec.workload {
        Workload::Throughput(t) => t.clone(),
    };
    let addrs = resolve(config).await?;
    let (ctrl, server_addr) = connect_any(&addrs, config).await?;
    let addr_s = format!("{}:{}", config.host, config.port);
    let client_addr = ctrl
        .local_addr()
        .map_err(|e| Error::io("reading the local address", e))?;
    let (rd, mut wr) = ctrl.into_split();
    let mut rd = MessageReader::new(rd);
    let server = handshake(&mut rd, &mut wr, &addr_s).await?;

    send(
        &mut wr,
        &Message::Start(Box::new(config.spec.clone())),
        &addr_s,
    )
    .await?;
    let cookie = match expect(&mut rd, &addr_s, "waiting for the test to be accepted").await? {
        Message::Accepted(a) => a.cookie,
        other => {
            return Err(unexpected(
                other,
                &addr_s,
                "waiting for the test to be accepted",
            ));
        }
    };

    // Stream ids: `streams` client-to-server first, then server-to-client (bidir).
    let dirs: Directions = tp
        .direction
        .stream_directions()
        .iter()
        .flat_map(|d| std::iter::repeat_n(*d, usize::from(tp.streams.get())))
        .enumerate()
        .map(|(i, d)| (i as u16, d))
        .collect();
    let mut warnings = Vec::new();
    let data = open_data(config, server_addr, cookie, dirs.len(), &mut warnings).await?;

    let ready = match expect(&mut rd, &addr_s, "waiting for the data connections").await? {
        Message::Ready(r) => r,
        other => {
            return Err(unexpected(
                other,
                &addr_s,
                "waiting for the data connections",
            ));
        }
    };
    for w in &warnings {
        on_event(ClientEvent::Warning(w.clone()));
    }

    // Data flows from here; from now on every path ends in a report.
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
    let mut handles = Vec::with_capacity(data.len());
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
        let block = tp.block_len.get() as usize;
        let h = match direction {
            StreamDirection::ClientToServer => {
                stream::spawn_sender(id, sock, block, send_mode, send_budget.clone())
            }
            StreamDirection::ServerToClient => stream::spawn_receiver(id, sock, block, tp.receive),
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
        server: server.clone(),
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
    tokio::pin!(cancel);
    let mut outcome = Outcome::Completed;
    let mut server_results: Option<SideResults> = None;

    // Phase 1: the test runs until its end condition, the user, or a failure stops it.
    let mut control_open = true;
    loop {
        tokio::select! {
            // Biased: when the deadline and an interval boundary coincide, the deadline wins, so
            // the last interval is closed by `finish` and includes the drain.
            biased;
            () = &mut cancel => { outcome = Outcome::Interrupted; break; }
            _ = sleep_until_opt(deadline) => break,
            _ = group.all_ended(), if budget.is_some() => break,
            msg = rd.next() => match msg {
                Ok(Some(Message::Interval(iv))) => merger.server(iv, on_event),
                Ok(Some(Message::Error(e))) => {
                    outcome = Outcome::Failed { error: format!("the server ended the test: {}", e.message) };
                    control_open = false;
                    break;
                }
                Ok(Some(other)) => {
                    outcome = Outcome::Failed { error: unexpected(other, &addr_s, "the test ran").to_string() };
                    break;
                }
                Ok(None) => {
                    outcome = Outcome::Failed { error: format!("{addr_s} closed the control connection during the test") };
                    control_open = false;
                    break;
                }
                Err(e) => {
                    outcome = Outcome::Failed { error: Error::Protocol { addr: addr_s.clone(), cause: e }.to_string() };
                    control_open = false;
                    break;
                }
            },
            _ = tokio::time::sleep_until(sampler.next_wakeup().into()) => {
                if let Some(iv) = sampler.on_wakeup(Instant::now()) {
                    merger.client(iv, on_event);
                }
            }
        }
    }

    // Phase 2: stop sending, tell the server, let the receivers drain, collect its results.
    group.stop_senders();
    let interrupted = outcome == Outcome::Interrupted;
    if control_open
        && send(&mut wr, &Message::Finish(Finish { interrupted }), &addr_s)
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
    let mut receivers_done = false;
    while control_open && (server_results.is_none() || !receivers_done) {
        tokio::select! {
            msg = rd.next(), if server_results.is_none() => match msg {
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
            _ = tokio::time::sleep_until(sampler.next_wakeup().into()) => {
                if let Some(iv) = sampler.on_wakeup(Instant::now()) {
                    merger.client(iv, on_event);
                }
            }
            _ = tokio::time::sleep_until(drain_deadline.into()) => {
                warnings.push(format!(
                    "gave up waiting for the end of the test after {drain_limit:?}; figures cover what had arrived"
                ));
                break;
            }
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
    let measured_s = match config.spec.end {
        EndCondition::Duration(d) if outcome == Outcome::Completed => d.as_secs_f64(),
        _ => end
            .saturating_duration_since(start + config.spec.omit)
            .as_secs_f64(),
    };
    let summary = summary::summarize(&dirs, &client_results, server_results.as_ref(), measured_s);
    let cpu = summary::cpu_report(&client_results, server_results.as_ref());
    if server_results.is_none() {
        warnings.push("the server's results never arrived: receiver figures of client-to-server streams are missing".into());
    }
    Ok(TestReport {
        schema_version: SCHEMA_VERSION,
        xbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at: rfc3339(started_at),
        label: config.label.clone(),
        host: config.host.clone(),
        client_addr,
        server_addr,
        server,
        spec: config.spec.clone(),
        streams: infos,
        intervals,
        summary,
        cpu,
        outcome,
        warnings,
    })
}

async fn resolve(config: &ClientConfig) -> Result<Vec<SocketAddr>, Error> {
    let host = config.host.trim_start_matches('[').trim_end_matches(']');
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, config.port))
        .await
        .map_err(|e| Error::Resolve {
            host: config.host.clone(),
            port: config.port,
            cause: e,
        })?
        .collect();
    let wanted: Vec<SocketAddr> = found
        .into_iter()
        .filter(|a| match config.family {
            AddressFamily::Any => true,
            AddressFamily::V4 => a.is_ipv4(),
            AddressFamily::V6 => a.is_ipv6(),
        })
        .collect();
    if wanted.is_empty() {
        return Err(Error::NoAddress {
            host: config.host.clone(),
            family: match config.family {
                AddressFamily::V6 => "IPv6",
                AddressFamily::V4 => "IPv4",
                AddressFamily::Any => "IP",
            },
        });
    }
    Ok(wanted)
}

/// Tries each resolved address in turn, as `connect(2)` users expect of a host name.
async fn connect_any(
    addrs: &[SocketAddr],
    config: &ClientConfig,
) -> Result<(TcpStream, SocketAddr), Error> {
    let mut last = None;
    for &addr in addrs {
        match connect_one(addr, config, None, &mut Vec::new()).await {
            Ok((s, _)) => return Ok((s, addr)),
            Err(e) => last = Some((addr, e)),
        }
    }
    let (addr, e) = last.unwrap_or_else(|| {
        (
            addrs[0],
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        )
    });
    let shown = if addrs.len() > 1 || addr.ip().to_string() != config.host {
        format!("{}:{} ({addr})", config.host, config.port)
    } else {
        format!("{}:{}", config.host, config.port)
    };
    Err(Error::Connect {
        hint: connect_hint(&e, config.port),
        addr: shown,
        cause: e,
    })
}

async fn connect_one(
    addr: SocketAddr,
    config: &ClientConfig,
    opts: Option<&crate::config::SocketOptions>,
    warnings: &mut Vec<String>,
) -> std::io::Result<(TcpStream, Option<SocketReport>)> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(opts) = opts {
        sockopt::apply(SockRef::from(&sock), opts, warnings).map_err(std::io::Error::other)?;
    }
    if let Some(ip) = config.bind {
        sock.bind(&SocketAddr::new(ip, 0).into())?;
    }
    sock.set_nonblocking(true)?;
    let tsock = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(sock));
    let stream = match tokio::time::timeout(config.connect_timeout, tsock.connect(addr)).await {
        Ok(r) => r?,
        Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
    };
    let report = opts.map(|o| sockopt::report(SockRef::from(&stream), o));
    Ok((stream, report))
}

async fn handshake(
    rd: &mut MessageReader<OwnedReadHalf>,
    wr: &mut OwnedWriteHalf,
    addr: &str,
) -> Result<PeerInfo, Error> {
    let proto_err = |cause| Error::Protocol {
        addr: addr.to_owned(),
        cause,
    };
    wr.write_all(&Preamble::new(Channel::Control).encode())
        .await
        .map_err(|e| Error::io(format!("writing to {addr}"), e))?;
    let waited = Duration::from_secs(5);
    let mut pre = [0u8; proto::PREAMBLE_LEN];
    let not_xbench = || Error::NotXbench {
        addr: addr.to_owned(),
        waited,
        hint: " (an iperf3 server waits silently like this; `xbench client` needs `xbench server`)",
    };
    match tokio::time::timeout(waited, rd.inner_mut().read_exact(&mut pre)).await {
        Err(_) => return Err(not_xbench()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(Error::NotXbench {
                addr: addr.to_owned(),
                waited,
                hint: " (it closed the connection)",
            });
        }
        Ok(Err(e)) => return Err(Error::io(format!("reading from {addr}"), e)),
        Ok(Ok(_)) => {}
    }
    let pre = Preamble::decode(&pre).map_err(|_| Error::NotXbench {
        addr: addr.to_owned(),
        waited,
        hint: " (it answered with something else)",
    })?;
    if pre.version != PROTOCOL_VERSION {
        return Err(Error::VersionMismatch {
            addr: addr.to_owned(),
            client: PROTOCOL_VERSION,
            server: pre.version,
        });
    }
    proto::write_message(
        wr,
        &Message::Hello(Hello {
            software: software(),
        }),
    )
    .await
    .map_err(|e| proto_err(proto::ProtoError::Io(e.kind(), e.to_string())))?;
    match expect(rd, addr, "waiting for the server's welcome").await? {
        Message::Welcome(w) => Ok(PeerInfo {
            software: w.software,
            protocol: pre.version,
        }),
        other => Err(unexpected(other, addr, "waiting for the server's welcome")),
    }
}

/// Opens every data connection concurrently (one by one would cost a round trip each).
async fn open_data(
    config: &ClientConfig,
    server: SocketAddr,
    cookie: Cookie,
    n: usize,
    warnings: &mut Vec<String>,
) -> Result<Vec<(std::net::TcpStream, SocketReport)>, Error> {
    let mut set = tokio::task::JoinSet::new();
    for id in 0..n {
        let config = config.clone();
        set.spawn(async move {
            let mut w = Vec::new();
            let id16 = id as u16;
            let res: std::io::Result<_> = async {
                let (mut s, report) =
                    connect_one(server, &config, Some(&config.spec.socket), &mut w).await?;
                let mut hello = Vec::with_capacity(proto::PREAMBLE_LEN + proto::DATA_HELLO_LEN);
                hello.extend_from_slice(&Preamble::new(Channel::Data).encode());
                hello.extend_from_slice(&cookie.0);
                hello.extend_from_slice(&id16.to_be_bytes());
                s.write_all(&hello).await?;
                let std = s.into_std()?;
                Ok((std, report.unwrap_or_else(empty_socket_report)))
            }
            .await;
            (id, res, w)
        });
    }
    let mut out: BTreeMap<usize, (std::net::TcpStream, SocketReport)> = BTreeMap::new();
    let mut first_err = None;
    while let Some(joined) = set.join_next().await {
        let Ok((id, res, w)) = joined else { continue };
        if id == 0 {
            // Every stream gets the same settings; one copy of each warning is enough.
            warnings.extend(w);
        }
        match res {
            Ok(v) => {
                out.insert(id, v);
            }
            Err(e) if first_err.is_none() => {
                // A socket option failure arrives wrapped; show the library error itself.
                first_err = Some(match e.downcast::<Error>() {
                    Ok(inner) => inner,
                    Err(e) => Error::DataConnect {
                        stream: id as u16,
                        addr: server.to_string(),
                        cause: e,
                    },
                });
            }
            Err(_) => {}
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(out.into_values().collect())
}

fn empty_socket_report() -> SocketReport {
    SocketReport {
        sndbuf_requested: None,
        sndbuf_granted: 0,
        rcvbuf_requested: None,
        rcvbuf_granted: 0,
        mss: 0,
        congestion: String::new(),
        nodelay: false,
    }
}

pub(crate) fn software() -> String {
    format!("xbench {}", env!("CARGO_PKG_VERSION"))
}

async fn send(wr: &mut OwnedWriteHalf, msg: &Message, addr: &str) -> Result<(), Error> {
    proto::write_message(wr, msg)
        .await
        .map_err(|e| Error::Protocol {
            addr: addr.to_owned(),
            cause: proto::ProtoError::Io(e.kind(), e.to_string()),
        })
}

/// Reads the next message; an `Error` from the server becomes [`Error::Refused`].
async fn expect(
    rd: &mut MessageReader<OwnedReadHalf>,
    addr: &str,
    state: &'static str,
) -> Result<Message, Error> {
    match rd.next_within(Duration::from_secs(30)).await {
        Ok(Some(Message::Error(ErrorMsg { code, message }))) => {
            Err(Error::Refused { code, message })
        }
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err(Error::Protocol {
            addr: addr.to_owned(),
            cause: proto::ProtoError::Io(
                std::io::ErrorKind::UnexpectedEof,
                format!("the server closed the connection while {state}"),
            ),
        }),
        Err(cause) => Err(Error::Protocol {
            addr: addr.to_owned(),
            cause,
        }),
    }
}

fn unexpected(m: Message, addr: &str, state: &'static str) -> Error {
    let got = serde_json::to_value(&m)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    Error::Unexpected {
        addr: addr.to_owned(),
        got,
        state,
    }
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// Pairs the client's and the server's intervals by index and emits each once.
struct Merger {
    dirs: Directions,
    pending: BTreeMap<u32, (Option<SideInterval>, Option<SideInterval>)>,
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
        self.emit(
            |i, (c, s)| c.is_some() && (s.is_some() || i + 1 < idx),
            on_event,
        );
    }

    fn server(&mut self, iv: SideInterval, on_event: &mut (dyn FnMut(ClientEvent) + Send)) {
        let idx = iv.index;
        self.pending.entry(idx).or_default().1 = Some(iv);
        self.emit(|_, (c, s)| c.is_some() && s.is_some(), on_event);
    }

    fn emit(
        &mut self,
        ready: impl Fn(u32, &(Option<SideInterval>, Option<SideInterval>)) -> bool,
        on_event: &mut (dyn FnMut(ClientEvent) + Send),
    ) {
        while let Some((&i, pair)) = self.pending.first_key_value() {
            if !ready(i, pair) {
                break;
            }
            let Some((_, (c, s))) = self.pending.pop_first() else {
                break;
            };
            if let Some(iv) = summary::merge_interval(&self.dirs, c.as_ref(), s.as_ref()) {
                on_event(ClientEvent::Interval(iv.clone()));
                self.done.push(iv);
            }
        }
    }

    /// Emits what is left. A server interval past the client's last (the receiver was still
    /// draining when the client's clock stopped) is folded into the client's last interval so
    /// that intervals still add up to the totals.
    fn finish(mut self, on_event: &mut (dyn FnMut(ClientEvent) + Send)) -> Vec<Interval> {
        let last_client = self
            .pending
            .iter()
            .rev()
            .find(|(_, (c, _))| c.is_some())
            .map(|(i, _)| *i);
        if let Some(lc) = last_client {
            let late: Vec<u32> = self.pending.range(lc + 1..).map(|(i, _)| *i).collect();
            for i in late {
                let Some((_, Some(extra))) = self.pending.remove(&i) else {
                    continue;
                };
                let slot = self.pending.entry(lc).or_default();
                match &mut slot.1 {
                    Some(s) => {
                        s.end_s = extra.end_s;
                        for x in extra.streams {
                            if let Some(t) = s.streams.iter_mut().find(|t| t.stream == x.stream) {
                                t.bytes += x.bytes;
                                // Keep the latest state, but count every retransmit.
                                if let Some(mut late) = x.tcp {
                                    late.retransmits += t.tcp.map_or(0, |e| e.retransmits);
                                    t.tcp = Some(late);
                                }
                            }
                        }
                    }
                    None => slot.1 = Some(extra),
                }
            }
        }
        self.emit(|_, _| true, on_event);
        self.done
    }
}
