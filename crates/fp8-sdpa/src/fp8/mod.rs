//! FP8 codecs on the host: OCP E4M3 "fn" ([`e4m3`]) and the seeds' simulated FP8
//! ([`simfp8`]), each with a per-(batch, head) quantizer that returns the codes and the fp32
//! descales the kernels take (element value = decode(code) · descale, see `abi.cuh`).
//!
//! Both quantizers take a BSHD-contiguous f32 tensor `[batch, seq, heads, dim]` and return
//! descales indexed `b * heads + h` (a batch stride of `heads`, in the kernels' terms).

pub mod e4m3;
pub mod simfp8;

use crate::{Error, Result};

/// Number of elements of a `[batch, seq, heads, dim]` tensor, or an error if it overflows.
pub(crate) fn element_count(dims: [usize; 4]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::InvalidInput(format!("tensor dims {dims:?} overflow usize")))
}

/// Checks that `len` elements make a `[batch, seq, heads, dim]` tensor. Public (hidden) for
/// `sdpa-harness`, whose encoders check lengths the same way.
#[doc(hidden)]
pub fn check_len(len: usize, dims: [usize; 4], what: &str) -> Result<()> {
    let want = element_count(dims)?;
    if len != want {
        return Err(Error::InvalidInput(format!(
            "{what} has {len} elements but dims [batch, seq, heads, dim] = {dims:?} need {want}"
        )));
    }
    Ok(())
}

/// Largest finite |x| per (batch, head) of a BSHD tensor, indexed `b * heads + h`.
///
/// Non-finite values are left out: NaN has no magnitude, and letting an infinity set the
/// scale would flush every finite value of the head to zero (the infinity itself saturates).
pub(crate) fn amax_per_head(values: &[f32], dims: [usize; 4]) -> Result<Vec<f32>> {
    check_len(values.len(), dims, "tensor")?;
    let [batch, seq, heads, dim] = dims;
    let mut amax = vec![0f32; batch * heads];
    for b in 0..batch {
        for s in 0..seq {
            for h in 0..heads {
                let row = &values[((b * seq + s) * heads + h) * dim..][..dim];
                let m = &mut amax[b * heads + h];
                for &x in row {
                    if x.is_finite() {
                        *m = m.max(x.abs());
                    }
                }
            }
        }
    }
    Ok(amax)
}

/// Encodes every element of a BSHD tensor with the descale of its (batch, head).
pub(crate) fn encode_per_head(
    values: &[f32],
    dims: [usize; 4],
    descales: &[f32],
    encode: impl Fn(f32, f32) -> u8,
) -> Vec<u8> {
    let [_, seq, heads, dim] = dims;
    let row_stride = heads * dim.max(1);
    values
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            // i = ((b * seq + s) * heads + h) * dim + d
            let b = i / (seq * row_stride).max(1);
            let h = (i / dim.max(1)) % heads.max(1);
            encode(x, descales[b * heads + h])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amax_is_per_batch_and_head() {
        // [batch 2, seq 2, heads 2, dim 2]; element value encodes its own (b, h).
        let dims = [2, 2, 2, 2];
        let mut v = vec![0f32; 16];
        for b in 0..2 {
            for s in 0..2 {
                for h in 0..2 {
                    for d in 0..2 {
                        let i = ((b * 2 + s) * 2 + h) * 2 + d;
                        v[i] = (10 * b + h) as f32 + 0.1 * s as f32;
                    }
                }
            }
        }
        v[1] = f32::NAN;
        v[2] = f32::NEG_INFINITY;
        let a = amax_per_head(&v, dims).unwrap();
        assert_eq!(a, vec![0.1, 1.1, 10.1, 11.1]);
        assert!(amax_per_head(&v[1..], dims).is_err());
        assert!(check_len(0, [usize::MAX, 2, 1, 1], "t").is_err());
    }
}
