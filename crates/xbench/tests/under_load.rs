//! Latency under load (`--under-load`) on loopback, against a real server in this process:
//! the parts run as one test, the phases follow each other in order, the live timeline is the
//! report's, the server takes the parts as ordinary tests (and refuses the spec whole), and a
//! server too busy for the load refuses the test before anything is measured.
//!
//! What the figures say of a real queue is tested on the lab (`xbench-cli/tests/lab_under_load.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use xbench::client::ClientEvent;
use xbench::config::{Direction, Workload};
use xbench::report::Outcome;
use xbench::under_load::{Phase, UnderLoadSpec};
use xbench::{ClientConfig, EndCondition, Limits};

use common::TestServer;

fn under_load(c: &mut ClientConfig, direction: Direction, ul: UnderLoadSpec) {
    c.spec.end = EndCondition::Duration(Duration::from_secs(1));
    c.spec.interval = Some(Duration::from_millis(250));
    if let Workload::Throughput(t) = &mut c.spec.workload {
        t.direction = direction;
        t.streams = std::num::NonZeroU16::new(2).unwrap();
        // A bounded load: loopback has no queue to fill, and a test beside others must not
        // take both cores.
        t.bitrate = Some(200_000_000);
        t.under_load = Some(ul);
    }
}

fn quick() -> UnderLoadSpec {
    UnderLoadSpec {
        idle: Duration::from_millis(600),
        probe_rate: 50.0,
        probe_timeout: Duration::from_millis(500),
        tcp_probe: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_follow_each_other_and_the_live_timeline_is_the_reports() {
    let server = TestServer::start().await;
    let mut c = server.config();
    under_load(&mut c, Direction::Bidir, quick());
    let mut rows = Vec::new();
    let mut started = 0;
    let r = xbench::client::run(
        &c,
        &mut |e| match e {
            ClientEvent::UnderLoadInterval(r) => rows.push(r),
            ClientEvent::Started { .. } => started += 1,
            _ => {}
        },
        std::future::pending(),
    )
    .await
    .unwrap();
    server.stop().await;
    assert_eq!(r.outcome, Outcome::Completed, "{:?}", r.warnings);
    assert_eq!(started, 1, "one start for the whole test");
    let ul = r.under_load.as_ref().expect("under_load figures");
    let ph = ul.phases;
    // The load waits the idle phase, runs -t, and the probes outlast it by another.
    assert!(ph.load_start_s >= 0.6, "{ph:?}");
    // The loaded phase is the bulk test's measured window: up to where its last interval
    // ended (at -t, or a little after as the clock read it).
    let last = r.intervals.last().unwrap();
    assert!(
        (ph.loaded_end_s - ph.load_start_s - last.end_s).abs() < 1e-9,
        "{ph:?} {last:?}"
    );
    assert!(ph.loaded_end_s - ph.loaded_start_s >= 1.0 - 1e-9, "{ph:?}");
    assert!(ph.idle_after_start_s >= ph.loaded_end_s, "{ph:?}");
    assert!(ph.end_s >= ph.idle_after_start_s + 0.5, "{ph:?}");
    // Every phase has probes, UDP and TCP.
    for p in [&ul.udp, ul.tcp.as_ref().unwrap()] {
        for (name, l) in [
            ("idle", &p.idle),
            ("loaded", &p.loaded),
            ("after", &p.idle_after),
        ] {
            let lat = l.latency.unwrap_or_else(|| panic!("{name}: no samples"));
            assert!(lat.count >= 10, "{name}: {lat:?}");
            assert!(!l.histogram.is_empty(), "{name}");
        }
        assert!(p.increase.is_some());
    }
    // Both directions loaded, their streams' RTT sampled, and a responsiveness figure.
    assert_eq!(r.summary.directions.len(), 2);
    // Every measured interval's sending streams, the last one included.
    let measured: Vec<_> = r.intervals.iter().filter(|iv| !iv.omitted).collect();
    assert_eq!(measured.len(), 4, "{:?}", r.intervals);
    let sampled: usize = measured
        .iter()
        .map(|iv| {
            (iv.streams.iter())
                .filter(|s| s.tcp.is_some_and(|t| t.srtt_us > 0))
                .count()
        })
        .sum();
    assert!(sampled >= 4 * 4, "{sampled}");
    assert_eq!(ul.bulk_srtt.map(|s| s.count as usize), Some(sampled));
    let rpm = ul.responsiveness.expect("rpm");
    assert!(rpm.rpm > 0.0 && rpm.tcp_ms.is_some(), "{rpm:?}");
    // 50 probes a second for the whole test, 52 bytes each way.
    assert!(
        (40.0..=52.0).contains(&ul.probe_load.probes_per_second),
        "{:?}",
        ul.probe_load
    );
    // The timeline: contiguous rows from zero, phases in order, bulk figures only under load.
    let tl = &ul.timeline;
    assert!(tl.first().unwrap().start_s.abs() < 1e-9);
    for w in tl.windows(2) {
        assert!(
            (w[0].end_s - w[1].start_s).abs() < 1e-6,
            "{:?} then {:?}",
            w[0],
            w[1]
        );
        assert!(phase_rank(w[0].phase) <= phase_rank(w[1].phase), "{w:?}");
    }
    assert!(
        tl.iter()
            .any(|r| r.phase == Phase::Loaded && r.bulk.len() == 2)
    );
    assert!(
        tl.iter()
            .filter(|r| matches!(r.phase, Phase::Idle | Phase::IdleAfter))
            .all(|r| r.bulk.is_empty())
    );
    // What was printed live is what the report keeps.
    assert_eq!(&rows, tl);
    // The user's spec, under-load part included, is the report's.
    assert_eq!(r.spec, c.spec);
}

fn phase_rank(p: Phase) -> u8 {
    match p {
        Phase::Idle => 0,
        Phase::Ramp => 1,
        Phase::Loaded => 2,
        Phase::Drain => 3,
        Phase::IdleAfter => 4,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_take_the_load_refuses_before_anything_is_measured() {
    // Two tests per client address: the load and one probe fit, a second probe does not.
    let server = TestServer::with_limits(Limits {
        max_tests_per_client: 2,
        ..Limits::default()
    })
    .await;
    let mut c = server.config();
    under_load(&mut c, Direction::ClientToServer, quick());
    let mut events = 0;
    let started = std::time::Instant::now();
    let e = xbench::client::run(&c, &mut |_| events += 1, std::future::pending())
        .await
        .unwrap_err();
    server.stop().await;
    let msg = e.to_string();
    assert!(msg.contains("refused") || msg.contains("limit"), "{msg}");
    assert_eq!(events, 0, "nothing started");
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "before the idle phase"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refuses_the_composite_spec_whole() {
    // A peer that sends the under-load spec itself gets a refusal naming it, not a plain
    // bulk test that quietly drops the probes.
    let server = TestServer::start().await;
    let mut c = server.config();
    under_load(&mut c, Direction::ClientToServer, quick());
    let s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (mut rd, mut wr, welcome) = common::greet_on(s, "a peer").await;
    assert!(matches!(welcome, Some(xbench::proto::Message::Welcome(_))));
    xbench::proto::write_message(&mut wr, &xbench::proto::Message::Start(Box::new(c.spec)))
        .await
        .unwrap();
    match rd.next().await.unwrap() {
        Some(xbench::proto::Message::Error(e)) => {
            assert!(e.message.contains("latency-under-load"), "{}", e.message)
        }
        other => panic!("{other:?}"),
    }
    server.stop().await;
}

/// Runs an under-load test that the user stops `after` its probes started.
async fn stopped(ul: UnderLoadSpec, after: Duration) -> xbench::report::TestReport {
    let server = TestServer::start().await;
    let mut c = server.config();
    under_load(&mut c, Direction::ClientToServer, ul);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut tx = Some(tx);
    let cancel = async move {
        if rx.await.is_ok() {
            tokio::time::sleep(after).await;
        }
    };
    let r = xbench::client::run(
        &c,
        &mut |e| {
            if matches!(e, ClientEvent::Started { .. })
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        },
        cancel,
    )
    .await
    .unwrap();
    server.stop().await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_before_the_load_the_idle_probes_are_still_reported() {
    // Stopped 0.3 s into a 3 s idle phase: the load never began.
    let ul = UnderLoadSpec {
        idle: Duration::from_secs(3),
        ..quick()
    };
    let r = stopped(ul, Duration::from_millis(300)).await;
    assert_eq!(r.outcome, Outcome::Interrupted);
    assert!(r.summary.directions.is_empty(), "{:?}", r.summary);
    let ul = r.under_load.as_ref().expect("under_load figures");
    let ph = ul.phases;
    assert!(ph.end_s > 0.0 && ph.load_start_s == ph.end_s, "{ph:?}");
    assert_eq!(ph.idle_after_start_s, ph.end_s, "{ph:?}");
    // 50 probes a second for about 0.3 s, all in the idle phase.
    let idle = ul.udp.idle.latency.expect("idle probes");
    assert!(idle.count >= 3, "{idle:?}");
    assert!(ul.udp.loaded.latency.is_none() && ul.udp.idle_after.latency.is_none());
    assert!(ul.udp.increase.is_none() && ul.responsiveness.is_none());
    assert!(!ul.timeline.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_under_load_the_phases_stay_in_order() {
    // Stopped 0.4 s into a 1 s load (or wherever the machine's load puts it): whatever
    // was measured, the phases follow each other.
    let r = stopped(quick(), quick().idle + Duration::from_millis(400)).await;
    assert_eq!(r.outcome, Outcome::Interrupted);
    let ph = r.under_load.as_ref().expect("under_load figures").phases;
    let order = [
        ph.load_start_s,
        ph.loaded_start_s,
        ph.loaded_end_s,
        ph.idle_after_start_s,
        ph.end_s,
    ];
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{ph:?}");
}
