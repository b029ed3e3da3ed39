// The portable family's compile-time modes (portable.cu): one define per Variant field, what
// follows from them, the shared-memory layout, and the helpers every step uses.
#pragma once
#include "prims.cuh"
#include "abi.cuh"

#ifndef SDPA_HEAD_DIM
#error "SDPA_HEAD_DIM must be defined"
#endif
#ifndef SDPA_VARLEN
#define SDPA_VARLEN 0
#endif

typedef SDPA_Q_T q_t;
typedef SDPA_KV_T kv_t;
typedef SDPA_O_T o_t;
typedef SDPA_COMPUTE_T c_t;
template <bool B, typename T, typename F> struct Pick { typedef T type; };
template <typename T, typename F> struct Pick<false, T, F> { typedef F type; };

// ==== Configuration: one define per Variant field (variant.rs), and what follows from them ====
namespace cfg {
// ---- tile shape and the seeds' toggles ----
constexpr int D = SDPA_HEAD_DIM;
constexpr int BM = SDPA_TILE_M;
constexpr int BN = SDPA_TILE_N;
constexpr int WARPS = SDPA_WARPS;
constexpr int CONSUMERS = WARPS;          // every warp computes
constexpr int R = BM / (16 * CONSUMERS);  // m16 fragments per warp
constexpr int STAGES = SDPA_STAGES;
constexpr bool CP_ASYNC = SDPA_CP_ASYNC != 0;
constexpr bool TC_PV = SDPA_TC_PV != 0;
constexpr bool FAST_EXP = SDPA_FAST_EXP != 0;
// Sync policy 0 block, 1 light, 2 decoupled (light's step syncs plus no K/V-loop barrier).
constexpr bool LIGHT = SDPA_SYNC_POLICY >= 1;
constexpr bool DECOUPLED = SDPA_SYNC_POLICY == 2;
constexpr bool SWZ = SDPA_SWIZZLE != 0;
constexpr bool CAUSAL = SDPA_CAUSAL != 0;
// Variable-length batches: a compile mode of its own, built only for varlen calls
// (runtime/varlen.rs). As a runtime branch on cu_seqlens_q, the per-sequence bases and lengths
// (loaded, so no longer rematerializable from the parameters) cost the dense kernels 4-12
// registers and made 12 registered specs spill; compiled out, the dense kernels are unchanged.
constexpr bool VARLEN = SDPA_VARLEN != 0;

// ---- Hopper's tiles ----
// Half steps: a tile is copied and handed over (one barrier) whole, and computed in two steps
// of BN / 2 keys, so the score tile S takes half the registers (a 128-key tile at 32 rows per
// warp: 64 instead of 128).
constexpr bool HALF_STEPS = SDPA_HALF_STEPS != 0;
constexpr int CN = HALF_STEPS ? BN / 2 : BN;  // keys per compute step
// Paired rows (32 rows per warp): warp w owns the m16 fragments w and 2·CONSUMERS - 1 - w of
// the block instead of 2w and 2w + 1, so that under causal every warp has the same number of
// visible (fragment, key step) pairs on the diagonal, and a warp computes only the fragments a
// step does not mask entirely (compute_tile<1>: the second). Without it the bottom warps carry
// the diagonal while the top ones idle.
constexpr bool PAIRED = SDPA_PAIRED_ROWS != 0;
// The stream (persistent + decoupled, consume_stream): a block runs its work tiles' K/V tiles
// as one stream through the ring and the staging buffers, so the next work tile's first tiles
// are copied and decoded while the current one finishes, and no barrier separates work tiles.
// Each warp loads its own Q rows (double-buffered unless Q sits in registers), so only the warp
// itself waits for its next Q. Persistent blocks exist only as the stream (the persistent
// grid with block or light sync was retired: no default used it).
constexpr bool PERSISTENT = SDPA_PERSISTENT != 0;
constexpr bool STREAM = DECOUPLED && PERSISTENT;
// Q fragments (R·D/4 registers) stay in registers for the whole KV loop with 16 rows per warp
// and D <= 128 (16 or 32 registers); with 32 rows per warp the O and S accumulators already
// take most of the budget, so Q is re-read from shared memory (ldmatrix) per tile. At D64 the
// stream keeps Q in registers too (32), so that one Q buffer suffices for its 128-key tile.
constexpr bool Q_IN_REGS = (R == 1 && D <= 128) || (STREAM && D == 64);

// ---- 8-bit inputs: which decode (see the map in portable.cu) ----
constexpr bool KV8 = sizeof(kv_t) == 1;
constexpr bool Q8 = sizeof(q_t) == 1;
constexpr bool FRAG = KV8 && SDPA_FRAG_DECODE != 0;
constexpr bool STAGED = KV8 && !FRAG;
// P·V's operand type. 8-bit V decodes exactly to f16 (every E4M3 value and every u - 128 is
// an f16), so with 8-bit K/V P·V runs in f16 even under bf16 compute: V skips the f16 -> bf16
// step of the decode (3 of its 4 instructions per pair), and P in [0, 2^8] keeps 11 bits
// instead of 8.
typedef Pick<KV8, half_t, c_t>::type pv_t;
// Q·Kᵀ's operand type: the compute type (Q is not exact in f16), except under fragment decode,
// which runs it in f16 so that K's decode is one conversion per pair (to bf16 it is four,
// which cost 8-12 %): 8-bit Q and E4M3 K are exact in f16; a bf16 Q is stored as
// f16 at a per-row power of two (ROWSC), folded back into the softmax's scale.
typedef Pick<FRAG, half_t, c_t>::type qk_t;
constexpr bool ROWSC = FRAG && !Q8 && Same<q_t, bf16_t>::value;
// Pipelined decode (staged, >= 2 stages, D <= 128): tile j + 1 is decoded into the other of
// two staging buffers right after tile j's barrier, inside tile j's softmax: one barrier per
// tile, and one warp's decode overlaps the others' mma. D256 keeps one staging buffer (two
// would not fit sm_86/89's 99 KB at m64): the split decode below.
constexpr bool PIPE_DECODE = STAGED && STAGES >= 2 && D <= 128;
constexpr int CH16 = D * 2 / 16;  // 16-byte chunks per 16-bit row
constexpr int CH8 = D / 16;       // 16-byte chunks per 8-bit row (dense rows)
// Whether a K/V tile's 16-byte 8-bit chunks deal evenly over nt threads in row pairs (see
// OwnChunks), so that each thread can copy and decode its own chunks.
constexpr bool own_fits(int nt) {
    return nt > 0 && (BN * CH8) % nt == 0 && nt % (2 * CH8) == 0 && (2 * nt / (2 * CH8)) % 8 == 0;
}
constexpr int OWN_NT = CONSUMERS * 32, OWN_PER_KV = BN * CH8, OWN_PAIR = 2 * CH8;
constexpr bool OWN_FITS = own_fits(OWN_NT);
// Split decode (staged where the pipelined decode does not fit: D256). K and V halves are
// decoded in different phases of a tile by the threads that copied the chunks: a V half inside
// the tile's softmax, a K half inside its P·V, a chunk per 16-key block between the mma, so
// that the decode fills the softmax's latency and the mma stream instead of running as a phase
// of its own between two barriers (SplitDecode). Two forms:
// - STAGES >= 2: one staging pair, two barriers per tile.
// - STAGES == 1 at D256 (RING1): two staging pairs and a single 8-bit ring slot whose K and V
//   halves are refilled separately, as soon as this thread has decoded its chunks of them: one
//   barrier per tile, and each half's copy has a whole tile to land; 224 KB, where two pairs
//   beside a 2-deep ring (256 KB) do not fit.
constexpr bool SPLIT_BASE = STAGED && !PIPE_DECODE && CP_ASYNC && TC_PV && !HALF_STEPS && OWN_FITS;
constexpr bool RING1 = SPLIT_BASE && STAGES == 1 && D == 256;
constexpr bool SPLIT_DECODE = SPLIT_BASE && (STAGES >= 2 || RING1);
// Decoupled sync decodes tile j + 2 during tile j into one of four staging buffers, so that a
// warp may run up to one tile ahead of the slowest (see consume, portable.cu).
constexpr int AHEAD = DECOUPLED ? 2 : 1;

// ---- shared memory, in bytes; KernelSpec::dynamic_smem_bytes() computes the same total ----
typedef Tile16<D * 2, SWZ> T16;  // 16-bit tiles: Q, K/V (16-bit inputs), staging
typedef Tile8<D> T8;             // 8-bit ring tiles under fragment decode (mma_sm80.cuh)
constexpr int ROW16 = T16::STRIDE;
constexpr int KV_TILE = KV8 ? BN * D : BN * ROW16;
constexpr int STG_BUFS = STAGED ? (DECOUPLED ? 4 : (PIPE_DECODE || RING1) ? 2 : 1) : 0;
constexpr int STG_BYTES = 2 * BN * ROW16;  // one 16-bit K and V staging pair
// Bytes per key row of the K/V tiles the loop computes from: 8-bit ring rows under fragment
// decode, else 16-bit rows (the ring's, or staging's).
constexpr int KV_ROW = FRAG ? D : ROW16;
constexpr int P_ROW = BN + 4;  // fp32 P rows of the scalar P·V path, padded
constexpr int Q_BUFS = STREAM && !Q_IN_REGS ? 2 : 1;
constexpr int Q_BYTES = BM * ROW16;
constexpr int OFF_Q = 0;                                            // Q_BUFS x Q
constexpr int OFF_KV = OFF_Q + Q_BUFS * Q_BYTES;                    // STAGES x {K, V}
constexpr int OFF_STG = OFF_KV + STAGES * 2 * KV_TILE;              // 16-bit K, V (8-bit inputs)
constexpr int OFF_P = OFF_STG + STG_BUFS * STG_BYTES;               // scalar P·V only
constexpr int OFF_MBAR = OFF_P + (TC_PV ? 0 : BM * P_ROW * 4);      // decoupled: DONE[buffer]
constexpr int OFF_QSC = OFF_MBAR + (DECOUPLED ? 8 * STG_BUFS : 0);  // ROWSC: 2^-k per Q row
constexpr int SMEM = OFF_QSC + (ROWSC ? 4 * BM : 0);
static_assert(SMEM == SDPA_SMEM_BYTES, "shared-memory layout differs from KernelSpec::dynamic_smem_bytes()");

// Named barrier id of the split decode's second barrier (0 is __syncthreads).
constexpr int BAR_SPLIT = 1;

// ---- softmax ----
// Threshold rescale: the running row max (log2 units) moves only when a tile's max exceeds it
// by more than this, so P stays <= 2^8.
constexpr float RESCALE_TAU = 8.f;
// Skip the O multiply (warp vote + branch) when no row of the warp moved, only where the
// multiply is expensive relative to the tile: a warp-tile is R·D·BN/64 mma and the multiply
// R·D/2 FMULs per lane, i.e. 32/BN FMUL per mma whatever R and D. The branch splits the softmax
// from P·V into two basic blocks, so the V ldmatrix, the packing and the FMULs can no longer
// fill the softmax's latency (measured: m128.n64.w8 at D128 ~15 % slower; the D64 default lost
// 3-4 %). So only at 32 rows per warp and 32-key steps (one FMUL per mma: the D128 default).
constexpr bool RESCALE_SKIP = R == 2 && CN <= 32;
// Causal: a warp skips the key steps that are masked for all its rows (see consume, portable.cu). Only
// where compute_tile has no block barrier inside (light or decoupled sync, tensor-core P·V),
// since a skipping warp must not miss one; not with the barrier-coupled pipelined decode,
// whose skip branch needs a second copy of the decode and made two registered tiles spill;
// and only from D128 or with paired rows (perf-notes: causal warp skip): D128 causal S 1k f16
// +5 %, 8-bit 256-row tile S 4k +3 to +6 %; D64 lost 1.5-4 % even at S 16k. Not in the stream:
// its D128 causal tile spilled 24 bytes with the skip.
constexpr bool SKIP_MASKED = !STREAM && CAUSAL && LIGHT && TC_PV && (!PIPE_DECODE || DECOUPLED) && (D >= 128 || PAIRED);

static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
static_assert(R == 1 || R == 2, "16 or 32 query rows per computing warp");
static_assert(BM == 16 * R * CONSUMERS, "tile_m = 16 * R * computing warps");
static_assert(BN % 16 == 0 && BN <= 128, "tile_n 32, 64 or 128");
static_assert(STAGES >= 1 && STAGES <= 4, "1..4 stages");
static_assert(CP_ASYNC || STAGES == 1, "a multi-stage ring needs cp.async");
static_assert(!PAIRED || (R == 2 && TC_PV && !STREAM), "paired rows: 32 rows per warp, tensor-core P·V, not the stream");
static_assert(!FRAG || CN % 32 == 0, "fragment decode: K's ldmatrix x4 covers 32 keys per step");
static_assert(!FRAG || ((D <= 128 || R == 1) && TC_PV && CP_ASYNC && SWZ && !DECOUPLED),
              "fragment decode: D 64 or 128 (256 at 16 rows per warp), tensor-core P·V, cp.async, swizzle, light or block sync");
static_assert(!DECOUPLED || (PIPE_DECODE && STAGES >= 3 && TC_PV),
              "decoupled sync: 8-bit K/V pipelined decode, >= 3 stages");
static_assert(!PERSISTENT || DECOUPLED, "persistent blocks: only the stream (decoupled sync)");
static_assert(!VARLEN || !STREAM, "variable-length batches: not the stream");
static_assert(!STREAM || !Q8, "the stream: 16-bit Q (FP8-KV)");
}  // namespace cfg
using namespace cfg;

