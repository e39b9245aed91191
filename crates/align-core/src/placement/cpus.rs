//! Choosing exclusive CPUs inside a chosen node set: whole cores before SMT siblings, one L3
//! (uncore) group before spreading over several, best-fit group first. Linear in CPUs.

use crate::topology::{Cpu, CpuSet, Topology};

/// Hardware threads per core (the largest sibling set; 1 without SMT).
pub fn threads_per_core(topo: &Topology) -> u32 {
    topo.cpus
        .iter()
        .map(|c| c.thread_siblings.len() as u32)
        .max()
        .unwrap_or(1)
        .max(1)
}

fn cpu(topo: &Topology, id: u32) -> Option<&Cpu> {
    // CPU ids are dense on nearly every host, so the id is usually the index: try it before
    // searching (this runs for every free CPU of a node at each exclusive decision).
    match topo.cpus.get(id as usize) {
        Some(c) if c.id == id => Some(c),
        _ => topo
            .cpus
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .map(|i| &topo.cpus[i]),
    }
}

/// CPUs of `avail` whose whole core (every sibling) is in `avail`.
pub fn whole_cores(topo: &Topology, avail: &CpuSet) -> CpuSet {
    avail
        .iter()
        .filter(|id| cpu(topo, *id).map_or(true, |c| c.thread_siblings.is_subset(avail)))
        .collect()
}

/// How many CPUs could be taken from `avail` (whole cores only when `whole_only`).
pub fn capacity(topo: &Topology, avail: &CpuSet, whole_only: bool) -> u32 {
    if whole_only {
        whole_cores(topo, avail).len() as u32
    } else {
        avail.len() as u32
    }
}

/// The shared CPUs a container bound to NUMA `nodes` runs on: the shared `pool` on those
/// nodes, or the whole pool when `nodes` is empty (nothing to align) or has no pool CPU left
/// (better somewhere than nowhere). The one place this is derived: the allocator for a new
/// shared container, the engine when the pool moves under running ones.
pub fn shared_on(topo: &Topology, pool: &CpuSet, nodes: &crate::topology::NodeSet) -> CpuSet {
    let mut local = CpuSet::new();
    for id in nodes.iter() {
        if let Some(n) = topo.node(id) {
            local.extend_from(&pool.intersection(&n.cpus));
        }
    }
    if local.is_empty() {
        pool.clone()
    } else {
        local
    }
}

/// Takes `k` CPUs from `avail_by_node` (free CPUs of each chosen node, in preference order),
/// filling the first node before the next. `None` when they do not hold `k`.
pub fn pick<'a>(
    topo: &Topology,
    avail_by_node: impl IntoIterator<Item = &'a CpuSet>,
    k: u32,
    whole_only: bool,
) -> Option<CpuSet> {
    pick_with(topo, avail_by_node, k, whole_only, pick_in_node)
}

/// [`pick`], taking each node's share from its free CPUs outside the shared `pool` (the
/// exclusive headroom) when they hold it: then the allocation moves no shared container. How
/// many CPUs come from each node is [`pick`]'s; only which ones changes. When the headroom of
/// a node cannot hold its share, that share is picked among all the node's free CPUs as
/// [`pick`] does (the pool moves anyway, and the headroom is refilled in the same move).
pub fn pick_outside<'a>(
    topo: &Topology,
    avail_by_node: impl IntoIterator<Item = &'a CpuSet>,
    pool: &CpuSet,
    k: u32,
    whole_only: bool,
) -> Option<CpuSet> {
    pick_with(
        topo,
        avail_by_node,
        k,
        whole_only,
        |topo, avail, take, whole| take_outside(topo, avail, pool, take, whole),
    )
}

/// Takes `shares[j]` CPUs from the `j`th of `avail_by_node`, each node's share picked as
/// [`pick_outside`] picks it (headroom first, whole cores, best-fit L3 group): the split
/// `cpu_spread` asked for (see `placement::spread`). `None` when a node cannot give its share.
pub fn pick_shares_outside(
    topo: &Topology,
    avail_by_node: &[&CpuSet],
    shares: &[u32],
    pool: &CpuSet,
    whole_only: bool,
) -> Option<CpuSet> {
    let mut out = CpuSet::new();
    for (avail, take) in avail_by_node.iter().zip(shares) {
        if *take == 0 {
            continue;
        }
        if capacity(topo, avail, whole_only) < *take {
            return None;
        }
        out.extend_from(&take_outside(topo, avail, pool, *take, whole_only));
    }
    Some(out)
}

/// `take` CPUs of one node: from its free CPUs outside the shared `pool` when they hold them,
/// else from all its free CPUs.
fn take_outside(topo: &Topology, avail: &CpuSet, pool: &CpuSet, take: u32, whole: bool) -> CpuSet {
    let spare = avail.difference(pool);
    if capacity(topo, &spare, whole) >= take {
        pick_in_node(topo, &spare, take, whole)
    } else {
        pick_in_node(topo, avail, take, whole)
    }
}

