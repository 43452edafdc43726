//! One client's control session on the server, from its preamble to an admitted test with all
//! its data connections, as a chain of phases: [`Greeting`] (preambles exchanged, versions
//! agree) → [`Greeted`] (hello, welcome, the pre-shared key) → [`Admitted`] (a test request
//! within the limits, holding a place among the running tests) → [`Collecting`] (cookie sent,
//! data connections arriving) → [`Test`], which the workload's controller runs and reports.
//!
//! Each phase is a method that consumes its state and returns the next, or [`Closed`] once the
//! client has been told why (when it can be) and the log has its line. Every wait is bounded:
//! by the handshake timeout, by the client leaving, by the server shutting down.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tracing::info;

use super::admission::{RunningGuard, admit, need, try_running_guard};
use super::context::Ctx;
use super::gate::{Claims, Gate};
use super::metrics;
use super::peer_text::bounded;
use super::registry::{DataConn, Registration};
use super::slot::HandshakeSlot;
use super::test::{SessionEnd, Test, describe};
use crate::auth::{DATA_TAG_LEN, DataTag, Nonce, SessionKey};
use crate::config::{StreamDirection, TestSpec, Workload};
use crate::control::keepalive;
use crate::host::Monitor;
use crate::proto::{
    self, Accepted, Channel, ErrorCode, ErrorMsg, Message, MessageReader, Missing,
    PROTOCOL_VERSION, Preamble, ProtoError, StreamLayout, Welcome,
};

/// Runs a control session whose preamble (of protocol `version`) has been read.
pub(super) async fn run(
    stream: TcpStream,
    peer: SocketAddr,
    version: u16,
    ctx: Arc<Ctx>,
    slot: HandshakeSlot,
) -> SessionEnd {
    let admitted = async {
        let greeted = Greeting::open(stream, peer, version, ctx)
            .await?
            .greet()
            .await?;
        greeted.request(slot).await?.accept().await?.collect().await
    };
    let Ok((test, spec)) = admitted.await else {
        return SessionEnd::Other;
    };
    match &spec.workload {
        Workload::Throughput(tp) if tp.udp.is_some() => super::udp::run(test, &spec, tp).await,
        Workload::Throughput(tp) => super::bulk::run(test, &spec, tp).await,
        Workload::RequestResponse(rr) => super::rr::run(test, &spec, rr).await,
    }
}

/// A session that ended before its test ran: the client was told why when it could be, and
/// the log has a line.
#[derive(Debug)]
pub(super) struct Closed;

/// Longest message a client sends (its test request is the largest, well under 4 KiB): a peer
/// that has not authenticated does not get to make the server buffer a megabyte.
const CLIENT_FRAME_MAX: u32 = 64 * 1024;

/// The control connection, whatever the phase.
struct Conn {
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    rd: MessageReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
    /// The client's hello listed [`proto::EXTENSION_HOST`]: it reads our host report.
    reads_host: bool,
}

impl Conn {
    /// Sends a client the error that ends its session, as the last thing it reads.
    async fn refuse(self, code: ErrorCode, msg: impl Into<String>) -> Closed {
        self.refuse_with(code, msg, None).await
    }

    /// [`Conn::refuse`], naming the flow limit a request/response test was over.
    async fn refuse_with(
        mut self,
        code: ErrorCode,
        msg: impl Into<String>,
        max_flows: Option<u32>,
    ) -> Closed {
        // A refusal before the test request is a failed handshake; after it, a refused test.
        let m = &self.ctx.metrics;
        match code {
            ErrorCode::VersionMismatch => m.handshake_failed("version"),
            ErrorCode::AuthFailed => m.handshake_failed("auth"),
            ErrorCode::Forbidden => m.handshake_failed("forbidden"),
            ErrorCode::Timeout => m.handshake_failed("timeout"),
            ErrorCode::BadRequest => m.refused("bad_request"),
            ErrorCode::LimitExceeded => m.refused("limit"),
            ErrorCode::ServerError => m.refused("server_error"),
            ErrorCode::ShuttingDown => m.refused("shutting_down"),
            ErrorCode::Unknown => m.refused("other"),
        }
        let msg = Message::Error(ErrorMsg {
            code,
            message: msg.into(),
            max_flows,
            results_follow: false,
        });
        let _ = proto::write_message(&mut self.wr, &msg).await;
        Closed
    }
}

/// Preambles exchanged and the client speaks our version; its hello is next.
struct Greeting {
    conn: Conn,
}

