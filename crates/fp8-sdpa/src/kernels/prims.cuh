// Device primitives shared by every kernel: element types and conversions (inline PTX, no
// CUDA toolkit headers), warp reductions. Kernels build on these; PTX facts sit beside
// each wrapper.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

// ---- element types: plain bit containers, so no toolkit header is needed ----------------
struct half_t { u16 x; };
struct bf16_t { u16 x; };
struct e4m3_t { u8 x; };   // OCP E4M3 "fn": bias 7, no infinities, NaN = S.1111.111, max 448
struct u8code_t { u8 x; }; // the seeds' simulated FP8: value = (u - 128) * descale

#define SDPA_INF __int_as_float(0x7f800000)

// ---- scalar conversions ------------------------------------------------------------------
__device__ __forceinline__ float to_float(half_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
    return f;
}
__device__ __forceinline__ float to_float(bf16_t h) { return __uint_as_float(u32(h.x) << 16); }
__device__ __forceinline__ float to_float(float f) { return f; }
__device__ __forceinline__ float to_float(u8code_t c) { return float(int(c.x) - 128); }

// E4M3 decode in software: exact on every arch. Subnormals are m * 2^-9.
__device__ __forceinline__ float e4m3_to_float_sw(u8 c) {
    u32 e = (c >> 3) & 0xF, m = c & 7;
    float mag;
    if (e == 15 && m == 7) mag = __int_as_float(0x7fc00000);              // NaN
    else if (e == 0) mag = float(m) * 0.001953125f;                       // 2^-9
    else mag = __uint_as_float(((e + 120) << 23) | (m << 20));            // (1+m/8)·2^(e-7)
    return (c & 0x80) ? -mag : mag;
}
__device__ __forceinline__ float to_float(e4m3_t c) { return e4m3_to_float_sw(c.x); }

// E4M3 encode in software: round to nearest even, saturate to ±448, NaN -> 0x7F whatever its
// sign (the hardware conversion drops a NaN's sign; measured on an H100).
// Matches `cvt.rn.satfinite.e4m3x2.f32` (sm_89+), which `sdpa-lab verify` checks exhaustively.
__device__ __forceinline__ u8 float_to_e4m3_sw(float x) {
    u32 bits = __float_as_uint(x);
    u8 sign = (bits >> 24) & 0x80;
    u32 abits = bits & 0x7fffffff;
    if (abits > 0x7f800000) return 0x7F;                                 // NaN
    float a = __uint_as_float(abits);
    if (a < 0.015625f) {                                                 // below 2^-6: step 2^-9
        int q = __float2int_rn(a * 512.0f);                              // exact scaling, RNE
        return sign | u8(q);
    }
    int ex = int(abits >> 23) - 127;
    u32 mant = abits & 0x7fffff, q = mant >> 20, rest = mant & 0xfffff;
    if (rest > 0x80000 || (rest == 0x80000 && (q & 1))) q++;
    if (q == 8) { q = 0; ex++; }
    int E = ex + 7;
    if (E > 15 || (E == 15 && q == 7)) return sign | 0x7E;               // satfinite: 448
    return sign | u8((E << 3) | q);
}

#if __CUDA_ARCH__ >= 890
// Hardware E4M3 pairs (sm_89+). The first source operand lands in the high byte.
__device__ __forceinline__ u16 float2_to_e4m3x2(float lo, float hi) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ u16 half2_to_e4m3x2(u32 h2) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(h2));
    return r;
}
__device__ __forceinline__ u32 e4m3x2_to_half2(u16 c2) {
    u32 r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(c2));
    return r;
}
#endif

__device__ __forceinline__ half_t half_from_float(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
    return h;
}
__device__ __forceinline__ bf16_t bf16_from_float(float f) {
    bf16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
    return h;
}
template <typename T> __device__ __forceinline__ T from_float(float f);
template <> __device__ __forceinline__ half_t from_float<half_t>(float f) { return half_from_float(f); }
template <> __device__ __forceinline__ bf16_t from_float<bf16_t>(float f) { return bf16_from_float(f); }
template <> __device__ __forceinline__ float from_float<float>(float f) { return f; }

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
