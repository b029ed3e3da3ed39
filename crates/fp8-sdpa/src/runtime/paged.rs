//! Attention over a paged KV cache (the layout vLLM and FlashInfer use): K and V live in
//! pools of fixed-size pages `[pages, page_size, heads_kv, dim]`, and each sequence lists its
//! pages in a block table `[batch, max_pages]`, with its own key count in `seqlens_k`. The
//! decode family serves it (any query length; built for few query rows per kv-head).
//!
//! Two calls: [`PagedAttention`], whose queries are `[batch, seq_q, heads_q, dim]` (every
//! sequence the same number of new tokens), and [`PagedAttentionVarlen`], whose queries are
//! packed `[total_q, heads_q, dim]` with `cu_seqlens_q` (FlashAttention's varlen convention),
//! so that one call serves sequences with different query counts (one decode token for some,
//! a few speculative tokens for others) and different cache lengths.
//!
//! ```no_run
//! # fn main() -> fp8_sdpa::Result<()> {
//! use fp8_sdpa::runtime::{CallOptions, Device, IdxRef, PagedAttention, PagedKv, TensorMut, TensorRef};
//! use fp8_sdpa::{AttnParams, DType, Layout};
//! let dev = Device::open(0)?;
//! let stream = dev.new_stream()?;
//! let (batch, heads_q, heads_kv, dim, page_size, pages, max_pages) = (2, 32, 8, 128, 64, 16, 8);
//! let q = stream.alloc_zeros::<u16>(batch * heads_q * dim).unwrap(); // one new token each
//! let k = stream.alloc_zeros::<u16>(pages * page_size * heads_kv * dim).unwrap();
//! let v = stream.alloc_zeros::<u16>(pages * page_size * heads_kv * dim).unwrap();
//! let table = stream.clone_htod(&(0..(batch * max_pages) as i32).collect::<Vec<_>>()).unwrap();
//! let lens = stream.clone_htod(&[300i32, 17]).unwrap();
//! let mut o = stream.alloc_zeros::<u16>(batch * heads_q * dim).unwrap();
//! let pool = [pages, page_size, heads_kv, dim];
//! let call = PagedAttention::new(
//!     TensorRef::contiguous(&q, &stream, DType::F16, [batch, 1, heads_q, dim], Layout::Bshd)?,
//!     PagedKv::new(
//!         TensorRef::contiguous(&k, &stream, DType::F16, pool, Layout::Bshd)?,
//!         TensorRef::contiguous(&v, &stream, DType::F16, pool, Layout::Bshd)?,
//!         IdxRef::new(&table, &stream),
//!         max_pages,
//!         IdxRef::new(&lens, &stream),
//!     ),
//!     TensorMut::contiguous(&mut o, &stream, DType::F16, [batch, 1, heads_q, dim], Layout::Bshd)?,
//!     AttnParams::default_for(dim, false),
//! );
//! dev.paged_attention(&stream, &call, CallOptions::default())?;
//! # Ok(())
//! # }
//! ```

use super::call::{
    check_descales, common_builders, read_back, sdpa_params, CallCommon, CallOptions, KernelChoice,
    Launched,
};
use super::decode::{self, PagedArgs};
use super::device::Device;
use super::tensor::{check_streams, IdxRef, StreamId, TensorMut, TensorRef};
use super::validate::{
    check_cu_seqlens_q, check_page_table, validate_paged, validate_paged_varlen, CallDesc,
    PagedDesc, VarlenDesc,
};
use crate::dispatch;
use crate::error::{Error, Result};
use crate::problem::AttnParams;
use crate::variant::{Family, KernelSpec};
use cudarc::driver::CudaStream;

