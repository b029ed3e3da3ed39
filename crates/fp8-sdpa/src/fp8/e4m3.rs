//! OCP FP8 E4M3 "fn": 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, NaN is
//! `S.1111.111` (0x7F / 0xFF), the largest finite value is 448 (0x7E), subnormals are
//! `m · 2^-9`.
//!
//! The encoder is bit-exact with the GPU: it follows `float_to_e4m3_sw` in `prims.cuh`
//! step for step, which in turn matches `cvt.rn.satfinite.e4m3x2.f32` / `.f16x2`:
//! round to nearest even, finite values and infinities beyond the range saturate to ±448,
//! every NaN becomes 0x7F whatever its sign (measured on an H100: the hardware conversion
//! drops the sign of a NaN; 0xFF still decodes as NaN). No lookup tables, so the code is the
//! same arithmetic the kernels run.

use crate::Result;

/// Largest finite E4M3 value (code 0x7E).
pub const MAX: f32 = 448.0;

/// Smallest positive value (subnormal code 0x01): 2^-9.
pub const MIN_SUBNORMAL: f32 = 0.001953125;

/// Canonical positive NaN code.
pub const NAN: u8 = 0x7F;

/// Encodes an f32 with round-to-nearest-even and saturation (see the module docs).
pub fn encode_f32(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abits = bits & 0x7fff_ffff;
    if abits > 0x7f80_0000 {
        return NAN; // the hardware drops a NaN's sign
    }
    let a = f32::from_bits(abits);
    if a < 0.015625 {
        // Below 2^-6 the grid is uniform with step 2^-9: scaling by 512 is exact (a power of
        // two, no overflow), so one round-half-even gives the code; 8 lands on 2^-6 (0x08).
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    let mut exp = (abits >> 23) as i32 - 127;
    let mant = abits & 0x7f_ffff;
    // Keep the top 3 mantissa bits and round on the 20 dropped ones (half = 0x80000).
    let mut q = mant >> 20;
    let rest = mant & 0xf_ffff;
    if rest > 0x8_0000 || (rest == 0x8_0000 && q & 1 == 1) {
        q += 1;
    }
    if q == 8 {
        q = 0;
        exp += 1;
    }
    let e = exp + 7;
    if e > 15 || (e == 15 && q == 7) {
        // satfinite: anything past 448 (infinity included) clamps instead of becoming NaN.
        return sign | 0x7E;
    }
    sign | ((e as u8) << 3) | q as u8
}

/// Encodes an f16 value: the f16 → f32 widening is exact, so this is a single rounding of
/// the exact f16 value, as `cvt.rn.satfinite.e4m3x2.f16x2` does.
pub fn encode_f16(x: half::f16) -> u8 {
    encode_f32(x.to_f32())
}

/// Decodes a code to its exact value (every E4M3 value is an f32). 0x7F / 0xFF give NaN.
pub fn decode(c: u8) -> f32 {
    let e = u32::from((c >> 3) & 0xF);
    let m = u32::from(c & 7);
    let mag = if e == 15 && m == 7 {
        f32::NAN
    } else if e == 0 {
        m as f32 * MIN_SUBNORMAL
    } else {
        // (1 + m/8) · 2^(e-7): rebias the exponent for f32 (127 - 7 = 120), mantissa on top.
        f32::from_bits(((e + 120) << 23) | (m << 20))
    };
    if c & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

/// The descale for a block whose largest finite magnitude is `amax`: `amax / 448`, so the
/// block's largest value encodes to ±448. A zero amax (an all-zero block) — or one so small
/// that `amax / 448` underflows to zero — gives 1.0: any positive descale decodes zeros
/// exactly, and the kernels reject non-positive descales.
pub fn descale_for_amax(amax: f32) -> f32 {
    let d = amax / MAX;
    if d > 0.0 && d.is_finite() {
        d
    } else {
        1.0
    }
}

/// Encodes `x` scaled by a descale: `encode_f32(x / descale)`, the division in f32 (IEEE
/// correctly rounded, as `div.rn.f32` on the GPU).
pub fn encode_scaled(x: f32, descale: f32) -> u8 {
    encode_f32(x / descale)
}

/// Quantizes a BSHD-contiguous f32 tensor `[batch, seq, heads, dim]` to E4M3 with one
/// descale per (batch, head): descale = amax / 448 over the head's finite values (see
/// [`descale_for_amax`]), code = `encode_f32(x / descale)`. Returns the codes (same order as
/// the input) and the descales, indexed `b * heads + h`. NaN stays NaN (0x7F / 0xFF);
/// infinities saturate to ±448 · descale. Errors when `values.len()` does not match `dims`.
pub fn quantize(values: &[f32], dims: [usize; 4]) -> Result<(Vec<u8>, Vec<f32>)> {
    let amax = super::amax_per_head(values, dims)?;
    let descales: Vec<f32> = amax.into_iter().map(descale_for_amax).collect();
    let codes = super::encode_per_head(values, dims, &descales, encode_scaled);
    Ok((codes, descales))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Value of a magnitude code (0..=0x7E) from the format's definition, in f64 and with no
    /// bit tricks: kept independent of [`decode`].
    fn def_value(c: u8) -> f64 {
        let e = i32::from(c >> 3);
        let m = f64::from(c & 7);
        if e == 0 {
            m * 2f64.powi(-9)
        } else {
            (1.0 + m / 8.0) * 2f64.powi(e - 7)
        }
    }

    /// Slow reference encoder: search the 127 finite magnitudes for the two that bracket
    /// |x|, pick the nearer, ties to the even mantissa (code bit 0), saturate past 448.
    /// All arithmetic is exact in f64 (f32 values and E4M3 midpoints are short dyadics).
    fn slow_encode(x: f64, negative: bool) -> u8 {
        let sign = if negative { 0x80 } else { 0 };
        if x.is_nan() {
            return NAN;
        }
        let a = x.abs();
        if a >= 448.0 {
            return sign | 0x7E;
        }
        let lo = (0u8..=0x7E).filter(|&c| def_value(c) <= a).max().unwrap();
        let hi = lo + 1;
        let mid = (def_value(lo) + def_value(hi)) / 2.0;
        let c = if a < mid {
            lo
        } else if a > mid {
            hi
        } else if lo & 1 == 0 {
            lo
        } else {
            hi
        };
        sign | c
    }

    #[test]
    fn decode_all_codes() {
        for c in 0..=255u8 {
            let v = decode(c);
            assert_eq!(v.is_nan(), c & 0x7F == 0x7F, "code {c:#04x}");
            if c & 0x7F != 0x7F {
                assert_eq!(v.abs() as f64, def_value(c & 0x7F), "code {c:#04x}");
                assert_eq!(v.is_sign_negative(), c & 0x80 != 0);
            }
        }
        assert_eq!(decode(0x7E), MAX);
        assert_eq!(decode(0xFE), -MAX);
        assert_eq!(decode(0x01), 2f32.powi(-9));
        assert_eq!(decode(0x01), MIN_SUBNORMAL);
        assert_eq!(decode(0x08), 2f32.powi(-6));
        let finite: Vec<f32> = (0..=0x7Eu8).map(decode).collect();
        assert!(finite.windows(2).all(|w| w[0] < w[1]), "not monotonic");
        assert_eq!(finite.iter().cloned().fold(0f32, f32::max), 448.0);
    }

    #[test]
    fn encode_inverts_decode() {
        for c in 0..=255u8 {
            if c & 0x7F != 0x7F {
                assert_eq!(encode_f32(decode(c)), c, "code {c:#04x}");
                let h = half::f16::from_f32(decode(c));
                assert_eq!(encode_f16(h), c, "code {c:#04x} via f16");
            }
        }
        assert_eq!(encode_f32(f32::NAN), 0x7F);
        assert_eq!(
            encode_f32(-f32::NAN),
            0x7F,
            "NaN sign dropped, as the hardware does"
        );
        assert_eq!(encode_f32(0.0), 0x00);
        assert_eq!(encode_f32(-0.0), 0x80);
    }

    #[test]
    fn ties_round_to_even() {
        for c in 0..0x7Eu8 {
            let (lo, hi) = (decode(c), decode(c + 1));
            let mid = (lo + hi) / 2.0; // exact: both are short dyadics
            let even = if c & 1 == 0 { c } else { c + 1 };
            assert_eq!(
                encode_f32(mid),
                even,
                "tie between {c:#04x} and {:#04x}",
                c + 1
            );
            assert_eq!(encode_f32(-mid), 0x80 | even);
            // one f32 ulp either side of the tie leaves it
            assert_eq!(encode_f32(f32::from_bits(mid.to_bits() - 1)), c);
            assert_eq!(encode_f32(f32::from_bits(mid.to_bits() + 1)), c + 1);
        }
        // hand-picked: 17 lies halfway between 16 (0x58, m=0) and 18 (0x59, m=1) -> 16
        assert_eq!(encode_f32(17.0), 0x58);
        // 432 between 416 (m=5) and 448 (m=6) -> 448
        assert_eq!(encode_f32(432.0), 0x7E);
        // 2^-10 between 0 and 2^-9 -> 0; 3·2^-10 between 2^-9 and 2^-8 -> 2^-8 (0x02)
        assert_eq!(encode_f32(2f32.powi(-10)), 0x00);
        assert_eq!(encode_f32(3.0 * 2f32.powi(-10)), 0x02);
    }

    #[test]
    fn saturates() {
        for x in [
            448.0f32,
            449.0,
            463.9,
            464.0,
            480.0,
            1e9,
            f32::MAX,
            f32::INFINITY,
        ] {
            assert_eq!(encode_f32(x), 0x7E, "{x}");
            assert_eq!(encode_f32(-x), 0xFE, "{x}");
        }
        assert_eq!(encode_f16(half::f16::INFINITY), 0x7E);
        assert_eq!(encode_f16(half::f16::NEG_INFINITY), 0xFE);
        assert_eq!(encode_f16(half::f16::MAX), 0x7E);
    }

    #[test]
    fn exhaustive_f16_matches_slow_reference() {
        for bits in 0..=u16::MAX {
            let h = half::f16::from_bits(bits);
            let want = slow_encode(h.to_f64(), bits & 0x8000 != 0);
            assert_eq!(encode_f16(h), want, "f16 bits {bits:#06x} ({h})");
        }
    }

    #[test]
    fn random_f32_matches_slow_reference() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for i in 0..20_000 {
            // Alternate raw bit patterns (any exponent) and values near the E4M3 range.
            let x = if i % 2 == 0 {
                f32::from_bits(rng.random())
            } else {
                let e: i32 = rng.random_range(-12..10);
                let m: f32 = rng.random_range(1.0..2.0);
                if rng.random() {
                    -m * 2f32.powi(e)
                } else {
                    m * 2f32.powi(e)
                }
            };
            let want = slow_encode(f64::from(x), x.is_sign_negative());
            assert_eq!(encode_f32(x), want, "x = {x:e} ({:#010x})", x.to_bits());
        }
    }

    #[test]
    fn quantize_round_trip_within_half_step() {
        let dims = [2, 37, 3, 16];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut v: Vec<f32> = (0..2 * 37 * 3 * 16)
            .map(|_| rng.random_range(-3.0f32..3.0))
            .collect();
        v[5] = 40.0; // outlier: sets head (0, 0)'s scale
        v[200] = 1e-6; // deep in the subnormal range of its head
        let (codes, descales) = quantize(&v, dims).unwrap();
        assert_eq!(codes.len(), v.len());
        assert_eq!(descales.len(), 6);
        assert_eq!(descales[0], 40.0 / 448.0);
        for (i, (&x, &c)) in v.iter().zip(&codes).enumerate() {
            let b = i / (37 * 3 * 16);
            let h = (i / 16) % 3;
            let d = f64::from(descales[b * 3 + h]);
            let got = f64::from(decode(c)) * d;
            let x = f64::from(x);
            // half a step: 2^-4 relative for normals, 2^-10 · descale absolute for subnormals
            let bound = (x.abs() / 16.0).max(d / 1024.0) * (1.0 + 1e-6);
            assert!(
                (got - x).abs() <= bound,
                "i {i}: {x} -> {got}, bound {bound}"
            );
        }
        // each head's amax encodes to ±448
        assert_eq!(decode(codes[5]), 448.0);
    }

    #[test]
    fn quantize_edge_cases() {
        let dims = [1, 2, 2, 2];
        let v = [0.0, 0.0, 1.0, f32::NAN, -0.0, 0.0, f32::NEG_INFINITY, -2.0];
        let (codes, descales) = quantize(&v, dims).unwrap();
        // head 0 is all zeros: descale 1.0, codes zero (sign kept)
        assert_eq!(descales, vec![1.0, 2.0 / 448.0]);
        assert_eq!(codes[0], 0x00);
        assert_eq!(codes[4], 0x80);
        assert_eq!(codes[3], 0x7F); // NaN stays NaN
        assert_eq!(codes[6], 0xFE); // -inf saturates
        assert_eq!(codes[7], 0xFE); // -amax -> -448
        assert!(quantize(&v[..7], dims).is_err());
        assert_eq!(descale_for_amax(0.0), 1.0);
        assert_eq!(descale_for_amax(1e-45), 1.0);
        assert_eq!(descale_for_amax(f32::NAN), 1.0);
    }
}
