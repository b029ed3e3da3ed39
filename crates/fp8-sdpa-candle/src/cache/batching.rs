//! A paged E4M3 KV cache for continuous batching: sequences join and leave at any step, each
//! with its own length, pages and descales.

use super::pages::{dequantized_pages, PageAllocator};
use crate::check::{self, err};
use crate::quant::{quantize_e4m3, quantize_e4m3_with};
use candle_core::{DType, Device, Result, Tensor};
use std::collections::BTreeMap;

/// Sizes and policy of an [`Fp8PagedCache`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Fp8PagedCacheConfig {
    /// Pages in the pool, shared by every sequence.
    pub pages: usize,
    /// Tokens per page, 16..=256 (default 64).
    pub page_size: usize,
    /// KV heads.
    pub heads_kv: usize,
    /// Head dim: 64, 128 or 256.
    pub head_dim: usize,
    /// Factor (>= 1) on the descales a sequence's first tokens give it (amax / 448), leaving
    /// room for larger values in its later tokens (default 1).
    pub headroom: f32,
}

impl Fp8PagedCacheConfig {
    /// A pool of `pages` pages of 64 tokens, no headroom.
    ///
    /// ```
    /// let cfg = fp8_sdpa_candle::Fp8PagedCacheConfig::new(1024, 8, 128).with_page_size(16);
    /// assert_eq!((cfg.pages, cfg.page_size, cfg.headroom), (1024, 16, 1.0));
    /// ```
    pub fn new(pages: usize, heads_kv: usize, head_dim: usize) -> Self {
        Fp8PagedCacheConfig {
            pages,
            page_size: 64,
            heads_kv,
            head_dim,
            headroom: 1.0,
        }
    }

    /// The same with `page_size` tokens per page.
    pub fn with_page_size(mut self, page_size: usize) -> Self {
        self.page_size = page_size;
        self
    }

    /// The same with descales widened by `headroom`.
    pub fn with_headroom(mut self, headroom: f32) -> Self {
        self.headroom = headroom;
        self
    }

    fn check(&self, op: &str) -> Result<()> {
        let c = self;
        if c.pages == 0 || c.heads_kv == 0 {
            return Err(err(
                op,
                format!("pages and heads_kv must be >= 1, got {c:?}"),
            ));
        }
        check::head_dim(op, c.head_dim)?;
        check::page_size(op, c.page_size)?;
        check::headroom(op, c.headroom)?;
        let fits = c
            .pages
            .checked_mul(c.page_size)
            .is_some_and(|t| t <= i32::MAX as usize);
        if !fits {
            return Err(err(
                op,
                "pages x page_size exceeds 2^31 tokens; use a smaller pool",
            ));
        }
        Ok(())
    }
}

/// A sequence of an [`Fp8PagedCache`], valid until it is removed (ids are never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(u64);

#[derive(Debug)]
struct Seq {
    pages: Vec<u32>,
    len: usize,
    /// `F32` `[1, heads_kv]`.
    k_descale: Tensor,
    v_descale: Tensor,
}

/// An E4M3 paged KV cache for continuous batching: one pool of pages shared by sequences
/// that are added and removed at any step, each with its own length, its own pages (taken
/// from the pool as it grows, returned when it is removed) and its own descales per KV head.
/// [`attend`](Self::attend) runs any subset of the sequences as one batch.
///
/// On CUDA the pages are read in place by fp8-sdpa's paged decode kernels on candle's stream;
/// on the CPU the same calls run the f32 reference over the dequantized pages.
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// use fp8_sdpa_candle::{Fp8PagedCache, Fp8PagedCacheConfig};
/// # fn main() -> candle_core::Result<()> {
/// let dev = Device::Cpu; // Device::new_cuda(0)? with the `cuda` feature
/// let (heads_q, heads_kv, dim) = (8, 2, 64);
/// let mut cache = Fp8PagedCache::new(Fp8PagedCacheConfig::new(64, heads_kv, dim), &dev)?;
/// let kv = |n| Tensor::randn(0f32, 1., (1, n, heads_kv, dim), &dev)?.to_dtype(DType::F16);
/// let a = cache.add(&kv(100)?, &kv(100)?)?; // a prompt of 100 tokens
/// let b = cache.add(&kv(7)?, &kv(7)?)?; // and one of 7
/// cache.append(a, &kv(1)?, &kv(1)?)?; // a decodes a token
/// let q = Tensor::randn(0f32, 1., (2, 1, heads_q, dim), &dev)?.to_dtype(DType::F16)?;
/// let o = cache.attend(&[a, b], &q, 0.125, true)?; // one step for both
/// assert_eq!(o.dims(), &[2, 1, heads_q, dim]);
/// cache.remove(b)?; // b finished: its page goes back to the pool
/// assert_eq!((cache.len(a)?, cache.free_pages()), (101, 62));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Fp8PagedCache {
    config: Fp8PagedCacheConfig,
    device: Device,
    k_pages: Tensor,
    v_pages: Tensor,
    alloc: PageAllocator,
    seqs: BTreeMap<SeqId, Seq>,
    next: u64,
}

