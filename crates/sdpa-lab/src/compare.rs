//! `sdpa-lab compare A B`: which timings changed between two bench runs, and whether any of
//! ours got slower by more than noise.
//!
//! Each side is a bench file or an artifacts folder (every `bench*.json` in it, merged in
//! file-name order). Rows are matched by suite, case, precision, mask and timing mode plus
//! implementation and backend. A row of ours that has no exact partner is paired with the
//! one unmatched row of ours on the same case, precision, mask and mode on the other side,
//! when each side has exactly one: that is the same case under a renamed backend (a new
//! default variant), and the output says so.
//!
//! Per pair, with `r = B p50 / A p50` and threshold `t` (5 % by default):
//! - *beyond the spread* means the p10–p90 intervals of the two runs do not overlap
//!   (`B p10 > A p90`: slower; `B p90 < A p10`: faster);
//! - `|r − 1| ≤ t`: **within threshold**;
//! - `|r − 1| > t` but intervals overlap: **within spread** (noise at this spread);
//! - `r > 1 + t` and beyond the spread: **REGRESSION** for our rows, **slower** for peers'
//!   (PyTorch, FlashAttention), which measure the machine rather than this code;
//! - `r < 1 − t` and beyond the spread: **faster**;
//! - a row of ours timed in A that failed in B: **FAILED in B**, which counts as a regression;
//! - the case's shape changed between the runs: **shape changed**, not compared;
//! - either side not timed (skipped, failed): **not timed**.
//!
//! The command exits 1 when any row of ours is a regression or failed in B, else 0.

use crate::bench::record::{BenchFile, BenchRow, RecordError, IMPL_OURS};
use crate::bench::suites::TimingMode;
use crate::report::environment;
use crate::report::plots::format_value;
use fp8_sdpa::Precision;
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Default regression threshold, percent.
pub const DEFAULT_THRESHOLD_PCT: f64 = 5.0;

/// Why a comparison could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The path does not exist.
    #[error("{0}: no such file or folder (pass a bench.json or an artifacts folder)")]
    Missing(PathBuf),
    /// A folder without any `bench*.json`.
    #[error("{0}: no bench*.json in this folder")]
    NoBenchFiles(PathBuf),
    /// A file system failure reading or listing.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A bench file that is not valid (the error names the file).
    #[error(transparent)]
    Bench(#[from] RecordError),
    /// Writing `--out`.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The rows of one side.
#[derive(Debug)]
pub struct Side {
    /// The path as given.
    pub path: PathBuf,
    /// Bench files read, in order.
    pub files: Vec<PathBuf>,
    /// All rows, in file then run order.
    pub rows: Vec<BenchRow>,
    /// `manifest.json` of the folder, else the first bench file's non-null manifest.
    pub manifest: Option<Value>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CompareError + '_ {
    move |source| CompareError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads one side: a bench file, or every `bench*.json` of a folder.
pub fn load_side(path: &Path) -> Result<Side, CompareError> {
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CompareError::Missing(path.to_path_buf()))
        }
        other => other.map_err(io_err(path))?,
    };
    let mut manifest = None;
    let files: Vec<PathBuf> = if meta.is_dir() {
        let names = crate::report::bench_file_names(path).map_err(io_err(path))?;
        if names.is_empty() {
            return Err(CompareError::NoBenchFiles(path.to_path_buf()));
        }
        let m = path.join("manifest.json");
        if let Ok(text) = std::fs::read_to_string(&m) {
            manifest = serde_json::from_str::<Value>(&text).ok();
        }
        names.into_iter().map(|n| path.join(n)).collect()
    } else {
        vec![path.to_path_buf()]
    };
    let mut rows = Vec::new();
    for f in &files {
        let b = BenchFile::read(f)?;
        if manifest.is_none() && !b.manifest.is_null() {
            manifest = Some(b.manifest.clone());
        }
        rows.extend(b.rows);
    }
    Ok(Side {
        path: path.to_path_buf(),
        files,
        rows,
        manifest,
    })
}

/// What identifies a row across runs, less the backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CaseKey {
    suite: String,
    case: String,
    precision: Precision,
    causal: bool,
    mode: TimingMode,
    implementation: String,
}

impl CaseKey {
    fn of(r: &BenchRow) -> Self {
        CaseKey {
            suite: r.suite.clone(),
            case: r.case.clone(),
            precision: r.precision,
            causal: r.causal,
            mode: r.mode,
            implementation: r.implementation.clone(),
        }
    }
}

