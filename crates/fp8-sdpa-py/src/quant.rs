//! The E4M3 quantizer over memory owned by the caller: the library's kernels (`fp8.cu`'s
//! `amax_bshd`, then `quantize_e4m3_bshd`) and its host checks ([`plan`]), launched with
//! device addresses instead of cudarc slices (the library's entry takes its outputs as
//! slices).

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use fp8_sdpa::runtime::quantize::{plan, QuantizePlan};
use fp8_sdpa::runtime::{Device, TensorDesc};
use fp8_sdpa::{DType, Error, Result};

/// The quantizer's buffers: the input, the outputs and a zeroed scratch of one u32 per
/// (batch, head), each an address and a length in elements.
#[derive(Debug, Clone, Copy)]
pub struct Buffers {
    /// fp16/bf16 input `[batch, seq, heads, dim]`, last dim contiguous.
    pub x: TensorDesc,
    /// E4M3 codes, contiguous BSHD.
    pub codes: (u64, usize),
    /// fp32 descales `[batch, heads]`.
    pub descales: (u64, usize),
    /// Zeroed u32 `[batch, heads]` (the running absolute maxima).
    pub amax: (u64, usize),
}

/// The host checks, without a device: the library's, and the scratch's size.
pub fn check(b: &Buffers) -> Result<QuantizePlan> {
    let p = plan(&b.x, b.codes.1, b.descales.1)?;
    let pairs = b.x.shape[0] * b.x.shape[2];
    if b.amax.1 < pairs {
        return Err(Error::InvalidInput(format!(
            "the quantizer's scratch holds {} words, needs {pairs} (batch x heads)",
            b.amax.1
        )));
    }
    Ok(p)
}

/// Quantizes on `stream`.
///
/// # Safety
/// Every address of `b` is live device memory of `stream`'s context holding at least its
/// stated elements, ordered on `stream` and alive until the queued work completes; `amax`
/// is zeroed and none of the outputs overlaps another buffer.
pub unsafe fn run(dev: &Device, stream: &CudaStream, b: &Buffers) -> Result<()> {
    let p = check(b)?;
    let in_t = if b.x.dtype == DType::Bf16 {
        "bf16_t"
    } else {
        "half_t"
    };
    let module = dev.module(
        &fp8_sdpa::kernels::FP8,
        &[("QUANT_IN_T".into(), in_t.into())],
    )?;
    let amax_fn = module
        .load_function("amax_bshd")
        .map_err(Error::driver("finding amax_bshd"))?;
    let quant_fn = module
        .load_function("quantize_e4m3_bshd")
        .map_err(Error::driver("finding quantize_e4m3_bshd"))?;
    let [bi, si, hi, di] = p.dims;
    // The grid the library's quantizer uses (runtime/quantize.rs).
    let per_head = (si as u64) * (di as u64);
    let cfg = LaunchConfig {
        grid_dim: (
            per_head.div_ceil(256 * 8).clamp(1, 1024) as u32,
            (bi * hi) as u32,
            1,
        ),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // plan() proved each stride fits an i64.
    let [sb, ss, sh] = [0, 1, 2].map(|i| b.x.strides[i] as i64);
    let (xp, amax, codes, ds) = (b.x.ptr, b.amax.0, b.codes.0, b.descales.0);
    let mut l = stream.launch_builder(&amax_fn);
    l.arg(&xp)
        .arg(&amax)
        .arg(&bi)
        .arg(&si)
        .arg(&hi)
        .arg(&di)
        .arg(&sb)
        .arg(&ss)
        .arg(&sh);
    // SAFETY: the arguments match amax_bshd's signature; plan() checked x's span against its
    // bytes and check() the scratch's size; the memory is live (this function's contract).
    unsafe { l.launch(cfg) }.map_err(Error::driver("launching amax_bshd"))?;
    let mut l = stream.launch_builder(&quant_fn);
    l.arg(&xp)
        .arg(&amax)
        .arg(&codes)
        .arg(&ds)
        .arg(&bi)
        .arg(&si)
        .arg(&hi)
        .arg(&di)
        .arg(&sb)
        .arg(&ss)
        .arg(&sh);
    // SAFETY: the arguments match quantize_e4m3_bshd's signature; plan() checked the outputs'
    // sizes; the memory is live (this function's contract).
    unsafe { l.launch(cfg) }.map_err(Error::driver("launching quantize_e4m3_bshd"))?;
    Ok(())
}
