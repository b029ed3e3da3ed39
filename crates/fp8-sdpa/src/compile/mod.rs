//! Compiling kernel specs: NVRTC to CUBIN for an exact arch, the ptxas resource report, and
//! a disk cache keyed by sources, defines, arch, options and NVRTC version.

pub(crate) mod bounded;
pub mod cache;
pub mod nvrtc;
pub mod ptxas;

pub use cache::Cache;
pub use ptxas::ResourceUsage;

use crate::arch::Arch;
use crate::error::Result;
use crate::kernels::{self, KernelSource};
use crate::variant::KernelSpec;
use serde::{Deserialize, Serialize};

/// Bumped when the cache entry's meaning changes.
const CACHE_FORMAT: &str = "fp8-sdpa-cache-v2";

/// A compiled kernel spec.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The spec.
    pub spec: KernelSpec,
    /// Target arch.
    pub arch: Arch,
    /// Machine code.
    pub cubin: Vec<u8>,
    /// Entry function name.
    pub entry: &'static str,
    /// The ptxas report for the entry.
    pub resources: ResourceUsage,
    /// NVRTC's log.
    pub log: String,
    /// Where it came from.
    pub origin: Origin,
}

/// Where a compiled kernel came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Freshly compiled (cache off or missing).
    Compiled,
    /// Loaded from the cache.
    CacheHit,
    /// The cache entry was corrupt (reason), so it was rebuilt.
    Rebuilt(String),
}

#[derive(Serialize, Deserialize)]
struct Meta {
    log: String,
    resources: Vec<ResourceUsage>,
}

/// A compiled source (any entries).
#[derive(Debug, Clone)]
pub struct CompiledModule {
    /// Machine code.
    pub cubin: Vec<u8>,
    /// NVRTC's log.
    pub log: String,
    /// The report of each entry.
    pub resources: Vec<ResourceUsage>,
    /// Where it came from.
    pub origin: Origin,
}

/// Compiles specs, through a cache when one is given.
#[derive(Debug, Clone)]
pub struct Compiler {
    cache: Option<Cache>,
}

impl Compiler {
    /// A compiler using the default cache location ([`Cache::default_location`]); without
    /// a usable one it compiles in memory. Never fails (the `Result` is kept for callers).
    pub fn new() -> Result<Compiler> {
        Ok(Compiler {
            cache: Cache::default_location(),
        })
    }

    /// A compiler with the given cache (or none).
    pub fn with_cache(cache: Option<Cache>) -> Compiler {
        Compiler { cache }
    }

    /// The cache key of a source with defines on `arch`: the source and every header, the
    /// defines, the compile options, and NVRTC's version.
    pub fn cache_key(
        src: &KernelSource,
        defines: &[(String, String)],
        arch: Arch,
    ) -> Result<String> {
        let (maj, min) = nvrtc::version()?;
        let defines = defines
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n");
        let options = nvrtc::base_options(arch, (maj, min)).join("\n");
        let version = format!("{maj}.{min}");
        let mut parts: Vec<&[u8]> = vec![
            CACHE_FORMAT.as_bytes(),
            src.name.as_bytes(),
            src.text.as_bytes(),
            defines.as_bytes(),
            options.as_bytes(),
            version.as_bytes(),
        ];
        for (n, t) in kernels::HEADERS {
            parts.push(n.as_bytes());
            parts.push(t.as_bytes());
        }
        Ok(cache::digest(&parts))
    }

    /// Compiles any embedded source with the given defines (through the cache), returning
    /// the CUBIN and the report of every entry in it.
    pub fn compile_source(
        &self,
        src: &KernelSource,
        defines: &[(String, String)],
        arch: Arch,
    ) -> Result<CompiledModule> {
        self.compile_source_inner(src, defines, arch, true)
    }

    /// Like [`Compiler::compile_source`], for code no gate reads: a compile whose ptxas report
    /// is missing is returned (uncached) instead of refused.
    pub fn compile_source_ungated(
        &self,
        src: &KernelSource,
        defines: &[(String, String)],
        arch: Arch,
    ) -> Result<CompiledModule> {
        self.compile_source_inner(src, defines, arch, false)
    }

