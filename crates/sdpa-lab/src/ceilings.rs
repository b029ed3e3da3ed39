//! Ceilings measured in the same run as the benchmarks: cuBLASLt GEMM (8192³, fp16, bf16 and
//! FP8 E4M3 → bf16) and a device-to-device copy (bytes read + written over time). Every
//! percentage in a bench file is against these, not against datasheet figures.

use crate::bench::record::{ceiling_names, Ceiling};
use crate::bench::stats::Stats;
use crate::timing::{time_runs, Mode, Protocol};
use cudarc::cublaslt::result::{self, CublasError};
use cudarc::cublaslt::{sys, CudaBlasLT, Matmul, MatmulConfig, MatmulShared};
use cudarc::driver::sys::{CUdevice_attribute, CUdeviceptr};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use fp8_sdpa::{Error, Result};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

const GEMM_N: usize = 8192;

/// Times one ceiling's operation (3 warm-ups, 20 runs, 3 s at most, hot) and returns the
/// median in microseconds. Every ceiling uses the same protocol.
fn time_ceiling(stream: &Arc<CudaStream>, op: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    let proto = Protocol {
        warmup: 3,
        iters: 20,
        budget_s: 3.0,
        per_graph: 1,
    };
    let times = time_runs(stream, Mode::Hot, proto, None, op)?;
    Stats::from_samples(&times)
        .map(|s| s.median_us)
        .map_err(|e| Error::Unsupported(format!("ceiling timing: {e:?}")))
}

/// Random-looking, never-zero data: GEMM speed depends on the bits (zeros run faster).
/// `stream` picks an independent ChaCha stream of the seed (0 is what the fp16/bf16 GEMMs use).
fn pattern<T: Copy>(stream: u64, n: usize, conv: impl Fn(f32) -> T) -> Vec<T> {
    let base = sdpa_harness::inputs::generate_stream(
        42,
        stream,
        1 << 16,
        64,
        sdpa_harness::inputs::Distribution::Normal,
    );
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
    let host = pattern(0, n * n, conv);
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
    let median_us = time_ceiling(stream, |_| {
        // SAFETY: a, b, c hold n*n elements each, matching m = n = k = lda = ldb = ldc = n.
        unsafe { blas.matmul(cfg, &a, &b, &mut c, None, None) }
            .map_err(|e| Error::Unsupported(format!("cuBLASLt matmul failed: {e:?}")))
    })?;
    Ok(2.0 * (n as f64).powi(3) / (median_us * 1e-6) / 1e12)
}

/// `cublasOperation_t` values (cublas_api.h); cudarc's cuBLASLt bindings do not carry the enum.
const CUBLAS_OP_N: i32 = 0;
const CUBLAS_OP_T: i32 = 1;

/// cuBLASLt workspace for the FP8 GEMM: NVIDIA's recommendation for Hopper. The `CudaBlasLT`
/// handle has one of the same size, but cudarc keeps its buffer private.
const FP8_WORKSPACE_BYTES: usize = 32 << 20;

/// Maps a cuBLASLt status error to a note naming the call that returned it.
fn lt(call: &'static str) -> impl FnOnce(CublasError) -> Error {
    move |e| Error::Unsupported(format!("{call} returned {:?}", e.0))
}

/// Owns a matrix layout descriptor.
struct LtLayout(sys::cublasLtMatrixLayout_t);

impl LtLayout {
    fn new(ty: sys::cudaDataType, rows: u64, cols: u64, ld: i64) -> Result<LtLayout> {
        result::create_matrix_layout(ty, rows, cols, ld)
            .map(LtLayout)
            .map_err(lt("cublasLtMatrixLayoutCreate"))
    }
}

impl Drop for LtLayout {
    fn drop(&mut self) {
        // SAFETY: self.0 came from cublasLtMatrixLayoutCreate and is destroyed only here. A
        // failed destroy cannot be reported from drop and at worst leaks a host-side
        // descriptor, so its status is ignored rather than panicking in measure().
        let _ = unsafe { result::destroy_matrix_layout(self.0) };
    }
}

/// Owns a matmul descriptor.
struct LtDesc(sys::cublasLtMatmulDesc_t);

impl LtDesc {
    /// Sets one attribute from `value`, whose type must be the attribute's documented type
    /// (cuBLASLt checks the size and answers CUBLAS_STATUS_INVALID_VALUE on a mismatch).
    fn set<T>(&self, attr: sys::cublasLtMatmulDescAttributes_t, value: &T) -> Result<()> {
        // SAFETY: self.0 is a live descriptor; cuBLASLt copies size_of::<T>() bytes out of
        // `value`, which is a valid reference to exactly that many bytes.
        unsafe {
            result::set_matmul_desc_attribute(
                self.0,
                attr,
                value as *const T as *const c_void,
                std::mem::size_of::<T>(),
            )
        }
        .map_err(|e| {
            Error::Unsupported(format!(
                "cublasLtMatmulDescSetAttribute({attr:?}) returned {:?}",
                e.0
            ))
        })
    }
}

