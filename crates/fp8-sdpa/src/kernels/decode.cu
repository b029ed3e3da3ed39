// Decode family (sm_80 and up): few query rows against a long KV cache, split over CTAs.
//
// A CTA owns 16 packed query rows of one (batch, kv-head): row r is query position
// r / GROUP of query head hkv * GROUP + r % GROUP (GQA packing: K/V are read once per group),
// and one split of the keys. Its warps split the keys again: in key block i (TILE_N keys) warp
// w takes keys [i * TILE_N + w * KW, + KW) and runs a private pipeline over them (its own
// cp.async ring, no block barrier in the loop), with its own running max, sum and O. At the
// end the warps merge through shared memory; the CTA writes O and the LSE directly (one
// split) or its split's partial O (fp32, normalized) and LSE for `sdpa_decode_merge`.
//
// K/V come contiguous ([batch, seq, heads_kv, dim] through strides) or paged (a page table
// [batch, max_pages] of page indices into [pages, page_size, heads_kv, dim]); per-sequence
// key counts come from `seqlens_k` when given. 8-bit K/V (E4M3) land in the ring as bytes and
// are decoded in registers (fragment decode, as the portable family's FRAG): 8-bit ldmatrix
// gives each lane four codes that decode straight into mma B fragments, with Q's columns and
// O's d-tiles permuted to match (see s_step / pv_step). Their descales fold into the softmax
// scale (K) and the epilogue (V).
//
// A paged call trusts neither its table nor its lengths (the host's check may be off): each
// length is clamped to the table's capacity, so a sequence reads only slots [0, max_pages) of
// its row, and each page index to [0, pages), so a bad entry reads some page of the pools
// (wrong keys, never memory outside them).
//
// Variable-length batches (SDPA_VARLEN, a module of its own; runtime/varlen.rs, abi.cuh):
// blockIdx.z is sequence b, whose queries are the packed tokens [cu_seqlens_q[b],
// cu_seqlens_q[b + 1]) of Q and O and whose keys are the packed tokens [cu_seqlens_k[b],
// cu_seqlens_k[b + 1]) of K and V, or, paged, seqlens_k[b] keys through the block table
// (seq_view; every offset clamped to the packed tensors, a length to the table's capacity).
// The grid covers the longest sequence: a row block past the sequence's rows returns at
// once, and a split past its keys writes only -inf partial LSEs, which the merge skips.
// Partials and the LSE are [.., heads_q, total_q]. Causal aligns each sequence bottom-right.
#include "types.cuh"
#include "softmax.cuh"
#include "mma_sm80.cuh"
#include "abi.cuh"

typedef SDPA_Q_T T;       // Q and compute type (fp16 or bf16)
typedef SDPA_KV_T KvT;    // K/V storage: T or e4m3_t
typedef SDPA_O_T OutT;

#ifndef SDPA_VARLEN
#define SDPA_VARLEN 0
#endif

// The constants live in a namespace: under --device-as-default-execution-space a global-scope
// constexpr is a device global, and a global named SMEM collided with a symbol ptxas resolves
// at load time, so the driver rewrote the offsets of every shared-memory access (perf-notes:
// Decode family).
namespace dcfg {
constexpr int D = SDPA_HEAD_DIM;
constexpr int WARPS = SDPA_WARPS;
constexpr int TILE_N = SDPA_TILE_N;           // keys per CTA step
constexpr int KW = TILE_N / WARPS;            // keys per warp step
constexpr int STAGES = SDPA_STAGES;
constexpr bool KV8 = sizeof(KvT) == 1;
static_assert(SDPA_TILE_M == 16, "one m16 row tile per CTA");
static_assert(KW % 16 == 0 && STAGES >= 2, "warp steps of whole k16 fragments, a real ring");
static_assert(Same<T, half_t>::value || Same<T, bf16_t>::value, "16-bit Q");

// Shared memory per warp: the ring, K then V per stage, in swizzled rows (Tile16 rows of 2D
// bytes; 8-bit rows Tile8 rows of D bytes).
typedef Tile16<2 * D, true> Tile;
typedef Tile8<D> Tile8b;
constexpr u32 RAW_ROW = D * sizeof(KvT);
constexpr u32 RAW_TILE = KW * RAW_ROW;                    // one K or V step of one warp
constexpr u32 STAGE_BYTES = 2 * RAW_TILE;
constexpr u32 WARP_BYTES = STAGES * STAGE_BYTES;
// After the loop the same memory holds each warp's O (16 x D fp32) and row max / sum.
constexpr u32 MERGE_BYTES = 16 * D * 4 + 2 * 16 * 4;
constexpr u32 SMEM = (WARP_BYTES > MERGE_BYTES ? WARP_BYTES : MERGE_BYTES) * WARPS;
static_assert(SMEM == SDPA_SMEM_BYTES, "layout must match dynamic_smem_bytes()");
}  // namespace dcfg
using namespace dcfg;

