//! Every use of the library's call descriptions and call structs, in one place: the
//! validation views (no device) and the calls over memory owned by the caller (PyTorch).

use cudarc::driver::CudaStream;
use fp8_sdpa::runtime::validate::{
    validate, validate_paged, validate_varlen, CallDesc, DescaleDesc, PagedDesc, Validated,
    VarlenDesc,
};
use fp8_sdpa::runtime::{
    Attention, AttentionVarlen, CallOptions, Descale, Device, IdxRef, Launched, PagedAttention,
    PagedKv, TensorDesc, TensorMut, TensorRef, VecMut, VecRef,
};
use fp8_sdpa::{AttnParams, Result};

/// A call's tensors and parameters, as plain descriptions (for a paged call K and V are the
/// page pools and Q has no descale).
#[derive(Debug, Clone, Copy)]
pub struct Io {
    /// Query.
    pub q: TensorDesc,
    /// Keys.
    pub k: TensorDesc,
    /// Values.
    pub v: TensorDesc,
    /// Output.
    pub o: TensorDesc,
    /// Log-sum-exp output (address, fp32 entries).
    pub lse: Option<(u64, usize)>,
    /// Descales of Q, K and V.
    pub descales: [Option<DescaleDesc>; 3],
    /// Scale and mask.
    pub params: AttnParams,
}

/// A varlen call's offsets (address, entries) and longest lengths.
#[derive(Debug, Clone, Copy)]
pub struct Varlen {
    /// i32 `[batch + 1]`.
    pub cu_seqlens_q: (u64, usize),
    /// i32 `[batch + 1]`.
    pub cu_seqlens_k: (u64, usize),
    /// Longest sequence's queries.
    pub max_seqlen_q: usize,
    /// Longest sequence's keys.
    pub max_seqlen_k: usize,
}

/// A paged call's table (address, entries), pages per sequence and key counts.
#[derive(Debug, Clone, Copy)]
pub struct Paged {
    /// i32 `[batch, max_pages]`.
    pub block_table: (u64, usize),
    /// Pages per sequence.
    pub max_pages: usize,
    /// i32 `[batch]`.
    pub seqlens_k: (u64, usize),
}

impl Io {
    fn desc(&self) -> CallDesc {
        CallDesc {
            q: self.q,
            k: self.k,
            v: self.v,
            o: self.o,
            lse: self.lse,
            descales: self.descales,
            params: self.params,
        }
    }
}

impl Varlen {
    fn desc(&self) -> VarlenDesc {
        VarlenDesc {
            cu_seqlens_q: self.cu_seqlens_q,
            cu_seqlens_k: self.cu_seqlens_k,
            max_seqlen_q: self.max_seqlen_q,
            max_seqlen_k: self.max_seqlen_k,
        }
    }
}

impl Paged {
    fn desc(&self) -> PagedDesc {
        PagedDesc {
            block_table: self.block_table,
            max_pages: self.max_pages,
            seqlens_k: self.seqlens_k,
        }
    }
}

/// The library's checks of a dense call, without a device.
pub fn check_dense(io: &Io) -> Result<Validated> {
    validate(&io.desc())
}

/// The library's checks of a varlen call, without a device (the offsets are not read).
pub fn check_varlen(io: &Io, vl: &Varlen) -> Result<Validated> {
    validate_varlen(&io.desc(), &vl.desc())
}

/// The library's checks of a paged call, without a device (the table is not read).
pub fn check_paged(io: &Io, p: &Paged) -> Result<Validated> {
    validate_paged(&io.desc(), &p.desc())
}

