//! Error metrics of a kernel output against the float64 reference, and the thresholds of
//! the correctness gate ("green before fast", gate 3).
//!
//! Every element is checked. An element is *bad* when `|out − ref| > atol + rtol·|ref|`, when
//! the output is NaN or infinite where the reference is finite (which is also what a kernel
//! that left an element unwritten shows, since outputs are poisoned with NaN before each
//! run), or when the reference is NaN or infinite and the output is not the same (a NaN
//! input row must give a NaN output row; a fully masked row's LSE is −inf).

use fp8_sdpa::{Error, Precision, Result};
use serde::{Deserialize, Serialize};

/// Error statistics of one output tensor against its reference.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ErrorStats {
    /// Elements compared.
    pub n: usize,
    /// Largest |out − ref| over elements where both are finite.
    pub max_abs: f64,
    /// Index of the element with the largest error, if any was finite on both sides.
    pub max_abs_index: Option<usize>,
    /// Mean |out − ref| over elements where both are finite.
    pub mean_abs: f64,
    /// Bad elements (see the module docs), non-finite mismatches included.
    pub bad: usize,
    /// `bad` as a percentage of `n` (0..=100).
    pub pct_bad: f64,
    /// ‖out − ref‖₂ / ‖ref‖₂ over elements where both are finite (0 when both norms are
    /// zero, +inf when only the reference's is).
    pub rel_l2: f64,
    /// Outputs that are NaN or infinite where the reference is finite.
    pub nan_count: usize,
    /// Elements whose reference is NaN or ±inf and whose output is not the same.
    pub special_mismatch: usize,
}

/// Compares a kernel output with the reference element by element (same order, same
/// length). `atol` and `rtol` define a bad element: `|err| > atol + rtol·|ref|`. Errors when
/// the lengths differ or a tolerance is negative or NaN.
pub fn compare(out: &[f32], reference: &[f64], atol: f64, rtol: f64) -> Result<ErrorStats> {
    compare_with_slack(out, reference, atol, rtol, 0.0, &[])
}

/// [`compare`] with a per-element slack: element `i` is bad when `|err| > atol + rtol·|ref| +
/// per_slack·slack[i]` (an empty `slack` adds nothing). Errors as [`compare`] does, and when
/// `per_slack` is negative or NaN or a non-empty `slack` has another length.
pub fn compare_with_slack(
    out: &[f32],
    reference: &[f64],
    atol: f64,
    rtol: f64,
    per_slack: f64,
    slack: &[f64],
) -> Result<ErrorStats> {
    if !slack.is_empty() && slack.len() != reference.len() {
        return Err(Error::InvalidInput(format!(
            "slack has {} elements, reference {}",
            slack.len(),
            reference.len()
        )));
    }
    if per_slack.is_nan() || per_slack < 0.0 {
        return Err(Error::InvalidInput(format!(
            "the slack factor must be non-negative: {per_slack}"
        )));
    }
    if out.len() != reference.len() {
        return Err(Error::InvalidInput(format!(
            "output has {} elements, reference {}",
            out.len(),
            reference.len()
        )));
    }
    if !(atol >= 0.0 && rtol >= 0.0) {
        return Err(Error::InvalidInput(format!(
            "tolerances must be non-negative: atol {atol}, rtol {rtol}"
        )));
    }
    let mut s = ErrorStats {
        n: out.len(),
        ..ErrorStats::default()
    };
    let (mut finite, mut sum_abs, mut sum_err2, mut sum_ref2) = (0usize, 0f64, 0f64, 0f64);
    for (i, (&o, &r)) in out.iter().zip(reference).enumerate() {
        let o = f64::from(o);
        if !r.is_finite() {
            let same = (r.is_nan() && o.is_nan()) || o == r;
            if !same {
                s.special_mismatch += 1;
                s.bad += 1;
            }
            continue;
        }
        if !o.is_finite() {
            s.nan_count += 1;
            s.bad += 1;
            continue;
        }
        let err = (o - r).abs();
        finite += 1;
        sum_abs += err;
        sum_err2 += err * err;
        sum_ref2 += r * r;
        if s.max_abs_index.is_none() || err > s.max_abs {
            s.max_abs = err;
            s.max_abs_index = Some(i);
        }
        let extra = slack.get(i).map_or(0.0, |x| per_slack * x);
        if err > atol + rtol * r.abs() + extra {
            s.bad += 1;
        }
    }
    if finite > 0 {
        s.mean_abs = sum_abs / finite as f64;
    }
    if s.n > 0 {
        s.pct_bad = 100.0 * s.bad as f64 / s.n as f64;
    }
    s.rel_l2 = if sum_ref2 > 0.0 {
        (sum_err2 / sum_ref2).sqrt()
    } else if sum_err2 == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    Ok(s)
}

