//! `sdpa-lab attn`: one forward pass on the user's tensors from a safetensors file.

use crate::attn_io;
use cudarc::driver::{CudaSlice, CudaStream};
use fp8_sdpa::runtime::{
    Attention, AttentionVarlen, CallOptions, Descale, Device, IdxRef, KernelChoice, Launched,
    PagedAttention, PagedAttentionVarlen, PagedKv, TensorMut, TensorRef, VecMut, VecRef,
};
use fp8_sdpa::{AttnParams, Error, Layout, Precision, Variant};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Arguments of `attn`.
#[derive(clap::Args)]
#[command(after_help = format!("{PAGED_HELP}\n\n{VARLEN_HELP}"))]
pub struct Args {
    /// Input file: q with k, v (and q_descale, k_descale, v_descale for FP8 inputs), or q with
    /// a paged KV cache (k_cache, v_cache, block_table, seqlens_k; with cu_seqlens_q and a
    /// packed 3-d q, variable-length queries), or a variable-length batch (packed q, k, v with
    /// cu_seqlens_q, cu_seqlens_k); see below.
    #[arg(long)]
    pub inputs: PathBuf,
    /// Output file: tensor o (and lse with --lse).
    #[arg(long)]
    pub out: PathBuf,
    /// Causal mask, aligned bottom-right (FlashAttention's convention); with a paged cache,
    /// per sequence: query i sees key j iff j <= i + seqlens_k[b] - seq_q (variable-length
    /// queries: n_q of sequence b in place of seq_q); with a varlen batch, per sequence of n_q
    /// queries and n_k keys: j <= i + n_k - n_q.
    #[arg(long)]
    pub causal: bool,
    /// Softmax scale (default 1/sqrt(head_dim)).
    #[arg(long)]
    pub scale: Option<f32>,
    /// Memory order of q, k, v and o in the files (a paged cache keeps its own order; a varlen
    /// file is packed [total_tokens, heads, dim] and takes bshd only).
    #[arg(long, default_value = "bshd", value_parser = parse_layout)]
    pub layout: Layout,
    /// Kernel variant: a key (`portable.m128.n32.w4.s2.b2.ctelx`) or the Variant as JSON
    /// (default: the shipped default for the problem). A paged cache takes decode variants
    /// only (`decode.m16.n32.w2.s4.b4.cex`), a varlen batch portable or decode ones (not the
    /// persistent decoupled-sync `...pedx` streams).
    #[arg(long)]
    pub variant: Option<String>,
    /// Also write the per-row log-sum-exp as `lse`.
    #[arg(long)]
    pub lse: bool,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

/// The paged form of the input file, for `--help`.
const PAGED_HELP: &str = "\
Paged KV cache: in place of k and v, the input file may hold
  k_cache, v_cache  [pages, page_size, heads_kv, dim]  F16, BF16, or F8_E4M3 with
                    k_descale, v_descale F32 [heads_kv] (or [batch, heads_kv])
  block_table       I32 [batch, max_pages]: key j of sequence b is row j % page_size
                    of page block_table[b][j / page_size]
  seqlens_k         I32 [batch]: keys of each sequence (<= max_pages * page_size)
with q [batch, seq_q, heads_q, dim] (F16 or BF16) as usual. The decode kernels run it;
o (and lse) are written as for k and v. page_size is 16..=256.
Variable-length queries over a paged cache: add
  cu_seqlens_q      I32 [batch + 1]: sequence b is query tokens cu_seqlens_q[b]..cu_seqlens_q[b + 1]
with q packed [total_q, heads_q, dim] (3-d, --layout bshd) and block_table, seqlens_k and
per-sequence descales counting batch sequences: one call for sequences with different query
counts (1 decode token, a few speculative ones) and cache lengths. Writes o
[total_q, heads_q, dim] and, with --lse, lse F32 [heads_q, total_q].";

/// The varlen form of the input file, for `--help`.
const VARLEN_HELP: &str = "\
Variable-length batch (FlashAttention's varlen convention): the input file may hold
  q                 [total_q, heads_q, dim]  the sequences' queries packed one after another
  k, v              [total_k, heads_kv, dim] their keys and values, likewise (3-d)
  cu_seqlens_q      I32 [batch + 1]: sequence b is query tokens cu_seqlens_q[b]..cu_seqlens_q[b + 1]
  cu_seqlens_k      I32 [batch + 1]: and keys cu_seqlens_k[b]..cu_seqlens_k[b + 1]
with q_descale, k_descale, v_descale F32 [heads] or [batch, heads] for FP8 inputs. Offsets
start at 0, never decrease and end at total_q / total_k. Each sequence attends to its own
keys (--causal: bottom-right per sequence). Writes o [total_q, heads_q, dim] and, with --lse,
lse F32 [heads_q, total_q]. The decode kernels run decode-shaped batches (few query rows per
kv head, 1k keys or more in the longest sequence); the others run on the Hopper kernels on
sm_90a for fp16/bf16 at head dims 64 and 128, else on the portable kernels.";

fn parse_layout(s: &str) -> Result<Layout, String> {
    match s {
        "bshd" => Ok(Layout::Bshd),
        "bhsd" => Ok(Layout::Bhsd),
        _ => Err(format!("unknown layout '{s}': expected bshd or bhsd")),
    }
}

/// A variant from its key or its JSON form.
pub fn parse_variant(s: &str) -> fp8_sdpa::Result<Variant> {
    if s.trim_start().starts_with('{') {
        let v: Variant = serde_json::from_str(s)
            .map_err(|e| Error::InvalidInput(format!("--variant JSON: {e}")))?;
        v.validate()?;
        Ok(v)
    } else {
        s.parse()
    }
}

/// The parts of a call that every input form shares (a varlen file's q and o are one packed
/// "batch", `[1, total_q, heads_q, dim]`).
struct Shared<'a> {
    q: TensorRef<'a>,
    o: TensorMut<'a>,
    lse: Option<VecMut<'a>>,
    params: AttnParams,
    opts: CallOptions,
}

