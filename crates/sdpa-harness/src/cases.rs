//! Verification cases built on the host: deterministic inputs for a shape and precision,
//! encoded as the kernels take them (16-bit values, or FP8 codes with descales), plus the
//! float64 references they are judged against.

use crate::inputs::{self, encode, Distribution, Encoded};
use fp8_sdpa::dtype::Precision;
use fp8_sdpa::error::Result;
use fp8_sdpa::problem::{AttnShape, Layout, VarlenShape};
use fp8_sdpa::reference::{self, RefOutput};
use serde::{Deserialize, Serialize};

/// What a case is: shape, precision, mask, layout, inputs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CaseSpec {
    /// Sizes.
    pub shape: AttnShape,
    /// Types.
    pub precision: Precision,
    /// Causal mask (bottom-right).
    pub causal: bool,
    /// Memory order of Q, K, V and O on the device.
    pub layout: Layout,
    /// Input distribution.
    pub dist: Distribution,
    /// Generator seed.
    pub seed: u64,
}

/// A built case.
#[derive(Debug, Clone)]
pub struct HostCase {
    /// The spec.
    pub spec: CaseSpec,
    /// The unquantized inputs (f32, BSHD): what the caller meant before any encoding.
    pub raw: [Vec<f32>; 3],
    /// Q, K, V as the kernel takes them.
    pub enc: [Encoded; 3],
}

impl HostCase {
    /// Generates and encodes the inputs of `spec` (Q, K and V from seeds derived from
    /// `spec.seed`, so each tensor differs).
    pub fn build(spec: CaseSpec) -> Result<HostCase> {
        let s = &spec.shape;
        let qd = [s.batch, s.seq_q, s.heads_q, s.head_dim];
        let kd = [s.batch, s.seq_kv, s.heads_kv, s.head_dim];
        let gen = |i: u64, n: usize, dist: Distribution| {
            inputs::generate(
                spec.seed.wrapping_mul(3).wrapping_add(i),
                n,
                s.head_dim,
                dist,
            )
        };
        // Large rows saturate the softmax through Q and K. V keeps unit variance: P is
        // rounded to 16 bits before P·V in every flash kernel (PyTorch's included), an error
        // of u·Σp|v| that the thresholds bound for |v| of a few units. Rows of V scaled by 30
        // would measure that rounding (1 element in ~10^5 beyond the bf16 bound on the H100,
        // in every tensor-core variant and none of the fp32-P ones), not the kernel.
        let v_dist = if spec.dist == Distribution::LargeRows {
            Distribution::Normal
        } else {
            spec.dist
        };
        let raw = [
            gen(0, s.q_len(), spec.dist),
            gen(1, s.kv_len(), spec.dist),
            gen(2, s.kv_len(), v_dist),
        ];
        let p = spec.precision;
        let enc = [
            encode(p.q(), &raw[0], qd)?,
            encode(p.kv(), &raw[1], kd)?,
            encode(p.kv(), &raw[2], kd)?,
        ];
        Ok(HostCase { spec, raw, enc })
    }

    fn dims(&self, i: usize) -> [usize; 4] {
        let s = &self.spec.shape;
        if i == 0 {
            [s.batch, s.seq_q, s.heads_q, s.head_dim]
        } else {
            [s.batch, s.seq_kv, s.heads_kv, s.head_dim]
        }
    }

    /// The reference on exactly what the kernel sees (decoded inputs): the ground truth for
    /// "the kernel adds no error".
    pub fn reference_dequantized(&self, scale: f64) -> Result<RefOutput> {
        let deq = |i: usize| {
            let e = &self.enc[i];
            let heads = self.dims(i)[2];
            reference::dequantize(
                e.dtype,
                &e.bytes,
                e.descales.as_deref(),
                self.dims(i),
                heads,
            )
        };
        reference::attention(
            &self.spec.shape,
            &deq(0)?,
            &deq(1)?,
            &deq(2)?,
            scale,
            self.spec.causal,
        )
    }

    /// The reference on the unquantized inputs: what the user meant (the seeds' gate).
    pub fn reference_raw(&self, scale: f64) -> Result<RefOutput> {
        let w = |i: usize| reference::widen(&self.raw[i]);
        reference::attention(
            &self.spec.shape,
            &w(0),
            &w(1),
            &w(2),
            scale,
            self.spec.causal,
        )
    }
}

