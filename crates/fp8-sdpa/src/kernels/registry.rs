//! The registered kernel specs: what `sdpa-lab check` compiles and `verify` runs. Which of
//! them a call runs is [`crate::dispatch`]'s choice (its rule table); the functions below
//! that name a default are thin calls into it, kept for the callers that read them here.
//!
//! Portable family: the variants a shipped choice runs, each for the problem classes some
//! arch ships it for, plus the seeds' toggles' coverage (cp.async off, scalar P·V, block
//! barriers, padded rows, accurate exp2) over every class; nothing else (the experiments no
//! default used left with their modes, docs/results/2026-11-26-portable-round27/). A
//! registered spec is compiled for every arch whose shared memory it fits, so that a GPU of
//! one arch verifies the code of all.

use crate::arch::Arch;
use crate::dispatch;
use crate::dtype::Precision;
use crate::problem::AttnShape;
use crate::variant::{KernelSpec, Variant, HEAD_DIMS};

/// Every registered spec: each family's registered variants over the problem classes it serves.
pub fn registered() -> Vec<KernelSpec> {
    let mut out = Vec::new();
    for (variant, serves) in registered_variants() {
        let key = variant.key();
        let causal_too = !NON_CAUSAL_ONLY.contains(&key.as_str());
        let full_too = !CAUSAL_ONLY.contains(&key.as_str());
        out.extend(specs_of(variant).filter(|s| {
            serves(s.precision, s.head_dim) && if s.causal { causal_too } else { full_too }
        }));
    }
    out
}

/// `variant` over every problem class (precision, head dim, causal), valid or not, in that
/// nesting order.
pub fn specs_of(variant: Variant) -> impl Iterator<Item = KernelSpec> {
    Precision::ALL.into_iter().flat_map(move |precision| {
        HEAD_DIMS.into_iter().flat_map(move |head_dim| {
            [false, true].into_iter().map(move |causal| KernelSpec {
                variant,
                precision,
                head_dim,
                causal,
            })
        })
    })
}

/// The registered specs that `arch` can run: [`registered`] less the specs whose shared
/// memory exceeds the arch's opt-in limit (e.g. a 192 KB D256 tile is registered for
/// sm_90a's 227 KB, not for sm_80's 163 KB) and, off sm_90a, the `HOPPER_ONLY` variants.
/// What `check` compiles and `verify` runs per arch.
pub fn registered_for(arch: Arch) -> Vec<KernelSpec> {
    registered()
        .into_iter()
        .filter(|s| s.validate(arch).is_ok())
        .filter(|s| arch == Arch::Sm90a || !HOPPER_ONLY.contains(&s.variant.key().as_str()))
        .collect()
}

/// Variants registered for sm_90a only although they fit the others' shared memory: ptxas
/// allocates them without a spill for sm_90a but not for sm_80, and only Hopper ships them.
const HOPPER_ONLY: &[&str] = &[KV8_STREAM_D128, KV8_STREAM_D64];

/// Variants registered without their causal specs: the D128 stream, which dispatch takes
/// non-causal below S 2k only.
const NON_CAUSAL_ONLY: &[&str] = &[KV8_STREAM_D128];

/// Variants registered for their causal specs only: the tiles that dispatch takes for causal
/// lengths alone (paired rows, whose point is the causal diagonal; fragment decode's 128-row
/// and 64-row D64/D128 tiles, causal up to S 2k and S 512).
const CAUSAL_ONLY: &[&str] = &[
    KV8_D128_CAUSAL,
    KV8_FRAG_D128,
    KV8_FRAG_D64,
    KV8_FRAG_D64_SHORT,
];

/// The Hopper tiles for 8-bit K/V: 8 warps x 32 rows with decoupled sync; at D64 128 keys per
/// copy in two 64-key half steps, at D128 32 keys per step.
pub(crate) const KV8_D64: &str = "portable.m256.n128.w8.s3.b1.cthedx";
pub(crate) const KV8_D128: &str = "portable.m256.n32.w8.s4.b1.ctedx";
/// D128 8-bit K/V causal: the same tile with paired rows.
pub(crate) const KV8_D128_CAUSAL: &str = "portable.m256.n32.w8.s4.b1.ctredx";
/// Persistent decoupled sync (the stream): the D64 FP8-KV class default (Q in registers, one
/// Q tile); at D128 two Q tiles in shared memory.
pub(crate) const KV8_STREAM_D128: &str = "portable.m256.n32.w8.s4.b1.ctpedx";
pub(crate) const KV8_STREAM_D64: &str = "portable.m256.n128.w8.s3.b1.cthpedx";
/// 8-bit K/V at D256 on Hopper: FA2's D256 tile with the split decode's ring of one (a single
/// 8-bit slot, two staging pairs, one barrier per tile; 224 KB).
pub(crate) const KV8_D256: &str = "portable.m128.n64.w8.s1.b1.ctelx";

