//! Typed kernel variants. A [`Variant`] holds every tuning knob of a kernel family (the seeds'
//! toggles included); a [`KernelSpec`] adds the problem class it is compiled for (precision,
//! head dim, causal). Validity rules live here, and each field maps onto exactly one
//! preprocessor define, so the same spec always yields the same code and the same key.

use crate::arch::Arch;
use crate::dtype::{DType, Precision};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Kernel family: which source file and algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Naive fp32 attention, one warp per query row: the GPU reference.
    Reference,
    /// `mma.sync` + `ldmatrix` + cp.async pipeline, sm_80 and up.
    Portable,
    /// TMA + mbarrier + wgmma with warp specialization, sm_90a only.
    Hopper,
    /// Split-KV for few query rows against long KV, with a log-sum-exp merge.
    Decode,
}

impl Family {
    /// All families.
    pub const ALL: [Family; 4] = [
        Family::Reference,
        Family::Portable,
        Family::Hopper,
        Family::Decode,
    ];

    /// Lowercase name, as used in keys and file names.
    pub fn name(self) -> &'static str {
        match self {
            Family::Reference => "reference",
            Family::Portable => "portable",
            Family::Hopper => "hopper",
            Family::Decode => "decode",
        }
    }

    /// The knobs the family has besides the tile shape (tile_m, tile_n, warps, stages,
    /// min_blocks), as the key flags that set them ([`Variant::key`]); a variant sets no other
    /// flag. Reference: none (its one knob is `warps`). Portable: the seeds' toggles (`c`
    /// cp.async, `t` tensor-core P·V, `e` fast exp, `l` light sync, `x` swizzle) and what its
    /// shipped defaults add (`f` fragment decode, `h` half steps, `r` paired rows, `d`
    /// decoupled sync, `p` with `d`: the stream); no warp specialization (retired).
    /// Hopper: `w` its producer warpgroup, `p` persistent, `o` overlap, `g` ping-pong, and the
    /// fixed `e`, `x`. Decode: the fixed `c`, `e`, `x`.
    pub fn knob_flags(self) -> &'static str {
        match self {
            Family::Reference => "",
            Family::Portable => "ctfhrpeldx",
            Family::Hopper => "wpogex",
            Family::Decode => "cex",
        }
    }

    /// Define value (`SDPA_FAMILY`).
    fn code(self) -> u32 {
        match self {
            Family::Reference => 0,
            Family::Portable => 1,
            Family::Hopper => 2,
            Family::Decode => 3,
        }
    }
}

impl FromStr for Family {
    type Err = Error;
    fn from_str(s: &str) -> Result<Family> {
        Family::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| Error::InvalidVariant {
                key: s.to_string(),
                reason: "unknown family; expected reference, portable, hopper or decode".into(),
            })
    }
}

/// How warps synchronize around shared-memory stages (the seeds' SYNC_POLICY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncPolicy {
    /// A block-wide barrier around every step (the seeds' baseline).
    Block,
    /// Only the barriers the data flow needs (one per stage hand-off).
    Light,
    /// No block barrier in the K/V loop: each thread copies and decodes its own chunks of the
    /// 8-bit K/V tiles, and one mbarrier per staging buffer says when every warp has finished
    /// a tile, so warps may drift up to one tile apart instead of meeting at every tile.
    /// Portable family, 8-bit K/V with the pipelined decode only. With `persistent`, a block's
    /// work tiles form one K/V stream (the next work tile's first tiles are copied and decoded
    /// while the current one finishes) and each warp loads its own Q rows.
    Decoupled,
}

impl SyncPolicy {
    /// The value of the `SDPA_SYNC_POLICY` define.
    pub fn code(self) -> u32 {
        match self {
            SyncPolicy::Block => 0,
            SyncPolicy::Light => 1,
            SyncPolicy::Decoupled => 2,
        }
    }
}

/// Every tuning knob of a kernel. Which values are valid depends on the family
/// (see [`Variant::validate`]); knobs a family does not use must stay at their neutral value,
/// so that no two keys name the same code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Variant {
    /// Kernel family.
    pub family: Family,
    /// Query rows per block (tile M).
    pub tile_m: u32,
    /// Keys per inner step (tile N).
    pub tile_n: u32,
    /// Warps per block, producers included.
    pub warps: u32,
    /// Shared-memory pipeline depth for K/V tiles. With 8-bit K/V at head dim 256, `cp_async`
    /// and tensor-core P·V, one stage is the split decode's ring of one: a single 8-bit slot
    /// refilled half by half while the next tile waits decoded in a second 16-bit staging pair.
    pub stages: u32,
    /// Load K/V with `cp.async` (else plain loads through registers).
    pub cp_async: bool,
    /// P·V on tensor cores (else the seeds' scalar P·V baseline).
    pub tc_pv: bool,
    /// Fragment decode (portable, 8-bit K/V, head dim 64 or 128, and 256 at 16 rows per
    /// warp): the ring's 8-bit K/V tiles are
    /// read with 8-bit `ldmatrix` and decoded in registers, per mma fragment, by every
    /// computing warp: no 16-bit staging tile, no decode barrier, half the shared-memory reads
    /// of 16-bit K/V, at the price of repeating the decode in each warp. Q is stored with its
    /// head-dim columns permuted to match K's fragments, and O's columns come out permuted
    /// (both undone in the kernel). Q·Kᵀ runs in f16 whatever the compute type: a bf16 Q is
    /// stored as f16 at a power of two per row, folded back into the softmax's scale. Absent
    /// in JSON written before the knob existed, and then off.
    #[serde(default)]
    pub fragment_decode: bool,
    /// Warp specialization: `producer_warps` warps only load, the rest compute (hopper
    /// family: one producer warpgroup; the portable family's producer and decode warps were
    /// retired, issue 32).
    pub warp_spec: bool,
    /// Producer warps when `warp_spec` (0 otherwise).
    pub producer_warps: u32,
    /// Half steps: each K/V tile is copied and handed over whole (one barrier per `tile_n`
    /// keys) but computed in two steps of `tile_n / 2` keys, so the score tile takes half the
    /// registers.
    pub half_steps: bool,
    /// Paired rows (portable, 32 rows per warp): warp w owns the m16 row fragments w and
    /// 2·warps − 1 − w of the block, so that under causal every warp has the same share of
    /// the diagonal, and a key step that masks a warp's first fragment computes the second
    /// alone. Acts where the causal warp skip does (light or decoupled sync). Absent in JSON
    /// written before the knob existed, and then off.
    #[serde(default)]
    pub paired_rows: bool,
    /// Persistent blocks looping over a tile queue (else one block per tile). Portable family:
    /// with decoupled sync only, one K/V stream per block across its work tiles (the
    /// persistent grid with block or light sync was retired, issue 32).
    pub persistent: bool,
    /// Intra-warpgroup overlap (hopper): the softmax of one key block runs while the tensor
    /// cores compute P·V of the block before it. Absent in JSON written before the knob
    /// existed, and then off.
    #[serde(default)]
    pub overlap: bool,
    /// Ping-pong (hopper, two consumer warpgroups): the warpgroups take turns issuing their
    /// GEMMs, so that one's softmax runs under the other's GEMMs. Absent in JSON written
    /// before the knob existed, and then off.
    #[serde(default)]
    pub pingpong: bool,
    /// `ex2.approx.ftz` for the softmax exponent (else an accurate exp2).
    pub fast_exp: bool,
    /// Barrier policy.
    pub sync: SyncPolicy,
    /// XOR-swizzled shared-memory tiles (else padded rows).
    pub swizzle: bool,
    /// Blocks per SM the kernel is built for (`__launch_bounds__` minimum): sets the register
    /// budget, `65536 / (threads · min_blocks)`, capped at 255.
    pub min_blocks: u32,
}

