//! The per-node split of one decision, as `simulate` prints it after the CPUs: how many of the
//! container's CPUs, GPUs and NICs each node holds, so a reader sees whether the CPUs followed
//! the devices (`cpu_spread`).

use align_core::placement::Assignment;
use align_core::topology::Topology;

/// `node 0: 60 cpus 4 gpus 4 nics | node 1: ...` over the nodes holding any of them; empty for
/// a container without GPUs or NICs (nothing to split by). A device whose node is unknown is
/// counted under `node ?`.
pub fn device_split(topo: &Topology, a: &Assignment) -> String {
    if a.gpus.is_empty() && a.nics.is_empty() {
        return String::new();
    }
    let gpu_node = |b: &String| {
        topo.gpus
            .iter()
            .find(|g| &g.pci_bus_id == b)
            .and_then(|g| g.numa_node)
    };
    let nic_node = |n: &String| {
        topo.nics
            .iter()
            .find(|x| &x.name == n)
            .and_then(|x| x.numa_node)
    };
    let gpus: Vec<Option<u32>> = a.gpus.iter().map(gpu_node).collect();
    let nics: Vec<Option<u32>> = a.nics.iter().map(nic_node).collect();
    let mut parts = Vec::new();
    let nodes = topo.numa_nodes.iter().map(|n| Some(n.id)).chain([None]);
    for id in nodes {
        let cpus = id
            .and_then(|id| topo.node(id))
            .map_or(0, |n| a.cpus.intersection_len(&n.cpus));
        let g = gpus.iter().filter(|x| **x == id).count();
        let n = nics.iter().filter(|x| **x == id).count();
        if cpus + g + n == 0 {
            continue;
        }
        let name = id.map_or_else(|| "?".to_string(), |i| i.to_string());
        let mut part = format!("node {name}: {cpus} cpus");
        if g > 0 {
            part.push_str(&format!(" {g} gpus"));
        }
        if n > 0 {
            part.push_str(&format!(" {n} nics"));
        }
        parts.push(part);
    }
    parts.join(" | ")
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
