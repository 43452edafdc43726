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
