//! The embedded CUDA sources: headers of device primitives grouped by hardware unit, shared
//! by every kernel, and one source per family. Sources include no CUDA toolkit header, so
//! NVRTC alone compiles them.

use crate::dtype::Precision;
use crate::variant::Family;

/// One kernel source file.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File name, used in NVRTC diagnostics.
    pub name: &'static str,
    /// The CUDA C++ text.
    pub text: &'static str,
    /// The `extern "C"` entry function.
    pub entry: &'static str,
}

/// Headers every source may include, as (include name, text): element types and conversions,
/// softmax pieces, the `mma.sync` family's primitives, barriers, TMA, `wgmma` (with its
/// generated per-N wrappers), the Hopper kernels' shared parts, `prims.cuh` (all of them, for the portable family) and the
/// parameter block.
/// The families' steps are headers of their own (`portable_*.cuh`, `decode_*.cuh`,
/// `hopper_*.cuh`).
pub const HEADERS: &[(&str, &str)] = &[
    ("types.cuh", include_str!("types.cuh")),
    ("softmax.cuh", include_str!("softmax.cuh")),
    ("exact.cuh", include_str!("exact.cuh")),
    ("mma_sm80.cuh", include_str!("mma_sm80.cuh")),
    ("sync.cuh", include_str!("sync.cuh")),
    ("tma.cuh", include_str!("tma.cuh")),
    ("wgmma.cuh", include_str!("wgmma.cuh")),
    ("wgmma_ops.cuh", include_str!("wgmma_ops.cuh")),
    ("hopper_parts.cuh", include_str!("hopper_parts.cuh")),
    ("hopper_knobs.cuh", include_str!("hopper_knobs.cuh")),
    ("hopper_ring.cuh", include_str!("hopper_ring.cuh")),
    ("hopper_consumer.cuh", include_str!("hopper_consumer.cuh")),
    ("hopper_entry.cuh", include_str!("hopper_entry.cuh")),
    ("prims.cuh", include_str!("prims.cuh")),
    ("abi.cuh", include_str!("abi.cuh")),
    ("decode_mma.cuh", include_str!("decode_mma.cuh")),
    ("decode_steps.cuh", include_str!("decode_steps.cuh")),
    ("portable_modes.cuh", include_str!("portable_modes.cuh")),
    ("portable_work.cuh", include_str!("portable_work.cuh")),
    ("portable_load.cuh", include_str!("portable_load.cuh")),
    ("portable_decode8.cuh", include_str!("portable_decode8.cuh")),
    ("portable_tile.cuh", include_str!("portable_tile.cuh")),
    ("portable_stream.cuh", include_str!("portable_stream.cuh")),
];

const REFERENCE: KernelSource = KernelSource {
    name: "reference.cu",
    text: include_str!("reference.cu"),
    entry: "sdpa_reference",
};

/// FP8 codec entry points and the E4M3 quantizer (`fp8.cu`).
pub const FP8: KernelSource = KernelSource {
    name: "fp8.cu",
    text: include_str!("fp8.cu"),
    entry: "quantize_e4m3_bshd",
};

/// Writing new tokens into a paged KV cache (`cache.cu`): entry `write_paged_kv`.
pub const CACHE: KernelSource = KernelSource {
    name: "cache.cu",
    text: include_str!("cache.cu"),
    entry: "write_paged_kv",
};

/// Context parallelism's log-sum-exp merge (`cp.cu`): entries `cp_merge` and `cp_finish`,
/// built with `CP_OUT_T` (`half_t` or `bf16_t`).
pub const CP: KernelSource = KernelSource {
    name: "cp.cu",
    text: include_str!("cp.cu"),
    entry: "cp_merge",
};

const PORTABLE: KernelSource = KernelSource {
    name: "portable.cu",
    text: include_str!("portable.cu"),
    entry: "sdpa_portable",
};

const HOPPER: KernelSource = KernelSource {
    name: "hopper.cu",
    text: include_str!("hopper.cu"),
    entry: "sdpa_hopper",
};

/// The Hopper family for E4M3 Q, K and V (8-bit wgmma, V transposed by the producer).
const HOPPER_FP8: KernelSource = KernelSource {
    name: "hopper_fp8.cu",
    text: include_str!("hopper_fp8.cu"),
    entry: "sdpa_hopper",
};

const DECODE: KernelSource = KernelSource {
    name: "decode.cu",
    text: include_str!("decode.cu"),
    entry: "sdpa_decode",
};

/// The decode family's second entry point in the same module: the log-sum-exp merge of the
/// splits' partial outputs.
pub const DECODE_MERGE_ENTRY: &str = "sdpa_decode_merge";

/// The source for a family and precision path (the Hopper family has one file per operand
/// width), or `None` while that family has no kernel yet.
pub fn source(family: Family, precision: Precision) -> Option<KernelSource> {
    match family {
        Family::Reference => Some(REFERENCE),
        Family::Portable => Some(PORTABLE),
        Family::Hopper if precision == Precision::Fp8 => Some(HOPPER_FP8),
        Family::Hopper => Some(HOPPER),
        Family::Decode => Some(DECODE),
    }
}

/// The source for a family and precision path, or a typed error naming the missing family.
pub fn source_or_err(family: Family, precision: Precision) -> crate::Result<KernelSource> {
    source(family, precision).ok_or_else(|| {
        crate::Error::Unsupported(format!(
            "the {} family has no kernel source yet",
            family.name()
        ))
    })
}

pub mod geometry;
pub mod registry;
