//! Ceilings measured in the same run as the benchmarks: cuBLASLt GEMM (8192³, fp16 and bf16)
//! and a device-to-device copy (bytes read + written over time). Every percentage in a bench
//! file is against these, not against datasheet figures.

use crate::bench::record::{ceiling_names, Ceiling};
use crate::bench::stats::Stats;
use crate::timing::{time_runs, Mode, Protocol};
use cudarc::cublaslt::{CudaBlasLT, Matmul, MatmulConfig};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use fp8_sdpa::{Error, Result};
use std::sync::Arc;

const GEMM_N: usize = 8192;

/// Random-looking, never-zero data: GEMM speed depends on the bits (zeros run faster).
fn pattern<T: Copy>(n: usize, conv: impl Fn(f32) -> T) -> Vec<T> {
    let base = fp8_sdpa::inputs::generate(42, 1 << 16, 64, fp8_sdpa::inputs::Distribution::Normal);
    (0..n)
        .map(|i| conv(base[i % base.len()] + (i / base.len()) as f32 * 1e-3))
        .collect()
}

fn gemm<T: DeviceRepr + ValidAsZeroBits + Copy>(
    stream: &Arc<CudaStream>,
    blas: &CudaBlasLT,
    conv: impl Fn(f32) -> T,
) -> Result<f64>
where
    CudaBlasLT: Matmul<T>,
{
    let n = GEMM_N;
    let host = pattern(n * n, conv);
    let a: CudaSlice<T> = stream
        .clone_htod(&host)
        .map_err(Error::driver("uploading GEMM operands"))?;
    let b: CudaSlice<T> = stream
        .clone_htod(&host)
        .map_err(Error::driver("uploading GEMM operands"))?;
    let mut c: CudaSlice<T> = stream
        .alloc_zeros(n * n)
        .map_err(Error::driver("allocating the GEMM output"))?;
    let cfg = MatmulConfig {
        transa: true,
        transb: false,
        transc: false,
        m: n as u64,
        n: n as u64,
        k: n as u64,
        alpha: 1.0,
        lda: n as i64,
        ldb: n as i64,
        beta: 0.0,
        ldc: n as i64,
        stride_a: None,
        stride_b: None,
        stride_c: None,
        stride_bias: None,
        batch_size: None,
    };
    let proto = Protocol {
        warmup: 3,
        iters: 20,
        budget_s: 3.0,
        per_graph: 1,
    };
    let times = time_runs(stream, Mode::Hot, proto, None, |_| {
        // SAFETY: a, b, c hold n*n elements each, matching m = n = k = lda = ldb = ldc = n.
        unsafe { blas.matmul(cfg, &a, &b, &mut c, None, None) }
            .map_err(|e| Error::Unsupported(format!("cuBLASLt matmul failed: {e:?}")))
    })?;
    let s = Stats::from_samples(&times)
        .map_err(|e| Error::Unsupported(format!("GEMM timing: {e:?}")))?;
    Ok(2.0 * (n as f64).powi(3) / (s.median_us * 1e-6) / 1e12)
}

fn copy(stream: &Arc<CudaStream>) -> Result<f64> {
    let n: usize = 1 << 30;
    let src = stream
        .clone_htod(&pattern(n / 4, |x| x))
        .map_err(Error::driver("uploading the copy source"))?;
    let mut dst: CudaSlice<f32> = stream
        .alloc_zeros(n / 4)
        .map_err(Error::driver("allocating the copy target"))?;
    let proto = Protocol {
        warmup: 3,
        iters: 20,
        budget_s: 3.0,
        per_graph: 1,
    };
    let times = time_runs(stream, Mode::Hot, proto, None, |_| {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(Error::driver("device copy"))
    })?;
    let s = Stats::from_samples(&times)
        .map_err(|e| Error::Unsupported(format!("copy timing: {e:?}")))?;
    Ok(2.0 * n as f64 / (s.median_us * 1e-6) / 1e9)
}

/// Measures every ceiling the device supports; what could not be measured is a note.
pub fn measure(stream: &Arc<CudaStream>) -> (Vec<Ceiling>, Vec<String>) {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    match copy(stream) {
        Ok(v) => out.push(Ceiling {
            name: ceiling_names::COPY.into(),
            unit: "GB/s".into(),
            value: v,
        }),
        Err(e) => notes.push(format!("copy ceiling not measured: {e}")),
    }
    let blas = fp8_sdpa::libs::ensure_cublaslt().and_then(|_| {
        CudaBlasLT::new(stream.clone())
            .map_err(|e| Error::Unsupported(format!("cuBLASLt init failed: {e:?}")))
    });
    match blas {
        Ok(blas) => {
            match gemm(stream, &blas, half::f16::from_f32) {
                Ok(v) => out.push(Ceiling {
                    name: ceiling_names::GEMM_F16.into(),
                    unit: "TFLOPS".into(),
                    value: v,
                }),
                Err(e) => notes.push(format!("fp16 GEMM ceiling not measured: {e}")),
            }
            match gemm(stream, &blas, half::bf16::from_f32) {
                Ok(v) => out.push(Ceiling {
                    name: ceiling_names::GEMM_BF16.into(),
                    unit: "TFLOPS".into(),
                    value: v,
                }),
                Err(e) => notes.push(format!("bf16 GEMM ceiling not measured: {e}")),
            }
        }
        Err(e) => notes.push(format!("GEMM ceilings not measured: {e}")),
    }
    notes.push("fp8 GEMM ceiling not measured: cudarc's safe cuBLASLt API has no E4M3 matmul; full-FP8 rows get a percentage of the copy ceiling only".into());
    (out, notes)
}
