//! The seeds' simulated FP8: a uint8 linear code with zero point 128 and a per-head scale
//! `s = amax / 448`, value = `(u − 128) / 127 · 448 · s`.
//!
//! The kernels decode a code as `(u − 128) · descale` with `descale = 448 · s / 127`
//! (= `amax / 127`), so that is the descale this module hands out.
//!
//! Encoding is the exact inverse of that decoder: `u = clamp(rne(x / descale) + 128, 1, 255)`,
//! i.e. the code whose decoded value is nearest to `x`, ties to the even `n = u − 128`. The
//! quotient is formed in f64 from the f32 operands: 53 bits are more than the 2·24 + 1 a
//! quotient of two f32 needs for its rounding decision to be that of the exact quotient, so
//! no second rounding can move a value across a midpoint. Codes stop at 1 (−127) because the
//! format is symmetric: ±amax map to 128 ± 127, and code 0 (−128) would exceed −amax.
//! The seeds' host quantizer rounded `(n + 1) · 127.5` instead, half a step off this decoder.

use crate::Result;

/// The code of zero.
pub const ZERO_POINT: u8 = 128;

/// Largest code magnitude `|u − 128|`.
pub const MAX_STEPS: f32 = 127.0;

/// The kernels' decode: `u − 128` (multiply by the descale for the value).
pub fn decode(u: u8) -> f32 {
    f32::from(u) - 128.0
}

/// The value of a code under a descale: `(u − 128) · descale`, in f64 so that it is exact.
pub fn value(u: u8, descale: f32) -> f64 {
    f64::from(decode(u)) * f64::from(descale)
}

/// The descale for a head whose largest finite magnitude is `amax`: `448 · s / 127` with
/// `s = amax / 448`, computed as `amax / 127` with a single rounding (the same number
/// without the intermediate roundings). A zero amax — or one so small that the descale
/// underflows — gives 1.0: zeros decode exactly under any positive descale, and the kernels
/// reject non-positive ones.
pub fn descale_for_amax(amax: f32) -> f32 {
    let d = (f64::from(amax) / 127.0) as f32;
    if d > 0.0 && d.is_finite() {
        d
    } else {
        1.0
    }
}

/// The seeds' per-head scale `s` for a descale: `s = descale · 127 / 448`.
pub fn seed_scale(descale: f32) -> f32 {
    (f64::from(descale) * 127.0 / 448.0) as f32
}

/// Encodes `x` under `descale`: the nearest code, ties to even, clamped to 1..=255 (see the
/// module docs). Out-of-range values and infinities saturate; the format has no NaN, so NaN
/// maps to the zero point 128 ([`quantize`] rejects NaN instead of hiding it).
pub fn encode(x: f32, descale: f32) -> u8 {
    if x.is_nan() {
        return ZERO_POINT;
    }
    let n = (f64::from(x) / f64::from(descale)).round_ties_even();
    (n.clamp(-127.0, 127.0) + 128.0) as u8
}

