//! The offline resource gates ("green before fast", gate 2): a kernel that spills, keeps a
//! stack frame, needs more shared memory than the arch allows, or uses more registers than
//! its variant declares is rejected before anything is timed.

use crate::compile::Compiled;
use serde::{Deserialize, Serialize};

/// One violated gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Gate name: `spill`, `stack`, `smem`, `registers`.
    pub gate: String,
    /// What was found against what is allowed.
    pub detail: String,
}

/// Checks a compiled kernel against every resource gate; empty means it passes.
pub fn check(c: &Compiled) -> Vec<Violation> {
    let r = &c.resources;
    let mut v = Vec::new();
    if r.spill_stores > 0 || r.spill_loads > 0 {
        v.push(Violation {
            gate: "spill".into(),
            detail: format!(
                "{} bytes spill stores, {} bytes spill loads",
                r.spill_stores, r.spill_loads
            ),
        });
    }
    if r.stack_frame > 0 {
        v.push(Violation {
            gate: "stack".into(),
            detail: format!("{} bytes stack frame", r.stack_frame),
        });
    }
    let smem = r.static_smem + c.spec.dynamic_smem_bytes();
    let limit = c.arch.smem_optin_limit();
    if smem > limit {
        v.push(Violation {
            gate: "smem".into(),
            detail: format!("{smem} bytes shared memory > {limit} ({})", c.arch),
        });
    }
    let budget = c.spec.variant.register_budget();
    if r.registers > budget {
        v.push(Violation {
            gate: "registers".into(),
            detail: format!(
                "{} registers > budget {budget} ({} threads x {} blocks/SM)",
                r.registers,
                c.spec.variant.threads(),
                c.spec.variant.min_blocks
            ),
        });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{Origin, ResourceUsage};
    use crate::{Arch, KernelSpec, Precision, Variant};

    fn compiled(r: ResourceUsage) -> Compiled {
        Compiled {
            spec: KernelSpec {
                variant: Variant::reference(),
                precision: Precision::F16,
                head_dim: 64,
                causal: false,
            },
            arch: Arch::Sm80,
            cubin: vec![],
            entry: "sdpa_reference",
            resources: r,
            log: String::new(),
            origin: Origin::Compiled,
        }
    }

    #[test]
    fn clean_kernel_passes() {
        assert!(check(&compiled(ResourceUsage {
            registers: 40,
            ..Default::default()
        }))
        .is_empty());
    }

    #[test]
    fn each_gate_fires() {
        let v = check(&compiled(ResourceUsage {
            registers: 256,
            spill_stores: 4,
            stack_frame: 8,
            static_smem: 200 * 1024,
            ..Default::default()
        }));
        let gates: Vec<_> = v.iter().map(|x| x.gate.as_str()).collect();
        assert_eq!(gates, ["spill", "stack", "smem", "registers"]);
    }
}
