//! Writing new tokens' K and V into a paged KV cache at given slots: vLLM's
//! `reshape_and_cache_flash`, for 16-bit pools or E4M3 pools with per-head descales.

use super::call::{read_back, CallOptions, Descale};
use super::device::Device;
use super::tensor::{check_streams, IdxRef, TensorDesc, TensorMut, TensorRef};
use super::validate::{check_descale_values, overlaps, range, span, ByteRange, PAGE_SIZES};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels;
use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};

/// New tokens written into a paged cache: token `t` of `k` and `v` (packed `[tokens,
/// heads_kv, dim]`, fp16 or bf16, [`TensorRef::packed`]) goes to slot `slots[t]` of
/// `k_cache` and `v_cache` (page pools `[pages, page_size, heads_kv, dim]`, contiguous, of
/// the same 16-bit type or E4M3), slot `page * page_size + offset`. A negative slot is
/// padding and skipped. E4M3 pools need per-head descales (`[heads_kv]` fp32): code =
/// e4m3(x / descale), saturating at ±448, as [`super::quantize`] and the attention kernels'
/// FP8 inputs define it.
///
/// ```no_run
/// use fp8_sdpa::runtime::{CallOptions, Device, IdxRef, PagedKvWrite, TensorMut, TensorRef};
/// use fp8_sdpa::{DType, Layout};
/// # fn main() -> fp8_sdpa::Result<()> {
/// let dev = Device::open(0)?;
/// let stream = dev.new_stream()?;
/// let (tokens, pages, page_size, heads, dim) = (3, 16, 64, 8, 128);
/// let k = stream.alloc_zeros::<u16>(tokens * heads * dim).unwrap(); // f16 bits
/// let v = stream.alloc_zeros::<u16>(tokens * heads * dim).unwrap();
/// let mut kc = stream.alloc_zeros::<u16>(pages * page_size * heads * dim).unwrap();
/// let mut vc = stream.alloc_zeros::<u16>(pages * page_size * heads * dim).unwrap();
/// let slots = stream.clone_htod(&[70i32, 71, -1]).unwrap(); // page 1, offsets 6 and 7; padding
/// let pool = [pages, page_size, heads, dim];
/// let w = PagedKvWrite::new(
///     TensorRef::packed(&k, &stream, DType::F16, [tokens, heads, dim])?,
///     TensorRef::packed(&v, &stream, DType::F16, [tokens, heads, dim])?,
///     TensorMut::contiguous(&mut kc, &stream, DType::F16, pool, Layout::Bshd)?,
///     TensorMut::contiguous(&mut vc, &stream, DType::F16, pool, Layout::Bshd)?,
///     IdxRef::new(&slots, &stream),
/// );
/// dev.write_paged_kv(&stream, &w, CallOptions::default())?;
/// # Ok(())
/// # }
/// ```
#[non_exhaustive]
pub struct PagedKvWrite<'a> {
    /// New keys, packed `[tokens, heads_kv, dim]`.
    pub k: TensorRef<'a>,
    /// New values, shaped like `k`.
    pub v: TensorRef<'a>,
    /// The key pool `[pages, page_size, heads_kv, dim]`, contiguous.
    pub k_cache: TensorMut<'a>,
    /// The value pool, shaped like `k_cache`.
    pub v_cache: TensorMut<'a>,
    /// One i32 slot per token (`page * page_size + offset`; negative: skipped).
    pub slots: IdxRef<'a>,
    /// The pools' descales per head (E4M3 pools only).
    pub k_descale: Option<Descale<'a>>,
    /// As `k_descale`, for `v_cache`.
    pub v_descale: Option<Descale<'a>>,
}

impl<'a> PagedKvWrite<'a> {
    /// A write into 16-bit pools (no descales).
    pub fn new(
        k: TensorRef<'a>,
        v: TensorRef<'a>,
        k_cache: TensorMut<'a>,
        v_cache: TensorMut<'a>,
        slots: IdxRef<'a>,
    ) -> PagedKvWrite<'a> {
        PagedKvWrite {
            k,
            v,
            k_cache,
            v_cache,
            slots,
            k_descale: None,
            v_descale: None,
        }
    }

    /// The same into E4M3 pools with these per-head descales.
    pub fn with_descales(mut self, k: Descale<'a>, v: Descale<'a>) -> PagedKvWrite<'a> {
        self.k_descale = Some(k);
        self.v_descale = Some(v);
        self
    }
}

