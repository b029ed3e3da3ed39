//! Tuned tables: the variant `sdpa-lab tune` measured fastest per (arch, precision, head dim,
//! shape class, and optionally [`ShapeBucket`]), which dispatch runs before the registry's
//! hand-picked defaults.
//!
//! Two tables are read: the one shipped in the crate (`tuned/default.json`) and the user's,
//! at `$SDPA_TUNED_TABLE` or else `<config dir>/fp8-sdpa/tuned.json` (on Linux
//! `~/.config/fp8-sdpa/tuned.json`), whose entries override the shipped ones. A table is JSON:
//!
//! ```json
//! { "entries": [ { "arch": "sm_90a", "precision": "f16", "head_dim": 128,
//!                  "shape_class": "prefill", "variant": "hopper.m128.n128.w12.s2.b1.w4pogex",
//!                  "tflops": 640.0, "note": "sdpa-lab tune, 2026-11-25" },
//!                { "arch": "sm_90a", "precision": "f16", "head_dim": 128,
//!                  "shape_class": "prefill", "bucket": "long",
//!                  "variant": "hopper.m128.n192.w12.s2.b1.w4pogex" } ] }
//! ```
//!
//! An entry without `bucket` covers its whole class; one with a bucket only the calls of that
//! bucket. Dispatch resolves, first found wins: the user's entry for the call's bucket, the
//! user's class-wide entry, the shipped entry for the bucket, the shipped class-wide entry,
//! then the registry's default (see [`TunedTable::resolve`]).
//!
//! ```
//! use fp8_sdpa::tuned::{ShapeClass, TunedTable};
//! use fp8_sdpa::{Arch, Precision};
//! let t = TunedTable::parse(r#"{"entries": [{"arch": "sm_90a", "precision": "f16",
//!     "head_dim": 128, "shape_class": "prefill",
//!     "variant": "hopper.m128.n128.w12.s2.b1.w4pogex"}]}"#).unwrap();
//! let v = t.lookup(Arch::Sm90a, Precision::F16, 128, ShapeClass::Prefill).unwrap();
//! assert_eq!(v.key(), "hopper.m128.n128.w12.s2.b1.w4pogex");
//! assert!(TunedTable::parse(r#"{"entries": [{"arch": "sm_42"}]}"#).is_err());
//! // A bucket must be one of its class's.
//! assert!(TunedTable::parse(r#"{"entries": [{"arch": "sm_90a", "precision": "f16",
//!     "head_dim": 128, "shape_class": "prefill", "bucket": "small-paged",
//!     "variant": "hopper.m128.n128.w12.s2.b1.w4pogex"}]}"#).is_err());
//! ```

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::error::{Error, Result};
use crate::problem::AttnShape;
use crate::variant::{KernelSpec, Variant, HEAD_DIMS};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Environment variable naming the user's tuned table.
pub const TABLE_ENV: &str = "SDPA_TUNED_TABLE";
/// Largest table file read (4 MiB; a table with an entry for every key is well under 1 MiB).
pub const MAX_TABLE_BYTES: u64 = 4 << 20;

/// What a call looks like to the tuner: the classes it tunes separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShapeClass {
    /// Non-causal, not decode-shaped.
    Prefill,
    /// Causal, not decode-shaped.
    Causal,
    /// At most 64 query rows per kv head (one new token, or a few under speculative
    /// decoding, times the GQA group) against 1k keys or more: see [`AttnShape::is_decode`].
    Decode,
}

impl ShapeClass {
    /// Every class.
    pub const ALL: [ShapeClass; 3] = [ShapeClass::Prefill, ShapeClass::Causal, ShapeClass::Decode];

