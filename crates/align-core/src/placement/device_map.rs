//! Which of a container's CPUs and memory nodes belong to each of its GPUs and NICs: the map a
//! launcher reads (`NRI_ALIGN_GPU_CPUS`, `NRI_ALIGN_GPU_MEMS`, `NRI_ALIGN_NIC_CPUS`) to bind
//! each GPU worker next to its GPU, since inside the container it cannot tell from the host's
//! topology (it sees the host's nodes, not its cpuset; and on GB200 a GPU's "NUMA node" may be
//! its memory-only HBM node).
//!
//! GPUs are keyed by the ordinal the container's CUDA runtime gives them: their position among
//! the chosen GPUs in topology index order, the order `CUDA_VISIBLE_DEVICES` is written in.
//! Each GPU has a home node: its CPU node when the container has CPUs there, else the closest
//! node where it has some. A node's CPUs are split between the GPUs at home there, whole cores
//! together, in ordinal order; a node no GPU calls home goes to the GPUs of the closest node
//! that has some. So the lists are disjoint and together they are the container's cpuset.
//! A NIC gets every CPU of the container on its home node (NICs on one node share them).

use serde::{Deserialize, Serialize};

use crate::topology::{CpuSet, Gpu, NodeSet, Topology};

/// The CPUs and memory nodes of each device of a container. Persisted with the decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMap {
    /// One entry per chosen GPU, by ordinal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuShare>,
    /// One entry per NIC, in the decision's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<NicShare>,
}

/// One GPU's part of the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuShare {
    /// The ordinal CUDA gives it inside the container (0-based).
    pub ordinal: u32,
    /// PCI bus id.
    pub pci_bus_id: String,
    /// Its CPUs (may be empty: fewer CPUs than GPUs on a node, or a shared container whose
    /// pool has none there).
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub cpus: CpuSet,
    /// Its memory nodes: its home node's memory, and its own HBM node where the container's
    /// memory nodes include it (`mems: with-memory-only`).
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub mems: NodeSet,
}

/// One NIC's part of the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicShare {
    /// Interface name, as in the decision.
    pub name: String,
    /// The container's CPUs on its home node.
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub cpus: CpuSet,
}

/// What a decision holds that the map splits (an [`Assignment`](super::Assignment)'s fields:
/// the assignment builds its map with [`DeviceMap::of`], and this module stays below it).
pub struct Held<'a> {
    /// GPUs chosen, as PCI bus ids.
    pub gpus: &'a [String],
    /// NICs chosen, by name.
    pub nics: &'a [String],
    /// The container's CPUs.
    pub cpus: &'a CpuSet,
    /// Its memory nodes.
    pub mems: &'a NodeSet,
}

impl DeviceMap {
    /// The map of what `a` holds on `topo`.
    pub fn of_held(topo: &Topology, a: &Held<'_>) -> DeviceMap {
        // Most decisions hold no GPU or NIC: no per-node split of their CPUs to make.
        if a.gpus.is_empty() && a.nics.is_empty() {
            return DeviceMap::default();
        }
        let mut chosen: Vec<&Gpu> = topo
            .gpus
            .iter()
            .filter(|g| a.gpus.contains(&g.pci_bus_id))
            .collect();
        chosen.sort_by_key(|g| g.index);
        let by_node: Vec<(u32, CpuSet)> = topo
            .numa_nodes
            .iter()
            .map(|n| (n.id, a.cpus.intersection(&n.cpus)))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        let homes: Vec<Option<u32>> = chosen
            .iter()
            .map(|g| home(topo, &by_node, g.numa_node))
            .collect();
        let cpus = split_by_home(topo, &by_node, &homes);
        let gpus = chosen
            .iter()
            .zip(homes.iter().zip(cpus))
            .enumerate()
            .map(|(i, (g, (h, cpus)))| GpuShare {
                ordinal: i as u32,
                pci_bus_id: g.pci_bus_id.clone(),
                cpus,
                mems: gpu_mems(topo, a.mems, g, *h),
            })
            .collect();
        let nics = a
            .nics
            .iter()
            .map(|name| {
                let node = topo
                    .nics
                    .iter()
                    .find(|n| &n.name == name)
                    .and_then(|n| n.numa_node);
                let h = home(topo, &by_node, node);
                let cpus = by_node
                    .iter()
                    .find(|(id, _)| Some(*id) == h)
                    .map(|(_, s)| s.clone())
                    .unwrap_or_default();
                NicShare {
                    name: name.clone(),
                    cpus,
                }
            })
            .collect();
        DeviceMap { gpus, nics }
    }

