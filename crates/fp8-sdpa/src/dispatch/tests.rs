//! The rule table's own checks: well-formed rules, none dead, every pick registered.

use super::*;
use crate::kernels::registry::{
    self, default_variant, default_variant_for_shape, registered, HOPPER_M64,
    HOPPER_N128_PERSISTENT, KV8_FRAG_D128, KV8_FRAG_D64,
};
use crate::variant::{Family, HEAD_DIMS};
use std::collections::{HashMap, HashSet};

fn v(key: &str) -> Variant {
    variant_of(key)
}

#[test]
fn rule_names_are_unique_and_keys_parse() {
    let mut names = HashSet::new();
    for r in RULES {
        assert!(names.insert(r.name), "rule {} twice", r.name);
        if let Pick::Key(k) = r.pick {
            assert!(k.parse::<Variant>().is_ok(), "rule {}: key {k}", r.name);
        }
    }
    // The last rule takes every call, so `Call::decide` always ends on a rule.
    let last = RULES[RULES.len() - 1];
    let any = Call::new(Path::Class, Arch::Sm80, Precision::F16, 96, false, None, 0);
    assert!((last.when)(&any), "the last rule must take every call");
}

#[test]
fn every_why_is_one_line_with_a_pointer_and_no_run_history() {
    for r in RULES {
        assert!(!r.why.contains('\n'), "{}: one line", r.name);
        if r.pick != Pick::Refuse {
            assert!(
                r.why.contains("perf-notes: "),
                "{}: no perf-notes pointer",
                r.name
            );
        }
        let w = r.why.to_lowercase();
        for word in ["round ", "run "] {
            for (i, _) in w.match_indices(word) {
                let next = w[i + word.len()..].chars().next();
                assert!(
                    !next.is_some_and(|c| c.is_ascii_digit()),
                    "{}: cites a {word}number; point at perf-notes instead",
                    r.name
                );
            }
        }
    }
}

/// Every (path, call) of a grid that reaches each region of the table: the rules each
/// takes, and whether its pick is registered and fits.
#[test]
fn every_rule_is_reached_and_every_pick_is_registered_and_fits() {
    let registered: HashMap<Arch, HashSet<String>> = Arch::ALL
        .into_iter()
        .map(|a| {
            let keys = registry::registered_for(a)
                .iter()
                .map(|s| s.key())
                .collect();
            (a, keys)
        })
        .collect();
    let tables = (None, TunedTable::shipped());
    let mut reached: HashSet<&str> = HashSet::new();
    // `must_fit` false: a paged call's pick, which validation may refuse (the decode family
    // only reads a paged cache, so the call fails with the reason).
    let mut check = |a: Arch,
                     p: Precision,
                     d: u32,
                     c: bool,
                     rule: &'static Rule,
                     v: Option<Variant>,
                     must_fit: bool| {
        reached.insert(rule.name);
        let Some(v) = v else { return };
        let spec = KernelSpec {
            variant: v,
            precision: p,
            head_dim: d,
            causal: c,
        };
        match spec.validate(a) {
            Err(_) if !must_fit => return,
            Err(e) => panic!("rule {}: {} on {a}: {e}", rule.name, spec.key()),
            Ok(()) => {}
        }
        assert!(
            registered[&a].contains(&spec.key()),
            "rule {}: {} on {a} is not registered",
            rule.name,
            spec.key()
        );
    };
    for a in Arch::ALL {
        for p in Precision::ALL {
            for d in HEAD_DIMS {
                for c in [false, true] {
                    let (rule, v) = Call::new(Path::Class, a, p, d, c, None, 0).decide();
                    check(a, p, d, c, rule, v, true);
                    let (rule, v) = Call::new(Path::Varlen, a, p, d, c, None, 0).decide();
                    check(a, p, d, c, rule, v, true);
                    let (rule, v) = Call::new(Path::VarlenPaged, a, p, d, c, None, 0).decide();
                    check(a, p, d, c, rule, v, false);
                    for sq in [1, 4, 64, 512, 1024, 2048, 4096, 8192] {
                        for skv in [sq, 4096] {
                            for (b, hq, hkv) in [(1, 8, 8), (2, 8, 8), (16, 16, 16), (32, 32, 8)] {
                                let shape = AttnShape::new(b, sq, skv, hq, hkv, d as usize);
                                for sm in [132, 16] {
                                    let (rule, v) = choose_in(tables, a, p, &shape, c, sm);
                                    check(a, p, d, c, rule, Some(v), true);
                                    let (rule, v) = choose_paged_in(tables, a, p, &shape, sm);
                                    check(a, p, d, c, rule, Some(v), false);
                                }
                                let call = Call::new(Path::Varlen, a, p, d, c, Some(shape), 0);
                                let (rule, v) = call.decide();
                                check(a, p, d, c, rule, v, true);
                            }
                        }
                    }
                }
            }
        }
    }
    let dead: Vec<&str> = RULES
        .iter()
        .map(|r| r.name)
        .filter(|n| !reached.contains(n))
        .collect();
    assert!(dead.is_empty(), "rules no call reaches: {dead:?}");
}

