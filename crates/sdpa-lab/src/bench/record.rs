//! The JSON every bench run writes (`bench*.json`), the input `scripts/peers.py` reads, and a
//! writer that keeps the file valid after every appended row.
//!
//! Schema (version [`SCHEMA_VERSION`]):
//! ```text
//! BenchFile { schema_version: u32, manifest: <any JSON>, ceilings: [Ceiling], rows: [BenchRow],
//!             notes: [string] }
//! Ceiling   { name: string, unit: "TFLOPS" | "GB/s", value: number }
//! BenchRow  { suite, case, implementation: "fp8-sdpa" | "torch" | "fa3",
//!             backend: variant key | "flash" | "cudnn" | "efficient",
//!             precision: "f16" | "bf16" | "fp8_kv_f16" | "fp8_kv_bf16" | "fp8" | "sim_fp8",
//!             shape: { batch, seq_q, seq_kv, heads_q, heads_kv, head_dim },
//!             causal: bool, mode: "cold" | "hot" | "graph",
//!             stats: Stats | null, tflops: number | null, gbps: number | null,
//!             pct_of_ceiling: number | null,
//!             correctness: { max_abs, rel_l2, passed } | null,
//!             status: "ok" | "skipped: <reason>" | "failed: <reason>",
//!             detail: string (optional) }
//! ```

use super::flops;
use super::stats::Stats;
use super::suites::{BenchCase, TimingMode};
use fp8_sdpa::{AttnShape, Precision};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version of the bench-file schema; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// `implementation` of rows timing this library.
pub const IMPL_OURS: &str = "fp8-sdpa";
/// `implementation` of rows timing PyTorch SDPA.
pub const IMPL_TORCH: &str = "torch";
// scripts/peers.py also writes FlashAttention-3's rows, as implementation and backend "fa3".
/// The PyTorch SDPA backends, in report order.
pub const TORCH_BACKENDS: [&str; 3] = ["flash", "cudnn", "efficient"];

/// Ceiling names the report and [`BenchRow::fill_derived`] understand.
pub mod ceiling_names {
    /// fp16 GEMM (cuBLASLt), TFLOPS.
    pub const GEMM_F16: &str = "gemm_f16";
    /// bf16 GEMM, TFLOPS.
    pub const GEMM_BF16: &str = "gemm_bf16";
    /// FP8 E4M3 GEMM, TFLOPS.
    pub const GEMM_FP8: &str = "gemm_fp8";
    /// Device-to-device copy (read + write bytes over time), GB/s.
    pub const COPY: &str = "copy";
}

/// A measured roof of the device, from the same run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// One of [`ceiling_names`] (others are shown but not used for percentages).
    pub name: String,
    /// `"TFLOPS"` or `"GB/s"`.
    pub unit: String,
    /// The figure.
    pub value: f64,
}

/// Correctness of one timed output against a float64 reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Correctness {
    /// Largest absolute error.
    pub max_abs: f64,
    /// ‖out − ref‖₂ / ‖ref‖₂.
    pub rel_l2: f64,
    /// Whether the path's gate passed.
    pub passed: bool,
}

/// One timed (or skipped, or failed) implementation on one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    /// Suite name.
    pub suite: String,
    /// Case name within the suite.
    pub case: String,
    /// [`IMPL_OURS`] or [`IMPL_TORCH`].
    pub implementation: String,
    /// Variant key for ours, the SDPA backend for torch.
    pub backend: String,
    /// Precision path.
    pub precision: Precision,
    /// Sizes.
    pub shape: AttnShape,
    /// Causal mask (bottom-right).
    pub causal: bool,
    /// Timing mode.
    pub mode: TimingMode,
    /// Timing summary; `None` unless the row ran.
    pub stats: Option<Stats>,
    /// TFLOPS at the median.
    pub tflops: Option<f64>,
    /// Useful GB/s at the median (see [`flops::traffic`]).
    pub gbps: Option<f64>,
    /// Percent of the roofline from the ceilings: the larger of TFLOPS / GEMM ceiling and
    /// GB/s / copy ceiling (see [`BenchRow::fill_derived`]).
    pub pct_of_ceiling: Option<f64>,
    /// Output check of the timed call.
    pub correctness: Option<Correctness>,
    /// `"ok"`, `"skipped: <reason>"` or `"failed: <reason>"`.
    pub status: String,
    /// Free text, e.g. how a causal mask was expressed to PyTorch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

