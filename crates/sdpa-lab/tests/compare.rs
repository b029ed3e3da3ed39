//! `sdpa-lab compare` end to end on hand-made bench files (no GPU, no NVRTC).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

/// The fixture folder: from the crate's source tree, or from the working directory (the GPU
/// machine runs test binaries from a copy of the repository root, elsewhere).
fn fixtures() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/compare");
    if built.exists() {
        built
    } else {
        PathBuf::from("crates/sdpa-lab/tests/fixtures/compare")
    }
}

fn compare(args: &[&str], a: &Path, b: &Path) -> (Output, String) {
    let o = Command::new(common::bin())
        .arg("compare")
        .arg(a)
        .arg(b)
        .args(args)
        .output()
        .expect("run sdpa-lab");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    (o, stdout)
}

fn case(name: &str, extra: &[&str]) -> (Output, String) {
    let dir = fixtures().join(name);
    compare(extra, &dir.join("a.json"), &dir.join("b.json"))
}

/// The table line of a row (`suite/case ...`) and its implementation.
fn line<'a>(out: &'a str, row: &str, implementation: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(row) && l.contains(&format!(" {implementation} ")))
        .unwrap_or_else(|| panic!("no line for {row} {implementation} in\n{out}"))
}

#[test]
fn improvement_is_faster_and_passes() {
    let (o, out) = case("improvement", &[]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let ours = line(&out, "mission/small f16 graph", "fp8-sdpa");
    assert!(ours.contains("10.0") && ours.contains("8.00"), "{ours}");
    assert!(ours.contains("0.800 (-20.0%)"), "{ours}");
    assert!(ours.ends_with("faster"), "{ours}");
    let torch = line(&out, "mission/small f16 graph", "torch");
    assert!(torch.ends_with("within threshold"), "{torch}");
    assert!(out.contains("fp8-sdpa geometric mean B/A: 0.800 (-20.0%)."));
    assert!(out.contains("0 regression(s)"));
}

#[test]
fn regression_beyond_threshold_and_spread_exits_1() {
    let (o, out) = case("regression", &[]);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let ours = line(&out, "fa/d128_s4k f16 hot", "fp8-sdpa");
    assert!(ours.contains("1.121 (+12.1%)"), "{ours}");
    assert!(
        ours.contains("780–790") && ours.contains("875–885"),
        "{ours}"
    );
    assert!(ours.ends_with("REGRESSION"), "{ours}");
    // a peer slower by as much is reported, but does not fail the comparison
    assert!(line(&out, "fa/d128_s4k f16 hot", "torch").ends_with("slower"));
    assert!(line(&out, "fa/d128_s1k f16 hot", "fp8-sdpa").ends_with("within threshold"));
    assert!(out.contains("1 regression(s) of fp8-sdpa"), "{out}");

    // the same change under a 15 % threshold passes; "15%" is accepted too
    let (o, out) = case("regression", &["--threshold", "15%"]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(line(&out, "fa/d128_s4k f16 hot", "fp8-sdpa").ends_with("within threshold"));
}

#[test]
fn change_within_the_spread_is_not_flagged() {
    let (o, out) = case("spread", &[]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let ours = line(&out, "mission/mission f16 graph", "fp8-sdpa");
    assert!(ours.contains("1.100 (+10.0%)"), "{ours}");
    assert!(ours.ends_with("within spread"), "{ours}");
    assert!(!out.contains("REGRESSION"));
    // with no threshold the row is still only noise: the intervals overlap
    let (o, _) = case("spread", &["--threshold", "0"]);
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn renamed_backend_is_paired_and_said() {
    let (o, out) = case("renamed", &[]);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let ours = line(&out, "decode/b32_skv4k_hkv8 fp8kv_f16 hot", "fp8-sdpa");
    assert!(ours.contains("decode-split8 → decode-split16"), "{ours}");
    assert!(ours.contains("0.920 (-8.0%)"), "{ours}");
    assert!(ours.ends_with("faster, backend changed"), "{ours}");
    assert!(out.contains("(1 of fp8-sdpa, 1 across a backend change), 0 only in A, 0 only in B"));
    assert!(!out.contains("Only in"));
}

#[test]
fn rows_on_one_side_are_listed_and_folders_merge_bench_files() {
    let dir = fixtures().join("missing");
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("cmp");
    let (o, out) = compare(
        &["--out", out_dir.to_str().unwrap()],
        &dir.join("a"),
        &dir.join("b"),
    );
    assert_eq!(o.status.code(), Some(0), "{out}");
    // A's manifest.json, B's bench-file manifest: values, not serde's wrappers
    assert!(
        out.contains("A: ") && out.contains("(3 row(s) from 1 file(s))"),
        "{out}"
    );
    assert!(out.contains("(3 row(s) from 2 file(s))"), "{out}");
    assert!(out.contains("GPU NVIDIA H100 80GB HBM3 (sm_90a, 132 SMs, driver 13000)"));
    assert!(!out.contains("Ok"), "{out}");
    assert!(
        out.contains("Only in A (1):\n  fa/d128_s1k f16 hot fp8-sdpa hop-m128n128-w1p: 205 µs\n")
    );
    assert!(out.contains(
        "Only in B (1):\n  decode/b32_skv4k_hkv8 fp8kv_f16 hot fp8-sdpa decode-split16: 92.0 µs\n"
    ));
    // skipped in A, timed in B: matched, shown, not compared
    let torch = line(&out, "fa/d128_s4k f16 hot", "torch");
    assert!(
        torch.contains("not timed (A: skipped: No available kernel"),
        "{torch}"
    );

    let md = std::fs::read_to_string(out_dir.join("compare.md")).unwrap();
    assert!(md.contains("| row | implementation | backend | A p50 µs | B p50 µs | B/A |"));
    assert!(md.contains("## Only in A\n\n- fa/d128_s1k f16 hot fp8-sdpa hop-m128n128-w1p: 205 µs"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("compare.json")).unwrap())
            .unwrap();
    assert_eq!(json["threshold_pct"], 5.0);
    assert_eq!(json["pairs"].as_array().unwrap().len(), 2);
    assert_eq!(json["pairs"][0]["verdict"], "within_threshold");
    assert_eq!(json["pairs"][1]["verdict"], "not_timed");
    assert_eq!(json["only_in_a"][0]["case"], "d128_s1k");
    assert_eq!(json["only_in_b"][0]["backend"], "decode-split16");
    assert_eq!(json["b"]["files"].as_array().unwrap().len(), 2);
    assert_eq!(json["summary"]["regressions"], 0);
}

#[test]
fn unreadable_inputs_exit_2_naming_the_path() {
    let good = fixtures().join("improvement/a.json");
    let (o, _) = compare(&[], &good, Path::new("/nonexistent/run-b"));
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/nonexistent/run-b: no such file or folder"),
        "{err}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("bench.json");
    std::fs::write(&broken, "{\"schema_version\": 1, \"rows\": [").unwrap();
    let (o, _) = compare(&[], tmp.path(), &good);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}: not a bench file", broken.display())),
        "{err}"
    );

    let empty = tempfile::tempdir().unwrap();
    let (o, _) = compare(&[], empty.path(), &good);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no bench*.json in this folder"));

    let (o, _) = compare(&["--threshold", "-3"], &good, &good);
    assert_eq!(
        o.status.code(),
        Some(2),
        "clap rejects a negative threshold"
    );
}
