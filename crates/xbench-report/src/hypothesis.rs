//! Two-sample significance tests over repeated runs: Welch's t-test (unequal variances) for
//! throughput-like figures, and the Mann-Whitney U rank test for latencies, whose run-to-run
//! spread is skewed and heavy-tailed.
//!
//! Each test answers one one-sided question, "is `x` smaller than `y`?", with a p-value: the
//! chance of a difference at least this large in that direction if there were none. Asking
//! "is `x` larger?" is the same test with the samples swapped. Whether a smaller value is
//! better or worse, and by how much a change may go before it counts, is decided in `compare`;
//! this module only computes.
//!
//! The t and normal CDFs come from `statrs`; the Mann-Whitney null distribution is computed
//! exactly (ties included) for the sample sizes sweeps have, and by the normal approximation
//! beyond.

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// Total sample size up to which [`mann_whitney_less`] computes the exact null distribution;
/// past it, the normal approximation is within a fraction of a percent and far cheaper.
pub const EXACT_RANK_TEST_MAX_N: usize = 100;

/// Welch's t statistic for `mean(x) − mean(y)` and its Welch–Satterthwaite degrees of freedom.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Welch {
    /// The statistic; infinite when both samples have no spread and their means differ.
    pub t: f64,
    /// Degrees of freedom (not an integer in general).
    pub df: f64,
    /// One-sided p-value of "mean of `x` < mean of `y`".
    pub p_less: f64,
}

