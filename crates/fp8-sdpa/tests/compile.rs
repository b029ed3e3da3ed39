//! The compile pipeline against the real NVRTC (no GPU needed): CUBIN out, ptxas report in,
//! the cache, and compile errors. `scripts/test.sh` installs NVRTC when it is missing.

use fp8_sdpa::compile::{nvrtc, ptxas, Cache, Compiler, Origin};
use fp8_sdpa::{Arch, Error, KernelSpec, Precision, Variant};

fn spec() -> KernelSpec {
    KernelSpec {
        variant: Variant::reference(),
        precision: Precision::F16,
        head_dim: 64,
        causal: true,
    }
}

#[test]
fn compiles_to_cubin_for_each_arch_with_a_resource_report() {
    let compiler = Compiler::with_cache(None);
    for arch in Arch::ALL {
        let c = compiler.compile(&spec(), arch).unwrap();
        assert_eq!(&c.cubin[..4], b"\x7fELF", "{arch}: not an ELF cubin");
        assert_eq!(c.resources.function, "sdpa_reference");
        assert!(
            c.resources.registers > 8 && c.resources.registers < 255,
            "{arch}: {:?}",
            c.resources
        );
        assert_eq!(
            c.resources.static_smem,
            4 * 64 * 4,
            "4 warps x 64 floats of Q"
        );
        assert!(
            c.log.contains(&format!("for '{}'", arch.name())),
            "{}",
            c.log
        );
    }
}

#[test]
fn parses_a_real_report_with_spills_and_a_stack_frame() {
    // A local array written in a loop of run-time length lives in local memory (a stack
    // frame); 64 values live at once under a 32-register cap must spill.
    let src = r#"
extern "C" __global__ void __launch_bounds__(256, 1) stacky(float* out, const int* idx, int n) {
    float a[256];
    for (int i = 0; i < n; ++i) a[i & 255] = out[i * threadIdx.x];
    out[threadIdx.x] = a[idx[threadIdx.x] & 255];
}
extern "C" __global__ void __launch_bounds__(1024, 2) spills(float* out) {
    float v[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = out[i * 1024 + threadIdx.x];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) s += v[i] * v[63 - i] * v[(i * 7) & 63];
    out[threadIdx.x] = s;
}
extern "C" __global__ void clean(float* out) { out[threadIdx.x] = 1.0f; }
"#;
    let out = nvrtc::compile("spills.cu", src, &[], &[], Arch::Sm90a).unwrap();
    let r = ptxas::parse(&out.log);
    let names: Vec<&str> = r.iter().map(|x| x.function.as_str()).collect();
    assert_eq!(names.len(), 3, "{}", out.log);
    let st = r.iter().find(|x| x.function == "stacky").unwrap();
    assert!(
        st.stack_frame >= 1024,
        "256 floats on the stack: {st:?}\n{}",
        out.log
    );
    let sp = r.iter().find(|x| x.function == "spills").unwrap();
    assert!(sp.registers <= 32, "{sp:?}");
    assert!(
        sp.spill_stores > 0 && sp.spill_loads > 0,
        "{sp:?}\n{}",
        out.log
    );
    let c = r.iter().find(|x| x.function == "clean").unwrap();
    assert_eq!((c.stack_frame, c.spill_stores, c.spill_loads), (0, 0, 0));
}

