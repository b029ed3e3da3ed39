// Softmax building blocks shared by the families: warp and quad reductions, the base-2
// exponent, and the online softmax (FlashAttention-2, base 2) in its two forms: with a
// threshold rescale (portable family: online_softmax_row, online_softmax_frags) and exact
// (online_softmax_row_exact: the form of the decode family and Hopper's softmax_step, with
// the same SASS when they call it).
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
// Over the 4 lanes of a quad: one row of an mma.sync C fragment (lanes 4g .. 4g + 3).
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- exponent ----------------------------------------------------------------------------
// ex2.approx.ftz: one MUFU op, relative error ~2^-22, flushes subnormals; exp2f: accurate.
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The exponent a kernel's FAST_EXP knob picks: ex2.approx.ftz, or the accurate exp2f.
template <bool FAST> __device__ __forceinline__ float exp2_sel(float x) {
    if constexpr (FAST) return exp2_fast(x);
    else return exp2f(x);
}

// ---- online softmax (FlashAttention-2), base 2, threshold rescale ----------------------------
// One row of a score fragment in the mma.sync C layout: this lane holds the row's elements
// {2h, 2h + 1} of each n8 tile, and the 3 other lanes of its quad the rest of the row. With
// p = 2^(s·sl - m), the running max m moves only when the tile's max exceeds it by more than
// `tau` (log2 units; as in FlashAttention-4), so p <= 2^tau (exact range for 16-bit P, fp32 O
// and l) and O is rescaled a handful of times per row instead of every tile; O, l and the LSE
// use the same m, so the result is unchanged. Overwrites s with p, updates m and l (this lane's
// partial sum), sets `moved` when m moved, and returns the factor for O's row (1 if it did
// not). A row that has seen no key keeps m = -inf and l = 0. `scale()` gives the row's log2
// scale, read after the row max (where a kernel keeps it per row, that is when its load is
// issued: ptxas schedules the softmax around it).
template <bool FAST, int N, typename Scale>
__device__ __forceinline__ float online_softmax_row(float (&s)[N][4], int h, const Scale& scale, float& m, float& l,
                                                    float tau, bool& moved) {
    float mx = -SDPA_INF;
#pragma unroll
    for (int nt = 0; nt < N; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
    mx = quad_max(mx);
    const float sl = scale();
    const float cand = mx * sl;
    const float m_old = m;
    const bool up = cand > m_old + tau;  // false while the row sees no key
    const float m_new = up ? cand : m_old;
    const float m_use = m_new == -SDPA_INF ? 0.f : m_new;  // row still sees no key
    const float corr = up ? exp2_sel<FAST>(m_old - m_use) : 1.f;
    moved = moved || up;
    m = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < N; ++nt)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float pe = exp2_sel<FAST>(fmaf(s[nt][e], sl, -m_use));
            s[nt][e] = pe;
            sum += pe;
        }
    l = l * corr + sum;
    return corr;
}

// The online softmax of one key step over a warp's m16 fragments MI0 .. R - 1 (score tiles s,
// O accumulators o with D / 8 d-tiles, running m and l per fragment row h = 0, 1 of this lane):
// online_softmax_row per row, then O rescaled by each row's factor. SKIP: the warp skips the
// O multiply when none of its rows moved (a warp vote and a branch, which split the softmax and
// P·V into two basic blocks: worth it only where the multiply is large against the step's
// mma). `scale(mi, h)` gives the row's log2 scale.
template <bool FAST, bool SKIP, int MI0, int R, int N, int DT, typename Scale>
__device__ __forceinline__ void online_softmax_frags(float (&s)[R][N][4], float (&o)[R][DT][4], float (&m)[R][2],
                                                     float (&l)[R][2], const Scale& scale, float tau) {
    float corr[R][2];
    bool moved = false;
#pragma unroll
    for (int mi = MI0; mi < R; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const auto row_scale = [&]() { return scale(mi, h); };
            corr[mi][h] = online_softmax_row<FAST>(s[mi], h, row_scale, m[mi][h], l[mi][h], tau, moved);
        }
    if (!SKIP || __any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mi = MI0; mi < R; ++mi)
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[mi][dt][e] *= corr[mi][e >> 1];
    }
}

// The exact form (no threshold): m moves to every step's row max, so O is rescaled every
// step; m is kept in unscaled score units. P = 2^(s·sl2 - m·sl2 + shift), at most 2^shift.
// `at(nt, e)` is element e (0, 1) of n-tile nt of this lane's row: the mma.sync C layout
// (decode family) or the wgmma one (Hopper). `masked(nt, e)`: the element is set to -inf
// inside the max loop (where ptxas schedules the mask's compares). PAIRWISE: the max over each
// n-tile's pair first, then the running max (Hopper's order), else element by element
// (decode's); ptxas keeps each order's schedule. Overwrites the row with P, updates m and l
// (this lane's partial sum) and returns O's factor. A row that has seen no key keeps
// m = -inf.
struct NoMask {
    __device__ __forceinline__ bool operator()(int, int) const { return false; }
};
template <int N, bool PAIRWISE, typename At, typename Masked = NoMask>
__device__ __forceinline__ float online_softmax_row_exact(const At& at, float& m, float& l, float sl2, float shift,
                                                          const Masked& masked = Masked()) {
    float mx = m;
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
        if constexpr (PAIRWISE) {
            float &x0 = at(nt, 0), &x1 = at(nt, 1);
            if (masked(nt, 0)) x0 = -SDPA_INF;
            if (masked(nt, 1)) x1 = -SDPA_INF;
            mx = fmaxf(mx, fmaxf(x0, x1));
        } else {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = at(nt, e);
                if (masked(nt, e)) x = -SDPA_INF;
                mx = fmaxf(mx, x);
            }
        }
    }
    mx = quad_max(mx);
    // No visible key so far: subtract 0, so exp2 gives 0.
    const float ms = mx == -SDPA_INF ? 0.f : mx * sl2;
    const float alpha = exp2_fast(m * sl2 - ms);
    const float shifted = ms - shift;
    m = mx;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < N; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float& x = at(nt, e);
            x = exp2_fast(fmaf(x, sl2, -shifted));
            sum += x;
        }
    l = l * alpha + sum;
    return alpha;
}
