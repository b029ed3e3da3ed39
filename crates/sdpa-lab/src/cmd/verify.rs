//! `sdpa-lab verify`: the correctness gate on the GPU. Every registered spec the device can
//! run, over ragged shapes, GQA ratios, causal with Sq < Skv and Sq > Skv, both layouts and
//! several seeds and input distributions; output and LSE poisoned before each run; every
//! element checked; inputs checked unchanged. Variable-length batches (packed sequences with
//! offsets, many short and a few long) on every spec that reads them (the portable and decode
//! families), and on the decode family decode-shaped varlen batches with contiguous and paged
//! K/V (rows `+paged` in the JSON: `paged` holds the page size). Plus the exhaustive FP8 codec
//! checks.

use fp8_sdpa::kernels::registry;
use fp8_sdpa::runtime::varlen::reads_varlen;
use fp8_sdpa::runtime::{CallOptions, KernelChoice};
use fp8_sdpa::{AttnParams, AttnShape, Family, KernelSpec, Layout, Precision, VarlenShape};
use indicatif::{ProgressBar, ProgressStyle};
use sdpa_harness::cases::{
    decode_varlen_verify_shapes, decode_verify_shapes, varlen_verify_shapes, verify_shapes,
    CaseSpec, HostCase, HostVarlenCase, VarlenCaseSpec,
};
use sdpa_harness::codec_check;
use sdpa_harness::harness::{
    judge, seeds_gate_applies, DeviceCase, DevicePagedVarlenCase, DeviceVarlenCase, Verdict,
};
use sdpa_harness::inputs::Distribution;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `verify`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Only specs whose key contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Verify these variants (keys as `check --variant` takes them, repeatable) instead of
    /// the registered ones: every problem class the variant is valid for on this GPU.
    #[arg(long)]
    pub variant: Vec<String>,
    /// Fewer shapes and seeds (for quick iterations; `repro` runs this unless given `--full`).
    #[arg(long)]
    pub quick: bool,
    /// Seeds per shape (each seed also picks an input distribution).
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Write every run's result here.
    #[arg(long, default_value = "verify.json")]
    pub json: PathBuf,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Skip the exhaustive FP8 codec checks.
    #[arg(long)]
    pub no_codec: bool,
}

/// One verified run.
#[derive(Serialize)]
pub struct Row {
    /// Spec key.
    pub spec: String,
    /// The case (for a variable-length batch, its launch: the sequences as the batch, the
    /// longest lengths).
    pub case: CaseSpec,
    /// The variable-length batch, for those runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub varlen: Option<VarlenCaseSpec>,
    /// A varlen run over a paged cache: its page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paged: Option<usize>,
    /// The judgement (absent when the run itself failed).
    pub verdict: Option<Verdict>,
    /// Empty when passed.
    pub failures: Vec<String>,
}

/// The whole result.
#[derive(Serialize)]
pub struct Report {
    /// Runs.
    pub runs: Vec<Row>,
    /// Codec checks.
    pub codec: Vec<codec_check::CodecCheck>,
    /// Per-spec summary.
    pub summary: Vec<SpecSummary>,
    /// Whether everything passed.
    pub passed: bool,
}

/// Per-spec summary line.
#[derive(Serialize, Clone)]
pub struct SpecSummary {
    /// Spec key.
    pub spec: String,
    /// Runs.
    pub runs: usize,
    /// Failed runs.
    pub failed: usize,
    /// Worst relative L2 error against the dequantized reference.
    pub worst_rel_l2: f64,
    /// Worst max abs error against the dequantized reference.
    pub worst_max_abs: f64,
    /// Worst mean abs error against the unquantized inputs, over the cases the seeds' gate
    /// applies to (FP8 paths).
    pub worst_seeds_mean: Option<f64>,
    /// Worst max abs error against the unquantized inputs, same cases (FP8 paths).
    pub worst_seeds_max: Option<f64>,
    /// Worst max abs error against the unquantized inputs over all FP8 cases (reported:
    /// rows seeing few keys carry the format's own error).
    pub worst_raw_max_any: Option<f64>,
}

/// Distributions exercised per precision. Outliers stress FP8 amax scaling; on 16-bit paths
/// they only scale the data, so those get saturating and near-constant rows instead.
fn distribution(p: Precision, seed: u64) -> Distribution {
    let fp8 = p.kv().is_scaled();
    match (seed % 3, fp8) {
        (0, _) => Distribution::Normal,
        (1, _) => Distribution::LargeRows,
        (_, true) => Distribution::Outliers,
        (_, false) => Distribution::NearConstant,
    }
}

