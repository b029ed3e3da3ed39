//! A small Llama-style decoder (RMSNorm, RoPE, GQA attention, SwiGLU MLP; random weights from
//! a seeded generator, since nothing is downloaded) that prefills a batch of prompts and then
//! generates tokens greedily, twice on the same weights and prompts:
//!
//! - **candle**: attention with candle's tensor ops, as a candle user writes it without
//!   flash-attn: `matmul`, softmax (in f32), `matmul` in the model's dtype, GQA by repeating
//!   the KV heads, and a plain fp16/bf16 KV cache grown by concatenation;
//! - **fp8-sdpa**: [`flash_attn`] for the prefill and an [`Fp8KvCache`] (E4M3 pages) for the
//!   decode steps.
//!
//! It prints the prefill time, the decode phase's tokens per second (device synchronized
//! around the timed regions; a full untimed warm-up run first, so first-use kernel compiles
//! and loads are excluded), the bytes each KV cache holds, and the largest absolute
//! difference in logits between the two runs at each step, with whether the greedy tokens
//! agree; and, for scale, each run's difference from a third, untimed one whose attention
//! runs in f32. The fp8-sdpa run is fed the candle run's tokens (teacher forcing, unless
//! `--free-run`) so that the logits compare position by position; agreement counts where its
//! own greedy choice equals the candle run's.
//!
//! On a GPU (feature `cuda`, scripts/build-candle-cuda.sh builds it):
//!
//! ```text
//! cargo run --release -p fp8-sdpa-candle --features cuda --example llama_decode -- \
//!     --batch 8 --prompt 1024 --gen 128
//! ```
//!
//! `--device cpu` runs a tiny configuration on the CPU instead (fp8-sdpa-candle's CPU path is
//! its f32 reference, so those timings say nothing about the kernels; it checks the logic).
//! `--help` lists the flags.

use candle_core::{DType, Device, Result, Tensor, D};
use fp8_sdpa_candle::{flash_attn, Fp8KvCache, Fp8KvCacheConfig};
use rand::{Rng, SeedableRng};
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "\
llama_decode: a Llama-style decoder with candle's attention and with fp8-sdpa's

Flags (--name value or --name=value; sizes in brackets: default, and with --tiny):
  --device cuda|cpu   cuda needs the `cuda` feature and a GPU; cpu runs the tiny model
                      through the CPU reference paths (checks the logic) [cuda]
  --tiny              the tiny sizes (the default on the CPU); size flags still override
  --layers N          decoder layers [4; 2]
  --hidden N          model width [2048; 256]
  --heads N           query heads [16; 4]
  --kv-heads N        KV heads (GQA) [4; 2]
  --head-dim N        64, 128 or 256 [128; 64]
  --ffn N             MLP width [5632; 512]
  --vocab N           vocabulary [32000; 1024]
  --batch N           sequences decoded together [8; 2]
  --prompt N          prompt tokens per sequence [1024; 48]
  --gen N             tokens generated per sequence after the prefill's [128; 8]
  --dtype bf16|f16    weights and activations [bf16]
  --seed N            seed of the weights and prompts [42]
  --page-size N       tokens per page of the FP8 cache, 16..=256 [64]
  --headroom X        factor >= 1 on the FP8 cache's descales from the prompt's amax,
                      room for larger K/V later (values beyond saturate) [1]
  --warmup N          untimed full runs of each side before the timed one [1]
  --free-run          the fp8-sdpa run follows its own greedy tokens (logits then compare
                      only up to the first step where the tokens differ)
  --all-steps         print every step's logit difference (default: about 16)
  --help              this text
";

/// The flags that take a value.
const VALUE_FLAGS: [&str; 16] = [
    "--device",
    "--dtype",
    "--layers",
    "--hidden",
    "--heads",
    "--kv-heads",
    "--head-dim",
    "--ffn",
    "--vocab",
    "--batch",
    "--prompt",
    "--gen",
    "--seed",
    "--page-size",
    "--headroom",
    "--warmup",
];

