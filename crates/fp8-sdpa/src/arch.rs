//! GPU architectures we compile for, and the limits the offline gates need.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A compile target: one exact SM architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Arch {
    /// A100 (Ampere).
    Sm80,
    /// GA10x (RTX 30, A10, A40).
    Sm86,
    /// Ada (L4, L40, RTX 40).
    Sm89,
    /// Hopper with its arch-specific features (wgmma, setmaxnreg).
    Sm90a,
}

impl Arch {
    /// All supported arches, oldest first.
    pub const ALL: [Arch; 4] = [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90a];

    /// The name NVRTC takes after `--gpu-architecture=`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm86 => "sm_86",
            Arch::Sm89 => "sm_89",
            Arch::Sm90a => "sm_90a",
        }
    }

    /// Compute capability as `major * 10 + minor`.
    pub fn sm(self) -> u32 {
        match self {
            Arch::Sm80 => 80,
            Arch::Sm86 => 86,
            Arch::Sm89 => 89,
            Arch::Sm90a => 90,
        }
    }

    /// The arch to build for a device of compute capability `major.minor`: the newest
    /// supported one the device runs (sm_90 devices get sm_90a), or `None` below sm_80.
    pub fn for_device(major: i32, minor: i32) -> Option<Arch> {
        match (major, minor) {
            (9, 0) => Some(Arch::Sm90a),
            (m, _) if m >= 9 => Some(Arch::Sm89), // newer: run the portable family's sm_89 build
            (8, n) if n >= 9 => Some(Arch::Sm89),
            (8, n) if n >= 6 => Some(Arch::Sm86),
            (8, _) => Some(Arch::Sm80),
            _ => None,
        }
    }

    /// Largest dynamic + static shared memory one block may opt into (bytes), from the CUDA
    /// programming guide's table; the runtime reads the real device attribute instead.
    pub fn smem_optin_limit(self) -> u32 {
        match self {
            Arch::Sm80 => 163 * 1024,
            Arch::Sm86 | Arch::Sm89 => 99 * 1024,
            Arch::Sm90a => 227 * 1024,
        }
    }

    /// 32-bit registers per SM.
    pub fn registers_per_sm(self) -> u32 {
        65536
    }

    /// Whether the arch has hardware E4M3 conversion (`cvt.rn.satfinite.e4m3x2`): sm_89 and up.
    pub fn has_fp8_cvt(self) -> bool {
        self.sm() >= 89
    }

    /// Parses a comma-separated list such as `sm_80,sm_90a`.
    pub fn parse_list(s: &str) -> Result<Vec<Arch>> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| p.trim().parse())
            .collect()
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = Error;
    fn from_str(s: &str) -> Result<Arch> {
        match s.to_ascii_lowercase().as_str() {
            "sm_80" | "sm80" => Ok(Arch::Sm80),
            "sm_86" | "sm86" => Ok(Arch::Sm86),
            "sm_89" | "sm89" => Ok(Arch::Sm89),
            "sm_90a" | "sm90a" | "sm_90" | "sm90" => Ok(Arch::Sm90a),
            _ => Err(Error::UnknownArch(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for a in Arch::ALL {
            assert_eq!(a.name().parse::<Arch>().unwrap(), a);
        }
        assert_eq!(
            Arch::parse_list("sm_80, sm_90a").unwrap(),
            vec![Arch::Sm80, Arch::Sm90a]
        );
        let e = "sm_75".parse::<Arch>().unwrap_err().to_string();
        assert!(e.contains("sm_75") && e.contains("sm_90a"), "{e}");
    }

    #[test]
    fn device_mapping() {
        assert_eq!(Arch::for_device(9, 0), Some(Arch::Sm90a));
        assert_eq!(Arch::for_device(8, 9), Some(Arch::Sm89));
        assert_eq!(Arch::for_device(8, 6), Some(Arch::Sm86));
        assert_eq!(Arch::for_device(8, 0), Some(Arch::Sm80));
        assert_eq!(Arch::for_device(7, 5), None);
    }
}
