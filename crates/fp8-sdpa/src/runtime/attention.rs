//! The attention call: validate everything, pick a kernel, launch it on the caller's stream.

use super::abi::SdpaParams;
use super::device::{Device, LoadedKernel};
use super::launch;
use super::tensor::{check_streams, StreamId, TensorMut, TensorRef, VecMut, VecRef};
use super::tma::{self, HopperMaps};
use super::validate::{check_descale_values, validate, CallDesc, DescaleDesc, Validated};
use crate::dispatch;
use crate::error::{Error, Result};
use crate::kernels::geometry;
use crate::problem::AttnParams;
use crate::variant::{Family, KernelSpec, Variant};
use cudarc::driver::{CudaStream, LaunchConfig};
use std::ffi::c_void;

/// A descale vector: fp32 values and their batch stride (0 = one per head, broadcast over the
/// batch; `heads` = one per (batch, head)).
pub struct Descale<'a> {
    /// The values.
    pub values: VecRef<'a>,
    /// 0 or the tensor's head count.
    pub batch_stride: usize,
}

/// One attention call's tensors and parameters.
pub struct Attention<'a> {
    /// Query `[batch, seq_q, heads_q, dim]`.
    pub q: TensorRef<'a>,
    /// Keys `[batch, seq_kv, heads_kv, dim]`.
    pub k: TensorRef<'a>,
    /// Values, shaped like K.
    pub v: TensorRef<'a>,
    /// Output, shaped like Q; fully written.
    pub o: TensorMut<'a>,
    /// Optional log-sum-exp output, fp32 `[batch, heads_q, seq_q]`, natural log.
    pub lse: Option<VecMut<'a>>,
    /// Descale of Q (E4M3 or simulated-FP8 Q only).
    pub q_descale: Option<Descale<'a>>,
    /// Descale of K (E4M3 or simulated-FP8 K only).
    pub k_descale: Option<Descale<'a>>,
    /// Descale of V (E4M3 or simulated-FP8 V only).
    pub v_descale: Option<Descale<'a>>,
    /// Scale and mask.
    pub params: AttnParams,
}

/// Which kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelChoice {
    /// The shipped default for the device, precision, head dim and mask.
    #[default]
    Auto,
    /// This variant (validated against the problem and device).
    Variant(Variant),
}

/// Options of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOptions {
    /// Which kernel.
    pub kernel: KernelChoice,
    /// Read the descales back and check they are finite and > 0 (synchronizes the stream).
    /// On by default; benchmarks turn it off after a first checked call. Paged calls read
    /// their block table and lengths back with it, varlen calls their offsets
    /// ([`Device::attention_varlen`]).
    ///
    /// Off, the call trusts those values for correctness but not for memory safety: a bad
    /// descale scales the output wrongly; varlen offsets are clamped to the packed tensors; a
    /// paged length is clamped to `0..=max_pages * page_size` and every block-table entry the
    /// kernel uses to `0..pages` (an entry outside it reads the pools' last page). So bad
    /// values give wrong numbers, never a read or write outside the tensors, the table or the
    /// offset arrays.
    pub check_descales: bool,
    /// SMs to leave to kernels running beside this call on other streams, such as NCCL's
    /// transfers in [`crate::cp`]. A persistent kernel's blocks walk a fixed list of tiles, so
    /// one block that cannot start while another kernel holds its SM delays the whole call
    /// until that kernel ends; with a margin the grid is sized for `sm_count - sm_margin`
    /// SMs (at least one). 0 (the default) sizes it for the whole GPU.
    pub sm_margin: u32,
}

impl CallOptions {
    /// The SMs a call sizes its grid for on a device of `sm_count`: all but `sm_margin`, and
    /// at least one.
    pub fn usable_sms(&self, sm_count: u32) -> u32 {
        sm_count.saturating_sub(self.sm_margin).max(1)
    }
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            kernel: KernelChoice::Auto,
            check_descales: true,
            sm_margin: 0,
        }
    }
}

/// What was launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    /// The spec.
    pub spec: KernelSpec,
    /// Grid.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory bytes.
    pub smem: u32,
}

