//! Input checks shared by every entry point, run before any device work and the same on CPU
//! and GPU, so that code developed on CPU tensors fails the same way on the GPU. Every failure
//! is a candle [`Error::Msg`] naming the operation, the tensor, what is wrong and the fix.

use candle_core::{DType, Error, Result, Tensor};

/// Head dims the kernels are built for.
pub(crate) const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// An error of operation `op`, in candle's style (with a backtrace when enabled).
pub(crate) fn err(op: &str, msg: impl std::fmt::Display) -> Error {
    Error::Msg(format!("{op}: {msg}")).bt()
}

/// The sizes of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttnDims {
    pub batch: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
}

/// What K and V must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KvKind {
    /// The same 16-bit dtype as Q.
    LikeQ,
    /// E4M3 codes (candle's `F8E4M3`).
    E4m3,
}

/// The four dims of a `[batch, seq, heads, head_dim]` tensor, none of them zero.
pub(crate) fn dims4(op: &str, name: &str, t: &Tensor) -> Result<[usize; 4]> {
    let d = t.dims();
    let &[b, s, h, hd] = d else {
        return Err(err(
            op,
            format!(
                "{name} must have rank 4 [batch, seq, heads, head_dim] (candle-flash-attn's layout), \
                 got shape {:?}; for [batch, heads, seq, head_dim] call .transpose(1, 2)",
                t.shape()
            ),
        ));
    };
    if d.contains(&0) {
        return Err(err(
            op,
            format!(
                "{name} has a zero-length dim (shape {:?}); every dim must be >= 1",
                t.shape()
            ),
        ));
    }
    Ok([b, s, h, hd])
}

/// Q's dtype: fp16 or bf16.
pub(crate) fn half_dtype(op: &str, name: &str, t: &Tensor) -> Result<()> {
    match t.dtype() {
        DType::F16 | DType::BF16 => Ok(()),
        other => Err(err(
            op,
            format!(
                "{name} must be F16 or BF16, got {other:?}; convert with .to_dtype(DType::F16)"
            ),
        )),
    }
}

/// The memory layout the kernels read: last dim contiguous, every other stride and the start
/// offset a multiple of 16 bytes (the kernels load 16 bytes at a time). Views such as
/// `transpose(1, 2)` or `narrow` on the seq dim keep this; a narrowed head dim does not.
pub(crate) fn layout(op: &str, name: &str, t: &Tensor) -> Result<()> {
    layout_of(op, name, t, &["batch", "seq", "heads"])
}

/// [`layout`] for a tensor whose dims before the head dim are named `outer` (`[batch, seq,
/// heads]` or, packed, `[tokens, heads]`).
pub(crate) fn layout_of(op: &str, name: &str, t: &Tensor, outer: &[&str]) -> Result<()> {
    let l = t.layout();
    let size = t.dtype().size_in_bytes();
    let (dims, stride) = (l.dims(), l.stride());
    let last = outer.len();
    if stride[last] != 1 && dims[last] > 1 {
        return Err(err(
            op,
            format!(
                "{name}'s last dim must be contiguous (stride 1), got strides {stride:?}; call .contiguous()"
            ),
        ));
    }
    for (i, what) in outer.iter().enumerate() {
        if dims[i] > 1 && !(stride[i] * size).is_multiple_of(16) {
            return Err(err(
                op,
                format!(
                    "{name}'s {what} stride is {} elements ({} bytes), not a multiple of 16 bytes \
                     (strides {stride:?}); call .contiguous()",
                    stride[i],
                    stride[i] * size
                ),
            ));
        }
    }
    if !(l.start_offset() * size).is_multiple_of(16) {
        return Err(err(
            op,
            format!(
                "{name} starts {} elements into its storage, not at a multiple of 16 bytes; call .contiguous()",
                l.start_offset()
            ),
        ));
    }
    Ok(())
}

/// All tensors on one device.
pub(crate) fn same_device(op: &str, ts: &[(&str, &Tensor)]) -> Result<()> {
    let (n0, t0) = ts[0];
    for (n, t) in &ts[1..] {
        if !t.device().same_device(t0.device()) {
            return Err(err(
                op,
                format!(
                    "{n} is on {:?} but {n0} is on {:?}; move them to one device with .to_device()",
                    t.device().location(),
                    t0.device().location()
                ),
            ));
        }
    }
    Ok(())
}

