// Portable attention forward (sm_80 and up): FlashAttention-2 on mma.sync.
//
// One block owns TILE_M query rows of one (batch, query head); each warp owns 16·R of them
// (R = 1 or 2 m16 fragments). Per block:
//   1. load Q                      16-bit to shared memory by cp.async (8-bit Q decoded on the
//                                  way); kept in registers where they fit (Q_IN_REGS)
//   2. for each K/V tile j (TILE_N keys, causal: up to the diagonal), through a STAGES-deep
//      shared-memory ring filled by cp.async:
//        S = Q·Kᵀ                  mma.sync m16n8k16, K by ldmatrix, fp32 accumulators
//        mask                      keys past seq_kv; causal: keys past the row's diagonal
//        online softmax            base 2, running max m and sum l per row, O rescaled when
//                                  m moves (threshold rescale, softmax.cuh)
//        O += P·V                  P repacked in registers as the A operand, V by
//                                  ldmatrix.trans
//   3. epilogue                    O = acc · v_descale / l straight from the accumulators, LSE
// 8-bit K/V (FP8-KV E4M3, full FP8, the seeds' u8 code) adds one step, the decode to 16-bit
// operands (step 2b), in one of these forms:
//   fragment decode (FRAG)         every warp decodes its K/V fragments in registers beside
//                                  the mma: no staging (Hopper's 8-bit causal tiles, D256)
//   staged (STAGED)                a tile is decoded once per block into a 16-bit staging
//                                  tile that the loop reads like a 16-bit one:
//     serial                       decode, barrier, compute (the seeds' forms: one stage,
//                                  plain loads, scalar P·V)
//     pipelined (PIPE_DECODE)      tile j + 1 decoded inside tile j's softmax (D <= 128)
//     split (SPLIT_DECODE)         V of tile j inside its softmax, K of tile j + 1 inside its
//                                  P·V (D256); RING1: one 8-bit ring slot refilled by halves
// Decoding is exact, so the descales are applied in fp32: q_descale · k_descale folds into
// the softmax scale, v_descale into the epilogue.
//
// The seeds' toggles: cp.async (else plain loads through registers), tensor-core P·V (else P
// through shared memory and FMAs), sync policy (block barriers around every step, or light:
// only the hand-offs), swizzled tiles (else padded rows), STAGES, tiles, warps, ex2.approx.
// What the shipped defaults add (each used by a registered default): half steps (HALF_STEPS), paired rows (PAIRED), decoupled sync
// (DECOUPLED: per-thread copy and decode, mbarriers instead of the tile barrier) and the
// stream (STREAM: persistent decoupled blocks whose work tiles share one K/V stream), all for
// Hopper's 8-bit tiles; variable-length batches (SDPA_VARLEN).
//
// Conventions mirror reference.cu and abi.cuh: bottom-right causal (query i sees key j iff
// j <= i + seq_kv - seq_q), a row that sees no key gets O = 0 and LSE = -inf, LSE in natural
// log, NaN in an input propagates to the rows it reaches. The softmax scale is assumed
// positive (the row max is taken on unscaled scores).
//
// Grid (geometry.rs): (ceil(seq_q / TILE_M), heads_q, batch), and under causal
// (heads_q, G, sections · m_blocks) in causal order within sections of G batches (run_blocks,
// causal_work_at); the stream launches (n, 1, 1) blocks striding over tile indices (work_at).
// All visit the heaviest m-blocks first under causal. Variable-length batches use the same
// grids over the longest sequence; each work tile becomes a dense problem of its own sequence
// first (varlen_view).
//
// Files, in the order a block runs them (this file holds the block's loop and the entry):
//   portable_modes.cuh             the modes: one define per Variant field and what follows
//                                  (decode form, sync, shared-memory layout); warp rows, copies
//   portable_work.cuh              work tiles: coordinates, variable-length views, scales,
//                                  causal and stream orders
//   portable_load.cuh              step 1 (Q) and step 2 (K/V copies into the ring)
//   portable_decode8.cuh           step 2b: the 8-bit K/V decode in its staged forms
//   portable_tile.cuh              step 3 (one K/V tile: S, mask, online softmax, P·V) and
//                                  step 4 (epilogue)
//   portable_stream.cuh            the stream: persistent blocks over one K/V stream
//
// Several helpers keep a copy of code that a shared form would also serve (consume and
// tile_steps, load_q and load_q_warp, decode_kv_all and OwnDecode): sharing them changed
// ptxas's schedule of measured kernels. The SASS of every shipped spec is compared before and
// after each refactor (scripts/sass-compare.py).
#include "portable_modes.cuh"
#include "portable_work.cuh"
#include "portable_load.cuh"
#include "portable_decode8.cuh"
#include "exact.cuh"
#include "portable_tile.cuh"

