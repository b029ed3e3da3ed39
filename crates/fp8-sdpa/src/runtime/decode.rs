//! The decode family's launch: the split-KV kernel, then (with more than one split) the
//! log-sum-exp merge of the splits' partial outputs, both on the caller's stream, with the
//! fp32 partials in stream-ordered scratch memory freed behind them.

use super::abi::{DecodeParams, SdpaParams};
use super::call::Launched;
use super::device::LoadedKernel;
use super::validate::{CallDesc, PagedDesc};
use crate::error::{Error, Result};
use crate::kernels::{geometry, DECODE_MERGE_ENTRY};
use crate::problem::AttnShape;
use crate::variant::KernelSpec;
use cudarc::driver::{result, sys, CudaStream, LaunchConfig, PushKernelArg};

/// Paged K/V as the kernel addresses it: device pointers of the block table and the
/// per-sequence key counts, the table's geometry and the pools' page count. The kernel reads
/// both arrays unchecked when the caller skipped the host's check, so it clamps with these:
/// every length to `max_pages * page_size` and every table entry into `0..pages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PagedArgs {
    /// i32 `[batch, max_pages]`.
    pub block_table: u64,
    /// i32 `[batch]`.
    pub seqlens_k: u64,
    pub max_pages: i32,
    pub page_size: i32,
    /// Pages in the K/V pools: their first dim, whose `pages * page_size` rows validation
    /// proved lie in both buffers.
    pub pages: i32,
}

impl PagedArgs {
    /// The kernel's view of a validated paged call (`call.k`, `call.v` the pools
    /// `[pages, page_size, heads_kv, dim]`, equal shapes).
    pub(crate) fn of(call: &CallDesc, paged: &PagedDesc) -> Result<PagedArgs> {
        let [pages, page_size, ..] = call.k.shape;
        let int = |what: &str, n: usize| {
            i32::try_from(n).map_err(|_| {
                Error::InvalidInput(format!(
                    "the paged cache's {what} ({n}) exceeds 2^31 - 1; split the cache"
                ))
            })
        };
        Ok(PagedArgs {
            block_table: paged.block_table.0,
            seqlens_k: paged.seqlens_k.0,
            max_pages: int("max_pages", paged.max_pages)?,
            page_size: int("page size", page_size)?,
            pages: int("page count", pages)?,
        })
    }
}

/// Scratch memory from the stream's pool, freed in stream order (after the kernels that
/// use it) when dropped.
struct Scratch {
    ptr: sys::CUdeviceptr,
    stream: sys::CUstream,
}

