//! `sdpa-lab check`: compile every registered spec per arch and apply the resource gates, and
//! the variable-length mode (portable, Hopper and decode families) of the specs varlen calls
//! run by default.

use fp8_sdpa::compile::{Compiler, Origin};
use fp8_sdpa::kernels::registry;
use fp8_sdpa::runtime::varlen::reads_varlen;
use fp8_sdpa::variant::HEAD_DIMS;
use fp8_sdpa::{Arch, KernelSpec, Precision, Variant};
use rayon::prelude::*;
use sdpa_harness::gates;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `check`.
#[derive(clap::Args)]
pub struct Args {
    /// Comma-separated arches to compile for.
    #[arg(long, default_value = "sm_80,sm_90a")]
    pub arch: String,
    /// Only specs whose key contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Write the table as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Bypass the kernel cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Print only failing rows and a summary per family (for CI logs).
    #[arg(long)]
    pub summary: bool,
    /// Compile this variant key instead of the registered specs (repeatable), for every
    /// problem class (precision, head dim, causal) it is valid for on each arch; `--filter`
    /// still applies. For trying a tile before registering it.
    #[arg(long = "variant", value_name = "KEY")]
    pub variants: Vec<String>,
    /// Compile the variable-length mode (`+varlen` rows) of every spec that reads varlen
    /// batches (portable and decode), not only of those varlen dispatch runs
    /// (`registry::varlen_default`, `registry::decode_varlen_default`).
    #[arg(long)]
    pub varlen: bool,
}

/// One row of the resource table.
#[derive(Serialize, Clone)]
pub struct Row {
    /// Spec key.
    pub spec: String,
    /// Arch.
    pub arch: String,
    /// Registers per thread.
    pub registers: u32,
    /// Register budget of the variant.
    pub budget: u32,
    /// Spill bytes (stores + loads).
    pub spill: u32,
    /// Stack frame bytes.
    pub stack: u32,
    /// Static + dynamic shared memory bytes.
    pub smem: u32,
    /// Compiled, or taken from the cache.
    pub cached: bool,
    /// Gate violations or the compile error; empty when it passes.
    pub problems: Vec<String>,
}

/// Compiles and gates `specs` for `arches`; returns every row. A spec is compiled for the
/// arches it is registered for ([`registry::registered_for`]: its shared memory fits).
pub fn check_specs(specs: &[KernelSpec], arches: &[Arch], compiler: &Compiler) -> Vec<Row> {
    let jobs: Vec<(KernelSpec, Arch)> = arches
        .iter()
        .flat_map(|a| {
            let on_arch = registry::registered_for(*a);
            specs
                .iter()
                .filter(move |s| on_arch.contains(s))
                .map(move |s| (*s, *a))
        })
        .collect();
    compile_jobs(&jobs, compiler)
}

/// The specs `check --variant` compiles: each variant (registered or not) over every problem
/// class that `filter` keeps, paired with each arch whose rules accept it.
pub fn variant_jobs(
    variants: &[Variant],
    arches: &[Arch],
    filter: Option<&str>,
) -> Vec<(KernelSpec, Arch)> {
    let specs = super::matching(
        variants
            .iter()
            .flat_map(|v| registry::specs_of(*v))
            .collect(),
        filter,
    );
    specs
        .into_iter()
        .flat_map(|spec| {
            arches
                .iter()
                .filter(move |a| spec.validate(**a).is_ok())
                .map(move |a| (spec, *a))
        })
        .collect()
}

/// The (spec, arch) pairs whose variable-length mode `check` compiles: of `jobs`, the specs
/// varlen dispatch runs on that arch (for decode-shaped calls the decode default, else the
/// varlen default), or with `all` every spec that reads varlen batches.
pub fn varlen_jobs(jobs: &[(KernelSpec, Arch)], all: bool) -> Vec<(KernelSpec, Arch)> {
    jobs.iter()
        .filter(|(s, a)| {
            reads_varlen(&s.variant)
                && (all
                    || registry::decode_varlen_default(*a, s.precision, s.head_dim)
                        == Some(s.variant)
                    || registry::varlen_default(*a, s.precision, s.head_dim, s.causal) == s.variant)
        })
        .copied()
        .collect()
}

fn compile_jobs(jobs: &[(KernelSpec, Arch)], compiler: &Compiler) -> Vec<Row> {
    compile_jobs_in(jobs, compiler, false)
}

/// Compiles `jobs` (in the variable-length mode with `varlen`: rows keyed `<spec>+varlen`).
fn compile_jobs_in(jobs: &[(KernelSpec, Arch)], compiler: &Compiler, varlen: bool) -> Vec<Row> {
    let key = |spec: &KernelSpec| {
        if varlen {
            format!("{}+varlen", spec.key())
        } else {
            spec.key()
        }
    };
    jobs.par_iter()
        .map(|(spec, arch)| {
            let compiled = if varlen {
                compiler.compile_varlen(spec, *arch)
            } else {
                compiler.compile(spec, *arch)
            };
            (spec, arch, compiled)
        })
        .map(|(spec, arch, compiled)| match compiled {
            Ok(c) => Row {
                spec: key(spec),
                arch: arch.to_string(),
                registers: c.resources.registers,
                budget: spec.variant.register_budget(),
                spill: c.resources.spill_stores + c.resources.spill_loads,
                stack: c.resources.stack_frame,
                smem: c.resources.static_smem + spec.dynamic_smem_bytes(),
                cached: c.origin == Origin::CacheHit,
                problems: gates::check(&c)
                    .into_iter()
                    .map(|v| format!("{}: {}", v.gate, v.detail))
                    .collect(),
            },
            Err(e) => Row {
                spec: key(spec),
                arch: arch.to_string(),
                registers: 0,
                budget: spec.variant.register_budget(),
                spill: 0,
                stack: 0,
                smem: 0,
                cached: false,
                problems: vec![e.to_string()],
            },
        })
        .collect()
}

