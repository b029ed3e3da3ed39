//! The float64 CPU reference: the ground truth every kernel is checked against.
//!
//! `O = softmax(scale · Q·Kᵀ + mask) · V` computed in f64 with the row max subtracted before
//! `exp`, inputs and output BSHD-contiguous. Conventions are those of `abi.cuh`: the causal
//! mask is aligned bottom-right (query i sees key j iff `j <= i + seq_kv − seq_q`), a row
//! that sees no key gets O = 0 and LSE = −inf, query head h reads kv head
//! `h / (heads_q / heads_kv)`, and a NaN anywhere in what a row reads makes that row NaN.

use crate::fp8::{self, e4m3};
use crate::problem::VarlenShape;
use crate::{AttnShape, DType, Error, Result};
use rayon::prelude::*;

/// The reference's results.
#[derive(Debug, Clone, PartialEq)]
pub struct RefOutput {
    /// Attention output, BSHD `[batch, seq_q, heads_q, head_dim]` (varlen: packed
    /// `[total_q, heads_q, head_dim]`).
    pub o: Vec<f64>,
    /// Per-row log-sum-exp of the scaled scores, `[batch, heads_q, seq_q]` (varlen:
    /// `[heads_q, total_q]`), natural log; −inf for a row that sees no key.
    pub lse: Vec<f64>,
    /// Per row (ordered as `lse`), the largest `scale · Σ_c |q_c · k_c|` over the keys the row
    /// sees (0 for a row that sees none): the magnitude that a score's additions round
    /// against, which bounds the 8-bit `wgmma`'s score error (`harness::lse_tolerances`).
    /// Empty where a caller assembled the reference without it.
    pub score_magnitude: Vec<f64>,
    /// Per element of `o` (same order), the row's score magnitude times
    /// `Σⱼ pⱼ·|vⱼ − oᵢ| / l`: a relative error δ in each key's weight, as a score error of
    /// δ / magnitude gives, moves the element by at most δ times this. It bounds the 8-bit
    /// `wgmma`'s O error from score truncation (`harness::judge`). Empty where a caller
    /// assembled the reference without it.
    pub o_slack: Vec<f64>,
}

/// Number of keys query row `i` sees: all of them, or under the bottom-right-aligned causal
/// mask the first `i + seq_kv − seq_q + 1` (clamped to `0..=seq_kv`).
pub fn visible_keys(i: usize, seq_q: usize, seq_kv: usize, causal: bool) -> usize {
    ScoreMods::causal(causal).visible_range(i, seq_q, seq_kv).1
}

/// What a query row sees and how its scores are shaped beyond the scale, with FlashAttention's
/// semantics (`flash_attn_func`'s `causal`, `window_size`, `softcap`, `alibi_slopes`). Row `i`'s
/// diagonal is key `i + seq_kv − seq_q` (bottom-right alignment).
///
/// ```
/// use fp8_sdpa::reference::ScoreMods;
/// // Mistral's sliding window: causal, 4096 keys back.
/// let m = ScoreMods::causal(true).with_window(Some(4096), Some(0));
/// // Row 9999 of 10k: keys 9999 - 4096 ..= 9999.
/// assert_eq!(m.visible_range(9_999, 10_000, 10_000), (5_903, 10_000));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScoreMods {
    /// Causal mask: keys up to the diagonal.
    pub causal: bool,
    /// Keys at most `left` before and `right` after the diagonal; `None`: unbounded (FA's -1).
    pub window: (Option<usize>, Option<usize>),
    /// `softcap · tanh(s / softcap)` of each scaled score `s`, before the bias; `None`: off.
    pub softcap: Option<f64>,
    /// ALiBi slopes, `heads_q` of them or `batch × heads_q` (row-major): the bias
    /// `−slope · |i + seq_kv − seq_q − j|` is added to the score of query `i` and key `j`.
    pub alibi: Option<Vec<f64>>,
}

impl ScoreMods {
    /// No mask but `causal`'s, no score shaping.
    pub fn causal(causal: bool) -> ScoreMods {
        ScoreMods {
            causal,
            ..ScoreMods::default()
        }
    }

    /// These modifiers with a sliding window of `left` keys before and `right` after the
    /// diagonal (`None`: unbounded).
    #[must_use]
    pub fn with_window(mut self, left: Option<usize>, right: Option<usize>) -> ScoreMods {
        self.window = (left, right);
        self
    }

    /// These modifiers with a softcap (`None` or 0: off).
    #[must_use]
    pub fn with_softcap(mut self, softcap: Option<f64>) -> ScoreMods {
        self.softcap = softcap.filter(|&c| c != 0.0);
        self
    }

    /// These modifiers with ALiBi slopes (`heads_q` or `batch × heads_q` values).
    #[must_use]
    pub fn with_alibi(mut self, slopes: Option<Vec<f64>>) -> ScoreMods {
        self.alibi = slopes;
        self
    }

    /// The keys `[lo, hi)` query row `i` sees (empty as `lo == hi`).
    pub fn visible_range(&self, i: usize, seq_q: usize, seq_kv: usize) -> (usize, usize) {
        let diag = i as i128 + seq_kv as i128 - seq_q as i128;
        let mut hi = seq_kv as i128;
        if self.causal {
            hi = hi.min(diag + 1);
        }
        if let Some(r) = self.window.1 {
            hi = hi.min(diag + r as i128 + 1);
        }
        let lo = self.window.0.map_or(0, |l| (diag - l as i128).max(0));
        let hi = hi.clamp(0, seq_kv as i128);
        (lo.min(hi) as usize, hi as usize)
    }

    /// The slope for (batch `b`, query head `h`), 0 without ALiBi.
    fn slope(&self, b: usize, h: usize, heads_q: usize) -> f64 {
        match &self.alibi {
            Some(a) if a.len() == heads_q => a[h],
            Some(a) => a[b * heads_q + h],
            None => 0.0,
        }
    }

