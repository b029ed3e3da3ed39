//! The GPU timing protocol shared by our kernels and the ceilings: CUDA events around each
//! run, warm-up first, then many timed runs, in one of three modes:
//! - cold: a buffer of twice the L2 size is overwritten before each run (outside the timed
//!   region), so every run reads its inputs from DRAM;
//! - hot: the caller rotates input sets whose total exceeds twice the L2, so no run finds its
//!   inputs left in L2 by the previous run of the same set;
//! - graph: `per_graph` launches are captured in one CUDA graph; each timed run replays the
//!   graph and counts time / `per_graph` (launch overhead out, for tiny shapes).

pub use crate::bench::suites::TimingMode as Mode;
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use fp8_sdpa::{Error, Result};
use std::sync::Arc;

/// How many runs.
#[derive(Debug, Clone, Copy)]
pub struct Protocol {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs (at least this many unless the budget ends first, and never fewer than 10).
    pub iters: usize,
    /// Stop adding timed runs after this many seconds.
    pub budget_s: f64,
    /// Launches captured per graph in graph mode.
    pub per_graph: usize,
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol {
            warmup: 10,
            iters: 100,
            budget_s: 5.0,
            per_graph: 20,
        }
    }
}

/// An L2 flusher: a buffer twice the L2 size, overwritten by a memset.
pub struct Flusher {
    buf: CudaSlice<u8>,
}

impl Flusher {
    /// Allocates `2 * l2_bytes` (at least 64 MiB).
    pub fn new(stream: &Arc<CudaStream>, l2_bytes: u64) -> Result<Flusher> {
        let n = (2 * l2_bytes).max(64 << 20) as usize;
        let buf = stream
            .alloc_zeros::<u8>(n)
            .map_err(Error::driver("allocating the L2 flush buffer"))?;
        Ok(Flusher { buf })
    }

    /// Overwrites the buffer (queued on `stream`).
    pub fn flush(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        let n = self.buf.len();
        let (p, _g) = self.buf.device_ptr_mut(stream);
        // SAFETY: p is a live allocation of n bytes.
        unsafe { cudarc::driver::result::memset_d8_async(p, 0x5a, n, stream.cu_stream()) }
            .map_err(Error::driver("flushing L2"))
    }
}

/// Times `launch` (which queues one run of the work on `stream`, given the run index) and
/// returns per-run times in microseconds. Event tracking must be off on the context.
pub fn time_runs(
    stream: &Arc<CudaStream>,
    mode: Mode,
    proto: Protocol,
    flusher: Option<&mut Flusher>,
    mut launch: impl FnMut(usize) -> Result<()>,
) -> Result<Vec<f64>> {
    let ctx = stream.context();
    let ev = |_: ()| {
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(Error::driver("creating an event"))
    };
    let graph = if mode == Mode::Graph {
        for i in 0..proto.warmup.max(1) {
            launch(i)?;
        }
        stream.synchronize().map_err(Error::driver("warm-up"))?;
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(Error::driver("beginning graph capture"))?;
        let mut captured = Ok(());
        for i in 0..proto.per_graph {
            if let Err(e) = launch(i) {
                captured = Err(e);
                break;
            }
        }
        let g = stream
            .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
            .map_err(Error::driver("ending graph capture"))?;
        captured?;
        let g = g.ok_or_else(|| Error::InvalidInput("graph capture recorded nothing".into()))?;
        // Replays before timing, as the peers script does: the first upload is not the kernel.
        for _ in 0..proto.warmup {
            g.launch().map_err(Error::driver("replaying the graph"))?;
        }
        Some(g)
    } else {
        None
    };
    let mut flusher = flusher;
    if graph.is_none() {
        for i in 0..proto.warmup {
            if mode == Mode::Cold {
                if let Some(f) = flusher.as_deref_mut() {
                    f.flush(stream)?;
                }
            }
            launch(i)?;
        }
    }
    stream.synchronize().map_err(Error::driver("warm-up"))?;
    let per = if graph.is_some() {
        proto.per_graph as f64
    } else {
        1.0
    };
    // Runs are queued in batches with an event pair each and read after one synchronize, as
    // the peers script does: synchronizing after every run would leave the GPU idle while the
    // host issues the next launch, and that gap would land inside the timed region.
    const BATCH: usize = 20;
    let mut events = Vec::with_capacity(2 * BATCH);
    for _ in 0..2 * BATCH {
        events.push(ev(())?);
    }
    let t0 = std::time::Instant::now();
    let mut times = Vec::with_capacity(proto.iters);
    let mut i = 0usize;
    while times.len() < proto.iters.max(10) {
        let n = BATCH.min(proto.iters.max(10) - times.len());
        for j in 0..n {
            if mode == Mode::Cold {
                if let Some(f) = flusher.as_deref_mut() {
                    f.flush(stream)?;
                }
            }
            events[2 * j]
                .record(stream)
                .map_err(Error::driver("recording an event"))?;
            match &graph {
                Some(g) => g.launch().map_err(Error::driver("replaying the graph"))?,
                None => launch(proto.warmup + i)?,
            }
            events[2 * j + 1]
                .record(stream)
                .map_err(Error::driver("recording an event"))?;
            i += 1;
        }
        stream.synchronize().map_err(Error::driver("timed runs"))?;
        for j in 0..n {
            let ms = events[2 * j]
                .elapsed_ms(&events[2 * j + 1])
                .map_err(Error::driver("reading an event"))?;
            times.push(ms as f64 * 1000.0 / per);
        }
        if times.len() >= 10 && t0.elapsed().as_secs_f64() > proto.budget_s {
            break;
        }
    }
    Ok(times)
}