/// Runs the verification; returns the report.
pub fn verify(a: &Args) -> fp8_sdpa::Result<Report> {
    let dev = crate::cmd::env::open_device(a.device)
        .map_err(|e| fp8_sdpa::Error::Unsupported(format!("verify needs a GPU: {e}")))?;
    let arch = dev.info().arch;
    let stream = dev.new_stream()?;
    let mut codec = Vec::new();
    if !a.no_codec {
        codec.extend(codec_check::run_all(&dev, &stream)?);
        codec.extend(codec_check::quantize_check(
            &dev,
            &stream,
            [2, 77, 3, 128],
            7,
        )?);
    }
    let candidates = if a.variant.is_empty() {
        registry::registered_for(arch)
    } else {
        let mut v = Vec::new();
        for key in &a.variant {
            let variant: fp8_sdpa::Variant = key.parse()?;
            v.extend(registry::specs_of(variant).filter(|s| s.validate(arch).is_ok()));
        }
        v
    };
    let specs = super::matching(candidates, a.filter.as_deref());
    // Group specs by problem class: each case is built, referenced and uploaded once.
    let mut groups: BTreeMap<(String, u32, bool), (Precision, Vec<KernelSpec>)> = BTreeMap::new();
    for s in &specs {
        groups
            .entry((s.precision.name().to_string(), s.head_dim, s.causal))
            .or_insert((s.precision, Vec::new()))
            .1
            .push(*s);
    }
    // (shape, decode family only)
    let shapes: Vec<_> = verify_shapes(a.quick)
        .into_iter()
        .map(|s| (s, false))
        .chain(decode_verify_shapes(a.quick).into_iter().map(|s| (s, true)))
        .collect();
    let runs_on = |spec: &KernelSpec, decode_only: bool| {
        !decode_only || spec.variant.family == Family::Decode
    };
    let seeds = if a.quick { a.seeds.min(2) } else { a.seeds };
    // (lens, heads_q, heads_kv, decode family only); the decode family's run both contiguous
    // and paged.
    let varlen_shapes: Vec<_> = varlen_verify_shapes(a.quick)
        .into_iter()
        .map(|(l, hq, hkv)| (l, hq, hkv, false))
        .chain(
            decode_varlen_verify_shapes(a.quick)
                .into_iter()
                .map(|(l, hq, hkv)| (l, hq, hkv, true)),
        )
        .collect();
    let total: u64 = groups
        .values()
        .flat_map(|(_, g)| g.iter())
        .map(|s| {
            let varlen = if s.variant.family == Family::Decode {
                varlen_shapes.len() + decode_varlen_verify_shapes(a.quick).len()
            } else if reads_varlen(&s.variant) {
                varlen_shapes.iter().filter(|v| !v.3).count()
            } else {
                0
            };
            (shapes.iter().filter(|(_, d)| runs_on(s, *d)).count() + varlen) as u64
        })
        .sum::<u64>()
        * seeds;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "verify {bar:40} {pos}/{len} runs, {elapsed} ({eta} left) {msg}",
        )
        .expect("template"),
    );
    let mut runs = Vec::new();
    for ((_, d, causal), (precision, group)) in &groups {
        for (si, &((batch, seq_q, seq_kv, heads_q, heads_kv), decode_only)) in
            shapes.iter().enumerate()
        {
            if !group.iter().any(|s| runs_on(s, decode_only)) {
                continue;
            }
            for seed in 0..seeds {
                let case = CaseSpec {
                    shape: AttnShape::new(batch, seq_q, seq_kv, heads_q, heads_kv, *d as usize),
                    precision: *precision,
                    causal: *causal,
                    layout: if (si + seed as usize).is_multiple_of(2) {
                        Layout::Bshd
                    } else {
                        Layout::Bhsd
                    },
                    dist: distribution(*precision, seed),
                    seed: 1000 * si as u64 + seed,
                };
                bar.set_message(format!(
                    "{precision} d{d} {} {batch}x{seq_q}x{seq_kv}x{heads_q}/{heads_kv}",
                    if *causal { "causal" } else { "full" }
                ));
                let host = HostCase::build(case)?;
                let params = AttnParams::default_for(*d as usize, *causal);
                let ref_deq = host.reference_dequantized(params.scale as f64)?;
                let fp8 = precision.kv().is_scaled() || precision.q().is_scaled();
                let ref_raw = if fp8 && case.dist == Distribution::Normal {
                    Some(host.reference_raw(params.scale as f64)?)
                } else {
                    None
                };
                let mut dcase = DeviceCase::upload(&stream, &host)?;
                for spec in group.iter().filter(|s| runs_on(s, decode_only)) {
                    let opts = CallOptions::default()
                        .with_kernel(KernelChoice::Variant(spec.variant))
                        .with_check_descales(true);
                    let row = match dcase.run(&dev, &stream, &host, params, opts) {
                        Ok(out) => {
                            let unchanged = dcase.inputs_unchanged(&stream)?;
                            let v = judge(
                                *precision,
                                &out,
                                &ref_deq,
                                ref_raw.as_ref(),
                                seeds_gate_applies(&case),
                                unchanged,
                            )?;
                            Row {
                                spec: spec.key(),
                                case,
                                varlen: None,
                                paged: None,
                                failures: v.failures.clone(),
                                verdict: Some(v),
                            }
                        }
                        Err(e) => Row {
                            spec: spec.key(),
                            case,
                            varlen: None,
                            paged: None,
                            verdict: None,
                            failures: vec![format!("run failed: {e}")],
                        },
                    };
                    if !row.failures.is_empty() {
                        bar.println(format!(
                            "FAIL {} {:?}: {}",
                            row.spec,
                            case.shape,
                            row.failures.join("; ")
                        ));
                    }
                    runs.push(row);
                    bar.inc(1);
                }
            }
        }
    }
    for ((_, d, causal), (precision, group)) in &groups {
        let specs: Vec<&KernelSpec> = group.iter().filter(|s| reads_varlen(&s.variant)).collect();
        if specs.is_empty() {
            continue;
        }
        for (si, (lens, heads_q, heads_kv, decode_only)) in varlen_shapes.iter().enumerate() {
            let specs: Vec<&KernelSpec> = specs
                .iter()
                .copied()
                .filter(|s| !decode_only || s.variant.family == Family::Decode)
                .collect();
            if specs.is_empty() {
                continue;
            }
            for seed in 0..seeds {
                let case = VarlenCaseSpec {
                    shape: VarlenShape::from_lens(lens, *heads_q, *heads_kv, *d as usize),
                    precision: *precision,
                    causal: *causal,
                    dist: distribution(*precision, seed),
                    seed: 500_000 + 1000 * si as u64 + seed,
                    // FP8 inputs: per-head descales, and per (sequence, head) every other seed.
                    per_sequence_descales: seed % 2 == 1,
                };
                bar.set_message(format!(
                    "{precision} d{d} {} varlen {} sequences, {}/{} heads",
                    if *causal { "causal" } else { "full" },
                    lens.len(),
                    heads_q,
                    heads_kv
                ));
                // Decode-shaped batches also run paged on the decode family (pages of 16, 48 and
                // 256 tokens in turn).
                let paged = decode_only.then_some([16, 48, 256][(si + seed as usize) % 3]);
                runs.extend(verify_varlen(&dev, &stream, &case, &specs, paged, &bar)?);
            }
        }
    }
    bar.finish_and_clear();
    let summary = summarize(&runs);
    let passed = runs.iter().all(|r| r.failures.is_empty())
        && codec.iter().all(|c| c.passed())
        && !runs.is_empty();
    Ok(Report {
        runs,
        codec,
        summary,
        passed,
    })
}

