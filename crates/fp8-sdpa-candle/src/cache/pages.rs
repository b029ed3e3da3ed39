//! The free pages of a page pool, and reading a sequence back out of its pages.

use crate::quant::dequantize_e4m3;
use candle_core::{Result, Tensor};
use std::collections::BTreeSet;

/// A sequence's first `len` tokens, read from E4M3 `pool` (`[pages, page_size, heads, dim]`)
/// through its `pages` in order and decoded with `descale` (`F32` `[1, heads]`): f32
/// `[1, len, heads, dim]`. `pages` must cover `len` tokens.
pub(crate) fn dequantized_pages(
    pool: &Tensor,
    pages: &[u32],
    len: usize,
    descale: &Tensor,
) -> Result<Tensor> {
    // Page by page: a page is a [1, page_size, heads, dim] view of the pool. (candle's CUDA
    // index_select has no F8E4M3 kernel.)
    let parts = pages
        .iter()
        .map(|&p| dequantize_e4m3(&pool.narrow(0, p as usize, 1)?, descale))
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&parts, 1)?.narrow(1, 0, len)
}

/// Which pages of a pool are free; hands out the lowest-numbered first, so a pool's use is
/// deterministic.
#[derive(Debug, Clone)]
pub(crate) struct PageAllocator {
    free: BTreeSet<u32>,
}

impl PageAllocator {
    /// Every page of a pool of `pages` free. `pages` fits an i32 (the config checks it).
    pub(crate) fn new(pages: usize) -> Self {
        PageAllocator {
            free: (0..pages as u32).collect(),
        }
    }

    /// Pages free now.
    pub(crate) fn free_count(&self) -> usize {
        self.free.len()
    }

    /// `n` free pages, now taken; `None` (and nothing taken) when fewer are free.
    pub(crate) fn take(&mut self, n: usize) -> Option<Vec<u32>> {
        if n > self.free.len() {
            return None;
        }
        let pages: Vec<u32> = self.free.iter().take(n).copied().collect();
        for p in &pages {
            self.free.remove(p);
        }
        Some(pages)
    }

    /// Returns taken pages to the pool.
    pub(crate) fn give_back(&mut self, pages: &[u32]) {
        for &p in pages {
            let fresh = self.free.insert(p);
            debug_assert!(fresh, "page {p} given back twice");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of takes and give-backs: a page is never handed out twice while taken,
        /// the free count is the pool minus what is held, and a refused take changes nothing.
        #[test]
        fn pages_are_never_handed_out_twice(
            pool in 0usize..64,
            ops in prop::collection::vec((any::<bool>(), 0usize..20), 0..60),
        ) {
            let mut a = PageAllocator::new(pool);
            let mut held: Vec<Vec<u32>> = Vec::new();
            for (take, n) in ops {
                if take || held.is_empty() {
                    let before = a.free_count();
                    match a.take(n) {
                        Some(pages) => {
                            prop_assert_eq!(pages.len(), n);
                            held.push(pages);
                        }
                        None => {
                            prop_assert!(n > before);
                            prop_assert_eq!(a.free_count(), before);
                        }
                    }
                } else {
                    let i = n % held.len();
                    a.give_back(&held.swap_remove(i));
                }
                let mut all: Vec<u32> = held.iter().flatten().copied().collect();
                let count = all.len();
                all.sort_unstable();
                all.dedup();
                prop_assert_eq!(all.len(), count, "a page is held twice");
                prop_assert!(all.iter().all(|&p| (p as usize) < pool));
                prop_assert_eq!(a.free_count() + count, pool);
            }
        }
    }
}
