//! `sdpa-lab report`: summary.md and SVG plots from an artifacts folder.

use crate::report;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `report`.
#[derive(clap::Args)]
pub struct Args {
    /// Artifacts folder holding bench*.json and optionally check.json, verify.json,
    /// manifest.json, stages.json, profile.json.
    pub dir: PathBuf,
    /// Where to write summary.md and plots/ (default: the artifacts folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs the command: a folder without a readable bench file is an error (exit 2), since the
/// report's tables and plots are made of bench rows. Other failures are printed here and
/// returned as exit code 2 too, so the report's errors need no variant in the library's
/// error type.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    match report::load(&a.dir) {
        Ok(inputs) if inputs.bench.is_empty() => {
            eprintln!("error: {}", no_bench(&a.dir, &inputs.bench_unreadable));
            return Ok(ExitCode::from(2));
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    }
    generate(a)
}

/// Like [`run`], but a folder without bench files still gets a summary of what is there
/// (`repro` reports whatever stages ran, e.g. only the offline ones on a machine without a
/// GPU).
pub fn run_from_whatever_exists(a: Args) -> fp8_sdpa::Result<ExitCode> {
    generate(a)
}

/// What a folder without readable bench files lacks, and how to make one.
fn no_bench(dir: &std::path::Path, unreadable: &[(String, String)]) -> String {
    let mut msg = format!(
        "no readable bench file in {}: the report is made of bench*.json files (written by \
         `sdpa-lab bench`), and none",
        dir.display()
    );
    if unreadable.is_empty() {
        msg.push_str(" is there.");
    } else {
        msg.push_str(" could be read:");
        for (name, why) in unreadable {
            msg.push_str(&format!("\n  {name}: {why}"));
        }
    }
    msg.push_str(&format!(
        "\nMake one on a GPU machine with `sdpa-lab bench --suite mission --out {}` (or run \
         `sdpa-lab repro`, which writes a whole artifacts folder), then run report again.",
        dir.join("bench.json").display()
    ));
    msg
}

fn generate(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let out = a.out.clone().unwrap_or_else(|| a.dir.clone());
    match report::generate(&a.dir, &out) {
        Ok(done) => {
            for w in &done.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "wrote {} ({} rows from {} bench file(s), {} plot(s))",
                done.summary.display(),
                done.rows,
                done.bench_files,
                done.plots.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repro_still_reports_a_folder_without_bench_files() {
        let dir = tempfile::tempdir().unwrap();
        let a = || Args {
            dir: dir.path().to_path_buf(),
            out: None,
        };
        assert_eq!(run(a()).unwrap(), ExitCode::from(2));
        assert!(!dir.path().join("summary.md").exists());
        assert_eq!(run_from_whatever_exists(a()).unwrap(), ExitCode::SUCCESS);
        let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
        assert!(
            md.contains("- bench*.json: absent (no timing tables)"),
            "{md}"
        );
        assert!(md.contains("Absent: check.json, verify.json, manifest.json, stages.json."));
    }
}
