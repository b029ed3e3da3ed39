//! `sdpa-lab repro`: the project's main job, one command from a checkout to a report.
//! env → check → verify → bench (+ peers) → report, into `artifacts/<timestamp>/`. A failed
//! stage stops the stages that depend on it; stages.json says which ran, which failed and
//! why, and which were not run and why. Without a GPU the offline stages run and the rest
//! are reported as not run.
//!
//! Exit code: 0 every gate held; 1 a stage failed; 3 the offline stages passed but the GPU
//! stages could not run (no GPU).

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `repro`.
#[derive(clap::Args)]
pub struct Args {
    /// Artifacts folder (default: artifacts/<UTC timestamp>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Bench suites.
    #[arg(long, default_value = "mission,fa")]
    pub suite: String,
    /// The full fa/fp8 grids and every verification shape (default: the quick subsets, S
    /// 1k/4k/16k; the default run took about 4 minutes on an H100).
    #[arg(long)]
    pub full: bool,
    /// Skip PyTorch peers.
    #[arg(long)]
    pub no_peers: bool,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

/// One stage's outcome.
#[derive(Serialize, Clone)]
pub struct Stage {
    /// Name.
    pub stage: String,
    /// "ok", "failed: …" or "not run: …".
    pub status: String,
    /// Wall time.
    pub seconds: f64,
    /// Files it wrote, relative to the artifacts folder.
    pub artifacts: Vec<String>,
}

impl Stage {
    fn passed(&self) -> bool {
        self.status == "ok"
    }
}

fn write_stages(dir: &Path, stages: &[Stage]) {
    let text = serde_json::to_string_pretty(&serde_json::json!({ "stages": stages }))
        .expect("stages serialize");
    if let Err(e) = std::fs::write(dir.join("stages.json"), text) {
        eprintln!("warning: cannot write stages.json: {e}");
    }
}

fn run_stage(
    name: &str,
    stages: &mut Vec<Stage>,
    dir: &Path,
    artifacts: &[&str],
    f: impl FnOnce() -> Result<bool, String>,
) -> bool {
    eprintln!("\n==> {name}");
    let t0 = Instant::now();
    let status = match f() {
        Ok(true) => "ok".to_string(),
        Ok(false) => "failed: a gate did not hold (see the stage's output)".to_string(),
        Err(e) => format!("failed: {e}"),
    };
    eprintln!("<== {name}: {status} ({:.0} s)", t0.elapsed().as_secs_f64());
    stages.push(Stage {
        stage: name.into(),
        status,
        seconds: t0.elapsed().as_secs_f64(),
        artifacts: artifacts
            .iter()
            .map(|s| s.to_string())
            .filter(|a| dir.join(a).exists())
            .collect(),
    });
    write_stages(dir, stages);
    stages.last().is_some_and(Stage::passed)
}

fn not_run(name: &str, why: &str, stages: &mut Vec<Stage>, dir: &Path) {
    eprintln!("\n==> {name}: not run: {why}");
    stages.push(Stage {
        stage: name.into(),
        status: format!("not run: {why}"),
        seconds: 0.0,
        artifacts: vec![],
    });
    write_stages(dir, stages);
}

/// Runs one stage as `sdpa-lab <args>` in a child process: a stage that crashes or leaks
/// state (NVRTC's, the GPU context's) cannot take the pipeline down or affect the next one.
/// Exit 0 is a pass, 1 a failed gate, anything else an error.
fn child(args: &[&str]) -> Result<bool, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find sdpa-lab itself: {e}"))?;
    let status = std::process::Command::new(exe)
        .args(args)
        .status()
        .map_err(|e| format!("cannot start sdpa-lab {}: {e}", args[0]))?;
    match status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        Some(c) => Err(format!("sdpa-lab {} exited with code {c}", args[0])),
        None => Err(format!("sdpa-lab {} was killed by a signal", args[0])),
    }
}