    /// The class of a call.
    pub fn of(shape: &AttnShape, causal: bool) -> ShapeClass {
        if shape.is_decode() {
            ShapeClass::Decode
        } else if causal {
            ShapeClass::Causal
        } else {
            ShapeClass::Prefill
        }
    }

    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ShapeClass::Prefill => "prefill",
            ShapeClass::Causal => "causal",
            ShapeClass::Decode => "decode",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<ShapeClass> {
        ShapeClass::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// A finer key than [`ShapeClass`]: the part of a class one tuned entry can serve.
///
/// Why: one entry per (arch, precision, head dim, class) could not serve the whole class on
/// the H100 (docs/perf-notes.md, "Tuner on the GPU"). The decode FP8-KV winner
/// was 10-15 % faster than the default at batch 1-4 with long caches but 17-30 % slower on
/// paged-cache calls and 6-14 % slower at B32 GQA 4; the Hopper prefill winner (192-key tile)
/// was 4-6 % faster at S 16k but 6-7 % slower at S 1k. So nothing could ship. Buckets split
/// each class where those winners changed:
///
/// - prefill and causal, by query length: `short` (seq_q <= 1536), `mid` (<= 6144), `long`;
/// - decode, by whether the grid fills the GPU (`small`: batch x heads_kv x
///   ceil(rows_per_kv_head / 16) CTAs before any split along the keys, fewer than the SMs;
///   else `large`) crossed with whether K/V are `paged` or `contiguous`.
///
/// ```
/// use fp8_sdpa::tuned::{ShapeBucket, ShapeClass};
/// use fp8_sdpa::AttnShape;
/// let b1 = AttnShape::new(1, 1, 131072, 32, 8, 128);
/// assert_eq!(ShapeBucket::of(&b1, ShapeClass::Decode, 132, true), ShapeBucket::SmallPaged);
/// let s1k = AttnShape::new(16, 1024, 1024, 16, 16, 128);
/// assert_eq!(ShapeBucket::of(&s1k, ShapeClass::Prefill, 132, false), ShapeBucket::Short);
/// assert_eq!(ShapeBucket::SmallPaged.name(), "small-paged");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShapeBucket {
    /// Prefill or causal, seq_q <= 1536.
    Short,
    /// Prefill or causal, 1536 < seq_q <= 6144.
    Mid,
    /// Prefill or causal, seq_q > 6144.
    Long,
    /// Decode, fewer CTAs than SMs before the key split, paged K/V.
    SmallPaged,
    /// Decode, fewer CTAs than SMs before the key split, contiguous K/V.
    SmallContiguous,
    /// Decode, the grid fills the SMs without a key split, paged K/V.
    LargePaged,
    /// Decode, the grid fills the SMs without a key split, contiguous K/V.
    LargeContiguous,
}

impl ShapeBucket {
    /// Every bucket.
    pub const ALL: [ShapeBucket; 7] = [
        ShapeBucket::Short,
        ShapeBucket::Mid,
        ShapeBucket::Long,
        ShapeBucket::SmallPaged,
        ShapeBucket::SmallContiguous,
        ShapeBucket::LargePaged,
        ShapeBucket::LargeContiguous,
    ];
    /// Longest query of a `short` call.
    pub const SHORT_MAX_SEQ_Q: usize = 1536;
    /// Longest query of a `mid` call.
    pub const MID_MAX_SEQ_Q: usize = 6144;
    /// Query rows per decode CTA (the decode family packs 16).
    pub const DECODE_ROWS_PER_CTA: usize = 16;

    /// The bucket of a call of class `class` on a GPU of `sm_count` SMs; `paged` says whether
    /// K/V are a paged cache (decode only; prefill buckets ignore it).
    pub fn of(shape: &AttnShape, class: ShapeClass, sm_count: u32, paged: bool) -> ShapeBucket {
        match class {
            ShapeClass::Prefill | ShapeClass::Causal => {
                if shape.seq_q <= Self::SHORT_MAX_SEQ_Q {
                    ShapeBucket::Short
                } else if shape.seq_q <= Self::MID_MAX_SEQ_Q {
                    ShapeBucket::Mid
                } else {
                    ShapeBucket::Long
                }
            }
            ShapeClass::Decode => {
                let ctas = shape.batch
                    * shape.heads_kv
                    * shape.rows_per_kv_head().div_ceil(Self::DECODE_ROWS_PER_CTA);
                match (ctas < sm_count as usize, paged) {
                    (true, true) => ShapeBucket::SmallPaged,
                    (true, false) => ShapeBucket::SmallContiguous,
                    (false, true) => ShapeBucket::LargePaged,
                    (false, false) => ShapeBucket::LargeContiguous,
                }
            }
        }
    }

    /// The buckets of a class.
    pub fn of_class(class: ShapeClass) -> &'static [ShapeBucket] {
        match class {
            ShapeClass::Prefill | ShapeClass::Causal => &Self::ALL[..3],
            ShapeClass::Decode => &Self::ALL[3..],
        }
    }

    /// Whether this bucket splits `class`.
    pub fn belongs_to(self, class: ShapeClass) -> bool {
        Self::of_class(class).contains(&self)
    }

