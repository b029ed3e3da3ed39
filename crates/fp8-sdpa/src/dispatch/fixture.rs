//! Every automatic kernel choice over a dense grid of calls, against a recorded fixture
//! (`tests/data/dispatch-picks.txt`): the picks of dense, paged, varlen and paged-varlen calls
//! under `KernelChoice::Auto` and the class defaults, for every arch, precision, head dim and
//! mask, over query and key lengths 1 to 128k, six batches, three head layouts and three SM
//! counts. The fixture was recorded from the dispatch code before it became one rule table;
//! the test fails on any changed pick and names the first ones. A deliberate rule change
//! rewrites it with `UPDATE_DISPATCH_FIXTURE=1 cargo test -p fp8-sdpa --lib dispatch_picks`.

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::error::{Error, Result};
use crate::kernels::registry;
use crate::problem::AttnShape;
use crate::runtime::attention::KernelChoice;
use crate::runtime::{varlen, varlen_decode};
use crate::tuned::TunedTable;
use crate::variant::{Variant, HEAD_DIMS};
use std::collections::HashMap;
use std::fmt::Write as _;

const SEQS: [usize; 15] = [
    1, 2, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536, 131072,
];
const BATCHES: [usize; 6] = [1, 2, 4, 8, 32, 64];
const HEADS: [(usize, usize); 3] = [(32, 8), (16, 16), (8, 1)];
const SMS: [u32; 3] = [132, 78, 16];
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dispatch-picks.txt");
const UPDATE_ENV: &str = "UPDATE_DISPATCH_FIXTURE";

/// The entry points of the automatic choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `dispatch::choose` (contiguous K/V).
    Dense,
    /// `dispatch::choose_paged` (a paged cache).
    Paged,
    /// A varlen call: the decode family's choice, else `choose_varlen`.
    Varlen,
    /// A paged varlen call (`varlen_decode::choose_paged`).
    VarlenPaged,
    /// The class default (`registry::default_variant`, the tuner's baseline).
    Class,
}

impl Path {
    const ALL: [Path; 5] = [
        Path::Dense,
        Path::Paged,
        Path::Varlen,
        Path::VarlenPaged,
        Path::Class,
    ];
    fn name(self) -> &'static str {
        match self {
            Path::Dense => "dense",
            Path::Paged => "paged",
            Path::Varlen => "varlen",
            Path::VarlenPaged => "varlen-paged",
            Path::Class => "class",
        }
    }
    /// Whether the pick depends on the shape, and on the SM count.
    fn reads(self) -> (bool, bool) {
        match self {
            Path::Dense | Path::Paged => (true, true),
            Path::Varlen => (true, false),
            Path::VarlenPaged | Path::Class => (false, false),
        }
    }
}

/// One row of the fixture: a path and a problem class.
#[derive(Debug, Clone, Copy)]
struct Row {
    path: Path,
    arch: Arch,
    precision: Precision,
    head_dim: u32,
    causal: bool,
}

impl Row {
    fn all() -> Vec<Row> {
        let mut out = Vec::new();
        for path in Path::ALL {
            for arch in Arch::ALL {
                for precision in Precision::ALL {
                    for head_dim in HEAD_DIMS {
                        for causal in [false, true] {
                            out.push(Row {
                                path,
                                arch,
                                precision,
                                head_dim,
                                causal,
                            });
                        }
                    }
                }
            }
        }
        out
    }

    fn label(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.path.name(),
            self.arch,
            self.precision.name(),
            self.head_dim,
            if self.causal { "causal" } else { "full" }
        )
    }

    /// The cells of the row, (heads, SM count, batch), and the shapes of each cell.
    fn cells(&self) -> Vec<(usize, usize, u32, usize)> {
        let (shape, sm) = self.path.reads();
        if !shape {
            return vec![(0, 0, 0, 0)];
        }
        let sms: &[u32] = if sm { &SMS } else { &[0] };
        let mut out = Vec::new();
        for (hq, hkv) in HEADS {
            for &s in sms {
                for b in BATCHES {
                    out.push((hq, hkv, s, b));
                }
            }
        }
        out
    }

    /// The picks of one cell, over (seq_q, seq_kv) in `SEQS` x `SEQS` (one pick when the path
    /// reads no shape).
    fn picks(&self, cell: (usize, usize, u32, usize)) -> Vec<(String, String)> {
        let (hq, hkv, sm, batch) = cell;
        if !self.path.reads().0 {
            let shape = AttnShape::new(1, 1, 1, 1, 1, self.head_dim as usize);
            return vec![(String::new(), self.pick(&shape, sm))];
        }
        let mut out = Vec::with_capacity(SEQS.len() * SEQS.len());
        for sq in SEQS {
            for skv in SEQS {
                let shape = AttnShape::new(batch, sq, skv, hq, hkv, self.head_dim as usize);
                out.push((
                    format!("B{batch} H{hq}/{hkv} sm {sm} Sq {sq} Skv {skv}"),
                    self.pick(&shape, sm),
                ));
            }
        }
        out
    }

    fn pick(&self, shape: &AttnShape, sm: u32) -> String {
        let (a, p, d, c) = (self.arch, self.precision, self.head_dim, self.causal);
        let auto = KernelChoice::Auto;
        let got: Result<Variant> = match self.path {
            Path::Dense => super::choose(a, p, shape, c, sm),
            Path::Paged => super::choose_paged(a, p, shape, sm),
            Path::Varlen => match varlen_decode::choose(a, p, shape, c, auto) {
                Some(v) => Ok(v),
                None => varlen::choose_varlen(a, p, d, c, auto),
            },
            Path::VarlenPaged => varlen_decode::choose_paged(a, p, d, auto),
            Path::Class => Ok(registry::default_variant(a, p, d, c)),
        };
        match got {
            Ok(v) => v.key(),
            Err(e) => format!("!{}", error_kind(&e)),
        }
    }
}

