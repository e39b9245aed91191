//! The shared pool with an exclusive headroom: per NUMA node, a few free CPUs kept out of the
//! pool so that exclusive containers can be admitted without moving every shared container.
//!
//! Each pool change is one cpuset update per shared container (one `runc update` each in the
//! runtime), so at thousands of shared containers moving the pool is what an exclusive
//! admission costs. With a headroom of `h` CPUs per node the pool is kept as it is while it
//! stays valid, and recomputed only on the nodes where it is not:
//!
//! - every CPU of the pool is still free (an exclusive container that took pool CPUs, a CPU
//!   offlined or reserved, forces the move);
//! - the free CPUs outside the pool (the headroom) are at most `2h` on the node (hysteresis:
//!   releases refill the headroom, and only past `2h` does the pool grow back);
//! - the node has a pool CPU, unless it has none left and at most `h` free CPUs: a node that
//!   exclusive containers filled gets its first CPUs back as headroom, where an exclusive
//!   container is likely to take them again (the best-fit node choice packs the fullest
//!   node), instead of moving every shared container for one CPU each way. A shared container
//!   placed on such a node opens it: it gets the node's pool part as a recompute would leave
//!   it ([`SharedPool::shared_on`]), and those CPUs join the pool when it is recorded
//!   ([`SharedPool::open`]), so a shared container never runs on the headroom.
//!
//! A recomputed node gets the headroom back to `h` CPUs, the ones the exclusive picker takes
//! first there (whole cores before split ones, one L3 group), so the next exclusive container
//! finds them whole, and keeps at least one CPU in the pool. The pool is never empty while a
//! shareable CPU is free: should every node be left without one, every node is recomputed.
//! With `h = 0` the pool is every free shareable CPU, as without headroom.

use crate::placement::cpus;
use crate::topology::{CpuSet, Topology};

/// The shared pool and the headroom it leaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedPool {
    /// CPUs per NUMA node kept out of the pool (0: none).
    headroom: u32,
    /// The pool shared containers were last given.
    cpus: CpuSet,
}

impl SharedPool {
    /// The pool now.
    pub fn cpus(&self) -> &CpuSet {
        &self.cpus
    }

    /// CPUs per node kept out of the pool.
    pub fn headroom(&self) -> u32 {
        self.headroom
    }

    /// Sets the headroom; the caller settles with `force` when it changed.
    pub fn set_headroom(&mut self, h: u32) -> bool {
        let changed = self.headroom != h;
        self.headroom = h;
        changed
    }

    /// Takes `hint` as the pool (what the shared containers run on, read back from records
    /// after a restart); [`SharedPool::settle`] then keeps what of it is still valid.
    pub fn adopt(&mut self, hint: &CpuSet) {
        self.cpus = hint.clone();
    }

    /// Brings the pool in line with `free` (free CPUs a shared container may use: online,
    /// not reserved, not exclusive, not isolated). Keeps each node's part while it is valid
    /// (module doc), unless `force`; returns whether the pool changed.
    pub fn settle(&mut self, topo: &Topology, free: &CpuSet, force: bool) -> bool {
        let h = self.headroom;
        if h == 0 {
            if self.cpus == *free {
                return false;
            }
            self.cpus = free.clone();
            return true;
        }
        let mut pool = free.clone();
        for n in topo.numa_nodes.iter().filter(|n| !n.is_memory_only()) {
            let free_n = free.intersection(&n.cpus);
            if free_n.is_empty() {
                continue;
            }
            let cur = self.cpus.intersection(&n.cpus);
            let keep = !force
                && (!cur.is_empty() || free_n.len() <= h as usize)
                && cur.is_subset(&free_n)
                && free_n.len() - cur.len() <= 2 * h as usize;
            let spare = if keep {
                free_n.difference(&cur)
            } else {
                headroom_on(topo, &free_n, h)
            };
            pool.subtract(&spare);
        }
        if pool.is_empty() && !free.is_empty() && !force {
            return self.settle(topo, free, true);
        }
        if pool == self.cpus {
            return false;
        }
        self.cpus = pool;
        true
    }
}

impl SharedPool {
    /// The shared CPUs of a shared container bound to NUMA `nodes`
    /// ([`cpus::shared_on`]), where a node of `nodes` without pool CPUs but with free ones
    /// counts with the pool part a recompute would give it (`free` as for `settle`).
    pub fn shared_on(
        &self,
        topo: &Topology,
        free: &CpuSet,
        nodes: &crate::topology::NodeSet,
    ) -> CpuSet {
        if self.headroom == 0 {
            return cpus::shared_on(topo, &self.cpus, nodes);
        }
        let mut pool = self.cpus.clone();
        for n in nodes.iter().filter_map(|id| topo.node(id)) {
            let free_n = free.intersection(&n.cpus);
            if !free_n.is_empty() && self.cpus.is_disjoint(&n.cpus) {
                pool.extend_from(&free_n.difference(&headroom_on(topo, &free_n, self.headroom)));
            }
        }
        cpus::shared_on(topo, &pool, nodes)
    }

    /// A shared container on `cpus` was recorded: those of its CPUs that are free on a node
    /// without pool CPUs join the pool (the node is opened, [`SharedPool::shared_on`]).
    pub fn open(&mut self, topo: &Topology, free: &CpuSet, cpus: &CpuSet) {
        if self.headroom == 0 {
            return;
        }
        for n in topo.numa_nodes.iter() {
            if self.cpus.is_disjoint(&n.cpus) {
                let add = cpus.intersection(&n.cpus).intersection(free);
                self.cpus.extend_from(&add);
            }
        }
    }
}

/// The headroom of one node with free shareable CPUs `free_n`: the `h` CPUs the exclusive
/// picker would take first there, never all of them (the node keeps one in the pool).
pub fn headroom_on(topo: &Topology, free_n: &CpuSet, h: u32) -> CpuSet {
    let take = h.min((free_n.len() as u32).saturating_sub(1));
    if take == 0 {
        return CpuSet::new();
    }
    cpus::pick(topo, [free_n], take, false).unwrap_or_default()
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
