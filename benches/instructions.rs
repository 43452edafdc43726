//! Instruction counts of xbench's CPU-bound hot paths, measured by Gungraun under valgrind's
//! callgrind: recording latency samples, merging histograms, interval accounting, control
//! frame encode/decode and report (de)serialisation.
//!
//! Unlike the wall-clock benches beside it, an instruction count is the same from run to run on
//! a given toolchain, so `scripts/bench-instructions` compares it with the committed baseline
//! `benches/instructions-baseline.json` and fails when one grows by more than 5 %. Every input
//! is built outside the measured function (the `#[bench]` arguments and `setup` functions run
//! before callgrind starts counting) from fixed values and committed fixtures: no clock, no
//! random seed and no hash map iteration reaches a measured function, and inputs are handed
//! back so their drop is not counted either.
//!
//! Run: `scripts/bench-instructions` (check) or `cargo bench -p xbench-benches --bench
//! instructions` (just the figures; needs valgrind and `gungraun-runner` of the same version as
//! the `gungraun` crate).

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::hint::black_box;

use gungraun::{library_benchmark, library_benchmark_group, main};
use serde_json::json;
use xbench::latency::{Distribution, Recorder};
use xbench::proto::{ErrorCode, ErrorMsg, FrameDecoder, Message, frame};
use xbench::report::{SideInterval, SideResults, TestReport};
use xbench::summary::{self, Directions};

// ---------------------------------------------------------------------------------------------
// Latency recording and histogram merging

/// 4096 loopback-like samples (10–60 µs) and a recorder that has already seen that range, so
/// the measured part is the steady state of a request/response loop, not the histogram's
/// first growth.
fn warm_recorder() -> (Recorder, Vec<u64>) {
    let samples: Vec<u64> = (0..4096u64).map(|i| 10_000 + (i * 7919) % 50_000).collect();
    let mut r = Recorder::new();
    for &s in &samples {
        r.record(s);
    }
    (r, samples)
}

#[library_benchmark]
#[bench::samples_4096(setup = warm_recorder)]
fn record((mut r, samples): (Recorder, Vec<u64>)) -> (Recorder, Vec<u64>) {
    for &s in &samples {
        r.record(black_box(s));
    }
    (r, samples)
}

/// A thousand flows' interval recorders, 200 samples each (10–100 µs).
fn flows() -> Vec<Recorder> {
    (0..1000u64)
        .map(|f| {
            let mut r = Recorder::new();
            for i in 0..200u64 {
                r.record(10_000 + (f * 31 + i * 977) % 90_000);
            }
            r
        })
        .collect()
}

fn interval() -> Distribution {
    let mut d = Distribution::new();
    for r in &flows() {
        d.add_recorder(r);
    }
    d
}

#[library_benchmark]
#[bench::flows_1000(setup = flows)]
fn merge_flows(flows: Vec<Recorder>) -> (Distribution, Vec<Recorder>) {
    let mut d = Distribution::new();
    for r in &flows {
        d.add_recorder(black_box(r));
    }
    (d, flows)
}

fn interval_and_total() -> (Distribution, Distribution) {
    (interval(), Distribution::new())
}

#[library_benchmark]
#[bench::interval_into_total(setup = interval_and_total)]
fn merge_into_total(
    (interval, mut total): (Distribution, Distribution),
) -> (Distribution, Distribution) {
    total.add(black_box(&interval));
    (interval, total)
}

#[library_benchmark]
#[bench::of_1000_flows(setup = interval)]
fn percentiles(d: Distribution) -> Distribution {
    black_box(d.stats());
    d
}

#[library_benchmark]
#[bench::of_1000_flows(setup = interval)]
fn encode_histogram(d: Distribution) -> (Distribution, String) {
    let s = d.encode();
    (d, s)
}

library_benchmark_group!(
    name = latency;
    benchmarks = record, merge_flows, merge_into_total, percentiles, encode_histogram
);

// ---------------------------------------------------------------------------------------------
// Interval accounting: merging the two ends' views into the figures a user reads

const STREAMS: u16 = 16;

/// Stream directions of a 16-stream `--bidir` test: even ids up, odd ids down.
fn directions() -> Directions {
    (0..STREAMS)
        .map(|id| {
            let d = if id % 2 == 0 {
                "client_to_server"
            } else {
                "server_to_client"
            };
            (id, serde_json::from_value(json!(d)).unwrap())
        })
        .collect()
}

/// One end's interval: it sends the streams of its direction (with TCP state) and receives
/// the others.
fn side_interval(client: bool, index: u32) -> SideInterval {
    let streams: Vec<_> = (0..STREAMS)
        .map(|id| {
            let sends = (id % 2 == 0) == client;
            let bytes = 112_000_000 + u64::from(id) * 1_337 + u64::from(index) * 7;
            json!({
                "stream": id,
                "role": if sends { "sender" } else { "receiver" },
                "bytes": bytes,
                "tcp": sends.then(|| json!({
                    "retransmits": u64::from(id % 3),
                    "cwnd_bytes": 2_000_000 + u64::from(id) * 4_096,
                    "srtt_us": 150 + u32::from(id),
                    "rttvar_us": 40,
                    "snd_wnd_bytes": 3_000_000,
                })),
            })
        })
        .collect();
    serde_json::from_value(json!({
        "index": index,
        "start_s": f64::from(index),
        "end_s": f64::from(index) + 1.000_12,
        "omitted": false,
        "streams": streams,
    }))
    .unwrap()
}