fn find<'a>(ceilings: &'a [Ceiling], name: &str) -> Option<&'a Ceiling> {
    ceilings.iter().find(|c| c.name == name)
}

/// The GEMM ceiling for a path: FP8 GEMM for full FP8, else the 16-bit type the tensor cores
/// compute in (FP8-KV dequantizes K/V to it).
pub fn gemm_ceiling(precision: Precision, ceilings: &[Ceiling]) -> Option<&Ceiling> {
    let name = match precision {
        Precision::Fp8 => ceiling_names::GEMM_FP8,
        p if p.compute() == fp8_sdpa::DType::Bf16 => ceiling_names::GEMM_BF16,
        _ => ceiling_names::GEMM_F16,
    };
    find(ceilings, name)
}

impl BenchRow {
    /// A row for `case` with nothing measured yet and status `"ok"`; the caller sets `stats`
    /// (and correctness), then calls [`BenchRow::fill_derived`].
    pub fn new(case: &BenchCase, implementation: &str, backend: &str, mode: TimingMode) -> Self {
        BenchRow {
            suite: case.suite.clone(),
            case: case.name.clone(),
            implementation: implementation.into(),
            backend: backend.into(),
            precision: case.precision,
            shape: case.shape,
            causal: case.causal,
            mode,
            stats: None,
            tflops: None,
            gbps: None,
            pct_of_ceiling: None,
            correctness: None,
            status: "ok".into(),
            detail: None,
        }
    }

    /// Marks the row skipped with a reason (nothing was timed).
    pub fn skipped(mut self, reason: impl AsRef<str>) -> Self {
        self.status = format!("skipped: {}", one_line(reason.as_ref()));
        self
    }

    /// Marks the row failed with a reason.
    pub fn failed(mut self, reason: impl AsRef<str>) -> Self {
        self.status = format!("failed: {}", one_line(reason.as_ref()));
        self
    }

    /// Whether the row ran and produced timings.
    pub fn is_ok(&self) -> bool {
        self.status == "ok" && self.stats.is_some()
    }

    /// Median time, when timed.
    pub fn median_us(&self) -> Option<f64> {
        self.stats.as_ref().map(|s| s.median_us)
    }

    /// Fills `tflops`, `gbps` and `pct_of_ceiling` from the median and the shape (no LSE
    /// traffic counted). Rows without stats get `None`s.
    pub fn fill_derived(&mut self, ceilings: &[Ceiling]) {
        let t = self.median_us();
        self.tflops = t.and_then(|t| flops::tflops(flops::flops(&self.shape, self.causal), t));
        self.gbps =
            t.and_then(|t| flops::gbps(flops::bytes(&self.shape, self.precision, false), t));
        // Percent of the roofline: performance over min(GEMM roof, intensity × copy roof),
        // which equals the larger of the two ratios below. A missing ceiling drops its ratio.
        let compute = gemm_ceiling(self.precision, ceilings)
            .zip(self.tflops)
            .map(|(c, v)| 100.0 * v / c.value);
        let memory = find(ceilings, ceiling_names::COPY)
            .zip(self.gbps)
            .map(|(c, v)| 100.0 * v / c.value);
        self.pct_of_ceiling = match (compute, memory) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
        .filter(|p| p.is_finite());
    }
}

