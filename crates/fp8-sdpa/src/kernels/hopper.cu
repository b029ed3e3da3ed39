// Hopper family (sm_90a): TMA loads into a shared-memory ring, wgmma on both GEMMs, warp
// specialization. One producer warpgroup issues every copy (one thread, registers lowered);
// CONSUMERS warpgroups of 64 query rows each compute S = Q.K^T (wgmma, both operands in shared
// memory), the online softmax in registers, and O += P.V (wgmma, P from registers, V read
// MN-major). Blocks walk a list of work tiles (batch, head, m-block), heaviest first under
// causal; with a grid smaller than the list (persistent) a block keeps the ring running
// across tiles and loads the next tile's Q while its consumers finish the current one.
// FP8-KV (E4M3 K/V, 16-bit Q): TMA lands the codes in rings of their own and the whole
// producer warpgroup decodes them into the 16-bit K and V tiles, so the consumers are unchanged
// and spend no issue slot on the decode; K's descale joins the softmax scale, V's the epilogue.
//
// Shared memory (every tile 1024-byte aligned, the 128-byte swizzle's period), each tile in
// 64-column slabs of 128-byte rows, as TMA's SWIZZLE_128B writes a box of 64 x rows:
//   Q [SLABS][TILE_M][64], K[STAGES][SLABS][TILE_N][64], V[STAGES][SLABS][TILE_N][64],
//   (FP8-KV: per stage K's then V's codes, [D / RAW_ROW][TILE_N][RAW_ROW] bytes), then the
//   mbarriers.
// Barriers: Q_FULL / Q_EMPTY (one Q per tile), K_FULL / K_EMPTY and V_FULL / V_EMPTY per
// stage. FULL completes on the TMA's bytes (the producer's arrive_expect_tx is the one
// arrival); EMPTY on one arrival per consumer warp after the wgmma that read the buffer has
// completed. Phase bits follow the running use count of each barrier. FP8-KV: K_FULL and
// V_FULL complete on one arrival per producer warp after its decode; the code stages have
// RK_/RV_FULL (TMA bytes) and RK_/RV_EMPTY (one arrival per producer warp after its reads).
//
// This file: the layout, the producers and the 16-bit GEMM policy. The consumer loop is
// hopper_consumer.cuh's, the entry hopper_entry.cuh's (both shared with hopper_fp8.cu).
#include "hopper_knobs.cuh"

