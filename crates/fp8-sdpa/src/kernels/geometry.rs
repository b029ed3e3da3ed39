//! Launch geometry per family: the grid a spec is launched with for a problem. The kernels
//! decode `blockIdx` by the same rules; change both together.

use crate::problem::AttnShape;
use crate::variant::{Family, KernelSpec};

/// Grid dimensions `[x, y, z]` for `spec` on `shape`, with `sm_count` SMs on the device.
///
/// - reference: `(ceil(seq_q / warps), heads_q, batch)`, one warp per query row;
/// - portable, not persistent: `(ceil(seq_q / tile_m), heads_q, batch)`; under causal the kernel
///   maps `blockIdx.x` to m-block `grid.x - 1 - blockIdx.x` (heaviest first);
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
    } else {
        [m_blocks, shape.heads_q as u64, shape.batch as u64]
    }
}
