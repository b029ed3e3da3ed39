//! `fp8_sdpa::fuzzing::check_cache_entry` (fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fp8_sdpa::fuzzing::check_cache_entry(data);
});
