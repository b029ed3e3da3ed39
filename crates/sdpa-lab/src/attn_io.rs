//! The `attn` command's file format: safetensors in, safetensors out.
//!
//! Inputs: `q`, `k`, `v` (4-d, BSHD by default or BHSD with `--layout bhsd`), typed F16,
//! BF16, F8_E4M3 or U8 (U8 = the seeds' simulated FP8); for scaled types `q_descale`,
//! `k_descale`, `v_descale` as F32 of shape `[heads]` (broadcast over the batch) or
//! `[batch, heads]`. Outputs: `o` in the inputs' layout and the path's output type, and `lse`
//! (F32 `[batch, heads_q, seq_q]`) when asked.

use fp8_sdpa::{DType, Layout};
use safetensors::{Dtype, SafeTensors};

/// One input tensor from the file.
#[derive(Debug, Clone)]
pub struct FileTensor {
    /// Element type.
    pub dtype: DType,
    /// Logical shape (batch, seq, heads, dim).
    pub shape: [usize; 4],
    /// Raw little-endian bytes in the file's layout.
    pub bytes: Vec<u8>,
}

/// A descale vector from the file.
#[derive(Debug, Clone)]
pub struct FileDescale {
    /// Values.
    pub values: Vec<f32>,
    /// 0 (per head) or heads (per batch and head).
    pub batch_stride: usize,
}

/// Everything `attn` reads.
#[derive(Debug, Clone)]
pub struct AttnFile {
    /// Q, K, V.
    pub qkv: [FileTensor; 3],
    /// Descales of Q, K, V.
    pub descales: [Option<FileDescale>; 3],
}

fn dtype_of(name: &str, d: Dtype) -> Result<DType, String> {
    Ok(match d {
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::Bf16,
        Dtype::F8_E4M3 => DType::E4m3,
        Dtype::U8 => DType::SimFp8,
        other => return Err(format!("tensor '{name}' has dtype {other:?}; expected F16, BF16, F8_E4M3 or U8 (simulated FP8)")),
    })
}

/// Parses and checks an input file. Errors name the tensor and the problem.
pub fn parse(buffer: &[u8], layout: Layout) -> Result<AttnFile, String> {
    let st = SafeTensors::deserialize(buffer)
        .map_err(|e| format!("not a valid safetensors file: {e}"))?;
    let get = |name: &str| -> Result<FileTensor, String> {
        let t = st.tensor(name).map_err(|_| {
            format!(
                "missing tensor '{name}' (the file has: {})",
                st.names().join(", ")
            )
        })?;
        let s = t.shape();
        if s.len() != 4 {
            return Err(format!(
                "tensor '{name}' has shape {s:?}; expected 4 dims ({})",
                if layout == Layout::Bshd {
                    "batch, seq, heads, dim"
                } else {
                    "batch, heads, seq, dim"
                }
            ));
        }
        let shape = match layout {
            Layout::Bshd => [s[0], s[1], s[2], s[3]],
            Layout::Bhsd => [s[0], s[2], s[1], s[3]],
        };
        Ok(FileTensor {
            dtype: dtype_of(name, t.dtype())?,
            shape,
            bytes: t.data().to_vec(),
        })
    };
    let qkv = [get("q")?, get("k")?, get("v")?];
    let mut descales: [Option<FileDescale>; 3] = [None, None, None];
    for (i, name) in ["q_descale", "k_descale", "v_descale"].iter().enumerate() {
        let want = qkv[i].dtype.is_scaled();
        match st.tensor(name) {
            Err(_) if want => {
                return Err(format!(
                    "'{}' is {} and needs '{name}' (F32, [heads] or [batch, heads])",
                    ["q", "k", "v"][i],
                    qkv[i].dtype
                ))
            }
            Err(_) => {}
            Ok(_) if !want => {
                return Err(format!(
                    "'{name}' given, but '{}' is {}, which takes no descale",
                    ["q", "k", "v"][i],
                    qkv[i].dtype
                ))
            }
            Ok(t) => {
                if t.dtype() != Dtype::F32 {
                    return Err(format!("'{name}' must be F32, got {:?}", t.dtype()));
                }
                let [batch, _, heads, _] = qkv[i].shape;
                let batch_stride = match t.shape() {
                    [h] if *h == heads => 0,
                    [b, h] if *b == batch && *h == heads => heads,
                    s => {
                        return Err(format!(
                            "'{name}' has shape {s:?}; expected [{heads}] or [{batch}, {heads}]"
                        ))
                    }
                };
                let values = t
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                descales[i] = Some(FileDescale {
                    values,
                    batch_stride,
                });
            }
        }
    }
    Ok(AttnFile { qkv, descales })
}

