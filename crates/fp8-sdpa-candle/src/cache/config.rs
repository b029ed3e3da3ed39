//! The sizes and policy of an [`Fp8KvCache`](super::Fp8KvCache).

use crate::check::{self, err};
use candle_core::Result;

/// Sizes and policy of an [`Fp8KvCache`](super::Fp8KvCache).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fp8KvCacheConfig {
    /// Sequences in the batch.
    pub batch: usize,
    /// KV heads.
    pub heads_kv: usize,
    /// Head dim: 64, 128 or 256.
    pub head_dim: usize,
    /// Tokens each sequence can hold.
    pub max_seq_len: usize,
    /// Tokens per page, 16..=256 (default 64).
    pub page_size: usize,
    /// Factor (>= 1) on the descales the first append derives from its amax, leaving room for
    /// larger values in later appends at the cost of resolution (default 1: no room).
    pub headroom: f32,
}

impl Fp8KvCacheConfig {
    /// A config with 64-token pages and no headroom.
    ///
    /// ```
    /// let cfg = fp8_sdpa_candle::Fp8KvCacheConfig::new(4, 8, 128, 4096);
    /// assert_eq!((cfg.page_size, cfg.headroom), (64, 1.0));
    /// ```
    pub fn new(batch: usize, heads_kv: usize, head_dim: usize, max_seq_len: usize) -> Self {
        Fp8KvCacheConfig {
            batch,
            heads_kv,
            head_dim,
            max_seq_len,
            page_size: 64,
            headroom: 1.0,
        }
    }

    /// Checks the config; returns the pages per sequence and in all.
    pub(crate) fn pages(&self, op: &str) -> Result<(usize, usize)> {
        let c = self;
        if c.batch == 0 || c.heads_kv == 0 || c.max_seq_len == 0 {
            return Err(err(
                op,
                format!("batch, heads_kv and max_seq_len must be >= 1, got {c:?}"),
            ));
        }
        check::head_dim(op, c.head_dim)?;
        check::page_size(op, c.page_size)?;
        check::headroom(op, c.headroom)?;
        let pages_per_seq = c.max_seq_len.div_ceil(c.page_size);
        let pages = c
            .batch
            .checked_mul(pages_per_seq)
            .filter(|&p| {
                p <= i32::MAX as usize
                    && pages_per_seq
                        .checked_mul(c.page_size)
                        .is_some_and(|t| t <= i32::MAX as usize)
            })
            .ok_or_else(|| {
                err(
                    op,
                    "batch x max_seq_len exceeds 2^31 tokens; use a smaller cache",
                )
            })?;
        Ok((pages_per_seq, pages))
    }
}
