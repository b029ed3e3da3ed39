//! What per-head descales buy over one descale per tensor (issue 28, item 3), on the CPU: the
//! error that quantizing Q, K and V to E4M3 adds to attention, against float64 attention on
//! the unquantized inputs. Only the inputs' quantization is measured here; a kernel adds its
//! own rounding (P in E4M3, 16-bit output) on top.
//!
//! `cargo run --release -p sdpa-harness --example descale_granularity`
//!
//! Inputs: the verify distributions `normal` and `outliers`, with every head at the same scale
//! or with head h of Q, K and V scaled by 2^(h - 7) (a 128x spread between heads, as when a
//! few heads carry most of the magnitude) or 4^(h - 7) (16384x).
use fp8_sdpa::fp8::e4m3;
use fp8_sdpa::{reference, AttnShape, DType};
use sdpa_harness::inputs::{generate_qkv, Distribution};

/// Scales head h of a BSHD tensor by `f(h)`.
fn scale_heads(x: &mut [f32], heads: usize, d: usize, f: impl Fn(usize) -> f32) {
    for (i, row) in x.chunks_exact_mut(d).enumerate() {
        let s = f(i % heads);
        row.iter_mut().for_each(|v| *v *= s);
    }
}

/// E4M3 round trip with one descale per (batch, head) of `dims`, as the library quantizes.
fn round_trip(x: &[f32], dims: [usize; 4]) -> Vec<f64> {
    let (codes, ds) = e4m3::quantize(x, dims).expect("dims match");
    reference::dequantize(DType::E4m3, &codes, Some(&ds), dims, dims[2]).expect("dims match")
}

/// One descale for the whole tensor: the same round trip with the tensor seen as one head.
fn per_tensor(x: &[f32], dims: [usize; 4]) -> Vec<f64> {
    round_trip(x, [1, x.len() / dims[3], 1, dims[3]])
}

/// Relative L2 error of `got` against `want`, overall and for the worst head.
fn rel_l2(got: &[f64], want: &[f64], heads: usize, d: usize) -> (f64, f64) {
    let mut num = vec![0.0; heads];
    let mut den = vec![0.0; heads];
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let h = (i / d) % heads;
        num[h] += (g - w) * (g - w);
        den[h] += w * w;
    }
    let all = (num.iter().sum::<f64>() / den.iter().sum::<f64>()).sqrt();
    let worst = num
        .iter()
        .zip(&den)
        .map(|(n, d)| (n / d).sqrt())
        .fold(0.0, f64::max);
    (all, worst)
}

fn main() {
    let shape = AttnShape::new(2, 512, 512, 8, 8, 128);
    let dims = [shape.batch, shape.seq_q, shape.heads_q, shape.head_dim];
    let (h, d) = (shape.heads_q, shape.head_dim);
    let scale = 1.0 / (d as f64).sqrt();
    println!(
        "B{} S{} H{} D{}, Q/K/V in E4M3, O against float64 on the unquantized inputs (rel L2, all / worst head)",
        shape.batch, shape.seq_q, h, d
    );
    println!(
        "{:10} {:12} {:>22} {:>22}",
        "inputs", "head scales", "per-head descales", "per-tensor descale"
    );
    for dist in [Distribution::Normal, Distribution::Outliers] {
        for (step, label) in [(1f32, "equal"), (2.0, "2^(h-7)"), (4.0, "4^(h-7)")] {
            let (mut q, mut k, mut v) = generate_qkv(11, &shape, dist);
            for x in [&mut q, &mut k, &mut v] {
                scale_heads(x, h, d, |i| step.powi(i as i32 - 7));
            }
            let wide = reference::widen;
            let want = reference::attention(&shape, &wide(&q), &wide(&k), &wide(&v), scale, false)
                .expect("shape");
            let run = |f: &dyn Fn(&[f32]) -> Vec<f64>| {
                let o = reference::attention(&shape, &f(&q), &f(&k), &f(&v), scale, false)
                    .expect("shape");
                rel_l2(&o.o, &want.o, h, d)
            };
            let a = run(&|x| round_trip(x, dims));
            let b = run(&|x| per_tensor(x, dims));
            println!(
                "{:10} {:12} {:>10.4} / {:<10.4} {:>10.4} / {:<10.4}",
                dist.name(),
                label,
                a.0,
                a.1,
                b.0,
                b.1
            );
        }
    }
}
