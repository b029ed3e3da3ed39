//! Helpers shared by the CLI's integration tests.

/// The `sdpa-lab` binary under test: `SDPA_LAB_BIN` when set (the device machine runs tests
/// beside a carried binary), else the one cargo built.
pub fn bin() -> String {
    if let Ok(b) = std::env::var("SDPA_LAB_BIN") {
        return b;
    }
    // On the GPU machine the test executables travel without the build tree (pack.sh puts
    // the binary in .device/bin): the build-time path is absent there, so use PATH's.
    let built = env!("CARGO_BIN_EXE_sdpa-lab");
    if std::path::Path::new(built).exists() {
        built.to_string()
    } else {
        "sdpa-lab".to_string()
    }
}
