//! Tensors taken duck-typed (no link to torch): anything with `data_ptr()`, `shape`,
//! `stride()`, `dtype` and `device` (torch.Tensor's attributes), mapped to the library's
//! descriptions. FlashAttention's layouts are the library's logical BSHD order already:
//! `(batch, seqlen, nheads, headdim)`, and packed `(total_tokens, nheads, headdim)` for varlen.

use fp8_sdpa::runtime::validate::DescaleDesc;
use fp8_sdpa::runtime::TensorDesc;
use fp8_sdpa::DType;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Element types the bindings take, by torch's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// An attention dtype of the library (f16, bf16, e4m3; f32 for LSE and descales).
    Lib(DType),
    /// int32 (offsets, block tables, sequence lengths).
    I32,
}

impl Elem {
    /// Maps torch's dtype name (`torch.bfloat16` or `bfloat16`) to an element type.
    pub fn from_torch(name: &str) -> Option<Elem> {
        let n = name.strip_prefix("torch.").unwrap_or(name);
        Some(match n {
            "float16" | "half" => Elem::Lib(DType::F16),
            "bfloat16" => Elem::Lib(DType::Bf16),
            "float8_e4m3fn" => Elem::Lib(DType::E4m3),
            "float32" | "float" => Elem::Lib(DType::F32),
            "int32" | "int" => Elem::I32,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::Lib(d) => d.size(),
            Elem::I32 => 4,
        }
    }

    /// torch's name of the type.
    pub fn torch_name(self) -> &'static str {
        match self {
            Elem::Lib(DType::F16) => "float16",
            Elem::Lib(DType::Bf16) => "bfloat16",
            Elem::Lib(DType::E4m3) => "float8_e4m3fn",
            Elem::Lib(DType::F32) => "float32",
            // Never produced by from_torch: the seeds' simulated FP8 has no torch dtype.
            Elem::Lib(DType::SimFp8) => "uint8",
            Elem::I32 => "int32",
        }
    }
}

/// A tensor argument as read from Python.
#[derive(Debug, Clone)]
pub struct Arg {
    /// The argument's name, for messages.
    pub name: &'static str,
    /// Device address of element 0.
    pub ptr: u64,
    /// Element type.
    pub elem: Elem,
    /// Sizes.
    pub shape: Vec<usize>,
    /// Element strides (torch's are never negative).
    pub strides: Vec<usize>,
    /// The CUDA device index, when the tensor names one.
    pub device: Option<usize>,
}

fn bad<T>(msg: String) -> PyResult<T> {
    Err(PyValueError::new_err(msg))
}

impl Arg {
    /// Reads `obj`'s duck-typed attributes. Refuses a tensor that is not on a CUDA device and
    /// a dtype the library has no use for.
    pub fn read(name: &'static str, obj: &Bound<'_, PyAny>) -> PyResult<Arg> {
        let device = obj.getattr("device")?;
        let kind: String = device.getattr("type")?.extract()?;
        if kind != "cuda" {
            return bad(format!(
                "{name} is on device '{}', not a CUDA device; move it to the GPU (.cuda())",
                device.str()?
            ));
        }
        let index: Option<usize> = device.getattr("index")?.extract()?;
        let dtype = obj.getattr("dtype")?.str()?.to_string();
        let Some(elem) = Elem::from_torch(&dtype) else {
            return bad(format!(
                "{name} has dtype {dtype}; fp8-sdpa takes float16, bfloat16 and float8_e4m3fn \
                 tensors (float32 descales, int32 offsets and tables)"
            ));
        };
        let shape: Vec<usize> = obj.getattr("shape")?.extract()?;
        let strides: Vec<isize> = obj.call_method0("stride")?.extract()?;
        let strides = strides
            .into_iter()
            .map(|s| usize::try_from(s).ok())
            .collect::<Option<Vec<usize>>>();
        let Some(strides) = strides.filter(|s| s.len() == shape.len()) else {
            return bad(format!(
                "{name}'s strides must be non-negative, one per dim (shape {shape:?})"
            ));
        };
        let ptr: u64 = obj.call_method0("data_ptr")?.extract()?;
        Ok(Arg {
            name,
            ptr,
            elem,
            shape,
            strides,
            device: index,
        })
    }

