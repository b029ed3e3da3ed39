//! Every class of bad input is an error naming the problem (never a panic), checked on CPU
//! tensors: the checks run before any device work, the same on CPU and GPU.

mod common;

use candle_core::{DType, Device, Tensor};
use common::{err_msg, uniform, uniform3};
use fp8_sdpa_candle::{
    dequantize_e4m3, flash_attn, flash_attn_fp8kv, flash_attn_varlen, quantize_e4m3,
    quantize_e4m3_with, reference, Fp8KvCache, Fp8KvCacheConfig,
};

const CPU: Device = Device::Cpu;

fn t(shape: [usize; 4], dtype: DType) -> Tensor {
    uniform(shape, 1.0, 0, dtype, &CPU).unwrap()
}

fn assert_has(msg: String, want: &[&str]) {
    for w in want {
        assert!(msg.contains(w), "{msg:?} should contain {w:?}");
    }
}

#[test]
fn flash_attn_rejects_each_bad_input_with_the_fix() {
    let h = DType::F16;
    let (q, k, v) = (
        t([1, 4, 4, 64], h),
        t([1, 6, 2, 64], h),
        t([1, 6, 2, 64], h),
    );
    let fa = |q: &Tensor, k: &Tensor, v: &Tensor| err_msg(flash_attn(q, k, v, 0.1, false));
    assert_has(
        fa(&q.flatten(0, 1).unwrap(), &k, &v),
        &["flash_attn", "q must have rank 4", ".transpose(1, 2)"],
    );
    assert_has(fa(&t([1, 0, 4, 64], h), &k, &v), &["zero-length dim"]);
    assert_has(
        fa(&t([1, 4, 4, 64], DType::F32), &k, &v),
        &["q must be F16 or BF16", "to_dtype"],
    );
    assert_has(
        fa(&q, &t([1, 6, 2, 64], DType::BF16), &v),
        &["k is BF16 but must be F16"],
    );
    let e4m3 = t([1, 6, 2, 64], DType::F32)
        .to_dtype(DType::F8E4M3)
        .unwrap();
    assert_has(fa(&q, &e4m3, &e4m3), &["flash_attn_fp8kv"]);
    assert_has(
        fa(&q, &k, &t([1, 5, 2, 64], h)),
        &["k shape [1, 6, 2, 64] and v shape [1, 5, 2, 64] differ"],
    );
    assert_has(
        fa(&q, &t([2, 6, 2, 64], h), &t([2, 6, 2, 64], h)),
        &["q has batch 1 but k/v have batch 2"],
    );
    assert_has(
        fa(&q, &t([1, 6, 2, 128], h), &t([1, 6, 2, 128], h)),
        &["head_dim 64 but k/v have head_dim 128"],
    );
    assert_has(
        fa(
            &t([1, 4, 4, 32], h),
            &t([1, 6, 2, 32], h),
            &t([1, 6, 2, 32], h),
        ),
        &["head_dim 32 is not supported", "64, 128 or 256"],
    );
    assert_has(
        fa(&t([1, 4, 3, 64], h), &k, &v),
        &["multiple of heads of k/v (2)"],
    );
    // Layouts the kernels cannot read in place.
    let last_strided = t([1, 4, 64, 4], h).transpose(2, 3).unwrap(); // [1, 4, 4, 64], dim stride 4
    assert_has(
        fa(&last_strided, &k, &v),
        &["last dim must be contiguous", ".contiguous()"],
    );
    let odd_rows = t([1, 4, 4, 68], h).narrow(3, 0, 64).unwrap(); // head stride 136 bytes
    assert_has(
        fa(&odd_rows, &k, &v),
        &["heads stride is 68 elements (136 bytes)"],
    );
    let offset = t([1, 6, 2, 68], h)
        .flatten_all()
        .unwrap()
        .narrow(0, 4, 6 * 2 * 64)
        .unwrap()
        .reshape((1, 6, 2, 64))
        .unwrap(); // starts 8 bytes in
    assert_has(
        fa(&q, &offset, &v),
        &["k starts 4 elements into its storage"],
    );
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        assert_has(
            err_msg(flash_attn(&q, &k, &v, bad, true)),
            &["softmax_scale must be finite and > 0"],
        );
    }
}