/// Runs the command.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let bytes = std::fs::read(&a.inputs).map_err(Error::io(&a.inputs))?;
    let input = attn_io::parse(&bytes, a.layout)
        .map_err(|e| Error::InvalidInput(format!("{}: {e}", a.inputs.display())))?;
    let kernel = match &a.variant {
        Some(k) => KernelChoice::Variant(parse_variant(k)?),
        None => KernelChoice::Auto,
    };
    let q = input.q();
    let [b, sq, hq, d] = q.shape;
    let params = AttnParams::new(a.scale.unwrap_or(1.0 / (d as f32).sqrt()), a.causal);
    // The problem's own faults (head dim, GQA ratio, shapes, lengths, scale, descales) are
    // named before a device is needed, in the library's words.
    attn_io::preflight::check(&input, a.layout, params, a.lse)?;
    let dev = crate::cmd::env::open_device(a.device).map_err(|e| {
        Error::Unsupported(format!(
            "the inputs are valid, but attn needs a GPU to run them: {e}"
        ))
    })?;
    let stream = dev.new_stream()?;
    let precision = Precision::from_types(q.dtype, input.kv_dtype()).ok_or_else(|| {
        Error::InvalidInput(format!(
            "no precision path takes q {} with K/V {}",
            q.dtype,
            input.kv_dtype()
        ))
    })?;
    let o_t = precision.out();
    let mut o = stream
        .alloc_zeros::<u8>(q.shape.iter().product::<usize>() * o_t.size())
        .map_err(Error::driver("allocating O"))?;
    let mut lse = stream
        .alloc_zeros::<f32>(b * hq * sq)
        .map_err(Error::driver("allocating LSE"))?;
    let launched = {
        let st: &CudaStream = &stream;
        let dq = upload(&stream, &q.bytes, "uploading Q")?;
        let shared = Shared {
            q: TensorRef::contiguous(&dq, st, q.dtype, q.shape, a.layout)?,
            o: TensorMut::contiguous(&mut o, st, o_t, q.shape, a.layout)?,
            lse: a.lse.then(|| VecMut::new(&mut lse, st)),
            params,
            opts: CallOptions::default()
                .with_kernel(kernel)
                .with_check_descales(true),
        };
        match &input {
            attn_io::AttnInput::Contiguous(f) => contiguous(&dev, &stream, f, shared, a.layout)?,
            attn_io::AttnInput::Paged(p) => paged(&dev, &stream, p, shared)?,
            attn_io::AttnInput::Varlen(v) => varlen(&dev, &stream, v, shared)?,
        }
    };
    let o_host = stream.clone_dtoh(&o).map_err(Error::driver("reading O"))?;
    let lse_host = stream
        .clone_dtoh(&lse)
        .map_err(Error::driver("reading LSE"))?;
    let out = match &input {
        attn_io::AttnInput::Varlen(_) => {
            attn_io::write_varlen(&o_host, o_t, [sq, hq, d], a.lse.then_some(&lse_host[..]))
        }
        attn_io::AttnInput::Paged(p) if p.cu_seqlens_q.is_some() => {
            attn_io::write_varlen(&o_host, o_t, [sq, hq, d], a.lse.then_some(&lse_host[..]))
        }
        _ => attn_io::write(
            &o_host,
            o_t,
            q.shape,
            a.layout,
            a.lse.then_some(&lse_host[..]),
        ),
    }
    .map_err(Error::InvalidInput)?;
    std::fs::write(&a.out, out).map_err(Error::io(&a.out))?;
    let kv = match &input {
        attn_io::AttnInput::Contiguous(_) => String::new(),
        attn_io::AttnInput::Paged(p) => match &p.cu_seqlens_q {
            Some(cu) => format!(
                " in {} sequences (longest {} queries) over a paged cache {:?}",
                cu.len() - 1,
                p.max_seqlen_q,
                p.k_cache.shape
            ),
            None => format!(" over a paged cache {:?}", p.k_cache.shape),
        },
        attn_io::AttnInput::Varlen(v) => format!(
            " in {} sequences (longest {} queries, {} keys)",
            v.batch(),
            v.max_seqlen_q,
            v.max_seqlen_k
        ),
    };
    eprintln!(
        "{} [{b}, {sq}, {hq}, {d}]{kv} with {} -> {}",
        precision,
        launched.spec.key(),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn upload<T: cudarc::driver::DeviceRepr>(
    st: &Arc<CudaStream>,
    host: &[T],
    what: &'static str,
) -> fp8_sdpa::Result<CudaSlice<T>> {
    st.clone_htod(host).map_err(Error::driver(what))
}

fn upload_descale(
    st: &Arc<CudaStream>,
    d: &Option<attn_io::FileDescale>,
) -> fp8_sdpa::Result<Option<CudaSlice<f32>>> {
    d.as_ref()
        .map(|d| upload(st, &d.values, "uploading descales"))
        .transpose()
}

fn descale<'a>(
    st: &'a CudaStream,
    on_device: &'a Option<CudaSlice<f32>>,
    file: &Option<attn_io::FileDescale>,
) -> Option<Descale<'a>> {
    on_device.as_ref().map(|s| {
        Descale::new(
            VecRef::new(s, st),
            file.as_ref().map_or(0, |d| d.batch_stride),
        )
    })
}

