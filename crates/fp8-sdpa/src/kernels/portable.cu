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
// operands (section "Step 2b"), in one of these forms:
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
// What the shipped defaults add (each in use; docs/results/2026-11-26-portable-round27/
// inventory.txt says where): half steps (HALF_STEPS), paired rows (PAIRED), decoupled sync
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
// Several helpers keep a copy of code that a shared form would also serve (consume and
// tile_steps, load_q and load_q_warp, decode_kv_all and OwnDecode): sharing them changed
// ptxas's schedule of measured kernels. The SASS of every shipped spec is compared before and
// after each refactor (scripts/sass-compare.py).
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

// ---- 8-bit inputs: which decode (see the header) ----
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
// warp may run up to one tile ahead of the slowest (see consume).
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
// Causal: a warp skips the key steps that are masked for all its rows (see consume). Only
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

// ==== Step 1: load Q =============================================================================
// Q tile (rows m0..m0+BM) to shared memory as 16-bit compute values, by computing threads.
// 16-bit Q: cp.async (or plain copies); 8-bit Q: load, decode, store. Rows past seq_q are 0.
template <int NTH>
__device__ __forceinline__ void load_q(u8* smem, const SdpaParams& p, const Work& w, int tid) {
    const u8* q = (const u8*)p.q + ((long long)w.b * p.q_stride_b + (long long)w.hq * p.q_stride_h) * sizeof(q_t);
    const long long qs = p.q_stride_s * (long long)sizeof(q_t);
    const u32 base = smem_u32(smem + OFF_Q);
    if constexpr (FRAG && !Q8) {
        // Fragment decode: through registers, a 16-column block (two chunks) at a time, so
        // that its column pairs can be stored in K's fragment order (qperm). Every load is
        // issued before the first store, as for 8-bit Q below.
        constexpr int CB = CH16 / 2;  // 16-column blocks per row
        static_assert(NTH % CB == 0 && (BM * CB) % NTH == 0, "Q blocks deal evenly over the threads");
        constexpr int RS = NTH / CB, PER = BM * CB / NTH;
        const int row0 = tid / CB, cb = tid % CB;
        const u8* src = q + (long long)(w.m0 + row0) * qs + cb * 32;
        u32x4 in[PER][2];
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            in[i][0] = in[i][1] = u32x4{0u, 0u, 0u, 0u};
            if (w.m0 + row0 + i * RS < p.seq_q) {
                in[i][0] = ldg16(src + i * RS * qs);
                in[i][1] = ldg16(src + i * RS * qs + 16);
            }
        }
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int row = row0 + i * RS;
            if constexpr (ROWSC) {
                // bf16 Q to f16 at 2^k per row (types.cuh; the CB threads of a row are adjacent
                // lanes); 2^-k goes to shared memory for the softmax's row scale.
                const int k = bf16x16_to_f16_pow2<CB>(in[i][0], in[i][1]);
                if (cb == 0) sts_f32(smem_u32(smem + OFF_QSC) + 4 * row, pow2_neg(k));
            }
            qperm(in[i][0], in[i][1]);
            sts16(base + T16::off(row, 2 * cb), in[i][0]);
            sts16(base + T16::off(row, 2 * cb + 1), in[i][1]);
        }
    } else if constexpr (!Q8 && NTH % CH16 == 0 && (BM * CH16) % NTH == 0) {
        // Fixed chunk column per thread, as in load_kv (the generic loop below cost ~30
        // integer instructions per chunk: ~500 per thread in every block's prologue).
        constexpr int RS = NTH / CH16, PER = BM * CH16 / NTH;
        const int row0 = tid / CH16, ch = tid % CH16;
        const u8* src = q + (long long)(w.m0 + row0) * qs + ch * 16;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int row = row0 + i * RS;
            copy16(base + T16::off(row, ch), src + i * RS * qs, w.m0 + row < p.seq_q);
        }
    } else if constexpr (!Q8) {
        for (int ci = tid; ci < BM * CH16; ci += NTH) {
            const int row = ci / CH16, ch = ci % CH16;
            const bool valid = w.m0 + row < p.seq_q;
            const long long r = valid ? w.m0 + row : 0;
            copy16(base + T16::off(row, ch), q + r * qs + ch * 16, valid);
        }
    } else if constexpr (NTH % CH8 == 0 && (BM * CH8) % NTH == 0) {
        // 8-bit Q, fixed chunk column per thread, and every load issued before the first
        // decode: the loop below waits out one global load per chunk (PER of them per thread,
        // 4 to 8), since its stores order the next iteration's load behind them.
        constexpr int RS = NTH / CH8, PER = BM * CH8 / NTH;
        const int row0 = tid / CH8, ch = tid % CH8;
        const u8* src = q + (long long)(w.m0 + row0) * qs + ch * 16;
        u32x4 in[PER];
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            in[i] = u32x4{0u, 0u, 0u, 0u};
            if (w.m0 + row0 + i * RS < p.seq_q) in[i] = ldg16(src + i * RS * qs);
        }
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int row = row0 + i * RS;
            u32x4 a, b;
            decode16<q_t, qk_t>(in[i], a, b);
            if (w.m0 + row >= p.seq_q) a = b = in[i];  // zeros (u8 code 0 decodes to -128)
            if constexpr (FRAG) qperm(a, b);
            sts16(base + T16::off(row, 2 * ch), a);
            sts16(base + T16::off(row, 2 * ch + 1), b);
        }
    } else {
        for (int ci = tid; ci < BM * CH8; ci += NTH) {
            const int row = ci / CH8, ch = ci % CH8;
            u32x4 in = {0u, 0u, 0u, 0u}, a, b;
            if (w.m0 + row < p.seq_q) in = ldg16(q + (long long)(w.m0 + row) * qs + ch * 16);
            decode16<q_t, qk_t>(in, a, b);
            if (w.m0 + row >= p.seq_q) a = b = in;  // zeros (u8 code 0 decodes to -128)
            if constexpr (FRAG) qperm(a, b);
            sts16(base + T16::off(row, 2 * ch), a);
            sts16(base + T16::off(row, 2 * ch + 1), b);
        }
    }
}

