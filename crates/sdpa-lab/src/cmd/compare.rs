//! `sdpa-lab compare A B`: per-row timing changes between two bench runs, with a regression
//! gate for our rows (see [`crate::compare`] for the matching and the rules).

use crate::compare;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `compare`.
#[derive(clap::Args)]
pub struct Args {
    /// The baseline: a bench file, or an artifacts folder (all its bench*.json, merged).
    pub a: PathBuf,
    /// The candidate, compared against A: a bench file or an artifacts folder.
    pub b: PathBuf,
    /// Regression threshold in percent (`5` or `5%`): an fp8-sdpa row fails the comparison
    /// when B's median is more than this much slower than A's AND the two runs' p10–p90
    /// intervals do not overlap.
    #[arg(long, default_value_t = compare::DEFAULT_THRESHOLD_PCT, value_parser = compare::parse_threshold)]
    pub threshold: f64,
    /// Also write compare.json and compare.md into this folder (created if needed).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs the command: exit 0 when no row of ours regressed, 1 when one did, 2 when an input
/// could not be read or the output not written. Errors are printed here, as `report` does.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let sides = compare::load_side(&a.a).and_then(|x| Ok((x, compare::load_side(&a.b)?)));
    let (side_a, side_b) = match sides {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let c = compare::compare(&side_a, &side_b, a.threshold);
    print!("{}", compare::render_text(&c));
    if let Some(dir) = &a.out {
        match compare::write(&c, dir) {
            Ok(paths) => {
                for p in paths {
                    eprintln!("wrote {}", p.display());
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    Ok(if c.failed() {
        eprintln!(
            "compare: {} fp8-sdpa row(s) regressed (slower than {}% beyond the spread, or failed in B)",
            c.summary.regressions, c.threshold_pct
        );
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
