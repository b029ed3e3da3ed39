//! A KV cache that stores K and V as E4M3 in pages and serves decode from them.
//!
//! The cache is preallocated: page pools `[pages, page_size, heads_kv, head_dim]` of candle
//! `F8E4M3`, with sequence `b` owning pages `b * pages_per_seq ..` in a fixed block table, the
//! layout fp8-sdpa's paged decode kernels read (`Device::paged_attention`). All sequences of
//! the batch grow together: [`Fp8KvCache::append`] adds the same number of tokens to each.
//! For continuous batching (sequences added and removed at any step, each with its own
//! length, pages from a shared pool), use [`Fp8PagedCache`].
//!
//! Descales are per (sequence, KV head). By default the first append (the prefill) sets them
//! from its own amax (fp8-sdpa's quantize kernel, optionally widened by
//! [`Fp8KvCacheConfig::headroom`]); later appends reuse them, and a value beyond
//! `448 * descale` saturates. [`Fp8KvCache::with_descales`] fixes calibrated descales instead.

use crate::check::{self, err};
use crate::quant::{dequantize_e4m3, quantize_e4m3, quantize_e4m3_with};
use candle_core::{DType, Device, Result, Tensor};

mod batching;
mod config;
mod pages;
pub use batching::{Fp8PagedCache, Fp8PagedCacheConfig, SeqId};
pub use config::Fp8KvCacheConfig;
pub(crate) use pages::dequantized_pages;

/// An E4M3 paged KV cache on one device (CUDA, or CPU for the f32 reference path).
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// use fp8_sdpa_candle::{Fp8KvCache, Fp8KvCacheConfig};
/// # fn main() -> candle_core::Result<()> {
/// let dev = Device::Cpu; // Device::new_cuda(0)? with the `cuda` feature
/// let (batch, heads_q, heads_kv, dim) = (2, 8, 2, 64);
/// let mut cache = Fp8KvCache::new(Fp8KvCacheConfig::new(batch, heads_kv, dim, 256), &dev)?;
/// let kv = |n| Tensor::randn(0f32, 1., (batch, n, heads_kv, dim), &dev)?.to_dtype(DType::F16);
/// cache.append(&kv(20)?, &kv(20)?)?; // prefill: sets the descales
/// for _ in 0..3 {
///     cache.append(&kv(1)?, &kv(1)?)?; // one decode step
///     let q = Tensor::randn(0f32, 1., (batch, 1, heads_q, dim), &dev)?.to_dtype(DType::F16)?;
///     let o = cache.attend(&q, 0.125, true)?;
///     assert_eq!(o.dims(), &[batch, 1, heads_q, dim]);
/// }
/// assert_eq!(cache.len(), 23);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Fp8KvCache {
    config: Fp8KvCacheConfig,
    device: Device,
    pages_per_seq: usize,
    k_pages: Tensor,
    v_pages: Tensor,
    descales: Option<(Tensor, Tensor)>,
    calibrated: bool,
    block_table: Tensor,
    seqlens: Tensor,
    len: usize,
}

