//! Pairing RDMA NICs with the chosen GPUs: the same PCIe switch first, else the same root
//! complex, else the same NUMA node; unused NICs before shared ones.

use super::ledger::Ledger;
use crate::topology::PcieLevel;

/// NICs eligible for placement: the RDMA-capable ones when the host has any, else all.
pub fn eligible(ledger: &Ledger) -> &[usize] {
    ledger.eligible_nics()
}

/// PCIe relation of NIC `nic` to GPU `gpu` (indices), from the ledger's precomputed table.
pub fn level(ledger: &Ledger, nic: usize, gpu: usize) -> PcieLevel {
    ledger.nic_gpu_level(nic, gpu)
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
    // GPUs already served by a NIC at their own switch: each new NIC goes to a GPU not yet
    // served, so 2 NICs for 4 GPUs on 2 switches land one per switch.
    let mut served: Vec<usize> = Vec::new();
    while chosen.len() < count {
        let targets: Vec<usize> = {
            let open: Vec<usize> = gpus
                .iter()
                .copied()
                .filter(|g| !served.contains(g))
                .collect();
            if open.is_empty() {
                gpus.to_vec()
            } else {
                open
            }
        };
        let best_for = |x: usize| -> (PcieLevel, Option<usize>) {
            targets
                .iter()
                .map(|g| (level(ledger, x, *g), Some(*g)))
                .min()
                .unwrap_or((PcieLevel::Same, None))
        };
        let best = pool
            .iter()
            .copied()
            .filter(|x| !chosen.contains(x))
            .min_by_key(|&x| (best_for(x).0, ledger.nic_users(x), node_dist(x), x));
        let Some(x) = best else { break };
        let (lvl, target) = best_for(x);
        for g in gpus {
            if level(ledger, x, *g) <= lvl.max(PcieLevel::SingleSwitch) && !served.contains(g) {
                served.push(*g);
            }
        }
        if let Some(g) = target {
            if !served.contains(&g) {
                served.push(g);
            }
        }
        cost += lvl as u32 * 100 + ledger.nic_users(x) * 10 + node_dist(x);
        chosen.push(x);
    }
    (chosen, cost)
}
