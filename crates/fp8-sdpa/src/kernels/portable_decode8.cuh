// The portable family's 8-bit K/V decode (portable.cu, step 2b).
#pragma once
#include "portable_load.cuh"

// ==== Step 2b: decode 8-bit K/V to 16-bit operands ===============================================
// The staged forms (see the map in portable.cu): decode_kv is the serial form's whole-tile
// decode (and the pipelined prologue's); OwnChunks deals a tile's chunks to the threads that
// copy and decode them (decoupled sync, split decode), decode_kv_all and load_kv_own decode
// and copy them; SplitDecode is the split decode's per-tile work, which compute_tile runs
// through its hooks.
// Fragment decode has no step of its own: compute_tile decodes each fragment beside its mma
// (frag_decode; Q's columns were stored in K's fragment order by load_q, qperm).

// 16 codes of K (to the compute type) or V (to P·V's type, pv_t) to two 16-byte chunks
// (8-bit K/V only: 16-bit K/V have no decoder).
__device__ __forceinline__ void decode_kv16(u32x4 in, u32x4& a, u32x4& b, bool is_v) {
    if constexpr (KV8) {
        if (is_v) decode16<kv_t, pv_t>(in, a, b);
        else decode16<kv_t, c_t>(in, a, b);
    }
}

// One 16-byte chunk of 8-bit codes (row `row`, chunk `ch` of an 8-bit tile at `src`) to the
// 16-bit chunks 2ch and 2ch + 1 of row `row` of the 16-bit tile at `dst`. Threads with
// ch % 8 >= 4 store the odd chunk first, so that the 8 threads of a store phase hit 8
// distinct bank groups (chunks 2ch and 2ch + 8 of a 256-byte row share banks).
__device__ __forceinline__ void decode_chunk(u32 src, u32 dst, int row, int ch, bool is_v) {
    if constexpr (KV8) {
        const u32x4 in = lds16(src + u32(row * D + ch * 16));
        u32x4 a, b;
        decode_kv16(in, a, b, is_v);
        const int flip = (ch >> 2) & 1;
        sts16(dst + T16::off(row, 2 * ch + flip), flip ? b : a);
        sts16(dst + T16::off(row, 2 * ch + 1 - flip), flip ? a : b);
    }
}

// 8-bit K/V tile in `slot` -> 16-bit staging pair `buf`, by computing threads [0, nthreads).
__device__ __forceinline__ void decode_kv(u8* smem, int slot, int buf, int tid, int nthreads) {
    if constexpr (KV8) {
        const u32 src = smem_u32(smem + OFF_KV + slot * 2 * KV_TILE);
        const u32 dst = smem_u32(smem + OFF_STG + buf * STG_BYTES);
        for (int ci = tid; ci < 2 * BN * CH8; ci += nthreads) {
            const int which = ci / (BN * CH8);  // 0: K, 1: V
            const int c = ci % (BN * CH8);
            decode_chunk(src + which * KV_TILE, dst + which * BN * ROW16, c / CH8, c % CH8, which == 1);
        }
    }
}

// The 16-byte chunks of an 8-bit K/V tile that one computing thread decodes, and under
// decoupled sync also copies (so that no other thread's copies need to have landed). Chunks
// are dealt in pairs of rows: in every 8 threads (one shared-memory phase), threads 0-3 take 4
// chunks of an even row and threads 4-7 4 chunks of the next row, from the other 64-byte half
// of the 128-byte bank window (ch = 4·(grp ^ half) + t). Loads then cover 32 distinct banks,
// and the swizzle (chunk ^ row % 8) puts the even row's outputs on even bank groups and the
// odd row's on odd ones, so neither store conflicts. Each thread's column is fixed and its
// rows are row0 plus compile-time steps, so all addresses after the first are immediates (the
// generic mapping cost ~110 instructions per tile: selects and addressing).
struct OwnChunks {
    static constexpr int NT = OWN_NT, PER_KV = OWN_PER_KV, PAIR = OWN_PAIR;
    static constexpr int COUNT = 2 * PER_KV / NT;  // chunks per thread per tile: K, then V
    static constexpr bool FITS = OWN_FITS;
    int row0, ch;  // the thread's first row and its chunk column
    __device__ __forceinline__ explicit OwnChunks(int tid) {
        const int u = tid % PAIR, t = u & 3, half = (u >> 2) & 1, grp = u >> 3;
        row0 = 2 * (tid / PAIR) + half;
        ch = CH8 >= 8 ? 4 * (grp ^ half) + t : t;
    }
};
// Chunk i of a thread (i < COUNT) is chunk tid + i·NT of the tile: in K (0) or V (1), and
// rows shifted by a multiple of 8 from row0, so the swizzle of row0 still applies.
static_assert(!DECOUPLED || OwnChunks::FITS, "decoupled sync: a tile's chunks deal evenly in row pairs");
#define OWN_WHICH(i) (((i) * OwnChunks::NT) / OwnChunks::PER_KV)
#define OWN_DROW(i) (2 * ((((i) * OwnChunks::NT) % OwnChunks::PER_KV) / OwnChunks::PAIR))

