//! `sdpa-lab bench`: robust timings of our kernels, with the ceilings and (with `--peers`)
//! PyTorch's SDPA backends measured in the same run under the same protocol.

use crate::bench::record::{
    read_peer_rows, write_peer_cases, BenchRow, BenchWriter, Correctness, PeerCase, IMPL_OURS,
};
use crate::bench::stats::Stats;
use crate::bench::suites::{cases, BenchCase, Suite, TimingMode};
use crate::timing::{time_runs, Flusher, Protocol};
use cudarc::driver::{CudaSlice, CudaStream};
use fp8_sdpa::runtime::{
    Attention, CallOptions, Descale, Device, IdxRef, KernelChoice, PagedAttention, PagedKv,
    TensorMut, TensorRef, VecRef,
};
use fp8_sdpa::{dispatch, AttnParams, DType, Error, KernelSpec, Layout, Result, Variant};
use indicatif::{ProgressBar, ProgressStyle};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;
use sdpa_harness::metrics::Thresholds;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Which bench cases and variants run (shared by `bench` and `profile`).
#[derive(clap::Args, Clone)]
pub struct Selection {
    /// Suites, comma separated: mission, fa, decode, fp8, all.
    #[arg(long, default_value = "mission")]
    pub suite: String,
    /// Fewer sequence lengths in the fa and fp8 grids.
    #[arg(long)]
    pub quick: bool,
    /// Only cases whose name contains this text (e.g. `d128`, `s4k`).
    #[arg(long)]
    pub filter: Option<String>,
    /// Only these precision paths, comma separated (f16, bf16, fp8kv_f16, fp8kv_bf16, fp8, simfp8).
    #[arg(long)]
    pub precision: Option<String>,
    /// Variant keys to run (repeatable); default: the shipped default per case.
    #[arg(long)]
    pub variant: Vec<String>,
}

/// Arguments of `bench`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// The cases and variants.
    #[command(flatten)]
    pub select: Selection,
    /// Timing mode for every case (default: each case's suggested mode).
    #[arg(long)]
    pub mode: Option<TimingMode>,
    /// Also time PyTorch's SDPA backends (flash, cuDNN, efficient) on the same shapes,
    /// FlashAttention-3 where its Python interface imports (its FP8 forward on the fp8 rows),
    /// cuDNN's FP8 SDPA on the fp8 rows where the `cudnn` frontend imports, and FlashInfer's
    /// paged decode on the Sq 1 decode rows where `flashinfer` imports (rows say so when a
    /// peer is missing).
    #[arg(long)]
    pub peers: bool,
    /// The peers script.
    #[arg(long, default_value = "scripts/peers.py")]
    pub peers_script: PathBuf,
    /// Timed runs per row (at least 100 by the protocol).
    #[arg(long, default_value_t = 100)]
    pub iters: usize,
    /// Output JSON.
    #[arg(long, default_value = "bench.json")]
    pub out: PathBuf,
    /// Skip the ceiling measurements.
    #[arg(long)]
    pub no_ceilings: bool,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

/// Device inputs of one case: `sets` copies of Q, K, V (hot mode rotates them), descales,
/// one output; for a paged case K and V of every set are page pools in a shuffled order, read
/// through `paged`'s block table.
struct Inputs {
    sets: Vec<[CudaSlice<u8>; 3]>,
    descales: [Option<CudaSlice<f32>>; 3],
    o: CudaSlice<u8>,
    paged: Option<PagedTable>,
}

/// The block table of a paged case: sequence b's page j is pool page `table[b][j]`.
struct PagedTable {
    table: CudaSlice<i32>,
    lens: CudaSlice<i32>,
    max_pages: usize,
    page_size: usize,
}

