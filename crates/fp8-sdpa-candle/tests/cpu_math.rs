//! The CPU path (candle ops in f32) against a naive float64 loop, and the E4M3 codec on
//! tensors against fp8-sdpa's host codec. Runs without a GPU.

mod common;

use candle_core::{DType, Device, Tensor};
use common::{cumulative, max_abs_diff, naive, naive_varlen, uniform, uniform3, values};
use fp8_sdpa_candle::{
    dequantize_e4m3, flash_attn, flash_attn_fp8kv, flash_attn_varlen, quantize_e4m3,
    quantize_e4m3_with, reference,
};

const CPU: Device = Device::Cpu;

/// (batch, seq_q, seq_k, heads_q, heads_kv, head_dim)
const SHAPES: [[usize; 6]; 5] = [
    [2, 5, 7, 4, 4, 64],  // MHA, seq_q < seq_k
    [1, 6, 6, 8, 2, 64],  // GQA 4, square
    [2, 9, 4, 4, 1, 128], // MQA, seq_q > seq_k: the first causal rows see no key
    [1, 1, 33, 6, 3, 64], // decode-shaped
    [1, 3, 5, 2, 1, 256],
];

#[test]
fn flash_attn_matches_the_naive_loop() -> candle_core::Result<()> {
    for (i, [b, sq, sk, hq, hkv, d]) in SHAPES.into_iter().enumerate() {
        for (dtype, tol) in [(DType::F16, 2e-3), (DType::BF16, 1.6e-2)] {
            for causal in [false, true] {
                let seed = i as u64 * 10;
                let q = uniform([b, sq, hq, d], 2.0, seed, dtype, &CPU)?;
                let k = uniform([b, sk, hkv, d], 2.0, seed + 1, dtype, &CPU)?;
                let v = uniform([b, sk, hkv, d], 1.0, seed + 2, dtype, &CPU)?;
                let scale = 1.0 / (d as f32).sqrt();
                let o = flash_attn(&q, &k, &v, scale, causal)?;
                assert_eq!((o.dims(), o.dtype()), (q.dims(), dtype));
                let want = naive(&q, &k, &v, scale, causal)?;
                let err = max_abs_diff(&values(&o)?, &want);
                // Only the output's rounding to 16 bits: |o| <= 1, so u (or 2u) bounds it.
                assert!(
                    err <= tol,
                    "shape {i} {dtype:?} causal {causal}: max err {err}"
                );
                if causal && sq > sk {
                    let row = &values(&o)?[..hq * d]; // query 0 sees no key
                    assert!(row.iter().all(|x| *x == 0.0), "an empty row must be zero");
                }
            }
        }
    }
    Ok(())
}

#[test]
fn views_read_like_their_contiguous_copies() -> candle_core::Result<()> {
    // [b, h, s, d] storage (PyTorch's order) seen as [b, s, h, d]; K narrowed on seq.
    let q = uniform([2, 4, 6, 64], 1.0, 7, DType::F16, &CPU)?.transpose(1, 2)?;
    let kfull = uniform([2, 10, 2, 64], 1.0, 8, DType::F16, &CPU)?;
    let k = kfull.narrow(1, 2, 7)?;
    let v = uniform([2, 2, 7, 64], 1.0, 9, DType::F16, &CPU)?.transpose(1, 2)?;
    assert!(!q.is_contiguous() && !k.is_contiguous() && !v.is_contiguous());
    let o = flash_attn(&q, &k, &v, 0.125, true)?;
    let want = flash_attn(
        &q.contiguous()?,
        &k.contiguous()?,
        &v.contiguous()?,
        0.125,
        true,
    )?;
    assert_eq!(values(&o)?, values(&want)?);
    Ok(())
}

