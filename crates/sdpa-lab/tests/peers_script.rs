//! Argument handling of `scripts/peers.py` (no torch, no GPU needed), and its statistics and
//! FLOP counting against the same hand-computed samples as the Rust side.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A repository file: from the crate's source tree, or from the working directory (the GPU
/// machine runs test binaries from a copy of the repository root, elsewhere).
fn repo_file(rel: &str) -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    if built.exists() {
        built
    } else {
        PathBuf::from(rel)
    }
}

fn script() -> PathBuf {
    repo_file("scripts/peers.py")
}

fn cases_fixture() -> PathBuf {
    repo_file("crates/sdpa-lab/tests/data/peer_cases.json")
}

/// python3 must run here: these tests fail, never skip, without it.
fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "python3 is needed to test scripts/peers.py");
    ok
}

fn peers(args: &[&str], pythonpath: Option<&Path>) -> Output {
    let mut cmd = Command::new("python3");
    cmd.arg(script()).args(args);
    if let Some(p) = pythonpath {
        cmd.env("PYTHONPATH", p);
    }
    cmd.output().expect("run python3")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A folder whose package `name` fails to import with `ImportError(message)`, shadowing any
/// real one, so the "not installed" paths are tested the same way on every machine.
fn fake_package(name: &str, message: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join(name)).unwrap();
    std::fs::write(
        d.path().join(name).join("__init__.py"),
        format!("raise ImportError('{message}')\n"),
    )
    .unwrap();
    d
}

/// A folder whose `torch` package fails to import (see [`fake_package`]).
fn fake_torch() -> tempfile::TempDir {
    fake_package("torch", "fake torch for tests")
}

#[test]
fn compiles() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new("python3")
        .args(["-m", "py_compile"])
        .arg(script())
        // keep __pycache__ out of the source tree
        .env("PYTHONPYCACHEPREFIX", dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn help_works_without_torch() {
    if !have_python() {
        return;
    }
    let t = fake_torch();
    let o = peers(&["--help"], Some(t.path()));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("--cases") && out.contains("--backends") && out.contains("--device"));
}

