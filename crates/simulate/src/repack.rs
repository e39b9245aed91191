//! The repacking check of `simulate --churn` (its "refused, fit if moved" column): whether the
//! pods a strategy was running, plus one it refused, can be packed under single-numa-node with
//! every running pod free to move (each pod whole on one NUMA node; per node, its
//! exclusive-able CPUs, memory, GPUs and NICs). No link scores: feasibility only. The node
//! capacities and pod demands here are also the offline optimum's ([`super::optimum`]).
//!
//! The rules are the looser of the two strategies' where they differ, so that a state either
//! strategy can reach is one this reference accepts: CPUs as the kubelet counts them (every CPU
//! but the reserved ones; nri-align also keeps one for the shared pool), NICs as nri-align
//! counts them (shared: a node serves a pod asking n NICs when it has n eligible NICs; the
//! kubelet's per-NIC hints count unused NICs only, [`NicRule::Exclusive`]), loosened further
//! where the kubelet's NIC device plugin is looser ([`loosen_nics`]: n VFs of a node's NICs,
//! or with the shared plugin any node while the host has n RDMA NICs).
//!
//! The check is exact: a depth-first search over the pods, largest first, each into every node
//! it fits, with identical pods kept in node order and nodes left in the same state tried once.
//! A bound on the nodes of that search ([`SEARCH_BOUND`]) keeps it from blowing up; a check
//! that reaches it counts as not fitting, and is counted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::workload::{bytes, cpu_milli};
use super::{PodSpec, Workload};
use align_core::placement::ledger::Ledger;
use align_core::placement::numa;
use align_core::placement::policy::PlacementConfig;
use align_core::topology::Topology;

/// Search nodes one admission check may visit before it gives up (counted as refused).
pub const SEARCH_BOUND: u64 = 200_000;

/// How NICs count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicRule {
    /// nri-align's: NICs are shared between containers; a node serves a pod asking `n` NICs
    /// when it has `n` eligible NICs, whatever else uses them.
    Shared,
    /// The kubelet baseline's hints: a NIC serves one pod.
    Exclusive,
}

/// What one pod asks of its node, or what one node holds: CPUs, memory bytes, GPUs, NICs.
pub type Amounts = [u64; 4];

/// The answer of one packing check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// Every pod has a node.
    Fits,
    /// No packing exists.
    Full,
    /// The search reached its bound first.
    Bound,
}

/// The capacity of every NUMA node with CPUs under `config` (reserved CPUs out; whole cores
/// only when `full_pcpus_only`), nothing placed.
pub fn bins(topo: Arc<Topology>, config: &PlacementConfig) -> Vec<Amounts> {
    let ledger = Ledger::new(topo, config.reserved_cpus.clone());
    numa::caps(&ledger, config.full_pcpus_only)
        .into_iter()
        .filter(|c| c.has_cpus)
        .map(|c| {
            [
                u64::from(c.cpu),
                c.mem,
                u64::from(c.gpus),
                u64::from(c.nics),
            ]
        })
        .collect()
}

/// `bins` (from [`bins`]) with the NIC amount of each node loosened to the looser of
/// nri-align's rule (n NICs on the node, [`NicRule::Shared`]) and the kubelet's under
/// `plugin`, so that a state either strategy reaches fits: with VFs, a node serves a pod
/// asking n units when its NICs have n VFs (n free VFs is the kubelet's own, tighter, rule);
/// with the shared plugin's node-less units, any node does while the host has n RDMA NICs
/// (the churn never asks more; `rdmaHcaMax` bounds the host's units, far above).
pub fn loosen_nics(bins: &mut [Amounts], plugin: super::NicPlugin) {
    let host: u64 = bins.iter().map(|b| b[3]).sum();
    for b in bins.iter_mut() {
        b[3] = match plugin {
            super::NicPlugin::PerNic => b[3],
            super::NicPlugin::Sriov { vfs_per_pf } => b[3] * u64::from(vfs_per_pf.max(1)),
            super::NicPlugin::Shared { .. } => host,
        };
    }
}

/// What pod `pod` asks of its one node: the sum over its containers of their whole CPUs
/// (exclusive: a Guaranteed request of whole CPUs, as every churn pod's), memory, GPUs and
/// NICs. A fractional CPU request runs on the shared pool and counts no CPU.
pub fn demand(pod: &PodSpec) -> Amounts {
    let mut d = [0u64; 4];
    for c in &pod.containers {
        let milli = c.cpu.as_ref().and_then(cpu_milli).unwrap_or(0);
        if milli % 1000 == 0 {
            d[0] += milli / 1000;
        }
        d[1] += c.memory.as_ref().and_then(bytes).unwrap_or(0);
        d[2] += u64::from(c.gpus);
        d[3] += u64::from(c.nics);
    }
    d
}

