//! Prefill with `flash_attn`, then decode from an `Fp8KvCache`, checking each step against
//! the f32 reference over the same (dequantized) cache. Runs on GPU 0 when built with
//! `--features cuda`, on the CPU otherwise.
//!
//! `cargo run -p fp8-sdpa-candle --example decode [--features cuda]`

use candle_core::{DType, Device, Result, Tensor};
use fp8_sdpa_candle::{flash_attn, reference, Fp8KvCache, Fp8KvCacheConfig};

fn main() -> Result<()> {
    #[cfg(feature = "cuda")]
    let dev = Device::new_cuda(0)?;
    #[cfg(not(feature = "cuda"))]
    let dev = Device::Cpu;
    let (batch, heads_q, heads_kv, dim, prompt, steps) = (2, 16, 4, 128, 300, 8);
    let scale = 1.0 / (dim as f32).sqrt();
    let randn = |s: usize, h: usize| -> Result<Tensor> {
        Tensor::randn(0f32, 1., (batch, s, h, dim), &dev)?.to_dtype(DType::BF16)
    };

    let (q, k, v) = (
        randn(prompt, heads_q)?,
        randn(prompt, heads_kv)?,
        randn(prompt, heads_kv)?,
    );
    let o = flash_attn(&q, &k, &v, scale, true)?;
    let want = reference::attention(&q, &k, &v, scale, true)?;
    println!(
        "prefill {:?} on {:?}: max |err| {:.2e}",
        o.dims(),
        dev.location(),
        max_err(&o, &want)?
    );

    let mut cache = Fp8KvCache::new(Fp8KvCacheConfig::new(batch, heads_kv, dim, 1024), &dev)?;
    cache.append(&k, &v)?;
    for step in 0..steps {
        cache.append(&randn(1, heads_kv)?, &randn(1, heads_kv)?)?;
        let q = randn(1, heads_q)?;
        let o = cache.attend(&q, scale, true)?;
        let (kf, vf) = cache.dequantized_kv()?;
        let want = reference::attention(&q, &kf, &vf, scale, true)?;
        println!(
            "decode step {step}: len {}, max |err| {:.2e}",
            cache.len(),
            max_err(&o, &want)?
        );
    }
    Ok(())
}

fn max_err(a: &Tensor, b: &Tensor) -> Result<f32> {
    (a.to_dtype(DType::F32)? - b)?
        .abs()?
        .max_all()?
        .to_scalar::<f32>()
}