/// Statuses stay on one line so tables and logs stay readable.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A whole bench file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchFile {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// Environment manifest (device, driver, versions, git sha), as `sdpa-lab env` writes it.
    #[serde(default)]
    pub manifest: serde_json::Value,
    /// Ceilings measured in the same run.
    #[serde(default)]
    pub ceilings: Vec<Ceiling>,
    /// Every row, in run order.
    #[serde(default)]
    pub rows: Vec<BenchRow>,
    /// Free-text notes (e.g. why peers did not run).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Errors reading or writing bench files.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// File system failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not valid JSON or not this schema.
    #[error("{path}: not a bench file: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// serde_json's message.
        reason: String,
    },
    /// Written by a newer sdpa-lab.
    #[error("{path}: schema version {found} is newer than this sdpa-lab understands ({SCHEMA_VERSION}); update sdpa-lab")]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl BenchFile {
    /// An empty file with the current schema version.
    pub fn new(manifest: serde_json::Value, ceilings: Vec<Ceiling>) -> Self {
        BenchFile {
            schema_version: SCHEMA_VERSION,
            manifest,
            ceilings,
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Parses a bench file from text (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, RecordError> {
        let f: BenchFile = serde_json::from_str(text).map_err(|e| RecordError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if f.schema_version > SCHEMA_VERSION {
            return Err(RecordError::NewerSchema {
                path: path.to_path_buf(),
                found: f.schema_version,
            });
        }
        Ok(f)
    }

    /// Reads a bench file.
    pub fn read(path: &Path) -> Result<Self, RecordError> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        BenchFile::parse(&text, path)
    }

    /// Writes the file atomically: to a temporary sibling, flushed, then renamed over `path`,
    /// so a reader (or a Ctrl-C) never sees half a file.
    pub fn write_atomic(&self, path: &Path) -> Result<(), RecordError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| RecordError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        write_atomic(path, text.as_bytes())
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    use std::io::Write;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        // Best effort: a stale temp file is harmless but untidy.
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io_err(path))
}

/// Appends rows to a bench file, rewriting it atomically after each one, so the file on disk
/// is valid JSON with every finished row at any moment.
#[derive(Debug)]
pub struct BenchWriter {
    path: PathBuf,
    file: BenchFile,
}

impl BenchWriter {
    /// Starts a file at `path` (replacing any) and writes it once, empty.
    pub fn create(
        path: impl Into<PathBuf>,
        manifest: serde_json::Value,
        ceilings: Vec<Ceiling>,
    ) -> Result<Self, RecordError> {
        let w = BenchWriter {
            path: path.into(),
            file: BenchFile::new(manifest, ceilings),
        };
        w.flush()?;
        Ok(w)
    }

    /// Appends one row and rewrites the file.
    pub fn push(&mut self, row: BenchRow) -> Result<(), RecordError> {
        self.file.rows.push(row);
        self.flush()
    }

    /// Appends several rows (e.g. the peers script's output) and rewrites the file once.
    pub fn extend(&mut self, rows: impl IntoIterator<Item = BenchRow>) -> Result<(), RecordError> {
        self.file.rows.extend(rows);
        self.flush()
    }

    /// Appends a note and rewrites the file.
    pub fn note(&mut self, note: impl Into<String>) -> Result<(), RecordError> {
        self.file.notes.push(note.into());
        self.flush()
    }

    fn flush(&self) -> Result<(), RecordError> {
        self.file.write_atomic(&self.path)
    }

    /// Ends writing and returns the contents.
    pub fn finish(self) -> BenchFile {
        self.file
    }
}

/// One case as `scripts/peers.py --cases` reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerCase {
    /// Suite name.
    pub suite: String,
    /// Case name.
    pub case: String,
    /// Sizes.
    pub shape: AttnShape,
    /// Precision path (FP8 paths come back as skipped rows).
    pub precision: Precision,
    /// Causal mask (bottom-right).
    pub causal: bool,
    /// Timing mode.
    pub mode: TimingMode,
    /// Untimed warm-up runs.
    pub warmup: usize,
    /// Timed runs (≥ 100 by the protocol; the script refuses fewer).
    pub iters: usize,
    /// Tokens per page of a paged-cache case (backends without a paged cache skip it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<usize>,
}