// ==== Step 2: copy K/V tiles into the ring =======================================================
// Issue the copies of K/V tile `j` into ring slot `slot`, by NTH threads counted from `tid`.
// Rows past seq_kv are zero-filled (their scores are masked; zero V keeps 0 * garbage from
// becoming NaN). When NTH divides the tile's chunks and is a multiple of a row's chunks, a
// thread copies one fixed chunk column of every RS-th row: one 64-bit multiply per tile and
// compile-time steps after it. (The generic loop it replaces cost ~250 integer instructions
// per warp per tile, as many as the softmax, in a loop whose issue slots are the bound.)
template <int NTH>
__device__ __forceinline__ void load_kv(u8* smem, const SdpaParams& p, const Work& w, int j, int slot, int tid) {
    const u32 base = smem_u32(smem + OFF_KV + slot * 2 * KV_TILE);
    const int n0 = j * BN;
    constexpr int CH = KV8 ? CH8 : CH16;
    if constexpr (NTH % CH == 0 && (BN * CH) % NTH == 0) {
        constexpr int RS = NTH / CH, PER = BN * CH / NTH;
        const int row0 = tid / CH, ch = tid % CH;
        const long long r0 = n0 + row0;
        const u8* kt = w.k + r0 * w.ks + ch * 16;
        const u8* vt = w.v + r0 * w.vs + ch * 16;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int row = row0 + i * RS;
            const bool valid = n0 + row < p.seq_kv;
            const u32 dst = FRAG ? T8::off(row, ch) : KV8 ? u32(row * D + ch * 16) : T16::off(row, ch);
            // Past seq_kv the source is not read (zero-fill), so it needs no clamping.
            copy16(base + dst, kt + i * RS * w.ks, valid);
            copy16(base + KV_TILE + dst, vt + i * RS * w.vs, valid);
        }
    } else {
        for (int ci = tid; ci < BN * CH; ci += NTH) {
            const int row = ci / CH, ch = ci % CH;
            const bool valid = n0 + row < p.seq_kv;
            const long long r = valid ? n0 + row : 0;
            const u32 dst = FRAG ? T8::off(row, ch) : KV8 ? u32(row * D + ch * 16) : T16::off(row, ch);
            copy16(base + dst, w.k + r * w.ks + ch * 16, valid);
            copy16(base + KV_TILE + dst, w.v + r * w.vs + ch * 16, valid);
        }
    }
}

// ==== Step 2b: decode 8-bit K/V to 16-bit operands ===============================================
// The staged forms (see the header): decode_kv is the serial form's whole-tile decode (and the
// pipelined prologue's); OwnChunks deals a tile's chunks to the threads that copy and decode
// them (decoupled sync, split decode), decode_kv_all and load_kv_own decode and copy them;
// SplitDecode is the split decode's per-tile work, which compute_tile runs through its hooks.
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

