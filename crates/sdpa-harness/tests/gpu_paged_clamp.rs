//! GPU tests of unchecked paged calls (`CallOptions::default().with_check_descales(false)`): a
//! block table holding negative, past-the-pool and extreme entries and lengths of -5 and
//! `i32::MAX` must run, synchronize without a fault and give finite output, for
//! `Device::paged_attention` and `Device::paged_attention_varlen`, over fp16 and E4M3 caches.
//! The kernel clamps each length to the table's capacity and each entry it uses to the pools'
//! pages.
//!
//! Every key and value of the pools is 1.0, so any row that saw a key is 1.0 and a row that
//! saw none is 0; the pools and the table sit inside larger buffers whose margins are NaN
//! (pools) and -1 (after the table), so a read just outside the pools, or past the table into
//! an entry that then points before the pools, shows as NaN in O, and a read far outside
//! faults the context. Reads that land elsewhere (another allocation) would go unseen here:
//! compute-sanitizer's memcheck is what proves no out-of-bounds read, e.g. on the device
//! machine:
//!
//! ```text
//! cargo test -p sdpa-harness --test gpu_paged_clamp --no-run
//! compute-sanitizer --tool memcheck --error-exitcode 1 \
//!     $(ls -t target/debug/deps/gpu_paged_clamp-* | grep -v '\.d$' | head -1) --include-ignored --test-threads 1
//! ```
//!
//! Run on the device machine with `--include-ignored`; without a GPU they fail, never skip.

use fp8_sdpa::runtime::{
    CallOptions, Descale, Device, IdxRef, KernelChoice, PagedAttention, PagedAttentionVarlen,
    PagedKv, TensorMut, TensorRef, VecMut, VecRef,
};
use fp8_sdpa::{AttnParams, DType, Family, Layout};
use sdpa_harness::harness::decode_out;
use std::sync::Arc;

const HQ: usize = 8;
const HKV: usize = 2;
const D: usize = 128;
const PAGE: usize = 16;
/// Pages per sequence in the table: a capacity of 592 keys, not a multiple of any decode
/// tile's keys, so the last split of a sequence with an unclamped length runs past its row.
const MAX_PAGES: usize = 37;
/// Pages in the pools.
const PAGES: usize = 8;
/// NaN pages before and after the pools.
const POOL_GUARD: usize = 8;
/// -1 entries after the table.
const TABLE_GUARD: usize = 4 * MAX_PAGES;
const BATCH: usize = 3;

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

/// One bad table: `[BATCH, MAX_PAGES]` entries and `[BATCH]` lengths.
struct Table {
    what: &'static str,
    entries: Vec<i32>,
    lens: [i32; BATCH],
}

/// Tables whose every used entry or length is wrong in one way, then all ways at once.
fn bad_tables() -> Vec<Table> {
    let pages = PAGES as i32;
    let cap = (MAX_PAGES * PAGE) as i32;
    // Valid entries, then every third one replaced by `bad(i)`.
    let with = |bad: &dyn Fn(usize) -> i32| -> Vec<i32> {
        (0..BATCH * MAX_PAGES)
            .map(|i| {
                if i % 3 == 1 {
                    bad(i)
                } else {
                    (i % PAGES) as i32
                }
            })
            .collect()
    };
    let negative = [-1, -7, i32::MIN];
    let past = [pages, pages + 5, i32::MAX];
    let valid = with(&|i| (i % PAGES) as i32);
    vec![
        Table {
            what: "negative entries",
            entries: with(&|i| negative[i / 3 % 3]),
            lens: [cap, 100, 17],
        },
        Table {
            what: "past-the-pool entries",
            entries: with(&|i| past[i / 3 % 3]),
            lens: [cap, 300, 1],
        },
        Table {
            // i32::MAX last: an unclamped length reads past the table's end.
            what: "lengths -5 and i32::MAX",
            entries: valid,
            lens: [-5, 40, i32::MAX],
        },
        Table {
            what: "everything",
            entries: with(&|i| [-1, pages, i32::MAX, i32::MIN][i / 3 % 4]),
            lens: [i32::MAX, -5, i32::MAX],
        },
    ]
}

