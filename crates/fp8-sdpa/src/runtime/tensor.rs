//! Borrowed device tensors: a device pointer with dtype, logical shape and strides. Built from
//! cudarc slices; the slice stays borrowed (and its stream ordering recorded) while the
//! reference lives, so the launch that uses it is ordered after prior writes.
//!
//! # Streams
//!
//! A borrow is ordered on the stream it was made with, and only there: cudarc makes that
//! stream wait for the slice's earlier work when the borrow is made, and records the slice's
//! completion event on it when the borrow ends. A launch on another stream would race both.
//! So every call checks that each of its borrows was made on the call's own stream and
//! refuses any other with [`Error::InvalidInput`]: borrow every tensor of a call on the
//! stream you pass to the call (make that stream wait on an event first if the data was
//! written elsewhere).
//!
//! cudarc keeps one read event per slice, the last reader's. A slice read by calls on two
//! streams and then written or dropped is ordered after the later reader's stream only, so
//! before writing or dropping it make the writer's (or the slice's own) stream wait on every
//! stream that read it, or synchronize them (docs/SECURITY.md, "Streams").

use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop};
use std::marker::PhantomData;

/// The stream a borrow was ordered on, by its driver handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamId(usize);

impl StreamId {
    pub(crate) fn of(stream: &CudaStream) -> StreamId {
        StreamId(stream.cu_stream() as usize)
    }
}

/// Checks that every borrow of a call (`(name, stream)`) was made on `launch`, the stream the
/// call runs on: see the module's "Streams".
pub(crate) fn check_streams<'n>(
    launch: &CudaStream,
    borrows: impl IntoIterator<Item = (&'n str, StreamId)>,
) -> Result<()> {
    let on = StreamId::of(launch);
    for (name, s) in borrows {
        if s != on {
            return Err(Error::InvalidInput(format!(
                "{name} was borrowed on stream {:#x} but the call runs on stream {:#x}; a \
                 borrow is ordered only on its own stream, so borrow every tensor of a call on \
                 the stream passed to the call (after making that stream wait for the data's \
                 writer)",
                s.0, on.0
            )));
        }
    }
    Ok(())
}

/// What validation needs to know of a tensor: no borrow, so it can be tested without a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorDesc {
    /// Device address of element (0, 0, 0, 0).
    pub ptr: u64,
    /// Bytes available from `ptr`.
    pub bytes: usize,
    /// Element type.
    pub dtype: DType,
    /// Logical shape (batch, seq, heads, dim).
    pub shape: [usize; 4],
    /// Element strides of those dims.
    pub strides: [usize; 4],
}

/// A read-only 4-d tensor `[batch, seq, heads, dim]` (logical order) on the device. Borrow it
/// on the stream of the call that reads it (the module's "Streams" says why).
///
/// ```no_run
/// # fn main() -> fp8_sdpa::Result<()> {
/// use fp8_sdpa::runtime::{Device, TensorRef};
/// use fp8_sdpa::{DType, Layout};
/// let dev = Device::open(0)?;
/// let stream = dev.new_stream()?;
/// let (batch, seq, heads, dim) = (2, 512, 8, 128);
/// let buf = stream.alloc_zeros::<u16>(batch * seq * heads * dim).unwrap(); // f16 bits
/// // Contiguous, heads before sequence (BHSD): the layout sets the strides.
/// let k = TensorRef::contiguous(&buf, &stream, DType::F16, [batch, seq, heads, dim], Layout::Bhsd)?;
/// # drop(k);
/// // The same buffer seen with explicit element strides (here BSHD).
/// let strides = [seq * heads * dim, heads * dim, dim, 1];
/// let k = TensorRef::new(&buf, &stream, DType::F16, [batch, seq, heads, dim], strides)?;
/// # drop(k);
/// // A variable-length batch's packed [total_tokens, heads, dim].
/// let k = TensorRef::packed(&buf, &stream, DType::F16, [batch * seq, heads, dim])?;
/// # drop(k);
/// # Ok(())
/// # }
/// ```
pub struct TensorRef<'a> {
    pub(crate) desc: TensorDesc,
    pub(crate) stream: StreamId,
    _sync: SyncOnDrop<'a>,
}

/// A writable 4-d tensor (the output) on the device, borrowed on the call's stream.
pub struct TensorMut<'a> {
    pub(crate) desc: TensorDesc,
    pub(crate) stream: StreamId,
    _sync: SyncOnDrop<'a>,
    _mut: PhantomData<&'a mut ()>,
}

/// A read-only fp32 vector on the device (descales).
pub struct VecRef<'a> {
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    pub(crate) stream: StreamId,
    _sync: SyncOnDrop<'a>,
}

/// A read-only i32 vector on the device (a paged cache's block table and sequence lengths, a
/// variable-length batch's offsets).
pub struct IdxRef<'a> {
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    pub(crate) stream: StreamId,
    _sync: SyncOnDrop<'a>,
}