/// Limits of the correctness gate. `atol`/`rtol` define a bad element; each `Some` limit is
/// an upper bound on the matching [`ErrorStats`] field, `None` means reported, not gated.
/// Non-finite mismatches (`nan_count`, `special_mismatch`) always fail.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Absolute tolerance of one element.
    pub atol: f64,
    /// Relative tolerance of one element.
    pub rtol: f64,
    /// Limit on the largest absolute error.
    pub max_abs: Option<f64>,
    /// Limit on the mean absolute error.
    pub mean_abs: Option<f64>,
    /// Limit on the percentage of bad elements.
    pub pct_bad: Option<f64>,
    /// Limit on the relative L2 error.
    pub rel_l2: Option<f64>,
}

/// Whether a kernel computes with 8-bit `wgmma` (the Hopper family's full FP8 kernel): its
/// scores and P·V accumulate at reduced precision and its P is E4M3, so it is judged by
/// [`Thresholds::for_kernel`]'s E4M3 bounds and `harness::lse_tolerances`' LSE bound.
pub fn runs_8bit_wgmma(spec: &fp8_sdpa::variant::KernelSpec) -> bool {
    spec.precision == Precision::Fp8 && spec.variant.family == fp8_sdpa::variant::Family::Hopper
}

impl Thresholds {
    /// The check against the float64 reference run on the *dequantized* inputs (the exact
    /// values the kernel was given), so only the kernel's own arithmetic is judged. FP8
    /// paths use the thresholds of their compute type ([`Precision::compute`]): decoding
    /// E4M3 and applying fp32 descales is exact, so they may add nothing.
    ///
    /// Where the limits come from, with u the unit roundoff of the compute type (fp16
    /// 2^-11 ≈ 4.9e-4; bf16, 8 significant bits, 2^-8 ≈ 3.9e-3): a correct flash kernel with
    /// fp32 scores and accumulators has two rounding sources of size u, P rounded to 16 bits
    /// before P·V and O rounded on store. O's rounding is relative (≤ u·|o|) and P's is at
    /// most u·Σpⱼ|vⱼ|/l, so every element stays within atol + rtol·|ref| with rtol ≈ 20u
    /// (fp16) / 8u (bf16) and atol ≈ 10u / 8u, a margin of ≥ 4× for |v| up to ~5 (unit
    /// variance) even on rows that see one or two keys. No element may exceed that bound:
    /// a wrong row or a missed tail is far outside it, and one bad element in a
    /// million-element output would be lost in a percentage. Random rounding errors give
    /// a relative L2 error of about u/√3 per source, ≈ 3–4e-4 for fp16 and ≈ 3e-3 for bf16
    /// all told. The fp16 limit 1e-3 leaves ~3× and still fails bf16-level arithmetic
    /// (bf16 rounding of O alone gives ≈ 1.5e-3) sneaking into an fp16 path; the bf16 limit
    /// 1.6e-2 leaves ~5×. Both catch systematic drift (a dropped key, a wrong scale) that
    /// stays under the per-element bound. Max and mean absolute errors
    /// scale with the data (a ±40 outlier row rounds to ±0.08 in bf16), so this check
    /// reports them and gates the scale-free bound instead.
    pub fn for_precision(p: Precision) -> Thresholds {
        match p.compute() {
            fp8_sdpa::DType::Bf16 => Thresholds {
                atol: 3e-2,
                rtol: 3e-2,
                max_abs: None,
                mean_abs: None,
                pct_bad: Some(0.0),
                rel_l2: Some(1.6e-2),
            },
            _ => Thresholds {
                atol: 5e-3,
                rtol: 1e-2,
                max_abs: None,
                mean_abs: None,
                pct_bad: Some(0.0),
                rel_l2: Some(1e-3),
            },
        }
    }

