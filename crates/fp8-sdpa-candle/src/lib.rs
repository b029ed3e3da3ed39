//! fp8-sdpa for [candle](https://github.com/huggingface/candle): fused attention on candle
//! tensors, with the signatures of `candle-flash-attn`.
//!
//! - [`flash_attn`]: fp16/bf16 Q, K, V `[batch, seq, heads, head_dim]`, GQA, bottom-right
//!   causal mask;
//! - [`flash_attn_fp8kv`]: the same with E4M3 K/V (candle `F8E4M3`) and fp32 descales;
//! - [`flash_attn_varlen`]: fp16/bf16 sequences of different lengths packed into
//!   `[total_tokens, heads, head_dim]` with `U32` cumulative offsets, causal per sequence;
//! - [`Fp8KvCache`]: a paged E4M3 KV cache that quantizes fp16/bf16 K/V as they are appended
//!   and serves decode steps from the pages;
//! - [`Fp8PagedCache`]: the same for continuous batching: sequences added and removed at any
//!   step, each with its own length and descales, pages from one shared pool;
//! - [`flash_attn_paged`]: attention over a paged E4M3 cache the caller owns (pools, block
//!   table, lengths, descales), as an engine with its own page allocator keeps it;
//! - [`quantize_e4m3`], [`quantize_e4m3_with`], [`dequantize_e4m3`]: the E4M3 codec on
//!   tensors; [`reference::attention`] and [`reference::attention_varlen`]: attention in f32
//!   with candle ops.
//!
//! **CUDA** (feature `cuda`): tensors stay on the GPU. Each call is a candle `CustomOp`
//! whose `cuda_fwd` hands candle's device memory to fp8-sdpa's NVRTC-compiled kernels and
//! launches them on the candle device's own stream, so it is ordered with candle's other
//! work without a synchronization or a copy (except [`flash_attn_varlen`], which reads its
//! `2 * (batch + 1)` offsets back to check them: one synchronization per call). candle-core 0.11.1 and fp8-sdpa share one
//! cudarc (0.19.10), so candle's `CudaSlice`/`CudaStream` are the types fp8-sdpa takes; if
//! their versions ever differ this crate stops compiling rather than guessing (the bridge
//! through raw device pointers for that case is in `docs/design-candle.md`, section 4).
//! Kernels are compiled on first use per shape class and cached on disk
//! (`$SDPA_CACHE_DIR`), as for every fp8-sdpa call.
//!
//! **CPU**: the same functions accept CPU tensors and compute in f32 with candle ops (the
//! reference the GPU is tested against), with the same input checks, so code written and
//! tested on the CPU fails the same way on the GPU.
//!
//! Errors are candle [`candle_core::Error`]s naming the function, the tensor, what is wrong
//! and how to fix it; no input makes these functions panic.
//!
//! ```
//! use candle_core::{DType, Device, Tensor};
//! # fn main() -> candle_core::Result<()> {
//! let dev = Device::Cpu; // or Device::new_cuda(0)? with the `cuda` feature
//! let (b, s, hq, hkv, d) = (1, 16, 8, 2, 64);
//! let q = Tensor::randn(0f32, 1., (b, s, hq, d), &dev)?.to_dtype(DType::BF16)?;
//! let k = Tensor::randn(0f32, 1., (b, s, hkv, d), &dev)?.to_dtype(DType::BF16)?;
//! let v = Tensor::randn(0f32, 1., (b, s, hkv, d), &dev)?.to_dtype(DType::BF16)?;
//! let o = fp8_sdpa_candle::flash_attn(&q, &k, &v, 1.0 / (d as f32).sqrt(), true)?;
//! assert_eq!(o.dims(), q.dims());
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod attn;
mod cache;
mod check;
#[cfg(feature = "cuda")]
mod gpu;
mod kernel;
mod paged;
mod quant;
pub mod reference;

pub use attn::{flash_attn, flash_attn_fp8kv, flash_attn_varlen};
pub use cache::{Fp8KvCache, Fp8KvCacheConfig, Fp8PagedCache, Fp8PagedCacheConfig, SeqId};
pub use paged::flash_attn_paged;
pub use quant::{dequantize_e4m3, quantize_e4m3, quantize_e4m3_with};