    /// Whether there is nothing to say (no GPU, no NIC).
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty() && self.nics.is_empty()
    }

    /// `ORD:CPULIST;...`, the value of `NRI_ALIGN_GPU_CPUS`.
    pub fn gpu_cpus(&self) -> String {
        join(self.gpus.iter().map(|g| (g.ordinal.to_string(), &g.cpus)))
    }

    /// `ORD:NODELIST;...`, the value of `NRI_ALIGN_GPU_MEMS`.
    pub fn gpu_mems(&self) -> String {
        join(self.gpus.iter().map(|g| (g.ordinal.to_string(), &g.mems)))
    }

    /// `NAME:CPULIST;...`, the value of `NRI_ALIGN_NIC_CPUS`.
    pub fn nic_cpus(&self) -> String {
        join(self.nics.iter().map(|n| (n.name.clone(), &n.cpus)))
    }
}

fn join<'a>(entries: impl Iterator<Item = (String, &'a crate::topology::IdSet)>) -> String {
    entries
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// The node with CPUs a device on node `node` belongs with (the node itself, or for a
/// memory-only node the closest node with CPUs), then the closest node where the container has
/// CPUs. A device whose node is unknown is at home on the container's first node.
fn home(topo: &Topology, by_node: &[(u32, CpuSet)], node: Option<u32>) -> Option<u32> {
    let Some(node) = node else {
        return by_node.first().map(|(id, _)| *id);
    };
    let cpu_node = match topo.node(node) {
        Some(n) if n.is_memory_only() => topo
            .numa_nodes
            .iter()
            .filter(|m| !m.is_memory_only())
            .min_by_key(|m| (topo.distance(node, m.id), m.id))
            .map_or(node, |m| m.id),
        _ => node,
    };
    by_node
        .iter()
        .min_by_key(|(id, _)| (topo.distance(cpu_node, *id), *id))
        .map(|(id, _)| *id)
}

/// Each GPU's CPUs: every node's CPUs split between the GPUs at home there, or given to the
/// GPUs of the closest node that has some.
fn split_by_home(topo: &Topology, by_node: &[(u32, CpuSet)], homes: &[Option<u32>]) -> Vec<CpuSet> {
    let mut out = vec![CpuSet::new(); homes.len()];
    let with_gpus: Vec<u32> = by_node
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| homes.contains(&Some(*id)))
        .collect();
    for (id, cpus) in by_node {
        let Some(owner) = with_gpus
            .iter()
            .min_by_key(|h| (topo.distance(*id, **h), **h))
        else {
            continue;
        };
        let owners: Vec<usize> = (0..homes.len())
            .filter(|i| homes[*i] == Some(*owner))
            .collect();
        for (i, part) in owners.iter().zip(split_even(topo, cpus, owners.len())) {
            out[*i].extend_from(&part);
        }
    }
    out
}

/// `cpus` in `n` parts as even as whole cores allow (by threads when there are fewer cores
/// than parts), in id order.
fn split_even(topo: &Topology, cpus: &CpuSet, n: usize) -> Vec<CpuSet> {
    let mut cores: Vec<CpuSet> = Vec::new();
    let mut seen = CpuSet::new();
    for id in cpus.iter() {
        if seen.contains(id) {
            continue;
        }
        let core = topo.cpus.iter().find(|c| c.id == id).map_or_else(
            || [id].into_iter().collect(),
            |c| c.thread_siblings.intersection(cpus),
        );
        seen.extend_from(&core);
        cores.push(core);
    }
    if cores.len() < n {
        cores = cpus.iter().map(|id| [id].into_iter().collect()).collect();
    }
    let m = cores.len();
    (0..n)
        .map(|j| {
            let mut part = CpuSet::new();
            for c in &cores[j * m / n..(j + 1) * m / n] {
                part.extend_from(c);
            }
            part
        })
        .collect()
}

/// A GPU's memory nodes: its home node's memory node, and its own memory node where the
/// container's memory nodes hold it (never another GPU's).
fn gpu_mems(topo: &Topology, held: &NodeSet, g: &Gpu, home: Option<u32>) -> NodeSet {
    let mut mems = home.map_or_else(NodeSet::new, |h| {
        topo.memory_nodes_for(&[h].into_iter().collect())
    });
    if let Some(m) = g.memory_node.filter(|m| held.contains(*m)) {
        mems.insert(m);
    }
    mems
}

#[cfg(test)]
#[path = "device_map_tests.rs"]
mod tests;