/// Quantizes a BSHD-contiguous f32 tensor `[batch, seq, heads, dim]` with one scale per
/// (batch, head): descale = amax / 127 over the head's finite values (see
/// [`descale_for_amax`]), code = [`encode`]. Returns the codes (input order) and the
/// descales indexed `b * heads + h`. Errors on a length mismatch and on NaN, which this
/// format cannot represent; infinities saturate to ±amax.
pub fn quantize(values: &[f32], dims: [usize; 4]) -> Result<(Vec<u8>, Vec<f32>)> {
    if let Some(i) = values.iter().position(|x| x.is_nan()) {
        return Err(crate::Error::InvalidInput(format!(
            "element {i} is NaN, which the simulated-FP8 code cannot represent"
        )));
    }
    let amax = super::amax_per_head(values, dims)?;
    let descales: Vec<f32> = amax.into_iter().map(descale_for_amax).collect();
    let codes = super::encode_per_head(values, dims, &descales, encode);
    Ok((codes, descales))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn decoder_matches_seed_formula() {
        // (u − 128) / 127 · 448 · s == (u − 128) · descale with descale = 448 s / 127
        let amax = 3.7f32;
        let d = descale_for_amax(amax);
        let s = f64::from(amax) / 448.0;
        for u in 1..=255u8 {
            let seed = (f64::from(u) - 128.0) / 127.0 * 448.0 * s;
            assert!(
                (value(u, d) - seed).abs() <= 1e-7 * seed.abs().max(1.0),
                "u {u}"
            );
        }
        assert!((f64::from(seed_scale(d)) - s).abs() < 1e-7);
    }

    #[test]
    fn edges_encode_exactly() {
        let amax = 2.5f32;
        let d = descale_for_amax(amax);
        assert_eq!(encode(amax, d), 255);
        assert_eq!(encode(-amax, d), 1);
        assert_eq!(encode(0.0, d), 128);
        assert_eq!(encode(-0.0, d), 128);
        assert_eq!(encode(1e30, d), 255);
        assert_eq!(encode(f32::NEG_INFINITY, d), 1);
        assert_eq!(encode(f32::NAN, d), 128);
        assert!((value(255, d) - f64::from(amax)).abs() < 1e-6);
        // ties: 0.5 step -> 128 (n = 0 even), 1.5 steps -> 130 (n = 2), -2.5 -> 126
        let d = 0.25f32;
        assert_eq!(encode(0.125, d), 128);
        assert_eq!(encode(0.375, d), 130);
        assert_eq!(encode(-0.625, d), 126);
        // Not the seeds' rounding: with amax 127 (descale 1), x = -0.4 is 0.4 steps from code
        // 128 and 0.6 from 127; round((x / amax + 1) · 127.5) = round(127.098) picked 127.
        assert_eq!(encode(-0.4, 1.0), 128);
    }

    #[test]
    fn encode_is_nearest_code() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for _ in 0..20_000 {
            let amax: f32 = rng.random_range(1e-3f32..100.0);
            let d = descale_for_amax(amax);
            let x: f32 = rng.random_range(-amax..=amax);
            let u = encode(x, d);
            let err = (value(u, d) - f64::from(x)).abs();
            assert!(
                err <= 0.5 * f64::from(d) * (1.0 + 1e-12),
                "x {x} d {d} u {u}"
            );
            for w in [u.saturating_sub(1).max(1), u.saturating_add(1)] {
                assert!(
                    err <= (value(w, d) - f64::from(x)).abs(),
                    "x {x}: {u} vs {w}"
                );
            }
        }
    }

    #[test]
    fn quantize_round_trip() {
        let dims = [2, 19, 2, 8];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut v: Vec<f32> = (0..2 * 19 * 2 * 8)
            .map(|_| rng.random_range(-2.0f32..2.0))
            .collect();
        v[0] = 7.0;
        v[8] = f32::INFINITY; // head (0, 1): saturates to its finite amax
        let (codes, descales) = quantize(&v, dims).unwrap();
        assert_eq!(descales.len(), 4);
        assert_eq!(codes[0], 255);
        assert_eq!(codes[8], 255);
        for (i, (&x, &u)) in v.iter().zip(&codes).enumerate() {
            let h = (i / 8) % 2;
            let b = i / (19 * 2 * 8);
            let d = descales[b * 2 + h];
            assert!((1..=255).contains(&u));
            if x.is_finite() {
                let err = (value(u, d) - f64::from(x)).abs();
                assert!(err <= 0.5 * f64::from(d) * (1.0 + 1e-12), "i {i}");
            }
        }
        let zeros = vec![0f32; 8];
        let (c, d) = quantize(&zeros, [1, 1, 1, 8]).unwrap();
        assert_eq!(d, vec![1.0]);
        assert!(c.iter().all(|&u| u == 128));
        let mut bad = zeros.clone();
        bad[3] = f32::NAN;
        assert!(quantize(&bad, [1, 1, 1, 8]).is_err());
        assert!(quantize(&zeros, [1, 1, 1, 9]).is_err());
    }
}
