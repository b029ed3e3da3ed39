//! Named sets of benchmark shapes (SPEC.md, "Benchmark protocol").
//!
//! - `mission`: the seeds' shapes (small B1 H1 S32, S256 B2 H8, mission B2 H8 S512, long
//!   B2 H8 S2048), D 64, non-causal, fp16, timed in graph mode so they compare with the
//!   anchors' graph figures;
//! - `fa`: the FlashAttention grid: batch·seqlen = 16k tokens, hidden 2048 (H = 2048/D),
//!   D 64/128/256, S 512..16k, causal off and on, fp16 and bf16;
//! - `decode`: Sq 1 (and 4, causal: speculative decoding) against Skv 4k (B 1, 32, 64), 32k
//!   (B 8) and 128k (B 1, 4), Hq 32, Hkv 8 and 32, D 128, fp16 and FP8-KV, contiguous and from
//!   a paged cache (pages of 64 and 256 tokens);
//! - `fp8`: the fa grid on the full-FP8 and FP8-KV paths and the seeds' simulated-FP8 code;
//! - `all`: every suite above.

use super::flops;
use fp8_sdpa::{AttnShape, Precision};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How runs are timed. Every mode records a CUDA event pair per timed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimingMode {
    /// L2 flushed (a 256 MB buffer written) before every run: nothing is cached.
    Cold,
    /// Back-to-back runs over rotating input sets whose total exceeds 2× L2: caches and
    /// clocks warm, inputs not L2-resident from the previous run.
    Hot,
    /// 20 calls captured in a CUDA graph, replay time / 20: the kernel's own cost where
    /// launch overhead would dominate (tiny shapes).
    Graph,
}

impl TimingMode {
    /// Lowercase name as serialized.
    pub fn name(self) -> &'static str {
        match self {
            TimingMode::Cold => "cold",
            TimingMode::Hot => "hot",
            TimingMode::Graph => "graph",
        }
    }
}

impl fmt::Display for TimingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TimingMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cold" => Ok(TimingMode::Cold),
            "hot" => Ok(TimingMode::Hot),
            "graph" => Ok(TimingMode::Graph),
            other => Err(format!(
                "unknown timing mode '{other}': expected cold, hot or graph"
            )),
        }
    }
}

/// Calls captured per CUDA graph in graph mode (the anchors' figure).
pub const GRAPH_CALLS: usize = 20;

/// A named suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    /// The seeds' shapes.
    Mission,
    /// The FlashAttention grid, fp16 and bf16.
    Fa,
    /// Split-KV decode shapes.
    Decode,
    /// The fa grid on FP8 paths.
    Fp8,
    /// Every suite.
    All,
}

impl Suite {
    /// Every concrete suite, in report order (`All` excluded).
    pub const CONCRETE: [Suite; 4] = [Suite::Mission, Suite::Fa, Suite::Decode, Suite::Fp8];

    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Mission => "mission",
            Suite::Fa => "fa",
            Suite::Decode => "decode",
            Suite::Fp8 => "fp8",
            Suite::All => "all",
        }
    }

    /// Parses a comma-separated list (`"mission,fa"`), expanding `all`, without duplicates.
    pub fn parse_list(s: &str) -> Result<Vec<Suite>, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let suite: Suite = part.parse()?;
            let expanded: Vec<Suite> = if suite == Suite::All {
                Suite::CONCRETE.to_vec()
            } else {
                vec![suite]
            };
            for x in expanded {
                if !out.contains(&x) {
                    out.push(x);
                }
            }
        }
        if out.is_empty() {
            return Err("no suite given: expected mission, fa, decode, fp8 or all".into());
        }
        Ok(out)
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Suite {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mission" => Ok(Suite::Mission),
            "fa" => Ok(Suite::Fa),
            "decode" => Ok(Suite::Decode),
            "fp8" => Ok(Suite::Fp8),
            "all" => Ok(Suite::All),
            other => Err(format!(
                "unknown suite '{other}': expected mission, fa, decode, fp8 or all"
            )),
        }
    }
}