    fn check(&self, batch: usize, heads_q: usize) -> Result<()> {
        if let Some(a) = &self.alibi {
            if a.len() != heads_q && a.len() != batch * heads_q {
                return Err(Error::InvalidInput(format!(
                    "{} ALiBi slopes: give heads_q ({heads_q}) or batch x heads_q ({})",
                    a.len(),
                    batch * heads_q
                )));
            }
        }
        match self.softcap {
            Some(c) if !(c.is_finite() && c > 0.0) => Err(Error::InvalidInput(format!(
                "softcap {c} must be finite and > 0 (or off)"
            ))),
            _ => Ok(()),
        }
    }
}

fn check_shape(shape: &AttnShape, q: usize, k: usize, v: usize) -> Result<()> {
    if shape.heads_kv == 0 || !shape.heads_q.is_multiple_of(shape.heads_kv) {
        return Err(Error::InvalidInput(format!(
            "heads_q {} must be a multiple of heads_kv {} (and heads_kv > 0)",
            shape.heads_q, shape.heads_kv
        )));
    }
    let dims = |s: usize, h: usize| [shape.batch, s, h, shape.head_dim];
    let q_len = fp8::element_count(dims(shape.seq_q, shape.heads_q))?;
    let kv_len = fp8::element_count(dims(shape.seq_kv, shape.heads_kv))?;
    for (name, got, want) in [("q", q, q_len), ("k", k, kv_len), ("v", v, kv_len)] {
        if got != want {
            return Err(Error::InvalidInput(format!(
                "{name} has {got} elements, shape {shape:?} needs {want}"
            )));
        }
    }
    Ok(())
}

/// One (sequence, query head) task's output: its rows of O, LSEs, score magnitudes and O
/// slack, in row order.
type HeadRows = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

/// Computes attention in f64. `q`, `k`, `v` are BSHD-contiguous (`[batch, seq, heads,
/// head_dim]`), `scale` multiplies the scores before the softmax. Work is spread over
/// (batch, query head) with rayon. Errors when `heads_q` is not a multiple of `heads_kv` or
/// a length does not match the shape; zero-sized dimensions give empty outputs (and, with
/// `seq_kv == 0`, zero rows with LSE −inf).
pub fn attention(
    shape: &AttnShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    scale: f64,
    causal: bool,
) -> Result<RefOutput> {
    attention_with(shape, q, k, v, scale, &ScoreMods::causal(causal))
}

/// [`attention`] with the score modifiers `mods` (window, softcap, ALiBi, causal). Errors as
/// [`attention`] does, and on ALiBi slopes of another length or a softcap that is not
/// finite and positive.
pub fn attention_with(
    shape: &AttnShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    scale: f64,
    mods: &ScoreMods,
) -> Result<RefOutput> {
    check_shape(shape, q.len(), k.len(), v.len())?;
    mods.check(shape.batch, shape.heads_q)?;
    let AttnShape {
        batch,
        seq_q,
        seq_kv,
        heads_q,
        heads_kv,
        head_dim: d,
    } = *shape;
    let group = heads_q / heads_kv;

    // One task per (batch, query head); each returns its [seq_q, d] rows, seq_q LSEs, score
    // magnitudes and its rows' O slack.
    let per_head: Vec<HeadRows> = (0..batch * heads_q)
        .into_par_iter()
        .map(|bh| {
            let (b, h) = (bh / heads_q, bh % heads_q);
            let hk = h / group;
            // Gather this head's K and V rows contiguously: the inner loops then stream.
            let gather = |t: &[f64]| -> Vec<f64> {
                (0..seq_kv)
                    .flat_map(|j| {
                        let at = ((b * seq_kv + j) * heads_kv + hk) * d;
                        t[at..at + d].iter().copied()
                    })
                    .collect()
            };
            let (kh, vh) = (gather(k), gather(v));
            let mut o = vec![0f64; seq_q * d];
            let mut slack = vec![0f64; seq_q * d];
            let mut lse = vec![f64::NEG_INFINITY; seq_q];
            let mut mag = vec![0f64; seq_q];
            let mut s = vec![0f64; seq_kv];
            for i in 0..seq_q {
                let qi = &q[((b * seq_q + i) * heads_q + h) * d..][..d];
                let row = Row::new(mods, i, seq_q, seq_kv, mods.slope(b, h, heads_q));
                let (oi, si) = (&mut o[i * d..][..d], &mut slack[i * d..][..d]);
                (lse[i], mag[i]) = attend_row(qi, &kh, &vh, &row, scale, &mut s, oi, si);
            }
            (o, lse, mag, slack)
        })
        .collect();

    let mut o = vec![0f64; shape.q_len()];
    let mut o_slack = vec![0f64; shape.q_len()];
    let mut lse = Vec::with_capacity(shape.lse_len());
    let mut score_magnitude = Vec::with_capacity(shape.lse_len());
    for (bh, (oh, lh, mh, sh)) in per_head.into_iter().enumerate() {
        let (b, h) = (bh / heads_q, bh % heads_q);
        for i in 0..seq_q {
            let at = ((b * seq_q + i) * heads_q + h) * d;
            o[at..at + d].copy_from_slice(&oh[i * d..][..d]);
            o_slack[at..at + d].copy_from_slice(&sh[i * d..][..d]);
        }
        lse.extend_from_slice(&lh); // [b, h, seq_q] order is the task order
        score_magnitude.extend_from_slice(&mh);
    }
    Ok(RefOutput {
        o,
        lse,
        score_magnitude,
        o_slack,
    })
}

/// One query row's view of the keys: the range it sees, its diagonal, and how its scores are
/// shaped ([`ScoreMods`]).
struct Row {
    lo: usize,
    hi: usize,
    diag: i128,
    softcap: Option<f64>,
    slope: f64,
}

impl Row {
    fn new(mods: &ScoreMods, i: usize, seq_q: usize, seq_kv: usize, slope: f64) -> Row {
        let (lo, hi) = mods.visible_range(i, seq_q, seq_kv);
        Row {
            lo,
            hi,
            diag: i as i128 + seq_kv as i128 - seq_q as i128,
            softcap: mods.softcap,
            slope,
        }
    }

    /// The score of key `j` from its scaled dot product.
    fn score(&self, scaled: f64, j: usize) -> f64 {
        let s = self.softcap.map_or(scaled, |c| c * (scaled / c).tanh());
        if self.slope == 0.0 {
            s
        } else {
            s - self.slope * (self.diag - j as i128).abs() as f64
        }
    }
}

