//! The NCCL ring (feature `nccl`): one process per GPU, each holding its two zig-zag chunks
//! of Q and of K/V. K/V shards pass to the next rank on the communicator's stream while the
//! compute stream attends to the shard in hand; partial outputs fold into fp32 accumulators
//! by log-sum-exp (`kernels/cp.cu`). Cross-stream order comes from cudarc's event tracking of
//! each buffer's reads and writes (a receive waits for the last read of its slot). 8-bit K/V
//! (E4M3) shards travel as bytes, half of 16-bit's; their descales are global (quantized over
//! the whole sequence), so every shard uses the same ones.

use super::plan::{step_work, Mask};
use crate::error::{Error, Result};
use crate::kernels;
use crate::problem::AttnParams;
use crate::runtime::{
    Attention, CallOptions, Descale, Device, TensorMut, TensorRef, VecMut, VecRef,
};
use crate::{DType, Precision};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut, LaunchConfig, PushKernelArg};
use cudarc::nccl::safe::Comm;
use std::sync::Arc;

/// SMs a ring's attention calls leave free for NCCL by default (see [`Ring::set_sm_margin`]).
/// Measured on 4 H200s at S 128k, D128 (round 26, runs 139-141): bf16 causal went from
/// 83-84 % to 87-88 % scaling efficiency with 8 (4 and 12-16 gained less), FP8-KV was
/// unchanged, and 2 ranks stayed at 91-97 %.
pub const DEFAULT_SM_MARGIN: u32 = 8;

/// One rank's sizes: its two chunks of `chunk` tokens each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    /// Batch.
    pub batch: usize,
    /// Tokens per chunk (the sequence is 2 x ranks x chunk).
    pub chunk: usize,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_kv: usize,
    /// Head dim.
    pub dim: usize,
}

/// A rank's ring: the two K/V slots it alternates between, the accumulators and scratch.
pub struct Ring {
    comm: Comm,
    local: Local,
    precision: Precision,
    slots: [[CudaSlice<u8>; 2]; 2],
    descales: Option<[CudaSlice<f32>; 2]>,
    acc_o: [CudaSlice<f32>; 2],
    acc_lse: [CudaSlice<f32>; 2],
    tmp_o: CudaSlice<u8>,
    tmp_lse: CudaSlice<f32>,
    sm_margin: u32,
}

fn drv(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    Error::driver(what)
}

fn nccl(what: &str) -> impl FnOnce(cudarc::nccl::result::NcclError) -> Error + '_ {
    move |e| Error::Unsupported(format!("NCCL {what}: {e:?}"))
}

impl Ring {
    /// A ring over `comm` for a rank with `local` sizes; K/V in `precision`'s type. The
    /// rank's shard goes in with [`Ring::load`].
    pub fn new(
        comm: Comm,
        stream: &Arc<CudaStream>,
        local: Local,
        precision: Precision,
    ) -> Result<Ring> {
        if !matches!(
            precision,
            Precision::F16 | Precision::Bf16 | Precision::Fp8KvF16 | Precision::Fp8KvBf16
        ) {
            return Err(Error::InvalidInput(format!(
                "context parallelism takes fp16/bf16 Q with 16-bit or E4M3 K/V, not {precision}"
            )));
        }
        let l = local;
        let kv_bytes = l.batch * 2 * l.chunk * l.heads_kv * l.dim * precision.kv().size();
        let q_rows = l.batch * l.chunk * l.heads_q;
        let z = |n: usize| {
            stream
                .alloc_zeros::<u8>(n)
                .map_err(drv("allocating the ring"))
        };
        let f = |n: usize| {
            stream
                .alloc_zeros::<f32>(n)
                .map_err(drv("allocating the ring"))
        };
        Ok(Ring {
            comm,
            local,
            precision,
            slots: [[z(kv_bytes)?, z(kv_bytes)?], [z(kv_bytes)?, z(kv_bytes)?]],
            descales: None,
            acc_o: [f(q_rows * l.dim)?, f(q_rows * l.dim)?],
            acc_lse: [f(q_rows)?, f(q_rows)?],
            tmp_o: z(q_rows * l.dim * precision.out().size())?,
            tmp_lse: f(q_rows)?,
            sm_margin: DEFAULT_SM_MARGIN,
        })
    }

    /// SMs the attention calls leave to NCCL's transfer kernels, which run beside them on
    /// the communicator's stream ([`CallOptions::sm_margin`]); [`DEFAULT_SM_MARGIN`] unless set.
    pub fn set_sm_margin(&mut self, sms: u32) {
        self.sm_margin = sms;
    }