    /// The check for what a kernel computes: [`Thresholds::for_precision`], except for the
    /// Hopper family's full FP8 kernel, whose P·V multiplies P rounded to E4M3 (3-bit
    /// mantissa, unit roundoff u = 2^-4). Each output element then errs by up to
    /// u·Σpⱼ|vⱼ|/l ≤ u·max|v| (≈ 0.3 for unit-variance V over thousands of keys), and random
    /// roundings give a relative L2 error of about u/√3 ≈ 0.036 at most (cuDNN's FP8 kernel,
    /// which also rounds O to E4M3, measured 0.034-0.038 on the H100). Limits: atol 0.375
    /// (6u), rtol 0.125 (2u), relative L2 5e-2. A wrong key order, a dropped or doubled
    /// block or a wrong descale moves the relative L2 error to 0.3 or more.
    pub fn for_kernel(spec: &fp8_sdpa::variant::KernelSpec) -> Thresholds {
        if runs_8bit_wgmma(spec) {
            Thresholds {
                atol: 0.375,
                rtol: 0.125,
                max_abs: None,
                mean_abs: None,
                pct_bad: Some(0.0),
                rel_l2: Some(5e-2),
            }
        } else {
            Thresholds::for_precision(spec.precision)
        }
    }

    /// The seeds' gate, against the float64 reference on the *unquantized* inputs
    /// (unit-variance data): mean |err| ≤ 0.02, bad (|err| > 0.06) ≤ 1%, and max |err| ≤ 0.06
    /// — the max gated for every path except those with E4M3 inputs, where a row attending
    /// to few keys can legitimately err by up to amax/32 (3-bit mantissa), so it is
    /// reported only. The seeds' max held for their uint8 code (simulated FP8).
    pub fn seeds_gate(p: Precision) -> Thresholds {
        let e4m3 = p.q() == fp8_sdpa::DType::E4m3 || p.kv() == fp8_sdpa::DType::E4m3;
        Thresholds {
            atol: 0.06,
            rtol: 0.0,
            max_abs: if e4m3 { None } else { Some(0.06) },
            mean_abs: Some(0.02),
            pct_bad: Some(1.0),
            rel_l2: None,
        }
    }

    /// [`compare`] with these thresholds' tolerances.
    pub fn compare(&self, out: &[f32], reference: &[f64]) -> Result<ErrorStats> {
        compare(out, reference, self.atol, self.rtol)
    }

