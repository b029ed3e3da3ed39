//! `fp8_sdpa._native`: the Rust side of the fp8-sdpa Python package. The pure-Python layer
//! (python/fp8_sdpa/) gives FlashAttention's API; it calls, for each operation, a `plan_*`
//! function first (the library's validation of the call, no device and no torch needed:
//! outputs that do not exist yet are described at fresh addresses), allocates the outputs
//! with torch, then the `run_*` function with torch's current stream, which validates again
//! and launches.
//!
//! Tensors are taken duck-typed ([`args`]), so the extension links to no torch; errors are
//! Python exceptions carrying the library's message: `ValueError` for bad input
//! (`Error::InvalidInput`), `RuntimeError` otherwise.

mod args;
mod calls;
mod quant;

use args::{one_device, Arg, Elem, Placer};
use calls::{Io, Paged, Varlen};
use cudarc::driver::CudaStream;
use fp8_sdpa::runtime::validate::Validated;
use fp8_sdpa::runtime::{Device, TensorDesc};
use fp8_sdpa::{AttnParams, DType, Error, Precision};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex};

/// The library's error as a Python exception with its message.
fn py_err(e: Error) -> PyErr {
    match e {
        Error::InvalidInput(_) => PyValueError::new_err(e.to_string()),
        e => PyRuntimeError::new_err(e.to_string()),
    }
}

/// The open device `ordinal`, opened once per process (it keeps its loaded kernels).
fn device(ordinal: usize) -> PyResult<Arc<Device>> {
    static DEVICES: Mutex<Vec<(usize, Arc<Device>)>> = Mutex::new(Vec::new());
    let mut open = DEVICES
        .lock()
        .map_err(|_| PyRuntimeError::new_err("fp8_sdpa: the device table was poisoned"))?;
    if let Some((_, d)) = open.iter().find(|(o, _)| *o == ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(Device::open(ordinal).map_err(py_err)?);
    open.push((ordinal, d.clone()));
    Ok(d)
}

/// Runs `f` with the device and the caller's stream (torch's current stream, by handle),
/// without the GIL (a first call compiles kernels).
fn on_stream<T: Send>(
    py: Python<'_>,
    ordinal: usize,
    stream: usize,
    f: impl FnOnce(&Device, &CudaStream) -> fp8_sdpa::Result<T> + Send,
) -> PyResult<T> {
    let dev = device(ordinal)?;
    py.detach(move || {
        let ctx = dev.context();
        ctx.bind_to_thread()
            .map_err(Error::driver("making the GPU's context current"))?;
        // SAFETY: `stream` is torch's current stream of device `ordinal`, whose context is
        // the device's primary context, the one `Device::open` retains; torch keeps its
        // streams alive for the process, and the wrapper does not destroy it.
        let s = unsafe { ctx.wrap_borrowed_stream(stream as cudarc::driver::sys::CUstream) };
        f(&dev, &s)
    })
    .map_err(py_err)
}

fn scale_of(softmax_scale: Option<f64>, head_dim: usize, causal: bool) -> AttnParams {
    let mut p = AttnParams::default_for(head_dim, causal);
    if let Some(s) = softmax_scale {
        p.scale = s as f32;
    }
    p
}

/// The output dtype of the path `q` and `k` take (validation refuses a pair with none; the
/// guess only lets it say so).
fn out_dtype(q: &TensorDesc, k: &TensorDesc) -> DType {
    Precision::from_types(q.dtype, k.dtype).map_or(q.dtype, Precision::out)
}

fn descales(
    ds: [&Option<Arg>; 3],
) -> PyResult<[Option<fp8_sdpa::runtime::validate::DescaleDesc>; 3]> {
    let [q, k, v] = ds.map(|d| d.as_ref().map(Arg::descale).transpose());
    Ok([q?, k?, v?])
}

/// A contiguous BSHD description at `ptr`.
fn contiguous(ptr: u64, dtype: DType, shape: [usize; 4]) -> TensorDesc {
    let [b, s, h, d] = shape;
    TensorDesc {
        ptr,
        bytes: b * s * h * d * dtype.size(),
        dtype,
        shape,
        strides: [s * h * d, h * d, d, 1],
    }
}

fn plan_dict<'py>(py: Python<'py>, v: &Validated, scale: f32) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let s = &v.shape;
    d.set_item("precision", v.precision.name())?;
    d.set_item("out_dtype", Elem::Lib(v.precision.out()).torch_name())?;
    d.set_item("batch", s.batch)?;
    d.set_item("seqlen_q", s.seq_q)?;
    d.set_item("seqlen_k", s.seq_kv)?;
    d.set_item("nheads", s.heads_q)?;
    d.set_item("nheads_k", s.heads_kv)?;
    d.set_item("headdim", s.head_dim)?;
    d.set_item("softmax_scale", scale)?;
    Ok(d)
}

