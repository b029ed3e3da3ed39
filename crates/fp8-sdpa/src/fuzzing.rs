//! Property checks shared by the cargo-fuzz targets (`fuzz/`) and the property tests
//! (`tests/fuzz_props.rs`): issue 44's fuzzing deliverable. Not part of the library's API.
//!
//! Each `check_*` decodes its bytes into an input ([`Reader`] maps bytes mostly onto values
//! near the limits, and the zero byte onto the common valid choice, so that short inputs make
//! accepted calls, not only rejections), runs the function under test, and, when it accepts,
//! proves the properties with an oracle of its own (128-bit arithmetic, enumeration of what the
//! kernels touch). A check returns whether the input was accepted; it panics only when the
//! function under test panics or an accepted input breaks a property:
//!
//! - every element of Q, K, V, O, the LSE, the descales and the index arrays the kernels touch
//!   lies inside its buffer, and no buffer passes the end of the address space;
//! - O's elements are pairwise distinct, and O and the LSE are disjoint from every input and
//!   from each other (the byte ranges actually touched);
//! - every value the launch path narrows (to i32, i64, u32) fits.

use crate::arch::Arch;
use crate::dtype::{DType, Precision};
use crate::problem::AttnParams;
use crate::runtime::quantize;
use crate::runtime::tensor::TensorDesc;
use crate::runtime::tma;
use crate::runtime::validate::{
    self, CallDesc, DescaleDesc, PagedDesc, Validated, VarlenDesc, MAX_ROWS, MAX_SEQ,
};
use crate::variant::{KernelSpec, Variant};
use std::collections::HashSet;

/// Reads fuzz bytes as choices. Past the end every read is 0, which every generator maps to
/// its most common valid choice.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

/// Sizes where validation's limits and the integer types' edges lie.
const EDGES: [u64; 44] = [
    0,
    1,
    2,
    3,
    7,
    8,
    15,
    16,
    17,
    31,
    32,
    63,
    64,
    65,
    127,
    128,
    255,
    256,
    257,
    4096,
    65535,
    65536,
    (1 << 30) - 1,
    1 << 30,
    (1 << 30) + 1,
    (1 << 31) - 1,
    1 << 31,
    (1 << 31) + 1,
    (1 << 32) - 1,
    1 << 32,
    (1 << 32) + 1,
    1 << 40,
    (1 << 40) + 16,
    1 << 62,
    (1 << 62) + 16,
    (1 << 63) - 1,
    1 << 63,
    (1 << 63) + 16,
    u64::MAX / 2,
    u64::MAX / 3,
    u64::MAX - 255,
    u64::MAX - 15,
    u64::MAX - 1,
    u64::MAX,
];

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    /// The next byte, 0 past the end.
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    /// Whether bytes are left.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.u8() as usize % n
        }
    }

    /// True with probability `n / 256` (false past the end).
    pub fn chance(&mut self, n: u8) -> bool {
        self.u8() >= 255 - (n.saturating_sub(1))
    }

    /// A little-endian u64 from the next 8 bytes.
    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |x, i| x | (self.u8() as u64) << (8 * i))
    }

    /// One of `xs` (the first past the end).
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    /// A value near a limit: an edge, an edge plus or minus a little, or raw bits.
    pub fn edge(&mut self) -> u64 {
        let e = self.pick(&EDGES);
        match self.u8() % 8 {
            0..=4 => e,
            5 => e.wrapping_add(self.u8() as u64),
            6 => e.wrapping_sub(self.u8() as u64),
            _ => self.u64(),
        }
    }

    /// [`Reader::edge`] as a usize (saturating).
    pub fn edge_usize(&mut self) -> usize {
        usize::try_from(self.edge()).unwrap_or(usize::MAX)
    }

    /// A size: mostly small, sometimes a multiple of 16, sometimes near a limit.
    pub fn size(&mut self) -> usize {
        match self.u8() % 8 {
            0..=3 => self.u8() as usize % 65,
            4 => 16 * (self.u8() as usize),
            _ => self.edge_usize(),
        }
    }

    /// An i32 near a limit or small.
    pub fn i32(&mut self) -> i32 {
        match self.u8() % 8 {
            0..=4 => self.u8() as i32 % 40 - 4,
            5 => self.pick(&[i32::MIN, i32::MIN + 1, -1, i32::MAX - 1, i32::MAX, 1 << 30]),
            _ => self.u64() as i32,
        }
    }
}

const DTYPES: [DType; 5] = [
    DType::F16,
    DType::Bf16,
    DType::E4m3,
    DType::SimFp8,
    DType::F32,
];

fn u128_of(x: usize) -> u128 {
    x as u128
}

/// The product of `xs` in 128 bits, saturating (a saturated value passes every 64-bit bound).
fn prod(xs: &[usize]) -> u128 {
    xs.iter().fold(1u128, |n, &x| n.saturating_mul(x as u128))
}

/// The offset (elements) of a tensor's last element, in 128 bits; `None` for an empty shape.
fn last_offset(t: &TensorDesc) -> Option<u128> {
    if t.shape.contains(&0) {
        return None;
    }
    Some((0..4).fold(0u128, |n, i| {
        n.saturating_add(u128_of(t.shape[i] - 1) * u128_of(t.strides[i]))
    }))
}

/// The bytes a tensor's elements span from its pointer, in 128 bits.
fn span_bytes(t: &TensorDesc) -> Option<u128> {
    Some(
        last_offset(t)?
            .saturating_add(1)
            .saturating_mul(t.dtype.size() as u128),
    )
}

const END: u128 = 1 << 64;

/// A byte interval `[start, end)` of device memory in 128 bits (no wrap).
type Iv = (u128, u128);

/// The most intervals one tensor is enumerated into; past it its span stands for it.
const ENUM_LIMIT: u128 = 1 << 13;