#[test]
fn fp8kv_rejects_bad_kv_and_descales() {
    let q = t([2, 3, 4, 64], DType::BF16);
    let kv = t([2, 5, 2, 64], DType::F32)
        .to_dtype(DType::F8E4M3)
        .unwrap();
    let ds = Tensor::full(0.01f32, (2, 2), &CPU).unwrap();
    let run = |k: &Tensor, kd: &Tensor, vd: &Tensor| {
        err_msg(flash_attn_fp8kv(&q, k, k, kd, vd, 0.1, false))
    };
    assert_has(
        run(&t([2, 5, 2, 64], DType::BF16), &ds, &ds),
        &["k is BF16 but must be F8E4M3", "quantize_e4m3"],
    );
    assert_has(
        run(&kv, &ds.to_dtype(DType::F16).unwrap(), &ds),
        &["k_descale must be F32"],
    );
    assert_has(
        run(&kv, &Tensor::full(0.01f32, 3, &CPU).unwrap(), &ds),
        &[
            "k_descale has shape [3]",
            "[heads_kv] = [2]",
            "[batch, heads_kv] = [2, 2]",
        ],
    );
    assert_has(
        run(&kv, &ds, &ds.get(0).unwrap()),
        &["must have the same form"],
    );
    assert_has(
        run(
            &kv,
            &ds.t().unwrap().contiguous().unwrap().t().unwrap(),
            &ds,
        ),
        &["k_descale must be contiguous"],
    );
    for bad in [0.0f32, -0.5, f32::NAN, f32::INFINITY] {
        let vd = Tensor::new(&[[0.01f32, bad], [0.01, 0.01]], &CPU).unwrap();
        assert_has(run(&kv, &ds, &vd), &["v_descale[1] is", "finite and > 0"]);
    }
}

#[test]
fn codec_functions_reject_bad_input() {
    assert_has(
        err_msg(quantize_e4m3(&t([1, 2, 2, 64], DType::F32))),
        &["quantize_e4m3: x must be F16 or BF16"],
    );
    assert_has(
        err_msg(quantize_e4m3(
            &Tensor::zeros((2, 64), DType::F16, &CPU).unwrap(),
        )),
        &["x must have rank 4"],
    );
    let x = t([1, 2, 2, 64], DType::F16);
    assert_has(
        err_msg(quantize_e4m3_with(
            &x,
            &Tensor::full(1f32, 3, &CPU).unwrap(),
        )),
        &["descale has shape [3]"],
    );
    assert_has(
        err_msg(quantize_e4m3_with(
            &x,
            &Tensor::full(-1f32, 2, &CPU).unwrap(),
        )),
        &["descale[0] is -1"],
    );
    assert_has(
        err_msg(dequantize_e4m3(&x, &Tensor::full(1f32, 2, &CPU).unwrap())),
        &["codes must be F8E4M3"],
    );
    let q = t([1, 2, 3, 8], DType::F32);
    assert_has(
        err_msg(reference::attention(
            &q,
            &t([1, 2, 2, 8], DType::F32),
            &t([1, 2, 2, 8], DType::F32),
            1.0,
            false,
        )),
        &["multiple of heads of k/v"],
    );
    assert_has(
        err_msg(reference::attention(
            &q,
            &t([1, 2, 3, 8], DType::F32),
            &t([1, 3, 3, 8], DType::F32),
            1.0,
            false,
        )),
        &["do not fit"],
    );
}

