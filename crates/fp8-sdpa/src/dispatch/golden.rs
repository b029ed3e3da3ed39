//! `docs/dispatch-table.md`: the rule table's picks over arch x precision x head dim x mask x
//! length x grid, written from [`RULES`] with the shipped tuned table. The test fails on any
//! difference, so a rule change shows as rows of that file in review;
//! `UPDATE_DISPATCH_TABLE=1 cargo test -p fp8-sdpa --lib dispatch_table_is_current` rewrites it.

use super::{choose_in, choose_paged_in, Call, Path, Pick, Rule, RULES};
use crate::arch::Arch;
use crate::dtype::Precision;
use crate::problem::AttnShape;
use crate::tuned::TunedTable;
use crate::variant::{Variant, HEAD_DIMS};
use std::fmt::Write as _;

const TABLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/dispatch-table.md");
const UPDATE_ENV: &str = "UPDATE_DISPATCH_TABLE";

/// Sampled lengths (S = Sq = Skv) of the contiguous-call section.
const SEQS: [usize; 14] = [
    1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072,
];
/// The small and the large grid: (batch, heads).
const SMALL: (usize, usize) = (1, 8);
const LARGE: (usize, usize) = (16, 16);
/// Decode-shaped calls: Hq 32 over Hkv 8, 4k keys; one sequence (small grid) or 32 (large).
const DECODE_HEADS: (usize, usize) = (32, 8);
const DECODE_KEYS: usize = 4096;
const DECODE_BATCHES: (usize, usize) = (1, 32);

/// SMs per arch: the A100's on sm_80, the A40's on sm_86 and sm_89, the H100 SXM's on sm_90a.
fn sms(arch: Arch) -> u32 {
    match arch {
        Arch::Sm80 => 108,
        Arch::Sm86 | Arch::Sm89 => 84,
        Arch::Sm90a => 132,
    }
}

fn shipped() -> (Option<&'static TunedTable>, &'static TunedTable) {
    (None, TunedTable::shipped())
}

fn cell(rule: &Rule, v: Option<Variant>) -> String {
    match v {
        Some(v) => format!("`{}` {}", v.key(), rule.name),
        None => format!("refused: {}", rule.name),
    }
}

fn mask(causal: bool) -> &'static str {
    if causal {
        "causal"
    } else {
        "full"
    }
}

fn len(s: usize) -> String {
    if s >= 1024 {
        format!("{}k", s / 1024)
    } else {
        s.to_string()
    }
}

/// Table lines for one (arch, precision): `row` gives the cells of each (head dim, mask)
/// at each sampled point; consecutive points with equal cells share a line.
fn collapse(points: &[(String, Vec<String>)], lead: &str, out: &mut Vec<String>) {
    let mut i = 0;
    while i < points.len() {
        let j = (i..points.len())
            .find(|&j| points[j].1 != points[i].1)
            .unwrap_or(points.len());
        let range = if j - i == 1 {
            points[i].0.clone()
        } else {
            format!("{}–{}", points[i].0, points[j - 1].0)
        };
        out.push(format!(
            "| {lead} | {range} | {} |",
            points[i].1.join(" | ")
        ));
        i = j;
    }
}

fn dense_lines(arch: Arch, p: Precision) -> Vec<String> {
    let mut out = Vec::new();
    for d in HEAD_DIMS {
        let points = |causal| -> Vec<(String, Vec<String>)> {
            SEQS.iter()
                .map(|&s| {
                    let cells = [SMALL, LARGE]
                        .map(|(b, h)| {
                            let shape = AttnShape::new(b, s, s, h, h, d as usize);
                            let (rule, v) =
                                choose_in(shipped(), arch, p, &shape, causal, sms(arch));
                            cell(rule, Some(v))
                        })
                        .to_vec();
                    (len(s), cells)
                })
                .collect()
        };
        let (full, causal) = (points(false), points(true));
        if full == causal {
            collapse(&full, &format!("{d} | any"), &mut out);
        } else {
            collapse(&full, &format!("{d} | full"), &mut out);
            collapse(&causal, &format!("{d} | causal"), &mut out);
        }
    }
    out
}