struct DecodeParams {
    float* o_part;            // [splits, batch, heads_q, seq_q, D] fp32, null with one split
                              // (varlen: [splits, heads_q, total_q, D])
    float* lse_part;          // [splits, batch, heads_q, seq_q] natural log (varlen: [splits,
                              // heads_q, total_q])
    const int* block_table;   // [batch, max_pages] or null (contiguous K/V)
    const int* seqlens_k;     // [batch] or null (every sequence has seq_kv keys)
    int max_pages, page_size; // paged: K/V's batch stride is the page stride
    int splits, split_keys;   // keys per split: a multiple of TILE_N
    int pages;                // paged: pages in the K/V pools (>= 1), the clamp of every entry
};

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
            // slot < max_pages (keys < the clamped length). The entry is clamped to the pools'
            // pages: as unsigned, a negative one is huge, so one min maps every bad entry to
            // the last page.
            const i64 page = min(u32(d.block_table[i64(b) * d.max_pages + slot]), u32(d.pages - 1));
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

// Four 8-bit codes to two pairs of T (types.cuh; a template so 16-bit builds never
// instantiate a decoder).
template <typename K = KvT> __device__ __forceinline__ void decode4(u32 w, u32& lo, u32& hi) {
    frag_decode4<K, T>(w, lo, hi);
}

// S += Q.K^T over one warp step from an 8-bit K tile. ldmatrix (b16) over 8 keys x 16 codes
// gives lane (g, t) codes d = 4t..4t+3 of key g: the B fragment {b0, b1} of a k16 block whose k
// order is d 4t, 4t+1 (k 2t, 2t+1) and d 4t+2, 4t+3 (k 2t+8, 2t+9). Q's A fragments are loaded
// in that order (q_col), so S is unchanged. One x4 covers four k16 blocks of 8 keys.
__device__ __forceinline__ void s_step8(float (&s)[KW / 8][4], const u32 (&qa)[D / 16][4], u32 k_tile, int lane) {
    const int sw = Tile8b::swz(lane & 7), c = (lane >> 3) ^ sw;  // this lane's row and chunk
#pragma unroll
    for (int n = 0; n < KW / 8; ++n)
#pragma unroll
        for (int kq = 0; kq < D / 64; ++kq) {
            u32 w[4];
            ldmatrix_x4(w, k_tile + u32((8 * n + (lane & 7)) * D + ((c ^ (4 * kq)) << 4)));
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                u32 b0, b1;
                decode4(w[m], b0, b1);
                Mma<T>::run(s[n], qa[4 * kq + m], b0, b1);
            }
        }
}

// O += P.V over one warp step from an 8-bit V tile. ldmatrix .trans over 8 keys x 16 codes
// gives lane (g, t) bytes {key 2t: d 2g, 2g+1; key 2t+1: d 2g, 2g+1}; one byte permute pairs
// the two keys at d 2g (low half) and at d 2g+1 (high half), which decode to b0 of two d-tiles:
// O's tile 2c holds the even columns of chunk c, tile 2c + 1 the odd ones (the epilogue puts
// them back in order). One x4 covers 16 keys x 2 chunks.
__device__ __forceinline__ void pv_step8(float (&o)[D / 8][4], const float (&s)[KW / 8][4], u32 v_tile, int lane) {
    const int sw = Tile8b::swz(lane & 7);
    const int row = (lane & 7) + 8 * ((lane >> 3) & 1), c = (lane >> 4) ^ sw;
#pragma unroll
    for (int kk = 0; kk < KW / 16; ++kk) {
        u32 pa[4];
        acc_to_a<T>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int cc = 0; cc < D / 32; ++cc) {
            u32 w[4];
            ldmatrix_x4_trans(w, v_tile + u32((16 * kk + row) * D + ((c ^ (2 * cc)) << 4)));
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                u32 e0, o0, e1, o1;
                decode4(prmt(w[2 * h], 0u, 0x3120u), e0, o0);      // keys 2t, 2t+1
                decode4(prmt(w[2 * h + 1], 0u, 0x3120u), e1, o1);  // keys 2t+8, 2t+9
                const int ch = 2 * cc + h;
                Mma<T>::run(o[2 * ch], pa, e0, e1);
                Mma<T>::run(o[2 * ch + 1], pa, o0, o1);
            }
        }
    }
}