impl Drop for LtDesc {
    fn drop(&mut self) {
        // SAFETY: self.0 came from cublasLtMatmulDescCreate and is destroyed only here (status
        // ignored for the reason given on LtLayout).
        let _ = unsafe { result::destroy_matmul_desc(self.0) };
    }
}

/// Owns a heuristic-search preference descriptor.
struct LtPref(sys::cublasLtMatmulPreference_t);

impl Drop for LtPref {
    fn drop(&mut self) {
        // SAFETY: self.0 came from cublasLtMatmulPreferenceCreate and is destroyed only here
        // (status ignored for the reason given on LtLayout).
        let _ = unsafe { result::destroy_matmul_pref(self.0) };
    }
}

/// Quantizes values to E4M3 with one per-tensor descale (amax / 448), as a real FP8 GEMM's
/// operands would be: the codes then span the format's whole exponent range instead of the
/// few binades a unit normal covers. Returns the codes and the descale.
fn quantize_e4m3(values: &[f32]) -> (Vec<u8>, f32) {
    use fp8_sdpa::fp8::e4m3;
    let amax = values.iter().fold(0f32, |m, x| m.max(x.abs()));
    let descale = e4m3::descale_for_amax(amax);
    let codes = values
        .iter()
        .map(|&x| {
            let c = e4m3::encode_scaled(x, descale);
            // The inputs are finite, so the saturating encoder never yields NaN codes; kept
            // as a guard because a NaN in the operands would change what the GEMM measures.
            if c & 0x7F == 0x7F {
                (c & 0x80) | 0x7E
            } else {
                c
            }
        })
        .collect();
    (codes, descale)
}

