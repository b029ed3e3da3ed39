//! Work and traffic of one attention call, for TFLOPS and GB/s.
//!
//! FLOPs count the two matrix products only: `2·D` for Q·Kᵀ and `2·D` for P·V per attended
//! (query, key) pair and query head, so `4·B·Hq·pairs·D`. Under a causal mask only unmasked
//! pairs count, with the mask aligned bottom-right when `Sq ≠ Skv`
//! ([`AttnShape::attended_pairs`]). Softmax work is not counted (the FlashAttention convention,
//! so figures compare with published ones).
//!
//! Bytes are the minimum traffic: each input read once and each output written once. A kernel
//! that re-reads K/V per query tile moves more; GB/s here is "useful" bandwidth.

use fp8_sdpa::{AttnShape, DType, Precision};
use serde::{Deserialize, Serialize};

/// Floating-point operations of one forward call.
pub fn flops(shape: &AttnShape, causal: bool) -> f64 {
    // attended_pairs already includes batch × query heads.
    4.0 * shape.attended_pairs(causal) as f64 * shape.head_dim as f64
}

/// Minimum bytes moved by one forward call, per tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Q read.
    pub q: u64,
    /// K read (uses `heads_kv`).
    pub k: u64,
    /// V read (uses `heads_kv`).
    pub v: u64,
    /// fp32 descales read (scaled element types only).
    pub descales: u64,
    /// O written.
    pub out: u64,
    /// fp32 log-sum-exp written, when requested.
    pub lse: u64,
}

impl Traffic {
    /// Sum of all parts.
    pub fn total(&self) -> u64 {
        self.q + self.k + self.v + self.descales + self.out + self.lse
    }
}

/// Descale count of one scaled tensor: one fp32 per (batch, kv-head), FlashAttention-3's
/// granularity, which is also the finest the library takes (a per-kv-head descale broadcast
/// over the batch reads less, so this is the upper bound).
fn descale_bytes(shape: &AttnShape, dtype: DType) -> u64 {
    if dtype.is_scaled() {
        (shape.batch * shape.heads_kv * DType::F32.size()) as u64
    } else {
        0
    }
}

/// Bytes read and written by one forward call at `precision`, with or without the LSE output.
pub fn traffic(shape: &AttnShape, precision: Precision, lse: bool) -> Traffic {
    let q_dt = precision.q();
    let kv_dt = precision.kv();
    let kv = (shape.kv_len() * kv_dt.size()) as u64;
    Traffic {
        q: (shape.q_len() * q_dt.size()) as u64,
        k: kv,
        v: kv,
        descales: descale_bytes(shape, q_dt) + 2 * descale_bytes(shape, kv_dt),
        out: (shape.q_len() * precision.out().size()) as u64,
        lse: if lse {
            (shape.lse_len() * DType::F32.size()) as u64
        } else {
            0
        },
    }
}

/// Total bytes of one call (see [`traffic`]).
pub fn bytes(shape: &AttnShape, precision: Precision, lse: bool) -> u64 {
    traffic(shape, precision, lse).total()
}

/// TFLOPS for `flops` done in `time_us` microseconds; `None` for a non-positive or
/// non-finite time.
pub fn tflops(flops: f64, time_us: f64) -> Option<f64> {
    (time_us.is_finite() && time_us > 0.0).then(|| flops / (time_us * 1e-6) / 1e12)
}

