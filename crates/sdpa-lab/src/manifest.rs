//! The environment manifest: what machine, GPU, driver, compiler and code a result came from.
//! `sdpa-lab env` writes it; every bench JSON embeds it.

use fp8_sdpa::runtime::Device;
use serde::Serialize;
use std::process::Command;

/// The environment of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// UTC time the manifest was taken (RFC 3339).
    pub taken_at: String,
    /// fp8-sdpa's crate version.
    pub version: &'static str,
    /// Git commit of the working tree, if it is a git checkout.
    pub git_sha: Option<String>,
    /// Whether the working tree had uncommitted changes.
    pub git_dirty: Option<bool>,
    /// Host name.
    pub host: String,
    /// Operating system and architecture.
    pub os: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// NVRTC version and where it was loaded from, or why not.
    pub nvrtc: Result<String, String>,
    /// The CUDA version of the build's cudarc bindings (its `cuda-*` feature), the NVRTC major
    /// it looks for first; an NVRTC newer than the driver is refused at `Device::open`.
    pub cuda_bindings: String,
    /// The GPU, or why there is none.
    pub gpu: Result<fp8_sdpa::runtime::DeviceInfo, String>,
    /// PyTorch, CUDA and cuDNN versions as Python reports them, or why not.
    pub torch: Result<String, String>,
}

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let o = Command::new(cmd)
        .args(args)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Seconds since the epoch as an RFC 3339 UTC timestamp (no time-zone crate needed).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86400, secs % 86400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Whether `python3 -c "import torch"` works here.
pub fn torch_version() -> Result<String, String> {
    let script = "import torch; print(torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'gpu', torch.cuda.is_available())";
    match Command::new("python3").args(["-c", script]).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => Err(format!(
            "python3 cannot import torch: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
                .trim()
        )),
        Err(e) => Err(format!("python3 not runnable: {e}")),
    }
}

impl Manifest {
    /// Takes the manifest; `device` is the open GPU, if any (else `no_gpu` says why).
    pub fn take(device: Result<&Device, String>) -> Manifest {
        let nvrtc = match (
            fp8_sdpa::libs::ensure_nvrtc(),
            fp8_sdpa::compile::nvrtc::version(),
        ) {
            (Ok(l), Ok((a, b))) if l.reason.is_empty() => Ok(format!("{a}.{b} ({})", l.path)),
            (Ok(l), Ok((a, b))) => Ok(format!("{a}.{b} ({}; {})", l.path, l.reason)),
            (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
        };
        Manifest {
            taken_at: utc_now(),
            version: env!("CARGO_PKG_VERSION"),
            git_sha: run("git", &["rev-parse", "HEAD"]),
            git_dirty: run("git", &["status", "--porcelain", "--untracked-files=no"])
                .map(|s| !s.is_empty()),
            host: run("hostname", &[]).unwrap_or_else(|| "unknown".into()),
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            nvrtc,
            cuda_bindings: {
                let (a, b) = fp8_sdpa::compile::nvrtc::BINDINGS;
                format!("{a}.{b}")
            },
            gpu: device.map(|d| d.info().clone()),
            torch: torch_version(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_is_rfc3339_utc() {
        let t = utc_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
        let year: i32 = t[..4].parse().unwrap();
        assert!(year >= 2024, "{t}");
    }
}
