// Device primitives shared by every kernel: element types and conversions (inline PTX, no
// CUDA toolkit headers), warp reductions. Kernels build on these; PTX facts sit beside
// each wrapper.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

// Type equality, for `if constexpr` on element types (no <type_traits> under NVRTC).
template <typename A, typename B> struct Same { static constexpr bool value = false; };
template <typename A> struct Same<A, A> { static constexpr bool value = true; };

// ---- element types: plain bit containers, so no toolkit header is needed ----------------
struct half_t { u16 x; };
struct bf16_t { u16 x; };
struct e4m3_t { u8 x; };   // OCP E4M3 "fn": bias 7, no infinities, NaN = S.1111.111, max 448
struct u8code_t { u8 x; }; // the seeds' simulated FP8: value = (u - 128) * descale

#define SDPA_INF __int_as_float(0x7f800000)

// ---- scalar conversions ------------------------------------------------------------------
__device__ __forceinline__ float to_float(half_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
    return f;
}
__device__ __forceinline__ float to_float(bf16_t h) { return __uint_as_float(u32(h.x) << 16); }
__device__ __forceinline__ float to_float(float f) { return f; }
__device__ __forceinline__ float to_float(u8code_t c) { return float(int(c.x) - 128); }

// E4M3 decode in software: exact on every arch. Subnormals are m * 2^-9.
__device__ __forceinline__ float e4m3_to_float_sw(u8 c) {
    u32 e = (c >> 3) & 0xF, m = c & 7;
    float mag;
    if (e == 15 && m == 7) mag = __int_as_float(0x7fc00000);              // NaN
    else if (e == 0) mag = float(m) * 0.001953125f;                       // 2^-9
    else mag = __uint_as_float(((e + 120) << 23) | (m << 20));            // (1+m/8)·2^(e-7)
    return (c & 0x80) ? -mag : mag;
}
__device__ __forceinline__ float to_float(e4m3_t c) { return e4m3_to_float_sw(c.x); }

// E4M3 encode in software: round to nearest even, saturate to ±448, NaN -> 0x7F whatever its
// sign (the hardware conversion drops a NaN's sign; measured on an H100).
// Matches `cvt.rn.satfinite.e4m3x2.f32` (sm_89+), which `sdpa-lab verify` checks exhaustively.
__device__ __forceinline__ u8 float_to_e4m3_sw(float x) {
    u32 bits = __float_as_uint(x);
    u8 sign = (bits >> 24) & 0x80;
    u32 abits = bits & 0x7fffffff;
    if (abits > 0x7f800000) return 0x7F;                                 // NaN
    float a = __uint_as_float(abits);
    if (a < 0.015625f) {                                                 // below 2^-6: step 2^-9
        int q = __float2int_rn(a * 512.0f);                              // exact scaling, RNE
        return sign | u8(q);
    }
    int ex = int(abits >> 23) - 127;
    u32 mant = abits & 0x7fffff, q = mant >> 20, rest = mant & 0xfffff;
    if (rest > 0x80000 || (rest == 0x80000 && (q & 1))) q++;
    if (q == 8) { q = 0; ex++; }
    int E = ex + 7;
    if (E > 15 || (E == 15 && q == 7)) return sign | 0x7E;               // satfinite: 448
    return sign | u8((E << 3) | q);
}

#if __CUDA_ARCH__ >= 890
// Hardware E4M3 pairs (sm_89+). The first source operand lands in the high byte.
__device__ __forceinline__ u16 float2_to_e4m3x2(float lo, float hi) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ u16 half2_to_e4m3x2(u32 h2) {
    u16 r;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(h2));
    return r;
}
__device__ __forceinline__ u32 e4m3x2_to_half2(u16 c2) {
    u32 r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(c2));
    return r;
}
#endif

