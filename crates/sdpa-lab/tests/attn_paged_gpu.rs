//! `sdpa-lab attn` over a paged KV cache: a safetensors file with `k_cache`, `v_cache`,
//! `block_table` and `seqlens_k` in, an output that matches the float64 CPU reference on each
//! sequence's keys gathered back out of the pages. Run the GPU test on the device machine
//! with `--include-ignored`; set `SDPA_LAB_BIN` when the binary is not where cargo built it.

use fp8_sdpa::reference::{self, RefOutput};
use fp8_sdpa::{AttnShape, DType, Precision};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use sdpa_harness::harness::{decode_out, LSE_ATOL, LSE_RTOL};
use sdpa_harness::inputs::{encode, generate, Distribution, Encoded};
use sdpa_harness::metrics::{compare, Thresholds};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::bin;

const HQ: usize = 8;
const HKV: usize = 2;
const D: usize = 128;
/// Ragged keys per sequence: long, a partial page, fewer than the query rows, none.
const LENS: [usize; 4] = [1000, 17, 2, 0];

/// One paged input file's case.
struct Case {
    precision: Precision,
    page: usize,
    causal: bool,
    seq_q: usize,
    /// E4M3 descales per kv-head (`[heads_kv]`) rather than per (sequence, kv-head).
    per_head: bool,
    variant: Option<&'static str>,
}

/// A paged cache: pools `[pages, page, HKV, D]` and the block table `[batch, max_pages]`.
struct Cache {
    k: Vec<u8>,
    v: Vec<u8>,
    table: Vec<i32>,
    pages: usize,
    max_pages: usize,
}

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F16 => Dtype::F16,
        DType::Bf16 => Dtype::BF16,
        _ => Dtype::F8_E4M3,
    }
}

/// Scatters sequences stored contiguously (`cap` rows each, `row` bytes a row) into pages at
/// shuffled slots of a pool with spare pages. Rows no sequence holds are 0xFF (NaN in f16,
/// bf16 and E4M3), so a kernel that reads past a sequence's keys shows it; table entries
/// past a sequence's pages are -1, which the contract allows.
fn scatter(k: &[u8], v: &[u8], cap: usize, page: usize, row: usize) -> Cache {
    let max_pages = cap / page;
    let used: usize = LENS.iter().map(|n| n.div_ceil(page)).sum();
    let pages = used + 3;
    let mut slots: Vec<i32> = (0..pages as i32).collect();
    slots.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(page as u64));
    let mut free = slots.into_iter();
    let mut table = vec![-1; LENS.len() * max_pages];
    for (b, n) in LENS.iter().enumerate() {
        for i in 0..n.div_ceil(page) {
            table[b * max_pages + i] = free.next().unwrap();
        }
    }
    let pool = |src: &[u8]| {
        let mut out = vec![0xFFu8; pages * page * row];
        for (b, &n) in LENS.iter().enumerate() {
            for j in 0..n {
                let slot = table[b * max_pages + j / page] as usize;
                let dst = (slot * page + j % page) * row;
                out[dst..dst + row].copy_from_slice(&src[(b * cap + j) * row..][..row]);
            }
        }
        out
    };
    Cache {
        k: pool(k),
        v: pool(v),
        table,
        pages,
        max_pages,
    }
}

/// Sequence `b`'s keys read back out of a pool through the table, contiguous.
fn gather(pool: &[u8], c: &Cache, b: usize, page: usize, row: usize) -> Vec<u8> {
    (0..LENS[b])
        .flat_map(|j| {
            let slot = c.table[b * c.max_pages + j / page] as usize;
            pool[(slot * page + j % page) * row..][..row]
                .iter()
                .copied()
        })
        .collect()
}

fn le_bytes<T: Copy, const N: usize>(xs: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
    xs.iter().flat_map(|&x| f(x)).collect()
}