// ==== Step 3: one K/V tile on the tensor cores: S = Q·Kᵀ, mask, online softmax, O += P·V =========
// Per-warp state of the tensor-core loop.
struct WarpState {
    float o[R][D / 8][4];  // O accumulators, mma C layout: d-tile dt holds columns 8dt..8dt+7
    float m[R][2];         // running row max (base-2 scaled), rows g and g + 8 of fragment mi
    float l[R][2];         // running row sum, this lane's partial (quad-reduced at the end)
    u32 q[Q_IN_REGS ? R : 1][Q_IN_REGS ? D / 16 : 1][4];  // Q A-fragments when kept in registers
    float sl2r[ROWSC ? R : 1][2];  // ROWSC: the softmax's log2 scale per row (rows g, g + 8 of fragment mi)
    // The softmax's log2 scale for the rows (mi, h): the work tile's, or its row's under ROWSC.
    __device__ __forceinline__ float sl2_at(float sl2, int mi, int h) const {
        if constexpr (ROWSC) return sl2r[mi][h];
        else return sl2;
    }
    // ROWSC: this lane's rows' scales, sl2 · 2^-k, once Q (and its row factors) are visible.
    __device__ __forceinline__ void load_row_scales(u8* smem, float sl2, int warp, int lane) {
        if constexpr (ROWSC) {
#pragma unroll
            for (int mi = 0; mi < R; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    sl2r[mi][h] = sl2 * lds_f32(smem_u32(smem + OFF_QSC) + 4 * (frag_row(warp, mi) + (lane >> 2) + 8 * h));
        }
    }
    // This warp's Q A-fragments from the Q tile at `sq` (Q_IN_REGS only).
    __device__ __forceinline__ void load_q(const LaneAddr<T16>& a, u32 sq, int warp) {
#pragma unroll
        for (int mi = 0; mi < R; ++mi)
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(q[mi][kk], a.at(sq, frag_row(warp, mi), 2 * kk));
    }
    // A new work tile: no key seen yet (m = -inf, l = 0, O = 0).
    __device__ __forceinline__ void reset() {
#pragma unroll
        for (int mi = 0; mi < R; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                m[mi][h] = -SDPA_INF;
                l[mi][h] = 0.f;
            }
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[mi][dt][e] = 0.f;
        }
    }
};