// ==== The block: one work tile through the K/V loop ==============================================
// consume runs FlashAttention-2's loop for one work tile:
//   Q, then issue_first_tiles    the first K/V copies (each its own cp.async group)
//   decode_prologue              8-bit K/V: the decode of the first tiles (Step 2b)
//   for each K/V tile j:
//     the ring                   wait for tile j, free a slot, issue a later tile's copies
//     kv_operands                the 16-bit K and V that tile j's steps read: the ring slot
//                                (16-bit K/V, fragment decode) or a staging buffer (staged
//                                decode; the serial form decodes here)
//     the steps                  compute_tile per step (step 3), with the decode's hooks
//   write_out                    (step 4)
// Each ring discipline (cp.async depth, the decode's form, decoupled sync) is one branch of
// these. The ring and the steps stay inline in consume: as functions of their own (forceinline
// or not) they changed ptxas's register allocation of most specs (SASS compared).

// The first K/V tiles: 0..STAGES-1 with the pipelined decode, 0..STAGES-2 otherwise (and Q
// under fragment decode, see consume).
__device__ __forceinline__ void issue_first_tiles(u8* smem, const SdpaParams& p, const Work& w, int tid,
                                                  const OwnChunks& oc, u32 done_bar) {
    constexpr int NT = CONSUMERS * 32;
    if constexpr (DECOUPLED || SPLIT_DECODE) {
        // Every slot, this thread's own chunks: tiles 0..STAGES-1 (tile j + STAGES is issued
        // once this thread has decoded its chunks of tile j; RING1: tile 0).
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            if (s < w.n_tiles) load_kv_own(smem, p, w.k, w.v, s, s, oc);
            commit();
        }
        if constexpr (DECOUPLED) {
            wait_groups<STAGES - 2>();  // Q, tiles 0 and 1 landed
            if (tid == 0) {
#pragma unroll
                for (int b = 0; b < STG_BUFS; ++b) mbar_init(done_bar + 8 * b, NT);
            }
        } else {
            wait_groups<STAGES - 1>();  // Q and tile 0 landed
        }
    } else if constexpr (PIPE_DECODE) {
        // Every slot: tiles 0..STAGES-1 (tile j + STAGES is issued once tile j is decoded).
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            if (s < w.n_tiles) load_kv<NT>(smem, p, w, s, s, tid);
            commit();
        }
        wait_groups<STAGES - 1>();  // Q and tile 0 landed
    } else {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < w.n_tiles) load_kv<NT>(smem, p, w, s, s, tid);
            commit();
        }
        if constexpr (FRAG) load_q<NT>(smem, p, w, tid);
        wait_groups<STAGES - 1>();  // Q landed
    }
}