/// Contiguous K/V through [`Device::attention`]. Waits for the kernel: the inputs uploaded
/// here are freed on return.
fn contiguous(
    dev: &Device,
    st: &Arc<CudaStream>,
    f: &attn_io::AttnFile,
    s: Shared<'_>,
    layout: Layout,
) -> fp8_sdpa::Result<Launched> {
    let [_, k, v] = &f.qkv;
    let (dk, dv) = (
        upload(st, &k.bytes, "uploading K")?,
        upload(st, &v.bytes, "uploading V")?,
    );
    let ds = f
        .descales
        .iter()
        .map(|d| upload_descale(st, d))
        .collect::<fp8_sdpa::Result<Vec<_>>>()?;
    let call = Attention::new(
        s.q,
        TensorRef::contiguous(&dk, st, k.dtype, k.shape, layout)?,
        TensorRef::contiguous(&dv, st, v.dtype, v.shape, layout)?,
        s.o,
        s.params,
    )
    .with_lse(s.lse)
    .with_descales(
        descale(st, &ds[0], &f.descales[0]),
        descale(st, &ds[1], &f.descales[1]),
        descale(st, &ds[2], &f.descales[2]),
    );
    let launched = dev.attention(st, &call, s.opts)?;
    st.synchronize()
        .map_err(Error::driver("running attention"))?;
    Ok(launched)
}