/// The borrows of a call's tensors over memory owned by the caller.
///
/// # Safety
/// Every address of `io` is live device memory of `stream`'s context, covering what it
/// describes, ordered on `stream` and alive until the queued work completes (the contract of
/// the library's `from_raw` constructors, runtime/tensor.rs).
unsafe fn borrows<'a>(
    io: &Io,
    stream: &'a CudaStream,
) -> (
    [TensorRef<'a>; 3],
    TensorMut<'a>,
    Option<VecMut<'a>>,
    [Option<Descale<'a>>; 3],
) {
    // SAFETY: this function's contract.
    unsafe {
        let descale = |d: Option<DescaleDesc>| {
            d.map(|d| Descale::new(VecRef::from_raw(d.ptr, d.len, stream), d.batch_stride))
        };
        (
            [
                TensorRef::from_raw(io.q, stream),
                TensorRef::from_raw(io.k, stream),
                TensorRef::from_raw(io.v, stream),
            ],
            TensorMut::from_raw(io.o, stream),
            io.lse.map(|(p, n)| VecMut::from_raw(p, n, stream)),
            io.descales.map(descale),
        )
    }
}

/// Launches a dense call on `stream`.
///
/// # Safety
/// As [`borrows`].
pub unsafe fn run_dense(
    dev: &Device,
    stream: &CudaStream,
    io: &Io,
    opts: CallOptions,
) -> Result<Launched> {
    // SAFETY: this function's contract.
    let ([q, k, v], o, lse, [q_descale, k_descale, v_descale]) = unsafe { borrows(io, stream) };
    let call = Attention::new(q, k, v, o, io.params)
        .with_lse(lse)
        .with_descales(q_descale, k_descale, v_descale);
    dev.attention(stream, &call, opts)
}

/// Launches a varlen call on `stream`.
///
/// # Safety
/// As [`borrows`], and the offset arrays are live i32 device memory of their stated lengths.
pub unsafe fn run_varlen(
    dev: &Device,
    stream: &CudaStream,
    io: &Io,
    vl: &Varlen,
    opts: CallOptions,
) -> Result<Launched> {
    // SAFETY: this function's contract.
    let ([q, k, v], o, lse, [q_descale, k_descale, v_descale]) = unsafe { borrows(io, stream) };
    // SAFETY: this function's contract.
    let (cu_q, cu_k) = unsafe {
        (
            IdxRef::from_raw(vl.cu_seqlens_q.0, vl.cu_seqlens_q.1, stream),
            IdxRef::from_raw(vl.cu_seqlens_k.0, vl.cu_seqlens_k.1, stream),
        )
    };
    let call = AttentionVarlen::new(
        q,
        k,
        v,
        o,
        [cu_q, cu_k],
        [vl.max_seqlen_q, vl.max_seqlen_k],
        io.params,
    )
    .with_lse(lse)
    .with_descales(q_descale, k_descale, v_descale);
    dev.attention_varlen(stream, &call, opts)
}

/// Launches a paged call on `stream` (`io.k`, `io.v` the page pools).
///
/// # Safety
/// As [`borrows`], and the table and lengths are live i32 device memory of their stated
/// lengths.
pub unsafe fn run_paged(
    dev: &Device,
    stream: &CudaStream,
    io: &Io,
    p: &Paged,
    opts: CallOptions,
) -> Result<Launched> {
    // SAFETY: this function's contract.
    let ([q, k_cache, v_cache], o, lse, [_, k_descale, v_descale]) = unsafe { borrows(io, stream) };
    // SAFETY: this function's contract.
    let (block_table, seqlens_k) = unsafe {
        (
            IdxRef::from_raw(p.block_table.0, p.block_table.1, stream),
            IdxRef::from_raw(p.seqlens_k.0, p.seqlens_k.1, stream),
        )
    };
    let kv = PagedKv::new(k_cache, v_cache, block_table, p.max_pages, seqlens_k);
    let call = PagedAttention::new(q, kv, o, io.params)
        .with_lse(lse)
        .with_kv_descales(k_descale, v_descale);
    dev.paged_attention(stream, &call, opts)
}

/// Call options: `check` reads descales, offsets and tables back (a stream synchronization,
/// so off under CUDA graph capture).
pub fn options(check: bool) -> CallOptions {
    CallOptions::default().with_check_descales(check)
}