/// The present ones of optional arguments.
fn all<const N: usize>(xs: [&Option<Arg>; N]) -> impl Iterator<Item = &Arg> {
    xs.into_iter().filter_map(Option::as_ref)
}

// ---------------------------------------------------------------- dense

struct DenseArgs {
    q: Arg,
    k: Arg,
    v: Arg,
    ds: [Option<Arg>; 3],
}

fn dense_args(
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    ds: [Option<&Bound<'_, PyAny>>; 3],
) -> PyResult<DenseArgs> {
    Ok(DenseArgs {
        q: Arg::read("q", q)?,
        k: Arg::read("k", k)?,
        v: Arg::read("v", v)?,
        ds: [
            Arg::opt("q_descale", ds[0])?,
            Arg::opt("k_descale", ds[1])?,
            Arg::opt("v_descale", ds[2])?,
        ],
    })
}

/// Validates a `flash_attn_func` call before its outputs exist; returns the problem, the
/// output dtype and the scale.
#[pyfunction]
#[pyo3(signature = (q, k, v, q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=false, return_lse=false))]
#[allow(clippy::too_many_arguments)]
fn plan_dense<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    q_descale: Option<&Bound<'py, PyAny>>,
    k_descale: Option<&Bound<'py, PyAny>>,
    v_descale: Option<&Bound<'py, PyAny>>,
    softmax_scale: Option<f64>,
    causal: bool,
    return_lse: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let a = dense_args(q, k, v, [q_descale, k_descale, v_descale])?;
    let mut inputs = vec![&a.q, &a.k, &a.v];
    inputs.extend(all([&a.ds[0], &a.ds[1], &a.ds[2]]));
    one_device(&inputs, 0)?;
    let (qd, kd, vd) = (a.q.bshd()?, a.k.bshd()?, a.v.bshd()?);
    let mut at = Placer::after(&inputs)?;
    let o = contiguous(0, out_dtype(&qd, &kd), qd.shape);
    let o = TensorDesc {
        ptr: at.take(o.bytes)?,
        ..o
    };
    let [b, s, h, _] = qd.shape;
    let lse = if return_lse {
        Some((at.take(b * h * s * 4)?, b * h * s))
    } else {
        None
    };
    let params = scale_of(softmax_scale, qd.shape[3], causal);
    let io = Io {
        q: qd,
        k: kd,
        v: vd,
        o,
        lse,
        descales: descales([&a.ds[0], &a.ds[1], &a.ds[2]])?,
        params,
    };
    let valid = calls::check_dense(&io).map_err(py_err)?;
    plan_dict(py, &valid, params.scale)
}

/// Validates and launches a `flash_attn_func` call on `stream` (a CUstream handle) of GPU
/// `device` (where no tensor names its index); returns the kernel's key.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, q_descale, k_descale, v_descale, softmax_scale, causal, device, stream, check))]
#[allow(clippy::too_many_arguments)]
fn run_dense(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    lse: Option<&Bound<'_, PyAny>>,
    q_descale: Option<&Bound<'_, PyAny>>,
    k_descale: Option<&Bound<'_, PyAny>>,
    v_descale: Option<&Bound<'_, PyAny>>,
    softmax_scale: Option<f64>,
    causal: bool,
    device: usize,
    stream: usize,
    check: bool,
) -> PyResult<String> {
    let a = dense_args(q, k, v, [q_descale, k_descale, v_descale])?;
    let o = Arg::read("out", out)?;
    let l = Arg::opt("softmax_lse", lse)?;
    let mut on = vec![&a.q, &a.k, &a.v, &o];
    on.extend(all([&l, &a.ds[0], &a.ds[1], &a.ds[2]]));
    let ordinal = one_device(&on, device)?;
    let qd = a.q.bshd()?;
    let io = Io {
        q: qd,
        k: a.k.bshd()?,
        v: a.v.bshd()?,
        o: o.bshd()?,
        lse: l.as_ref().map(Arg::f32_vec).transpose()?,
        descales: descales([&a.ds[0], &a.ds[1], &a.ds[2]])?,
        params: scale_of(softmax_scale, qd.shape[3], causal),
    };
    // Validation first: a bad call fails without touching the device.
    calls::check_dense(&io).map_err(py_err)?;
    let opts = calls::options(check);
    // SAFETY: the descriptions are of the caller's live torch tensors on `device`, which
    // the Python layer holds for the call; torch orders them on its current stream, the one
    // passed here, and its caching allocator reuses memory only in that stream's order.
    let launched = on_stream(py, ordinal, stream, move |dev, s| unsafe {
        calls::run_dense(dev, s, &io, opts)
    })?;
    Ok(launched.spec.key())
}

