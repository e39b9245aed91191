//! `pick` against the straightforward form it replaced (a map of L3 groups and every whole
//! core collected before any is taken): the faster walk must choose the same CPUs. Both take
//! the groups in [`best_fit`] order.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::topology::testing::TopologyBuilder;

fn reference_pick(
    topo: &Topology,
    avail_by_node: &[CpuSet],
    k: u32,
    whole_only: bool,
) -> Option<CpuSet> {
    pick_with(topo, avail_by_node, k, whole_only, reference_in_node)
}

fn reference_cpu(topo: &Topology, id: u32) -> Option<&Cpu> {
    topo.cpus.iter().find(|c| c.id == id)
}

fn reference_in_node(topo: &Topology, avail: &CpuSet, k: u32, whole_only: bool) -> CpuSet {
    let mut groups: BTreeMap<u32, CpuSet> = BTreeMap::new();
    for id in avail.iter() {
        let g = reference_cpu(topo, id)
            .and_then(|c| c.l3_group)
            .unwrap_or(u32::MAX);
        groups.entry(g).or_default().insert(id);
    }
    let mut caps: Vec<(u32, u32)> = groups
        .iter()
        .map(|(g, s)| (*g, capacity(topo, s, whole_only)))
        .collect();
    let mut out = CpuSet::new();
    let mut left = k;
    while left > 0 && !caps.is_empty() {
        // The group order is the one rule both forms share; what differs is how the groups
        // and whole cores are collected.
        let (g, cap) = caps.swap_remove(best_fit(&caps, left));
        let take = left.min(cap);
        if take == 0 {
            break;
        }
        out.extend_from(&reference_from_group(topo, &groups[&g], take, whole_only));
        left -= take;
    }
    out
}

fn reference_from_group(topo: &Topology, avail: &CpuSet, n: u32, whole_only: bool) -> CpuSet {
    let mut whole: Vec<CpuSet> = Vec::new();
    let mut partial: Vec<u32> = Vec::new();
    let mut seen = CpuSet::new();
    for id in avail.iter() {
        if seen.contains(id) {
            continue;
        }
        let sib = reference_cpu(topo, id)
            .map_or_else(|| [id].into_iter().collect(), |c| c.thread_siblings.clone());
        seen.extend_from(&sib);
        if sib.is_subset(avail) {
            whole.push(sib);
        } else {
            partial.extend(sib.intersection(avail).iter());
        }
    }
    let mut out = CpuSet::new();
    let mut left = n as usize;
    let mut split = Vec::new();
    for core in whole {
        if left == 0 {
            break;
        }
        if core.len() <= left {
            left -= core.len();
            out.extend_from(&core);
        } else {
            split.push(core);
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

proptest! {
    #[test]
    fn pick_chooses_what_the_plain_form_chooses(
        threads in 1u32..=2,
        l3 in 1u32..=3,
        free in proptest::collection::vec(any::<bool>(), 96),
        order in proptest::collection::vec(0usize..4, 1..=4),
        k in 0u32..=40,
        whole_only in any::<bool>(),
    ) {
        // 4 nodes of 12 cores; with SMT a core's second thread is 48 ids further, so L3
        // groups and cores both interleave in id order.
        let topo = TopologyBuilder::new()
            .sockets(2)
            .numa_per_socket(2)
            .cores(12)
            .threads(threads)
            .l3_per_numa(l3)
            .build();
        let avail: CpuSet = topo
            .cpus
            .iter()
            .filter(|c| free[c.id as usize % free.len()])
            .map(|c| c.id)
            .collect();
        let by_node: Vec<CpuSet> = order
            .iter()
            .map(|i| avail.intersection(&topo.numa_nodes[*i].cpus))
            .collect();
        prop_assert_eq!(
            pick(&topo, &by_node, k, whole_only),
            reference_pick(&topo, &by_node, k, whole_only)
        );
    }
}