namespace hopper {
typedef SDPA_Q_T T;      // Q and compute type (fp16 or bf16)
typedef SDPA_KV_T KvT;   // K/V storage: T, or E4M3 (FP8-KV), decoded to T by the producer warpgroup
typedef SDPA_O_T OutT;
constexpr bool KV8 = Same<KvT, e4m3_t>::value;

constexpr int SLABS = D / 64;
static_assert(D % 64 == 0 && TILE_N % 16 == 0 && TILE_N <= 256, "tile shape");
static_assert(Same<T, half_t>::value || Same<T, bf16_t>::value, "16-bit Q");
static_assert(KV8 || Same<KvT, T>::value, "K/V in Q's type, or E4M3");
static_assert(!KV8 || D <= 128, "FP8-KV serves D64 and D128 (variant.rs says why)");

constexpr u32 Q_SLAB = TILE_M * 128, KV_SLAB = TILE_N * 128;
constexpr u32 Q_BYTES = Q_SLAB * SLABS, KV_BYTES = KV_SLAB * SLABS;
// FP8-KV: TMA lands K's and V's codes in rings of their own (RAW_ROW-byte rows, swizzled as
// TMA writes them), one code stage per 16-bit stage, with barriers of their own.
constexpr u32 RAW_ROW = D < 128 ? D : 128, RAW_SLAB = TILE_N * RAW_ROW, RAW_BYTES = KV8 ? TILE_N * D : 0;
enum : u32 { Q_FULL = 0, Q_EMPTY = 1, K_FULL = 2, K_EMPTY = K_FULL + STAGES,
             V_FULL = K_EMPTY + STAGES, V_EMPTY = V_FULL + STAGES, RK_FULL = V_EMPTY + STAGES,
             RK_EMPTY = RK_FULL + STAGES, RV_FULL = RK_EMPTY + STAGES, RV_EMPTY = RV_FULL + STAGES,
             N_BARS = V_EMPTY + STAGES + (KV8 ? 4 * STAGES : 0) };
static_assert(sizeof(OutT) == 2, "16-bit output");
constexpr u32 OFF_K = Q_BYTES, OFF_V = OFF_K + STAGES * KV_BYTES;
constexpr u32 OFF_R = OFF_V + STAGES * KV_BYTES;  // FP8-KV codes: per stage K's, then V's
constexpr u32 RING_END = OFF_R + 2 * STAGES * RAW_BYTES;
// O is staged in shared memory for a TMA store where the tile fits beside the rings (not
// D256's 80-key ring), else stored from registers; never for varlen calls (hopper_parts.cuh's
// epilogue), whose layout keeps the space, unused.
constexpr bool O_FITS = RING_END + O_BYTES + 8 * N_BARS + SMEM_PAD <= SMEM_CAP, STAGE_O = O_FITS && !VARLEN;
constexpr u32 OFF_O = RING_END, OFF_BAR = RING_END + (O_FITS ? O_BYTES : 0);
static_assert(OFF_BAR + 8 * N_BARS + SMEM_PAD == SDPA_SMEM_BYTES, "layout must match dynamic_smem_bytes()");
constexpr bool RING_BARS_OUTLINED = true;  // hopper_ring.cuh says why

// Registers: the producer keeps 24; where its warps decode FP8-KV, 56 (64 at D128 for four
// passes' codes in flight; less spilled), the consumers share the rest (224 or 216 with
// FP8-KV). D128 non-causal decodes two passes at a time at 56 (LEAN_DECODE): +1-9 % there
// (one row -2 %), while causal, whose short tiles wait more on the decode, keeps four at 64
// (3-7 % ahead; perf-notes: FP8-KV prefill on the Hopper family, third design).
constexpr bool LEAN_DECODE = D >= 128 && !SDPA_CAUSAL;
constexpr int PRODUCER_REGS = !KV8 ? 24 : D >= 128 && !LEAN_DECODE ? 64 : 56;
constexpr int CONSUMER_REGS = consumer_regs(PRODUCER_REGS);
constexpr float P_SHIFT = 0.f;  // 16-bit P: exp2(s - m) in (0, 1]
}  // namespace hopper

#include "hopper_parts.cuh"
#include "hopper_ring.cuh"