/// Hopper 8-bit K/V causal at short lengths: fragment decode on the 16-bit defaults' tiles
/// (two 128-row blocks per SM, no staging; see `Variant::fragment_decode`).
pub(crate) const KV8_FRAG_D128: &str = "portable.m128.n64.w4.s2.b2.ctfhelx";
pub(crate) const KV8_FRAG_D64: &str = "portable.m128.n128.w4.s2.b2.ctfhelx";
/// Hopper E4M3 K/V at D256: fragment decode with 16 rows per warp, 64-row blocks, two per SM
/// (96 KB; the 16-bit tile's 192 KB fits one).
pub(crate) const KV8_FRAG_D256: &str = "portable.m64.n64.w4.s2.b2.ctfelx";
/// Hopper FP8-KV at D64 causal: fragment decode with 16 rows per warp, four 64-row blocks per
/// SM (128 registers, 24 KB).
pub(crate) const KV8_FRAG_D64_SHORT: &str = "portable.m64.n64.w4.s2.b4.ctfelx";

/// Which problem classes (precision, head dim) a registered variant is compiled for.
pub type Serves = fn(Precision, u32) -> bool;

fn all(_: Precision, _: u32) -> bool {
    true
}
fn d64(_: Precision, d: u32) -> bool {
    d == 64
}
fn d128(_: Precision, d: u32) -> bool {
    d == 128
}
fn d256(_: Precision, d: u32) -> bool {
    d == 256
}
/// FP8-KV at D64 (8-bit K/V, 16-bit Q): the D64 stream keeps Q in registers, and the 8-bit
/// Q paths' decode of Q spills there.
fn d64_fp8kv(p: Precision, d: u32) -> bool {
    d == 64 && p.is_fp8_kv()
}
/// FP8-KV at D128: the D128 stream (16-bit Q only).
fn d128_fp8kv(p: Precision, d: u32) -> bool {
    d == 128 && p.is_fp8_kv()
}
fn d64_kv8(p: Precision, d: u32) -> bool {
    d == 64 && p.kv_is_8bit()
}
fn d128_kv8(p: Precision, d: u32) -> bool {
    d == 128 && p.kv_is_8bit()
}

fn sixteen_bit(p: Precision, _: u32) -> bool {
    matches!(p, Precision::F16 | Precision::Bf16)
}
/// Full FP8 on the Hopper family with the overlapped consumer: D64 and D128. At D256 its
/// second accumulator does not fit beside O (issue 28); D256 takes [`full_fp8_d256`]'s tiles.
fn full_fp8(p: Precision, d: u32) -> bool {
    p == Precision::Fp8 && d <= 128
}
fn full_fp8_d256(p: Precision, d: u32) -> bool {
    p == Precision::Fp8 && d == 256
}
/// FP8-KV on the Hopper family (E4M3 K/V decoded into the 16-bit tiles by the producer
/// warpgroup): D64 and D128, the head dims validation allows it (`KernelSpec::validate`).
fn hopper_fp8kv(p: Precision, d: u32) -> bool {
    p.is_fp8_kv() && d <= 128
}
fn sixteen_bit_d64_128(p: Precision, d: u32) -> bool {
    sixteen_bit(p, d) && d <= 128
}