/// The command line (see [`USAGE`]).
#[derive(Debug)]
struct Args {
    device: String,
    tiny: bool,
    layers: Option<usize>,
    hidden: Option<usize>,
    heads: Option<usize>,
    kv_heads: Option<usize>,
    head_dim: Option<usize>,
    ffn: Option<usize>,
    vocab: Option<usize>,
    batch: Option<usize>,
    prompt: Option<usize>,
    gen: Option<usize>,
    dtype: String,
    seed: u64,
    page_size: usize,
    headroom: f32,
    warmup: usize,
    free_run: bool,
    all_steps: bool,
    help: bool,
}

impl Args {
    /// Parses `--name value`, `--name=value` and the switches; an unknown flag or a bad value
    /// is an error naming it.
    fn parse(mut it: impl Iterator<Item = String>) -> std::result::Result<Args, String> {
        let mut a = Args {
            device: "cuda".into(),
            tiny: false,
            layers: None,
            hidden: None,
            heads: None,
            kv_heads: None,
            head_dim: None,
            ffn: None,
            vocab: None,
            batch: None,
            prompt: None,
            gen: None,
            dtype: "bf16".into(),
            seed: 42,
            page_size: 64,
            headroom: 1.0,
            warmup: 1,
            free_run: false,
            all_steps: false,
            help: false,
        };
        fn num<T: std::str::FromStr>(flag: &str, v: &str) -> std::result::Result<T, String> {
            v.parse()
                .map_err(|_| format!("{flag} {v:?}: not a valid number"))
        }
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            match flag.as_str() {
                "--tiny" => a.tiny = true,
                "--free-run" => a.free_run = true,
                "--all-steps" => a.all_steps = true,
                "--help" | "-h" => a.help = true,
                f if !VALUE_FLAGS.contains(&f) => {
                    return Err(format!("unknown flag {flag:?} (see --help)"))
                }
                _ => {
                    let v = match inline {
                        Some(v) => v,
                        None => it
                            .next()
                            .ok_or_else(|| format!("{flag} needs a value (see --help)"))?,
                    };
                    let f = flag.as_str();
                    match f {
                        "--device" => a.device = v,
                        "--dtype" => a.dtype = v,
                        "--layers" => a.layers = Some(num(f, &v)?),
                        "--hidden" => a.hidden = Some(num(f, &v)?),
                        "--heads" => a.heads = Some(num(f, &v)?),
                        "--kv-heads" => a.kv_heads = Some(num(f, &v)?),
                        "--head-dim" => a.head_dim = Some(num(f, &v)?),
                        "--ffn" => a.ffn = Some(num(f, &v)?),
                        "--vocab" => a.vocab = Some(num(f, &v)?),
                        "--batch" => a.batch = Some(num(f, &v)?),
                        "--prompt" => a.prompt = Some(num(f, &v)?),
                        "--gen" => a.gen = Some(num(f, &v)?),
                        "--seed" => a.seed = num(f, &v)?,
                        "--page-size" => a.page_size = num(f, &v)?,
                        "--headroom" => a.headroom = num(f, &v)?,
                        "--warmup" => a.warmup = num(f, &v)?,
                        _ => unreachable!("every flag of VALUE_FLAGS is matched"),
                    }
                }
            }
        }
        Ok(a)
    }
}

/// Model and run sizes.
#[derive(Debug, Clone, Copy)]
struct Config {
    layers: usize,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    vocab: usize,
    batch: usize,
    prompt: usize,
    gen: usize,
    dtype: DType,
}

