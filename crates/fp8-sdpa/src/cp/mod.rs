//! Context parallelism: one attention over several GPUs, for sequences past one GPU. Ring
//! attention with zig-zag sharding: each rank holds two chunks of Q, K and V; K/V shards
//! travel around the ring while each rank computes its queries against the shard in hand;
//! partial results merge by log-sum-exp in fp32.
//!
//! `plan`, `merge` and `agree` (the problem every rank must share before the ring) are the
//! arithmetic, tested on the CPU; `ring` (feature `nccl`) runs it over NCCL through `comm`'s
//! non-blocking communicator, and the lab's `cp-bench` drives it (issue 33).

pub mod agree;
#[cfg(feature = "nccl")]
pub mod comm;
pub mod merge;
pub mod plan;
#[cfg(feature = "nccl")]
pub mod ring;

use crate::error::{Error, Result};

/// `rank` of `world_size` as NCCL takes them (`int`): the world size in `1..=i32::MAX` and the
/// rank below it, else an error naming both. The communicator's init and its peers' checks
/// both go through it.
///
/// ```
/// use fp8_sdpa::cp::nccl_rank;
/// assert_eq!(nccl_rank(1, 4).unwrap(), (1, 4));
/// assert!(nccl_rank(4, 4).is_err());
/// ```
pub fn nccl_rank(rank: usize, world_size: usize) -> Result<(i32, i32)> {
    match (i32::try_from(rank), i32::try_from(world_size)) {
        (Ok(r), Ok(w)) if r < w => Ok((r, w)),
        _ => Err(Error::InvalidInput(format!(
            "rank {rank} of {world_size}: a rank must be below the world size, which must be \
             1..=2^31-1"
        ))),
    }
}

/// Checks that an all-gather of `n` words from each of `world_size` ranks fits `room` words
/// exactly (`n x world_size`, computed without overflow), else an error naming the sizes.
#[cfg(any(feature = "nccl", test))]
pub(crate) fn check_gather_room(n: usize, world_size: usize, room: usize) -> Result<()> {
    match n.checked_mul(world_size) {
        Some(need) if need == room => Ok(()),
        need => Err(Error::InvalidInput(format!(
            "all-gather of {n} words over {world_size} ranks needs {} words of room, not {room}",
            need.map_or_else(|| "more than usize::MAX".to_string(), |w| w.to_string())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// Hostile sizes: never panics; accepted exactly when `n x world_size` equals the
        /// room without overflowing.
        #[test]
        fn gather_room_is_exact_and_never_overflows(
            n in prop_oneof![0usize..64, any::<usize>()],
            world in prop_oneof![0usize..9, any::<usize>()],
            room in prop_oneof![0usize..512, any::<usize>()],
        ) {
            let ok = super::check_gather_room(n, world, room).is_ok();
            prop_assert_eq!(ok, n.checked_mul(world) == Some(room));
            if let Some(w) = n.checked_mul(world) {
                prop_assert!(super::check_gather_room(n, world, w).is_ok());
            }
        }
    }
}