impl Fp8PagedCache {
    /// An empty cache: two pools of `pages * page_size * heads_kv * head_dim` bytes on
    /// `device`.
    pub fn new(config: Fp8PagedCacheConfig, device: &Device) -> Result<Self> {
        config.check("Fp8PagedCache::new")?;
        let c = &config;
        let pool = (c.pages, c.page_size, c.heads_kv, c.head_dim);
        Ok(Fp8PagedCache {
            config,
            device: device.clone(),
            k_pages: Tensor::zeros(pool, DType::F8E4M3, device)?,
            v_pages: Tensor::zeros(pool, DType::F8E4M3, device)?,
            alloc: PageAllocator::new(c.pages),
            seqs: BTreeMap::new(),
            next: 0,
        })
    }

    /// Adds a sequence with its first tokens, `k`, `v` `F16` or `BF16` `[1, tokens,
    /// heads_kv, head_dim]` (tokens >= 1): their amax per head (times the headroom) sets the
    /// sequence's descales. On error the cache is unchanged.
    pub fn add(&mut self, k: &Tensor, v: &Tensor) -> Result<SeqId> {
        let op = "Fp8PagedCache::add";
        self.check_tokens(op, k, v)?;
        let (kd, vd) = (quantize_e4m3(k)?.1, quantize_e4m3(v)?.1);
        let h = f64::from(self.config.headroom);
        let (kd, vd) = if h == 1.0 {
            (kd, vd)
        } else {
            ((kd * h)?, (vd * h)?)
        };
        self.insert(op, k, v, kd, vd)
    }

    /// Adds a sequence with calibrated descales, `F32` `[heads_kv]` or `[1, heads_kv]` on the
    /// cache's device, finite and > 0 (checked for CPU tensors); values beyond
    /// `448 * descale` saturate. On error the cache is unchanged.
    pub fn add_with_descales(
        &mut self,
        k: &Tensor,
        v: &Tensor,
        k_descale: &Tensor,
        v_descale: &Tensor,
    ) -> Result<SeqId> {
        let op = "Fp8PagedCache::add_with_descales";
        self.check_tokens(op, k, v)?;
        let h = self.config.heads_kv;
        let mut ds = Vec::new();
        for (n, t) in [("k_descale", k_descale), ("v_descale", v_descale)] {
            check::same_device(op, &[("k", k), (n, t)])?;
            check::descale(op, n, t, 1, h)?;
            check::descale_values(op, n, t)?;
            ds.push(t.reshape((1, h))?);
        }
        let vd = ds.pop().expect("two descales");
        let kd = ds.pop().expect("two descales");
        self.insert(op, k, v, kd, vd)
    }

    /// Appends tokens to sequence `seq`: `k`, `v` `F16` or `BF16` `[1, tokens, heads_kv,
    /// head_dim]`, quantized with the sequence's descales (values beyond `448 * descale`
    /// saturate). Takes pages from the pool as needed. On error the cache is unchanged.
    pub fn append(&mut self, seq: SeqId, k: &Tensor, v: &Tensor) -> Result<()> {
        let op = "Fp8PagedCache::append";
        self.check_tokens(op, k, v)?;
        let s = self.seqs.get(&seq).ok_or_else(|| unknown(op, seq))?;
        let kc = quantize_e4m3_with(k, &s.k_descale)?;
        let vc = quantize_e4m3_with(v, &s.v_descale)?;
        let (start, old) = (s.len, s.pages.len());
        let new = self.take_pages(op, start + k.dim(1)?, old)?;
        let mut pages = self.seqs[&seq].pages.clone();
        pages.extend_from_slice(&new);
        if let Err(e) = self.write(&pages, start, &kc, &vc) {
            self.alloc.give_back(&new);
            return Err(e);
        }
        let s = self.seqs.get_mut(&seq).expect("checked above");
        s.pages = pages;
        s.len += kc.dim(1)?;
        Ok(())
    }

