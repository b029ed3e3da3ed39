//! `sdpa-lab`: the fp8-sdpa lab. Checks kernels offline, verifies them on the GPU,
//! benchmarks them against PyTorch's SDPA backends and writes reports.

mod bench;
mod ceilings;
mod cmd;
mod compare;
mod manifest;
mod profile;
mod report;
mod timing;
mod tune;

use clap::{Parser, Subcommand};
use sdpa_lab::attn_io;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "sdpa-lab",
    version,
    about = "The fp8-sdpa lab: check, verify, bench, tune, report"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Offline: compile every registered kernel spec for the given arches, print the ptxas
    /// resource table, and fail on any gate violation (spills, stack frame, shared memory over
    /// the arch limit, registers over the variant's budget, relocations in the code). Needs
    /// NVRTC, no GPU.
    Check(cmd::check::Args),
    /// The environment manifest: GPU, driver, NVRTC, PyTorch, git commit, host.
    Env(cmd::env::Args),
    /// Correctness gates on the GPU: every registered spec over ragged shapes, GQA, causal,
    /// both layouts and several seeds against the float64 reference (output poisoned before
    /// each run, every element checked, inputs checked unchanged), plus the exhaustive FP8
    /// codec checks. Exits non-zero on any failure.
    Verify(cmd::verify::Args),
    /// One forward pass on tensors from a safetensors file (q, k, v, and q_descale,
    /// k_descale, v_descale for FP8 inputs), writing o (and lse) to a safetensors file.
    Attn(cmd::attn::Args),
    /// Robust timings (CUDA events, warm-up, >= 100 runs; cold, hot or graph mode) of our
    /// kernels on a suite, with cuBLASLt GEMM and copy ceilings and, with --peers, PyTorch's
    /// SDPA backends on the same shapes in the same run. Writes bench.json.
    Bench(cmd::bench::Args),
    /// The main job: env, check, verify, bench with PyTorch peers, a short tune, profile (when
    /// ncu can read the counters), report, into artifacts/<timestamp>/. A failed stage stops
    /// the stages that depend on it; stages.json says which ran and why others did not.
    /// Without a GPU it runs the offline stages and reports the rest as not run (exit 3); exit
    /// 0 means every stage that ran passed, 1 that a stage failed.
    Repro(cmd::repro::Args),
    /// Search a family's variant space for one problem class (EvoEngineer-Full: elites,
    /// rank-based parents, crossover and mutation, macro then micro knobs) through the gates
    /// in order: compile and resources, correctness, a short timing run that prunes, the full
    /// run. Writes tune_log.csv, topk.json and tuned.json (a tuned-table entry; --install
    /// merges it into the user's table, which dispatch reads). Needs a GPU.
    Tune(cmd::tune::Args),
    /// Nsight Compute metrics of our kernels on bench cases: a reference bench run (hot mode,
    /// no profiler) times the cases, then ncu (`--clock-control none`, the SPEC's metrics)
    /// profiles a few calls past warm-up of each case in a child process. Writes profile.json
    /// and profile.md: per kernel duration, SM and DRAM throughput, achieved occupancy,
    /// registers, L2 hit rate, tensor pipe and wgmma instructions; per case the bench median
    /// beside ncu's time per call, flagged when they differ by more than --tolerance. Exit 0
    /// when every case was profiled, 1 when some could not be, 3 when profiling is not
    /// possible here (no ncu, no GPU, no access to the counters; profile.json says why).
    Profile(cmd::profile::Args),
    /// Context-parallel attention over several GPUs (ring attention with zig-zag shards over
    /// NCCL, one process per GPU, NVLink multicast off), checked against the single-GPU
    /// kernel on the same inputs; reports time, scaling efficiency and bytes sent.
    CpBench(cmd::cp_bench::Args),
    /// Offline: read an artifacts folder (bench*.json and optional check.json, verify.json,
    /// manifest.json, stages.json, profile.json) and write summary.md with tables and SVG
    /// plots.
    Report(cmd::report::Args),
    /// Offline: compare two bench runs (bench files or artifacts folders) row by row: A and B
    /// medians, B/A, and whether the change is beyond the runs' spread (p10–p90 intervals that
    /// do not overlap). Rows match by suite, case, precision, mask, mode, implementation and
    /// backend; a row of ours whose backend key changed (a new default) is paired with the
    /// case's one new row of ours, and marked so. Rows on one side only are listed. Exits 1
    /// when an fp8-sdpa row got slower by more than --threshold and beyond the spread, or was
    /// timed in A and failed in B; 2 when an input cannot be read.
    Compare(cmd::compare::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => cmd::check::run(a),
        Command::Env(a) => cmd::env::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Attn(a) => cmd::attn::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Repro(a) => cmd::repro::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Tune(a) => cmd::tune::run(a),
        Command::Profile(a) => cmd::profile::run(a),
        Command::CpBench(a) => cmd::cp_bench::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