impl Config {
    fn from_args(a: &Args, cpu: bool) -> std::result::Result<Config, String> {
        let tiny = a.tiny || cpu;
        let pick = |v: Option<usize>, full: usize, small: usize| {
            v.unwrap_or(if tiny { small } else { full })
        };
        let c = Config {
            layers: pick(a.layers, 4, 2),
            hidden: pick(a.hidden, 2048, 256),
            heads: pick(a.heads, 16, 4),
            kv_heads: pick(a.kv_heads, 4, 2),
            head_dim: pick(a.head_dim, 128, 64),
            ffn: pick(a.ffn, 5632, 512),
            vocab: pick(a.vocab, 32000, 1024),
            batch: pick(a.batch, 8, 2),
            prompt: pick(a.prompt, 1024, 48),
            gen: pick(a.gen, 128, 8),
            dtype: match a.dtype.as_str() {
                "bf16" => DType::BF16,
                "f16" => DType::F16,
                other => return Err(format!("--dtype {other}: use bf16 or f16")),
            },
        };
        let sizes = [
            c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim, c.ffn, c.vocab, c.batch, c.prompt,
            c.gen,
        ];
        if sizes.contains(&0) {
            return Err(format!("every size must be >= 1: {c:?}"));
        }
        if !c.heads.is_multiple_of(c.kv_heads) {
            return Err(format!(
                "--heads {} must be a multiple of --kv-heads {}",
                c.heads, c.kv_heads
            ));
        }
        if ![64, 128, 256].contains(&c.head_dim) {
            return Err(format!("--head-dim {}: use 64, 128 or 256", c.head_dim));
        }
        Ok(c)
    }

    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
}

/// Random tensors from one seed: on CUDA candle's (curand, seeded), on the CPU ChaCha.
struct Init {
    dev: Device,
    dtype: DType,
    rng: rand_chacha::ChaCha8Rng,
}

impl Init {
    /// Uniform in [-a, a) (variance a^2 / 3), as the model's dtype.
    fn uniform(&mut self, shape: &[usize], a: f32) -> Result<Tensor> {
        let t = match &self.dev {
            Device::Cpu => {
                let n = shape.iter().product();
                let v: Vec<f32> = (0..n).map(|_| self.rng.random_range(-a..a)).collect();
                Tensor::from_vec(v, shape, &Device::Cpu)?
            }
            dev => Tensor::rand(-a, a, shape, dev)?,
        };
        t.to_dtype(self.dtype)
    }

    /// A `[fan_in, fan_out]` projection with variance 1 / fan_in.
    fn linear(&mut self, fan_in: usize, fan_out: usize) -> Result<Tensor> {
        self.uniform(&[fan_in, fan_out], (3.0 / fan_in as f32).sqrt())
    }
}

struct Layer {
    attn_norm: Tensor,
    /// `[hidden, (heads + 2 kv_heads) * head_dim]`: Q, K and V in one matmul.
    wqkv: Tensor,
    wo: Tensor,
    mlp_norm: Tensor,
    /// `[hidden, 2 ffn]`: gate and up in one matmul.
    w_gate_up: Tensor,
    w_down: Tensor,
}

struct Model {
    c: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
    /// RoPE tables `[positions, head_dim / 2]`, in the model's dtype.
    cos: Tensor,
    sin: Tensor,
}

