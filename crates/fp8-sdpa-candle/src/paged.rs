//! Attention over a paged E4M3 KV cache the caller owns.

use crate::cache::dequantized_pages;
use crate::check::{self, err};
use candle_core::{DType, Device, Result, Tensor};

/// Attention of `q` over a paged E4M3 KV cache the caller owns, in vLLM's layout: page pools
/// `k_pages`, `v_pages` (`F8E4M3` `[pages, page_size, heads_kv, head_dim]`, page_size
/// 16..=256), a `block_table` (`I32` `[batch, max_pages]`: row `b` lists sequence `b`'s
/// pages in order), `seqlens_k` (`I32` `[batch]`: the tokens of each sequence) and `F32`
/// descales per head (`[heads_kv]`) or per sequence and head (`[batch, heads_kv]`).
/// `q` is `F16` or `BF16` `[batch, seq_q, heads_q, head_dim]`, `heads_q` a multiple of
/// `heads_kv`. With `causal`, query `i` of a sequence of `len` tokens sees key `j` iff
/// `j <= i + len - seq_q`; a query that sees no key (or a sequence of length 0) gets zeros.
/// Returns a contiguous tensor shaped like `q`, of its dtype.
///
/// The table, lengths and descales are read back and checked before the launch (on CUDA one
/// synchronization of candle's stream): every length at most `max_pages * page_size`, every
/// page a sequence uses inside the pools, every descale finite and > 0. To serve sequences
/// without managing pages yourself, see [`crate::Fp8PagedCache`].
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// # fn main() -> candle_core::Result<()> {
/// let dev = Device::Cpu; // Device::new_cuda(0)? with the `cuda` feature
/// let (pages, page_size, hkv, d) = (8, 16, 2, 64);
/// let kv = Tensor::randn(0f32, 1., (pages, page_size, hkv, d), &dev)?.to_dtype(DType::F16)?;
/// let k_descale = Tensor::full(4f32 / 448.0, hkv, &dev)?; // one per head: |K| <= 4
/// let k_pages = fp8_sdpa_candle::quantize_e4m3_with(&kv, &k_descale)?;
/// let table = Tensor::new(&[[3i32, 1, 0], [7, 2, 0]], &dev)?; // two sequences
/// let lens = Tensor::new(&[40i32, 20], &dev)?;
/// let q = Tensor::randn(0f32, 1., (2, 1, 4, d), &dev)?.to_dtype(DType::F16)?;
/// let o = fp8_sdpa_candle::flash_attn_paged(
///     &q, &k_pages, &k_pages, &table, &lens, &k_descale, &k_descale, 0.125, true)?;
/// assert_eq!(o.dims(), q.dims());
/// # Ok(())
/// # }
/// ```
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_paged(
    q: &Tensor,
    k_pages: &Tensor,
    v_pages: &Tensor,
    block_table: &Tensor,
    seqlens_k: &Tensor,
    k_descale: &Tensor,
    v_descale: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let op = "flash_attn_paged";
    check::same_device(
        op,
        &[
            ("q", q),
            ("k_pages", k_pages),
            ("v_pages", v_pages),
            ("block_table", block_table),
            ("seqlens_k", seqlens_k),
            ("k_descale", k_descale),
            ("v_descale", v_descale),
        ],
    )?;
    let [b, _, hq, d] = check::dims4(op, "q", q)?;
    check::half_dtype(op, "q", q)?;
    check::layout(op, "q", q)?;
    let pd = check::dims4(op, "k_pages", k_pages)?;
    let [pages, page_size, hkv, pd_d] = pd;
    for (n, t) in [("k_pages", k_pages), ("v_pages", v_pages)] {
        if t.dtype() != DType::F8E4M3 {
            return Err(err(
                op,
                format!("{n} must be F8E4M3 (E4M3 codes), got {:?}", t.dtype()),
            ));
        }
        if check::dims4(op, n, t)? != pd || pd_d != d {
            return Err(err(
                op,
                format!(
                    "k_pages {:?} and v_pages {:?} must both be [pages, page_size, heads_kv, head_dim] with q's head dim {d}",
                    k_pages.shape(),
                    v_pages.shape()
                ),
            ));
        }
        check::layout_of(op, n, t, &["pages", "page_size", "heads"])?;
    }
    check::head_dim(op, d)?;
    check::gqa(op, hq, hkv)?;
    check::scale(op, softmax_scale)?;
    check::page_size(op, page_size)?;
    let max_pages = match block_table.dims() {
        [tb, m] if *tb == b && *m >= 1 => *m,
        _ => {
            return Err(err(
                op,
                format!(
                    "block_table has shape {:?}; it must be [batch, max_pages] = [{b}, >= 1]",
                    block_table.shape()
                ),
            ))
        }
    };
    if seqlens_k.dims() != [b] {
        return Err(err(
            op,
            format!(
                "seqlens_k has shape {:?}; it must be [batch] = [{b}]",
                seqlens_k.shape()
            ),
        ));
    }
    for (n, t) in [("block_table", block_table), ("seqlens_k", seqlens_k)] {
        if t.dtype() != DType::I32 || !t.is_contiguous() {
            return Err(err(
                op,
                format!(
                    "{n} must be contiguous I32, got {:?}; use .to_dtype(DType::I32)?.contiguous()",
                    t.dtype()
                ),
            ));
        }
    }
    let mut ds = Vec::new();
    for (n, t) in [("k_descale", k_descale), ("v_descale", v_descale)] {
        check::descale(op, n, t, b, hkv)?;
        check::descale_values(op, n, t)?;
        // One row per sequence, as the kernels read them.
        ds.push(
            t.reshape(((t.elem_count() / hkv), hkv))?
                .broadcast_as((b, hkv))?
                .contiguous()?,
        );
    }
    let (kd, vd) = (&ds[0], &ds[1]);
    match q.device() {
        Device::Cpu => {
            let table = block_table.to_vec2::<i32>()?;
            let lens = seqlens_k.to_vec1::<i32>()?;
            let mut outs = Vec::with_capacity(b);
            for i in 0..b {
                let len = lens[i];
                if len < 0 || len as usize > max_pages * page_size {
                    return Err(err(
                        op,
                        format!(
                            "seqlens_k[{i}] is {len}; it must be 0..={} (max_pages x page_size)",
                            max_pages * page_size
                        ),
                    ));
                }
                let used = (len as usize).div_ceil(page_size);
                let row = &table[i][..used];
                if let Some((j, p)) = row
                    .iter()
                    .enumerate()
                    .find(|(_, &p)| p < 0 || p as usize >= pages)
                {
                    return Err(err(
                        op,
                        format!("block_table[{i}][{j}] is {p}, outside the pools' {pages} pages"),
                    ));
                }
                let qi = q.narrow(0, i, 1)?;
                if len == 0 {
                    outs.push(qi.zeros_like()?.to_dtype(DType::F32)?);
                    continue;
                }
                let row: Vec<u32> = row.iter().map(|&p| p as u32).collect();
                let gather = |pool: &Tensor, ds: &Tensor| {
                    dequantized_pages(pool, &row, len as usize, &ds.narrow(0, i, 1)?)
                };
                let (k, v) = (gather(k_pages, kd)?, gather(v_pages, vd)?);
                outs.push(crate::reference::attention(
                    &qi,
                    &k,
                    &v,
                    softmax_scale,
                    causal,
                )?);
            }
            Tensor::cat(&outs, 0)?.to_dtype(q.dtype())
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::gpu::paged::attend(
            q,
            crate::gpu::paged::Pages {
                k: k_pages,
                v: v_pages,
                k_descale: kd,
                v_descale: vd,
                block_table,
                max_pages,
                seqlens: seqlens_k,
                check: true,
                op,
            },
            softmax_scale,
            causal,
        ),
        other => Err(crate::attn::unsupported_device(op, other)),
    }
}
