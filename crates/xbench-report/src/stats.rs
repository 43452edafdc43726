//! Summary statistics of repeated measurements: mean, sample standard deviation, extremes, the
//! coefficient of variation and a Student-t 95 % confidence interval of the mean.
//!
//! For small samples (a sweep cell typically has 3 to 15 runs) the normal 1.96 would make the
//! interval far too narrow, so the critical value comes from a t table by degrees of freedom.
//! The table is 37 numbers; a statistics crate would bring a dependency tree for one lookup.
//! This module computes; it does not decide which runs belong together (see `table`).

use serde::Serialize;

/// Statistics of one metric over the runs of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator); `None` for a single value.
    pub stddev: Option<f64>,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Lower end of the 95 % confidence interval of the mean (Student t); `None` for n = 1.
    pub ci95_low: Option<f64>,
    /// Upper end of the 95 % confidence interval of the mean.
    pub ci95_high: Option<f64>,
    /// Coefficient of variation: stddev ÷ mean, as a fraction (0.05 is 5 %). `None` for n = 1
    /// or a zero mean.
    pub cv: Option<f64>,
}

impl Stats {
    /// Statistics of `values`; `None` when there are none, one is not finite, or they are too
    /// large to sum (loaded runs never are: `run::check_figures` refuses such figures).
    pub fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // Two passes: the mean first, then squared deviations from it, which stays accurate
        // for large values with a small spread (10 Gbit/s ± 1 Mbit/s).
        let stddev = (n > 1).then(|| {
            let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        // Finite inputs can still sum past f64::MAX (two of 1.7e308): no mean, no statistics.
        if !mean.is_finite() || stddev.is_some_and(|sd| !sd.is_finite()) {
            return None;
        }
        let half = stddev.and_then(|sd| Some(t_critical_95(n - 1)? * sd / (n as f64).sqrt()));
        Some(Stats {
            n,
            mean,
            stddev,
            min,
            max,
            ci95_low: half.map(|h| mean - h),
            ci95_high: half.map(|h| mean + h),
            cv: stddev.filter(|_| mean != 0.0).map(|sd| sd / mean.abs()),
        })
    }

    /// Half the width of the 95 % confidence interval.
    pub fn ci95_half_width(&self) -> Option<f64> {
        Some((self.ci95_high? - self.ci95_low?) / 2.0)
    }

    /// The same statistics in another unit: every figure multiplied by `factor` (> 0).
    pub fn scaled(&self, factor: f64) -> Stats {
        let s = |v: f64| v * factor;
        Stats {
            n: self.n,
            mean: s(self.mean),
            stddev: self.stddev.map(s),
            min: s(self.min),
            max: s(self.max),
            ci95_low: self.ci95_low.map(s),
            ci95_high: self.ci95_high.map(s),
            cv: self.cv,
        }
    }
}

/// Two-sided 95 % critical values of Student's t (the 0.975 quantile), degrees of freedom
/// 1 to 30, then 40, 50, 60, 80, 100, 120.
const T_TABLE: [(usize, f64); 36] = [
    (1, 12.7062),
    (2, 4.3027),
    (3, 3.1824),
    (4, 2.7764),
    (5, 2.5706),
    (6, 2.4469),
    (7, 2.3646),
    (8, 2.3060),
    (9, 2.2622),
    (10, 2.2281),
    (11, 2.2010),
    (12, 2.1788),
    (13, 2.1604),
    (14, 2.1448),
    (15, 2.1314),
    (16, 2.1199),
    (17, 2.1098),
    (18, 2.1009),
    (19, 2.0930),
    (20, 2.0860),
    (21, 2.0796),
    (22, 2.0739),
    (23, 2.0687),
    (24, 2.0639),
    (25, 2.0595),
    (26, 2.0555),
    (27, 2.0518),
    (28, 2.0484),
    (29, 2.0452),
    (30, 2.0423),
    (40, 2.0211),
    (50, 2.0086),
    (60, 2.0003),
    (80, 1.9901),
    (100, 1.9840),
    (120, 1.9799),
];

/// The normal distribution's 0.975 quantile, t's limit as the degrees of freedom grow.
const Z_975: f64 = 1.959_964;

/// The 0.975 quantile of Student's t with `df` degrees of freedom; `None` for 0.
///
/// Exact (to 4 decimals) up to 30 and at the tabulated points above; in between, linear in
/// 1/df, which is accurate to better than 0.001 there.
pub fn t_critical_95(df: usize) -> Option<f64> {
    if df == 0 {
        return None;
    }
    let mut prev: Option<(usize, f64)> = None;
    for &(d, t) in &T_TABLE {
        if d == df {
            return Some(t);
        }
        if d > df {
            let (d0, t0) = prev?;
            return Some(interpolate(df, (d0, t0), (d, t)));
        }
        prev = Some((d, t));
    }
    // Past 120: between the last entry and the normal limit (1/df = 0).
    let (d0, t0) = T_TABLE[T_TABLE.len() - 1];
    let (x0, x) = (1.0 / d0 as f64, 1.0 / df as f64);
    Some(Z_975 + (t0 - Z_975) * x / x0)
}

fn interpolate(df: usize, (d0, t0): (usize, f64), (d1, t1): (usize, f64)) -> f64 {
    let (x, x0, x1) = (1.0 / df as f64, 1.0 / d0 as f64, 1.0 / d1 as f64);
    t1 + (t0 - t1) * (x - x1) / (x0 - x1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b}");
    }