impl Greeting {
    /// Answers the client's preamble with ours, whatever theirs said (so a client of another
    /// version can name both), then refuses a version we do not speak.
    async fn open(
        stream: TcpStream,
        peer: SocketAddr,
        version: u16,
        ctx: Arc<Ctx>,
    ) -> Result<Self, Closed> {
        let _ = stream.set_nodelay(true);
        keepalive(&stream);
        let (rd, mut wr) = stream.into_split();
        let rd = MessageReader::with_max_frame(rd, CLIENT_FRAME_MAX);
        wr.write_all(&Preamble::new(Channel::Server).encode())
            .await
            .map_err(|_| Closed)?;
        let conn = Conn {
            peer,
            ctx,
            rd,
            wr,
            reads_host: false,
        };
        if version != PROTOCOL_VERSION {
            info!(%peer, client_version = version, "refused a client of another protocol version");
            let msg = format!(
                "client speaks xbench protocol version {version}, this server speaks version \
                 {PROTOCOL_VERSION}"
            );
            return Err(conn.refuse(ErrorCode::VersionMismatch, msg).await);
        }
        Ok(Greeting { conn })
    }

    /// Reads the client's hello, welcomes it and, with a pre-shared key, checks its proof.
    async fn greet(self) -> Result<Greeted, Closed> {
        let Greeting { mut conn } = self;
        let (peer, limit) = (conn.peer, conn.ctx.limits.handshake_timeout);
        let (client, client_nonce) = match conn.rd.next_within(limit).await {
            // The name goes into the log: at most 64 characters of it, escaped.
            Ok(Some(Message::Hello(h))) => {
                conn.reads_host = h.extensions.iter().any(|e| e == proto::EXTENSION_HOST);
                (bounded(&h.software, 64), h.nonce)
            }
            other => {
                info!(%peer, "dropped a control connection without a valid hello: {}", describe(other));
                return Err(Closed);
            }
        };
        let nonce = Nonce::random().map_err(|_| Closed)?;
        let psk = conn.ctx.psk.clone();
        let welcome = Welcome {
            software: proto::software(),
            nonce,
            auth_required: psk.is_some(),
            proof: psk.as_ref().map(|k| k.server_proof(&client_nonce, &nonce)),
        };
        proto::write_message(&mut conn.wr, &Message::Welcome(welcome))
            .await
            .map_err(|_| Closed)?;
        if let Some(key) = &psk {
            let proven = match conn.rd.next_within(limit).await {
                Ok(Some(Message::Auth(a))) => key.verify_client(&client_nonce, &nonce, &a.proof),
                _ => false,
            };
            if !proven {
                info!(%peer, client = %client, "refused a client that did not prove the pre-shared key");
                let msg =
                    "authentication failed: this server requires its pre-shared key (--psk-file)";
                return Err(conn.refuse(ErrorCode::AuthFailed, msg).await);
            }
        }
        let key = psk.map(|k| k.session_key(&client_nonce, &nonce));
        Ok(Greeted { conn, client, key })
    }
}

/// A client that has introduced itself (and proved the key, if there is one).
struct Greeted {
    conn: Conn,
    /// The client's software, for the log lines.
    client: String,
    /// Checks the data connections' greetings, with a pre-shared key.
    key: Option<SessionKey>,
}

impl Greeted {
    /// Reads the test request, gives the handshake slot back, and admits the test if it is
    /// within the limits and a place among the running tests is free.
    async fn request(self, slot: HandshakeSlot) -> Result<Admitted, Closed> {
        let Greeted {
            mut conn,
            client,
            key,
        } = self;
        let peer = conn.peer;
        let spec = match conn.rd.next_within(conn.ctx.limits.handshake_timeout).await {
            Ok(Some(Message::Start(spec))) => *spec,
            Err(ProtoError::Malformed(why)) => {
                let why = bounded(&why, 200);
                info!(%peer, client = %client, "refused an unreadable test request: {why}");
                let msg = format!("cannot read the test request: {why}");
                return Err(conn.refuse(ErrorCode::BadRequest, msg).await);
            }
            other => {
                info!(%peer, client = %client, "dropped a control connection without a test request: {}", describe(other));
                return Err(Closed);
            }
        };
        if let Err((code, reason)) = admit(&spec, &conn.ctx) {
            info!(%peer, client = %client, "refused a test: {reason}");
            let max_flows = match &spec.workload {
                Workload::RequestResponse(rr) if rr.flows.get() > conn.ctx.limits.max_flows => {
                    Some(conn.ctx.limits.max_flows)
                }
                _ => None,
            };
            return Err(conn.refuse_with(code, reason, max_flows).await);
        }
        let running = try_running_guard(&conn.ctx, peer.ip(), need(&spec));
        // The handshake is over; the control connection's descriptor is the test's from here
        // (or, refused, about to close).
        drop(slot);
        match running {
            Ok(running) => Ok(Admitted {
                conn,
                client,
                key,
                spec,
                running,
            }),
            Err(msg) => {
                info!(%peer, "refused a test: {msg}");
                Err(conn.refuse(ErrorCode::LimitExceeded, msg).await)
            }
        }
    }
}