// This lane's ldmatrix addresses for the two x4 patterns:
//  A (Q, and V with .trans): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7,
//    k 8-15), (rows 8-15, k 8-15): lanes 8i..8i+7 point at row 8(i%2) + lane%8, chunk i/2.
//    For Q that is a[0..3]; for V[key][d] with .trans it is b0, b1 of d-tile 2dp and then
//    b0, b1 of d-tile 2dp + 1 (keys are the k dimension).
//  B (K stored [key][d]): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
//    (n 8-15, k 8-15): lanes 8i..8i+7 point at row 8(i/2) + lane%8, chunk i%2, so r[0], r[1]
//    are b0, b1 of n-tile 2np and r[2], r[3] those of n-tile 2np + 1.
// (K could use pattern A with its registers reordered, saving 4 address registers, but
// ptxas then recomputes addresses in the loop: +98 instructions per tile at D128.)
// Fragment decode, over the 8-bit ring (T8): v8 is pattern A (V with .trans: matrices (keys
// 0-7, chunk c), (keys 8-15, c), (keys 0-7, c + 1), (keys 8-15, c + 1)); K's x4 covers 32 keys
// at one chunk kk (lane l points at key row l, so r[i] is n-tile i of the 32), whose swizzled
// offset k8_at computes.
struct Addrs {
    LaneAddr<T16> a, b;
    LaneAddr<T8> v8;
    u32 k8_row, k8_x;
    __device__ __forceinline__ explicit Addrs(int lane)
        : a((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4), b((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1),
          v8((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4), k8_row(u32(lane * T8::STRIDE)), k8_x(u32(T8::swz(lane) << 4)) {}
    __device__ __forceinline__ u32 k8_at(u32 tile, int row0, int kk) const {
        return tile + k8_row + u32(row0 * T8::STRIDE) + ((u32(kk) << 4) ^ k8_x);
    }
};

// One KV tile: S = Q·Kᵀ, mask, online softmax, O += P·V. sk / sv: 16-bit K and V tiles.
// `mid` runs between the mask and the softmax: the pipelined FP8-KV decode of the next tile
// goes there, in the same basic block as the row max / ex2 chain, so its shared-memory and
// conversion instructions fill the softmax's shuffle and MUFU latency instead of sitting in
// series before the tile's first mma (the tensor pipe idles during the softmax anyway).
struct NoHook {
    __device__ __forceinline__ void operator()() const {}
};
// `hk` runs around P·V (the split decode of the next K tile goes there): pre() after the
// softmax, pv_load(kc) before key block kc's mma and pv_store(kc, held) after them.
struct NoStepHook {
    struct Held {};
    __device__ __forceinline__ void pre() const {}
    __device__ __forceinline__ Held pv_load(int) const { return {}; }
    __device__ __forceinline__ void pv_store(int, Held) const {}
};
// MI0 = 1 (paired rows): fragment 0 is masked for the whole step; only fragment 1 is computed.
template <int MI0 = 0, typename Mid = NoHook, typename Hook = NoStepHook>
__device__ __forceinline__ void compute_tile(WarpState& ws, const Addrs& ad, u8* smem, u32 qoff, u32 sk, u32 sv, int k0,
                                             bool masked, int row_w, int warp, int lane, float sl2,
                                             const SdpaParams& p, const Mid& mid = Mid(), const Hook& hk = Hook()) {
    static_assert(MI0 == 0 || (PAIRED && TC_PV), "a fragment is skipped only with paired rows");
    const u32 sq = smem_u32(smem + OFF_Q) + qoff;  // qoff: the Q buffer (persistent decoupled sync)
    const int g = lane >> 2, t = lane & 3;
    float s[R][CN / 8][4];
#pragma unroll
    for (int mi = MI0; mi < R; ++mi)
#pragma unroll
        for (int nt = 0; nt < CN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][nt][e] = 0.f;

    // ---- S = Q·Kᵀ (unscaled) ----
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        u32 qa[R][4];
#pragma unroll
        for (int mi = MI0; mi < R; ++mi) {
            if constexpr (Q_IN_REGS) {
#pragma unroll
                for (int e = 0; e < 4; ++e) qa[mi][e] = ws.q[mi][kk][e];
            } else {
                ldmatrix_x4(qa[mi], ad.a.at(sq, frag_row(warp, mi), 2 * kk));
            }
        }
        if constexpr (FRAG) {
            // 8-bit K: r[i] holds codes d 16kk + 4t .. + 3 of key 32nq + 8i + g, which decode
            // to b0, b1 of n-tile 4nq + i in Q's permuted k order (see FRAG).
#pragma unroll
            for (int nq = 0; nq < CN / 32; ++nq) {
                u32 kr[4];
                ldmatrix_x4(kr, ad.k8_at(sk, 32 * nq, kk));
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    u32 b0, b1;
                    frag_decode(kr[i], b0, b1);
#pragma unroll
                    for (int mi = MI0; mi < R; ++mi) Mma<qk_t>::run(s[mi][4 * nq + i], qa[mi], b0, b1);
                }
            }
        } else {
#pragma unroll
            for (int np = 0; np < CN / 16; ++np) {
                u32 kb[4];
                ldmatrix_x4(kb, ad.b.at(sk, 16 * np, 2 * kk));
#pragma unroll
                for (int mi = MI0; mi < R; ++mi) {
                    Mma<c_t>::run(s[mi][2 * np], qa[mi], kb[0], kb[1]);
                    Mma<c_t>::run(s[mi][2 * np + 1], qa[mi], kb[2], kb[3]);
                }
            }
        }
    }
    step_sync();

    // ---- mask: keys past seq_kv, and (causal) keys past row + seq_kv - seq_q ----
    // Element (mi, nt, e) is row row_w + frag_off(warp, mi) + g + 8(e/2), key k0 + 8nt + 2t + e%2.
    if (masked) {
        const int off = p.seq_kv - p.seq_q;
#pragma unroll
        for (int mi = MI0; mi < R; ++mi)
#pragma unroll
            for (int nt = 0; nt < CN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = row_w + frag_off(warp, mi) + g + 8 * (e >> 1);
                    const int key = k0 + 8 * nt + 2 * t + (e & 1);
                    bool out = key >= p.seq_kv;
                    if constexpr (CAUSAL) out = out || key > row + off;
                    if (out) s[mi][nt][e] = -SDPA_INF;
                }
    }

    mid();

    // ---- online softmax, base 2: p = 2^(s·sl2 - m), threshold rescale (softmax.cuh) ----
    // With RESCALE_SKIP the warp skips the O multiply when none of its rows moved.
    float corr[R][2];
    bool moved = false;
#pragma unroll
    for (int mi = MI0; mi < R; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const auto scale = [&]() { return ws.sl2_at(sl2, mi, h); };
            corr[mi][h] = online_softmax_row<FAST_EXP>(s[mi], h, scale, ws.m[mi][h], ws.l[mi][h], RESCALE_TAU, moved);
        }
    if (!RESCALE_SKIP || __any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mi = MI0; mi < R; ++mi)
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e) ws.o[mi][dt][e] *= corr[mi][e >> 1];
    }
    step_sync();
    hk.pre();

    // ---- O += P·V ----
    if constexpr (TC_PV) {
        // P's A fragment for keys 16kc..16kc+15 is the C fragments of n-tiles 2kc, 2kc+1.
#pragma unroll
        for (int kc = 0; kc < CN / 16; ++kc) {
            const auto held = hk.pv_load(kc);
            u32 pa[R][4];
#pragma unroll
            for (int mi = MI0; mi < R; ++mi) acc_to_a<pv_t>(pa[mi], s[mi][2 * kc], s[mi][2 * kc + 1]);
            if constexpr (FRAG) {
                // 8-bit V, .trans: r[2c] holds keys 2t, 2t + 1 (r[2c + 1]: 8 + 2t, 9 + 2t) at
                // d 2g, 2g + 1 of chunk 2dq + c; bytes 0, 2 and 1, 3 are b0 (b1) of the chunk's
                // even and odd d-tiles, O's d-tiles 2(2dq + c) and 2(2dq + c) + 1 (see FRAG).
#pragma unroll
                for (int dq = 0; dq < D / 32; ++dq) {
                    u32 vr[4];
                    ldmatrix_x4_trans(vr, ad.v8.at(sv, 16 * kc, 2 * dq));
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        u32 e0, o0, e1, o1;
                        frag_decode(prmt(vr[2 * c], 0u, 0x3120u), e0, o0);
                        frag_decode(prmt(vr[2 * c + 1], 0u, 0x3120u), e1, o1);
#pragma unroll
                        for (int mi = MI0; mi < R; ++mi) {
                            Mma<pv_t>::run(ws.o[mi][4 * dq + 2 * c], pa[mi], e0, e1);
                            Mma<pv_t>::run(ws.o[mi][4 * dq + 2 * c + 1], pa[mi], o0, o1);
                        }
                    }
                }
            } else {
#pragma unroll
                for (int dp = 0; dp < D / 16; ++dp) {
                    // .trans over V[key][d]: matrices (keys 0-7, d 0-7), (keys 8-15, d 0-7),
                    // (keys 0-7, d 8-15), (keys 8-15, d 8-15) give b0, b1 of d-tile 2dp, then
                    // b0, b1 of d-tile 2dp + 1.
                    u32 vb[4];
                    ldmatrix_x4_trans(vb, ad.a.at(sv, 16 * kc, 2 * dp));
#pragma unroll
                    for (int mi = MI0; mi < R; ++mi) {
                        Mma<pv_t>::run(ws.o[mi][2 * dp], pa[mi], vb[0], vb[1]);
                        Mma<pv_t>::run(ws.o[mi][2 * dp + 1], pa[mi], vb[2], vb[3]);
                    }
                }
            }
            hk.pv_store(kc, held);
        }
    } else {
        // Scalar baseline: this warp's fp32 P rows to shared memory, then each lane
        // accumulates the O elements it owns (rows g, g+8; columns 8dt + 2t, +1) with FMAs.
        const u32 sp = smem_u32(smem + OFF_P) + u32(warp * 16 * R * P_ROW * 4);
#pragma unroll
        for (int mi = 0; mi < R; ++mi)
#pragma unroll
            for (int nt = 0; nt < CN / 8; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    sts_f32x2(sp + u32(((16 * mi + g + 8 * h) * P_ROW + 8 * nt + 2 * t) * 4), s[mi][nt][2 * h],
                              s[mi][nt][2 * h + 1]);
        __syncwarp();
#pragma unroll 2
        for (int n = 0; n < CN; ++n) {
            float pr[R][2];
#pragma unroll
            for (int mi = 0; mi < R; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h) pr[mi][h] = lds_f32(sp + u32(((16 * mi + g + 8 * h) * P_ROW + n) * 4));
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                // V[n][8dt + 2t .. +1]: chunk dt of row n, byte 4t within it.
                float v0, v1;
                unpack2(pv_t{}, lds32(sv + T16::off(n, dt) + 4 * t), v0, v1);
#pragma unroll
                for (int mi = 0; mi < R; ++mi)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        ws.o[mi][dt][2 * h] = fmaf(pr[mi][h], v0, ws.o[mi][dt][2 * h]);
                        ws.o[mi][dt][2 * h + 1] = fmaf(pr[mi][h], v1, ws.o[mi][dt][2 * h + 1]);
                    }
            }
        }
        __syncwarp();  // the next tile's P stores wait for every lane's reads
    }
    step_sync();
}