    /// Name, as tables and `sdpa-lab tune --bucket` write it.
    pub fn name(self) -> &'static str {
        match self {
            ShapeBucket::Short => "short",
            ShapeBucket::Mid => "mid",
            ShapeBucket::Long => "long",
            ShapeBucket::SmallPaged => "small-paged",
            ShapeBucket::SmallContiguous => "small-contiguous",
            ShapeBucket::LargePaged => "large-paged",
            ShapeBucket::LargeContiguous => "large-contiguous",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<ShapeBucket> {
        ShapeBucket::ALL.into_iter().find(|b| b.name() == s)
    }

    /// The names of a class's buckets, comma separated.
    pub fn names_of(class: ShapeClass) -> String {
        Self::of_class(class)
            .iter()
            .map(|b| b.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a bucket name for `class`: an unknown name, or a bucket of another class, is an
    /// [`Error::InvalidInput`] that names the class's buckets.
    pub fn parse_for(class: ShapeClass, s: &str) -> Result<ShapeBucket> {
        match Self::parse(s) {
            Some(b) if b.belongs_to(class) => Ok(b),
            Some(b) => Err(Error::InvalidInput(format!(
                "bucket '{}' is not a bucket of the {} class (valid: {})",
                b.name(),
                class.name(),
                Self::names_of(class)
            ))),
            None => Err(Error::InvalidInput(format!(
                "unknown bucket '{s}' (valid for the {} class: {})",
                class.name(),
                Self::names_of(class)
            ))),
        }
    }
}

impl std::fmt::Display for ShapeBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunedEntry {
    /// `sm_80`, `sm_86`, `sm_89` or `sm_90a`.
    pub arch: String,
    /// Precision path name (`f16`, `bf16`, `fp8kv_f16`, ...).
    pub precision: String,
    /// 64, 128 or 256.
    pub head_dim: u32,
    /// `prefill`, `causal` or `decode`.
    pub shape_class: String,
    /// A [`ShapeBucket`] of the class (`short`, `mid`, `long` for prefill and causal;
    /// `small-paged`, `small-contiguous`, `large-paged`, `large-contiguous` for decode), or
    /// absent: the entry covers the whole class. Tables written before buckets have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// A variant key, as `check --variant` takes it.
    pub variant: String,
    /// What the tuner measured (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    /// Where the entry came from (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    entries: Vec<TunedEntry>,
}

/// A checked entry.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Checked {
    arch: Arch,
    precision: Precision,
    head_dim: u32,
    class: ShapeClass,
    bucket: Option<ShapeBucket>,
    variant: Variant,
}

/// A parsed and checked tuned table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TunedTable {
    entries: Vec<TunedEntry>,
    checked: Vec<Checked>,
}

impl Checked {
    /// What an entry is for: at most one entry per key (one class-wide entry and one per
    /// bucket).
    fn class_key(&self) -> (Arch, Precision, u32, ShapeClass, Option<ShapeBucket>) {
        (
            self.arch,
            self.precision,
            self.head_dim,
            self.class,
            self.bucket,
        )
    }
}

/// Checks one entry: every field known, the variant valid for its class on its arch.
fn check_entry(e: &TunedEntry) -> std::result::Result<Checked, String> {
    let arch: Arch = e.arch.parse().map_err(|x: Error| x.to_string())?;
    let precision = Precision::ALL
        .into_iter()
        .find(|p| p.name() == e.precision)
        .ok_or_else(|| format!("unknown precision '{}'", e.precision))?;
    if !HEAD_DIMS.contains(&e.head_dim) {
        return Err(format!("head_dim {} is not 64, 128 or 256", e.head_dim));
    }
    let class = ShapeClass::parse(&e.shape_class).ok_or_else(|| {
        format!(
            "unknown shape_class '{}' (prefill, causal or decode)",
            e.shape_class
        )
    })?;
    let bucket = match &e.bucket {
        None => None,
        Some(b) => Some(ShapeBucket::parse_for(class, b).map_err(|x| match x {
            Error::InvalidInput(m) => m,
            other => other.to_string(),
        })?),
    };
    let variant: Variant = e.variant.parse().map_err(|x: Error| x.to_string())?;
    let spec = KernelSpec {
        variant,
        precision,
        head_dim: e.head_dim,
        causal: class == ShapeClass::Causal,
    };
    spec.validate(arch).map_err(|x| x.to_string())?;
    Ok(Checked {
        arch,
        precision,
        head_dim: e.head_dim,
        class,
        bucket,
        variant,
    })
}

/// A function that says whether it saw its argument before: constant time per key, so a
/// table's duplicate check is linear in its entries.
fn repeat_detector<K: std::hash::Hash + Eq>(capacity: usize) -> impl FnMut(K) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(capacity);
    move |k| !seen.insert(k)
}

fn bad(origin: &str, msg: String) -> Error {
    Error::InvalidInput(format!("tuned table {origin}: {msg}"))
}

impl TunedTable {
    /// Parses and checks a table: every field known, every variant valid for its problem
    /// class on its arch, no class listed twice.
    pub fn parse(text: &str) -> Result<TunedTable> {
        Self::parse_from(text, "(text)")
    }

    fn parse_from(text: &str, origin: &str) -> Result<TunedTable> {
        let file: TableFile = serde_json::from_str(text).map_err(|e| {
            bad(
                origin,
                format!("not a table ({e}); expected {{\"entries\": [{{\"arch\", \"precision\", \"head_dim\", \"shape_class\", \"variant\"}}, ...]}}"),
            )
        })?;
        let mut checked: Vec<Checked> = Vec::with_capacity(file.entries.len());
        let mut is_repeat = repeat_detector(file.entries.len());
        for (i, e) in file.entries.iter().enumerate() {
            let c = check_entry(e).map_err(|m| bad(origin, format!("entry {i}: {m}")))?;
            if is_repeat(c.class_key()) {
                return Err(bad(
                    origin,
                    format!(
                        "entry {i}: {} {} d{} {}{} is listed twice",
                        e.arch,
                        e.precision,
                        e.head_dim,
                        e.shape_class,
                        e.bucket
                            .as_ref()
                            .map_or(String::new(), |b| format!(" bucket {b}"))
                    ),
                ));
            }
            checked.push(c);
        }
        Ok(TunedTable {
            entries: file.entries,
            checked,
        })
    }

    /// Reads a table file. Only a regular file of at most [`MAX_TABLE_BYTES`] is read: a FIFO,
    /// device or folder at the path, or a larger file, is an [`Error::InvalidInput`] (a FIFO
    /// would otherwise block every dispatch until some process wrote to it).
    pub fn load(path: &std::path::Path) -> Result<TunedTable> {
        use crate::compile::bounded::{read_regular, ReadFailure};
        let origin = path.display().to_string();
        let bytes = match read_regular(path, MAX_TABLE_BYTES) {
            Ok(b) => b,
            Err(ReadFailure::Io(e)) => return Err(Error::io(path)(e)),
            Err(e) => {
                return Err(bad(
                    &origin,
                    format!(
                        "{e}; point {TABLE_ENV} at a JSON table (at most {MAX_TABLE_BYTES} bytes) or remove it"
                    ),
                ))
            }
        };
        let text =
            String::from_utf8(bytes).map_err(|e| bad(&origin, format!("not UTF-8 text ({e})")))?;
        Self::parse_from(&text, &origin)
    }