fn side_results(client: bool) -> SideResults {
    let streams: Vec<_> = (0..STREAMS)
        .map(|id| {
            let sends = (id % 2 == 0) == client;
            let bytes = 1_120_000_000 + u64::from(id) * 13_337;
            json!({
                "stream": id,
                "role": if sends { "sender" } else { "receiver" },
                "transfer": { "bytes": bytes, "seconds": 10.000_3, "bits_per_second": bytes as f64 * 0.8 },
                "total_bytes": bytes + 90_000_000,
                "omitted_bytes": 90_000_000,
                "tcp": sends.then(|| json!({
                    "retransmits": u64::from(id % 5),
                    "rtt": { "min_us": 90, "mean_us": 151.5, "max_us": 400 },
                    "max_cwnd_bytes": 4_000_000,
                    "max_snd_wnd_bytes": 6_000_000,
                    "mean_snd_wnd_bytes": 5_500_000.0,
                    "mss": 65_483,
                    "pmtu": 65_535,
                    "min_rtt_us": 12,
                    "limits": { "busy_pct": 100.0, "rwnd_limited_pct": 3.5, "sndbuf_limited_pct": 12.0 },
                })),
                "error": null,
            })
        })
        .collect();
    serde_json::from_value(json!({
        "streams": streams,
        "cpu": { "user_s": 0.8, "system_s": 6.1 },
    }))
    .unwrap()
}

fn both_intervals() -> (Directions, SideInterval, SideInterval) {
    (
        directions(),
        side_interval(true, 3),
        side_interval(false, 3),
    )
}

fn both_results() -> (Directions, SideResults, SideResults) {
    (directions(), side_results(true), side_results(false))
}

#[library_benchmark]
#[bench::bidir_16_streams(setup = both_intervals)]
fn merge_interval(
    (dirs, client, server): (Directions, SideInterval, SideInterval),
) -> (Directions, SideInterval, SideInterval) {
    black_box(summary::merge_interval(
        black_box(&dirs),
        Some(&client),
        std::slice::from_ref(&server),
    ));
    (dirs, client, server)
}

#[library_benchmark]
#[bench::bidir_16_streams(setup = both_results)]
fn summarize(
    (dirs, client, server): (Directions, SideResults, SideResults),
) -> (Directions, SideResults, SideResults) {
    black_box(summary::summarize(
        black_box(&dirs),
        &client,
        Some(&server),
        summary::Window::Fixed(10.0),
    ));
    (dirs, client, server)
}

library_benchmark_group!(
    name = interval_accounting;
    benchmarks = merge_interval, summarize
);

// ---------------------------------------------------------------------------------------------
// Control frames

fn interval_message() -> Message {
    Message::Interval(side_interval(false, 3))
}

fn error_message() -> Message {
    ErrorMsg::message(
        ErrorCode::LimitExceeded,
        "the server is running its maximum of 64 tests",
    )
}

#[library_benchmark]
#[bench::interval_16_streams(setup = interval_message)]
#[bench::error(setup = error_message)]
fn encode_frame(msg: Message) -> (Message, Vec<u8>) {
    let bytes = frame::encode(black_box(&msg)).unwrap();
    (msg, bytes)
}

fn encoded(msg: Message) -> (FrameDecoder, Vec<u8>) {
    (FrameDecoder::new(), frame::encode(&msg).unwrap())
}

fn encoded_interval() -> (FrameDecoder, Vec<u8>) {
    encoded(interval_message())
}

fn encoded_error() -> (FrameDecoder, Vec<u8>) {
    encoded(error_message())
}

#[library_benchmark]
#[bench::interval_16_streams(setup = encoded_interval)]
#[bench::error(setup = encoded_error)]
fn decode_frame((mut decoder, bytes): (FrameDecoder, Vec<u8>)) -> (FrameDecoder, Vec<u8>, Message) {
    decoder.extend(black_box(&bytes));
    let msg = decoder.next_message().unwrap().unwrap();
    (decoder, bytes, msg)
}

library_benchmark_group!(
    name = frames;
    benchmarks = encode_frame, decode_frame
);

// ---------------------------------------------------------------------------------------------
// Reports: what `--json`, `--save` and `xbench report` write and read

const THROUGHPUT_REPORT: &str = include_str!("fixtures/throughput-report.json");
const RR_REPORT: &str = include_str!("fixtures/rr-report.json");

fn throughput_report() -> TestReport {
    serde_json::from_str(THROUGHPUT_REPORT).unwrap()
}

fn rr_report() -> TestReport {
    serde_json::from_str(RR_REPORT).unwrap()
}

#[library_benchmark]
#[bench::throughput_4_streams(setup = throughput_report)]
#[bench::rr_4_flows(setup = rr_report)]
fn serialize_report(r: TestReport) -> (TestReport, String) {
    let s = serde_json::to_string_pretty(black_box(&r)).unwrap();
    (r, s)
}

#[library_benchmark]
#[bench::throughput_4_streams(THROUGHPUT_REPORT)]
#[bench::rr_4_flows(RR_REPORT)]
fn deserialize_report(json: &str) -> TestReport {
    serde_json::from_str(black_box(json)).unwrap()
}

library_benchmark_group!(
    name = reports;
    benchmarks = serialize_report, deserialize_report
);

main!(
    library_benchmark_groups = latency,
    interval_accounting,
    frames,
    reports
);
