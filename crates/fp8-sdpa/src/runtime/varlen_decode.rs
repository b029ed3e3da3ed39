//! Variable-length batches on the decode family (issue 31): decode.cu's `SDPA_VARLEN` module,
//! for packed contiguous K/V ([`Device::attention_varlen`]'s decode branch) and for a paged
//! cache ([`super::PagedAttentionVarlen`]).
//!
//! Dispatch: a varlen call takes the decode family when the caller names a decode variant, or
//! under [`KernelChoice::Auto`] when the call is decode-shaped by the dense rule
//! ([`AttnShape::is_decode`] on the sequences as the batch and the longest lengths: few query
//! rows per kv head, a long cache) and the precision is one the decode family serves (fp16 or
//! bf16 Q with 16-bit or E4M3 K/V); the variant is the decode rules' pick of
//! [`crate::dispatch::varlen`] (tuned tables are not consulted). Everything else goes on to the
//! other families' varlen dispatch ([`super::varlen::choose_varlen`]).
//!
//! The kernel: blockIdx.z is the sequence, and the grid (splits, kv heads x row blocks,
//! sequences) is the dense one of the longest sequence ([`geometry::grid`]). A row block past a
//! sequence's rows returns at once; a split past a sequence's keys writes only a -inf partial
//! LSE, which the merge skips; so a short sequence in a batch with a long one costs a few
//! empty blocks, not a pass over the long one's keys. The partials and the LSE are
//! `[.., heads_q, total_q]`, and the merge writes the packed O. Offsets are clamped to the
//! packed tensors (a paged length to the table's capacity) in the kernel.

use super::call::{sdpa_params, Descale, KernelChoice, Launched};
use super::decode::{self, PagedArgs};
use super::device::Device;
use super::validate::{CallDesc, Validated, VarlenDesc};
use crate::dispatch;
use crate::error::Result;
use crate::problem::AttnShape;
use crate::variant::{Family, KernelSpec, Variant};
use crate::{Arch, Precision};
use cudarc::driver::CudaStream;

/// The decode variant a varlen call runs, or `None` when it belongs to another family: the
/// caller's variant when it is a decode one; under `Auto` the decode default when `shape`
/// (the sequences as the batch, the longest lengths) is decode-shaped and the decode family
/// serves `precision` on `arch`.
pub fn choose(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    choice: KernelChoice,
) -> Option<Variant> {
    match choice {
        KernelChoice::Variant(v) => (v.family == Family::Decode).then_some(v),
        KernelChoice::Auto => {
            let v = dispatch::varlen(arch, precision, shape.head_dim as u32, causal, Some(shape));
            (v.family == Family::Decode).then_some(v)
        }
    }
}

/// The paged variant of a varlen call: the caller's (decode only, else an error naming the
/// fix), or the decode default.
pub(crate) fn choose_paged(
    arch: Arch,
    precision: Precision,
    head_dim: u32,
    choice: KernelChoice,
) -> Result<Variant> {
    match choice {
        KernelChoice::Variant(v) if v.family == Family::Decode => Ok(v),
        KernelChoice::Variant(v) => Err(crate::Error::InvalidInput(format!(
            "{v}: only the decode family reads a paged cache; pass a decode variant or \
             KernelChoice::Auto"
        ))),
        KernelChoice::Auto => dispatch::varlen_paged(arch, precision, head_dim).ok_or_else(|| {
            crate::Error::Unsupported(format!(
                "{precision}: a paged cache takes fp16 or bf16 queries with fp16, bf16 or \
                     E4M3 K/V"
            ))
        }),
    }
}

