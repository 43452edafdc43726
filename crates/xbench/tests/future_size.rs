//! The size of a client test's future: it sits on the stack of whoever polls it (a
//! `#[tokio::test]` polls it on its 2 MiB test thread, and a debug build copies it between
//! frames), so a refactor that stores one part's future twice shows here before it overflows
//! a stack. Under latency under load, moving the parts' futures into a driver doubled it
//! (35 to 77 KB), and `server_limits` overflowed its test thread.

#[test]
fn a_client_tests_future_stays_small() {
    let c = xbench::ClientConfig::new("h");
    let mut on_event = |_e: xbench::client::ClientEvent| {};
    let fut = xbench::client::run(&c, &mut on_event, std::future::pending());
    let size = std::mem::size_of_val(&fut);
    // 35.6 KB in a debug build of this commit; a part stored twice adds tens of KB.
    assert!(size <= 48 * 1024, "client::run's future takes {size} bytes");
}
