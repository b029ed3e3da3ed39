// Synchronization primitives: named barriers (sm_70+), mbarriers (sm_80+, with sm_90's
// transaction counts). The cluster and distributed-shared-memory primitives were removed
// after the cluster pair that used them was retired (restore patch:
// docs/results/2026-11-26-portable-round27/restore-cluster-primitives.patch).
#pragma once
#include "types.cuh"

// ---- named barriers ------------------------------------------------------------------------
// bar.sync id, n: wait until n threads (a multiple of 32) have arrived at barrier `id`
// (0 is __syncthreads's). bar.arrive id, n: count this thread's arrival without waiting.
// Both order this thread's earlier shared-memory accesses before the barrier completes for
// the threads that wait on it, so arrive = release, sync = acquire. Ids 1..15 are free.
__device__ __forceinline__ void bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
}
// bar.sync is barrier.sync.aligned: every thread must execute the same instruction. Without
// .aligned, threads may arrive from different call sites (warps on different branches, each
// with its own copy), at some cost in speed.
__device__ __forceinline__ void bar_sync_unaligned(int id, int n) {
    asm volatile("barrier.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}

// ---- mbarriers (sm_80+) ---------------------------------------------------------------------
// A 64-bit shared-memory object counting arrivals per phase: mbarrier.init sets the expected
// count; each mbarrier.arrive counts one (and, by default, releases the thread's earlier
// shared-memory accesses at CTA scope); when the count is reached the phase completes, its
// parity flips and the count re-arms. test_wait / try_wait .parity P returns true once the
// phase with parity P has completed (acquire at CTA scope), so a waiter that tracks "uses of
// this barrier so far & 1" never blocks on a later phase. Unlike bar.sync, arriving and waiting
// are separate: a thread can announce it is done with a buffer and run on. Initialization
// must be visible to other threads before they use the barrier (a __syncthreads does it).
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}" :: "r"(bar) : "memory");
}
// Spin until the phase of parity `parity` has completed. sm_90's try_wait suspends the thread
// for a while in hardware instead of spinning on issue slots.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
#if __CUDA_ARCH__ >= 900
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#else
        asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#endif
    } while (!done);
}

// ---- sm_90 only -----------------------------------------------------------------------------
// Below sm_90 these compile to nothing: only sm_90a builds the kernels that use them.
#if __CUDA_ARCH__ >= 900
#define SDPA_SM90_ASM(...) asm volatile(__VA_ARGS__)
#else
#define SDPA_SM90_ASM(...) ((void)0)
#endif
// One of the barrier's arrivals that also raises the phase's expected transaction bytes by
// `bytes` (a TMA copy's or st.async's complete_tx lowers them; the phase completes at zero
// arrivals left and zero bytes pending, and the byte count may go negative meanwhile).
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    SDPA_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

// ---- programmatic dependent launch (sm_90+) -------------------------------------------------
// A grid launched with the programmatic-stream-serialization attribute (runtime/launch.rs) may
// start while the grid ahead of it in the stream still runs. griddepcontrol.wait blocks until
// every grid it depends on has completed and its memory operations are visible, so it must come
// before the first access to memory those grids read or write; without the attribute it
// returns at once. griddepcontrol.launch_dependents lets the next such grid be scheduled once
// every block of this one has executed it or exited (its blocks then take the SMs these leave
// and run up to their own wait). Both compile to nothing below sm_90.
__device__ __forceinline__ void griddep_wait() { SDPA_SM90_ASM("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() { SDPA_SM90_ASM("griddepcontrol.launch_dependents;" :::); }
// A block's set-up (barriers, descriptor prefetches) is done and touched no global memory: let
// the next grid be scheduled, then wait for the previous one's memory before going on.
__device__ __forceinline__ void griddep_setup_done() {
    griddep_launch_dependents();
    griddep_wait();
}
