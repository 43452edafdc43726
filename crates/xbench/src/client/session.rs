//! An accepted test as the client holds it, and how it gets there: the handshake (preambles,
//! hello, the pre-shared key both ways), the test request and its acceptance, then the data
//! connections and the server's `Ready`. Also the control-message helpers both workloads'
//! controllers use.
//!
//! Not the workloads themselves ([`bulk`](super::bulk), [`rr`](super::rr)).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::cancel::interruptible;
use super::config::ClientConfig;
use super::connect::{connect_any, open_data, open_some, resolve, setup_error};
use crate::auth::{Nonce, Psk, SessionKey};
use crate::control::keepalive;
use crate::error::Error;
use crate::host::Monitor;
use crate::host::allowance::{self, DataFlow};
use crate::proto::{
    self, AuthProof, Channel, Cookie, DataHello, ErrorMsg, Hello, Message, MessageReader, Missing,
    PROTOCOL_VERSION, Preamble, ProtoError, Ready, Welcome,
};
use crate::report::{
    ConnectionSetup, CpuReport, Hosts, Interval, Outcome, PeerInfo, RrReport, SCHEMA_VERSION,
    SocketReport, StreamInfo, Summary, TestReport, UdpReport,
};
use crate::time::rfc3339;

/// How long a client waits for the server to close the control connection after the last
/// message of a test ([`Session::await_server_close`]).
const SERVER_CLOSE_WAIT: Duration = Duration::from_secs(2);

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
    /// Signs the data connections' greetings, in a session with a pre-shared key.
    pub(crate) key: Option<SessionKey>,
    /// A UDP test's server ports, by stream id.
    pub(crate) udp_ports: Vec<u16>,
    /// Reads the client's interface over the test, from acceptance (restarted when the data
    /// starts to flow) to the report.
    pub(crate) host: Option<Monitor>,
}

impl Session {
    pub(super) async fn open(config: &ClientConfig) -> Result<Self, Error> {
        let addrs = resolve(config).await?;
        let (ctrl, server_addr) = connect_any(&addrs, config).await?;
        keepalive(&ctrl);
        let addr = format!("{}:{}", config.host, config.port);
        let client_addr = ctrl
            .local_addr()
            .map_err(|e| Error::io("reading the local address", e))?;
        let (rd, mut wr) = ctrl.into_split();
        let mut rd = MessageReader::new(rd);
        // The server's host report comes just before its results, whatever the workload.
        rd.set_aside(|m| matches!(m, Message::Host(_)));
        let (server, key) = handshake(&mut rd, &mut wr, &addr, config.psk.as_ref()).await?;
        // A fleet's common start: connected and proven, the test is asked for at the instant
        // (a later session of the same test, its instant past, asks at once).
        if let Some(at) = config.start_at {
            super::cancel::wait_until(at).await?;
        }
        send(
            &mut wr,
            &Message::Start(Box::new(config.spec.clone())),
            &addr,
        )
        .await?;
        let state = "waiting for the test to be accepted";
        let (cookie, udp_ports) = match expect(&mut rd, &addr, state).await? {
            Message::Accepted(a) => (a.cookie, a.udp_ports),
            other => return Err(unexpected(other, &addr, state)),
        };
        let host = Some(Monitor::start(
            client_addr.ip(),
            server_addr.ip(),
            config.spec.interval,
        ));
        Ok(Session {
            rd,
            wr,
            addr,
            server,
            server_addr,
            client_addr,
            cookie,
            key,
            udp_ports,
            host,
        })
    }

