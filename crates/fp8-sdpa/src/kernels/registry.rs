//! The registered kernel specs: what `sdpa-lab check` compiles and `verify` runs, and the
//! shipped default per problem class.
//!
//! Portable family: the variants a shipped choice runs (dispatch by class and shape, varlen
//! calls; see [`default_variant`], [`default_variant_for_shape`], [`varlen_default`]), each
//! for the problem classes some arch ships it for, plus the seeds' toggles' coverage (cp.async
//! off, scalar P·V, block barriers, padded rows, accurate exp2) over every class. Since round
//! 27 (issue 32) nothing else: the experiments that no default used left with their modes
//! (docs/results/2026-11-26-portable-round27/). A registered spec is compiled for every arch
//! whose shared memory it fits, so that a GPU of one arch verifies the code of all.

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::problem::AttnShape;
use crate::variant::{Family, KernelSpec, Variant, HEAD_DIMS};

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
/// sm_90a's 227 KB, not for sm_80's 163 KB) and, off sm_90a, the [`HOPPER_ONLY`] variants.
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

/// The Hopper tiles for 8-bit K/V (see [`default_variant`] and [`default_variant_for_shape`]):
/// 8 warps x 32 rows with decoupled sync; at D64 128 keys per copy in two 64-key half steps,
/// at D128 32 keys per step.
const KV8_D64: &str = "portable.m256.n128.w8.s3.b1.cthedx";
const KV8_D128: &str = "portable.m256.n32.w8.s4.b1.ctedx";
/// Round 9, D128 8-bit K/V causal: the same tile with paired rows.
const KV8_D128_CAUSAL: &str = "portable.m256.n32.w8.s4.b1.ctredx";
/// Round 8, persistent decoupled sync (the stream): the D64 FP8-KV default (Q in registers, one
/// Q tile); D128 FP8-KV non-causal below S 2k (two Q tiles in shared memory).
const KV8_STREAM_D128: &str = "portable.m256.n32.w8.s4.b1.ctpedx";
const KV8_STREAM_D64: &str = "portable.m256.n128.w8.s3.b1.cthpedx";
/// Round 10, 8-bit K/V at D256 on Hopper: FA2's D256 tile with the split decode's ring of one
/// (a single 8-bit slot, two staging pairs, one barrier per tile; 224 KB).
const KV8_D256: &str = "portable.m128.n64.w8.s1.b1.ctelx";

/// Round 18, Hopper 8-bit K/V causal up to S 2k (the seeds' u8 code at D128: up to S 512,
/// round 19): fragment decode on the 16-bit defaults' tiles (two 128-row blocks per SM, no
/// staging; see `Variant::fragment_decode`).
const KV8_FRAG_D128: &str = "portable.m128.n64.w4.s2.b2.ctfhelx";
const KV8_FRAG_D64: &str = "portable.m128.n128.w4.s2.b2.ctfhelx";
/// Round 20, Hopper E4M3 K/V at D256 (FP8-KV and fp8, every length): fragment decode with 16
/// rows per warp, 64-row blocks, two per SM (96 KB; the 16-bit tile's 192 KB fits one).
const KV8_FRAG_D256: &str = "portable.m64.n64.w4.s2.b2.ctfelx";
/// Round 20, Hopper FP8-KV at D64 causal up to S 512: fragment decode with 16 rows per warp,
/// four 64-row blocks per SM (128 registers, 24 KB).
const KV8_FRAG_D64_SHORT: &str = "portable.m64.n64.w4.s2.b4.ctfelx";

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
/// FP8-KV at D128: the D128 stream (16-bit Q only since round 27).
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
const HOPPER_N128_PLAIN: &str = "hopper.m128.n128.w12.s2.b1.w4ex";
/// With the intra-warpgroup overlap alone, and with ping-pong too.
const HOPPER_N128_O: &str = "hopper.m128.n128.w12.s2.b1.w4oex";
const HOPPER_N128: &str = "hopper.m128.n128.w12.s2.b1.w4ogex";
/// FA3's non-causal D128 tile, 176 keys per stage (209 KB at D128).
const HOPPER_N176: &str = "hopper.m128.n176.w12.s2.b1.w4ogex";
/// 64 keys per stage: the D256 tile (192 KB).
const HOPPER_N64: &str = "hopper.m128.n64.w12.s2.b1.w4ogex";
/// One consumer warpgroup (64-row tiles): the D64 16-bit tile for grids the 128-row tiles
/// leave short of the SMs (the mission shape).
const HOPPER_M64: &str = "hopper.m64.n128.w8.s2.b1.w4oex";
/// A persistent grid (one block per SM walking the tile list).
const HOPPER_N128_PERSISTENT: &str = "hopper.m128.n128.w12.s2.b1.w4pogex";
/// FA3's D256 tile, 80 keys per stage (225 KB at D256): the D256 default since round 22.
const HOPPER_N80: &str = "hopper.m128.n80.w12.s2.b1.w4ogex";
/// Three consumer warpgroups (192 rows), persistent, overlap without ping-pong (which needs
/// two): FA3's D64 tile, the D64 default from S 2k since round 22. It spills at D128 (three
/// warpgroups leave 160 registers each), so it is registered for D64 only.
const HOPPER_M192_D64: &str = "hopper.m192.n128.w16.s2.b1.w4poex";
/// Full FP8 at D256 (round 27): 64 keys per stage, three stages, ping-pong without the
/// intra-warpgroup overlap (whose second accumulator does not fit beside O's 128 registers);
/// S = Q.K^T in two chains and P.V in two column halves, each added in fp32. Persistent for
/// non-causal, one block per tile for causal.
const HOPPER_FP8_D256: &str = "hopper.m128.n64.w12.s3.b1.w4pgex";
const HOPPER_FP8_D256_NP: &str = "hopper.m128.n64.w12.s3.b1.w4gex";

