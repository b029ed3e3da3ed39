//! A kernel cache that cannot be used costs time, never the call: compiles go on in memory.
//! Against the real NVRTC (no GPU needed), like tests/compile.rs.

use fp8_sdpa::compile::{cache::CACHE_ENV, Cache, Compiler, Origin};
use fp8_sdpa::{Arch, KernelSpec, Precision, Variant};

fn spec() -> KernelSpec {
    KernelSpec {
        variant: Variant::reference(),
        precision: Precision::F16,
        head_dim: 64,
        causal: false,
    }
}

/// The folder was usable when the compiler was made and is a regular file when the entry is
/// written: the compile still returns its kernel.
#[test]
fn a_cache_that_cannot_be_written_does_not_fail_the_compile() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kernels");
    let compiler = Compiler::with_cache(Some(Cache::at(&dir).unwrap()));
    std::fs::remove_dir(&dir).unwrap();
    std::fs::write(&dir, b"not a folder").unwrap();
    let c = compiler.compile(&spec(), Arch::Sm80).unwrap();
    assert_eq!(&c.cubin[..4], b"\x7fELF");
    assert_eq!(c.origin, Origin::Compiled);
}

/// Set in the child process of `an_uncreatable_cache_folder_does_not_fail_the_compile`.
const PROBE_ENV: &str = "SDPA_TEST_UNCREATABLE_CACHE_PROBE";

/// `$SDPA_CACHE_DIR` names a folder under a regular file (in a child process: the environment
/// is process-wide): `Compiler::new` and the compile still succeed.
#[test]
fn an_uncreatable_cache_folder_does_not_fail_the_compile() {
    if std::env::var_os(PROBE_ENV).is_some() {
        let c = Compiler::new()
            .unwrap()
            .compile(&spec(), Arch::Sm80)
            .unwrap();
        assert_eq!(&c.cubin[..4], b"\x7fELF");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_uncreatable_cache_folder_does_not_fail_the_compile",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROBE_ENV, "1")
        .env(CACHE_ENV, file.join("kernels"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    assert_eq!(
        text.matches("warning:").count(),
        1,
        "one warning expected:\n{text}"
    );
}
