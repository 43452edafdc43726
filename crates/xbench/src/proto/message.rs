//! Control messages: what client and server say to each other, in order.
//!
//! ```text
//! client                                   server
//!   preamble(control, v) ─────────────────▶
//!                        ◀───────────────── preamble(server, v)
//!   Hello{nonce} ─────────────────────────▶
//!                        ◀───────────────── Welcome{nonce, proof} | Error
//!   Auth{proof} (when the server has a key) ▶
//!   Start{spec} ──────────────────────────▶
//!                        ◀───────────────── Accepted{cookie, udp_ports} | Error
//!   N × data connection: preamble(data, v) + cookie + stream id
//!   (--allow-partial-flows, some flows refused on the way: Missing{ids} ─▶)
//!   (-u, --rr -u: N × the same greeting as a datagram to udp_ports[id], repeated until Ready)
//!                        ◀───────────────── Ready{sockets}
//!   Go (throughput tests) ────────────────▶
//!                        ◀───────────────── Interval | RrInterval … (live, one per interval)
//!   Finish{interrupted} ──────────────────▶
//!                        ◀───────────────── (Host, to a client whose Hello lists "host")
//!                        ◀───────────────── Results | RrResults
//! ```
//!
//! With `--crr` no data connection opens before `Ready`; each transaction opens its own, with
//! the same greeting, while the test runs.
//!
//! Each end measures on its own clock, started when the first byte it is to receive can
//! arrive: the server's senders and the client's receivers when `Ready` is sent and received,
//! the client's senders and the server's receivers when `Go` is sent and received (the client
//! sends it just before its first byte). Each end then closes its window on its own timer, so
//! a control message held up behind a full queue cannot stretch it.
//!
//! Either side may send `Error` at any point and close. The client opens every connection,
//! data included, whichever way the data flows, so tests work through NAT and through firewalls
//! that only allow client → server.

use serde::{Deserialize, Serialize};

use super::greeting::Cookie;
use crate::auth::{Nonce, Proof};
use crate::config::TestSpec;
use crate::report::{
    HostReport, SideInterval, SideResults, SideRrInterval, SideRrResults, SideUdpInterval,
    SideUdpResults, SocketReport,
};

/// Every control message, tagged by `type` in JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Message {
    /// Client introduces itself.
    Hello(Hello),
    /// Client proves it holds the server's pre-shared key (see [`crate::auth`]).
    Auth(AuthProof),
    /// Server accepts the client.
    Welcome(Welcome),
    /// Client asks for a test.
    Start(Box<TestSpec>),
    /// Server accepted the test; data connections may connect.
    Accepted(Accepted),
    /// The client could not open these flows (see [`Missing`]); the server starts without them.
    Missing(Missing),
    /// All data connections arrived; the test is running.
    Ready(Ready),
    /// The client's senders start now: the server's receivers start their clock.
    Go,
    /// One interval of the server's measurements (of a test in both directions, one for its
    /// senders and one for its receivers, each on its own clock).
    Interval(SideInterval),
    /// Client ends the test.
    Finish(Finish),
    /// Server's final measurements.
    Results(SideResults),
    /// One interval of a request/response test, server side.
    RrInterval(SideRrInterval),
    /// Server's final measurements of a request/response test.
    RrResults(SideRrResults),
    /// One interval of a UDP test, server side.
    UdpInterval(SideUdpInterval),
    /// Server's final counts of a UDP test.
    UdpResults(SideUdpResults),
    /// The client's own counts, sent once it has the server's results, so the server can
    /// check its figures too (see [`Tally`]).
    Tally(Tally),
    /// The server's host over the test: its interface, counters and allowances (issue 33).
    /// Sent just before the results, and only to a client whose [`Hello::extensions`] lists
    /// [`EXTENSION_HOST`]: a client that does not know it would take it for a protocol error.
    Host(Box<HostReport>),
    /// Something went wrong; the sender closes after this.
    Error(ErrorMsg),
}

/// The [`Hello::extensions`] entry of a client that reads [`Message::Host`].
pub const EXTENSION_HOST: &str = "host";

