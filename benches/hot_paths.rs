//! The code on xbench's per-transaction and per-message paths, timed by criterion. Wall-clock
//! figures wander with the machine, so these are informational; the regression gate is the
//! instruction count of the same paths (`instructions.rs`, `scripts/bench-instructions`).
//!
//! Targets: recording one latency sample well under 20 ns (a loopback transaction takes
//! ~15 µs, so the recorder must stay a rounding error); merging a thousand flows' interval
//! histograms well under an interval's worth of time; decoding a control frame; signing and
//! checking a data connection's greeting with a session key (once per `--crr` transaction at
//! each end: it must stay a small fraction of the tens of microseconds a connection costs).

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use xbench::auth::{Nonce, Psk};
use xbench::latency::{Distribution, Recorder};
use xbench::proto::{Cookie, DataHello, ErrorCode, ErrorMsg, FrameDecoder, frame};

fn record(c: &mut Criterion) {
    let mut g = c.benchmark_group("latency");
    // A spread of loopback-like values (10–60 µs) so the histogram index math is exercised.
    let samples: Vec<u64> = (0..4096u64).map(|i| 10_000 + (i * 7919) % 50_000).collect();
    g.throughput(Throughput::Elements(samples.len() as u64));
    g.bench_function("record one sample", |b| {
        let mut r = Recorder::new();
        b.iter(|| {
            for &s in &samples {
                r.record(black_box(s));
            }
        });
    });
    g.finish();

    let mut g = c.benchmark_group("merge");
    let flows: Vec<Recorder> = (0..1000u64)
        .map(|f| {
            let mut r = Recorder::new();
            for i in 0..200u64 {
                r.record(10_000 + (f * 31 + i * 977) % 90_000);
            }
            r
        })
        .collect();
    g.throughput(Throughput::Elements(flows.len() as u64));
    g.bench_function("1000 flows' interval histograms", |b| {
        b.iter(|| {
            let mut d = Distribution::new();
            for r in &flows {
                d.add_recorder(r);
            }
            black_box(d.count())
        });
    });
    let interval: Distribution = {
        let mut d = Distribution::new();
        for r in &flows {
            d.add_recorder(r);
        }
        d
    };
    g.bench_function("an interval into the total", |b| {
        b.iter_batched(
            Distribution::new,
            |mut total| {
                total.add(&interval);
                total
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("percentiles of a merged distribution", |b| {
        b.iter(|| black_box(interval.stats()));
    });
    g.finish();
}

fn frames(c: &mut Criterion) {
    let msg = ErrorMsg::message(
        ErrorCode::LimitExceeded,
        "the server is running its maximum of 64 tests",
    );
    let bytes = frame::encode(&msg).unwrap();
    c.bench_function("decode one control frame", |b| {
        b.iter(|| {
            let mut d = FrameDecoder::new();
            d.extend(black_box(&bytes));
            black_box(d.next_message().unwrap())
        });
    });
}

fn greetings(c: &mut Criterion) {
    let psk = Psk::new(b"a benchmark key, long enough".to_vec()).unwrap();
    let key = psk.session_key(&Nonce([1; 32]), &Nonce([2; 32]));
    let cookie = Cookie([7; 16]);
    let mut counter = 0u64;
    c.bench_function("sign a data greeting (client, per --crr connection)", |b| {
        b.iter(|| {
            counter += 1;
            black_box(DataHello::new(cookie, 3, counter, Some(&key)).greeting())
        });
    });
    let hello = DataHello::new(cookie, 3, 41, Some(&key));
    c.bench_function(
        "check a data greeting (server, per --crr connection)",
        |b| {
            b.iter(|| black_box(black_box(&hello).verify(&key)));
        },
    );
}

criterion_group!(benches, record, frames, greetings);
criterion_main!(benches);
