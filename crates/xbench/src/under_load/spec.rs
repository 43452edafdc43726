//! What a latency-under-load test asks for beyond its bulk streams: how long the path rests
//! before and after the load, and how the latency probes run. The bulk streams themselves are
//! the [`ThroughputSpec`] this sits in (`-P`, the direction, `-t`, `-O`, `-i`, `-w`, `-C`).

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{EndCondition, Field, MAX_BURST, SpecError, TestSpec, ThroughputSpec, secs};

/// Fewest probes a second: below one, a second of the timeline holds no sample.
pub const MIN_PROBE_RATE: f64 = 1.0;
/// Most probes a second: the responsiveness draft's `MPS` (100 probes per interval of a
/// second), so probing stays a small share of even a slow link.
pub const MAX_PROBE_RATE: f64 = 100.0;
/// Shortest idle phase.
pub const MIN_IDLE: Duration = Duration::from_millis(500);
/// Longest idle phase.
pub const MAX_IDLE: Duration = Duration::from_secs(60);
/// Shortest probe timeout: a probe must be able to outlive a real round trip.
pub const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(10);
/// Longest probe timeout (the UDP request/response test's `--rr-timeout` bound).
pub const MAX_PROBE_TIMEOUT: Duration = crate::config::MAX_RR_TIMEOUT;
/// Length of the probes' own intervals, which decide the phase each sample falls in: the
/// finest interval a test reports ([`crate::config::MIN_INTERVAL`]), so a phase boundary
/// costs at most 100 ms of samples.
pub const PROBE_INTERVAL: Duration = crate::config::MIN_INTERVAL;

/// A latency-under-load test (`--under-load up|down|both`): latency probes run through three
/// phases — the path idle, then loaded by the bulk streams of the enclosing
/// [`ThroughputSpec`] (its `direction`: up, down or both), then idle again — and the report
/// sets the loaded latency beside the idle one.
///
/// The client runs it as separate tests on the server's usual port: a UDP request/response
/// probe (its own socket, proven to the server like any `--rr -u` flow), optionally a TCP one
/// on its own connection, and the bulk test. A server never receives this spec.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UnderLoadSpec {
    /// Length of each idle phase, before and after the load (`--idle`).
    #[serde(with = "secs")]
    pub idle: Duration,
    /// UDP probes a second (`--probe-rate`), paced evenly; each is one 24-byte datagram each
    /// way, so the default 20/s is about 8 kbit/s a direction at the IP layer.
    pub probe_rate: f64,
    /// A probe unanswered this long is lost (`--probe-timeout`). Longer than the worst
    /// loaded round trip, or a deep queue's delay reads as loss.
    #[serde(with = "secs")]
    pub probe_timeout: Duration,
    /// Also probe with TCP request/response on a connection of its own (`--tcp-probe`), at
    /// the same rate.
    pub tcp_probe: bool,
}

impl Default for UnderLoadSpec {
    /// 3 s idle each side (60 probes at the default rate), 20 probes a second, a 3-second
    /// probe timeout (a 1 MB queue at 4 Mbit/s still answers in time), UDP probes only.
    fn default() -> Self {
        UnderLoadSpec {
            idle: Duration::from_secs(3),
            probe_rate: 20.0,
            probe_timeout: Duration::from_secs(3),
            tcp_probe: false,
        }
    }
}

impl UnderLoadSpec {
    /// Probes in flight a probe flow allows: enough that a probe waiting its whole timeout
    /// never holds back the next one's schedule (the rate × the timeout, and one more).
    pub fn probe_burst(&self) -> NonZeroU32 {
        let n = (self.probe_rate * self.probe_timeout.as_secs_f64()).ceil() as u32 + 1;
        NonZeroU32::new(n.min(MAX_BURST)).unwrap_or(NonZeroU32::MIN)
    }

