//! The work plan of ring attention with zig-zag sharding, as pure arithmetic.
//!
//! A sequence of S tokens is cut into 2P equal chunks; rank r holds chunks r and 2P − 1 − r of
//! Q, K and V (zig-zag: under a causal mask, the early chunk sees few keys and the late one
//! many, so every rank gets the same work). K/V shards travel around the ring: at step s
//! (0 ≤ s < P) rank r holds the shard that rank (r − s) mod P started with, and pairs each of
//! its query chunks with each of that shard's key chunks. Under causal masking, query chunk i
//! against key chunk j is whole when j < i, the usual causal (diagonal) block when j = i, and
//! nothing when j > i.

/// How one (query chunk, key chunk) pair is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mask {
    /// Every query sees every key.
    Full,
    /// The diagonal block: causal within the chunk (equal lengths, so top-left and
    /// bottom-right alignment agree).
    Causal,
}

/// One attention call of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Work {
    /// Query chunk (global index 0..2P).
    pub q_chunk: usize,
    /// Index of the query chunk in the rank's local buffer (0 or 1).
    pub q_local: usize,
    /// Key chunk (global index 0..2P).
    pub kv_chunk: usize,
    /// Index of the key chunk in the travelling shard (0 or 1).
    pub kv_local: usize,
    /// The mask of the pair.
    pub mask: Mask,
}

/// The two chunks rank `r` of `p` holds, in local order.
pub fn chunks_of(r: usize, p: usize) -> [usize; 2] {
    [r, 2 * p - 1 - r]
}

/// The rank whose shard rank `r` holds at step `s`.
pub fn shard_at(r: usize, s: usize, p: usize) -> usize {
    (r + p - s % p) % p
}

/// The calls rank `r` of `p` makes at step `s`.
pub fn step_work(r: usize, s: usize, p: usize, causal: bool) -> Vec<Work> {
    let q = chunks_of(r, p);
    let kv = chunks_of(shard_at(r, s, p), p);
    let mut out = Vec::new();
    for (ql, &qc) in q.iter().enumerate() {
        for (kl, &kc) in kv.iter().enumerate() {
            let mask = match (causal, kc.cmp(&qc)) {
                (false, _) | (true, std::cmp::Ordering::Less) => Mask::Full,
                (true, std::cmp::Ordering::Equal) => Mask::Causal,
                (true, std::cmp::Ordering::Greater) => continue,
            };
            out.push(Work {
                q_chunk: qc,
                q_local: ql,
                kv_chunk: kc,
                kv_local: kl,
                mask,
            });
        }
    }
    out
}

/// A rank's work in units of half chunk-pairs (a diagonal block is one, a full pair two).
pub fn rank_cost(r: usize, p: usize, causal: bool) -> usize {
    (0..p)
        .flat_map(|s| step_work(r, s, p, causal))
        .map(|w| if w.mask == Mask::Full { 2 } else { 1 })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn every_visible_pair_is_computed_exactly_once() {
        for p in 1..=8 {
            for causal in [false, true] {
                let mut seen: HashMap<(usize, usize), Mask> = HashMap::new();
                for r in 0..p {
                    for s in 0..p {
                        for w in step_work(r, s, p, causal) {
                            assert!(chunks_of(r, p).contains(&w.q_chunk));
                            assert_eq!(chunks_of(r, p)[w.q_local], w.q_chunk);
                            assert_eq!(chunks_of(shard_at(r, s, p), p)[w.kv_local], w.kv_chunk);
                            assert!(seen.insert((w.q_chunk, w.kv_chunk), w.mask).is_none());
                        }
                    }
                }
                for i in 0..2 * p {
                    for j in 0..2 * p {
                        let want = match (causal, j.cmp(&i)) {
                            (false, _) | (true, std::cmp::Ordering::Less) => Some(Mask::Full),
                            (true, std::cmp::Ordering::Equal) => Some(Mask::Causal),
                            _ => None,
                        };
                        assert_eq!(
                            seen.get(&(i, j)).copied(),
                            want,
                            "P {p} causal {causal} ({i}, {j})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn zig_zag_balances_causal_work() {
        for p in 1..=8 {
            let costs: Vec<usize> = (0..p).map(|r| rank_cost(r, p, true)).collect();
            // Total: 2P diagonal blocks (1 each) + (2P)(2P-1)/2 full pairs (2 each).
            let total: usize = costs.iter().sum();
            assert_eq!(total, 2 * p + 2 * p * (2 * p - 1));
            assert!(costs.iter().all(|&c| c == costs[0]), "P {p}: {costs:?}");
        }
    }

    #[test]
    fn the_ring_visits_every_shard_once() {
        for p in 1..=8 {
            for r in 0..p {
                let mut v: Vec<usize> = (0..p).map(|s| shard_at(r, s, p)).collect();
                assert_eq!(v[0], r);
                v.sort();
                assert_eq!(v, (0..p).collect::<Vec<_>>());
            }
        }
    }
}
