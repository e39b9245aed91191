//! Containers on a node where another NRI plugin owns some of their fields (`leave_to_others`
//! in the configuration): nri-align never sets those fields, neither in the creation's
//! adjustment nor in any `UpdateContainers`, because the runtime fails a creation two plugins
//! both adjust ("plugins ... both tried to set", containerd/nri `pkg/api/owners.go`).
//!
//! When the CPUs are another plugin's (kubernetes-sigs/dra-driver-cpu, whose NRI plugin sets
//! `cpuset.cpus` on every container: its claims' CPUs or its shared pool), nri-align does not
//! place the container's CPUs at all: it reads the CPUs the container gets, records them
//! (a claim's CPUs as held, so the ledger and NodeResourceTopology count them as taken) and
//! aligns what it still sets, the memory nodes, to them. Where the container gets its CPUs
//! from, first found wins:
//!
//! 1. the DRA CPU driver's CDI env `DRA_CPUSET_<claimUID>=<cpu list>`, one per claim
//!    (dra-driver-cpu `pkg/driver/cdi.go` writes it as the only edit of the claim's device in
//!    its CDI spec, `pkg/driver/dra_hooks.go` formats `prefix_claimUID=cpus`), read from the
//!    spec of a CDI device the container was given by name (the CRI field, `cdi.k8s.io/`
//!    annotations, the kubelet's PodResources claims), never from the container's env: a pod
//!    spec can carry any `DRA_CPUSET_` entry, and accounting CPUs nobody gave would take them
//!    from every other container;
//! 2. the cpuset in the container's spec as nri-align sees it: the runtime hands each plugin
//!    the container as the plugins before it adjusted it (containerd/nri
//!    `pkg/adaptation/result.go` writes each claimed field into the request's container), so a
//!    plugin with a lower index than nri-align's has set it by then;
//! 3. neither: nri-align runs before the other plugin. The container is recorded on every
//!    online CPU, shared, and its memory nodes follow its devices alone.
//!
//! CPUs seen only later (PostStartContainer shows what a plugin after nri-align set;
//! UpdateContainer and Synchronize what changed since) move the record ([`follow_cpus`]) and,
//! unless `mems` is left too, the container's memory nodes: a `cpuset.mems`-only update
//! ([`MemsUpdate`]) rides on the next response that can carry updates, as the shared pool's
//! do (nri-align never calls UpdateContainers, see `AlignPlugin`), and at PostStartContainer
//! the cgroup is also written at once, since no response may come soon.

use std::time::Instant;

use super::{log_decision, pod_name, CreateOutcome, Engine, EngineError, Placer};
use crate::config::LeftToOthers;
use crate::enforce::adjust::{Adjustment, CpusetUpdate, MemsUpdate};
use crate::enforce::container::{ContainerView, PodView, ResourcesView};
use crate::enforce::inputs::{Built, DeviceClaims};
use crate::enforce::state::Record;
use crate::placement::annotations::{effective, MemNodes};
use crate::placement::numa::attached_memory_nodes;
use crate::placement::{Assignment, PlacementConfig, Request};
use crate::topology::{CpuSet, NodeSet, Topology};

/// Where the CPUs of a container whose cpuset is another plugin's come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OthersCpus {
    /// A DRA CPU claim's (the union when it uses several): held by the container.
    Claimed(CpuSet),
    /// The cpuset set before nri-align was asked (the other plugin's shared pool, or the
    /// kubelet's): shared.
    Reported(CpuSet),
    /// Nothing says yet.
    Unknown,
}

/// The CPUs container `c` (whose devices `claims` read) gets from another plugin, as far as
/// the creation shows them: a DRA CPU claim's, from the CDI device the container was given
/// ([`crate::enforce::inputs::SpecDevices::dra_cpusets`]), else the cpuset the runtime shows.
pub fn others_cpus(topo: &Topology, c: &ContainerView, claims: &DeviceClaims) -> OthersCpus {
    let mut claimed: Option<CpuSet> = None;
    for value in &claims.spec.dra_cpusets {
        let Some(cpus) = super::reconcile::env_cpus(topo, value, &c.id) else {
            continue;
        };
        claimed
            .get_or_insert_with(CpuSet::default)
            .extend_from(&cpus);
    }
    if let Some(cpus) = claimed.filter(|s| !s.is_empty()) {
        return OthersCpus::Claimed(cpus);
    }
    match super::reconcile::runtime_cpus(topo, &c.resources.cpuset_cpus, &c.id) {
        Some(cpus) if !cpus.is_empty() => OthersCpus::Reported(cpus),
        _ => OthersCpus::Unknown,
    }
}