// The decode of the first K/V tiles, after the prologue's barrier.
__device__ __forceinline__ void decode_prologue(u8* smem, const SdpaParams& p, const Work& w, int tid,
                                                const OwnChunks& oc) {
    constexpr int NT = CONSUMERS * 32;
    if constexpr (DECOUPLED) {
        // Tiles 0 and 1 to staging buffers 0 and 1 (own chunks; past the last tile the
        // decoded bytes are never read), visible to all after one barrier.
        decode_kv_all(smem, 0, 0, tid);
        decode_kv_all(smem, 1, 1, tid);
        consumer_sync();
    } else if constexpr (PIPE_DECODE) {
        if (w.n_tiles > 0) decode_kv(smem, 0, 0, tid, NT);  // visible after the loop's first barrier
    } else if constexpr (RING1) {
        // Tile 0 whole to staging pair 0 (visible after the loop's first barrier), then the
        // slot's halves refill with tile 1, V first (SplitDecode's group order).
        if (w.n_tiles > 0) {
            decode_kv_all(smem, 0, 0, tid);
            if (w.n_tiles > 1) load_kv_own<SplitDecode::HALF>(smem, p, w.k, w.v, 1, 0, oc);
            commit();
            if (w.n_tiles > 1) load_kv_own<0, SplitDecode::HALF>(smem, p, w.k, w.v, 1, 0, oc);
            commit();
        }
    } else if constexpr (SPLIT_DECODE) {
        if (w.n_tiles > 0) decode_kv_all<0, SplitDecode::HALF>(smem, 0, 0, tid);  // K of tile 0, likewise
    }
}

// The K and V tiles (shared addresses sk, sv) that tile j's steps read: a staging buffer for
// the staged decode (the serial form decodes the ring slot into it here), else the ring slot
// (16-bit, or 8-bit under fragment decode).
__device__ __forceinline__ void kv_operands(u8* smem, u32 stg, int j, int slot, int tid, u32& sk, u32& sv) {
    constexpr int NT = CONSUMERS * 32;
    if constexpr (PIPE_DECODE) {
        sk = stg + (j % STG_BUFS) * STG_BYTES;
        sv = sk + BN * ROW16;
    } else if constexpr (SPLIT_DECODE) {
        sk = stg + (RING1 ? (j % 2) * STG_BYTES : 0);
        sv = sk + BN * ROW16;
    } else if constexpr (STAGED) {
        decode_kv(smem, slot, 0, tid, NT);
        consumer_sync();
        sk = stg;
        sv = stg + BN * ROW16;
    } else {
        sk = smem_u32(smem + OFF_KV + slot * 2 * KV_TILE);
        sv = sk + KV_TILE;
    }
}