/// A test the server will run, holding its place among the running tests.
struct Admitted {
    conn: Conn,
    client: String,
    key: Option<SessionKey>,
    spec: TestSpec,
    running: RunningGuard,
}

impl Admitted {
    /// Registers the test's cookie and sends it: data connections may come.
    async fn accept(self) -> Result<Collecting, Closed> {
        let Admitted {
            mut conn,
            client,
            key,
            spec,
            running,
        } = self;
        let expected = spec.connection_count();
        // A UDP test's sockets pass a gate of their own; its TCP gate has no ids, so a data
        // connection with its cookie is refused.
        let key_for_udp = key.clone();
        // --crr connections arrive while the test runs, straight to its workers once it starts;
        // a client opens none before, so only a few may wait (each holds a descriptor).
        let (capacity, gate) = match spec.as_rr() {
            Some(r) if r.connect_per_transaction => (
                super::budget::CRR_EARLY as usize,
                Gate::new(key, r.flows.get(), Claims::PerTransaction),
            ),
            // A UDP flow's socket passes a gate of its own, as a UDP stream's does.
            Some(r) if r.udp.is_some() => (expected, Gate::new(key, 0, Claims::Once)),
            Some(r) => (expected, Gate::new(key, r.flows.get(), Claims::Once)),
            // Stream ids fit in u16: the spec's limits keep -P well below.
            None => (expected, Gate::new(key, expected as u32, Claims::Once)),
        };
        let (registration, cookie, data) = match conn.ctx.registry.register(capacity.max(1), gate) {
            Ok(r) => r,
            Err(e) => return Err(conn.refuse(ErrorCode::ServerError, e.to_string()).await),
        };
        // A socket per UDP stream or `--rr -u` flow, and whether the server sends on it.
        let udp_sockets = match &spec.workload {
            Workload::Throughput(tp) if tp.udp.is_some() => Some(
                StreamLayout::new(tp)
                    .iter()
                    .map(|(_, d)| d == StreamDirection::ServerToClient)
                    .collect(),
            ),
            Workload::RequestResponse(r) if r.udp.is_some() => Some(vec![true; r.flows.as_usize()]),
            _ => None,
        };
        let udp = match udp_sockets {
            Some(sends) => {
                match super::udp::Hellos::bind(&conn.wr, sends, key_for_udp, &conn.ctx.allow) {
                    Ok(h) => Some(h),
                    Err(e) => {
                        let msg = format!("server could not open its UDP sockets: {e}");
                        return Err(conn.refuse(ErrorCode::ServerError, msg).await);
                    }
                }
            }
            None => None,
        };
        let udp_ports = udp
            .as_ref()
            .map(super::udp::Hellos::ports)
            .unwrap_or_default();
        let accepted = Message::Accepted(Accepted { cookie, udp_ports });
        proto::write_message(&mut conn.wr, &accepted)
            .await
            .map_err(|_| Closed)?;
        Ok(Collecting {
            conn,
            client,
            spec,
            running,
            registration,
            data,
            expected,
            missing: BTreeSet::new(),
            conns: BTreeMap::new(),
            greetings: vec![[0; DATA_TAG_LEN]; expected],
            udp,
            cookie,
        })
    }
}

/// An accepted test waiting for its data connections.
struct Collecting {
    conn: Conn,
    client: String,
    spec: TestSpec,
    running: RunningGuard,
    registration: Registration,
    data: mpsc::Receiver<DataConn>,
    /// How many data connections the test opens before it starts.
    expected: usize,
    /// Flows the client said will not connect ([`Missing`]): the test starts without them.
    missing: BTreeSet<u16>,
    conns: BTreeMap<u16, std::net::TcpStream>,
    /// The tag each connection greeted with, by id.
    greetings: Vec<DataTag>,
    /// A UDP test's sockets, waiting for their greetings.
    udp: Option<super::udp::Hellos>,
    cookie: proto::Cookie,
}

