//! Every shipped default kernel, each on one small and one ragged shape, against the float64
//! reference: the workload the sanitizers run (issue 44's gate: memcheck and racecheck clean
//! on every shipped default). On the device machine:
//!
//! ```sh
//! compute-sanitizer --tool memcheck --error-exitcode 9 gpu_sanitize-test --include-ignored
//! compute-sanitizer --tool racecheck --error-exitcode 9 gpu_sanitize-test --include-ignored
//! ```
//!
//! "Shipped default" means every spec the library picks by itself: dispatch's choice for
//! contiguous calls over a grid of shapes (every precision, head dim and mask), the varlen
//! defaults, and the decode family's varlen and paged defaults. Each is forced onto the two
//! shapes, so a default picked only for long sequences is still checked on short ones.

use fp8_sdpa::kernels::registry;
use fp8_sdpa::runtime::{CallOptions, Device, KernelChoice};
use fp8_sdpa::{dispatch, AttnParams, AttnShape, Family, KernelSpec, Layout, Precision};
use fp8_sdpa::{Variant, VarlenShape};
use sdpa_harness::cases::{CaseSpec, HostCase, HostVarlenCase, VarlenCaseSpec};
use sdpa_harness::harness::{judge, DeviceCase, DevicePagedVarlenCase, DeviceVarlenCase};
use sdpa_harness::inputs::Distribution;
use std::collections::BTreeMap;

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

