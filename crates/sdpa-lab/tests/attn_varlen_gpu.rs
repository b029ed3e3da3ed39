//! `sdpa-lab attn` over a variable-length batch: a safetensors file with packed `q`, `k`, `v`
//! and `cu_seqlens_q`, `cu_seqlens_k` in (or packed `q` and `cu_seqlens_q` with a paged
//! cache), an output (`o` `[total_q, heads_q, dim]`, `lse` `[heads_q, total_q]`) that matches
//! the float64 CPU reference. Run the GPU tests on the device machine with
//! `--include-ignored`; set `SDPA_LAB_BIN` when the binary is not where cargo built it.

use fp8_sdpa::{DType, Precision, VarlenShape};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use sdpa_harness::cases::{HostVarlenCase, PagedLayout, VarlenCaseSpec};
use sdpa_harness::harness::{decode_out, LSE_ATOL, LSE_RTOL};
use sdpa_harness::inputs::Distribution;
use sdpa_harness::metrics::{compare, Thresholds};
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::bin;

const HQ: usize = 8;
const HKV: usize = 2;
const D: usize = 64;
/// Many short sequences and a long one: empty, one token, fewer queries than keys and more.
const LENS: [(usize, usize); 7] = [
    (0, 4),
    (1, 1),
    (1, 90),
    (17, 17),
    (5, 2),
    (3, 0),
    (300, 333),
];

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F16 => Dtype::F16,
        DType::Bf16 => Dtype::BF16,
        _ => Dtype::F8_E4M3,
    }
}

fn i32_bytes(xs: &[usize]) -> Vec<u8> {
    xs.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect()
}

/// Writes `host`'s packed inputs and offsets as a varlen input file.
fn write_input(path: &Path, host: &HostVarlenCase) {
    let s = &host.spec.shape;
    let dims = [
        vec![s.total_q(), s.heads_q, s.head_dim],
        vec![s.total_k(), s.heads_kv, s.head_dim],
        vec![s.total_k(), s.heads_kv, s.head_dim],
    ];
    let (cu_q, cu_k) = (i32_bytes(&s.cu_seqlens_q), i32_bytes(&s.cu_seqlens_k));
    let ds: Vec<Vec<u8>> = host
        .enc
        .iter()
        .map(|e| {
            let d = e.descales.as_deref().unwrap_or_default();
            d.iter().flat_map(|x| x.to_le_bytes()).collect()
        })
        .collect();
    let mut views = Vec::new();
    for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
        let e = &host.enc[i];
        views.push((
            name,
            TensorView::new(st_dtype(e.dtype), dims[i].clone(), &e.bytes),
        ));
        if let Some(d) = &e.descales {
            let heads = dims[i][1];
            // Per head, or per (sequence, head).
            let shape = if d.len() == heads {
                vec![heads]
            } else {
                vec![s.batch(), heads]
            };
            let name = ["q_descale", "k_descale", "v_descale"][i];
            views.push((name, TensorView::new(Dtype::F32, shape, &ds[i])));
        }
    }
    let n = vec![s.batch() + 1];
    views.push((
        "cu_seqlens_q",
        TensorView::new(Dtype::I32, n.clone(), &cu_q),
    ));
    views.push(("cu_seqlens_k", TensorView::new(Dtype::I32, n, &cu_k)));
    let views: Vec<_> = views.into_iter().map(|(n, v)| (n, v.unwrap())).collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn attn(input: &Path, output: &Path, extra: &[&str]) -> Output {
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let mut args = vec!["attn", "--inputs", i, "--out", o, "--lse"];
    args.extend(extra);
    Command::new(bin()).args(args).output().unwrap()
}

