// The Hopper kernels' knobs: every SDPA_* define the host sets for this family (variant.rs,
// KernelSpec::defines), read once here, and what follows from them for both kernel files.
// The kernel files (hopper.cu, hopper_fp8.cu) and the Hopper headers live in namespace
// hopper; only the entry point (hopper_entry.cuh) is outside it.
#pragma once
#include "types.cuh"
#include "softmax.cuh"
#include "sync.cuh"
#include "tma.cuh"
#include "wgmma.cuh"
#include "abi.cuh"

#ifndef SDPA_VARLEN
#define SDPA_VARLEN 0
#endif

namespace hopper {
constexpr int D = SDPA_HEAD_DIM;
constexpr int TILE_N = SDPA_TILE_N;  // keys per block of the ring
constexpr int STAGES = SDPA_STAGES;  // ring depth
constexpr int TILE_M = SDPA_TILE_M;  // query rows per work tile
constexpr int THREADS = SDPA_WARPS * 32;
constexpr int CONSUMERS = SDPA_WARPS / 4 - 1;  // warpgroups beside the one producer warpgroup
constexpr bool OVERLAP = SDPA_OVERLAP;                      // softmax(j) beside P.V(j + 1)
constexpr bool PINGPONG = SDPA_PINGPONG && CONSUMERS == 2;  // warpgroups take turns on GEMMs
constexpr bool VARLEN = SDPA_VARLEN != 0;  // packed sequences (abi.cuh), cut out by the scheduler
static_assert(TILE_M == 64 * CONSUMERS, "one 64-row wgmma tile per consumer warpgroup");

// Shared memory: a block may use 227 KB; the host adds 1024 bytes so that the base can be
// rounded up to the 128-byte swizzle's period.
constexpr u32 SMEM_CAP = 232448, SMEM_PAD = 1024;
constexpr u32 O_BYTES = TILE_M * D * 2;  // the staged 16-bit O tile

// setmaxnreg moves registers within the block's launch allocation (65536 / THREADS per
// thread, rounded down to 8, for each of its warpgroups): an inc past it waits forever. The
// consumers share what the producer leaves, in multiples of 8, at most 240 each.
constexpr int POOL = 65536 / THREADS / 8 * 8 * (THREADS / 128);
constexpr int consumer_regs(int producer_regs) {
    return (POOL - producer_regs) / CONSUMERS / 8 * 8 > 240 ? 240 : (POOL - producer_regs) / CONSUMERS / 8 * 8;
}

// Named barriers (bar.sync ids; 0 is __syncthreads'). TURN_0 / TURN_1: consumer warpgroup 0's
// / 1's turn on the tensor cores under ping-pong (256 threads); O_STAGED_0 / O_STAGED_1: a
// consumer warpgroup's staged O tile (128 threads, hopper_parts.cuh's epilogue).
enum NamedBarrier : int { TURN_0 = 1, TURN_1 = 2, O_STAGED_0 = 3, O_STAGED_1 = 4 };
}  // namespace hopper
