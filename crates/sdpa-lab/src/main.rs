//! `sdpa-lab`: the fp8-sdpa lab. Checks kernels offline, verifies them on the GPU,
//! benchmarks them against PyTorch's SDPA backends and writes reports.

mod bench;
mod cmd;
mod report;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "sdpa-lab",
    version,
    about = "The fp8-sdpa lab: check, verify, bench, report"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Offline: compile every registered kernel spec for the given arches, print the ptxas
    /// resource table, and fail on any gate violation (spills, stack frame, shared memory over
    /// the arch limit, registers over the variant's budget). Needs NVRTC, no GPU.
    Check(cmd::check::Args),
    /// Offline: read an artifacts folder (bench*.json and optional check.json, verify.json,
    /// manifest.json, stages.json) and write summary.md with tables and SVG plots.
    Report(cmd::report::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => cmd::check::run(a),
        Command::Report(a) => cmd::report::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
