//! The embedding API against real loopback tests: builders refuse what the CLI refuses, naming
//! the field; the blocking front runs a test and refuses to run inside a runtime; the headline
//! accessors read the figures the report holds; `Display` shows them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use xbench::config::SpecError;
use xbench::{LocalServer, StreamDirection, Test};

#[track_caller]
fn refused(r: Result<xbench::TestSpec, SpecError>, field: &str, reason: &str) {
    let e = r.expect_err("must be refused");
    assert_eq!(e.field.flag(), field, "{e}");
    assert!(e.reason.contains(reason), "{e}");
    assert!(e.to_string().starts_with(&format!("{field}: ")), "{e}");
}

#[test]
fn every_refused_throughput_value_names_its_field() {
    let t = Test::throughput;
    refused(t().streams(0).build(), "-P", "must be at least 1");
    refused(t().streams(1025).build(), "-P", "at most 1024 streams");
    refused(t().streams(70_000).build(), "-P", "at most 1024 streams");
    refused(t().duration(Duration::ZERO).build(), "-t", "greater than 0");
    refused(t().bytes(0).build(), "-n", "greater than 0");
    refused(
        t().interval(Duration::from_millis(50)).build(),
        "-i",
        "at least 0.1",
    );
    refused(t().block_len(0).build(), "-l", "greater than 0");
    refused(
        t().block_len((64 << 20) + 1).build(),
        "-l",
        "at most 64 MiB",
    );
    refused(t().mss(87).build(), "-M", "between 88 and 65495");
    refused(t().window(0).build(), "-w", "greater than 0");
    // Bounds only the shared check knows: the same words as from the server.
    refused(t().window(1000).build(), "-w", "between 1K and 1G");
    refused(t().bitrate(100).build(), "-b", "at least 8 kbit/s");
    refused(
        t().congestion("../x").build(),
        "-C",
        "not a congestion control",
    );
    // The first refusal wins; a later good value does not hide it.
    refused(t().streams(0).streams(4).build(), "-P", "at least 1");
}

#[test]
fn every_refused_latency_value_names_its_field() {
    let l = Test::latency;
    refused(l().flows(0).build(), "--flows", "between 1 and 65536");
    refused(l().flows(65537).build(), "--flows", "between 1 and 65536");
    l().flows(65536)
        .build()
        .expect("65,536 flows: ids 0..=65,535");
    refused(l().sizes(0, 1).build(), "-r", "greater than 0");
    refused(l().sizes(1, (16 << 20) + 1).build(), "-r", "16 MiB maximum");
    refused(l().burst(0).build(), "--burst", "between 1 and 1024");
    refused(l().rate(0.0).build(), "--rate", "above 0");
    refused(l().rate(f64::NAN).build(), "--rate", "above 0");
    refused(l().rate(2e7).build(), "--rate", "at most");
    // Combinations: one value is fine alone, not with the other.
    refused(
        l().connect_per_transaction().burst(2).build(),
        "--burst",
        "one transaction per connection",
    );
    refused(
        l().duration(Duration::from_secs(5)).rate(0.1).build(),
        "--rate",
        "out of range",
    );
}

#[test]
fn a_built_spec_is_what_was_asked() {
    let spec = Test::throughput()
        .streams(4)
        .duration(Duration::from_secs(5))
        .reverse()
        .interval(Duration::ZERO)
        .build()
        .unwrap();
    let tp = spec.as_throughput().unwrap();
    assert_eq!(tp.streams.get(), 4);
    assert_eq!(tp.direction, xbench::Direction::ServerToClient);
    assert_eq!(
        spec.end,
        xbench::EndCondition::Duration(Duration::from_secs(5))
    );
    assert_eq!(spec.interval, None);
    let spec = Test::latency()
        .flows(8)
        .sizes(64, 1024)
        .burst(2)
        .rate(100.0)
        .build()
        .unwrap();
    let rr = spec.as_rr().unwrap();
    assert_eq!(
        (
            rr.flows.get(),
            rr.request_len.get(),
            rr.response_len.get(),
            rr.burst.get()
        ),
        (8, 64, 1024, 2)
    );
    assert_eq!(rr.rate_per_flow, Some(100.0));
}