    #[test]
    fn two_values() {
        // mean 11; deviations ±1, so s² = 2/1, s = √2; half-width = 12.7062 · √2 / √2.
        let s = Stats::of(&[10.0, 12.0]).unwrap();
        assert_eq!(s.n, 2);
        close(s.mean, 11.0, 1e-12);
        close(s.stddev.unwrap(), 2f64.sqrt(), 1e-12);
        close(s.ci95_half_width().unwrap(), 12.7062, 1e-9);
        close(s.ci95_low.unwrap(), 11.0 - 12.7062, 1e-9);
        close(s.cv.unwrap(), 2f64.sqrt() / 11.0, 1e-12);
        assert_eq!((s.min, s.max), (10.0, 12.0));
    }

    #[test]
    fn three_values() {
        // mean 5; deviations −3, −1, 4: s² = 26/2 = 13; half = 4.3027 · √13 / √3 = 8.95679.
        let s = Stats::of(&[2.0, 4.0, 9.0]).unwrap();
        close(s.mean, 5.0, 1e-12);
        close(s.stddev.unwrap(), 13f64.sqrt(), 1e-12);
        close(s.ci95_half_width().unwrap(), 8.956_79, 1e-5);
    }

    #[test]
    fn five_values() {
        // 1..5: mean 3, s² = 10/4 = 2.5; half = 2.7764 · 1.581139 / 2.236068 = 1.963211.
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        close(s.mean, 3.0, 1e-12);
        close(s.stddev.unwrap(), 2.5f64.sqrt(), 1e-12);
        close(s.ci95_half_width().unwrap(), 1.963_211, 1e-6);
        close(s.cv.unwrap(), 2.5f64.sqrt() / 3.0, 1e-12);
    }

    #[test]
    fn fifteen_values() {
        // 1..15: mean 8, s² = n(n+1)/12 = 20; half = 2.1448 · √20 / √15 = 2.476602.
        let v: Vec<f64> = (1..=15).map(f64::from).collect();
        let s = Stats::of(&v).unwrap();
        close(s.mean, 8.0, 1e-12);
        close(s.stddev.unwrap(), 20f64.sqrt(), 1e-12);
        close(s.ci95_half_width().unwrap(), 2.476_602, 1e-6);
        assert_eq!((s.min, s.max), (1.0, 15.0));
    }

    #[test]
    fn one_value_has_no_spread() {
        let s = Stats::of(&[7.0]).unwrap();
        assert_eq!(s.mean, 7.0);
        assert_eq!((s.stddev, s.ci95_low, s.cv), (None, None, None));
        assert!(Stats::of(&[]).is_none());
        assert!(Stats::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn large_values_with_small_spread_keep_their_precision() {
        let s = Stats::of(&[1e10 + 1.0, 1e10 - 1.0, 1e10 + 1.0, 1e10 - 1.0]).unwrap();
        close(s.stddev.unwrap(), (4.0f64 / 3.0).sqrt(), 1e-6);
    }

    #[test]
    fn t_table_lookup_and_interpolation() {
        assert_eq!(t_critical_95(0), None);
        assert_eq!(t_critical_95(1), Some(12.7062));
        assert_eq!(t_critical_95(14), Some(2.1448));
        // Between tabulated points: t(45) = 2.0141, t(70) = 1.9944, t(200) = 1.9719.
        close(t_critical_95(45).unwrap(), 2.0141, 1e-3);
        close(t_critical_95(70).unwrap(), 1.9944, 1e-3);
        close(t_critical_95(200).unwrap(), 1.9719, 1e-3);
        close(t_critical_95(1_000_000).unwrap(), 1.96, 1e-3);
        // Monotone decreasing.
        let all: Vec<f64> = (1..300).map(|d| t_critical_95(d).unwrap()).collect();
        assert!(all.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn scaling_keeps_the_shape() {
        let s = Stats::of(&[1e6, 2e6, 3e6]).unwrap().scaled(1e-6);
        close(s.mean, 2.0, 1e-12);
        close(s.stddev.unwrap(), 1.0, 1e-12);
        close(s.cv.unwrap(), 0.5, 1e-12);
    }

    #[test]
    fn values_too_large_to_sum_give_no_statistics_rather_than_inf() {
        assert_eq!(Stats::of(&[1.7e308, 1.7e308]), None);
        assert_eq!(Stats::of(&[f64::NAN]), None);
        assert!(Stats::of(&[1e15, 1e15, 1e15]).is_some());
    }
}