/// Fills `n` elements of `dtype` from a fixed normal pattern (never zeros: speed depends on
/// the bits). FP8 codes are the pattern scaled by 16 and encoded, so the descale is 1/16.
/// In parallel: the decode suite's caches reach 2^30 elements.
fn pattern_bytes(dtype: DType, n: usize, salt: u64) -> Result<Vec<u8>> {
    const CHUNK: usize = 1 << 16;
    let base = sdpa_harness::inputs::generate(
        salt,
        1 << 16,
        64,
        sdpa_harness::inputs::Distribution::Normal,
    );
    let size = dtype.size();
    let mut out = vec![0u8; n * size];
    out.par_chunks_mut(CHUNK * size)
        .enumerate()
        .try_for_each(|(c, bytes)| -> Result<()> {
            let vals: Vec<f32> = (c * CHUNK..c * CHUNK + bytes.len() / size)
                .map(|i| base[(i * 7 + salt as usize) % base.len()])
                .collect();
            let enc: Vec<u8> = match dtype {
                DType::E4m3 => vals
                    .iter()
                    .map(|&x| fp8_sdpa::fp8::e4m3::encode_f32(x * 16.0))
                    .collect(),
                DType::SimFp8 => vals
                    .iter()
                    .map(|&x| fp8_sdpa::fp8::simfp8::encode(x, 1.0 / 16.0))
                    .collect(),
                _ => sdpa_harness::inputs::to_bytes(dtype, &vals)?,
            };
            bytes.copy_from_slice(&enc);
            Ok(())
        })?;
    Ok(out)
}

/// A shuffled page order (fixed seed): `perm[c]` is the pool page that holds contiguous page
/// `c` (sequence `c / pages_per_seq`, page `c % pages_per_seq`), so consecutive pages of a
/// sequence are scattered over the pool as in a serving cache.
fn page_order(pages: usize) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..pages).collect();
    perm.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0x9a9e));
    perm
}

/// Moves contiguous K/V pages to their pool slots (`page_bytes` each).
fn scatter_pages(contiguous: &[u8], perm: &[usize], page_bytes: usize) -> Vec<u8> {
    let mut pool = vec![0u8; contiguous.len()];
    let mut slots: Vec<(usize, &mut [u8])> = pool.chunks_mut(page_bytes).enumerate().collect();
    // Slot s receives the contiguous page c with perm[c] == s.
    let mut inverse = vec![0usize; perm.len()];
    for (c, &s) in perm.iter().enumerate() {
        inverse[s] = c;
    }
    slots.par_iter_mut().for_each(|(s, dst)| {
        let c = inverse[*s];
        dst.copy_from_slice(&contiguous[c * page_bytes..(c + 1) * page_bytes]);
    });
    pool
}

/// A case's Q, K and V on the host (contiguous), filled once per timed variant.
struct HostInputs {
    q: Vec<u8>,
    k: Vec<u8>,
    v: Vec<u8>,
}

impl HostInputs {
    fn of(case: &BenchCase) -> Result<HostInputs> {
        let (s, p) = (&case.shape, case.precision);
        Ok(HostInputs {
            q: pattern_bytes(p.q(), s.q_len(), 1)?,
            k: pattern_bytes(p.kv(), s.kv_len(), 2)?,
            v: pattern_bytes(p.kv(), s.kv_len(), 3)?,
        })
    }
}

