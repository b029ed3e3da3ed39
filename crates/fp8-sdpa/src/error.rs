//! The library's one error type. Every failure a caller can cause or meet is a variant here,
//! with a message that says what is wrong and how to fix it.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in fp8-sdpa.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A shared library (NVRTC or the CUDA driver) could not be found or opened.
    #[error("{what} not found. Looked in:\n  {}\nFix: {fix}", .looked.join("\n  "))]
    LibraryNotFound {
        /// Which library ("NVRTC (libnvrtc.so.13)", "CUDA driver (libcuda.so.1)").
        what: &'static str,
        /// Every place tried, in order, with the reason each failed.
        looked: Vec<String>,
        /// The one-line fix.
        fix: &'static str,
    },
    /// A kernel failed to compile; `log` is NVRTC's log, whose `name(line)` prefixes point
    /// into the source named in `source`.
    #[error("NVRTC failed to compile {source_name} for {arch} ({defines}):\n{log}")]
    Compile {
        /// Kernel source file name.
        source_name: String,
        /// Target arch, e.g. `sm_90a`.
        arch: String,
        /// The preprocessor defines, space separated.
        defines: String,
        /// NVRTC's program log.
        log: String,
    },
    /// An NVRTC API call failed outside compilation proper.
    #[error("NVRTC call {call} failed: {message}")]
    Nvrtc {
        /// The API function.
        call: &'static str,
        /// NVRTC's error string.
        message: String,
    },
    /// A `Variant` violates a validity rule.
    #[error("invalid variant {key}: {reason}")]
    InvalidVariant {
        /// The variant's key.
        key: String,
        /// The rule it breaks.
        reason: String,
    },
    /// An arch name the project does not build for.
    #[error("unknown arch '{0}': expected one of sm_80, sm_86, sm_89, sm_90a")]
    UnknownArch(String),
    /// A cache entry could not be read or written.
    #[error("kernel cache at {path}: {reason}")]
    Cache {
        /// The entry or folder.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Bad input to the attention call (shape, dtype, stride, alignment, parameter).
    #[error("invalid attention input: {0}")]
    InvalidInput(String),
    /// No kernel can run this problem on this device.
    #[error("unsupported problem: {0}")]
    Unsupported(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver error in {context}: {source}")]
    Driver {
        /// What we were doing.
        context: String,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// An I/O error with the path involved.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps a driver error with what was being done.
    pub fn driver(context: impl Into<String>) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
        let context = context.into();
        move |source| Error::Driver { context, source }
    }

    /// Wraps an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