/// Prints rows as an aligned table.
pub fn print_table(rows: &[Row]) {
    let w = rows.iter().map(|r| r.spec.len()).max().unwrap_or(4).max(4);
    println!(
        "{:<w$}  {:<6}  {:>4}/{:<4} {:>6} {:>6} {:>7}  status",
        "spec", "arch", "regs", "max", "spill", "stack", "smem"
    );
    for r in rows {
        let status = if r.problems.is_empty() {
            "ok".to_string()
        } else {
            format!("FAIL {}", r.problems.join("; "))
        };
        println!(
            "{:<w$}  {:<6}  {:>4}/{:<4} {:>6} {:>6} {:>7}  {}",
            r.spec, r.arch, r.registers, r.budget, r.spill, r.stack, r.smem, status
        );
    }
}

/// Prints, per family and arch, the count and the register / shared-memory range.
pub fn print_summary(rows: &[Row]) {
    let mut groups: std::collections::BTreeMap<(String, String), Vec<&Row>> = Default::default();
    for r in rows {
        let family = r.spec.split('.').next().unwrap_or("?").to_string();
        groups.entry((family, r.arch.clone())).or_default().push(r);
    }
    for ((family, arch), g) in groups {
        let ok: Vec<&&Row> = g.iter().filter(|r| r.problems.is_empty()).collect();
        let regs = ok.iter().map(|r| r.registers);
        let smem = ok.iter().map(|r| r.smem);
        println!(
            "{family:<10} {arch:<7} {:>4} specs, {:>4} ok; registers {}..{}, shared memory {}..{} bytes",
            g.len(),
            ok.len(),
            regs.clone().min().unwrap_or(0),
            regs.max().unwrap_or(0),
            smem.clone().min().unwrap_or(0),
            smem.max().unwrap_or(0)
        );
    }
}

/// Runs the command.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let arches = Arch::parse_list(&a.arch)?;
    let compiler = if a.no_cache {
        Compiler::with_cache(None)
    } else {
        Compiler::new()?
    };
    let t0 = std::time::Instant::now();
    let (specs, rows) = if a.variants.is_empty() {
        let specs = super::matching(registry::registered(), a.filter.as_deref());
        let mut rows = check_specs(&specs, &arches, &compiler);
        let jobs: Vec<(KernelSpec, Arch)> = arches
            .iter()
            .flat_map(|a| {
                let on_arch = registry::registered_for(*a);
                specs
                    .iter()
                    .filter(move |s| on_arch.contains(s))
                    .map(move |s| (*s, *a))
            })
            .collect();
        rows.extend(compile_jobs_in(
            &varlen_jobs(&jobs, a.varlen),
            &compiler,
            true,
        ));
        (specs, rows)
    } else {
        let variants = a
            .variants
            .iter()
            .map(|k| k.parse::<Variant>())
            .collect::<fp8_sdpa::Result<Vec<_>>>()?;
        let jobs = variant_jobs(&variants, &arches, a.filter.as_deref());
        // A variant no class accepts: its rule, as validated for the first class and arch.
        for v in &variants {
            if !jobs.iter().any(|(s, _)| s.variant == *v) {
                let spec = KernelSpec {
                    variant: *v,
                    precision: Precision::F16,
                    head_dim: HEAD_DIMS[0],
                    causal: false,
                };
                let reason = match spec.validate(arches[0]) {
                    Err(e) => format!(
                        "no (precision, head dim, causal) class accepts it on {}; for f16 d{} \
                         non-causal: {e}",
                        a.arch, HEAD_DIMS[0]
                    ),
                    Ok(()) => format!("--filter {:?} leaves none of its specs", a.filter),
                };
                return Err(fp8_sdpa::Error::InvalidVariant {
                    key: v.key(),
                    reason,
                });
            }
        }
        let mut specs: Vec<KernelSpec> = jobs.iter().map(|(s, _)| *s).collect();
        specs.dedup();
        let mut rows = compile_jobs(&jobs, &compiler);
        if a.varlen {
            rows.extend(compile_jobs_in(&varlen_jobs(&jobs, true), &compiler, true));
        }
        (specs, rows)
    };
    if a.summary {
        let failing: Vec<Row> = rows
            .iter()
            .filter(|r| !r.problems.is_empty())
            .cloned()
            .collect();
        if !failing.is_empty() {
            print_table(&failing);
        }
        print_summary(&rows);
    } else {
        print_table(&rows);
    }
    let failed = rows.iter().filter(|r| !r.problems.is_empty()).count();
    println!(
        "\n{} spec(s) x {} arch(es), {} compiled (specs over an arch's shared memory are \
         registered for the other arches only): {} passed, {} failed ({:.1} s)",
        specs.len(),
        arches.len(),
        rows.len(),
        rows.len() - failed,
        failed,
        t0.elapsed().as_secs_f64()
    );
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&rows).expect("rows serialize");
        std::fs::write(p, text).map_err(fp8_sdpa::Error::io(p))?;
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
