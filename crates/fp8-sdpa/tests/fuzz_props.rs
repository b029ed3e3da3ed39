//! The fuzz targets' property checks (`fp8_sdpa::fuzzing`, `fuzz/`) as property tests, so that
//! `cargo test` (debug, overflow checks on) exercises them on every run: arbitrary bytes never
//! make a check panic (a panic is a panic of the function under test or a broken property), and
//! fixed-seed runs reach the accepting branch often enough for its properties to be exercised.

use fp8_sdpa::fuzzing;
use proptest::prelude::*;
use rand::{RngCore, SeedableRng};

/// `n` byte strings of 0..256 bytes from a fixed seed.
fn corpus(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let mut v = vec![0u8; (rng.next_u32() % 256) as usize];
            rng.fill_bytes(&mut v);
            v
        })
        .collect()
}

/// Runs `check` over 2000 fixed-seed inputs and returns the fraction it accepted.
fn accepted(seed: u64, check: fn(&[u8]) -> bool) -> f64 {
    let inputs = corpus(seed, 2000);
    let n = inputs.iter().filter(|d| check(d)).count();
    n as f64 / inputs.len() as f64
}

#[test]
fn validation_targets_reach_accepted_calls() {
    for (name, check, seed) in [
        ("validate", fuzzing::check_validate as fn(&[u8]) -> bool, 1),
        ("validate_paged", fuzzing::check_validate_paged, 2),
        ("validate_varlen", fuzzing::check_validate_varlen, 3),
        (
            "validate_paged_varlen",
            fuzzing::check_validate_paged_varlen,
            4,
        ),
    ] {
        let f = accepted(seed, check);
        eprintln!("{name}: {:.1}% accepted", 100.0 * f);
        assert!(
            f >= 0.05,
            "{name}: only {:.1}% of inputs accepted",
            100.0 * f
        );
    }
}

#[test]
fn the_other_targets_reach_accepted_inputs() {
    for (name, check, seed, min) in [
        (
            "cu_seqlens",
            fuzzing::check_cu_seqlens as fn(&[u8]) -> bool,
            5,
            0.05,
        ),
        ("page_table", fuzzing::check_page_table, 6, 0.05),
        ("quantize_plan", fuzzing::check_quantize_plan, 7, 0.05),
        ("tma", fuzzing::check_tma, 8, 0.05),
        ("span_one_to_one", fuzzing::check_span_one_to_one, 9, 0.05),
        ("variant", fuzzing::check_variant, 10, 0.05),
        ("tuned_table", fuzzing::check_tuned_table, 11, 0.05),
        ("cache_entry", fuzzing::check_cache_entry, 12, 0.05),
    ] {
        let f = accepted(seed, check);
        eprintln!("{name}: {:.1}% accepted", 100.0 * f);
        assert!(
            f >= min,
            "{name}: only {:.1}% of inputs accepted",
            100.0 * f
        );
    }
}

#[test]
fn empty_input_is_an_accepted_call() {
    // Past the end every choice is the common valid one.
    assert!(fuzzing::check_validate(&[]));
    assert!(fuzzing::check_validate_paged(&[]));
    assert!(fuzzing::check_validate_varlen(&[]));
    assert!(fuzzing::check_validate_paged_varlen(&[]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn validate_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_validate(&data);
    }

    #[test]
    fn validate_paged_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_validate_paged(&data);
    }

    #[test]
    fn validate_varlen_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_validate_varlen(&data);
    }

    #[test]
    fn validate_paged_varlen_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_validate_paged_varlen(&data);
    }

    #[test]
    fn cu_seqlens_checks_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_cu_seqlens(&data);
    }

    #[test]
    fn page_table_check_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_page_table(&data);
    }

    #[test]
    fn quantize_plan_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_quantize_plan(&data);
    }

    #[test]
    fn tma_checks_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_tma(&data);
    }

    #[test]
    fn span_and_one_to_one_are_exact(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_span_one_to_one(&data);
    }

    #[test]
    fn variant_keys_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_variant(&data);
    }

    #[test]
    fn tuned_tables_round_trip(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzzing::check_tuned_table(&data);
    }

    #[test]
    fn cache_entries_decode_only_whole_under_their_key(
        data in proptest::collection::vec(any::<u8>(), 0..256)
    ) {
        fuzzing::check_cache_entry(&data);
    }
}

