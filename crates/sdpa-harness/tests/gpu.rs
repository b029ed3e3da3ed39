//! GPU tests: run on the device machine with `--include-ignored` (CI has no GPU, so they are
//! ignored there, never skipped silently: without a GPU they fail).

use fp8_sdpa::runtime::{Attention, CallOptions, Device, KernelChoice, TensorMut, TensorRef};
use fp8_sdpa::{Arch, AttnParams, AttnShape, DType, Error, KernelSpec, Layout, Precision, Variant};
use sdpa_harness::cases::{CaseSpec, HostCase};
use sdpa_harness::codec_check;
use sdpa_harness::harness::{judge, DeviceCase};
use sdpa_harness::inputs::Distribution;
use std::sync::Arc;

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

/// The device, which must be an sm_90a GPU (the Hopper family's tests).
fn hopper_device() -> Device {
    let dev = device();
    assert_eq!(
        dev.info().arch,
        Arch::Sm90a,
        "the Hopper family needs an sm_90a GPU"
    );
    dev
}

/// Asserts that `spec` is a Hopper-family kernel.
fn assert_hopper(spec: &KernelSpec) {
    assert_eq!(
        spec.variant.family,
        fp8_sdpa::Family::Hopper,
        "{}",
        spec.key()
    );
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
    let opts = CallOptions::default()
        .with_kernel(kernel)
        .with_check_descales(true);
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
    let a = Attention::new(
        TensorRef::contiguous(&q, st, DType::F16, [2, 8, 4, 64], Layout::Bshd).unwrap(),
        TensorRef::contiguous(&k, st, DType::F16, [2, 8, 3, 64], Layout::Bshd).unwrap(),
        TensorRef::contiguous(&k, st, DType::F16, [2, 8, 3, 64], Layout::Bshd).unwrap(),
        TensorMut::contiguous(&mut o, st, DType::F16, [2, 8, 4, 64], Layout::Bshd).unwrap(),
        AttnParams::default_for(64, false),
    );
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
    // The reference kernel, the shipped default (dispatch), which rescales lazily, and the
    // decode family (its merges once read a NaN sum as "no visible key" and wrote 0).
    for kernel in [
        KernelChoice::Variant(Variant::reference()),
        KernelChoice::Auto,
        KernelChoice::Variant("decode.m16.n64.w4.s3.b2.cex".parse().unwrap()),
    ] {
        let out = d
            .run(
                &dev,
                &stream,
                &host,
                params,
                CallOptions::default()
                    .with_kernel(kernel)
                    .with_check_descales(true),
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
        // Through dispatch: on Hopper, the 8-bit K/V precisions the Hopper family does not run
        // take fragment decode at causal S 512 (the seeds' u8 code, and FP8-KV at
        // D256), on a grid of 512 blocks (smaller grids take dispatch's
        // small-tile path).
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
            // Full FP8 runs on the Hopper family's 8-bit wgmma (D64 to D256), FP8-KV at
            // D64/D128 on its producer-decode tiles.
            let hopper = p == Precision::Fp8 || (p.is_fp8_kv() && d <= 128);
            if dev.info().arch == Arch::Sm90a && !hopper {
                assert!(spec.variant.fragment_decode, "{}", spec.key());
            } else if dev.info().arch == Arch::Sm90a {
                assert_hopper(&spec);
            }
        }
    }
}

/// The Hopper family's FP8-KV tiles (E4M3 K/V decoded by the producer warpgroup), by head dim.
const HOPPER_KV8_TILES: [(usize, &str); 4] = [
    (128, "hopper.m128.n128.w12.s2.b1.w4pogex"),
    (64, "hopper.m128.n128.w12.s2.b1.w4pogex"),
    (128, "hopper.m128.n128.w12.s2.b1.w4ogex"),
    (64, "hopper.m128.n128.w12.s2.b1.w4oex"),
];