// The computing warps' side of one work tile.
__device__ __forceinline__ void consume(u8* smem, const SdpaParams& p, const SdpaParams& p0, const Work& w) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    constexpr int NT = CONSUMERS * 32;
    const Scales sc(p, w);
    const float sl2 = sc.sl2, v_ds = sc.v_ds;
    const int row_w = warp_row0(w.m0, warp);
    const Addrs ad(lane);

    WarpState ws;
    ws.reset();

    // Step 1, Q: its own cp.async group, the oldest. Fragment decode loads Q through
    // registers (qperm), after the first K/V copies are issued, so that its loads' latency
    // overlaps theirs (issue_first_tiles; its commit group stays, empty).
    if constexpr (!FRAG) load_q<NT>(smem, p, w, tid);
    commit();
    const OwnChunks oc(tid);                         // decoupled sync, split decode
    const u32 done_bar = smem_u32(smem + OFF_MBAR);  // decoupled: DONE[b] at + 8b
    issue_first_tiles(smem, p, w, tid, oc, done_bar);
    consumer_sync();
    ws.load_row_scales(smem, sl2, warp, lane);
    if constexpr (Q_IN_REGS) {
        ws.load_q(ad.a, smem_u32(smem + OFF_Q), warp);
        step_sync();
    }
    decode_prologue(smem, p, w, tid, oc);

    const u32 stg = smem_u32(smem + OFF_STG);
    for (int j = 0; j < w.n_tiles; ++j) {
        // The ring: wait for tile j (with the pipelined decode, tile j + 1), free the slot the
        // previous tile used, issue the copies of a later tile.
        int slot;
        if constexpr (DECOUPLED) {
            // DONE[b] completes when every thread has finished the tile in buffer b. Everyone
            // finished tile j - 2: they decoded tile j during it (buffer j % 4 is complete),
            // and its buffer, (j + 2) % 4, is free for the decode of tile j + 2. A warp waits
            // only for warps more than a tile behind it; no barrier couples the block.
            if (j >= 2) mbar_wait(done_bar + 8 * ((j - 2) % STG_BUFS), ((j - 2) / STG_BUFS) & 1);
            // Slot j % STAGES held tile j, whose own chunks this thread decoded in tile j - 2.
            // (The wait for tile j + 2's copies sits in the decode hook below.)
            if (j + STAGES < w.n_tiles) load_kv_own(smem, p, w.k, w.v, j + STAGES, j % STAGES, oc);
            commit();
            slot = j % STAGES;
        } else if constexpr (PIPE_DECODE) {
            // Groups committed so far: Q, tiles 0 .. j + STAGES - 1; tile j + 1 must have landed.
            wait_groups<STAGES - 2>();
            // Everyone's copies of tile j + 1 landed; staging buffer j % 2 (decoded last
            // iteration) is complete; everyone finished tile j - 1, so buffer (j + 1) % 2 and
            // ring slot j % STAGES (tile j, decoded last iteration) are free.
            __syncthreads();
            if (j + STAGES < w.n_tiles) load_kv<NT>(smem, p, w, j + STAGES, j % STAGES, tid);
            commit();
            slot = j % STAGES;
        } else {
            slot = j % STAGES;
            if constexpr (SPLIT_DECODE) {
                // K of tile j is staged (decoded during tile j - 1; RING1: V too), and every
                // warp is done with tile j - 1, so the V half (RING1: the other staging pair)
                // is free. (Copies: see SplitDecode.)
                consumer_sync();
            } else if constexpr (STAGES == 1) {
                load_kv<NT>(smem, p, w, j, 0, tid);
                commit();
                wait_groups<0>();
                __syncthreads();
            } else {
                wait_groups<STAGES - 2>();  // tile j landed (this thread's copies)
                __syncthreads();            // ... everyone's; and slot (j-1) % S is free
                if (j + STAGES - 1 < w.n_tiles) load_kv<NT>(smem, p, w, j + STAGES - 1, (j + STAGES - 1) % STAGES, tid);
                commit();
                step_sync();
            }
        }
        u32 sk, sv;
        kv_operands(smem, stg, j, slot, tid, sk, sv);
        // The steps (Step 3): compute_tile per CN keys, with the decode's hooks.
        const bool masked = j >= w.diag0;
#pragma unroll 1
        for (int c = 0; c < BN / CN; ++c) {
            const u32 ck = sk + c * CN * KV_ROW, cv = sv + c * CN * KV_ROW;
            const int k0 = j * BN + c * CN;
            // Causal: a step whose first key lies past the limit of the warp's last row is
            // masked for every row of the warp, and so a no-op (p = 0; m, l and O unchanged).
            // The warp skips its mma and softmax, and the other warps on its scheduler get the
            // issue slots. On the diagonal of a 256-row block that is 28 of 64 warp-steps
            // (unpaired). With paired rows the warp's last row is fragment 1's, and a step past
            // fragment 0's last row computes fragment 1 alone (`half`).
            const bool skip = SKIP_MASKED && k0 > row_w + frag_off(warp, R - 1) + 15 + (p.seq_kv - p.seq_q);
            const bool half = PAIRED && SKIP_MASKED && k0 > row_w + 15 + (p.seq_kv - p.seq_q);
            if constexpr (SPLIT_DECODE) {
                // V inside the softmax, K inside P·V. A skipping warp still decodes (and
                // copies) its chunks, and meets the barrier between them.
                const SplitDecode hk(smem, p, w, oc, j, tid);
                const auto decode_v = [&]() { hk.v(); };
                if (skip) {
                    decode_v();
                    hk.pre();
#pragma unroll
                    for (int kc = 0; kc < CN / 16; ++kc) hk.pv_store(kc, hk.pv_load(kc));
                } else if (half) {
                    compute_tile<PAIRED ? 1 : 0>(ws, ad, smem, 0, ck, cv, k0, masked, row_w, warp, lane, sl2, p, decode_v, hk);
                } else {
                    compute_tile(ws, ad, smem, 0, ck, cv, k0, masked, row_w, warp, lane, sl2, p, decode_v, hk);
                }
            } else if (PIPE_DECODE && c == 0) {
                // Decode tile j + AHEAD inside tile j's (first) softmax (see compute_tile).
                // Unconditional, so that it stays in the softmax's basic block: past the last
                // tile it decodes a ring slot no copy is writing (stale or unwritten bytes)
                // into the free staging buffer, which nothing reads before the next work
                // tile's prologue overwrites it. A skipping warp still decodes its share.
                const int nslot = (j + AHEAD) % STAGES, nbuf = (j + AHEAD) % STG_BUFS;
                const auto decode_next = [&]() {
                    // Decoupled: groups committed so far are Q and tiles 0 .. j + STAGES; tile
                    // j + 2 must have landed (this thread's copies: the only ones it decodes).
                    // Waiting here rather than at the tile's top gives the copy half a tile more.
                    if constexpr (DECOUPLED) wait_groups<STAGES - 2>();
                    decode_kv_all(smem, nslot, nbuf, tid);
                };
                if (skip) decode_next();
                else if (half) compute_tile<PAIRED ? 1 : 0>(ws, ad, smem, 0, ck, cv, k0, masked, row_w, warp, lane, sl2, p, decode_next);
                else compute_tile(ws, ad, smem, 0, ck, cv, k0, masked, row_w, warp, lane, sl2, p, decode_next);
            } else if (!skip) {
                if (half) compute_tile<PAIRED ? 1 : 0>(ws, ad, smem, 0, ck, cv, k0, masked, row_w, warp, lane, sl2, p);
                else compute_tile(ws, ad, smem, 0, ck, cv, k0, masked, row_w, warp, lane, sl2, p);
            }
        }
        if constexpr (DECOUPLED) {
            // Done with tile j.
            mbar_arrive(done_bar + 8 * (j % STG_BUFS));
        }
        if constexpr (STAGES == 1 && !RING1) __syncthreads();  // slot 0 is refilled next
    }
    wait_groups<0>();
    write_out(ws, p, p0, w, row_w, warp, lane, v_ds);
}