/// The specs dispatch picks for contiguous calls on this device, over a grid of shapes.
fn dense_defaults(dev: &Device) -> BTreeMap<String, KernelSpec> {
    let (arch, sms) = (dev.info().arch, dev.info().sm_count);
    let mut out = BTreeMap::new();
    let lens: Vec<(usize, usize)> = [
        1usize, 8, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768,
    ]
    .iter()
    .map(|&s| (s, s))
    .chain([1usize, 4, 16].iter().flat_map(|&q| {
        [512usize, 4096, 32768, 131072]
            .into_iter()
            .map(move |k| (q, k))
    }))
    .collect();
    for p in Precision::ALL {
        for d in [64usize, 128, 256] {
            for causal in [false, true] {
                for &batch in &[1usize, 2, 8, 32] {
                    for &(hq, hkv) in &[(32usize, 8usize), (16, 16), (8, 1)] {
                        for &(sq, sk) in &lens {
                            let shape = AttnShape::new(batch, sq, sk, hq, hkv, d);
                            let Ok(variant) = dispatch::choose(arch, p, &shape, causal, sms) else {
                                continue;
                            };
                            let spec = KernelSpec {
                                variant,
                                precision: p,
                                head_dim: d as u32,
                                causal,
                            };
                            if spec.validate(arch).is_ok() {
                                out.insert(spec.key(), spec);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// `SDPA_SHARD=i/n` runs every n-th spec from the i-th (sanitizer runs split over processes).
fn shard() -> (usize, usize) {
    std::env::var("SDPA_SHARD")
        .ok()
        .and_then(|s| {
            let (i, n) = s.split_once('/')?;
            Some((i.parse().ok()?, n.parse().ok()?))
        })
        .filter(|&(i, n)| n > 0 && i < n)
        .unwrap_or((0, 1))
}

fn params(d: usize, causal: bool) -> AttnParams {
    AttnParams::default_for(d, causal)
}

fn dense(dev: &Device, spec: &KernelSpec, shape: AttnShape, seed: u64) {
    let stream = dev.new_stream().unwrap();
    let host = HostCase::build(CaseSpec {
        shape,
        precision: spec.precision,
        causal: spec.causal,
        layout: Layout::Bshd,
        dist: Distribution::Normal,
        seed,
    })
    .unwrap();
    let p = params(shape.head_dim, spec.causal);
    let r = host.reference_dequantized(p.scale as f64).unwrap();
    let mut d = DeviceCase::upload(&stream, &host).unwrap();
    let opts = CallOptions::default().with_kernel(KernelChoice::Variant(spec.variant));
    let out = d.run(dev, &stream, &host, p, opts).unwrap();
    assert_eq!(out.launched.spec.key(), spec.key());
    let unchanged = d.inputs_unchanged(&stream).unwrap();
    let v = judge(spec.precision, &out, &r, None, false, unchanged).unwrap();
    assert!(
        v.failures.is_empty(),
        "{} {shape:?}: {:?}",
        spec.key(),
        v.failures
    );
}

fn varlen_case(p: Precision, lens: &[(usize, usize)], d: usize, causal: bool) -> HostVarlenCase {
    HostVarlenCase::build(VarlenCaseSpec {
        shape: VarlenShape::from_lens(lens, 8, 2, d),
        precision: p,
        causal,
        dist: Distribution::Normal,
        seed: lens.len() as u64,
        per_sequence_descales: lens.len() % 2 == 1,
    })
    .unwrap()
}

fn varlen(dev: &Device, p: Precision, v: Variant, host: &HostVarlenCase, page: Option<usize>) {
    let stream = dev.new_stream().unwrap();
    let (d, causal) = (host.spec.shape.head_dim, host.spec.causal);
    let prm = params(d, causal);
    let r = host.reference_dequantized(prm.scale as f64).unwrap();
    let opts = CallOptions::default().with_kernel(KernelChoice::Variant(v));
    let (out, unchanged) = match page {
        None => {
            let mut c = DeviceVarlenCase::upload(&stream, host).unwrap();
            let out = c.run(dev, &stream, host, prm, opts).unwrap();
            (out, c.inputs_unchanged(&stream, host).unwrap())
        }
        Some(ps) => {
            let mut c = DevicePagedVarlenCase::upload(&stream, host, ps, 7).unwrap();
            let out = c.run(dev, &stream, host, prm, opts).unwrap();
            (out, c.inputs_unchanged(&stream, host).unwrap())
        }
    };
    let verdict = judge(p, &out, &r, None, false, unchanged).unwrap();
    assert!(
        verdict.failures.is_empty(),
        "{} {page:?} {:?}: {:?}",
        out.launched.spec.key(),
        host.spec.shape,
        verdict.failures
    );
}

#[test]
#[ignore = "needs a GPU"]
fn shipped_defaults_on_a_small_and_a_ragged_shape() {
    let dev = device();
    let arch = dev.info().arch;
    let specs = dense_defaults(&dev);
    assert!(!specs.is_empty());
    let (part, parts) = shard();
    let mine = |i: usize| i % parts == part;
    for (i, (key, spec)) in specs.iter().enumerate().filter(|(i, _)| mine(*i)) {
        let d = spec.head_dim as usize;
        let (small, ragged) = if spec.variant.family == Family::Decode {
            (
                AttnShape::new(1, 1, 300, 8, 2, d),
                AttnShape::new(3, 4, 517, 8, 2, d),
            )
        } else {
            (
                AttnShape::new(1, 64, 128, 4, 2, d),
                AttnShape::new(2, 77, 203, 4, 2, d),
            )
        };
        eprintln!("dense {key}");
        dense(&dev, spec, small, i as u64);
        dense(&dev, spec, ragged, 1000 + i as u64);
    }
    let mut n = (0..specs.len()).filter(|&i| mine(i)).count();
    let mut k = 0usize;
    // Varlen and paged defaults: prefill-shaped and decode-shaped batches, one sequence
    // without keys in the ragged one.
    let prefill: [&[(usize, usize)]; 2] = [&[(64, 128)], &[(77, 203), (1, 0), (130, 130)]];
    let decode: [&[(usize, usize)]; 2] = [&[(1, 300)], &[(4, 517), (1, 1), (2, 0)]];
    for p in Precision::ALL {
        for d in [64usize, 128, 256] {
            for causal in [false, true] {
                let v = registry::varlen_default(arch, p, d as u32, causal);
                let spec = KernelSpec {
                    variant: v,
                    precision: p,
                    head_dim: d as u32,
                    causal,
                };
                k += 1;
                if !mine(k) {
                    continue;
                }
                if spec.validate(arch).is_ok() {
                    eprintln!("varlen {}", spec.key());
                    for lens in prefill {
                        varlen(&dev, p, v, &varlen_case(p, lens, d, causal), None);
                    }
                    n += 1;
                }
                let Some(v) = registry::decode_varlen_default(arch, p, d as u32) else {
                    continue;
                };
                eprintln!("decode varlen and paged {}", v.key());
                for lens in decode {
                    let host = varlen_case(p, lens, d, causal);
                    varlen(&dev, p, v, &host, None);
                    varlen(&dev, p, v, &host, Some(48));
                }
                n += 1;
            }
        }
    }
    eprintln!("{n} default specs (shard {part}/{parts}) ran clean on both shapes");
}