#[test]
fn the_wrappers_agree_with_the_table() {
    // The public entry points and the registry's names read the same table.
    let shape = AttnShape::new(2, 512, 512, 8, 8, 64);
    let t = (None, TunedTable::shipped());
    for a in Arch::ALL {
        for p in Precision::ALL {
            assert_eq!(
                default_for_shape(a, p, &shape, false, 132),
                registry::default_variant_for_shape(a, p, &shape, false, 132)
            );
            assert_eq!(
                choose_in(t, a, p, &shape, true, 132).1,
                registry::default_variant_for_shape(a, p, &shape, true, 132)
            );
            for d in HEAD_DIMS {
                assert_eq!(
                    class_default(a, p, d, true),
                    registry::default_variant(a, p, d, true)
                );
                assert_eq!(
                    varlen(a, p, d, false, None),
                    registry::varlen_default(a, p, d, false)
                );
                assert_eq!(
                    varlen_paged(a, p, d),
                    registry::decode_varlen_default(a, p, d)
                );
                assert_eq!(paged_default(a, p, d), registry::decode_default(a, p, d));
            }
        }
    }
}

// The shipped picks of particular classes and shapes, by family.

#[test]
fn defaults_are_registered_and_fit() {
    let reg = registered();
    for a in Arch::ALL {
        for p in Precision::ALL {
            for d in HEAD_DIMS {
                for c in [false, true] {
                    let variant = default_variant(a, p, d, c);
                    let spec = KernelSpec {
                        variant,
                        precision: p,
                        head_dim: d,
                        causal: c,
                    };
                    spec.validate(a)
                        .unwrap_or_else(|e| panic!("{} on {a}: {e}", spec.key()));
                    assert!(reg.contains(&spec), "default {} not registered", spec.key());
                }
            }
        }
    }
}

#[test]
fn hopper_d256_8bit_defaults_are_fragment_decode_and_the_ring_of_one() {
    // 8-bit K/V at D256 on sm_90a. E4M3: fragment decode on 64-row blocks (Q 32 KB + two
    // 8-bit K/V slots 64 KB, plus a bf16 Q's row factors). The seeds' u8 code: the ring of
    // one, one 8-bit slot with two staging pairs (Q 64 KB + staging 128 KB + ring 32 KB).
    // 16-bit K/V take the Hopper family (its own test below), and so does full FP8
    // (checked here too).
    for causal in [false, true] {
        let v = default_variant(Arch::Sm90a, Precision::Fp8, 256, causal);
        assert_eq!(v.family, Family::Hopper);
        assert_eq!((v.tile_n, v.overlap, v.persistent), (64, false, !causal));
    }
    for p in Precision::ALL
        .into_iter()
        .filter(|p| p.kv_is_8bit() && *p != Precision::Fp8)
    {
        for causal in [false, true] {
            let v = default_variant(Arch::Sm90a, p, 256, causal);
            let spec = KernelSpec {
                variant: v,
                precision: p,
                head_dim: 256,
                causal,
            };
            let (tile_m, stages, smem, frag) = if p == Precision::SimFp8 {
                (128, 1, 229_376, false)
            } else if p.kv_is_8bit() {
                let rows = if p.q() == crate::dtype::DType::Bf16 {
                    4 * 64
                } else {
                    0
                };
                (64, 2, 98_304 + rows, true)
            } else {
                (128, 2, 196_608, false)
            };
            assert_eq!(
                (v.tile_m, v.tile_n, v.stages, v.producer_warps),
                (tile_m, 64, stages, 0),
                "{}",
                spec.key()
            );
            assert_eq!(v.fragment_decode, frag, "{}", spec.key());
            assert_eq!(spec.dynamic_smem_bytes(), smem, "{}", spec.key());
        }
    }
}

