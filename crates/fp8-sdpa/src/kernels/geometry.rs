//! Launch geometry per family: the grid a spec is launched with for a problem. The kernels
//! decode `blockIdx` by the same rules; change both together.

use crate::problem::AttnShape;
use crate::variant::{Family, KernelSpec};

/// Causal batch sections: a section's K and V may take this share of the L2 (`1 / L2_SHARE`),
/// so that the sections whose blocks run at one time keep their K/V in L2.
const L2_SHARE: u64 = 3;

/// Batches per causal section (see [`grid`]): as many as fit a third of the L2 with their K
/// and V, at least 1, at most `batch`, and enough that `sections · m_blocks` stays within the
/// grid's z limit of 65535 (where it cannot, [`grid`]'s z exceeds it and the launch is refused).
///
/// Measured on the H100 (50 MB L2; fa grid, f16 and fp8kv_f16 at S 512 to 4k): one
/// section for the whole batch lost up to 8 % at S 512-1k (the running blocks' K/V no longer fit
/// in L2), one batch per section lost up to 7 % at S 512-1k (a short last section); 2 to 4
/// batches of 8 MB or less were within 1-2 % of the best everywhere.
pub fn causal_batch_group(spec: &KernelSpec, shape: &AttnShape, l2_bytes: u64) -> u64 {
    let batch = shape.batch.max(1) as u64;
    let kv_bytes = 2
        * (shape.seq_kv * shape.heads_kv * shape.head_dim) as u64
        * spec.precision.kv().size() as u64;
    let fit = (l2_bytes / L2_SHARE / kv_bytes.max(1)).clamp(1, batch);
    let m_blocks = (shape.seq_q as u64).div_ceil(rows_per_work(spec)).max(1);
    let max_sections = (65535 / m_blocks).max(1);
    fit.max(batch.div_ceil(max_sections)).min(batch)
}

/// Query rows per unit of the grid's m-block axis: a block's `tile_m`, the reference
/// kernel's `warps`.
pub fn rows_per_work(spec: &KernelSpec) -> u64 {
    let v = &spec.variant;
    match v.family {
        Family::Reference => v.warps as u64,
        _ => v.tile_m.max(1) as u64,
    }
}

/// Grid dimensions `[x, y, z]` for `spec` on `shape`, on a device with `sm_count` SMs and
/// `l2_bytes` of L2.
///
/// - reference: `(ceil(seq_q / warps), heads_q, batch)`, one warp per query row;
/// - portable, not persistent: `(ceil(seq_q / tile_m), heads_q, batch)`; under causal
///   `(heads_q, G, ceil(batch / G) · m_blocks)` over sections of `G` batches
///   ([`causal_batch_group`]): block (x, y, z) is head x of batch `(z / m_blocks) · G + y`
///   (none past the last batch) at m-block `m_blocks - 1 - z % m_blocks`. Blocks are
///   dispatched x fastest, so within a section every head's heaviest m-block goes before any
///   lighter one (portable.cu's `causal_work_at` order), and the section's K/V stay in L2;
/// - portable, persistent (the stream: persistent decoupled sync, the family's only
///   persistent form): `(min(tiles, sm_count * min_blocks), 1, 1)`, where
///   `tiles = ceil(seq_q / tile_m) * heads_q * batch`; block `i` takes tiles `i, i + grid, ...`
///   and decodes a tile index `t` as `m_block = t % m_blocks`, `hq = (t / m_blocks) % heads_q`,
///   `b = t / (m_blocks * heads_q)`; under causal m-blocks vary slowest, heaviest first:
///   `m_block = m_blocks - 1 - t / (heads_q * batch)`, `hq = t % heads_q`,
///   `b = (t / heads_q) % batch` (portable.cu's `work_at`);
/// - hopper: `(tiles, 1, 1)`, or `min(tiles, sm_count)` blocks when persistent; block `i`
///   takes tiles `i, i + grid, ...` in hopper.cu's Scheduler order (under causal the (batch,
///   head) pairs go in sections whose K/V fit about 16 MB of L2, m-blocks slowest and
///   heaviest first inside a section; else `m_block = t % m_blocks`,
///   `hq = t / m_blocks % heads_q`, `b = t / (m_blocks · heads_q)`);
///
/// Variable-length batches (portable family, not the stream, and decode family:
/// runtime/varlen.rs) launch these grids over `shape` = the sequences as the batch and the
/// longest lengths as `seq_q` and `seq_kv`; a work tile past its sequence's query count exits
/// (portable.cu's varlen_view, decode.cu's row blocks), a decode split past its sequence's
/// keys writes a -inf partial LSE and exits, and causal sections are sized by the longest
/// sequence's keys.
pub fn grid(spec: &KernelSpec, shape: &AttnShape, sm_count: u32, l2_bytes: u64) -> [u64; 3] {
    let v = &spec.variant;
    if v.family == Family::Decode {
        // decode.cu: (split, kv-head x packed row block, batch).
        let split = decode_split(spec, shape, sm_count);
        return [
            split.splits as u64,
            shape.heads_kv as u64 * decode_row_blocks(shape),
            shape.batch as u64,
        ];
    }
    let m_blocks = (shape.seq_q as u64).div_ceil(rows_per_work(spec));
    if v.persistent {
        let tiles = m_blocks * shape.heads_q as u64 * shape.batch as u64;
        [
            tiles.min(sm_count as u64 * v.min_blocks as u64).max(1),
            1,
            1,
        ]
    } else if v.family == Family::Hopper {
        // hopper.cu's Scheduler walks a 1-D list of work tiles.
        [m_blocks * shape.heads_q as u64 * shape.batch as u64, 1, 1]
    } else if spec.causal && v.family == Family::Portable {
        let g = causal_batch_group(spec, shape, l2_bytes);
        [
            shape.heads_q as u64,
            g,
            (shape.batch as u64).div_ceil(g) * m_blocks,
        ]
    } else {
        [m_blocks, shape.heads_q as u64, shape.batch as u64]
    }
}