// The 16-bit forms: K and V tiles in Tile16 rows, read straight into fragments.
__device__ __forceinline__ void s_step16(float (&s)[KW / 8][4], const u32 (&qa)[D / 16][4], u32 k_tile,
                                         const LaneAddr<Tile>& k_addr) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int n = 0; n < KW / 16; ++n) {
            u32 kb[4];
            ldmatrix_x4(kb, k_addr.at(k_tile, 16 * n, 2 * kk));
            Mma<T>::run(s[2 * n], qa[kk], kb[0], kb[1]);
            Mma<T>::run(s[2 * n + 1], qa[kk], kb[2], kb[3]);
        }
}
__device__ __forceinline__ void pv_step16(float (&o)[D / 8][4], const float (&s)[KW / 8][4], u32 v_tile,
                                          const LaneAddr<Tile>& v_addr) {
#pragma unroll
    for (int kk = 0; kk < KW / 16; ++kk) {
        u32 pa[4];
        acc_to_a<T>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
            u32 vb[4];
            ldmatrix_x4_trans(vb, v_addr.at(v_tile, 16 * kk, 2 * j));
            Mma<T>::run(o[2 * j], pa, vb[0], vb[1]);
            Mma<T>::run(o[2 * j + 1], pa, vb[2], vb[3]);
        }
    }
}

