//! Nsight Compute profiles of our kernels: what `sdpa-lab profile` writes (profile.json) and
//! the report reads back. The ncu command lines are in [`ncu`], the parser of its CSV in
//! [`csv`], one case's run under ncu in [`case`], the comparison of ncu's durations with the
//! bench timings in [`truth`].

pub mod case;
pub mod csv;
pub mod ncu;
pub mod truth;

use fp8_sdpa::Precision;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Version of the profile.json layout.
pub const SCHEMA_VERSION: u32 = 1;

/// One kernel of a case, summarized over its profiled launches: the median of each metric
/// over the launches that report it (`None` where every launch said "n/a" or the metric was
/// not collected, e.g. the wgmma count off sm_90).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelSummary {
    /// Entry name (`sdpa_hopper`, `sdpa_portable`, `sdpa_decode`, `sdpa_decode_merge`).
    pub kernel: String,
    /// Profiled launches of this kernel.
    pub launches: usize,
    /// Block size as ncu prints it, e.g. `(384, 1, 1)`.
    pub block: String,
    /// Grid size as ncu prints it.
    pub grid: String,
    /// `gpu__time_duration.sum`, µs.
    pub duration_us: Option<f64>,
    /// `sm__throughput.avg.pct_of_peak_sustained_elapsed`, %.
    pub sm_throughput_pct: Option<f64>,
    /// `gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed`, %.
    pub dram_throughput_pct: Option<f64>,
    /// Achieved occupancy: `sm__warps_active.avg.pct_of_peak_sustained_active`, %.
    pub achieved_occupancy_pct: Option<f64>,
    /// `launch__registers_per_thread`.
    pub registers_per_thread: Option<f64>,
    /// L2 hit rate: `lts__t_sector_hit_rate.pct`, %.
    pub l2_hit_rate_pct: Option<f64>,
    /// Tensor pipe: `sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active`, %.
    pub tensor_pipe_pct: Option<f64>,
    /// wgmma instructions: `sm__inst_executed_pipe_tensor_op_gmma.sum`.
    pub wgmma_instructions: Option<f64>,
}

/// One bench case (one variant) under the profiler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseProfile {
    /// Suite name.
    pub suite: String,
    /// Case name within the suite.
    pub case: String,
    /// Precision path.
    pub precision: Precision,
    /// Variant key.
    pub variant: String,
    /// `"ok"`, `"failed: …"` or `"skipped: …"`.
    pub status: String,
    /// Median of the reference bench run (hot mode, no profiler attached), µs.
    pub bench_median_us: Option<f64>,
    /// Complete calls among the profiled launches (a decode call is two launches).
    pub calls: usize,
    /// Median over those calls of the call's kernel durations summed, µs: the figure the
    /// bench median is compared with.
    pub call_us: Option<f64>,
    /// Per kernel, in launch order.
    pub kernels: Vec<KernelSummary>,
    /// Files of this case, relative to the output folder (ncu's report, its CSV, ncu's log,
    /// the child's row).
    pub files: Vec<String>,
    /// Anything worth knowing that did not fail the case (e.g. ncu's non-zero exit after it
    /// wrote its results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl CaseProfile {
    /// Whether the case was profiled.
    pub fn is_ok(&self) -> bool {
        self.status == "ok"
    }
}

/// profile.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileFile {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `"ok"`; `"failed: …"` when some case could not be profiled; `"not run: …"` when
    /// profiling is not possible here (no ncu, no GPU, no access to the counters).
    pub status: String,
    /// Why profiling did not run, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the run started (RFC 3339 UTC).
    pub taken_at: String,
    /// GPU name.
    #[serde(default)]
    pub device: Option<String>,
    /// ncu's path.
    #[serde(default)]
    pub ncu: Option<String>,
    /// ncu's version line.
    #[serde(default)]
    pub ncu_version: Option<String>,
    /// The collection command of the first case, as a shell line (the others differ only in
    /// their file names and the case).
    #[serde(default)]
    pub collect_command: Option<String>,
    /// The command that turns a report into CSV.
    #[serde(default)]
    pub import_command: Option<String>,
    /// Metrics collected.
    pub metrics: Vec<String>,
    /// A case whose bench median and ncu duration differ by more than this is flagged, %.
    pub tolerance_pct: f64,
    /// The reference bench file, relative to the output folder.
    #[serde(default)]
    pub reference_bench: Option<String>,
    /// Profiled (or failed) cases.
    pub cases: Vec<CaseProfile>,
    /// The truth check: bench median beside ncu's duration, per case.
    pub truth: Vec<truth::TruthRow>,
}

impl ProfileFile {
    /// An empty file with status `"ok"`, taken now.
    pub fn new(metrics: Vec<String>, tolerance_pct: f64) -> ProfileFile {
        ProfileFile {
            schema_version: SCHEMA_VERSION,
            status: "ok".into(),
            reason: None,
            taken_at: crate::manifest::utc_now(),
            device: None,
            ncu: None,
            ncu_version: None,
            collect_command: None,
            import_command: None,
            metrics,
            tolerance_pct,
            reference_bench: None,
            cases: Vec::new(),
            truth: Vec::new(),
        }
    }

    /// Marks the whole run not run, with the reason.
    pub fn not_run(&mut self, why: &str) {
        self.status = format!("not run: {why}");
        self.reason = Some(why.to_string());
    }

    /// Whether profiling could not run here.
    pub fn was_not_run(&self) -> bool {
        self.status.starts_with("not run")
    }

    /// Reads profile.json.
    pub fn read(path: &Path) -> Result<ProfileFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: malformed: {e}", path.display()))
    }

    /// Writes profile.json (whole file each time, so a crash leaves the cases so far).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).expect("profile serializes");
        crate::bench::record::write_atomic(path, text.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_run_file_round_trips_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.json");
        let mut f = ProfileFile::new(vec!["gpu__time_duration.sum".into()], 10.0);
        f.not_run("ncu not found");
        f.write(&path).unwrap();
        let back = ProfileFile::read(&path).unwrap();
        assert_eq!(back, f);
        assert!(back.was_not_run());
        assert_eq!(back.reason.as_deref(), Some("ncu not found"));
    }
}
