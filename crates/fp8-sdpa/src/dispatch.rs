//! Choosing the kernel for a problem: the registry's shipped default for the arch, precision,
//! head dim and mask, switched to a smaller-tile variant when the default's grid would leave
//! SMs idle.

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::kernels::registry;
use crate::problem::AttnShape;
use crate::variant::Variant;

/// The variant the library runs for this problem on a device with `sm_count` SMs when the
/// caller does not choose.
pub fn choose(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> Variant {
    registry::default_variant_for_shape(arch, precision, shape, causal, sm_count)
}