/// Whether `item` fits in the free amounts `free` of a node whose NIC total is `nics`.
fn fits(free: &Amounts, nics: u64, item: &Amounts, rule: NicRule) -> bool {
    free[..3].iter().zip(&item[..3]).all(|(f, x)| x <= f)
        && match rule {
            NicRule::Shared => item[3] <= nics,
            NicRule::Exclusive => item[3] <= free[3],
        }
}

/// Whether `items` can all be packed into `bins`, visiting at most `budget` search nodes.
pub fn pack(bins: &[Amounts], items: &[Amounts], rule: NicRule, budget: u64) -> Packing {
    let mut items = items.to_vec();
    // Largest first; identical pods end up next to each other.
    items.sort_unstable_by(|a, b| (b[2], b[0], b[1], b[3]).cmp(&(a[2], a[0], a[1], a[3])));
    let dims = if rule == NicRule::Shared { 3 } else { 4 };
    // What the pods from i on need in all, per resource, against what the nodes have free.
    let mut rest = vec![[0u64; 4]; items.len() + 1];
    for i in (0..items.len()).rev() {
        for k in 0..4 {
            rest[i][k] = rest[i + 1][k].saturating_add(items[i][k]);
        }
    }
    let total = |bins: &[Amounts], k: usize| bins.iter().map(|b| b[k]).fold(0, u64::saturating_add);
    if (0..dims).any(|k| rest[0][k] > total(bins, k)) {
        return Packing::Full;
    }
    let mut s = Search {
        items: &items,
        rest: &rest,
        nics: bins.iter().map(|b| b[3]).collect(),
        free: bins.to_vec(),
        placed: vec![0; items.len()],
        rule,
        dims,
        visited: 0,
        budget,
    };
    match s.dfs(0) {
        Some(true) => Packing::Fits,
        Some(false) => Packing::Full,
        None => Packing::Bound,
    }
}

struct Search<'a> {
    items: &'a [Amounts],
    rest: &'a [Amounts],
    nics: Vec<u64>,
    free: Vec<Amounts>,
    placed: Vec<usize>,
    rule: NicRule,
    dims: usize,
    visited: u64,
    budget: u64,
}

impl Search<'_> {
    /// Places item `i` and the ones after it; `None` when the budget ran out.
    fn dfs(&mut self, i: usize) -> Option<bool> {
        let Some(item) = self.items.get(i).copied() else {
            return Some(true);
        };
        self.visited += 1;
        if self.visited > self.budget {
            return None;
        }
        for k in 0..self.dims {
            let free = self.free.iter().map(|b| b[k]).fold(0, u64::saturating_add);
            if free < self.rest[i][k] {
                return Some(false);
            }
        }
        // An identical pod before this one took node placed[i - 1]: this one goes there or
        // later (any packing can be reordered so).
        let start = match i.checked_sub(1) {
            Some(p) if self.items[p] == item => self.placed[p],
            _ => 0,
        };
        let mut tried: Vec<(Amounts, u64)> = Vec::new();
        for j in start..self.free.len() {
            if !fits(&self.free[j], self.nics[j], &item, self.rule) {
                continue;
            }
            // Nodes in the same state are interchangeable for what is left to place.
            let state = (self.free[j], self.nics[j]);
            if tried.contains(&state) {
                continue;
            }
            tried.push(state);
            for (f, x) in self.free[j].iter_mut().zip(item) {
                *f = f.saturating_sub(x);
            }
            self.placed[i] = j;
            let found = self.dfs(i + 1);
            self.free[j] = state.0;
            match found {
                Some(false) => {}
                other => return other,
            }
        }
        Some(false)
    }
}

/// Of the pods a strategy refused on `wl` (`admitted`: the 1-based steps of the `add` events
/// it admitted), how many fit `bins` together with every pod the strategy was running then,
/// each moved where the packing wants it: refusals of placement (where the pods sat), not of
/// capacity. Free of drift: each check is on the strategy's own running pods. Returns that
/// count and the checks that reached the bound (counted as not fitting).
pub fn refusals_that_fit(
    bins: &[Amounts],
    wl: &Workload,
    admitted: &BTreeSet<usize>,
) -> (usize, usize) {
    let mut running: BTreeMap<&str, Amounts> = BTreeMap::new();
    let (mut fit, mut bound) = (0, 0);
    for (i, ev) in wl.events.iter().enumerate() {
        if let Some(name) = &ev.add {
            let Some(pod) = wl.pods.iter().find(|p| &p.name == name) else {
                continue;
            };
            if admitted.contains(&(i + 1)) {
                running.insert(name, demand(pod));
                continue;
            }
            let mut items: Vec<Amounts> = running.values().copied().collect();
            items.push(demand(pod));
            match pack(bins, &items, NicRule::Shared, SEARCH_BOUND) {
                Packing::Fits => fit += 1,
                Packing::Full => {}
                Packing::Bound => bound += 1,
            }
        } else if let Some(name) = &ev.remove {
            running.remove(name.as_str());
        }
    }
    (fit, bound)
}

#[cfg(test)]
#[path = "repack_tests.rs"]
mod tests;
