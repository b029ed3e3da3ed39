//! Kernel launches through `cuLaunchKernelEx`, for what cudarc's launch builder cannot ask:
//! programmatic dependent launch (PDL, sm_90+). A kernel launched this way may be scheduled
//! while the kernel ahead of it in the stream still runs, so its launch latency and its set-up
//! (barriers, descriptor prefetches) overlap that kernel's tail; it must execute
//! `griddepcontrol.wait` (sync.cuh's `griddep_wait`) before it touches memory the work ahead
//! reads or writes. The Hopper family's kernels do so right after their set-up, and launch this
//! way (the mission shape 6.06 -> 5.74 µs in graph mode, the rest within 2 %; perf-notes:
//! Programmatic dependent launch). The decode family's split and merge kernels do not: the
//! same change moved its rows -3 % to +3.5 % (`docs/results/2026-11-26-round30/decode-pdl.patch`).

use cudarc::driver::{sys, CudaFunction, CudaStream, DriverError, LaunchConfig};
use std::ffi::c_void;

/// Launches `f` on `stream` with `args`, one pointer per kernel parameter (to its value), in
/// order. With `pdl`, the launch carries the programmatic-stream-serialization attribute.
///
/// # Safety
/// `args` must match the kernel's parameters in number, order and layout; every pointer the
/// parameters hold must be valid for what the kernel does until it completes; with `pdl`, the
/// kernel must wait (`griddep_wait`) before its first access to memory other work uses.
pub(crate) unsafe fn launch(
    stream: &CudaStream,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut [*mut c_void],
    pdl: bool,
) -> Result<(), DriverError> {
    stream.context().bind_to_thread()?;
    // SAFETY: a plain C union of integers and structs of integers; all zeros is a valid value.
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: u32::from(pdl),
    };
    // SAFETY: `config` and `attr` outlive the call; the caller vouches for `args` and `f`.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
}