/// The pools' element type (`DType::F16` or `DType::E4m3`): bytes of 1.0 and of NaN.
fn codes(kv: DType) -> (Vec<u8>, Vec<u8>) {
    match kv {
        DType::F16 => (0x3c00u16.to_le_bytes().to_vec(), vec![0xff, 0xff]),
        DType::E4m3 => (vec![0x38], vec![0xff]),
        other => panic!("no pool of {other}"),
    }
}

/// The device buffers of one test: the pool (inside NaN margins), the table (followed by -1
/// entries), per-kv-head descales of 1.
struct Buffers {
    pool: cudarc::driver::CudaSlice<u8>,
    table: cudarc::driver::CudaSlice<i32>,
    descale: cudarc::driver::CudaSlice<f32>,
}

impl Buffers {
    fn new(stream: &Arc<cudarc::driver::CudaStream>, kv: DType) -> Buffers {
        let (one, nan) = codes(kv);
        let page_elems = PAGE * HKV * D;
        let mut host = Vec::new();
        for i in 0..(2 * POOL_GUARD + PAGES) * page_elems {
            let inside = (POOL_GUARD * page_elems..(POOL_GUARD + PAGES) * page_elems).contains(&i);
            host.extend_from_slice(if inside { &one } else { &nan });
        }
        Buffers {
            pool: stream.clone_htod(&host).unwrap(),
            table: stream
                .alloc_zeros::<i32>(BATCH * MAX_PAGES + TABLE_GUARD)
                .unwrap(),
            descale: stream.clone_htod(&[1.0f32; HKV]).unwrap(),
        }
    }

    /// Uploads `t` into the table's first `BATCH * MAX_PAGES` entries, -1 after them.
    fn set_table(&mut self, stream: &Arc<cudarc::driver::CudaStream>, t: &Table) {
        let mut host = t.entries.clone();
        host.resize(BATCH * MAX_PAGES + TABLE_GUARD, -1);
        stream.memcpy_htod(&host, &mut self.table).unwrap();
    }
}

/// Asserts the call's outputs: every O element 1.0 (a row that saw keys of 1.0) or 0 (a row
/// that saw none), every LSE finite or -inf.
fn assert_in_bounds_output(
    stream: &Arc<cudarc::driver::CudaStream>,
    o: &cudarc::driver::CudaSlice<u8>,
    lse: &cudarc::driver::CudaSlice<f32>,
    what: &str,
) {
    stream
        .synchronize()
        .unwrap_or_else(|e| panic!("{what}: the call faulted: {e:?}"));
    let o = decode_out(DType::F16, &stream.clone_dtoh(o).unwrap());
    let bad = o
        .iter()
        .position(|&x| !(x == 0.0 || (x - 1.0).abs() < 1e-2));
    assert!(
        bad.is_none(),
        "{what}: O[{}] = {} (a read outside the pools gives NaN)",
        bad.unwrap_or(0),
        o[bad.unwrap_or(0)]
    );
    let lse = stream.clone_dtoh(lse).unwrap();
    assert!(
        lse.iter().all(|&x| x.is_finite() || x == f32::NEG_INFINITY),
        "{what}: LSE {lse:?}"
    );
}

