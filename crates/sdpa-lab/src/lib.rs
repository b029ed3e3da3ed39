//! The lab's library part: the `attn` command's file readers and their property check, which
//! live in `sdpa-harness` (the fuzz targets in `fuzz/` build on that crate alone) and are
//! re-exported here for the binary and its tests.

pub use sdpa_harness::attn_io;
#[doc(hidden)]
pub use sdpa_harness::fuzzing;
