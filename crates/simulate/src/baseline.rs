//! The kubelet-like baseline of `simulate --strategy kubelet` (Topology Manager as it decides): NUMA-affinity
//! hints per resource, the cross-product merge with "preferred" flags, the narrowest then
//! lowest-index mask, GPUs as the device manager and the NVIDIA device plugin pick them
//! ([`super::device_plugin`]: link-aware within the hint, or lowest index), RDMA NICs as the
//! device plugin of [`NicPlugin`] advertises them and the device manager picks them
//! ([`super::nic_plugin`]), CPUs by lowest id.
//! It shares the ledger with the allocator so free capacity is accounted the same way.

use std::collections::HashMap;
use std::sync::Arc;

use super::device_plugin::{kubelet_gpus, GpuChoice};
use super::kubelet_cpus::take_packed;
use super::nic_plugin::{NicPlugin, NicUnits, Unit};
use super::topology_manager::{
    masks_in_kubelet_order, Hint, Merge, TopologyManagerOptions, DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
};
use align_core::placement::error::{fmt_bytes, PlacementError};
use align_core::placement::gpus::LinkTable;
use align_core::placement::ledger::{Ledger, NodeFree};
use align_core::placement::nics;
use align_core::placement::numa::{self, Need};
use align_core::placement::policy::{PlacementConfig, Policy, Scope};
use align_core::placement::resolve::{resolve, Resolved};
use align_core::placement::PodTotals;
use align_core::placement::{Assignment, Request};
use align_core::topology::{Cpu, CpuSet, Topology};

/// The kubelet's default `max-allowable-numa-nodes`: `defaultMaxAllowableNUMANodes` in
/// kubernetes `pkg/kubelet/cm/topologymanager/topology_manager.go`. With more NUMA nodes than
/// this, `NewManager` fails ("unsupported on machines with more than 8 NUMA Nodes") and the
/// kubelet does not start with a Topology Manager policy other than `none`, unless the
/// `max-allowable-numa-nodes` policy option (beta from v1.31, GA in v1.35, KEP-4622) raises it.
pub const MAX_NUMA_NODES: usize = DEFAULT_MAX_ALLOWABLE_NUMA_NODES;

/// The host has more NUMA nodes than the kubelet accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the kubelet Topology Manager refuses hosts with more than {max} NUMA nodes \
     (max-allowable-numa-nodes); this host has {nodes}, CPU-less ones included"
)]
pub struct TooManyNodes {
    /// NUMA nodes on the host, memory-only ones included (the kubelet counts every node
    /// cadvisor lists).
    pub nodes: usize,
    /// The limit in force.
    pub max: usize,
}

/// The kubelet-like baseline.
#[derive(Debug, Clone)]
pub struct KubeletBaseline {
    ledger: Ledger,
    config: PlacementConfig,
    nodes: Vec<usize>,
    pod_masks: HashMap<String, u32>,
    pod_totals: HashMap<String, PodTotals>,
    links: LinkTable,
    gpu_choice: GpuChoice,
    nic_plugin: NicPlugin,
    nic_units: NicUnits,
    /// The CPU manager's `distribute-cpus-across-numa` option (see `distribute.rs`).
    distribute_cpus: bool,
    /// The Topology Manager policy options.
    options: TopologyManagerOptions,
    /// The memory manager's `Static` policy (else `None`, the kubelet's default).
    static_memory: bool,
}

/// The CPU nodes the baseline's masks run over, or why the kubelet refuses the host under a
/// `max-allowable-numa-nodes` of `max` (a value below the default is the default).
fn kubelet_nodes(topology: &Topology, max: usize) -> Result<Vec<usize>, TooManyNodes> {
    let max = max.max(MAX_NUMA_NODES);
    let all = topology.numa_nodes.len();
    if all > max {
        return Err(TooManyNodes { nodes: all, max });
    }
    let nodes: Vec<usize> = (0..all)
        .filter(|i| !topology.numa_nodes[*i].is_memory_only())
        .collect();
    // This model's masks are 32 bits wide.
    if nodes.len() > 31 {
        return Err(TooManyNodes {
            nodes: all,
            max: 31,
        });
    }
    Ok(nodes)
}

