//! What is allocated right now: exclusive CPUs, memory per NUMA node, GPU and NIC holders, and
//! the assignments themselves. Shared by nri-align's allocator and the kubelet-like baseline so both
//! account capacity the same way.
//!
//! The contract: the record changes only through [`Ledger::record`], [`Ledger::replace`] and
//! [`Ledger::release`] (`record.rs`), which refuse a second holder of an exclusive CPU or a GPU,
//! memory or huge pages beyond a node's and unknown devices; everything else reads it: what is
//! free (`free_cpus.rs`), the shared pool with its exclusive headroom ([`pool`]), the holders.
//!
//! May use: the decision's values ([`Assignment`], [`PlacementError`]) and `topology`; nothing
//! that decides, so every layer that does can read it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

pub mod pool;

use self::pool::SharedPool;
use super::assignment::Assignment;
use super::error::PlacementError;
use crate::topology::{CpuSet, NodeSet, PcieLevel, Topology};

/// Free capacity of one NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeFree {
    /// Node id.
    pub node: u32,
    /// Free CPUs that can still be given exclusively (reserved and allocated ones excluded).
    pub cpus: CpuSet,
    /// Free memory in bytes (total minus what bound containers account on the node).
    pub memory_bytes: u64,
    /// Free GPUs (PCI bus ids).
    pub gpus: Vec<String>,
    /// NICs no container uses (names).
    pub nics: Vec<String>,
    /// CPUs of the node (as read at start) that are offline now, hot-unplugged or offlined:
    /// what the node has lost since (NodeResourceTopology's capacity follows).
    #[serde(skip_serializing_if = "CpuSet::is_empty")]
    pub offline_cpus: CpuSet,
    /// The node's memory is offline now (it left `has_memory`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub memory_offline: bool,
    /// Free CPUs of `cpus` kept out of the shared pool for exclusive containers (the
    /// exclusive headroom; none when it is off).
    #[serde(skip_serializing_if = "CpuSet::is_empty")]
    pub headroom_cpus: CpuSet,
    /// Huge pages per size the node has configured, as (size in KiB, pages configured, pages
    /// no container holds), smallest size first; empty for a node without pools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hugepages: Vec<(u64, u64, u64)>,
}

/// The live allocations.
#[derive(Debug, Clone)]
pub struct Ledger {
    topo: Arc<Topology>,
    reserved: CpuSet,
    exclusive: CpuSet,
    mem_used: Vec<u64>,
    mem_split: HashMap<String, Vec<(usize, u64)>>,
    /// Huge pages containers hold, by (node index, page size in KiB).
    huge_used: HashMap<(usize, u64), u64>,
    gpu_owner: HashMap<usize, String>,
    /// How many containers use each GPU without holding it alone (MIG parents, replicas,
    /// unconfirmed env references), by index in `Topology::gpus`.
    gpu_sharers: HashMap<usize, u32>,
    /// Users of each NIC, by index in `Topology::nics`.
    nic_users: Vec<u32>,
    assignments: BTreeMap<String, Assignment>,
    /// PCIe relation of every NIC (row) to every GPU (column), computed once per topology: the
    /// GPU-set search asks it for every candidate set, and walking the PCI tree each time cost
    /// milliseconds per decision on a DGX H100.
    nic_gpu: Arc<Vec<Vec<PcieLevel>>>,
    /// NICs placement hands out: the RDMA-capable ones when the host has any, else all.
    eligible_nics: Arc<Vec<usize>>,
    /// GPUs the kubelet did not list as allocatable at its last answer (a device plugin lists
    /// only healthy devices): never chosen for a container the device plugin did not give
    /// them to.
    unallocatable_gpus: std::collections::BTreeSet<usize>,
    /// Online CPUs, computed once (and again at each hot-plug, [`Ledger::set_online`]): the
    /// free CPUs and the shared pool start from them at every decision, and building the set
    /// walks every CPU of the topology.
    online: Arc<CpuSet>,
    /// Nodes of the topology whose memory went offline since it was read: no new memory is
    /// accounted there (what containers hold stays).
    mem_offline: NodeSet,
    /// What each node with CPUs holds in total, per resource, largest first (see
    /// [`NodeTotals`]): the same at every decision until the reserved CPUs change.
    totals: Arc<NodeTotals>,
    /// The shared pool, kept apart from the free CPUs by the exclusive headroom (see
    /// [`SharedPool`]); every free shareable CPU when there is no headroom.
    pool: SharedPool,
}

/// The total capacity of the nodes with CPUs, one column per resource (CPUs less the reserved
/// ones, memory bytes, GPUs, eligible NICs), each sorted largest first. Placement asks it for
/// the fewest nodes that could ever hold a request; counting GPUs and NICs per node walks every
/// device, so it is counted once per topology and reserved set, not once per decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeTotals {
    /// Columns in the order CPUs, memory, GPUs, NICs.
    pub columns: [Vec<u64>; 4],
}