/// Takes out of `adj` what another plugin owns: the cpuset, the memory nodes, the device
/// nodes with their rules and the GPU env. An empty cpuset or memory list is not sent to the
/// runtime at all (the NRI adaptation claims a field only when its value is non-empty).
pub fn strip_left(adj: &mut Adjustment, left: LeftToOthers) {
    if left.cpus {
        adj.cpuset_cpus = CpuSet::new();
        adj.cpu_quota = None;
    }
    if left.mems {
        adj.cpuset_mems = NodeSet::new();
    }
    if left.devices {
        adj.add_devices.clear();
        adj.device_rules.clear();
        adj.remove_devices.clear();
        adj.env.remove("NVIDIA_VISIBLE_DEVICES");
        adj.env.remove("CUDA_VISIBLE_DEVICES");
    }
}

/// The NUMA nodes of the devices `req` was given (GPUs, RDMA NICs, generic devices) that the
/// host says a node of.
fn device_nodes(topo: &Topology, req: &Request) -> NodeSet {
    let gpus = req
        .allocated_gpus
        .iter()
        .chain(&req.shared_gpus)
        .filter_map(|bus| topo.gpus.iter().find(|g| g.pci_bus_id == *bus))
        .filter_map(|g| g.numa_node);
    let nics = req
        .allocated_nics
        .iter()
        .filter_map(|n| topo.nics.iter().find(|x| x.name == *n))
        .filter_map(|n| n.numa_node);
    let generic = req.generic_devices.iter().filter_map(|d| d.numa_node);
    gpus.chain(nics).chain(generic).collect()
}

/// The NUMA nodes CPUs `cpus` sit on.
fn cpu_nodes(topo: &Topology, cpus: &CpuSet) -> NodeSet {
    topo.numa_nodes
        .iter()
        .filter(|n| !n.cpus.is_disjoint(cpus))
        .map(|n| n.id)
        .collect()
}

/// The NUMA nodes of the devices an assignment names that the topology places (GPUs used
/// alone or shared, RDMA NICs).
fn assigned_device_nodes(topo: &Topology, a: &Assignment) -> NodeSet {
    let gpus = a
        .gpus
        .iter()
        .chain(&a.shared_gpus)
        .filter_map(|bus| topo.gpus.iter().find(|g| g.pci_bus_id == *bus))
        .filter_map(|g| g.numa_node);
    let nics = a
        .nics
        .iter()
        .filter_map(|n| topo.nics.iter().find(|x| x.name == *n))
        .filter_map(|n| n.numa_node);
    gpus.chain(nics).collect()
}

/// The memory nodes of NUMA nodes `nodes` under the container's `mems` setting, as the
/// allocator chooses them: each node's own memory (a node without memory is bound to its
/// nearest one), plus the attached memory-only nodes with `with-memory-only`.
pub fn mems_for(topo: &Topology, nodes: &NodeSet, mode: MemNodes) -> NodeSet {
    let mut mems = topo.memory_nodes_for(nodes);
    if mode == MemNodes::WithMemoryOnly {
        mems.extend_from(&attached_memory_nodes(topo, nodes));
    }
    mems
}

/// The `mems` setting of container `name` of a pod with `annotations`; the default where the
/// annotations do not parse (the creation already said why).
pub fn mem_mode(
    annotations: &std::collections::BTreeMap<String, String>,
    name: &str,
    config: &PlacementConfig,
) -> MemNodes {
    effective(annotations, name, config).map_or(MemNodes::CpuNodes, |e| e.mems)
}

/// The record of a container whose CPUs another plugin set, once CPUs `cpus` show after its
/// creation: those CPUs, its NUMA nodes theirs, its memory nodes theirs under `mode` (kept
/// when `mems_left`: another plugin owns them), aligned when its devices are on those nodes.
/// Held or shared as before; the caller falls back to shared when the CPUs cannot be held.
pub fn follow_cpus(
    topo: &Topology,
    old: &Assignment,
    cpus: CpuSet,
    mode: MemNodes,
    mems_left: bool,
) -> Assignment {
    let nodes = cpu_nodes(topo, &cpus);
    let mut a = old.clone();
    a.aligned = assigned_device_nodes(topo, old).is_subset(&nodes);
    if !mems_left {
        a.mems = mems_for(topo, &nodes, mode);
    }
    a.numa_nodes = nodes;
    a.cpus = cpus;
    a.reason = "cpus left to another plugin (seen after creation); memory nodes follow them".into();
    a
}

