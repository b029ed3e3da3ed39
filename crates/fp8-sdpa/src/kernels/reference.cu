// Naive fp32 attention, one warp per query row: the GPU reference for shapes too large for
// the CPU reference. Correct by construction, not fast: each lane scores one key of a
// 32-key chunk, the warp keeps an online softmax, and each lane accumulates D/32 outputs.
#include "prims.cuh"
#include "abi.cuh"

#ifndef SDPA_HEAD_DIM
#error "SDPA_HEAD_DIM must be defined"
#endif
static_assert(SDPA_HEAD_DIM % 32 == 0, "head dim must be a multiple of 32");

typedef SDPA_Q_T q_t;
typedef SDPA_KV_T kv_t;
typedef SDPA_O_T o_t;

extern "C" __global__ void __launch_bounds__(SDPA_WARPS * 32, SDPA_MIN_BLOCKS)
sdpa_reference(const SdpaParams p) {
    constexpr int D = SDPA_HEAD_DIM, PER_LANE = D / 32;
    __shared__ float q_row[SDPA_WARPS][D];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * SDPA_WARPS + warp;
    const int hq = blockIdx.y, b = blockIdx.z;
    if (row >= p.seq_q) return;  // whole warps leave; no block barrier follows
    const int hkv = hq / (p.heads_q / p.heads_kv);

    const q_t* q = (const q_t*)p.q + b * p.q_stride_b + row * p.q_stride_s + hq * p.q_stride_h;
    const kv_t* k = (const kv_t*)p.k + b * p.k_stride_b + hkv * p.k_stride_h;
    const kv_t* v = (const kv_t*)p.v + b * p.v_stride_b + hkv * p.v_stride_h;
    const float q_ds = p.q_descale ? p.q_descale[b * p.q_descale_stride_b + hq] : 1.f;
    const float k_ds = p.k_descale ? p.k_descale[b * p.kv_descale_stride_b + hkv] : 1.f;
    const float v_ds = p.v_descale ? p.v_descale[b * p.kv_descale_stride_b + hkv] : 1.f;

    // Scores in base 2: s = q·k · scale · log2(e), all descales folded into q.
    for (int d = lane; d < D; d += 32) q_row[warp][d] = to_float(q[d]) * q_ds * k_ds * p.scale_log2;
    __syncwarp();

    int kv_end = p.seq_kv;
#if SDPA_CAUSAL
    kv_end = min(p.seq_kv, row + (p.seq_kv - p.seq_q) + 1);
#endif
    float m = -SDPA_INF, l = 0.f, acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) acc[i] = 0.f;

    for (int j0 = 0; j0 < kv_end; j0 += 32) {
        const int j = j0 + lane;
        float s = -SDPA_INF;
        if (j < kv_end) {
            const kv_t* kr = k + j * p.k_stride_s;
            s = 0.f;
            for (int d = 0; d < D; ++d) s += q_row[warp][d] * to_float(kr[d]);
        }
        const float m_new = fmaxf(m, warp_max(s));  // finite: lane 0's key is always valid
        const float pj = (j < kv_end) ? exp2f(s - m_new) : 0.f;
        const float corr = exp2f(m - m_new);
        l = l * corr + warp_sum(pj);
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) acc[i] *= corr;
        const int n = min(32, kv_end - j0);
        for (int t = 0; t < n; ++t) {
            const float pt = __shfl_sync(0xffffffffu, pj, t);
            const kv_t* vr = v + (j0 + t) * p.v_stride_s;
#pragma unroll
            for (int i = 0; i < PER_LANE; ++i) acc[i] += pt * to_float(vr[lane + 32 * i]);
        }
        m = m_new;
    }

    o_t* o = (o_t*)p.o + b * p.o_stride_b + row * p.o_stride_s + hq * p.o_stride_h;
    const bool empty = kv_end <= 0;
    const float inv_l = empty ? 0.f : v_ds / l;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) o[lane + 32 * i] = from_float<o_t>(acc[i] * inv_l);
    if (p.lse && lane == 0) {
        // natural-log LSE of the scaled scores: (m + log2 l) · ln 2
        p.lse[((i64)b * p.heads_q + hq) * p.seq_q + row] = empty ? -SDPA_INF : (m + log2f(l)) * 0.6931471805599453f;
    }
}