impl Model {
    fn new(c: Config, dev: &Device, seed: u64) -> Result<Model> {
        if dev.is_cuda() {
            dev.set_seed(seed)?;
        }
        let mut init = Init {
            dev: dev.clone(),
            dtype: c.dtype,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        };
        let ones = |n: usize| Tensor::ones(n, c.dtype, dev);
        let qkv = (c.heads + 2 * c.kv_heads) * c.head_dim;
        let mut layers = Vec::with_capacity(c.layers);
        for _ in 0..c.layers {
            layers.push(Layer {
                attn_norm: ones(c.hidden)?,
                wqkv: init.linear(c.hidden, qkv)?,
                wo: init.linear(c.heads * c.head_dim, c.hidden)?,
                mlp_norm: ones(c.hidden)?,
                w_gate_up: init.linear(c.hidden, 2 * c.ffn)?,
                w_down: init.linear(c.ffn, c.hidden)?,
            });
        }
        let embed = init.uniform(&[c.vocab, c.hidden], 1.0)?;
        let lm_head = init.linear(c.hidden, c.vocab)?;
        // RoPE, theta 10000, rotate-half pairing (i, i + head_dim / 2).
        let (positions, half) = (c.prompt + c.gen, c.head_dim / 2);
        let mut angles = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for i in 0..half {
                let inv_freq = 10000f64.powf(-((2 * i) as f64) / c.head_dim as f64);
                angles.push((p as f64 * inv_freq) as f32);
            }
        }
        let angles = Tensor::from_vec(angles, (positions, half), dev)?;
        Ok(Model {
            c,
            embed,
            layers,
            norm: ones(c.hidden)?,
            lm_head,
            cos: angles.cos()?.to_dtype(c.dtype)?,
            sin: angles.sin()?.to_dtype(c.dtype)?,
        })
    }

    /// RMSNorm over the last dim, computed in f32.
    fn rms_norm(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        let x32 = x.to_dtype(DType::F32)?;
        let ms = x32.sqr()?.mean_keepdim(D::Minus1)?;
        x32.broadcast_div(&(ms + 1e-5)?.sqrt()?)?
            .to_dtype(self.c.dtype)?
            .broadcast_mul(w)
    }

    /// Rotary embedding of `x` `[batch, seq, heads, head_dim]` at positions `pos..pos + seq`.
    fn rope(&self, x: &Tensor, pos: usize) -> Result<Tensor> {
        let (_, s, _, d) = x.dims4()?;
        let half = d / 2;
        let cos = self.cos.narrow(0, pos, s)?.reshape((1, s, 1, half))?;
        let sin = self.sin.narrow(0, pos, s)?.reshape((1, s, 1, half))?;
        let (x1, x2) = (x.narrow(3, 0, half)?, x.narrow(3, half, half)?);
        let r1 = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
        let r2 = (x1.broadcast_mul(&sin)? + x2.broadcast_mul(&cos)?)?;
        Tensor::cat(&[r1, r2], 3)
    }

    /// One forward over `tokens` `[batch, seq]` (U32) at positions `pos..`, through `attn`;
    /// returns the last position's logits, f32 `[batch, vocab]`.
    fn forward(&self, tokens: &Tensor, pos: usize, attn: &mut dyn Attention) -> Result<Tensor> {
        let c = &self.c;
        let (b, s) = tokens.dims2()?;
        let (hq, hkv, d) = (c.heads, c.kv_heads, c.head_dim);
        let mut x = self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, s, c.hidden))?;
        for (i, l) in self.layers.iter().enumerate() {
            let h = self.rms_norm(&x, &l.attn_norm)?;
            let qkv =
                h.reshape((b * s, c.hidden))?
                    .matmul(&l.wqkv)?
                    .reshape((b, s, hq + 2 * hkv, d))?;
            let q = self.rope(&qkv.narrow(2, 0, hq)?, pos)?;
            let k = self.rope(&qkv.narrow(2, hq, hkv)?, pos)?;
            let v = qkv.narrow(2, hq + hkv, hkv)?;
            let o = if pos == 0 {
                attn.prefill(i, &q, &k, &v)?
            } else {
                attn.decode(i, &q, &k, &v)?
            };
            let o = o.reshape((b * s, hq * d))?.matmul(&l.wo)?;
            x = (x + o.reshape((b, s, c.hidden))?)?;
            let h = self.rms_norm(&x, &l.mlp_norm)?;
            let gu = h.reshape((b * s, c.hidden))?.matmul(&l.w_gate_up)?;
            let g = gu.narrow(1, 0, c.ffn)?.silu()?;
            let m = (g * gu.narrow(1, c.ffn, c.ffn)?)?.matmul(&l.w_down)?;
            x = (x + m.reshape((b, s, c.hidden))?)?;
        }
        let last = x.narrow(1, s - 1, 1)?.reshape((b, c.hidden))?;
        self.rms_norm(&last, &self.norm)?
            .matmul(&self.lm_head)?
            .to_dtype(DType::F32)
    }
}