/// Hopper family (sm_90a only, by validation): 2 consumer warpgroups x 64 rows, 2 stages.
/// Step (b) of its issue, no overlap and no ping-pong: 128 keys per stage (160 KB at D128).
pub(crate) const HOPPER_N128_PLAIN: &str = "hopper.m128.n128.w12.s2.b1.w4ex";
/// With the intra-warpgroup overlap alone, and with ping-pong too.
pub(crate) const HOPPER_N128_O: &str = "hopper.m128.n128.w12.s2.b1.w4oex";
pub(crate) const HOPPER_N128: &str = "hopper.m128.n128.w12.s2.b1.w4ogex";
/// FA3's non-causal D128 tile, 176 keys per stage (209 KB at D128).
pub(crate) const HOPPER_N176: &str = "hopper.m128.n176.w12.s2.b1.w4ogex";
/// Full FP8 at D64: FA3's 192 rows (three consumer warpgroups), persistent, no overlap.
pub(crate) const HOPPER_FP8_M192_D64: &str = "hopper.m192.n128.w16.s2.b1.w4pex";
/// FA3's wide key tile for 16-bit D128 (192 keys), persistent with ping-pong: +3-6 % from S 4k
/// non-causal (perf-notes: the 192-key tile); registered so that check and verify cover it,
/// dispatched once the sanitizers have run on it.
pub(crate) const HOPPER_N192_PERSISTENT: &str = "hopper.m128.n192.w12.s2.b1.w4pogex";
/// 64 keys per stage: the D256 tile (192 KB).
pub(crate) const HOPPER_N64: &str = "hopper.m128.n64.w12.s2.b1.w4ogex";
/// One consumer warpgroup (64-row tiles): the D64 16-bit tile for grids the 128-row tiles
/// leave short of the SMs (the mission shape).
pub(crate) const HOPPER_M64: &str = "hopper.m64.n128.w8.s2.b1.w4oex";
/// A persistent grid (one block per SM walking the tile list).
pub(crate) const HOPPER_N128_PERSISTENT: &str = "hopper.m128.n128.w12.s2.b1.w4pogex";
/// FA3's D256 tile, 80 keys per stage (225 KB at D256).
pub(crate) const HOPPER_N80: &str = "hopper.m128.n80.w12.s2.b1.w4ogex";
/// Three consumer warpgroups (192 rows), persistent, overlap without ping-pong (which needs
/// two): FA3's D64 tile. It spills at D128 (three warpgroups leave 160 registers each), so it
/// is registered for D64 only.
pub(crate) const HOPPER_M192_D64: &str = "hopper.m192.n128.w16.s2.b1.w4poex";
/// Full FP8 at D256: 64 keys per stage, three stages, ping-pong without the
/// intra-warpgroup overlap (whose second accumulator does not fit beside O's 128 registers);
/// S = Q.K^T in two chains and P.V in two column halves, each added in fp32. Persistent for
/// non-causal, one block per tile for causal.
pub(crate) const HOPPER_FP8_D256: &str = "hopper.m128.n64.w12.s3.b1.w4pgex";
pub(crate) const HOPPER_FP8_D256_NP: &str = "hopper.m128.n64.w12.s3.b1.w4gex";

/// Decode family (sm_80 and up): 16 packed query rows per CTA, 4 warps of 16 keys per step,
/// a 3-stage cp.async ring per warp; and a 2-warp, 4-stage one for four CTAs per SM.
pub(crate) const DECODE_N64: &str = "decode.m16.n64.w4.s3.b2.cex";
pub(crate) const DECODE_N32: &str = "decode.m16.n32.w2.s4.b4.cex";
/// The tuner's pick for large contiguous FP8-KV decode batches on sm_90a (`tuned/default.json`):
/// two 32-key warps, three CTAs per SM.
pub(crate) const DECODE_N64_W2: &str = "decode.m16.n64.w2.s3.b3.cex";
/// The tuner's picks for small contiguous decode grids on sm_90a (`tuned/default.json`): 128
/// keys per step, fp16 with three stages at one CTA per SM, FP8-KV with four stages at two.
pub(crate) const DECODE_N128_F16: &str = "decode.m16.n128.w4.s3.b1.cex";
pub(crate) const DECODE_N128_KV8: &str = "decode.m16.n128.w4.s4.b2.cex";

/// The decode family's classes: fp16/bf16 Q with 16-bit or E4M3 K/V.
fn decode_precisions(p: Precision, _: u32) -> bool {
    matches!(
        p,
        Precision::F16 | Precision::Bf16 | Precision::Fp8KvF16 | Precision::Fp8KvBf16
    )
}