/// GB/s (10⁹ bytes per second) for `bytes` moved in `time_us` microseconds; `None` for a
/// non-positive or non-finite time.
pub fn gbps(bytes: u64, time_us: f64) -> Option<f64> {
    (time_us.is_finite() && time_us > 0.0).then(|| bytes as f64 / (time_us * 1e-6) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(b: usize, sq: usize, skv: usize, hq: usize, hkv: usize, d: usize) -> AttnShape {
        AttnShape::new(b, sq, skv, hq, hkv, d)
    }

    #[test]
    fn non_causal_is_four_bhssd() {
        let s = shape(2, 512, 512, 8, 8, 64);
        assert_eq!(flops(&s, false), 4.0 * 2.0 * 8.0 * 512.0 * 512.0 * 64.0);
    }

    #[test]
    fn causal_square_counts_the_lower_triangle() {
        let s = shape(1, 4, 4, 1, 1, 64);
        assert_eq!(flops(&s, true), 4.0 * 10.0 * 64.0);
        // large S: about half the work (the anchors' "halved for causal")
        let big = shape(1, 4096, 4096, 1, 1, 64);
        let ratio = flops(&big, true) / flops(&big, false);
        assert!((ratio - 0.5).abs() < 1e-3, "{ratio}");
    }

    #[test]
    fn causal_bottom_right_when_lengths_differ() {
        // Sq 2, Skv 5: row 0 sees keys 0..=3, row 1 sees 0..=4 → 9 pairs
        let s = shape(3, 2, 5, 2, 1, 128);
        assert_eq!(flops(&s, true), 4.0 * 9.0 * 3.0 * 2.0 * 128.0);
        // Sq 5, Skv 2: the first three rows see nothing → 0+0+0+1+2 = 3 pairs
        let t = shape(1, 5, 2, 1, 1, 64);
        assert_eq!(flops(&t, true), 4.0 * 3.0 * 64.0);
        // decode: one query row sees every key
        let d = shape(1, 1, 4096, 32, 8, 128);
        assert_eq!(flops(&d, true), flops(&d, false));
    }

    #[test]
    fn bytes_f16_mha() {
        let s = shape(2, 512, 512, 8, 8, 64);
        let n = 2 * 512 * 8 * 64 * 2u64; // elements × 2 bytes
        let t = traffic(&s, Precision::F16, false);
        assert_eq!(
            (t.q, t.k, t.v, t.out, t.descales, t.lse),
            (n, n, n, n, 0, 0)
        );
        assert_eq!(bytes(&s, Precision::F16, true), 4 * n + 2 * 8 * 512 * 4);
    }

    #[test]
    fn gqa_kv_bytes_use_kv_heads() {
        let s = shape(32, 1, 4096, 32, 8, 128);
        let t = traffic(&s, Precision::F16, false);
        assert_eq!(t.k, 32 * 4096 * 8 * 128 * 2);
        assert_eq!(t.q, 32 * 32 * 128 * 2);
        assert_eq!(t.out, t.q);
    }

    #[test]
    fn fp8_kv_halves_kv_bytes_and_adds_descales() {
        let s = shape(8, 1, 32768, 32, 8, 128);
        let f16 = traffic(&s, Precision::F16, false);
        let f8 = traffic(&s, Precision::Fp8KvF16, false);
        assert_eq!(f8.k * 2, f16.k);
        assert_eq!(f8.v * 2, f16.v);
        assert_eq!(f8.q, f16.q);
        assert_eq!(f8.descales, 2 * 8 * 8 * 4);
        // full FP8: Q halves too, output is bf16 (2 bytes), Q also has a descale
        let full = traffic(&s, Precision::Fp8, false);
        assert_eq!(full.q * 2, f16.q);
        assert_eq!(full.out, f16.out);
        assert_eq!(full.descales, 3 * 8 * 8 * 4);
    }

    #[test]
    fn rates() {
        assert_eq!(tflops(1e12, 1e6), Some(1.0));
        assert_eq!(gbps(3_000_000_000, 1e6), Some(3.0));
        assert_eq!(tflops(1.0, 0.0), None);
        assert_eq!(gbps(1, f64::NAN), None);
        // ANCHORS: fa D64 B32 H32 S512 non-causal, cuDNN 171.84 µs → 399.9 TFLOPS
        let s = shape(32, 512, 512, 32, 32, 64);
        let t = tflops(flops(&s, false), 171.84).unwrap();
        assert!((t - 399.9).abs() < 0.1, "{t}");
    }
}
