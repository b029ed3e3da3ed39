//! Raw NVRTC: one source plus in-memory headers to CUBIN and the program log.
//!
//! cudarc's wrapper returns PTX only, drops the log on success, and binds the NVRTC major of
//! its `cuda-*` feature. We need the CUBIN for the exact arch, the ptxas report in the log, and
//! the NVRTC that matches the driver (12 or 13, chosen in [`libs::ensure_nvrtc`]), so the nine
//! entry points are resolved here from the library that search chose. Their C signatures are
//! the same in CUDA 12 and 13.

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::libs;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// `nvrtcResult`: a C enum, `int`-sized.
type NvResult = c_int;
const NVRTC_SUCCESS: NvResult = 0;
const NVRTC_ERROR_COMPILATION: NvResult = 6;
/// `nvrtcProgram`: an opaque pointer.
type Program = *mut c_void;

/// NVRTC's entry points, resolved once from the chosen library, which stays loaded.
struct Lib {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvResult,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvResult,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvResult,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> NvResult,
    log: unsafe extern "C" fn(Program, *mut c_char) -> NvResult,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> NvResult,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> NvResult,
    destroy: unsafe extern "C" fn(*mut Program) -> NvResult,
    error_string: unsafe extern "C" fn(NvResult) -> *const c_char,
}

static LIB: OnceLock<std::result::Result<Lib, String>> = OnceLock::new();

fn lib() -> Result<&'static Lib> {
    let located = libs::ensure_nvrtc()?;
    LIB.get_or_init(|| resolve(&located.path))
        .as_ref()
        .map_err(|message| Error::Nvrtc {
            call: "dlsym",
            message: message.clone(),
        })
}

fn resolve(path: &str) -> std::result::Result<Lib, String> {
    // SAFETY: the library was already loaded by ensure_nvrtc (its initializers ran there);
    // opening it again only takes a reference, leaked so the symbols below stay valid.
    let lib: &'static libloading::Library = Box::leak(Box::new(
        unsafe { libloading::Library::new(path) }.map_err(|e| format!("{path}: {e}"))?,
    ));
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol's C signature is the field's type (NVRTC's public header,
            // the same in CUDA 12 and 13); the library is never unloaded.
            *unsafe { lib.get($name) }.map_err(|e| format!("{path}: {e}"))?
        };
    }
    Ok(Lib {
        version: sym!(b"nvrtcVersion\0"),
        create: sym!(b"nvrtcCreateProgram\0"),
        compile: sym!(b"nvrtcCompileProgram\0"),
        log_size: sym!(b"nvrtcGetProgramLogSize\0"),
        log: sym!(b"nvrtcGetProgramLog\0"),
        cubin_size: sym!(b"nvrtcGetCUBINSize\0"),
        cubin: sym!(b"nvrtcGetCUBIN\0"),
        destroy: sym!(b"nvrtcDestroyProgram\0"),
        error_string: sym!(b"nvrtcGetErrorString\0"),
    })
}

/// What NVRTC produced: machine code and the full log (warnings and the ptxas report).
#[derive(Debug, Clone)]
pub struct NvrtcOutput {
    /// CUBIN for the requested arch.
    pub cubin: Vec<u8>,
    /// Program log.
    pub log: String,
}

/// NVRTC's version as (major, minor).
pub fn version() -> Result<(i32, i32)> {
    let nv = lib()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: resolved entry point; out-pointers are valid locals.
    check(nv, "nvrtcVersion", unsafe {
        (nv.version)(&mut major, &mut minor)
    })?;
    Ok((major, minor))
}

/// The CUDA version of this build's cudarc bindings (the `cuda-*` feature), which is also the
/// NVRTC major cudarc looks for first (`libnvrtc.so`, then `libnvrtc.so.<major>`, then older
/// majors).
pub const BINDINGS: (i32, i32) = if cfg!(feature = "cuda-13000") {
    (13, 0)
} else if cfg!(feature = "cuda-12080") {
    (12, 8)
} else {
    (12, 4)
};

