//! `sdpa-lab profile`: Nsight Compute metrics of our kernels on bench cases, and the truth
//! check of bench's timings against ncu's kernel durations.
//!
//! 1. ncu and a GPU must be here; else profile.json says why and the exit code is 3, so a
//!    pipeline goes on without profiles.
//! 2. A reference bench run (hot mode, no ceilings, no profiler) times the chosen cases:
//!    `profile/bench.json`, the truth check's bench medians.
//! 3. One case (one variant) at a time, ncu profiles a few calls past warm-up of a child that
//!    runs the case (see [`crate::profile::case`] and [`ncu::collect_args`]). A child per
//!    case because ncu's launch window counts launches over the whole process, and bench's
//!    `--filter` matches names by substring (`mission` also picks `mission-s256`); the child
//!    is this command's hidden `--child-case` mode.
//! 4. profile.json and profile.md: per case and kernel the metrics, per case the truth row.

use crate::bench::record::{BenchFile, BenchRow, IMPL_OURS};
use crate::bench::suites::{cases, Suite, TimingMode};
use crate::profile::case::{profile_case, Job};
use crate::profile::csv;
use crate::profile::ncu::{self, Failure};
use crate::profile::{truth, CaseProfile, ProfileFile};
use fp8_sdpa::{Error, Result, Variant};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Exit code when profiling is not possible here (no ncu, no GPU, no counter access).
pub const NOT_RUN: u8 = 3;

/// Arguments of `profile`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// The cases and variants (as in bench).
    #[command(flatten)]
    pub select: crate::cmd::bench::Selection,
    /// Output folder: profile.json, profile.md, and profile/ with the reference bench run
    /// (bench.json) and per case ncu's report (.ncu-rep), its CSV and ncu's log.
    #[arg(long, default_value = "artifacts/profile")]
    pub out: PathBuf,
    /// Timed runs per case, in the reference bench run and in each profiled child.
    #[arg(long, default_value_t = 100)]
    pub iters: usize,
    /// Calls profiled per case, after the warm-up calls (a prefill case gets twice as many:
    /// ncu counts launches, and a decode call is two).
    #[arg(long, default_value_t = 5)]
    pub calls: usize,
    /// A case whose bench median and ncu time per call differ by more than this many percent
    /// of ncu's time is flagged.
    #[arg(long, default_value_t = 10.0)]
    pub tolerance: f64,
    /// The Nsight Compute CLI: a path, or a name looked up on PATH.
    #[arg(long, default_value = "ncu")]
    pub ncu: PathBuf,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Internal: run one case (`suite/case/precision`, with one --variant) as bench does,
    /// under ncu; the parent starts it.
    #[arg(long, hide = true)]
    pub child_case: Option<String>,
    /// Internal: where the child writes its bench row.
    #[arg(long, hide = true)]
    pub child_out: Option<PathBuf>,
}

