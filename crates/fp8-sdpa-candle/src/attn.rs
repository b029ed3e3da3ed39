//! The attention entry points, with candle-flash-attn's signatures and layout. CUDA tensors
//! run fp8-sdpa's kernels on candle's own stream (feature `cuda`); CPU tensors run the f32
//! reference ([`crate::reference::attention`]) and return Q's dtype.

use crate::check::{self, err, KvKind};
use candle_core::{Device, Error, Result, Tensor};

/// Fused attention over fp16/bf16 Q, K, V in candle-flash-attn's layout.
///
/// - `q`: `[batch, seq_q, heads_q, head_dim]`, `F16` or `BF16`;
/// - `k`, `v`: `[batch, seq_k, heads_kv, head_dim]`, Q's dtype, with `heads_q` a multiple of
///   `heads_kv` (MHA, GQA, MQA);
/// - `head_dim` 64, 128 or 256; last dim contiguous, other strides and the start offset
///   multiples of 16 bytes (so `transpose(1, 2)` and `narrow` views on seq or batch are read
///   in place, without a copy);
/// - `causal`: aligned bottom-right, as in FlashAttention 2.1+: query `i` sees key `j` iff
///   `j <= i + seq_k - seq_q` (a query that sees no key gets a zero row).
///
/// Returns a contiguous `[batch, seq_q, heads_q, head_dim]` tensor of Q's dtype. On CUDA the
/// call is queued on candle's stream without a synchronization; on the CPU it runs the f32
/// reference. Bad input is an [`Error`] saying what is wrong and how to fix it.
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// // Device::new_cuda(0)? with the `cuda` feature; the CPU runs the f32 reference.
/// let dev = Device::Cpu;
/// let q = Tensor::randn(0f32, 1., (1, 4, 8, 64), &dev)?.to_dtype(DType::F16)?;
/// let k = Tensor::randn(0f32, 1., (1, 6, 2, 64), &dev)?.to_dtype(DType::F16)?; // GQA 4
/// let v = Tensor::randn(0f32, 1., (1, 6, 2, 64), &dev)?.to_dtype(DType::F16)?;
/// let o = fp8_sdpa_candle::flash_attn(&q, &k, &v, 1.0 / 8.0, true)?;
/// assert_eq!((o.dims(), o.dtype()), (&[1usize, 4, 8, 64][..], DType::F16));
/// # Ok(())
/// # }
/// ```
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = "flash_attn";
    let dims = check::qkv(op, q, k, v, KvKind::LikeQ)?;
    check::scale(op, softmax_scale)?;
    match q.device() {
        Device::Cpu => {
            crate::reference::attention(q, k, v, softmax_scale, causal)?.to_dtype(q.dtype())
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::gpu::attn::flash_attn(q, k, v, None, dims, softmax_scale, causal),
        other => {
            let _ = dims;
            Err(unsupported_device(op, other))
        }
    }
}