    /// Checks statistics against the limits. The error names every failing metric with
    /// its value and limit, e.g. `rel_l2 3.1e-3 > 2e-3`. Statistics must come from
    /// [`compare`] with this `atol`/`rtol` for `pct_bad` to mean what the limit assumes.
    pub fn check(&self, s: &ErrorStats) -> std::result::Result<(), String> {
        let mut fails = Vec::new();
        if s.nan_count > 0 {
            fails.push(format!(
                "nan_count {}: outputs NaN/inf where the reference is finite",
                s.nan_count
            ));
        }
        if s.special_mismatch > 0 {
            fails.push(format!(
                "special_mismatch {}: reference NaN/inf not reproduced",
                s.special_mismatch
            ));
        }
        let gates = [
            ("max_abs", s.max_abs, self.max_abs),
            ("mean_abs", s.mean_abs, self.mean_abs),
            ("pct_bad", s.pct_bad, self.pct_bad),
            ("rel_l2", s.rel_l2, self.rel_l2),
        ];
        for (name, value, limit) in gates {
            // A NaN statistic fails rather than slipping through the comparison.
            if let Some(l) = limit.filter(|&l| value.is_nan() || value > l) {
                let extra = if name == "max_abs" {
                    s.max_abs_index
                        .map(|i| format!(" (element {i})"))
                        .unwrap_or_default()
                } else if name == "pct_bad" {
                    format!(
                        " ({} of {} beyond {} + {}·|ref|)",
                        s.bad, s.n, self.atol, self.rtol
                    )
                } else {
                    String::new()
                };
                fails.push(format!("{name} {value:.3e} > {l:.3e}{extra}"));
            }
        }
        if fails.is_empty() {
            Ok(())
        } else {
            Err(fails.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        let reference = [1.0, -2.0, 0.5, 4.0];
        let out = [1.0f32, -2.1, 0.5, 4.05];
        let s = compare(&out, &reference, 0.06, 0.0).unwrap();
        assert_eq!(s.n, 4);
        // errors 0, 0.1, 0, 0.05 (f32 rounding of -2.1 and 4.05 adds < 1e-7)
        assert!((s.max_abs - 0.1).abs() < 1e-6);
        assert_eq!(s.max_abs_index, Some(1));
        assert!((s.mean_abs - 0.0375).abs() < 1e-6);
        assert_eq!(s.bad, 1);
        assert_eq!(s.pct_bad, 25.0);
        // sqrt(0.01 + 0.0025) / sqrt(1 + 4 + 0.25 + 16) = 0.1118 / 4.6098
        assert!((s.rel_l2 - 0.0242535625).abs() < 1e-6);
        assert_eq!(s.nan_count, 0);
        // with rtol the 4.05 element stays good and -2.1 too: 0.1 <= 0.06 + 0.05·2
        let s = compare(&out, &reference, 0.06, 0.05).unwrap();
        assert_eq!(s.bad, 0);
    }

    #[test]
    fn non_finite_handling() {
        let reference = [
            1.0,
            f64::NAN,
            f64::NEG_INFINITY,
            2.0,
            f64::NAN,
            f64::NEG_INFINITY,
        ];
        let out = [
            f32::NAN,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            0.0,
            0.0,
        ];
        let s = compare(&out, &reference, 1e-3, 0.0).unwrap();
        assert_eq!(s.nan_count, 2); // element 0 (NaN) and 3 (inf) where ref is finite
        assert_eq!(s.special_mismatch, 2); // elements 4 and 5
        assert_eq!(s.bad, 4);
        assert_eq!(s.max_abs_index, None);
        assert_eq!(s.rel_l2, 0.0);
        let t = Thresholds::for_precision(Precision::F16);
        let e = t.check(&s).unwrap_err();
        assert!(
            e.contains("nan_count 2") && e.contains("special_mismatch 2"),
            "{e}"
        );
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(compare(&[1.0], &[1.0, 2.0], 0.0, 0.0).is_err());
        assert!(compare(&[1.0], &[1.0], -1.0, 0.0).is_err());
        assert!(compare(&[1.0], &[1.0], 0.0, f64::NAN).is_err());
        let s = compare(&[], &[], 0.0, 0.0).unwrap();
        assert_eq!((s.n, s.pct_bad, s.rel_l2), (0, 0.0, 0.0));
        let s = compare(&[1.0], &[0.0], 0.0, 0.0).unwrap();
        assert_eq!(s.rel_l2, f64::INFINITY);
    }

    #[test]
    fn seeds_gate_limits() {
        let sim = Thresholds::seeds_gate(Precision::SimFp8);
        let fp8 = Thresholds::seeds_gate(Precision::Fp8KvF16);
        assert_eq!(sim.max_abs, Some(0.06));
        assert_eq!(fp8.max_abs, None);
        assert_eq!(Thresholds::seeds_gate(Precision::Fp8).max_abs, None);
        assert_eq!(Thresholds::seeds_gate(Precision::F16).max_abs, Some(0.06));
        // 200 elements: one error of 0.1, the rest 0.01
        let reference = vec![0.0; 200];
        let mut out = vec![0.01f32; 200];
        out[7] = 0.1;
        let s = sim.compare(&out, &reference).unwrap();
        assert_eq!(s.bad, 1);
        assert_eq!(s.pct_bad, 0.5);
        let e = sim.check(&s).unwrap_err();
        assert!(
            e.starts_with("max_abs 1.000e-1 > 6.000e-2 (element 7)"),
            "{e}"
        );
        assert!(!e.contains("pct_bad") && !e.contains("mean_abs"), "{e}");
        assert!(fp8.check(&s).is_ok());
        // three bad of 200 = 1.5% fails pct_bad
        out[8] = -0.2;
        out[9] = 0.07;
        let s = fp8.compare(&out, &reference).unwrap();
        let e = fp8.check(&s).unwrap_err();
        assert!(e.starts_with("pct_bad 1.500e0 > 1.000e0 (3 of 200"), "{e}");
        // mean 0.03 fails mean_abs
        let s = fp8.compare(&[0.03f32; 10], &[0.0; 10]).unwrap();
        assert!(fp8.check(&s).unwrap_err().starts_with("mean_abs 3.000e-2"));
    }

    #[test]
    fn precision_thresholds() {
        for p in Precision::ALL {
            let t = Thresholds::for_precision(p);
            assert_eq!(t.pct_bad, Some(0.0));
            assert!(t.rel_l2.is_some());
        }
        let f16 = Thresholds::for_precision(Precision::F16);
        let bf16 = Thresholds::for_precision(Precision::Bf16);
        assert_eq!(Thresholds::for_precision(Precision::Fp8KvF16), f16);
        assert_eq!(Thresholds::for_precision(Precision::SimFp8), f16);
        assert_eq!(Thresholds::for_precision(Precision::Fp8), bf16);
        assert!(bf16.rel_l2 > f16.rel_l2);

        // fp16 output rounding of unit-scale data passes fp16 limits with room; bf16
        // rounding passes bf16 limits but not fp16's.
        let reference: Vec<f64> = (0..4096).map(|i| ((i as f64) * 0.37).sin() * 2.0).collect();
        let as_f16: Vec<f32> = reference
            .iter()
            .map(|&r| half::f16::from_f64(r).to_f32())
            .collect();
        let as_bf16: Vec<f32> = reference
            .iter()
            .map(|&r| half::bf16::from_f64(r).to_f32())
            .collect();
        let s = f16.compare(&as_f16, &reference).unwrap();
        assert!(f16.check(&s).is_ok(), "{s:?}");
        assert!(s.rel_l2 < 3e-4, "{s:?}");
        let s = bf16.compare(&as_bf16, &reference).unwrap();
        assert!(bf16.check(&s).is_ok(), "{s:?}");
        let s = f16.compare(&as_bf16, &reference).unwrap();
        assert!(f16.check(&s).unwrap_err().contains("rel_l2"), "{s:?}");
    }

    /// CPU model of a correct flash kernel in a 16-bit compute type: fp32 scores and
    /// accumulators, the row sum from unrounded P, P rounded to 16 bits before P·V, O rounded
    /// on store. `drop_last` models a bug: each row misses its last visible key.
    fn model_kernel(
        s: &fp8_sdpa::AttnShape,
        q: &[f64],
        k: &[f64],
        v: &[f64],
        causal: bool,
        round: fn(f32) -> f32,
        drop_last: bool,
    ) -> Vec<f32> {
        let d = s.head_dim;
        let scale = 1.0 / (d as f32).sqrt();
        let mut o = vec![0f32; s.q_len()];
        for h in 0..s.heads_q {
            let hk = h / s.group();
            for i in 0..s.seq_q {
                let mut n = fp8_sdpa::reference::visible_keys(i, s.seq_q, s.seq_kv, causal);
                if drop_last && n > 1 {
                    n -= 1;
                }
                let qi = &q[(i * s.heads_q + h) * d..][..d];
                let sc: Vec<f32> = (0..n)
                    .map(|j| {
                        let kj = &k[(j * s.heads_kv + hk) * d..][..d];
                        scale * qi.iter().zip(kj).map(|(a, b)| (a * b) as f32).sum::<f32>()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let p: Vec<f32> = sc.iter().map(|x| (x - m).exp()).collect();
                let l: f32 = p.iter().sum();
                for c in 0..d {
                    let acc: f32 = (0..n)
                        .map(|j| round(p[j]) * v[(j * s.heads_kv + hk) * d + c] as f32)
                        .sum();
                    o[(i * s.heads_q + h) * d + c] = if n > 0 { round(acc / l) } else { 0.0 };
                }
            }
        }
        o
    }

    #[test]
    fn modelled_kernel_passes_and_bugs_fail() {
        use crate::inputs::{generate_qkv, Distribution};
        let s = fp8_sdpa::AttnShape {
            batch: 1,
            seq_q: 96,
            seq_kv: 80,
            heads_q: 2,
            heads_kv: 1,
            head_dim: 64,
        };
        let f16r: fn(f32) -> f32 = |x| half::f16::from_f32(x).to_f32();
        let bf16r: fn(f32) -> f32 = |x| half::bf16::from_f32(x).to_f32();
        for (p, round) in [(Precision::F16, f16r), (Precision::Bf16, bf16r)] {
            let t = Thresholds::for_precision(p);
            for dist in Distribution::ALL {
                for causal in [false, true] {
                    let (q, k, v) = generate_qkv(3, &s, dist);
                    // the kernel's inputs: values rounded to the compute type
                    let cast = |x: &[f32]| -> Vec<f64> {
                        x.iter().map(|&x| f64::from(round(x))).collect()
                    };
                    let (q, k, v) = (cast(&q), cast(&k), cast(&v));
                    let scale = 1.0 / (s.head_dim as f64).sqrt();
                    let r = fp8_sdpa::reference::attention(&s, &q, &k, &v, scale, causal).unwrap();
                    let out = model_kernel(&s, &q, &k, &v, causal, round, false);
                    let st = t.compare(&out, &r.o).unwrap();
                    assert!(t.check(&st).is_ok(), "{p} {dist} causal {causal}: {st:?}");
                    if dist == Distribution::Normal {
                        let bug = model_kernel(&s, &q, &k, &v, causal, round, true);
                        let st = t.compare(&bug, &r.o).unwrap();
                        assert!(t.check(&st).is_err(), "{p} {dist} bug passed: {st:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn exact_kernel_on_quantized_inputs_passes_seeds_gate() {
        use crate::inputs::{encode, generate_qkv, Distribution};
        use fp8_sdpa::DType;
        let s = fp8_sdpa::AttnShape {
            batch: 1,
            seq_q: 64,
            seq_kv: 128,
            heads_q: 2,
            heads_kv: 2,
            head_dim: 64,
        };
        let (q, k, v) = generate_qkv(21, &s, Distribution::Normal);
        let scale = 1.0 / 8.0;
        let exact = fp8_sdpa::reference::attention(
            &s,
            &fp8_sdpa::reference::widen(&q),
            &fp8_sdpa::reference::widen(&k),
            &fp8_sdpa::reference::widen(&v),
            scale,
            false,
        )
        .unwrap();
        let qd = [1, 64, 2, 64];
        let kd = [1, 128, 2, 64];
        for p in [Precision::SimFp8, Precision::Fp8, Precision::Fp8KvF16] {
            let deq = |dt: DType, x: &[f32], dims: [usize; 4]| {
                let e = encode(dt, x, dims).unwrap();
                fp8_sdpa::reference::dequantize(dt, &e.bytes, e.descales.as_deref(), dims, 2)
                    .unwrap()
            };
            let r = fp8_sdpa::reference::attention(
                &s,
                &deq(p.q(), &q, qd),
                &deq(p.kv(), &k, kd),
                &deq(p.kv(), &v, kd),
                scale,
                false,
            )
            .unwrap();
            let out: Vec<f32> = r.o.iter().map(|&x| x as f32).collect();
            let t = Thresholds::seeds_gate(p);
            let st = t.compare(&out, &exact.o).unwrap();
            assert!(t.check(&st).is_ok(), "{p}: {st:?}");
        }
    }

    #[test]
    fn hopper_fp8_is_judged_at_e4m3_p_and_the_rest_by_precision() {
        use fp8_sdpa::variant::{KernelSpec, Variant};
        let spec = |key: &str, precision| KernelSpec {
            variant: key.parse::<Variant>().unwrap(),
            precision,
            head_dim: 128,
            causal: false,
        };
        let hopper = "hopper.m128.n128.w12.s2.b1.w4ogex";
        let fp8 = Thresholds::for_kernel(&spec(hopper, Precision::Fp8));
        assert_eq!(fp8.rel_l2, Some(5e-2));
        assert!(fp8.atol > Thresholds::for_precision(Precision::Fp8).atol);
        assert_eq!(
            Thresholds::for_kernel(&spec(hopper, Precision::Bf16)),
            Thresholds::for_precision(Precision::Bf16)
        );
        let portable = "portable.m128.n64.w4.s2.b2.ctelx";
        assert_eq!(
            Thresholds::for_kernel(&spec(portable, Precision::Fp8)),
            Thresholds::for_precision(Precision::Fp8)
        );
    }

    #[test]
    fn the_8bit_wgmma_o_slack_passes_the_truth_and_still_fails_a_dropped_block() {
        use crate::harness::lse_tolerances;
        use fp8_sdpa::reference::attention;
        use fp8_sdpa::variant::{KernelSpec, Variant};
        use fp8_sdpa::AttnShape;
        // Deterministic normal values (LCG + Box-Muller).
        let mut x = 0x9e3779b97f4a7c15u64;
        let mut normal = || {
            let mut u = || {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
            };
            let (a, b) = (u(), u());
            (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
        };
        let (sq, skv, d) = (16, 256, 128);
        let shape = AttnShape::new(1, sq, skv, 1, 1, d);
        let q: Vec<f64> = (0..sq * d).map(|_| normal()).collect();
        let mut k: Vec<f64> = (0..skv * d).map(|_| normal()).collect();
        let v: Vec<f64> = (0..skv * d).map(|_| normal()).collect();
        // Key rows 8, 16, ... scaled by 30: large scores, as verify's outlier cases.
        for j in (8..skv).step_by(8) {
            k[j * d..][..d].iter_mut().for_each(|x| *x *= 30.0);
        }
        let scale = 1.0 / (d as f64).sqrt();
        let truth = attention(&shape, &q, &k, &v, scale, false).unwrap();
        // A kernel that dropped the first 64-key block.
        let wrong = attention(
            &AttnShape::new(1, sq, skv - 64, 1, 1, d),
            &q,
            &k[64 * d..],
            &v[64 * d..],
            scale,
            false,
        )
        .unwrap();
        let spec = KernelSpec {
            variant: "hopper.m128.n128.w12.s2.b1.w4oex"
                .parse::<Variant>()
                .unwrap(),
            precision: Precision::Fp8,
            head_dim: d as u32,
            causal: false,
        };
        let (t, b) = (Thresholds::for_kernel(&spec), lse_tolerances(&spec));
        let judge = |o: &[f64]| {
            let got: Vec<f32> = o.iter().map(|&x| x as f32).collect();
            let s = compare_with_slack(
                &got,
                &truth.o,
                t.atol,
                t.rtol,
                b.per_magnitude,
                &truth.o_slack,
            )
            .unwrap();
            t.check(&s).is_ok()
        };
        assert!(judge(&truth.o));
        assert!(!judge(&wrong.o), "a dropped block must fail");
        // The slack is what a score error of 2^-13 of the magnitude can do: well under the
        // atol on these rows, so it hides no wrong block.
        let most = truth.o_slack.iter().fold(0f64, |m, &x| m.max(x)) * b.per_magnitude;
        assert!(most > 0.0 && most < 0.375, "{most}");
    }

    #[test]
    fn the_8bit_wgmma_lse_bound_grows_with_the_score_magnitude_only() {
        use crate::harness::lse_tolerances;
        use fp8_sdpa::variant::{KernelSpec, Variant};
        let spec = |key: &str, precision| KernelSpec {
            variant: key.parse::<Variant>().unwrap(),
            precision,
            head_dim: 128,
            causal: true,
        };
        // Two rows off by 0.5 with LSE 60: one of outlier scores (magnitude 7000, as in
        // verify's causal large_rows case), one of ordinary ones (magnitude 10).
        let (got, want, mag) = ([60.5f32, 60.5], [60.0, 60.0], [7000.0, 10.0]);
        let bad = |key: &str, p| {
            let b = lse_tolerances(&spec(key, p));
            compare_with_slack(&got, &want, b.atol, b.rtol, b.per_magnitude, &mag)
                .unwrap()
                .bad
        };
        assert_eq!(bad("hopper.m128.n128.w12.s2.b1.w4oex", Precision::Fp8), 1);
        assert_eq!(bad("hopper.m128.n128.w12.s2.b1.w4oex", Precision::Bf16), 2);
        assert_eq!(bad("portable.m128.n64.w4.s2.b2.ctelx", Precision::Fp8), 2);
        // Without magnitudes (a reference assembled without them) nothing is added.
        let b = lse_tolerances(&spec("hopper.m128.n128.w12.s2.b1.w4oex", Precision::Fp8));
        let s = compare_with_slack(&got, &want, b.atol, b.rtol, b.per_magnitude, &[]).unwrap();
        assert_eq!(s.bad, 2);
        assert!(compare_with_slack(&got, &want, 0.0, 0.0, 1.0, &[1.0]).is_err());
        assert!(compare_with_slack(&got, &want, 0.0, 0.0, -1.0, &mag).is_err());
    }
}
