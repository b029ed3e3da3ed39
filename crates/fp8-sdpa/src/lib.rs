//! fp8-sdpa: fused scaled-dot-product attention (forward) for NVIDIA GPUs.
//!
//! Kernels are CUDA C++ compiled at run time with NVRTC (no nvcc, no toolkit headers), so
//! `libnvrtc` and `libcuda` are all a user needs. The crate is laid out by responsibility:
//!
//! - [`variant`], [`arch`], [`dtype`]: what a kernel is (typed knobs, targets, precisions);
//! - [`libs`]: finding NVRTC and the driver at run time;
//! - [`compile`]: NVRTC to CUBIN, the ptxas resource report, the disk cache;
//! - [`kernels`]: the embedded CUDA sources and the registry of shipped variants;
//! - [`fp8`]: the E4M3 and simulated-FP8 codecs;
//! - [`reference`](mod@reference): the float64 CPU reference;
//! - [`runtime`]: device, module loading, the attention call.
//!
//! The lab (test cases, inputs, metrics, resource gates, codec checks) lives in the
//! `sdpa-harness` crate, which depends on this one.

pub mod arch;
pub mod compile;
pub mod cp;
pub mod dispatch;
pub mod dtype;
pub mod error;
pub mod fp8;
#[doc(hidden)]
pub mod fuzzing;
pub mod kernels;
pub mod libs;
pub mod problem;
pub mod reference;
pub mod runtime;
pub mod tuned;
pub mod variant;

pub use arch::Arch;
pub use dtype::{DType, Precision};
pub use error::{Error, Result};
pub use problem::{AttnParams, AttnShape, Layout, VarlenShape};
pub use variant::{Family, KernelSpec, SyncPolicy, Variant};
