//! The NCCL ring (feature `nccl`): one process per GPU, each holding its two zig-zag chunks
//! of Q and of K/V. K/V shards pass to the next rank on the communicator's stream while the
//! compute stream attends to the shard in hand; partial outputs fold into fp32 accumulators
//! by log-sum-exp (`kernels/cp.cu`). Cross-stream order comes from cudarc's event tracking of
//! each buffer's reads and writes (a receive waits for the last read of its slot). 8-bit K/V
//! (E4M3) shards travel as bytes, half of 16-bit's; their descales are global (quantized over
//! the whole sequence), so every shard uses the same ones.
//!
//! Failure handling. Before any transfer, every pass all-gathers each rank's
//! [`ProblemDesc`] (sizes, precision, mask, scale, and the rank's verdict on its own
//! arguments) and every rank compares them ([`agree::compare`]): on any difference, or any
//! rank not ready, no rank enters the ring and all return the same
//! [`Error::InvalidInput`] naming the field and the ranks; the communicator stays usable.
//! An error once communication has started (a transfer or a kernel failing, the exchange or
//! the pass not finishing within [`Ring::set_timeout`]'s limit) aborts the communicator
//! (`ncclCommAbort`, through dropping the [`Communicator`]): the rank's own NCCL work ends,
//! its streams drain, and peers whose transfers wait on it fail their own bounded wait
//! instead of blocking forever. An aborted ring is unusable ([`Ring::is_aborted`]): every
//! rank needs a new communicator and a new ring. The bounds cover the host side too: the
//! communicator is non-blocking ([`super::comm`]), so NCCL's set-up of connections on the
//! first collective and the first transfers is waited for with the same limit.

use super::agree::{self, ProblemDesc, Status, WORDS};
use super::comm::Communicator;
use super::plan::{step_work, Mask};
use crate::error::{Error, Result};
use crate::kernels;
use crate::problem::AttnParams;
use crate::runtime::{
    Attention, CallOptions, Descale, Device, TensorMut, TensorRef, VecMut, VecRef,
};
use crate::{DType, Precision};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// SMs a ring's attention calls leave free for NCCL by default (see [`Ring::set_sm_margin`]).
/// Measured on 4 H200s at S 128k, D128 (perf-notes: SMs left to NCCL): bf16 causal went from
/// 83-84 % to 87-88 % scaling efficiency with 8 (4 and 12-16 gained less), FP8-KV was
/// unchanged, and 2 ranks stayed at 91-97 %.
pub const DEFAULT_SM_MARGIN: u32 = 8;

/// How long a rank waits for the descriptor exchange, and for a pass to finish, before it
/// takes a peer for failed and aborts (see [`Ring::set_timeout`]). Generous: it covers a
/// peer compiling its kernels on its first pass.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

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
    /// `None` once aborted.
    comm: Option<Communicator>,
    local: Local,
    precision: Precision,
    slots: [[CudaSlice<u8>; 2]; 2],
    descales: Option<[CudaSlice<f32>; 2]>,
    acc_o: [CudaSlice<f32>; 2],
    acc_lse: [CudaSlice<f32>; 2],
    tmp_o: CudaSlice<u8>,
    tmp_lse: CudaSlice<f32>,
    sm_margin: u32,
    /// A shard was loaded since the last pass (a pass moves it on).
    loaded: bool,
    timeout: Duration,
    /// This rank's encoded [`ProblemDesc`] and every rank's, gathered.
    desc_mine: CudaSlice<u64>,
    desc_all: CudaSlice<u64>,
}

fn drv(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    Error::driver(what)
}

fn aborted() -> Error {
    Error::Unsupported(
        "this ring's NCCL communicator was aborted after an earlier error and cannot be used \
         again: make a new communicator on every rank and a new Ring"
            .into(),
    )
}

