// FP8 (E4M3) kernels outside attention: the codec entry points that `verify` checks
// exhaustively against the Rust codec, and the quantizer (fp16/bf16 -> E4M3 with a per
// (batch, head) amax scale). Defines: QUANT_IN_T (half_t or bf16_t) for the quantizer.
#include "prims.cuh"

#ifndef QUANT_IN_T
#define QUANT_IN_T half_t
#endif

// ---- codec entry points (one element per thread) ------------------------------------------
extern "C" __global__ void e4m3_encode_f16_sw(const u16* in, u8* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float_to_e4m3_sw(to_float(half_t{in[i]}));
}
extern "C" __global__ void e4m3_encode_f32_sw(const float* in, u8* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float_to_e4m3_sw(in[i]);
}
extern "C" __global__ void e4m3_decode_sw(const u8* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = e4m3_to_float_sw(in[i]);
}
#if __CUDA_ARCH__ >= 890
// Hardware conversions: the ground truth the Rust codec must equal bit for bit.
extern "C" __global__ void e4m3_encode_f16_hw(const u16* in, u8* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = u8(half2_to_e4m3x2(u32(in[i])) & 0xff);  // low half -> low byte
}
extern "C" __global__ void e4m3_encode_f32_hw(const float* in, u8* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = u8(float2_to_e4m3x2(in[i], 0.f) & 0xff);
}
extern "C" __global__ void e4m3_decode_hw(const u8* in, u16* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = u16(e4m3x2_to_half2(u16(in[i])) & 0xffff);  // f16 bits of the low code
}
#endif

// ---- quantizer ---------------------------------------------------------------------------
// Pass 1: amax per (batch, head) over seq x dim. |x| of a finite float orders like its bits,
// so an integer atomicMax on the bits is a float max. Only finite values count: NaN becomes a
// NaN code and inf saturates to ±448 in pass 2, neither poisoning its head's scale.
extern "C" __global__ void amax_bshd(const QUANT_IN_T* x, u32* amax_bits, int batch, int seq, int heads, int dim,
                                     i64 stride_b, i64 stride_s, i64 stride_h) {
    const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
    float m = 0.f;
    const i64 n = (i64)seq * dim;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 s = i / dim, d = i % dim;
        const float a = fabsf(to_float(x[b * stride_b + s * stride_s + h * stride_h + d]));
        if (a <= 3.4028234e38f) m = fmaxf(m, a);  // false for NaN and inf
    }
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) atomicMax(&amax_bits[bh], __float_as_uint(m));
}

// Pass 2: descale = amax / 448 (1 where that is 0, i.e. amax 0 or tiny), code = encode(x / descale), codes written
// contiguous BSHD. Division and encode are round-to-nearest-even, matching the Rust codec.
extern "C" __global__ void quantize_e4m3_bshd(const QUANT_IN_T* x, const u32* amax_bits, u8* codes, float* descales,
                                              int batch, int seq, int heads, int dim,
                                              i64 stride_b, i64 stride_s, i64 stride_h) {
    const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
    const float amax = __uint_as_float(amax_bits[bh]);
    float ds = amax / 448.0f;
    if (!(ds > 0.f)) ds = 1.0f;
    if (blockIdx.x == 0 && threadIdx.x == 0) descales[bh] = ds;
    const i64 n = (i64)seq * dim;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 s = i / dim, d = i % dim;
        const float v = to_float(x[b * stride_b + s * stride_s + h * stride_h + d]);
        codes[(((i64)b * seq + s) * heads + h) * dim + d] = encode_e4m3(v / ds);
    }
}
