//! GPU tests of variable-length batches (`Device::attention_varlen`, and the decode family's
//! `Device::paged_attention_varlen`): packed sequences against the float64 CPU reference,
//! output and LSE poisoned before each run, inputs and offsets checked unchanged. Run on the device machine with `--include-ignored`; without a GPU they
//! fail, never skip.

use fp8_sdpa::kernels::registry;
use fp8_sdpa::runtime::varlen::reads_varlen;
use fp8_sdpa::runtime::{
    AttentionVarlen, CallOptions, Device, IdxRef, KernelChoice, PagedAttentionVarlen, PagedKv,
    TensorMut, TensorRef, VecMut,
};
use fp8_sdpa::{AttnParams, DType, Error, Family, KernelSpec, Precision, VarlenShape};
use sdpa_harness::cases::{
    decode_varlen_verify_shapes, varlen_verify_shapes, HostVarlenCase, VarlenCaseSpec,
};
use sdpa_harness::harness::{judge, DevicePagedVarlenCase, DeviceVarlenCase};
use sdpa_harness::inputs::Distribution;
use std::collections::BTreeSet;
use std::sync::Arc;

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

fn case(
    precision: Precision,
    lens: &[(usize, usize)],
    heads: (usize, usize),
    head_dim: usize,
    causal: bool,
    seed: u64,
) -> HostVarlenCase {
    HostVarlenCase::build(VarlenCaseSpec {
        shape: VarlenShape::from_lens(lens, heads.0, heads.1, head_dim),
        precision,
        causal,
        dist: Distribution::Normal,
        seed,
        // Alternate per-head and per-sequence descales (FP8 inputs only).
        per_sequence_descales: seed % 2 == 1,
    })
    .unwrap()
}

/// Runs `host` with `kernel` and asserts it matches the float64 reference with its inputs
/// and offsets unchanged; returns the spec that ran.
fn check(
    dev: &Device,
    stream: &Arc<cudarc::driver::CudaStream>,
    host: &HostVarlenCase,
    kernel: KernelChoice,
) -> KernelSpec {
    let params = AttnParams::default_for(host.spec.shape.head_dim, host.spec.causal);
    let r = host.reference_dequantized(params.scale as f64).unwrap();
    let mut d = DeviceVarlenCase::upload(stream, host).unwrap();
    let opts = CallOptions::default().with_kernel(kernel);
    let out = d.run(dev, stream, host, params, opts).unwrap();
    let unchanged = d.inputs_unchanged(stream, host).unwrap();
    let v = judge(host.spec.precision, &out, &r, None, false, unchanged).unwrap();
    let spec = out.launched.spec;
    assert!(
        v.failures.is_empty(),
        "{} {:?}: {:?}",
        spec.key(),
        host.spec,
        v.failures
    );
    spec
}

/// Runs `host` over a paged cache (pages of `page_size` tokens) with `kernel` and asserts it
/// matches the float64 reference with its inputs, offsets and table unchanged; returns the
/// spec that ran.
fn check_paged(
    dev: &Device,
    stream: &Arc<cudarc::driver::CudaStream>,
    host: &HostVarlenCase,
    page_size: usize,
    kernel: KernelChoice,
) -> KernelSpec {
    let params = AttnParams::default_for(host.spec.shape.head_dim, host.spec.causal);
    let r = host.reference_dequantized(params.scale as f64).unwrap();
    let mut d = DevicePagedVarlenCase::upload(stream, host, page_size, host.spec.seed).unwrap();
    let opts = CallOptions::default().with_kernel(kernel);
    let out = d.run(dev, stream, host, params, opts).unwrap();
    let unchanged = d.inputs_unchanged(stream, host).unwrap();
    let v = judge(host.spec.precision, &out, &r, None, false, unchanged).unwrap();
    let spec = out.launched.spec;
    assert!(
        v.failures.is_empty(),
        "{} paged ({page_size}-token pages) {:?}: {:?}",
        spec.key(),
        host.spec,
        v.failures
    );
    spec
}