/// `--rr -u` through the builder: sizes default to the header, the timeout implies UDP, and a
/// loopback run loses nothing and says so.
#[test]
fn a_udp_latency_test_builds_and_runs_locally() {
    let spec = Test::latency().udp().build().unwrap();
    let rr = spec.as_rr().unwrap();
    assert_eq!((rr.request_len.get(), rr.response_len.get()), (24, 24));
    let spec = Test::latency()
        .sizes(64, 1000)
        .rr_timeout(Duration::from_millis(250))
        .duration(Duration::from_millis(500))
        .build()
        .unwrap();
    let rr = spec.as_rr().unwrap();
    assert_eq!(rr.udp.map(|u| u.timeout), Some(Duration::from_millis(250)));
    assert_eq!(rr.request_len.get(), 64);
    let err = Test::latency().udp().sizes(1, 1).build().unwrap_err();
    assert_eq!(err.field.flag(), "-r");
    let report = xbench::blocking::run_local(spec).unwrap();
    assert!(report.completed(), "{:?}", report.outcome);
    let u = report.rr.as_ref().unwrap().summary.udp.clone().unwrap();
    assert_eq!(u.lost, 0, "{u:?}");
    assert!(
        report.to_string().contains(", 0 lost (0.000 %)"),
        "{report}"
    );
}

#[test]
fn blocking_run_local_measures_and_displays_the_rate() {
    let spec = Test::throughput()
        .streams(2)
        .bidir()
        .duration(Duration::from_millis(700))
        .build()
        .unwrap();
    let report = xbench::blocking::run_local(spec).unwrap();
    assert!(report.completed(), "{:?}", report.outcome);
    for (dir, d) in [
        (
            StreamDirection::ClientToServer,
            &report.summary.directions[0],
        ),
        (
            StreamDirection::ServerToClient,
            &report.summary.directions[1],
        ),
    ] {
        assert_eq!(d.direction, dir);
        let rate = report.receiver_bits_per_second(dir).unwrap();
        assert_eq!(rate, d.receiver.unwrap().bits_per_second);
        assert!(rate > 0.0);
        assert_eq!(report.retransmits(dir), Some(d.retransmits));
    }
    assert_eq!(report.latency_percentile(99.0), None, "a throughput test");
    assert_eq!(report.transactions_per_second(), None);
    let shown = report.to_string();
    let up = xbench::units::format_bits_per_second(
        report
            .receiver_bits_per_second(StreamDirection::ClientToServer)
            .unwrap(),
    );
    assert!(
        shown.contains(&format!("client→server: {up} received")),
        "{shown}"
    );
    assert!(shown.contains("server→client: "), "{shown}");
    assert_eq!(shown.lines().count(), 2, "{shown}");
}

#[test]
fn blocking_run_against_a_server_in_another_runtime() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(LocalServer::start(None)).unwrap();
    let spec = Test::latency()
        .flows(2)
        .duration(Duration::from_millis(700))
        .build()
        .unwrap();
    let config = server.client_config(spec, None);
    assert_eq!(config.port, server.port());
    assert_eq!(server.addr().port(), server.port());
    let report = xbench::blocking::run(&config).unwrap();
    rt.block_on(server.stop()).unwrap();

    let summary = &report.rr.as_ref().unwrap().summary;
    assert_eq!(
        report.transactions_per_second(),
        Some(summary.transactions_per_second)
    );
    assert!(summary.transactions > 0);
    let stats = summary.latency.as_ref().unwrap();
    let p = |q| report.latency_percentile(q).unwrap().as_nanos() as f64 / 1e3;
    // The accessor reads the same merged histogram as the report's own figures.
    assert!(
        (p(50.0) - stats.p50_us).abs() < 1.0,
        "{} {}",
        p(50.0),
        stats.p50_us
    );
    assert!(
        (p(99.0) - stats.p99_us).abs() < 1.0,
        "{} {}",
        p(99.0),
        stats.p99_us
    );
    assert!(p(0.0) <= p(50.0) && p(50.0) <= p(99.0) && p(99.0) <= p(100.0));
    let shown = report.to_string();
    assert!(shown.starts_with("request/response: "), "{shown}");
    assert!(shown.contains(" transactions/s, p50 "), "{shown}");
    assert!(
        shown.contains(&format!("p99 {:.1} µs", stats.p99_us)),
        "{shown}"
    );
}