/// A paged K/V cache: the key and value page pools, the block table and each sequence's key
/// count ([`PagedKv::new`]).
///
/// `#[non_exhaustive]`, so that the cache can gain a part without breaking callers; a struct
/// literal does not compile outside the crate:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::{IdxRef, PagedKv, TensorRef};
/// fn cache<'a>(
///     [k_cache, v_cache]: [TensorRef<'a>; 2],
///     [block_table, seqlens_k]: [IdxRef<'a>; 2],
/// ) -> PagedKv<'a> {
///     PagedKv { k_cache, v_cache, block_table, max_pages: 8, seqlens_k }
/// }
/// ```
#[non_exhaustive]
pub struct PagedKv<'a> {
    /// Key pages `[pages, page_size, heads_kv, dim]` (page size 16..=256 tokens).
    pub k_cache: TensorRef<'a>,
    /// Value pages, shaped like the key pages.
    pub v_cache: TensorRef<'a>,
    /// i32 `[batch, max_pages]`: sequence b's key j is in page `block_table[b][j / page_size]`
    /// at row `j % page_size`. Entries past a sequence's pages do not affect its result.
    pub block_table: IdxRef<'a>,
    /// Pages per sequence in the block table.
    pub max_pages: usize,
    /// i32 `[batch]`: keys of each sequence (at most `max_pages * page_size`).
    pub seqlens_k: IdxRef<'a>,
}

impl<'a> PagedKv<'a> {
    /// The cache of key pages `k_cache` and value pages `v_cache` (each
    /// `[pages, page_size, heads_kv, dim]`), the i32 block table `[batch, max_pages]` and the
    /// i32 key counts `seqlens_k` `[batch]` (the module docs show one).
    pub fn new(
        k_cache: TensorRef<'a>,
        v_cache: TensorRef<'a>,
        block_table: IdxRef<'a>,
        max_pages: usize,
        seqlens_k: IdxRef<'a>,
    ) -> PagedKv<'a> {
        PagedKv {
            k_cache,
            v_cache,
            block_table,
            max_pages,
            seqlens_k,
        }
    }
}

impl PagedKv<'_> {
    /// The cache's borrows with the stream each was made on, in the order the stream check
    /// reports them.
    fn on(&self) -> [(&'static str, StreamId); 4] {
        [
            self.k_cache.on("the K cache"),
            self.v_cache.on("the V cache"),
            self.block_table.on("the block table"),
            self.seqlens_k.on("seqlens_k"),
        ]
    }

    /// The validation view of the cache's table.
    fn desc(&self) -> PagedDesc {
        PagedDesc {
            block_table: (self.block_table.ptr, self.block_table.len),
            max_pages: self.max_pages,
            seqlens_k: (self.seqlens_k.ptr, self.seqlens_k.len),
        }
    }
}

/// One attention call over a paged cache (see the module docs for an example). Its
/// [`CallCommon`] holds Q `[batch, seq_q, heads_q, dim]` (fp16 or bf16, so no Q descale), O
/// shaped like Q (fully written), the LSE as fp32 `[batch, heads_q, seq_q]`, and an E4M3
/// cache's K and V descales, per kv head or per (batch, kv head). Causal aligns each
/// sequence bottom-right: query i of a sequence with n keys sees key j iff
/// `j <= i + n - seq_q`.
///
/// `#[non_exhaustive]`, so that arguments can be added without breaking callers: outside the
/// crate a call is built with [`PagedAttention::new`] and its `with_*` setters, not a struct
/// literal:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::{CallCommon, PagedAttention, PagedKv};
/// fn call<'a>(common: CallCommon<'a>, kv: PagedKv<'a>) -> PagedAttention<'a> {
///     PagedAttention { common, kv }
/// }
/// ```
#[non_exhaustive]
pub struct PagedAttention<'a> {
    /// Q, O, the LSE, the descales and the parameters.
    pub common: CallCommon<'a>,
    /// The cache: fp16/bf16 like Q, or E4M3 with descales.
    pub kv: PagedKv<'a>,
}

impl<'a> PagedAttention<'a> {
    /// A call of `q` against the cache `kv` into `o`, without LSE or descales.
    pub fn new(
        q: TensorRef<'a>,
        kv: PagedKv<'a>,
        o: TensorMut<'a>,
        params: AttnParams,
    ) -> PagedAttention<'a> {
        PagedAttention {
            common: CallCommon::new(q, o, params),
            kv,
        }
    }
}

common_builders!(PagedAttention, kv);