/// One variable-length case on `specs`: built, referenced and uploaded once; with `paged`
/// (a page size) run again over a paged cache on the decode specs.
fn verify_varlen(
    dev: &fp8_sdpa::runtime::Device,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    case: &VarlenCaseSpec,
    specs: &[&KernelSpec],
    paged: Option<usize>,
    bar: &ProgressBar,
) -> fp8_sdpa::Result<Vec<Row>> {
    let host = HostVarlenCase::build(case.clone())?;
    let params = AttnParams::default_for(case.shape.head_dim, case.causal);
    let ref_deq = host.reference_dequantized(params.scale as f64)?;
    let mut dcase = DeviceVarlenCase::upload(stream, &host)?;
    let mut pcase = match paged {
        Some(page_size) => Some(DevicePagedVarlenCase::upload(
            stream, &host, page_size, case.seed,
        )?),
        None => None,
    };
    let mut rows = Vec::new();
    for spec in specs {
        let opts = CallOptions::default()
            .with_kernel(KernelChoice::Variant(spec.variant))
            .with_check_descales(true);
        let mut push = |run: fp8_sdpa::Result<sdpa_harness::harness::RunOutput>,
                        unchanged: &dyn Fn() -> fp8_sdpa::Result<bool>,
                        page: Option<usize>|
         -> fp8_sdpa::Result<()> {
            let (verdict, failures) = match run {
                Ok(out) => {
                    // No seeds' gate: rows of short sequences see few keys (see
                    // seeds_gate_applies).
                    let v = judge(case.precision, &out, &ref_deq, None, false, unchanged()?)?;
                    (Some(v.clone()), v.failures)
                }
                Err(e) => (None, vec![format!("run failed: {e}")]),
            };
            if !failures.is_empty() {
                bar.println(format!(
                    "FAIL {} varlen{} {:?}: {}",
                    spec.key(),
                    page.map_or(String::new(), |p| format!(" paged ({p}-token pages)")),
                    case.shape.cu_seqlens_q,
                    failures.join("; ")
                ));
            }
            rows.push(Row {
                spec: spec.key(),
                case: case.launch_case(),
                varlen: Some(case.clone()),
                paged: page,
                verdict,
                failures,
            });
            bar.inc(1);
            Ok(())
        };
        let run = dcase.run(dev, stream, &host, params, opts);
        push(run, &|| dcase.inputs_unchanged(stream, &host), None)?;
        if let Some(p) = pcase
            .as_mut()
            .filter(|_| spec.variant.family == Family::Decode)
        {
            let run = p.run(dev, stream, &host, params, opts);
            push(run, &|| p.inputs_unchanged(stream, &host), paged)?;
        }
    }
    Ok(rows)
}

