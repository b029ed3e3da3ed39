//! Shared test helpers: deterministic inputs and a naive float64 attention.
#![allow(dead_code)] // each test binary uses its own subset

use candle_core::{DType, Device, Result, Tensor};
use rand::{Rng, SeedableRng};

/// A `[b, s, h, d]` tensor of uniform values in [-amp, amp), from `seed`, as `dtype` on `dev`.
pub fn uniform(
    shape: [usize; 4],
    amp: f32,
    seed: u64,
    dtype: DType,
    dev: &Device,
) -> Result<Tensor> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let vals: Vec<f32> = (0..n).map(|_| rng.random_range(-amp..amp)).collect();
    Tensor::from_vec(vals, shape.as_slice(), &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(dev)
}

/// A tensor's values as f64 in row-major order of its logical shape.
pub fn values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_device(&Device::Cpu)?
        .to_dtype(DType::F64)?
        .flatten_all()?
        .to_vec1::<f64>()
}

/// Textbook attention in f64 over BSHD tensors: GQA by `h / (hq / hkv)`, bottom-right causal
/// (`j <= i + sk - sq`), zero rows for queries that see no key.
pub fn naive(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32, causal: bool) -> Result<Vec<f64>> {
    let (b, sq, hq, d) = q.dims4()?;
    let (_, sk, hkv, _) = k.dims4()?;
    let (qv, kv, vv) = (values(q)?, values(k)?, values(v)?);
    let mut out = vec![0f64; b * sq * hq * d];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / (hq / hkv);
            for i in 0..sq {
                let last = i as i64 + sk as i64 - sq as i64;
                let keys: Vec<usize> = (0..sk).filter(|&j| !causal || j as i64 <= last).collect();
                if keys.is_empty() {
                    continue;
                }
                let qi = &qv[((bi * sq + i) * hq + h) * d..][..d];
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        let kj = &kv[((bi * sk + j) * hkv + kh) * d..][..d];
                        qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>() * f64::from(scale)
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let l: f64 = p.iter().sum();
                let o = &mut out[((bi * sq + i) * hq + h) * d..][..d];
                for (pj, &j) in p.iter().zip(&keys) {
                    let vj = &vv[((bi * sk + j) * hkv + kh) * d..][..d];
                    for (oe, ve) in o.iter_mut().zip(vj) {
                        *oe += pj / l * ve;
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Largest |a - b| over two equally long vectors.
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// The message of an error that must occur.
pub fn err_msg<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.to_string(),
    }
}

/// A packed `[n, h, d]` tensor of uniform values in [-amp, amp), from `seed`.
pub fn uniform3(
    [n, h, d]: [usize; 3],
    amp: f32,
    seed: u64,
    dtype: DType,
    dev: &Device,
) -> Result<Tensor> {
    uniform([1, n, h, d], amp, seed, dtype, dev)?.squeeze(0)
}

/// Cumulative offsets `[0, l0, l0 + l1, ...]` of sequence lengths.
pub fn cumulative(lens: &[usize]) -> Vec<u32> {
    let mut cu = vec![0u32];
    for &l in lens {
        cu.push(cu[cu.len() - 1] + l as u32);
    }
    cu
}

/// [`naive`] per sequence over packed `[total, heads, dim]` tensors cut by cumulative
/// offsets; a sequence without keys gives zero rows.
pub fn naive_varlen(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    cu_q: &[u32],
    cu_k: &[u32],
    scale: f32,
    causal: bool,
) -> Result<Vec<f64>> {
    let (_, hq, d) = q.dims3()?;
    let mut out = Vec::new();
    for (wq, wk) in cu_q.windows(2).zip(cu_k.windows(2)) {
        let (q0, nq) = (wq[0] as usize, (wq[1] - wq[0]) as usize);
        let (k0, nk) = (wk[0] as usize, (wk[1] - wk[0]) as usize);
        if nq == 0 {
            continue;
        }
        if nk == 0 {
            out.extend(std::iter::repeat_n(0.0, nq * hq * d));
            continue;
        }
        let seq = |t: &Tensor, s, n| t.narrow(0, s, n)?.unsqueeze(0);
        out.extend(naive(
            &seq(q, q0, nq)?,
            &seq(k, k0, nk)?,
            &seq(v, k0, nk)?,
            scale,
            causal,
        )?);
    }
    Ok(out)
}