type RowKey = (CaseKey, String);

fn row_key(r: &BenchRow) -> RowKey {
    (CaseKey::of(r), r.backend.clone())
}

/// One row per key: the first, unless a later duplicate was timed and it was not. Returns the
/// kept rows in first-seen order and a warning per duplicate.
fn dedup<'a>(side: &str, rows: &'a [BenchRow]) -> (Vec<&'a BenchRow>, Vec<String>) {
    let mut kept: Vec<&BenchRow> = Vec::new();
    let mut index: HashMap<RowKey, usize> = HashMap::new();
    let mut warnings = Vec::new();
    for r in rows {
        match index.get(&row_key(r)) {
            Some(&i) => {
                warnings.push(format!(
                    "{side}: {} appears more than once; {}",
                    describe(r),
                    if !kept[i].is_ok() && r.is_ok() {
                        "the later, timed row is used"
                    } else {
                        "the first row is used"
                    }
                ));
                if !kept[i].is_ok() && r.is_ok() {
                    kept[i] = r;
                }
            }
            None => {
                index.insert(row_key(r), kept.len());
                kept.push(r);
            }
        }
    }
    (kept, warnings)
}

fn describe(r: &BenchRow) -> String {
    format!(
        "{}/{} {} {}{} {} {}",
        r.suite,
        r.case,
        r.precision.name(),
        r.mode,
        if r.causal { " causal" } else { "" },
        r.implementation,
        r.backend
    )
}

/// The timing figures a comparison uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    /// Timed runs.
    pub n: usize,
    /// Median, µs.
    pub median_us: f64,
    /// 10th percentile, µs.
    pub p10_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
}

impl Timing {
    fn of(r: &BenchRow) -> Option<Timing> {
        let s = r.stats.as_ref().filter(|_| r.is_ok())?;
        Some(Timing {
            n: s.n,
            median_us: s.median_us,
            p10_us: s.p10_us,
            p90_us: s.p90_us,
        })
    }
}

/// The outcome for one pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Ours, slower beyond the threshold and the spread: fails the comparison.
    Regression,
    /// Ours, timed in A, failed in B: fails the comparison.
    FailedInB,
    /// A peer's row slower beyond the threshold and the spread (not ours: does not fail).
    Slower,
    /// Faster beyond the threshold and the spread.
    Faster,
    /// Changed by more than the threshold, but the p10–p90 intervals overlap.
    WithinSpread,
    /// Changed by no more than the threshold.
    WithinThreshold,
    /// The case's shape differs between the runs: not compared.
    ShapeChanged,
    /// One side has no timings (skipped or failed).
    NotTimed,
}

impl Verdict {
    /// How the tables show it.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Regression => "REGRESSION",
            Verdict::FailedInB => "FAILED in B",
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::WithinSpread => "within spread",
            Verdict::WithinThreshold => "within threshold",
            Verdict::ShapeChanged => "shape changed",
            Verdict::NotTimed => "not timed",
        }
    }

    /// Whether it fails the comparison (exit 1).
    pub fn fails(self) -> bool {
        matches!(self, Verdict::Regression | Verdict::FailedInB)
    }
}

/// One matched row.
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    /// Suite.
    pub suite: String,
    /// Case.
    pub case: String,
    /// Precision path.
    pub precision: Precision,
    /// Causal mask.
    pub causal: bool,
    /// Timing mode.
    pub mode: TimingMode,
    /// Implementation.
    pub implementation: String,
    /// Backend in A.
    pub backend_a: String,
    /// Backend in B (differs from A's when paired across a backend change).
    pub backend_b: String,
    /// Paired across a backend change (a new default variant).
    pub backend_changed: bool,
    /// A's timings, when timed.
    pub a: Option<Timing>,
    /// B's timings, when timed.
    pub b: Option<Timing>,
    /// A's status.
    pub status_a: String,
    /// B's status.
    pub status_b: String,
    /// B p50 / A p50.
    pub ratio: Option<f64>,
    /// Whether the p10–p90 intervals are disjoint.
    pub beyond_spread: Option<bool>,
    /// The outcome.
    pub verdict: Verdict,
}

