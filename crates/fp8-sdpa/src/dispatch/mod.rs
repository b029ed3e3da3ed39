//! Choosing the kernel for a problem: a tuned table's entry for the call's class and shape
//! bucket (the user's table, then the one shipped in the crate; see [`crate::tuned`]), else
//! the registry's hand-picked default for the arch, precision, head dim and mask, switched to
//! a smaller-tile variant when the default's grid would leave SMs idle.

use crate::arch::Arch;
use crate::dtype::Precision;
use crate::error::Result;
use crate::kernels::registry;
use crate::problem::AttnShape;
use crate::tuned::{ShapeBucket, ShapeClass, TunedTable};
use crate::variant::{Family, Variant};

/// The variant the library runs for this problem (contiguous K/V) on a device with
/// `sm_count` SMs when the caller does not choose. Tuned entries are looked up for the
/// call's class and its [`ShapeBucket`] (which for decode depends on `sm_count`): the
/// bucket's entry before the class-wide one, the user's table before the shipped one. Fails
/// only on a user tuned table that does not parse.
pub fn choose(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    causal: bool,
    sm_count: u32,
) -> Result<Variant> {
    let class = ShapeClass::of(shape, causal);
    let bucket = ShapeBucket::of(shape, class, sm_count, false);
    if let Some(v) = TunedTable::resolve(arch, precision, shape.head_dim as u32, class, bucket)? {
        return Ok(v);
    }
    Ok(registry::default_variant_for_shape(
        arch, precision, shape, causal, sm_count,
    ))
}

/// The variant a paged-cache call runs when the caller does not choose: the tuned decode
/// entry for its bucket (`small-paged` or `large-paged`, then class-wide; only the decode
/// family reads a paged cache, so an entry of another family is passed over), else the
/// registry's [`registry::decode_default`]. Fails only on a user tuned table that does not
/// parse.
pub fn choose_paged(
    arch: Arch,
    precision: Precision,
    shape: &AttnShape,
    sm_count: u32,
) -> Result<Variant> {
    let class = ShapeClass::Decode;
    let bucket = ShapeBucket::of(shape, class, sm_count, true);
    match TunedTable::resolve(arch, precision, shape.head_dim as u32, class, bucket)? {
        Some(v) if v.family == Family::Decode => Ok(v),
        _ => Ok(registry::decode_default(
            arch,
            precision,
            shape.head_dim as u32,
        )),
    }
}

#[cfg(test)]
mod fixture;