/// A softmax scale the kernels accept.
pub(crate) fn scale(op: &str, s: f32) -> Result<()> {
    if !(s.is_finite() && s > 0.0) {
        return Err(err(
            op,
            format!(
                "softmax_scale must be finite and > 0, got {s}; the usual one is 1/sqrt(head_dim)"
            ),
        ));
    }
    Ok(())
}

/// A head dim the kernels are built for.
pub(crate) fn head_dim(op: &str, d: usize) -> Result<()> {
    if !HEAD_DIMS.contains(&d) {
        return Err(err(
            op,
            format!(
                "head_dim {d} is not supported; use 64, 128 or 256 (pad the head dim with zeros)"
            ),
        ));
    }
    Ok(())
}

/// A page size the paged kernels take (16..=256 tokens).
pub(crate) fn page_size(op: &str, p: usize) -> Result<()> {
    if !fp8_sdpa::runtime::validate::PAGE_SIZES.contains(&p) {
        return Err(err(op, format!("page_size {p} must be 16..=256 tokens")));
    }
    Ok(())
}

/// A cache's headroom factor on its derived descales: finite and >= 1.
pub(crate) fn headroom(op: &str, h: f32) -> Result<()> {
    if !(h.is_finite() && h >= 1.0) {
        return Err(err(
            op,
            format!("headroom must be finite and >= 1, got {h}"),
        ));
    }
    Ok(())
}

/// GQA/MQA grouping: each KV head serves `heads_q / heads_kv` query heads.
pub(crate) fn gqa(op: &str, heads_q: usize, heads_kv: usize) -> Result<()> {
    if !heads_q.is_multiple_of(heads_kv) {
        return Err(err(
            op,
            format!(
                "heads of q ({heads_q}) must be a multiple of heads of k/v ({heads_kv}) (MHA, GQA or MQA)"
            ),
        ));
    }
    Ok(())
}

/// Checks Q, K, V of an attention call and returns its sizes.
pub(crate) fn qkv(op: &str, q: &Tensor, k: &Tensor, v: &Tensor, kv: KvKind) -> Result<AttnDims> {
    same_device(op, &[("q", q), ("k", k), ("v", v)])?;
    let [batch, seq_q, heads_q, hd] = dims4(op, "q", q)?;
    let kd = dims4(op, "k", k)?;
    let vd = dims4(op, "v", v)?;
    half_dtype(op, "q", q)?;
    for (n, t) in [("k", k), ("v", v)] {
        let want = match kv {
            KvKind::LikeQ => q.dtype(),
            KvKind::E4m3 => DType::F8E4M3,
        };
        if t.dtype() != want {
            let fix = match kv {
                KvKind::LikeQ => "k and v must have q's dtype; for E4M3 K/V use flash_attn_fp8kv",
                KvKind::E4m3 => "quantize K/V with quantize_e4m3, or use flash_attn for 16-bit K/V",
            };
            return Err(err(
                op,
                format!("{n} is {:?} but must be {want:?} here; {fix}", t.dtype()),
            ));
        }
    }
    if kd != vd {
        return Err(err(
            op,
            format!("k shape {kd:?} and v shape {vd:?} differ; they must match"),
        ));
    }
    let [kb, seq_k, heads_kv, khd] = kd;
    if kb != batch {
        return Err(err(
            op,
            format!("q has batch {batch} but k/v have batch {kb}"),
        ));
    }
    if khd != hd {
        return Err(err(
            op,
            format!("q has head_dim {hd} but k/v have head_dim {khd}"),
        ));
    }
    head_dim(op, hd)?;
    gqa(op, heads_q, heads_kv)?;
    for (n, t) in [("q", q), ("k", k), ("v", v)] {
        layout(op, n, t)?;
    }
    Ok(AttnDims {
        batch,
        seq_q,
        seq_k,
        heads_q,
        heads_kv,
        head_dim: hd,
    })
}

