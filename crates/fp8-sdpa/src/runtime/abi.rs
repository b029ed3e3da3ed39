//! Rust mirror of `kernels/abi.cuh`'s `SdpaParams`. Field order, types and padding must
//! match the CUDA struct exactly; the size/offset test below pins the layout.

use cudarc::driver::DeviceRepr;

/// The kernels' parameter block (see `abi.cuh` for the meaning of each field).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SdpaParams {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    pub q_descale: u64,
    pub k_descale: u64,
    pub v_descale: u64,
    pub q_stride_b: i64,
    pub q_stride_s: i64,
    pub q_stride_h: i64,
    pub k_stride_b: i64,
    pub k_stride_s: i64,
    pub k_stride_h: i64,
    pub v_stride_b: i64,
    pub v_stride_s: i64,
    pub v_stride_h: i64,
    pub o_stride_b: i64,
    pub o_stride_s: i64,
    pub o_stride_h: i64,
    pub batch: i32,
    pub seq_q: i32,
    pub seq_kv: i32,
    pub heads_q: i32,
    pub heads_kv: i32,
    pub q_descale_stride_b: i32,
    pub kv_descale_stride_b: i32,
    pub scale: f32,
    pub scale_log2: f32,
    /// Variable-length batches (the portable and decode kernels' varlen modes): i32
    /// `[batch + 1]` token offsets into Q/O; 0 for dense calls.
    pub cu_seqlens_q: u64,
    /// i32 `[batch + 1]` token offsets into K/V (varlen), else 0 (also for a paged cache).
    pub cu_seqlens_k: u64,
    /// Tokens of the packed Q/O (varlen), else 0.
    pub total_q: i32,
    /// Tokens of the packed K/V (varlen), else 0.
    pub total_k: i32,
}

// SAFETY: plain-old-data with C layout, mirrored by the CUDA struct; passed by value.
unsafe impl DeviceRepr for SdpaParams {}

/// The decode family's second parameter block (`kernels/decode.cu`'s `DecodeParams`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeParams {
    /// Partial outputs, fp32 `[splits, batch, heads_q, seq_q, dim]`; 0 with one split.
    pub o_part: u64,
    /// Partial LSEs, fp32 `[splits, batch, heads_q, seq_q]`; 0 with one split.
    pub lse_part: u64,
    /// Paged K/V: i32 `[batch, max_pages]` page indices; 0 for contiguous K/V.
    pub block_table: u64,
    /// i32 `[batch]` keys per sequence; 0 when every sequence has `seq_kv` keys.
    pub seqlens_k: u64,
    pub max_pages: i32,
    pub page_size: i32,
    pub splits: i32,
    pub split_keys: i32,
    /// Paged K/V: pages in the pools (their first dim, >= 1); the kernel clamps every block
    /// table entry below it. 0 for contiguous K/V.
    pub pages: i32,
}

// SAFETY: plain old data, laid out as the CUDA struct (test below).
unsafe impl DeviceRepr for DecodeParams {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_cuda_struct() {
        // 8 pointers + 12 strides (8 bytes each) + 7 ints + 2 floats = 160 + 36 = 196, padded to
        // 200; then the varlen fields: 2 pointers at 200 and 208, 2 ints at 216 and 220.
        assert_eq!(std::mem::size_of::<SdpaParams>(), 224);
        assert_eq!(std::mem::align_of::<SdpaParams>(), 8);
        let p = SdpaParams::default();
        let base = &p as *const _ as usize;
        assert_eq!(&p.q_stride_b as *const _ as usize - base, 64);
        assert_eq!(&p.batch as *const _ as usize - base, 160);
        assert_eq!(&p.scale_log2 as *const _ as usize - base, 192);
        assert_eq!(&p.cu_seqlens_q as *const _ as usize - base, 200);
        assert_eq!(&p.cu_seqlens_k as *const _ as usize - base, 208);
        assert_eq!(&p.total_q as *const _ as usize - base, 216);
        assert_eq!(&p.total_k as *const _ as usize - base, 220);
    }

    #[test]
    fn decode_layout_matches_the_cuda_struct() {
        // 4 pointers + 5 ints = 52 bytes, padded to 56 (8-byte alignment).
        assert_eq!(std::mem::size_of::<DecodeParams>(), 56);
        assert_eq!(std::mem::align_of::<DecodeParams>(), 8);
        let p = DecodeParams::default();
        let base = &p as *const _ as usize;
        assert_eq!(&p.max_pages as *const _ as usize - base, 32);
        assert_eq!(&p.split_keys as *const _ as usize - base, 44);
        assert_eq!(&p.pages as *const _ as usize - base, 48);
    }
}
