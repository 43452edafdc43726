//! A server left running for weeks: authentication, the allow list, every limit with its
//! refusal, idle and overrunning clients, rate caps, graceful shutdown, and many clients at
//! once.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::num::NonZeroU16;
use std::time::{Duration, Instant};

use common::{TestServer, greet_on};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xbench::auth::Psk;
use xbench::config::Direction;
use xbench::proto::{self, Channel, DataHello, Message, MessageReader, Preamble};
use xbench::report::Outcome;
use xbench::{EndCondition, Error, Limits, ServerConfig, TestSpec, Workload};

fn key(s: &str) -> Psk {
    Psk::new(format!("{s:-<24}").into_bytes()).unwrap()
}

fn tp(c: &mut xbench::ClientConfig) -> &mut xbench::ThroughputSpec {
    let Workload::Throughput(t) = &mut c.spec.workload else {
        unreachable!()
    };
    t
}

async fn run(c: &xbench::ClientConfig) -> Result<xbench::TestReport, Error> {
    xbench::client::run(c, &mut |_| {}, std::future::pending()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_key_is_required_and_proven_both_ways() {
    let server = TestServer::with_config(ServerConfig {
        psk: Some(key("right")),
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.config();
    let e = run(&c).await.unwrap_err().to_string();
    assert!(
        e.contains("requires a pre-shared key") && e.contains("--psk-file"),
        "{e}"
    );
    c.psk = Some(key("wrong"));
    let e = run(&c).await.unwrap_err().to_string();
    assert!(e.contains("keys differ"), "{e}");
    c.psk = Some(key("right"));
    assert_eq!(run(&c).await.unwrap().outcome, Outcome::Completed);
    server.stop().await;

    // A client with a key refuses a server that cannot prove it holds one.
    let open = TestServer::start().await;
    let mut c = open.config();
    c.psk = Some(key("right"));
    let e = run(&c).await.unwrap_err().to_string();
    assert!(e.contains("cannot prove who it is"), "{e}");
    open.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_skips_authentication_gets_nothing() {
    let server = TestServer::with_config(ServerConfig {
        psk: Some(key("right")),
        ..ServerConfig::default()
    })
    .await;
    // Hello, then straight to Start without Auth.
    let (mut rd, mut wr, welcome) = greet(server.addr, "impostor").await;
    let Some(Message::Welcome(w)) = welcome else {
        panic!("no welcome")
    };
    assert!(w.auth_required && w.proof.is_some());
    proto::write_message(&mut wr, &Message::Start(Box::new(TestSpec::throughput())))
        .await
        .unwrap();
    match rd.next().await {
        Ok(Some(Message::Error(e))) => {
            assert!(e.message.contains("authentication failed"), "{}", e.message)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allow_list_refuses_other_addresses_by_name() {
    let server = TestServer::with_config(ServerConfig {
        allow: vec!["10.0.0.0/8".parse().unwrap()],
        ..ServerConfig::default()
    })
    .await;
    let e = run(&server.config()).await.unwrap_err().to_string();
    assert!(
        e.contains("127.0.0.1 is not allowed") && e.contains("--allow"),
        "{e}"
    );
    server.stop().await;
    let server = TestServer::with_config(ServerConfig {
        allow: vec![
            "10.0.0.0/8".parse().unwrap(),
            "127.0.0.0/8".parse().unwrap(),
        ],
        ..ServerConfig::default()
    })
    .await;
    assert_eq!(
        run(&server.config()).await.unwrap().outcome,
        Outcome::Completed
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_allowing_partial_flows_runs_the_flows_the_server_takes() {
    let server = TestServer::with_limits(Limits {
        max_flows: 3,
        ..Limits::default()
    })
    .await;
    let mut c = server.config();
    c.spec = TestSpec::request_response();
    c.spec.end = EndCondition::Duration(Duration::from_millis(300));
    if let Workload::RequestResponse(r) = &mut c.spec.workload {
        r.flows = xbench::config::FlowCount::new(8).unwrap();
    }
    match run(&c).await.unwrap_err() {
        Error::FlowLimit { max, .. } => assert_eq!(max, 3),
        other => panic!("expected the server's flow limit, got: {other}"),
    }
    c.allow_partial_flows = true;
    let r = run(&c).await.unwrap();
    assert_eq!(r.outcome, Outcome::Completed);
    assert!(
        r.warnings.iter().any(|w| w.contains("took 3 of the 8")),
        "{:?}",
        r.warnings
    );
    let rr = r.rr.unwrap();
    let s = rr.setup.unwrap();
    assert_eq!(
        (
            s.requested,
            s.connected,
            s.refused,
            s.timed_out,
            s.server_limit
        ),
        (8, 3, 5, 0, Some(3))
    );
    assert_eq!(rr.flows.len(), 3);
    assert!(rr.summary.transactions > 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_refuses_with_its_name() {
    let server = TestServer::with_limits(Limits {
        max_streams: 4,
        max_flows: 10,
        max_duration: Duration::from_secs(5),
        max_tests: 2,
        max_tests_per_client: 1,
        ..Limits::default()
    })
    .await;
    let mut c = server.config();
    tp(&mut c).streams = NonZeroU16::new(5).unwrap();
    let e = run(&c).await.unwrap_err().to_string();
    assert!(e.contains("--max-streams"), "{e}");

    let mut c = server.config();
    tp(&mut c).block_len = std::num::NonZeroU32::new(8 << 20).unwrap();
    let e = run(&c).await.unwrap_err().to_string();
    assert!(e.contains("--max-block-len"), "{e}");

    let mut c = server.config();
    c.spec = TestSpec::request_response();
    c.spec.end = EndCondition::Duration(Duration::from_millis(300));
    if let Workload::RequestResponse(r) = &mut c.spec.workload {
        r.flows = xbench::config::FlowCount::new(11).unwrap();
    }
    let e = run(&c).await.unwrap_err().to_string();
    assert!(e.contains("--max-flows"), "{e}");

    let mut c = server.config();
    c.spec.end = EndCondition::Duration(Duration::from_secs(6));
    let e = run(&c).await.unwrap_err().to_string();
    assert!(e.contains("--max-duration"), "{e}");

    // A warm-up alone as long as the limit is refused too, byte-count tests included.
    let mut c = server.config();
    c.spec.end = EndCondition::Bytes(1 << 20);
    c.spec.omit = Duration::from_secs(5);
    let e = run(&c).await.unwrap_err().to_string();
    assert!(e.contains("--max-duration"), "{e}");

    // One test per client address: a second from the same address waits its turn.
    let mut long = server.config();
    long.spec.end = EndCondition::Duration(Duration::from_secs(2));
    let first = tokio::spawn(async move { run(&long).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = run(&server.config()).await.unwrap_err().to_string();
    assert!(e.contains("--max-tests-per-client"), "{e}");
    assert_eq!(first.await.unwrap().unwrap().outcome, Outcome::Completed);
    // The slot came back.
    assert_eq!(
        run(&server.config()).await.unwrap().outcome,
        Outcome::Completed
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_tests_find_their_slot_free() {
    // A sweep starts its next run the moment it has the last one's results; with one test per
    // client that slot must already be free (it once came back only after the results went
    // out, and a loaded machine refused the next run now and then).
    let server = TestServer::with_limits(Limits {
        max_tests_per_client: 1,
        ..Limits::default()
    })
    .await;
    for i in 0..30 {
        let mut c = server.config();
        c.spec.end = EndCondition::Duration(Duration::from_millis(100));
        if i % 2 == 1 {
            c.spec = TestSpec::request_response();
            c.spec.end = EndCondition::Duration(Duration::from_millis(100));
        }
        let r = run(&c).await.unwrap_or_else(|e| panic!("run {i}: {e}"));
        assert_eq!(r.outcome, Outcome::Completed, "run {i}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bitrate_paces_each_stream() {
    let server = TestServer::start().await;
    let mut c = server.config();
    c.spec.end = EndCondition::Duration(Duration::from_secs(2));
    tp(&mut c).bitrate = Some(100_000_000);
    tp(&mut c).streams = NonZeroU16::new(2).unwrap();
    let r = run(&c).await.unwrap();
    let got = r.summary.directions[0].receiver.unwrap().bits_per_second;
    // Two streams at 100 Mbit/s each; the kernel's pacing is accurate to a few percent.
    assert!((180e6..=210e6).contains(&got), "{got}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_send_cap_is_shared_and_never_exceeded() {
    let server = TestServer::with_limits(Limits {
        max_send_rate: Some(200_000_000),
        ..Limits::default()
    })
    .await;
    let mut c = server.config();
    c.spec.end = EndCondition::Duration(Duration::from_secs(2));
    tp(&mut c).direction = Direction::ServerToClient;
    let (a, b) = (c.clone(), c.clone());
    let (ra, rb) = tokio::join!(run(&a), run(&b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let rate = |r: &xbench::TestReport| r.summary.directions[0].receiver.unwrap().bits_per_second;
    let total = rate(&ra) + rate(&rb);
    assert!(total <= 200e6 * 1.06, "total {total}");
    assert!(
        total >= 200e6 * 0.8,
        "the cap is shared, not wasted: {total}"
    );
    // A test that alone asks for more than the cap is refused, naming it.
    let mut greedy = c.clone();
    tp(&mut greedy).bitrate = Some(300_000_000);
    let e = run(&greedy).await.unwrap_err().to_string();
    assert!(e.contains("--max-send-rate"), "{e}");
    // Client-to-server tests are not the server's sending: unaffected.
    let mut up = server.config();
    tp(&mut up).bitrate = Some(300_000_000);
    assert_eq!(run(&up).await.unwrap().outcome, Outcome::Completed);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_send_cap_paces_request_response_answers_too() {
    // 1 MB answers at a 40 Mbit/s cap: at most 5 a second, where loopback would do hundreds.
    let cap = 40_000_000u64;
    let server = TestServer::with_limits(Limits {
        max_send_rate: Some(cap),
        ..Limits::default()
    })
    .await;
    let mut c = server.config();
    c.spec = TestSpec::request_response();
    c.spec.end = EndCondition::Duration(Duration::from_secs(3));
    if let Workload::RequestResponse(r) = &mut c.spec.workload {
        r.response_len = std::num::NonZeroU32::new(1_000_000).unwrap();
        r.flows = xbench::config::FlowCount::new(2).unwrap();
    }
    let r = run(&c).await.unwrap();
    assert_eq!(r.outcome, Outcome::Completed);
    let s = &r.rr.as_ref().unwrap().summary;
    let sent_bits = s.total_transactions as f64 * 8e6;
    let rate = sent_bits / s.seconds;
    // Pacing lets an initial window out unpaced; a 10 % allowance covers it.
    assert!(
        rate <= cap as f64 * 1.1,
        "{rate} bit/s over a {cap} bit/s cap"
    );
    assert!(
        rate >= cap as f64 * 0.5,
        "the cap is used, not starved: {rate}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_many_flow_request_response_test_takes_one_share_of_the_send_cap() {
    // 100 flows of 64 KiB answers beside a two-stream download: three shares, not 102.
    let cap = 120_000_000u64;
    let server = TestServer::with_limits(Limits {
        max_send_rate: Some(cap),
        ..Limits::default()
    })
    .await;
    let mut rr = server.config();
    rr.spec = TestSpec::request_response();
    rr.spec.end = EndCondition::Duration(Duration::from_secs(4));
    if let Workload::RequestResponse(r) = &mut rr.spec.workload {
        r.response_len = std::num::NonZeroU32::new(64 * 1024).unwrap();
        r.flows = xbench::config::FlowCount::new(100).unwrap();
    }
    let mut down = server.config();
    down.spec.end = EndCondition::Duration(Duration::from_secs(3));
    tp(&mut down).direction = Direction::ServerToClient;
    tp(&mut down).streams = NonZeroU16::new(2).unwrap();
    let rr_task = {
        let rr = rr.clone();
        tokio::spawn(async move { run(&rr).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let d = run(&down).await.unwrap();
    let r = rr_task.await.unwrap().unwrap();
    let down_bps = d.summary.directions[0].receiver.unwrap().bits_per_second;
    let s = &r.rr.as_ref().unwrap().summary;
    let rr_bps = s.total_transactions as f64 * 65536.0 * 8.0 / s.seconds;
    // Two of three shares is 80 Mbit/s; 2/102 of the cap would be 2.4.
    assert!(
        down_bps >= 0.5 * cap as f64,
        "the download got {down_bps} bit/s of a {cap} bit/s cap beside {rr_bps} bit/s of answers"
    );
    assert!(rr_bps <= 1.1 * cap as f64, "{rr_bps}");
    server.stop().await;
}

/// Opens a control connection by hand, says hello as `name`, and returns the server's answer.
async fn greet(
    addr: std::net::SocketAddr,
    name: &str,
) -> (
    MessageReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
    Option<Message>,
) {
    greet_on(TcpStream::connect(addr).await.unwrap(), name).await
}

/// A client that starts a test, sends a little, then goes quiet without closing anything.
async fn quiet_client(
    addr: std::net::SocketAddr,
    spec: TestSpec,
) -> (
    MessageReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
    TcpStream,
) {
    let (mut rd, mut wr, welcome) = greet(addr, "quiet").await;
    assert!(matches!(welcome, Some(Message::Welcome(_))));
    proto::write_message(&mut wr, &Message::Start(Box::new(spec)))
        .await
        .unwrap();
    let Ok(Some(Message::Accepted(a))) = rd.next().await else {
        panic!("not accepted")
    };
    let mut data = TcpStream::connect(addr).await.unwrap();
    data.write_all(&Preamble::new(Channel::Data).encode())
        .await
        .unwrap();
    data.write_all(&DataHello::new(a.cookie, 0, 0, None).encode())
        .await
        .unwrap();
    assert!(matches!(rd.next().await, Ok(Some(Message::Ready(_)))));
    proto::write_message(&mut wr, &Message::Go).await.unwrap();
    data.write_all(&[1u8; 10_000]).await.unwrap();
    (rd, wr, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_before_its_data_connections_frees_its_slot_at_once() {
    // One test per client, and a long handshake timeout: the slot must come back because the
    // client left, not because the timeout ran out.
    let server = TestServer::with_limits(Limits {
        max_tests_per_client: 1,
        handshake_timeout: Duration::from_secs(10),
        ..Limits::default()
    })
    .await;
    let (mut rd, mut wr, welcome) = greet(server.addr, "leaver").await;
    assert!(matches!(welcome, Some(Message::Welcome(_))));
    proto::write_message(&mut wr, &Message::Start(Box::new(TestSpec::throughput())))
        .await
        .unwrap();
    assert!(matches!(rd.next().await, Ok(Some(Message::Accepted(_)))));
    // Gone before opening a single data connection (Ctrl-C while connecting).
    drop((rd, wr));
    let started = Instant::now();
    let outcome = loop {
        match run(&server.config()).await {
            Ok(r) => break r.outcome,
            Err(e) if started.elapsed() < Duration::from_secs(2) => {
                assert!(e.to_string().contains("--max-tests-per-client"), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the slot is still held after 2 s: {e}"),
        }
    };
    assert_eq!(outcome, Outcome::Completed);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_never_outlives_its_duration_by_more_than_the_grace() {
    let server = TestServer::with_limits(Limits {
        overrun_grace: Duration::from_millis(500),
        ..Limits::default()
    })
    .await;
    let mut spec = TestSpec::throughput();
    spec.end = EndCondition::Duration(Duration::from_millis(500));
    let started = Instant::now();
    // Keeps its data flowing (so it is not idle) but never says Finish.
    let (mut rd, _wr, mut data) = quiet_client(server.addr, spec).await;
    let feeder = tokio::spawn(async move {
        let buf = vec![0u8; 64 * 1024];
        while data.write_all(&buf).await.is_ok() {}
    });
    let mut told = None;
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match rd.next().await {
                Ok(Some(Message::Error(e))) => told = Some(e.message),
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
    })
    .await;
    assert!(r.is_ok());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        told.is_some_and(|m| m.contains("past its end")),
        "the client is told why"
    );
    feeder.abort();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_tests_finish_then_cuts_the_rest_short_with_a_reason() {
    let server = TestServer::start().await; // shutdown grace 1 s
    let mut short = server.config();
    short.spec.end = EndCondition::Duration(Duration::from_millis(700));
    let mut long = server.config();
    long.spec.end = EndCondition::Duration(Duration::from_secs(30));
    let a = tokio::spawn(async move { run(&short).await });
    let b = tokio::spawn(async move { run(&long).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = Instant::now();
    server.stop().await;
    assert!(stopped.elapsed() < Duration::from_secs(8));
    assert_eq!(
        a.await.unwrap().unwrap().outcome,
        Outcome::Completed,
        "finished within the grace"
    );
    let r = b.await.unwrap().unwrap();
    match &r.outcome {
        Outcome::Failed { error } => assert!(error.contains("shutting down"), "{error}"),
        o => panic!("expected a failed test, got {o:?}"),
    }
    assert!(
        r.summary.directions[0].sender.unwrap().bytes > 0,
        "what ran is kept"
    );
    // Issue 30, finding 9: the server measured the test it cut short and sends its results
    // after saying why: the receiver's figures are there.
    let received = r.summary.directions[0].receiver.as_ref().map(|t| t.bytes);
    assert!(
        received.is_some_and(|b| b > 0),
        "{received:?}: {:?}",
        r.warnings
    );
}

/// Issue 30, finding 9: a request/response test cut short by shutdown reports the server's
/// counts too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_response_test_cut_short_by_shutdown_has_the_servers_counts() {
    let server = TestServer::start().await; // shutdown grace 1 s
    let mut c = server.config();
    c.spec = TestSpec::request_response();
    c.spec.end = EndCondition::Duration(Duration::from_secs(30));
    let run = tokio::spawn(async move { run(&c).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.stop().await;
    let r = run.await.unwrap().unwrap();
    match &r.outcome {
        Outcome::Failed { error } => assert!(error.contains("shutting down"), "{error}"),
        o => panic!("expected a failed test, got {o:?}"),
    }
    let rr = r.rr.as_ref().unwrap();
    assert!(rr.summary.total_transactions > 0);
    assert!(
        rr.summary.server_transactions.is_some_and(|n| n > 0),
        "{:?}: {:?}",
        rr.summary.server_transactions,
        r.warnings
    );
}

/// Issue 30, finding 9: a test the server ends for its idle timeout (a client that stopped
/// sending, here by a rate too low to move a byte in time) gets the results the server has,
/// after the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_ended_idle_gets_the_servers_results_after_the_reason() {
    let server = TestServer::with_limits(Limits {
        idle_timeout: Duration::from_secs(1),
        ..Limits::default()
    })
    .await;
    let mut c = server.config();
    c.spec.end = EndCondition::Duration(Duration::from_secs(30));
    // One 128 KiB block at 8 kbit/s, then nothing for two minutes.
    tp(&mut c).bitrate = Some(8_000);
    let r = run(&c).await.unwrap();
    match &r.outcome {
        Outcome::Failed { error } => {
            assert!(error.contains("--idle-timeout"), "{error}")
        }
        o => panic!("expected a failed test, got {o:?}"),
    }
    let received = r.summary.directions[0].receiver.as_ref().map(|t| t.bytes);
    assert!(received.is_some(), "{:?}", r.warnings);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_at_once_each_get_their_own_result() {
    let server = TestServer::with_limits(Limits {
        max_tests_per_client: 64,
        ..Limits::default()
    })
    .await;
    let runs: Vec<_> = (0..64u64)
        .map(|i| {
            let mut c = server.config();
            // A distinct byte count per client: a mixed-up result would show.
            c.spec.end = EndCondition::Bytes(1_000_000 + i * 1_003);
            c.spec.interval = None;
            tokio::spawn(async move { (i, run(&c).await) })
        })
        .collect();
    for r in runs {
        let (i, r) = r.await.unwrap();
        let r = r.unwrap();
        assert_eq!(r.outcome, Outcome::Completed);
        let d = &r.summary.directions[0];
        assert_eq!(
            d.receiver.unwrap().bytes,
            1_000_000 + i * 1_003,
            "client {i}"
        );
        assert_eq!(d.sender.unwrap().bytes, d.receiver.unwrap().bytes);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_do_not_stop_real_tests() {
    let server = TestServer::with_limits(Limits {
        handshake_timeout: Duration::from_secs(3),
        ..Limits::default()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..2000 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let r = run(&server.config()).await.unwrap();
    assert_eq!(r.outcome, Outcome::Completed);
    // The idlers are dropped once their handshake time is up.
    let mut closed = 0;
    for mut s in idle {
        let mut b = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(6), s.read(&mut b)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 2000);
    server.stop().await;
}

/// A TCP connection to `to` from `local` (any 127.0.0.0/8 address: another client).
async fn connect_from(local: &str, to: std::net::SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{local}:0").parse().unwrap()).unwrap();
    s.connect(to).await.unwrap()
}

/// `server`'s client config, connecting from `local`.
fn from(server: &TestServer, local: &str) -> xbench::ClientConfig {
    let mut c = server.config();
    c.bind = Some(local.parse().unwrap());
    c
}

/// How many of `conns` the server closes within `limit`.
async fn closed_within(conns: &mut [TcpStream], limit: Duration) -> usize {
    let until = tokio::time::Instant::now() + limit;
    let mut closed = 0;
    for c in conns {
        let mut b = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout_at(until, c.read(&mut b)).await {
            closed += 1;
        }
    }
    closed
}

/// Issue 30, finding 6: 400 silent connections from one address against 200 handshake
/// slots held every slot, and every other client was told the server is busy, again and
/// again. One address holds half the slots now (--client-share); another still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_one_address_leave_handshake_slots_for_another() {
    let server = TestServer::with_limits(Limits {
        max_handshakes: 200,
        handshake_timeout: Duration::from_secs(30),
        ..Limits::default()
    })
    .await;
    let mut silent = Vec::new();
    for _ in 0..400 {
        silent.push(connect_from("127.0.0.2", server.addr).await);
    }
    // Beyond its 100 slots, the address's connections are turned away (within the 2 s a
    // refusal may take); its 100 wait for the handshake timeout.
    assert_eq!(
        closed_within(&mut silent, Duration::from_secs(5)).await,
        300
    );
    for _ in 0..3 {
        let report = run(&from(&server, "127.0.0.3")).await.unwrap();
        assert_eq!(report.outcome, Outcome::Completed);
    }
    drop(silent);
    server.stop().await;
}

/// An iperf3 control connection from `local` that has sent its cookie and read
/// `PARAM_EXCHANGE` (state 9), and nothing more; `None` if the server turned it away.
async fn iperf3_cookie_from(local: &str, to: std::net::SocketAddr, i: usize) -> Option<TcpStream> {
    let mut s = connect_from(local, to).await;
    // 36 base32 characters, the last ones `i`'s, and a NUL.
    const B32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut cookie = *b"slotslotslotslotslotslotslotslotslot\0";
    for (k, c) in cookie[30..36].iter_mut().enumerate() {
        *c = B32[(i >> (5 * k)) % 32];
    }
    s.write_all(&cookie).await.unwrap();
    let mut state = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut state)).await {
        Ok(Ok(1)) if state[0] == 9 => Some(s),
        _ => None,
    }
}

/// Issue 30, finding 6: 300 iperf3 cookies from one address held every handshake slot
/// through the parameter exchange. The address gets its share; another runs its test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iperf3_cookies_from_one_address_leave_handshake_slots_for_another() {
    let server = TestServer::with_limits(Limits {
        max_handshakes: 200,
        handshake_timeout: Duration::from_secs(30),
        ..Limits::default()
    })
    .await;
    let mut held = Vec::new();
    for i in 0..300 {
        held.extend(iperf3_cookie_from("127.0.0.2", server.addr, i).await);
    }
    assert_eq!(held.len(), 100);
    for _ in 0..3 {
        let report = run(&from(&server, "127.0.0.3")).await.unwrap();
        assert_eq!(report.outcome, Outcome::Completed);
    }
    drop(held);
    server.stop().await;
}

/// An iperf3 client from 127.0.0.2 that stops at `CREATE_STREAMS` (closing its end), with
/// `params`; returns once the server has closed its end too.
async fn iperf3_gone_at_create_streams(server: &TestServer, params: &[u8]) {
    let mut ctrl = iperf3_cookie_from("127.0.0.2", server.addr, 0)
        .await
        .unwrap();
    ctrl.write_all(&(params.len() as u32).to_be_bytes())
        .await
        .unwrap();
    ctrl.write_all(params).await.unwrap();
    let mut state = [0u8; 1];
    ctrl.read_exact(&mut state).await.unwrap();
    assert_eq!(state[0], 10, "CREATE_STREAMS");
    ctrl.shutdown().await.unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), ctrl.read_to_end(&mut rest)).await;
    // Not the 10 s handshake timeout.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 30, finding 6: an iperf3 client that closed at `CREATE_STREAMS` held its place
/// among the tests (--max-tests-per-client) until the handshake timeout, 10 s. It is freed
/// as the client leaves, TCP and UDP alike: the address's next test runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iperf3_client_gone_at_create_streams_frees_its_place_at_once() {
    let server = TestServer::with_limits(Limits {
        max_tests_per_client: 1,
        ..Limits::default()
    })
    .await;
    for params in [
        &br#"{"tcp":true,"omit":0,"time":2,"parallel":2,"len":4096}"#[..],
        br#"{"udp":true,"omit":0,"time":2,"parallel":2,"len":1400,"bandwidth":1000000}"#,
    ] {
        iperf3_gone_at_create_streams(&server, params).await;
        let report = run(&from(&server, "127.0.0.2")).await.unwrap();
        assert_eq!(report.outcome, Outcome::Completed);
    }
    server.stop().await;
}

/// Issue 30, finding 3: iperf3 clients draw on the same budget as xbench's. A test beyond
/// its address's share of the descriptors is refused (iperf3's `SERVER_ERROR`, "busy") before
/// the server opens anything for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iperf3_test_beyond_the_budget_is_refused_before_it_opens_anything() {
    // 600 descriptors: 344 less 86 kept for new connections, 129 an address.
    let server = TestServer::with_limits(Limits {
        open_files: Some(600),
        max_streams: 256,
        ..Limits::default()
    })
    .await;
    let mut ctrl = iperf3_cookie_from("127.0.0.2", server.addr, 1)
        .await
        .unwrap();
    let params = br#"{"tcp":true,"omit":0,"time":2,"parallel":100,"bidirectional":true}"#;
    ctrl.write_all(&(params.len() as u32).to_be_bytes())
        .await
        .unwrap();
    ctrl.write_all(params).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), ctrl.read_to_end(&mut reply))
        .await
        .expect("the server closes")
        .unwrap();
    assert_eq!(
        reply,
        xbench::proto::iperf3::server_error(xbench::proto::iperf3::ierr::NEW_TEST, libc::EBUSY)
    );
    // Within the share, the same address runs.
    let mut c = from(&server, "127.0.0.2");
    tp(&mut c).streams = NonZeroU16::new(100).unwrap();
    assert!(run(&c).await.is_ok());
    server.stop().await;
}

/// Issue 30, finding 9: a data connection refused by `--allow` (a `-B` list whose second
/// address is not on it) was explained as "is something between client and server dropping
/// new connections?". With a key its greeting proves it is the client's, and the test ends
/// at once naming `--allow` and the address; without one (where anyone who read the cookie
/// could have sent it) the timeout says so among what it knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_connection_refused_by_allow_is_named_to_the_client() {
    for psk in [Some(key("allowed")), None] {
        let server = TestServer::with_config(ServerConfig {
            allow: vec!["127.0.0.1/32".parse().unwrap()],
            psk: psk.clone(),
            limits: Limits {
                handshake_timeout: Duration::from_secs(2),
                ..Limits::default()
            },
            ..ServerConfig::default()
        })
        .await;
        let mut c = server.config();
        c.psk = psk.clone();
        c.flow_binds = vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()];
        tp(&mut c).streams = NonZeroU16::new(2).unwrap();
        let started = Instant::now();
        let e = run(&c).await.unwrap_err().to_string();
        assert!(e.contains("--allow"), "{e}");
        assert!(e.contains("127.0.0.2"), "{e}");
        if psk.is_some() {
            assert!(e.contains("not in its --allow list"), "{e}");
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{:?}",
                started.elapsed()
            );
        } else {
            assert!(e.contains("only 1 of 2 data connections arrived"), "{e}");
        }
        server.stop().await;
    }
}
