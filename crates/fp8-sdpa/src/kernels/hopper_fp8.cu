// Hopper family, full FP8 (sm_90a): Q, K, V in E4M3 with fp32 descales, O in 16 bits. Both
// GEMMs run as 8-bit wgmma (k32, twice the 16-bit rate). 8-bit wgmma reads both operands
// K-major, so P.V needs V transposed (keys contiguous): the producer warpgroup does it in
// shared memory while the consumers compute. One producer thread issues the TMA copies (Q per
// tile; K and V as loaded, "raw", per key block); then the four producer warps transpose the
// raw V of the previous block into Vt, overlapped with the copies in flight and the consumers'
// GEMMs. The consumers run the loop hopper.cu's do (hopper_consumer.cuh: S = Q.K^T, online
// softmax, P.V with P from registers) over the GEMM policy GemmFp8: P packed to E4M3 (scaled
// up by 2^8, hopper_parts.cuh's P_SHIFT), each key block's P.V added to O in fp32, and the
// descales folded into the softmax scale (Q, K) and the epilogue (V). D256 runs the sequential
// consumer on 64-key tiles with P.V in two column halves (issue_pv).
//
// P's register order: the S accumulator gives lane (g, t) the keys 8j + 2t, 8j + 2t + 1, while
// an 8-bit A fragment wants 4t .. 4t + 3 in one register. Rather than shuffle P, each register
// takes the lane's own keys {2t, 2t + 1, 2t + 8, 2t + 9} of a 16-key group, and Vt stores the
// keys in that order: Vt column 16h + 4t + b holds key 16h + 2t + (b & 1) + 8 (b >> 1). Any
// consistent order of the summed index gives the same P.V.
//
// Shared memory (1024-byte aligned tiles): Q [SLABS][TILE_M][ROW], then per stage K and raw V
// [SLABS][TILE_N][ROW] (ROW = 128 bytes, or 64 at D64, TMA-swizzled), Vt [ceil(TILE_N / 128)][D][128]
// (128-byte swizzle), O (16-bit, hopper_parts.cuh) where it fits, the mbarriers.
//
// This file: the layout, the producer (copies and the V transpose) and the FP8 GEMM policy;
// the entry is hopper_entry.cuh's.
#include "hopper_knobs.cuh"
#include "mma_sm80.cuh"

namespace hopper {
typedef SDPA_Q_T T;  // e4m3_t
typedef T KvT;       // K and V in Q's type
typedef SDPA_O_T OutT;

static_assert(Same<T, e4m3_t>::value && Same<SDPA_KV_T, e4m3_t>::value, "E4M3 Q, K and V");
static_assert((TILE_N == 64 || TILE_N % 128 == 0) && TILE_N <= 256, "tile shape");

constexpr int ROW = D < 128 ? D : 128;  // bytes per swizzled row of Q, K, raw V
constexpr int SLABS = D / ROW;
constexpr u32 LAYOUT = ROW == 128 ? 1 : 2, ATOM = 8 * ROW;  // wgmma swizzle code, SBO
typedef Tile8<ROW> Raw;                                       // TMA's swizzle, as ldmatrix reads it
constexpr u32 Q_SLAB = TILE_M * ROW, KV_SLAB = TILE_N * ROW, VT_SLAB = D * 128;
// Vt keeps 128-byte rows (128 keys per slab); a 64-key tile fills half of each.
constexpr u32 Q_BYTES = Q_SLAB * SLABS, KV_BYTES = KV_SLAB * SLABS, VT_BYTES = VT_SLAB * ((TILE_N + 127) / 128);
enum : u32 { Q_FULL = 0, Q_EMPTY = 1, K_FULL = 2, K_EMPTY = K_FULL + STAGES, R_FULL = K_EMPTY + STAGES,
             R_EMPTY = R_FULL + STAGES, V_FULL = R_EMPTY + STAGES, V_EMPTY = V_FULL + STAGES,
             N_BARS = V_EMPTY + STAGES };
constexpr u32 OFF_K = Q_BYTES, OFF_R = OFF_K + STAGES * KV_BYTES, OFF_V = OFF_R + STAGES * KV_BYTES;
constexpr u32 RING_END = OFF_V + STAGES * VT_BYTES;
// O staged for a TMA store where it fits, never for varlen calls (as in hopper.cu).
constexpr bool O_FITS = RING_END + O_BYTES + 8 * N_BARS + SMEM_PAD <= SMEM_CAP, STAGE_O = O_FITS && !VARLEN;
constexpr u32 OFF_O = RING_END, OFF_BAR = RING_END + (O_FITS ? O_BYTES : 0);
static_assert(OFF_BAR + 8 * N_BARS + SMEM_PAD == SDPA_SMEM_BYTES, "layout must match dynamic_smem_bytes()");
constexpr bool RING_BARS_OUTLINED = false;  // hopper_ring.cuh says why

// The producer warpgroup transposes with unrolled units, so it keeps 40 registers
// (at 32 it spilled); the consumers keep 232 each (40 + 2 x 232 = the 504 of the launch bound).
constexpr int PRODUCER_REGS = 40;
constexpr int CONSUMER_REGS = consumer_regs(PRODUCER_REGS);
constexpr float P_SHIFT = 8.f;  // E4M3 P in (0, 256]
}  // namespace hopper

