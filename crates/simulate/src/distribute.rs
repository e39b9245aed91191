//! The kubelet CPU manager's `distribute-cpus-across-numa` policy option (KEP-2902), for the
//! kubelet baseline: exclusive CPUs spread evenly over the fewest NUMA nodes that can take an
//! even share, rather than packed onto the first.
//!
//! Modelled on `takeByTopologyNUMADistributed` and `rangeNUMANodesNeededToSatisfy` in
//! kubernetes/kubernetes `pkg/kubelet/cm/cpumanager/cpu_assignment.go`: for k = the fewest
//! nodes that could hold the request up to the most, every k-combination of the nodes with free
//! CPUs (sorted by free CPUs ascending, then id, as the accumulator sorts them) that can give
//! each an even share `⌊n/k/g⌋·g` (g = the CPU group size: the threads per core under
//! `full-pcpus-only`, else 1) is scored by the standard deviation of the free CPUs every node
//! would have left, the remainder striped in groups of g over the best subset of the combo;
//! the first combo with the lowest score wins. Within a node the CPUs are taken as the
//! baseline's packed take does. A count not divisible by g, or no combo that balances, falls
//! back to the packed take, as in the kubelet.

use align_core::topology::{CpuSet, Topology};

/// `k` CPUs of `avail` distributed over NUMA nodes, or `None` where the kubelet falls back to
/// its packed take. `take_in` takes CPUs from one node's free CPUs (the packed take).
pub fn take_distributed(
    topo: &Topology,
    avail: &CpuSet,
    k: u32,
    group: u32,
    take_in: impl Fn(&CpuSet, u32) -> CpuSet,
) -> Option<CpuSet> {
    let group = group.max(1);
    if k == 0 || k % group != 0 || (avail.len() as u32) < k {
        return None;
    }
    // Free CPUs per node with any, sorted by free CPUs ascending, then id.
    let mut numas: Vec<CpuSet> = topo
        .numa_nodes
        .iter()
        .map(|n| avail.intersection(&n.cpus))
        .filter(|s| !s.is_empty())
        .collect();
    numas.sort_by_key(|s| s.len());
    let free: Vec<u32> = numas.iter().map(|s| s.len() as u32).collect();
    let (min, max) = range_needed(topo, numas.len(), k, group);
    for width in min..=max {
        let Some((combo, rest)) = best_combo(&free, width, k, group) else {
            continue;
        };
        let share = k / width as u32 / group * group;
        let mut left: Vec<CpuSet> = numas.clone();
        let mut out = CpuSet::new();
        for i in &combo {
            let got = take_in(&left[*i], share);
            left[*i] = left[*i].difference(&got);
            out.extend_from(&got);
        }
        let mut remainder = k - share * width as u32;
        while remainder > 0 {
            let before = remainder;
            for i in &rest {
                if remainder == 0 {
                    break;
                }
                if (left[*i].len() as u32) < group {
                    continue;
                }
                let got = take_in(&left[*i], group);
                left[*i] = left[*i].difference(&got);
                out.extend_from(&got);
                remainder -= group;
            }
            if remainder == before {
                return None;
            }
        }
        return Some(out);
    }
    None
}

/// `rangeNUMANodesNeededToSatisfy`: the fewest nodes (the host's CPU groups spread evenly over
/// its nodes, rounded up) and the most (groups needed, at most the nodes with free CPUs).
fn range_needed(topo: &Topology, available_nodes: usize, k: u32, group: u32) -> (usize, usize) {
    let nodes = topo
        .numa_nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .count()
        .max(1) as u32;
    let cpus = (topo.cpus.len() as u32).max(1);
    let groups = (cpus - 1) / group + 1;
    let per_node = (groups - 1) / nodes + 1;
    let needed = (k - 1) / group + 1;
    let min = ((needed - 1) / per_node + 1) as usize;
    let max = (needed as usize).min(available_nodes);
    (min, max)
}

/// The combo of `width` nodes (indices into `free`) with the best balance, and the subset of
/// it that takes the remainder; `None` when no combo can take an even share.
fn best_combo(free: &[u32], width: usize, k: u32, group: u32) -> Option<(Vec<usize>, Vec<usize>)> {
    let share = k / width as u32 / group * group;
    let mut best: Option<(f64, Vec<usize>, Vec<usize>)> = None;
    for combo in combinations(free.len(), width) {
        if best.as_ref().is_some_and(|(b, _, _)| *b == 0.0) {
            break;
        }
        let total: u32 = combo.iter().map(|i| free[*i]).sum();
        let groups: u32 = combo.iter().map(|i| free[*i] / group).sum();
        if total < k || groups * group < k || combo.iter().any(|i| free[*i] < share) {
            continue;
        }
        let mut after: Vec<u32> = free.to_vec();
        for i in &combo {
            after[*i] -= share;
        }
        let remainder = k - share * width as u32;
        let (balance, rest) = if remainder == 0 {
            (deviation(&after), Vec::new())
        } else {
            let eligible: Vec<usize> = combo
                .iter()
                .copied()
                .filter(|i| after[*i] >= group)
                .collect();
            best_remainder(&after, &eligible, remainder, group)
        };
        if best.as_ref().map_or(true, |(b, _, _)| balance < *b) {
            best = Some((balance, combo, rest));
        }
    }
    best.filter(|(b, _, _)| b.is_finite())
        .map(|(_, c, r)| (c, r))
}

/// The subset of `eligible` whose striping of `remainder` in groups leaves the best balance
/// (larger subsets first, as the kubelet walks them); infinite when none can take it.
fn best_remainder(
    after: &[u32],
    eligible: &[usize],
    remainder: u32,
    group: u32,
) -> (f64, Vec<usize>) {
    let mut best = (f64::INFINITY, Vec::new());
    for width in (1..=eligible.len()).rev() {
        for pick in combinations(eligible.len(), width) {
            let subset: Vec<usize> = pick.iter().map(|p| eligible[*p]).collect();
            let mut left = after.to_vec();
            let room: u32 = subset.iter().map(|i| left[*i]).sum();
            if room < remainder {
                continue;
            }
            let mut r = remainder;
            while r > 0 {
                let before = r;
                for i in &subset {
                    if r == 0 {
                        break;
                    }
                    if left[*i] >= group {
                        left[*i] -= group;
                        r -= group;
                    }
                }
                if r == before {
                    break;
                }
            }
            if r > 0 {
                continue;
            }
            let balance = deviation(&left);
            if balance < best.0 {
                best = (balance, subset);
            }
        }
    }
    best
}

/// Population standard deviation, as the kubelet's `standardDeviation`.
fn deviation(values: &[u32]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|v| (f64::from(*v) - mean).powi(2))
        .sum::<f64>()
        / n;
    var.sqrt()
}

/// Every `k`-subset of `0..n` in lexicographic order (`iterateCombinations`).
fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    if k == 0 || k > n {
        return out;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        out.push(idx.clone());
        let Some(i) = (0..k).rev().find(|i| idx[*i] != *i + n - k) else {
            return out;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

#[cfg(test)]
#[path = "distribute_tests.rs"]
mod tests;