impl KubeletBaseline {
    /// A baseline over `topology` with the kubelet's defaults. Refuses more NUMA nodes than
    /// the kubelet accepts by default.
    pub fn new(topology: Arc<Topology>, config: PlacementConfig) -> Result<Self, TooManyNodes> {
        Self::with_max_numa_nodes(topology, config, MAX_NUMA_NODES)
    }

    /// A baseline whose kubelet sets `max-allowable-numa-nodes` to `max`.
    ///
    /// Every node counts, CPU-less ones included: the kubelet takes its NUMA nodes from
    /// cadvisor's machine info, which lists each online node (a GB200 tray in the driver's NUMA
    /// mode shows 34, kubernetes#135541). Hints are still computed over the CPU nodes only: with
    /// the limit raised, the kubelet's device manager of v1.34 enumerates masks over all nodes
    /// (2^34 on that tray, so it never reaches Allocate), which this model does not reproduce.
    pub fn with_max_numa_nodes(
        topology: Arc<Topology>,
        config: PlacementConfig,
        max: usize,
    ) -> Result<Self, TooManyNodes> {
        let nodes = kubelet_nodes(&topology, max)?;
        Ok(Self {
            links: LinkTable::new(&topology),
            gpu_choice: GpuChoice::default(),
            nic_plugin: NicPlugin::default(),
            nic_units: NicUnits::default(),
            distribute_cpus: false,
            options: TopologyManagerOptions {
                max_allowable_numa_nodes: max.max(MAX_NUMA_NODES),
                ..TopologyManagerOptions::default()
            },
            static_memory: false,
            ledger: Ledger::new(topology, config.reserved_cpus.clone()),
            config,
            nodes,
            pod_masks: HashMap::new(),
            pod_totals: HashMap::new(),
        })
    }

    /// The same baseline under the Topology Manager policy `options`; refused, as the kubelet
    /// refuses to start, when the host has more NUMA nodes than they allow.
    pub fn with_topology_manager_options(
        mut self,
        options: TopologyManagerOptions,
    ) -> Result<Self, TooManyNodes> {
        kubelet_nodes(self.ledger.topo(), options.max_allowable_numa_nodes)?;
        self.options = TopologyManagerOptions {
            max_allowable_numa_nodes: options.max_allowable_numa_nodes.max(MAX_NUMA_NODES),
            ..options
        };
        Ok(self)
    }

    /// The same baseline with the memory manager's `Static` policy (`on`) or its default,
    /// `None`, which gives the Topology Manager no memory hints.
    pub fn with_static_memory_manager(mut self, on: bool) -> Self {
        self.static_memory = on;
        self
    }

    /// What the kubelet runs with, for the headers: the Topology Manager policy options and
    /// the memory manager policy.
    pub fn describe(&self) -> String {
        format!(
            "Topology Manager options: {}; memory manager policy: {}",
            self.options.describe(),
            if self.static_memory { "Static" } else { "None" }
        )
    }

    /// The same baseline with its device plugin picking GPUs by `choice`.
    pub fn with_gpu_choice(mut self, choice: GpuChoice) -> Self {
        self.gpu_choice = choice;
        self
    }

    /// The same baseline with the CPU manager's `distribute-cpus-across-numa` option `on`.
    pub fn with_distribute_cpus(mut self, on: bool) -> Self {
        self.distribute_cpus = on;
        self
    }

    /// The same baseline with its RDMA NICs advertised by `plugin`.
    pub fn with_nic_plugin(mut self, plugin: NicPlugin) -> Self {
        self.nic_plugin = plugin;
        self
    }

