//! E4M3 encode and decode with given descales on CUDA. candle 0.11.1's CUDA `to_dtype` to
//! and from `F8E4M3` looks up `cast_f32_f8e4m3`, but candle-kernels defines
//! `cast_f32_f8_e4m3` ("named symbol not found" on the GPU), so these two ops run kernels of
//! our own (`codec.cu`), compiled with NVRTC through fp8-sdpa and cached like its kernels.

use super::{lib_err, sdpa_device, shape4, strides4, Held};
use crate::check::err;
use candle_core::cuda::cudarc::driver::{
    CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda::{CudaDevice, CudaStorage, CudaStorageSlice as S};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

/// `F8E4M3` codes of `x` (`F16`, `BF16` or `F32`, any strides) under `descale` (`F32`,
/// contiguous, batch stride `ds_stride_b`), contiguous.
pub(crate) fn quantize_with(x: &Tensor, descale: &Tensor, ds_stride_b: usize) -> Result<Tensor> {
    x.apply_op1_no_bwd(&Codec {
        encode: true,
        descale: descale.clone(),
        ds_stride_b,
    })
}

/// `codes` (`F8E4M3`, any strides) decoded to contiguous `F32` under `descale`.
pub(crate) fn dequantize(codes: &Tensor, descale: &Tensor, ds_stride_b: usize) -> Result<Tensor> {
    codes.apply_op1_no_bwd(&Codec {
        encode: false,
        descale: descale.clone(),
        ds_stride_b,
    })
}

struct Codec {
    encode: bool,
    descale: Tensor,
    ds_stride_b: usize,
}

impl Codec {
    fn op(&self) -> &'static str {
        if self.encode {
            "quantize_e4m3_with"
        } else {
            "dequantize_e4m3"
        }
    }

    /// Launches `self.op()` over `input` (type `in_t` in the kernel's terms) into `out`.
    fn launch<T: DeviceRepr, U: DeviceRepr>(
        &self,
        stream: &std::sync::Arc<CudaStream>,
        (input, l): (&CudaSlice<T>, &Layout),
        in_t: &str,
        out: &mut CudaSlice<U>,
    ) -> Result<()> {
        let op = self.op();
        let sdpa = sdpa_device(op, stream)?;
        let held = Held::new("descale", &self.descale);
        let S::F32(ds) = held.slice(op)? else {
            return Err(err(op, "descale must be F32"));
        };
        let module = sdpa
            .module(&crate::kernel::CODEC, &[("IN_T".into(), in_t.into())])
            .map_err(|e| lib_err(op, e))?;
        let func = module
            .load_function(op)
            .map_err(|e| err(op, format!("loading the kernel: {e}")))?;
        let [b, s, h, d] = shape4(l)?;
        let [sb, ss, sh, sd] = strides4(l)?.map(|x| x as i64);
        let n = (b * s * h * d) as u64;
        let (dims, dss) = (
            [b as i32, s as i32, h as i32, d as i32],
            self.ds_stride_b as i32,
        );
        let view = input.slice(l.start_offset()..);
        let ds = ds.slice(held.range());
        let (in_p, _g1) = view.device_ptr(stream);
        let (ds_p, _g2) = ds.device_ptr(stream);
        let (out_p, _g3) = out.device_ptr_mut(stream);
        let mut launch = stream.launch_builder(&func);
        launch.arg(&in_p).arg(&ds_p).arg(&out_p);
        for x in &dims {
            launch.arg(x);
        }
        launch.arg(&sb).arg(&ss).arg(&sh).arg(&sd).arg(&dss);
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(256).clamp(1, 1 << 16) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's signature in codec.cu; the input view and
        // the descales cover every index the layout and the batch stride reach (checked by
        // the caller's shape checks), `out` holds b*s*h*d elements, and the guards keep all
        // three alive and ordered on the stream until the launch is queued.
        unsafe { launch.launch(cfg) }.map_err(|e| err(op, format!("launching: {e}")))?;
        Ok(())
    }

    fn encode<T: DeviceRepr>(
        &self,
        dev: &CudaDevice,
        x: (&CudaSlice<T>, &Layout),
        in_t: &str,
    ) -> Result<CudaStorage> {
        let mut codes = dev.alloc_zeros::<float8::F8E4M3>(x.1.shape().elem_count())?;
        self.launch(&dev.cuda_stream(), x, in_t, &mut codes)?;
        Ok(CudaStorage::wrap_cuda_slice(codes, dev.clone()))
    }
}

impl CustomOp1 for Codec {
    fn name(&self) -> &'static str {
        "fp8-sdpa-e4m3-codec"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        // CPU tensors use candle's own casts, which are right there.
        Err(err(self.op(), "this op runs on CUDA tensors only"))
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        let dev = &s.device;
        let out = match (&s.slice, self.encode) {
            (S::F16(x), true) => self.encode(dev, (x, l), "half_t")?,
            (S::BF16(x), true) => self.encode(dev, (x, l), "bf16_t")?,
            (S::F32(x), true) => self.encode(dev, (x, l), "float")?,
            (S::F8E4M3(c), false) => {
                let mut out = dev.alloc_zeros::<f32>(l.shape().elem_count())?;
                self.launch(&dev.cuda_stream(), (c, l), "float", &mut out)?;
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }
            _ => return Err(err(self.op(), "unsupported dtype")),
        };
        Ok((out, l.shape().clone()))
    }
}
