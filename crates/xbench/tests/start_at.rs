//! `start_at` (`--start-at`, a fleet's common start): the client connects and completes its
//! handshake ahead of the instant, and its test (its data, its `started_at`) begins at the
//! instant, not before. A proxy in front of the server notes when the client connected.

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed assertion

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::TestServer;
use tokio::net::{TcpListener, TcpStream};
use xbench::report::Outcome;

/// A TCP proxy to `to` on a free loopback port; every connection's accept time is noted.
async fn proxy(to: std::net::SocketAddr) -> (u16, Arc<Mutex<Vec<SystemTime>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let noted = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            noted.lock().unwrap().push(SystemTime::now());
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (port, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_connects_ahead_and_its_test_begins_at_the_instant() {
    let server = TestServer::start().await;
    let (port, accepted) = proxy(server.addr).await;
    let mut config = server.config();
    config.port = port;
    // Inside the hold (xbench::client::START_HOLD): the client connects at once.
    let at = SystemTime::now() + Duration::from_secs(3);
    config.start_at = Some(at);
    let report = server.run(&config).await;
    assert_eq!(report.outcome, Outcome::Completed);
    let started = xbench::time::parse_rfc3339(&report.started_at).unwrap();
    // The test began at the instant (the report's time has millisecond precision).
    assert!(
        started + Duration::from_millis(1) >= at,
        "started {started:?} before the instant {at:?}"
    );
    // The control connection was open before the instant; the data connections, after.
    let accepted = accepted.lock().unwrap().clone();
    assert!(accepted.len() >= 2, "{accepted:?}");
    assert!(
        accepted[0] < at,
        "connected {:?} after the instant",
        accepted[0]
    );
    assert!(accepted[1..].iter().all(|t| *t >= at), "{accepted:?}");
    server.stop().await;
}

/// An instant further ahead than the hold: the client does not sit connected on the server
/// for longer than the hold (a server waits 10 s for the test's `Start`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_waits_before_connecting_when_the_instant_is_far() {
    let server = TestServer::start().await;
    let (port, accepted) = proxy(server.addr).await;
    let mut config = server.config();
    config.port = port;
    let ahead = xbench::client::START_HOLD + Duration::from_secs(1);
    let at = SystemTime::now() + ahead;
    config.start_at = Some(at);
    let report = server.run(&config).await;
    assert_eq!(report.outcome, Outcome::Completed);
    let accepted = accepted.lock().unwrap().clone();
    let first = accepted[0];
    let hold_from = at - xbench::client::START_HOLD;
    assert!(
        first >= hold_from,
        "connected {first:?}, before {hold_from:?}"
    );
    assert!(first < at, "connected {first:?} after the instant {at:?}");
    server.stop().await;
}
