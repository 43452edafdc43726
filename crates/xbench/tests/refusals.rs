//! Every refusal reaches the client with a reason it can act on: a test request the server
//! cannot decode, a `--rate` out of bounds, a server whose handshake slots are all taken, and
//! a server that cannot listen at all.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{TestServer, eventually, greet_on, open_fds};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xbench::proto::{self, ErrorCode, Message};
use xbench::report::Outcome;
use xbench::{EndCondition, Limits, Server, ServerConfig, TestSpec, Workload};

/// A Start whose workload and end are given as raw JSON.
fn raw_start(workload: &str, end: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"type":"start","workload":{workload},"end":{end},"omit":0,"interval":1.0,
            "socket":{{"window":null,"mss":null,"nodelay":false,"congestion":null}}}}"#
    );
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body.as_bytes());
    frame
}

/// Greets `addr`, sends `frame` as the test request, and returns the server's answer; then
/// checks that the server closes.
async fn answer_to(addr: SocketAddr, frame: &[u8]) -> Result<Option<Message>, proto::ProtoError> {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr, welcome) = greet_on(s, "refusals test").await;
    assert!(matches!(welcome, Some(Message::Welcome(_))));
    wr.write_all(frame).await.unwrap();
    let answer = rd.next_within(Duration::from_secs(5)).await;
    let closed = rd.next_within(Duration::from_secs(5)).await;
    assert!(matches!(closed, Ok(None)), "closed after: {closed:?}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_test_request_is_refused_with_what_was_wrong() {
    let server = TestServer::start().await;
    let tp = |streams: u32| {
        format!(
            r#"{{"throughput":{{"streams":{streams},"direction":"client_to_server","block_len":131072}}}}"#
        )
    };
    let cases = [
        (
            tp(0),
            r#"{"duration":1.0}"#.to_owned(),
            "`workload.throughput.streams`",
        ),
        (tp(1), r#"{"duration":-1}"#.to_owned(), "`end.duration`"),
        (tp(1), r#"{"duration":1e300}"#.to_owned(), "`end.duration`"),
        (
            r#"{"teleport":{}}"#.to_owned(),
            r#"{"duration":1.0}"#.to_owned(),
            "unknown variant `teleport`",
        ),
    ];
    for (workload, end, names) in cases {
        match answer_to(server.addr, &raw_start(&workload, &end)).await {
            Ok(Some(Message::Error(e))) => {
                assert_eq!(e.code, ErrorCode::BadRequest, "{workload} {end}");
                assert!(
                    e.message.starts_with("cannot read the test request:"),
                    "{}",
                    e.message
                );
                assert!(e.message.contains(names), "{names}: {}", e.message);
            }
            other => panic!("{workload} {end}: expected a refusal, got {other:?}"),
        }
    }
    // The server still serves.
    let r = server.run(&server.config()).await;
    assert_eq!(r.outcome, Outcome::Completed);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_out_of_bounds_is_refused_by_the_server_too() {
    let server = TestServer::start().await;
    for rate in ["1e-300", "0.01", "1e9"] {
        // Built by hand: the library's own client validates before sending.
        let rr = format!(
            r#"{{"request_response":{{"request_len":1,"response_len":1,"flows":1,"burst":1,
                "connect_per_transaction":false,"rate_per_flow":{rate}}}}}"#
        );
        match answer_to(server.addr, &raw_start(&rr, r#"{"duration":10.0}"#)).await {
            Ok(Some(Message::Error(e))) => {
                assert_eq!(e.code, ErrorCode::BadRequest, "{rate}");
                assert!(e.message.contains("--rate"), "{rate}: {}", e.message);
                assert!(e.message.contains("out of range"), "{rate}: {}", e.message);
            }
            other => panic!("{rate}: expected a refusal, got {other:?}"),
        }
    }
    // And the client refuses it before connecting, naming the flag.
    let mut c = server.config();
    c.spec = TestSpec::request_response();
    c.spec.end = EndCondition::Duration(Duration::from_secs(10));
    if let Workload::RequestResponse(r) = &mut c.spec.workload {
        r.rate_per_flow = Some(1e-300);
    }
    let e = xbench::client::run(&c, &mut |_| {}, std::future::pending())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--rate"), "{e}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_the_handshake_limit_is_told_the_server_is_busy() {
    let server = TestServer::with_limits(Limits {
        max_handshakes: 3,
        handshake_timeout: Duration::from_secs(3),
        ..Limits::default()
    })
    .await;
    // Three connections that send a byte of their preamble and stop hold every slot. (One
    // that sends nothing holds none: the kernel keeps it from `accept` for a second,
    // TCP_DEFER_ACCEPT.)
    let mut silent = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let preamble = proto::Preamble::new(proto::Channel::Control).encode();
        s.write_all(&preamble[..1]).await.unwrap();
        silent.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Every refused client reads the reason, not a reset.
    for i in 0..10 {
        let e = xbench::client::run(&server.config(), &mut |_| {}, std::future::pending())
            .await
            .unwrap_err();
        match &e {
            xbench::Error::Refused { code, message } => {
                assert_eq!(*code, ErrorCode::LimitExceeded, "{i}: {e}");
                assert!(message.contains("busy"), "{i}: {e}");
                assert!(message.contains("--max-handshakes"), "{i}: {e}");
            }
            other => panic!("attempt {i}: expected a refusal, got: {other}"),
        }
    }
    drop(silent);
    // Once the slots are free (the server sees the silent ones close), tests run again.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match xbench::client::run(&server.config(), &mut |_| {}, std::future::pending()).await {
            Ok(r) => {
                assert_eq!(r.outcome, Outcome::Completed, "{:?}", r.warnings);
                break;
            }
            Err(e) => assert!(Instant::now() < until, "still refused: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusing_a_flood_is_bounded_in_time_and_in_sockets() {
    let server = TestServer::with_limits(Limits {
        max_handshakes: 2,
        handshake_timeout: Duration::from_secs(10),
        ..Limits::default()
    })
    .await;
    let fds = open_fds();
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // 300 more silent connections: refusals hold at most a bounded number, each for a bounded
    // time, and every one is closed well before the handshake timeout.
    let started = Instant::now();
    let mut flood = Vec::new();
    for _ in 0..300 {
        flood.push(TcpStream::connect(server.addr).await.unwrap());
    }
    for mut s in flood {
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_secs(4), s.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "a refused connection is closed, without data: {r:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "closed after {:?}",
        started.elapsed()
    );
    drop(silent);
    assert!(
        eventually(Duration::from_secs(12), || open_fds() <= fds + 2).await,
        "sockets back: {} -> {}",
        fds,
        open_fds()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cannot_listen_names_every_address_tried_and_why() {
    // Port taken on IPv4: `[::]` (IPv6 and IPv4) fails, and so does the `0.0.0.0` fallback.
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let e = Server::bind(ServerConfig {
        port,
        ..ServerConfig::default()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains(&format!("[::]:{port}")), "{e}");
    assert!(e.contains(&format!("0.0.0.0:{port}")), "{e}");
    assert!(e.contains("in use"), "{e}");
    assert!(e.contains("-p"), "{e}");
    // An explicit address: that one alone.
    let e = Server::bind(ServerConfig {
        bind: vec!["127.0.0.1".parse().unwrap()],
        port,
        ..ServerConfig::default()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(!e.contains("[::]"), "{e}");
}

/// `--crr` flows that cannot all have a 4-tuple to the server's port are refused by the
/// library before it dials anything: a listener that would have been the server sees no
/// connection. (Found after the server had accepted, the test used to fail half set up.)
#[tokio::test]
async fn flows_beyond_the_port_space_are_refused_before_the_server_is_asked() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut config = xbench::ClientConfig::new("127.0.0.1");
    config.port = listener.local_addr().unwrap().port();
    let mut spec = TestSpec::request_response();
    if let Workload::RequestResponse(rr) = &mut spec.workload {
        rr.connect_per_transaction = true;
        rr.flows = xbench::config::FlowCount::new(60_000).unwrap();
    }
    spec.end = EndCondition::Duration(Duration::from_secs(1));
    config.spec = spec;
    let e = xbench::client::run(&config, &mut |_| {}, std::future::pending())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("do not fit"), "{e}");
    assert!(listener.accept().is_err(), "the server was dialled");
}
