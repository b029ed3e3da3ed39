//! Running kernels on a GPU: the device and its loaded kernels, borrowed device tensors,
//! validation, and the attention call (dense, paged, variable-length).

pub mod abi;
pub mod attention;
pub(crate) mod decode;
pub mod device;
pub(crate) mod launch;
pub mod paged;
pub mod quantize;
pub mod tensor;
pub mod tma;
pub mod validate;
pub mod varlen;
pub mod varlen_decode;

pub use attention::{Attention, CallOptions, Descale, KernelChoice, Launched};
pub use device::{Device, DeviceInfo, LoadedKernel};
pub use paged::{PagedAttention, PagedAttentionVarlen, PagedKv};
pub use tensor::{IdxRef, TensorDesc, TensorMut, TensorRef, VecMut, VecRef};
pub use varlen::AttentionVarlen;
