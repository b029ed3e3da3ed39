//! GPU tests of variable-length batches (`Device::attention_varlen`): packed sequences against
//! the float64 CPU reference, output and LSE poisoned before each run, inputs and offsets
//! checked unchanged. Run on the device machine with `--include-ignored`; without a GPU they
//! fail, never skip.

use fp8_sdpa::cases::{varlen_verify_shapes, HostVarlenCase, VarlenCaseSpec};
use fp8_sdpa::harness::{judge, DeviceVarlenCase};
use fp8_sdpa::inputs::Distribution;
use fp8_sdpa::kernels::registry;
use fp8_sdpa::runtime::varlen::reads_varlen;
use fp8_sdpa::runtime::{
    AttentionVarlen, CallOptions, Device, IdxRef, KernelChoice, TensorMut, TensorRef, VecMut,
};
use fp8_sdpa::{AttnParams, DType, Error, Family, KernelSpec, Precision, VarlenShape};
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
    let opts = CallOptions {
        kernel,
        ..CallOptions::default()
    };
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

/// Every precision and head dim through dispatch, causal and not, on the verify shapes (many
/// short sequences, a few long ones, lengths 0 and 1, GQA, MHA): always the portable family.
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
                assert_eq!(spec.variant.family, Family::Portable, "{}", spec.key());
                n += 1;
            }
        }
    }
}

/// One problem class of every registered portable variant that reads varlen batches (each
/// knob: paired rows, fragment decode, split decode, decoupled sync, scalar
/// P·V, plain loads), on a ragged GQA batch, causal where the variant is registered causal.
#[test]
#[ignore = "needs a GPU"]
fn every_portable_variant_reads_varlen_batches() {
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

/// Other families, and the portable stream, are refused with a typed error before launch.
#[test]
#[ignore = "needs a GPU"]
fn other_families_are_unsupported_for_varlen() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let host = case(Precision::F16, &[(3, 5), (1, 1)], (4, 2), 128, true, 7);
    let params = AttnParams::default_for(128, true);
    let mut d = DeviceVarlenCase::upload(&stream, &host).unwrap();
    let arch = dev.info().arch;
    let mut refused = vec![
        "decode.m16.n64.w4.s3.b2.cex".parse().unwrap(),
        fp8_sdpa::Variant::reference(),
    ];
    let hopper = registry::default_variant(arch, Precision::F16, 128, true);
    if hopper.family == Family::Hopper {
        refused.push(hopper);
    }
    for v in refused {
        let opts = CallOptions {
            kernel: KernelChoice::Variant(v),
            ..CallOptions::default()
        };
        match d.run(&dev, &stream, &host, params, opts) {
            Err(Error::Unsupported(m)) => assert!(m.contains("portable family only"), "{m}"),
            other => panic!("{}: expected Unsupported, got {other:?}", v.key()),
        }
    }
}

const GUARD: usize = 256;

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
    for causal in [false, true] {
        for (cu_q, cu_k, want) in bad {
            let (dq, dk) = (
                stream.clone_htod(cu_q).unwrap(),
                stream.clone_htod(cu_k).unwrap(),
            );
            for check in [true, false] {
                let kernel = if causal {
                    // A second tile too (16 rows per warp, a 4-deep ring).
                    KernelChoice::Variant("portable.m64.n64.w4.s4.b2.ctelx".parse().unwrap())
                } else {
                    KernelChoice::Auto
                };
                let opts = CallOptions {
                    kernel,
                    check_descales: check,
                    ..CallOptions::default()
                };
                let r = {
                    let mut o_view = o.slice_mut(GUARD..GUARD + tq * hq * d);
                    let mut lse_view = lse.slice_mut(GUARD..GUARD + hq * tq);
                    let a = AttentionVarlen {
                        q: TensorRef::packed(&q, st, DType::F16, [tq, hq, d]).unwrap(),
                        k: TensorRef::packed(&k, st, DType::F16, [tk, hkv, d]).unwrap(),
                        v: TensorRef::packed(&k, st, DType::F16, [tk, hkv, d]).unwrap(),
                        o: TensorMut::packed(&mut o_view, st, DType::F16, [tq, hq, d]).unwrap(),
                        lse: Some(VecMut::new(&mut lse_view, st)),
                        cu_seqlens_q: IdxRef::new(&dq, st),
                        cu_seqlens_k: IdxRef::new(&dk, st),
                        max_seqlen_q: 30,
                        max_seqlen_k: 55,
                        q_descale: None,
                        k_descale: None,
                        v_descale: None,
                        params: AttnParams::default_for(d, causal),
                    };
                    dev.attention_varlen(&stream, &a, opts)
                };
                match (&r, want.is_empty() || !check) {
                    (Ok(_), true) => {}
                    (Err(Error::InvalidInput(m)), false) => assert!(m.contains(want), "{m}"),
                    _ => panic!("offsets {cu_q:?} / {cu_k:?}, check {check}: {r:?}"),
                }
                stream.synchronize().expect("the kernel stays in bounds");
                let oh = stream.clone_dtoh(&o).unwrap();
                let lh = stream.clone_dtoh(&lse).unwrap();
                let n = oh.len();
                assert!(
                    oh[..GUARD]
                        .iter()
                        .chain(&oh[n - GUARD..])
                        .all(|&x| x == 0x5a5a),
                    "O's guard zones were written ({cu_q:?})"
                );
                let n = lh.len();
                assert!(
                    lh[..GUARD]
                        .iter()
                        .chain(&lh[n - GUARD..])
                        .all(|&x| x == 7.0),
                    "the LSE's guard zones were written ({cu_q:?})"
                );
            }
        }
    }
}
