//! Attention computed with candle's tensor ops in f32: the CPU path of every entry point and
//! the reference the GPU tests compare against. Any head dim, dtype and layout; runs on any
//! device candle supports.

use crate::check::{self, err};
use candle_core::{DType, Result, Tensor, D};

/// Scaled-dot-product attention in f32, in candle-flash-attn's layout.
///
/// `q` is `[batch, seq_q, heads_q, head_dim]`, `k` and `v` are `[batch, seq_k, heads_kv,
/// head_dim]` of any float dtype, with `heads_q` a multiple of `heads_kv` (query head `h`
/// reads KV head `h / (heads_q / heads_kv)`). With `causal`, the mask is aligned bottom-right
/// as in FlashAttention: query `i` sees key `j` iff `j <= i + seq_k - seq_q`; a query that
/// sees no key (when `seq_q > seq_k`) gets a zero output row. Returns f32
/// `[batch, seq_q, heads_q, head_dim]`.
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let dev = Device::Cpu;
/// let q = Tensor::randn(0f32, 1., (1, 3, 4, 8), &dev)?;
/// let k = Tensor::randn(0f32, 1., (1, 5, 2, 8), &dev)?;
/// let v = Tensor::randn(0f32, 1., (1, 5, 2, 8), &dev)?;
/// let o = fp8_sdpa_candle::reference::attention(&q, &k, &v, 0.35, true)?;
/// assert_eq!(o.dims(), &[1, 3, 4, 8]);
/// assert_eq!(o.dtype(), DType::F32);
/// # Ok(())
/// # }
/// ```
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = "reference::attention";
    check::same_device(op, &[("q", q), ("k", k), ("v", v)])?;
    let [b, sq, hq, d] = check::dims4(op, "q", q)?;
    let kd = check::dims4(op, "k", k)?;
    if check::dims4(op, "v", v)? != kd || kd[0] != b || kd[3] != d {
        return Err(err(
            op,
            format!(
                "shapes q {:?}, k {:?}, v {:?} do not fit [batch, seq, heads, head_dim] attention",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        ));
    }
    let [_, sk, hkv, _] = kd;
    check::gqa(op, hq, hkv)?;
    // [b, h, s, d] so that matmul runs over (b, h).
    let q = q.to_dtype(DType::F32)?.transpose(1, 2)?.contiguous()?;
    let k = repeat_kv(&k.to_dtype(DType::F32)?.transpose(1, 2)?, hq / hkv)?;
    let v = repeat_kv(&v.to_dtype(DType::F32)?.transpose(1, 2)?, hq / hkv)?;
    let scores = (q.matmul(&k.t()?)? * f64::from(softmax_scale))?;
    let (scores, allowed) = if causal {
        let (bias, allowed) = causal_mask(sq, sk, q.device())?;
        (scores.broadcast_add(&bias)?, Some(allowed))
    } else {
        (scores, None)
    };
    let max = scores.max_keepdim(D::Minus1)?;
    let mut p = scores.broadcast_sub(&max)?.exp()?;
    if let Some(allowed) = allowed {
        // A fully masked row's max is itself masked, so its exp terms are ~1: zero them here.
        p = p.broadcast_mul(&allowed)?;
    }
    // A row that sees a key has sum >= 1 (its max term is exp(0)); an empty row has sum 0 and
    // p = 0, so the floor of 1 makes its output 0 instead of 0/0.
    let sum = p.sum_keepdim(D::Minus1)?.maximum(1f32)?;
    let o = p.matmul(&v)?.broadcast_div(&sum)?;
    o.transpose(1, 2)?.contiguous()
}

/// `[b, h_kv, s, d]` to `[b, h_kv * group, s, d]`, each KV head repeated for its query heads.
fn repeat_kv(x: &Tensor, group: usize) -> Result<Tensor> {
    if group == 1 {
        return x.contiguous();
    }
    let (b, h, s, d) = x.dims4()?;
    x.unsqueeze(2)?
        .broadcast_as((b, h, group, s, d))?
        .reshape((b, h * group, s, d))
}

/// The bottom-right causal mask as an additive bias (0 or a large negative, finite so that a
/// fully masked row does not produce inf - inf) and a 0/1 multiplier, both `[seq_q, seq_k]`.
fn causal_mask(seq_q: usize, seq_k: usize, dev: &candle_core::Device) -> Result<(Tensor, Tensor)> {
    let mut allowed = vec![0f32; seq_q * seq_k];
    for i in 0..seq_q {
        // j <= i + seq_k - seq_q, in signed arithmetic (negative: the row sees nothing).
        let last = i as i64 + seq_k as i64 - seq_q as i64;
        for j in 0..seq_k {
            if j as i64 <= last {
                allowed[i * seq_k + j] = 1.0;
            }
        }
    }
    let allowed = Tensor::from_vec(allowed, (seq_q, seq_k), dev)?;
    let bias = ((allowed.clone() - 1.0)? * 1e30)?;
    Ok((bias, allowed))
}

