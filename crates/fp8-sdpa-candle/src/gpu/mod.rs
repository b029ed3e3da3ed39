//! The CUDA paths (feature `cuda`): candle `CustomOp`s whose `cuda_fwd` hands candle's device
//! memory and stream to fp8-sdpa.
//!
//! candle-core 0.11.1 and fp8-sdpa depend on the same cudarc (0.19.10), which Cargo builds
//! once, and candle re-exports it; so candle's `CudaSlice` and `CudaStream` are the types
//! fp8-sdpa's `TensorRef` and `Device::attention` take, and the borrows carry cudarc's
//! stream-ordering events as within candle. Were the versions ever to split, this module
//! would stop compiling (the types would differ) rather than misbehave; the raw-pointer
//! bridge for that case is described in docs/design-candle.md, section 4.
//!
//! Kernels launch on the stream of the candle device that owns the tensors, with no
//! synchronization. fp8-sdpa's `Device` is opened once per GPU ordinal; it retains the same
//! primary context as candle (`CudaContext::new`), so modules it loads run on candle's stream.

pub(crate) mod attn;
pub(crate) mod codec;
pub(crate) mod paged;
pub(crate) mod quantize;
pub(crate) mod varlen;

use candle_core::cuda::cudarc::driver::CudaStream;
use candle_core::cuda::{CudaStorage, CudaStorageSlice};
use candle_core::{Error, Layout, Result, Storage, Tensor};
use fp8_sdpa::runtime::Device as SdpaDevice;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// fp8-sdpa's device for the GPU behind `stream`, opened on first use.
pub(crate) fn sdpa_device(op: &str, stream: &CudaStream) -> Result<Arc<SdpaDevice>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<SdpaDevice>>>> = OnceLock::new();
    let ordinal = stream.context().ordinal();
    let mut map = DEVICES.get_or_init(Default::default).lock().map_err(|_| {
        crate::check::err(
            op,
            "fp8-sdpa's device registry is poisoned by an earlier panic",
        )
    })?;
    if let Some(d) = map.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(SdpaDevice::open(ordinal).map_err(|e| lib_err(op, e))?);
    map.insert(ordinal, d.clone());
    Ok(d)
}

/// An fp8-sdpa error as candle's CUDA error, its message (what and how to fix) kept.
pub(crate) fn lib_err(op: &str, e: fp8_sdpa::Error) -> Error {
    Error::Cuda(format!("{op}: {e}").into()).bt()
}

/// The logical shape of a 4-d layout.
pub(crate) fn shape4(l: &Layout) -> Result<[usize; 4]> {
    let (b, s, h, d) = l.shape().dims4()?;
    Ok([b, s, h, d])
}

/// The element strides of a 4-d layout.
pub(crate) fn strides4(l: &Layout) -> Result<[usize; 4]> {
    match *l.stride() {
        [b, s, h, d] => Ok([b, s, h, d]),
        _ => Err(Error::Msg(format!("expected a 4-d layout, got {:?}", l.shape())).bt()),
    }
}

/// A tensor held as an op field (descales, pages, tables): its storage read-locked while
/// the guard lives.
pub(crate) struct Held<'a> {
    name: &'static str,
    guard: candle_core::StorageRef<'a>,
    layout: &'a Layout,
}

impl<'a> Held<'a> {
    pub(crate) fn new(name: &'static str, t: &'a Tensor) -> Held<'a> {
        let (guard, layout) = t.storage_and_layout();
        Held {
            name,
            guard,
            layout,
        }
    }

    /// The CUDA storage, or an error naming the tensor.
    pub(crate) fn slice(&self, op: &str) -> Result<&CudaStorageSlice> {
        match &*self.guard {
            Storage::Cuda(CudaStorage { slice, .. }) => Ok(slice),
            _ => Err(crate::check::err(
                op,
                format!("{} is not on a CUDA device", self.name),
            )),
        }
    }

    /// The tensor's layout.
    pub(crate) fn layout(&self) -> &Layout {
        self.layout
    }

    /// The element range `[start, start + count)` of this tensor's contiguous layout.
    pub(crate) fn range(&self) -> std::ops::Range<usize> {
        let start = self.layout.start_offset();
        start..start + self.layout.shape().elem_count()
    }
}
