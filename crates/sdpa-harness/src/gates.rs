//! The offline resource gates ("green before fast", gate 2): a kernel that spills, keeps a
//! stack frame, needs more shared memory than the arch allows, uses more registers than its
//! variant declares, or carries relocations in its code is rejected before anything is timed.

use fp8_sdpa::compile::Compiled;
use serde::{Deserialize, Serialize};

/// One violated gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Gate name: `spill`, `stack`, `smem`, `registers`.
    pub gate: String,
    /// What was found against what is allowed.
    pub detail: String,
}

/// Checks a compiled kernel against every resource gate; empty means it passes.
pub fn check(c: &Compiled) -> Vec<Violation> {
    let r = &c.resources;
    let mut v = Vec::new();
    if r.spill_stores > 0 || r.spill_loads > 0 {
        v.push(Violation {
            gate: "spill".into(),
            detail: format!(
                "{} bytes spill stores, {} bytes spill loads",
                r.spill_stores, r.spill_loads
            ),
        });
    }
    if r.stack_frame > 0 {
        v.push(Violation {
            gate: "stack".into(),
            detail: format!("{} bytes stack frame", r.stack_frame),
        });
    }
    let smem = r.static_smem + c.spec.dynamic_smem_bytes();
    let limit = c.arch.smem_optin_limit();
    if smem > limit {
        v.push(Violation {
            gate: "smem".into(),
            detail: format!("{smem} bytes shared memory > {limit} ({})", c.arch),
        });
    }
    let relocs = code_relocations(&c.cubin);
    if !relocs.is_empty() {
        // A kernel's code needs no relocation: every address it uses is a parameter, a
        // register or a shared-memory offset. One appears when a global-scope name (under
        // --device-as-default-execution-space, a `constexpr` becomes a device global) collides
        // with a symbol ptxas resolves at load time: the decode family's `SMEM` had the driver
        // patch the offsets of every shared-memory access (perf-notes: Decode family).
        v.push(Violation {
            gate: "relocation".into(),
            detail: format!(
                "relocations in the code ({}); a global-scope name likely collides with a \
                 symbol: put the kernel's constants in a namespace",
                relocs.join(", ")
            ),
        });
    }
    let budget = c.spec.variant.register_budget();
    if r.registers > budget {
        v.push(Violation {
            gate: "registers".into(),
            detail: format!(
                "{} registers > budget {budget} ({} threads x {} blocks/SM)",
                r.registers,
                c.spec.variant.threads(),
                c.spec.variant.min_blocks
            ),
        });
    }
    v
}

/// Names of the non-empty relocation sections that apply to code (`.rel.text.*`,
/// `.rela.text.*`) in an ELF64 CUBIN; empty for a clean kernel and for bytes that are not an
/// ELF64 file.
pub fn code_relocations(elf: &[u8]) -> Vec<String> {
    let u16_at = |o: usize| {
        elf.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |o: usize| {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
    };
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 {
        return Vec::new();
    }
    let (Some(shoff), Some(shentsize), Some(shnum), Some(shstrndx)) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e))
    else {
        return Vec::new();
    };
    let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let Some(strtab) = header(shstrndx).and_then(|h| Some((u64_at(h + 0x18)?, u64_at(h + 0x20)?)))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for i in 0..shnum {
        let Some(name_off) = header(i).and_then(u32_at) else {
            break;
        };
        let Some(start) = strtab.0.checked_add(name_off) else {
            continue;
        };
        let Some(bytes) = elf.get(start..strtab.0.saturating_add(strtab.1).min(elf.len())) else {
            continue;
        };
        let name: String = bytes
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as char)
            .collect();
        // ptxas emits the sections for every kernel; only entries in them matter.
        let size = header(i).and_then(|h| u64_at(h + 0x20)).unwrap_or(0);
        if (name.starts_with(".rela.text") || name.starts_with(".rel.text")) && size > 0 {
            out.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_sdpa::compile::{Origin, ResourceUsage};
    use fp8_sdpa::{Arch, KernelSpec, Precision, Variant};

    fn compiled(r: ResourceUsage) -> Compiled {
        Compiled {
            spec: KernelSpec {
                variant: Variant::reference(),
                precision: Precision::F16,
                head_dim: 64,
                causal: false,
            },
            arch: Arch::Sm80,
            cubin: vec![],
            entry: "sdpa_reference",
            resources: r,
            log: String::new(),
            origin: Origin::Compiled,
        }
    }

    #[test]
    fn clean_kernel_passes() {
        assert!(check(&compiled(ResourceUsage {
            registers: 40,
            ..Default::default()
        }))
        .is_empty());
    }

    #[test]
    fn each_gate_fires() {
        let v = check(&compiled(ResourceUsage {
            registers: 256,
            spill_stores: 4,
            stack_frame: 8,
            static_smem: 200 * 1024,
            ..Default::default()
        }));
        let gates: Vec<_> = v.iter().map(|x| x.gate.as_str()).collect();
        assert_eq!(gates, ["spill", "stack", "smem", "registers"]);
    }

    /// A minimal ELF64 with the given section names (no contents).
    fn elf_with(names: &[&str]) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut offs = Vec::new();
        for n in names.iter().chain([&".shstrtab"]) {
            offs.push(strtab.len() as u32);
            strtab.extend_from_slice(n.as_bytes());
            strtab.push(0);
        }
        let mut e = vec![0u8; 64];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        let str_off = e.len();
        e.extend_from_slice(&strtab);
        let shoff = e.len();
        let n = offs.len();
        e[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        e[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        e[0x3c..0x3e].copy_from_slice(&(n as u16).to_le_bytes());
        e[0x3e..0x40].copy_from_slice(&((n - 1) as u16).to_le_bytes());
        for (i, o) in offs.iter().enumerate() {
            let mut h = vec![0u8; 64];
            h[..4].copy_from_slice(&o.to_le_bytes());
            if i == n - 1 {
                h[0x18..0x20].copy_from_slice(&(str_off as u64).to_le_bytes());
                h[0x20..0x28].copy_from_slice(&(strtab.len() as u64).to_le_bytes());
            } else if names[i].ends_with("_empty") {
                // an empty section, as ptxas writes for every kernel
            } else {
                h[0x20..0x28].copy_from_slice(&24u64.to_le_bytes());
            }
            e.extend_from_slice(&h);
        }
        e
    }

    #[test]
    fn code_relocations_are_found_by_section_name() {
        assert!(code_relocations(&elf_with(&[".text.k", ".nv.info.k"])).is_empty());
        assert!(code_relocations(&elf_with(&[".text.k", ".rela.text.k_empty"])).is_empty());
        assert_eq!(
            code_relocations(&elf_with(&[".text.k", ".rela.text.k"])),
            [".rela.text.k"]
        );
        assert!(code_relocations(b"not an elf").is_empty());
        let mut c = compiled(ResourceUsage::default());
        c.cubin = elf_with(&[".rel.text.sdpa_decode"]);
        assert_eq!(check(&c)[0].gate, "relocation");
    }

    proptest::proptest! {
        /// Any bytes: a list of names or nothing, never a panic.
        #[test]
        fn relocation_scan_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = code_relocations(&bytes);
        }

        /// A valid header with any byte changed: still no panic.
        #[test]
        fn corrupted_elf_never_panics(pos in 0usize..400, byte in proptest::prelude::any::<u8>()) {
            let mut e = elf_with(&[".text.k", ".rela.text.k"]);
            let i = pos % e.len();
            e[i] = byte;
            let _ = code_relocations(&e);
        }
    }
}
