//! The look-ahead of one decision's candidate sets ([`gpus::lookahead`]), shared between them.
//!
//! On an idle 16-GPU host the reduced search still scored every class's look-ahead in full,
//! and the best `2k`-set of the 12 GPUs a 4-set leaves was most of the decision (the branch
//! and bound prunes little where every pair scores within 3% of the best). Two facts make most
//! of that work unneeded:
//! - The best `2k`-set of what a set leaves never beats the best `2k`-set of all the free GPUs
//!   (the exact search's maximum over a sub-pool): that ceiling, computed once per decision,
//!   plus the partitions gives an upper bound of each set's look-ahead, and the search computes
//!   the exact value only for the sets whose bound can still win.
//! - The partition is per NUMA node, and the sets of a decision leave the same GPUs on most
//!   nodes: each node's remainder is partitioned once per decision.
//! - On a host of at most 10 GPUs the best `2k`-set of what a set leaves is read from the
//!   topology's table of every subset's best sets (`best_sets.rs`), not searched.
//!
//! Values are those of [`gpus::lookahead`] to the unit: the bound only decides what is
//! computed, never what a set scores.

use super::gpus::{self, LinkTable};
use super::orbits::Symmetry;

/// One decision's look-ahead for sets of `k` among the free GPUs.
pub struct Lookahead<'a> {
    table: &'a LinkTable,
    free: &'a [usize],
    k: usize,
    exact: bool,
    /// Each NUMA node's free GPUs as a bit mask, nodes in the order `gpus::lookahead` groups
    /// them; `None` when a free GPU's index does not fit a mask (64 or more).
    nodes: Option<Vec<u64>>,
    /// Partition score of a node's remainder, by its GPUs as a bit mask. A decision meets a
    /// few dozen remainders: a scan of them beat hashing each key (the former `HashMap`).
    partitions: Vec<(u64, u32)>,
    /// The best `2k`-set score among all free GPUs, once computed; `None` inside when no bound
    /// holds (a greedy search is no maximum).
    ceiling: Option<Option<u32>>,
    /// The symmetries of the free GPUs' links, when the decision has them: the ceiling is then
    /// the best of one `2k`-set per class of interchangeable sets.
    sym: Option<&'a Symmetry<'a>>,
    /// Class counts (see [`Symmetry::best_score`]) of best `2k`-sets of the free GPUs: a
    /// set that leaves one of them (up to symmetry) leaves the ceiling as its best `2k`-set.
    best_counts: Vec<Vec<u8>>,
    /// What the set being scored leaves, rebuilt in place for each set.
    rest: Vec<usize>,
}

