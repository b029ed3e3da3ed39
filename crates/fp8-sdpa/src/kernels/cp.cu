// Context parallelism's merge (cp/merge.rs is the CPU form): fold one partial attention
// result into a rank's fp32 accumulators by log-sum-exp, and write the accumulated output.
// One warp per (batch, token, head) row; lanes over the head dim.
//   acc_o   fp32 [batch, chunk, heads, D] (BSHD rows of the rank's query chunk)
//   acc_lse fp32 [batch, heads, chunk], natural log, -inf before the first partial
//   part_o  OutT rows with element strides (sb, ss, sh) (the attention call's O view)
//   part_lse fp32 [batch, heads, chunk] (the call's LSE)
#include "types.cuh"

typedef CP_OUT_T OutT;

__device__ __forceinline__ float to_f(OutT x) { return to_float(x); }

extern "C" __global__ void __launch_bounds__(128)
cp_merge(float* acc_o, float* acc_lse, const OutT* part_o, const float* part_lse, int batch, int chunk,
         int heads, int dim, long long sb, long long ss, long long sh) {
    const long long row = (long long)blockIdx.x * 4 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)batch * chunk * heads) return;
    const int h = int(row % heads), t = int(row / heads % chunk), b = int(row / heads / chunk);
    const long long li = ((long long)b * heads + h) * chunk + t;
    const float a = acc_lse[li], p = part_lse[li];
    const float m = fmaxf(a, p);
    if (m == -SDPA_INF) return;  // neither side saw a key
    const float wa = __expf(a - m), wp = __expf(p - m), w = wa + wp;
    float* o = acc_o + row * dim;
    const OutT* q = part_o + b * sb + t * ss + h * sh;
    for (int d = lane; d < dim; d += 32) o[d] = (o[d] * wa + to_f(q[d]) * wp) / w;
    if (lane == 0) acc_lse[li] = m + __logf(w);
}

// Writes acc_o as OutT into rows with element strides (sb, ss, sh).
extern "C" __global__ void __launch_bounds__(128)
cp_finish(const float* acc_o, OutT* out, int batch, int chunk, int heads, int dim, long long sb, long long ss,
          long long sh) {
    const long long row = (long long)blockIdx.x * 4 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)batch * chunk * heads) return;
    const int h = int(row % heads), t = int(row / heads % chunk), b = int(row / heads / chunk);
    OutT* dst = out + b * sb + t * ss + h * sh;
    for (int d = lane; d < dim; d += 32) dst[d] = from_float<OutT>(acc_o[row * dim + d]);
}