    /// Live assignments.
    pub fn assignments(&self) -> impl Iterator<Item = &Assignment> {
        self.ledger.assignments()
    }

    /// Free capacity per node.
    pub fn free_by_node(&self) -> Vec<NodeFree> {
        self.ledger.free_by_node()
    }

    /// Forgets a container.
    pub fn release(&mut self, id: &str) -> Option<Assignment> {
        let a = self.ledger.release(id)?;
        self.nic_units.remove(id);
        if !self.ledger.assignments().any(|x| x.pod_uid == a.pod_uid) {
            self.pod_masks.remove(&a.pod_uid);
            self.pod_totals.remove(&a.pod_uid);
        }
        Some(a)
    }

    fn full(&self) -> u32 {
        (1u32 << self.nodes.len()) - 1
    }

    fn mask_nodes(&self, mask: u32) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|b| mask & (1 << b) != 0)
            .map(|b| self.nodes[b])
            .collect()
    }

    /// Hints of one resource, in the order the kubelet enumerates masks: masks whose free
    /// amount holds `ask`, preferred when as narrow as the total amounts (`total`, every unit
    /// of the node, reserved CPUs and devices in use included) allow. Empty when none holds it
    /// (the kubelet's "no possible NUMA affinities").
    fn hints(
        &self,
        ask: u64,
        free: impl Fn(usize) -> u64,
        total: impl Fn(usize) -> u64,
    ) -> Vec<Hint> {
        // Saturating: memory sizes come from the topology source and may be anything.
        let sum = |m: u32, f: &dyn Fn(usize) -> u64| {
            self.mask_nodes(m)
                .into_iter()
                .map(f)
                .fold(0, u64::saturating_add)
        };
        let masks = masks_in_kubelet_order(self.nodes.len());
        let min_width = masks
            .iter()
            .filter(|m| sum(**m, &total) >= ask)
            .map(|m| m.count_ones())
            .min()
            .unwrap_or(u32::MAX);
        masks
            .into_iter()
            .filter(|m| sum(*m, &free) >= ask)
            .map(|m| (m, m.count_ones() == min_width))
            .collect()
    }

    /// What pod `uid` asks for in all: in pod scope the kubelet computes the pod's hints from
    /// the summed requests of its containers.
    pub fn expect_pod(&mut self, uid: &str, totals: PodTotals) {
        self.pod_totals.insert(uid.to_string(), totals);
    }

    /// Drops what [`KubeletBaseline::expect_pod`] said about pod `uid`.
    pub fn forget_pod(&mut self, uid: &str) {
        self.pod_totals.remove(uid);
    }

    /// Decides and records.
    pub fn place(&mut self, req: &Request) -> Result<Assignment, PlacementError> {
        let own = resolve(&self.ledger, &self.config, req)?;
        let r = self.sized_for_hints(req, &own);
        let policy = r.eff.policy;
        let pinned = (r.eff.scope == Scope::Pod)
            .then(|| self.pod_masks.get(&req.pod.uid).copied())
            .flatten();
        let (mask, preferred) = match pinned {
            Some(m) => (m, true),
            None if policy == Policy::None => (self.full(), false),
            None => self.merge(&self.providers(&r), policy == Policy::SingleNumaNode),
        };
        if matches!(policy, Policy::Restricted | Policy::SingleNumaNode) && !preferred {
            return Err(self.refusal(&r));
        }
        let (a, units) = self.allocate(req, &own, mask, preferred && policy != Policy::None)?;
        let split = if a.exclusive && policy != Policy::None {
            let order = self.mask_nodes(mask);
            self.ledger
                .split_memory(&order, own.memory)
                .or_else(|| self.ledger.split_memory(&self.nodes, own.memory))
                .ok_or_else(|| PlacementError::Insufficient {
                    container: own.who.clone(),
                    resource: "memory".into(),
                    asked: fmt_bytes(own.memory),
                    free: "less".into(),
                })?
        } else {
            Vec::new()
        };
        self.ledger.record(a.clone(), split)?;
        if !units.is_empty() {
            self.nic_units.insert(a.container_id.clone(), units);
        }
        if own.exclusive || own.gpu_count > 0 {
            self.pod_masks.entry(a.pod_uid.clone()).or_insert(mask);
        }
        Ok(a)
    }

    /// The amounts the hints are computed for: in pod scope, the first container's hints are
    /// the pod's (its summed requests); the mask then pins every container of the pod. The
    /// amounts allocated stay the container's own.
    fn sized_for_hints(&self, req: &Request, own: &Resolved) -> Resolved {
        let mut r = own.clone();
        let pod_first = r.eff.scope == Scope::Pod && !self.pod_masks.contains_key(&req.pod.uid);
        if let Some(t) = pod_first
            .then(|| self.pod_totals.get(&req.pod.uid))
            .flatten()
        {
            if r.exclusive {
                r.cpus = r.cpus.max(t.exclusive_cpus);
                r.memory = r.memory.max(t.memory_bytes);
            }
            r.gpu_count = r.gpu_count.max(t.gpus as usize);
            r.nic_count = r.nic_count.max(t.nics as usize);
        }
        r
    }

    /// The Topology Manager's merge of `providers` under this baseline's options.
    fn merge(&self, providers: &[Vec<Hint>], single: bool) -> Hint {
        let topo = self.ledger.topo();
        let distances: Vec<Vec<u64>> = self
            .nodes
            .iter()
            .map(|i| {
                let row = &topo.numa_nodes[*i].distances;
                self.nodes
                    .iter()
                    .map(|j| row.get(*j).copied().map_or(0, u64::from))
                    .collect()
            })
            .collect();
        Merge {
            providers,
            bits: self.nodes.len(),
            distances: &distances,
            single,
            prefer_closest: self.options.prefer_closest_numa_nodes,
        }
        .best()
    }

    /// Every hint provider's hints for `r`: the CPU manager's (exclusive CPUs), the memory
    /// manager's (its `Static` policy only), the device manager's per device resource. A
    /// provider without preference (the memory manager's `None`, a device pool without NUMA
    /// nodes) gives none.
    fn providers(&self, r: &Resolved) -> Vec<Vec<Hint>> {
        let topo = self.ledger.topo();
        let mut providers: Vec<Vec<Hint>> = Vec::new();
        if r.exclusive {
            let free_cpus = self.ledger.free_cpus();
            let cpus = |i: usize| topo.numa_nodes[i].cpus.intersection_len(&free_cpus) as u64;
            // The CPU manager's minimal width counts every CPU of the node, reserved ones too.
            let total = |i: usize| topo.numa_nodes[i].cpus.len() as u64;
            providers.push(self.hints(r.cpus as u64, cpus, total));
            if r.memory > 0 && self.static_memory {
                let total = |i: usize| topo.numa_nodes[i].memory_bytes;
                providers.push(self.hints(r.memory, |i| self.ledger.free_mem(i), total));
            }
        }
        if r.gpu_count > 0 {
            let free = self.ledger.free_gpus();
            let on = |i: usize, set: &[usize]| {
                set.iter()
                    .filter(|g| self.ledger.gpu_node(**g) == Some(i))
                    .count() as u64
            };
            let all: Vec<usize> = (0..topo.gpus.len()).collect();
            providers.push(self.hints(r.gpu_count as u64, |i| on(i, &free), |i| on(i, &all)));
        }
        if r.nic_count > 0 {
            providers.extend(self.nic_hints(r.nic_count as u64));
        }
        providers
    }

    /// The device manager's hints for the RDMA NICs, as the NIC plugin advertises them.
    fn nic_hints(&self, count: u64) -> Option<Vec<Hint>> {
        let el = nics::eligible(&self.ledger);
        match self.nic_plugin {
            NicPlugin::PerNic => {
                let on = |i: usize, used_ok: bool| {
                    el.iter()
                        .filter(|x| {
                            self.ledger.nic_node(**x) == Some(i)
                                && (used_ok || self.ledger.nic_users(**x) == 0)
                        })
                        .count() as u64
                };
                Some(self.hints(count, |i| on(i, false), |i| on(i, true)))
            }
            // VFs on NIC nodes; a pool none of whose VFs has a node gives no hint (nil).
            NicPlugin::Sriov { vfs_per_pf } => {
                if !el.iter().any(|x| self.ledger.nic_node(*x).is_some()) {
                    return None;
                }
                let on = |i: usize, all: bool| {
                    el.iter()
                        .filter(|x| self.ledger.nic_node(**x) == Some(i))
                        .map(|x| {
                            if all {
                                u64::from(vfs_per_pf)
                            } else {
                                self.nic_units.free_vfs(*x, vfs_per_pf).len() as u64
                            }
                        })
                        .sum::<u64>()
                };
                Some(self.hints(count, |i| on(i, false), |i| on(i, true)))
            }
            // The shared plugin's units have no NUMA node: no hint, no preference.
            NicPlugin::Shared { .. } => None,
        }
    }

    /// The TopologyAffinityError of restricted and single-numa-node: what the node closest to
    /// holding the request had, measured as the engine does, so the two strategies' messages
    /// compare.
    fn refusal(&self, r: &Resolved) -> PlacementError {
        let need = Need {
            cpus: if r.exclusive { r.cpus } else { 0 },
            whole: self.config.full_pcpus_only,
            memory: r.memory,
            gpus: r.gpu_count as u32,
            nics: r.nic_count as u32,
            shared: false,
            hugepages: r.hugepages.clone(),
        };
        let caps = numa::caps(&self.ledger, self.config.full_pcpus_only);
        let best = numa::best_offer(&caps, &vec![true; caps.len()], &need);
        PlacementError::Unalignable {
            container: r.who.clone(),
            policy: r.eff.policy,
            what: "resources".into(),
            shape: "a preferred NUMA affinity (TopologyAffinityError)".into(),
            asked: Box::new(align_core::placement::error::Ask {
                cpus: need.cpus,
                memory_bytes: need.memory,
                gpus: need.gpus,
                nics: need.nics,
                hugepages: need.hugepages.clone(),
            }),
            best: Box::new(best),
            suggestion: "the kubelet rejects the pod; its replacement may loop on this node".into(),
        }
    }

    fn allocate(
        &self,
        req: &Request,
        r: &Resolved,
        mask: u32,
        preferred: bool,
    ) -> Result<(Assignment, Vec<Unit>), PlacementError> {
        let topo = self.ledger.topo();
        let in_mask = self.mask_nodes(mask);
        let local_cpus: CpuSet = in_mask
            .iter()
            .fold(CpuSet::new(), |acc, i| acc.union(&topo.numa_nodes[*i].cpus));
        let mut a = req.blank_assignment(r.exclusive, r.eff.policy);
        let on_mask = |n: Option<usize>| n.is_some_and(|i| in_mask.contains(&i));
        if r.exclusive {
            let free = self.ledger.free_cpus();
            // The static policy: the hint's CPUs first, then the rest, each by its take.
            let aligned = free.intersection(&local_cpus);
            let mut cpus = self.take(&aligned, r.cpus.min(aligned.len() as u32));
            if (cpus.len() as u32) < r.cpus {
                let rest = free.difference(&cpus);
                cpus.extend_from(&self.take(&rest, r.cpus - cpus.len() as u32));
            }
            if (cpus.len() as u32) < r.cpus {
                return Err(PlacementError::Insufficient {
                    container: r.who.clone(),
                    resource: "cpu".into(),
                    asked: r.cpus.to_string(),
                    free: free.len().to_string(),
                });
            }
            a.cpus = cpus;
            a.mems = self.ledger.ids(&in_mask);
            a.numa_nodes = a.mems.clone();
            a.memory_bytes = r.memory;
        } else {
            a.cpus = self.ledger.shared_pool();
            a.mems = topo.cpu_nodes();
        }
        let free = self.ledger.free_gpus();
        let g = kubelet_gpus(
            &self.links,
            &free,
            |x| self.ledger.gpu_node(x).map(|n| in_mask.contains(&n)),
            r.gpu_count,
            self.gpu_choice,
        );
        if g.len() < r.gpu_count {
            return Err(PlacementError::Insufficient {
                container: r.who.clone(),
                resource: "gpu".into(),
                asked: r.gpu_count.to_string(),
                free: free.len().to_string(),
            });
        }
        let (n, units) = self.nic_units.pick(
            self.nic_plugin,
            &self.ledger,
            (&r.who, &req.container_id),
            r.nic_count,
            &in_mask,
        )?;
        // The shared plugin's HCAs carry no NUMA node: the Topology Manager aligns none of
        // them, and the container sees every one (alignment is judged without them).
        let nics_aligned = matches!(self.nic_plugin, NicPlugin::Shared { .. })
            || n.iter().all(|x| on_mask(self.ledger.nic_node(*x)));
        a.aligned = preferred
            && g.iter().all(|x| on_mask(self.ledger.gpu_node(*x)))
            && nics_aligned
            && (!r.exclusive || a.cpus.is_subset(&local_cpus));
        a.gpus = g.iter().map(|x| topo.gpus[*x].pci_bus_id.clone()).collect();
        a.nics = n.iter().map(|x| topo.nics[*x].name.clone()).collect();
        a.reason = format!(
            "kubelet: hint {} ({})",
            self.ledger.ids(&in_mask),
            if preferred {
                "preferred"
            } else {
                "not preferred"
            }
        );
        Ok((a, units))
    }
}