impl<'a> Lookahead<'a> {
    /// The look-ahead of `k`-sets taken from `free` (ascending), exact or greedy as
    /// [`gpus::lookahead`] is.
    pub fn new(table: &'a LinkTable, free: &'a [usize], k: usize, exact: bool) -> Self {
        // The same grouping as `gpus::lookahead`: by node, `None` first.
        let nodes = free.iter().all(|&g| g < 64).then(|| {
            let mut by_node: Vec<(Option<u32>, u64)> = Vec::new();
            for &g in free {
                let node = table.numa_of(g);
                match by_node.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, m)) => *m |= 1 << g,
                    None => by_node.push((node, 1 << g)),
                }
            }
            by_node.sort_by_key(|(n, _)| *n);
            by_node.into_iter().map(|(_, m)| m).collect()
        });
        Self {
            table,
            free,
            k,
            exact,
            nodes,
            partitions: Vec::new(),
            ceiling: None,
            sym: None,
            best_counts: Vec::new(),
            rest: Vec::with_capacity(free.len()),
        }
    }

    /// The same look-ahead, its ceiling found through `sym`, the symmetries of the free GPUs'
    /// links (interchangeable sets score alike, so one set per class finds the best score).
    pub fn with_symmetry(mut self, sym: &'a Symmetry<'a>) -> Self {
        self.sym = Some(sym);
        self
    }

    /// What [`gpus::lookahead`] scores for the free GPUs `set` (a subset of them) leaves.
    pub fn exact(&mut self, set: &[usize]) -> u32 {
        let taken = self.leave(set);
        let double = match self.ceiling_left(set) {
            Some(c) => c,
            None => self.best_left(),
        };
        self.partitions(taken) + double
    }

    /// The best `2k`-set score of what the set being scored leaves (`rest`): read from the
    /// topology's table on a small host (the exact search's value, see `best_sets.rs`), else
    /// searched.
    fn best_left(&self) -> u32 {
        let (table, m) = (self.table, 2 * self.k);
        let known = table
            .best_sets
            .as_ref()
            .filter(|_| self.exact)
            .and_then(|t| t.get(|i, j| table.pair(i, j), &self.rest, m));
        known
            .or_else(|| gpus::best_set_score(table, &self.rest, m, self.exact))
            .unwrap_or(0)
    }

    /// The ceiling when what `set` leaves holds a best `2k`-set of all the free GPUs (then
    /// nothing in it scores more, and the search over it is skipped).
    fn ceiling_left(&mut self, set: &[usize]) -> Option<u32> {
        // Without symmetries nothing says which sets leave a best one: the ceiling is not
        // computed for nothing.
        let sym = self.sym?;
        let c = self.ceiling()?;
        self.best_counts
            .iter()
            .any(|counts| sym.holds(counts, set))
            .then_some(c)
    }

    /// An upper bound of [`Lookahead::exact`] for `set`, and whether it is the exact value.
    pub fn bound(&mut self, set: &[usize]) -> (u32, bool) {
        let taken = self.leave(set);
        if self.rest.len() < 2 * self.k {
            // No `2k`-set left: the partitions are the whole look-ahead.
            return (self.partitions(taken), true);
        }
        match self.ceiling() {
            // Whether `set` leaves a best `2k`-set is left to `exact`: the search asks that for
            // the few sets whose bound comes up, and checking every set cost more than it saved.
            Some(c) => (self.partitions(taken).saturating_add(c), false),
            None => (self.exact(set), true),
        }
    }

    /// Fills `rest` with the free GPUs `set` leaves (ascending) and returns `set` as a bit
    /// mask (0 without node masks): one buffer for every set, not a vector each.
    fn leave(&mut self, set: &[usize]) -> u64 {
        self.rest.clear();
        if self.nodes.is_none() {
            self.rest
                .extend(self.free.iter().copied().filter(|g| !set.contains(g)));
            return 0;
        }
        // Free indices are below 64 here; a set GPU that is not free is not in any node mask.
        let taken = set
            .iter()
            .filter(|&&g| g < 64)
            .fold(0u64, |m, &g| m | (1 << g));
        self.rest
            .extend(self.free.iter().copied().filter(|&g| taken & (1 << g) == 0));
        taken
    }

    /// The best `2k`-set score among the free GPUs, when it bounds every remainder's: the
    /// search over the free GPUs is exact (a maximum), as is the one over any remainder then.
    fn ceiling(&mut self) -> Option<u32> {
        if self.ceiling.is_none() {
            let m = 2 * self.k;
            let exact = self.exact && gpus::exact_enumeration(self.free.len() as u64, m as u64);
            let mut ceiling = None;
            if exact {
                let (best, counts) = self.best_of_free(m);
                self.best_counts = counts;
                ceiling = Some(best);
            }
            self.ceiling = Some(ceiling);
        }
        self.ceiling.flatten()
    }

    /// The best `m`-set score among the free GPUs. Through the symmetries when the decision
    /// has them and the free GPUs' pair scores read the same both ways: a set's score is then
    /// its pairs' whatever their order, so interchangeable sets tie and one set per class,
    /// scored by its class counts, gives the maximum. On the idle HGX-like host that is a walk
    /// of class counts, not a branch and bound over 12,870 8-sets that prunes little where
    /// every pair scores within 3% of the best (a sixth of the decision).
    fn best_of_free(&self, m: usize) -> (u32, Vec<Vec<u8>>) {
        let (table, free) = (self.table, self.free);
        let symmetric = || {
            free.iter()
                .all(|&a| free.iter().all(|&b| table.pair(a, b) == table.pair(b, a)))
        };
        if let Some(best) = self
            .sym
            .filter(|_| symmetric())
            .and_then(|sym| sym.best_score(m, |a, b| table.pair(free[a], free[b])))
        {
            return best;
        }
        (
            gpus::best_set_score(table, free, m, true).unwrap_or(0),
            Vec::new(),
        )
    }

    /// The per-node partition part of [`gpus::lookahead`] for what leaves the free GPUs
    /// `taken` (a mask) leave in `rest`, each node's remainder scored once per decision.
    fn partitions(&mut self, taken: u64) -> u32 {
        let (table, k, exact) = (self.table, self.k, self.exact);
        let Some(nodes) = &self.nodes else {
            // The grouping of `gpus::lookahead`, without the memo (GPU indices past 63).
            let mut by_node = self.rest.clone();
            by_node.sort_by_key(|&g| table.numa_of(g));
            return by_node
                .chunk_by(|&a, &b| table.numa_of(a) == table.numa_of(b))
                .map(|group| gpus::partition_score(table, group, k, exact))
                .sum();
        };
        let mut total = 0u32;
        for &node in nodes {
            let group = node & !taken;
            // Fewer than `k` GPUs partition to nothing.
            if (group.count_ones() as usize) < k {
                continue;
            }
            // The node's remaining GPUs, ascending: the order of the plain grouping.
            let mut pool = [0usize; 64];
            let mut n = 0;
            let mut bits = group;
            while bits != 0 {
                pool[n] = bits.trailing_zeros() as usize;
                n += 1;
                bits &= bits - 1;
            }
            // Nodes of up to 8 GPUs are the topology's table to read (exact only: a greedy
            // partition is not what the table holds); larger ones are searched once per
            // decision.
            let known = if exact {
                table.partitions.get(|i, j| table.pair(i, j), &pool[..n], k)
            } else {
                None
            };
            let score = match known.or_else(|| {
                self.partitions
                    .iter()
                    .find(|(m, _)| *m == group)
                    .map(|&(_, s)| s)
            }) {
                Some(s) => s,
                None => {
                    let s = gpus::partition_score(table, &pool[..n], k, exact);
                    self.partitions.push((group, s));
                    s
                }
            };
            total += score;
        }
        total
    }
}

#[cfg(test)]
#[path = "lookahead_tests.rs"]
mod tests;