/// One benchmark case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchCase {
    /// Suite it belongs to.
    pub suite: String,
    /// Case name, unique within the suite and precision (e.g. `d128_s4k_causal`). The
    /// precision is not part of it, so one name lines up the paths of one shape.
    pub name: String,
    /// Sizes.
    pub shape: AttnShape,
    /// Precision path.
    pub precision: Precision,
    /// Causal mask (bottom-right).
    pub causal: bool,
    /// Suggested timing mode.
    pub mode: TimingMode,
    /// Tokens per page when K/V come as a paged cache (the decode suite's paged rows); `None`
    /// for contiguous K/V.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<usize>,
}

/// Tokens per fa-grid case (batch × seqlen).
pub const FA_TOKENS: usize = 16 * 1024;
/// Hidden size of the fa grid (heads × head dim).
pub const FA_HIDDEN: usize = 2048;
/// Sequence lengths of the fa grid.
pub const FA_SEQLENS: [usize; 6] = [512, 1024, 2048, 4096, 8192, 16384];
/// The `--quick` subset: the three lengths the anchors quote for D256.
pub const FA_SEQLENS_QUICK: [usize; 3] = [1024, 4096, 16384];
/// Head dims of the fa grid.
pub const FA_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// Below this many FLOPs (and bytes, [`GRAPH_MAX_BYTES`]) a call takes a few µs, about one
/// launch, so only graph mode measures the kernel rather than the launch path.
pub const GRAPH_MAX_FLOPS: f64 = 2e10;
/// See [`GRAPH_MAX_FLOPS`].
pub const GRAPH_MAX_BYTES: u64 = 32 << 20;

/// The timing mode suggested for a shape: graph for tiny work, hot otherwise (cold is for
/// explicit cache studies).
pub fn suggested_mode(shape: &AttnShape, precision: Precision, causal: bool) -> TimingMode {
    if flops::flops(shape, causal) < GRAPH_MAX_FLOPS
        && flops::bytes(shape, precision, false) < GRAPH_MAX_BYTES
    {
        TimingMode::Graph
    } else {
        TimingMode::Hot
    }
}

/// Short sequence length for names and labels: 512, 1k, 16k.
pub fn short_len(s: usize) -> String {
    if s >= 1024 && s.is_multiple_of(1024) {
        format!("{}k", s / 1024)
    } else {
        s.to_string()
    }
}

fn mha(batch: usize, seq: usize, heads: usize, head_dim: usize) -> AttnShape {
    AttnShape {
        batch,
        seq_q: seq,
        seq_kv: seq,
        heads_q: heads,
        heads_kv: heads,
        head_dim,
    }
}

fn mission() -> Vec<BenchCase> {
    // Names match the anchors' rows.
    [
        ("small", mha(1, 32, 1, 64)),
        ("mission-s256", mha(2, 256, 8, 64)),
        ("mission", mha(2, 512, 8, 64)),
        ("long", mha(2, 2048, 8, 64)),
    ]
    .into_iter()
    .map(|(name, shape)| BenchCase {
        suite: Suite::Mission.name().into(),
        name: name.into(),
        shape,
        precision: Precision::F16,
        causal: false,
        // All four, "long" included, are compared with the anchors' graph figures.
        mode: TimingMode::Graph,
        page_size: None,
    })
    .collect()
}