/// The byte intervals a tensor's kernel touches: one per row of the head dim when that dim is
/// contiguous, else one per element, or the whole span when there are too many (then
/// `false`: not enumerated).
fn touched(t: &TensorDesc) -> (Vec<Iv>, bool) {
    let es = t.dtype.size() as u128;
    let p = t.ptr as u128;
    let [b, s, h, d] = t.shape.map(u128_of);
    let st = t.strides.map(u128_of);
    let contiguous = st[3] == 1;
    let n = if contiguous {
        prod(&t.shape[..3])
    } else {
        prod(&t.shape)
    };
    if n > ENUM_LIMIT {
        let span = span_bytes(t).unwrap_or(0);
        return (vec![(p, p.saturating_add(span))], false);
    }
    let mut out = Vec::with_capacity(n as usize);
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let row = bi * st[0] + si * st[1] + hi * st[2];
                if contiguous {
                    out.push((p + row * es, p + (row + d) * es));
                } else {
                    for di in 0..d {
                        let e = row + di * st[3];
                        out.push((p + e * es, p + (e + 1) * es));
                    }
                }
            }
        }
    }
    (out, true)
}

/// Whether sorted-by-start intervals are pairwise disjoint.
fn pairwise_disjoint(ivs: &mut [Iv]) -> bool {
    ivs.sort_unstable();
    ivs.windows(2).all(|w| w[1].0 >= w[0].1)
}

/// Whether any interval of `a` meets any of `b` (empty intervals meet nothing).
fn meets(a: &[Iv], b: &[Iv]) -> Option<(Iv, Iv)> {
    let mut b: Vec<Iv> = b.iter().copied().filter(|x| x.1 > x.0).collect();
    b.sort_unstable();
    // The largest end among b's intervals starting at or before each index.
    let mut reach = Vec::with_capacity(b.len());
    let mut m = 0u128;
    for x in &b {
        m = m.max(x.1);
        reach.push(m);
    }
    for &x in a.iter().filter(|x| x.1 > x.0) {
        // b's intervals that start before x ends: one meets x iff its end passes x's start.
        let k = b.partition_point(|y| y.0 < x.1);
        if k > 0 && reach[k - 1] > x.0 {
            let y = b[..k].iter().find(|y| y.1 > x.0).copied().unwrap_or((0, 0));
            return Some((x, y));
        }
    }
    None
}

/// One call as the validate targets generate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// [`validate::validate`].
    Dense,
    /// [`validate::validate_paged`].
    Paged,
    /// [`validate::validate_varlen`].
    Varlen,
    /// [`validate::validate_paged_varlen`].
    PagedVarlen,
}

impl Form {
    fn paged(self) -> bool {
        matches!(self, Form::Paged | Form::PagedVarlen)
    }
    fn varlen(self) -> bool {
        matches!(self, Form::Varlen | Form::PagedVarlen)
    }
}

/// A generated call: the descriptions validation takes.
#[derive(Debug, Clone, Copy)]
pub struct GenCall {
    /// The tensors, LSE, descales and parameters.
    pub call: CallDesc,
    /// The block table and lengths of a paged form.
    pub paged: Option<PagedDesc>,
    /// The offsets of a varlen form (for the paged varlen form, only `cu_seqlens_q` and
    /// `max_seqlen_q` are used).
    pub varlen: Option<VarlenDesc>,
}

/// Element strides for `shape` with the head dim contiguous, the other dims nested in
/// `order` (innermost first), each padded by `pad` elements; saturating at usize::MAX.
fn nested_strides(shape: [usize; 4], order: [usize; 3], pad: [usize; 3]) -> [usize; 4] {
    let mut strides = [0usize; 4];
    strides[3] = 1;
    let mut next = u128_of(shape[3]);
    for (k, &dim) in order.iter().enumerate() {
        let s = next.saturating_add(u128_of(pad[k]));
        strides[dim] = usize::try_from(s).unwrap_or(usize::MAX);
        next = s.saturating_mul(u128_of(shape[dim]));
    }
    strides
}

const ORDERS: [[usize; 3]; 6] = [
    [2, 1, 0], // BSHD
    [1, 2, 0], // BHSD
    [2, 0, 1],
    [0, 2, 1],
    [1, 0, 2], // heads outermost
    [0, 1, 2],
];

/// A tensor of `dtype` and `shape` at address 0 (placed later): BSHD mostly, other nestings,
/// padding and single-field mutations otherwise; its buffer holds its span, or a little more
/// or less, or a size near a limit.
fn gen_tensor(r: &mut Reader, dtype: DType, mut shape: [usize; 4]) -> TensorDesc {
    let order = if r.chance(48) {
        r.pick(&ORDERS)
    } else {
        ORDERS[0]
    };
    let mut pad = [0usize; 3];
    if r.chance(32) {
        for p in &mut pad {
            *p = 8 * r.below(5);
        }
    }
    let mut strides = nested_strides(shape, order, pad);
    if r.chance(24) {
        // One field set to a value near a limit (or a small odd one).
        let i = r.below(4);
        let v = if r.chance(128) {
            r.below(3)
        } else {
            r.edge_usize()
        };
        if r.chance(128) {
            strides[i] = v;
        } else {
            shape[i] = v;
        }
    }
    let t = TensorDesc {
        ptr: 0,
        bytes: 0,
        dtype,
        shape,
        strides,
    };
    let span = span_bytes(&t).unwrap_or(0);
    let span = usize::try_from(span).unwrap_or(usize::MAX);
    let bytes = match r.u8() % 16 {
        0..=12 => span,
        13 => span.saturating_sub(1 + r.below(16)),
        14 => span.saturating_add(16 * r.below(4)),
        _ => r.edge_usize(),
    };
    TensorDesc { bytes, ..t }
}

/// Lays the call's buffers out in the address space (in an order the bytes pick): adjacent
/// after 256-byte alignment mostly, sometimes overlapping the one before, misaligned, or at an
/// address near a limit. `sizes` are the buffers' bytes.
fn place(r: &mut Reader, sizes: &[u64]) -> Vec<u64> {
    let n = sizes.len();
    let mut order: Vec<usize> = (0..n).collect();
    if r.chance(64) {
        for i in (1..n).rev() {
            let j = r.below(i + 1);
            order.swap(i, j);
        }
    }
    let mut ptrs = vec![0u64; n];
    let mut cursor: u64 = if r.chance(16) { r.edge() } else { 1 << 20 };
    let mut prev = cursor;
    for &i in &order {
        let aligned = cursor.checked_add(255).map_or(cursor, |c| c & !255);
        let p = match r.u8() % 32 {
            0..=25 => aligned,
            26 => prev.wrapping_add(16 * r.below(8) as u64), // overlaps the previous buffer
            27 => aligned.wrapping_add(r.pick(&[2, 4, 8])),
            28 => aligned.wrapping_add(16),
            29 => aligned.wrapping_sub(16),
            _ => r.edge() & !15,
        };
        ptrs[i] = p;
        prev = p;
        cursor = p.saturating_add(sizes[i]);
    }
    ptrs
}

