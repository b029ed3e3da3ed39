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
    /// against the portable tile's 2.4 (perf-notes: Decode family). Between them it is not
    /// measured.
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

/// Sizes of a variable-length batch (FlashAttention's varlen convention): the sequences are
/// packed one after another, Q as `[total_q, heads_q, head_dim]` and K, V as
/// `[total_k, heads_kv, head_dim]`, and sequence b is the query tokens
/// `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` and the keys `cu_seqlens_k[b]..cu_seqlens_k[b + 1]`.
///
/// ```
/// use fp8_sdpa::VarlenShape;
/// // Three sequences: 5 queries over 5 keys, 1 over 300, none over 12.
/// let s = VarlenShape::from_lens(&[(5, 5), (1, 300), (0, 12)], 8, 2, 128);
/// assert_eq!(s.cu_seqlens_q, [0, 5, 6, 6]);
/// assert_eq!(s.cu_seqlens_k, [0, 5, 305, 317]);
/// assert_eq!((s.batch(), s.total_q(), s.max_seqlen_k()), (3, 6, 300));
/// assert_eq!(s.k_range(1), 5..305);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VarlenShape {
    /// `[batch + 1]` query-token offsets: 0, then running totals.
    pub cu_seqlens_q: Vec<usize>,
    /// `[batch + 1]` key offsets.
    pub cu_seqlens_k: Vec<usize>,
    /// Query heads.
    pub heads_q: usize,
    /// Key/value heads; `heads_q % heads_kv == 0`.
    pub heads_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
}

