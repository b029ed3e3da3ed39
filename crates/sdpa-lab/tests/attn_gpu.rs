//! `sdpa-lab attn` end to end on the GPU: a safetensors file in, the output file matches the
//! float64 CPU reference. Run on the device machine with `--include-ignored`; set
//! `SDPA_LAB_BIN` when the binary is not where cargo built it.

use fp8_sdpa::reference;
use fp8_sdpa::{AttnShape, DType, Precision};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use sdpa_harness::inputs::{encode, generate, Distribution};
use sdpa_harness::metrics::Thresholds;

mod common;
use common::bin;

#[test]
#[ignore = "needs a GPU"]
fn attn_round_trips_a_safetensors_file() {
    let dir = tempfile::tempdir().unwrap();
    for (precision, causal) in [(Precision::F16, true), (Precision::Fp8KvBf16, false)] {
        let shape = AttnShape {
            batch: 2,
            seq_q: 40,
            seq_kv: 70,
            heads_q: 4,
            heads_kv: 2,
            head_dim: 128,
        };
        let qd = [2, 40, 4, 128];
        let kd = [2, 70, 2, 128];
        let raw = [
            generate(1, shape.q_len(), 128, Distribution::Normal),
            generate(2, shape.kv_len(), 128, Distribution::Normal),
            generate(3, shape.kv_len(), 128, Distribution::Normal),
        ];
        let enc = [
            encode(precision.q(), &raw[0], qd).unwrap(),
            encode(precision.kv(), &raw[1], kd).unwrap(),
            encode(precision.kv(), &raw[2], kd).unwrap(),
        ];
        let st = |d: DType| match d {
            DType::F16 => Dtype::F16,
            DType::Bf16 => Dtype::BF16,
            _ => Dtype::F8_E4M3,
        };
        let ds_bytes: Vec<Vec<u8>> = enc
            .iter()
            .map(|e| {
                e.descales
                    .clone()
                    .unwrap_or_default()
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect()
            })
            .collect();
        let mut views = vec![
            (
                "q".to_string(),
                TensorView::new(st(enc[0].dtype), qd.to_vec(), &enc[0].bytes).unwrap(),
            ),
            (
                "k".to_string(),
                TensorView::new(st(enc[1].dtype), kd.to_vec(), &enc[1].bytes).unwrap(),
            ),
            (
                "v".to_string(),
                TensorView::new(st(enc[2].dtype), kd.to_vec(), &enc[2].bytes).unwrap(),
            ),
        ];
        for (i, n) in ["q_descale", "k_descale", "v_descale"].iter().enumerate() {
            if enc[i].descales.is_some() {
                views.push((
                    n.to_string(),
                    TensorView::new(Dtype::F32, vec![2, 2], &ds_bytes[i]).unwrap(),
                ));
            }
        }
        let input = dir.path().join(format!("{precision}.safetensors"));
        let output = dir.path().join(format!("{precision}.out.safetensors"));
        std::fs::write(&input, safetensors::serialize(views, None).unwrap()).unwrap();
        let mut cmd = std::process::Command::new(bin());
        cmd.args([
            "attn",
            "--inputs",
            input.to_str().unwrap(),
            "--out",
            output.to_str().unwrap(),
            "--lse",
        ]);
        if causal {
            cmd.arg("--causal");
        }
        let st_out = cmd.output().unwrap();
        assert!(
            st_out.status.success(),
            "attn failed: {}",
            String::from_utf8_lossy(&st_out.stderr)
        );
        let bytes = std::fs::read(&output).unwrap();
        let f = SafeTensors::deserialize(&bytes).unwrap();
        let o = f.tensor("o").unwrap();
        assert_eq!(o.shape(), &qd);
        let got = sdpa_harness::harness::decode_out(precision.out(), o.data());
        let deq = |i: usize, dims| {
            reference::dequantize(
                enc[i].dtype,
                &enc[i].bytes,
                enc[i].descales.as_deref(),
                dims,
                2,
            )
            .unwrap()
        };
        let r = reference::attention(
            &shape,
            &deq(0, qd),
            &deq(1, kd),
            &deq(2, kd),
            1.0 / (128f64).sqrt(),
            causal,
        )
        .unwrap();
        let t = Thresholds::for_precision(precision);
        let s = t.compare(&got, &r.o).unwrap();
        t.check(&s).unwrap_or_else(|e| panic!("{precision}: {e}"));
        assert_eq!(f.tensor("lse").unwrap().shape(), &[2, 4, 40]);
    }
}

#[test]
fn attn_without_a_file_says_which() {
    let out = std::process::Command::new(bin())
        .args([
            "attn",
            "--inputs",
            "/nonexistent/x.safetensors",
            "--out",
            "/tmp/y",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/x.safetensors"), "{err}");
}
