//! Benchmarks live in this package's `[[bench]]` targets: `compare` runs xbench beside the
//! tools a user would pick instead (iperf3, sockperf, qperf) and `hot_paths` times the code
//! on xbench's per-byte and per-transaction paths. This library target is empty; it exists
//! because Cargo needs one to hang benches on.
