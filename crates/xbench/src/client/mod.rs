//! Runs one test against a server: connect, negotiate, open the data connections, move bytes,
//! and merge both ends' measurements into a [`TestReport`].
//!
//! Failures before the data flows are `Err`; once it flows, a test always yields a report, with
//! [`Outcome::Interrupted`] or [`Outcome::Failed`] when it was cut short, so nothing measured is
//! lost. Intervals reach the caller live through `on_event`. This module prints nothing.

mod bulk;
mod rr;

pub use rr::PER_FLOW_LATENCY_LIMIT;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::auth::{Nonce, Psk};
use crate::config::{TestSpec, Workload};
use crate::control::keepalive;
use crate::engine::sockopt;
use crate::error::{Error, connect_hint};
use crate::proto::{
    self, AuthProof, Channel, Cookie, DataHello, ErrorMsg, Hello, Message, MessageReader,
    PROTOCOL_VERSION, Preamble, ProtoError, Ready,
};
use crate::report::{
    CpuReport, Interval, Outcome, PeerInfo, RrInterval, RrReport, SCHEMA_VERSION, SocketReport,
    StreamInfo, Summary, TestReport,
};
use crate::time::rfc3339;

pub use crate::proto::DEFAULT_PORT;

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
    /// A request/response flow with a transaction outstanding and nothing received for this
    /// long has failed: the server stopped answering. Long enough for TCP's own retransmission
    /// back-off on a lossy path.
    pub stall_timeout: Duration,
    /// The test.
    pub spec: TestSpec,
    /// A name for the path, carried into the report (`--label`).
    pub label: Option<String>,
    /// The server's pre-shared key (`--psk-file`); with one, the client also insists that
    /// the server proves it holds the same key.
    pub psk: Option<Psk>,
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
            stall_timeout: Duration::from_secs(10),
            spec: TestSpec::throughput(),
            label: None,
            psk: None,
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
    /// One interval of a request/response test.
    RrInterval(RrInterval),
    /// Something the user should know.
    Warning(String),
}

/// Where a test's live events go.
type OnEvent<'e> = &'e mut (dyn FnMut(ClientEvent) + Send);

/// Runs a test. `cancel` resolving (Ctrl-C) ends it early with [`Outcome::Interrupted`]; the
/// report still covers what ran.
pub async fn run(
    config: &ClientConfig,
    on_event: &mut (dyn FnMut(ClientEvent) + Send),
    cancel: impl Future<Output = ()>,
) -> Result<TestReport, Error> {
    config.spec.validate()?;
    // Setup can take a connect timeout or a slow server's answer: Ctrl-C must cut it short too.
    let mut cancel = std::pin::pin!(cancel);
    let session = interruptible(Session::open(config), cancel.as_mut(), "connecting").await?;
    match &config.spec.workload {
        Workload::Throughput(tp) => bulk::run(session, config, tp, on_event, cancel).await,
        Workload::RequestResponse(rr) => rr::run(session, config, rr, on_event, cancel).await,
    }
}

/// Runs one setup step unless `cancel` fires first, which yields [`Error::Interrupted`].
/// Dropping the step closes whatever it opened; the server sees a client that went away.
pub(crate) async fn interruptible<T>(
    step: impl Future<Output = Result<T, Error>>,
    cancel: Pin<&mut impl Future<Output = ()>>,
    during: &'static str,
) -> Result<T, Error> {
    tokio::select! {
        r = step => r,
        () = cancel => Err(Error::Interrupted { during }),
    }
}

/// An accepted test: the control connection after `Accepted`, and who answered.
pub(crate) struct Session {
    pub(crate) rd: MessageReader<OwnedReadHalf>,
    pub(crate) wr: OwnedWriteHalf,
    /// `host:port` as the user gave it, for messages.
    pub(crate) addr: String,
    pub(crate) server: PeerInfo,
    pub(crate) server_addr: SocketAddr,
    pub(crate) client_addr: SocketAddr,
    pub(crate) cookie: Cookie,
}

impl Session {
    async fn open(config: &ClientConfig) -> Result<Self, Error> {
        let addrs = resolve(config).await?;
        let (ctrl, server_addr) = connect_any(&addrs, config).await?;
        keepalive(&ctrl);
        let addr = format!("{}:{}", config.host, config.port);
        let client_addr = ctrl
            .local_addr()
            .map_err(|e| Error::io("reading the local address", e))?;
        let (rd, mut wr) = ctrl.into_split();
        let mut rd = MessageReader::new(rd);
        let server = handshake(&mut rd, &mut wr, &addr, config.psk.as_ref()).await?;
        send(
            &mut wr,
            &Message::Start(Box::new(config.spec.clone())),
            &addr,
        )
        .await?;
        let state = "waiting for the test to be accepted";
        let cookie = match expect(&mut rd, &addr, state).await? {
            Message::Accepted(a) => a.cookie,
            other => return Err(unexpected(other, &addr, state)),
        };
        Ok(Session {
            rd,
            wr,
            addr,
            server,
            server_addr,
            client_addr,
            cookie,
        })
    }

