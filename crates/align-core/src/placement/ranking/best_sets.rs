//! The best `m`-set score of every subset of a small host's GPUs, computed once per topology:
//! the look-ahead's "best set of twice the size among what a candidate leaves" read from a
//! table instead of searched for every candidate.
//!
//! On an idle DGX-1V a 2-GPU decision ranks all 28 pairs (no two of its GPUs are
//! interchangeable), and each pair's look-ahead ran a branch and bound for the best 4-set of
//! the 6 GPUs left, with its buffers allocated per call: most of the decision. Which GPUs are
//! left is the only thing occupancy changes, so on a host of at most [`BEST_SET_TABLE_GPUS`]
//! GPUs every subset's best `m`-set score, per `m`, is a table of at most 1,024 entries.
//!
//! Why an entry equals the exact search ([`super::gpus::best_set_score`]) over that subset:
//! a set's score is the sum of its pairs, each read from its lower GPU index to the higher
//! (the search walks an ascending pool and adds each GPU's pairs to those before it), the
//! table scores every subset the same way, and the best `m`-set inside a mask is either the
//! mask itself or lies inside the mask less one of its GPUs (the recursion below): a maximum
//! over the same sets, not a bound.

use std::sync::{Arc, OnceLock};

/// Largest host whose subsets are tabled: 2^10 masks of 4 bytes per set size asked for (at
/// most 11 sizes, 45 KiB), each size filled in 10,240 steps on first use.
pub const BEST_SET_TABLE_GPUS: usize = 10;

/// Per set size, the best set score within each subset of a small host's GPUs, computed on
/// first use and shared by the clones of a table.
#[derive(Debug, Clone)]
pub struct BestSets {
    /// GPUs of the host (at most [`BEST_SET_TABLE_GPUS`]).
    n: usize,
    /// Every subset's own score, by GPU mask.
    scores: Arc<OnceLock<Vec<u32>>>,
    /// By set size `m` (index 0 and 1 unused): the best `m`-set score within each GPU mask,
    /// 0 where the mask holds fewer than `m` GPUs.
    by_size: Arc<[OnceLock<Vec<u32>>]>,
}

impl BestSets {
    /// The table of a host of `n` GPUs, nothing computed yet; `None` past
    /// [`BEST_SET_TABLE_GPUS`].
    pub fn new(n: usize) -> Option<Self> {
        (n <= BEST_SET_TABLE_GPUS).then(|| Self {
            n,
            scores: Arc::new(OnceLock::new()),
            by_size: (0..=n).map(|_| OnceLock::new()).collect(),
        })
    }

    /// The best score of an `m`-set of `pool` (ascending GPU indices, each below the host's
    /// count), as the exact search finds it; `None` when the table cannot answer (the caller
    /// then searches): `m` below 2 or above the pool, a pool out of order or past the host.
    /// `pair` gives two GPUs' pair score, as the link table does.
    pub fn get(&self, pair: impl Fn(usize, usize) -> u32, pool: &[usize], m: usize) -> Option<u32> {
        if m < 2 || pool.len() < m {
            return None;
        }
        let mut mask = 0usize;
        let mut last = None;
        for &g in pool {
            if g >= self.n || last.is_some_and(|l| l >= g) {
                return None;
            }
            last = Some(g);
            mask |= 1 << g;
        }
        let best = self.by_size.get(m)?.get_or_init(|| {
            let scores = self.scores.get_or_init(|| subset_scores(&pair, self.n));
            best_within(scores, m)
        });
        best.get(mask).copied()
    }
}

/// Every subset's score by mask: the subset without its highest GPU, plus that GPU's pairs
/// read from each lower GPU (the orientation the exact search reads).
fn subset_scores(pair: &impl Fn(usize, usize) -> u32, n: usize) -> Vec<u32> {
    let mut scores = vec![0u32; 1 << n];
    for mask in 1usize..1 << n {
        let top = usize::BITS as usize - 1 - mask.leading_zeros() as usize;
        let lower = mask & !(1 << top);
        let mut s = scores[lower];
        let mut bits = lower;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            s = s.saturating_add(pair(j, top));
            bits &= bits - 1;
        }
        scores[mask] = s;
    }
    scores
}

/// The best `m`-set score within each mask (0 below `m` GPUs). Masks ascend, so each mask
/// less one GPU is filled before the mask.
fn best_within(scores: &[u32], m: usize) -> Vec<u32> {
    let mut best = vec![0u32; scores.len()];
    for mask in 1..scores.len() {
        let size = mask.count_ones() as usize;
        best[mask] = if size < m {
            0
        } else if size == m {
            scores[mask]
        } else {
            let mut b = 0;
            let mut bits = mask;
            while bits != 0 {
                let low = bits & bits.wrapping_neg();
                b = b.max(best[mask & !low]);
                bits &= bits - 1;
            }
            b
        };
    }
    best
}

#[cfg(test)]
#[path = "best_sets_tests.rs"]
mod tests;
