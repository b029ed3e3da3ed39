//! fp8-sdpa: fused scaled-dot-product attention (forward) for NVIDIA GPUs: fp16 and bf16,
//! FP8 (E4M3) K/V with 16-bit queries, and full FP8.
//!
//! Kernels are CUDA C++ compiled at run time with NVRTC (no nvcc, no toolkit headers) and
//! cached on disk, so `libnvrtc` and `libcuda` are all a user needs.
//!
//! What a user calls:
//!
//! - [`runtime`]: open a [`runtime::Device`], borrow device buffers as
//!   [`runtime::TensorRef`] / [`runtime::TensorMut`], and run one of the four attention
//!   calls (dense, variable-length, paged, paged variable-length) on a stream;
//! - [`dispatch`]: which kernel a call runs when the caller does not choose, and why;
//!   [`tuned`]: the tuned tables it consults first;
//! - [`DType`], [`Precision`], [`Arch`]: element types, precision pairs, GPU targets;
//! - [`problem`]: shapes ([`AttnShape`], [`VarlenShape`]), layouts and [`AttnParams`];
//! - [`error`]: [`Error`], every failure typed, with the fix in its message;
//! - [`fp8`]: the E4M3 and simulated-FP8 codecs on the CPU (the GPU quantizer is
//!   [`runtime::quantize`]);
//! - [`reference`](mod@reference): the float64 CPU reference, to check results;
//! - [`cp`]: context parallelism (ring attention over NCCL, feature `nccl`);
//! - [`Variant`], [`KernelSpec`], [`Family`]: what a kernel is, to name one
//!   ([`runtime::KernelChoice::Variant`]) or read what ran ([`runtime::Launched`]).
//!
//! ```no_run
//! # fn main() -> fp8_sdpa::Result<()> {
//! use fp8_sdpa::runtime::{Attention, CallOptions, Device, TensorMut, TensorRef};
//! use fp8_sdpa::{AttnParams, DType, Layout};
//! let dev = Device::open(0)?;
//! let stream = dev.new_stream()?;
//! let shape = [1, 4096, 16, 128]; // [batch, seq, heads, dim]
//! let n: usize = shape.iter().product();
//! let (q, k, v) = (
//!     stream.alloc_zeros::<u16>(n).unwrap(), // bf16 bits
//!     stream.alloc_zeros::<u16>(n).unwrap(),
//!     stream.alloc_zeros::<u16>(n).unwrap(),
//! );
//! let mut o = stream.alloc_zeros::<u16>(n).unwrap();
//! let call = Attention::new(
//!     TensorRef::contiguous(&q, &stream, DType::Bf16, shape, Layout::Bshd)?,
//!     TensorRef::contiguous(&k, &stream, DType::Bf16, shape, Layout::Bshd)?,
//!     TensorRef::contiguous(&v, &stream, DType::Bf16, shape, Layout::Bshd)?,
//!     TensorMut::contiguous(&mut o, &stream, DType::Bf16, shape, Layout::Bshd)?,
//!     AttnParams::default_for(128, true),
//! );
//! dev.attention(&stream, &call, CallOptions::default())?;
//! stream.synchronize().unwrap();
//! # Ok(())
//! # }
//! ```
//!
//! The lab (test cases, inputs, metrics, resource gates, codec checks) lives in the
//! `sdpa-harness` crate and the `sdpa-lab` CLI. The modules they reach into here (the
//! compiler, the kernel registry, the library loader, validation internals, the fuzz
//! properties) are public for them but hidden from these docs: they are not a stable API.

#[doc(hidden)]
pub mod arch;
#[doc(hidden)]
pub mod compile;
pub mod cp;
pub mod dispatch;
pub mod dtype;
pub mod error;
pub mod fp8;
#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod kernels;
#[doc(hidden)]
pub mod libs;
pub mod problem;
pub mod reference;
pub mod runtime;
pub mod tuned;
#[doc(hidden)]
pub mod variant;

pub use arch::Arch;
pub use dtype::{DType, Precision};
pub use error::{Error, Result};
pub use problem::{AttnParams, AttnShape, Layout, VarlenShape};
pub use variant::{Family, KernelSpec, SyncPolicy, Variant};