impl Variant {
    /// The naive fp32 reference kernel with `warps` query rows per block.
    pub fn reference() -> Variant {
        Variant {
            family: Family::Reference,
            tile_m: 4,
            tile_n: 32,
            warps: 4,
            stages: 1,
            cp_async: false,
            tc_pv: false,
            fragment_decode: false,
            warp_spec: false,
            producer_warps: 0,
            half_steps: false,
            paired_rows: false,
            persistent: false,
            overlap: false,
            pingpong: false,
            fast_exp: false,
            sync: SyncPolicy::Block,
            swizzle: false,
            min_blocks: 1,
        }
    }

    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.warps * 32
    }

    /// Registers per thread the variant may use (its declared budget).
    pub fn register_budget(&self) -> u32 {
        let per_thread = 65536 / (self.threads() * self.min_blocks).max(1);
        // ptxas allocates registers in units of 8 per thread, up to 255.
        if per_thread >= 255 {
            255
        } else {
            (per_thread / 8 * 8).max(8)
        }
    }

    /// A stable, human-readable key that names this variant uniquely and parses back
    /// ([`Variant::from_str`]). Example: `portable.m64.n64.w4.s2.b2.ctlx`. Flags, in this
    /// order: `c` cp.async, `t` tensor-core P·V, `f` fragment decode, `w<n>` n producer
    /// warps, `h` half steps, `r` paired rows, `p` persistent, `o` overlap,
    /// `g` ping-pong, `e` fast exp,
    /// `l` light or `d` decoupled barriers, `x` swizzle (`-` when none).
    pub fn key(&self) -> String {
        format!(
            "{}.m{}.n{}.w{}.s{}.b{}.{}",
            self.family.name(),
            self.tile_m,
            self.tile_n,
            self.warps,
            self.stages,
            self.min_blocks,
            self.flags()
        )
    }

    /// The key's last part: the flags in canonical order, `-` when none ([`Variant::key`]).
    fn flags(&self) -> String {
        let mut flags = String::new();
        if self.cp_async {
            flags.push('c');
        }
        if self.tc_pv {
            flags.push('t');
        }
        if self.fragment_decode {
            flags.push('f');
        }
        if self.warp_spec {
            flags.push_str(&format!("w{}", self.producer_warps));
        }
        if self.half_steps {
            flags.push('h');
        }
        if self.paired_rows {
            flags.push('r');
        }
        if self.persistent {
            flags.push('p');
        }
        if self.overlap {
            flags.push('o');
        }
        if self.pingpong {
            flags.push('g');
        }
        if self.fast_exp {
            flags.push('e');
        }
        match self.sync {
            SyncPolicy::Block => {}
            SyncPolicy::Light => flags.push('l'),
            SyncPolicy::Decoupled => flags.push('d'),
        }
        if self.swizzle {
            flags.push('x');
        }
        if flags.is_empty() {
            flags.push('-');
        }
        flags
    }

    /// Checks the family's validity rules (independent of the problem).
    pub fn validate(&self) -> Result<()> {
        let fail = |reason: String| {
            Err(Error::InvalidVariant {
                key: self.key(),
                reason,
            })
        };
        if !(1..=16).contains(&self.warps) {
            return fail(format!("warps must be 1..=16, got {}", self.warps));
        }
        if !(1..=8).contains(&self.min_blocks) {
            return fail(format!("min_blocks must be 1..=8, got {}", self.min_blocks));
        }
        if !(1..=4).contains(&self.stages) {
            return fail(format!("stages must be 1..=4, got {}", self.stages));
        }
        if self.warp_spec != (self.producer_warps > 0) {
            return fail("producer_warps > 0 exactly when warp_spec is on".into());
        }
        if self.producer_warps >= self.warps {
            return fail("at least one warp must compute (producer_warps < warps)".into());
        }
        if self.min_blocks * self.threads() * 8 > 65536 {
            return fail(format!(
                "{} blocks of {} threads leave fewer than 8 registers per thread",
                self.min_blocks,
                self.threads()
            ));
        }
        let flags = self.flags();
        let knobs = self.family.knob_flags();
        if let Some(c) = flags
            .chars()
            .find(|c| c.is_ascii_alphabetic() && !knobs.contains(*c))
        {
            return fail(format!(
                "flag '{c}' is not a knob of the {} family (its knobs: '{knobs}'); knobs a family \
                 does not have keep their neutral value",
                self.family.name()
            ));
        }
        if self.pingpong && self.warps != 12 {
            return fail("pingpong needs two consumer warpgroups (warps 12)".into());
        }
        if self.fragment_decode
            && (!self.tc_pv
                || !self.cp_async
                || !self.swizzle
                || self.sync == SyncPolicy::Decoupled)
        {
            return fail(
                "fragment_decode reads the 8-bit ring with ldmatrix: it needs tensor-core P·V, \
                 cp_async, swizzle, and no decoupled sync (that decodes through staging)"
                    .into(),
            );
        }
        match self.family {
            Family::Reference => {
                let want = Variant {
                    tile_m: self.warps,
                    warps: self.warps,
                    ..Variant::reference()
                };
                if *self != want {
                    return fail(
                        "the reference family has one knob, warps (= tile_m, one query row per \
                         warp); every other field must keep its neutral value"
                            .into(),
                    );
                }
            }
            Family::Portable => {
                let consumers = self.warps;
                if !matches!(self.tile_n, 32 | 64 | 128) {
                    return fail(format!("tile_n must be 32, 64 or 128, got {}", self.tile_n));
                }
                if !self.tile_m.is_multiple_of(16 * consumers)
                    || !(1..=2).contains(&(self.tile_m / (16 * consumers)))
                {
                    return fail(format!(
                        "tile_m must be 16 or 32 rows per computing warp ({} computing warps), got {}",
                        consumers, self.tile_m
                    ));
                }
                if self.half_steps && self.tile_n < 64 {
                    return fail(format!(
                        "half_steps needs tile_n 64 or 128 (steps of at least 32 keys), got {}",
                        self.tile_n
                    ));
                }
                if self.paired_rows
                    && (self.tile_m != 32 * consumers
                        || !self.tc_pv
                        || self.sync == SyncPolicy::Block
                        || (self.persistent && self.sync == SyncPolicy::Decoupled))
                {
                    return fail(
                        "paired_rows needs 32 rows per computing warp, tensor-core P·V and light or \
                         decoupled sync (the causal warp skip), and not the persistent decoupled \
                         stream"
                            .into(),
                    );
                }
                if self.stages > 1 && !self.cp_async {
                    return fail("a multi-stage pipeline (stages > 1) needs cp_async".into());
                }
                if self.persistent && self.sync != SyncPolicy::Decoupled {
                    return fail(
                        "portable persistent blocks are the stream: persistent needs decoupled                          sync (the persistent grid with block or light sync was retired)"
                            .into(),
                    );
                }
                if self.sync == SyncPolicy::Decoupled
                    && (!self.cp_async || !self.tc_pv || self.stages < 3)
                {
                    return fail(
                        "decoupled sync needs cp_async, tensor-core P·V and stages >= 3 (a tile \
                         is decoded two tiles ahead)"
                            .into(),
                    );
                }
            }
            Family::Hopper => {
                // hopper.cu: warpgroup 0 produces, each further one computes 64 query rows.
                let consumers = (self.warps / 4).saturating_sub(1);
                if !self.warps.is_multiple_of(4)
                    || !(1..=3).contains(&consumers)
                    || !self.warp_spec
                    || self.producer_warps != 4
                {
                    return fail(
                        "the hopper family is warpgroups: one producer warpgroup (warp_spec, \
                         producer_warps 4) and 1 to 3 consumer warpgroups (warps 8, 12 or 16)"
                            .into(),
                    );
                }
                if self.tile_m != 64 * consumers {
                    return fail(format!(
                        "hopper tile_m is 64 rows per consumer warpgroup: {} for warps {}, got {}",
                        64 * consumers,
                        self.warps,
                        self.tile_m
                    ));
                }
                if !self.tile_n.is_multiple_of(16) || !(16..=256).contains(&self.tile_n) {
                    return fail(format!(
                        "hopper tile_n must be a multiple of 16 up to 256 (a wgmma N), got {}",
                        self.tile_n
                    ));
                }
                if self.cp_async
                    || self.tc_pv
                    || !self.fast_exp
                    || !self.swizzle
                    || self.sync != SyncPolicy::Block
                    || self.min_blocks != 1
                {
                    return fail(
                        "hopper variants load by TMA into 128-byte-swizzled tiles, compute on \
                         wgmma with ex2.approx, synchronize by mbarriers and run one block per \
                         SM: flags 'w4ex' (with 'p' persistent, 'o' overlap, 'g' ping-pong), min_blocks 1"
                            .into(),
                    );
                }
            }
            Family::Decode => {
                // decode.cu: 16 packed query rows per CTA; each warp takes tile_n / warps keys
                // of every step (whole k16 fragments) through its own cp.async ring.
                if self.tile_m != 16 {
                    return fail(format!(
                        "decode tile_m is 16 (one m16 tile of packed query rows), got {}",
                        self.tile_m
                    ));
                }
                if !matches!(self.warps, 1 | 2 | 4 | 8)
                    || !self.tile_n.is_multiple_of(16 * self.warps)
                    || self.tile_n > 256
                {
                    return fail(format!(
                        "decode warps must be 1, 2, 4 or 8 and tile_n (at most 256) a multiple of \
                         16 keys per warp, got warps {} and tile_n {}",
                        self.warps, self.tile_n
                    ));
                }
                if self.stages < 2 {
                    return fail("decode needs stages >= 2 (each warp's cp.async ring)".into());
                }
                if !self.cp_async
                    || self.tc_pv
                    || !self.fast_exp
                    || !self.swizzle
                    || self.sync != SyncPolicy::Block
                    || self.warp_spec
                    || self.persistent
                {
                    return fail(
                        "decode variants load with cp.async into swizzled tiles and use \
                         ex2.approx: flags 'cex' exactly"
                            .into(),
                    );
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

impl FromStr for Variant {
    type Err = Error;
    /// Parses a key made by [`Variant::key`].
    fn from_str(key: &str) -> Result<Variant> {
        let bad = |reason: &str| Error::InvalidVariant {
            key: key.to_string(),
            reason: format!("{reason}; expected a key like portable.m64.n64.w4.s2.b1.ctlx"),
        };
        let parts: Vec<&str> = key.split('.').collect();
        if parts.len() != 7 {
            return Err(bad("wrong number of fields"));
        }
        let num = |p: &str, prefix: char| -> Result<u32> {
            p.strip_prefix(prefix)
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad(&format!("bad field '{p}'")))
        };
        let mut v = Variant {
            family: parts[0].parse()?,
            tile_m: num(parts[1], 'm')?,
            tile_n: num(parts[2], 'n')?,
            warps: num(parts[3], 'w')?,
            stages: num(parts[4], 's')?,
            min_blocks: num(parts[5], 'b')?,
            cp_async: false,
            tc_pv: false,
            fragment_decode: false,
            warp_spec: false,
            producer_warps: 0,
            half_steps: false,
            paired_rows: false,
            persistent: false,
            overlap: false,
            pingpong: false,
            fast_exp: false,
            sync: SyncPolicy::Block,
            swizzle: false,
        };
        let flags = parts[6];
        if flags != "-" {
            let mut chars = flags.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    'c' => v.cp_async = true,
                    't' => v.tc_pv = true,
                    'f' => v.fragment_decode = true,
                    'w' => {
                        let mut n = String::new();
                        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                            n.push(*d);
                            chars.next();
                        }
                        v.warp_spec = true;
                        v.producer_warps = n
                            .parse()
                            .map_err(|_| bad("'w' flag needs a producer count"))?;
                    }
                    'h' => v.half_steps = true,
                    'r' => v.paired_rows = true,
                    'p' => v.persistent = true,
                    'o' => v.overlap = true,
                    'g' => v.pingpong = true,
                    'e' => v.fast_exp = true,
                    'l' => v.sync = SyncPolicy::Light,
                    'd' => v.sync = SyncPolicy::Decoupled,
                    'x' => v.swizzle = true,
                    other => return Err(bad(&format!("unknown flag '{other}'"))),
                }
            }
        }
        if v.key() != key {
            return Err(bad("flags out of canonical order or duplicated"));
        }
        Ok(v)
    }
}

