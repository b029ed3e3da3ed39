//! E4M3 quantization of K/V tensors: `value = decode(code) * descale`, one fp32 descale per
//! (batch, head) or per head. Codes are candle `F8E4M3` tensors, so they move, slice and
//! save like any candle tensor.

use crate::check::{self, err};
use candle_core::{DType, Device, Result, Tensor};

/// Quantizes fp16/bf16 `x` `[batch, seq, heads, head_dim]` to E4M3 with one descale per
/// (batch, head): `descale = amax / 448` over the head's finite values (1 for an all-zero
/// head), `code = e4m3(x / descale)` rounded to nearest even, saturating at ±448.
///
/// Returns contiguous `F8E4M3` codes of `x`'s shape and `F32` descales `[batch, heads]`, the
/// form [`crate::flash_attn_fp8kv`] takes. On the GPU this runs fp8-sdpa's quantize kernel
/// (two passes: amax, then encode) on candle's stream; on the CPU it runs the same codec, bit
/// for bit (`fp8_sdpa::fp8::e4m3::quantize`).
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let k = Tensor::randn(0f32, 1., (2, 16, 4, 64), &Device::Cpu)?.to_dtype(DType::F16)?;
/// let (codes, descale) = fp8_sdpa_candle::quantize_e4m3(&k)?;
/// assert_eq!(codes.dtype(), DType::F8E4M3);
/// assert_eq!(descale.dims(), &[2, 4]);
/// # Ok(())
/// # }
/// ```
pub fn quantize_e4m3(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let op = "quantize_e4m3";
    let [b, s, h, d] = check::dims4(op, "x", x)?;
    check::half_dtype(op, "x", x)?;
    if x.layout().stride()[3] != 1 {
        return Err(err(
            op,
            "x's last dim must be contiguous; call .contiguous()",
        ));
    }
    match x.device() {
        Device::Cpu => {
            let vals = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            let (codes, descales) =
                fp8_sdpa::fp8::e4m3::quantize(&vals, [b, s, h, d]).map_err(|e| err(op, e))?;
            let codes =
                Tensor::from_raw_buffer(&codes, DType::F8E4M3, &[b, s, h, d], &Device::Cpu)?;
            Ok((codes, Tensor::from_vec(descales, (b, h), &Device::Cpu)?))
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::gpu::quantize::quantize_e4m3(x),
        other => Err(crate::attn::unsupported_device(op, other)),
    }
}

/// Quantizes `x` `[batch, seq, heads, head_dim]` (any float dtype) to E4M3 with given
/// descales (`F32` `[heads]` or `[batch, heads]`): `code = e4m3(x / descale)`, rounded to
/// nearest even; values beyond `448 * descale` saturate to ±448. This is how a KV cache
/// appends tokens under descales fixed earlier. Runs with candle ops on the CPU and a kernel
/// of this crate on CUDA (candle 0.11.1's CUDA casts to F8E4M3 are broken); the result is
/// bit-identical to fp8-sdpa's codec (`fp8_sdpa::fp8::e4m3::encode_scaled`), except
/// that a negative NaN encodes as 0xFF rather than 0x7F (both decode to NaN).
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let x = Tensor::new(&[[[[1f32, -2.0, 1000.0, 0.5]]]], &Device::Cpu)?; // [1, 1, 1, 4]
/// let descale = Tensor::new(&[0.5f32], &Device::Cpu)?;
/// let codes = fp8_sdpa_candle::quantize_e4m3_with(&x, &descale)?;
/// let back = fp8_sdpa_candle::dequantize_e4m3(&codes, &descale)?;
/// // 1000 / 0.5 saturates at 448 (224 after the descale).
/// assert_eq!(back.flatten_all()?.to_vec1::<f32>()?, vec![1.0, -2.0, 224.0, 0.5]);
/// # Ok(())
/// # }
/// ```
pub fn quantize_e4m3_with(x: &Tensor, descale: &Tensor) -> Result<Tensor> {
    let op = "quantize_e4m3_with";
    let [b, _, h, _] = check::dims4(op, "x", x)?;
    check::same_device(op, &[("x", x), ("descale", descale)])?;
    let ds_stride = check::descale(op, "descale", descale, b, h)?;
    check::descale_values(op, "descale", descale)?;
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        let x = match x.dtype() {
            DType::F16 | DType::BF16 | DType::F32 => x.clone(),
            _ => x.to_dtype(DType::F32)?,
        };
        return crate::gpu::codec::quantize_with(&x, descale, ds_stride);
    }
    let _ = ds_stride;
    let x = x.to_dtype(DType::F32)?;
    // Dividing first (IEEE, round to nearest) and then converting with saturation is the
    // codec's definition; candle's cast to F8E4M3 is satfinite round-to-nearest-even on both
    // backends (float8's SatFinite, CUDA's __nv_fp8_e4m3), infinities included, so no clamp.
    x.broadcast_div(&as_bshd_scale(descale, b, h)?)?
        .to_dtype(DType::F8E4M3)
}

/// Decodes E4M3 `codes` `[batch, seq, heads, head_dim]` with their descales (`F32` `[heads]`
/// or `[batch, heads]`) to f32: `decode(code) * descale`, contiguous. Runs with candle ops
/// on the CPU and a kernel of this crate on CUDA.
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let v = Tensor::randn(0f32, 1., (1, 8, 2, 64), &Device::Cpu)?.to_dtype(DType::BF16)?;
/// let (codes, descale) = fp8_sdpa_candle::quantize_e4m3(&v)?;
/// let back = fp8_sdpa_candle::dequantize_e4m3(&codes, &descale)?;
/// let err = (back - v.to_dtype(DType::F32)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
/// assert!(err < 0.3); // E4M3 keeps 3 mantissa bits
/// # Ok(())
/// # }
/// ```
pub fn dequantize_e4m3(codes: &Tensor, descale: &Tensor) -> Result<Tensor> {
    let op = "dequantize_e4m3";
    let [b, _, h, _] = check::dims4(op, "codes", codes)?;
    if codes.dtype() != DType::F8E4M3 {
        return Err(err(
            op,
            format!("codes must be F8E4M3, got {:?}", codes.dtype()),
        ));
    }
    check::same_device(op, &[("codes", codes), ("descale", descale)])?;
    let ds_stride = check::descale(op, "descale", descale, b, h)?;
    #[cfg(feature = "cuda")]
    if codes.device().is_cuda() {
        return crate::gpu::codec::dequantize(codes, descale, ds_stride);
    }
    let _ = ds_stride;
    codes
        .to_dtype(DType::F32)?
        .broadcast_mul(&as_bshd_scale(descale, b, h)?)
}

/// A `[heads]` or `[batch, heads]` descale as `[batch or 1, 1, heads, 1]`, to broadcast over
/// a `[batch, seq, heads, head_dim]` tensor.
fn as_bshd_scale(descale: &Tensor, batch: usize, heads: usize) -> Result<Tensor> {
    let rows = if descale.rank() == 1 { 1 } else { batch };
    descale.reshape((rows, 1, heads, 1))
}