/// A call of the given form.
pub fn gen_call(r: &mut Reader, form: Form) -> GenCall {
    // Types: a precision path mostly, any four types otherwise.
    let (dq, dk, dv, d_o) = if r.chance(24) {
        (
            r.pick(&DTYPES),
            r.pick(&DTYPES),
            r.pick(&DTYPES),
            r.pick(&DTYPES),
        )
    } else {
        let p = r.pick(&Precision::ALL);
        (p.q(), p.kv(), p.kv(), p.out())
    };
    // Sizes: small mostly, near the limits otherwise.
    let big = r.chance(32);
    let sz = |r: &mut Reader, small: usize| {
        if big && r.chance(128) {
            r.edge_usize()
        } else {
            1 + r.below(small)
        }
    };
    // Lengths of about 2^29..2^30 with a few sequences and heads put the rows near 2^31.
    let long = |r: &mut Reader, small: usize| {
        if big && r.chance(128) {
            r.pick(&[
                1 << 30,
                (1 << 30) - 1,
                (1 << 30) + 1,
                1 << 29,
                (1 << 29) + 1,
                715_827_883,
            ])
        } else {
            sz(r, small)
        }
    };
    let batch = sz(r, 4);
    let seq_q = long(r, 24);
    let seq_kv = long(r, 40);
    let heads_kv = sz(r, 3);
    let group = sz(r, 3);
    let heads_q = heads_kv.saturating_mul(group);
    let d = r.pick(&[64, 128, 256, 64, 128, 256, 64, 96]);
    let page_size = r.pick(&[16, 32, 64, 128, 256, 16, 1, 15, 17, 257, 0]);
    let pages = sz(r, 8);
    let max_pages = sz(r, 5);
    let seqs = sz(r, 4);
    let (q_shape, kv_shape) = match form {
        Form::Dense => ([batch, seq_q, heads_q, d], [batch, seq_kv, heads_kv, d]),
        Form::Paged => ([batch, seq_q, heads_q, d], [pages, page_size, heads_kv, d]),
        Form::Varlen => ([1, seq_q, heads_q, d], [1, seq_kv, heads_kv, d]),
        Form::PagedVarlen => ([1, seq_q, heads_q, d], [pages, page_size, heads_kv, d]),
    };
    let mut q = gen_tensor(r, dq, q_shape);
    let mut k = gen_tensor(r, dk, kv_shape);
    let mut v = if r.chance(224) {
        TensorDesc { dtype: dv, ..k }
    } else {
        gen_tensor(r, dv, kv_shape)
    };
    let mut o = if r.chance(224) {
        TensorDesc {
            dtype: d_o,
            bytes: usize::try_from(span_bytes(&TensorDesc { dtype: d_o, ..q }).unwrap_or(0))
                .unwrap_or(usize::MAX),
            ..q
        }
    } else {
        gen_tensor(r, d_o, q_shape)
    };
    // Packed tensors' batch stride is 0 (TensorRef::packed).
    if form.varlen() && r.chance(200) {
        q.strides[0] = 0;
        o.strides[0] = 0;
        if !form.paged() {
            k.strides[0] = 0;
            v.strides[0] = 0;
        }
    }
    // Sequences: the varlen forms' offsets count them, else Q's batch.
    let nseq = if form.varlen() { seqs } else { q.shape[0] };
    let rows = if form.varlen() {
        prod(&[q.shape[2], q.shape[1]])
    } else {
        prod(&[q.shape[0], q.shape[2], q.shape[1]])
    };
    let small_len = |r: &mut Reader, want: u128| -> usize {
        let want = usize::try_from(want).unwrap_or(usize::MAX);
        match r.u8() % 16 {
            0..=12 => want,
            13 => want.wrapping_sub(1),
            14 => want.saturating_add(1),
            _ => r.edge_usize(),
        }
    };
    let lse_len = if r.chance(96) {
        None
    } else {
        Some(small_len(r, rows))
    };
    let mut descales = [None; 3];
    for (i, (dtype, heads)) in [(dq, heads_q), (dk, heads_kv), (dv, heads_kv)]
        .into_iter()
        .enumerate()
    {
        let want = if r.chance(8) {
            !dtype.is_scaled()
        } else {
            dtype.is_scaled()
        };
        if want {
            let bs = if r.chance(128) { heads } else { 0 };
            let bs = if r.chance(8) { r.edge_usize() } else { bs };
            let n = if bs == 0 {
                u128_of(heads)
            } else {
                u128_of(nseq) * u128_of(heads)
            };
            descales[i] = Some(DescaleDesc {
                ptr: 0,
                len: small_len(r, n),
                batch_stride: bs,
            });
        }
    }
    let table_len = small_len(r, u128_of(nseq) * u128_of(max_pages));
    let seqlens_len = small_len(r, u128_of(nseq));
    let cu_len = small_len(r, u128_of(seqs) + 1);
    let cu_k_len = if r.chance(16) {
        small_len(r, u128_of(seqs) + 1)
    } else {
        cu_len
    };
    // Buffers: Q, K, V, O, LSE, 3 descales, then the index arrays of the form.
    let mut sizes = vec![
        q.bytes as u64,
        k.bytes as u64,
        v.bytes as u64,
        o.bytes as u64,
        lse_len.map_or(0, |n| (n as u64).saturating_mul(4)),
    ];
    for ds in &descales {
        sizes.push(ds.map_or(0, |d: DescaleDesc| (d.len as u64).saturating_mul(4)));
    }
    for n in [table_len, seqlens_len, cu_len, cu_k_len] {
        sizes.push((n as u64).saturating_mul(4));
    }
    let ptrs = place(r, &sizes);
    q.ptr = ptrs[0];
    k.ptr = ptrs[1];
    v.ptr = ptrs[2];
    o.ptr = ptrs[3];
    for (i, ds) in descales.iter_mut().enumerate() {
        if let Some(d) = ds {
            d.ptr = ptrs[5 + i];
        }
    }
    let scale = if r.chance(16) {
        r.pick(&[
            0.0,
            -0.5,
            f32::NAN,
            f32::INFINITY,
            f32::MIN_POSITIVE,
            f32::MAX,
        ])
    } else {
        0.125
    };
    let call = CallDesc {
        q,
        k,
        v,
        o,
        lse: lse_len.map(|n| (ptrs[4], n)),
        descales,
        params: AttnParams {
            scale,
            causal: r.chance(128),
        },
    };
    let paged = form.paged().then_some(PagedDesc {
        block_table: (ptrs[8], table_len),
        max_pages,
        seqlens_k: (ptrs[9], seqlens_len),
    });
    let total_q = q.shape[1];
    let total_k = k.shape[1];
    let varlen = form.varlen().then(|| VarlenDesc {
        cu_seqlens_q: (ptrs[10], cu_len),
        cu_seqlens_k: (ptrs[11], cu_k_len),
        max_seqlen_q: if r.chance(16) {
            r.edge_usize()
        } else {
            1 + r.below(total_q)
        },
        max_seqlen_k: if r.chance(16) {
            r.edge_usize()
        } else {
            r.below(total_k.saturating_add(1))
        },
    });
    GenCall {
        call,
        paged,
        varlen,
    }
}

