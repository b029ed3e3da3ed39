//! `sdpa-lab`: the fp8-sdpa lab. Checks kernels offline, verifies them on the GPU,
//! benchmarks them against PyTorch's SDPA backends and writes reports.

mod cmd;
mod manifest;

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
    /// The environment manifest: GPU, driver, NVRTC, PyTorch, git commit, host.
    Env(cmd::env::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => cmd::check::run(a),
        Command::Env(a) => cmd::env::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