impl Pair {
    fn label(&self) -> String {
        format!(
            "{}/{} {} {}{}",
            self.suite,
            self.case,
            self.precision.name(),
            self.mode,
            if self.causal { " causal" } else { "" }
        )
    }

    fn backend(&self) -> String {
        if self.backend_changed {
            format!("{} → {}", self.backend_a, self.backend_b)
        } else {
            self.backend_a.clone()
        }
    }
}

/// A row found on one side only.
#[derive(Debug, Clone, Serialize)]
pub struct Unmatched {
    /// Suite.
    pub suite: String,
    /// Case.
    pub case: String,
    /// Precision path.
    pub precision: Precision,
    /// Causal mask.
    pub causal: bool,
    /// Timing mode.
    pub mode: TimingMode,
    /// Implementation.
    pub implementation: String,
    /// Backend.
    pub backend: String,
    /// Median µs, when timed.
    pub median_us: Option<f64>,
    /// Status.
    pub status: String,
}

impl Unmatched {
    fn of(r: &BenchRow) -> Self {
        Unmatched {
            suite: r.suite.clone(),
            case: r.case.clone(),
            precision: r.precision,
            causal: r.causal,
            mode: r.mode,
            implementation: r.implementation.clone(),
            backend: r.backend.clone(),
            median_us: Timing::of(r).map(|t| t.median_us),
            status: r.status.clone(),
        }
    }
}

/// Where a side came from.
#[derive(Debug, Clone, Serialize)]
pub struct SideInfo {
    /// Path as given.
    pub path: PathBuf,
    /// Bench files read.
    pub files: Vec<PathBuf>,
    /// Rows read.
    pub rows: usize,
    /// GPU, from the manifest.
    pub gpu: Option<String>,
    /// Git commit (and state), from the manifest.
    pub git: Option<String>,
}

impl SideInfo {
    fn of(s: &Side) -> Self {
        let env = s
            .manifest
            .as_ref()
            .map(environment::rows)
            .unwrap_or_default();
        let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        SideInfo {
            path: s.path.clone(),
            files: s.files.clone(),
            rows: s.rows.len(),
            gpu: get("GPU").or_else(|| get("device")),
            git: get("Git commit").or_else(|| get("git_sha")),
        }
    }
}

/// Counts of the verdicts over our rows and all rows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Pairs compared.
    pub pairs: usize,
    /// Pairs of our rows.
    pub ours: usize,
    /// Our rows that fail the comparison.
    pub regressions: usize,
    /// Rows faster beyond threshold and spread.
    pub faster: usize,
    /// Peer rows slower beyond threshold and spread.
    pub slower_peers: usize,
    /// Rows over the threshold but within the spread.
    pub within_spread: usize,
    /// Rows within the threshold.
    pub within_threshold: usize,
    /// Pairs not compared (untimed on one side, or shape changed).
    pub not_compared: usize,
    /// Pairs timed on neither side (skipped or failed in both runs): not in the tables.
    pub untimed_both: usize,
    /// Pairs made across a backend change.
    pub backend_changes: usize,
    /// Geometric mean of B/A over our timed pairs.
    pub geomean_ratio_ours: Option<f64>,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Side A (the baseline).
    pub a: SideInfo,
    /// Side B (the candidate).
    pub b: SideInfo,
    /// Threshold, percent.
    pub threshold_pct: f64,
    /// Matched rows, in A's order.
    pub pairs: Vec<Pair>,
    /// Rows only in A.
    pub only_in_a: Vec<Unmatched>,
    /// Rows only in B.
    pub only_in_b: Vec<Unmatched>,
    /// Duplicates and other remarks.
    pub warnings: Vec<String>,
    /// Counts.
    pub summary: Summary,
}

impl Comparison {
    /// Whether any row of ours regressed (exit 1).
    pub fn failed(&self) -> bool {
        self.summary.regressions > 0
    }
}