fn decode_lines(arch: Arch, p: Precision) -> Vec<String> {
    let mut out = Vec::new();
    let (hq, hkv) = DECODE_HEADS;
    for d in HEAD_DIMS {
        let rows: Vec<(String, Vec<String>)> = [(false, 1usize), (true, 4)]
            .into_iter()
            .map(|(causal, sq)| {
                let shape = |b| AttnShape::new(b, sq, DECODE_KEYS, hq, hkv, d as usize);
                let (small, large) = (shape(DECODE_BATCHES.0), shape(DECODE_BATCHES.1));
                let mut cells = Vec::new();
                for s in [small, large] {
                    let (rule, v) = choose_in(shipped(), arch, p, &s, causal, sms(arch));
                    cells.push(cell(rule, Some(v)));
                }
                for s in [small, large] {
                    let (rule, v) = choose_paged_in(shipped(), arch, p, &s, sms(arch));
                    cells.push(cell(rule, Some(v)));
                }
                (format!("{} Sq {sq}", mask(causal)), cells)
            })
            .collect();
        if rows[0].1 == rows[1].1 {
            out.push(format!("| {d} | any | {} |", rows[0].1.join(" | ")));
        } else {
            for (m, cells) in rows {
                out.push(format!("| {d} | {m} | {} |", cells.join(" | ")));
            }
        }
    }
    out
}

fn varlen_lines(arch: Arch, p: Precision) -> Vec<String> {
    let mut out = Vec::new();
    let (hq, hkv) = DECODE_HEADS;
    for d in HEAD_DIMS {
        let row = |causal: bool| {
            let at = |path, shape| {
                let (rule, v) = Call::new(path, arch, p, d, causal, shape, 0).decide();
                cell(rule, v)
            };
            let sq = if causal { 4 } else { 1 };
            let decode = AttnShape::new(8, sq, DECODE_KEYS, hq, hkv, d as usize);
            [
                at(Path::Varlen, None),
                at(Path::Varlen, Some(decode)),
                at(Path::VarlenPaged, None),
            ]
            .join(" | ")
        };
        let (full, causal) = (row(false), row(true));
        if full == causal {
            out.push(format!("| {d} | any | {full} |"));
        } else {
            out.push(format!("| {d} | full | {full} |"));
            out.push(format!("| {d} | causal | {causal} |"));
        }
    }
    out
}

fn class_lines(arch: Arch, p: Precision) -> Vec<String> {
    let mut out = Vec::new();
    for d in HEAD_DIMS {
        let cells: Vec<String> = [false, true]
            .map(|causal| {
                let (rule, v) = Call::new(Path::Class, arch, p, d, causal, None, 0).decide();
                cell(rule, v)
            })
            .to_vec();
        out.push(format!("| {d} | {} |", cells.join(" | ")));
    }
    out
}

/// The (arch, precision) pairs whose lines are equal, and the lines.
type Group = (Vec<(Arch, Precision)>, Vec<String>);

/// Groups (arch, precision) pairs whose lines are equal, under one heading each.
fn section(
    out: &mut String,
    title: &str,
    intro: &str,
    header: &str,
    lines: fn(Arch, Precision) -> Vec<String>,
) {
    let mut groups: Vec<Group> = Vec::new();
    for a in Arch::ALL {
        for p in Precision::ALL {
            let l = lines(a, p);
            match groups.iter_mut().find(|g| g.1 == l) {
                Some(g) => g.0.push((a, p)),
                None => groups.push((vec![(a, p)], l)),
            }
        }
    }
    let _ = writeln!(out, "## {title}\n\n{intro}\n");
    for (pairs, l) in groups {
        let _ = writeln!(out, "### {}\n\n{header}", heading(&pairs));
        for line in l {
            let _ = writeln!(out, "{line}");
        }
        out.push('\n');
    }
}