/// Runs the validation of `form` on a generated call.
pub fn run_validate(g: &GenCall, form: Form) -> crate::Result<Validated> {
    match form {
        Form::Dense => validate::validate(&g.call),
        Form::Paged => validate::validate_paged(&g.call, g.paged.as_ref().expect("paged form")),
        Form::Varlen => validate::validate_varlen(&g.call, g.varlen.as_ref().expect("varlen form")),
        Form::PagedVarlen => {
            let vl = g.varlen.expect("varlen form");
            validate::validate_paged_varlen(
                &g.call,
                g.paged.as_ref().expect("paged form"),
                vl.cu_seqlens_q,
                vl.max_seqlen_q,
            )
        }
    }
}

/// Asserts `x` fits the kernels' i32.
fn fits_i32(x: u128, what: &str) {
    assert!(
        x <= i32::MAX as u128,
        "accepted, but {what} = {x} passes i32"
    );
}

/// Asserts the properties of an accepted call (module docs).
pub fn assert_accepted(g: &GenCall, form: Form, v: &Validated) {
    let c = &g.call;
    let (q, k, vv, o) = (&c.q, &c.k, &c.v, &c.o);
    // The problem: a precision path, matching shapes, a supported head dim.
    assert_eq!(Precision::from_types(q.dtype, k.dtype), Some(v.precision));
    assert_eq!(vv.dtype, k.dtype);
    assert_eq!(o.dtype, v.precision.out());
    assert_eq!(o.shape, q.shape);
    assert_eq!(k.shape, vv.shape);
    let s = v.shape;
    assert!([64, 128, 256].contains(&s.head_dim));
    assert_eq!(
        (s.heads_q, s.heads_kv, s.head_dim),
        (q.shape[2], k.shape[2], q.shape[3])
    );
    assert_eq!(k.shape[3], s.head_dim);
    assert!(s.heads_kv > 0 && s.heads_q.is_multiple_of(s.heads_kv));
    assert!(c.params.scale.is_finite() && c.params.scale > 0.0);
    let vl = g.varlen;
    // Sequences and the rows of O and the LSE.
    let seqs = u128_of(s.batch);
    let rows = match vl {
        Some(vl) => {
            assert_eq!(s.batch, vl.batch());
            assert_eq!(s.seq_q, vl.max_seqlen_q);
            assert!(vl.max_seqlen_q >= 1 && vl.max_seqlen_q <= q.shape[1]);
            assert_eq!(q.shape[0], 1, "packed Q");
            u128_of(s.heads_q) * u128_of(q.shape[1])
        }
        None => {
            assert_eq!((s.batch, s.seq_q), (q.shape[0], q.shape[1]));
            prod(&[s.batch, s.heads_q, s.seq_q])
        }
    };
    match (form, g.paged) {
        (Form::Dense, _) => assert_eq!((k.shape[0], s.seq_kv), (s.batch, k.shape[1])),
        (Form::Varlen, _) => {
            let vl = vl.expect("varlen");
            assert_eq!(k.shape[0], 1, "packed K");
            assert_eq!(s.seq_kv, vl.max_seqlen_k);
            assert!(vl.max_seqlen_k <= k.shape[1]);
        }
        (_, Some(p)) => {
            assert!((16..=256).contains(&k.shape[1]), "page size");
            assert_eq!(
                u128_of(s.seq_kv),
                u128_of(p.max_pages) * u128_of(k.shape[1])
            );
        }
        _ => unreachable!("paged forms carry a PagedDesc"),
    }
    // In bounds: each tensor's elements inside its buffer and the address space.
    let mut inputs: Vec<(&str, Vec<Iv>)> = Vec::new();
    for (name, t) in [("Q", q), ("K", k), ("V", vv), ("O", o)] {
        let span = span_bytes(t).expect("accepted tensors are non-empty");
        assert!(
            span <= u128_of(t.bytes),
            "{name} spans {span} bytes, its buffer holds {}",
            t.bytes
        );
        assert!(
            (t.ptr as u128).saturating_add(span) <= END,
            "{name} passes the end of the address space"
        );
        // The launch passes strides as i64 and the kernels index elements with i64 offsets.
        for i in 0..3 {
            assert!(
                t.strides[i] as u128 <= i64::MAX as u128,
                "{name}'s stride {i} passes i64"
            );
        }
        let last = last_offset(t).unwrap_or(0);
        assert!(
            last <= i64::MAX as u128,
            "{name}'s last element offset {last} (elements) passes the kernels' i64"
        );
        if name != "O" {
            inputs.push((name, touched(t).0));
        }
    }
    // The LSE: `rows` floats, 4-byte aligned.
    let lse = c.lse.map(|(ptr, len)| {
        assert!(
            u128_of(len) >= rows,
            "LSE holds {len} floats, the kernels write {rows}"
        );
        assert!(ptr.is_multiple_of(4));
        let end = (ptr as u128).saturating_add(rows.saturating_mul(4));
        assert!(end <= END, "the LSE passes the end of the address space");
        (ptr as u128, end)
    });
    // Descales: present exactly where scaled; index b * stride + h inside.
    let heads = [s.heads_q, s.heads_kv, s.heads_kv];
    for (i, (name, t)) in [("Q", q), ("K", k), ("V", vv)].into_iter().enumerate() {
        match c.descales[i] {
            None => assert!(!t.dtype.is_scaled(), "{name} is scaled but has no descale"),
            Some(d) => {
                assert!(t.dtype.is_scaled(), "{name} takes no descale");
                let h = u128_of(heads[i]);
                let bs = u128_of(d.batch_stride);
                assert!(bs == 0 || bs == h, "descale batch stride {bs}");
                let touched = seqs.saturating_sub(1) * bs + h; // one past the last index read
                assert!(
                    touched <= u128_of(d.len),
                    "{name}'s descale read past its {} values",
                    d.len
                );
                assert!(d.ptr.is_multiple_of(4));
                let end = (d.ptr as u128).saturating_add(touched.saturating_mul(4));
                assert!(end <= END);
                fits_i32(bs, "a descale batch stride");
                // The kernels index b * stride + h in i32.
                fits_i32(touched, "a descale index");
                inputs.push((name, vec![(d.ptr as u128, end)]));
            }
        }
    }
    // Index arrays: the entries the kernels read.
    let mut index = |name: &'static str, (ptr, len): (u64, usize), need: u128| {
        assert!(
            u128_of(len) >= need,
            "{name} holds {len} entries, the kernels read {need}"
        );
        assert!(ptr.is_multiple_of(4), "{name} misaligned");
        let end = (ptr as u128).saturating_add(need.saturating_mul(4));
        assert!(end <= END, "{name} passes the end of the address space");
        inputs.push((name, vec![(ptr as u128, end)]));
    };
    if let Some(p) = g.paged {
        index(
            "the block table",
            p.block_table,
            seqs * u128_of(p.max_pages),
        );
        index("seqlens_k", p.seqlens_k, seqs);
    }
    if let Some(vl) = vl {
        index("cu_seqlens_q", vl.cu_seqlens_q, seqs + 1);
        if form == Form::Varlen {
            index("cu_seqlens_k", vl.cu_seqlens_k, seqs + 1);
        }
    }
    // O's elements pairwise distinct (exactly, when O is small enough to enumerate).
    let (mut o_touched, o_enumerated) = touched(o);
    if o_enumerated {
        assert!(
            pairwise_disjoint(&mut o_touched),
            "O's strides {:?} (shape {:?}) write an element twice",
            o.strides,
            o.shape
        );
    }
    // O and the LSE disjoint from every input and from each other.
    for (name, ivs) in &inputs {
        if let Some((a, b)) = meets(&o_touched, ivs) {
            panic!("O's bytes {a:?} meet {name}'s {b:?}");
        }
        if let Some(l) = lse {
            if let Some((a, b)) = meets(&[l], ivs) {
                panic!("the LSE's bytes {a:?} meet {name}'s {b:?}");
            }
        }
    }
    if let Some(l) = lse {
        assert!(meets(&[l], &o_touched).is_none(), "the LSE meets O");
    }
    // Narrowing: what sdpa_params, the varlen, paged and decode launches pass as i32 / u32.
    for (x, what) in [
        (s.batch, "batch"),
        (s.seq_q, "seq_q"),
        (s.seq_kv, "seq_kv"),
        (s.heads_q, "heads_q"),
        (s.heads_kv, "heads_kv"),
    ] {
        fits_i32(u128_of(x), what);
    }
    assert!(
        s.seq_q <= MAX_SEQ && s.seq_kv <= MAX_SEQ,
        "lengths past 2^30"
    );
    assert!(
        rows <= MAX_ROWS as u128,
        "rows {rows} past the kernels' 32-bit row count"
    );
    assert!(
        s.batch <= 65535 && s.heads_q <= 65535,
        "grid dims past 65535"
    );
    if vl.is_some() {
        fits_i32(u128_of(q.shape[1]), "total_q");
        assert!(q.shape[1] <= MAX_SEQ);
        if form == Form::Varlen {
            fits_i32(u128_of(k.shape[1]), "total_k");
            assert!(k.shape[1] <= MAX_SEQ);
        }
    }
    if let Some(p) = g.paged {
        fits_i32(u128_of(p.max_pages), "max_pages");
        fits_i32(u128_of(k.shape[1]), "page_size");
        fits_i32(u128_of(k.shape[0]), "pages");
    } else {
        assert!(
            k.shape[0] <= 65535 || form == Form::Varlen,
            "K's batch past the grid"
        );
    }
}

