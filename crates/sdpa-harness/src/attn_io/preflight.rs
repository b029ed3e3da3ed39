//! The problem an `attn` input file describes, checked by the library's own validation
//! before any device is opened: so a bad head dim, GQA ratio, shape, zero length or scale is
//! named on a machine without a GPU too, in the library's words.
//!
//! The library validates descriptions ([`CallDesc`]): dtypes, shapes, element strides, byte
//! sizes and device addresses. Here they are built exactly as `attn` builds its calls (the
//! same shapes, strides and buffer sizes), with synthetic addresses that are aligned and
//! disjoint, as the real allocations are; so the verdict is the one the device run would
//! reach, before any of the device-only checks (kernel choice for the GPU's arch).

use super::{AttnInput, FileDescale, FileTensor};
use fp8_sdpa::runtime::validate::{
    check_descale_values, validate, validate_paged, validate_paged_varlen, validate_varlen,
    CallDesc, DescaleDesc, PagedDesc, Validated, VarlenDesc,
};
use fp8_sdpa::runtime::TensorDesc;
use fp8_sdpa::{AttnParams, DType, Layout, Precision};

/// Synthetic device addresses: 256-byte aligned (as the driver's allocations are) and apart
/// from each other, so only the problem itself can fail validation.
struct Addresses {
    next: u64,
}

impl Addresses {
    fn new() -> Addresses {
        Addresses { next: 1 << 32 }
    }

    /// An address for a buffer of `bytes`, followed by a gap.
    fn take(&mut self, bytes: usize) -> u64 {
        let at = self.next;
        self.next += (bytes as u64).div_ceil(256) * 256 + 256;
        at
    }

    /// An address and length for `len` 4-byte elements.
    fn words(&mut self, len: usize) -> (u64, usize) {
        (self.take(4 * len), len)
    }
}

/// A tensor uploaded as the file holds it, contiguous in `layout`
/// (`TensorRef::contiguous`).
fn contiguous(a: &mut Addresses, t: &FileTensor, layout: Layout) -> TensorDesc {
    let [b, s, h] = layout.strides(t.shape[1], t.shape[2], t.shape[3]);
    TensorDesc {
        ptr: a.take(t.bytes.len()),
        bytes: t.bytes.len(),
        dtype: t.dtype,
        shape: t.shape,
        strides: [b, s, h, 1],
    }
}

/// A packed varlen tensor (`TensorRef::packed`).
fn packed(a: &mut Addresses, t: &FileTensor) -> TensorDesc {
    let [_, n, h, d] = t.shape;
    TensorDesc {
        ptr: a.take(t.bytes.len()),
        bytes: t.bytes.len(),
        dtype: t.dtype,
        shape: [1, n, h, d],
        strides: [0, h * d, d, 1],
    }
}

fn descale(a: &mut Addresses, d: &Option<FileDescale>) -> Option<DescaleDesc> {
    d.as_ref().map(|d| {
        let (ptr, len) = a.words(d.values.len());
        DescaleDesc {
            ptr,
            len,
            batch_stride: d.batch_stride,
        }
    })
}