/// The precisions the decode family serves.
const DECODE_PRECISIONS: [Precision; 4] = [
    Precision::F16,
    Precision::Bf16,
    Precision::Fp8KvF16,
    Precision::Fp8KvBf16,
];

/// Decode-shaped varlen batches (1 to 16 queries per sequence, different counts in one batch,
/// caches of 1 to 4097 keys, GQA 4 and 8, a sequence without queries and one without keys)
/// through dispatch, every decode precision and head dim, causal and not: the decode family,
/// contiguous K/V.
#[test]
#[ignore = "needs a GPU"]
fn decode_varlen_matches_the_cpu_reference() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let shapes = decode_varlen_verify_shapes(true);
    let mut n = 0u64;
    for p in DECODE_PRECISIONS {
        for d in [64, 128, 256] {
            for causal in [false, true] {
                let (lens, hq, hkv) = &shapes[(n % shapes.len() as u64) as usize];
                let host = case(p, lens, (*hq, *hkv), d, causal, 300 + n);
                let spec = check(&dev, &stream, &host, KernelChoice::Auto);
                assert_eq!(spec.variant.family, Family::Decode, "{}", spec.key());
                n += 1;
            }
        }
    }
}

/// The same batches with their keys in a paged cache (pages of 16, 48 and 256 tokens,
/// scattered over the pool) through `paged_attention_varlen`.
#[test]
#[ignore = "needs a GPU"]
fn paged_varlen_matches_the_cpu_reference() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let shapes = decode_varlen_verify_shapes(true);
    let mut n = 0u64;
    for p in DECODE_PRECISIONS {
        for d in [64, 128, 256] {
            for causal in [false, true] {
                let (lens, hq, hkv) = &shapes[(n % shapes.len() as u64) as usize];
                let host = case(p, lens, (*hq, *hkv), d, causal, 400 + n);
                let page = [16, 48, 256][(n % 3) as usize];
                let spec = check_paged(&dev, &stream, &host, page, KernelChoice::Auto);
                assert_eq!(spec.variant.family, Family::Decode, "{}", spec.key());
                n += 1;
            }
        }
    }
}

/// Every registered decode variant (one problem class each, causal where registered so) on a
/// ragged decode-shaped batch, contiguous and paged, and on a prefill-shaped one (many query
/// rows per kv head: the decode kernel reads any batch it is given).
#[test]
#[ignore = "needs a GPU"]
fn every_decode_variant_reads_varlen_batches() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let decode_lens = [(1, 1500), (16, 33), (0, 7), (4, 1), (2, 0), (7, 999)];
    let prefill_lens = [(70, 50), (1, 200), (33, 33), (0, 9)];
    let mut seen = BTreeSet::new();
    let mut n = 0u64;
    for spec in registry::registered_for(dev.info().arch) {
        if spec.variant.family != Family::Decode || !seen.insert((spec.variant.key(), spec.causal))
        {
            continue;
        }
        let d = spec.head_dim as usize;
        let host = case(
            spec.precision,
            &decode_lens,
            (32, 8),
            d,
            spec.causal,
            500 + n,
        );
        let kernel = KernelChoice::Variant(spec.variant);
        assert_eq!(check(&dev, &stream, &host, kernel), spec);
        assert_eq!(check_paged(&dev, &stream, &host, 16, kernel), spec);
        let host = case(
            spec.precision,
            &prefill_lens,
            (8, 2),
            d,
            spec.causal,
            600 + n,
        );
        assert_eq!(check(&dev, &stream, &host, kernel), spec);
        n += 1;
    }
    assert!(n >= 8, "only {n} decode variant classes ran");
}