impl KubeletBaseline {
    /// The CPU manager's `takeByTopology`: distributed over NUMA nodes with
    /// `distribute-cpus-across-numa` (CPU groups of a core under `full-pcpus-only`), else
    /// packed ([`take_packed`]). Fewer than `k` when `avail` has fewer.
    fn take(&self, avail: &CpuSet, k: u32) -> CpuSet {
        let topo = self.ledger.topo();
        let packed = |a: &CpuSet, n: u32| take_packed(topo, a, n).unwrap_or_default();
        if self.distribute_cpus {
            let group = if self.config.full_pcpus_only {
                align_core::placement::cpus::threads_per_core(topo)
            } else {
                1
            };
            if let Some(c) = super::distribute::take_distributed(topo, avail, k, group, packed) {
                return c;
            }
        }
        take_packed(topo, avail, k).unwrap_or_default()
    }
}

/// The CPUs a kubelet with the static CPU manager policy reserves for `count` CPUs of
/// kube-reserved plus system-reserved: whole cores from the lowest-numbered one, as its
/// topology-aware take does on an idle node. The static policy refuses to start with none
/// (the shared pool could then empty), so a real node always has some; nri-align and the
/// kubelet baseline both keep them out of exclusive allocation.
pub fn kubelet_reserved(topo: &Topology, count: usize) -> CpuSet {
    let mut reserved = CpuSet::new();
    for first in &topo.cpus {
        if reserved.len() >= count {
            break;
        }
        let core = |c: &&Cpu| c.package == first.package && c.core == first.core;
        for thread in topo.cpus.iter().filter(core) {
            reserved.insert(thread.id);
        }
    }
    reserved
}

#[cfg(test)]
#[path = "baseline_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "baseline_limit_tests.rs"]
mod limit_tests;

#[cfg(test)]
#[path = "baseline_kubelet_tests.rs"]
mod kubelet_tests;