/// The input file.
fn write_input(
    path: &Path,
    q: &Encoded,
    qd: [usize; 4],
    kv: [&Encoded; 2],
    c: &Cache,
    page: usize,
) {
    let cd = vec![c.pages, page, HKV, D];
    let lens: Vec<i32> = LENS.iter().map(|&n| n as i32).collect();
    let (table, lens) = (
        le_bytes(&c.table, i32::to_le_bytes),
        le_bytes(&lens, i32::to_le_bytes),
    );
    let ds: Vec<Vec<u8>> = kv
        .iter()
        .map(|e| le_bytes(e.descales.as_deref().unwrap_or_default(), f32::to_le_bytes))
        .collect();
    let kvt = st_dtype(kv[0].dtype);
    let mut views = vec![
        (
            "q",
            TensorView::new(st_dtype(q.dtype), qd.to_vec(), &q.bytes),
        ),
        ("k_cache", TensorView::new(kvt, cd.clone(), &c.k)),
        ("v_cache", TensorView::new(kvt, cd, &c.v)),
        (
            "block_table",
            TensorView::new(Dtype::I32, vec![LENS.len(), c.max_pages], &table),
        ),
        (
            "seqlens_k",
            TensorView::new(Dtype::I32, vec![LENS.len()], &lens),
        ),
    ];
    for (i, name) in ["k_descale", "v_descale"].into_iter().enumerate() {
        if let Some(d) = &kv[i].descales {
            // One descale per kv-head, or one per (sequence, kv-head).
            let shape = if d.len() == HKV {
                vec![HKV]
            } else {
                vec![LENS.len(), HKV]
            };
            views.push((name, TensorView::new(Dtype::F32, shape, &ds[i])));
        }
    }
    let views: Vec<_> = views.into_iter().map(|(n, v)| (n, v.unwrap())).collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn attn(input: &Path, output: &Path, extra: &[&str]) -> Output {
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let mut args = vec!["attn", "--inputs", i, "--out", o, "--lse"];
    args.extend(extra);
    Command::new(bin()).args(args).output().unwrap()
}

/// The float64 reference, sequence by sequence on the keys gathered out of the pages.
fn reference_of(c: &Case, q: &Encoded, kv: [&Encoded; 2], cache: &Cache, scale: f64) -> RefOutput {
    let (sq, row) = (c.seq_q, HKV * D * c.precision.kv().size());
    let qf = reference::dequantize(q.dtype, &q.bytes, None, [LENS.len(), sq, HQ, D], 0).unwrap();
    let mut want = RefOutput {
        o: Vec::new(),
        lse: Vec::new(),
        score_magnitude: Vec::new(),
        o_slack: Vec::new(),
    };
    for (b, &n) in LENS.iter().enumerate() {
        let deq = |e: &Encoded, pool: &[u8]| {
            // This sequence's descales: the shared per-head ones, or its own row.
            let ds = e.descales.as_deref().map(|d| {
                if d.len() == HKV {
                    d
                } else {
                    &d[b * HKV..][..HKV]
                }
            });
            let bytes = gather(pool, cache, b, c.page, row);
            reference::dequantize(e.dtype, &bytes, ds, [1, n, HKV, D], 0).unwrap()
        };
        let (kf, vf) = (deq(kv[0], &cache.k), deq(kv[1], &cache.v));
        let shape = AttnShape::new(1, sq, n, HQ, HKV, D);
        let qs = &qf[b * sq * HQ * D..][..sq * HQ * D];
        let r = reference::attention(&shape, qs, &kf, &vf, scale, c.causal).unwrap();
        want.o.extend(r.o);
        want.lse.extend(r.lse);
        want.score_magnitude.extend(r.score_magnitude);
        want.o_slack.extend(r.o_slack);
    }
    want
}

/// Runs one case through the binary and checks it; returns the input file.
fn run_case(dir: &Path, c: &Case) -> PathBuf {
    let (p, sq, batch) = (c.precision, c.seq_q, LENS.len());
    let cap = LENS.iter().max().unwrap().div_ceil(c.page) * c.page;
    let (qd, kd) = ([batch, sq, HQ, D], [batch, cap, HKV, D]);
    // Quantizing the batch as one sequence gives one descale per kv-head.
    let kv_dims = if c.per_head {
        [1, batch * cap, HKV, D]
    } else {
        kd
    };
    let q = encode(
        p.q(),
        &generate(1, batch * sq * HQ * D, D, Distribution::Normal),
        qd,
    )
    .unwrap();
    let kv = [2, 3].map(|seed| {
        let raw = generate(seed, batch * cap * HKV * D, D, Distribution::Normal);
        encode(p.kv(), &raw, kv_dims).unwrap()
    });
    let cache = scatter(
        &kv[0].bytes,
        &kv[1].bytes,
        cap,
        c.page,
        HKV * D * p.kv().size(),
    );
    let name = format!("{p}-p{}-c{}", c.page, c.causal);
    let (input, output) = (
        dir.join(format!("{name}.st")),
        dir.join(format!("{name}.out.st")),
    );
    write_input(&input, &q, qd, [&kv[0], &kv[1]], &cache, c.page);
    let mut extra = Vec::new();
    if c.causal {
        extra.push("--causal");
    }
    if let Some(v) = c.variant {
        extra.extend(["--variant", v]);
    }
    let out = attn(&input, &output, &extra);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: attn failed: {err}");
    let bytes = std::fs::read(&output).unwrap();
    let f = SafeTensors::deserialize(&bytes).unwrap();
    let (o, lse) = (f.tensor("o").unwrap(), f.tensor("lse").unwrap());
    assert_eq!(
        (o.shape(), lse.shape()),
        (&qd[..], &[batch, HQ, sq][..]),
        "{name}"
    );
    let scale = (1.0 / (D as f32).sqrt()) as f64; // the CLI's default, exactly
    let want = reference_of(c, &q, [&kv[0], &kv[1]], &cache, scale);
    let t = Thresholds::for_precision(p);
    let s = t.compare(&decode_out(p.out(), o.data()), &want.o).unwrap();
    t.check(&s).unwrap_or_else(|e| panic!("{name}: O: {e}"));
    let got_lse: Vec<f32> = lse
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let l = compare(&got_lse, &want.lse, LSE_ATOL, LSE_RTOL).unwrap();
    assert_eq!(l.bad, 0, "{name}: LSE {l:?}");
    input
}

/// fp16 and E4M3 caches, causal and not, page sizes 16 and 64, pages scattered, ragged
/// lengths (one shorter than the query, one empty), through the binary.
#[test]
#[ignore = "needs a GPU"]
fn attn_reads_a_paged_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (Precision::F16, 16, false, 1, false, None),
        (
            Precision::F16,
            64,
            true,
            4,
            false,
            Some("decode.m16.n32.w2.s4.b4.cex"),
        ),
        (Precision::Fp8KvBf16, 16, true, 3, true, None),
        (Precision::Fp8KvF16, 64, false, 1, false, None),
    ];
    let inputs: Vec<PathBuf> = cases
        .into_iter()
        .map(|(precision, page, causal, seq_q, per_head, variant)| {
            let c = Case {
                precision,
                page,
                causal,
                seq_q,
                per_head,
                variant,
            };
            run_case(dir.path(), &c)
        })
        .collect();
    // Only the decode family reads a paged cache: another family's variant is refused.
    let out = attn(
        &inputs[0],
        &dir.path().join("x.st"),
        &["--variant", "portable.m128.n32.w4.s2.b2.ctelx"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("only the decode family reads a paged cache"),
        "{err}"
    );
}