/// Every borrow of a call with the stream it was made on: `borrows` (the tensors and index
/// arrays, named), then the LSE and the descales of Q, K and V where present. An iterator, so
/// the check costs a call no allocation.
pub(crate) fn call_streams<'s, const N: usize>(
    borrows: [(&'static str, StreamId); N],
    lse: &'s Option<VecMut<'s>>,
    descales: [&'s Option<Descale<'s>>; 3],
) -> impl Iterator<Item = (&'static str, StreamId)> + 's {
    let names = ["Q's descale", "K's descale", "V's descale"];
    borrows
        .into_iter()
        .chain(lse.iter().map(|l| ("LSE", l.stream)))
        .chain(
            names
                .into_iter()
                .zip(descales)
                .filter_map(|(n, d)| d.as_ref().map(|d| (n, d.values.stream))),
        )
}

/// The validation view of an optional descale.
pub(crate) fn desc(d: &Option<Descale<'_>>) -> Option<DescaleDesc> {
    d.as_ref().map(|d| DescaleDesc {
        ptr: d.values.ptr,
        len: d.values.len,
        batch_stride: d.batch_stride,
    })
}

/// The validation view of a call's tensors, LSE, descales and parameters (dense and varlen
/// calls alike).
pub(crate) fn call_desc(
    [q, k, v]: [&TensorRef<'_>; 3],
    o: &TensorMut<'_>,
    lse: &Option<VecMut<'_>>,
    descales: [&Option<Descale<'_>>; 3],
    params: AttnParams,
) -> CallDesc {
    CallDesc {
        q: q.desc,
        k: k.desc,
        v: v.desc,
        o: o.desc,
        lse: lse.as_ref().map(|l| (l.ptr, l.len)),
        descales: descales.map(desc),
        params,
    }
}

impl Attention<'_> {
    /// Every borrow of the call with the stream it was made on.
    pub(crate) fn streams(&self) -> impl Iterator<Item = (&'static str, StreamId)> + '_ {
        call_streams(
            [
                self.q.on("Q"),
                self.k.on("K"),
                self.v.on("V"),
                self.o.on("O"),
            ],
            &self.lse,
            [&self.q_descale, &self.k_descale, &self.v_descale],
        )
    }

    /// The validation view of this call.
    pub fn describe(&self) -> CallDesc {
        call_desc(
            [&self.q, &self.k, &self.v],
            &self.o,
            &self.lse,
            [&self.q_descale, &self.k_descale, &self.v_descale],
            self.params,
        )
    }
}

impl Device {
    /// Validates `a`, picks the kernel and launches it on `stream`. Returns once the launch is
    /// queued; the output is ready when the stream reaches it. Every tensor of `a` must have
    /// been borrowed on `stream` ([`super::tensor`]'s "Streams").
    pub fn attention(
        &self,
        stream: &CudaStream,
        a: &Attention<'_>,
        opts: CallOptions,
    ) -> Result<Launched> {
        check_streams(stream, a.streams())?;
        let call = a.describe();
        let Validated { precision, shape } = validate(&call)?;
        let sm_count = opts.usable_sms(self.info().sm_count);
        if opts.check_descales {
            check_descales(
                stream,
                [
                    ("Q", &a.q_descale),
                    ("K", &a.k_descale),
                    ("V", &a.v_descale),
                ],
            )?;
        }
        let variant = match opts.kernel {
            KernelChoice::Auto => dispatch::choose(
                self.info().arch,
                precision,
                &shape,
                a.params.causal,
                sm_count,
            )?,
            KernelChoice::Variant(v) => v,
        };
        let spec = KernelSpec {
            variant,
            precision,
            head_dim: shape.head_dim as u32,
            causal: a.params.causal,
        };
        spec.validate(self.info().arch)?;
        let kernel = self.kernel(&spec)?;
        let g = geometry::grid(&spec, &shape, sm_count, self.info().l2_bytes);
        if g[0] > i32::MAX as u64 || g[1] > 65535 || g[2] > 65535 {
            // Causal portable grids are (heads_q, G, sections · m-blocks) (geometry.rs), with
            // G grown until z fits; only m-blocks alone past 65535 (seq_q too long) exceed it.
            let fix = if spec.causal && g[2] > 65535 && spec.variant.family == Family::Portable {
                let rows = geometry::rows_per_work(&spec);
                format!(
                    "causal seq_q {} needs {} blocks of {} query rows (at most 65535); split the \
                     queries into chunks of at most {} rows, each with the keys up to its last \
                     row (bottom-right causal)",
                    shape.seq_q,
                    g[2],
                    rows,
                    65535 * rows
                )
            } else {
                "split the batch".to_string()
            };
            return Err(Error::InvalidInput(format!(
                "grid {g:?} exceeds the device's launch limits; {fix}"
            )));
        }
        let grid = [g[0] as u32, g[1] as u32, g[2] as u32];
        let params = sdpa_params(&call, &shape, [&a.q_descale, &a.k_descale, &a.v_descale])?;
        if spec.variant.family == Family::Decode {
            return super::decode::launch(stream, &kernel, &spec, &shape, &params, None, sm_count);
        }
        // SAFETY: every pointer in `params` was validated to cover the shapes and strides the
        // kernel reads and writes, and the borrowed slices outlive the queued launch through
        // `a`'s guards.
        unsafe { launch_sdpa(stream, &kernel, spec, &call, grid, &params) }
    }
}

/// Launches a portable or Hopper kernel on `grid` with `params` and, for the Hopper family,
/// Q, K, V and O's TMA tensor maps (runtime/tma.rs), built from `call`'s descriptions.
///
/// # Safety
/// `params` must mirror the kernel's by-value SdpaParams (layout test in abi.rs) and describe
/// memory the kernel may read and write for the whole launch: every pointer validated to cover
/// what the kernel touches for `spec` and `grid`, and alive until the launch completes.
pub(super) unsafe fn launch_sdpa(
    stream: &CudaStream,
    kernel: &LoadedKernel,
    spec: KernelSpec,
    call: &CallDesc,
    grid: [u32; 3],
    params: &SdpaParams,
) -> Result<Launched> {
    let cfg = LaunchConfig {
        grid_dim: (grid[0], grid[1], grid[2]),
        block_dim: (spec.variant.threads(), 1, 1),
        shared_mem_bytes: spec.dynamic_smem_bytes(),
    };
    let maps = if spec.variant.family == Family::Hopper {
        Some(HopperMaps {
            q: tma::encode("Q", &call.q, spec.variant.tile_m)?,
            k: tma::encode("K", &call.k, spec.variant.tile_n)?,
            v: tma::encode("V", &call.v, spec.variant.tile_n)?,
            o: tma::encode("O", &call.o, 64)?,
        })
    } else {
        None
    };
    // The kernel's parameters: SdpaParams, then (Hopper) the tensor maps.
    let mut args: [*mut c_void; 2] = [
        params as *const SdpaParams as *mut c_void,
        maps.as_ref().map_or(std::ptr::null_mut(), |m| {
            m as *const HopperMaps as *mut c_void
        }),
    ];
    let n_args = if maps.is_some() { 2 } else { 1 };
    // The Hopper kernels wait for the work ahead before touching memory (griddep_wait), so
    // they launch as programmatic dependents: their set-up overlaps that work's tail.
    let pdl = spec.variant.family == Family::Hopper;
    // SAFETY: the caller's contract (above); `maps` mirrors the Hopper kernels' HopperMaps, and
    // both values live until the call returns (the driver copies the parameters).
    unsafe { launch::launch(stream, &kernel.function, cfg, &mut args[..n_args], pdl) }
        .map_err(Error::driver(format!("launching {}", spec.key())))?;
    Ok(Launched {
        spec,
        grid,
        block: spec.variant.threads(),
        smem: spec.dynamic_smem_bytes(),
    })
}

/// Reads descales back and checks they are finite and > 0 (synchronizes the stream).
pub(crate) fn check_descales(
    stream: &CudaStream,
    descales: [(&str, &Option<Descale<'_>>); 3],
) -> Result<()> {
    for (name, d) in descales {
        if let Some(d) = d {
            let host =
                read_back::<f32>(stream, d.values.ptr, d.values.len, "reading descales back")?;
            check_descale_values(name, &host)?;
        }
    }
    Ok(())
}

/// Copies `len` elements at device address `ptr` to the host (synchronizes the stream).
pub(crate) fn read_back<T: Default + Clone + cudarc::driver::DeviceRepr>(
    stream: &CudaStream,
    ptr: u64,
    len: usize,
    what: &'static str,
) -> Result<Vec<T>> {
    let mut host = vec![T::default(); len];
    // SAFETY: `host` holds `len` elements; the pointer is a live device buffer of at least
    // `len` elements (a borrowed VecRef or IdxRef); we synchronize before reading.
    unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut host, ptr, stream.cu_stream()) }
        .map_err(Error::driver(what))?;
    stream.synchronize().map_err(Error::driver(what))?;
    Ok(host)
}

/// The kernels' parameter block for a validated call.
pub(crate) fn sdpa_params(
    call: &CallDesc,
    shape: &crate::problem::AttnShape,
    descales: [&Option<Descale<'_>>; 3],
) -> Result<SdpaParams> {
    // Validation proved every value below fits; a failure here is a validation bug, reported
    // as an error rather than a wrapped value.
    let narrow = |x: usize, what: &str| {
        i32::try_from(x)
            .map_err(|_| Error::InvalidInput(format!("{what} = {x} does not fit the kernels' i32")))
    };
    let s = |t: &super::tensor::TensorDesc| -> Result<[i64; 3]> {
        let w = |i: usize| {
            i64::try_from(t.strides[i]).map_err(|_| {
                Error::InvalidInput(format!("stride {} does not fit an i64", t.strides[i]))
            })
        };
        Ok([w(0)?, w(1)?, w(2)?])
    };
    let (qs, ks, vs, os) = (s(&call.q)?, s(&call.k)?, s(&call.v)?, s(&call.o)?);
    let ds = |d: &Option<Descale<'_>>| -> Result<(u64, i32)> {
        d.as_ref().map_or(Ok((0, 0)), |d| {
            Ok((
                d.values.ptr,
                narrow(d.batch_stride, "a descale batch stride")?,
            ))
        })
    };
    let params = SdpaParams {
        q: call.q.ptr,
        k: call.k.ptr,
        v: call.v.ptr,
        o: call.o.ptr,
        lse: call.lse.map_or(0, |l| l.0),
        q_descale: ds(descales[0])?.0,
        k_descale: ds(descales[1])?.0,
        v_descale: ds(descales[2])?.0,
        q_stride_b: qs[0],
        q_stride_s: qs[1],
        q_stride_h: qs[2],
        k_stride_b: ks[0],
        k_stride_s: ks[1],
        k_stride_h: ks[2],
        v_stride_b: vs[0],
        v_stride_s: vs[1],
        v_stride_h: vs[2],
        o_stride_b: os[0],
        o_stride_s: os[1],
        o_stride_h: os[2],
        batch: narrow(shape.batch, "batch")?,
        seq_q: narrow(shape.seq_q, "seq_q")?,
        seq_kv: narrow(shape.seq_kv, "seq_kv")?,
        heads_q: narrow(shape.heads_q, "heads_q")?,
        heads_kv: narrow(shape.heads_kv, "heads_kv")?,
        q_descale_stride_b: ds(descales[0])?.1,
        kv_descale_stride_b: ds(descales[1])?.1,
        scale: call.params.scale,
        scale_log2: call.params.scale * std::f32::consts::LOG2_E,
        // Dense: no sequence offsets (a varlen call sets them: runtime/varlen.rs).
        cu_seqlens_q: 0,
        cu_seqlens_k: 0,
        total_q: 0,
        total_k: 0,
    };
    if descales[1].as_ref().map(|d| d.batch_stride) != descales[2].as_ref().map(|d| d.batch_stride)
    {
        return Err(Error::InvalidInput(
            "K and V descales must have the same batch stride".into(),
        ));
    }
    Ok(params)
}