impl<'a> IdxRef<'a> {
    /// An i32 vector.
    pub fn new<S: DevicePtr<i32>>(slice: &'a S, stream: &'a CudaStream) -> IdxRef<'a> {
        let len = slice.len();
        let (ptr, sync) = slice.device_ptr(stream);
        IdxRef {
            ptr,
            len,
            stream: StreamId::of(stream),
            _sync: sync,
        }
    }
}

/// A writable fp32 vector on the device (log-sum-exp).
pub struct VecMut<'a> {
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    pub(crate) stream: StreamId,
    _sync: SyncOnDrop<'a>,
}

fn storage_check<T>(dtype: DType) -> Result<()> {
    let t = std::mem::size_of::<T>();
    if t != dtype.size() && t != 1 {
        return Err(Error::InvalidInput(format!(
            "a {} tensor needs {}-byte elements (or a byte buffer), got a slice of {t}-byte elements",
            dtype,
            dtype.size()
        )));
    }
    Ok(())
}

impl<'a> TensorRef<'a> {
    /// Describes `slice` as a tensor of `dtype` with logical `shape` (batch, seq, heads, dim)
    /// and element `strides` for those four dims. The slice may hold elements of the dtype's
    /// size or raw bytes.
    pub fn new<T: DeviceRepr, S: DevicePtr<T>>(
        slice: &'a S,
        stream: &'a CudaStream,
        dtype: DType,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Result<TensorRef<'a>> {
        storage_check::<T>(dtype)?;
        let bytes = slice.num_bytes();
        let (ptr, sync) = slice.device_ptr(stream);
        Ok(TensorRef {
            desc: TensorDesc {
                ptr,
                bytes,
                dtype,
                shape,
                strides,
            },
            stream: StreamId::of(stream),
            _sync: sync,
        })
    }

    /// A contiguous tensor in the given layout.
    pub fn contiguous<T: DeviceRepr, S: DevicePtr<T>>(
        slice: &'a S,
        stream: &'a CudaStream,
        dtype: DType,
        shape: [usize; 4],
        layout: crate::Layout,
    ) -> Result<TensorRef<'a>> {
        let [b, s, h] = layout.strides(shape[1], shape[2], shape[3]);
        Self::new(slice, stream, dtype, shape, [b, s, h, 1])
    }
}

impl<'a> TensorRef<'a> {
    /// A packed tensor `[total_tokens, heads, dim]` of a variable-length batch
    /// ([`super::AttentionVarlen`]), contiguous: token stride `heads * dim`, head stride `dim`.
    pub fn packed<T: DeviceRepr, S: DevicePtr<T>>(
        slice: &'a S,
        stream: &'a CudaStream,
        dtype: DType,
        [tokens, heads, dim]: [usize; 3],
    ) -> Result<TensorRef<'a>> {
        Self::packed_strided(
            slice,
            stream,
            dtype,
            [tokens, heads, dim],
            [heads * dim, dim],
        )
    }

    /// A packed tensor `[total_tokens, heads, dim]` with element strides `[token, head]` (the
    /// head dim is contiguous), e.g. Q, K or V sliced out of one packed QKV buffer.
    pub fn packed_strided<T: DeviceRepr, S: DevicePtr<T>>(
        slice: &'a S,
        stream: &'a CudaStream,
        dtype: DType,
        [tokens, heads, dim]: [usize; 3],
        [token_stride, head_stride]: [usize; 2],
    ) -> Result<TensorRef<'a>> {
        // One "batch" of all the tokens: the sequences are cut out by the offsets.
        Self::new(
            slice,
            stream,
            dtype,
            [1, tokens, heads, dim],
            [0, token_stride, head_stride, 1],
        )
    }
}

impl TensorRef<'_> {
    /// The plain description.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }
}

