//! One case under ncu: ncu runs a child `sdpa-lab profile --child-case …` that repeats bench's
//! sequence for that case alone (checked call, warm-up, timed runs) and profiles a few calls
//! past warm-up into a report (kept for the Nsight Compute GUI); `ncu --import` prints it as
//! CSV, which is kept and parsed. ncu's log and the child's row say what went wrong when
//! nothing came out.

use super::csv::{self, Launch};
use super::ncu::{self, Failure};
use crate::bench::record::BenchRow;
use std::path::Path;
use std::process::Command;

/// What one ncu run gave.
pub struct CaseRun {
    /// The collection command, as a shell line.
    pub command: String,
    /// Parsed launches; empty unless the run succeeded.
    pub launches: Vec<Launch>,
    /// Files left, relative to the output folder.
    pub files: Vec<String>,
    /// A problem that did not spoil the numbers.
    pub note: Option<String>,
    /// Why there is no profile.
    pub failure: Option<Failure>,
    /// The profiled child itself failed (its row), so ncu is not to blame.
    pub child_failed: bool,
}

/// How to profile: the same for every case of a run.
pub struct Job<'a> {
    /// ncu.
    pub ncu: &'a Path,
    /// sdpa-lab, which ncu starts as the child.
    pub exe: &'a Path,
    /// Metrics to collect.
    pub metrics: &'a [String],
    /// The output folder; a case's files go to its `profile/`.
    pub out: &'a Path,
    /// Calls to profile.
    pub calls: usize,
    /// Timed runs of the child.
    pub iters: usize,
    /// GPU ordinal.
    pub device: usize,
}