#include "hopper_parts.cuh"
#include "hopper_ring.cuh"

namespace hopper {
typedef Ring<Q_FULL, Q_EMPTY, 0, Q_BYTES, 1> QRing;
typedef Ring<K_FULL, K_EMPTY, OFF_K, KV_BYTES> KRing;
typedef Ring<R_FULL, R_EMPTY, OFF_R, KV_BYTES> RawVRing;  // V as loaded
typedef Ring<V_FULL, V_EMPTY, OFF_V, VT_BYTES> VRing;     // Vt, transposed by the producer

// ---- producer: the V transpose ------------------------------------------------------------
// Raw V (keys x D) of ring use `u` into Vt (D x keys, P's key order). Unit = 32 keys x 16
// columns: one ldmatrix.x4 whose matrix i row r is key 32kb + 16 (r / 4) + 2 (r % 4) +
// {0, 1, 8, 9}[i], so lane (g, t) receives, in register i, columns 16c + 4t .. + 3 of key
// 32kb + 16 (g / 4) + 2 (g % 4) + {0, 1, 8, 9}[i]; a 4x4 byte transpose makes one word per
// column with those four keys, which is Vt's column group 32kb + 16 (g / 4) + 4 (g % 4).
// Warp w takes the column chunks c = w + 4ci, every kb. The producer's issue slots are the
// consumers' (one warp of each role per scheduler), so the addresses are per-lane bases set
// once per block: both swizzles are XORs on bits 4-6 that split into a per-lane part and a
// compile-time part of (ci, kb), and the rest is an immediate offset (51 -> ~17 instructions
// per unit; perf-notes: full FP8 on Hopper, the instructions per key block).
__device__ __forceinline__ void transpose_v(u32 smem, u32 u) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const RawVRing raw_v{smem};
    const VRing vt_ring{smem};
    raw_v.wait_full(u);
    vt_ring.wait_empty(u);
    const u32 raw = raw_v.tile(u), vt = vt_ring.tile(u);
    constexpr int CPR = ROW / 16;  // 16-byte chunks per raw row
    // Source row key_l + 32 kb (same swizzle for every kb), chunk c: (warp | 4ci % CPR) in the row.
    const int key_l = 16 * ((lane % 8) / 4) + 2 * (lane % 4) + (lane / 8 & 1) + 8 * (lane / 16);
    const u32 src = raw + key_l * ROW + ((Raw::swz(key_l) ^ warp) << 4);
    // Destination word e (column d = 16c + 4t + e, byte 4 (g % 4) of the column group): chunk
    // (2 (kb % 4) + g / 4) ^ (d % 8) of row d = (g / 4 ^ (4 (t % 2) + e)) ^ 2 (kb % 4).
    u32 dst[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
        dst[e] = vt + (16 * warp + 4 * t + e) * 128 + 4 * (g % 4) + (((g / 4) ^ (4 * (t % 2) + e)) << 4);
#pragma unroll
    for (int ci = 0; ci < D / 64; ++ci)
#pragma unroll
        for (int kb = 0; kb < TILE_N / 32; ++kb) {
            u32 r[4];
            ldmatrix_x4(r, (src ^ (((4 * ci) % CPR) << 4)) + (4 * ci / CPR) * KV_SLAB + 32 * kb * ROW);
            const u32 lo01 = prmt(r[0], r[1], 0x5140), hi01 = prmt(r[0], r[1], 0x7362);
            const u32 lo23 = prmt(r[2], r[3], 0x5140), hi23 = prmt(r[2], r[3], 0x7362);
            const u32 w[4] = {prmt(lo01, lo23, 0x5410), prmt(lo01, lo23, 0x7632), prmt(hi01, hi23, 0x5410),
                              prmt(hi01, hi23, 0x7632)};
#pragma unroll
            for (int e = 0; e < 4; ++e)
                sts_u32((dst[e] ^ ((kb % 4) << 5)) + (kb / 4) * VT_SLAB + 64 * ci * 128, w[e]);
        }
    // Vt is read by wgmma (the async proxy): every writer fences its own stores and arrives.
    fence_proxy_async_shared();
    mbar_arrive(vt_ring.full(u));
    // The raw tile's reads are done (their values are in the words stored above).
    __syncwarp();
    if (lane == 0) mbar_arrive(raw_v.empty(u));
}

// ---- producer: copies by one thread, the transpose of the block before by all four warps ----
__device__ __forceinline__ void produce(const SdpaParams& p, const HopperMaps& maps, u32 smem) {
    Scheduler sched(p);
    const int group = p.heads_q / p.heads_kv;
    const bool issuer = threadIdx.x == 0;
    const QRing q{smem};
    const KRing k{smem};
    const RawVRing raw_v{smem};
    u32 it = 0, t_local = 0;  // ring uses, live tiles so far
    for (int t = blockIdx.x; t < sched.tiles; t += gridDim.x) {
        Tile w = sched.at(p, t);
        if (!w.live()) continue;
        const int hkv = w.hq / group;
        if (issuer) {
            q.acquire(t_local++, Q_BYTES);
            tma_fill<SLABS, Q_SLAB, ROW>(q.buffer(), &maps.q, w.q_off + w.m_block * TILE_M, w.hq, w.bc);
        }
        for (int j = w.n_blocks - 1; j >= 0; --j, ++it) {
            if (issuer) {
                k.acquire(it, KV_BYTES);
                tma_fill<SLABS, KV_SLAB, ROW>(k.buffer(it), &maps.k, w.k_off + j * TILE_N, hkv, w.bc);
                raw_v.acquire(it, KV_BYTES);
                tma_fill<SLABS, KV_SLAB, ROW>(raw_v.buffer(it), &maps.v, w.k_off + j * TILE_N, hkv, w.bc);
            }
            __syncwarp();
            if (it > 0) transpose_v(smem, it - 1);
        }
    }
    if (it > 0) transpose_v(smem, it - 1);
}

// ---- GEMM policy: 8-bit wgmma, E4M3 P, P.V added to O in fp32 ---------------------------
// S = Q.K^T is one chain of D / 32 k-steps, as the peers run it. The 8-bit wgmma's additions
// keep 13 bits below the largest exponent among a step's products and the accumulator,
// truncated (a CPU model, example `wgmma_accumulation`, reproduces verify's LSE errors to three
// digits); verify's LSE and O bounds carry that term (perf-notes: the accumulation, measured
// against the peers'). Each key block's P.V goes to its own accumulator OB, added to O in fp32:
// with O as the accumulator O drifts by several % over a long row's hundreds of blocks. At
// D256 an accumulator for all of D does not fit beside O (128 + 128 of 232 registers), so P.V
// runs in column halves of 128, each added to O before the next.
constexpr int PV_PARTS = D > 128 ? 2 : 1, DP = D / PV_PARTS;
static_assert(!OVERLAP || PV_PARTS == 1, "D256 needs the sequential consumer");

// S = Q.K^T over k32 steps [K0, K1) of 32 bytes inside the swizzled rows, slab by slab, for
// N keys from k_tile.
template <int N, int K0, int K1>
__device__ __forceinline__ void qk_steps(float (&s)[N / 2], u32 q_tile, u32 k_tile) {
#pragma unroll
    for (int kk = K0; kk < K1; ++kk) {
        const int slab = kk / (ROW / 32);
        const u32 off = (kk % (ROW / 32)) * 32;
        Wgmma<T, N>::template ss<0>(s, wgmma_desc(q_tile + slab * Q_SLAB + off, 16, ATOM, LAYOUT),
                                    wgmma_desc(k_tile + slab * KV_SLAB + off, 16, ATOM, LAYOUT), kk > K0);
    }
}
__device__ __forceinline__ u32 e4m3x4(float a, float b, float c, float d) {
    return u32(float2_to_e4m3x2(a, b)) | (u32(float2_to_e4m3x2(c, d)) << 16);
}

struct GemmFp8 {
    static constexpr int ROW = hopper::ROW;
    static constexpr int OB_REGS = DP / 2, PV_PARTS = hopper::PV_PARTS, PV_PART_BYTES = DP * 128;
    typedef u32 PFrag[TILE_N / 32][4];
    // Q's and K's descales scale the scores, V's the output.
    static constexpr bool V_DESCALE = true;
    template <class Descale>
    __device__ __forceinline__ static float score_scale(const SdpaParams& p, const Tile& w, const Descale& kv_descale) {
        const float qd = p.q_descale ? p.q_descale[w.b * p.q_descale_stride_b + w.hq] : 1.f;
        const float kd = p.k_descale ? kv_descale(p.k_descale) : 1.f;
        return p.scale_log2 * qd * kd;
    }
    __device__ __forceinline__ static void issue_qk(float (&s)[TILE_N / 2], u32 q_tile, u32 k_tile) {
        wgmma_fence();
        qk_steps<TILE_N, 0, D / 32>(s, q_tile, k_tile);
        wgmma_commit();
    }
    // P to E4M3 A fragments in Vt's key order: of each 16-key group (s[8j .. 8j + 7] of rows g,
    // g + 8), keys 2t, 2t + 1 are s[8j + 0, 1] (row g) and s[8j + 2, 3] (row g + 8), keys 2t + 8,
    // 2t + 9 are s[8j + 4, 5] and s[8j + 6, 7].
    __device__ __forceinline__ static void to_p(const float (&s)[TILE_N / 2], PFrag& pa) {
#pragma unroll
        for (int kk = 0; kk < TILE_N / 32; ++kk)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float* x = &s[16 * kk + 8 * h];
                pa[kk][2 * h] = e4m3x4(x[0], x[1], x[4], x[5]);
                pa[kk][2 * h + 1] = e4m3x4(x[2], x[3], x[6], x[7]);
            }
    }
    __device__ __forceinline__ static float (&pv_acc(float (&)[D / 2], float (&ob)[OB_REGS]))[OB_REGS] { return ob; }
    // OB = P.V of one key block (a DP-column part): Vt is K-major (keys contiguous), 128 keys
    // per slab, a k32 step +32 bytes.
    __device__ __forceinline__ static void issue_pv(float (&ob)[DP / 2], const PFrag& pa, u32 vt) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < TILE_N / 32; ++kk)
            Wgmma<T, DP>::template rs<0>(ob, pa[kk], wgmma_desc(vt + (kk / 4) * VT_SLAB + (kk % 4) * 32, 16, 1024, 1),
                                         kk > 0);
        wgmma_commit();
    }
    __device__ __forceinline__ static void rescale_o(float (&)[D / 2], const float (&)[2]) {}
    // O = O * alpha + OB over columns [DP part, DP (part + 1)): accumulator register i of an
    // N = DP wgmma is register DP / 2 * part + i of the full-width layout. One FFMA per element
    // (O = (O + OB) * alpha(j) took two), so the overlapped consumer passes the alpha of OB's
    // own block, kept from the softmax before.
    __device__ __forceinline__ static void fold_pv(float (&o)[D / 2], const float (&ob)[DP / 2], const float (&alpha)[2],
                                                   int part) {
#pragma unroll
        for (int i = 0; i < DP / 2; ++i) {
            float& x = o[DP / 2 * part + i];
            x = fmaf(x, alpha[(i >> 1) & 1], ob[i]);
        }
    }
};

// The barriers' arrivals (Q's: hopper_entry.cuh): K and raw V complete on the TMA's bytes, Vt
// on every producer thread's transpose; EMPTY on each reader warp's arrival.
__device__ __forceinline__ void init_rings(u32 smem) {
    const KRing k{smem};
    const RawVRing raw_v{smem};
    const VRing v{smem};
    for (int s = 0; s < STAGES; ++s) {
        k.init_full(s, 1);
        raw_v.init_full(s, 1);
        raw_v.init_empty(s, 4);
        v.init_full(s, 128);
        k.init_empty(s, 4 * CONSUMERS);
        v.init_empty(s, 4 * CONSUMERS);
    }
}
typedef GemmFp8 Gemm;  // the consumers' (hopper_consumer.cuh)
}  // namespace hopper

#include "hopper_entry.cuh"
