//! `sdpa-lab report`: reads an artifacts folder and writes `summary.md` and `plots/*.svg`.
//!
//! Inputs (all optional except that a report without `bench*.json` has no timing tables):
//! - `bench*.json`: [`BenchFile`]s, rows merged in file-name order;
//! - `check.json`: the resource table `sdpa-lab check --json` writes, for the resources column;
//! - `verify.json`, `stages.json`: shown generically (any list of objects, or an object);
//! - `manifest.json`: the environment; absent, the first bench file's manifest is used.
//!   Its `{"Ok": ..}` / `{"Err": ..}` wrappers are shown as values (see [`environment`]);
//! - `profile.json`: `sdpa-lab profile`'s kernel metrics and truth check (see [`profile`]),
//!   shown only when present (profiling needs ncu, which many machines lack).

pub mod environment;
pub mod markdown;
pub mod plots;
pub mod profile;

use crate::bench::record::{BenchFile, BenchRow, Ceiling};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One row of `check.json` (the fields the report uses; others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct CheckRow {
    /// Kernel spec key: `<variant key>/<precision>/d<D>/<causal|full>`.
    pub spec: String,
    /// Arch it was compiled for.
    #[serde(default)]
    pub arch: String,
    /// Registers per thread.
    #[serde(default)]
    pub registers: u32,
    /// Spill bytes.
    #[serde(default)]
    pub spill: u32,
    /// Stack frame bytes.
    #[serde(default)]
    pub stack: u32,
    /// Shared memory bytes.
    #[serde(default)]
    pub smem: u32,
    /// Gate violations; empty when it passes.
    #[serde(default)]
    pub problems: Vec<String>,
}

/// An optional input file and what became of it.
#[derive(Debug, Clone)]
pub enum Optional<T> {
    /// Not in the folder.
    Absent,
    /// There but unusable, with the reason.
    Unreadable(String),
    /// Read.
    Present(T),
}

impl<T> Optional<T> {
    /// The contents, when read.
    pub fn get(&self) -> Option<&T> {
        match self {
            Optional::Present(t) => Some(t),
            _ => None,
        }
    }
}

/// Everything read from an artifacts folder.
#[derive(Debug)]
pub struct Inputs {
    /// The folder.
    pub dir: PathBuf,
    /// Bench files read, by file name.
    pub bench: Vec<(String, BenchFile)>,
    /// Bench files that could not be read, with the reason.
    pub bench_unreadable: Vec<(String, String)>,
    /// `check.json`.
    pub check: Optional<Vec<CheckRow>>,
    /// `verify.json`.
    pub verify: Optional<serde_json::Value>,
    /// `manifest.json`.
    pub manifest: Optional<serde_json::Value>,
    /// `stages.json`.
    pub stages: Optional<serde_json::Value>,
    /// `profile.json`.
    pub profile: Optional<crate::profile::ProfileFile>,
}

impl Inputs {
    /// All rows of all bench files, with derived figures filled where a writer left them out.
    pub fn rows(&self) -> Vec<BenchRow> {
        let ceilings = self.ceilings();
        let mut rows: Vec<BenchRow> = self
            .bench
            .iter()
            .flat_map(|(_, f)| f.rows.iter().cloned())
            .collect();
        for r in &mut rows {
            if r.tflops.is_none() && r.stats.is_some() {
                r.fill_derived(&ceilings);
            }
        }
        rows
    }

    /// Ceilings of all bench files; the first file naming a ceiling wins.
    pub fn ceilings(&self) -> Vec<Ceiling> {
        let mut out: Vec<Ceiling> = Vec::new();
        for c in self.bench.iter().flat_map(|(_, f)| f.ceilings.iter()) {
            if !out.iter().any(|o| o.name == c.name) {
                out.push(c.clone());
            }
        }
        out
    }

    /// The environment: `manifest.json`, else the first bench file's non-null manifest.
    pub fn manifest(&self) -> Option<(&serde_json::Value, String)> {
        if let Some(m) = self.manifest.get() {
            return Some((m, "manifest.json".into()));
        }
        self.bench
            .iter()
            .find(|(_, f)| !f.manifest.is_null())
            .map(|(name, f)| (&f.manifest, name.clone()))
    }

    /// Notes of every bench file, prefixed with the file name.
    pub fn notes(&self) -> Vec<String> {
        self.bench
            .iter()
            .flat_map(|(name, f)| f.notes.iter().map(move |n| format!("{name}: {n}")))
            .collect()
    }
}

/// What `generate` wrote.
#[derive(Debug)]
pub struct Generated {
    /// Path of summary.md.
    pub summary: PathBuf,
    /// Plot files written.
    pub plots: Vec<PathBuf>,
    /// Rows in the tables.
    pub rows: usize,
    /// Bench files read.
    pub bench_files: usize,
    /// Problems worth telling the user that did not stop the report.
    pub warnings: Vec<String>,
}

/// Why no report could be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The artifacts folder is missing or not a folder.
    #[error("{0} is not a folder: pass the artifacts folder (e.g. artifacts/<timestamp>)")]
    NotAFolder(PathBuf),
    /// A file system failure.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The plot file.
        path: PathBuf,
        /// plotters' message.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read_optional<T: for<'de> Deserialize<'de>>(dir: &Path, name: &str) -> Optional<T> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Optional::Absent,
        Err(e) => Optional::Unreadable(e.to_string()),
        Ok(text) => match serde_json::from_str(&text) {
            Ok(v) => Optional::Present(v),
            Err(e) => Optional::Unreadable(format!("malformed JSON: {e}")),
        },
    }
}

