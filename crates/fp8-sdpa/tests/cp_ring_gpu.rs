//! The NCCL ring's failure handling on two GPUs (one thread per rank): ranks that disagree
//! about the problem, or a rank that is not ready, make every rank return the same error
//! before any transfer, and the ring stays usable; a rank whose peer left returns an error
//! instead of blocking, and its ring is aborted. Run on a machine with two GPUs and
//! `libnccl.so` on the loader path:
//! `cargo test -p fp8-sdpa --features nccl --test cp_ring_gpu -- --include-ignored`.
#![cfg(feature = "nccl")]

use cudarc::driver::CudaSlice;
use cudarc::nccl::safe::Id;
use fp8_sdpa::cp::comm::Communicator;
use fp8_sdpa::cp::ring::{Local, Ring};
use fp8_sdpa::runtime::Device;
use fp8_sdpa::{AttnParams, Error, Precision, Result};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const D: usize = 64;

fn local(chunk: usize) -> Local {
    Local {
        batch: 1,
        chunk,
        heads_q: 2,
        heads_kv: 2,
        dim: D,
    }
}

/// One rank's device, ring and buffers (bf16, zeros).
struct Rank {
    dev: Device,
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    ring: Ring,
    k: CudaSlice<u8>,
    v: CudaSlice<u8>,
    q: CudaSlice<u8>,
    o: CudaSlice<u8>,
}

impl Rank {
    fn new(r: usize, id: Id, l: Local) -> Rank {
        let dev = Device::open(r).expect("a GPU per rank");
        let stream = dev.new_stream().unwrap();
        let comm = Communicator::init(
            dev.new_priority_stream().unwrap(),
            r,
            2,
            &id,
            Duration::from_secs(120),
        )
        .expect("NCCL init");
        let ring = Ring::new(comm, &stream, l, Precision::Bf16).unwrap();
        let kv = l.batch * 2 * l.chunk * l.heads_kv * l.dim * 2;
        let qo = l.batch * 2 * l.chunk * l.heads_q * l.dim * 2;
        let z = |n| stream.alloc_zeros::<u8>(n).unwrap();
        Rank {
            k: z(kv),
            v: z(kv),
            q: z(qo),
            o: z(qo),
            dev,
            stream,
            ring,
        }
    }

    fn load(&mut self) {
        self.ring
            .load(&self.stream, &self.k, &self.v, None)
            .unwrap();
    }

    fn run(&mut self) -> Result<()> {
        self.ring.run(
            &self.dev,
            &self.stream,
            &self.q,
            &mut self.o,
            AttnParams::default_for(D, true),
        )
    }
}

/// Runs `f(rank, id)` on two threads (ranks 0 and 1 of one communicator) and returns their
/// results; fails the test if either has not returned within `limit`.
fn two_ranks<T: Send + 'static>(
    limit: Duration,
    f: impl Fn(usize, Id) -> T + Send + Sync + Clone + 'static,
) -> [T; 2] {
    fp8_sdpa::libs::ensure_nccl().expect("libnccl.so on the loader path");
    assert!(Device::count() >= 2, "these tests need two GPUs");
    let id = Id::new().expect("NCCL id");
    let (tx, rx) = mpsc::channel();
    for r in 0..2 {
        let (tx, f) = (tx.clone(), f.clone());
        std::thread::spawn(move || {
            let out = f(r, id);
            let _ = tx.send((r, out));
        });
    }
    let t0 = Instant::now();
    let mut got: [Option<T>; 2] = [None, None];
    while got.iter().any(Option::is_none) {
        let left = limit.saturating_sub(t0.elapsed());
        let (r, out) = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("a rank blocked for more than {limit:?}"));
        got[r] = Some(out);
    }
    got.map(|x| x.expect("both ranks returned"))
}

fn invalid(e: &Result<()>) -> String {
    match e {
        Err(Error::InvalidInput(m)) => m.clone(),
        other => panic!("expected an InvalidInput error, got {other:?}"),
    }
}

#[test]
#[ignore = "needs 2 CUDA GPUs and NCCL (libnccl.so on the loader path)"]
fn ranks_with_different_chunks_both_refuse_before_the_ring() {
    let out = two_ranks(Duration::from_secs(120), |r, id| {
        let mut rank = Rank::new(r, id, local(if r == 0 { 64 } else { 128 }));
        rank.load();
        let e = rank.run();
        (e, rank.ring.is_aborted())
    });
    for (r, (e, aborted)) in out.iter().enumerate() {
        let m = invalid(e);
        assert!(
            m.contains("no rank entered the ring")
                && m.contains("differ in chunk (tokens per chunk): 64 on rank 0; 128 on rank 1"),
            "rank {r}: {m}"
        );
        assert!(
            !aborted,
            "rank {r}: a disagreement leaves the communicator usable"
        );
    }
}

#[test]
#[ignore = "needs 2 CUDA GPUs and NCCL (libnccl.so on the loader path)"]
fn a_rank_not_ready_stops_both_and_the_ring_stays_usable() {
    let out = two_ranks(Duration::from_secs(300), |r, id| {
        let mut rank = Rank::new(r, id, local(64));
        if r == 0 {
            rank.load();
        }
        let first = rank.run();
        // Both load now; the second pass runs.
        rank.load();
        let second = rank.run();
        (first, second)
    });
    for (r, (first, second)) in out.iter().enumerate() {
        let m = invalid(first);
        assert!(
            m.contains("rank 1: it has no K/V shard loaded since its last pass"),
            "rank {r}: {m}"
        );
        assert_eq!(m.contains("; on rank 1: "), r == 1, "rank {r}: {m}");
        assert!(second.is_ok(), "rank {r}: {second:?}");
    }
}

#[test]
#[ignore = "needs 2 CUDA GPUs and NCCL (libnccl.so on the loader path)"]
fn a_rank_whose_peer_left_returns_an_error_and_is_aborted() {
    let out = two_ranks(Duration::from_secs(180), |r, id| {
        let mut rank = Rank::new(r, id, local(64));
        if r == 1 {
            // This rank fails before the ring: dropping its ring aborts its communicator.
            drop(rank);
            return None;
        }
        rank.ring.set_timeout(Duration::from_secs(20));
        rank.load();
        let t0 = Instant::now();
        let first = rank.run();
        let took = t0.elapsed();
        let again = rank.run();
        Some((first, took, rank.ring.is_aborted(), again))
    });
    let (first, took, aborted, again) = out[0].as_ref().expect("rank 0 reports");
    assert!(first.is_err(), "rank 0 ran a ring without its peer");
    assert!(*aborted, "{first:?}");
    assert!(*took < Duration::from_secs(120), "{took:?}");
    let again = format!("{:?}", again.as_ref().unwrap_err());
    assert!(again.contains("aborted after an earlier error"), "{again}");
}