#[tokio::test]
async fn blocking_inside_a_runtime_is_an_error_not_a_panic() {
    let e = xbench::blocking::run_local(Test::throughput().build().unwrap()).unwrap_err();
    assert!(e.to_string().contains("inside a tokio runtime"), "{e}");
    let e = xbench::blocking::run(&xbench::ClientConfig::new("127.0.0.1")).unwrap_err();
    assert!(
        e.to_string()
            .contains("xbench::blocking::run was called inside"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_local_server_refuses_connections() {
    let server = LocalServer::start(None).await.unwrap();
    let config = server.client_config(Test::throughput().build().unwrap(), None);
    server.stop().await.unwrap();
    let e = xbench::run(&config).await.unwrap_err();
    assert!(matches!(e, xbench::Error::Connect { .. }), "{e}");
}

#[test]
fn server_limits_are_checked_as_the_cli_checks_them() {
    use xbench::{Limits, ServerConfig};
    ServerConfig::default().check().unwrap();
    let check = |l: Limits| l.check().unwrap_err();
    let e = check(Limits {
        max_flows: 100,
        max_handshakes: 199,
        ..Limits::default()
    });
    assert_eq!(e.field.flag(), "--max-handshakes");
    assert_eq!(
        e.reason,
        "199 gives one client address 99 connections in their handshake (--client-share 50%), \
         fewer than a client opens at once (100: --max-flows or a client's default \
         --max-connecting, 512, whichever is fewer); such a client's connections would be \
         turned away as silent ones: give at least 200"
    );
    // 65,536 flows: a paced client holds at most 512 handshake slots.
    let e = check(Limits {
        max_flows: 65_536,
        max_handshakes: 1023,
        ..Limits::default()
    });
    assert!(
        e.reason.starts_with("1023 gives one client address 511 "),
        "{}",
        e.reason
    );
    Limits {
        max_flows: 65_536,
        max_handshakes: 1024,
        ..Limits::default()
    }
    .check()
    .unwrap();
    Limits {
        max_flows: 100,
        max_handshakes: 200,
        ..Limits::default()
    }
    .check()
    .unwrap();
    // The server's defaults from its open-file limit: as many flows as one client address's
    // half of the descriptors tests may use holds (its control connection and 3 a worker
    // thread, one a core, beside them), the handshakes' half of what is left.
    let cores = std::thread::available_parallelism().unwrap().get() as u32;
    for (files, flows, handshakes) in [
        // 20,000 - 256 for the server - 1,024 kept for handshakes, halved.
        (20_000, 9_360 - 1 - 3 * cores, 8192),
        (1_048_576, 65_536, 8192),
        // 4,096 - 256 - a quarter of the rest kept for handshakes, halved.
        (4096, 1440 - 1 - 3 * cores, 1920),
        (1024, 192, 384),
        (0, 1, 2),
    ] {
        let l = Limits::for_open_files(files);
        assert_eq!(
            (l.max_flows, l.max_handshakes, l.open_files),
            (flows, handshakes, Some(files)),
            "{files}"
        );
        l.check().unwrap();
    }
    let e = check(Limits {
        client_share: 0,
        ..Limits::default()
    });
    assert_eq!(e.field.flag(), "--client-share");
    // With all of the handshakes for one address, a client's burst needs no second one.
    Limits {
        max_flows: 100,
        max_handshakes: 100,
        client_share: 100,
        ..Limits::default()
    }
    .check()
    .unwrap();
    // More than a client may ask for is a limit that cannot bind: a mistake, named.
    let e = check(Limits {
        max_flows: 65_537,
        max_handshakes: 1024,
        ..Limits::default()
    });
    assert_eq!(
        (e.field.flag(), e.reason.as_str()),
        (
            "--max-flows",
            "at most 65536 (the most flows a client may ask for)"
        )
    );
    let e = check(Limits {
        max_tests: 0,
        ..Limits::default()
    });
    assert_eq!(
        (e.field.flag(), e.reason.as_str()),
        ("--max-tests", "must be at least 1")
    );
    let e = check(Limits {
        max_duration: Duration::from_secs(8 * 24 * 3600),
        ..Limits::default()
    });
    assert_eq!(
        (e.field.flag(), e.reason.as_str()),
        ("--max-duration", "at most 604800 s (a week)")
    );
    let e = check(Limits {
        max_block_len: 65 << 20,
        ..Limits::default()
    });
    assert_eq!(
        (e.field.flag(), e.reason.as_str()),
        ("--max-block-len", "at most 64 MiB")
    );
}

/// `--local` with more flows than a standalone server's default of old (4,096): the in-process
/// server takes any `--flows`, the process's descriptors being the bound, which the CLI checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_server_takes_more_flows_than_4096() {
    let flows: u32 = 4097;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    assert!(
        lim.rlim_cur >= u64::from(2 * flows + 256),
        "this test needs {} open files; the hard limit is {}",
        2 * flows + 256,
        lim.rlim_cur
    );
    let server = LocalServer::start(None).await.unwrap();
    let spec = Test::latency()
        .flows(flows)
        .duration(Duration::from_millis(500))
        .build()
        .unwrap();
    let report = xbench::run(&server.client_config(spec, None))
        .await
        .unwrap();
    server.stop().await.unwrap();
    let setup = report.rr.as_ref().and_then(|r| r.setup).expect("setup");
    assert_eq!(setup.connected, u64::from(flows), "{setup:?}");
}