/// A file with both forms fails before any GPU is needed, naming the file and the tensors.
#[test]
fn attn_refuses_a_file_with_both_forms() {
    let dir = tempfile::tempdir().unwrap();
    let zeros = vec![0u8; 2 * 16 * HKV * D * 2];
    let (lens, table) = (0i32.to_le_bytes(), 0i32.to_le_bytes());
    let views = vec![
        (
            "q",
            TensorView::new(Dtype::F16, vec![1, 1, HKV, D], &zeros[..HKV * D * 2]),
        ),
        (
            "k",
            TensorView::new(Dtype::F16, vec![1, 16, HKV, D], &zeros[..16 * HKV * D * 2]),
        ),
        (
            "v",
            TensorView::new(Dtype::F16, vec![1, 16, HKV, D], &zeros[..16 * HKV * D * 2]),
        ),
        (
            "k_cache",
            TensorView::new(Dtype::F16, vec![2, 16, HKV, D], &zeros),
        ),
        (
            "v_cache",
            TensorView::new(Dtype::F16, vec![2, 16, HKV, D], &zeros),
        ),
        (
            "block_table",
            TensorView::new(Dtype::I32, vec![1, 1], &table),
        ),
        ("seqlens_k", TensorView::new(Dtype::I32, vec![1], &lens)),
    ];
    let views: Vec<_> = views.into_iter().map(|(n, v)| (n, v.unwrap())).collect();
    let input = dir.path().join("both.st");
    std::fs::write(&input, safetensors::serialize(views, None).unwrap()).unwrap();
    let out = attn(&input, &dir.path().join("o.st"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in ["both.st", "'k', 'v' and 'k_cache'", "not both"] {
        assert!(err.contains(want), "expected '{want}' in: {err}");
    }
}
