//! Pairing RDMA NICs with the chosen GPUs: the same PCIe switch first, else the same root
//! complex, else the same NUMA node; unused NICs before shared ones.

use super::ledger::Ledger;
use crate::topology::PcieLevel;

/// NICs eligible for placement: the RDMA-capable ones when the host has any, else all.
pub fn eligible(ledger: &Ledger) -> Vec<usize> {
    let nics = &ledger.topo().nics;
    let rdma: Vec<usize> = (0..nics.len())
        .filter(|i| nics[*i].rdma_device.is_some())
        .collect();
    if rdma.is_empty() {
        (0..nics.len()).collect()
    } else {
        rdma
    }
}

/// PCIe relation of NIC `nic` to GPU `gpu` (indices).
pub fn level(ledger: &Ledger, nic: usize, gpu: usize) -> PcieLevel {
    let topo = ledger.topo();
    let (n, g) = (&topo.nics[nic], &topo.gpus[gpu]);
    match &n.pci_bus_id {
        Some(bus) if topo.pci(bus).is_some() => topo.pcie_level(bus, &g.pci_bus_id),
        _ => match (n.numa_node, g.numa_node) {
            (Some(a), Some(b)) if a == b => PcieLevel::SameNuma,
            _ => PcieLevel::CrossSocket,
        },
    }
}

/// Chooses `count` NICs (indices) for GPUs `gpus` on node indices `nodes`, keeping `fixed`.
/// Returns the NICs and a cost (lower is better: PCIe distance to the GPUs, sharing, off-node).
pub fn choose(
    ledger: &Ledger,
    gpus: &[usize],
    nodes: &[usize],
    count: usize,
    fixed: &[usize],
) -> (Vec<usize>, u32) {
    let mut chosen: Vec<usize> = fixed.to_vec();
    let pool = eligible(ledger);
    let topo = ledger.topo();
    let node_dist = |x: usize| -> u32 {
        let Some(nn) = ledger.nic_node(x) else {
            return 255;
        };
        nodes
            .iter()
            .map(|i| topo.distance(topo.numa_nodes[*i].id, topo.numa_nodes[nn].id))
            .min()
            .unwrap_or(255)
    };
    let mut cost = 0;
    while chosen.len() < count {
        let i = chosen.len();
        let best = pool
            .iter()
            .copied()
            .filter(|x| !chosen.contains(x))
            .min_by_key(|&x| {
                let lvl = if gpus.is_empty() {
                    PcieLevel::Same
                } else {
                    level(ledger, x, gpus[i % gpus.len()])
                };
                (lvl, ledger.nic_users(x), node_dist(x), x)
            });
        let Some(x) = best else { break };
        let lvl = if gpus.is_empty() {
            0
        } else {
            level(ledger, x, gpus[i % gpus.len()]) as u32
        };
        cost += lvl * 100 + ledger.nic_users(x) * 10 + node_dist(x);
        chosen.push(x);
    }
    (chosen, cost)
}