fn v(key: &str) -> Variant {
    key.parse()
        .unwrap_or_else(|e| panic!("registered variant key {key}: {e}"))
}

/// Dispatch's choices under their registry names, for the callers that read them here; the
/// rules are [`crate::dispatch::RULES`].
/// The class default (the tuner's baseline): [`dispatch::class_default`].
pub fn default_variant(arch: Arch, precision: Precision, head_dim: u32, causal: bool) -> Variant {
    dispatch::class_default(arch, precision, head_dim, causal)
}

/// The rules' pick for a contiguous call with no tuned table: [`dispatch::default_for_shape`].
pub fn default_variant_for_shape(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> Variant {
    dispatch::default_for_shape(arch, precision, shape, causal, sm_count)
}

/// A variable-length call's non-decode pick: [`dispatch::varlen`] without a shape.
pub fn varlen_default(arch: Arch, precision: Precision, head_dim: u32, causal: bool) -> Variant {
    dispatch::varlen(arch, precision, head_dim, causal, None)
}

/// A paged call's pick with no tuned table: [`dispatch::paged_default`].
pub fn decode_default(arch: Arch, precision: Precision, head_dim: u32) -> Variant {
    dispatch::paged_default(arch, precision, head_dim)
}

/// A paged variable-length call's pick, `None` where the decode family does not serve the
/// precision: [`dispatch::varlen_paged`].
pub fn decode_varlen_default(arch: Arch, precision: Precision, head_dim: u32) -> Option<Variant> {
    dispatch::varlen_paged(arch, precision, head_dim)
}

/// The registered variants with the problem classes each serves.
pub fn registered_variants() -> Vec<(Variant, Serves)> {
    let mut out: Vec<(Variant, Serves)> = vec![(Variant::reference(), all)];
    // Portable family: every variant a shipped choice runs, for the classes some arch ships it
    // for (the inventory example lists them: docs/results/2026-11-26-portable-round27/).
    // sm_80-sm_89 class defaults (every precision): D64 4 warps x 32 rows x 64 keys, D128
    // FA2's 32-key tile, D256 8 warps x 16 rows (sm_80) and 4 x 16 (sm_86/89, 99 KB).
    out.push((v("portable.m128.n64.w4.s2.b2.ctelx"), d64));
    out.push((v("portable.m128.n32.w4.s2.b2.ctelx"), d128));
    out.push((v("portable.m128.n32.w8.s2.b1.ctelx"), d256));
    out.push((v("portable.m64.n32.w4.s2.b1.ctelx"), d256));
    // Small grids (dispatch by shape): 4 warps x 16 rows, Q in registers; at D64 a 4-deep ring.
    out.push((v("portable.m64.n64.w4.s4.b2.ctelx"), d64));
    out.push((v("portable.m64.n64.w4.s2.b2.ctelx"), d128));
    // Half steps: the sm_90a varlen tiles for 16-bit D64 (128 keys in two 64-key steps) and
    // D256 (FA2's D256 tile, 192 KB). (D128 causal up to S 1k, its D128 tile's use, went to
    // the Hopper family: perf-notes, D128 causal S 1k back on the Hopper family.)
    out.push((v("portable.m128.n128.w4.s2.b2.cthelx"), |p, d| {
        sixteen_bit(p, d) && d == 64
    }));
    out.push((v("portable.m128.n64.w8.s2.b1.ctelx"), |p, d| {
        sixteen_bit(p, d) && d == 256
    }));
    // Hopper 8-bit K/V: decoupled sync (per-thread copy and decode, one mbarrier per staging
    // buffer, warps drift up to a tile apart) on 256-row tiles, and paired rows (each warp owns
    // a top and a bottom m16 fragment) for the D128 causal diagonal.
    out.push((v(KV8_D64), d64_kv8));
    out.push((v(KV8_D128), d128_kv8));
    out.push((v(KV8_D128_CAUSAL), d128_kv8));
    // The stream (sm_90a only): persistent decoupled sync, one K/V stream per block across its
    // work tiles, so a work tile's prologue and tail overlap its neighbours'.
    out.push((v(KV8_STREAM_D64), d64_fp8kv));
    out.push((v(KV8_STREAM_D128), d128_fp8kv));
    // The seeds' u8 code at D256 on sm_90a: the split decode's ring of one (224 KB).
    out.push((v(KV8_D256), |p, d| p == Precision::SimFp8 && d == 256));
    // Fragment decode (8-bit ldmatrix, decoded in registers by every warp):
    // Hopper 8-bit K/V causal up to S 2k on the 128-row tiles (16-bit Q or the u8 code; full
    // FP8 runs on the Hopper family), D64 FP8-KV causal up to S 512 on 64-row tiles at four
    // blocks per SM, and E4M3 K/V at D256 on 64-row tiles (the u8 code keeps the ring of one).
    out.push((v(KV8_FRAG_D128), |p, d| {
        d128_kv8(p, d) && p != Precision::Fp8
    }));
    out.push((v(KV8_FRAG_D64), |p, d| d64_kv8(p, d) && p != Precision::Fp8));
    out.push((v(KV8_FRAG_D64_SHORT), d64_fp8kv));
    out.push((v(KV8_FRAG_D256), |p, d| {
        d == 256 && p.kv_is_8bit() && p != Precision::SimFp8
    }));
    // The seeds' toggles, each off once, over every class: cp.async off (plain loads through
    // registers, 1 stage) with accurate exp2; and scalar P·V with block barriers, padded rows
    // and accurate exp2.
    out.push((v("portable.m64.n32.w4.s1.b1.tlx"), all));
    out.push((v("portable.m64.n32.w4.s1.b1.c"), all));
    // Retired (never a default; restore patches beside the measurements that retired them):
    // cluster pairs and warp specialization (docs/results/2026-11-25-portable-retire-round23/);
    // the persistent grid without the stream, the stream's 8-bit Q, the barrier-coupled D64
    // 8-bit tile, the 128-row stream, paired rows on 16-bit K/V and the 8-warp 128-key
    // coverage tile (docs/results/2026-11-26-portable-round27/).
    // Hopper family, step (b) of its issue: TMA ring, producer warpgroup, wgmma consumers.
    out.push((v(HOPPER_N128_PLAIN), sixteen_bit_d64_128));
    out.push((v(HOPPER_N128_O), sixteen_bit_d64_128));
    out.push((v(HOPPER_N128), sixteen_bit_d64_128));
    out.push((v(HOPPER_N176), sixteen_bit_d64_128));
    out.push((v(HOPPER_N64), sixteen_bit));
    out.push((v(HOPPER_N128_PERSISTENT), sixteen_bit_d64_128));
    out.push((v(HOPPER_N192_PERSISTENT), |p, d| {
        sixteen_bit(p, d) && d == 128
    }));
    // Step (e): per-head-dim tiles.
    out.push((v(HOPPER_N80), sixteen_bit));
    out.push((v(HOPPER_M192_D64), |p, d| sixteen_bit(p, d) && d == 64));
    // One consumer warpgroup, for small D64 grids (default_variant_for_shape).
    out.push((v(HOPPER_M64), |p, d| sixteen_bit(p, d) && d == 64));
    // Hopper family, FP8-KV (issue 28 item 2): the 16-bit kernel's tiles with the
    // producer warpgroup decoding E4M3 K/V.
    out.push((v(HOPPER_N128_O), hopper_fp8kv));
    out.push((v(HOPPER_N128), hopper_fp8kv));
    out.push((v(HOPPER_N128_PERSISTENT), hopper_fp8kv));
    // Hopper family, full FP8 (issue 28): the 128-key tile (Vt in one 128-key slab per stage)
    // with overlap alone, with ping-pong, and persistent with ping-pong, at D64 and D128.
    out.push((v(HOPPER_N128_O), full_fp8));
    out.push((v(HOPPER_N128), full_fp8));
    out.push((v(HOPPER_N128_PERSISTENT), full_fp8));
    out.push((v(HOPPER_FP8_M192_D64), |p, d| full_fp8(p, d) && d == 64));
    // D256: ping-pong without overlap, persistent and not.
    out.push((v(HOPPER_FP8_D256), full_fp8_d256));
    out.push((v(HOPPER_FP8_D256_NP), full_fp8_d256));
    // Decode family (issue 27): dispatched for decode-shaped calls (see
    // default_variant_for_shape).
    out.push((v(DECODE_N64), decode_precisions));
    out.push((v(DECODE_N32), decode_precisions));
    // Shipped tuned-table entries (tuned/default.json) are registered, so that check and
    // verify cover what dispatch can pick from the table.
    // D128 only: its entry's head dim, and at D256 its 8-bit decode spills (check).
    out.push((v(DECODE_N64_W2), |p, d| decode_precisions(p, d) && d <= 128));
    // Only the classes their entries serve (sanitizers and the tuner's correctness gate ran
    // on those).
    out.push((v(DECODE_N128_F16), |p, d| p == Precision::F16 && d == 128));
    out.push((v(DECODE_N128_KV8), |p, d| {
        p == Precision::Fp8KvF16 && d == 128
    }));
    out
}

/// The registered variants.
pub fn variants() -> Vec<Variant> {
    registered_variants().into_iter().map(|(v, _)| v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::variant::{Family, SyncPolicy};

    #[test]
    fn shipped_tuned_entries_are_registered() {
        for e in crate::tuned::TunedTable::shipped().entries() {
            let served = registered_variants().into_iter().any(|(v, serves)| {
                v.key() == e.variant
                    && Precision::ALL
                        .into_iter()
                        .any(|p| p.name() == e.precision && serves(p, e.head_dim))
            });
            assert!(
                served,
                "{} ({} D{}) is not registered",
                e.variant, e.precision, e.head_dim
            );
        }
    }

    #[test]
    fn registered_specs_are_valid_on_the_checked_arches() {
        // Every spec fits sm_90a (the largest shared memory); a spec left out on sm_80 is
        // left out only for its shared memory, and such specs stay few.
        let mut hopper_only = 0;
        for s in registered() {
            s.validate(Arch::Sm90a)
                .unwrap_or_else(|e| panic!("{} on sm_90a: {e}", s.key()));
            if s.validate(Arch::Sm80).is_err() {
                assert!(
                    s.dynamic_smem_bytes() > Arch::Sm80.smem_optin_limit()
                        || s.variant.family == Family::Hopper,
                    "{} rejected on sm_80 for a reason other than shared memory (or wgmma)",
                    s.key()
                );
                hopper_only += 1;
            } else if HOPPER_ONLY.contains(&s.variant.key().as_str()) {
                hopper_only += 1;
            }
        }
        // The hopper family is sm_90a-only by design; the bound is on the other families.
        let hopper_family = registered()
            .iter()
            .filter(|s| s.variant.family == Family::Hopper)
            .count();
        assert!(
            hopper_only - hopper_family <= 80,
            "{hopper_only} sm_90a-only specs"
        );
        assert_eq!(
            registered_for(Arch::Sm80).len() + hopper_only,
            registered_for(Arch::Sm90a).len()
        );
        // check and verify stay a manageable size per arch (sm_90a adds the hopper family's
        // 68 specs; the decode family adds 48 on both).
        for a in [Arch::Sm80, Arch::Sm90a] {
            assert!(
                registered_for(a).len() <= 580,
                "{a}: {}",
                registered_for(a).len()
            );
        }
    }

    #[test]
    fn every_portable_knob_is_covered_both_ways() {
        let vs: Vec<Variant> = variants()
            .into_iter()
            .filter(|v| v.family == Family::Portable)
            .collect();
        let both = |f: &dyn Fn(&Variant) -> bool| vs.iter().any(f) && vs.iter().any(|v| !f(v));
        assert!(both(&|v| v.cp_async));
        assert!(both(&|v| v.tc_pv));
        assert!(both(&|v| v.persistent));
        assert!(both(&|v| v.paired_rows));
        assert!(both(&|v| v.fragment_decode));
        assert!(both(&|v| v.fast_exp));
        assert!(both(&|v| v.sync == SyncPolicy::Light));
        assert!(both(&|v| v.sync == SyncPolicy::Decoupled));
        assert!(both(&|v| v.swizzle));
        assert!(both(&|v| v.min_blocks > 1));
        for s in 1..=4 {
            assert!(vs.iter().any(|v| v.stages == s), "stages {s}");
        }
        for n in [32, 64, 128] {
            assert!(vs.iter().any(|v| v.tile_n == n), "tile_n {n}");
        }
        for r in [1, 2] {
            assert!(
                vs.iter().any(|v| v.tile_m / (16 * v.warps) == r),
                "{r} m16 fragments per warp"
            );
        }
    }
}