impl Scratch {
    fn new(stream: &CudaStream, bytes: usize) -> Result<Scratch> {
        stream
            .context()
            .bind_to_thread()
            .map_err(Error::driver("binding the context"))?;
        // SAFETY: a plain stream-ordered allocation on a live stream; the memory is written by
        // the decode kernel before the merge kernel reads it (both on this stream).
        let ptr = unsafe { result::malloc_async(stream.cu_stream(), bytes.max(4)) }.map_err(
            Error::driver(format!("allocating {bytes} bytes of decode scratch")),
        )?;
        Ok(Scratch {
            ptr,
            stream: stream.cu_stream(),
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from malloc_async on `stream`; the free is ordered after every
        // kernel queued on the stream so far, which includes all users of the memory.
        let _ = unsafe { result::free_async(self.ptr, self.stream) };
    }
}

/// Launches `spec` (a decode-family kernel) for `shape`, whose `seq_kv` is the longest
/// sequence. `params` is the validated parameter block of the call. Returns the main
/// kernel's launch (the merge, with more than one split, follows it on the stream).
///
/// A variable-length call (`params.cu_seqlens_q` set; `kernel` is then decode.cu's
/// `SDPA_VARLEN` module) has `shape` = the sequences as the batch and the longest lengths,
/// and its partials and merge rows are `[heads_q, total_q]`.
pub(crate) fn launch(
    stream: &CudaStream,
    kernel: &LoadedKernel,
    spec: &KernelSpec,
    shape: &AttnShape,
    params: &SdpaParams,
    paged: Option<PagedArgs>,
    sm_count: u32,
) -> Result<Launched> {
    let split = geometry::decode_split(spec, shape, sm_count);
    let grid = geometry::grid(spec, shape, sm_count, 0);
    if grid[1] > 65535 || grid[2] > 65535 {
        return Err(Error::InvalidInput(format!(
            "decode grid {grid:?} exceeds the launch limits (kv-heads x row blocks and batch \
             at most 65535); split the batch"
        )));
    }
    // Rows of O and of the LSE: packed tokens of a varlen call, else the dense batch's.
    let rows = if params.cu_seqlens_q != 0 {
        shape.heads_q * params.total_q as usize
    } else {
        shape.batch * shape.heads_q * shape.seq_q
    };
    let (o_part, lse_part) = if split.splits > 1 {
        let n = split.splits as usize * rows;
        (
            Some(Scratch::new(stream, n * shape.head_dim * 4)?),
            Some(Scratch::new(stream, n * 4)?),
        )
    } else {
        (None, None)
    };
    let dp = DecodeParams {
        o_part: o_part.as_ref().map_or(0, |s| s.ptr),
        lse_part: lse_part.as_ref().map_or(0, |s| s.ptr),
        block_table: paged.map_or(0, |p| p.block_table),
        seqlens_k: paged.map_or(0, |p| p.seqlens_k),
        max_pages: paged.map_or(0, |p| p.max_pages),
        page_size: paged.map_or(0, |p| p.page_size),
        pages: paged.map_or(0, |p| p.pages),
        splits: split.splits as i32,
        split_keys: split.split_keys as i32,
    };
    let cfg = LaunchConfig {
        grid_dim: (grid[0] as u32, grid[1] as u32, grid[2] as u32),
        block_dim: (spec.variant.threads(), 1, 1),
        shared_mem_bytes: spec.dynamic_smem_bytes(),
    };
    let mut launch = stream.launch_builder(&kernel.function);
    launch.arg(params);
    launch.arg(&dp);
    // SAFETY: `params` and `dp` mirror decode.cu's parameter blocks (abi.rs layout tests);
    // the tensors were validated to cover what the kernel reads and writes, and the scratch
    // holds splits x rows x (dim + 1) floats, what the kernel writes with more than one split.
    unsafe { launch.launch(cfg) }.map_err(Error::driver(format!("launching {}", spec.key())))?;
    if split.splits > 1 {
        let merge = kernel.sibling(DECODE_MERGE_ENTRY)?;
        let cfg = LaunchConfig {
            grid_dim: ((rows as u32).div_ceil(4), 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&merge);
        launch.arg(params);
        launch.arg(&dp);
        // SAFETY: as above; the merge reads the partials the first kernel wrote, in stream
        // order, and writes O and LSE, which validation sized.
        unsafe { launch.launch(cfg) }.map_err(Error::driver(format!(
            "launching the merge of {}",
            spec.key()
        )))?;
    }
    Ok(Launched {
        spec: *spec,
        grid: [grid[0] as u32, grid[1] as u32, grid[2] as u32],
        block: spec.variant.threads(),
        smem: spec.dynamic_smem_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::problem::AttnParams;
    use crate::runtime::tensor::TensorDesc;
    use crate::runtime::validate::validate_paged;

    /// A contiguous fp16 tensor of `shape`.
    fn pool(ptr: u64, shape: [usize; 4]) -> TensorDesc {
        let [_, s, h, d] = shape;
        TensorDesc {
            ptr,
            bytes: shape.iter().product::<usize>() * 2,
            dtype: DType::F16,
            shape,
            strides: [s * h * d, h * d, d, 1],
        }
    }

    #[test]
    fn paged_args_carry_the_pools_page_count() {
        // 3 sequences of 5 pages each over a pool of 37 pages of 64 tokens: the kernel's
        // clamp bound is the pools' first dim, not the batch or the table's width.
        let (pages, page_size, max_pages, batch) = (37, 64, 5, 3);
        let kv = [pages, page_size, 8, 128];
        let q = [batch, 1, 32, 128];
        let call = CallDesc {
            q: pool(0x1000, q),
            k: pool(0x10_0000, kv),
            v: pool(0x100_0000, kv),
            o: pool(0x1000_0000, q),
            lse: None,
            descales: [None; 3],
            params: AttnParams::default_for(128, false),
        };
        let paged = PagedDesc {
            block_table: (0x2000_0000, batch * max_pages),
            max_pages,
            seqlens_k: (0x3000_0000, batch),
        };
        validate_paged(&call, &paged).unwrap();
        let a = PagedArgs::of(&call, &paged).unwrap();
        assert_eq!(
            a,
            PagedArgs {
                block_table: 0x2000_0000,
                seqlens_k: 0x3000_0000,
                max_pages: 5,
                page_size: 64,
                pages: 37,
            }
        );
        // A count past i32 is a typed error (validation rejects such pools first).
        let mut huge = call;
        huge.k.shape[0] = 1 << 31;
        assert!(matches!(
            PagedArgs::of(&huge, &paged),
            Err(Error::InvalidInput(m)) if m.contains("page count")
        ));
    }
}