fn verdict(a: &BenchRow, b: &BenchRow, threshold: f64) -> (Option<f64>, Option<bool>, Verdict) {
    let ours = a.implementation == IMPL_OURS;
    let (ta, tb) = match (Timing::of(a), Timing::of(b)) {
        (Some(ta), Some(tb)) if ta.median_us > 0.0 => (ta, tb),
        (Some(_), None) if ours && b.status.starts_with("failed") => {
            return (None, None, Verdict::FailedInB)
        }
        _ => return (None, None, Verdict::NotTimed),
    };
    let shape_same = a.shape == b.shape;
    let ratio = tb.median_us / ta.median_us;
    let slower_beyond = tb.p10_us > ta.p90_us;
    let faster_beyond = tb.p90_us < ta.p10_us;
    let beyond = slower_beyond || faster_beyond;
    if !shape_same {
        return (Some(ratio), Some(beyond), Verdict::ShapeChanged);
    }
    let v = if (ratio - 1.0).abs() <= threshold {
        Verdict::WithinThreshold
    } else if !beyond {
        Verdict::WithinSpread
    } else if ratio > 1.0 && slower_beyond {
        if ours {
            Verdict::Regression
        } else {
            Verdict::Slower
        }
    } else if ratio < 1.0 && faster_beyond {
        Verdict::Faster
    } else {
        // The medians and the intervals disagree on the direction (a skewed series).
        Verdict::WithinSpread
    };
    (Some(ratio), Some(beyond), v)
}

fn pair(a: &BenchRow, b: &BenchRow, threshold: f64) -> Pair {
    let (ratio, beyond_spread, verdict) = verdict(a, b, threshold);
    Pair {
        suite: a.suite.clone(),
        case: a.case.clone(),
        precision: a.precision,
        causal: a.causal,
        mode: a.mode,
        implementation: a.implementation.clone(),
        backend_a: a.backend.clone(),
        backend_b: b.backend.clone(),
        backend_changed: a.backend != b.backend,
        a: Timing::of(a),
        b: Timing::of(b),
        status_a: a.status.clone(),
        status_b: b.status.clone(),
        ratio,
        beyond_spread,
        verdict,
    }
}

/// Compares two sides; `threshold_pct` is the regression threshold in percent.
pub fn compare(a: &Side, b: &Side, threshold_pct: f64) -> Comparison {
    let t = threshold_pct / 100.0;
    let (rows_a, mut warnings) = dedup("A", &a.rows);
    let (rows_b, warn_b) = dedup("B", &b.rows);
    warnings.extend(warn_b);

    let index_b: HashMap<RowKey, usize> = rows_b
        .iter()
        .enumerate()
        .map(|(i, r)| (row_key(r), i))
        .collect();
    let exact: Vec<Option<usize>> = rows_a
        .iter()
        .map(|r| index_b.get(&row_key(r)).copied())
        .collect();
    let used_b: HashSet<usize> = exact.iter().flatten().copied().collect();

    // Our rows left over on each side, by case: a pair when exactly one on each side.
    let mut left_a: HashMap<CaseKey, Vec<usize>> = HashMap::new();
    for (i, r) in rows_a.iter().enumerate() {
        if exact[i].is_none() && r.implementation == IMPL_OURS {
            left_a.entry(CaseKey::of(r)).or_default().push(i);
        }
    }
    let mut left_b: HashMap<CaseKey, Vec<usize>> = HashMap::new();
    for (j, r) in rows_b.iter().enumerate() {
        if !used_b.contains(&j) && r.implementation == IMPL_OURS {
            left_b.entry(CaseKey::of(r)).or_default().push(j);
        }
    }
    let mut renamed: HashMap<usize, usize> = HashMap::new();
    for (k, ia) in &left_a {
        if let Some(jb) = left_b.get(k) {
            if ia.len() == 1 && jb.len() == 1 {
                renamed.insert(ia[0], jb[0]);
            }
        }
    }

    let mut pairs = Vec::new();
    let mut only_in_a = Vec::new();
    let mut matched_b: HashSet<usize> = used_b;
    for (i, ra) in rows_a.iter().enumerate() {
        match exact[i].or_else(|| renamed.get(&i).copied()) {
            Some(j) => {
                matched_b.insert(j);
                pairs.push(pair(ra, rows_b[j], t));
            }
            None => only_in_a.push(Unmatched::of(ra)),
        }
    }
    let only_in_b: Vec<Unmatched> = rows_b
        .iter()
        .enumerate()
        .filter(|(j, _)| !matched_b.contains(j))
        .map(|(_, r)| Unmatched::of(r))
        .collect();

    let info_a = SideInfo::of(a);
    let info_b = SideInfo::of(b);
    let gpu = |s: &Side| s.manifest.as_ref().and_then(environment::gpu_name);
    if let (Some(ga), Some(gb)) = (gpu(a), gpu(b)) {
        if ga != gb {
            warnings.push(format!(
                "the runs come from different GPUs (A: {ga}; B: {gb}): changes may be the machine's"
            ));
        }
    }

    let summary = summarize(&pairs);
    Comparison {
        a: info_a,
        b: info_b,
        threshold_pct,
        pairs,
        only_in_a,
        only_in_b,
        warnings,
        summary,
    }
}