#[test]
fn hopper_family_is_the_16bit_default_on_sm90a_except_small_grids() {
    for p in [Precision::F16, Precision::Bf16] {
        for d in [64u32, 128, 256] {
            for causal in [false, true] {
                let v = default_variant(Arch::Sm90a, p, d, causal);
                assert_eq!(v.family, Family::Hopper, "{p:?} d{d} causal {causal}");
                assert_eq!(
                    default_variant(Arch::Sm80, p, d, causal).family,
                    Family::Portable
                );
                let long = AttnShape {
                    batch: 4,
                    seq_q: 4096,
                    seq_kv: 4096,
                    heads_q: 2048 / d as usize,
                    heads_kv: 2048 / d as usize,
                    head_dim: d as usize,
                };
                // D64 causal up to S 4k: the 128-row tile; from S 8k the class
                // default.
                let want = if d == 64 && causal {
                    self::v(HOPPER_N128_PERSISTENT)
                } else {
                    v
                };
                assert_eq!(
                    default_variant_for_shape(Arch::Sm90a, p, &long, causal, 132),
                    want
                );
                let longer = AttnShape {
                    seq_q: 8192,
                    seq_kv: 8192,
                    ..long
                };
                assert_eq!(
                    default_variant_for_shape(Arch::Sm90a, p, &longer, causal, 132),
                    v
                );
                let short = AttnShape {
                    batch: 16,
                    seq_q: 1024,
                    seq_kv: 1024,
                    ..long
                };
                let got = default_variant_for_shape(Arch::Sm90a, p, &short, causal, 132);
                assert_eq!(got.family, Family::Hopper, "{p:?} d{d} S 1k");
                // D64's 192-row tile from S 2k, the 128-row one below; D128 causal up to
                // S 1k the persistent ping-pong tile.
                if d == 64 {
                    assert_eq!(v.tile_m, 192);
                }
                if d == 64 || (d == 128 && causal) {
                    assert_eq!(got, self::v(HOPPER_N128_PERSISTENT));
                }
            }
        }
    }
}

#[test]
fn small_d64_grids_take_the_64_row_hopper_tile_and_tiny_ones_the_portable_tile() {
    let mha = |batch, seq, heads| AttnShape {
        batch,
        seq_q: seq,
        seq_kv: seq,
        heads_q: heads,
        heads_kv: heads,
        head_dim: 64,
    };
    for p in [Precision::F16, Precision::Bf16] {
        // The mission shapes: 128 and 64 blocks of 64 rows on 132 SMs.
        for shape in [mha(2, 512, 8), mha(2, 256, 8)] {
            let got = default_variant_for_shape(Arch::Sm90a, p, &shape, false, 132);
            assert_eq!(got, v(HOPPER_M64), "{shape:?}");
            // Causal and sm_80 keep the portable small tile.
            let causal = default_variant_for_shape(Arch::Sm90a, p, &shape, true, 132);
            assert_eq!(causal.family, Family::Portable);
            let ampere = default_variant_for_shape(Arch::Sm80, p, &shape, false, 108);
            assert_eq!(ampere.family, Family::Portable);
        }
        // One block: the portable tile.
        let tiny = default_variant_for_shape(Arch::Sm90a, p, &mha(1, 32, 1), false, 132);
        assert_eq!(tiny.family, Family::Portable);
    }
}

#[test]
fn decode_shaped_calls_take_the_decode_family() {
    for a in [Arch::Sm80, Arch::Sm90a] {
        for p in [Precision::F16, Precision::Bf16, Precision::Fp8KvF16] {
            for (sq, hkv) in [(1, 8), (1, 32), (4, 8), (16, 8)] {
                let shape = AttnShape::new(8, sq, 32768, 32, hkv, 128);
                let got = default_variant_for_shape(a, p, &shape, sq > 1, 132);
                assert_eq!(got.family, Family::Decode, "{p:?} Sq {sq} Hkv {hkv} on {a}");
            }
            // 68 rows per kv head: a prefill tile's job.
            let shape = AttnShape::new(8, 17, 32768, 32, 8, 128);
            let got = default_variant_for_shape(a, p, &shape, true, 132);
            assert_ne!(got.family, Family::Decode, "{p:?} Sq 17 on {a}");
        }
        // Full FP8 (8-bit Q) has no decode variant: the prefill families serve it.
        let shape = AttnShape::new(8, 1, 4096, 32, 8, 128);
        let got = default_variant_for_shape(a, Precision::Fp8, &shape, false, 132);
        assert_ne!(got.family, Family::Decode);
    }
}

/// The fa grid's S 512 point with `s`'s heads and head dim.
fn s512_of(s: &AttnShape) -> AttnShape {
    AttnShape {
        batch: 32,
        seq_q: 512,
        seq_kv: 512,
        ..*s
    }
}