    /// The table as JSON (what `parse` reads).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&TableFile {
            entries: self.entries.clone(),
        })
        .expect("a table serializes")
    }

    /// The entries, as written.
    pub fn entries(&self) -> &[TunedEntry] {
        &self.entries
    }

    /// Adds or replaces the entry for its class and bucket (checked like a parsed one).
    pub fn upsert(&mut self, entry: TunedEntry) -> Result<()> {
        let c = check_entry(&entry).map_err(|m| bad("(text)", format!("entry 0: {m}")))?;
        let keep: Vec<bool> = self
            .checked
            .iter()
            .map(|o| o.class_key() != c.class_key())
            .collect();
        let mut keep = keep.into_iter();
        self.entries.retain(|_| keep.next().unwrap_or(true));
        self.checked.retain(|o| o.class_key() != c.class_key());
        self.entries.push(entry);
        self.checked.push(c);
        Ok(())
    }

    /// The class-wide tuned variant for a class (the entry without a bucket), if the table
    /// has one.
    pub fn lookup(
        &self,
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        class: ShapeClass,
    ) -> Option<Variant> {
        self.lookup_exact(arch, precision, head_dim, class, None)
    }

    /// The entry for exactly this class and bucket (`None`: the class-wide entry), if any.
    pub fn lookup_exact(
        &self,
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        class: ShapeClass,
        bucket: Option<ShapeBucket>,
    ) -> Option<Variant> {
        self.checked
            .iter()
            .find(|c| c.class_key() == (arch, precision, head_dim, class, bucket))
            .map(|c| c.variant)
    }

    /// The variant a call of `class` and `bucket` gets from a user table (if any) and a
    /// shipped one, first found: the user's bucket entry, the user's class-wide entry, the
    /// shipped bucket entry, the shipped class-wide entry. `None`: the registry decides.
    #[allow(clippy::too_many_arguments)]
    pub fn resolve_in(
        user: Option<&TunedTable>,
        shipped: &TunedTable,
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        class: ShapeClass,
        bucket: ShapeBucket,
    ) -> Option<Variant> {
        user.into_iter()
            .chain(std::iter::once(shipped))
            .flat_map(|t| [Some(bucket), None].map(|b| (t, b)))
            .find_map(|(t, b)| t.lookup_exact(arch, precision, head_dim, class, b))
    }

    /// The table shipped in the crate.
    pub fn shipped() -> &'static TunedTable {
        static SHIPPED: OnceLock<TunedTable> = OnceLock::new();
        SHIPPED.get_or_init(|| {
            // A test parses it; a broken shipped table is a build defect, not a user error.
            Self::parse_from(include_str!("../tuned/default.json"), "tuned/default.json")
                .expect("the shipped tuned table parses (tuned::tests)")
        })
    }

    /// Where the user's table is read from: `$SDPA_TUNED_TABLE`, else the config dir's
    /// `fp8-sdpa/tuned.json`.
    pub fn user_path() -> Option<PathBuf> {
        match std::env::var_os(TABLE_ENV) {
            Some(p) => Some(PathBuf::from(p)),
            None => dirs::config_dir().map(|d| d.join("fp8-sdpa").join("tuned.json")),
        }
    }

    /// The user's table, read once per process; `Ok(None)` when there is none. A table that
    /// exists but does not parse is an error on every call that would use it (never ignored).
    pub fn user() -> Result<Option<&'static TunedTable>> {
        static USER: OnceLock<std::result::Result<Option<TunedTable>, String>> = OnceLock::new();
        let r = USER.get_or_init(|| match Self::user_path() {
            Some(p) if p.exists() => Self::load(&p).map(Some).map_err(|e| e.to_string()),
            Some(p) if std::env::var_os(TABLE_ENV).is_some() => Err(format!(
                "{TABLE_ENV} names {}, which does not exist; unset it or point it at a table",
                p.display()
            )),
            _ => Ok(None),
        });
        match r {
            Ok(t) => Ok(t.as_ref()),
            Err(msg) => Err(Error::InvalidInput(msg.clone())),
        }
    }

    /// The variant dispatch runs for a call of `class` and `bucket`: the user's entry for the
    /// bucket, the user's class-wide entry, the shipped entry for the bucket, the shipped
    /// class-wide entry (see [`TunedTable::resolve_in`]); `None`: the registry's default.
    pub fn resolve(
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        class: ShapeClass,
        bucket: ShapeBucket,
    ) -> Result<Option<Variant>> {
        Ok(Self::resolve_in(
            Self::user()?,
            Self::shipped(),
            arch,
            precision,
            head_dim,
            class,
            bucket,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(class: &str, variant: &str) -> TunedEntry {
        TunedEntry {
            arch: "sm_90a".into(),
            precision: "bf16".into(),
            head_dim: 128,
            shape_class: class.into(),
            bucket: None,
            variant: variant.into(),
            tflops: Some(600.0),
            note: None,
        }
    }

    #[test]
    fn the_shipped_table_parses() {
        let _ = TunedTable::shipped();
    }

    #[test]
    fn bad_tables_are_named_errors() {
        let e = |t: &str| TunedTable::parse(t).unwrap_err().to_string();
        assert!(e("not json").contains("not a table"));
        assert!(e(r#"{"entries": [], "x": 1}"#).contains("unknown field"));
        let one = |f: &str| {
            format!(
                r#"{{"entries": [{{"arch": "sm_90a", "precision": "f16", "head_dim": 128, "shape_class": "prefill", "variant": "hopper.m128.n128.w12.s2.b1.w4pogex"{f}}}]}}"#
            )
        };
        assert!(TunedTable::parse(&one("")).is_ok());
        assert!(e(&one(r#", "colour": 1"#)).contains("unknown field"));
        let sub = |from: &str, to: &str| one("").replace(from, to);
        assert!(e(&sub("sm_90a", "sm_42")).contains("entry 0: unknown arch"));
        assert!(e(&sub("\"f16\"", "\"f17\"")).contains("unknown precision 'f17'"));
        assert!(e(&sub("128,", "96,")).contains("head_dim 96"));
        assert!(e(&sub("prefill", "warm")).contains("unknown shape_class 'warm'"));
        assert!(e(&sub("w4pogex", "w4pogz")).contains("entry 0: invalid variant"));
        // A variant valid in itself but not for its arch.
        let sm80 = sub("sm_90a", "sm_80");
        assert!(e(&sm80).contains("needs sm_90a"), "{}", e(&sm80));
        // The same class twice.
        let two = one("").replace("}]}", "}, ") + &one("")[13..];
        assert!(e(&two).contains("listed twice"), "{two}: {}", e(&two));
    }

    #[test]
    fn lookups_and_upserts_keep_one_entry_per_class() {
        let mut t = TunedTable::default();
        t.upsert(entry("prefill", "hopper.m128.n128.w12.s2.b1.w4pogex"))
            .unwrap();
        t.upsert(entry("causal", "hopper.m128.n128.w12.s2.b1.w4oex"))
            .unwrap();
        t.upsert(entry("prefill", "hopper.m128.n176.w12.s2.b1.w4ogex"))
            .unwrap();
        assert_eq!(t.entries().len(), 2);
        let got = t.lookup(Arch::Sm90a, Precision::Bf16, 128, ShapeClass::Prefill);
        assert_eq!(got.unwrap().key(), "hopper.m128.n176.w12.s2.b1.w4ogex");
        assert_eq!(
            t.lookup(Arch::Sm90a, Precision::F16, 128, ShapeClass::Prefill),
            None
        );
        assert!(t
            .upsert(entry("decode", "hopper.m128.n128.w12.s2.b1.w4pogx"))
            .is_err());
        let back = TunedTable::parse(&t.to_json()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn classes_follow_the_call() {
        let s = |sq| AttnShape::new(2, sq, 4096, 32, 8, 128);
        assert_eq!(ShapeClass::of(&s(1), true), ShapeClass::Decode);
        assert_eq!(ShapeClass::of(&s(16), false), ShapeClass::Decode);
        assert_eq!(ShapeClass::of(&s(17), false), ShapeClass::Prefill);
        assert_eq!(ShapeClass::of(&s(4096), true), ShapeClass::Causal);
    }

    fn bucketed(class: &str, bucket: Option<&str>, variant: &str) -> TunedEntry {
        TunedEntry {
            bucket: bucket.map(Into::into),
            ..entry(class, variant)
        }
    }

    #[test]
    fn buckets_follow_the_call() {
        use ShapeBucket::*;
        let pre = |b, s| AttnShape::new(b, s, s, 16, 16, 128);
        let of = |s: &AttnShape, c| ShapeBucket::of(s, c, 132, false);
        assert_eq!(of(&pre(32, 512), ShapeClass::Prefill), Short);
        assert_eq!(of(&pre(16, 1024), ShapeClass::Causal), Short);
        assert_eq!(of(&pre(1, 1536), ShapeClass::Prefill), Short);
        assert_eq!(of(&pre(1, 1537), ShapeClass::Prefill), Mid);
        assert_eq!(of(&pre(4, 4096), ShapeClass::Causal), Mid);
        assert_eq!(of(&pre(1, 6144), ShapeClass::Prefill), Mid);
        assert_eq!(of(&pre(2, 8192), ShapeClass::Prefill), Long);
        assert_eq!(of(&pre(1, 16384), ShapeClass::Causal), Long);
        // Prefill buckets ignore the paged flag and the SM count.
        assert_eq!(
            ShapeBucket::of(&pre(1, 16384), ShapeClass::Prefill, 8, true),
            Long
        );
        // Decode: batch x heads_kv x ceil(rows per kv head / 16) against the SMs.
        let dec = |b, sq, skv, hq, hkv| AttnShape::new(b, sq, skv, hq, hkv, 128);
        let d = |s: &AttnShape, sms, paged| ShapeBucket::of(s, ShapeClass::Decode, sms, paged);
        assert_eq!(d(&dec(1, 1, 4096, 32, 8), 132, false), SmallContiguous); // 8 CTAs
        assert_eq!(d(&dec(4, 1, 131072, 32, 8), 132, true), SmallPaged); // 32
        assert_eq!(d(&dec(32, 1, 4096, 32, 8), 132, false), LargeContiguous); // 256
        assert_eq!(d(&dec(8, 1, 32768, 32, 32), 132, true), LargePaged); // 256
        assert_eq!(d(&dec(16, 1, 4096, 32, 8), 132, false), SmallContiguous); // 128 < 132
        assert_eq!(d(&dec(17, 1, 4096, 32, 8), 132, false), LargeContiguous); // 136
        assert_eq!(d(&dec(16, 1, 4096, 32, 8), 128, false), LargeContiguous); // 128 = 128
                                                                              // Speculative decoding: Sq 4 x group 8 = 32 rows per kv head, 2 CTAs each.
        assert_eq!(d(&dec(8, 4, 32768, 64, 8), 132, false), SmallContiguous); // 128
        assert_eq!(d(&dec(9, 4, 32768, 64, 8), 132, true), LargePaged); // 144
        for b in ShapeBucket::ALL {
            assert_eq!(ShapeBucket::parse(b.name()), Some(b));
            let json = serde_json::to_string(&b).unwrap();
            assert_eq!(json, format!("\"{}\"", b.name()));
            let n = ShapeClass::ALL.iter().filter(|&&c| b.belongs_to(c)).count();
            assert!(n >= 1);
        }
        assert_eq!(ShapeBucket::parse("Short"), None);
    }

    #[test]
    fn old_tables_without_buckets_parse() {
        let old = r#"{"entries": [
            {"arch": "sm_90a", "precision": "bf16", "head_dim": 128, "shape_class": "prefill",
             "variant": "hopper.m128.n128.w12.s2.b1.w4pogex", "tflops": 600.0},
            {"arch": "sm_90a", "precision": "bf16", "head_dim": 128, "shape_class": "causal",
             "variant": "hopper.m128.n128.w12.s2.b1.w4oex", "note": "hand-picked"}]}"#;
        let t = TunedTable::parse(old).unwrap();
        assert!(t.entries().iter().all(|e| e.bucket.is_none()));
        // A class-wide entry serves every bucket of its class.
        for b in [ShapeBucket::Short, ShapeBucket::Mid, ShapeBucket::Long] {
            let v = TunedTable::resolve_in(
                Some(&t),
                &TunedTable::default(),
                Arch::Sm90a,
                Precision::Bf16,
                128,
                ShapeClass::Prefill,
                b,
            );
            assert_eq!(v.unwrap().key(), "hopper.m128.n128.w12.s2.b1.w4pogex");
        }
        // Written back without a bucket field.
        assert!(!t.to_json().contains("bucket"));
        assert_eq!(TunedTable::parse(&t.to_json()).unwrap(), t);
    }

    #[test]
    fn bad_buckets_are_named_errors() {
        let e = |t: &str| TunedTable::parse(t).unwrap_err().to_string();
        let one = |class: &str, bucket: &str, variant: &str| {
            format!(
                r#"{{"entries": [{{"arch": "sm_90a", "precision": "f16", "head_dim": 128, "shape_class": "{class}", "bucket": {bucket}, "variant": "{variant}"}}]}}"#
            )
        };
        let hop = "hopper.m128.n128.w12.s2.b1.w4pogex";
        assert!(TunedTable::parse(&one("prefill", r#""long""#, hop)).is_ok());
        assert!(TunedTable::parse(&one("prefill", "null", hop)).is_ok());
        let x = e(&one("prefill", r#""tall""#, hop));
        assert!(matches!(
            TunedTable::parse(&one("prefill", r#""tall""#, hop)),
            Err(Error::InvalidInput(_))
        ));
        assert!(x.contains("entry 0: unknown bucket 'tall'"), "{x}");
        assert!(x.contains("short, mid, long"), "{x}");
        let x = e(&one("prefill", r#""small-paged""#, hop));
        assert!(
            x.contains("bucket 'small-paged' is not a bucket of the prefill class"),
            "{x}"
        );
        let dec = "decode.m16.n64.w4.s3.b2.cex";
        let x = e(&one("decode", r#""mid""#, dec));
        assert!(
            x.contains("small-paged, small-contiguous, large-paged, large-contiguous"),
            "{x}"
        );
        // Case and spelling matter: the names are lowercase, hyphenated.
        assert!(e(&one("prefill", r#""Long""#, hop)).contains("unknown bucket 'Long'"));
        assert!(e(&one("decode", r#""small_paged""#, dec)).contains("unknown bucket"));
        // Not a string.
        assert!(e(&one("prefill", "3", hop)).contains("not a table"));
        assert!(e(&one("prefill", r#"["long"]"#, hop)).contains("not a table"));
        // The same bucket twice is listed twice; a bucket next to the class-wide entry is not.
        let two = |b1: &str, b2: &str| {
            let a = one("prefill", b1, hop);
            let b = one("prefill", b2, hop);
            a.replace("}]}", "}, ") + &b[13..]
        };
        assert!(e(&two(r#""long""#, r#""long""#)).contains("bucket long is listed twice"));
        assert!(TunedTable::parse(&two(r#""long""#, "null")).is_ok());
        assert!(TunedTable::parse(&two(r#""long""#, r#""short""#)).is_ok());
        // upsert checks the bucket too.
        let mut t = TunedTable::default();
        assert!(t
            .upsert(bucketed("causal", Some("large-paged"), hop))
            .is_err());
    }

    #[test]
    fn resolution_prefers_user_then_bucket_then_shipped() {
        let (a, p, d, c) = (Arch::Sm90a, Precision::Bf16, 128, ShapeClass::Prefill);
        let v128 = "hopper.m128.n128.w12.s2.b1.w4pogex";
        let v176 = "hopper.m128.n176.w12.s2.b1.w4ogex";
        let v192 = "hopper.m128.n192.w12.s2.b1.w4pogex";
        let v64 = "hopper.m128.n64.w12.s2.b1.w4pogex";
        let table = |es: &[TunedEntry]| {
            let mut t = TunedTable::default();
            for e in es {
                t.upsert(e.clone()).unwrap();
            }
            t
        };
        let res = |u: Option<&TunedTable>, s: &TunedTable, b| {
            TunedTable::resolve_in(u, s, a, p, d, c, b).map(|v| v.key())
        };
        let shipped = table(&[
            bucketed("prefill", None, v176),
            bucketed("prefill", Some("long"), v192),
        ]);
        let user = table(&[
            bucketed("prefill", None, v128),
            bucketed("prefill", Some("mid"), v64),
        ]);
        // 1. The user's bucket entry.
        assert_eq!(res(Some(&user), &shipped, ShapeBucket::Mid).unwrap(), v64);
        // 2. The user's class-wide entry, even over a shipped bucket entry.
        assert_eq!(res(Some(&user), &shipped, ShapeBucket::Long).unwrap(), v128);
        assert_eq!(
            res(Some(&user), &shipped, ShapeBucket::Short).unwrap(),
            v128
        );
        // 3. The shipped bucket entry when the user's table has nothing for the class.
        let user_bucket_only = table(&[bucketed("prefill", Some("mid"), v64)]);
        assert_eq!(
            res(Some(&user_bucket_only), &shipped, ShapeBucket::Long).unwrap(),
            v192
        );
        assert_eq!(res(None, &shipped, ShapeBucket::Long).unwrap(), v192);
        // 4. The shipped class-wide entry.
        assert_eq!(
            res(Some(&user_bucket_only), &shipped, ShapeBucket::Short).unwrap(),
            v176
        );
        // 5. Nothing: the registry decides.
        let shipped_long = table(&[bucketed("prefill", Some("long"), v192)]);
        assert_eq!(res(None, &shipped_long, ShapeBucket::Short), None);
        assert_eq!(res(None, &TunedTable::default(), ShapeBucket::Mid), None);
        // Other keys do not leak: another precision, head dim or class.
        assert_eq!(
            TunedTable::resolve_in(
                Some(&user),
                &shipped,
                a,
                Precision::F16,
                d,
                c,
                ShapeBucket::Mid
            ),
            None
        );
        assert_eq!(
            TunedTable::resolve_in(
                Some(&user),
                &shipped,
                a,
                p,
                d,
                ShapeClass::Causal,
                ShapeBucket::Mid
            ),
            None
        );
        // Upserts replace per (class, bucket): the class-wide entry stays.
        let mut t = user.clone();
        t.upsert(bucketed("prefill", Some("mid"), v192)).unwrap();
        assert_eq!(t.entries().len(), 2);
        assert_eq!(
            t.lookup_exact(a, p, d, c, Some(ShapeBucket::Mid))
                .unwrap()
                .key(),
            v192
        );
        assert_eq!(t.lookup(a, p, d, c).unwrap().key(), v128);
        assert_eq!(TunedTable::parse(&t.to_json()).unwrap(), t);
        assert!(t.to_json().contains(r#""bucket": "mid""#));
    }

    proptest::proptest! {
        /// Whatever the bucket text, an entry parses or fails with a typed error.
        #[test]
        fn any_bucket_never_panics(bucket in ".{0,40}") {
            let t = format!(
                r#"{{"entries": [{{"arch": "sm_90a", "precision": "f16", "head_dim": 128, "shape_class": "decode", "bucket": {}, "variant": "decode.m16.n64.w4.s3.b2.cex"}}]}}"#,
                serde_json::to_string(&bucket).unwrap()
            );
            match TunedTable::parse(&t) {
                Ok(_) => proptest::prop_assert!(ShapeBucket::parse(&bucket)
                    .is_some_and(|b| b.belongs_to(ShapeClass::Decode))),
                Err(e) => proptest::prop_assert!(matches!(e, Error::InvalidInput(_))),
            }
        }

        /// Mutations of a valid bucketed table (a byte replaced) parse or fail cleanly.
        #[test]
        fn mutated_bucketed_tables_never_panic(pos in 0usize..240, byte in proptest::prelude::any::<u8>()) {
            let mut t = br#"{"entries": [{"arch": "sm_90a", "precision": "f16", "head_dim": 128, "shape_class": "decode", "bucket": "small-paged", "variant": "decode.m16.n64.w4.s3.b2.cex", "tflops": 1.5}]}"#.to_vec();
            let i = pos % t.len();
            t[i] = byte;
            if let Ok(s) = std::str::from_utf8(&t) {
                if let Err(e) = TunedTable::parse(s) {
                    proptest::prop_assert!(matches!(e, Error::InvalidInput(_)));
                }
            }
        }
    }

    proptest::proptest! {
        /// Whatever the text, parsing returns a table or a typed error; it never panics.
        #[test]
        fn parsing_never_panics(text in ".{0,300}") {
            let _ = TunedTable::parse(&text);
        }

        /// Mutations of a valid table (a byte replaced) parse or fail cleanly.
        #[test]
        fn mutated_tables_never_panic(pos in 0usize..220, byte in proptest::prelude::any::<u8>()) {
            let mut t = br#"{"entries": [{"arch": "sm_90a", "precision": "f16", "head_dim": 128, "shape_class": "prefill", "variant": "hopper.m128.n128.w12.s2.b1.w4pogex", "tflops": 600.5}]}"#.to_vec();
            let i = pos % t.len();
            t[i] = byte;
            if let Ok(s) = std::str::from_utf8(&t) {
                let _ = TunedTable::parse(s);
            }
        }
    }

    /// Runs `f` on a thread; `None` if it has not returned within `secs` (it blocked).
    fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(secs)).ok()
    }

    /// A FIFO at the table's path would block every dispatch waiting for a writer: it is
    /// refused at once with a typed error.
    #[test]
    fn a_fifo_at_the_table_path_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tuned.json");
        let ok = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mkfifo failed");
        let r = within(10, move || TunedTable::load(&p).map_err(|e| e.to_string()));
        match r {
            None => panic!("loading a FIFO blocked"),
            Some(Ok(_)) => panic!("a FIFO was read as a table"),
            Some(Err(m)) => assert!(m.contains("FIFO") && m.contains(TABLE_ENV), "{m}"),
        }
    }

    #[test]
    fn folders_and_devices_are_refused() {
        let d = tempfile::tempdir().unwrap();
        for p in [d.path(), std::path::Path::new("/dev/null")] {
            match TunedTable::load(p) {
                Err(Error::InvalidInput(m)) => assert!(m.contains("not a regular file"), "{m}"),
                other => panic!("{}: {other:?}", p.display()),
            }
        }
    }

    /// A valid table padded past the limit is refused, not read.
    #[test]
    fn an_oversize_table_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tuned.json");
        let mut text = String::from(r#"{"entries": []}"#);
        text.push_str(&" ".repeat(MAX_TABLE_BYTES as usize));
        std::fs::write(&p, &text).unwrap();
        match TunedTable::load(&p) {
            Err(Error::InvalidInput(m)) => assert!(m.contains("larger than"), "{m}"),
            other => panic!("{other:?}"),
        }
        std::fs::write(&p, r#"{"entries": []}"#).unwrap();
        assert_eq!(TunedTable::load(&p).unwrap().entries().len(), 0);
    }

    /// The duplicate check parse uses is linear: 100k keys (the last a repeat) in well under
    /// a second, where comparing each key with every earlier one takes 5e9 comparisons.
    #[test]
    fn the_duplicate_check_is_linear() {
        let n = 100_000u64;
        let t = std::time::Instant::now();
        let mut is_repeat = repeat_detector(n as usize);
        let first = (0..n)
            .map(|i| (i, ShapeClass::Prefill, None::<ShapeBucket>))
            .chain([(7, ShapeClass::Prefill, None)])
            .position(&mut is_repeat);
        assert_eq!(first, Some(n as usize));
        let took = t.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    }

    proptest::proptest! {
        /// Whatever bytes the file holds, loading returns a table or a typed error.
        #[test]
        fn loading_any_bytes_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
        ) {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("t.json");
            std::fs::write(&p, &bytes).unwrap();
            match TunedTable::load(&p) {
                Ok(_) | Err(Error::InvalidInput(_)) => {}
                Err(e) => proptest::prop_assert!(false, "untyped error: {e}"),
            }
        }

        /// Tables drawn from valid and invalid field values: a table parses only when every
        /// entry is valid and no key repeats, and a parsed table reads back from its JSON.
        #[test]
        fn parsed_tables_are_checked_and_round_trip(
            picks in proptest::collection::vec(
                (0usize..3, 0usize..3, 0usize..3, 0usize..4, 0usize..3), 0..6),
        ) {
            let archs = ["sm_90a", "sm_80", "sm_42"];
            let classes = ["prefill", "causal", "decode"];
            let dims = [64u32, 128, 96];
            let buckets = [None, Some("short"), Some("small-paged"), Some("nope")];
            let variants = [
                "hopper.m128.n128.w12.s2.b1.w4pogex",
                "decode.m16.n64.w4.s3.b2.cex",
                "not-a-variant",
            ];
            let entries: Vec<TunedEntry> = picks
                .iter()
                .map(|&(a, c, d, b, v)| TunedEntry {
                    arch: archs[a].into(),
                    precision: "f16".into(),
                    head_dim: dims[d],
                    shape_class: classes[c].into(),
                    bucket: buckets[b].map(String::from),
                    variant: variants[v].into(),
                    tflops: None,
                    note: None,
                })
                .collect();
            let text = serde_json::to_string(&TableFile { entries: entries.clone() }).unwrap();
            let all_valid = entries.iter().all(|e| check_entry(e).is_ok());
            let keys: std::collections::HashSet<_> = entries
                .iter()
                .filter_map(|e| check_entry(e).ok())
                .map(|c| c.class_key())
                .collect();
            match TunedTable::parse(&text) {
                Ok(t) => {
                    proptest::prop_assert!(all_valid && keys.len() == entries.len());
                    proptest::prop_assert_eq!(TunedTable::parse(&t.to_json()).unwrap(), t);
                }
                Err(e) => {
                    proptest::prop_assert!(matches!(e, Error::InvalidInput(_)));
                    proptest::prop_assert!(!all_valid || keys.len() < entries.len());
                }
            }
        }
    }
}