// The block's work tile. Causal: grid (heads_q, G, sections · m_blocks) over sections of G
// batches (the last one ragged): section blockIdx.z / m_blocks, its m-blocks heaviest first,
// and heads and batches fastest (see causal_work_at and geometry.rs).
__device__ __forceinline__ void run_blocks(u8* smem, const SdpaParams& p) {
    const int m_blocks = (p.seq_q + BM - 1) / BM;
    Work w;
    if constexpr (CAUSAL) {
        const int z = blockIdx.z, section = z / m_blocks, b = section * int(gridDim.y) + int(blockIdx.y);
        if (b >= p.batch) return;
        w = make_work(p, m_blocks - 1 - (z - section * m_blocks), blockIdx.x, b);
    } else {
        w = make_work(p, blockIdx.x, blockIdx.y, blockIdx.z);
    }
    if constexpr (VARLEN) {
        SdpaParams v = p;  // the block's sequence, none past its end
        if (!varlen_view(v, w.b, w.m0 / BM)) return;
        consume(smem, v, p, make_work(v, w.m0 / BM, w.hq, w.b));
    } else {
        consume(smem, p, p, w);
    }
}

#include "portable_stream.cuh"

extern "C" __global__ void __launch_bounds__(SDPA_WARPS * 32, SDPA_MIN_BLOCKS)
sdpa_portable(const SdpaParams p) {
    extern __shared__ __align__(128) u8 smem[];
    if constexpr (STREAM) consume_stream(smem, p);
    else run_blocks(smem, p);
}
