// The epilogues' rare path: exact output where a masked key's V may have reached a row.
//
// A masked key gets p = 0, but P.V still multiplies that 0 by the key's V, and 0 * NaN or
// 0 * Inf is NaN: a non-finite V in a key a row never sees (a causal key after the row, any
// key of a row that sees none, a varlen neighbour's key read past a sequence's end) would turn
// the row's output NaN. Such a value can only make an output non-finite, so the epilogues fold
// each output word they store into a check (one fma per two values, once per row tile), and
// only a thread whose own values came out non-finite does more: if a key it may have
// multiplied without seeing it holds a non-finite V in one of its columns, it recomputes those
// columns exactly from global memory, over the keys the row sees, in fp32 against the row's
// log-sum-exp, and stores them over the first ones. Otherwise the value is the row's own (a key
// it attends) and stands. Scanning V on every tile with a mask edge instead cost up to 9 %
// (docs/perf-notes.md, issue 44).
//
// The rare path takes scalars and recomputes a column pair at a time, so that its registers do
// not join the hot loop's allocation.
#pragma once
#include "types.cuh"
#include "abi.cuh"

// chk stays 0 while every value folded in is finite: x * 0 is NaN only for Inf and NaN, and a
// finite x gives +-0, which added to +0 is +0. Inline PTX, so that no compiler folds x * 0.
template <typename O> __device__ __forceinline__ void fold_nonfinite(u32& chk, u32 w);
template <> __device__ __forceinline__ void fold_nonfinite<half_t>(u32& chk, u32 w) {
    asm("fma.rn.f16x2 %0, %1, %2, %0;" : "+r"(chk) : "r"(w), "r"(0u));
}
template <> __device__ __forceinline__ void fold_nonfinite<bf16_t>(u32& chk, u32 w) {
    asm("fma.rn.bf16x2 %0, %1, %2, %0;" : "+r"(chk) : "r"(w), "r"(0u));
}

__device__ __forceinline__ bool nonfinite(float x) { return !(fabsf(x) <= 3.402823466e38f); }

// Where a row's key j lives: K at k + off(j, ks, kpage) elements of KT, V likewise. Strided:
// key rows `ks`/`vs` elements apart from key 0. Paged: key j is row j % page_size of the page
// the table names for slot j / page_size, clamped to the pools (clamp_page, as the decode
// kernel's copies).
struct KeyRows {
    const void* k;
    const void* v;
    i64 ks, vs;                   // per key (strided) or per page row (paged)
    const int* table;             // paged: the sequence's row of the block table, else null
    i64 kpage, vpage;             // paged: page strides
    int page_size, pages;
    __device__ i64 off(int j, i64 per_key, i64 per_page) const {
        if (table == nullptr) return j * per_key;
        const int slot = j / page_size;
        const i64 page = clamp_page(table[slot], pages);
        return page * per_page + (j - slot * page_size) * per_key;
    }
};

// This thread's columns of a row: NC of them, in pairs, as its epilogue stores them.
//   PAIRS: 8(c / 2) + 2t + c % 2 (mma.sync and wgmma C layouts);
//   QUADS: 16(c / 4) + 4t + c % 4 (the fragment-decoded d-tile order);
//   ONE:   column t (one element per thread: the decode merge).
enum ColLayout { PAIRS, QUADS, ONE };
template <ColLayout L> __device__ __forceinline__ int exact_col(int c, int t) {
    if (L == PAIRS) return 8 * (c / 2) + 2 * t + c % 2;
    if (L == QUADS) return 16 * (c / 4) + 4 * t + c % 4;
    return t;
}

// Hides x from the optimizer: the rare path's arithmetic on kernel parameters stays inside it
// instead of being hoisted out of a persistent tile loop into a register held across it.
__device__ __forceinline__ int opaque(int x) {
    asm volatile("mov.b32 %0, %0;" : "+r"(x));
    return x;
}

// The rare path for one row, inline and in few registers (the gates allow no stack frame, so
// no call; a column pair at a time, so nothing the hot loop's allocation has to make room
// for): if a key in [masked0, masked1) (keys the row may have multiplied without seeing them)
// holds a non-finite V in one of this thread's NC columns, each pair of columns c, c + 1 gets
// vd * sum over keys j in [seen0, seen1) of 2^(q.k_j * sl2 - lse2) * V(j)[col], the exact
// output of the keys the row sees (none: 0), through st(c, lo, hi). sl2 is a score's log2
// scale per q.k of stored codes (scale_log2 * q_descale * k_descale), lse2 the row's
// log-sum-exp in log2 units as the kernel writes it.
template <int D, int NC, ColLayout L, typename QT, typename KT, typename Store>
__device__ __forceinline__ void exact_columns(const QT* q, const KeyRows& kv, float sl2, float lse2, float vd,
                                              int seen0, int seen1, int masked0, int masked1, int t,
                                              const Store& st) {
    const KT* k = reinterpret_cast<const KT*>(kv.k);
    const KT* v = reinterpret_cast<const KT*>(kv.v);
    bool hit = false;
    for (int j = masked0; j < masked1 && !hit; ++j) {
        const KT* vj = v + kv.off(j, kv.vs, kv.vpage);
#pragma unroll 1
        for (int c = 0; c < NC; ++c) hit |= nonfinite(to_float(vj[exact_col<L>(c, t)]));
    }
    if (!hit) return;
    constexpr int W = NC < 2 ? 1 : 2;  // columns per pass
#pragma unroll 1
    for (int c = 0; c < NC; c += W) {
        float acc[W];
#pragma unroll
        for (int i = 0; i < W; ++i) acc[i] = 0.f;
#pragma unroll 1
        for (int j = seen0; j < seen1; ++j) {
            const KT* kj = k + kv.off(j, kv.ks, kv.kpage);
            float s = 0.f;
#pragma unroll 2
            for (int d = 0; d < D; ++d) s = fmaf(to_float(q[d]), to_float(kj[d]), s);
            const float pj = exp2f(fmaf(s, sl2, -lse2));
            const KT* vj = v + kv.off(j, kv.vs, kv.vpage);
#pragma unroll
            for (int i = 0; i < W; ++i) acc[i] = fmaf(pj, to_float(vj[exact_col<L>(c + i, t)]), acc[i]);
        }
        st(c, acc[0] * vd, acc[W - 1] * vd);
    }
}

// exact_columns for a row that sees keys [0, seen), whose 16-bit output words this thread
// stores with st(c, word) for even c (columns c, c + 1).
template <int D, ColLayout L, typename QT, typename KT, typename OutT, typename Store>
__device__ __forceinline__ void exact_row(const QT* q, const KeyRows& kv, float sl2, float lse2, float vd, int seen,
                                          int masked0, int masked1, int t, const Store& st) {
    exact_columns<D, D / 4, L, QT, KT>(q, kv, sl2, lse2, vd, 0, seen, masked0, masked1, t,
                                       [&](int c, float lo, float hi) { st(c, pack2<OutT>(lo, hi)); });
}