/// Runs the command.
pub fn run(a: Args) -> Result<ExitCode> {
    if let Some(sel) = a.child_case.clone() {
        return child(&a, &sel);
    }
    let files = a.out.join("profile");
    std::fs::create_dir_all(&files).map_err(Error::io(&files))?;
    let mut file = ProfileFile::new(Vec::new(), a.tolerance);

    let ncu_path = match ncu::locate(&a.ncu, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(why) => return not_run(&a.out, file, &why),
    };
    file.ncu = Some(ncu_path.display().to_string());
    match ncu_version(&ncu_path) {
        Ok(v) => file.ncu_version = Some(v),
        Err(why) => return not_run(&a.out, file, &why),
    }
    let dev = match crate::cmd::env::open_device(a.device) {
        Ok(d) => d,
        Err(why) => return not_run(&a.out, file, &format!("profiling needs a GPU: {why}")),
    };
    file.device = Some(dev.info().name.clone());
    file.metrics = ncu::metrics_for(dev.info().arch);
    let manifest = serde_json::to_value(crate::manifest::Manifest::take(Ok(&dev)))
        .expect("manifest serializes");
    // The children open their own contexts; this one would only hold memory.
    drop(dev);

    let rows = reference_bench(&a, manifest)?;
    file.reference_bench = Some("profile/bench.json".into());
    let exe = std::env::current_exe().map_err(Error::io(Path::new("sdpa-lab")))?;
    let metrics = file.metrics.clone();
    let job = Job {
        ncu: &ncu_path,
        exe: &exe,
        metrics: &metrics,
        out: &a.out,
        calls: a.calls,
        iters: a.iters,
        device: a.device,
    };
    let json = a.out.join("profile.json");
    let mut unavailable = None;
    for (i, row) in rows.iter().enumerate() {
        let mut case = CaseProfile {
            suite: row.suite.clone(),
            case: row.case.clone(),
            precision: row.precision,
            variant: row.backend.clone(),
            status: "ok".into(),
            bench_median_us: row.median_us().filter(|_| row.is_ok()),
            calls: 0,
            call_us: None,
            kernels: Vec::new(),
            files: Vec::new(),
            note: None,
        };
        if !row.is_ok() {
            // A row bench skipped (a variant this arch cannot run) is no failure of profile's.
            case.status = match row.status.strip_prefix("skipped: ") {
                Some(why) => format!("skipped: not timed: {why}"),
                None => format!("failed: the reference bench run: {}", row.status),
            };
            file.cases.push(case);
            continue;
        }
        eprintln!(
            "profile [{}/{}] {}/{} {} {}",
            i + 1,
            rows.len(),
            row.suite,
            row.case,
            row.precision.name(),
            row.backend
        );
        let id = file_id(i, row);
        let r = profile_case(&job, &id, row);
        if file.collect_command.is_none() {
            file.collect_command = Some(r.command.clone());
            file.import_command = Some(ncu::shell_line(
                &ncu_path,
                &ncu::import_args(Path::new(&format!("profile/{id}.ncu-rep")), true),
            ));
        }
        case.files = r.files;
        case.note = r.note;
        let profiled_before = file.cases.iter().any(CaseProfile::is_ok);
        match r.failure {
            Some(Failure::Unavailable(why)) => {
                case.status = format!("failed: {why}");
                file.cases.push(case);
                unavailable = Some(why);
                break;
            }
            // ncu failing on the first case it tries says this machine cannot profile; after
            // a success it is this case's failure.
            Some(Failure::Failed(why)) if !profiled_before && !r.child_failed => {
                case.status = format!("failed: {why}");
                file.cases.push(case);
                unavailable = Some(format!("ncu could not profile the first case: {why}"));
                break;
            }
            Some(Failure::Failed(why)) => case.status = format!("failed: {why}"),
            None => {
                let (calls, call_us) = csv::call_duration_us(&r.launches);
                case.calls = calls;
                case.call_us = call_us;
                case.kernels = csv::summarize(&r.launches);
            }
        }
        file.cases.push(case);
        file.truth = truth::check(&file.cases, a.tolerance);
        file.write(&json).map_err(Error::InvalidInput)?;
    }
    file.truth = truth::check(&file.cases, a.tolerance);
    if let Some(why) = unavailable {
        return not_run(&a.out, file, &why);
    }
    let failed = file
        .cases
        .iter()
        .filter(|c| c.status.starts_with("failed"))
        .count();
    if failed > 0 {
        file.status = format!(
            "failed: {failed} of {} case(s) could not be profiled",
            file.cases.len()
        );
    }
    write_outputs(&a.out, &file)?;
    print_table(&file);
    eprintln!("wrote {}", json.display());
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Records why profiling cannot run here, says so, and returns [`NOT_RUN`].
fn not_run(out: &Path, mut file: ProfileFile, why: &str) -> Result<ExitCode> {
    eprintln!("profile: not run: {why}");
    file.not_run(why);
    write_outputs(out, &file)?;
    eprintln!("wrote {}", out.join("profile.json").display());
    Ok(ExitCode::from(NOT_RUN))
}

fn write_outputs(out: &Path, file: &ProfileFile) -> Result<()> {
    std::fs::create_dir_all(out).map_err(Error::io(out))?;
    file.write(&out.join("profile.json"))
        .map_err(Error::InvalidInput)?;
    let mut md = String::from("# sdpa-lab profile\n\n");
    crate::report::profile::body(&mut md, file);
    let path = out.join("profile.md");
    std::fs::write(&path, md).map_err(Error::io(&path))
}

/// ncu's version line; an ncu that does not run is as good as none.
fn ncu_version(ncu: &Path) -> std::result::Result<String, String> {
    let o = Command::new(ncu)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ncu.display()))?;
    let text = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        return Err(format!(
            "{} --version failed ({}): {}",
            ncu.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(text
        .lines()
        .find(|l| l.contains("Version"))
        .or_else(|| text.lines().rfind(|l| !l.trim().is_empty()))
        .unwrap_or("unknown")
        .trim()
        .to_string())
}

/// The reference bench run: our rows of `profile/bench.json`.
fn reference_bench(a: &Args, manifest: serde_json::Value) -> Result<Vec<BenchRow>> {
    let bench_args = crate::cmd::bench::Args {
        select: a.select.clone(),
        // ncu's launches run back to back on inputs flushed from L2, as hot mode's do.
        mode: Some(TimingMode::Hot),
        peers: false,
        peers_script: PathBuf::from("scripts/peers.py"),
        iters: a.iters,
        out: a.out.join("profile").join("bench.json"),
        no_ceilings: true,
        device: a.device,
    };
    eprintln!("profile: reference bench run (hot mode, no profiler)");
    let (path, _) = crate::cmd::bench::bench(&bench_args, manifest)?;
    let file = BenchFile::read(&path).map_err(|e| Error::InvalidInput(e.to_string()))?;
    Ok(file
        .rows
        .into_iter()
        .filter(|r| r.implementation == IMPL_OURS)
        .collect())
}

/// A file-name-safe stem for a case's files.
fn file_id(i: usize, row: &BenchRow) -> String {
    format!("{i:03}_{}_{}_{}", row.suite, row.case, row.precision.name())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn print_table(file: &ProfileFile) {
    println!(
        "{:<8} {:<26} {:<10} {:<36} {:>10} {:>10} {:>7}  verdict",
        "suite", "case", "precision", "variant", "bench us", "ncu us", "ratio"
    );
    for t in &file.truth {
        let f = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        println!(
            "{:<8} {:<26} {:<10} {:<36} {:>10} {:>10} {:>7}  {}{}",
            t.suite,
            t.case,
            t.precision.name(),
            t.variant,
            f(t.bench_median_us, 1),
            f(t.ncu_us, 1),
            f(t.ratio, 2),
            if t.flagged { "FLAG " } else { "" },
            t.verdict
        );
    }
}

/// The child: one case as bench times it (checked call, warm-up, timed runs), for ncu to
/// profile. Exit 0 when the row timed correct, 1 when not.
fn child(a: &Args, selector: &str) -> Result<ExitCode> {
    let bad = |why: String| Error::InvalidInput(format!("--child-case {selector}: {why}"));
    let [suite, name, precision] = selector.split('/').collect::<Vec<_>>()[..] else {
        return Err(bad("expected suite/case/precision".into()));
    };
    let suite: Suite = suite.parse().map_err(bad)?;
    // The full grid holds every --quick case too.
    let case = cases(suite, false)
        .into_iter()
        .find(|c| c.name == name && c.precision.name() == precision)
        .ok_or_else(|| bad("no such case".into()))?;
    let [key] = a.select.variant.as_slice() else {
        return Err(bad("takes exactly one --variant".into()));
    };
    let variant: Variant = key.parse()?;
    let dev = crate::cmd::env::open_device(a.device)
        .map_err(|e| Error::Unsupported(format!("profile needs a GPU: {e}")))?;
    // As in bench: one stream, no per-use events. SAFETY: nothing else uses this context.
    unsafe { dev.context().disable_event_tracking() };
    let stream = dev.new_stream()?;
    let mut flusher = crate::timing::Flusher::new(&stream, dev.info().l2_bytes)?;
    let row = crate::cmd::bench::bench_one(
        &dev,
        &stream,
        &case,
        TimingMode::Hot,
        variant,
        a.iters,
        &mut flusher,
    );
    if let Some(p) = &a.child_out {
        let text = serde_json::to_string_pretty(&row).expect("row serializes");
        std::fs::write(p, text).map_err(Error::io(p))?;
    }
    Ok(if row.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
