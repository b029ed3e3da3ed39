// Writing new tokens' K and V into a paged KV cache (vLLM's reshape_and_cache_flash): token t
// goes to slot slots[t] = page * page_size + offset of both pools, contiguous
// [pages, page_size, heads, dim]. A negative slot (padding) or one past the pools is skipped,
// so no write lands outside them. E4M3 pools take code = e4m3(x / descale[head]), saturating.
// Defines: CACHE_IN_T (half_t or bf16_t, the new tokens' type), CACHE_E4M3 (1: E4M3 pools;
// 0: pools of CACHE_IN_T).
// Grid: (tokens, blocks over one token's heads x dim / vec); `vec` is 8 when every row start
// is 16-byte aligned in the inputs (the host checks), so a thread moves 16 bytes of K and of
// V per step, otherwise 1.
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


// x / d correctly rounded (as the host codec's division), from r = 1 / d correctly rounded:
// q = x * r is within an ulp, and one FMA residual step rounds it correctly (Markstein's
// theorem, round to nearest; the reason CUDA's own division ends this way). Past 2^100 the
// residual would overflow: there the code saturates to 448 either way. The sign is q's (the
// quotient's): for x = -0 the residual step alone would give +0.
__device__ __forceinline__ float div_rn(float x, float d, float r) {
    const float q = x * r;
    return fabsf(q) < 1e30f ? copysignf(fmaf(fmaf(-q, d, x), r, q), q) : q;
}

// Eight consecutive elements of one head (dim % 8 == 0): a 16-byte load, a 16- or 8-byte store.
__device__ __forceinline__ void move8(const CACHE_IN_T* src, cache_t* dst, float descale) {
    const u32x4 x = ldg16(src);
#if CACHE_E4M3
    const float r = 1.f / descale;
    const u32 w[4] = {x.x, x.y, x.z, x.w};
    u32 c[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        float a0, a1, a2, a3;
        unpack2(CACHE_IN_T{}, w[2 * j], a0, a1);
        unpack2(CACHE_IN_T{}, w[2 * j + 1], a2, a3);
        c[j] = encode_e4m3_pair(div_rn(a0, descale, r), div_rn(a1, descale, r)) |
               encode_e4m3_pair(div_rn(a2, descale, r), div_rn(a3, descale, r)) << 16;
    }
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(c[0]), "r"(c[1]) : "memory");
#else
    (void)descale;
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(x.x), "r"(x.y),
                 "r"(x.z), "r"(x.w) : "memory");
#endif
}

__device__ __forceinline__ void move1(const CACHE_IN_T* src, cache_t* dst, float descale) {
#if CACHE_E4M3
    *dst = encode_e4m3(to_float(*src) / descale);
#else
    (void)descale;
    *dst = *src;
#endif
}

extern "C" __global__ void write_paged_kv(const CACHE_IN_T* k, const CACHE_IN_T* v, cache_t* k_cache,
                                          cache_t* v_cache, const int* slots, const float* k_descale,
                                          const float* v_descale, int heads, int dim, i64 k_stride_t,
                                          i64 k_stride_h, i64 v_stride_t, i64 v_stride_h, i64 pool_slots,
                                          int vec) {
    const i64 t = blockIdx.x;
    const i64 slot = slots[t];
    if (slot < 0 || slot >= pool_slots) return;
    const i64 row = slot * heads * dim;
    const int n = heads * dim / vec;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < n; i += gridDim.y * blockDim.x) {
        const int e = i * vec, h = e / dim, d = e - h * dim;
        const CACHE_IN_T* ks = k + t * k_stride_t + h * k_stride_h + d;
        const CACHE_IN_T* vs = v + t * v_stride_t + h * v_stride_h + d;
#if CACHE_E4M3
        const float kd = k_descale[h], vd = v_descale[h];
#else
        const float kd = 1.f, vd = 1.f;
#endif
        if (vec == 8) {
            move8(ks, k_cache + row + e, kd);
            move8(vs, v_cache + row + e, vd);
        } else {
            move1(ks, k_cache + row + e, kd);
            move1(vs, v_cache + row + e, vd);
        }
    }
}
