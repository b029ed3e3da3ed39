//! Parsing ptxas's verbose report (`--ptxas-options=-v`) from the NVRTC log.
//!
//! The report has, per entry function:
//! ```text
//! ptxas info    : Compiling entry function 'sdpa_reference' for 'sm_90a'
//! ptxas info    : Function properties for sdpa_reference
//!     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//! ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
//! ```
//! Fields absent from a line (no smem, no barriers) are zero.

use serde::{Deserialize, Serialize};

/// Resources of one compiled kernel, as ptxas reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUsage {
    /// Entry function name.
    pub function: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes spilled to local memory (stores).
    pub spill_stores: u32,
    /// Bytes reloaded from local memory.
    pub spill_loads: u32,
    /// Per-thread stack frame in bytes.
    pub stack_frame: u32,
    /// Static shared memory in bytes.
    pub static_smem: u32,
    /// Named barriers used.
    pub barriers: u32,
}

/// Extracts one [`ResourceUsage`] per entry function, in the order ptxas reports them.
/// Device functions that are not entries (ptxas reports their properties too) are skipped.
pub fn parse(log: &str) -> Vec<ResourceUsage> {
    let mut out: Vec<ResourceUsage> = Vec::new();
    let mut entries: Vec<String> = Vec::new();
    let mut current: Option<ResourceUsage> = None;
    for line in log.lines() {
        let t = line.trim();
        if let Some(rest) = t.split("Compiling entry function '").nth(1) {
            if let Some(name) = rest.split('\'').next() {
                entries.push(name.to_string());
            }
        } else if let Some(rest) = t.split("Function properties for ").nth(1) {
            if let Some(done) = current.take() {
                out.push(done);
            }
            current = Some(ResourceUsage {
                function: rest.trim().to_string(),
                ..Default::default()
            });
        } else if let Some(cur) = current.as_mut() {
            if t.contains("bytes stack frame") {
                for part in t.split(',') {
                    let n = leading_number(part);
                    if part.contains("stack frame") {
                        cur.stack_frame = n;
                    } else if part.contains("spill stores") {
                        cur.spill_stores = n;
                    } else if part.contains("spill loads") {
                        cur.spill_loads = n;
                    }
                }
            } else if let Some(rest) = t.split("Used ").nth(1) {
                for part in rest.split(',') {
                    let p = part.trim();
                    if p.ends_with("registers") {
                        cur.registers = leading_number(p);
                    } else if p.contains("barriers") {
                        cur.barriers = p
                            .split_whitespace()
                            .find_map(|w| w.parse().ok())
                            .unwrap_or(0);
                    } else if p.ends_with("bytes smem") {
                        cur.static_smem = leading_number(p);
                    }
                }
                out.push(current.take().expect("current is Some in this branch"));
            }
        }
    }
    if let Some(done) = current.take() {
        out.push(done);
    }
    if entries.is_empty() {
        return out;
    }
    out.into_iter()
        .filter(|r| entries.contains(&r.function))
        .collect()
}

fn leading_number(s: &str) -> u32 {
    s.split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A report NVRTC 13.0 wrote for sm_90a, kept verbatim: the reference kernel (D 128, f16,
    // causal), a register-starved kernel that spills, and an entry calling a non-inlined
    // device function (whose properties block has no "Used" line).
    const LOG: &str = include_str!("../../tests/data/ptxas_sm90a.log");

    #[test]
    fn parses_entries_and_skips_device_functions() {
        let r = parse(LOG);
        let names: Vec<&str> = r.iter().map(|x| x.function.as_str()).collect();
        assert_eq!(names, ["calls_helper", "spills", "sdpa_reference"]);
        assert_eq!(
            r[2],
            ResourceUsage {
                function: "sdpa_reference".into(),
                registers: 60,
                spill_stores: 0,
                spill_loads: 0,
                stack_frame: 0,
                static_smem: 2048,
                barriers: 0
            }
        );
        assert_eq!(
            (
                r[1].registers,
                r[1].spill_stores,
                r[1].spill_loads,
                r[1].stack_frame
            ),
            (32, 268, 344, 272)
        );
        assert_eq!(
            (r[0].registers, r[0].stack_frame, r[0].static_smem),
            (32, 128, 0)
        );
    }

    #[test]
    fn empty_log_gives_nothing() {
        assert!(parse("").is_empty());
    }
}
