// The decode kernel's steps, in the order sdpa_decode runs them: the CTA's work tile, its
// lanes' rows and Q fragments, the per-warp cp.async ring over K/V (contiguous or paged), one
// key step's mask and online softmax, and the epilogue that merges the warps and writes O and
// the LSE (or the split's partials). decode.cu defines, before including: T, KvT, OutT, the
// dcfg constants and DecodeParams.
#pragma once
#include "types.cuh"
#include "softmax.cuh"
#include "mma_sm80.cuh"
#include "abi.cuh"
#include "exact.cuh"

// Sequence b's keys in a paged cache: seqlens_k[b] clamped to [0, max_pages * page_size], the
// table's capacity (below 2^31: validated), so that no key indexes past the sequence's row.
__device__ __forceinline__ int paged_keys(const DecodeParams& d, int b) {
    return int(min(max(i64(d.seqlens_k[b]), i64(0)), i64(d.max_pages) * d.page_size));
}

// Issues one warp step's K and V copies (keys [key0, key0 + KW), zero-filled past `end`).
// Paged K/V: the step's first key sits in table slot `slot0` at row `r0` of its page; each
// row's slot follows by subtraction, so the runtime division happens once per step rather
// than twice per 16-byte chunk (with a division per chunk, paged rows took 1.08-1.42x the
// contiguous time; perf-notes: Decode family, paged loads).
__device__ __forceinline__ void load_step(const SdpaParams& p, const DecodeParams& d, u32 dst, int b, int hkv,
                                          int key0, int end, int lane) {
    constexpr int CPR = RAW_ROW / 16;  // 16-byte chunks per row
    const bool paged = d.block_table != nullptr;
    const int slot0 = paged ? key0 / d.page_size : 0, r0 = paged ? key0 - slot0 * d.page_size : 0;
#pragma unroll
    for (int c = lane; c < KW * CPR; c += 32) {
        const int row = c / CPR, chunk = c % CPR, key = key0 + row;
        const bool ok = key < end;
        const u32 at = KV8 ? Tile8b::off(row, chunk) : Tile::off(row, chunk);
        i64 k_off, v_off;  // elements: the row's batch (or page) and sequence offsets
        if (paged) {
            int slot = 0, r = 0;  // a row past `end` reads nothing; slot 0 keeps its address in range
            if (ok) {
                slot = slot0;
                r = r0 + row;
                while (r >= d.page_size) r -= d.page_size, ++slot;
            }
            // slot < max_pages (keys < the clamped length); the entry clamped to the pools.
            const i64 page = clamp_page(d.block_table[i64(b) * d.max_pages + slot], d.pages);
            k_off = page * p.k_stride_b + r * p.k_stride_s;
            v_off = page * p.v_stride_b + r * p.v_stride_s;
        } else {
            const int kk = ok ? key : 0;
            k_off = b * p.k_stride_b + kk * p.k_stride_s;
            v_off = b * p.v_stride_b + kk * p.v_stride_s;
        }
        const KvT* k = reinterpret_cast<const KvT*>(p.k) + k_off + hkv * p.k_stride_h;
        const KvT* v = reinterpret_cast<const KvT*>(p.v) + v_off + hkv * p.v_stride_h;
        cp_async16(dst + at, reinterpret_cast<const u8*>(k) + chunk * 16, ok);
        cp_async16(dst + RAW_TILE + at, reinterpret_cast<const u8*>(v) + chunk * 16, ok);
    }
}

#if SDPA_VARLEN
// Sequence b of a variable-length batch as a dense problem of its own: Q and O start at its
// first token, contiguous K and V at its first key, and seq_q, seq_kv are its own lengths.
// Every offset is clamped to the packed tensors and a paged length to the table's capacity,
// so bad offsets never address outside them. Returns the sequence's first token (the LSE's
// and the partials' rows are [heads_q, total_q]).
__device__ __forceinline__ int seq_view(SdpaParams& p, const DecodeParams& d, int b) {
    int q0, k0;
    seq_span(p.cu_seqlens_q, b, p.total_q, q0, p.seq_q);
    p.q = reinterpret_cast<const T*>(p.q) + i64(q0) * p.q_stride_s;
    p.o = reinterpret_cast<OutT*>(p.o) + i64(q0) * p.o_stride_s;
    if (d.block_table) {
        p.seq_kv = paged_keys(d, b);
    } else {
        seq_span(p.cu_seqlens_k, b, p.total_k, k0, p.seq_kv);
        p.k = reinterpret_cast<const KvT*>(p.k) + i64(k0) * p.k_stride_s;
        p.v = reinterpret_cast<const KvT*>(p.v) + i64(k0) * p.v_stride_s;
    }
    return q0;
}
#endif

