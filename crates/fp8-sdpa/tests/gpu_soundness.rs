//! GPU tests of the safe API's soundness under hostile input (issue 44): borrows made on one
//! stream and used on another, and the quantizer's indexing past 2^31 codes. Run on the
//! device machine with `--include-ignored`; without a GPU they fail, never skip.

use fp8_sdpa::runtime::quantize::quantize_e4m3;
use fp8_sdpa::runtime::{
    Attention, AttentionVarlen, CallOptions, Descale, Device, IdxRef, PagedAttention, PagedKv,
    TensorMut, TensorRef, VecRef,
};
use fp8_sdpa::{AttnParams, DType, Error, Layout};

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

fn expect_stream_error(r: fp8_sdpa::Result<fp8_sdpa::runtime::Launched>, who: &str) {
    match r {
        Err(Error::InvalidInput(m)) => assert!(
            m.contains(who) && m.contains("borrowed on stream"),
            "expected {who}'s stream to be named: {m}"
        ),
        other => panic!("a borrow from another stream was accepted: {other:?}"),
    }
}

/// A tensor borrowed on stream A and passed to a call on stream B used to be accepted: the
/// kernel raced A's writes and the completion event was recorded on A. Every call now refuses
/// it, naming the borrow; the same call with every borrow on B runs.
#[test]
#[ignore = "needs a GPU"]
fn a_borrow_from_another_stream_is_refused() {
    let dev = device();
    let (a, b) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
    let shape = [2, 64, 4, 64];
    let n = 2 * 64 * 4 * 64;
    let q = b.alloc_zeros::<u16>(n).unwrap();
    let k = b.alloc_zeros::<u16>(n).unwrap();
    let v = b.alloc_zeros::<u16>(n).unwrap();
    let mut o = b.alloc_zeros::<u16>(n).unwrap();
    let params = AttnParams::default_for(64, true);
    let dense = |k_on, o: &mut _| {
        let call = Attention::new(
            TensorRef::contiguous(&q, &b, DType::F16, shape, Layout::Bshd).unwrap(),
            TensorRef::contiguous(&k, k_on, DType::F16, shape, Layout::Bshd).unwrap(),
            TensorRef::contiguous(&v, &b, DType::F16, shape, Layout::Bshd).unwrap(),
            TensorMut::contiguous(o, &b, DType::F16, shape, Layout::Bshd).unwrap(),
            params,
        );
        dev.attention(&b, &call, CallOptions::default())
    };
    expect_stream_error(dense(&a, &mut o), "K");
    dense(&b, &mut o).unwrap();
    b.synchronize().unwrap();

    // Varlen: an offsets array borrowed on A.
    let cu = b.clone_htod(&[0i32, 64, 128]).unwrap();
    let packed = [128, 4, 64];
    let call = AttentionVarlen::new(
        TensorRef::packed(&q, &b, DType::F16, packed).unwrap(),
        TensorRef::packed(&k, &b, DType::F16, packed).unwrap(),
        TensorRef::packed(&v, &b, DType::F16, packed).unwrap(),
        TensorMut::packed(&mut o, &b, DType::F16, packed).unwrap(),
        [IdxRef::new(&cu, &b), IdxRef::new(&cu, &a)],
        [64, 64],
        params,
    );
    expect_stream_error(
        dev.attention_varlen(&b, &call, CallOptions::default()),
        "cu_seqlens_k",
    );
    drop(call);

    // Paged: the block table borrowed on A (the host read-back would read it unordered too).
    let pool = [8, 16, 4, 64]; // 8 pages of 16 tokens
    let table = b
        .clone_htod(&(0..16).map(|i| i % 8).collect::<Vec<i32>>())
        .unwrap();
    let lens = b.clone_htod(&[100i32, 17]).unwrap();
    let dq = [2, 1, 4, 64];
    let mut o1 = b.alloc_zeros::<u16>(2 * 4 * 64).unwrap();
    let mut paged = |table_on| {
        let call = PagedAttention::new(
            TensorRef::contiguous(&q, &b, DType::F16, dq, Layout::Bshd).unwrap(),
            PagedKv::new(
                TensorRef::contiguous(&k, &b, DType::F16, pool, Layout::Bshd).unwrap(),
                TensorRef::contiguous(&v, &b, DType::F16, pool, Layout::Bshd).unwrap(),
                IdxRef::new(&table, table_on),
                8,
                IdxRef::new(&lens, &b),
            ),
            TensorMut::contiguous(&mut o1, &b, DType::F16, dq, Layout::Bshd).unwrap(),
            AttnParams::default_for(64, false),
        );
        dev.paged_attention(&b, &call, CallOptions::default())
            .map(|l| l.spec.key())
    };
    match paged(&a) {
        Err(Error::InvalidInput(m)) => assert!(m.contains("the block table"), "{m}"),
        other => panic!("a block table from another stream was accepted: {other:?}"),
    }
    paged(&b).unwrap();
    b.synchronize().unwrap();
}