impl VarlenShape {
    /// The shape of sequences with these (query, key) lengths.
    pub fn from_lens(
        lens: &[(usize, usize)],
        heads_q: usize,
        heads_kv: usize,
        head_dim: usize,
    ) -> VarlenShape {
        let running = |f: fn(&(usize, usize)) -> usize| {
            std::iter::once(0)
                .chain(lens.iter().scan(0, move |t, l| {
                    *t += f(l);
                    Some(*t)
                }))
                .collect()
        };
        VarlenShape {
            cu_seqlens_q: running(|l| l.0),
            cu_seqlens_k: running(|l| l.1),
            heads_q,
            heads_kv,
            head_dim,
        }
    }
    /// Sequences.
    pub fn batch(&self) -> usize {
        self.cu_seqlens_q.len().saturating_sub(1)
    }
    /// Query tokens of all sequences.
    pub fn total_q(&self) -> usize {
        self.cu_seqlens_q.last().copied().unwrap_or(0)
    }
    /// Keys of all sequences.
    pub fn total_k(&self) -> usize {
        self.cu_seqlens_k.last().copied().unwrap_or(0)
    }
    /// Sequence b's query tokens in the packed Q.
    pub fn q_range(&self, b: usize) -> std::ops::Range<usize> {
        self.cu_seqlens_q[b]..self.cu_seqlens_q[b + 1]
    }
    /// Sequence b's keys in the packed K and V.
    pub fn k_range(&self, b: usize) -> std::ops::Range<usize> {
        self.cu_seqlens_k[b]..self.cu_seqlens_k[b + 1]
    }
    /// The longest sequence's query tokens.
    pub fn max_seqlen_q(&self) -> usize {
        (0..self.batch())
            .map(|b| self.q_range(b).len())
            .max()
            .unwrap_or(0)
    }
    /// The longest sequence's keys.
    pub fn max_seqlen_k(&self) -> usize {
        (0..self.batch())
            .map(|b| self.k_range(b).len())
            .max()
            .unwrap_or(0)
    }
    /// Sequence b as a dense shape of batch 1.
    pub fn sequence(&self, b: usize) -> AttnShape {
        AttnShape::new(
            1,
            self.q_range(b).len(),
            self.k_range(b).len(),
            self.heads_q,
            self.heads_kv,
            self.head_dim,
        )
    }
    /// The dense shape a varlen call is launched as: the sequences as the batch, the longest
    /// lengths as seq_q and seq_kv.
    pub fn launch_shape(&self) -> AttnShape {
        AttnShape::new(
            self.batch(),
            self.max_seqlen_q(),
            self.max_seqlen_k(),
            self.heads_q,
            self.heads_kv,
            self.head_dim,
        )
    }
    /// (query, key) pairs that take part, over every sequence and query head.
    pub fn attended_pairs(&self, causal: bool) -> u64 {
        (0..self.batch())
            .map(|b| self.sequence(b).attended_pairs(causal))
            .sum()
    }
    /// Checks the offsets (equal counts, at least one sequence, starting at 0, never
    /// decreasing) and the heads (`heads_q` a multiple of `heads_kv > 0`).
    pub fn check(&self) -> crate::Result<()> {
        let bad = |m: String| Err(crate::Error::InvalidInput(m));
        if self.heads_kv == 0 || !self.heads_q.is_multiple_of(self.heads_kv) {
            return bad(format!(
                "heads_q {} must be a multiple of heads_kv {} (and heads_kv > 0)",
                self.heads_q, self.heads_kv
            ));
        }
        if self.cu_seqlens_q.len() < 2 || self.cu_seqlens_k.len() != self.cu_seqlens_q.len() {
            return bad(format!(
                "cu_seqlens_q has {} offsets and cu_seqlens_k {}; both need batch + 1 >= 2",
                self.cu_seqlens_q.len(),
                self.cu_seqlens_k.len()
            ));
        }
        for (name, cu) in [
            ("cu_seqlens_q", &self.cu_seqlens_q),
            ("cu_seqlens_k", &self.cu_seqlens_k),
        ] {
            if cu[0] != 0 || cu.windows(2).any(|w| w[1] < w[0]) {
                return bad(format!("{name} {cu:?} must start at 0 and never decrease"));
            }
        }
        Ok(())
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
///
/// `#[non_exhaustive]`, so that options (a sliding window, a softcap) can be added without
/// breaking callers: build one with [`AttnParams::new`] or [`AttnParams::default_for`] and
/// adjust it with the `with_*` setters.
///
/// ```
/// use fp8_sdpa::AttnParams;
/// // 1/sqrt(128) and a causal mask.
/// let p = AttnParams::default_for(128, true);
/// assert_eq!((p.scale, p.causal), (1.0 / 128f32.sqrt(), true));
/// // An explicit scale; the setters chain.
/// let q = AttnParams::new(0.125, false).with_causal(true);
/// assert_eq!(q, AttnParams::default_for(64, true));
/// assert_eq!(q.with_scale(0.5).scale, 0.5);
/// ```
///
/// A struct literal does not compile outside the crate:
///
/// ```compile_fail,E0639
/// let p = fp8_sdpa::AttnParams { scale: 0.125, causal: false };
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttnParams {
    /// Softmax scale (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Causal mask, aligned bottom-right.
    pub causal: bool,
}

impl AttnParams {
    /// This softmax scale, with the given mask.
    pub const fn new(scale: f32, causal: bool) -> AttnParams {
        AttnParams { scale, causal }
    }

    /// The default scale `1/sqrt(head_dim)`, with the given mask.
    pub fn default_for(head_dim: usize, causal: bool) -> AttnParams {
        AttnParams::new(1.0 / (head_dim as f32).sqrt(), causal)
    }

    /// These parameters with softmax scale `scale`.
    #[must_use]
    pub const fn with_scale(self, scale: f32) -> AttnParams {
        AttnParams { scale, ..self }
    }

    /// These parameters with the causal mask (aligned bottom-right) on or off.
    #[must_use]
    pub const fn with_causal(self, causal: bool) -> AttnParams {
        AttnParams { causal, ..self }
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
    fn params_constructors_agree_and_serde_round_trips() {
        let p = AttnParams::new(0.125, true);
        assert_eq!(p, AttnParams::default_for(64, true));
        assert_eq!(p.with_causal(false), AttnParams::default_for(64, false));
        assert_eq!(p.with_scale(0.5), AttnParams::new(0.5, true));
        // The serialized form is unchanged by `#[non_exhaustive]`: the two fields by name.
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, r#"{"scale":0.125,"causal":true}"#);
        assert_eq!(serde_json::from_str::<AttnParams>(&json).unwrap(), p);
    }

    #[test]
    fn layout_strides() {
        assert_eq!(Layout::Bshd.strides(10, 4, 64), [2560, 256, 64]);
        assert_eq!(Layout::Bhsd.strides(10, 4, 64), [2560, 64, 640]);
    }
}