    /// Checks the bounds, and that the enclosing test can carry a load phase: timed, TCP, with
    /// intervals (the bulk streams' RTT per interval is one of the figures).
    pub fn validate(&self, spec: &TestSpec, tp: &ThroughputSpec) -> Result<(), SpecError> {
        let err = |field, reason: String| Err(SpecError { field, reason });
        if tp.udp.is_some() {
            return err(
                Field::UnderLoad,
                "the load is TCP bulk streams; leave out -u".into(),
            );
        }
        if matches!(spec.end, EndCondition::Bytes(_)) {
            return err(
                Field::UnderLoad,
                "the load phase lasts a time (-t), not a byte count (-n)".into(),
            );
        }
        if spec.interval.is_none() {
            return err(
                Field::Interval,
                "--under-load reports its timeline per interval: give -i above 0".into(),
            );
        }
        if !(MIN_PROBE_RATE..=MAX_PROBE_RATE).contains(&self.probe_rate) {
            return err(
                Field::ProbeRate,
                format!(
                    "{} probes a second is out of range: between {MIN_PROBE_RATE} and \
                     {MAX_PROBE_RATE}",
                    self.probe_rate
                ),
            );
        }
        if !(MIN_IDLE..=MAX_IDLE).contains(&self.idle) {
            return err(
                Field::Idle,
                format!(
                    "{:?} is out of range: between {MIN_IDLE:?} and {MAX_IDLE:?}",
                    self.idle
                ),
            );
        }
        if !(MIN_PROBE_TIMEOUT..=MAX_PROBE_TIMEOUT).contains(&self.probe_timeout) {
            return err(
                Field::ProbeTimeout,
                format!(
                    "{:?} is out of range: between {MIN_PROBE_TIMEOUT:?} and \
                     {MAX_PROBE_TIMEOUT:?}",
                    self.probe_timeout
                ),
            );
        }
        // Every probe its timeout may hold must have room in flight, or probes wait on each
        // other and the figures read the wait as the path's.
        let in_flight = (self.probe_rate * self.probe_timeout.as_secs_f64()).ceil() + 1.0;
        if in_flight > f64::from(MAX_BURST) {
            return err(
                Field::ProbeTimeout,
                format!(
                    "{} probes a second for {:?} each may hold {in_flight} in flight, more than \
                     the {MAX_BURST} a flow allows: lower --probe-rate or --probe-timeout",
                    self.probe_rate, self.probe_timeout
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Workload;

    fn spec_with(ul: UnderLoadSpec) -> TestSpec {
        let mut s = TestSpec::throughput();
        if let Workload::Throughput(t) = &mut s.workload {
            t.under_load = Some(ul);
        }
        s
    }

    #[test]
    fn the_default_is_valid_and_round_trips_in_the_spec() {
        let s = spec_with(UnderLoadSpec::default());
        s.validate().unwrap();
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"under_load\":{\"idle\":3.0"), "{j}");
        assert_eq!(serde_json::from_str::<TestSpec>(&j).unwrap(), s);
        // A plain throughput spec says nothing of it, so older readers see what they did.
        let plain = serde_json::to_string(&TestSpec::throughput()).unwrap();
        assert!(!plain.contains("under_load"), "{plain}");
    }

    #[test]
    fn bounds_and_shapes_are_refused_naming_the_flag() {
        let bad = |ul: UnderLoadSpec| spec_with(ul).validate().unwrap_err().field.flag();
        let d = UnderLoadSpec::default();
        assert_eq!(
            bad(UnderLoadSpec {
                probe_rate: 0.5,
                ..d
            }),
            "--probe-rate"
        );
        assert_eq!(
            bad(UnderLoadSpec {
                probe_rate: f64::NAN,
                ..d
            }),
            "--probe-rate"
        );
        assert_eq!(
            bad(UnderLoadSpec {
                idle: Duration::from_millis(100),
                ..d
            }),
            "--idle"
        );
        assert_eq!(
            bad(UnderLoadSpec {
                probe_timeout: Duration::from_secs(61),
                ..d
            }),
            "--probe-timeout"
        );
        // 100 a second for 11 s would need 1,101 in flight: more than a flow's 1,024.
        let crowded = UnderLoadSpec {
            probe_rate: MAX_PROBE_RATE,
            probe_timeout: Duration::from_secs(11),
            ..d
        };
        assert_eq!(bad(crowded), "--probe-timeout");
        spec_with(UnderLoadSpec {
            probe_timeout: Duration::from_secs(10),
            ..crowded
        })
        .validate()
        .unwrap();
        let mut s = spec_with(d);
        s.interval = None;
        assert_eq!(s.validate().unwrap_err().field.flag(), "-i");
        let mut s = spec_with(d);
        s.end = EndCondition::Bytes(1 << 20);
        assert_eq!(s.validate().unwrap_err().field.flag(), "--under-load");
    }

    #[test]
    fn the_burst_covers_a_probe_waiting_its_whole_timeout() {
        let d = UnderLoadSpec::default();
        assert_eq!(d.probe_burst().get(), 61);
        let most = UnderLoadSpec {
            probe_rate: MAX_PROBE_RATE,
            probe_timeout: Duration::from_millis(10_230),
            ..d
        };
        spec_with(most).validate().unwrap();
        assert_eq!(most.probe_burst().get(), MAX_BURST);
    }
}
