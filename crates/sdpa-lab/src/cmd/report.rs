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

/// Runs the command. Failures are printed here and returned as exit code 2, so the report's
/// errors need no variant in the library's error type.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
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
