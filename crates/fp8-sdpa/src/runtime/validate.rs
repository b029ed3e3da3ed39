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
    check_tensor_limits(name, t, true)
}

/// `grid`: the tensor's batch and heads become grid dims (a paged cache's pages do not).
fn check_tensor_limits(name: &str, t: &TensorDesc, grid: bool) -> Result<()> {
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
    if s > i32::MAX as usize || (grid && b > 65535) || h > 65535 || b > i32::MAX as usize {
        return bad(format!(
            "{name}'s shape {:?} exceeds the launch limits (batch and heads <= 65535, seq < 2^31)",
            t.shape
        ));
    }
    Ok(())
}

/// A paged K/V cache's table as validation sees it: K and V of the call are then the page
/// pools `[pages, page_size, heads_kv, dim]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedDesc {
    /// Device address and length (i32 elements) of the block table `[batch, max_pages]`.
    pub block_table: (u64, usize),
    /// Pages per sequence in the block table.
    pub max_pages: usize,
    /// Device address and length of `seqlens_k` `[batch]`.
    pub seqlens_k: (u64, usize),
}

/// Page sizes the paged cache accepts (tokens per page).
pub const PAGE_SIZES: std::ops::RangeInclusive<usize> = 16..=256;

/// A variable-length batch as validation sees it: Q, K, V and O of the call are packed
/// tensors (`[1, total_tokens, heads, dim]`, see [`super::TensorRef::packed`]) and sequence b
/// is the tokens `cu_seqlens[b]..cu_seqlens[b + 1]` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarlenDesc {
    /// Device address and length (i32 elements) of `cu_seqlens_q` `[batch + 1]`.
    pub cu_seqlens_q: (u64, usize),
    /// Device address and length of `cu_seqlens_k` `[batch + 1]`.
    pub cu_seqlens_k: (u64, usize),
    /// The longest sequence's query tokens.
    pub max_seqlen_q: usize,
    /// The longest sequence's keys.
    pub max_seqlen_k: usize,
}

impl VarlenDesc {
    /// Sequences in the batch (`cu_seqlens_q` holds one more offset).
    pub fn batch(&self) -> usize {
        self.cu_seqlens_q.1.saturating_sub(1)
    }
}

/// Checks a call; returns its precision and shape.
pub fn validate(c: &CallDesc) -> Result<Validated> {
    validate_kv(c, None, None)
}

/// Checks a call over a paged K/V cache (`c.k`, `c.v` are the page pools); the shape's
/// `seq_kv` is the table's capacity, `max_pages * page_size`.
pub fn validate_paged(c: &CallDesc, paged: &PagedDesc) -> Result<Validated> {
    validate_kv(c, Some(paged), None)
}

/// Checks a variable-length call (`c`'s tensors packed, see [`VarlenDesc`]) without reading
/// the offsets (that needs the device: [`check_cu_seqlens`]). The shape's batch is the
/// sequence count, `seq_q` and `seq_kv` the stated maximum lengths; descales are per head
/// (batch stride 0) or per (sequence, head).
pub fn validate_varlen(c: &CallDesc, varlen: &VarlenDesc) -> Result<Validated> {
    validate_kv(c, None, Some(varlen))
}

/// Checks a paged call whose queries are a variable-length batch
/// ([`super::PagedAttentionVarlen`]): Q and O packed `[total_q, heads_q, dim]` with
/// `cu_seqlens_q` (address and length, i32 `[batch + 1]`) and `max_seqlen_q`, `c.k` and `c.v`
/// the page pools, the block table `[batch, max_pages]` and `seqlens_k` `[batch]` counted in
/// sequences. The offsets are not read (that needs the device: [`check_cu_seqlens_q`]). The
/// shape's batch is the sequence count, `seq_q` the longest sequence's queries, `seq_kv` the
/// table's capacity; descales are per kv head or per (sequence, kv head).
pub fn validate_paged_varlen(
    c: &CallDesc,
    paged: &PagedDesc,
    cu_seqlens_q: (u64, usize),
    max_seqlen_q: usize,
) -> Result<Validated> {
    let vl = VarlenDesc {
        cu_seqlens_q,
        // Paged: the keys come from the block table and seqlens_k.
        cu_seqlens_k: (0, 0),
        max_seqlen_q,
        max_seqlen_k: 0,
    };
    validate_kv(c, Some(paged), Some(&vl))
}

