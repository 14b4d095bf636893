//! The statistics of a sample, written once for every crate: the median,
//! the nearest-rank quantile, the 95 % confidence interval of a mean, and
//! the stopping rule of an adaptive experiment (`tlslab breakdown`): keep
//! sampling until every estimate's 95 % interval is narrow enough, or a
//! time cap is hit.

use serde::Serialize;

/// The median of `v`, non-finite values left out: the middle value, or the
/// mean of the two middle ones; NaN when no value is finite.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The `q`-quantile (0–1) of sorted values, nearest rank: the smallest
/// value with at least `q` of the sample at or below it; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Two-sided 95 % quantile of Student's t for `df` degrees of freedom
/// (`df` ≥ 1; 1.96 beyond the table).
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        31..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

/// The mean of a sample and its 95 % confidence interval (Student's t).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    /// The sample mean.
    pub mean: f64,
    /// Half the width of the 95 % interval: the mean is `mean ± half_width`.
    /// Infinite with fewer than two samples.
    pub half_width: f64,
    /// The sample standard deviation (0 with fewer than two samples).
    pub sd: f64,
    /// The number of samples.
    pub n: usize,
}

impl Interval {
    /// The interval of `xs` (non-finite samples are ignored).
    pub fn of(xs: &[f64]) -> Interval {
        let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return Interval {
                mean: f64::NAN,
                half_width: f64::INFINITY,
                sd: 0.0,
                n,
            };
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Interval {
                mean,
                half_width: f64::INFINITY,
                sd: 0.0,
                n,
            };
        }
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let sd = var.sqrt();
        Interval {
            mean,
            half_width: t95(n - 1) * sd / (n as f64).sqrt(),
            sd,
            n,
        }
    }

    /// Whether 0 lies inside the interval: the estimate cannot be told
    /// from nothing.
    pub fn contains_zero(&self) -> bool {
        self.mean.abs() <= self.half_width
    }

    /// Whether two intervals are disjoint (the estimates disagree beyond
    /// both intervals).
    pub fn disjoint(&self, other: &Interval) -> bool {
        (self.mean - other.mean).abs() > self.half_width + other.half_width
    }

    /// Samples needed for a half-width of `target` at this standard
    /// deviation (an estimate; at least the current count).
    pub fn samples_needed(&self, target: f64) -> usize {
        if self.n < 2 || !self.sd.is_finite() {
            return usize::MAX;
        }
        let mut n = self.n;
        // t depends on n; iterate to the first n that reaches the target.
        while t95(n - 1) * self.sd / (n as f64).sqrt() > target {
            n += 1;
            if n > 1_000_000 {
                return usize::MAX;
            }
        }
        n
    }
}

pub use tlslab_schema::breakdown::Convergence;

/// An unconverged estimate needing more than this many times the samples
/// already taken is blamed on its variance rather than on the time cap.
pub const VARIANCE_FACTOR: usize = 4;

impl Interval {
    /// The stopping rule's verdict on this interval for a half-width
    /// `target`.
    pub fn convergence(&self, target: f64) -> Convergence {
        if self.n < 2 {
            Convergence::TooFewSamples
        } else if self.half_width <= target {
            Convergence::Converged
        } else if self.samples_needed(target) > VARIANCE_FACTOR.saturating_mul(self.n) {
            Convergence::Variance
        } else {
            Convergence::CapHit
        }
    }
}

/// The stopping rule: stop once every interval has converged (and at
/// least `min_samples` were taken).
pub fn all_converged(ivs: &[Interval], target: f64, min_samples: usize) -> bool {
    ivs.iter()
        .all(|iv| iv.n >= min_samples.max(2) && iv.half_width <= target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_nearest_rank_quantile() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, f64::NAN, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        let v = [10.0, 20.0, 30.0, 40.0];
        assert_eq!(quantile(&v, 0.5), 20.0);
        assert_eq!(quantile(&v, 0.0), 10.0);
        assert_eq!(quantile(&v, 0.99), 40.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn interval_of_a_known_sample() {
        // mean 10, sd 2 (sample), n 4: half = 3.182 × 2 / 2.
        let iv = Interval::of(&[8.0, 10.0, 12.0, 10.0 + 0.0]);
        assert!((iv.mean - 10.0).abs() < 1e-12);
        let sd = (8.0f64 / 3.0).sqrt();
        assert!((iv.sd - sd).abs() < 1e-12);
        assert!((iv.half_width - 3.182 * sd / 2.0).abs() < 1e-12);
        assert!(!iv.contains_zero());
        assert_eq!(Interval::of(&[1.0]).half_width, f64::INFINITY);
        assert!(Interval::of(&[]).mean.is_nan());
        assert_eq!(Interval::of(&[f64::NAN, 1.0, 3.0]).n, 2);
    }

    #[test]
    fn t_quantiles() {
        assert_eq!(t95(1), 12.706);
        assert_eq!(t95(30), 2.042);
        assert_eq!(t95(1000), 1.960);
        assert!(t95(0).is_infinite());
    }

    #[test]
    fn stopping_rule_on_synthetic_samples() {
        // A deterministic pseudo-noise: ±0.03 around 0.10.
        let noise = |n: usize, amp: f64| -> Vec<f64> {
            (0..n)
                .map(|i| 0.10 + amp * (((i * 7919) % 13) as f64 / 6.0 - 1.0))
                .collect()
        };
        let target = 0.02;
        // Few samples: wide.
        let few = Interval::of(&noise(3, 0.03));
        assert!(few.half_width > target);
        assert_eq!(few.convergence(target), Convergence::CapHit);
        // Enough samples of the same noise: converged.
        let many = Interval::of(&noise(20, 0.03));
        assert!(many.half_width <= target, "{many:?}");
        assert_eq!(many.convergence(target), Convergence::Converged);
        assert!(all_converged(&[many, many], target, 3));
        assert!(!all_converged(&[many, few], target, 3));
        assert!(!all_converged(&[many], target, 30));
        // samples_needed predicts where it converges.
        let need = few.samples_needed(target);
        assert!(need > 3 && need <= 20, "{need}");
        // Huge noise: blamed on variance.
        let wild = Interval::of(&noise(5, 1.0));
        assert_eq!(wild.convergence(target), Convergence::Variance);
        assert_eq!(
            Interval::of(&[0.1]).convergence(target),
            Convergence::TooFewSamples
        );
        // An estimate within noise of 0, and disagreement between two.
        let zero = Interval::of(&[-0.01, 0.012, 0.0, 0.004]);
        assert!(zero.contains_zero());
        assert!(many.disjoint(&zero));
        assert!(!many.disjoint(&many));
    }
}
