//! Validation of an attention call, before any launch. Every bad input of SPEC.md's
//! Reliability list is a typed [`Error::InvalidInput`] naming the tensor and the fix.

use super::tensor::TensorDesc;
use crate::dtype::Precision;
use crate::error::{Error, Result};
use crate::problem::{AttnParams, AttnShape};
use crate::variant::HEAD_DIMS;

/// A descale vector as validation sees it: device address, length, batch stride.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescaleDesc {
    /// Device address.
    pub ptr: u64,
    /// Elements.
    pub len: usize,
    /// 0: one descale per head, broadcast over the batch; `heads`: one per (batch, head).
    pub batch_stride: usize,
}

/// Everything about a call that validation checks.
#[derive(Debug, Clone, Copy)]
pub struct CallDesc {
    /// Query.
    pub q: TensorDesc,
    /// Keys.
    pub k: TensorDesc,
    /// Values.
    pub v: TensorDesc,
    /// Output.
    pub o: TensorDesc,
    /// Log-sum-exp output (address, length), fp32 `[batch, heads_q, seq_q]`.
    pub lse: Option<(u64, usize)>,
    /// Descales of Q, K, V.
    pub descales: [Option<DescaleDesc>; 3],
    /// Scale and mask.
    pub params: AttnParams,
}

/// What a valid call is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Validated {
    /// The precision path.
    pub precision: Precision,
    /// The sizes.
    pub shape: AttnShape,
}

fn bad<T>(msg: String) -> Result<T> {
    Err(Error::InvalidInput(msg))
}

