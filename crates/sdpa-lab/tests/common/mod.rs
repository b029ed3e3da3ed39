//! Helpers shared by the CLI's integration tests.

/// The `sdpa-lab` binary under test: `SDPA_LAB_BIN` when set (the device machine runs tests
/// beside a carried binary), else the one cargo built.
pub fn bin() -> String {
    std::env::var("SDPA_LAB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sdpa-lab").to_string())
}