/// Known bug found by the page-table target: `check_page_table` divides by the page size, so
/// a page size of 0 with a sequence of 0 keys panics (also reachable from `sdpa-lab attn` with
/// a `k_cache` of page size 0). The page-table generator avoids page size 0 until this passes.
#[test]
fn page_table_check_takes_page_size_zero() {
    use fp8_sdpa::runtime::validate::check_page_table;
    let r = std::panic::catch_unwind(|| check_page_table(&[0], &[0], 1, 0, 1));
    assert!(r.is_ok(), "check_page_table panicked on page size 0");
    assert!(check_page_table(&[0], &[1], 1, 0, 1).is_err());
}

/// Known bug found by the TMA target: `dims_and_strides` rounds an extent-1 dim's byte stride
/// up to 16 in u64, which overflows within 15 of u64::MAX (validation keeps strides below 2^63
/// bytes, so the launch path never gets there). The TMA check skips such strides until this
/// passes.
#[test]
fn tma_strides_near_u64_max_do_not_overflow() {
    use fp8_sdpa::runtime::{tma, TensorDesc};
    let t = TensorDesc {
        ptr: 0x1000,
        bytes: 1 << 20,
        dtype: fp8_sdpa::DType::F16,
        shape: [1, 16, 1, 64],
        strides: [usize::MAX / 2, 64, 64, 1],
    };
    assert!(tma::tma_unfit("T", &t).is_none());
    let r = std::panic::catch_unwind(|| tma::dims_and_strides(&t));
    assert!(r.is_ok(), "dims_and_strides panicked");
}

/// Known finding of the quantizer target: `plan` accepts a dim of extent 1 with a stride past
/// i64::MAX, which `quantize_e4m3` then narrows `as i64` (to -1 here). Index 0 multiplies it,
/// so no access changes, but the launch narrows a value that does not fit.
#[test]
fn quantize_plan_narrows_every_stride() {
    use fp8_sdpa::runtime::{quantize, TensorDesc};
    let t = TensorDesc {
        ptr: 0x4000_0000_0000_00fd,
        bytes: 128,
        dtype: fp8_sdpa::DType::Bf16,
        shape: [1, 1, 1, 64],
        strides: [usize::MAX, 88, usize::MAX, 1],
    };
    if quantize::plan(&t, 64, 1).is_ok() {
        assert!(t.strides[..3].iter().all(|&s| i64::try_from(s).is_ok()));
    }
}

/// Known finding of the paged varlen target (any validate target can reach it): an E4M3 Q
/// with a head stride of 2^62 + 16 elements in a buffer of 2^63 + 5536 bytes is accepted, but
/// its last element's offset (2^63 + 5535 elements) passes the i64 the kernels index with.
/// No real buffer is that large; validation could cap a span at 2^63 bytes.
#[test]
fn kernel_offsets_fit_i64() {
    use fp8_sdpa::runtime::validate::{validate, CallDesc, DescaleDesc};
    use fp8_sdpa::runtime::TensorDesc;
    use fp8_sdpa::{AttnParams, DType};
    let dense = |ptr: u64, dtype: DType, shape: [usize; 4]| TensorDesc {
        ptr,
        bytes: shape.iter().product::<usize>() * dtype.size(),
        dtype,
        shape,
        strides: [
            shape[1] * shape[2] * shape[3],
            shape[2] * shape[3],
            shape[3],
            1,
        ],
    };
    let mut q = dense(1 << 20, DType::E4m3, [1, 15, 3, 128]);
    q.strides = [5760, 384, (1 << 62) + 16, 1];
    q.bytes = (1 << 63) + 5536;
    let hi = 1u64 << 63;
    let ds = |ptr: u64, len: usize| {
        Some(DescaleDesc {
            ptr,
            len,
            batch_stride: 0,
        })
    };
    let c = CallDesc {
        q,
        k: dense(hi + (1 << 22), DType::E4m3, [1, 64, 1, 128]),
        v: dense(hi + (2 << 22), DType::E4m3, [1, 64, 1, 128]),
        o: dense(hi + (3 << 22), DType::Bf16, [1, 15, 3, 128]),
        lse: None,
        descales: [
            ds(hi + (4 << 22), 3),
            ds(hi + (5 << 22), 1),
            ds(hi + (6 << 22), 1),
        ],
        params: AttnParams::new(0.125, false),
    };
    if validate(&c).is_ok() {
        let last: u128 = (0..4)
            .map(|i| (q.shape[i] as u128 - 1) * q.strides[i] as u128)
            .sum();
        assert!(
            last <= i64::MAX as u128,
            "accepted a last element offset of {last}"
        );
    }
}