/// Every precision and head dim through dispatch, causal and not, on the verify shapes (many
/// short sequences, a few long ones, lengths 0 and 1, GQA, MHA; none is decode-shaped): the
/// family `registry::varlen_default` names (Hopper for 16-bit D64/D128 on sm_90a, else portable).
#[test]
#[ignore = "needs a GPU"]
fn varlen_matches_the_cpu_reference_through_dispatch() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let shapes = varlen_verify_shapes(true);
    let mut n = 0u64;
    for p in Precision::ALL {
        for d in [64, 128, 256] {
            for causal in [false, true] {
                let (lens, hq, hkv) = &shapes[(n % shapes.len() as u64) as usize];
                let host = case(p, lens, (*hq, *hkv), d, causal, n);
                let spec = check(&dev, &stream, &host, KernelChoice::Auto);
                assert_eq!(
                    spec.variant,
                    registry::varlen_default(dev.info().arch, p, d as u32, causal),
                    "{}",
                    spec.key()
                );
                n += 1;
            }
        }
    }
}

/// One problem class of every registered variant that reads varlen batches (portable: each
/// knob: paired rows, fragment decode, split decode, decoupled sync, scalar P·V, plain
/// loads; Hopper: every tile, 16-bit and full FP8), on a ragged GQA batch, causal where the
/// variant is registered causal.
#[test]
#[ignore = "needs a GPU"]
fn every_variant_that_reads_varlen_reads_varlen_batches() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let lens = [
        (0, 9),
        (1, 1),
        (1, 200),
        (70, 50),
        (33, 33),
        (2, 0),
        (130, 257),
    ];
    let mut seen = BTreeSet::new();
    let mut n = 0u64;
    for spec in registry::registered_for(dev.info().arch) {
        if !reads_varlen(&spec.variant) || !seen.insert((spec.variant.key(), spec.causal)) {
            continue;
        }
        let host = case(
            spec.precision,
            &lens,
            (8, 2),
            spec.head_dim as usize,
            spec.causal,
            100 + n,
        );
        let ran = check(&dev, &stream, &host, KernelChoice::Variant(spec.variant));
        assert_eq!(ran, spec);
        n += 1;
    }
    assert!(n >= 20, "only {n} variant classes ran");
}

/// Other families (the reference) and the portable stream are refused with a typed error
/// before launch.
#[test]
#[ignore = "needs a GPU"]
fn other_families_are_unsupported_for_varlen() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let host = case(Precision::F16, &[(3, 5), (1, 1)], (4, 2), 128, true, 7);
    let params = AttnParams::default_for(128, true);
    let mut d = DeviceVarlenCase::upload(&stream, &host).unwrap();
    let refused = [
        fp8_sdpa::Variant::reference(),
        "portable.m256.n128.w8.s3.b1.cthpedx".parse().unwrap(),
    ];
    for v in refused {
        let opts = CallOptions::default().with_kernel(KernelChoice::Variant(v));
        match d.run(&dev, &stream, &host, params, opts) {
            Err(Error::Unsupported(m)) => {
                assert!(
                    m.contains("portable, Hopper and decode families only"),
                    "{m}"
                )
            }
            other => panic!("{}: expected Unsupported, got {other:?}", v.key()),
        }
    }
}

const GUARD: usize = 256;

/// Waits for the call, then asserts that the guard zones around O (0x5a5a) and the LSE (7.0)
/// are as they were uploaded.
fn assert_guards_intact(
    stream: &Arc<cudarc::driver::CudaStream>,
    o: &cudarc::driver::CudaSlice<u16>,
    lse: &cudarc::driver::CudaSlice<f32>,
    what: &str,
) {
    stream.synchronize().expect("the kernel stays in bounds");
    let oh = stream.clone_dtoh(o).unwrap();
    let lh = stream.clone_dtoh(lse).unwrap();
    let n = oh.len();
    assert!(
        oh[..GUARD]
            .iter()
            .chain(&oh[n - GUARD..])
            .all(|&x| x == 0x5a5a),
        "O's guard zones were written ({what})"
    );
    let n = lh.len();
    assert!(
        lh[..GUARD]
            .iter()
            .chain(&lh[n - GUARD..])
            .all(|&x| x == 7.0),
        "the LSE's guard zones were written ({what})"
    );
}

