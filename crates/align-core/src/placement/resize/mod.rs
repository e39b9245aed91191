//! In-place resize of a running container's exclusive CPUs: which CPUs a grow adds and which a
//! shrink gives back, keeping what the container holds. Re-deciding from scratch would move the
//! workload's threads and caches at every resize; the kubelet's static CPU manager keeps the
//! CPUs a Guaranteed pod holds when it resizes it (KEP-5554), and so does this.
//!
//! Pure: the CPUs held, the free ones and the topology in, a set of CPUs out. The allocator
//! (`Allocator::plan_resize`) turns the answer into a decision and its refusals into messages.

use super::cpus;
use super::policy::ResizeShrink;
use crate::topology::{CpuSet, NodeSet, Topology};

/// What a container holds, as its record remembers it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    /// Its exclusive CPUs now.
    pub cpus: CpuSet,
    /// The CPUs it was admitted with (a subset of `cpus` unless a shrink went below them).
    pub admitted: CpuSet,
    /// The CPUs added since admission, oldest first (the order a shrink reverses).
    pub added: Vec<u32>,
}

impl Holding {
    /// A container holding `cpus` since its admission (nothing added).
    pub fn admitted_with(cpus: &CpuSet) -> Self {
        Self {
            cpus: cpus.clone(),
            admitted: cpus.clone(),
            added: Vec::new(),
        }
    }

    /// What it holds once `cpus` are its CPUs: the CPUs new to it appended to `added` in id
    /// order, the ones it gave back dropped from `added` and `admitted`.
    pub fn after(&self, cpus: &CpuSet) -> Self {
        let mut added: Vec<u32> = self
            .added
            .iter()
            .copied()
            .filter(|c| cpus.contains(*c))
            .collect();
        added.extend(cpus.difference(&self.cpus).iter());
        Self {
            cpus: cpus.clone(),
            admitted: self.admitted.intersection(cpus),
            added,
        }
    }
}

/// Where a grow may add CPUs.
#[derive(Debug, Clone, Copy)]
pub struct GrowRoom<'a> {
    /// Free CPUs of the container's kind (isolated ones only for an isolated container).
    pub free: &'a CpuSet,
    /// The shared pool: CPUs outside it (the exclusive headroom) are taken first, so the grow
    /// moves no shared container when the headroom holds it.
    pub pool: &'a CpuSet,
    /// Nodes it may add CPUs on; `None`: any, nearest first.
    pub within: Option<&'a NodeSet>,
    /// Whole cores only (`full_pcpus_only`).
    pub whole_only: bool,
}

/// The nodes a grow takes CPUs from, in order: those the container holds CPUs on (most held
/// first), then the others by their distance to those (sum over the held nodes, then id),
/// restricted to `within` when given.
pub fn nearest_nodes(topo: &Topology, held: &CpuSet, within: Option<&NodeSet>) -> Vec<u32> {
    let mut count: Vec<(u32, usize)> = Vec::new();
    for id in held.iter() {
        let Some(node) = node_of(topo, id) else {
            continue;
        };
        match count.iter_mut().find(|(n, _)| *n == node) {
            Some((_, c)) => *c += 1,
            None => count.push((node, 1)),
        }
    }
    count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut order: Vec<u32> = count.iter().map(|(n, _)| *n).collect();
    let mut rest: Vec<(u32, u32)> = topo
        .numa_nodes
        .iter()
        .filter(|n| !n.is_memory_only() && !order.contains(&n.id))
        .map(|n| {
            let d: u32 = order.iter().map(|h| topo.distance(*h, n.id)).sum();
            (d, n.id)
        })
        .collect();
    rest.sort_unstable();
    order.extend(rest.into_iter().map(|(_, n)| n));
    order.retain(|n| within.map_or(true, |w| w.contains(*n)));
    order
}

