//! One module per subcommand.

pub mod attn;
pub mod bench;
pub mod check;
pub mod compare;
pub mod cp_bench;
pub mod env;
pub mod profile;
pub mod report;
pub mod repro;
pub mod tune;
pub mod verify;

use fp8_sdpa::variant::KernelSpec;

/// The specs whose key contains `filter` (all of them without one): `--filter` of `check` and
/// `verify`.
pub fn matching(specs: Vec<KernelSpec>, filter: Option<&str>) -> Vec<KernelSpec> {
    specs
        .into_iter()
        .filter(|s| filter.is_none_or(|f| s.key().contains(f)))
        .collect()
}