impl<'a> TensorRef<'a> {
    /// A tensor in memory owned elsewhere, by device address (`desc.ptr`, with `desc.bytes`
    /// readable from it), ordered on `stream`. For a packed varlen tensor pass shape
    /// `[1, tokens, heads, dim]` and strides `[0, token, head, 1]`.
    ///
    /// # Safety
    /// The module's "Memory owned elsewhere" contract, for reading.
    pub unsafe fn from_raw(desc: TensorDesc, stream: &'a CudaStream) -> TensorRef<'a> {
        TensorRef {
            desc,
            stream: StreamId::of(stream),
            // Nothing to record: the caller orders the memory (the contract).
            _sync: SyncOnDrop::Sync(None),
        }
    }
}

impl<'a> TensorMut<'a> {
    /// Like [`TensorRef::from_raw`], for the output.
    ///
    /// # Safety
    /// The module's "Memory owned elsewhere" contract, for writing.
    pub unsafe fn from_raw(desc: TensorDesc, stream: &'a CudaStream) -> TensorMut<'a> {
        TensorMut {
            desc,
            stream: StreamId::of(stream),
            _sync: SyncOnDrop::Sync(None),
            _mut: PhantomData,
        }
    }
}

impl<'a> VecRef<'a> {
    /// `len` fp32 values at device address `ptr` owned elsewhere (descales).
    ///
    /// # Safety
    /// The module's "Memory owned elsewhere" contract, for reading `len * 4` bytes.
    pub unsafe fn from_raw(ptr: u64, len: usize, stream: &'a CudaStream) -> VecRef<'a> {
        VecRef {
            ptr,
            len,
            stream: StreamId::of(stream),
            _sync: SyncOnDrop::Sync(None),
        }
    }
}

impl<'a> VecMut<'a> {
    /// `len` writable fp32 values at device address `ptr` owned elsewhere (log-sum-exp).
    ///
    /// # Safety
    /// The module's "Memory owned elsewhere" contract, for writing `len * 4` bytes.
    pub unsafe fn from_raw(ptr: u64, len: usize, stream: &'a CudaStream) -> VecMut<'a> {
        VecMut {
            ptr,
            len,
            stream: StreamId::of(stream),
            _sync: SyncOnDrop::Sync(None),
        }
    }
}

impl<'a> IdxRef<'a> {
    /// `len` i32 values at device address `ptr` owned elsewhere (offsets, block table,
    /// sequence lengths).
    ///
    /// # Safety
    /// The module's "Memory owned elsewhere" contract, for reading `len * 4` bytes.
    pub unsafe fn from_raw(ptr: u64, len: usize, stream: &'a CudaStream) -> IdxRef<'a> {
        IdxRef {
            ptr,
            len,
            stream: StreamId::of(stream),
            _sync: SyncOnDrop::Sync(None),
        }
    }
}

impl TensorMut<'_> {
    /// The plain description.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }
}

impl<'a> TensorMut<'a> {
    /// Like [`TensorRef::new`], for the output.
    pub fn new<T: DeviceRepr, S: DevicePtrMut<T>>(
        slice: &'a mut S,
        stream: &'a CudaStream,
        dtype: DType,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Result<TensorMut<'a>> {
        storage_check::<T>(dtype)?;
        let bytes = slice.num_bytes();
        let (ptr, sync) = slice.device_ptr_mut(stream);
        Ok(TensorMut {
            desc: TensorDesc {
                ptr,
                bytes,
                dtype,
                shape,
                strides,
            },
            stream: StreamId::of(stream),
            _sync: sync,
            _mut: PhantomData,
        })
    }

    /// A contiguous output in the given layout.
    pub fn contiguous<T: DeviceRepr, S: DevicePtrMut<T>>(
        slice: &'a mut S,
        stream: &'a CudaStream,
        dtype: DType,
        shape: [usize; 4],
        layout: crate::Layout,
    ) -> Result<TensorMut<'a>> {
        let [b, s, h] = layout.strides(shape[1], shape[2], shape[3]);
        Self::new(slice, stream, dtype, shape, [b, s, h, 1])
    }

    /// A packed output `[total_tokens, heads, dim]`, contiguous (see [`TensorRef::packed`]).
    pub fn packed<T: DeviceRepr, S: DevicePtrMut<T>>(
        slice: &'a mut S,
        stream: &'a CudaStream,
        dtype: DType,
        [tokens, heads, dim]: [usize; 3],
    ) -> Result<TensorMut<'a>> {
        Self::packed_strided(
            slice,
            stream,
            dtype,
            [tokens, heads, dim],
            [heads * dim, dim],
        )
    }

    /// A packed output with element strides `[token, head]` (see
    /// [`TensorRef::packed_strided`]).
    pub fn packed_strided<T: DeviceRepr, S: DevicePtrMut<T>>(
        slice: &'a mut S,
        stream: &'a CudaStream,
        dtype: DType,
        [tokens, heads, dim]: [usize; 3],
        [token_stride, head_stride]: [usize; 2],
    ) -> Result<TensorMut<'a>> {
        Self::new(
            slice,
            stream,
            dtype,
            [1, tokens, heads, dim],
            [0, token_stride, head_stride, 1],
        )
    }
}

impl<'a> VecRef<'a> {
    /// An fp32 vector.
    pub fn new<S: DevicePtr<f32>>(slice: &'a S, stream: &'a CudaStream) -> VecRef<'a> {
        let len = slice.len();
        let (ptr, sync) = slice.device_ptr(stream);
        VecRef {
            ptr,
            len,
            stream: StreamId::of(stream),
            _sync: sync,
        }
    }
}

impl<'a> VecMut<'a> {
    /// A writable fp32 vector.
    pub fn new<S: DevicePtrMut<f32>>(slice: &'a mut S, stream: &'a CudaStream) -> VecMut<'a> {
        let len = slice.len();
        let (ptr, sync) = slice.device_ptr_mut(stream);
        VecMut {
            ptr,
            len,
            stream: StreamId::of(stream),
            _sync: sync,
        }
    }
}

impl TensorRef<'_> {
    pub(crate) fn on(&self, name: &'static str) -> (&'static str, StreamId) {
        (name, self.stream)
    }
}

impl TensorMut<'_> {
    pub(crate) fn on(&self, name: &'static str) -> (&'static str, StreamId) {
        (name, self.stream)
    }
}

impl IdxRef<'_> {
    pub(crate) fn on(&self, name: &'static str) -> (&'static str, StreamId) {
        (name, self.stream)
    }
}