/// What a variable-length case is: packed sequences, precision, mask, inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VarlenCaseSpec {
    /// Sizes and offsets.
    pub shape: VarlenShape,
    /// Types.
    pub precision: Precision,
    /// Causal mask (bottom-right per sequence).
    pub causal: bool,
    /// Input distribution.
    pub dist: Distribution,
    /// Generator seed.
    pub seed: u64,
    /// Scaled (FP8) inputs: descales per (sequence, head) rather than per head.
    pub per_sequence_descales: bool,
}

impl VarlenCaseSpec {
    /// The dense description of the launch (the sequences as the batch, the longest lengths),
    /// for reports keyed by dense cases.
    pub fn launch_case(&self) -> CaseSpec {
        CaseSpec {
            shape: self.shape.launch_shape(),
            precision: self.precision,
            causal: self.causal,
            layout: Layout::Bshd,
            dist: self.dist,
            seed: self.seed,
        }
    }
}

/// A built variable-length case: packed inputs, as the kernels take them.
#[derive(Debug, Clone)]
pub struct HostVarlenCase {
    /// The spec.
    pub spec: VarlenCaseSpec,
    /// Q, K, V packed (`[total, heads, dim]`) as the kernel takes them; descales per head, or
    /// per (sequence, head) when the spec asks (see [`HostVarlenCase::descale_batch_stride`]).
    pub enc: [Encoded; 3],
}

impl HostVarlenCase {
    /// Generates and encodes the inputs of `spec`.
    pub fn build(spec: VarlenCaseSpec) -> Result<HostVarlenCase> {
        spec.shape.check()?;
        let s = &spec.shape;
        let d = s.head_dim;
        let heads = [s.heads_q, s.heads_kv, s.heads_kv];
        let tokens = [s.total_q(), s.total_k(), s.total_k()];
        // As in HostCase::build: V keeps unit variance.
        let dist = |i: usize| match (i, spec.dist) {
            (2, Distribution::LargeRows) => Distribution::Normal,
            (_, dist) => dist,
        };
        let p = spec.precision;
        let types = [p.q(), p.kv(), p.kv()];
        let mut enc = Vec::new();
        for i in 0..3 {
            let seed = spec.seed.wrapping_mul(3).wrapping_add(i as u64);
            let raw = inputs::generate(seed, tokens[i] * heads[i] * d, d, dist(i));
            let ranges: Vec<_> = (0..s.batch())
                .map(|b| if i == 0 { s.q_range(b) } else { s.k_range(b) })
                .collect();
            enc.push(if spec.per_sequence_descales && types[i].is_scaled() {
                // Each sequence quantized on its own: descales [batch, heads].
                let mut all = Encoded {
                    dtype: types[i],
                    bytes: Vec::new(),
                    descales: Some(Vec::new()),
                };
                for r in ranges {
                    let row = heads[i] * d;
                    let e = encode(
                        types[i],
                        &raw[r.start * row..r.end * row],
                        [1, r.len(), heads[i], d],
                    )?;
                    all.bytes.extend(e.bytes);
                    if let (Some(a), Some(ds)) = (all.descales.as_mut(), e.descales) {
                        a.extend(ds);
                    }
                }
                all
            } else {
                encode(types[i], &raw, [1, tokens[i], heads[i], d])?
            });
        }
        let enc: [Encoded; 3] = enc
            .try_into()
            .map_err(|_| fp8_sdpa::Error::InvalidInput("three inputs".into()))?;
        Ok(HostVarlenCase { spec, enc })
    }

    /// The descales' batch stride of input `i` (0 Q, 1 K, 2 V): 0 (per head) or its heads
    /// (per sequence and head).
    pub fn descale_batch_stride(&self, i: usize) -> usize {
        let s = &self.spec.shape;
        match (self.spec.per_sequence_descales, i) {
            (false, _) => 0,
            (true, 0) => s.heads_q,
            (true, _) => s.heads_kv,
        }
    }

    /// The float64 reference on exactly what the kernel sees (decoded inputs).
    pub fn reference_dequantized(&self, scale: f64) -> Result<RefOutput> {
        let s = &self.spec.shape;
        let deq = |i: usize| -> Result<Vec<f64>> {
            let e = &self.enc[i];
            let heads = if i == 0 { s.heads_q } else { s.heads_kv };
            let row = heads * s.head_dim * e.dtype.size();
            let stride = self.descale_batch_stride(i);
            let mut out = Vec::new();
            for b in 0..s.batch() {
                let r = if i == 0 { s.q_range(b) } else { s.k_range(b) };
                let ds = e.descales.as_deref().map(|d| &d[b * stride..][..heads]);
                out.extend(reference::dequantize(
                    e.dtype,
                    &e.bytes[r.start * row..r.end * row],
                    ds,
                    [1, r.len(), heads, s.head_dim],
                    0,
                )?);
            }
            Ok(out)
        };
        reference::attention_varlen(s, &deq(0)?, &deq(1)?, &deq(2)?, scale, self.spec.causal)
    }
}