// Q column of A-fragment register i (row g or g + 8 by i & 1) in k16 block kk for lane t4:
// 16-bit K/V take the mma's order; 8-bit K/V the fragment decode's (see s_step8).
__device__ __forceinline__ int q_col(int kk, int i, int t4) {
    return KV8 ? 16 * kk + 4 * t4 + 2 * (i >> 1) : 16 * kk + 2 * t4 + 8 * (i >> 1);
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

extern "C" __global__ void __launch_bounds__(WARPS * 32, SDPA_MIN_BLOCKS)
sdpa_decode(const __grid_constant__ SdpaParams p0, const __grid_constant__ DecodeParams d) {
    extern __shared__ __align__(128) u8 smem_raw[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#if SDPA_VARLEN
    SdpaParams p = p0;  // the block's sequence (seq_view)
    const int tok0 = seq_view(p, d, blockIdx.z);
    const int group = p.heads_q / p.heads_kv, rows = p.seq_q * group;
    const int row_blocks = (p0.seq_q * group + 15) / 16;  // laid out for the longest sequence
    const int split = blockIdx.x, hkv = blockIdx.y / row_blocks, row0 = (blockIdx.y % row_blocks) * 16;
    const int b = blockIdx.z;
    const int n_keys = p.seq_kv;
#else
    const SdpaParams& p = p0;
    const int group = p.heads_q / p.heads_kv, rows = p.seq_q * group;
    const int row_blocks = (rows + 15) / 16;
    const int split = blockIdx.x, hkv = blockIdx.y / row_blocks, row0 = (blockIdx.y % row_blocks) * 16;
    const int b = blockIdx.z;
    const int n_keys = d.seqlens_k ? paged_keys(d, b) : p.seq_kv;  // seqlens_k: paged only
#endif
    // begin + split_keys may pass INT_MAX near 2^31 keys: the end is clamped in 64 bits.
    const int begin = split * d.split_keys, end = int(min(i64(n_keys), i64(begin) + d.split_keys));
#if SDPA_VARLEN
    if (row0 >= rows) return;  // past the sequence's rows: nothing to write
    if (d.splits > 1 && begin >= n_keys) {
        // Past the sequence's keys: a -inf partial LSE, which the merge skips (its O is never
        // read).
        const int rr = row0 + int(threadIdx.x);
        if (threadIdx.x < 16 && rr < rows) {
            const int hq = hkv * group + rr % group;
            d.lse_part[(i64(split) * p.heads_q + hq) * p.total_q + tok0 + rr / group] = -SDPA_INF;
        }
        return;
    }
#endif
    float kd = 1.f, vd = 1.f;
    if constexpr (KV8) {
        const int i = b * p.kv_descale_stride_b + hkv;
        kd = p.k_descale[i];
        vd = p.v_descale[i];
    }
    const float sl2 = p.scale_log2 * kd;

    // This lane's two rows (g, g + 8): query position, head, and the first invisible key.
    int pos[2], head[2], limit[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + 8 * r;
        pos[r] = row / group;
        head[r] = hkv * group + row % group;
        limit[r] = row < rows ? end : begin;  // padding rows see nothing
#if SDPA_CAUSAL
        limit[r] = min(limit[r], pos[r] + n_keys - p.seq_q + 1);  // bottom-right
#endif
    }

    // Q as m16n8k16 A fragments, straight from global (read once per CTA).
    u32 qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = i & 1, col = q_col(kk, i, t4);
            const bool ok = row0 + g + 8 * r < rows;
            const T* q = reinterpret_cast<const T*>(p.q) + b * p.q_stride_b + (ok ? pos[r] : 0) * p.q_stride_s +
                         (ok ? head[r] : 0) * p.q_stride_h + col;
            qa[kk][i] = ok ? *reinterpret_cast<const u32*>(q) : 0u;
        }

    const u32 base = smem_u32(smem_raw) + warp * WARP_BYTES;
    const int steps = end > begin ? (end - begin + TILE_N - 1) / TILE_N : 0;
    auto key0_of = [&](int i) { return begin + i * TILE_N + warp * KW; };
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (i < steps) load_step(p, d, base + i * STAGE_BYTES, b, hkv, key0_of(i), end, lane);
        cp_async_commit();
    }

    float o[D / 8][4], m[2] = {-SDPA_INF, -SDPA_INF}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    const LaneAddr<Tile> k_addr((lane % 8) + 8 * (lane / 16), (lane / 8) % 2);
    const LaneAddr<Tile> v_addr((lane % 8) + 8 * ((lane / 8) % 2), lane / 16);

    for (int i = 0; i < steps; ++i) {
        cp_async_wait<STAGES - 2>();
        __syncwarp();
        {   // refill the slot computed in the previous step
            const int next = i + STAGES - 1;
            if (next < steps) load_step(p, d, base + (next % STAGES) * STAGE_BYTES, b, hkv, key0_of(next), end, lane);
            cp_async_commit();
        }
        const u32 k_tile = base + (i % STAGES) * STAGE_BYTES, v_tile = k_tile + RAW_TILE;
        const int key0 = key0_of(i);

        // S = Q.K^T over this warp's KW keys: KW / 8 accumulators of 16 x 8.
        float s[KW / 8][4];
#pragma unroll
        for (int n = 0; n < KW / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        if constexpr (KV8) s_step8(s, qa, k_tile, lane);
        else s_step16(s, qa, k_tile, k_addr);

        // Mask, then the online softmax in base 2 (row r of this lane: g + 8r).
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = m[r];
#pragma unroll
            for (int n = 0; n < KW / 8; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float& x = s[n][2 * r + e];
                    if (key0 + 8 * n + 2 * t4 + e >= limit[r]) x = -SDPA_INF;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == -SDPA_INF ? 0.f : mx * sl2;
            alpha[r] = exp2_fast(m[r] * sl2 - ms);
            m[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < KW / 8; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float& x = s[n][2 * r + e];
                    x = exp2_fast(fmaf(x, sl2, -ms));
                    sum += x;
                }
            l[r] = l[r] * alpha[r] + sum;
        }
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[j][e] *= alpha[e >> 1];

        // O += P.V: P's accumulators are the A fragments of KW / 16 k16 steps.
        if constexpr (KV8) pv_step8(o, s, v_tile, lane);
        else pv_step16(o, s, v_tile, v_addr);
        __syncwarp();  // every lane is done with the slot before it is refilled
    }
    cp_async_wait<0>();

    // ---- merge the warps: each stores O (16 x D fp32), m and l; then every thread takes
    // columns of the 16 rows.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    __syncthreads();  // every warp's ring is idle: the memory becomes the merge area
    const u32 mine = smem_u32(smem_raw) + warp * MERGE_BYTES;
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
    __syncthreads();
    const u32 all = smem_u32(smem_raw);
    for (int e = threadIdx.x; e < 16 * D; e += WARPS * 32) {
        const int row = e / D, col = e % D, rr = row0 + row;
        if (rr >= rows) continue;
        float mx = -SDPA_INF;
        for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, lds_f32(all + w * MERGE_BYTES + 16 * D * 4 + row * 4));
        const float ms = mx == -SDPA_INF ? 0.f : mx * sl2;
        float sum = 0.f, acc = 0.f;
        for (int w = 0; w < WARPS; ++w) {
            const u32 at = all + w * MERGE_BYTES;
            const float f = exp2_fast(lds_f32(at + 16 * D * 4 + row * 4) * sl2 - ms);
            sum += lds_f32(at + 16 * D * 4 + 64 + row * 4) * f;
            acc += lds_f32(at + (row * D + col) * 4) * f;
        }
        const int ps = rr / group, hq = hkv * group + rr % group;
        // A row with no visible key is 0 (LSE -inf); a NaN score makes sum NaN, which must
        // reach the output rather than be read as "no key".
        const float out = sum == 0.f ? 0.f : acc / sum * vd;
        const float lse = sum == 0.f ? -SDPA_INF : (ms + __log2f(sum)) * 0.69314718055994531f;
#if SDPA_VARLEN
        const i64 row_id = i64(hq) * p.total_q + tok0 + ps;  // [heads_q, total_q]
#else
        const i64 row_id = (i64(b) * p.heads_q + hq) * p.seq_q + ps;  // [batch, heads_q, seq_q]
#endif
        if (d.splits == 1) {
            OutT* dst = reinterpret_cast<OutT*>(p.o) + b * p.o_stride_b + ps * p.o_stride_s + hq * p.o_stride_h + col;
            *dst = from_float<OutT>(out);
            if (p.lse && col == 0) p.lse[row_id] = lse;
        } else {
#if SDPA_VARLEN
            const i64 part = i64(split) * p.heads_q * p.total_q + row_id;
#else
            const i64 part = i64(split) * p.batch * p.heads_q * p.seq_q + row_id;
#endif
            d.o_part[part * D + col] = out;
            if (col == 0) d.lse_part[part] = lse;
        }
    }
}