    /// Bytes one shard (K and V, both chunks) puts on the wire per step.
    pub fn shard_bytes(&self) -> usize {
        2 * self.slots[0][0].len()
    }

    /// Loads this rank's K and V shards (`[batch, 2 x chunk, heads_kv, dim]`, BSHD, the
    /// precision's K/V type) and, for E4M3, the global descales (`[batch x heads_kv]`).
    pub fn load(
        &mut self,
        stream: &Arc<CudaStream>,
        k: &CudaSlice<u8>,
        v: &CudaSlice<u8>,
        descales: Option<[&CudaSlice<f32>; 2]>,
    ) -> Result<()> {
        let want = self.slots[0][0].len();
        if k.len() != want || v.len() != want {
            return Err(Error::InvalidInput(format!(
                "K/V shards hold {} and {} bytes; this ring needs {want} each",
                k.len(),
                v.len()
            )));
        }
        stream
            .memcpy_dtod(k, &mut self.slots[0][0])
            .map_err(drv("loading K"))?;
        stream
            .memcpy_dtod(v, &mut self.slots[0][1])
            .map_err(drv("loading V"))?;
        self.descales = match (self.precision.kv() == DType::E4m3, descales) {
            (true, Some([kd, vd])) => Some([
                stream.clone_dtod(kd).map_err(drv("loading descales"))?,
                stream.clone_dtod(vd).map_err(drv("loading descales"))?,
            ]),
            (false, None) => None,
            (true, None) => return Err(Error::InvalidInput("E4M3 K/V need their descales".into())),
            (false, Some(_)) => {
                return Err(Error::InvalidInput("16-bit K/V take no descales".into()))
            }
        };
        Ok(())
    }

