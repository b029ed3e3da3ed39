//! `quantize_e4m3` on CUDA: fp8-sdpa's quantize kernels (amax, then encode) on candle's
//! stream, as a `CustomOp1` returning the codes; the descales, a second output, come back
//! through a second op that hands over the storage the first one kept.

use super::{lib_err, sdpa_device, shape4, strides4};
use crate::check::err;
use candle_core::cuda::cudarc::driver::{result, CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr};
use candle_core::cuda::{CudaDevice, CudaStorage, CudaStorageSlice as S};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use fp8_sdpa::runtime::TensorRef;
use fp8_sdpa::DType as SdpaDType;
use std::sync::Mutex;

const OP: &str = "quantize_e4m3";

/// Codes `F8E4M3` shaped like `x` and descales `F32` `[batch, heads]`.
pub(crate) fn quantize_e4m3(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let (b, _, h, _) = x.dims4()?;
    let quant = Quantize {
        descales: Mutex::new(None),
    };
    let codes = x.apply_op1_no_bwd(&quant)?;
    let stored = quant
        .descales
        .into_inner()
        .map_err(|_| err(OP, "descale hand-over poisoned"))?
        .ok_or_else(|| err(OP, "the quantize op produced no descales"))?;
    let descales = x.apply_op1_no_bwd(&HandOver {
        storage: Mutex::new(Some(stored)),
        shape: Shape::from((b, h)),
    })?;
    Ok((codes, descales))
}

struct Quantize {
    descales: Mutex<Option<CudaStorage>>,
}

impl Quantize {
    fn run<T: DeviceRepr>(
        &self,
        dev: &CudaDevice,
        x: &CudaSlice<T>,
        xl: &Layout,
        x_type: SdpaDType,
    ) -> Result<CudaStorage> {
        let lib = |e| lib_err(OP, e);
        let stream = dev.cuda_stream();
        let sdpa = sdpa_device(OP, &stream)?;
        let [b, s, h, d] = shape4(xl)?;
        let n = b * s * h * d;
        // fp8-sdpa's quantizer writes u8 codes; candle's F8E4M3 storage is a distinct slice
        // type, so the codes are copied once into it (a follow-up could write them in place).
        let mut bytes = dev.alloc_zeros::<u8>(n)?;
        let mut descales = dev.alloc_zeros::<f32>(b * h)?;
        {
            let xv = x.slice(xl.start_offset()..);
            let xr =
                TensorRef::new(&xv, &stream, x_type, [b, s, h, d], strides4(xl)?).map_err(lib)?;
            fp8_sdpa::runtime::quantize::quantize_e4m3(
                &sdpa,
                &stream,
                &xr,
                &mut bytes,
                &mut descales,
            )
            .map_err(lib)?;
        }
        let mut codes = dev.alloc_zeros::<float8::F8E4M3>(n)?;
        {
            let (src, _src_guard) = bytes.device_ptr(&stream);
            let (dst, _dst_guard) = codes.device_ptr_mut(&stream);
            // SAFETY: both are live allocations of n one-byte elements on this stream's
            // context; the copy is queued on the stream after the quantize kernels, and the
            // guards record it, so the buffers are freed only after it ran.
            unsafe { result::memcpy_dtod_async(dst, src, n, stream.cu_stream()) }
                .map_err(|e| err(OP, format!("copying the codes: {e}")))?;
        }
        *self
            .descales
            .lock()
            .map_err(|_| err(OP, "descale hand-over poisoned"))? =
            Some(CudaStorage::wrap_cuda_slice(descales, dev.clone()));
        Ok(CudaStorage::wrap_cuda_slice(codes, dev.clone()))
    }
}

impl CustomOp1 for Quantize {
    fn name(&self) -> &'static str {
        "fp8-sdpa-quantize-e4m3"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        // CPU tensors take fp8-sdpa's host codec before any op is built.
        Err(err(OP, "this op runs on CUDA tensors only"))
    }

    fn cuda_fwd(&self, xs: &CudaStorage, xl: &Layout) -> Result<(CudaStorage, Shape)> {
        let codes = match &xs.slice {
            S::F16(x) => self.run(&xs.device, x, xl, SdpaDType::F16)?,
            S::BF16(x) => self.run(&xs.device, x, xl, SdpaDType::Bf16)?,
            _ => return Err(err(OP, "x must be F16 or BF16")),
        };
        Ok((codes, xl.shape().clone()))
    }
}

/// Returns storage made by an earlier op as a new tensor (its input is only the carrier
/// that selects the backend).
struct HandOver {
    storage: Mutex<Option<CudaStorage>>,
    shape: Shape,
}

impl CustomOp1 for HandOver {
    fn name(&self) -> &'static str {
        "fp8-sdpa-hand-over"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        Err(err(OP, "this op runs on CUDA tensors only"))
    }

    fn cuda_fwd(&self, _: &CudaStorage, _: &Layout) -> Result<(CudaStorage, Shape)> {
        let storage = self
            .storage
            .lock()
            .map_err(|_| err(OP, "descale hand-over poisoned"))?
            .take()
            .ok_or_else(|| err(OP, "the descales were already handed over"))?;
        Ok((storage, self.shape.clone()))
    }
}