// ---------------------------------------------------------------- varlen

/// Validates a `flash_attn_varlen_func` call before its outputs exist (the offsets are read
/// on the device, by `run_varlen`).
#[pyfunction]
#[pyo3(signature = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=false, return_lse=false))]
#[allow(clippy::too_many_arguments)]
fn plan_varlen<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    cu_seqlens_q: &Bound<'py, PyAny>,
    cu_seqlens_k: &Bound<'py, PyAny>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    q_descale: Option<&Bound<'py, PyAny>>,
    k_descale: Option<&Bound<'py, PyAny>>,
    v_descale: Option<&Bound<'py, PyAny>>,
    softmax_scale: Option<f64>,
    causal: bool,
    return_lse: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let a = dense_args(q, k, v, [q_descale, k_descale, v_descale])?;
    let (cq, ck) = (
        Arg::read("cu_seqlens_q", cu_seqlens_q)?,
        Arg::read("cu_seqlens_k", cu_seqlens_k)?,
    );
    let mut inputs = vec![&a.q, &a.k, &a.v, &cq, &ck];
    inputs.extend(all([&a.ds[0], &a.ds[1], &a.ds[2]]));
    one_device(&inputs, 0)?;
    let (qd, kd, vd) = (a.q.packed()?, a.k.packed()?, a.v.packed()?);
    let mut at = Placer::after(&inputs)?;
    let [_, t, h, d] = qd.shape;
    let o = contiguous(0, out_dtype(&qd, &kd), qd.shape);
    let o = TensorDesc {
        ptr: at.take(o.bytes)?,
        strides: [0, h * d, d, 1],
        ..o
    };
    let lse = if return_lse {
        Some((at.take(h * t * 4)?, h * t))
    } else {
        None
    };
    let params = scale_of(softmax_scale, d, causal);
    let io = Io {
        q: qd,
        k: kd,
        v: vd,
        o,
        lse,
        descales: descales([&a.ds[0], &a.ds[1], &a.ds[2]])?,
        params,
    };
    let vl = Varlen {
        cu_seqlens_q: cq.idx()?,
        cu_seqlens_k: ck.idx()?,
        max_seqlen_q,
        max_seqlen_k,
    };
    let valid = calls::check_varlen(&io, &vl).map_err(py_err)?;
    plan_dict(py, &valid, params.scale)
}

/// Validates and launches a `flash_attn_varlen_func` call (see `run_dense`).
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q_descale, k_descale, v_descale, softmax_scale, causal, device, stream, check))]
#[allow(clippy::too_many_arguments)]
fn run_varlen(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    lse: Option<&Bound<'_, PyAny>>,
    cu_seqlens_q: &Bound<'_, PyAny>,
    cu_seqlens_k: &Bound<'_, PyAny>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    q_descale: Option<&Bound<'_, PyAny>>,
    k_descale: Option<&Bound<'_, PyAny>>,
    v_descale: Option<&Bound<'_, PyAny>>,
    softmax_scale: Option<f64>,
    causal: bool,
    device: usize,
    stream: usize,
    check: bool,
) -> PyResult<String> {
    let a = dense_args(q, k, v, [q_descale, k_descale, v_descale])?;
    let o = Arg::read("out", out)?;
    let l = Arg::opt("softmax_lse", lse)?;
    let (cq, ck) = (
        Arg::read("cu_seqlens_q", cu_seqlens_q)?,
        Arg::read("cu_seqlens_k", cu_seqlens_k)?,
    );
    let mut on = vec![&a.q, &a.k, &a.v, &o, &cq, &ck];
    on.extend(all([&l, &a.ds[0], &a.ds[1], &a.ds[2]]));
    let ordinal = one_device(&on, device)?;
    let qd = a.q.packed()?;
    let io = Io {
        q: qd,
        k: a.k.packed()?,
        v: a.v.packed()?,
        o: o.packed()?,
        lse: l.as_ref().map(Arg::f32_vec).transpose()?,
        descales: descales([&a.ds[0], &a.ds[1], &a.ds[2]])?,
        params: scale_of(softmax_scale, qd.shape[3], causal),
    };
    let vl = Varlen {
        cu_seqlens_q: cq.idx()?,
        cu_seqlens_k: ck.idx()?,
        max_seqlen_q,
        max_seqlen_k,
    };
    calls::check_varlen(&io, &vl).map_err(py_err)?;
    let opts = calls::options(check);
    // SAFETY: as in run_dense; the offset arrays are live torch int32 tensors too.
    let launched = on_stream(py, ordinal, stream, move |dev, s| unsafe {
        calls::run_varlen(dev, s, &io, &vl, opts)
    })?;
    Ok(launched.spec.key())
}