impl Message {
    /// The message's `type` tag as it travels in JSON (`"hello"`, `"rr_interval"`…), for
    /// errors and log lines that name what arrived.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello(_) => "hello",
            Message::Auth(_) => "auth",
            Message::Welcome(_) => "welcome",
            Message::Start(_) => "start",
            Message::Accepted(_) => "accepted",
            Message::Missing(_) => "missing",
            Message::Ready(_) => "ready",
            Message::Go => "go",
            Message::Interval(_) => "interval",
            Message::Finish(_) => "finish",
            Message::Tally(_) => "tally",
            Message::Results(_) => "results",
            Message::RrInterval(_) => "rr_interval",
            Message::RrResults(_) => "rr_results",
            Message::UdpInterval(_) => "udp_interval",
            Message::UdpResults(_) => "udp_results",
            Message::Host(_) => "host",
            Message::Error(_) => "error",
        }
    }
}

/// First message of a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Software name and version, for the server's log.
    pub software: String,
    /// The client's challenge to a server with a key.
    pub nonce: Nonce,
    /// Messages beyond this protocol version's own that the client reads (such as
    /// [`EXTENSION_HOST`]). A server sends one only to a client that lists it, and a server
    /// that knows none ignores the list, so an extension needs no new protocol version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

/// The client's answer to the server's challenge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthProof {
    /// HMAC over both nonces with the pre-shared key.
    pub proof: Proof,
}

/// The server's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// Software name and version.
    pub software: String,
    /// The server's challenge.
    pub nonce: Nonce,
    /// The server has a pre-shared key: the client must send [`Message::Auth`] before `Start`.
    pub auth_required: bool,
    /// The server's own proof of the key, so the client can tell it from an impostor.
    pub proof: Option<Proof>,
}

/// The server accepted a test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// Present on every data connection of this test.
    pub cookie: Cookie,
    /// A UDP test's server ports, by stream id: the client sends each stream's greeting
    /// there from the socket that will carry the stream, until `Ready` says all arrived.
    #[serde(default)]
    pub udp_ports: Vec<u16>,
}

/// All data connections are attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// Server-side socket settings, indexed by stream id.
    pub sockets: Vec<SocketReport>,
    /// The tag of the greeting of each connection the server attached, by stream or flow id,
    /// in hex (none for `--crr`, whose connections come later). The client checks each is
    /// one of its own: without a key the tag is a random token, unknown to anyone who raced
    /// the client to a stream with a cookie read off the wire.
    #[serde(default)]
    pub greetings: Vec<String>,
}

/// The client ends the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finish {
    /// The user cut the test short.
    pub interrupted: bool,
}

/// What the client moved, per stream or flow, over the whole test: bytes a throughput
/// stream sent or received, transactions a request/response flow completed. Both ends check
/// that no receiver read more than its sender wrote and no server answered more than its
/// client asked; the server can only do so with the client's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// By stream or flow id.
    pub counts: Vec<IdCount>,
}

/// One stream's or flow's count in a [`Tally`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdCount {
    /// Stream or flow id.
    pub id: u16,
    /// Bytes or transactions.
    pub count: u64,
}

impl Tally {
    /// The count of `id`, if the client sent one.
    ///
    /// Clients send ids in order from 0, so `id` is looked for at its own position first: the
    /// checks call this once per flow, and a search each time cost flows² (seconds at 16,384
    /// flows, while the client waited for the server's results).
    pub fn get(&self, id: u16) -> Option<u64> {
        match self.counts.get(id as usize) {
            Some(c) if c.id == id => Some(c.count),
            _ => self.counts.iter().find(|c| c.id == id).map(|c| c.count),
        }
    }
}

/// The flows of a request/response test whose data connections did not open (refused, reset
/// or timed out on the way: a firewall's or a load balancer's connection limit), sent by a
/// client asked to run the flows that did (`--allow-partial-flows`) once every connection it
/// tried has opened or failed. The server stops waiting for these and starts with the rest.
/// Only for persistent TCP flows (`--rr`, `--connections-only`'s held flows): a `--crr` or
/// UDP test, ids out of range or already connected, or no flow left is a bad request. A
/// server from before this message reads it as a client gone astray and drops the test, as
/// it would have dropped it for the missing connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    /// The flow ids that will not connect, ascending.
    pub ids: Vec<u16>,
}