/// The attention of one side, with its KV cache. Q is `[batch, seq, heads, head_dim]`, K
/// and V `[batch, seq, kv_heads, head_dim]` (RoPE applied to Q and K); returns
/// `[batch, seq, heads, head_dim]`.
trait Attention {
    /// The prompt: causal attention over itself, which fills the cache.
    fn prefill(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor>;
    /// One step: appends K and V, then attends over the whole cache.
    fn decode(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor>;
    /// Bytes of device memory the cache holds: (in use for the cached tokens, allocated).
    fn cache_bytes(&self) -> (usize, usize);
}

/// candle's attention: `[batch, heads, seq, head_dim]` caches grown with `Tensor::cat`.
struct CandleAttention {
    c: Config,
    cache: Vec<Option<(Tensor, Tensor)>>,
    /// Both matmuls in f32 too (as candle-transformers' llama does without flash-attn): the
    /// accuracy reference, not timed against.
    f32: bool,
}

impl CandleAttention {
    fn new(c: Config, f32: bool) -> Self {
        CandleAttention {
            c,
            cache: vec![None; c.layers],
            f32,
        }
    }

    /// `[b, kv_heads, L, d]` to `[b, heads, L, d]`, each KV head repeated for its group.
    fn repeat_kv(&self, x: &Tensor) -> Result<Tensor> {
        let rep = self.c.heads / self.c.kv_heads;
        if rep == 1 {
            return Ok(x.clone());
        }
        let (b, h, l, d) = x.dims4()?;
        x.unsqueeze(2)?
            .broadcast_as((b, h, rep, l, d))?
            .reshape((b, h * rep, l, d))
    }

    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let dt = if self.f32 { DType::F32 } else { self.c.dtype };
        let q = q.transpose(1, 2)?.contiguous()?.to_dtype(dt)?;
        let k = self.repeat_kv(&k.to_dtype(dt)?)?;
        let v = self.repeat_kv(&v.to_dtype(dt)?)?;
        let scores = (q.matmul(&k.t()?)?.to_dtype(DType::F32)? * f64::from(self.c.scale()))?;
        let scores = match mask {
            Some(m) => scores.broadcast_add(m)?,
            None => scores,
        };
        let e = scores
            .broadcast_sub(&scores.max_keepdim(D::Minus1)?)?
            .exp()?;
        let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        p.to_dtype(dt)?
            .matmul(&v)?
            .to_dtype(self.c.dtype)?
            .transpose(1, 2)
    }
}

impl Attention for CandleAttention {
    fn prefill(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let s = q.dim(1)?;
        let k = k.transpose(1, 2)?.contiguous()?;
        let v = v.transpose(1, 2)?.contiguous()?;
        // Causal: query i sees keys 0..=i.
        let mask: Vec<f32> = (0..s * s)
            .map(|x| {
                if x % s <= x / s {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, (s, s), q.device())?;
        let o = self.attend(q, &k, &v, Some(&mask))?;
        self.cache[layer] = Some((k, v));
        Ok(o)
    }

    fn decode(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let (k0, v0) = self.cache[layer]
            .take()
            .expect("decode after prefill, one layer at a time");
        let k = Tensor::cat(&[&k0, &k.transpose(1, 2)?], 2)?;
        let v = Tensor::cat(&[&v0, &v.transpose(1, 2)?], 2)?;
        let o = self.attend(q, &k, &v, None)?;
        self.cache[layer] = Some((k, v));
        Ok(o)
    }

    fn cache_bytes(&self) -> (usize, usize) {
        let bytes: usize = self
            .cache
            .iter()
            .flatten()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes())
            .sum();
        (bytes, bytes)
    }
}

/// fp8-sdpa: `flash_attn` for the prompt, an `Fp8KvCache` per layer for the decode steps.
struct Fp8SdpaAttention {
    c: Config,
    caches: Vec<Fp8KvCache>,
}

impl Fp8SdpaAttention {
    fn new(c: Config, dev: &Device, page_size: usize, headroom: f32) -> Result<Self> {
        let mut cfg = Fp8KvCacheConfig::new(c.batch, c.kv_heads, c.head_dim, c.prompt + c.gen);
        cfg.page_size = page_size;
        cfg.headroom = headroom;
        let caches = (0..c.layers)
            .map(|_| Fp8KvCache::new(cfg, dev))
            .collect::<Result<_>>()?;
        Ok(Fp8SdpaAttention { c, caches })
    }
}

impl Attention for Fp8SdpaAttention {
    fn prefill(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let o = flash_attn(q, k, v, self.c.scale(), true)?;
        self.caches[layer].append(k, v)?; // E4M3, descales from the prompt's amax
        Ok(o)
    }

