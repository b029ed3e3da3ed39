//! The truth check: does bench time the kernel? Per profiled case, the median of a bench run
//! without the profiler beside ncu's kernel time for one call (a decode call's two kernels
//! summed), and their ratio. Hot-mode bench runs are queued back to back with an event pair
//! each, so they should measure kernel time; a ratio far from 1 means the timing includes
//! something else (launch gaps on tiny shapes, host work) or the profiled launches ran
//! differently (clocks, caches).

use super::CaseProfile;
use fp8_sdpa::Precision;
use serde::{Deserialize, Serialize};

/// One case's check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruthRow {
    /// Suite name.
    pub suite: String,
    /// Case name.
    pub case: String,
    /// Precision path.
    pub precision: Precision,
    /// Variant key.
    pub variant: String,
    /// Bench median without the profiler, µs.
    pub bench_median_us: Option<f64>,
    /// ncu's duration of one call, µs.
    pub ncu_us: Option<f64>,
    /// `bench_median_us / ncu_us`.
    pub ratio: Option<f64>,
    /// The two differ by more than the tolerance.
    pub flagged: bool,
    /// "agree", "differ by N %", or why there is nothing to compare.
    pub verdict: String,
}

/// Compares one case's figures: `(ratio, flagged, verdict)`. Flagged when the ratio is off 1
/// by more than `tolerance_pct` %, i.e. the bench median differs from ncu's time by more than
/// that share of ncu's time.
pub fn judge(
    bench_us: Option<f64>,
    ncu_us: Option<f64>,
    tolerance_pct: f64,
) -> (Option<f64>, bool, String) {
    match (bench_us, ncu_us) {
        (None, _) => (None, false, "no bench timing".into()),
        (_, None) => (None, false, "no ncu duration".into()),
        (Some(_), Some(n)) if n <= 0.0 => (None, false, "no ncu duration".into()),
        (Some(b), Some(n)) => {
            let ratio = b / n;
            let off = (ratio - 1.0) * 100.0;
            if off.abs() > tolerance_pct {
                (Some(ratio), true, format!("differ by {off:+.0} %"))
            } else {
                (Some(ratio), false, "agree".into())
            }
        }
    }
}

/// The check for every case, in order.
pub fn check(cases: &[CaseProfile], tolerance_pct: f64) -> Vec<TruthRow> {
    cases
        .iter()
        .map(|c| {
            let ncu = c.call_us.filter(|_| c.is_ok());
            let (ratio, flagged, mut verdict) = judge(c.bench_median_us, ncu, tolerance_pct);
            if !c.is_ok() && c.bench_median_us.is_some() {
                verdict = format!("not profiled ({})", c.status);
            }
            TruthRow {
                suite: c.suite.clone(),
                case: c.case.clone(),
                precision: c.precision,
                variant: c.variant.clone(),
                bench_median_us: c.bench_median_us,
                ncu_us: ncu,
                ratio,
                flagged,
                verdict,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, bench: Option<f64>, ncu: Option<f64>, status: &str) -> CaseProfile {
        CaseProfile {
            suite: "fa".into(),
            case: name.into(),
            precision: Precision::F16,
            variant: "v".into(),
            status: status.into(),
            bench_median_us: bench,
            calls: 5,
            call_us: ncu,
            kernels: vec![],
            files: vec![],
            note: None,
        }
    }

    #[test]
    fn flags_more_than_the_tolerance_either_way() {
        let cases = [
            case("same", Some(100.0), Some(100.0), "ok"),
            case("in", Some(109.0), Some(100.0), "ok"),
            case("slow_bench", Some(111.0), Some(100.0), "ok"),
            case("fast_bench", Some(85.0), Some(100.0), "ok"),
            case(
                "no_ncu",
                Some(100.0),
                None,
                "failed: ncu exited with code 1",
            ),
            case("no_bench", None, None, "skipped: not timed"),
        ];
        let t = check(&cases, 10.0);
        let flagged: Vec<&str> = t
            .iter()
            .filter(|r| r.flagged)
            .map(|r| r.case.as_str())
            .collect();
        assert_eq!(flagged, ["slow_bench", "fast_bench"]);
        assert_eq!(t[1].verdict, "agree");
        assert_eq!(t[2].verdict, "differ by +11 %");
        assert_eq!(t[3].verdict, "differ by -15 %");
        assert!((t[2].ratio.unwrap() - 1.11).abs() < 1e-12);
        assert_eq!(t[4].ratio, None);
        assert!(
            t[4].verdict.starts_with("not profiled (failed"),
            "{}",
            t[4].verdict
        );
        assert_eq!(t[5].verdict, "no bench timing");
        // a tighter tolerance flags the 9 % case too
        assert!(check(&cases, 5.0)[1].flagged);
    }

    #[test]
    fn a_failed_case_keeps_no_ncu_figure() {
        // A case that failed after ncu wrote a partial duration is not compared.
        let t = check(&[case("x", Some(100.0), Some(300.0), "failed: boom")], 10.0);
        assert_eq!(t[0].ncu_us, None);
        assert!(!t[0].flagged);
    }
}
