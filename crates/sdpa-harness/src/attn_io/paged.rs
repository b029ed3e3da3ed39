//! The paged form of `attn`'s input: `q` with a paged KV cache (the layout vLLM and
//! FlashInfer use) in place of `k` and `v`.
//!
//! Tensors: `k_cache`, `v_cache` `[pages, page_size, heads_kv, dim]` (F16, BF16, or F8_E4M3
//! with `k_descale`, `v_descale` F32 `[heads_kv]` or `[batch, heads_kv]`), `block_table` I32
//! `[batch, max_pages]` and `seqlens_k` I32 `[batch]`. The caches keep that order whatever
//! `--layout` says: the layout is the query's and the output's.
//!
//! With `cu_seqlens_q` (I32 `[batch + 1]`) the queries are a variable-length batch: `q` is
//! packed `[total_q, heads_q, dim]` (3-d, `--layout bshd`), sequence b is its tokens
//! `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` against its `seqlens_k[b]` cached keys, and the
//! outputs are packed as a varlen file's (`o` `[total_q, heads_q, dim]`, `lse`
//! `[heads_q, total_q]`). `cu_seqlens_k` has no place beside a paged cache.

use super::{descale, dims_of, four_d, has, FileDescale, FileTensor};
use fp8_sdpa::runtime::validate::{check_cu_seqlens_q, check_page_table};
use fp8_sdpa::{DType, Layout};
use safetensors::{Dtype, SafeTensors};

/// The tensors that make a file paged.
pub(super) const NAMES: [&str; 4] = ["k_cache", "v_cache", "block_table", "seqlens_k"];

const CACHE_DIMS: &str = "pages, page_size, heads_kv, dim";

/// A query and a paged KV cache from the file.
#[derive(Debug, Clone)]
pub struct PagedFile {
    /// Query, logical shape `[batch, seq_q, heads_q, dim]`, F16 or BF16; with `cu_seqlens_q`
    /// packed, `[1, total_q, heads_q, dim]`.
    pub q: FileTensor,
    /// Variable-length queries: `[batch + 1]` token offsets into the packed `q`.
    pub cu_seqlens_q: Option<Vec<i32>>,
    /// The longest sequence's query tokens (`q`'s `seq_q` without `cu_seqlens_q`).
    pub max_seqlen_q: usize,
    /// Key pages; `shape` is `[pages, page_size, heads_kv, dim]`.
    pub k_cache: FileTensor,
    /// Value pages, typed and shaped like the key pages.
    pub v_cache: FileTensor,
    /// Row-major `[batch, max_pages]`: sequence b's key j is row `j % page_size` of page
    /// `block_table[b * max_pages + j / page_size]`.
    pub block_table: Vec<i32>,
    /// Pages per sequence in the block table.
    pub max_pages: usize,
    /// Keys of each sequence.
    pub seqlens_k: Vec<i32>,
    /// Descales of K and V (E4M3 caches only).
    pub descales: [Option<FileDescale>; 2],
}

