//! The look-ahead's per-node term: the best partition of what a NUMA node has left into sets
//! of the request's size ([`best_partition`]), and every node's such partitions computed once
//! per topology ([`NodePartitions`]).
//!
//! A node partition is a function of the static link table and of which of the node's GPUs
//! are left, nothing else: occupancy only picks which subset is asked for. A node of at most
//! [`PARTITION_EXACT_GPUS`] GPUs has at most 256 subsets, so the best partition of each, per
//! set size, is a table of a few KiB that never grows, and a decision reads it instead of
//! partitioning (a fifth of an idle 16-GPU decision did only that).

use std::sync::{Arc, OnceLock};

/// Largest pool the look-ahead partitions exhaustively (8 GPUs: at most 105 pairings).
pub const PARTITION_EXACT_GPUS: usize = 8;

/// Subsets of a node of at most [`PARTITION_EXACT_GPUS`] GPUs, as position masks.
const SUBSETS: usize = 1 << PARTITION_EXACT_GPUS;

/// Exhaustive partition: the first GPU either joins a set with `k - 1` of the others or, while
/// the pool is not a multiple of `k`, stays out. At most 8 GPUs (105 pairings), so a subset of
/// the pool is a bit mask and each one's best partition is computed once: the look-ahead runs
/// this per node for every candidate set, and the former recursion allocated every split.
/// `pair` is the score of two GPUs (by index), as the link table gives it: taken as a function
/// so that this module needs nothing of the table that owns its results.
pub(super) fn best_partition(pair: impl Fn(usize, usize) -> u32, pool: &[usize], k: usize) -> u32 {
    debug_assert!(pool.len() <= PARTITION_EXACT_GPUS);
    let mut by_index = [0usize; PARTITION_EXACT_GPUS];
    let mut part = Partition::new(pair, pool, k, &mut by_index);
    part.of((1u32 << pool.len()) - 1)
}

/// The search behind [`best_partition`], on pool positions.
struct Partition<'a> {
    /// Pair scores by pool position.
    pair: [[u32; PARTITION_EXACT_GPUS]; PARTITION_EXACT_GPUS],
    /// Pool positions in GPU index order.
    by_index: &'a [usize],
    k: usize,
    /// Best partition by subset of positions, `u32::MAX` until computed.
    memo: [u32; SUBSETS],
}

impl<'a> Partition<'a> {
    /// The search over `pool` (at most [`PARTITION_EXACT_GPUS`] GPUs), `by_index` its buffer
    /// of positions in GPU index order.
    fn new(
        score: impl Fn(usize, usize) -> u32,
        pool: &[usize],
        k: usize,
        by_index: &'a mut [usize; PARTITION_EXACT_GPUS],
    ) -> Self {
        let n = pool.len();
        // The pool's pair scores copied once: each split reads a handful of them, and the
        // table's rows are two bounds-checked lookups each (a sixth of a partition of 8 GPUs).
        let mut pair = [[0u32; PARTITION_EXACT_GPUS]; PARTITION_EXACT_GPUS];
        for (a, row) in pair.iter_mut().enumerate().take(n) {
            for (b, v) in row.iter_mut().enumerate().take(n) {
                *v = score(pool[a], pool[b]);
            }
        }
        for (p, v) in by_index.iter_mut().enumerate() {
            *v = p;
        }
        by_index[..n].sort_unstable_by_key(|&p| pool[p]);
        Self {
            pair,
            by_index: &by_index[..n],
            k,
            memo: [u32::MAX; SUBSETS],
        }
    }