/// A variable-length verification shape: the sequences' (query, key) lengths, heads_q,
/// heads_kv.
pub type VarlenVerifyShape = (Vec<(usize, usize)>, usize, usize);

/// The variable-length batches `verify` runs on the portable family: many short sequences
/// and a few long ones, lengths 0 and 1 among them, queries both fewer and more than keys
/// (causal rows that see no key), GQA 4, MHA and MQA.
pub fn varlen_verify_shapes(quick: bool) -> Vec<VarlenVerifyShape> {
    // Short and ragged, one-token decode steps against long caches, empty sequences.
    let mixed = vec![
        (0, 7),
        (1, 1),
        (1, 300),
        (17, 17),
        (3, 0),
        (2, 1),
        (64, 64),
        (130, 100),
        (5, 5),
        (0, 0),
        (1, 33),
        (300, 333),
    ];
    // 40 short sequences of 1 to 40 tokens with a few more keys each, an empty one, and two
    // long ones.
    let mut many: Vec<(usize, usize)> = (1..=40).map(|n| (n, n + (n * 7) % 5)).collect();
    many.extend([(0, 3), (700, 700), (257, 1000)]);
    let mut v = vec![(mixed, 8, 2), (many, 2, 2)];
    if !quick {
        v.push((vec![(1, 1000), (1000, 1000), (0, 5), (999, 1)], 8, 1));
    }
    v
}

/// The variable-length batches `verify` runs on the decode family only (contiguous and paged
/// K/V): decode-shaped, with 1 to 16 query tokens per sequence (different counts in one
/// batch) against ragged caches of 1 to 4097 keys, a sequence without queries and one without
/// keys among them, GQA 4, 8 and 1 (at most 64 query rows per kv head, so that dispatch takes
/// the decode family for them too).
pub fn decode_varlen_verify_shapes(quick: bool) -> Vec<VarlenVerifyShape> {
    // GQA 4: decode steps beside speculative ones, the longest cache past 4k keys.
    let gqa4 = vec![
        (1, 4097),
        (4, 1000),
        (1, 1),
        (16, 2049),
        (2, 17),
        (0, 64),
        (1, 300),
        (8, 8),
        (3, 1),
        (16, 16),
        (2, 0),
        (5, 3000),
        (7, 65),
    ];
    // GQA 8 (up to 8 tokens): many short sequences and two long ones.
    let mut gqa8: Vec<(usize, usize)> = (1..=20).map(|i| (1 + i % 8, 1 + 37 * i)).collect();
    gqa8.extend([(1, 2500), (3, 1), (0, 9), (8, 1500)]);
    let mut v = vec![(gqa4, 32, 8), (gqa8, 8, 1)];
    if !quick {
        // MHA: one query row per kv head and token.
        v.push((vec![(16, 1200), (1, 3333), (9, 9), (1, 2), (12, 700)], 4, 4));
    }
    v
}

/// A paged K/V cache holding a variable-length batch's keys: sequence b's key j is row
/// `j % page_size` of pool page `table[b * max_pages + j / page_size]`, pages scattered over
/// the pool in a seeded random order (a few spare pages among them, unused table entries
/// pointing at spare or other pages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedLayout {
    /// Tokens per page.
    pub page_size: usize,
    /// Pages in the pool.
    pub pages: usize,
    /// Table entries per sequence.
    pub max_pages: usize,
    /// Row-major `[batch, max_pages]`.
    pub table: Vec<i32>,
    /// Keys per sequence.
    pub seqlens_k: Vec<i32>,
}

impl PagedLayout {
    /// A scattered layout for `shape`'s key counts.
    pub fn new(shape: &VarlenShape, page_size: usize, seed: u64) -> PagedLayout {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let batch = shape.batch();
        let max_pages = shape.max_seqlen_k().div_ceil(page_size).max(1);
        let used: usize = (0..batch)
            .map(|b| shape.k_range(b).len().div_ceil(page_size))
            .sum();
        let pages = used + 3;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut order: Vec<i32> = (0..pages as i32).collect();
        order.shuffle(&mut rng);
        let mut next = order.into_iter();
        let mut table = Vec::with_capacity(batch * max_pages);
        for b in 0..batch {
            let n = shape.k_range(b).len().div_ceil(page_size);
            table.extend(next.by_ref().take(n));
            // Unused entries: any page of the pool (the kernel reads none of it).
            table.extend((n..max_pages).map(|i| ((b + i) % pages) as i32));
        }
        PagedLayout {
            page_size,
            pages,
            max_pages,
            table,
            seqlens_k: (0..batch).map(|b| shape.k_range(b).len() as i32).collect(),
        }
    }