/// The oldest NVRTC this library is checked with: every registered kernel passes the
/// resource gates (no spills) with 12.6; with 12.4 twelve of them spill, the shipped FP8 D128
/// Hopper tiles among them.
pub const OLDEST: (i32, i32) = (12, 6);

/// Whether NVRTC `nvrtc` (major, minor) makes code the driver of version `driver` (as
/// `cuDriverGetVersion` gives it: 1000 x major + 10 x minor) can load, and is not older than
/// [`OLDEST`]. NVRTC writes CUBIN for the exact arch, which a driver of the same major runs
/// from any minor (CUDA's minor version compatibility) but an older major does not; a newer
/// driver runs it. The error says how to get a matching pair.
pub fn check_driver(nvrtc: (i32, i32), driver: i32) -> Result<()> {
    if nvrtc < OLDEST {
        return Err(Error::Unsupported(format!(
            "NVRTC {}.{} is older than {}.{}, the oldest fp8-sdpa is checked with (older ptxas \
             spills registers in some tiles): install a newer one (`pip install \
             nvidia-cuda-nvrtc-cu12>=12.6` for a CUDA 12 driver, `nvidia-cuda-nvrtc==13.0.*` for \
             CUDA 13) and point {} at its lib folder",
            nvrtc.0,
            nvrtc.1,
            OLDEST.0,
            OLDEST.1,
            libs::NVRTC_ENV
        )));
    }
    let driver_major = driver / 1000;
    if nvrtc.0 <= driver_major {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "NVRTC {}.{} makes code for a CUDA {} driver, but the installed driver is CUDA {}.{}: \
         update the NVIDIA driver to one for CUDA {}.0 or newer, or give fp8-sdpa NVRTC 12 \
         (`pip install nvidia-cuda-nvrtc-cu12>=12.6`, its lib folder in {}; it is chosen for a \
         CUDA 12 driver) and build it for CUDA 12 (`default-features = false, features = \
         [\"cuda-12040\"]`)",
        nvrtc.0,
        nvrtc.1,
        nvrtc.0,
        driver_major,
        driver % 1000 / 10,
        nvrtc.0,
        libs::NVRTC_ENV
    )))
}

/// The options every compile with NVRTC `version` uses, besides the defines.
pub fn base_options(arch: Arch, version: (i32, i32)) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={}", arch.name()),
        "--std=c++17".into(),
        "--ptxas-options=-v".into(),
        "--generate-line-info".into(),
        "--device-as-default-execution-space".into(),
    ];
    // NVRTC 12.9+ caches compiles on disk, and a hit skips ptxas and its `-v` report: a
    // second process compiling the same program got an empty log (perf-notes: NVRTC's disk
    // cache). Our cache stores the report instead. Older NVRTC has no cache and refuses the
    // option.
    if version >= (12, 9) {
        opts.push("--no-cache".into());
    }
    opts
}

