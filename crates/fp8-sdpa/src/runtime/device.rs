//! One GPU: its context, what it is, and the kernels loaded on it (compiled through the
//! disk cache on first use, then kept per spec). Safe to share across threads.

use crate::arch::Arch;
use crate::compile::{Compiled, Compiler};
use crate::error::{Error, Result};
use crate::kernels::KernelSource;
use crate::libs;
use crate::variant::KernelSpec;
use cudarc::driver::sys::{CUdevice_attribute as Attr, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a device is.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    /// Ordinal.
    pub ordinal: usize,
    /// Marketing name.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// The arch kernels are built for.
    pub arch: Arch,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Largest shared memory one block may opt into, bytes.
    pub smem_optin: u32,
    /// L2 cache bytes.
    pub l2_bytes: u64,
    /// SM clock, kHz (the device's reported maximum).
    pub sm_clock_khz: u32,
    /// Memory clock, kHz.
    pub mem_clock_khz: u32,
    /// Memory bus width, bits.
    pub mem_bus_bits: u32,
    /// Global memory bytes.
    pub total_mem: u64,
    /// Driver's CUDA version, e.g. 13000.
    pub driver_version: i32,
}

/// A kernel loaded on the device.
#[doc(hidden)]
pub struct LoadedKernel {
    /// The compile result (resources, log, origin).
    pub compiled: Compiled,
    pub(crate) function: CudaFunction,
    module: Arc<CudaModule>,
}

impl LoadedKernel {
    /// Another entry point of the same module (the decode family's merge kernel).
    pub(crate) fn sibling(&self, name: &str) -> Result<CudaFunction> {
        self.module
            .load_function(name)
            .map_err(Error::driver(format!("finding {name}")))
    }
}

/// An open GPU: its context, what it is ([`DeviceInfo`]), and the kernels loaded on it.
/// The attention calls are its methods ([`Device::attention`] and the others, see
/// [`super`]).
///
/// ```no_run
/// # fn main() -> fp8_sdpa::Result<()> {
/// use fp8_sdpa::runtime::Device;
/// if Device::count() == 0 {
///     return Ok(()); // no GPU, or no driver
/// }
/// let dev = Device::open(0)?;
/// let info = dev.info();
/// println!("{} ({}, {} SMs)", info.name, info.arch.name(), info.sm_count);
/// let stream = dev.new_stream()?; // the stream calls run on
/// # let _ = stream;
/// # Ok(())
/// # }
/// ```
pub struct Device {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    compiler: Compiler,
    /// Loaded kernels by spec and mode (true: the portable variable-length mode).
    kernels: Mutex<HashMap<(KernelSpec, bool), Arc<LoadedKernel>>>,
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
}

impl Device {
    /// Opens device `ordinal` with the default kernel cache.
    pub fn open(ordinal: usize) -> Result<Device> {
        Device::open_with(ordinal, Compiler::new()?)
    }