// ---------------------------------------------------------------- kv cache

/// Page sizes the library's paged cache takes.
const PAGE_SIZES: std::ops::RangeInclusive<usize> = 16..=256;

/// How a dense cache `(batch, seqlen_cache, nheads_k, headdim)` is read as pages: `page_size`
/// rows each, sequence b's page j being pool page `b * batch_pages + j`.
#[derive(Debug, Clone, Copy)]
struct DenseCache {
    page_size: usize,
    batch_pages: usize,
    pages_per_seq: usize,
}

/// The batch stride of `t` in pages of `p` rows, if its sequences start on page boundaries.
fn batch_pages(t: &TensorDesc, p: usize) -> Option<usize> {
    let [b, s, _, _] = t.shape;
    let [sb, ss, _, _] = t.strides;
    if s % p != 0 {
        return None;
    }
    if b == 1 {
        return Some(s / p);
    }
    let page = p.checked_mul(ss).filter(|&n| n > 0)?;
    (sb % page == 0).then_some(sb / page)
}

/// The page geometry of dense caches `k`, `v`: `page_size` if given, else the largest page
/// size that divides both into pages with one block table.
fn dense_cache(k: &TensorDesc, v: &TensorDesc, page_size: Option<usize>) -> PyResult<DenseCache> {
    let s = k.shape[1];
    let fits = |p: usize| match (batch_pages(k, p), batch_pages(v, p)) {
        (Some(a), Some(b)) if a == b && PAGE_SIZES.contains(&p) => Some(DenseCache {
            page_size: p,
            batch_pages: a,
            pages_per_seq: s / p,
        }),
        _ => None,
    };
    let found = match page_size {
        Some(p) => fits(p),
        None => PAGE_SIZES.rev().find_map(fits),
    };
    found.ok_or_else(|| {
        PyValueError::new_err(format!(
            "k_cache {:?} (strides {:?}) and v_cache {:?} (strides {:?}) without a block_table \
             are read as pages of 16..=256 rows, so seqlen_cache ({s}) must have a divisor in \
             that range (any multiple of 16 has) and each sequence must start a page (batch \
             stride a multiple of the page's); pad the cache or pass a block_table",
            k.shape, k.strides, v.shape, v.strides
        ))
    })
}

/// A dense cache as the pool of its pages `[pages, page_size, heads, dim]`.
fn as_pool(t: &TensorDesc, g: &DenseCache) -> TensorDesc {
    let [b, _, h, d] = t.shape;
    let [_, ss, sh, sd] = t.strides;
    TensorDesc {
        shape: [(b - 1) * g.batch_pages + g.pages_per_seq, g.page_size, h, d],
        strides: [g.page_size * ss, ss, sh, sd],
        ..*t
    }
}

struct CacheArgs {
    q: Arg,
    k: Arg,
    v: Arg,
    table: Option<Arg>,
    lens: Option<Arg>,
    ds: [Option<Arg>; 3],
}

