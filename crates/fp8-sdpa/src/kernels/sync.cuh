// Synchronization primitives: named barriers (sm_70+), mbarriers (sm_80+), thread-block
// clusters and distributed shared memory (sm_90).
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

// ---- thread-block clusters (sm_90) ------------------------------------------------------------
// A cluster's CTAs run at the same time on one GPC and can address each other's shared memory
// (distributed shared memory). mapa.shared::cluster maps a shared::cta address of this CTA to
// the same offset in CTA `rank`'s window (offsets are preserved); st.shared::cluster,
// st.async and mbarrier.arrive ... .shared::cluster then write or arrive there. A remote access
// is valid only once the target CTA has started (a cluster barrier after launch says so) and
// until it exits (a cluster barrier before exit). barrier.cluster.arrive.release /
// wait.acquire order every thread's earlier memory accesses, remote ones included, before
// everyone's later ones (ptxas: MEMBAR.ALL.GPU before the arrive, CCTL.IVALL after the wait,
// so only outside loops); .relaxed arrive orders nothing (a "has started" signal).
// fence.mbarrier_init.release.cluster makes an mbarrier.init visible to the next cluster
// barrier. In loops, data goes by st.async, whose bytes complete on the receiver's mbarrier,
// and signals by remote arrivals with the default CTA-scope semantics. The rank and mapa are
// constants of the CTA, so their asm is not volatile (ptxas may hoist them).
// Below sm_90 they compile to nothing (rank 0): only sm_90a registers the kernels that use them.
#if __CUDA_ARCH__ >= 900
#define SDPA_SM90_ASM(...) asm volatile(__VA_ARGS__)
#define SDPA_SM90_ASM_PURE(...) asm(__VA_ARGS__)
#else
#define SDPA_SM90_ASM(...) ((void)0)
#define SDPA_SM90_ASM_PURE(...) ((void)0)
#endif
__device__ __forceinline__ u32 cluster_rank() {
    u32 r = 0;
    SDPA_SM90_ASM_PURE("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_map(u32 addr, u32 rank) {
    u32 r = 0;
    SDPA_SM90_ASM_PURE("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void sts16_cluster(u32 addr, u32x4 v) {
    SDPA_SM90_ASM("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
// A remote arrive with the default semantics (release at CTA scope), as CUTLASS's cluster
// barriers do. With .release.cluster ptxas puts MEMBAR.ALL.GPU before it, and with
// .acquire.cluster on the wait a CCTL.IVALL (L1 invalidation) after it, each once per tile:
// the first cluster-pair kernels ran 30 % slower than the 256-row tile with them (run 71).
__device__ __forceinline__ void mbar_arrive_remote(u32 remote_bar) {
    SDPA_SM90_ASM("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(remote_bar) : "memory");
}
// One of the barrier's arrivals that also raises the phase's expected transaction bytes by
// `bytes` (st.async's complete_tx lowers them; the phase completes at zero arrivals left and
// zero bytes pending, and the byte count may go negative meanwhile).
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    SDPA_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
// st.async: 16 bytes to the shared memory of a cluster peer (addr from mapa), completing 16
// transaction bytes on the peer's mbarrier `remote_bar` once written. The data is visible to
// whoever waits on that barrier's phase; no fence on the sender's side.
__device__ __forceinline__ void sts16_async(u32 addr, u32x4 v, u32 remote_bar) {
    SDPA_SM90_ASM("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                  :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar) : "memory");
}
__device__ __forceinline__ void mbar_init_fence_cluster() {
    SDPA_SM90_ASM("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    SDPA_SM90_ASM("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    SDPA_SM90_ASM("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
    SDPA_SM90_ASM("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