/// Head dims the operation supports.
pub const HEAD_DIMS: [u32; 3] = [64, 128, 256];

/// A variant compiled for one problem class: what one CUBIN holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelSpec {
    /// Tuning knobs.
    pub variant: Variant,
    /// Types of Q, K/V and O.
    pub precision: Precision,
    /// Head dimension.
    pub head_dim: u32,
    /// Causal mask, aligned bottom-right.
    pub causal: bool,
}

impl KernelSpec {
    /// Stable key, e.g. `portable.m64.n64.w4.s2.b1.ctlx/f16/d128/causal`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/d{}/{}",
            self.variant.key(),
            self.precision.name(),
            self.head_dim,
            if self.causal { "causal" } else { "full" }
        )
    }

    /// Checks variant rules, the problem class, and that the arch can run the family.
    pub fn validate(&self, arch: Arch) -> Result<()> {
        self.variant.validate()?;
        let fail = |reason: String| Err(self.invalid(reason));
        if !HEAD_DIMS.contains(&self.head_dim) {
            return fail(format!(
                "head_dim must be 64, 128 or 256, got {}",
                self.head_dim
            ));
        }
        match self.variant.family {
            Family::Hopper if arch != Arch::Sm90a => {
                fail(format!("the hopper family needs sm_90a, not {arch}"))
            }
            Family::Hopper
                if !matches!(
                    self.precision,
                    Precision::F16
                        | Precision::Bf16
                        | Precision::Fp8
                        | Precision::Fp8KvF16
                        | Precision::Fp8KvBf16
                ) =>
            {
                fail(format!(
                    "the hopper family runs fp16, bf16, FP8-KV (E4M3 K/V) and full FP8, not {}; \
                     the portable family serves simulated FP8",
                    self.precision.name()
                ))
            }
            Family::Hopper if self.precision.is_fp8_kv() && self.head_dim > 128 => fail(
                "the hopper family's FP8-KV decode serves head dims 64 and 128: at 256 the code \
                 ring leaves room for 48-key tiles at most, which ran no faster than the portable \
                 family (docs/perf-notes.md); FP8-KV at d256 runs on the portable family"
                    .to_string(),
            ),
            Family::Hopper
                if self.precision.is_fp8_kv()
                    && !self
                        .variant
                        .tile_n
                        .is_multiple_of(128 / (self.head_dim / 16)) =>
            {
                // hopper.cu's decoder: each pass turns 128 / (D / 16) rows of codes into 16 bits.
                fail(format!(
                    "the hopper family's FP8-KV decoder converts {} key rows per pass at head dim \
                     {}: tile_n must be a multiple of that, got {}",
                    128 / (self.head_dim / 16),
                    self.head_dim,
                    self.variant.tile_n
                ))
            }
            Family::Hopper
                if self.precision == Precision::Fp8
                    && self.variant.tile_n != 64
                    && !self.variant.tile_n.is_multiple_of(128) =>
            {
                fail(format!(
                    "the hopper family's FP8 kernel transposes V into 128-key rows: tile_n must \
                     be 64, 128 or 256, got {}",
                    self.variant.tile_n
                ))
            }
            Family::Hopper
                if self.precision == Precision::Fp8
                    && self.head_dim == 256
                    && (self.variant.overlap || self.variant.tile_n != 64) =>
            {
                fail(
                    "the hopper family's FP8 kernel at head dim 256 runs S = Q.K^T as two chains \
                     added in fp32 beside O's 128 registers, which fits the 64-key tile without \
                     the overlap only: take tile_n 64 and drop 'o' (ping-pong 'g' overlaps the \
                     two consumers instead)"
                        .to_string(),
                )
            }
            Family::Hopper => self.check_smem(arch),
            Family::Portable => {
                let computing = self.variant.warps.max(1);
                let rows_per_warp = self.variant.tile_m / (16 * computing);
                if self.variant.fragment_decode
                    && (!self.precision.kv_is_8bit() || (self.head_dim > 128 && rows_per_warp != 1))
                {
                    return fail(format!(
                        "fragment_decode serves 8-bit K/V at head dim 64 or 128, and at 256 with \
                         16 rows per warp (32 rows of O at d256 leave no registers for it), not \
                         {} at d{} with tile_m {} over {} computing warps",
                        self.precision.name(),
                        self.head_dim,
                        self.variant.tile_m,
                        computing
                    ));
                }
                self.decoupled_fits()?;
                self.check_smem(arch)
            }
            Family::Decode
                if !matches!(
                    self.precision,
                    Precision::F16 | Precision::Bf16 | Precision::Fp8KvF16 | Precision::Fp8KvBf16
                ) =>
            {
                fail(format!(
                    "the decode family takes 16-bit Q with 16-bit or E4M3 K/V, not {}",
                    self.precision.name()
                ))
            }
            Family::Decode => self.check_smem(arch),
            Family::Reference => Ok(()),
        }
    }

    /// The error for a spec the rules reject.
    fn invalid(&self, reason: String) -> Error {
        Error::InvalidVariant {
            key: self.key(),
            reason,
        }
    }

    /// Decoupled sync's per-thread chunk ownership (a no-op check for other policies): each
    /// thread copies and decodes fixed 16-byte chunks of the 8-bit K and V tiles, dealt in
    /// pairs of rows (portable.cu's `OwnChunks`), which needs 8-bit K/V, head dim <= 128 (the
    /// pipelined decode), and a thread count that divides a tile's chunks evenly. The stream
    /// (persistent) takes 16-bit Q only.
    fn decoupled_fits(&self) -> Result<()> {
        let v = &self.variant;
        if v.sync != SyncPolicy::Decoupled {
            return Ok(());
        }
        if !self.precision.kv_is_8bit() || self.head_dim > 128 {
            return Err(self.invalid(format!(
                "decoupled sync serves 8-bit K/V at head dim 64 or 128, not {} at d{}",
                self.precision.name(),
                self.head_dim
            )));
        }
        if v.persistent && self.precision.q().size() == 1 {
            return Err(self.invalid(format!(
                "the stream (persistent decoupled sync) serves FP8-KV (16-bit Q), not {}: its \
                 per-warp Q loads have no 8-bit decode (retired)",
                self.precision.name()
            )));
        }
        let nt = v.threads();
        let ch8 = self.head_dim / 16;
        if !self.own_chunks_fit() {
            let chunks = self.variant.tile_n * ch8;
            return Err(self.invalid(format!(
                "decoupled sync deals a tile's {chunks} chunks per K or V evenly over {nt} \
                 threads in row pairs; pick tile_n and warps so that {nt} divides {chunks}"
            )));
        }
        Ok(())
    }

    /// Whether a K/V tile's 8-bit 16-byte chunks deal evenly over the computing threads in
    /// pairs of rows (portable.cu's `OWN_FITS`), so that each thread can copy and decode its
    /// own chunks (decoupled sync, split decode).
    fn own_chunks_fit(&self) -> bool {
        self.chunks_fit_over(self.variant.threads())
    }

    /// portable.cu's `own_fits(nt)`: a tile's 8-bit chunks deal evenly over `nt` threads in
    /// pairs of rows whose shifts keep the swizzle.
    fn chunks_fit_over(&self, nt: u32) -> bool {
        let ch8 = self.head_dim / 16;
        let pair = 2 * ch8;
        nt > 0
            && pair > 0
            && (self.variant.tile_n * ch8).is_multiple_of(nt)
            && nt.is_multiple_of(pair)
            && (2 * nt / pair).is_multiple_of(8)
    }

    /// The portable layout must fit the arch's opt-in shared memory.
    fn check_smem(&self, arch: Arch) -> Result<()> {
        let smem = self.dynamic_smem_bytes();
        if smem > arch.smem_optin_limit() {
            return Err(self.invalid(format!(
                "needs {smem} bytes of shared memory, over {arch}'s opt-in limit of {}",
                arch.smem_optin_limit()
            )));
        }
        Ok(())
    }

    /// Hopper family: whether O goes through shared memory and a TMA store (hopper.cu's
    /// `STAGE_O`): where an O tile of `tile_m` rows fits beside the ring in the 227 KB
    /// (232448 bytes) a block may have.
    pub fn hopper_stages_o(&self) -> bool {
        self.variant.family == Family::Hopper
            && self.hopper_ring_bytes() + self.variant.tile_m * 2 * self.head_dim <= 232_448
    }

    /// Hopper family: shared memory without the O tile. hopper.cu (16-bit): Q (tile_m rows)
    /// and `stages` K and V tiles of tile_n rows, 16-bit; two mbarriers for Q and four per
    /// stage; FP8-KV adds `stages` K and V code tiles and four mbarriers per stage.
    /// hopper_fp8.cu: 8-bit Q, and per stage K, raw V and transposed V tiles; two mbarriers
    /// for Q and six per stage. Both: 1024 bytes to round the base up to the
    /// 128-byte swizzle's 1024-byte period.
    fn hopper_ring_bytes(&self) -> u32 {
        let v = &self.variant;
        let d = self.head_dim;
        if self.precision == Precision::Fp8 {
            // Vt keeps 128-key rows: a 64-key tile fills half of each.
            let vt = d * 128 * v.tile_n.div_ceil(128);
            v.tile_m * d + v.stages * (2 * v.tile_n * d + vt) + 8 * (2 + 6 * v.stages) + 1024
        } else {
            // FP8-KV: the codes of K and V land in rings of their own (four more mbarriers per
            // stage) and the producer warpgroup decodes them into the 16-bit tiles.
            let row = 2 * d;
            let codes = if self.precision.is_fp8_kv() {
                2 * v.stages * v.tile_n * d + 8 * 4 * v.stages
            } else {
                0
            };
            v.tile_m * row + 2 * v.stages * v.tile_n * row + codes + 8 * (2 + 4 * v.stages) + 1024
        }
    }

    /// Dynamic shared memory the kernel asks for at launch, in bytes. The kernel derives its
    /// layout from the same defines; this formula must match it.
    pub fn dynamic_smem_bytes(&self) -> u32 {
        let v = &self.variant;
        let d = self.head_dim;
        match v.family {
            Family::Reference => 0,
            Family::Decode => {
                // decode.cu's layout, per warp: `stages` K and V steps of tile_n / warps keys
                // in the K/V storage type (8-bit K/V decode in registers: no staging); at
                // least the warps' merge area (16 x d fp32 of O, 16 maxima, 16 sums).
                let kw = v.tile_n / v.warps;
                let es = if self.precision.kv_is_8bit() { 1 } else { 2 };
                let warp = v.stages * 2 * kw * d * es;
                let merge = 16 * d * 4 + 2 * 16 * 4;
                warp.max(merge) * v.warps
            }
            Family::Hopper => {
                // The ring (hopper_ring_bytes), then a 16-bit O tile of tile_m rows where it
                // fits in the 227 KB a block may have (the TMA-store epilogue).
                let base = self.hopper_ring_bytes();
                if self.hopper_stages_o() {
                    base + v.tile_m * 2 * d
                } else {
                    base
                }
            }
            Family::Portable => {
                // portable.cu's layout: Q tile (16-bit); `stages` K and V tiles in the K/V
                // storage type (16-bit rows padded by 16 bytes unless swizzled, 8-bit rows
                // dense); for 8-bit K/V the 16-bit K and V staging tiles they are decoded
                // into (two pairs with the pipelined decode: stages >= 2, head dim <= 128; four
                // under decoupled sync; two with the split decode's ring of one: head dim 256,
                // cp.async, one stage, tensor-core P·V, no half steps, chunks that deal evenly
                // over the threads); for the scalar P·V baseline an fp32 P tile of tile_n + 4
                // columns; decoupled sync's mbarriers.
                // Persistent decoupled sync keeps two Q tiles unless Q sits in registers.
                let pad = if v.swizzle { 0 } else { 16 };
                let row16 = d * 2 + pad;
                let kv8 = self.precision.kv_is_8bit();
                // 8-bit ring rows are dense.
                let kv_tile = v.tile_n * if kv8 { d } else { row16 };
                // Fragment decode reads the 8-bit ring directly: no staging.
                let staged = kv8 && !v.fragment_decode;
                let pipe_decode = staged && v.stages >= 2 && d <= 128;
                let ring1 = staged
                    && d == 256
                    && v.stages == 1
                    && v.cp_async
                    && v.tc_pv
                    && !v.half_steps
                    && self.own_chunks_fit();
                let decoupled = v.sync == SyncPolicy::Decoupled;
                let staging_bufs = match (staged, pipe_decode || ring1, decoupled) {
                    (false, _, _) => 0,
                    (true, false, _) => 1,
                    (true, true, false) => 2,
                    (true, true, true) => 4,
                };
                let staging = staging_bufs * 2 * v.tile_n * row16;
                let p_tile = if v.tc_pv {
                    0
                } else {
                    v.tile_m * (v.tile_n + 4) * 4
                };
                // Decoupled sync: one 8-byte mbarrier per staging buffer.
                let mbarriers = if decoupled { 8 * staging_bufs } else { 0 };
                // Persistent decoupled sync double-buffers Q (the next work tile's is copied
                // while the current one runs), except where Q sits in registers: 16 rows per
                // computing warp up to D128, and D64 (portable.cu's Q_IN_REGS).
                let rows_per_warp = v.tile_m / v.warps.max(1);
                let q_in_regs = (rows_per_warp == 16 && d <= 128) || d == 64;
                let q_bufs = if decoupled && v.persistent && !q_in_regs {
                    2
                } else {
                    1
                };
                let ring_slots = v.stages;
                // Fragment decode with a bf16 Q: one fp32 row factor per Q row (portable.cu's
                // ROWSC: Q is stored as f16 at a power of two per row).
                let row_scales = if v.fragment_decode && kv8 && self.precision.q() == DType::Bf16 {
                    4 * v.tile_m
                } else {
                    0
                };
                q_bufs * v.tile_m * row16
                    + ring_slots * 2 * kv_tile
                    + staging
                    + p_tile
                    + mbarriers
                    + row_scales
            }
        }
    }

    /// The preprocessor defines, one per field; the only way a spec reaches the kernel.
    pub fn defines(&self) -> Vec<(String, String)> {
        let v = &self.variant;
        let b = |x: bool| u32::from(x).to_string();
        let p = self.precision;
        vec![
            ("SDPA_FAMILY".into(), v.family.code().to_string()),
            ("SDPA_TILE_M".into(), v.tile_m.to_string()),
            ("SDPA_TILE_N".into(), v.tile_n.to_string()),
            ("SDPA_WARPS".into(), v.warps.to_string()),
            ("SDPA_STAGES".into(), v.stages.to_string()),
            ("SDPA_CP_ASYNC".into(), b(v.cp_async)),
            ("SDPA_TC_PV".into(), b(v.tc_pv)),
            ("SDPA_FRAG_DECODE".into(), b(v.fragment_decode)),
            ("SDPA_WARP_SPEC".into(), b(v.warp_spec)),
            ("SDPA_PRODUCER_WARPS".into(), v.producer_warps.to_string()),
            ("SDPA_HALF_STEPS".into(), b(v.half_steps)),
            ("SDPA_PAIRED_ROWS".into(), b(v.paired_rows)),
            ("SDPA_PERSISTENT".into(), b(v.persistent)),
            ("SDPA_OVERLAP".into(), b(v.overlap)),
            ("SDPA_PINGPONG".into(), b(v.pingpong)),
            ("SDPA_FAST_EXP".into(), b(v.fast_exp)),
            ("SDPA_SYNC_POLICY".into(), v.sync.code().to_string()),
            ("SDPA_SWIZZLE".into(), b(v.swizzle)),
            ("SDPA_MIN_BLOCKS".into(), v.min_blocks.to_string()),
            ("SDPA_HEAD_DIM".into(), self.head_dim.to_string()),
            // portable.cu asserts its layout's total against this formula's.
            (
                "SDPA_SMEM_BYTES".into(),
                self.dynamic_smem_bytes().to_string(),
            ),
            ("SDPA_CAUSAL".into(), b(self.causal)),
            ("SDPA_Q_T".into(), p.q().cuda_type().into()),
            ("SDPA_KV_T".into(), p.kv().cuda_type().into()),
            ("SDPA_O_T".into(), p.out().cuda_type().into()),
            ("SDPA_COMPUTE_T".into(), p.compute().cuda_type().into()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_variant() -> impl Strategy<Value = Variant> {
        (
            prop::sample::select(Family::ALL.to_vec()),
            prop::sample::select(vec![4u32, 16, 32, 64, 128, 192, 256]),
            prop::sample::select(vec![16u32, 32, 64, 128, 256]),
            1u32..=16,
            1u32..=4,
            any::<[bool; 13]>(),
            0u32..=4,
            1u32..=4,
        )
            .prop_map(
                |(family, tile_m, tile_n, warps, stages, f, producers, min_blocks)| Variant {
                    family,
                    tile_m,
                    tile_n,
                    warps,
                    stages,
                    cp_async: f[0],
                    tc_pv: f[1],
                    fragment_decode: f[10],
                    warp_spec: producers > 0,
                    producer_warps: producers,
                    half_steps: f[7],
                    paired_rows: f[8],
                    persistent: f[3],
                    overlap: f[11],
                    pingpong: f[12],
                    fast_exp: f[4],
                    sync: match (f[5], f[2]) {
                        (false, _) => SyncPolicy::Block,
                        (true, false) => SyncPolicy::Light,
                        (true, true) => SyncPolicy::Decoupled,
                    },
                    swizzle: f[6],
                    min_blocks,
                },
            )
    }

    proptest! {
        #[test]
        fn key_round_trips(v in any_variant()) {
            let k = v.key();
            prop_assert_eq!(k.parse::<Variant>().unwrap(), v);
        }

        #[test]
        fn valid_variants_keep_their_invariants(v in any_variant()) {
            if v.validate().is_ok() {
                prop_assert!(v.producer_warps < v.warps);
                prop_assert!(v.threads() <= 512);
                prop_assert!(v.register_budget() >= 8 && v.register_budget() <= 255);
                if v.family == Family::Portable {
                    prop_assert!(v.stages == 1 || v.cp_async);
                    prop_assert!(!v.persistent || v.sync == SyncPolicy::Decoupled);
                    prop_assert_eq!(v.tile_m % 16, 0);
                }
                if v.family == Family::Reference {
                    prop_assert_eq!(v.tile_m, v.warps);
                    prop_assert!(!v.cp_async && !v.tc_pv && !v.persistent && !v.fast_exp && !v.swizzle);
                }
            }
        }

        #[test]
        fn distinct_specs_have_distinct_defines(a in any_variant(), b in any_variant(), ca: bool, cb: bool) {
            let sa = KernelSpec { variant: a, precision: Precision::F16, head_dim: 64, causal: ca };
            let sb = KernelSpec { variant: b, precision: Precision::F16, head_dim: 64, causal: cb };
            prop_assert_eq!(sa == sb, sa.defines() == sb.defines());
            prop_assert_eq!(sa == sb, sa.key() == sb.key());
        }
    }

    #[test]
    fn each_field_has_one_define() {
        let s = KernelSpec {
            variant: Variant::reference(),
            precision: Precision::Fp8,
            head_dim: 128,
            causal: true,
        };
        let d = s.defines();
        let names: std::collections::HashSet<_> = d.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(names.len(), d.len(), "duplicate define");
        // 19 variant fields + head dim + causal + 4 types, and the shared-memory total the
        // kernels check their layout against (derived, not a field).
        assert_eq!(d.len(), 26);
        assert!(d.contains(&("SDPA_Q_T".into(), "e4m3_t".into())));
        assert!(d.contains(&("SDPA_O_T".into(), "bf16_t".into())));
    }

    /// The spec of variant `key` for one problem class.
    fn spec_of(key: &str, precision: Precision, head_dim: u32, causal: bool) -> KernelSpec {
        KernelSpec {
            variant: key.parse().unwrap(),
            precision,
            head_dim,
            causal,
        }
    }

    #[test]
    fn fragment_decode_reads_the_ring_without_staging() {
        // Q (16-bit, swizzled rows) + `stages` 8-bit K/V slots, no staging; a bf16 Q adds one
        // fp32 row factor per row. 8-bit K/V at D64 and D128 only, and not with staging's knobs.
        let spec = |key: &str, p: Precision, head_dim: u32| spec_of(key, p, head_dim, true);
        let key = "portable.m128.n64.w4.s2.b2.ctfhelx";
        let q = 128 * 256;
        let ring = 2 * 2 * 64 * 128;
        assert_eq!(
            spec(key, Precision::Fp8KvF16, 128).dynamic_smem_bytes(),
            q + ring
        );
        assert_eq!(
            spec(key, Precision::Fp8, 128).dynamic_smem_bytes(),
            q + ring
        );
        assert_eq!(
            spec(key, Precision::Fp8KvBf16, 128).dynamic_smem_bytes(),
            q + ring + 4 * 128
        );
        assert!(spec(key, Precision::Fp8KvF16, 64)
            .validate(Arch::Sm90a)
            .is_ok());
        // D256 at 16 rows per warp only (32 rows of O there leave no registers for it).
        let d256 = "portable.m64.n64.w4.s2.b2.ctfelx";
        assert!(spec(d256, Precision::Fp8KvBf16, 256)
            .validate(Arch::Sm80)
            .is_ok());
        assert_eq!(
            spec(d256, Precision::Fp8KvF16, 256).dynamic_smem_bytes(),
            64 * 512 + 2 * 2 * 64 * 256
        );
        for (p, d) in [(Precision::F16, 128), (Precision::Fp8KvF16, 256)] {
            let e = spec(key, p, d)
                .validate(Arch::Sm80)
                .unwrap_err()
                .to_string();
            assert!(e.contains("fragment_decode serves 8-bit K/V"), "{e}");
        }
        for bad in [
            "portable.m128.n64.w4.s3.b2.ctfhedx",
            "portable.m128.n64.w4.s2.b2.ctfhel",
            "portable.m128.n64.w5.s2.b2.ctfw1hel",
            "portable.m128.n64.w4.s2.b2.cfhelx",
        ] {
            let v: Variant = bad.parse().unwrap();
            assert!(v.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn ring_of_one_takes_two_staging_pairs() {
        // 8-bit K/V at D256, cp.async, one stage, tensor-core P·V: Q + one 8-bit K/V slot +
        // two 16-bit staging pairs. Without cp.async (the seeds' plain loads), or below D256
        // (the serial decode), one staging pair.
        let spec_d = |key: &str, p: Precision, head_dim: u32| spec_of(key, p, head_dim, false);
        let spec = |key: &str, p: Precision| spec_d(key, p, 256);
        let d128 = spec_d("portable.m128.n64.w8.s1.b1.ctelx", Precision::Fp8KvF16, 128);
        assert_eq!(
            d128.dynamic_smem_bytes(),
            128 * 256 + 2 * 64 * 128 + 2 * 64 * 256
        );
        let (q, slot8, pair) = (128 * 512, 2 * 64 * 256, 2 * 64 * 512);
        let ring1 = spec("portable.m128.n64.w8.s1.b1.ctelx", Precision::Fp8KvF16);
        assert_eq!(ring1.dynamic_smem_bytes(), q + slot8 + 2 * pair);
        let plain = spec("portable.m128.n64.w8.s1.b1.tlx", Precision::Fp8KvF16);
        assert_eq!(plain.dynamic_smem_bytes(), q + slot8 + pair);
        let f16 = spec("portable.m128.n64.w8.s1.b1.ctelx", Precision::F16);
        assert_eq!(f16.dynamic_smem_bytes(), q + 2 * 64 * 512);
    }

    #[test]
    fn each_family_sets_only_its_own_knobs() {
        for (key, family) in [
            ("portable.m128.n64.w4.s2.b2.ctoelx", "portable"),
            ("portable.m128.n64.w4.s2.b2.ctgelx", "portable"),
            ("hopper.m128.n128.w12.s2.b1.w4hex", "hopper"),
            ("hopper.m128.n128.w12.s2.b1.w4rex", "hopper"),
            ("hopper.m128.n128.w12.s2.b1.w4edx", "hopper"),
            ("decode.m16.n64.w4.s3.b2.ctex", "decode"),
            ("decode.m16.n64.w4.s3.b2.cfex", "decode"),
            ("reference.m4.n32.w4.s1.b1.e", "reference"),
        ] {
            let v: Variant = key.parse().unwrap();
            let e = v.validate().unwrap_err().to_string();
            assert!(
                e.contains(&format!("not a knob of the {family} family")),
                "{key}: {e}"
            );
        }
        for v in crate::kernels::registry::variants() {
            let key = v.key();
            let flags = key.rsplit('.').next().unwrap();
            assert!(
                flags
                    .chars()
                    .filter(char::is_ascii_alphabetic)
                    .all(|c| v.family.knob_flags().contains(c)),
                "{key}"
            );
        }
    }

    #[test]
    fn the_portable_family_has_no_warp_specialization() {
        for key in [
            "portable.m128.n64.w12.s1.b1.ctw4elx",
            "portable.m64.n64.w6.s2.b1.ctw2pelx",
        ] {
            let v: Variant = key.parse().unwrap();
            let e = v.validate().unwrap_err().to_string();
            assert!(
                e.contains("not a knob of the portable family"),
                "{key}: {e}"
            );
        }
    }

    #[test]
    fn json_without_paired_rows_parses_as_unpaired() {
        let v: Variant = "portable.m256.n32.w8.s4.b1.ctedx".parse().unwrap();
        let mut j = serde_json::to_value(v).unwrap();
        j.as_object_mut().unwrap().remove("paired_rows").unwrap();
        let back: Variant = serde_json::from_value(j).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn rules_reject_with_reasons() {
        fn reason<T: std::fmt::Debug>(r: Result<T>) -> String {
            r.unwrap_err().to_string()
        }
        let mut v = Variant::reference();
        v.fast_exp = true;
        assert!(reason(v.validate()).contains("neutral"));
        let v = Variant {
            warps: 17,
            ..Variant::reference()
        };
        assert!(reason(v.validate()).contains("warps"));
        assert!("portable.m64".parse::<Variant>().is_err());
        assert!(reason("portable.m64.n64.w4.s2.b1.cz".parse::<Variant>()).contains("unknown flag"));
        assert!(
            "portable.m64.n64.w4.s2.b1.tc".parse::<Variant>().is_err(),
            "non-canonical order"
        );
        let spec = KernelSpec {
            variant: Variant::reference(),
            precision: Precision::F16,
            head_dim: 96,
            causal: false,
        };
        assert!(reason(spec.validate(Arch::Sm80)).contains("head_dim"));
        // Decoupled sync: 8-bit K/V at D <= 128, >= 3 stages, chunks that deal evenly.
        let dec: Variant = "portable.m256.n32.w8.s4.b1.ctedx".parse().unwrap();
        let ok = KernelSpec {
            variant: dec,
            precision: Precision::Fp8KvF16,
            head_dim: 128,
            causal: true,
        };
        assert!(ok.validate(Arch::Sm90a).is_ok());
        let f16 = KernelSpec {
            precision: Precision::F16,
            ..ok
        };
        assert!(reason(f16.validate(Arch::Sm90a)).contains("8-bit K/V"));
        let d256 = KernelSpec {
            head_dim: 256,
            ..ok
        };
        assert!(d256.validate(Arch::Sm90a).is_err());
        let uneven = KernelSpec { head_dim: 64, ..ok };
        assert!(reason(uneven.validate(Arch::Sm90a)).contains("evenly"));
        // The stream (persistent decoupled sync): 16-bit Q only, and only with decoupled sync.
        let stream = KernelSpec {
            variant: "portable.m256.n32.w8.s4.b1.ctpedx".parse().unwrap(),
            ..ok
        };
        assert!(stream.validate(Arch::Sm90a).is_ok());
        for q8 in [Precision::Fp8, Precision::SimFp8] {
            let s = KernelSpec {
                precision: q8,
                ..stream
            };
            assert!(reason(s.validate(Arch::Sm90a)).contains("16-bit Q"));
        }
        let grid: Variant = "portable.m64.n64.w4.s3.b2.ctpe".parse().unwrap();
        assert!(reason(grid.validate()).contains("persistent needs decoupled"));
        let two_stages: Variant = "portable.m256.n32.w8.s2.b1.ctedx".parse().unwrap();
        assert!(reason(two_stages.validate()).contains("stages >= 3"));
        // Paired rows: 32 rows per warp, tensor-core P·V, the causal skip's sync, no stream.
        assert!("portable.m256.n32.w8.s4.b1.ctredx"
            .parse::<Variant>()
            .unwrap()
            .validate()
            .is_ok());
        for bad in [
            "portable.m64.n64.w4.s2.b2.ctrelx",   // 16 rows per warp
            "portable.m128.n64.w4.s2.b2.crelx",   // scalar P·V
            "portable.m128.n64.w4.s2.b2.ctrex",   // block barriers
            "portable.m256.n32.w8.s4.b1.ctrpedx", // the stream
        ] {
            let v: Variant = bad.parse().unwrap();
            assert!(reason(v.validate()).contains("paired_rows"), "{bad}");
        }
    }

    /// The FP8-KV decoder converts 128 / (D / 16) rows a pass: a tile_n it cannot cover was
    /// accepted (n48 at d64 failed to compile, n80 at d128 computed garbage before the
    /// decoder's short last batch).
    #[test]
    fn hopper_fp8kv_tiles_fit_the_decoder() {
        for (n, d, ok) in [
            (48, 64, false),
            (80, 64, false),
            (96, 64, true),
            (80, 128, true),
            (48, 128, true),
            (128, 128, true),
        ] {
            let s = KernelSpec {
                variant: format!("hopper.m128.n{n}.w12.s2.b1.w4ogex")
                    .parse()
                    .unwrap(),
                precision: Precision::Fp8KvF16,
                head_dim: d,
                causal: false,
            };
            let r = s.validate(Arch::Sm90a);
            assert_eq!(r.is_ok(), ok, "n{n} d{d}: {r:?}");
            if let Err(e) = r {
                assert!(e.to_string().contains("rows per pass"), "{e}");
            }
        }
    }

    #[test]
    fn hopper_fp8kv_serves_d64_and_d128_only() {
        for (d, ok) in [(64, true), (128, true), (256, false)] {
            let s = KernelSpec {
                variant: "hopper.m128.n64.w12.s2.b1.w4ogex".parse().unwrap(),
                precision: Precision::Fp8KvBf16,
                head_dim: d,
                causal: true,
            };
            match s.validate(Arch::Sm90a) {
                Ok(()) => assert!(ok, "d{d} passed"),
                Err(e) => {
                    assert!(!ok, "d{d}: {e}");
                    assert!(e
                        .to_string()
                        .contains("FP8-KV decode serves head dims 64 and 128"));
                }
            }
        }
    }
}
