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
// O's d-tiles permuted to match (decode_mma.cuh). Their descales fold into the softmax
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
//
// sdpa_decode below reads as the algorithm; decode_steps.cuh holds its steps (work tile,
// K/V ring with the paged loads, mask and softmax, epilogue), decode_mma.cuh the fragment math.
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

#include "decode_mma.cuh"
#include "decode_steps.cuh"

// One CTA: the work tile's Q fragments, then each warp's private pipeline over its keys (the
// K/V ring, S = Q.K^T, mask and online softmax, O += P.V), then the warps' merge and the write
// (decode_steps.cuh has each step).
extern "C" __global__ void __launch_bounds__(WARPS * 32, SDPA_MIN_BLOCKS)
sdpa_decode(const __grid_constant__ SdpaParams p0, const __grid_constant__ DecodeParams d) {
    extern __shared__ __align__(128) u8 smem_raw[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#if SDPA_VARLEN
    SdpaParams p = p0;  // the block's sequence (seq_view)
    const WorkTile t = work_tile(p, p0, d);
    if (t.row0 >= t.rows) return;  // past the sequence's rows: nothing to write
    if (d.splits > 1 && t.begin >= t.n_keys) return empty_split(p, d, t);
#else
    const SdpaParams& p = p0;
    const WorkTile t = work_tile(p, d);
#endif
    const KvScales sc = kv_scales(p, t);
    int pos[2], head[2], limit[2];  // this lane's rows g and g + 8
    lane_rows(p, t, g, pos, head, limit);
    u32 qa[D / 16][4];
    load_q(qa, p, t, pos, head, g, t4);

    // The warp's pipeline over its keys: a running O, raw max m and partial sum l per row.
    const WarpRing ring(t, smem_u32(smem_raw), warp);
    ring.fill(p, d, lane);
    float o[D / 8][4], m[2] = {-SDPA_INF, -SDPA_INF}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    const KvLanes kv(lane);
    for (int i = 0; i < ring.steps; ++i) {
        ring.advance(p, d, i, lane);
        const u32 k_tile = ring.slot(i), v_tile = k_tile + RAW_TILE;
        const int key0 = ring.key0(i);
        float s[KW / 8][4], alpha[2];
        qk_step(s, qa, k_tile, kv, lane);                          // S = Q.K^T
        softmax_step(s, m, l, alpha, key0, limit, t4, sc.sl2);      // mask; S -> P; m, l
        rescale_o(o, alpha);
        pv_step(o, s, v_tile, kv, lane);                           // O += P.V
        __syncwarp();  // every lane is done with the slot before it is refilled
    }
    cp_async_wait<0>();

    // The warps' merge through shared memory, then O and the LSE (or the split's partials).
    stash_warp(smem_raw, warp, o, m, l, g, t4);
    __syncthreads();
    merge_warps(p, d, t, smem_raw, sc);
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