/// Fused attention with E4M3 K/V: fp16/bf16 Q, K and V as candle `F8E4M3` codes with fp32
/// descales (`value = decode(code) * descale`). K/V take half the memory and bandwidth of
/// fp16; the kernels decode them on the fly and compute in Q's precision.
///
/// Shapes, layout and mask as in [`flash_attn`]; `k_descale` and `v_descale` are `F32`
/// `[heads_kv]` (one per head) or `[batch, heads_kv]`, contiguous, both the same form, every
/// value finite and > 0. [`crate::quantize_e4m3`] produces codes and descales from fp16/bf16.
/// Descale values are checked on the CPU; on CUDA they are not read back (that would
/// synchronize the stream), so a bad descale there gives a bad output, not an error.
///
/// Returns a contiguous `[batch, seq_q, heads_q, head_dim]` tensor of Q's dtype.
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// use fp8_sdpa_candle::{flash_attn_fp8kv, quantize_e4m3};
/// # fn main() -> candle_core::Result<()> {
/// let dev = Device::Cpu;
/// let q = Tensor::randn(0f32, 1., (2, 1, 8, 128), &dev)?.to_dtype(DType::BF16)?;
/// let k = Tensor::randn(0f32, 1., (2, 40, 8, 128), &dev)?.to_dtype(DType::BF16)?;
/// let v = Tensor::randn(0f32, 1., (2, 40, 8, 128), &dev)?.to_dtype(DType::BF16)?;
/// let (k8, k_descale) = quantize_e4m3(&k)?;
/// let (v8, v_descale) = quantize_e4m3(&v)?;
/// let o = flash_attn_fp8kv(&q, &k8, &v8, &k_descale, &v_descale, 128f32.powf(-0.5), false)?;
/// assert_eq!(o.dtype(), DType::BF16);
/// # Ok(())
/// # }
/// ```
pub fn flash_attn_fp8kv(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    k_descale: &Tensor,
    v_descale: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = "flash_attn_fp8kv";
    let dims = check::qkv(op, q, k, v, KvKind::E4m3)?;
    check::same_device(
        op,
        &[("q", q), ("k_descale", k_descale), ("v_descale", v_descale)],
    )?;
    let ks = check::descale(op, "k_descale", k_descale, dims.batch, dims.heads_kv)?;
    let vs = check::descale(op, "v_descale", v_descale, dims.batch, dims.heads_kv)?;
    if ks != vs {
        return Err(err(
            op,
            format!(
                "k_descale {:?} and v_descale {:?} must have the same form ([heads_kv] or [batch, heads_kv])",
                k_descale.shape(),
                v_descale.shape()
            ),
        ));
    }
    check::scale(op, softmax_scale)?;
    check::descale_values(op, "k_descale", k_descale)?;
    check::descale_values(op, "v_descale", v_descale)?;
    match q.device() {
        Device::Cpu => {
            let k = crate::dequantize_e4m3(k, k_descale)?;
            let v = crate::dequantize_e4m3(v, v_descale)?;
            crate::reference::attention(q, &k, &v, softmax_scale, causal)?.to_dtype(q.dtype())
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::gpu::attn::flash_attn(
            q,
            k,
            v,
            Some((k_descale, v_descale, ks)),
            dims,
            softmax_scale,
            causal,
        ),
        other => {
            let _ = dims;
            Err(unsupported_device(op, other))
        }
    }
}

/// Fused attention over a variable-length batch, with candle-flash-attn's
/// `flash_attn_varlen` signature and conventions: the sequences are packed one after another
/// without padding, and cumulative offsets say where each starts.
///
/// - `q`: `[total_q, heads_q, head_dim]`, `F16` or `BF16`; `k`, `v`: `[total_k, heads_kv,
///   head_dim]`, Q's dtype, `heads_q` a multiple of `heads_kv` (MHA, GQA, MQA); `head_dim`
///   64, 128 or 256; last dim contiguous, the token and head strides and the start offset
///   multiples of 16 bytes;
/// - `seqlens_q`, `seqlens_k`: `U32` `[batch + 1]` on the tensors' device, `0` then the
///   running total of the sequences' lengths: sequence `b` is the query tokens
///   `seqlens_q[b]..seqlens_q[b + 1]` and the keys `seqlens_k[b]..seqlens_k[b + 1]`. The
///   last offsets are `total_q` and `total_k`; values must fit in `i32`;
/// - `max_seqlen_q`, `max_seqlen_k`: the longest sequence's query and key counts (no
///   sequence may be longer);
/// - `causal`: per sequence, aligned bottom-right: query `i` of a sequence with `n_q` queries
///   and `n_k` keys sees key `j` iff `j <= i + n_k - n_q`. A query that sees no key (a
///   sequence without keys, or causal with `n_q > n_k`) gets a zero row.
///
/// Returns a contiguous `[total_q, heads_q, head_dim]` tensor of Q's dtype.
///
/// On CUDA this runs fp8-sdpa's varlen kernel (`Device::attention_varlen`: the decode family
/// for decode-shaped batches, else the portable family) in one call for the whole batch on
/// candle's stream. The `U32` offsets are read
/// in place as the `i32` the kernel takes (no conversion, no copy). Before the launch the
/// library reads the `2 * (batch + 1)` offsets back and checks them, one stream
/// synchronization per call, so that bad offsets are an error rather than wrong rows (the
/// kernel also clamps every offset to the packed tensors, so it never reads or writes outside
/// them). On the CPU it runs [`crate::reference::attention_varlen`] with the same checks.
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// // Device::new_cuda(0)? with the `cuda` feature; the CPU runs the f32 reference.
/// let dev = Device::Cpu;
/// // Three sequences: 5 queries over 5 keys (a prompt), 1 over 7 (a decode step), 2 over 2.
/// let seqlens_q = Tensor::new(&[0u32, 5, 6, 8], &dev)?;
/// let seqlens_k = Tensor::new(&[0u32, 5, 12, 14], &dev)?;
/// let q = Tensor::randn(0f32, 1., (8, 8, 64), &dev)?.to_dtype(DType::F16)?;
/// let k = Tensor::randn(0f32, 1., (14, 2, 64), &dev)?.to_dtype(DType::F16)?; // GQA 4
/// let v = Tensor::randn(0f32, 1., (14, 2, 64), &dev)?.to_dtype(DType::F16)?;
/// let o = fp8_sdpa_candle::flash_attn_varlen(
///     &q, &k, &v, &seqlens_q, &seqlens_k, 5, 7, 1.0 / 8.0, true,
/// )?;
/// assert_eq!((o.dims(), o.dtype()), (&[8usize, 8, 64][..], DType::F16));
/// # Ok(())
/// # }
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = "flash_attn_varlen";
    let dims = check::varlen(
        op,
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    )?;
    check::scale(op, softmax_scale)?;
    match q.device() {
        Device::Cpu => {
            let cu_q = seqlens_q.to_vec1::<u32>()?;
            let cu_k = seqlens_k.to_vec1::<u32>()?;
            check::offset_values(op, &cu_q, &cu_k, &dims)?;
            crate::reference::attention_varlen_at(q, k, v, &cu_q, &cu_k, softmax_scale, causal)?
                .to_dtype(q.dtype())
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::gpu::varlen::flash_attn_varlen(
            q,
            k,
            v,
            (seqlens_q, seqlens_k),
            dims,
            softmax_scale,
            causal,
        ),
        other => {
            let _ = dims;
            Err(unsupported_device(op, other))
        }
    }
}

/// The error for a device this build cannot run on.
pub(crate) fn unsupported_device(op: &str, dev: &Device) -> Error {
    match dev {
        Device::Cuda(_) => err(
            op,
            "fp8-sdpa-candle was built without its `cuda` feature; enable it \
             (fp8-sdpa-candle = { features = [\"cuda\"] }) or move the tensors to Device::Cpu",
        ),
        other => err(
            op,
            format!(
                "{:?} is not supported; use CUDA tensors, or CPU tensors for the f32 reference",
                other.location()
            ),
        ),
    }
}