/// Checks an fp32 descale of `heads` values (`[heads]`, one per head) or `batch * heads`
/// (`[batch, heads]`); returns its batch stride in the kernels' terms (0 or `heads`).
pub(crate) fn descale(
    op: &str,
    name: &str,
    t: &Tensor,
    batch: usize,
    heads: usize,
) -> Result<usize> {
    if t.dtype() != DType::F32 {
        return Err(err(
            op,
            format!(
                "{name} must be F32, got {:?}; convert with .to_dtype(DType::F32)",
                t.dtype()
            ),
        ));
    }
    let stride = match t.dims() {
        [h] if *h == heads => 0,
        [b, h] if *b == batch && *h == heads => heads,
        _ => {
            return Err(err(
                op,
                format!(
                    "{name} has shape {:?}; it must be [heads_kv] = [{heads}] (one per head) or \
                     [batch, heads_kv] = [{batch}, {heads}]",
                    t.shape()
                ),
            ))
        }
    };
    if !t.is_contiguous() {
        return Err(err(
            op,
            format!("{name} must be contiguous; call .contiguous()"),
        ));
    }
    Ok(stride)
}

/// Descale values, where they can be read without a device synchronization (CPU tensors):
/// finite and > 0, as the kernels require.
pub(crate) fn descale_values(op: &str, name: &str, t: &Tensor) -> Result<()> {
    if !t.device().is_cpu() {
        return Ok(());
    }
    let vals = t.flatten_all()?.to_vec1::<f32>()?;
    if let Some((i, x)) = vals
        .iter()
        .enumerate()
        .find(|(_, x)| !(x.is_finite() && **x > 0.0))
    {
        return Err(err(
            op,
            format!(
                "{name}[{i}] is {x}; every descale must be finite and > 0 (amax / 448 of its head)"
            ),
        ));
    }
    Ok(())
}

/// The sizes of a variable-length call: `batch` sequences packed into `total_q` query and
/// `total_k` key tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VarlenDims {
    pub batch: usize,
    pub total_q: usize,
    pub total_k: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub max_seqlen_q: usize,
    pub max_seqlen_k: usize,
}

/// The three dims of a packed `[total_tokens, heads, head_dim]` tensor, none of them zero.
pub(crate) fn dims3(op: &str, name: &str, t: &Tensor) -> Result<[usize; 3]> {
    let d = t.dims();
    let &[n, h, hd] = d else {
        return Err(err(
            op,
            format!(
                "{name} must have rank 3 [total_tokens, heads, head_dim] (the sequences packed one \
                 after another, candle-flash-attn's varlen layout), got shape {:?}; for \
                 [batch, seq, heads, head_dim] call .flatten(0, 1) or use flash_attn",
                t.shape()
            ),
        ));
    };
    if d.contains(&0) {
        return Err(err(
            op,
            format!(
                "{name} has a zero-length dim (shape {:?}); every dim must be >= 1",
                t.shape()
            ),
        ));
    }
    Ok([n, h, hd])
}

/// A cumulative-offsets tensor (`seqlens_q`, `seqlens_k`): `U32`, rank 1, `batch + 1 >= 2`
/// entries, contiguous. Returns its length.
pub(crate) fn offsets(op: &str, name: &str, t: &Tensor) -> Result<usize> {
    if t.dtype() != DType::U32 {
        return Err(err(
            op,
            format!(
                "{name} must be U32 (cumulative offsets, as in candle-flash-attn), got {:?}; \
                 convert with .to_dtype(DType::U32)",
                t.dtype()
            ),
        ));
    }
    let &[n] = t.dims() else {
        return Err(err(
            op,
            format!(
                "{name} must have rank 1 [batch + 1] (0, then the running total of the \
                 sequences' lengths), got shape {:?}",
                t.shape()
            ),
        ));
    };
    if n < 2 {
        return Err(err(
            op,
            format!(
                "{name} holds {n} offsets; it needs batch + 1 >= 2 (0, then the running total of \
                 the sequences' lengths)"
            ),
        ));
    }
    if !t.is_contiguous() {
        return Err(err(
            op,
            format!("{name} must be contiguous; call .contiguous()"),
        ));
    }
    Ok(n)
}

