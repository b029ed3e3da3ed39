//! Merging partial attention results by log-sum-exp: two results over disjoint key sets,
//! each normalized with its own LSE, combine into the result over their union. The CPU form
//! here is the specification (and the test of the plan); `kernels/cp.cu` is the GPU form.

/// Folds a partial result (`o`, `lse`) into an accumulator (`acc_o`, `acc_lse`) for one row:
/// `lse = log(e^a + e^b)`, `o = (o_a e^a + o_b e^b) / e^lse`. A side with LSE −inf (no key)
/// contributes nothing; both −inf leaves O = 0 and LSE = −inf.
pub fn merge_row(acc_o: &mut [f64], acc_lse: &mut f64, o: &[f64], lse: f64) {
    let m = acc_lse.max(lse);
    if m == f64::NEG_INFINITY {
        return;
    }
    let (wa, wb) = ((*acc_lse - m).exp(), (lse - m).exp());
    let w = wa + wb;
    for (a, b) in acc_o.iter_mut().zip(o) {
        *a = (*a * wa + b * wb) / w;
    }
    *acc_lse = m + w.ln();
}

#[cfg(test)]
mod tests {
    use super::super::plan::{chunks_of, step_work, Mask};
    use super::*;
    use crate::problem::AttnShape;
    use crate::reference;
    use rand::{Rng, SeedableRng};

    /// BSHD rows [b][s][h][d] of a tensor with `seq` positions: positions `range`.
    fn slice_seq(
        x: &[f64],
        b: usize,
        seq: usize,
        h: usize,
        d: usize,
        range: std::ops::Range<usize>,
    ) -> Vec<f64> {
        let mut out = Vec::new();
        for bi in 0..b {
            for s in range.clone() {
                out.extend_from_slice(&x[((bi * seq + s) * h) * d..][..h * d]);
            }
        }
        out
    }

    /// Ring attention simulated on the CPU with the plan and the merge gives the reference.
    #[test]
    fn the_ring_plan_and_merge_reproduce_full_attention() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for (p, causal, hq, hkv) in [
            (2, true, 4, 2),
            (3, false, 2, 2),
            (4, true, 2, 1),
            (1, true, 2, 2),
        ] {
            let (b, d, c) = (2, 16, 5); // chunk of 5 tokens
            let s = 2 * p * c;
            let mut gen = |n: usize| {
                (0..n)
                    .map(|_| rng.random_range(-2.0..2.0))
                    .collect::<Vec<f64>>()
            };
            let (q, k, v) = (
                gen(b * s * hq * d),
                gen(b * s * hkv * d),
                gen(b * s * hkv * d),
            );
            let scale = 0.3;
            let full = reference::attention(
                &AttnShape::new(b, s, s, hq, hkv, d),
                &q,
                &k,
                &v,
                scale,
                causal,
            )
            .unwrap();
            for r in 0..p {
                // This rank's accumulators for its two query chunks: O [b][c][hq][d], LSE [b][hq][c].
                let mut acc_o = [vec![0.0; b * c * hq * d], vec![0.0; b * c * hq * d]];
                let mut acc_l = [
                    vec![f64::NEG_INFINITY; b * hq * c],
                    vec![f64::NEG_INFINITY; b * hq * c],
                ];
                for step in 0..p {
                    for w in step_work(r, step, p, causal) {
                        let qs = slice_seq(&q, b, s, hq, d, w.q_chunk * c..(w.q_chunk + 1) * c);
                        let ks = slice_seq(&k, b, s, hkv, d, w.kv_chunk * c..(w.kv_chunk + 1) * c);
                        let vs = slice_seq(&v, b, s, hkv, d, w.kv_chunk * c..(w.kv_chunk + 1) * c);
                        let part = reference::attention(
                            &AttnShape::new(b, c, c, hq, hkv, d),
                            &qs,
                            &ks,
                            &vs,
                            scale,
                            w.mask == Mask::Causal,
                        )
                        .unwrap();
                        for bi in 0..b {
                            for h in 0..hq {
                                for t in 0..c {
                                    let row = ((bi * c + t) * hq + h) * d;
                                    let li = (bi * hq + h) * c + t;
                                    merge_row(
                                        &mut acc_o[w.q_local][row..row + d],
                                        &mut acc_l[w.q_local][li],
                                        &part.o[row..row + d],
                                        part.lse[li],
                                    );
                                }
                            }
                        }
                    }
                }
                for (l, &chunk) in chunks_of(r, p).iter().enumerate() {
                    for bi in 0..b {
                        for h in 0..hq {
                            for t in 0..c {
                                let sg = chunk * c + t;
                                let lse_full = full.lse[(bi * hq + h) * s + sg];
                                let lse_ring = acc_l[l][(bi * hq + h) * c + t];
                                assert!(
                                    (lse_full - lse_ring).abs() < 1e-9,
                                    "P {p} r {r} lse {lse_full} {lse_ring}"
                                );
                                for e in 0..d {
                                    let f = full.o[((bi * s + sg) * hq + h) * d + e];
                                    let g = acc_o[l][((bi * c + t) * hq + h) * d + e];
                                    assert!((f - g).abs() < 1e-9, "P {p} r {r}: {f} vs {g}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn empty_sides_contribute_nothing() {
        let mut o = vec![0.0, 0.0];
        let mut l = f64::NEG_INFINITY;
        merge_row(&mut o, &mut l, &[5.0, 6.0], f64::NEG_INFINITY);
        assert_eq!((o.clone(), l), (vec![0.0, 0.0], f64::NEG_INFINITY));
        merge_row(&mut o, &mut l, &[1.0, 2.0], 0.5);
        assert_eq!((o.clone(), l), (vec![1.0, 2.0], 0.5));
        merge_row(&mut o, &mut l, &[3.0, 4.0], 0.5);
        assert!((o[0] - 2.0).abs() < 1e-12 && (l - (0.5 + 2f64.ln())).abs() < 1e-12);
    }
}