/// Validates the call `attn` would make for `input` (read with `layout`), with `params`,
/// writing the LSE when `lse`. Returns what the library's validation returns; the descale
/// values are checked as the device run checks them.
pub fn check(
    input: &AttnInput,
    layout: Layout,
    params: AttnParams,
    lse: bool,
) -> fp8_sdpa::Result<Validated> {
    let mut a = Addresses::new();
    let q = input.q();
    // O as `attn` allocates it: Q's elements in the path's output type (Q's type when no
    // path exists; validation then names the missing path).
    let o_t: DType = Precision::from_types(q.dtype, input.kv_dtype()).map_or(q.dtype, |p| p.out());
    let o_bytes = q.shape.iter().product::<usize>() * o_t.size();
    let [b, s, h] = layout.strides(q.shape[1], q.shape[2], q.shape[3]);
    let o = TensorDesc {
        ptr: a.take(o_bytes),
        bytes: o_bytes,
        dtype: o_t,
        shape: q.shape,
        strides: [b, s, h, 1],
    };
    let [batch, seq_q, heads_q, _] = q.shape;
    let lse = lse.then(|| a.words(batch * heads_q * seq_q));
    let q_desc = contiguous(&mut a, q, layout);
    let (validated, descales) = match input {
        AttnInput::Contiguous(f) => {
            let call = CallDesc {
                q: q_desc,
                k: contiguous(&mut a, &f.qkv[1], layout),
                v: contiguous(&mut a, &f.qkv[2], layout),
                o,
                lse,
                descales: [
                    descale(&mut a, &f.descales[0]),
                    descale(&mut a, &f.descales[1]),
                    descale(&mut a, &f.descales[2]),
                ],
                params,
            };
            (validate(&call)?, f.descales.iter().collect::<Vec<_>>())
        }
        AttnInput::Paged(p) => {
            // The caches are `[pages, page_size, heads_kv, dim]` whatever --layout says.
            let call = CallDesc {
                q: q_desc,
                k: contiguous(&mut a, &p.k_cache, Layout::Bshd),
                v: contiguous(&mut a, &p.v_cache, Layout::Bshd),
                o,
                lse,
                descales: [
                    None,
                    descale(&mut a, &p.descales[0]),
                    descale(&mut a, &p.descales[1]),
                ],
                params,
            };
            let paged = PagedDesc {
                block_table: a.words(p.block_table.len()),
                max_pages: p.max_pages,
                seqlens_k: a.words(p.seqlens_k.len()),
            };
            let v = match &p.cu_seqlens_q {
                Some(cu) => {
                    validate_paged_varlen(&call, &paged, a.words(cu.len()), p.max_seqlen_q)?
                }
                None => validate_paged(&call, &paged)?,
            };
            (v, vec![&None, &p.descales[0], &p.descales[1]])
        }
        AttnInput::Varlen(f) => {
            let call = CallDesc {
                q: q_desc,
                k: packed(&mut a, &f.qkv[1]),
                v: packed(&mut a, &f.qkv[2]),
                o,
                lse,
                descales: [
                    descale(&mut a, &f.descales[0]),
                    descale(&mut a, &f.descales[1]),
                    descale(&mut a, &f.descales[2]),
                ],
                params,
            };
            let vl = VarlenDesc {
                cu_seqlens_q: a.words(f.cu_seqlens_q.len()),
                cu_seqlens_k: a.words(f.cu_seqlens_k.len()),
                max_seqlen_q: f.max_seqlen_q,
                max_seqlen_k: f.max_seqlen_k,
            };
            (
                validate_varlen(&call, &vl)?,
                f.descales.iter().collect::<Vec<_>>(),
            )
        }
    };
    for (name, d) in ["Q", "K", "V"].iter().zip(descales) {
        if let Some(d) = d {
            check_descale_values(name, &d.values)?;
        }
    }
    Ok(validated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn_io::parse;
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;

    /// A file of zero-filled tensors, with `ints` holding i32 tensors' values and `floats`
    /// F32 ones' (others are zeros).
    fn file(
        entries: &[(&str, Dtype, Vec<usize>)],
        ints: &[(&str, Vec<i32>)],
        floats: &[(&str, Vec<f32>)],
    ) -> Vec<u8> {
        let datas: Vec<Vec<u8>> = entries
            .iter()
            .map(|(n, d, s)| {
                if let Some((_, v)) = ints.iter().find(|(m, _)| m == n) {
                    v.iter().flat_map(|x| x.to_le_bytes()).collect()
                } else if let Some((_, v)) = floats.iter().find(|(m, _)| m == n) {
                    v.iter().flat_map(|x| x.to_le_bytes()).collect()
                } else {
                    vec![0u8; s.iter().product::<usize>() * d.bitsize() / 8]
                }
            })
            .collect();
        let views: Vec<(String, TensorView)> = entries
            .iter()
            .zip(&datas)
            .map(|((n, d, s), data)| (n.to_string(), TensorView::new(*d, s.clone(), data).unwrap()))
            .collect();
        safetensors::serialize(views, None).unwrap()
    }

    fn params(d: usize) -> AttnParams {
        AttnParams::default_for(d, false)
    }

    fn qkv(dq: usize, hq: usize, hkv: usize) -> Vec<(&'static str, Dtype, Vec<usize>)> {
        vec![
            ("q", Dtype::F16, vec![2, 5, hq, dq]),
            ("k", Dtype::F16, vec![2, 7, hkv, dq]),
            ("v", Dtype::F16, vec![2, 7, hkv, dq]),
        ]
    }

    fn check_file(f: &[u8], layout: Layout, p: AttnParams) -> fp8_sdpa::Result<Validated> {
        check(&parse(f, layout).unwrap(), layout, p, true)
    }

    #[test]
    fn good_problems_pass_in_every_form() {
        for layout in [Layout::Bshd, Layout::Bhsd] {
            let mut f = qkv(128, 4, 2);
            if layout == Layout::Bhsd {
                // The file's dims are [batch, heads, seq, dim].
                for t in &mut f {
                    t.2.swap(1, 2);
                }
            }
            let v = check_file(&file(&f, &[], &[]), layout, params(128)).unwrap();
            assert_eq!(v.precision, Precision::F16);
            assert_eq!((v.shape.seq_q, v.shape.heads_q, v.shape.seq_kv), (5, 4, 7));
        }
        let fp8kv = file(
            &[
                ("q", Dtype::BF16, vec![1, 3, 4, 64]),
                ("k", Dtype::F8_E4M3, vec![1, 9, 2, 64]),
                ("v", Dtype::F8_E4M3, vec![1, 9, 2, 64]),
                ("k_descale", Dtype::F32, vec![2]),
                ("v_descale", Dtype::F32, vec![1, 2]),
            ],
            &[],
            &[("k_descale", vec![0.5, 1.0]), ("v_descale", vec![2.0, 1.0])],
        );
        let v = check_file(&fp8kv, Layout::Bshd, params(64)).unwrap();
        assert_eq!(v.precision, Precision::Fp8KvBf16);
        let varlen = file(
            &[
                ("q", Dtype::F16, vec![6, 4, 64]),
                ("k", Dtype::F16, vec![9, 2, 64]),
                ("v", Dtype::F16, vec![9, 2, 64]),
                ("cu_seqlens_q", Dtype::I32, vec![3]),
                ("cu_seqlens_k", Dtype::I32, vec![3]),
            ],
            &[
                ("cu_seqlens_q", vec![0, 2, 6]),
                ("cu_seqlens_k", vec![0, 5, 9]),
            ],
            &[],
        );
        let v = check_file(&varlen, Layout::Bshd, params(64)).unwrap();
        assert_eq!((v.shape.batch, v.shape.seq_q, v.shape.seq_kv), (2, 4, 5));
        let paged = file(
            &[
                ("q", Dtype::BF16, vec![2, 1, 8, 128]),
                ("k_cache", Dtype::BF16, vec![4, 16, 2, 128]),
                ("v_cache", Dtype::BF16, vec![4, 16, 2, 128]),
                ("block_table", Dtype::I32, vec![2, 2]),
                ("seqlens_k", Dtype::I32, vec![2]),
            ],
            &[
                ("block_table", vec![0, 1, 2, 3]),
                ("seqlens_k", vec![20, 32]),
            ],
            &[],
        );
        let v = check_file(&paged, Layout::Bshd, params(128)).unwrap();
        assert_eq!((v.shape.heads_q, v.shape.seq_kv), (8, 32));
        let paged_varlen = file(
            &[
                ("q", Dtype::BF16, vec![3, 8, 128]),
                ("k_cache", Dtype::BF16, vec![4, 16, 2, 128]),
                ("v_cache", Dtype::BF16, vec![4, 16, 2, 128]),
                ("block_table", Dtype::I32, vec![2, 2]),
                ("seqlens_k", Dtype::I32, vec![2]),
                ("cu_seqlens_q", Dtype::I32, vec![3]),
            ],
            &[
                ("block_table", vec![0, 1, 2, 3]),
                ("seqlens_k", vec![20, 32]),
                ("cu_seqlens_q", vec![0, 1, 3]),
            ],
            &[],
        );
        let v = check_file(&paged_varlen, Layout::Bshd, params(128)).unwrap();
        assert_eq!((v.shape.batch, v.shape.seq_q), (2, 2));
    }

    #[test]
    fn problem_faults_are_the_librarys_errors() {
        let e = check_file(&file(&qkv(64, 3, 2), &[], &[]), Layout::Bshd, params(64))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("heads_q (3) must be a multiple of heads_kv (2)"),
            "{e}"
        );
        let e = check_file(
            &file(&qkv(64, 4, 2), &[], &[]),
            Layout::Bshd,
            AttnParams::new(f32::INFINITY, false),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("softmax scale must be finite and > 0"), "{e}");
        let mut f = qkv(64, 4, 2);
        f[2].2 = vec![2, 6, 2, 64];
        let e = check_file(&file(&f, &[], &[]), Layout::Bshd, params(64))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("K shape [2, 7, 2, 64] and V shape [2, 6, 2, 64] differ"),
            "{e}"
        );
        // Head dim 96 is 16-byte aligned in f16, so only the head-dim rule can refuse it.
        let e = check_file(&file(&qkv(96, 4, 2), &[], &[]), Layout::Bshd, params(96))
            .unwrap_err()
            .to_string();
        assert!(e.contains("head dim 96 is not supported"), "{e}");
    }

    #[test]
    fn descale_values_are_checked_on_the_host() {
        let f = file(
            &[
                ("q", Dtype::BF16, vec![1, 3, 4, 64]),
                ("k", Dtype::F8_E4M3, vec![1, 9, 2, 64]),
                ("v", Dtype::F8_E4M3, vec![1, 9, 2, 64]),
                ("k_descale", Dtype::F32, vec![2]),
                ("v_descale", Dtype::F32, vec![2]),
            ],
            &[],
            &[
                ("k_descale", vec![1.0, 1.0]),
                ("v_descale", vec![1.0, f32::NAN]),
            ],
        );
        let e = check_file(&f, Layout::Bshd, params(64))
            .unwrap_err()
            .to_string();
        assert!(e.contains("V descale[1] = NaN"), "{e}");
    }
}