/// Checks the file `attn` wrote against the float64 reference of `host`'s inputs: O packed
/// `[total_q, heads_q, dim]` within the precision's thresholds, the LSE `[heads_q, total_q]`
/// within the LSE tolerances.
fn check_output(output: &Path, host: &HostVarlenCase, precision: Precision, name: &str) {
    let bytes = std::fs::read(output).unwrap();
    let f = SafeTensors::deserialize(&bytes).unwrap();
    let (o, lse) = (f.tensor("o").unwrap(), f.tensor("lse").unwrap());
    let s = &host.spec.shape;
    assert_eq!(o.shape(), &[s.total_q(), HQ, D], "{name}");
    assert_eq!(lse.shape(), &[HQ, s.total_q()], "{name}");
    let scale = (1.0 / (D as f32).sqrt()) as f64; // the CLI's default, exactly
    let want = host.reference_dequantized(scale).unwrap();
    let t = Thresholds::for_precision(precision);
    let stats = t
        .compare(&decode_out(precision.out(), o.data()), &want.o)
        .unwrap();
    t.check(&stats).unwrap_or_else(|e| panic!("{name}: O: {e}"));
    let got_lse: Vec<f32> = lse
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let l = compare(&got_lse, &want.lse, LSE_ATOL, LSE_RTOL).unwrap();
    assert_eq!(l.bad, 0, "{name}: LSE {l:?}");
}

/// fp16 and FP8-KV (per-sequence descales), causal and not, through the binary.
#[test]
#[ignore = "needs a GPU"]
fn attn_reads_a_varlen_batch() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (precision, causal)) in [
        (Precision::F16, true),
        (Precision::Bf16, false),
        (Precision::Fp8KvF16, true),
    ]
    .into_iter()
    .enumerate()
    {
        let host = HostVarlenCase::build(VarlenCaseSpec {
            shape: VarlenShape::from_lens(&LENS, HQ, HKV, D),
            precision,
            causal,
            dist: Distribution::Normal,
            seed: 40 + i as u64,
            per_sequence_descales: true,
        })
        .unwrap();
        let name = format!("{precision}-{causal}");
        let (input, output) = (
            dir.path().join(format!("{name}.st")),
            dir.path().join(format!("{name}.out.st")),
        );
        write_input(&input, &host);
        let out = attn(&input, &output, if causal { &["--causal"] } else { &[] });
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: attn failed: {err}");
        assert!(err.contains("in 7 sequences"), "{err}");
        check_output(&output, &host, precision, &name);
    }
}

