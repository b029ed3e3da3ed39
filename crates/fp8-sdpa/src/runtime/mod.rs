//! Running kernels on a GPU: the device, borrowed device tensors, and the four attention
//! calls, each a struct of its tensors with a [`Device`] method that validates it, picks the
//! kernel and launches it on the caller's stream:
//!
//! | call | queries | keys and values | method |
//! |------|---------|-----------------|--------|
//! | [`Attention`] | `[batch, seq_q, heads_q, dim]` | `[batch, seq_kv, heads_kv, dim]` | [`Device::attention`] |
//! | [`AttentionVarlen`] | packed `[total_q, heads_q, dim]` | packed `[total_k, heads_kv, dim]` | [`Device::attention_varlen`] |
//! | [`PagedAttention`] | `[batch, seq_q, heads_q, dim]` | a paged cache ([`PagedKv`]) | [`Device::paged_attention`] |
//! | [`PagedAttentionVarlen`] | packed `[total_q, heads_q, dim]` | a paged cache | [`Device::paged_attention_varlen`] |
//!
//! Every call embeds a [`CallCommon`] (Q, O, the optional LSE, the FP8 descales, scale and
//! mask); each has a `new` constructor and `with_lse` / `with_descales` (paged:
//! `with_kv_descales`) builders. [`CallOptions`] picks the kernel ([`KernelChoice`]) and
//! whether the descales and index arrays are read back and checked. Every tensor of a call is
//! borrowed on the stream the call runs on ([`tensor`]'s "Streams").
//!
//! The calls, [`CallCommon`], [`PagedKv`], [`Descale`], [`CallOptions`] and
//! [`crate::AttnParams`] are `#[non_exhaustive]`: built with their constructors and `with_*`
//! setters rather than struct literals, so that an option or argument can be added without
//! breaking callers. Their fields stay public to read and to assign.
//!
//! [`quantize::quantize_e4m3`] turns fp16/bf16 tensors into E4M3 codes and descales on the
//! GPU; [`Device::write_paged_kv`] writes new tokens into a paged cache ([`PagedKvWrite`]).

pub(crate) mod abi;
pub mod attention;
pub mod cache_write;
mod call;
pub(crate) mod decode;
pub mod device;
pub(crate) mod launch;
pub mod paged;
pub mod quantize;
pub mod tensor;
#[doc(hidden)]
pub mod tma;
#[doc(hidden)]
pub mod validate;
pub mod varlen;
pub(crate) mod varlen_decode;

pub use attention::Attention;
pub use cache_write::PagedKvWrite;
pub use call::{CallCommon, CallOptions, Descale, KernelChoice, Launched};
pub use device::{Device, DeviceInfo, LoadedKernel};
pub use paged::{PagedAttention, PagedAttentionVarlen, PagedKv};
pub use tensor::{IdxRef, TensorDesc, TensorMut, TensorRef, VecMut, VecRef};
pub use varlen::AttentionVarlen;