// ==== Helpers: a warp's rows, barriers, copies ===================================================
// Block-local first row of fragment mi of computing warp `warp`.
__device__ __forceinline__ int frag_row(int warp, int mi) {
    if constexpr (PAIRED) return 16 * (mi == 0 ? warp : 2 * CONSUMERS - 1 - warp);
    else return warp * 16 * R + 16 * mi;
}
// The warp's first row (fragment 0), and fragment mi's offset from it.
__device__ __forceinline__ int warp_row0(int m0, int warp) { return m0 + frag_row(warp, 0); }
__device__ __forceinline__ int frag_off(int warp, int mi) {
    if constexpr (PAIRED) return mi == 0 ? 0 : 16 * (2 * CONSUMERS - 1 - 2 * warp);
    else return 16 * mi;
}

// All threads of the block.
__device__ __forceinline__ void consumer_sync() { __syncthreads(); }
// The Block policy's extra barrier between steps (none under Light).
__device__ __forceinline__ void step_sync() {
    if constexpr (!LIGHT) consumer_sync();
}

// One 16-byte chunk from global to shared: cp.async (zero-filled when !valid) or a plain
// load through registers.
__device__ __forceinline__ void copy16(u32 dst, const u8* src, bool valid) {
    if constexpr (CP_ASYNC) {
        cp_async16(dst, src, valid);
    } else {
        u32x4 v = {0u, 0u, 0u, 0u};
        if (valid) v = ldg16(src);
        sts16(dst, v);
    }
}
__device__ __forceinline__ void commit() {
    if constexpr (CP_ASYNC) cp_async_commit();
}
template <int N> __device__ __forceinline__ void wait_groups() {
    if constexpr (CP_ASYNC) cp_async_wait<(N < 0 ? 0 : N)>();
}
