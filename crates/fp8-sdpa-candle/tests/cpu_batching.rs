//! `Fp8PagedCache` and `flash_attn_paged` on the CPU: sequences joining and leaving with
//! their own lengths, pages reused, per-sequence descales, decode against the naive loop, and
//! the typed errors. Runs without a GPU.

mod common;

use candle_core::{DType, Device, Tensor};
use common::{err_msg, max_abs_diff, naive, uniform, values};
use fp8_sdpa_candle::{
    dequantize_e4m3, flash_attn_paged, quantize_e4m3, quantize_e4m3_with, Fp8PagedCache,
    Fp8PagedCacheConfig, SeqId,
};
use std::collections::BTreeMap;

const CPU: Device = Device::Cpu;

/// What a sequence must hold: its tokens so far, quantized under its first tokens' descales.
struct Expected {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    kd: Tensor,
    vd: Tensor,
}

impl Expected {
    fn kv(&self) -> candle_core::Result<(Tensor, Tensor)> {
        let k = Tensor::cat(&self.k, 1)?;
        let v = Tensor::cat(&self.v, 1)?;
        Ok((
            dequantize_e4m3(&quantize_e4m3_with(&k, &self.kd)?, &self.kd)?,
            dequantize_e4m3(&quantize_e4m3_with(&v, &self.vd)?, &self.vd)?,
        ))
    }
}