#[test]
#[ignore = "needs a GPU (sm_90a for the Hopper family)"]
fn hopper_fp8_kv_matches_the_cpu_reference() {
    // Ragged lengths, GQA, both layouts, causal and not, f16 and bf16 Q; then through dispatch,
    // which takes the persistent tile for non-causal FP8-KV at D128.
    let dev = hopper_device();
    let stream = dev.new_stream().unwrap();
    let precisions = [Precision::Fp8KvF16, Precision::Fp8KvBf16];
    for spec in check_ragged_variants(&dev, &stream, &HOPPER_KV8_TILES, &precisions, 170) {
        assert_hopper(&spec);
    }
    for (j, p) in precisions.into_iter().enumerate() {
        let host = case(
            p,
            (4, 1024, 1100, 16, 4, 128),
            false,
            Layout::Bshd,
            190 + j as u64,
        );
        let spec = check(&dev, &stream, &host, KernelChoice::Auto);
        assert_hopper(&spec);
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

/// The registered decode variants (registry.rs) on decode-shaped calls: one to 16 query
/// rows per query head, GQA 1/4/8/32, ragged key counts up to 70k (many splits and the merge),
/// a single key, causal with Sq > 1; 16-bit and E4M3 K/V.
#[test]
#[ignore = "needs a GPU"]
fn decode_family_matches_the_cpu_reference() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let variants = ["decode.m16.n64.w4.s3.b2.cex", "decode.m16.n32.w2.s4.b4.cex"];
    // (batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, causal)
    let shapes = [
        (3, 1, 4097, 32, 8, 128, false),
        (2, 4, 1000, 8, 8, 128, true),
        (1, 16, 70001, 8, 1, 64, false),
        (4, 1, 1, 32, 1, 64, false),
        (2, 5, 300, 8, 2, 256, true),
        (1, 2, 1, 4, 2, 128, true),
    ];
    for (i, key) in variants.iter().enumerate() {
        let variant: Variant = key.parse().unwrap();
        for (j, &(b, sq, skv, hq, hkv, d, causal)) in shapes.iter().enumerate() {
            let p = [
                Precision::F16,
                Precision::Fp8KvBf16,
                Precision::Bf16,
                Precision::Fp8KvF16,
            ][(i + j) % 4];
            let spec = KernelSpec {
                variant,
                precision: p,
                head_dim: d as u32,
                causal,
            };
            if spec.validate(dev.info().arch).is_err() {
                continue; // 16-bit D256 with 4 warps is over sm_80's shared memory
            }
            let layout = if j % 2 == 0 {
                Layout::Bshd
            } else {
                Layout::Bhsd
            };
            let host = case(p, (b, sq, skv, hq, hkv, d), causal, layout, 11 + j as u64);
            let ran = check(&dev, &stream, &host, KernelChoice::Variant(variant));
            assert_eq!(ran.variant, variant);
        }
    }
}

/// A paged cache (pages scattered in a pool in random order, ragged sequence lengths, page
/// sizes 16 and 64) gives what the float64 reference gives on each sequence's own keys.
#[test]
#[ignore = "needs a GPU"]
fn paged_cache_matches_the_cpu_reference() {
    use fp8_sdpa::reference::{self, RefOutput};
    use fp8_sdpa::runtime::{Descale, IdxRef, PagedAttention, PagedKv, VecMut, VecRef};
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let dev = device();
    let stream = dev.new_stream().unwrap();
    for (p, page, causal, sq) in [
        (Precision::F16, 16usize, false, 1usize),
        (Precision::Fp8KvBf16, 64, true, 4),
        (Precision::Bf16, 64, false, 2),
        (Precision::Fp8KvF16, 16, true, 1),
    ] {
        let (batch, hq, hkv, d) = (3usize, 8usize, 2usize, 128usize);
        let lens = [1000usize, 17, 0];
        let cap = lens.iter().max().unwrap().div_ceil(page) * page;
        let host = case(p, (batch, sq, cap, hq, hkv, d), causal, Layout::Bshd, 5);
        // Scatter: sequence b's page i goes to a random slot of a pool with spare pages.
        let max_pages = cap / page;
        let pages = batch * max_pages + 3;
        let mut slots: Vec<i32> = (0..pages as i32).collect();
        slots.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(7));
        let table: Vec<i32> = slots[..batch * max_pages].to_vec();
        let es = p.kv().size();
        let row = hkv * d * es; // one token's K (or V) bytes
        let pool = |src: &[u8]| {
            let mut out = vec![0u8; pages * page * row];
            for b in 0..batch {
                for j in 0..cap {
                    let slot = table[b * max_pages + j / page] as usize;
                    let dst = (slot * page + j % page) * row;
                    out[dst..dst + row].copy_from_slice(&src[(b * cap + j) * row..][..row]);
                }
            }
            out
        };
        let k = stream.clone_htod(&pool(&host.enc[1].bytes)).unwrap();
        let v = stream.clone_htod(&pool(&host.enc[2].bytes)).unwrap();
        let q = stream.clone_htod(&host.enc[0].bytes).unwrap();
        let table_d = stream.clone_htod(&table).unwrap();
        let lens_i: Vec<i32> = lens.iter().map(|&n| n as i32).collect();
        let lens_d = stream.clone_htod(&lens_i).unwrap();
        let ds: Vec<_> = [1, 2]
            .iter()
            .map(|&i| {
                host.enc[i]
                    .descales
                    .as_ref()
                    .map(|x| stream.clone_htod(x).unwrap())
            })
            .collect();
        let out_t = p.out();
        let qd = [batch, sq, hq, d];
        let mut o = stream
            .alloc_zeros::<u8>(batch * sq * hq * d * out_t.size())
            .unwrap();
        let mut lse = stream.alloc_zeros::<f32>(batch * hq * sq).unwrap();
        let params = AttnParams::default_for(d, causal);
        {
            let st: &cudarc::driver::CudaStream = &stream;
            let pd = [pages, page, hkv, d];
            fn descale<'a>(
                x: &'a Option<cudarc::driver::CudaSlice<f32>>,
                st: &'a cudarc::driver::CudaStream,
                hkv: usize,
            ) -> Option<Descale<'a>> {
                x.as_ref().map(|x| Descale::new(VecRef::new(x, st), hkv))
            }
            let call = PagedAttention::new(
                TensorRef::contiguous(&q, st, host.enc[0].dtype, qd, Layout::Bshd).unwrap(),
                PagedKv::new(
                    TensorRef::contiguous(&k, st, p.kv(), pd, Layout::Bshd).unwrap(),
                    TensorRef::contiguous(&v, st, p.kv(), pd, Layout::Bshd).unwrap(),
                    IdxRef::new(&table_d, st),
                    max_pages,
                    IdxRef::new(&lens_d, st),
                ),
                TensorMut::contiguous(&mut o, st, out_t, qd, Layout::Bshd).unwrap(),
                params,
            )
            .with_lse(VecMut::new(&mut lse, st))
            .with_kv_descales(descale(&ds[0], st, hkv), descale(&ds[1], st, hkv));
            dev.paged_attention(st, &call, CallOptions::default())
                .unwrap();
        }
        stream.synchronize().unwrap();
        let o_host = sdpa_harness::harness::decode_out(out_t, &stream.clone_dtoh(&o).unwrap());
        let lse_host = stream.clone_dtoh(&lse).unwrap();
        // The reference, sequence by sequence on its own keys.
        let deq = |i: usize, dims: [usize; 4], heads: usize| {
            let e = &host.enc[i];
            reference::dequantize(e.dtype, &e.bytes, e.descales.as_deref(), dims, heads).unwrap()
        };
        let qf = deq(0, qd, hq);
        let kf = deq(1, [batch, cap, hkv, d], hkv);
        let vf = deq(2, [batch, cap, hkv, d], hkv);
        let mut want = RefOutput {
            o: Vec::new(),
            lse: Vec::new(),
            score_magnitude: Vec::new(),
            o_slack: Vec::new(),
        };
        for (b, &n) in lens.iter().enumerate() {
            let shape = AttnShape::new(1, sq, n, hq, hkv, d);
            let qs = &qf[b * sq * hq * d..][..sq * hq * d];
            let ks = &kf[b * cap * hkv * d..][..n * hkv * d];
            let vs = &vf[b * cap * hkv * d..][..n * hkv * d];
            let r = if n == 0 {
                // No key: O = 0 and LSE = -inf by the library's convention.
                RefOutput {
                    o: vec![0.0; sq * hq * d],
                    lse: vec![f64::NEG_INFINITY; hq * sq],
                    score_magnitude: vec![0.0; hq * sq],
                    o_slack: vec![0.0; sq * hq * d],
                }
            } else {
                reference::attention(&shape, qs, ks, vs, params.scale as f64, causal).unwrap()
            };
            want.o.extend(r.o);
            want.lse.extend(r.lse);
            want.score_magnitude.extend(r.score_magnitude);
            want.o_slack.extend(r.o_slack);
        }
        let got = sdpa_harness::harness::RunOutput {
            o: o_host,
            lse: lse_host,
            launched: fp8_sdpa::runtime::Launched {
                spec: KernelSpec {
                    variant: Variant::reference(),
                    precision: p,
                    head_dim: d as u32,
                    causal,
                },
                grid: [0; 3],
                block: 0,
                smem: 0,
            },
        };
        let v = judge(p, &got, &want, None, false, true).unwrap();
        assert!(v.failures.is_empty(), "{p:?} page {page}: {:?}", v.failures);
    }
}