    /// The pool `[pages, page_size, ..]` holding packed `[total_k, ..]` rows of `row` bytes
    /// (spare pages and the rows past a sequence's end zero).
    pub fn scatter(&self, shape: &VarlenShape, packed: &[u8], row: usize) -> Vec<u8> {
        let mut pool = vec![0u8; self.pages * self.page_size * row];
        for b in 0..shape.batch() {
            for (j, t) in shape.k_range(b).enumerate() {
                let at = self.row_of(b, j) * row;
                pool[at..at + row].copy_from_slice(&packed[t * row..][..row]);
            }
        }
        pool
    }

    /// The pool row of sequence b's key j.
    pub fn row_of(&self, b: usize, j: usize) -> usize {
        let page = self.table[b * self.max_pages + j / self.page_size] as usize;
        page * self.page_size + j % self.page_size
    }
}

/// Reorders a BSHD-contiguous tensor of `elem`-byte elements into `layout` (contiguous).
pub fn to_layout(bytes: &[u8], elem: usize, dims: [usize; 4], layout: Layout) -> Vec<u8> {
    permute(bytes, elem, dims, layout, true)
}

/// Reorders a `layout`-contiguous tensor back into BSHD.
pub fn from_layout(bytes: &[u8], elem: usize, dims: [usize; 4], layout: Layout) -> Vec<u8> {
    permute(bytes, elem, dims, layout, false)
}

fn permute(bytes: &[u8], elem: usize, dims: [usize; 4], layout: Layout, to: bool) -> Vec<u8> {
    if layout == Layout::Bshd {
        return bytes.to_vec();
    }
    let [b, s, h, d] = dims;
    let mut out = vec![0u8; bytes.len()];
    let bshd = Layout::Bshd.strides(s, h, d);
    let other = layout.strides(s, h, d);
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let a = (bi * bshd[0] + si * bshd[1] + hi * bshd[2]) * elem;
                let o = (bi * other[0] + si * other[1] + hi * other[2]) * elem;
                let n = d * elem;
                if to {
                    out[o..o + n].copy_from_slice(&bytes[a..a + n]);
                } else {
                    out[a..a + n].copy_from_slice(&bytes[o..o + n]);
                }
            }
        }
    }
    out
}

/// The shapes `verify` runs: ragged lengths (1, 17, 333, 1000, 4097), GQA ratios 1, 4, 8,
/// causal with Sq < Skv and Sq > Skv. Each is (batch, seq_q, seq_kv, heads_q, heads_kv).
pub fn verify_shapes(quick: bool) -> Vec<(usize, usize, usize, usize, usize)> {
    let mut v = vec![
        (1, 1, 1, 1, 1),
        (2, 17, 17, 4, 4),
        (1, 17, 1000, 8, 2),
        (2, 128, 128, 8, 1),
        (1, 300, 100, 2, 2),
    ];
    if !quick {
        v.extend([
            (1, 1000, 1000, 2, 2),
            (1, 64, 4097, 4, 1),
            (1, 333, 333, 2, 2),
        ]);
    }
    v
}

