//! `flash_attn` and `flash_attn_fp8kv` on CUDA: one `CustomOp3` over Q, K and V, with the
//! FP8 descales held as op fields (as candle-flash-attn holds its ALiBi slopes).

use super::{lib_err, sdpa_device, shape4, strides4, Held};
use crate::check::{err, AttnDims};
use candle_core::cuda::cudarc::driver::{CudaSlice, CudaStream, CudaView, DeviceRepr};
use candle_core::cuda::{CudaDType, CudaDevice, CudaStorage, CudaStorageSlice as S};
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Tensor};
use fp8_sdpa::runtime::{Attention, CallOptions, Descale, TensorMut, TensorRef, VecRef};
use fp8_sdpa::{AttnParams, DType as SdpaDType, Layout as SdpaLayout};

/// Queues attention on candle's stream; inputs were checked by the caller (`check::qkv`).
pub(crate) fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    descales: Option<(&Tensor, &Tensor, usize)>,
    dims: AttnDims,
    scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = FlashAttn {
        dims,
        params: AttnParams::new(scale, causal),
        descales: descales.map(|(k, v, stride)| (k.clone(), v.clone(), stride)),
    };
    q.apply_op3_no_bwd(k, v, &op)
}

struct FlashAttn {
    dims: AttnDims,
    params: AttnParams,
    /// K and V descales and their batch stride (0 or heads_kv): the FP8-KV path.
    descales: Option<(Tensor, Tensor, usize)>,
}

impl FlashAttn {
    fn op(&self) -> &'static str {
        if self.descales.is_some() {
            "flash_attn_fp8kv"
        } else {
            "flash_attn"
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run<T: CudaDType + DeviceRepr, U: DeviceRepr>(
        &self,
        dev: &CudaDevice,
        (q, ql): (&CudaSlice<T>, &Layout),
        (k, kl): (&CudaSlice<U>, &Layout),
        (v, vl): (&CudaSlice<U>, &Layout),
        q_type: SdpaDType,
        kv_type: SdpaDType,
    ) -> Result<CudaStorage> {
        let op = self.op();
        let lib = |e| lib_err(op, e);
        let stream = dev.cuda_stream();
        let sdpa = sdpa_device(op, &stream)?;
        let held = self.descales.as_ref().map(|(k, v, stride)| {
            (
                Held::new("k_descale", k),
                Held::new("v_descale", v),
                *stride,
            )
        });
        let ds = match &held {
            Some((kh, vh, stride)) => match (kh.slice(op)?, vh.slice(op)?) {
                (S::F32(kd), S::F32(vd)) => {
                    Some((kd.slice(kh.range()), vd.slice(vh.range()), *stride))
                }
                _ => return Err(err(op, "k_descale and v_descale must be F32")),
            },
            None => None,
        };
        let d = self.dims;
        let o_shape = [d.batch, d.seq_q, d.heads_q, d.head_dim];
        // SAFETY: uninitialized device memory of the output's size on candle's stream;
        // fp8-sdpa writes every element of O (its contract, verified by the lab with
        // NaN-poisoned outputs), and on an error O is dropped unread.
        let mut o = unsafe { dev.alloc::<T>(o_shape.iter().product())? };
        let (qv, kv, vv) = (
            q.slice(ql.start_offset()..),
            k.slice(kl.start_offset()..),
            v.slice(vl.start_offset()..),
        );
        let call = Attention::new(
            TensorRef::new(&qv, &stream, q_type, shape4(ql)?, strides4(ql)?).map_err(lib)?,
            TensorRef::new(&kv, &stream, kv_type, shape4(kl)?, strides4(kl)?).map_err(lib)?,
            TensorRef::new(&vv, &stream, kv_type, shape4(vl)?, strides4(vl)?).map_err(lib)?,
            TensorMut::contiguous(&mut o, &stream, q_type, o_shape, SdpaLayout::Bshd)
                .map_err(lib)?,
            self.params,
        )
        .with_descales(
            None,
            ds.as_ref().map(|(k, _, s)| descale(k, &stream, *s)),
            ds.as_ref().map(|(_, v, s)| descale(v, &stream, *s)),
        );
        // Descale values are not read back: that would synchronize candle's stream per call.
        let opts = CallOptions::default().with_check_descales(false);
        sdpa.attention(&stream, &call, opts).map_err(lib)?;
        // The borrows record their use on the stream when dropped, before O is handed over.
        drop(call);
        Ok(CudaStorage::wrap_cuda_slice(o, dev.clone()))
    }
}

/// An fp32 descale vector borrowed for one call.
pub(crate) fn descale<'a>(
    values: &'a CudaView<'_, f32>,
    stream: &'a CudaStream,
    batch_stride: usize,
) -> Descale<'a> {
    Descale::new(VecRef::new(values, stream), batch_stride)
}

impl CustomOp3 for FlashAttn {
    fn name(&self) -> &'static str {
        "fp8-sdpa-flash-attn"
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
        Err(err(self.op(), "this op runs on CUDA tensors only"))
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
        use SdpaDType::{Bf16, E4m3, F16};
        let dev = &qs.device;
        let fp8 = self.descales.is_some();
        let o = match (&qs.slice, &ks.slice, &vs.slice) {
            (S::F16(q), S::F16(k), S::F16(v)) if !fp8 => {
                self.run(dev, (q, ql), (k, kl), (v, vl), F16, F16)?
            }
            (S::BF16(q), S::BF16(k), S::BF16(v)) if !fp8 => {
                self.run(dev, (q, ql), (k, kl), (v, vl), Bf16, Bf16)?
            }
            (S::F16(q), S::F8E4M3(k), S::F8E4M3(v)) if fp8 => {
                self.run(dev, (q, ql), (k, kl), (v, vl), F16, E4m3)?
            }
            (S::BF16(q), S::F8E4M3(k), S::F8E4M3(v)) if fp8 => {
                self.run(dev, (q, ql), (k, kl), (v, vl), Bf16, E4m3)?
            }
            _ => return Err(err(self.op(), "unsupported dtypes for q, k, v")),
        };
        let d = self.dims;
        Ok((o, Shape::from((d.batch, d.seq_q, d.heads_q, d.head_dim))))
    }
}
