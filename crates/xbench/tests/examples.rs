//! The examples in `examples/`, run as CI runs tests: each example's source is compiled here
//! as a module and its work function called against an in-process server, so an example that
//! stops working fails the build, not a reader.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

#[allow(dead_code)]
#[path = "../examples/four_streams.rs"]
mod four_streams;
#[allow(dead_code)]
#[path = "../examples/latency_check.rs"]
mod latency_check;
#[allow(dead_code)]
#[path = "../examples/sweep_table.rs"]
mod sweep_table;

#[test]
fn four_streams_runs() {
    four_streams::main().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_check_measures_a_p99_that_a_limit_can_fail() {
    let p99 = latency_check::p99(None, None, Duration::from_millis(700))
        .await
        .unwrap();
    assert!(p99 > Duration::ZERO);
    // Loopback is under 1 s however loaded the machine is; nothing is under 1 ns.
    assert!(
        latency_check::within(p99, Duration::from_secs(1)),
        "{p99:?}"
    );
    assert!(
        !latency_check::within(p99, Duration::from_nanos(1)),
        "{p99:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_table_has_a_row_per_stream_count() {
    let table = sweep_table::sweep(&[1, 2], Duration::from_millis(500))
        .await
        .unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert!(
        rows[0].contains("streams") && rows[0].contains("Gbit/s"),
        "{table}"
    );
    for (row, n) in rows[1..].iter().zip(["1", "2"]) {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[0], n, "{table}");
        assert!(cells[1].parse::<f64>().unwrap() > 0.0, "{table}");
    }
}
