// Writing new tokens' K and V into a paged KV cache (vLLM's reshape_and_cache_flash): token t
// goes to slot slots[t] = page * page_size + offset of both pools, contiguous
// [pages, page_size, heads, dim]. A negative slot (padding) or one past the pools is skipped,
// so no write lands outside them. E4M3 pools take code = e4m3(x / descale[head]), saturating.
// Defines: CACHE_IN_T (half_t or bf16_t, the new tokens' type), CACHE_E4M3 (1: E4M3 pools;
// 0: pools of CACHE_IN_T).
#include "prims.cuh"

#ifndef CACHE_IN_T
#define CACHE_IN_T half_t
#endif
#ifndef CACHE_E4M3
#define CACHE_E4M3 0
#endif

#if CACHE_E4M3
typedef u8 cache_t;
#else
typedef CACHE_IN_T cache_t;
#endif

// One block per token; its threads walk the token's heads x dim elements of K and V.
extern "C" __global__ void write_paged_kv(const CACHE_IN_T* k, const CACHE_IN_T* v, cache_t* k_cache,
                                          cache_t* v_cache, const int* slots, const float* k_descale,
                                          const float* v_descale, int heads, int dim, i64 k_stride_t,
                                          i64 k_stride_h, i64 v_stride_t, i64 v_stride_h, i64 pool_slots) {
    const i64 t = blockIdx.x;
    const i64 slot = slots[t];
    if (slot < 0 || slot >= pool_slots) return;
    const i64 row = slot * heads * dim;
    for (int i = threadIdx.x; i < heads * dim; i += blockDim.x) {
        const int h = i / dim, d = i - h * dim;
#if CACHE_E4M3
        // The quotient as the quantizer computes it: x / descale, one rounding.
        const float kx = to_float(k[t * k_stride_t + h * k_stride_h + d]) / k_descale[h];
        const float vx = to_float(v[t * v_stride_t + h * v_stride_h + d]) / v_descale[h];
#if __CUDA_ARCH__ >= 890
        k_cache[row + i] = u8(float2_to_e4m3x2(kx, 0.f) & 0xff);
        v_cache[row + i] = u8(float2_to_e4m3x2(vx, 0.f) & 0xff);
#else
        k_cache[row + i] = float_to_e4m3_sw(kx);
        v_cache[row + i] = float_to_e4m3_sw(vx);
#endif
#else
        k_cache[row + i] = k[t * k_stride_t + h * k_stride_h + d];
        v_cache[row + i] = v[t * v_stride_t + h * v_stride_h + d];
#endif
    }
}
