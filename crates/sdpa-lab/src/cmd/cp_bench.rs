//! `sdpa-lab cp-bench --ranks N`: context-parallel attention over N GPUs (one process each,
//! NCCL), checked against the single-GPU kernel on the same inputs and timed against it.
//! The parent starts the ranks with NVLink multicast off (NCCL_NVLS_ENABLE=0 and friends)
//! and gathers their reports; each rank runs the ring (`fp8_sdpa::cp::ring`) on its two
//! zig-zag chunks and the single-GPU attention on the whole sequence on its own GPU.

use cudarc::driver::CudaSlice;
use cudarc::nccl::safe::Id;
use fp8_sdpa::cp::comm::Communicator;
use fp8_sdpa::cp::plan::chunks_of;
use fp8_sdpa::cp::ring::{Local, Ring};
use fp8_sdpa::runtime::{Attention, CallOptions, Descale, Device, TensorMut, TensorRef, VecRef};
use fp8_sdpa::{AttnParams, DType, Error, Layout, Precision, Result};
use sdpa_harness::inputs::{self, Distribution};
use sdpa_harness::metrics::Thresholds;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The environment every rank runs with: NVLink multicast (NVLS) stays off (see the device
/// machines' notes: a program using it can take a shared host's GPUs out of service).
pub const NO_MULTICAST: [(&str, &str); 3] = [
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
];

/// Arguments of `cp-bench`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Ranks (GPUs), one process each.
    #[arg(long, default_value_t = 2)]
    pub ranks: usize,
    /// Total sequence length (a multiple of 2 x ranks).
    #[arg(long, default_value_t = 131072)]
    pub seq: usize,
    /// Batch.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Query heads.
    #[arg(long, default_value_t = 16)]
    pub heads: usize,
    /// Key/value heads.
    #[arg(long, default_value_t = 16)]
    pub heads_kv: usize,
    /// Head dim.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Causal (bottom-right; Sq = Skv here).
    #[arg(long)]
    pub causal: bool,
    /// K/V as E4M3 (shards travel as 8-bit codes).
    #[arg(long)]
    pub fp8_kv: bool,
    /// SMs each attention call leaves to NCCL's transfer kernels (see `CallOptions::sm_margin`).
    #[arg(long, default_value_t = fp8_sdpa::cp::ring::DEFAULT_SM_MARGIN)]
    pub sm_margin: u32,
    /// Timed ring passes (after one warm-up).
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// Where the report goes.
    #[arg(long, default_value = "artifacts/cp-bench")]
    pub out: PathBuf,
    /// Internal: run as this rank (set by the parent).
    #[arg(long, hide = true)]
    pub rank: Option<usize>,
    /// Internal: the file through which rank 0 hands out the NCCL id.
    #[arg(long, hide = true)]
    pub id_file: Option<PathBuf>,
}

/// One rank's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankReport {
    /// Rank.
    pub rank: usize,
    /// GPU name.
    pub device: String,
    /// Median ring pass, ms.
    pub cp_ms: f64,
    /// Median single-GPU attention over the whole sequence, ms.
    pub single_ms: f64,
    /// Relative L2 error of this rank's rows against the single-GPU output.
    pub rel_l2: f64,
    /// Max absolute error.
    pub max_abs: f64,
    /// Whether the rows pass the precision's thresholds against the single-GPU output.
    pub passed: bool,
    /// Bytes this rank sent per pass.
    pub bytes_sent: usize,
}

fn precision(a: &Args) -> Precision {
    if a.fp8_kv {
        Precision::Fp8KvBf16
    } else {
        Precision::Bf16
    }
}

/// Runs `cp-bench`: the parent when `--rank` is absent.
pub fn run(a: Args) -> Result<ExitCode> {
    if a.ranks == 0 || !a.seq.is_multiple_of(2 * a.ranks) {
        return Err(Error::InvalidInput(format!(
            "--seq {} must be a positive multiple of 2 x ranks ({})",
            a.seq,
            2 * a.ranks
        )));
    }
    match a.rank {
        Some(r) => rank_main(&a, r),
        None => parent(&a),
    }
}

