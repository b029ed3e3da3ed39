//! `sdpa-lab tune`: EvoEngineer-Full over a family's variant space for one problem class, on
//! the GPU gates in order (compile and resources, correctness, a short timing run that prunes,
//! the full timing run), with the per-config result cache, tune_log.csv, topk.json and a
//! tuned-table entry.

use crate::bench::suites::{BenchCase, TimingMode};
use crate::timing::Flusher;
use crate::tune::cache::{Cache, Key};
use crate::tune::evo::{self, Eval, Gate, Objective, Outcome};
use crate::tune::space::{Genome, Space};
use cudarc::driver::CudaStream;
use fp8_sdpa::compile::Compiler;
use fp8_sdpa::runtime::{CallOptions, Device, KernelChoice};
use fp8_sdpa::tuned::{ShapeBucket, ShapeClass, TunedEntry, TunedTable};
use fp8_sdpa::{AttnParams, AttnShape, Error, Family, Layout, Precision, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sdpa_harness::cases::{CaseSpec, HostCase};
use sdpa_harness::harness::{judge, DeviceCase};
use sdpa_harness::inputs::Distribution;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `tune`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Kernel family: hopper (sm_90a), portable or decode (use `--shape-class decode`).
    #[arg(long, default_value = "hopper")]
    pub family: String,
    /// Precision path (f16, bf16, fp8kv_f16, ...).
    #[arg(long, default_value = "f16")]
    pub precision: String,
    /// Head dim: 64, 128 or 256.
    #[arg(long, default_value_t = 128)]
    pub head_dim: u32,
    /// Problem class: prefill (non-causal) or causal, timed at S 1k, 4k and 16k; decode (Sq 1), timed at B32 Skv 4k, B4 Skv 128k, B1 Skv 4k (Hkv 8) and B8 Skv 32k (Hkv 32). A candidate's time is the geometric mean over its class's shapes (with --bucket, over the bucket's)
    #[arg(long, default_value = "prefill")]
    pub shape_class: String,
    /// Tune one shape bucket of the class instead of the whole class; the tuned.json entry then
    /// carries the bucket, and dispatch prefers it over a class-wide entry for calls of that
    /// bucket. Prefill and causal: short (Sq <= 1536; timed at S 512 and 1k), mid (<= 6144;
    /// S 2k and 4k), long (S 8k and 16k), all with 16k tokens and hidden 2048. Decode (Sq 1,
    /// H 32): small-paged and small-contiguous (batch x Hkv x 16-row blocks below the SM count;
    /// B1 Skv 4k and B4 Skv 128k, Hkv 8), large-paged and large-contiguous (B32 Skv 4k Hkv 8,
    /// B8 Skv 32k Hkv 32); the paged ones over a cache of 64-token pages
    #[arg(long, value_name = "NAME")]
    pub bucket: Option<String>,
    /// Candidates to evaluate (distinct variants).
    #[arg(long, default_value_t = 40)]
    pub budget: usize,
    /// Stop starting new candidates after this many seconds.
    #[arg(long)]
    pub time: Option<f64>,
    /// Seed of the search (same seed, same candidates in the same order).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Reuse the results in the cache (else they are re-measured, and still recorded).
    #[arg(long)]
    pub resume: bool,
    /// The per-config result cache (JSON lines).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Output folder for tune_log.csv, topk.json and tuned.json.
    #[arg(long, default_value = "artifacts/tune")]
    pub out: PathBuf,
    /// Also run random search with the same budget and seed (the tuner's own evaluation).
    #[arg(long)]
    pub compare_random: bool,
    /// Merge the winner into the user's tuned table (see `fp8_sdpa::tuned`).
    #[arg(long)]
    pub install: bool,
    /// A candidate whose short run is slower than the best by this factor is dropped.
    #[arg(long, default_value_t = 1.15)]
    pub prune: f64,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// No GPU: run only gate 1 (NVRTC compile and the resource gates) over every valid
    /// variant of the space for this arch, in parallel, into tune_log.csv.
    #[arg(long, value_name = "ARCH")]
    pub offline: Option<String>,
    /// No GPU: replay the search from this result cache (each candidate answered with its
    /// measured result) for `--seeds` seeds, the tuner against random search at `--budget`;
    /// writes curves.csv and curves.svg (best so far over the cache's best). Meant for a
    /// cache that holds the whole space (an exhaustive run).
    #[arg(long, value_name = "CACHE")]
    pub replay: Option<PathBuf>,
    /// Seeds of `--replay`, from `--seed` on.
    #[arg(long, default_value_t = 20)]
    pub seeds: u64,
    /// The arch whose rules decide which variants are valid in `--replay`.
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
}

