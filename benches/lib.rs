//! Benchmarks live in this package's `[[bench]]` targets: `compare` runs xbench beside the
//! tools a user would pick instead (iperf3, sockperf, qperf), `rr_flows` measures memory and
//! CPU per transaction from 1 to 16,384 request/response flows, `hot_paths` times the code on
//! xbench's per-byte and per-transaction paths (criterion, wall clock, informational), and
//! `instructions` counts the instructions of those paths under valgrind (Gungraun), which
//! `scripts/bench-instructions` checks against `instructions-baseline.json` with the
//! `instructions-check` binary. The library holds what the process-level benches share
//! ([`harness`]); Cargo also needs a library target to hang benches on.

pub mod harness;