/// The decision for a container whose CPUs are another plugin's: those CPUs (held when a
/// claim gave them), memory nodes where they are (or where its devices are, when the CPUs are
/// not known yet), its devices as the request names them.
pub fn decision(
    topo: &Topology,
    policy: crate::placement::Policy,
    req: &Request,
    cpus: &OthersCpus,
    mode: MemNodes,
) -> Assignment {
    let devices = device_nodes(topo, req);
    let (set, exclusive, nodes, source) = match cpus {
        OthersCpus::Claimed(s) => (s.clone(), true, cpu_nodes(topo, s), "a DRA CPU claim"),
        OthersCpus::Reported(s) => (
            s.clone(),
            false,
            cpu_nodes(topo, s),
            "the cpuset set before nri-align",
        ),
        OthersCpus::Unknown => (topo.online_cpus(), false, devices.clone(), "not known yet"),
    };
    let aligned = devices.is_subset(&nodes);
    Assignment {
        container_id: req.container_id.clone(),
        container_name: req.container_name.clone(),
        pod_uid: req.pod.uid.clone(),
        pod_name: format!("{}/{}", req.pod.namespace, req.pod.name),
        cpus: set,
        exclusive,
        mems: mems_for(topo, &nodes, mode),
        numa_nodes: nodes,
        gpus: req.allocated_gpus.clone(),
        nics: req.allocated_nics.clone(),
        shared_gpus: req.shared_gpus.clone(),
        generic_devices: req
            .generic_devices
            .iter()
            .map(|d| d.pci_bus_id.clone())
            .collect(),
        policy,
        aligned,
        reason: format!("cpus left to another plugin ({source}); memory nodes follow them"),
        ..Assignment::default()
    }
}

/// Containers whose memory nodes moved after creation to follow CPUs another plugin set (or
/// a resize); their new `cpuset.mems` goes with the next response that can carry it. Owned by
/// this file.
#[derive(Debug, Default)]
pub(super) struct MovedMems(std::collections::BTreeSet<String>);

impl MovedMems {
    /// Container `id`'s memory nodes moved.
    pub(super) fn mark(&mut self, id: &str) {
        self.0.insert(id.to_string());
    }

    /// Container `id` is gone (or created anew).
    pub(super) fn forget(&mut self, id: &str) {
        self.0.remove(id);
    }

    fn has(&self, id: &str) -> bool {
        self.0.contains(id)
    }

    /// The marked containers, each once, in id order; none are left marked.
    fn take(&mut self) -> std::collections::BTreeSet<String> {
        std::mem::take(&mut self.0)
    }
}

impl<P: Placer> Engine<P> {
    /// Whether another plugin owns `cpuset.cpus`: then no cpuset update is ever sent.
    pub(super) fn cpus_left(&self) -> bool {
        self.config.leave_to_others.cpus
    }

    /// `updates`, or none when the cpuset is another plugin's.
    pub(super) fn own_updates(&self, updates: Vec<CpusetUpdate>) -> Vec<CpusetUpdate> {
        if self.cpus_left() {
            Vec::new()
        } else {
            updates
        }
    }

    /// A creation on a node whose cpusets are another plugin's: the container's CPUs are read
    /// ([`others_cpus`]), recorded, and its memory nodes aligned to them. A restarted
    /// container's predecessor goes first: its CPUs are whatever the other plugin gives now.
    pub(super) fn create_left_cpus(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        built: Built,
        started: Instant,
    ) -> Result<CreateOutcome, EngineError> {
        while let Some(old) = self.predecessor(pod, c) {
            self.drop_record(&old);
        }
        self.reuse_finished(pod, c);
        let req = &built.request;
        let topo = self.placer.topology();
        let cpus = others_cpus(topo, c, &built.devices);
        let mode = mem_mode(&pod.annotations, &c.name, &self.config.placement);
        let mut a = decision(topo, self.config.placement.policy, req, &cpus, mode);
        if !a.aligned {
            tracing::warn!(pod = %pod_name(pod), container = %c.name, cpus = %a.cpus, "the CPUs another plugin gave are not on the nodes of the container's devices");
        }
        let adjustment = self.adjustment_for(&a, c, &built.devices, started)?;
        if let Err(r) = self.placer.restore(a.clone()) {
            if !a.exclusive {
                self.count_rejection(&r.reason, started);
                return Err(EngineError::Rejected(r));
            }
            // Another container holds some of these CPUs (two containers of a pod sharing
            // one claim, or a record nri-align made before): counted shared, never refused,
            // since the other plugin decided and the runtime applies its choice.
            tracing::info!(pod = %pod_name(pod), container = %c.name, "claimed CPUs already held: recorded shared ({})", r.message);
            a.exclusive = false;
            self.placer
                .restore(a.clone())
                .inspect_err(|r| self.count_rejection(&r.reason, started))
                .map_err(EngineError::Rejected)?;
        }
        let rec = super::create::new_record(&a, pod, c, &adjustment, &built);
        self.doc.containers.insert(c.id.clone(), rec);
        let (updates, timing) = self.persist_and_follow_pool(&c.id, started);
        if let Some(m) = &self.metrics {
            m.admitted(&a.policy.to_string(), a.aligned, timing.took);
        }
        self.refresh_free();
        log_decision(pod, c, &a, timing, updates.len());
        Ok(CreateOutcome {
            adjustment,
            updates,
        })
    }

