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

/// The longest sequence (queries or keys) a call may have: the kernels index positions with
/// 32-bit integers and add a tile and a sequence's length to a position, so lengths stay below
/// 2^30 to leave that headroom.
pub const MAX_SEQ: usize = 1 << 30;

/// The most query rows (`batch * heads_q * seq_q`, or `heads_q * total_q`) a call may have: the
/// kernels count work tiles and rows in 32-bit integers.
pub const MAX_ROWS: usize = i32::MAX as usize;

/// A half-open byte range `[start, end)` of device memory.
pub type ByteRange = (u64, u64);

/// The byte range a tensor's elements span from its pointer (every stride is non-negative, so
/// element (0, 0, 0, 0) is the first byte), or `None` when the offsets overflow 64 bits.
pub fn span(t: &TensorDesc) -> Option<ByteRange> {
    let mut last = 0u64;
    for i in 0..4 {
        let extent = t.shape[i].checked_sub(1)? as u64;
        last = extent
            .checked_mul(t.strides[i] as u64)
            .and_then(|x| x.checked_add(last))?;
    }
    let bytes = last.checked_add(1)?.checked_mul(t.dtype.size() as u64)?;
    Some((t.ptr, t.ptr.checked_add(bytes)?))
}

/// The byte range of `len` elements of `size` bytes at `ptr`, or `None` on overflow.
pub(crate) fn range(ptr: u64, len: usize, size: u64) -> Option<ByteRange> {
    let bytes = (len as u64).checked_mul(size)?;
    Some((ptr, ptr.checked_add(bytes)?))
}

pub(crate) fn overlaps(a: ByteRange, b: ByteRange) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Whether distinct indices of `t` always address distinct elements: with the dims of extent
/// above 1 sorted by stride, each stride passes the largest offset the smaller dims reach. (A
/// sufficient rule: an interleaving it refuses may still be one-to-one, but none it accepts
/// writes one element twice.)
pub fn one_to_one(t: &TensorDesc) -> bool {
    let mut dims: Vec<(usize, usize)> = (0..4)
        .filter(|&i| t.shape[i] > 1)
        .map(|i| (t.strides[i], t.shape[i]))
        .collect();
    dims.sort_unstable();
    let mut reach = 1u128; // one past the largest offset the dims so far address
    for (stride, extent) in dims {
        if (stride as u128) < reach {
            return false;
        }
        reach += (extent as u128 - 1) * stride as u128;
    }
    true
}

