//! Responsiveness in round trips per minute, as draft-ietf-ippm-responsiveness-08 computes it
//! (its "Aggregating the Measurements" section, the TCP-only case): the foreign and the self
//! round-trip times, each a single-sided trimmed mean of its samples, turned into round trips
//! per minute and averaged.

use super::report::Responsiveness;
use crate::latency::Distribution;

/// The share of samples a trimmed mean keeps: the draft's `TMP` (95 %), the slowest 5 % left
/// out so a few outliers do not decide the figure.
pub const TRIMMED_SHARE: f64 = 0.95;

/// The mean of the fastest [`TRIMMED_SHARE`] of `d`'s samples, nanoseconds (at least one
/// sample kept); `None` without samples. Each sample counts as its histogram bucket's middle,
/// within the histogram's 0.1 %.
pub fn trimmed_mean_ns(d: &Distribution) -> Option<f64> {
    let n = d.count();
    if n == 0 {
        return None;
    }
    let keep = ((n as f64 * TRIMMED_SHARE).floor() as u64).max(1);
    let h = d.histogram();
    let (mut taken, mut sum) = (0u64, 0f64);
    for v in h.iter_recorded() {
        if taken >= keep {
            break;
        }
        let k = v.count_at_value().min(keep - taken);
        sum += h.median_equivalent(v.value_iterated_to()) as f64 * k as f64;
        taken += k;
    }
    (taken > 0).then(|| sum / taken as f64)
}

/// The responsiveness of foreign round trips `udp_ms` (and `tcp_ms`, averaged with it: the
/// draft's `tcp_f` and `http_f`) and self round trips `self_ms` (its `http_l`), milliseconds.
pub fn responsiveness(udp_ms: f64, tcp_ms: Option<f64>, self_ms: f64) -> Responsiveness {
    let foreign_ms = match tcp_ms {
        Some(t) => (udp_ms + t) / 2.0,
        None => udp_ms,
    };
    // A round trip can never take no time; a clock that says so still gets a finite figure.
    let per_minute = |ms: f64| 60_000.0 / ms.max(1e-6);
    let foreign_rpm = per_minute(foreign_ms);
    let self_rpm = per_minute(self_ms);
    Responsiveness {
        rpm: (foreign_rpm + self_rpm) / 2.0,
        foreign_rpm,
        self_rpm,
        foreign_ms,
        udp_ms,
        tcp_ms,
        self_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Recorder;

    fn dist(samples_ms: &[u64]) -> Distribution {
        let mut r = Recorder::new();
        for &ms in samples_ms {
            r.record(ms * 1_000_000);
        }
        let mut d = Distribution::new();
        d.add_recorder(&r);
        d
    }

    #[test]
    fn the_trimmed_mean_leaves_out_the_slowest_five_percent() {
        // 95 samples of 10 ms and 5 of 1000 ms: the trim takes exactly the slow ones.
        let mut s = vec![10; 95];
        s.extend([1000; 5]);
        let tm = trimmed_mean_ns(&dist(&s)).unwrap() / 1e6;
        assert!((tm - 10.0).abs() < 0.01, "{tm}");
        // 20 samples keep 19: 1..=19 ms, mean 10 ms.
        let s: Vec<u64> = (1..=20).collect();
        let tm = trimmed_mean_ns(&dist(&s)).unwrap() / 1e6;
        assert!((tm - 10.0).abs() < 0.02, "{tm}");
        // One sample is kept whole.
        assert!((trimmed_mean_ns(&dist(&[7])).unwrap() / 1e6 - 7.0).abs() < 0.01);
        assert_eq!(trimmed_mean_ns(&Distribution::new()), None);
    }

    #[test]
    fn rpm_averages_foreign_and_self_round_trips_per_minute() {
        // 50 ms foreign → 1200 RPM, 200 ms self → 300 RPM: 750.
        let r = responsiveness(50.0, None, 200.0);
        assert!((r.rpm - 750.0).abs() < 1e-9, "{r:?}");
        assert!((r.foreign_rpm - 1200.0).abs() < 1e-9);
        // A TCP probe is averaged with the UDP one as the draft averages tcp_f and http_f.
        let r = responsiveness(40.0, Some(60.0), 50.0);
        assert!((r.foreign_ms - 50.0).abs() < 1e-9);
        assert!((r.rpm - 1200.0).abs() < 1e-9, "{r:?}");
    }
}
