//! Choosing the kernel for a problem: the registry's shipped default for the arch, precision,
//! head dim and mask.

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::kernels::registry;
use crate::problem::AttnShape;
use crate::variant::Variant;

/// The variant the library runs for this problem when the caller does not choose.
pub fn choose(arch: Arch, precision: Precision, shape: &AttnShape, causal: bool) -> Variant {
    registry::default_variant(arch, precision, shape.head_dim as u32, causal)
}