#[test]
fn fp8kv_matches_the_naive_loop_over_dequantized_kv() -> candle_core::Result<()> {
    let (b, sq, sk, hq, hkv, d) = (2, 3, 20, 8, 2, 128);
    for dtype in [DType::F16, DType::BF16] {
        for causal in [false, true] {
            let q = uniform([b, sq, hq, d], 2.0, 1, dtype, &CPU)?;
            let k = uniform([b, sk, hkv, d], 3.0, 2, dtype, &CPU)?;
            let v = uniform([b, sk, hkv, d], 1.0, 3, dtype, &CPU)?;
            let (k8, kd) = quantize_e4m3(&k)?;
            let (v8, vd) = quantize_e4m3(&v)?;
            // Per (batch, head) descales, and per head ones (row 0 broadcast over the batch).
            let per_head = |t: &Tensor| t.get(0);
            for (kd, vd) in [(kd.clone(), vd.clone()), (per_head(&kd)?, per_head(&vd)?)] {
                let o = flash_attn_fp8kv(&q, &k8, &v8, &kd, &vd, 0.1, causal)?;
                assert_eq!(o.dtype(), dtype);
                let (kf, vf) = (dequantize_e4m3(&k8, &kd)?, dequantize_e4m3(&v8, &vd)?);
                let want = naive(&q, &kf, &vf, 0.1, causal)?;
                let err = max_abs_diff(&values(&o)?, &want);
                let tol = if dtype == DType::F16 { 2e-3 } else { 1.6e-2 };
                assert!(
                    err <= tol,
                    "{dtype:?} causal {causal} descales {:?}: err {err}",
                    kd.dims()
                );
            }
        }
    }
    Ok(())
}

#[test]
fn reference_takes_any_head_dim_and_f32() -> candle_core::Result<()> {
    let q = uniform([1, 4, 2, 8], 1.0, 1, DType::F32, &CPU)?;
    let k = uniform([1, 6, 1, 8], 1.0, 2, DType::F32, &CPU)?;
    let v = uniform([1, 6, 1, 8], 1.0, 3, DType::F32, &CPU)?;
    let o = reference::attention(&q, &k, &v, 0.5, true)?;
    let err = max_abs_diff(&values(&o)?, &naive(&q, &k, &v, 0.5, true)?);
    assert!(err < 1e-6, "f32 reference err {err}");
    Ok(())
}

#[test]
fn quantize_matches_the_host_quantizer_and_bounds_the_error() -> candle_core::Result<()> {
    let x = uniform([2, 9, 3, 64], 5.0, 4, DType::BF16, &CPU)?;
    let (codes, descales) = quantize_e4m3(&x)?;
    assert_eq!(
        (codes.dtype(), descales.dims()),
        (DType::F8E4M3, &[2usize, 3][..])
    );
    let xf = values(&x)?.iter().map(|v| *v as f32).collect::<Vec<_>>();
    let (want_codes, want_ds) = fp8_sdpa::fp8::e4m3::quantize(&xf, [2, 9, 3, 64]).unwrap();
    assert_eq!(bits(&codes)?, want_codes);
    assert_eq!(descales.flatten_all()?.to_vec1::<f32>()?, want_ds);
    // Round trip: 3 mantissa bits, so within 2^-4 relative (plus the subnormal step).
    let back = values(&dequantize_e4m3(&codes, &descales)?)?;
    for (i, (a, b)) in back.iter().zip(values(&x)?).enumerate() {
        let ds = f64::from(want_ds[(i / 64 / 3 / 9) * 3 + (i / 64) % 3]);
        assert!(
            (a - b).abs() <= b.abs() / 16.0 + ds / 512.0,
            "element {i}: {b} -> {a}"
        );
    }
    Ok(())
}

#[test]
fn quantize_with_equals_the_codec_bit_for_bit() -> candle_core::Result<()> {
    // Every f32 bucket that matters: zeros, subnormal codes, ties, saturation, infinities.
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        1e-9,
        0.0009765625,
        0.0029296875,
        448.0,
        464.0,
        465.0,
        -1e6,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    xs.extend((0..2048).map(|i| ((i as f32) * 0.37).sin() * 10f32.powi(i % 7 - 3)));
    xs.resize(64 * (xs.len() / 64 + 1), 0.5);
    let n = xs.len() / 64;
    let x = Tensor::from_vec(xs.clone(), (1, n, 1, 64), &CPU)?;
    for descale in [1.0f32, 0.37, 3.0e-3] {
        let codes = quantize_e4m3_with(&x, &Tensor::new(&[descale], &CPU)?)?;
        let want: Vec<u8> = xs
            .iter()
            .map(|v| fp8_sdpa::fp8::e4m3::encode_scaled(*v, descale))
            .collect();
        assert_eq!(bits(&codes)?, want, "descale {descale}");
    }
    Ok(())
}

/// The raw E4M3 codes of a CPU tensor.
fn bits(t: &Tensor) -> candle_core::Result<Vec<u8>> {
    Ok(t.flatten_all()?
        .to_vec1::<float8::F8E4M3>()?
        .into_iter()
        .map(|c| c.to_bits())
        .collect())
}

/// Sequence lengths (queries, keys) of the varlen tests: a prompt, decode steps (one query),
/// a sequence without queries, one without keys (zero rows), causal rows that see nothing
/// (more queries than keys), lengths off multiples of 64.
const VARLEN: [(usize, usize); 7] = [(5, 5), (1, 40), (0, 12), (3, 0), (70, 70), (9, 4), (1, 1)];