namespace hopper {
typedef Ring<Q_FULL, Q_EMPTY, 0, Q_BYTES, 1> QRing;
typedef Ring<K_FULL, K_EMPTY, OFF_K, KV_BYTES> KRing;
typedef Ring<V_FULL, V_EMPTY, OFF_V, KV_BYTES> VRing;
typedef Ring<RK_FULL, RK_EMPTY, OFF_R, 2 * RAW_BYTES> RawKRing;  // FP8-KV codes
typedef Ring<RV_FULL, RV_EMPTY, OFF_R + RAW_BYTES, 2 * RAW_BYTES> RawVRing;

// Q of tile w into its buffer, once the previous tile's consumers released it (t_local: live
// tiles so far). Both producers (16-bit, FP8-KV) load Q this way.
__device__ __forceinline__ void load_q(const HopperMaps& maps, u32 smem, const Tile& w, u32 t_local) {
    const QRing q{smem};
    const Buffer b = q.buffer(t_local);
    q.acquire(b, Q_BYTES);
    tma_fill<SLABS, Q_SLAB, 64>(b, &maps.q, w.q_off + w.m_block * TILE_M, w.hq, w.bc);
}

// ---- producer: one thread issues every TMA copy -------------------------------------------
__device__ void produce_16(const SdpaParams& p, const HopperMaps& maps, u32 smem) {
    Scheduler sched(p);
    const int group = p.heads_q / p.heads_kv;
    const KRing k{smem};
    const VRing v{smem};
    u32 it = 0, t_local = 0;
    for (int t = blockIdx.x; t < sched.tiles; t += gridDim.x) {
        Tile w = sched.at(p, t);
        if (!w.live()) continue;
        const int hkv = w.hq / group;
        load_q(maps, smem, w, t_local++);
        // Key blocks from the last to the first: the masked ones come first.
        for (int j = w.n_blocks - 1; j >= 0; --j, ++it) {
            const Buffer bk = k.buffer(it), bv = v.buffer(it);
            k.acquire(bk, KV_BYTES);
            tma_fill<SLABS, KV_SLAB, 64>(bk, &maps.k, w.k_off + j * TILE_N, hkv, w.bc);
            v.acquire(bv, KV_BYTES);
            tma_fill<SLABS, KV_SLAB, 64>(bv, &maps.v, w.k_off + j * TILE_N, hkv, w.bc);
        }
    }
}

// ---- producer, FP8-KV: the warpgroup decodes the codes, its thread 0 also copies -----------
// Every thread decodes chunk c = tid % CHUNKS (16 codes) of rows r0 + k * PASS_ROWS of a K or V
// tile, r0 = tid / CHUNKS. Both swizzles see a row only through r % 8 (TMA's 64-byte swizzle of
// D64's 64-byte code rows through (r / 2) % 4), the same for every k, so every address is a
// per-thread base plus an immediate (the previous decoder spent about 60 instructions per chunk on
// addresses; this one about 15).
constexpr int CHUNKS = D / 16, PASS_ROWS = 128 / CHUNKS, PASSES = TILE_N / PASS_ROWS;
constexpr int BATCH = LEAN_DECODE ? 2 : PASSES < 4 ? PASSES : 4;  // passes' loads in flight together
static_assert(!KV8 || (PASS_ROWS % 8 == 0 && TILE_N % PASS_ROWS == 0), "decoder rows");
struct Decoder {
    u32 src, dst0, dst1;
    // A quarter-warp's 16-byte stores go to 8 different bank groups: at D128 its lanes 4-7 (the
    // second 64-column slab, same chunk pattern as lanes 0-3) take the neighbouring row, whose
    // swizzle flips the chunk's low bit.
    __device__ explicit Decoder(int tid) {
        const int c = tid % CHUNKS, r = (tid / CHUNKS) ^ (CHUNKS >= 8 ? (c / 4) & 1 : 0), cpr = RAW_ROW / 16;
        const int swz = RAW_ROW >= 128 ? (r & 7) : ((r >> 1) & 3);
        src = (c / cpr) * RAW_SLAB + r * RAW_ROW + (((c % cpr) ^ swz) << 4);
        const u32 row = (c / 4) * KV_SLAB + r * 128;  // 16-bit columns 16c.. in slab c / 4
        dst0 = row + (((2 * (c % 4)) ^ (r & 7)) << 4);
        dst1 = row + (((2 * (c % 4) + 1) ^ (r & 7)) << 4);
    }
    // Every load first: ptxas does not move a shared-memory load above a store it cannot prove
    // apart, so a load after the previous pass's stores waited its whole latency each pass
    // (SASS and ncu showed 8 serial load-convert-store chains per tile).
    // A last batch may be short (PASSES not a multiple of BATCH): the guard is static.
    __device__ __forceinline__ void run(u32 raw, u32 tile) const {
#pragma unroll
        for (int k0 = 0; k0 < PASSES; k0 += BATCH) {
            u32x4 w[BATCH];
#pragma unroll
            for (int k = 0; k < BATCH; ++k)
                if (k0 + k < PASSES) w[k] = lds16(raw + src + (k0 + k) * PASS_ROWS * RAW_ROW);
#pragma unroll
            for (int k = 0; k < BATCH; ++k) {
                if (k0 + k >= PASSES) continue;
                u32x4 a, b;
                e4m3x4_to_h1<T>(w[k].x, a.x, a.y);
                e4m3x4_to_h1<T>(w[k].y, a.z, a.w);
                e4m3x4_to_h1<T>(w[k].z, b.x, b.y);
                e4m3x4_to_h1<T>(w[k].w, b.z, b.w);
                sts16(tile + dst0 + (k0 + k) * PASS_ROWS * 128, a);
                sts16(tile + dst1 + (k0 + k) * PASS_ROWS * 128, b);
            }
        }
    }
};

// Decodes K(u), then V(u), use after use; thread 0 keeps the codes STAGES uses ahead and loads
// each tile's Q as the decode reaches the tile. A 16-bit stage is written once its EMPTY has
// completed (the consumers' wgmma has read it) and is published per warp: every thread fences
// its stores for the async proxy, then lane 0 arrives. (Decoding K(u + 1) before V(u), as the
// overlapped consumers use them, measured 6-16 % slower; perf-notes: FP8-KV prefill on the
// Hopper family, third design.)
__device__ void produce_kv8(const SdpaParams& p, const HopperMaps& maps, u32 smem) {
    Scheduler sched(p);
    const int tid = threadIdx.x, lane = tid % 32, group = p.heads_q / p.heads_kv;
    const Decoder dec(tid);
    const KRing k{smem};
    const VRing v{smem};
    const RawKRing raw_k{smem};
    const RawVRing raw_v{smem};
    UseCursor copy = {int(blockIdx.x) - int(gridDim.x), 0};
    u32 copied = 0;
    // The codes' rings by hand: spelled through Ring, the copies compiled to different SASS.
    auto bar = [&](u32 id) { return smem + OFF_BAR + 8 * id; };
    auto raw = [&](u32 st, int kv) { return smem + OFF_R + (2 * st + kv) * RAW_BYTES; };
    auto copy_next = [&] {  // thread 0: the codes of the next use not yet copied
        if (!copy.next(sched, p)) return;
        const u32 st = copied % STAGES, ph = ((copied / STAGES) & 1) ^ 1;
        const Tile w = sched.at(p, copy.t);
        const int row = w.k_off + copy.j * TILE_N, hkv = w.hq / group;
#pragma unroll
        for (int kv = 0; kv < 2; ++kv) {
            const u32 full = bar((kv ? RV_FULL : RK_FULL) + st);
            mbar_wait(bar((kv ? RV_EMPTY : RK_EMPTY) + st), ph);
            mbar_arrive_expect_tx(full, RAW_BYTES);
#pragma unroll
            for (int s = 0; s < int(D / RAW_ROW); ++s)
                tma_load_4d(raw(st, kv) + s * RAW_SLAB, kv ? &maps.v : &maps.k, full, RAW_ROW * s, row, hkv, w.bc);
        }
        ++copied;
    };
    // Use u of a 16-bit ring from its code ring.
    auto decode = [&](u32 u, const auto& codes, const auto& ring) {
        const u32 st = u % STAGES, ph = (u / STAGES) & 1;
        mbar_wait(codes.full_at(st), ph);
        mbar_wait(ring.empty_at(st), ph ^ 1);
        dec.run(codes.tile_at(st), ring.tile_at(st));
        fence_proxy_async_shared();
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(ring.full_at(st));
            mbar_arrive(codes.empty_at(st));
        }
    };
    if (tid == 0)
        for (int i = 0; i < STAGES; ++i) copy_next();
    u32 u = 0, t_local = 0;
    for (int t = blockIdx.x; t < sched.tiles; t += gridDim.x) {
        Tile w = sched.at(p, t);
        if (!w.live()) continue;
        if (tid == 0) load_q(maps, smem, w, t_local);
        ++t_local;
        for (int j = w.n_blocks - 1; j >= 0; --j, ++u) {
            decode(u, raw_k, k);
            decode(u, raw_v, v);
            if (tid == 0) copy_next();
        }
    }
}