/// Two Hopper calls back to back, the second taking the first's output as its K and V, with
/// no host synchronization between them. The Hopper kernels launch as programmatic dependents
/// (runtime/launch.rs): the second may be scheduled while the first still runs, where the
/// first's blocks leave SMs, and must wait (griddepcontrol.wait) before it reads. The first
/// output is poisoned with NaN on the stream before each call pair, and every block of the
/// second call reads all of it: one that read early would see NaN. The outputs must equal, bit
/// for bit, those of the same pair with a synchronization between the calls. The calls are
/// long (about half a millisecond each), so that the second is submitted while the first runs,
/// and the first's tiles do not divide evenly over its blocks, so that some of its SMs free up
/// while others still write.
#[test]
#[ignore = "needs a GPU (sm_90a for the Hopper family)"]
fn chained_hopper_calls_read_the_previous_output() {
    let dev = hopper_device();
    let stream = dev.new_stream().unwrap();
    let st: &cudarc::driver::CudaStream = &stream;
    // One head: every block of the second call reads the rows the first call's last tiles
    // write (with two heads, the second call's first blocks read the first head, long done).
    let (b, s, h, d) = (1, 32768, 1, 64);
    let dims = [b, s, h, d];
    let host = case(Precision::F16, (b, s, s, h, h, d), false, Layout::Bshd, 700);
    let [q, k, v] = [0, 1, 2].map(|i| stream.clone_htod(&host.enc[i].bytes).unwrap());
    let mut o1 = stream.alloc_zeros::<u8>(b * s * h * d * 2).unwrap();
    let mut o2 = stream.alloc_zeros::<u8>(b * s * h * d * 2).unwrap();
    let poison = vec![0xffu8; b * s * h * d * 2]; // f16 NaN
    let params = AttnParams::default_for(d, false);
    let opts = CallOptions::default().with_check_descales(false);
    type Buf = cudarc::driver::CudaSlice<u8>;
    let call = |q: &Buf, k: &Buf, v: &Buf, o: &mut Buf| {
        let t = |x| TensorRef::contiguous(x, st, DType::F16, dims, Layout::Bshd).unwrap();
        let a = Attention::new(
            t(q),
            t(k),
            t(v),
            TensorMut::contiguous(o, st, DType::F16, dims, Layout::Bshd).unwrap(),
            params,
        );
        let l = dev.attention(st, &a, opts).unwrap();
        assert_hopper(&l.spec);
    };
    let mut pair = |sync_between: bool| -> Vec<u16> {
        stream.memcpy_htod(&poison, &mut o1).unwrap();
        call(&q, &k, &v, &mut o1);
        if sync_between {
            stream.synchronize().unwrap();
        }
        call(&q, &o1, &o1, &mut o2);
        stream.synchronize().unwrap();
        let out = stream.clone_dtoh(&o2).unwrap();
        out.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    };
    let want = pair(true);
    let nan = |x: &[u16]| {
        x.iter()
            .filter(|&&w| half::f16::from_bits(w).is_nan())
            .count()
    };
    assert_eq!(nan(&want), 0, "the synchronized pair left NaN");
    for round in 0..6 {
        let got = pair(false);
        assert!(
            got == want,
            "round {round}: the chained pair differs ({} NaN of {})",
            nan(&got),
            got.len()
        );
    }
}
