//! `Device::write_paged_kv` on the GPU: new tokens land in exactly their slots of fp16, bf16
//! and E4M3 pools (E4M3 bit for bit the host codec's `encode_scaled`), padding slots (-1) and
//! every other slot stay untouched, a slot past the pools is refused when checked and skipped
//! when not. Run on the device machine with `--include-ignored`; without a GPU they fail,
//! never skip.

use fp8_sdpa::fp8::e4m3;
use fp8_sdpa::runtime::{
    CallOptions, Descale, Device, IdxRef, PagedKvWrite, TensorMut, TensorRef, VecRef,
};
use fp8_sdpa::{DType, Layout};
use half::{bf16, f16};

const TOKENS: usize = 5;
const HEADS: usize = 2;
const PAGES: usize = 6;
const PAGE: usize = 16;
/// Head dims: 128 takes the kernel's 16-byte path, 36 (not a multiple of 8) its scalar one.
const DIMS: [usize; 2] = [128, 36];
/// The last slot of the pools, the first, a padding slot and two in between.
const SLOTS: [i32; TOKENS] = [17, (PAGES * PAGE - 1) as i32, -1, 0, 40];

fn device() -> Device {
    Device::open(0).expect("these tests need a GPU (run them on the device machine)")
}

/// Deterministic values in [-3, 3).
fn values(seed: u32, row: usize) -> Vec<f32> {
    (0..TOKENS * row)
        .map(|i| {
            let x = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            (x % 6000) as f32 / 1000.0 - 3.0
        })
        .collect()
}

