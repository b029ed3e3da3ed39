//! Exhaustive checks of the E4M3 codec on the GPU against the Rust codec: every fp16 input
//! through the hardware (sm_89+) and software encoders, every code through both decoders,
//! and the quantize kernel against the CPU quantizer, bit for bit.

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use fp8_sdpa::error::{Error, Result};
use fp8_sdpa::fp8::e4m3;
use fp8_sdpa::kernels;
use fp8_sdpa::runtime::Device;
use serde::Serialize;
use std::sync::Arc;

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CodecCheck {
    /// What was checked.
    pub name: String,
    /// Cases compared.
    pub cases: usize,
    /// Cases that differ.
    pub mismatches: usize,
    /// Up to five differing cases, described.
    pub examples: Vec<String>,
}

impl CodecCheck {
    /// Whether every case matched.
    pub fn passed(&self) -> bool {
        self.mismatches == 0 && self.cases > 0
    }
}

fn launch1<I: DeviceRepr, O: DeviceRepr + Default + Clone + cudarc::driver::ValidAsZeroBits>(
    dev: &Device,
    stream: &Arc<CudaStream>,
    entry: &str,
    input: &[I],
) -> Result<Vec<O>> {
    let m = dev.module(&kernels::FP8, &[])?;
    let f = m
        .load_function(entry)
        .map_err(Error::driver(format!("finding {entry}")))?;
    let d_in: CudaSlice<I> = stream
        .clone_htod(input)
        .map_err(Error::driver("uploading codec inputs"))?;
    let mut d_out: CudaSlice<O> = stream
        .alloc_zeros(input.len())
        .map_err(Error::driver("allocating codec outputs"))?;
    let n = input.len() as i32;
    let mut l = stream.launch_builder(&f);
    l.arg(&d_in).arg(&mut d_out).arg(&n);
    let cfg = LaunchConfig {
        grid_dim: ((input.len() as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the entry takes (const I*, O*, int n) and touches n elements of each buffer.
    unsafe { l.launch(cfg) }.map_err(Error::driver(format!("launching {entry}")))?;
    stream
        .clone_dtoh(&d_out)
        .map_err(Error::driver("reading codec outputs"))
}

fn tally<T: PartialEq + std::fmt::Debug>(
    name: &str,
    inputs: &[String],
    got: &[T],
    want: &[T],
) -> CodecCheck {
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    CodecCheck {
        name: name.into(),
        cases: got.len(),
        mismatches: bad.len(),
        examples: bad
            .iter()
            .take(5)
            .map(|&i| format!("{}: gpu {:?}, rust {:?}", inputs[i], got[i], want[i]))
            .collect(),
    }
}

/// Runs every codec check the device supports.
pub fn run_all(dev: &Device, stream: &Arc<CudaStream>) -> Result<Vec<CodecCheck>> {
    let mut out = Vec::new();
    let all_f16: Vec<u16> = (0..=u16::MAX).collect();
    let f16_names: Vec<String> = all_f16
        .iter()
        .map(|b| format!("f16 {b:#06x} ({})", half::f16::from_bits(*b)))
        .collect();
    let want_enc: Vec<u8> = all_f16
        .iter()
        .map(|&b| e4m3::encode_f16(half::f16::from_bits(b)))
        .collect();
    let codes: Vec<u8> = (0..=255u8).collect();
    let code_names: Vec<String> = codes.iter().map(|c| format!("code {c:#04x}")).collect();
    let want_dec: Vec<u32> = codes
        .iter()
        .map(|&c| canonical_bits(e4m3::decode(c)))
        .collect();

    let sw: Vec<u8> = launch1(dev, stream, "e4m3_encode_f16_sw", &all_f16)?;
    out.push(tally(
        "encode all 65,536 fp16 (software encoder)",
        &f16_names,
        &sw,
        &want_enc,
    ));
    let dec: Vec<f32> = launch1(dev, stream, "e4m3_decode_sw", &codes)?;
    let dec: Vec<u32> = dec.into_iter().map(canonical_bits).collect();
    out.push(tally(
        "decode all 256 codes (software decoder)",
        &code_names,
        &dec,
        &want_dec,
    ));
    if dev.info().arch.has_fp8_cvt() {
        let hw: Vec<u8> = launch1(dev, stream, "e4m3_encode_f16_hw", &all_f16)?;
        out.push(tally(
            "encode all 65,536 fp16 (hardware cvt.rn.satfinite.e4m3x2.f16x2)",
            &f16_names,
            &hw,
            &want_enc,
        ));
        let hdec: Vec<u16> = launch1(dev, stream, "e4m3_decode_hw", &codes)?;
        let hdec: Vec<u32> = hdec
            .into_iter()
            .map(|b| canonical_bits(half::f16::from_bits(b).to_f32()))
            .collect();
        out.push(tally(
            "decode all 256 codes (hardware cvt.rn.f16x2.e4m3x2)",
            &code_names,
            &hdec,
            &want_dec,
        ));
        // f32 inputs: every fp16 value widened, plus the midpoints between them (ties).
        let mut f32s: Vec<f32> = all_f16
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect();
        f32s.extend(
            codes
                .windows(2)
                .map(|w| (e4m3::decode(w[0]) + e4m3::decode(w[1])) / 2.0),
        );
        let names: Vec<String> = f32s.iter().map(|x| format!("f32 {x:e}")).collect();
        let want: Vec<u8> = f32s.iter().map(|&x| e4m3::encode_f32(x)).collect();
        let hw32: Vec<u8> = launch1(dev, stream, "e4m3_encode_f32_hw", &f32s)?;
        out.push(tally(
            "encode f32 incl. every tie (hardware cvt.rn.satfinite.e4m3x2.f32)",
            &names,
            &hw32,
            &want,
        ));
        let sw32: Vec<u8> = launch1(dev, stream, "e4m3_encode_f32_sw", &f32s)?;
        out.push(tally(
            "encode f32 incl. every tie (software encoder)",
            &names,
            &sw32,
            &want,
        ));
    }
    Ok(out)
}

/// NaNs compare equal whatever their sign and payload; everything else by bits.
fn canonical_bits(x: f32) -> u32 {
    if x.is_nan() {
        0x7fc0_0000
    } else {
        x.to_bits()
    }
}

/// The quantize kernel against the CPU quantizer on `dims` of outlier-laden data, for f16
/// and bf16 inputs: codes and descales must be identical.
pub fn quantize_check(
    dev: &Device,
    stream: &Arc<CudaStream>,
    dims: [usize; 4],
    seed: u64,
) -> Result<Vec<CodecCheck>> {
    use fp8_sdpa::dtype::DType;
    use fp8_sdpa::runtime::quantize::quantize_e4m3;
    use fp8_sdpa::runtime::TensorRef;
    let n: usize = dims.iter().product();
    let raw = crate::inputs::generate(seed, n, dims[3], crate::inputs::Distribution::Outliers);
    let mut out = Vec::new();
    for dtype in [DType::F16, DType::Bf16] {
        let bytes = crate::inputs::to_bytes(dtype, &raw)?;
        // The kernel sees the 16-bit values; quantize exactly those on the CPU.
        let seen = crate::harness::decode_out(dtype, &bytes);
        let (want_codes, want_ds) = e4m3::quantize(&seen, dims)?;
        let d_in = stream
            .clone_htod(&bytes)
            .map_err(Error::driver("uploading"))?;
        let mut codes = stream
            .alloc_zeros::<u8>(n)
            .map_err(Error::driver("allocating"))?;
        let mut ds = stream
            .alloc_zeros::<f32>(dims[0] * dims[2])
            .map_err(Error::driver("allocating"))?;
        {
            let x = TensorRef::contiguous(&d_in, stream, dtype, dims, fp8_sdpa::Layout::Bshd)?;
            quantize_e4m3(dev, stream, &x, &mut codes, &mut ds)?;
        }
        let got_codes = stream
            .clone_dtoh(&codes)
            .map_err(Error::driver("reading codes"))?;
        let got_ds: Vec<u32> = stream
            .clone_dtoh(&ds)
            .map_err(Error::driver("reading descales"))?
            .into_iter()
            .map(f32::to_bits)
            .collect();
        let want_ds: Vec<u32> = want_ds.into_iter().map(f32::to_bits).collect();
        let names: Vec<String> = (0..n)
            .map(|i| format!("element {i} ({})", seen[i]))
            .collect();
        out.push(tally(
            &format!("quantize {dtype} {dims:?}: codes"),
            &names,
            &got_codes,
            &want_codes,
        ));
        let names: Vec<String> = (0..want_ds.len()).map(|i| format!("descale {i}")).collect();
        out.push(tally(
            &format!("quantize {dtype} {dims:?}: descales"),
            &names,
            &got_ds,
            &want_ds,
        ));
    }
    Ok(out)
}