/// Why a request failed, machine-readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request is malformed or out of bounds.
    BadRequest,
    /// The peer speaks another protocol version.
    VersionMismatch,
    /// A server limit was reached (streams, duration, concurrent tests…).
    LimitExceeded,
    /// The peer stopped talking.
    Timeout,
    /// A socket operation failed on the server.
    ServerError,
    /// The server is shutting down.
    ShuttingDown,
    /// Authentication failed or was missing.
    AuthFailed,
    /// The client's address is not allowed.
    Forbidden,
    /// A code from a newer version.
    #[serde(other)]
    Unknown,
}

/// An error with a message meant for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMsg {
    /// Category.
    pub code: ErrorCode,
    /// What happened and what to do about it.
    pub message: String,
    /// A request/response test refused for asking more flows than the server's
    /// `--max-flows`: that limit, so a client may run the flows it takes
    /// (`--allow-partial-flows`). Absent from older servers and other refusals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_flows: Option<u32>,
    /// A test the server ended (it is shutting down, or nothing moved for its idle timeout)
    /// after measuring it: its last intervals and its results follow, as after `Finish`, so
    /// the client reports what was measured beside why the test failed. Absent (false) from
    /// older servers and every other error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub results_follow: bool,
}

impl ErrorMsg {
    /// An `Error` message, ready to send.
    pub fn message(code: ErrorCode, message: impl Into<String>) -> Message {
        Message::Error(ErrorMsg {
            code,
            message: message.into(),
            max_flows: None,
            results_follow: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids are looked for at their own position first; a tally in another order, or with
    /// gaps, still answers for every id it has and for none it lacks.
    #[test]
    fn a_tally_finds_its_ids_in_any_order() {
        let c = |id, count| IdCount { id, count };
        let dense = Tally {
            counts: vec![c(0, 7), c(1, 8), c(2, 9)],
        };
        assert_eq!(
            (dense.get(0), dense.get(2), dense.get(3)),
            (Some(7), Some(9), None)
        );
        let shuffled = Tally {
            counts: vec![c(2, 9), c(0, 7), c(5, 1)],
        };
        let got: Vec<Option<u64>> = (0..6).map(|i| shuffled.get(i)).collect();
        assert_eq!(got, [Some(7), None, Some(9), None, None, Some(1)]);
    }

    #[test]
    fn messages_are_tagged_json() {
        let m = Message::Finish(Finish { interrupted: true });
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(j, r#"{"type":"finish","interrupted":true}"#);
        assert_eq!(serde_json::from_str::<Message>(&j).unwrap(), m);
        let j = serde_json::to_string(&Message::Go).unwrap();
        assert_eq!(j, r#"{"type":"go"}"#);
    }

    #[test]
    fn kind_is_the_json_type_tag() {
        use crate::auth::Psk;
        use crate::report::CpuUsage;
        let (n1, n2) = (Nonce::random().unwrap(), Nonce::random().unwrap());
        let proof = Psk::new(vec![7u8; 32]).unwrap().client_proof(&n1, &n2);
        let all = [
            Message::Hello(Hello {
                software: "x".into(),
                nonce: n1,
                extensions: vec![EXTENSION_HOST.into()],
            }),
            Message::Auth(AuthProof { proof }),
            Message::Welcome(Welcome {
                software: "x".into(),
                nonce: n2,
                auth_required: false,
                proof: None,
            }),
            Message::Start(Box::new(TestSpec::throughput())),
            Message::Accepted(Accepted {
                cookie: Cookie([1; 16]),
                udp_ports: vec![5202],
            }),
            Message::Ready(Ready {
                sockets: Vec::new(),
                greetings: vec!["00".repeat(16)],
            }),
            Message::Missing(Missing { ids: vec![3, 5] }),
            Message::Go,
            Message::Interval(SideInterval {
                index: 0,
                start_s: 0.0,
                end_s: 1.0,
                omitted: false,
                streams: Vec::new(),
            }),
            Message::Finish(Finish { interrupted: false }),
            Message::Tally(Tally {
                counts: vec![IdCount {
                    id: 3,
                    count: 1 << 40,
                }],
            }),
            Message::Results(SideResults {
                streams: Vec::new(),
                cpu: CpuUsage::default(),
            }),
            Message::RrInterval(SideRrInterval {
                index: 0,
                start_s: 0.0,
                end_s: 1.0,
                omitted: false,
                transactions: 0,
                retransmits: 0,
                connections: 0,
            }),
            Message::RrResults(SideRrResults {
                flows: Vec::new(),
                measured_retransmits: 0,
                cpu: CpuUsage::default(),
                ignored: 0,
                held_s: 0.0,
            }),
            Message::UdpResults(SideUdpResults {
                streams: Vec::new(),
                cpu: CpuUsage::default(),
                batching: "x".into(),
            }),
            Message::UdpInterval(SideUdpInterval {
                index: 0,
                start_s: 0.0,
                end_s: 1.0,
                omitted: false,
                streams: Vec::new(),
            }),
            Message::Host(Box::new(HostReport {
                cloud: None,
                interface: None,
                error: Some("x".into()),
            })),
            ErrorMsg::message(ErrorCode::Timeout, "x"),
        ];
        for m in all {
            let json = serde_json::to_value(&m).unwrap();
            assert_eq!(json["type"], m.kind(), "{m:?}");
        }
    }

    #[test]
    fn a_flow_limit_refusal_carries_the_limit_and_one_without_still_parses() {
        let m = ErrorMsg {
            code: ErrorCode::LimitExceeded,
            message: "x".into(),
            max_flows: Some(10),
            results_follow: false,
        };
        let text = serde_json::to_string(&Message::Error(m.clone())).unwrap();
        assert_eq!(
            serde_json::from_str::<Message>(&text).unwrap(),
            Message::Error(m)
        );
        // An older server's refusal, or any other: no limit, and none written.
        let old: Message =
            serde_json::from_str(r#"{"type":"error","code":"limit_exceeded","message":"x"}"#)
                .unwrap();
        assert!(matches!(
            &old,
            Message::Error(ErrorMsg {
                max_flows: None,
                ..
            })
        ));
        assert!(!serde_json::to_string(&old).unwrap().contains("max_flows"));
    }

    /// A hello from a client before extensions parses (none listed), and one listing them
    /// parses on a server that ignores unknown fields as every xbench server does.
    #[test]
    fn hellos_with_and_without_extensions_parse() {
        let n = Nonce::random().unwrap();
        let old = serde_json::json!({"type": "hello", "software": "xbench 0.0.9", "nonce": n});
        let Message::Hello(h) = serde_json::from_value(old).unwrap() else {
            panic!()
        };
        assert!(h.extensions.is_empty());
        let new = Message::Hello(Hello {
            extensions: vec![EXTENSION_HOST.into()],
            ..h
        });
        let text = serde_json::to_string(&new).unwrap();
        assert!(text.contains(r#""extensions":["host"]"#), "{text}");
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), new);
    }

    #[test]
    fn results_follow_an_error_only_when_it_says_so() {
        let ended = Message::Error(ErrorMsg {
            code: ErrorCode::ShuttingDown,
            message: "the server is shutting down".into(),
            max_flows: None,
            results_follow: true,
        });
        let text = serde_json::to_string(&ended).unwrap();
        assert!(text.contains(r#""results_follow":true"#), "{text}");
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), ended);
        // An older server's (and every other) error: none follow, and the field is not
        // written, so older clients read the same bytes as before.
        let old: Message =
            serde_json::from_str(r#"{"type":"error","code":"shutting_down","message":"x"}"#)
                .unwrap();
        assert!(matches!(&old, Message::Error(e) if !e.results_follow));
        assert!(
            !serde_json::to_string(&old)
                .unwrap()
                .contains("results_follow")
        );
    }

    #[test]
    fn unknown_error_codes_from_newer_servers_still_parse() {
        let m: Message =
            serde_json::from_str(r#"{"type":"error","code":"quota_melted","message":"x"}"#)
                .unwrap();
        assert!(matches!(
            m,
            Message::Error(ErrorMsg {
                code: ErrorCode::Unknown,
                ..
            })
        ));
    }
}
