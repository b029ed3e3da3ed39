//! sdpa-harness: the fp8-sdpa lab's machinery, kept out of the library so that a user of
//! `fp8-sdpa` compiles and sees only the API they call. `sdpa-lab`, the GPU integration tests
//! and the candle crate's tests build on it; it depends on `fp8-sdpa`, never the reverse.
//!
//! - [`cases`]: test cases (shape, precision, distribution) and their host data;
//! - [`inputs`]: deterministic test inputs and their encodings;
//! - [`harness`]: running a case on the device and judging it against the float64 reference;
//! - [`metrics`]: error metrics and thresholds;
//! - [`gates`]: the offline resource gates;
//! - [`codec_check`]: the device FP8 codecs checked against the host ones.

pub mod cases;
pub mod codec_check;
pub mod gates;
pub mod harness;
pub mod inputs;
pub mod metrics;