    fn decode(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let cache = &mut self.caches[layer];
        cache.append(k, v)?;
        cache.attend(q, self.c.scale(), true)
    }

    fn cache_bytes(&self) -> (usize, usize) {
        let (mut used, mut allocated) = (0, 0);
        for cache in &self.caches {
            let c = cache.config();
            let (k, v) = cache.pages();
            let mut meta = cache.block_table().elem_count() * 4 + c.batch * 4; // + seqlens
            if let Some((kd, vd)) = cache.descales() {
                meta += (kd.elem_count() + vd.elem_count()) * 4;
            }
            allocated += k.elem_count() + v.elem_count() + meta;
            used += 2 * c.batch * cache.len() * c.heads_kv * c.head_dim + meta;
        }
        (used, allocated)
    }
}

/// What one generation produced.
struct Run {
    prefill_s: f64,
    decode_s: f64,
    /// f32 `[batch, vocab]`: the prefill's last position, then each decode step.
    logits: Vec<Tensor>,
    /// U32 `[batch]`: each step's greedy choice.
    tokens: Vec<Tensor>,
    cache: (usize, usize),
}

/// Prefills `prompt` and decodes `gen` steps greedily, feeding `forced`'s tokens where given
/// (else its own), timing both phases with the device synchronized.
fn generate(
    model: &Model,
    attn: &mut dyn Attention,
    prompt: &Tensor,
    forced: Option<&[Tensor]>,
) -> Result<Run> {
    let dev = prompt.device();
    let (b, p) = prompt.dims2()?;
    dev.synchronize()?;
    let t = Instant::now();
    let first = model.forward(prompt, 0, attn)?;
    let mut tokens = vec![first.argmax(D::Minus1)?];
    dev.synchronize()?;
    let prefill_s = t.elapsed().as_secs_f64();
    let mut logits = vec![first];
    let t = Instant::now();
    for step in 0..model.c.gen {
        let input = forced.map_or(&tokens[step], |f| &f[step]).reshape((b, 1))?;
        let l = model.forward(&input, p + step, attn)?;
        tokens.push(l.argmax(D::Minus1)?);
        logits.push(l);
    }
    dev.synchronize()?;
    let decode_s = t.elapsed().as_secs_f64();
    Ok(Run {
        prefill_s,
        decode_s,
        logits,
        tokens,
        cache: attn.cache_bytes(),
    })
}

fn mib(bytes: usize) -> String {
    format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64)
}

fn run(args: &Args) -> Result<()> {
    let cpu = match args.device.as_str() {
        "cpu" => true,
        "cuda" => false,
        other => {
            return Err(candle_core::Error::Msg(format!(
                "--device {other}: use cuda or cpu"
            )))
        }
    };
    let c = Config::from_args(args, cpu).map_err(candle_core::Error::Msg)?;
    let (dev, dev_name) = if cpu {
        (Device::Cpu, "CPU".to_string())
    } else {
        cuda_device()?
    };
    let model = Model::new(c, &dev, args.seed)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed ^ 0x5eed);
    let ids: Vec<u32> = (0..c.batch * c.prompt)
        .map(|_| rng.random_range(0..c.vocab as u32))
        .collect();
    let prompt = Tensor::from_vec(ids, (c.batch, c.prompt), &dev)?;
    let fp8 = |c| Fp8SdpaAttention::new(c, &dev, args.page_size, args.headroom);

