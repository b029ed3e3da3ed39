//! `sdpa-lab report` end to end on fixture artifacts (no GPU, no NVRTC).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

/// The fixture folder: from the crate's source tree, or from the working directory (the GPU
/// machine runs test binaries from a copy of the repository root, elsewhere).
fn fixture() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/artifacts");
    if built.exists() {
        built
    } else {
        PathBuf::from("crates/sdpa-lab/tests/data/artifacts")
    }
}

fn report(args: &[&Path]) -> Output {
    let mut cmd = Command::new(common::bin());
    cmd.arg("report");
    for a in args {
        cmd.arg(a);
    }
    cmd.output().expect("run sdpa-lab")
}

fn report_to(dir: &Path, out: &Path) -> Output {
    let out_flag = Path::new("--out");
    report(&[dir, out_flag, out])
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn fixture_renders_tables_and_plots() {
    let out = tempfile::tempdir().unwrap();
    let o = report_to(&fixture(), out.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = read(&out.path().join("summary.md"));

    // inputs: what was there and what was absent
    assert!(md.contains("- bench.json: 44 rows"), "{md}");
    assert!(md.contains("Absent: verify.json, stages.json."));
    assert!(md.contains("verify.json was absent."));
    // environment and ceilings
    assert!(md.contains("| device | NVIDIA H100 80GB HBM3 |"));
    assert!(md.contains("| gemm_fp8 | 1472 | TFLOPS |"));
    // mission: our 4.60 µs against cuDNN's 9.61 µs → 2.09×
    assert!(md.contains(
        "| mission | B2 H8 S512 D64 | f16 | graph | fp8-sdpa | port-m64n64w4s2-ct | 4.60 |"
    ));
    assert!(md.contains(
        "| mission | B2 H8 S512 D64 | f16 | graph | 4.60 µs | 233 | cudnn 9.61 µs | 112 | 2.09× |"
    ));
    // resources from check.json, preferring the manifest's arch (sm_90a: 96 regs, not 90)
    assert!(md.contains("96 regs, 36.0 KB smem"));
    assert!(!md.contains("90 regs"));
    assert!(md.contains("(gate FAIL)"));
    // fa: TFLOPS recomputed from the median, roofline percent against gemm_f16 811
    assert!(md.contains(
        "| d128_s4k | B4 H16 S4k D128 | f16 | hot | fp8-sdpa | hop-m128n128-w1p | 785 |"
    ));
    assert!(md.contains("| 700 | 342 | 86.3 |"));
    // skipped and failed rows keep their reasons; pipes in reasons are escaped
    assert!(md.contains("failed: CUDA out of memory"));
    assert!(md.contains("skipped: No available kernel. Aborting execution. \\| efficient"));
    assert!(md.contains("skipped: PyTorch SDPA has no FP8 kernel"));
    // FP8 compared with PyTorch at bf16: 859 / 544 µs
    assert!(md.contains(
        "| d128_s4k | B4 H16 S4k D128 | fp8 | hot | 544 µs | 1010 | cudnn 859 µs | 640 | 1.58× |"
    ));
    // decode FP8-KV against cuDNN fp16
    assert!(md.contains("| b32_skv4k_hkv8 | B32 H32/8 Sq1 Skv4k D128 | fp8kv_f16 | hot | 100 µs |"));
    assert!(md.contains("1.81×"));
    assert!(md.contains("fixture: numbers shaped like ANCHORS.md"));

    // plots exist, are linked, and carry titles, axis labels and series names
    for (file, series) in [
        ("plots/mission_graph.svg", "torch efficient"),
        (
            "plots/fa_f16_d128_noncausal_hot.svg",
            "fp8-sdpa hop-m128n128-w1p",
        ),
        ("plots/fa_bf16_d128_noncausal_hot.svg", "torch cudnn"),
        (
            "plots/decode_hot.svg",
            "fp8-sdpa decode-split16 (fp8kv_f16)",
        ),
        ("plots/fp8_fp8_d128_noncausal_hot.svg", "torch cudnn (bf16)"),
    ] {
        assert!(md.contains(&format!("]({file})")), "{file} not linked");
        let svg = read(&out.path().join(file));
        assert!(svg.starts_with("<svg"), "{file}");
        assert!(svg.contains(series), "{file} lacks series {series}");
    }
    let fa = read(&out.path().join("plots/fa_f16_d128_noncausal_hot.svg"));
    for text in [
        "fa: f16 D128 non-causal (hot) - TFLOPS vs sequence length",
        "TFLOPS (median run)",
        "sequence length",
        "torch flash",
        "torch cudnn",
        "torch efficient",
        ">\n1k\n<",
        ">\n16k\n<",
    ] {
        assert!(fa.contains(text), "fa plot lacks {text:?}");
    }
    let mission = read(&out.path().join("plots/mission_graph.svg"));
    // bars carry their values
    for text in ["mission-s256", "long", "4.60", "9.61", "137"] {
        assert!(mission.contains(text), "mission plot lacks {text:?}");
    }
}

#[test]
fn default_output_is_the_artifacts_folder() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["bench.json", "check.json", "manifest.json"] {
        std::fs::copy(fixture().join(f), dir.path().join(f)).unwrap();
    }
    let o = report(&[dir.path()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.path().join("summary.md").is_file());
    assert!(dir.path().join("plots/mission_graph.svg").is_file());
    assert!(String::from_utf8_lossy(&o.stdout).contains("44 rows from 1 bench file(s), 5 plot(s)"));
}

#[test]
fn missing_folder_is_exit_2_with_a_message() {
    let o = report(&[Path::new("/nonexistent/artifacts")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a folder"));
}

#[test]
fn a_folder_without_bench_files_is_an_error_that_says_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture().join("check.json"), dir.path().join("check.json")).unwrap();
    let o = report(&[dir.path()]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a report without bench rows is not a success"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no readable bench file in"), "{err}");
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    assert!(err.contains("bench*.json"), "{err}");
    assert!(
        err.contains("sdpa-lab bench --suite mission --out"),
        "{err}"
    );
    assert!(
        !dir.path().join("summary.md").exists(),
        "nothing is written for a folder without bench files"
    );
    // Bench files that cannot be read count as none, and are named with their reason.
    std::fs::write(dir.path().join("bench-broken.json"), "{").unwrap();
    let o = report(&[dir.path()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("could be read:\n  bench-broken.json: "),
        "{err}"
    );
}

#[test]
fn bad_files_are_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::copy(fixture().join("bench.json"), p.join("bench-a.json")).unwrap();
    std::fs::write(p.join("bench-broken.json"), "{").unwrap();
    std::fs::write(p.join("bench-future.json"), r#"{"schema_version": 99}"#).unwrap();
    std::fs::write(p.join("check.json"), "not json").unwrap();
    std::fs::write(
        p.join("verify.json"),
        r#"{"rows": [{"spec": "a", "passed": true}, {"spec": "b|c", "passed": false, "max_abs": 0.5}]}"#,
    )
    .unwrap();
    std::fs::write(
        p.join("stages.json"),
        r#"[{"stage": "env", "status": "ok", "seconds": 0.4}, {"stage": "profile", "status": "skipped: ncu not found"}]"#,
    )
    .unwrap();
    let o = report(&[p]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("skipped bench-broken.json"));
    assert!(err.contains("check.json could not be read"));
    let md = read(&p.join("summary.md"));
    assert!(md.contains("- bench-broken.json: unreadable, skipped"));
    assert!(md.contains("schema version 99 is newer"));
    assert!(md.contains("- check.json: unreadable (malformed JSON"));
    assert!(md.contains("2 record(s) in verify.json: 1 passed, 1 failed"));
    // failures first, pipes escaped
    let b = md
        .find("| b\\|c | false | 0.5 |")
        .expect("failing verify row");
    let a = md.find("| a | true | – |").expect("passing verify row");
    assert!(b < a);
    assert!(md.contains("2 record(s) in stages.json: 1 passed, 0 failed, 1 without a verdict."));
    assert!(md.contains("| stage | status | seconds |"));
    assert!(md.contains("| profile | skipped: ncu not found | – |"));
    // manifest falls back to the bench file's
    assert!(md.contains("From bench-a.json."));
}

/// The manifest as `sdpa-lab env` writes it: `Result` fields as `{"Ok": ..}` / `{"Err": ..}`.
fn real_manifest() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report/manifest.json");
    if built.exists() {
        built
    } else {
        PathBuf::from("crates/sdpa-lab/tests/fixtures/report/manifest.json")
    }
}

/// The text of one `## ` section of summary.md.
fn section<'a>(md: &'a str, title: &str) -> &'a str {
    let start = md
        .find(&format!("## {title}"))
        .unwrap_or_else(|| panic!("no section {title}"));
    let rest = &md[start + 3..];
    &md[start..start + 3 + rest.find("\n## ").unwrap_or(rest.len())]
}