/// Uploads `sets` copies of the case's inputs. `paged` (a paged case's page size) stores K and
/// V as shuffled page pools with their block table; `None` keeps them contiguous (the
/// reference kernel reads those).
fn upload(
    stream: &Arc<CudaStream>,
    case: &BenchCase,
    host: &HostInputs,
    sets: usize,
    paged: Option<usize>,
) -> Result<Inputs> {
    let s = &case.shape;
    let p = case.precision;
    let drv = |c: &'static str| Error::driver(c);
    let q = &host.q;
    let (mut k, mut v) = (
        std::borrow::Cow::from(&host.k),
        std::borrow::Cow::from(&host.v),
    );
    let mut table = None;
    if let Some(page_size) = paged {
        if page_size == 0 || !s.seq_kv.is_multiple_of(page_size) {
            return Err(Error::InvalidInput(format!(
                "paged bench case {}: Skv {} is not a multiple of the page size {page_size}",
                case.name, s.seq_kv
            )));
        }
        let max_pages = s.seq_kv / page_size;
        let perm = page_order(s.batch * max_pages);
        let page_bytes = page_size * s.heads_kv * s.head_dim * p.kv().size();
        k = scatter_pages(&host.k, &perm, page_bytes).into();
        v = scatter_pages(&host.v, &perm, page_bytes).into();
        let t: Vec<i32> = perm.iter().map(|&x| x as i32).collect();
        table = Some(PagedTable {
            table: stream
                .clone_htod(&t)
                .map_err(drv("uploading the block table"))?,
            lens: stream
                .clone_htod(&vec![s.seq_kv as i32; s.batch])
                .map_err(drv("uploading seqlens_k"))?,
            max_pages,
            page_size,
        });
    }
    let mut out = Vec::new();
    for _ in 0..sets {
        out.push([
            stream.clone_htod(q).map_err(drv("uploading Q"))?,
            stream.clone_htod(k.as_ref()).map_err(drv("uploading K"))?,
            stream.clone_htod(v.as_ref()).map_err(drv("uploading V"))?,
        ]);
    }
    let ds = |t: DType, heads: usize| -> Result<Option<CudaSlice<f32>>> {
        Ok(if t.is_scaled() {
            Some(
                stream
                    .clone_htod(&vec![1.0f32 / 16.0; heads])
                    .map_err(drv("uploading descales"))?,
            )
        } else {
            None
        })
    };
    let descales = [
        ds(p.q(), s.heads_q)?,
        ds(p.kv(), s.heads_kv)?,
        ds(p.kv(), s.heads_kv)?,
    ];
    let o = stream
        .alloc_zeros::<u8>(s.q_len() * p.out().size())
        .map_err(drv("allocating O"))?;
    Ok(Inputs {
        sets: out,
        descales,
        o,
        paged: table,
    })
}

fn launch(
    dev: &Device,
    stream: &Arc<CudaStream>,
    case: &BenchCase,
    inp: &mut Inputs,
    set: usize,
    kernel: KernelChoice,
    check: bool,
) -> Result<()> {
    let s = &case.shape;
    let p = case.precision;
    let st: &CudaStream = stream;
    let qd = [s.batch, s.seq_q, s.heads_q, s.head_dim];
    let kd = [s.batch, s.seq_kv, s.heads_kv, s.head_dim];
    let [q, k, v] = &inp.sets[set % inp.sets.len()];
    let d = |i: usize| {
        inp.descales[i]
            .as_ref()
            .map(|x| Descale::new(VecRef::new(x, st), 0))
    };
    let opts = CallOptions::default()
        .with_kernel(kernel)
        .with_check_descales(check);
    if let Some(t) = &inp.paged {
        let pages = s.batch * t.max_pages;
        let pd = [pages, t.page_size, s.heads_kv, s.head_dim];
        let a = PagedAttention::new(
            TensorRef::contiguous(q, st, p.q(), qd, Layout::Bshd)?,
            PagedKv::new(
                TensorRef::contiguous(k, st, p.kv(), pd, Layout::Bshd)?,
                TensorRef::contiguous(v, st, p.kv(), pd, Layout::Bshd)?,
                IdxRef::new(&t.table, st),
                t.max_pages,
                IdxRef::new(&t.lens, st),
            ),
            TensorMut::contiguous(&mut inp.o, st, p.out(), qd, Layout::Bshd)?,
            AttnParams::default_for(s.head_dim, case.causal),
        )
        .with_kv_descales(d(1), d(2));
        dev.paged_attention(stream, &a, opts)?;
        return Ok(());
    }
    let a = Attention::new(
        TensorRef::contiguous(q, st, p.q(), qd, Layout::Bshd)?,
        TensorRef::contiguous(k, st, p.kv(), kd, Layout::Bshd)?,
        TensorRef::contiguous(v, st, p.kv(), kd, Layout::Bshd)?,
        TensorMut::contiguous(&mut inp.o, st, p.out(), qd, Layout::Bshd)?,
        AttnParams::default_for(s.head_dim, case.causal),
    )
    .with_descales(d(0), d(1), d(2));
    dev.attention(stream, &a, opts)?;
    Ok(())
}

