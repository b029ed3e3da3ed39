//! The attention call: validate everything, pick a kernel, launch it on the caller's stream.

use super::abi::SdpaParams;
use super::call::{check_descales, common_builders, sdpa_params, CallCommon};
use super::device::{Device, LoadedKernel};
use super::launch;
use super::tensor::{check_streams, StreamId, TensorMut, TensorRef};
use super::tma::{self, HopperMaps};
use super::validate::{validate, CallDesc, Validated};
use crate::dispatch;
use crate::error::{Error, Result};
use crate::kernels::geometry;
use crate::problem::AttnParams;
use crate::variant::{Family, KernelSpec};
use cudarc::driver::{CudaStream, LaunchConfig};
use std::ffi::c_void;

// Their old home: `runtime::attention::KernelChoice` and the rest still resolve (documented
// at `runtime`).
#[doc(hidden)]
pub use super::call::{CallOptions, Descale, KernelChoice, Launched};

/// One attention call's tensors and parameters: Q `[batch, seq_q, heads_q, dim]` against K
/// and V `[batch, seq_kv, heads_kv, dim]` (grouped-query when `heads_q` is a multiple of
/// `heads_kv`), into O shaped like Q.
///
/// ```no_run
/// # fn main() -> fp8_sdpa::Result<()> {
/// use fp8_sdpa::runtime::{Attention, CallOptions, Device, TensorMut, TensorRef, VecMut};
/// use fp8_sdpa::{AttnParams, DType, Layout};
/// let dev = Device::open(0)?;
/// let stream = dev.new_stream()?;
/// let (batch, seq, heads_q, heads_kv, dim) = (2, 1024, 32, 8, 128);
/// let q = stream.alloc_zeros::<u16>(batch * seq * heads_q * dim).unwrap(); // f16 bits
/// let k = stream.alloc_zeros::<u16>(batch * seq * heads_kv * dim).unwrap();
/// let v = stream.alloc_zeros::<u16>(batch * seq * heads_kv * dim).unwrap();
/// let mut o = stream.alloc_zeros::<u16>(batch * seq * heads_q * dim).unwrap();
/// let mut lse = stream.alloc_zeros::<f32>(batch * heads_q * seq).unwrap();
/// let (qd, kd) = ([batch, seq, heads_q, dim], [batch, seq, heads_kv, dim]);
/// let call = Attention::new(
///     TensorRef::contiguous(&q, &stream, DType::F16, qd, Layout::Bshd)?,
///     TensorRef::contiguous(&k, &stream, DType::F16, kd, Layout::Bshd)?,
///     TensorRef::contiguous(&v, &stream, DType::F16, kd, Layout::Bshd)?,
///     TensorMut::contiguous(&mut o, &stream, DType::F16, qd, Layout::Bshd)?,
///     AttnParams::default_for(dim, true),
/// )
/// .with_lse(VecMut::new(&mut lse, &stream));
/// let launched = dev.attention(&stream, &call, CallOptions::default())?;
/// println!("ran {}", launched.spec.key());
/// # Ok(())
/// # }
/// ```
///
/// E4M3 or simulated-FP8 inputs take a descale each ([`Attention::with_descales`]).
///
/// `#[non_exhaustive]`, so that arguments can be added without breaking callers: outside the
/// crate a call is built with [`Attention::new`] and its `with_*` setters (the fields stay
/// public to read and to assign), not a struct literal:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::{Attention, CallCommon, TensorRef};
/// fn call<'a>(common: CallCommon<'a>, k: TensorRef<'a>, v: TensorRef<'a>) -> Attention<'a> {
///     Attention { common, k, v }
/// }
/// ```
#[non_exhaustive]
pub struct Attention<'a> {
    /// Q, O, the LSE, the descales and the parameters.
    pub common: CallCommon<'a>,
    /// Keys `[batch, seq_kv, heads_kv, dim]`.
    pub k: TensorRef<'a>,
    /// Values, shaped like K.
    pub v: TensorRef<'a>,
}

impl<'a> Attention<'a> {
    /// A call of `q` against `k` and `v` into `o`, without LSE or descales.
    pub fn new(
        q: TensorRef<'a>,
        k: TensorRef<'a>,
        v: TensorRef<'a>,
        o: TensorMut<'a>,
        params: AttnParams,
    ) -> Attention<'a> {
        Attention {
            common: CallCommon::new(q, o, params),
            k,
            v,
        }
    }
}

common_builders!(Attention, qkv);

impl Attention<'_> {
    /// Every borrow of the call with the stream it was made on.
    pub(crate) fn streams(&self) -> impl Iterator<Item = (&'static str, StreamId)> + '_ {
        let c = &self.common;
        c.streams([c.q.on("Q"), self.k.on("K"), self.v.on("V"), c.o.on("O")])
    }

    /// The validation view of this call.
    pub(crate) fn describe(&self) -> CallDesc {
        self.common.desc(self.k.desc, self.v.desc)
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
            check_descales(stream, a.common.named_descales())?;
        }
        let variant = match opts.kernel {
            KernelChoice::Auto => dispatch::choose(
                self.info().arch,
                precision,
                &shape,
                a.common.params.causal,
                sm_count,
            )?,
            KernelChoice::Variant(v) => v,
        };
        let spec = KernelSpec {
            variant,
            precision,
            head_dim: shape.head_dim as u32,
            causal: a.common.params.causal,
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
        let params = sdpa_params(&call, &shape, a.common.descales())?;
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