/// One validate target: generate a call of `form`, validate it, prove an accepted one.
fn check_form(data: &[u8], form: Form) -> bool {
    let mut r = Reader::new(data);
    let g = gen_call(&mut r, form);
    match run_validate(&g, form) {
        Ok(v) => {
            assert_accepted(&g, form, &v);
            true
        }
        Err(e) => {
            assert!(
                matches!(e, crate::Error::InvalidInput(_)),
                "untyped refusal: {e}"
            );
            false
        }
    }
}

/// [`validate::validate`]: never panics; an accepted call has every property.
pub fn check_validate(data: &[u8]) -> bool {
    check_form(data, Form::Dense)
}

/// [`validate::validate_paged`].
pub fn check_validate_paged(data: &[u8]) -> bool {
    check_form(data, Form::Paged)
}

/// [`validate::validate_varlen`].
pub fn check_validate_varlen(data: &[u8]) -> bool {
    check_form(data, Form::Varlen)
}

/// [`validate::validate_paged_varlen`].
pub fn check_validate_paged_varlen(data: &[u8]) -> bool {
    check_form(data, Form::PagedVarlen)
}

/// An offset array: the prefix sums of small lengths mostly, then a mutation or two.
fn gen_offsets(r: &mut Reader) -> Vec<i32> {
    let n = if r.chance(16) {
        r.below(12)
    } else {
        2 + r.below(5)
    };
    let mut cu = Vec::with_capacity(n);
    let mut at = 0i32;
    for i in 0..n {
        if i > 0 {
            at = at.saturating_add(r.below(20) as i32);
        }
        cu.push(at);
    }
    while r.chance(40) && !cu.is_empty() {
        let i = r.below(cu.len());
        cu[i] = r.i32();
    }
    cu
}