/// What a valid write launches with.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePlan {
    /// Tokens (blocks of the grid); 0: nothing to write.
    pub tokens: u32,
    pub heads: i32,
    pub dim: i32,
    /// Token and head strides of K and V, in elements.
    pub k_strides: [i64; 2],
    pub v_strides: [i64; 2],
    /// `pages * page_size`: slots at or past it are skipped by the kernel.
    pub pool_slots: i64,
    /// E4M3 pools.
    pub e4m3: bool,
    /// Elements a thread moves per step: 8 when dim is a multiple of 8 and every row start
    /// of the inputs and pools is 16-byte aligned (8-byte for E4M3 pools), else 1.
    pub vec: i32,
}

impl WritePlan {
    /// (threads per block, blocks per token) for `write_paged_kv`'s grid.
    pub fn block_grid(&self) -> (u32, u32) {
        let n = (self.heads as u32) * (self.dim as u32) / self.vec as u32;
        let block = n.next_multiple_of(32).clamp(32, 256);
        (block, n.div_ceil(block).min(65_535))
    }
}

/// Checks a write before launch: element types, shapes, contiguous pools, every buffer
/// holding what the kernel may touch, the pools disjoint from each other and from every
/// input, and the sizes the kernel's integers hold. `slots` and the descales are (device
/// address, length in elements).
#[doc(hidden)]
pub fn plan_write(
    k: &TensorDesc,
    v: &TensorDesc,
    k_cache: &TensorDesc,
    v_cache: &TensorDesc,
    slots: (u64, usize),
    descales: Option<[(u64, usize); 2]>,
) -> Result<WritePlan> {
    fn bad<T>(m: String) -> Result<T> {
        Err(Error::InvalidInput(m))
    }
    if !matches!(k.dtype, DType::F16 | DType::Bf16) || v.dtype != k.dtype {
        return bad(format!(
            "new K and V must both be f16 or bf16, got {} and {}",
            k.dtype, v.dtype
        ));
    }
    let [kb, tokens, heads, dim] = k.shape;
    if kb != 1 || v.shape != k.shape {
        return bad(format!(
            "new K {:?} and V {:?} must both be packed [tokens, heads_kv, dim] (TensorRef::packed)",
            k.shape, v.shape
        ));
    }
    let e4m3 = k_cache.dtype == DType::E4m3;
    if !(e4m3 || k_cache.dtype == k.dtype) || v_cache.dtype != k_cache.dtype {
        return bad(format!(
            "the pools must both be {} (as the new tokens) or E4M3, got {} and {}",
            k.dtype, k_cache.dtype, v_cache.dtype
        ));
    }
    let [pages, page_size, ch, cd] = k_cache.shape;
    if v_cache.shape != k_cache.shape || (ch, cd) != (heads, dim) {
        return bad(format!(
            "the pools {:?} and {:?} must both be [pages, page_size, heads_kv, dim] with the new tokens' heads_kv {heads} and dim {dim}",
            k_cache.shape, v_cache.shape
        ));
    }
    if pages == 0 || heads == 0 || dim == 0 || !PAGE_SIZES.contains(&page_size) {
        return bad(format!(
            "pools {:?}: pages, heads_kv and dim must be >= 1 and page_size 16..=256",
            k_cache.shape
        ));
    }
    let row = heads.checked_mul(dim);
    let (Some(row), Some(page)) = (row, row.and_then(|r| r.checked_mul(page_size))) else {
        return bad(format!(
            "pools {:?} exceed the address space; use fewer heads or a smaller dim",
            k_cache.shape
        ));
    };
    let contiguous = [page, row, dim, 1];
    for (name, t) in [("K's pool", k_cache), ("V's pool", v_cache)] {
        if t.strides != contiguous {
            return bad(format!(
                "{name} must be contiguous (strides {contiguous:?}), got {:?}",
                t.strides
            ));
        }
    }
    let pool_slots = pages
        .checked_mul(page_size)
        .filter(|&s| s <= i32::MAX as usize)
        .ok_or_else(|| Error::InvalidInput(format!(
            "pools of {pages} pages of {page_size} tokens exceed 2^31 slots (slots are i32); split the pool"
        )))?;
    if tokens > i32::MAX as usize || row > i32::MAX as usize {
        return bad(format!(
            "{tokens} tokens of {heads} x {dim} exceed the kernel's i32 counts; split the write"
        ));
    }
    // Every range the kernel may touch, each inside its buffer.
    let mut inputs: Vec<(&str, ByteRange)> = Vec::new();
    for (name, t) in [
        ("new K", k),
        ("new V", v),
        ("K's pool", k_cache),
        ("V's pool", v_cache),
    ] {
        if t.strides[3] != 1 {
            return bad(format!(
                "{name}'s last dim must be contiguous (stride 1), got {}",
                t.strides[3]
            ));
        }
        if !t.ptr.is_multiple_of(t.dtype.size() as u64) {
            return bad(format!(
                "{name}'s pointer {:#x} is not aligned to its elements",
                t.ptr
            ));
        }
        let r = span(t).filter(|r| r.1 - r.0 <= i64::MAX as u64);
        match r {
            Some(r) if (r.1 - r.0) <= t.bytes as u64 => inputs.push((name, r)),
            _ => {
                return bad(format!(
                    "{name} with shape {:?} and strides {:?} does not fit its buffer of {} bytes",
                    t.shape, t.strides, t.bytes
                ))
            }
        }
    }
    // An i32 or f32 array of at least `need` entries.
    let index = |name: &str, (ptr, len): (u64, usize), need: usize| -> Result<ByteRange> {
        if len < need || !ptr.is_multiple_of(4) {
            return bad(format!(
                "{name} must be 4-byte aligned with at least {need} entries, got {len}"
            ));
        }
        range(ptr, len, 4)
            .ok_or_else(|| Error::InvalidInput(format!("{name} spans past the address space")))
    };
    inputs.push(("slots", index("slots", slots, tokens)?));
    match (e4m3, descales) {
        (true, Some([kd, vd])) => {
            inputs.push(("K's descale", index("K's descale", kd, heads)?));
            inputs.push(("V's descale", index("V's descale", vd, heads)?));
        }
        (true, None) => {
            return bad(
                "E4M3 pools need a descale per head for K and V (PagedKvWrite::with_descales)"
                    .into(),
            )
        }
        (false, Some(_)) => return bad("16-bit pools take no descales; drop with_descales".into()),
        (false, None) => {}
    }
    let (kc, vc) = (inputs[2].1, inputs[3].1);
    if overlaps(kc, vc) {
        return bad("K's and V's pools overlap; give each its own buffer".into());
    }
    for (name, r) in inputs.iter().filter(|(n, _)| !n.ends_with("pool")) {
        for (pool, p) in [("K's pool", kc), ("V's pool", vc)] {
            if overlaps(*r, p) {
                return bad(format!("{pool} overlaps {name}; inputs are never written"));
            }
        }
    }
    let stride = |t: &TensorDesc| -> Result<[i64; 2]> {
        let n = |x: usize| {
            i64::try_from(x).map_err(|_| Error::InvalidInput(format!("stride {x} exceeds i64")))
        };
        Ok([n(t.strides[1])?, n(t.strides[2])?])
    };
    let strides = (stride(k)?, stride(v)?);
    let aligned = |t: &TensorDesc, to: u64| t.ptr.is_multiple_of(to);
    let vec = if dim % 8 == 0
        && aligned(k, 16)
        && aligned(v, 16)
        && aligned(k_cache, if e4m3 { 8 } else { 16 })
        && aligned(v_cache, if e4m3 { 8 } else { 16 })
        && [strides.0, strides.1].iter().flatten().all(|s| s % 8 == 0)
    {
        8
    } else {
        1
    };
    Ok(WritePlan {
        tokens: tokens as u32,
        heads: heads as i32,
        dim: dim as i32,
        k_strides: strides.0,
        v_strides: strides.1,
        pool_slots: pool_slots as i64,
        e4m3,
        vec,
    })
}

