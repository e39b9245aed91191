//! What one container asks for, and what it was given.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::policy::Policy;
use super::scheduler::{ChoiceOutcome, SchedulerChoice};
use crate::topology::{CpuSet, NodeSet};

/// The pod a container belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodInfo {
    /// Pod UID (the key for pod scope).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Pod annotations (policy.nri-align.io/... keys are read from here).
    pub annotations: BTreeMap<String, String>,
}

/// One container's request, derived from what NRI gives (resources, devices, env).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Runtime container id (the key of the allocation).
    pub container_id: String,
    /// Container name within the pod (for `container.<name>` annotations).
    pub container_name: String,
    /// Its pod.
    pub pod: PodInfo,
    /// CPU request in millicores (from shares; 0 when unknown).
    pub cpu_request_milli: u64,
    /// CPU limit in millicores (from quota/period), `None` when unlimited.
    pub cpu_limit_milli: Option<u64>,
    /// Memory limit in bytes, `None` when unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// GPUs a device plugin allocated, as PCI bus ids in sysfs form (from device nodes,
    /// CDI devices or NVIDIA_VISIBLE_DEVICES, resolved by the enforcement layer).
    pub allocated_gpus: Vec<String>,
    /// RDMA NICs a device plugin allocated, by interface/RDMA name as in `Topology::nics`.
    pub allocated_nics: Vec<String>,
    /// GPUs the container uses without holding them alone (PCI bus ids): the parent of a MIG
    /// device, a time-sliced or MPS replica, a GPU several containers were given, or one named
    /// only by an environment variable no authoritative source confirmed. Placement aligns to
    /// them and never records, remaps or refuses them as taken.
    #[serde(default)]
    pub shared_gpus: Vec<String>,
    /// Where the pod's scheduler said it goes (read from its annotations by
    /// [`scheduler::read`](super::scheduler::read)): a constraint of the search, or a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SchedulerChoice>,
    /// Other PCI devices the runtime gives the container whatever placement says (a CDI
    /// device that is neither a GPU nor an RDMA NIC the topology knows: an FPGA, another
    /// vendor's accelerator, a NIC without RDMA). Placement aligns the CPUs and memory to
    /// their NUMA nodes as to a GPU's; they are never held, chosen or remapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generic_devices: Vec<GenericDevice>,
    /// Huge pages per size (the container's `hugepage_limits`): held on the nodes placement
    /// chooses, which must have them free.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepages: Vec<super::hugepages::HugePageNeed>,
}

/// A PCI device placement aligns to without managing it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenericDevice {
    /// Where it was named (a CDI name `vendor/class=name`).
    pub name: String,
    /// PCI bus id in sysfs form, lowercase.
    pub pci_bus_id: String,
    /// Its NUMA node, `None` when the host does not say (then it constrains nothing).
    pub numa_node: Option<u32>,
    /// Root complex, then the bridges down to the function (for the record and reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_path: Vec<String>,
}

/// What a container was given. Persisted in the state file, so fields only grow.
/// A memory policy and the nodes it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPolicy {
    /// The mode.
    pub mode: super::policy::MemPolicy,
    /// The nodes (`preferred-many`: the CPU nodes' memory, before the memory-only ones).
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub nodes: NodeSet,
}

impl MemoryPolicy {
    /// The policy of `mode` for a container given memory nodes `mems` and CPU nodes
    /// `cpu_nodes` on `topo`; `None` for `none` or when it has no memory node.
    pub fn for_container(
        mode: super::policy::MemPolicy,
        topo: &crate::topology::Topology,
        mems: &NodeSet,
        cpu_nodes: &NodeSet,
    ) -> Option<Self> {
        use super::policy::MemPolicy as M;
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
    /// GPUs used but not held alone (see [`Request::shared_gpus`]); not in the exclusive GPU
    /// ledger, never remapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_gpus: Vec<String>,
    /// The GPUs of `gpus` nri-align chose rather than the device plugin (a `remap`, or a count
    /// asked by annotation): the kubelet believes them free, so a later allocation of one that
    /// the runtime will give whatever nri-align says is refused, not shared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chosen_gpus: Vec<String>,
    /// The generic devices aligned to (PCI bus ids, see [`Request::generic_devices`]).
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
    /// ([`DeviceMap`](super::device_map::DeviceMap)); empty for a container without devices
    /// and in records written before the map existed.
    #[serde(
        default,
        skip_serializing_if = "super::device_map::DeviceMap::is_empty"
    )]
    pub device_map: super::device_map::DeviceMap,
    /// Huge pages held, per node and size; every node named is in `mems`. Empty in records
    /// written before huge pages were accounted (they hold none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepages: Vec<super::hugepages::HugePagesHeld>,
}

/// What a whole pod asks for, when it is known before its first container is placed
/// (`simulate` knows the workload; the plugin can read the pod's resources). In pod scope the
/// first container pins the pod's node set, so that set is chosen to hold the whole pod when
/// one within the policy's width can; otherwise the first container is sized alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTotals {
    /// Exclusive CPUs of all the pod's containers.
    pub exclusive_cpus: u32,
    /// Memory limits of the containers that are bound to nodes, summed.
    pub memory_bytes: u64,
    /// GPUs of all containers.
    pub gpus: u32,
    /// NICs of all containers.
    pub nics: u32,
}

impl PodTotals {
    /// Totals of `reqs` by the kubelet's Guaranteed rule (annotations aside: a sizing hint).
    pub fn of(reqs: &[Request]) -> PodTotals {
        let mut t = PodTotals::default();
        for r in reqs {
            let m = r.cpu_request_milli;
            if r.cpu_limit_milli == Some(m) && m > 0 && m % 1000 == 0 {
                t.exclusive_cpus = t
                    .exclusive_cpus
                    .saturating_add(u32::try_from(m / 1000).unwrap_or(u32::MAX));
                t.memory_bytes = t
                    .memory_bytes
                    .saturating_add(r.memory_limit_bytes.unwrap_or(0));
            }
            t.gpus = t.gpus.saturating_add(r.allocated_gpus.len() as u32);
            t.nics = t.nics.saturating_add(r.allocated_nics.len() as u32);
        }
        t
    }
}
