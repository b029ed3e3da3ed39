//! `sdpa-lab bench` end to end on the GPU. Run on the device machine with `--include-ignored`;
//! set `SDPA_LAB_BIN` when the binary is not where cargo built it.

use std::process::Command;

mod common;
use common::bin;

/// NVRTC 12.9+ keeps a disk cache of its own, and a hit there skips ptxas and so the `-v`
/// report the gates read. On the H100 machine, a second process compiling the same programs
/// with a CUDA context open got empty logs, and its bench rows failed (perf-notes: NVRTC's
/// disk cache: the second of two such benches failed both rows without `--no-cache`). So: two bench
/// processes, each with an empty kernel cache of ours, and every row of both is timed.
#[test]
#[ignore = "needs a GPU"]
fn a_second_bench_process_compiles_with_its_resource_reports() {
    for round in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("bench.json");
        let o = Command::new(bin())
            .args(["bench", "--suite", "fp8", "--quick", "--filter", "d64_s1k"])
            .args(["--precision", "fp8kv_bf16", "--no-ceilings", "--out"])
            .arg(&out)
            .env("SDPA_CACHE_DIR", dir.path().join("cache"))
            .output()
            .unwrap();
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "bench {round} failed:\n{log}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let rows = json["rows"].as_array().unwrap();
        assert_eq!(
            rows.len(),
            2,
            "bench {round}: two cases (S 1k, causal and not):\n{log}"
        );
        for r in rows {
            assert_eq!(r["status"], "ok", "bench {round}: {r}");
        }
    }
}
