//! GPU tests: run on the device machine with `--include-ignored` (CI has no GPU, so they are
//! ignored there, never skipped silently: without a GPU they fail).

use fp8_sdpa::cases::{CaseSpec, HostCase};
use fp8_sdpa::harness::{judge, DeviceCase};
use fp8_sdpa::inputs::Distribution;
use fp8_sdpa::runtime::{Attention, CallOptions, Device, KernelChoice, TensorMut, TensorRef};
use fp8_sdpa::{
    codec_check, Arch, AttnParams, AttnShape, DType, Error, KernelSpec, Layout, Precision, Variant,
};
use std::sync::Arc;

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

fn case(
    precision: Precision,
    shape: (usize, usize, usize, usize, usize, usize),
    causal: bool,
    layout: Layout,
    seed: u64,
) -> HostCase {
    let (batch, seq_q, seq_kv, heads_q, heads_kv, head_dim) = shape;
    HostCase::build(CaseSpec {
        shape: AttnShape::new(batch, seq_q, seq_kv, heads_q, heads_kv, head_dim),
        precision,
        causal,
        layout,
        dist: Distribution::Normal,
        seed,
    })
    .unwrap()
}

/// Runs `host` with `kernel` (a variant, or dispatch's choice) and asserts it matches the
/// float64 reference with its inputs unchanged; returns the spec that ran.
fn check(
    dev: &Device,
    stream: &Arc<cudarc::driver::CudaStream>,
    host: &HostCase,
    kernel: KernelChoice,
) -> KernelSpec {
    let params = AttnParams::default_for(host.spec.shape.head_dim, host.spec.causal);
    let r = host.reference_dequantized(params.scale as f64).unwrap();
    let mut d = DeviceCase::upload(stream, host).unwrap();
    let opts = CallOptions {
        kernel,
        check_descales: true,
    };
    let out = d.run(dev, stream, host, params, opts).unwrap();
    let v = judge(
        host.spec.precision,
        &out,
        &r,
        None,
        false,
        d.inputs_unchanged(stream).unwrap(),
    )
    .unwrap();
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

#[test]
#[ignore = "needs a GPU"]
fn reference_kernel_matches_the_cpu_reference() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    for (i, p) in Precision::ALL.into_iter().enumerate() {
        for d in [64, 128, 256] {
            let layout = if i % 2 == 0 {
                Layout::Bshd
            } else {
                Layout::Bhsd
            };
            check(
                &dev,
                &stream,
                &case(p, (2, 37, 61, 4, 2, d), true, layout, i as u64),
                KernelChoice::Variant(Variant::reference()),
            );
            check(
                &dev,
                &stream,
                &case(p, (1, 50, 20, 2, 1, d), true, layout, 9),
                KernelChoice::Variant(Variant::reference()),
            );
            check(
                &dev,
                &stream,
                &case(p, (1, 33, 33, 8, 8, d), false, layout, 3),
                KernelChoice::Variant(Variant::reference()),
            );
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn fp8_codec_is_bit_exact_with_the_gpu() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let mut checks = codec_check::run_all(&dev, &stream).unwrap();
    checks.extend(codec_check::quantize_check(&dev, &stream, [2, 77, 3, 128], 7).unwrap());
    assert!(checks.len() >= 2);
    for c in &checks {
        assert!(
            c.passed(),
            "{}: {} of {} differ: {:?}",
            c.name,
            c.mismatches,
            c.cases,
            c.examples
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn bad_inputs_are_typed_errors_before_any_launch() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let q = stream.alloc_zeros::<u16>(2 * 8 * 4 * 64).unwrap();
    let k = stream.alloc_zeros::<u16>(2 * 8 * 3 * 64).unwrap();
    let mut o = stream.alloc_zeros::<u16>(2 * 8 * 4 * 64).unwrap();
    let st: &cudarc::driver::CudaStream = &stream;
    let a = Attention {
        q: TensorRef::contiguous(&q, st, DType::F16, [2, 8, 4, 64], Layout::Bshd).unwrap(),
        k: TensorRef::contiguous(&k, st, DType::F16, [2, 8, 3, 64], Layout::Bshd).unwrap(),
        v: TensorRef::contiguous(&k, st, DType::F16, [2, 8, 3, 64], Layout::Bshd).unwrap(),
        o: TensorMut::contiguous(&mut o, st, DType::F16, [2, 8, 4, 64], Layout::Bshd).unwrap(),
        lse: None,
        q_descale: None,
        k_descale: None,
        v_descale: None,
        params: AttnParams::default_for(64, false),
    };
    match dev.attention(&stream, &a, CallOptions::default()) {
        Err(Error::InvalidInput(m)) => assert!(m.contains("multiple of heads_kv"), "{m}"),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    // A u16 slice cannot hold an E4M3 tensor: the element size is checked at construction.
    assert!(TensorRef::contiguous(&q, st, DType::E4m3, [2, 8, 4, 64], Layout::Bshd).is_err());
}

#[test]
#[ignore = "needs a GPU"]
fn concurrent_calls_from_threads_on_their_own_streams() {
    let dev = device();
    let host = case(
        Precision::F16,
        (2, 65, 130, 4, 1, 128),
        true,
        Layout::Bshd,
        5,
    );
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let stream = dev.new_stream().unwrap();
                for _ in 0..3 {
                    check(
                        &dev,
                        &stream,
                        &host,
                        KernelChoice::Variant(Variant::reference()),
                    );
                }
            });
        }
    });
}

