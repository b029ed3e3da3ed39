// The portable family's compute (portable.cu, steps 3 and 4): one K/V tile on the tensor cores,
// and the epilogue.
#pragma once
#include "portable_decode8.cuh"

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
    const auto scale = [&](int mi, int h) { return ws.sl2_at(sl2, mi, h); };
    online_softmax_frags<FAST_EXP, RESCALE_SKIP, MI0>(s, ws.o, ws.m, ws.l, scale, RESCALE_TAU);
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

// exact.cuh's rare path for this lane's rows, after every store of the epilogue (ws.l: the
// rows' sums over their quads). Under causal a row multiplied keys after its diagonal up to
// the block's last visited tile, at most BM + BN past it (keys past seq_kv were zero-filled);
// it sees keys [0, row + seq_kv - seq_q]. Everything comes from the kernel's parameters p0
// and the work tile's coordinates (a varlen sequence's offsets read again): the block's
// variable-length view lives in registers, and keeping its pointers for this would hold them
// across the key loop (spills in the varlen tiles).
__device__ __forceinline__ void exact_rows(const WarpState& ws, const SdpaParams& p0, const Work& w, int row_w,
                                           int warp, int t, int g, float v_ds) {
    int q0 = 0, k0 = 0, n_q = p0.seq_q, n_k = p0.seq_kv;
    if constexpr (VARLEN) {
        seq_span(p0.cu_seqlens_q, w.b, p0.total_q, q0, n_q);
        seq_span(p0.cu_seqlens_k, w.b, p0.total_k, k0, n_k);
    }
    const int hkv = w.hq / (opaque(p0.heads_q) / opaque(p0.heads_kv));
    const float q_ds = p0.q_descale ? p0.q_descale[w.b * p0.q_descale_stride_b + w.hq] : 1.f;
    const float k_ds = p0.k_descale ? p0.k_descale[w.b * p0.kv_descale_stride_b + hkv] : 1.f;
    const KeyRows kv{(const kv_t*)p0.k + (long long)w.b * p0.k_stride_b + (long long)k0 * p0.k_stride_s +
                         (long long)hkv * p0.k_stride_h,
                     (const kv_t*)p0.v + (long long)w.b * p0.v_stride_b + (long long)k0 * p0.v_stride_s +
                         (long long)hkv * p0.v_stride_h,
                     p0.k_stride_s, p0.v_stride_s, nullptr, 0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 2 * R; ++i) {
        const int mi = i / 2, h = i % 2;
        const int row = row_w + frag_off(warp, mi) + g + 8 * h;
        if (row >= n_q) continue;
        const int seen = max(0, min(n_k, row + n_k - n_q + 1));
        const int masked = min(n_k, row + n_k - n_q + 1 + BM + BN);
        const long long at = (long long)q0 + row;
        const q_t* q = (const q_t*)p0.q + (long long)w.b * p0.q_stride_b + at * p0.q_stride_s +
                       (long long)w.hq * p0.q_stride_h;
        o_t* orow = (o_t*)p0.o + (long long)w.b * p0.o_stride_b + (long long)w.hq * p0.o_stride_h + at * p0.o_stride_s;
        exact_row<D, FRAG ? QUADS : PAIRS, q_t, kv_t, o_t>(
            q, kv, p0.scale_log2 * q_ds * k_ds, ws.m[mi][h] + log2f(ws.l[mi][h]), v_ds, seen, seen, masked, t,
            [&](int c, u32 word) { stg_u32(orow + exact_col<FRAG ? QUADS : PAIRS>(c, t), word); });
    }
}

// ==== Step 4: epilogue ===========================================================================
// O = acc · v_descale / l for this warp's rows, and LSE (p: the block's view of its sequence,
// p0: the kernel's parameters). Fully masked rows (l == 0) give 0
// and -inf; a NaN l gives NaN. Causal: a row whose stored values came out non-finite takes
// exact.cuh's rare path once every row is stored (a masked key's non-finite V).
__device__ __forceinline__ void write_out(WarpState& ws, const SdpaParams& p, const SdpaParams& p0, const Work& w,
                                          int row_w, int warp, int lane, float v_ds) {
    const int g = lane >> 2, t = lane & 3;
    o_t* o = (o_t*)p.o + (long long)w.b * p.o_stride_b + (long long)w.hq * p.o_stride_h;
    u32 chk = 0;  // 0 while every stored value is finite (exact.cuh)
#pragma unroll
    for (int mi = 0; mi < R; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float l = quad_sum(ws.l[mi][h]);
            if constexpr (CAUSAL) ws.l[mi][h] = l;  // the row's, for exact_rows
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
                        const u32 w0 = pack2<o_t>(ev[2 * h] * inv, od[2 * h] * inv);
                        const u32 w1 = pack2<o_t>(ev[2 * h + 1] * inv, od[2 * h + 1] * inv);
                        stg_u32(orow + 16 * c + 4 * t, w0);
                        stg_u32(orow + 16 * c + 4 * t + 2, w1);
                        if constexpr (CAUSAL) {
                            fold_nonfinite<o_t>(chk, w0);
                            fold_nonfinite<o_t>(chk, w1);
                        }
                    }
                } else {
#pragma unroll
                    for (int dt = 0; dt < D / 8; ++dt) {
                        if constexpr (CAUSAL) {
                            const u32 word = pack2<o_t>(ws.o[mi][dt][2 * h] * inv, ws.o[mi][dt][2 * h + 1] * inv);
                            fold_nonfinite<o_t>(chk, word);
                            stg_u32(orow + 8 * dt + 2 * t, word);
                        } else {  // as before the check (the same SASS)
                            stg_u32(orow + 8 * dt + 2 * t, pack2<o_t>(ws.o[mi][dt][2 * h] * inv, ws.o[mi][dt][2 * h + 1] * inv));
                        }
                    }
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
    if constexpr (CAUSAL) {
        if (chk != 0u) exact_rows(ws, p0, w, row_w, warp, t, g, v_ds);
    }
}
