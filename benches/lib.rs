//! Benchmarks live in this package's `[[bench]]` targets: `compare` runs xbench beside the
//! tools a user would pick instead (iperf3, sockperf, qperf), `hot_paths` times the code on
//! xbench's per-byte and per-transaction paths (criterion, wall clock, informational), and
//! `instructions` counts the instructions of those paths under valgrind (Gungraun), which
//! `scripts/bench-instructions` checks against `instructions-baseline.json` with the
//! `instructions-check` binary. This library target is empty; it exists because Cargo needs
//! one to hang benches on.