#[test]
fn missing_arguments_exit_2() {
    if !have_python() {
        return;
    }
    let o = peers(&[], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--cases"));
}

#[test]
fn missing_cases_file_exits_2() {
    if !have_python() {
        return;
    }
    let o = peers(
        &["--cases", "/nonexistent/cases.json", "--out", "/tmp/x.json"],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cases file not found: /nonexistent/cases.json"));
}

#[test]
fn malformed_json_exits_2() {
    if !have_python() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("cases.json");
    std::fs::write(&bad, "[{\"suite\": ").unwrap();
    let out = d.path().join("out.json");
    let o = peers(
        &[
            "--cases",
            bad.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("malformed JSON"), "{}", stderr(&o));
    // not a list, and a case missing a field
    std::fs::write(&bad, "{}").unwrap();
    let o = peers(
        &[
            "--cases",
            bad.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("expected a JSON list of cases"));
    std::fs::write(&bad, r#"[{"suite": "x"}]"#).unwrap();
    let o = peers(
        &[
            "--cases",
            bad.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("case 0: missing field 'case'"));
}

#[test]
fn too_few_iterations_exit_2() {
    if !have_python() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(cases_fixture())
        .unwrap()
        .replace("\"iters\": 100", "\"iters\": 5");
    let p = d.path().join("cases.json");
    std::fs::write(&p, text).unwrap();
    let o = peers(
        &["--cases", p.to_str().unwrap(), "--out", "/tmp/x.json"],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("iters 5 < 100"));
}

#[test]
fn unknown_backend_exits_2() {
    if !have_python() {
        return;
    }
    let c = cases_fixture();
    let o = peers(
        &[
            "--cases",
            c.to_str().unwrap(),
            "--out",
            "/tmp/x.json",
            "--backends",
            "flash,math",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown backend 'math'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn no_torch_exits_2_and_says_what_is_needed() {
    if !have_python() {
        return;
    }
    let t = fake_torch();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("peers.json");
    // The fixture is the format sdpa-lab writes (checked by a unit test): it passes validation
    // and the script gets as far as importing torch.
    let o = peers(
        &[
            "--cases",
            cases_fixture().to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        Some(t.path()),
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("peers need PyTorch with CUDA"), "{e}");
    assert!(e.contains("fake torch for tests"), "{e}");
    assert!(!out.exists(), "no output before torch is available");
}

/// Runs a Python expression with the script loaded as module `p` and parses its JSON output.
fn py_eval(expr: &str) -> serde_json::Value {
    py_eval_with(expr, None)
}

/// [`py_eval`] with `pythonpath` (e.g. a [`fake_package`] folder) first on the import path.
fn py_eval_with(expr: &str, pythonpath: Option<&Path>) -> serde_json::Value {
    let code = format!(
        "import importlib.util, json, sys\n\
         spec = importlib.util.spec_from_file_location('p', sys.argv[1])\n\
         p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)\n\
         print(json.dumps({expr}))\n"
    );
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &code])
        .arg(script())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    if let Some(p) = pythonpath {
        cmd.env("PYTHONPATH", p);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn close(v: &serde_json::Value, want: f64) -> bool {
    (v.as_f64().unwrap() - want).abs() < 1e-9 * want.abs().max(1.0)
}

#[test]
fn statistics_match_the_rust_definition() {
    if !have_python() {
        return;
    }
    // same hand-computed samples as bench::stats's unit tests
    let s = py_eval("p.stats(range(1, 11))");
    assert!(close(&s["median_us"], 5.5));
    assert!(close(&s["p10_us"], 1.9));
    assert!(close(&s["p90_us"], 9.1));
    assert!(close(&s["p99_us"], 9.91));
    assert!(close(&s["std_us"], (82.5f64 / 9.0).sqrt()));
    assert_eq!(s["n"], 10);
    let s = py_eval("p.stats(list(range(100, 0, -1)))");
    assert!(close(&s["p10_us"], 10.9));
    assert!(close(&s["p99_us"], 99.01));
    let s = py_eval("p.stats([7.25])");
    assert!(close(&s["std_us"], 0.0) && close(&s["p99_us"], 7.25));
    let s = py_eval("p.stats([3.0] * 150)");
    assert!(close(&s["cv"], 0.0));
}

#[test]
fn flops_match_the_rust_definition() {
    if !have_python() {
        return;
    }
    let shape = |b: u32, sq: u32, skv: u32, h: u32| {
        format!(
            "{{'batch': {b}, 'seq_q': {sq}, 'seq_kv': {skv}, 'heads_q': {h}, 'heads_kv': 1, 'head_dim': 128}}"
        )
    };
    // bottom-right causal, Sq 2 Skv 5: 4 + 5 pairs per head
    let v = py_eval(&format!("p.flops({}, True)", shape(3, 2, 5, 2)));
    assert!(close(&v, 4.0 * 9.0 * 3.0 * 2.0 * 128.0));
    // Sq 5 Skv 2: 0 + 0 + 0 + 1 + 2
    let v = py_eval(&format!("p.attended_pairs({}, True)", shape(1, 5, 2, 1)));
    assert_eq!(v, 3);
    let v = py_eval(&format!("p.flops({}, False)", shape(1, 3, 7, 1)));
    assert!(close(&v, 4.0 * 21.0 * 128.0));
}

/// A case as sdpa-lab writes it, as a Python literal: decode-shaped (Sq 1) unless told.
fn case_literal(seq_q: u32, precision: &str) -> String {
    format!(
        "{{'suite': 'decode', 'case': 'b32_skv4k_hkv8', 'shape': {{'batch': 32, 'seq_q': {seq_q}, \
         'seq_kv': 4096, 'heads_q': 32, 'heads_kv': 8, 'head_dim': 128}}, \
         'precision': '{precision}', 'causal': False, 'mode': 'hot', 'warmup': 10, 'iters': 100}}"
    )
}

#[test]
fn flashinfer_missing_is_a_clean_skip() {
    if !have_python() {
        return;
    }
    // No torch is needed up to the import of flashinfer, which fails here whatever is installed.
    let f = fake_package("flashinfer", "fake flashinfer for tests");
    let v = py_eval_with(
        &format!(
            "[p.flashinfer_unsupported({c}), p.load_flashinfer()[0] is None, \
             p.flashinfer_missing(p.load_flashinfer()[1]), \
             p.blank_row({c}, 'flashinfer', 'ok')['implementation']]",
            c = case_literal(1, "fp8_kv_f16")
        ),
        Some(f.path()),
    );
    assert!(v[0].is_null(), "a decode FP8-KV case is FlashInfer's: {v}");
    assert!(v[1].as_bool().unwrap(), "{v}");
    assert_eq!(
        v[2],
        "skipped: FlashInfer not installed (flashinfer: ImportError: fake flashinfer for tests)"
    );
    assert_eq!(v[3], "flashinfer");
}

#[test]
fn flashinfer_skips_non_decode_cases_with_a_reason() {
    if !have_python() {
        return;
    }
    let v = py_eval(&format!(
        "[p.flashinfer_unsupported({}), p.flashinfer_unsupported({}), \
         p.flashinfer_unsupported({}), p.parse_backends('flashinfer,fa3')]",
        case_literal(256, "f16"),
        case_literal(1, "fp8"),
        case_literal(1, "bf16"),
    ));
    assert_eq!(
        v[0],
        "FlashInfer peer covers decode only (seq_q 1), this case has seq_q 256"
    );
    let p = v[1].as_str().unwrap();
    assert!(p.contains("fp8_kv_f16") && p.ends_with("not fp8"), "{p}");
    assert!(v[2].is_null());
    assert_eq!(v[3], serde_json::json!(["flashinfer", "fa3"]));
}

#[test]
fn flashinfer_backend_is_accepted_and_needs_torch() {
    if !have_python() {
        return;
    }
    let t = fake_torch();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("peers.json");
    let o = peers(
        &[
            "--cases",
            cases_fixture().to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--backends",
            "flashinfer",
        ],
        Some(t.path()),
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("peers need PyTorch with CUDA"), "{e}");
    assert!(!e.contains("unknown backend"), "{e}");
}

#[test]
fn cudnn_fp8_missing_is_a_clean_skip() {
    if !have_python() {
        return;
    }
    // No torch is needed up to the import of the cuDNN frontend, which fails here whatever is
    // installed.
    let f = fake_package("cudnn", "fake cudnn frontend for tests");
    let v = py_eval_with(
        &format!(
            "[p.cudnn_fp8_unsupported({c}), p.load_cudnn_frontend()[0] is None, \
             p.cudnn_fp8_missing(p.load_cudnn_frontend()[1]), \
             p.blank_row({c}, 'cudnn_fp8', 'ok')['implementation'], \
             p.parse_backends('cudnn_fp8,fa3')]",
            c = case_literal(256, "fp8")
        ),
        Some(f.path()),
    );
    assert!(
        v[0].is_null(),
        "a full-FP8 case is the cuDNN FP8 peer's: {v}"
    );
    assert!(v[1].as_bool().unwrap(), "{v}");
    assert_eq!(
        v[2],
        "skipped: cuDNN frontend not usable (cudnn: ImportError: fake cudnn frontend for tests)"
    );
    assert_eq!(v[3], "cudnn_fp8");
    assert_eq!(v[4], serde_json::json!(["cudnn_fp8", "fa3"]));
}

#[test]
fn cudnn_fp8_skips_other_precisions_and_unmaskable_causal_cases() {
    if !have_python() {
        return;
    }
    // Sq 4 > Skv 2 under a bottom-right causal mask: no diagonal band expresses it.
    let tall = case_literal(4, "fp8")
        .replace("'seq_kv': 4096", "'seq_kv': 2")
        .replace("'causal': False", "'causal': True");
    let v = py_eval(&format!(
        "[p.cudnn_fp8_unsupported({}), p.cudnn_fp8_unsupported({}), p.cudnn_fp8_unsupported({}), \
         [p.pow2_scale(a, 224.0) for a in (1.5, 224.0, 0.0, float('nan'), 1e-3)]]",
        case_literal(1, "fp8_kv_f16"),
        case_literal(256, "bf16"),
        tall,
    ));
    assert_eq!(
        v[0],
        "the cuDNN FP8 peer runs full FP8 only, not fp8_kv_f16"
    );
    assert_eq!(v[1], "the cuDNN FP8 peer runs full FP8 only, not bf16");
    assert!(
        v[2].as_str()
            .unwrap()
            .starts_with("causal with seq_q > seq_kv"),
        "{v}"
    );
    // the largest power of two keeping amax * s within the target; 1 for an unusable amax
    assert_eq!(v[3], serde_json::json!([128.0, 1.0, 1.0, 1.0, 131072.0]));
}

#[test]
fn cudnn_fp8_backend_is_accepted_and_needs_torch() {
    if !have_python() {
        return;
    }
    let t = fake_torch();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("peers.json");
    let o = peers(
        &[
            "--cases",
            cases_fixture().to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--backends",
            "cudnn_fp8",
        ],
        Some(t.path()),
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("peers need PyTorch with CUDA"), "{e}");
    assert!(!e.contains("unknown backend"), "{e}");
}