fn summarize(pairs: &[Pair]) -> Summary {
    let mut s = Summary {
        pairs: pairs.len(),
        ..Summary::default()
    };
    let mut log_sum = 0.0;
    let mut log_n = 0usize;
    for p in pairs {
        let ours = p.implementation == IMPL_OURS;
        if ours {
            s.ours += 1;
        }
        if p.backend_changed {
            s.backend_changes += 1;
        }
        if p.verdict.fails() {
            s.regressions += 1;
        }
        match p.verdict {
            Verdict::Regression | Verdict::FailedInB => {}
            Verdict::Slower => s.slower_peers += 1,
            Verdict::Faster => s.faster += 1,
            Verdict::WithinSpread => s.within_spread += 1,
            Verdict::WithinThreshold => s.within_threshold += 1,
            Verdict::NotTimed if p.a.is_none() && p.b.is_none() => s.untimed_both += 1,
            Verdict::ShapeChanged | Verdict::NotTimed => s.not_compared += 1,
        }
        if ours && p.verdict != Verdict::ShapeChanged {
            if let Some(r) = p.ratio.filter(|r| *r > 0.0 && r.is_finite()) {
                log_sum += r.ln();
                log_n += 1;
            }
        }
    }
    s.geomean_ratio_ours = (log_n > 0).then(|| (log_sum / log_n as f64).exp());
    s
}

fn us(t: Option<&Timing>, f: impl Fn(&Timing) -> String) -> String {
    t.map(f).unwrap_or_else(|| "–".into())
}

fn spread(t: &Timing) -> String {
    format!("{}–{}", format_value(t.p10_us), format_value(t.p90_us))
}

fn ratio_cell(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{r:.3} ({:+.1}%)", (r - 1.0) * 100.0),
        None => "–".into(),
    }
}

fn verdict_cell(p: &Pair) -> String {
    let mut v = p.verdict.label().to_string();
    if p.verdict == Verdict::NotTimed || p.verdict == Verdict::FailedInB {
        let why = |s: &str| if s == "ok" { "no stats" } else { s }.to_string();
        if p.a.is_none() {
            v += &format!(" (A: {})", why(&p.status_a));
        }
        if p.b.is_none() {
            v += &format!(" (B: {})", why(&p.status_b));
        }
    }
    if p.backend_changed {
        v += ", backend changed";
    }
    v
}

/// The pairs the tables show: those timed on at least one side.
fn shown(c: &Comparison) -> impl Iterator<Item = &Pair> {
    c.pairs.iter().filter(|p| p.a.is_some() || p.b.is_some())
}

/// The table's columns for one pair.
fn columns(p: &Pair) -> [String; 9] {
    [
        p.label(),
        p.implementation.clone(),
        p.backend(),
        us(p.a.as_ref(), |t| format_value(t.median_us)),
        us(p.b.as_ref(), |t| format_value(t.median_us)),
        ratio_cell(p.ratio),
        us(p.a.as_ref(), spread),
        us(p.b.as_ref(), spread),
        verdict_cell(p),
    ]
}

const HEADERS: [&str; 9] = [
    "row",
    "implementation",
    "backend",
    "A p50 µs",
    "B p50 µs",
    "B/A",
    "A p10–p90 µs",
    "B p10–p90 µs",
    "verdict",
];

/// Columns 3..=7 are numbers: right-aligned.
fn numeric(col: usize) -> bool {
    (3..=7).contains(&col)
}

fn unmatched_line(u: &Unmatched) -> String {
    format!(
        "{}/{} {} {}{} {} {}: {}",
        u.suite,
        u.case,
        u.precision.name(),
        u.mode,
        if u.causal { " causal" } else { "" },
        u.implementation,
        u.backend,
        match u.median_us {
            Some(m) => format!("{} µs", format_value(m)),
            None => u.status.clone(),
        }
    )
}

