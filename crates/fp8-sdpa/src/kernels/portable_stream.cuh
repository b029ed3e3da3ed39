// The portable family's stream (portable.cu): persistent decoupled blocks whose work tiles
// share one K/V stream.
#pragma once
#include "portable_tile.cuh"

// ==== The stream (persistent decoupled sync): one K/V stream per block ===========================
// The compute steps of KV tile j of a work tile (16-bit K and V at sk, sv; Q buffer at byte
// qoff of the Q area), for the stream. With the pipelined decode, the first step also decodes
// ring slot `nslot` into staging buffer `nbuf` (the tile AHEAD tiles on): unconditionally, so
// that it stays in the softmax's basic block (past the last tile it decodes a ring slot no copy
// is writing into a free staging buffer, which nothing reads). The stream has no causal warp
// skip (see SKIP_MASKED), so every step is computed. consume keeps its own copy of this loop:
// calling this function from there changes ptxas's schedule of the measured non-stream kernels.
__device__ __forceinline__ void tile_steps(WarpState& ws, const Addrs& ad, u8* smem, u32 qoff, u32 sk, u32 sv, int j,
                                           bool masked, int row_w, int warp, int lane, float sl2,
                                           const SdpaParams& p, int tid, int nslot, int nbuf) {
#pragma unroll 1
    for (int c = 0; c < BN / CN; ++c) {
        const u32 ck = sk + c * CN * ROW16, cv = sv + c * CN * ROW16;
        const int k0 = j * BN + c * CN;
        if (PIPE_DECODE && c == 0) {
            const auto decode_next = [&]() {
                // Decoupled: the newest committed group is the tile STAGES on; the tile two on
                // must have landed (this thread's copies: the only ones it decodes). Waiting
                // here rather than at the tile's top gives the copy half a tile more.
                if constexpr (DECOUPLED) wait_groups<STAGES - 2>();
                decode_kv_all(smem, nslot, nbuf, tid);
            };
            compute_tile(ws, ad, smem, qoff, ck, cv, k0, masked, row_w, warp, lane, sl2, p, decode_next);
        } else {
            compute_tile(ws, ad, smem, qoff, ck, cv, k0, masked, row_w, warp, lane, sl2, p);
        }
    }
}

// This warp's 16·R rows of work tile w's (16-bit) Q into Q buffer `qb` by cp.async, in the
// caller's open commit group, by the warp alone (no other warp reads them). The caller makes
// them visible with a wait and __syncwarp.
__device__ __forceinline__ void load_q_warp(u8* smem, const SdpaParams& p, const Work& w, int qb, int warp, int lane) {
    const u8* q = (const u8*)p.q + ((long long)w.b * p.q_stride_b + (long long)w.hq * p.q_stride_h) * sizeof(q_t);
    const long long qs = p.q_stride_s * (long long)sizeof(q_t);
    const u32 base = smem_u32(smem + OFF_Q) + u32(qb * Q_BYTES);
    const int r0 = warp * 16 * R;
    static_assert(32 % CH16 == 0, "a row's chunks divide a warp");
    constexpr int RS = 32 / CH16, PER = 16 * R * CH16 / 32;
    const int row = r0 + lane / CH16, ch = lane % CH16;
    const u8* src = q + (long long)(w.m0 + row) * qs + ch * 16;
#pragma unroll
    for (int i = 0; i < PER; ++i)
        copy16(base + T16::off(row + i * RS, ch), src + i * RS * qs, w.m0 + row + i * RS < p.seq_q);
}

// The next K/V tile of a block's stream to copy: tile j of work tile t (work tiles with no
// K/V tile are skipped), with that work tile's K and V bases.
struct LoadCursor {
    int t, j, n;
    const u8* k;
    const u8* v;
    __device__ __forceinline__ void seek(const SdpaParams& p, int m_blocks, int tiles) {
        for (; t < tiles; t += gridDim.x) {
            const Work w = work_at(p, t, m_blocks);
            if (w.n_tiles > 0) {
                n = w.n_tiles;
                k = w.k;
                v = w.v;
                return;
            }
        }
    }
    // Copy this thread's chunks of the cursor's tile into ring slot `slot` and advance; past
    // the block's last tile, nothing.
    __device__ __forceinline__ void load(u8* smem, const SdpaParams& p, int slot, const OwnChunks& oc, int m_blocks,
                                         int tiles) {
        if (t < tiles) {
            load_kv_own(smem, p, k, v, j, slot, oc);
            if (++j == n) {
                j = 0;
                t += gridDim.x;
                seek(p, m_blocks, tiles);
            }
        }
    }
};