/// Both forms together would leave it open which keys attend, so that is an error.
fn refuse_mixed(st: &SafeTensors) -> Result<(), String> {
    let quoted = |names: &[&str]| {
        names
            .iter()
            .filter(|n| has(st, n))
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let contiguous = quoted(&["k", "v"]);
    if !contiguous.is_empty() {
        return Err(format!(
            "the file has {contiguous} and {}: give either k and v (contiguous K/V) or k_cache, \
             v_cache, block_table and seqlens_k (a paged cache), not both",
            quoted(&NAMES)
        ));
    }
    if has(st, "cu_seqlens_k") {
        return Err(format!(
            "the file has 'cu_seqlens_k' and {}: a paged cache's keys come from block_table and \
             seqlens_k; give cu_seqlens_q alone for variable-length queries",
            quoted(&NAMES)
        ));
    }
    Ok(())
}

/// One of the caches: 4-d, and of a type the decode kernels read.
fn cache(st: &SafeTensors, name: &str) -> Result<FileTensor, String> {
    // The caches' dims are fixed, so read them without the query's layout swap.
    let t = four_d(st, name, Layout::Bshd, CACHE_DIMS)?;
    if !matches!(t.dtype, DType::F16 | DType::Bf16 | DType::E4m3) {
        return Err(format!(
            "'{name}' is {}; a paged cache is F16, BF16 or F8_E4M3 (with k_descale, v_descale)",
            t.dtype
        ));
    }
    Ok(t)
}

/// The I32 tensor `name` of shape `want` (a dim of `None` takes any size >= 1); `expected`
/// says what the shape should be in the error message. Returns the shape and the values.
fn ints(
    st: &SafeTensors,
    name: &str,
    want: &[Option<usize>],
    expected: &str,
) -> Result<(Vec<usize>, Vec<i32>), String> {
    let t = st
        .tensor(name)
        .map_err(|e| format!("tensor '{name}': {e}"))?;
    if t.dtype() != Dtype::I32 {
        return Err(format!(
            "'{name}' has dtype {:?}; it must be I32 (cast it with .to(torch.int32))",
            t.dtype()
        ));
    }
    let fits = t.shape().len() == want.len()
        && t.shape()
            .iter()
            .zip(want)
            .all(|(&n, w)| w.map_or(n >= 1, |w| w == n));
    if !fits {
        return Err(format!(
            "'{name}' has shape {:?}; expected {expected}",
            t.shape()
        ));
    }
    let values = t
        .data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((t.shape().to_vec(), values))
}

/// Parses the paged form; the caller has seen at least one of [`NAMES`] in the file.
pub(super) fn parse(st: &SafeTensors, layout: Layout) -> Result<PagedFile, String> {
    refuse_mixed(st)?;
    let missing: Vec<&str> = NAMES.into_iter().filter(|n| !has(st, n)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "a paged cache needs k_cache, v_cache, block_table and seqlens_k; the file lacks {}",
            missing.join(", ")
        ));
    }
    // Variable-length queries: packed 3-d q with cu_seqlens_q.
    let cu_seqlens_q = if has(st, "cu_seqlens_q") {
        if layout != Layout::Bshd {
            return Err(
                "--layout bhsd does not apply to variable-length queries: q and o are packed \
                 [total_q, heads_q, dim]"
                    .into(),
            );
        }
        Some(super::varlen::offsets(st, "cu_seqlens_q")?)
    } else {
        None
    };
    let q = match &cu_seqlens_q {
        Some(_) => super::varlen::packed(st, "q")?,
        None => four_d(st, "q", layout, dims_of(layout))?,
    };
    if !matches!(q.dtype, DType::F16 | DType::Bf16) {
        return Err(format!(
            "'q' is {}; with a paged cache q must be F16 or BF16 (the decode kernels take \
             fp16/bf16 queries)",
            q.dtype
        ));
    }
    let (k_cache, v_cache) = (cache(st, "k_cache")?, cache(st, "v_cache")?);
    if (k_cache.dtype, k_cache.shape) != (v_cache.dtype, v_cache.shape) {
        return Err(format!(
            "'k_cache' is {} {:?} but 'v_cache' is {} {:?}; the caches must match",
            k_cache.dtype, k_cache.shape, v_cache.dtype, v_cache.shape
        ));
    }
    let [q_batch, seq_q, heads_q, _] = q.shape;
    let [pages, page_size, heads_kv, _] = k_cache.shape;
    // Sequences: cu_seqlens_q's, else q's batch.
    let (batch, max_seqlen_q, whose) = match &cu_seqlens_q {
        Some(cu) => {
            // The offsets are data only the file holds: checked here with the library's rules.
            let max = check_cu_seqlens_q(cu, seq_q, seq_q).map_err(|e| match e {
                fp8_sdpa::Error::InvalidInput(m) => m,
                other => other.to_string(),
            })?;
            (cu.len() - 1, max, "cu_seqlens_q has")
        }
        None => (q_batch, seq_q, "q's batch is"),
    };
    let expected = format!("[{batch}, max_pages] with max_pages >= 1 ({whose} {batch})");
    let (table_shape, block_table) = ints(st, "block_table", &[Some(batch), None], &expected)?;
    let expected = format!("[{batch}], one length per sequence ({whose} {batch})");
    let (_, seqlens_k) = ints(st, "seqlens_k", &[Some(batch)], &expected)?;
    let max_pages = table_shape[1];
    // The table's values are data only the file holds: check them here, before a GPU is
    // opened, with the library's own rules (it checks them again on the device).
    check_page_table(&block_table, &seqlens_k, max_pages, page_size, pages).map_err(
        |e| match e {
            fp8_sdpa::Error::InvalidInput(m) => m,
            other => other.to_string(),
        },
    )?;
    // Q takes no descale on this path; this refuses a stray q_descale.
    descale(st, "q_descale", "q", q.dtype, [batch, heads_q])?;
    let descales = [
        descale(st, "k_descale", "k_cache", k_cache.dtype, [batch, heads_kv])?,
        descale(st, "v_descale", "v_cache", v_cache.dtype, [batch, heads_kv])?,
    ];
    Ok(PagedFile {
        q,
        cu_seqlens_q,
        max_seqlen_q,
        k_cache,
        v_cache,
        block_table,
        max_pages,
        seqlens_k,
        descales,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_file::{Entry, Tensors};
    use super::super::{parse, AttnInput};
    use super::*;
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
        /// A valid paged file: batch 2, seq_q 3, 4 query heads over 2 kv-heads, dim 64, and 5
        /// pages of 16 tokens; sequence 0 holds 40 keys in pages 4, 0, 2 and sequence 1
        /// holds 20 in pages 1, 3 (its third entry unused, so -1 is fine).
        fn good() -> Build {
            Build(Vec::new())
                .set("q", Dtype::F16, &[2, 3, 4, 64])
                .set("k_cache", Dtype::F16, &[5, 16, 2, 64])
                .set("v_cache", Dtype::F16, &[5, 16, 2, 64])
                .ints("block_table", &[2, 3], &[4, 0, 2, 1, 3, -1])
                .ints("seqlens_k", &[2], &[40, 20])
        }

        fn parse(&self, layout: Layout) -> Result<PagedFile, String> {
            match parse(&self.bytes(), layout)? {
                AttnInput::Paged(p) => Ok(p),
                _ => panic!("a file with a paged cache parsed as another form"),
            }
        }

        /// The error parsing gives; fails the test when it parses.
        fn err(&self) -> String {
            self.parse(Layout::Bshd).unwrap_err()
        }
    }

    #[track_caller]
    fn says(e: &str, what: &[&str]) {
        for w in what {
            assert!(e.contains(w), "expected '{w}' in: {e}");
        }
    }

    #[test]
    fn reads_a_good_paged_file() {
        let p = Build::good().parse(Layout::Bshd).unwrap();
        assert_eq!(p.q.shape, [2, 3, 4, 64]);
        assert_eq!(p.k_cache.shape, [5, 16, 2, 64]);
        assert_eq!(p.v_cache.dtype, DType::F16);
        assert_eq!(
            (p.max_pages, &p.block_table[..]),
            (3, &[4, 0, 2, 1, 3, -1][..])
        );
        assert_eq!(p.seqlens_k, [40, 20]);
        assert!(p.descales.iter().all(Option::is_none));
        let p = Build::good().parse(Layout::Bhsd).unwrap();
        assert_eq!(
            p.q.shape,
            [2, 4, 3, 64],
            "BHSD swaps the query's dims 1 and 2"
        );
        assert_eq!(p.k_cache.shape, [5, 16, 2, 64], "but never the caches'");
    }

    #[test]
    fn e4m3_caches_need_descales() {
        let fp8 = Build::good()
            .set("q", Dtype::BF16, &[2, 3, 4, 64])
            .set("k_cache", Dtype::F8_E4M3, &[5, 16, 2, 64])
            .set("v_cache", Dtype::F8_E4M3, &[5, 16, 2, 64]);
        says(&fp8.err(), &["'k_cache' is e4m3 and needs 'k_descale'"]);
        let ok =
            fp8.clone()
                .set("k_descale", Dtype::F32, &[2])
                .set("v_descale", Dtype::F32, &[2, 2]);
        let p = ok.parse(Layout::Bshd).unwrap();
        assert_eq!(p.k_cache.dtype, DType::E4m3);
        let strides = p.descales.map(|d| d.unwrap().batch_stride);
        assert_eq!(strides, [0, 2], "per kv-head, and per (batch, kv-head)");
        let bad = ok.set("v_descale", Dtype::F32, &[4]);
        says(
            &bad.err(),
            &["'v_descale' has shape [4]", "expected [2] or [2, 2]"],
        );
        let stray = Build::good().set("k_descale", Dtype::F32, &[2]);
        says(&stray.err(), &["'k_descale' given", "'k_cache' is f16"]);
        let stray = Build::good().set("q_descale", Dtype::F32, &[4]);
        says(&stray.err(), &["'q_descale' given", "'q' is f16"]);
    }

    #[test]
    fn mixing_the_forms_names_the_tensors() {
        let e = Build::good().set("k", Dtype::F16, &[2, 40, 2, 64]).err();
        says(&e, &["'k' and ", "'k_cache'", "'block_table'", "not both"]);
        // One paged tensor beside a complete contiguous set is still a mix, not a k/v file.
        let e = Build(Vec::new())
            .set("q", Dtype::F16, &[2, 3, 4, 64])
            .set("k", Dtype::F16, &[2, 40, 2, 64])
            .set("v", Dtype::F16, &[2, 40, 2, 64])
            .ints("seqlens_k", &[2], &[40, 20])
            .err();
        says(&e, &["'k', 'v' and 'seqlens_k'", "not both"]);
    }

    #[test]
    fn a_partial_cache_lists_what_is_missing() {
        let e = Build::good()
            .without("block_table")
            .without("seqlens_k")
            .err();
        says(&e, &["the file lacks block_table, seqlens_k"]);
        says(&Build::good().without("q").err(), &["missing tensor 'q'"]);
    }

    #[test]
    fn wrong_dtypes_say_which_and_what_fits() {
        let cases = [
            (
                Build::good().set("block_table", Dtype::I64, &[2, 3]),
                "'block_table' has dtype I64; it must be I32",
            ),
            (
                Build::good().set("seqlens_k", Dtype::F32, &[2]),
                "'seqlens_k' has dtype F32; it must be I32",
            ),
            (
                Build::good().set("k_cache", Dtype::U8, &[5, 16, 2, 64]),
                "'k_cache' is simfp8; a paged cache is F16, BF16 or F8_E4M3",
            ),
            (
                Build::good().set("v_cache", Dtype::F32, &[5, 16, 2, 64]),
                "'v_cache' has dtype F32; expected F16",
            ),
            (
                Build::good().set("v_cache", Dtype::BF16, &[5, 16, 2, 64]),
                "'k_cache' is f16 [5, 16, 2, 64] but 'v_cache' is bf16",
            ),
            (
                Build::good().set("q", Dtype::F8_E4M3, &[2, 3, 4, 64]),
                "'q' is e4m3; with a paged cache q must be F16 or BF16",
            ),
        ];
        for (b, want) in cases {
            says(&b.err(), &[want]);
        }
    }

    #[test]
    fn wrong_ranks_and_shapes_say_what_is_expected() {
        let cases = [
            (
                Build::good().set("k_cache", Dtype::F16, &[5, 16, 128]),
                "'k_cache' has shape [5, 16, 128]; expected 4 dims (pages, page_size, heads_kv, dim)",
            ),
            (
                Build::good().set("v_cache", Dtype::F16, &[5, 32, 2, 64]),
                "the caches must match",
            ),
            (
                Build::good().ints("block_table", &[6], &[4, 0, 2, 1, 3, -1]),
                "'block_table' has shape [6]; expected [2, max_pages] with max_pages >= 1",
            ),
            (
                Build::good().ints("block_table", &[3, 2], &[4, 0, 2, 1, 3, -1]),
                "'block_table' has shape [3, 2]; expected [2, max_pages]",
            ),
            (
                Build::good().ints("block_table", &[2, 0], &[]),
                "'block_table' has shape [2, 0]",
            ),
            (
                Build::good().ints("seqlens_k", &[2, 1], &[40, 20]),
                "'seqlens_k' has shape [2, 1]; expected [2], one length per sequence",
            ),
        ];
        for (b, want) in cases {
            says(&b.err(), &[want]);
        }
    }

    #[test]
    fn table_values_are_checked_before_any_gpu() {
        // 3 pages of 16 hold 48 keys.
        let e = Build::good().ints("seqlens_k", &[2], &[49, 20]).err();
        says(&e, &["seqlens_k[0] = 49 is outside 0..=48"]);
        let e = Build::good().ints("seqlens_k", &[2], &[40, -1]).err();
        says(&e, &["seqlens_k[1] = -1"]);
        // Only 5 pages exist; sequence 1's 20 keys use its first two entries.
        let e = Build::good()
            .ints("block_table", &[2, 3], &[4, 0, 2, 1, 5, 0])
            .err();
        says(
            &e,
            &["block_table[1][1] = 5 is not a page of the caches (0..5)"],
        );
        assert!(
            !e.starts_with("invalid attention input"),
            "the library's prefix is added once, by the command: {e}"
        );
    }

    #[test]
    fn variable_length_queries_are_packed_with_cu_seqlens_q() {
        // Two sequences: 1 query token over 40 cached keys, 2 over 20.
        let vl =
            Build::good()
                .set("q", Dtype::F16, &[3, 4, 64])
                .ints("cu_seqlens_q", &[3], &[0, 1, 3]);
        let p = vl.parse(Layout::Bshd).unwrap();
        assert_eq!(p.q.shape, [1, 3, 4, 64], "one packed batch");
        assert_eq!(p.cu_seqlens_q.as_deref(), Some(&[0, 1, 3][..]));
        assert_eq!(p.max_seqlen_q, 2);
        let dense = Build::good().parse(Layout::Bshd).unwrap();
        assert_eq!((dense.cu_seqlens_q, dense.max_seqlen_q), (None, 3));
        let cases = [
            (
                vl.clone().ints("cu_seqlens_q", &[3], &[0, 2, 1]),
                "cu_seqlens_q[2] = 1 < cu_seqlens_q[1] = 2",
            ),
            (
                vl.clone().ints("cu_seqlens_q", &[3], &[0, 1, 4]),
                "cu_seqlens_q[2] = 4 but Q holds 3 tokens",
            ),
            (
                vl.clone().ints("cu_seqlens_q", &[4], &[0, 1, 2, 3]),
                "'block_table' has shape [2, 3]; expected [3, max_pages] with max_pages >= 1 \
                 (cu_seqlens_q has 3)",
            ),
            (
                vl.clone().set("cu_seqlens_q", Dtype::I64, &[3]),
                "'cu_seqlens_q' has dtype I64; it must be I32",
            ),
            (
                vl.clone().set("q", Dtype::F16, &[1, 3, 4, 64]),
                "tensor 'q' has shape [1, 3, 4, 64]",
            ),
            (
                vl.clone().ints("cu_seqlens_k", &[3], &[0, 40, 60]),
                "a paged cache's keys come from block_table and seqlens_k",
            ),
        ];
        for (b, want) in cases {
            says(&b.err(), &[want]);
        }
        says(
            &vl.parse(Layout::Bhsd).unwrap_err(),
            &["--layout bhsd does not apply to variable-length queries"],
        );
        // E4M3 caches: descales per kv head, or per (sequence, kv head).
        let fp8 = vl
            .set("q", Dtype::BF16, &[3, 4, 64])
            .set("k_cache", Dtype::F8_E4M3, &[5, 16, 2, 64])
            .set("v_cache", Dtype::F8_E4M3, &[5, 16, 2, 64])
            .set("k_descale", Dtype::F32, &[2, 2])
            .set("v_descale", Dtype::F32, &[2]);
        let p = fp8.parse(Layout::Bshd).unwrap();
        assert_eq!(p.descales.map(|d| d.unwrap().batch_stride), [2, 0]);
        says(
            &fp8.set("k_descale", Dtype::F32, &[3, 2]).err(),
            &["'k_descale' has shape [3, 2]; expected [2] or [2, 2]"],
        );
    }

    proptest! {
        // Fuzz: a valid paged file with mutated bytes never panics.
        #[test]
        fn never_panics_on_mutated_paged_files(flips in prop::collection::vec((0usize..1000, any::<u8>()), 1..8), cut in 0usize..1000) {
            let mut f = Build::good()
                .set("k_cache", Dtype::F8_E4M3, &[5, 16, 2, 64])
                .set("v_cache", Dtype::F8_E4M3, &[5, 16, 2, 64])
                .set("k_descale", Dtype::F32, &[2])
                .set("v_descale", Dtype::F32, &[2])
                .bytes();
            // Flip header bytes mostly: the data is megabytes of zeros.
            for (i, b) in flips { let n = f.len(); f[i % n] = b; }
            f.truncate(f.len().saturating_sub(cut));
            let _ = parse(&f, Layout::Bshd);
        }

        // The same with variable-length queries.
        #[test]
        fn never_panics_on_mutated_paged_varlen_files(flips in prop::collection::vec((0usize..1000, any::<u8>()), 1..8), cut in 0usize..1000) {
            let mut f = Build::good()
                .set("q", Dtype::F16, &[3, 4, 64])
                .ints("cu_seqlens_q", &[3], &[0, 1, 3])
                .bytes();
            for (i, b) in flips { let n = f.len(); f[i % n] = b; }
            f.truncate(f.len().saturating_sub(cut));
            let _ = parse(&f, Layout::Bshd);
        }
    }
}