/// The longest sequence of offsets that are valid for `total` tokens (independently of the
/// checks under test), or `None`.
pub fn oracle_offsets(cu: &[i32], total: usize) -> Option<usize> {
    if cu.first() != Some(&0) || cu.last().map(|&x| x as i128) != Some(total as i128) {
        return None;
    }
    let mut longest = 0i128;
    for w in cu.windows(2) {
        let len = w[1] as i128 - w[0] as i128;
        if len < 0 {
            return None;
        }
        longest = longest.max(len);
    }
    Some(longest as usize)
}

/// A total or maximum for offsets `cu`: the true one mostly, off by one or an edge otherwise.
fn near(r: &mut Reader, exact: i128) -> usize {
    let exact = usize::try_from(exact.max(0)).unwrap_or(0);
    match r.u8() % 16 {
        0..=11 => exact,
        12 => exact.wrapping_sub(1),
        13 => exact + 1,
        _ => r.edge_usize(),
    }
}

/// [`validate::check_cu_seqlens`] and [`validate::check_cu_seqlens_q`]: never panic; what they
/// accept starts at 0, never decreases, ends at the total, and has no sequence longer than the
/// maximum, and the returned longest is the true one.
pub fn check_cu_seqlens(data: &[u8]) -> bool {
    let mut r = Reader::new(data);
    let (cq, ck) = (gen_offsets(&mut r), gen_offsets(&mut r));
    let longest = |cu: &[i32]| {
        cu.windows(2)
            .map(|w| w[1] as i128 - w[0] as i128)
            .max()
            .unwrap_or(0)
    };
    let last = |cu: &[i32]| cu.last().map_or(0, |&x| x as i128);
    let totals = [near(&mut r, last(&cq)), near(&mut r, last(&ck))];
    let maxes = [near(&mut r, longest(&cq)), near(&mut r, longest(&ck))];
    let both = validate::check_cu_seqlens(&cq, &ck, totals, maxes);
    let q_only = validate::check_cu_seqlens_q(&cq, totals[0], maxes[0]);
    if let Ok(lq) = q_only {
        let truth = oracle_offsets(&cq, totals[0]).expect("accepted invalid query offsets");
        assert_eq!(lq, truth, "wrong longest query sequence");
        assert!(lq <= maxes[0]);
    }
    match both {
        Ok((lq, lk)) => {
            for (cu, total, max, got) in [
                (&cq, totals[0], maxes[0], lq),
                (&ck, totals[1], maxes[1], lk),
            ] {
                let truth = oracle_offsets(cu, total).expect("accepted invalid offsets");
                assert_eq!(got, truth, "wrong longest sequence");
                assert!(got <= max, "a sequence longer than the maximum");
                fits_i32(u128_of(total), "a token total");
            }
            assert!(
                q_only.is_ok(),
                "the query check refused what the pair check accepted"
            );
            true
        }
        Err(_) => false,
    }
}

/// [`validate::check_page_table`]: never panics; what it accepts has every length within the
/// table's capacity and every entry a sequence uses a page of the caches, and returns the
/// longest length.
pub fn check_page_table(data: &[u8]) -> bool {
    let mut r = Reader::new(data);
    let page_size = if r.chance(32) {
        r.size()
    } else {
        r.pick(&[16, 1, 2, 3, 32, 64, 128, 256])
    };
    let max_pages = if r.chance(16) {
        r.size()
    } else {
        1 + r.below(5)
    };
    let pages = if r.chance(16) {
        r.size()
    } else {
        1 + r.below(12)
    };
    let seqs = r.below(5);
    let mut lens: Vec<i32> = (0..seqs)
        .map(|_| {
            let cap = max_pages.saturating_mul(page_size).min(i32::MAX as usize);
            r.below(cap.min(255) + 1) as i32
        })
        .collect();
    let mut table: Vec<i32> = (0..seqs.saturating_mul(max_pages.min(64)))
        .map(|_| r.below(pages.min(255)) as i32)
        .collect();
    while r.chance(48) {
        if r.chance(128) && !lens.is_empty() {
            let i = r.below(lens.len());
            lens[i] = r.i32();
        } else if !table.is_empty() {
            let i = r.below(table.len());
            table[i] = r.i32();
        } else {
            table.truncate(r.below(4));
        }
    }
    if r.chance(16) {
        table.truncate(r.below(table.len() + 1));
    }
    let got = validate::check_page_table(&table, &lens, max_pages, page_size, pages);
    let Ok(longest) = got else { return false };
    let cap = u128_of(max_pages) * u128_of(page_size);
    let mut truth = 0usize;
    for (b, &n) in lens.iter().enumerate() {
        assert!(n >= 0 && n as u128 <= cap, "seqlens_k[{b}] = {n} accepted");
        truth = truth.max(n as usize);
        let used = (n as u128).div_ceil(u128_of(page_size.max(1)));
        for i in 0..used {
            let at = u128_of(b) * u128_of(max_pages) + i;
            let e = usize::try_from(at)
                .ok()
                .and_then(|at| table.get(at))
                .copied();
            assert!(
                e.is_some_and(|e| e >= 0 && (e as usize) < pages),
                "block_table[{b}][{i}] = {e:?} accepted for {pages} pages"
            );
        }
    }
    assert_eq!(longest, truth, "wrong longest sequence");
    true
}

/// A tensor for the quantizer and the TMA encoder: any type mostly f16/bf16, small shapes or
/// edges, any address.
fn gen_loose_tensor(r: &mut Reader) -> TensorDesc {
    let dtype = if r.chance(32) {
        r.pick(&DTYPES)
    } else {
        r.pick(&[DType::F16, DType::Bf16, DType::E4m3])
    };
    let mut shape = [
        1 + r.below(3),
        1 + r.below(40),
        1 + r.below(5),
        r.pick(&[64, 128, 256, 8, 1]),
    ];
    if r.chance(32) {
        let i = r.below(4);
        shape[i] = r.edge_usize();
    }
    let mut t = gen_tensor(r, dtype, shape);
    t.ptr = if r.chance(32) {
        r.edge()
    } else {
        0x1000 * (1 + r.below(16) as u64) + r.pick(&[0, 0, 0, 2, 8, 16])
    };
    t
}