/// Bad offsets are typed errors when checked (the default), and with the check off the
/// kernel clamps them to the packed tensors: the call runs, and nothing outside O and the LSE
/// is written (guard zones around both stay as they were). Run it under compute-sanitizer to
/// see that nothing outside Q, K and V is read either.
#[test]
#[ignore = "needs a GPU"]
fn bad_offsets_are_refused_or_clamped_in_bounds() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let st: &cudarc::driver::CudaStream = &stream;
    let (hq, hkv, d) = (4usize, 2usize, 64usize);
    let (tq, tk) = (40usize, 60usize);
    let q = stream.alloc_zeros::<u16>(tq * hq * d).unwrap();
    let k = stream.alloc_zeros::<u16>(tk * hkv * d).unwrap();
    let mut o = stream
        .clone_htod(&vec![0x5a5au16; tq * hq * d + 2 * GUARD])
        .unwrap();
    let mut lse = stream
        .clone_htod(&vec![7.0f32; hq * tq + 2 * GUARD])
        .unwrap();
    let bad: [(&[i32], &[i32], &str); 5] = [
        (&[0, 10, 40], &[0, 30, 60], ""),
        (&[1, 10, 40], &[0, 30, 60], "cu_seqlens_q[0] = 1"),
        (
            &[0, 30, 10, 40],
            &[0, 5, 6, 60],
            "cu_seqlens_q[2] = 10 < cu_seqlens_q[1] = 30",
        ),
        (
            &[0, 11, 41],
            &[0, 30, 60],
            "cu_seqlens_q[2] = 41 but Q holds 40 tokens",
        ),
        (
            &[0, -100000, 1 << 30, 40],
            &[0, i32::MAX, -7, 60],
            "cu_seqlens_q[1] = -100000",
        ),
    ];
    let decode_kernel = KernelChoice::Variant("decode.m16.n32.w2.s4.b4.cex".parse().unwrap());
    for (causal, decode) in [(false, false), (true, false), (false, true), (true, true)] {
        for (cu_q, cu_k, want) in bad {
            let (dq, dk) = (
                stream.clone_htod(cu_q).unwrap(),
                stream.clone_htod(cu_k).unwrap(),
            );
            for check in [true, false] {
                let kernel = if decode {
                    // The decode family's varlen mode.
                    decode_kernel
                } else if causal {
                    // A second tile too (16 rows per warp, a 4-deep ring).
                    KernelChoice::Variant("portable.m64.n64.w4.s4.b2.ctelx".parse().unwrap())
                } else {
                    KernelChoice::Auto
                };
                let opts = CallOptions::default()
                    .with_kernel(kernel)
                    .with_check_descales(check);
                let r = {
                    let mut o_view = o.slice_mut(GUARD..GUARD + tq * hq * d);
                    let mut lse_view = lse.slice_mut(GUARD..GUARD + hq * tq);
                    let a = AttentionVarlen::new(
                        TensorRef::packed(&q, st, DType::F16, [tq, hq, d]).unwrap(),
                        TensorRef::packed(&k, st, DType::F16, [tk, hkv, d]).unwrap(),
                        TensorRef::packed(&k, st, DType::F16, [tk, hkv, d]).unwrap(),
                        TensorMut::packed(&mut o_view, st, DType::F16, [tq, hq, d]).unwrap(),
                        [IdxRef::new(&dq, st), IdxRef::new(&dk, st)],
                        [30, 55],
                        AttnParams::default_for(d, causal),
                    )
                    .with_lse(VecMut::new(&mut lse_view, st));
                    dev.attention_varlen(&stream, &a, opts)
                };
                match (&r, want.is_empty() || !check) {
                    (Ok(_), true) => {}
                    (Err(Error::InvalidInput(m)), false) => assert!(m.contains(want), "{m}"),
                    _ => panic!("offsets {cu_q:?} / {cu_k:?}, check {check}: {r:?}"),
                }
                assert_guards_intact(&stream, &o, &lse, &format!("{cu_q:?}"));
            }
        }
    }
}