/// Runs ncu around a child that runs `row`'s case and variant as bench does, imports the
/// report as CSV and parses it; `id` names the case's files.
pub fn profile_case(job: &Job, id: &str, row: &BenchRow) -> CaseRun {
    let dir = job.out.join("profile");
    let name = |ext: &str| format!("{id}.{ext}");
    let [report, log, csv, child_json] =
        ["ncu-rep", "ncu.log", "csv", "child.json"].map(|e| dir.join(name(e)));
    // Files of an earlier run must not pass for this one's.
    for f in [&report, &log, &csv, &child_json] {
        let _ = std::fs::remove_file(f);
    }
    let mut args = ncu::collect_args(job.metrics, job.calls, &report, &log);
    args.push(job.exe.into());
    let selector = format!("{}/{}/{}", row.suite, row.case, row.precision.name());
    for s in [
        "profile",
        "--child-case",
        &selector,
        "--variant",
        &row.backend,
        "--iters",
        &job.iters.to_string(),
        "--device",
        &job.device.to_string(),
        "--child-out",
    ] {
        args.push(s.into());
    }
    args.push(child_json.clone().into());
    let mut run = CaseRun {
        command: ncu::shell_line(job.ncu, &args),
        launches: Vec::new(),
        files: Vec::new(),
        note: None,
        failure: None,
        child_failed: false,
    };
    let exit = match Command::new(job.ncu).args(&args).status() {
        Ok(s) => s.code(),
        Err(e) => {
            run.failure = Some(Failure::Unavailable(format!(
                "cannot start {}: {e}",
                job.ncu.display()
            )));
            return run;
        }
    };
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let diagnosis = ncu::diagnose(&log_text, exit);
    let child_row: Option<BenchRow> = std::fs::read_to_string(&child_json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let mut parsed = Err("ncu wrote no report".to_string());
    if report.exists() {
        parsed = import(job.ncu, &report).and_then(|text| {
            let _ = std::fs::write(&csv, &text);
            csv::parse_raw_csv(&text)
        });
    }
    run.files = [&report, &csv, &log, &child_json]
        .iter()
        .filter(|f| f.exists())
        .filter_map(|f| f.file_name())
        .map(|f| format!("profile/{}", f.to_string_lossy()))
        .collect();
    if let Some(r) = child_row.as_ref().filter(|r| r.status != "ok") {
        run.child_failed = true;
        run.failure = Some(Failure::Failed(format!(
            "the profiled run failed: {}",
            r.status
        )));
        return run;
    }
    match (parsed, diagnosis) {
        (_, Some(Failure::Unavailable(why))) => run.failure = Some(Failure::Unavailable(why)),
        (Ok(launches), diagnosis) if !launches.is_empty() => {
            // ncu may exit non-zero after writing good results (e.g. the child's own exit
            // code); the numbers stand, the note keeps the exit.
            if let Some(Failure::Failed(why)) = diagnosis {
                run.note = Some(why);
            }
            run.launches = launches;
        }
        (parsed, diagnosis) => {
            run.failure = Some(diagnosis.unwrap_or_else(|| {
                Failure::Failed(match parsed {
                    Ok(_) => "ncu's report holds no launch of ours".into(),
                    Err(e) => e,
                })
            }))
        }
    }
    run
}

/// `ncu --import … --csv --page raw`, with base units where this ncu knows `--print-units`.
fn import(ncu_path: &Path, report: &Path) -> std::result::Result<String, String> {
    let mut last = String::new();
    for base_units in [true, false] {
        let o = Command::new(ncu_path)
            .args(ncu::import_args(report, base_units))
            .output()
            .map_err(|e| format!("cannot run {} --import: {e}", ncu_path.display()))?;
        if o.status.success() {
            return Ok(String::from_utf8_lossy(&o.stdout).into_owned());
        }
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Err(format!(
        "ncu --import {} failed: {}",
        report.display(),
        last.lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
    ))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::bench::record::IMPL_OURS;
    use crate::bench::suites::{cases, Suite, TimingMode};
    use std::path::PathBuf;

    const PREFILL_CSV: &str = include_str!("../../tests/fixtures/ncu/h100_hopper_prefill.csv");
    const PERM_LOG: &str = include_str!("../../tests/fixtures/ncu/errperm.log");

    /// A stand-in for ncu: collection writes the report, `log` as ncu's log and, unless
    /// `child_status` is empty, the child's row with that status, then exits `exit`;
    /// `--import` prints the fixture CSV (failing on `--print-units` when `old_ncu`).
    fn fake_ncu(dir: &Path, log: &str, child_status: &str, exit: i32, old_ncu: bool) -> PathBuf {
        let csv = dir.join("fixture.csv");
        std::fs::write(&csv, PREFILL_CSV).unwrap();
        let log_src = dir.join("fixture.log");
        std::fs::write(&log_src, log).unwrap();
        let row = dir.join("row.json");
        if !child_status.is_empty() {
            let case = cases(Suite::Mission, false).remove(2);
            let r = BenchRow::new(&case, IMPL_OURS, "key", TimingMode::Hot);
            let r = match child_status.strip_prefix("failed: ") {
                Some(why) => r.failed(why),
                None => r,
            };
            std::fs::write(&row, serde_json::to_string(&r).unwrap()).unwrap();
        }
        let script = format!(
            r#"#!/bin/sh
if [ "$1" = "--import" ]; then
  for a in "$@"; do
    if [ "$a" = "--print-units" ] && [ {old} = 1 ]; then echo "==ERROR== unrecognised option '--print-units'" >&2; exit 1; fi
  done
  cat '{csv}'; exit 0
fi
prev=""
for a in "$@"; do
  case "$prev" in
    --export) [ {exit} = 0 ] && echo report > "$a" ;;
    --log-file) cp '{log}' "$a" ;;
    --child-out) [ -f '{row}' ] && cp '{row}' "$a" ;;
  esac
  prev="$a"
done
exit {exit}
"#,
            old = i32::from(old_ncu),
            csv = csv.display(),
            log = log_src.display(),
            row = row.display(),
        );
        let ncu = dir.join("ncu");
        std::fs::write(&ncu, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ncu, std::fs::Permissions::from_mode(0o755)).unwrap();
        ncu
    }

    fn run_case(
        log: &str,
        child_status: &str,
        exit: i32,
        old_ncu: bool,
    ) -> (CaseRun, PathBuf, tempfile::TempDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let ncu = fake_ncu(&dir, log, child_status, exit, old_ncu);
        let out = dir.join("out");
        std::fs::create_dir_all(out.join("profile")).unwrap();
        let case = cases(Suite::Mission, false).remove(2);
        let row = BenchRow::new(&case, IMPL_OURS, "key", TimingMode::Hot);
        let metrics = ncu::metrics_for(fp8_sdpa::Arch::Sm90a);
        let job = Job {
            ncu: &ncu,
            exe: Path::new("/bin/true"),
            metrics: &metrics,
            out: &out,
            calls: 5,
            iters: 100,
            device: 0,
        };
        let r = profile_case(&job, "002_mission_mission_f16", &row);
        (r, out, tmp)
    }

    #[test]
    fn a_good_run_parses_the_imported_csv_and_keeps_its_files() {
        let (r, out, _tmp) = run_case("==PROF== Disconnected from process 1\n", "ok", 0, false);
        assert_eq!(r.failure, None);
        assert_eq!(r.launches.len(), 10);
        assert_eq!(
            r.files,
            [
                "profile/002_mission_mission_f16.ncu-rep",
                "profile/002_mission_mission_f16.csv",
                "profile/002_mission_mission_f16.ncu.log",
                "profile/002_mission_mission_f16.child.json"
            ]
        );
        let csv = std::fs::read_to_string(out.join(&r.files[1])).unwrap();
        assert_eq!(csv, PREFILL_CSV);
        assert!(r
            .command
            .contains("--launch-skip 22 --launch-count 10 --force-overwrite --export"));
        assert!(r.command.contains(
            "/bin/true profile --child-case mission/mission/f16 --variant key --iters 100 --device 0 --child-out"
        ), "{}", r.command);
    }

    #[test]
    fn an_ncu_without_print_units_still_imports() {
        let (r, _, _tmp) = run_case("", "ok", 0, true);
        assert_eq!(r.failure, None);
        assert_eq!(r.launches.len(), 10);
    }

    #[test]
    fn no_counter_access_makes_profiling_unavailable() {
        let (r, _, _tmp) = run_case(PERM_LOG, "ok", 0, false);
        assert!(
            matches!(&r.failure, Some(Failure::Unavailable(w)) if w.contains("ERR_NVGPUCTRPERM")),
            "{:?}",
            r.failure
        );
    }

    #[test]
    fn the_childs_own_failure_is_the_cases() {
        let (r, _, _tmp) = run_case("", "failed: output differs", 0, false);
        assert!(r.child_failed);
        assert_eq!(
            r.failure,
            Some(Failure::Failed(
                "the profiled run failed: failed: output differs".into()
            ))
        );
    }

    #[test]
    fn ncu_failing_without_a_report_says_how() {
        let (r, _, _tmp) = run_case("==ERROR== Failed to profile kernel\n", "", 1, false);
        assert!(!r.child_failed);
        assert_eq!(
            r.failure,
            Some(Failure::Failed(
                "ncu exited with code 1: Failed to profile kernel".into()
            ))
        );
    }
}
