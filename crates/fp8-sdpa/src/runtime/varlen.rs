//! Variable-length batches (FlashAttention's varlen convention): the sequences of a batch are
//! packed one after another into Q, K and V (`[total_tokens, heads, dim]`, no padding), and
//! cumulative offsets say where each starts: sequence b is the query tokens
//! `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` and the keys `cu_seqlens_k[b]..cu_seqlens_k[b + 1]`.
//! Each sequence attends only to its own keys; under a causal mask aligned bottom-right per
//! sequence (query i of a sequence with `n_q` queries and `n_k` keys sees key j iff
//! `j <= i + n_k - n_q`). The output O is packed like Q and the LSE is fp32
//! `[heads_q, total_q]`, natural log; a query that sees no key (a sequence without keys, or
//! causal with more queries than keys) gets O = 0 and LSE = -inf.
//!
//! Three families read packed sequences (issue 31), each in a compile mode of its own
//! (`SDPA_VARLEN`, built on the first varlen call; the dense kernels are unchanged by it):
//! - the decode family (decode.cu, sm_80 and up), for decode-shaped calls: under
//!   [`KernelChoice::Auto`] when [`crate::AttnShape::is_decode`] holds for the sequences as the
//!   batch and the longest lengths (few query rows per kv head, a cache of 1k keys or more) and
//!   the precision is fp16/bf16 Q with 16-bit or E4M3 K/V, or when the caller names a decode
//!   variant (see `runtime/varlen_decode.rs`; it also reads a paged cache with packed queries,
//!   [`super::PagedAttentionVarlen`]);
//! - the Hopper family (TMA and `wgmma`, sm_90a: fp16, bf16, full FP8), for the other fp16/bf16
//!   calls at D64 and D128 on sm_90a; its kernels read each sequence through tensor maps over
//!   the packed tensors and store O from registers (their TMA-store epilogue would write past a
//!   sequence's last row into the next). At D256 and in full FP8 their varlen mode spills a few
//!   registers (the sequence bounds), so they run varlen batches there only when chosen;
//! - the portable family (`mma.sync`, sm_80 and up), for every other call: dispatch takes its
//!   non-persistent default for the class (the varlen rules of [`crate::dispatch::RULES`];
//!   tuned tables are not consulted).
//!
//! An explicit variant of another family, or one of the portable family's persistent
//! decoupled-sync "stream" variants, is an [`Error::Unsupported`]. `sdpa-lab check` gates the
//! varlen mode of the dispatch defaults (`--varlen`: of every spec that reads varlen batches).
//!
//! ```no_run
//! # fn main() -> fp8_sdpa::Result<()> {
//! use fp8_sdpa::runtime::{AttentionVarlen, CallOptions, Device, IdxRef, TensorMut, TensorRef, VecMut};
//! use fp8_sdpa::{AttnParams, DType};
//! let dev = Device::open(0)?;
//! let stream = dev.new_stream()?;
//! let (heads_q, heads_kv, dim) = (32, 8, 128);
//! // Three sequences: 5 queries over 5 keys, 1 over 300 (a decode step), none over 12.
//! let (cu_q, cu_k) = ([0i32, 5, 6, 6], [0i32, 5, 305, 317]);
//! let (total_q, total_k) = (6, 317);
//! let q = stream.alloc_zeros::<u16>(total_q * heads_q * dim).unwrap(); // f16 bits
//! let k = stream.alloc_zeros::<u16>(total_k * heads_kv * dim).unwrap();
//! let v = stream.alloc_zeros::<u16>(total_k * heads_kv * dim).unwrap();
//! let mut o = stream.alloc_zeros::<u16>(total_q * heads_q * dim).unwrap();
//! let mut lse = stream.alloc_zeros::<f32>(heads_q * total_q).unwrap();
//! let cu_q = stream.clone_htod(&cu_q).unwrap();
//! let cu_k = stream.clone_htod(&cu_k).unwrap();
//! let call = AttentionVarlen::new(
//!     TensorRef::packed(&q, &stream, DType::F16, [total_q, heads_q, dim])?,
//!     TensorRef::packed(&k, &stream, DType::F16, [total_k, heads_kv, dim])?,
//!     TensorRef::packed(&v, &stream, DType::F16, [total_k, heads_kv, dim])?,
//!     TensorMut::packed(&mut o, &stream, DType::F16, [total_q, heads_q, dim])?,
//!     [IdxRef::new(&cu_q, &stream), IdxRef::new(&cu_k, &stream)],
//!     [5, 300], // the longest sequence's queries and keys
//!     AttnParams::default_for(dim, true),
//! )
//! .with_lse(VecMut::new(&mut lse, &stream));
//! dev.attention_varlen(&stream, &call, CallOptions::default())?;
//! # Ok(())
//! # }
//! ```