impl PagedAttention<'_> {
    /// Every borrow of the call with the stream it was made on.
    pub(crate) fn streams(&self) -> impl Iterator<Item = (&'static str, StreamId)> + '_ {
        let c = &self.common;
        let [kc, vc, table, lens] = self.kv.on();
        c.streams([c.q.on("Q"), kc, vc, table, lens, c.o.on("O")])
    }

    /// The validation view of this call (K and V are the page pools).
    pub(crate) fn describe(&self) -> (CallDesc, PagedDesc) {
        (
            self.common.desc(self.kv.k_cache.desc, self.kv.v_cache.desc),
            self.kv.desc(),
        )
    }
}

/// One attention call over a paged cache whose queries are a variable-length batch: sequence
/// b is the packed query tokens `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` against its
/// `seqlens_k[b]` keys in the pages its block-table row lists.
///
/// ```no_run
/// # fn main() -> fp8_sdpa::Result<()> {
/// use fp8_sdpa::runtime::{CallOptions, Device, IdxRef, PagedAttentionVarlen, PagedKv, TensorMut, TensorRef};
/// use fp8_sdpa::{AttnParams, DType, Layout};
/// let dev = Device::open(0)?;
/// let stream = dev.new_stream()?;
/// let (heads_q, heads_kv, dim, page_size, pages, max_pages) = (32, 8, 128, 64, 24, 8);
/// // Three sequences: one decode token over 300 cached keys, 4 speculative tokens over 17,
/// // one token over 512.
/// let (cu_q, lens, total_q) = ([0i32, 1, 5, 6], [300i32, 17, 512], 6);
/// let q = stream.alloc_zeros::<u16>(total_q * heads_q * dim).unwrap(); // f16 bits
/// let k = stream.alloc_zeros::<u16>(pages * page_size * heads_kv * dim).unwrap();
/// let v = stream.alloc_zeros::<u16>(pages * page_size * heads_kv * dim).unwrap();
/// let table = stream.clone_htod(&(0..(3 * max_pages) as i32).collect::<Vec<_>>()).unwrap();
/// let cu_q = stream.clone_htod(&cu_q).unwrap();
/// let lens = stream.clone_htod(&lens).unwrap();
/// let mut o = stream.alloc_zeros::<u16>(total_q * heads_q * dim).unwrap();
/// let pool = [pages, page_size, heads_kv, dim];
/// let call = PagedAttentionVarlen::new(
///     TensorRef::packed(&q, &stream, DType::F16, [total_q, heads_q, dim])?,
///     PagedKv::new(
///         TensorRef::contiguous(&k, &stream, DType::F16, pool, Layout::Bshd)?,
///         TensorRef::contiguous(&v, &stream, DType::F16, pool, Layout::Bshd)?,
///         IdxRef::new(&table, &stream),
///         max_pages,
///         IdxRef::new(&lens, &stream),
///     ),
///     TensorMut::packed(&mut o, &stream, DType::F16, [total_q, heads_q, dim])?,
///     IdxRef::new(&cu_q, &stream),
///     4, // the longest sequence's queries
///     AttnParams::default_for(dim, true),
/// );
/// dev.paged_attention_varlen(&stream, &call, CallOptions::default())?;
/// # Ok(())
/// # }
/// ```
///
/// `#[non_exhaustive]`, so that arguments can be added without breaking callers: outside the
/// crate a call is built with [`PagedAttentionVarlen::new`] and its `with_*` setters, not a
/// struct literal:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::{CallCommon, IdxRef, PagedAttentionVarlen, PagedKv};
/// fn call<'a>(
///     common: CallCommon<'a>,
///     kv: PagedKv<'a>,
///     cu_seqlens_q: IdxRef<'a>,
/// ) -> PagedAttentionVarlen<'a> {
///     PagedAttentionVarlen { common, kv, cu_seqlens_q, max_seqlen_q: 1 }
/// }
/// ```
#[non_exhaustive]
pub struct PagedAttentionVarlen<'a> {
    /// Q packed `[total_q, heads_q, dim]` ([`TensorRef::packed`], fp16 or bf16, so no Q
    /// descale), O packed like Q ([`TensorMut::packed`]; every token's rows are written), the
    /// LSE as fp32 `[heads_q, total_q]`, an E4M3 cache's descales (per kv head or per
    /// (sequence, kv head)) and the parameters (causal aligns each sequence bottom-right:
    /// query i of a sequence with n_q queries and n_k keys sees key j iff
    /// `j <= i + n_k - n_q`).
    pub common: CallCommon<'a>,
    /// The cache: fp16/bf16 like Q, or E4M3 with descales; `block_table` `[batch, max_pages]`
    /// and `seqlens_k` `[batch]` count the sequences of `cu_seqlens_q`.
    pub kv: PagedKv<'a>,
    /// i32 `[batch + 1]`: `0`, then the running total of the sequences' query tokens (the last
    /// entry is `total_q`).
    pub cu_seqlens_q: IdxRef<'a>,
    /// The longest sequence's query tokens.
    pub max_seqlen_q: usize,
}

