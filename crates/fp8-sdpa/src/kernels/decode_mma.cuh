// The decode family's fragment math over one warp step of KW keys: S = Q.K^T and O += P.V,
// from 16-bit K/V tiles (ldmatrix straight into mma B fragments) or 8-bit ones (fragment
// decode, with Q's columns and O's d-tiles permuted to match). decode.cu defines, before
// including: T, KvT and the dcfg constants (D, KW, KV8, Tile, Tile8b).
#pragma once
#include "types.cuh"
#include "mma_sm80.cuh"

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

// The 16-bit forms' per-lane ldmatrix addresses (x4 over 16 keys x 2 chunks of K; .trans over
// 16 keys x 2 chunks of V), computed once per CTA.
struct KvLanes {
    LaneAddr<Tile> k, v;
    __device__ __forceinline__ explicit KvLanes(int lane)
        : k((lane % 8) + 8 * (lane / 16), (lane / 8) % 2), v((lane % 8) + 8 * ((lane / 8) % 2), lane / 16) {}
};

// Step: S = Q.K^T over this warp's KW keys (KW / 8 accumulators of 16 x 8).
__device__ __forceinline__ void qk_step(float (&s)[KW / 8][4], const u32 (&qa)[D / 16][4], u32 k_tile,
                                        const KvLanes& kv, int lane) {
#pragma unroll
    for (int n = 0; n < KW / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    if constexpr (KV8) s_step8(s, qa, k_tile, lane);
    else s_step16(s, qa, k_tile, kv.k);
}

// Step: O += P.V; P's accumulators are the A fragments of KW / 16 k16 steps.
__device__ __forceinline__ void pv_step(float (&o)[D / 8][4], const float (&s)[KW / 8][4], u32 v_tile,
                                        const KvLanes& kv, int lane) {
    if constexpr (KV8) pv_step8(o, s, v_tile, lane);
    else pv_step16(o, s, v_tile, kv.v);
}
