// The Hopper kernels' entry point: sets up the barriers and splits the block into the
// producer warpgroup and the consumer warpgroups. Included last by each kernel file, which
// defines:
//   init_rings(smem): the mbarriers of its rings besides Q's (one thread);
//   produce(p, maps, smem): the producer warpgroup's work (all of its threads enter);
//   Gemm: the consumers' GEMM policy (hopper_consumer.cuh);
//   QRing, PRODUCER_REGS, CONSUMER_REGS (setmaxnreg's counts for the two roles).
#pragma once
#include "hopper_consumer.cuh"

namespace hopper {
// ---- the block: barriers, then the roles ------------------------------------------------
__device__ __forceinline__ void block(const SdpaParams& p, const HopperMaps& maps, u8* smem_raw) {
    const u32 smem = (smem_u32(smem_raw) + 1023) & ~1023u;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        tma_prefetch(&maps.q);
        tma_prefetch(&maps.k);
        tma_prefetch(&maps.v);
        if (STAGE_O) tma_prefetch(&maps.o);
        const QRing q_ring{smem};
        q_ring.init_full(0, 1);               // the TMA's bytes
        q_ring.init_empty(0, 4 * CONSUMERS);  // every consumer warp, after its last S
        init_rings(smem);
    }
    __syncthreads();
    griddep_setup_done();
    if (wg == 0) {
        setmaxnreg_dec<PRODUCER_REGS>();
        produce(p, maps, smem);
    } else {
        setmaxnreg_inc<CONSUMER_REGS>();
        consume<Gemm>(p, maps, smem, wg - 1);
    }
}
}  // namespace hopper

extern "C" __global__ void __launch_bounds__(hopper::THREADS, 1)
sdpa_hopper(const __grid_constant__ SdpaParams p, const __grid_constant__ hopper::HopperMaps maps) {
    extern __shared__ __align__(1024) u8 smem_raw[];
    hopper::block(p, maps, smem_raw);
}