/// One query row `qi` against the keys `row` sees of a head's gathered keys `kh` and values
/// `vh` (`[keys, d]`, d = `qi.len()`): writes the output row to `oi` and its O slack
/// ([`RefOutput::o_slack`]) to `slack` (both left 0 when it sees none) and returns the LSE
/// (−inf when it sees none) and the row's score magnitude ([`RefOutput::score_magnitude`]).
/// `s` is scratch of at least as many scores as keys.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    qi: &[f64],
    kh: &[f64],
    vh: &[f64],
    row: &Row,
    scale: f64,
    s: &mut [f64],
    oi: &mut [f64],
    slack: &mut [f64],
) -> (f64, f64) {
    let d = qi.len();
    let (lo, n) = (row.lo, row.hi - row.lo);
    if n == 0 {
        return (f64::NEG_INFINITY, 0.0); // fully masked: O = 0, LSE = -inf
    }
    let (kh, vh) = (&kh[lo * d..], &vh[lo * d..]);
    let s = &mut s[..n];
    let mut mag = 0f64;
    for (j, sj) in s.iter_mut().enumerate() {
        let kj = &kh[j * d..][..d];
        let (dot, abs) = qi.iter().zip(kj).fold((0f64, 0f64), |(t, a), (x, y)| {
            (t + x * y, a + (x * y).abs())
        });
        *sj = row.score(scale * dot, lo + j);
        mag = mag.max(scale.abs() * abs);
    }
    // Row max that keeps NaN: f64::max would drop it and hide a NaN score.
    let m = s.iter().fold(
        f64::NEG_INFINITY,
        |m, &x| {
            if x.is_nan() || x > m {
                x
            } else {
                m
            }
        },
    );
    let mut l = 0f64;
    for (j, sj) in s.iter_mut().enumerate() {
        let p = (*sj - m).exp();
        *sj = p; // kept for the slack below
        l += p;
        // 0 · NaN is NaN, so a NaN in a visible V row reaches the output even where its
        // weight underflowed to zero.
        for (oc, &vc) in oi.iter_mut().zip(&vh[j * d..][..d]) {
            *oc += p * vc;
        }
    }
    for oc in oi.iter_mut() {
        *oc /= l;
    }
    for (j, &p) in s.iter().enumerate() {
        for ((sc, &vc), &oc) in slack.iter_mut().zip(&vh[j * d..][..d]).zip(oi.iter()) {
            *sc += p * (vc - oc).abs();
        }
    }
    for sc in slack.iter_mut() {
        // A non-finite slack would loosen the bound to nothing: such rows get none.
        let x = *sc / l * mag;
        *sc = if x.is_finite() { x } else { 0.0 };
    }
    (m + l.ln(), mag)
}

/// Attention over a variable-length batch in f64 ([`VarlenShape`]: FlashAttention's varlen
/// convention). `q` is packed `[total_q, heads_q, head_dim]`, `k` and `v`
/// `[total_k, heads_kv, head_dim]`; sequence b is the query tokens
/// `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` and the keys `cu_seqlens_k[b]..cu_seqlens_k[b + 1]`,
/// and attends to its own keys only, causal aligned bottom-right per sequence. The output is
/// packed like `q`, the LSE is `[heads_q, total_q]`. Errors as [`attention`] does, and on
/// offsets that are not a valid varlen batch ([`VarlenShape::check`]).
pub fn attention_varlen(
    shape: &VarlenShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    scale: f64,
    causal: bool,
) -> Result<RefOutput> {
    attention_varlen_with(shape, q, k, v, scale, &ScoreMods::causal(causal))
}

/// [`attention_varlen`] with the score modifiers `mods`, each sequence aligned bottom-right on
/// its own lengths (per-batch ALiBi slopes index the sequence).
pub fn attention_varlen_with(
    shape: &VarlenShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    scale: f64,
    mods: &ScoreMods,
) -> Result<RefOutput> {
    shape.check()?;
    mods.check(shape.batch(), shape.heads_q)?;
    let (hq, hkv, d) = (shape.heads_q, shape.heads_kv, shape.head_dim);
    let (total_q, total_k) = (shape.total_q(), shape.total_k());
    for (name, got, want) in [
        ("q", q.len(), total_q * hq * d),
        ("k", k.len(), total_k * hkv * d),
        ("v", v.len(), total_k * hkv * d),
    ] {
        if got != want {
            return Err(Error::InvalidInput(format!(
                "{name} has {got} elements, the packed varlen shape needs {want}"
            )));
        }
    }
    let group = hq / hkv;
    // One task per (sequence, query head): its rows of O, its LSEs, score magnitudes and O
    // slack.
    let per_head: Vec<HeadRows> = (0..shape.batch() * hq)
        .into_par_iter()
        .map(|bh| {
            let (b, h) = (bh / hq, bh % hq);
            let (qs, ks) = (shape.q_range(b), shape.k_range(b));
            let (lq, lk) = (qs.len(), ks.len());
            let gather = |t: &[f64]| -> Vec<f64> {
                ks.clone()
                    .flat_map(|j| t[(j * hkv + h / group) * d..][..d].iter().copied())
                    .collect()
            };
            let (kh, vh) = (gather(k), gather(v));
            let mut o = vec![0f64; lq * d];
            let mut slack = vec![0f64; lq * d];
            let mut lse = vec![f64::NEG_INFINITY; lq];
            let mut mag = vec![0f64; lq];
            let mut s = vec![0f64; lk];
            for (i, tok) in qs.enumerate() {
                let qi = &q[(tok * hq + h) * d..][..d];
                let row = Row::new(mods, i, lq, lk, mods.slope(b, h, hq));
                let (oi, si) = (&mut o[i * d..][..d], &mut slack[i * d..][..d]);
                (lse[i], mag[i]) = attend_row(qi, &kh, &vh, &row, scale, &mut s, oi, si);
            }
            (o, lse, mag, slack)
        })
        .collect();
    let mut o = vec![0f64; total_q * hq * d];
    let mut o_slack = vec![0f64; total_q * hq * d];
    let mut lse = vec![f64::NEG_INFINITY; hq * total_q];
    let mut score_magnitude = vec![0f64; hq * total_q];
    for (bh, (oh, lh, mh, sh)) in per_head.into_iter().enumerate() {
        let (b, h) = (bh / hq, bh % hq);
        for (i, tok) in shape.q_range(b).enumerate() {
            o[(tok * hq + h) * d..][..d].copy_from_slice(&oh[i * d..][..d]);
            o_slack[(tok * hq + h) * d..][..d].copy_from_slice(&sh[i * d..][..d]);
            lse[h * total_q + tok] = lh[i];
            score_magnitude[h * total_q + tok] = mh[i];
        }
    }
    Ok(RefOutput {
        o,
        lse,
        score_magnitude,
        o_slack,
    })
}