#[test]
fn shape_defaults_are_registered_and_fit() {
    let reg = registered();
    let shapes = [
        (1, 1, 32),
        (2, 8, 256),
        (2, 8, 512),
        (2, 8, 2048),
        (16, 16, 1024),
    ];
    for a in Arch::ALL {
        for p in Precision::ALL {
            for d in HEAD_DIMS {
                for c in [false, true] {
                    for (batch, heads, seq) in shapes {
                        let shape = AttnShape {
                            batch,
                            seq_q: seq,
                            seq_kv: seq,
                            heads_q: heads,
                            heads_kv: heads,
                            head_dim: d as usize,
                        };
                        let variant = default_variant_for_shape(a, p, &shape, c, 132);
                        let spec = KernelSpec {
                            variant,
                            precision: p,
                            head_dim: d,
                            causal: c,
                        };
                        spec.validate(a)
                            .unwrap_or_else(|e| panic!("{} on {a}: {e}", spec.key()));
                        assert!(reg.contains(&spec), "{} not registered", spec.key());
                    }
                }
            }
        }
    }
    // The mission shape takes the 64-row tile; a full grid keeps the class default.
    let mission = AttnShape {
        batch: 2,
        seq_q: 512,
        seq_kv: 512,
        heads_q: 8,
        heads_kv: 8,
        head_dim: 64,
    };
    let got = default_variant_for_shape(Arch::Sm90a, Precision::F16, &mission, false, 132);
    assert_eq!(got.tile_m, 64);
    let big = AttnShape {
        batch: 16,
        seq_q: 1024,
        seq_kv: 1024,
        heads_q: 32,
        heads_kv: 32,
        ..mission
    };
    let got = default_variant_for_shape(Arch::Sm90a, Precision::F16, &big, false, 132);
    assert_eq!(got, v(HOPPER_N128_PERSISTENT), "D64 below S 2k");
    let long = AttnShape {
        seq_q: 4096,
        seq_kv: 4096,
        ..big
    };
    let got = default_variant_for_shape(Arch::Sm90a, Precision::F16, &long, false, 132);
    assert_eq!(got, default_variant(Arch::Sm90a, Precision::F16, 64, false));
    // 8-bit K/V on Hopper: FP8-KV at D64/D128 runs on the Hopper family's
    // persistent ping-pong tile at every length, causal or not, and full FP8 on its own
    // Hopper kernel; the seeds' u8 code keeps the portable rules (fragment decode up to
    // S 2k at D64 and S 512 at D128, the non-causal 256-row default from S 4k at D64 and
    // S 8k at D128). FP8-KV at D256 stays portable.
    for (d, heads) in [(64usize, 32usize), (128, 16)] {
        let short = AttnShape {
            heads_q: heads,
            heads_kv: heads,
            head_dim: d,
            ..big
        };
        let long = AttnShape {
            batch: 4,
            seq_q: 4096,
            seq_kv: 4096,
            ..short
        };
        let longer = AttnShape {
            batch: 2,
            seq_q: 8192,
            seq_kv: 8192,
            ..short
        };
        for s in [short, s512_of(&short), long, longer] {
            for causal in [false, true] {
                for fp8kv in [Precision::Fp8KvF16, Precision::Fp8KvBf16] {
                    let got = default_variant_for_shape(Arch::Sm90a, fp8kv, &s, causal, 132);
                    assert_eq!(
                        got,
                        v(HOPPER_N128_PERSISTENT),
                        "{fp8kv:?} d{d} s{}",
                        s.seq_q
                    );
                }
                let got = default_variant_for_shape(Arch::Sm90a, Precision::Fp8, &s, causal, 132);
                assert_eq!(got.family, Family::Hopper, "fp8 d{d} s{}", s.seq_q);
            }
        }
        let frag = if d == 64 { KV8_FRAG_D64 } else { KV8_FRAG_D128 };
        let sim =
            |s: &AttnShape| default_variant_for_shape(Arch::Sm90a, Precision::SimFp8, s, true, 132);
        assert_eq!(sim(&s512_of(&short)).key(), frag);
        if d == 64 {
            assert_eq!(sim(&short).key(), frag);
        } else {
            assert_eq!(
                sim(&short),
                default_variant(Arch::Sm90a, Precision::SimFp8, 128, true)
            );
        }
        assert_eq!(
            sim(&longer),
            default_variant(Arch::Sm90a, Precision::SimFp8, d as u32, false)
        );
        assert_eq!(
            default_variant(Arch::Sm90a, Precision::Fp8KvF16, d as u32, true).paired_rows,
            d == 128
        );
    }
    let d256 = AttnShape {
        heads_q: 8,
        heads_kv: 8,
        head_dim: 256,
        ..big
    };
    let got = default_variant_for_shape(Arch::Sm90a, Precision::Fp8KvF16, &d256, false, 132);
    assert_eq!(got.family, Family::Portable);
    // Full FP8 (8-bit Q) at D64 and D128: the Hopper family's FP8 kernel.
    let full = default_variant_for_shape(Arch::Sm90a, Precision::Fp8, &big, false, 132);
    assert_eq!(full.family, Family::Hopper);
}