// Decode own chunk i (16 codes, `in`) into its two 16-bit chunks of a staging pair: this
// thread's first chunk of staging pair 0 has its halves at d0 and d1, and `pair` is the
// byte offset of the pair used.
__device__ __forceinline__ void store_own_chunk(u32 d0, u32 d1, u32 pair, int i, u32x4 in) {
    u32x4 a, b;
    decode_kv16(in, a, b, OWN_WHICH(i) == 1);
    const u32 o = pair + u32(OWN_WHICH(i) * BN * ROW16 + OWN_DROW(i) * ROW16);
    sts16(d0 + o, a);
    sts16(d1 + o, b);
}

// A thread's own chunks of an 8-bit tile in a ring slot, one at a time: load(i) reads chunk i
// (OWN_WHICH, OWN_DROW) from the slot, store(i, in) decodes it into its two 16-bit chunks of
// a staging pair, so that the split decode can put an mma block between the two. (The same
// steps as decode_kv_all's loop, which keeps its own copy: built on this helper, it changed
// ptxas's schedule of two measured pipelined 8-bit specs.)
struct OwnDecode {
    u32 s0, d0, d1;
    __device__ __forceinline__ OwnDecode(u8* smem, int slot, int buf, const OwnChunks& oc) {
        s0 = smem_u32(smem + OFF_KV + slot * 2 * KV_TILE) + u32(oc.row0 * D + oc.ch * 16);
        const u32 dst = smem_u32(smem + OFF_STG + buf * STG_BYTES);
        d0 = dst + T16::off(oc.row0, 2 * oc.ch);
        d1 = dst + T16::off(oc.row0, 2 * oc.ch + 1);
    }
    __device__ __forceinline__ u32x4 load(int i) const {
        return lds16(s0 + u32(OWN_WHICH(i) * KV_TILE + OWN_DROW(i) * D));
    }
    __device__ __forceinline__ void store(int i, u32x4 in) const { store_own_chunk(d0, d1, 0, i, in); }
};

// decode_kv by all NT computing threads with a fixed trip count (no per-thread loop exit), so
// that it can sit inside one basic block with the softmax (every registered pipelined spec:
// 128 or 256 threads; other counts fall back to decode_kv). Chunks [I0, I1) of each thread:
// all of them, or (split decode) the K half [0, COUNT / 2) or the V half.
template <int I0 = 0, int I1 = OwnChunks::COUNT>
__device__ __forceinline__ void decode_kv_all(u8* smem, int slot, int buf, int tid) {
    if constexpr (KV8 && OwnChunks::FITS) {
        const OwnChunks oc(tid);
        const u32 src = smem_u32(smem + OFF_KV + slot * 2 * KV_TILE);
        const u32 dst = smem_u32(smem + OFF_STG + buf * STG_BYTES);
        const u32 s0 = src + u32(oc.row0 * D + oc.ch * 16);
        const u32 d0 = dst + T16::off(oc.row0, 2 * oc.ch), d1 = dst + T16::off(oc.row0, 2 * oc.ch + 1);
#pragma unroll
        for (int i = I0; i < I1; ++i) {
            const int which = OWN_WHICH(i), drow = OWN_DROW(i);
            const u32x4 in = lds16(s0 + u32(which * KV_TILE + drow * D));
            u32x4 a, b;
            decode_kv16(in, a, b, which == 1);
            const u32 o = u32(which * BN * ROW16 + drow * ROW16);
            sts16(d0 + o, a);
            sts16(d1 + o, b);
        }
    } else {
        // Thread counts the pairing does not fit (no registered spec): the generic loop.
        decode_kv(smem, slot, buf, tid, OWN_NT);
    }
}

// Decoupled sync and split decode: this thread's own chunks [I0, I1) of 8-bit K/V tile `j`
// into ring slot `slot` (the chunks decode_kv_all reads). Rows past seq_kv are zero-filled,
// as in load_kv.
template <int I0 = 0, int I1 = OwnChunks::COUNT>
__device__ __forceinline__ void load_kv_own(u8* smem, const SdpaParams& p, const u8* k, const u8* v, int j,
                                            int slot, const OwnChunks& oc) {
    if constexpr (KV8 && OwnChunks::FITS) {
        const u32 base = smem_u32(smem + OFF_KV + slot * 2 * KV_TILE) + u32(oc.row0 * D + oc.ch * 16);
        const int r0 = j * BN + oc.row0;
        const long long ks = p.k_stride_s * (long long)sizeof(kv_t), vs = p.v_stride_s * (long long)sizeof(kv_t);
        const u8* kt = k + (long long)r0 * ks + oc.ch * 16;
        const u8* vt = v + (long long)r0 * vs + oc.ch * 16;
#pragma unroll
        for (int i = I0; i < I1; ++i) {
            const int which = OWN_WHICH(i), drow = OWN_DROW(i);
            const u8* src = which ? vt + drow * vs : kt + drow * ks;
            copy16(base + u32(which * KV_TILE + drow * D), src, r0 + drow < p.seq_kv);
        }
    }
}