__device__ __forceinline__ half_t half_from_float(float f) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
    return h;
}
__device__ __forceinline__ bf16_t bf16_from_float(float f) {
    bf16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
    return h;
}
template <typename T> __device__ __forceinline__ T from_float(float f);
template <> __device__ __forceinline__ half_t from_float<half_t>(float f) { return half_from_float(f); }
template <> __device__ __forceinline__ bf16_t from_float<bf16_t>(float f) { return bf16_from_float(f); }
template <> __device__ __forceinline__ float from_float<float>(float f) { return f; }

// ---- warp reductions ---------------------------------------------------------------------
// fmaxf drops a NaN operand, so a max alone would hide NaN inputs; kernels carry NaN through
// the sums instead (exp2 of NaN is NaN), which is what makes a NaN row give a NaN output.
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- exponent ----------------------------------------------------------------------------
// ex2.approx.ftz: one MUFU op, relative error ~2^-22, flushes subnormals; exp2f: accurate.
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// =========================================================================================
// Tensor-core path primitives (sm_80 and up): shared-memory addressing, cp.async, ldmatrix,
// mma.sync m16n8k16, named barriers, packed 16-bit conversions. Fragment layouts are written
// beside each wrapper, re-derived from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
// floating point type", "ldmatrix"). Notation: lane = threadIdx.x % 32, g = lane / 4 (the
// "groupID"), t = lane % 4 (the "threadID_in_group").
// =========================================================================================

// ---- addresses ---------------------------------------------------------------------------
// A generic pointer into shared memory as the 32-bit shared-window address that ldmatrix,
// cp.async and st/ld.shared take.
__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a row-major shared tile whose rows are
// ROW_BYTES long. Swizzled (SWZ): rows are exactly ROW_BYTES (a multiple of 128) and chunk c
// of row r is stored at chunk c ^ (r % 8), so the 8 rows that one ldmatrix 8x8 matrix (or one
// quarter-warp of 16-byte accesses) touches at one logical chunk land on 8 distinct 16-byte
// bank groups: all 32 banks, no conflict. Padded (!SWZ): rows are ROW_BYTES + 16 long, which
// shifts consecutive rows by 4 banks, with the same effect. ROW_BYTES here is the unpadded
// length; `tile_row_bytes` gives the stride.
template <int ROW_BYTES, bool SWZ> struct Tile16 {
    static_assert(ROW_BYTES % 128 == 0, "swizzle needs rows of at least 8 chunks");
    static constexpr int STRIDE = SWZ ? ROW_BYTES : ROW_BYTES + 16;
    __device__ __forceinline__ static u32 off(int row, int chunk) {
        return u32(row * STRIDE + ((SWZ ? (chunk ^ (row & 7)) : chunk) << 4));
    }
};

// A lane's ldmatrix addresses into a Tile16, split so that the unrolled loops add only
// compile-time immediates. The lane reads row `row0 + lane_row` (lane_row % 8 == lane % 8)
// at chunk `chunk0 + lane_chunk` (lane_chunk 0 or 1), with row0 % 8 == 0 and chunk0 even.
// Swizzled, the physical chunk is (chunk0 + lane_chunk) ^ (lane % 8): only chunk0 % 8
// interacts with the XOR, so four per-lane offsets (one per chunk0 % 8 in {0, 2, 4, 6})
// cover every chunk0; the rest of chunk0 and all of row0 are immediates.
template <typename T> struct LaneAddr {
    u32 base[4];
    __device__ __forceinline__ LaneAddr(int lane_row, int lane_chunk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) base[i] = T::off(lane_row, 2 * i + lane_chunk);
    }
    __device__ __forceinline__ u32 at(u32 tile, int row0, int chunk0) const {
        return tile + base[(chunk0 & 7) >> 1] + u32(row0 * T::STRIDE + ((chunk0 & ~7) << 4));
    }
};

// ---- 16-byte moves -----------------------------------------------------------------------
struct u32x4 { u32 x, y, z, w; };