fn fa_grid(suite: Suite, precisions: &[Precision], quick: bool) -> Vec<BenchCase> {
    let seqlens: &[usize] = if quick {
        &FA_SEQLENS_QUICK
    } else {
        &FA_SEQLENS
    };
    let mut out = Vec::new();
    for &precision in precisions {
        for d in FA_HEAD_DIMS {
            for causal in [false, true] {
                for &s in seqlens {
                    let shape = mha(FA_TOKENS / s, s, FA_HIDDEN / d, d);
                    out.push(BenchCase {
                        suite: suite.name().into(),
                        name: format!(
                            "d{d}_s{}{}",
                            short_len(s),
                            if causal { "_causal" } else { "" }
                        ),
                        shape,
                        precision,
                        causal,
                        mode: suggested_mode(&shape, precision, causal),
                        page_size: None,
                    });
                }
            }
        }
    }
    out
}

/// (batch, Skv) points of the decode suite: one sequence and full batches at 4k, 32k and 128k.
pub const DECODE_POINTS: [(usize, usize); 6] = [
    (1, 4096),
    (32, 4096),
    (64, 4096),
    (8, 32768),
    (1, 131072),
    (4, 131072),
];

/// Page sizes of the decode suite's paged rows.
pub const DECODE_PAGE_SIZES: [usize; 2] = [64, 256];

fn decode() -> Vec<BenchCase> {
    let mut out = Vec::new();
    let mut push = |precision, batch, seq_q, skv, hkv, page_size: Option<usize>| {
        let shape = AttnShape::new(batch, seq_q, skv, 32, hkv, 128);
        let causal = seq_q > 1; // speculative tokens see each other bottom-right
        out.push(BenchCase {
            suite: Suite::Decode.name().into(),
            name: format!(
                "b{batch}_sq{seq_q}_skv{}_hkv{hkv}{}",
                short_len(skv),
                page_size.map_or(String::new(), |p| format!("_page{p}"))
            ),
            shape,
            precision,
            causal,
            mode: suggested_mode(&shape, precision, causal),
            page_size,
        });
    };
    for precision in [Precision::F16, Precision::Fp8KvF16] {
        for (batch, skv) in DECODE_POINTS {
            // One new token with GQA 4 and MHA; four speculative tokens with GQA 4.
            push(precision, batch, 1, skv, 8, None);
            push(precision, batch, 1, skv, 32, None);
            push(precision, batch, 4, skv, 8, None);
            // The same one-token GQA rows from a paged cache.
            for page in DECODE_PAGE_SIZES {
                if page == 64 || (batch, skv) == (32, 4096) {
                    push(precision, batch, 1, skv, 8, Some(page));
                }
            }
        }
    }
    out
}

