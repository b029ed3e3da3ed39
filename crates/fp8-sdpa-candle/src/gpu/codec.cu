// E4M3 with given descales, for fp8-sdpa-candle (src/gpu/codec.rs): candle 0.11.1's CUDA casts
// to and from F8E4M3 name kernels candle-kernels does not define, so these replace them, with
// fp8-sdpa's encoder (bit-exact with its host codec). Tensors are [batch, seq, heads, dim] with
// any element strides; descales are indexed b * ds_stride_b + h. Defines: IN_T (half_t,
// bf16_t or float) for the quantizer's input.
#include "prims.cuh"

#ifndef IN_T
#define IN_T half_t
#endif

// Element i of a contiguous [batch, seq, heads, dim] walk, at strides (sb, ss, sh, sd); h out.
__device__ __forceinline__ i64 strided(i64 i, int seq, int heads, int dim, i64 sb, i64 ss, i64 sh, i64 sd,
                                       i64* b, i64* h) {
    const i64 d = i % dim, hh = (i / dim) % heads, s = (i / ((i64)dim * heads)) % seq;
    *b = i / ((i64)dim * heads * seq);
    *h = hh;
    return *b * sb + s * ss + hh * sh + d * sd;
}

// codes (contiguous) = encode(x / descale), division and encode round-to-nearest-even.
extern "C" __global__ void quantize_e4m3_with(const IN_T* x, const float* ds, u8* codes, int batch, int seq,
                                              int heads, int dim, i64 sb, i64 ss, i64 sh, i64 sd, int ds_stride_b) {
    const i64 n = (i64)batch * seq * heads * dim;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        i64 b, h;
        const i64 at = strided(i, seq, heads, dim, sb, ss, sh, sd, &b, &h);
        codes[i] = encode_e4m3(to_float(x[at]) / ds[b * ds_stride_b + h]);
    }
}

// out (contiguous f32) = decode(code) * descale.
extern "C" __global__ void dequantize_e4m3(const u8* codes, const float* ds, float* out, int batch, int seq,
                                           int heads, int dim, i64 sb, i64 ss, i64 sh, i64 sd, int ds_stride_b) {
    const i64 n = (i64)batch * seq * heads * dim;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        i64 b, h;
        const i64 at = strided(i, seq, heads, dim, sb, ss, sh, sd, &b, &h);
        out[i] = e4m3_to_float_sw(codes[at]) * ds[b * ds_stride_b + h];
    }
}