/// The shapes a class is timed on; a candidate's time is the geometric mean of its medians
/// over them. One shape per class picked winners that lost elsewhere in the class (on the H100:
/// the B32 Skv 4k decode winner took 1.14x the default's time at B4 Skv 128k; the S 4k
/// prefill winner 1.07x at S 1k), and a tuned entry serves the whole class.
fn timed_shapes(class: ShapeClass, head_dim: u32) -> Vec<AttnShape> {
    let d = head_dim as usize;
    let h = 2048 / d;
    match class {
        // Full batches, a long cache, one sequence (the split must fill the GPU), and MHA.
        ShapeClass::Decode => vec![
            AttnShape::new(32, 1, 4096, 32, 8, d),
            AttnShape::new(4, 1, 131072, 32, 8, d),
            AttnShape::new(1, 1, 4096, 32, 8, d),
            AttnShape::new(8, 1, 32768, 32, 32, d),
        ],
        // The fa grid's short, middle and long points (16k tokens, hidden 2048).
        _ => vec![
            AttnShape::new(16, 1024, 1024, h, h, d),
            AttnShape::new(4, 4096, 4096, h, h, d),
            AttnShape::new(1, 16384, 16384, h, h, d),
        ],
    }
}

/// Page size of the paged buckets' timed shapes (tokens).
const TUNE_PAGE_SIZE: usize = 64;

/// The shapes a bucket is timed on, each with its page size (paged K/V) or none. Every shape
/// lands in its bucket on a GPU of 33 to 256 SMs (the decode ones by their CTA count: at most
/// 32 for small, 256 for large).
fn bucket_shapes(bucket: ShapeBucket, head_dim: u32) -> Vec<(AttnShape, Option<usize>)> {
    let d = head_dim as usize;
    let h = 2048 / d;
    // The fa grid's points: 16k tokens, hidden 2048.
    let fa = |s: usize| (AttnShape::new(16384 / s, s, s, h, h, d), None);
    let paged = |s: AttnShape, p: bool| (s, p.then_some(TUNE_PAGE_SIZE));
    match bucket {
        ShapeBucket::Short => vec![fa(512), fa(1024)],
        ShapeBucket::Mid => vec![fa(2048), fa(4096)],
        ShapeBucket::Long => vec![fa(8192), fa(16384)],
        ShapeBucket::SmallPaged | ShapeBucket::SmallContiguous => {
            let p = bucket == ShapeBucket::SmallPaged;
            vec![
                paged(AttnShape::new(1, 1, 4096, 32, 8, d), p),
                paged(AttnShape::new(4, 1, 131072, 32, 8, d), p),
            ]
        }
        ShapeBucket::LargePaged | ShapeBucket::LargeContiguous => {
            let p = bucket == ShapeBucket::LargePaged;
            vec![
                paged(AttnShape::new(32, 1, 4096, 32, 8, d), p),
                paged(AttnShape::new(8, 1, 32768, 32, 32, d), p),
            ]
        }
    }
}

/// The timed shapes of a run: the bucket's, or without one the class's (contiguous).
fn tune_shapes(
    class: ShapeClass,
    bucket: Option<ShapeBucket>,
    head_dim: u32,
) -> Vec<(AttnShape, Option<usize>)> {
    match bucket {
        Some(b) => bucket_shapes(b, head_dim),
        None => timed_shapes(class, head_dim)
            .into_iter()
            .map(|s| (s, None))
            .collect(),
    }
}

/// Parses `--shape-class` and `--bucket`: an unknown class, an unknown bucket, or a bucket of
/// another class is an `Error::InvalidInput` naming the valid ones.
fn parse_class_bucket(
    class: &str,
    bucket: Option<&str>,
) -> Result<(ShapeClass, Option<ShapeBucket>)> {
    let class = ShapeClass::parse(class).ok_or_else(|| {
        Error::InvalidInput(format!(
            "unknown shape class '{class}' (prefill, causal or decode)"
        ))
    })?;
    let bucket = bucket
        .map(|b| ShapeBucket::parse_for(class, b))
        .transpose()
        .map_err(|e| match e {
            Error::InvalidInput(m) => Error::InvalidInput(format!("--bucket: {m}")),
            other => other,
        })?;
    Ok((class, bucket))
}

/// Geometric mean.
fn geomean(xs: &[f64]) -> f64 {
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len().max(1) as f64).exp()
}

/// Ragged correctness shapes: (batch, seq_q, seq_kv, heads_q, heads_kv).
const CHECK_SHAPES: [(usize, usize, usize, usize, usize); 3] = [
    (1, 17, 1000, 8, 2),
    (2, 128, 128, 8, 1),
    (1, 300, 100, 2, 2),
];