    /// Opens `n` data connections, then waits for the server's `Ready`; `cancel` (Ctrl-C)
    /// cuts either wait short.
    pub(crate) async fn connect_data(
        &mut self,
        config: &ClientConfig,
        n: usize,
        warnings: &mut Vec<String>,
        mut cancel: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(Vec<(std::net::TcpStream, SocketReport)>, Ready), Error> {
        let data = interruptible(
            open_data(config, self.server_addr, self.cookie, n, warnings),
            cancel.as_mut(),
            "opening the data connections",
        )
        .await?;
        let ready = interruptible(
            self.ready(),
            cancel,
            "waiting for the server's data connections",
        )
        .await?;
        Ok((data, ready))
    }

    /// Waits for the server's `Ready`: its data sockets are set up and it is measuring.
    pub(crate) async fn ready(&mut self) -> Result<Ready, Error> {
        let state = "waiting for the data connections";
        match expect(&mut self.rd, &self.addr, state).await? {
            Message::Ready(r) => Ok(r),
            other => Err(unexpected(other, &self.addr, state)),
        }
    }

    /// The report's common part.
    pub(crate) fn report(
        &self,
        config: &ClientConfig,
        started_at: SystemTime,
        body: ReportBody,
    ) -> TestReport {
        TestReport {
            schema_version: SCHEMA_VERSION,
            xbench_version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: rfc3339(started_at),
            label: config.label.clone(),
            host: config.host.clone(),
            client_addr: self.client_addr,
            server_addr: self.server_addr,
            server: self.server.clone(),
            spec: config.spec.clone(),
            streams: body.streams,
            intervals: body.intervals,
            summary: body.summary,
            rr: body.rr,
            cpu: body.cpu,
            outcome: body.outcome,
            warnings: body.warnings,
        }
    }
}

/// What a workload contributes to a [`TestReport`].
pub(crate) struct ReportBody {
    pub(crate) streams: Vec<StreamInfo>,
    pub(crate) intervals: Vec<Interval>,
    pub(crate) summary: Summary,
    pub(crate) rr: Option<RrReport>,
    pub(crate) cpu: CpuReport,
    pub(crate) outcome: Outcome,
    pub(crate) warnings: Vec<String>,
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
    psk: Option<&Psk>,
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
    let nonce = Nonce::random().map_err(|e| Error::io("drawing a random nonce", e))?;
    proto::write_message(
        wr,
        &Message::Hello(Hello {
            software: proto::software(),
            nonce,
        }),
    )
    .await
    .map_err(|e| proto_err(proto::ProtoError::Io(e.kind(), e.to_string())))?;
    let w = match expect(rd, addr, "waiting for the server's welcome").await? {
        Message::Welcome(w) => w,
        other => return Err(unexpected(other, addr, "waiting for the server's welcome")),
    };
    let auth_err = |reason: &str| Error::Auth {
        addr: addr.to_owned(),
        reason: reason.to_owned(),
    };
    match (psk, w.auth_required, w.proof) {
        (None, false, _) => {}
        (None, true, _) => {
            return Err(auth_err(
                "the server requires a pre-shared key: pass --psk-file with the server's key",
            ));
        }
        (Some(_), false, _) | (Some(_), true, None) => {
            return Err(auth_err(
                "the server has no pre-shared key, so it cannot prove who it is; refusing to \
                 run with --psk-file against it (start it with --psk-file too)",
            ));
        }
        (Some(k), true, Some(proof)) => {
            if !k.verify_server(&nonce, &w.nonce, &proof) {
                return Err(auth_err(
                    "the server could not prove it holds this pre-shared key: the keys differ",
                ));
            }
            let mine = k.client_proof(&nonce, &w.nonce);
            proto::write_message(wr, &Message::Auth(AuthProof { proof: mine }))
                .await
                .map_err(|e| proto_err(proto::ProtoError::Io(e.kind(), e.to_string())))?;
        }
    }
    Ok(PeerInfo {
        software: w.software,
        protocol: pre.version,
    })
}

/// Opens every data connection concurrently (one by one would cost a round trip each).
pub(crate) async fn open_data(
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
                s.write_all(&DataHello { cookie, id: id16 }.greeting())
                    .await?;
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

pub(crate) fn empty_socket_report() -> SocketReport {
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

pub(crate) async fn send(wr: &mut OwnedWriteHalf, msg: &Message, addr: &str) -> Result<(), Error> {
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

pub(crate) fn unexpected(m: Message, addr: &str, state: &'static str) -> Error {
    Error::Unexpected {
        addr: addr.to_owned(),
        got: m.kind().to_owned(),
        state,
    }
}

/// What a control message other than the expected interval means while a test runs: the
/// error that ends it, and whether the control connection is still usable for the goodbye.
pub(crate) fn ended_by(msg: Result<Option<Message>, ProtoError>, addr: &str) -> (String, bool) {
    match msg {
        Ok(Some(Message::Error(e))) => (format!("the server ended the test: {}", e.message), false),
        Ok(Some(other)) => (unexpected(other, addr, "the test ran").to_string(), true),
        Ok(None) => (
            format!("{addr} closed the control connection during the test"),
            false,
        ),
        Err(e) => (
            Error::Protocol {
                addr: addr.to_owned(),
                cause: e,
            }
            .to_string(),
            false,
        ),
    }
}
