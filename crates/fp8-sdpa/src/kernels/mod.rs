//! The embedded CUDA sources: two headers shared by every kernel and one source per family.
//! Sources include no CUDA toolkit header, so NVRTC alone compiles them.

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

/// Headers every source may include, as (include name, text).
pub const HEADERS: [(&str, &str); 2] = [
    ("prims.cuh", include_str!("prims.cuh")),
    ("abi.cuh", include_str!("abi.cuh")),
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

const PORTABLE: KernelSource = KernelSource {
    name: "portable.cu",
    text: include_str!("portable.cu"),
    entry: "sdpa_portable",
};

/// The source for a family, or `None` while that family has no kernel yet.
pub fn source(family: Family) -> Option<KernelSource> {
    match family {
        Family::Reference => Some(REFERENCE),
        Family::Portable => Some(PORTABLE),
        Family::Hopper | Family::Decode => None,
    }
}

/// The source for a family, or a typed error naming the missing family.
pub fn source_or_err(family: Family) -> crate::Result<KernelSource> {
    source(family).ok_or_else(|| {
        crate::Error::Unsupported(format!(
            "the {} family has no kernel source yet",
            family.name()
        ))
    })
}

pub mod geometry;
pub mod registry;
