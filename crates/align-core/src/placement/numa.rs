//! Choosing NUMA node sets: best fit among single nodes, else greedy growth from each seed node
//! towards the closest nodes by the distance matrix (polynomial: no subset enumeration), and the
//! narrowest width a request could ever have (the kubelet's "preferred" width).

use super::cpus;
use super::error::NodeOffer;
use super::hugepages::{HugePageNeed, HugePagesHeld};
use super::ledger::Ledger;
use super::nics;
use super::policy::NumaChoice;
use crate::topology::{CpuSet, NodeSet, Topology};

/// What a request needs from a node set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Need {
    /// Exclusive CPUs.
    pub cpus: u32,
    /// Whole cores only.
    pub whole: bool,
    /// Memory bytes accounted on the set.
    pub memory: u64,
    /// Free GPUs the set must hold (0 when the GPUs are already fixed).
    pub gpus: u32,
    /// NICs the set must hold.
    pub nics: u32,
    /// Whether the set must contain shared-pool CPUs.
    pub shared: bool,
    /// Huge pages per size (merged, see [`hugepages::merged`](super::hugepages::merged)).
    pub hugepages: Vec<HugePageNeed>,
}

/// One node's free capacity, computed once per decision.
#[derive(Debug, Clone)]
pub struct Cap {
    /// Node id.
    pub id: u32,
    /// Free exclusive-able CPUs.
    pub avail: CpuSet,
    /// How many of them can be taken under the whole-core rule in force.
    pub cpu: u32,
    /// Free memory.
    pub mem: u64,
    /// Free GPUs.
    pub gpus: u32,
    /// Eligible NICs on the node (shared use allowed).
    pub nics: u32,
    /// Unused eligible NICs.
    pub free_nics: u32,
    /// Free CPUs a shared container may use on the node (the pool and its headroom).
    pub shared: u32,
    /// Whether the node has CPUs at all.
    pub has_cpus: bool,
    /// Free huge pages per configured size, as (size in KiB, pages); empty without pools.
    pub huge: Vec<(u64, u64)>,
}

/// Which nodes (by index) are idle GPU nodes: they hold GPUs and every one of them is free.
pub fn idle_gpu_nodes(ledger: &Ledger) -> Vec<bool> {
    let nodes = ledger.topo().numa_nodes.len();
    let (mut has, mut busy) = (vec![false; nodes], vec![false; nodes]);
    for g in 0..ledger.topo().gpus.len() {
        if let Some(i) = ledger.gpu_node(g) {
            has[i] = true;
            busy[i] |= !ledger.gpu_free(g);
        }
    }
    has.iter().zip(&busy).map(|(h, b)| *h && !*b).collect()
}

/// How many of the `idle` GPU nodes GPU set `set` opens (takes a GPU of). A symmetry of the
/// links keeps each GPU's node, so every set of a class of the reduced search opens as many.
/// No allocation: it runs for every set ranked, thousands in an exhaustive 16-GPU decision.
pub fn idle_opened(ledger: &Ledger, idle: &[bool], set: &[usize]) -> usize {
    let node = |g: &usize| ledger.gpu_node(*g);
    set.iter()
        .enumerate()
        .filter(|(j, g)| {
            let i = node(g);
            i.is_some_and(|i| idle.get(i) == Some(&true)) && !set[..*j].iter().any(|h| node(h) == i)
        })
        .count()
}

/// Free capacity of every node, by index.
pub fn caps(ledger: &Ledger, whole: bool) -> Vec<Cap> {
    caps_for(ledger, whole, false)
}

