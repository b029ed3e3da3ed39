//! Deterministic test inputs: the same seed gives the same data on every machine
//! (ChaCha8), and the distributions aim at the places attention kernels break.

use fp8_sdpa::fp8::{e4m3, simfp8};
use fp8_sdpa::{AttnShape, DType, Error, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution as _, StandardNormal};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Shape of the generated values. Rows are consecutive runs of `row_len` values (a head's
/// `head_dim` in BSHD order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// Standard normal (unit variance): the seeds' gate is defined on these.
    #[default]
    Normal,
    /// Standard normal with one row in 8 scaled ×30: scores large enough to saturate the
    /// softmax to a near one-hot row, which tests the running max and rescaling.
    LargeRows,
    /// One constant per tensor (|c| in [0.5, 1), random sign) plus 1e-3 normal noise: nearly
    /// uniform attention and outputs that must come out as the constant.
    NearConstant,
    /// Standard normal with ±40 outliers (about one row in 32 carries one): the outlier sets
    /// the head's FP8 amax, so everything else is quantized on a coarse scale.
    Outliers,
}

impl Distribution {
    /// Every distribution.
    pub const ALL: [Distribution; 4] = [
        Distribution::Normal,
        Distribution::LargeRows,
        Distribution::NearConstant,
        Distribution::Outliers,
    ];

    /// The snake_case name (as in serde and [`FromStr`]).
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Normal => "normal",
            Distribution::LargeRows => "large_rows",
            Distribution::NearConstant => "near_constant",
            Distribution::Outliers => "outliers",
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Distribution {
    type Err = Error;

    /// Parses a name; `-` and `_` are interchangeable and case is ignored.
    fn from_str(s: &str) -> Result<Distribution> {
        let key = s.trim().to_ascii_lowercase().replace('-', "_");
        Distribution::ALL
            .into_iter()
            .find(|d| d.name() == key)
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "unknown distribution '{s}': expected normal, large_rows, near_constant \
                     or outliers"
                ))
            })
    }
}

/// Scale of [`Distribution::LargeRows`]' large rows.
pub const LARGE_ROW_SCALE: f32 = 30.0;
/// Magnitude of [`Distribution::Outliers`]' outliers.
pub const OUTLIER: f32 = 40.0;
/// Standard deviation of [`Distribution::NearConstant`]'s noise.
pub const NEAR_CONSTANT_NOISE: f32 = 1e-3;

/// `len` values from `seed` and `dist`, in rows of `row_len` (0 means one row of `len`; a
/// last partial row is allowed). Deterministic: the same arguments give the same values.
pub fn generate(seed: u64, len: usize, row_len: usize, dist: Distribution) -> Vec<f32> {
    generate_stream(seed, 0, len, row_len, dist)
}

/// Like [`generate`], from ChaCha stream `stream` of the seed: independent data for several
/// tensors of one case (stream 0 is what [`generate`] gives).
pub fn generate_stream(
    seed: u64,
    stream: u64,
    len: usize,
    row_len: usize,
    dist: Distribution,
) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    let row_len = if row_len == 0 { len.max(1) } else { row_len };
    let normal = |rng: &mut ChaCha8Rng| -> f32 { StandardNormal.sample(rng) };
    let mut out = Vec::with_capacity(len);
    match dist {
        Distribution::Normal => out.extend((0..len).map(|_| normal(&mut rng))),
        Distribution::LargeRows => {
            for start in (0..len).step_by(row_len) {
                let n = row_len.min(len - start);
                let k = if rng.random_ratio(1, 8) {
                    LARGE_ROW_SCALE
                } else {
                    1.0
                };
                out.extend((0..n).map(|_| k * normal(&mut rng)));
            }
        }
        Distribution::NearConstant => {
            let c: f32 = rng.random_range(0.5..1.0);
            let c = if rng.random() { c } else { -c };
            out.extend((0..len).map(|_| c + NEAR_CONSTANT_NOISE * normal(&mut rng)));
        }
        Distribution::Outliers => {
            for start in (0..len).step_by(row_len) {
                let n = row_len.min(len - start);
                let row = out.len();
                out.extend((0..n).map(|_| normal(&mut rng)));
                if rng.random_ratio(1, 32) {
                    let at = rng.random_range(0..n);
                    out[row + at] = if rng.random() { OUTLIER } else { -OUTLIER };
                }
            }
        }
    }
    out
}

