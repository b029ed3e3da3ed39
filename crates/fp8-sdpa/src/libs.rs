//! Finding NVRTC and the CUDA driver at run time.
//!
//! cudarc `dlopen`s bare library names and panics when none loads. We search first — an
//! explicit environment variable (`SDPA_NVRTC_PATH`, the user's choice), the loader path
//! (`LD_LIBRARY_PATH`, ld.so.cache), then the CUDA toolkit's fixed folders (`$CUDA_HOME`,
//! `$CUDA_PATH`, `/usr/local/cuda`) — and open the library we find by absolute path with
//! `RTLD_GLOBAL`. The dynamic loader matches a later `dlopen("libnvrtc.so.13")` against the
//! SONAME of an already loaded object, so cudarc then binds to ours. A miss is
//! [`Error::LibraryNotFound`] listing every place tried.
//!
//! Never searched: the working directory or its ancestors, or folders near the executable
//! (anyone who can write such a folder could plant a library whose constructor runs in this
//! process), and no program is run to find Python's site-packages. A pip-installed NVRTC
//! (`nvidia-cuda-nvrtc`, in `<site-packages>/nvidia/cu13/lib`) is used through
//! `SDPA_NVRTC_PATH`, which `scripts/test.sh` sets for the copy it installs in `.nvrtc/`.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming libnvrtc (the file or its folder).
pub const NVRTC_ENV: &str = "SDPA_NVRTC_PATH";
/// Environment variable naming libcuda (the file or its folder).
pub const DRIVER_ENV: &str = "SDPA_CUDA_DRIVER_PATH";

/// The NVRTC majors this library compiles with, newest first (12.6 is the oldest release it
/// accepts: `compile::nvrtc::OLDEST`).
const NVRTC_MAJORS: [i32; 2] = [13, 12];
const DRIVER_NAMES: [&str; 1] = ["libcuda.so.1"];

/// Where a library was loaded from.
#[derive(Debug, Clone)]
pub struct Located {
    /// The path or bare name that opened.
    pub path: String,
    /// Why this one, where there was a choice (NVRTC: the driver's CUDA major).
    pub reason: String,
}

const CUBLASLT_NAMES: [&str; 2] = ["libcublasLt.so.13", "libcublasLt.so.12"];
static CUBLASLT: OnceLock<std::result::Result<Located, Vec<String>>> = OnceLock::new();

/// Makes cuBLASLt loadable for cudarc (the lab's GEMM ceiling), or explains where it looked.
pub fn ensure_cublaslt() -> Result<Located> {
    CUBLASLT
        .get_or_init(|| locate("SDPA_CUBLASLT_PATH", &CUBLASLT_NAMES, &nvrtc_dirs(), false))
        .clone()
        .map_err(|looked| Error::LibraryNotFound {
            what: "cuBLASLt (libcublasLt.so.13)",
            looked,
            fix: "install the CUDA toolkit, or set SDPA_CUBLASLT_PATH to the folder holding libcublasLt.so.13 \
                  (for the pip package nvidia-cublas: <site-packages>/nvidia/cu13/lib)",
        })
}

static NVRTC: OnceLock<std::result::Result<Located, Vec<String>>> = OnceLock::new();
static DRIVER: OnceLock<std::result::Result<Located, Vec<String>>> = OnceLock::new();

/// Finds and loads NVRTC, or explains where it looked. Cheap after the first call.
///
/// With a driver present, the NVRTC whose major matches the driver's CUDA major comes first
/// (`cuDriverGetVersion`), then older majors; a newer major comes last, so that opening a
/// device then says the driver is too old rather than that nothing was found. Without a
/// driver (compiling offline), the newest. `$SDPA_NVRTC_PATH` naming a file takes that file.
pub fn ensure_nvrtc() -> Result<Located> {
    NVRTC
        // No CUDA_CACHE_DISABLE here: it did not stop NVRTC's disk cache (`--no-cache` in
        // nvrtc::base_options does), and setting it would need the unsound std::env::set_var.
        .get_or_init(|| {
            let driver = driver_cuda_version();
            let names = nvrtc_names(driver.map(|v| v / 1000));
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            locate(NVRTC_ENV, &names, &nvrtc_dirs(), true).map(|mut l| {
                l.reason = match driver {
                    Some(v) => format!("driver CUDA {}.{}", v / 1000, v % 1000 / 10),
                    None => "no driver: the newest found".into(),
                };
                l
            })
        })
        .clone()
        .map_err(|looked| Error::LibraryNotFound {
            what: "NVRTC (libnvrtc.so.13 or libnvrtc.so.12)",
            looked,
            fix: "set SDPA_NVRTC_PATH to the folder holding libnvrtc: for the pip package \
                  (`pip install nvidia-cuda-nvrtc==13.0.*`, or `nvidia-cuda-nvrtc-cu12` 12.6 or newer for a \
                  CUDA 12 driver) that is <site-packages>/nvidia/cu13/lib (or nvidia/cuda_nvrtc/lib), for this \
                  project's `scripts/test.sh` install .nvrtc/nvidia/cu13/lib; or install the CUDA toolkit",
        })
}