/// The variant name of an error (its message may be reworded; its kind may not change).
fn error_kind(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The fixture's text: the keys, the distinct cell patterns (run-length encoded key ids over
/// the length grid), then one line per row naming each cell's pattern.
fn record() -> String {
    let mut keys: Vec<String> = Vec::new();
    let mut key_ids: HashMap<String, usize> = HashMap::new();
    let mut patterns: Vec<String> = Vec::new();
    let mut pattern_ids: HashMap<String, usize> = HashMap::new();
    let mut rows = String::new();
    let mut picks = 0usize;
    for row in Row::all() {
        let mut line = row.label();
        for cell in row.cells() {
            let ids: Vec<usize> = row
                .picks(cell)
                .into_iter()
                .map(|(_, k)| {
                    let n = key_ids.len();
                    *key_ids.entry(k.clone()).or_insert_with(|| {
                        keys.push(k);
                        n
                    })
                })
                .collect();
            picks += ids.len();
            let mut rle = String::new();
            let mut i = 0;
            while i < ids.len() {
                let j = (i..ids.len())
                    .find(|&j| ids[j] != ids[i])
                    .unwrap_or(ids.len());
                let _ = write!(rle, " {}x{}", ids[i], j - i);
                i = j;
            }
            let n = pattern_ids.len();
            let id = *pattern_ids.entry(rle.clone()).or_insert_with(|| {
                patterns.push(rle);
                n
            });
            let _ = write!(line, " {id}");
        }
        rows.push_str(&line);
        rows.push('\n');
    }
    let mut out = format!(
        "# Every automatic kernel choice over a dense grid of calls (see src/dispatch/fixture.rs).\n\
         # {picks} picks. Rows: path arch precision head_dim mask, then per cell (heads {HEADS:?} x\n\
         # SMs {SMS:?} x batch {BATCHES:?}; SMs 0 where the path reads none, one cell where it\n\
         # reads no shape) the id of its pattern: key ids over seq_q x seq_kv in {SEQS:?},\n\
         # run-length encoded (id x count). A key starting with '!' is an error of that kind.\n"
    );
    for (i, k) in keys.iter().enumerate() {
        let _ = writeln!(out, "key {i} {k}");
    }
    for (i, p) in patterns.iter().enumerate() {
        let _ = writeln!(out, "pattern {i}{p}");
    }
    out.push_str(&rows);
    out
}

/// Decodes a fixture into its rows' picks, in enumeration order.
fn decode(text: &str) -> HashMap<String, Vec<Vec<String>>> {
    let mut keys = HashMap::new();
    let mut patterns: HashMap<usize, Vec<String>> = HashMap::new();
    let mut rows = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("key") => {
                let id: usize = f.next().and_then(|s| s.parse().ok()).expect("key id");
                keys.insert(id, f.next().expect("key").to_string());
            }
            Some("pattern") => {
                let id: usize = f.next().and_then(|s| s.parse().ok()).expect("pattern id");
                let mut picks = Vec::new();
                for run in f {
                    let (k, n) = run.split_once('x').expect("run");
                    let k: usize = k.parse().expect("run key");
                    let n: usize = n.parse().expect("run length");
                    picks.extend(std::iter::repeat_n(keys[&k].clone(), n));
                }
                patterns.insert(id, picks);
            }
            Some(path) => {
                let label: Vec<&str> = std::iter::once(path).chain(f.by_ref().take(4)).collect();
                let cells = f
                    .map(|id| patterns[&id.parse::<usize>().expect("pattern ref")].clone())
                    .collect();
                rows.insert(label.join(" "), cells);
            }
            None => {}
        }
    }
    rows
}

#[test]
fn dispatch_picks_match_the_fixture() {
    assert!(
        TunedTable::user().expect("user tuned table").is_none(),
        "a user tuned table is set ($SDPA_TUNED_TABLE or ~/.config/fp8-sdpa/tuned.json): this \
         test compares the shipped choices; run it without one"
    );
    let now = record();
    if std::env::var_os(UPDATE_ENV).is_some() {
        std::fs::write(FIXTURE, &now).expect("writing the fixture");
        return;
    }
    let old = std::fs::read_to_string(FIXTURE).expect("reading tests/data/dispatch-picks.txt");
    if old == now {
        return;
    }
    let want = decode(&old);
    let mut diffs = Vec::new();
    let mut compared = 0usize;
    for row in Row::all() {
        let label = row.label();
        let Some(cells) = want.get(&label) else {
            diffs.push(format!("{label}: not in the fixture"));
            continue;
        };
        for (cell, want_cell) in row.cells().into_iter().zip(cells) {
            for ((at, got), want) in row.picks(cell).into_iter().zip(want_cell) {
                compared += 1;
                if &got != want {
                    diffs.push(format!("{label} {at}: {got}, fixture {want}"));
                }
            }
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {compared} picks differ from tests/data/dispatch-picks.txt; the first:\n{}\n\
         If the change is intended, rewrite the fixture: {UPDATE_ENV}=1 cargo test -p fp8-sdpa \
         --lib dispatch_picks",
        diffs.len(),
        diffs
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    panic!("the fixture's text differs from the recorded picks but no pick does: rewrite it");
}
