// Warpgroup primitives (sm_90a): register reallocation between warpgroups and wgmma.
#pragma once
#include "types.cuh"

// ---- register reallocation (sm_90a) ---------------------------------------------------------
// setmaxnreg.{inc,dec}.sync.aligned.u32 N: every warp of a warpgroup (4 consecutive warps,
// executed by all of them) sets its per-thread register count to N (24..256, a multiple of 8);
// dec returns registers to the block's pool, inc blocks until the pool has them. A block starts
// at its launch-bound count (65536 / threads, rounded down to 8), so a producer warpgroup that
// drops to P lets the consumer warpgroups rise to what the pool then holds. ptxas allocates the
// code after each instruction within its count (checked with NVRTC 13.0: a 200-float loop
// under __launch_bounds__(384, 1) spills 488 bytes for sm_90 and none for sm_90a after an inc
// to 240). Only with the arch-specific feature set (sm_90a): SDPA_HAS_SETMAXNREG.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SDPA_HAS_SETMAXNREG 1
#else
#define SDPA_HAS_SETMAXNREG 0
#endif
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if SDPA_HAS_SETMAXNREG
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
#endif
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if SDPA_HAS_SETMAXNREG
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
#endif
}


// ---- wgmma (sm_90a) ---------------------------------------------------------------------------
// wgmma.mma_async is issued by a whole warpgroup (4 consecutive warps, the first at a warp
// index divisible by 4) and runs asynchronously: fence before the first wgmma that touches
// registers written by ordinary instructions (wgmma.fence), close the issued ones into a group
// (commit_group), and wait until at most N groups are pending (wait_group N) before reading
// the accumulators or reusing the operands' shared memory. Between issue and wait the
// accumulator registers belong to the tensor cores: `wgmma_hold` pins them so that the
// compiler neither reads nor moves them across that window.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
template <int R> __device__ __forceinline__ void wgmma_hold(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits 0-13 start address >> 4; 16-29 leading-dimension byte offset (LBO) >> 4;
//   32-45 stride-dimension byte offset (SBO) >> 4; 49-51 base offset (0: every tile here
//   starts on a 1024-byte boundary, the 128-byte swizzle's period); 62-63 swizzle (1 = 128 B).
// With the 128-byte swizzle a tile is stored as TMA's SWIZZLE_128B writes it: rows of 128
// bytes (64 16-bit elements), 16-byte chunk c of row r at chunk c ^ (r % 8), 8 rows = one
// 1024-byte atom.
//  - K-major operand (the reduction dim contiguous: Q, K): rows are M or N; SBO = 1024 (from
//    one 8-row atom to the next); LBO unused (1). A k16 step inside the 128-byte row is +32
//    bytes on the start address; the next 64 columns live in the next 128-byte-wide slab.
//  - MN-major operand (V for P.V: N = head dim contiguous, K = keys as rows): LBO = the byte
//    distance between 64-column slabs along N, SBO = 1024 (8 key rows); a k16 step is +16 rows
//    = +2048 bytes.
// 8-bit operands are K-major only; a 128-byte row holds 128 codes (a k32 step is +32 bytes).
// With 64-byte rows (8-bit D64) the 64-byte swizzle (layout 2): 512-byte atoms of 8 rows,
// chunk c of row r at c ^ ((r / 2) % 4), as TMA's SWIZZLE_64B writes them; SBO = 512.
__device__ __forceinline__ u64 wgmma_desc(u32 smem_addr, u32 lbo_bytes, u32 sbo_bytes, u32 layout) {
    return u64((smem_addr & 0x3FFFF) >> 4) | (u64(lbo_bytes >> 4) << 16) |
           (u64(sbo_bytes >> 4) << 32) | (u64(layout) << 62);
}
__device__ __forceinline__ u64 wgmma_desc_sw128(u32 smem_addr, u32 lbo_bytes, u32 sbo_bytes) {
    return wgmma_desc(smem_addr, lbo_bytes, sbo_bytes, 1);
}

#include "wgmma_ops.cuh"