/// Paged varlen: bad query offsets and key counts past the table are typed errors when
/// checked, and with the check off the kernel clamps them (offsets to the packed Q and O,
/// counts to the table's capacity): the call runs with split keys and the merge, and nothing
/// outside O and the LSE is written. Run it under compute-sanitizer to see that nothing
/// outside Q, the pages and the table is read either.
#[test]
#[ignore = "needs a GPU"]
fn paged_varlen_bad_offsets_and_lengths_are_refused_or_clamped_in_bounds() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let st: &cudarc::driver::CudaStream = &stream;
    let (hq, hkv, d, page, max_pages) = (8usize, 2usize, 128usize, 16usize, 64usize);
    let (batch, tq) = (3usize, 20usize);
    let pages = batch * max_pages;
    let q = stream.alloc_zeros::<u16>(tq * hq * d).unwrap();
    let pool = stream.alloc_zeros::<u16>(pages * page * hkv * d).unwrap();
    let table: Vec<i32> = (0..(batch * max_pages) as i32).rev().collect();
    let table = stream.clone_htod(&table).unwrap();
    let mut o = stream
        .clone_htod(&vec![0x5a5au16; tq * hq * d + 2 * GUARD])
        .unwrap();
    let mut lse = stream
        .clone_htod(&vec![7.0f32; hq * tq + 2 * GUARD])
        .unwrap();
    let cap = (max_pages * page) as i32;
    let bad: [(&[i32], &[i32], String); 4] = [
        (&[0, 1, 5, 20], &[1000, 17, 1], String::new()),
        (
            &[0, 1, 6, 21],
            &[1000, 17, 1],
            "cu_seqlens_q[3] = 21 but Q holds 20 tokens".into(),
        ),
        (
            &[0, 1, 5, 20],
            &[cap + 1, 17, 1],
            format!("seqlens_k[0] = {} is outside 0..={cap}", cap + 1),
        ),
        (
            &[0, -5, 1 << 30, 20],
            &[i32::MAX, -3, 1],
            "cu_seqlens_q[1] = -5".into(),
        ),
    ];
    for causal in [false, true] {
        for (cu_q, lens, want) in &bad {
            let (dq, dl) = (
                stream.clone_htod(*cu_q).unwrap(),
                stream.clone_htod(*lens).unwrap(),
            );
            for check in [true, false] {
                let opts = CallOptions::default().with_check_descales(check);
                let r = {
                    let mut o_view = o.slice_mut(GUARD..GUARD + tq * hq * d);
                    let mut lse_view = lse.slice_mut(GUARD..GUARD + hq * tq);
                    let cache = |buf| {
                        TensorRef::contiguous(
                            buf,
                            st,
                            DType::F16,
                            [pages, page, hkv, d],
                            fp8_sdpa::Layout::Bshd,
                        )
                        .unwrap()
                    };
                    let a = PagedAttentionVarlen::new(
                        TensorRef::packed(&q, st, DType::F16, [tq, hq, d]).unwrap(),
                        PagedKv::new(
                            cache(&pool),
                            cache(&pool),
                            IdxRef::new(&table, st),
                            max_pages,
                            IdxRef::new(&dl, st),
                        ),
                        TensorMut::packed(&mut o_view, st, DType::F16, [tq, hq, d]).unwrap(),
                        IdxRef::new(&dq, st),
                        15,
                        AttnParams::default_for(d, causal),
                    )
                    .with_lse(VecMut::new(&mut lse_view, st));
                    dev.paged_attention_varlen(&stream, &a, opts)
                };
                match (&r, want.is_empty() || !check) {
                    (Ok(l), true) => assert_eq!(l.spec.variant.family, Family::Decode),
                    (Err(Error::InvalidInput(m)), false) => assert!(m.contains(want), "{m}"),
                    _ => panic!("offsets {cu_q:?}, lengths {lens:?}, check {check}: {r:?}"),
                }
                assert_guards_intact(&stream, &o, &lse, &format!("{cu_q:?}"));
            }
        }
    }
}