impl Ledger {
    /// An empty ledger.
    pub fn new(topo: Arc<Topology>, reserved: CpuSet) -> Self {
        let n = topo.numa_nodes.len();
        let nic_count = topo.nics.len();
        let nic_gpu = (0..topo.nics.len())
            .map(|x| {
                (0..topo.gpus.len())
                    .map(|g| nic_gpu_level(&topo, x, g))
                    .collect()
            })
            .collect();
        let rdma: Vec<usize> = (0..topo.nics.len())
            .filter(|i| topo.nics[*i].rdma_device.is_some())
            .collect();
        let eligible_nics = if rdma.is_empty() {
            (0..topo.nics.len()).collect()
        } else {
            rdma
        };
        let mut ledger = Self {
            nic_gpu: Arc::new(nic_gpu),
            eligible_nics: Arc::new(eligible_nics),
            // CPUs outside the containers' cpuset are as good as offline to placement.
            online: Arc::new(topo.online_cpus().difference(&topo.outside_cpuset)),
            mem_offline: NodeSet::new(),
            totals: Arc::default(),
            topo,
            reserved,
            exclusive: CpuSet::new(),
            mem_used: vec![0; n],
            mem_split: HashMap::new(),
            huge_used: HashMap::new(),
            gpu_owner: HashMap::new(),
            gpu_sharers: HashMap::new(),
            nic_users: vec![0; nic_count],
            unallocatable_gpus: Default::default(),
            assignments: BTreeMap::new(),
            pool: SharedPool::default(),
        };
        ledger.totals = Arc::new(ledger.count_totals());
        ledger.settle_pool(true);
        ledger
    }

    /// Counts [`NodeTotals`] from the topology and the reserved CPUs.
    fn count_totals(&self) -> NodeTotals {
        let topo = &self.topo;
        let mut columns: [Vec<u64>; 4] = Default::default();
        for (i, n) in topo.numa_nodes.iter().enumerate() {
            if n.is_memory_only() {
                continue;
            }
            let gpus = (0..topo.gpus.len())
                .filter(|g| self.gpu_node(*g) == Some(i))
                .count();
            let nics = self
                .eligible_nics
                .iter()
                .filter(|x| self.nic_node(**x) == Some(i))
                .count();
            let cpus = n.cpus.intersection(&self.online);
            columns[0].push(cpus.difference(&self.reserved).len() as u64);
            let memory = if self.mem_offline.contains(n.id) {
                0
            } else {
                n.memory_bytes
            };
            columns[1].push(memory);
            columns[2].push(gpus as u64);
            columns[3].push(nics as u64);
        }
        for c in &mut columns {
            c.sort_unstable_by(|a, b| b.cmp(a));
        }
        NodeTotals { columns }
    }

    /// The nodes' total capacity, largest first per resource.
    pub fn totals(&self) -> &NodeTotals {
        &self.totals
    }

    /// The topology.
    pub fn topo(&self) -> &Topology {
        &self.topo
    }

    /// A shared handle on the topology.
    pub fn topo_arc(&self) -> Arc<Topology> {
        Arc::clone(&self.topo)
    }

    /// Changes the reserved CPUs (config reload); allocations stay.
    pub fn set_reserved(&mut self, reserved: CpuSet) {
        // A reload recomputes the pool once rather than leaving CPUs freed from the reserved
        // set in the headroom.
        let changed = self.reserved != reserved;
        self.reserved = reserved;
        self.totals = Arc::new(self.count_totals());
        self.settle_pool(changed);
    }

    /// Reserved CPUs.
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    /// Online CPUs of the topology that containers may be given (those outside the
    /// containers' cpuset, `Topology::outside_cpuset`, left out).
    pub fn online(&self) -> &CpuSet {
        &self.online
    }

    /// Follows a CPU or memory hot-plug: from now on only `cpus` are online and the memory of
    /// `mem_offline` (node ids) is gone. Only CPUs the topology describes can be placed on
    /// (their core, cache and node come from it), so others are left out and returned, for the
    /// caller to report. Allocations stay whole: an exclusive CPU that went offline stays
    /// held by its container (it is neither free nor in the shared pool while offline, and
    /// goes back to its holder, not to the pool, when it returns), so the ledger never holds
    /// less than the containers do.
    pub fn set_online(&mut self, cpus: &CpuSet, mem_offline: &NodeSet) -> CpuSet {
        let known: CpuSet = self.topo.cpus.iter().map(|c| c.id).collect();
        let unknown = cpus.difference(&known);
        self.online = Arc::new(
            cpus.intersection(&known)
                .difference(&self.topo.outside_cpuset),
        );
        self.mem_offline = mem_offline
            .iter()
            .filter(|id| self.topo.node_index(*id).is_some())
            .collect();
        self.totals = Arc::new(self.count_totals());
        self.settle_pool(false);
        unknown
    }

