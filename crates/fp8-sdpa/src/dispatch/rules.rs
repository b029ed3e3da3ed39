//! The rule table. First match wins; the last rule takes every call. Conditions read the
//! [`super::Call`]; picks name registered variants (kernels/registry.rs). Each `why` is one line
//! and a pointer into docs/perf-notes.md (section titles without their round and run
//! numbers), where the measurements are.

use super::{Path, Pick, Rule};
use crate::kernels::registry as r;
use crate::variant::Family;

use Path::{Class, Dense, Paged, Varlen, VarlenPaged};

/// 16-bit K/V at D64/D128/D256 on sm_80..sm_89, and the small-grid tiles.
const P_D64: &str = "portable.m128.n64.w4.s2.b2.ctelx";
const P_D128: &str = "portable.m128.n32.w4.s2.b2.ctelx";
const P_D256_AMPERE: &str = "portable.m128.n32.w8.s2.b1.ctelx";
const P_SMALL_SMEM: &str = "portable.m64.n32.w4.s2.b1.ctelx";
const P_D256_HOPPER: &str = "portable.m128.n64.w8.s2.b1.ctelx";
const SMALL_D64: &str = "portable.m64.n64.w4.s4.b2.ctelx";
const SMALL_D128: &str = "portable.m64.n64.w4.s2.b2.ctelx";
const SMALL_D256: &str = "portable.m64.n32.w4.s2.b1.ctelx";