// Fragment decode: four 8-bit codes to two f16 pairs (both mma run in f16 under FRAG: qk_t,
// pv_t; types.cuh).
template <typename K = kv_t> __device__ __forceinline__ void frag_decode(u32 w, u32& lo, u32& hi) {
    frag_decode4<K, half_t>(w, lo, hi);
}

// Split decode (see SPLIT_DECODE): this thread's share of tile j's decode work. Own chunks
// [0, HALF) are K, [HALF, COUNT) V.
// - v(), in tile j's softmax (compute_tile's `mid`): V of tile j (STAGES >= 2) or, RING1, of
//   tile j + 1 into the other staging pair; RING1 then copies tile j + 2's V into the slot's V
//   half (this thread copies only the chunks it decodes).
// - pre(), pv_load(kc), pv_store(kc) (compute_tile's `hk`), around tile j's P·V: K of tile
//   j + 1, chunk q riding in key block (q · BLOCKS) / HALF (loaded before the block's mma,
//   decoded and stored after them). With STAGES >= 2, pre() is the tile's second barrier
//   (every thread's V chunks of tile j are staged, and every warp is done with Q·Kᵀ, so the K
//   half is free); it then copies tile j + STAGES into the slot tile j leaves. RING1 copies
//   tile j + 2's K after the last block.
// (Measured on the H100: the V half inside Q·Kᵀ instead of the softmax was 0.5-2 %
// slower.) Past the last tile these decode a slot no copy is writing into a staging half
// nothing reads again in this work tile (unconditional, so that they stay in the softmax's and
// P·V's basic blocks).
struct SplitDecode {
    static constexpr int HALF = OwnChunks::COUNT / 2, BLOCKS = CN / 16;
    struct Held {
        u32x4 in[HALF > 0 ? HALF : 1];
    };
    u8* smem;
    const SdpaParams& p;
    const Work& w;
    const OwnChunks& oc;
    int j, tid;
    OwnDecode k_next;  // K of tile j + 1: ring slot -> staging pair
    __device__ __forceinline__ SplitDecode(u8* smem_, const SdpaParams& p_, const Work& w_, const OwnChunks& oc_, int j_,
                                           int tid_)
        : smem(smem_), p(p_), w(w_), oc(oc_), j(j_), tid(tid_),
          k_next(smem_, RING1 ? 0 : (j_ + 1) % STAGES, RING1 ? (j_ + 1) % 2 : 0, oc_) {}
    // RING1's commit groups run ..., V(j + 1), K(j + 1), V(j + 2), K(j + 2), ...: each half
    // waits for its own group with the other half's newest still in flight.
    __device__ __forceinline__ void v() const {
        if constexpr (RING1) {
            wait_groups<1>();
            decode_kv_all<HALF>(smem, 0, (j + 1) % 2, tid);
            if (j + 2 < w.n_tiles) load_kv_own<HALF>(smem, p, w.k, w.v, j + 2, 0, oc);
            commit();
        } else {
            decode_kv_all<HALF>(smem, j % STAGES, 0, tid);
        }
    }
    __device__ __forceinline__ void pre() const {
        if constexpr (RING1) {
            wait_groups<1>();
        } else {
            // Warps that skip a causal step meet this barrier outside compute_tile: so not
            // __syncthreads (bar.sync is .aligned: one instruction for the whole block).
            bar_sync_unaligned(BAR_SPLIT, CONSUMERS * 32);
            if (j + STAGES < w.n_tiles) load_kv_own(smem, p, w.k, w.v, j + STAGES, j % STAGES, oc);
            commit();
            wait_groups<STAGES - 1>();  // groups: Q, tiles 0 .. j + STAGES; tile j + 1 landed
        }
    }
    // Chunk q rides in block kc iff kc = floor(q · BLOCKS / HALF) (never when HALF is 0).
    __device__ __forceinline__ static bool rides(int q, int kc) {
        return kc * HALF <= q * BLOCKS && q * BLOCKS < (kc + 1) * HALF;
    }
    __device__ __forceinline__ Held pv_load(int kc) const {
        Held h;
#pragma unroll
        for (int q = 0; q < HALF; ++q)
            if (rides(q, kc)) h.in[q] = k_next.load(q);
        return h;
    }
    __device__ __forceinline__ void pv_store(int kc, const Held& h) const {
#pragma unroll
        for (int q = 0; q < HALF; ++q)
            if (rides(q, kc)) k_next.store(q, h.in[q]);
        if (RING1 && kc == BLOCKS - 1) {
            if (j + 2 < w.n_tiles) load_kv_own<0, HALF>(smem, p, w.k, w.v, j + 2, 0, oc);
            commit();
        }
    }
};
