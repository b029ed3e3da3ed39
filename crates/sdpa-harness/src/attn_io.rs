//! The `attn` command's file format: safetensors in, safetensors out.
//!
//! Inputs come in two forms. Contiguous: `q`, `k`, `v` (4-d, BSHD by default or BHSD with
//! `--layout bhsd`), typed F16, BF16, F8_E4M3 or U8 (U8 = the seeds' simulated FP8); for
//! scaled types `q_descale`, `k_descale`, `v_descale` as F32 of shape `[heads]` (broadcast
//! over the batch) or `[batch, heads]`. Paged ([`PagedFile`]): `q` as above with a paged KV
//! cache in place of `k` and `v`. Variable-length ([`VarlenFile`]): packed 3-d `q`, `k`, `v`
//! with `cu_seqlens_q`, `cu_seqlens_k`. Outputs: `o` in the inputs' layout and the path's output
//! type, and `lse` (F32 `[batch, heads_q, seq_q]`) when asked; varlen: `o`
//! `[total_q, heads_q, dim]` and `lse` `[heads_q, total_q]` ([`write_varlen`]).

mod paged;
pub mod preflight;
#[cfg(test)]
mod test_file;
mod varlen;

pub use paged::PagedFile;
pub use varlen::VarlenFile;

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

/// Everything `attn` reads in the contiguous form.
#[derive(Debug, Clone)]
pub struct AttnFile {
    /// Q, K, V.
    pub qkv: [FileTensor; 3],
    /// Descales of Q, K, V.
    pub descales: [Option<FileDescale>; 3],
}

/// An input file in either form.
#[derive(Debug, Clone)]
pub enum AttnInput {
    /// `q`, `k`, `v`.
    Contiguous(AttnFile),
    /// `q` and a paged KV cache.
    Paged(PagedFile),
    /// Packed sequences with offsets.
    Varlen(VarlenFile),
}

impl AttnInput {
    /// The query (both forms have one, shaped the same way).
    pub fn q(&self) -> &FileTensor {
        match self {
            AttnInput::Contiguous(f) => &f.qkv[0],
            AttnInput::Paged(p) => &p.q,
            AttnInput::Varlen(v) => &v.qkv[0],
        }
    }

    /// The element type of K and V.
    pub fn kv_dtype(&self) -> DType {
        match self {
            AttnInput::Contiguous(f) => f.qkv[1].dtype,
            AttnInput::Paged(p) => p.k_cache.dtype,
            AttnInput::Varlen(v) => v.qkv[1].dtype,
        }
    }
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

/// Parses and checks an input file: the paged form when any of its tensors is present, else
/// the varlen form when an offset array is, else the contiguous form. Errors name the tensor
/// and the problem.
pub fn parse(buffer: &[u8], layout: Layout) -> Result<AttnInput, String> {
    let st = SafeTensors::deserialize(buffer)
        .map_err(|e| format!("not a valid safetensors file: {e}"))?;
    if paged::NAMES.iter().any(|n| has(&st, n)) {
        paged::parse(&st, layout).map(AttnInput::Paged)
    } else if varlen::NAMES.iter().any(|n| has(&st, n)) {
        varlen::parse(&st, layout).map(AttnInput::Varlen)
    } else {
        contiguous(&st, layout).map(AttnInput::Contiguous)
    }
}

fn has(st: &SafeTensors, name: &str) -> bool {
    st.tensor(name).is_ok()
}

/// What the dims of `q` (and contiguous `k`, `v`) are in the file, for error messages.
fn dims_of(layout: Layout) -> &'static str {
    match layout {
        Layout::Bshd => "batch, seq, heads, dim",
        Layout::Bhsd => "batch, heads, seq, dim",
    }
}