/// Widens f32 values to f64 (exact).
pub fn widen(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&x| f64::from(x)).collect()
}

/// Decodes typed host data into f64: `bytes` holds little-endian elements of `dtype` in BSHD
/// order `dims = [batch, seq, heads, dim]`; element value = decode(code) · descale (exact in
/// f64), with decode the identity for f16/bf16/f32, the E4M3 value for E4M3 and `u − 128`
/// for the simulated FP8 (the kernels' conventions, `abi.cuh`).
///
/// The descale of (b, h) is `descales[b * descale_batch_stride + h]`; a stride of 0
/// broadcasts one descale per head over the batch. Scaled types (E4M3, simulated FP8) need
/// descales, unscaled ones take none. Errors on a length mismatch, missing or unexpected
/// descales, too few descales, or a descale that is not a positive finite number.
pub fn dequantize(
    dtype: DType,
    bytes: &[u8],
    descales: Option<&[f32]>,
    dims: [usize; 4],
    descale_batch_stride: usize,
) -> Result<Vec<f64>> {
    let n = fp8::element_count(dims)?;
    let want = n
        .checked_mul(dtype.size())
        .ok_or_else(|| Error::InvalidInput(format!("dims {dims:?} overflow")))?;
    if bytes.len() != want {
        return Err(Error::InvalidInput(format!(
            "{dtype} data has {} bytes, dims {dims:?} need {want}",
            bytes.len()
        )));
    }
    let [batch, seq, heads, dim] = dims;
    let descales = match (dtype.is_scaled(), descales) {
        (true, None) => {
            return Err(Error::InvalidInput(format!("{dtype} data needs descales")));
        }
        (false, Some(_)) => {
            return Err(Error::InvalidInput(format!(
                "{dtype} data takes no descales (its descale is 1)"
            )));
        }
        (false, None) => None,
        (true, Some(ds)) => {
            if batch > 0 && heads > 0 {
                let need = (batch - 1)
                    .checked_mul(descale_batch_stride)
                    .and_then(|x| x.checked_add(heads))
                    .ok_or_else(|| Error::InvalidInput("descale stride overflows".into()))?;
                if ds.len() < need {
                    return Err(Error::InvalidInput(format!(
                        "{} descales, batch {batch} × heads {heads} with batch stride \
                         {descale_batch_stride} need {need}",
                        ds.len()
                    )));
                }
            }
            if let Some(x) = ds.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return Err(Error::InvalidInput(format!(
                    "descale {x} is not a positive finite number"
                )));
            }
            Some(ds)
        }
    };
    let raw: Vec<f64> = match dtype {
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::Bf16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        DType::E4m3 => bytes.iter().map(|&c| f64::from(e4m3::decode(c))).collect(),
        DType::SimFp8 => bytes.iter().map(|&u| f64::from(u) - 128.0).collect(),
    };
    let Some(ds) = descales else {
        return Ok(raw);
    };
    Ok(raw
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            // i = ((b * seq + s) * heads + h) * dim + c
            let b = i / (seq * heads * dim).max(1);
            let h = (i / dim.max(1)) % heads.max(1);
            x * f64::from(ds[b * descale_batch_stride + h])
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn shape(b: usize, sq: usize, skv: usize, hq: usize, hkv: usize, d: usize) -> AttnShape {
        AttnShape::new(b, sq, skv, hq, hkv, d)
    }

    /// Textbook attention: explicit exp-and-normalize softmax on unshifted scores, masked
    /// entries set to −inf (so exp gives 0), indexing written out per element.
    fn textbook(
        s: &AttnShape,
        q: &[f64],
        k: &[f64],
        v: &[f64],
        scale: f64,
        causal: bool,
    ) -> RefOutput {
        let mut o = vec![0.0; s.q_len()];
        let mut lse = vec![0.0; s.lse_len()];
        let g = s.heads_q / s.heads_kv;
        for b in 0..s.batch {
            for h in 0..s.heads_q {
                for i in 0..s.seq_q {
                    let mut w = vec![0.0; s.seq_kv];
                    for (j, wj) in w.iter_mut().enumerate() {
                        let allowed =
                            !causal || (j as i64) <= i as i64 + s.seq_kv as i64 - s.seq_q as i64;
                        *wj = if allowed {
                            let mut dot = 0.0;
                            for c in 0..s.head_dim {
                                let qi = q[((b * s.seq_q + i) * s.heads_q + h) * s.head_dim + c];
                                let kj =
                                    k[((b * s.seq_kv + j) * s.heads_kv + h / g) * s.head_dim + c];
                                dot += qi * kj;
                            }
                            (scale * dot).exp()
                        } else {
                            0.0
                        };
                    }
                    let total: f64 = w.iter().sum();
                    lse[(b * s.heads_q + h) * s.seq_q + i] = total.ln();
                    for c in 0..s.head_dim {
                        let mut acc = 0.0;
                        for (j, wj) in w.iter().enumerate() {
                            acc +=
                                wj * v[((b * s.seq_kv + j) * s.heads_kv + h / g) * s.head_dim + c];
                        }
                        o[((b * s.seq_q + i) * s.heads_q + h) * s.head_dim + c] =
                            if total > 0.0 { acc / total } else { 0.0 };
                    }
                }
            }
        }
        RefOutput {
            o,
            lse,
            score_magnitude: Vec::new(),
            o_slack: Vec::new(),
        }
    }

    #[test]
    fn o_slack_is_the_magnitude_times_the_weighted_spread_of_v() {
        let s = shape(1, 3, 4, 2, 1, 8);
        let (q, k, v) = (
            random(21, s.q_len()),
            random(22, s.kv_len()),
            random(23, s.kv_len()),
        );
        let r = attention(&s, &q, &k, &v, 0.4, true).unwrap();
        assert_eq!(r.o_slack.len(), r.o.len());
        for h in 0..2 {
            for i in 0..3 {
                let n = visible_keys(i, 3, 4, true);
                let qi = &q[(i * 2 + h) * 8..][..8];
                let sc: Vec<f64> = (0..n)
                    .map(|j| {
                        0.4 * qi
                            .iter()
                            .zip(&k[j * 8..][..8])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                    })
                    .collect();
                let m = sc.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                let p: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let l: f64 = p.iter().sum();
                let at = (i * 2 + h) * 8;
                for c in 0..8 {
                    let spread: f64 = (0..n)
                        .map(|j| p[j] * (v[j * 8 + c] - r.o[at + c]).abs())
                        .sum::<f64>()
                        / l;
                    let want = spread * r.score_magnitude[h * 3 + i];
                    assert!(
                        (r.o_slack[at + c] - want).abs() < 1e-12,
                        "h {h} i {i} c {c}"
                    );
                }
            }
        }
    }

    #[test]
    fn score_magnitude_is_the_largest_absolute_product_sum_the_row_sees() {
        let s = shape(1, 3, 4, 2, 1, 8);
        let (q, k, v) = (
            random(11, s.q_len()),
            random(12, s.kv_len()),
            random(13, s.kv_len()),
        );
        let scale = -0.3; // a negative scale still gives a magnitude
        let r = attention(&s, &q, &k, &v, scale, true).unwrap();
        assert_eq!(r.score_magnitude.len(), r.lse.len());
        for h in 0..2 {
            for i in 0..3 {
                let n = visible_keys(i, 3, 4, true);
                let qi = &q[(i * 2 + h) * 8..][..8];
                let want = (0..n)
                    .map(|j| {
                        0.3 * qi
                            .iter()
                            .zip(&k[j * 8..][..8])
                            .map(|(a, b)| (a * b).abs())
                            .sum::<f64>()
                    })
                    .fold(0.0, f64::max);
                assert!(
                    (r.score_magnitude[h * 3 + i] - want).abs() < 1e-12,
                    "h {h} i {i}"
                );
            }
        }
    }

    fn random(seed: u64, n: usize) -> Vec<f64> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| rng.random_range(-1.5..1.5)).collect()
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x == y) || (x - y).abs() <= tol * (1.0 + y.abs()))
    }

    #[test]
    fn matches_textbook_formula() {
        let cases = [
            (shape(1, 5, 5, 1, 1, 4), false),
            (shape(2, 7, 9, 4, 4, 8), false),  // MHA
            (shape(2, 6, 6, 4, 2, 8), true),   // GQA, square causal
            (shape(1, 3, 11, 6, 1, 4), true),  // MQA, seq_q < seq_kv
            (shape(2, 9, 4, 2, 1, 8), true),   // seq_q > seq_kv: first rows fully masked
            (shape(1, 1, 13, 8, 2, 16), true), // decode-like
        ];
        for (n, (s, causal)) in cases.into_iter().enumerate() {
            let seed = 100 * n as u64;
            let q = random(seed, s.q_len());
            let k = random(seed + 1, s.kv_len());
            let v = random(seed + 2, s.kv_len());
            let scale = 1.0 / (s.head_dim as f64).sqrt();
            let got = attention(&s, &q, &k, &v, scale, causal).unwrap();
            let want = textbook(&s, &q, &k, &v, scale, causal);
            assert!(close(&got.o, &want.o, 1e-12), "case {n} O");
            assert!(close(&got.lse, &want.lse, 1e-12), "case {n} LSE");
        }
    }

    /// FlashAttention's `attention_ref` with its options, per element: scaled scores, softcap,
    /// the local mask, the ALiBi bias, softmax (rows that see nothing give 0).
    fn textbook_with(
        s: &AttnShape,
        q: &[f64],
        k: &[f64],
        v: &[f64],
        scale: f64,
        m: &ScoreMods,
    ) -> (Vec<f64>, Vec<f64>) {
        let (d, g) = (s.head_dim, s.heads_q / s.heads_kv);
        let mut o = vec![0.0; s.q_len()];
        let mut lse = vec![f64::NEG_INFINITY; s.lse_len()];
        for b in 0..s.batch {
            for h in 0..s.heads_q {
                for i in 0..s.seq_q {
                    let diag = i as i64 + s.seq_kv as i64 - s.seq_q as i64;
                    let w: Vec<f64> = (0..s.seq_kv)
                        .map(|j| {
                            let jj = j as i64;
                            let seen = (!m.causal || jj <= diag)
                                && m.window.0.is_none_or(|l| jj >= diag - l as i64)
                                && m.window.1.is_none_or(|r| jj <= diag + r as i64);
                            if !seen {
                                return 0.0;
                            }
                            let mut x: f64 = (0..d)
                                .map(|c| {
                                    q[((b * s.seq_q + i) * s.heads_q + h) * d + c]
                                        * k[((b * s.seq_kv + j) * s.heads_kv + h / g) * d + c]
                                })
                                .sum::<f64>()
                                * scale;
                            if let Some(c) = m.softcap {
                                x = c * (x / c).tanh();
                            }
                            if let Some(a) = &m.alibi {
                                let slope = if a.len() == s.heads_q {
                                    a[h]
                                } else {
                                    a[b * s.heads_q + h]
                                };
                                x -= slope * (diag - jj).abs() as f64;
                            }
                            x.exp()
                        })
                        .collect();
                    let total: f64 = w.iter().sum();
                    if total > 0.0 {
                        lse[(b * s.heads_q + h) * s.seq_q + i] = total.ln();
                    }
                    for c in 0..d {
                        let acc: f64 = (0..s.seq_kv)
                            .map(|j| w[j] * v[((b * s.seq_kv + j) * s.heads_kv + h / g) * d + c])
                            .sum();
                        o[((b * s.seq_q + i) * s.heads_q + h) * d + c] =
                            if total > 0.0 { acc / total } else { 0.0 };
                    }
                }
            }
        }
        (o, lse)
    }

    #[test]
    fn window_softcap_and_alibi_match_flash_attentions_definitions() {
        let slopes = |n: usize| Some((0..n).map(|i| 0.05 * (i + 1) as f64).collect());
        let cases = [
            (
                shape(1, 9, 9, 2, 1, 8),
                ScoreMods::causal(true).with_window(Some(3), Some(0)),
            ),
            (
                shape(2, 5, 12, 4, 2, 8),
                ScoreMods::default().with_window(Some(2), Some(4)),
            ),
            (
                shape(1, 12, 5, 2, 2, 4),
                ScoreMods::default().with_window(Some(1), None),
            ), // Sq > Skv
            (
                shape(1, 7, 20, 2, 1, 8),
                ScoreMods::default().with_window(None, Some(1)),
            ),
            (
                shape(2, 6, 6, 2, 2, 8),
                ScoreMods::causal(true).with_softcap(Some(0.7)),
            ),
            (
                shape(2, 4, 9, 4, 2, 8),
                ScoreMods::default().with_alibi(slopes(4)),
            ),
            (
                shape(2, 4, 9, 2, 1, 8),
                ScoreMods::causal(true).with_alibi(slopes(4)),
            ), // per batch
            (
                shape(1, 8, 16, 2, 1, 8),
                ScoreMods::causal(true)
                    .with_window(Some(5), Some(0))
                    .with_softcap(Some(2.0))
                    .with_alibi(slopes(2)),
            ),
        ];
        for (n, (s, m)) in cases.into_iter().enumerate() {
            let seed = 700 + 10 * n as u64;
            let q = random(seed, s.q_len());
            let k = random(seed + 1, s.kv_len());
            let v = random(seed + 2, s.kv_len());
            let scale = 1.0 / (s.head_dim as f64).sqrt();
            let got = attention_with(&s, &q, &k, &v, scale, &m).unwrap();
            let (o, lse) = textbook_with(&s, &q, &k, &v, scale, &m);
            assert!(close(&got.o, &o, 1e-12), "case {n} O");
            assert!(close(&got.lse, &lse, 1e-12), "case {n} LSE");
        }
        // Bad modifiers are refused.
        let s = shape(1, 2, 2, 2, 1, 4);
        let x = random(1, 16);
        let bad = ScoreMods::default().with_alibi(Some(vec![0.1; 3]));
        assert!(attention_with(&s, &x[..8], &x[..8], &x[..8], 1.0, &bad).is_err());
        let bad = ScoreMods::default().with_softcap(Some(f64::NAN));
        assert!(attention_with(&s, &x[..8], &x[..8], &x[..8], 1.0, &bad).is_err());
    }

    #[test]
    fn the_visible_range_clamps_to_the_keys() {
        let m = ScoreMods::causal(true).with_window(Some(2), Some(0));
        assert_eq!(m.visible_range(0, 4, 4), (0, 1));
        assert_eq!(m.visible_range(3, 4, 4), (1, 4));
        assert_eq!(m.visible_range(0, 6, 4), (0, 0)); // diagonal before the first key
        let w = ScoreMods::default().with_window(Some(0), Some(0));
        assert_eq!(w.visible_range(2, 3, 8), (7, 8));
        assert_eq!(ScoreMods::default().visible_range(5, 1, 9), (0, 9));
    }

    #[test]
    fn hand_worked_one_query_two_keys() {
        // q = [1, 0], k0 = [1, 0], k1 = [0, 1], v0 = [1, 2], v1 = [3, 4], scale 1.
        // Scores: q·k0 = 1, q·k1 = 0. Softmax: p0 = e/(e+1) = 0.7310585786300049,
        // p1 = 1/(e+1) = 0.2689414213699951.
        // O = p0·[1, 2] + p1·[3, 4] = [1 + 2·p1, 2 + 2·p1] = [1.53788284273999, 2.53788284273999].
        // LSE = ln(e + 1) = 1.3132616875182228.
        let s = shape(1, 1, 2, 1, 1, 2);
        let r = attention(
            &s,
            &[1.0, 0.0],
            &[1.0, 0.0, 0.0, 1.0],
            &[1.0, 2.0, 3.0, 4.0],
            1.0,
            false,
        )
        .unwrap();
        assert!((r.o[0] - 1.5378828427399902).abs() < 1e-15);
        assert!((r.o[1] - 2.537_882_842_739_99).abs() < 1e-15);
        assert!((r.lse[0] - 1.3132616875182228).abs() < 1e-15);
    }

    #[test]
    fn hand_worked_causal_bottom_right() {
        // seq_q 2, seq_kv 3, d 1, scale 0.5: query 0 sees keys 0..=1, query 1 sees 0..=2.
        // q = [2, 0], k = [1, 1, 5], v = [10, 20, 30].
        // Row 0: scores 0.5·2·[1, 1] = [1, 1] -> equal weights -> O = (10 + 20)/2 = 15,
        //        LSE = ln(2e) = 1 + ln 2 = 1.6931471805599454.
        // Row 1: q = 0 -> scores [0, 0, 0] -> O = (10 + 20 + 30)/3 = 20, LSE = ln 3.
        // (Top-left alignment would have given row 0 only key 0, O = 10.)
        let s = shape(1, 2, 3, 1, 1, 1);
        let r = attention(
            &s,
            &[2.0, 0.0],
            &[1.0, 1.0, 5.0],
            &[10.0, 20.0, 30.0],
            0.5,
            true,
        )
        .unwrap();
        assert!((r.o[0] - 15.0).abs() < 1e-13);
        assert!((r.o[1] - 20.0).abs() < 1e-13);
        assert!((r.lse[0] - 1.6931471805599454).abs() < 1e-15);
        assert!((r.lse[1] - 3f64.ln()).abs() < 1e-15);
    }

    #[test]
    fn fully_masked_rows_are_zero_with_lse_neg_inf() {
        // seq_q 4 > seq_kv 2: rows 0 and 1 see no key (i + 2 - 4 < 0).
        let s = shape(1, 4, 2, 2, 1, 3);
        let q = random(1, s.q_len());
        let k = random(2, s.kv_len());
        let v = random(3, s.kv_len());
        let r = attention(&s, &q, &k, &v, 0.7, true).unwrap();
        for h in 0..2 {
            for i in 0..4 {
                let row = &r.o[(i * 2 + h) * 3..][..3];
                let l = r.lse[h * 4 + i];
                if i < 2 {
                    assert!(row.iter().all(|&x| x == 0.0));
                    assert_eq!(l, f64::NEG_INFINITY);
                } else {
                    assert!(row.iter().all(|x| x.is_finite()) && l.is_finite());
                }
            }
        }
        // seq_kv 0: every row masked, causal or not
        let s = shape(1, 2, 0, 1, 1, 2);
        let r = attention(&s, &[1.0; 4], &[], &[], 1.0, false).unwrap();
        assert_eq!(r.o, vec![0.0; 4]);
        assert_eq!(r.lse, vec![f64::NEG_INFINITY; 2]);
    }

    #[test]
    fn nan_propagates_to_the_rows_that_read_it() {
        let s = shape(1, 3, 3, 1, 1, 2);
        let mut q = random(4, s.q_len());
        let k = random(5, s.kv_len());
        let mut v = random(6, s.kv_len());
        q[2] = f64::NAN; // query row 1
        let r = attention(&s, &q, &k, &v, 1.0, false).unwrap();
        assert!(r.o[2..4].iter().all(|x| x.is_nan()) && r.lse[1].is_nan());
        assert!(r.o[..2].iter().chain(&r.o[4..]).all(|x| x.is_finite()));
        // NaN in key row 2's value: causal rows 0 and 1 do not see key 2, row 2 does.
        q[2] = 0.0;
        v[4] = f64::NAN;
        let r = attention(&s, &q, &k, &v, 1.0, true).unwrap();
        assert!(r.o[..4].iter().all(|x| x.is_finite()));
        assert!(r.o[4].is_nan());
        // even when its weight is exp(-huge) = 0
        let mut k2 = k.clone();
        k2[4] = -1e300;
        k2[5] = 0.0;
        let mut q2 = q.clone();
        q2[4] = 1e10;
        q2[5] = 0.0;
        let r = attention(&s, &q2, &k2, &v, 1.0, true).unwrap();
        assert!(r.o[4].is_nan());
    }

    #[test]
    fn large_scores_stay_finite() {
        // Scores near 1e4 overflow a naive exp; the shifted softmax does not.
        let s = shape(1, 1, 3, 1, 1, 1);
        let r = attention(
            &s,
            &[100.0],
            &[100.0, 99.0, -100.0],
            &[1.0, 2.0, 3.0],
            1.0,
            false,
        )
        .unwrap();
        // weights ∝ [1, e^-100, 0]
        assert!((r.o[0] - 1.0).abs() < 1e-12);
        assert!((r.lse[0] - 1e4).abs() < 1e-9);
    }

    #[test]
    fn rejects_bad_shapes() {
        let s = shape(1, 2, 2, 3, 2, 2);
        assert!(attention(&s, &[0.0; 12], &[0.0; 8], &[0.0; 8], 1.0, false).is_err());
        let s = shape(1, 2, 2, 2, 1, 2);
        assert!(attention(&s, &[0.0; 8], &[0.0; 4], &[0.0; 3], 1.0, false).is_err());
        let s = shape(1, 2, 2, 2, 0, 2);
        assert!(attention(&s, &[0.0; 8], &[], &[], 1.0, false).is_err());
    }

    /// Sequence b's rows `[len, heads, d]` of a packed tensor of `heads` heads.
    fn rows(t: &[f64], r: std::ops::Range<usize>, heads: usize, d: usize) -> Vec<f64> {
        t[r.start * heads * d..r.end * heads * d].to_vec()
    }

    #[test]
    fn varlen_matches_the_dense_reference_per_sequence() {
        // Many short sequences (lengths 0 and 1 among them) and a few long ones, queries
        // both fewer and more than keys, GQA 4 and MHA, causal and not.
        let lens = [
            (0, 5),
            (1, 1),
            (3, 17),
            (1, 0),
            (40, 33),
            (17, 17),
            (0, 0),
            (2, 64),
            (65, 70),
            (5, 2),
        ];
        for (n, (hq, hkv, causal)) in [(8, 2, true), (8, 2, false), (3, 3, true), (4, 1, false)]
            .into_iter()
            .enumerate()
        {
            let s = VarlenShape::from_lens(&lens, hq, hkv, 8);
            let seed = 1000 + 10 * n as u64;
            let q = random(seed, s.total_q() * hq * 8);
            let k = random(seed + 1, s.total_k() * hkv * 8);
            let v = random(seed + 2, s.total_k() * hkv * 8);
            let got = attention_varlen(&s, &q, &k, &v, 0.4, causal).unwrap();
            assert_eq!(got.o.len(), q.len());
            assert_eq!(got.lse.len(), hq * s.total_q());
            for b in 0..s.batch() {
                let (qr, kr) = (s.q_range(b), s.k_range(b));
                let want = attention(
                    &s.sequence(b),
                    &rows(&q, qr.clone(), hq, 8),
                    &rows(&k, kr.clone(), hkv, 8),
                    &rows(&v, kr, hkv, 8),
                    0.4,
                    causal,
                )
                .unwrap();
                // Packed O rows are the sequence's BSHD rows; its LSE [1, hq, len] lands at
                // [h, cu_q[b] + i].
                assert_eq!(
                    rows(&got.o, qr.clone(), hq, 8),
                    want.o,
                    "case {n} seq {b} O"
                );
                for h in 0..hq {
                    for (i, tok) in qr.clone().enumerate() {
                        let (a, w) = (got.lse[h * s.total_q() + tok], want.lse[h * qr.len() + i]);
                        assert!(a == w, "case {n} seq {b} head {h} row {i}: {a} vs {w}");
                    }
                }
            }
            // Rows of sequences without keys, and causal rows past their keys, are 0 / -inf.
            let r = s.q_range(3); // (1, 0)
            assert!(rows(&got.o, r.clone(), hq, 8).iter().all(|&x| x == 0.0));
            assert_eq!(got.lse[r.start], f64::NEG_INFINITY);
        }
    }

    #[test]
    fn varlen_of_equal_lengths_is_the_dense_batch() {
        // Packed [B·S, H, D] is BSHD's memory order; only the LSE's order differs.
        let dense = shape(3, 6, 9, 4, 2, 8);
        let s = VarlenShape::from_lens(&[(6, 9); 3], 4, 2, 8);
        let q = random(7, dense.q_len());
        let k = random(8, dense.kv_len());
        let v = random(9, dense.kv_len());
        for causal in [false, true] {
            let a = attention(&dense, &q, &k, &v, 0.3, causal).unwrap();
            let b = attention_varlen(&s, &q, &k, &v, 0.3, causal).unwrap();
            assert_eq!(a.o, b.o);
            for (bi, h, i) in triples(3, 4, 6) {
                assert_eq!(a.lse[(bi * 4 + h) * 6 + i], b.lse[h * 18 + bi * 6 + i]);
            }
        }
    }

    fn triples(a: usize, b: usize, c: usize) -> Vec<(usize, usize, usize)> {
        (0..a)
            .flat_map(|x| (0..b).flat_map(move |y| (0..c).map(move |z| (x, y, z))))
            .collect()
    }

    #[test]
    fn varlen_rejects_bad_offsets_and_sizes() {
        let good = VarlenShape::from_lens(&[(2, 3), (1, 1)], 2, 1, 4);
        let (q, kv) = (vec![0.0; 3 * 2 * 4], vec![0.0; 4 * 4]);
        assert!(attention_varlen(&good, &q, &kv, &kv, 1.0, false).is_ok());
        let mut s = good.clone();
        s.cu_seqlens_q = vec![0, 3, 2];
        assert!(attention_varlen(&s, &q, &kv, &kv, 1.0, false).is_err());
        let mut s = good.clone();
        s.cu_seqlens_k = vec![1, 3, 4];
        assert!(attention_varlen(&s, &q, &kv, &kv, 1.0, false).is_err());
        let mut s = good.clone();
        s.cu_seqlens_k.pop();
        assert!(attention_varlen(&s, &q, &kv, &kv, 1.0, false).is_err());
        assert!(attention_varlen(&good, &q[1..], &kv, &kv, 1.0, false).is_err());
        let mut s = good;
        s.heads_kv = 3;
        assert!(attention_varlen(&s, &q, &kv, &kv, 1.0, false).is_err());
    }

    #[test]
    fn visible_keys_bottom_right() {
        assert_eq!(visible_keys(0, 4, 4, true), 1);
        assert_eq!(visible_keys(3, 4, 4, true), 4);
        assert_eq!(visible_keys(0, 2, 5, true), 4);
        assert_eq!(visible_keys(0, 5, 2, true), 0);
        assert_eq!(visible_keys(4, 5, 2, true), 2);
        assert_eq!(visible_keys(0, 5, 2, false), 2);
    }

    #[test]
    fn dequantize_types() {
        let dims = [2, 1, 2, 2];
        // f16 and bf16: exact values, little-endian
        let vals = [1.0f32, -2.5, 0.5, 3.0, 0.0, -0.25, 8.0, 1.5];
        let f16: Vec<u8> = vals
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        let bf16: Vec<u8> = vals
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let want: Vec<f64> = vals.iter().map(|&x| f64::from(x)).collect();
        assert_eq!(dequantize(DType::F16, &f16, None, dims, 0).unwrap(), want);
        assert_eq!(dequantize(DType::Bf16, &bf16, None, dims, 0).unwrap(), want);
        let f32b: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(dequantize(DType::F32, &f32b, None, dims, 0).unwrap(), want);

        // E4M3, per (batch, head) descales: element (b, h) scaled by descales[b*2 + h]
        let codes = [0x38u8, 0x38, 0x38, 0x38, 0x38, 0xB8, 0x38, 0x7F]; // 1.0, -1.0 at 5, NaN at 7
        let ds = [1.0f32, 2.0, 4.0, 8.0];
        let got = dequantize(DType::E4m3, &codes, Some(&ds), dims, 2).unwrap();
        assert_eq!(&got[..7], &[1.0, 1.0, 2.0, 2.0, 4.0, -4.0, 8.0]);
        assert!(got[7].is_nan());
        // stride 0 broadcasts per head over the batch
        let got = dequantize(DType::E4m3, &codes, Some(&ds[..2]), dims, 0).unwrap();
        assert_eq!(&got[..7], &[1.0, 1.0, 2.0, 2.0, 1.0, -1.0, 2.0]);

        // simulated FP8: (u - 128) · descale
        let codes = [128u8, 129, 127, 255, 1, 130, 128, 200];
        let got = dequantize(DType::SimFp8, &codes, Some(&[0.5, 0.25]), dims, 0).unwrap();
        assert_eq!(got, vec![0.0, 0.5, -0.25, 31.75, -63.5, 1.0, 0.0, 18.0]);
    }

    #[test]
    fn dequantize_rejects_bad_input() {
        let dims = [2, 1, 2, 2];
        let c = [0u8; 8];
        assert!(dequantize(DType::E4m3, &c, None, dims, 2).is_err());
        assert!(dequantize(DType::E4m3, &c[..7], Some(&[1.0; 4]), dims, 2).is_err());
        assert!(dequantize(DType::E4m3, &c, Some(&[1.0; 3]), dims, 2).is_err());
        assert!(dequantize(DType::E4m3, &c, Some(&[1.0, 0.0, 1.0, 1.0]), dims, 2).is_err());
        assert!(dequantize(DType::SimFp8, &c, Some(&[1.0, f32::NAN]), dims, 0).is_err());
        assert!(dequantize(DType::F16, &[0u8; 16], Some(&[1.0; 4]), dims, 2).is_err());
        assert!(dequantize(DType::F16, &[0u8; 15], None, dims, 0).is_err());
    }
}