#[test]
fn cache_rejects_bad_configs_and_calls() {
    let cfg = Fp8KvCacheConfig::new(2, 2, 64, 32);
    let with = |f: fn(&mut Fp8KvCacheConfig)| {
        let mut c = cfg;
        f(&mut c);
        err_msg(Fp8KvCache::new(c, &CPU))
    };
    assert_has(with(|c| c.batch = 0), &["must be >= 1"]);
    assert_has(with(|c| c.head_dim = 96), &["head_dim 96 is not supported"]);
    assert_has(with(|c| c.page_size = 8), &["page_size 8 must be 16..=256"]);
    assert_has(
        with(|c| c.headroom = 0.5),
        &["headroom must be finite and >= 1"],
    );
    for huge in [usize::MAX / 2, usize::MAX] {
        let mut c = cfg;
        c.max_seq_len = huge;
        assert_has(err_msg(Fp8KvCache::new(c, &CPU)), &["exceeds 2^31 tokens"]);
    }
    let per_head = Tensor::full(0.1f32, 2, &CPU).unwrap();
    assert_has(
        err_msg(Fp8KvCache::with_descales(cfg, &per_head, &per_head)),
        &["must be [batch, heads_kv] = [2, 2]"],
    );

    let mut cache = Fp8KvCache::new(cfg, &CPU).unwrap();
    let q = t([2, 1, 4, 64], DType::F16);
    assert_has(
        err_msg(cache.attend(&q, 0.1, true)),
        &["the cache is empty"],
    );
    assert_has(err_msg(cache.dequantized_kv()), &["the cache is empty"]);
    let kv = t([2, 3, 2, 64], DType::F16);
    assert_has(
        err_msg(cache.append(&t([2, 3, 4, 64], DType::F16), &kv).map(|_| 0)),
        &["k has shape [2, 3, 4, 64]", "[2, _, 2, 64]"],
    );
    assert_has(
        err_msg(cache.append(&kv, &t([2, 4, 2, 64], DType::F16)).map(|_| 0)),
        &["v has shape [2, 4, 2, 64]"],
    );
    assert_has(
        err_msg(
            cache
                .append(&kv.to_dtype(DType::F32).unwrap(), &kv)
                .map(|_| 0),
        ),
        &["k must be F16 or BF16"],
    );
    assert_has(
        err_msg(
            cache
                .append(
                    &t([2, 33, 2, 64], DType::F16),
                    &t([2, 33, 2, 64], DType::F16),
                )
                .map(|_| 0),
        ),
        &["would make 33 but the cache holds 32"],
    );
    assert!(
        cache.is_empty(),
        "a failed append leaves the cache unchanged"
    );
    cache.append(&kv, &kv).unwrap();
    assert_has(
        err_msg(cache.attend(&t([1, 1, 4, 64], DType::F16), 0.1, true)),
        &["[batch, seq_q, heads_q, head_dim] = [2, _, _, 64]"],
    );
    assert_has(
        err_msg(cache.attend(&t([2, 1, 3, 64], DType::F16), 0.1, true)),
        &["multiple of heads of k/v (2)"],
    );
    assert_has(err_msg(cache.attend(&q, -1.0, true)), &["softmax_scale"]);
    assert_has(
        err_msg(cache.attend(&q.to_dtype(DType::F32).unwrap(), 0.1, true)),
        &["q must be F16 or BF16"],
    );
}