/// The problem-level checks, before any layout: element types, zero lengths, matching shapes,
/// head dim, head ratio, scale. A fault here is named first, whatever else is wrong.
fn check_problem(
    c: &CallDesc,
    paged: Option<&PagedDesc>,
    varlen: Option<&VarlenDesc>,
) -> Result<Precision> {
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
    let (kn, vn) = if paged.is_some() {
        ("K cache", "V cache")
    } else {
        ("K", "V")
    };
    for (n, t) in [("Q", q), ("O", o), (kn, k), (vn, v)] {
        if t.shape.contains(&0) {
            return bad(format!(
                "{n} has a zero-length dimension (shape {:?}); every dim must be >= 1",
                t.shape
            ));
        }
    }
    if varlen.is_some() {
        let packed = [("Q", q), ("O", o), ("K", k), ("V", v)];
        for (n, t) in &packed[..if paged.is_some() { 2 } else { 4 }] {
            if t.shape[0] != 1 {
                return bad(format!(
                    "{n} of a variable-length call is packed [total_tokens, heads, dim], so its \
                     batch dim must be 1, got shape {:?}; build it with TensorRef::packed (or \
                     TensorMut::packed)",
                    t.shape
                ));
            }
        }
    }
    if k.shape != v.shape {
        return bad(format!(
            "{kn} shape {:?} and {vn} shape {:?} differ",
            k.shape, v.shape
        ));
    }
    if o.shape != q.shape {
        return bad(format!(
            "O shape {:?} must equal Q shape {:?}",
            o.shape, q.shape
        ));
    }
    let (d, kd) = (q.shape[3], k.shape[3]);
    if kd != d {
        return bad(format!("Q head dim {d} and K/V head dim {kd} differ"));
    }
    if !HEAD_DIMS.iter().any(|&h| h as usize == d) {
        return bad(format!(
            "head dim {d} is not supported; use 64, 128 or 256 (pad the head dim)"
        ));
    }
    let (heads_q, heads_kv) = (q.shape[2], k.shape[2]);
    if !heads_q.is_multiple_of(heads_kv) {
        return bad(format!(
            "heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) for MHA/GQA/MQA"
        ));
    }
    if paged.is_none() && varlen.is_none() && k.shape[0] != q.shape[0] {
        return bad(format!(
            "Q batch {} and K/V batch {} differ",
            q.shape[0], k.shape[0]
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
    Ok(precision)
}

/// A tensor's layout: contiguous head dim, 16-byte rows, every element inside its buffer,
/// strides that narrow to the kernels' i64 losslessly. Returns its byte range.
fn check_layout(name: &str, t: &TensorDesc) -> Result<ByteRange> {
    if t.strides[3] != 1 {
        return bad(format!("{name}'s last dim must be contiguous (stride 1), got stride {}; make it contiguous first", t.strides[3]));
    }
    if !t.ptr.is_multiple_of(16) {
        return bad(format!(
            "{name}'s device pointer {:#x} is not 16-byte aligned; kernels load 16 bytes at a time",
            t.ptr
        ));
    }
    let size = t.dtype.size() as u64;
    for (i, dim) in ["batch", "seq", "head"].iter().enumerate() {
        let bytes = (t.strides[i] as u64).checked_mul(size);
        if bytes.is_none_or(|b| b > i64::MAX as u64) {
            return bad(format!(
                "{name}'s {dim} stride ({} elements) exceeds 2^63 bytes",
                t.strides[i]
            ));
        }
        if t.shape[i] > 1 && !bytes.is_some_and(|b| b.is_multiple_of(16)) {
            return bad(format!(
                "{name}'s {dim} stride ({} elements = {} bytes) is not a multiple of 16 bytes; every row must start 16-byte aligned",
                t.strides[i],
                t.strides[i] as u64 * size
            ));
        }
    }
    let Some((start, end)) = span(t) else {
        return bad(format!(
            "{name} with shape {:?} and strides {:?} spans past the end of the address space",
            t.shape, t.strides
        ));
    };
    if end - start > i64::MAX as u64 {
        return bad(format!(
            "{name} with shape {:?} and strides {:?} spans {} bytes, past the kernels' 64-bit \
             signed offsets",
            t.shape,
            t.strides,
            end - start
        ));
    }
    if end - start > t.bytes as u64 {
        return bad(format!(
            "{name} with shape {:?} and strides {:?} spans {} bytes but its buffer holds {}",
            t.shape,
            t.strides,
            end - start,
            t.bytes
        ));
    }
    Ok((start, end))
}

/// The launch limits of a tensor's dims. `grid`: its batch and heads become grid dims (a paged
/// cache's pages do not, but are counted in an i32).
fn check_limits(name: &str, t: &TensorDesc, grid: bool) -> Result<()> {
    let [b, s, h, _] = t.shape;
    if s > MAX_SEQ || (grid && b > 65535) || h > 65535 || b > i32::MAX as usize {
        return bad(format!(
            "{name}'s shape {:?} exceeds the launch limits (batch and heads <= 65535, at most \
             2^30 positions: the kernels index positions in 32 bits); split the call",
            t.shape
        ));
    }
    Ok(())
}

/// The byte range of an i32 index array, or an error naming it.
fn index_range(name: &str, (ptr, len): (u64, usize)) -> Result<ByteRange> {
    if !ptr.is_multiple_of(4) {
        return bad(format!("{name} must be a 4-byte aligned i32 array"));
    }
    range(ptr, len, 4).map_or_else(
        || {
            bad(format!(
                "{name} ({len} entries) spans past the address space"
            ))
        },
        Ok,
    )
}

/// The outputs: O writes each element once, and neither O nor the LSE overlaps an input or
/// each other (inputs are never modified).
fn check_outputs(
    o: (&TensorDesc, ByteRange),
    lse: Option<ByteRange>,
    inputs: &[(&str, ByteRange)],
) -> Result<()> {
    if !one_to_one(o.0) {
        return bad(format!(
            "O's strides {:?} (shape {:?}) make two positions share an element; give each \
             (batch, position, head) row its own memory, e.g. a contiguous O",
            o.0.strides, o.0.shape
        ));
    }
    if lse.is_some_and(|l| overlaps(l, o.1)) {
        return bad("LSE overlaps O; give each output its own buffer".into());
    }
    for (n, t) in inputs {
        if overlaps(o.1, *t) {
            return bad(format!(
                "O overlaps {n}; inputs are never modified, so give O its own buffer"
            ));
        }
        if lse.is_some_and(|l| overlaps(l, *t)) {
            return bad(format!(
                "LSE overlaps {n}; inputs are never modified, so give it its own buffer"
            ));
        }
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
    let precision = check_problem(c, paged, varlen)?;
    let (q, k, v, o) = (&c.q, &c.k, &c.v, &c.o);
    let (kn, vn) = if paged.is_some() {
        ("K cache", "V cache")
    } else {
        ("K", "V")
    };
    if let Some(vl) = varlen {
        check_varlen(c, vl, paged.is_some())?;
    }
    let [mut batch, mut seq_q, heads_q, d] = q.shape;
    // The block table and seqlens_k count sequences: a varlen call's, else Q's batch.
    let seqs = varlen.map_or(batch, VarlenDesc::batch);
    let [_, mut seq_kv, heads_kv, _] = k.shape;
    if let Some(p) = paged {
        seq_kv = check_paged(p, seq_kv, seqs)?;
    }
    let q_r = check_layout("Q", q)?;
    let o_r = check_layout("O", o)?;
    let k_r = check_layout(kn, k)?;
    let v_r = check_layout(vn, v)?;
    check_limits("Q", q, true)?;
    check_limits(kn, k, paged.is_none())?;
    // Packed tensors hold every token; the LSE is [heads_q, total_q] either way.
    let rows = batch
        .checked_mul(heads_q)
        .and_then(|n| n.checked_mul(seq_q))
        .filter(|&n| n <= MAX_ROWS)
        .map_or_else(
            || {
                bad(format!(
                    "Q's shape {:?} has more than 2^31 rows (batch x heads_q x positions): the \
                     kernels count rows in 32 bits; split the call",
                    q.shape
                ))
            },
            Ok,
        )?;
    let mut inputs = vec![("Q", q_r), (kn, k_r), (vn, v_r)];
    if let Some(p) = paged {
        inputs.push((
            "the block table",
            index_range("the block table", p.block_table)?,
        ));
        inputs.push(("seqlens_k", index_range("seqlens_k", p.seqlens_k)?));
    }
    if let Some(vl) = varlen {
        // The sequences are the batch, and the grid covers the longest (checked above); a
        // paged cache keeps its capacity as seq_kv and has no cu_seqlens_k.
        (batch, seq_q) = (vl.batch(), vl.max_seqlen_q);
        inputs.push((
            "cu_seqlens_q",
            index_range("cu_seqlens_q", vl.cu_seqlens_q)?,
        ));
        if paged.is_none() {
            seq_kv = vl.max_seqlen_k;
            inputs.push((
                "cu_seqlens_k",
                index_range("cu_seqlens_k", vl.cu_seqlens_k)?,
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
    let lse = match c.lse {
        None => None,
        Some((ptr, len)) => {
            if len < rows {
                let what = if varlen.is_some() {
                    "heads_q*total_q"
                } else {
                    "batch*heads_q*seq_q"
                };
                return bad(format!("LSE holds {len} floats but needs {what} = {rows}"));
            }
            if !ptr.is_multiple_of(4) {
                return bad("LSE pointer is not 4-byte aligned".into());
            }
            Some(range(ptr, rows, 4).map_or_else(
                || bad("LSE spans past the end of the address space".into()),
                Ok,
            )?)
        }
    };
    inputs.extend(check_descales(c, batch, [heads_q, heads_kv, heads_kv])?);
    check_outputs((o, o_r), lse, &inputs)?;
    Ok(Validated { precision, shape })
}

/// A paged call's table against the pools (`page_size` their second dim) and the sequence
/// count; returns the table's capacity in keys, the shape's `seq_kv`.
fn check_paged(p: &PagedDesc, page_size: usize, seqs: usize) -> Result<usize> {
    if !PAGE_SIZES.contains(&page_size) {
        return bad(format!(
            "page size {page_size} (the caches' second dim) must be {}..={} tokens",
            PAGE_SIZES.start(),
            PAGE_SIZES.end()
        ));
    }
    if p.max_pages == 0 || seqs.checked_mul(p.max_pages) != Some(p.block_table.1) {
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
    p.max_pages
        .checked_mul(page_size)
        .filter(|&n| n <= MAX_SEQ)
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "max_pages {} x page size {page_size} exceeds 2^30 keys (the kernels index \
                 positions in 32 bits)",
                p.max_pages
            ))
        })
}

/// Each scaled tensor's descale vector: present exactly where the dtype is scaled, per head
/// or per (batch, head), 4-byte aligned. Returns the vectors' byte ranges, named.
fn check_descales(
    c: &CallDesc,
    batch: usize,
    heads: [usize; 3],
) -> Result<Vec<(&'static str, ByteRange)>> {
    let mut out = Vec::new();
    let names = [
        ("Q", "Q's descale"),
        ("K", "K's descale"),
        ("V", "V's descale"),
    ];
    let dtypes = [c.q.dtype, c.k.dtype, c.v.dtype];
    for i in 0..3 {
        let ((n, range_name), dtype, heads) = (names[i], dtypes[i], heads[i]);
        match (&c.descales[i], dtype.is_scaled()) {
            (None, true) => return bad(format!("{n} is {dtype} and needs a descale vector ({heads} per-head values or batch*{heads})")),
            (Some(_), false) => return bad(format!("{n} is {dtype}, which takes no descale; pass none")),
            (Some(ds), true) => {
                let want = if ds.batch_stride == 0 {
                    heads
                } else if ds.batch_stride == heads {
                    // The kernels index `b * heads + h` in i32: batch and heads are each
                    // within the launch limits, but their product need not be.
                    match batch.checked_mul(heads).filter(|&n| n <= i32::MAX as usize) {
                        Some(n) => n,
                        None => return bad(format!("{n} descale per (batch, head) needs {batch} x {heads} values, past the kernels' 32-bit index; pass per-head descales (batch stride 0) or split the batch")),
                    }
                } else {
                    return bad(format!("{n} descale batch stride must be 0 (per head) or {heads} (per batch and head), got {}", ds.batch_stride));
                };
                if ds.len != want {
                    return bad(format!("{n} descale has {} values, expected {want}", ds.len));
                }
                if !ds.ptr.is_multiple_of(4) {
                    return bad(format!("{n} descale pointer is not 4-byte aligned"));
                }
                let r = range(ds.ptr, ds.len, 4).map_or_else(
                    || bad(format!("{n} descale spans past the end of the address space")),
                    Ok,
                )?;
                out.push((range_name, r));
            }
            (None, false) => {}
        }
    }
    Ok(out)
}

/// The host-side checks of a variable-length call: packed tensors, `batch + 1` offsets in
/// each array, the stated maximum lengths within the tensors, launch limits. `paged`: K and
/// V are page pools, and only the queries are packed (no `cu_seqlens_k`).
fn check_varlen(c: &CallDesc, vl: &VarlenDesc, paged: bool) -> Result<()> {
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
    if page_size == 0 {
        return bad("the caches' page size is 0; pages hold 1 or more tokens".into());
    }
    let capacity = max_pages.saturating_mul(page_size);
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
            let at = b.checked_mul(max_pages).and_then(|x| x.checked_add(i));
            let page = at.and_then(|at| table.get(at)).copied().unwrap_or(-1);
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

    /// Strides whose offsets pass 2^64 were summed unchecked: a debug build panicked and a
    /// release build wrapped and accepted O, which the portable kernel then wrote outside.
    #[test]
    fn wrapping_strides_are_refused_not_wrapped() {
        for which in 0..4 {
            let mut c = call(DType::F16, DType::F16, DType::F16);
            let t = match which {
                0 => &mut c.q,
                1 => &mut c.k,
                2 => &mut c.v,
                _ => &mut c.o,
            };
            // (2 - 1) * stride alone wraps once times the element size; with the other dims'
            // offsets the sum passes 2^64 too.
            t.strides[0] = usize::MAX / 2 + 8;
            let e = err(&c);
            assert!(
                e.contains("stride") || e.contains("address space"),
                "{which}: {e}"
            );
        }
        let mut c = call(DType::F16, DType::F16, DType::F16);
        c.o.strides[1] = (1usize << 63) / 2; // 2^62 elements = 2^63 bytes: i64 overflows
        assert!(err(&c).contains("stride"));
        let mut c = call(DType::F16, DType::F16, DType::F16);
        c.o.ptr = u64::MAX - 15; // 16-byte aligned, but its span passes 2^64
        assert!(err(&c).contains("address space"), "{}", err(&c));
    }

    /// O whose rows share elements (seq stride 0, head stride below the head dim) was
    /// accepted: two rows wrote the same bytes.
    #[test]
    fn outputs_that_alias_themselves_are_refused() {
        let mut c = call(DType::F16, DType::F16, DType::F16);
        c.o.strides[1] = 0;
        assert!(err(&c).contains("share an element"), "{}", err(&c));
        let mut c = call(DType::F16, DType::F16, DType::F16);
        c.o.strides[2] = 32; // head dim 64: heads overlap by half
        assert!(err(&c).contains("share an element"), "{}", err(&c));
        let mut c = call(DType::F16, DType::F16, DType::F16);
        c.o.strides[0] = c.o.strides[1]; // batch 1 starts at position 1 of batch 0
        assert!(err(&c).contains("share an element"), "{}", err(&c));
        // A one-to-one but non-contiguous O (heads outermost) is fine.
        let mut c = call(DType::F16, DType::F16, DType::F16);
        c.o = t(4 << 30, DType::F16, [2, 17, 8, 64]);
        c.o.strides = [17 * 64, 64, 2 * 17 * 64, 1];
        validate(&c).unwrap();
    }

    /// O or the LSE overlapping a descale vector was accepted; so was O overlapping the LSE.
    #[test]
    fn outputs_that_overlap_descales_are_refused() {
        let scaled = |c: &mut CallDesc, at: u64| {
            c.descales = [
                Some(DescaleDesc {
                    ptr: at,
                    len: 8,
                    batch_stride: 0,
                }),
                Some(DescaleDesc {
                    ptr: 7 << 30,
                    len: 2,
                    batch_stride: 0,
                }),
                Some(DescaleDesc {
                    ptr: (7 << 30) + 64,
                    len: 2,
                    batch_stride: 0,
                }),
            ];
        };
        let mut c = call(DType::E4m3, DType::E4m3, DType::Bf16);
        scaled(&mut c, 6 << 30);
        validate(&c).unwrap();
        let mut c = call(DType::E4m3, DType::E4m3, DType::Bf16);
        scaled(&mut c, (4 << 30) + 64); // inside O
        assert!(err(&c).contains("O overlaps Q's descale"), "{}", err(&c));
        let mut c = call(DType::E4m3, DType::E4m3, DType::Bf16);
        scaled(&mut c, (5 << 30) + 16); // inside the LSE
        assert!(err(&c).contains("LSE overlaps Q's descale"), "{}", err(&c));
        let mut c = call(DType::F16, DType::F16, DType::F16);
        c.lse = Some(((4 << 30) + 128, 2 * 8 * 17)); // inside O
        assert!(err(&c).contains("LSE overlaps O"), "{}", err(&c));
    }

    /// Lengths near 2^31 passed validation and overflowed the kernels' 32-bit position
    /// arithmetic (wrong output on the H100).
    #[test]
    fn lengths_past_the_kernels_integers_are_refused() {
        let mut c = call(DType::F16, DType::F16, DType::F16);
        for t in [&mut c.k, &mut c.v] {
            t.shape[1] = i32::MAX as usize - 100;
            t.strides[0] = t.shape[1] * t.strides[1];
            t.bytes = 2 * t.strides[0] * 2;
        }
        assert!(err(&c).contains("2^30"), "{}", err(&c));
        let mut c = call(DType::F16, DType::F16, DType::F16);
        for t in [&mut c.q, &mut c.o] {
            // batch 2 x 8 heads x 2^27 positions = 2^31 rows
            t.shape[1] = 1 << 27;
            t.strides[0] = t.shape[1] * t.strides[1];
            t.bytes = 2 * t.strides[0] * 2;
        }
        c.o.ptr = 1 << 44;
        c.lse = None;
        assert!(err(&c).contains("2^31 rows"), "{}", err(&c));
    }

    /// Problem-level faults are named before any layout fault: head dim 59 with its odd
    /// strides was reported as a stride that is not a multiple of 16 bytes.
    #[test]
    fn problem_faults_are_named_before_layout_faults() {
        let with = |d: usize| {
            let mut c = call(DType::F16, DType::F16, DType::F16);
            for x in [&mut c.q, &mut c.o] {
                *x = t(x.ptr + 2, DType::F16, [2, 17, 8, d]);
            }
            for x in [&mut c.k, &mut c.v] {
                *x = t(x.ptr + 2, DType::F16, [2, 33, 2, d]);
            }
            c
        };
        for d in [59, 111] {
            let e = err(&with(d));
            assert!(e.contains(&format!("head dim {d} is not supported")), "{e}");
        }
        let mut c = with(64);
        c.k.shape[2] = 3;
        c.v.shape[2] = 3;
        assert!(err(&c).contains("multiple of heads_kv"), "{}", err(&c));
        let mut c = with(64);
        c.params.scale = f32::NAN;
        assert!(err(&c).contains("softmax scale"), "{}", err(&c));
        let mut c = with(64);
        c.q.shape[1] = 0;
        assert!(err(&c).contains("zero-length"), "{}", err(&c));
        let mut c = with(64);
        c.o.shape[1] = 5;
        assert!(err(&c).contains("must equal Q shape"), "{}", err(&c));
        // With the problem right, the layout fault is named.
        assert!(
            err(&with(64)).contains("16-byte aligned"),
            "{}",
            err(&with(64))
        );
    }

    /// A block table far past the pools or a huge max_pages wrapped `seqs * max_pages`.
    #[test]
    fn paged_sizes_are_checked_without_wrapping() {
        let (c, mut p) = paged_call();
        p.max_pages = usize::MAX / 2;
        assert!(validate_paged(&c, &p).is_err());
        let (c, mut p) = paged_call();
        p.block_table.0 = u64::MAX - 3;
        assert!(validate_paged(&c, &p)
            .unwrap_err()
            .to_string()
            .contains("address space"));
        assert!(check_page_table(&[0; 4], &[i32::MAX], usize::MAX, 2, 4).is_err());
    }
}