/// Compiles `source` (named `name` in diagnostics) with `headers` as (include name, text).
pub fn compile(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    defines: &[(String, String)],
    arch: Arch,
) -> Result<NvrtcOutput> {
    let nv = lib()?;
    let cstr = |s: &str, what: &'static str| {
        CString::new(s).map_err(|_| Error::Nvrtc {
            call: what,
            message: format!("'{s}' contains a NUL byte"),
        })
    };
    let src = cstr(source, "nvrtcCreateProgram")?;
    let cname = cstr(name, "nvrtcCreateProgram")?;
    let h_texts: Vec<CString> = headers
        .iter()
        .map(|(_, t)| cstr(t, "nvrtcCreateProgram"))
        .collect::<Result<_>>()?;
    let h_names: Vec<CString> = headers
        .iter()
        .map(|(n, _)| cstr(n, "nvrtcCreateProgram"))
        .collect::<Result<_>>()?;
    let h_text_ptrs: Vec<*const c_char> = h_texts.iter().map(|c| c.as_ptr()).collect();
    let h_name_ptrs: Vec<*const c_char> = h_names.iter().map(|c| c.as_ptr()).collect();

    let mut opts: Vec<String> = base_options(arch, version()?);
    opts.extend(defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    let c_opts: Vec<CString> = opts
        .iter()
        .map(|o| cstr(o, "nvrtcCompileProgram"))
        .collect::<Result<_>>()?;
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|c| c.as_ptr()).collect();

    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: every pointer refers to a live NUL-terminated CString; counts match the vectors.
    check(nv, "nvrtcCreateProgram", unsafe {
        (nv.create)(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            headers.len() as i32,
            h_text_ptrs.as_ptr(),
            h_name_ptrs.as_ptr(),
        )
    })?;
    let guard = ProgramGuard(nv, prog);
    // SAFETY: prog is a valid program; options are live CStrings.
    let status = unsafe { (nv.compile)(guard.1, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    let log = program_log(nv, guard.1)?;
    if status != NVRTC_SUCCESS {
        if status == NVRTC_ERROR_COMPILATION {
            return Err(Error::Compile {
                source_name: name.to_string(),
                arch: arch.name().to_string(),
                defines: defines
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                log,
            });
        }
        check(nv, "nvrtcCompileProgram", status)?;
    }
    let mut size = 0usize;
    // SAFETY: valid program, valid out-pointer.
    check(nv, "nvrtcGetCUBINSize", unsafe {
        (nv.cubin_size)(guard.1, &mut size)
    })?;
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes as NVRTC asked.
    check(nv, "nvrtcGetCUBIN", unsafe {
        (nv.cubin)(guard.1, cubin.as_mut_ptr() as *mut c_char)
    })?;
    Ok(NvrtcOutput { cubin, log })
}

struct ProgramGuard(&'static Lib, Program);

impl Drop for ProgramGuard {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        unsafe {
            (self.0.destroy)(&mut self.1);
        }
    }
}

fn program_log(nv: &Lib, prog: Program) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: valid program and out-pointer.
    check(nv, "nvrtcGetProgramLogSize", unsafe {
        (nv.log_size)(prog, &mut size)
    })?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: buffer holds `size` bytes.
    check(nv, "nvrtcGetProgramLog", unsafe {
        (nv.log)(prog, buf.as_mut_ptr() as *mut c_char)
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

fn check(nv: &Lib, call: &'static str, r: NvResult) -> Result<()> {
    if r == NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any result.
    let message = unsafe { CStr::from_ptr((nv.error_string)(r)) }
        .to_string_lossy()
        .into_owned();
    Err(Error::Nvrtc { call, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_no_newer_than_the_driver_major_is_accepted() {
        // Same major, any minor (minor version compatibility); an older NVRTC on a newer driver.
        assert!(check_driver((13, 0), 13000).is_ok());
        assert!(check_driver((13, 1), 13000).is_ok());
        assert!(check_driver((12, 8), 12040).is_ok());
        assert!(check_driver((12, 6), 13000).is_ok());
    }

    #[test]
    fn nvrtc_older_than_the_oldest_checked_is_refused() {
        let e = check_driver((12, 4), 13000).unwrap_err().to_string();
        assert!(e.contains("NVRTC 12.4 is older than 12.6"), "{e}");
        assert!(e.contains("nvidia-cuda-nvrtc-cu12>=12.6"), "{e}");
    }

    #[test]
    fn nvrtc_newer_than_the_driver_is_refused_with_the_fix() {
        let e = check_driver((13, 0), 12080).unwrap_err().to_string();
        assert!(e.contains("NVRTC 13.0"), "{e}");
        assert!(e.contains("driver is CUDA 12.8"), "{e}");
        assert!(
            e.contains("cuda-12040") && e.contains("nvidia-cuda-nvrtc-cu12"),
            "{e}"
        );
        assert!(e.contains(libs::NVRTC_ENV), "{e}");
    }

    #[test]
    fn bindings_match_the_default_feature() {
        // The workspace builds with the default feature (cuda-13000).
        assert_eq!(BINDINGS, (13, 0));
    }
}
