//! The CUDA paths against the f32 reference (candle ops on CPU copies of the same inputs),
//! with fp8-sdpa's per-precision thresholds. Build with `scripts/build-candle-cuda.sh`; run
//! on a GPU machine with `--include-ignored`. Without a GPU every test fails (no skipping).
//! Built only with the `cuda` feature (`required-features` in Cargo.toml).

mod common;

use candle_core::{DType, Device, Result, Tensor};
use common::{cumulative, err_msg, uniform, uniform3, values};
use fp8_sdpa::Precision;
use fp8_sdpa_candle::{
    dequantize_e4m3, flash_attn, flash_attn_fp8kv, flash_attn_paged, flash_attn_varlen,
    quantize_e4m3, quantize_e4m3_with, reference, Fp8KvCache, Fp8KvCacheConfig, Fp8PagedCache,
    Fp8PagedCacheConfig,
};
use sdpa_harness::metrics::Thresholds;

const CPU: Device = Device::Cpu;

fn gpu() -> Device {
    Device::new_cuda(0).expect("these tests need a CUDA GPU (device 0)")
}

fn precision(q: DType, fp8: bool) -> Precision {
    match (q, fp8) {
        (DType::F16, false) => Precision::F16,
        (DType::BF16, false) => Precision::Bf16,
        (DType::F16, true) => Precision::Fp8KvF16,
        _ => Precision::Fp8KvBf16,
    }
}

/// Checks a GPU output against the f32 reference over CPU copies of `q`, `k`, `v` (f32 or
/// 16-bit; for FP8-KV the dequantized K/V), every element within the precision's bounds.
fn check(
    o: &Tensor,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    scale: f32,
    causal: bool,
    p: Precision,
    what: &str,
) -> Result<()> {
    assert!(
        o.device().is_cuda(),
        "{what}: the output must stay on the GPU"
    );
    assert_eq!((o.dims(), o.dtype()), (q.dims(), q.dtype()), "{what}");
    let cpu = |t: &Tensor| t.to_device(&CPU);
    let want = values(&reference::attention(
        &cpu(q)?,
        &cpu(k)?,
        &cpu(v)?,
        scale,
        causal,
    )?)?;
    judge(o, &want, p, what)
}

/// Every element of `o` within precision `p`'s bounds of `want` (fails the test naming `what`).
fn judge(o: &Tensor, want: &[f64], p: Precision, what: &str) -> Result<()> {
    let out: Vec<f32> = values(o)?.into_iter().map(|x| x as f32).collect();
    let th = Thresholds::for_precision(p);
    let stats = th.compare(&out, want).expect("equal lengths");
    if let Err(e) = th.check(&stats) {
        panic!("{what}: {e}");
    }
    Ok(())
}