// Merges the splits' partial outputs by log-sum-exp: one warp per (batch, head, query) row
// (varlen: per (head, packed token) row).
extern "C" __global__ void __launch_bounds__(128)
sdpa_decode_merge(const __grid_constant__ SdpaParams p, const __grid_constant__ DecodeParams d) {
#if SDPA_VARLEN
    const i64 rows = i64(p.heads_q) * p.total_q;
#else
    const i64 rows = i64(p.batch) * p.heads_q * p.seq_q;
#endif
    const i64 row_id = i64(blockIdx.x) * 4 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row_id >= rows) return;
    const i64 stride = rows;  // between splits
    float mx = -SDPA_INF;
    for (int s = 0; s < d.splits; ++s) mx = fmaxf(mx, d.lse_part[s * stride + row_id]);
    const float ms = mx == -SDPA_INF ? 0.f : mx;
    float acc[D / 32], sum = 0.f;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) acc[i] = 0.f;
    for (int s = 0; s < d.splits; ++s) {
        const float l = d.lse_part[s * stride + row_id];
#if SDPA_VARLEN
        // A split past the sequence's keys wrote its LSE only (-inf: weight 0); a split whose
        // rows saw no key wrote O = 0 with it, so skipping both changes nothing.
        if (l == -SDPA_INF) continue;
#endif
        const float w = __expf(l - ms);
        sum += w;
        const float* src = d.o_part + (s * stride + row_id) * D;
#pragma unroll
        for (int i = 0; i < D / 32; ++i) acc[i] += w * src[lane + 32 * i];
    }
#if SDPA_VARLEN
    const int tok = int(row_id % p.total_q), hq = int(row_id / p.total_q);
    OutT* dst = reinterpret_cast<OutT*>(p.o) + i64(tok) * p.o_stride_s + hq * p.o_stride_h;
#else
    const int ps = int(row_id % p.seq_q), hq = int(row_id / p.seq_q % p.heads_q), b = int(row_id / (i64(p.seq_q) * p.heads_q));
    OutT* dst = reinterpret_cast<OutT*>(p.o) + b * p.o_stride_b + ps * p.o_stride_s + hq * p.o_stride_h;
#endif
#pragma unroll
    for (int i = 0; i < D / 32; ++i) dst[lane + 32 * i] = from_float<OutT>(sum == 0.f ? 0.f : acc[i] / sum);
    if (p.lse && lane == 0) p.lse[row_id] = sum == 0.f ? -SDPA_INF : ms + __logf(sum);
}