struct Gpu<'a> {
    dev: &'a Device,
    stream: Arc<CudaStream>,
    compiler: Compiler,
    flusher: Flusher,
    cases: Vec<BenchCase>,
    class: ShapeClass,
    cache: Cache,
    read_cache: bool,
    machine: (String, i32, String),
    prune: f64,
    deadline: Option<Instant>,
    bar: ProgressBar,
    cached_hits: usize,
    /// A sticky CUDA error (illegal address, launch failure) left the context unusable.
    poisoned: Option<String>,
}

/// Errors after which the CUDA context cannot run anything else.
fn sticky(e: &str) -> bool {
    [
        "ILLEGAL_ADDRESS",
        "LAUNCH_FAILED",
        "ILLEGAL_INSTRUCTION",
        "MISALIGNED_ADDRESS",
        "HARDWARE_STACK_ERROR",
    ]
    .iter()
    .any(|s| e.contains(s))
}

impl Gpu<'_> {
    fn key(&self, space: &Space, g: &Genome) -> Key {
        let shapes: Vec<String> = self
            .cases
            .iter()
            .map(|c| {
                let s = &c.shape;
                let page = c.page_size.map_or(String::new(), |p| format!("/p{p}"));
                format!(
                    "{}x{}x{}x{}/{}{page}",
                    s.batch, s.seq_q, s.seq_kv, s.heads_q, s.heads_kv
                )
            })
            .collect();
        Key {
            variant: space.variant(g).key(),
            precision: space.precision.name().into(),
            head_dim: space.head_dim,
            shape_class: self.class.name().into(),
            shape: shapes.join(";"),
            device: self.machine.0.clone(),
            driver: self.machine.1,
            nvrtc: self.machine.2.clone(),
            kernel: fp8_sdpa::kernels::source_or_err(space.family, space.precision)
                .and_then(|src| Compiler::cache_key(&src, &space.spec(g).defines(), space.arch))
                .unwrap_or_default(),
            settings: format!("prune {} runs 100/500", self.prune),
        }
    }

    fn gates(&mut self, space: &Space, g: &Genome, best_us: Option<f64>) -> Eval {
        let spec = space.spec(g);
        // Gate 1: compile and the resource gates (NVRTC, no GPU).
        match self.compiler.compile(&spec, space.arch) {
            Err(e) => return Eval::failed(Gate::Compile, e.to_string()),
            Ok(c) => {
                let v = sdpa_harness::gates::check(&c);
                if !v.is_empty() {
                    let why: Vec<String> = v
                        .iter()
                        .map(|x| format!("{}: {}", x.gate, x.detail))
                        .collect();
                    return Eval::failed(Gate::Compile, why.join("; "));
                }
            }
        }
        // Gate 2: the float64 reference on ragged shapes, two seeds, both layouts.
        for (i, &(b, sq, skv, hq, hkv)) in CHECK_SHAPES.iter().enumerate() {
            for seed in 0..2u64 {
                let cs = CaseSpec {
                    shape: AttnShape::new(b, sq, skv, hq, hkv, space.head_dim as usize),
                    precision: space.precision,
                    causal: space.causal,
                    layout: if (i as u64 + seed).is_multiple_of(2) {
                        Layout::Bshd
                    } else {
                        Layout::Bhsd
                    },
                    dist: Distribution::Normal,
                    seed: 77 + seed,
                };
                let r = (|| -> Result<Vec<String>> {
                    let host = HostCase::build(cs)?;
                    let params = AttnParams::default_for(space.head_dim as usize, space.causal);
                    let want = host.reference_dequantized(params.scale as f64)?;
                    let mut d = DeviceCase::upload(&self.stream, &host)?;
                    let opts = CallOptions::default()
                        .with_kernel(KernelChoice::Variant(spec.variant))
                        .with_check_descales(true);
                    let out = d.run(self.dev, &self.stream, &host, params, opts)?;
                    let unchanged = d.inputs_unchanged(&self.stream)?;
                    Ok(judge(space.precision, &out, &want, None, false, unchanged)?.failures)
                })();
                match r {
                    Err(e) => return Eval::failed(Gate::Correctness, e.to_string()),
                    Ok(f) if !f.is_empty() => {
                        return Eval::failed(
                            Gate::Correctness,
                            format!("{:?} seed {seed}: {}", cs.shape, f.join("; ")),
                        )
                    }
                    Ok(_) => {}
                }
            }
        }
        // Gate 3: a short timing run (the protocol's minimum) prunes clear losers. Times are
        // geometric means over the class's shapes.
        let time = |gpu: &mut Self, iters: usize| -> std::result::Result<f64, (Gate, String)> {
            let mut medians = Vec::new();
            for i in 0..gpu.cases.len() {
                let case = gpu.cases[i].clone();
                let row = crate::cmd::bench::bench_one(
                    gpu.dev,
                    &gpu.stream,
                    &case,
                    case.mode,
                    spec.variant,
                    iters,
                    &mut gpu.flusher,
                );
                match (row.median_us(), row.correctness.as_ref().map(|c| c.passed)) {
                    (Some(us), Some(true)) => medians.push(us),
                    (_, Some(false)) => {
                        return Err((
                            Gate::Correctness,
                            format!("wrong result on the timed shape {}", case.name),
                        ))
                    }
                    _ => return Err((Gate::Timed, format!("{}: {}", case.name, row.status))),
                }
            }
            Ok(geomean(&medians))
        };
        let short = match time(self, 100) {
            Ok(us) => us,
            Err((gate, e)) => return Eval::failed(gate, e),
        };
        if let Some(b) = best_us {
            if short > b * self.prune {
                return Eval {
                    gate: Gate::Prune,
                    reason: format!(
                        "short run {short:.1} us > {:.2} x best {b:.1} us",
                        self.prune
                    ),
                    short_us: Some(short),
                    full_us: None,
                };
            }
        }
        // Gate 4: the full run.
        match time(self, 500) {
            Ok(full) => Eval::timed(short, full),
            Err((gate, e)) => Eval::failed(gate, e),
        }
    }
}

