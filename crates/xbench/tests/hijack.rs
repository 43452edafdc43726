//! The attack of issue 14, as tests: a TCP proxy on the path between a client and a server
//! reads the test's cookie off the control connection (it crosses in the clear) and uses it
//! to attach connections of its own to the victim's test — first (a hijack), later (a copy of
//! the victim's own greeting), or inside a `--crr` flow (injected transactions).
//!
//! With a pre-shared key every such connection must be refused and the victim's figures stay
//! its own; without one the victim must fail loudly, never exit with someone else's bytes
//! counted as its own.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::net::SocketAddr;
use std::num::{NonZeroU16, NonZeroU32};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use xbench::auth::Psk;
use xbench::config::Direction;
use xbench::proto::{Channel, Cookie, DATA_GREETING_LEN, DataHello, Preamble};
use xbench::report::{Outcome, TestReport};
use xbench::{ClientConfig, EndCondition, Error, ServerConfig, TestSpec, Workload};

/// What the proxy does with the cookie it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    /// Before the victim sees `Accepted`, connect as stream 0 and send as fast as possible.
    HijackSending,
    /// Before the victim sees `Accepted`, connect as stream 0 and read what the server sends.
    HijackReading,
    /// Once the victim's data connections are up, replay the greeting of its stream 0.
    LateCopy,
    /// While the victim's `--crr` test runs, run transactions of our own on its flow 0, with
    /// made-up greetings and with copies of the victim's.
    CrrInject,
}

/// A transparent TCP proxy to `server` that carries out `attack` once it sees a cookie.
struct Proxy {
    addr: SocketAddr,
    /// Bytes the attacker's connections moved, and transactions it completed.
    moved: Arc<Mutex<u64>>,
}

impl Proxy {
    async fn start(server: SocketAddr, attack: Attack) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let greetings = Arc::new(Mutex::new(Vec::new()));
        let moved = Arc::new(Mutex::new(0u64));
        let (g, m) = (Arc::clone(&greetings), Arc::clone(&moved));
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(upstream) = TcpStream::connect(server).await else {
                    return;
                };
                tokio::spawn(pump(
                    client,
                    upstream,
                    server,
                    attack,
                    Arc::clone(&g),
                    Arc::clone(&m),
                ));
            }
        });
        Proxy { addr, moved }
    }

    fn moved(&self) -> u64 {
        *self.moved.lock().unwrap()
    }
}

/// Carries one connection both ways, watching the server's side for the cookie.
async fn pump(
    client: TcpStream,
    upstream: TcpStream,
    server: SocketAddr,
    attack: Attack,
    greetings: Arc<Mutex<Vec<[u8; DATA_GREETING_LEN]>>>,
    moved: Arc<Mutex<u64>>,
) {
    let (mut crd, mut cwr) = client.into_split();
    let (mut urd, mut uwr) = upstream.into_split();
    // Client to server: note a data connection's greeting, pass everything on.
    let g = Arc::clone(&greetings);
    tokio::spawn(async move {
        let mut first = true;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = if first {
                // The greeting whole, so it can be copied.
                let mut head = [0u8; 7];
                if crd.read_exact(&mut head).await.is_err() {
                    break;
                }
                let is_data = Preamble::decode(&head).is_ok_and(|p| p.channel == Channel::Data);
                buf[..7].copy_from_slice(&head);
                let mut n = 7;
                if is_data {
                    if crd
                        .read_exact(&mut buf[7..DATA_GREETING_LEN])
                        .await
                        .is_err()
                    {
                        break;
                    }
                    let mut greeting = [0u8; DATA_GREETING_LEN];
                    greeting.copy_from_slice(&buf[..DATA_GREETING_LEN]);
                    g.lock().unwrap().push(greeting);
                    n = DATA_GREETING_LEN;
                }
                first = false;
                n
            } else {
                match crd.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                }
            };
            if uwr.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = uwr.shutdown().await;
    });
    // Server to client: act on the cookie before the victim sees it.
    let mut seen = Vec::new();
    let mut acted = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match urd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !acted && seen.len() < 64 * 1024 {
            seen.extend_from_slice(&buf[..n]);
            if let Some(cookie) = find_cookie(&seen) {
                acted = true;
                let (g, m) = (Arc::clone(&greetings), Arc::clone(&moved));
                act(attack, server, cookie, g, m).await;
            }
        }
        if cwr.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = cwr.shutdown().await;
}

