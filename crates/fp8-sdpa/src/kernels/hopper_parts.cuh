// The Hopper kernels' shared parts (hopper.cu for 16-bit Q/K/V, hopper_fp8.cu for E4M3): the
// tensor maps, the work-tile scheduler, the online softmax over wgmma accumulators, masking,
// the ping-pong turns and the epilogue. The including kernel defines, before including:
//   T (Q/K/V element type), OutT (16-bit output), and the O staging layout: STAGE_O (never
//   for varlen calls) and OFF_O (O in 64-column slabs of TILE_M rows x 128 bytes);
//   P_SHIFT: P is computed as exp2(s - m + P_SHIFT), so up to 2^P_SHIFT (0 for 16-bit P; 8 for
//   E4M3 P, whose range reaches 448, so small probabilities keep more precision); O / l and
//   the log-sum-exp correct for it.
#pragma once
#include "hopper_knobs.cuh"
#include "exact.cuh"

namespace hopper {
constexpr u32 O_SLAB = TILE_M * 128;  // one 64-column slab of the staged O tile
constexpr int O_SLABS = D / 64;

// 4-D maps over (dim, seq, head, batch), boxes of 128 bytes (64 16-bit or 128 8-bit columns;
// 64 bytes for 8-bit D64) x TILE_M (Q), TILE_N (K, V) or 64 rows (O, one consumer warpgroup's).
struct HopperMaps { TmaMap q, k, v, o; };

// ---- scheduler ----------------------------------------------------------------------------
// Variable-length batches (SDPA_VARLEN, abi.cuh): the maps see one packed "batch" (coordinate
// 0) whose rows are the tokens; sequence b is cut out by its offsets, clamped to the packed
// tensors, so bad offsets never make a copy or store leave them. The grid covers the longest
// sequence (seq_q); tiles past a sequence's rows are not live and are skipped by every role.
// A work tile: m-block, query head, sequence, key blocks to visit, and where its rows live:
// the sequence's query and key counts, its first token in Q/O and in K/V (0 for dense calls)
// and its batch coordinate in the maps (0 for varlen calls).
struct Tile {
    int m_block, hq, b, n_blocks;
    int n_q, n_k, q_off, k_off, bc;
    __device__ bool live() const { return !VARLEN || m_block * TILE_M < n_q; }
};

struct Scheduler {
    int m_blocks, heads, tiles, section;
    __device__ Scheduler(const SdpaParams& p)
        : m_blocks((p.seq_q + TILE_M - 1) / TILE_M), heads(p.heads_q),
          tiles(m_blocks * p.heads_q * p.batch),
          // Causal sections: as many (batch, head) pairs as keep their K/V within ~16 MB of L2.
          section(int(max(u64(1), (u64(16) << 20) / (u64(max(p.seq_kv, 1)) * D * 2 * sizeof(T))))) {}
    // Causal: the (batch, head) pairs in sections; inside a section m-blocks vary slowest, last
    // (heaviest) first, so the blocks running together are balanced and share a few heads' K/V
    // in L2 (m-blocks slowest over all pairs read every head's K/V at once from DRAM). Else
    // m-blocks fastest, so the blocks running together share one head's K/V.
    __device__ Tile at(const SdpaParams& p, int t) const {
        Tile w;
        int pair;
#if SDPA_CAUSAL
        const int pairs = heads * p.batch, first = t / (section * m_blocks) * section;
        const int in_section = min(section, pairs - first), r = t - first * m_blocks;
        w.m_block = m_blocks - 1 - r / in_section;
        pair = first + r % in_section;
#else
        w.m_block = t % m_blocks;
        pair = t / m_blocks;
#endif
        w.hq = pair % heads;
        w.b = pair / heads;
        if (VARLEN) {
            seq_span(p.cu_seqlens_q, w.b, p.total_q, w.q_off, w.n_q);
            seq_span(p.cu_seqlens_k, w.b, p.total_k, w.k_off, w.n_k);
            w.bc = 0;
        } else {
            w.n_q = p.seq_q;
            w.n_k = p.seq_kv;
            w.q_off = w.k_off = 0;
            w.bc = w.b;
        }
#if SDPA_CAUSAL
        // Bottom-right: row i sees keys j <= i + n_k - n_q.
        const int end = min(w.n_k, (w.m_block + 1) * TILE_M + w.n_k - w.n_q);
#else
        const int end = w.n_k;
#endif
        w.n_blocks = end > 0 ? (end + TILE_N - 1) / TILE_N : 0;
        return w;
    }
};

// A block's ring uses in order, one at a time: key block j of its tile t, each tile's blocks
// from the last to the first, as the producer and consumers walk them (two registers).
struct UseCursor {
    int t, j;
    __device__ bool next(const Scheduler& sched, const SdpaParams& p) {
        while (j <= 0) {
            t += gridDim.x;
            if (t >= sched.tiles) return false;
            const Tile w = sched.at(p, t);
            j = w.live() ? w.n_blocks : 0;
        }
        --j;
        return true;
    }
};

// ---- consumer: one warpgroup, 64 query rows -----------------------------------------------
// Each thread owns rows r = 16 * warp + g and r + 8 of the warpgroup's 64, and in every
// accumulator the columns 8j + 2t, 8j + 2t + 1 (wgmma_ops.cuh's layout).
struct RowState { float m[2], l[2]; };

// Tile w's query and key counts. Varlen: read again from the offsets (L1-resident) rather
// than held in registers across the key loop, where the Hopper kernels have none to spare.
__device__ __forceinline__ void seq_counts(const SdpaParams& p, const Tile& w, int& n_q, int& n_k) {
    n_q = w.n_q;
    n_k = w.n_k;
    if (VARLEN) {
        int off;
        seq_span(p.cu_seqlens_q, w.b, p.total_q, off, n_q);
        seq_span(p.cu_seqlens_k, w.b, p.total_k, off, n_k);
    }
}

// Masks the score tile of key block n0 for this thread's two rows (query rows q0, q0 + 8 of a
// sequence of n_q queries and n_k keys).
__device__ __forceinline__ void mask_scores(float (&s)[TILE_N / 2], int n0, int q0, int t4, int n_q, int n_k) {
    // Element (j, e) is key n0 + 2 t4 + 8j + (e & 1) of row q0 + 8 (e >> 1); it is visible
    // iff 8j + (e & 1) < rel[e >> 1], its row's first invisible key minus n0 + 2 t4. Compared
    // with immediates, so the edge path needs two registers (the FP8 consumer has no more).
    int rel[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        int limit = n_k;  // first invisible key
#if SDPA_CAUSAL
        limit = min(limit, q0 + 8 * r + n_k - n_q + 1);
#endif
        rel[r] = limit - n0 - 2 * t4;
    }
#pragma unroll
    for (int j = 0; j < TILE_N / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (8 * j + (e & 1) >= rel[e >> 1]) s[4 * j + e] = -SDPA_INF;
}

// Masks key block j for one warpgroup (cw) of tile w where the block crosses the sequence's
// keys or (causal) the diagonal of the warpgroup's 64 rows; this thread's rows are q0, q0 + 8.
__device__ __forceinline__ void mask_block(float (&s)[TILE_N / 2], int j, const Tile& w, int cw, int q0, int t4,
                                           const SdpaParams& p) {
    const int n0 = j * TILE_N;
    int n_q, n_k;
    seq_counts(p, w, n_q, n_k);
    bool edge = n0 + TILE_N > n_k;
#if SDPA_CAUSAL
    edge |= n0 + TILE_N - 1 > w.m_block * TILE_M + cw * 64 + n_k - n_q;
#endif
    if (edge) mask_scores(s, n0, q0, t4, n_q, n_k);
}

// Online softmax over one score tile: updates the running max and sum, leaves
// P = exp2(s * sl2 - m * sl2 + P_SHIFT) in s and the factor O must be rescaled by in alpha.
__device__ __forceinline__ void softmax_step(float (&s)[TILE_N / 2], RowState& rs, float (&alpha)[2], float sl2) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const auto at = [&](int j, int e) -> float& { return s[4 * j + 2 * r + e]; };
        alpha[r] = online_softmax_row_exact<TILE_N / 8, true>(at, rs.m[r], rs.l[r], sl2, P_SHIFT);
    }
}