impl PeerCase {
    /// The peer case for a bench case, timed in `mode`.
    pub fn from_case(case: &BenchCase, mode: TimingMode, warmup: usize, iters: usize) -> Self {
        PeerCase {
            suite: case.suite.clone(),
            case: case.name.clone(),
            shape: case.shape,
            precision: case.precision,
            causal: case.causal,
            mode,
            warmup,
            iters,
            page_size: case.page_size,
        }
    }
}

/// Writes the `--cases` file for `scripts/peers.py`.
pub fn write_peer_cases(path: &Path, cases: &[PeerCase]) -> Result<(), RecordError> {
    let text = serde_json::to_string_pretty(cases).map_err(|e| RecordError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    write_atomic(path, text.as_bytes())
}

/// Reads the `--out` file of `scripts/peers.py` (a JSON list of rows) and fills each row's
/// derived figures against `ceilings`, so both sides are computed by the same code.
pub fn read_peer_rows(path: &Path, ceilings: &[Ceiling]) -> Result<Vec<BenchRow>, RecordError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let mut rows: Vec<BenchRow> = serde_json::from_str(&text).map_err(|e| RecordError::Parse {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    for r in &mut rows {
        r.fill_derived(ceilings);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::suites::{cases, Suite};

    fn ceilings() -> Vec<Ceiling> {
        vec![
            Ceiling {
                name: ceiling_names::GEMM_F16.into(),
                unit: "TFLOPS".into(),
                value: 800.0,
            },
            Ceiling {
                name: ceiling_names::GEMM_FP8.into(),
                unit: "TFLOPS".into(),
                value: 1600.0,
            },
            Ceiling {
                name: ceiling_names::COPY.into(),
                unit: "GB/s".into(),
                value: 3000.0,
            },
        ]
    }

    fn timed_row(suite: Suite, name: &str, us: f64) -> BenchRow {
        let case = cases(suite, false)
            .into_iter()
            .find(|c| c.name == name)
            .unwrap();
        let mut r = BenchRow::new(&case, IMPL_OURS, "hopper_x", case.mode);
        r.stats = Some(Stats::from_samples(&[us]).unwrap());
        r.fill_derived(&ceilings());
        r
    }

    #[test]
    fn precision_serializes_snake_case() {
        // scripts/peers.py matches on these strings.
        let names: Vec<String> = Precision::ALL
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "\"f16\"",
                "\"bf16\"",
                "\"fp8_kv_f16\"",
                "\"fp8_kv_bf16\"",
                "\"fp8\"",
                "\"sim_fp8\""
            ]
        );
    }

    #[test]
    fn derived_figures_compute_bound() {
        // d64 s4k: 4·4·32·4096²·64 FLOPs in 1170.4 µs → 469.7 TFLOPS → 58.7% of 800
        let r = timed_row(Suite::Fa, "d64_s4k", 1170.4);
        assert!((r.tflops.unwrap() - 469.7).abs() < 0.1);
        assert!((r.pct_of_ceiling.unwrap() - 58.71).abs() < 0.05);
    }

    #[test]
    fn roofline_takes_the_lower_roof() {
        // d64 s512 (intensity 256 FLOP/B, below the 267 ridge of 800 TFLOPS / 3 TB/s):
        // 399.9 TFLOPS is 50% of the GEMM roof but 52% of the 768 TFLOPS memory roof.
        let r = timed_row(Suite::Fa, "d64_s512", 171.84);
        let mem = 100.0 * r.gbps.unwrap() / 3000.0;
        assert!(mem > 50.0);
        assert!((r.pct_of_ceiling.unwrap() - mem).abs() < 1e-9);
    }

    #[test]
    fn derived_figures_memory_bound() {
        // decode is memory bound: percent is of copy bandwidth
        let r = timed_row(Suite::Decode, "b32_sq1_skv4k_hkv8", 181.0);
        let pct = r.pct_of_ceiling.unwrap();
        assert!((pct - 100.0 * r.gbps.unwrap() / 3000.0).abs() < 1e-9);
        // ANCHORS: cuDNN 181 µs ≈ 2.97 TB/s on this shape
        assert!((r.gbps.unwrap() - 2970.0).abs() < 20.0, "{:?}", r.gbps);
    }

    #[test]
    fn no_stats_no_figures() {
        let case = &cases(Suite::Fp8, true)[0];
        let mut r = BenchRow::new(case, IMPL_TORCH, "cudnn", case.mode)
            .skipped("PyTorch SDPA has no FP8 kernel\n(second line)");
        r.fill_derived(&ceilings());
        assert_eq!((r.tflops, r.gbps, r.pct_of_ceiling), (None, None, None));
        assert_eq!(
            r.status,
            "skipped: PyTorch SDPA has no FP8 kernel (second line)"
        );
        assert!(!r.is_ok());
    }

    #[test]
    fn writer_keeps_file_valid_after_each_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.json");
        let mut w =
            BenchWriter::create(&path, serde_json::json!({"device": "x"}), ceilings()).unwrap();
        assert_eq!(BenchFile::read(&path).unwrap().rows.len(), 0);
        for i in 0..3 {
            w.push(timed_row(Suite::Mission, "mission", 10.0 + i as f64))
                .unwrap();
            let back = BenchFile::read(&path).unwrap();
            assert_eq!(back.rows.len(), i + 1);
            assert_eq!(back.ceilings.len(), 3);
        }
        w.note("peers: skipped").unwrap();
        let f = w.finish();
        let back = BenchFile::read(&path).unwrap();
        assert_eq!(back.notes, f.notes);
        assert_eq!(back.manifest, f.manifest);
        let medians =
            |b: &BenchFile| -> Vec<Option<f64>> { b.rows.iter().map(|r| r.median_us()).collect() };
        assert_eq!(medians(&back), medians(&f));
        // no temp files left behind
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn parse_errors_are_typed() {
        let p = Path::new("bench.json");
        assert!(matches!(
            BenchFile::parse("{", p),
            Err(RecordError::Parse { .. })
        ));
        assert!(matches!(
            BenchFile::parse(r#"{"schema_version": 99}"#, p),
            Err(RecordError::NewerSchema { found: 99, .. })
        ));
        // optional parts may be absent
        let f = BenchFile::parse(r#"{"schema_version": 1}"#, p).unwrap();
        assert!(f.rows.is_empty());
        assert!(matches!(
            BenchFile::read(Path::new("/nonexistent/bench.json")),
            Err(RecordError::Io { .. })
        ));
    }

    #[test]
    fn peer_cases_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cases.json");
        let pc: Vec<PeerCase> = cases(Suite::Mission, false)
            .iter()
            .map(|c| PeerCase::from_case(c, c.mode, 10, 100))
            .collect();
        write_peer_cases(&path, &pc).unwrap();
        let back: Vec<PeerCase> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, pc);
    }

    #[test]
    fn peer_rows_get_derived_figures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers.json");
        let mut r = timed_row(Suite::Fa, "d64_s512", 171.84);
        r.implementation = IMPL_TORCH.into();
        r.tflops = None;
        r.pct_of_ceiling = None;
        std::fs::write(&path, serde_json::to_string(&vec![r]).unwrap()).unwrap();
        let rows = read_peer_rows(&path, &ceilings()).unwrap();
        assert!(rows[0].tflops.is_some() && rows[0].pct_of_ceiling.is_some());
    }

    #[test]
    fn peer_cases_fixture_is_what_the_mission_suite_writes() {
        // tests/data/peer_cases.json feeds the peers-script tests; it must stay the format
        // this crate writes.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/peer_cases.json");
        let text = std::fs::read_to_string(path).unwrap();
        let fixture: Vec<PeerCase> = serde_json::from_str(&text).unwrap();
        let ours: Vec<PeerCase> = cases(Suite::Mission, false)
            .iter()
            .map(|c| PeerCase::from_case(c, c.mode, 10, 100))
            .collect();
        assert_eq!(fixture, ours);
    }
}
