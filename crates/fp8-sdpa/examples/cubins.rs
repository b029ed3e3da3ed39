//! Writes the CUBIN of registered specs into a folder (through the kernel cache only when
//! SDPA_CACHE_DIR is set), one file per spec and arch,
//! with their ptxas reports in `resources.tsv`, for comparing code generation before and after
//! a refactor (compare the SASS, e.g. with scripts/sass-compare.sh):
//!
//! `cargo run --release -p fp8-sdpa --example cubins -- OUT_DIR [FILTER,FILTER...] [ARCHES]`
//!
//! FILTER keeps specs whose key contains one of the comma-separated parts (empty: all);
//! ARCHES is a comma-separated list (default `sm_80,sm_90a`). Besides the dense specs, the
//! variable-length mode (`SDPA_VARLEN`) of each spec that varlen dispatch runs on an arch is
//! written as `<spec>+varlen`.
use fp8_sdpa::compile::Compiler;
use fp8_sdpa::kernels::registry;
use fp8_sdpa::Arch;
use rayon::prelude::*;
use std::io::Write;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = std::path::PathBuf::from(&args[1]);
    let filter = args.get(2).cloned().unwrap_or_default();
    let arches = Arch::parse_list(args.get(3).map(String::as_str).unwrap_or("sm_80,sm_90a"))
        .expect("arch list");
    std::fs::create_dir_all(&out).unwrap();
    // No cache unless SDPA_CACHE_DIR names one (then a cache that `sdpa-lab check` filled
    // serves the same CUBINs).
    let c = if std::env::var_os("SDPA_CACHE_DIR").is_some() {
        Compiler::new().expect("the kernel cache")
    } else {
        Compiler::with_cache(None)
    };
    let jobs: Vec<_> = arches
        .iter()
        .flat_map(|a| {
            registry::registered_for(*a)
                .into_iter()
                .map(move |s| (*a, s))
        })
        .filter(|(_, s)| filter.split(',').any(|f| s.key().contains(f)))
        .flat_map(|(a, s)| {
            let varlen = s.variant.family == fp8_sdpa::Family::Portable
                && registry::varlen_default(a, s.precision, s.head_dim, s.causal) == s.variant;
            let mut v = vec![(a, s, false)];
            if varlen {
                v.push((a, s, true));
            }
            v
        })
        .collect();
    let rows: Vec<String> = jobs
        .par_iter()
        .filter_map(|(a, s, varlen)| {
            let key = format!("{}{}", s.key(), if *varlen { "+varlen" } else { "" });
            let name = format!("{}_{}.cubin", key.replace('/', "_"), a.name());
            let r = if *varlen {
                c.compile_varlen(s, *a)
            } else {
                c.compile(s, *a)
            };
            match r {
                Ok(k) => {
                    std::fs::write(out.join(&name), &k.cubin).unwrap();
                    let r = &k.resources;
                    Some(format!(
                        "{key}\t{}\t{}\t{}\t{}\t{}",
                        a.name(),
                        r.registers,
                        r.spill_stores + r.spill_loads,
                        r.stack_frame,
                        r.static_smem + s.dynamic_smem_bytes()
                    ))
                }
                Err(e) => {
                    eprintln!("{name}: {e}");
                    None
                }
            }
        })
        .collect();
    let mut rows = rows;
    rows.sort();
    let mut f = std::fs::File::create(out.join("resources.tsv")).unwrap();
    writeln!(f, "spec\tarch\tregisters\tspill_bytes\tstack\tsmem").unwrap();
    for r in &rows {
        writeln!(f, "{r}").unwrap();
    }
    eprintln!("{} cubins", rows.len());
}