/// FP8 E4M3 × E4M3 → bf16 GEMM, n = [`GEMM_N`], through cuBLASLt's raw API (cudarc's safe
/// `Matmul` has no FP8 type). Returns TFLOPS and, when the spot check of a few outputs
/// against a host dot product fails, a note (the timing is still valid: speed does not
/// depend on the answer, but a wrong answer means the configuration is not what we think).
///
/// cuBLASLt is column-major and computes D (m×n) = alpha · op(A) · op(B) + beta · C. FP8
/// needs the "TN" form on Hopper/Ada: op(A) = Aᵀ with A described as the stored k×m matrix
/// (ld = k), B as k×n (ld = k), so both operands are K-major in memory — each output row's
/// and each output column's K-vector is contiguous, which is what FP8 tensor-core MMA reads.
/// D is m×n bf16 with ld = m; C aliases D and beta = 0 so it is never read.
fn gemm_fp8(stream: &Arc<CudaStream>, blas: &CudaBlasLT) -> Result<(f64, Option<String>)> {
    let ctx = stream.context();
    let cc = |a| {
        ctx.attribute(a)
            .map_err(Error::driver("reading the compute capability"))
    };
    let major = cc(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = cc(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    if (major, minor) < (8, 9) {
        return Err(Error::Unsupported(format!(
            "FP8 tensor cores need sm_89 or newer, this device is sm_{major}{minor}"
        )));
    }

    let n = GEMM_N;
    // Independent data for A and B (ChaCha streams 0 and 1), so D is not a Gram matrix.
    let (a_host, a_descale) = quantize_e4m3(&pattern(0, n * n, |x| x));
    let (b_host, b_descale) = quantize_e4m3(&pattern(1, n * n, |x| x));
    let a: CudaSlice<u8> = stream
        .clone_htod(&a_host)
        .map_err(Error::driver("uploading FP8 GEMM operands"))?;
    let b: CudaSlice<u8> = stream
        .clone_htod(&b_host)
        .map_err(Error::driver("uploading FP8 GEMM operands"))?;
    // One allocation per descale, so each scale pointer is as aligned as any operand.
    let upload_scale = |v: f32| -> Result<CudaSlice<f32>> {
        stream
            .clone_htod(&[v])
            .map_err(Error::driver("uploading FP8 GEMM descales"))
    };
    let (a_scale, b_scale) = (upload_scale(a_descale)?, upload_scale(b_descale)?);
    let mut d: CudaSlice<half::bf16> = stream
        .alloc_zeros(n * n)
        .map_err(Error::driver("allocating the FP8 GEMM output"))?;
    let mut workspace: CudaSlice<u8> = stream
        .alloc_zeros(FP8_WORKSPACE_BYTES)
        .map_err(Error::driver("allocating the cuBLASLt workspace"))?;

    let (m64, n64, k64, ld) = (n as u64, n as u64, n as u64, n as i64);
    let a_layout = LtLayout::new(sys::cudaDataType_t::CUDA_R_8F_E4M3, k64, m64, ld)?;
    let b_layout = LtLayout::new(sys::cudaDataType_t::CUDA_R_8F_E4M3, k64, n64, ld)?;
    let d_layout = LtLayout::new(sys::cudaDataType_t::CUDA_R_16BF, m64, n64, ld)?;

    let desc = result::create_matmul_desc(
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        sys::cudaDataType_t::CUDA_R_32F,
    )
    .map(LtDesc)
    .map_err(lt("cublasLtMatmulDescCreate"))?;
    use sys::cublasLtMatmulDescAttributes_t as Attr;
    desc.set(Attr::CUBLASLT_MATMUL_DESC_TRANSA, &CUBLAS_OP_T)?;
    desc.set(Attr::CUBLASLT_MATMUL_DESC_TRANSB, &CUBLAS_OP_N)?;
    // Per-tensor descales as device pointers (the default scale mode is one f32 scalar),
    // as a scaled FP8 GEMM runs them; they are applied once in the epilogue.
    let ptr = |x: &CudaSlice<f32>| -> CUdeviceptr { x.device_ptr(stream).0 };
    desc.set(Attr::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ptr(&a_scale))?;
    desc.set(Attr::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ptr(&b_scale))?;
    // Fast accumulation: the tensor cores' own accumulation, without cuBLASLt's periodic
    // promotion of partial sums to FP32 on the CUDA cores (on Ada/Hopper that promotion costs
    // throughput). A ceiling is the fastest FP8 GEMM the device runs, so the fast mode.
    desc.set(Attr::CUBLASLT_MATMUL_DESC_FAST_ACCUM, &1i8)?;

    let pref = result::create_matmul_pref()
        .map(LtPref)
        .map_err(lt("cublasLtMatmulPreferenceCreate"))?;
    // SAFETY: pref.0 is live; cuBLASLt copies a usize (the attribute's documented uint64_t).
    unsafe {
        result::set_matmul_pref_attribute(
            pref.0,
            sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &FP8_WORKSPACE_BYTES as *const usize as *const c_void,
            std::mem::size_of::<usize>(),
        )
    }
    .map_err(lt(
        "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
    ))?;

    let handle = *blas.handle();
    let mut heuristic = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::uninit();
    let mut found: c_int = 0;
    // SAFETY: handle, desc, layouts and pref are live; cuBLASLt writes at most the one
    // requested result into `heuristic` and the count into `found`.
    unsafe {
        sys::cublasLtMatmulAlgoGetHeuristic(
            handle,
            desc.0,
            a_layout.0,
            b_layout.0,
            d_layout.0,
            d_layout.0,
            pref.0,
            1,
            heuristic.as_mut_ptr(),
            &mut found,
        )
    }
    .result()
    .map_err(lt("cublasLtMatmulAlgoGetHeuristic"))?;
    if found < 1 {
        return Err(Error::Unsupported(
            "cublasLtMatmulAlgoGetHeuristic found no algorithm for E4M3 TN → bf16".into(),
        ));
    }
    // SAFETY: found >= 1, so cuBLASLt filled the first (only) result.
    let heuristic = unsafe { heuristic.assume_init() };
    heuristic
        .state
        .result()
        .map_err(lt("cublasLtMatmulAlgoGetHeuristic (result state)"))?;

    let (alpha, beta) = (1.0f32, 0.0f32);
    let median_us = time_ceiling(stream, |_| {
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (pd, _rd) = d.device_ptr_mut(stream);
        let (pw, _rw) = workspace.device_ptr_mut(stream);
        // SAFETY: every descriptor is live and matches its buffer: A and B hold k·m and k·n
        // E4M3 bytes with ld = k, D holds m·n bf16 with ld = m (C aliases D, unread with
        // beta = 0), the scales hold one f32 each, the workspace is FP8_WORKSPACE_BYTES — the
        // limit the heuristic was given; alpha and beta are host f32 (the default pointer
        // mode, scale type 32F) and outlive the call; the stream is the buffers' stream.
        unsafe {
            sys::cublasLtMatmul(
                handle,
                desc.0,
                &alpha as *const f32 as *const c_void,
                pa as *const c_void,
                a_layout.0,
                pb as *const c_void,
                b_layout.0,
                &beta as *const f32 as *const c_void,
                pd as *const c_void,
                d_layout.0,
                pd as *mut c_void,
                d_layout.0,
                &heuristic.algo,
                pw as *mut c_void,
                FP8_WORKSPACE_BYTES,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .result()
        .map_err(lt("cublasLtMatmul"))
    })?;
    let tflops = 2.0 * (n as f64).powi(3) / (median_us * 1e-6) / 1e12;

    let got = stream
        .clone_dtoh(&d)
        .map_err(Error::driver("reading the FP8 GEMM output"))?;
    let note = spot_check(n, &a_host, &b_host, a_descale * b_descale, &got);
    Ok((tflops, note))
}

/// Compares a few D entries with f64 dot products of the decoded operands (layouts as in
/// [`gemm_fp8`]). The bound is loose enough for fast accumulation and the bf16 output but
/// far below the spread of unrelated dot products, so a transposed or mis-typed operand shows.
fn spot_check(n: usize, a: &[u8], b: &[u8], scale: f32, d: &[half::bf16]) -> Option<String> {
    use fp8_sdpa::fp8::e4m3::decode;
    let mut bad = Vec::new();
    for (i, j) in [
        (0, 0),
        (1, 7),
        (n / 3, n / 2),
        (n - 1, 5),
        (17, n - 1),
        (n / 2, n / 5),
    ] {
        let (mut dot, mut sq) = (0f64, 0f64);
        for kk in 0..n {
            let p = decode(a[kk + i * n]) as f64 * decode(b[kk + j * n]) as f64;
            dot += p;
            sq += p * p;
        }
        let want = dot * scale as f64;
        let tol = 0.05 * (want.abs() + sq.sqrt() * scale as f64);
        let have = d[i + j * n].to_f64();
        if have.is_nan() || (have - want).abs() > tol {
            bad.push(format!("D[{i},{j}] = {have:.4}, expected {want:.4}"));
        }
    }
    (!bad.is_empty()).then(|| {
        format!(
            "fp8 GEMM spot check failed ({}): the configuration may not compute what is assumed",
            bad.join("; ")
        )
    })
}

fn copy(stream: &Arc<CudaStream>) -> Result<f64> {
    let n: usize = 1 << 30;
    let src = stream
        .clone_htod(&pattern(0, n / 4, |x| x))
        .map_err(Error::driver("uploading the copy source"))?;
    let mut dst: CudaSlice<f32> = stream
        .alloc_zeros(n / 4)
        .map_err(Error::driver("allocating the copy target"))?;
    let median_us = time_ceiling(stream, |_| {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(Error::driver("device copy"))
    })?;
    Ok(2.0 * n as f64 / (median_us * 1e-6) / 1e9)
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
            match gemm_fp8(stream, &blas) {
                Ok((v, check)) => {
                    out.push(Ceiling {
                        name: ceiling_names::GEMM_FP8.into(),
                        unit: "TFLOPS".into(),
                        value: v,
                    });
                    notes.extend(check);
                }
                Err(e) => notes.push(format!("fp8 GEMM ceiling not measured: {e}")),
            }
        }
        Err(e) => notes.push(format!("GEMM ceilings not measured: {e}")),
    }
    (out, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_sdpa::fp8::e4m3::decode;

    #[test]
    fn quantize_uses_the_full_range_and_never_nan() {
        let (codes, descale) = quantize_e4m3(&pattern(1, 1 << 16, |x| x));
        assert!(codes.iter().all(|&c| c & 0x7F != 0x7F));
        assert!(
            codes.iter().any(|&c| c & 0x7F == 0x7E),
            "amax encodes to ±448"
        );
        assert!(descale > 0.0 && descale < 1.0);
    }

    /// Host GEMM in the layouts `gemm_fp8` gives cuBLASLt; `transpose_d` stores D row-major
    /// instead, the kind of mistake the spot check is there to catch.
    fn host_d(n: usize, a: &[u8], b: &[u8], scale: f32, transpose_d: bool) -> Vec<half::bf16> {
        let mut d = vec![half::bf16::ZERO; n * n];
        for i in 0..n {
            for j in 0..n {
                let dot: f32 = (0..n)
                    .map(|k| decode(a[k + i * n]) * decode(b[k + j * n]))
                    .sum();
                let at = if transpose_d { j + i * n } else { i + j * n };
                d[at] = half::bf16::from_f32(dot * scale);
            }
        }
        d
    }

    #[test]
    fn spot_check_accepts_the_right_layout_and_flags_a_transposed_one() {
        let n = 64;
        let (a, da) = quantize_e4m3(&pattern(0, n * n, |x| x));
        let (b, db) = quantize_e4m3(&pattern(1, n * n, |x| x));
        let good = host_d(n, &a, &b, da * db, false);
        assert_eq!(spot_check(n, &a, &b, da * db, &good), None);
        let bad = host_d(n, &a, &b, da * db, true);
        assert!(spot_check(n, &a, &b, da * db, &bad).is_some());
    }
}