__device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
}

// Ping-pong: the two consumer warpgroups take turns issuing their GEMMs (TURN_0 / TURN_1, 256
// threads), so that one's softmax runs while the other's GEMMs hold the tensor cores.
// Warpgroup 1 hands the first turn to warpgroup 0 at the start and warpgroup 0 takes the last
// hand-over at the end (hopper_consumer.cuh), so every arrival is matched.
__device__ __forceinline__ void turn_wait(int cw) { if (PINGPONG) bar_sync(TURN_0 + cw, 256); }
__device__ __forceinline__ void turn_pass(int cw) { if (PINGPONG) bar_arrive(TURN_1 - cw, 256); }

// ---- epilogue ----------------------------------------------------------------------------
// exact.cuh's rare path for this thread's rows once both are stored (lq: their sums over the
// quad); exact values overwrite what was stored, in the staging tile (lr: the row within the
// warpgroup's 64) or in O. Under causal a row multiplied the keys after its diagonal, and a
// varlen sequence its neighbour's keys past its end, up to its last visited block; dense keys
// past seq_kv were zero-filled by TMA. From p and the tile's coordinates, heads_q / heads_kv
// behind `opaque`: hoisted out of the persistent tile loop, it held a register across the key
// loop (6 % on D64 causal tiles).
__device__ __forceinline__ void exact_rows(const SdpaParams& p, int hq, int b, int bc, int m_block, u32 o_tile, int q0,
                                        int lr0, int t4, float l0, float l1, float m0, float m1, float sl2,
                                        float o_scale) {
    const float lq[2] = {l0, l1}, m[2] = {m0, m1};
    int q_off = 0, n_q = p.seq_q, k_off = 0, n_k = p.seq_kv;
    if (VARLEN) {
        seq_span(p.cu_seqlens_q, b, p.total_q, q_off, n_q);
        seq_span(p.cu_seqlens_k, b, p.total_k, k_off, n_k);
    }
    const int hkv = hq / (opaque(p.heads_q) / opaque(p.heads_kv));
    // The tile's visited keys, as the scheduler counts them (Scheduler::at), read past the
    // sequence only inside the packed tensor.
    int end = n_k;
#if SDPA_CAUSAL
    end = min(n_k, (m_block + 1) * TILE_M + n_k - n_q);
#endif
    const int visited = min((end + TILE_N - 1) / TILE_N * TILE_N, VARLEN ? p.total_k - k_off : n_k);
    const KeyRows kv{
        reinterpret_cast<const KvT*>(p.k) + bc * p.k_stride_b + i64(k_off) * p.k_stride_s + hkv * p.k_stride_h,
        reinterpret_cast<const KvT*>(p.v) + bc * p.v_stride_b + i64(k_off) * p.v_stride_s + hkv * p.v_stride_h,
        p.k_stride_s, p.v_stride_s, nullptr, 0, 0, 0, 0};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = q0 + 8 * r, lr = lr0 + 8 * r;
        if (row >= n_q) continue;
        int seen = n_k;
#if SDPA_CAUSAL
        seen = max(0, min(seen, row + n_k - n_q + 1));
#endif
        const T* q = reinterpret_cast<const T*>(p.q) + bc * p.q_stride_b + i64(q_off + row) * p.q_stride_s +
                     hq * p.q_stride_h;
        OutT* orow = reinterpret_cast<OutT*>(p.o) + bc * p.o_stride_b + i64(q_off + row) * p.o_stride_s +
                     hq * p.o_stride_h;
        exact_row<D, PAIRS, T, KvT, OutT>(q, kv, sl2, m[r] * sl2 + log2f(lq[r]) - P_SHIFT, o_scale, seen, seen,
                                          visited, t4, [&](int c, u32 word) {
                                              const int j = c / 2;
                                              if (STAGE_O)
                                                  sts_u32(o_tile + (j / 8) * O_SLAB + lr * 128 +
                                                              (((j % 8) ^ (lr % 8)) * 16) + 4 * t4,
                                                          word);
                                              else stg_u32(orow + 8 * j + 2 * t4, word);
                                          });
    }
}