/// Free capacity of every node for an exclusive request that wants the isolated CPUs
/// (`isolated`) or any other free CPU.
pub fn caps_for(ledger: &Ledger, whole: bool, isolated: bool) -> Vec<Cap> {
    let topo = ledger.topo();
    let free = ledger.free_cpus_for(isolated);
    // A node with free shareable CPUs can hold a shared container: should all of them be
    // the exclusive headroom, recording it gives the node its pool part back.
    let pool = if isolated {
        ledger.free_cpus_for(false)
    } else {
        free.clone()
    };
    let eligible = nics::eligible(ledger);
    let free_gpus = ledger.free_gpus();
    topo.numa_nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let avail = free.intersection(&n.cpus);
            let on_node = |x: &&usize| ledger.nic_node(**x) == Some(i);
            Cap {
                id: n.id,
                cpu: cpus::capacity(topo, &avail, whole),
                avail,
                mem: ledger.free_mem(i),
                gpus: free_gpus
                    .iter()
                    .filter(|g| ledger.gpu_node(**g) == Some(i))
                    .count() as u32,
                nics: eligible.iter().filter(on_node).count() as u32,
                free_nics: eligible
                    .iter()
                    .filter(on_node)
                    .filter(|x| ledger.nic_users(**x) == 0)
                    .count() as u32,
                shared: pool.intersection_len(&n.cpus) as u32,
                has_cpus: !n.is_memory_only(),
                huge: n
                    .hugepages
                    .iter()
                    .filter(|h| h.total > 0)
                    .map(|h| (h.size_kb, ledger.free_huge(i, h.size_kb)))
                    .collect(),
            }
        })
        .collect()
}

/// Whether the nodes `set` (indices) hold `need` together.
pub fn fits(caps: &[Cap], set: &[usize], need: &Need) -> bool {
    // Memory sizes come from sysfs, an hwloc capture or a description: a sum that saturates
    // still answers "at least `need`" exactly, where a wrapping one would not.
    let sum = |f: fn(&Cap) -> u64| {
        set.iter()
            .map(|i| f(&caps[*i]))
            .fold(0u64, u64::saturating_add)
    };
    sum(|c| c.cpu as u64) >= need.cpus as u64
        && sum(|c| c.mem) >= need.memory
        && sum(|c| c.gpus as u64) >= need.gpus as u64
        && sum(|c| c.nics as u64) >= need.nics as u64
        && (!need.shared || sum(|c| c.shared as u64) > 0)
        && huge_fits(caps, set, &need.hugepages)
}

/// Sum of pairwise distances of a node set (indices): lower is closer. In u64: distances are
/// u32 and may be anything a capture says, and the sum must rank sets exactly.
pub fn spread(topo: &Topology, set: &[usize]) -> u64 {
    let mut s = 0u64;
    for (a, &i) in set.iter().enumerate() {
        for &j in &set[a + 1..] {
            s = s.saturating_add(u64::from(
                topo.distance(topo.numa_nodes[i].id, topo.numa_nodes[j].id),
            ));
        }
    }
    s
}

/// Grows `seed` (indices, kept first) with the closest allowed CPU nodes until `need` fits.
pub fn grow(
    topo: &Topology,
    caps: &[Cap],
    allowed: &[bool],
    seed: Vec<usize>,
    need: &Need,
) -> Option<Vec<usize>> {
    // Each candidate's summed distance to the set is kept up to date as members join (in
    // join order, as a fresh sum would add them), rather than summed again at every step:
    // with 64 seeds on a 64-node host that re-summing was cubic in nodes per seed.
    let mut set = seed;
    let mut member = vec![false; caps.len()];
    let mut dist = vec![0u64; caps.len()];
    let join = |dist: &mut [u64], j: usize| {
        for (i, d) in dist.iter_mut().enumerate() {
            *d = d.saturating_add(u64::from(topo.distance(caps[i].id, caps[j].id)));
        }
    };
    for &j in &set {
        member[j] = true;
        join(&mut dist, j);
    }
    loop {
        if !set.is_empty() && fits(caps, &set, need) {
            return Some(set);
        }
        let next = (0..caps.len())
            .filter(|i| allowed[*i] && caps[*i].has_cpus && !member[*i])
            .min_by_key(|&i| (dist[i], std::cmp::Reverse(caps[i].cpu), i))?;
        member[next] = true;
        join(&mut dist, next);
        set.push(next);
    }
}