/// The 4-d tensor `name`, its shape in logical (BSHD) order; `dims` names the file's dims
/// for the error message.
fn four_d(st: &SafeTensors, name: &str, layout: Layout, dims: &str) -> Result<FileTensor, String> {
    let t = st.tensor(name).map_err(|_| {
        format!(
            "missing tensor '{name}' (the file has: {})",
            st.names().join(", ")
        )
    })?;
    let s = t.shape();
    if s.len() != 4 {
        return Err(format!(
            "tensor '{name}' has shape {s:?}; expected 4 dims ({dims})"
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
}

/// The descale `name` of tensor `of` (typed `dtype`, with `batch` sequences of `heads`
/// heads): required when `dtype` is scaled, refused when it is not.
fn descale(
    st: &SafeTensors,
    name: &str,
    of: &str,
    dtype: DType,
    [batch, heads]: [usize; 2],
) -> Result<Option<FileDescale>, String> {
    let t = match st.tensor(name) {
        Err(_) if dtype.is_scaled() => {
            return Err(format!(
                "'{of}' is {dtype} and needs '{name}' (F32, [heads] or [batch, heads])"
            ))
        }
        Err(_) => return Ok(None),
        Ok(_) if !dtype.is_scaled() => {
            return Err(format!(
                "'{name}' given, but '{of}' is {dtype}, which takes no descale"
            ))
        }
        Ok(t) => t,
    };
    if t.dtype() != Dtype::F32 {
        return Err(format!("'{name}' must be F32, got {:?}", t.dtype()));
    }
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
    Ok(Some(FileDescale {
        values,
        batch_stride,
    }))
}

fn contiguous(st: &SafeTensors, layout: Layout) -> Result<AttnFile, String> {
    let get = |name| four_d(st, name, layout, dims_of(layout));
    let qkv = [get("q")?, get("k")?, get("v")?];
    let mut descales: [Option<FileDescale>; 3] = [None, None, None];
    for (i, name) in ["q_descale", "k_descale", "v_descale"].iter().enumerate() {
        let [batch, _, heads, _] = qkv[i].shape;
        let of = ["q", "k", "v"][i];
        descales[i] = descale(st, name, of, qkv[i].dtype, [batch, heads])?;
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

/// Serializes a varlen call's outputs: `o` `[total_q, heads_q, dim]` (dtype `o_dtype`) and
/// optionally `lse` `[heads_q, total_q]`.
pub fn write_varlen(
    o: &[u8],
    o_dtype: DType,
    [total_q, heads_q, dim]: [usize; 3],
    lse: Option<&[f32]>,
) -> Result<Vec<u8>, String> {
    use safetensors::tensor::TensorView;
    let st_dtype = match o_dtype {
        DType::F16 => Dtype::F16,
        DType::Bf16 => Dtype::BF16,
        other => return Err(format!("output dtype {other} cannot be written")),
    };
    let lse_bytes: Vec<u8> = lse
        .map(|l| l.iter().flat_map(|x| x.to_le_bytes()).collect())
        .unwrap_or_default();
    let mut views = vec![(
        "o".to_string(),
        TensorView::new(st_dtype, vec![total_q, heads_q, dim], o).map_err(|e| e.to_string())?,
    )];
    if lse.is_some() {
        views.push((
            "lse".to_string(),
            TensorView::new(Dtype::F32, vec![heads_q, total_q], &lse_bytes)
                .map_err(|e| e.to_string())?,
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

    /// Parses a file that must be in the contiguous form.
    fn plain(f: &[u8], layout: Layout) -> AttnFile {
        match parse(f, layout).unwrap() {
            AttnInput::Contiguous(a) => a,
            AttnInput::Paged(_) => panic!("a file with k and v parsed as paged"),
            AttnInput::Varlen(_) => panic!("a file without offsets parsed as varlen"),
        }
    }

    #[test]
    fn reads_a_good_file_in_both_layouts() {
        let f = file(vec![
            ("q", Dtype::F16, vec![2, 5, 4, 64]),
            ("k", Dtype::F16, vec![2, 7, 2, 64]),
            ("v", Dtype::F16, vec![2, 7, 2, 64]),
        ]);
        let a = plain(&f, Layout::Bshd);
        assert_eq!(a.qkv[0].shape, [2, 5, 4, 64]);
        let b = plain(&f, Layout::Bhsd);
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
        let a = plain(&file(ok), Layout::Bshd);
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