/// Byte range `[start, end)` a tensor's elements span.
fn span(t: &TensorDesc) -> (u64, u64) {
    let last: usize = (0..4)
        .map(|i| (t.shape[i].saturating_sub(1)) * t.strides[i])
        .sum();
    (t.ptr, t.ptr + ((last + 1) * t.dtype.size()) as u64)
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

fn check_tensor(name: &str, t: &TensorDesc) -> Result<()> {
    let [b, s, h, d] = t.shape;
    if b == 0 || s == 0 || h == 0 || d == 0 {
        return bad(format!(
            "{name} has a zero-length dimension (shape {:?}); every dim must be >= 1",
            t.shape
        ));
    }
    if t.strides[3] != 1 {
        return bad(format!("{name}'s last dim must be contiguous (stride 1), got stride {}; make it contiguous first", t.strides[3]));
    }
    if !t.ptr.is_multiple_of(16) {
        return bad(format!(
            "{name}'s device pointer {:#x} is not 16-byte aligned; kernels load 16 bytes at a time",
            t.ptr
        ));
    }
    for (i, dim) in ["batch", "seq", "head"].iter().enumerate() {
        if !(t.strides[i] * t.dtype.size()).is_multiple_of(16) && t.shape[i] > 1 {
            return bad(format!(
                "{name}'s {dim} stride ({} elements = {} bytes) is not a multiple of 16 bytes; every row must start 16-byte aligned",
                t.strides[i],
                t.strides[i] * t.dtype.size()
            ));
        }
    }
    let (start, end) = span(t);
    if (end - start) as usize > t.bytes {
        return bad(format!(
            "{name} with shape {:?} and strides {:?} spans {} bytes but its buffer holds {}",
            t.shape,
            t.strides,
            end - start,
            t.bytes
        ));
    }
    if s > i32::MAX as usize || b > 65535 || h > 65535 {
        return bad(format!(
            "{name}'s shape {:?} exceeds the launch limits (batch and heads <= 65535, seq < 2^31)",
            t.shape
        ));
    }
    Ok(())
}

/// Checks a call; returns its precision and shape.
pub fn validate(c: &CallDesc) -> Result<Validated> {
    let (q, k, v, o) = (&c.q, &c.k, &c.v, &c.o);
    let Some(precision) = Precision::from_types(q.dtype, k.dtype) else {
        return bad(format!(
            "no precision path takes Q {} with K {}; supported: f16/f16, bf16/bf16, f16|bf16 with e4m3 K/V, e4m3/e4m3, simfp8/simfp8",
            q.dtype, k.dtype
        ));
    };
    if v.dtype != k.dtype {
        return bad(format!(
            "K is {} but V is {}; they must match",
            k.dtype, v.dtype
        ));
    }
    if o.dtype != precision.out() {
        return bad(format!(
            "the {precision} path writes O as {}, but O is {}",
            precision.out(),
            o.dtype
        ));
    }
    for (n, t) in [("Q", q), ("K", k), ("V", v), ("O", o)] {
        check_tensor(n, t)?;
    }
    let [batch, seq_q, heads_q, d] = q.shape;
    let [kb, seq_kv, heads_kv, kd] = k.shape;
    if k.shape != v.shape {
        return bad(format!(
            "K shape {:?} and V shape {:?} differ",
            k.shape, v.shape
        ));
    }
    if o.shape != q.shape {
        return bad(format!(
            "O shape {:?} must equal Q shape {:?}",
            o.shape, q.shape
        ));
    }
    if kb != batch {
        return bad(format!("Q batch {batch} and K/V batch {kb} differ"));
    }
    if kd != d {
        return bad(format!("Q head dim {d} and K/V head dim {kd} differ"));
    }
    if !HEAD_DIMS.contains(&(d as u32)) {
        return bad(format!(
            "head dim {d} is not supported; use 64, 128 or 256 (pad the head dim)"
        ));
    }
    if heads_q % heads_kv != 0 {
        return bad(format!(
            "heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) for MHA/GQA/MQA"
        ));
    }
    if !(c.params.scale.is_finite() && c.params.scale > 0.0) {
        // The kernels take the row max before scaling, which is the scaled row max only
        // for a positive scale.
        return bad(format!(
            "softmax scale must be finite and > 0, got {}",
            c.params.scale
        ));
    }
    let o_span = span(o);
    for (n, t) in [("Q", q), ("K", k), ("V", v)] {
        if overlaps(o_span, span(t)) {
            return bad(format!(
                "O overlaps {n}; inputs are never modified, so give O its own buffer"
            ));
        }
    }
    let shape = AttnShape {
        batch,
        seq_q,
        seq_kv,
        heads_q,
        heads_kv,
        head_dim: d,
    };
    if let Some((ptr, len)) = c.lse {
        if len < shape.lse_len() {
            return bad(format!(
                "LSE holds {len} floats but needs batch*heads_q*seq_q = {}",
                shape.lse_len()
            ));
        }
        let l = (ptr, ptr + 4 * shape.lse_len() as u64);
        if ptr % 4 != 0 {
            return bad("LSE pointer is not 4-byte aligned".into());
        }
        for (n, t) in [("Q", q), ("K", k), ("V", v), ("O", o)] {
            if overlaps(l, span(t)) {
                return bad(format!("LSE overlaps {n}; give it its own buffer"));
            }
        }
    }
    let wants = [
        (q.dtype, heads_q, "Q"),
        (k.dtype, heads_kv, "K"),
        (v.dtype, heads_kv, "V"),
    ];
    for (i, (dtype, heads, n)) in wants.iter().enumerate() {
        match (&c.descales[i], dtype.is_scaled()) {
            (None, true) => return bad(format!("{n} is {dtype} and needs a descale vector ({heads} per-head values or batch*{heads})")),
            (Some(_), false) => return bad(format!("{n} is {dtype}, which takes no descale; pass none")),
            (Some(ds), true) => {
                let want = if ds.batch_stride == 0 {
                    *heads
                } else if ds.batch_stride == *heads {
                    batch * heads
                } else {
                    return bad(format!("{n} descale batch stride must be 0 (per head) or {heads} (per batch and head), got {}", ds.batch_stride));
                };
                if ds.len != want {
                    return bad(format!("{n} descale has {} values, expected {want}", ds.len));
                }
                if ds.ptr % 4 != 0 {
                    return bad(format!("{n} descale pointer is not 4-byte aligned"));
                }
            }
            (None, false) => {}
        }
    }
    Ok(Validated { precision, shape })
}

/// Checks descale values read back from the device: finite and > 0.
pub fn check_descale_values(name: &str, values: &[f32]) -> Result<()> {
    if let Some((i, x)) = values
        .iter()
        .enumerate()
        .find(|(_, x)| !(x.is_finite() && **x > 0.0))
    {
        return bad(format!(
            "{name} descale[{i}] = {x}; descales must be finite and > 0"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::problem::Layout;

    fn t(ptr: u64, dtype: DType, shape: [usize; 4]) -> TensorDesc {
        let [b, s, h] = Layout::Bshd.strides(shape[1], shape[2], shape[3]);
        let n = shape.iter().product::<usize>();
        TensorDesc {
            ptr,
            bytes: n * dtype.size(),
            dtype,
            shape,
            strides: [b, s, h, 1],
        }
    }

    fn call(dq: DType, dkv: DType, dout: DType) -> CallDesc {
        let g = 1 << 30;
        CallDesc {
            q: t(g, dq, [2, 17, 8, 64]),
            k: t(2 * g, dkv, [2, 33, 2, 64]),
            v: t(3 * g, dkv, [2, 33, 2, 64]),
            o: t(4 * g, dout, [2, 17, 8, 64]),
            lse: Some((5 * g, 2 * 8 * 17)),
            descales: [None, None, None],
            params: AttnParams {
                scale: 0.125,
                causal: true,
            },
        }
    }

    fn err(c: &CallDesc) -> String {
        validate(c).unwrap_err().to_string()
    }

    #[test]
    fn a_good_call_passes() {
        let v = validate(&call(DType::F16, DType::F16, DType::F16)).unwrap();
        assert_eq!(v.precision, Precision::F16);
        assert_eq!(v.shape.group(), 4);
        let mut c = call(DType::Bf16, DType::E4m3, DType::Bf16);
        let ds = Some(DescaleDesc {
            ptr: 6 << 30,
            len: 4,
            batch_stride: 2,
        });
        c.descales = [None, ds, ds];
        assert_eq!(validate(&c).unwrap().precision, Precision::Fp8KvBf16);
    }

    #[test]
    fn each_bad_input_is_named() {
        let base = call(DType::F16, DType::F16, DType::F16);
        let mut c = base;
        c.o.dtype = DType::Bf16;
        assert!(err(&c).contains("writes O as f16"));
        let mut c = base;
        c.q.dtype = DType::E4m3;
        assert!(err(&c).contains("no precision path"));
        let mut c = base;
        c.q.shape[2] = 7;
        c.o.shape[2] = 7;
        assert!(err(&c).contains("multiple of heads_kv"));
        let mut c = base;
        for x in [&mut c.q, &mut c.k, &mut c.v, &mut c.o] {
            x.shape[3] = 96;
            x.bytes *= 2;
        }
        assert!(err(&c).contains("head dim 96"));
        let mut c = base;
        c.k.strides[3] = 2;
        assert!(err(&c).contains("contiguous"));
        let mut c = base;
        c.v.ptr += 2;
        assert!(err(&c).contains("16-byte aligned"));
        let mut c = base;
        c.q.shape[1] = 0;
        assert!(err(&c).contains("zero-length"));
        let mut c = base;
        c.params.scale = f32::NAN;
        assert!(err(&c).contains("finite"));
        c.params.scale = -0.5;
        assert!(err(&c).contains("> 0"));
        let mut c = base;
        c.k.bytes -= 2;
        assert!(err(&c).contains("buffer holds"));
        let mut c = base;
        c.o.ptr = c.q.ptr;
        assert!(err(&c).contains("overlaps Q"));
        let mut c = base;
        c.lse = Some((c.lse.unwrap().0, 5));
        assert!(err(&c).contains("LSE holds 5"));
        let mut c = base;
        c.q.shape[0] = 70000;
        c.o.shape[0] = 70000;
        c.q.bytes = usize::MAX / 4;
        c.o.bytes = usize::MAX / 4;
        assert!(err(&c).contains("launch limits") || err(&c).contains("differ"));
    }

    #[test]
    fn descales_are_required_exactly_where_scaled() {
        let mut c = call(DType::F16, DType::E4m3, DType::F16);
        assert!(err(&c).contains("needs a descale"));
        let ds = Some(DescaleDesc {
            ptr: 6 << 30,
            len: 2,
            batch_stride: 0,
        });
        c.descales = [ds, ds, ds];
        assert!(err(&c).contains("takes no descale"));
        c.descales = [
            None,
            ds,
            Some(DescaleDesc {
                ptr: 6 << 30,
                len: 3,
                batch_stride: 0,
            }),
        ];
        assert!(err(&c).contains("expected 2"));
        assert!(check_descale_values("K", &[1.0, 0.0])
            .unwrap_err()
            .to_string()
            .contains("descale[1] = 0"));
        assert!(check_descale_values("K", &[f32::NAN]).is_err());
        assert!(check_descale_values("K", &[0.5, 2.0]).is_ok());
    }
}