// ==== Step 4: epilogue ===========================================================================
// O = acc · v_descale / l for this warp's rows, and LSE. Fully masked rows (l == 0) give 0
// and -inf; a NaN l gives NaN.
__device__ __forceinline__ void write_out(WarpState& ws, const SdpaParams& p, const Work& w, int row_w, int warp,
                                          int lane, float v_ds) {
    const int g = lane >> 2, t = lane & 3;
    o_t* o = (o_t*)p.o + (long long)w.b * p.o_stride_b + (long long)w.hq * p.o_stride_h;
#pragma unroll
    for (int mi = 0; mi < R; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float l = ws.l[mi][h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const bool empty = l == 0.f;
            const float inv = empty ? 0.f : v_ds / l;
            const int row = row_w + frag_off(warp, mi) + g + 8 * h;
            if (row < p.seq_q) {
                o_t* orow = o + (long long)row * p.o_stride_s;
                if constexpr (FRAG) {
                    // d-tiles 2c (even columns of chunk c) and 2c + 1 (odd): this lane holds
                    // d 16c + 4t .. + 3 as even[2h], odd[2h], even[2h + 1], odd[2h + 1].
#pragma unroll
                    for (int c = 0; c < D / 16; ++c) {
                        const float* ev = ws.o[mi][2 * c];
                        const float* od = ws.o[mi][2 * c + 1];
                        stg_u32(orow + 16 * c + 4 * t, pack2<o_t>(ev[2 * h] * inv, od[2 * h] * inv));
                        stg_u32(orow + 16 * c + 4 * t + 2, pack2<o_t>(ev[2 * h + 1] * inv, od[2 * h + 1] * inv));
                    }
                } else {
#pragma unroll
                    for (int dt = 0; dt < D / 8; ++dt)
                        stg_u32(orow + 8 * dt + 2 * t, pack2<o_t>(ws.o[mi][dt][2 * h] * inv, ws.o[mi][dt][2 * h + 1] * inv));
                }
                if (p.lse && t == 0) {
                    // [batch, heads_q, seq_q]; varlen [heads_q, total_q] from the sequence's
                    // first token (varlen_view).
                    const long long at = VARLEN ? (long long)w.hq * p.total_q + row
                                                : ((long long)w.b * p.heads_q + w.hq) * p.seq_q + row;
                    p.lse[at] = empty ? -SDPA_INF : (ws.m[mi][h] + log2f(l)) * 0.6931471805599453f;
                }
            }
        }
}

// ==== The block: one work tile through the K/V loop ==============================================
// consume runs FlashAttention-2's loop for one work tile:
//   Q, then issue_first_tiles    the first K/V copies (each its own cp.async group)
//   decode_prologue              8-bit K/V: the decode of the first tiles (Step 2b)
//   for each K/V tile j:
//     the ring                   wait for tile j, free a slot, issue a later tile's copies
//     kv_operands                the 16-bit K and V that tile j's steps read: the ring slot
//                                (16-bit K/V, fragment decode) or a staging buffer (staged
//                                decode; the serial form decodes here)
//     the steps                  compute_tile per step (Step 3), with the decode's hooks
//   write_out                    (Step 4)
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
__device__ __forceinline__ void consume(u8* smem, const SdpaParams& p, const Work& w) {
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
    write_out(ws, p, w, row_w, warp, lane, v_ds);
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
        consume(smem, v, make_work(v, w.m0 / BM, w.hq, w.b));
    } else {
        consume(smem, p, w);
    }
}

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
            write_out(ws, p, w, row_w, warp, lane, v_ds);
            prev_n = w.n_tiles;
        }
        commit();
        wait_groups<0>();
    }
}

extern "C" __global__ void __launch_bounds__(SDPA_WARPS * 32, SDPA_MIN_BLOCKS)
sdpa_portable(const SdpaParams p) {
    extern __shared__ __align__(128) u8 smem[];
    if constexpr (STREAM) consume_stream(smem, p);
    else run_blocks(smem, p);
}
