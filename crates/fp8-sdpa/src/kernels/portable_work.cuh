// The portable family's work tiles (portable.cu): coordinates, variable-length views, scales,
// and the causal and stream orders.
#pragma once
#include "portable_modes.cuh"

// ==== Work tiles: coordinates, variable-length views, scales, the stream's order =================
// Problem coordinates of one work tile.
struct Work {
    int m0;        // first query row
    int hq, hkv, b;
    int n_tiles;   // KV tiles visited (causal: only those with a visible key)
    int diag0;     // first KV tile that needs masking (ragged tail or causal diagonal)
    const u8* k;   // K at (b, hkv, key 0), bytes
    const u8* v;
    long long ks, vs;  // key strides, bytes
};

__device__ __forceinline__ Work make_work(const SdpaParams& p, int mb, int hq, int b) {
    Work w;
    w.m0 = mb * BM;
    w.hq = hq;
    w.b = b;
    w.hkv = hq / (p.heads_q / p.heads_kv);
    int kv_end = p.seq_kv;
    const int off = p.seq_kv - p.seq_q;
    // Causal: the block's last real row, min(m0 + BM, seq_q) - 1, sees keys up to itself + off.
    if constexpr (CAUSAL) kv_end = min(w.m0 + BM, p.seq_q) + off;
    w.n_tiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    // Tile j is fully visible to every row of the block iff its last key is < seq_kv and
    // (causal) <= m0 + off, the first row's limit.
    int full = p.seq_kv / BN;
    if constexpr (CAUSAL) full = min(full, max(0, (w.m0 + off + 1) / BN));
    w.diag0 = full;
    w.k = (const u8*)p.k + ((long long)b * p.k_stride_b + (long long)w.hkv * p.k_stride_h) * sizeof(kv_t);
    w.v = (const u8*)p.v + ((long long)b * p.v_stride_b + (long long)w.hkv * p.v_stride_h) * sizeof(kv_t);
    w.ks = p.k_stride_s * (long long)sizeof(kv_t);
    w.vs = p.v_stride_s * (long long)sizeof(kv_t);
    return w;
}

// Variable-length batches: sequence b as a dense problem of its own. The bases move to its
// first token (the host passes batch strides of 0) and seq_q, seq_kv become its lengths, so
// every bounds and mask rule (causal bottom-right included) holds per sequence unchanged. The
// offsets are clamped to the packed tensors: offsets the host did not check cannot reach
// outside them. Returns false for an m-block past the sequence's end (the grid covers the
// longest).
__device__ __forceinline__ bool varlen_view(SdpaParams& p, int b, int mb) {
    int q0, k0;
    seq_span(p.cu_seqlens_q, b, p.total_q, q0, p.seq_q);
    seq_span(p.cu_seqlens_k, b, p.total_k, k0, p.seq_kv);
    p.q = (const q_t*)p.q + q0 * p.q_stride_s;
    p.o = (o_t*)p.o + q0 * p.o_stride_s;
    p.k = (const kv_t*)p.k + k0 * p.k_stride_s;
    p.v = (const kv_t*)p.v + k0 * p.v_stride_s;
    if (p.lse) p.lse += q0;  // [heads_q, total_q] (write_out)
    return mb * BM < p.seq_q;
}

// A work tile's scales: the softmax's log2 scale with q_descale · k_descale folded in, and
// v_descale for the output (1 where a tensor has no descale).
struct Scales {
    float sl2, v_ds;
    __device__ __forceinline__ Scales(const SdpaParams& p, const Work& w) {
        const float q_ds = p.q_descale ? p.q_descale[w.b * p.q_descale_stride_b + w.hq] : 1.f;
        const float k_ds = p.k_descale ? p.k_descale[w.b * p.kv_descale_stride_b + w.hkv] : 1.f;
        v_ds = p.v_descale ? p.v_descale[w.b * p.kv_descale_stride_b + w.hkv] : 1.f;
        sl2 = p.scale_log2 * q_ds * k_ds;
    }
};

// Work tile t in causal order (geometry.rs): m-blocks vary slowest, heaviest first, so that
// every head's heaviest block is dispatched before any lighter one (longest processing time
// first: the tail holds the lightest tiles). Non-persistent causal blocks follow this order
// within sections of batches whose K/V fit in L2, through their 3-D grid (run_blocks); measured
// on the H100 (perf-notes: the order of causal blocks) against m-blocks fastest per head:
// causal S 1k-4k at D128 and D256 +7 to +13 %. The stream takes it over the whole batch: it
// makes every block's run of work tiles get lighter at the same pace (with m-blocks fastest and
// a grid that is a multiple of m_blocks, a block would get the same m-block every time).
// Sections did not help the stream (equal at D64 S 512-2k, 9 % slower at S 4k, where each
// block's static share of every section starts on heavy tiles).
__device__ __forceinline__ Work causal_work_at(const SdpaParams& p, int t, int m_blocks) {
    const int hb = p.heads_q * p.batch, r = t % hb;
    return make_work(p, m_blocks - 1 - t / hb, r % p.heads_q, r / p.heads_q);
}

// Work tile t of the stream: under causal in the causal order, else m-blocks vary fastest (the
// blocks of one head run together and share its K/V in L2).
__device__ __forceinline__ Work work_at(const SdpaParams& p, int t, int m_blocks) {
    if constexpr (CAUSAL) {
        return causal_work_at(p, t, m_blocks);
    } else {
        return make_work(p, t % m_blocks, (t / m_blocks) % p.heads_q, t / (m_blocks * p.heads_q));
    }
}