/// Found by the varlen target: 65535 sequences of 65535 query heads with per-(batch, head)
/// descales were accepted, but the kernels index such a descale as `b * heads + h` in i32
/// (65535^2 passes it). Validation now refuses a per-(batch, head) descale past i32.
#[test]
fn varlen_descale_index_fits_i32() {
    let input: &[u8] = &[
        0x31, 0xbf, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x00, 0xff, 0xff,
    ];
    let mut data = input.to_vec();
    data.extend(std::iter::repeat_n(0xf0, 53));
    data.extend([0xff, 0xff, 0xff, 0x00, 0x41, 0xff, 0x23, 0x23, 0xd8, 0x41]);
    assert_eq!(data.len(), 77);
    fp8_sdpa::fuzzing::check_validate_varlen(&data);
}

proptest! {
    /// `Device::open`'s NVRTC-against-driver check over every version pair, hostile ones
    /// included (negative, huge): never panics; accepts exactly when NVRTC is not older than
    /// the oldest checked one and its major is at most the driver's, and a refusal names
    /// NVRTC's version.
    #[test]
    fn nvrtc_driver_check_accepts_exactly_the_loadable_pairs(
        major in prop_oneof![11..15, any::<i32>()], minor in prop_oneof![0..10, any::<i32>()],
        driver in prop_oneof![11_000..14_000, any::<i32>()]
    ) {
        let r = fp8_sdpa::compile::nvrtc::check_driver((major, minor), driver);
        let ok = (major, minor) >= fp8_sdpa::compile::nvrtc::OLDEST && major <= driver / 1000;
        prop_assert_eq!(r.is_ok(), ok);
        if let Err(e) = r {
            let text = e.to_string();
            prop_assert!(text.contains(&format!("NVRTC {major}.{minor}")), "{}", text);
        }
    }
}

proptest! {
    /// The ranks handed to NCCL (`cp::nccl_rank`, the communicator's init and its transfers'
    /// peers) over hostile sizes: never panics; accepted exactly when the world size is in
    /// 1..=i32::MAX and the rank below it, and then the narrowing to i32 is lossless.
    #[test]
    fn nccl_ranks_narrow_losslessly_or_are_refused(
        rank in prop_oneof![0usize..8, any::<usize>()],
        world in prop_oneof![0usize..8, any::<usize>(), Just(i32::MAX as usize), Just(i32::MAX as usize + 1)],
    ) {
        let r = fp8_sdpa::cp::nccl_rank(rank, world);
        let ok = world >= 1 && world <= i32::MAX as usize && rank < world;
        prop_assert_eq!(r.is_ok(), ok);
        if let Ok((ri, wi)) = r {
            prop_assert_eq!(ri as usize, rank);
            prop_assert_eq!(wi as usize, world);
        }
    }
}