    /// Nodes whose memory is offline (see [`Ledger::set_online`]).
    pub fn mem_offline(&self) -> &NodeSet {
        &self.mem_offline
    }

    /// CPUs held exclusively that are offline now, with their holders.
    pub fn offline_held(&self) -> Vec<(&str, CpuSet)> {
        self.assignments
            .values()
            .filter(|a| a.exclusive)
            .filter_map(|a| {
                let gone = a.cpus.difference(&self.online);
                (!gone.is_empty()).then_some((a.container_id.as_str(), gone))
            })
            .collect()
    }

    /// Free memory of the node at index `i` (none while its memory is offline).
    pub fn free_mem(&self, i: usize) -> u64 {
        let total = self
            .topo
            .numa_nodes
            .get(i)
            .filter(|n| !self.mem_offline.contains(n.id))
            .map_or(0, |n| n.memory_bytes);
        total.saturating_sub(self.mem_used.get(i).copied().unwrap_or(0))
    }

    /// Free huge pages of `size_kb` on the node at index `i`: its `nr_hugepages` as read at
    /// start less what containers hold there. The kernel's `free_hugepages` is not the measure:
    /// it drops only when pages are faulted in, and a restored container's pages are already
    /// faulted in and held both ways.
    pub fn free_huge(&self, i: usize, size_kb: u64) -> u64 {
        self.huge_total(i, size_kb)
            .saturating_sub(self.huge_used.get(&(i, size_kb)).copied().unwrap_or(0))
    }

    /// Pages of `size_kb` configured on the node at index `i`.
    pub fn huge_total(&self, i: usize, size_kb: u64) -> u64 {
        self.topo
            .numa_nodes
            .get(i)
            .and_then(|n| n.hugepages.iter().find(|h| h.size_kb == size_kb))
            .map_or(0, |h| h.total)
    }

    /// NICs placement hands out (indices): the RDMA-capable ones when the host has any, else all.
    pub fn eligible_nics(&self) -> &[usize] {
        &self.eligible_nics
    }

    /// PCIe relation of NIC `nic` to GPU `gpu` (indices); cross-socket for unknown indices.
    pub fn nic_gpu_level(&self, nic: usize, gpu: usize) -> PcieLevel {
        self.nic_gpu
            .get(nic)
            .and_then(|row| row.get(gpu))
            .copied()
            .unwrap_or(PcieLevel::CrossSocket)
    }

    /// Index into `Topology::numa_nodes` of a GPU's node (see `Ledger::locality`).
    pub fn gpu_node(&self, g: usize) -> Option<usize> {
        self.locality(self.topo.gpus.get(g)?.numa_node?)
    }

    /// Index into `Topology::numa_nodes` of a NIC's node (see `Ledger::locality`).
    pub fn nic_node(&self, n: usize) -> Option<usize> {
        self.locality(self.topo.nics.get(n)?.numa_node?)
    }

    /// Index of the CPU node a device on NUMA node `id` belongs with (a generic device's).
    pub fn device_node(&self, id: u32) -> Option<usize> {
        self.locality(id)
    }