#[allow(clippy::too_many_arguments)]
fn cache_args(
    q: &Bound<'_, PyAny>,
    k_cache: &Bound<'_, PyAny>,
    v_cache: &Bound<'_, PyAny>,
    cache_seqlens: Option<&Bound<'_, PyAny>>,
    block_table: Option<&Bound<'_, PyAny>>,
    ds: [Option<&Bound<'_, PyAny>>; 3],
) -> PyResult<CacheArgs> {
    Ok(CacheArgs {
        q: Arg::read("q", q)?,
        k: Arg::read("k_cache", k_cache)?,
        v: Arg::read("v_cache", v_cache)?,
        lens: Arg::opt("cache_seqlens", cache_seqlens)?,
        table: Arg::opt("block_table", block_table)?,
        ds: [
            Arg::opt("q_descale", ds[0])?,
            Arg::opt("k_descale", ds[1])?,
            Arg::opt("v_descale", ds[2])?,
        ],
    })
}

impl CacheArgs {
    fn inputs(&self) -> Vec<&Arg> {
        let mut v = vec![&self.q, &self.k, &self.v];
        v.extend(all([
            &self.table,
            &self.lens,
            &self.ds[0],
            &self.ds[1],
            &self.ds[2],
        ]));
        v
    }

    /// The pools and, for a dense cache, its page geometry (`page_size` as planned).
    fn pools(
        &self,
        page_size: Option<usize>,
    ) -> PyResult<(TensorDesc, TensorDesc, Option<DenseCache>)> {
        let (k, v) = (self.k.bshd()?, self.v.bshd()?);
        if self.table.is_some() && page_size.is_none() {
            return Ok((k, v, None));
        }
        let qb = self.q.shape.first().copied().unwrap_or(0);
        if k.shape[0] != qb {
            return bad(format!(
                "k_cache's batch {} differs from q's {qb}; fp8-sdpa has no cache_batch_idx: \
                 pass a block_table, or a cache with one row per sequence",
                k.shape[0]
            ));
        }
        if k.shape != v.shape {
            return bad(format!(
                "k_cache shape {:?} and v_cache shape {:?} differ",
                k.shape, v.shape
            ));
        }
        let g = dense_cache(&k, &v, page_size)?;
        Ok((as_pool(&k, &g), as_pool(&v, &g), Some(g)))
    }

    /// The table's rows and pages per row.
    fn table(&self) -> PyResult<((u64, usize), usize)> {
        let t = self.table.as_ref().ok_or_else(|| {
            PyValueError::new_err("block_table is needed here (the Python layer builds one)")
        })?;
        if t.shape.len() != 2 {
            return bad(format!(
                "block_table must be 2-d (batch, max_num_blocks_per_seq), got shape {:?}",
                t.shape
            ));
        }
        Ok((t.idx()?, t.shape[1]))
    }
}

fn bad<T>(msg: String) -> PyResult<T> {
    Err(PyValueError::new_err(msg))
}

/// Validates a `flash_attn_with_kvcache` call before its outputs (and, for a dense cache,
/// its block table and lengths) exist. For a dense cache the plan has `page_size`,
/// `batch_pages` and `pages_per_seq`: the Python layer builds the table
/// `b * batch_pages + j` from them.
#[pyfunction]
#[pyo3(signature = (q, k_cache, v_cache, cache_seqlens=None, block_table=None, q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=false, return_lse=false))]
#[allow(clippy::too_many_arguments)]
fn plan_kvcache<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k_cache: &Bound<'py, PyAny>,
    v_cache: &Bound<'py, PyAny>,
    cache_seqlens: Option<&Bound<'py, PyAny>>,
    block_table: Option<&Bound<'py, PyAny>>,
    q_descale: Option<&Bound<'py, PyAny>>,
    k_descale: Option<&Bound<'py, PyAny>>,
    v_descale: Option<&Bound<'py, PyAny>>,
    softmax_scale: Option<f64>,
    causal: bool,
    return_lse: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let a = cache_args(
        q,
        k_cache,
        v_cache,
        cache_seqlens,
        block_table,
        [q_descale, k_descale, v_descale],
    )?;
    let inputs = a.inputs();
    one_device(&inputs, 0)?;
    let qd = a.q.bshd()?;
    let (kp, vp, dense) = a.pools(None)?;
    let mut at = Placer::after(&inputs)?;
    let [b, s, h, d] = qd.shape;
    let (table, max_pages) = match dense {
        Some(g) => {
            let n = b * g.pages_per_seq;
            ((at.take(n * 4)?, n), g.pages_per_seq)
        }
        None => a.table()?,
    };
    let lens = match &a.lens {
        Some(l) => l.idx()?,
        None => (at.take(b * 4)?, b),
    };
    let o = contiguous(0, out_dtype(&qd, &kp), qd.shape);
    let o = TensorDesc {
        ptr: at.take(o.bytes)?,
        ..o
    };
    let lse = if return_lse {
        Some((at.take(b * h * s * 4)?, b * h * s))
    } else {
        None
    };
    let params = scale_of(softmax_scale, d, causal);
    let io = Io {
        q: qd,
        k: kp,
        v: vp,
        o,
        lse,
        descales: descales([&a.ds[0], &a.ds[1], &a.ds[2]])?,
        params,
    };
    let p = Paged {
        block_table: table,
        max_pages,
        seqlens_k: lens,
    };
    let valid = calls::check_paged(&io, &p).map_err(py_err)?;
    let out = plan_dict(py, &valid, params.scale)?;
    out.set_item("max_pages", max_pages)?;
    out.set_item("page_size", kp.shape[1])?;
    if let Some(g) = dense {
        out.set_item("batch_pages", g.batch_pages)?;
        out.set_item("pages_per_seq", g.pages_per_seq)?;
    }
    Ok(out)
}