fn parent(a: &Args) -> Result<ExitCode> {
    let n = fp8_sdpa::runtime::Device::count();
    if n < a.ranks {
        return Err(Error::Unsupported(format!(
            "cp-bench --ranks {} needs {} GPUs; this machine has {n}",
            a.ranks, a.ranks
        )));
    }
    std::fs::create_dir_all(&a.out).map_err(Error::io(&a.out))?;
    let ld_path = nccl_link_dir(&a.out)?;
    let id_file = a.out.join("nccl.id");
    let _ = std::fs::remove_file(&id_file);
    let exe = std::env::current_exe().map_err(Error::io("current executable"))?;
    let mut children = Vec::new();
    for r in 0..a.ranks {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("cp-bench")
            .args(["--ranks", &a.ranks.to_string(), "--seq", &a.seq.to_string()])
            .args([
                "--batch",
                &a.batch.to_string(),
                "--heads",
                &a.heads.to_string(),
            ])
            .args([
                "--heads-kv",
                &a.heads_kv.to_string(),
                "--dim",
                &a.dim.to_string(),
            ])
            .args(["--iters", &a.iters.to_string(), "--rank", &r.to_string()])
            .args(["--sm-margin", &a.sm_margin.to_string()])
            .arg("--id-file")
            .arg(&id_file)
            .arg("--out")
            .arg(&a.out)
            .envs(NO_MULTICAST)
            .env("LD_LIBRARY_PATH", &ld_path);
        if a.causal {
            cmd.arg("--causal");
        }
        if a.fp8_kv {
            cmd.arg("--fp8-kv");
        }
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                for c in &mut children {
                    let _ = c.kill();
                }
                return Err(Error::io(&exe)(e));
            }
        }
    }
    // One rank failing leaves the others waiting in NCCL forever: on the first failure (or
    // after an hour) the rest are stopped.
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut done = vec![false; children.len()];
    let mut ok = true;
    while ok && done.iter().any(|d| !d) {
        for (r, c) in children.iter_mut().enumerate() {
            if done[r] {
                continue;
            }
            if let Some(status) = c.try_wait().map_err(Error::io(&exe))? {
                done[r] = true;
                if !status.success() {
                    eprintln!("rank {r} failed: {status}; stopping the others");
                    ok = false;
                }
            }
        }
        if Instant::now() > deadline {
            eprintln!("cp-bench: the ranks ran past an hour; stopping them");
            ok = false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !ok {
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        return Ok(ExitCode::FAILURE);
    }
    let mut reports = Vec::new();
    for r in 0..a.ranks {
        let p = a.out.join(format!("rank{r}.json"));
        let text = std::fs::read_to_string(&p).map_err(Error::io(&p))?;
        let rep: RankReport = serde_json::from_str(&text)
            .map_err(|e| Error::InvalidInput(format!("{}: {e}", p.display())))?;
        reports.push(rep);
    }
    let cp = reports.iter().map(|r| r.cp_ms).fold(0.0, f64::max);
    let single = reports.iter().map(|r| r.single_ms).sum::<f64>() / reports.len() as f64;
    let eff = single / (a.ranks as f64 * cp);
    let passed = reports.iter().all(|r| r.passed);
    let summary = serde_json::json!({
        "ranks": a.ranks, "seq": a.seq, "batch": a.batch, "heads": a.heads, "heads_kv": a.heads_kv,
        "dim": a.dim, "causal": a.causal, "precision": precision(a).name(), "sm_margin": a.sm_margin,
        "cp_ms": cp, "single_ms": single, "scaling_efficiency": eff,
        "bytes_sent_per_rank": reports[0].bytes_sent, "passed": passed, "ranks_detail": reports,
        "environment": NO_MULTICAST.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
    });
    let p = a.out.join("cp_bench.json");
    std::fs::write(&p, serde_json::to_string_pretty(&summary).expect("json"))
        .map_err(Error::io(&p))?;
    println!(
        "{} ranks, S {} {}{}, SM margin {}: ring {cp:.2} ms, one GPU {single:.2} ms, scaling efficiency {:.1} %, {:.1} MB sent per rank, check {}",
        a.ranks,
        a.seq,
        precision(a).name(),
        if a.causal { " causal" } else { "" },
        a.sm_margin,
        eff * 100.0,
        reports[0].bytes_sent as f64 / 1e6,
        if passed { "passed" } else { "FAILED" }
    );
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `LD_LIBRARY_PATH` for the ranks: a folder in `out` with `libnccl.so` linked to the
/// `libnccl.so.2` of `$SDPA_NCCL_PATH` (the file or its folder) or of PyTorch's
/// `nvidia-nccl-cu13` package, before the inherited path. cudarc opens NCCL by the bare name
/// `libnccl.so`, which the pip package does not ship.
fn nccl_link_dir(out: &std::path::Path) -> Result<std::ffi::OsString> {
    let mut found: Option<PathBuf> = None;
    if let Some(p) = std::env::var_os("SDPA_NCCL_PATH").map(PathBuf::from) {
        found = Some(if p.is_dir() {
            p.join("libnccl.so.2")
        } else {
            p
        });
    } else if let Ok(o) = std::process::Command::new("python3")
        .args([
            "-c",
            "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])",
        ])
        .output()
    {
        let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && !dir.is_empty() {
            found = Some(PathBuf::from(dir).join("lib").join("libnccl.so.2"));
        }
    }
    let inherited = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    let Some(lib) = found.filter(|p| p.exists()) else {
        eprintln!("note: no libnccl.so.2 found (SDPA_NCCL_PATH, python3's nvidia.nccl); the ranks use the loader path");
        return Ok(inherited);
    };
    let dir = out.join("nccl-lib");
    std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    let link = dir.join("libnccl.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&lib, &link).map_err(Error::io(&link))?;
    let mut path = dir
        .canonicalize()
        .map_err(Error::io(&dir))?
        .into_os_string();
    if !inherited.is_empty() {
        path.push(":");
        path.push(inherited);
    }
    Ok(path)
}

/// Rank 0 creates the NCCL id and publishes it (write then rename); the others wait for it.
fn nccl_id(rank: usize, file: &PathBuf) -> Result<Id> {
    fp8_sdpa::libs::ensure_nccl()?;
    if rank == 0 {
        let id = Id::new().map_err(|e| Error::Unsupported(format!("NCCL id: {e:?}")))?;
        let bytes: Vec<u8> = id.internal().iter().map(|&c| c as u8).collect();
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, &bytes).map_err(Error::io(&tmp))?;
        std::fs::rename(&tmp, file).map_err(Error::io(file))?;
        return Ok(id);
    }
    let t0 = Instant::now();
    loop {
        if let Ok(b) = std::fs::read(file) {
            if b.len() == 128 {
                let mut raw = [0 as std::ffi::c_char; 128];
                for (d, s) in raw.iter_mut().zip(&b) {
                    *d = *s as std::ffi::c_char;
                }
                return Ok(Id::uninit(raw));
            }
        }
        if t0.elapsed() > Duration::from_secs(120) {
            return Err(Error::Unsupported(format!(
                "no NCCL id at {} after 120 s",
                file.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Token rows `range` of each batch of a BSHD tensor of `seq` tokens and `row` elements per
/// token.
fn rows<T: Copy>(
    x: &[T],
    batch: usize,
    seq: usize,
    row: usize,
    range: std::ops::Range<usize>,
) -> Vec<T> {
    let mut out = Vec::with_capacity(batch * range.len() * row);
    for b in 0..batch {
        out.extend_from_slice(&x[(b * seq + range.start) * row..(b * seq + range.end) * row]);
    }
    out
}

/// A rank's shard `[batch, 2 x chunk, ...]`: per batch, its two zig-zag chunks of `chunk`
/// tokens in order.
fn shard<T: Copy>(
    x: &[T],
    batch: usize,
    seq: usize,
    row: usize,
    chunks: [usize; 2],
    chunk: usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(batch * 2 * chunk * row);
    for b in 0..batch {
        let xb = &x[b * seq * row..(b + 1) * seq * row];
        for k in chunks {
            out.extend(rows(xb, 1, seq, row, k * chunk..(k + 1) * chunk));
        }
    }
    out
}

fn rank_main(a: &Args, r: usize) -> Result<ExitCode> {
    let p = precision(a);
    let dev = Device::open(r)?;
    let stream = dev.new_stream()?;
    // NCCL's transfers on a high-priority stream (`Communicator::init` says why).
    let comm_stream = dev.new_priority_stream()?;
    let id = nccl_id(
        r,
        a.id_file
            .as_ref()
            .ok_or_else(|| Error::InvalidInput("--rank needs --id-file".into()))?,
    )?;
    let comm = Communicator::init(
        comm_stream,
        r,
        a.ranks,
        &id,
        fp8_sdpa::cp::ring::DEFAULT_TIMEOUT,
    )
    .map_err(|e| Error::Unsupported(format!("NCCL init on rank {r}: {e}")))?;
    let (b, s, hq, hkv, d) = (a.batch, a.seq, a.heads, a.heads_kv, a.dim);
    // The same inputs on every rank (seeded), bf16.
    let gen = |seed: u64, heads: usize| -> Result<Vec<u8>> {
        inputs::to_bytes(
            DType::Bf16,
            &inputs::generate(seed, b * s * heads * d, d, Distribution::Normal),
        )
    };
    let (qh, kh, vh) = (gen(1, hq)?, gen(2, hkv)?, gen(3, hkv)?);
    let drv = |w: &'static str| Error::driver(w);
    let q_full = stream.clone_htod(&qh).map_err(drv("uploading Q"))?;
    let mut k_full = stream.clone_htod(&kh).map_err(drv("uploading K"))?;
    let mut v_full = stream.clone_htod(&vh).map_err(drv("uploading V"))?;
    // E4M3 K/V: quantized once over the whole sequence, so every shard shares the descales
    // and the single-GPU run sees the same codes.
    let mut descales: Option<[CudaSlice<f32>; 2]> = None;
    if a.fp8_kv {
        let mut qd = Vec::new();
        for x in [&k_full, &v_full] {
            let t = TensorRef::contiguous(x, &stream, DType::Bf16, [b, s, hkv, d], Layout::Bshd)?;
            let mut codes = stream
                .alloc_zeros::<u8>(b * s * hkv * d)
                .map_err(drv("allocating codes"))?;
            let mut ds = stream
                .alloc_zeros::<f32>(b * hkv)
                .map_err(drv("allocating descales"))?;
            fp8_sdpa::runtime::quantize::quantize_e4m3(&dev, &stream, &t, &mut codes, &mut ds)?;
            drop(t);
            qd.push((codes, ds));
        }
        let (vq, kq) = (qd.pop().expect("two"), qd.pop().expect("two"));
        k_full = kq.0;
        v_full = vq.0;
        descales = Some([kq.1, vq.1]);
    }
    let kv_es = p.kv().size();
    let params = AttnParams::default_for(d, a.causal);
    // The single-GPU run over the whole sequence: the reference and the baseline time.
    let mut o_full = stream
        .alloc_zeros::<u8>(b * s * hq * d * 2)
        .map_err(drv("allocating O"))?;
    let single = |o: &mut CudaSlice<u8>| -> Result<()> {
        let st: &cudarc::driver::CudaStream = &stream;
        let ds = |i: usize| {
            descales
                .as_ref()
                .map(|x| Descale::new(VecRef::new(&x[i], st), hkv))
        };
        let call = Attention::new(
            TensorRef::contiguous(&q_full, st, DType::Bf16, [b, s, hq, d], Layout::Bshd)?,
            TensorRef::contiguous(&k_full, st, p.kv(), [b, s, hkv, d], Layout::Bshd)?,
            TensorRef::contiguous(&v_full, st, p.kv(), [b, s, hkv, d], Layout::Bshd)?,
            TensorMut::contiguous(o, st, DType::Bf16, [b, s, hq, d], Layout::Bshd)?,
            params,
        )
        .with_descales(None, ds(0), ds(1));
        // Descales were checked when they were made; a read-back per call would add two
        // synchronizations to the baseline's time.
        let opts = CallOptions::default().with_check_descales(false);
        dev.attention(&stream, &call, opts).map(|_| ())
    };
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        f()?; // warm-up
        stream.synchronize().map_err(drv("warm-up"))?;
        let mut t = Vec::new();
        for _ in 0..a.iters.max(1) {
            let t0 = Instant::now();
            f()?;
            stream.synchronize().map_err(drv("timing"))?;
            t.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    };
    let single_ms = time(&mut || single(&mut o_full))?;
    // This rank's shard: chunks r and 2P-1-r of Q, K, V.
    let c = s / (2 * a.ranks);
    let mine_chunks = chunks_of(r, a.ranks);
    let take = |x: &[u8], heads: usize, es: usize| shard(x, b, s, heads * d * es, mine_chunks, c);
    let k_all = stream.clone_dtoh(&k_full).map_err(drv("reading K"))?;
    let v_all = stream.clone_dtoh(&v_full).map_err(drv("reading V"))?;
    let q_loc = stream
        .clone_htod(&take(&qh, hq, 2))
        .map_err(drv("uploading the Q shard"))?;
    let k_loc = stream
        .clone_htod(&take(&k_all, hkv, kv_es))
        .map_err(drv("uploading the K shard"))?;
    let v_loc = stream
        .clone_htod(&take(&v_all, hkv, kv_es))
        .map_err(drv("uploading the V shard"))?;
    let local = Local {
        batch: b,
        chunk: c,
        heads_q: hq,
        heads_kv: hkv,
        dim: d,
    };
    let mut ring = Ring::new(comm, &stream, local, p)?;
    ring.set_sm_margin(a.sm_margin);
    let mut o_loc = stream
        .alloc_zeros::<u8>(b * 2 * c * hq * d * 2)
        .map_err(drv("allocating O"))?;
    let ds_refs = descales.as_ref().map(|x| [&x[0], &x[1]]);
    let cp_ms = time(&mut || {
        ring.load(&stream, &k_loc, &v_loc, ds_refs)?;
        ring.run(&dev, &stream, &q_loc, &mut o_loc, params)
    })?;
    // Compare this rank's rows with the single-GPU output's.
    let full = sdpa_harness::harness::decode_out(
        DType::Bf16,
        &stream.clone_dtoh(&o_full).map_err(drv("reading O"))?,
    );
    let mine = sdpa_harness::harness::decode_out(
        DType::Bf16,
        &stream.clone_dtoh(&o_loc).map_err(drv("reading O"))?,
    );
    let want: Vec<f64> = shard(&full, b, s, hq * d, mine_chunks, c)
        .into_iter()
        .map(f64::from)
        .collect();
    let t = Thresholds::for_precision(p);
    let e = t.compare(&mine, &want)?;
    let report = RankReport {
        rank: r,
        device: dev.info().name.clone(),
        cp_ms,
        single_ms,
        rel_l2: e.rel_l2,
        max_abs: e.max_abs,
        passed: t.check(&e).is_ok(),
        bytes_sent: if a.ranks > 1 {
            (a.ranks - 1) * ring.shard_bytes()
        } else {
            0
        },
    };
    let path = a.out.join(format!("rank{r}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json"))
        .map_err(Error::io(&path))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_the_zig_zag_chunks_in_order() {
        // batch 2, seq 8 (P = 2, chunks of 2 tokens), 1 head, dim 1, 1-byte elements.
        let x: Vec<u8> = (0..16).collect();
        let r0 = rows(&x, 2, 8, 1, 2..4);
        assert_eq!(r0, vec![2, 3, 10, 11]);
        assert_eq!(chunks_of(0, 2), [0, 3]);
        assert_eq!(chunks_of(1, 2), [1, 2]);
    }

    #[test]
    fn ranks_run_without_nvlink_multicast() {
        assert!(NO_MULTICAST.contains(&("NCCL_NVLS_ENABLE", "0")));
    }
}