    /// One ring pass: the attention of this rank's queries (`q`, `[batch, 2 x chunk,
    /// heads_q, dim]`) over the whole sequence, into `out` (shaped like `q`). The loaded
    /// shard has moved on afterwards; load it again before the next pass.
    pub fn run(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        q: &CudaSlice<u8>,
        out: &mut CudaSlice<u8>,
        params: AttnParams,
    ) -> Result<()> {
        let l = self.local;
        let (p, r) = (self.comm.world_size(), self.comm.rank());
        let q_t = self.precision.q();
        let o_t = self.precision.out();
        let rows_bytes = |es: usize| l.batch * 2 * l.chunk * l.heads_q * l.dim * es;
        if q.len() != rows_bytes(q_t.size()) || out.len() != rows_bytes(o_t.size()) {
            return Err(Error::InvalidInput(format!(
                "Q and O must hold [batch, 2 x chunk, heads_q, dim] = {} and {} bytes; got {} and {}",
                rows_bytes(q_t.size()),
                rows_bytes(o_t.size()),
                q.len(),
                out.len()
            )));
        }
        let cp = dev.module(&kernels::CP, &[("CP_OUT_T".into(), o_t.cuda_type().into())])?;
        let merge = cp
            .load_function("cp_merge")
            .map_err(drv("finding cp_merge"))?;
        let finish = cp
            .load_function("cp_finish")
            .map_err(drv("finding cp_finish"))?;
        for i in 0..2 {
            stream
                .memset_zeros(&mut self.acc_o[i])
                .map_err(drv("clearing O"))?;
            let n = self.acc_lse[i].len();
            let (ptr, _g) = self.acc_lse[i].device_ptr_mut(stream);
            // SAFETY: a live allocation of `len` floats; 0xff800000 is -inf.
            unsafe {
                cudarc::driver::sys::cuMemsetD32Async(ptr, 0xff80_0000, n, stream.cu_stream())
            }
            .result()
            .map_err(drv("clearing LSE"))?;
        }
        let rows = l.batch * l.chunk * l.heads_q;
        // Views of one chunk of a [batch, 2 x chunk, heads, dim] BSHD buffer.
        let chunk_strides = |heads: usize| [2 * l.chunk * heads * l.dim, heads * l.dim, l.dim, 1];
        let chunk_off = |c: usize, heads: usize, es: usize| c * l.chunk * heads * l.dim * es;
        // cp_merge and cp_finish: one warp per (batch, token, head) row, four per block; the
        // partial O is contiguous [batch, chunk, heads_q, dim], the output a chunk of
        // [batch, 2 x chunk, heads_q, dim].
        let row_cfg = LaunchConfig {
            grid_dim: ((rows as u32).div_ceil(4), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let (b, c, h, d) = (
            l.batch as i32,
            l.chunk as i32,
            l.heads_q as i32,
            l.dim as i32,
        );
        let row_s = [(l.heads_q * l.dim) as i64, l.dim as i64];
        let tmp_sb = (l.chunk * l.heads_q * l.dim) as i64;
        let out_sb = 2 * tmp_sb;
        let mut cur = 0;
        for step in 0..p {
            if step + 1 < p {
                let (a, b) = self.slots.split_at_mut(1);
                let (send, recv) = if cur == 0 {
                    (&a[0], &mut b[0])
                } else {
                    (&b[0], &mut a[0])
                };
                let [sk, sv] = send;
                let [rk, rv] = recv;
                let mut g = self.comm.group();
                g.send(sk.as_view(), ((r + 1) % p) as i32)
                    .map_err(nccl("send"))?;
                g.send(sv.as_view(), ((r + 1) % p) as i32)
                    .map_err(nccl("send"))?;
                g.recv(rk.as_view_mut(), ((r + p - 1) % p) as i32)
                    .map_err(nccl("recv"))?;
                g.recv(rv.as_view_mut(), ((r + p - 1) % p) as i32)
                    .map_err(nccl("recv"))?;
            }
            for w in step_work(r, step, p, params.causal) {
                let st: &CudaStream = stream;
                let qv = q.slice(chunk_off(w.q_local, l.heads_q, q_t.size())..);
                let kv_es = self.precision.kv().size();
                let kview = self.slots[cur][0].slice(chunk_off(w.kv_local, l.heads_kv, kv_es)..);
                let vview = self.slots[cur][1].slice(chunk_off(w.kv_local, l.heads_kv, kv_es)..);
                let descale = |i: usize| {
                    self.descales.as_ref().map(|d| Descale {
                        values: VecRef::new(&d[i], st),
                        batch_stride: l.heads_kv,
                    })
                };
                let call = Attention {
                    q: TensorRef::new(
                        &qv,
                        st,
                        q_t,
                        [l.batch, l.chunk, l.heads_q, l.dim],
                        chunk_strides(l.heads_q),
                    )?,
                    k: TensorRef::new(
                        &kview,
                        st,
                        self.precision.kv(),
                        [l.batch, l.chunk, l.heads_kv, l.dim],
                        chunk_strides(l.heads_kv),
                    )?,
                    v: TensorRef::new(
                        &vview,
                        st,
                        self.precision.kv(),
                        [l.batch, l.chunk, l.heads_kv, l.dim],
                        chunk_strides(l.heads_kv),
                    )?,
                    o: TensorMut::contiguous(
                        &mut self.tmp_o,
                        st,
                        o_t,
                        [l.batch, l.chunk, l.heads_q, l.dim],
                        crate::Layout::Bshd,
                    )?,
                    lse: Some(VecMut::new(&mut self.tmp_lse, st)),
                    q_descale: None,
                    k_descale: descale(0),
                    v_descale: descale(1),
                    params: AttnParams {
                        scale: params.scale,
                        causal: w.mask == Mask::Causal,
                    },
                };
                let opts = CallOptions {
                    check_descales: false,
                    sm_margin: self.sm_margin,
                    ..CallOptions::default()
                };
                dev.attention(stream, &call, opts)?;
                drop(call);
                let mut launch = stream.launch_builder(&merge);
                launch
                    .arg(&mut self.acc_o[w.q_local])
                    .arg(&mut self.acc_lse[w.q_local])
                    .arg(&self.tmp_o)
                    .arg(&self.tmp_lse)
                    .arg(&b)
                    .arg(&c)
                    .arg(&h)
                    .arg(&d)
                    .arg(&tmp_sb)
                    .arg(&row_s[0])
                    .arg(&row_s[1]);
                // SAFETY: the accumulators hold rows x dim and rows floats, tmp_o rows x dim
                // elements of the output type written contiguously above, tmp_lse rows floats.
                unsafe { launch.launch(row_cfg) }.map_err(drv("launching cp_merge"))?;
            }
            cur = 1 - cur;
        }
        for i in 0..2 {
            let off = chunk_off(i, l.heads_q, o_t.size());
            let mut view = out.slice_mut(off..);
            let mut launch = stream.launch_builder(&finish);
            launch
                .arg(&self.acc_o[i])
                .arg(&mut view)
                .arg(&b)
                .arg(&c)
                .arg(&h)
                .arg(&d)
                .arg(&out_sb)
                .arg(&row_s[0])
                .arg(&row_s[1]);
            // SAFETY: `out` holds [batch, 2 x chunk, heads_q, dim] elements (checked above);
            // chunk i's rows start at `off` with these strides.
            unsafe { launch.launch(row_cfg) }.map_err(drv("launching cp_finish"))?;
        }
        Ok(())
    }
}