// The producer warpgroup: 16-bit K/V need one thread's copies, FP8-KV every thread's decode.
__device__ __forceinline__ void produce(const SdpaParams& p, const HopperMaps& maps, u32 smem) {
    if constexpr (KV8)
        produce_kv8(p, maps, smem);
    else if (threadIdx.x == 0)
        produce_16(p, maps, smem);
}

// The barriers' arrivals (Q's: hopper_entry.cuh). FULL: 16-bit K/V, the TMA's one; FP8-KV,
// each producer warp's after its decode. EMPTY: every consumer warp's after its wgmma.
__device__ __forceinline__ void init_rings(u32 smem) {
    const KRing k{smem};
    const VRing v{smem};
    const RawKRing raw_k{smem};
    const RawVRing raw_v{smem};
    for (int s = 0; s < STAGES; ++s) {
        k.init_full(s, KV8 ? 4 : 1);
        v.init_full(s, KV8 ? 4 : 1);
        if (KV8) {
            raw_k.init_full(s, 1);   // the TMA's bytes
            raw_v.init_full(s, 1);
            raw_k.init_empty(s, 4);  // each producer warp, after its reads
            raw_v.init_empty(s, 4);
        }
        k.init_empty(s, 4 * CONSUMERS);
        v.init_empty(s, 4 * CONSUMERS);
    }
}

