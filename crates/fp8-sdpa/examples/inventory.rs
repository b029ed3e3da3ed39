//! The portable family's mode inventory (issue 32): which compile-time modes of portable.cu
//! the shipped choices use, per arch and shape class.
//!
//! `cargo run --release -p fp8-sdpa --example inventory`
//!
//! Shipped choices are what a caller gets without naming a kernel:
//! - dispatch (`default_variant_for_shape`, after the tuned table) over every arch, precision,
//!   head dim, mask and a grid of shapes (tiny and mission grids, 16k-token grids from S 512 to
//!   16k, decode-shaped calls);
//! - variable-length calls (`varlen_default`) per class;
//! - the shipped tuned table's entries.
//!
//! The class defaults (`default_variant`) are listed apart: only the tuner's baseline and the
//! tests read them directly. Each portable spec's modes are derived from its defines as
//! portable.cu derives them (its `cfg` namespace).
use fp8_sdpa::kernels::registry;
use fp8_sdpa::tuned::TunedTable;
use fp8_sdpa::variant::{Family, KernelSpec, SyncPolicy, Variant, HEAD_DIMS};
use fp8_sdpa::{Arch, AttnShape, Precision};
use std::collections::{BTreeMap, BTreeSet};

/// SM counts the grid-size rules see: A100 (sm_80), A10 / RTX 3090 class (sm_86), L40S /
/// RTX 4090 class (sm_89), H100 SXM (sm_90a).
fn sm_count(a: Arch) -> u32 {
    match a {
        Arch::Sm80 => 108,
        Arch::Sm86 => 84,
        Arch::Sm89 => 128,
        Arch::Sm90a => 132,
    }
}

/// portable.cu's `own_fits`: a tile's 8-bit chunks deal evenly over the threads in row pairs.
fn own_fits(s: &KernelSpec) -> bool {
    let nt = s.variant.threads();
    let ch8 = s.head_dim / 16;
    let pair = 2 * ch8;
    nt > 0
        && (s.variant.tile_n * ch8).is_multiple_of(nt)
        && nt.is_multiple_of(pair)
        && (2 * nt / pair).is_multiple_of(8)
}