/// Validates and launches a `flash_attn_with_kvcache` call (see `run_dense`). `page_size`:
/// the caches are dense and `block_table` is the one built from the plan.
#[pyfunction]
#[pyo3(signature = (q, k_cache, v_cache, out, lse, cache_seqlens, block_table, page_size, q_descale, k_descale, v_descale, softmax_scale, causal, device, stream, check))]
#[allow(clippy::too_many_arguments)]
fn run_kvcache(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k_cache: &Bound<'_, PyAny>,
    v_cache: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    lse: Option<&Bound<'_, PyAny>>,
    cache_seqlens: &Bound<'_, PyAny>,
    block_table: &Bound<'_, PyAny>,
    page_size: Option<usize>,
    q_descale: Option<&Bound<'_, PyAny>>,
    k_descale: Option<&Bound<'_, PyAny>>,
    v_descale: Option<&Bound<'_, PyAny>>,
    softmax_scale: Option<f64>,
    causal: bool,
    device: usize,
    stream: usize,
    check: bool,
) -> PyResult<String> {
    let a = cache_args(
        q,
        k_cache,
        v_cache,
        Some(cache_seqlens),
        Some(block_table),
        [q_descale, k_descale, v_descale],
    )?;
    let o = Arg::read("out", out)?;
    let l = Arg::opt("softmax_lse", lse)?;
    let mut on = a.inputs();
    on.push(&o);
    on.extend(all([&l]));
    let ordinal = one_device(&on, device)?;
    let qd = a.q.bshd()?;
    let (kp, vp, _) = a.pools(page_size)?;
    let (table, max_pages) = a.table()?;
    let lens = a.lens.as_ref().map(Arg::idx).transpose()?.unwrap_or((0, 0));
    let io = Io {
        q: qd,
        k: kp,
        v: vp,
        o: o.bshd()?,
        lse: l.as_ref().map(Arg::f32_vec).transpose()?,
        descales: descales([&a.ds[0], &a.ds[1], &a.ds[2]])?,
        params: scale_of(softmax_scale, qd.shape[3], causal),
    };
    let p = Paged {
        block_table: table,
        max_pages,
        seqlens_k: lens,
    };
    calls::check_paged(&io, &p).map_err(py_err)?;
    let opts = calls::options(check);
    // SAFETY: as in run_dense; the pools are views of the caches' own elements (as_pool
    // keeps their span), and the table and lengths are live torch int32 tensors.
    let launched = on_stream(py, ordinal, stream, move |dev, s| unsafe {
        calls::run_paged(dev, s, &io, &p, opts)
    })?;
    Ok(launched.spec.key())
}

// ---------------------------------------------------------------- quantizer

fn quant_buffers(
    x: &Arg,
    codes: Option<&Arg>,
    descales: Option<&Arg>,
    scratch: Option<&Arg>,
    at: &mut Placer,
) -> PyResult<quant::Buffers> {
    let xd = x.bshd()?;
    let [b, s, h, d] = xd.shape;
    let pairs = b * h;
    let mut place = |a: Option<&Arg>, elem: Elem, n: usize| -> PyResult<(u64, usize)> {
        match a {
            Some(a) if a.elem != elem => bad(format!(
                "{} must be {}, got {}",
                a.name,
                elem.torch_name(),
                a.elem.torch_name()
            )),
            Some(a) if !a.is_row_major() => bad(format!("{} must be contiguous", a.name)),
            Some(a) => Ok((a.ptr, a.numel())),
            None => Ok((at.take(n * elem.size())?, n)),
        }
    };
    Ok(quant::Buffers {
        x: xd,
        codes: place(codes, Elem::Lib(DType::E4m3), b * s * h * d)?,
        descales: place(descales, Elem::Lib(DType::F32), pairs)?,
        amax: place(scratch, Elem::I32, pairs)?,
    })
}

