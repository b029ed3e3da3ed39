//! `fp8_sdpa::fuzzing::check_cu_seqlens` (fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fp8_sdpa::fuzzing::check_cu_seqlens(data);
});