#[test]
fn flash_attn_varlen_rejects_bad_tensors_and_offsets() {
    let h = DType::F16;
    let t3 = |shape: [usize; 3], dtype| uniform3(shape, 1.0, 0, dtype, &CPU).unwrap();
    // Two sequences: 3 queries over 4 keys, 2 over 5.
    let (q, k) = (t3([5, 4, 64], h), t3([9, 2, 64], h));
    let u32s = |v: &[u32]| Tensor::new(v, &CPU).unwrap();
    let (sq, sk) = (u32s(&[0, 3, 5]), u32s(&[0, 4, 9]));
    let call = |q: &Tensor, k: &Tensor, v: &Tensor, sq: &Tensor, sk: &Tensor, mq, mk| {
        err_msg(flash_attn_varlen(q, k, v, sq, sk, mq, mk, 0.125, true))
    };
    let fa = |sq: &Tensor, sk: &Tensor| call(&q, &k, &k, sq, sk, 3, 5);
    assert!(flash_attn_varlen(&q, &k, &k, &sq, &sk, 3, 5, 0.125, true).is_ok());

    // Tensors.
    assert_has(
        call(&q.unsqueeze(0).unwrap(), &k, &k, &sq, &sk, 3, 5),
        &[
            "flash_attn_varlen",
            "q must have rank 3 [total_tokens, heads, head_dim]",
            ".flatten(0, 1)",
        ],
    );
    assert_has(
        call(&t3([5, 4, 64], DType::F32), &k, &k, &sq, &sk, 3, 5),
        &["q must be F16 or BF16"],
    );
    assert_has(
        call(&q, &t3([9, 2, 64], DType::BF16), &k, &sq, &sk, 3, 5),
        &["k is BF16 but must be F16"],
    );
    assert_has(
        call(&q, &k, &t3([8, 2, 64], h), &sq, &sk, 3, 5),
        &["k shape [9, 2, 64] and v shape [8, 2, 64] differ"],
    );
    assert_has(
        call(
            &t3([5, 4, 80], h),
            &t3([9, 2, 80], h),
            &t3([9, 2, 80], h),
            &sq,
            &sk,
            3,
            5,
        ),
        &["head_dim 80 is not supported"],
    );
    assert_has(
        call(&t3([5, 3, 64], h), &k, &k, &sq, &sk, 3, 5),
        &["heads of q (3) must be a multiple of heads of k/v (2)"],
    );
    let strided = t3([5, 4, 128], h)
        .narrow(2, 0, 64)
        .unwrap()
        .narrow(0, 0, 5)
        .unwrap();
    assert_has(
        call(
            &strided
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
                .transpose(1, 2)
                .unwrap(),
            &k,
            &k,
            &sq,
            &sk,
            3,
            5,
        ),
        &["q's last dim must be contiguous"],
    );

    // Offsets: dtype, rank, count, layout.
    for bad in [
        sq.to_dtype(DType::I64).unwrap(),
        sq.to_dtype(DType::U8).unwrap(),
        sq.to_dtype(DType::F32).unwrap(),
    ] {
        assert_has(
            fa(&bad, &sk),
            &["seqlens_q must be U32", "to_dtype(DType::U32)"],
        );
    }
    assert_has(
        fa(&sq, &sk.to_dtype(DType::I64).unwrap()),
        &["seqlens_k must be U32"],
    );
    assert_has(
        fa(&sq.unsqueeze(0).unwrap(), &sk),
        &["seqlens_q must have rank 1 [batch + 1]"],
    );
    assert_has(
        fa(&u32s(&[0]), &u32s(&[0])),
        &["seqlens_q holds 1 offsets", "batch + 1 >= 2"],
    );
    assert_has(
        fa(&sq, &u32s(&[0, 9])),
        &["seqlens_q holds 3 offsets but seqlens_k 2"],
    );
    let every_other = u32s(&[0, 7, 3, 7, 5, 7])
        .reshape((3, 2))
        .unwrap()
        .narrow(1, 0, 1)
        .unwrap()
        .squeeze(1)
        .unwrap();
    assert!(!every_other.is_contiguous());
    assert_has(fa(&every_other, &sk), &["seqlens_q must be contiguous"]);

    // Offsets: values.
    assert_has(
        fa(&u32s(&[1, 3, 5]), &sk),
        &["seqlens_q[0] = 1", "start at 0"],
    );
    assert_has(
        fa(&sq, &u32s(&[0, 5, 4])),
        &["seqlens_k[2] = 4 < seqlens_k[1] = 5", "must not decrease"],
    );
    assert_has(
        fa(&u32s(&[0, 3, 4]), &sk),
        &["seqlens_q[2] = 4 but Q holds 5 tokens", "last offset"],
    );
    assert_has(
        call(&q, &k, &k, &sq, &u32s(&[0, 4, 12]), 3, 9),
        &["seqlens_k[2] = 12 but K holds 9 tokens"],
    );
    assert_has(
        call(&q, &k, &k, &sq, &sk, 2, 5),
        &["sequence 0 has 3 tokens", "more than max_seqlen_q = 2"],
    );
    assert_has(
        call(&q, &k, &k, &sq, &sk, 3, 4),
        &["sequence 1 has 5 tokens", "max_seqlen_k = 4"],
    );
    // Beyond i32 (the kernels' offsets): read as negative, so out of order.
    assert_has(
        fa(&sq, &u32s(&[0, 3_000_000_000, 9])),
        &["seqlens_k[1] = -1294967296", "must not decrease"],
    );
    // The stated maxima.
    assert_has(
        call(&q, &k, &k, &sq, &sk, 0, 5),
        &["max_seqlen_q = 0 must be 1..=5"],
    );
    assert_has(
        call(&q, &k, &k, &sq, &sk, 3, 10),
        &["max_seqlen_k = 10 exceeds k's 9 tokens"],
    );
    assert_has(
        call(&q, &k, &k, &sq, &sk, 6, 5),
        &["max_seqlen_q = 6 must be 1..=5"],
    );
    let msg = err_msg(flash_attn_varlen(
        &q,
        &k,
        &k,
        &sq,
        &sk,
        3,
        5,
        f32::NAN,
        true,
    ));
    assert_has(msg, &["softmax_scale must be finite and > 0"]);

    // The reference checks the same way.
    assert_has(
        err_msg(reference::attention_varlen(
            &q,
            &k,
            &k,
            &u32s(&[0, 6, 5]),
            &sk,
            0.1,
            true,
        )),
        &[
            "reference::attention_varlen",
            "seqlens_q[2] = 5 < seqlens_q[1] = 6",
        ],
    );
}
