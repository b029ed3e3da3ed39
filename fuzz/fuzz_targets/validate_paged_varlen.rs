//! `fp8_sdpa::fuzzing::check_validate_paged_varlen` (fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fp8_sdpa::fuzzing::check_validate_paged_varlen(data);
});
