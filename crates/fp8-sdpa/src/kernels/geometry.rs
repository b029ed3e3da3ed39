//! Launch geometry per family: the grid a spec is launched with for a problem. The kernels
//! decode `blockIdx` by the same rules; change both together.

use crate::problem::AttnShape;
use crate::variant::{Family, KernelSpec};

/// Grid dimensions `[x, y, z]` for `spec` on `shape`, with `sm_count` SMs on the device.
///
/// - reference: `(ceil(seq_q / warps), heads_q, batch)`, one warp per query row;
/// - portable, not persistent: `(ceil(seq_q / tile_m), heads_q, batch)`; under causal
///   `(heads_q, batch, ceil(seq_q / tile_m))`, the kernel mapping `blockIdx.z` to m-block
///   `grid.z - 1 - blockIdx.z`: blocks are dispatched x fastest, so every head's heaviest
///   m-block goes before any lighter one (portable.cu's `causal_work_at` order);
/// - portable, persistent: `(min(tiles, sm_count * min_blocks), 1, 1)`, where
///   `tiles = ceil(seq_q / tile_m) * heads_q * batch`; block `i` takes tiles `i, i + grid, ...`
///   and decodes a tile index `t` as `m_block = t % m_blocks`, `hq = (t / m_blocks) % heads_q`,
///   `b = t / (m_blocks * heads_q)`, with `m_block` reversed (heaviest first) under causal;
///   persistent decoupled sync under causal has m-blocks vary slowest, heaviest first:
///   `m_block = m_blocks - 1 - t / (heads_q * batch)`, `hq = t % heads_q`,
///   `b = (t / heads_q) % batch` (portable.cu's `work_at`).
pub fn grid(spec: &KernelSpec, shape: &AttnShape, sm_count: u32) -> [u64; 3] {
    let v = &spec.variant;
    let rows_per_block = match v.family {
        Family::Reference => v.warps as u64,
        _ => v.tile_m as u64,
    };
    let m_blocks = (shape.seq_q as u64).div_ceil(rows_per_block);
    if v.persistent {
        let tiles = m_blocks * shape.heads_q as u64 * shape.batch as u64;
        [
            tiles.min(sm_count as u64 * v.min_blocks as u64).max(1),
            1,
            1,
        ]
    } else if spec.causal && v.family == Family::Portable {
        [shape.heads_q as u64, shape.batch as u64, m_blocks]
    } else {
        [m_blocks, shape.heads_q as u64, shape.batch as u64]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Precision, Variant};

    fn spec(key: &str, causal: bool) -> KernelSpec {
        KernelSpec {
            variant: key.parse::<Variant>().unwrap(),
            precision: Precision::F16,
            head_dim: 128,
            causal,
        }
    }

    /// Non-persistent causal block (x, y, z) in dispatch order (x fastest): its (m_block,
    /// hq, b), as portable.cu's run_role maps it.
    fn causal_blocks(g: [u64; 3]) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        for z in 0..g[2] {
            for y in 0..g[1] {
                for x in 0..g[0] {
                    out.push((g[2] - 1 - z, x, y));
                }
            }
        }
        out
    }

    #[test]
    fn causal_blocks_cover_every_tile_once_heaviest_first() {
        let shape = AttnShape::new(3, 1000, 1000, 5, 5, 128);
        let key = "portable.m128.n64.w4.s2.b2.cthelx";
        assert_eq!(grid(&spec(key, false), &shape, 132), [8, 5, 3]);
        let g = grid(&spec(key, true), &shape, 132);
        assert_eq!(g, [5, 3, 8]);
        let mut seen = std::collections::HashSet::new();
        let mut last_mb = u64::MAX;
        for (i, (mb, hq, b)) in causal_blocks(g).into_iter().enumerate() {
            assert!(mb <= last_mb, "block {i}: m-block {mb} after {last_mb}");
            last_mb = mb;
            assert!(hq < 5 && b < 3);
            assert!(seen.insert((mb, hq, b)), "tile {:?} twice", (mb, hq, b));
        }
        assert_eq!(seen.len(), 8 * 5 * 3);
        // Persistent variants keep their capped grid.
        let persistent = spec("portable.m256.n32.w8.s4.b1.ctpedx", true);
        assert_eq!(grid(&persistent, &shape, 132), [4 * 5 * 3, 1, 1]);
        assert_eq!(
            grid(&persistent, &AttnShape::new(16, 1024, 1024, 16, 16, 128), 132),
            [132, 1, 1]
        );
    }
}