use super::attention::launch_sdpa;
use super::call::{
    check_descales, common_builders, read_back, sdpa_params, CallCommon, CallOptions, KernelChoice,
    Launched,
};
use super::device::Device;
use super::tensor::{check_streams, IdxRef, StreamId, TensorMut, TensorRef};
use super::validate::{check_cu_seqlens, validate_varlen, CallDesc, VarlenDesc};
use crate::dispatch;
use crate::error::{Error, Result};
use crate::kernels::geometry;
use crate::problem::AttnParams;
use crate::variant::{Family, KernelSpec, Variant};
use cudarc::driver::CudaStream;

/// One attention call over a variable-length batch (see the module docs for the packing and
/// an example). Its [`CallCommon`] holds Q packed `[total_q, heads_q, dim]`
/// ([`TensorRef::packed`]), O packed like Q ([`TensorMut::packed`]; every token's rows are
/// written), the LSE as fp32 `[heads_q, total_q]`, and descales per head or per (sequence,
/// head).
///
/// `#[non_exhaustive]`, so that arguments can be added without breaking callers: outside the
/// crate a call is built with [`AttentionVarlen::new`] and its `with_*` setters, not a struct
/// literal:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::{AttentionVarlen, CallCommon, IdxRef, TensorRef};
/// fn call<'a>(
///     common: CallCommon<'a>,
///     [k, v]: [TensorRef<'a>; 2],
///     [cu_seqlens_q, cu_seqlens_k]: [IdxRef<'a>; 2],
/// ) -> AttentionVarlen<'a> {
///     AttentionVarlen {
///         common,
///         k,
///         v,
///         cu_seqlens_q,
///         cu_seqlens_k,
///         max_seqlen_q: 1,
///         max_seqlen_k: 1,
///     }
/// }
/// ```
#[non_exhaustive]
pub struct AttentionVarlen<'a> {
    /// Q, O, the LSE, the descales and the parameters (causal aligns each sequence
    /// bottom-right).
    pub common: CallCommon<'a>,
    /// Keys, packed `[total_k, heads_kv, dim]`.
    pub k: TensorRef<'a>,
    /// Values, shaped like K.
    pub v: TensorRef<'a>,
    /// i32 `[batch + 1]`: `0`, then the running total of the sequences' query tokens (the last
    /// entry is `total_q`).
    pub cu_seqlens_q: IdxRef<'a>,
    /// i32 `[batch + 1]`: `0`, then the running total of the sequences' keys (the last entry
    /// is `total_k`).
    pub cu_seqlens_k: IdxRef<'a>,
    /// The longest sequence's query tokens: the grid covers this many rows per sequence.
    pub max_seqlen_q: usize,
    /// The longest sequence's keys.
    pub max_seqlen_k: usize,
}

impl<'a> AttentionVarlen<'a> {
    /// A call of packed `q` against packed `k` and `v` into packed `o`, the sequences cut by
    /// `[cu_seqlens_q, cu_seqlens_k]`, the longest `[max_seqlen_q, max_seqlen_k]` tokens;
    /// without LSE or descales.
    pub fn new(
        q: TensorRef<'a>,
        k: TensorRef<'a>,
        v: TensorRef<'a>,
        o: TensorMut<'a>,
        [cu_seqlens_q, cu_seqlens_k]: [IdxRef<'a>; 2],
        [max_seqlen_q, max_seqlen_k]: [usize; 2],
        params: AttnParams,
    ) -> AttentionVarlen<'a> {
        AttentionVarlen {
            common: CallCommon::new(q, o, params),
            k,
            v,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
        }
    }
}

common_builders!(AttentionVarlen, qkv);

impl AttentionVarlen<'_> {
    /// Every borrow of the call with the stream it was made on.
    pub(crate) fn streams(&self) -> impl Iterator<Item = (&'static str, StreamId)> + '_ {
        let c = &self.common;
        c.streams([
            c.q.on("Q"),
            self.k.on("K"),
            self.v.on("V"),
            c.o.on("O"),
            self.cu_seqlens_q.on("cu_seqlens_q"),
            self.cu_seqlens_k.on("cu_seqlens_k"),
        ])
    }

    /// The validation view of this call.
    pub(crate) fn describe(&self) -> (CallDesc, VarlenDesc) {
        (
            self.common.desc(self.k.desc, self.v.desc),
            VarlenDesc {
                cu_seqlens_q: (self.cu_seqlens_q.ptr, self.cu_seqlens_q.len),
                cu_seqlens_k: (self.cu_seqlens_k.ptr, self.cu_seqlens_k.len),
                max_seqlen_q: self.max_seqlen_q,
                max_seqlen_k: self.max_seqlen_k,
            },
        )
    }
}