// The CTA's work: 16 packed query rows (row0..) of kv-head hkv of sequence b, against keys
// [begin, end) of split `split`. rows = seq_q * group packed rows exist; the rest are padding.
struct WorkTile {
    int group, rows, split, hkv, row0, b, n_keys, begin, end;
#if SDPA_VARLEN
    int tok0;  // the sequence's first packed token: the row of its LSE and partials
#endif
};

// The grid is (splits, kv-heads x row blocks, batch). Varlen narrows p to sequence blockIdx.z
// (seq_view) and lays the row blocks out for the longest sequence (p0).
#if SDPA_VARLEN
__device__ __forceinline__ WorkTile work_tile(SdpaParams& p, const SdpaParams& p0, const DecodeParams& d) {
    WorkTile t;
    t.tok0 = seq_view(p, d, blockIdx.z);
    t.group = p.heads_q / p.heads_kv, t.rows = p.seq_q * t.group;
    const int row_blocks = (p0.seq_q * t.group + 15) / 16;
#else
__device__ __forceinline__ WorkTile work_tile(const SdpaParams& p, const DecodeParams& d) {
    WorkTile t;
    t.group = p.heads_q / p.heads_kv, t.rows = p.seq_q * t.group;
    const int row_blocks = (t.rows + 15) / 16;
#endif
    t.split = blockIdx.x, t.hkv = blockIdx.y / row_blocks, t.row0 = (blockIdx.y % row_blocks) * 16;
    t.b = blockIdx.z;
#if SDPA_VARLEN
    t.n_keys = p.seq_kv;
#else
    t.n_keys = d.seqlens_k ? paged_keys(d, t.b) : p.seq_kv;  // seqlens_k: paged only
#endif
    // begin + split_keys may pass INT_MAX near 2^31 keys: the end is clamped in 64 bits.
    t.begin = t.split * d.split_keys, t.end = int(min(i64(t.n_keys), i64(t.begin) + d.split_keys));
    return t;
}

#if SDPA_VARLEN
// A varlen split past its sequence's keys writes only a -inf partial LSE per row, which the
// merge skips (its O is never read).
__device__ __forceinline__ void empty_split(const SdpaParams& p, const DecodeParams& d, const WorkTile& t) {
    const int rr = t.row0 + int(threadIdx.x);
    if (threadIdx.x < 16 && rr < t.rows) {
        const int hq = t.hkv * t.group + rr % t.group;
        d.lse_part[(i64(t.split) * p.heads_q + hq) * p.total_q + t.tok0 + rr / t.group] = -SDPA_INF;
    }
}
#endif

// 8-bit K/V's descales: K's folds into the softmax's log2 scale, V's into the epilogue.
struct KvScales { float sl2, vd; };
__device__ __forceinline__ KvScales kv_scales(const SdpaParams& p, const WorkTile& t) {
    float kd = 1.f, vd = 1.f;
    if constexpr (KV8) {
        const int i = t.b * p.kv_descale_stride_b + t.hkv;
        kd = p.k_descale[i];
        vd = p.v_descale[i];
    }
    return {p.scale_log2 * kd, vd};
}

// This lane's two rows (g, g + 8): query position, head, and the first key it may not see.
// Out-arrays rather than a returned struct, which renumbers the PTX and changes the SASS.
__device__ __forceinline__ void lane_rows(const SdpaParams& p, const WorkTile& t, int g, int (&pos)[2], int (&head)[2],
                                          int (&limit)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = t.row0 + g + 8 * r;
        pos[r] = row / t.group;
        head[r] = t.hkv * t.group + row % t.group;
        limit[r] = row < t.rows ? t.end : t.begin;  // padding rows see nothing
#if SDPA_CAUSAL
        limit[r] = min(limit[r], pos[r] + t.n_keys - p.seq_q + 1);  // bottom-right
#endif
    }
}

// Q as m16n8k16 A fragments, straight from global: read once per CTA, so not staged.
__device__ __forceinline__ void load_q(u32 (&qa)[D / 16][4], const SdpaParams& p, const WorkTile& t,
                                       const int (&pos)[2], const int (&head)[2], int g, int t4) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = i & 1, col = q_col(kk, i, t4);
            const bool ok = t.row0 + g + 8 * r < t.rows;
            const T* q = reinterpret_cast<const T*>(p.q) + t.b * p.q_stride_b + (ok ? pos[r] : 0) * p.q_stride_s +
                         (ok ? head[r] : 0) * p.q_stride_h + col;
            qa[kk][i] = ok ? *reinterpret_cast<const u32*>(q) : 0u;
        }
}

