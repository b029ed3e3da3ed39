//! The full-FP8 Hopper kernel's arithmetic on the CPU, with the 8-bit wgmma's additions
//! modelled, against verify's float64 reference (issue 28: the D128 causal `large_rows`
//! failure). It answers which part of the kernel's error is P's E4M3 rounding (the format's)
//! and which the tensor core's reduced-precision additions in S = Q.K^T, and what splitting
//! S into chains added in fp32 would buy, before any device time is spent.
//!
//! `cargo run --release -p sdpa-harness --example wgmma_accumulation [-- BITS...]`
//!
//! Model of one k32 step of the 8-bit wgmma (DeepSeek-V3's report: its additions keep about
//! 14 bits): the 32 products are exact, they and the accumulator are aligned to the largest
//! exponent among them, truncated toward zero to `bits` bits below it, added exactly, and the
//! sum rounded to fp32. `bits = 0` means exact additions. The kernel's softmax runs as on the
//! GPU: key blocks of 128 from the last, P = 2^(s sl2 - m sl2 + 8) in fp32, rounded to E4M3
//! for P.V (each block's P.V in its own accumulator, added to O in fp32), l from the unrounded P.
//!
//! With 13 bits the model reproduces the LSE errors the H100 gave on verify's D128 causal
//! outlier cases to three digits (0.980, 0.595, 0.336 with one chain, 0.498 with two;
//! perf-notes: verify's LSE bound), so it predicted, before the GPU confirmed, that two chains
//! fix O's failure.
use fp8_sdpa::fp8::e4m3;
use fp8_sdpa::reference::visible_keys;
use fp8_sdpa::{AttnShape, Layout, Precision, VarlenShape};
use rayon::prelude::*;
use sdpa_harness::cases::{self, CaseSpec, HostCase, HostVarlenCase, VarlenCaseSpec};
use sdpa_harness::inputs::Distribution;

const TILE_N: usize = 128;

/// One k32 step: `acc + sum(products)` under the model (see the module docs).
fn step(acc: f32, prods: &[f64], bits: i32) -> f32 {
    if bits == 0 {
        return (f64::from(acc) + prods.iter().sum::<f64>()) as f32;
    }
    let top = prods
        .iter()
        .copied()
        .chain(std::iter::once(f64::from(acc)))
        .filter(|x| *x != 0.0)
        .map(|x| x.abs().log2().floor() as i32)
        .max();
    let Some(e) = top else { return 0.0 };
    let quantum = (2f64).powi(e - bits);
    let trunc = |x: f64| (x / quantum).trunc() * quantum;
    (trunc(f64::from(acc)) + prods.iter().map(|&p| trunc(p)).sum::<f64>()) as f32
}

/// A dot product of `a` and `b` (code values) as `chains` chains of k32 steps added in fp32.
fn dot(a: &[f64], b: &[f64], chains: usize, bits: i32, prods: &mut Vec<f64>) -> f32 {
    let steps = a.len() / 32;
    let per = steps / chains;
    let mut total = 0f32;
    for c in 0..chains {
        let mut acc = 0f32;
        for s in c * per..(c + 1) * per {
            prods.clear();
            prods.extend((32 * s..32 * s + 32).map(|i| a[i] * b[i]));
            acc = step(acc, prods, bits);
        }
        total += acc;
    }
    total
}

struct Stats {
    max_abs: f64,
    bad: usize,
    n: usize,
    num: f64,
    den: f64,
    lse_max: f64,
}

/// One sequence of a (dense or packed) problem: its first query token and count, its first
/// key token and count, and where its descales sit (`descale[idx * heads + h]`).
struct Seq {
    q0: usize,
    nq: usize,
    k0: usize,
    nk: usize,
    dq: usize,
    dkv: usize,
}

/// Inputs as the kernel sees them (token-major `[token, heads, d]` E4M3 code values and their
/// descales), the sequences, the causal flag, and the float64 reference (O token-major, LSE at
/// `lse_at(seq, h, i)`).
struct Problem<'a> {
    enc: &'a [sdpa_harness::inputs::Encoded; 3],
    heads_q: usize,
    heads_kv: usize,
    d: usize,
    seqs: Vec<Seq>,
    causal: bool,
    ref_o: &'a [f64],
    ref_lse: &'a [f64],
    lse_at: Box<dyn Fn(usize, usize, usize) -> usize + Sync + 'a>,
}