/// Variable-length attention in f32, in candle-flash-attn's varlen layout: the reference
/// [`crate::flash_attn_varlen`] computes on the CPU and is tested against on the GPU.
///
/// `q` is `[total_q, heads_q, head_dim]` and `k`, `v` are `[total_k, heads_kv, head_dim]`,
/// the sequences packed one after another; `seqlens_q` and `seqlens_k` are `U32`
/// `[batch + 1]` cumulative offsets (sequence `b` is query tokens `seqlens_q[b]..
/// seqlens_q[b + 1]` and keys `seqlens_k[b]..seqlens_k[b + 1]`). Each sequence attends to its
/// own keys only, through [`attention`] (so `causal` is bottom-right per sequence); a
/// sequence without keys gets zero rows. The offsets are read to the host (a synchronization
/// on a GPU device) and checked as in [`crate::flash_attn_varlen`] (there is no stated
/// maximum length here). Returns f32 `[total_q, heads_q, head_dim]`.
///
/// ```
/// use candle_core::{Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let dev = Device::Cpu;
/// // Two sequences: 3 queries over 5 keys, then 1 query over 2 keys.
/// let q = Tensor::randn(0f32, 1., (4, 4, 8), &dev)?;
/// let k = Tensor::randn(0f32, 1., (7, 2, 8), &dev)?;
/// let v = Tensor::randn(0f32, 1., (7, 2, 8), &dev)?;
/// let sq = Tensor::new(&[0u32, 3, 4], &dev)?;
/// let sk = Tensor::new(&[0u32, 5, 7], &dev)?;
/// let o = fp8_sdpa_candle::reference::attention_varlen(&q, &k, &v, &sq, &sk, 0.35, true)?;
/// assert_eq!(o.dims(), &[4, 4, 8]);
/// # Ok(())
/// # }
/// ```
pub fn attention_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = "reference::attention_varlen";
    check::same_device(
        op,
        &[
            ("q", q),
            ("k", k),
            ("v", v),
            ("seqlens_q", seqlens_q),
            ("seqlens_k", seqlens_k),
        ],
    )?;
    let [tq, hq, d] = check::dims3(op, "q", q)?;
    let kd = check::dims3(op, "k", k)?;
    if check::dims3(op, "v", v)? != kd || kd[2] != d {
        return Err(err(
            op,
            format!(
                "shapes q {:?}, k {:?}, v {:?} do not fit [total_tokens, heads, head_dim] attention",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        ));
    }
    let [tk, hkv, _] = kd;
    check::gqa(op, hq, hkv)?;
    let nq = check::offsets(op, "seqlens_q", seqlens_q)?;
    if check::offsets(op, "seqlens_k", seqlens_k)? != nq {
        return Err(err(
            op,
            format!(
                "seqlens_q {:?} and seqlens_k {:?} must both hold batch + 1 offsets",
                seqlens_q.shape(),
                seqlens_k.shape()
            ),
        ));
    }
    let cu_q = seqlens_q.to_vec1::<u32>()?;
    let cu_k = seqlens_k.to_vec1::<u32>()?;
    let dims = check::VarlenDims {
        batch: nq - 1,
        total_q: tq,
        total_k: tk,
        heads_q: hq,
        heads_kv: hkv,
        head_dim: d,
        // No stated maxima: ordered offsets ending at the totals bound every length.
        max_seqlen_q: usize::MAX,
        max_seqlen_k: usize::MAX,
    };
    check::offset_values(op, &cu_q, &cu_k, &dims)?;
    attention_varlen_at(q, k, v, &cu_q, &cu_k, softmax_scale, causal)
}

/// [`attention_varlen`] over offsets already read and checked.
pub(crate) fn attention_varlen_at(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cu_q: &[u32],
    cu_k: &[u32],
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let (_, hq, d) = q.dims3()?;
    let mut parts = Vec::with_capacity(cu_q.len() - 1);
    for (wq, wk) in cu_q.windows(2).zip(cu_k.windows(2)) {
        let (q0, nq) = (wq[0] as usize, (wq[1] - wq[0]) as usize);
        let (k0, nk) = (wk[0] as usize, (wk[1] - wk[0]) as usize);
        if nq == 0 {
            continue;
        }
        let part = if nk == 0 {
            Tensor::zeros((nq, hq, d), DType::F32, q.device())?
        } else {
            let seq = |t: &Tensor, start, len| t.narrow(0, start, len)?.unsqueeze(0);
            attention(
                &seq(q, q0, nq)?,
                &seq(k, k0, nk)?,
                &seq(v, k0, nk)?,
                softmax_scale,
                causal,
            )?
            .squeeze(0)?
        };
        parts.push(part);
    }
    Tensor::cat(&parts, 0)
}