    /// Reads an optional argument.
    pub fn opt(name: &'static str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Arg>> {
        obj.filter(|o| !o.is_none())
            .map(|o| Arg::read(name, o))
            .transpose()
    }

    /// Bytes from the first element to past the last (0 for an empty tensor).
    pub fn span_bytes(&self) -> PyResult<usize> {
        if self.shape.contains(&0) {
            return Ok(0);
        }
        let mut last = 0usize;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            last = (n - 1)
                .checked_mul(s)
                .and_then(|x| x.checked_add(last))
                .ok_or_else(|| self.overflow())?;
        }
        last.checked_add(1)
            .and_then(|n| n.checked_mul(self.elem.size()))
            .ok_or_else(|| self.overflow())
    }

    fn overflow(&self) -> PyErr {
        PyValueError::new_err(format!(
            "{}'s shape {:?} and strides {:?} exceed the address space",
            self.name, self.shape, self.strides
        ))
    }

    /// The element count.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn lib_dtype(&self) -> PyResult<DType> {
        match self.elem {
            Elem::Lib(d) if d != DType::F32 => Ok(d),
            e => bad(format!(
                "{} has dtype {}; attention tensors are float16, bfloat16 or float8_e4m3fn",
                self.name,
                e.torch_name()
            )),
        }
    }

    /// A 4-d attention tensor `(batch, seqlen, nheads, headdim)`, FlashAttention's layout,
    /// as the library's BSHD description (same dims, same strides).
    pub fn bshd(&self) -> PyResult<TensorDesc> {
        let dtype = self.lib_dtype()?;
        let (Ok(shape), Ok(strides)) = (
            <[usize; 4]>::try_from(self.shape.as_slice()),
            <[usize; 4]>::try_from(self.strides.as_slice()),
        ) else {
            return bad(format!(
                "{} must be 4-d (batch, seqlen, nheads, headdim) like FlashAttention's, got \
                 shape {:?}",
                self.name, self.shape
            ));
        };
        Ok(TensorDesc {
            ptr: self.ptr,
            bytes: self.span_bytes()?,
            dtype,
            shape,
            strides,
        })
    }

    /// A packed 3-d tensor `(total_tokens, nheads, headdim)` (varlen), as the library's
    /// one-batch BSHD description `[1, total, heads, dim]`.
    pub fn packed(&self) -> PyResult<TensorDesc> {
        let dtype = self.lib_dtype()?;
        let (Ok([t, h, d]), Ok([st, sh, sd])) = (
            <[usize; 3]>::try_from(self.shape.as_slice()),
            <[usize; 3]>::try_from(self.strides.as_slice()),
        ) else {
            return bad(format!(
                "{} of a varlen call must be 3-d (total_tokens, nheads, headdim) like \
                 FlashAttention's, got shape {:?}",
                self.name, self.shape
            ));
        };
        Ok(TensorDesc {
            ptr: self.ptr,
            bytes: self.span_bytes()?,
            dtype,
            shape: [1, t, h, d],
            strides: [0, st, sh, sd],
        })
    }

    /// Whether the elements are packed row-major with no gaps (dims of extent 1 aside).
    pub fn is_row_major(&self) -> bool {
        let mut want = 1usize;
        for (&n, &s) in self.shape.iter().zip(&self.strides).rev() {
            if n != 1 && s != want {
                return false;
            }
            want = want.saturating_mul(n);
        }
        true
    }

    fn contiguous_of(&self, elem: Elem, what: &str) -> PyResult<(u64, usize)> {
        if self.elem != elem {
            return bad(format!(
                "{} must be {} ({what}), got {}",
                self.name,
                elem.torch_name(),
                self.elem.torch_name()
            ));
        }
        if !self.is_row_major() {
            return bad(format!(
                "{} must be contiguous (shape {:?}, strides {:?}); pass .contiguous()",
                self.name, self.shape, self.strides
            ));
        }
        Ok((self.ptr, self.numel()))
    }

    /// A contiguous int32 array as (address, entries).
    pub fn idx(&self) -> PyResult<(u64, usize)> {
        self.contiguous_of(Elem::I32, "an index array")
    }

    /// A contiguous float32 output vector (LSE) as (address, entries).
    pub fn f32_vec(&self) -> PyResult<(u64, usize)> {
        self.contiguous_of(Elem::Lib(DType::F32), "fp32")
    }

    /// A descale: float32 `(nheads,)` (per head), `(batch, nheads)` (per batch and head,
    /// FlashAttention 3's shape), or `(1, nheads)` or `(batch, nheads)` expanded from
    /// `(nheads,)` (per head, broadcast over the batch).
    pub fn descale(&self) -> PyResult<DescaleDesc> {
        if self.elem != Elem::Lib(DType::F32) {
            return bad(format!(
                "{} must be float32, got {}",
                self.name,
                self.elem.torch_name()
            ));
        }
        let fix = || {
            bad(format!(
                "{} must be float32 (nheads,) or (batch, nheads) with a contiguous last dim, got \
                 shape {:?} strides {:?}",
                self.name, self.shape, self.strides
            ))
        };
        match (self.shape.as_slice(), self.strides.as_slice()) {
            (&[n], &[s]) if s == 1 || n == 1 => Ok(DescaleDesc {
                ptr: self.ptr,
                len: n,
                batch_stride: 0,
            }),
            (&[b, n], &[sb, sn]) if sn == 1 || n == 1 => {
                // One row, or a row broadcast over the batch: per head.
                if sb == 0 || b == 1 {
                    Ok(DescaleDesc {
                        ptr: self.ptr,
                        len: n,
                        batch_stride: 0,
                    })
                } else if sb == n {
                    Ok(DescaleDesc {
                        ptr: self.ptr,
                        len: b * n,
                        batch_stride: n,
                    })
                } else {
                    fix()
                }
            }
            _ => fix(),
        }
    }
}

