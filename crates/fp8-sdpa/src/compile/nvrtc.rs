//! Raw NVRTC: one source plus in-memory headers to CUBIN and the program log.
//! cudarc's safe wrapper returns PTX only and drops the log on success; we need the CUBIN
//! (for the exact arch) and the ptxas report in the log, so this uses `nvrtc::sys` directly.

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::libs;
use cudarc::nvrtc::sys as nv;
use std::ffi::{c_char, CStr, CString};

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
    libs::ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is loaded (ensure_nvrtc); out-pointers are valid locals.
    check("nvrtcVersion", unsafe {
        nv::nvrtcVersion(&mut major, &mut minor)
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

/// Whether NVRTC `nvrtc` (major, minor) makes code the driver of version `driver` (as
/// `cuDriverGetVersion` gives it: 1000 x major + 10 x minor) can load. NVRTC writes CUBIN for
/// the exact arch, which a driver of the same major runs from any minor (CUDA's minor version
/// compatibility) but an older major does not; a newer driver runs it. The error says how to
/// get a matching pair.
pub fn check_driver(nvrtc: (i32, i32), driver: i32) -> Result<()> {
    let driver_major = driver / 1000;
    if nvrtc.0 <= driver_major {
        return Ok(());
    }
    Err(Error::Unsupported(format!(
        "NVRTC {}.{} makes code for a CUDA {} driver, but the installed driver is CUDA {}.{}: \
         update the NVIDIA driver to one for CUDA {}.0 or newer, or build fp8-sdpa for CUDA 12 \
         (`default-features = false, features = [\"cuda-12040\"]`) with NVRTC 12 \
         (`pip install nvidia-cuda-nvrtc-cu12`, its lib folder in {})",
        nvrtc.0,
        nvrtc.1,
        nvrtc.0,
        driver_major,
        driver % 1000 / 10,
        nvrtc.0,
        libs::NVRTC_ENV
    )))
}

/// The options every compile uses, besides the defines.
pub fn base_options(arch: Arch) -> Vec<String> {
    vec![
        format!("--gpu-architecture={}", arch.name()),
        "--std=c++17".into(),
        "--ptxas-options=-v".into(),
        // NVRTC 12.9+ caches compiles on disk, and a hit skips ptxas and its `-v` report:
        // on the H100 machine a second process compiling the same program got an empty log
        // and failed its bench rows (perf-notes: NVRTC's disk cache). Our cache stores the
        // report instead.
        "--no-cache".into(),
        "--generate-line-info".into(),
        "--device-as-default-execution-space".into(),
    ]
}

/// Compiles `source` (named `name` in diagnostics) with `headers` as (include name, text).
pub fn compile(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    defines: &[(String, String)],
    arch: Arch,
) -> Result<NvrtcOutput> {
    libs::ensure_nvrtc()?;
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

    let mut opts: Vec<String> = base_options(arch);
    opts.extend(defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    let c_opts: Vec<CString> = opts
        .iter()
        .map(|o| cstr(o, "nvrtcCompileProgram"))
        .collect::<Result<_>>()?;
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|c| c.as_ptr()).collect();

    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer refers to a live NUL-terminated CString; counts match the vectors.
    check("nvrtcCreateProgram", unsafe {
        nv::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            headers.len() as i32,
            h_text_ptrs.as_ptr(),
            h_name_ptrs.as_ptr(),
        )
    })?;
    let guard = ProgramGuard(prog);
    // SAFETY: prog is a valid program; options are live CStrings.
    let status =
        unsafe { nv::nvrtcCompileProgram(guard.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    let log = program_log(guard.0)?;
    if status != nv::nvrtcResult::NVRTC_SUCCESS {
        if status == nv::nvrtcResult::NVRTC_ERROR_COMPILATION {
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
        check("nvrtcCompileProgram", status)?;
    }
    let mut size = 0usize;
    // SAFETY: valid program, valid out-pointer.
    check("nvrtcGetCUBINSize", unsafe {
        nv::nvrtcGetCUBINSize(guard.0, &mut size)
    })?;
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes as NVRTC asked.
    check("nvrtcGetCUBIN", unsafe {
        nv::nvrtcGetCUBIN(guard.0, cubin.as_mut_ptr() as *mut c_char)
    })?;
    Ok(NvrtcOutput { cubin, log })
}

struct ProgramGuard(nv::nvrtcProgram);

impl Drop for ProgramGuard {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        unsafe {
            nv::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

fn program_log(prog: nv::nvrtcProgram) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: valid program and out-pointer.
    check("nvrtcGetProgramLogSize", unsafe {
        nv::nvrtcGetProgramLogSize(prog, &mut size)
    })?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: buffer holds `size` bytes.
    check("nvrtcGetProgramLog", unsafe {
        nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char)
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

fn check(call: &'static str, r: nv::nvrtcResult) -> Result<()> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any result.
    let message = unsafe { CStr::from_ptr(nv::nvrtcGetErrorString(r)) }
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
        assert!(check_driver((12, 4), 13000).is_ok());
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
