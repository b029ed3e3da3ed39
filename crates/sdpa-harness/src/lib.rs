//! sdpa-harness: the fp8-sdpa lab's machinery, kept out of the library so that a user of
//! `fp8-sdpa` compiles and sees only the API they call. `sdpa-lab`, the GPU integration tests
//! and the candle crate's tests build on it; it depends on `fp8-sdpa`, never the reverse.
//!
//! - [`cases`]: test cases (shape, precision, distribution) and their host data;
//! - [`inputs`]: deterministic test inputs and their encodings;
//! - [`harness`]: running a case on the device and judging it against the float64 reference;
//! - [`metrics`]: error metrics and thresholds;
//! - [`gates`]: the offline resource gates;
//! - [`codec_check`]: the device FP8 codecs checked against the host ones;
//! - [`attn_io`]: the `sdpa-lab attn` command's safetensors files, read and checked;
//!   [`fuzzing`]: their property check, which the fuzz targets run (here rather than in the
//!   lab, so the instrumented fuzz build compiles neither the lab nor its CLI and plot crates).

pub mod attn_io;
pub mod cases;
pub mod codec_check;
pub mod fuzzing;
pub mod gates;
pub mod harness;
pub mod inputs;
pub mod metrics;