/// A paged cache through [`Device::paged_attention`], or with variable-length queries
/// through [`Device::paged_attention_varlen`] (the decode family; a `--variant` of another
/// family is the library's error). Waits for the kernel, as [`contiguous`] does.
fn paged(
    dev: &Device,
    st: &Arc<CudaStream>,
    p: &attn_io::PagedFile,
    s: Shared<'_>,
) -> fp8_sdpa::Result<Launched> {
    let dk = upload(st, &p.k_cache.bytes, "uploading k_cache")?;
    let dv = upload(st, &p.v_cache.bytes, "uploading v_cache")?;
    let table = upload(st, &p.block_table, "uploading block_table")?;
    let lens = upload(st, &p.seqlens_k, "uploading seqlens_k")?;
    let ds = [
        upload_descale(st, &p.descales[0])?,
        upload_descale(st, &p.descales[1])?,
    ];
    // The caches are `[pages, page_size, heads_kv, dim]` whatever --layout says.
    let cache = |buf, t: &attn_io::FileTensor| {
        TensorRef::contiguous(buf, st, t.dtype, t.shape, Layout::Bshd)
    };
    let kv = PagedKv::new(
        cache(&dk, &p.k_cache)?,
        cache(&dv, &p.v_cache)?,
        IdxRef::new(&table, st),
        p.max_pages,
        IdxRef::new(&lens, st),
    );
    let (k_descale, v_descale) = (
        descale(st, &ds[0], &p.descales[0]),
        descale(st, &ds[1], &p.descales[1]),
    );
    let launched = if let Some(cu) = &p.cu_seqlens_q {
        let cu_q = upload(st, cu, "uploading cu_seqlens_q")?;
        // The packed q as one batch [1, total_q, heads_q, dim], as for a varlen file.
        let call = PagedAttentionVarlen::new(
            s.q,
            kv,
            s.o,
            IdxRef::new(&cu_q, st),
            p.max_seqlen_q,
            s.params,
        )
        .with_lse(s.lse)
        .with_kv_descales(k_descale, v_descale);
        dev.paged_attention_varlen(st, &call, s.opts)?
    } else {
        let call = PagedAttention::new(s.q, kv, s.o, s.params)
            .with_lse(s.lse)
            .with_kv_descales(k_descale, v_descale);
        dev.paged_attention(st, &call, s.opts)?
    };
    st.synchronize()
        .map_err(Error::driver("running attention"))?;
    Ok(launched)
}

/// A variable-length batch through [`Device::attention_varlen`] (the portable family; a
/// `--variant` of another family is the library's error). Waits for the kernel, as
/// [`contiguous`] does.
fn varlen(
    dev: &Device,
    st: &Arc<CudaStream>,
    f: &attn_io::VarlenFile,
    s: Shared<'_>,
) -> fp8_sdpa::Result<Launched> {
    let [_, k, v] = &f.qkv;
    let (dk, dv) = (
        upload(st, &k.bytes, "uploading K")?,
        upload(st, &v.bytes, "uploading V")?,
    );
    let cu_q = upload(st, &f.cu_seqlens_q, "uploading cu_seqlens_q")?;
    let cu_k = upload(st, &f.cu_seqlens_k, "uploading cu_seqlens_k")?;
    let ds = f
        .descales
        .iter()
        .map(|d| upload_descale(st, d))
        .collect::<fp8_sdpa::Result<Vec<_>>>()?;
    let packed = |buf, t: &attn_io::FileTensor| {
        let [_, n, h, d] = t.shape;
        TensorRef::packed(buf, st, t.dtype, [n, h, d])
    };
    let call = AttentionVarlen::new(
        s.q,
        packed(&dk, k)?,
        packed(&dv, v)?,
        s.o,
        [IdxRef::new(&cu_q, st), IdxRef::new(&cu_k, st)],
        [f.max_seqlen_q, f.max_seqlen_k],
        s.params,
    )
    .with_lse(s.lse)
    .with_descales(
        descale(st, &ds[0], &f.descales[0]),
        descale(st, &ds[1], &f.descales[1]),
        descale(st, &ds[2], &f.descales[2]),
    );
    let launched = dev.attention_varlen(st, &call, s.opts)?;
    st.synchronize()
        .map_err(Error::driver("running attention"))?;
    Ok(launched)
}

#[cfg(test)]
mod tests {
    use super::parse_variant;

    #[test]
    fn variant_from_key_or_json() {
        let key = "portable.m128.n32.w4.s2.b2.ctelx";
        let v = parse_variant(key).unwrap();
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(parse_variant(&json).unwrap(), v);
        assert!(parse_variant("{\"family\": \"portable\"}")
            .unwrap_err()
            .to_string()
            .contains("--variant JSON"));
        let mut bad = v;
        bad.warps = 0;
        assert!(
            parse_variant(&serde_json::to_string(&bad).unwrap()).is_err(),
            "validity rules apply to JSON too"
        );
    }
}
