//! The tuner: a search space per family (`space`), the evolutionary engine (`evo`), and the
//! per-config result cache (`cache`). `cmd::tune` runs it on the GPU gates.

pub mod cache;
pub mod evo;
pub mod replay;
pub mod space;