impl Objective for Gpu<'_> {
    fn evaluate(&mut self, space: &Space, g: &Genome, best_us: Option<f64>) -> Eval {
        let key = self.key(space, g);
        if self.read_cache {
            if let Some(e) = self.cache.get(&key) {
                self.cached_hits += 1;
                self.bar.inc(1);
                return e.clone();
            }
        }
        let e = self.gates(space, g, best_us);
        if sticky(&e.reason) {
            // The context is gone: the result says nothing about the candidate, so it is not
            // cached, and the search stops (resume in a fresh process).
            self.poisoned = Some(format!("{}: {}", space.variant(g).key(), e.reason));
            return e;
        }
        if let Err(err) = self.cache.put(key, e.clone()) {
            eprintln!("warning: cannot write the tune cache: {err}");
        }
        self.bar.inc(1);
        if let Some(b) = best_us
            .map(|b| b.min(e.cost()))
            .or(Some(e.cost()).filter(|c| c.is_finite()))
        {
            self.bar.set_message(format!("best {b:.1} us"));
        }
        e
    }

    fn should_stop(&self) -> bool {
        self.poisoned.is_some() || self.deadline.is_some_and(|d| Instant::now() > d)
    }
}

fn write_log(path: &PathBuf, space: &Space, o: &Outcome, search: &str) -> Result<()> {
    let mut w = csv::Writer::from_path(path)
        .map_err(|e| Error::InvalidInput(format!("{}: {e}", path.display())))?;
    let err = |e: csv::Error| Error::InvalidInput(format!("{}: {e}", path.display()));
    w.write_record([
        "search",
        "index",
        "generation",
        "layer",
        "variant",
        "gate",
        "reason",
        "short_us",
        "full_us",
    ])
    .map_err(err)?;
    for r in &o.records {
        let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
        w.write_record([
            search.to_string(),
            r.index.to_string(),
            r.generation.to_string(),
            format!("{:?}", r.layer).to_lowercase(),
            space.variant(&r.genome).key(),
            format!("{:?}", r.eval.gate).to_lowercase(),
            r.eval.reason.clone(),
            f(r.eval.short_us),
            f(r.eval.full_us),
        ])
        .map_err(err)?;
    }
    w.flush().map_err(Error::io(path))?;
    Ok(())
}

