//! `sdpa-lab attn` names a problem's own faults (head dim, GQA ratio, shapes, lengths,
//! scale) in the library's words before it opens a device: so on a machine without a GPU
//! too, and before any stride or alignment rule that a bad head dim also breaks.

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::Path;
use std::process::Output;

mod common;

/// Writes f16 `q`, `k`, `v` of the given shapes (BSHD, zeros) to `dir/name`.
fn inputs(dir: &Path, name: &str, q: [usize; 4], kv: [usize; 4]) -> std::path::PathBuf {
    let bytes = |s: [usize; 4]| vec![0u8; s.iter().product::<usize>() * 2];
    let (qb, kb, vb) = (bytes(q), bytes(kv), bytes(kv));
    let views = vec![
        ("q", TensorView::new(Dtype::F16, q.to_vec(), &qb).unwrap()),
        ("k", TensorView::new(Dtype::F16, kv.to_vec(), &kb).unwrap()),
        ("v", TensorView::new(Dtype::F16, kv.to_vec(), &vb).unwrap()),
    ];
    let p = dir.join(name);
    std::fs::write(&p, safetensors::serialize(views, None).unwrap()).unwrap();
    p
}

/// `sdpa-lab attn` on `input` with `extra` arguments; `--device 99` so that a valid problem
/// fails at the device on any machine, after the problem's checks.
fn attn(input: &Path, extra: &[&str]) -> (Output, String) {
    let out = input.with_extension("out.safetensors");
    let o = std::process::Command::new(common::bin())
        .arg("attn")
        .arg("--inputs")
        .arg(input)
        .arg("--out")
        .arg(&out)
        .args(["--device", "99"])
        .args(extra)
        .output()
        .expect("run sdpa-lab");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!out.exists(), "no output for a failed call");
    (o, err)
}

/// The run failed with a validation error that says `what`, and nothing about a GPU.
fn refused(o: &Output, err: &str, what: &str) {
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid attention input"), "{err}");
    assert!(err.contains(what), "{err}");
    assert!(
        !err.contains("needs a GPU"),
        "the problem is named first: {err}"
    );
}

/// A head dim the kernels lack is named, though its rows (59 or 111 f16 elements) are not
/// 16-byte aligned either.
fn unsupported_head_dim(d: usize) {
    let dir = tempfile::tempdir().unwrap();
    let f = inputs(dir.path(), &format!("d{d}.st"), [2, 8, 4, d], [2, 8, 4, d]);
    let (o, err) = attn(&f, &[]);
    refused(&o, &err, &format!("head dim {d} is not supported"));
    assert!(!err.contains("stride"), "D{d}: {err}");
}

#[test]
fn head_dim_59_is_named_not_a_stride() {
    unsupported_head_dim(59);
}

#[test]
fn head_dim_111_is_named_not_a_stride() {
    unsupported_head_dim(111);
}

#[test]
fn a_gqa_ratio_that_does_not_divide_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = inputs(dir.path(), "gqa.st", [1, 8, 6, 64], [1, 8, 4, 64]);
    let (o, err) = attn(&f, &[]);
    refused(&o, &err, "heads_q (6) must be a multiple of heads_kv (4)");
}

#[test]
fn mismatched_shapes_zero_lengths_and_bad_scales_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = inputs(dir.path(), "batch.st", [2, 8, 4, 64], [1, 8, 4, 64]);
    let (o, err) = attn(&f, &[]);
    refused(&o, &err, "Q batch 2 and K/V batch 1 differ");
    let f = inputs(dir.path(), "empty.st", [1, 0, 4, 64], [1, 8, 4, 64]);
    let (o, err) = attn(&f, &[]);
    refused(&o, &err, "Q has a zero-length dimension");
    let f = inputs(dir.path(), "ok.st", [1, 8, 4, 64], [1, 8, 4, 64]);
    let (o, err) = attn(&f, &["--scale=-1"]);
    refused(&o, &err, "softmax scale must be finite and > 0, got -1");
}

#[test]
fn a_valid_problem_without_its_gpu_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let f = inputs(dir.path(), "ok.st", [1, 8, 4, 64], [1, 8, 2, 64]);
    let (o, err) = attn(&f, &[]);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the inputs are valid, but attn needs a GPU to run them"),
        "{err}"
    );
    assert!(!err.contains("invalid attention input"), "{err}");
}