    /// Removes sequence `seq`; its pages return to the pool (not cleared).
    pub fn remove(&mut self, seq: SeqId) -> Result<()> {
        let s = self
            .seqs
            .remove(&seq)
            .ok_or_else(|| unknown("Fp8PagedCache::remove", seq))?;
        self.alloc.give_back(&s.pages);
        Ok(())
    }

    /// Tokens held for `seq`.
    pub fn len(&self, seq: SeqId) -> Result<usize> {
        Ok(self.get("Fp8PagedCache::len", seq)?.len)
    }

    /// The sequences held, oldest first.
    pub fn sequences(&self) -> Vec<SeqId> {
        self.seqs.keys().copied().collect()
    }

    /// Pages not held by any sequence.
    pub fn free_pages(&self) -> usize {
        self.alloc.free_count()
    }

    /// The sizes and policy.
    pub fn config(&self) -> &Fp8PagedCacheConfig {
        &self.config
    }

    /// The K and V page pools, `F8E4M3` `[pages, page_size, heads_kv, head_dim]`.
    pub fn pool(&self) -> (&Tensor, &Tensor) {
        (&self.k_pages, &self.v_pages)
    }

    /// Sequence `seq`'s pages in order, and its K and V descales `F32` `[1, heads_kv]`.
    pub fn pages_of(&self, seq: SeqId) -> Result<(&[u32], &Tensor, &Tensor)> {
        let s = self.get("Fp8PagedCache::pages_of", seq)?;
        Ok((&s.pages, &s.k_descale, &s.v_descale))
    }

    /// Sequence `seq`'s K and V decoded to f32 `[1, len, heads_kv, head_dim]`.
    pub fn dequantized_kv(&self, seq: SeqId) -> Result<(Tensor, Tensor)> {
        let s = self.get("Fp8PagedCache::dequantized_kv", seq)?;
        Ok((
            dequantized_pages(&self.k_pages, &s.pages, s.len, &s.k_descale)?,
            dequantized_pages(&self.v_pages, &s.pages, s.len, &s.v_descale)?,
        ))
    }