    fn compile_source_inner(
        &self,
        src: &KernelSource,
        defines: &[(String, String)],
        arch: Arch,
        gated: bool,
    ) -> Result<CompiledModule> {
        let mut origin = Origin::Compiled;
        let key = match &self.cache {
            Some(_) => Some(Self::cache_key(src, defines, arch)?),
            None => None,
        };
        if let (Some(cache), Some(key)) = (&self.cache, &key) {
            match cache.get(key) {
                cache::Lookup::Hit(meta, cubin) => match serde_json::from_str::<Meta>(&meta) {
                    Ok(m) => {
                        return Ok(CompiledModule {
                            cubin,
                            log: m.log,
                            resources: m.resources,
                            origin: Origin::CacheHit,
                        })
                    }
                    Err(e) => origin = Origin::Rebuilt(format!("unreadable metadata: {e}")),
                },
                cache::Lookup::Corrupt(reason) => origin = Origin::Rebuilt(reason),
                cache::Lookup::Miss => {}
            }
        }
        let mut out = nvrtc::compile(src.name, src.text, kernels::HEADERS, defines, arch)?;
        let mut resources = ptxas::parse(&out.log);
        if resources.is_empty() {
            // Seen on the H100 machine before `--no-cache` (nvrtc::base_options): a compile
            // came back with a CUBIN and an empty log (no ptxas report), repeatably, because
            // NVRTC served it from its disk cache despite CUDA_CACHE_DISABLE; a nonce define
            // did not help there (perf-notes: NVRTC's disk cache). Kept as a last resort; the
            // nonce stays out of our key.
            let nonce = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let mut with_nonce = defines.to_vec();
            with_nonce.push(("SDPA_NVRTC_NONCE".into(), nonce.to_string()));
            out = nvrtc::compile(src.name, src.text, kernels::HEADERS, &with_nonce, arch)?;
            resources = ptxas::parse(&out.log);
            eprintln!(
                "note: NVRTC gave no ptxas report for {}; compiled again with a nonce define: report {}",
                src.name,
                if resources.is_empty() { "still missing" } else { "present" }
            );
        }
        if resources.is_empty() && !gated {
            // Usable, but never cached: the cache promises a report.
            return Ok(CompiledModule {
                cubin: out.cubin,
                log: out.log,
                resources,
                origin,
            });
        }
        if resources.is_empty() {
            // Never cache (or trust) a compile whose resource report is missing.
            return Err(crate::error::Error::Nvrtc {
                call: "ptxas report",
                message: format!(
                    "the log of {} holds no resource report:\n{}",
                    src.name, out.log
                ),
            });
        }
        if let (Some(cache), Some(key)) = (&self.cache, &key) {
            let meta = serde_json::to_string(&Meta {
                log: out.log.clone(),
                resources: resources.clone(),
            })
            .expect("Meta serializes");
            // A cache that cannot be written costs the next process a compile, nothing more.
            if let Err(e) = cache.put(key, &meta, &out.cubin) {
                cache::warn_once(&format!("{e}; the kernel is used uncached"));
            }
        }
        Ok(CompiledModule {
            cubin: out.cubin,
            log: out.log,
            resources,
            origin,
        })
    }

    /// Validates and compiles `spec` for `arch`.
    pub fn compile(&self, spec: &KernelSpec, arch: Arch) -> Result<Compiled> {
        self.compile_mode(spec, arch, false)
    }

    /// Like [`Compiler::compile`], in the variable-length mode of the portable, Hopper or
    /// decode family (`SDPA_VARLEN`: packed sequences cut out by offsets, see
    /// `runtime::varlen`): a module of its own, built only for varlen calls, so that the dense
    /// kernels stay as they are. Other families have no such mode (an
    /// [`crate::Error::Unsupported`]).
    pub fn compile_varlen(&self, spec: &KernelSpec, arch: Arch) -> Result<Compiled> {
        use crate::variant::Family;
        if !matches!(
            spec.variant.family,
            Family::Portable | Family::Hopper | Family::Decode
        ) {
            return Err(crate::error::Error::Unsupported(format!(
                "{}: only the portable, Hopper and decode families have a variable-length mode",
                spec.key()
            )));
        }
        self.compile_mode(spec, arch, true)
    }

    fn compile_mode(&self, spec: &KernelSpec, arch: Arch, varlen: bool) -> Result<Compiled> {
        spec.validate(arch)?;
        let src = kernels::source_or_err(spec.variant.family, spec.precision)?;
        let mut defines = spec.defines();
        if varlen {
            defines.push(("SDPA_VARLEN".into(), "1".into()));
        }
        let m = self.compile_source(&src, &defines, arch)?;
        // A missing report must not read as "zero registers, no spills": that would pass the gates.
        let resources = m
            .resources
            .iter()
            .find(|r| r.function == src.entry)
            .cloned()
            .ok_or_else(|| crate::error::Error::Nvrtc {
                call: "ptxas report",
                message: format!(
                    "no resource report for entry '{}' in the log:\n{}",
                    src.entry, m.log
                ),
            })?;
        Ok(Compiled {
            spec: *spec,
            arch,
            cubin: m.cubin,
            entry: src.entry,
            resources,
            log: m.log,
            origin: m.origin,
        })
    }
}