/// Output of the GPU reference kernel (fp32 math, verified against the CPU reference) on
/// set 0 of the inputs, as f32.
fn reference_out(
    dev: &Device,
    stream: &Arc<CudaStream>,
    case: &BenchCase,
    inp: &mut Inputs,
) -> Result<Vec<f32>> {
    launch(
        dev,
        stream,
        case,
        inp,
        0,
        KernelChoice::Variant(Variant::reference()),
        true,
    )?;
    read_out(stream, case, inp)
}

fn read_out(stream: &Arc<CudaStream>, case: &BenchCase, inp: &Inputs) -> Result<Vec<f32>> {
    stream.synchronize().map_err(Error::driver("running"))?;
    let bytes = stream
        .clone_dtoh(&inp.o)
        .map_err(Error::driver("reading O"))?;
    Ok(sdpa_harness::harness::decode_out(
        case.precision.out(),
        &bytes,
    ))
}

/// Times one variant on one case; the row carries stats and correctness against the GPU
/// reference kernel.
pub(crate) fn bench_one(
    dev: &Device,
    stream: &Arc<CudaStream>,
    case: &BenchCase,
    mode: TimingMode,
    variant: Variant,
    iters: usize,
    flusher: &mut Flusher,
) -> BenchRow {
    let row = BenchRow::new(case, IMPL_OURS, &variant.key(), mode);
    let spec = fp8_sdpa::KernelSpec {
        variant,
        precision: case.precision,
        head_dim: case.shape.head_dim as u32,
        causal: case.causal,
    };
    if let Err(e) = spec.validate(dev.info().arch) {
        return row.skipped(e.to_string());
    }
    let mut run = || -> Result<BenchRow> {
        let in_bytes = case.shape.q_len() * case.precision.q().size()
            + 2 * case.shape.kv_len() * case.precision.kv().size();
        let sets = if mode == TimingMode::Hot {
            ((2 * dev.info().l2_bytes as usize) / in_bytes.max(1) + 2).min(64)
        } else {
            1
        };
        // The reference kernel reads contiguous K/V; a paged case then gets its pools, from
        // the same host inputs.
        let host = HostInputs::of(case)?;
        let mut inp = upload(
            stream,
            case,
            &host,
            if case.page_size.is_some() { 1 } else { sets },
            None,
        )?;
        let reference = reference_out(dev, stream, case, &mut inp)?;
        if case.page_size.is_some() {
            drop(inp);
            inp = upload(stream, case, &host, sets, case.page_size)?;
        }
        let kernel = KernelChoice::Variant(variant);
        launch(dev, stream, case, &mut inp, 0, kernel, true)?;
        let got = read_out(stream, case, &inp)?;
        let t = Thresholds::for_kernel(&KernelSpec {
            variant,
            precision: case.precision,
            head_dim: case.shape.head_dim as u32,
            causal: case.causal,
        });
        let e = t.compare(
            &got,
            &reference.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        )?;
        let passed = t.check(&e).is_ok();
        let proto = Protocol {
            warmup: 10,
            iters: iters.max(100),
            budget_s: 5.0,
            per_graph: crate::bench::suites::GRAPH_CALLS,
        };
        let times = time_runs(stream, mode, proto, Some(flusher), |i| {
            launch(dev, stream, case, &mut inp, i, kernel, false)
        })?;
        let mut row = row.clone();
        row.stats =
            Some(Stats::from_samples(&times).map_err(|e| Error::Unsupported(format!("{e:?}")))?);
        row.correctness = Some(Correctness {
            max_abs: e.max_abs,
            rel_l2: e.rel_l2,
            passed,
        });
        if !passed {
            row = row.failed(format!(
                "output differs from the GPU reference: {}",
                t.check(&e).unwrap_err()
            ));
        }
        Ok(row)
    };
    run().unwrap_or_else(|e| row.clone().failed(e.to_string()))
}

