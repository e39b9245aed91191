//! The ledger's free CPUs, the shared pool kept from them (with the exclusive headroom,
//! [`SharedPool`](crate::placement::pool::SharedPool)) and the free capacity per node.

use super::{Ledger, NodeFree};
use crate::topology::{CpuSet, NodeSet};

impl Ledger {
    /// CPUs that can still be given exclusively (isolated CPUs included: they are only ever
    /// used exclusively).
    pub fn free_cpus(&self) -> CpuSet {
        let mut s = (*self.online).clone();
        s.subtract(&self.reserved);
        s.subtract(&self.exclusive);
        s
    }

    /// Free CPUs for one kind of exclusive request: the isolated ones only when `isolated`,
    /// else every free CPU but the isolated ones (which go only to containers that ask).
    pub fn free_cpus_for(&self, isolated: bool) -> CpuSet {
        let free = self.free_cpus();
        if isolated {
            free.intersection(&self.topo.isolated_cpus)
        } else {
            free.difference(&self.topo.isolated_cpus)
        }
    }

    /// The shared pool: online minus reserved, exclusive and isolated CPUs, minus the
    /// exclusive headroom when one is set.
    pub fn shared_pool(&self) -> CpuSet {
        self.pool.cpus().clone()
    }

    /// The shared CPUs of a shared container bound to NUMA `nodes`: the pool on those nodes
    /// (or the whole pool), a node whose free CPUs are all headroom counting with the pool
    /// part it gets when the container is recorded ([`SharedPool::shared_on`](crate::placement::pool::SharedPool::shared_on)).
    pub fn shared_on(&self, nodes: &NodeSet) -> CpuSet {
        if self.pool.headroom() == 0 {
            return crate::placement::cpus::shared_on(&self.topo, self.pool.cpus(), nodes);
        }
        self.pool
            .shared_on(&self.topo, &self.free_cpus_for(false), nodes)
    }

    /// Opens the nodes of a shared container's `cpus` that had no pool CPU
    /// ([`SharedPool::open`](crate::placement::pool::SharedPool::open)).
    pub(super) fn open_pool(&mut self, cpus: &CpuSet) {
        if self.pool.headroom() > 0 {
            let free = self.free_cpus_for(false);
            self.pool.open(&self.topo, &free, cpus);
        }
    }

    /// Sets the exclusive headroom (CPUs per node kept out of the shared pool); a change
    /// recomputes the pool once.
    pub fn set_headroom(&mut self, per_node: u32) {
        let changed = self.pool.set_headroom(per_node);
        self.settle_pool(changed);
    }

    /// The exclusive headroom per node.
    pub fn headroom(&self) -> u32 {
        self.pool.headroom()
    }

    /// Takes `pool` as the shared pool where it is still valid (what shared containers were
    /// last moved onto, read back after a restart), so that a restart moves nobody.
    pub fn adopt_pool(&mut self, pool: &CpuSet) {
        self.pool.adopt(pool);
        self.settle_pool(false);
    }

    /// Free shareable CPUs kept out of the shared pool now (the headroom's CPUs).
    pub fn headroom_cpus(&self) -> CpuSet {
        self.free_cpus_for(false).difference(self.pool.cpus())
    }

    /// Brings the pool in line with the free CPUs after they changed.
    pub(super) fn settle_pool(&mut self, force: bool) {
        let free = self.free_cpus_for(false);
        self.pool.settle(&self.topo, &free, force);
    }

    /// Free capacity per NUMA node.
    pub fn free_by_node(&self) -> Vec<NodeFree> {
        let free = self.free_cpus();
        let headroom = self.headroom_cpus();
        self.topo
            .numa_nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeFree {
                node: n.id,
                cpus: free.intersection(&n.cpus),
                memory_bytes: self.free_mem(i),
                gpus: (0..self.topo.gpus.len())
                    .filter(|g| self.gpu_free(*g) && self.gpu_node(*g) == Some(i))
                    .map(|g| self.topo.gpus[g].pci_bus_id.clone())
                    .collect(),
                nics: (0..self.topo.nics.len())
                    .filter(|x| self.nic_users(*x) == 0 && self.nic_node(*x) == Some(i))
                    .map(|x| self.topo.nics[x].name.clone())
                    .collect(),
                offline_cpus: n.cpus.difference(&self.online),
                memory_offline: self.mem_offline.contains(n.id),
                headroom_cpus: headroom.intersection(&n.cpus),
                hugepages: {
                    let mut h: Vec<(u64, u64, u64)> = n
                        .hugepages
                        .iter()
                        .filter(|h| h.total > 0)
                        .map(|h| (h.size_kb, h.total, self.free_huge(i, h.size_kb)))
                        .collect();
                    h.sort_unstable();
                    h
                },
            })
            .collect()
    }
}