/// One-sided Welch's t-test of "the mean of `x` is smaller than the mean of `y`"; `None` with
/// fewer than two values on either side or a value that is not finite.
///
/// Two samples with no spread at all (every run the same figure, as a hard rate cap can give)
/// have no t distribution; their means then decide alone: p = 0 when `x`'s is smaller, else 1.
pub fn welch_less(x: &[f64], y: &[f64]) -> Option<Welch> {
    if x.len() < 2 || y.len() < 2 || x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    let (mx, vx) = mean_var(x);
    let (my, vy) = mean_var(y);
    let (ax, ay) = (vx / x.len() as f64, vy / y.len() as f64);
    let se2 = ax + ay;
    let diff = mx - my;
    if se2 == 0.0 {
        let (t, p_less) = match diff.partial_cmp(&0.0) {
            Some(std::cmp::Ordering::Less) => (f64::NEG_INFINITY, 0.0),
            Some(std::cmp::Ordering::Greater) => (f64::INFINITY, 1.0),
            _ => (0.0, 1.0),
        };
        return Some(Welch {
            t,
            df: (x.len() + y.len() - 2) as f64,
            p_less,
        });
    }
    let t = diff / se2.sqrt();
    let df = se2 * se2 / (ax * ax / (x.len() - 1) as f64 + ay * ay / (y.len() - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some(Welch {
        t,
        df,
        p_less: dist.cdf(t),
    })
}

/// The Mann-Whitney U statistic of `x` against `y` and a one-sided p-value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U of `x`: pairs (xᵢ, yⱼ) with xᵢ > yⱼ, ties counting one half.
    pub u: f64,
    /// One-sided p-value of "`x` tends to be smaller than `y`".
    pub p_less: f64,
    /// Whether `p_less` is exact (permutation distribution of the ranks, ties included) or the
    /// normal approximation with tie and continuity corrections.
    pub exact: bool,
}

/// One-sided Mann-Whitney U test of "values of `x` tend to be smaller than values of `y`";
/// `None` when either side is empty or a value is not finite.
pub fn mann_whitney_less(x: &[f64], y: &[f64]) -> Option<MannWhitney> {
    if x.is_empty() || y.is_empty() || x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    let (n1, n2) = (x.len(), y.len());
    let n = n1 + n2;
    // Mid-ranks, doubled so ties (k.5) stay integers.
    let mut all: Vec<(f64, bool)> = x
        .iter()
        .map(|&v| (v, true))
        .chain(y.iter().map(|&v| (v, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut ranks2 = vec![0usize; n];
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j+1 share their mean, (i + j + 2) / 2; doubled: i + j + 2.
        for r in &mut ranks2[i..=j] {
            *r = i + j + 2;
        }
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let r1_2: usize = (0..n).filter(|&k| all[k].1).map(|k| ranks2[k]).sum();
    let u = r1_2 as f64 / 2.0 - (n1 * (n1 + 1)) as f64 / 2.0;
    if n <= EXACT_RANK_TEST_MAX_N {
        let items: Vec<usize> = ranks2;
        let p_less = exact_lower_tail(&items, n1, r1_2);
        return Some(MannWhitney {
            u,
            p_less,
            exact: true,
        });
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let mean = n1f * n2f / 2.0;
    let var = n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    let p_less = if var <= 0.0 {
        // Every value equal: no evidence either way.
        1.0
    } else {
        // Continuity correction towards the mean.
        Normal::standard().cdf((u - mean + 0.5) / var.sqrt())
    };
    Some(MannWhitney {
        u,
        p_less,
        exact: false,
    })
}

/// The smallest one-sided p-value an exact Mann-Whitney test of `n1` against `n2` values can
/// give (all of one side below all of the other, no ties): 1 / C(n1 + n2, n1). Below it, no
/// amount of difference reaches the confidence asked for; more runs are needed.
pub fn mann_whitney_min_p(n1: usize, n2: usize) -> f64 {
    let (k, n) = (n1.min(n2), n1 + n2);
    // C(n, k) as a product of ratios, in floating point: only its size matters.
    let c: f64 = (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product();
    1.0 / c
}

/// P(sum of doubled ranks of a random `k`-subset of `ranks2` ≤ `observed`): the permutation
/// distribution of the rank sum under the null hypothesis, counted subset by subset.
fn exact_lower_tail(ranks2: &[usize], k: usize, observed: usize) -> f64 {
    let max_sum: usize = ranks2.iter().sum();
    // ways[j][s]: subsets of size j with doubled rank sum s (floating point: C(100, 50) ≈ 1e29
    // overflows every integer type, and only ratios are needed).
    let mut ways = vec![vec![0.0f64; max_sum + 1]; k + 1];
    ways[0][0] = 1.0;
    for (seen, &r) in ranks2.iter().enumerate() {
        for j in (1..=k.min(seen + 1)).rev() {
            let (lower, upper) = ways.split_at_mut(j);
            let (from, to) = (&lower[j - 1], &mut upper[0]);
            for s in (r..=max_sum).rev() {
                if from[s - r] != 0.0 {
                    to[s] += from[s - r];
                }
            }
        }
    }
    let total: f64 = ways[k].iter().sum();
    let below: f64 = ways[k][..=observed.min(max_sum)].iter().sum();
    (below / total).min(1.0)
}

/// Mean and sample variance (n − 1), in two passes for precision.
fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let ss: f64 = v.iter().map(|x| (x - mean).powi(2)).sum();
    (mean, ss / (n - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b} (tolerance {tol})");
    }

    // Reference values from SciPy 1.17 (`scipy.stats.ttest_ind(x, y, equal_var=False,
    // alternative="less")`, `mannwhitneyu(x, y, alternative="less", method=…)`).

    #[test]
    fn welch_matches_scipy() {
        let w = welch_less(&[890.1, 902.3, 884.7], &[941.2, 938.5, 944.0, 939.9]).unwrap();
        close(w.t, -9.096_003_610_708_301, 1e-9);
        close(w.df, 2.203_836_633_608_841, 1e-9);
        close(w.p_less, 0.004_333_838_690_312_785, 1e-9);

        let a = [
            27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7,
            21.4,
        ];
        let b = [
            27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5,
            24.4,
        ];
        let w = welch_less(&a, &b).unwrap();
        close(w.t, -2.455_356_398_286_006, 1e-9);
        close(w.df, 24.988_529_290_231_416, 1e-9);
        close(w.p_less, 0.010_689_000_731_433_496, 1e-9);
        // The other direction is the complement.
        close(
            welch_less(&b, &a).unwrap().p_less,
            1.0 - 0.010_689_000_731_433_496,
            1e-9,
        );
    }

    #[test]
    fn welch_needs_two_values_a_side_and_handles_no_spread() {
        assert!(welch_less(&[1.0], &[2.0, 3.0]).is_none());
        assert!(welch_less(&[1.0, f64::NAN], &[2.0, 3.0]).is_none());
        // A hard cap: every run the same figure.
        assert_eq!(
            welch_less(&[90.0, 90.0], &[100.0, 100.0]).unwrap().p_less,
            0.0
        );
        assert_eq!(
            welch_less(&[100.0, 100.0], &[90.0, 90.0]).unwrap().p_less,
            1.0
        );
        assert_eq!(
            welch_less(&[100.0, 100.0], &[100.0, 100.0]).unwrap().p_less,
            1.0
        );
    }

    #[test]
    fn statrs_cdfs_match_reference_values() {
        // scipy.stats.t.cdf(-2.5, 3.7), scipy.stats.norm.cdf(-1.3)
        close(
            StudentsT::new(0.0, 1.0, 3.7).unwrap().cdf(-2.5),
            0.035_911_011_455_913_39,
            1e-10,
        );
        close(Normal::standard().cdf(-1.3), 0.096_800_484_585_610_36, 1e-9);
    }

    #[test]
    fn mann_whitney_exact_without_ties() {
        let m = mann_whitney_less(&[1.1, 2.2, 3.3], &[4.4, 5.5, 6.6]).unwrap();
        assert_eq!(m.u, 0.0);
        assert!(m.exact);
        close(m.p_less, 0.05, 1e-12);
        close(mann_whitney_min_p(3, 3), 0.05, 1e-12);

        let (x, y) = ([19.0, 22.0, 16.0, 29.0, 24.0], [20.0, 11.0, 17.0, 12.0]);
        let m = mann_whitney_less(&x, &y).unwrap();
        assert_eq!(m.u, 17.0);
        close(m.p_less, 0.968_253_968_253_968_3, 1e-12);
        let m = mann_whitney_less(&y, &x).unwrap();
        assert_eq!(m.u, 3.0);
        close(m.p_less, 0.055_555_555_555_555_55, 1e-12);
    }

    #[test]
    fn mann_whitney_exact_with_ties_is_the_permutation_distribution() {
        // scipy with method=PermutationMethod(n_resamples=inf): every split enumerated.
        let m =
            mann_whitney_less(&[40.0, 40.0, 41.0, 45.0], &[40.0, 44.0, 46.0, 46.0, 50.0]).unwrap();
        assert_eq!(m.u, 4.0);
        close(m.p_less, 0.087_301_587_301_587_3, 1e-12);
    }

    #[test]
    fn mann_whitney_normal_approximation_for_large_samples() {
        let x = [
            100.0, 103.0, 97.3, 91.1, 95.5, 90.1, 100.6, 113.4, 95.1, 93.8, 104.9, 103.6, 101.1,
            90.7, 99.7, 107.0, 86.6, 95.4, 81.0, 87.1, 81.6, 97.6, 87.3, 102.7, 101.6, 98.1, 74.8,
            94.6, 99.5, 101.1, 84.7, 95.2, 90.2, 91.9, 110.6, 91.9, 99.7, 108.8, 94.2, 98.9, 101.1,
            100.6, 87.7, 100.8, 113.6, 84.5, 108.6, 101.2, 93.6, 120.0, 107.6, 88.0, 100.7, 105.8,
            98.1, 106.8, 99.3, 106.7, 114.4, 93.2, 102.0, 95.4, 101.3, 88.1, 94.2, 98.0, 109.0,
            111.5, 86.8, 92.1,
        ];
        let y = [
            110.5, 84.1, 99.4, 103.0, 116.6, 110.9, 100.7, 100.3, 101.5, 119.2, 99.7, 101.0, 107.5,
            102.8, 102.0, 92.9, 103.9, 99.6, 115.7, 110.5, 103.8, 110.7, 100.6, 114.5, 103.9,
            109.8, 91.1, 107.5, 87.1, 83.6, 101.0, 95.0, 105.6, 126.4, 95.7, 97.8, 106.1, 108.9,
            102.2, 101.9, 111.0, 109.2, 93.7, 103.2, 104.4, 93.5, 106.6, 95.4, 113.7, 105.9, 104.9,
            98.1, 102.8, 84.0, 92.7, 107.6, 82.7, 112.5, 86.5, 111.6,
        ];
        let m = mann_whitney_less(&x, &y).unwrap();
        assert!(!m.exact);
        assert_eq!(m.u, 1440.5);
        close(m.p_less, 0.001_042_785_324_802_884, 1e-9);
        // The first 50 of each (n = 100, ties included) are exact: SciPy's permutation
        // method with 4 million resamples gives p = 1.075e-4 (standard error 0.05e-4).
        let m = mann_whitney_less(&x[..50], &y[..50]).unwrap();
        assert!(m.exact);
        assert_eq!(m.u, 722.0);
        assert!((0.92e-4..1.23e-4).contains(&m.p_less), "{}", m.p_less);
    }

    #[test]
    fn min_p_says_how_many_runs_a_rank_test_needs() {
        close(mann_whitney_min_p(2, 2), 1.0 / 6.0, 1e-12);
        close(mann_whitney_min_p(5, 5), 1.0 / 252.0, 1e-12);
        close(mann_whitney_min_p(2, 10), 1.0 / 66.0, 1e-12);
        assert!(mann_whitney_less(&[], &[1.0]).is_none());
    }
}