    /// Attention of `q` (`F16` or `BF16` `[seqs.len(), seq_q, heads_q, head_dim]`, row `i`
    /// the queries of `seqs[i]`, `heads_q` a multiple of `heads_kv`) over each sequence's
    /// tokens. With `causal`, query `i` of a sequence of `len` tokens sees key `j` iff
    /// `j <= i + len - seq_q` (bottom-right: a decode step's queries are its last tokens).
    /// Returns a contiguous tensor shaped like `q`, of its dtype.
    pub fn attend(
        &self,
        seqs: &[SeqId],
        q: &Tensor,
        softmax_scale: f32,
        causal: bool,
    ) -> Result<Tensor> {
        let op = "Fp8PagedCache::attend";
        let c = self.config;
        if !q.device().same_device(&self.device) {
            return Err(err(op, "q is on another device than the cache"));
        }
        let [b, _, hq, d] = check::dims4(op, "q", q)?;
        check::half_dtype(op, "q", q)?;
        if b != seqs.len() || d != c.head_dim {
            return Err(err(
                op,
                format!(
                    "q has shape {:?}; it must be [seqs, seq_q, heads_q, head_dim] = [{}, _, _, {}]",
                    q.shape(),
                    seqs.len(),
                    c.head_dim
                ),
            ));
        }
        check::gqa(op, hq, c.heads_kv)?;
        check::layout(op, "q", q)?;
        check::scale(op, softmax_scale)?;
        let held: Vec<&Seq> = seqs
            .iter()
            .map(|&s| self.get(op, s))
            .collect::<Result<_>>()?;
        match &self.device {
            Device::Cpu => {
                let mut outs = Vec::with_capacity(b);
                for (i, &s) in seqs.iter().enumerate() {
                    let (k, v) = self.dequantized_kv(s)?;
                    let qi = q.narrow(0, i, 1)?;
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
            Device::Cuda(_) => {
                // Rows padded with the sequence's first page: the kernels read no page past
                // a sequence's length.
                let max_pages = held.iter().map(|s| s.pages.len()).max().unwrap_or(1);
                let mut table = Vec::with_capacity(b * max_pages);
                for s in &held {
                    table.extend(s.pages.iter().map(|&p| p as i32));
                    table.extend(std::iter::repeat_n(
                        s.pages[0] as i32,
                        max_pages - s.pages.len(),
                    ));
                }
                let lens: Vec<i32> = held.iter().map(|s| s.len as i32).collect();
                let table = Tensor::from_vec(table, (b, max_pages), &self.device)?;
                let lens = Tensor::from_vec(lens, b, &self.device)?;
                let kd = Tensor::cat(&held.iter().map(|s| &s.k_descale).collect::<Vec<_>>(), 0)?;
                let vd = Tensor::cat(&held.iter().map(|s| &s.v_descale).collect::<Vec<_>>(), 0)?;
                crate::gpu::paged::attend(
                    q,
                    crate::gpu::paged::Pages {
                        k: &self.k_pages,
                        v: &self.v_pages,
                        k_descale: &kd,
                        v_descale: &vd,
                        block_table: &table,
                        max_pages,
                        seqlens: &lens,
                        check: false,
                        op,
                    },
                    softmax_scale,
                    causal,
                )
            }
            other => {
                let _ = held;
                Err(crate::attn::unsupported_device(op, other))
            }
        }
    }

    fn get(&self, op: &str, seq: SeqId) -> Result<&Seq> {
        self.seqs.get(&seq).ok_or_else(|| unknown(op, seq))
    }

    /// K and V of new tokens: `[1, tokens >= 1, heads_kv, head_dim]`, fp16/bf16, alike, on
    /// the cache's device.
    fn check_tokens(&self, op: &str, k: &Tensor, v: &Tensor) -> Result<()> {
        let c = &self.config;
        check::same_device(op, &[("k", k), ("v", v)])?;
        if !k.device().same_device(&self.device) {
            return Err(err(op, "k and v are on another device than the cache"));
        }
        for (n, t) in [("k", k), ("v", v)] {
            let [b, _, h, d] = check::dims4(op, n, t)?;
            if (b, h, d) != (1, c.heads_kv, c.head_dim) || t.dims() != k.dims() {
                return Err(err(
                    op,
                    format!(
                        "{n} has shape {:?}; k and v must both be [1, tokens, heads_kv, head_dim] = [1, _, {}, {}]",
                        t.shape(),
                        c.heads_kv,
                        c.head_dim
                    ),
                ));
            }
            check::half_dtype(op, n, t)?;
        }
        Ok(())
    }

    /// Takes the pages a sequence of `held` pages needs to hold `tokens`.
    fn take_pages(&mut self, op: &str, tokens: usize, held: usize) -> Result<Vec<u32>> {
        let need = tokens.div_ceil(self.config.page_size).saturating_sub(held);
        self.alloc.take(need).ok_or_else(|| {
            err(
                op,
                format!(
                    "{need} more pages are needed but {} are free; remove finished sequences or \
                     create the cache with more pages",
                    self.alloc.free_count()
                ),
            )
        })
    }

    fn insert(
        &mut self,
        op: &str,
        k: &Tensor,
        v: &Tensor,
        kd: Tensor,
        vd: Tensor,
    ) -> Result<SeqId> {
        let kc = quantize_e4m3_with(k, &kd)?;
        let vc = quantize_e4m3_with(v, &vd)?;
        let pages = self.take_pages(op, kc.dim(1)?, 0)?;
        if let Err(e) = self.write(&pages, 0, &kc, &vc) {
            self.alloc.give_back(&pages);
            return Err(e);
        }
        let id = SeqId(self.next);
        self.next += 1;
        self.seqs.insert(
            id,
            Seq {
                pages,
                len: kc.dim(1)?,
                k_descale: kd,
                v_descale: vd,
            },
        );
        Ok(id)
    }

    /// Writes codes `[1, tokens, heads_kv, head_dim]` at token positions `start..` of the
    /// sequence whose pages are `pages`, one copy per page touched.
    fn write(&self, pages: &[u32], start: usize, kc: &Tensor, vc: &Tensor) -> Result<()> {
        let c = &self.config;
        let flat = |t: &Tensor| t.reshape((c.pages * c.page_size, c.heads_kv, c.head_dim));
        let (kf, vf) = (flat(&self.k_pages)?, flat(&self.v_pages)?);
        let (kc, vc) = (kc.squeeze(0)?, vc.squeeze(0)?);
        let n = kc.dim(0)?;
        let mut done = 0;
        while done < n {
            let pos = start + done;
            let (page, slot) = (pages[pos / c.page_size] as usize, pos % c.page_size);
            let run = (c.page_size - slot).min(n - done);
            let at = page * c.page_size + slot;
            kf.slice_set(&kc.narrow(0, done, run)?.contiguous()?, 0, at)?;
            vf.slice_set(&vc.narrow(0, done, run)?.contiguous()?, 0, at)?;
            done += run;
        }
        Ok(())
    }
}

fn unknown(op: &str, seq: SeqId) -> candle_core::Error {
    err(
        op,
        format!("no sequence {seq:?} in the cache (removed, or from another cache)"),
    )
}
