//! Running a [`HostCase`] on the GPU the way verification demands: inputs uploaded in the
//! case's layout, output and LSE poisoned with NaN before every run, everything read back,
//! inputs checked unchanged.

use crate::cases::{from_layout, to_layout, HostCase, HostVarlenCase, PagedLayout};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use fp8_sdpa::dtype::DType;
use fp8_sdpa::error::{Error, Result};
use fp8_sdpa::problem::AttnParams;
use fp8_sdpa::runtime::{
    Attention, AttentionVarlen, CallOptions, Descale, Device, IdxRef, Launched,
    PagedAttentionVarlen, PagedKv, TensorMut, TensorRef, VecMut, VecRef,
};
use std::sync::Arc;

/// A case's buffers on the device.
pub struct DeviceCase {
    inputs: [CudaSlice<u8>; 3],
    host_inputs: [Vec<u8>; 3],
    descales: [Option<CudaSlice<f32>>; 3],
    o: CudaSlice<u8>,
    lse: CudaSlice<f32>,
}

/// What one run produced, in BSHD order (a varlen run's O: packed `[total_q, heads_q, dim]`).
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// O as f32.
    pub o: Vec<f32>,
    /// LSE `[batch, heads_q, seq_q]` (a varlen run's: `[heads_q, total_q]`).
    pub lse: Vec<f32>,
    /// What was launched.
    pub launched: Launched,
}

fn drv(ctx: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    Error::driver(ctx)
}

/// Waits for the run on `stream`, then reads O's bytes and the LSE back.
fn read_output(
    stream: &Arc<CudaStream>,
    o: &CudaSlice<u8>,
    lse: &CudaSlice<f32>,
) -> Result<(Vec<u8>, Vec<f32>)> {
    stream.synchronize().map_err(drv("running the kernel"))?;
    let o_bytes = stream.clone_dtoh(o).map_err(drv("reading O"))?;
    let lse = stream.clone_dtoh(lse).map_err(drv("reading LSE"))?;
    Ok((o_bytes, lse))
}

impl DeviceCase {
    /// Uploads `case`'s inputs (in its layout) and allocates O and LSE.
    pub fn upload(stream: &Arc<CudaStream>, case: &HostCase) -> Result<DeviceCase> {
        let s = &case.spec.shape;
        let dims = [
            [s.batch, s.seq_q, s.heads_q, s.head_dim],
            [s.batch, s.seq_kv, s.heads_kv, s.head_dim],
            [s.batch, s.seq_kv, s.heads_kv, s.head_dim],
        ];
        let host_inputs: [Vec<u8>; 3] = std::array::from_fn(|i| {
            to_layout(
                &case.enc[i].bytes,
                case.enc[i].dtype.size(),
                dims[i],
                case.spec.layout,
            )
        });
        let mut inputs = Vec::new();
        for h in &host_inputs {
            inputs.push(stream.clone_htod(h).map_err(drv("uploading inputs"))?);
        }
        let mut descales = Vec::new();
        for e in &case.enc {
            descales.push(match &e.descales {
                Some(d) => Some(stream.clone_htod(d).map_err(drv("uploading descales"))?),
                None => None,
            });
        }
        let out_bytes = s.q_len() * case.spec.precision.out().size();
        let o = stream
            .alloc_zeros::<u8>(out_bytes)
            .map_err(drv("allocating O"))?;
        let lse = stream
            .alloc_zeros::<f32>(s.lse_len())
            .map_err(drv("allocating LSE"))?;
        let inputs: [CudaSlice<u8>; 3] = inputs
            .try_into()
            .map_err(|_| Error::InvalidInput("three inputs".into()))?;
        let descales: [Option<CudaSlice<f32>>; 3] = descales
            .try_into()
            .map_err(|_| Error::InvalidInput("three descales".into()))?;
        Ok(DeviceCase {
            inputs,
            host_inputs,
            descales,
            o,
            lse,
        })
    }