/// Q, K and V for a shape (BSHD, rows of `head_dim`), from streams 0, 1 and 2 of `seed`.
pub fn generate_qkv(
    seed: u64,
    shape: &AttnShape,
    dist: Distribution,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = shape.head_dim;
    (
        generate_stream(seed, 0, shape.q_len(), d, dist),
        generate_stream(seed, 1, shape.kv_len(), d, dist),
        generate_stream(seed, 2, shape.kv_len(), d, dist),
    )
}

/// Encodes values to little-endian bytes of an unscaled type: f16 and bf16 round to nearest
/// even (NaN stays NaN, overflow becomes ±inf as the GPU's `cvt.rn` does), f32 is copied.
/// Scaled types need descales: use [`encode`] or the quantizers in [`fp8_sdpa::fp8`].
pub fn to_bytes(dtype: DType, values: &[f32]) -> Result<Vec<u8>> {
    Ok(match dtype {
        DType::F16 => values
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
        DType::Bf16 => values
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect(),
        DType::F32 => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::E4m3 | DType::SimFp8 => {
            return Err(Error::InvalidInput(format!(
                "{dtype} needs per-head descales: use inputs::encode or the fp8 quantizers"
            )));
        }
    })
}

/// A tensor encoded for the device.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// The element type.
    pub dtype: DType,
    /// Little-endian elements, BSHD order.
    pub bytes: Vec<u8>,
    /// Descales indexed `b * heads + h` for scaled types, `None` for the others.
    pub descales: Option<Vec<f32>>,
}

