//! Finding NVRTC and the CUDA driver at run time.
//!
//! cudarc `dlopen`s bare library names and panics when none loads. We search first — an
//! explicit environment variable, the loader path, the pip package `nvidia-cuda-nvrtc`
//! (project-local `.nvrtc/` or the active Python's site-packages), the CUDA toolkit — and
//! open the library we find by absolute path with `RTLD_GLOBAL`. The dynamic loader matches a
//! later `dlopen("libnvrtc.so.13")` against the SONAME of an already loaded object, so
//! cudarc then binds to ours. A miss is [`Error::LibraryNotFound`] listing every place tried.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming libnvrtc (the file or its folder).
pub const NVRTC_ENV: &str = "SDPA_NVRTC_PATH";
/// Environment variable naming libcuda (the file or its folder).
pub const DRIVER_ENV: &str = "SDPA_CUDA_DRIVER_PATH";

const NVRTC_NAMES: [&str; 2] = ["libnvrtc.so.13", "libnvrtc.so.12"];
const DRIVER_NAMES: [&str; 1] = ["libcuda.so.1"];

/// Where a library was loaded from.
#[derive(Debug, Clone)]
pub struct Located {
    /// The path or bare name that opened.
    pub path: String,
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
            fix: "install the CUDA toolkit or `pip install nvidia-cublas`, or set SDPA_CUBLASLT_PATH to the folder holding libcublasLt.so.13",
        })
}

static NVRTC: OnceLock<std::result::Result<Located, Vec<String>>> = OnceLock::new();
static DRIVER: OnceLock<std::result::Result<Located, Vec<String>>> = OnceLock::new();

/// Makes NVRTC loadable for cudarc, or explains where it looked. Cheap after the first call.
pub fn ensure_nvrtc() -> Result<Located> {
    NVRTC
        .get_or_init(|| {
            // NVRTC (CUDA 12.9+) caches compiles on disk. A cache hit skips ptxas, and with
            // it the `-v` resource report the gates read: on the H100 machine a program
            // compiled twice came back with an empty log (also reported in
            // NVIDIA/cuda-python#1124). Our own cache keeps the report with the CUBIN, so
            // NVRTC's is turned off: `--no-cache` on every compile (nvrtc::base_options),
            // which is what held on the H100 (round 14), and this variable as well.
            std::env::set_var("CUDA_CACHE_DISABLE", "1");
            locate(NVRTC_ENV, &NVRTC_NAMES, &nvrtc_dirs(), true)
        })
        .clone()
        .map_err(|looked| Error::LibraryNotFound {
            what: "NVRTC (libnvrtc.so.13)",
            looked,
            fix: "run `scripts/test.sh` once (it installs the pip package nvidia-cuda-nvrtc==13.0.* into .nvrtc/), \
                  or `pip install nvidia-cuda-nvrtc==13.0.*`, or set SDPA_NVRTC_PATH to the folder holding libnvrtc.so.13",
        })
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
    let mut looked = Vec::new();
    let mut candidates: Vec<(String, PathBuf)> = Vec::new();
    match std::env::var_os(env) {
        Some(p) => {
            let p = PathBuf::from(p);
            if p.is_dir() {
                for n in names {
                    candidates.push((format!("${env}"), p.join(n)));
                }
            } else {
                candidates.push((format!("${env}"), p));
            }
        }
        None => looked.push(format!("${env}: not set")),
    }
    // Bare names: the loader path (LD_LIBRARY_PATH, ld.so.cache).
    for n in names {
        match open_global(Path::new(n)) {
            Ok(()) => {
                return Ok(Located {
                    path: (*n).to_string(),
                })
            }
            Err(e) => looked.push(format!("{n} on the loader path: {e}")),
        }
    }
    for d in dirs {
        for n in names {
            candidates.push((d.display().to_string(), d.join(n)));
        }
    }
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
                return Ok(Located {
                    path: path.display().to_string(),
                })
            }
            Err(e) => looked.push(format!("{} (from {origin}): {e}", path.display())),
        }
    }
    Err(looked)
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

fn nvrtc_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    // Project-local install made by scripts/test.sh, from the working directory up.
    if let Ok(cwd) = std::env::current_dir() {
        for a in cwd.ancestors() {
            dirs.push(a.join(".nvrtc/nvidia/cu13/lib"));
        }
    }
    // Next to the executable's workspace (target/<profile>/exe → ../../.nvrtc).
    if let Ok(exe) = std::env::current_exe() {
        for a in exe.ancestors().skip(1).take(4) {
            dirs.push(a.join(".nvrtc/nvidia/cu13/lib"));
        }
    }
    for sp in python_site_packages() {
        dirs.push(sp.join("nvidia/cu13/lib"));
        dirs.push(sp.join("nvidia/cuda_nvrtc/lib"));
        dirs.push(sp.join("nvidia/cublas/lib"));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = std::env::var_os(var) {
            dirs.push(PathBuf::from(&h).join("lib64"));
            dirs.push(PathBuf::from(&h).join("lib"));
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
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

/// The active Python's site-packages folders (`python3 -c 'import site; ...'`), if Python runs.
fn python_site_packages() -> Vec<PathBuf> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))"])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
