//! GPU tests of non-finite values in keys a row never sees (issue 44 item 7). A masked key's
//! p is 0, and 0 · NaN or 0 · Inf in the P·V mma is NaN: each family's epilogue checks its
//! output and recomputes exactly the columns a masked key's non-finite V reached
//! (kernels/exact.cuh), so a NaN or Inf in one V row reaches only the rows that attend that
//! key, rows that see no key are 0 whatever V holds, and every other row matches the float64
//! reference. Keys past a paged sequence's length are zero-filled by the decode family's
//! copies (kept here too). Each test asserts the family that ran, so none passes by running
//! another. Run on the device machine with `--include-ignored`; without a GPU they fail,
//! never skip.

use fp8_sdpa::runtime::{CallOptions, Device, KernelChoice};
use fp8_sdpa::runtime::{TensorMut, TensorRef};
use fp8_sdpa::{AttnParams, AttnShape, DType, Family, KernelSpec, Layout, Precision, Variant};
use sdpa_harness::cases::{CaseSpec, HostCase};
use sdpa_harness::harness::{judge, DeviceCase};
use sdpa_harness::inputs::Distribution;

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

fn case(
    precision: Precision,
    shape: (usize, usize, usize, usize, usize, usize),
    causal: bool,
    layout: Layout,
    seed: u64,
) -> HostCase {
    let (batch, seq_q, seq_kv, heads_q, heads_kv, head_dim) = shape;
    HostCase::build(CaseSpec {
        shape: AttnShape::new(batch, seq_q, seq_kv, heads_q, heads_kv, head_dim),
        precision,
        causal,
        layout,
        dist: Distribution::Normal,
        seed,
    })
    .unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Poison {
    Nan,
    Inf,
}

/// The encoding of `what` in `dtype` (E4M3 has no Inf: None).
fn poison_bytes(dtype: DType, what: Poison) -> Option<Vec<u8>> {
    let h: u16 = match (dtype, what) {
        (DType::F16, Poison::Nan) => 0x7e00,
        (DType::F16, Poison::Inf) => 0x7c00,
        (DType::Bf16, Poison::Nan) => 0x7fc0,
        (DType::Bf16, Poison::Inf) => 0x7f80,
        (DType::E4m3, Poison::Nan) => return Some(vec![0x7f]),
        _ => return None,
    };
    Some(h.to_le_bytes().to_vec())
}

/// One case: `shape` (batch, seq_q, seq_kv, heads_q, heads_kv, dim), BSHD, with every element
/// of V's row (batch 0, key `key`, kv head `hkv`) set to `what`; runs `kernel`, asserts the
/// family that ran, then: rows that attend the key are non-finite in every column, rows that
/// see no key are exactly 0, and every other row matches the float64 reference (which is
/// computed on the poisoned inputs, key by key, so its other rows are finite).
#[allow(clippy::too_many_arguments)]
fn check_poisoned(
    dev: &Device,
    precision: Precision,
    shape: (usize, usize, usize, usize, usize, usize),
    causal: bool,
    key: usize,
    hkv: usize,
    what: Poison,
    kernel: KernelChoice,
    family: Family,
) {
    let (batch, sq, skv, hq, hk, d) = shape;
    let Some(bytes) = poison_bytes(precision.kv(), what) else {
        return; // E4M3 has no Inf
    };
    let mut host = case(precision, shape, causal, Layout::Bshd, 7 + key as u64);
    let es = bytes.len();
    let row0 = ((key * hk) + hkv) * d * es; // batch 0, BSHD
    for x in host.enc[2].bytes[row0..row0 + d * es].chunks_mut(es) {
        x.copy_from_slice(&bytes);
    }
    let stream = dev.new_stream().unwrap();
    let params = AttnParams::default_for(d, causal);
    let mut want = host.reference_dequantized(params.scale as f64).unwrap();
    let mut dc = DeviceCase::upload(&stream, &host).unwrap();
    let opts = CallOptions::default()
        .with_kernel(kernel)
        .with_check_descales(true);
    let mut got = dc.run(dev, &stream, &host, params, opts).unwrap();
    let spec = got.launched.spec;
    let label = format!(
        "{} {precision:?} {shape:?} causal {causal} key {key} {what:?}",
        spec.key()
    );
    assert_eq!(spec.variant.family, family, "{label}");
    let group = hq / hk;
    let (mut attending, mut empty) = (0, 0);
    for b in 0..batch {
        for s in 0..sq {
            // Row s sees keys j <= s + skv - sq (bottom-right) under causal.
            let last = s as i64 + skv as i64 - sq as i64;
            for h in 0..hq {
                let at = ((b * sq + s) * hq + h) * d;
                let row = &mut got.o[at..at + d];
                let sees = !causal || key as i64 <= last;
                if b == 0 && h / group == hkv && sees {
                    assert!(
                        row.iter().all(|x| !x.is_finite()),
                        "{label}: row (b {b}, s {s}, h {h}) attends the key: {row:?}"
                    );
                    // Judged above; the reference's row is non-finite too.
                    row.fill(0.0);
                    want.o[at..at + d].fill(0.0);
                    attending += 1;
                } else if causal && last < 0 {
                    assert!(
                        row.iter().all(|&x| x == 0.0),
                        "{label}: row (b {b}, s {s}, h {h}) sees no key: {row:?}"
                    );
                    empty += 1;
                }
            }
        }
    }
    assert!(
        attending > 0,
        "{label}: the case must have rows that attend the key"
    );
    let unchanged = dc.inputs_unchanged(&stream).unwrap();
    let v = judge(precision, &got, &want, None, false, unchanged).unwrap();
    assert!(
        v.failures.is_empty(),
        "{label} ({empty} rows with no key): {:?}",
        v.failures
    );
}

/// Keys to poison in a causal case of `sq` queries and `skv` keys: one seen by the last
/// rows only (on the diagonal of the last tiles), one in the middle, the first.
fn keys(skv: usize) -> [usize; 3] {
    [skv - 3, skv / 2 + 1, 0]
}

fn run_family(precisions: &[Precision], kernel: KernelChoice, family: Family, dims: &[usize]) {
    let dev = device();
    for &p in precisions {
        for &d in dims {
            for causal in [false, true] {
                // Sq > Skv under causal: the first 40 rows see no key.
                for (sq, skv) in [(200, 333), (373, 333)] {
                    for key in keys(skv) {
                        for what in [Poison::Nan, Poison::Inf] {
                            check_poisoned(
                                &dev,
                                p,
                                (2, sq, skv, 4, 2, d),
                                causal,
                                key,
                                1,
                                what,
                                kernel,
                                family,
                            );
                        }
                    }
                }
            }
        }
    }
}

fn variant(key: &str) -> KernelChoice {
    KernelChoice::Variant(key.parse::<Variant>().unwrap())
}

#[test]
#[ignore = "needs a GPU"]
fn portable_16bit_keeps_nonfinite_v_to_the_rows_that_attend_it() {
    let p16 = [Precision::F16, Precision::Bf16];
    let portable = |key: &str, precisions: &[Precision], d: usize| {
        run_family(precisions, variant(key), Family::Portable, &[d]);
    };
    portable("portable.m128.n64.w4.s2.b2.ctelx", &p16, 64);
    portable("portable.m64.n64.w4.s2.b2.ctelx", &p16, 128);
    // The seeds' scalar P·V (no tensor-core P·V).
    portable("portable.m64.n32.w4.s1.b1.c", &[Precision::F16], 64);
}

#[test]
#[ignore = "needs a GPU"]
fn portable_fp8_kv_keeps_nonfinite_v_to_the_rows_that_attend_it() {
    // Fragment decode, then the staged decodes (pipelined and decoupled, with paired rows).
    let kv8 = [Precision::Fp8KvF16, Precision::Fp8KvBf16];
    run_family(
        &kv8,
        variant("portable.m128.n64.w4.s2.b2.ctfhelx"),
        Family::Portable,
        &[128],
    );
    run_family(
        &kv8,
        variant("portable.m256.n128.w8.s3.b1.cthedx"),
        Family::Portable,
        &[64],
    );
    run_family(
        &kv8,
        variant("portable.m256.n128.w8.s3.b1.cthpedx"),
        Family::Portable,
        &[64],
    );
}

#[test]
#[ignore = "needs a GPU"]
fn decode_keeps_nonfinite_v_to_the_rows_that_attend_it() {
    // Decode-shaped: 1 and 5 queries per head (causal rows differ by key), 16-bit and E4M3.
    let dev = device();
    let kernel = variant("decode.m16.n64.w4.s3.b2.cex");
    for p in [Precision::F16, Precision::Bf16, Precision::Fp8KvF16] {
        for causal in [false, true] {
            for (sq, skv) in [(5, 700), (1, 700), (9, 4)] {
                for key in [skv - 2, skv / 3] {
                    for what in [Poison::Nan, Poison::Inf] {
                        check_poisoned(
                            &dev,
                            p,
                            (2, sq, skv, 8, 2, 128),
                            causal,
                            key,
                            1,
                            what,
                            kernel,
                            Family::Decode,
                        );
                    }
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU (sm_90a for the Hopper family)"]
fn hopper_keeps_nonfinite_v_to_the_rows_that_attend_it() {
    // 16-bit, FP8-KV (the producer's decode) and full FP8.
    run_family(
        &[Precision::F16, Precision::Bf16, Precision::Fp8KvF16],
        variant("hopper.m128.n128.w12.s2.b1.w4oex"),
        Family::Hopper,
        &[64, 128],
    );
    // Full FP8: the shipped persistent ping-pong tile (dispatch's hopper-fp8 rule).
    run_family(
        &[Precision::Fp8],
        variant("hopper.m128.n128.w12.s2.b1.w4pogex"),
        Family::Hopper,
        &[64, 128],
    );
}

/// Paged decode: NaN written into the tail of each sequence's last page (past seqlens_k), in
/// f16 and E4M3 caches, does not reach the output (the copies zero-fill keys past a
/// sequence's end); the output matches the float64 reference on each sequence's own keys.
/// Under causal with 3 or more queries, V of sequence 0's key n - 2 holds NaN too: its last two
/// query rows attend it (non-finite), the rows before mask it and must stay exact (the decode
/// epilogue's rare path, reading K and V back through the block table).
#[test]
#[ignore = "needs a GPU"]
fn paged_decode_ignores_nan_past_each_sequence_end() {
    use fp8_sdpa::reference::{self, RefOutput};
    use fp8_sdpa::runtime::{Descale, IdxRef, PagedAttention, PagedKv, VecMut, VecRef};
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let dev = device();
    let stream = dev.new_stream().unwrap();
    for (p, page, causal, sq) in [
        (Precision::F16, 16usize, false, 1usize),
        (Precision::F16, 64, true, 4),
        (Precision::Fp8KvF16, 16, true, 3),
        (Precision::Fp8KvBf16, 64, false, 1),
    ] {
        let (batch, hq, hkv, d) = (3usize, 8usize, 2usize, 128usize);
        let lens = [1000usize, 17, 33];
        let cap = lens.iter().max().unwrap().div_ceil(page) * page;
        let host = case(p, (batch, sq, cap, hq, hkv, d), causal, Layout::Bshd, 5);
        // Scatter: sequence b's page i goes to a random slot of a pool with spare pages.
        let max_pages = cap / page;
        let pages = batch * max_pages + 3;
        let mut slots: Vec<i32> = (0..pages as i32).collect();
        slots.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(7));
        let table: Vec<i32> = slots[..batch * max_pages].to_vec();
        let es = p.kv().size();
        let row = hkv * d * es; // one token's K (or V) bytes
                                // Every pool position past a sequence's length in its last page holds NaN (f16 0x7e00,
                                // E4M3 0x7f): keys the kernel must not let reach the output.
        let nan: Vec<u8> = if es == 1 {
            vec![0x7f]
        } else {
            0x7e00u16.to_le_bytes().to_vec()
        };
        // A NaN in a key some rows mask (V only): sequence 0's key n - 2.
        let masked_nan = causal && sq >= 3;
        let pool = |src: &[u8], is_v: bool| {
            let mut out = vec![0u8; pages * page * row];
            for (b, &n) in lens.iter().enumerate() {
                if n % page != 0 {
                    let slot = table[b * max_pages + n / page] as usize;
                    for j in n % page..page {
                        for x in out[(slot * page + j) * row..][..row].chunks_mut(es) {
                            x.copy_from_slice(&nan);
                        }
                    }
                }
            }
            for (b, &n) in lens.iter().enumerate() {
                for j in 0..n {
                    let slot = table[b * max_pages + j / page] as usize;
                    let dst = (slot * page + j % page) * row;
                    out[dst..dst + row].copy_from_slice(&src[(b * cap + j) * row..][..row]);
                }
            }
            if is_v && masked_nan {
                let j = lens[0] - 2;
                let slot = table[j / page] as usize;
                for x in out[(slot * page + j % page) * row..][..row].chunks_mut(es) {
                    x.copy_from_slice(&nan);
                }
            }
            out
        };
        let k = stream.clone_htod(&pool(&host.enc[1].bytes, false)).unwrap();
        let v = stream.clone_htod(&pool(&host.enc[2].bytes, true)).unwrap();
        let q = stream.clone_htod(&host.enc[0].bytes).unwrap();
        let table_d = stream.clone_htod(&table).unwrap();
        let lens_i: Vec<i32> = lens.iter().map(|&n| n as i32).collect();
        let lens_d = stream.clone_htod(&lens_i).unwrap();
        let ds: Vec<_> = [1, 2]
            .iter()
            .map(|&i| {
                host.enc[i]
                    .descales
                    .as_ref()
                    .map(|x| stream.clone_htod(x).unwrap())
            })
            .collect();
        let out_t = p.out();
        let qd = [batch, sq, hq, d];
        let mut o = stream
            .alloc_zeros::<u8>(batch * sq * hq * d * out_t.size())
            .unwrap();
        let mut lse = stream.alloc_zeros::<f32>(batch * hq * sq).unwrap();
        let params = AttnParams::default_for(d, causal);
        {
            let st: &cudarc::driver::CudaStream = &stream;
            let pd = [pages, page, hkv, d];
            fn descale<'a>(
                x: &'a Option<cudarc::driver::CudaSlice<f32>>,
                st: &'a cudarc::driver::CudaStream,
                hkv: usize,
            ) -> Option<Descale<'a>> {
                x.as_ref().map(|x| Descale::new(VecRef::new(x, st), hkv))
            }
            let call = PagedAttention::new(
                TensorRef::contiguous(&q, st, host.enc[0].dtype, qd, Layout::Bshd).unwrap(),
                PagedKv::new(
                    TensorRef::contiguous(&k, st, p.kv(), pd, Layout::Bshd).unwrap(),
                    TensorRef::contiguous(&v, st, p.kv(), pd, Layout::Bshd).unwrap(),
                    IdxRef::new(&table_d, st),
                    max_pages,
                    IdxRef::new(&lens_d, st),
                ),
                TensorMut::contiguous(&mut o, st, out_t, qd, Layout::Bshd).unwrap(),
                params,
            )
            .with_lse(VecMut::new(&mut lse, st))
            .with_kv_descales(descale(&ds[0], st, hkv), descale(&ds[1], st, hkv));
            dev.paged_attention(st, &call, CallOptions::default())
                .unwrap();
        }
        stream.synchronize().unwrap();
        let o_host = sdpa_harness::harness::decode_out(out_t, &stream.clone_dtoh(&o).unwrap());
        let lse_host = stream.clone_dtoh(&lse).unwrap();
        // The reference, sequence by sequence on its own keys.
        let deq = |i: usize, dims: [usize; 4], heads: usize| {
            let e = &host.enc[i];
            reference::dequantize(e.dtype, &e.bytes, e.descales.as_deref(), dims, heads).unwrap()
        };
        let qf = deq(0, qd, hq);
        let kf = deq(1, [batch, cap, hkv, d], hkv);
        let vf = deq(2, [batch, cap, hkv, d], hkv);
        let mut want = RefOutput {
            o: Vec::new(),
            lse: Vec::new(),
            score_magnitude: Vec::new(),
            o_slack: Vec::new(),
        };
        for (b, &n) in lens.iter().enumerate() {
            let shape = AttnShape::new(1, sq, n, hq, hkv, d);
            let qs = &qf[b * sq * hq * d..][..sq * hq * d];
            let ks = &kf[b * cap * hkv * d..][..n * hkv * d];
            let vs = &vf[b * cap * hkv * d..][..n * hkv * d];
            let r = if n == 0 {
                // No key: O = 0 and LSE = -inf by the library's convention.
                RefOutput {
                    o: vec![0.0; sq * hq * d],
                    lse: vec![f64::NEG_INFINITY; hq * sq],
                    score_magnitude: vec![0.0; hq * sq],
                    o_slack: vec![0.0; sq * hq * d],
                }
            } else {
                reference::attention(&shape, qs, ks, vs, params.scale as f64, causal).unwrap()
            };
            want.o.extend(r.o);
            want.lse.extend(r.lse);
            want.score_magnitude.extend(r.score_magnitude);
            want.o_slack.extend(r.o_slack);
        }
        let mut o_host = o_host;
        if masked_nan {
            // Sequence 0's rows that attend key n - 2 (positions sq - 2, sq - 1, every head):
            // non-finite, as the reference on the poisoned cache would be; judged here and
            // left out of the comparison below.
            for s_ in sq - 2..sq {
                let at = s_ * hq * d;
                let rows = &mut o_host[at..at + hq * d];
                assert!(
                    rows.iter().all(|x| !x.is_finite()),
                    "{p:?} page {page}: sequence 0 position {s_} attends the NaN key"
                );
                rows.fill(0.0);
                want.o[at..at + hq * d].fill(0.0);
            }
        }
        let got = sdpa_harness::harness::RunOutput {
            o: o_host,
            lse: lse_host,
            launched: fp8_sdpa::runtime::Launched {
                spec: KernelSpec {
                    variant: Variant::reference(),
                    precision: p,
                    head_dim: d as u32,
                    causal,
                },
                grid: [0; 3],
                block: 0,
                smem: 0,
            },
        };
        assert!(
            got.o.iter().all(|x| x.is_finite()),
            "{p:?} page {page}: NaN reached rows that do not attend it"
        );
        let v = judge(p, &got, &want, None, false, true).unwrap();
        assert!(v.failures.is_empty(), "{p:?} page {page}: {:?}", v.failures);
    }
}

/// Variable-length batches: NaN or Inf in V at key `key` of sequence 1 (kv head 1) reaches
/// only sequence 1's rows that attend it; sequences 0 and 2 (whose neighbouring packed keys
/// hold it) and sequence 1's rows before it under causal match the float64 reference.
fn check_varlen(
    dev: &Device,
    precision: Precision,
    lens: &[(usize, usize)],
    d: usize,
    key: usize,
    kernel: KernelChoice,
    family: Family,
) {
    use fp8_sdpa::VarlenShape;
    use sdpa_harness::cases::{HostVarlenCase, VarlenCaseSpec};
    use sdpa_harness::harness::DeviceVarlenCase;
    let (hq, hk) = (4usize, 2usize);
    for causal in [false, true] {
        for what in [Poison::Nan, Poison::Inf] {
            let Some(bytes) = poison_bytes(precision.kv(), what) else {
                continue;
            };
            let mut host = HostVarlenCase::build(VarlenCaseSpec {
                shape: VarlenShape::from_lens(lens, hq, hk, d),
                precision,
                causal,
                dist: Distribution::Normal,
                seed: 31,
                per_sequence_descales: false,
            })
            .unwrap();
            let (cq, ck) = (
                host.spec.shape.cu_seqlens_q.clone(),
                host.spec.shape.cu_seqlens_k.clone(),
            );
            let es = bytes.len();
            let at = ((ck[1] + key) * hk + 1) * d * es;
            for x in host.enc[2].bytes[at..at + d * es].chunks_mut(es) {
                x.copy_from_slice(&bytes);
            }
            let stream = dev.new_stream().unwrap();
            let params = AttnParams::default_for(d, causal);
            let mut want = host.reference_dequantized(params.scale as f64).unwrap();
            let mut dc = DeviceVarlenCase::upload(&stream, &host).unwrap();
            let opts = CallOptions::default().with_kernel(kernel);
            let mut got = dc.run(dev, &stream, &host, params, opts).unwrap();
            let spec = got.launched.spec;
            let label = format!(
                "{} {precision:?} {lens:?} causal {causal} {what:?}",
                spec.key()
            );
            assert_eq!(spec.variant.family, family, "{label}");
            let mut attending = 0;
            for b in 0..lens.len() {
                let (nq, nk) = (cq[b + 1] - cq[b], ck[b + 1] - ck[b]);
                for s in 0..nq {
                    let last = s as i64 + nk as i64 - nq as i64;
                    for h in 0..hq {
                        let o = ((cq[b] + s) * hq + h) * d;
                        let row = &mut got.o[o..o + d];
                        if b == 1 && h / (hq / hk) == 1 && (!causal || key as i64 <= last) {
                            assert!(
                                row.iter().all(|x| !x.is_finite()),
                                "{label}: seq 1 row {s} head {h}: {row:?}"
                            );
                            row.fill(0.0);
                            want.o[o..o + d].fill(0.0);
                            attending += 1;
                        }
                    }
                }
            }
            assert!(
                attending > 0,
                "{label}: the case must have rows that attend the key"
            );
            let unchanged = dc.inputs_unchanged(&stream, &host).unwrap();
            let v = judge(precision, &got, &want, None, false, unchanged).unwrap();
            assert!(v.failures.is_empty(), "{label}: {:?}", v.failures);
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn varlen_keeps_nonfinite_v_to_the_rows_that_attend_it() {
    let dev = device();
    // Prefill-shaped (key 5 of sequence 1: causal rows before it, and the sequences around it).
    let lens = [(70, 90), (50, 40), (33, 60)];
    for p in [Precision::F16, Precision::Bf16] {
        check_varlen(
            &dev,
            p,
            &lens,
            64,
            5,
            variant("portable.m128.n64.w4.s2.b2.ctelx"),
            Family::Portable,
        );
    }
    // Decode-shaped: a few queries per sequence.
    let lens = [(3, 90), (5, 40), (1, 60)];
    for p in [Precision::F16, Precision::Fp8KvF16] {
        check_varlen(
            &dev,
            p,
            &lens,
            128,
            37,
            variant("decode.m16.n64.w4.s3.b2.cex"),
            Family::Decode,
        );
    }
}

#[test]
#[ignore = "needs a GPU (sm_90a for the Hopper family)"]
fn hopper_varlen_keeps_nonfinite_v_to_the_rows_that_attend_it() {
    let dev = device();
    // Hopper: TMA reads a sequence's neighbours' keys past its end, which must add nothing.
    let lens = [(70, 90), (50, 40), (33, 60)];
    for p in [Precision::F16, Precision::Fp8KvF16] {
        check_varlen(
            &dev,
            p,
            &lens,
            128,
            5,
            variant("hopper.m128.n128.w12.s2.b1.w4oex"),
            Family::Hopper,
        );
    }
}