/// NVRTC's file names in the order they are tried, for a driver of CUDA major `driver_major`
/// (None: no driver): that major, then older ones, then newer ones.
pub fn nvrtc_names(driver_major: Option<i32>) -> Vec<String> {
    let mut majors = NVRTC_MAJORS.to_vec();
    if let Some(d) = driver_major {
        // Stable sort: majors the driver runs (<= d), newest first, then the rest.
        majors.sort_by_key(|&m| (m > d, if m > d { m } else { -m }));
    }
    majors
        .into_iter()
        .map(|m| format!("libnvrtc.so.{m}"))
        .collect()
}

/// The driver's CUDA version (1000 x major + 10 x minor), or None without a driver.
fn driver_cuda_version() -> Option<i32> {
    ensure_driver().ok()?;
    let mut v = 0i32;
    // SAFETY: libcuda is loaded (ensure_driver); cuDriverGetVersion needs no cuInit and
    // writes one int to a valid out-pointer.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS && v > 0).then_some(v)
}

/// Makes the CUDA driver loadable for cudarc, or explains where it looked.
pub fn ensure_driver() -> Result<Located> {
    DRIVER
        .get_or_init(|| locate(DRIVER_ENV, &DRIVER_NAMES, &driver_dirs(), false))
        .clone()
        .map_err(|looked| Error::LibraryNotFound {
            what: "CUDA driver (libcuda.so.1)",
            looked,
            fix: "this needs an NVIDIA GPU with its driver installed; if the driver is in an unusual place, \
                  set SDPA_CUDA_DRIVER_PATH to the folder holding libcuda.so.1",
        })
}

/// NCCL as cudarc opens it: by the bare name `libnccl.so` (cudarc's candidates do not include
/// the pip package's `libnccl.so.2`). Checked first so that a missing NCCL is a typed error
/// and not cudarc's panic; `sdpa-lab cp-bench` links `libnccl.so` for its ranks from
/// `$SDPA_NCCL_PATH` or PyTorch's `nvidia-nccl-cu13` package.
pub fn ensure_nccl() -> Result<Located> {
    match open_global(Path::new("libnccl.so")) {
        Ok(()) => Ok(Located {
            path: "libnccl.so".into(),
            reason: String::new(),
        }),
        Err(e) => Err(Error::LibraryNotFound {
            what: "NCCL (libnccl.so)",
            looked: vec![format!("libnccl.so on the loader path: {e}")],
            fix: "put a libnccl.so (a link to libnccl.so.2 will do) in a folder on LD_LIBRARY_PATH; \
                  `sdpa-lab cp-bench` does this for its ranks from SDPA_NCCL_PATH or PyTorch's nvidia-nccl-cu13 package",
        }),
    }
}

/// Whether a GPU driver is present (no error detail).
pub fn driver_present() -> bool {
    ensure_driver().is_ok()
}

fn locate(
    env: &str,
    names: &[&str],
    dirs: &[PathBuf],
    with_builtins: bool,
) -> std::result::Result<Located, Vec<String>> {
    locate_with(env, std::env::var_os(env), names, dirs, with_builtins)
}

