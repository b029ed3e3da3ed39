//! Tensor maps for the Hopper family's TMA copies: each of Q, K, V (loads) and O (stores) as a
//! 4-d tiled map over (dim, seq, head, batch), innermost first, in boxes of 128 bytes of the
//! head dim (the 128-byte swizzle's row; 64 bytes for 8-bit D64) by `rows` sequence positions.
//! Mirrors `hopper_parts.cuh`'s `HopperMaps`.

use super::tensor::TensorDesc;
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::sys;
use cudarc::driver::DeviceRepr;

/// Four encoded `CUtensorMap`s (128 opaque bytes each), passed by value as the kernel's
/// second `__grid_constant__` parameter.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct HopperMaps {
    /// Q's map, boxes of 64 x `tile_m`.
    pub q: [u64; 16],
    /// K's map, boxes of 64 x `tile_n`.
    pub k: [u64; 16],
    /// V's map, boxes of 64 x `tile_n`.
    pub v: [u64; 16],
    /// O's map, boxes of 64 x 64 (one consumer warpgroup's rows), for the TMA-store epilogue.
    pub o: [u64; 16],
}

// SAFETY: plain-old-data with C layout, mirrored by the CUDA struct; passed by value.
unsafe impl DeviceRepr for HopperMaps {}

/// Why a tensor cannot be read by TMA, or `None` when it can: the address must be 16-byte
/// aligned and every stride a multiple of 16 bytes (TMA's rules), the head dim contiguous.
pub fn tma_unfit(name: &str, t: &TensorDesc) -> Option<String> {
    let es = t.dtype.size() as u64;
    if !t.ptr.is_multiple_of(16) {
        return Some(format!(
            "{name}'s address {:#x} is not 16-byte aligned",
            t.ptr
        ));
    }
    if t.strides[3] != 1 {
        return Some(format!("{name}'s head dim is not contiguous"));
    }
    for (i, what) in [(0, "batch"), (1, "sequence"), (2, "head")] {
        let bytes = (t.strides[i] as u64).checked_mul(es);
        if t.shape[i] > 1 && !bytes.is_some_and(|b| b.is_multiple_of(16) && b < 1 << 40) {
            return Some(format!(
                "{name}'s {what} stride is {} elements of {es} bytes, not a multiple of 16 bytes \
                 below 2^40",
                t.strides[i]
            ));
        }
    }
    None
}

/// The pure part of a map's encoding: dims (innermost first: dim, seq, head, batch) and the
/// byte strides of seq, head and batch. A dim of extent 1 may have any stride in the tensor;
/// TMA still wants a multiple of 16 bytes below 2^40, so it gets its own rounded up to 16,
/// or 16 (it never addresses anything).
/// Call after [`tma_unfit`] returned `None`: every stride of a longer dim is then valid.
pub fn dims_and_strides(t: &TensorDesc) -> ([u64; 4], [u64; 3]) {
    let es = t.dtype.size() as u64;
    let [b, s, h, d] = t.shape.map(|x| x as u64);
    let stride = |i: usize| {
        let bytes = (t.strides[i] as u64).checked_mul(es);
        match bytes {
            Some(b) if t.shape[i] > 1 => b,
            // Rounded up to 16 bytes, as short as TMA allows.
            Some(b) => b
                .div_ceil(16)
                .max(1)
                .checked_mul(16)
                .filter(|&r| r < 1 << 40)
                .unwrap_or(16),
            None => 16,
        }
    };
    ([d, s, h, b], [stride(1), stride(2), stride(0)])
}

/// Encodes one tensor's map: boxes of 128 bytes of the head dim (64 16-bit or 128 8-bit
/// columns; the whole 64-byte row of an 8-bit D64 tensor) x `rows` positions, swizzled to
/// match (128-byte, or 64-byte for 64-byte rows), out-of-bounds elements read as zeros.
pub fn encode(name: &str, t: &TensorDesc, rows: u32) -> Result<[u64; 16]> {
    if let Some(why) = tma_unfit(name, t) {
        return Err(Error::InvalidInput(format!(
            "{why}; the hopper family reads and writes by TMA: use tensors with 16-byte aligned rows, or \
             the portable family (--variant)"
        )));
    }
    let data_type = match t.dtype {
        DType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::E4m3 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        other => {
            return Err(Error::Unsupported(format!(
                "the hopper family's tensor maps take fp16, bf16 or E4M3, not {}",
                other.name()
            )))
        }
    };
    let es = t.dtype.size() as u64;
    let inner = (128 / es).min(t.shape[3] as u64) as u32;
    let swizzle = if inner as u64 * es == 128 {
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B
    } else {
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B
    };
    let (dims, strides) = dims_and_strides(t);
    let boxes = [inner, rows, 1, 1];
    let elem_strides = [1u32; 4];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every pointer refers to a live local array of the length the call reads (rank 4:
    // 4 dims, 3 strides, 4 box sizes, 4 element strides); `map` is a valid, aligned
    // CUtensorMap. The call only encodes; it reads no device memory.
    let rc = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            4,
            t.ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::Unsupported(format!(
            "cuTensorMapEncodeTiled refused {name} (shape {:?}, strides {:?} elements, box {inner} \
             x {rows}): {rc:?}",
            t.shape, t.strides
        )));
    }
    Ok(map.opaque)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(ptr: u64, strides: [usize; 4]) -> TensorDesc {
        TensorDesc {
            ptr,
            bytes: 1 << 20,
            dtype: DType::F16,
            shape: [2, 100, 4, 64],
            strides,
        }
    }

    #[test]
    fn layout_matches_the_cuda_struct() {
        assert_eq!(std::mem::size_of::<HopperMaps>(), 512);
        assert_eq!(std::mem::align_of::<HopperMaps>(), 64);
    }

    #[test]
    fn tma_rules_are_checked() {
        assert!(tma_unfit("q", &desc(0x1000, [25600, 256, 64, 1])).is_none());
        assert!(tma_unfit("q", &desc(0x1008, [25600, 256, 64, 1]))
            .unwrap()
            .contains("aligned"));
        // A head stride of 60 elements (120 bytes) is not a multiple of 16 bytes.
        assert!(tma_unfit("k", &desc(0x1000, [24000, 240, 60, 1]))
            .unwrap()
            .contains("head stride"));
    }
}