fn validate_kv(
    c: &CallDesc,
    paged: Option<&PagedDesc>,
    varlen: Option<&VarlenDesc>,
) -> Result<Validated> {
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
    for (n, t) in [("Q", q), ("O", o)] {
        check_tensor(n, t)?;
    }
    let (kn, vn) = if paged.is_some() {
        ("K cache", "V cache")
    } else {
        ("K", "V")
    };
    check_tensor_limits(kn, k, paged.is_none())?;
    check_tensor_limits(vn, v, paged.is_none())?;
    if let Some(vl) = varlen {
        check_varlen(c, vl, paged.is_some())?;
    }
    let [mut batch, mut seq_q, heads_q, d] = q.shape;
    // The block table and seqlens_k count sequences: a varlen call's, else Q's batch.
    let seqs = varlen.map_or(batch, VarlenDesc::batch);
    let [kb, mut seq_kv, heads_kv, kd] = k.shape;
    // Packed tensors hold every token; the LSE is [heads_q, total_q] either way.
    let lse_need = batch * heads_q * seq_q;
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
    match paged {
        None if kb != batch => {
            return bad(format!("Q batch {batch} and K/V batch {kb} differ"));
        }
        None => {}
        Some(p) => {
            let page_size = seq_kv;
            if !PAGE_SIZES.contains(&page_size) {
                return bad(format!(
                    "page size {page_size} (the caches' second dim) must be {}..={} tokens",
                    PAGE_SIZES.start(),
                    PAGE_SIZES.end()
                ));
            }
            if p.max_pages == 0 || p.block_table.1 != seqs * p.max_pages {
                return bad(format!(
                    "the block table holds {} entries but needs batch x max_pages = {seqs} x {} \
                     (max_pages >= 1)",
                    p.block_table.1, p.max_pages
                ));
            }
            if p.seqlens_k.1 != seqs {
                return bad(format!(
                    "seqlens_k holds {} entries but needs one per sequence ({seqs})",
                    p.seqlens_k.1
                ));
            }
            if p.block_table.0 % 4 != 0 || p.seqlens_k.0 % 4 != 0 {
                return bad("block table and seqlens_k must be 4-byte aligned i32 arrays".into());
            }
            seq_kv = p
                .max_pages
                .checked_mul(page_size)
                .filter(|&n| n <= i32::MAX as usize)
                .ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "max_pages {} x page size {page_size} exceeds 2^31 keys",
                        p.max_pages
                    ))
                })?;
        }
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
    if let Some(p) = paged {
        for (n, (ptr, len)) in [
            ("the block table", p.block_table),
            ("seqlens_k", p.seqlens_k),
        ] {
            let t = (ptr, ptr + 4 * len as u64);
            let lse = c.lse.map(|(l, n)| (l, l + 4 * n as u64));
            if overlaps(o_span, t) || lse.is_some_and(|l| overlaps(l, t)) {
                return bad(format!(
                    "O or LSE overlaps {n}; inputs are never modified, so give the outputs their own buffers"
                ));
            }
        }
    }
    for (n, t) in [("Q", q), (kn, k), (vn, v)] {
        if overlaps(o_span, span(t)) {
            return bad(format!(
                "O overlaps {n}; inputs are never modified, so give O its own buffer"
            ));
        }
    }
    if let Some(vl) = varlen {
        // The sequences are the batch, and the grid covers the longest (checked above); a
        // paged cache keeps its capacity as seq_kv and has no cu_seqlens_k.
        (batch, seq_q) = (vl.batch(), vl.max_seqlen_q);
        let mut offsets = vec![("cu_seqlens_q", vl.cu_seqlens_q)];
        if paged.is_none() {
            seq_kv = vl.max_seqlen_k;
            offsets.push(("cu_seqlens_k", vl.cu_seqlens_k));
        }
        for (n, (ptr, len)) in offsets {
            let t = (ptr, ptr + 4 * len as u64);
            let lse = c.lse.map(|(l, n)| (l, l + 4 * n as u64));
            if overlaps(o_span, t) || lse.is_some_and(|l| overlaps(l, t)) {
                return bad(format!(
                    "O or LSE overlaps {n}; inputs are never modified, so give the outputs their own buffers"
                ));
            }
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
        if len < lse_need {
            let what = if varlen.is_some() {
                "heads_q*total_q"
            } else {
                "batch*heads_q*seq_q"
            };
            return bad(format!(
                "LSE holds {len} floats but needs {what} = {lse_need}"
            ));
        }
        let l = (ptr, ptr + 4 * lse_need as u64);
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

/// The host-side checks of a variable-length call: packed tensors, `batch + 1` offsets in
/// each array, the stated maximum lengths within the tensors, launch limits. `paged`: K and
/// V are page pools, and only the queries are packed (no `cu_seqlens_k`).
fn check_varlen(c: &CallDesc, vl: &VarlenDesc, paged: bool) -> Result<()> {
    let packed = [("Q", &c.q), ("O", &c.o), ("K", &c.k), ("V", &c.v)];
    for (n, t) in &packed[..if paged { 2 } else { 4 }] {
        if t.shape[0] != 1 {
            return bad(format!(
                "{n} of a variable-length call is packed [total_tokens, heads, dim], so its \
                 batch dim must be 1, got shape {:?}; build it with TensorRef::packed (or \
                 TensorMut::packed)",
                t.shape
            ));
        }
    }
    let (nq, nk) = (vl.cu_seqlens_q.1, vl.cu_seqlens_k.1);
    if paged && nq < 2 {
        return bad(format!(
            "cu_seqlens_q holds {nq} offsets; it needs batch + 1 >= 2 (one more than the \
             sequences, starting at 0)"
        ));
    }
    if !paged && (nq < 2 || nk != nq) {
        return bad(format!(
            "cu_seqlens_q holds {nq} offsets and cu_seqlens_k {nk}; both need batch + 1 >= 2 \
             (one more than the sequences, starting at 0)"
        ));
    }
    if vl.batch() > 65535 {
        return bad(format!(
            "{} sequences exceed the launch limit of 65535; split the batch",
            vl.batch()
        ));
    }
    if !vl.cu_seqlens_q.0.is_multiple_of(4) || !vl.cu_seqlens_k.0.is_multiple_of(4) {
        let arrays = if paged {
            "cu_seqlens_q"
        } else {
            "cu_seqlens_q and cu_seqlens_k"
        };
        return bad(format!("{arrays} must be 4-byte aligned i32 arrays"));
    }
    let (total_q, total_k) = (c.q.shape[1], c.k.shape[1]);
    if vl.max_seqlen_q == 0 || vl.max_seqlen_q > total_q {
        return bad(format!(
            "max_seqlen_q = {} must be 1..={total_q} (Q's tokens): pass the longest sequence's \
             query length",
            vl.max_seqlen_q
        ));
    }
    if !paged && vl.max_seqlen_k > total_k {
        return bad(format!(
            "max_seqlen_k = {} exceeds K's {total_k} tokens: pass the longest sequence's key \
             count",
            vl.max_seqlen_k
        ));
    }
    Ok(())
}

/// Checks the offsets of a variable-length call read back from the device: each array starts
/// at 0, never decreases and ends at its packed tensor's token count, and no sequence is
/// longer than the stated maximum. Returns the longest query and key lengths.
pub fn check_cu_seqlens(
    cu_q: &[i32],
    cu_k: &[i32],
    [total_q, total_k]: [usize; 2],
    [max_q, max_k]: [usize; 2],
) -> Result<(usize, usize)> {
    Ok((
        check_offsets("cu_seqlens_q", cu_q, total_q, max_q, "Q", "q")?,
        check_offsets("cu_seqlens_k", cu_k, total_k, max_k, "K", "k")?,
    ))
}

/// [`check_cu_seqlens`] for the query offsets alone (a paged cache's keys come from its
/// block table and `seqlens_k`: [`check_page_table`]). Returns the longest query length.
pub fn check_cu_seqlens_q(cu_q: &[i32], total_q: usize, max_q: usize) -> Result<usize> {
    check_offsets("cu_seqlens_q", cu_q, total_q, max_q, "Q", "q")
}

/// One offset array (`name`, into `tensor` of `total` tokens, sequences of at most `max`
/// tokens; `side` names max_seqlen_{side}). Returns the longest sequence.
fn check_offsets(
    name: &str,
    cu: &[i32],
    total: usize,
    max: usize,
    tensor: &str,
    side: &str,
) -> Result<usize> {
    let mut longest = 0usize;
    match cu.first() {
        None => return bad(format!("{name} is empty; it needs batch + 1 offsets")),
        Some(&first) if first != 0 => {
            return bad(format!("{name}[0] = {first}; the offsets start at 0"));
        }
        Some(_) => {}
    }
    for (b, w) in cu.windows(2).enumerate() {
        if w[1] < w[0] {
            return bad(format!(
                "{name}[{}] = {} < {name}[{b}] = {}: sequence {b} would have a negative \
                 length; the offsets must not decrease",
                b + 1,
                w[1],
                w[0]
            ));
        }
        let len = (w[1] - w[0]) as usize;
        if len > max {
            return bad(format!(
                "sequence {b} has {len} tokens ({name}[{}] - {name}[{b}]), more than \
                 max_seqlen_{side} = {max}; pass the longest sequence's length",
                b + 1
            ));
        }
        longest = longest.max(len);
    }
    let last = cu[cu.len() - 1];
    if last < 0 || last as usize != total {
        return bad(format!(
            "{name}[{}] = {last} but {tensor} holds {total} tokens; the last offset is the \
             packed tensor's token count",
            cu.len() - 1
        ));
    }
    Ok(longest)
}

/// Checks a paged cache's block table (`[batch, max_pages]`) and sequence lengths read back
/// from the device: every length within the table's capacity, and every page a sequence
/// uses an index into the `pages` of the caches. Returns the longest sequence.
pub fn check_page_table(
    table: &[i32],
    seqlens: &[i32],
    max_pages: usize,
    page_size: usize,
    pages: usize,
) -> Result<usize> {
    let capacity = max_pages * page_size;
    let mut longest = 0;
    for (b, &len) in seqlens.iter().enumerate() {
        if len < 0 || len as usize > capacity {
            return bad(format!(
                "seqlens_k[{b}] = {len} is outside 0..={capacity} (max_pages {max_pages} x page \
                 size {page_size})"
            ));
        }
        let len = len as usize;
        longest = longest.max(len);
        for i in 0..len.div_ceil(page_size) {
            let page = table.get(b * max_pages + i).copied().unwrap_or(-1);
            if page < 0 || page as usize >= pages {
                return bad(format!(
                    "block_table[{b}][{i}] = {page} is not a page of the caches (0..{pages}); \
                     sequence {b} holds {len} keys, so its first {} entries must be valid",
                    len.div_ceil(page_size)
                ));
            }
        }
    }
    Ok(longest)
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

    /// Q [3, 1, 8, 128] against 40 pages of 64 tokens, 5 pages per sequence.
    fn paged_call() -> (CallDesc, PagedDesc) {
        let g = 1 << 30;
        let c = CallDesc {
            q: t(g, DType::F16, [3, 1, 8, 128]),
            k: t(2 * g, DType::F16, [40, 64, 2, 128]),
            v: t(3 * g, DType::F16, [40, 64, 2, 128]),
            o: t(4 * g, DType::F16, [3, 1, 8, 128]),
            lse: None,
            descales: [None, None, None],
            params: AttnParams {
                scale: 0.1,
                causal: false,
            },
        };
        let p = PagedDesc {
            block_table: (5 * g, 15),
            max_pages: 5,
            seqlens_k: (6 * g, 3),
        };
        (c, p)
    }

    #[test]
    fn a_paged_call_is_checked_against_its_table() {
        let (c, p) = paged_call();
        let v = validate_paged(&c, &p).unwrap();
        // The cache's page count is not the batch; seq_kv is the table's capacity.
        assert_eq!((v.shape.batch, v.shape.seq_kv), (3, 320));
        let bad = |c: &CallDesc, p: &PagedDesc| validate_paged(c, p).unwrap_err().to_string();
        let mut q = p;
        q.block_table.1 = 14;
        assert!(
            bad(&c, &q).contains("block table holds 14 entries"),
            "{}",
            bad(&c, &q)
        );
        let mut q = p;
        q.seqlens_k.1 = 2;
        assert!(bad(&c, &q).contains("seqlens_k holds 2"));
        let mut q = p;
        q.max_pages = 0;
        assert!(bad(&c, &q).contains("max_pages >= 1"));
        let mut d = c;
        d.k = t(2 << 30, DType::F16, [40, 8, 2, 128]);
        d.v = d.k;
        d.v.ptr = 3 << 30;
        assert!(bad(&d, &p).contains("page size 8"));
        let mut d = c;
        d.o.ptr = p.block_table.0;
        assert!(bad(&d, &p).contains("overlaps the block table"));
        let mut d = c;
        d.k.dtype = DType::E4m3;
        d.v.dtype = DType::E4m3;
        assert!(bad(&d, &p).contains("needs a descale"));
        // More pages than a grid dim holds are fine for a cache.
        let mut d = c;
        d.k = t(2 << 30, DType::F16, [70000, 16, 2, 128]);
        d.v = t(3 << 30, DType::F16, [70000, 16, 2, 128]);
        d.o.ptr = 1 << 40;
        let mut q = p;
        q.block_table.0 = 1 << 41;
        q.seqlens_k.0 = 1 << 42;
        assert!(
            validate_paged(&d, &q).is_ok(),
            "{:?}",
            validate_paged(&d, &q)
        );
        // The contiguous path still refuses a K/V batch unlike Q's.
        assert!(validate(&c).unwrap_err().to_string().contains("batch"));
    }

    #[test]
    fn page_tables_are_checked_entry_by_entry() {
        // 3 sequences, 4 pages each of 16 tokens, 10 pages in the pool.
        let table = [0, 1, 2, 3, 4, 5, -7, 99, 9, 8, 7, 6];
        assert_eq!(
            check_page_table(&table, &[64, 32, 1], 4, 16, 10).unwrap(),
            64
        );
        // Unused entries may hold anything.
        assert_eq!(
            check_page_table(&table, &[0, 32, 64], 4, 16, 10).unwrap(),
            64
        );
        let e = check_page_table(&table, &[64, 33, 1], 4, 16, 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("block_table[1][2] = -7"), "{e}");
        let e = check_page_table(&table, &[65, 1, 1], 4, 16, 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("seqlens_k[0] = 65 is outside 0..=64"), "{e}");
        let e = check_page_table(&table, &[1, 1, -1], 4, 16, 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("seqlens_k[2] = -1"), "{e}");
        let e = check_page_table(&table, &[64, 1, 1], 4, 16, 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("block_table[0][3] = 3 is not a page"), "{e}");
    }

    /// A packed tensor desc `[1, tokens, heads, dim]`.
    fn packed(ptr: u64, dtype: DType, [tokens, heads, dim]: [usize; 3]) -> TensorDesc {
        TensorDesc {
            ptr,
            bytes: tokens * heads * dim * dtype.size(),
            dtype,
            shape: [1, tokens, heads, dim],
            strides: [0, heads * dim, dim, 1],
        }
    }

    /// Three sequences: 50 query tokens over 70 keys in all, 8 query heads over 2, D64.
    fn varlen_call() -> (CallDesc, VarlenDesc) {
        let g = 1 << 30;
        let c = CallDesc {
            q: packed(g, DType::F16, [50, 8, 64]),
            k: packed(2 * g, DType::F16, [70, 2, 64]),
            v: packed(3 * g, DType::F16, [70, 2, 64]),
            o: packed(4 * g, DType::F16, [50, 8, 64]),
            lse: Some((5 * g, 8 * 50)),
            descales: [None, None, None],
            params: AttnParams {
                scale: 0.125,
                causal: true,
            },
        };
        let v = VarlenDesc {
            cu_seqlens_q: (6 * g, 4),
            cu_seqlens_k: (7 * g, 4),
            max_seqlen_q: 40,
            max_seqlen_k: 60,
        };
        (c, v)
    }

    #[test]
    fn a_varlen_call_is_launched_over_its_longest_sequences() {
        let (c, v) = varlen_call();
        let ok = validate_varlen(&c, &v).unwrap();
        assert_eq!(ok.shape, AttnShape::new(3, 40, 60, 8, 2, 64));
        // Per-(sequence, head) descales count the sequences, not the packed batch of 1.
        let mut c8 = c;
        c8.k.dtype = DType::E4m3;
        c8.v.dtype = DType::E4m3;
        c8.k.bytes /= 2;
        c8.v.bytes /= 2;
        let ds = |len, batch_stride| {
            Some(DescaleDesc {
                ptr: 8 << 30,
                len,
                batch_stride,
            })
        };
        c8.descales = [None, ds(6, 2), ds(2, 0)];
        assert_eq!(
            validate_varlen(&c8, &v).unwrap().precision,
            Precision::Fp8KvF16
        );
        c8.descales = [None, ds(2, 2), ds(2, 2)];
        assert!(validate_varlen(&c8, &v)
            .unwrap_err()
            .to_string()
            .contains("K descale has 2 values, expected 6"));
    }

    #[test]
    fn each_bad_varlen_input_is_named() {
        let (c, v) = varlen_call();
        let err = |c: &CallDesc, v: &VarlenDesc| validate_varlen(c, v).unwrap_err().to_string();
        let mut d = c;
        d.k.shape[0] = 2;
        d.k.strides[0] = 70 * 2 * 64;
        d.k.bytes *= 2;
        assert!(
            err(&d, &v).contains("K of a variable-length call is packed"),
            "{}",
            err(&d, &v)
        );
        let mut w = v;
        w.cu_seqlens_k.1 = 3;
        assert!(err(&c, &w).contains("cu_seqlens_k 3"), "{}", err(&c, &w));
        let mut w = v;
        w.cu_seqlens_q.1 = 1;
        w.cu_seqlens_k.1 = 1;
        assert!(err(&c, &w).contains("batch + 1 >= 2"));
        let mut w = v;
        w.cu_seqlens_q.1 = 70000;
        w.cu_seqlens_k.1 = 70000;
        assert!(err(&c, &w).contains("69999 sequences exceed"));
        let mut w = v;
        w.cu_seqlens_q.0 += 2;
        assert!(err(&c, &w).contains("4-byte aligned"));
        let mut w = v;
        w.max_seqlen_q = 0;
        assert!(err(&c, &w).contains("max_seqlen_q = 0 must be 1..=50"));
        w.max_seqlen_q = 51;
        assert!(err(&c, &w).contains("max_seqlen_q = 51"));
        let mut w = v;
        w.max_seqlen_k = 71;
        assert!(err(&c, &w).contains("max_seqlen_k = 71 exceeds K's 70 tokens"));
        let mut d = c;
        d.lse = Some((5 << 30, 8 * 50 - 1));
        assert!(err(&d, &v).contains("needs heads_q*total_q = 400"));
        let mut d = c;
        d.o.ptr = v.cu_seqlens_q.0 - 64;
        assert!(
            err(&d, &v).contains("overlaps cu_seqlens_q"),
            "{}",
            err(&d, &v)
        );
        let mut d = c;
        d.lse = Some((v.cu_seqlens_k.0, 400));
        assert!(err(&d, &v).contains("overlaps cu_seqlens_k"));
        // The dense rules still apply to the packed tensors.
        let mut d = c;
        d.o.shape[1] = 49;
        assert!(err(&d, &v).contains("must equal Q shape"));
        let mut d = c;
        d.q.bytes -= 2;
        assert!(err(&d, &v).contains("buffer holds"));
    }

    #[test]
    fn offsets_are_checked_entry_by_entry() {
        let check = |q: &[i32], k: &[i32]| check_cu_seqlens(q, k, [50, 70], [40, 60]);
        assert_eq!(check(&[0, 10, 10, 50], &[0, 5, 65, 70]).unwrap(), (40, 60));
        let e = |q: &[i32], k: &[i32]| check(q, k).unwrap_err().to_string();
        assert!(e(&[1, 10, 10, 50], &[0, 5, 65, 70])
            .contains("cu_seqlens_q[0] = 1; the offsets start at 0"));
        assert!(e(&[0, 10, 9, 50], &[0, 5, 65, 70])
            .contains("cu_seqlens_q[2] = 9 < cu_seqlens_q[1] = 10"));
        assert!(e(&[0, 10, 10, 49], &[0, 5, 65, 70])
            .contains("cu_seqlens_q[3] = 49 but Q holds 50 tokens"));
        assert!(e(&[0, 5, 6, 50], &[0, 5, 65, 70]).contains("sequence 2 has 44 tokens"));
        assert!(e(&[0, 5, 6, 50], &[0, 5, 65, 70]).contains("max_seqlen_q = 40"));
        assert!(e(&[0, 10, 10, 50], &[0, 5, 70, 70]).contains("sequence 1 has 65 tokens (cu_seqlens_k[2] - cu_seqlens_k[1]), more than max_seqlen_k = 60"));
        assert!(e(&[0, 10, 10, 50], &[0, -5, 65, 70])
            .contains("cu_seqlens_k[1] = -5 < cu_seqlens_k[0] = 0"));
        assert!(
            e(&[0, 10, 10, 50], &[0, 5, 65, 71]).contains("cu_seqlens_k[3] = 71 but K holds 70")
        );
        assert!(e(&[], &[0]).contains("cu_seqlens_q is empty"));
    }

    /// Packed Q [20, 8, 128] in three sequences against 40 pages of 64 tokens, 5 per sequence.
    fn paged_varlen_call() -> (CallDesc, PagedDesc, (u64, usize)) {
        let g = 1 << 30;
        let (mut c, mut p) = paged_call();
        c.q = packed(g, DType::F16, [20, 8, 128]);
        c.o = packed(4 * g, DType::F16, [20, 8, 128]);
        c.lse = Some((7 * g, 8 * 20));
        p.block_table = (5 * g, 15);
        (c, p, (8 * g, 4))
    }

    #[test]
    fn a_paged_varlen_call_counts_sequences_not_the_packed_batch() {
        let (c, p, cu) = paged_varlen_call();
        let v = validate_paged_varlen(&c, &p, cu, 16).unwrap();
        // Three sequences, the longest with 16 queries, the table's capacity of keys.
        assert_eq!(v.shape, AttnShape::new(3, 16, 320, 8, 2, 128));
        let err = |c: &CallDesc, p: &PagedDesc, cu: (u64, usize), max: usize| {
            validate_paged_varlen(c, p, cu, max)
                .unwrap_err()
                .to_string()
        };
        // The table and lengths count cu_seqlens_q's sequences.
        assert!(err(&c, &p, (8 << 30, 3), 16)
            .contains("block table holds 15 entries but needs batch x max_pages = 2 x 5"));
        let mut q = p;
        q.block_table.1 = 10;
        q.seqlens_k.1 = 2;
        assert!(validate_paged_varlen(&c, &q, (8 << 30, 3), 16).is_ok());
        let mut q = p;
        q.seqlens_k.1 = 4;
        assert!(err(&c, &q, cu, 16)
            .contains("seqlens_k holds 4 entries but needs one per sequence (3)"));
        // The offsets: batch + 1 >= 2, aligned, and a maximum within Q.
        assert!(err(&c, &p, (8 << 30, 1), 16).contains("cu_seqlens_q holds 1 offsets"));
        assert!(err(&c, &p, ((8 << 30) + 2, 4), 16).contains("cu_seqlens_q must be 4-byte aligned"));
        assert!(err(&c, &p, cu, 0).contains("max_seqlen_q = 0 must be 1..=20"));
        assert!(err(&c, &p, cu, 21).contains("max_seqlen_q = 21"));
        // Q and O packed; the caches stay page pools.
        let mut d = c;
        d.q = t(1 << 30, DType::F16, [2, 10, 8, 128]);
        assert!(err(&d, &p, cu, 16).contains("Q of a variable-length call is packed"));
        let mut d = c;
        d.lse = Some((7 << 30, 8 * 20 - 1));
        assert!(err(&d, &p, cu, 16).contains("needs heads_q*total_q = 160"));
        let mut d = c;
        d.o.ptr = cu.0;
        assert!(
            err(&d, &p, cu, 16).contains("overlaps cu_seqlens_q"),
            "{}",
            err(&d, &p, cu, 16)
        );
        // E4M3 caches: descales per kv head or per (sequence, kv head).
        let mut d = c;
        d.k.dtype = DType::E4m3;
        d.v.dtype = DType::E4m3;
        d.k.bytes /= 2;
        d.v.bytes /= 2;
        let ds = |len, batch_stride| {
            Some(DescaleDesc {
                ptr: 9 << 30,
                len,
                batch_stride,
            })
        };
        d.descales = [None, ds(6, 2), ds(2, 0)];
        assert_eq!(
            validate_paged_varlen(&d, &p, cu, 16).unwrap().precision,
            Precision::Fp8KvF16
        );
        d.descales = [None, ds(2, 2), ds(2, 0)];
        assert!(err(&d, &p, cu, 16).contains("K descale has 2 values, expected 6"));
    }

    #[test]
    fn query_offsets_alone_are_checked_entry_by_entry() {
        assert_eq!(check_cu_seqlens_q(&[0, 1, 5, 20], 20, 15).unwrap(), 15);
        let e = |cu: &[i32], max| check_cu_seqlens_q(cu, 20, max).unwrap_err().to_string();
        assert!(e(&[0, 1, 5, 20], 14).contains("sequence 2 has 15 tokens"));
        assert!(e(&[0, 1, 5, 21], 16).contains("cu_seqlens_q[3] = 21 but Q holds 20 tokens"));
        assert!(e(&[0, 5, 1, 20], 20).contains("cu_seqlens_q[2] = 1 < cu_seqlens_q[1] = 5"));
        assert!(e(&[2, 5, 20], 20).contains("cu_seqlens_q[0] = 2"));
        assert!(e(&[], 20).contains("cu_seqlens_q is empty"));
    }

    proptest::proptest! {
        /// Whatever the offsets hold, the check never panics, and what it accepts is a valid
        /// varlen batch within the stated maxima.
        #[test]
        fn offset_check_never_panics(
            q in proptest::collection::vec(i32::MIN..i32::MAX, 0..6),
            k in proptest::collection::vec(-3i32..40, 0..6),
            totals in (0usize..50, 0usize..50),
            maxes in (0usize..40, 0usize..40),
        ) {
            if let Ok((lq, lk)) = check_cu_seqlens(&q, &k, [totals.0, totals.1], [maxes.0, maxes.1]) {
                for (cu, total, max, longest) in [(&q, totals.0, maxes.0, lq), (&k, totals.1, maxes.1, lk)] {
                    proptest::prop_assert_eq!(cu[0], 0);
                    proptest::prop_assert_eq!(*cu.last().unwrap() as usize, total);
                    proptest::prop_assert!(cu.windows(2).all(|w| w[0] <= w[1] && (w[1] - w[0]) as usize <= max));
                    proptest::prop_assert!(longest <= max);
                }
            }
        }
    }

    proptest::proptest! {
        /// Whatever the table holds, the check either accepts it with every used entry in
        /// range or names an entry or length: it never panics.
        #[test]
        fn page_table_check_never_panics(
            table in proptest::collection::vec(-3i32..12, 0..40),
            lens in proptest::collection::vec(-2i32..80, 0..6),
            max_pages in 0usize..6,
            page_size in 1usize..20,
            pages in 0usize..12,
        ) {
            if let Ok(longest) = check_page_table(&table, &lens, max_pages, page_size, pages) {
                for (b, &n) in lens.iter().enumerate() {
                    proptest::prop_assert!(n >= 0 && n as usize <= longest);
                    for i in 0..(n as usize).div_ceil(page_size) {
                        let e = table[b * max_pages + i];
                        proptest::prop_assert!(e >= 0 && (e as usize) < pages);
                    }
                }
            }
        }
    }
}