/// Checks the tensors and sizes of a variable-length call (not the offsets' values: see
/// [`offset_values`]) and returns its sizes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn varlen(
    op: &str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
) -> Result<VarlenDims> {
    same_device(
        op,
        &[
            ("q", q),
            ("k", k),
            ("v", v),
            ("seqlens_q", seqlens_q),
            ("seqlens_k", seqlens_k),
        ],
    )?;
    let [total_q, heads_q, hd] = dims3(op, "q", q)?;
    let kd = dims3(op, "k", k)?;
    let vd = dims3(op, "v", v)?;
    half_dtype(op, "q", q)?;
    for (n, t) in [("k", k), ("v", v)] {
        if t.dtype() != q.dtype() {
            return Err(err(
                op,
                format!(
                    "{n} is {:?} but must be {:?} here; k and v must have q's dtype",
                    t.dtype(),
                    q.dtype()
                ),
            ));
        }
    }
    if kd != vd {
        return Err(err(
            op,
            format!("k shape {kd:?} and v shape {vd:?} differ; they must match"),
        ));
    }
    let [total_k, heads_kv, khd] = kd;
    if khd != hd {
        return Err(err(
            op,
            format!("q has head_dim {hd} but k/v have head_dim {khd}"),
        ));
    }
    head_dim(op, hd)?;
    gqa(op, heads_q, heads_kv)?;
    for (n, t) in [("q", q), ("k", k), ("v", v)] {
        layout_of(op, n, t, &["token", "heads"])?;
    }
    let nq = offsets(op, "seqlens_q", seqlens_q)?;
    let nk = offsets(op, "seqlens_k", seqlens_k)?;
    if nq != nk {
        return Err(err(
            op,
            format!(
                "seqlens_q holds {nq} offsets but seqlens_k {nk}; both hold batch + 1, one more \
                 than the sequences"
            ),
        ));
    }
    let batch = nq - 1;
    if batch > 65535 {
        return Err(err(
            op,
            format!("{batch} sequences exceed the launch limit of 65535; split the batch"),
        ));
    }
    if max_seqlen_q == 0 || max_seqlen_q > total_q {
        return Err(err(
            op,
            format!(
                "max_seqlen_q = {max_seqlen_q} must be 1..={total_q} (q's tokens); pass the \
                 longest sequence's query length"
            ),
        ));
    }
    if max_seqlen_k > total_k {
        return Err(err(
            op,
            format!(
                "max_seqlen_k = {max_seqlen_k} exceeds k's {total_k} tokens; pass the longest \
                 sequence's key count"
            ),
        ));
    }
    Ok(VarlenDims {
        batch,
        total_q,
        total_k,
        heads_q,
        heads_kv,
        head_dim: hd,
        max_seqlen_q,
        max_seqlen_k,
    })
}

/// Checks the offsets' values, read on the host, with fp8-sdpa's own check (the one its varlen
/// entry point runs on the device's copy): each array starts at 0, never decreases, ends at
/// its packed tensor's token count, and no sequence is longer than the stated maximum. The
/// u32 offsets are read as the i32 the kernels take (a value above `i32::MAX` reads negative).
pub(crate) fn offset_values(op: &str, cu_q: &[u32], cu_k: &[u32], d: &VarlenDims) -> Result<()> {
    let as_i32 = |c: &[u32]| c.iter().map(|&x| x as i32).collect::<Vec<i32>>();
    fp8_sdpa::runtime::validate::check_cu_seqlens(
        &as_i32(cu_q),
        &as_i32(cu_k),
        [d.total_q, d.total_k],
        [d.max_seqlen_q, d.max_seqlen_k],
    )
    .map(|_| ())
    .map_err(|e| varlen_err(op, e))
}

/// An fp8-sdpa error of a varlen call as a candle error: bad input (the offsets, found by its
/// check) as [`err`] with the library's `cu_seqlens_*` named as candle-flash-attn's
/// `seqlens_*`, anything else as the CUDA error it is.
pub(crate) fn varlen_err(op: &str, e: fp8_sdpa::Error) -> Error {
    match e {
        fp8_sdpa::Error::InvalidInput(m) => err(op, m.replace("cu_seqlens_", "seqlens_")),
        other => Error::Cuda(format!("{op}: {other}").into()).bt(),
    }
}
