//! What the four attention calls share: the arguments every call has ([`CallCommon`]: Q, O,
//! the optional LSE, the descales, scale and mask), the call's options and what it launched,
//! and the crate's helpers that turn a call into the kernels' parameter block. The dense,
//! varlen, paged and decode launches all import this module, and it imports none of them.

use super::abi::SdpaParams;
use super::tensor::{StreamId, TensorDesc, TensorMut, TensorRef, VecMut, VecRef};
use super::validate::{check_descale_values, CallDesc, DescaleDesc};
use crate::error::{Error, Result};
use crate::problem::{AttnParams, AttnShape};
use crate::variant::{KernelSpec, Variant};
use cudarc::driver::CudaStream;

/// A descale vector: fp32 values and their batch stride (0 = one per head, broadcast over the
/// batch; `heads` = one per (batch, head)).
///
/// ```no_run
/// # fn main() -> fp8_sdpa::Result<()> {
/// use fp8_sdpa::runtime::{Descale, Device, VecRef};
/// let dev = Device::open(0)?;
/// let stream = dev.new_stream()?;
/// // One descale per kv head (8 heads), shared by every sequence of the batch.
/// let values = stream.clone_htod(&[0.5f32; 8]).unwrap();
/// let k_descale = Descale::per_head(VecRef::new(&values, &stream));
/// // The same, with the batch stride spelled out; `heads` would give one per (batch, head).
/// let v_descale = Descale::new(VecRef::new(&values, &stream), 0);
/// # let _ = (k_descale, v_descale);
/// # Ok(())
/// # }
/// ```
///
/// `#[non_exhaustive]` (a descale may gain a granularity): outside the crate it is built with
/// [`Descale::new`] or [`Descale::per_head`], not a struct literal:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::{Descale, VecRef};
/// fn descale(values: VecRef<'_>) -> Descale<'_> {
///     Descale { values, batch_stride: 0 }
/// }
/// ```
#[non_exhaustive]
pub struct Descale<'a> {
    /// The values.
    pub values: VecRef<'a>,
    /// 0 or the tensor's head count.
    pub batch_stride: usize,
}

impl<'a> Descale<'a> {
    /// `values` with batch stride `batch_stride`: 0 for one value per head, shared by every
    /// sequence of the batch, or the tensor's head count for one per (batch, head).
    pub fn new(values: VecRef<'a>, batch_stride: usize) -> Descale<'a> {
        Descale {
            values,
            batch_stride,
        }
    }

    /// One value per head, shared by every sequence of the batch (batch stride 0).
    pub fn per_head(values: VecRef<'a>) -> Descale<'a> {
        Descale::new(values, 0)
    }
}

/// The arguments every attention call has, embedded as `common` in [`super::Attention`],
/// [`super::AttentionVarlen`], [`super::PagedAttention`] and
/// [`super::PagedAttentionVarlen`]. The calls' constructors fill it (no LSE, no descales);
/// their `with_lse` and `with_descales` / `with_kv_descales` add the optional parts, and take
/// `Option`s where a caller decides at run time:
///
/// ```no_run
/// # fn main() -> fp8_sdpa::Result<()> {
/// use fp8_sdpa::runtime::{Attention, Device, TensorMut, TensorRef, VecMut};
/// use fp8_sdpa::{AttnParams, DType, Layout};
/// let dev = Device::open(0)?;
/// let stream = dev.new_stream()?;
/// let shape = [1, 256, 8, 64];
/// let n: usize = shape.iter().product();
/// let (q, k, v) = (
///     stream.alloc_zeros::<u16>(n).unwrap(),
///     stream.alloc_zeros::<u16>(n).unwrap(),
///     stream.alloc_zeros::<u16>(n).unwrap(),
/// );
/// let mut o = stream.alloc_zeros::<u16>(n).unwrap();
/// let mut lse_buf = stream.alloc_zeros::<f32>(8 * 256).unwrap();
/// let want_lse = true;
/// let call = Attention::new(
///     TensorRef::contiguous(&q, &stream, DType::F16, shape, Layout::Bshd)?,
///     TensorRef::contiguous(&k, &stream, DType::F16, shape, Layout::Bshd)?,
///     TensorRef::contiguous(&v, &stream, DType::F16, shape, Layout::Bshd)?,
///     TensorMut::contiguous(&mut o, &stream, DType::F16, shape, Layout::Bshd)?,
///     AttnParams::default_for(64, false),
/// )
/// .with_lse(want_lse.then(|| VecMut::new(&mut lse_buf, &stream)))
/// .with_descales(None, None, None);
/// assert!(call.common.lse.is_some());
/// # Ok(())
/// # }
/// ```
///
/// `#[non_exhaustive]`, like the four calls, so that an argument every call has (ALiBi
/// slopes, say) can be added without breaking callers; the fields stay public to read and to
/// assign. Outside the crate it is built with [`CallCommon::new`] and its `with_*` setters,
/// not a struct literal:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::{CallCommon, TensorMut, TensorRef};
/// use fp8_sdpa::AttnParams;
/// fn common<'a>(q: TensorRef<'a>, o: TensorMut<'a>, params: AttnParams) -> CallCommon<'a> {
///     CallCommon { q, o, lse: None, q_descale: None, k_descale: None, v_descale: None, params }
/// }
/// ```
#[non_exhaustive]
pub struct CallCommon<'a> {
    /// Query: `[batch, seq_q, heads_q, dim]`, or packed `[total_q, heads_q, dim]` in a varlen
    /// call ([`TensorRef::packed`]).
    pub q: TensorRef<'a>,
    /// Output, shaped (or packed) like Q; every row is written.
    pub o: TensorMut<'a>,
    /// Optional log-sum-exp output, fp32, natural log: `[batch, heads_q, seq_q]`, or
    /// `[heads_q, total_q]` in a varlen call.
    pub lse: Option<VecMut<'a>>,
    /// Descale of Q (E4M3 or simulated-FP8 Q only; a paged call's Q is fp16/bf16 and takes
    /// none).
    pub q_descale: Option<Descale<'a>>,
    /// Descale of K (E4M3 or simulated-FP8 K only): per kv head, or per (sequence, kv head).
    pub k_descale: Option<Descale<'a>>,
    /// Descale of V, as K's.
    pub v_descale: Option<Descale<'a>>,
    /// Scale and mask (causal aligns each sequence bottom-right where the key count differs
    /// from the query count).
    pub params: AttnParams,
}

impl<'a> CallCommon<'a> {
    /// Q, O and the parameters; no LSE, no descales.
    pub fn new(q: TensorRef<'a>, o: TensorMut<'a>, params: AttnParams) -> CallCommon<'a> {
        CallCommon {
            q,
            o,
            lse: None,
            q_descale: None,
            k_descale: None,
            v_descale: None,
            params,
        }
    }