impl<'a> PagedAttentionVarlen<'a> {
    /// A call of packed `q` (sequences cut by `cu_seqlens_q`, the longest `max_seqlen_q`
    /// tokens) against the cache `kv` into packed `o`, without LSE or descales.
    pub fn new(
        q: TensorRef<'a>,
        kv: PagedKv<'a>,
        o: TensorMut<'a>,
        cu_seqlens_q: IdxRef<'a>,
        max_seqlen_q: usize,
        params: AttnParams,
    ) -> PagedAttentionVarlen<'a> {
        PagedAttentionVarlen {
            common: CallCommon::new(q, o, params),
            kv,
            cu_seqlens_q,
            max_seqlen_q,
        }
    }
}

common_builders!(PagedAttentionVarlen, kv);

impl PagedAttentionVarlen<'_> {
    /// Every borrow of the call with the stream it was made on.
    pub(crate) fn streams(&self) -> impl Iterator<Item = (&'static str, StreamId)> + '_ {
        let c = &self.common;
        let [kc, vc, table, lens] = self.kv.on();
        c.streams([c.q.on("Q"), kc, vc, table, lens, c.o.on("O")])
            .chain([self.cu_seqlens_q.on("cu_seqlens_q")])
    }

    /// The validation view of this call (K and V are the page pools; the [`VarlenDesc`] has
    /// no `cu_seqlens_k`).
    pub(crate) fn describe(&self) -> (CallDesc, PagedDesc, VarlenDesc) {
        (
            self.common.desc(self.kv.k_cache.desc, self.kv.v_cache.desc),
            self.kv.desc(),
            VarlenDesc {
                cu_seqlens_q: (self.cu_seqlens_q.ptr, self.cu_seqlens_q.len),
                cu_seqlens_k: (0, 0),
                max_seqlen_q: self.max_seqlen_q,
                max_seqlen_k: 0,
            },
        )
    }
}

/// Reads a paged call's block table and sequence lengths back and checks them
/// ([`check_page_table`]): the dense and varlen paged calls' shared check.
fn check_table_on_device(
    stream: &CudaStream,
    paged: &PagedDesc,
    page_size: usize,
    pages: usize,
) -> Result<()> {
    let table = read_back::<i32>(
        stream,
        paged.block_table.0,
        paged.block_table.1,
        "reading the block table back",
    )?;
    let lens = read_back::<i32>(
        stream,
        paged.seqlens_k.0,
        paged.seqlens_k.1,
        "reading seqlens_k back",
    )?;
    check_page_table(&table, &lens, paged.max_pages, page_size, pages)?;
    Ok(())
}

