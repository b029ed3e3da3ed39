//! The offline half of `sdpa-lab bench`: shape suites, FLOP and byte counting, timing
//! statistics and the bench-file schema. The GPU timing loop lives with the `bench` command
//! and fills these types; `report` reads them back.
//!
//! How a bench run uses this module:
//! 1. pick cases with [`suites::cases`] (and [`suites::Suite::parse_list`] for `--suite`);
//! 2. start a [`record::BenchWriter`] with the manifest and the measured ceilings;
//! 3. per case and variant, time runs, build a [`record::BenchRow`] with
//!    [`stats::Stats::from_samples`] and the correctness check, call
//!    [`record::BenchRow::fill_derived`] and push it;
//! 4. for peers, write [`record::PeerCase`]s with [`record::write_peer_cases`], run
//!    `scripts/peers.py --cases .. --out ..`, and append [`record::read_peer_rows`].

pub mod flops;
pub mod record;
pub mod stats;
pub mod suites;