/// Blocks of 16 packed query rows per (batch, kv-head) in the decode family: the group's
/// query heads times the query positions (GQA packing).
pub fn decode_row_blocks(shape: &AttnShape) -> u64 {
    let group = (shape.heads_q / shape.heads_kv.max(1)).max(1);
    ((shape.seq_q * group) as u64).div_ceil(16).max(1)
}

/// How the decode family splits the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeSplit {
    /// CTAs per (batch, kv-head, row block) along the keys.
    pub splits: u32,
    /// Keys per split, a multiple of the variant's `tile_n`.
    pub split_keys: u32,
}

/// The split policy: enough CTAs for two waves of `min_blocks` CTAs per SM (so that a small
/// batch still fills the GPU), but never a split of fewer than two key steps; `seq_kv` is the
/// longest sequence (paged: the block table's capacity).
pub fn decode_split(spec: &KernelSpec, shape: &AttnShape, sm_count: u32) -> DecodeSplit {
    let tile_n = spec.variant.tile_n as u64;
    let base = shape.batch as u64 * shape.heads_kv as u64 * decode_row_blocks(shape);
    let steps = (shape.seq_kv as u64).div_ceil(tile_n).max(1);
    let want = (2 * sm_count as u64 * spec.variant.min_blocks as u64).div_ceil(base.max(1));
    let mut splits = want.min(steps.div_ceil(2)).max(1);
    // The kernel holds split bounds in i32: near 2^31 keys one split rounded up to whole
    // steps would pass i32::MAX, so take more splits until it fits (a review found the wrap).
    while steps.div_ceil(splits) * tile_n > i32::MAX as u64 {
        splits += 1;
    }
    let split_keys = steps.div_ceil(splits) * tile_n;
    let splits = (shape.seq_kv as u64).div_ceil(split_keys).max(1);
    DecodeSplit {
        splits: splits as u32,
        split_keys: split_keys as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Precision, Variant};

    #[test]
    fn split_bounds_fit_i32_near_2_pow_31_keys() {
        for (batch, heads) in [(1, 1), (8, 66)] {
            let shape = AttnShape::new(batch, 1, i32::MAX as usize, heads, heads, 128);
            let s = decode_split(&spec("decode.m16.n64.w4.s3.b2.cex", false), &shape, 132);
            assert!(s.split_keys <= i32::MAX as u32, "{s:?}");
            // The splits cover every key, and the last split starts below the end.
            assert!(s.splits as u64 * s.split_keys as u64 >= i32::MAX as u64);
            assert!(((s.splits - 1) as u64 * s.split_keys as u64) < i32::MAX as u64);
        }
    }

    fn spec(key: &str, causal: bool) -> KernelSpec {
        KernelSpec {
            variant: key.parse::<Variant>().unwrap(),
            precision: Precision::F16,
            head_dim: 128,
            causal,
        }
    }

    /// Non-persistent causal blocks (x, y, z) in dispatch order (x fastest): (m_block, hq, b)
    /// of each, as portable.cu's run_role maps them (blocks past the last batch return).
    fn causal_blocks(g: [u64; 3], m_blocks: u64, batch: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        for z in 0..g[2] {
            for y in 0..g[1] {
                for x in 0..g[0] {
                    let (section, b) = (z / m_blocks, (z / m_blocks) * g[1] + y);
                    if b < batch {
                        out.push((m_blocks - 1 - (z - section * m_blocks), x, b));
                    }
                }
            }
        }
        out
    }

    const H100_L2: u64 = 50 << 20;

    #[test]
    fn causal_blocks_cover_every_tile_once_heaviest_first_per_section() {
        let key = "portable.m128.n64.w4.s2.b2.cthelx";
        // 5 batches of 8 MB of K/V (f16, S 1k, 16 heads, D128): 2 per 16.7 MB section.
        let shape = AttnShape::new(5, 1000, 1024, 16, 16, 128);
        assert_eq!(grid(&spec(key, false), &shape, 132, H100_L2), [8, 16, 5]);
        let g = grid(&spec(key, true), &shape, 132, H100_L2);
        assert_eq!(g, [16, 2, 3 * 8]);
        let blocks = causal_blocks(g, 8, 5);
        let mut seen = std::collections::HashSet::new();
        for (i, &(mb, hq, b)) in blocks.iter().enumerate() {
            assert!(hq < 16 && b < 5);
            assert!(seen.insert((mb, hq, b)), "tile {:?} twice", (mb, hq, b));
            // Heaviest first within a section (sections: batches 0-1, 2-3, 4).
            if let Some(&(next_mb, _, next_b)) = blocks.get(i + 1) {
                assert!(
                    next_b / 2 > b / 2 || next_mb <= mb,
                    "block {i}: m-block {next_mb} after {mb}"
                );
            }
        }
        assert_eq!(seen.len(), 8 * 16 * 5);
        // Persistent variants keep their capped grid.
        let persistent = spec("portable.m256.n32.w8.s4.b1.ctpedx", true);
        assert_eq!(grid(&persistent, &shape, 132, H100_L2), [132, 1, 1]);
    }

    #[test]
    fn causal_sections_fit_a_third_of_l2_and_the_z_limit() {
        let s = |key: &str, precision| KernelSpec {
            precision,
            ..spec(key, true)
        };
        let f16 = s("portable.m128.n64.w4.s2.b2.cthelx", Precision::F16);
        let kv8 = s("portable.m256.n32.w8.s4.b1.ctredx", Precision::Fp8KvF16);
        // fa grid, D128: 4 MB of f16 K/V per batch at S 512, 8 MB at 1k, 32 MB at 4k.
        let fa = |seq: usize| AttnShape::new(16384 / seq, seq, seq, 16, 16, 128);
        assert_eq!(causal_batch_group(&f16, &fa(512), H100_L2), 4);
        assert_eq!(causal_batch_group(&f16, &fa(1024), H100_L2), 2);
        assert_eq!(causal_batch_group(&f16, &fa(4096), H100_L2), 1);
        // 8-bit K/V: half the bytes, twice the batches.
        assert_eq!(causal_batch_group(&kv8, &fa(1024), H100_L2), 4);
        // Never more than the batch.
        assert_eq!(
            causal_batch_group(&f16, &AttnShape::new(1, 64, 64, 1, 1, 64), H100_L2),
            1
        );
        // Many batches of many m-blocks, on a small L2 (one batch's K/V does not fit): the
        // group grows until z fits 65535 (64 m-blocks: at most 1023 sections).
        let long = AttnShape::new(4096, 8192, 8192, 1, 1, 64);
        assert_eq!(causal_batch_group(&f16, &long, 1 << 20), 5);
        assert_eq!(grid(&f16, &long, 132, 1 << 20), [1, 5, 820 * 64]);
    }

    #[test]
    fn decode_splits_fill_the_gpu_and_cover_every_key_once() {
        let dec = KernelSpec {
            variant: "decode.m16.n64.w4.s3.b2.cex".parse::<Variant>().unwrap(),
            precision: Precision::Fp8KvF16,
            head_dim: 128,
            causal: false,
        };
        // (batch, seq_q, seq_kv, heads_q, heads_kv)
        for (b, sq, skv, hq, hkv) in [
            (32, 1, 4096, 32, 8),
            (1, 1, 131072, 32, 8),
            (1, 4, 4096, 32, 32),
            (64, 1, 32768, 32, 8),
            (3, 16, 1, 8, 1),
            (2, 7, 1000, 6, 2),
        ] {
            let shape = AttnShape::new(b, sq, skv, hq, hkv, 128);
            let s = decode_split(&dec, &shape, 132);
            let keys = s.split_keys as usize;
            assert_eq!(keys % 64, 0, "{shape:?}");
            assert!(
                s.splits as usize * keys >= skv,
                "{shape:?}: {s:?} misses keys"
            );
            assert!(
                (s.splits as usize - 1) * keys < skv,
                "{shape:?}: {s:?} has an empty split"
            );
            let g = grid(&dec, &shape, 132, 0);
            assert_eq!(g[0], s.splits as u64);
            assert_eq!(g[1], hkv as u64 * ((sq * (hq / hkv)) as u64).div_ceil(16));
            assert_eq!(g[2], b as u64);
            // A small batch against a long cache is spread over at least one wave.
            if skv >= 65536 {
                assert!(g[0] * g[1] * g[2] >= 132, "{shape:?}: {g:?}");
            }
        }
    }
}
