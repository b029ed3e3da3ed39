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
//  - lse, when non-null, is fp32 [batch, heads_q, seq_q], natural log.
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
};