/// The one CUDA device of a call's tensors: `default` (torch's current device) where none
/// names an index; two different indices are an error.
pub fn one_device(args: &[&Arg], default: usize) -> PyResult<usize> {
    let mut seen: Option<(&str, usize)> = None;
    for a in args {
        if let Some(i) = a.device {
            match seen {
                Some((n, j)) if j != i => {
                    return bad(format!(
                        "{n} is on cuda:{j} but {} on cuda:{i}; put every tensor of a call on \
                         one GPU",
                        a.name
                    ))
                }
                Some(_) => {}
                None => seen = Some((a.name, i)),
            }
        }
    }
    Ok(seen.map_or(default, |s| s.1))
}

/// Device addresses for validating a call before its outputs exist: each `take` hands out a
/// 256-byte aligned range past every input (as a fresh allocation is), so validation sees
/// outputs that overlap no input, exactly as the real ones will.
pub struct Placer(u64);

impl Placer {
    /// Addresses past the ends of `args`.
    pub fn after(args: &[&Arg]) -> PyResult<Placer> {
        let mut end = 0u64;
        for a in args {
            let e = a.ptr.checked_add(a.span_bytes()? as u64);
            end = end.max(e.ok_or_else(|| a.overflow())?);
        }
        Ok(Placer(end))
    }

    /// The address of a fresh range of `bytes`.
    pub fn take(&mut self, bytes: usize) -> PyResult<u64> {
        let overflow = || PyValueError::new_err("the call's tensors exceed the address space");
        let at = self.0.checked_next_multiple_of(256).ok_or_else(overflow)?;
        self.0 = at.checked_add(bytes as u64).ok_or_else(overflow)?;
        Ok(at)
    }
}
