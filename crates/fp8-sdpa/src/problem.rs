//! The attention problem: shapes, layouts and parameters, shared by the CPU reference, the
//! GPU call and the lab.

use serde::{Deserialize, Serialize};

/// Sizes of one attention call. Q is `[batch, seq_q, heads_q, head_dim]`, K and V are
/// `[batch, seq_kv, heads_kv, head_dim]` (in BSHD order; see [`Layout`] for memory order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttnShape {
    /// Batch size.
    pub batch: usize,
    /// Query rows per sequence.
    pub seq_q: usize,
    /// Key/value rows per sequence.
    pub seq_kv: usize,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads; `heads_q % heads_kv == 0` (MHA, GQA, MQA).
    pub heads_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
}

impl AttnShape {
    /// A shape from its six sizes, in the order batch, seq_q, seq_kv, heads_q, heads_kv,
    /// head_dim.
    pub const fn new(
        batch: usize,
        seq_q: usize,
        seq_kv: usize,
        heads_q: usize,
        heads_kv: usize,
        head_dim: usize,
    ) -> AttnShape {
        AttnShape {
            batch,
            seq_q,
            seq_kv,
            heads_q,
            heads_kv,
            head_dim,
        }
    }

    /// Elements of Q (and O).
    pub fn q_len(&self) -> usize {
        self.batch * self.seq_q * self.heads_q * self.head_dim
    }
    /// Elements of K (and of V).
    pub fn kv_len(&self) -> usize {
        self.batch * self.seq_kv * self.heads_kv * self.head_dim
    }
    /// Elements of the log-sum-exp output `[batch, heads_q, seq_q]`.
    pub fn lse_len(&self) -> usize {
        self.batch * self.heads_q * self.seq_q
    }
    /// Query heads per kv head.
    pub fn group(&self) -> usize {
        self.heads_q / self.heads_kv.max(1)
    }
    /// Query rows per kv head (query positions times the group): what the decode family
    /// packs into its CTAs.
    pub fn rows_per_kv_head(&self) -> usize {
        self.seq_q * self.group().max(1)
    }
    /// A decode-shaped call: at most [`AttnShape::DECODE_ROWS`] query rows per kv head
    /// against at least [`AttnShape::DECODE_MIN_KEYS`] keys, so K/V dominate the bytes and the
    /// work must be split along the keys to fill the GPU. The decode family serves these.
    ///
    /// ```
    /// use fp8_sdpa::AttnShape;
    /// assert!(AttnShape::new(32, 1, 4096, 32, 8, 128).is_decode()); // 4 rows per kv head
    /// assert!(AttnShape::new(8, 4, 32768, 32, 8, 128).is_decode()); // speculative, 16 rows
    /// assert!(!AttnShape::new(2, 512, 512, 8, 8, 64).is_decode()); // prefill
    /// assert!(!AttnShape::new(1, 32, 32, 1, 1, 64).is_decode()); // a tiny cache
    /// ```
    pub fn is_decode(&self) -> bool {
        self.rows_per_kv_head() <= Self::DECODE_ROWS && self.seq_kv >= Self::DECODE_MIN_KEYS
    }
    /// Fewest keys of a decode-shaped call. Measured on the H100: from 4k keys the decode
    /// family runs at the copy ceiling's rate; at 32 keys (B1 H1 Sq 32) it took 4.8 µs
    /// against the portable tile's 2.4 (runs 115 and 121). Between them it is not measured.
    pub const DECODE_MIN_KEYS: usize = 1024;
    /// The decode family's limit on query rows per kv head (issue 27: Sq x group <= 64).
    pub const DECODE_ROWS: usize = 64;
    /// Number of (query, key) pairs that take part: all of them, or under a causal mask
    /// aligned bottom-right (query i sees key j iff j <= i + seq_kv - seq_q) only those.
    pub fn attended_pairs(&self, causal: bool) -> u64 {
        let per_head: u64 = if causal {
            let off = self.seq_kv as i64 - self.seq_q as i64;
            (0..self.seq_q as i64)
                .map(|i| (i + off + 1).clamp(0, self.seq_kv as i64) as u64)
                .sum()
        } else {
            self.seq_q as u64 * self.seq_kv as u64
        };
        per_head * (self.batch * self.heads_q) as u64
    }
}

/// Memory order of a 4-d tensor whose logical order is (batch, seq, head, dim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `[batch, seq, head, dim]` contiguous (FlashAttention's order).
    #[default]
    Bshd,
    /// `[batch, head, seq, dim]` contiguous (PyTorch SDPA's order).
    Bhsd,
}

impl Layout {
    /// Element strides (batch, seq, head) of a contiguous tensor in this layout; dim stride is 1.
    pub fn strides(self, seq: usize, heads: usize, dim: usize) -> [usize; 3] {
        match self {
            Layout::Bshd => [seq * heads * dim, heads * dim, dim],
            Layout::Bhsd => [heads * seq * dim, dim, seq * dim],
        }
    }
}

/// Parameters of the operation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AttnParams {
    /// Softmax scale (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Causal mask, aligned bottom-right.
    pub causal: bool,
}

impl AttnParams {
    /// The default scale `1/sqrt(head_dim)`, with the given mask.
    pub fn default_for(head_dim: usize, causal: bool) -> AttnParams {
        AttnParams {
            scale: 1.0 / (head_dim as f32).sqrt(),
            causal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_pairs_bottom_right() {
        let s = |sq, skv| AttnShape {
            batch: 1,
            seq_q: sq,
            seq_kv: skv,
            heads_q: 1,
            heads_kv: 1,
            head_dim: 64,
        };
        assert_eq!(s(4, 4).attended_pairs(true), 1 + 2 + 3 + 4);
        assert_eq!(s(2, 5).attended_pairs(true), 4 + 5);
        // more queries than keys: the first rows see nothing
        assert_eq!(s(5, 2).attended_pairs(true), 1 + 2);
        assert_eq!(s(3, 7).attended_pairs(false), 21);
    }

    #[test]
    fn layout_strides() {
        assert_eq!(Layout::Bshd.strides(10, 4, 64), [2560, 256, 64]);
        assert_eq!(Layout::Bhsd.strides(10, 4, 64), [2560, 64, 640]);
    }
}