/// The compile-time modes of a portable spec, named as in portable.cu.
fn modes(s: &KernelSpec, varlen: bool) -> Vec<String> {
    let v = &s.variant;
    let d = s.head_dim;
    let p = s.precision;
    let kv8 = p.kv_is_8bit();
    let q8 = p.q().size() == 1;
    let frag = kv8 && v.fragment_decode;
    let staged = kv8 && !frag;
    let r = v.tile_m / (16 * v.warps);
    let cn = if v.half_steps { v.tile_n / 2 } else { v.tile_n };
    let decoupled = v.sync == SyncPolicy::Decoupled;
    let light = v.sync != SyncPolicy::Block;
    let pipe = staged && v.stages >= 2 && d <= 128;
    let fits = own_fits(s);
    let split_base = staged && !pipe && v.cp_async && v.tc_pv && !v.half_steps && fits;
    let ring1 = split_base && v.stages == 1 && d == 256;
    let split = split_base && (v.stages >= 2 || ring1);
    let stream = decoupled && v.persistent;
    let q_regs = (r == 1 && d <= 128) || (stream && d == 64);
    let skip = !stream
        && s.causal
        && light
        && v.tc_pv
        && (!pipe || decoupled)
        && (d >= 128 || v.paired_rows);
    let rescale_skip = r == 2 && cn <= 32;
    let rowsc = frag && !q8 && p.q() == fp8_sdpa::DType::Bf16;
    let nt = v.threads();
    let (bm, bn) = (v.tile_m, v.tile_n);
    let (ch16, ch8) = (d * 2 / 16, d / 16);
    let mut m = vec![
        (if v.cp_async {
            "cp.async"
        } else {
            "plain loads (no cp.async)"
        })
        .to_string(),
        (if v.tc_pv {
            "tensor-core P.V"
        } else {
            "scalar P.V"
        })
        .into(),
        format!("sync {:?}", v.sync).to_lowercase(),
        (if v.swizzle { "swizzle" } else { "padded rows" }).into(),
        (if v.fast_exp { "ex2.approx" } else { "exp2f" }).into(),
        format!("stages {}", v.stages),
        format!("{} rows per warp", 16 * r),
        format!("tile_n {}", v.tile_n),
    ];
    if v.min_blocks > 1 {
        m.push("min_blocks > 1".into());
    }
    if v.half_steps {
        m.push("half steps".into());
    }
    if v.paired_rows {
        m.push("paired rows".into());
    }
    if stream {
        m.push("stream (persistent + decoupled)".into());
    } else if v.persistent {
        m.push("persistent grid (not the stream)".into());
    }
    m.push(
        match (kv8, frag, pipe, ring1, split) {
            (false, ..) => "K/V 16-bit (no decode)",
            (true, true, ..) => "K/V decode: fragment decode",
            (_, _, true, ..) if decoupled => "K/V decode: pipelined, decoupled (4 staging)",
            (_, _, true, ..) => "K/V decode: pipelined (2 staging)",
            (_, _, _, true, _) => "K/V decode: split, ring of one",
            (_, _, _, _, true) => "K/V decode: split, 2+ stages",
            _ => "K/V decode: serial staged (1 staging, 2 barriers)",
        }
        .into(),
    );
    if q8 {
        m.push("8-bit Q (decoded on load)".into());
        if stream {
            m.push("8-bit Q in the stream (load_q_warp)".into());
        }
    }
    if rowsc {
        m.push("row scales (fragment decode, bf16 Q)".into());
    }
    if q_regs {
        m.push("Q in registers".into());
    }
    if skip {
        m.push("causal warp skip".into());
    }
    if rescale_skip {
        m.push("rescale vote".into());
    }
    if varlen {
        m.push("varlen".into());
    }
    // Generic (non-fixed-column) copy and decode loops.
    let uses_load_kv = !(decoupled || split);
    let ch = if kv8 { ch8 } else { ch16 };
    if uses_load_kv && !(nt.is_multiple_of(ch) && (bn * ch).is_multiple_of(nt)) {
        m.push("generic load_kv loop".into());
    }
    if !stream {
        let fixed = if frag && !q8 {
            true
        } else if !q8 {
            nt.is_multiple_of(ch16) && (bm * ch16).is_multiple_of(nt)
        } else {
            (d >= 128 || bm <= 128 || decoupled)
                && nt.is_multiple_of(ch8)
                && (bm * ch8).is_multiple_of(nt)
        };
        if !fixed {
            m.push("generic load_q loop".into());
        }
    }
    if (pipe || split) && !fits {
        m.push("generic decode_kv loop (chunks do not pair)".into());
    }
    m
}

fn shapes(d: usize) -> Vec<(&'static str, AttnShape)> {
    let h = 2048 / d;
    let mut out = vec![
        ("tiny B1 H1 S32", AttnShape::new(1, 32, 32, 1, 1, d)),
        (
            "mission-s256 B2 H8 S256",
            AttnShape::new(2, 256, 256, 8, 8, d),
        ),
        ("mission B2 H8 S512", AttnShape::new(2, 512, 512, 8, 8, d)),
        ("B2 H8 S2k", AttnShape::new(2, 2048, 2048, 8, 8, d)),
    ];
    for (b, s, name) in [
        (32, 512, "fa S512"),
        (16, 1024, "fa S1k"),
        (8, 2048, "fa S2k"),
        (5, 3072, "fa S3k"),
        (4, 4096, "fa S4k"),
        (2, 8192, "fa S8k"),
        (1, 16384, "fa S16k"),
    ] {
        out.push((name, AttnShape::new(b, s, s, h, h, d)));
    }
    for (sq, name) in [(1, "decode Sq1"), (4, "decode Sq4"), (16, "decode Sq16")] {
        out.push((name, AttnShape::new(8, sq, 32768, 32, 8, d)));
    }
    out.push((
        "prefill Sq17 Skv32k GQA",
        AttnShape::new(8, 17, 32768, 32, 8, d),
    ));
    out
}