impl Device {
    /// Launches `variant` (decode family) in its varlen mode for a validated call: `call` and
    /// `v` from validation (packed Q and O, `v.shape` the sequences as the batch and the
    /// longest lengths), `vl`'s offsets (its `cu_seqlens_k` unused when `paged`), K/V packed or
    /// the page pools of `paged`; splits sized for `sm_count` SMs. The caller has checked the
    /// offsets when asked; the kernel clamps them either way.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_varlen_decode(
        &self,
        stream: &CudaStream,
        call: &CallDesc,
        v: &Validated,
        descales: [&Option<Descale<'_>>; 3],
        variant: Variant,
        vl: &VarlenDesc,
        paged: Option<PagedArgs>,
        sm_count: u32,
    ) -> Result<Launched> {
        let spec = KernelSpec {
            variant,
            precision: v.precision,
            head_dim: v.shape.head_dim as u32,
            causal: call.params.causal,
        };
        spec.validate(self.info().arch)?;
        let kernel = self.kernel_varlen(&spec)?;
        let mut params = sdpa_params(call, &v.shape, descales)?;
        // Sequences are cut out by the offsets (Q and O always; K and V unless paged, where the
        // batch stride is the page stride).
        params.q_stride_b = 0;
        params.o_stride_b = 0;
        params.cu_seqlens_q = vl.cu_seqlens_q.0;
        params.total_q = call.q.shape[1] as i32;
        if paged.is_none() {
            params.k_stride_b = 0;
            params.v_stride_b = 0;
            params.cu_seqlens_k = vl.cu_seqlens_k.0;
            params.total_k = call.k.shape[1] as i32;
        }
        decode::launch(stream, &kernel, &spec, &v.shape, &params, paged, sm_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::registry;

    fn shape(batch: usize, max_q: usize, max_k: usize, hq: usize, hkv: usize) -> AttnShape {
        AttnShape::new(batch, max_q, max_k, hq, hkv, 128)
    }

    #[test]
    fn decode_shaped_varlen_calls_take_the_decode_family() {
        for arch in [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90a] {
            for p in [
                Precision::F16,
                Precision::Bf16,
                Precision::Fp8KvF16,
                Precision::Fp8KvBf16,
            ] {
                for d in crate::variant::HEAD_DIMS {
                    for causal in [false, true] {
                        // Decode steps and a few speculative tokens against long caches.
                        for s in [
                            AttnShape::new(7, 1, 4097, 32, 8, d as usize),
                            AttnShape::new(3, 16, 2000, 32, 8, d as usize),
                            AttnShape::new(2, 8, 1024, 8, 1, d as usize),
                        ] {
                            let got = choose(arch, p, &s, causal, KernelChoice::Auto);
                            // The dense rule: the decode family wherever dense dispatch takes
                            // it for the same shape (everywhere but the 16-bit D256 tiles on
                            // sm_86/89, whose shared memory holds no decode tile).
                            let dense =
                                registry::default_variant_for_shape(arch, p, &s, causal, 132);
                            let what = format!("{arch:?} {p} d{d} causal {causal} {s:?}");
                            assert_eq!(got.is_some(), dense.family == Family::Decode, "{what}");
                            if matches!(arch, Arch::Sm80 | Arch::Sm90a) {
                                assert!(got.is_some(), "{what}");
                            }
                            let Some(v) = got else { continue };
                            assert_eq!(v, registry::decode_default(arch, p, d), "{what}");
                            assert!(super::super::varlen::reads_varlen(&v));
                            let spec = KernelSpec {
                                variant: v,
                                precision: p,
                                head_dim: d,
                                causal,
                            };
                            spec.validate(arch).unwrap();
                            // Registered, so that check compiles its varlen mode and verify
                            // runs it.
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
    }

    #[test]
    fn other_varlen_calls_go_on_to_the_other_families() {
        let auto = KernelChoice::Auto;
        let a = Arch::Sm90a;
        // Prefill-shaped: too many rows per kv head, or too short a cache.
        assert_eq!(
            choose(a, Precision::F16, &shape(4, 17, 4096, 32, 8), false, auto),
            None
        );
        assert_eq!(
            choose(a, Precision::F16, &shape(4, 1, 1023, 32, 8), false, auto),
            None
        );
        // Precisions the decode family does not serve.
        for p in [Precision::Fp8, Precision::SimFp8] {
            assert_eq!(choose(a, p, &shape(4, 1, 4096, 32, 8), false, auto), None);
        }
        // An explicit variant is taken as given: a decode one here, any other not.
        let dec: Variant = "decode.m16.n32.w2.s4.b4.cex".parse().unwrap();
        let s = shape(2, 300, 300, 8, 8);
        assert_eq!(
            choose(a, Precision::F16, &s, true, KernelChoice::Variant(dec)),
            Some(dec)
        );
        let portable: Variant = "portable.m128.n32.w4.s2.b2.ctelx".parse().unwrap();
        let decode_shaped = shape(4, 1, 4096, 32, 8);
        assert_eq!(
            choose(
                a,
                Precision::F16,
                &decode_shaped,
                false,
                KernelChoice::Variant(portable)
            ),
            None
        );
    }

    #[test]
    fn paged_varlen_takes_decode_variants_only() {
        let a = Arch::Sm80;
        let v = choose_paged(a, Precision::Bf16, 256, KernelChoice::Auto).unwrap();
        assert_eq!(v, registry::decode_default(a, Precision::Bf16, 256));
        let portable: Variant = "portable.m128.n32.w4.s2.b2.ctelx".parse().unwrap();
        let e = choose_paged(a, Precision::F16, 128, KernelChoice::Variant(portable));
        assert!(
            matches!(&e, Err(crate::Error::InvalidInput(m)) if m.contains("only the decode family")),
            "{e:?}"
        );
        assert!(matches!(
            choose_paged(a, Precision::Fp8, 128, KernelChoice::Auto),
            Err(crate::Error::Unsupported(_))
        ));
    }
}