/// Runs `tune`.
pub fn run(a: Args) -> Result<ExitCode> {
    let family: Family = a.family.parse()?;
    let precision = Precision::ALL
        .into_iter()
        .find(|p| p.name() == a.precision)
        .ok_or_else(|| Error::InvalidInput(format!("unknown precision '{}'", a.precision)))?;
    let (class, bucket) = parse_class_bucket(&a.shape_class, a.bucket.as_deref())?;
    if (family == Family::Decode) != (class == ShapeClass::Decode) {
        return Err(Error::InvalidInput(format!(
            "the decode family serves the decode class and only it: pass --family decode with \
             --shape-class decode (got --family {} --shape-class {})",
            family.name(),
            class.name()
        )));
    }
    if let Some(cache) = &a.replay {
        return replay(&a, cache, family, precision, class);
    }
    if let Some(arch) = &a.offline {
        return offline(&a, family, precision, class, arch.parse()?);
    }
    let dev = crate::cmd::env::open_device(a.device)
        .map_err(|e| Error::Unsupported(format!("tune times candidates on a GPU: {e}")))?;
    let arch = dev.info().arch;
    let causal = class == ShapeClass::Causal;
    let space = Space::new(family, arch, precision, a.head_dim, causal).ok_or_else(|| {
        Error::Unsupported(format!("the {} family has no tunable space", family.name()))
    })?;
    let valid = space.enumerate_valid().len();
    if valid == 0 {
        return Err(Error::Unsupported(format!(
            "no {} variant is valid for {precision} d{} {} on {arch}",
            family.name(),
            a.head_dim,
            class.name()
        )));
    }
    std::fs::create_dir_all(&a.out).map_err(Error::io(&a.out))?;
    let cache_path = a.cache.clone().unwrap_or_else(|| a.out.join("cache.jsonl"));
    let cache = Cache::open(&cache_path, a.resume).map_err(Error::io(&cache_path))?;
    let (maj, min) = fp8_sdpa::compile::nvrtc::version()?;
    // One stream, as in bench: cudarc's per-use events would add driver calls to every timed
    // launch. SAFETY: nothing else uses this context concurrently.
    unsafe { dev.context().disable_event_tracking() };
    let stream = dev.new_stream()?;
    let timed_cases = tune_shapes(class, bucket, a.head_dim);
    let shapes: Vec<AttnShape> = timed_cases.iter().map(|&(s, _)| s).collect();
    if let Some(b) = bucket {
        let sms = dev.info().sm_count;
        for &(s, p) in &timed_cases {
            let got = ShapeBucket::of(&s, class, sms, p.is_some());
            if got != b {
                eprintln!(
                    "warning: the timed shape {} is in bucket {got}, not {b}, on this GPU \
                     ({sms} SMs)",
                    shape_label(&s)
                );
            }
        }
    }
    let what = match bucket {
        Some(b) => format!("{} bucket {b}", class.name()),
        None => class.name().to_string(),
    };
    let bar = ProgressBar::new(a.budget as u64);
    bar.set_style(
        ProgressStyle::with_template("tune {bar:40} {pos}/{len} candidates, {elapsed} {msg}")
            .expect("template"),
    );
    eprintln!(
        "tuning {} {precision} d{} {what} on {} ({valid} valid variants; budget {}, seed {}); cache {} ({} results read, {} unreadable lines skipped)",
        family.name(),
        a.head_dim,
        dev.info().name,
        a.budget,
        a.seed,
        cache_path.display(),
        cache.len(),
        cache.skipped
    );
    let mut gpu = Gpu {
        dev: &dev,
        flusher: Flusher::new(&stream, dev.info().l2_bytes)?,
        stream,
        compiler: Compiler::new()?,
        cases: timed_cases
            .iter()
            .map(|&(shape, page_size)| BenchCase {
                suite: "tune".into(),
                name: format!(
                    "{}_d{}_{}{}",
                    class.name(),
                    a.head_dim,
                    shape_label(&shape),
                    page_size.map_or(String::new(), |p| format!(" paged{p}"))
                ),
                shape,
                precision,
                causal,
                mode: TimingMode::Hot,
                page_size,
            })
            .collect(),
        class,
        cache,
        read_cache: a.resume,
        machine: (
            dev.info().name.clone(),
            dev.info().driver_version,
            format!("{maj}.{min}"),
        ),
        prune: a.prune,
        deadline: a
            .time
            .map(|t| Instant::now() + std::time::Duration::from_secs_f64(t)),
        bar,
        cached_hits: 0,
        poisoned: None,
    };
    // Gate 1 for the whole space runs on the CPU cores in the background, into the kernel
    // cache, while the GPU times candidates; a candidate the search reaches first compiles
    // in the foreground (the cache keeps both from repeating the work).
    {
        let (space, compiler) = (space.clone(), Compiler::new()?);
        std::thread::spawn(move || {
            use rayon::prelude::*;
            // Half the cores, so the host side of the timed runs keeps some.
            let threads = std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1));
            if let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
                pool.install(|| {
                    space.enumerate_valid().par_iter().for_each(|g| {
                        let _ = compiler.compile(&space.spec(g), space.arch);
                    });
                });
            }
        });
    }
    let start: Vec<Genome> = space.default_genome().into_iter().collect();
    let cfg = evo::Config {
        budget: a.budget,
        seed: a.seed,
        ..evo::Config::default()
    };
    let t0 = Instant::now();
    let outcome = evo::search(&space, &cfg, &mut gpu, &start);
    let tuner_s = t0.elapsed().as_secs_f64();
    gpu.bar.finish();
    if let Some(why) = &gpu.poisoned {
        eprintln!(
            "stopped: a candidate left the CUDA context unusable ({why}); results so far are \
             cached, resume with --resume in a new process"
        );
    }
    write_log(&a.out.join("tune_log.csv"), &space, &outcome, "evo")?;
    let mut summary = serde_json::json!({
        "family": family.name(), "precision": precision.name(), "head_dim": a.head_dim,
        "shape_class": class.name(), "bucket": bucket.map(|b| b.name()),
        "device": dev.info().name, "seed": a.seed,
        "budget": a.budget, "evaluations": outcome.records.len(), "cached": gpu.cached_hits,
        "seconds": tuner_s, "valid_variants": valid,
        "best_so_far_us": outcome.best_so_far(),
    });
    if a.compare_random {
        gpu.bar = ProgressBar::new(a.budget as u64);
        let r = evo::random_search(&space, a.budget, a.seed, &mut gpu);
        write_log(&a.out.join("random_log.csv"), &space, &r, "random")?;
        summary["random_best_so_far_us"] = serde_json::json!(r.best_so_far());
    }
    // topk.json: the timed candidates, best first.
    let mut timed: Vec<_> = outcome
        .records
        .iter()
        .filter(|r| r.eval.gate == Gate::Timed)
        .collect();
    timed.sort_by(|x, y| x.eval.cost().total_cmp(&y.eval.cost()));
    // TFLOPS of a geometric-mean time: the geometric mean of the shapes' FLOPs over it.
    let flops = geomean(
        &shapes
            .iter()
            .map(|s| crate::bench::flops::flops(s, causal))
            .collect::<Vec<_>>(),
    );
    let topk: Vec<_> = timed
        .iter()
        .take(5)
        .map(|r| {
            serde_json::json!({
                "variant": space.variant(&r.genome).key(),
                "median_us": r.eval.full_us,
                "tflops": r.eval.full_us.map(|us| flops / us / 1e6),
            })
        })
        .collect();
    summary["topk"] = serde_json::json!(topk);
    let default_key = start.first().map(|g| space.variant(g).key());
    summary["default"] = serde_json::json!(default_key);
    let path = a.out.join("topk.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary).expect("json"))
        .map_err(Error::io(&path))?;
    let Some(best) = outcome.best() else {
        eprintln!(
            "no candidate passed every gate; see {}",
            a.out.join("tune_log.csv").display()
        );
        return Ok(ExitCode::FAILURE);
    };
    let v = space.variant(&best.genome);
    let us = best.eval.cost();
    let entry = TunedEntry {
        arch: arch.name().into(),
        precision: precision.name().into(),
        head_dim: a.head_dim,
        shape_class: class.name().into(),
        bucket: bucket.map(|b| b.name().to_string()),
        variant: v.key(),
        tflops: Some(flops / us / 1e6),
        note: Some(format!(
            "sdpa-lab tune, {} on {}, {} evaluations, seed {}",
            timed_cases
                .iter()
                .map(|(s, p)| shape_label(s) + &p.map_or(String::new(), |p| format!(" paged {p}")))
                .collect::<Vec<_>>()
                .join(", "),
            dev.info().name,
            outcome.records.len(),
            a.seed
        )),
    };
    let mut table = TunedTable::default();
    table.upsert(entry.clone())?;
    let path = a.out.join("tuned.json");
    std::fs::write(&path, table.to_json()).map_err(Error::io(&path))?;
    eprintln!(
        "best: {} at {us:.1} us ({:.0} TFLOPS) after {} evaluations in {tuner_s:.0} s; the default {} ",
        v.key(),
        flops / us / 1e6,
        outcome.records.len(),
        default_key.unwrap_or_else(|| "(not in this family)".into())
    );
    if a.install {
        let user = TunedTable::user_path().ok_or_else(|| {
            Error::Unsupported(
                "no config dir for the user's tuned table; set SDPA_TUNED_TABLE".into(),
            )
        })?;
        let mut t = if user.exists() {
            TunedTable::load(&user)?
        } else {
            TunedTable::default()
        };
        t.upsert(entry)?;
        if let Some(dir) = user.parent() {
            std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
        }
        std::fs::write(&user, t.to_json()).map_err(Error::io(&user))?;
        eprintln!("installed into {}", user.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn shape_label(s: &AttnShape) -> String {
    format!(
        "B{} Sq{} Skv{} H{}/{} D{}",
        s.batch, s.seq_q, s.seq_kv, s.heads_q, s.heads_kv, s.head_dim
    )
}

/// `--replay CACHE`: the search replayed from measured results, tuner against random.
fn replay(
    a: &Args,
    cache_path: &Path,
    family: Family,
    precision: Precision,
    class: ShapeClass,
) -> Result<ExitCode> {
    use crate::tune::replay::{curves, mean_ratio, plot, Replay};
    let arch: fp8_sdpa::Arch = a.arch.parse()?;
    let causal = class == ShapeClass::Causal;
    let space = Space::new(family, arch, precision, a.head_dim, causal).ok_or_else(|| {
        Error::Unsupported(format!("the {} family has no tunable space", family.name()))
    })?;
    if !cache_path.exists() {
        return Err(Error::InvalidInput(format!(
            "{}: no such result cache (write one with `tune --cache`)",
            cache_path.display()
        )));
    }
    let cache = Cache::open(cache_path, true).map_err(Error::io(cache_path))?;
    let mut r = Replay::new(&cache, &space, class.name());
    let Some((best_key, opt)) = r.optimum() else {
        return Err(Error::InvalidInput(format!(
            "{}: no timed result for {} {precision} d{} {}",
            cache_path.display(),
            family.name(),
            a.head_dim,
            class.name()
        )));
    };
    let valid = space.enumerate_valid().len();
    let missing = r.missing(&space);
    if missing > 0 {
        eprintln!(
            "note: {missing} of {valid} valid variants have no result in the cache; the replay \
             counts them as failed at the first gate, and the optimum is the cache's best only"
        );
    }
    let start: Vec<Genome> = space.default_genome().into_iter().collect();
    let all = curves(&space, &mut r, a.budget, a.seed, a.seeds, &start);
    std::fs::create_dir_all(&a.out).map_err(Error::io(&a.out))?;
    let csv_path = a.out.join("curves.csv");
    let mut w = csv::Writer::from_path(&csv_path)
        .map_err(|e| Error::InvalidInput(format!("{}: {e}", csv_path.display())))?;
    let err = |e: csv::Error| Error::InvalidInput(format!("{}: {e}", csv_path.display()));
    w.write_record([
        "search",
        "seed",
        "evaluations",
        "best_us",
        "best_over_optimum",
    ])
    .map_err(err)?;
    for c in &all {
        for (i, b) in c.best_us.iter().enumerate() {
            let (us, ratio) = if b.is_finite() {
                (format!("{b:.3}"), format!("{:.4}", b / opt))
            } else {
                (String::new(), String::new())
            };
            w.write_record([
                c.search.to_string(),
                c.seed.to_string(),
                (i + 1).to_string(),
                us,
                ratio,
            ])
            .map_err(err)?;
        }
    }
    w.flush().map_err(Error::io(&csv_path))?;
    let title = format!(
        "{} {precision} d{} {}: {} seeds, budget {} of {valid}",
        family.name(),
        a.head_dim,
        class.name(),
        a.seeds,
        a.budget
    );
    let svg = a.out.join("curves.svg");
    plot(&all, opt, &title, &svg)
        .map_err(|e| Error::InvalidInput(format!("{}: {e}", svg.display())))?;
    println!(
        "replay of {} ({} results; {valid} valid variants, best {best_key} at {opt:.2} us), \
         budget {}, seeds {}..{}",
        cache_path.display(),
        r.measured(),
        a.budget,
        a.seed,
        a.seed + a.seeds
    );
    for search in ["evo", "random"] {
        let of: Vec<_> = all.iter().filter(|c| c.search == search).collect();
        let within = of
            .iter()
            .filter(|c| c.evals_to(opt, 0.02).is_some())
            .count();
        let evals: Vec<usize> = of.iter().filter_map(|c| c.evals_to(opt, 0.02)).collect();
        let mean_final = mean_ratio(&all, search, opt).last().copied().flatten();
        println!(
            "  {:<6} within 2 % of the best in {within}/{} seeds{}; mean final best {}",
            if search == "evo" { "tuner" } else { "random" },
            of.len(),
            if evals.is_empty() {
                String::new()
            } else {
                format!(
                    " (after {:.1} evaluations on average)",
                    evals.iter().sum::<usize>() as f64 / evals.len() as f64
                )
            },
            mean_final.map_or("-".into(), |m| format!("{m:.3}x"))
        );
    }
    println!("wrote {} and {}", csv_path.display(), svg.display());
    Ok(ExitCode::SUCCESS)
}

/// `--offline ARCH`: gate 1 over the whole valid space, no GPU.
fn offline(
    a: &Args,
    family: Family,
    precision: Precision,
    class: ShapeClass,
    arch: fp8_sdpa::Arch,
) -> Result<ExitCode> {
    use rayon::prelude::*;
    let causal = class == ShapeClass::Causal;
    let space = Space::new(family, arch, precision, a.head_dim, causal).ok_or_else(|| {
        Error::Unsupported(format!("the {} family has no tunable space", family.name()))
    })?;
    let genomes = space.enumerate_valid();
    eprintln!(
        "offline gate 1: {} valid {} variants for {precision} d{} {} on {arch}",
        genomes.len(),
        family.name(),
        a.head_dim,
        class.name()
    );
    let compiler = Compiler::new()?;
    let evals: Vec<Eval> = genomes
        .par_iter()
        .map(|g| match compiler.compile(&space.spec(g), arch) {
            Err(e) => Eval::failed(Gate::Compile, e.to_string()),
            Ok(c) => {
                let v = sdpa_harness::gates::check(&c);
                if v.is_empty() {
                    Eval {
                        gate: Gate::Correctness,
                        reason: "passed gate 1; the next gates need a GPU".into(),
                        short_us: None,
                        full_us: None,
                    }
                } else {
                    let why: Vec<String> = v
                        .iter()
                        .map(|x| format!("{}: {}", x.gate, x.detail))
                        .collect();
                    Eval::failed(Gate::Compile, why.join("; "))
                }
            }
        })
        .collect();
    let records = genomes
        .into_iter()
        .zip(evals)
        .enumerate()
        .map(|(index, (genome, eval))| evo::Record {
            index,
            generation: 0,
            layer: crate::tune::space::Layer::Macro,
            genome,
            eval,
        })
        .collect::<Vec<_>>();
    let passed = records
        .iter()
        .filter(|r| r.eval.gate != Gate::Compile)
        .count();
    std::fs::create_dir_all(&a.out).map_err(Error::io(&a.out))?;
    let path = a.out.join("tune_log.csv");
    write_log(&path, &space, &Outcome { records }, "offline")?;
    eprintln!("{passed} passed gate 1; log: {}", path.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: Args,
    }

    fn args(extra: &[&str]) -> Args {
        Cli::parse_from(std::iter::once("tune").chain(extra.iter().copied())).a
    }

    fn err(extra: &[&str]) -> String {
        match run(args(extra)) {
            Err(e) => e.to_string(),
            Ok(c) => panic!("{extra:?} ran: {c:?}"),
        }
    }

    #[test]
    fn buckets_are_validated_against_the_class() {
        let e = err(&["--bucket", "small-paged"]);
        assert!(e.contains("--bucket: bucket 'small-paged' is not a bucket of the prefill class"));
        assert!(e.contains("short, mid, long"), "{e}");
        let e = err(&[
            "--family",
            "decode",
            "--shape-class",
            "decode",
            "--bucket",
            "long",
        ]);
        assert!(
            e.contains("small-paged, small-contiguous, large-paged, large-contiguous"),
            "{e}"
        );
        let e = err(&["--shape-class", "causal", "--bucket", "huge"]);
        assert!(e.contains("unknown bucket 'huge'"), "{e}");
        assert!(e.contains("short, mid, long"), "{e}");
        let e = err(&["--shape-class", "warm"]);
        assert!(e.contains("unknown shape class 'warm'"), "{e}");
        // Valid pairs parse.
        for class in ShapeClass::ALL {
            for &b in ShapeBucket::of_class(class) {
                let got = parse_class_bucket(class.name(), Some(b.name())).unwrap();
                assert_eq!(got, (class, Some(b)));
            }
            assert_eq!(
                parse_class_bucket(class.name(), None).unwrap(),
                (class, None)
            );
        }
        assert!(args(&[]).bucket.is_none());
    }

    #[test]
    fn bucket_shapes_land_in_their_bucket() {
        for b in ShapeBucket::ALL {
            let class = if b.belongs_to(ShapeClass::Decode) {
                ShapeClass::Decode
            } else {
                ShapeClass::Prefill
            };
            for d in [64, 128, 256] {
                let shapes = bucket_shapes(b, d);
                assert_eq!(shapes.len(), 2);
                for (s, page) in shapes {
                    assert_eq!(ShapeClass::of(&s, false), class, "{b} {s:?}");
                    for sms in [33, 108, 132, 256] {
                        assert_eq!(
                            ShapeBucket::of(&s, class, sms, page.is_some()),
                            b,
                            "{s:?} on {sms} SMs"
                        );
                    }
                    if class == ShapeClass::Prefill {
                        assert_eq!(s.batch * s.seq_q, 16384);
                        assert_eq!(s.heads_q * s.head_dim, 2048);
                    }
                    if let Some(p) = page {
                        assert_eq!(p, 64);
                        assert!(s.seq_kv.is_multiple_of(p));
                    }
                }
            }
        }
        // Without a bucket: the class's shapes, contiguous.
        let t = tune_shapes(ShapeClass::Decode, None, 128);
        assert_eq!(t.len(), 4);
        assert!(t.iter().all(|(_, p)| p.is_none()));
    }
}
