//! E4M3 quantization on the GPU: fp16/bf16 `[batch, seq, heads, dim]` (any strides, last dim
//! contiguous) to contiguous BSHD E4M3 codes with one descale per (batch, head), where
//! descale = amax / 448 (1 for an all-zero head) and code = encode(x / descale). The CPU
//! quantizer in `fp8::e4m3` computes the same values bit for bit.

use super::device::Device;
use super::tensor::TensorRef;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Quantizes `x` into `codes` (BSHD, `batch*seq*heads*dim` bytes) and `descales` (`batch*heads`).
pub fn quantize_e4m3(
    dev: &Device,
    stream: &Arc<CudaStream>,
    x: &TensorRef<'_>,
    codes: &mut CudaSlice<u8>,
    descales: &mut CudaSlice<f32>,
) -> Result<()> {
    let d = x.desc();
    let in_t = match d.dtype {
        DType::F16 => "half_t",
        DType::Bf16 => "bf16_t",
        other => {
            return Err(Error::InvalidInput(format!(
                "quantize takes f16 or bf16 input, not {other}"
            )))
        }
    };
    let [b, s, h, dim] = d.shape;
    if d.shape.contains(&0) || d.strides[3] != 1 {
        return Err(Error::InvalidInput(format!("quantize input must be non-empty with a contiguous last dim (shape {:?}, strides {:?})", d.shape, d.strides)));
    }
    let span = (0..4)
        .map(|i| (d.shape[i] - 1) * d.strides[i])
        .sum::<usize>()
        + 1;
    if span * 2 > d.bytes {
        return Err(Error::InvalidInput(format!(
            "quantize input spans {} bytes but its buffer holds {}",
            span * 2,
            d.bytes
        )));
    }
    if codes.len() < b * s * h * dim || descales.len() < b * h {
        return Err(Error::InvalidInput(format!(
            "quantize outputs too small: codes {} (need {}), descales {} (need {})",
            codes.len(),
            b * s * h * dim,
            descales.len(),
            b * h
        )));
    }
    if b * h > 65535 {
        return Err(Error::InvalidInput(
            "quantize handles at most 65535 (batch, head) pairs per call".into(),
        ));
    }
    let module = dev.module(&kernels::FP8, &[("QUANT_IN_T".into(), in_t.into())])?;
    let amax_fn = module
        .load_function("amax_bshd")
        .map_err(Error::driver("finding amax_bshd"))?;
    let quant_fn = module
        .load_function("quantize_e4m3_bshd")
        .map_err(Error::driver("finding quantize_e4m3_bshd"))?;
    let mut amax = stream
        .alloc_zeros::<u32>(b * h)
        .map_err(Error::driver("allocating amax"))?;
    let per_head = (s * dim) as u64;
    let blocks_x = per_head.div_ceil(256 * 8).clamp(1, 1024) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks_x, (b * h) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (bi, si, hi, di) = (b as i32, s as i32, h as i32, dim as i32);
    let (sb, ss, sh) = (
        d.strides[0] as i64,
        d.strides[1] as i64,
        d.strides[2] as i64,
    );
    let xp = d.ptr;
    let (amax_ptr, _g1) = amax.device_ptr_mut(stream);
    let mut l = stream.launch_builder(&amax_fn);
    l.arg(&xp)
        .arg(&amax_ptr)
        .arg(&bi)
        .arg(&si)
        .arg(&hi)
        .arg(&di)
        .arg(&sb)
        .arg(&ss)
        .arg(&sh);
    // SAFETY: argument list matches amax_bshd's signature; x covers the validated span and
    // amax holds batch*heads words.
    unsafe { l.launch(cfg) }.map_err(Error::driver("launching amax_bshd"))?;
    let (codes_ptr, _g2) = codes.device_ptr_mut(stream);
    let (ds_ptr, _g3) = descales.device_ptr_mut(stream);
    let mut l = stream.launch_builder(&quant_fn);
    l.arg(&xp)
        .arg(&amax_ptr)
        .arg(&codes_ptr)
        .arg(&ds_ptr)
        .arg(&bi)
        .arg(&si)
        .arg(&hi)
        .arg(&di)
        .arg(&sb)
        .arg(&ss)
        .arg(&sh);
    // SAFETY: matches quantize_e4m3_bshd's signature; outputs were checked large enough.
    unsafe { l.launch(cfg) }.map_err(Error::driver("launching quantize_e4m3_bshd"))?;
    Ok(())
}