fn emulate(pb: &Problem, chains: usize, bits: i32) -> Stats {
    let (d, hq, hkv) = (pb.d, pb.heads_q, pb.heads_kv);
    let group = hq / hkv;
    let codes = |i: usize| -> Vec<f64> {
        pb.enc[i]
            .bytes
            .iter()
            .map(|&c| f64::from(e4m3::decode(c)))
            .collect()
    };
    let (q, k, v) = (codes(0), codes(1), codes(2));
    let ds = |i: usize| pb.enc[i].descales.clone().expect("E4M3 descales");
    let (qd, kd, vd) = (ds(0), ds(1), ds(2));
    let scale_log2 = ((1.0 / (d as f64).sqrt()) * std::f64::consts::LOG2_E) as f32;
    let rows: Vec<(usize, usize, usize)> = pb
        .seqs
        .iter()
        .enumerate()
        .flat_map(|(si, sq)| (0..hq).flat_map(move |h| (0..sq.nq).map(move |i| (si, h, i))))
        .collect();
    let per_row: Vec<(f64, usize, f64, f64, f64)> = rows
        .par_iter()
        .map(|&(si, h, i)| {
            let sq = &pb.seqs[si];
            let hk = h / group;
            let qi = &q[((sq.q0 + i) * hq + h) * d..][..d];
            let krow = |j: usize| &k[((sq.k0 + j) * hkv + hk) * d..][..d];
            let vrow = |j: usize| &v[((sq.k0 + j) * hkv + hk) * d..][..d];
            let sl2 = scale_log2 * qd[sq.dq * hq + h] * kd[sq.dkv * hkv + hk];
            let n = visible_keys(i, sq.nq, sq.nk, pb.causal);
            let mut prods = Vec::with_capacity(32);
            let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
            let mut o = vec![0f32; d];
            for blk in (0..n.div_ceil(TILE_N)).rev() {
                let keys: Vec<usize> = (blk * TILE_N..((blk + 1) * TILE_N).min(n)).collect();
                let sc: Vec<f32> = keys
                    .iter()
                    .map(|&j| dot(qi, krow(j), chains, bits, &mut prods))
                    .collect();
                let mx = sc.iter().copied().fold(m, f32::max);
                let ms = mx * sl2;
                let alpha = (m * sl2 - ms).exp2();
                let shifted = ms - 8.0;
                m = mx;
                let p: Vec<f32> = sc
                    .iter()
                    .map(|&x| x.mul_add(sl2, -shifted).exp2())
                    .collect();
                l = l * alpha + p.iter().sum::<f32>();
                // P.V over the block's keys (padded to 128 with zeros) in one 8-bit wgmma chain.
                let mut pc = vec![0f64; TILE_N];
                for (t, &x) in p.iter().enumerate() {
                    pc[t] = f64::from(e4m3::decode(e4m3::encode_f32(x)));
                }
                let mut col = vec![0f64; TILE_N];
                for (c, oc) in o.iter_mut().enumerate() {
                    col.iter_mut().for_each(|x| *x = 0.0);
                    for (t, &j) in keys.iter().enumerate() {
                        col[t] = vrow(j)[c];
                    }
                    let ob = dot(&pc, &col, 1, bits, &mut prods);
                    *oc = oc.mul_add(alpha, ob);
                }
            }
            let at = ((sq.q0 + i) * hq + h) * d;
            let (mut mx, mut bad, mut num, mut den) = (0f64, 0usize, 0f64, 0f64);
            if n == 0 {
                return (0.0, 0, 0.0, 0.0, 0.0);
            }
            let scale_o = vd[sq.dkv * hkv + hk] / l;
            for (&oc, &want) in o.iter().zip(&pb.ref_o[at..at + d]) {
                // O is stored as bf16.
                let got = f64::from(half::bf16::from_f32(oc * scale_o).to_f32());
                let e = (got - want).abs();
                mx = mx.max(e);
                bad += usize::from(e > 0.375 + 0.125 * want.abs());
                num += e * e;
                den += want * want;
            }
            let lse = f64::from((m * sl2 + l.log2() - 8.0) * std::f32::consts::LN_2);
            let lse_err = (lse - pb.ref_lse[(pb.lse_at)(si, h, i)]).abs();
            (mx, bad, num, den, lse_err)
        })
        .collect();
    let mut st = Stats {
        max_abs: 0.0,
        bad: 0,
        n: 0,
        num: 0.0,
        den: 0.0,
        lse_max: 0.0,
    };
    for (mx, bad, num, den, lse) in per_row {
        st.max_abs = st.max_abs.max(mx);
        st.bad += bad;
        st.n += d;
        st.num += num;
        st.den += den;
        st.lse_max = st.lse_max.max(lse);
    }
    st
}

