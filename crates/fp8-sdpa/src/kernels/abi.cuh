// The attention kernels' parameter block, passed by value. Mirrored field for field by
// `runtime::abi::SdpaParams` in Rust (#[repr(C)]); change both together.
//
// Layout conventions:
//  - strides are in elements, per (batch, sequence, head); the head dim is contiguous;
//  - element value = decode(code) * descale, where the descale is 1 for fp16/bf16,
//    per (batch, head) for E4M3 (q: query head, k/v: kv head; a batch stride of 0
//    broadcasts one descale per head over the batch), and (s * 448 / 127) for the seeds'
//    simulated FP8, whose decode is (u - 128);
//  - causal masking is aligned bottom-right: query i sees key j iff j <= i + seq_kv - seq_q;
//    a query row that sees no key gets O = 0 and LSE = -inf;
//  - lse, when non-null, is fp32 [batch, heads_q, seq_q], natural log;
//  - variable-length batches (the portable and decode families' SDPA_VARLEN modes): Q and O are
//    packed [total_q, heads_q, dim], K and V [total_k, heads_kv, dim], and sequence b is the
//    tokens [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of Q/O and [cu_seqlens_k[b],
//    cu_seqlens_k[b + 1]) of K/V (FlashAttention's varlen convention); batch strides are 0,
//    seq_q and seq_kv are the longest sequences (the grid's extent), causal aligns each
//    sequence bottom-right, and lse is [heads_q, total_q]. Null for dense calls. The decode
//    family's paged form reads K/V through its block table instead: cu_seqlens_k is null
//    and K/V's batch stride is the page stride.
#pragma once

struct SdpaParams {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;
    long long q_stride_b, q_stride_s, q_stride_h;
    long long k_stride_b, k_stride_s, k_stride_h;
    long long v_stride_b, v_stride_s, v_stride_h;
    long long o_stride_b, o_stride_s, o_stride_h;
    int batch, seq_q, seq_kv, heads_q, heads_kv;
    int q_descale_stride_b;   // 0 (broadcast over batch) or heads_q
    int kv_descale_stride_b;  // 0 (broadcast over batch) or heads_kv
    float scale;              // softmax scale
    float scale_log2;         // scale * log2(e): scores are kept in base 2
    // Variable-length batches (see above); appended last so that the other fields keep their
    // offsets in every kernel.
    const int* cu_seqlens_q;  // [batch + 1] token offsets into Q/O (varlen), else null
    const int* cu_seqlens_k;  // [batch + 1] token offsets into K/V
    int total_q, total_k;     // tokens of the packed tensors (the offsets are clamped to them)
};

// Sequence b of a variable-length batch: its first token `off` and its length `n`, read from the
// offsets `cu` and clamped to the packed tensors' `total` tokens, so that offsets the host did not
// check never address outside them. Every family's varlen mode cuts its sequences out this way.
__device__ __forceinline__ void seq_span(const int* cu, int b, int total, int& off, int& n) {
    off = min(max(cu[b], 0), total);
    n = min(max(cu[b + 1], off), total) - off;
}

// A paged cache's table entry clamped to the pools' `pages` (>= 1): as unsigned, a negative
// entry is huge, so one min maps every bad entry to the last page. Entries the host did not
// check never address outside the pools.
__device__ __forceinline__ long long clamp_page(int entry, int pages) {
    return min(unsigned(entry), unsigned(pages - 1));
}
