//! Writes the CUBIN of every registered spec (no cache) for sm_80 and sm_90a into a folder,
//! one file per spec and arch, for comparing code generation before and after a refactor:
//! `cargo run --release --example cubins -- OUT_DIR [FILTER,FILTER...]`, then compare the SASS.
use fp8_sdpa::compile::Compiler;
use fp8_sdpa::kernels::registry;
use fp8_sdpa::Arch;
use rayon::prelude::*;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = std::path::PathBuf::from(&args[1]);
    let filter = args.get(2).cloned().unwrap_or_default();
    std::fs::create_dir_all(&out).unwrap();
    let c = Compiler::with_cache(None);
    let jobs: Vec<_> = [Arch::Sm80, Arch::Sm90a]
        .into_iter()
        .flat_map(|a| registry::registered_for(a).into_iter().map(move |s| (a, s)))
        .filter(|(_, s)| filter.split(',').any(|f| s.key().contains(f)))
        .collect();
    jobs.par_iter().for_each(|(a, s)| {
        let name = format!("{}_{}.cubin", s.key().replace('/', "_"), a.name());
        match c.compile(s, *a) {
            Ok(k) => std::fs::write(out.join(name), &k.cubin).unwrap(),
            Err(e) => eprintln!("{name}: {e}"),
        }
    });
    eprintln!("{} cubins", jobs.len());
}