/// `locate` with the environment variable's value given.
fn locate_with(
    env: &str,
    env_value: Option<std::ffi::OsString>,
    names: &[&str],
    dirs: &[PathBuf],
    with_builtins: bool,
) -> std::result::Result<Located, Vec<String>> {
    let mut looked = Vec::new();
    // The user's explicit choice first, then the loader path (LD_LIBRARY_PATH, ld.so.cache),
    // then the fixed folders.
    let mut first: Vec<(String, PathBuf)> = Vec::new();
    match env_value {
        Some(p) => {
            let p = PathBuf::from(p);
            if p.is_dir() {
                for n in names {
                    first.push((format!("${env}"), p.join(n)));
                }
            } else {
                first.push((format!("${env}"), p));
            }
        }
        None => looked.push(format!("${env}: not set")),
    }
    if let Some(found) = open_first(first, with_builtins, &mut looked) {
        return Ok(found);
    }
    for n in names {
        match open_global(Path::new(n)) {
            Ok(()) => {
                return Ok(Located {
                    path: (*n).to_string(),
                    reason: String::new(),
                })
            }
            Err(e) => looked.push(format!("{n} on the loader path: {e}")),
        }
    }
    let mut fixed = Vec::new();
    for d in dirs {
        for n in names {
            fixed.push((d.display().to_string(), d.join(n)));
        }
    }
    open_first(fixed, with_builtins, &mut looked).ok_or(looked)
}

/// Opens the first of `candidates` (origin, path) that loads; notes every miss in `looked`.
fn open_first(
    candidates: Vec<(String, PathBuf)>,
    with_builtins: bool,
    looked: &mut Vec<String>,
) -> Option<Located> {
    for (origin, path) in candidates {
        if !path.exists() {
            looked.push(format!("{}: no such file", path.display()));
            continue;
        }
        if with_builtins {
            // libnvrtc dlopens its builtins by SONAME; preload the sibling so that resolves.
            preload_builtins(path.parent().unwrap_or(Path::new(".")));
        }
        match open_global(&path) {
            Ok(()) => {
                return Some(Located {
                    path: path.display().to_string(),
                    reason: String::new(),
                })
            }
            Err(e) => looked.push(format!("{} (from {origin}): {e}", path.display())),
        }
    }
    None
}

fn preload_builtins(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("libnvrtc-builtins.so.") {
                let _ = open_global(&e.path());
            }
        }
    }
}