/// The four calls share one `CallCommon`, so a paged call has a Q descale field although its
/// Q is fp16/bf16: one set there is refused by validation, never silently dropped; without it
/// the same call runs.
#[test]
#[ignore = "needs a GPU"]
fn a_paged_call_refuses_a_q_descale() {
    let dev = device();
    let st = dev.new_stream().unwrap();
    let pool = [8, 16, 4, 64]; // 8 pages of 16 tokens
    let dq = [2, 1, 4, 64];
    let q = st.alloc_zeros::<u16>(2 * 4 * 64).unwrap();
    let k = st.alloc_zeros::<u16>(8 * 16 * 4 * 64).unwrap();
    let v = st.alloc_zeros::<u16>(8 * 16 * 4 * 64).unwrap();
    let table = st
        .clone_htod(&(0..16).map(|i| i % 8).collect::<Vec<i32>>())
        .unwrap();
    let lens = st.clone_htod(&[100i32, 17]).unwrap();
    let ds = st.clone_htod(&[1.0f32; 4]).unwrap();
    let mut o = st.alloc_zeros::<u16>(2 * 4 * 64).unwrap();
    let mut call = PagedAttention::new(
        TensorRef::contiguous(&q, &st, DType::F16, dq, Layout::Bshd).unwrap(),
        PagedKv::new(
            TensorRef::contiguous(&k, &st, DType::F16, pool, Layout::Bshd).unwrap(),
            TensorRef::contiguous(&v, &st, DType::F16, pool, Layout::Bshd).unwrap(),
            IdxRef::new(&table, &st),
            8,
            IdxRef::new(&lens, &st),
        ),
        TensorMut::contiguous(&mut o, &st, DType::F16, dq, Layout::Bshd).unwrap(),
        AttnParams::default_for(64, false),
    );
    call.common.q_descale = Some(Descale::new(VecRef::new(&ds, &st), 0));
    match dev.paged_attention(&st, &call, CallOptions::default()) {
        Err(Error::InvalidInput(m)) => {
            assert!(m.contains("Q is f16, which takes no descale"), "{m}")
        }
        other => panic!("a paged call's Q descale was accepted: {other:?}"),
    }
    call.common.q_descale = None;
    dev.paged_attention(&st, &call, CallOptions::default())
        .unwrap();
    drop(call);
    st.synchronize().unwrap();
}

/// The quantizer computed `b * seq` in 32 bits: a broadcast input of shape [3, 2^30, 1, 1]
/// wrote codes 2 GiB before its output and faulted. Every code must now land in place.
#[test]
#[ignore = "needs a GPU (and 3 GiB of its memory)"]
fn the_quantizer_writes_past_2_31_codes_in_place() {
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let (batch, seq) = (3usize, 1usize << 30);
    // One fp16 value (1.5), broadcast over batch and seq by zero strides.
    let x = stream
        .clone_htod(&[half::f16::from_f32(1.5).to_bits()])
        .unwrap();
    let xr = TensorRef::new(&x, &stream, DType::F16, [batch, seq, 1, 1], [0, 0, 0, 1]).unwrap();
    let mut codes = stream.alloc_zeros::<u8>(batch * seq).unwrap();
    let mut descales = stream.alloc_zeros::<f32>(batch).unwrap();
    quantize_e4m3(&dev, &stream, &xr, &mut codes, &mut descales).unwrap();
    drop(xr);
    stream.synchronize().unwrap();
    let ds = stream.clone_dtoh(&descales).unwrap();
    let want_ds = 1.5f32 / 448.0;
    assert!(ds.iter().all(|&d| d == want_ds), "{ds:?}");
    let want = fp8_sdpa::fp8::e4m3::encode_scaled(1.5, want_ds);
    let host = stream.clone_dtoh(&codes).unwrap();
    if let Some(i) = host.iter().position(|&c| c != want) {
        panic!("code {i} is {:#x}, expected {want:#x}", host[i]);
    }
}