/// Decode family (sm_80 and up): 16 packed query rows per CTA, 4 warps of 16 keys per step,
/// a 3-stage cp.async ring per warp; and a 2-warp, 4-stage one for four CTAs per SM.
const DECODE_N64: &str = "decode.m16.n64.w4.s3.b2.cex";
const DECODE_N32: &str = "decode.m16.n32.w2.s4.b4.cex";
/// The tuner's pick for large contiguous FP8-KV decode batches on sm_90a (`tuned/default.json`,
/// round 26): two 32-key warps, three CTAs per SM.
const DECODE_N64_W2: &str = "decode.m16.n64.w2.s3.b3.cex";
/// The tuner's picks for small contiguous decode grids on sm_90a (round 26, run 146): 128 keys
/// per step, fp16 with three stages at one CTA per SM, FP8-KV with four stages at two.
const DECODE_N128_F16: &str = "decode.m16.n128.w4.s3.b1.cex";
const DECODE_N128_KV8: &str = "decode.m16.n128.w4.s4.b2.cex";

/// The decode family's variant for a paged call (the only family that reads a paged cache):
/// the 4-warp tile where its shared memory fits the arch, else the 2-warp one (16-bit D256
/// on sm_80). Not yet tuned: both verified, neither measured for speed (issue 27).
pub fn decode_default(arch: Arch, precision: Precision, head_dim: u32) -> Variant {
    let spec = KernelSpec {
        variant: v(DECODE_N64),
        precision,
        head_dim,
        causal: false,
    };
    if spec.validate(arch).is_ok() {
        spec.variant
    } else {
        v(DECODE_N32)
    }
}

/// The decode family's variant for a variable-length call that dispatch sends to it
/// (`runtime::varlen_decode`: decode-shaped, contiguous or paged K/V): [`decode_default`]
/// where the decode family serves the precision (fp16/bf16 Q with 16-bit or E4M3 K/V), else
/// `None`. Tuned tables are not consulted (their buckets were measured on dense batches); not
/// yet measured for speed on varlen batches.
pub fn decode_varlen_default(arch: Arch, precision: Precision, head_dim: u32) -> Option<Variant> {
    decode_precisions(precision, head_dim).then(|| decode_default(arch, precision, head_dim))
}

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

/// Arch classes the portable defaults distinguish: shared memory per block decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArchClass {
    /// sm_80: 163 KB per block, 164 KB per SM.
    Ampere,
    /// sm_86 / sm_89: 99 KB per block.
    SmallSmem,
    /// sm_90a: 227 KB per block, 228 KB per SM.
    Hopper,
}

fn arch_class(arch: Arch) -> ArchClass {
    match arch {
        Arch::Sm80 => ArchClass::Ampere,
        Arch::Sm86 | Arch::Sm89 => ArchClass::SmallSmem,
        Arch::Sm90a => ArchClass::Hopper,
    }
}

/// The shipped variant for a problem class: the Hopper family for fp16/bf16 on sm_90a
/// ([`hopper_default`]) and for full FP8 ([`hopper_fp8_default`]), else the
/// portable family. Portable defaults use cp.async, a swizzled
/// ring, tensor-core P·V and `ex2.approx`; they differ in tile and warp shape by head dim, by
/// the arch's shared memory and, on Hopper at D64 and D128, by whether K/V are 8-bit. Most
/// use a 2-stage ring with light barriers; Hopper's 8-bit D64/D128 tiles use 3-4 stages with
/// decoupled sync, persistent (the stream) for FP8-KV at D64 (see docs/perf-notes.md,
/// rounds 6 to 8; [`default_variant_for_shape`] adds the per-length rules).
pub fn default_variant(arch: Arch, precision: Precision, head_dim: u32, causal: bool) -> Variant {
    if arch_class(arch) == ArchClass::Hopper && sixteen_bit(precision, head_dim) {
        return hopper_default(head_dim, causal);
    }
    if arch_class(arch) == ArchClass::Hopper && precision == Precision::Fp8 {
        return hopper_fp8_default(head_dim, causal);
    }
    portable_default(arch, precision, head_dim, causal)
}

/// The Hopper family's default for fp16/bf16 on sm_90a. Measured on the H100 (fa grid,
/// TFLOPS fp16 / bf16):
/// - D64: three consumer warpgroups of 64 rows, persistent, overlap (round 22, run 116, against
///   the 128-row persistent ping-pong tile in the same run): S 4k 470 / 461 against 461 / 436,
///   S 16k 486 / 499 against 438 / 454, causal S 4k 361 / 402 against 359 / 361, causal S 16k
///   411 / 422 against 403 / 410. Below S 2k the 128-row tile (see
///   [`default_variant_for_shape`]).
/// - D128 non-causal: two consumer warpgroups, persistent ping-pong (round 22, run 115): S 1k
///   555 / 570, S 4k 640 / 646, S 16k 603 / 627. Causal: overlap without ping-pong, S 4k
///   496 / 499, S 16k 578 / 602.
/// - D256: FA3's 80-key tile with ping-pong (round 22, run 116, against the 64-key tile): S 1k
///   559 / 568 against 517 / 525, S 4k 660 / 700 against 629 / 584, S 16k 684 / 705 against
///   605 / 628, causal S 4k 578 / 590 against 538 / 559, causal S 16k 622 / 669 against
///   563 / 610.
fn hopper_default(head_dim: u32, causal: bool) -> Variant {
    v(match (head_dim, causal) {
        (256, _) => HOPPER_N80,
        (128, true) => HOPPER_N128_O,
        (128, false) => HOPPER_N128_PERSISTENT,
        _ => HOPPER_M192_D64,
    })
}

/// The Hopper family's default for full FP8 (D64, D128) on sm_90a, measured in round 25 (run
/// 132, H200, fp8 grid, TFLOPS, against the portable FP8 defaults' 253-384): persistent
/// ping-pong, D128 S 1k / 4k 649 / 760 (overlap alone 601 / 734), D64 404 / 452, D64 causal
/// S 1k / 4k 300 / 415; D128 causal takes overlap alone, S 1k / 4k / 16k 430 / 664 / 744
/// against 453 / 606 / 660 persistent.
/// D256 (round 27, run 148, H100, fp8 grid, TFLOPS, against the portable family's 313-358 on an
/// H200 in run 143): the 64-key tile, persistent for non-causal (S 1k / 4k / 16k 579 / 694 /
/// 725 against 536 / 683 / 721), one block per tile for causal (396 / 629 / 715 against 368 /
/// 491 / 527 persistent).
fn hopper_fp8_default(head_dim: u32, causal: bool) -> Variant {
    v(match (head_dim, causal) {
        (256, false) => HOPPER_FP8_D256,
        (256, true) => HOPPER_FP8_D256_NP,
        (128, true) => HOPPER_N128_O,
        _ => HOPPER_N128_PERSISTENT,
    })
}

