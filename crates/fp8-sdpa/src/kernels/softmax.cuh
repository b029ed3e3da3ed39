// Softmax building blocks shared by the families: warp reductions and the base-2 exponent.
#pragma once
#include "types.cuh"

// ---- warp reductions ---------------------------------------------------------------------
// fmaxf drops a NaN operand, so a max alone would hide NaN inputs; kernels carry NaN through
// the sums instead (exp2 of NaN is NaN), which is what makes a NaN row give a NaN output.
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- exponent ----------------------------------------------------------------------------
// ex2.approx.ftz: one MUFU op, relative error ~2^-22, flushes subnormals; exp2f: accurate.
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