impl Collecting {
    /// Waits for every data connection, while watching the control connection: a client that
    /// gives up (Ctrl-C while connecting) frees its place now, not after the timeout.
    async fn collect(mut self) -> Result<(Test, TestSpec), Closed> {
        // A client opens its connections a bounded number at a time (`--max-connecting`), so
        // tens of thousands take a while even on a good path: 1 ms more per connection (at
        // least 1,000/s; 65,535 flows at 512 per 100 ms round trip open in 13 s).
        let limit =
            self.conn.ctx.limits.handshake_timeout + Duration::from_millis(self.expected as u64);
        let deadline = Instant::now() + limit;
        let mut abort = self.conn.ctx.abort.clone();
        while self.conns.len() + self.missing.len() < self.expected {
            let arrived = tokio::select! {
                r = tokio::time::timeout_at(deadline.into(), self.data.recv()) => r,
                from = self.registration.outsider_proven() => {
                    let msg = format!(
                        "the server refused a data connection of this test from {}: that \
                         address is not in its --allow list (the control connection's {} is); \
                         open the data connections from allowed addresses (-B), or ask the \
                         operator to allow it",
                        from.ip().to_canonical(),
                        self.conn.peer.ip().to_canonical()
                    );
                    info!(peer = %self.conn.peer, "aborted a test: {msg}");
                    return Err(self.conn.refuse(ErrorCode::Forbidden, msg).await);
                }
                msg = self.conn.rd.next() => {
                    if let Ok(Some(Message::Missing(m))) = msg {
                        self.without(m).await?;
                        continue;
                    }
                    info!(peer = %self.conn.peer, client = %self.client, "dropped a test whose client left while its data connections opened: {}", describe(msg));
                    return Err(Closed);
                }
                () = async { let _ = abort.wait_for(|a| *a).await; } => {
                    let msg = "the server is shutting down";
                    return Err(self.conn.refuse(ErrorCode::ServerError, msg).await);
                }
            };
            match arrived {
                Ok(Some((id, s, from, tag))) => self.attach(id, s, from, tag).await?,
                _ => return Err(self.timed_out(limit).await),
            }
        }
        if !matches!(self.spec.as_rr(), Some(r) if r.connect_per_transaction) {
            // Every data connection is here; later ones are refused at the door.
            self.data.close();
        }
        let udp = match self.udp.take() {
            Some(h) => self.udp_hellos(h, deadline).await?,
            None => Vec::new(),
        };
        if !udp.is_empty() {
            self.greetings = udp.iter().map(|(_, _, tag)| *tag).collect();
        }
        Ok(self.into_test(udp))
    }

    /// The test, every connection collected: its control connection, data connections and
    /// UDP sockets, counted in the metrics as started, and our interface watched for a
    /// client that reads it.
    fn into_test(self, udp: Vec<super::test::UdpConn>) -> (Test, TestSpec) {
        let Collecting {
            conn,
            client,
            spec,
            running,
            registration,
            data,
            conns,
            greetings,
            ..
        } = self;
        let kind = match &spec.workload {
            Workload::Throughput(t) if t.udp.is_some() => metrics::Kind::Udp,
            Workload::Throughput(_) => metrics::Kind::Tcp,
            Workload::RequestResponse(_) => metrics::Kind::Rr,
        };
        // Our interface, read over the test for a client that reads the report.
        let host = match (conn.reads_host, conn.wr.local_addr()) {
            (true, Ok(local)) => Some(Monitor::start(local.ip(), conn.peer.ip(), spec.interval)),
            _ => None,
        };
        let test = Test {
            metrics: conn
                .ctx
                .metrics
                .test_started(metrics::Protocol::Xbench, kind),
            peer: conn.peer,
            client,
            ctx: conn.ctx,
            rd: conn.rd,
            wr: conn.wr,
            conns,
            greetings: greetings.iter().map(|t| crate::hex::to_hex(t)).collect(),
            data,
            registration,
            running: Some(running),
            control: None,
            udp,
            host,
        };
        (test, spec)
    }