#[test]
fn sequences_join_and_leave_and_each_decodes_like_the_naive_loop() -> candle_core::Result<()> {
    let (hq, hkv, d, page) = (4, 2, 64, 16);
    let cfg = Fp8PagedCacheConfig::new(24, hkv, d).with_page_size(page);
    let mut cache = Fp8PagedCache::new(cfg, &CPU)?;
    let mut live: BTreeMap<SeqId, Expected> = BTreeMap::new();
    let mut seed = 1u64;
    let mut tokens = |n: usize, scale: f32| {
        seed += 2;
        Ok::<_, candle_core::Error>((
            uniform([1, n, hkv, d], scale, seed, DType::F16, &CPU)?,
            uniform([1, n, hkv, d], scale, seed + 1, DType::F16, &CPU)?,
        ))
    };
    // Each step: maybe a new sequence joins (prompts of 1..=40 tokens, each its own scale, so
    // the descales differ per sequence), maybe the oldest leaves, every live one decodes 1-3
    // tokens, then all of them attend as one batch.
    for step in 0..12usize {
        if step % 3 == 0 || live.is_empty() {
            let n = 1 + (step * 13) % 40;
            let (k, v) = tokens(n, 0.5 + step as f32)?;
            let id = cache.add(&k, &v)?;
            let kd = quantize_e4m3(&k)?.1;
            let vd = quantize_e4m3(&v)?.1;
            assert_eq!(
                cache.pages_of(id)?.1.to_vec2::<f32>()?,
                kd.to_vec2::<f32>()?
            );
            live.insert(
                id,
                Expected {
                    k: vec![k],
                    v: vec![v],
                    kd,
                    vd,
                },
            );
        }
        if step % 4 == 3 {
            let oldest = *live.keys().next().unwrap();
            live.remove(&oldest);
            cache.remove(oldest)?;
            assert!(cache.len(oldest).is_err(), "a removed sequence is gone");
        }
        for (i, (&id, e)) in live.iter_mut().enumerate() {
            let (k, v) = tokens(1 + (step + i) % 3, 1.0)?;
            cache.append(id, &k, &v)?;
            e.k.push(k);
            e.v.push(v);
        }
        // Pages: each sequence holds ceil(len / page), none shared, the rest free.
        let mut held = Vec::new();
        for (&id, e) in &live {
            let len = e.kv()?.0.dim(1)?;
            assert_eq!(cache.len(id)?, len);
            let pages = cache.pages_of(id)?.0;
            assert_eq!(pages.len(), len.div_ceil(page));
            held.extend_from_slice(pages);
            let (ck, cv) = cache.dequantized_kv(id)?;
            let (ek, ev) = e.kv()?;
            assert_eq!(values(&ck)?, values(&ek)?, "step {step}: K of {id:?}");
            assert_eq!(values(&cv)?, values(&ev)?, "step {step}: V of {id:?}");
        }
        let count = held.len();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), count, "step {step}: a page is held twice");
        assert_eq!(cache.free_pages() + count, 24);
        // One batch over every live sequence, in reverse order (any order is a batch).
        let ids: Vec<SeqId> = live.keys().rev().copied().collect();
        let q = uniform(
            [ids.len(), 2, hq, d],
            2.0,
            500 + step as u64,
            DType::F16,
            &CPU,
        )?;
        let o = cache.attend(&ids, &q, 0.125, true)?;
        assert_eq!((o.dims(), o.dtype()), (q.dims(), DType::F16));
        for (i, id) in ids.iter().enumerate() {
            let (k, v) = live[id].kv()?;
            let qi = q.narrow(0, i, 1)?;
            let err = max_abs_diff(
                &values(&o.narrow(0, i, 1)?)?,
                &naive(&qi, &k, &v, 0.125, true)?,
            );
            // The output is fp16: half an ulp of the largest |V| (2^-11 relative), twice over.
            let vmax = v.abs()?.max_all()?.to_scalar::<f32>()? as f64;
            assert!(
                err <= 1e-3 * vmax.max(1.0),
                "step {step}, {id:?}: err {err}, max |v| {vmax}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_full_pool_refuses_and_leaves_the_cache_unchanged() -> candle_core::Result<()> {
    let (hkv, d) = (1, 64);
    let mut cache =
        Fp8PagedCache::new(Fp8PagedCacheConfig::new(3, hkv, d).with_page_size(16), &CPU)?;
    let t = |n| uniform([1, n, hkv, d], 1.0, n as u64, DType::BF16, &CPU);
    let a = cache.add(&t(40)?, &t(40)?)?; // 3 pages
    assert_eq!(cache.free_pages(), 0);
    let before = values(&cache.dequantized_kv(a)?.0)?;
    let e = err_msg(cache.append(a, &t(9)?, &t(9)?));
    assert!(e.contains("1 more pages are needed but 0 are free"), "{e}");
    let e = err_msg(cache.add(&t(1)?, &t(1)?));
    assert!(e.contains("are free"), "{e}");
    assert_eq!(
        (cache.len(a)?, cache.sequences(), cache.free_pages()),
        (40, vec![a], 0)
    );
    assert_eq!(values(&cache.dequantized_kv(a)?.0)?, before);
    // Filling the last page's free slots needs no page.
    cache.append(a, &t(8)?, &t(8)?)?;
    assert_eq!(cache.len(a)?, 48);
    cache.remove(a)?;
    assert_eq!(cache.free_pages(), 3);
    let b = cache.add(&t(33)?, &t(33)?)?;
    assert_ne!(a, b, "ids are not reused");
    Ok(())
}

#[test]
fn calibrated_descales_are_used_and_bad_calls_are_refused() -> candle_core::Result<()> {
    let (hkv, d) = (2, 64);
    let mut cache = Fp8PagedCache::new(Fp8PagedCacheConfig::new(4, hkv, d), &CPU)?;
    let k = uniform([1, 5, hkv, d], 1.0, 7, DType::F16, &CPU)?;
    let ds = Tensor::new(&[0.5f32 / 448.0, 0.25 / 448.0], &CPU)?;
    let id = cache.add_with_descales(&k, &k, &ds, &ds)?;
    assert_eq!(
        cache.pages_of(id)?.1.to_vec2::<f32>()?,
        vec![vec![0.5 / 448.0, 0.25 / 448.0]]
    );
    // |k| up to 1 saturates at 0.5 and 0.25.
    let (ck, _) = cache.dequantized_kv(id)?;
    let m = ck.abs()?.max(1)?.max(2)?.flatten_all()?.to_vec1::<f32>()?;
    assert_eq!(m, vec![0.5, 0.25]);
    let bad = |r: candle_core::Result<SeqId>, want: &str| {
        let e = err_msg(r);
        assert!(e.contains(want), "{e}");
    };
    bad(
        cache.add(&uniform([2, 5, hkv, d], 1.0, 1, DType::F16, &CPU)?, &k),
        "[1, tokens, heads_kv, head_dim]",
    );
    bad(
        cache.add(&k.to_dtype(DType::F32)?, &k.to_dtype(DType::F32)?),
        "F16 or BF16",
    );
    bad(
        cache.add_with_descales(&k, &k, &Tensor::new(&[0f32, 1.0], &CPU)?, &ds),
        "finite and > 0",
    );
    let q = uniform([1, 1, 4, d], 1.0, 3, DType::F16, &CPU)?;
    let e = err_msg(cache.attend(&[id, id], &q, 0.125, false));
    assert!(
        e.contains("[seqs, seq_q, heads_q, head_dim] = [2, _, _, 64]"),
        "{e}"
    );
    cache.remove(id)?;
    let e = err_msg(cache.attend(&[id], &q, 0.125, false));
    assert!(e.contains("no sequence"), "{e}");
    let e = err_msg(Fp8PagedCache::new(
        Fp8PagedCacheConfig::new(4, hkv, 96),
        &CPU,
    ));
    assert!(e.contains("96"), "{e}");
    Ok(())
}

#[test]
fn flash_attn_paged_reads_the_callers_table_and_checks_it() -> candle_core::Result<()> {
    let (pages, page, hq, hkv, d) = (10, 16, 4, 2, 64);
    let kv = uniform([pages, page, hkv, d], 2.0, 11, DType::F16, &CPU)?;
    let vv = uniform([pages, page, hkv, d], 2.0, 12, DType::F16, &CPU)?;
    // Per sequence and head descales.
    let kd = Tensor::new(
        &[[2f32 / 448.0, 1.0 / 448.0], [4.0 / 448.0, 2.0 / 448.0]],
        &CPU,
    )?;
    let vd = Tensor::new(
        &[[2f32 / 448.0, 2.0 / 448.0], [2.0 / 448.0, 2.0 / 448.0]],
        &CPU,
    )?;
    let k0 = quantize_e4m3_with(&kv, &kd.get(0)?)?;
    let v0 = quantize_e4m3_with(&vv, &vd.get(0)?)?;
    let table = Tensor::new(&[[9i32, 2, 5], [4, 0, 0]], &CPU)?;
    let lens = Tensor::new(&[37i32, 0], &CPU)?; // the second sequence is empty
    let q = uniform([2, 3, hq, d], 2.0, 13, DType::F16, &CPU)?;
    let o = flash_attn_paged(&q, &k0, &v0, &table, &lens, &kd, &vd, 0.125, true)?;
    // Sequence 0: pages 9, 2, 5, its first 37 tokens, under its own descales.
    let rows = |pool: &Tensor, ds: &Tensor| -> candle_core::Result<Tensor> {
        let idx = Tensor::new(&[9u32, 2, 5], &CPU)?;
        let codes = pool
            .index_select(&idx, 0)?
            .reshape((1, 48, hkv, d))?
            .narrow(1, 0, 37)?;
        dequantize_e4m3(&codes, &ds.narrow(0, 0, 1)?)
    };
    let (k, v) = (rows(&k0, &kd)?, rows(&v0, &vd)?);
    let err = max_abs_diff(
        &values(&o.narrow(0, 0, 1)?)?,
        &naive(&q.narrow(0, 0, 1)?, &k, &v, 0.125, true)?,
    );
    assert!(err <= 2e-3, "err {err}");
    assert!(
        values(&o.narrow(0, 1, 1)?)?.iter().all(|x| *x == 0.0),
        "an empty sequence gives zeros"
    );
    // Bad tables and lengths are refused, naming the entry.
    let call = |t: &Tensor, l: &Tensor| flash_attn_paged(&q, &k0, &v0, t, l, &kd, &vd, 0.125, true);
    let e = err_msg(call(
        &Tensor::new(&[[9i32, 2, 10], [4, 0, 0]], &CPU)?,
        &lens,
    ));
    assert!(
        e.contains("block_table[0][2] is 10, outside the pools' 10 pages"),
        "{e}"
    );
    let e = err_msg(call(&table, &Tensor::new(&[49i32, 0], &CPU)?));
    assert!(e.contains("seqlens_k[0] is 49; it must be 0..=48"), "{e}");
    let e = err_msg(call(&table.to_dtype(DType::U32)?, &lens));
    assert!(e.contains("block_table must be contiguous I32"), "{e}");
    let e = err_msg(flash_attn_paged(
        &q, &kv, &vv, &table, &lens, &kd, &vd, 0.125, true,
    ));
    assert!(e.contains("k_pages must be F8E4M3"), "{e}");
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    /// `flash_attn_paged`'s checks of a caller's table and lengths, hostile values included
    /// (negative, past the pools, i32 extremes): never panics, and an accepted call had every
    /// length within its row's capacity and every page it reads inside the pools.
    #[test]
    fn flash_attn_paged_accepts_only_tables_inside_the_pools(
        pages in 1usize..6,
        max_pages in 1usize..4,
        entries in proptest::collection::vec(
            proptest::prop_oneof![3 => 0i32..6, 1 => proptest::prelude::any::<i32>()], 8),
        lens in proptest::collection::vec(
            proptest::prop_oneof![3 => 0i32..49, 1 => proptest::prelude::any::<i32>()], 2),
    ) {
        let (page, hkv, d) = (16, 1, 64);
        let ds = Tensor::new(&[2f32 / 448.0], &CPU)?;
        let kv = uniform([pages, page, hkv, d], 1.0, 21, DType::F16, &CPU)?;
        let pool = quantize_e4m3_with(&kv, &ds)?;
        let table: Vec<i32> = entries[..2 * max_pages].to_vec();
        let t = Tensor::from_vec(table.clone(), (2, max_pages), &CPU)?;
        let l = Tensor::from_vec(lens.clone(), 2, &CPU)?;
        let q = uniform([2, 1, 2, d], 1.0, 22, DType::F16, &CPU)?;
        if flash_attn_paged(&q, &pool, &pool, &t, &l, &ds, &ds, 0.125, true).is_ok() {
            for b in 0..2 {
                let len = lens[b];
                proptest::prop_assert!(len >= 0 && len as usize <= max_pages * page);
                let used = (len as usize).div_ceil(page);
                for &p in &table[b * max_pages..b * max_pages + used] {
                    proptest::prop_assert!(p >= 0 && (p as usize) < pages, "page {}", p);
                }
            }
        }
    }
}