/// Runs the benchmark; returns the path written and whether every row ran correct.
pub fn bench(a: &Args, manifest: serde_json::Value) -> Result<(PathBuf, bool)> {
    let suites = Suite::parse_list(&a.select.suite).map_err(Error::InvalidInput)?;
    let variants: Vec<Variant> = a
        .select
        .variant
        .iter()
        .map(|k| k.parse())
        .collect::<Result<_>>()?;
    let dev = crate::cmd::env::open_device(a.device)
        .map_err(|e| Error::Unsupported(format!("bench needs a GPU: {e}")))?;
    // One stream, no cross-stream hazards; cudarc's per-use events would land in graphs.
    // SAFETY: nothing else uses this context concurrently.
    unsafe { dev.context().disable_event_tracking() };
    let stream = dev.new_stream()?;
    let (ceilings, notes) = if a.no_ceilings {
        (
            Vec::new(),
            vec!["ceilings not measured (--no-ceilings)".to_string()],
        )
    } else {
        crate::ceilings::measure(&stream)
    };
    let mut writer = BenchWriter::create(&a.out, manifest, ceilings.clone())
        .map_err(|e| Error::InvalidInput(format!("{e}")))?;
    for n in notes {
        writer
            .note(n)
            .map_err(|e| Error::InvalidInput(format!("{e}")))?;
    }
    let all: Vec<BenchCase> = suites
        .iter()
        .flat_map(|s| cases(*s, a.select.quick))
        .filter(|c| {
            a.select
                .filter
                .as_ref()
                .is_none_or(|f| c.name.contains(f.as_str()))
        })
        .filter(|c| {
            a.select
                .precision
                .as_ref()
                .is_none_or(|p| p.split(',').any(|p| p.trim() == c.precision.name()))
        })
        .collect();
    if all.is_empty() {
        return Err(Error::InvalidInput(
            "no bench case matches the suite, --filter and --precision given".into(),
        ));
    }
    let mut flusher = Flusher::new(&stream, dev.info().l2_bytes)?;
    let bar = ProgressBar::new(all.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "bench {bar:40} {pos}/{len} cases, {elapsed} ({eta} left) {msg}",
        )
        .expect("template"),
    );
    let mut all_ok = true;
    for case in &all {
        bar.set_message(format!("{}/{} {}", case.suite, case.name, case.precision));
        let mode = a.mode.unwrap_or(case.mode);
        let vs = if variants.is_empty() {
            vec![if case.page_size.is_some() {
                dispatch::choose_paged(
                    dev.info().arch,
                    case.precision,
                    &case.shape,
                    dev.info().sm_count,
                )?
            } else {
                dispatch::choose(
                    dev.info().arch,
                    case.precision,
                    &case.shape,
                    case.causal,
                    dev.info().sm_count,
                )?
            }]
        } else {
            variants.clone()
        };
        for v in vs {
            let mut row = bench_one(&dev, &stream, case, mode, v, a.iters, &mut flusher);
            row.fill_derived(&ceilings);
            all_ok &= row.status == "ok";
            writer
                .push(row)
                .map_err(|e| Error::InvalidInput(format!("{e}")))?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if a.peers {
        match crate::manifest::torch_version() {
            Err(why) => writer
                .note(format!("peers not measured: {why}"))
                .map_err(|e| Error::InvalidInput(format!("{e}")))?,
            Ok(_) if !a.peers_script.exists() => writer
                .note(format!(
                    "peers not measured: {} not found (run from the repository root)",
                    a.peers_script.display()
                ))
                .map_err(|e| Error::InvalidInput(format!("{e}")))?,
            Ok(_) => {
                let dir = a.out.with_extension("peers");
                std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
                let cases_path = dir.join("cases.json");
                let out_path = dir.join("rows.json");
                let peer_cases: Vec<PeerCase> = all
                    .iter()
                    .map(|c| PeerCase::from_case(c, a.mode.unwrap_or(c.mode), 10, a.iters.max(100)))
                    .collect();
                write_peer_cases(&cases_path, &peer_cases)
                    .map_err(|e| Error::InvalidInput(format!("{e}")))?;
                eprintln!(
                    "peers: timing PyTorch SDPA backends on {} cases ...",
                    peer_cases.len()
                );
                let status = std::process::Command::new("python3")
                    .arg(&a.peers_script)
                    .args([
                        "--cases",
                        cases_path.to_str().unwrap_or_default(),
                        "--out",
                        out_path.to_str().unwrap_or_default(),
                    ])
                    .status()
                    .map_err(Error::io(&a.peers_script))?;
                if status.success() {
                    let rows = read_peer_rows(&out_path, &ceilings)
                        .map_err(|e| Error::InvalidInput(format!("{e}")))?;
                    writer
                        .extend(rows)
                        .map_err(|e| Error::InvalidInput(format!("{e}")))?;
                } else {
                    writer
                        .note(format!(
                            "peers script failed ({status}); see its output above"
                        ))
                        .map_err(|e| Error::InvalidInput(format!("{e}")))?;
                    all_ok = false;
                }
            }
        }
    }
    let file = writer.finish();
    print_table(&file.rows);
    Ok((a.out.clone(), all_ok))
}

fn print_table(rows: &[BenchRow]) {
    println!(
        "{:<8} {:<22} {:<10} {:<40} {:>10} {:>8} {:>7}  status",
        "suite", "case", "precision", "implementation", "p50 us", "TFLOPS", "%ceil"
    );
    for r in rows {
        let f = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        println!(
            "{:<8} {:<22} {:<10} {:<40} {:>10} {:>8} {:>7}  {}",
            r.suite,
            r.case,
            r.precision.name(),
            format!("{}:{}", r.implementation, r.backend),
            f(r.median_us(), 1),
            f(r.tflops, 1),
            f(r.pct_of_ceiling, 1),
            r.status
        );
    }
}

/// Runs the command.
pub fn run(a: Args) -> Result<ExitCode> {
    let dev_for_manifest = crate::cmd::env::open_device(a.device);
    let manifest = serde_json::to_value(crate::manifest::Manifest::take(
        dev_for_manifest.as_ref().map_err(|e| e.clone()),
    ))
    .expect("manifest serializes");
    drop(dev_for_manifest);
    let (path, ok) = bench(&a, manifest)?;
    eprintln!("wrote {}", path.display());
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scattered_pages_gather_back_through_the_table() {
        let (pages, page_bytes) = (37, 24);
        let contiguous: Vec<u8> = (0..pages * page_bytes)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let perm = page_order(pages);
        let mut sorted = perm.clone();
        sorted.sort();
        assert_eq!(sorted, (0..pages).collect::<Vec<_>>(), "a permutation");
        assert_ne!(perm, sorted, "actually shuffled");
        let pool = scatter_pages(&contiguous, &perm, page_bytes);
        for (c, &slot) in perm.iter().enumerate() {
            assert_eq!(
                pool[slot * page_bytes..(slot + 1) * page_bytes],
                contiguous[c * page_bytes..(c + 1) * page_bytes]
            );
        }
    }

    #[test]
    fn parallel_pattern_matches_the_sequential_definition() {
        let base = sdpa_harness::inputs::generate(
            5,
            1 << 16,
            64,
            sdpa_harness::inputs::Distribution::Normal,
        );
        let n = (1 << 16) * 2 + 123; // crosses chunk boundaries
        let got = pattern_bytes(DType::F16, n, 5).unwrap();
        let vals: Vec<f32> = (0..n).map(|i| base[(i * 7 + 5) % base.len()]).collect();
        assert_eq!(
            got,
            sdpa_harness::inputs::to_bytes(DType::F16, &vals).unwrap()
        );
        let e = pattern_bytes(DType::E4m3, 1000, 5).unwrap();
        assert_eq!(
            e[999],
            fp8_sdpa::fp8::e4m3::encode_f32(base[(999 * 7 + 5) % base.len()] * 16.0)
        );
    }
}