/// Whether `variant` reads variable-length batches: the decode family (decode.cu's varlen
/// mode, runtime/varlen_decode.rs), the Hopper family, and the portable family except its
/// persistent variants (the stream, whose K/V stream runs across work tiles; the family's
/// only persistent variants).
pub fn reads_varlen(variant: &Variant) -> bool {
    match variant.family {
        Family::Decode | Family::Hopper => true,
        Family::Portable => !variant.persistent,
        Family::Reference => false,
    }
}

/// The variant a varlen call runs: `choice`'s, if it reads varlen batches (else an
/// [`Error::Unsupported`] that says what does), or dispatch's non-decode varlen pick
/// ([`crate::dispatch::varlen`]).
pub fn choose_varlen(
    arch: crate::Arch,
    precision: crate::Precision,
    head_dim: u32,
    causal: bool,
    choice: KernelChoice,
) -> Result<Variant> {
    match choice {
        KernelChoice::Auto => Ok(dispatch::varlen(arch, precision, head_dim, causal, None)),
        KernelChoice::Variant(v) if reads_varlen(&v) => Ok(v),
        KernelChoice::Variant(v) => Err(Error::Unsupported(format!(
            "{}: variable-length batches run on the portable, Hopper and decode families only, \
             and not on the portable family's persistent decoupled-sync (stream) variants, so \
             far (issue 31); pass a variant such as {} or KernelChoice::Auto",
            v.key(),
            dispatch::varlen(arch, precision, head_dim, causal, None).key()
        ))),
    }
}

