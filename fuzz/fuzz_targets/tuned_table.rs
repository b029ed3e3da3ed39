//! `fp8_sdpa::fuzzing::check_tuned_table` (fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fp8_sdpa::fuzzing::check_tuned_table(data);
});