fn report(name: &str, pb: &Problem, bits: &[i32]) {
    println!("{name}");
    for &b in bits {
        for chains in [1, 2, 4] {
            if b == 0 && chains > 1 {
                continue;
            }
            let st = emulate(pb, chains, b);
            println!(
                "  bits {:>2} S chains {chains}: O max_abs {:.3} bad {} of {} rel_l2 {:.4}  LSE max_abs {:.3}",
                if b == 0 { "ex".to_string() } else { b.to_string() },
                st.max_abs,
                st.bad,
                st.n,
                (st.num / st.den).sqrt(),
                st.lse_max
            );
        }
    }
}

fn main() {
    let bits: Vec<i32> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("BITS are integers"))
        .collect();
    let bits = if bits.is_empty() {
        vec![0, 13, 14]
    } else {
        bits
    };
    let d = 128;
    let scale = 1.0 / (d as f64).sqrt();
    // verify --quick's failing case: the first varlen batch of sequences, Hq 8,
    // Hkv 2, D128, causal, seed 500001 (large_rows, descales per sequence and head).
    let lens = &cases::varlen_verify_shapes(true)[0];
    let vspec = VarlenCaseSpec {
        shape: VarlenShape::from_lens(&lens.0, lens.1, lens.2, d),
        precision: Precision::Fp8,
        causal: true,
        dist: Distribution::LargeRows,
        seed: 500_001,
        per_sequence_descales: true,
    };
    let vc = HostVarlenCase::build(vspec.clone()).expect("case builds");
    let r = vc.reference_dequantized(scale).expect("reference");
    let sh = &vspec.shape;
    let total_q = sh.total_q();
    let pb = Problem {
        enc: &vc.enc,
        heads_q: sh.heads_q,
        heads_kv: sh.heads_kv,
        d,
        seqs: (0..sh.batch())
            .map(|b| Seq {
                q0: sh.q_range(b).start,
                nq: sh.q_range(b).len(),
                k0: sh.k_range(b).start,
                nk: sh.k_range(b).len(),
                dq: b,
                dkv: b,
            })
            .collect(),
        causal: true,
        ref_o: &r.o,
        ref_lse: &r.lse,
        lse_at: Box::new(move |si, h, i| {
            let q0 = vspec.shape.q_range(si).start;
            h * total_q + q0 + i
        }),
    };
    report(
        "varlen (verify's): 12 sequences, Hq 8, Hkv 2, D128, causal, large_rows, seed 500001",
        &pb,
        &bits,
    );
    // Dense verify shapes of the same class.
    for (shape, seed) in [
        (AttnShape::new(2, 128, 128, 8, 1, d), 3001u64),
        (AttnShape::new(1, 300, 100, 2, 2, d), 4001),
    ] {
        let spec = CaseSpec {
            shape,
            precision: Precision::Fp8,
            causal: true,
            layout: Layout::Bshd,
            dist: Distribution::LargeRows,
            seed,
        };
        let case = HostCase::build(spec).expect("case builds");
        let r = case.reference_dequantized(scale).expect("reference");
        let pb = Problem {
            enc: &case.enc,
            heads_q: shape.heads_q,
            heads_kv: shape.heads_kv,
            d,
            seqs: (0..shape.batch)
                .map(|b| Seq {
                    q0: b * shape.seq_q,
                    nq: shape.seq_q,
                    k0: b * shape.seq_kv,
                    nk: shape.seq_kv,
                    dq: b,
                    dkv: b,
                })
                .collect(),
            causal: true,
            ref_o: &r.o,
            ref_lse: &r.lse,
            lse_at: Box::new(move |b, h, i| (b * shape.heads_q + h) * shape.seq_q + i),
        };
        report(
            &format!(
                "dense B{} S {} / {} Hq {} Hkv {} D128 causal large_rows seed {seed}",
                shape.batch, shape.seq_q, shape.seq_kv, shape.heads_q, shape.heads_kv
            ),
            &pb,
            &bits,
        );
    }
}