fn main() {
    // spec key -> (arch -> shape labels) for dispatch; spec key -> arches for varlen.
    let mut dispatch: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut varlen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut class_default: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut specs: BTreeMap<String, (KernelSpec, bool)> = BTreeMap::new();
    let mut picked_variants: BTreeSet<String> = BTreeSet::new();
    for a in Arch::ALL {
        for p in Precision::ALL {
            for d in HEAD_DIMS {
                for c in [false, true] {
                    let spec_of = |variant: Variant| KernelSpec {
                        variant,
                        precision: p,
                        head_dim: d,
                        causal: c,
                    };
                    for (label, shape) in shapes(d as usize) {
                        let v = fp8_sdpa::dispatch::choose(a, p, &shape, c, sm_count(a))
                            .expect("the shipped table parses");
                        picked_variants.insert(v.key());
                        if v.family != Family::Portable {
                            continue;
                        }
                        let s = spec_of(v);
                        specs.entry(s.key()).or_insert((s, false));
                        dispatch
                            .entry(s.key())
                            .or_default()
                            .entry(a.name().to_string())
                            .or_default()
                            .insert(label.to_string());
                    }
                    let v = registry::varlen_default(a, p, d, c);
                    picked_variants.insert(v.key());
                    let s = spec_of(v);
                    specs
                        .entry(format!("{}+varlen", s.key()))
                        .or_insert((s, true));
                    varlen
                        .entry(s.key())
                        .or_default()
                        .insert(a.name().to_string());
                    let v = registry::default_variant(a, p, d, c);
                    if v.family == Family::Portable {
                        class_default
                            .entry(spec_of(v).key())
                            .or_default()
                            .insert(a.name().to_string());
                    }
                }
            }
        }
    }

    println!("# Portable family: the modes of portable.cu that shipped choices use");
    println!("# (generated by `cargo run --release -p fp8-sdpa --example inventory`)");
    println!();
    println!("## Shipped tuned table (tuned/default.json)");
    let mut tuned_portable = 0;
    for e in TunedTable::shipped().entries() {
        let fam = e.variant.split('.').next().unwrap_or("?");
        if fam == "portable" {
            tuned_portable += 1;
        }
        println!(
            "  {} {} d{} {} {:?}: {}",
            e.arch, e.precision, e.head_dim, e.shape_class, e.bucket, e.variant
        );
    }
    println!("  portable entries: {tuned_portable}");
    println!();

    // Mode -> where it is used.
    let mut mode_uses: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    println!("## Portable specs dispatch picks (arch: shapes)");
    for (key, per_arch) in &dispatch {
        let (s, _) = specs[key];
        println!("{key}");
        for (a, labels) in per_arch {
            println!(
                "    {a}: {}",
                labels.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let ms = modes(&s, false);
        println!("    modes: {}", ms.join(", "));
        for m in ms {
            for (a, labels) in per_arch {
                let e = mode_uses.entry(m.clone()).or_default();
                for l in labels {
                    e.entry(a.clone()).or_default().insert(format!(
                        "{} {} {}{}",
                        s.precision.name(),
                        format_args!("d{}", s.head_dim),
                        if s.causal { "causal " } else { "" },
                        l
                    ));
                }
            }
        }
    }
    println!();
    println!("## Varlen calls (varlen_default, SDPA_VARLEN builds), portable specs per arch");
    for (key, arches) in &varlen {
        let (s, _) = specs[&format!("{key}+varlen")];
        if s.variant.family != Family::Portable {
            continue;
        }
        println!(
            "{key}: {}",
            arches.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        let ms = modes(&s, true);
        println!("    modes: {}", ms.join(", "));
        for m in ms {
            let e = mode_uses.entry(m).or_default();
            for a in arches {
                e.entry(a.clone()).or_default().insert(format!(
                    "varlen {} d{}{}",
                    s.precision.name(),
                    s.head_dim,
                    if s.causal { " causal" } else { "" }
                ));
            }
        }
    }
    println!();
    println!(
        "## Modes: where shipped choices use them (arch: number of (class, shape) uses, e.g.)"
    );
    for (m, per_arch) in &mode_uses {
        println!("{m}");
        for (a, uses) in per_arch {
            println!(
                "    {a}: {} uses, e.g. {}",
                uses.len(),
                uses.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
            );
        }
    }
    let all_modes = [
        "plain loads (no cp.async)",
        "scalar P.V",
        "sync block",
        "padded rows",
        "exp2f",
        "persistent grid (not the stream)",
        "8-bit Q in the stream (load_q_warp)",
        "K/V decode: serial staged (1 staging, 2 barriers)",
        "generic load_kv loop",
        "generic load_q loop",
        "generic decode_kv loop (chunks do not pair)",
    ];
    println!();
    println!("## Modes no shipped choice uses");
    // Retired (the variant rules reject them; restore patches in
    // docs/results/2026-11-26-portable-round27/).
    let retired = [
        "persistent grid (not the stream)",
        "8-bit Q in the stream (load_q_warp)",
    ];
    for m in all_modes {
        if !mode_uses.contains_key(m) {
            let note = if retired.contains(&m) {
                "  (retired)"
            } else {
                ""
            };
            println!("  {m}{note}");
        }
    }

    println!();
    println!("## Class defaults (default_variant; read directly only by the tuner's baseline)");
    for (key, arches) in &class_default {
        let shipped = dispatch.contains_key(key);
        println!(
            "  {key}: {}{}",
            arches.iter().cloned().collect::<Vec<_>>().join(", "),
            if shipped {
                ""
            } else {
                "  (no shape dispatches it)"
            }
        );
    }

    println!();
    println!("## Registered portable variants: the classes dispatch or varlen calls use");
    let reg = registry::registered();
    let mut reg_by_variant: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for s in &reg {
        if s.variant.family != Family::Portable {
            continue;
        }
        let used = dispatch.contains_key(&s.key()) || varlen.contains_key(&s.key());
        let e = reg_by_variant.entry(s.variant.key()).or_default();
        e.0 += 1;
        e.1 += usize::from(used);
    }
    for (k, (n, used)) in &reg_by_variant {
        let v: Variant = k.parse().expect("registered keys parse");
        let seeds_toggle =
            !(v.cp_async && v.tc_pv && v.fast_exp && v.swizzle) || v.sync == SyncPolicy::Block;
        let tag = match (*used, seeds_toggle) {
            (0, true) => "  (coverage of the seeds' toggles: no default)",
            (0, false) => "  EXPERIMENT ONLY (no default, no tuned entry)",
            _ => "",
        };
        println!("  {k}: {used} of {n} registered specs shipped{tag}");
    }
    let portable_specs = reg
        .iter()
        .filter(|s| s.variant.family == Family::Portable)
        .count();
    println!();
    println!(
        "registered: {} variants ({} portable), {} specs ({} portable); per arch (check):",
        registry::variants().len(),
        reg_by_variant.len(),
        reg.len(),
        portable_specs
    );
    for a in Arch::ALL {
        let r = registry::registered_for(a);
        println!(
            "  {}: {} specs, {} portable",
            a.name(),
            r.len(),
            r.iter()
                .filter(|s| s.variant.family == Family::Portable)
                .count()
        );
    }
    let total: BTreeSet<String> = dispatch.keys().chain(varlen.keys()).cloned().collect();
    println!(
        "shipped portable specs (dispatch or varlen): {}",
        total.len()
    );
}