proptest! {
    // Most hostile inputs are refused; 2048 cases give about 70 accepted ones to check.
    #![proptest_config(ProptestConfig::with_cases(2048))]
    /// The paged-cache writer's checks (`runtime::cache_write::plan_write`) over hostile sizes,
    /// strides and buffers: never panics, and an accepted write keeps every element the kernel
    /// can touch inside its buffer (K and V: the last token's last head's last element; the
    /// pools: every slot the kernel may write, i.e. all of them), takes 16-byte moves only where
    /// every row start is aligned for them, and launches a grid within the limits.
    #[test]
    fn an_accepted_cache_write_stays_in_its_buffers(
        tokens in prop_oneof![0usize..40, any::<usize>()],
        heads in prop_oneof![1usize..9, any::<usize>()],
        dim in prop_oneof![Just(64usize), Just(128), 1usize..300, any::<usize>()],
        pages in prop_oneof![1usize..64, any::<usize>()],
        page_size in prop_oneof![Just(16usize), Just(64), 0usize..300],
        token_stride in prop_oneof![Just(0usize), 1usize..100_000, any::<usize>()],
        head_stride in prop_oneof![1usize..1000, any::<usize>()],
        short in 0usize..3,
        e4m3 in any::<bool>(),
        k_off in prop_oneof![Just(0u64), 0u64..32],
        pool_off in prop_oneof![Just(0u64), 0u64..32],
    ) {
        use fp8_sdpa::runtime::cache_write::plan_write;
        use fp8_sdpa::runtime::TensorDesc;
        use fp8_sdpa::DType;
        let gap = 1u64 << 52; // each buffer in its own region
        let new = |i: u64| TensorDesc {
            ptr: i * gap + k_off,
            bytes: (tokens.saturating_mul(token_stride).saturating_add(heads.saturating_mul(head_stride)))
                .saturating_mul(2)
                .saturating_sub(short),
            dtype: DType::F16,
            shape: [1, tokens, heads, dim],
            strides: [0, token_stride, head_stride, 1],
        };
        let pool_dtype = if e4m3 { DType::E4m3 } else { DType::F16 };
        let row = heads.saturating_mul(dim);
        let pool = |i: u64| TensorDesc {
            ptr: i * gap + pool_off,
            bytes: pages.saturating_mul(page_size).saturating_mul(row).saturating_mul(pool_dtype.size()),
            dtype: pool_dtype,
            shape: [pages, page_size, heads, dim],
            strides: [page_size.saturating_mul(row), row, dim, 1],
        };
        let (k, v, kc, vc) = (new(1), new(2), pool(3), pool(4));
        let ds = e4m3.then_some([(6 * gap, heads), (7 * gap, heads)]);
        if let Ok(p) = plan_write(&k, &v, &kc, &vc, (5 * gap, tokens), ds) {
            prop_assert_eq!(p.tokens as usize, tokens);
            if tokens > 0 {
                let last = (tokens as u128 - 1) * p.k_strides[0] as u128
                    + (heads as u128 - 1) * p.k_strides[1] as u128
                    + dim as u128;
                prop_assert!(last * 2 <= k.bytes as u128, "K: {} > {}", last * 2, k.bytes);
            }
            let pool_end = p.pool_slots as u128 * heads as u128 * dim as u128 * pool_dtype.size() as u128;
            prop_assert!(pool_end <= kc.bytes as u128);
            prop_assert!(p.pool_slots <= i32::MAX as i64);
            prop_assert!(p.vec == 1 || p.vec == 8);
            if p.vec == 8 {
                // Every row start of K, V and the pools aligned for 16-byte (pools: 8-byte for
                // E4M3) moves: base pointers, strides and dim.
                prop_assert!(dim % 8 == 0 && k.ptr % 16 == 0 && v.ptr % 16 == 0);
                prop_assert!(kc.ptr % (16 / (2 / pool_dtype.size()) as u64) == 0);
                prop_assert!(p.k_strides.iter().chain(&p.v_strides).all(|s| s % 8 == 0));
            }
            let (block, per_token) = p.block_grid();
            prop_assert!(block % 32 == 0 && (32..=256).contains(&block));
            prop_assert!((1..=65_535).contains(&per_token));
        }
    }
}