fn summary_lines(c: &Comparison) -> Vec<String> {
    let s = &c.summary;
    let mut out = vec![format!(
        "{} row(s) matched ({} of fp8-sdpa, {} across a backend change), {} only in A, {} only in B.",
        s.pairs,
        s.ours,
        s.backend_changes,
        c.only_in_a.len(),
        c.only_in_b.len()
    )];
    out.push(format!(
        "{} regression(s) of fp8-sdpa, {} faster, {} peer row(s) slower, {} within spread, {} within threshold, {} not compared, {} timed in neither run (not shown).",
        s.regressions,
        s.faster,
        s.slower_peers,
        s.within_spread,
        s.within_threshold,
        s.not_compared,
        s.untimed_both
    ));
    if let Some(g) = s.geomean_ratio_ours {
        out.push(format!(
            "fp8-sdpa geometric mean B/A: {g:.3} ({:+.1}%).",
            (g - 1.0) * 100.0
        ));
    }
    out
}

fn rule_text(threshold_pct: f64) -> String {
    format!(
        "B/A is B's median over A's (below 1: B is faster). A change counts when |B/A − 1| > \
         {threshold_pct}% and the runs' p10–p90 intervals do not overlap; an fp8-sdpa row that \
         got slower that way, or that was timed in A and failed in B, is a regression."
    )
}

fn side_line(name: &str, s: &SideInfo) -> String {
    let mut line = format!(
        "{name}: {} ({} row(s) from {} file(s))",
        s.path.display(),
        s.rows,
        s.files.len()
    );
    if let Some(g) = &s.gpu {
        let _ = write!(line, "; GPU {g}");
    }
    if let Some(g) = &s.git {
        let _ = write!(line, "; git {g}");
    }
    line
}