impl Fp8KvCache {
    /// An empty cache whose first [`append`](Self::append) sets the descales. Allocates
    /// `2 * batch * ceil(max_seq_len / page_size) * page_size * heads_kv * head_dim` bytes on
    /// `device`.
    ///
    /// ```
    /// use candle_core::{DType, Device};
    /// use fp8_sdpa_candle::{Fp8KvCache, Fp8KvCacheConfig};
    /// # fn main() -> candle_core::Result<()> {
    /// let cache = Fp8KvCache::new(Fp8KvCacheConfig::new(2, 8, 128, 1000), &Device::Cpu)?;
    /// let (k_pages, _) = cache.pages();
    /// assert_eq!(k_pages.dims(), &[2 * 16, 64, 8, 128]); // 16 pages of 64 tokens a sequence
    /// assert_eq!(k_pages.dtype(), DType::F8E4M3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(config: Fp8KvCacheConfig, device: &Device) -> Result<Self> {
        let c = &config;
        let (pages_per_seq, pages) = config.pages("Fp8KvCache::new")?;
        let pool = (pages, c.page_size, c.heads_kv, c.head_dim);
        let table: Vec<i32> = (0..pages as i32).collect();
        Ok(Fp8KvCache {
            config,
            device: device.clone(),
            pages_per_seq,
            k_pages: Tensor::zeros(pool, DType::F8E4M3, device)?,
            v_pages: Tensor::zeros(pool, DType::F8E4M3, device)?,
            descales: None,
            calibrated: false,
            block_table: Tensor::from_vec(table, (c.batch, pages_per_seq), device)?,
            seqlens: Tensor::zeros(c.batch, DType::I32, device)?,
            len: 0,
        })
    }

    /// An empty cache with calibrated descales, `F32` `[batch, heads_kv]` on the cache's
    /// device, used for every append (values beyond `448 * descale` saturate). Their values
    /// must be finite and > 0: checked for CPU tensors; CUDA ones are not read back.
    ///
    /// ```
    /// use candle_core::{Device, Tensor};
    /// use fp8_sdpa_candle::{Fp8KvCache, Fp8KvCacheConfig};
    /// # fn main() -> candle_core::Result<()> {
    /// let ds = Tensor::full(8f32 / 448.0, (1, 4), &Device::Cpu)?; // |K|, |V| <= 8
    /// let cache = Fp8KvCache::with_descales(Fp8KvCacheConfig::new(1, 4, 64, 128), &ds, &ds)?;
    /// assert!(cache.descales().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_descales(
        config: Fp8KvCacheConfig,
        k_descale: &Tensor,
        v_descale: &Tensor,
    ) -> Result<Self> {
        let op = "Fp8KvCache::with_descales";
        check::same_device(op, &[("k_descale", k_descale), ("v_descale", v_descale)])?;
        for (n, t) in [("k_descale", k_descale), ("v_descale", v_descale)] {
            if check::descale(op, n, t, config.batch, config.heads_kv)? == 0 {
                return Err(err(
                    op,
                    format!(
                        "{n} must be [batch, heads_kv] = [{}, {}]",
                        config.batch, config.heads_kv
                    ),
                ));
            }
            check::descale_values(op, n, t)?;
        }
        let mut cache = Self::new(config, k_descale.device())?;
        cache.descales = Some((k_descale.clone(), v_descale.clone()));
        cache.calibrated = true;
        Ok(cache)
    }

    /// Appends `k`, `v` (`F16` or `BF16` `[batch, new_tokens, heads_kv, head_dim]`, last dim
    /// contiguous) to every sequence, quantized to E4M3. The first append after creation or
    /// [`reset`](Self::reset) sets the descales unless they were calibrated. On error the
    /// cache is unchanged.
    ///
    /// ```
    /// use candle_core::{DType, Device, Tensor};
    /// use fp8_sdpa_candle::{Fp8KvCache, Fp8KvCacheConfig};
    /// # fn main() -> candle_core::Result<()> {
    /// let mut cache = Fp8KvCache::new(Fp8KvCacheConfig::new(1, 2, 64, 100), &Device::Cpu)?;
    /// let k = Tensor::ones((1, 10, 2, 64), DType::BF16, &Device::Cpu)?;
    /// cache.append(&k, &k)?;
    /// cache.append(&k.narrow(1, 0, 1)?, &k.narrow(1, 0, 1)?)?;
    /// assert_eq!(cache.len(), 11);
    /// let (kd, _) = cache.descales().unwrap();
    /// assert_eq!(kd.to_vec2::<f32>()?, vec![vec![1.0 / 448.0; 2]]); // amax / 448
    /// # Ok(())
    /// # }
    /// ```
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let op = "Fp8KvCache::append";
        let c = self.config;
        check::same_device(op, &[("k", k), ("v", v)])?;
        if !k.device().same_device(&self.device) {
            return Err(err(
                op,
                format!(
                    "k is on {:?} but the cache is on {:?}",
                    k.device().location(),
                    self.device.location()
                ),
            ));
        }
        for (n, t) in [("k", k), ("v", v)] {
            let [b, _, h, d] = check::dims4(op, n, t)?;
            if (b, h, d) != (c.batch, c.heads_kv, c.head_dim) || t.dims() != k.dims() {
                return Err(err(
                    op,
                    format!(
                        "{n} has shape {:?}; k and v must both be [batch, new_tokens, heads_kv, head_dim] = [{}, _, {}, {}]",
                        t.shape(), c.batch, c.heads_kv, c.head_dim
                    ),
                ));
            }
            check::half_dtype(op, n, t)?;
        }
        let n = k.dim(1)?;
        if self.len + n > c.max_seq_len {
            return Err(err(
                op,
                format!(
                    "{n} more tokens would make {} but the cache holds {}; create it with a larger max_seq_len or reset() it",
                    self.len + n,
                    c.max_seq_len
                ),
            ));
        }
        // Quantize both before writing anything, so that an error leaves the cache as it was.
        let (kc, vc, descales) = match &self.descales {
            Some((kd, vd)) => (quantize_e4m3_with(k, kd)?, quantize_e4m3_with(v, vd)?, None),
            None => {
                let (kc, kd) = quantize_e4m3(k)?;
                let (vc, vd) = quantize_e4m3(v)?;
                if c.headroom == 1.0 {
                    (kc, vc, Some((kd, vd)))
                } else {
                    let (kd, vd) = ((kd * f64::from(c.headroom))?, (vd * f64::from(c.headroom))?);
                    (
                        quantize_e4m3_with(k, &kd)?,
                        quantize_e4m3_with(v, &vd)?,
                        Some((kd, vd)),
                    )
                }
            }
        };
        let lens = vec![(self.len + n) as i32; c.batch];
        let seqlens = Tensor::from_vec(lens, c.batch, &self.device)?;
        // Sequence b's pages are contiguous, so the pool is a [batch, tokens, heads, dim] view.
        self.pool_view(&self.k_pages)?.slice_set(&kc, 1, self.len)?;
        self.pool_view(&self.v_pages)?.slice_set(&vc, 1, self.len)?;
        if let Some(d) = descales {
            self.descales = Some(d);
        }
        self.seqlens = seqlens;
        self.len += n;
        Ok(())
    }

    /// Attention of `q` (`F16` or `BF16` `[batch, seq_q, heads_q, head_dim]`, `heads_q` a
    /// multiple of `heads_kv`) over the cached tokens. With `causal`, query `i` sees key `j`
    /// iff `j <= i + len - seq_q` (bottom-right, so a decode step's queries are the last
    /// tokens). Returns a contiguous tensor shaped like `q`, of its dtype.
    ///
    /// On CUDA this runs fp8-sdpa's paged decode kernels on candle's stream, reading the E4M3
    /// pages directly (built for few query rows per KV head; for a long prefill call
    /// [`crate::flash_attn`] on the fp16/bf16 K/V). On the CPU it runs the f32 reference over
    /// the dequantized cache. The CUDA call skips fp8-sdpa's read-back check of the block
    /// table (the cache builds it); a table rewritten in place through
    /// [`block_table`](Self::block_table) gives wrong output, but the kernel clamps every
    /// entry to the pools' pages, so it never reads outside them.
    ///
    /// ```
    /// use candle_core::{DType, Device, Tensor};
    /// use fp8_sdpa_candle::{Fp8KvCache, Fp8KvCacheConfig};
    /// # fn main() -> candle_core::Result<()> {
    /// let dev = Device::Cpu;
    /// let mut cache = Fp8KvCache::new(Fp8KvCacheConfig::new(1, 1, 64, 16), &dev)?;
    /// let k = Tensor::randn(0f32, 1., (1, 5, 1, 64), &dev)?.to_dtype(DType::F16)?;
    /// let v = Tensor::ones((1, 5, 1, 64), DType::F16, &dev)?;
    /// cache.append(&k, &v)?;
    /// let q = Tensor::randn(0f32, 1., (1, 1, 4, 64), &dev)?.to_dtype(DType::F16)?; // MQA
    /// let o = cache.attend(&q, 0.125, true)?;
    /// // Every value is 1, so every output is 1.
    /// assert!(o.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?.iter().all(|x| *x == 1.0));
    /// # Ok(())
    /// # }
    /// ```
    pub fn attend(&self, q: &Tensor, softmax_scale: f32, causal: bool) -> Result<Tensor> {
        let op = "Fp8KvCache::attend";
        let c = self.config;
        if !q.device().same_device(&self.device) {
            return Err(err(
                op,
                format!(
                    "q is on {:?} but the cache is on {:?}",
                    q.device().location(),
                    self.device.location()
                ),
            ));
        }
        let [b, _, hq, d] = check::dims4(op, "q", q)?;
        check::half_dtype(op, "q", q)?;
        if (b, d) != (c.batch, c.head_dim) {
            return Err(err(op, format!("q has shape {:?}; it must be [batch, seq_q, heads_q, head_dim] = [{}, _, _, {}]", q.shape(), c.batch, c.head_dim)));
        }
        check::gqa(op, hq, c.heads_kv)?;
        check::layout(op, "q", q)?;
        check::scale(op, softmax_scale)?;
        let (kd, vd) = self.filled(op)?;
        match &self.device {
            Device::Cpu => {
                let (k, v) = self.dequantized_kv()?;
                crate::reference::attention(q, &k, &v, softmax_scale, causal)?.to_dtype(q.dtype())
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => crate::gpu::paged::attend(
                q,
                crate::gpu::paged::Pages {
                    k: &self.k_pages,
                    v: &self.v_pages,
                    k_descale: kd,
                    v_descale: vd,
                    block_table: &self.block_table,
                    max_pages: self.pages_per_seq,
                    seqlens: &self.seqlens,
                    check: false,
                    op,
                },
                softmax_scale,
                causal,
            ),
            other => {
                let _ = (kd, vd);
                Err(crate::attn::unsupported_device(op, other))
            }
        }
    }

    /// The cached K and V decoded to f32 `[batch, len, heads_kv, head_dim]` (for checks and
    /// debugging; decode reads the pages directly). Errors on an empty cache.
    pub fn dequantized_kv(&self) -> Result<(Tensor, Tensor)> {
        let (kd, vd) = self.filled("Fp8KvCache::dequantized_kv")?;
        let k = self.pool_view(&self.k_pages)?.narrow(1, 0, self.len)?;
        let v = self.pool_view(&self.v_pages)?.narrow(1, 0, self.len)?;
        Ok((dequantize_e4m3(&k, kd)?, dequantize_e4m3(&v, vd)?))
    }

    /// Tokens per sequence so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token has been appended since creation or [`reset`](Self::reset).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sizes and policy.
    pub fn config(&self) -> &Fp8KvCacheConfig {
        &self.config
    }

    /// The K and V descales, `F32` `[batch, heads_kv]`, once set.
    pub fn descales(&self) -> Option<(&Tensor, &Tensor)> {
        self.descales.as_ref().map(|(k, v)| (k, v))
    }

    /// The K and V page pools, `F8E4M3` `[pages, page_size, heads_kv, head_dim]`; sequence
    /// `b` owns pages `b * pages_per_seq .. (b + 1) * pages_per_seq`, in order.
    pub fn pages(&self) -> (&Tensor, &Tensor) {
        (&self.k_pages, &self.v_pages)
    }

    /// The block table, `I32` `[batch, pages_per_seq]`: row `b` lists sequence `b`'s pages.
    pub fn block_table(&self) -> &Tensor {
        &self.block_table
    }

    /// Empties the cache (the pages are reused, not cleared); descales derived from a first
    /// append are dropped, calibrated ones kept.
    pub fn reset(&mut self) -> Result<()> {
        self.seqlens = Tensor::zeros(self.config.batch, DType::I32, &self.device)?;
        self.len = 0;
        if !self.calibrated {
            self.descales = None;
        }
        Ok(())
    }

    /// The descales of a cache holding tokens, or the error for an empty one.
    fn filled(&self, op: &str) -> Result<(&Tensor, &Tensor)> {
        match &self.descales {
            Some((k, v)) if self.len > 0 => Ok((k, v)),
            _ => Err(err(op, "the cache is empty; append K/V first")),
        }
    }

    /// A pool as `[batch, pages_per_seq * page_size, heads_kv, head_dim]`, sharing storage.
    fn pool_view(&self, pool: &Tensor) -> Result<Tensor> {
        let c = &self.config;
        pool.reshape((
            c.batch,
            self.pages_per_seq * c.page_size,
            c.heads_kv,
            c.head_dim,
        ))
    }
}
