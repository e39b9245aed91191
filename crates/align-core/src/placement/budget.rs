//! A pod's CPU budget (pod-level resources): the slice a container of the pod takes out of it
//! exclusively, and how the budget grows or shrinks while keeping the CPUs it holds.
//!
//! The resize rule is deliberately simple and in one function ([`resize`]): a grow keeps every
//! CPU of the budget and adds the free ones nearest to it (its own nodes first, then by NUMA
//! distance, a free thread of a core the budget already uses before a new core); a shrink
//! gives back the CPUs that joined last, never one a container of the pod holds exclusively.
//! Moving none of the CPUs the pod runs on is the point: a resize that re-decides from scratch
//! moves the workload's threads and caches.
//!
//! May use: `topology`; nothing of the host or the wire.

use std::collections::HashMap;

use crate::topology::{CpuSet, NodeSet, Topology};

/// Why a budget cannot take the size asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// A grow needs more free CPUs than there are (one always stays for the shared pool).
    #[error(
        "the pod's budget grows by {wanted} CPUs and only {free} are free (one always stays \
         in the node's shared pool)"
    )]
    NotEnoughFree {
        /// CPUs the grow adds.
        wanted: u32,
        /// CPUs it could add.
        free: u32,
    },
    /// A shrink would take CPUs its containers hold exclusively.
    #[error(
        "the pod's budget shrinks to {asked} CPUs while its containers hold {held} of them \
         exclusively (and a container sharing the rest needs one)"
    )]
    HeldExclusively {
        /// The size asked.
        asked: u32,
        /// CPUs the budget cannot give back.
        held: u32,
    },
}

/// Where a CPU sits, for ordering: its node, package, die and core (an absent CPU sorts last).
type CpuKey = (u32, u32, u32, u32);

fn keys(topo: &Topology) -> HashMap<u32, CpuKey> {
    topo.cpus
        .iter()
        .map(|c| (c.id, (c.numa_node, c.package, c.die, c.core)))
        .collect()
}

/// `n` CPUs of `pool` for one container's exclusive slice, core by core on one node where the
/// pool allows (the pool in node, core order, so that hyperthread siblings go together);
/// `None` when the pool has fewer than `n`.
pub fn slice(topo: &Topology, pool: &CpuSet, n: u32) -> Option<CpuSet> {
    if (pool.len() as u64) < u64::from(n) {
        return None;
    }
    let keys = keys(topo);
    let absent = (u32::MAX, u32::MAX, u32::MAX, u32::MAX);
    // Nodes the pool holds the most of first, so that a slice stays on one node when it can.
    let mut per_node: HashMap<u32, usize> = HashMap::new();
    for cpu in pool.iter() {
        *per_node
            .entry(keys.get(&cpu).unwrap_or(&absent).0)
            .or_default() += 1;
    }
    let mut cpus: Vec<u32> = pool.iter().collect();
    cpus.sort_by_key(|cpu| {
        let k = *keys.get(cpu).unwrap_or(&absent);
        let fits = per_node.get(&k.0).is_some_and(|have| *have >= n as usize);
        (!fits, k, *cpu)
    });
    Some(cpus.into_iter().take(n as usize).collect())
}

/// The budget `order` (its CPUs, oldest first) resized to `total` CPUs: a grow adds the CPUs of
/// `free` nearest to the budget, keeping one of `free` for the shared pool; a shrink drops the
/// newest CPUs that are not in `held` (the CPUs its containers hold exclusively), keeping at
/// least `keep_shared` CPUs outside `held` (one where a container of the pod shares the rest).
/// Returns the new order.
pub fn resize(
    topo: &Topology,
    order: &[u32],
    held: &CpuSet,
    free: &CpuSet,
    total: u32,
    keep_shared: u32,
) -> Result<Vec<u32>, BudgetError> {
    let total = total as usize;
    if total >= order.len() {
        return grow(topo, order, free, total - order.len());
    }
    let held_now = order.iter().filter(|c| held.contains(**c)).count();
    if total < held_now + keep_shared as usize {
        return Err(BudgetError::HeldExclusively {
            asked: total as u32,
            held: held_now as u32,
        });
    }
    let mut drop = order.len() - total;
    let mut kept: Vec<u32> = Vec::with_capacity(total);
    for cpu in order.iter().rev() {
        if drop > 0 && !held.contains(*cpu) {
            drop -= 1;
        } else {
            kept.push(*cpu);
        }
    }
    kept.reverse();
    Ok(kept)
}

fn grow(
    topo: &Topology,
    order: &[u32],
    free: &CpuSet,
    wanted: usize,
) -> Result<Vec<u32>, BudgetError> {
    let mut out = order.to_vec();
    if wanted == 0 {
        return Ok(out);
    }
    let mine: CpuSet = order.iter().copied().collect();
    let mut candidates = free.difference(&mine);
    let available = candidates.len().saturating_sub(1);
    if available < wanted {
        return Err(BudgetError::NotEnoughFree {
            wanted: wanted as u32,
            free: available as u32,
        });
    }
    let keys = keys(topo);
    let nodes: NodeSet = order
        .iter()
        .filter_map(|c| keys.get(c).map(|k| k.0))
        .collect();
    let cores: std::collections::HashSet<(u32, u32, u32)> = order
        .iter()
        .filter_map(|c| keys.get(c).map(|k| (k.1, k.2, k.3)))
        .collect();
    let absent = (u32::MAX, u32::MAX, u32::MAX, u32::MAX);
    let rank = |cpu: &u32| {
        let k = *keys.get(cpu).unwrap_or(&absent);
        let distance = nodes
            .iter()
            .map(|n| topo.distance(n, k.0))
            .min()
            .unwrap_or(0);
        let new_core = !cores.contains(&(k.1, k.2, k.3));
        (distance, new_core, k, *cpu)
    };
    let mut ranked: Vec<u32> = candidates.iter().collect();
    ranked.sort_by_key(rank);
    for cpu in ranked.into_iter().take(wanted) {
        candidates.remove(cpu);
        out.push(cpu);
    }
    Ok(out)
}