#[test]
fn a_compile_error_carries_the_log_with_line_numbers() {
    let src = "extern \"C\" __global__ void k(float* x) {\n    x[0] = 1.0f;\n    this_is_not_defined(x);\n}\n";
    match nvrtc::compile("broken.cu", src, &[], &[], Arch::Sm80) {
        Err(Error::Compile {
            source_name,
            log,
            arch,
            ..
        }) => {
            assert_eq!(source_name, "broken.cu");
            assert_eq!(arch, "sm_80");
            assert!(log.contains("broken.cu(3)"), "line 3 must be named: {log}");
            assert!(log.contains("this_is_not_defined"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn cache_hits_and_rebuilds_a_corrupt_entry() {
    let dir = tempfile::tempdir().unwrap();
    let compiler = Compiler::with_cache(Some(Cache::at(dir.path()).unwrap()));
    let first = compiler.compile(&spec(), Arch::Sm80).unwrap();
    assert_eq!(first.origin, Origin::Compiled);
    let second = compiler.compile(&spec(), Arch::Sm80).unwrap();
    assert_eq!(second.origin, Origin::CacheHit);
    assert_eq!(first.cubin, second.cubin);
    assert_eq!(first.resources, second.resources);
    // A different arch or spec is a different entry.
    assert_eq!(
        compiler.compile(&spec(), Arch::Sm90a).unwrap().origin,
        Origin::Compiled
    );
    // Flip a byte in every entry: detected, removed, rebuilt.
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let mut b = std::fs::read(e.path()).unwrap();
        let n = b.len() / 2;
        b[n] ^= 0x55;
        std::fs::write(e.path(), b).unwrap();
    }
    match compiler.compile(&spec(), Arch::Sm80).unwrap().origin {
        Origin::Rebuilt(reason) => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("expected a rebuild, got {other:?}"),
    }
    assert_eq!(
        compiler.compile(&spec(), Arch::Sm80).unwrap().origin,
        Origin::CacheHit
    );
}

#[test]
fn concurrent_fill_from_many_threads() {
    let dir = tempfile::tempdir().unwrap();
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let p = dir.path().to_path_buf();
                s.spawn(move || {
                    Compiler::with_cache(Some(Cache::at(p).unwrap()))
                        .compile(&spec(), Arch::Sm89)
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results[1..] {
        assert_eq!(r.cubin, results[0].cubin);
    }
    let c = Compiler::with_cache(Some(Cache::at(dir.path()).unwrap()));
    assert_eq!(
        c.compile(&spec(), Arch::Sm89).unwrap().origin,
        Origin::CacheHit
    );
}

#[test]
fn invalid_specs_are_rejected_before_compiling() {
    let c = Compiler::with_cache(None);
    let mut s = spec();
    s.variant.fast_exp = true;
    assert!(matches!(
        c.compile(&s, Arch::Sm80),
        Err(Error::InvalidVariant { .. })
    ));
    let mut s = spec();
    s.variant.family = fp8_sdpa::Family::Hopper;
    assert!(c.compile(&s, Arch::Sm80).is_err());
}

#[test]
fn fp8_helper_kernels_compile_for_every_arch() {
    let c = Compiler::with_cache(None);
    for arch in Arch::ALL {
        for t in ["half_t", "bf16_t"] {
            let m = c
                .compile_source(
                    &fp8_sdpa::kernels::FP8,
                    &[("QUANT_IN_T".into(), t.into())],
                    arch,
                )
                .unwrap();
            let names: Vec<&str> = m.resources.iter().map(|r| r.function.as_str()).collect();
            assert!(
                names.contains(&"quantize_e4m3_bshd") && names.contains(&"amax_bshd"),
                "{names:?}"
            );
            // The hardware entry points exist exactly where the hardware conversion does.
            assert_eq!(
                names.contains(&"e4m3_encode_f16_hw"),
                arch.has_fp8_cvt(),
                "{arch}: {names:?}"
            );
            for r in &m.resources {
                assert_eq!((r.stack_frame, r.spill_stores), (0, 0), "{arch} {r:?}");
            }
        }
    }
}

/// The paged-cache writer (`cache.cu`) in each of its four modes compiles on every arch
/// without spills or a stack frame (it is not a registered attention spec, so `sdpa-lab
/// check` does not see it).
#[test]
fn the_cache_writer_compiles_clean_in_every_mode() {
    let compiler = Compiler::with_cache(None);
    for arch in Arch::ALL {
        for in_t in ["half_t", "bf16_t"] {
            for e4m3 in ["0", "1"] {
                let defines = [
                    ("CACHE_IN_T".to_string(), in_t.to_string()),
                    ("CACHE_E4M3".to_string(), e4m3.to_string()),
                ];
                let m = compiler
                    .compile_source_ungated(&fp8_sdpa::kernels::CACHE, &defines, arch)
                    .unwrap();
                let r = m
                    .resources
                    .iter()
                    .find(|r| r.function == "write_paged_kv")
                    .unwrap_or_else(|| panic!("{arch} {in_t} {e4m3}: no report\n{}", m.log));
                assert!(
                    r.spill_stores == 0 && r.spill_loads == 0 && r.stack_frame == 0,
                    "{arch} {in_t} e4m3={e4m3}: {r:?}"
                );
            }
        }
    }
}