// O * o_scale / l and the log-sum-exp of one warpgroup's 64 rows (sl2: the scores' scale, the
// one softmax_step used). With STAGE_O the rows go to shared
// memory in the layout a SWIZZLE_128B load of the same box would write (16-byte chunk c of
// row r at c ^ (r % 8): the eight rows of one store instruction hit eight different chunks,
// so no bank conflicts), and one thread stores them by TMA, which clips rows past seq_q (not
// for varlen calls, whose next sequence's rows follow: those store from registers); the
// warpgroup goes on to its next tile while the copy runs. Its buffer is reused one tile later,
// after the issuing thread's wait on the previous store's reads. Where a masked key can have
// been multiplied (causal, varlen), each stored word is checked for exact_rows.
__device__ __forceinline__ void epilogue(const SdpaParams& p, const HopperMaps& maps, u32 smem, int cw, const Tile& w,
                                         const float (&o)[D / 2], const RowState& rs, int q0, float sl2,
                                         float o_scale) {
    constexpr bool EXACT = SDPA_CAUSAL || VARLEN;
    const int tid = threadIdx.x % 128, warp = tid / 32, g = (tid % 32) / 4, t4 = tid % 4;
    const u32 o_tile = smem + OFF_O + cw * 64 * 128;
    // Varlen: the sequence's rows read again (see seq_counts).
    int q_off = w.q_off, n_q = w.n_q;
    if (VARLEN) seq_span(p.cu_seqlens_q, w.b, p.total_q, q_off, n_q);
    if (STAGE_O) {
        if (tid == 0) bulk_wait_read<0>();
        bar_sync(O_STAGED_0 + cw, 128);
    }
    u32 chk = 0;  // 0 while every stored value is finite (exact.cuh)
    float lq[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = rs.l[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        lq[r] = l;
        const int row = q0 + 8 * r;
        const float inv = l > 0.f ? o_scale / l : 0.f;
        if (STAGE_O) {
            const int lr = 16 * warp + g + 8 * r;  // row within the warpgroup's 64
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                const u32 word = pack2<OutT>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
                sts_u32(o_tile + (j / 8) * O_SLAB + lr * 128 + (((j % 8) ^ (lr % 8)) * 16) + 4 * t4, word);
                if (EXACT) fold_nonfinite<OutT>(chk, word);
            }
        }
        if (row >= n_q) continue;
        if (!STAGE_O) {
            OutT* orow = reinterpret_cast<OutT*>(p.o) + w.bc * p.o_stride_b + i64(q_off + row) * p.o_stride_s +
                         w.hq * p.o_stride_h;
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                const u32 word = pack2<OutT>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
                stg_u32(orow + 8 * j + 2 * t4, word);
                if (EXACT) fold_nonfinite<OutT>(chk, word);
            }
        }
        // LSE [batch, heads_q, seq_q], or [heads_q, total_q] for varlen calls.
        const i64 at = VARLEN ? i64(w.hq) * p.total_q + q_off + row : (i64(w.b) * p.heads_q + w.hq) * p.seq_q + row;
        if (p.lse && t4 == 0)
            p.lse[at] =
                l > 0.f ? (rs.m[r] * sl2 + __log2f(l) - P_SHIFT) * 0.69314718055994531f : -SDPA_INF;
    }
    if (EXACT && chk != 0u)
        exact_rows(p, w.hq, w.b, w.bc, w.m_block, o_tile, q0, 16 * warp + g, t4, lq[0], lq[1], rs.m[0], rs.m[1], sl2,
                   o_scale);
    if (STAGE_O) {
        fence_proxy_async_shared();
        bar_sync(O_STAGED_0 + cw, 128);
        if (tid == 0) {
#pragma unroll
            for (int s = 0; s < O_SLABS; ++s)
                tma_store_4d(&maps.o, o_tile + s * O_SLAB, 64 * s, w.m_block * TILE_M + cw * 64, w.hq, w.bc);
            bulk_commit();
        }
    }
}
}  // namespace hopper
