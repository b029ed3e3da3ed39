// The bulk tensor copy engine (TMA, sm_90): tile copies between global memory, described by a
// tensor map that the host encodes (cuTensorMapEncodeTiled), and shared memory, completing on
// an mbarrier's transaction count.
#pragma once
#include "types.cuh"

// CUtensorMap: 128 opaque bytes, 64-byte aligned. Passed inside a __grid_constant__ kernel
// parameter so that its address is a constant-bank address the copy engine can read.
struct __align__(64) TmaMap { u64 opaque[16]; };

// Fetch the map into the descriptor cache before the first copy that uses it.
__device__ __forceinline__ void tma_prefetch(const TmaMap* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}

// cp.async.bulk.tensor.4d ... .mbarrier::complete_tx::bytes [dst], [map, {c0..c3}], [bar]:
// copies the map's box at element coordinates (c0 innermost .. c3) into shared memory at
// `dst` (128-byte aligned; 1024 with the 128-byte swizzle), and completes its byte count on
// the mbarrier `bar`, whose phase must expect them (mbar_arrive_expect_tx). Box elements
// outside the tensor (any coordinate past its dimension, or negative) are written as zeros and
// still counted. Issued by one thread.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaMap* map, u32 bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];"
        :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