/// The cookie of an `Accepted` message in what the server sent so far.
fn find_cookie(seen: &[u8]) -> Option<Cookie> {
    let text = String::from_utf8_lossy(seen);
    let at = text.find("\"cookie\":\"")? + "\"cookie\":\"".len();
    Cookie::from_hex(text.get(at..at + 32)?)
}

/// Starts the attack; returns once a hijack's connection has had time to be attached.
async fn act(
    attack: Attack,
    server: SocketAddr,
    cookie: Cookie,
    greetings: Arc<Mutex<Vec<[u8; DATA_GREETING_LEN]>>>,
    moved: Arc<Mutex<u64>>,
) {
    match attack {
        Attack::HijackSending | Attack::HijackReading => {
            let mut s = TcpStream::connect(server).await.unwrap();
            s.write_all(&DataHello::new(cookie, 0, 0, None).greeting())
                .await
                .unwrap();
            let sending = attack == Attack::HijackSending;
            tokio::spawn(async move {
                let mut buf = vec![0x42u8; 128 * 1024];
                loop {
                    let r = if sending {
                        s.write(&buf).await
                    } else {
                        s.read(&mut buf).await
                    };
                    match r {
                        Ok(0) | Err(_) => break,
                        Ok(n) => *moved.lock().unwrap() += n as u64,
                    }
                }
            });
            // Let the server attach it before the victim hears of the cookie.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Attack::LateCopy => {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(400)).await;
                let copy = greetings.lock().unwrap().first().copied();
                let Some(copy) = copy else { return };
                let mut s = TcpStream::connect(server).await.unwrap();
                let _ = s.write_all(&copy).await;
                let buf = vec![0x42u8; 128 * 1024];
                while let Ok(n) = s.write(&buf).await {
                    *moved.lock().unwrap() += n as u64;
                }
            });
        }
        Attack::CrrInject => {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                for n in 0..4000u64 {
                    // Alternate made-up greetings with copies of the victim's own.
                    // Only greetings the victim is done with: its one flow opens a
                    // connection after the last one ended, so any but the newest is a
                    // replay. A copy of the newest can race the victim's own connection to
                    // the server and win it, which no key can stop on a path the attacker
                    // sits on; the victim then fails loudly instead (README, "Locking it
                    // down"), which a test of refused replays must not depend on timing for.
                    let copy = {
                        let g = greetings.lock().unwrap();
                        let i = n as usize / 2;
                        g.get(i).copied().filter(|_| i + 1 < g.len())
                    };
                    let greeting = match copy {
                        Some(c) if n % 2 == 1 => c,
                        _ => DataHello::new(cookie, 0, 1_000_000 + n, None).greeting(),
                    };
                    if transact(server, &greeting).await {
                        *moved.lock().unwrap() += 1;
                    }
                }
            });
        }
    }
}

/// One `--crr` transaction of 64 bytes each way on a connection of our own.
async fn transact(server: SocketAddr, greeting: &[u8]) -> bool {
    let Ok(mut s) = TcpStream::connect(server).await else {
        return false;
    };
    if s.write_all(greeting).await.is_err() || s.write_all(&[7u8; 64]).await.is_err() {
        return false;
    }
    let mut resp = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut resp)).await,
        Ok(Ok(_))
    )
}

fn key() -> Psk {
    Psk::new(b"issue 14: a key both ends hold".to_vec()).unwrap()
}

async fn server(psk: Option<Psk>) -> TestServer {
    TestServer::with_config(ServerConfig {
        psk,
        ..ServerConfig::default()
    })
    .await
}

fn victim(proxy: &Proxy, psk: Option<Psk>, spec: TestSpec) -> ClientConfig {
    let mut c = ClientConfig::new("127.0.0.1");
    c.port = proxy.addr.port();
    c.psk = psk;
    c.spec = spec;
    c
}

fn throughput(streams: u16, direction: Direction) -> TestSpec {
    let mut spec = TestSpec::throughput();
    spec.end = EndCondition::Duration(Duration::from_millis(1500));
    spec.interval = None;
    if let Workload::Throughput(t) = &mut spec.workload {
        t.streams = NonZeroU16::new(streams).unwrap();
        t.direction = direction;
        // A rate the attacker's bytes would dwarf.
        t.bitrate = Some(200_000_000);
    }
    spec
}

fn crr() -> TestSpec {
    let mut spec = TestSpec::request_response();
    spec.end = EndCondition::Duration(Duration::from_secs(2));
    spec.interval = None;
    if let Workload::RequestResponse(r) = &mut spec.workload {
        r.connect_per_transaction = true;
        r.request_len = NonZeroU32::new(64).unwrap();
        r.response_len = NonZeroU32::new(64).unwrap();
        r.flows = xbench::config::FlowCount::new(1).unwrap();
    }
    spec
}