    /// The CPU node a device on node `id` belongs with: the node itself, or for a memory-only
    /// node (a GPU reporting its HBM node) the closest node with CPUs.
    fn locality(&self, id: u32) -> Option<usize> {
        let i = self.topo.node_index(id)?;
        if !self.topo.numa_nodes[i].is_memory_only() {
            return Some(i);
        }
        self.topo
            .numa_nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.is_memory_only())
            .min_by_key(|(_, n)| (self.topo.distance(id, n.id), n.id))
            .map(|(j, _)| j)
    }

    /// Whether GPU `g` (index in `Topology::gpus`) is free: nobody holds it and nobody
    /// shares it (a GPU in shared use is never handed out whole).
    pub fn gpu_free(&self, g: usize) -> bool {
        !self.gpu_owner.contains_key(&g) && self.gpu_sharers(g) == 0
    }

    /// How many containers share GPU `g`.
    pub fn gpu_sharers(&self, g: usize) -> u32 {
        self.gpu_sharers.get(&g).copied().unwrap_or(0)
    }

    /// Whether nri-align may choose GPU `g` for a container the device plugin did not give it
    /// to (a remap, or a count asked by annotation): free, not in MIG mode, where the GPU is
    /// handed out only as its MIG devices and a container given it whole would share it with
    /// theirs, and not left out of the kubelet's allocatable devices (unhealthy).
    pub fn gpu_choosable(&self, g: usize) -> bool {
        self.gpu_free(g)
            && self.topo.gpus.get(g).and_then(|x| x.mig_enabled) != Some(true)
            && !self.unallocatable_gpus.contains(&g)
    }

    /// Takes the kubelet's allocatable GPUs (indices in the topology) as its latest word: every
    /// other GPU is not choosable until the next call.
    pub fn set_allocatable_gpus(&mut self, allocatable: &std::collections::BTreeSet<usize>) {
        self.unallocatable_gpus = (0..self.topo.gpus.len())
            .filter(|g| !allocatable.contains(g))
            .collect();
    }

    /// Free GPU indices in ascending order.
    pub fn free_gpus(&self) -> Vec<usize> {
        (0..self.topo.gpus.len())
            .filter(|g| self.gpu_free(*g))
            .collect()
    }

    /// How many containers use NIC `n`.
    pub fn nic_users(&self, n: usize) -> u32 {
        self.nic_users.get(n).copied().unwrap_or(0)
    }

    /// Index of the GPU with bus id `bus`.
    pub fn gpu_index(&self, bus: &str) -> Result<usize, PlacementError> {
        let bus = bus.to_ascii_lowercase();
        self.topo
            .gpus
            .iter()
            .position(|g| g.pci_bus_id == bus)
            .ok_or_else(|| PlacementError::UnknownDevice {
                kind: "gpu".into(),
                id: bus,
                known: self
                    .topo
                    .gpus
                    .iter()
                    .map(|g| g.pci_bus_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Index of the NIC called `name` (interface or RDMA device name).
    pub fn nic_index(&self, name: &str) -> Result<usize, PlacementError> {
        self.topo
            .nics
            .iter()
            .position(|n| n.name == name || n.rdma_device.as_deref() == Some(name))
            .ok_or_else(|| PlacementError::UnknownDevice {
                kind: "nic".into(),
                id: name.to_string(),
                known: self
                    .topo
                    .nics
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The container holding GPU `g`, if any.
    pub fn gpu_holder(&self, g: usize) -> Option<&str> {
        self.gpu_owner.get(&g).map(String::as_str)
    }

    /// The container holding exclusive CPU `cpu`, if any.
    pub fn cpu_holder(&self, cpu: u32) -> Option<&str> {
        if !self.exclusive.contains(cpu) {
            return None;
        }
        self.assignments
            .values()
            .find(|a| a.exclusive && a.cpus.contains(cpu))
            .map(|a| a.container_id.as_str())
    }

    /// Live assignments, by container id.
    pub fn assignments(&self) -> impl Iterator<Item = &Assignment> {
        self.assignments.values()
    }

    /// The assignment of container `id`.
    pub fn get(&self, id: &str) -> Option<&Assignment> {
        self.assignments.get(id)
    }

    /// Splits `bytes` over the nodes at `order` (indices), filling each in turn.
    pub fn split_memory(&self, order: &[usize], bytes: u64) -> Option<Vec<(usize, u64)>> {
        let mut left = bytes;
        let mut split = Vec::new();
        for &i in order {
            if left == 0 {
                break;
            }
            let take = left.min(self.free_mem(i));
            if take > 0 {
                split.push((i, take));
                left -= take;
            }
        }
        (left == 0).then_some(split)
    }

    /// Splits the memory of decision `a` over its NUMA nodes, in their order (empty when it
    /// has none); `None` when it does not fit there.
    pub fn split_memory_of(&self, a: &Assignment) -> Option<Vec<(usize, u64)>> {
        let order: Vec<usize> = a
            .numa_nodes
            .iter()
            .filter_map(|id| self.topo.node_index(id))
            .collect();
        self.split_memory(&order, a.memory_bytes)
    }

    /// Node ids of node indices.
    pub fn ids(&self, idx: &[usize]) -> NodeSet {
        idx.iter()
            .filter_map(|i| self.topo.numa_nodes.get(*i))
            .map(|n| n.id)
            .collect()
    }
}

/// How NIC `nic` reaches GPU `gpu` (indices): through the PCI tree when the NIC's function is
/// in it, else by NUMA node alone.
fn nic_gpu_level(topo: &Topology, nic: usize, gpu: usize) -> PcieLevel {
    let (n, g) = (&topo.nics[nic], &topo.gpus[gpu]);
    match &n.pci_bus_id {
        Some(bus) if topo.pci(bus).is_some() => topo.pcie_level(bus, &g.pci_bus_id),
        _ => match (n.numa_node, g.numa_node) {
            (Some(a), Some(b)) if a == b => PcieLevel::SameNuma,
            _ => PcieLevel::CrossSocket,
        },
    }
}

#[cfg(test)]
mod tests;

// What is free (CPUs, the shared pool, each node's capacity): read-only views of the record.
mod free_cpus;
// Recording, replacing and releasing a decision, with the checks that keep the record whole.
mod record;
