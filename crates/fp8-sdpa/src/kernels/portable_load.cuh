// The portable family's copies (portable.cu, steps 1 and 2): the Q tile, and K/V tiles into
// the ring.
#pragma once
#include "portable_work.cuh"

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