/// Validates a quantizer call before its outputs exist.
#[pyfunction]
fn plan_quantize<'py>(py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let x = Arg::read("x", x)?;
    let mut at = Placer::after(&[&x])?;
    let b = quant_buffers(&x, None, None, None, &mut at)?;
    quant::check(&b).map_err(py_err)?;
    let d = PyDict::new(py);
    d.set_item("batch", b.x.shape[0])?;
    d.set_item("nheads", b.x.shape[2])?;
    Ok(d)
}

/// Quantizes `x` `(batch, seqlen, nheads, headdim)` fp16/bf16 into `codes` (float8_e4m3fn,
/// contiguous, x's shape) and `descales` (float32 `(batch, nheads)`), with `scratch` a zeroed
/// int32 `(batch, nheads)`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn run_quantize(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    codes: &Bound<'_, PyAny>,
    descales: &Bound<'_, PyAny>,
    scratch: &Bound<'_, PyAny>,
    device: usize,
    stream: usize,
) -> PyResult<()> {
    let x = Arg::read("x", x)?;
    let c = Arg::read("codes", codes)?;
    let d = Arg::read("descales", descales)?;
    let s = Arg::read("scratch", scratch)?;
    let ordinal = one_device(&[&x, &c, &d, &s], device)?;
    let mut unused = Placer::after(&[])?;
    let b = quant_buffers(&x, Some(&c), Some(&d), Some(&s), &mut unused)?;
    quant::check(&b).map_err(py_err)?;
    // SAFETY: the buffers are the caller's live torch tensors (codes, descales and scratch
    // fresh, the scratch zeroed), ordered on torch's current stream, passed here.
    on_stream(py, ordinal, stream, move |dev, st| unsafe {
        quant::run(dev, st, &b)
    })
}

// ---------------------------------------------------------------- introspection

/// How the bindings read a tensor: (dtype, shape, strides, bytes) of the library's BSHD
/// description (`packed`: a varlen tensor `(total, nheads, headdim)`).
#[pyfunction]
#[pyo3(signature = (t, packed=false))]
#[allow(clippy::type_complexity)]
fn describe(
    t: &Bound<'_, PyAny>,
    packed: bool,
) -> PyResult<(String, [usize; 4], [usize; 4], usize)> {
    let a = Arg::read("tensor", t)?;
    let d = if packed { a.packed()? } else { a.bshd()? };
    Ok((d.dtype.name().to_string(), d.shape, d.strides, d.bytes))
}

/// How many CUDA devices the driver sees (0 without a driver).
#[pyfunction]
fn device_count() -> usize {
    Device::count()
}

/// A `reshape_and_cache_flash` call's descriptions: new K and V packed `(tokens, heads,
/// dim)`, the pools `(pages, page_size, heads, dim)`, the int32 slots, the descales (E4M3).
struct WriteArgs {
    args: Vec<Arg>,
    k: TensorDesc,
    v: TensorDesc,
    kc: TensorDesc,
    vc: TensorDesc,
    slots: (u64, usize),
    descales: Option<[(u64, usize); 2]>,
}

fn write_args(
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    key_cache: &Bound<'_, PyAny>,
    value_cache: &Bound<'_, PyAny>,
    slot_mapping: &Bound<'_, PyAny>,
    k_descale: Option<&Bound<'_, PyAny>>,
    v_descale: Option<&Bound<'_, PyAny>>,
) -> PyResult<WriteArgs> {
    let k = Arg::read("key", key)?;
    let v = Arg::read("value", value)?;
    let kc = Arg::read("key_cache", key_cache)?;
    let vc = Arg::read("value_cache", value_cache)?;
    let slots = Arg::read("slot_mapping", slot_mapping)?;
    let kd = Arg::opt("k_scale", k_descale)?;
    let vd = Arg::opt("v_scale", v_descale)?;
    let descales = match (&kd, &vd) {
        (Some(a), Some(b)) => Some([a.f32_vec()?, b.f32_vec()?]),
        (None, None) => None,
        _ => return bad("give both k_scale and v_scale, or neither".into()),
    };
    let (k_desc, v_desc, kc_desc, vc_desc) = (k.packed()?, v.packed()?, kc.bshd()?, vc.bshd()?);
    let slots_desc = slots.idx()?;
    let mut args = vec![k, v, kc, vc, slots];
    args.extend(kd.into_iter().chain(vd));
    Ok(WriteArgs {
        args,
        k: k_desc,
        v: v_desc,
        kc: kc_desc,
        vc: vc_desc,
        slots: slots_desc,
        descales,
    })
}

