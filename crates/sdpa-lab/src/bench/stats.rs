//! Summary statistics of per-run times.
//!
//! Percentiles use linear interpolation between closest ranks (NumPy's default, Hyndman & Fan
//! type 7): for `n` sorted samples `x[0..n]` and a fraction `p`, the rank is `h = p·(n − 1)` and
//! the value `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`. The standard deviation is the sample
//! one (divisor `n − 1`, zero for a single sample), and the coefficient of variation is
//! `std / mean`. `scripts/peers.py` computes the same figures the same way, so rows from both
//! sides compare.

use serde::{Deserialize, Serialize};

/// Summary of one timed series, all times in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Number of timed runs.
    pub n: usize,
    /// Median (p50).
    pub median_us: f64,
    /// 10th percentile.
    pub p10_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Arithmetic mean.
    pub mean_us: f64,
    /// Sample standard deviation (divisor n − 1; 0 for one sample).
    pub std_us: f64,
    /// Coefficient of variation, `std_us / mean_us` (0 when the mean is 0).
    pub cv: f64,
    /// Fastest run.
    pub min_us: f64,
    /// Slowest run.
    pub max_us: f64,
}

/// Why a series cannot be summarized.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// No samples at all.
    #[error("no timing samples")]
    Empty,
    /// A sample is NaN, infinite or negative: a broken timer, not a time.
    #[error("timing sample {index} is {value}, not a finite non-negative time")]
    BadSample {
        /// Position in the input.
        index: usize,
        /// The offending value.
        value: f64,
    },
}

/// Value at fraction `p` (0..=1) of an ascending, non-empty slice, by linear interpolation
/// between closest ranks. `p` outside 0..=1 is clamped. Returns `None` for an empty slice.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let h = p.clamp(0.0, 1.0) * last as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(last);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

impl Stats {
    /// Summarizes per-run times in microseconds (any order).
    pub fn from_samples(samples_us: &[f64]) -> Result<Stats, StatsError> {
        if samples_us.is_empty() {
            return Err(StatsError::Empty);
        }
        if let Some((index, &value)) = samples_us
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v < 0.0)
        {
            return Err(StatsError::BadSample { index, value });
        }
        let mut s = samples_us.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let mean = s.iter().sum::<f64>() / n as f64;
        let std = if n > 1 {
            (s.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        // Safe: `s` is non-empty, so every percentile exists.
        let pct = |p: f64| percentile_sorted(&s, p).unwrap_or(f64::NAN);
        Ok(Stats {
            n,
            median_us: pct(0.5),
            p10_us: pct(0.10),
            p90_us: pct(0.90),
            p99_us: pct(0.99),
            mean_us: mean,
            std_us: std,
            cv: if mean > 0.0 { std / mean } else { 0.0 },
            min_us: s[0],
            max_us: s[n - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn one_to_ten_by_hand() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Stats::from_samples(&v).unwrap();
        assert_eq!(s.n, 10);
        // h = 0.5·9 = 4.5 → between 5 and 6
        assert!(close(s.median_us, 5.5));
        // h = 0.1·9 = 0.9 → 1 + 0.9
        assert!(close(s.p10_us, 1.9));
        // h = 0.9·9 = 8.1 → 9 + 0.1
        assert!(close(s.p90_us, 9.1));
        // h = 0.99·9 = 8.91 → 9 + 0.91
        assert!(close(s.p99_us, 9.91));
        assert!(close(s.mean_us, 5.5));
        // Σ(x − 5.5)² = 82.5; / 9
        assert!(close(s.std_us, (82.5f64 / 9.0).sqrt()));
        assert!(close(s.cv, (82.5f64 / 9.0).sqrt() / 5.5));
        assert_eq!((s.min_us, s.max_us), (1.0, 10.0));
    }

    #[test]
    fn one_to_hundred_by_hand_any_order() {
        // reversed input: the order of runs must not matter
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Stats::from_samples(&v).unwrap();
        assert!(close(s.median_us, 50.5)); // h = 49.5
        assert!(close(s.p10_us, 10.9)); // h = 9.9
        assert!(close(s.p90_us, 90.1)); // h = 89.1
        assert!(close(s.p99_us, 99.01)); // h = 98.01
        assert!(close(s.mean_us, 50.5));
        // Σ(x − 50.5)² = n(n²−1)/12 = 83325; / 99
        assert!(close(s.std_us, (83325.0f64 / 99.0).sqrt()));
    }

    #[test]
    fn single_sample() {
        let s = Stats::from_samples(&[7.25]).unwrap();
        assert_eq!(s.n, 1);
        for v in [
            s.median_us,
            s.p10_us,
            s.p90_us,
            s.p99_us,
            s.mean_us,
            s.min_us,
            s.max_us,
        ] {
            assert_eq!(v, 7.25);
        }
        assert_eq!((s.std_us, s.cv), (0.0, 0.0));
    }

    #[test]
    fn constant_series_has_zero_cv() {
        let s = Stats::from_samples(&[3.0; 150]).unwrap();
        assert_eq!(s.std_us, 0.0);
        assert_eq!(s.cv, 0.0);
        assert_eq!(s.p99_us, 3.0);
    }

    #[test]
    fn all_zero_does_not_divide_by_zero() {
        let s = Stats::from_samples(&[0.0, 0.0]).unwrap();
        assert_eq!(s.cv, 0.0);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert_eq!(Stats::from_samples(&[]), Err(StatsError::Empty));
        assert!(matches!(
            Stats::from_samples(&[1.0, f64::NAN]),
            Err(StatsError::BadSample { index: 1, .. })
        ));
        assert!(Stats::from_samples(&[f64::INFINITY]).is_err());
        assert!(Stats::from_samples(&[-1.0]).is_err());
    }

    #[test]
    fn percentile_edges() {
        assert_eq!(percentile_sorted(&[], 0.5), None);
        assert_eq!(percentile_sorted(&[1.0, 2.0], 0.0), Some(1.0));
        assert_eq!(percentile_sorted(&[1.0, 2.0], 1.0), Some(2.0));
        assert_eq!(percentile_sorted(&[1.0, 2.0], 7.0), Some(2.0));
    }

    #[test]
    fn serde_round_trip() {
        let s = Stats::from_samples(&[1.0, 2.0, 4.0]).unwrap();
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"median_us\":2.0"));
        let back: Stats = serde_json::from_str(&j).unwrap();
        // serde_json parses floats to within an ulp, not always bit-exact
        assert_eq!(back.n, s.n);
        assert!(close(back.std_us, s.std_us) && close(back.cv, s.cv));
        assert_eq!(back.median_us, s.median_us);
    }
}
