//! Every automatic kernel choice: the variant a call runs under `KernelChoice::Auto`, for
//! contiguous, paged and variable-length calls and the problem classes' defaults.
//!
//! One ordered, first-match table decides ([`RULES`], in `rules.rs`): each [`Rule`] has a
//! name, a condition on the [`Call`], the variant it picks and one line of why with a pointer
//! into `docs/perf-notes.md` (a section title, its round and run numbers dropped). The first
//! rule whose condition holds picks. In order:
//!
//! 1. `tuned`: the tuned table's entry for the call's class and shape bucket, resolved before
//!    the table ([`TunedTable::resolve`]: the user's bucket entry, the user's class-wide one,
//!    the shipped bucket entry, the shipped class-wide one); contiguous and paged calls only;
//! 2. the decode family for decode-shaped calls and every paged cache;
//! 3. the grid rules: a smaller tile where the pick of the rules below would leave SMs idle;
//! 4. the length rules (sequence length, causal), then the variable-length calls' own rules;
//! 5. the class rules: one variant per arch, precision, head dim and mask.
//!
//! `docs/dispatch-table.md` is the table's output over arch x precision x head dim x mask x
//! length x grid, written by a test (`dispatch_table_is_current`), so a rule change shows as
//! rows of that file. `tests/data/dispatch-picks.txt` holds four million picks over a denser
//! grid (`dispatch_picks_match_the_fixture`).

mod rules;

pub use rules::RULES;

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::error::Result;
use crate::problem::AttnShape;
use crate::tuned::{ShapeBucket, ShapeClass, TunedTable};
use crate::variant::{KernelSpec, Variant};
use std::collections::HashMap;
use std::sync::LazyLock;

/// Which kind of call asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Contiguous K/V, one length for the batch ([`choose`]).
    Dense,
    /// A paged K/V cache ([`choose_paged`]).
    Paged,
    /// Packed variable-length sequences over contiguous K/V ([`varlen`]).
    Varlen,
    /// Packed variable-length queries over a paged cache ([`varlen_paged`]).
    VarlenPaged,
    /// No call: a problem class's default ([`class_default`], the tuner's baseline).
    Class,
}

/// What the rules see of a call.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// The kind of call.
    pub path: Path,
    /// The device's arch.
    pub arch: Arch,
    /// Types of Q, K/V and O.
    pub precision: Precision,
    /// Head dimension.
    pub head_dim: u32,
    /// Causal mask.
    pub causal: bool,
    /// The shape (for a varlen call the sequences as the batch and the longest lengths);
    /// `None` where the choice reads no shape.
    pub shape: Option<AttnShape>,
    /// SMs the call may use.
    pub sm_count: u32,
    /// The tuned table's entry for the call's class and bucket, if any.
    pub tuned: Option<Variant>,
    /// Set while a grid rule asks what the call runs on a grid that fills the GPU: the grid
    /// rules stand aside.
    pub full_grid: bool,
}