/// "sm_86, sm_89 · f16, bf16": archs sharing a precision list are joined.
fn heading(pairs: &[(Arch, Precision)]) -> String {
    let mut by_arch: Vec<(Vec<Arch>, Vec<Precision>)> = Vec::new();
    for a in Arch::ALL {
        let ps: Vec<Precision> = pairs
            .iter()
            .filter(|(pa, _)| *pa == a)
            .map(|(_, p)| *p)
            .collect();
        if ps.is_empty() {
            continue;
        }
        match by_arch.iter_mut().find(|(_, q)| *q == ps) {
            Some((archs, _)) => archs.push(a),
            None => by_arch.push((vec![a], ps)),
        }
    }
    by_arch
        .iter()
        .map(|(archs, ps)| {
            let a: Vec<String> = archs.iter().map(|a| a.to_string()).collect();
            let p = if ps.len() == Precision::ALL.len() {
                "every precision".to_string()
            } else {
                ps.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
            };
            format!("{} · {p}", a.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn render() -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "# Dispatch table\n\n\
         Generated from `crates/fp8-sdpa/src/dispatch/rules.rs` by `cargo test -p fp8-sdpa --lib \
         dispatch_table_is_current`; do not edit. After a rule change run\n\
         `{UPDATE_ENV}=1 cargo test -p fp8-sdpa --lib dispatch_table_is_current` and review the \
         diff.\n\n\
         What runs under `KernelChoice::Auto` with the shipped tuned table (`tuned/default.json`, \
         no user table). Each cell is the variant key and the rule that picked it. SMs: \
         sm_80 108, sm_86 and sm_89 84, sm_90a 132. `any` mask: both masks pick the same. A length range covers the sampled lengths \
         (powers of two) from its first to its last; the rules' conditions give the exact bounds.\n\n\
         ## Rules, first match wins\n\n\
         | # | rule | picks | why |\n|---|---|---|---|\n"
    );
    for (i, r) in RULES.iter().enumerate() {
        let pick = match r.pick {
            Pick::Key(k) => format!("`{k}`"),
            Pick::Tuned => "the tuned entry".to_string(),
            Pick::Refuse => "nothing (an error)".to_string(),
        };
        let _ = writeln!(out, "| {} | {} | {pick} | {} |", i + 1, r.name, r.why);
    }
    out.push('\n');
    let (sb, sh) = SMALL;
    let (lb, lh) = LARGE;
    section(
        &mut out,
        "Contiguous calls (`dispatch::choose`), S = Sq = Skv",
        &format!("Small grid: B{sb} H{sh}/{sh}; large grid: B{lb} H{lh}/{lh}."),
        &format!(
            "| D | mask | S | small grid (B{sb} H{sh}) | large grid (B{lb} H{lh}) |\n|---|---|---|---|---|"
        ),
        dense_lines,
    );
    let (hq, hkv) = DECODE_HEADS;
    let (b0, b1) = DECODE_BATCHES;
    section(
        &mut out,
        "Decode-shaped calls",
        &format!(
            "Hq {hq} over Hkv {hkv}, Skv {}k; Sq 1 (full) or 4 (causal); B{b0} (small grid) or \
             B{b1} (large).",
            DECODE_KEYS / 1024
        ),
        &format!(
            "| D | mask | contiguous B{b0} | contiguous B{b1} | paged B{b0} | paged B{b1} |\n\
             |---|---|---|---|---|---|"
        ),
        decode_lines,
    );
    section(
        &mut out,
        "Variable-length calls",
        &format!(
            "Not decode-shaped (any lengths), decode-shaped (B8, Hq {hq} over Hkv {hkv}, longest \
             Skv {}k, Sq 1 or 4), and a paged cache (any shape). No tuned table is read.",
            DECODE_KEYS / 1024
        ),
        "| D | mask | varlen | varlen, decode-shaped | paged varlen |\n|---|---|---|---|---|",
        varlen_lines,
    );
    section(
        &mut out,
        "Class defaults (the tuner's baseline, `dispatch::class_default`)",
        "Before any rule on the shape.",
        "| D | full | causal |\n|---|---|---|",
        class_lines,
    );
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

#[test]
fn dispatch_table_is_current() {
    let now = render();
    if std::env::var_os(UPDATE_ENV).is_some() {
        std::fs::write(TABLE, &now).expect("writing docs/dispatch-table.md");
        return;
    }
    let old = std::fs::read_to_string(TABLE).unwrap_or_default();
    if old == now {
        return;
    }
    let (o, n): (Vec<&str>, Vec<&str>) = (old.lines().collect(), now.lines().collect());
    let mut diff: Vec<String> = o
        .iter()
        .filter(|l| !n.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    diff.extend(
        n.iter()
            .filter(|l| !o.contains(l))
            .map(|l| format!("+ {l}")),
    );
    panic!(
        "docs/dispatch-table.md is not what the rules pick ({} lines differ; the first):\n{}\n\
         If the change is intended, rewrite it and review the diff: {UPDATE_ENV}=1 cargo test \
         -p fp8-sdpa --lib dispatch_table_is_current",
        diff.len(),
        diff.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}
