//! Host cost of one automatic kernel choice (`dispatch::choose_in` and `choose_paged_in` against
//! the shipped tuned table), per call, for three calls. `cargo run --release --example dispatch_cost`
use fp8_sdpa::dispatch::{choose_in, choose_paged_in};
use fp8_sdpa::tuned::TunedTable;
use fp8_sdpa::{Arch, AttnShape, Precision};
fn main() {
    let t = (None, TunedTable::shipped());
    let shapes = [
        (
            Precision::Fp8KvBf16,
            AttnShape {
                batch: 1,
                seq_q: 1,
                seq_kv: 4096,
                heads_q: 32,
                heads_kv: 8,
                head_dim: 128,
            },
            false,
        ),
        (
            Precision::Bf16,
            AttnShape {
                batch: 2,
                seq_q: 512,
                seq_kv: 512,
                heads_q: 8,
                heads_kv: 8,
                head_dim: 64,
            },
            true,
        ),
        (
            Precision::Fp8,
            AttnShape {
                batch: 4,
                seq_q: 4096,
                seq_kv: 4096,
                heads_q: 16,
                heads_kv: 16,
                head_dim: 128,
            },
            false,
        ),
    ];
    for (p, s, c) in shapes {
        let n = 200_000;
        let t0 = std::time::Instant::now();
        let mut k = 0usize;
        for _ in 0..n {
            k += choose_in(t, Arch::Sm90a, p, &s, c, 132).1.tile_m as usize;
        }
        let dt = t0.elapsed().as_secs_f64() / n as f64;
        let t1 = std::time::Instant::now();
        for _ in 0..n {
            k += choose_paged_in(t, Arch::Sm90a, p, &s, 132).1.tile_m as usize;
        }
        let dp = t1.elapsed().as_secs_f64() / n as f64;
        println!(
            "{p:?} {s:?} causal {c}: choose {:.0} ns, paged {:.0} ns ({k})",
            dt * 1e9,
            dp * 1e9
        );
    }
}