impl Device {
    /// Validates `a`, then launches the decode family's varlen mode over the paged cache on
    /// `stream` (`runtime/varlen_decode.rs`): the caller's decode variant, or the decode
    /// default (tuned tables are not consulted).
    ///
    /// With `opts.check_descales` (the default) the descales, `cu_seqlens_q`, the block table
    /// and the sequence lengths are read back and checked first (a stream synchronization):
    /// the offsets start at 0, never decrease, end at Q's token count, and no sequence has
    /// more than `max_seqlen_q` queries; every length fits the table and every page a sequence
    /// uses is a page of the caches; each mistake is an [`Error::InvalidInput`] naming the
    /// entry.
    ///
    /// With the check off the call trusts those values for its numbers only: the kernel
    /// clamps the offsets to the packed Q and O, each length to `0..=max_pages * page_size`
    /// (so a sequence reads only its own row of the table), and each table entry it uses to
    /// `0..pages` of the caches (an entry outside that range reads the last page). A bad
    /// value gives wrong output but never reads or writes outside the tensors and arrays.
    pub fn paged_attention_varlen(
        &self,
        stream: &CudaStream,
        a: &PagedAttentionVarlen<'_>,
        opts: CallOptions,
    ) -> Result<Launched> {
        check_streams(stream, a.streams())?;
        let (call, paged, vl) = a.describe();
        let v = validate_paged_varlen(&call, &paged, vl.cu_seqlens_q, vl.max_seqlen_q)?;
        let page_size = call.k.shape[1];
        if opts.check_descales {
            check_descales(stream, a.common.named_descales())?;
            let cu_q = read_back::<i32>(
                stream,
                vl.cu_seqlens_q.0,
                vl.cu_seqlens_q.1,
                "reading cu_seqlens_q back",
            )?;
            check_cu_seqlens_q(&cu_q, call.q.shape[1], vl.max_seqlen_q)?;
            check_table_on_device(stream, &paged, page_size, call.k.shape[0])?;
        }
        let arch = self.info().arch;
        let variant = super::varlen_decode::choose_paged(
            arch,
            v.precision,
            v.shape.head_dim as u32,
            opts.kernel,
        )?;
        self.launch_varlen_decode(
            stream,
            &call,
            &v,
            a.common.descales(),
            variant,
            &vl,
            Some(PagedArgs::of(&call, &paged)?),
            opts.usable_sms(self.info().sm_count),
        )
    }

    /// Validates `a`, then launches the decode family over the paged cache on `stream`.
    /// With `opts.check_descales` (the default) the descales, the block table and the
    /// sequence lengths are read back and checked first (a stream synchronization): every
    /// length within `0..=max_pages * page_size`, every page a sequence uses within
    /// `0..pages`, each mistake an [`Error::InvalidInput`] naming the entry. Turn it off in a
    /// serving loop once the cache's bookkeeping is trusted.
    ///
    /// With the check off the call trusts those values for its numbers only: the kernel
    /// clamps each length to `0..=max_pages * page_size` (so a sequence reads only its own
    /// row of the table; entries past its length are never used) and each table entry it
    /// uses to `0..pages` (an entry outside that range reads the caches' last page). A bad
    /// table or length gives wrong output but never reads outside the caches or the table.
    pub fn paged_attention(
        &self,
        stream: &CudaStream,
        a: &PagedAttention<'_>,
        opts: CallOptions,
    ) -> Result<Launched> {
        check_streams(stream, a.streams())?;
        let (call, paged) = a.describe();
        let v = validate_paged(&call, &paged)?;
        let page_size = call.k.shape[1];
        if opts.check_descales {
            check_descales(stream, a.common.named_descales())?;
            check_table_on_device(stream, &paged, page_size, call.k.shape[0])?;
        }
        let variant = match opts.kernel {
            KernelChoice::Auto => dispatch::choose_paged(
                self.info().arch,
                v.precision,
                &v.shape,
                self.info().sm_count,
            )?,
            KernelChoice::Variant(var) if var.family == Family::Decode => var,
            KernelChoice::Variant(var) => {
                return Err(Error::InvalidInput(format!(
                    "{var}: only the decode family reads a paged cache; pass a decode variant \
                     or KernelChoice::Auto"
                )))
            }
        };
        let spec = KernelSpec {
            variant,
            precision: v.precision,
            head_dim: v.shape.head_dim as u32,
            causal: a.common.params.causal,
        };
        spec.validate(self.info().arch)?;
        let kernel = self.kernel(&spec)?;
        let params = sdpa_params(&call, &v.shape, a.common.descales())?;
        decode::launch(
            stream,
            &kernel,
            &spec,
            &v.shape,
            &params,
            Some(PagedArgs::of(&call, &paged)?),
            self.info().sm_count,
        )
    }
}