impl Device {
    /// Validates `a`, picks the kernel (see the module docs: the decode family for
    /// decode-shaped calls, else the portable family) and launches it on `stream`. Returns once
    /// the launch is queued (with the decode family's merge behind it when the keys are split).
    ///
    /// With `opts.check_descales` (the default) the descales and both offset arrays are read
    /// back and checked first (a stream synchronization): offsets start at 0, never decrease,
    /// end at the packed tensors' token counts, and no sequence is longer than
    /// `max_seqlen_q` / `max_seqlen_k`; each mistake is an [`Error::InvalidInput`] naming the
    /// entry. An engine that builds its offsets itself may turn the check off: the kernel then
    /// clamps every offset to the packed tensors, so bad offsets never make it read or write
    /// outside them (but give wrong or unwritten rows).
    pub fn attention_varlen(
        &self,
        stream: &CudaStream,
        a: &AttentionVarlen<'_>,
        opts: CallOptions,
    ) -> Result<Launched> {
        check_streams(stream, a.streams())?;
        let (call, vl) = a.describe();
        let v = validate_varlen(&call, &vl)?;
        let (total_q, total_k) = (call.q.shape[1], call.k.shape[1]);
        if opts.check_descales {
            check_descales(stream, a.common.named_descales())?;
            let cu_q = read_back::<i32>(
                stream,
                vl.cu_seqlens_q.0,
                vl.cu_seqlens_q.1,
                "reading cu_seqlens_q back",
            )?;
            let cu_k = read_back::<i32>(
                stream,
                vl.cu_seqlens_k.0,
                vl.cu_seqlens_k.1,
                "reading cu_seqlens_k back",
            )?;
            check_cu_seqlens(
                &cu_q,
                &cu_k,
                [total_q, total_k],
                [vl.max_seqlen_q, vl.max_seqlen_k],
            )?;
        }
        let arch = self.info().arch;
        // The decode family first (runtime/varlen_decode.rs): decode-shaped calls, or a decode
        // variant named by the caller.
        if let Some(variant) = super::varlen_decode::choose(
            arch,
            v.precision,
            &v.shape,
            a.common.params.causal,
            opts.kernel,
        ) {
            return self.launch_varlen_decode(
                stream,
                &call,
                &v,
                a.common.descales(),
                variant,
                &vl,
                None,
                opts.usable_sms(self.info().sm_count),
            );
        }
        let head_dim = v.shape.head_dim as u32;
        let variant = choose_varlen(
            arch,
            v.precision,
            head_dim,
            a.common.params.causal,
            opts.kernel,
        )?;
        let spec = KernelSpec {
            variant,
            precision: v.precision,
            head_dim,
            causal: a.common.params.causal,
        };
        spec.validate(arch)?;
        // The kernel's variable-length mode (a module of its own: SDPA_VARLEN), compiled on
        // first use.
        let kernel = self.kernel_varlen(&spec)?;
        let sm_count = opts.usable_sms(self.info().sm_count);
        // The dense grids over the longest sequence (geometry.rs); blocks past a sequence's
        // end return at once.
        let g = geometry::grid(&spec, &v.shape, sm_count, self.info().l2_bytes);
        if g[0] > i32::MAX as u64 || g[1] > 65535 || g[2] > 65535 {
            return Err(Error::InvalidInput(format!(
                "grid {g:?} exceeds the device's launch limits (max_seqlen_q {} in blocks of {} \
                 rows, {} sequences, {} heads); split the batch",
                vl.max_seqlen_q,
                geometry::rows_per_work(&spec),
                v.shape.batch,
                v.shape.heads_q
            )));
        }
        let grid = [g[0] as u32, g[1] as u32, g[2] as u32];
        let mut params = sdpa_params(&call, &v.shape, a.common.descales())?;
        // Sequences are cut out by the offsets, not a batch stride.
        params.q_stride_b = 0;
        params.k_stride_b = 0;
        params.v_stride_b = 0;
        params.o_stride_b = 0;
        params.cu_seqlens_q = vl.cu_seqlens_q.0;
        params.cu_seqlens_k = vl.cu_seqlens_k.0;
        params.total_q = total_q as i32;
        params.total_k = total_k as i32;
        // SAFETY: the packed tensors were validated to cover `total` tokens each, the offset
        // arrays to hold batch + 1 entries, and the kernel clamps every offset to the totals
        // (TMA clips at the tensors' ends), so it reads and writes inside them whatever the
        // offsets hold. The Hopper maps see the packed tensors as one batch (O's is unused:
        // varlen calls store from registers). The borrows outlive the launch through `a`'s
        // guards.
        unsafe { launch_sdpa(stream, &kernel, spec, &call, grid, &params) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::registry;
    use crate::{Arch, Precision};

    #[test]
    fn dispatch_takes_a_variant_that_reads_varlen_on_every_arch() {
        for arch in [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90a] {
            for p in Precision::ALL {
                for d in crate::variant::HEAD_DIMS {
                    for causal in [false, true] {
                        let v = choose_varlen(arch, p, d, causal, KernelChoice::Auto).unwrap();
                        assert!(reads_varlen(&v), "{arch:?} {p} d{d}: {}", v.key());
                        let spec = KernelSpec {
                            variant: v,
                            precision: p,
                            head_dim: d,
                            causal,
                        };
                        spec.validate(arch)
                            .unwrap_or_else(|e| panic!("{}: {e}", spec.key()));
                        // Registered, so that check compiles it and verify runs it.
                        assert!(
                            registry::registered_for(arch).contains(&spec),
                            "{} is not registered for {arch:?}",
                            spec.key()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn other_families_and_the_stream_are_unsupported() {
        let stream: Variant = "portable.m256.n128.w8.s3.b1.cthpedx".parse().unwrap();
        let decode: Variant = "decode.m16.n64.w4.s3.b2.cex".parse().unwrap();
        let args = (Arch::Sm90a, Precision::F16, 128, false);
        for v in [stream, Variant::reference()] {
            let e = choose_varlen(args.0, args.1, args.2, args.3, KernelChoice::Variant(v));
            match e {
                Err(Error::Unsupported(m)) => {
                    assert!(
                        m.contains("portable, Hopper and decode families only")
                            && m.contains(&v.key()),
                        "{m}"
                    )
                }
                other => panic!("{}: {other:?}", v.key()),
            }
        }
        // The decode family reads varlen batches (runtime/varlen_decode.rs).
        assert!(reads_varlen(&decode));
        // So does the Hopper family, and dispatch takes it on sm_90a.
        let hopper = registry::default_variant(Arch::Sm90a, Precision::F16, 128, false);
        assert_eq!(hopper.family, Family::Hopper);
        assert_eq!(
            choose_varlen(Arch::Sm90a, Precision::F16, 128, false, KernelChoice::Auto).unwrap(),
            hopper
        );
        assert_eq!(
            choose_varlen(
                Arch::Sm90a,
                Precision::F16,
                128,
                false,
                KernelChoice::Variant(hopper)
            )
            .unwrap(),
            hopper
        );
    }
}