/// (batch, seq_q, seq_k, heads_q, heads_kv, head_dim)
const SHAPES: [[usize; 6]; 4] = [
    [2, 100, 300, 8, 2, 64],  // GQA 4, seq_q < seq_k
    [1, 257, 129, 4, 4, 128], // seq_q > seq_k: causal rows that see nothing
    [2, 1, 1000, 32, 8, 128], // decode-shaped
    [1, 64, 64, 2, 1, 256],   // MQA
];

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn flash_attn_matches_the_reference() -> Result<()> {
    let dev = gpu();
    for (i, [b, sq, sk, hq, hkv, d]) in SHAPES.into_iter().enumerate() {
        for dtype in [DType::F16, DType::BF16] {
            for causal in [false, true] {
                let s = 100 * i as u64;
                let q = uniform([b, sq, hq, d], 2.0, s, dtype, &dev)?;
                let k = uniform([b, sk, hkv, d], 2.0, s + 1, dtype, &dev)?;
                let v = uniform([b, sk, hkv, d], 2.0, s + 2, dtype, &dev)?;
                let scale = 1.0 / (d as f32).sqrt();
                let o = flash_attn(&q, &k, &v, scale, causal)?;
                let what = format!("shape {i} {dtype:?} causal {causal}");
                check(
                    &o,
                    (&q, &k, &v),
                    scale,
                    causal,
                    precision(dtype, false),
                    &what,
                )?;
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn views_are_read_in_place() -> Result<()> {
    let dev = gpu();
    // BHSD storage seen as BSHD, and K narrowed on seq.
    let q = uniform([2, 8, 77, 128], 1.0, 1, DType::BF16, &dev)?.transpose(1, 2)?;
    let k = uniform([2, 200, 2, 128], 1.0, 2, DType::BF16, &dev)?.narrow(1, 8, 150)?;
    let v = uniform([2, 2, 150, 128], 1.0, 3, DType::BF16, &dev)?.transpose(1, 2)?;
    let o = flash_attn(&q, &k, &v, 0.09, true)?;
    check(&o, (&q, &k, &v), 0.09, true, Precision::Bf16, "views")?;
    let want = flash_attn(
        &q.contiguous()?,
        &k.contiguous()?,
        &v.contiguous()?,
        0.09,
        true,
    )?;
    assert_eq!(
        values(&o)?,
        values(&want)?,
        "a view and its copy give the same bits"
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn fp8kv_matches_the_reference_over_dequantized_kv() -> Result<()> {
    let dev = gpu();
    for (i, [b, sq, sk, hq, hkv, d]) in SHAPES.into_iter().enumerate() {
        for dtype in [DType::F16, DType::BF16] {
            for causal in [false, true] {
                let s = 100 * i as u64 + 50;
                let q = uniform([b, sq, hq, d], 2.0, s, dtype, &dev)?;
                let (k8, kd) = quantize_e4m3(&uniform([b, sk, hkv, d], 3.0, s + 1, dtype, &dev)?)?;
                let (v8, vd) = quantize_e4m3(&uniform([b, sk, hkv, d], 3.0, s + 2, dtype, &dev)?)?;
                // Per (batch, head) descales, then per head ones.
                for (kd, vd) in [(kd.clone(), vd.clone()), (kd.get(0)?, vd.get(0)?)] {
                    let scale = 1.0 / (d as f32).sqrt();
                    let o = flash_attn_fp8kv(&q, &k8, &v8, &kd, &vd, scale, causal)?;
                    let (kf, vf) = (dequantize_e4m3(&k8, &kd)?, dequantize_e4m3(&v8, &vd)?);
                    let what = format!(
                        "shape {i} {dtype:?} causal {causal} descales {:?}",
                        kd.dims()
                    );
                    check(
                        &o,
                        (&q, &kf, &vf),
                        scale,
                        causal,
                        precision(dtype, true),
                        &what,
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Raw E4M3 codes of a tensor on any device.
fn bits(t: &Tensor) -> Result<Vec<u8>> {
    Ok(t.to_device(&CPU)?
        .flatten_all()?
        .to_vec1::<float8::F8E4M3>()?
        .into_iter()
        .map(|c| c.to_bits())
        .collect())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn gpu_quantizers_equal_the_cpu_bit_for_bit() -> Result<()> {
    let dev = gpu();
    for dtype in [DType::F16, DType::BF16] {
        // A strided view: the kernel reads strides.
        let x = uniform([3, 4, 70, 64], 6.0, 9, dtype, &dev)?.transpose(1, 2)?;
        let (gc, gd) = quantize_e4m3(&x)?;
        let (cc, cd) = quantize_e4m3(&x.to_device(&CPU)?)?;
        assert!(gc.device().is_cuda() && gd.device().is_cuda());
        assert_eq!(bits(&gc)?, bits(&cc)?, "{dtype:?} codes");
        assert_eq!(values(&gd)?, values(&cd)?, "{dtype:?} descales");
        let ds = (&cd * 0.7)?; // later appends: saturating under a smaller descale
        let g = quantize_e4m3_with(&x, &ds.to_device(&dev)?)?;
        let c = quantize_e4m3_with(&x.to_device(&CPU)?, &ds)?;
        assert_eq!(bits(&g)?, bits(&c)?, "{dtype:?} codes under given descales");
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn cache_decode_matches_the_reference_and_the_cpu_cache() -> Result<()> {
    let dev = gpu();
    for (dtype, page_size) in [(DType::F16, 64), (DType::BF16, 16)] {
        let (b, hq, hkv, d) = (3, 16, 4, 128);
        let mut cfg = Fp8KvCacheConfig::new(b, hkv, d, 700);
        cfg.page_size = page_size;
        let mut on_gpu = Fp8KvCache::new(cfg, &dev)?;
        let mut on_cpu = Fp8KvCache::new(cfg, &CPU)?;
        let append = |n: usize, seed: u64, caches: [&mut Fp8KvCache; 2]| -> Result<()> {
            let k = uniform([b, n, hkv, d], 2.0, seed, dtype, &dev)?;
            let v = uniform([b, n, hkv, d], 2.0, seed + 1, dtype, &dev)?;
            let [g, c] = caches;
            g.append(&k, &v)?;
            c.append(&k.to_device(&CPU)?, &v.to_device(&CPU)?)
        };
        append(500, 1, [&mut on_gpu, &mut on_cpu])?;
        for step in 0..64u64 {
            append(1, 10 + 2 * step, [&mut on_gpu, &mut on_cpu])?;
            let (kg, vg) = on_gpu.dequantized_kv()?;
            if step % 16 == 0 {
                // Same codes and descales on both devices.
                let (kc, vc) = on_cpu.dequantized_kv()?;
                assert_eq!(values(&kg)?, values(&kc)?, "{dtype:?} step {step}: K");
                assert_eq!(values(&vg)?, values(&vc)?, "{dtype:?} step {step}: V");
            }
            let sq = 1 + (step as usize % 2); // single tokens and pairs (speculative)
            let q = uniform([b, sq, hq, d], 2.0, 1000 + step, dtype, &dev)?;
            let o = on_gpu.attend(&q, 0.088, true)?;
            let what = format!("{dtype:?} pages {page_size} step {step}");
            check(
                &o,
                (&q, &kg, &vg),
                0.088,
                true,
                precision(dtype, true),
                &what,
            )?;
        }
        assert_eq!(on_gpu.len(), 564);
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn runs_in_order_on_candles_stream_without_a_sync() -> Result<()> {
    // candle's default device uses the per-thread stream; new_cuda_with_stream its own.
    for dev in [Device::new_cuda(0)?, Device::new_cuda_with_stream(0)?] {
        let x = uniform([4, 512, 16, 128], 1.0, 5, DType::F16, &dev)?;
        let k = uniform([4, 512, 4, 128], 1.0, 6, DType::F16, &dev)?;
        let v = uniform([4, 512, 4, 128], 1.0, 7, DType::F16, &dev)?;
        for round in 0..3 {
            // candle writes Q, ours reads it and writes O, candle reads O: no sync between.
            let q = (&x * 2.0)?.contiguous()?;
            let o = flash_attn(&q, &k, &v, 0.088, true)?;
            let y = ((&o * 2.0)? * 0.5)?; // exact in f16
            check(
                &y,
                (&q, &k, &v),
                0.088,
                true,
                Precision::F16,
                &format!("round {round}"),
            )?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn gpu_errors_are_candle_errors() -> Result<()> {
    let dev = gpu();
    let q = uniform([1, 4, 2, 64], 1.0, 1, DType::F16, &dev)?;
    let k = uniform([1, 4, 2, 64], 1.0, 2, DType::F16, &CPU)?;
    let msg = err_msg(flash_attn(&q, &k, &k, 0.1, false));
    assert!(msg.contains("k is on Cpu but q is on Cuda"), "{msg}");
    // A limit only fp8-sdpa knows (its grid), passed through with its message.
    let q = uniform([70000, 1, 1, 64], 1.0, 3, DType::F16, &dev)?;
    let msg = err_msg(flash_attn(&q, &q, &q, 0.1, false));
    assert!(
        msg.contains("flash_attn") && msg.contains("launch limits"),
        "{msg}"
    );
    let cache = Fp8KvCache::new(Fp8KvCacheConfig::new(1, 2, 64, 64), &dev)?;
    let msg = err_msg(cache.attend(
        &uniform([1, 1, 2, 64], 1.0, 4, DType::F16, &CPU)?,
        0.1,
        true,
    ));
    assert!(
        msg.contains("q is on Cpu but the cache is on Cuda"),
        "{msg}"
    );
    Ok(())
}

/// Sequence lengths (queries, keys) of the varlen tests: prompts (square), decode steps (one
/// query over a long cache), length-1 sequences, a sequence without queries and one without
/// keys (zero rows), more queries than keys (causal rows that see nothing), lengths off
/// multiples of 64 and one longer than a 128-row tile.
const VARLEN: [(usize, usize); 9] = [
    (200, 200),
    (1, 1),
    (1, 777),
    (0, 50),
    (65, 0),
    (129, 64),
    (63, 63),
    (2, 1000),
    (333, 333),
];

/// Packed Q, K, V for `lens`, and their offsets as U32 tensors on `dev`.
#[allow(clippy::type_complexity)]
fn varlen_inputs(
    lens: &[(usize, usize)],
    (hq, hkv, d): (usize, usize, usize),
    dtype: DType,
    seed: u64,
    dev: &Device,
) -> Result<((Tensor, Tensor, Tensor), (Tensor, Tensor), (usize, usize))> {
    let (lq, lk): (Vec<usize>, Vec<usize>) = lens.iter().copied().unzip();
    let (cu_q, cu_k) = (cumulative(&lq), cumulative(&lk));
    let (tq, tk) = (cu_q[lens.len()] as usize, cu_k[lens.len()] as usize);
    let q = uniform3([tq, hq, d], 2.0, seed, dtype, dev)?;
    let k = uniform3([tk, hkv, d], 2.0, seed + 1, dtype, dev)?;
    let v = uniform3([tk, hkv, d], 2.0, seed + 2, dtype, dev)?;
    let sq = Tensor::new(cu_q.as_slice(), dev)?;
    let sk = Tensor::new(cu_k.as_slice(), dev)?;
    let max = |l: &[usize]| l.iter().copied().max().unwrap_or(0);
    Ok(((q, k, v), (sq, sk), (max(&lq), max(&lk))))
}

/// Checks a GPU varlen output against the f32 reference over CPU copies of the inputs.
fn check_varlen(
    o: &Tensor,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    (sq, sk): (&Tensor, &Tensor),
    scale: f32,
    causal: bool,
    what: &str,
) -> Result<()> {
    assert!(
        o.device().is_cuda(),
        "{what}: the output must stay on the GPU"
    );
    assert_eq!((o.dims(), o.dtype()), (q.dims(), q.dtype()), "{what}");
    let cpu = |t: &Tensor| t.to_device(&CPU);
    let want = values(&reference::attention_varlen(
        &cpu(q)?,
        &cpu(k)?,
        &cpu(v)?,
        &cpu(sq)?,
        &cpu(sk)?,
        scale,
        causal,
    )?)?;
    judge(o, &want, precision(q.dtype(), false), what)
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn flash_attn_varlen_matches_the_reference() -> Result<()> {
    let dev = gpu();
    for (i, heads) in [(8, 2, 64), (16, 4, 128), (4, 4, 256)]
        .into_iter()
        .enumerate()
    {
        for dtype in [DType::F16, DType::BF16] {
            let ((q, k, v), (sq, sk), (mq, mk)) =
                varlen_inputs(&VARLEN, heads, dtype, 200 + 10 * i as u64, &dev)?;
            for causal in [false, true] {
                let scale = 1.0 / (heads.2 as f32).sqrt();
                let o = flash_attn_varlen(&q, &k, &v, &sq, &sk, mq, mk, scale, causal)?;
                let what = format!("heads {heads:?} {dtype:?} causal {causal}");
                check_varlen(&o, (&q, &k, &v), (&sq, &sk), scale, causal, &what)?;
                // The sequence without keys (after 200 + 1 + 1 + 0 queries) has zero rows.
                let row = heads.0 * heads.2;
                let zeros = &values(&o)?[202 * row..(202 + 65) * row];
                assert!(zeros.iter().all(|x| *x == 0.0), "{what}: keyless rows");
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn flash_attn_varlen_reads_views_in_place_and_single_sequences() -> Result<()> {
    let dev = gpu();
    let (hq, hkv, d) = (8, 2, 128);
    let lens = [(100, 100), (1, 300), (37, 37)];
    let ((q, k, v), (sq, sk), (mq, mk)) = varlen_inputs(&lens, (hq, hkv, d), DType::BF16, 7, &dev)?;
    let o = flash_attn_varlen(&q, &k, &v, &sq, &sk, mq, mk, 0.09, true)?;
    // Q stored head-major, K and V cut from one packed [tokens, 2 * hkv, d] buffer.
    let qt = q.transpose(0, 1)?.contiguous()?.transpose(0, 1)?;
    let kv = Tensor::cat(&[&k, &v], 1)?;
    let (kn, vn) = (kv.narrow(1, 0, hkv)?, kv.narrow(1, hkv, hkv)?);
    assert!(!qt.is_contiguous() && !kn.is_contiguous());
    let ov = flash_attn_varlen(&qt, &kn, &vn, &sq, &sk, mq, mk, 0.09, true)?;
    assert_eq!(
        values(&ov)?,
        values(&o)?,
        "a view and its copy give the same bits"
    );
    // One sequence, from length 1 up: varlen of a batch of one is dense attention.
    for n in [1, 2, 63, 64, 65, 200] {
        let q = uniform3([n, hq, d], 2.0, n as u64, DType::F16, &dev)?;
        let k = uniform3([n, hkv, d], 2.0, n as u64 + 1, DType::F16, &dev)?;
        let cu = Tensor::new(&[0u32, n as u32], &dev)?;
        let o = flash_attn_varlen(&q, &k, &k, &cu, &cu, n, n, 0.088, true)?;
        let what = format!("one sequence of {n}");
        check_varlen(&o, (&q, &k, &k), (&cu, &cu), 0.088, true, &what)?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn flash_attn_varlen_rejects_bad_offsets_on_the_gpu() -> Result<()> {
    let dev = gpu();
    let lens = [(3, 4), (2, 5)];
    let ((q, k, v), (sq, sk), _) = varlen_inputs(&lens, (4, 2, 64), DType::F16, 3, &dev)?;
    let u32s = |v: &[u32]| Tensor::new(v, &dev);
    let run = |sq: &Tensor, sk: &Tensor, mq, mk| {
        err_msg(flash_attn_varlen(&q, &k, &v, sq, sk, mq, mk, 0.125, true))
    };
    // Found by the library's check of the offsets it reads back (the values are not on the
    // host): candle errors naming the entry, as on the CPU.
    for (msg, want) in [
        (
            run(&u32s(&[0, 4, 3])?, &sk, 4, 5),
            "seqlens_q[2] = 3 < seqlens_q[1] = 4",
        ),
        (
            run(&sq, &u32s(&[0, 4, 8])?, 3, 5),
            "seqlens_k[2] = 8 but K holds 9 tokens",
        ),
        (run(&sq, &sk, 2, 5), "more than max_seqlen_q = 2"),
        (run(&u32s(&[1, 3, 5])?, &sk, 3, 5), "seqlens_q[0] = 1"),
        (
            run(&sq, &u32s(&[0, 3_000_000_000, 9])?, 3, 5),
            "must not decrease",
        ),
    ] {
        assert!(
            msg.contains("flash_attn_varlen") && msg.contains(want),
            "{msg}"
        );
    }
    // The stream is fine afterwards.
    let o = flash_attn_varlen(&q, &k, &v, &sq, &sk, 3, 5, 0.125, true)?;
    check_varlen(&o, (&q, &k, &v), (&sq, &sk), 0.125, true, "after errors")?;
    // Checked before any device work: the same message as on the CPU.
    let msg = run(&Tensor::new(&[0i64, 3, 5], &dev)?, &sk, 3, 5);
    assert!(msg.contains("seqlens_q must be U32"), "{msg}");
    let msg = run(&sq.to_device(&CPU)?, &sk, 3, 5);
    assert!(
        msg.contains("seqlens_q is on Cpu but q is on Cuda"),
        "{msg}"
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn paged_cache_serves_a_changing_batch_like_the_cpu_cache() -> Result<()> {
    let dev = gpu();
    let (hq, hkv, d, page) = (16, 4, 128, 16);
    let cfg = Fp8PagedCacheConfig::new(200, hkv, d).with_page_size(page);
    let (mut g, mut c) = (
        Fp8PagedCache::new(cfg, &dev)?,
        Fp8PagedCache::new(cfg, &CPU)?,
    );
    let mut ids = Vec::new();
    for step in 0..24u64 {
        if step % 4 == 0 {
            // A new prompt of 1..=700 tokens, its own scale.
            let n = 1 + (step as usize * 97) % 700;
            let k = uniform(
                [1, n, hkv, d],
                1.0 + step as f32,
                2 * step,
                DType::BF16,
                &dev,
            )?;
            let v = uniform([1, n, hkv, d], 2.0, 2 * step + 1, DType::BF16, &dev)?;
            let id = g.add(&k, &v)?;
            assert_eq!(id, c.add(&k.to_device(&CPU)?, &v.to_device(&CPU)?)?);
            ids.push(id);
        }
        if step % 6 == 5 {
            let gone = ids.remove(0);
            g.remove(gone)?;
            c.remove(gone)?;
        }
        for (i, &id) in ids.iter().enumerate() {
            let n = 1 + (i + step as usize) % 2;
            let k = uniform(
                [1, n, hkv, d],
                2.0,
                100 + step * 7 + i as u64,
                DType::BF16,
                &dev,
            )?;
            let v = uniform(
                [1, n, hkv, d],
                2.0,
                300 + step * 7 + i as u64,
                DType::BF16,
                &dev,
            )?;
            g.append(id, &k, &v)?;
            c.append(id, &k.to_device(&CPU)?, &v.to_device(&CPU)?)?;
        }
        let q = uniform([ids.len(), 1, hq, d], 2.0, 900 + step, DType::BF16, &dev)?;
        let o = g.attend(&ids, &q, 0.088, true)?;
        for (i, &id) in ids.iter().enumerate() {
            let (kg, vg) = g.dequantized_kv(id)?;
            let (kc, vc) = c.dequantized_kv(id)?;
            assert_eq!(values(&kg)?, values(&kc)?, "step {step}: K of {id:?}");
            assert_eq!(values(&vg)?, values(&vc)?, "step {step}: V of {id:?}");
            let what = format!("step {step}, sequence {i} of {}", ids.len());
            let qi = q.narrow(0, i, 1)?;
            check(
                &o.narrow(0, i, 1)?,
                (&qi, &kg, &vg),
                0.088,
                true,
                Precision::Fp8KvBf16,
                &what,
            )?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU: build with scripts/build-candle-cuda.sh, run with --include-ignored"]
fn flash_attn_paged_matches_the_cpu_and_refuses_bad_tables() -> Result<()> {
    let dev = gpu();
    let (pages, page, hq, hkv, d) = (64, 32, 8, 2, 64);
    let ds = Tensor::new(&[3f32 / 448.0, 2.0 / 448.0], &dev)?;
    let kv = uniform([pages, page, hkv, d], 2.0, 5, DType::F16, &dev)?;
    let (kp, vp) = (
        quantize_e4m3_with(&kv, &ds)?,
        quantize_e4m3_with(&kv.neg()?, &ds)?,
    );
    let table = Tensor::new(
        &[[63i32, 2, 17, 40, 8], [1, 0, 0, 0, 0], [5, 6, 7, 9, 11]],
        &dev,
    )?;
    let lens = Tensor::new(&[150i32, 3, 160], &dev)?;
    let q = uniform([3, 2, hq, d], 2.0, 6, DType::F16, &dev)?;
    let o = flash_attn_paged(&q, &kp, &vp, &table, &lens, &ds, &ds, 0.125, true)?;
    let cpu = |t: &Tensor| t.to_device(&CPU);
    let want = flash_attn_paged(
        &cpu(&q)?,
        &cpu(&kp)?,
        &cpu(&vp)?,
        &cpu(&table)?,
        &cpu(&lens)?,
        &cpu(&ds)?,
        &cpu(&ds)?,
        0.125,
        true,
    )?;
    judge(&o, &values(&want)?, Precision::Fp8KvF16, "flash_attn_paged")?;
    // The GPU reads the table back and refuses a page outside the pools.
    let bad = Tensor::new(
        &[[63i32, 2, 17, 64, 8], [1, 0, 0, 0, 0], [5, 6, 7, 9, 11]],
        &dev,
    )?;
    let e = err_msg(flash_attn_paged(
        &q, &kp, &vp, &bad, &lens, &ds, &ds, 0.125, true,
    ));
    assert!(e.contains("64"), "{e}");
    Ok(())
}
