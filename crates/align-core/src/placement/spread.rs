//! How a container's exclusive CPUs split over the NUMA nodes it was given (`cpu_spread`).
//!
//! The node set is chosen first (the search in `choose`); this module only says how many of
//! the CPUs each of those nodes gives. `pack` fills the first node before the next (the
//! placement before this setting existed). `by-device` gives each node holding the container's
//! devices (GPUs, NICs, generic PCI devices) a share in proportion to the devices there, so a
//! job holding GPUs on both sockets gets CPUs next to each GPU; `even` gives every node of the
//! set the same weight. The kubelet's counterpart is the CPU manager's
//! `distribute-cpus-across-numa` option (an even split).
//!
//! The share rule, for `k` CPUs, node `i` holding `w_i` of `W` devices: node `i` gets at least
//! `⌊k·w_i/W⌋ − step` CPUs (`step` = hardware threads per core) whenever it has that many free.
//! CPUs are handed out one core (`step` CPUs) at a time to the node furthest below its exact
//! share `k·w_i/W`, so shares are whole cores but at the edges; the CPUs the device nodes cannot
//! hold go to the other nodes of the set, closest to the devices first.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use super::cpus;
use super::ledger::Ledger;
use super::numa::Cap;
use super::policy::CpuSpread;
use super::resolve::Resolved;

/// How many CPUs each node of a set gives, or `None` to fill the nodes in order (`pack`, and
/// `by-device` where the devices sit on fewer than two of the nodes: every single-node and
/// CPU-only container places as it did before the setting existed).
///
/// `caps[j]`: CPUs node `j` of the set can give; `weights[j]`: its devices (with `even`, every
/// node with capacity weighs 1); `closeness[j]`: how far node `j` is from the devices (lower is
/// closer), for the CPUs the weighted nodes cannot hold. `None` too when the set cannot hold
/// `k` (the caller's fill reports that as it always has).
pub fn shares(
    mode: CpuSpread,
    caps: &[u32],
    weights: &[u32],
    closeness: &[u64],
    k: u32,
    step: u32,
) -> Option<Vec<u32>> {
    let weights: Vec<u64> = match mode {
        CpuSpread::Pack => return None,
        CpuSpread::Even => caps.iter().map(|c| u64::from(*c > 0)).collect(),
        CpuSpread::ByDevice => weights.iter().map(|w| u64::from(*w)).collect(),
    };
    if weights.iter().filter(|w| **w > 0).count() < 2 {
        return None;
    }
    let total: u64 = caps.iter().map(|c| u64::from(*c)).sum();
    if total < u64::from(k) {
        return None;
    }
    let mut out = apportion(caps, &weights, k, step.max(1));
    let mut left = k - out.iter().sum::<u32>();
    // What the weighted nodes cannot hold: the other nodes, closest to the devices first.
    let mut rest: Vec<usize> = (0..caps.len()).filter(|j| weights[*j] == 0).collect();
    rest.sort_by_key(|j| (closeness.get(*j).copied().unwrap_or(u64::MAX), *j));
    for j in rest {
        let take = left.min(caps[j] - out[j]);
        out[j] += take;
        left -= take;
    }
    (left == 0).then_some(out)
}

/// The split of a resolved exclusive request over the chosen `nodes` (indices, in the search's
/// order) with GPUs `gpus` and NICs `nics`, under its `cpu_spread`; `None` to fill in order.
/// Every device counts once, on its node's CPU node (a GPU reporting its HBM node counts on the
/// closest node with CPUs), or on the chosen node closest to it when the set does not hold it;
/// a device whose node is unknown counts nowhere and is logged once.
pub(super) fn node_shares(
    ledger: &Ledger,
    r: &Resolved,
    nodes: &[usize],
    gpus: &[usize],
    nics: &[usize],
    caps: &[Cap],
) -> Option<Vec<u32>> {
    if r.eff.cpu_spread == CpuSpread::Pack || nodes.len() < 2 {
        return None;
    }
    let topo = ledger.topo();
    let id = |i: usize| topo.numa_nodes.get(i).map_or(u32::MAX, |n| n.id);
    let mut weights = vec![0u32; nodes.len()];
    let mut count = |node: Option<usize>, name: &str| match node {
        Some(i) => {
            let at = nodes.iter().position(|j| *j == i).or_else(|| {
                (0..nodes.len()).min_by_key(|p| (topo.distance(id(i), id(nodes[*p])), *p))
            });
            if let Some(p) = at {
                weights[p] += 1;
            }
        }
        None => note_unknown_node(name),
    };
    for g in gpus.iter().chain(&r.shared_gpus) {
        if let Some(gpu) = topo.gpus.get(*g) {
            count(ledger.gpu_node(*g), &gpu.pci_bus_id);
        }
    }
    for x in nics {
        if let Some(nic) = topo.nics.get(*x) {
            count(ledger.nic_node(*x), &nic.name);
        }
    }
    for (name, node) in &r.generic_nodes {
        count(*node, name);
    }
    let closeness: Vec<u64> = nodes
        .iter()
        .map(|i| {
            nodes
                .iter()
                .zip(&weights)
                .map(|(j, w)| u64::from(*w) * u64::from(topo.distance(id(*i), id(*j))))
                .sum()
        })
        .collect();
    let node_caps: Vec<u32> = nodes
        .iter()
        .map(|i| caps.get(*i).map_or(0, |c| c.cpu))
        .collect();
    let step = cpus::threads_per_core(topo);
    shares(
        r.eff.cpu_spread,
        &node_caps,
        &weights,
        &closeness,
        r.cpus,
        step,
    )
}

/// Up to `k` CPUs over the nodes with weight, `step` at a time, each step to the node furthest
/// below its exact share `k·w/W` that has room (ties: the earlier node of the set). Why the
/// rule holds: a node left more than `step` below its share with room to spare would have been
/// served before any step that took another node past its own share.
fn apportion(caps: &[u32], weights: &[u64], k: u32, step: u32) -> Vec<u32> {
    let total: u64 = weights.iter().sum();
    let mut out = vec![0u32; caps.len()];
    let mut left = k;
    while left > 0 {
        // Deficit scaled by W: k·w_j − out_j·W (signed: a node past its share is negative).
        let next = (0..caps.len())
            .filter(|j| weights[*j] > 0 && out[*j] < caps[*j])
            .max_by_key(|j| {
                let want = i128::from(k) * i128::from(weights[*j]);
                let have = i128::from(out[*j]) * i128::from(total);
                (want - have, std::cmp::Reverse(*j))
            });
        let Some(j) = next else { break };
        let take = step.min(left).min(caps[j] - out[j]);
        out[j] += take;
        left -= take;
    }
    out
}

/// Logs once per process that the device `name` has no known NUMA node (it then counts on no
/// node's share): a device that stays unplaced is said once, not at every decision.
pub fn note_unknown_node(name: &str) {
    static SEEN: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    let first = seen
        .lock()
        .map(|mut s| s.insert(name.to_string()))
        .unwrap_or(false);
    if first {
        tracing::warn!(
            device = %crate::untrusted::excerpt(name),
            "device has no known NUMA node (neither sysfs numa_node nor local_cpulist names one): \
             it counts on no node when CPUs are spread by device"
        );
    }
}

#[cfg(test)]
#[path = "spread_tests.rs"]
mod tests;