/// Every automatic choice, in order.
pub static RULES: &[Rule] = &[
    // 1. Tuned tables.
    Rule {
        name: "tuned",
        when: |c| {
            c.on(&[Dense, Paged])
                && c.tuned
                    .is_some_and(|v| c.path == Dense || v.family == Family::Decode)
        },
        pick: Pick::Tuned,
        why: "a tuned table's entry for the class and bucket (user before shipped, bucket before class-wide; a paged call takes decode entries only); perf-notes: Tuner on the GPU",
    },
    // 2. The decode family: decode-shaped calls, every paged cache.
    Rule {
        name: "decode",
        when: |c| {
            c.on(&[Dense, Varlen])
                && c.decode_shaped()
                && c.decode_serves()
                && c.fits_as(r::DECODE_N64, false)
                && c.fits(r::DECODE_N64)
        },
        pick: Pick::Key(r::DECODE_N64),
        why: "few query rows per kv head against 1k+ keys: split the keys across CTAs and read K/V once per GQA group; perf-notes: Decode family",
    },
    Rule {
        name: "decode-2warp",
        when: |c| {
            c.on(&[Dense, Varlen])
                && c.decode_shaped()
                && c.decode_serves()
                && !c.fits_as(r::DECODE_N64, false)
                && c.fits(r::DECODE_N32)
        },
        pick: Pick::Key(r::DECODE_N32),
        why: "the decode family where its 4-warp tile's shared memory does not fit (16-bit D256 on sm_80); perf-notes: Decode family",
    },
    Rule {
        name: "paged",
        when: |c| {
            (c.path == Paged || (c.path == VarlenPaged && c.decode_serves()))
                && c.fits_as(r::DECODE_N64, false)
        },
        pick: Pick::Key(r::DECODE_N64),
        why: "only the decode family reads a paged cache; its 4-warp tile, not yet measured for speed on paged calls (issue 27); perf-notes: Decode family",
    },
    Rule {
        name: "paged-2warp",
        when: |c| c.path == Paged || (c.path == VarlenPaged && c.decode_serves()),
        pick: Pick::Key(r::DECODE_N32),
        why: "the 2-warp decode tile where the 4-warp one does not fit (validation names any class the family does not serve); perf-notes: Decode family",
    },
    Rule {
        name: "paged-refused",
        when: |c| c.path == VarlenPaged,
        pick: Pick::Refuse,
        why: "the decode family serves fp16/bf16 Q with 16-bit or E4M3 K/V only",
    },
    // 3. Grids that would leave SMs idle: a 64-row tile, twice the blocks.
    Rule {
        name: "small-grid-hopper-d64",
        when: |c| {
            c.path == Dense
                && c.hopper()
                && c.sixteen_bit()
                && c.d(64)
                && !c.causal
                && c.short_grid()
                && 4 * c.blocks(64) >= u64::from(c.sm_count)
        },
        pick: Pick::Key(r::HOPPER_M64),
        why: "16-bit D64 grids short of the SMs but with a block for a quarter of them: one consumer warpgroup, 64-row tiles (tiny grids stay portable); perf-notes: The mission shape on a 64-row Hopper tile",
    },
    Rule {
        name: "small-grid-d64",
        when: |c| c.path == Dense && c.d(64) && c.short_grid() && c.fits(SMALL_D64),
        pick: Pick::Key(SMALL_D64),
        why: "grids short of the SMs: 64-row blocks with 16 rows per warp, a 4-deep ring at D64; perf-notes: Gap 3: mission shape B2 H8 S512 D64",
    },
    Rule {
        name: "small-grid-d128",
        when: |c| c.path == Dense && c.d(128) && c.short_grid() && c.fits(SMALL_D128),
        pick: Pick::Key(SMALL_D128),
        why: "grids short of the SMs: 64-row blocks with 16 rows per warp; perf-notes: Gap 3: mission shape B2 H8 S512 D64",
    },
    Rule {
        name: "small-grid-d256",
        when: |c| c.path == Dense && !c.d(64) && !c.d(128) && c.short_grid() && c.fits(SMALL_D256),
        pick: Pick::Key(SMALL_D256),
        why: "grids short of the SMs: 64-row blocks with 16 rows per warp; perf-notes: Gap 3: mission shape B2 H8 S512 D64",
    },
    // 4. Lengths.
    Rule {
        name: "hopper-d128-causal-short",
        when: |c| {
            c.path == Dense
                && c.hopper()
                && c.sixteen_bit()
                && c.d(128)
                && c.causal
                && c.seq_q() <= 1024
        },
        pick: Pick::Key(r::HOPPER_N128_PERSISTENT),
        why: "16-bit D128 causal up to S 1k: the persistent ping-pong tile, whose heaviest-first causal order spreads the diagonal (1.40x the portable half-step tile); perf-notes: D128 causal S 1k back on the Hopper family",
    },
    Rule {
        name: "hopper-d64-128-rows",
        when: |c| {
            c.path == Dense
                && c.hopper()
                && c.sixteen_bit()
                && c.d(64)
                && (c.seq_q() < 2048
                    || (c.causal && c.seq_q() <= 4096)
                    || c.blocks(192) < 4 * u64::from(c.sm_count))
        },
        pick: Pick::Key(r::HOPPER_N128_PERSISTENT),
        why: "16-bit D64 below S 2k, causal to S 4k, or fewer than four 192-row tiles per SM: 192-row blocks idle more rows; perf-notes: Hopper family (step (e)); Hopper family: the TMA-store epilogue",
    },
    Rule {
        name: "hopper-fp8kv",
        when: |c| c.path == Dense && c.hopper() && c.fp8kv() && c.head_dim <= 128,
        pick: Pick::Key(r::HOPPER_N128_PERSISTENT),
        why: "FP8-KV at D64/D128: the Hopper family's producer decodes E4M3 K/V into the 16-bit tiles, 1.01-1.39x the portable tiles; perf-notes: FP8-KV prefill on the Hopper family, third design",
    },
    Rule {
        name: "u8-causal-long-d64",
        when: |c| c.path == Dense && c.hopper() && c.simfp8() && c.d(64) && c.causal && c.seq_q() >= 4096,
        pick: Pick::Key(r::KV8_D64),
        why: "the u8 code, D64 causal from S 4k: the non-causal 256-row tile wins from there; perf-notes: bigger key tiles without the spill (half steps), and where FP8-KV wins",
    },
    Rule {
        name: "u8-causal-long-d128",
        when: |c| c.path == Dense && c.hopper() && c.simfp8() && c.d(128) && c.causal && c.seq_q() >= 8192,
        pick: Pick::Key(r::KV8_D128),
        why: "the u8 code, D128 causal from S 8k: the unpaired 256-row tile ties the paired one there; perf-notes: the order and the grain of the causal diagonal",
    },
    Rule {
        name: "u8-causal-frag-d64",
        when: |c| c.path == Dense && c.hopper() && c.simfp8() && c.d(64) && c.causal && c.seq_q() <= 2048,
        pick: Pick::Key(r::KV8_FRAG_D64),
        why: "the u8 code, D64 causal up to S 2k: fragment decode on the 128-row tile, two blocks per SM overlap the diagonal; perf-notes: fragment decode (8-bit K/V decoded in registers by every warp)",
    },
    Rule {
        name: "u8-causal-frag-d128",
        when: |c| c.path == Dense && c.hopper() && c.simfp8() && c.d(128) && c.causal && c.seq_q() <= 512,
        pick: Pick::Key(r::KV8_FRAG_D128),
        why: "the u8 code, D128 causal up to S 512 (its two-instruction decode loses from S 1k); perf-notes: K staged beside fragment-decoded V",
    },
    // Variable-length calls (the decode rules above took the decode-shaped ones).
    Rule {
        name: "varlen-hopper-d64",
        when: |c| c.path == Varlen && c.hopper() && c.sixteen_bit() && c.d(64),
        pick: Pick::Key(r::HOPPER_N128_PERSISTENT),
        why: "16-bit D64 varlen on Hopper: the 128-row tile (the 192-row one spills in the varlen mode under causal); perf-notes: Variable-length batches in every family",
    },
    Rule {
        name: "varlen-no-stream",
        when: |c| c.path == Varlen && c.hopper() && c.fp8kv() && c.d(64) && !c.causal,
        pick: Pick::Key(r::KV8_D64),
        why: "the stream does not read packed sequences: the same 256-row tile without it; perf-notes: Variable-length batches in every family",
    },
    // 5. Class defaults. Hopper family, 16-bit (varlen: D128 only; its varlen mode spills at
    // D256).
    Rule {
        name: "hopper-d256",
        when: |c| c.on(&[Dense, Class]) && c.hopper() && c.sixteen_bit() && c.d(256),
        pick: Pick::Key(r::HOPPER_N80),
        why: "16-bit D256: FA3's 80-key tile with ping-pong, +5-20 % over 64 keys; perf-notes: Hopper family (step (e))",
    },
    Rule {
        name: "hopper-d128-causal",
        when: |c| c.on(&[Dense, Class, Varlen]) && c.hopper() && c.sixteen_bit() && c.d(128) && c.causal,
        pick: Pick::Key(r::HOPPER_N128_O),
        why: "16-bit D128 causal: two consumer warpgroups, overlap without ping-pong; perf-notes: Hopper family",
    },
    Rule {
        name: "hopper-d128",
        when: |c| c.on(&[Dense, Class, Varlen]) && c.hopper() && c.sixteen_bit() && c.d(128),
        pick: Pick::Key(r::HOPPER_N128_PERSISTENT),
        why: "16-bit D128: two consumer warpgroups, persistent ping-pong; perf-notes: Hopper family",
    },
    Rule {
        name: "hopper-d64",
        when: |c| c.on(&[Dense, Class]) && c.hopper() && c.sixteen_bit(),
        pick: Pick::Key(r::HOPPER_M192_D64),
        why: "16-bit D64 from S 2k: FA3's three consumer warpgroups (192 rows), persistent, +2-10 %; perf-notes: Hopper family (step (e))",
    },
    // Hopper family, full FP8 (varlen: portable; its varlen mode spills).
    Rule {
        name: "hopper-fp8-d256",
        when: |c| c.on(&[Dense, Class]) && c.hopper() && c.full_fp8() && c.d(256) && !c.causal,
        pick: Pick::Key(r::HOPPER_FP8_D256),
        why: "full FP8 D256: 64 keys, three stages, ping-pong without overlap, persistent; perf-notes: Full FP8 at D256 on the Hopper family",
    },
    Rule {
        name: "hopper-fp8-d256-causal",
        when: |c| c.on(&[Dense, Class]) && c.hopper() && c.full_fp8() && c.d(256),
        pick: Pick::Key(r::HOPPER_FP8_D256_NP),
        why: "full FP8 D256 causal: the same tile, one block per tile (persistent loses the diagonal's balance); perf-notes: Full FP8 at D256 on the Hopper family",
    },
    Rule {
        name: "hopper-fp8-d64",
        when: |c| {
            c.on(&[Dense, Class])
                && c.hopper()
                && c.full_fp8()
                && c.d(64)
                && (!c.causal || c.seq_q() >= 8192)
        },
        pick: Pick::Key(r::HOPPER_FP8_M192_D64),
        why: "full FP8 D64 (causal from S 8k): FA3's 192 rows, persistent, +5-17 % non-causal, +9 % causal S 16k (equal at 4k, -8 % at 1k); perf-notes: Full FP8 D64: 192-row tiles",
    },
    Rule {
        name: "hopper-fp8-d128-causal",
        when: |c| c.on(&[Dense, Class]) && c.hopper() && c.full_fp8() && c.d(128) && c.causal,
        pick: Pick::Key(r::HOPPER_N128_O),
        why: "full FP8 D128 causal: overlap alone leads persistent ping-pong from S 4k; perf-notes: FP8 on Hopper: the first full-FP8 kernel",
    },
    Rule {
        name: "hopper-fp8",
        when: |c| c.on(&[Dense, Class]) && c.hopper() && c.full_fp8(),
        pick: Pick::Key(r::HOPPER_N128_PERSISTENT),
        why: "full FP8 D64/D128: persistent ping-pong, 1.2-2x the portable FP8 tiles; perf-notes: FP8 on Hopper: the first full-FP8 kernel",
    },
    // Portable family.
    Rule {
        name: "stream-d64",
        when: |c| c.hopper() && c.fp8kv() && c.d(64) && !c.causal,
        pick: Pick::Key(r::KV8_STREAM_D64),
        why: "FP8-KV D64 class default: persistent decoupled sync overlaps each work tile's prologue and tail; perf-notes: the stream (persistent decoupled sync) for 8-bit K/V",
    },
    Rule {
        name: "frag-d64",
        when: |c| c.hopper() && c.fp8kv() && c.d(64),
        pick: Pick::Key(r::KV8_FRAG_D64),
        why: "FP8-KV D64 causal class default: fragment decode on the 128-row tile; perf-notes: fragment decode (8-bit K/V decoded in registers by every warp)",
    },
    Rule {
        name: "kv8-d64",
        when: |c| c.hopper() && c.kv8() && c.d(64) && !c.causal,
        pick: Pick::Key(r::KV8_D64),
        why: "8-bit K/V D64 on Hopper: 256-row tiles share each K/V tile's decode, decoupled sync; perf-notes: decoupled sync for the 256-row 8-bit tiles",
    },
    Rule {
        name: "kv8-d128",
        when: |c| c.hopper() && c.kv8() && c.d(128) && !c.causal,
        pick: Pick::Key(r::KV8_D128),
        why: "8-bit K/V D128 on Hopper: 256-row tiles, 32 keys, four stages, decoupled sync; perf-notes: decoupled sync for the 256-row 8-bit tiles",
    },
    Rule {
        name: "kv8-d128-causal",
        when: |c| c.hopper() && c.kv8() && c.d(128),
        pick: Pick::Key(r::KV8_D128_CAUSAL),
        why: "8-bit K/V D128 causal on Hopper: the same tile with paired rows for the diagonal; perf-notes: paired rows for the causal diagonal (D128 8-bit)",
    },
    Rule {
        name: "d64",
        when: |c| c.d(64),
        pick: Pick::Key(P_D64),
        why: "D64: 4 warps x 32 rows, 64 keys, two blocks per SM (the half-step tile lost 3 % on 8-bit causal); perf-notes: Portable family",
    },
    Rule {
        name: "d128",
        when: |c| c.d(128),
        pick: Pick::Key(P_D128),
        why: "D128: FA2's shape, 4 warps x 32 rows, 32 keys, two blocks per SM; perf-notes: Portable family",
    },
    Rule {
        name: "small-smem",
        when: |c| c.small_smem(),
        pick: Pick::Key(P_SMALL_SMEM),
        why: "sm_86/sm_89 (99 KB per block): 4 warps x 16 rows, 32 keys; perf-notes: Portable family",
    },
    Rule {
        name: "frag-d256",
        when: |c| c.hopper() && c.kv8() && c.d(256) && !c.simfp8(),
        pick: Pick::Key(r::KV8_FRAG_D256),
        why: "E4M3 K/V D256 on Hopper: fragment decode at 16 rows per warp, two 64-row blocks per SM; perf-notes: fragment decode at 16 rows per warp",
    },
    Rule {
        name: "ring-of-one-d256",
        when: |c| c.hopper() && c.kv8() && c.d(256),
        pick: Pick::Key(r::KV8_D256),
        why: "the u8 code D256 on Hopper: the split decode's ring of one (its two-instruction decode loses 6 % on the fragment tile); perf-notes: the split decode for 8-bit K/V at D256",
    },
    Rule {
        name: "hopper-d256-portable",
        when: |c| c.hopper(),
        pick: Pick::Key(P_D256_HOPPER),
        why: "D256 on Hopper: FA2's 64-key tile, 192 KB (only Hopper's 227 KB holds it); perf-notes: D256: FA2's tile_n 64 on Hopper",
    },
    Rule {
        name: "ampere-d256",
        when: |_| true,
        pick: Pick::Key(P_D256_AMPERE),
        why: "sm_80 D256 (every call the rules above leave): 8 warps x 16 rows, 32 keys, 128 KB; perf-notes: Portable family",
    },
];
