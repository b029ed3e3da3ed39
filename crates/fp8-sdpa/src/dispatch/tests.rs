//! The rule table's own checks: well-formed rules, none dead, every pick registered.

use super::*;
use crate::kernels::registry;
use crate::variant::HEAD_DIMS;
use std::collections::{HashMap, HashSet};

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