// A warp's private cp.async ring of STAGES K/V steps: step i holds keys [key0(i), + KW) in
// slot i % STAGES. Private, so the loop needs no block barrier. It reads the tile by reference:
// a copy of t.begin renumbers varlen's K/V pointers in the PTX and changes the SASS.
struct WarpRing {
    const WorkTile& t;
    u32 base;
    int steps, warp;
    __device__ __forceinline__ WarpRing(const WorkTile& t_, u32 smem, int warp_)
        : t(t_), base(smem + warp_ * WARP_BYTES),
          steps(t_.end > t_.begin ? (t_.end - t_.begin + TILE_N - 1) / TILE_N : 0), warp(warp_) {}
    __device__ __forceinline__ int key0(int i) const { return t.begin + i * TILE_N + warp * KW; }
    __device__ __forceinline__ u32 slot(int i) const { return base + (i % STAGES) * STAGE_BYTES; }
    // Issues steps 0 .. STAGES - 2 (one commit group each, empty past the last step).
    __device__ __forceinline__ void fill(const SdpaParams& p, const DecodeParams& d, int lane) const {
#pragma unroll
        for (int i = 0; i < STAGES - 1; ++i) {
            if (i < steps) load_step(p, d, base + i * STAGE_BYTES, t.b, t.hkv, key0(i), t.end, lane);
            cp_async_commit();
        }
    }
    // Waits for step i, then refills the slot step i - 1 computed in with step i + STAGES - 1.
    __device__ __forceinline__ void advance(const SdpaParams& p, const DecodeParams& d, int i, int lane) const {
        cp_async_wait<STAGES - 2>();
        __syncwarp();
        const int next = i + STAGES - 1;
        if (next < steps) load_step(p, d, slot(next), t.b, t.hkv, key0(next), t.end, lane);
        cp_async_commit();
    }
};

// Step: mask keys at or past each row's limit, then the online softmax in base 2 (row r of
// this lane: g + 8r). m is the raw running max (the merge scales it), l this lane's partial
// sum; s becomes P and alpha O's rescale per row. The mask sits in the max loop, and every
// step rescales: the decode steps are short, so a threshold would rarely skip one.
__device__ __forceinline__ void softmax_step(float (&s)[KW / 8][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             int key0, const int (&limit)[2], int t4, float sl2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const auto at = [&](int n, int e) -> float& { return s[n][2 * r + e]; };
        const auto masked = [&](int n, int e) { return key0 + 8 * n + 2 * t4 + e >= limit[r]; };
        alpha[r] = online_softmax_row_exact<KW / 8, false>(at, m[r], l[r], sl2, 0.f, masked);
    }
}

__device__ __forceinline__ void rescale_o(float (&o)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] *= alpha[e >> 1];
}

// Epilogue, first half: the warp's O (16 x D fp32, columns in order), m and the row sums l
// into its merge slot, the ring's memory once every warp is idle (hence the barrier).
__device__ __forceinline__ void stash_warp(const u8* smem, int warp, const float (&o)[D / 8][4], const float (&m)[2],
                                           float (&l)[2], int g, int t4) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    __syncthreads();  // every warp's ring is idle: the memory becomes the merge area
    const u32 mine = smem_u32(smem) + warp * MERGE_BYTES;
    if constexpr (KV8) {
        // Tiles 2c and 2c + 1 hold chunk c's even and odd columns: lane t4's four are
        // d = 16c + 4t4 .. + 3, in the order even, odd, even, odd.
#pragma unroll
        for (int c = 0; c < D / 16; ++c)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                sts16(mine + ((g + 8 * r) * D + 16 * c + 4 * t4) * 4,
                      u32x4{__float_as_uint(o[2 * c][2 * r]), __float_as_uint(o[2 * c + 1][2 * r]),
                            __float_as_uint(o[2 * c][2 * r + 1]), __float_as_uint(o[2 * c + 1][2 * r + 1])});
    } else {
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                sts_f32x2(mine + ((g + 8 * r) * D + 8 * j + 2 * t4) * 4, o[j][2 * r], o[j][2 * r + 1]);
    }
    if (t4 == 0)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            sts_f32(mine + 16 * D * 4 + (g + 8 * r) * 4, m[r]);
            sts_f32(mine + 16 * D * 4 + 64 + (g + 8 * r) * 4, l[r]);
        }
}