/// Further shapes `verify` runs on the decode family only: few query rows per query head
/// against long, ragged key counts (splits and the merge), GQA 1, 4, 8 and 32, one key.
pub fn decode_verify_shapes(quick: bool) -> Vec<(usize, usize, usize, usize, usize)> {
    let mut v = vec![
        (3, 1, 4097, 32, 8),
        (2, 4, 1000, 8, 8),
        (4, 1, 1, 32, 1),
        (1, 16, 20001, 8, 1),
    ];
    if !quick {
        v.extend([
            (1, 1, 65536, 32, 8),
            (2, 16, 3000, 32, 4),
            (1, 3, 257, 8, 2),
        ]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varlen_cases_encode_per_head_or_per_sequence() {
        let shape = VarlenShape::from_lens(&[(3, 5), (0, 2), (2, 0)], 4, 2, 64);
        for per_sequence_descales in [false, true] {
            let spec = VarlenCaseSpec {
                shape: shape.clone(),
                precision: Precision::Fp8KvBf16,
                causal: true,
                dist: crate::inputs::Distribution::Normal,
                seed: 5,
                per_sequence_descales,
            };
            let c = HostVarlenCase::build(spec).unwrap();
            assert_eq!(c.enc[0].bytes.len(), 5 * 4 * 64 * 2);
            assert_eq!(c.enc[1].bytes.len(), 7 * 2 * 64);
            let ds = c.enc[1].descales.as_ref().unwrap();
            assert_eq!(ds.len(), if per_sequence_descales { 3 * 2 } else { 2 });
            assert!(ds.iter().all(|x| x.is_finite() && *x > 0.0), "{ds:?}");
            assert_eq!(
                c.descale_batch_stride(1),
                if per_sequence_descales { 2 } else { 0 }
            );
            let r = c.reference_dequantized(0.125).unwrap();
            assert_eq!((r.o.len(), r.lse.len()), (5 * 4 * 64, 4 * 5));
            // Sequence 2 has no keys: its rows are 0 with LSE -inf.
            assert!(r.o[3 * 4 * 64..].iter().all(|&x| x == 0.0));
            assert_eq!(r.lse[3], f64::NEG_INFINITY);
        }
        for (lens, hq, hkv) in varlen_verify_shapes(false) {
            let s = VarlenShape::from_lens(&lens, hq, hkv, 64);
            s.check().unwrap();
            assert!(lens.iter().any(|l| l.0 == 0) && lens.iter().any(|l| l.0 == 1));
            assert!(s.max_seqlen_q() >= 257, "a long sequence in every shape");
        }
    }

    #[test]
    fn decode_varlen_shapes_are_decode_shaped_and_ragged() {
        for quick in [true, false] {
            for (lens, hq, hkv) in decode_varlen_verify_shapes(quick) {
                let s = VarlenShape::from_lens(&lens, hq, hkv, 128);
                s.check().unwrap();
                assert!(s.launch_shape().is_decode(), "{lens:?} {hq}/{hkv}");
                assert!(lens.iter().all(|l| l.0 <= 16));
                let qs: std::collections::BTreeSet<_> = lens.iter().map(|l| l.0).collect();
                assert!(qs.len() >= 4, "query counts differ within a batch: {qs:?}");
                assert!(s.max_seqlen_k() >= 1200 && lens.iter().any(|l| l.1 <= 17));
            }
        }
        let groups: Vec<usize> = decode_varlen_verify_shapes(false)
            .iter()
            .map(|s| s.1 / s.2)
            .collect();
        assert_eq!(groups, [4, 8, 1]);
    }

    #[test]
    fn paged_layouts_hold_every_key_once() {
        let shape = VarlenShape::from_lens(&[(1, 40), (2, 0), (3, 17), (1, 16)], 4, 2, 64);
        for page_size in [16, 48] {
            let l = PagedLayout::new(&shape, page_size, 9);
            assert_eq!(l.max_pages, 40usize.div_ceil(page_size));
            assert_eq!(l.table.len(), 4 * l.max_pages);
            assert_eq!(l.seqlens_k, [40, 0, 17, 16]);
            // The library's own table check accepts it.
            fp8_sdpa::runtime::validate::check_page_table(
                &l.table,
                &l.seqlens_k,
                l.max_pages,
                page_size,
                l.pages,
            )
            .unwrap();
            // Scatter, then gather through the table: the packed rows come back, and no two
            // keys share a pool row.
            let row = 3;
            let packed: Vec<u8> = (0..shape.total_k() * row).map(|i| i as u8 + 1).collect();
            let pool = l.scatter(&shape, &packed, row);
            let mut seen = std::collections::HashSet::new();
            for b in 0..shape.batch() {
                for (j, t) in shape.k_range(b).enumerate() {
                    let r = l.row_of(b, j);
                    assert!(seen.insert(r));
                    assert_eq!(pool[r * row..][..row], packed[t * row..][..row]);
                }
            }
        }
    }

    #[test]
    fn layout_permutation_round_trips() {
        let dims = [2, 3, 4, 8];
        let bytes: Vec<u8> = (0..2 * 3 * 4 * 8 * 2).map(|i| i as u8).collect();
        let t = to_layout(&bytes, 2, dims, Layout::Bhsd);
        assert_ne!(t, bytes);
        assert_eq!(from_layout(&t, 2, dims, Layout::Bhsd), bytes);
        // element (b=1, s=2, h=3, d=0) sits at BHSD offset ((1*4+3)*3+2)*8
        let bshd_off = ((3 + 2) * 4 + 3) * 8 * 2;
        let bhsd_off = ((4 + 3) * 3 + 2) * 8 * 2;
        assert_eq!(t[bhsd_off], bytes[bshd_off]);
    }
}
