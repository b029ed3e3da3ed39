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
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
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

// ---- masked keys with non-finite V -------------------------------------------------------
// A masked score gives p = 0, but the P.V mma still multiplies it by V, and 0 * NaN or
// 0 * Inf is NaN: a NaN or Inf in the V row of a key would reach every row of the tile,
// including rows that mask that key (causal rows before it, rows that see no key). So where a
// tile masks keys for some rows and V holds a non-finite element among those keys (a cheap
// scan, only on tiles with a mask edge), the kernels run an exact P.V instead: V's fragments
// with each non-finite element replaced by 0 for P's mma, plus a second mma of the 0/1
// visibility mask against a code of the non-finite elements (+Inf 1, -Inf 32, NaN 33, else 0),
// 16 keys at a time, so a row's count of visible +Inf (low 5 bits) and -Inf (the rest) among
// 16 keys is exact in fp32; nf_fix then adds +Inf and/or -Inf to O where the counts say so.
// A row gets NaN or Inf exactly where it attends a non-finite value, as the reference does
// (a NaN counts as both signs, and +Inf with -Inf gives NaN).

// Non-finite 16-bit halves of a word: bit 15 (31) set where the low (high) half's exponent is
// all ones. Exponent + one ulp of exponent carries into bit 15 only from all ones.
template <typename T> __device__ __forceinline__ u32 nonfinite2(u32 x) {
    if constexpr (Same<T, half_t>::value) return ((x & 0x7c007c00u) + 0x04000400u) & 0x80008000u;
    else return ((x & 0x7f807f80u) + 0x00800080u) & 0x80008000u;
}
// Non-finite codes of a stored word (16-bit: two halves; E4M3: four codes, NaN = S.1111.111;
// the seeds' u8 codes are all finite): nonzero iff the word holds one.
template <typename S> __device__ __forceinline__ u32 nonfinite_word(u32 x) {
    if constexpr (Same<S, e4m3_t>::value) return ((x & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
    else if constexpr (Same<S, half_t>::value || Same<S, bf16_t>::value) return nonfinite2<S>(x);
    else return 0u;
}
// True (warp-uniform; every lane of the warp calls it) where rows [r0, r1) of a tile of
// ROW_BYTES-byte data rows, STRIDE bytes apart from `tile`, hold a non-finite S element. The
// rows' chunks are dealt to the lanes; chunk order inside a row (swizzle) does not matter.
template <typename S, int ROW_BYTES, int STRIDE>
__device__ __forceinline__ bool rows_nonfinite(u32 tile, int r0, int r1, int lane) {
    constexpr int CPR = ROW_BYTES / 16;
    if constexpr (!Same<S, e4m3_t>::value && !Same<S, half_t>::value && !Same<S, bf16_t>::value) return false;
    u32 acc = 0;
    for (int c = r0 * CPR + lane; c < r1 * CPR; c += 32) {
        const u32x4 v = lds16(tile + u32((c / CPR) * STRIDE + (c % CPR) * 16));
        acc |= nonfinite_word<S>(v.x) | nonfinite_word<S>(v.y) | nonfinite_word<S>(v.z) | nonfinite_word<S>(v.w);
    }
    return __any_sync(0xffffffffu, acc != 0);
}
// A B-fragment word of two 16-bit elements with the non-finite ones replaced by +0.
template <typename T> __device__ __forceinline__ u32 finite2(u32 x) {
    return x & ~((nonfinite2<T>(x) >> 15) * 0xffffu);
}
// The code of each half of a B-fragment word: +Inf 1, -Inf 32, NaN 33, finite 0 (in T).
template <typename T> __device__ __forceinline__ u32 nf_code2(u32 x) {
    constexpr bool H = Same<T, half_t>::value;
    constexpr u32 MANT = H ? 0x03ff03ffu : 0x007f007fu, TOP = H ? 0x04000400u : 0x00800080u;
    constexpr u32 ONE = H ? 0x3c003c00u : 0x3f803f80u, C32 = H ? 0x50005000u : 0x42004200u,
                  C33 = H ? 0x50205020u : 0x42044204u;
    const u32 nf = (nonfinite2<T>(x) >> 15) * 0xffffu;               // non-finite halves
    const u32 nan = ((((x & MANT) + MANT) & TOP) / (TOP & 0xffffu)) * 0xffffu;  // mantissa != 0
    const u32 neg = ((x >> 15) & 0x00010001u) * 0xffffu;
    return nf & ((nan & C33) | (~nan & ((neg & C32) | (~neg & ONE))));
}
// O element += the non-finite part of its 16 keys, from the mask-code mma's count c.
__device__ __forceinline__ void nf_fix(float& o, float c) {
    const int n = int(c);
    if (n & 31) o += SDPA_INF;
    if (n >> 5) o -= SDPA_INF;
}
// Compile-time values as arguments, for generic lambdas (which pass, which fragments).
template <bool B> struct Bool { static constexpr bool value = B; };
template <int N> struct Int { static constexpr int value = N; };
// 1 (in T) in each half of an A-fragment word whose flag is set: the visibility mask's
// fragments (lo: the word's low half).
template <typename T> __device__ __forceinline__ u32 ones2(bool lo, bool hi) {
    constexpr u32 ONE = Same<T, half_t>::value ? 0x3c00u : 0x3f80u;
    return (lo ? ONE : 0u) | (hi ? ONE << 16 : 0u);
}
// The exact P.V of one k16 block of keys, in two passes over V's B fragments so that each has
// the register needs of a plain P.V: `finite` runs P's mma over V's finite part, `codes` the
// visibility mask `ma` (P's A layout, 1 where the row sees the key) against the codes of the
// rest, then fixes O (see above). MMA: the m16n8k16 runner.
template <typename T, typename MMA>
__device__ __forceinline__ void mma_finite(float (&o)[4], const u32 (&pa)[4], u32 b0, u32 b1) {
    MMA::run(o, pa, finite2<T>(b0), finite2<T>(b1));
}
// Only where some lane's fragment holds a non-finite element (a warp vote): the branch also
// keeps ptxas from computing every fragment's codes ahead of the mmas, which cost up to 50
// registers.
template <typename T, typename MMA>
__device__ __forceinline__ void mma_codes(float (&o)[4], const u32 (&ma)[4], u32 b0, u32 b1) {
    if (!__any_sync(0xffffffffu, (nonfinite2<T>(b0) | nonfinite2<T>(b1)) != 0)) return;
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    MMA::run(c, ma, nf_code2<T>(b0), nf_code2<T>(b1));
#pragma unroll
    for (int e = 0; e < 4; ++e) nf_fix(o[e], c[e]);
}