    /// Waits for every UDP stream's greeting, watching the control connection as
    /// [`Self::collect`] does.
    async fn udp_hellos(
        &mut self,
        hellos: super::udp::Hellos,
        deadline: Instant,
    ) -> Result<Vec<super::test::UdpConn>, Closed> {
        let mut abort = self.conn.ctx.abort.clone();
        let (peer, cookie) = (self.conn.peer, self.cookie);
        let progress = hellos.progress();
        let waited = tokio::select! {
            r = tokio::time::timeout_at(deadline.into(), hellos.wait(cookie, peer)) => r,
            msg = self.conn.rd.next() => {
                info!(peer = %self.conn.peer, client = %self.client, "dropped a UDP test whose client left while its sockets greeted: {}", describe(msg));
                return Err(Closed);
            }
            () = async { let _ = abort.wait_for(|a| *a).await; } => {
                let _ = proto::write_message(&mut self.conn.wr, &ErrorMsg::message(ErrorCode::ServerError, "the server is shutting down")).await;
                return Err(Closed);
            }
        };
        match waited {
            Ok(Ok(conns)) => Ok(conns),
            Ok(Err(e)) => {
                let msg = format!("server UDP socket failed: {e}");
                let _ = proto::write_message(
                    &mut self.conn.wr,
                    &ErrorMsg::message(ErrorCode::ServerError, msg),
                )
                .await;
                Err(Closed)
            }
            Err(_) => {
                let msg = progress.why_not_ready();
                info!(peer = %self.conn.peer, "aborted a test: {msg}");
                let _ = proto::write_message(
                    &mut self.conn.wr,
                    &ErrorMsg::message(ErrorCode::Timeout, msg),
                )
                .await;
                Err(Closed)
            }
        }
    }

    /// Takes one data connection; one claiming an id out of range or taken ends the test.
    async fn attach(
        &mut self,
        id: u16,
        s: std::net::TcpStream,
        from: SocketAddr,
        tag: DataTag,
    ) -> Result<(), Closed> {
        if usize::from(id) >= self.expected
            || self.conns.contains_key(&id)
            || self.missing.contains(&id)
        {
            let msg = format!(
                "data connection from {from} claims stream {id}, which is out of range or taken"
            );
            info!(peer = %self.conn.peer, "aborted a test: {msg}");
            let _ = proto::write_message(
                &mut self.conn.wr,
                &ErrorMsg::message(ErrorCode::BadRequest, msg),
            )
            .await;
            return Err(Closed);
        }
        self.conns.insert(id, s);
        self.greetings[usize::from(id)] = tag;
        Ok(())
    }

    /// Stops waiting for the flows `m` names, which the client could not open: only flows of
    /// a persistent TCP request/response test, in range, not connected, and not all of them.
    async fn without(&mut self, m: Missing) -> Result<(), Closed> {
        let persistent_tcp = matches!(
            self.spec.as_rr(),
            Some(r) if !r.connect_per_transaction && r.udp.is_none()
        );
        let ids: BTreeSet<u16> = m.ids.iter().copied().collect();
        let why = if !persistent_tcp {
            Some("only a --rr test's flows may be missing".to_owned())
        } else if ids.len() != m.ids.len() {
            Some("it names a flow twice".to_owned())
        } else if let Some(id) = ids.iter().find(|&&id| {
            usize::from(id) >= self.expected
                || self.conns.contains_key(&id)
                || self.missing.contains(&id)
        }) {
            Some(format!("flow {id} is out of range or connected"))
        } else if ids.len() + self.missing.len() >= self.expected {
            Some("no flow would be left".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            let msg = format!("the client's list of missing flows is not valid: {why}");
            info!(peer = %self.conn.peer, "aborted a test: {msg}");
            let _ = proto::write_message(
                &mut self.conn.wr,
                &ErrorMsg::message(ErrorCode::BadRequest, msg),
            )
            .await;
            return Err(Closed);
        }
        info!(
            peer = %self.conn.peer, client = %self.client,
            "{} of {} flows did not connect on the client's side; starting with the rest",
            ids.len(), self.expected
        );
        self.missing.extend(ids);
        Ok(())
    }

    /// Ends a test whose data connections did not all arrive in time, saying what the server
    /// knows of the rest.
    async fn timed_out(self, limit: Duration) -> Closed {
        let why = match self.registration.outsiders_seen() {
            (0, _) | (_, None) => "the others did not reach this server, or not as this test's: \
                 something between client and server (a firewall, a NAT, a connection limit) \
                 dropping or refusing new connections, or the server's queue of new connections \
                 overflowing"
                .to_owned(),
            (n, Some(from)) => format!(
                "the server refused {n} connection(s) naming this test from outside its --allow \
                 list (the first from {}); open them from allowed addresses (-B), or ask the \
                 operator to allow it",
                from.ip().to_canonical()
            ),
        };
        let msg = format!(
            "only {} of {} data connections arrived within {limit:?}; {why}",
            self.conns.len(),
            self.expected
        );
        info!(peer = %self.conn.peer, "aborted a test: {msg}");
        self.conn.refuse(ErrorCode::Timeout, msg).await
    }
}
