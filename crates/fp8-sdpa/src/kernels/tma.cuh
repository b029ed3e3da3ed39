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

// cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [map, {c0..c3}], [src]: the
// reverse copy, shared memory (laid out as a load of the same box would write it, swizzle
// included) to the map's box at (c0..c3). Box elements outside the tensor are not written, so
// ragged tails need no masking. The writes are made by the async proxy: the threads that
// wrote `src` with ordinary stores must first execute fence_proxy_async_shared() and then
// synchronize with the issuing thread. Completion is tracked per thread in bulk groups.
__device__ __forceinline__ void tma_store_4d(const TmaMap* map, u32 src, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
        :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
// Closes this thread's bulk copies issued so far into one group.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's bulk groups still read their shared-memory source
// (.read: the global writes may still be in flight; the source may be overwritten).
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy
// accesses (a TMA store's read of them) once a barrier hands them over.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