    /// Poisons O and LSE with NaN (all-ones bytes), runs the attention call, reads back.
    pub fn run(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        case: &HostCase,
        params: AttnParams,
        opts: CallOptions,
    ) -> Result<RunOutput> {
        let s = case.spec.shape;
        let layout = case.spec.layout;
        let out_t = case.spec.precision.out();
        {
            let n = self.o.len();
            let (p, _g) = self.o.device_ptr_mut(stream);
            // SAFETY: p is a live allocation of n bytes.
            unsafe { cudarc::driver::result::memset_d8_async(p, 0xff, n, stream.cu_stream()) }
                .map_err(drv("poisoning O"))?;
            let n = self.lse.len() * 4;
            let (p, _g) = self.lse.device_ptr_mut(stream);
            // SAFETY: p is a live allocation of n bytes.
            unsafe { cudarc::driver::result::memset_d8_async(p, 0xff, n, stream.cu_stream()) }
                .map_err(drv("poisoning LSE"))?;
        }
        let qd = [s.batch, s.seq_q, s.heads_q, s.head_dim];
        let kd = [s.batch, s.seq_kv, s.heads_kv, s.head_dim];
        let launched = {
            let [q, k, v] = &self.inputs;
            let st: &CudaStream = stream;
            let descale = |i: usize, heads: usize| -> Option<Descale<'_>> {
                self.descales[i]
                    .as_ref()
                    .map(|d| Descale::new(VecRef::new(d, st), heads))
            };
            let a = Attention::new(
                TensorRef::contiguous(q, st, case.enc[0].dtype, qd, layout)?,
                TensorRef::contiguous(k, st, case.enc[1].dtype, kd, layout)?,
                TensorRef::contiguous(v, st, case.enc[2].dtype, kd, layout)?,
                TensorMut::contiguous(&mut self.o, st, out_t, qd, layout)?,
                params,
            )
            .with_lse(VecMut::new(&mut self.lse, st))
            .with_descales(
                descale(0, s.heads_q),
                descale(1, s.heads_kv),
                descale(2, s.heads_kv),
            );
            dev.attention(stream, &a, opts)?
        };
        let (o_bytes, lse) = read_output(stream, &self.o, &self.lse)?;
        let o_bshd = from_layout(&o_bytes, out_t.size(), qd, layout);
        Ok(RunOutput {
            o: decode_out(out_t, &o_bshd),
            lse,
            launched,
        })
    }

    /// Whether the inputs on the device still equal what was uploaded.
    pub fn inputs_unchanged(&self, stream: &Arc<CudaStream>) -> Result<bool> {
        for (d, h) in self.inputs.iter().zip(&self.host_inputs) {
            if &stream.clone_dtoh(d).map_err(drv("reading inputs back"))? != h {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A variable-length case's buffers on the device: packed inputs, offsets, O and LSE.
pub struct DeviceVarlenCase {
    inputs: [CudaSlice<u8>; 3],
    descales: [Option<CudaSlice<f32>>; 3],
    cu: [CudaSlice<i32>; 2],
    host_cu: [Vec<i32>; 2],
    o: CudaSlice<u8>,
    lse: CudaSlice<f32>,
}

/// Poisons a device buffer with all-ones bytes (NaN in every float type we write).
fn poison<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    buf: &mut CudaSlice<T>,
    what: &'static str,
) -> Result<()> {
    let n = buf.num_bytes();
    let (p, _g) = buf.device_ptr_mut(stream);
    // SAFETY: p is a live allocation of n bytes.
    unsafe { cudarc::driver::result::memset_d8_async(p, 0xff, n, stream.cu_stream()) }
        .map_err(drv(what))
}

impl DeviceVarlenCase {
    /// Uploads `case`'s packed inputs and offsets and allocates O and LSE.
    pub fn upload(stream: &Arc<CudaStream>, case: &HostVarlenCase) -> Result<DeviceVarlenCase> {
        let s = &case.spec.shape;
        let mut inputs = Vec::new();
        let mut descales = Vec::new();
        for e in &case.enc {
            inputs.push(
                stream
                    .clone_htod(&e.bytes)
                    .map_err(drv("uploading inputs"))?,
            );
            descales.push(match &e.descales {
                Some(d) => Some(stream.clone_htod(d).map_err(drv("uploading descales"))?),
                None => None,
            });
        }
        let to_i32 = |cu: &[usize]| -> Result<Vec<i32>> {
            cu.iter()
                .map(|&x| {
                    i32::try_from(x)
                        .map_err(|_| Error::InvalidInput(format!("offset {x} exceeds i32")))
                })
                .collect()
        };
        let host_cu = [to_i32(&s.cu_seqlens_q)?, to_i32(&s.cu_seqlens_k)?];
        let cu = [
            stream
                .clone_htod(&host_cu[0])
                .map_err(drv("uploading cu_seqlens_q"))?,
            stream
                .clone_htod(&host_cu[1])
                .map_err(drv("uploading cu_seqlens_k"))?,
        ];
        let o = stream
            .alloc_zeros::<u8>(
                s.total_q() * s.heads_q * s.head_dim * case.spec.precision.out().size(),
            )
            .map_err(drv("allocating O"))?;
        let lse = stream
            .alloc_zeros::<f32>(s.heads_q * s.total_q())
            .map_err(drv("allocating LSE"))?;
        Ok(DeviceVarlenCase {
            inputs: inputs
                .try_into()
                .map_err(|_| Error::InvalidInput("three inputs".into()))?,
            descales: descales
                .try_into()
                .map_err(|_| Error::InvalidInput("three descales".into()))?,
            cu,
            host_cu,
            o,
            lse,
        })
    }

    /// Poisons O and LSE with NaN, runs the varlen call, reads back: O packed as f32, LSE
    /// `[heads_q, total_q]`.
    pub fn run(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        case: &HostVarlenCase,
        params: AttnParams,
        opts: CallOptions,
    ) -> Result<RunOutput> {
        let s = &case.spec.shape;
        let out_t = case.spec.precision.out();
        poison(stream, &mut self.o, "poisoning O")?;
        poison(stream, &mut self.lse, "poisoning LSE")?;
        let (tq, tk, d) = (s.total_q(), s.total_k(), s.head_dim);
        let launched = {
            let [q, k, v] = &self.inputs;
            let st: &CudaStream = stream;
            let descale = |i: usize| -> Option<Descale<'_>> {
                self.descales[i]
                    .as_ref()
                    .map(|ds| Descale::new(VecRef::new(ds, st), case.descale_batch_stride(i)))
            };
            let a = AttentionVarlen::new(
                TensorRef::packed(q, st, case.enc[0].dtype, [tq, s.heads_q, d])?,
                TensorRef::packed(k, st, case.enc[1].dtype, [tk, s.heads_kv, d])?,
                TensorRef::packed(v, st, case.enc[2].dtype, [tk, s.heads_kv, d])?,
                TensorMut::packed(&mut self.o, st, out_t, [tq, s.heads_q, d])?,
                [IdxRef::new(&self.cu[0], st), IdxRef::new(&self.cu[1], st)],
                [s.max_seqlen_q(), s.max_seqlen_k()],
                params,
            )
            .with_lse(VecMut::new(&mut self.lse, st))
            .with_descales(descale(0), descale(1), descale(2));
            dev.attention_varlen(stream, &a, opts)?
        };
        let (o_bytes, lse) = read_output(stream, &self.o, &self.lse)?;
        Ok(RunOutput {
            o: decode_out(out_t, &o_bytes),
            lse,
            launched,
        })
    }

    /// Whether the inputs and offsets on the device still equal what was uploaded.
    pub fn inputs_unchanged(
        &self,
        stream: &Arc<CudaStream>,
        case: &HostVarlenCase,
    ) -> Result<bool> {
        for (d, e) in self.inputs.iter().zip(&case.enc) {
            if stream.clone_dtoh(d).map_err(drv("reading inputs back"))? != e.bytes {
                return Ok(false);
            }
        }
        for (d, h) in self.cu.iter().zip(&self.host_cu) {
            if &stream.clone_dtoh(d).map_err(drv("reading offsets back"))? != h {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A variable-length case with its keys in a paged cache (the decode family's
/// [`PagedAttentionVarlen`]): packed Q, K and V pools scattered by a [`PagedLayout`], the
/// block table, `seqlens_k` and `cu_seqlens_q`, O and LSE. The case's host reference applies
/// unchanged: the pages hold each sequence's packed keys.
pub struct DevicePagedVarlenCase {
    /// The cache's layout.
    pub layout: PagedLayout,
    q: CudaSlice<u8>,
    pools: [CudaSlice<u8>; 2],
    host_pools: [Vec<u8>; 2],
    descales: [Option<CudaSlice<f32>>; 2],
    /// cu_seqlens_q, block table, seqlens_k.
    idx: [CudaSlice<i32>; 3],
    host_idx: [Vec<i32>; 3],
    o: CudaSlice<u8>,
    lse: CudaSlice<f32>,
}

impl DevicePagedVarlenCase {
    /// Uploads `case` with its K and V scattered over pages of `page_size` tokens (`seed`
    /// orders the pages).
    pub fn upload(
        stream: &Arc<CudaStream>,
        case: &HostVarlenCase,
        page_size: usize,
        seed: u64,
    ) -> Result<DevicePagedVarlenCase> {
        let s = &case.spec.shape;
        let layout = PagedLayout::new(s, page_size, seed);
        let row = s.heads_kv * s.head_dim * case.enc[1].dtype.size();
        let host_pools = [
            layout.scatter(s, &case.enc[1].bytes, row),
            layout.scatter(s, &case.enc[2].bytes, row),
        ];
        let mut pools = Vec::new();
        for h in &host_pools {
            pools.push(stream.clone_htod(h).map_err(drv("uploading the pages"))?);
        }
        let mut descales = Vec::new();
        for e in &case.enc[1..] {
            descales.push(match &e.descales {
                Some(d) => Some(stream.clone_htod(d).map_err(drv("uploading descales"))?),
                None => None,
            });
        }
        let cu_q = s
            .cu_seqlens_q
            .iter()
            .map(|&x| {
                i32::try_from(x).map_err(|_| Error::InvalidInput(format!("offset {x} exceeds i32")))
            })
            .collect::<Result<Vec<i32>>>()?;
        let host_idx = [cu_q, layout.table.clone(), layout.seqlens_k.clone()];
        let mut idx = Vec::new();
        for h in &host_idx {
            idx.push(
                stream
                    .clone_htod(h)
                    .map_err(drv("uploading the offsets and table"))?,
            );
        }
        let q = stream
            .clone_htod(&case.enc[0].bytes)
            .map_err(drv("uploading Q"))?;
        let o = stream
            .alloc_zeros::<u8>(
                s.total_q() * s.heads_q * s.head_dim * case.spec.precision.out().size(),
            )
            .map_err(drv("allocating O"))?;
        let lse = stream
            .alloc_zeros::<f32>(s.heads_q * s.total_q())
            .map_err(drv("allocating LSE"))?;
        let three = |_| Error::InvalidInput("three index arrays".into());
        Ok(DevicePagedVarlenCase {
            layout,
            q,
            pools: pools
                .try_into()
                .map_err(|_| Error::InvalidInput("two pools".into()))?,
            host_pools,
            descales: descales
                .try_into()
                .map_err(|_| Error::InvalidInput("two descales".into()))?,
            idx: idx.try_into().map_err(three)?,
            host_idx,
            o,
            lse,
        })
    }

    /// Poisons O and LSE with NaN, runs [`Device::paged_attention_varlen`], reads back: O
    /// packed as f32, LSE `[heads_q, total_q]`.
    pub fn run(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        case: &HostVarlenCase,
        params: AttnParams,
        opts: CallOptions,
    ) -> Result<RunOutput> {
        let s = &case.spec.shape;
        let out_t = case.spec.precision.out();
        poison(stream, &mut self.o, "poisoning O")?;
        poison(stream, &mut self.lse, "poisoning LSE")?;
        let (tq, d) = (s.total_q(), s.head_dim);
        let l = &self.layout;
        let pool = [l.pages, l.page_size, s.heads_kv, d];
        let launched = {
            let st: &CudaStream = stream;
            let descale = |i: usize| -> Option<Descale<'_>> {
                self.descales[i - 1]
                    .as_ref()
                    .map(|ds| Descale::new(VecRef::new(ds, st), case.descale_batch_stride(i)))
            };
            let kv_t = case.enc[1].dtype;
            let [cu_q, table, lens] = &self.idx;
            let a = PagedAttentionVarlen::new(
                TensorRef::packed(&self.q, st, case.enc[0].dtype, [tq, s.heads_q, d])?,
                PagedKv::new(
                    TensorRef::contiguous(&self.pools[0], st, kv_t, pool, fp8_sdpa::Layout::Bshd)?,
                    TensorRef::contiguous(&self.pools[1], st, kv_t, pool, fp8_sdpa::Layout::Bshd)?,
                    IdxRef::new(table, st),
                    l.max_pages,
                    IdxRef::new(lens, st),
                ),
                TensorMut::packed(&mut self.o, st, out_t, [tq, s.heads_q, d])?,
                IdxRef::new(cu_q, st),
                s.max_seqlen_q(),
                params,
            )
            .with_lse(VecMut::new(&mut self.lse, st))
            .with_kv_descales(descale(1), descale(2));
            dev.paged_attention_varlen(stream, &a, opts)?
        };
        let (o_bytes, lse) = read_output(stream, &self.o, &self.lse)?;
        Ok(RunOutput {
            o: decode_out(out_t, &o_bytes),
            lse,
            launched,
        })
    }

    /// Whether Q, the pages, the offsets, the table and the lengths on the device still equal
    /// what was uploaded.
    pub fn inputs_unchanged(
        &self,
        stream: &Arc<CudaStream>,
        case: &HostVarlenCase,
    ) -> Result<bool> {
        if stream.clone_dtoh(&self.q).map_err(drv("reading Q back"))? != case.enc[0].bytes {
            return Ok(false);
        }
        for (d, h) in self.pools.iter().zip(&self.host_pools) {
            if &stream
                .clone_dtoh(d)
                .map_err(drv("reading the pages back"))?
                != h
            {
                return Ok(false);
            }
        }
        for (d, h) in self.idx.iter().zip(&self.host_idx) {
            if &stream
                .clone_dtoh(d)
                .map_err(drv("reading the table back"))?
                != h
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Decodes 16-bit output bytes to f32.
pub fn decode_out(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let words = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    match dtype {
        DType::F16 => words.map(|w| half::f16::from_bits(w).to_f32()).collect(),
        DType::Bf16 => words.map(|w| half::bf16::from_bits(w).to_f32()).collect(),
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        _ => Vec::new(),
    }
}

/// The judgement of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    /// O against the reference on the dequantized inputs.
    pub vs_dequantized: crate::metrics::ErrorStats,
    /// O against the reference on the unquantized inputs (FP8 paths, unit-variance data).
    pub vs_raw: Option<crate::metrics::ErrorStats>,
    /// LSE against the reference LSE.
    pub lse: crate::metrics::ErrorStats,
    /// Inputs unchanged after the run.
    pub inputs_unchanged: bool,
    /// Every failed gate, empty when the run passes.
    pub failures: Vec<String>,
}

/// LSE tolerances: fp32 row statistics on exactly represented scores leave ~1e-6 relative
/// error; these bounds are loose enough for that and tight enough for a dropped key.
pub const LSE_ATOL: f64 = 2e-3;
/// See [`LSE_ATOL`].
pub const LSE_RTOL: f64 = 2e-4;

/// The LSE bound for what a kernel computes: element `i` is bad when `|err| > atol +
/// rtol·|ref| + per_magnitude · score_magnitude[i]` ([`fp8_sdpa::reference::RefOutput::score_magnitude`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LseBound {
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
    /// Slack per unit of the row's score magnitude.
    pub per_magnitude: f64,
}

/// The LSE bound of a kernel: [`LSE_ATOL`] and [`LSE_RTOL`], except for the Hopper family's
/// full FP8 kernel, whose scores come from the 8-bit wgmma. Its additions keep 13 bits below
/// the largest exponent among a k-step's products and the accumulator, truncated (a CPU model
/// of them, example `wgmma_accumulation`, reproduces the LSE errors measured on verify's
/// outlier cases to three digits; perf-notes: verify's LSE bound). Two terms bound that: rtol
/// 2e-3 (scaled by √(D / 128) above D128, where a chain is twice as long) for partial sums up
/// to √D·|S|, as measured (0.8 on LSEs near 900, one query row and one key row in eight scaled
/// by 30); and 2^-13 of the row's score magnitude (the largest Σ|q·k|·scale), for rows whose
/// scores are small beside their products (signs cancelling), where the first term is no
/// bound: the model's worst error there is 2^-15 of that magnitude.
pub fn lse_tolerances(spec: &fp8_sdpa::variant::KernelSpec) -> LseBound {
    if crate::metrics::runs_8bit_wgmma(spec) {
        let d = f64::from(spec.head_dim.max(128));
        LseBound {
            atol: LSE_ATOL,
            rtol: 2e-3 * (d / 128.0).sqrt(),
            per_magnitude: 2f64.powi(-13),
        }
    } else {
        LseBound {
            atol: LSE_ATOL,
            rtol: LSE_RTOL,
            per_magnitude: 0.0,
        }
    }
}

/// Whether the seeds' gate (against the unquantized inputs) applies to a case: the seeds'
/// own regime, unit-variance data with every row attending to many keys (non-causal, at
/// least 128 keys). Where a row sees only a few keys its output is a few quantized values of
/// V, and E4M3's 3-bit mantissa errs by up to amax/32 there by construction: that error is
/// the format's, not the kernel's, so it is reported (`vs_raw`) but not gated.
pub fn seeds_gate_applies(spec: &crate::cases::CaseSpec) -> bool {
    spec.dist == crate::inputs::Distribution::Normal && !spec.causal && spec.shape.seq_kv >= 128
}

/// Judges a run against the references; `ref_raw` failures count only when `gate_raw`.
pub fn judge(
    precision: fp8_sdpa::dtype::Precision,
    out: &RunOutput,
    ref_deq: &fp8_sdpa::reference::RefOutput,
    ref_raw: Option<&fp8_sdpa::reference::RefOutput>,
    gate_raw: bool,
    inputs_unchanged: bool,
) -> Result<Verdict> {
    use crate::metrics::{compare_with_slack, Thresholds};
    let mut failures = Vec::new();
    let t = Thresholds::for_kernel(&out.launched.spec);
    let b = lse_tolerances(&out.launched.spec);
    // O's bound carries the same score-truncation term as the LSE's: a score error of
    // per_magnitude x the row's magnitude moves each key's weight by that factor, and O by at
    // most that times its slack (RefOutput::o_slack). Zero outside the 8-bit wgmma.
    let vs_dequantized = compare_with_slack(
        &out.o,
        &ref_deq.o,
        t.atol,
        t.rtol,
        b.per_magnitude,
        &ref_deq.o_slack,
    )?;
    if let Err(e) = t.check(&vs_dequantized) {
        failures.push(format!("vs dequantized reference: {e}"));
    }
    let vs_raw = match ref_raw {
        Some(r) => {
            let g = Thresholds::seeds_gate(precision);
            let s = g.compare(&out.o, &r.o)?;
            if let Err(e) = g.check(&s) {
                if gate_raw {
                    failures.push(format!("seeds' gate vs unquantized inputs: {e}"));
                }
            }
            Some(s)
        }
        None => None,
    };
    let lse = compare_with_slack(
        &out.lse,
        &ref_deq.lse,
        b.atol,
        b.rtol,
        b.per_magnitude,
        &ref_deq.score_magnitude,
    )?;
    if lse.bad > 0 {
        failures.push(format!(
            "LSE: {} bad of {} (max abs {:.3e}, {} non-finite mismatches)",
            lse.bad,
            lse.n,
            lse.max_abs,
            lse.nan_count + lse.special_mismatch
        ));
    }
    if !inputs_unchanged {
        failures.push("inputs were modified".into());
    }
    Ok(Verdict {
        vs_dequantized,
        vs_raw,
        lse,
        inputs_unchanged,
        failures,
    })
}
