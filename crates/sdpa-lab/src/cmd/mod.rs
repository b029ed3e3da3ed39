//! One module per subcommand.

pub mod attn;
pub mod bench;
pub mod check;
pub mod env;
pub mod report;
pub mod repro;
pub mod verify;