// Persistent decoupled sync. Stream tile `it` counts the K/V tiles of all the block's work
// tiles in order; the ring slot, staging buffer and DONE barrier follow `it` exactly as the
// non-persistent decoupled loop follows j (copy it + STAGES at the top of tile it, decode
// it + 2 inside it, wait DONE(it - 2) first), so work-tile boundaries need no barrier: a warp
// that has finished its rows writes them out and starts the next work tile while the others
// finish theirs, and the next work tile's first K/V tiles are copied and decoded meanwhile.
// Q is warp-private and double-buffered (or, at D64, read into registers on entry, and then
// one buffer does). A warp issues the Q of work tile k + 1 when it enters work tile k (it last
// read that buffer in work tile k - 1, or just now into registers); the copies join the commit
// group of stream tile f_k + STAGES (f_k: work tile k's first stream tile). The decode waits
// inside work tile k complete the groups up to stream tile f_{k+1} + 1, so Q(k + 1) has landed
// on entry to work tile k + 1 if work tile k has at least STAGES - 1 K/V tiles; after a shorter
// one the warp waits for all its copies.
__device__ __forceinline__ void consume_stream(u8* smem, const SdpaParams& p) {
    if constexpr (STREAM) {
        const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
        constexpr int NT = CONSUMERS * 32;
        const int m_blocks = (p.seq_q + BM - 1) / BM, tiles = m_blocks * p.heads_q * p.batch;
        const Addrs ad(lane);
        const OwnChunks oc(tid);
        const u32 done_bar = smem_u32(smem + OFF_MBAR), stg = smem_u32(smem + OFF_STG);
        int t = blockIdx.x;
        if (t >= tiles) return;  // no work at all (geometry launches at least one block)
        Work w = work_at(p, t, m_blocks);

        // Prologue: the first work tile's Q (its own commit group), stream tiles 0..STAGES-1.
        load_q_warp(smem, p, w, 0, warp, lane);
        commit();
        LoadCursor lc{t, 0, 0, nullptr, nullptr};
        lc.seek(p, m_blocks, tiles);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            lc.load(smem, p, s, oc, m_blocks, tiles);
            commit();
        }
        wait_groups<STAGES - 2>();  // Q, stream tiles 0 and 1 landed
        if (tid == 0)
#pragma unroll
            for (int b = 0; b < STG_BUFS; ++b) mbar_init(done_bar + 8 * b, NT);
        __syncthreads();
        decode_kv_all(smem, 0, 0, tid);
        decode_kv_all(smem, 1, 1, tid);
        __syncthreads();

        int it = 0, prev_n = STAGES;  // the first work tile's Q has landed
        for (int k = 0; t < tiles; t += gridDim.x, ++k) {
            if (k > 0) w = work_at(p, t, m_blocks);
            if (prev_n < STAGES - 1) {  // Q(k) may still be in flight (see above)
                commit();
                wait_groups<0>();
            }
            // The warp's Q(k) copies are visible to all its lanes, and its reads of the buffer
            // Q(k + 1) goes to (in work tile k - 1) are done.
            __syncwarp();
            const u32 qoff = Q_BUFS == 2 ? u32((k & 1) * Q_BYTES) : 0u, sq = smem_u32(smem + OFF_Q) + qoff;
            WarpState ws;
            if constexpr (Q_IN_REGS) {
                ws.load_q(ad.a, sq, warp);
                __syncwarp();  // one Q buffer: the warp's reads of Q(k) before the copies of Q(k + 1)
            }
            if (t + int(gridDim.x) < tiles)
                load_q_warp(smem, p, work_at(p, t + gridDim.x, m_blocks), Q_BUFS == 2 ? (k + 1) & 1 : 0, warp, lane);
            const Scales sc(p, w);
            const float sl2 = sc.sl2, v_ds = sc.v_ds;
            const int row_w = warp_row0(w.m0, warp);
            ws.reset();
            for (int j = 0; j < w.n_tiles; ++j, ++it) {
                // Everyone finished stream tile it - 2: tile it is decoded, and staging buffer
                // (it + 2) % 4 is free (as in consume).
                if (it >= 2) mbar_wait(done_bar + 8 * ((it - 2) % STG_BUFS), ((it - 2) / STG_BUFS) & 1);
                lc.load(smem, p, it % STAGES, oc, m_blocks, tiles);  // stream tile it + STAGES
                commit();
                const u32 sk = stg + (it % STG_BUFS) * STG_BYTES;
                tile_steps(ws, ad, smem, qoff, sk, sk + BN * ROW16, j, j >= w.diag0, row_w, warp, lane, sl2, p, tid,
                           (it + AHEAD) % STAGES, (it + AHEAD) % STG_BUFS);
                mbar_arrive(done_bar + 8 * (it % STG_BUFS));
            }
            write_out(ws, p, p, w, row_w, warp, lane, v_ds);
            prev_n = w.n_tiles;
        }
        commit();
        wait_groups<0>();
    }
}