/// [`quantize::plan`]: never panics; an accepted input lies inside its buffer and the address
/// space, the outputs hold what the kernels write, and every narrowed size fits.
pub fn check_quantize_plan(data: &[u8]) -> bool {
    let mut r = Reader::new(data);
    let t = gen_loose_tensor(&mut r);
    let elems = prod(&t.shape);
    let pairs = u128_of(t.shape[0]) * u128_of(t.shape[2]);
    let mut len = |want: u128| {
        let want = usize::try_from(want).unwrap_or(usize::MAX);
        match r.u8() % 8 {
            0..=5 => want,
            6 => want.wrapping_sub(1),
            _ => r.edge_usize(),
        }
    };
    let (codes, descales) = (len(elems), len(pairs));
    let Ok(plan) = quantize::plan(&t, codes, descales) else {
        return false;
    };
    assert!(matches!(t.dtype, DType::F16 | DType::Bf16));
    assert_eq!(t.strides[3], 1);
    let span = span_bytes(&t).expect("accepted input is non-empty");
    assert!(
        span <= u128_of(t.bytes),
        "input spans {span} bytes, buffer {}",
        t.bytes
    );
    assert!((t.ptr as u128).saturating_add(span) <= END);
    assert!(u128_of(codes) >= elems && u128_of(descales) >= pairs);
    for i in 0..4 {
        assert_eq!(
            plan.dims[i] as u128,
            u128_of(t.shape[i]),
            "dims narrowed lossily"
        );
        fits_i32(u128_of(t.shape[i]), "a dim");
    }
    // The launch: grid y = batch * heads as u32 (at most 65535), strides as i64, s * dim as u64.
    assert!(pairs <= 65535);
    // quantize_e4m3 passes every stride as an i64, a dim of extent 1's too.
    for i in 0..3 {
        assert!(
            t.strides[i] as u128 <= i64::MAX as u128,
            "stride {i} passes i64"
        );
    }
    assert!(last_offset(&t).unwrap_or(0) <= i64::MAX as u128);
    assert!(u128_of(t.shape[1]) * u128_of(t.shape[3]) <= u64::MAX as u128);
    true
}

/// [`tma::tma_unfit`] and [`tma::dims_and_strides`]: never panic; a tensor found fit is
/// 16-byte aligned with its head dim contiguous, and its map's strides are multiples of 16
/// bytes below 2^40 (each a longer dim's true byte stride) and dims its shape.
pub fn check_tma(data: &[u8]) -> bool {
    let mut r = Reader::new(data);
    let t = gen_loose_tensor(&mut r);
    let unfit = tma::tma_unfit("T", &t);
    let es = t.dtype.size() as u128;
    let (dims, strides) = tma::dims_and_strides(&t);
    if unfit.is_some() {
        return false;
    }
    assert!(t.ptr.is_multiple_of(16));
    assert_eq!(t.strides[3], 1);
    let [b, s, h, d] = t.shape.map(|x| x as u64);
    assert_eq!(dims, [d, s, h, b]);
    for (k, dim) in [1usize, 2, 0].into_iter().enumerate() {
        let st = strides[k];
        assert!(st.is_multiple_of(16) && st < 1 << 40, "map stride {st}");
        if t.shape[dim] > 1 {
            // A broadcast dim (stride 0) keeps its 0; the driver decides whether it takes it.
            assert_eq!(
                st as u128,
                u128_of(t.strides[dim]) * es,
                "stride of dim {dim} changed"
            );
        } else {
            assert!(
                st >= 16,
                "a dim of extent 1 gets a stride TMA takes, got {st}"
            );
        }
    }
    true
}

/// [`validate::span`] and [`validate::one_to_one`] on any small tensor: the span is the
/// 128-bit one (or `None` exactly when that passes 64 bits or a dim is 0), and a tensor found
/// one-to-one addresses each element once (enumerated).
pub fn check_span_one_to_one(data: &[u8]) -> bool {
    let mut r = Reader::new(data);
    let dtype = r.pick(&DTYPES);
    let mut shape = [0usize; 4];
    let mut strides = [0usize; 4];
    for i in 0..4 {
        shape[i] = if r.chance(16) {
            r.edge_usize()
        } else {
            r.below(6) + usize::from(i != 3)
        };
        strides[i] = if r.chance(24) {
            r.edge_usize()
        } else {
            r.below(40)
        };
    }
    let t = TensorDesc {
        ptr: if r.chance(32) { r.edge() } else { 0x1000 },
        bytes: 0,
        dtype,
        shape,
        strides,
    };
    let got = validate::span(&t);
    // Representable exactly when the 128-bit span ends within 64 bits (every partial sum of
    // the offsets is at most the total, so none overflows where the total does not).
    let want = span_bytes(&t)
        .map(|n| (t.ptr as u128).saturating_add(n))
        .filter(|&end| end <= u64::MAX as u128)
        .map(|end| (t.ptr, end as u64));
    assert_eq!(got, want, "span of {t:?}");
    let one = validate::one_to_one(&t);
    let n = prod(&shape);
    if one && n > 0 && n <= 4096 {
        let mut seen = HashSet::with_capacity(n as usize);
        for b in 0..shape[0] {
            for s in 0..shape[1] {
                for h in 0..shape[2] {
                    for d in 0..shape[3] {
                        let e = u128_of(b) * u128_of(strides[0])
                            + u128_of(s) * u128_of(strides[1])
                            + u128_of(h) * u128_of(strides[2])
                            + u128_of(d) * u128_of(strides[3]);
                        assert!(
                            seen.insert(e),
                            "one_to_one accepted {shape:?} {strides:?}: element {e} twice"
                        );
                    }
                }
            }
        }
    }
    one
}

const FAMILIES: [&str; 6] = ["portable", "hopper", "decode", "reference", "Portable", ""];
const FLAG_CHARS: &[u8] = b"ctfwhrpogeldx-0123456789zW.";

