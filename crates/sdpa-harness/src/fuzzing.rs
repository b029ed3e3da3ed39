//! The property check of the `attn` command's file readers ([`crate::attn_io::parse`] and its
//! paged and varlen forms), shared by the fuzz target `attn_file` (`fuzz/`) and the property
//! test `tests/fuzz_attn_io.rs` (issue 44). Not part of the lab's API.
//!
//! The bytes pick a file: mostly a well-formed safetensors file of one of the four forms
//! (contiguous, paged, varlen, paged with varlen queries) with a few edits (a type, a dim, a
//! value, a missing or extra tensor, a corrupted header byte), otherwise the raw bytes. The
//! readers must never panic, and what they accept must be self-consistent: every tensor's
//! bytes match its shape and type, descales are present exactly for scaled types with one
//! value per head or per (sequence, head), offsets start at 0, never decrease and end at the
//! packed tensor's tokens, the stated maxima are the longest sequences, and a block table
//! holds `batch x max_pages` entries with every entry a sequence uses a page of the caches.

use crate::attn_io::{self, AttnInput, FileDescale, FileTensor};
use fp8_sdpa::fuzzing::{oracle_offsets, Reader};
use fp8_sdpa::{DType, Layout};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// One tensor of a generated file: name, type, shape, data.
type Entry = (String, Dtype, Vec<usize>, Vec<u8>);

/// The most elements a generated tensor may have (keeps the files small).
const MAX_ELEMS: usize = 1 << 12;

fn size_of(d: Dtype) -> usize {
    d.bitsize() / 8
}

/// A tensor of zeros (or of `ints`, for I32 tensors) with `shape`; `None` past [`MAX_ELEMS`].
fn entry(name: &str, dtype: Dtype, shape: Vec<usize>, ints: Option<&[i32]>) -> Option<Entry> {
    let n = shape
        .iter()
        .try_fold(1usize, |n, &x| n.checked_mul(x))
        .filter(|&n| n <= MAX_ELEMS)?;
    let data = match ints {
        Some(v) if dtype == Dtype::I32 => {
            let mut d: Vec<u8> = v.iter().take(n).flat_map(|x| x.to_le_bytes()).collect();
            d.resize(n * 4, 0);
            d
        }
        _ => {
            // Descales of 1.0 where F32, zeros elsewhere.
            if dtype == Dtype::F32 {
                (0..n).flat_map(|_| 1f32.to_le_bytes()).collect()
            } else {
                vec![0u8; n * size_of(dtype)]
            }
        }
    };
    Some((name.to_string(), dtype, shape, data))
}

const FILE_TYPES: [Dtype; 7] = [
    Dtype::F16,
    Dtype::BF16,
    Dtype::F8_E4M3,
    Dtype::U8,
    Dtype::F32,
    Dtype::I32,
    Dtype::I64,
];

/// Offsets `[batch + 1]`: prefix sums of small lengths.
fn offsets(r: &mut Reader, batch: usize) -> Vec<i32> {
    let mut at = 0i32;
    let mut cu = vec![0];
    for _ in 0..batch {
        at += r.below(5) as i32;
        cu.push(at);
    }
    cu
}

/// The scaled type's descale entry `[heads]` or `[batch, heads]`, if `dtype` is scaled.
fn descale_entry(
    r: &mut Reader,
    name: &str,
    dtype: Dtype,
    batch: usize,
    heads: usize,
) -> Option<Entry> {
    if !matches!(dtype, Dtype::F8_E4M3 | Dtype::U8) {
        return None;
    }
    let shape = if r.chance(128) {
        vec![batch, heads]
    } else {
        vec![heads]
    };
    entry(name, Dtype::F32, shape, None)
}