/// A varlen file with bad offsets fails before any GPU is needed, naming the file and the
/// entry; so does `--layout bhsd`.
#[test]
fn attn_refuses_bad_offsets_before_any_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostVarlenCase::build(VarlenCaseSpec {
        shape: VarlenShape::from_lens(&LENS, HQ, HKV, D),
        precision: Precision::F16,
        causal: false,
        dist: Distribution::Normal,
        seed: 1,
        per_sequence_descales: false,
    })
    .unwrap();
    let mut bad = host.clone();
    // Sequence 3's end moves before its start.
    bad.spec.shape.cu_seqlens_q[4] = 1;
    let input = dir.path().join("bad.st");
    write_input(&input, &bad);
    let out = attn(&input, &dir.path().join("o.st"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in ["bad.st", "cu_seqlens_q[4] = 1 < cu_seqlens_q[3] = 2"] {
        assert!(err.contains(want), "expected '{want}' in: {err}");
    }
    let good = dir.path().join("good.st");
    write_input(&good, &host);
    let out = attn(&good, &dir.path().join("o.st"), &["--layout", "bhsd"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--layout bhsd does not apply"), "{err}");
}

/// Decode-shaped sequences for the paged form: one token over a long cache, a few speculative
/// tokens, none, a sequence without keys.
const PAGED_LENS: [(usize, usize); 6] = [(1, 300), (4, 17), (0, 5), (2, 0), (16, 1200), (1, 1)];

/// Writes `host`'s packed queries and `cu_seqlens_q` with its keys in a paged cache of
/// `page_size`-token pages (K/V descales per sequence and kv head).
fn write_paged_input(path: &Path, host: &HostVarlenCase, page_size: usize) {
    let s = &host.spec.shape;
    let l = PagedLayout::new(s, page_size, 3);
    let row = s.heads_kv * s.head_dim * host.enc[1].dtype.size();
    let pools = [
        l.scatter(s, &host.enc[1].bytes, row),
        l.scatter(s, &host.enc[2].bytes, row),
    ];
    let cu_q = i32_bytes(&s.cu_seqlens_q);
    let table: Vec<u8> = l.table.iter().flat_map(|x| x.to_le_bytes()).collect();
    let lens: Vec<u8> = l.seqlens_k.iter().flat_map(|x| x.to_le_bytes()).collect();
    let ds: Vec<Vec<u8>> = host
        .enc
        .iter()
        .map(|e| {
            let d = e.descales.as_deref().unwrap_or_default();
            d.iter().flat_map(|x| x.to_le_bytes()).collect()
        })
        .collect();
    let q = &host.enc[0];
    let pool_dims = vec![l.pages, page_size, s.heads_kv, s.head_dim];
    let kv_t = st_dtype(host.enc[1].dtype);
    let mut views = vec![
        (
            "q",
            TensorView::new(
                st_dtype(q.dtype),
                vec![s.total_q(), s.heads_q, s.head_dim],
                &q.bytes,
            ),
        ),
        (
            "k_cache",
            TensorView::new(kv_t, pool_dims.clone(), &pools[0]),
        ),
        ("v_cache", TensorView::new(kv_t, pool_dims, &pools[1])),
        (
            "block_table",
            TensorView::new(Dtype::I32, vec![s.batch(), l.max_pages], &table),
        ),
        (
            "seqlens_k",
            TensorView::new(Dtype::I32, vec![s.batch()], &lens),
        ),
        (
            "cu_seqlens_q",
            TensorView::new(Dtype::I32, vec![s.batch() + 1], &cu_q),
        ),
    ];
    for (i, name) in [(1, "k_descale"), (2, "v_descale")] {
        if host.enc[i].descales.is_some() {
            let shape = vec![s.batch(), s.heads_kv];
            views.push((name, TensorView::new(Dtype::F32, shape, &ds[i])));
        }
    }
    let views: Vec<_> = views.into_iter().map(|(n, v)| (n, v.unwrap())).collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn paged_host(precision: Precision, causal: bool, seed: u64) -> HostVarlenCase {
    HostVarlenCase::build(VarlenCaseSpec {
        shape: VarlenShape::from_lens(&PAGED_LENS, HQ, HKV, D),
        precision,
        causal,
        dist: Distribution::Normal,
        seed,
        per_sequence_descales: true,
    })
    .unwrap()
}

/// Variable-length queries over a paged cache (fp16 and FP8-KV with per-sequence descales,
/// causal and not) through the binary: the decode kernels' paged varlen mode.
#[test]
#[ignore = "needs a GPU"]
fn attn_reads_variable_length_queries_over_a_paged_cache() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (precision, causal, page)) in [
        (Precision::F16, false, 16),
        (Precision::Fp8KvBf16, true, 64),
    ]
    .into_iter()
    .enumerate()
    {
        let host = paged_host(precision, causal, 70 + i as u64);
        let name = format!("paged-{precision}-{causal}");
        let (input, output) = (
            dir.path().join(format!("{name}.st")),
            dir.path().join(format!("{name}.out.st")),
        );
        write_paged_input(&input, &host, page);
        let out = attn(&input, &output, if causal { &["--causal"] } else { &[] });
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: attn failed: {err}");
        assert!(
            err.contains("in 6 sequences (longest 16 queries) over a paged cache")
                && err.contains("decode."),
            "{err}"
        );
        check_output(&output, &host, precision, &name);
    }
}

/// A paged file with bad query offsets fails before any GPU is needed, naming the entry.
#[test]
fn attn_refuses_bad_paged_query_offsets_before_any_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = paged_host(Precision::F16, false, 2);
    // Sequence 1's end moves before its start.
    bad.spec.shape.cu_seqlens_q[2] = 0;
    let input = dir.path().join("bad-paged.st");
    write_paged_input(&input, &bad, 16);
    let out = attn(&input, &dir.path().join("o.st"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in ["bad-paged.st", "cu_seqlens_q[2] = 0 < cu_seqlens_q[1] = 1"] {
        assert!(err.contains(want), "expected '{want}' in: {err}");
    }
}