/// A variant key: well-formed fields mostly, edited or raw text otherwise.
fn gen_key(r: &mut Reader) -> String {
    if r.chance(24) {
        return String::from_utf8_lossy(r.rest()).into_owned();
    }
    let num = |r: &mut Reader, common: &[u32]| -> String {
        match r.u8() % 16 {
            0..=12 => r.pick(common).to_string(),
            13 => r
                .pick(&["", "007", "+4", "-1", "4294967296", "99999999999", " 4"])
                .to_string(),
            _ => (r.edge() as u32).to_string(),
        }
    };
    let mut fields = vec![
        r.pick(&FAMILIES).to_string(),
        format!("m{}", num(r, &[64, 128, 16, 192, 32, 4])),
        format!("n{}", num(r, &[64, 128, 32, 16, 256, 176])),
        format!("w{}", num(r, &[4, 8, 12, 16, 1, 2])),
        format!("s{}", num(r, &[2, 1, 3, 4])),
        format!("b{}", num(r, &[1, 2, 8])),
    ];
    let canonical = [
        "ctlx", "w4ex", "w4pex", "cex", "-", "ctfdx", "ctrlx", "w4ogex", "ctex", "ctdx",
    ];
    let mut flags = r.pick(&canonical).to_string();
    while r.chance(40) {
        let c = r.pick(FLAG_CHARS) as char;
        let at = r.below(flags.len() + 1);
        flags.insert(at, c);
    }
    fields.push(flags);
    if r.chance(8) {
        let i = r.below(fields.len());
        fields.remove(i);
    }
    fields.join(".")
}

/// `Variant::from_str`, `Variant::validate` and `KernelSpec::validate`: never panic; an
/// accepted key is the variant's own key and parses back to it; a spec that validates has a
/// key of the variant's and its shared memory and defines are computed without a panic.
pub fn check_variant(data: &[u8]) -> bool {
    let mut r = Reader::new(data);
    let key = gen_key(&mut r);
    let Ok(v) = key.parse::<Variant>() else {
        return false;
    };
    assert_eq!(v.key(), key, "accepted key is not canonical");
    assert_eq!(
        v.key().parse::<Variant>().ok(),
        Some(v),
        "key does not round-trip"
    );
    if v.validate().is_err() {
        return true;
    }
    for _ in 0..4 {
        let spec = KernelSpec {
            variant: v,
            precision: r.pick(&Precision::ALL),
            head_dim: r.pick(&[64, 128, 256, 96, 0, u32::MAX]),
            causal: r.chance(128),
        };
        let arch = r.pick(&Arch::ALL);
        if spec.validate(arch).is_ok() {
            assert!(spec.key().starts_with(&format!("{}/", v.key())));
            let _ = spec.dynamic_smem_bytes();
            let _ = spec.defines();
            let _ = v.register_budget();
        }
    }
    true
}

/// The tuned-table parser ([`crate::tuned::TunedTable::parse`]): never panics; an accepted
/// table re-serializes to text that parses back to the same entries, with no class listed
/// twice. Bytes either spell a table from valid and invalid pieces (so that tables are
/// accepted often) or are parsed as text themselves.
pub fn check_tuned_table(data: &[u8]) -> bool {
    use crate::tuned::{TunedEntry, TunedTable};
    let mut r = Reader::new(data);
    let text = if r.chance(200) {
        let n = r.below(5);
        let entries: Vec<TunedEntry> = (0..n)
            .map(|_| TunedEntry {
                arch: r.pick(&["sm_90a", "sm_80", "sm_89", "sm_99"]).into(),
                precision: r.pick(&["f16", "bf16", "fp8kv_f16", "fp8", "f32"]).into(),
                head_dim: r.pick(&[64, 128, 256, 96, 0]),
                shape_class: r.pick(&["prefill", "causal", "decode", "x"]).into(),
                bucket: r
                    .pick(&[
                        None,
                        Some("short"),
                        Some("long"),
                        Some("small-paged"),
                        Some("?"),
                    ])
                    .map(String::from),
                variant: r
                    .pick(&[
                        "hopper.m128.n128.w12.s2.b1.w4pogex",
                        "hopper.m128.n128.w12.s2.b1.w4ogex",
                        "portable.m128.n64.w4.s2.b2.ctlx",
                        "decode.m16.n64.w4.s3.b2.cex",
                        "portable.m64.n64.w4.s2.b1.cz",
                    ])
                    .into(),
                tflops: r.chance(128).then_some(1.5),
                note: None,
            })
            .collect();
        let json = serde_json::json!({ "entries": entries }).to_string();
        if r.chance(32) {
            // Cut or corrupt it somewhere.
            let at = r.below(json.len() + 1);
            json[..at].to_string()
        } else {
            json
        }
    } else {
        String::from_utf8_lossy(r.rest()).into_owned()
    };
    let Ok(table) = TunedTable::parse(&text) else {
        return false;
    };
    let again = TunedTable::parse(&table.to_json()).expect("a parsed table's own text parses");
    assert_eq!(
        again.entries(),
        table.entries(),
        "round trip changed the table"
    );
    let mut seen = std::collections::HashSet::new();
    for e in table.entries() {
        assert!(
            seen.insert((&e.arch, &e.precision, e.head_dim, &e.shape_class, &e.bucket)),
            "an accepted table lists a class twice"
        );
    }
    true
}

/// The kernel cache's entry decoder ([`crate::compile::cache::decode_entry`]): never panics;
/// an entry decodes only under the key it was written for, and only whole: another key, any
/// changed byte or any truncation is refused.
pub fn check_cache_entry(data: &[u8]) -> bool {
    use crate::compile::cache::{decode_entry, encode_entry};
    let mut r = Reader::new(data);
    let key = r.pick(&["abc", "sm_90a-0123456789abcdef", "k", ""]);
    if !r.chance(160) {
        // Raw bytes under some key.
        let _ = decode_entry(r.rest(), key);
        return false;
    }
    let meta_len = r.below(40);
    let rest = r.rest();
    let (meta, cubin) = rest.split_at(meta_len.min(rest.len()));
    let meta = String::from_utf8_lossy(meta).into_owned();
    let Some(entry) = encode_entry(key, &meta, cubin) else {
        return false;
    };
    let (m, c) = decode_entry(&entry, key).expect("an entry decodes under its own key");
    assert_eq!((m, c), (meta.as_str(), cubin));
    for other in ["abd", "ab", "sm_90a-0123456789abcdee"] {
        if other != key {
            assert!(
                decode_entry(&entry, other).is_err(),
                "decoded under {other}"
            );
        }
    }
    let mut bad = entry.clone();
    let at = (data.len() * 7919) % bad.len();
    bad[at] ^= 1 + (data.len() as u8 % 255);
    assert!(
        decode_entry(&bad, key).is_err(),
        "a changed byte was accepted"
    );
    assert!(decode_entry(&entry[..entry.len() - 1], key).is_err());
    true
}