    /// Also writes the log-sum-exp (fp32, natural log) to `lse`; takes a [`VecMut`] or an
    /// `Option` of one (`None` writes none).
    #[must_use]
    pub fn with_lse(mut self, lse: impl Into<Option<VecMut<'a>>>) -> Self {
        self.lse = lse.into();
        self
    }

    /// Sets the descales of Q, K and V: each present exactly where its tensor is E4M3 or
    /// simulated FP8 (validation refuses a missing or extra one).
    #[must_use]
    pub fn with_descales(
        mut self,
        q: Option<Descale<'a>>,
        k: Option<Descale<'a>>,
        v: Option<Descale<'a>>,
    ) -> Self {
        self.q_descale = q;
        self.k_descale = k;
        self.v_descale = v;
        self
    }

    /// The three descales, Q's first.
    pub(crate) fn descales(&self) -> [&Option<Descale<'a>>; 3] {
        [&self.q_descale, &self.k_descale, &self.v_descale]
    }

    /// The descales with their names, as the on-device check reports them.
    pub(crate) fn named_descales(&self) -> [(&'static str, &Option<Descale<'a>>); 3] {
        [
            ("Q", &self.q_descale),
            ("K", &self.k_descale),
            ("V", &self.v_descale),
        ]
    }

    /// Every borrow of a call with the stream it was made on: `borrows` (the tensors and index
    /// arrays, named, Q and O among them in the call's order), then the LSE and the descales
    /// of Q, K and V where present. An iterator, so the check costs a call no allocation.
    pub(crate) fn streams<const N: usize>(
        &self,
        borrows: [(&'static str, StreamId); N],
    ) -> impl Iterator<Item = (&'static str, StreamId)> + '_ {
        let names = ["Q's descale", "K's descale", "V's descale"];
        borrows
            .into_iter()
            .chain(self.lse.iter().map(|l| ("LSE", l.stream)))
            .chain(
                names
                    .into_iter()
                    .zip(self.descales())
                    .filter_map(|(n, d)| d.as_ref().map(|d| (n, d.values.stream))),
            )
    }

    /// The validation view of the call, K and V described by `k` and `v` (the tensors of a
    /// dense or varlen call, the page pools of a paged one).
    pub(crate) fn desc(&self, k: TensorDesc, v: TensorDesc) -> CallDesc {
        CallDesc {
            q: self.q.desc,
            k,
            v,
            o: self.o.desc,
            lse: self.lse.as_ref().map(|l| (l.ptr, l.len)),
            descales: self.descales().map(desc),
            params: self.params,
        }
    }
}

/// The builder methods every call has, forwarding to its [`CallCommon`].
macro_rules! common_builders {
    ($call:ident) => {
        impl<'a> $call<'a> {
            /// Also writes the log-sum-exp (fp32, natural log) to `lse`; takes a
            /// [`VecMut`](crate::runtime::VecMut) or an `Option` of one (`None` writes none).
            #[must_use]
            pub fn with_lse(mut self, lse: impl Into<Option<$crate::runtime::VecMut<'a>>>) -> Self {
                self.common = self.common.with_lse(lse);
                self
            }
        }
    };
    ($call:ident, qkv) => {
        common_builders!($call);
        impl<'a> $call<'a> {
            /// Sets the descales of Q, K and V: each present exactly where its tensor is E4M3
            /// or simulated FP8 (validation refuses a missing or extra one).
            #[must_use]
            pub fn with_descales(
                mut self,
                q: Option<$crate::runtime::Descale<'a>>,
                k: Option<$crate::runtime::Descale<'a>>,
                v: Option<$crate::runtime::Descale<'a>>,
            ) -> Self {
                self.common = self.common.with_descales(q, k, v);
                self
            }
        }
    };
    ($call:ident, kv) => {
        common_builders!($call);
        impl<'a> $call<'a> {
            /// Sets the descales of an E4M3 cache's K and V (Q is fp16/bf16 and takes none).
            #[must_use]
            pub fn with_kv_descales(
                mut self,
                k: Option<$crate::runtime::Descale<'a>>,
                v: Option<$crate::runtime::Descale<'a>>,
            ) -> Self {
                self.common = self.common.with_descales(None, k, v);
                self
            }
        }
    };
}
pub(crate) use common_builders;

/// Which kernel runs.
///
/// ```
/// use fp8_sdpa::runtime::{CallOptions, KernelChoice};
/// use fp8_sdpa::Variant;
/// // A variant by its key (as `Launched::spec` reports one); the call validates it against
/// // the problem and the device.
/// let v: Variant = "portable.m128.n32.w4.s2.b2.ctelx".parse()?;
/// let opts = CallOptions::default().with_kernel(KernelChoice::Variant(v));
/// # let _ = opts;
/// # Ok::<(), fp8_sdpa::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelChoice {
    /// The shipped default for the device, precision, head dim and mask.
    #[default]
    Auto,
    /// This variant (validated against the problem and device).
    Variant(Variant),
}

/// Options of a call: [`CallOptions::default`] (the shipped kernel, values checked, the whole
/// GPU), adjusted with the `with_*` setters.
///
/// ```
/// use fp8_sdpa::runtime::{CallOptions, KernelChoice};
/// // A benchmark loop: the first call checks the descales, later ones skip the read-back.
/// let checked = CallOptions::default();
/// let fast = checked.with_check_descales(false);
/// assert_eq!(fast.kernel, KernelChoice::Auto);
/// assert_eq!(fast.with_sm_margin(8).usable_sms(132), 124);
/// ```
///
/// `#[non_exhaustive]`, so that options can be added without breaking callers; a struct
/// literal, even with `..CallOptions::default()`, does not compile outside the crate:
///
/// ```compile_fail,E0639
/// use fp8_sdpa::runtime::CallOptions;
/// let fast = CallOptions { check_descales: false, ..CallOptions::default() };
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    /// Which kernel.
    pub kernel: KernelChoice,
    /// Read the descales back and check they are finite and > 0 (synchronizes the stream).
    /// On by default; benchmarks turn it off after a first checked call. Paged calls read
    /// their block table and lengths back with it, varlen calls their offsets
    /// ([`super::Device::attention_varlen`]).
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
    /// These options with kernel choice `kernel`.
    #[must_use]
    pub const fn with_kernel(self, kernel: KernelChoice) -> CallOptions {
        CallOptions { kernel, ..self }
    }

    /// These options with the read-back check of descales, offsets and tables on or off
    /// ([`CallOptions::check_descales`] says what off trusts).
    #[must_use]
    pub const fn with_check_descales(self, check_descales: bool) -> CallOptions {
        CallOptions {
            check_descales,
            ..self
        }
    }

    /// These options leaving `sm_margin` SMs to kernels on other streams
    /// ([`CallOptions::sm_margin`]).
    #[must_use]
    pub const fn with_sm_margin(self, sm_margin: u32) -> CallOptions {
        CallOptions { sm_margin, ..self }
    }

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

/// What was launched: the kernel (its [`KernelSpec::key`] names it) and its launch
/// geometry. With the decode family's split keys, a merge kernel follows on the stream.
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

/// The validation view of an optional descale.
pub(crate) fn desc(d: &Option<Descale<'_>>) -> Option<DescaleDesc> {
    d.as_ref().map(|d| DescaleDesc {
        ptr: d.values.ptr,
        len: d.values.len,
        batch_stride: d.batch_stride,
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
    shape: &AttnShape,
    descales: [&Option<Descale<'_>>; 3],
) -> Result<SdpaParams> {
    // Validation proved every value below fits; a failure here is a validation bug, reported
    // as an error rather than a wrapped value.
    let narrow = |x: usize, what: &str| {
        i32::try_from(x)
            .map_err(|_| Error::InvalidInput(format!("{what} = {x} does not fit the kernels' i32")))
    };
    let s = |t: &TensorDesc| -> Result<[i64; 3]> {
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
