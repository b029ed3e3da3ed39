//! Element types and the precision paths (which type each of Q, K, V and O has).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Element type of one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// FP8 E4M3 "fn" (OCP): no infinities, max 448.
    E4m3,
    /// The seeds' simulated FP8: a uint8 linear code, value = (u − 128) / 127 · 448 · s.
    SimFp8,
    /// fp32 (log-sum-exp output, reference kernel output).
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::E4m3 | DType::SimFp8 => 1,
            DType::F32 => 4,
        }
    }

    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::E4m3 => "e4m3",
            DType::SimFp8 => "simfp8",
            DType::F32 => "f32",
        }
    }

    /// Name of the matching type in the kernel header (`prims.cuh`).
    pub fn cuda_type(self) -> &'static str {
        match self {
            DType::F16 => "half_t",
            DType::Bf16 => "bf16_t",
            DType::E4m3 => "e4m3_t",
            DType::SimFp8 => "u8code_t",
            DType::F32 => "float",
        }
    }

    /// Whether values carry a separate scale (descale) per (batch, kv-head) or per head.
    pub fn is_scaled(self) -> bool {
        matches!(self, DType::E4m3 | DType::SimFp8)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A precision path: the types of Q, K/V and O together. Only these combinations exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Q, K, V, O fp16.
    F16,
    /// Q, K, V, O bf16.
    Bf16,
    /// Q and O fp16, K and V E4M3 with fp32 descales.
    Fp8KvF16,
    /// Q and O bf16, K and V E4M3 with fp32 descales.
    Fp8KvBf16,
    /// Q, K, V E4M3 with descales, O bf16.
    Fp8,
    /// Q, K, V in the seeds' simulated-FP8 uint8 code with per-head scales, O fp16.
    SimFp8,
}

impl Precision {
    /// Every path.
    pub const ALL: [Precision; 6] = [
        Precision::F16,
        Precision::Bf16,
        Precision::Fp8KvF16,
        Precision::Fp8KvBf16,
        Precision::Fp8,
        Precision::SimFp8,
    ];

    /// Type of Q.
    pub fn q(self) -> DType {
        match self {
            Precision::F16 | Precision::Fp8KvF16 => DType::F16,
            Precision::Bf16 | Precision::Fp8KvBf16 => DType::Bf16,
            Precision::Fp8 => DType::E4m3,
            Precision::SimFp8 => DType::SimFp8,
        }
    }

    /// Type of K and V.
    pub fn kv(self) -> DType {
        match self {
            Precision::F16 => DType::F16,
            Precision::Bf16 => DType::Bf16,
            Precision::Fp8KvF16 | Precision::Fp8KvBf16 | Precision::Fp8 => DType::E4m3,
            Precision::SimFp8 => DType::SimFp8,
        }
    }

    /// K and V arrive as 8-bit codes (copied as 8-bit tiles and decoded in the kernel).
    pub fn kv_is_8bit(self) -> bool {
        self.kv().size() == 1
    }

    /// FP8-KV: 8-bit K/V with a 16-bit Q.
    pub fn is_fp8_kv(self) -> bool {
        self.kv_is_8bit() && self.q().size() == 2
    }

    /// Type of O.
    pub fn out(self) -> DType {
        match self {
            Precision::F16 | Precision::Fp8KvF16 | Precision::SimFp8 => DType::F16,
            Precision::Bf16 | Precision::Fp8KvBf16 | Precision::Fp8 => DType::Bf16,
        }
    }

    /// The 16-bit type the tensor cores compute in for this path.
    pub fn compute(self) -> DType {
        match self {
            Precision::Bf16 | Precision::Fp8KvBf16 | Precision::Fp8 => DType::Bf16,
            _ => DType::F16,
        }
    }

    /// The path with the given input types, if it exists.
    pub fn from_types(q: DType, kv: DType) -> Option<Precision> {
        Precision::ALL
            .into_iter()
            .find(|p| p.q() == q && p.kv() == kv)
    }

    /// Short name, e.g. `fp8kv_f16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
            Precision::Fp8KvF16 => "fp8kv_f16",
            Precision::Fp8KvBf16 => "fp8kv_bf16",
            Precision::Fp8 => "fp8",
            Precision::SimFp8 => "simfp8",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_through_their_types() {
        for p in Precision::ALL {
            assert_eq!(Precision::from_types(p.q(), p.kv()), Some(p));
        }
        assert_eq!(Precision::from_types(DType::E4m3, DType::F16), None);
    }
}