/// Validates a `reshape_and_cache_flash` call (no GPU).
#[pyfunction]
#[pyo3(signature = (key, value, key_cache, value_cache, slot_mapping, k_descale=None, v_descale=None))]
fn plan_write_kv(
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    key_cache: &Bound<'_, PyAny>,
    value_cache: &Bound<'_, PyAny>,
    slot_mapping: &Bound<'_, PyAny>,
    k_descale: Option<&Bound<'_, PyAny>>,
    v_descale: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let w = write_args(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        k_descale,
        v_descale,
    )?;
    fp8_sdpa::runtime::cache_write::plan_write(&w.k, &w.v, &w.kc, &w.vc, w.slots, w.descales)
        .map(|_| ())
        .map_err(py_err)
}

/// Validates and launches a `reshape_and_cache_flash` call on `stream` of GPU `device`.
#[pyfunction]
#[pyo3(signature = (key, value, key_cache, value_cache, slot_mapping, k_descale, v_descale, device, stream, check))]
#[allow(clippy::too_many_arguments)]
fn run_write_kv(
    py: Python<'_>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    key_cache: &Bound<'_, PyAny>,
    value_cache: &Bound<'_, PyAny>,
    slot_mapping: &Bound<'_, PyAny>,
    k_descale: Option<&Bound<'_, PyAny>>,
    v_descale: Option<&Bound<'_, PyAny>>,
    device: usize,
    stream: usize,
    check: bool,
) -> PyResult<()> {
    let w = write_args(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        k_descale,
        v_descale,
    )?;
    let on: Vec<&Arg> = w.args.iter().collect();
    let ordinal = one_device(&on, device)?;
    fp8_sdpa::runtime::cache_write::plan_write(&w.k, &w.v, &w.kc, &w.vc, w.slots, w.descales)
        .map_err(py_err)?;
    let opts = calls::options(check);
    let (k, v, kc, vc, slots, descales) = (w.k, w.v, w.kc, w.vc, w.slots, w.descales);
    on_stream(py, ordinal, stream, move |dev, s| {
        use fp8_sdpa::runtime::{Descale, IdxRef, PagedKvWrite, TensorMut, TensorRef, VecRef};
        // SAFETY: the descriptions are of the caller's live torch tensors on `device`, which the
        // Python layer holds for the call, ordered on torch's current stream (`s`); validation
        // (plan_write, again in write_paged_kv) proved every access inside them.
        let w = unsafe {
            let mut w = PagedKvWrite::new(
                TensorRef::from_raw(k, s),
                TensorRef::from_raw(v, s),
                TensorMut::from_raw(kc, s),
                TensorMut::from_raw(vc, s),
                IdxRef::from_raw(slots.0, slots.1, s),
            );
            if let Some([a, b]) = descales {
                w = w.with_descales(
                    Descale::per_head(VecRef::from_raw(a.0, a.1, s)),
                    Descale::per_head(VecRef::from_raw(b.0, b.1, s)),
                );
            }
            w
        };
        dev.write_paged_kv(s, &w, opts)
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(plan_dense, m)?)?;
    m.add_function(wrap_pyfunction!(run_dense, m)?)?;
    m.add_function(wrap_pyfunction!(plan_varlen, m)?)?;
    m.add_function(wrap_pyfunction!(run_varlen, m)?)?;
    m.add_function(wrap_pyfunction!(plan_kvcache, m)?)?;
    m.add_function(wrap_pyfunction!(run_kvcache, m)?)?;
    m.add_function(wrap_pyfunction!(plan_write_kv, m)?)?;
    m.add_function(wrap_pyfunction!(run_write_kv, m)?)?;
    m.add_function(wrap_pyfunction!(plan_quantize, m)?)?;
    m.add_function(wrap_pyfunction!(run_quantize, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    Ok(())
}