fn open_global(path: &Path) -> std::result::Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading NVIDIA's libraries runs their initializers, which have no
    // preconditions; the handle is leaked on purpose so the library stays for cudarc.
    match unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) } {
        Ok(lib) => {
            std::mem::forget(lib);
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The fixed folders searched for NVRTC (and cuBLASLt) after `$SDPA_NVRTC_PATH` and the
/// loader path: the CUDA toolkit's. Nothing relative to the working directory or the
/// executable, and nothing found by running a program.
fn nvrtc_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        // A relative value would be resolved against the working directory: skipped.
        if let Some(h) = std::env::var_os(var).map(PathBuf::from) {
            if h.is_absolute() {
                dirs.push(h.join("lib64"));
                dirs.push(h.join("lib"));
            }
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
    dirs.push("/usr/local/cuda/targets/sbsa-linux/lib".into());
    dedup(dirs)
}

fn driver_dirs() -> Vec<PathBuf> {
    dedup(vec![
        "/usr/local/nvidia/lib64".into(),
        "/usr/lib/x86_64-linux-gnu".into(),
        "/usr/lib64".into(),
        "/usr/lib/wsl/lib".into(),
        "/usr/local/cuda/compat".into(),
    ])
}

fn dedup(v: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in v {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_follows_the_driver_major() {
        let names = |d| nvrtc_names(d).join(" ");
        assert_eq!(names(None), "libnvrtc.so.13 libnvrtc.so.12");
        assert_eq!(names(Some(13)), "libnvrtc.so.13 libnvrtc.so.12");
        assert_eq!(names(Some(14)), "libnvrtc.so.13 libnvrtc.so.12");
        // A CUDA 12 driver cannot load NVRTC 13's code: 12 first, 13 only to explain.
        assert_eq!(names(Some(12)), "libnvrtc.so.12 libnvrtc.so.13");
        assert_eq!(names(Some(11)), "libnvrtc.so.12 libnvrtc.so.13");
    }

    #[test]
    fn missing_library_lists_every_place_and_the_fix() {
        let dirs = vec![
            PathBuf::from("/nonexistent/a"),
            PathBuf::from("/nonexistent/b"),
        ];
        let looked = locate(
            "SDPA_TEST_UNSET_VAR",
            &["libdefinitely_not_here.so.7"],
            &dirs,
            false,
        )
        .unwrap_err();
        let text = looked.join("\n");
        assert!(text.contains("$SDPA_TEST_UNSET_VAR: not set"), "{text}");
        assert!(
            text.contains("libdefinitely_not_here.so.7 on the loader path"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent/a/libdefinitely_not_here.so.7: no such file"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent/b/libdefinitely_not_here.so.7: no such file"),
            "{text}"
        );
        let err = Error::LibraryNotFound {
            what: "X",
            looked,
            fix: "do Y",
        }
        .to_string();
        assert!(
            err.contains("X not found") && err.contains("Fix: do Y"),
            "{err}"
        );
    }

    /// The variable names the user's choice: it wins over a library of the same name on the
    /// loader path (libc, loaded in every process, stands in for a second NVRTC).
    #[test]
    fn the_variable_wins_over_the_loader_path() {
        let dir = tempfile::tempdir().unwrap();
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
            "/usr/lib64/libc.so.6",
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
        let Some(libc) = libc else {
            panic!("no libc.so.6 in the usual folders of this machine");
        };
        std::os::unix::fs::symlink(&libc, dir.path().join("libc.so.6")).unwrap();
        let found = locate_with(
            "SDPA_TEST_CHOICE",
            Some(dir.path().as_os_str().to_owned()),
            &["libc.so.6"],
            &[],
            false,
        )
        .unwrap();
        assert_eq!(
            found.path,
            dir.path().join("libc.so.6").display().to_string()
        );
        // Unset, the same name comes from the loader path.
        let found = locate_with("SDPA_TEST_CHOICE", None, &["libc.so.6"], &[], false).unwrap();
        assert_eq!(found.path, "libc.so.6");
    }

    #[test]
    fn a_file_that_is_no_library_is_reported_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("libfake.so.1"), b"not an ELF file").unwrap();
        let looked = locate(
            "SDPA_TEST_UNSET_VAR",
            &["libfake.so.1"],
            &[dir.path().to_path_buf()],
            false,
        )
        .unwrap_err();
        let text = looked.join("\n");
        assert!(text.contains("libfake.so.1 (from"), "{text}");
    }

    /// Set in the child process that `search_ignores_the_working_directory_and_runs_nothing`
    /// starts: its value is the planted tree's root.
    const PROBE_ENV: &str = "SDPA_TEST_LIBS_PROBE";

    /// Plants `.nvrtc/nvidia/cu13/lib/libnvrtc.so.13` in a temporary ancestor of the working
    /// directory and a `python3` on PATH that leaves a mark, then runs the search in a child
    /// process started there (the working directory and PATH are process-wide, so a child
    /// keeps this test from touching them). Neither may be used, and the library must not set
    /// CUDA_CACHE_DISABLE.
    #[test]
    fn search_ignores_the_working_directory_and_runs_nothing() {
        if let Some(root) = std::env::var_os(PROBE_ENV) {
            let root = PathBuf::from(root);
            let dirs = nvrtc_dirs();
            for d in &dirs {
                assert!(
                    !d.starts_with(&root) && !d.to_string_lossy().contains(".nvrtc"),
                    "candidate {} comes from the working directory's ancestors",
                    d.display()
                );
            }
            // Whatever it finds on this machine, the search must not report the planted file.
            let text = match ensure_nvrtc() {
                Ok(l) => l.path,
                Err(e) => e.to_string(),
            };
            assert!(!text.contains(&*root.to_string_lossy()), "{text}");
            assert!(
                !root.join("python3-ran").exists(),
                "the search ran python3 from PATH"
            );
            assert!(
                std::env::var_os("CUDA_CACHE_DISABLE").is_none(),
                "the library set CUDA_CACHE_DISABLE"
            );
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let lib = root.path().join(".nvrtc/nvidia/cu13/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libnvrtc.so.13"), b"planted, not an ELF file").unwrap();
        let cwd = root.path().join("project/sub");
        std::fs::create_dir_all(&cwd).unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let py = bin.join("python3");
        std::fs::write(
            &py,
            format!(
                "#!/bin/sh\necho ran > '{}'\n",
                root.path().join("python3-ran").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "libs::tests::search_ignores_the_working_directory_and_runs_nothing",
                "--nocapture",
                "--test-threads=1",
            ])
            .current_dir(&cwd)
            .env(PROBE_ENV, root.path())
            .env("PATH", &bin)
            .env_remove(NVRTC_ENV)
            .env_remove("CUDA_CACHE_DISABLE")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child failed:\n{text}");
        assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    }
}
