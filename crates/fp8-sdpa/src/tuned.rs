//! Tuned tables: the variant `sdpa-lab tune` measured fastest per (arch, precision, head dim,
//! shape class), which dispatch runs before the registry's hand-picked defaults.
//!
//! Two tables are read: the one shipped in the crate (`tuned/default.json`) and the user's,
//! at `$SDPA_TUNED_TABLE` or else `<config dir>/fp8-sdpa/tuned.json` (on Linux
//! `~/.config/fp8-sdpa/tuned.json`), whose entries override the shipped ones. A table is JSON:
//!
//! ```json
//! { "entries": [ { "arch": "sm_90a", "precision": "f16", "head_dim": 128,
//!                  "shape_class": "prefill", "variant": "hopper.m128.n128.w12.s2.b1.w4pogex",
//!                  "tflops": 640.0, "note": "sdpa-lab tune, 2026-11-25" } ] }
//! ```
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
    variant: Variant,
}

/// A parsed and checked tuned table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TunedTable {
    entries: Vec<TunedEntry>,
    checked: Vec<Checked>,
}

impl Checked {
    /// What an entry is for: at most one entry per key.
    fn class_key(&self) -> (Arch, Precision, u32, ShapeClass) {
        (self.arch, self.precision, self.head_dim, self.class)
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
        variant,
    })
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
        for (i, e) in file.entries.iter().enumerate() {
            let c = check_entry(e).map_err(|m| bad(origin, format!("entry {i}: {m}")))?;
            if checked.iter().any(|o| o.class_key() == c.class_key()) {
                return Err(bad(
                    origin,
                    format!(
                        "entry {i}: {} {} d{} {} is listed twice",
                        e.arch, e.precision, e.head_dim, e.shape_class
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

    /// Reads a table file.
    pub fn load(path: &std::path::Path) -> Result<TunedTable> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        Self::parse_from(&text, &path.display().to_string())
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

    /// Adds or replaces the entry for its class (checked like a parsed one).
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

    /// The tuned variant for a class, if the table has one.
    pub fn lookup(
        &self,
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        class: ShapeClass,
    ) -> Option<Variant> {
        self.checked
            .iter()
            .find(|c| {
                (c.arch, c.precision, c.head_dim, c.class) == (arch, precision, head_dim, class)
            })
            .map(|c| c.variant)
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

    /// The variant dispatch runs for a class: the user's entry, else the shipped one.
    pub fn resolve(
        arch: Arch,
        precision: Precision,
        head_dim: u32,
        class: ShapeClass,
    ) -> Result<Option<Variant>> {
        if let Some(u) = Self::user()? {
            if let Some(v) = u.lookup(arch, precision, head_dim, class) {
                return Ok(Some(v));
            }
        }
        Ok(Self::shipped().lookup(arch, precision, head_dim, class))
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
}