#[test]
#[ignore = "needs a GPU"]
fn nan_in_a_row_gives_nan_in_that_row_only() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let mut host = case(Precision::F16, (1, 4, 16, 1, 1, 64), false, Layout::Bshd, 1);
    // Q row 2, element 5 := NaN (f16 0x7e00).
    let at = (2 * 64 + 5) * 2;
    host.enc[0].bytes[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let params = AttnParams::default_for(64, false);
    let mut d = DeviceCase::upload(&stream, &host).unwrap();
    // The reference kernel and the shipped default (dispatch), which rescales lazily.
    for kernel in [
        KernelChoice::Variant(Variant::reference()),
        KernelChoice::Auto,
    ] {
        let out = d
            .run(
                &dev,
                &stream,
                &host,
                params,
                CallOptions {
                    kernel,
                    check_descales: true,
                },
            )
            .unwrap();
        for row in 0..4 {
            let vals = &out.o[row * 64..(row + 1) * 64];
            if row == 2 {
                assert!(
                    vals.iter().all(|x| x.is_nan()),
                    "{kernel:?}: row 2 must be NaN"
                );
            } else {
                assert!(
                    vals.iter().all(|x| x.is_finite()),
                    "{kernel:?}: row {row} must be finite"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn shipped_defaults_match_the_cpu_reference_through_dispatch() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    for (i, p) in Precision::ALL.into_iter().enumerate() {
        for d in [64, 128, 256] {
            // A small grid (dispatch's small-tile path) and a full one.
            for shape in [(1, 77, 300, 4, 2, d), (4, 512, 512, 16, 4, d)] {
                let host = case(p, shape, i % 2 == 0, Layout::Bshd, i as u64);
                check(&dev, &stream, &host, KernelChoice::Auto);
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn causal_batch_sections_match_the_cpu_reference() {
    // K/V of 1/7.5 of the L2 per batch: 2 batches per causal section, so 5 batches make the
    // sections {0, 1}, {2, 3} and a ragged {4} (geometry.rs), each heaviest m-block first.
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let l2 = dev.info().l2_bytes as usize;
    for (i, p) in [Precision::F16, Precision::Fp8KvBf16]
        .into_iter()
        .enumerate()
    {
        let kv_row = 2 * 128 * p.kv().size(); // K and V bytes per key (one kv head, D128)
        let seq_kv = l2 * 2 / (15 * kv_row);
        let host = case(
            p,
            (5, 200, seq_kv, 2, 1, 128),
            true,
            Layout::Bhsd,
            40 + i as u64,
        );
        let spec = check(&dev, &stream, &host, KernelChoice::Auto);
        assert!(
            !spec.variant.persistent,
            "{}: not the sectioned grid",
            spec.key()
        );
        let g = fp8_sdpa::kernels::geometry::causal_batch_group(&spec, &host.spec.shape, l2 as u64);
        assert_eq!(g, 2, "{}: seq_kv {seq_kv}", spec.key());
    }
}

/// Each variant `(head dim, key)` against the CPU reference on ragged 300 × 333 GQA cases:
/// every precision, causal and not, BSHD for even precision indices and BHSD for odd ones,
/// seeds from `seed0` (distinct per case). Returns the specs that ran, in order.
fn check_ragged_variants(
    dev: &Device,
    stream: &Arc<cudarc::driver::CudaStream>,
    variants: &[(usize, &str)],
    precisions: &[Precision],
    seed0: u64,
) -> Vec<KernelSpec> {
    let per_variant = 2 * precisions.len() as u64;
    let mut specs = Vec::new();
    for (i, &(d, key)) in variants.iter().enumerate() {
        let v: Variant = key.parse().unwrap();
        for (j, &p) in precisions.iter().enumerate() {
            for causal in [false, true] {
                let host = case(
                    p,
                    (2, 300, 333, 4, 2, d),
                    causal,
                    if j % 2 == 0 {
                        Layout::Bshd
                    } else {
                        Layout::Bhsd
                    },
                    seed0 + per_variant * i as u64 + 2 * j as u64 + causal as u64,
                );
                specs.push(check(dev, stream, &host, KernelChoice::Variant(v)));
            }
        }
    }
    specs
}

/// The registered fragment-decode tiles, by head dim.
const FRAG_TILES: [(usize, &str); 4] = [
    (128, "portable.m128.n64.w4.s2.b2.ctfhelx"),
    (64, "portable.m128.n128.w4.s2.b2.ctfhelx"),
    (256, "portable.m64.n64.w4.s2.b2.ctfelx"),
    (64, "portable.m64.n64.w4.s2.b4.ctfelx"),
];

#[test]
#[ignore = "needs a GPU"]
fn fragment_decode_matches_the_cpu_reference() {
    // Ragged lengths (partial tiles at both ends), GQA, both layouts, causal and not, for the
    // three Q types the fragment decode handles differently: f16 Q as is, bf16 Q stored as f16
    // at a power of two per row, 8-bit Q decoded to f16 (E4M3 and the seeds' u8 code, whose
    // K/V decode differs too).
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let precisions = [
        Precision::Fp8KvF16,
        Precision::Fp8KvBf16,
        Precision::Fp8,
        Precision::SimFp8,
    ];
    for spec in check_ragged_variants(&dev, &stream, &FRAG_TILES, &precisions, 70) {
        assert!(spec.variant.fragment_decode, "{}", spec.key());
    }
    for (i, d) in [128, 64, 256].into_iter().enumerate() {
        // Through dispatch: on Hopper, every 8-bit precision takes fragment decode at causal
        // S 512 (the seeds' u8 code since round 19; at D256 E4M3 only, since round 20), on a
        // grid of 512 blocks (smaller grids take dispatch's small-tile path).
        for (j, p) in Precision::ALL
            .into_iter()
            .filter(|p| p.kv_is_8bit() && (d < 256 || *p != Precision::SimFp8))
            .enumerate()
        {
            let host = case(
                p,
                (8, 512, 512, 16, 4, d),
                true,
                Layout::Bshd,
                90 + 8 * i as u64 + j as u64,
            );
            let spec = check(&dev, &stream, &host, KernelChoice::Auto);
            if dev.info().arch == Arch::Sm90a {
                assert!(spec.variant.fragment_decode, "{}", spec.key());
            }
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn fragment_decode_keeps_bf16_rows_of_any_magnitude() {
    // bf16 Q rows scaled by 2^-30 .. 2^+6 (exponent field shifted, so every value stays exact
    // in bf16): each row gets its own power of two when Q is stored as f16.
    let dev = device();
    let stream = dev.new_stream().unwrap();
    for (d, key) in FRAG_TILES {
        let v: Variant = key.parse().unwrap();
        let mut host = case(
            Precision::Fp8KvBf16,
            (1, 200, 200, 2, 1, d),
            true,
            Layout::Bshd,
            91,
        );
        // BSHD: row (s, h) is element block ((s * heads) + h) * d.
        for (r, row) in host.enc[0].bytes.chunks_mut(2 * d).enumerate() {
            let shift = (r % 7) as i32 * 6 - 30;
            for x in row.chunks_mut(2) {
                let b = u16::from_le_bytes([x[0], x[1]]);
                let e = ((b >> 7) & 0xff) as i32;
                if e != 0 && e + shift > 0 && e + shift < 255 {
                    let nb = (b & 0x807f) | (((e + shift) as u16) << 7);
                    x.copy_from_slice(&nb.to_le_bytes());
                }
            }
        }
        check(&dev, &stream, &host, KernelChoice::Variant(v));
    }
}