    /// Opens `n` data connections, then waits for the server's `Ready`; `cancel` (Ctrl-C)
    /// cuts either wait short. Also says how opening them went.
    pub(crate) async fn connect_data(
        &mut self,
        config: &ClientConfig,
        n: usize,
        warnings: &mut Vec<String>,
        mut cancel: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<
        (
            Vec<(std::net::TcpStream, SocketReport)>,
            Ready,
            ConnectionSetup,
        ),
        Error,
    > {
        let hellos = self.hellos(n)?;
        let (data, setup) = interruptible(
            open_data(config, self.server_addr, &hellos, warnings),
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
        self.check_greetings(&hellos, &ready)?;
        Ok((data, ready, setup))
    }

    /// [`Self::connect_data`] for a request/response test's persistent flows that may run
    /// without some (`--allow-partial-flows`): when some fail to open but not all, the server
    /// is told which ([`Missing`]) and starts with the rest. The flows that opened, by id, and
    /// the counts (failures by kind); with none open, or without `allow_partial`, a failure
    /// is the error [`Self::connect_data`] returns.
    pub(crate) async fn connect_partial(
        &mut self,
        config: &ClientConfig,
        n: usize,
        allow_partial: bool,
        warnings: &mut Vec<String>,
        mut cancel: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(Vec<(u16, std::net::TcpStream)>, ConnectionSetup), Error> {
        let hellos = self.hellos(n)?;
        let (opened, setup, failed) = interruptible(
            open_some(config, self.server_addr, &hellos, warnings),
            cancel.as_mut(),
            "opening the data connections",
        )
        .await?;
        if let Some((id, e)) = failed {
            if !allow_partial || opened.is_empty() || e.get_ref().is_some_and(|i| i.is::<Error>()) {
                return Err(setup_error(self.server_addr, setup, id, e));
            }
            let missing = Missing {
                ids: (0..n)
                    .filter(|id| !opened.contains_key(id))
                    .map(|id| id as u16)
                    .collect(),
            };
            send(&mut self.wr, &Message::Missing(missing), &self.addr).await?;
        }
        let ready = interruptible(
            self.ready(),
            cancel,
            "waiting for the server's data connections",
        )
        .await?;
        let present: Vec<DataHello> = hellos
            .into_iter()
            .filter(|h| opened.contains_key(&usize::from(h.id)))
            .collect();
        self.check_greetings(&present, &ready)?;
        let flows = opened
            .into_iter()
            .map(|(id, (s, _))| (id as u16, s))
            .collect();
        Ok((flows, setup))
    }

    /// The greetings of the `n` data connections, one per stream or flow (counter 0). With a
    /// key each is signed; without, its tag is a random token, so the server's `Ready` can
    /// show the connections it attached are ours (see [`Session::check_greetings`]).
    pub(crate) fn hellos(&self, n: usize) -> Result<Vec<DataHello>, Error> {
        (0..n)
            .map(|id| {
                let mut h = DataHello::new(self.cookie, id as u16, 0, self.key.as_ref());
                if self.key.is_none() {
                    getrandom::fill(&mut h.tag)
                        .map_err(|e| Error::io("drawing a random token", e.into()))?;
                }
                Ok(h)
            })
            .collect()
    }

    /// Waits (at most [`SERVER_CLOSE_WAIT`]) for the server to close the control connection
    /// after its results, discarding anything else it sends, so that the server's end closes
    /// first and keeps the TIME_WAIT. A client that closed first would hold its control port
    /// for 60 s after every test: with a narrow ephemeral range, or a sweep of hundreds of
    /// tests, the next test's control connection finds no port. The server shuts its side
    /// down right after its results, so this is one round trip; it bounds the wait for a
    /// server that does not.
    pub(crate) async fn await_server_close(&mut self) {
        let drain = async { while let Ok(Some(_)) = self.rd.next().await {} };
        let _ = tokio::time::timeout(SERVER_CLOSE_WAIT, drain).await;
    }

    /// Refuses to run when a connection the server attached as one of our streams greeted
    /// with a tag we did not send: someone with the cookie got there first, and every figure
    /// of the test would count their bytes as ours.
    pub(crate) fn check_greetings(&self, hellos: &[DataHello], ready: &Ready) -> Result<(), Error> {
        if ready.greetings.is_empty() {
            // A server that does not list them (none for --crr).
            return Ok(());
        }
        for h in hellos {
            let theirs = ready.greetings.get(usize::from(h.id));
            if theirs.map(String::as_str) != Some(crate::hex::to_hex(&h.tag).as_str()) {
                return Err(Error::ForeignConnection {
                    addr: self.addr.clone(),
                    id: h.id,
                });
            }
        }
        Ok(())
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
        &mut self,
        config: &ClientConfig,
        started_at: SystemTime,
        body: ReportBody,
    ) -> TestReport {
        let mut hosts = self.hosts(config);
        hosts.path_mtu = crate::host::mtu::check(&hosts, &body.summary, &body.streams);
        let ends = Some((self.client_addr, self.server_addr));
        TestReport {
            hosts: Some(hosts),
            ..body.into_report(config, started_at, ends, Some(self.server.clone()))
        }
    }

    /// Both ends' hosts: ours, read to the end now, and the server's if it sent it.
    fn hosts(&mut self, config: &ClientConfig) -> Hosts {
        let client = self.host.take().map(Monitor::finish);
        let server = self
            .rd
            .take_aside()
            .into_iter()
            .rev()
            .find_map(|m| match m {
                Message::Host(h) => Some(*h),
                _ => None,
            });
        let mut hosts = Hosts {
            client,
            server,
            verdicts: Vec::new(),
            path_mtu: None,
        };
        hosts.verdicts = allowance::verdicts(&hosts, DataFlow::of(&config.spec));
        hosts
    }
}

/// What a workload contributes to a [`TestReport`].
pub(crate) struct ReportBody {
    pub(crate) streams: Vec<StreamInfo>,
    pub(crate) intervals: Vec<Interval>,
    pub(crate) summary: Summary,
    pub(crate) rr: Option<RrReport>,
    pub(crate) udp: Option<UdpReport>,
    pub(crate) cpu: CpuReport,
    pub(crate) outcome: Outcome,
    pub(crate) warnings: Vec<String>,
}

impl ReportBody {
    /// The report of a test `config` ran from `started_at`, between `ends` (the control
    /// connection's client and server addresses, `None` before it was made) with the server
    /// `server` said it runs. Every client test's report is assembled here, so a field added
    /// to [`TestReport`] is filled in one place; the parts only some tests have (hosts,
    /// under load, the path's hops) are theirs to set on the result.
    pub(crate) fn into_report(
        self,
        config: &ClientConfig,
        started_at: SystemTime,
        ends: Option<(SocketAddr, SocketAddr)>,
        server: Option<PeerInfo>,
    ) -> TestReport {
        TestReport {
            schema_version: SCHEMA_VERSION,
            xbench_version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: rfc3339(started_at),
            label: config.label.clone(),
            host: config.host.clone(),
            client_addr: ends.map(|e| e.0),
            server_addr: ends.map(|e| e.1),
            server,
            spec: config.spec.clone(),
            streams: self.streams,
            intervals: self.intervals,
            summary: self.summary,
            rr: self.rr,
            udp: self.udp,
            cpu: self.cpu,
            outcome: self.outcome,
            warnings: self.warnings,
            under_load: None,
            hosts: None,
            trace: None,
        }
    }
}

/// The control handshake: preambles, Hello/Welcome, and with a key the mutual proof; returns
/// the server's identity and the session key the data connections sign with.
async fn handshake(
    rd: &mut MessageReader<OwnedReadHalf>,
    wr: &mut OwnedWriteHalf,
    addr: &str,
    psk: Option<&Psk>,
) -> Result<(PeerInfo, Option<SessionKey>), Error> {
    let pre = exchange_preambles(rd, wr, addr).await?;
    let nonce = Nonce::random().map_err(|e| Error::io("drawing a random nonce", e))?;
    proto::write_message(
        wr,
        &Message::Hello(Hello {
            software: proto::software(),
            nonce,
            extensions: vec![proto::EXTENSION_HOST.to_owned()],
        }),
    )
    .await
    .map_err(|e| write_err(addr, e))?;
    let w = match expect(rd, addr, "waiting for the server's welcome").await? {
        Message::Welcome(w) => w,
        other => return Err(unexpected(other, addr, "waiting for the server's welcome")),
    };
    let key = authenticate(wr, addr, psk, &nonce, &w).await?;
    let peer = PeerInfo {
        software: w.software,
        protocol: pre.version,
    };
    Ok((peer, key))
}

fn write_err(addr: &str, e: std::io::Error) -> Error {
    Error::Protocol {
        addr: addr.to_owned(),
        cause: proto::ProtoError::Io(e.kind(), e.to_string()),
    }
}

/// Sends our preamble and reads the server's, telling apart a silent or foreign server
/// (iperf3's waits silently) and another protocol version.
async fn exchange_preambles(
    rd: &mut MessageReader<OwnedReadHalf>,
    wr: &mut OwnedWriteHalf,
    addr: &str,
) -> Result<Preamble, Error> {
    wr.write_all(&Preamble::new(Channel::Control).encode())
        .await
        .map_err(|e| Error::io(format!("writing to {addr}"), e))?;
    let waited = Duration::from_secs(5);
    let started = std::time::Instant::now();
    let not_xbench = |hint| Error::NotXbench {
        addr: addr.to_owned(),
        waited: started.elapsed(),
        hint,
        silent: false,
    };
    let mut pre = [0u8; proto::PREAMBLE_LEN];
    match tokio::time::timeout(waited, rd.inner_mut().read_exact(&mut pre)).await {
        Err(_) => {
            return Err(Error::NotXbench {
                addr: addr.to_owned(),
                waited,
                hint: " (an iperf3 server waits silently like this: `xbench client --iperf3` \
                       speaks its protocol)",
                silent: true,
            });
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(not_xbench(" (it closed the connection)"));
        }
        Ok(Err(e)) => return Err(Error::io(format!("reading from {addr}"), e)),
        Ok(Ok(_)) => {}
    }
    let pre =
        Preamble::decode(&pre).map_err(|_| not_xbench(" (it answered with something else)"))?;
    if pre.version != PROTOCOL_VERSION {
        return Err(Error::VersionMismatch {
            addr: addr.to_owned(),
            client: PROTOCOL_VERSION,
            server: pre.version,
        });
    }
    Ok(pre)
}

/// With a key, checks the server's proof and sends ours, and derives the session key; without
/// one, refuses a server that wants a key. A client with a key refuses a server without one:
/// it could not tell that server from an impostor.
async fn authenticate(
    wr: &mut OwnedWriteHalf,
    addr: &str,
    psk: Option<&Psk>,
    nonce: &Nonce,
    w: &Welcome,
) -> Result<Option<SessionKey>, Error> {
    let auth_err = |reason: &str| Error::Auth {
        addr: addr.to_owned(),
        reason: reason.to_owned(),
    };
    match (psk, w.auth_required, &w.proof) {
        (None, false, _) => Ok(None),
        (None, true, _) => Err(auth_err(
            "the server requires a pre-shared key: pass --psk-file with the server's key",
        )),
        (Some(_), false, _) | (Some(_), true, None) => Err(auth_err(
            "the server has no pre-shared key, so it cannot prove who it is; refusing to \
             run with --psk-file against it (start it with --psk-file too)",
        )),
        (Some(k), true, Some(proof)) => {
            if !k.verify_server(nonce, &w.nonce, proof) {
                return Err(auth_err(
                    "the server could not prove it holds this pre-shared key: the keys differ",
                ));
            }
            let mine = k.client_proof(nonce, &w.nonce);
            proto::write_message(wr, &Message::Auth(AuthProof { proof: mine }))
                .await
                .map_err(|e| write_err(addr, e))?;
            Ok(Some(k.session_key(nonce, &w.nonce)))
        }
    }
}

/// The event of a setup that opened fewer flows than asked, under `--allow-partial-flows`.
pub(crate) fn partial_event(setup: &ConnectionSetup) -> Option<super::event::ClientEvent> {
    // At most MAX_FLOWS each, which fits.
    (setup.connected < setup.requested).then_some(super::event::ClientEvent::PartialFlows {
        asked: setup.requested as u32,
        running: setup.connected as u32,
        server_limit: false,
    })
}

/// What a setup that opened fewer flows than asked says, under `--allow-partial-flows`:
/// "`n` of `m` `what` did not open (by kind); `doing` the `k` that did".
pub(crate) fn partial_warning(setup: &ConnectionSetup, what: &str, doing: &str) -> Option<String> {
    (setup.connected < setup.requested).then(|| {
        format!(
            "{} of {} {what} did not open ({} refused or reset, {} timed out, {} failed \
             otherwise); {doing} the {} that did (--allow-partial-flows)",
            setup.requested - setup.connected,
            setup.requested,
            setup.refused,
            setup.timed_out,
            setup.failed,
            setup.connected
        )
    })
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
        Ok(Some(Message::Error(ErrorMsg {
            code,
            message,
            max_flows,
            ..
        }))) => match max_flows {
            Some(max) => Err(Error::FlowLimit { max, message }),
            None => Err(Error::Refused { code, message }),
        },
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
        // A server that measured the test sends its results after saying why it ended it.
        Ok(Some(Message::Error(e))) => (
            format!("the server ended the test: {}", e.message),
            e.results_follow,
        ),
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

/// Sends `Finish`, which ends the test's data at the server and asks for its results:
/// `Err` with why those results will be missing when the control connection is already
/// known to have failed (`open` false) or cannot carry it.
pub(crate) async fn send_finish(
    session: &mut Session,
    interrupted: bool,
    open: bool,
) -> Result<(), String> {
    let finish = Message::Finish(crate::proto::Finish { interrupted });
    match open && send(&mut session.wr, &finish, &session.addr).await.is_ok() {
        true => Ok(()),
        false => Err(format!(
            "the control connection to {} had failed",
            session.addr
        )),
    }
}

/// A control message read after `Finish` that is neither the test's intervals nor its
/// results, which end the wait for them: the server ended the test (a test that had
/// completed then failed), or the control connection failed, closed or carried something
/// else (said in `warnings`). Returns why the results are missing, for the latter.
pub(crate) fn no_results(
    msg: Result<Option<Message>, ProtoError>,
    addr: &str,
    outcome: &mut Outcome,
    warnings: &mut Vec<String>,
) -> Option<String> {
    let why = match msg {
        Ok(Some(Message::Error(e))) => {
            if *outcome == Outcome::Completed {
                *outcome = Outcome::Failed {
                    error: format!("the server ended the test: {}", e.message),
                };
            }
            return None;
        }
        Err(e) => {
            format!("the control connection to {addr} failed before the server's results came: {e}")
        }
        Ok(_) => format!("{addr} closed the control connection before sending its results"),
    };
    warnings.push(why.clone());
    Some(why)
}