/// Runs every bad table through `paged_attention` (dense, `SEQ_Q` queries per sequence)
/// unchecked, with `kernel`, causal and not.
fn dense_calls(dev: &Device, kv: DType, kernel: KernelChoice) {
    const SEQ_Q: usize = 2;
    let stream = dev.new_stream().unwrap();
    let st: &cudarc::driver::CudaStream = &stream;
    let mut b = Buffers::new(&stream, kv);
    let q = stream
        .clone_htod(&vec![0x3c00u16; BATCH * SEQ_Q * HQ * D])
        .unwrap();
    let qd = [BATCH, SEQ_Q, HQ, D];
    let mut o = stream
        .alloc_zeros::<u8>(BATCH * SEQ_Q * HQ * D * 2)
        .unwrap();
    let mut lse = stream.alloc_zeros::<f32>(BATCH * HQ * SEQ_Q).unwrap();
    for t in bad_tables() {
        b.set_table(&stream, &t);
        let lens = stream.clone_htod(&t.lens).unwrap();
        for causal in [false, true] {
            let what = format!("dense {kv} {kernel:?} causal {causal}: {}", t.what);
            let r = {
                let page_bytes = PAGE * HKV * D * kv.size();
                let pool = b
                    .pool
                    .slice(POOL_GUARD * page_bytes..(POOL_GUARD + PAGES) * page_bytes);
                let pd = [PAGES, PAGE, HKV, D];
                let table = b.table.slice(0..BATCH * MAX_PAGES);
                let descale =
                    || (kv == DType::E4m3).then(|| Descale::new(VecRef::new(&b.descale, st), 0));
                let call = PagedAttention::new(
                    TensorRef::contiguous(&q, st, DType::F16, qd, Layout::Bshd).unwrap(),
                    PagedKv::new(
                        TensorRef::contiguous(&pool, st, kv, pd, Layout::Bshd).unwrap(),
                        TensorRef::contiguous(&pool, st, kv, pd, Layout::Bshd).unwrap(),
                        IdxRef::new(&table, st),
                        MAX_PAGES,
                        IdxRef::new(&lens, st),
                    ),
                    TensorMut::contiguous(&mut o, st, DType::F16, qd, Layout::Bshd).unwrap(),
                    AttnParams::default_for(D, causal),
                )
                .with_lse(VecMut::new(&mut lse, st))
                .with_kv_descales(descale(), descale());
                let opts = CallOptions::default()
                    .with_kernel(kernel)
                    .with_check_descales(false);
                dev.paged_attention(st, &call, opts)
            };
            let l = r.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(l.spec.variant.family, Family::Decode, "{what}");
            assert_in_bounds_output(&stream, &o, &lse, &what);
        }
    }
}

/// Runs every bad table through `paged_attention_varlen` (1, 2 and 3 queries for the three
/// sequences) unchecked, with `kernel`, causal and not.
fn varlen_calls(dev: &Device, kv: DType, kernel: KernelChoice) {
    let stream = dev.new_stream().unwrap();
    let st: &cudarc::driver::CudaStream = &stream;
    let mut b = Buffers::new(&stream, kv);
    let (cu_q, total_q, max_q) = ([0i32, 1, 3, 6], 6usize, 3usize);
    let cu_q = stream.clone_htod(&cu_q).unwrap();
    let q = stream
        .clone_htod(&vec![0x3c00u16; total_q * HQ * D])
        .unwrap();
    let mut o = stream.alloc_zeros::<u8>(total_q * HQ * D * 2).unwrap();
    let mut lse = stream.alloc_zeros::<f32>(HQ * total_q).unwrap();
    for t in bad_tables() {
        b.set_table(&stream, &t);
        let lens = stream.clone_htod(&t.lens).unwrap();
        for causal in [false, true] {
            let what = format!("varlen {kv} {kernel:?} causal {causal}: {}", t.what);
            let r = {
                let page_bytes = PAGE * HKV * D * kv.size();
                let pool = b
                    .pool
                    .slice(POOL_GUARD * page_bytes..(POOL_GUARD + PAGES) * page_bytes);
                let pd = [PAGES, PAGE, HKV, D];
                let table = b.table.slice(0..BATCH * MAX_PAGES);
                let descale =
                    || (kv == DType::E4m3).then(|| Descale::new(VecRef::new(&b.descale, st), 0));
                let call = PagedAttentionVarlen::new(
                    TensorRef::packed(&q, st, DType::F16, [total_q, HQ, D]).unwrap(),
                    PagedKv::new(
                        TensorRef::contiguous(&pool, st, kv, pd, Layout::Bshd).unwrap(),
                        TensorRef::contiguous(&pool, st, kv, pd, Layout::Bshd).unwrap(),
                        IdxRef::new(&table, st),
                        MAX_PAGES,
                        IdxRef::new(&lens, st),
                    ),
                    TensorMut::packed(&mut o, st, DType::F16, [total_q, HQ, D]).unwrap(),
                    IdxRef::new(&cu_q, st),
                    max_q,
                    AttnParams::default_for(D, causal),
                )
                .with_lse(VecMut::new(&mut lse, st))
                .with_kv_descales(descale(), descale());
                let opts = CallOptions::default()
                    .with_kernel(kernel)
                    .with_check_descales(false);
                dev.paged_attention_varlen(st, &call, opts)
            };
            let l = r.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(l.spec.variant.family, Family::Decode, "{what}");
            assert_in_bounds_output(&stream, &o, &lse, &what);
        }
    }
}