async fn run(config: &ClientConfig) -> Result<TestReport, Error> {
    tokio::time::timeout(
        Duration::from_secs(30),
        xbench::client::run(config, &mut |_| {}, std::future::pending()),
    )
    .await
    .expect("the victim's test ends")
}

/// The victim's own figures: completed, no stream reads more than its sender wrote, and
/// every byte its senders wrote reached its receivers, inside the window or after it.
///
/// The second check is exact rather than "about what was sent": on a loaded machine the
/// proxy can hold a tenth of the bytes past the end mark, where they are counted apart
/// (`after_end`), and a stream an attacker took over would break the sum either way.
fn untouched(r: &TestReport) {
    assert_eq!(r.outcome, Outcome::Completed, "{:?}", r.warnings);
    for s in &r.summary.directions {
        let sent = s.sender.unwrap().bytes;
        let received = s.receiver.as_ref().map_or(0, |x| x.bytes);
        assert!(received <= sent, "{received} received > {sent} sent");
        let after = &s.after_end;
        assert_eq!(
            received + after.bytes,
            sent + after.sent_bytes,
            "{received} + {} received after the end, of {sent} + {} sent",
            after.bytes,
            after.sent_bytes
        );
        assert!(received > 0, "the victim's receiver read nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_key_a_hijacked_stream_is_refused_and_the_victim_measures_its_own_bytes() {
    for (attack, direction) in [
        (Attack::HijackSending, Direction::ClientToServer),
        (Attack::HijackReading, Direction::ServerToClient),
    ] {
        let server = server(Some(key())).await;
        let proxy = Proxy::start(server.addr, attack).await;
        let r = run(&victim(&proxy, Some(key()), throughput(2, direction)))
            .await
            .unwrap();
        untouched(&r);
        if attack == Attack::HijackReading {
            // (What a refused sender wrote into its own socket buffer before the reset
            // proves nothing; `untouched` shows none of it was counted.)
            assert_eq!(proxy.moved(), 0, "the server sent the attacker data");
        }
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_key_a_hijacked_stream_fails_the_victim_loudly() {
    for (attack, direction) in [
        (Attack::HijackSending, Direction::ClientToServer),
        (Attack::HijackReading, Direction::ServerToClient),
    ] {
        let server = server(None).await;
        let proxy = Proxy::start(server.addr, attack).await;
        let e = run(&victim(&proxy, None, throughput(2, direction)))
            .await
            .expect_err("the victim must not run with a stream that is not its own");
        assert!(
            matches!(e, Error::ForeignConnection { id: 0, .. }),
            "{attack:?}: {e}"
        );
        assert!(e.to_string().contains("--psk-file"), "{e}");
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_copy_of_the_victims_greeting_never_replaces_its_stream() {
    for psk in [Some(key()), None] {
        let server = server(psk.clone()).await;
        let proxy = Proxy::start(server.addr, Attack::LateCopy).await;
        let r = run(&victim(
            &proxy,
            psk.clone(),
            throughput(1, Direction::ClientToServer),
        ))
        .await
        .unwrap();
        untouched(&r);
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_key_injected_crr_transactions_are_refused() {
    let server = server(Some(key())).await;
    let proxy = Proxy::start(server.addr, Attack::CrrInject).await;
    let r = run(&victim(&proxy, Some(key()), crr())).await.unwrap();
    assert_eq!(r.outcome, Outcome::Completed, "{:?}", r.warnings);
    assert_eq!(proxy.moved(), 0, "the attacker completed transactions");
    let rr = r.rr.unwrap();
    let server_count = rr.summary.server_transactions.unwrap();
    assert!(
        server_count <= rr.summary.total_transactions + 1,
        "server {server_count}, client {}",
        rr.summary.total_transactions
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_key_injected_crr_transactions_fail_the_victim() {
    let server = server(None).await;
    let proxy = Proxy::start(server.addr, Attack::CrrInject).await;
    let r = run(&victim(&proxy, None, crr())).await.unwrap();
    assert!(proxy.moved() > 0, "the attack never got through");
    match &r.outcome {
        Outcome::Failed { error } => {
            assert!(
                error.contains("flow 0") && error.contains("--psk-file"),
                "{error}"
            )
        }
        other => panic!("the victim exited {other:?} with injected transactions counted"),
    }
    server.stop().await;
}