impl Device {
    /// Writes `w`'s new tokens into its pools on `stream` (queued; done when the stream
    /// reaches it). With `opts.check_descales` (the default) the slots and descales are read
    /// back first (one synchronization) and a slot past the pools, or a descale that is not
    /// finite and > 0, is refused; without it such a slot is skipped by the kernel, so no
    /// write lands outside the pools.
    pub fn write_paged_kv(
        &self,
        stream: &CudaStream,
        w: &PagedKvWrite<'_>,
        opts: CallOptions,
    ) -> Result<()> {
        check_streams(
            stream,
            [
                w.k.on("new K"),
                w.v.on("new V"),
                w.k_cache.on("K's pool"),
                w.v_cache.on("V's pool"),
                w.slots.on("slots"),
            ],
        )?;
        let descales = match (&w.k_descale, &w.v_descale) {
            (Some(k), Some(v)) => {
                if k.batch_stride != 0 || v.batch_stride != 0 {
                    return Err(Error::InvalidInput(
                        "a pool's descales are one per head (batch stride 0)".into(),
                    ));
                }
                check_streams(
                    stream,
                    [
                        ("K's descale", k.values.stream),
                        ("V's descale", v.values.stream),
                    ],
                )?;
                Some([(k.values.ptr, k.values.len), (v.values.ptr, v.values.len)])
            }
            (None, None) => None,
            _ => return Err(Error::InvalidInput("give both descales or neither".into())),
        };
        let p = plan_write(
            &w.k.desc,
            &w.v.desc,
            &w.k_cache.desc,
            &w.v_cache.desc,
            (w.slots.ptr, w.slots.len),
            descales,
        )?;
        if p.tokens == 0 {
            return Ok(());
        }
        if opts.check_descales {
            let slots =
                read_back::<i32>(stream, w.slots.ptr, p.tokens as usize, "reading slots back")?;
            if let Some((t, s)) = slots
                .iter()
                .enumerate()
                .find(|(_, &s)| s as i64 >= p.pool_slots)
            {
                return Err(Error::InvalidInput(format!(
                    "slots[{t}] = {s} is past the pools' {} slots (pages x page_size)",
                    p.pool_slots
                )));
            }
            if let Some([kd, vd]) = descales {
                for (name, (ptr, _)) in [("K's", kd), ("V's", vd)] {
                    let vals =
                        read_back::<f32>(stream, ptr, p.heads as usize, "reading descales back")?;
                    check_descale_values(name, &vals)?;
                }
            }
        }
        let in_t = if w.k.desc.dtype == DType::Bf16 {
            "bf16_t"
        } else {
            "half_t"
        };
        let module = self.module(
            &kernels::CACHE,
            &[
                ("CACHE_IN_T".into(), in_t.into()),
                ("CACHE_E4M3".into(), if p.e4m3 { "1" } else { "0" }.into()),
            ],
        )?;
        let f = module
            .load_function(kernels::CACHE.entry)
            .map_err(Error::driver("finding write_paged_kv"))?;
        let (block, per_token) = p.block_grid();
        let cfg = LaunchConfig {
            grid_dim: (p.tokens, per_token, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        let (kd, vd) = descales.map_or((0u64, 0u64), |[k, v]| (k.0, v.0));
        let ptrs = [
            w.k.desc.ptr,
            w.v.desc.ptr,
            w.k_cache.desc.ptr,
            w.v_cache.desc.ptr,
            w.slots.ptr,
        ];
        let mut l = stream.launch_builder(&f);
        l.arg(&ptrs[0])
            .arg(&ptrs[1])
            .arg(&ptrs[2])
            .arg(&ptrs[3])
            .arg(&ptrs[4])
            .arg(&kd)
            .arg(&vd)
            .arg(&p.heads)
            .arg(&p.dim)
            .arg(&p.k_strides[0])
            .arg(&p.k_strides[1])
            .arg(&p.v_strides[0])
            .arg(&p.v_strides[1])
            .arg(&p.pool_slots)
            .arg(&p.vec);
        // SAFETY: plan_write proved every address the kernel forms (token t < tokens of K and V
        // through their strides; slot < pool_slots rows of the contiguous pools; heads
        // descales) inside its buffer, 16-byte accesses only where `vec` = 8 proved them aligned, the pools disjoint from each other and from every
        // input; the arguments match write_paged_kv's parameters in order and type; the
        // borrows in `w` outlive the queued launch.
        unsafe { l.launch(cfg) }.map_err(Error::driver("launching write_paged_kv"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn t(ptr: u64, dtype: DType, shape: [usize; 4]) -> TensorDesc {
        let [_, s, h, d] = shape;
        let strides = [s * h * d, h * d, d, 1];
        TensorDesc {
            ptr,
            bytes: shape.iter().product::<usize>() * dtype.size(),
            dtype,
            shape,
            strides,
        }
    }

    /// 5 tokens of 2 heads x 64 into pools of 8 pages of 16 tokens, each buffer 1 MiB apart.
    fn call(pool: DType) -> (TensorDesc, TensorDesc, TensorDesc, TensorDesc) {
        let tok = [1, 5, 2, 64];
        let pools = [8, 16, 2, 64];
        (
            t(MIB, DType::F16, tok),
            t(2 * MIB, DType::F16, tok),
            t(3 * MIB, pool, pools),
            t(4 * MIB, pool, pools),
        )
    }

    const SLOTS: (u64, usize) = (5 * MIB, 5);
    const DS: Option<[(u64, usize); 2]> = Some([(6 * MIB, 2), (7 * MIB, 2)]);

    fn err(r: Result<WritePlan>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn a_valid_write_plans_its_launch() {
        let (k, v, kc, vc) = call(DType::F16);
        let p = plan_write(&k, &v, &kc, &vc, SLOTS, None).unwrap();
        assert_eq!(
            p,
            WritePlan {
                tokens: 5,
                heads: 2,
                dim: 64,
                k_strides: [128, 64],
                v_strides: [128, 64],
                pool_slots: 128,
                e4m3: false,
                vec: 8,
            }
        );
        assert_eq!(p.block_grid(), (32, 1), "2 x 64 / 8 = 16 threads: one warp");
        let (k, v, kc, vc) = call(DType::E4m3);
        assert!(plan_write(&k, &v, &kc, &vc, SLOTS, DS).unwrap().e4m3);
    }

    /// cache.cu's `div_rn`, step for step (f32 products and fused multiply-adds).
    fn div_rn(x: f32, d: f32, r: f32) -> f32 {
        let q = x * r;
        if q.abs() < 1e30 {
            (-q).mul_add(d, x).mul_add(r, q).copysign(q)
        } else {
            q
        }
    }

    #[test]
    fn the_kernels_division_gives_the_host_codecs_code_for_every_16bit_input() {
        use crate::fp8::e4m3;
        // Descales from 2^-20 to 2^20, dense in mantissas (a multiplicative step that is not a
        // power of two), and the awkward ones: all-ones mantissas and exact powers of two.
        let mut ds: Vec<f32> = (0..100)
            .map(|i| 2f32.powf(-20.0 + 0.4013 * i as f32))
            .collect();
        ds.extend([
            1.0,
            0.5,
            3.0,
            f32::from_bits(0x3fff_ffff),
            f32::from_bits(0x3f7f_ffff),
            448.0,
            1e-30,
        ]);
        for d in ds {
            let r = 1.0 / d;
            for bits in 0..=u16::MAX {
                for x in [
                    half::f16::from_bits(bits).to_f32(),
                    half::bf16::from_bits(bits).to_f32(),
                ] {
                    let q = div_rn(x, d, r);
                    assert_eq!(
                        e4m3::encode_f32(q),
                        e4m3::encode_scaled(x, d),
                        "{x} / {d}: {q} against {}",
                        x / d
                    );
                    // The quotient itself wherever the residual step is exact (no underflow:
                    // |x| well above the subnormals) and no overflow.
                    if x.abs() >= 2f32.powi(-100)
                        && (x / d).abs() >= f32::MIN_POSITIVE
                        && (x / d).abs() < 1e30
                    {
                        assert_eq!(q.to_bits(), (x / d).to_bits(), "{x} / {d}");
                    }
                }
            }
        }
    }

    #[test]
    fn sixteen_byte_moves_only_where_every_row_start_is_aligned() {
        let vec = |k: &TensorDesc, kc: &TensorDesc, v, vc, ds| {
            plan_write(k, v, kc, vc, SLOTS, ds).unwrap().vec
        };
        let (k, v, kc, vc) = call(DType::F16);
        assert_eq!(vec(&k, &kc, &v, &vc, None), 8);
        let mut off = k;
        off.ptr += 2; // one f16 in: rows start 2 bytes past 16
        assert_eq!(vec(&off, &kc, &v, &vc, None), 1);
        let mut pool = kc;
        pool.ptr += 8;
        assert_eq!(vec(&k, &pool, &v, &vc, None), 1, "16-bit pool 8 bytes off");
        let (k, v, kc, vc) = call(DType::E4m3);
        let mut pool = kc;
        pool.ptr += 8;
        assert_eq!(
            vec(&k, &pool, &v, &vc, DS),
            8,
            "an E4M3 row of 8 codes needs 8 bytes"
        );
        pool.ptr += 4;
        assert_eq!(vec(&k, &pool, &v, &vc, DS), 1);
        // A head dim that is not a multiple of 8.
        let odd = |mut t: TensorDesc| {
            t.shape[3] = 36;
            t.strides = [t.shape[1] * 2 * 36, 2 * 36, 36, 1];
            t
        };
        let (k, v, kc, vc) = call(DType::F16);
        let p = plan_write(&odd(k), &odd(v), &odd(kc), &odd(vc), SLOTS, None).unwrap();
        assert_eq!((p.vec, p.block_grid()), (1, (96, 1)));
    }

    #[test]
    fn every_bad_write_is_refused_with_its_reason() {
        let (k, v, kc, vc) = call(DType::F16);
        let mut bf = v;
        bf.dtype = DType::Bf16;
        assert!(err(plan_write(&k, &bf, &kc, &vc, SLOTS, None)).contains("both be f16 or bf16"));
        let mut e4 = vc;
        e4.dtype = DType::E4m3;
        assert!(err(plan_write(&k, &v, &kc, &e4, SLOTS, None)).contains("pools must both be"));
        let mut wide = kc;
        wide.strides[0] += 64;
        wide.bytes += 8 * 64 * 2;
        assert!(err(plan_write(&k, &v, &wide, &vc, SLOTS, None)).contains("must be contiguous"));
        let mut small = vc;
        small.bytes -= 1;
        assert!(
            err(plan_write(&k, &v, &kc, &small, SLOTS, None)).contains("does not fit its buffer")
        );
        assert!(
            err(plan_write(&k, &v, &kc, &vc, (SLOTS.0, 4), None)).contains("at least 5 entries")
        );
        assert!(err(plan_write(&k, &v, &kc, &vc, SLOTS, DS)).contains("take no descales"));
        let (k8, v8, kc8, vc8) = call(DType::E4m3);
        assert!(
            err(plan_write(&k8, &v8, &kc8, &vc8, SLOTS, None)).contains("need a descale per head")
        );
        let short = Some([(6 * MIB, 1), (7 * MIB, 2)]);
        assert!(err(plan_write(&k8, &v8, &kc8, &vc8, SLOTS, short)).contains("at least 2 entries"));
        let mut same = vc;
        same.ptr = kc.ptr + 64;
        assert!(err(plan_write(&k, &v, &kc, &same, SLOTS, None)).contains("pools overlap"));
        let mut onto_k = kc;
        onto_k.ptr = k.ptr;
        assert!(err(plan_write(&k, &v, &onto_k, &vc, SLOTS, None)).contains("overlaps new K"));
        assert!(
            err(plan_write(&k, &v, &kc, &vc, (4 * MIB + 256, 5), None)).contains("overlaps slots")
        );
        let mut odd_page = kc;
        odd_page.shape[1] = 8;
        let mut odd_v = vc;
        odd_v.shape[1] = 8;
        assert!(
            err(plan_write(&k, &v, &odd_page, &odd_v, SLOTS, None)).contains("page_size 16..=256")
        );
        let mut packed = k;
        packed.shape[0] = 2;
        assert!(err(plan_write(&packed, &v, &kc, &vc, SLOTS, None)).contains("packed"));
    }

    #[test]
    fn pools_past_2_31_slots_are_refused_without_wrapping() {
        let (k, v, mut kc, mut vc) = call(DType::F16);
        for p in [&mut kc, &mut vc] {
            p.shape[0] = (1 << 27) + 1; // x 16 tokens > 2^31 slots
            p.bytes = usize::MAX;
        }
        vc.ptr = 1 << 50;
        assert!(err(plan_write(&k, &v, &kc, &vc, SLOTS, None)).contains("2^31 slots"));
    }
}
