use fp8_sdpa::kernels::registry;
use fp8_sdpa::{Arch, AttnShape, Precision};
use std::collections::BTreeMap;
fn main() {
    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in Arch::ALL {
        for p in Precision::ALL {
            for d in [64usize, 128, 256] {
                for c in [false, true] {
                    for (b, s, h) in [
                        (1, 32, 1),
                        (2, 256, 8),
                        (2, 512, 8),
                        (2, 2048, 8),
                        (32, 512, 2048 / d),
                        (16, 1024, 2048 / d),
                        (8, 2048, 2048 / d),
                        (4, 4096, 2048 / d),
                        (2, 8192, 2048 / d),
                        (1, 16384, 2048 / d),
                        (32, 1, 32),
                    ] {
                        let shape = AttnShape::new(b, s, s, h, h, d);
                        let v = registry::default_variant_for_shape(a, p, &shape, c, 132);
                        used.entry(v.key()).or_default().push(format!(
                            "{}/{}/d{}/{}/S{}",
                            a.name(),
                            p.name(),
                            d,
                            if c { "c" } else { "f" },
                            s
                        ));
                    }
                }
            }
        }
    }
    for (k, v) in &used {
        println!(
            "{k}: {} uses, e.g. {}",
            v.len(),
            v.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let reg: std::collections::BTreeSet<String> =
        registry::variants().iter().map(|v| v.key()).collect();
    println!(
        "registered {} variants; dispatched {}",
        reg.len(),
        used.len()
    );
    for r in &reg {
        if !used.contains_key(r) {
            println!("  not dispatched: {r}");
        }
    }
}