    /// Opens device `ordinal` compiling through `compiler`.
    #[doc(hidden)]
    pub fn open_with(ordinal: usize, compiler: Compiler) -> Result<Device> {
        libs::ensure_driver()?;
        libs::ensure_nvrtc()?;
        let ctx =
            CudaContext::new(ordinal).map_err(Error::driver(format!("opening GPU {ordinal}")))?;
        let attr = |a: Attr| {
            ctx.attribute(a)
                .map_err(Error::driver("reading a device attribute"))
        };
        let cc = ctx
            .compute_capability()
            .map_err(Error::driver("reading the compute capability"))?;
        let arch = Arch::for_device(cc.0, cc.1).ok_or_else(|| {
            Error::Unsupported(format!(
                "compute capability {}.{}: fp8-sdpa needs sm_80 or newer",
                cc.0, cc.1
            ))
        })?;
        let mut driver_version = 0i32;
        // SAFETY: the driver is loaded and initialized (context created); valid out-pointer.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) };
        // Code from an NVRTC newer than the driver would fail at every module load with a
        // driver error that names neither: refuse here, saying what matches.
        crate::compile::nvrtc::check_driver(crate::compile::nvrtc::version()?, driver_version)?;
        let info = DeviceInfo {
            ordinal,
            name: ctx
                .name()
                .map_err(Error::driver("reading the device name"))?,
            compute_capability: cc,
            arch,
            sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            smem_optin: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
            l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            sm_clock_khz: attr(Attr::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as u32,
            mem_clock_khz: attr(Attr::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)? as u32,
            mem_bus_bits: attr(Attr::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)? as u32,
            total_mem: ctx
                .total_mem()
                .map_err(Error::driver("reading total memory"))? as u64,
            driver_version,
        };
        Ok(Device {
            ctx,
            info,
            compiler,
            kernels: Mutex::new(HashMap::new()),
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// Number of visible GPUs (0 when the driver is missing).
    pub fn count() -> usize {
        if libs::ensure_driver().is_err() {
            return 0;
        }
        CudaContext::device_count()
            .map(|n| n.max(0) as usize)
            .unwrap_or(0)
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// A new stream on this device.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx
            .new_stream()
            .map_err(Error::driver("creating a stream"))
    }

    /// A new stream whose kernels the GPU starts ahead of other streams' pending blocks (the
    /// highest priority the context allows). For short work that must not queue behind a long
    /// kernel that fills every SM, such as the NCCL transfers of [`crate::cp`]: on a
    /// normal-priority stream a transfer queued after such a kernel starts only when that
    /// kernel's last blocks have started.
    ///
    /// ```no_run
    /// # fn main() -> fp8_sdpa::Result<()> {
    /// let dev = fp8_sdpa::runtime::Device::open(0)?;
    /// let transfers = dev.new_priority_stream()?;
    /// # Ok(()) }
    /// ```
    pub fn new_priority_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx
            .bind_to_thread()
            .map_err(Error::driver("binding the context"))?;
        let (_, greatest) = cudarc::driver::result::stream::get_priority_range()
            .map_err(Error::driver("reading the stream priority range"))?;
        self.ctx
            .new_stream_with_priority(greatest)
            .map_err(Error::driver("creating a stream"))
    }

    /// A helper module (not an attention kernel) compiled from `src` with `defines`, loaded
    /// once per distinct define set.
    #[doc(hidden)]
    pub fn module(
        &self,
        src: &KernelSource,
        defines: &[(String, String)],
    ) -> Result<Arc<CudaModule>> {
        let key = format!("{}|{:?}", src.name, defines);
        if let Some(m) = self.modules.lock().expect("module map poisoned").get(&key) {
            return Ok(m.clone());
        }
        // Helper modules (codec, quantizer) are not gated, so a missing ptxas report is no
        // reason to refuse them; attention kernels go through `kernel`, which requires it.
        let compiled = self
            .compiler
            .compile_source_ungated(src, defines, self.info.arch)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(compiled.cubin))
            .map_err(Error::driver(format!("loading the CUBIN of {}", src.name)))?;
        self.modules
            .lock()
            .expect("module map poisoned")
            .insert(key, module.clone());
        Ok(module)
    }

    /// The kernel for `spec`, compiled (or taken from the disk cache) and loaded on first use.
    #[doc(hidden)]
    pub fn kernel(&self, spec: &KernelSpec) -> Result<Arc<LoadedKernel>> {
        self.load_kernel(spec, false)
    }

    /// The portable kernel for `spec` in its variable-length mode
    /// ([`Compiler::compile_varlen`]), loaded on first use.
    #[doc(hidden)]
    pub fn kernel_varlen(&self, spec: &KernelSpec) -> Result<Arc<LoadedKernel>> {
        self.load_kernel(spec, true)
    }

    fn load_kernel(&self, spec: &KernelSpec, varlen: bool) -> Result<Arc<LoadedKernel>> {
        let key = (*spec, varlen);
        if let Some(k) = self.kernels.lock().expect("kernel map poisoned").get(&key) {
            return Ok(k.clone());
        }
        let compiled = if varlen {
            self.compiler.compile_varlen(spec, self.info.arch)?
        } else {
            self.compiler.compile(spec, self.info.arch)?
        };
        let smem = compiled.resources.static_smem + spec.dynamic_smem_bytes();
        if smem > self.info.smem_optin {
            return Err(Error::Unsupported(format!(
                "{} needs {smem} bytes of shared memory; this device allows {}",
                spec.key(),
                self.info.smem_optin
            )));
        }
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(compiled.cubin.clone()))
            .map_err(Error::driver(format!(
                "loading the CUBIN of {}",
                spec.key()
            )))?;
        let function = module
            .load_function(compiled.entry)
            .map_err(Error::driver(format!("finding {}", compiled.entry)))?;
        let dynamic = spec.dynamic_smem_bytes();
        if dynamic > 48 * 1024 {
            function
                .set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic as i32,
                )
                .map_err(Error::driver("raising the dynamic shared memory limit"))?;
        }
        let loaded = Arc::new(LoadedKernel {
            compiled,
            function,
            module,
        });
        self.kernels
            .lock()
            .expect("kernel map poisoned")
            .insert(key, loaded.clone());
        Ok(loaded)
    }
}
