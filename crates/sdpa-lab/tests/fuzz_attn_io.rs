//! The `attn_file` fuzz target's check (`sdpa_lab::fuzzing`) as a property test, so that
//! `cargo test` (debug, overflow checks on) runs it: arbitrary bytes never make the attn
//! file readers panic, and what they accept is self-consistent.

use proptest::prelude::*;
use rand::{RngCore, SeedableRng};
use sdpa_lab::fuzzing::check_attn_file;

#[test]
fn attn_file_target_reaches_accepted_files() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let n = 2000;
    let ok = (0..n)
        .filter(|_| {
            let mut v = vec![0u8; (rng.next_u32() % 256) as usize];
            rng.fill_bytes(&mut v);
            check_attn_file(&v)
        })
        .count();
    eprintln!("attn_file: {:.1}% accepted", 100.0 * ok as f64 / n as f64);
    assert!(ok * 20 >= n, "only {ok} of {n} files accepted");
    // Past the end of the bytes every choice is the common valid one.
    assert!(check_attn_file(&[]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn attn_file_readers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_attn_file(&data);
    }
}