/// Encodes a BSHD-contiguous tensor `[batch, seq, heads, dim]` to any type: f16/bf16/f32
/// through [`to_bytes`], E4M3 and the simulated FP8 through their per-(batch, head)
/// quantizers ([`e4m3::quantize`], [`simfp8::quantize`]). Errors on a length mismatch and
/// (simulated FP8) on NaN.
pub fn encode(dtype: DType, values: &[f32], dims: [usize; 4]) -> Result<Encoded> {
    fp8_sdpa::fp8::check_len(values.len(), dims, "tensor")?;
    let (bytes, descales) = match dtype {
        DType::E4m3 => {
            let (c, d) = e4m3::quantize(values, dims)?;
            (c, Some(d))
        }
        DType::SimFp8 => {
            let (c, d) = simfp8::quantize(values, dims)?;
            (c, Some(d))
        }
        _ => (to_bytes(dtype, values)?, None),
    };
    Ok(Encoded {
        dtype,
        bytes,
        descales,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_std(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v.iter().map(|&x| (f64::from(x) - m).powi(2)).sum::<f64>() / n;
        (m, var.sqrt())
    }

    #[test]
    fn deterministic_per_seed() {
        for d in Distribution::ALL {
            let a = generate(42, 1000, 64, d);
            assert_eq!(a, generate(42, 1000, 64, d), "{d}");
            assert_ne!(a, generate(43, 1000, 64, d), "{d}");
            assert_ne!(a, generate_stream(42, 1, 1000, 64, d), "{d}");
            assert_eq!(a.len(), 1000);
            // a prefix does not depend on the total length
            assert_eq!(&generate(42, 640, 64, d)[..], &a[..640], "{d}");
        }
        // pinned values: a change in the generator changes every test case downstream
        let v = generate(1, 3, 0, Distribution::Normal);
        assert_eq!(v, generate(1, 3, 3, Distribution::Normal));
        let bits: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        assert_eq!(bits, vec![3195042751, 3216283053, 1051361979]);
    }

    #[test]
    fn normal_has_unit_variance() {
        let v = generate(7, 64 * 1024, 64, Distribution::Normal);
        let (m, s) = mean_std(&v);
        assert!(m.abs() < 0.02 && (s - 1.0).abs() < 0.02, "mean {m} std {s}");
    }

    #[test]
    fn large_rows_are_scaled() {
        let v = generate(8, 64 * 1024, 64, Distribution::LargeRows);
        let rms: Vec<f64> = v.chunks(64).map(|r| mean_std(r).1).collect();
        let large = rms.iter().filter(|&&s| s > 10.0).count();
        let small = rms.iter().filter(|&&s| s < 2.0).count();
        assert_eq!(large + small, rms.len());
        let frac = large as f64 / rms.len() as f64;
        assert!((frac - 0.125).abs() < 0.03, "{frac}");
    }

    #[test]
    fn near_constant_is_constant() {
        let v = generate(9, 4096, 64, Distribution::NearConstant);
        let (m, s) = mean_std(&v);
        assert!((0.5..1.0).contains(&m.abs()), "{m}");
        assert!((s - 1e-3).abs() < 2e-4, "{s}");
    }

    #[test]
    fn outliers_per_head() {
        let v = generate(10, 64 * 4096, 64, Distribution::Outliers);
        let outliers = v.iter().filter(|x| x.abs() == OUTLIER).count();
        // one in 32 rows of 4096
        assert!((90..170).contains(&outliers), "{outliers}");
        assert!(v
            .iter()
            .filter(|x| x.abs() != OUTLIER)
            .all(|x| x.abs() < 8.0));
        assert!(v.contains(&OUTLIER) && v.contains(&-OUTLIER));
    }

    #[test]
    fn parses_names() {
        for d in Distribution::ALL {
            assert_eq!(d.name().parse::<Distribution>().unwrap(), d);
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
            assert_eq!(serde_json::from_str::<Distribution>(&json).unwrap(), d);
        }
        assert_eq!(
            "Large-Rows".parse::<Distribution>().unwrap(),
            Distribution::LargeRows
        );
        assert!("uniform".parse::<Distribution>().is_err());
    }

    #[test]
    fn qkv_streams_are_independent() {
        let s = AttnShape {
            batch: 1,
            seq_q: 4,
            seq_kv: 4,
            heads_q: 2,
            heads_kv: 2,
            head_dim: 8,
        };
        let (q, k, v) = generate_qkv(5, &s, Distribution::Normal);
        assert_eq!(q.len(), 64);
        assert_ne!(q, k);
        assert_ne!(k, v);
        assert_eq!(q, generate(5, 64, 8, Distribution::Normal));
    }

    #[test]
    fn bytes_round_to_nearest_even() {
        // 1 + 2^-11 is halfway between f16 1.0 and 1 + 2^-10: ties to even -> 1.0
        let x = [1.0 + 2f32.powi(-11), 65520.0, -0.0, f32::NAN];
        let b = to_bytes(DType::F16, &x).unwrap();
        assert_eq!(&b[0..2], &0x3C00u16.to_le_bytes());
        assert_eq!(&b[2..4], &0x7C00u16.to_le_bytes()); // overflow -> inf
        assert_eq!(&b[4..6], &0x8000u16.to_le_bytes());
        assert!(half::f16::from_le_bytes([b[6], b[7]]).is_nan());
        // bf16: 1 + 2^-8 halfway between 1.0 and 1 + 2^-7 -> 1.0; 1 + 3·2^-8 -> 1 + 2^-6
        let b = to_bytes(
            DType::Bf16,
            &[1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8)],
        )
        .unwrap();
        assert_eq!(&b[0..2], &0x3F80u16.to_le_bytes());
        assert_eq!(&b[2..4], &0x3F82u16.to_le_bytes());
        assert_eq!(
            to_bytes(DType::F32, &[1.5]).unwrap(),
            1.5f32.to_le_bytes().to_vec()
        );
        assert!(to_bytes(DType::E4m3, &[1.0]).is_err());
    }

    #[test]
    fn encode_all_types_round_trips_through_dequantize() {
        let dims = [2, 5, 3, 8];
        let v = generate(11, 240, 8, Distribution::Outliers);
        for dt in [
            DType::F16,
            DType::Bf16,
            DType::F32,
            DType::E4m3,
            DType::SimFp8,
        ] {
            let e = encode(dt, &v, dims).unwrap();
            assert_eq!(e.bytes.len(), 240 * dt.size());
            assert_eq!(e.descales.is_some(), dt.is_scaled());
            let back =
                fp8_sdpa::reference::dequantize(dt, &e.bytes, e.descales.as_deref(), dims, 3)
                    .unwrap();
            // worst relative step: bf16 2^-8, E4M3 2^-4; simfp8 half a step of amax/127
            for (i, (&x, &y)) in v.iter().zip(&back).enumerate() {
                let x = f64::from(x);
                let tol = match dt {
                    DType::F16 => x.abs() * 2f64.powi(-11),
                    DType::Bf16 => x.abs() * 2f64.powi(-8),
                    DType::F32 => 0.0,
                    DType::E4m3 => (x.abs() / 16.0).max(OUTLIER as f64 / 448.0 / 1024.0) * 1.01,
                    DType::SimFp8 => {
                        let b = i / 120;
                        let h = (i / 8) % 3;
                        0.5 * f64::from(e.descales.as_ref().unwrap()[b * 3 + h]) * 1.0001
                    }
                };
                assert!((x - y).abs() <= tol, "{dt} element {i}: {x} -> {y}");
            }
        }
        assert!(encode(DType::F16, &v[1..], dims).is_err());
    }
}
