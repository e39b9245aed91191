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
//!
//! Values are those of [`gpus::lookahead`] to the unit: the bound only decides what is
//! computed, never what a set scores.

use std::collections::HashMap;

use super::gpus::{self, LinkTable};

/// One decision's look-ahead for sets of `k` among the free GPUs.
pub struct Lookahead<'a> {
    table: &'a LinkTable,
    free: &'a [usize],
    k: usize,
    exact: bool,
    /// Partition score of a node's remainder, by its GPUs as a bit mask (GPU index < 64).
    partitions: HashMap<u64, u32>,
    /// The best `2k`-set score among all free GPUs, once computed; `None` inside when no bound
    /// holds (a greedy search is no maximum).
    ceiling: Option<Option<u32>>,
}

impl<'a> Lookahead<'a> {
    /// The look-ahead of `k`-sets taken from `free` (ascending), exact or greedy as
    /// [`gpus::lookahead`] is.
    pub fn new(table: &'a LinkTable, free: &'a [usize], k: usize, exact: bool) -> Self {
        Self {
            table,
            free,
            k,
            exact,
            partitions: HashMap::new(),
            ceiling: None,
        }
    }

    /// What [`gpus::lookahead`] scores for `rest` (ascending, within the free GPUs).
    pub fn exact(&mut self, rest: &[usize]) -> u32 {
        let double = gpus::best_set_score(self.table, rest, 2 * self.k, self.exact);
        self.partitions(rest) + double.unwrap_or(0)
    }

    /// An upper bound of [`Lookahead::exact`] for `rest`, and whether it is the exact value.
    pub fn bound(&mut self, rest: &[usize]) -> (u32, bool) {
        if rest.len() < 2 * self.k {
            // No `2k`-set left: the partitions are the whole look-ahead.
            return (self.partitions(rest), true);
        }
        match self.ceiling() {
            Some(c) => (self.partitions(rest).saturating_add(c), false),
            None => (self.exact(rest), true),
        }
    }

    /// The best `2k`-set score among the free GPUs, when it bounds every remainder's: the
    /// search over the free GPUs is exact (a maximum), as is the one over any remainder then.
    fn ceiling(&mut self) -> Option<u32> {
        if self.ceiling.is_none() {
            let m = 2 * self.k;
            let exact = self.exact && gpus::exact_enumeration(self.free.len() as u64, m as u64);
            self.ceiling = Some(
                exact.then(|| gpus::best_set_score(self.table, self.free, m, true).unwrap_or(0)),
            );
        }
        self.ceiling.flatten()
    }

    /// The per-node partition part of [`gpus::lookahead`], each node's remainder scored once.
    fn partitions(&mut self, rest: &[usize]) -> u32 {
        let table = self.table;
        // The same grouping as `gpus::lookahead`: a stable sort by node keeps pool order.
        let mut by_node = rest.to_vec();
        by_node.sort_by_key(|&g| table.numa_of(g));
        let mut total = 0u32;
        for group in by_node.chunk_by(|&a, &b| table.numa_of(a) == table.numa_of(b)) {
            let score = match mask(group) {
                Some(m) => *self
                    .partitions
                    .entry(m)
                    .or_insert_with(|| gpus::partition_score(table, group, self.k, self.exact)),
                None => gpus::partition_score(table, group, self.k, self.exact),
            };
            total += score;
        }
        total
    }
}

/// The GPUs of `group` as a bit mask, when every index fits in one. Every remainder of a
/// decision keeps the order of its free GPUs, so the mask alone decides the partition.
fn mask(group: &[usize]) -> Option<u64> {
    group
        .iter()
        .try_fold(0u64, |m, &g| (g < 64).then(|| m | (1 << g)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::testing::fixture_or_shipped;

    /// Every remainder of every `k`-set on the 16-GPU fixtures and the 8-GPU hosts, some of
    /// their GPUs held: the shared look-ahead scores as the plain one, and bounds it.
    #[test]
    fn shared_lookahead_matches_the_plain_one_and_bounds_it() {
        for name in crate::topology::testing::GPU_HOSTS {
            let topo = fixture_or_shipped(name);
            let table = LinkTable::new(&topo);
            let n = topo.gpus.len();
            for held in [vec![], vec![0, 5], vec![1, 2, 4, 7, 8, 9, 13, 14]] {
                let free: Vec<usize> = (0..n).filter(|g| !held.contains(g)).collect();
                for k in [2, 3, 4] {
                    let mut look = Lookahead::new(&table, &free, k, true);
                    for set in gpus::candidates(&table, &free, &[], k).iter().step_by(7) {
                        let rest: Vec<usize> =
                            free.iter().copied().filter(|g| !set.contains(g)).collect();
                        let plain = gpus::lookahead(&table, &rest, k, true);
                        let (bound, known) = look.bound(&rest);
                        assert!(bound >= plain, "{name} {set:?}");
                        if known {
                            assert_eq!(bound, plain, "{name} {set:?}");
                        }
                        assert_eq!(look.exact(&rest), plain, "{name} {set:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn masks_only_for_indices_below_64() {
        assert_eq!(mask(&[0, 3]), Some(0b1001));
        assert_eq!(mask(&[1, 64]), None);
    }
}