/// The bench files of an artifacts folder (`bench*.json`), by name.
pub fn bench_file_names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("bench") && n.ends_with(".json"))
        .collect();
    names.sort();
    Ok(names)
}

/// Reads the artifacts folder. Unreadable files are recorded, not fatal; only a missing
/// folder is.
pub fn load(dir: &Path) -> Result<Inputs, ReportError> {
    if !dir.is_dir() {
        return Err(ReportError::NotAFolder(dir.to_path_buf()));
    }
    let names = bench_file_names(dir).map_err(io(dir))?;
    let mut bench = Vec::new();
    let mut bench_unreadable = Vec::new();
    for name in names {
        match BenchFile::read(&dir.join(&name)) {
            Ok(f) => bench.push((name, f)),
            Err(e) => bench_unreadable.push((name, e.to_string())),
        }
    }
    Ok(Inputs {
        dir: dir.to_path_buf(),
        bench,
        bench_unreadable,
        check: read_optional(dir, "check.json"),
        verify: read_optional(dir, "verify.json"),
        manifest: read_optional(dir, "manifest.json"),
        stages: read_optional(dir, "stages.json"),
        profile: read_optional(dir, "profile.json"),
    })
}

/// Reads `dir` and writes `out/summary.md` and `out/plots/*.svg`.
pub fn generate(dir: &Path, out: &Path) -> Result<Generated, ReportError> {
    let inputs = load(dir)?;
    let rows = inputs.rows();
    std::fs::create_dir_all(out).map_err(io(out))?;
    let plots = plots::render_all(&rows, out)?;
    let text = markdown::render(&inputs, &rows, &plots);
    let summary = out.join("summary.md");
    std::fs::write(&summary, text).map_err(io(&summary))?;
    let mut warnings: Vec<String> = inputs
        .bench_unreadable
        .iter()
        .map(|(n, e)| format!("skipped {n}: {e}"))
        .collect();
    for (name, unreadable) in [
        (
            "check.json",
            matches!(inputs.check, Optional::Unreadable(_)),
        ),
        (
            "verify.json",
            matches!(inputs.verify, Optional::Unreadable(_)),
        ),
        (
            "manifest.json",
            matches!(inputs.manifest, Optional::Unreadable(_)),
        ),
        (
            "stages.json",
            matches!(inputs.stages, Optional::Unreadable(_)),
        ),
        (
            "profile.json",
            matches!(inputs.profile, Optional::Unreadable(_)),
        ),
    ] {
        if unreadable {
            warnings.push(format!("{name} could not be read (see summary.md)"));
        }
    }
    if inputs.bench.is_empty() {
        warnings.push(format!("no readable bench*.json in {}", dir.display()));
    }
    Ok(Generated {
        summary,
        plots: plots.iter().map(|p| out.join(&p.file)).collect(),
        rows: rows.len(),
        bench_files: inputs.bench.len(),
        warnings,
    })
}