/// The shipped portable variant for a problem class.
fn portable_default(arch: Arch, precision: Precision, head_dim: u32, causal: bool) -> Variant {
    let kv8 = precision.kv_is_8bit();
    let fp8kv = precision.is_fp8_kv();
    let key = match (arch_class(arch), head_dim) {
        // FP8-KV at D64 (16-bit Q): persistent decoupled sync, one K/V stream per block, Q in
        // registers. Non-causal (and causal from S 2k to below 8k): the 256-row 128-key tile, whose
        // per-work-tile prologue and tail the stream overlaps; measured on the H100 (round 8,
        // run 30, fp8kv_f16) 320 / 349 / 356 TFLOPS at S 1k / 4k / 16k against 292 / 333 / 344
        // for round 7's m256.n128 and the f16 default's 308 / 320 / 330 in the same run.
        // Causal: dispatch picks by length (default_variant_for_shape: fragment decode up to S
        // 2k, the 256-row stream above, the 256-row tile from S 8k); the class default is
        // fragment decode's 128-row tile, the pick at S 1k. (Round 8's 128-row stream,
        // m128.n64.w4.s3.b2.ctpedx, was this default until rounds 16 and 18 took every causal
        // length from it; round 27 retired it.)
        (ArchClass::Hopper, 64) if fp8kv && !causal => KV8_STREAM_D64,
        (ArchClass::Hopper, 64) if fp8kv => KV8_FRAG_D64,
        // 8-bit K/V, non-causal (and causal from S 4k at D64, S 2k with FP8-KV, from S 8k
        // at D128: see default_variant_for_shape): 8 warps x 32 rows, so decoding a K/V tile
        // is shared by 256 rows instead of 128, with decoupled sync, so the 8 warps are not
        // held in step by a barrier per tile; one block per SM. D64: 128 keys per copy in two
        // 64-key half steps (208 KB); measured on the H100 (round 7, run 21), full fp8:
        // 268 / 323 / 342 TFLOPS at S 1k / 4k / 16k against 267 / 316 / 335 for round 6's
        // barrier-coupled m256.n128 and 258 / 285 / 300 for m128.n64. D128: 32 keys per step,
        // 4 stages (160 KB); full fp8 308 / 366 / 387 against 296 / 337 / 354 for m128.n32 in
        // the same run.
        (ArchClass::Hopper, 64) if kv8 && !causal => KV8_D64,
        (ArchClass::Hopper, 128) if kv8 && !causal => KV8_D128,
        // Causal below S 8k (see default_variant_for_shape): the same tile with paired rows.
        // Measured on the H100 (round 9, runs 36-37, against the unpaired tile and m128.n32,
        // the S 512 default before): fp8kv_f16 S 512 192.6 / 185.6 / 191.6 TFLOPS, S 1k 247.4
        // / 242.9 / 242.5; fp8kv_bf16 S 512 187.1 / 182.9 / 185.4; full fp8 S 512 160.0 /
        // 153.6 / 159.6.
        (ArchClass::Hopper, 128) if kv8 => KV8_D128_CAUSAL,
        // 4 warps x 32 rows, 128 keys per copy and barrier computed in two 64-key half steps
        // (the full 128-key score tile spills); 80 KB, two blocks per SM, which only sm_90a's
        // 228 KB per SM holds. Measured on the H100 (round 6, run 2), f16: 311 / 326 / 332
        // TFLOPS at S 1k / 4k / 16k against 296 / 310 / 321 for m128.n64.
        (ArchClass::Hopper, 64) if !kv8 => "portable.m128.n128.w4.s2.b2.cthelx",
        // 4 warps x 32 rows (Q re-read from shared memory), 64 keys per step: 48 KB and
        // ~235 registers, two blocks per SM. On Hopper, also 8-bit K/V causal below S 4k
        // (see default_variant_for_shape): the half-step tile was 3 % slower there (round 6,
        // run 4: full fp8 D64 causal S 1k 189 against 195 TFLOPS in round 5).
        (_, 64) => "portable.m128.n64.w4.s2.b2.ctelx",
        // 16-bit K/V: FA2's D128 tile, 64 keys per copy and barrier, computed in two 32-key
        // half steps; 96 KB, two blocks per SM on sm_90a only. Measured on the H100 (round 6,
        // run 2): +0.3 to +1.7 % over m128.n32 across S 1k..16k, causal and not. (With 8-bit
        // K/V its two staging buffers make it 128 KB, one block per SM, and it spills.)
        (ArchClass::Hopper, 128) if !kv8 => "portable.m128.n64.w4.s2.b2.cthelx",
        // 4 warps x 32 rows, 32 keys per step (FA2's shape), 64 KB (80 KB with 8-bit K/V and
        // its two staging buffers), two blocks per SM. Measured on the H100 (run 5): 298 /
        // 327 / 335 TFLOPS at S 1k / 4k / 16k against 226 / 247 / 255 for the 8-warp x
        // 16-row m128.n64.w8 of round 1, which stays registered.
        (_, 128) => "portable.m128.n32.w4.s2.b2.ctelx",
        // sm_86/89 (99 KB per block): 4 warps x 16 rows, 32 keys per step, 96 KB.
        (ArchClass::SmallSmem, _) => "portable.m64.n32.w4.s2.b1.ctelx",
        // sm_90a, 8-bit K/V: the same tile with the split decode's ring of one (224 KB).
        // Measured on the H100 (round 10, run 46), fp8kv_f16 S 1k / 4k / 16k: 268 / 304 /
        // 317 TFLOPS against 256 / 287 / 299 for the 2-stage split decode and 245 / 271 / 280
        // for round 9's serial decode (run 45); the f16 tile's 299 / 330 / 343.
        // E4M3 K/V: fragment decode at 16 rows per warp, two 64-row blocks per SM (round 20,
        // runs 104-105, TFLOPS, fp8kv_f16 / fp8kv_bf16 against f16 / bf16 in the same run):
        // S 512 285.5 / 280.6 against 260.5 / 259.7, S 1k 317.5 / 315.0 against 296.8 / 297.5,
        // S 4k 343.0 / 342.2 against 332.7 / 335.2, S 16k 353.5 / 352.6 against 345.9 / 345.9;
        // causal S 512 210.6 / 202.4 against 202.4 / 203.5, S 1k 272.3 / 263.5 against 257.8 /
        // 257.9. Round 11's decode warps were retired in round 23. The seeds' u8
        // code keeps the ring of one: on the fragment tile it ties at S 1k and loses 6 % at S
        // 4k (run 106; its decode is two instructions per pair).
        (ArchClass::Hopper, 256) if kv8 && precision != Precision::SimFp8 => KV8_FRAG_D256,
        (ArchClass::Hopper, 256) if kv8 => KV8_D256,
        // sm_90a: 64 keys per step (FA2's D256 tile), 192 KB of shared memory, which only
        // Hopper's 227 KB opt-in holds. Measured on the H100 (run 9): 279 / 312 / 322 TFLOPS at
        // S 1k / 4k / 16k against 236 / 262 / 268 for the 32-key tile and FA2's 309 / 312 / 308.
        (ArchClass::Hopper, _) => "portable.m128.n64.w8.s2.b1.ctelx",
        // 8 warps x 16 rows, 32 keys per step: O alone is 128 registers; 128 KB.
        (ArchClass::Ampere, _) => "portable.m128.n32.w8.s2.b1.ctelx",
    };
    v(key)
}

