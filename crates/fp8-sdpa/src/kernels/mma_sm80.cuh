// mma.sync family primitives (sm_80 and up): swizzled shared tiles, cp.async, ldmatrix,
// mma.sync m16n8k16. Fragment layouts are written beside each wrapper, re-derived from the PTX
// ISA ("Matrix Fragments for mma.m16n8k16 with floating point type", "ldmatrix"). Notation:
// lane = threadIdx.x % 32, g = lane / 4 (the "groupID"), t = lane % 4 (the "threadID_in_group").
#pragma once
#include "types.cuh"

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

// 8-bit tiles read by ldmatrix (fragment decode): rows of ROW_BYTES codes, chunk c of row r
// stored at chunk c ^ swz(r), so that the 8 consecutive rows of one ldmatrix matrix at one
// logical chunk hit 8 distinct 16-byte bank groups. Rows of 128 bytes or more: swz(r) = r % 8,
// as in Tile16. 64-byte rows (4 chunks, two rows per 128-byte bank window): swz(r) =
// (r / 2) % 4, so that the 4 even and the 4 odd rows of the 8 each take 4 distinct chunks, in
// different halves of the window.
template <int ROW_BYTES> struct Tile8 {
    static_assert(ROW_BYTES == 64 || ROW_BYTES % 128 == 0, "rows of 64 bytes or whole bank windows");
    static constexpr int STRIDE = ROW_BYTES;
    __device__ __forceinline__ static int swz(int row) { return ROW_BYTES >= 128 ? (row & 7) : ((row >> 1) & 3); }
    __device__ __forceinline__ static u32 off(int row, int chunk) { return u32(row * STRIDE + ((chunk ^ swz(row)) << 4)); }
};

// Fragment decode's Q order: one 16-column block of Q (chunks a, b: column pairs P0..P3,
// P4..P7, pair Pi = d 2i, 2i + 1) into the order P0 P2 P4 P6 | P1 P3 P5 P7, so that ldmatrix
// gives a[0] = d 4t, 4t + 1 and a[2] = d 4t + 2, 4t + 3: the k order in which an 8-bit
// ldmatrix of K (8 keys x 16 codes, lane (g, t) holding codes 4t..4t+3 of key g) decodes to
// a B fragment {b0, b1} (portable.cu's FRAG).
__device__ __forceinline__ void qperm(u32x4& a, u32x4& b) {
    const u32x4 x = a, y = b;
    a = u32x4{x.x, x.z, y.x, y.z};
    b = u32x4{x.y, x.w, y.y, y.w};
}

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

// Two m16n8 fp32 accumulators (columns 0-7 and 8-15 of a k16 block, e.g. S for keys
// 16k..16k+15) packed as the A fragment of m16n8k16: lane (g, t) holds C (g, 2t..), (g+8, 2t..)
// of each tile, which is A's a[0], a[1] (first tile) and a[2], a[3] (second tile).
template <typename T> __device__ __forceinline__ void acc_to_a(u32 (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
    a[0] = pack2<T>(lo[0], lo[1]);
    a[1] = pack2<T>(lo[2], lo[3]);
    a[2] = pack2<T>(hi[0], hi[1]);
    a[3] = pack2<T>(hi[2], hi[3]);
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