/// Waits until the work queued so far on `streams` is done, at most `timeout`. Polls, so a
/// peer that never sends cannot block the host forever; spins briefly first so a short pass
/// is not rounded up to a sleep.
fn wait_bounded(streams: &[&CudaStream], timeout: Duration, what: &str) -> Result<()> {
    let events = streams
        .iter()
        .map(|s| s.record_event(None))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(drv("recording the ring's completion"))?;
    let t0 = Instant::now();
    loop {
        let mut done = true;
        for e in &events {
            if !e.try_is_complete().map_err(drv("waiting for the ring"))? {
                done = false;
                break;
            }
        }
        if done {
            return Ok(());
        }
        let waited = t0.elapsed();
        if waited > timeout {
            return Err(Error::Unsupported(format!(
                "{what} did not finish within {} s: a peer rank failed or stopped taking part \
                 (its own error says why); raise Ring::set_timeout if its work is that long",
                timeout.as_secs_f64()
            )));
        }
        if waited < Duration::from_millis(20) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// The ring's two kernels, loaded before the exchange so a failure is reported to every rank.
struct Kernels {
    merge: CudaFunction,
    finish: CudaFunction,
}

impl Ring {
    /// A ring over `comm` for a rank with `local` sizes; K/V in `precision`'s type. The
    /// rank's shard goes in with [`Ring::load`]. On error `comm` is dropped, which aborts it
    /// (peers waiting on this rank then fail their bounded waits).
    pub fn new(
        mut comm: Communicator,
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
        let ranks = comm.world_size();
        comm.set_timeout(DEFAULT_TIMEOUT);
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
        let words = |n: usize| {
            stream
                .alloc_zeros::<u64>(n)
                .map_err(drv("allocating the ring"))
        };
        Ok(Ring {
            desc_mine: words(WORDS)?,
            desc_all: words(WORDS * ranks)?,
            comm: Some(comm),
            local,
            precision,
            slots: [[z(kv_bytes)?, z(kv_bytes)?], [z(kv_bytes)?, z(kv_bytes)?]],
            descales: None,
            acc_o: [f(q_rows * l.dim)?, f(q_rows * l.dim)?],
            acc_lse: [f(q_rows)?, f(q_rows)?],
            tmp_o: z(q_rows * l.dim * precision.out().size())?,
            tmp_lse: f(q_rows)?,
            sm_margin: DEFAULT_SM_MARGIN,
            loaded: false,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// How long [`Ring::run`] waits for its peers (the descriptor exchange, then the pass)
    /// before it aborts the communicator; [`DEFAULT_TIMEOUT`] unless set. Every rank should
    /// use the same limit.
    pub fn set_timeout(&mut self, limit: Duration) {
        self.timeout = limit;
        if let Some(c) = self.comm.as_mut() {
            c.set_timeout(limit);
        }
    }

    /// Whether an error aborted this ring's communicator; an aborted ring only returns errors.
    pub fn is_aborted(&self) -> bool {
        self.comm.is_none()
    }

    /// Aborts the communicator (dropping a [`Communicator`] calls `ncclCommAbort`): this
    /// rank's queued NCCL work ends, so its streams drain, and the communicator is gone.
    fn abort(&mut self) {
        self.comm = None;
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
        if self.is_aborted() {
            return Err(aborted());
        }
        self.loaded = false;
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
        self.loaded = true;
        Ok(())
    }

    /// One ring pass: the attention of this rank's queries (`q`, `[batch, 2 x chunk,
    /// heads_q, dim]`) over the whole sequence, into `out` (shaped like `q`). Every rank
    /// calls it together. Returns once the pass is done on the device (the wait is bounded,
    /// see [`Ring::set_timeout`]). The loaded shard has moved on afterwards; load it again
    /// before the next pass.
    ///
    /// Errors: when the ranks' problems differ, or a rank's own arguments are wrong (Q or O
    /// size, no shard loaded, an invalid attention call), every rank returns the same
    /// [`Error::InvalidInput`] before any transfer, and the ring stays usable. Any later
    /// error aborts the communicator (see the module's notes): the ring is then unusable.
    pub fn run(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        q: &CudaSlice<u8>,
        out: &mut CudaSlice<u8>,
        params: AttnParams,
    ) -> Result<()> {
        if self.is_aborted() {
            return Err(aborted());
        }
        let (status, kernels, why) = match self.prepare(dev, stream, q, out, params) {
            Ok(k) => (Status::Ready, Some(k), None),
            Err((status, e)) => (status, None, Some(e)),
        };
        self.agree(status, params, why)?;
        let Some(kernels) = kernels else {
            // Unreachable: every rank, this one included, was ready.
            return Err(Error::InvalidInput(
                "context parallelism: the ranks agreed although this rank is not ready".into(),
            ));
        };
        // The shard moves on from the first transfer.
        self.loaded = false;
        let comm_stream = match &self.comm {
            Some(c) => c.stream(),
            None => return Err(aborted()),
        };
        let done = self
            .pass(dev, stream, q, out, params, &kernels)
            .and_then(|()| {
                wait_bounded(
                    &[stream, &comm_stream],
                    self.timeout,
                    "the ring pass (its transfers and kernels)",
                )
            });
        if let Err(e) = done {
            let r = self.comm.as_ref().map_or(0, |c| c.rank());
            self.abort();
            return Err(Error::Unsupported(format!(
                "context parallelism, rank {r}: {e}; the communicator is aborted (peers fail \
                 their own waits) and this ring cannot be used again"
            )));
        }
        Ok(())
    }

    /// This rank's own verdict on its arguments, before any communication: the error, and
    /// the status that tells the other ranks about it.
    fn prepare(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        q: &CudaSlice<u8>,
        out: &mut CudaSlice<u8>,
        params: AttnParams,
    ) -> std::result::Result<Kernels, (Status, Error)> {
        let l = self.local;
        let (q_t, o_t) = (self.precision.q(), self.precision.out());
        let rows_bytes = |es: usize| l.batch * 2 * l.chunk * l.heads_q * l.dim * es;
        if q.len() != rows_bytes(q_t.size()) || out.len() != rows_bytes(o_t.size()) {
            return Err((
                Status::BufferSize,
                Error::InvalidInput(format!(
                    "Q and O must hold [batch, 2 x chunk, heads_q, dim] = {} and {} bytes; got \
                     {} and {}",
                    rows_bytes(q_t.size()),
                    rows_bytes(o_t.size()),
                    q.len(),
                    out.len()
                )),
            ));
        }
        if !self.loaded {
            return Err((
                Status::NotLoaded,
                Error::InvalidInput(
                    "no K/V shard loaded since the last pass: call Ring::load before each run"
                        .into(),
                ),
            ));
        }
        let kernels = (|| -> Result<Kernels> {
            let cp = dev.module(&kernels::CP, &[("CP_OUT_T".into(), o_t.cuda_type().into())])?;
            Ok(Kernels {
                merge: cp
                    .load_function("cp_merge")
                    .map_err(drv("finding cp_merge"))?,
                finish: cp
                    .load_function("cp_finish")
                    .map_err(drv("finding cp_finish"))?,
            })
        })()
        .map_err(|e| (Status::Setup, e))?;
        // Every call of the pass has these shapes and strides (only the views' offsets and
        // the mask differ), so one call's validation speaks for all.
        let st: &CudaStream = stream;
        let qv = q.slice(..);
        let kv = [self.slots[0][0].slice(..), self.slots[0][1].slice(..)];
        let call = pair_call(
            l,
            self.precision,
            st,
            [&qv, &kv[0], &kv[1]],
            &mut self.tmp_o,
            &mut self.tmp_lse,
            self.descales.as_ref(),
            params,
        )
        .and_then(|call| crate::runtime::validate::validate(&call.describe()));
        match call {
            Ok(_) => Ok(kernels),
            Err(e) => Err((Status::InvalidCall, e)),
        }
    }

    /// Exchanges the problem descriptors and compares them (see [`agree`]). `why`: this
    /// rank's own error when `status` is not ready, added to the message on this rank.
    fn agree(&mut self, status: Status, params: AttnParams, why: Option<Error>) -> Result<()> {
        let Some(comm) = self.comm.as_ref() else {
            return Err(aborted());
        };
        let l = self.local;
        let (p, r) = (comm.world_size(), comm.rank());
        let mine = ProblemDesc {
            world_size: p,
            rank: r,
            batch: l.batch,
            chunk: l.chunk,
            heads_q: l.heads_q,
            heads_kv: l.heads_kv,
            dim: l.dim,
            precision: self.precision,
            causal: params.causal,
            scale_bits: params.scale.to_bits(),
            status,
        }
        .encode();
        let cs = comm.stream();
        let (desc_mine, desc_all) = (&mut self.desc_mine, &mut self.desc_all);
        let gathered = (|| -> Result<Vec<u64>> {
            cs.memcpy_htod(&mine, desc_mine)
                .map_err(drv("uploading the problem descriptor"))?;
            comm.all_gather(desc_mine, desc_all)?;
            wait_bounded(&[&cs], self.timeout, "the problem-descriptor exchange")?;
            cs.clone_dtoh(desc_all)
                .map_err(drv("reading the problem descriptors"))
        })();
        let here = |why: &Option<Error>| {
            why.as_ref()
                .map_or_else(String::new, |e| format!("; on rank {r}: {e}"))
        };
        let words = match gathered {
            Ok(w) => w,
            Err(e) => {
                self.abort();
                return Err(Error::Unsupported(format!(
                    "context parallelism, rank {r}: {e}{}; the communicator is aborted (peers \
                     fail their own waits) and this ring cannot be used again",
                    here(&why)
                )));
            }
        };
        match agree::compare(&words, p) {
            Ok(()) => Ok(()),
            Err(d) => Err(Error::InvalidInput(format!(
                "context parallelism: no rank entered the ring: {d}{}",
                here(&why)
            ))),
        }
    }

    /// The ring itself: transfers and attention calls queued step by step, then the merge
    /// into `out`. Returns once everything is queued.
    fn pass(
        &mut self,
        dev: &Device,
        stream: &Arc<CudaStream>,
        q: &CudaSlice<u8>,
        out: &mut CudaSlice<u8>,
        params: AttnParams,
        kernels: &Kernels,
    ) -> Result<()> {
        let Some(comm) = self.comm.as_ref() else {
            return Err(aborted());
        };
        let l = self.local;
        let (p, r) = (comm.world_size(), comm.rank());
        let q_t = self.precision.q();
        let o_t = self.precision.out();
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
            // The next shard's transfers start first, then this step's attention is queued
            // while the non-blocking communicator queues them, then the host waits for that
            // before the borrows' events are recorded. The step reads slot `cur`,
            // which the group also sends; the group receives into the other slot once the
            // previous step's reads of it are done.
            let (s0, s1) = self.slots.split_at_mut(1);
            let (cur_slot, other) = if cur == 0 {
                (&s0[0], &mut s1[0])
            } else {
                (&s1[0], &mut s0[0])
            };
            let pending = if step + 1 < p {
                // The group receives into the slot the previous step (or the previous pass)
                // read. cudarc keeps one read event per buffer, the last reader's: the
                // previous group's send of that slot (on NCCL's stream) replaced the
                // attention's, so the transfer stream waits for this stream's work explicitly.
                comm.stream()
                    .join(stream)
                    .map_err(drv("ordering the transfers after the step"))?;
                let [rk, rv] = other;
                let to = (r + 1) % p;
                let from = (r + p - 1) % p;
                Some(
                    comm.start_send_recv([&cur_slot[0], &cur_slot[1]], to, [rk, rv], from)
                        .map_err(|e| Error::Unsupported(format!("step {step}: {e}")))?,
                )
            } else {
                None
            };
            for w in step_work(r, step, p, params.causal) {
                let st: &CudaStream = stream;
                let qv = q.slice(chunk_off(w.q_local, l.heads_q, q_t.size())..);
                let kv_es = self.precision.kv().size();
                let kview = cur_slot[0].slice(chunk_off(w.kv_local, l.heads_kv, kv_es)..);
                let vview = cur_slot[1].slice(chunk_off(w.kv_local, l.heads_kv, kv_es)..);
                let call = pair_call(
                    l,
                    self.precision,
                    st,
                    [&qv, &kview, &vview],
                    &mut self.tmp_o,
                    &mut self.tmp_lse,
                    self.descales.as_ref(),
                    AttnParams {
                        scale: params.scale,
                        causal: w.mask == Mask::Causal,
                    },
                )?;
                let opts = CallOptions {
                    check_descales: false,
                    sm_margin: self.sm_margin,
                    ..CallOptions::default()
                };
                dev.attention(stream, &call, opts)?;
                drop(call);
                let mut launch = stream.launch_builder(&kernels.merge);
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
            if let Some(pending) = pending {
                pending
                    .wait()
                    .map_err(|e| Error::Unsupported(format!("step {step}: {e}")))?;
            }
            cur = 1 - cur;
        }
        for i in 0..2 {
            let off = chunk_off(i, l.heads_q, o_t.size());
            let mut view = out.slice_mut(off..);
            let mut launch = stream.launch_builder(&kernels.finish);
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
            // SAFETY: `out` holds [batch, 2 x chunk, heads_q, dim] elements (checked in
            // `prepare`); chunk i's rows start at `off` with these strides.
            unsafe { launch.launch(row_cfg) }.map_err(drv("launching cp_finish"))?;
        }
        Ok(())
    }
}

/// The attention call of one (query chunk, key chunk) pair: `q` starts at the query chunk
/// of a `[batch, 2 x chunk, heads_q, dim]` buffer, `k` and `v` at the key chunk of a shard,
/// the output goes to the contiguous scratch.
#[allow(clippy::too_many_arguments)]
fn pair_call<'a>(
    l: Local,
    precision: Precision,
    st: &'a CudaStream,
    [q, k, v]: [&'a CudaView<'a, u8>; 3],
    tmp_o: &'a mut CudaSlice<u8>,
    tmp_lse: &'a mut CudaSlice<f32>,
    descales: Option<&'a [CudaSlice<f32>; 2]>,
    params: AttnParams,
) -> Result<Attention<'a>> {
    // Views of one chunk of a [batch, 2 x chunk, heads, dim] BSHD buffer.
    let chunk_strides = |heads: usize| [2 * l.chunk * heads * l.dim, heads * l.dim, l.dim, 1];
    let descale = |i: usize| {
        descales.map(|d| Descale {
            values: VecRef::new(&d[i], st),
            batch_stride: l.heads_kv,
        })
    };
    Ok(Attention::new(
        TensorRef::new(
            q,
            st,
            precision.q(),
            [l.batch, l.chunk, l.heads_q, l.dim],
            chunk_strides(l.heads_q),
        )?,
        TensorRef::new(
            k,
            st,
            precision.kv(),
            [l.batch, l.chunk, l.heads_kv, l.dim],
            chunk_strides(l.heads_kv),
        )?,
        TensorRef::new(
            v,
            st,
            precision.kv(),
            [l.batch, l.chunk, l.heads_kv, l.dim],
            chunk_strides(l.heads_kv),
        )?,
        TensorMut::contiguous(
            tmp_o,
            st,
            precision.out(),
            [l.batch, l.chunk, l.heads_q, l.dim],
            crate::Layout::Bshd,
        )?,
        params,
    )
    .with_lse(VecMut::new(tmp_lse, st))
    .with_descales(None, descale(0), descale(1)))
}
