//! `sdpa-lab profile` where it cannot profile (no ncu, no GPU), and the report's profile
//! table (no GPU, no ncu, no NVRTC).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

/// The binary as an absolute path: the tests below change PATH, which must not lose it.
fn bin() -> PathBuf {
    let b = PathBuf::from(common::bin());
    if b.components().count() > 1 {
        return b;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(&b))
        .find(|p| p.is_file())
        .expect("sdpa-lab on PATH")
}

fn profile(out: &Path, path_var: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .arg("profile")
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("PATH", path_var)
        // Hides any GPU, so the test means the same on the GPU machine.
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .expect("run sdpa-lab")
}

fn profile_json(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("profile.json")).expect("profile.json written");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn without_ncu_on_path_it_says_so_and_exits_3() {
    let empty = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let o = profile(out.path(), empty.path(), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("profile: not run: ncu (the Nsight Compute CLI) is not on PATH"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let v = profile_json(out.path());
    assert!(v["status"].as_str().unwrap().starts_with("not run: ncu"));
    assert!(v["reason"].as_str().unwrap().contains("--ncu /path/to/ncu"));
    assert_eq!(v["cases"].as_array().unwrap().len(), 0);
    let md = std::fs::read_to_string(out.path().join("profile.md")).unwrap();
    assert!(
        md.contains("Not run: ncu (the Nsight Compute CLI) is not on PATH"),
        "{md}"
    );
}

#[test]
fn an_ncu_path_that_is_not_there_is_named() {
    let out = tempfile::tempdir().unwrap();
    let o = profile(
        out.path(),
        Path::new("/usr/bin:/bin"),
        &["--ncu", "/nonexistent/ncu"],
    );
    assert_eq!(o.status.code(), Some(3));
    let v = profile_json(out.path());
    assert_eq!(
        v["reason"],
        "/nonexistent/ncu is not an executable file (--ncu)"
    );
}

#[cfg(unix)]
#[test]
fn with_ncu_but_no_gpu_it_says_so_and_exits_3() {
    use std::os::unix::fs::PermissionsExt;
    let bin_dir = tempfile::tempdir().unwrap();
    let ncu = bin_dir.path().join("ncu");
    std::fs::write(
        &ncu,
        "#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\necho 'Version 2099.1.0.0 (build 1) (public-release)'\n",
    )
    .unwrap();
    std::fs::set_permissions(&ncu, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = tempfile::tempdir().unwrap();
    let path =
        std::env::join_paths([bin_dir.path(), Path::new("/usr/bin"), Path::new("/bin")]).unwrap();
    let o = profile(out.path(), Path::new(&path), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("profile: not run: profiling needs a GPU"),
        "{stderr}"
    );
    let v = profile_json(out.path());
    assert_eq!(
        v["ncu_version"],
        "Version 2099.1.0.0 (build 1) (public-release)"
    );
    assert_eq!(v["ncu"], ncu.to_string_lossy().as_ref());
}

/// A profile.json as a GPU run writes it: one decode case whose bench median is 19 % over
/// ncu's, one prefill case that agrees.
const PROFILE: &str = r#"{
  "schema_version": 1, "status": "ok", "taken_at": "2026-11-26T10:00:00Z",
  "device": "NVIDIA H100 80GB HBM3", "ncu": "/usr/local/cuda/bin/ncu",
  "ncu_version": "Version 2025.3.0.0", "collect_command": "ncu --clock-control none ...",
  "import_command": "ncu --import profile/000.ncu-rep --csv --page raw --print-units base",
  "metrics": ["gpu__time_duration.sum"], "tolerance_pct": 10.0,
  "reference_bench": "profile/bench.json",
  "cases": [
    {"suite": "fa", "case": "d128_s4k", "precision": "f16", "variant": "hop-x", "status": "ok",
     "bench_median_us": 1230.0, "calls": 10, "call_us": 1214.5, "files": [],
     "kernels": [{"kernel": "sdpa_hopper", "launches": 10, "block": "(384, 1, 1)",
       "grid": "(32, 16, 4)", "duration_us": 1214.5, "sm_throughput_pct": 62.1,
       "dram_throughput_pct": 4.2, "achieved_occupancy_pct": 18.7,
       "registers_per_thread": 168.0, "l2_hit_rate_pct": 80.1, "tensor_pipe_pct": 70.6,
       "wgmma_instructions": 1048576.0}]},
    {"suite": "decode", "case": "b32_sq1_skv4k_hkv8", "precision": "f16", "variant": "dec-y",
     "status": "ok", "bench_median_us": 50.0, "calls": 5, "call_us": 42.0, "files": [],
     "kernels": [
       {"kernel": "sdpa_decode", "launches": 5, "block": "(128, 1, 1)", "grid": "(8, 8, 32)",
        "duration_us": 39.0, "sm_throughput_pct": 41.5, "dram_throughput_pct": 86.4,
        "achieved_occupancy_pct": 45.2, "registers_per_thread": 96.0, "l2_hit_rate_pct": 12.5,
        "tensor_pipe_pct": 9.5, "wgmma_instructions": 0.0},
       {"kernel": "sdpa_decode_merge", "launches": 5, "block": "(128, 1, 1)",
        "grid": "(32, 32, 1)", "duration_us": 3.0, "sm_throughput_pct": 8.5,
        "dram_throughput_pct": 20.6, "achieved_occupancy_pct": 30.2,
        "registers_per_thread": 40.0, "l2_hit_rate_pct": 60.5, "tensor_pipe_pct": null,
        "wgmma_instructions": null}]}
  ],
  "truth": [
    {"suite": "fa", "case": "d128_s4k", "precision": "f16", "variant": "hop-x",
     "bench_median_us": 1230.0, "ncu_us": 1214.5, "ratio": 1.0128, "flagged": false,
     "verdict": "agree"},
    {"suite": "decode", "case": "b32_sq1_skv4k_hkv8", "precision": "f16", "variant": "dec-y",
     "bench_median_us": 50.0, "ncu_us": 42.0, "ratio": 1.1905, "flagged": true,
     "verdict": "differ by +19 %"}
  ]
}"#;

/// An artifacts folder holding the fixture's bench.json (a report needs bench rows).
fn folder_with_bench() -> tempfile::TempDir {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/artifacts/bench.json");
    let src = if built.exists() {
        built
    } else {
        PathBuf::from("crates/sdpa-lab/tests/data/artifacts/bench.json")
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(src, dir.path().join("bench.json")).unwrap();
    dir
}

#[test]
fn report_shows_the_profile_table_with_the_truth_column() {
    let dir = folder_with_bench();
    std::fs::write(dir.path().join("profile.json"), PROFILE).unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(dir.path())
        .output()
        .expect("run sdpa-lab");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(md.contains("- profile.json: read"), "{md}");
    assert!(md.contains("## Profile (profile.json)"), "{md}");
    assert!(
        md.contains("2 case(s), 2 profiled; 1 where the bench median"),
        "{md}"
    );
    assert!(md.contains(
        "| fa/d128_s4k | f16 | hop-x | 1230 | 1214 | 1.01 | agree | sdpa_hopper | 10 | 1214 | 62.1 | 4.2 | 18.7 | 168 | 80.1 | 70.6 | 1048576 |"
    ), "{md}");
    assert!(md.contains(
        "| decode/b32_sq1_skv4k_hkv8 | f16 | dec-y | 50.0 | 42.0 | 1.19 | **FLAG** differ by +19 % | sdpa_decode |"
    ), "{md}");
    assert!(md.contains("| | | | | | | | sdpa_decode_merge | 5 | 3.00 | 8.5 | 20.6 | 30.2 | 40 | 60.5 | – | – |"), "{md}");
}

#[test]
fn report_without_profile_json_has_no_profile_section() {
    let dir = folder_with_bench();
    let o = Command::new(bin())
        .arg("report")
        .arg(dir.path())
        .output()
        .expect("run sdpa-lab");
    assert!(o.status.success());
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(!md.contains("Profile"), "{md}");
    assert!(!md.contains("profile.json"), "{md}");
}