/// Serializes the outputs: `o` (in `layout`, dtype `o_dtype`) and optionally `lse`.
pub fn write(
    o: &[u8],
    o_dtype: DType,
    o_shape: [usize; 4],
    layout: Layout,
    lse: Option<&[f32]>,
) -> Result<Vec<u8>, String> {
    use safetensors::tensor::TensorView;
    let st_dtype = match o_dtype {
        DType::F16 => Dtype::F16,
        DType::Bf16 => Dtype::BF16,
        other => return Err(format!("output dtype {other} cannot be written")),
    };
    let [b, s, h, d] = o_shape;
    let file_shape = match layout {
        Layout::Bshd => vec![b, s, h, d],
        Layout::Bhsd => vec![b, h, s, d],
    };
    let lse_bytes: Vec<u8> = lse
        .map(|l| l.iter().flat_map(|x| x.to_le_bytes()).collect())
        .unwrap_or_default();
    let mut views = vec![(
        "o".to_string(),
        TensorView::new(st_dtype, file_shape, o).map_err(|e| e.to_string())?,
    )];
    if lse.is_some() {
        views.push((
            "lse".to_string(),
            TensorView::new(Dtype::F32, vec![b, h, s], &lse_bytes).map_err(|e| e.to_string())?,
        ));
    }
    safetensors::serialize(views, None).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use safetensors::tensor::TensorView;

    fn file(entries: Vec<(&str, Dtype, Vec<usize>)>) -> Vec<u8> {
        let datas: Vec<Vec<u8>> = entries
            .iter()
            .map(|(_, d, s)| vec![0u8; s.iter().product::<usize>() * d.bitsize() / 8])
            .collect();
        let views: Vec<(String, TensorView)> = entries
            .iter()
            .zip(&datas)
            .map(|((n, d, s), data)| (n.to_string(), TensorView::new(*d, s.clone(), data).unwrap()))
            .collect();
        safetensors::serialize(views, None).unwrap()
    }

    #[test]
    fn reads_a_good_file_in_both_layouts() {
        let f = file(vec![
            ("q", Dtype::F16, vec![2, 5, 4, 64]),
            ("k", Dtype::F16, vec![2, 7, 2, 64]),
            ("v", Dtype::F16, vec![2, 7, 2, 64]),
        ]);
        let a = parse(&f, Layout::Bshd).unwrap();
        assert_eq!(a.qkv[0].shape, [2, 5, 4, 64]);
        let b = parse(&f, Layout::Bhsd).unwrap();
        assert_eq!(b.qkv[0].shape, [2, 4, 5, 64], "BHSD: dims 1 and 2 swap");
    }

    #[test]
    fn fp8_needs_descales_of_the_right_shape() {
        let base = vec![
            ("q", Dtype::BF16, vec![1, 3, 4, 64]),
            ("k", Dtype::F8_E4M3, vec![1, 9, 2, 64]),
            ("v", Dtype::F8_E4M3, vec![1, 9, 2, 64]),
        ];
        let e = parse(&file(base.clone()), Layout::Bshd).unwrap_err();
        assert!(e.contains("needs 'k_descale'"), "{e}");
        let mut ok = base.clone();
        ok.push(("k_descale", Dtype::F32, vec![2]));
        ok.push(("v_descale", Dtype::F32, vec![1, 2]));
        let a = parse(&file(ok), Layout::Bshd).unwrap();
        assert_eq!(a.descales[1].as_ref().unwrap().batch_stride, 0);
        assert_eq!(a.descales[2].as_ref().unwrap().batch_stride, 2);
        let mut bad = base;
        bad.push(("k_descale", Dtype::F32, vec![3]));
        bad.push(("v_descale", Dtype::F32, vec![2]));
        assert!(parse(&file(bad), Layout::Bshd)
            .unwrap_err()
            .contains("expected [2] or [1, 2]"));
    }

    #[test]
    fn errors_name_the_tensor() {
        let e = parse(
            &file(vec![
                ("q", Dtype::F16, vec![1, 3, 4, 64]),
                ("k", Dtype::F16, vec![1, 3, 4, 64]),
            ]),
            Layout::Bshd,
        )
        .unwrap_err();
        assert!(e.contains("missing tensor 'v'"), "{e}");
        let e = parse(
            &file(vec![
                ("q", Dtype::F32, vec![1, 3, 4, 64]),
                ("k", Dtype::F16, vec![1, 3, 4, 64]),
                ("v", Dtype::F16, vec![1, 3, 4, 64]),
            ]),
            Layout::Bshd,
        )
        .unwrap_err();
        assert!(e.contains("'q' has dtype F32"), "{e}");
        let e = parse(
            &file(vec![
                ("q", Dtype::F16, vec![3, 4, 64]),
                ("k", Dtype::F16, vec![1, 3, 4, 64]),
                ("v", Dtype::F16, vec![1, 3, 4, 64]),
            ]),
            Layout::Bshd,
        )
        .unwrap_err();
        assert!(e.contains("'q' has shape [3, 4, 64]"), "{e}");
        let e = parse(b"definitely not safetensors", Layout::Bshd).unwrap_err();
        assert!(e.contains("not a valid safetensors file"), "{e}");
    }

    #[test]
    fn output_round_trips() {
        let o = vec![1u8; 2 * 3 * 4 * 64 * 2];
        let lse = vec![0.5f32; 2 * 4 * 3];
        let bytes = write(&o, DType::Bf16, [2, 3, 4, 64], Layout::Bhsd, Some(&lse)).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("o").unwrap().shape(), &[2, 4, 3, 64]);
        assert_eq!(st.tensor("o").unwrap().dtype(), Dtype::BF16);
        assert_eq!(st.tensor("lse").unwrap().shape(), &[2, 4, 3]);
    }

    proptest! {
        // Fuzz: arbitrary bytes, and valid headers with mutated bytes, never panic.
        #[test]
        fn never_panics_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&bytes, Layout::Bshd);
        }

        #[test]
        fn never_panics_on_mutated_files(flips in prop::collection::vec((0usize..400, any::<u8>()), 1..8), cut in 0usize..400) {
            let mut f = file(vec![("q", Dtype::F16, vec![1, 2, 2, 64]), ("k", Dtype::F8_E4M3, vec![1, 2, 1, 64]), ("v", Dtype::F8_E4M3, vec![1, 2, 1, 64]), ("k_descale", Dtype::F32, vec![1]), ("v_descale", Dtype::F32, vec![1])]);
            for (i, b) in flips { let n = f.len(); f[i % n] = b; }
            f.truncate(f.len().saturating_sub(cut));
            let _ = parse(&f, Layout::Bshd);
        }
    }
}
