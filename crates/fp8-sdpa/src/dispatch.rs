//! Choosing the kernel for a problem: a tuned table's entry for the call's class (the user's
//! table, then the one shipped in the crate; see [`crate::tuned`]), else the registry's
//! hand-picked default for the arch, precision, head dim and mask, switched to a
//! smaller-tile variant when the default's grid would leave SMs idle.

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::error::Result;
use crate::kernels::registry;
use crate::problem::AttnShape;
use crate::tuned::{ShapeClass, TunedTable};
use crate::variant::Variant;

/// The variant the library runs for this problem on a device with `sm_count` SMs when the
/// caller does not choose. A tuned entry covers its whole class (every shape of that arch,
/// precision, head dim and class). Fails only on a user tuned table that does not parse.
pub fn choose(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> Result<Variant> {
    let class = ShapeClass::of(shape, causal);
    if let Some(v) = TunedTable::resolve(arch, precision, shape.head_dim as u32, class)? {
        return Ok(v);
    }
    Ok(registry::default_variant_for_shape(
        arch, precision, shape, causal, sm_count,
    ))
}
