//! `flash_attn_varlen` on CUDA: one `CustomOp3` over packed Q, K and V, with the cumulative
//! offsets held as op fields (as candle-flash-attn holds them), launched through fp8-sdpa's
//! `Device::attention_varlen` on candle's stream.

use super::{lib_err, sdpa_device, Held};
use crate::check::{err, varlen_err, VarlenDims};
use candle_core::cuda::cudarc::driver::{CudaSlice, CudaView, DeviceRepr};
use candle_core::cuda::{CudaDType, CudaDevice, CudaStorage, CudaStorageSlice as S};
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use fp8_sdpa::runtime::{AttentionVarlen, CallOptions, IdxRef, TensorMut, TensorRef};
use fp8_sdpa::{AttnParams, DType as SdpaDType};

const OP: &str = "flash_attn_varlen";

/// Queues varlen attention on candle's stream; inputs were checked by the caller
/// (`check::varlen`), the offsets' values are checked by the library before the launch.
pub(crate) fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    (seqlens_q, seqlens_k): (&Tensor, &Tensor),
    dims: VarlenDims,
    scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = VarlenOp {
        dims,
        params: AttnParams::new(scale, causal),
        seqlens_q: seqlens_q.clone(),
        seqlens_k: seqlens_k.clone(),
    };
    q.apply_op3_no_bwd(k, v, &op)
}

struct VarlenOp {
    dims: VarlenDims,
    params: AttnParams,
    /// `U32` `[batch + 1]`, contiguous.
    seqlens_q: Tensor,
    seqlens_k: Tensor,
}

/// The `[token, head]` element strides of a packed 3-d layout.
fn strides3(l: &Layout) -> Result<[usize; 2]> {
    match *l.stride() {
        [t, h, _] => Ok([t, h]),
        _ => Err(err(
            OP,
            format!("expected a 3-d layout, got {:?}", l.shape()),
        )),
    }
}

/// A held `U32` offsets tensor seen as the `i32` array the kernel reads.
fn offsets_i32<'a>(h: &'a Held<'_>) -> Result<CudaView<'a, i32>> {
    let S::U32(s) = h.slice(OP)? else {
        return Err(err(OP, "seqlens_q and seqlens_k must be U32"));
    };
    let range = h.range();
    let n = range.len();
    // SAFETY: u32 and i32 have one size and alignment and every bit pattern is a valid i32;
    // an offset above i32::MAX reads negative, which the library's check rejects (and the
    // kernel clamps). The view borrows the same allocation, with its stream events.
    unsafe { s.slice(range).transmute::<i32>(n) }
        .ok_or_else(|| err(OP, "an offsets view is shorter than its layout"))
}

impl VarlenOp {
    fn run<T: CudaDType + DeviceRepr>(
        &self,
        dev: &CudaDevice,
        (q, ql): (&CudaSlice<T>, &Layout),
        (k, kl): (&CudaSlice<T>, &Layout),
        (v, vl): (&CudaSlice<T>, &Layout),
        dtype: SdpaDType,
    ) -> Result<CudaStorage> {
        let lib = |e| lib_err(OP, e);
        let stream = dev.cuda_stream();
        let sdpa = sdpa_device(OP, &stream)?;
        let (hq, hk) = (
            Held::new("seqlens_q", &self.seqlens_q),
            Held::new("seqlens_k", &self.seqlens_k),
        );
        let (cu_q, cu_k) = (offsets_i32(&hq)?, offsets_i32(&hk)?);
        let d = self.dims;
        let o_shape = [d.total_q, d.heads_q, d.head_dim];
        // SAFETY: uninitialized device memory of the output's size on candle's stream. The
        // varlen kernel writes every token's rows of O for offsets that pass the library's
        // check, which runs before the launch (CallOptions::default); on an error O is
        // dropped unread.
        let mut o = unsafe { dev.alloc::<T>(o_shape.iter().product())? };
        let (qv, kv, vv) = (
            q.slice(ql.start_offset()..),
            k.slice(kl.start_offset()..),
            v.slice(vl.start_offset()..),
        );
        let kv_shape = [d.total_k, d.heads_kv, d.head_dim];
        let call = AttentionVarlen::new(
            TensorRef::packed_strided(&qv, &stream, dtype, o_shape, strides3(ql)?).map_err(lib)?,
            TensorRef::packed_strided(&kv, &stream, dtype, kv_shape, strides3(kl)?).map_err(lib)?,
            TensorRef::packed_strided(&vv, &stream, dtype, kv_shape, strides3(vl)?).map_err(lib)?,
            TensorMut::packed(&mut o, &stream, dtype, o_shape).map_err(lib)?,
            [IdxRef::new(&cu_q, &stream), IdxRef::new(&cu_k, &stream)],
            [d.max_seqlen_q, d.max_seqlen_k],
            self.params,
        );
        // The default options check the offsets (read back: one stream synchronization).
        sdpa.attention_varlen(&stream, &call, CallOptions::default())
            .map_err(|e| varlen_err(OP, e))?;
        // The borrows record their use on the stream when dropped, before O is handed over.
        drop(call);
        Ok(CudaStorage::wrap_cuda_slice(o, dev.clone()))
    }
}

impl CustomOp3 for VarlenOp {
    fn name(&self) -> &'static str {
        "fp8-sdpa-flash-attn-varlen"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        // CPU tensors take the f32 reference before any op is built.
        Err(err(OP, "this op runs on CUDA tensors only"))
    }

    fn cuda_fwd(
        &self,
        qs: &CudaStorage,
        ql: &Layout,
        ks: &CudaStorage,
        kl: &Layout,
        vs: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = &qs.device;
        let o = match (&qs.slice, &ks.slice, &vs.slice) {
            (S::F16(q), S::F16(k), S::F16(v)) => {
                self.run(dev, (q, ql), (k, kl), (v, vl), SdpaDType::F16)?
            }
            (S::BF16(q), S::BF16(k), S::BF16(v)) => {
                self.run(dev, (q, ql), (k, kl), (v, vl), SdpaDType::Bf16)?
            }
            _ => return Err(err(OP, "q, k and v must all be F16 or all BF16")),
        };
        let d = self.dims;
        Ok((o, Shape::from((d.total_q, d.heads_q, d.head_dim))))
    }
}