    println!(
        "llama_decode: {} layers, hidden {}, heads {}/{} (GQA {}), head dim {}, ffn {}, vocab {}, \
         {:?}; batch {}, prompt {}, {} generated tokens; {dev_name}",
        c.layers,
        c.hidden,
        c.heads,
        c.kv_heads,
        c.heads / c.kv_heads,
        c.head_dim,
        c.ffn,
        c.vocab,
        c.dtype,
        c.batch,
        c.prompt,
        c.gen
    );
    if cpu {
        println!(
            "(CPU: fp8-sdpa-candle's CPU path is its f32 reference with candle ops, so these \
             timings check the example's logic and say nothing about the GPU kernels)"
        );
    }
    for _ in 0..args.warmup {
        generate(&model, &mut CandleAttention::new(c, false), &prompt, None)?;
        generate(&model, &mut fp8(c)?, &prompt, None)?;
    }
    let a = generate(&model, &mut CandleAttention::new(c, false), &prompt, None)?;
    let forced = (!args.free_run).then_some(a.tokens.as_slice());
    let b = generate(&model, &mut fp8(c)?, &prompt, forced)?;
    // The accuracy reference, on the candle run's tokens: attention in f32.
    let r = generate(
        &model,
        &mut CandleAttention::new(c, true),
        &prompt,
        Some(&a.tokens),
    )?;

    // Logits and tokens, step by step (after the timed runs).
    let max_diff = |x: &Tensor, y: &Tensor| (x - y)?.abs()?.max_all()?.to_scalar::<f32>();
    let mut diffs = Vec::with_capacity(a.logits.len());
    let mut agree = Vec::with_capacity(a.logits.len());
    for (i, (la, lb)) in a.logits.iter().zip(&b.logits).enumerate() {
        let amax = la.abs()?.max_all()?.to_scalar::<f32>()?;
        let lr = &r.logits[i];
        diffs.push((
            max_diff(la, lb)?,
            amax,
            max_diff(la, lr)?,
            max_diff(lb, lr)?,
        ));
        let ta = a.tokens[i].to_vec1::<u32>()?;
        let tb = b.tokens[i].to_vec1::<u32>()?;
        agree.push(ta.iter().zip(&tb).filter(|(x, y)| x == y).count());
    }
    let first_differ = agree.iter().position(|&n| n < c.batch);

