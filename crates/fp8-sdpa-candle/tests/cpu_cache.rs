//! `Fp8KvCache` on the CPU: page bookkeeping, descale policy and decode against the naive
//! loop. Runs without a GPU.

mod common;

use candle_core::{DType, Device, Tensor};
use common::{max_abs_diff, naive, uniform, values};
use fp8_sdpa_candle::{
    dequantize_e4m3, quantize_e4m3, quantize_e4m3_with, Fp8KvCache, Fp8KvCacheConfig,
};

const CPU: Device = Device::Cpu;

#[test]
fn appends_land_in_order_and_decode_matches_the_naive_loop() -> candle_core::Result<()> {
    // 16-token pages, so the prefill and the steps cross page boundaries.
    let (b, hq, hkv, d) = (2, 4, 2, 64);
    let mut cfg = Fp8KvCacheConfig::new(b, hkv, d, 60);
    cfg.page_size = 16;
    let mut cache = Fp8KvCache::new(cfg, &CPU)?;
    assert_eq!(cache.pages().0.dims(), &[2 * 4, 16, hkv, d]); // ceil(60 / 16) = 4 pages each
    assert_eq!(
        cache.block_table().to_vec2::<i32>()?,
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
    );
    let k0 = uniform([b, 21, hkv, d], 2.0, 1, DType::F16, &CPU)?;
    let v0 = uniform([b, 21, hkv, d], 2.0, 2, DType::F16, &CPU)?;
    cache.append(&k0, &v0)?;
    let (kd, vd) = cache
        .descales()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    // The prefill sets the descales exactly as quantize_e4m3 does.
    assert_eq!(
        kd.to_vec2::<f32>()?,
        quantize_e4m3(&k0)?.1.to_vec2::<f32>()?
    );
    let (mut ks, mut vs) = (vec![k0], vec![v0]);
    for step in 0..14u64 {
        let n = 1 + (step as usize % 3);
        let k = uniform([b, n, hkv, d], 2.0, 10 + 2 * step, DType::F16, &CPU)?;
        let v = uniform([b, n, hkv, d], 2.0, 11 + 2 * step, DType::F16, &CPU)?;
        cache.append(&k, &v)?;
        ks.push(k);
        vs.push(v);
        // What the cache must hold: every token so far under the prefill's descales.
        let kf = dequantize_e4m3(&quantize_e4m3_with(&Tensor::cat(&ks, 1)?, &kd)?, &kd)?;
        let vf = dequantize_e4m3(&quantize_e4m3_with(&Tensor::cat(&vs, 1)?, &vd)?, &vd)?;
        let (ck, cv) = cache.dequantized_kv()?;
        assert_eq!(values(&ck)?, values(&kf)?, "step {step}: K pages");
        assert_eq!(values(&cv)?, values(&vf)?, "step {step}: V pages");
        assert_eq!(cache.len(), kf.dim(1)?);
        let q = uniform([b, 2, hq, d], 2.0, 100 + step, DType::F16, &CPU)?;
        let o = cache.attend(&q, 0.125, true)?;
        assert_eq!((o.dims(), o.dtype()), (q.dims(), DType::F16));
        let err = max_abs_diff(&values(&o)?, &naive(&q, &kf, &vf, 0.125, true)?);
        assert!(err <= 2e-3, "step {step}: err {err}");
    }
    Ok(())
}

#[test]
fn later_appends_saturate_under_the_first_descales_unless_headroom() -> candle_core::Result<()> {
    let (b, h, d) = (1, 1, 64);
    let ones = |x: f32| Tensor::full(x, (b, 1, h, d), &CPU)?.to_dtype(DType::BF16);
    let mut cache = Fp8KvCache::new(Fp8KvCacheConfig::new(b, h, d, 8), &CPU)?;
    cache.append(&ones(1.0)?, &ones(1.0)?)?;
    cache.append(&ones(4.0)?, &ones(-4.0)?)?; // 4x the prefill's amax
    let (k, v) = cache.dequantized_kv()?;
    assert_eq!(values(&k)?[64], 1.0, "clamped to 448 * (1 / 448)");
    assert_eq!(values(&v)?[64], -1.0);

    let mut cfg = Fp8KvCacheConfig::new(b, h, d, 8);
    cfg.headroom = 4.0;
    let mut cache = Fp8KvCache::new(cfg, &CPU)?;
    cache.append(&ones(1.0)?, &ones(1.0)?)?;
    assert_eq!(
        cache.descales().unwrap().0.to_vec2::<f32>()?,
        vec![vec![4.0 / 448.0]]
    );
    cache.append(&ones(4.0)?, &ones(-4.0)?)?;
    let (k, v) = cache.dequantized_kv()?;
    assert_eq!((values(&k)?[0], values(&k)?[64]), (1.0, 4.0));
    assert_eq!(values(&v)?[64], -4.0);
    Ok(())
}

#[test]
fn reset_keeps_calibrated_descales_and_drops_derived_ones() -> candle_core::Result<()> {
    let x = uniform([1, 4, 2, 64], 1.0, 3, DType::F16, &CPU)?;
    let mut cache = Fp8KvCache::new(Fp8KvCacheConfig::new(1, 2, 64, 8), &CPU)?;
    cache.append(&x, &x)?;
    cache.reset()?;
    assert!(cache.is_empty() && cache.descales().is_none());
    cache.append(&x, &x)?; // may fill again from the start
    assert_eq!(cache.len(), 4);

    let ds = Tensor::full(0.01f32, (1, 2), &CPU)?;
    let mut cache = Fp8KvCache::with_descales(Fp8KvCacheConfig::new(1, 2, 64, 8), &ds, &ds)?;
    cache.append(&x, &x)?;
    cache.reset()?;
    assert_eq!(
        cache.descales().unwrap().0.to_vec2::<f32>()?,
        vec![vec![0.01, 0.01]]
    );
    cache.append(&x, &x)?;
    let want = dequantize_e4m3(&quantize_e4m3_with(&x, &ds)?, &ds)?;
    assert_eq!(values(&cache.dequantized_kv()?.0)?, values(&want)?);
    Ok(())
}