/// [`pick`] with the way one node's CPUs are taken given (the tests give the straightforward
/// form the walk replaced).
fn pick_with<'a>(
    topo: &Topology,
    avail_by_node: impl IntoIterator<Item = &'a CpuSet>,
    k: u32,
    whole_only: bool,
    in_node: impl Fn(&Topology, &CpuSet, u32, bool) -> CpuSet,
) -> Option<CpuSet> {
    let mut out = CpuSet::new();
    let mut left = k;
    for avail in avail_by_node {
        if left == 0 {
            break;
        }
        let take = left.min(capacity(topo, avail, whole_only));
        if take > 0 {
            out.extend_from(&in_node(topo, avail, take, whole_only));
            left -= take;
        }
    }
    (left == 0).then_some(out)
}

/// Takes `k` CPUs from one node's free CPUs: the best-fitting L3 group that holds them all,
/// else the fewest groups (largest first, best fit for the rest).
fn pick_in_node(topo: &Topology, avail: &CpuSet, k: u32, whole_only: bool) -> CpuSet {
    // A node has a handful of L3 groups and its CPUs come grouped in id order, so a short
    // list searched from its last entry beats a map looked up for every CPU.
    let mut groups: Vec<(u32, CpuSet)> = Vec::new();
    for id in avail.iter() {
        let g = cpu(topo, id).and_then(|c| c.l3_group).unwrap_or(u32::MAX);
        match groups.iter_mut().rev().find(|(key, _)| *key == g) {
            Some((_, set)) => {
                set.insert(id);
            }
            None => groups.push((g, [id].into_iter().collect())),
        }
    }
    let mut caps: Vec<(u32, u32)> = groups
        .iter()
        .map(|(g, s)| (*g, capacity(topo, s, whole_only)))
        .collect();
    let mut out = CpuSet::new();
    let mut left = k;
    while left > 0 && !caps.is_empty() {
        let (g, cap) = caps.swap_remove(best_fit(&caps, left));
        let take = left.min(cap);
        if take == 0 {
            break;
        }
        let Some((_, group)) = groups.iter().find(|(key, _)| *key == g) else {
            break;
        };
        out.extend_from(&take_from_group(topo, group, take, whole_only));
        left -= take;
    }
    out
}

/// Takes `n` CPUs from one group: whole free cores first (lowest ids), then threads of cores
/// that are already partly allocated, then splits a free core.
fn take_from_group(topo: &Topology, avail: &CpuSet, n: u32, whole_only: bool) -> CpuSet {
    let mut out = CpuSet::new();
    let mut left = n as usize;
    // Whole cores too big for what is left, split only when nothing partial is there.
    let mut split: Vec<CpuSet> = Vec::new();
    let mut partial: Vec<u32> = Vec::new();
    let mut seen = CpuSet::new();
    for id in avail.iter() {
        if left == 0 {
            // Whole cores in id order filled the request: the rest cannot change the answer
            // (partial threads and split cores are only ever taken after every whole core).
            return out;
        }
        if seen.contains(id) {
            continue;
        }
        let alone;
        let sib = match cpu(topo, id) {
            Some(c) => &c.thread_siblings,
            None => {
                alone = [id].into_iter().collect::<CpuSet>();
                &alone
            }
        };
        seen.extend_from(sib);
        if sib.is_subset(avail) {
            if sib.len() <= left {
                left -= sib.len();
                out.extend_from(sib);
            } else {
                split.push(sib.clone());
            }
        } else {
            partial.extend(sib.iter().filter(|x| avail.contains(*x)));
        }
    }
    if !whole_only {
        partial.sort_unstable();
        for id in partial
            .into_iter()
            .chain(split.iter().flat_map(|c| c.iter()))
        {
            if left == 0 {
                break;
            }
            if out.insert(id) {
                left -= 1;
            }
        }
    }
    out
}

/// Which of the L3 groups `caps` (group, CPUs it can give) to take from next, for `left` CPUs.
/// Best fit: the smallest group that holds the rest keeps big groups whole for later; when
/// none does, the largest (lowest id first), so the fewest groups are split.
fn best_fit(caps: &[(u32, u32)], left: u32) -> usize {
    let fit = caps
        .iter()
        .enumerate()
        .filter(|(_, (_, cap))| *cap >= left)
        .min_by_key(|(_, (g, cap))| (*cap, *g))
        .map(|(i, _)| i);
    fit.unwrap_or_else(|| {
        caps.iter()
            .enumerate()
            .max_by_key(|(_, (g, cap))| (*cap, std::cmp::Reverse(*g)))
            .map_or(0, |(i, _)| i)
    })
}

#[cfg(test)]
#[path = "cpus_tests.rs"]
mod tests;