#[test]
fn environment_shows_values_not_result_wrappers() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["bench.json", "check.json"] {
        std::fs::copy(fixture().join(f), dir.path().join(f)).unwrap();
    }
    std::fs::copy(real_manifest(), dir.path().join("manifest.json")).unwrap();
    let o = report(&[dir.path()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = read(&dir.path().join("summary.md"));
    let env = section(&md, "Environment");
    assert!(
        env.contains("| GPU | NVIDIA H100 80GB HBM3 (sm_90a, 132 SMs, driver 13000) |"),
        "{env}"
    );
    assert!(env.contains("| NVRTC | 13.0 (libnvrtc.so.13) |"), "{env}");
    assert!(
        env.contains("| PyTorch | unavailable: python3 cannot import torch: ModuleNotFoundError"),
        "{env}"
    );
    assert!(env.contains(
        "| Git commit | 84f1148e7e3dee48e9660f56e28f831a29922368 (uncommitted changes) |"
    ));
    assert!(
        env.contains("| Host | vm (linux x86_64, 16 CPUs) |"),
        "{env}"
    );
    assert!(!env.contains(".Ok") && !env.contains(".Err"), "{env}");
    assert!(!env.contains("| Ok") && !env.contains("{\""), "{env}");
    // the resources column picks the GPU's arch from gpu.Ok.arch (sm_90a: 96 regs, not 90)
    assert!(md.contains("96 regs, 36.0 KB smem"));
    assert!(!md.contains("90 regs"));
}

#[test]
fn plots_spanning_more_than_a_decade_use_a_log_axis() {
    let out = tempfile::tempdir().unwrap();
    let o = report_to(&fixture(), out.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // mission: 3.1 to 137 µs, over a decade: log axis, labelled so, with 1-2-5 ticks
    let mission = read(&out.path().join("plots/mission_graph.svg"));
    assert!(mission.contains("median µs per call (lower is better), log scale"));
    for tick in [">\n2\n<", ">\n5\n<", ">\n10\n<", ">\n100\n<"] {
        assert!(mission.contains(tick), "mission plot lacks tick {tick:?}");
    }
    // decode: 100 to 207 µs, within a decade: linear
    let decode = read(&out.path().join("plots/decode_hot.svg"));
    assert!(decode.contains("median µs per call (lower is better)"));
    assert!(!decode.contains("log scale"));
    let fa = read(&out.path().join("plots/fa_f16_d128_noncausal_hot.svg"));
    assert!(fa.contains("TFLOPS (median run)") && !fa.contains("median run, log scale"));
}