/// The best node set for a request without GPUs to follow: the single node `strategy` prefers,
/// else the closest, narrowest grown set over all seeds. Indices, seed first.
pub fn choose(
    topo: &Topology,
    caps: &[Cap],
    allowed: &[bool],
    need: &Need,
    strategy: NumaChoice,
) -> Option<Vec<usize>> {
    // Per mille of a node's CPUs still free (its whole-core capacity over its CPUs).
    let free_share = |i: usize| {
        let total = topo.numa_nodes[i].cpus.len().max(1) as u64;
        u64::from(caps[i].cpu) * 1000 / total
    };
    let single = (0..caps.len())
        .filter(|i| allowed[*i] && caps[*i].has_cpus && fits(caps, &[*i], need))
        .min_by_key(|&i| {
            let c = &caps[i];
            // Keep idle GPUs' and NICs' nodes for the work that needs them first, whatever
            // the strategy; then pack tightly, fill the busiest, or spread.
            let by = match strategy {
                NumaChoice::BestFit => 0,
                NumaChoice::MostAllocated => free_share(i),
                NumaChoice::LeastAllocated => 1000 - free_share(i).min(1000),
            };
            (
                c.gpus.saturating_sub(need.gpus),
                c.free_nics.saturating_sub(need.nics),
                by,
                c.cpu - need.cpus,
                c.mem - need.memory,
                i,
            )
        });
    if let Some(i) = single {
        return Some(vec![i]);
    }
    (0..caps.len())
        .filter(|i| allowed[*i] && caps[*i].has_cpus)
        .filter_map(|seed| grow(topo, caps, allowed, vec![seed], need))
        .min_by_key(|set| {
            let cpu: u64 = set.iter().map(|i| u64::from(caps[*i].cpu)).sum();
            (set.len(), spread(topo, set), cpu, set[0])
        })
}