fn summarize(runs: &[Row]) -> Vec<SpecSummary> {
    let mut m: BTreeMap<String, SpecSummary> = BTreeMap::new();
    for r in runs {
        let e = m.entry(r.spec.clone()).or_insert(SpecSummary {
            spec: r.spec.clone(),
            runs: 0,
            failed: 0,
            worst_rel_l2: 0.0,
            worst_max_abs: 0.0,
            worst_seeds_mean: None,
            worst_seeds_max: None,
            worst_raw_max_any: None,
        });
        e.runs += 1;
        if !r.failures.is_empty() {
            e.failed += 1;
        }
        if let Some(v) = &r.verdict {
            e.worst_rel_l2 = e.worst_rel_l2.max(v.vs_dequantized.rel_l2);
            e.worst_max_abs = e.worst_max_abs.max(v.vs_dequantized.max_abs);
            if let Some(s) = &v.vs_raw {
                e.worst_raw_max_any = Some(e.worst_raw_max_any.unwrap_or(0.0).max(s.max_abs));
                if seeds_gate_applies(&r.case) {
                    e.worst_seeds_mean = Some(e.worst_seeds_mean.unwrap_or(0.0).max(s.mean_abs));
                    e.worst_seeds_max = Some(e.worst_seeds_max.unwrap_or(0.0).max(s.max_abs));
                }
            }
        }
    }
    m.into_values().collect()
}

/// Prints the summary tables.
pub fn print(r: &Report) {
    for c in &r.codec {
        println!(
            "{:<4} {} ({} cases, {} mismatches){}",
            if c.passed() { "ok" } else { "FAIL" },
            c.name,
            c.cases,
            c.mismatches,
            if c.examples.is_empty() {
                String::new()
            } else {
                format!(": {}", c.examples.join("; "))
            }
        );
    }
    let w = r
        .summary
        .iter()
        .map(|s| s.spec.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "\n{:<w$}  {:>5} {:>6}  {:>10} {:>10}  {:>11} {:>10}",
        "spec", "runs", "failed", "rel_l2", "max_abs", "seeds mean", "seeds max"
    );
    for s in &r.summary {
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
        println!(
            "{:<w$}  {:>5} {:>6}  {:>10.2e} {:>10.2e}  {:>11} {:>10}",
            s.spec,
            s.runs,
            s.failed,
            s.worst_rel_l2,
            s.worst_max_abs,
            opt(s.worst_seeds_mean),
            opt(s.worst_seeds_max)
        );
    }
    let runs = r.runs.len();
    let failed = r.runs.iter().filter(|x| !x.failures.is_empty()).count();
    println!("\nverify: {} passed, {} failed", runs - failed, failed);
}

/// Runs the command.
pub fn run(a: Args) -> fp8_sdpa::Result<ExitCode> {
    let report = verify(&a)?;
    print(&report);
    let text = serde_json::to_string_pretty(&report).expect("report serializes");
    std::fs::write(&a.json, text).map_err(fp8_sdpa::Error::io(&a.json))?;
    eprintln!("wrote {}", a.json.display());
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