/// The CPUs to add to `held` so it has `more` more: first the free threads of cores it holds
/// part of (its cores stay whole), then free CPUs of its own nodes, then of the nearest ones
/// (whole cores and one L3 group first, as at admission). `None` when `room` cannot hold them.
pub fn grow(topo: &Topology, held: &CpuSet, more: u32, room: GrowRoom) -> Option<CpuSet> {
    let order = nearest_nodes(topo, held, room.within);
    let mut out = CpuSet::new();
    let mut left = more;
    if !room.whole_only {
        for id in held.iter() {
            let Some(c) = topo.cpus.iter().find(|c| c.id == id) else {
                continue;
            };
            for s in c.thread_siblings.iter() {
                let node_ok = node_of(topo, s).is_some_and(|n| order.contains(&n));
                if left > 0 && node_ok && room.free.contains(s) && !out.contains(s) {
                    out.insert(s);
                    left -= 1;
                }
            }
        }
    }
    let avail: Vec<CpuSet> = order
        .iter()
        .filter_map(|n| topo.node(*n))
        .map(|n| room.free.intersection(&n.cpus).difference(&out))
        .collect();
    out.extend_from(&cpus::pick_outside(
        topo,
        avail.iter(),
        room.pool,
        left,
        room.whole_only,
    )?);
    Some(out)
}

/// Why a shrink cannot give back what it is asked to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShrinkShort {
    /// The most CPUs it could give back under the mode.
    pub can_give: u32,
}

/// The CPUs `held` gives back to have `fewer` fewer: those added since admission, newest first;
/// with [`ResizeShrink::Any`], then the admitted ones farthest from `anchors` (the nodes of its
/// devices, or of most of its CPUs when it has none). With `whole_only` a core goes back whole.
pub fn shrink(
    topo: &Topology,
    held: &Holding,
    fewer: u32,
    mode: ResizeShrink,
    anchors: &NodeSet,
    whole_only: bool,
) -> Result<CpuSet, ShrinkShort> {
    let mut order: Vec<u32> = held
        .added
        .iter()
        .rev()
        .copied()
        .filter(|c| held.cpus.contains(*c))
        .collect();
    if mode == ResizeShrink::Any {
        let mut rest: Vec<u32> = held.cpus.iter().filter(|c| !order.contains(c)).collect();
        let anchors = if anchors.is_empty() {
            nearest_nodes(topo, &held.cpus, None)
                .first()
                .map(|n| NodeSet::from_iter([*n]))
                .unwrap_or_default()
        } else {
            anchors.clone()
        };
        let far = |c: u32| -> u32 {
            let node = node_of(topo, c).unwrap_or(u32::MAX);
            anchors
                .iter()
                .map(|a| topo.distance(node, a))
                .min()
                .unwrap_or(0)
        };
        rest.sort_by(|a, b| far(*b).cmp(&far(*a)).then(b.cmp(a)));
        order.extend(rest);
    }
    let mut out = CpuSet::new();
    let mut left = fewer;
    let mut can_give = 0u32;
    for id in order {
        if out.contains(id) {
            continue;
        }
        let group: CpuSet = if whole_only {
            siblings(topo, id).intersection(&held.cpus).difference(&out)
        } else {
            [id].into_iter().collect()
        };
        let n = group.len() as u32;
        can_give += n;
        if n <= left {
            out.extend_from(&group);
            left -= n;
        }
    }
    if left > 0 {
        return Err(ShrinkShort {
            can_give: can_give.min(held.cpus.len() as u32),
        });
    }
    Ok(out)
}

fn node_of(topo: &Topology, cpu: u32) -> Option<u32> {
    topo.cpus.iter().find(|c| c.id == cpu).map(|c| c.numa_node)
}

fn siblings(topo: &Topology, cpu: u32) -> CpuSet {
    topo.cpus.iter().find(|c| c.id == cpu).map_or_else(
        || [cpu].into_iter().collect(),
        |c| c.thread_siblings.clone(),
    )
}

mod plan;

#[cfg(test)]
mod tests;
