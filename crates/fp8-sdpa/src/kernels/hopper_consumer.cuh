// The Hopper consumer warpgroups' loop over work tiles, written once over a GEMM policy
// (hopper.cu's Gemm16, hopper_fp8.cu's GemmFp8). The including kernel file defines QRing,
// KRing, VRing: the rings (hopper_ring.cuh) the consumers read Q, K and V from.
//
// A GEMM policy G provides:
//   ROW: bytes per swizzled row of a Q slab; PFrag: P's A fragments (registers);
//   score_scale(p, w, kv_descale): the softmax's log2 scale, descales of Q and K folded in;
//   V_DESCALE: V's descale scales the output;
//   issue_qk(s, q, k): S = Q.K^T into s, committed;
//   to_p(s, pa): P (in s) into A fragments;
//   pv_acc(o, ob): the registers P.V accumulates in: O itself (16-bit), or OB, OB_REGS
//   registers of its own (FP8, added to O in fp32);
//   issue_pv(acc, pa, v): commits P.V, in PV_PARTS column parts (v advances PV_PART_BYTES);
//   rescale_o(o, alpha): O *= alpha before P.V adds to it (16-bit);
//   fold_pv(o, ob, alpha, part): O = O * alpha + OB after it (FP8).
//   A policy that folds leaves rescale_o empty, and the other way round.
#pragma once
#include "hopper_ring.cuh"

namespace hopper {
// ---- consumer: one warpgroup, 64 query rows of every tile ---------------------------------
// Per key block (last to first): S = Q.K^T, mask, online softmax, O += P.V. OVERLAP runs the
// softmax of block j while P.V of block j + 1 (issued just before) is on the tensor cores.
template <class G>
__device__ __forceinline__ void consume(const SdpaParams& p, const HopperMaps& maps, u32 smem, int cw) {
    Scheduler sched(p);
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const QRing q_ring{smem};
    const KRing k_ring{smem};
    const VRing v_ring{smem};
    const u32 q_tile = smem + cw * 64 * G::ROW;
    u32 it = 0, t_local = 0;  // ring uses, live tiles so far
    if (PINGPONG && cw == 1) bar_arrive(TURN_0, 256);
    for (int t = blockIdx.x; t < sched.tiles; t += gridDim.x) {
        Tile w = sched.at(p, t);
        if (!w.live()) continue;
        const int q0 = w.m_block * TILE_M + cw * 64 + 16 * warp + g;  // this thread's first row
        // A per-(batch, kv head) descale (E4M3 K or V), read where it is needed rather than held
        // across the key loop (no register to spare).
        auto kv_descale = [&](const float* d) { return d[w.b * p.kv_descale_stride_b + w.hq / (p.heads_q / p.heads_kv)]; };
        const float sl2 = G::score_scale(p, w, kv_descale);
        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
        RowState rs = {{-SDPA_INF, -SDPA_INF}, {0.f, 0.f}};
        q_ring.wait_full(t_local++);
        if (w.n_blocks == 0 && lane == 0) mbar_arrive(q_ring.empty());
        // K (and, on the tile's last key block, Q) are free once S's wgmma has completed.
        auto release_k = [&](u32 use, int j) {
            if (lane == 0) {
                mbar_arrive(k_ring.empty(use));
                if (j == 0) mbar_arrive(q_ring.empty());
            }
        };
        float s[TILE_N / 2], alpha[2], ob[G::OB_REGS];
        typename G::PFrag pa;
        auto& acc = G::pv_acc(o, ob);
        // S of key block j (ring use `u`) on its own, through the softmax.
        auto scores = [&](u32 u, int j) {
            k_ring.wait_full(u);
            turn_wait(cw);
            G::issue_qk(s, q_tile, k_ring.tile(u));
            turn_pass(cw);
            wgmma_wait<0>();
            wgmma_hold(s);
            release_k(u, j);
            mask_block(s, j, w, cw, q0, t4, p);
            softmax_step(s, rs, alpha, sl2);
        };
        // P.V of ring use `u` on its own, folded into O with factor `a`.
        auto values = [&](u32 u, const float (&a)[2]) {
            v_ring.wait_full(u);
#pragma unroll
            for (int part = 0; part < G::PV_PARTS; ++part) {
                turn_wait(cw);
                G::issue_pv(acc, pa, v_ring.tile(u) + part * G::PV_PART_BYTES);
                turn_pass(cw);
                wgmma_wait<0>();
                wgmma_hold(acc);
                if (part == G::PV_PARTS - 1 && lane == 0) mbar_arrive(v_ring.empty(u));
                G::fold_pv(o, ob, a, part);
            }
        };
        if (w.n_blocks > 0 && OVERLAP) {
            // Blocks go last to first, so block j + 1 is the previous one. Folding P.V(j + 1)
            // into O takes block j + 1's alpha, which waits a turn in `pend`.
            int j = w.n_blocks - 1;
            float pend[2] = {0.f, 0.f};  // O is empty before the first block
            scores(it, j);
            G::to_p(s, pa);
            for (--j; j >= 0; --j, ++it) {
                k_ring.wait_full(it + 1);
                turn_wait(cw);
                G::issue_qk(s, q_tile, k_ring.tile(it + 1));
                v_ring.wait_full(it);
                G::issue_pv(acc, pa, v_ring.tile(it));
                turn_pass(cw);
                wgmma_wait<1>();
                wgmma_hold(s);
                release_k(it + 1, j);
                mask_block(s, j, w, cw, q0, t4, p);
                softmax_step(s, rs, alpha, sl2);
                wgmma_wait<0>();
                wgmma_hold(acc);
                if (lane == 0) mbar_arrive(v_ring.empty(it));
                G::fold_pv(o, ob, pend, 0);
                pend[0] = alpha[0];
                pend[1] = alpha[1];
                G::rescale_o(o, alpha);
                G::to_p(s, pa);
            }
            values(it++, pend);
        } else {
            for (int j = w.n_blocks - 1; j >= 0; --j, ++it) {
                scores(it, j);
                G::rescale_o(o, alpha);
                G::to_p(s, pa);
                values(it, alpha);
            }
        }
        epilogue(p, maps, smem, cw, w, o, rs, q0, sl2, G::V_DESCALE && p.v_descale ? kv_descale(p.v_descale) : 1.f);
    }
    if (STAGE_O && tid == 0) bulk_wait_read<0>();  // the last store has read its source
    if (PINGPONG && cw == 0) bar_sync(TURN_0, 256);
}
}  // namespace hopper