    let steps = c.gen as f64;
    let tps = |r: &Run| (c.batch as f64 * steps) / r.decode_s;
    let row = |name: &str, x: String, y: String| println!("| {name:<28} | {x:>22} | {y:>22} |");
    println!();
    row(
        "",
        "candle attention".into(),
        "fp8-sdpa + FP8 KV cache".into(),
    );
    println!("|{:-<30}|{:-<24}|{:-<24}|", "", "", "");
    row(
        "prefill",
        format!("{:.2} ms", a.prefill_s * 1e3),
        format!("{:.2} ms", b.prefill_s * 1e3),
    );
    row(
        "decode, per step",
        format!("{:.3} ms", a.decode_s * 1e3 / steps),
        format!("{:.3} ms", b.decode_s * 1e3 / steps),
    );
    row(
        "decode tokens/s (all seqs)",
        format!("{:.0}", tps(&a)),
        format!("{:.0}", tps(&b)),
    );
    row("KV cache, in use", mib(a.cache.0), mib(b.cache.0));
    row("KV cache, allocated", mib(a.cache.1), mib(b.cache.1));
    println!();
    let len = c.prompt + c.gen;
    println!(
        "decode speed-up {:.2}x; KV cache {:.2}x smaller in use ({} tokens per sequence, {:?} \
         K/V against E4M3 codes plus per-(sequence, head) f32 descales). The FP8 cache is \
         allocated up front for {} tokens in pages of {}; candle's grows by Tensor::cat, which \
         copies the whole cache into a new tensor at every step.",
        tps(&b) / tps(&a),
        a.cache.0 as f64 / b.cache.0 as f64,
        len,
        c.dtype,
        len.div_ceil(args.page_size) * args.page_size,
        args.page_size
    );
    let largest = |f: fn(&(f32, f32, f32, f32)) -> f32| {
        diffs
            .iter()
            .enumerate()
            .map(|(i, d)| (i, f(d)))
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .unwrap_or((0, 0.0))
    };
    let worst = largest(|d| d.0);
    let last = diffs[diffs.len() - 1];
    println!(
        "logits, largest |candle - fp8-sdpa|: prefill {:.3e}, final step {:.3e}, largest {:.3e} \
         at step {} (|logits| up to {:.2})",
        diffs[0].0,
        last.0,
        worst.1,
        worst.0,
        diffs.iter().map(|d| d.1).fold(0f32, f32::max)
    );
    println!(
        "against attention in f32 (the same model, candle's attention with f32 matmuls, on the \
         candle run's tokens): candle {:?} largest {:.3e}, fp8-sdpa largest {:.3e}",
        c.dtype,
        largest(|d| d.2).1,
        largest(|d| d.3).1
    );
    let total: usize = agree.iter().sum();
    println!(
        "greedy tokens agree: {total} of {} (prefill + {} decode steps, batch {}){}; {}",
        agree.len() * c.batch,
        c.gen,
        c.batch,
        match first_differ {
            None => String::new(),
            Some(i) => format!(", first difference at step {i}"),
        },
        if args.free_run {
            "each side followed its own tokens (--free-run): after the first difference the \
             logits compare different sequences"
        } else {
            "the fp8-sdpa run was fed the candle run's tokens, so every step compares the same \
             positions"
        }
    );
    let every = if args.all_steps {
        1
    } else {
        diffs.len().div_ceil(16).max(1)
    };
    println!(
        "\n| step | candle - fp8-sdpa | max abs logit | candle - f32 | fp8-sdpa - f32 | tokens agree |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, (d, amax, da, db)) in diffs.iter().enumerate() {
        if i % every == 0 || i + 1 == diffs.len() {
            let name = if i == 0 {
                "prefill".to_string()
            } else {
                i.to_string()
            };
            println!(
                "| {name} | {d:.3e} | {amax:.2} | {da:.3e} | {db:.3e} | {}/{} |",
                agree[i], c.batch
            );
        }
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn cuda_device() -> Result<(Device, String)> {
    let dev = Device::new_cuda(0)?;
    let name = match &dev {
        Device::Cuda(d) => d.cuda_stream().context().name().unwrap_or_default(),
        _ => String::new(),
    };
    Ok((dev, format!("CUDA device 0 ({name})")))
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<(Device, String)> {
    Err(candle_core::Error::Msg(
        "this build has no CUDA: the GPU comparison needs fp8-sdpa-candle's `cuda` feature and a \
         CUDA GPU (cargo run --release -p fp8-sdpa-candle --features cuda --example llama_decode; \
         candle's cuda feature needs nvcc, see scripts/build-candle-cuda.sh). \
         `--device cpu` runs a tiny model on the CPU to check the example's logic."
            .into(),
    ))
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(a) if a.help => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(a) => a,
        Err(e) => {
            eprintln!("llama_decode: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llama_decode: {e}");
            ExitCode::FAILURE
        }
    }
}