/// The variant a variable-length call runs when the caller does not choose (issue 31): on
/// sm_90a the Hopper family for fp16/bf16 at D64 and D128 (round 27), else the arch's
/// portable default for the class (the portable family reads packed sequences, but not in
/// its stream, the persistent decoupled sync), with the FP8-KV D64 stream swapped for the
/// registered non-persistent tile of the same class (the 256-row tile without the stream).
/// Not yet measured for speed on varlen batches.
pub fn varlen_default(arch: Arch, precision: Precision, head_dim: u32, causal: bool) -> Variant {
    // The Hopper family reads varlen batches too (round 27), where its varlen mode compiles
    // without spills (check --varlen): fp16/bf16 at D128 (the class default) and D64 (the
    // 128-row persistent tile; the 192-row one spills under causal). At D256 and for full FP8
    // the few registers the sequence bounds take spill, and the portable family serves.
    if arch_class(arch) == ArchClass::Hopper && sixteen_bit(precision, head_dim) {
        match head_dim {
            128 => return hopper_default(head_dim, causal),
            64 => return v(HOPPER_N128_PERSISTENT),
            _ => {}
        }
    }
    let base = portable_default(arch, precision, head_dim, causal);
    match base.key().as_str() {
        KV8_STREAM_D64 => v(KV8_D64),
        _ => base,
    }
}

/// Work tiles of a portable variant on `shape`: the blocks a non-persistent one launches
/// (geometry.rs's grid).
fn grid_blocks(variant: &Variant, shape: &AttnShape) -> u64 {
    let m_blocks = shape.seq_q.div_ceil(variant.tile_m.max(1) as usize) as u64;
    m_blocks * shape.heads_q as u64 * shape.batch as u64
}