/// The fewest nodes that could ever hold `need` on this host (total capacity, not free): the
/// width `restricted` accepts, like the kubelet's preferred hints.
pub fn min_width(ledger: &Ledger, need: &Need) -> usize {
    let asks = [
        need.cpus as u64,
        need.memory,
        need.gpus as u64,
        need.nics as u64,
    ];
    let width = |column: &[u64], ask: u64| {
        let mut sum = 0;
        let mut width = 0;
        for c in column {
            if sum >= ask {
                break;
            }
            // Saturating: "at least the ask" stays exact past u64 (memory sizes).
            sum = u64::saturating_add(sum, *c);
            width += 1;
        }
        width
    };
    let huge = need.hugepages.iter().map(|h| {
        let topo = ledger.topo();
        let mut column: Vec<u64> = (0..topo.numa_nodes.len())
            .filter(|i| !topo.numa_nodes[*i].is_memory_only())
            .map(|i| ledger.huge_total(i, h.size_kb))
            .collect();
        column.sort_unstable_by(|a, b| b.cmp(a));
        width(&column, h.pages)
    });
    ledger
        .totals()
        .columns
        .iter()
        .zip(asks)
        .map(|(column, ask)| width(column, ask))
        .chain(huge)
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The allowed node that comes closest to holding `need` alone, for rejection messages.
pub fn best_offer(caps: &[Cap], allowed: &[bool], need: &Need) -> NodeOffer {
    // In u128: `want` is a memory limit from the container, up to 2^63.
    let ratio = |have: u64, want: u64| {
        (u128::from(have.min(want)) * 1000)
            .checked_div(u128::from(want))
            .map_or(1000, |r| r as u64)
    };
    let best = (0..caps.len())
        .filter(|i| allowed[*i] && caps[*i].has_cpus)
        .max_by_key(|&i| {
            let c = &caps[i];
            let r = [
                ratio(c.cpu as u64, need.cpus as u64),
                ratio(c.mem, need.memory),
                ratio(c.gpus as u64, need.gpus as u64),
                ratio(c.nics as u64, need.nics as u64),
            ];
            let huge = need
                .hugepages
                .iter()
                .map(|h| ratio(huge_free_on(c, h.size_kb), h.pages));
            let all = r.into_iter().chain(huge);
            (
                all.clone().filter(|x| *x == 1000).count(),
                all.sum::<u64>(),
                std::cmp::Reverse(i),
            )
        });
    best.map(|i| {
        let c = &caps[i];
        NodeOffer {
            node: c.id,
            cpus: c.cpu,
            memory_bytes: c.mem,
            gpus: c.gpus,
            nics: c.free_nics,
            nics_in_use: c.nics.saturating_sub(c.free_nics),
            hugepages: need
                .hugepages
                .iter()
                .map(|h| (h.size_kb, huge_free_on(c, h.size_kb)))
                .collect(),
        }
    })
    .unwrap_or_default()
}

/// Memory-only nodes whose closest CPU node is in `nodes` (HBM, CXL, GPU memory). Nodes without
/// memory are left out: the kernel refuses a `cpuset.mems` naming a node outside N_MEMORY, and a
/// GB200 in NUMA mode has 28 such placeholder nodes.
pub fn attached_memory_nodes(topo: &Topology, nodes: &NodeSet) -> NodeSet {
    let cpu_nodes = topo.cpu_nodes();
    topo.numa_nodes
        .iter()
        .filter(|m| m.is_memory_only() && m.memory_bytes > 0)
        .filter(|m| {
            cpu_nodes
                .iter()
                .min_by_key(|c| (topo.distance(m.id, *c), *c))
                .is_some_and(|c| nodes.contains(c))
        })
        .map(|m| m.id)
        .collect()
}

// Huge pages per node: read from each node's capacity, as its CPUs and memory are.

/// Free pages of `size_kb` on a node's capacity.
pub fn huge_free_on(cap: &Cap, size_kb: u64) -> u64 {
    cap.huge
        .iter()
        .find(|(s, _)| *s == size_kb)
        .map_or(0, |(_, free)| *free)
}

/// Whether nodes `set` (indices into `caps`) hold every need together.
pub fn huge_fits(caps: &[Cap], set: &[usize], needs: &[HugePageNeed]) -> bool {
    needs.iter().all(|n| {
        set.iter()
            .map(|i| huge_free_on(&caps[*i], n.size_kb))
            .fold(0u64, u64::saturating_add)
            >= n.pages
    })
}

/// The first need the nodes `set` cannot hold, with what they have free.
pub fn huge_short(
    caps: &[Cap],
    set: &[usize],
    needs: &[HugePageNeed],
) -> Option<(HugePageNeed, u64)> {
    needs.iter().find_map(|n| {
        let free = set
            .iter()
            .map(|i| huge_free_on(&caps[*i], n.size_kb))
            .fold(0u64, u64::saturating_add);
        (free < n.pages).then_some((*n, free))
    })
}

/// Splits every need over the nodes at `order` (indices into `caps`), filling each in turn:
/// the first node's pages first, as the kernel's local allocation would. `None` when the nodes
/// do not hold them.
pub fn huge_split(
    caps: &[Cap],
    order: &[usize],
    needs: &[HugePageNeed],
) -> Option<Vec<HugePagesHeld>> {
    let mut held = Vec::new();
    for n in needs {
        let mut left = n.pages;
        for &i in order {
            if left == 0 {
                break;
            }
            let take = left.min(huge_free_on(&caps[i], n.size_kb));
            if take > 0 {
                held.push(HugePagesHeld {
                    node: caps[i].id,
                    size_kb: n.size_kb,
                    pages: take,
                });
                left -= take;
            }
        }
        if left > 0 {
            return None;
        }
    }
    Some(held)
}

#[cfg(test)]
#[path = "numa_tests.rs"]
mod tests;
