// Shared-memory rings of the Hopper kernels: N buffers, each with a FULL and an EMPTY
// mbarrier. The producer fills a buffer and FULL completes (on the TMA's bytes, or on its
// writers' arrivals); the consumers read it and arrive on EMPTY. Both sides count "uses" of
// the ring: use u lives in stage u % N, and its barriers' phase parity is (u / N) & 1, so a
// waiter never blocks on a later phase. The writer waits on EMPTY with the parity flipped: a
// fresh barrier counts the phase before its first as completed, so the first pass through the
// ring does not wait.
// The including kernel defines, before including: OFF_BAR (the mbarrier array's offset in
// shared memory, 8 bytes per barrier) and RING_BARS_OUTLINED (below).
#pragma once
#include "hopper_knobs.cuh"

namespace hopper {
// A ring buffer for its writer: stage, phase parity of the use, address, FULL barrier.
struct Buffer { u32 stage, phase, tile, full; };

// One thread: SLABS boxes of SLAB bytes into b by TMA, box s from column COLS * s of `map`,
// once b is acquired; b's FULL completes on their bytes.
template <int SLABS, u32 SLAB, int COLS>
__device__ __forceinline__ void tma_fill(const Buffer& b, const TmaMap* map, int row, int head, int batch) {
#pragma unroll
    for (int s = 0; s < SLABS; ++s) tma_load_4d(b.tile + s * SLAB, map, b.full, COLS * s, row, head, batch);
}

template <u32 N>
__device__ __forceinline__ u32 use_bar_inlined(u32 smem, u32 id, u32 use) { return smem + OFF_BAR + 8 * (id + use % N); }

// FULL, EMPTY: the barrier ids of stage 0 (stage s has FULL + s, EMPTY + s); stage s's
// buffer starts at byte OFF + s * STRIDE of the (aligned) shared memory.
template <u32 FULL, u32 EMPTY, u32 OFF, u32 STRIDE, u32 N = STAGES>
struct Ring {
    u32 smem;

    __device__ __forceinline__ static u32 phase(u32 use) { return (use / N) & 1; }
    __device__ __forceinline__ u32 bar(u32 id) const { return smem + OFF_BAR + 8 * id; }
    // By stage.
    __device__ __forceinline__ u32 full_at(u32 st) const { return bar(FULL + st); }
    __device__ __forceinline__ u32 empty_at(u32 st) const { return bar(EMPTY + st); }
    __device__ __forceinline__ u32 tile_at(u32 st) const { return smem + OFF + st * STRIDE; }
    // By use.
    __device__ __forceinline__ u32 full(u32 use = 0) const { return use_bar(FULL, use); }
    __device__ __forceinline__ u32 empty(u32 use = 0) const { return use_bar(EMPTY, use); }
    __device__ __forceinline__ u32 tile(u32 use = 0) const { return smem + OFF + (use % N) * STRIDE; }

    // Reader: waits until the buffer of `use` has been filled.
    __device__ __forceinline__ void wait_full(u32 use) const { mbar_wait(full(use), phase(use)); }
    // Writer: waits until the previous use of the buffer of `use` has been released.
    __device__ __forceinline__ void wait_empty(u32 use) const { mbar_wait(empty(use), phase(use) ^ 1); }
    // TMA writer: the buffer of `use`; acquire waits until it is free and arms its FULL for
    // `bytes` (tma_fill's, which complete it). acquire(use, ..) leaves the address to be
    // computed after the wait, for callers that need it only then.
    __device__ __forceinline__ Buffer buffer(u32 use = 0) const {
        const u32 st = use % N, ph = phase(use);
        return {st, ph, smem + OFF + st * STRIDE, bar(FULL + st)};
    }
    __device__ __forceinline__ void acquire(const Buffer& b, u32 bytes) const {
        mbar_wait(bar(EMPTY + b.stage), b.phase ^ 1);
        mbar_arrive_expect_tx(bar(FULL + b.stage), bytes);
    }
    __device__ __forceinline__ void acquire(u32 use, u32 bytes) const {
        const u32 st = use % N, ph = phase(use);
        mbar_wait(bar(EMPTY + st), ph ^ 1);
        mbar_arrive_expect_tx(bar(FULL + st), bytes);
    }
    // Set-up (one thread, before the block's __syncthreads): the arrivals that complete each
    // phase of stage s's barriers.
    __device__ __forceinline__ void init_full(u32 s, u32 arrivals) const { mbar_init(full_at(s), arrivals); }
    __device__ __forceinline__ void init_empty(u32 s, u32 arrivals) const { mbar_init(empty_at(s), arrivals); }

    // Barrier `id` + the stage of `use`. The two kernels' consumers computed this address each
    // its own way (hopper.cu in an ordinary function, which the compiler simplifies before it
    // inlines it; hopper_fp8.cu forced inline), and the compiler's code differs with the way:
    // each kernel keeps its own (RING_BARS_OUTLINED), so that its SASS is the code it was
    // tuned with.
    __device__ u32 use_bar_outlined(u32 id, u32 use) const { return smem + OFF_BAR + 8 * (id + use % N); }
    __device__ __forceinline__ u32 use_bar(u32 id, u32 use) const {
        if constexpr (RING_BARS_OUTLINED)
            return use_bar_outlined(id, use);
        else
            return use_bar_inlined<N>(smem, id, use);
    }
};
}  // namespace hopper