/// A generated file (module docs) and the layout to read it with.
fn gen_file(r: &mut Reader) -> (Vec<u8>, Layout) {
    let layout = if r.chance(32) {
        Layout::Bhsd
    } else {
        Layout::Bshd
    };
    if r.chance(16) {
        return (r.rest().to_vec(), layout);
    }
    let form = r.below(4);
    let batch = 1 + r.below(3);
    let (seq_q, seq_kv) = (1 + r.below(5), 1 + r.below(8));
    let heads_kv = 1 + r.below(2);
    let heads_q = heads_kv * (1 + r.below(2));
    let d = r.pick(&[8, 16, 1, 64, 0]);
    let (tq, tkv) = match r.u8() % 8 {
        0..=4 => (Dtype::F16, Dtype::F16),
        5 => (Dtype::BF16, Dtype::F8_E4M3),
        6 => (Dtype::F8_E4M3, Dtype::F8_E4M3),
        _ => (r.pick(&FILE_TYPES), r.pick(&FILE_TYPES)),
    };
    let mut es: Vec<Option<Entry>> = Vec::new();
    match form {
        // Contiguous q, k, v.
        0 => {
            let dims = |b, s, h| match layout {
                Layout::Bshd => vec![b, s, h, d],
                Layout::Bhsd => vec![b, h, s, d],
            };
            es.push(entry("q", tq, dims(batch, seq_q, heads_q), None));
            es.push(entry("k", tkv, dims(batch, seq_kv, heads_kv), None));
            es.push(entry("v", tkv, dims(batch, seq_kv, heads_kv), None));
            es.push(descale_entry(r, "q_descale", tq, batch, heads_q));
            es.push(descale_entry(r, "k_descale", tkv, batch, heads_kv));
            es.push(descale_entry(r, "v_descale", tkv, batch, heads_kv));
        }
        // Varlen: packed q, k, v with offsets.
        2 => {
            let (cq, ck) = (offsets(r, batch), offsets(r, batch));
            let (nq, nk) = (
                *cq.last().unwrap_or(&0) as usize,
                *ck.last().unwrap_or(&0) as usize,
            );
            es.push(entry("q", tq, vec![nq, heads_q, d], None));
            es.push(entry("k", tkv, vec![nk, heads_kv, d], None));
            es.push(entry("v", tkv, vec![nk, heads_kv, d], None));
            es.push(entry("cu_seqlens_q", Dtype::I32, vec![cq.len()], Some(&cq)));
            es.push(entry("cu_seqlens_k", Dtype::I32, vec![ck.len()], Some(&ck)));
            es.push(descale_entry(r, "q_descale", tq, batch, heads_q));
            es.push(descale_entry(r, "k_descale", tkv, batch, heads_kv));
            es.push(descale_entry(r, "v_descale", tkv, batch, heads_kv));
        }
        // Paged, with dense or (form 3) varlen queries.
        _ => {
            let page_size = r.pick(&[16, 1, 2, 4, 3, 0]);
            let pages = 1 + r.below(6);
            let max_pages = 1 + r.below(3);
            let tkv = if r.chance(224) {
                r.pick(&[Dtype::F16, Dtype::BF16, Dtype::F8_E4M3])
            } else {
                tkv
            };
            let tq = if r.chance(224) {
                r.pick(&[Dtype::F16, Dtype::BF16])
            } else {
                tq
            };
            if form == 3 {
                let cq = offsets(r, batch);
                let nq = *cq.last().unwrap_or(&0) as usize;
                es.push(entry("q", tq, vec![nq, heads_q, d], None));
                es.push(entry("cu_seqlens_q", Dtype::I32, vec![cq.len()], Some(&cq)));
            } else {
                let shape = match layout {
                    Layout::Bshd => vec![batch, seq_q, heads_q, d],
                    Layout::Bhsd => vec![batch, heads_q, seq_q, d],
                };
                es.push(entry("q", tq, shape, None));
            }
            let cache = vec![pages, page_size, heads_kv, d];
            es.push(entry("k_cache", tkv, cache.clone(), None));
            es.push(entry("v_cache", tkv, cache, None));
            let table: Vec<i32> = (0..batch * max_pages)
                .map(|_| r.below(pages) as i32)
                .collect();
            let lens: Vec<i32> = (0..batch)
                .map(|_| r.below(max_pages * page_size + 1) as i32)
                .collect();
            es.push(entry(
                "block_table",
                Dtype::I32,
                vec![batch, max_pages],
                Some(&table),
            ));
            es.push(entry("seqlens_k", Dtype::I32, vec![batch], Some(&lens)));
            es.push(descale_entry(r, "k_descale", tkv, batch, heads_kv));
            es.push(descale_entry(r, "v_descale", tkv, batch, heads_kv));
        }
    }
    let mut es: Vec<Entry> = es.into_iter().flatten().collect();
    // Edits: a type, a dim, an I32 value, a missing or an extra tensor.
    while r.chance(64) && !es.is_empty() {
        let i = r.below(es.len());
        match r.u8() % 6 {
            0 => {
                let t = r.pick(&FILE_TYPES);
                let (name, _, shape, _) = es[i].clone();
                if let Some(e) = entry(&name, t, shape, None) {
                    es[i] = e;
                }
            }
            1 => {
                let (name, t, mut shape, data) = es[i].clone();
                if !shape.is_empty() {
                    let k = r.below(shape.len());
                    shape[k] = r.pick(&[0, 1, 2, shape[k] + 1, shape[k].saturating_sub(1)]);
                }
                let ints: Vec<i32> = data
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                if let Some(e) = entry(&name, t, shape, Some(&ints)) {
                    es[i] = e;
                }
            }
            2 if es[i].1 == Dtype::I32 && es[i].3.len() >= 4 => {
                let at = 4 * r.below(es[i].3.len() / 4);
                let x = r.i32();
                es[i].3[at..at + 4].copy_from_slice(&x.to_le_bytes());
            }
            3 => {
                es.remove(i);
            }
            _ => {
                let name = r.pick(&[
                    "k",
                    "v",
                    "k_cache",
                    "cu_seqlens_q",
                    "cu_seqlens_k",
                    "q_descale",
                    "k_descale",
                    "block_table",
                    "seqlens_k",
                    "junk",
                ]);
                if !es.iter().any(|e| e.0 == name) {
                    let t = r.pick(&FILE_TYPES);
                    if let Some(e) = entry(name, t, vec![1 + r.below(3)], None) {
                        es.push(e);
                    }
                }
            }
        }
    }
    let views: Option<Vec<(String, TensorView)>> = es
        .iter()
        .map(|(n, t, s, data)| {
            TensorView::new(*t, s.clone(), data)
                .ok()
                .map(|v| (n.clone(), v))
        })
        .collect();
    let Some(mut bytes) = views.and_then(|v| safetensors::serialize(v, None).ok()) else {
        return (r.rest().to_vec(), layout);
    };
    if r.chance(8) && !bytes.is_empty() {
        let at = r.below(bytes.len().min(256));
        bytes[at] = r.u8();
    }
    (bytes, layout)
}

