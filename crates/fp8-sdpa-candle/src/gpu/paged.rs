//! Paged attention on CUDA (`Fp8KvCache::attend`, `Fp8PagedCache::attend`,
//! `flash_attn_paged`): a `CustomOp1` over Q holding the page pools, descales, block table
//! and lengths as fields, launched through fp8-sdpa's `Device::paged_attention` (the decode
//! family) on candle's stream.

use super::attn::descale;
use super::{lib_err, sdpa_device, shape4, strides4, Held};
use crate::check::err;
use candle_core::cuda::cudarc::driver::{CudaSlice, DeviceRepr};
use candle_core::cuda::{CudaDType, CudaDevice, CudaStorage, CudaStorageSlice as S};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use fp8_sdpa::runtime::{CallOptions, IdxRef, PagedAttention, PagedKv, TensorMut, TensorRef};
use fp8_sdpa::{AttnParams, DType as SdpaDType, Layout as SdpaLayout};

/// The device tensors of a paged call.
pub(crate) struct Pages<'a> {
    /// `F8E4M3` `[pages, page_size, heads_kv, head_dim]`.
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    /// `F32` `[batch, heads_kv]`.
    pub k_descale: &'a Tensor,
    pub v_descale: &'a Tensor,
    /// `I32` `[batch, max_pages]`.
    pub block_table: &'a Tensor,
    pub max_pages: usize,
    /// `I32` `[batch]`.
    pub seqlens: &'a Tensor,
    /// Read the table, lengths and descales back and check them (one synchronization): for
    /// tables the caller built; a cache that builds its own skips it.
    pub check: bool,
    /// The public function, for errors.
    pub op: &'static str,
}

/// Queues paged decode attention of `q` over the cache on candle's stream.
pub(crate) fn attend(q: &Tensor, pages: Pages<'_>, scale: f32, causal: bool) -> Result<Tensor> {
    let op = PagedOp {
        k: pages.k.clone(),
        v: pages.v.clone(),
        k_descale: pages.k_descale.clone(),
        v_descale: pages.v_descale.clone(),
        block_table: pages.block_table.clone(),
        max_pages: pages.max_pages,
        seqlens: pages.seqlens.clone(),
        params: AttnParams::new(scale, causal),
        check: pages.check,
        op: pages.op,
    };
    q.apply_op1_no_bwd(&op)
}

struct PagedOp {
    k: Tensor,
    v: Tensor,
    k_descale: Tensor,
    v_descale: Tensor,
    block_table: Tensor,
    max_pages: usize,
    seqlens: Tensor,
    params: AttnParams,
    check: bool,
    op: &'static str,
}

impl PagedOp {
    fn run<T: CudaDType + DeviceRepr>(
        &self,
        dev: &CudaDevice,
        q: &CudaSlice<T>,
        ql: &Layout,
        q_type: SdpaDType,
    ) -> Result<CudaStorage> {
        let op = self.op;
        let lib = |e| lib_err(op, e);
        let stream = dev.cuda_stream();
        let sdpa = sdpa_device(op, &stream)?;
        let (kh, vh) = (Held::new("k pages", &self.k), Held::new("v pages", &self.v));
        let (kdh, vdh) = (
            Held::new("k_descale", &self.k_descale),
            Held::new("v_descale", &self.v_descale),
        );
        let (th, lh) = (
            Held::new("block table", &self.block_table),
            Held::new("seqlens", &self.seqlens),
        );
        let (S::F8E4M3(kp), S::F8E4M3(vp)) = (kh.slice(op)?, vh.slice(op)?) else {
            return Err(err(op, "the page pools must be F8E4M3"));
        };
        let (S::F32(kd), S::F32(vd)) = (kdh.slice(op)?, vdh.slice(op)?) else {
            return Err(err(op, "the descales must be F32"));
        };
        let (S::I32(table), S::I32(lens)) = (th.slice(op)?, lh.slice(op)?) else {
            return Err(err(op, "the block table and seqlens must be I32"));
        };
        let (kp, vp) = (kp.slice(kh.range()), vp.slice(vh.range()));
        let (kd, vd) = (kd.slice(kdh.range()), vd.slice(vdh.range()));
        let (table, lens) = (table.slice(th.range()), lens.slice(lh.range()));
        let q_shape = shape4(ql)?;
        let heads_kv = shape4(kh.layout())?[2];
        // SAFETY: as in attn.rs: fp8-sdpa writes every element of O; on error it is dropped.
        let mut o = unsafe { dev.alloc::<T>(q_shape.iter().product())? };
        let qv = q.slice(ql.start_offset()..);
        let pool = |p, h: &Held| -> Result<TensorRef> {
            TensorRef::new(
                p,
                &stream,
                SdpaDType::E4m3,
                shape4(h.layout())?,
                strides4(h.layout())?,
            )
            .map_err(lib)
        };
        let call = PagedAttention::new(
            TensorRef::new(&qv, &stream, q_type, q_shape, strides4(ql)?).map_err(lib)?,
            PagedKv::new(
                pool(&kp, &kh)?,
                pool(&vp, &vh)?,
                IdxRef::new(&table, &stream),
                self.max_pages,
                IdxRef::new(&lens, &stream),
            ),
            TensorMut::contiguous(&mut o, &stream, q_type, q_shape, SdpaLayout::Bshd)
                .map_err(lib)?,
            self.params,
        )
        .with_kv_descales(
            Some(descale(&kd, &stream, heads_kv)),
            Some(descale(&vd, &stream, heads_kv)),
        );
        // A cache builds its table and lengths itself; reading them back (and the descales)
        // would synchronize candle's stream on every decode step.
        let opts = CallOptions::default().with_check_descales(self.check);
        sdpa.paged_attention(&stream, &call, opts).map_err(lib)?;
        drop(call);
        Ok(CudaStorage::wrap_cuda_slice(o, dev.clone()))
    }
}

impl CustomOp1 for PagedOp {
    fn name(&self) -> &'static str {
        "fp8-sdpa-paged-attend"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        // A CPU cache takes the f32 reference before any op is built.
        Err(err(self.op, "this op runs on CUDA tensors only"))
    }

    fn cuda_fwd(&self, qs: &CudaStorage, ql: &Layout) -> Result<(CudaStorage, Shape)> {
        let o = match &qs.slice {
            S::F16(q) => self.run(&qs.device, q, ql, SdpaDType::F16)?,
            S::BF16(q) => self.run(&qs.device, q, ql, SdpaDType::Bf16)?,
            _ => return Err(err(self.op, "q must be F16 or BF16")),
        };
        Ok((o, ql.shape().clone()))
    }
}
