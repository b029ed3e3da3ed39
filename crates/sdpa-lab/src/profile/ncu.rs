//! Nsight Compute (`ncu`): the command lines `profile` runs, where ncu is, and what its log
//! says when it cannot profile. The CSV it prints is parsed in [`super::csv`].
//!
//! Collection and printing are two commands: `ncu --export` writes a report (kept, for the
//! Nsight Compute GUI) while the child's own output stays on the console and ncu's messages go
//! to a log file; `ncu --import` then prints pure CSV. One command with `--csv` would mix the
//! CSV into the child's output or into the log with ncu's `==PROF==` lines. The parser still
//! skips `==…==` lines, so a CSV captured either way parses.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The SPEC's metrics (names checked on gh100), in its order.
pub const METRICS: [&str; 8] = [
    DURATION,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "lts__t_sector_hit_rate.pct",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    GMMA,
];

/// Kernel time.
pub const DURATION: &str = "gpu__time_duration.sum";
/// wgmma instructions; the counter exists on sm_90 only.
pub const GMMA: &str = "sm__inst_executed_pipe_tensor_op_gmma.sum";

/// Our attention kernels' entry names (`extern "C"` in kernels/*.cu), and not
/// `sdpa_reference`, which bench runs once per case for the correctness check.
pub const KERNEL_FILTER: &str = "regex:^sdpa_(hopper|portable|decode)";

/// Calls a bench child makes before its timed runs: the checked call, then the protocol's 10
/// warm-up calls.
pub const WARM_CALLS: usize = 11;

/// Launches per call at most: a split-KV decode call runs `sdpa_decode` then
/// `sdpa_decode_merge`; the prefill kernels run alone.
pub const MAX_KERNELS_PER_CALL: usize = 2;

/// The metrics to collect on a device: ncu refuses a metric the device does not have, so the
/// wgmma counter is left out before sm_90.
pub fn metrics_for(arch: fp8_sdpa::Arch) -> Vec<String> {
    METRICS
        .iter()
        .filter(|m| arch == fp8_sdpa::Arch::Sm90a || **m != GMMA)
        .map(|m| m.to_string())
        .collect()
}

/// The collection arguments (before the child's command line). ncu's `--launch-skip` and
/// `--launch-count` count launches that pass `--kernel-name`, not calls; a call is one or two
/// launches, so both are sized for two: the skip covers the warm-up calls of either kind,
/// and the count gives `calls` calls of two launches (or `2·calls` of one), all past warm-up.
/// `--clock-control none` leaves the clocks as bench finds them; the default cache control
/// flushes caches before each profiled launch, as hot mode keeps inputs out of L2.
pub fn collect_args(metrics: &[String], calls: usize, report: &Path, log: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = [
        "--clock-control",
        "none",
        "--metrics",
        &metrics.join(","),
        "--kernel-name",
        KERNEL_FILTER,
        "--launch-skip",
        &(WARM_CALLS * MAX_KERNELS_PER_CALL).to_string(),
        "--launch-count",
        &(calls.max(1) * MAX_KERNELS_PER_CALL).to_string(),
        "--force-overwrite",
        "--export",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    v.push(report.into());
    v.push("--log-file".into());
    v.push(log.into());
    v
}

/// The arguments that print a report as CSV. `base_units` asks for unscaled units
/// (nanoseconds, not whatever ncu finds readable), when this ncu knows `--print-units`.
pub fn import_args(report: &Path, base_units: bool) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["--import".into(), report.into()];
    for a in ["--csv", "--page", "raw"] {
        v.push(a.into());
    }
    if base_units {
        v.push("--print-units".into());
        v.push("base".into());
    }
    v
}

/// A command as a shell line (single-quoted where needed), for logs and profile.json.
pub fn shell_line(program: &Path, args: &[OsString]) -> String {
    std::iter::once(program.as_os_str())
        .chain(args.iter().map(OsString::as_os_str))
        .map(|a| {
            let s = a.to_string_lossy();
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./,:=+@".contains(c))
            {
                s.into_owned()
            } else {
                format!("'{}'", s.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Finds ncu: `program` itself when it names a path, else the first executable of that name
/// on `path` (the PATH variable's value).
pub fn locate(program: &Path, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        }
        #[cfg(not(unix))]
        {
            p.is_file()
        }
    };
    if program.components().count() > 1 {
        return if executable(program) {
            Ok(program.to_path_buf())
        } else {
            Err(format!(
                "{} is not an executable file (--ncu)",
                program.display()
            ))
        };
    }
    path.into_iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| {
            format!(
                "{} (the Nsight Compute CLI) is not on PATH: install Nsight Compute (the CUDA \
                 toolkit ships it, e.g. /usr/local/cuda/bin/ncu) and put it on PATH, or pass \
                 --ncu /path/to/ncu",
                program.display()
            )
        })
}

/// Why a run of ncu gave no usable profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Profiling is not possible on this machine (no access to the counters, unsupported
    /// device): no case can be profiled, so `profile` stops and says so.
    Unavailable(String),
    /// This run failed; others may work.
    Failed(String),
}

/// The text of ncu's `==ERROR==` lines (the last one), if any.
fn last_error(log: &str) -> Option<&str> {
    log.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("==ERROR=="))
        .map(str::trim)
}