/// What a rule picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The registered variant of this key.
    Key(&'static str),
    /// The tuned table's entry ([`Call::tuned`]).
    Tuned,
    /// Nothing: no family serves the call.
    Refuse,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Short name, unique in the table (the golden table's last column).
    pub name: &'static str,
    /// Whether the rule takes the call.
    pub when: fn(&Call) -> bool,
    /// What it picks.
    pub pick: Pick,
    /// One line of why, and where the evidence is.
    pub why: &'static str,
}

impl Call {
    /// A call of `path` with no tuned entry, on a grid the rules test against `sm_count`.
    pub fn new(
        path: Path,
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        causal: bool,
        shape: Option<AttnShape>,
        sm_count: u32,
    ) -> Call {
        Call {
            path,
            arch,
            precision,
            head_dim,
            causal,
            shape,
            sm_count,
            tuned: None,
            full_grid: false,
        }
    }

    /// The first rule that takes the call, and its variant (`None` for [`Pick::Refuse`]).
    pub fn decide(&self) -> (&'static Rule, Option<Variant>) {
        // The last rule takes every call, so the search always ends on a rule.
        let rule = RULES
            .iter()
            .find(|r| (r.when)(self))
            .unwrap_or(&RULES[RULES.len() - 1]);
        let v = match rule.pick {
            Pick::Key(k) => Some(variant_of(k)),
            Pick::Tuned => self.tuned,
            Pick::Refuse => None,
        };
        (rule, v)
    }

    fn on(&self, paths: &[Path]) -> bool {
        paths.contains(&self.path)
    }
    fn hopper(&self) -> bool {
        self.arch == Arch::Sm90a
    }
    /// sm_86 / sm_89: 99 KB of shared memory per block.
    fn small_smem(&self) -> bool {
        matches!(self.arch, Arch::Sm86 | Arch::Sm89)
    }
    fn sixteen_bit(&self) -> bool {
        matches!(self.precision, Precision::F16 | Precision::Bf16)
    }
    fn fp8kv(&self) -> bool {
        self.precision.is_fp8_kv()
    }
    fn kv8(&self) -> bool {
        self.precision.kv_is_8bit()
    }
    fn full_fp8(&self) -> bool {
        self.precision == Precision::Fp8
    }
    fn simfp8(&self) -> bool {
        self.precision == Precision::SimFp8
    }
    fn d(&self, head_dim: u32) -> bool {
        self.head_dim == head_dim
    }
    /// The query length (0 without a shape).
    fn seq_q(&self) -> usize {
        self.shape.map_or(0, |s| s.seq_q)
    }
    /// Decode-shaped ([`AttnShape::is_decode`]).
    fn decode_shaped(&self) -> bool {
        self.shape.is_some_and(|s| s.is_decode())
    }
    /// The precisions the decode family serves: fp16/bf16 Q with 16-bit or E4M3 K/V.
    fn decode_serves(&self) -> bool {
        matches!(
            self.precision,
            Precision::F16 | Precision::Bf16 | Precision::Fp8KvF16 | Precision::Fp8KvBf16
        )
    }
    /// Whether `key` validates for the call's class on its arch (under its mask, or
    /// unmasked when `causal` is false).
    fn fits_as(&self, key: &str, causal: bool) -> bool {
        KernelSpec {
            variant: variant_of(key),
            precision: self.precision,
            head_dim: self.head_dim,
            causal,
        }
        .validate(self.arch)
        .is_ok()
    }
    fn fits(&self, key: &str) -> bool {
        self.fits_as(key, self.causal)
    }
    /// Blocks of `rows`-row tiles over the shape's queries (geometry.rs's grid for a
    /// non-persistent variant; the work tiles of a persistent one).
    fn blocks(&self, rows: u32) -> u64 {
        self.shape.map_or(0, |s| {
            s.seq_q.div_ceil(rows.max(1) as usize) as u64 * s.heads_q as u64 * s.batch as u64
        })
    }
    /// A grid rule's test: what the rules below the grid rules pick has tiles taller than 64
    /// rows and fewer of them than SMs.
    fn short_grid(&self) -> bool {
        if self.full_grid || self.shape.is_none() {
            return false;
        }
        let full = Call {
            full_grid: true,
            ..*self
        };
        match full.decide().1 {
            Some(v) => v.tile_m > 64 && self.blocks(v.tile_m) < u64::from(self.sm_count),
            None => false,
        }
    }
}

/// The variant of a key the rules name. Every key is a registered variant's, parsed by the
/// tests (`every_rule_key_parses`), so a failure here is a defect in this file. The registered
/// variants are parsed once, into a map: parsing a key formats it again to check that it is
/// canonical, which made a call's choice cost about a microsecond.
fn variant_of(key: &str) -> Variant {
    static REGISTERED: LazyLock<HashMap<String, Variant>> = LazyLock::new(|| {
        crate::kernels::registry::variants()
            .into_iter()
            .map(|v| (v.key(), v))
            .collect()
    });
    REGISTERED.get(key).copied().unwrap_or_else(|| {
        key.parse()
            .unwrap_or_else(|e| panic!("dispatch rule key {key}: {e}"))
    })
}

/// The tuned entry for a contiguous (`paged` false) or paged call, from `user` then
/// `shipped` (see [`TunedTable::resolve_in`]).
fn tuned_for(
    tables: (Option<&TunedTable>, &TunedTable),
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
    paged: bool,
) -> Option<Variant> {
    let class = if paged {
        ShapeClass::Decode
    } else {
        ShapeClass::of(shape, causal)
    };
    let bucket = ShapeBucket::of(shape, class, sm_count, paged);
    let head_dim = shape.head_dim as u32;
    TunedTable::resolve_in(tables.0, tables.1, arch, precision, head_dim, class, bucket)
}

/// The variant the library runs for this problem (contiguous K/V) on a device with
/// `sm_count` SMs when the caller does not choose: the tuned entry for the call's class and
/// [`ShapeBucket`] (the user's table before the shipped one, the bucket's entry before the
/// class-wide one), else the first rule of [`RULES`] that takes it. Fails only on a user
/// tuned table that does not parse.
pub fn choose(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> Result<Variant> {
    let tables = (TunedTable::user()?, TunedTable::shipped());
    Ok(choose_in(tables, arch, precision, shape, causal, sm_count).1)
}

/// [`choose`] against the given tables, with the rule that decided.
pub fn choose_in(
    tables: (Option<&TunedTable>, &TunedTable),
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> (&'static Rule, Variant) {
    let mut call = Call::new(
        Path::Dense,
        arch,
        precision,
        shape.head_dim as u32,
        causal,
        Some(*shape),
        sm_count,
    );
    call.tuned = tuned_for(tables, arch, precision, shape, causal, sm_count, false);
    decided(&call)
}

/// The variant a paged-cache call runs when the caller does not choose: the tuned decode
/// entry for its bucket (`small-paged` or `large-paged`, then class-wide; only the decode
/// family reads a paged cache, so an entry of another family is passed over), else the
/// decode family's tile that fits. Fails only on a user tuned table that does not parse.
pub fn choose_paged(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    sm_count: u32,
) -> Result<Variant> {
    let tables = (TunedTable::user()?, TunedTable::shipped());
    Ok(choose_paged_in(tables, arch, precision, shape, sm_count).1)
}

/// [`choose_paged`] against the given tables, with the rule that decided.
pub fn choose_paged_in(
    tables: (Option<&TunedTable>, &TunedTable),
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    sm_count: u32,
) -> (&'static Rule, Variant) {
    let mut call = Call::new(
        Path::Paged,
        arch,
        precision,
        shape.head_dim as u32,
        false,
        Some(*shape),
        sm_count,
    );
    call.tuned = tuned_for(tables, arch, precision, shape, false, sm_count, true);
    decided(&call)
}

/// The variant a variable-length call over contiguous K/V runs under `Auto`: the decode
/// family when `shape` (the sequences as the batch, the longest lengths) is decode-shaped
/// and the family serves the call, else the varlen rules (tuned tables are not consulted:
/// they were measured on dense batches). `shape` `None`: the non-decode choice for the
/// class.
pub fn varlen(
    arch: Arch,
    precision: Precision,
    head_dim: u32,
    causal: bool,
    shape: Option<&AttnShape>,
) -> Variant {
    let call = Call::new(
        Path::Varlen,
        arch,
        precision,
        head_dim,
        causal,
        shape.copied(),
        0,
    );
    decided(&call).1
}

/// The variant a variable-length call over a paged cache runs under `Auto`, or `None` when
/// the decode family (the only one that reads a paged cache) does not serve the precision.
pub fn varlen_paged(arch: Arch, precision: Precision, head_dim: u32) -> Option<Variant> {
    Call::new(Path::VarlenPaged, arch, precision, head_dim, false, None, 0)
        .decide()
        .1
}

/// A problem class's default, before any rule on its shape: what the tuner measures as its
/// baseline.
pub fn class_default(arch: Arch, precision: Precision, head_dim: u32, causal: bool) -> Variant {
    let call = Call::new(Path::Class, arch, precision, head_dim, causal, None, 0);
    decided(&call).1
}

/// The rule table's pick for `shape` with no tuned table (the tuner's and the registry
/// tests' view of the shipped rules).
pub fn default_for_shape(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> Variant {
    let call = Call::new(
        Path::Dense,
        arch,
        precision,
        shape.head_dim as u32,
        causal,
        Some(*shape),
        sm_count,
    );
    decided(&call).1
}

/// The decode family's variant for a paged call with no tuned entry.
pub fn paged_default(arch: Arch, precision: Precision, head_dim: u32) -> Variant {
    let call = Call::new(Path::Paged, arch, precision, head_dim, false, None, 0);
    decided(&call).1
}

/// The decided rule and its variant, for a path whose rules never refuse.
fn decided(call: &Call) -> (&'static Rule, Variant) {
    match call.decide() {
        (rule, Some(v)) => (rule, v),
        // Only `varlen_paged` reaches a refusing rule, and only a tuned rule picks from the
        // table, which it takes only when the entry is there.
        (rule, None) => unreachable!("dispatch rule {} picked nothing", rule.name),
    }
}

#[cfg(test)]
mod fixture;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod tests;