#if SDPA_CAUSAL
// exact.cuh's rare path for one element (query position ps of head hq, column col) of the
// split's output, which came out non-finite: under causal the row multiplied keys [limit,
// end) of the split without seeing them; if one of them holds a non-finite V in the column,
// the exact value over the keys it sees, [begin, limit), else `out` as it is. Keys are
// addressed as load_step does (a paged entry clamped to the pools).
__device__ __forceinline__ float exact_element(const SdpaParams& p, const DecodeParams& d, const WorkTile& t, int ps,
                                               int hq, int col, float lse2, const KvScales& sc, float out) {
    const int limit = max(t.begin, min(t.end, ps + t.n_keys - p.seq_q + 1));
    const bool paged = d.block_table != nullptr;
    const i64 kb = paged ? 0 : t.b * p.k_stride_b, vb = paged ? 0 : t.b * p.v_stride_b;
    const KeyRows kv{reinterpret_cast<const KvT*>(p.k) + kb + t.hkv * p.k_stride_h,
                     reinterpret_cast<const KvT*>(p.v) + vb + t.hkv * p.v_stride_h,
                     p.k_stride_s, p.v_stride_s, paged ? d.block_table + i64(t.b) * d.max_pages : nullptr,
                     p.k_stride_b, p.v_stride_b, d.page_size, d.pages};
    const T* q = reinterpret_cast<const T*>(p.q) + t.b * p.q_stride_b + ps * p.q_stride_s + hq * p.q_stride_h;
    exact_columns<D, 1, ONE, T, KvT>(q, kv, sc.sl2, lse2, sc.vd, t.begin, limit, limit, t.end, col,
                                     [&](int, float lo, float) { out = lo; });
    return out;
}
#endif

// Epilogue, second half: every thread takes elements of the 16 x D tile, merges the warps'
// slots by their maxima, and writes O and the LSE (one split) or the split's normalized
// partial O and LSE (fp32, for sdpa_decode_merge).
__device__ __forceinline__ void merge_warps(const SdpaParams& p, const DecodeParams& d, const WorkTile& t,
                                            const u8* smem, const KvScales& sc) {
    const u32 all = smem_u32(smem);
    for (int e = threadIdx.x; e < 16 * D; e += WARPS * 32) {
        const int row = e / D, col = e % D, rr = t.row0 + row;
        if (rr >= t.rows) continue;
        float mx = -SDPA_INF;
        for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, lds_f32(all + w * MERGE_BYTES + 16 * D * 4 + row * 4));
        const float ms = mx == -SDPA_INF ? 0.f : mx * sc.sl2;
        float sum = 0.f, acc = 0.f;
        for (int w = 0; w < WARPS; ++w) {
            const u32 at = all + w * MERGE_BYTES;
            const float f = exp2_fast(lds_f32(at + 16 * D * 4 + row * 4) * sc.sl2 - ms);
            sum += lds_f32(at + 16 * D * 4 + 64 + row * 4) * f;
            acc += lds_f32(at + (row * D + col) * 4) * f;
        }
        const int ps = rr / t.group, hq = t.hkv * t.group + rr % t.group;
        // A row with no visible key is 0 (LSE -inf); a NaN score makes sum NaN, which must
        // reach the output rather than be read as "no key".
        float out = sum == 0.f ? 0.f : acc / sum * sc.vd;
        const float lse = sum == 0.f ? -SDPA_INF : (ms + __log2f(sum)) * 0.69314718055994531f;
#if SDPA_CAUSAL
        // A masked key's non-finite V (exact.cuh).
        if (nonfinite(out)) out = exact_element(p, d, t, ps, hq, col, ms + __log2f(sum), sc, out);
#endif
#if SDPA_VARLEN
        const i64 row_id = i64(hq) * p.total_q + t.tok0 + ps;  // [heads_q, total_q]
#else
        const i64 row_id = (i64(t.b) * p.heads_q + hq) * p.seq_q + ps;  // [batch, heads_q, seq_q]
#endif
        if (d.splits == 1) {
            OutT* dst = reinterpret_cast<OutT*>(p.o) + t.b * p.o_stride_b + ps * p.o_stride_s + hq * p.o_stride_h + col;
            *dst = from_float<OutT>(out);
            if (p.lse && col == 0) p.lse[row_id] = lse;
        } else {
#if SDPA_VARLEN
            const i64 part = i64(t.split) * p.heads_q * p.total_q + row_id;
#else
            const i64 part = i64(t.split) * p.batch * p.heads_q * p.seq_q + row_id;
#endif
            d.o_part[part * D + col] = out;
            if (col == 0) d.lse_part[part] = lse;
        }
    }
}