fn assert_tensor(name: &str, t: &FileTensor) {
    let n = t.shape.iter().try_fold(1usize, |n, &x| n.checked_mul(x));
    assert_eq!(
        n.and_then(|n| n.checked_mul(t.dtype.size())),
        Some(t.bytes.len()),
        "'{name}' holds {} bytes for shape {:?} of {}",
        t.bytes.len(),
        t.shape,
        t.dtype
    );
}

fn assert_descale(name: &str, of: DType, d: &Option<FileDescale>, batch: usize, heads: usize) {
    match d {
        None => assert!(!of.is_scaled(), "{name}: a scaled type without descale"),
        Some(d) => {
            assert!(of.is_scaled(), "{name}: a descale for an unscaled type");
            let want = match d.batch_stride {
                0 => heads,
                s if s == heads => batch * heads,
                s => panic!("{name}: batch stride {s}"),
            };
            assert_eq!(d.values.len(), want, "{name}: {} values", d.values.len());
        }
    }
}

/// The check (module docs). Returns whether the file was accepted.
pub fn check_attn_file(data: &[u8]) -> bool {
    let mut r = Reader::new(data);
    let (file, layout) = gen_file(&mut r);
    let Ok(input) = attn_io::parse(&file, layout) else {
        return false;
    };
    match &input {
        AttnInput::Contiguous(f) => {
            for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
                let t = &f.qkv[i];
                assert_tensor(name, t);
                assert_descale(name, t.dtype, &f.descales[i], t.shape[0], t.shape[2]);
            }
        }
        AttnInput::Varlen(v) => {
            assert_eq!(layout, Layout::Bshd);
            for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
                assert_tensor(name, &v.qkv[i]);
                assert_eq!(v.qkv[i].shape[0], 1, "{name} packed");
            }
            assert_eq!(v.cu_seqlens_q.len(), v.cu_seqlens_k.len());
            assert!(v.cu_seqlens_q.len() >= 2);
            let (tq, tk) = (v.qkv[0].shape[1], v.qkv[1].shape[1]);
            assert_eq!(oracle_offsets(&v.cu_seqlens_q, tq), Some(v.max_seqlen_q));
            assert_eq!(oracle_offsets(&v.cu_seqlens_k, tk), Some(v.max_seqlen_k));
            let batch = v.batch();
            for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
                let t = &v.qkv[i];
                assert_descale(name, t.dtype, &v.descales[i], batch, t.shape[2]);
            }
        }
        AttnInput::Paged(p) => {
            assert_tensor("q", &p.q);
            assert_tensor("k_cache", &p.k_cache);
            assert_tensor("v_cache", &p.v_cache);
            assert!(matches!(p.q.dtype, DType::F16 | DType::Bf16));
            assert!(matches!(
                p.k_cache.dtype,
                DType::F16 | DType::Bf16 | DType::E4m3
            ));
            assert_eq!(
                (p.k_cache.dtype, p.k_cache.shape),
                (p.v_cache.dtype, p.v_cache.shape)
            );
            let batch = match &p.cu_seqlens_q {
                Some(cu) => {
                    assert_eq!(layout, Layout::Bshd);
                    assert_eq!(p.q.shape[0], 1, "q packed");
                    assert_eq!(oracle_offsets(cu, p.q.shape[1]), Some(p.max_seqlen_q));
                    cu.len() - 1
                }
                None => {
                    assert_eq!(p.max_seqlen_q, p.q.shape[1]);
                    p.q.shape[0]
                }
            };
            let [pages, page_size, heads_kv, _] = p.k_cache.shape;
            assert!(p.max_pages >= 1);
            assert_eq!(Some(p.block_table.len()), batch.checked_mul(p.max_pages));
            assert_eq!(p.seqlens_k.len(), batch);
            let cap = p.max_pages as u128 * page_size as u128;
            for (b, &n) in p.seqlens_k.iter().enumerate() {
                assert!(n >= 0 && n as u128 <= cap, "seqlens_k[{b}] = {n}");
                let used = (n as usize).div_ceil(page_size.max(1));
                for i in 0..used {
                    let e = p.block_table[b * p.max_pages + i];
                    assert!(
                        e >= 0 && (e as usize) < pages,
                        "block_table[{b}][{i}] = {e}"
                    );
                }
            }
            for (i, name) in ["k_cache", "v_cache"].into_iter().enumerate() {
                assert_descale(name, p.k_cache.dtype, &p.descales[i], batch, heads_kv);
            }
        }
    }
    true
}