/// The cases of one suite. `quick` keeps fewer sequence lengths in the fa and fp8 grids
/// ([`FA_SEQLENS_QUICK`]); mission and decode are small and stay whole.
pub fn cases(suite: Suite, quick: bool) -> Vec<BenchCase> {
    match suite {
        Suite::Mission => mission(),
        Suite::Fa => fa_grid(Suite::Fa, &[Precision::F16, Precision::Bf16], quick),
        Suite::Decode => decode(),
        Suite::Fp8 => fa_grid(
            Suite::Fp8,
            &[
                Precision::Fp8,
                Precision::Fp8KvF16,
                Precision::Fp8KvBf16,
                Precision::SimFp8,
            ],
            quick,
        ),
        Suite::All => Suite::CONCRETE
            .into_iter()
            .flat_map(|s| cases(s, quick))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mission_shapes() {
        let c = cases(Suite::Mission, false);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["small", "mission-s256", "mission", "long"]);
        assert!(c.iter().all(|c| c.shape.head_dim == 64
            && !c.causal
            && c.precision == Precision::F16
            && c.mode == TimingMode::Graph));
        assert_eq!(c[2].shape, mha(2, 512, 8, 64));
        assert_eq!(cases(Suite::Mission, true), c);
    }

    #[test]
    fn fa_grid_is_16k_tokens_hidden_2048() {
        let c = cases(Suite::Fa, false);
        assert_eq!(c.len(), 2 * 3 * 2 * 6);
        for x in &c {
            assert_eq!(x.shape.batch * x.shape.seq_q, FA_TOKENS);
            assert_eq!(x.shape.heads_q * x.shape.head_dim, FA_HIDDEN);
            assert!(matches!(x.precision, Precision::F16 | Precision::Bf16));
        }
        let d128 = c
            .iter()
            .find(|x| x.name == "d128_s4k_causal" && x.precision == Precision::Bf16)
            .unwrap();
        assert_eq!(d128.shape, mha(4, 4096, 16, 128));
        assert!(d128.causal);
        assert_eq!(d128.mode, TimingMode::Hot);
        let quick = cases(Suite::Fa, true);
        assert_eq!(quick.len(), 2 * 3 * 2 * 3);
    }

    #[test]
    fn decode_covers_the_issue_grid() {
        let c = cases(Suite::Decode, false);
        // Per precision: 6 points x (2 one-token + 1 speculative + 1 paged) + 1 page-256 row.
        assert_eq!(c.len(), 2 * (6 * 4 + 1));
        let gqa = c
            .iter()
            .find(|x| x.name == "b8_sq1_skv32k_hkv8" && x.precision == Precision::Fp8KvF16)
            .unwrap();
        assert_eq!(
            (gqa.shape.seq_q, gqa.shape.heads_q, gqa.shape.head_dim),
            (1, 32, 128)
        );
        assert!(c.iter().all(|x| x.shape.heads_q % x.shape.heads_kv == 0));
        assert!(c.iter().all(|x| x.shape.is_decode()));
        // Paged rows mirror a contiguous row of the same shape, and pages tile Skv.
        for p in c.iter().filter(|x| x.page_size.is_some()) {
            let ps = p.page_size.unwrap();
            assert_eq!(p.shape.seq_kv % ps, 0);
            assert!(c.iter().any(|x| x.page_size.is_none()
                && x.shape == p.shape
                && x.precision == p.precision));
        }
        assert!(c.iter().any(|x| x.shape.seq_q == 4 && x.causal));
        assert!(c
            .iter()
            .any(|x| x.shape.batch == 1 && x.shape.seq_kv == 4096));
    }

    #[test]
    fn fp8_is_the_fa_grid_on_fp8_paths() {
        // E4M3 (full, and K/V under either output type) and the seeds' u8 code.
        let f = cases(Suite::Fp8, false);
        assert_eq!(f.len(), 4 * 36);
        assert!(f.iter().all(|x| x.precision.kv_is_8bit()));
        assert!(f.iter().any(|x| x.precision == Precision::SimFp8));
    }

    #[test]
    fn names_unique_per_suite_and_precision() {
        let all = cases(Suite::All, false);
        let mut keys: Vec<_> = all
            .iter()
            .map(|c| (c.suite.clone(), c.name.clone(), c.precision))
            .collect();
        let n = keys.len();
        keys.sort_by_key(|k| format!("{k:?}"));
        keys.dedup();
        assert_eq!(keys.len(), n);
    }

    #[test]
    fn tiny_shapes_suggest_graph() {
        assert_eq!(
            suggested_mode(&mha(1, 32, 1, 64), Precision::F16, false),
            TimingMode::Graph
        );
        assert_eq!(
            suggested_mode(&mha(1, 16384, 32, 64), Precision::F16, true),
            TimingMode::Hot
        );
    }

    #[test]
    fn parse_lists() {
        assert_eq!(
            Suite::parse_list("mission, fa,mission").unwrap(),
            vec![Suite::Mission, Suite::Fa]
        );
        assert_eq!(Suite::parse_list("all").unwrap().len(), 4);
        assert!(Suite::parse_list("nope")
            .unwrap_err()
            .contains("unknown suite"));
        assert!(Suite::parse_list("").is_err());
        assert_eq!("graph".parse::<TimingMode>(), Ok(TimingMode::Graph));
        assert!("warm".parse::<TimingMode>().is_err());
    }
}