/// The comparison as aligned plain text, for the terminal.
pub fn render_text(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", side_line("A", &c.a));
    let _ = writeln!(out, "{}\n", side_line("B", &c.b));
    let rows: Vec<[String; 9]> = shown(c).map(columns).collect();
    if !rows.is_empty() {
        let mut width = HEADERS.map(|h| h.chars().count());
        for r in &rows {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let pad = width[i] - cell.chars().count();
                if i > 0 {
                    s.push_str("  ");
                }
                if numeric(i) {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                } else {
                    s.push_str(cell);
                    if i + 1 < cells.len() {
                        s.push_str(&" ".repeat(pad));
                    }
                }
            }
            s
        };
        let _ = writeln!(out, "{}", line(&HEADERS.map(String::from)));
        for r in &rows {
            let _ = writeln!(out, "{}", line(r));
        }
        out.push('\n');
    }
    for (title, list) in [("Only in A", &c.only_in_a), ("Only in B", &c.only_in_b)] {
        if !list.is_empty() {
            let _ = writeln!(out, "{title} ({}):", list.len());
            for u in list.iter() {
                let _ = writeln!(out, "  {}", unmatched_line(u));
            }
            out.push('\n');
        }
    }
    for w in &c.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    for l in summary_lines(c) {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(out, "{}", rule_text(c.threshold_pct));
    out
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The comparison as markdown (compare.md).
pub fn render_markdown(c: &Comparison) -> String {
    let mut out = String::from("# sdpa-lab compare\n\n");
    let _ = writeln!(out, "- {}", md_cell(&side_line("A", &c.a)));
    let _ = writeln!(out, "- {}\n", md_cell(&side_line("B", &c.b)));
    let _ = writeln!(out, "{}\n", rule_text(c.threshold_pct));
    for l in summary_lines(c) {
        let _ = writeln!(out, "{l}  ");
    }
    out.push('\n');
    if shown(c).next().is_some() {
        let _ = writeln!(out, "| {} |", HEADERS.join(" | "));
        let align: Vec<&str> = (0..HEADERS.len())
            .map(|i| if numeric(i) { "---:" } else { "---" })
            .collect();
        let _ = writeln!(out, "|{}|", align.join("|"));
        for p in shown(c) {
            let cols = columns(p).map(|s| md_cell(&s));
            let _ = writeln!(out, "| {} |", cols.join(" | "));
        }
        out.push('\n');
    }
    let changed: Vec<&Pair> = c.pairs.iter().filter(|p| p.backend_changed).collect();
    if !changed.is_empty() {
        out.push_str("## Backend changes\n\nPaired as the same case under a new backend key:\n\n");
        for p in changed {
            let _ = writeln!(
                out,
                "- {}: `{}` → `{}`",
                md_cell(&p.label()),
                md_cell(&p.backend_a),
                md_cell(&p.backend_b)
            );
        }
        out.push('\n');
    }
    for (title, list) in [("Only in A", &c.only_in_a), ("Only in B", &c.only_in_b)] {
        if !list.is_empty() {
            let _ = writeln!(out, "## {title}\n");
            for u in list.iter() {
                let _ = writeln!(out, "- {}", md_cell(&unmatched_line(u)));
            }
            out.push('\n');
        }
    }
    if !c.warnings.is_empty() {
        out.push_str("## Warnings\n\n");
        for w in &c.warnings {
            let _ = writeln!(out, "- {}", md_cell(w));
        }
        out.push('\n');
    }
    out
}

/// Writes `compare.json` and `compare.md` into `dir` (created if needed); returns the paths.
pub fn write(c: &Comparison, dir: &Path) -> Result<[PathBuf; 2], CompareError> {
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CompareError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(werr(dir))?;
    let json = dir.join("compare.json");
    let text = serde_json::to_string_pretty(c).expect("comparison serializes");
    std::fs::write(&json, text).map_err(werr(&json))?;
    let md = dir.join("compare.md");
    std::fs::write(&md, render_markdown(c)).map_err(werr(&md))?;
    Ok([json, md])
}

/// Parses `--threshold`: a percentage, `5` or `5%`, not negative.
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let num = t.strip_suffix('%').unwrap_or(t).trim();
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a percentage: pass e.g. 5 or 5% (not negative)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::Stats;
    use fp8_sdpa::AttnShape;

    fn row(case: &str, imp: &str, backend: &str, median: f64, half_spread: f64) -> BenchRow {
        BenchRow {
            suite: "fa".into(),
            case: case.into(),
            implementation: imp.into(),
            backend: backend.into(),
            precision: Precision::F16,
            shape: AttnShape {
                batch: 1,
                seq_q: 128,
                seq_kv: 128,
                heads_q: 8,
                heads_kv: 8,
                head_dim: 64,
            },
            causal: false,
            mode: TimingMode::Hot,
            stats: Some(Stats {
                n: 100,
                median_us: median,
                p10_us: median - half_spread,
                p90_us: median + half_spread,
                p99_us: median + 2.0 * half_spread,
                mean_us: median,
                std_us: half_spread,
                cv: half_spread / median,
                min_us: median - 2.0 * half_spread,
                max_us: median + 3.0 * half_spread,
            }),
            tflops: None,
            gbps: None,
            pct_of_ceiling: None,
            correctness: None,
            status: "ok".into(),
            detail: None,
        }
    }

    fn side(rows: Vec<BenchRow>) -> Side {
        Side {
            path: "x".into(),
            files: vec!["x/bench.json".into()],
            rows,
            manifest: None,
        }
    }

    fn only(c: &Comparison) -> &Pair {
        assert_eq!(c.pairs.len(), 1, "{c:?}");
        &c.pairs[0]
    }

    #[test]
    fn verdicts() {
        let cmp = |a: BenchRow, b: BenchRow| compare(&side(vec![a]), &side(vec![b]), 5.0);
        // 10% slower, tight spreads: regression for ours, "slower" for torch
        let c = cmp(
            row("c", "fp8-sdpa", "v", 100.0, 1.0),
            row("c", "fp8-sdpa", "v", 110.0, 1.0),
        );
        assert_eq!(only(&c).verdict, Verdict::Regression);
        assert!(c.failed());
        let c = cmp(
            row("c", "torch", "cudnn", 100.0, 1.0),
            row("c", "torch", "cudnn", 110.0, 1.0),
        );
        assert_eq!(only(&c).verdict, Verdict::Slower);
        assert!(!c.failed());
        // 10% slower but wide spreads: noise
        let c = cmp(
            row("c", "fp8-sdpa", "v", 100.0, 8.0),
            row("c", "fp8-sdpa", "v", 110.0, 8.0),
        );
        assert_eq!(only(&c).verdict, Verdict::WithinSpread);
        assert!(!c.failed());
        // 3% slower beyond the spread: under the threshold
        let c = cmp(
            row("c", "fp8-sdpa", "v", 100.0, 0.5),
            row("c", "fp8-sdpa", "v", 103.0, 0.5),
        );
        assert_eq!(only(&c).verdict, Verdict::WithinThreshold);
        assert_eq!(only(&c).beyond_spread, Some(true));
        // faster
        let c = cmp(
            row("c", "fp8-sdpa", "v", 100.0, 1.0),
            row("c", "fp8-sdpa", "v", 80.0, 1.0),
        );
        assert_eq!(only(&c).verdict, Verdict::Faster);
        assert!((c.summary.geomean_ratio_ours.unwrap() - 0.8).abs() < 1e-12);
        // failed in B
        let c = cmp(
            row("c", "fp8-sdpa", "v", 100.0, 1.0),
            row("c", "fp8-sdpa", "v", 100.0, 1.0).failed("CUDA error"),
        );
        assert_eq!(only(&c).verdict, Verdict::FailedInB);
        assert!(c.failed());
        // skipped in B: not timed, not a failure
        let c = cmp(
            row("c", "fp8-sdpa", "v", 100.0, 1.0),
            row("c", "fp8-sdpa", "v", 100.0, 1.0).skipped("filtered"),
        );
        assert_eq!(only(&c).verdict, Verdict::NotTimed);
        assert!(!c.failed());
        // shape changed under the same name
        let mut b = row("c", "fp8-sdpa", "v", 200.0, 1.0);
        b.shape.batch = 2;
        let c = cmp(row("c", "fp8-sdpa", "v", 100.0, 1.0), b);
        assert_eq!(only(&c).verdict, Verdict::ShapeChanged);
        assert!(!c.failed());
    }

    #[test]
    fn backend_renames_pair_only_when_unambiguous() {
        let a = side(vec![
            row("one", "fp8-sdpa", "old", 100.0, 1.0),
            row("two", "fp8-sdpa", "x", 100.0, 1.0),
            row("two", "fp8-sdpa", "y", 100.0, 1.0),
            row("three", "torch", "flash", 100.0, 1.0),
        ]);
        let b = side(vec![
            row("one", "fp8-sdpa", "new", 90.0, 1.0),
            row("two", "fp8-sdpa", "z", 100.0, 1.0),
            row("three", "torch", "fa3", 100.0, 1.0),
        ]);
        let c = compare(&a, &b, 5.0);
        assert_eq!(c.pairs.len(), 1);
        let p = &c.pairs[0];
        assert!(p.backend_changed);
        assert_eq!((p.backend_a.as_str(), p.backend_b.as_str()), ("old", "new"));
        assert_eq!(p.verdict, Verdict::Faster);
        // two → z is ambiguous (x or y?), torch rows never pair across backends
        assert_eq!(c.only_in_a.len(), 3);
        assert_eq!(c.only_in_b.len(), 2);
        assert_eq!(c.summary.backend_changes, 1);
    }

    #[test]
    fn duplicates_keep_the_timed_row_and_warn() {
        let a = side(vec![
            row("c", "fp8-sdpa", "v", 100.0, 1.0).skipped("first try"),
            row("c", "fp8-sdpa", "v", 100.0, 1.0),
        ]);
        let b = side(vec![row("c", "fp8-sdpa", "v", 101.0, 1.0)]);
        let c = compare(&a, &b, 5.0);
        assert_eq!(only(&c).verdict, Verdict::WithinThreshold);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("later, timed row"));
    }

    #[test]
    fn threshold_parses_with_or_without_percent() {
        assert_eq!(parse_threshold("5"), Ok(5.0));
        assert_eq!(parse_threshold("2.5%"), Ok(2.5));
        assert_eq!(parse_threshold("0"), Ok(0.0));
        assert!(parse_threshold("-1").is_err());
        assert!(parse_threshold("five").is_err());
        assert!(parse_threshold("NaN").is_err());
    }

    #[test]
    fn errors_name_the_path() {
        let e = load_side(Path::new("/nonexistent/run")).unwrap_err();
        assert!(matches!(e, CompareError::Missing(_)));
        assert!(e.to_string().contains("/nonexistent/run"));
        let dir = tempfile::tempdir().unwrap();
        let e = load_side(dir.path()).unwrap_err();
        assert!(matches!(e, CompareError::NoBenchFiles(_)), "{e}");
        let bad = dir.path().join("bench.json");
        std::fs::write(&bad, "{").unwrap();
        let e = load_side(dir.path()).unwrap_err();
        assert!(matches!(e, CompareError::Bench(RecordError::Parse { .. })));
        assert!(e.to_string().contains(&bad.display().to_string()), "{e}");
    }
}