    /// The best partition of the pool positions in `mask`. Skips left are the size modulo
    /// `k`: skipping takes one off both, forming a set takes `k` off the size.
    fn of(&mut self, mask: u32) -> u32 {
        let k = self.k;
        let size = mask.count_ones() as usize;
        if size < k {
            return 0;
        }
        if self.memo[mask as usize] != u32::MAX {
            return self.memo[mask as usize];
        }
        let first = mask.trailing_zeros() as usize;
        let others = mask & !(1 << first);
        let mut best = if size % k > 0 { self.of(others) } else { 0 };
        // Every (k - 1)-subset of the others, as sub-masks.
        let mut sub = others;
        loop {
            if sub.count_ones() as usize == k - 1 {
                let rest = self.of(others & !sub);
                best = best.max(self.score(sub, first).saturating_add(rest));
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & others;
        }
        self.memo[mask as usize] = best;
        best
    }

    /// The set of the mates in `sub` and `first`, scored as the set of the mates in GPU index
    /// order (each pair from its lower index), then each mate with the first GPU: the order
    /// matters only to a table that is not symmetric, and stays that of the former search.
    fn score(&self, sub: u32, first: usize) -> u32 {
        let mut score = 0u32;
        let mut seen = 0u32;
        for &p in self.by_index {
            if sub & (1 << p) == 0 {
                continue;
            }
            let mut before = seen;
            while before != 0 {
                let q = before.trailing_zeros() as usize;
                score = score.saturating_add(self.pair[q][p]);
                before &= before - 1;
            }
            score = score.saturating_add(self.pair[p][first]);
            seen |= 1 << p;
        }
        score
    }
}

/// Every NUMA node's best partitions, by set size and subset of the node's GPUs, computed on
/// first use and shared by the clones of a table (an allocator clone keeps its topology).
///
/// Why a subset's entry equals [`best_partition`] of that subset, given ascending: the node's
/// GPUs are listed ascending, so the positions of any subset keep GPU index order, its lowest
/// position is its lowest GPU (the "first GPU" of the search), and every split is scored with
/// the same pairs in the same order as the search over the subset alone would.
#[derive(Debug, Clone)]
pub struct NodePartitions {
    /// Per GPU index, its node's index in `nodes` and its position there; `None` for a GPU
    /// whose node has more than [`PARTITION_EXACT_GPUS`] GPUs (those partition as before).
    place: Vec<Option<(usize, u32)>>,
    /// Each node's GPUs (grouped by NUMA node as `gpus::lookahead` groups them), ascending.
    nodes: Vec<Vec<usize>>,
    /// By set size `k` (index 0 and 1 unused): per node, the best partition of each subset
    /// of its GPUs by position mask. At most 9 × nodes × 256 entries: bounded by the topology.
    by_size: Arc<[OnceLock<Vec<Vec<u32>>>]>,
}

impl NodePartitions {
    /// The nodes of the GPUs whose NUMA nodes are `numa` (by GPU index); nothing computed yet.
    pub fn new(numa: &[Option<u32>]) -> Self {
        let mut order: Vec<usize> = (0..numa.len()).collect();
        // Stable: each node's GPUs stay ascending.
        order.sort_by_key(|&g| numa[g]);
        let mut place = vec![None; numa.len()];
        let mut nodes = Vec::new();
        for group in order.chunk_by(|&a, &b| numa[a] == numa[b]) {
            if group.len() > PARTITION_EXACT_GPUS {
                continue;
            }
            for (p, &g) in group.iter().enumerate() {
                place[g] = Some((nodes.len(), p as u32));
            }
            nodes.push(group.to_vec());
        }
        let by_size = (0..=PARTITION_EXACT_GPUS)
            .map(|_| OnceLock::new())
            .collect();
        Self {
            place,
            nodes,
            by_size,
        }
    }

    /// [`best_partition`] of `pool` into `k`-sets, read from the table, when `pool` is
    /// ascending and on one node of at most [`PARTITION_EXACT_GPUS`] GPUs; `None` otherwise
    /// (the caller then partitions itself). `pair` as in [`best_partition`].
    pub fn get(&self, pair: impl Fn(usize, usize) -> u32, pool: &[usize], k: usize) -> Option<u32> {
        if !(2..=PARTITION_EXACT_GPUS).contains(&k) {
            return None;
        }
        let mut node = None;
        let mut mask = 0usize;
        let mut last = None;
        for &g in pool {
            let (n, p) = (*self.place.get(g)?)?;
            // Ascending on one node: else the search's order (or its node) differs.
            if node.is_some_and(|m| m != n) || last.is_some_and(|l| l >= g) {
                return None;
            }
            node = Some(n);
            last = Some(g);
            mask |= 1 << p;
        }
        let Some(node) = node else {
            return Some(0);
        };
        let tables = self.by_size[k].get_or_init(|| {
            self.nodes
                .iter()
                .map(|gpus| {
                    let mut by_index = [0usize; PARTITION_EXACT_GPUS];
                    let mut part = Partition::new(&pair, gpus, k, &mut by_index);
                    (0..1u32 << gpus.len()).map(|m| part.of(m)).collect()
                })
                .collect()
        });
        tables[node].get(mask).copied()
    }
}

#[cfg(test)]
#[path = "partitions_tests.rs"]
mod tests;
