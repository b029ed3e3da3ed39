//! The variable-length form of `attn`'s input (FlashAttention's varlen convention): the
//! sequences packed one after another, with cumulative offsets.
//!
//! Tensors: `q` `[total_q, heads_q, dim]`, `k` and `v` `[total_k, heads_kv, dim]` (3-d, typed
//! as in the contiguous form; `q_descale`, `k_descale`, `v_descale` F32 `[heads]` or
//! `[batch, heads]` for scaled types), `cu_seqlens_q` and `cu_seqlens_k` I32 `[batch + 1]`:
//! sequence b is the query tokens `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` and the keys
//! `cu_seqlens_k[b]..cu_seqlens_k[b + 1]`. Outputs: `o` `[total_q, heads_q, dim]` and, with
//! `--lse`, `lse` F32 `[heads_q, total_q]`.

use super::{descale, dtype_of, FileDescale, FileTensor};
use fp8_sdpa::runtime::validate::check_cu_seqlens;
use fp8_sdpa::Layout;
use safetensors::{Dtype, SafeTensors};

/// The tensors that make a file variable-length.
pub(super) const NAMES: [&str; 2] = ["cu_seqlens_q", "cu_seqlens_k"];

/// A variable-length batch from the file.
#[derive(Debug, Clone)]
pub struct VarlenFile {
    /// Q, K, V; each `shape` is `[1, total_tokens, heads, dim]` (one packed "batch"), the
    /// bytes `[total_tokens, heads, dim]` as in the file.
    pub qkv: [FileTensor; 3],
    /// Descales of Q, K, V (scaled types only).
    pub descales: [Option<FileDescale>; 3],
    /// `[batch + 1]` query-token offsets.
    pub cu_seqlens_q: Vec<i32>,
    /// `[batch + 1]` key offsets.
    pub cu_seqlens_k: Vec<i32>,
    /// The longest sequence's query tokens.
    pub max_seqlen_q: usize,
    /// The longest sequence's keys.
    pub max_seqlen_k: usize,
}

impl VarlenFile {
    /// Sequences.
    pub fn batch(&self) -> usize {
        self.cu_seqlens_q.len() - 1
    }
}

/// A packed 3-d tensor, as a 4-d one of batch 1.
pub(super) fn packed(st: &SafeTensors, name: &str) -> Result<FileTensor, String> {
    let t = st.tensor(name).map_err(|_| {
        format!(
            "missing tensor '{name}' (a varlen file has q, k, v, cu_seqlens_q and cu_seqlens_k; \
             the file has: {})",
            st.names().join(", ")
        )
    })?;
    let shape = match t.shape() {
        &[n, h, d] => [1, n, h, d],
        s => {
            return Err(format!(
                "tensor '{name}' has shape {s:?}; a varlen file's q, k and v are 3-d \
                 (total_tokens, heads, dim)"
            ))
        }
    };
    Ok(FileTensor {
        dtype: dtype_of(name, t.dtype())?,
        shape,
        bytes: t.data().to_vec(),
    })
}

