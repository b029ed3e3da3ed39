//! The lab's library part: what other crates (the fuzz targets in `fuzz/`) call besides the
//! `sdpa-lab` binary.

pub mod attn_io;
#[doc(hidden)]
pub mod fuzzing;