/// Writes 16-bit tokens (`to_bits` picks f16 or bf16) into pools of the same type filled with
/// `fill`, reads them back, and checks every row.
fn write_16bit(dtype: DType, to_bits: fn(f32) -> u16, fill: u16, dim: usize) {
    let row = HEADS * dim;
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let (kh, vh) = (values(1, row), values(2, row));
    let kb: Vec<u16> = kh.iter().map(|&x| to_bits(x)).collect();
    let vb: Vec<u16> = vh.iter().map(|&x| to_bits(x)).collect();
    let k = stream.clone_htod(&kb).unwrap();
    let v = stream.clone_htod(&vb).unwrap();
    let mut kc = stream.clone_htod(&vec![fill; PAGES * PAGE * row]).unwrap();
    let mut vc = stream.clone_htod(&vec![fill; PAGES * PAGE * row]).unwrap();
    let slots = stream.clone_htod(&SLOTS).unwrap();
    let pool = [PAGES, PAGE, HEADS, dim];
    {
        let w = PagedKvWrite::new(
            TensorRef::packed(&k, &stream, dtype, [TOKENS, HEADS, dim]).unwrap(),
            TensorRef::packed(&v, &stream, dtype, [TOKENS, HEADS, dim]).unwrap(),
            TensorMut::contiguous(&mut kc, &stream, dtype, pool, Layout::Bshd).unwrap(),
            TensorMut::contiguous(&mut vc, &stream, dtype, pool, Layout::Bshd).unwrap(),
            IdxRef::new(&slots, &stream),
        );
        dev.write_paged_kv(&stream, &w, CallOptions::default())
            .unwrap();
    }
    let (kp, vp) = (
        stream.clone_dtoh(&kc).unwrap(),
        stream.clone_dtoh(&vc).unwrap(),
    );
    for slot in 0..PAGES * PAGE {
        let at = |p: &[u16]| p[slot * row..(slot + 1) * row].to_vec();
        match SLOTS.iter().position(|&s| s == slot as i32) {
            Some(t) => {
                assert_eq!(
                    at(&kp),
                    kb[t * row..(t + 1) * row],
                    "{dtype}: K token {t} at slot {slot}"
                );
                assert_eq!(
                    at(&vp),
                    vb[t * row..(t + 1) * row],
                    "{dtype}: V token {t} at slot {slot}"
                );
            }
            None => {
                assert!(
                    at(&kp).iter().all(|&x| x == fill),
                    "{dtype}: K slot {slot} was written"
                );
                assert!(
                    at(&vp).iter().all(|&x| x == fill),
                    "{dtype}: V slot {slot} was written"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run on the device machine with --include-ignored"]
fn sixteen_bit_tokens_land_in_exactly_their_slots() {
    for dim in DIMS {
        write_16bit(DType::F16, |x| f16::from_f32(x).to_bits(), 0x7777, dim);
        write_16bit(DType::Bf16, |x| bf16::from_f32(x).to_bits(), 0x7777, dim);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run on the device machine with --include-ignored"]
fn e4m3_pools_get_the_host_codecs_codes_and_bad_slots_never_land() {
    for dim in DIMS {
        write_e4m3(dim);
    }
}

fn write_e4m3(dim: usize) {
    let row = HEADS * dim;
    let dev = device();
    let stream = dev.new_stream().unwrap();
    // Head 1's descale makes |x| up to 3 saturate (3 / 0.005 = 600 > 448).
    let ds = [0.01f32, 0.005];
    let (kh, vh) = (values(3, row), values(4, row));
    let bits = |x: &[f32]| {
        x.iter()
            .map(|&x| f16::from_f32(x).to_bits())
            .collect::<Vec<u16>>()
    };
    let k = stream.clone_htod(&bits(&kh)).unwrap();
    let v = stream.clone_htod(&bits(&vh)).unwrap();
    let kd = stream.clone_htod(&ds).unwrap();
    let vd = stream.clone_htod(&ds).unwrap();
    let fill = 0x55u8;
    let mut kc = stream.clone_htod(&vec![fill; PAGES * PAGE * row]).unwrap();
    let mut vc = stream.clone_htod(&vec![fill; PAGES * PAGE * row]).unwrap();
    let pool = [PAGES, PAGE, HEADS, dim];
    let run = |slots: &[i32], check: bool, kc: &mut _, vc: &mut _| {
        let slots = stream.clone_htod(slots).unwrap();
        let w = PagedKvWrite::new(
            TensorRef::packed(&k, &stream, DType::F16, [TOKENS, HEADS, dim]).unwrap(),
            TensorRef::packed(&v, &stream, DType::F16, [TOKENS, HEADS, dim]).unwrap(),
            TensorMut::contiguous(kc, &stream, DType::E4m3, pool, Layout::Bshd).unwrap(),
            TensorMut::contiguous(vc, &stream, DType::E4m3, pool, Layout::Bshd).unwrap(),
            IdxRef::new(&slots, &stream),
        )
        .with_descales(
            Descale::per_head(VecRef::new(&kd, &stream)),
            Descale::per_head(VecRef::new(&vd, &stream)),
        );
        let r = dev.write_paged_kv(
            &stream,
            &w,
            CallOptions::default().with_check_descales(check),
        );
        stream.synchronize().unwrap();
        r
    };
    run(&SLOTS, true, &mut kc, &mut vc).unwrap();
    let (kp, vp) = (
        stream.clone_dtoh(&kc).unwrap(),
        stream.clone_dtoh(&vc).unwrap(),
    );
    let want = |x: &[f32], t: usize| -> Vec<u8> {
        (0..row)
            .map(|i| e4m3::encode_scaled(f16::from_f32(x[t * row + i]).to_f32(), ds[i / dim]))
            .collect()
    };
    for slot in 0..PAGES * PAGE {
        let at = |p: &[u8]| p[slot * row..(slot + 1) * row].to_vec();
        match SLOTS.iter().position(|&s| s == slot as i32) {
            Some(t) => {
                assert_eq!(at(&kp), want(&kh, t), "K token {t} at slot {slot}");
                assert_eq!(at(&vp), want(&vh, t), "V token {t} at slot {slot}");
            }
            None => assert!(
                at(&kp).iter().chain(&at(&vp)).all(|&c| c == fill),
                "slot {slot} was written"
            ),
        }
    }
    // Saturation: head 1 of some token holds |x| > 448 * 0.005 = 2.24.
    assert!(
        kp.contains(&0x7e) || kp.contains(&0xfe),
        "no saturated code"
    );
    // A slot past the pools: refused when checked, skipped (nothing written) when not.
    let past = [(PAGES * PAGE) as i32, -1, -1, -1, i32::MAX];
    let e = run(&past, true, &mut kc, &mut vc)
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("slots[0] = 96 is past the pools' 96 slots"),
        "{e}"
    );
    run(&past, false, &mut kc, &mut vc).unwrap();
    assert_eq!(
        stream.clone_dtoh(&kc).unwrap(),
        kp,
        "an unchecked past-the-pool slot was written"
    );
    assert_eq!(stream.clone_dtoh(&vc).unwrap(), vp);
}