/// Dispatch's decode variant and a small-tile one (32 keys per step, a 4-deep ring).
fn kernels() -> [KernelChoice; 2] {
    [
        KernelChoice::Auto,
        KernelChoice::Variant("decode.m16.n32.w2.s4.b4.cex".parse().unwrap()),
    ]
}

#[test]
#[ignore = "needs a GPU"]
fn unchecked_paged_calls_over_an_f16_cache_stay_in_the_pools() {
    let dev = device();
    for kernel in kernels() {
        dense_calls(&dev, DType::F16, kernel);
        varlen_calls(&dev, DType::F16, kernel);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn unchecked_paged_calls_over_an_e4m3_cache_stay_in_the_pools() {
    let dev = device();
    for kernel in kernels() {
        dense_calls(&dev, DType::E4m3, kernel);
        varlen_calls(&dev, DType::E4m3, kernel);
    }
}

/// The same tables with the check on are refused before any launch, naming the entry: the
/// unchecked tests' tables are really wrong, not clamped into valid ones by accident.
#[test]
#[ignore = "needs a GPU"]
fn checked_paged_calls_refuse_the_same_tables() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let st: &cudarc::driver::CudaStream = &stream;
    let mut b = Buffers::new(&stream, DType::F16);
    let q = stream.clone_htod(&vec![0x3c00u16; BATCH * HQ * D]).unwrap();
    let qd = [BATCH, 1, HQ, D];
    let mut o = stream.alloc_zeros::<u8>(BATCH * HQ * D * 2).unwrap();
    for t in bad_tables() {
        b.set_table(&stream, &t);
        let lens = stream.clone_htod(&t.lens).unwrap();
        let page_bytes = PAGE * HKV * D * 2;
        let pool = b
            .pool
            .slice(POOL_GUARD * page_bytes..(POOL_GUARD + PAGES) * page_bytes);
        let pd = [PAGES, PAGE, HKV, D];
        let table = b.table.slice(0..BATCH * MAX_PAGES);
        let call = PagedAttention::new(
            TensorRef::contiguous(&q, st, DType::F16, qd, Layout::Bshd).unwrap(),
            PagedKv::new(
                TensorRef::contiguous(&pool, st, DType::F16, pd, Layout::Bshd).unwrap(),
                TensorRef::contiguous(&pool, st, DType::F16, pd, Layout::Bshd).unwrap(),
                IdxRef::new(&table, st),
                MAX_PAGES,
                IdxRef::new(&lens, st),
            ),
            TensorMut::contiguous(&mut o, st, DType::F16, qd, Layout::Bshd).unwrap(),
            AttnParams::default_for(D, false),
        );
        match dev.paged_attention(st, &call, CallOptions::default()) {
            Err(fp8_sdpa::Error::InvalidInput(m)) => assert!(
                m.contains("block_table[") || m.contains("seqlens_k["),
                "{}: {m}",
                t.what
            ),
            other => panic!("{}: expected InvalidInput, got {other:?}", t.what),
        }
    }
}
