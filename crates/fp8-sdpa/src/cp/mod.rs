//! Context parallelism: one attention over several GPUs, for sequences past one GPU. Ring
//! attention with zig-zag sharding: each rank holds two chunks of Q, K and V; K/V shards
//! travel around the ring while each rank computes its queries against the shard in hand;
//! partial results merge by log-sum-exp in fp32.
//!
//! `plan`, `merge` and `agree` (the problem every rank must share before the ring) are the
//! arithmetic, tested on the CPU; `ring` (feature `nccl`) runs it over NCCL through `comm`'s non-blocking communicator, and the lab's
//! `cp-bench` drives it (issue 33).

pub mod agree;
#[cfg(feature = "nccl")]
pub mod comm;
pub mod merge;
pub mod plan;
#[cfg(feature = "nccl")]
pub mod ring;