/// Reads ncu's log and exit code (`None`: killed by a signal) for the reasons a run gave no
/// profile; `None` when the log shows no problem and ncu exited 0.
pub fn diagnose(log: &str, exit: Option<i32>) -> Option<Failure> {
    if log.contains("ERR_NVGPUCTRPERM") {
        return Some(Failure::Unavailable(
            "ncu has no permission to read the GPU performance counters (ERR_NVGPUCTRPERM): \
             run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 \
             (https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
                .into(),
        ));
    }
    let lower = log.to_ascii_lowercase();
    if lower.contains("profiling is not supported") || lower.contains("device is not supported") {
        let line = log
            .lines()
            .find(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("not supported")
            })
            .unwrap_or("profiling is not supported")
            .trim()
            .trim_start_matches("==ERROR==")
            .trim_start_matches("==WARNING==")
            .trim();
        return Some(Failure::Unavailable(format!("ncu: {line}")));
    }
    if log.contains("No kernels were profiled") {
        return Some(Failure::Failed(
            "ncu profiled no kernel: no launch passed the kernel filter after the skipped \
             warm-up launches"
                .into(),
        ));
    }
    match exit {
        Some(0) => None,
        Some(c) => Some(Failure::Failed(format!(
            "ncu exited with code {c}{}",
            last_error(log).map_or(String::new(), |e| format!(": {e}"))
        ))),
        None => Some(Failure::Failed("ncu was killed by a signal".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiled in: the GPU machine runs test binaries without the source tree.
    const PERM: &str = include_str!("../../tests/fixtures/ncu/errperm.log");

    #[test]
    fn logs_say_why_there_is_no_profile() {
        match diagnose(PERM, Some(0)) {
            Some(Failure::Unavailable(why)) => assert!(why.contains("ERR_NVGPUCTRPERM"), "{why}"),
            other => panic!("{other:?}"),
        }
        let unsupported = "==ERROR== Profiling is not supported on this device\n";
        assert!(matches!(
            diagnose(unsupported, Some(1)),
            Some(Failure::Unavailable(w)) if w.contains("Profiling is not supported")
        ));
        assert!(matches!(
            diagnose("==WARNING== No kernels were profiled.\n", Some(0)),
            Some(Failure::Failed(w)) if w.contains("no kernel")
        ));
        assert!(matches!(
            diagnose("==ERROR== Failed to find metric foo\n", Some(1)),
            Some(Failure::Failed(w)) if w == "ncu exited with code 1: Failed to find metric foo"
        ));
        assert_eq!(
            diagnose("==PROF== Disconnected from process 1\n", Some(0)),
            None
        );
    }

    #[test]
    fn command_lines() {
        let m = metrics_for(fp8_sdpa::Arch::Sm90a);
        assert_eq!(m.len(), 8);
        assert!(!metrics_for(fp8_sdpa::Arch::Sm80).contains(&GMMA.to_string()));
        let args = collect_args(&m, 5, Path::new("p/x.ncu-rep"), Path::new("p/x.ncu.log"));
        let line = shell_line(Path::new("ncu"), &args);
        assert!(line.starts_with("ncu --clock-control none --metrics gpu__time_duration.sum,"));
        assert!(line.contains(
            "--kernel-name 'regex:^sdpa_(hopper|portable|decode)' --launch-skip 22 --launch-count 10"
        ));
        assert!(line.ends_with("--export p/x.ncu-rep --log-file p/x.ncu.log"));
        let imp = shell_line(Path::new("ncu"), &import_args(Path::new("r.ncu-rep"), true));
        assert_eq!(
            imp,
            "ncu --import r.ncu-rep --csv --page raw --print-units base"
        );
    }

    #[test]
    fn locate_searches_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = std::env::join_paths([dir.path()]).unwrap();
        let e = locate(Path::new("ncu"), Some(&path)).unwrap_err();
        assert!(e.contains("not on PATH"), "{e}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let ncu = dir.path().join("ncu");
            std::fs::write(&ncu, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&ncu, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert_eq!(locate(Path::new("ncu"), Some(&path)).unwrap(), ncu);
        }
        assert!(locate(Path::new("/nonexistent/ncu"), None).is_err());
    }
}