#[test]
fn flash_attn_varlen_matches_the_naive_loop_per_sequence() -> candle_core::Result<()> {
    let (lq, lk): (Vec<usize>, Vec<usize>) = VARLEN.into_iter().unzip();
    let (cu_q, cu_k) = (cumulative(&lq), cumulative(&lk));
    let (tq, tk) = (cu_q[cu_q.len() - 1] as usize, cu_k[cu_k.len() - 1] as usize);
    let (mq, mk) = (*lq.iter().max().unwrap(), *lk.iter().max().unwrap());
    let sq = Tensor::new(cu_q.as_slice(), &CPU)?;
    let sk = Tensor::new(cu_k.as_slice(), &CPU)?;
    for (i, (hq, hkv, d)) in [(4, 4, 64), (8, 2, 128), (3, 1, 256)]
        .into_iter()
        .enumerate()
    {
        for (dtype, tol) in [(DType::F16, 2e-3), (DType::BF16, 1.6e-2)] {
            for causal in [false, true] {
                let seed = 40 + i as u64 * 10;
                let q = uniform3([tq, hq, d], 2.0, seed, dtype, &CPU)?;
                let k = uniform3([tk, hkv, d], 2.0, seed + 1, dtype, &CPU)?;
                let v = uniform3([tk, hkv, d], 1.0, seed + 2, dtype, &CPU)?;
                let scale = 1.0 / (d as f32).sqrt();
                let o = flash_attn_varlen(&q, &k, &v, &sq, &sk, mq, mk, scale, causal)?;
                assert_eq!((o.dims(), o.dtype()), (q.dims(), dtype));
                let want = naive_varlen((&q, &k, &v), &cu_q, &cu_k, scale, causal)?;
                let got = values(&o)?;
                let err = max_abs_diff(&got, &want);
                let what = format!("heads {hq}/{hkv} d {d} {dtype:?} causal {causal}");
                assert!(err <= tol, "{what}: max err {err}");
                // The sequence without keys (index 3, after 5 + 1 + 0 queries) is zero.
                let row = hq * d;
                assert!(got[6 * row..9 * row].iter().all(|x| *x == 0.0), "{what}");
                // The reference is the same computation in f32.
                let r = reference::attention_varlen(&q, &k, &v, &sq, &sk, scale, causal)?;
                assert_eq!(r.dtype(), DType::F32);
                assert_eq!(values(&r.to_dtype(dtype)?)?, got, "{what}");
            }
        }
    }
    Ok(())
}

#[test]
fn flash_attn_varlen_equals_flash_attn_per_sequence_and_reads_views() -> candle_core::Result<()> {
    // Equal lengths: varlen over the packed batch is flash_attn over [batch, seq, ...].
    let (b, s, hq, hkv, d) = (3, 17, 4, 2, 64);
    let q = uniform([b, s, hq, d], 1.0, 1, DType::F16, &CPU)?;
    let k = uniform([b, s, hkv, d], 1.0, 2, DType::F16, &CPU)?;
    let v = uniform([b, s, hkv, d], 1.0, 3, DType::F16, &CPU)?;
    let cu = Tensor::new(cumulative(&[s; 3]).as_slice(), &CPU)?;
    let dense = flash_attn(&q, &k, &v, 0.125, true)?;
    let packed = |t: &Tensor| t.flatten(0, 1);
    let o = flash_attn_varlen(
        &packed(&q)?,
        &packed(&k)?,
        &packed(&v)?,
        &cu,
        &cu,
        s,
        s,
        0.125,
        true,
    )?;
    assert_eq!(values(&o)?, values(&dense)?);
    // A head-major copy seen as [tokens, heads, dim], and K/V cut from one packed KV buffer.
    let qt = packed(&q)?.transpose(0, 1)?.contiguous()?.transpose(0, 1)?;
    let kv = Tensor::cat(&[packed(&k)?, packed(&v)?], 1)?; // [tokens, 2 * hkv, d]
    let (kn, vn) = (kv.narrow(1, 0, hkv)?, kv.narrow(1, hkv, hkv)?);
    assert!(!qt.is_contiguous() && !kn.is_contiguous() && !vn.is_contiguous());
    let ov = flash_attn_varlen(&qt, &kn, &vn, &cu, &cu, s, s, 0.125, true)?;
    assert_eq!(values(&ov)?, values(&o)?);
    Ok(())
}