// Read-only 16-byte global load (ld.global.nc: the inputs are never written by the kernel).
__device__ __forceinline__ u32x4 ldg16(const void* p) {
    u32x4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void sts16(u32 addr, u32x4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ u32x4 lds16(u32 addr) {
    u32x4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ u32 lds32(u32 addr) {
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ float lds_f32(u32 addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void sts_f32(u32 addr, float a) {
    asm volatile("st.shared.f32 [%0], %1;" :: "r"(addr), "f"(a) : "memory");
}
__device__ __forceinline__ void sts_f32x2(u32 addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void stg_u32(void* p, u32 v) {
    asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

// ---- cp.async (sm_80+) -------------------------------------------------------------------
// cp.async.cg.shared.global [dst], [src], 16, src_size: copies 16 bytes global -> shared
// without passing through registers (.cg: cache in L2 only). With src_size = 0 nothing is
// read and the 16 destination bytes are zero-filled: that is how out-of-range rows become 0
// (src is then not dereferenced; callers may pass a row past the end). Completion is tracked
// per thread in commit groups: commit closes the current group; wait_group N blocks until at
// most N of this thread's groups are pending. The data is visible to *other* threads only
// after a barrier that follows the wait.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

// ---- named barriers ------------------------------------------------------------------------
// bar.sync id, n: wait until n threads (a multiple of 32) have arrived at barrier `id`
// (0 is __syncthreads's). bar.arrive id, n: count this thread's arrival without waiting.
// Both order this thread's earlier shared-memory accesses before the barrier completes for
// the threads that wait on it, so arrive = release, sync = acquire. Ids 1..15 are free.
__device__ __forceinline__ void bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
}
// bar.sync is barrier.sync.aligned: every thread must execute the same instruction. Without
// .aligned, threads may arrive from different call sites (warps on different branches, each
// with its own copy), at some cost in speed.
__device__ __forceinline__ void bar_sync_unaligned(int id, int n) {
    asm volatile("barrier.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}

// ---- register reallocation (sm_90a) ---------------------------------------------------------
// setmaxnreg.{inc,dec}.sync.aligned.u32 N: every warp of a warpgroup (4 consecutive warps,
// executed by all of them) sets its per-thread register count to N (24..256, a multiple of 8);
// dec returns registers to the block's pool, inc blocks until the pool has them. A block starts
// at its launch-bound count (65536 / threads, rounded down to 8), so a producer warpgroup that
// drops to P lets the consumer warpgroups rise to what the pool then holds. ptxas allocates the
// code after each instruction within its count (checked with NVRTC 13.0: a 200-float loop
// under __launch_bounds__(384, 1) spills 488 bytes for sm_90 and none for sm_90a after an inc
// to 240). Only with the arch-specific feature set (sm_90a): SDPA_HAS_SETMAXNREG.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SDPA_HAS_SETMAXNREG 1
#else
#define SDPA_HAS_SETMAXNREG 0
#endif
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if SDPA_HAS_SETMAXNREG
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
#endif
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if SDPA_HAS_SETMAXNREG
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
#endif
}

// ---- mbarriers (sm_80+) ---------------------------------------------------------------------
// A 64-bit shared-memory object counting arrivals per phase: mbarrier.init sets the expected
// count; each mbarrier.arrive counts one (and, by default, releases the thread's earlier
// shared-memory accesses at CTA scope); when the count is reached the phase completes, its
// parity flips and the count re-arms. test_wait / try_wait .parity P returns true once the
// phase with parity P has completed (acquire at CTA scope), so a waiter that tracks "uses of
// this barrier so far & 1" never blocks on a later phase. Unlike bar.sync, arriving and waiting
// are separate: a thread can announce it is done with a buffer and run on. Initialization
// must be visible to other threads before they use the barrier (a __syncthreads does it).
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}" :: "r"(bar) : "memory");
}
// Spin until the phase of parity `parity` has completed. sm_90's try_wait suspends the thread
// for a while in hardware instead of spinning on issue slots.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
#if __CUDA_ARCH__ >= 900
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#else
        asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#endif
    } while (!done);
}

// ---- thread-block clusters (sm_90) ------------------------------------------------------------
// A cluster's CTAs run at the same time on one GPC and can address each other's shared memory
// (distributed shared memory). mapa.shared::cluster maps a shared::cta address of this CTA to
// the same offset in CTA `rank`'s window (offsets are preserved); st.shared::cluster,
// st.async and mbarrier.arrive ... .shared::cluster then write or arrive there. A remote access
// is valid only once the target CTA has started (a cluster barrier after launch says so) and
// until it exits (a cluster barrier before exit). barrier.cluster.arrive.release /
// wait.acquire order every thread's earlier memory accesses, remote ones included, before
// everyone's later ones (ptxas: MEMBAR.ALL.GPU before the arrive, CCTL.IVALL after the wait,
// so only outside loops); .relaxed arrive orders nothing (a "has started" signal).
// fence.mbarrier_init.release.cluster makes an mbarrier.init visible to the next cluster
// barrier. In loops, data goes by st.async, whose bytes complete on the receiver's mbarrier,
// and signals by remote arrivals with the default CTA-scope semantics. The rank and mapa are
// constants of the CTA, so their asm is not volatile (ptxas may hoist them).
// Below sm_90 they compile to nothing (rank 0): only sm_90a registers the kernels that use them.
#if __CUDA_ARCH__ >= 900
#define SDPA_SM90_ASM(...) asm volatile(__VA_ARGS__)
#define SDPA_SM90_ASM_PURE(...) asm(__VA_ARGS__)
#else
#define SDPA_SM90_ASM(...) ((void)0)
#define SDPA_SM90_ASM_PURE(...) ((void)0)
#endif
__device__ __forceinline__ u32 cluster_rank() {
    u32 r = 0;
    SDPA_SM90_ASM_PURE("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_map(u32 addr, u32 rank) {
    u32 r = 0;
    SDPA_SM90_ASM_PURE("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
__device__ __forceinline__ void sts16_cluster(u32 addr, u32x4 v) {
    SDPA_SM90_ASM("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
// A remote arrive with the default semantics (release at CTA scope), as CUTLASS's cluster
// barriers do. With .release.cluster ptxas puts MEMBAR.ALL.GPU before it, and with
// .acquire.cluster on the wait a CCTL.IVALL (L1 invalidation) after it, each once per tile:
// the first cluster-pair kernels ran 30 % slower than the 256-row tile with them (run 71).
__device__ __forceinline__ void mbar_arrive_remote(u32 remote_bar) {
    SDPA_SM90_ASM("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(remote_bar) : "memory");
}
// One of the barrier's arrivals that also raises the phase's expected transaction bytes by
// `bytes` (st.async's complete_tx lowers them; the phase completes at zero arrivals left and
// zero bytes pending, and the byte count may go negative meanwhile).
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    SDPA_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
// st.async: 16 bytes to the shared memory of a cluster peer (addr from mapa), completing 16
// transaction bytes on the peer's mbarrier `remote_bar` once written. The data is visible to
// whoever waits on that barrier's phase; no fence on the sender's side.
__device__ __forceinline__ void sts16_async(u32 addr, u32x4 v, u32 remote_bar) {
    SDPA_SM90_ASM("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                  :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar) : "memory");
}
__device__ __forceinline__ void mbar_init_fence_cluster() {
    SDPA_SM90_ASM("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    SDPA_SM90_ASM("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    SDPA_SM90_ASM("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
    SDPA_SM90_ASM("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ---- ldmatrix ------------------------------------------------------------------------------
// ldmatrix.sync.aligned.m8n8.x4.shared.b16 {r0..r3}, [addr]: loads four 8x8 matrices of
// 16-bit elements. Lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i (16 contiguous
// bytes each, 16-byte aligned). Result: r_i of lane l holds row g = l/4, elements 2t, 2t+1 of
// matrix i (low half = element 2t).
// .trans: r_i of lane l holds elements (row 2t, col g) and (row 2t+1, col g) of matrix i,
// i.e. the transposed matrix's row g, columns 2t, 2t+1.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// ---- mma.sync m16n8k16, fp32 accumulate ----------------------------------------------------
// D(16x8) = A(16x16, row-major) * B(16x8, "col": stored as N rows of K) + C, per warp.
// Fragments (each 32-bit register packs two 16-bit values, lower index in the low half):
//   A: a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//      a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
//   B: b0 = B[k=2t..2t+1][n=g]    b1 = B[k=2t+8..2t+9][n=g]
//   C/D (fp32): c[0], c[1] = C[g][2t], C[g][2t+1];  c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
// So ldmatrix.x4 over (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
// (rows 8-15, k 8-15) of a row-major A tile yields a[0..3] in order; ldmatrix (no .trans)
// over an [n][k] tile (K stored key-major) yields b0 = (n 0-7, k 0-7), b1 = (n 0-7, k 8-15);
// ldmatrix.trans over a [k][n] tile (V stored key-major, n = head dim) yields
// b0 = (k 0-7, n 0-7), b1 = (k 8-15, n 0-7).
template <typename T> struct Mma;
template <> struct Mma<half_t> {
    __device__ __forceinline__ static void run(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct Mma<bf16_t> {
    __device__ __forceinline__ static void run(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// ---- packing fp32 pairs to 16-bit pairs ----------------------------------------------------
// cvt.rn.{f16x2,bf16x2}.f32 d, a, b puts a in the UPPER half and b in the LOWER half.
template <typename T> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<half_t>(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ u32 pack2<bf16_t>(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// Unpack a 16-bit pair to floats (low half first).
__device__ __forceinline__ void unpack2(half_t, u32 v, float& lo, float& hi) {
    lo = to_float(half_t{u16(v & 0xffff)});
    hi = to_float(half_t{u16(v >> 16)});
}
__device__ __forceinline__ void unpack2(bf16_t, u32 v, float& lo, float& hi) {
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// ---- 8-bit codes to 16-bit compute pairs (four codes at a time) -----------------------------
// Every E4M3 value and every (u - 128) is exact in f16 and in bf16, so these are exact.
// Input: w holds codes c0..c3 in bytes 0..3. Output: lo = {c0, c1}, hi = {c2, c3}, each
// element in the half that matches its index (c0 in lo's low half).

// Why the kernels decode at all on sm_90a: ptxas lowers an E4M3 mma.sync to these same
// conversions plus f16 HMMA (Hopper's FP8 tensor path is wgmma only), and F2FP runs at the
// integer pipe's full rate (run 88, docs/perf-notes.md round 17), so one F2FP per pair is the
// cheapest decode there is.
// E4M3 -> f16x2 pair. sm_89+: cvt.rn.f16x2.e4m3x2 (the code in the low byte of the b16
// source becomes the low half). Older: place the 7 magnitude bits under the f16 exponent
// (f16 bits = s | e4m3_magnitude << 7, worth x * 2^-8 because the biases differ by 8, and
// f16 subnormals cover e4m3 subnormals exactly), multiply by 2^8 (exact), then force NaN
// for the codes S.1111.111 (the bit trick alone would give +-480).
__device__ __forceinline__ u32 e4m3x2_to_f16x2_sw(u32 t) {  // t = {c0 in bits 0-7, c1 in bits 16-23}
    u32 h = ((t << 7) & 0x3f803f80u) | ((t << 8) & 0x80008000u);
    u32 r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(h), "r"(0x5c005c00u));  // x 256
    u32 nan = (((t & 0x007f007fu) + 0x00010001u) & 0x00800080u) * 0xfcu;  // 0x80 * 0xfc = 0x7e00
    return r | nan;
}
__device__ __forceinline__ void e4m3x4_to_f16(u32 w, u32& lo, u32& hi) {
#if __CUDA_ARCH__ >= 890
    u16 a = u16(w & 0xffff), b = u16(w >> 16);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(a));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(b));
#else
    lo = e4m3x2_to_f16x2_sw(prmt(w, 0u, 0x4140u));  // bytes {c0, 0, c1, 0}
    hi = e4m3x2_to_f16x2_sw(prmt(w, 0u, 0x4342u));  // bytes {c2, 0, c3, 0}
#endif
}
// The same, with the word's halves taken in place: mov.b32 {lo, hi} lets ptxas feed F2FP's
// .H1 operand instead of shifting the word (one SHF fewer per four codes). For the fragment
// decode, where a conversion sits beside every mma; round 14's fold of the shared decode
// (within noise there) made a decode-warp tile spill, so the staged decodes keep the form above.
__device__ __forceinline__ void e4m3x4_to_f16_h1(u32 w, u32& lo, u32& hi) {
#if __CUDA_ARCH__ >= 890
    u16 a, b;
    asm("mov.b32 {%0, %1}, %2;" : "=h"(a), "=h"(b) : "r"(w));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(a));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(b));
#else
    e4m3x4_to_f16(w, lo, hi);
#endif
}
// f16x2 holding values exact in bf16 -> bf16x2: widen to f32 (exact) and keep the upper 16
// bits of each (exact because the low 16 bits are zero; NaN stays NaN).
__device__ __forceinline__ u32 f16x2_exact_to_bf16x2(u32 h) {
    float a = to_float(half_t{u16(h & 0xffff)}), b = to_float(half_t{u16(h >> 16)});
    return prmt(__float_as_uint(a), __float_as_uint(b), 0x7632u);
}
// The seeds' simulated FP8: f16 bits 0x6400 | u are 1024 + u exactly; subtract 1152.
__device__ __forceinline__ void u8x4_to_f16_centered(u32 w, u32& lo, u32& hi) {
    u32 a = prmt(w, 0x64646464u, 0x4140u), b = prmt(w, 0x64646464u, 0x4342u);
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(a), "r"(0x64806480u));
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(b), "r"(0x64806480u));
}

// Four codes of type SRC to two pairs of the compute type C.
template <typename SRC, typename C> struct Decode4;
template <> struct Decode4<e4m3_t, half_t> {
    __device__ __forceinline__ static void run(u32 w, u32& lo, u32& hi) { e4m3x4_to_f16(w, lo, hi); }
};
template <> struct Decode4<e4m3_t, bf16_t> {
    __device__ __forceinline__ static void run(u32 w, u32& lo, u32& hi) {
        e4m3x4_to_f16(w, lo, hi);
        lo = f16x2_exact_to_bf16x2(lo);
        hi = f16x2_exact_to_bf16x2(hi);
    }
};
template <> struct Decode4<u8code_t, half_t> {
    __device__ __forceinline__ static void run(u32 w, u32& lo, u32& hi) { u8x4_to_f16_centered(w, lo, hi); }
};
template <> struct Decode4<u8code_t, bf16_t> {
    __device__ __forceinline__ static void run(u32 w, u32& lo, u32& hi) {
        u8x4_to_f16_centered(w, lo, hi);
        lo = f16x2_exact_to_bf16x2(lo);
        hi = f16x2_exact_to_bf16x2(hi);
    }
};
// 16 codes (one 16-byte chunk) to 16 compute values (two 16-byte chunks, in order).
template <typename SRC, typename C>
__device__ __forceinline__ void decode16(u32x4 in, u32x4& out0, u32x4& out1) {
    Decode4<SRC, C>::run(in.x, out0.x, out0.y);
    Decode4<SRC, C>::run(in.y, out0.z, out0.w);
    Decode4<SRC, C>::run(in.z, out1.x, out1.y);
    Decode4<SRC, C>::run(in.w, out1.z, out1.w);
}
