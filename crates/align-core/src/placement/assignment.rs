//! What a container was given: the decision the allocator records, persists in the state file
//! and reports (logs, `simulate`, the decision annotation, metrics).
//!
//! Below the ledger, which records these: a plain value, built by the allocator and read by
//! everyone else, so it imports nothing that decides.

use serde::{Deserialize, Serialize};

use super::device_map::{DeviceMap, Held};
use super::hugepages::HugePagesHeld;
use super::policy::{MemPolicy, Policy};
use super::scheduler::Scheduler;
use crate::topology::{CpuSet, NodeSet, Topology};

/// A memory policy and the nodes it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPolicy {
    /// The mode.
    pub mode: MemPolicy,
    /// The nodes (`preferred-many`: the CPU nodes' memory, before the memory-only ones).
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub nodes: NodeSet,
}

impl MemoryPolicy {
    /// The policy of `mode` for a container given memory nodes `mems` and CPU nodes
    /// `cpu_nodes` on `topo`; `None` for `none` or when it has no memory node.
    pub fn for_container(
        mode: MemPolicy,
        topo: &Topology,
        mems: &NodeSet,
        cpu_nodes: &NodeSet,
    ) -> Option<Self> {
        use MemPolicy as M;
        let nodes = match mode {
            M::None => return None,
            // With memory-only nodes in `mems` (HBM, CXL), the CPU nodes' own memory is what a
            // thread should fill first; the kernel falls back to the rest.
            M::PreferredMany => {
                let own = topo.memory_nodes_for(cpu_nodes).intersection(mems);
                if own.is_empty() {
                    mems.clone()
                } else {
                    own
                }
            }
            M::Bind | M::Interleave | M::WeightedInterleave => mems.clone(),
        };
        (!nodes.is_empty()).then_some(Self { mode, nodes })
    }
}

/// What a container was given. Persisted in the state file, so fields only grow.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// Runtime container id.
    pub container_id: String,
    /// Container name.
    pub container_name: String,
    /// Pod UID.
    pub pod_uid: String,
    /// Pod namespace/name, for messages and metrics.
    pub pod_name: String,
    /// CPUs the container may run on.
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub cpus: CpuSet,
    /// Whether `cpus` are exclusively this container's (else they are the shared pool at the
    /// time of the decision, and follow the pool as it changes).
    pub exclusive: bool,
    /// Memory nodes (cpuset.mems).
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub mems: NodeSet,
    /// NUMA nodes the decision aligned on.
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub numa_nodes: NodeSet,
    /// Memory accounted against `numa_nodes` (bytes).
    pub memory_bytes: u64,
    /// GPUs chosen, as PCI bus ids in sysfs form.
    pub gpus: Vec<String>,
    /// NICs chosen, by name.
    pub nics: Vec<String>,
    /// GPUs used but not held alone (see [`Request::shared_gpus`](super::Request::shared_gpus)); not in the exclusive GPU
    /// ledger, never remapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_gpus: Vec<String>,
    /// The GPUs of `gpus` nri-align chose rather than the device plugin (a `remap`, or a count
    /// asked by annotation): the kubelet believes them free, so a later allocation of one that
    /// the runtime will give whatever nri-align says is refused, not shared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chosen_gpus: Vec<String>,
    /// The generic devices aligned to (PCI bus ids, see [`Request::generic_devices`](super::Request::generic_devices)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generic_devices: Vec<String>,
    /// Policy the decision was made under.
    pub policy: Policy,
    /// Whether every resource ended up on the chosen node set.
    pub aligned: bool,
    /// One line on why (shown in logs, `simulate`, the decision annotation).
    pub reason: String,
    /// Whether the scheduler's choice was honoured, for a pod that carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_choice: Option<ChoiceOutcome>,
    /// The memory policy the container starts with, over which nodes (`mempolicy`); `None`
    /// for the kernel's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mempolicy: Option<MemoryPolicy>,
    /// Each GPU's and NIC's CPUs and memory nodes, as the container's env gives them
    /// ([`DeviceMap`]); empty for a container without devices
    /// and in records written before the map existed.
    #[serde(default, skip_serializing_if = "DeviceMap::is_empty")]
    pub device_map: DeviceMap,
    /// Huge pages held, per node and size; every node named is in `mems`. Empty in records
    /// written before huge pages were accounted (they hold none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepages: Vec<HugePagesHeld>,
}

/// How a decision for a pod with a scheduler's choice ended; kept on the assignment (logs,
/// the decision record, the outcome metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChoiceOutcome {
    /// Who chose.
    pub scheduler: Scheduler,
    /// Placed where the scheduler said (else `scheduler_choice: preferred` placed it by the
    /// node's own search).
    pub honoured: bool,
}

impl ChoiceOutcome {
    /// The metric's outcome label.
    pub fn label(&self) -> &'static str {
        if self.honoured {
            "honoured"
        } else {
            "overridden"
        }
    }
}

impl DeviceMap {
    /// The map of decision `a` on `topo`.
    pub fn of(topo: &Topology, a: &Assignment) -> DeviceMap {
        DeviceMap::of_held(
            topo,
            &Held {
                gpus: &a.gpus,
                nics: &a.nics,
                cpus: &a.cpus,
                mems: &a.mems,
            },
        )
    }
}
