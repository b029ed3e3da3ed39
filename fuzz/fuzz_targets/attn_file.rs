//! `sdpa_harness::fuzzing::check_attn_file` (fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sdpa_harness::fuzzing::check_attn_file(data);
});
