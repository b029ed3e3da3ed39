//! The registered kernel specs: what `sdpa-lab check` compiles and `verify` runs, and the
//! shipped default per problem class.

use crate::dtype::Precision;
use crate::variant::{KernelSpec, Variant, HEAD_DIMS};

/// Every registered spec: each family's registered variants over the problem classes it serves.
pub fn registered() -> Vec<KernelSpec> {
    let mut out = Vec::new();
    for variant in variants() {
        for precision in Precision::ALL {
            for head_dim in HEAD_DIMS {
                for causal in [false, true] {
                    out.push(KernelSpec {
                        variant,
                        precision,
                        head_dim,
                        causal,
                    });
                }
            }
        }
    }
    out
}

/// The registered variants.
pub fn variants() -> Vec<Variant> {
    vec![Variant::reference()]
}

/// The shipped default for a problem class.
pub fn default_variant(
    _arch: crate::Arch,
    _precision: Precision,
    _head_dim: u32,
    _causal: bool,
) -> Variant {
    // Only the reference family exists so far.
    Variant::reference()
}
