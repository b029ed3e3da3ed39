//! E4M3 quantization on the GPU: fp16/bf16 `[batch, seq, heads, dim]` (any strides, last dim
//! contiguous) to contiguous BSHD E4M3 codes with one descale per (batch, head), where
//! descale = amax / 448 (1 for an all-zero head) and code = encode(x / descale). The CPU
//! quantizer in `fp8::e4m3` computes the same values bit for bit.

use super::device::Device;
use super::tensor::{check_streams, TensorDesc, TensorRef};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// What the quantizer's launch needs of a checked input: its dims as the kernels' `int`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub struct QuantizePlan {
    /// batch, seq, heads, dim, each < 2^31.
    pub dims: [i32; 4],
}

/// The quantizer's host checks, apart from the device: `x`'s elements lie in its buffer,
/// `codes` (bytes) and `descales` (floats) hold the outputs, every size fits the kernels'
/// integers and grid. All arithmetic is checked, so no input can wrap a size.
#[doc(hidden)]
pub fn plan(d: &TensorDesc, codes_len: usize, descales_len: usize) -> Result<QuantizePlan> {
    let bad = |m: String| Err(Error::InvalidInput(m));
    if !matches!(d.dtype, DType::F16 | DType::Bf16) {
        return bad(format!("quantize takes f16 or bf16 input, not {}", d.dtype));
    }
    let [b, s, h, dim] = d.shape;
    if d.shape.contains(&0) || d.strides[3] != 1 {
        return bad(format!(
            "quantize input must be non-empty with a contiguous last dim (shape {:?}, strides \
             {:?})",
            d.shape, d.strides
        ));
    }
    let too_big = || {
        Error::InvalidInput(format!(
            "quantize input of shape {:?} and strides {:?} exceeds the address space",
            d.shape, d.strides
        ))
    };
    // The last element's offset, then the bytes from the first to past the last.
    let mut last = 0usize;
    for i in 0..4 {
        last = (d.shape[i] - 1)
            .checked_mul(d.strides[i])
            .and_then(|x| x.checked_add(last))
            .ok_or_else(too_big)?;
    }
    let span = last
        .checked_add(1)
        .and_then(|n| n.checked_mul(2))
        .ok_or_else(too_big)?;
    if span > d.bytes || d.ptr.checked_add(span as u64).is_none() {
        return bad(format!(
            "quantize input spans {span} bytes but its buffer holds {}",
            d.bytes
        ));
    }
    let elems = [b, s, h, dim]
        .iter()
        .try_fold(1usize, |n, &x| n.checked_mul(x))
        .ok_or_else(too_big)?;
    let pairs = b.checked_mul(h).ok_or_else(too_big)?;
    if codes_len < elems || descales_len < pairs {
        return bad(format!(
            "quantize outputs too small: codes {codes_len} (need {elems}), descales \
             {descales_len} (need {pairs})"
        ));
    }
    if pairs > 65535 {
        return bad("quantize handles at most 65535 (batch, head) pairs per call".into());
    }
    // The launch passes every stride as an i64, a dim of extent 1's too.
    if d.strides.iter().any(|&st| i64::try_from(st).is_err()) {
        return Err(too_big());
    }
    let narrow = |x: usize| i32::try_from(x).map_err(|_| too_big());
    Ok(QuantizePlan {
        dims: [narrow(b)?, narrow(s)?, narrow(h)?, narrow(dim)?],
    })
}

/// Quantizes `x` into `codes` (BSHD, `batch*seq*heads*dim` bytes) and `descales` (`batch*heads`).
///
/// ```no_run
/// # fn main() -> fp8_sdpa::Result<()> {
/// use fp8_sdpa::runtime::{quantize::quantize_e4m3, Descale, Device, TensorRef, VecRef};
/// use fp8_sdpa::{DType, Layout};
/// let dev = Device::open(0)?;
/// let stream = dev.new_stream()?;
/// let shape = [2, 4096, 8, 128]; // K: [batch, seq, heads_kv, dim]
/// let k = stream.alloc_zeros::<u16>(shape.iter().product()).unwrap(); // bf16 bits
/// let mut codes = stream.alloc_zeros::<u8>(shape.iter().product()).unwrap();
/// let mut descales = stream.alloc_zeros::<f32>(2 * 8).unwrap();
/// let x = TensorRef::contiguous(&k, &stream, DType::Bf16, shape, Layout::Bshd)?;
/// quantize_e4m3(&dev, &stream, &x, &mut codes, &mut descales)?;
/// // The codes are an E4M3 K for an attention call, with one descale per (batch, kv head).
/// let k8 = TensorRef::contiguous(&codes, &stream, DType::E4m3, shape, Layout::Bshd)?;
/// let k_descale = Descale::new(VecRef::new(&descales, &stream), 8);
/// # let _ = (k8, k_descale);
/// # Ok(())
/// # }
/// ```
pub fn quantize_e4m3(
    dev: &Device,
    stream: &Arc<CudaStream>,
    x: &TensorRef<'_>,
    codes: &mut CudaSlice<u8>,
    descales: &mut CudaSlice<f32>,
) -> Result<()> {
    let d = x.desc();
    check_streams(stream, [x.on("quantize's input")])?;
    let [b, s, h, dim] = d.shape;
    let plan = plan(d, codes.len(), descales.len())?;
    // plan() took f16 or bf16 only.
    let in_t = if d.dtype == DType::Bf16 {
        "bf16_t"
    } else {
        "half_t"
    };
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
    let [bi, si, hi, di] = plan.dims;
    let (sb, ss, sh) = (
        // plan() proved each stride fits an i64.
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