/// Runs the command.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let dir = a.out.clone().unwrap_or_else(|| {
        let ts = crate::manifest::utc_now().replace(':', "-");
        PathBuf::from("artifacts").join(ts)
    });
    std::fs::create_dir_all(&dir).map_err(fp8_sdpa::Error::io(&dir))?;
    eprintln!("sdpa-lab repro -> {}", dir.display());
    let mut stages = Vec::new();

    // env: always runs; tells whether a GPU is here.
    let gpu = crate::cmd::env::open_device(a.device);
    // One line for the stage table; the full search list goes to manifest.json.
    let gpu_why = gpu.as_ref().err().map(|e| {
        format!(
            "{} (details in manifest.json)",
            e.lines().next().unwrap_or("no GPU")
        )
    });
    let arch = gpu.as_ref().ok().map(|d| d.info().arch);
    run_stage("env", &mut stages, &dir, &["manifest.json"], || {
        let m = crate::manifest::Manifest::take(gpu.as_ref().map_err(|e| e.clone()));
        std::fs::write(
            dir.join("manifest.json"),
            serde_json::to_string_pretty(&m).expect("manifest serializes"),
        )
        .map_err(|e| e.to_string())?;
        Ok(true)
    });
    drop(gpu);

    // check: offline, for the device's arch (or sm_90a) and sm_80.
    let arches = match arch {
        Some(fp8_sdpa::Arch::Sm80) | None => "sm_80,sm_90a".to_string(),
        Some(a) => format!("sm_80,{a}"),
    };
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let check_ok = run_stage("check", &mut stages, &dir, &["check.json"], || {
        child(&[
            "check",
            "--arch",
            &arches,
            "--summary",
            "--json",
            &path("check.json"),
        ])
    });

    let mut gpu_stages_ran = false;
    match (&gpu_why, check_ok) {
        (Some(why), _) => {
            for s in ["verify", "bench"] {
                not_run(s, why, &mut stages, &dir);
            }
        }
        (None, false) => {
            for s in ["verify", "bench"] {
                not_run(
                    s,
                    "check failed: a kernel that fails the resource gates is not run",
                    &mut stages,
                    &dir,
                );
            }
        }
        (None, true) => {
            gpu_stages_ran = true;
            let device = a.device.to_string();
            let verify_json = path("verify.json");
            let mut verify_args = vec!["verify", "--json", &verify_json, "--device", &device];
            if !a.full {
                verify_args.push("--quick");
            }
            let verify_ok = run_stage("verify", &mut stages, &dir, &["verify.json"], || {
                child(&verify_args)
            });
            if verify_ok {
                let out = path("bench.json");
                let mut bench_args = vec![
                    "bench", "--suite", &a.suite, "--out", &out, "--device", &device,
                ];
                if !a.full {
                    bench_args.push("--quick");
                }
                if !a.no_peers {
                    bench_args.push("--peers");
                }
                run_stage("bench", &mut stages, &dir, &["bench.json"], || {
                    child(&bench_args)
                });
            } else {
                not_run(
                    "bench",
                    "verify failed: timings of an incorrect kernel mean nothing",
                    &mut stages,
                    &dir,
                );
            }
        }
    }

    // report: always, from whatever exists.
    run_stage("report", &mut stages, &dir, &["summary.md"], || {
        let code = crate::cmd::report::run(crate::cmd::report::Args {
            dir: dir.clone(),
            out: None,
        })
        .map_err(|e| e.to_string())?;
        Ok(code == ExitCode::SUCCESS)
    });

    eprintln!("\nstages:");
    for s in &stages {
        eprintln!("  {:<12} {}", s.stage, s.status);
    }
    eprintln!("artifacts: {}", dir.display());
    let all_ok = stages
        .iter()
        .all(|s| s.passed() || s.status.starts_with("not run"));
    let any_failed = stages.iter().any(|s| s.status.starts_with("failed"));
    Ok(if any_failed {
        ExitCode::FAILURE
    } else if all_ok && !gpu_stages_ran {
        eprintln!(
            "offline stages passed; GPU stages not run: {}",
            gpu_why.unwrap_or_default()
        );
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