/// The shipped variant for a concrete problem: [`default_variant`], except that when its grid
/// would leave SMs idle (fewer blocks than `sm_count`, e.g. the seeds' mission shape
/// B2 H8 S512 D64: 64 blocks of 128 rows for 132 SMs) a 64-row tile with 16 rows per warp
/// is taken, which doubles the blocks and halves each warp's serial chain. Only registered
/// variants are returned, and only ones that fit `arch` (else the class default).
pub fn default_variant_for_shape(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> Variant {
    let head_dim = shape.head_dim as u32;
    // Decode-shaped calls (`AttnShape::is_decode`: few query rows per kv head, a cache of
    // 1k keys or more): the decode family splits the keys across CTAs and reads K/V once per
    // GQA group. Run 121, H100, Hq 32, D128, fp16: 2.8-3.07 TB/s from Skv 4k at B >= 4
    // (0.94-1.00x cuDNN), Sq 4 3.3-11.8x cuDNN.
    if shape.is_decode() && decode_precisions(precision, head_dim) {
        let d = decode_default(arch, precision, head_dim);
        let spec = KernelSpec {
            variant: d,
            precision,
            head_dim,
            causal,
        };
        if spec.validate(arch).is_ok() {
            return d;
        }
    }
    let mut base = default_variant(arch, precision, head_dim, causal);
    // D128 causal up to S 1k: the portable tile leads the Hopper family's (run 112-113: 287 /
    // 288 TFLOPS at S 1k against 265-269; its 128-row blocks waste more of the diagonal).
    if base.family == Family::Hopper
        && sixteen_bit(precision, head_dim)
        && causal
        && head_dim == 128
        && shape.seq_q <= 1024
    {
        base = portable_default(arch, precision, head_dim, causal);
    }
    // D64 below S 2k: the 128-row persistent ping-pong tile leads the 192-row one (round 22,
    // run 116, fp16 / bf16: S 1k 426 / 429 TFLOPS against 405 / 403, causal 264 / 265
    // against 258 / 261); 192-row blocks leave more of the last block and the diagonal idle.
    // The same 128-row tile where the 192-row one leaves too few work tiles to balance the
    // SMs (fewer than four per SM): the mission suite's `long` (B2 H8 S 2k, 176 tiles of 192
    // rows on 132 SMs) took 58.0 µs on the 192-row tile (run 121) against 41.3 on the 128-row
    // one (run 115).
    // Causal up to S 4k too, since the TMA-store epilogue (round 25, run 136, H200, f16, two
    // interleaved passes): causal S 4k 422 / 421 TFLOPS against 403 / 405 for the 192-row
    // tile (at S 16k the 192-row tile led before it: run 116, 411 against 403).
    if base.family == Family::Hopper
        && head_dim == 64
        && (shape.seq_q < 2048
            || (causal && shape.seq_q <= 4096)
            || grid_blocks(&base, shape) < 4 * u64::from(sm_count))
    {
        base = v(HOPPER_N128_PERSISTENT);
    }
    // FP8-KV at D64/D128 on Hopper: the Hopper family's persistent ping-pong tile, its producer
    // warpgroup decoding E4M3 K/V into the 16-bit tiles, so the consumers run the 16-bit
    // kernel's loop. Round 29, run 167 (H100, the full fp8 suite, same run): 1.01-1.39x the
    // portable FP8-KV tiles on every D64/D128 row (fp8kv_f16 D128 S 4k 502 TFLOPS against 375,
    // causal S 4k 406 against 355; D64 S 4k 362 against 349; bf16 1.01-1.29x), 0.65-1.13x the
    // 16-bit defaults. D256 stays portable (its code ring does not fit beside the 16-bit one).
    if arch_class(arch) == ArchClass::Hopper && hopper_fp8kv(precision, head_dim) {
        base = v(HOPPER_N128_PERSISTENT);
    }
    // (Rules for the portable family's 8-bit tiles: not where full FP8 or FP8-KV runs on the
    // Hopper family, i.e. the seeds' u8 code, and FP8-KV at D256. Round 29 removed the rules
    // that only FP8-KV at D64/D128 reached: FP8-KV D64 causal from S 2k on the 256-row stream,
    // from S 8k its non-persistent tile (run 70), and the D128 stream below S 2k (round 8).)
    let hopper_kv8 = arch_class(arch) == ArchClass::Hopper
        && precision.kv_is_8bit()
        && head_dim <= 128
        && base.family == Family::Portable;
    // Causal with 8-bit K/V on Hopper: the 256-row tiles of the non-causal defaults win from
    // some length on; below it their coarse diagonal blocks lose.
    // - D64 from S 4k: round 6, run 1, fp8kv_f16, 287 / 331 TFLOPS at S 4k / 16k against
    //   272 / 298 for m128.n64; round 8, run 30, the FP8-KV streams, 312 / 336 against 296 /
    //   313 for the 128-row one; at S 1k 200 against 217 (round 6).
    // - D128 from S 8k: below it the causal default is the same 256-row tile with paired rows.
    //   Round 15 (run 81, since round 12's batch sections; run 79 agrees): paired against unpaired,
    //   fp8kv_f16 / fp8kv_bf16 / fp8, S 2k 317.9 / 313.8 / 308.9 TFLOPS against 315.5 / 308.7
    //   / 306.5, S 4k 355.5 / 349.3 / 348.6 against 351.2 / 346.2 / 343.3, S 8k 378.1 / 371.6
    //   / 375.0 against 377.2 / 373.3 / 372.8 (means of two rounds). Round 9 had the paired
    //   tile 1-3 % behind from S 4k (run 40, before the sections; unpaired against
    //   paired, fp8kv_f16 / fp8kv_bf16: S 4k 319 / 312 against 317 / 303, S 16k 360 / 350
    //   against 353 / 342).
    let from = match head_dim {
        128 => 8192,
        _ => 4096,
    };
    if causal && hopper_kv8 && shape.seq_q >= from {
        base = default_variant(arch, precision, head_dim, false);
    }
    // Round 18 (runs 90-92 and 95, two rounds, same run): FP8-KV and fp8 causal up to S 2k
    // take fragment decode on the 16-bit default's 128-row tile, whose diagonal and prologue
    // overlap the other block's loop as fp16's do, against the 256-row tiles' one block per
    // SM. TFLOPS, fp8kv_f16 / fp8kv_bf16 against the shipped tiles: D128 S 512 223.7 / 214.3
    // against 200.7 / 198.4, S 1k 278.7 / 271.4 against 265.7 / 262.6, S 2k 316.6 / 314.6
    // against 315.8 / 312.4; D64 S 512 188.6 / 182.0 against 185.7 / 180.9, S 1k 242.9 / 238.1
    // against 237.5 / 230.0, S 2k 280.4 / 278.0 against 279.4 / 273.4. At S 4k the shipped
    // tiles lead (D64 f16 313.4 against 305.5; D128 f16 356 against about 330, run 89).
    // 8-bit Q (fp8; run 95, two rounds): D128 S 512 224.5 against 189.9, S 1k 278.7 against
    // 258.0, S 2k 315.2 against 308.2; D64 S 512 188.7 against 159.4, S 1k 242.6 against 209.8,
    // S 2k 279.7 against 250.6.
    // The seeds' u8 code (simfp8; round 19, run 99, two rounds) decodes with two instructions
    // per pair (PRMT, HSUB2) where E4M3 takes one F2FP, so fragment decode leads it less far:
    // D64 S 512 178.6 against 169.6, S 1k 229.3 against 218.5, S 2k 263.7 against 256.4; D128
    // S 512 207.6 against 193.9, but S 1k 256.7 against 263.3 and S 2k 287.0 against 312.6.
    let frag_max_seq = if precision == Precision::SimFp8 && head_dim == 128 {
        512
    } else {
        2048
    };
    if causal && hopper_kv8 && shape.seq_q <= frag_max_seq {
        base = v(if head_dim == 128 {
            KV8_FRAG_D128
        } else {
            KV8_FRAG_D64
        });
    }
    // (Round 20's rule for E4M3 K/V at D64 causal up to S 512, the 64-row fragment tile at four
    // blocks per SM (run 107: 195.8 / 190.6 TFLOPS fp8kv_f16 / bf16 against 187.2 / 182.7),
    // left in round 29: FP8-KV at D64 and full FP8 run on the Hopper family, and the seeds' u8
    // code never took it.)
    // Persistent variants launch min(work tiles, SMs) blocks, so the grid test counts work
    // tiles for them as well.
    if base.tile_m <= 64 || grid_blocks(&base, shape) >= u64::from(sm_count) {
        return base;
    }
    // D64 16-bit on Hopper, non-causal: the 64-row Hopper tile, where its grid still has a
    // block for a quarter of the SMs or more. Round 26, run 144 (H200, graph mode, f16, two
    // passes): the mission shape (B2 H8 S512, 128 blocks) 6.14-6.17 µs against 7.89-7.90 on
    // the portable tile below (cuDNN 9.49), mission-s256 (64 blocks) 4.29 against 4.79; the
    // suite's `small` (B1 H1 S32, one block) 2.85-3.31 against 2.45, so tiny grids stay
    // portable (the crossover between 1 and 64 blocks was not measured).
    let m64 = v(HOPPER_M64);
    if base.family == Family::Hopper
        && sixteen_bit(precision, head_dim)
        && head_dim == 64
        && !causal
        && 4 * grid_blocks(&m64, shape) >= u64::from(sm_count)
    {
        return m64;
    }
    let small = match head_dim {
        // 4 stages at D64 (3 tiles in flight): 9.0 µs at the mission shape on the H100 (run 6)
        // against 9.2 for 2 stages and cuDNN's 9.6 in the same run.
        64 => v("portable.m64.n64.w4.s4.b2.ctelx"),
        128 => v("portable.m64.n64.w4.s2.b2.ctelx"),
        _ => v("portable.m64.n32.w4.s2.b1.ctelx"),
    };
    let spec = KernelSpec {
        variant: small,
        precision,
        head_dim,
        causal,
    };
    if spec.validate(arch).is_ok() {
        small
    } else {
        base
    }
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
    // Round 6, half steps: 16-bit D128 causal up to S 1k on sm_90a, and the sm_90a varlen
    // tiles for 16-bit D64 (128 keys in two 64-key steps) and D256 (FA2's D256 tile, 192 KB).
    out.push((v("portable.m128.n64.w4.s2.b2.cthelx"), |p, d| {
        sixteen_bit(p, d) && d == 128
    }));
    out.push((v("portable.m128.n128.w4.s2.b2.cthelx"), |p, d| {
        sixteen_bit(p, d) && d == 64
    }));
    out.push((v("portable.m128.n64.w8.s2.b1.ctelx"), |p, d| {
        sixteen_bit(p, d) && d == 256
    }));
    // Round 7, Hopper 8-bit K/V: decoupled sync (per-thread copy and decode, one mbarrier per
    // staging buffer, warps drift up to a tile apart) on 256-row tiles; round 9 adds paired
    // rows (each warp owns a top and a bottom m16 fragment) for the D128 causal diagonal.
    out.push((v(KV8_D64), d64_kv8));
    out.push((v(KV8_D128), d128_kv8));
    out.push((v(KV8_D128_CAUSAL), d128_kv8));
    // Round 8 (sm_90a only): persistent decoupled sync, one K/V stream per block across its
    // work tiles, so a work tile's prologue and tail overlap its neighbours'.
    out.push((v(KV8_STREAM_D64), d64_fp8kv));
    out.push((v(KV8_STREAM_D128), d128_fp8kv));
    // Round 10, the seeds' u8 code at D256 on sm_90a: the split decode's ring of one (224 KB).
    out.push((v(KV8_D256), |p, d| p == Precision::SimFp8 && d == 256));
    // Rounds 18 and 20: fragment decode (8-bit ldmatrix, decoded in registers by every warp):
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
    // cluster pairs and warp specialization (round 23,
    // docs/results/2026-11-25-portable-retire-round23/); the persistent grid without the
    // stream, the stream's 8-bit Q, round 6's barrier-coupled D64 8-bit tile, round 8's
    // 128-row stream, paired rows on 16-bit K/V and the 8-warp 128-key coverage tile (round
    // 27, docs/results/2026-11-26-portable-round27/).
    // Hopper family, step (b) of its issue: TMA ring, producer warpgroup, wgmma consumers.
    out.push((v(HOPPER_N128_PLAIN), sixteen_bit_d64_128));
    out.push((v(HOPPER_N128_O), sixteen_bit_d64_128));
    out.push((v(HOPPER_N128), sixteen_bit_d64_128));
    out.push((v(HOPPER_N176), sixteen_bit_d64_128));
    out.push((v(HOPPER_N64), sixteen_bit));
    out.push((v(HOPPER_N128_PERSISTENT), sixteen_bit_d64_128));
    // Round 22, step (e): per-head-dim tiles.
    out.push((v(HOPPER_N80), sixteen_bit));
    out.push((v(HOPPER_M192_D64), |p, d| sixteen_bit(p, d) && d == 64));
    // Round 26: one consumer warpgroup, for small D64 grids (default_variant_for_shape).
    out.push((v(HOPPER_M64), |p, d| sixteen_bit(p, d) && d == 64));
    // Hopper family, FP8-KV (issue 28 item 2, round 29): the 16-bit kernel's tiles with the
    // producer warpgroup decoding E4M3 K/V.
    out.push((v(HOPPER_N128_O), hopper_fp8kv));
    out.push((v(HOPPER_N128), hopper_fp8kv));
    out.push((v(HOPPER_N128_PERSISTENT), hopper_fp8kv));
    // Hopper family, full FP8 (issue 28): the 128-key tile (Vt in one 128-key slab per stage)
    // with overlap alone, with ping-pong, and persistent with ping-pong, at D64 and D128.
    out.push((v(HOPPER_N128_O), full_fp8));
    out.push((v(HOPPER_N128), full_fp8));
    out.push((v(HOPPER_N128_PERSISTENT), full_fp8));
    // Round 27: D256, ping-pong without overlap, persistent and not.
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
    fn defaults_are_registered_and_fit() {
        let reg = registered();
        for a in Arch::ALL {
            for p in Precision::ALL {
                for d in HEAD_DIMS {
                    for c in [false, true] {
                        let variant = default_variant(a, p, d, c);
                        let spec = KernelSpec {
                            variant,
                            precision: p,
                            head_dim: d,
                            causal: c,
                        };
                        spec.validate(a)
                            .unwrap_or_else(|e| panic!("{} on {a}: {e}", spec.key()));
                        assert!(reg.contains(&spec), "default {} not registered", spec.key());
                    }
                }
            }
        }
    }

    #[test]
    fn hopper_d256_8bit_defaults_are_fragment_decode_and_the_ring_of_one() {
        // 8-bit K/V at D256 on sm_90a. E4M3: fragment decode on 64-row blocks (Q 32 KB + two
        // 8-bit K/V slots 64 KB, plus a bf16 Q's row factors). The seeds' u8 code: the ring of
        // one, one 8-bit slot with two staging pairs (Q 64 KB + staging 128 KB + ring 32 KB).
        // 16-bit K/V take the Hopper family (its own test below), and so does full FP8 since
        // round 27 (checked here too).
        for causal in [false, true] {
            let v = default_variant(Arch::Sm90a, Precision::Fp8, 256, causal);
            assert_eq!(v.family, Family::Hopper);
            assert_eq!((v.tile_n, v.overlap, v.persistent), (64, false, !causal));
        }
        for p in Precision::ALL
            .into_iter()
            .filter(|p| p.kv_is_8bit() && *p != Precision::Fp8)
        {
            for causal in [false, true] {
                let v = default_variant(Arch::Sm90a, p, 256, causal);
                let spec = KernelSpec {
                    variant: v,
                    precision: p,
                    head_dim: 256,
                    causal,
                };
                let (tile_m, stages, smem, frag) = if p == Precision::SimFp8 {
                    (128, 1, 229_376, false)
                } else if p.kv_is_8bit() {
                    let rows = if p.q() == crate::dtype::DType::Bf16 {
                        4 * 64
                    } else {
                        0
                    };
                    (64, 2, 98_304 + rows, true)
                } else {
                    (128, 2, 196_608, false)
                };
                assert_eq!(
                    (v.tile_m, v.tile_n, v.stages, v.producer_warps),
                    (tile_m, 64, stages, 0),
                    "{}",
                    spec.key()
                );
                assert_eq!(v.fragment_decode, frag, "{}", spec.key());
                assert_eq!(spec.dynamic_smem_bytes(), smem, "{}", spec.key());
            }
        }
    }

    #[test]
    fn hopper_family_is_the_16bit_default_on_sm90a_except_short_causal_d128_and_small_grids() {
        for p in [Precision::F16, Precision::Bf16] {
            for d in [64u32, 128, 256] {
                for causal in [false, true] {
                    let v = default_variant(Arch::Sm90a, p, d, causal);
                    assert_eq!(v.family, Family::Hopper, "{p:?} d{d} causal {causal}");
                    assert_eq!(
                        default_variant(Arch::Sm80, p, d, causal).family,
                        Family::Portable
                    );
                    let long = AttnShape {
                        batch: 4,
                        seq_q: 4096,
                        seq_kv: 4096,
                        heads_q: 2048 / d as usize,
                        heads_kv: 2048 / d as usize,
                        head_dim: d as usize,
                    };
                    // D64 causal up to S 4k: the 128-row tile (round 25); from S 8k the
                    // class default.
                    let want = if d == 64 && causal {
                        super::v(HOPPER_N128_PERSISTENT)
                    } else {
                        v
                    };
                    assert_eq!(
                        default_variant_for_shape(Arch::Sm90a, p, &long, causal, 132),
                        want
                    );
                    let longer = AttnShape {
                        seq_q: 8192,
                        seq_kv: 8192,
                        ..long
                    };
                    assert_eq!(
                        default_variant_for_shape(Arch::Sm90a, p, &longer, causal, 132),
                        v
                    );
                    let short = AttnShape {
                        batch: 16,
                        seq_q: 1024,
                        seq_kv: 1024,
                        ..long
                    };
                    let got = default_variant_for_shape(Arch::Sm90a, p, &short, causal, 132);
                    let portable = causal && d == 128;
                    assert_eq!(got.family == Family::Portable, portable, "{p:?} d{d} S 1k");
                    // D64's 192-row tile from S 2k, the 128-row one below.
                    if d == 64 {
                        assert_eq!(v.tile_m, 192);
                        assert_eq!(got, super::v(HOPPER_N128_PERSISTENT));
                    }
                }
            }
        }
    }

    #[test]
    fn small_d64_grids_take_the_64_row_hopper_tile_and_tiny_ones_the_portable_tile() {
        let mha = |batch, seq, heads| AttnShape {
            batch,
            seq_q: seq,
            seq_kv: seq,
            heads_q: heads,
            heads_kv: heads,
            head_dim: 64,
        };
        for p in [Precision::F16, Precision::Bf16] {
            // The mission shapes: 128 and 64 blocks of 64 rows on 132 SMs.
            for shape in [mha(2, 512, 8), mha(2, 256, 8)] {
                let got = default_variant_for_shape(Arch::Sm90a, p, &shape, false, 132);
                assert_eq!(got, v(HOPPER_M64), "{shape:?}");
                // Causal and sm_80 keep the portable small tile.
                let causal = default_variant_for_shape(Arch::Sm90a, p, &shape, true, 132);
                assert_eq!(causal.family, Family::Portable);
                let ampere = default_variant_for_shape(Arch::Sm80, p, &shape, false, 108);
                assert_eq!(ampere.family, Family::Portable);
            }
            // One block: the portable tile.
            let tiny = default_variant_for_shape(Arch::Sm90a, p, &mha(1, 32, 1), false, 132);
            assert_eq!(tiny.family, Family::Portable);
        }
    }

    #[test]
    fn decode_shaped_calls_take_the_decode_family() {
        for a in [Arch::Sm80, Arch::Sm90a] {
            for p in [Precision::F16, Precision::Bf16, Precision::Fp8KvF16] {
                for (sq, hkv) in [(1, 8), (1, 32), (4, 8), (16, 8)] {
                    let shape = AttnShape::new(8, sq, 32768, 32, hkv, 128);
                    let got = default_variant_for_shape(a, p, &shape, sq > 1, 132);
                    assert_eq!(got.family, Family::Decode, "{p:?} Sq {sq} Hkv {hkv} on {a}");
                }
                // 68 rows per kv head: a prefill tile's job.
                let shape = AttnShape::new(8, 17, 32768, 32, 8, 128);
                let got = default_variant_for_shape(a, p, &shape, true, 132);
                assert_ne!(got.family, Family::Decode, "{p:?} Sq 17 on {a}");
            }
            // Full FP8 (8-bit Q) has no decode variant: the prefill families serve it.
            let shape = AttnShape::new(8, 1, 4096, 32, 8, 128);
            let got = default_variant_for_shape(a, Precision::Fp8, &shape, false, 132);
            assert_ne!(got.family, Family::Decode);
        }
    }

    /// The fa grid's S 512 point with `s`'s heads and head dim.
    fn s512_of(s: &AttnShape) -> AttnShape {
        AttnShape {
            batch: 32,
            seq_q: 512,
            seq_kv: 512,
            ..*s
        }
    }

    #[test]
    fn shape_defaults_are_registered_and_fit() {
        let reg = registered();
        let shapes = [
            (1, 1, 32),
            (2, 8, 256),
            (2, 8, 512),
            (2, 8, 2048),
            (16, 16, 1024),
        ];
        for a in Arch::ALL {
            for p in Precision::ALL {
                for d in HEAD_DIMS {
                    for c in [false, true] {
                        for (batch, heads, seq) in shapes {
                            let shape = AttnShape {
                                batch,
                                seq_q: seq,
                                seq_kv: seq,
                                heads_q: heads,
                                heads_kv: heads,
                                head_dim: d as usize,
                            };
                            let variant = default_variant_for_shape(a, p, &shape, c, 132);
                            let spec = KernelSpec {
                                variant,
                                precision: p,
                                head_dim: d,
                                causal: c,
                            };
                            spec.validate(a)
                                .unwrap_or_else(|e| panic!("{} on {a}: {e}", spec.key()));
                            assert!(reg.contains(&spec), "{} not registered", spec.key());
                        }
                    }
                }
            }
        }
        // The mission shape takes the 64-row tile; a full grid keeps the class default.
        let mission = AttnShape {
            batch: 2,
            seq_q: 512,
            seq_kv: 512,
            heads_q: 8,
            heads_kv: 8,
            head_dim: 64,
        };
        let got = default_variant_for_shape(Arch::Sm90a, Precision::F16, &mission, false, 132);
        assert_eq!(got.tile_m, 64);
        let big = AttnShape {
            batch: 16,
            seq_q: 1024,
            seq_kv: 1024,
            heads_q: 32,
            heads_kv: 32,
            ..mission
        };
        let got = default_variant_for_shape(Arch::Sm90a, Precision::F16, &big, false, 132);
        assert_eq!(got, v(HOPPER_N128_PERSISTENT), "D64 below S 2k");
        let long = AttnShape {
            seq_q: 4096,
            seq_kv: 4096,
            ..big
        };
        let got = default_variant_for_shape(Arch::Sm90a, Precision::F16, &long, false, 132);
        assert_eq!(got, default_variant(Arch::Sm90a, Precision::F16, 64, false));
        // 8-bit K/V on Hopper (round 29): FP8-KV at D64/D128 runs on the Hopper family's
        // persistent ping-pong tile at every length, causal or not, and full FP8 on its own
        // Hopper kernel; the seeds' u8 code keeps the portable rules (fragment decode up to
        // S 2k at D64 and S 512 at D128, the non-causal 256-row default from S 4k at D64 and
        // S 8k at D128). FP8-KV at D256 stays portable.
        for (d, heads) in [(64usize, 32usize), (128, 16)] {
            let short = AttnShape {
                heads_q: heads,
                heads_kv: heads,
                head_dim: d,
                ..big
            };
            let long = AttnShape {
                batch: 4,
                seq_q: 4096,
                seq_kv: 4096,
                ..short
            };
            let longer = AttnShape {
                batch: 2,
                seq_q: 8192,
                seq_kv: 8192,
                ..short
            };
            for s in [short, s512_of(&short), long, longer] {
                for causal in [false, true] {
                    for fp8kv in [Precision::Fp8KvF16, Precision::Fp8KvBf16] {
                        let got = default_variant_for_shape(Arch::Sm90a, fp8kv, &s, causal, 132);
                        assert_eq!(
                            got,
                            v(HOPPER_N128_PERSISTENT),
                            "{fp8kv:?} d{d} s{}",
                            s.seq_q
                        );
                    }
                    let got =
                        default_variant_for_shape(Arch::Sm90a, Precision::Fp8, &s, causal, 132);
                    assert_eq!(got.family, Family::Hopper, "fp8 d{d} s{}", s.seq_q);
                }
            }
            let frag = if d == 64 { KV8_FRAG_D64 } else { KV8_FRAG_D128 };
            let sim = |s: &AttnShape| {
                default_variant_for_shape(Arch::Sm90a, Precision::SimFp8, s, true, 132)
            };
            assert_eq!(sim(&s512_of(&short)).key(), frag);
            if d == 64 {
                assert_eq!(sim(&short).key(), frag);
            } else {
                assert_eq!(
                    sim(&short),
                    default_variant(Arch::Sm90a, Precision::SimFp8, 128, true)
                );
            }
            assert_eq!(
                sim(&longer),
                default_variant(Arch::Sm90a, Precision::SimFp8, d as u32, false)
            );
            assert_eq!(
                default_variant(Arch::Sm90a, Precision::Fp8KvF16, d as u32, true).paired_rows,
                d == 128
            );
        }
        let d256 = AttnShape {
            heads_q: 8,
            heads_kv: 8,
            head_dim: 256,
            ..big
        };
        let got = default_variant_for_shape(Arch::Sm90a, Precision::Fp8KvF16, &d256, false, 132);
        assert_eq!(got.family, Family::Portable);
        // Full FP8 (8-bit Q) at D64 and D128: the Hopper family's FP8 kernel (round 25).
        let full = default_variant_for_shape(Arch::Sm90a, Precision::Fp8, &big, false, 132);
        assert_eq!(full.family, Family::Hopper);
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