/// The I32 `[n]` offsets `name`, `n >= 2`.
pub(super) fn offsets(st: &SafeTensors, name: &str) -> Result<Vec<i32>, String> {
    let t = st.tensor(name).map_err(|_| {
        let other = NAMES.into_iter().find(|n| *n != name).unwrap_or(name);
        format!("'{other}' given without '{name}'; a varlen file needs both (I32 [batch + 1])")
    })?;
    if t.dtype() != Dtype::I32 {
        return Err(format!(
            "'{name}' has dtype {:?}; it must be I32 (cast it with .to(torch.int32))",
            t.dtype()
        ));
    }
    match t.shape() {
        [n] if *n >= 2 => {}
        s => {
            return Err(format!(
                "'{name}' has shape {s:?}; expected [batch + 1] with batch >= 1"
            ))
        }
    }
    Ok(t.data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Parses the varlen form; the caller has seen one of [`NAMES`] and no paged tensor.
pub(super) fn parse(st: &SafeTensors, layout: Layout) -> Result<VarlenFile, String> {
    if layout != Layout::Bshd {
        return Err(
            "--layout bhsd does not apply to a varlen file: its q, k, v and o are packed \
             [total_tokens, heads, dim]"
                .into(),
        );
    }
    let qkv = [packed(st, "q")?, packed(st, "k")?, packed(st, "v")?];
    let (cu_q, cu_k) = (offsets(st, "cu_seqlens_q")?, offsets(st, "cu_seqlens_k")?);
    if cu_q.len() != cu_k.len() {
        return Err(format!(
            "'cu_seqlens_q' holds {} offsets and 'cu_seqlens_k' {}; both are [batch + 1]",
            cu_q.len(),
            cu_k.len()
        ));
    }
    let (total_q, total_k) = (qkv[0].shape[1], qkv[1].shape[1]);
    // The offsets are data only the file holds: check them here, before a GPU is opened, with
    // the library's rules (it checks them again on the device); the maxima are what they give.
    let (max_q, max_k) = check_cu_seqlens(&cu_q, &cu_k, [total_q, total_k], [total_q, total_k])
        .map_err(|e| match e {
            fp8_sdpa::Error::InvalidInput(m) => m,
            other => other.to_string(),
        })?;
    let batch = cu_q.len() - 1;
    let mut descales: [Option<FileDescale>; 3] = [None, None, None];
    for (i, name) in ["q_descale", "k_descale", "v_descale"].iter().enumerate() {
        let of = ["q", "k", "v"][i];
        descales[i] = descale(st, name, of, qkv[i].dtype, [batch, qkv[i].shape[2]])?;
    }
    Ok(VarlenFile {
        qkv,
        descales,
        cu_seqlens_q: cu_q,
        cu_seqlens_k: cu_k,
        max_seqlen_q: max_q,
        max_seqlen_k: max_k,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_file::{Entry, Tensors};
    use super::super::{parse, write_varlen, AttnInput};
    use super::*;
    use fp8_sdpa::DType;
    use proptest::prelude::*;

    /// An input file under construction: name, dtype, shape, bytes.
    #[derive(Clone)]
    struct Build(Vec<Entry>);

    impl Tensors for Build {
        fn entries(&mut self) -> &mut Vec<Entry> {
            &mut self.0
        }
        fn entries_ref(&self) -> &[Entry] {
            &self.0
        }
    }

    impl Build {
        /// A valid varlen file: sequences of (3, 5), (0, 2) and (9, 1) query tokens and keys,
        /// 4 query heads over 2 kv heads, dim 64.
        fn good() -> Build {
            Build(Vec::new())
                .set("q", Dtype::F16, &[12, 4, 64])
                .set("k", Dtype::F16, &[8, 2, 64])
                .set("v", Dtype::F16, &[8, 2, 64])
                .ints("cu_seqlens_q", &[4], &[0, 3, 3, 12])
                .ints("cu_seqlens_k", &[4], &[0, 5, 7, 8])
        }

        fn parse(&self, layout: Layout) -> Result<VarlenFile, String> {
            match parse(&self.bytes(), layout)? {
                AttnInput::Varlen(v) => Ok(v),
                _ => panic!("a file with cu_seqlens parsed as another form"),
            }
        }

        fn err(&self) -> String {
            match parse(&self.bytes(), Layout::Bshd) {
                Ok(_) => panic!("parsed"),
                Err(e) => e,
            }
        }
    }

    #[track_caller]
    fn says(e: &str, what: &[&str]) {
        for w in what {
            assert!(e.contains(w), "expected '{w}' in: {e}");
        }
    }

    #[test]
    fn reads_a_good_varlen_file() {
        let f = Build::good().parse(Layout::Bshd).unwrap();
        assert_eq!(f.qkv[0].shape, [1, 12, 4, 64]);
        assert_eq!(f.qkv[1].shape, [1, 8, 2, 64]);
        assert_eq!((f.batch(), f.max_seqlen_q, f.max_seqlen_k), (3, 9, 5));
        assert_eq!(f.cu_seqlens_k, [0, 5, 7, 8]);
        assert!(f.descales.iter().all(Option::is_none));
    }

    #[test]
    fn fp8_descales_are_per_head_or_per_sequence() {
        let fp8 = Build::good()
            .set("q", Dtype::BF16, &[12, 4, 64])
            .set("k", Dtype::F8_E4M3, &[8, 2, 64])
            .set("v", Dtype::F8_E4M3, &[8, 2, 64]);
        says(&fp8.err(), &["'k' is e4m3 and needs 'k_descale'"]);
        let ok =
            fp8.clone()
                .set("k_descale", Dtype::F32, &[2])
                .set("v_descale", Dtype::F32, &[3, 2]);
        let f = ok.parse(Layout::Bshd).unwrap();
        assert_eq!(f.qkv[1].dtype, DType::E4m3);
        let strides = f.descales.map(|d| d.map(|d| d.batch_stride));
        assert_eq!(strides, [None, Some(0), Some(2)]);
        says(
            &ok.set("v_descale", Dtype::F32, &[4, 2]).err(),
            &["'v_descale' has shape [4, 2]", "expected [2] or [3, 2]"],
        );
    }

    #[test]
    fn bad_offsets_and_shapes_say_what_is_wrong() {
        let cases = [
            (
                Build::good().ints("cu_seqlens_q", &[4], &[0, 3, 2, 12]),
                "cu_seqlens_q[2] = 2 < cu_seqlens_q[1] = 3",
            ),
            (
                Build::good().ints("cu_seqlens_q", &[4], &[1, 3, 3, 12]),
                "cu_seqlens_q[0] = 1; the offsets start at 0",
            ),
            (
                Build::good().ints("cu_seqlens_k", &[4], &[0, 5, 7, 9]),
                "cu_seqlens_k[3] = 9 but K holds 8 tokens",
            ),
            (
                Build::good().ints("cu_seqlens_k", &[3], &[0, 5, 8]),
                "'cu_seqlens_q' holds 4 offsets and 'cu_seqlens_k' 3",
            ),
            (
                Build::good().ints("cu_seqlens_k", &[1], &[0]),
                "'cu_seqlens_k' has shape [1]; expected [batch + 1] with batch >= 1",
            ),
            (
                Build::good().set("cu_seqlens_q", Dtype::I64, &[4]),
                "'cu_seqlens_q' has dtype I64; it must be I32",
            ),
            (
                Build::good().without("cu_seqlens_k"),
                "'cu_seqlens_q' given without 'cu_seqlens_k'",
            ),
            (
                Build::good().set("q", Dtype::F16, &[1, 12, 4, 64]),
                "tensor 'q' has shape [1, 12, 4, 64]; a varlen file's q, k and v are 3-d",
            ),
            (
                Build::good().without("v"),
                "missing tensor 'v' (a varlen file has q, k, v",
            ),
        ];
        for (b, want) in cases {
            says(&b.err(), &[want]);
        }
        let e = match parse(&Build::good().bytes(), Layout::Bhsd) {
            Err(e) => e,
            Ok(_) => panic!("bhsd accepted"),
        };
        says(&e, &["--layout bhsd does not apply to a varlen file"]);
        // A paged tensor beside varlen ones is the paged form's mix error.
        let e = Build::good().ints("seqlens_k", &[3], &[1, 2, 3]).err();
        says(&e, &["not both"]);
    }

    #[test]
    fn output_is_packed() {
        let o = vec![0u8; 12 * 4 * 64 * 2];
        let lse = vec![0.5f32; 4 * 12];
        let bytes = write_varlen(&o, DType::F16, [12, 4, 64], Some(&lse)).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("o").unwrap().shape(), &[12, 4, 64]);
        assert_eq!(st.tensor("lse").unwrap().shape(), &[4, 12]);
        let bytes = write_varlen(&o, DType::Bf16, [12, 4, 64], None).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert!(st.tensor("lse").is_err());
    }

    proptest! {
        // Fuzz: a valid varlen file with mutated bytes never panics.
        #[test]
        fn never_panics_on_mutated_varlen_files(flips in prop::collection::vec((0usize..600, any::<u8>()), 1..8), cut in 0usize..600) {
            let mut f = Build::good()
                .set("k", Dtype::F8_E4M3, &[8, 2, 64])
                .set("v", Dtype::F8_E4M3, &[8, 2, 64])
                .set("k_descale", Dtype::F32, &[3, 2])
                .set("v_descale", Dtype::F32, &[2])
                .bytes();
            for (i, b) in flips { let n = f.len(); f[i % n] = b; }
            f.truncate(f.len().saturating_sub(cut));
            let _ = parse(&f, Layout::Bshd);
        }
    }
}