    /// A cpuset reported for container `c` of `pod` on a node whose cpusets are another
    /// plugin's (UpdateContainer's new resources, the container at PostStartContainer or
    /// Synchronize): nothing of the cpuset is sent; the record follows it (the other plugin's
    /// word), held as before when it still can be, and the memory nodes follow the CPUs
    /// ([`follow_cpus`]). When they move, and nri-align owns them, the container is marked
    /// for a `cpuset.mems` update ([`Engine::take_mems_updates`]).
    pub(super) fn follow_others_update(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        new: &ResourcesView,
    ) {
        let Some(rec) = self.doc.containers.get(&c.id).cloned() else {
            return;
        };
        let topo = self.placer.topology();
        let reported = super::reconcile::runtime_cpus(topo, &new.cpuset_cpus, &c.id);
        // The same CPUs can still be news: a container recorded before its CPUs were known
        // has its devices' nodes, not the CPUs', as its nodes.
        let Some(cpus) = reported.filter(|s| {
            !s.is_empty()
                && (*s != rec.assignment.cpus || cpu_nodes(topo, s) != rec.assignment.numa_nodes)
        }) else {
            return;
        };
        let mode = mem_mode(&pod.annotations, &c.name, &self.config.placement);
        let mems_left = self.config.leave_to_others.mems;
        let mut a = follow_cpus(topo, &rec.assignment, cpus, mode, mems_left);
        self.placer.release(&c.id);
        if self.placer.restore(a.clone()).is_err() {
            a.exclusive = false;
            if let Err(r) = self.placer.restore(a.clone()) {
                tracing::warn!(container = %c.id, "the cpuset another plugin set is not recorded: {}", r.message);
                if self.placer.restore(rec.assignment.clone()).is_err() {
                    self.doc.containers.remove(&c.id);
                    self.persist();
                }
                return;
            }
        }
        let mems_moved = !mems_left && !a.mems.is_empty() && a.mems != rec.assignment.mems;
        tracing::info!(container = %c.id, cpus = %a.cpus, mems = %a.mems, mems_moved, "cpuset set by another plugin recorded");
        if mems_moved {
            self.mems_moved.mark(&c.id);
        }
        let updated = Record {
            applied_cpus: a.cpus.clone(),
            assignment: a,
            ..rec
        };
        self.doc.containers.insert(c.id.clone(), updated);
        self.persist();
        self.refresh_free();
    }

    /// The memory nodes container `id` moved to after its creation and has not been sent yet
    /// (to write them to its cgroup at once where no response may come soon).
    pub fn moved_mems(&self, id: &str) -> Option<NodeSet> {
        if !self.mems_moved.has(id) {
            return None;
        }
        self.doc
            .containers
            .get(id)
            .map(|r| r.assignment.mems.clone())
    }

    /// The `cpuset.mems` updates waiting for a response, each once: the records' memory nodes
    /// now (a container that moved twice gets where it is). None when `mems` is left to
    /// another plugin, which may have been configured since they were marked.
    pub fn take_mems_updates(&mut self) -> Vec<MemsUpdate> {
        let moved = self.mems_moved.take();
        if self.config.leave_to_others.mems {
            return Vec::new();
        }
        moved
            .into_iter()
            .filter_map(|id| {
                let mems = self.doc.containers.get(&id)?.assignment.mems.clone();
                (!mems.is_empty()).then_some(MemsUpdate {
                    container_id: id,
                    mems,
                })
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "others_tests.rs"]
mod tests;