// ---- GEMM policy: 16-bit wgmma, P.V accumulating into O --------------------------------
struct Gemm16 {
    static constexpr int ROW = 128;  // 64 16-bit columns per swizzled row
    static constexpr int OB_REGS = 1, PV_PARTS = 1, PV_PART_BYTES = 0;
    typedef u32 PFrag[TILE_N / 16][4];
    // FP8-KV: K's descale scales the scores, V's the output.
    static constexpr bool V_DESCALE = KV8;
    template <class Descale>
    __device__ __forceinline__ static float score_scale(const SdpaParams& p, const Tile& w, const Descale& kv_descale) {
        return KV8 && p.k_descale ? p.scale_log2 * kv_descale(p.k_descale) : p.scale_log2;
    }
    // S = Q.K^T: D / 16 k-steps, four per 64-column slab (+32 bytes each inside the 128-byte
    // row), one chain.
    __device__ __forceinline__ static void issue_qk(float (&s)[TILE_N / 2], u32 q_tile, u32 k_tile) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 off = (kk % 4) * 32;
            Wgmma<T, TILE_N>::template ss<0>(s, wgmma_desc_sw128(q_tile + (kk / 4) * Q_SLAB + off, 16, 1024),
                                             wgmma_desc_sw128(k_tile + (kk / 4) * KV_SLAB + off, 16, 1024), kk > 0);
        }
        wgmma_commit();
    }
    // All of P is packed before the first P.V wgmma, so that none waits on a conversion.
    __device__ __forceinline__ static void to_p(const float (&s)[TILE_N / 2], PFrag& pa) {
#pragma unroll
        for (int kk = 0; kk < TILE_N / 16; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) pa[kk][i] = pack2<T>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
    }
    __device__ __forceinline__ static float (&pv_acc(float (&o)[D / 2], float (&)[OB_REGS]))[D / 2] { return o; }
    // O += P.V: P's accumulator fragments are the A fragments of the k16 steps; V is read
    // MN-major, 16 key rows (2048 bytes) per step.
    __device__ __forceinline__ static void issue_pv(float (&o)[D / 2], const PFrag& pa, u32 v_tile) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < TILE_N / 16; ++kk)
            Wgmma<T, D>::template rs<1>(o, pa[kk], wgmma_desc_sw128(v_tile + kk * 16 * 128, KV_SLAB, 1024), 1);
        wgmma_commit();
    }
    __device__ __forceinline__ static void rescale_o(float (&o)[D / 2], const float (&alpha)[2]) { rescale(o, alpha); }
    __device__ __forceinline__ static void fold_pv(float (&)[D / 2], float (&)[OB_REGS], const float (&)[2], int) {}
};
typedef Gemm16 Gemm;  // the consumers' (hopper_consumer.cuh)
}  // namespace hopper

#include "hopper_entry.cuh"
